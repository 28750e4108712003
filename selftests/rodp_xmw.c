// SPDX-License-Identifier: GPL-2.0
/*
 * rodp's driver-specific uverbs methods (include/rodp-xmw-abi.h), reached as the extended
 * memory windows library will reach them: RDMA_VERBS_IOCTL on the command file of a context the
 * unchanged rxe provider opened, as an unprivileged user. The device answers what it binds of
 * extended windows (nothing yet: every capability it reports must work), and refuses calls
 * that name another driver or a method it does not have.
 */
#include "rodp_verbs.h"
#include "rodp_harness.h"
#include <sys/ioctl.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include "../include/rodp-xmw-abi.h"

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

/* The library's callers are users: the query needs no privilege. */
TEST_F(xmw, an_unprivileged_user_gets_the_answer)
{
	int st;
	pid_t pid = fork();

	ASSERT_LE(0, pid);
	if (!pid) {
		struct rodp_xmw_caps caps;
		struct ibv_context *ctx;

		if (become_nobody())
			_exit(1);
		ctx = open_dev("rodp0");
		if (!ctx)
			_exit(2);
		_exit(call_out(ctx, UVERBS_OBJECT_DEVICE, RODP_METHOD_DEVICE_QUERY_XMW,
			       RDMA_DRIVER_RXE, RODP_ATTR_QUERY_XMW_CAPS, &caps, sizeof(caps),
			       NULL) ? 3 : 0);
	}
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_TRUE(WIFEXITED(st));
	EXPECT_EQ(0, WEXITSTATUS(st));
}

TEST_HARNESS_MAIN
