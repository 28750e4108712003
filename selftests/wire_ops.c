// SPDX-License-Identifier: GPL-2.0
/*
 * ATOMIC WRITE and FLUSH between two hosts, for make check's two-guest phase (check2.sh),
 * where no rdma-core tool posts them. The server (-d DEV -g GID_INDEX) registers 64 KiB with the global
 * flush right and waits; the client (-d DEV -g GID_INDEX -c SERVER) writes N words into it with ATOMIC
 * WRITE, flushes the range and the whole MR, reads the words back with an RDMA READ and
 * compares; then the server compares its own memory. The two exchange QP number, GID,
 * address and key over TCP port 18516. Exit status 0 when every completion and every word
 * is right.
 *
 * With -v on both sides, the peer vanishes instead: the client WRITEs 4 KiB (it must arrive),
 * then the server takes the netdev of its GID down for VANISH_S seconds; the client's next
 * WRITE must end in IBV_WC_RETRY_EXC_ERR, with the QP in the error state, no sooner than
 * retry_cnt + 1 timeouts and no later than four times that (IBTA lets the timer run up to four
 * times the QP's timeout) plus a second of slack for the emulated guests. The server takes its
 * link down with SIOCSIFFLAGS, so -v needs root (CAP_NET_ADMIN) on the server's side.
 *
 * With -m on both sides, UD multicast without rdma_cm: the server attaches a UD QP to the
 * group ::ffff:239.255.18.2 with ibv_attach_mcast alone (the device itself must make its
 * netdev join the IP group) and posts MC_N receives; the client sends MC_N datagrams to the
 * group (QP 0xffffff); the server checks each one's data and the GRH's source (the client's
 * GID) and destination (the group).
 *
 * With -s on both sides, a stream both ways at once: each side posts STREAM_N RDMA WRITEs of
 * STREAM_LEN bytes (unsignaled, one chain: the requester keeps many in flight) into the second
 * half of the peer's MR, with an RDMA READ of STREAM_LEN bytes after every eighth WRITE (from a
 * region of the peer's MR that holds a pattern nobody changes) and a FETCH_ADD of 1 after each
 * of the first STREAM_ATOMICS READs (on a counter in the peer's MR only this side adds to),
 * then a signaled SEND. Each side's SEND completing says the peer took every WRITE and answered
 * every READ and atomic (completions come in order): the READs' data and the atomics' original
 * values (0, 1, 2, ... over all rounds: a replayed duplicate must give the first answer again)
 * are checked; the peer's SEND arriving says, by RC's ordering, that its WRITEs are in place,
 * and each side then compares them word by word. -r ROUNDS repeats that with new data each
 * round (after both sides compared the last). Over check2's lossy link this is the long
 * transfer in both directions whose packets the transport must mend; each side finishes only
 * when its own SEND is acknowledged and the other's verdict arrived, so neither destroys its
 * QP while the other still waits for an acknowledgement.
 *
 * With -b on both sides, large messages both ways at once: each side RDMA WRITEs BIG_LEN bytes
 * (1,024 packets at path MTU 1024) into the peer's MR and SENDs the same BIG_LEN bytes into the
 * receive the peer posted, then compares what the peer wrote and sent, word by word; -r ROUNDS
 * repeats it with new data. The QP's timeout is BIG_TIMEOUT: check2.sh runs it over a link whose
 * queue is shallower than one such message, where a requester that sends a message's packets
 * back to back loses its tail at every try.
 *
 * With -x on both sides, an extended memory window across the wire (Documentation/xmw.rst):
 * the server (a rodp device) grants its MR non-contiguous binding and binds an INTERLEAVED
 * layout to a type 1 window at XBASE: XA_N 12-byte elements from a 2-D grid (1 KiB and 8 KiB
 * apart), two per cycle, with XB_N 8-byte elements 1 KiB apart, one per cycle (the grid runs
 * out first, the rest are the second entry's alone). The second entry goes through a window of
 * its own (nesting, depth 2): an inner window at XBASE_IN presents the 8-byte elements back to
 * back, and the outer entry takes them from there; the map is the same as without it. The
 * outer window's key and address go to the client,
 * which knows nothing of layouts (rxe does as well as rodp): it WRITEs the whole window in one
 * message, READs it back, adds 1 with FETCH_ADD at two window offsets that lie within one
 * element each (one of each entry), and last tries a FETCH_ADD whose 8 bytes span two elements, which must end in
 * IBV_WC_REM_INV_REQ_ERR. The server then compares its whole MR with the model of
 * rodp_xmw_model.h: every written byte where the layout puts it, nothing else touched.
 */
