// SPDX-License-Identifier: GPL-2.0
/*
 * rodp's driver-specific uverbs methods (include/rodp-xmw-abi.h), reached raw as the extended
 * memory windows library reaches them (RDMA_VERBS_IOCTL on the command file of a context the
 * unchanged rxe provider opened) and through the library itself, librodp-xmw: this program is
 * built against it through pkg-config (the Makefile's rule for it fails without) and loads it
 * from beside itself ($ORIGIN). The device answers what it binds of extended windows (nothing
 * yet: every capability it reports must work), to an unprivileged user too, and refuses calls
 * that name another driver or a method it does not have; the library answers what the kernel
 * answers, EINVAL for a NULL argument and EOPNOTSUPP on rxe's own device.
 */
#include "rodp_verbs.h"
#include "rodp_harness.h"
#include <sys/ioctl.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rodp-xmw-abi.h>
#include <rodp-xmw.h>

/* One method call with one output attribute of len bytes at out; errno on failure. */
static int call_out(struct ibv_context *ctx, __u16 object, __u16 method, __u32 driver,
		    __u16 attr, void *out, __u16 len, __u16 *flags)
{
	struct {
		struct ib_uverbs_ioctl_hdr hdr;
		struct ib_uverbs_attr attr;
	} req = {
		.hdr = {
			.length = sizeof(req),
			.object_id = object,
			.method_id = method,
			.num_attrs = 1,
			.driver_id = driver,
		},
		.attr = {
			.attr_id = attr,
			.len = len,
			.flags = UVERBS_ATTR_F_MANDATORY,
			.data = (uintptr_t)out,
		},
	};

	if (ioctl(ctx->cmd_fd, RDMA_VERBS_IOCTL, &req))
		return errno;
	if (flags)
		*flags = req.attr.flags;
	return 0;
}

FIXTURE(xmw) {
	struct ibv_context *ctx;
};

FIXTURE_SETUP(xmw)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	self->ctx = open_dev("rodp0");
	ASSERT_NE(NULL, self->ctx);
}

FIXTURE_TEARDOWN(xmw)
{
	if (self->ctx)
		ibv_close_device(self->ctx);
	sh(NULL, 0, "rdma link delete rodp0");
}

TEST_F(xmw, the_device_says_what_it_binds)
{
	struct rodp_xmw_caps caps;
	__u16 flags = 0;

	memset(&caps, 0xa5, sizeof(caps));
	ASSERT_EQ(0, call_out(self->ctx, UVERBS_OBJECT_DEVICE, RODP_METHOD_DEVICE_QUERY_XMW,
			      RDMA_DRIVER_RXE, RODP_ATTR_QUERY_XMW_CAPS, &caps, sizeof(caps),
			      &flags));
	EXPECT_TRUE(flags & UVERBS_ATTR_F_VALID_OUTPUT);
	/* Nothing is implemented yet: no layout kind reported, no limits. */
	EXPECT_EQ(0, caps.flags);
	EXPECT_EQ(0, caps.max_mkey_list_sz);
	EXPECT_EQ(0, caps.max_total);
	EXPECT_EQ(0, caps.reserved);
}

TEST_F(xmw, a_shorter_output_gets_what_fits)
{
	__u32 first = 0xa5a5a5a5;

	/* The core copies min(user length, struct) and no more; the struct's minimum length
	 * (through max_total) makes a 4-byte buffer too short: refused. */
	EXPECT_EQ(EINVAL, call_out(self->ctx, UVERBS_OBJECT_DEVICE, RODP_METHOD_DEVICE_QUERY_XMW,
				   RDMA_DRIVER_RXE, RODP_ATTR_QUERY_XMW_CAPS, &first, sizeof(first),
				   NULL));
	EXPECT_EQ(0xa5a5a5a5, first);
}

TEST_F(xmw, another_drivers_call_or_an_unknown_method_is_refused)
{
	struct rodp_xmw_caps caps;

	EXPECT_EQ(EINVAL, call_out(self->ctx, UVERBS_OBJECT_DEVICE,
				   RODP_METHOD_DEVICE_QUERY_XMW, RDMA_DRIVER_MLX5,
				   RODP_ATTR_QUERY_XMW_CAPS, &caps, sizeof(caps), NULL));
	EXPECT_EQ(EPROTONOSUPPORT, call_out(self->ctx, UVERBS_OBJECT_DEVICE,
					    RODP_METHOD_DEVICE_QUERY_XMW + 1, RDMA_DRIVER_RXE,
					    RODP_ATTR_QUERY_XMW_CAPS, &caps, sizeof(caps), NULL));
}

TEST_F(xmw, the_library_answers_what_the_kernel_answers)
{
	struct rodp_xmw_mw_caps caps;
	struct rodp_xmw_caps k;

	memset(&caps, 0xa5, sizeof(caps));
	memset(&k, 0x5a, sizeof(k));
	ASSERT_EQ(0, rodp_xmw_query_device(self->ctx, &caps));
	ASSERT_EQ(0, call_out(self->ctx, UVERBS_OBJECT_DEVICE, RODP_METHOD_DEVICE_QUERY_XMW,
			      RDMA_DRIVER_RXE, RODP_ATTR_QUERY_XMW_CAPS, &k, sizeof(k), NULL));
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

TEST_F(xmw, the_library_refuses_null_arguments)
{
	struct rodp_xmw_mw_caps caps;

	EXPECT_EQ(EINVAL, rodp_xmw_query_device(NULL, &caps));
	EXPECT_EQ(EINVAL, rodp_xmw_query_device(self->ctx, NULL));
}

/* The library's callers are users: the query needs no privilege, raw or through it. */
TEST_F(xmw, an_unprivileged_user_gets_the_answer)
{
	int st;
	pid_t pid = fork();

	ASSERT_LE(0, pid);
	if (!pid) {
		struct rodp_xmw_mw_caps lib;
		struct rodp_xmw_caps caps;
		struct ibv_context *ctx;

		if (become_nobody())
			_exit(1);
		ctx = open_dev("rodp0");
		if (!ctx)
			_exit(2);
		if (call_out(ctx, UVERBS_OBJECT_DEVICE, RODP_METHOD_DEVICE_QUERY_XMW,
			     RDMA_DRIVER_RXE, RODP_ATTR_QUERY_XMW_CAPS, &caps, sizeof(caps), NULL))
			_exit(3);
		_exit(rodp_xmw_query_device(ctx, &lib) ? 4 : 0);
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
	ensure_netdevs();
	sh(NULL, 0, "rdma link delete rodp0");
}
FIXTURE_TEARDOWN(other)
{
	sh(NULL, 0, "rdma link delete rxe0; rmmod rdma_rxe");
}

TEST_F_TIMEOUT(other, the_library_gets_eopnotsupp_on_another_drivers_device, 240)
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
