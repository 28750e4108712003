// SPDX-License-Identifier: GPL-2.0
/*
 * rodp memory windows: type 1 and type 2B windows over pinned and ODP (explicit and implicit)
 * MRs. An RC pair on rodp0: QP 0 reaches the memory QP 1 owns, through windows QP 1 binds.
 * Every rule of binding, invalidation and access through a window is checked both ways, with
 * the data checked after each bind and invalidate.
 */
#include "rodp_mw.h"
#include "rodp_harness.h"

#define PAGE 4096
#define LEN (16 * PAGE)
#define MR_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND)

FIXTURE(mw) {
	struct dev d;
	struct rc_pair rc;
	char *src, *mem;
	struct ibv_mr *src_mr, *mr;
};

FIXTURE_SETUP(mw)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, dev_open(&self->d, "rodp0"));
	ASSERT_EQ(0, rc_pair_open(&self->rc, &self->d, NULL, LEN, &rc_default));
	/* QP 0's buffer: what rc_xfer() writes from and reads into. */
	self->src = self->rc.buf[0];
	self->src_mr = self->rc.mr[0];
	self->mem = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->mem);
	/* No remote rights of its own: only windows open it to peers. */
	self->mr = ibv_reg_mr(self->d.pd, self->mem, LEN, MR_ACCESS);
	ASSERT_NE(NULL, self->mr);
}

FIXTURE_TEARDOWN(mw)
{
	if (self->mr)
		ibv_dereg_mr(self->mr);
	rc_pair_close(&self->rc);
	munmap(self->mem, LEN);
	dev_close(&self->d);
	link_delete("rodp0");
}

static int atomic_add(FIXTURE_DATA(mw) *self, uint64_t raddr, uint32_t rkey, uint64_t add)
{
	struct ibv_wc wc;

	if (post_atomic(self->rc.qp[0], IBV_WR_ATOMIC_FETCH_AND_ADD, self->src, self->src_mr->lkey,
			raddr, rkey, add, 0) ||
	    poll1(self->rc.cq[0], &wc, 20000) != 1)
		return -1;
	return wc.status;
}

/* After an error completion both QPs are in the error state: start them over. */
static void reset(FIXTURE_DATA(mw) *self, struct __test_metadata *_metadata)
{
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
}

/* A write of len bytes of pattern seed through (raddr, rkey) that must land at mem + off. */
static int write_lands(FIXTURE_DATA(mw) *self, uint64_t raddr, uint32_t rkey, size_t off,
		       uint32_t len, unsigned int seed)
{
	fill(self->src, len, seed);
	if (rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, len, raddr, rkey) != IBV_WC_SUCCESS)
		return 0;
	return !memcmp(self->src, self->mem + off, len);
}

TEST_F(mw, device_reports_both_window_types)
{
	struct ibv_device_attr a;

	ASSERT_EQ(0, ibv_query_device(self->d.ctx, &a));
	EXPECT_TRUE(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
	EXPECT_TRUE(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
	EXPECT_LT(0, a.max_mw);
}

TEST_F(mw, alloc_and_dealloc_both_types_and_refuse_others)
{
	struct ibv_mw *w1 = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_1);
	struct ibv_mw *w2 = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_2);

	ASSERT_NE(NULL, w1);
	ASSERT_NE(NULL, w2);
	EXPECT_EQ(IBV_MW_TYPE_1, w1->type);
	EXPECT_EQ(IBV_MW_TYPE_2, w2->type);
	/* Window keys are not MR keys. */
	EXPECT_NE(w1->rkey >> 8, self->mr->rkey >> 8);
	EXPECT_NE(w1->rkey, w2->rkey);
	EXPECT_EQ(NULL, ibv_alloc_mw(self->d.pd, 3));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(0, ibv_dealloc_mw(w1));
	EXPECT_EQ(0, ibv_dealloc_mw(w2));
}

