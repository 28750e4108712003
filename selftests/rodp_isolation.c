// SPDX-License-Identifier: GPL-2.0
/*
 * rodp isolation between local users (issue 12, findings 1 and 4): an unprivileged process
 * points its own RC QP at another user's QP and attacks it; keys and QP numbers are not
 * sequential; windows are reached, bound and invalidated only by their whole current key and
 * only from their own PD. The attacks run as uid 65534 in a child of the root test; each must
 * fail with the documented completion, and the victim must go on working.
 */
#include "rodp_mw.h"
#include "rodp_harness.h"

#define LEN (64 * 1024)
#define PAGE 4096
#define NATTACKS 6

/* What the victim tells the attacker, and what the attacker saw (-1: no completion). */
struct shared {
	uint32_t qpn;		/* the victim's responder QP */
	uint64_t addr;		/* its registered buffer */
	uint32_t rkey;		/* and the buffer's rkey: a perfect guess */
	uint32_t mw_key;	/* a type 2B window the victim bound */
	int st[NATTACKS];
};

FIXTURE(iso) {
	struct dev d;
	struct rc_pair v;	/* the victim: QP 0 sends to QP 1 */
	struct shared *sh;
};

FIXTURE_SETUP(iso)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, dev_open(&self->d, "rodp0"));
	ASSERT_EQ(0, rc_pair_open(&self->v, &self->d, NULL, LEN, &rc_default));
	self->sh = mmap(NULL, sizeof(*self->sh), PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->sh);
	for (int i = 0; i < NATTACKS; i++)
		self->sh->st[i] = -1;
	self->sh->qpn = self->v.qp[1]->qp_num;
	self->sh->addr = (uintptr_t)self->v.buf[1];
	self->sh->rkey = self->v.mr[1]->rkey;
}

FIXTURE_TEARDOWN(iso)
{
	munmap(self->sh, sizeof(*self->sh));
	rc_pair_close(&self->v);
	dev_close(&self->d);
	link_delete("rodp0");
}

/* Runs fn(sh) in a child that is uid 65534; returns the child's exit status. */
static int as_nobody(struct shared *s, int (*fn)(struct shared *))
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return -1;
	if (!pid)
		_exit(become_nobody() ? 100 : fn(s));
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The attacker's own verbs objects on rodp0. */
struct attacker {
	struct dev d;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	char *buf;
	struct ibv_mr *mr;
	uint32_t dqpn;
};

/* Few, quick retries: an unanswered WR ends within milliseconds. */
static const struct rc_opts quick = {
	.access = ALL_ACCESS, .rnr_retry = 1, .min_rnr_timer = 1, .timeout = 1, .retry_cnt = 1,
	.rd_atomic = 4,
};

/* Opens the attacker's context and brings its RC QP to RTS towards dqpn on the same device. */
static int attacker_open(struct attacker *a, uint32_t dqpn)
{
	memset(a, 0, sizeof(*a));
	a->dqpn = dqpn;
	if (dev_open(&a->d, "rodp0"))
		return -1;
	a->buf = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a->buf == MAP_FAILED)
		return -1;
	fill(a->buf, LEN, 99);
	a->mr = ibv_reg_mr(a->d.pd, a->buf, LEN, ALL_ACCESS);
	a->cq = ibv_create_cq(a->d.ctx, 64, NULL, NULL, 0);
	if (!a->mr || !a->cq)
		return -1;
	a->qp = make_qp(&a->d, a->cq, a->cq, IBV_QPT_RC, NULL);
	if (!a->qp)
		return -1;
	return rc_connect(a->qp, &a->d, dqpn, &a->d.gid, &quick);
}

/* Back to RESET and connected to a->dqpn again: 0 or -1. */
static int reconnect(struct attacker *a)
{
	struct ibv_qp_attr r = { .qp_state = IBV_QPS_RESET };

	if (ibv_modify_qp(a->qp, &r, IBV_QP_STATE))
		return -1;
	return rc_connect(a->qp, &a->d, a->dqpn, &a->d.gid, &quick);
}

/*
 * Completion status of the WR whose ibv_post_send returned post_err (-1: not posted or no
 * completion in 10 s, -2: the QP could not be connected again afterwards).
 */
