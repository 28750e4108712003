// SPDX-License-Identifier: GPL-2.0
/*
 * rodp ATOMIC WRITE and FLUSH between two RC QPs of one device, posted with ibv_wr_atomic_write
 * and ibv_wr_flush: an atomic write stores its 8 bytes where it is aimed (ODP memory too) and
 * nowhere else; a FLUSH of the global placement type completes at the range and the MR level;
 * every rule (alignment, rights of the QP and of the MR, range, the persistent type rodp does
 * not offer) ends in an error completion: those rxe gives, but for a responder QP without the
 * right (a remote access error in rodp, as for every right; an invalid request in rxe) and a
 * FLUSH of an unknown placement type or level (an invalid request; rxe ignores them).
 */
#include <sys/mman.h>
#include "rodp_verbs.h"
#include "rodp_harness.h"

#define BUF 65536
#define A 0
#define B 1

#define QP_ACCESS (ALL_ACCESS | ACCESS_FLUSH_GLOBAL | ACCESS_FLUSH_PERSISTENT)

FIXTURE(fl) {
	struct dev d;
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	uint8_t *buf[2];
	struct ibv_mr *mr[2];
	struct ibv_wc wc;
};

/* Both QPs (back) to RTS, connected to each other; B allows access. */
static int connect_pair(FIXTURE_DATA(fl) *self, int access)
{
	struct ibv_qp_attr r = { .qp_state = IBV_QPS_RESET };
	struct rc_opts o = rc_default;

	if (ibv_modify_qp(self->qp[A], &r, IBV_QP_STATE) ||
	    ibv_modify_qp(self->qp[B], &r, IBV_QP_STATE))
		return -1;
	o.access = QP_ACCESS;
	if (rc_connect(self->qp[A], &self->d, self->qp[B]->qp_num, &self->d.gid, &o))
		return -1;
	o.access = access;
	return rc_connect(self->qp[B], &self->d, self->qp[A]->qp_num, &self->d.gid, &o);
}

FIXTURE_SETUP(fl)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, dev_open(&self->d, "rodp0"));
	for (int i = 0; i < 2; i++) {
		self->buf[i] = aligned_alloc(4096, BUF);
		ASSERT_NE(NULL, self->buf[i]);
		memset(self->buf[i], 0xaa, BUF);
		self->cq[i] = ibv_create_cq(self->d.ctx, 16, NULL, NULL, 0);
		ASSERT_NE(NULL, self->cq[i]);
		self->qp[i] = make_qp_ex(&self->d, self->cq[i]);
		ASSERT_NE(NULL, self->qp[i]) TH_LOG("ibv_create_qp_ex: %s", strerror(errno));
	}
	self->mr[A] = ibv_reg_mr(self->d.pd, self->buf[A], BUF, ALL_ACCESS);
	ASSERT_NE(NULL, self->mr[A]);
	self->mr[B] = ibv_reg_mr(self->d.pd, self->buf[B], BUF, ALL_ACCESS | ACCESS_FLUSH_GLOBAL);
	ASSERT_NE(NULL, self->mr[B]) TH_LOG("ibv_reg_mr with FLUSH_GLOBAL: %s", strerror(errno));
	ASSERT_EQ(0, connect_pair(self, QP_ACCESS));
}

FIXTURE_TEARDOWN(fl)
{
	for (int i = 0; i < 2; i++) {
		if (self->qp[i])
			ibv_destroy_qp(self->qp[i]);
		if (self->mr[i])
			ibv_dereg_mr(self->mr[i]);
		if (self->cq[i])
			ibv_destroy_cq(self->cq[i]);
		free(self->buf[i]);
	}
	dev_close(&self->d);
	link_delete("rodp0");
}

/* Waits for A's completion: its status, or -1. */
static int done(FIXTURE_DATA(fl) *self)
{
	if (poll1(self->cq[A], &self->wc, 10000) != 1)
		return -1;
	return self->wc.status;
}

/* A writes the 8 bytes of v at raddr through rkey. */
static int atomic_write(FIXTURE_DATA(fl) *self, uint64_t raddr, uint32_t rkey, uint64_t v)
{
	if (post_atomic_write(self->qp[A], 1, rkey, raddr, v))
		return -1;
	return done(self);
}

/* A flushes len bytes at raddr through rkey. */
static int flush(FIXTURE_DATA(fl) *self, uint64_t raddr, uint32_t rkey, size_t len,
		 uint8_t type, uint8_t level)
{
	if (post_flush(self->qp[A], 2, rkey, raddr, len, type, level))
		return -1;
	return done(self);
}