TEST_F(mw, type1_window_carries_write_read_and_atomics_in_its_range)
{
	struct ibv_mw *w = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_1);
	char *base = self->mem + 2 * PAGE;
	uint32_t before;

	ASSERT_NE(NULL, w);
	before = w->rkey;
	ASSERT_EQ(IBV_WC_SUCCESS, bind1(self->rc.qp[1], self->rc.cq[1], w, self->mr, base, 4 * PAGE,
					WIN_RIGHTS));
	/* Same window, new key byte. */
	EXPECT_EQ(before >> 8, w->rkey >> 8);
	EXPECT_NE(before & 0xff, w->rkey & 0xff);
	EXPECT_TRUE(write_lands(self, (uintptr_t)base, w->rkey, 2 * PAGE, 4 * PAGE, 1));
	/* Read back through the window. */
	memset(self->src, 0, 4 * PAGE);
	ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 4 * PAGE, (uintptr_t)base,
					  w->rkey));
	EXPECT_EQ(0, memcmp(self->src, base, 4 * PAGE));
	*(uint64_t *)(base + 8) = 40;
	ASSERT_EQ(IBV_WC_SUCCESS, atomic_add(self, (uintptr_t)base + 8, w->rkey, 2));
	EXPECT_EQ(42, *(uint64_t *)(base + 8));
	EXPECT_EQ(40, *(uint64_t *)self->src);
	/* The last byte of the window, then one past it. */
	EXPECT_TRUE(write_lands(self, (uintptr_t)base + 4 * PAGE - 16, w->rkey, 6 * PAGE - 16, 16,
				2));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 17,
						 (uintptr_t)base + 4 * PAGE - 16, w->rkey));
	reset(self, _metadata);
	/* Just before it. */
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 8,
						 (uintptr_t)base - 8, w->rkey));
	reset(self, _metadata);
	/* The MR's own key grants no remote write. */
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 8,
						 (uintptr_t)base, self->mr->rkey));
	reset(self, _metadata);
	ASSERT_EQ(0, ibv_dealloc_mw(w));
}

TEST_F(mw, a_window_grants_only_its_rights)
{
	struct ibv_mw *w = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_1);

	ASSERT_NE(NULL, w);
	ASSERT_EQ(IBV_WC_SUCCESS, bind1(self->rc.qp[1], self->rc.cq[1], w, self->mr, self->mem, LEN,
					IBV_ACCESS_REMOTE_READ));
	fill(self->mem, PAGE, 3);
	ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, PAGE,
					  (uintptr_t)self->mem, w->rkey));
	EXPECT_EQ(0, memcmp(self->src, self->mem, PAGE));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 8,
						 (uintptr_t)self->mem, w->rkey));
	reset(self, _metadata);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, atomic_add(self, (uintptr_t)self->mem, w->rkey, 1));
	reset(self, _metadata);
	/* Rebinding with write rights takes effect at once. */
	ASSERT_EQ(IBV_WC_SUCCESS, bind1(self->rc.qp[1], self->rc.cq[1], w, self->mr, self->mem, LEN,
					IBV_ACCESS_REMOTE_WRITE));
	EXPECT_TRUE(write_lands(self, (uintptr_t)self->mem, w->rkey, 0, 64, 4));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 8,
						 (uintptr_t)self->mem, w->rkey));
	reset(self, _metadata);
	ASSERT_EQ(0, ibv_dealloc_mw(w));
}

TEST_F(mw, rebinding_changes_the_key_and_the_old_key_stops_working)
{
	struct ibv_mw *w = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_1);
	uint32_t k1;

	ASSERT_NE(NULL, w);
	ASSERT_EQ(IBV_WC_SUCCESS, bind1(self->rc.qp[1], self->rc.cq[1], w, self->mr, self->mem,
					PAGE, WIN_RIGHTS));
	k1 = w->rkey;
	ASSERT_EQ(IBV_WC_SUCCESS, bind1(self->rc.qp[1], self->rc.cq[1], w, self->mr,
					self->mem + PAGE, PAGE, WIN_RIGHTS));
	EXPECT_NE(k1, w->rkey);
	/* The new binding, not the old one. */
	EXPECT_TRUE(write_lands(self, (uintptr_t)self->mem + PAGE, w->rkey, PAGE, PAGE, 5));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 8,
						 (uintptr_t)self->mem, w->rkey));
	reset(self, _metadata);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 8,
						 (uintptr_t)self->mem + PAGE, k1));
	reset(self, _metadata);
	/* Zero length unbinds a type 1 window. */
	ASSERT_EQ(IBV_WC_SUCCESS, bind1(self->rc.qp[1], self->rc.cq[1], w, self->mr,
					self->mem, 0, 0));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 8,
						 (uintptr_t)self->mem + PAGE, w->rkey));
	reset(self, _metadata);
	/* A bind that keeps the key byte is refused: an old key never reaches a new binding. */
	EXPECT_EQ(IBV_WC_MW_BIND_ERR, bind2(self->rc.qp[1], self->rc.cq[1], w, w->rkey, self->mr,
					    (uintptr_t)self->mem, PAGE, WIN_RIGHTS));
	EXPECT_EQ(IBV_QPS_ERR, qp_state(self->rc.qp[1]));
	reset(self, _metadata);
	ASSERT_EQ(0, ibv_dealloc_mw(w));
}

