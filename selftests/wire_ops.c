// SPDX-License-Identifier: GPL-2.0
/*
 * ATOMIC WRITE and FLUSH between two hosts, for make check's two-guest phase (check2.sh),
 * where no rdma-core tool posts them. The server (-d DEV -g GID_INDEX) registers 64 KiB with the global
 * flush right and waits; the client (-d DEV -g GID_INDEX -c SERVER) writes N words into it with ATOMIC
 * WRITE, flushes the range and the whole MR, reads the words back with an RDMA READ and
 * compares; then the server compares its own memory. The two exchange QP number, GID,
 * address and key over TCP port 18516. Exit status 0 when every completion and every word
 * is right.
 */
#include <getopt.h>
#include <netdb.h>
#include <sys/socket.h>
#include "rodp_verbs.h"

#define PORT 18516
#define LEN 65536
#define WORDS 16
/* Word i goes to offset OFF(i): spread over the first pages, 8-byte aligned. */
#define OFF(i) (64 + (i) * 1000 / 8 * 8)

struct info {
	uint32_t qpn, rkey;
	uint64_t addr;
	union ibv_gid gid;
};

static uint64_t word(int i)
{
	return 0x0123456789abcdefull * (i + 1) ^ 0x5a5a5a5a5a5a5a5aull;
}

static int fail(const char *what)
{
	fprintf(stderr, "wire_ops: %s: %s\n", what, strerror(errno));
	return 1;
}

/* The connected TCP socket to the peer: accepted (server) or connected to host. */
static int tcp(const char *host)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(PORT) };
	int one = 1, s = socket(AF_INET, SOCK_STREAM, 0), c;

	if (s < 0)
		return -1;
	if (host) {
		if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
			return -1;
		for (int i = 0; i < 100; i++) {
			if (!connect(s, (struct sockaddr *)&a, sizeof(a)))
				return s;
			usleep(100000);
		}
		return -1;
	}
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) || listen(s, 1))
		return -1;
	c = accept(s, NULL, NULL);
	close(s);
	return c;
}

static int xchg(int s, const struct info *mine, struct info *theirs)
{
	return write(s, mine, sizeof(*mine)) == sizeof(*mine) &&
	       read(s, theirs, sizeof(*theirs)) == sizeof(*theirs) ? 0 : -1;
}

/* Waits for one completion of wr_id with opcode op; 0 when it succeeded. */
static int wait_wc(struct ibv_cq *cq, uint64_t wr_id, int op, const char *what)
{
	struct ibv_wc wc;

	if (poll1(cq, &wc, 30000) != 1) {
		fprintf(stderr, "wire_ops: %s: no completion\n", what);
		return 1;
	}
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != wr_id || (int)wc.opcode != op) {
		fprintf(stderr, "wire_ops: %s: status %d (%s), wr_id %llu, opcode %d\n", what,
			wc.status, ibv_wc_status_str(wc.status), (unsigned long long)wc.wr_id,
			wc.opcode);
		return 1;
	}
	return 0;
}

static int client(struct ibv_qp *qp, struct ibv_cq *cq, uint8_t *buf, struct ibv_mr *mr,
		  const struct info *srv)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	int bad = 0;

	for (int i = 0; i < WORDS; i++) {
		if (post_atomic_write(qp, i, srv->rkey, srv->addr + OFF(i), word(i)))
			return fail("post atomic write");
		bad |= wait_wc(cq, i, IBV_WC_ATOMIC_WRITE, "atomic write");
	}
	if (post_flush(qp, 100, srv->rkey, srv->addr, 4096, FLUSH_GLOBAL, FLUSH_RANGE))
		return fail("post flush");
	bad |= wait_wc(cq, 100, WC_FLUSH, "flush (range)");
	if (post_flush(qp, 101, srv->rkey, srv->addr, 0, FLUSH_GLOBAL, FLUSH_MR))
		return fail("post flush");
	bad |= wait_wc(cq, 101, WC_FLUSH, "flush (MR)");
	/* Read the first pages back. */
	ibv_wr_start(x);
	x->wr_id = 102;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(x, srv->rkey, srv->addr);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf, OFF(WORDS));
	if (ibv_wr_complete(x))
		return fail("post read");
	bad |= wait_wc(cq, 102, IBV_WC_RDMA_READ, "read");
	for (int i = 0; i < WORDS; i++) {
		uint64_t v = word(i);

		if (memcmp(buf + OFF(i), &v, 8)) {
			fprintf(stderr, "wire_ops: word %d not read back\n", i);
			bad = 1;
		}
	}
	return bad;
}

int main(int argc, char **argv)
{
	const char *devname = NULL, *host = NULL;
	struct info mine, theirs;
	struct rc_opts o = rc_default;
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct dev d;
	uint8_t *buf;
	int c, s, bad = 0, gid_index = -1;

	while ((c = getopt(argc, argv, "d:g:c:")) != -1) {
		if (c == 'd')
			devname = optarg;
		else if (c == 'g')
			gid_index = atoi(optarg);
		else if (c == 'c')
			host = optarg;
		else
			return 2;
	}
	if (!devname)
		return 2;
	if (dev_open(&d, devname))
		return fail("open device");
	/* The RoCE v2 GID check2.sh found (rxe lists a v1 entry for each address first). */
	if (gid_index >= 0) {
		d.gid_index = gid_index;
		if (ibv_query_gid(d.ctx, 1, gid_index, &d.gid))
			return fail("query gid");
	}
	buf = aligned_alloc(4096, LEN);
	if (!buf)
		return fail("alloc");
	memset(buf, 0, LEN);
	cq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	if (!cq)
		return fail("create cq");
	qp = make_qp_ex(&d, cq);
	if (!qp)
		return fail("create qp");
	mr = ibv_reg_mr(d.pd, buf, LEN, ALL_ACCESS | ACCESS_FLUSH_GLOBAL);
	if (!mr)
		return fail("register MR");
	mine = (struct info){ .qpn = qp->qp_num, .rkey = mr->rkey, .addr = (uintptr_t)buf,
			      .gid = d.gid };
	s = tcp(host);
	if (s < 0 || xchg(s, &mine, &theirs))
		return fail("exchange");
	o.access = ALL_ACCESS | ACCESS_FLUSH_GLOBAL;
	if (rc_connect(qp, &d, theirs.qpn, &theirs.gid, &o))
		return fail("connect");
	/* Both ready before the client sends. */
	if (write(s, "r", 1) != 1 || read(s, &c, 1) != 1)
		return fail("sync");
	if (host) {
		bad = client(qp, cq, buf, mr, &theirs);
		if (write(s, bad ? "f" : "d", 1) != 1)
			return fail("report");
	} else {
		char r = 0;

		if (read(s, &r, 1) != 1 || r != 'd')
			return fail("client failed");
		for (int i = 0; i < WORDS; i++) {
			uint64_t v = word(i);

			if (memcmp(buf + OFF(i), &v, 8)) {
				fprintf(stderr, "wire_ops: word %d not in memory\n", i);
				bad = 1;
			}
		}
	}
	printf("wire_ops: %s: %d atomic writes, 2 flushes, 1 read: %s\n", host ? "client" :
	       "server", WORDS, bad ? "FAILED" : "ok");
	close(s);
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	dev_close(&d);
	free(buf);
	return bad;
}
