// SPDX-License-Identifier: GPL-2.0
/*
 * rodp ODP: explicit on-demand-paging MRs. An RC pair on rodp0: QP 0 owns a pinned buffer, QP 1
 * an ODP MR over memory the test maps, changes and unmaps under it. Each test checks the data
 * and the exact fault and invalidation counts the device reports.
 */
#include "rodp_verbs.h"
#include "kselftest_harness.h"
#include <fcntl.h>

#define PAGE 4096
#define NPAGES 64
#define LEN (NPAGES * PAGE)
#define ODP_ACCESS (ALL_ACCESS | IBV_ACCESS_ON_DEMAND)

FIXTURE(odp) {
	struct dev d;
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	char *pin, *odp;
	struct ibv_mr *pin_mr, *odp_mr;
};

static long counter(const char *name)
{
	/* ib_core serves a value read within a jiffy of the last one from its cache. */
	usleep(50 * 1000);
	return hw_counter("rodp0", name);
}

FIXTURE_SETUP(odp)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, dev_open(&self->d, "rodp0"));
	for (int i = 0; i < 2; i++) {
		self->cq[i] = ibv_create_cq(self->d.ctx, 64, NULL, NULL, 0);
		ASSERT_NE(NULL, self->cq[i]);
		self->qp[i] = make_qp(&self->d, self->cq[i], self->cq[i], IBV_QPT_RC, NULL);
		ASSERT_NE(NULL, self->qp[i]);
	}
	for (int i = 0; i < 2; i++)
		ASSERT_EQ(0, rc_connect(self->qp[i], &self->d, self->qp[!i]->qp_num,
					&self->d.gid, &rc_default));
	self->pin = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->pin);
	self->pin_mr = ibv_reg_mr(self->d.pd, self->pin, LEN, ALL_ACCESS);
	ASSERT_NE(NULL, self->pin_mr);
	/* Never touched: no page of it exists until the device faults it in. */
	self->odp = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->odp);
	self->odp_mr = ibv_reg_mr(self->d.pd, self->odp, LEN, ODP_ACCESS);
	ASSERT_NE(NULL, self->odp_mr);
}

FIXTURE_TEARDOWN(odp)
{
	if (self->odp_mr)
		ibv_dereg_mr(self->odp_mr);
	if (self->pin_mr)
		ibv_dereg_mr(self->pin_mr);
	for (int i = 0; i < 2; i++) {
		if (self->qp[i])
			ibv_destroy_qp(self->qp[i]);
		if (self->cq[i])
			ibv_destroy_cq(self->cq[i]);
	}
	munmap(self->pin, LEN);
	munmap(self->odp, LEN);
	dev_close(&self->d);
	sh(NULL, 0, "rdma link delete rodp0");
}

/* QP 0 runs op between its pinned buffer and the ODP MR at off; returns the status. */
static int rdma(FIXTURE_DATA(odp) *self, enum ibv_wr_opcode op, size_t off, uint32_t len)
{
	struct ibv_wc wc;

	if (post_send(self->qp[0], op, self->pin + off, len, self->pin_mr->lkey,
		      (uintptr_t)self->odp + off, self->odp_mr->rkey, 0, 1) ||
	    poll1(self->cq[0], &wc, 20000) != 1)
		return -1;
	return wc.status;
}

TEST_F(odp, device_reports_explicit_odp)
{
	struct ibv_device_attr_ex a;
	uint32_t rc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
		      IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;

	ASSERT_EQ(0, ibv_query_device_ex(self->d.ctx, NULL, &a));
	EXPECT_TRUE(a.odp_caps.general_caps & IBV_ODP_SUPPORT);
	EXPECT_EQ(rc, a.odp_caps.per_transport_caps.rc_odp_caps);
	/* Implicit ODP is not offered yet, and its registration says so. */
	EXPECT_FALSE(a.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT);
	EXPECT_EQ(NULL, ibv_reg_mr(self->d.pd, NULL, SIZE_MAX, ODP_ACCESS));
}

/* The same totals in <ibdev>/odp_stats/ (sysfs, read-only). */
static long odp_stat(const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), "/sys/class/infiniband/rodp0/odp_stats/%s", name);
	return read_long(path);
}

TEST_F(odp, first_touch_faults_each_page_once)
{
	long faults = counter("num_page_faults");
	long pages = counter("num_page_fault_pages");
	long sys_pages = odp_stat("num_page_fault_pages");

	EXPECT_LE(0, sys_pages);
	EXPECT_EQ(-1, open("/sys/class/infiniband/rodp0/odp_stats/num_page_faults", O_WRONLY));

	fill(self->pin, LEN, 1);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_WRITE, 0, LEN));
	EXPECT_EQ(0, memcmp(self->pin, self->odp, LEN));
	/* One message, one batch: every page of it faulted in once. */
	EXPECT_EQ(NPAGES, counter("num_page_fault_pages") - pages);
	EXPECT_EQ(NPAGES, odp_stat("num_page_fault_pages") - sys_pages);
	EXPECT_EQ(1, counter("num_page_faults") - faults);
	/* Mapped now: the same range again faults nothing. */
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_WRITE, 0, LEN));
	EXPECT_EQ(NPAGES, counter("num_page_fault_pages") - pages);
}