/* Each bad bind completes with IBV_WC_MW_BIND_ERR and leaves the QP in error. */
static void bad_bind(FIXTURE_DATA(mw) *self, struct __test_metadata *_metadata,
		     struct ibv_mw *w, struct ibv_mr *mr, uint64_t addr, uint64_t len,
		     unsigned int access)
{
	EXPECT_EQ(IBV_WC_MW_BIND_ERR, bind2(self->rc.qp[1], self->rc.cq[1], w, next_key(w->rkey),
					    mr, addr, len, access));
	EXPECT_EQ(IBV_QPS_ERR, qp_state(self->rc.qp[1]));
	reset(self, _metadata);
}

TEST_F(mw, binds_that_break_a_rule_fail)
{
	struct ibv_mw *w1 = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_1);
	struct ibv_mw *w2 = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_2);
	struct ibv_pd *pd2 = ibv_alloc_pd(self->d.ctx);
	struct ibv_mr *no_bind = ibv_reg_mr(self->d.pd, self->mem, LEN,
					    IBV_ACCESS_LOCAL_WRITE | WIN_RIGHTS);
	struct ibv_mr *read_only = ibv_reg_mr(self->d.pd, self->mem, LEN, IBV_ACCESS_MW_BIND);
	struct ibv_mr *other_pd = ibv_reg_mr(pd2, self->mem, LEN, MR_ACCESS);
	struct ibv_mw *w_other = ibv_alloc_mw(pd2, IBV_MW_TYPE_1);
	uint64_t a = (uintptr_t)self->mem;
	struct ibv_mr gone;

	ASSERT_NE(NULL, w1);
	ASSERT_NE(NULL, w2);
	ASSERT_NE(NULL, no_bind);
	ASSERT_NE(NULL, read_only);
	ASSERT_NE(NULL, other_pd);
	ASSERT_NE(NULL, w_other);
	/* C10-73: the MR must allow binding. */
	bad_bind(self, _metadata, w1, no_bind, a, PAGE, IBV_ACCESS_REMOTE_READ);
	/* C10-74: remote write or atomics need local write on the MR; remote read does not. */
	bad_bind(self, _metadata, w1, read_only, a, PAGE, IBV_ACCESS_REMOTE_WRITE);
	bad_bind(self, _metadata, w1, read_only, a, PAGE, IBV_ACCESS_REMOTE_ATOMIC);
	EXPECT_EQ(IBV_WC_SUCCESS, bind1(self->rc.qp[1], self->rc.cq[1], w1, read_only, self->mem,
					PAGE, IBV_ACCESS_REMOTE_READ));
	/* C10-75: inside the MR. */
	bad_bind(self, _metadata, w1, self->mr, a - 1, PAGE, IBV_ACCESS_REMOTE_READ);
	bad_bind(self, _metadata, w1, self->mr, a + LEN - PAGE, PAGE + 1, IBV_ACCESS_REMOTE_READ);
	bad_bind(self, _metadata, w1, self->mr, a, UINT64_MAX, IBV_ACCESS_REMOTE_READ);
	/* C10-72: the QP's PD is the window's and the MR's. */
	bad_bind(self, _metadata, w1, other_pd, a, PAGE, IBV_ACCESS_REMOTE_READ);
	bad_bind(self, _metadata, w_other, self->mr, a, PAGE, IBV_ACCESS_REMOTE_READ);
	/* o10-36.2.2: type 1 windows are not zero based (the provider refuses it itself too). */
	bad_bind(self, _metadata, w1, self->mr, a, PAGE, IBV_ACCESS_REMOTE_READ |
		 IBV_ACCESS_ZERO_BASED);
	EXPECT_EQ(-EINVAL, bind1(self->rc.qp[1], self->rc.cq[1], w1, self->mr, self->mem, PAGE,
				 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED));
	/* Rights a window cannot have. */
	bad_bind(self, _metadata, w1, self->mr, a, PAGE, IBV_ACCESS_MW_BIND);
	/* o10-37.2.40: a type 2B window is not bound empty. */
	bad_bind(self, _metadata, w2, self->mr, a, 0, IBV_ACCESS_REMOTE_READ);
	/* An MR that no longer exists. */
	gone = *no_bind;
	ASSERT_EQ(0, ibv_dereg_mr(no_bind));
	bad_bind(self, _metadata, w1, &gone, a, PAGE, IBV_ACCESS_REMOTE_READ);
	/* A window that no longer exists. */
	{
		struct ibv_mw dead = *w2;

		ASSERT_EQ(0, ibv_dealloc_mw(w2));
		bad_bind(self, _metadata, &dead, self->mr, a, PAGE, IBV_ACCESS_REMOTE_READ);
	}
	/* A UD QP cannot bind (the provider refuses to post it). */
	{
		struct ibv_qp *ud = make_qp(&self->d, self->rc.cq[1], self->rc.cq[1],
					    IBV_QPT_UD, NULL);

		ASSERT_NE(NULL, ud);
		ASSERT_EQ(0, ud_ready(ud, 0x11));
		EXPECT_EQ(-EINVAL, bind1(ud, self->rc.cq[1], w1, self->mr, self->mem, PAGE,
					 IBV_ACCESS_REMOTE_READ));
		ibv_destroy_qp(ud);
	}
	EXPECT_EQ(0, ibv_dealloc_mw(w1));
	EXPECT_EQ(0, ibv_dealloc_mw(w_other));
	EXPECT_EQ(0, ibv_dereg_mr(read_only));
	EXPECT_EQ(0, ibv_dereg_mr(other_pd));
	EXPECT_EQ(0, ibv_dealloc_pd(pd2));
}

