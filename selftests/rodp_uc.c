// SPDX-License-Identifier: GPL-2.0
/*
 * rodp UC (unreliable connection) between two QPs of one device: SENDs and WRITEs with and
 * without immediate data arrive whole; what the responder cannot take (no receive, a receive
 * too small, a bad key) is lost, its requester completes successfully all the same and the
 * responder's QP goes on; READs, atomics and SEND with invalidate are not UC operations.
 */
#include "rodp_verbs.h"
#include "rodp_harness.h"

#define BUF (1 << 20)
#define A 0
#define B 1

FIXTURE(uc) {
	struct dev d;
	struct rc_pair p;
};

FIXTURE_SETUP(uc)
{
	struct rc_opts o = rc_default;

	o.uc = 1;
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, dev_open(&self->d, "rodp0"));
	ASSERT_EQ(0, rc_pair_open(&self->p, &self->d, NULL, BUF, &o));
}

FIXTURE_TEARDOWN(uc)
{
	rc_pair_close(&self->p);
	dev_close(&self->d);
	link_delete("rodp0");
}

static long cnt(const char *name)
{
	return hw_counter("rodp0", name);
}

TEST_F(uc, is_a_uc_qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;

	ASSERT_EQ(0, ibv_query_qp(self->p.qp[A], &a, IBV_QP_STATE | IBV_QP_PATH_MTU, &i));
	EXPECT_EQ(IBV_QPT_UC, i.qp_type);
	EXPECT_EQ(IBV_QPS_RTS, a.qp_state);
	EXPECT_EQ(IBV_MTU_1024, a.path_mtu);
}

