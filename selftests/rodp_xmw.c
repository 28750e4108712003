// SPDX-License-Identifier: GPL-2.0
/*
 * rodp's driver-specific uverbs methods (include/rodp-xmw-abi.h), reached raw as the extended
 * memory windows library reaches them (RDMA_VERBS_IOCTL on the command file of a context the
 * unchanged rxe provider opened) and through the library itself, librodp-xmw: this program is
 * built against it through pkg-config (the Makefile's rule for it fails without) and loads it
 * from beside itself ($ORIGIN). The device answers what it binds of extended windows (no
 * layout kind yet, only the descriptor limit: every capability it reports must work), to an
 * unprivileged user too, and refuses calls that name another driver or a method it does not
 * have. MRs take the grant of non-contiguous binding (shown by rdma, kept through
 * re-registration) and windows a descriptor budget (within the limit, not while bound); a
 * handle names only the caller's own objects. The library answers what the kernel answers,
 * EINVAL for a NULL argument and EOPNOTSUPP on rxe's own device.
 */
#include "rodp_mw.h"
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

/* One method call on an object: the handle attribute, then an optional inline __u32 input. */
static int call_obj(struct ibv_context *ctx, __u16 object, __u16 method, __u16 handle_attr,
		    __u32 handle, __u16 in_attr, const __u32 *in)
{
	struct {
		struct ib_uverbs_ioctl_hdr hdr;
		struct ib_uverbs_attr attr[2];
	} req = {
		.hdr = {
			.length = sizeof(req.hdr) + (in ? 2 : 1) * sizeof(req.attr[0]),
			.object_id = object,
			.method_id = method,
			.num_attrs = in ? 2 : 1,
			.driver_id = RDMA_DRIVER_RXE,
		},
		.attr = {
			{ .attr_id = handle_attr, .flags = UVERBS_ATTR_F_MANDATORY,
			  .data = handle },
			{ .attr_id = in_attr, .len = sizeof(*in), .flags = UVERBS_ATTR_F_MANDATORY },
		},
	};

	if (in)
		memcpy(&req.attr[1].data, in, sizeof(*in));
	if (ioctl(ctx->cmd_fd, RDMA_VERBS_IOCTL, &req))
		return errno;
	return 0;
}

static int grant_raw(struct ibv_context *ctx, __u32 mr_handle)
{
	return call_obj(ctx, UVERBS_OBJECT_MR, RODP_METHOD_MR_XMW_GRANT,
			RODP_ATTR_MR_XMW_GRANT_HANDLE, mr_handle, 0, NULL);
}

static int xinit_raw(struct ibv_context *ctx, __u32 mw_handle, __u32 n)
{
	return call_obj(ctx, UVERBS_OBJECT_MW, RODP_METHOD_MW_XINIT, RODP_ATTR_MW_XINIT_HANDLE,
			mw_handle, RODP_ATTR_MW_XINIT_MAX_DESCRIPTORS, &n);
}

/* Whether rdma shows mr granted (1), not granted (0), or not at all (-1). */
static int granted(struct ibv_mr *mr)
{
	char line[1024];

	if (res_line(mr, line, sizeof(line)))
		return -1;
	return strstr(line, "drv_bind_noncontig 1") != NULL;
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
	/* No layout kind binds yet, so no layout limits; windows take a descriptor budget. */
	EXPECT_EQ(0, caps.flags);
	EXPECT_NE(0, caps.max_mkey_list_sz);
	EXPECT_NE(0xa5a5a5a5, caps.max_mkey_list_sz);
	EXPECT_EQ(0, caps.max_mkey_inline_list_sz);
	EXPECT_EQ(0, caps.max_mw_recursion_depth);
	EXPECT_EQ(0, caps.max_mw_stride_dimension);
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
	EXPECT_EQ(EINVAL, rodp_xmw_grant_noncontig(NULL));
	errno = 0;
	EXPECT_EQ(NULL, rodp_xmw_alloc_mw_ex(NULL, IBV_MW_TYPE_1, 1));
	EXPECT_EQ(EINVAL, errno);
}

/*
 * Handles are indices into the calling file's own table: another context's MR or window
 * handle, given on this context's file (which has no objects at all), names nothing, and the
 * other context's objects are untouched.
 */