/* The device's ODP statistic of device accesses whose key named no MR (debugfs). */
static long mrs_not_found(void)
{
	return read_long("/sys/kernel/debug/rodp/rodp0/odp_stats/num_mrs_not_found");
}

/*
 * A bind names its MR by lkey, but it is no device access to memory: naming an MR that no
 * longer exists fails the bind without counting in num_mrs_not_found. An access through the
 * same dead key does count.
 */
TEST_F(mw, a_bind_naming_a_dead_mr_is_not_an_mr_not_found)
{
	struct ibv_mw *w = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_1);
	struct ibv_mr *mr = ibv_reg_mr(self->d.pd, self->mem, LEN, MR_ACCESS);
	struct ibv_mr gone;
	long before;

	ASSERT_NE(NULL, w);
	ASSERT_NE(NULL, mr);
	gone = *mr;
	ASSERT_EQ(0, ibv_dereg_mr(mr));
	before = mrs_not_found();
	ASSERT_LE(0, before);
	bad_bind(self, _metadata, w, &gone, (uintptr_t)self->mem, PAGE, IBV_ACCESS_REMOTE_READ);
	EXPECT_EQ(before, mrs_not_found());
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR,
		  rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 8, (uintptr_t)self->mem, gone.rkey));
	EXPECT_EQ(before + 1, mrs_not_found());
	reset(self, _metadata);
	EXPECT_EQ(0, ibv_dealloc_mw(w));
}