#include <getopt.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include "rodp_verbs.h"
#include <rodp-xmw.h>
#include "rodp_xmw_model.h"

#define PORT 18516
#define LEN 65536
#define WORDS 16
#define MC_N 8
#define MC_LEN 256
#define MC_QKEY 0x1e55ed
/* ::ffff:239.255.18.2, an organization-local IPv4 group (RFC 2365). */
static const union ibv_gid mc_group = {
	.raw = { [10] = 0xff, [11] = 0xff, 239, 255, 18, 2 }
};
#define VANISH_S 6
/* The client's QP in vanish mode: 4.096 us * 2^14 = 67 ms per try, 4 tries. */
#define VANISH_TIMEOUT 14
#define VANISH_RETRY 3
#define STREAM_N 48
#define STREAM_LEN 512
#define STREAM_READS (STREAM_N / 8)
#define STREAM_ATOMICS 4
/* Where the stream's READs land, the atomics' results, the pattern the peer READs, and the
 * counter the peer adds to: above the WRITEs' destination (LEN / 2 + STREAM_N * STREAM_LEN). */
#define READ_DST (LEN / 2 + STREAM_N * STREAM_LEN)
#define ATOMIC_DST (READ_DST + STREAM_READS * STREAM_LEN)
#define PATTERN (LEN - 4096)
#define PATTERN_LEN (STREAM_READS * STREAM_LEN)
#define COUNTER (LEN - 8)
#define BIG_LEN (1 << 20)
/*
 * 4.096 us * 2^19 = 2.1 s (rodp's timer stops at 2 s): 128 packets queued at 2 Mbit/s take
 * 0.55 s to drain, and each side's ACKs queue behind its own data.
 */
#define BIG_TIMEOUT 19
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

/* -x: the window's layout (see the comment at the top) and where it lives. */
#define XBASE 0x5a0000000000ULL
#define XBASE_IN 0x5b0000000000ULL
#define XA_N 64
#define XB_N 64
#define XTOTAL (XA_N * 12 + XB_N * 8)
/* FETCH_ADD at these window offsets: the first grid element's first 8 bytes, and the second
 * entry's first element (after two grid elements, 24 bytes); XSPAN's 8 bytes span the first
 * two grid elements. */
#define XADD0 0
#define XADD1 24
#define XSPAN 8

static struct layout xlayout(struct ibv_mr *mr, const uint8_t *buf)
{
	return (struct layout){ RODP_XMW_KIND_INTERLEAVED, 2, {
		xmw_ent(mr->lkey, (uintptr_t)buf, 12, 2, 2,
			(const __u64[][2]){ { 1024, 8 }, { 8192, XA_N / 8 } }),
		xmw_ent(mr->lkey, (uintptr_t)buf + 512, 8, 1, 1,
			(const __u64[][2]){ { 1024, XB_N } }) } };
}

/* The server's window over mr, bound through qp: its key in *rkey, the inner window (see the
 * comment at the top) in *in. */
static struct ibv_mw *xbind(struct dev *d, struct ibv_qp *qp, struct ibv_mr *mr,
			    const uint8_t *buf, uint32_t *rkey, struct ibv_mw **in)
{
	const unsigned int rights = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
				    IBV_ACCESS_REMOTE_ATOMIC;
	struct layout l = xlayout(mr, buf);
	struct ibv_mw *mw;
	uint64_t total = 0;
	int e;

	if ((e = rodp_xmw_grant_noncontig(mr))) {
		errno = e;
		return NULL;
	}
	*in = rodp_xmw_alloc_mw_ex(d->pd, IBV_MW_TYPE_1, 1);
	if (!*in)
		return NULL;
	e = rodp_xmw_bind_layout(qp, *in, XBASE_IN, rights, RODP_XMW_KIND_COMPOSITE, &l.e[1], 1,
				 &total);
	if (e || total != XB_N * 8) {
		fprintf(stderr, "wire_ops: bind the inner layout: %s\n", strerror(e));
		errno = e ? e : EINVAL;
		return NULL;
	}
	l.e[1] = xmw_ent((*in)->rkey, XBASE_IN, 8, 1, 1, (const __u64[][2]){ { 8, XB_N } });
	mw = rodp_xmw_alloc_mw_ex(d->pd, IBV_MW_TYPE_1, 2);
	if (!mw)
		return NULL;
	e = rodp_xmw_bind_layout(qp, mw, XBASE, rights, l.kind, l.e, l.n, &total);
	if (e || total != XTOTAL) {
		fprintf(stderr, "wire_ops: bind layout: %s, total %llu\n", strerror(e),
			(unsigned long long)total);
		ibv_dealloc_mw(mw);
		errno = e ? e : EINVAL;
		return NULL;
	}
	*rkey = mw->rkey;
	return mw;
}