static int attack_done(struct attacker *a, int post_err)
{
	struct ibv_wc wc;
	int st = -1;

	if (!post_err && poll1(a->cq, &wc, 10000) == 1)
		st = wc.status;
	return reconnect(a) ? -2 : st;
}

static int attack(struct attacker *a, enum ibv_wr_opcode op, uint32_t len, uint64_t raddr,
		  uint32_t rkey)
{
	return attack_done(a, post_send(a->qp, op, a->buf, len, a->mr->lkey, raddr, rkey, 0, 1));
}

/* The attacks of finding 1 against the victim's QP, each recorded in s->st. */
static int attack_victim_qp(struct shared *s)
{
	struct attacker a;

	if (attacker_open(&a, s->qpn))
		return 1;
	/* A zero-length write with a bad rkey: would put the victim's QP in error. */
	s->st[0] = attack(&a, IBV_WR_RDMA_WRITE, 0, s->addr, 0x5a5a5a5a);
	/* A read of the victim's memory, with its right key even. */
	s->st[1] = attack(&a, IBV_WR_RDMA_READ, PAGE, s->addr, s->rkey);
	/* A send larger than the victim's receive: would fail the victim's QP. */
	s->st[2] = attack(&a, IBV_WR_SEND, LEN, 0, 0);
	/* A send that would take the victim's receive and fill it. */
	s->st[3] = attack(&a, IBV_WR_SEND, 64, 0, 0);
	/* A write, and an atomic, through a correctly guessed rkey. */
	s->st[4] = attack(&a, IBV_WR_RDMA_WRITE, PAGE, s->addr, s->rkey);
	s->st[5] = attack_done(&a, post_atomic(a.qp, IBV_WR_ATOMIC_FETCH_AND_ADD, a.buf,
					       a.mr->lkey, s->addr, s->rkey, 1, 0));
	return 0;
}