TEST_F(mw, type2b_window_is_zero_based_or_not_and_serves_only_its_qp)
{
	struct ibv_mw *w = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_2);
	struct rc_pair other;
	uint32_t key;

	ASSERT_NE(NULL, w);
	ASSERT_EQ(0, rc_pair_open(&other, &self->d, NULL, PAGE, &rc_default));
	key = next_key(w->rkey);
	/* Zero based: remote addresses count from the window's start. */
	ASSERT_EQ(IBV_WC_SUCCESS, bind2(self->rc.qp[1], self->rc.cq[1], w, key, self->mr,
					(uintptr_t)self->mem + PAGE, 2 * PAGE,
					WIN_RIGHTS | IBV_ACCESS_ZERO_BASED));
	EXPECT_TRUE(write_lands(self, 0, key, PAGE, PAGE, 6));
	EXPECT_TRUE(write_lands(self, PAGE, key, 2 * PAGE, PAGE, 7));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 8, 2 * PAGE,
						 key));
	reset(self, _metadata);
	/* o10-37.2.30: bound already. */
	EXPECT_EQ(IBV_WC_MW_BIND_ERR, bind2(self->rc.qp[1], self->rc.cq[1], w, next_key(key),
					    self->mr, (uintptr_t)self->mem, PAGE, WIN_RIGHTS));
	reset(self, _metadata);
	EXPECT_TRUE(write_lands(self, 0, key, PAGE, 8, 8));
	/* Another QP of the same PD reaches nothing through it. */
	fill(other.buf[0], 8, 9);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&other, IBV_WR_RDMA_WRITE, 0, 8, 0, key));
	EXPECT_NE(0, memcmp(other.buf[0], self->mem + PAGE, 8));
	rc_pair_close(&other);
	/* Not zero based: by virtual address. */
	ASSERT_EQ(IBV_WC_SUCCESS, local_inv(self->rc.qp[1], self->rc.cq[1], key));
	key = next_key(key);
	ASSERT_EQ(IBV_WC_SUCCESS, bind2(self->rc.qp[1], self->rc.cq[1], w, key, self->mr,
					(uintptr_t)self->mem + PAGE, PAGE, WIN_RIGHTS));
	EXPECT_TRUE(write_lands(self, (uintptr_t)self->mem + PAGE, key, PAGE, PAGE, 10));
	EXPECT_EQ(0, ibv_dealloc_mw(w));
}

TEST_F(mw, local_invalidate_frees_a_type2b_window_for_a_new_bind)
{
	struct ibv_mw *w = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_2);
	uint32_t key;

	ASSERT_NE(NULL, w);
	key = next_key(w->rkey);
	ASSERT_EQ(IBV_WC_SUCCESS, bind2(self->rc.qp[1], self->rc.cq[1], w, key, self->mr,
					(uintptr_t)self->mem, LEN, WIN_RIGHTS));
	EXPECT_TRUE(write_lands(self, (uintptr_t)self->mem, key, 0, 64, 11));
	ASSERT_EQ(IBV_WC_SUCCESS, local_inv(self->rc.qp[1], self->rc.cq[1], key));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 8,
						 (uintptr_t)self->mem, key));
	reset(self, _metadata);
	/* Not bound any more: a second invalidate fails. */
	EXPECT_EQ(IBV_WC_LOC_QP_OP_ERR, local_inv(self->rc.qp[1], self->rc.cq[1], key));
	reset(self, _metadata);
	/* Free again: bound anew with a new key; the old key stays dead. */
	ASSERT_EQ(IBV_WC_SUCCESS, bind2(self->rc.qp[1], self->rc.cq[1], w, next_key(key), self->mr,
					(uintptr_t)self->mem, LEN, WIN_RIGHTS));
	EXPECT_TRUE(write_lands(self, (uintptr_t)self->mem, next_key(key), 0, 64, 12));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 8,
						 (uintptr_t)self->mem, key));
	reset(self, _metadata);
	/* A stale key does not invalidate the current binding. */
	EXPECT_EQ(IBV_WC_LOC_QP_OP_ERR, local_inv(self->rc.qp[1], self->rc.cq[1], key));
	reset(self, _metadata);
	EXPECT_TRUE(write_lands(self, (uintptr_t)self->mem, next_key(key), 0, 64, 13));
	EXPECT_EQ(0, ibv_dealloc_mw(w));
}

TEST_F(mw, type1_windows_and_mrs_are_not_invalidated_by_work_requests)
{
	struct ibv_mw *w = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_1);

	ASSERT_NE(NULL, w);
	ASSERT_EQ(IBV_WC_SUCCESS, bind1(self->rc.qp[1], self->rc.cq[1], w, self->mr, self->mem, LEN,
					WIN_RIGHTS));
	/* o10-37.2.26. */
	EXPECT_EQ(IBV_WC_LOC_QP_OP_ERR, local_inv(self->rc.qp[1], self->rc.cq[1], w->rkey));
	reset(self, _metadata);
	EXPECT_TRUE(write_lands(self, (uintptr_t)self->mem, w->rkey, 0, 64, 14));
	/* A user MR is not a fast-registration MR. */
	EXPECT_EQ(IBV_WC_LOC_QP_OP_ERR, local_inv(self->rc.qp[1], self->rc.cq[1],
						  self->src_mr->rkey));
	reset(self, _metadata);
	ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 8, (uintptr_t)self->src,
					  self->src_mr->rkey));
	EXPECT_EQ(0, ibv_dealloc_mw(w));
}

