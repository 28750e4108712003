// SPDX-License-Identifier: GPL-2.0
/*
 * rodp rereg_mr: IB_USER_VERBS_CMD_REREG_MR with every combination of IB_MR_REREG_TRANS, _PD
 * and _ACCESS, on pinned, explicit ODP and implicit ODP MRs. The command goes straight to the
 * context's command file (rodp_mw.h): the rxe provider has no rereg_mr, so ibv_rereg_mr
 * answers EOPNOTSUPP in libibverbs. After each change the data path is checked: the old
 * translation unreachable and the new one live, the old PD's QPs refused, new rights enforced
 * at once, keys kept. A failed re-registration leaves the MR as it was.
 */
#include "rodp_mw.h"
#include "rodp_harness.h"

#define PAGE 4096
#define LEN (16 * PAGE)
/* libibverbs' names for the kernel's IB_MR_REREG_* bits (the same values). */
#define TRANS IBV_REREG_MR_CHANGE_TRANSLATION
#define PD IBV_REREG_MR_CHANGE_PD
#define ACCESS IBV_REREG_MR_CHANGE_ACCESS
#define ODP_ACCESS (ALL_ACCESS | IBV_ACCESS_ON_DEMAND)

/* Two RC pairs, each in its own PD: QP 0 sends from its buffer, QP 1 owns the MR under test. */
FIXTURE(rereg) {
	struct dev d;
	struct rc_pair p[2];	/* p[1] lives in pd2 */
	struct ibv_pd *pd2;
	char *a, *b;
	struct ibv_mr *mr;
};

static char *map(size_t len)
{
	return mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

FIXTURE_SETUP(rereg)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, dev_open(&self->d, "rodp0"));
	self->a = map(LEN);
	self->b = map(LEN);
	ASSERT_NE(MAP_FAILED, self->a);
	ASSERT_NE(MAP_FAILED, self->b);
	self->pd2 = ibv_alloc_pd(self->d.ctx);
	ASSERT_NE(NULL, self->pd2);
	ASSERT_EQ(0, rc_pair_open(&self->p[0], &self->d, NULL, LEN, &rc_default));
	ASSERT_EQ(0, rc_pair_open(&self->p[1], &self->d, self->pd2, LEN, &rc_default));
	self->mr = ibv_reg_mr(self->d.pd, self->a, LEN, ALL_ACCESS);
	ASSERT_NE(NULL, self->mr);
}

FIXTURE_TEARDOWN(rereg)
{
	if (self->mr)
		ibv_dereg_mr(self->mr);
	for (int i = 0; i < 2; i++)
		rc_pair_close(&self->p[i]);
	if (self->pd2)
		ibv_dealloc_pd(self->pd2);
	munmap(self->a, LEN);
	munmap(self->b, LEN);
	dev_close(&self->d);
	link_delete("rodp0");
}

/* Pair i runs op between its buffer and raddr through the MR's key; returns the status. */
static int xfer(FIXTURE_DATA(rereg) *self, int i, enum ibv_wr_opcode op, uint32_t len,
		uint64_t raddr)
{
	int st = rc_xfer(&self->p[i], op, 0, len, raddr, self->mr->rkey);

	if (st != IBV_WC_SUCCESS)
		rc_reset_pair(&self->p[i]);
	return st;
}

/* Whether a write of len bytes through pair i at raddr lands at dst. */
static int lands(FIXTURE_DATA(rereg) *self, int i, uint64_t raddr, char *dst, uint32_t len,
		 unsigned int seed)
{
	char *src = self->p[i].buf[0];

	fill(src, len, seed);
	return xfer(self, i, IBV_WR_RDMA_WRITE, len, raddr) == IBV_WC_SUCCESS &&
	       !memcmp(src, dst, len);
}

/* QP 1 of pair i receives into the MR at iova (dst in memory): its lkey as a local key. */
static int local_recv(FIXTURE_DATA(rereg) *self, int i, uint64_t iova, char *dst, uint32_t len)
{
	struct rc_pair *p = &self->p[i];
	struct ibv_wc rwc, swc;
	int st = -1;

	fill(p->buf[0], len, 77);
	if (post_recv(p->qp[1], (void *)(uintptr_t)iova, len, self->mr->lkey, 5) ||
	    post_send(p->qp[0], IBV_WR_SEND, p->buf[0], len, p->mr[0]->lkey, 0, 0, 0, 2))
		return -1;
	/* Both completions, so none is left for the next transfer. */
	if (poll1(p->cq[1], &rwc, 20000) == 1 && poll1(p->cq[0], &swc, 20000) == 1)
		st = rwc.status ? rwc.status : swc.status;
	if (!st && memcmp(p->buf[0], dst, len))
		st = -1;
	if (st)
		rc_reset_pair(p);
	return st;
}

