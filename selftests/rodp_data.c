// SPDX-License-Identifier: GPL-2.0
/*
 * rodp data path: RC operations between two QPs with data checked end to end, and every error
 * rule of the data path answered with the right completion status, never a kernel warning.
 */
#include "rodp_verbs.h"
#include "rodp_harness.h"

#define BUF (1 << 20)

FIXTURE(rc) {
	struct dev d;
	struct rc_pair p;
};

static void rc_open(struct __test_metadata *_metadata, FIXTURE_DATA(rc) *self,
		    const struct rc_opts *o)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, dev_open(&self->d, "rodp0"));
	ASSERT_EQ(0, rc_pair_open(&self->p, &self->d, NULL, BUF, o));
}

FIXTURE_SETUP(rc)
{
	rc_open(_metadata, self, &rc_default);
}

static void rc_close(FIXTURE_DATA(rc) *self)
{
	rc_pair_close(&self->p);
	dev_close(&self->d);
	link_delete("rodp0");
}

FIXTURE_TEARDOWN(rc)
{
	rc_close(self);
}

#define A 0
#define B 1

TEST_F(rc, send_recv_data)
{
	struct ibv_wc wc;

	fill(self->p.buf[A], 65536, 1);
	memset(self->p.buf[B], 0, 65536);
	ASSERT_EQ(0, post_recv(self->p.qp[B], self->p.buf[B], 65536, self->p.mr[B]->lkey, 11));
	ASSERT_EQ(0, post_send(self->p.qp[A], IBV_WR_SEND, self->p.buf[A], 65536,
			       self->p.mr[A]->lkey, 0, 0, 0, 22));
	ASSERT_EQ(1, poll1(self->p.cq[A], &wc, 10000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(IBV_WC_SEND, wc.opcode);
	EXPECT_EQ(22, wc.wr_id);
	ASSERT_EQ(1, poll1(self->p.cq[B], &wc, 10000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(IBV_WC_RECV, wc.opcode);
	EXPECT_EQ(11, wc.wr_id);
	EXPECT_EQ(65536, wc.byte_len);
	EXPECT_EQ(self->p.qp[B]->qp_num, wc.qp_num);
	EXPECT_EQ(0, wc.wc_flags & IBV_WC_WITH_IMM);
	EXPECT_EQ(0, memcmp(self->p.buf[A], self->p.buf[B], 65536));
}

TEST_F(rc, send_with_imm_and_inline)
{
	struct ibv_sge sge = { .addr = (uintptr_t)self->p.buf[A], .length = 48,
			       .lkey = self->p.mr[A]->lkey };
	struct ibv_send_wr wr = { .wr_id = 5, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND_WITH_IMM, .imm_data = htonl(0x1234abcd),
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE }, *bad;
	struct ibv_wc wc;

	fill(self->p.buf[A], 48, 2);
	ASSERT_EQ(0, post_recv(self->p.qp[B], self->p.buf[B], 4096, self->p.mr[B]->lkey, 6));
	ASSERT_EQ(0, ibv_post_send(self->p.qp[A], &wr, &bad));
	/* Inline data was copied at post time: changing the buffer now must not matter. */
	memset(self->p.buf[A], 0xee, 48);
	EXPECT_WC(self->p.cq[A], IBV_WC_SUCCESS, IBV_WC_SEND, 5);
	ASSERT_EQ(1, poll1(self->p.cq[B], &wc, 10000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(48, wc.byte_len);
	EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
	EXPECT_EQ(htonl(0x1234abcd), wc.imm_data);
	fill(self->p.buf[A], 48, 2);
	EXPECT_EQ(0, memcmp(self->p.buf[A], self->p.buf[B], 48));
}

TEST_F(rc, multi_sge_send_to_multi_sge_recv)
{
	struct ibv_sge s[3] = {
		{ (uintptr_t)self->p.buf[A], 1000, self->p.mr[A]->lkey },
		{ (uintptr_t)self->p.buf[A] + 5000, 3000, self->p.mr[A]->lkey },
		{ (uintptr_t)self->p.buf[A] + 20000, 96, self->p.mr[A]->lkey },
	};
	struct ibv_sge r[2] = {
		{ (uintptr_t)self->p.buf[B] + 100, 2500, self->p.mr[B]->lkey },
		{ (uintptr_t)self->p.buf[B] + 9000, 4000, self->p.mr[B]->lkey },
	};
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = s, .num_sge = 3, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_recv_wr rw = { .wr_id = 2, .sg_list = r, .num_sge = 2 }, *rbad;
	char expect[4096], got[4096];
	struct ibv_wc wc;

	fill(self->p.buf[A], BUF / 4, 3);
	ASSERT_EQ(0, ibv_post_recv(self->p.qp[B], &rw, &rbad));
	ASSERT_EQ(0, ibv_post_send(self->p.qp[A], &wr, &bad));
	EXPECT_WC(self->p.cq[A], IBV_WC_SUCCESS, IBV_WC_SEND, 1);
	ASSERT_EQ(1, poll1(self->p.cq[B], &wc, 10000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(4096, wc.byte_len);
	memcpy(expect, self->p.buf[A], 1000);
	memcpy(expect + 1000, self->p.buf[A] + 5000, 3000);
	memcpy(expect + 4000, self->p.buf[A] + 20000, 96);
	memcpy(got, self->p.buf[B] + 100, 2500);
	memcpy(got + 2500, self->p.buf[B] + 9000, 1596);
	EXPECT_EQ(0, memcmp(expect, got, 4096));
}

TEST_F(rc, rdma_write_and_write_with_imm)
{
	struct ibv_sge sge = { (uintptr_t)self->p.buf[A], 8192, self->p.mr[A]->lkey };
	struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .imm_data = htonl(77),
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;

	fill(self->p.buf[A], 8192, 4);
	memset(self->p.buf[B], 0, 3 * 8192);
	ASSERT_EQ(0, post_send(self->p.qp[A], IBV_WR_RDMA_WRITE, self->p.buf[A], 8192,
			       self->p.mr[A]->lkey, (uintptr_t)self->p.buf[B] + 8192,
			       self->p.mr[B]->rkey, 0, 8));
	EXPECT_WC(self->p.cq[A], IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 8);
	EXPECT_EQ(0, memcmp(self->p.buf[A], self->p.buf[B] + 8192, 8192));
	/* No receive is consumed by a plain write. */
	EXPECT_EQ(0, ibv_poll_cq(self->p.cq[B], 1, &wc));

	ASSERT_EQ(0, post_recv(self->p.qp[B], self->p.buf[B], 16, self->p.mr[B]->lkey, 10));
	wr.wr.rdma.remote_addr = (uintptr_t)self->p.buf[B] + 2 * 8192;
	wr.wr.rdma.rkey = self->p.mr[B]->rkey;
	ASSERT_EQ(0, ibv_post_send(self->p.qp[A], &wr, &bad));
	EXPECT_WC(self->p.cq[A], IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 9);
	ASSERT_EQ(1, poll1(self->p.cq[B], &wc, 10000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(IBV_WC_RECV_RDMA_WITH_IMM, wc.opcode);
	EXPECT_EQ(10, wc.wr_id);
	EXPECT_EQ(htonl(77), wc.imm_data);
	EXPECT_EQ(0, memcmp(self->p.buf[A], self->p.buf[B] + 2 * 8192, 8192));
}

TEST_F(rc, rdma_read)
{
	struct ibv_wc wc;

	fill(self->p.buf[B], 100000, 5);
	memset(self->p.buf[A], 0, 100000);
	ASSERT_EQ(0, post_send(self->p.qp[A], IBV_WR_RDMA_READ, self->p.buf[A] + 3, 100000,
			       self->p.mr[A]->lkey, (uintptr_t)self->p.buf[B], self->p.mr[B]->rkey,
			       0, 12));
	ASSERT_EQ(1, poll1(self->p.cq[A], &wc, 10000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(IBV_WC_RDMA_READ, wc.opcode);
	EXPECT_EQ(100000, wc.byte_len);
	EXPECT_EQ(0, memcmp(self->p.buf[A] + 3, self->p.buf[B], 100000));
}

TEST_F(rc, atomics)
{
	uint64_t *remote = (uint64_t *)(self->p.buf[B] + 64);
	uint64_t *local = (uint64_t *)self->p.buf[A];
	struct ibv_wc wc;

	*remote = 100;
	ASSERT_EQ(0, post_atomic(self->p.qp[A], IBV_WR_ATOMIC_FETCH_AND_ADD, local,
				 self->p.mr[A]->lkey, (uintptr_t)remote, self->p.mr[B]->rkey,
				 5, 0));
	ASSERT_EQ(1, poll1(self->p.cq[A], &wc, 10000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(IBV_WC_FETCH_ADD, wc.opcode);
	EXPECT_EQ(100, *local);
	EXPECT_EQ(105, *remote);
	/* Compare fails: no swap, old value returned. */
	ASSERT_EQ(0, post_atomic(self->p.qp[A], IBV_WR_ATOMIC_CMP_AND_SWP, local,
				 self->p.mr[A]->lkey, (uintptr_t)remote, self->p.mr[B]->rkey,
				 1, 9));
	ASSERT_EQ(1, poll1(self->p.cq[A], &wc, 10000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(IBV_WC_COMP_SWAP, wc.opcode);
	EXPECT_EQ(105, *local);
	EXPECT_EQ(105, *remote);
	ASSERT_EQ(0, post_atomic(self->p.qp[A], IBV_WR_ATOMIC_CMP_AND_SWP, local,
				 self->p.mr[A]->lkey, (uintptr_t)remote, self->p.mr[B]->rkey,
				 105, 9));
	ASSERT_EQ(1, poll1(self->p.cq[A], &wc, 10000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(105, *local);
	EXPECT_EQ(9, *remote);
}

/* A failed WR puts the QP in error; what follows it is flushed. */
static void expect_error_then_flush(struct __test_metadata *_metadata,
				    FIXTURE_DATA(rc) *self, enum ibv_wc_status status)
{
	struct ibv_wc wc;

	ASSERT_EQ(1, poll1(self->p.cq[A], &wc, 10000));
	EXPECT_EQ(status, wc.status);
	EXPECT_EQ(1, wc.wr_id);
	ASSERT_EQ(0, post_send(self->p.qp[A], IBV_WR_SEND, self->p.buf[A], 8, self->p.mr[A]->lkey,
			       0, 0, 0, 2));
	ASSERT_EQ(1, poll1(self->p.cq[A], &wc, 10000));
	EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status);
	EXPECT_EQ(2, wc.wr_id);
	EXPECT_EQ(IBV_QPS_ERR, qp_state(self->p.qp[A]));
}

TEST_F(rc, bad_lkey_is_local_protection_error)
{
	ASSERT_EQ(0, post_send(self->p.qp[A], IBV_WR_SEND, self->p.buf[A], 64,
			       self->p.mr[A]->lkey ^ 0x100, 0, 0, 0, 1));
	expect_error_then_flush(_metadata, self, IBV_WC_LOC_PROT_ERR);
}

TEST_F(rc, lkey_out_of_range_is_local_protection_error)
{
	ASSERT_EQ(0, post_send(self->p.qp[A], IBV_WR_SEND, self->p.buf[A] + BUF - 8, 64,
			       self->p.mr[A]->lkey, 0, 0, 0, 1));
	expect_error_then_flush(_metadata, self, IBV_WC_LOC_PROT_ERR);
}

TEST_F(rc, bad_rkey_is_remote_access_error)
{
	ASSERT_EQ(0, post_send(self->p.qp[A], IBV_WR_RDMA_WRITE, self->p.buf[A], 64,
			       self->p.mr[A]->lkey, (uintptr_t)self->p.buf[B],
			       self->p.mr[B]->rkey + 0x100, 0, 1));
	expect_error_then_flush(_metadata, self, IBV_WC_REM_ACCESS_ERR);
	/* The responder went to error too. */
	EXPECT_EQ(IBV_QPS_ERR, qp_state(self->p.qp[B]));
}

TEST_F(rc, write_beyond_mr_is_remote_access_error)
{
	ASSERT_EQ(0, post_send(self->p.qp[A], IBV_WR_RDMA_WRITE, self->p.buf[A], 64,
			       self->p.mr[A]->lkey, (uintptr_t)self->p.buf[B] + BUF - 32,
			       self->p.mr[B]->rkey, 0, 1));
	expect_error_then_flush(_metadata, self, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(rc, mr_without_remote_write_refuses_write)
{
	struct ibv_mr *ro = ibv_reg_mr(self->d.pd, self->p.buf[B], 4096,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);

	ASSERT_NE(NULL, ro);
	ASSERT_EQ(0, post_send(self->p.qp[A], IBV_WR_RDMA_WRITE, self->p.buf[A], 64,
			       self->p.mr[A]->lkey, (uintptr_t)self->p.buf[B], ro->rkey, 0, 1));
	expect_error_then_flush(_metadata, self, IBV_WC_REM_ACCESS_ERR);
	ibv_dereg_mr(ro);
}

TEST_F(rc, mr_without_remote_atomic_refuses_atomic)
{
	struct ibv_mr *ro = ibv_reg_mr(self->d.pd, self->p.buf[B], 4096,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);

	ASSERT_NE(NULL, ro);
	*(uint64_t *)self->p.buf[B] = 0;
	ASSERT_EQ(0, post_atomic(self->p.qp[A], IBV_WR_ATOMIC_FETCH_AND_ADD, self->p.buf[A],
				 self->p.mr[A]->lkey, (uintptr_t)self->p.buf[B], ro->rkey, 1, 0));
	expect_error_then_flush(_metadata, self, IBV_WC_REM_ACCESS_ERR);
	ibv_dereg_mr(ro);
}

TEST_F(rc, read_into_mr_without_local_write_fails)
{
	struct ibv_mr *ro = ibv_reg_mr(self->d.pd, self->p.buf[A], 4096, IBV_ACCESS_REMOTE_READ);

	ASSERT_NE(NULL, ro);
	ASSERT_EQ(0, post_send(self->p.qp[A], IBV_WR_RDMA_READ, self->p.buf[A], 64, ro->lkey,
			       (uintptr_t)self->p.buf[B], self->p.mr[B]->rkey, 0, 1));
	expect_error_then_flush(_metadata, self, IBV_WC_LOC_PROT_ERR);
	ibv_dereg_mr(ro);
}

TEST_F(rc, stale_keys_fail_after_dereg)
{
	uint32_t rkey = self->p.mr[B]->rkey;
	struct ibv_mr *again;

	ASSERT_EQ(0, ibv_dereg_mr(self->p.mr[B]));
	/* A new registration of the same memory gets a different key. */
	again = ibv_reg_mr(self->d.pd, self->p.buf[B], BUF, ALL_ACCESS);
	ASSERT_NE(NULL, again);
	EXPECT_NE(rkey, again->rkey);
	self->p.mr[B] = again;
	ASSERT_EQ(0, post_send(self->p.qp[A], IBV_WR_RDMA_WRITE, self->p.buf[A], 64,
			       self->p.mr[A]->lkey, (uintptr_t)self->p.buf[B], rkey, 0, 1));
	expect_error_then_flush(_metadata, self, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(rc, receive_too_small_is_length_error_both_sides)
{
	struct ibv_wc wc;

	ASSERT_EQ(0, post_recv(self->p.qp[B], self->p.buf[B], 100, self->p.mr[B]->lkey, 3));
	ASSERT_EQ(0, post_send(self->p.qp[A], IBV_WR_SEND, self->p.buf[A], 200, self->p.mr[A]->lkey,
			       0, 0, 0, 1));
	ASSERT_EQ(1, poll1(self->p.cq[B], &wc, 10000));
	EXPECT_EQ(IBV_WC_LOC_LEN_ERR, wc.status);
	EXPECT_EQ(3, wc.wr_id);
	expect_error_then_flush(_metadata, self, IBV_WC_REM_INV_REQ_ERR);
}

TEST_F(rc, flush_on_modify_to_error)
{
	struct ibv_wc wc;

	for (int i = 0; i < 5; i++)
		ASSERT_EQ(0, post_recv(self->p.qp[B], self->p.buf[B], 64, self->p.mr[B]->lkey,
				       100 + i));
	ASSERT_EQ(0, qp_to_err(self->p.qp[B]));
	for (int i = 0; i < 5; i++) {
		ASSERT_EQ(1, poll1(self->p.cq[B], &wc, 10000));
		EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status);
		EXPECT_EQ(100 + i, wc.wr_id);
		EXPECT_EQ(self->p.qp[B]->qp_num, wc.qp_num);
	}
	EXPECT_EQ(0, ibv_poll_cq(self->p.cq[B], 1, &wc));
}

TEST_F(rc, bad_state_transitions_are_einval)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	struct ibv_qp *qp = make_qp(&self->d, self->p.cq[A], self->p.cq[A], IBV_QPT_RC, NULL);

	ASSERT_NE(NULL, qp);
	/* RESET -> RTR skips INIT. */
	EXPECT_EQ(EINVAL, ibv_modify_qp(qp, &a, IBV_QP_STATE));
	/* RESET -> INIT without the required attributes. */
	a.qp_state = IBV_QPS_INIT;
	EXPECT_EQ(EINVAL, ibv_modify_qp(qp, &a, IBV_QP_STATE));
	/* Out-of-range values. */
	a.port_num = 2;
	EXPECT_EQ(EINVAL, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	a.port_num = 1;
	a.pkey_index = 3;
	EXPECT_EQ(EINVAL, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	a.pkey_index = 0;
	EXPECT_EQ(0, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				   IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	EXPECT_EQ(IBV_QPS_INIT, qp_state(qp));
	/* INIT -> RTS skips RTR. */
	a.qp_state = IBV_QPS_RTS;
	EXPECT_EQ(EINVAL, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
	EXPECT_EQ(IBV_QPS_INIT, qp_state(qp));
	EXPECT_EQ(0, ibv_destroy_qp(qp));
}

TEST_F(rc, post_send_before_rts_is_einval)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	struct ibv_qp *qp = make_qp(&self->d, self->p.cq[A], self->p.cq[A], IBV_QPT_RC, NULL);
	struct ibv_wc wc;

	ASSERT_NE(NULL, qp);
	/* RESET, then INIT: the doorbell is refused, nothing completes. */
	EXPECT_EQ(EINVAL, post_send(qp, IBV_WR_SEND, self->p.buf[A], 8, self->p.mr[A]->lkey,
				    0, 0, 0, 1));
	ASSERT_EQ(0, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				   IBV_QP_ACCESS_FLAGS));
	EXPECT_EQ(EINVAL, post_send(qp, IBV_WR_SEND, self->p.buf[A], 8, self->p.mr[A]->lkey,
				    0, 0, 0, 2));
	EXPECT_EQ(0, poll1(self->p.cq[A], &wc, 300));
	EXPECT_EQ(0, ibv_destroy_qp(qp));
}

TEST_F(rc, query_qp_reports_what_was_set)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;

	ASSERT_EQ(0, ibv_query_qp(self->p.qp[A], &a, IBV_QP_STATE | IBV_QP_CAP | IBV_QP_DEST_QPN,
				  &i));
	EXPECT_EQ(IBV_QPS_RTS, a.qp_state);
	EXPECT_EQ(self->p.qp[B]->qp_num, a.dest_qp_num);
	EXPECT_EQ(7, a.rnr_retry);
	EXPECT_EQ(14, a.timeout);
	EXPECT_EQ(4, a.max_rd_atomic);
	EXPECT_EQ(ALL_ACCESS, a.qp_access_flags);
	EXPECT_LE(64, a.cap.max_send_wr);
	EXPECT_EQ(IBV_QPT_RC, i.qp_type);
	EXPECT_EQ(0, memcmp(&self->d.gid, &a.ah_attr.grh.dgid, 16));
}

TEST_F(rc, rnr_retry_then_receive_arrives)
{
	struct ibv_wc wc;

	fill(self->p.buf[A], 512, 8);
	ASSERT_EQ(0, post_send(self->p.qp[A], IBV_WR_SEND, self->p.buf[A], 512, self->p.mr[A]->lkey,
			       0, 0, 0, 1));
	usleep(300 * 1000);
	EXPECT_EQ(0, ibv_poll_cq(self->p.cq[A], 1, &wc));
	ASSERT_EQ(0, post_recv(self->p.qp[B], self->p.buf[B], 512, self->p.mr[B]->lkey, 2));
	EXPECT_WC(self->p.cq[A], IBV_WC_SUCCESS, IBV_WC_SEND, 1);
	EXPECT_WC(self->p.cq[B], IBV_WC_SUCCESS, IBV_WC_RECV, 2);
	EXPECT_EQ(0, memcmp(self->p.buf[A], self->p.buf[B], 512));
}

TEST_F(rc, counters_count_exactly)
{
	static const char *names[] = { "sent_pkts", "rcvd_pkts", "sent_bytes", "rcvd_bytes",
				       "rdma_sends", "rdma_recvs", "send_err", "rcvd_err" };
	/* 4096 bytes at MTU 1024 is 4 packets; a 3000-byte write is 3. */
	static const long delta[] = { 7, 7, 7096, 7096, 1, 1, 0, 0 };
	long before[8];
	char out[4096];

	for (int i = 0; i < 8; i++)
		before[i] = hw_counter("rodp0", names[i]);
	ASSERT_EQ(0, post_recv(self->p.qp[B], self->p.buf[B], 4096, self->p.mr[B]->lkey, 1));
	ASSERT_EQ(0, post_send(self->p.qp[A], IBV_WR_SEND, self->p.buf[A], 4096,
			       self->p.mr[A]->lkey, 0, 0, 0, 2));
	EXPECT_WC(self->p.cq[A], IBV_WC_SUCCESS, IBV_WC_SEND, 2);
	ASSERT_EQ(0, post_send(self->p.qp[A], IBV_WR_RDMA_WRITE, self->p.buf[A], 3000,
			       self->p.mr[A]->lkey, (uintptr_t)self->p.buf[B], self->p.mr[B]->rkey,
			       0, 3));
	EXPECT_WC(self->p.cq[A], IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 3);
	for (int i = 0; i < 8; i++) {
		EXPECT_EQ(delta[i], hw_counter("rodp0", names[i]) - before[i]);
	}
	/* The same counters through rdma netlink. */
	ASSERT_EQ(0, sh(out, sizeof(out), "rdma statistic show link rodp0/1"));
	EXPECT_NE(NULL, strstr(out, "sent_bytes"));
	EXPECT_NE(NULL, strstr(out, "rcvd_rnr_err"));
}

FIXTURE(rc_limits) {
	FIXTURE_DATA(rc) rc;
};

FIXTURE_SETUP(rc_limits)
{
	struct rc_opts o = rc_default;

	o.rnr_retry = 1;
	o.rd_atomic = 0;
	rc_open(_metadata, &self->rc, &o);
}

FIXTURE_TEARDOWN(rc_limits)
{
	rc_close(&self->rc);
}

TEST_F(rc_limits, rnr_retries_exhausted)
{
	struct rc_pair *rc = &self->rc.p;
	struct ibv_wc wc;

	ASSERT_EQ(0, post_send(rc->qp[A], IBV_WR_SEND, rc->buf[A], 64, rc->mr[A]->lkey, 0, 0, 0,
			       1));
	ASSERT_EQ(1, poll1(rc->cq[A], &wc, 10000));
	EXPECT_EQ(IBV_WC_RNR_RETRY_EXC_ERR, wc.status);
	EXPECT_EQ(IBV_QPS_ERR, qp_state(rc->qp[A]));
}

TEST_F(rc_limits, read_without_rd_atomic_credit_fails)
{
	struct rc_pair *rc = &self->rc.p;
	struct ibv_wc wc;

	ASSERT_EQ(0, post_send(rc->qp[A], IBV_WR_RDMA_READ, rc->buf[A], 64, rc->mr[A]->lkey,
			       (uintptr_t)rc->buf[B], rc->mr[B]->rkey, 0, 1));
	ASSERT_EQ(1, poll1(rc->cq[A], &wc, 10000));
	EXPECT_NE(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(IBV_QPS_ERR, qp_state(rc->qp[A]));
}

TEST(rc_between_two_devices)
{
	struct dev d[2];
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	struct ibv_mr *mr[2];
	static char buf[2][8192];
	struct ibv_wc wc;

	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, link_add("rodp1", "veth1"));
	ASSERT_EQ(0, dev_open(&d[0], "rodp0"));
	ASSERT_EQ(0, dev_open(&d[1], "rodp1"));
	ASSERT_NE(0, memcmp(&d[0].gid, &d[1].gid, 16));
	for (int i = 0; i < 2; i++) {
		cq[i] = ibv_create_cq(d[i].ctx, 16, NULL, NULL, 0);
		ASSERT_NE(NULL, cq[i]);
		qp[i] = make_qp(&d[i], cq[i], cq[i], IBV_QPT_RC, NULL);
		ASSERT_NE(NULL, qp[i]);
		mr[i] = ibv_reg_mr(d[i].pd, buf[i], sizeof(buf[i]), ALL_ACCESS);
		ASSERT_NE(NULL, mr[i]);
	}
	for (int i = 0; i < 2; i++)
		ASSERT_EQ(0, rc_connect(qp[i], &d[i], qp[!i]->qp_num, &d[!i].gid, &rc_default));
	fill(buf[0], 8192, 9);
	ASSERT_EQ(0, post_recv(qp[1], buf[1], 8192, mr[1]->lkey, 1));
	ASSERT_EQ(0, post_send(qp[0], IBV_WR_SEND, buf[0], 8192, mr[0]->lkey, 0, 0, 0, 2));
	ASSERT_EQ(1, poll1(cq[1], &wc, 10000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(0, memcmp(buf[0], buf[1], 8192));
	ASSERT_EQ(1, poll1(cq[0], &wc, 10000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	for (int i = 0; i < 2; i++) {
		ibv_destroy_qp(qp[i]);
		ibv_dereg_mr(mr[i]);
		ibv_destroy_cq(cq[i]);
		dev_close(&d[i]);
	}
	link_delete("rodp0");
	link_delete("rodp1");
}

TEST_HARNESS_MAIN