/* QP 0 sends 64 bytes with invalidate of key to QP 1; returns the send's status. */
static int send_inv(FIXTURE_DATA(mw) *self, uint32_t key, struct ibv_wc *rwc)
{
	struct ibv_sge sge = { (uintptr_t)self->src, 64, self->src_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 3, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND_WITH_INV,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;

	wr.invalidate_rkey = key;
	if (post_recv(self->rc.qp[1], self->mem + LEN - PAGE, PAGE, self->mr->lkey, 4) ||
	    ibv_post_send(self->rc.qp[0], &wr, &bad) || poll1(self->rc.cq[0], &wc, 20000) != 1 ||
	    poll1(self->rc.cq[1], rwc, 20000) != 1)
		return -1;
	return wc.status;
}

TEST_F(mw, send_with_invalidate_frees_the_window_bound_to_the_receiving_qp)
{
	struct ibv_mw *w = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_2);
	struct ibv_mw *w1 = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_1);
	struct ibv_wc rwc;
	uint32_t key;

	ASSERT_NE(NULL, w);
	ASSERT_NE(NULL, w1);
	key = next_key(w->rkey);
	ASSERT_EQ(IBV_WC_SUCCESS, bind2(self->rc.qp[1], self->rc.cq[1], w, key, self->mr,
					(uintptr_t)self->mem, PAGE, WIN_RIGHTS));
	fill(self->src, 64, 15);
	ASSERT_EQ(IBV_WC_SUCCESS, send_inv(self, key, &rwc));
	EXPECT_EQ(IBV_WC_SUCCESS, rwc.status);
	EXPECT_EQ(IBV_WC_RECV, rwc.opcode);
	EXPECT_TRUE(rwc.wc_flags & IBV_WC_WITH_INV);
	EXPECT_EQ(key, rwc.invalidated_rkey);
	EXPECT_EQ(64, rwc.byte_len);
	EXPECT_EQ(0, memcmp(self->src, self->mem + LEN - PAGE, 64));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 8,
						 (uintptr_t)self->mem, key));
	reset(self, _metadata);
	/* The same key again: not bound any more. */
	EXPECT_EQ(IBV_WC_REM_INV_REQ_ERR, send_inv(self, key, &rwc));
	EXPECT_EQ(IBV_WC_REM_INV_REQ_ERR, rwc.status);
	reset(self, _metadata);
	/* A type 1 window's key. */
	ASSERT_EQ(IBV_WC_SUCCESS, bind1(self->rc.qp[1], self->rc.cq[1], w1, self->mr, self->mem,
					PAGE, WIN_RIGHTS));
	EXPECT_EQ(IBV_WC_REM_INV_REQ_ERR, send_inv(self, w1->rkey, &rwc));
	reset(self, _metadata);
	EXPECT_TRUE(write_lands(self, (uintptr_t)self->mem, w1->rkey, 0, 64, 16));
	/* A window bound through the sender's own QP, not the receiver's. */
	key = next_key(key);
	ASSERT_EQ(IBV_WC_SUCCESS, bind2(self->rc.qp[0], self->rc.cq[0], w, key, self->mr,
					(uintptr_t)self->mem, PAGE, WIN_RIGHTS));
	EXPECT_EQ(IBV_WC_REM_INV_REQ_ERR, send_inv(self, key, &rwc));
	reset(self, _metadata);
	EXPECT_EQ(IBV_WC_SUCCESS, local_inv(self->rc.qp[0], self->rc.cq[0], key));
	EXPECT_EQ(0, ibv_dealloc_mw(w));
	EXPECT_EQ(0, ibv_dealloc_mw(w1));
}