TEST_F(iso, another_user_cannot_reach_a_connected_qp)
{
	long drops = hw_counter("rodp0", "rcvd_peer_err");
	char *want = malloc(LEN);
	struct ibv_wc wc;

	ASSERT_NE(NULL, want);
	ASSERT_LE(0, drops);
	fill(self->v.buf[1], LEN, 1);
	memcpy(want, self->v.buf[1], LEN);
	/* The victim's one receive: a page at the buffer's end. */
	ASSERT_EQ(0, post_recv(self->v.qp[1], self->v.buf[1] + LEN - PAGE, PAGE,
			       self->v.mr[1]->lkey, 77));

	ASSERT_EQ(0, as_nobody(self->sh, attack_victim_qp));

	/* Dropped unanswered: the attacker's own WRs end as if the packets were lost. */
	for (int i = 0; i < NATTACKS; i++) {
		TH_LOG("attack %d: status %d", i, self->sh->st[i]);
		EXPECT_EQ(IBV_WC_RETRY_EXC_ERR, self->sh->st[i]);
	}
	/* Every try counted: retry_cnt 1 is two tries each. */
	EXPECT_LE(drops + 2 * NATTACKS, hw_counter("rodp0", "rcvd_peer_err"));
	/* The victim saw nothing: state, memory, receive, completions. */
	EXPECT_EQ(IBV_QPS_RTS, qp_state(self->v.qp[0]));
	EXPECT_EQ(IBV_QPS_RTS, qp_state(self->v.qp[1]));
	EXPECT_EQ(0, memcmp(want, self->v.buf[1], LEN));
	EXPECT_EQ(0, poll1(self->v.cq[1], &wc, 100));
	EXPECT_EQ(0, poll1(self->v.cq[0], &wc, 100));
	/* And goes on working: its peer's send takes the receive, a write lands. */
	fill(self->v.buf[0], 64, 2);
	ASSERT_EQ(0, post_send(self->v.qp[0], IBV_WR_SEND, self->v.buf[0], 64,
			       self->v.mr[0]->lkey, 0, 0, 0, 5));
	ASSERT_EQ(1, poll1(self->v.cq[0], &wc, 10000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	ASSERT_EQ(1, poll1(self->v.cq[1], &wc, 10000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(77, wc.wr_id);
	EXPECT_EQ(64, wc.byte_len);
	EXPECT_EQ(self->v.qp[0]->qp_num, wc.src_qp);
	EXPECT_EQ(0, memcmp(self->v.buf[0], self->v.buf[1] + LEN - PAGE, 64));
	fill(self->v.buf[0], PAGE, 3);
	EXPECT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->v, IBV_WR_RDMA_WRITE, 0, PAGE,
					  (uintptr_t)self->v.buf[1], self->v.mr[1]->rkey));
	EXPECT_EQ(0, memcmp(self->v.buf[0], self->v.buf[1], PAGE));
	free(want);
}

/* Of n keys (or numbers), how many are the one before plus one, in the byte and in the rest. */
static void steps(const uint32_t *k, int n, int *byte_steps, int *index_steps)
{
	*byte_steps = *index_steps = 0;
	for (int i = 1; i < n; i++) {
		*byte_steps += (k[i] & 0xff) == ((k[i - 1] + 1) & 0xff);
		*index_steps += (k[i] >> 8) == (k[i - 1] >> 8) + 1;
	}
}

TEST_F(iso, keys_and_qp_numbers_do_not_count_up)
{
	struct ibv_mr *mr[32];
	struct ibv_mw *mw[32];
	struct ibv_qp *qp[16];
	uint32_t k[32];
	int b, ix;

	for (int i = 0; i < 32; i++) {
		mr[i] = ibv_reg_mr(self->d.pd, self->v.buf[1], PAGE, IBV_ACCESS_LOCAL_WRITE);
		ASSERT_NE(NULL, mr[i]);
		k[i] = mr[i]->lkey;
	}
	steps(k, 32, &b, &ix);
	TH_LOG("MR keys: %d of 31 key bytes and %d indices one up", b, ix);
	/* A counter steps every time; random bytes 1 in 256, random indices 1 in 2^23. */
	EXPECT_GT(8, b);
	EXPECT_GT(8, ix);
	for (int i = 0; i < 32; i++) {
		mw[i] = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_1);
		ASSERT_NE(NULL, mw[i]);
		k[i] = mw[i]->rkey;
	}
	steps(k, 32, &b, &ix);
	TH_LOG("window keys: %d of 31 key bytes and %d indices one up", b, ix);
	EXPECT_GT(8, b);
	EXPECT_GT(8, ix);
	for (int i = 0; i < 16; i++) {
		qp[i] = make_qp(&self->d, self->v.cq[0], self->v.cq[0], IBV_QPT_RC, NULL);
		ASSERT_NE(NULL, qp[i]);
		k[i] = qp[i]->qp_num << 8;
		EXPECT_LT(15, qp[i]->qp_num);
		EXPECT_GT(0xffffff, qp[i]->qp_num);
	}
	steps(k, 16, &b, &ix);
	TH_LOG("QP numbers: %d of 15 one up", ix);
	EXPECT_GT(4, ix);
	for (int i = 0; i < 16; i++)
		EXPECT_EQ(0, ibv_destroy_qp(qp[i]));
	for (int i = 0; i < 32; i++) {
		EXPECT_EQ(0, ibv_dealloc_mw(mw[i]));
		EXPECT_EQ(0, ibv_dereg_mr(mr[i]));
	}
}

/* A QP of its own PD, connected to itself: LOCAL_INV of s->mw_key; its status in s->st[0]. */
static int invalidate_from_another_pd(struct shared *s)
{
	struct attacker a;

	if (attacker_open(&a, 0))
		return 1;
	a.dqpn = a.qp->qp_num;
	if (reconnect(&a))
		return 2;
	s->st[0] = local_inv(a.qp, a.cq, s->mw_key);
	return 0;
}

TEST_F(iso, a_window_is_invalidated_only_from_its_pd)
{
	struct ibv_mr *wmr = ibv_reg_mr(self->v.pd, self->v.buf[1], LEN,
					ALL_ACCESS | IBV_ACCESS_MW_BIND);
	struct ibv_mw *w = ibv_alloc_mw(self->v.pd, IBV_MW_TYPE_2);
	struct ibv_pd *pd2 = ibv_alloc_pd(self->d.ctx);
	struct ibv_cq *cq2 = ibv_create_cq(self->d.ctx, 16, NULL, NULL, 0);
	struct dev in_pd2 = self->d;
	struct ibv_qp *qp2;
	uint32_t key;

	ASSERT_NE(NULL, wmr);
	ASSERT_NE(NULL, w);
	ASSERT_NE(NULL, pd2);
	ASSERT_NE(NULL, cq2);
	key = next_key(w->rkey);
	ASSERT_EQ(IBV_WC_SUCCESS, bind2(self->v.qp[1], self->v.cq[1], w, key, wmr,
					(uintptr_t)self->v.buf[1], PAGE, WIN_RIGHTS));
	self->sh->mw_key = key;
	/* Another user's QP. */
	ASSERT_EQ(0, as_nobody(self->sh, invalidate_from_another_pd));
	EXPECT_EQ(IBV_WC_LOC_QP_OP_ERR, self->sh->st[0]);
	/* A QP of another PD of the same context. */
	in_pd2.pd = pd2;
	qp2 = make_qp(&in_pd2, cq2, cq2, IBV_QPT_RC, NULL);
	ASSERT_NE(NULL, qp2);
	ASSERT_EQ(0, rc_connect(qp2, &self->d, qp2->qp_num, &self->d.gid, &rc_default));
	EXPECT_EQ(IBV_WC_LOC_QP_OP_ERR, local_inv(qp2, cq2, key));
	EXPECT_EQ(IBV_QPS_ERR, qp_state(qp2));
	/* The window is still bound and serves its QP. */
	fill(self->v.buf[0], 64, 4);
	EXPECT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->v, IBV_WR_RDMA_WRITE, 0, 64,
					  (uintptr_t)self->v.buf[1], key));
	EXPECT_EQ(0, memcmp(self->v.buf[0], self->v.buf[1], 64));
	/* Its own PD's QP invalidates it. */
	EXPECT_EQ(IBV_WC_SUCCESS, local_inv(self->v.qp[1], self->v.cq[1], key));
	EXPECT_EQ(0, ibv_destroy_qp(qp2));
	EXPECT_EQ(0, ibv_destroy_cq(cq2));
	EXPECT_EQ(0, ibv_dealloc_pd(pd2));
	EXPECT_EQ(0, ibv_dealloc_mw(w));
	EXPECT_EQ(0, ibv_dereg_mr(wmr));
}