TEST_F(fl, the_device_offers_atomic_write_and_global_flush_only)
{
	struct ibv_device_attr_ex a;

	ASSERT_EQ(0, ibv_query_device_ex(self->d.ctx, NULL, &a));
	EXPECT_TRUE(a.device_cap_flags_ex & DEVICE_ATOMIC_WRITE);
	EXPECT_TRUE(a.device_cap_flags_ex & DEVICE_FLUSH_GLOBAL);
	EXPECT_FALSE(a.device_cap_flags_ex & DEVICE_FLUSH_PERSISTENT);
	EXPECT_TRUE(a.odp_caps.per_transport_caps.rc_odp_caps & ODP_SUPPORT_ATOMIC_WRITE);
	EXPECT_TRUE(a.odp_caps.per_transport_caps.rc_odp_caps & ODP_SUPPORT_FLUSH);
	/* Persistence is not offered: an MR cannot ask for it. */
	EXPECT_EQ(NULL, ibv_reg_mr(self->d.pd, self->buf[A], 4096,
				   IBV_ACCESS_LOCAL_WRITE | ACCESS_FLUSH_PERSISTENT));
}

TEST_F(fl, atomic_write_stores_its_eight_bytes_and_no_more)
{
	uint64_t v = 0x1122334455667788ull;
	uint8_t *at = self->buf[B] + 4096 + 64;

	ASSERT_EQ(IBV_WC_SUCCESS, atomic_write(self, (uintptr_t)at, self->mr[B]->rkey, v));
	EXPECT_EQ(IBV_WC_ATOMIC_WRITE, self->wc.opcode);
	EXPECT_EQ(8, self->wc.byte_len);
	EXPECT_EQ(0, memcmp(at, &v, 8));
	EXPECT_EQ(0xaa, at[-1]);
	EXPECT_EQ(0xaa, at[8]);
	/* A FLUSH after it completes, at the range and at the MR level (any length there). */
	ASSERT_EQ(IBV_WC_SUCCESS, flush(self, (uintptr_t)self->buf[B], self->mr[B]->rkey, 1024,
					FLUSH_GLOBAL, FLUSH_RANGE));
	EXPECT_EQ(WC_FLUSH, self->wc.opcode);
	EXPECT_EQ(1024, self->wc.byte_len);
	EXPECT_EQ(IBV_WC_SUCCESS, flush(self, (uintptr_t)self->buf[B], self->mr[B]->rkey, 0,
					FLUSH_GLOBAL, FLUSH_MR));
	EXPECT_EQ(IBV_WC_SUCCESS, flush(self, 0, self->mr[B]->rkey, 12345678, FLUSH_GLOBAL,
					FLUSH_MR));
	EXPECT_EQ(IBV_WC_SUCCESS, flush(self, (uintptr_t)self->buf[B] + BUF, self->mr[B]->rkey,
					0, FLUSH_GLOBAL, FLUSH_RANGE));
}

TEST_F(fl, atomic_write_rules_end_in_error_completions)
{
	uintptr_t b = (uintptr_t)self->buf[B];
	struct ibv_mr *ro = ibv_reg_mr(self->d.pd, self->buf[B] + 8192, 4096,
				       IBV_ACCESS_REMOTE_READ);

	ASSERT_NE(NULL, ro);
	/* Unaligned: an invalid request. */
	EXPECT_EQ(IBV_WC_REM_INV_REQ_ERR, atomic_write(self, b + 4, self->mr[B]->rkey, 1));
	ASSERT_EQ(0, connect_pair(self, QP_ACCESS));
	/* An MR without remote write, a range past the MR, an unknown key: remote access. */
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, atomic_write(self, b + 8192, ro->rkey, 1));
	ASSERT_EQ(0, connect_pair(self, QP_ACCESS));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, atomic_write(self, b + BUF, self->mr[B]->rkey, 1));
	ASSERT_EQ(0, connect_pair(self, QP_ACCESS));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, atomic_write(self, b, self->mr[B]->rkey + 0x100, 1));
	/* A responder QP without remote write. */
	ASSERT_EQ(0, connect_pair(self, IBV_ACCESS_REMOTE_READ));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, atomic_write(self, b, self->mr[B]->rkey, 1));
	for (int i = 0; i < BUF; i++)
		if (self->buf[B][i] != 0xaa)
			ASSERT_EQ(0xaa, self->buf[B][i]);
	ibv_dereg_mr(ro);
}