TEST_F(odp, prefetch_faults_ahead_and_checks_its_arguments)
{
	struct ibv_sge sge = { (uintptr_t)self->odp, LEN, self->odp_mr->lkey };
	long handled = counter("num_prefetches_handled");
	long pages = counter("num_page_fault_pages");

	ASSERT_EQ(0, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
				   IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1));
	EXPECT_EQ(1, counter("num_prefetches_handled") - handled);
	EXPECT_EQ(NPAGES, counter("num_page_fault_pages") - pages);
	/* The transfer then finds every page present. */
	fill(self->pin, LEN, 9);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_WRITE, 0, LEN));
	EXPECT_EQ(0, memcmp(self->pin, self->odp, LEN));
	EXPECT_EQ(NPAGES, counter("num_page_fault_pages") - pages);
	/* Without the flush flag it is done on return as well (an advice may finish early). */
	EXPECT_EQ(0, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1));
	EXPECT_EQ(0, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &sge, 1));
	/* A range past the MR, a pinned MR, an unknown key. */
	sge.length = LEN + PAGE;
	EXPECT_EQ(EFAULT, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1));
	sge = (struct ibv_sge){ (uintptr_t)self->pin, PAGE, self->pin_mr->lkey };
	EXPECT_EQ(EINVAL, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1));
	sge = (struct ibv_sge){ (uintptr_t)self->odp, PAGE, self->odp_mr->lkey + 0x1000000 };
	EXPECT_EQ(ENOENT, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1));
}

TEST_F(odp, munmap_and_mmap_at_the_same_address_uses_the_new_pages)
{
	long inval = counter("num_invalidations");
	long inval_pages = counter("num_invalidation_pages");

	fill(self->pin, LEN, 2);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_WRITE, 0, LEN));
	ASSERT_EQ(0, munmap(self->odp, LEN));
	ASSERT_EQ(self->odp, mmap(self->odp, LEN, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
	fill(self->odp, LEN, 3);
	EXPECT_LE(1, counter("num_invalidations") - inval);
	EXPECT_EQ(NPAGES, counter("num_invalidation_pages") - inval_pages);
	memset(self->pin, 0, LEN);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_READ, 0, LEN));
	EXPECT_EQ(0, memcmp(self->pin, self->odp, LEN));
}

TEST_F(odp, madv_dontneed_then_access_reads_zeroes)
{
	static char zero[LEN];

	fill(self->pin, LEN, 4);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_WRITE, 0, LEN));
	ASSERT_EQ(0, madvise(self->odp, LEN, MADV_DONTNEED));
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_READ, 0, LEN));
	EXPECT_EQ(0, memcmp(self->pin, zero, LEN));
}

TEST_F(odp, send_recv_read_atomic_through_odp)
{
	uint64_t *word = (uint64_t *)(self->odp + 8 * PAGE);
	struct ibv_wc wc;

	/* A receive buffer in never-touched ODP memory. */
	ASSERT_EQ(0, post_recv(self->qp[1], self->odp + PAGE, 3 * PAGE, self->odp_mr->lkey, 5));
	fill(self->pin, 3 * PAGE, 5);
	ASSERT_EQ(0, post_send(self->qp[0], IBV_WR_SEND, self->pin, 3 * PAGE, self->pin_mr->lkey,
			       0, 0, 0, 6));
	ASSERT_EQ(1, poll1(self->cq[0], &wc, 20000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	ASSERT_EQ(1, poll1(self->cq[1], &wc, 20000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(0, memcmp(self->pin, self->odp + PAGE, 3 * PAGE));
	/* Read back what the process wrote itself. */
	fill(self->odp + 16 * PAGE, 2 * PAGE, 6);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_READ, 16 * PAGE, 2 * PAGE));
	EXPECT_EQ(0, memcmp(self->pin + 16 * PAGE, self->odp + 16 * PAGE, 2 * PAGE));
	/* Fetch-and-add on a page the device faults in. */
	ASSERT_EQ(0, post_atomic(self->qp[0], IBV_WR_ATOMIC_FETCH_AND_ADD, self->pin,
				 self->pin_mr->lkey, (uintptr_t)word, self->odp_mr->rkey, 5, 0));
	ASSERT_EQ(1, poll1(self->cq[0], &wc, 20000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(5, *word);
}

TEST_F(odp, remote_write_to_read_only_memory_fails)
{
	fill(self->pin, PAGE, 7);
	ASSERT_EQ(0, mprotect(self->odp, LEN, PROT_READ));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rdma(self, IBV_WR_RDMA_WRITE, 0, PAGE));
}

TEST_F(odp, a_hole_in_a_remote_range_is_an_access_error)
{
	ASSERT_EQ(0, munmap(self->odp + 4 * PAGE, PAGE));
	fill(self->pin, LEN, 8);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rdma(self, IBV_WR_RDMA_WRITE, 0, 8 * PAGE));
}

TEST_F(odp, a_hole_under_a_local_sge_is_a_protection_error)
{
	struct ibv_wc wc;

	ASSERT_EQ(0, munmap(self->odp + 4 * PAGE, PAGE));
	ASSERT_EQ(0, post_send(self->qp[1], IBV_WR_SEND, self->odp, 8 * PAGE, self->odp_mr->lkey,
			       0, 0, 0, 9));
	ASSERT_EQ(1, poll1(self->cq[1], &wc, 20000));
	EXPECT_EQ(IBV_WC_LOC_PROT_ERR, wc.status);
}

TEST_HARNESS_MAIN