/* The client's half of -x: see the comment at the top. buf holds 2 * XTOTAL + 16 bytes. */
static int xclient(struct ibv_qp *qp, struct ibv_cq *cq, uint8_t *buf, struct ibv_mr *mr,
		   const struct info *srv)
{
	uint64_t old[2];
	struct ibv_wc wc;
	int bad = 0;

	fill(buf, XTOTAL, 77);
	if (post_send(qp, IBV_WR_RDMA_WRITE, buf, XTOTAL, mr->lkey, srv->addr, srv->rkey, 0, 1))
		return fail("post write");
	bad |= wait_wc(cq, 1, IBV_WC_RDMA_WRITE, "write through the layout");
	if (post_send(qp, IBV_WR_RDMA_READ, buf + XTOTAL, XTOTAL, mr->lkey, srv->addr, srv->rkey,
		      0, 2))
		return fail("post read");
	bad |= wait_wc(cq, 2, IBV_WC_RDMA_READ, "read through the layout");
	if (!bad && memcmp(buf, buf + XTOTAL, XTOTAL)) {
		fprintf(stderr, "wire_ops: the layout's READ differs from its WRITE\n");
		bad = 1;
	}
	for (int i = 0; i < 2 && !bad; i++) {
		uint8_t *res = buf + 2 * XTOTAL + 8 * i;

		if (post_atomic(qp, IBV_WR_ATOMIC_FETCH_AND_ADD, res, mr->lkey,
				srv->addr + (i ? XADD1 : XADD0), srv->rkey, 1, 0))
			return fail("post fetch-add");
		bad |= wait_wc(cq, 1, IBV_WC_FETCH_ADD, "fetch-add within an element");
		memcpy(&old[i], buf + (i ? XADD1 : XADD0), 8);
		if (!bad && memcmp(res, &old[i], 8)) {
			fprintf(stderr, "wire_ops: fetch-add %d: not the written value\n", i);
			bad = 1;
		}
	}
	if (bad)
		return 1;
	if (post_atomic(qp, IBV_WR_ATOMIC_FETCH_AND_ADD, buf + 2 * XTOTAL, mr->lkey,
			srv->addr + XSPAN, srv->rkey, 1, 0))
		return fail("post fetch-add");
	if (poll1(cq, &wc, 30000) != 1 || wc.status != IBV_WC_REM_INV_REQ_ERR) {
		fprintf(stderr, "wire_ops: fetch-add across two elements: status %s\n",
			ibv_wc_status_str(wc.status));
		return 1;
	}
	return 0;
}

/* The server's check after -x: the MR holds what the client's operations put through the
 * layout, and nothing else changed. */
static int xcheck(struct ibv_mr *mr, const uint8_t *buf, size_t len)
{
	static __u64 map[XTOTAL];
	struct layout l = xlayout(mr, buf);
	uint8_t *want = calloc(1, len), w[XTOTAL];
	uint64_t v;
	int bad;

	if (!want || xmw_model(&l, map, XTOTAL) != XTOTAL)
		return 1;
	fill(w, XTOTAL, 77);
	for (int off = XADD0; off <= XADD1; off += XADD1 - XADD0) {
		memcpy(&v, w + off, 8);
		v++;
		memcpy(w + off, &v, 8);
	}
	for (size_t i = 0; i < XTOTAL; i++)
		want[map[i] - (uintptr_t)buf] = w[i];
	bad = memcmp(want, buf, len) != 0;
	for (size_t i = 0; i < len && bad; i++)
		if (want[i] != buf[i]) {
			fprintf(stderr, "wire_ops: MR byte %zu is %#x, the layout says %#x\n", i,
				buf[i], want[i]);
			break;
		}
	free(want);
	return bad;
}