TEST_F(xmw, a_handle_names_only_the_callers_objects)
{
	char *mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr;
	struct ibv_mw *mw;
	struct dev other;

	ASSERT_NE(MAP_FAILED, mem);
	ASSERT_EQ(0, dev_open(&other, "rodp0"));
	mr = ibv_reg_mr(other.pd, mem, 4096, IBV_ACCESS_LOCAL_WRITE);
	ASSERT_NE(NULL, mr);
	mw = ibv_alloc_mw(other.pd, IBV_MW_TYPE_2);
	ASSERT_NE(NULL, mw);
	EXPECT_EQ(ENOENT, grant_raw(self->ctx, mr->handle));
	EXPECT_EQ(ENOENT, xinit_raw(self->ctx, mw->handle, 1));
	EXPECT_EQ(0, granted(mr));
	/* Its owner grants it: the same handle on its own file. */
	EXPECT_EQ(0, grant_raw(other.ctx, mr->handle));
	EXPECT_EQ(1, granted(mr));
	/* A handle of another type on the owner's file: the window's handle as an MR's. */
	EXPECT_EQ(EINVAL, grant_raw(other.ctx, mw->handle));
	EXPECT_EQ(0, ibv_dealloc_mw(mw));
	EXPECT_EQ(0, ibv_dereg_mr(mr));
	dev_close(&other);
	munmap(mem, 4096);
}

#define LEN (64 * 1024)

/* A device with a connected RC pair (for window binds) and an MR that windows may bind. */
FIXTURE(objs) {
	struct dev d;
	struct rc_pair rc;
	char *mem;
	struct ibv_mr *mr;
	struct rodp_xmw_mw_caps caps;
};

FIXTURE_SETUP(objs)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, dev_open(&self->d, "rodp0"));
	ASSERT_EQ(0, rc_pair_open(&self->rc, &self->d, NULL, 4096, &rc_default));
	self->mem = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->mem);
	self->mr = ibv_reg_mr(self->d.pd, self->mem, LEN, ALL_ACCESS | IBV_ACCESS_MW_BIND);
	ASSERT_NE(NULL, self->mr);
	ASSERT_EQ(0, rodp_xmw_query_device(self->d.ctx, &self->caps));
}

FIXTURE_TEARDOWN(objs)
{
	if (self->mr)
		ibv_dereg_mr(self->mr);
	rc_pair_close(&self->rc);
	munmap(self->mem, LEN);
	dev_close(&self->d);
	sh(NULL, 0, "rdma link delete rodp0");
}

