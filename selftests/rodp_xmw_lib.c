// SPDX-License-Identifier: GPL-2.0
/*
 * librodp-xmw as a program uses it: built against the library through pkg-config (the
 * Makefile's rule for this program fails without it) and loaded from beside the program
 * ($ORIGIN), calling it on contexts the unchanged rxe provider opened. The library's answer is
 * the kernel's (the raw call, as rodp_xmw makes it, gives the same); a device that is not
 * rodp's gets EOPNOTSUPP, a NULL argument EINVAL; an unprivileged user gets the answer.
 */
#include "rodp_verbs.h"
#include "rodp_harness.h"
#include <rodp-xmw.h>
#include <sys/ioctl.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rodp-xmw-abi.h>

/* The kernel's answer without the library. */
static int raw_caps(struct ibv_context *ctx, struct rodp_xmw_caps *caps)
{
	struct {
		struct ib_uverbs_ioctl_hdr hdr;
		struct ib_uverbs_attr attr;
	} req = {
		.hdr = {
			.length = sizeof(req),
			.object_id = UVERBS_OBJECT_DEVICE,
			.method_id = RODP_METHOD_DEVICE_QUERY_XMW,
			.num_attrs = 1,
			.driver_id = RDMA_DRIVER_RXE,
		},
		.attr = {
			.attr_id = RODP_ATTR_QUERY_XMW_CAPS,
			.len = sizeof(*caps),
			.flags = UVERBS_ATTR_F_MANDATORY,
			.data = (uintptr_t)caps,
		},
	};

	return ioctl(ctx->cmd_fd, RDMA_VERBS_IOCTL, &req) ? errno : 0;
}

FIXTURE(lib) {
	struct ibv_context *ctx;
};

FIXTURE_SETUP(lib)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	self->ctx = open_dev("rodp0");
	ASSERT_NE(NULL, self->ctx);
}

FIXTURE_TEARDOWN(lib)
{
	if (self->ctx)
		ibv_close_device(self->ctx);
	sh(NULL, 0, "rdma link delete rodp0");
}

TEST_F(lib, answers_what_the_kernel_answers)
{
	struct rodp_xmw_mw_caps caps;
	struct rodp_xmw_caps k;

	memset(&caps, 0xa5, sizeof(caps));
	memset(&k, 0x5a, sizeof(k));
	ASSERT_EQ(0, rodp_xmw_query_device(self->ctx, &caps));
	ASSERT_EQ(0, raw_caps(self->ctx, &k));
	EXPECT_EQ(k.flags, caps.general_caps);
	EXPECT_EQ(k.max_mkey_list_sz, caps.max_mkey_list_sz);
	EXPECT_EQ(k.max_mkey_inline_list_sz, caps.max_mkey_inline_list_sz);
	EXPECT_EQ(k.max_mw_recursion_depth, caps.max_mw_recursion_depth);
	EXPECT_EQ(k.max_mw_stride_dimension, caps.max_mw_stride_dimension);
	EXPECT_EQ(k.max_total, caps.max_total);
	/* A layout kind reported comes with its limits. */
	if (caps.general_caps) {
		EXPECT_NE(0, caps.max_mkey_list_sz);
		EXPECT_NE(0, caps.max_total);
	}
}

TEST_F(lib, null_arguments_are_refused)
{
	struct rodp_xmw_mw_caps caps;

	EXPECT_EQ(EINVAL, rodp_xmw_query_device(NULL, &caps));
	EXPECT_EQ(EINVAL, rodp_xmw_query_device(self->ctx, NULL));
}

TEST_F(lib, an_unprivileged_user_gets_the_answer)
{
	int st;
	pid_t pid = fork();

	ASSERT_LE(0, pid);
	if (!pid) {
		struct rodp_xmw_mw_caps caps;
		struct ibv_context *ctx;

		if (become_nobody())
			_exit(1);
		ctx = open_dev("rodp0");
		if (!ctx)
			_exit(2);
		_exit(rodp_xmw_query_device(ctx, &caps) ? 3 : 0);
	}
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_TRUE(WIFEXITED(st));
	EXPECT_EQ(0, WEXITSTATUS(st));
}

/* rxe's own device (the port is rxe's once rodp's last device is gone). Loading rdma_rxe
 * takes tens of seconds under TCG. */
FIXTURE(other) {};
FIXTURE_SETUP(other)
{
	sh(NULL, 0, "rdma link delete rodp0");
}
FIXTURE_TEARDOWN(other)
{
	sh(NULL, 0, "rdma link delete rxe0; rmmod rdma_rxe");
}

TEST_F_TIMEOUT(other, another_drivers_device_gets_eopnotsupp, 240)
{
	struct rodp_xmw_mw_caps caps;
	struct ibv_context *ctx;

	ASSERT_EQ(0, sh(NULL, 0, "modprobe rdma_rxe"));
	ASSERT_EQ(0, sh(NULL, 0, "rdma link add rxe0 type rxe netdev veth0"));
	ctx = open_dev("rxe0");
	ASSERT_NE(NULL, ctx);
	EXPECT_EQ(EOPNOTSUPP, rodp_xmw_query_device(ctx, &caps));
	ibv_close_device(ctx);
}

TEST_HARNESS_MAIN