TEST_F(fl, flush_rules_end_in_error_completions)
{
	uintptr_t b = (uintptr_t)self->buf[B];

	/* The persistent type: no MR has the right. */
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, flush(self, b, self->mr[B]->rkey, 1024,
					       FLUSH_PERSISTENT, FLUSH_RANGE));
	ASSERT_EQ(0, connect_pair(self, QP_ACCESS));
	/* An MR without the global right (A's), at either level. */
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, flush(self, (uintptr_t)self->buf[A], self->mr[A]->rkey,
					       1024, FLUSH_GLOBAL, FLUSH_RANGE));
	ASSERT_EQ(0, connect_pair(self, QP_ACCESS));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, flush(self, 0, self->mr[A]->rkey, 0, FLUSH_GLOBAL,
					       FLUSH_MR));
	ASSERT_EQ(0, connect_pair(self, QP_ACCESS));
	/* Past the MR at the range level. */
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, flush(self, b + 4096, self->mr[B]->rkey, BUF,
					       FLUSH_GLOBAL, FLUSH_RANGE));
	/* A responder QP that does not allow FLUSH (as for every other right; rxe: invalid). */
	ASSERT_EQ(0, connect_pair(self, ALL_ACCESS));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, flush(self, b, self->mr[B]->rkey, 1024, FLUSH_GLOBAL,
						FLUSH_RANGE));
	/* An unknown placement type or level (rxe ignores them); beyond the FETH's bits, the
	 * requester refuses it.
	 */
	ASSERT_EQ(0, connect_pair(self, QP_ACCESS));
	EXPECT_EQ(IBV_WC_REM_INV_REQ_ERR, flush(self, b, self->mr[B]->rkey, 1024, 4,
						FLUSH_RANGE));
	ASSERT_EQ(0, connect_pair(self, QP_ACCESS));
	EXPECT_EQ(IBV_WC_REM_INV_REQ_ERR, flush(self, b, self->mr[B]->rkey, 1024, FLUSH_GLOBAL,
						2));
	ASSERT_EQ(0, connect_pair(self, QP_ACCESS));
	EXPECT_EQ(IBV_WC_LOC_QP_OP_ERR, flush(self, b, self->mr[B]->rkey, 1024, 0x11,
					      FLUSH_RANGE));
	/* Every error left the responder in ERR; a good FLUSH works after reconnecting. */
	ASSERT_EQ(0, connect_pair(self, QP_ACCESS));
	EXPECT_EQ(IBV_WC_SUCCESS, flush(self, b, self->mr[B]->rkey, 1024, FLUSH_GLOBAL,
					FLUSH_RANGE));
}

TEST_F(fl, atomic_write_into_odp_memory_faults_it_in)
{
	uint8_t *m = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			  -1, 0);
	struct ibv_mr *odp;
	uint64_t v = 0x0102030405060708ull;

	ASSERT_NE(MAP_FAILED, m);
	odp = ibv_reg_mr(self->d.pd, m, 4 * 4096, IBV_ACCESS_LOCAL_WRITE |
			 IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ON_DEMAND | ACCESS_FLUSH_GLOBAL);
	ASSERT_NE(NULL, odp);
	/* Page 2 was never touched: the responder faults it in. */
	ASSERT_EQ(IBV_WC_SUCCESS, atomic_write(self, (uintptr_t)m + 2 * 4096 + 16, odp->rkey, v));
	EXPECT_EQ(0, memcmp(m + 2 * 4096 + 16, &v, 8));
	EXPECT_EQ(IBV_WC_SUCCESS, flush(self, (uintptr_t)m, odp->rkey, 4 * 4096, FLUSH_GLOBAL,
					FLUSH_RANGE));
	ibv_dereg_mr(odp);
	munmap(m, 4 * 4096);
}

TEST_F(fl, uc_qps_refuse_them)
{
	struct ibv_qp *qp = make_qp(&self->d, self->cq[A], self->cq[A], IBV_QPT_UC, NULL);
	struct ibv_qp_attr r = { .qp_state = IBV_QPS_RESET };
	static const int ops[] = { IBV_WR_ATOMIC_WRITE, 14 /* IBV_WR_FLUSH */ };
	struct rc_opts o = rc_default;

	ASSERT_NE(NULL, qp);
	o.uc = 1;
	/*
	 * The provider offers neither through ibv_qp_ex on UC; ibv_post_send passes the opcode
	 * on as it is, and rodp completes it in error.
	 */
	for (int i = 0; i < 2; i++) {
		struct ibv_wc wc;

		ASSERT_EQ(0, ibv_modify_qp(qp, &r, IBV_QP_STATE));
		ASSERT_EQ(0, rc_connect(qp, &self->d, self->qp[B]->qp_num, &self->d.gid, &o));
		if (post_send(qp, ops[i], self->buf[A], 8, self->mr[A]->lkey,
			      (uintptr_t)self->buf[B], self->mr[B]->rkey, 0, i)) {
			/* A provider that refuses it at posting refuses it too. */
			TH_LOG("opcode %d refused by the provider", ops[i]);
			continue;
		}
		ASSERT_EQ(1, poll1(self->cq[A], &wc, 10000));
		EXPECT_EQ(IBV_WC_LOC_QP_OP_ERR, wc.status);
		EXPECT_EQ(i, wc.wr_id);
	}
	for (int i = 0; i < BUF; i++)
		if (self->buf[B][i] != 0xaa)
			ASSERT_EQ(0xaa, self->buf[B][i]);
	ibv_destroy_qp(qp);
}

TEST_HARNESS_MAIN