static int rr(FIXTURE_DATA(rereg) *self, int flags, void *addr, uint64_t len, uint64_t iova,
	      struct ibv_pd *pd, int access)
{
	uint32_t lkey = 0, rkey = 0;
	int ret = rereg_cmd(self->d.ctx, self->mr, flags, addr, len, iova, pd, access, &lkey,
			    &rkey);

	/* rodp keeps the keys of an MR it re-registers. */
	if (!ret && (lkey != self->mr->lkey || rkey != self->mr->rkey))
		return -1000;
	return ret;
}

TEST_F(rereg, libibverbs_has_no_rereg_for_this_provider)
{
	/* A limit of the rxe provider, not of rodp: the command itself works (below). */
	errno = 0;
	EXPECT_GT(0, ibv_rereg_mr(self->mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				  IBV_ACCESS_LOCAL_WRITE));
	EXPECT_EQ(EOPNOTSUPP, errno);
}

TEST_F(rereg, translation_moves_to_new_memory)
{
	ASSERT_TRUE(lands(self, 0, (uintptr_t)self->a, self->a, LEN, 1));
	ASSERT_EQ(0, rr(self, TRANS, self->b, LEN, (uintptr_t)self->b, NULL, 0));
	EXPECT_TRUE(lands(self, 0, (uintptr_t)self->b, self->b, LEN, 2));
	/* The old range is outside the MR now, and a is untouched. */
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, xfer(self, 0, IBV_WR_RDMA_WRITE, 8, (uintptr_t)self->a));
	fill(self->p[0].buf[0], LEN, 1);
	EXPECT_EQ(0, memcmp(self->p[0].buf[0], self->a, LEN));
	/* A smaller range at an iova of its own: offsets from the iova. */
	ASSERT_EQ(0, rr(self, TRANS, self->a + PAGE, PAGE, 0x10000000 + PAGE, NULL, 0));
	EXPECT_TRUE(lands(self, 0, 0x10000000 + PAGE, self->a + PAGE, PAGE, 3));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, xfer(self, 0, IBV_WR_RDMA_WRITE, 8, 0x10000000 + 2 * PAGE));
	EXPECT_EQ(0, local_recv(self, 0, 0x10000000 + PAGE, self->a + PAGE, 64));
}

TEST_F(rereg, pd_change_refuses_the_old_pds_qps)
{
	ASSERT_EQ(0, rr(self, PD, NULL, 0, 0, self->p[1].pd, 0));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, xfer(self, 0, IBV_WR_RDMA_WRITE, 8, (uintptr_t)self->a));
	EXPECT_NE(0, local_recv(self, 0, (uintptr_t)self->a, self->a, 64));
	EXPECT_TRUE(lands(self, 1, (uintptr_t)self->a, self->a, LEN, 4));
	EXPECT_EQ(0, local_recv(self, 1, (uintptr_t)self->a, self->a, 64));
	/* And back. */
	ASSERT_EQ(0, rr(self, PD, NULL, 0, 0, self->d.pd, 0));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, xfer(self, 1, IBV_WR_RDMA_WRITE, 8, (uintptr_t)self->a));
	EXPECT_TRUE(lands(self, 0, (uintptr_t)self->a, self->a, 64, 5));
}