TEST_F(mw, an_mr_with_bound_windows_is_not_deregistered)
{
	struct ibv_mw *w1 = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_1);
	struct ibv_mw *w2 = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_2);
	uint32_t key;

	ASSERT_NE(NULL, w1);
	ASSERT_NE(NULL, w2);
	ASSERT_EQ(IBV_WC_SUCCESS, bind1(self->rc.qp[1], self->rc.cq[1], w1, self->mr, self->mem,
					PAGE, WIN_RIGHTS));
	key = next_key(w2->rkey);
	ASSERT_EQ(IBV_WC_SUCCESS, bind2(self->rc.qp[1], self->rc.cq[1], w2, key, self->mr,
					(uintptr_t)self->mem, PAGE, WIN_RIGHTS));
	EXPECT_EQ(EBUSY, ibv_dereg_mr(self->mr));
	/* Still registered, still reachable. */
	EXPECT_TRUE(write_lands(self, (uintptr_t)self->mem, key, 0, 64, 17));
	/* Unbinding the type 1 window and invalidating the type 2B one release the MR. */
	ASSERT_EQ(IBV_WC_SUCCESS, bind1(self->rc.qp[1], self->rc.cq[1], w1, self->mr,
					self->mem, 0, 0));
	EXPECT_EQ(EBUSY, ibv_dereg_mr(self->mr));
	ASSERT_EQ(IBV_WC_SUCCESS, local_inv(self->rc.qp[1], self->rc.cq[1], key));
	/* Deallocating a bound window releases it too. */
	ASSERT_EQ(IBV_WC_SUCCESS, bind2(self->rc.qp[1], self->rc.cq[1], w2, next_key(key), self->mr,
					(uintptr_t)self->mem, PAGE, WIN_RIGHTS));
	EXPECT_EQ(EBUSY, ibv_dereg_mr(self->mr));
	EXPECT_EQ(0, ibv_dealloc_mw(w2));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 8,
						 (uintptr_t)self->mem, next_key(key)));
	reset(self, _metadata);
	EXPECT_EQ(0, ibv_dereg_mr(self->mr));
	self->mr = NULL;
	EXPECT_EQ(0, ibv_dealloc_mw(w1));
}

TEST_F(mw, rdma_resource_shows_the_windows_of_an_mr)
{
	struct ibv_mw *w[3];
	char out[4096], pat[64];

	for (int i = 0; i < 3; i++) {
		w[i] = ibv_alloc_mw(self->d.pd, i ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2);
		ASSERT_NE(NULL, w[i]);
	}
	ASSERT_EQ(IBV_WC_SUCCESS, bind2(self->rc.qp[1], self->rc.cq[1], w[0], next_key(w[0]->rkey),
					self->mr, (uintptr_t)self->mem, PAGE, WIN_RIGHTS));
	for (int i = 1; i < 3; i++)
		ASSERT_EQ(IBV_WC_SUCCESS, bind1(self->rc.qp[1], self->rc.cq[1], w[i], self->mr,
						self->mem, PAGE, WIN_RIGHTS));
	snprintf(pat, sizeof(pat), "rkey 0x%x", self->mr->rkey);
	ASSERT_EQ(0, sh(out, sizeof(out), "rdma -dd resource show mr dev rodp0"));
	ASSERT_NE(NULL, strstr(out, pat));
	EXPECT_NE(NULL, strstr(strstr(out, pat), "drv_windows 3")) TH_LOG("%s", out);
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(0, ibv_dealloc_mw(w[i]));
	ASSERT_EQ(0, sh(out, sizeof(out), "rdma -dd resource show mr dev rodp0"));
	EXPECT_EQ(NULL, strstr(out, "drv_windows")) TH_LOG("%s", out);
}