TEST_F(uc, sends_and_writes_arrive_whole)
{
	struct rc_pair *p = &self->p;
	struct ibv_send_wr wr = { .wr_id = 3, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_sge sge;
	struct ibv_wc wc;

	/* A SEND of ten packets at MTU 1024. */
	fill(p->buf[A], 10000, 1);
	ASSERT_EQ(0, post_recv(p->qp[B], p->buf[B], 16384, p->mr[B]->lkey, 1));
	ASSERT_EQ(0, post_send(p->qp[A], IBV_WR_SEND, p->buf[A], 10000, p->mr[A]->lkey, 0, 0, 0,
			       1));
	EXPECT_WC(p->cq[A], IBV_WC_SUCCESS, IBV_WC_SEND, 1);
	ASSERT_EQ(1, poll1(p->cq[B], &wc, 10000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(IBV_WC_RECV, wc.opcode);
	EXPECT_EQ(10000, wc.byte_len);
	EXPECT_EQ(p->qp[A]->qp_num, wc.src_qp);
	EXPECT_EQ(0, memcmp(p->buf[A], p->buf[B], 10000));
	/* A WRITE of 5,000 bytes lands where it is aimed, consuming no receive. */
	fill(p->buf[A] + 65536, 5000, 2);
	ASSERT_EQ(0, post_send(p->qp[A], IBV_WR_RDMA_WRITE, p->buf[A] + 65536, 5000,
			       p->mr[A]->lkey, (uintptr_t)p->buf[B] + 131072, p->mr[B]->rkey, 0,
			       2));
	EXPECT_WC(p->cq[A], IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 2);
	EXPECT_EQ(0, memcmp(p->buf[A] + 65536, p->buf[B] + 131072, 5000));
	EXPECT_EQ(0, poll1(p->cq[B], &wc, 100));
	/* A WRITE with immediate data completes a receive with it. */
	fill(p->buf[A] + 65536, 300, 3);
	ASSERT_EQ(0, post_recv(p->qp[B], p->buf[B], 16, p->mr[B]->lkey, 9));
	sge = (struct ibv_sge){ .addr = (uintptr_t)p->buf[A] + 65536, .length = 300,
				.lkey = p->mr[A]->lkey };
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.imm_data = htonl(0x1234);
	wr.wr.rdma.remote_addr = (uintptr_t)p->buf[B] + 200000;
	wr.wr.rdma.rkey = p->mr[B]->rkey;
	ASSERT_EQ(0, ibv_post_send(p->qp[A], &wr, &bad));
	EXPECT_WC(p->cq[A], IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 3);
	ASSERT_EQ(1, poll1(p->cq[B], &wc, 10000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(IBV_WC_RECV_RDMA_WITH_IMM, wc.opcode);
	EXPECT_EQ(9, wc.wr_id);
	EXPECT_EQ(300, wc.byte_len);
	EXPECT_EQ(htonl(0x1234), wc.imm_data);
	EXPECT_EQ(0, memcmp(p->buf[A] + 65536, p->buf[B] + 200000, 300));
}

TEST_F(uc, a_send_without_a_receive_is_lost)
{
	struct rc_pair *p = &self->p;
	long rnr = cnt("send_rnr_err");
	struct ibv_wc wc;

	fill(p->buf[A], 64, 4);
	ASSERT_EQ(0, post_send(p->qp[A], IBV_WR_SEND, p->buf[A], 64, p->mr[A]->lkey, 0, 0, 0, 1));
	EXPECT_WC(p->cq[A], IBV_WC_SUCCESS, IBV_WC_SEND, 1);
	/* No RNR NAK, no retry: the message is gone. */
	EXPECT_EQ(rnr, cnt("send_rnr_err"));
	ASSERT_EQ(0, post_recv(p->qp[B], p->buf[B], 4096, p->mr[B]->lkey, 2));
	EXPECT_EQ(0, poll1(p->cq[B], &wc, 300));
	fill(p->buf[A], 64, 5);
	ASSERT_EQ(0, post_send(p->qp[A], IBV_WR_SEND, p->buf[A], 64, p->mr[A]->lkey, 0, 0, 0, 3));
	EXPECT_WC(p->cq[A], IBV_WC_SUCCESS, IBV_WC_SEND, 3);
	EXPECT_WC(p->cq[B], IBV_WC_SUCCESS, IBV_WC_RECV, 2);
	EXPECT_EQ(0, memcmp(p->buf[A], p->buf[B], 64));
}

TEST_F(uc, a_receive_too_small_completes_in_error_and_the_qp_goes_on)
{
	struct rc_pair *p = &self->p;

	ASSERT_EQ(0, post_recv(p->qp[B], p->buf[B], 16, p->mr[B]->lkey, 1));
	ASSERT_EQ(0, post_send(p->qp[A], IBV_WR_SEND, p->buf[A], 64, p->mr[A]->lkey, 0, 0, 0, 1));
	/* The requester never learns. */
	EXPECT_WC(p->cq[A], IBV_WC_SUCCESS, IBV_WC_SEND, 1);
	EXPECT_WC(p->cq[B], IBV_WC_LOC_LEN_ERR, 0, 1);
	EXPECT_EQ(IBV_QPS_RTS, qp_state(p->qp[B]));
	EXPECT_EQ(IBV_QPS_RTS, qp_state(p->qp[A]));
	fill(p->buf[A], 64, 6);
	ASSERT_EQ(0, post_recv(p->qp[B], p->buf[B], 4096, p->mr[B]->lkey, 2));
	ASSERT_EQ(0, post_send(p->qp[A], IBV_WR_SEND, p->buf[A], 64, p->mr[A]->lkey, 0, 0, 0, 2));
	EXPECT_WC(p->cq[A], IBV_WC_SUCCESS, IBV_WC_SEND, 2);
	EXPECT_WC(p->cq[B], IBV_WC_SUCCESS, IBV_WC_RECV, 2);
	EXPECT_EQ(0, memcmp(p->buf[A], p->buf[B], 64));
}

TEST_F(uc, a_write_with_a_bad_key_is_dropped)
{
	struct rc_pair *p = &self->p;
	long errs = cnt("rcvd_err");
	uint8_t zero[64] = { 0 };
	struct ibv_wc wc;

	fill(p->buf[A], 64, 7);
	ASSERT_EQ(0, post_send(p->qp[A], IBV_WR_RDMA_WRITE, p->buf[A], 64, p->mr[A]->lkey,
			       (uintptr_t)p->buf[B], p->mr[B]->rkey ^ 0x100, 0, 1));
	EXPECT_WC(p->cq[A], IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 1);
	EXPECT_EQ(0, memcmp(p->buf[B], zero, 64));
	EXPECT_EQ(errs + 1, cnt("rcvd_err"));
	EXPECT_EQ(IBV_QPS_RTS, qp_state(p->qp[B]));
	EXPECT_EQ(0, poll1(p->cq[B], &wc, 100));
	/* Beyond the MR: dropped too. */
	ASSERT_EQ(0, post_send(p->qp[A], IBV_WR_RDMA_WRITE, p->buf[A], 64, p->mr[A]->lkey,
			       (uintptr_t)p->buf[B] + BUF - 32, p->mr[B]->rkey, 0, 2));
	EXPECT_WC(p->cq[A], IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 2);
	EXPECT_EQ(errs + 2, cnt("rcvd_err"));
	/* The QPs go on. */
	ASSERT_EQ(0, post_send(p->qp[A], IBV_WR_RDMA_WRITE, p->buf[A], 64, p->mr[A]->lkey,
			       (uintptr_t)p->buf[B], p->mr[B]->rkey, 0, 3));
	EXPECT_WC(p->cq[A], IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 3);
	EXPECT_EQ(0, memcmp(p->buf[A], p->buf[B], 64));
}

/* A READ, an atomic or a SEND with invalidate on UC fails locally (or is refused at posting). */
TEST_F(uc, reads_atomics_and_send_with_invalidate_are_no_uc_operations)
{
	static const enum ibv_wr_opcode ops[] = {
		IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_SEND_WITH_INV,
	};
	struct rc_pair *p = &self->p;
	struct ibv_wc wc;

	for (int i = 0; i < 3; i++) {
		struct ibv_qp_attr r = { .qp_state = IBV_QPS_RESET };
		int ret;

		ASSERT_EQ(0, ibv_modify_qp(p->qp[A], &r, IBV_QP_STATE));
		ASSERT_EQ(0, rc_connect(p->qp[A], &self->d,
					p->qp[B]->qp_num, &self->d.gid, &p->o));
		if (ops[i] == IBV_WR_ATOMIC_FETCH_AND_ADD)
			ret = post_atomic(p->qp[A], ops[i], p->buf[A], p->mr[A]->lkey,
					  (uintptr_t)p->buf[B], p->mr[B]->rkey, 1, 0);
		else
			ret = post_send(p->qp[A], ops[i], p->buf[A], 8, p->mr[A]->lkey,
					(uintptr_t)p->buf[B], p->mr[B]->rkey, 0, 1);
		if (ret)
			continue;
		ASSERT_EQ(1, poll1(p->cq[A], &wc, 10000));
		EXPECT_EQ(IBV_WC_LOC_QP_OP_ERR, wc.status) TH_LOG("opcode %d", ops[i]);
		EXPECT_EQ(IBV_QPS_ERR, qp_state(p->qp[A]));
	}
}

TEST_HARNESS_MAIN
