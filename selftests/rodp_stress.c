// SPDX-License-Identifier: GPL-2.0
/*
 * rodp stress: two processes, 8 RC QPs each, connected pairwise, run mixed sends, RDMA writes
 * read back, and atomics of random sizes for 60 s with every byte checked; then everything is
 * destroyed and slab objects, the rings' vmalloc areas and the module count return to where
 * they were.
 */
#include "rodp_verbs.h"
#include "rodp_harness.h"
#include <signal.h>
#include <sys/socket.h>

#define NQP 8
#define SLOT (1 << 17)		/* per-QP region: 64 KiB write target + 64 KiB receive */
#define MAXLEN (1 << 16)
#define SECONDS 60
#define SLAB_SLACK 600

struct peer_info {
	uint32_t qpn[NQP];
	uint64_t addr;
	uint32_t rkey;
	union ibv_gid gid;
};

struct side {
	struct dev d;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp[NQP];
	char *buf, *scratch;
	struct ibv_mr *mr, *smr;
	struct peer_info peer;
	uint64_t faa_done;
	unsigned int seed;
};

static int xfer(int fd, void *p, size_t n, int out)
{
	while (n) {
		ssize_t r = out ? write(fd, p, n) : read(fd, p, n);

		if (r <= 0)
			return -1;
		p = (char *)p + r;
		n -= r;
	}
	return 0;
}

/* The receive buffer of QP i and the region its peer writes into. */
static char *recv_area(struct side *s, int i) { return s->buf + i * SLOT + MAXLEN; }

static int post_recv_i(struct side *s, int i)
{
	return post_recv(s->qp[i], recv_area(s, i), MAXLEN, s->mr->lkey, i);
}

static int setup(struct side *s, const char *devname, int fd)
{
	struct peer_info me;

	if (dev_open(&s->d, devname))
		return -1;
	s->scq = ibv_create_cq(s->d.ctx, 4 * NQP, NULL, NULL, 0);
	s->rcq = ibv_create_cq(s->d.ctx, 4 * NQP, NULL, NULL, 0);
	s->buf = mmap(NULL, NQP * SLOT + 4096, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	s->scratch = malloc(2 * MAXLEN * NQP);
	if (!s->scq || !s->rcq || s->buf == MAP_FAILED || !s->scratch)
		return -1;
	memset(s->buf, 0, NQP * SLOT + 4096);
	s->mr = ibv_reg_mr(s->d.pd, s->buf, NQP * SLOT + 4096, ALL_ACCESS);
	s->smr = ibv_reg_mr(s->d.pd, s->scratch, 2 * MAXLEN * NQP, IBV_ACCESS_LOCAL_WRITE);
	if (!s->mr || !s->smr)
		return -1;
	for (int i = 0; i < NQP; i++) {
		s->qp[i] = make_qp(&s->d, s->scq, s->rcq, IBV_QPT_RC, NULL);
		if (!s->qp[i])
			return -1;
		me.qpn[i] = s->qp[i]->qp_num;
	}
	me.addr = (uintptr_t)s->buf;
	me.rkey = s->mr->rkey;
	me.gid = s->d.gid;
	if (xfer(fd, &me, sizeof(me), 1) || xfer(fd, &s->peer, sizeof(s->peer), 0))
		return -1;
	for (int i = 0; i < NQP; i++) {
		if (rc_connect(s->qp[i], &s->d, s->peer.qpn[i], &s->peer.gid, &rc_default))
			return -1;
		if (post_recv_i(s, i))
			return -1;
	}
	/*
	 * Both sides' QPs in RTS with receives posted before any traffic: a message to a QP still
	 * in INIT is dropped, and a peer process held off the CPU for longer than the retries last
	 * (7 x 67 ms) would end its sender in IBV_WC_RETRY_EXC_ERR.
	 */
	{
		char ready = 1;

		if (xfer(fd, &ready, 1, 1) || xfer(fd, &ready, 1, 0))
			return -1;
	}
	return 0;
}

static void teardown(struct side *s)
{
	for (int i = 0; i < NQP; i++)
		if (s->qp[i])
			ibv_destroy_qp(s->qp[i]);
	if (s->mr)
		ibv_dereg_mr(s->mr);
	if (s->smr)
		ibv_dereg_mr(s->smr);
	if (s->scq)
		ibv_destroy_cq(s->scq);
	if (s->rcq)
		ibv_destroy_cq(s->rcq);
	dev_close(&s->d);
	free(s->scratch);
	munmap(s->buf, NQP * SLOT + 4096);
}

/* A receive completed on QP i: check the message the peer built with fill(seed). */
static int check_recv(struct side *s, struct ibv_wc *wc)
{
	char *p = recv_area(s, wc->wr_id);
	uint32_t seed;
	static char expect[MAXLEN];

	if (wc->status != IBV_WC_SUCCESS || wc->byte_len < 4)
		return -1;
	memcpy(&seed, p, 4);
	fill(expect, wc->byte_len, seed);
	memcpy(expect, &seed, 4);
	if (memcmp(expect, p, wc->byte_len))
		return -1;
	return post_recv_i(s, wc->wr_id);
}

/* Drains receives; returns -1 on a bad one. */
static int drain_recv(struct side *s)
{
	struct ibv_wc wc[8];
	int n;

	while ((n = ibv_poll_cq(s->rcq, 8, wc)) > 0)
		for (int k = 0; k < n; k++)
			if (check_recv(s, &wc[k]))
				return -1;
	return n < 0 ? -1 : 0;
}

/*
 * Reads n bytes from the peer while draining receives: the peer's sends wait (rnr_retry 7) for
 * receives we repost, so blocking on the socket alone could stall it forever.
 */
static int await_peer(struct side *s, int fd, void *p, size_t n)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	while (n) {
		int r = poll(&pfd, 1, 1);
		ssize_t got;

		if (r < 0 || drain_recv(s))
			return -1;
		if (!r)
			continue;
		got = read(fd, p, n);
		if (got <= 0)
			return -1;
		p = (char *)p + got;
		n -= got;
	}
	return 0;
}