/* Sets or clears IFF_UP on the netdev with index ifindex. */
static int link_set(int ifindex, int up)
{
	struct ifreq r = {};
	int s = socket(AF_INET, SOCK_DGRAM, 0), ret = -1;

	if (s < 0 || !if_indextoname(ifindex, r.ifr_name))
		goto out;
	if (ioctl(s, SIOCGIFFLAGS, &r))
		goto out;
	r.ifr_flags = up ? r.ifr_flags | IFF_UP : r.ifr_flags & ~IFF_UP;
	ret = ioctl(s, SIOCSIFFLAGS, &r);
out:
	if (s >= 0)
		close(s);
	return ret;
}

static int post_write(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mr *mr, void *buf,
		      const struct info *srv)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 4096, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { .remote_addr = srv->addr, .rkey = srv->rkey } }, *bad;

	return ibv_post_send(qp, &wr, &bad);
}

/* The client's half of -v: see the comment at the top. */
static int vanish_client(int s, struct ibv_qp *qp, struct ibv_cq *cq, uint8_t *buf,
			 struct ibv_mr *mr, const struct info *srv)
{
	long try_ms = (4096L << VANISH_TIMEOUT) / 1000000, t0, el;
	long lo = (VANISH_RETRY + 1) * try_ms * 9 / 10;
	long hi = (VANISH_RETRY + 1) * try_ms * 4 + 1000;
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr a;
	struct ibv_wc wc;
	char k = 0;

	memset(buf, 0xa5, 4096);
	if (post_write(qp, 1, mr, buf, srv))
		return fail("post write");
	if (wait_wc(cq, 1, IBV_WC_RDMA_WRITE, "write before the peer vanishes"))
		return 1;
	if (write(s, "w", 1) != 1 || read(s, &k, 1) != 1 || k != 'k')
		return fail("vanish handshake");
	/* The server takes its link down 300 ms after its answer. */
	sleep(1);
	t0 = now_ms();
	if (post_write(qp, 2, mr, buf, srv))
		return fail("post write");
	if (poll1(cq, &wc, hi + 10000) != 1) {
		fprintf(stderr, "wire_ops: no completion %ld ms after the peer vanished\n", hi + 10000);
		return 1;
	}
	el = now_ms() - t0;
	printf("wire_ops: peer vanished: status %s after %ld ms (timeout %d, retry_cnt %d: %ld..%ld ms)\n",
	       ibv_wc_status_str(wc.status), el, VANISH_TIMEOUT, VANISH_RETRY, lo, hi);
	if (wc.status != IBV_WC_RETRY_EXC_ERR || wc.wr_id != 2 || el < lo || el > hi)
		return 1;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &init) || a.qp_state != IBV_QPS_ERR) {
		fprintf(stderr, "wire_ops: QP state %d after RETRY_EXC_ERR\n", a.qp_state);
		return 1;
	}
	return 0;
}

/* The server's half of -v: the netdev of the GID in use goes down for VANISH_S seconds. */
static int vanish_server(int s, struct dev *d)
{
	struct ibv_gid_entry e;
	char w = 0;
	int ret;

	if (ibv_query_gid_ex(d->ctx, 1, d->gid_index, &e, 0))
		return fail("query gid");
	if (read(s, &w, 1) != 1 || w != 'w' || write(s, "k", 1) != 1)
		return fail("vanish handshake");
	usleep(300000);
	if (link_set(e.ndev_ifindex, 0))
		return fail("link down");
	sleep(VANISH_S);
	ret = link_set(e.ndev_ifindex, 1);
	printf("wire_ops: link of GID %d down for %d s\n", d->gid_index, VANISH_S);
	return ret ? fail("link up") : 0;
}

#define STREAM_WRS (STREAM_N + STREAM_READS + STREAM_ATOMICS + 1)

/* The stream's chain: see the comment at the top. */
static void stream_chain(struct ibv_send_wr *wr, struct ibv_sge *sge, uint8_t *buf,
			 struct ibv_mr *mr, const struct info *peer)
{
	int n = 0, reads = 0;