/* Windows over ODP memory: the first access through the window faults the pages in. */
static void odp_window(FIXTURE_DATA(mw) *self, struct __test_metadata *_metadata, int implicit)
{
	char *odp = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int acc = MR_ACCESS | IBV_ACCESS_ON_DEMAND;
	struct ibv_mr *mr = implicit ? ibv_reg_mr(self->d.pd, NULL, SIZE_MAX, acc) :
			    ibv_reg_mr(self->d.pd, odp, LEN, acc);
	struct ibv_mw *w1 = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_1);
	struct ibv_mw *w2 = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_2);
	long pages = hw_counter("rodp0", "num_page_fault_pages");
	uint32_t key;

	ASSERT_NE(MAP_FAILED, odp);
	ASSERT_NE(NULL, mr);
	ASSERT_NE(NULL, w1);
	ASSERT_NE(NULL, w2);
	ASSERT_EQ(IBV_WC_SUCCESS, bind1(self->rc.qp[1], self->rc.cq[1], w1, mr, odp, 8 * PAGE,
					WIN_RIGHTS));
	key = next_key(w2->rkey);
	ASSERT_EQ(IBV_WC_SUCCESS, bind2(self->rc.qp[1], self->rc.cq[1], w2, key, mr,
					(uintptr_t)odp + 8 * PAGE, 8 * PAGE,
					WIN_RIGHTS | IBV_ACCESS_ZERO_BASED));
	/* Binding maps nothing. */
	usleep(50 * 1000);
	EXPECT_EQ(pages, hw_counter("rodp0", "num_page_fault_pages"));
	fill(self->src, 8 * PAGE, 18);
	ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 8 * PAGE, (uintptr_t)odp,
					  w1->rkey));
	EXPECT_EQ(0, memcmp(self->src, odp, 8 * PAGE));
	fill(self->src, 8 * PAGE, 19);
	ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 8 * PAGE, 0, key));
	EXPECT_EQ(0, memcmp(self->src, odp + 8 * PAGE, 8 * PAGE));
	usleep(50 * 1000);
	EXPECT_EQ(16, hw_counter("rodp0", "num_page_fault_pages") - pages);
	/* Pages the kernel drops come back on the next access through the window. */
	madvise(odp, 8 * PAGE, MADV_DONTNEED);
	memset(self->src, 0xff, 8 * PAGE);
	ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 8 * PAGE, (uintptr_t)odp,
					  w1->rkey));
	for (int i = 0; i < 8 * PAGE; i++)
		if (self->src[i]) {
			EXPECT_EQ(0, self->src[i]);
			break;
		}
	*(uint64_t *)(odp + 8 * PAGE + 16) = 5;
	ASSERT_EQ(IBV_WC_SUCCESS, atomic_add(self, 16, key, 3));
	EXPECT_EQ(8, *(uint64_t *)(odp + 8 * PAGE + 16));
	EXPECT_EQ(EBUSY, ibv_dereg_mr(mr));
	ASSERT_EQ(IBV_WC_SUCCESS, local_inv(self->rc.qp[1], self->rc.cq[1], key));
	EXPECT_EQ(0, ibv_dealloc_mw(w1));
	EXPECT_EQ(0, ibv_dealloc_mw(w2));
	EXPECT_EQ(0, ibv_dereg_mr(mr));
	munmap(odp, LEN);
}

TEST_F(mw, windows_over_an_explicit_odp_mr)
{
	odp_window(self, _metadata, 0);
}

TEST_F(mw, windows_over_an_implicit_odp_mr)
{
	odp_window(self, _metadata, 1);
}

TEST_F(mw, a_process_that_exits_with_windows_bound_leaves_nothing_behind)
{
	long base = kmalloc_objects();
	long refs = module_refcnt("rodp");
	pid_t pid = fork();

	if (!pid) {
		/* The window is older than the MR: ib_core's cleanup meets the MR first. */
		struct dev d;
		struct rc_pair p;
		struct ibv_mw *w1, *w2;
		struct ibv_mr *mr;
		char *m = malloc(LEN);

		if (dev_open(&d, "rodp0"))
			_exit(1);
		w1 = ibv_alloc_mw(d.pd, IBV_MW_TYPE_1);
		w2 = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
		mr = ibv_reg_mr(d.pd, m, LEN, MR_ACCESS);
		if (!w1 || !w2 || !mr || rc_pair_open(&p, &d, NULL, PAGE, &rc_default) ||
		    bind1(p.qp[0], p.cq[0], w1, mr, m, LEN, WIN_RIGHTS) != IBV_WC_SUCCESS ||
		    bind2(p.qp[0], p.cq[0], w2, next_key(w2->rkey), mr, (uintptr_t)m, LEN,
			  WIN_RIGHTS) != IBV_WC_SUCCESS)
			_exit(2);
		_exit(0);
	}
	{
		int st;

		ASSERT_EQ(pid, waitpid(pid, &st, 0));
		ASSERT_TRUE(WIFEXITED(st));
		ASSERT_EQ(0, WEXITSTATUS(st));
	}
	EXPECT_EQ(refs, module_refcnt("rodp"));
	EXPECT_GT(base + 200, kmalloc_settled(base, 200));
}

TEST_HARNESS_MAIN