/* One round: an operation on each QP, then all their completions. */
static int round_trip(struct side *s)
{
	int expect = 0;
	char *out[NQP], *back[NQP];
	uint32_t len[NQP];
	int op[NQP];

	for (int i = 0; i < NQP; i++) {
		uint32_t seed = rand_r(&s->seed);
		uint64_t raddr = s->peer.addr + i * SLOT;

		out[i] = s->scratch + 2 * MAXLEN * i;
		back[i] = out[i] + MAXLEN;
		len[i] = 4 + rand_r(&s->seed) % (MAXLEN - 4);
		op[i] = rand_r(&s->seed) % 3;
		fill(out[i], len[i], seed);
		memcpy(out[i], &seed, 4);
		if (op[i] == 0) {
			if (post_send(s->qp[i], IBV_WR_SEND, out[i], len[i], s->smr->lkey, 0, 0, 0, i))
				return -1;
			expect++;
		} else if (op[i] == 1) {
			if (post_send(s->qp[i], IBV_WR_RDMA_WRITE, out[i], len[i], s->smr->lkey, raddr,
				      s->peer.rkey, 0, i) ||
			    post_send(s->qp[i], IBV_WR_RDMA_READ, back[i], len[i], s->smr->lkey, raddr,
				      s->peer.rkey, 0, i))
				return -1;
			expect += 2;
		} else {
			/* The peer's counter sits after its QP regions. */
			if (post_atomic(s->qp[i], IBV_WR_ATOMIC_FETCH_AND_ADD, back[i], s->smr->lkey,
					s->peer.addr + NQP * SLOT, s->peer.rkey, 1, 0))
				return -1;
			expect++;
		}
	}
	while (expect) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(s->scq, 1, &wc);

		if (n < 0 || (n && wc.status != IBV_WC_SUCCESS)) {
			if (n > 0)
				fprintf(stderr, "# QP %d: completion %s (opcode %d)\n",
					(int)wc.wr_id, ibv_wc_status_str(wc.status), wc.opcode);
			return -1;
		}
		if (n) {
			int i = wc.wr_id;

			expect--;
			if (wc.opcode == IBV_WC_RDMA_READ && memcmp(out[i], back[i], len[i])) {
				fprintf(stderr, "# QP %d: read back differs\n", i);
				return -1;
			}
			if (wc.opcode == IBV_WC_FETCH_ADD)
				s->faa_done++;
		}
		if (drain_recv(s))
			return -1;
		if (!n)
			usleep(50);
	}
	return 0;
}

/* One process's whole run; returns 0 when every check passed. */
static int run_side(const char *devname, int fd, unsigned int seed)
{
	struct side s = { .seed = seed };
	long end;
	uint64_t peer_faa, mine;
	int ret = -1;

	if (setup(&s, devname, fd))
		goto out;
	end = now_ms() + SECONDS * 1000;
	while (now_ms() < end)
		if (round_trip(&s))
			goto out;
	/*
	 * Our sends have all completed, so the peer holds them; its last round may still send to
	 * us, so keep reposting receives until it says it is done, then compare the atomic counts.
	 */
	if (xfer(fd, &s.faa_done, 8, 1) || await_peer(&s, fd, &peer_faa, 8) || drain_recv(&s))
		goto out;
	memcpy(&mine, s.buf + NQP * SLOT, 8);
	ret = mine == peer_faa ? 0 : -1;
	if (ret)
		fprintf(stderr, "# atomic count %llu, the peer did %llu\n",
			(unsigned long long)mine, (unsigned long long)peer_faa);
	/* Stay until the peer checked too: its reads target our memory. */
	if (xfer(fd, &ret, sizeof(ret), 1) || await_peer(&s, fd, &peer_faa, sizeof(int)))
		ret = -1;
out:
	teardown(&s);
	return ret;
}

static long rodp_vmallocs(void)
{
	char out[64];

	sh(out, sizeof(out), "grep -c rodp /proc/vmallocinfo");
	return atol(out);
}

static void stress(struct __test_metadata *_metadata, const char *a, const char *b)
{
	long before, after, vm, ref;
	int sv[2], st;
	pid_t pid;

	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, link_add("rodp1", "veth1"));
	ref = module_refcnt("rodp");
	vm = rodp_vmallocs();
	before = kmalloc_objects();
	ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		close(sv[0]);
		_exit(run_side(b, sv[1], 2) ? 1 : 0);
	}
	close(sv[1]);
	EXPECT_EQ(0, run_side(a, sv[0], 1));
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(sv[0]);
	after = kmalloc_settled(before, SLAB_SLACK);
	EXPECT_LT(after - before, SLAB_SLACK) TH_LOG("kmalloc objects %ld -> %ld", before, after);
	EXPECT_EQ(vm, rodp_vmallocs());
	EXPECT_EQ(ref, module_refcnt("rodp"));
	link_delete("rodp0");
	link_delete("rodp1");
}

/* A minute of traffic plus setup and the slab settling take several minutes under TCG. */
FIXTURE(slow) {};
FIXTURE_SETUP(slow) { ensure_netdevs(); }
FIXTURE_TEARDOWN(slow) {}

TEST_F_TIMEOUT(slow, two_processes_one_device, 600)
{
	stress(_metadata, "rodp0", "rodp0");
}

TEST_F_TIMEOUT(slow, two_processes_two_devices, 600)
{
	stress(_metadata, "rodp0", "rodp1");
}

TEST_HARNESS_MAIN