TEST_F(iso, a_stale_window_key_reaches_nothing)
{
	struct ibv_mr *wmr = ibv_reg_mr(self->v.pd, self->v.buf[1], LEN,
					ALL_ACCESS | IBV_ACCESS_MW_BIND);
	struct ibv_mw *w = ibv_alloc_mw(self->v.pd, IBV_MW_TYPE_2);
	struct ibv_mw *w1 = ibv_alloc_mw(self->v.pd, IBV_MW_TYPE_1);
	uint32_t k1, k2, k3;

	ASSERT_NE(NULL, wmr);
	ASSERT_NE(NULL, w);
	ASSERT_NE(NULL, w1);
	k1 = next_key(w->rkey);
	ASSERT_EQ(IBV_WC_SUCCESS, bind2(self->v.qp[1], self->v.cq[1], w, k1, wmr,
					(uintptr_t)self->v.buf[1], PAGE, WIN_RIGHTS));
	ASSERT_EQ(IBV_WC_SUCCESS, local_inv(self->v.qp[1], self->v.cq[1], k1));
	k2 = next_key(k1);
	ASSERT_EQ(IBV_WC_SUCCESS, bind2(self->v.qp[1], self->v.cq[1], w, k2, wmr,
					(uintptr_t)self->v.buf[1], PAGE, WIN_RIGHTS));
	/* The key of the earlier binding: no access, no invalidate. */
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->v, IBV_WR_RDMA_WRITE, 0, 8,
						 (uintptr_t)self->v.buf[1], k1));
	ASSERT_EQ(0, rc_reset_pair(&self->v));
	EXPECT_EQ(IBV_WC_LOC_QP_OP_ERR, local_inv(self->v.qp[1], self->v.cq[1], k1));
	ASSERT_EQ(0, rc_reset_pair(&self->v));
	/* A bind naming the window by a stale key. */
	ASSERT_EQ(IBV_WC_SUCCESS, local_inv(self->v.qp[1], self->v.cq[1], k2));
	w->rkey = k1;
	EXPECT_EQ(IBV_WC_MW_BIND_ERR, bind2(self->v.qp[1], self->v.cq[1], w, next_key(k2), wmr,
					    (uintptr_t)self->v.buf[1], PAGE, WIN_RIGHTS));
	ASSERT_EQ(0, rc_reset_pair(&self->v));
	w->rkey = k2;
	k3 = next_key(k2);
	ASSERT_EQ(IBV_WC_SUCCESS, bind2(self->v.qp[1], self->v.cq[1], w, k3, wmr,
					(uintptr_t)self->v.buf[1], PAGE, WIN_RIGHTS));
	EXPECT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->v, IBV_WR_RDMA_WRITE, 0, 8,
					  (uintptr_t)self->v.buf[1], k3));
	/* After deallocation, neither type's last key reaches anything. */
	ASSERT_EQ(IBV_WC_SUCCESS, bind1(self->v.qp[1], self->v.cq[1], w1, wmr, self->v.buf[1],
					PAGE, WIN_RIGHTS));
	k1 = w1->rkey;
	EXPECT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->v, IBV_WR_RDMA_WRITE, 0, 8,
					  (uintptr_t)self->v.buf[1], k1));
	EXPECT_EQ(0, ibv_dealloc_mw(w));
	EXPECT_EQ(0, ibv_dealloc_mw(w1));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->v, IBV_WR_RDMA_WRITE, 0, 8,
						 (uintptr_t)self->v.buf[1], k3));
	ASSERT_EQ(0, rc_reset_pair(&self->v));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->v, IBV_WR_RDMA_WRITE, 0, 8,
						 (uintptr_t)self->v.buf[1], k1));
	ASSERT_EQ(0, rc_reset_pair(&self->v));
	EXPECT_EQ(0, ibv_dereg_mr(wmr));
}