	memset(wr, 0, STREAM_WRS * sizeof(*wr));
	for (int i = 0; i < STREAM_N; i++) {
		sge[n] = (struct ibv_sge){ (uintptr_t)buf + i * STREAM_LEN, STREAM_LEN, mr->lkey };
		wr[n].opcode = IBV_WR_RDMA_WRITE;
		wr[n].wr.rdma.remote_addr = peer->addr + LEN / 2 + i * STREAM_LEN;
		wr[n++].wr.rdma.rkey = peer->rkey;
		if (i % 8 != 7)
			continue;
		sge[n] = (struct ibv_sge){ (uintptr_t)buf + READ_DST + reads * STREAM_LEN,
					   STREAM_LEN, mr->lkey };
		wr[n].opcode = IBV_WR_RDMA_READ;
		wr[n].wr.rdma.remote_addr = peer->addr + PATTERN + reads * STREAM_LEN;
		wr[n++].wr.rdma.rkey = peer->rkey;
		if (reads < STREAM_ATOMICS) {
			sge[n] = (struct ibv_sge){ (uintptr_t)buf + ATOMIC_DST + reads * 8, 8,
						   mr->lkey };
			wr[n].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
			wr[n].wr.atomic.remote_addr = peer->addr + COUNTER;
			wr[n].wr.atomic.rkey = peer->rkey;
			wr[n++].wr.atomic.compare_add = 1;
		}
		reads++;
	}
	sge[n] = (struct ibv_sge){ (uintptr_t)buf, 8, mr->lkey };
	wr[n++].opcode = IBV_WR_SEND;
	for (int i = 0; i < n; i++) {
		wr[i].wr_id = 300 + i;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	}
	wr[n - 1].send_flags = IBV_SEND_SIGNALED;
}

/* The READs' data (the peer's pattern) and the atomics' original values of round k. */
static int stream_answers(const uint8_t *buf, int peer_pattern, int k)
{
	uint8_t want[PATTERN_LEN];

	fill(want, PATTERN_LEN, peer_pattern);
	if (memcmp(want, buf + READ_DST, PATTERN_LEN)) {
		fprintf(stderr, "wire_ops: stream: READ data differs\n");
		return 1;
	}
	for (int j = 0; j < STREAM_ATOMICS; j++) {
		uint64_t v;

		memcpy(&v, buf + ATOMIC_DST + 8 * j, 8);
		if (v != (uint64_t)k * STREAM_ATOMICS + j) {
			fprintf(stderr, "wire_ops: stream: FETCH_ADD %d of round %d gave %llu\n", j,
				k, (unsigned long long)v);
			return 1;
		}
	}
	return 0;
}