TEST_F(objs, a_grant_shows_and_lasts_through_re_registration)
{
	struct ibv_mr *odp;

	EXPECT_EQ(0, granted(self->mr));
	ASSERT_EQ(0, rodp_xmw_grant_noncontig(self->mr));
	EXPECT_EQ(1, granted(self->mr));
	/* Only that MR. */
	EXPECT_EQ(0, granted(self->rc.mr[0]));
	/* Again: nothing changes. */
	EXPECT_EQ(0, rodp_xmw_grant_noncontig(self->mr));
	EXPECT_EQ(1, granted(self->mr));
	/* A new range, then new rights: the grant is the MR's, not one registration's. */
	ASSERT_EQ(0, rereg_cmd(self->d.ctx, self->mr, IBV_REREG_MR_CHANGE_TRANSLATION, self->mem + 4096, 4096,
			       (uintptr_t)self->mem + 4096, NULL, 0, NULL, NULL));
	EXPECT_EQ(1, granted(self->mr));
	ASSERT_EQ(0, rereg_cmd(self->d.ctx, self->mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, 0, 0, NULL,
			       IBV_ACCESS_LOCAL_WRITE, NULL, NULL));
	EXPECT_EQ(1, granted(self->mr));
	/* An ODP MR takes it as well. */
	odp = ibv_reg_mr(self->d.pd, self->mem, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	ASSERT_NE(NULL, odp);
	EXPECT_EQ(0, rodp_xmw_grant_noncontig(odp));
	EXPECT_EQ(1, granted(odp));
	EXPECT_EQ(0, ibv_dereg_mr(odp));
}

TEST_F(objs, a_window_takes_a_budget_within_the_limit)
{
	__u32 max = self->caps.max_mkey_list_sz;
	struct ibv_mw *mw;

	ASSERT_NE(0, max);
	for (int t = 0; t < 2; t++) {
		enum ibv_mw_type type = t ? IBV_MW_TYPE_2 : IBV_MW_TYPE_1;

		mw = rodp_xmw_alloc_mw_ex(self->d.pd, type, 1);
		ASSERT_NE(NULL, mw);
		EXPECT_EQ(type, mw->type);
		EXPECT_EQ(0, ibv_dealloc_mw(mw));
		mw = rodp_xmw_alloc_mw_ex(self->d.pd, type, max);
		ASSERT_NE(NULL, mw);
		/* The budget may change while the window is free, within the same limits. */
		EXPECT_EQ(0, xinit_raw(self->d.ctx, mw->handle, 7));
		EXPECT_EQ(EINVAL, xinit_raw(self->d.ctx, mw->handle, 0));
		EXPECT_EQ(EINVAL, xinit_raw(self->d.ctx, mw->handle, max + 1));
		EXPECT_EQ(EINVAL, xinit_raw(self->d.ctx, mw->handle, 0xffffffff));
		EXPECT_EQ(0, ibv_dealloc_mw(mw));
		errno = 0;
		EXPECT_EQ(NULL, rodp_xmw_alloc_mw_ex(self->d.pd, type, 0));
		EXPECT_EQ(EINVAL, errno);
		errno = 0;
		EXPECT_EQ(NULL, rodp_xmw_alloc_mw_ex(self->d.pd, type, max + 1));
		EXPECT_EQ(EINVAL, errno);
	}
}

/* A bound window keeps its binding: the budget changes only once it is unbound. */
TEST_F(objs, a_bound_window_refuses_a_new_budget_until_it_is_unbound)
{
	struct ibv_qp *qp = self->rc.qp[1];
	struct ibv_cq *cq = self->rc.cq[1];
	struct ibv_mw *w1 = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_1, 4);
	struct ibv_mw *w2 = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_2, 4);

	ASSERT_NE(NULL, w1);
	ASSERT_NE(NULL, w2);
	/* Extended windows still bind as ordinary ones. */
	ASSERT_EQ(IBV_WC_SUCCESS, bind1(qp, cq, w1, self->mr, self->mem, 4096, WIN_RIGHTS));
	ASSERT_EQ(IBV_WC_SUCCESS, bind2(qp, cq, w2, next_key(w2->rkey), self->mr,
					(uintptr_t)self->mem, 4096, WIN_RIGHTS));
	EXPECT_EQ(EBUSY, xinit_raw(self->d.ctx, w1->handle, 8));
	EXPECT_EQ(EBUSY, xinit_raw(self->d.ctx, w2->handle, 8));
	/* Unbound: a type 1 window by a zero-length bind, a type 2B one by invalidation. */
	ASSERT_EQ(IBV_WC_SUCCESS, bind1(qp, cq, w1, self->mr, self->mem, 0, 0));
	ASSERT_EQ(IBV_WC_SUCCESS, local_inv(qp, cq, w2->rkey));
	EXPECT_EQ(0, xinit_raw(self->d.ctx, w1->handle, 8));
	EXPECT_EQ(0, xinit_raw(self->d.ctx, w2->handle, 8));
	EXPECT_EQ(0, ibv_dealloc_mw(w1));
	EXPECT_EQ(0, ibv_dealloc_mw(w2));
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
		struct ibv_pd *pd;
		struct ibv_mr *mr;
		struct ibv_mw *mw;

		if (become_nobody())
			_exit(1);
		ctx = open_dev("rodp0");
		if (!ctx)
			_exit(2);
		if (call_out(ctx, UVERBS_OBJECT_DEVICE, RODP_METHOD_DEVICE_QUERY_XMW,
			     RDMA_DRIVER_RXE, RODP_ATTR_QUERY_XMW_CAPS, &caps, sizeof(caps), NULL))
			_exit(3);
		if (rodp_xmw_query_device(ctx, &lib))
			_exit(4);
		/* Granting one's own MR and giving one's own window a budget need no privilege. */
		pd = ibv_alloc_pd(ctx);
		mr = pd ? ibv_reg_mr(pd, &caps, sizeof(caps), IBV_ACCESS_LOCAL_WRITE) : NULL;
		if (!mr || rodp_xmw_grant_noncontig(mr))
			_exit(5);
		mw = rodp_xmw_alloc_mw_ex(pd, IBV_MW_TYPE_2, 2);
		_exit(mw && !ibv_dealloc_mw(mw) && !ibv_dereg_mr(mr) ? 0 : 6);
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
	struct ibv_pd *pd;
	struct ibv_mr *mr;

	ASSERT_EQ(0, sh(NULL, 0, "modprobe rdma_rxe"));
	ASSERT_EQ(0, sh(NULL, 0, "rdma link add rxe0 type rxe netdev veth0"));
	ctx = open_dev("rxe0");
	ASSERT_NE(NULL, ctx);
	EXPECT_EQ(EOPNOTSUPP, rodp_xmw_query_device(ctx, &caps));
	pd = ibv_alloc_pd(ctx);
	ASSERT_NE(NULL, pd);
	mr = ibv_reg_mr(pd, &caps, sizeof(caps), 0);
	ASSERT_NE(NULL, mr);
	EXPECT_EQ(EOPNOTSUPP, rodp_xmw_grant_noncontig(mr));
	errno = 0;
	EXPECT_EQ(NULL, rodp_xmw_alloc_mw_ex(pd, IBV_MW_TYPE_2, 1));
	EXPECT_EQ(EOPNOTSUPP, errno);
	EXPECT_EQ(0, ibv_dereg_mr(mr));
	EXPECT_EQ(0, ibv_dealloc_pd(pd));
	ibv_close_device(ctx);
}

TEST_HARNESS_MAIN