TEST_F(rereg, access_changes_are_enforced_at_once)
{
	ASSERT_EQ(0, rr(self, ACCESS, NULL, 0, 0, NULL,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, xfer(self, 0, IBV_WR_RDMA_WRITE, 8, (uintptr_t)self->a));
	EXPECT_EQ(IBV_WC_SUCCESS, xfer(self, 0, IBV_WR_RDMA_READ, 64, (uintptr_t)self->a));
	ASSERT_EQ(0, rr(self, ACCESS, NULL, 0, 0, NULL, IBV_ACCESS_REMOTE_READ));
	/* No local write: a receive into it is a local protection error. */
	EXPECT_NE(0, local_recv(self, 0, (uintptr_t)self->a, self->a, 64));
	ASSERT_EQ(0, rr(self, ACCESS, NULL, 0, 0, NULL, ALL_ACCESS));
	EXPECT_TRUE(lands(self, 0, (uintptr_t)self->a, self->a, 64, 6));
	/* Rights rodp does not have are refused and change nothing. */
	EXPECT_GT(0, rr(self, ACCESS, NULL, 0, 0, NULL, ALL_ACCESS | IBV_ACCESS_ZERO_BASED));
	EXPECT_TRUE(lands(self, 0, (uintptr_t)self->a, self->a, 64, 7));
}

TEST_F(rereg, read_only_memory_becomes_writable_only_if_it_can_be)
{
	char *ro = mmap(NULL, LEN, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	ASSERT_NE(MAP_FAILED, ro);
	ASSERT_EQ(0, rr(self, TRANS | ACCESS, ro, LEN, (uintptr_t)ro, NULL,
			IBV_ACCESS_REMOTE_READ));
	EXPECT_EQ(IBV_WC_SUCCESS, xfer(self, 0, IBV_WR_RDMA_READ, 64, (uintptr_t)ro));
	/* Writable rights need the pages pinned for writing: refused, the MR as it was. */
	EXPECT_NE(0, rr(self, ACCESS, NULL, 0, 0, NULL, ALL_ACCESS));
	EXPECT_EQ(IBV_WC_SUCCESS, xfer(self, 0, IBV_WR_RDMA_READ, 64, (uintptr_t)ro));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, xfer(self, 0, IBV_WR_RDMA_WRITE, 8, (uintptr_t)ro));
	/* Made writable, the same range takes writable rights: pinned again. */
	ASSERT_EQ(0, mprotect(ro, LEN, PROT_READ | PROT_WRITE));
	ASSERT_EQ(0, rr(self, ACCESS, NULL, 0, 0, NULL, ALL_ACCESS));
	EXPECT_TRUE(lands(self, 0, (uintptr_t)ro, ro, LEN, 8));
	ASSERT_EQ(0, rr(self, TRANS, self->a, LEN, (uintptr_t)self->a, NULL, 0));
	munmap(ro, LEN);
}

TEST_F(rereg, every_combination_of_the_three)
{
	struct ibv_pd *pds[2] = { self->d.pd, self->p[1].pd };
	int pdi = 0, acc = ALL_ACCESS;
	char *at = self->a;

	for (int flags = 1; flags < 8; flags++) {
		char *to = at == self->a ? self->b : self->a;

		if (flags & PD)
			pdi = !pdi;
		if (flags & ACCESS)
			acc = acc == ALL_ACCESS ? (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ) :
			      ALL_ACCESS;
		ASSERT_EQ(0, rr(self, flags, to, LEN, (uintptr_t)to, pds[pdi], acc)) TH_LOG("%d", flags);
		if (flags & TRANS)
			at = to;
		/* Only the current PD's QPs, translation and rights reach the memory. */
		EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, xfer(self, !pdi, IBV_WR_RDMA_READ, 8, (uintptr_t)at));
		if (acc == ALL_ACCESS) {
			EXPECT_TRUE(lands(self, pdi, (uintptr_t)at, at, LEN, flags));
		} else {
			EXPECT_EQ(IBV_WC_REM_ACCESS_ERR,
				  xfer(self, pdi, IBV_WR_RDMA_WRITE, 8, (uintptr_t)at));
			fill(at, 64, 30 + flags);
			EXPECT_EQ(IBV_WC_SUCCESS, xfer(self, pdi, IBV_WR_RDMA_READ, 64, (uintptr_t)at));
			EXPECT_EQ(0, memcmp(self->p[pdi].buf[0], at, 64));
		}
		if (flags & TRANS)
			EXPECT_EQ(IBV_WC_REM_ACCESS_ERR,
				  xfer(self, pdi, IBV_WR_RDMA_READ, 8,
				       (uintptr_t)(to == self->a ? self->b : self->a)));
	}
}

