// SPDX-License-Identifier: GPL-2.0
/*
 * rodp engine: QPs waiting for a peer (RNR backoff) wait on timers, not in the workqueue, so
 * they cannot delay other QPs; backoff ends when the timer fires; no completion follows
 * destroy_qp.
 */
#include "rodp_verbs.h"
#include "rodp_harness.h"

/* QPs held in RNR backoff: as many as the module's workqueue runs at once (its default
 * max_active), which a worker sleeping through each backoff would all occupy. */
#define STALLED 256
#define LEN 4096

FIXTURE(engine) {
	struct dev d;
	struct ibv_cq *cq, *stall_cq;
	struct ibv_qp *qp[2];
	struct ibv_qp *req[STALLED], *resp[STALLED];
	char *buf;
	struct ibv_mr *mr;
};

FIXTURE_SETUP(engine)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, dev_open(&self->d, "rodp0"));
	self->cq = ibv_create_cq(self->d.ctx, 256, NULL, NULL, 0);
	self->stall_cq = ibv_create_cq(self->d.ctx, 2 * STALLED + 16, NULL, NULL, 0);
	ASSERT_NE(NULL, self->cq);
	ASSERT_NE(NULL, self->stall_cq);
	self->buf = mmap(NULL, 4 * LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->buf);
	self->mr = ibv_reg_mr(self->d.pd, self->buf, 4 * LEN, ALL_ACCESS);
	ASSERT_NE(NULL, self->mr);
	for (int i = 0; i < 2; i++) {
		self->qp[i] = make_qp(&self->d, self->cq, self->cq, IBV_QPT_RC, NULL);
		ASSERT_NE(NULL, self->qp[i]);
	}
	for (int i = 0; i < 2; i++)
		ASSERT_EQ(0, rc_connect(self->qp[i], &self->d, self->qp[!i]->qp_num,
					&self->d.gid, &rc_default));
}

FIXTURE_TEARDOWN(engine)
{
	for (int i = 0; i < STALLED; i++) {
		if (self->req[i])
			ibv_destroy_qp(self->req[i]);
		if (self->resp[i])
			ibv_destroy_qp(self->resp[i]);
	}
	for (int i = 0; i < 2; i++)
		if (self->qp[i])
			ibv_destroy_qp(self->qp[i]);
	if (self->mr)
		ibv_dereg_mr(self->mr);
	if (self->stall_cq)
		ibv_destroy_cq(self->stall_cq);
	if (self->cq)
		ibv_destroy_cq(self->cq);
	if (self->buf && self->buf != MAP_FAILED)
		munmap(self->buf, 4 * LEN);
	dev_close(&self->d);
	link_delete("rodp0");
}

/* n signaled RDMA writes on the unrelated pair, one at a time; returns the slowest in ms. */
static long writes(struct __test_metadata *_metadata, FIXTURE_DATA(engine) *self, int n)
{
	long worst = 0;

	for (int i = 0; i < n; i++) {
		struct ibv_wc wc;
		long t0 = now_ms();

		fill(self->buf, LEN, i);
		if (post_send(self->qp[0], IBV_WR_RDMA_WRITE, self->buf, LEN, self->mr->lkey,
			      (uintptr_t)self->buf + LEN, self->mr->rkey, 0, i))
			return -1;
		if (poll1(self->cq, &wc, 20000) != 1 || wc.status != IBV_WC_SUCCESS)
			return -1;
		if (memcmp(self->buf, self->buf + LEN, LEN))
			return -1;
		if (now_ms() - t0 > worst)
			worst = now_ms() - t0;
	}
	return worst;
}

/*
 * 256 requesters each send to a responder without receives, with the longest RNR timer
 * (code 0, 655 ms) and rnr_retry 7 (forever): all of them sit in backoff. An unrelated QP's
 * writes still complete as fast as before (a worker that slept through each backoff would
 * hold the queue for minutes), and once the responders post receives, every held send
 * completes within a few backoff periods.
 */