/*
 * The uverbs POST_SRQ_RECV command reaches the ib_post_srq_recv callback rodp now has for
 * kernel SRQs only if the driver asks ib_core for that legacy write command, which rodp does
 * not (device.rs: only POST_SEND and REQ_NOTIFY_CQ): a user's SRQ takes receives through its
 * mapped ring. An unprivileged user naming its own SRQ and the victim's buffer gets
 * EOPNOTSUPP from ib_core.
 */
static int post_srq_recv_command(struct shared *s)
{
	struct dev d;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq;
	struct {
		struct ib_uverbs_cmd_hdr hdr;
		struct ib_uverbs_post_srq_recv cmd;
		struct ib_uverbs_recv_wr wr;
		struct ib_uverbs_sge sge;
	} req = { 0 };
	struct ib_uverbs_post_srq_recv_resp resp = { 0 };

	if (dev_open(&d, "rodp0"))
		return 1;
	srq = ibv_create_srq(d.pd, &sa);
	if (!srq)
		return 2;
	req.hdr.command = IB_USER_VERBS_CMD_POST_SRQ_RECV;
	req.hdr.in_words = sizeof(req) / 4;
	req.hdr.out_words = sizeof(resp) / 4;
	req.cmd.response = (uintptr_t)&resp;
	req.cmd.srq_handle = srq->handle;
	req.cmd.wr_count = 1;
	req.cmd.sge_count = 1;
	req.cmd.wqe_size = sizeof(req.wr);
	req.wr.wr_id = 7;
	req.wr.num_sge = 1;
	req.sge.addr = s->addr;
	req.sge.length = 64;
	req.sge.lkey = s->rkey;
	s->st[0] = write(d.ctx->cmd_fd, &req, sizeof(req)) < 0 ? errno : 0;
	ibv_destroy_srq(srq);
	dev_close(&d);
	return 0;
}

TEST_F(iso, the_srq_receive_command_is_refused)
{
	EXPECT_EQ(0, as_nobody(self->sh, post_srq_recv_command));
	EXPECT_EQ(EOPNOTSUPP, self->sh->st[0]);
}

TEST_HARNESS_MAIN