TEST_F(rereg, a_failure_leaves_the_mr_as_it_was)
{
	struct ibv_pd fake = *self->d.pd;
	char *hole = map(LEN);

	ASSERT_NE(MAP_FAILED, hole);
	ASSERT_EQ(0, munmap(hole, LEN));
	/* Unmapped memory. */
	EXPECT_EQ(-EFAULT, rr(self, TRANS, hole, LEN, (uintptr_t)hole, NULL, 0));
	/* ib_core's own checks: no flags, unknown flags, page offsets that differ. */
	EXPECT_EQ(-EINVAL, rr(self, 0, NULL, 0, 0, NULL, 0));
	EXPECT_EQ(-EOPNOTSUPP, rr(self, 8, NULL, 0, 0, NULL, 0));
	EXPECT_EQ(-EINVAL, rr(self, TRANS, self->b, LEN, (uintptr_t)self->b + 1, NULL, 0));
	/* Lengths rodp cannot register, and an iova that wraps. */
	EXPECT_EQ(-EINVAL, rr(self, TRANS, self->b, 1ull << 41, (uintptr_t)self->b, NULL, 0));
	EXPECT_EQ(-EINVAL, rr(self, TRANS, self->b, LEN, UINT64_MAX & ~0xfffull, NULL, 0));
	/* A PD handle that does not exist. */
	fake.handle = 0xdead;
	EXPECT_NE(0, rr(self, PD, NULL, 0, 0, &fake, 0));
	EXPECT_TRUE(lands(self, 0, (uintptr_t)self->a, self->a, LEN, 9));
	EXPECT_EQ(0, ibv_dereg_mr(self->mr));
	self->mr = NULL;
}

TEST_F(rereg, an_mr_with_bound_windows_is_not_reregistered)
{
	struct ibv_mw *w = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_1);
	struct ibv_mr *mr = ibv_reg_mr(self->d.pd, self->b, LEN, ALL_ACCESS | IBV_ACCESS_MW_BIND);
	struct ibv_mr *keep = self->mr;

	ASSERT_NE(NULL, w);
	ASSERT_NE(NULL, mr);
	self->mr = mr;
	ASSERT_EQ(IBV_WC_SUCCESS, bind1(self->p[0].qp[1], self->p[0].cq[1], w, mr, self->b, PAGE,
					WIN_RIGHTS));
	EXPECT_EQ(-EBUSY, rr(self, ACCESS, NULL, 0, 0, NULL, ALL_ACCESS));
	EXPECT_EQ(-EBUSY, rr(self, TRANS, self->a, LEN, (uintptr_t)self->a, NULL, 0));
	EXPECT_EQ(-EBUSY, rr(self, PD, NULL, 0, 0, self->p[1].pd, 0));
	EXPECT_TRUE(lands(self, 0, (uintptr_t)self->b, self->b, 64, 10));
	ASSERT_EQ(0, ibv_dealloc_mw(w));
	/* Free of windows: re-registered, and MW_BIND may go. */
	EXPECT_EQ(0, rr(self, ACCESS, NULL, 0, 0, NULL, ALL_ACCESS));
	self->mr = keep;
	EXPECT_EQ(0, ibv_dereg_mr(mr));
}