/* 512 QPs to create and destroy: minutes under TCG on a loaded host. */
TEST_F_TIMEOUT(engine, rnr_backoff_does_not_delay_other_qps, 180)
{
	struct rc_opts o = rc_default;
	struct ibv_wc held;
	long before, during, t0;
	int done = 0;

	o.min_rnr_timer = 0;
	before = writes(_metadata, self, 16);
	ASSERT_LE(0, before);
	for (int i = 0; i < STALLED; i++) {
		self->req[i] = make_qp(&self->d, self->stall_cq, self->stall_cq, IBV_QPT_RC, NULL);
		self->resp[i] = make_qp(&self->d, self->stall_cq, self->stall_cq, IBV_QPT_RC, NULL);
		ASSERT_NE(NULL, self->req[i]);
		ASSERT_NE(NULL, self->resp[i]);
		ASSERT_EQ(0, rc_connect(self->req[i], &self->d, self->resp[i]->qp_num,
					&self->d.gid, &o));
		ASSERT_EQ(0, rc_connect(self->resp[i], &self->d, self->req[i]->qp_num,
					&self->d.gid, &o));
	}
	for (int i = 0; i < STALLED; i++)
		ASSERT_EQ(0, post_send(self->req[i], IBV_WR_SEND, self->buf + 2 * LEN, 64,
				       self->mr->lkey, 0, 0, 0, 1000 + i));
	/* Let every requester meet its first RNR NAK. */
	usleep(300 * 1000);
	during = writes(_metadata, self, 16);
	ASSERT_LE(0, during);
	TH_LOG("slowest write: %ld ms before, %ld ms with %d QPs in RNR backoff",
	       before, during, STALLED);
	/* One RNR period is 655 ms: a write must not wait for one. */
	EXPECT_GT(400 + 4 * before, during);
	/* Nothing completed yet: the sends are held, not dropped. */
	EXPECT_EQ(0, ibv_poll_cq(self->stall_cq, 1, &held));
	for (int i = 0; i < STALLED; i++)
		ASSERT_EQ(0, post_recv(self->resp[i], self->buf + 3 * LEN, 64, self->mr->lkey, i));
	t0 = now_ms();
	while (done < 2 * STALLED && now_ms() - t0 < 30000) {
		struct ibv_wc wc[32];
		int n = ibv_poll_cq(self->stall_cq, 32, wc);

		ASSERT_LE(0, n);
		for (int k = 0; k < n; k++)
			ASSERT_EQ(IBV_WC_SUCCESS, wc[k].status);
		done += n;
		if (!n)
			usleep(1000);
	}
	TH_LOG("held sends completed %ld ms after the receives were posted", now_ms() - t0);
	EXPECT_EQ(2 * STALLED, done);
}

/*
 * A send queue that fails (a write with a bad rkey, then flushed WQEs behind it) while the QP
 * is destroyed: every completion of the QP is in the CQ when destroy_qp returns, none later.
 */
TEST_F(engine, no_completion_after_destroy_qp)
{
	for (int round = 0; round < 50; round++) {
		struct ibv_qp *a, *b;
		struct ibv_wc wc[64];
		int n;

		a = make_qp(&self->d, self->stall_cq, self->stall_cq, IBV_QPT_RC, NULL);
		b = make_qp(&self->d, self->stall_cq, self->stall_cq, IBV_QPT_RC, NULL);
		ASSERT_NE(NULL, a);
		ASSERT_NE(NULL, b);
		ASSERT_EQ(0, rc_connect(a, &self->d, b->qp_num, &self->d.gid, &rc_default));
		ASSERT_EQ(0, rc_connect(b, &self->d, a->qp_num, &self->d.gid, &rc_default));
		for (int i = 0; i < 16; i++)
			ASSERT_EQ(0, post_send(a, IBV_WR_RDMA_WRITE, self->buf, 64, self->mr->lkey,
					       (uintptr_t)self->buf, self->mr->rkey ^ 0x55, 0, i));
		if (round & 1)
			usleep(round * 20);
		ASSERT_EQ(0, ibv_destroy_qp(a));
		ASSERT_EQ(0, ibv_destroy_qp(b));
		while ((n = ibv_poll_cq(self->stall_cq, 64, wc)) > 0)
			;
		ASSERT_EQ(0, n);
		usleep(20 * 1000);
		EXPECT_EQ(0, ibv_poll_cq(self->stall_cq, 64, wc));
	}
}

TEST_HARNESS_MAIN
