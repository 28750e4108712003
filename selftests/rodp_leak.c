// SPDX-License-Identifier: GPL-2.0
/*
 * rodp lifetime tests: many PDs and contexts without leaks, the PD limit, and rmmod while a
 * context is open.
 */
#include "rodp_test.h"
#include "kselftest_harness.h"

/* Slab objects that may come and go for reasons of their own during the loops. */
#define SLAB_SLACK 600

TEST(pd_10000_no_leak)
{
	struct ibv_context *ctx;
	long before, after, ref;

	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ref = module_refcnt("rodp");
	ctx = open_dev("rodp0");
	ASSERT_NE(NULL, ctx);
	before = kmalloc_objects();
	for (int i = 0; i < 10000; i++) {
		struct ibv_pd *pd = ibv_alloc_pd(ctx);

		ASSERT_NE(NULL, pd);
		ASSERT_EQ(0, ibv_dealloc_pd(pd));
	}
	after = kmalloc_settled(before);
	EXPECT_LT(after - before, SLAB_SLACK) TH_LOG("kmalloc objects %ld -> %ld", before, after);
	ibv_close_device(ctx);
	EXPECT_EQ(ref, module_refcnt("rodp"));
	sh(NULL, 0, "rdma link delete rodp0");
}

TEST(context_1000_no_leak)
{
	long before, after, ref;

	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ref = module_refcnt("rodp");
	before = kmalloc_objects();
	for (int i = 0; i < 1000; i++) {
		struct ibv_context *ctx = open_dev("rodp0");

		ASSERT_NE(NULL, ctx);
		ASSERT_EQ(0, ibv_close_device(ctx));
	}
	after = kmalloc_settled(before);
	EXPECT_LT(after - before, SLAB_SLACK) TH_LOG("kmalloc objects %ld -> %ld", before, after);
	EXPECT_EQ(ref, module_refcnt("rodp"));
	sh(NULL, 0, "rdma link delete rodp0");
}

TEST(pd_limit_enforced_and_released)
{
	enum { MAX = 65536 };
	struct ibv_pd **pds = calloc(MAX + 1, sizeof(*pds));
	struct ibv_context *ctx;
	int n;

	ASSERT_NE(NULL, pds);
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ctx = open_dev("rodp0");
	ASSERT_NE(NULL, ctx);
	for (int round = 0; round < 2; round++) {
		for (n = 0; n < MAX; n++) {
			pds[n] = ibv_alloc_pd(ctx);
			if (!pds[n])
				break;
		}
		EXPECT_EQ(MAX, n);
		EXPECT_EQ(NULL, ibv_alloc_pd(ctx));
		for (int i = 0; i < n; i++)
			ibv_dealloc_pd(pds[i]);
	}
	ibv_close_device(ctx);
	free(pds);
	sh(NULL, 0, "rdma link delete rodp0");
}

/*
 * rodp implements disassociate_ucontext, so uverbs does not pin the module for open contexts:
 * rmmod tears every device down, the open context fails further calls, and closing it is clean.
 */
TEST(rmmod_with_context_open_tears_down)
{
	struct ibv_context *ctx;
	char out[512];

	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, link_add("rodp1", "veth1"));
	ctx = open_dev("rodp0");
	ASSERT_NE(NULL, ctx);
	EXPECT_EQ(0, sh(out, sizeof(out), "rmmod rodp")) TH_LOG("%s", out);
	EXPECT_FALSE(dev_listed("rodp0"));
	EXPECT_FALSE(dev_listed("rodp1"));
	EXPECT_EQ(-1, module_refcnt("rodp"));
	EXPECT_EQ(NULL, ibv_alloc_pd(ctx));
	EXPECT_EQ(0, ibv_close_device(ctx));
	/* rdma link add loads the module again through its alias. */
	EXPECT_EQ(0, link_add("rodp0", "veth0"));
	EXPECT_TRUE(dev_listed("rodp0"));
	sh(NULL, 0, "rdma link delete rodp0");
}

TEST_HARNESS_MAIN