TEST_F(rereg, odp_mrs_stay_odp_and_implicit_stays_implicit)
{
	char line[1024], want[64];
	long pages;

	/* Explicit ODP: a new range is faulted in on first access, as at registration. */
	ASSERT_EQ(0, ibv_dereg_mr(self->mr));
	self->mr = ibv_reg_mr(self->d.pd, self->a, LEN, ODP_ACCESS);
	ASSERT_NE(NULL, self->mr);
	ASSERT_TRUE(lands(self, 0, (uintptr_t)self->a, self->a, LEN, 11));
	pages = hw_counter("rodp0", "num_page_fault_pages");
	ASSERT_EQ(0, rr(self, TRANS, self->b, LEN, (uintptr_t)self->b, NULL, 0));
	EXPECT_TRUE(lands(self, 0, (uintptr_t)self->b, self->b, LEN, 12));
	usleep(50 * 1000);
	EXPECT_EQ(16, hw_counter("rodp0", "num_page_fault_pages") - pages);
	ASSERT_EQ(0, res_line(self->mr, line, sizeof(line)));
	EXPECT_NE(NULL, strstr(line, "drv_odp explicit")) TH_LOG("%s", line);
	snprintf(want, sizeof(want), "mrlen %d", LEN);
	EXPECT_NE(NULL, strstr(line, want)) TH_LOG("%s", line);
	/* ODP to pinned and back, over the same range. */
	ASSERT_EQ(0, rr(self, ACCESS, NULL, 0, 0, NULL, ALL_ACCESS));
	ASSERT_EQ(0, res_line(self->mr, line, sizeof(line)));
	EXPECT_EQ(NULL, strstr(line, "drv_odp")) TH_LOG("%s", line);
	EXPECT_TRUE(lands(self, 0, (uintptr_t)self->b, self->b, LEN, 13));
	ASSERT_EQ(0, rr(self, ACCESS | PD, NULL, 0, 0, self->p[1].pd, ODP_ACCESS));
	EXPECT_TRUE(lands(self, 1, (uintptr_t)self->b, self->b, LEN, 14));
	ASSERT_EQ(0, rr(self, PD, NULL, 0, 0, self->d.pd, 0));

	/* Implicit: rights and PD change, and it still covers the address space. */
	ASSERT_EQ(0, ibv_dereg_mr(self->mr));
	self->mr = ibv_reg_mr(self->d.pd, NULL, SIZE_MAX, ODP_ACCESS);
	ASSERT_NE(NULL, self->mr);
	ASSERT_EQ(0, rr(self, ACCESS, NULL, 0, 0, NULL, ODP_ACCESS & ~IBV_ACCESS_REMOTE_WRITE));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, xfer(self, 0, IBV_WR_RDMA_WRITE, 8, (uintptr_t)self->a));
	fill(self->b, 64, 15);
	EXPECT_EQ(IBV_WC_SUCCESS, xfer(self, 0, IBV_WR_RDMA_READ, 64, (uintptr_t)self->b));
	EXPECT_EQ(0, memcmp(self->p[0].buf[0], self->b, 64));
	ASSERT_EQ(0, rr(self, PD | ACCESS, NULL, 0, 0, self->p[1].pd, ODP_ACCESS));
	EXPECT_TRUE(lands(self, 1, (uintptr_t)self->a, self->a, LEN, 16));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, xfer(self, 0, IBV_WR_RDMA_WRITE, 8, (uintptr_t)self->a));
	ASSERT_EQ(0, res_line(self->mr, line, sizeof(line)));
	EXPECT_NE(NULL, strstr(line, "drv_odp implicit")) TH_LOG("%s", line);
	/* An implicit MR cannot be pinned; a new implicit translation is fine. */
	EXPECT_EQ(-EOPNOTSUPP, rr(self, ACCESS, NULL, 0, 0, NULL, ALL_ACCESS));
	ASSERT_EQ(0, rr(self, TRANS, NULL, SIZE_MAX, 0, NULL, 0));
	EXPECT_TRUE(lands(self, 1, (uintptr_t)self->b, self->b, LEN, 17));
	/* Or an explicit one. */
	ASSERT_EQ(0, rr(self, TRANS, self->a, LEN, (uintptr_t)self->a, NULL, 0));
	EXPECT_TRUE(lands(self, 1, (uintptr_t)self->a, self->a, LEN, 18));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, xfer(self, 1, IBV_WR_RDMA_WRITE, 8, (uintptr_t)self->b));
	ASSERT_EQ(0, res_line(self->mr, line, sizeof(line)));
	EXPECT_NE(NULL, strstr(line, "drv_odp explicit")) TH_LOG("%s", line);
	ASSERT_EQ(0, rr(self, PD, NULL, 0, 0, self->d.pd, 0));
}

TEST_F(rereg, rdma_resource_shows_the_new_registration)
{
	char line[1024], want[64];

	ASSERT_EQ(0, rr(self, TRANS | PD, self->b + PAGE, 3 * PAGE, (uintptr_t)self->b + PAGE,
			self->p[1].pd, 0));
	ASSERT_EQ(0, res_line(self->mr, line, sizeof(line)));
	snprintf(want, sizeof(want), "mrlen %d", 3 * PAGE);
	EXPECT_NE(NULL, strstr(line, want)) TH_LOG("%s", line);
	ASSERT_EQ(0, rr(self, PD, NULL, 0, 0, self->d.pd, 0));
}

TEST_HARNESS_MAIN