/* One round (k) of -s: see the comment at the top; seed and peer_seed make the data differ. */
static int stream_round(int s, struct ibv_qp *qp, struct ibv_cq *cq, uint8_t *buf, struct ibv_mr *mr,
			const struct info *peer, int seed, int peer_seed, int peer_pattern, int k)
{
	uint8_t *dst = buf + LEN / 2, *rx = buf + LEN / 2 - 64, *want;
	struct ibv_sge sge[STREAM_WRS], rsge = { (uintptr_t)rx, 64, mr->lkey };
	struct ibv_send_wr wr[STREAM_WRS], *bad;
	struct ibv_recv_wr rwr = { .wr_id = 200, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	int sent = 0, arrived = 0, ret = 0;
	char r;

	fill(buf, STREAM_N * STREAM_LEN, seed);
	memset(buf + READ_DST, 0, PATTERN_LEN + 8 * STREAM_ATOMICS);
	if (ibv_post_recv(qp, &rwr, &rbad))
		return fail("post recv");
	/* Both receives are posted before either side sends. */
	if (write(s, "s", 1) != 1 || read(s, &r, 1) != 1)
		return fail("stream sync");
	stream_chain(wr, sge, buf, mr, peer);
	if (ibv_post_send(qp, wr, &bad))
		return fail("post stream");
	while (!sent || !arrived) {
		struct ibv_wc wc;

		if (poll1(cq, &wc, 60000) != 1) {
			fprintf(stderr, "wire_ops: stream: no completion (sent %d, arrived %d)\n",
				sent, arrived);
			return 1;
		}
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "wire_ops: stream: wr_id %llu: %s\n",
				(unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
			return 1;
		}
		sent |= wc.opcode == IBV_WC_SEND && wc.wr_id == 300 + STREAM_WRS - 1;
		arrived |= wc.opcode == IBV_WC_RECV && wc.wr_id == 200;
	}
	if (stream_answers(buf, peer_pattern, k))
		return 1;
	want = malloc(STREAM_N * STREAM_LEN);
	if (!want)
		return fail("alloc");
	fill(want, STREAM_N * STREAM_LEN, peer_seed);
	for (int i = 0; i < STREAM_N * STREAM_LEN; i += 8) {
		if (memcmp(want + i, dst + i, 8)) {
			fprintf(stderr, "wire_ops: stream: word at %d differs\n", i);
			ret = 1;
			break;
		}
	}
	free(want);
	return ret;
}

/* -s with -r ROUNDS: the rounds one after the other, each with data of its own. */
static int stream(int s, struct ibv_qp *qp, struct ibv_cq *cq, uint8_t *buf, struct ibv_mr *mr,
		  const struct info *peer, int rounds, int host)
{
	for (int k = 0; k < rounds; k++) {
		int seed = 1 + 2 * k;

		if (stream_round(s, qp, cq, buf, mr, peer, host ? seed : seed + 1,
				 host ? seed + 1 : seed, host ? 1000 : 1001, k)) {
			fprintf(stderr, "wire_ops: stream: round %d of %d failed\n", k + 1, rounds);
			return 1;
		}
	}
	return 0;
}

/* -b, one round: see the comment at the top. buf holds the data this side sends, then what
 * the peer WRITEs, then what it SENDs (BIG_LEN each). */
static int big_round(int s, struct ibv_qp *qp, struct ibv_cq *cq, uint8_t *buf, struct ibv_mr *mr,
		     const struct info *peer, int seed, int peer_seed)
{
	struct ibv_sge sge[2] = { { (uintptr_t)buf, BIG_LEN, mr->lkey },
				  { (uintptr_t)buf, BIG_LEN, mr->lkey } };
	struct ibv_sge rsge = { (uintptr_t)buf + 2 * BIG_LEN, BIG_LEN, mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 200, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	struct ibv_send_wr wr[2] = {}, *bad;
	int sent = 0, arrived = 0, ret = 0;
	uint8_t *want;
	char r;

	fill(buf, BIG_LEN, seed);
	memset(buf + BIG_LEN, 0, 2 * BIG_LEN);
	if (ibv_post_recv(qp, &rwr, &rbad))
		return fail("post recv");
	if (write(s, "b", 1) != 1 || read(s, &r, 1) != 1)
		return fail("big sync");
	wr[0] = (struct ibv_send_wr){ .wr_id = 400, .next = &wr[1], .sg_list = &sge[0],
				      .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE };
	wr[0].wr.rdma.remote_addr = peer->addr + BIG_LEN;
	wr[0].wr.rdma.rkey = peer->rkey;
	wr[1] = (struct ibv_send_wr){ .wr_id = 401, .sg_list = &sge[1], .num_sge = 1,
				      .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	if (ibv_post_send(qp, wr, &bad))
		return fail("post big");
	while (!sent || !arrived) {
		struct ibv_wc wc;

		if (poll1(cq, &wc, 60000) != 1) {
			fprintf(stderr, "wire_ops: big: no completion (sent %d, arrived %d)\n", sent,
				arrived);
			return 1;
		}
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "wire_ops: big: wr_id %llu: %s\n",
				(unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
			return 1;
		}
		sent |= wc.opcode == IBV_WC_SEND && wc.wr_id == 401;
		arrived |= wc.opcode == IBV_WC_RECV && wc.wr_id == 200 && wc.byte_len == BIG_LEN;
	}
	want = malloc(BIG_LEN);
	if (!want)
		return fail("alloc");
	fill(want, BIG_LEN, peer_seed);
	for (int k = 1; k <= 2 && !ret; k++) {
		for (int i = 0; i < BIG_LEN; i += 8) {
			if (memcmp(want + i, buf + k * BIG_LEN + i, 8)) {
				fprintf(stderr, "wire_ops: big: %s: word at %d differs\n",
					k == 1 ? "WRITE" : "SEND", i);
				ret = 1;
				break;
			}
		}
	}
	free(want);
	return ret;
}

/* -m: see the comment at the top. */
static int mcast(struct dev *d, const char *host)
{
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	struct info mine = { .gid = d->gid }, theirs;
	uint8_t *buf = calloc(MC_N, 40 + MC_LEN);
	int s, bad = 0;
	char r = 0;

	cq = ibv_create_cq(d->ctx, 2 * MC_N, NULL, NULL, 0);
	qp = cq ? make_qp(d, cq, cq, IBV_QPT_UD, NULL) : NULL;
	if (!buf || !qp || ud_ready(qp, MC_QKEY))
		return fail("UD QP");
	mr = ibv_reg_mr(d->pd, buf, MC_N * (40 + MC_LEN), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		return fail("register MR");
	mine.qpn = qp->qp_num;
	if (!host) {
		if (ibv_attach_mcast(qp, &mc_group, 0))
			return fail("attach");
		for (int i = 0; i < MC_N; i++)
			if (post_recv(qp, buf + i * (40 + MC_LEN), 40 + MC_LEN, mr->lkey, i))
				return fail("post recv");
	}
	s = tcp(host);
	if (s < 0 || xchg(s, &mine, &theirs))
		return fail("exchange");
	if (host) {
		struct ibv_ah_attr a = { .is_global = 1, .port_num = 1 };
		struct ibv_ah *ah;

		a.grh.dgid = mc_group;
		a.grh.sgid_index = d->gid_index;
		a.grh.hop_limit = 1;
		ah = ibv_create_ah(d->pd, &a);
		if (!ah)
			return fail("create AH");
		for (int i = 0; i < MC_N; i++) {
			struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = MC_LEN,
					       .lkey = mr->lkey };
			struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1,
						  .opcode = IBV_WR_SEND,
						  .send_flags = IBV_SEND_SIGNALED }, *b;

			fill(buf, MC_LEN, i);
			wr.wr.ud.ah = ah;
			wr.wr.ud.remote_qpn = 0xffffff;
			wr.wr.ud.remote_qkey = MC_QKEY;
			if (ibv_post_send(qp, &wr, &b))
				return fail("post send");
			bad |= wait_wc(cq, i, IBV_WC_SEND, "multicast send");
			/* Paced: the receiver drains at the emulator's speed. */
			usleep(20000);
		}
		if (write(s, bad ? "f" : "d", 1) != 1 || read(s, &r, 1) != 1 || r != 'd')
			bad = 1;
		ibv_destroy_ah(ah);
	} else {
		for (int i = 0; i < MC_N; i++) {
			uint8_t want[MC_LEN], *got;

			if (poll1(cq, &wc, 20000) != 1) {
				fprintf(stderr, "wire_ops: %d of %d datagrams received\n", i, MC_N);
				bad = 1;
				break;
			}
			got = buf + wc.wr_id * (40 + MC_LEN);
			fill(want, MC_LEN, i);
			if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV ||
			    wc.byte_len != 40 + MC_LEN || wc.wr_id != (uint64_t)i ||
			    !(wc.wc_flags & IBV_WC_GRH) || wc.src_qp != theirs.qpn ||
			    memcmp(got + 40, want, MC_LEN) ||
			    memcmp(got + 32, theirs.gid.raw + 12, 4) ||
			    memcmp(got + 36, mc_group.raw + 12, 4)) {
				fprintf(stderr, "wire_ops: datagram %d: status %d, %u bytes, wr_id %llu, source QP %u\n",
					i, wc.status, wc.byte_len, (unsigned long long)wc.wr_id,
					wc.src_qp);
				bad = 1;
			}
		}
		if (read(s, &r, 1) != 1 || r != 'd')
			bad = 1;
		if (write(s, bad ? "f" : "d", 1) != 1)
			bad = 1;
		ibv_detach_mcast(qp, &mc_group, 0);
	}
	printf("wire_ops: %s: %d multicast datagrams: %s\n", host ? "client" : "server", MC_N,
	       bad ? "FAILED" : "ok");
	close(s);
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	free(buf);
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
	int c, s, bad = 0, gid_index = -1, vanish = 0, mc = 0, streams = 0, rounds = 1, big = 0;
	int xmw = 0;
	struct ibv_mw *mw = NULL, *mw_in = NULL;
	size_t len;

	while ((c = getopt(argc, argv, "d:g:c:vmsbxr:")) != -1) {
		if (c == 'd')
			devname = optarg;
		else if (c == 'g')
			gid_index = atoi(optarg);
		else if (c == 'c')
			host = optarg;
		else if (c == 'v')
			vanish = 1;
		else if (c == 'm')
			mc = 1;
		else if (c == 's')
			streams = 1;
		else if (c == 'b')
			big = 1;
		else if (c == 'x')
			xmw = 1;
		else if (c == 'r')
			rounds = atoi(optarg);
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
	if (mc) {
		bad = mcast(&d, host);
		dev_close(&d);
		return bad;
	}
	len = big ? 3 * BIG_LEN : LEN;
	buf = aligned_alloc(4096, len);
	if (!buf)
		return fail("alloc");
	memset(buf, 0, len);
	cq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	if (!cq)
		return fail("create cq");
	qp = make_qp_ex(&d, cq);
	if (!qp)
		return fail("create qp");
	mr = ibv_reg_mr(d.pd, buf, len, ALL_ACCESS | ACCESS_FLUSH_GLOBAL |
			(xmw ? IBV_ACCESS_MW_BIND : 0));
	if (!mr)
		return fail("register MR");
	if (streams)
		fill(buf + PATTERN, PATTERN_LEN, host ? 1001 : 1000);
	mine = (struct info){ .qpn = qp->qp_num, .rkey = mr->rkey, .addr = (uintptr_t)buf,
			      .gid = d.gid };
	if (xmw && !host) {
		mw = xbind(&d, qp, mr, buf, &mine.rkey, &mw_in);
		if (!mw)
			return fail("bind the layout");
		mine.addr = XBASE;
	}
	s = tcp(host);
	if (s < 0 || xchg(s, &mine, &theirs))
		return fail("exchange");
	o.access = ALL_ACCESS | ACCESS_FLUSH_GLOBAL;
	if (vanish) {
		o.timeout = VANISH_TIMEOUT;
		o.retry_cnt = VANISH_RETRY;
	}
	if (big)
		o.timeout = BIG_TIMEOUT;
	if (rc_connect(qp, &d, theirs.qpn, &theirs.gid, &o))
		return fail("connect");
	/* Both ready before the client sends. */
	if (write(s, "r", 1) != 1 || read(s, &c, 1) != 1)
		return fail("sync");
	if (vanish) {
		bad = host ? vanish_client(s, qp, cq, buf, mr, &theirs) : vanish_server(s, &d);
		if (!bad && !host) {
			/* The client's verdict, once the link is back (TCP mends the gap). */
			char r = 0;

			if (read(s, &r, 1) != 1 || r != 'd')
				bad = fail("client failed");
		} else if (host && write(s, bad ? "f" : "d", 1) != 1) {
			bad = fail("report");
		}
		printf("wire_ops: %s: peer vanished: %s\n", host ? "client" : "server",
		       bad ? "FAILED" : "ok");
		goto out;
	}
	if (streams) {
		char r = 0;

		bad = stream(s, qp, cq, buf, mr, &theirs, rounds, !!host);
		/* Each side's verdict to the other: both must pass. */
		if (write(s, bad ? "f" : "d", 1) != 1 || read(s, &r, 1) != 1 || r != 'd')
			bad = 1;
		printf("wire_ops: %s: %d rounds of %d writes and %d reads of %d bytes, %d atomics "
		       "and a send each way: %s\n", host ? "client" : "server", rounds, STREAM_N,
		       STREAM_READS, STREAM_LEN, STREAM_ATOMICS, bad ? "FAILED" : "ok");
		goto out;
	}
	if (big) {
		char r = 0;

		for (int k = 0; k < rounds && !bad; k++) {
			int seed = 1 + 2 * k;

			bad = big_round(s, qp, cq, buf, mr, &theirs, host ? seed : seed + 1,
					host ? seed + 1 : seed);
		}
		if (write(s, bad ? "f" : "d", 1) != 1 || read(s, &r, 1) != 1 || r != 'd')
			bad = 1;
		printf("wire_ops: %s: %d rounds of a %d-byte write and send each way: %s\n",
		       host ? "client" : "server", rounds, BIG_LEN, bad ? "FAILED" : "ok");
		goto out;
	}
	if (xmw) {
		char r = 0;

		if (host) {
			bad = xclient(qp, cq, buf, mr, &theirs);
			if (write(s, bad ? "f" : "d", 1) != 1)
				bad = fail("report");
		} else if (read(s, &r, 1) != 1 || r != 'd') {
			bad = fail("client failed");
		} else {
			bad = xcheck(mr, buf, len);
		}
		printf("wire_ops: %s: a %d-byte write, read and 3 fetch-adds through a layout "
		       "window: %s\n", host ? "client" : "server", XTOTAL, bad ? "FAILED" : "ok");
		goto out;
	}
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
out:
	close(s);
	if (mw)
		ibv_dealloc_mw(mw);
	if (mw_in)
		ibv_dealloc_mw(mw_in);
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	dev_close(&d);
	free(buf);
	return bad;
}
