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
#include "rodp_xmw_model.h"

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
	link_delete("rodp0");
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
	/* Every layout kind binds; send-queue binds are staged (no inline entries); windows in
	 * layouts over MRs only (depth 2). */
	EXPECT_EQ(RODP_XMW_COMPOSITE | RODP_XMW_INTERLEAVED | RODP_XMW_INTERLEAVED_REPETITION |
		  RODP_XMW_INTERLEAVED_NONUNIFORM_REPETITION |
		  RODP_XMW_INTERLEAVED_NONUNIFORM_TOTAL_ITEMS, caps.flags);
	EXPECT_NE(0, caps.max_mkey_list_sz);
	EXPECT_NE(0xa5a5a5a5, caps.max_mkey_list_sz);
	EXPECT_EQ(0, caps.max_mkey_inline_list_sz);
	EXPECT_EQ(2, caps.max_mw_recursion_depth);
	EXPECT_EQ(RODP_XMW_MAX_DIMS, caps.max_mw_stride_dimension);
	EXPECT_NE(0, caps.max_total);
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
	ASSERT_EQ(0, rc_pair_open(&self->rc, &self->d, NULL, LEN, &rc_default));
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
	link_delete("rodp0");
}

/* The worked example of xmw.rst (lib/xmw/examples/matrix_column.c, built through pkg-config
 * as xmw_matrix_column beside this program) runs and says every cell is in place. */
TEST_F(xmw, the_worked_example_runs)
{
	char path[4096], out[1024];
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 32);

	ASSERT_LT(0, n);
	path[n] = 0;
	strcpy(strrchr(path, '/') + 1, "xmw_matrix_column");
	EXPECT_EQ(0, sh(out, sizeof(out), "%s rodp0 5", path)) TH_LOG("%s", out);
	EXPECT_NE(NULL, strstr(out, "column 5 of a 64x64 matrix (a 512-byte window, cells 512 "
				    "bytes apart) written and read in one operation each: ok"))
		TH_LOG("%s", out);
	/* A column out of range is the usage error, not a bind. */
	EXPECT_EQ(2, sh(NULL, 0, "%s rodp0 64", path));
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

/* The library's callers are users: no call needs privilege, raw or through the library. */
TEST_F(xmw, an_unprivileged_user_gets_the_answer)
{
	int st;
	pid_t pid = fork();

	ASSERT_LE(0, pid);
	if (!pid) {
		struct rodp_xmw_entry e = { 0 };
		struct rodp_xmw_mw_caps lib;
		struct rodp_xmw_caps caps;
		struct ibv_context *ctx;
		struct ibv_qp *qp;
		struct ibv_cq *cq;
		struct ibv_pd *pd;
		struct ibv_mr *mr;
		struct ibv_mw *mw;
		uint64_t total = 0;
		struct dev d;

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
		if (!mw || ibv_dealloc_mw(mw))
			_exit(6);
		/* Nor does binding a layout of one's own memory; its rules hold for users too. */
		d = (struct dev){ .ctx = ctx, .pd = pd };
		cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
		qp = cq ? make_qp(&d, cq, cq, IBV_QPT_RC, NULL) : NULL;
		mw = rodp_xmw_alloc_mw_ex(pd, IBV_MW_TYPE_1, 1);
		if (!qp || !mw)
			_exit(7);
		e.key = mr->lkey;
		e.start = (uintptr_t)&caps;
		e.len = 8;
		e.repeat_count = 1;
		if (rodp_xmw_bind_layout(qp, mw, 0x1000, IBV_ACCESS_REMOTE_READ,
					 RODP_XMW_KIND_COMPOSITE, &e, 1, &total) || total != 8)
			_exit(8);
		e.start += sizeof(caps);
		if (rodp_xmw_bind_layout(qp, mw, 0x1000, IBV_ACCESS_REMOTE_READ,
					 RODP_XMW_KIND_COMPOSITE, &e, 1, &total) != EINVAL)
			_exit(9);
		_exit(!ibv_dealloc_mw(mw) && !ibv_destroy_qp(qp) && !ibv_dereg_mr(mr) ? 0 : 10);
	}
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_TRUE(WIFEXITED(st));
	EXPECT_EQ(0, WEXITSTATUS(st));
}

/*
 * Layouts. The window lives at its own address BASE; QP 0 reads and writes it through QP 1,
 * which bound it. The test's model (Documentation/xmw.rst, "Reference algorithm", written out
 * cycle by cycle) gives the memory address of every window byte.
 */
#define BASE 0x5a0000000000ULL
#define MAXW (16 * 1024)

/* An entry of mr's memory at start: len-byte elements, repeat per cycle, dims (stride, count). */
static struct rodp_xmw_entry ent(struct ibv_mr *mr, const void *start, __u64 len, __u64 repeat,
				 unsigned int ndims, const __u64 (*dims)[2])
{
	return xmw_ent(mr->lkey, (uintptr_t)start, len, repeat, ndims, dims);
}

static size_t model(const struct layout *l, __u64 *out)
{
	return xmw_model(l, out, MAXW);
}

static int bind_layout(FIXTURE_DATA(objs) *self, struct ibv_mw *mw, const struct layout *l,
		       unsigned int access, uint64_t *total)
{
	return rodp_xmw_bind_layout(self->rc.qp[1], mw, BASE, access, l->kind, l->e, l->n, total);
}

/*
 * Through the window bound to l: a READ of [w, w + len) must bring the model's bytes, and a
 * WRITE of the same range must put new bytes where the model says and nowhere else. 0 if so.
 */
static int check_range(FIXTURE_DATA(objs) *self, struct ibv_mw *mw, const __u64 *map, size_t w,
		       size_t len, unsigned int seed)
{
	static unsigned char want[LEN];
	unsigned char *mem = (unsigned char *)self->mem, *buf = (unsigned char *)self->rc.buf[0];
	int st;

	fill(mem, LEN, seed);
	memset(buf, 0, len);
	st = rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, len, BASE + w, mw->rkey);
	if (st != IBV_WC_SUCCESS)
		return 100 + st;
	for (size_t i = 0; i < len; i++)
		if (buf[i] != *(unsigned char *)(uintptr_t)map[w + i])
			return 1;
	fill(buf, len, seed + 1);
	memcpy(want, mem, LEN);
	/* Bytes the window shows twice end with the later offset's value (window order). */
	for (size_t i = 0; i < len; i++)
		want[map[w + i] - (uintptr_t)mem] = buf[i];
	st = rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, len, BASE + w, mw->rkey);
	if (st != IBV_WC_SUCCESS)
		return 200 + st;
	return memcmp(want, mem, LEN) ? 2 : 0;
}

/* Binds l and checks the whole window and a range starting and ending inside elements. */
static void layout_case(FIXTURE_DATA(objs) *self, struct __test_metadata *_metadata,
			const struct layout *l, size_t want_total)
{
	static __u64 map[MAXW];
	struct ibv_mw *mw = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_1, 4);
	size_t total = model(l, map);
	uint64_t got = 0;

	ASSERT_NE(NULL, mw);
	ASSERT_EQ(want_total, total);
	ASSERT_EQ(0, bind_layout(self, mw, l, WIN_RIGHTS, &got));
	EXPECT_EQ(total, got);
	EXPECT_EQ(0, check_range(self, mw, map, 0, total, 1));
	if (total > 8)
		EXPECT_EQ(0, check_range(self, mw, map, 3, total - 6, 7));
	/* One byte past the window: a remote access error. */
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 2,
						 BASE + total - 1, mw->rkey));
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	EXPECT_EQ(0, ibv_dealloc_mw(mw));
}

/* The proposal's examples (xmw.rst, "Examples", with their filled-in numbers, made smaller). */
TEST_F(objs, the_proposals_examples_byte_for_byte)
{
	char *m = self->mem;
	struct ibv_mr *hi;
	struct layout l;

	ASSERT_EQ(0, rodp_xmw_grant_noncontig(self->mr));
	/* A second MR, the upper half: the two-entry example names two MRs. */
	hi = ibv_reg_mr(self->d.pd, m + LEN / 2, LEN / 2, IBV_ACCESS_LOCAL_WRITE);
	ASSERT_NE(NULL, hi);
	ASSERT_EQ(0, rodp_xmw_grant_noncontig(hi));
	/* 1. A matrix column: 64 cells of 8 bytes, 512 bytes apart, column 1. */
	l = (struct layout){ RODP_XMW_KIND_COMPOSITE, 1,
			     { ent(self->mr, m + 8, 8, 1, 1, (const __u64[][2]){ { 512, 64 } }) } };
	layout_case(self, _metadata, &l, 512);
	/* 2. Two entries interleaved: 512 bytes every 3072 (x10) with 8 every 48 (x10). */
	l = (struct layout){ RODP_XMW_KIND_INTERLEAVED, 2, {
		ent(self->mr, m, 512, 1, 1, (const __u64[][2]){ { 3072, 10 } }),
		ent(hi, m + LEN / 2, 8, 1, 1, (const __u64[][2]){ { 48, 10 } }) } };
	layout_case(self, _metadata, &l, 5200);
	/* 3. A block: 3 rows of 32 bytes, 256 apart, in 2 planes 8192 apart; and as cells. */
	l = (struct layout){ RODP_XMW_KIND_COMPOSITE, 1, {
		ent(self->mr, m + 8736, 32, 1, 2, (const __u64[][2]){ { 256, 3 }, { 8192, 2 } }) } };
	layout_case(self, _metadata, &l, 192);
	l = (struct layout){ RODP_XMW_KIND_COMPOSITE, 1, {
		ent(self->mr, m + 8736, 8, 1, 3,
		    (const __u64[][2]){ { 8, 4 }, { 256, 3 }, { 8192, 2 } }) } };
	layout_case(self, _metadata, &l, 192);
	/* 4. Non-uniform repetitions: X/Y/Z 3, R/G/B 3, S/T 2 per cycle, six vertices; then
	 * texture for four vertices only (entries running out at different cycles). */
	l = (struct layout){ RODP_XMW_KIND_INTERLEAVED, 3, {
		ent(self->mr, m + 0x1000, 1, 3, 1, (const __u64[][2]){ { 1, 18 } }),
		ent(self->mr, m + 0x2000, 1, 3, 1, (const __u64[][2]){ { 1, 18 } }),
		ent(self->mr, m + 0x3000, 1, 2, 1, (const __u64[][2]){ { 1, 12 } }) } };
	layout_case(self, _metadata, &l, 48);
	l.e[2].dims[0].count = 8;
	layout_case(self, _metadata, &l, 44);
	EXPECT_EQ(0, ibv_dereg_mr(hi));
}

/* A small xorshift generator: the same random layouts in every run. */
static __u64 rnd(__u64 *x, __u64 below)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x % below;
}

/* A random layout of n entries (1 to 3) of mr's first 4 KiB; with x (bound, xtotal bytes at
 * BASE), each entry names x instead in one case out of two. */
static struct layout random_layout(__u64 *r, struct ibv_mr *mr, const struct ibv_mw *x,
				   size_t xtotal)
{
	struct layout l = {
		.kind = rnd(r, 2) ? RODP_XMW_KIND_INTERLEAVED : RODP_XMW_KIND_COMPOSITE,
		.n = 1 + rnd(r, 3),
	};

	for (unsigned int i = 0; i < l.n; i++) {
		__u64 dims[RODP_XMW_MAX_DIMS][2], foot;
		unsigned int nd = rnd(r, 4);

		for (unsigned int d = 0; d < nd; d++) {
			dims[d][0] = rnd(r, 64);
			dims[d][1] = 1 + rnd(r, 4);
		}
		l.e[i] = ent(mr, (char *)mr->addr + rnd(r, 4096), 1 + rnd(r, 16),
			     l.kind == RODP_XMW_KIND_COMPOSITE ? 1 : 1 + rnd(r, 3), nd,
			     (const __u64(*)[2])dims);
		foot = l.e[i].len;
		for (unsigned int d = 0; d < nd; d++)
			foot += dims[d][0] * (dims[d][1] - 1);
		if (x && rnd(r, 2) == 0) {
			/* One element of the window where the shape would not fit in it. */
			if (foot > xtotal) {
				l.e[i].ndims = 0;
				l.e[i].len = foot = 1 + rnd(r, xtotal < 16 ? xtotal : 16);
			}
			l.e[i].key = x->rkey;
			l.e[i].start = BASE + rnd(r, xtotal - foot + 1);
		}
	}
	return l;
}

/*
 * Random layouts, byte for byte against the model, read and written from a random offset; in
 * every other round some entries name a random window bound first (nesting), and the whole
 * window is read and written too: the outer
 * model's addresses in that window ([BASE, BASE + its total), memory addresses being far
 * from BASE) are then mapped through the inner window's model.
 */
TEST_F_TIMEOUT(objs, random_layouts_match_the_model, 300)
{
	static __u64 map[MAXW], xmap[MAXW];
	__u64 x = 0x2545f4914f6cdd1dULL;
	int nested = 0;

	ASSERT_EQ(0, rodp_xmw_grant_noncontig(self->mr));
	for (int round = 0; round < 24; round++) {
		struct ibv_mw *mw = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_1, 4);
		struct ibv_mw *in = NULL;
		size_t total, xtotal = 0, w, len;
		struct layout l;
		uint64_t got;

		ASSERT_NE(NULL, mw);
		if (round % 2) {
			in = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_1, 4);
			ASSERT_NE(NULL, in);
			l = random_layout(&x, self->mr, NULL, 0);
			xtotal = model(&l, xmap);
			ASSERT_EQ(0, bind_layout(self, in, &l, WIN_RIGHTS, &got));
			ASSERT_EQ(xtotal, got);
		}
		l = random_layout(&x, self->mr, in, xtotal);
		total = model(&l, map);
		for (size_t i = 0, seen = 0; i < total; i++)
			if (map[i] >= BASE && map[i] < BASE + xtotal) {
				map[i] = xmap[map[i] - BASE];
				nested += !seen++;
			}
		ASSERT_EQ(0, bind_layout(self, mw, &l, WIN_RIGHTS, &got));
		ASSERT_EQ(total, got);
		w = rnd(&x, total);
		len = 1 + rnd(&x, total - w);
		EXPECT_EQ(0, check_range(self, mw, map, w, len, round)) TH_LOG("round %d", round);
		if (in)
			EXPECT_EQ(0, check_range(self, mw, map, 0, total, round))
				TH_LOG("round %d, whole", round);
		EXPECT_EQ(0, ibv_dealloc_mw(mw));
		if (in)
			EXPECT_EQ(0, ibv_dealloc_mw(in));
	}
	/* Most odd rounds nested (9 of 12 with this seed). */
	EXPECT_LE(6, nested);
}

/* QP 0's fetch-and-add of 2 at raddr through rkey, the old value into its buffer: the status. */
static int fetch_add2(FIXTURE_DATA(objs) *self, __u64 raddr, __u32 rkey)
{
	struct ibv_wc wc;

	if (post_atomic(self->rc.qp[0], IBV_WR_ATOMIC_FETCH_AND_ADD, self->rc.buf[0],
			self->rc.mr[0]->lkey, raddr, rkey, 2, 0) ||
	    poll1(self->rc.cq[0], &wc, 30000) != 1)
		return -1;
	return wc.status;
}

/* Atomics: the 8 bytes in one element at an aligned memory address, else an invalid request. */
TEST_F(objs, an_atomic_goes_to_one_element)
{
	__u64 *word = (__u64 *)((char *)self->mem + 512 + 8), *res = (__u64 *)self->rc.buf[0];
	struct ibv_mw *mw = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_1, 4);
	struct layout col = { RODP_XMW_KIND_COMPOSITE, 1,
			      { ent(self->mr, (char *)self->mem + 8, 8, 1, 1,
				    (const __u64[][2]){ { 512, 64 } }) } };

	ASSERT_NE(NULL, mw);
	ASSERT_EQ(0, rodp_xmw_grant_noncontig(self->mr));
	ASSERT_EQ(0, bind_layout(self, mw, &col, WIN_RIGHTS, NULL));
	*word = 40;
	/* Window offset 8: element 1, memory offset 512 + 8. */
	EXPECT_EQ(IBV_WC_SUCCESS, fetch_add2(self, BASE + 8, mw->rkey));
	EXPECT_EQ(40, *res);
	EXPECT_EQ(42, *word);
	/* Elements of 4 bytes: an aligned window word spans two of them. */
	col.e[0].len = 4;
	ASSERT_EQ(0, bind_layout(self, mw, &col, WIN_RIGHTS, NULL));
	EXPECT_EQ(IBV_WC_REM_INV_REQ_ERR, fetch_add2(self, BASE + 8, mw->rkey));
	EXPECT_EQ(42, *word);
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	/* One element, but at a misaligned memory address. */
	col.e[0].len = 8;
	col.e[0].start = (uintptr_t)self->mem + 4;
	ASSERT_EQ(0, bind_layout(self, mw, &col, WIN_RIGHTS, NULL));
	EXPECT_EQ(IBV_WC_REM_INV_REQ_ERR, fetch_add2(self, BASE + 8, mw->rkey));
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	EXPECT_EQ(0, ibv_dealloc_mw(mw));
}

/*
 * One access touches at most 4,096 elements: one more is a remote access error, before a byte
 * moves (a READ, and a WRITE, whole, as on the wire at its first packet).
 */
TEST_F(objs, an_access_touches_at_most_4096_elements)
{
	struct ibv_mw *mw = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_1, 1);
	/* Every other byte of the first 16 KiB: 8,192 one-byte elements. */
	struct layout odd = { RODP_XMW_KIND_COMPOSITE, 1,
			      { ent(self->mr, self->mem, 1, 1, 1, (const __u64[][2]){ { 2, 8192 } }) } };
	unsigned char *buf = (unsigned char *)self->rc.buf[0], *mem = (unsigned char *)self->mem;

	ASSERT_NE(NULL, mw);
	ASSERT_EQ(0, rodp_xmw_grant_noncontig(self->mr));
	ASSERT_EQ(0, bind_layout(self, mw, &odd, WIN_RIGHTS, NULL));
	fill(mem, LEN, 3);
	ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 4096, BASE + 4096,
					  mw->rkey));
	EXPECT_EQ(mem[2 * 4096], buf[0]);
	EXPECT_EQ(mem[2 * 8191], buf[4095]);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 4097, BASE,
						 mw->rkey));
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	memset(buf, 0xee, 4097);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 4097, BASE,
						 mw->rkey));
	EXPECT_NE(0xee, mem[0]);
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	EXPECT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 4096, BASE, mw->rkey));
	EXPECT_EQ(0xee, mem[0]);
	EXPECT_EQ(0xee, mem[2 * 4095]);
	EXPECT_NE(0xee, mem[2 * 4096]);
	EXPECT_EQ(0, ibv_dealloc_mw(mw));
}

/* Mismatches between n bytes at b and the window bytes map[0..n) stands for. */
static size_t mismatches(const unsigned char *b, const __u64 *map, size_t n)
{
	size_t bad = 0;

	for (size_t i = 0; i < n; i++)
		bad += b[i] != *(unsigned char *)(uintptr_t)map[i];
	return bad;
}

/*
 * Local SGEs through a layout's key: a SEND gathers the window's bytes in window order, a
 * receive scatters into them; without local write among the window's rights, scattering is a
 * local protection error.
 */
TEST_F(objs, a_layouts_key_works_in_local_sges)
{
	static __u64 map[MAXW];
	struct ibv_mw *mw = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_1, 4);
	struct layout col = { RODP_XMW_KIND_COMPOSITE, 1,
			      { ent(self->mr, (char *)self->mem + 8, 8, 1, 1,
				    (const __u64[][2]){ { 512, 64 } }) } };
	unsigned char *b0 = (unsigned char *)self->rc.buf[0];
	size_t total = model(&col, map);
	struct ibv_qp *q0 = self->rc.qp[0], *q1 = self->rc.qp[1];
	struct ibv_cq *c0 = self->rc.cq[0], *c1 = self->rc.cq[1];
	__u32 l0 = self->rc.mr[0]->lkey;
	struct ibv_wc wc;

	ASSERT_NE(NULL, mw);
	ASSERT_EQ(0, rodp_xmw_grant_noncontig(self->mr));
	ASSERT_EQ(0, bind_layout(self, mw, &col, WIN_RIGHTS | IBV_ACCESS_LOCAL_WRITE, NULL));
	fill(self->mem, LEN, 5);
	/* Gather: QP 1 sends the column into QP 0's buffer. */
	memset(b0, 0, total);
	ASSERT_EQ(0, post_recv(q0, b0, total, l0, 1));
	ASSERT_EQ(0, post_send(q1, IBV_WR_SEND, (void *)(uintptr_t)BASE, total, mw->rkey, 0, 0,
			       0, 2));
	ASSERT_EQ(1, poll1(c1, &wc, 30000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	ASSERT_EQ(1, poll1(c0, &wc, 30000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(0, mismatches(b0, map, total));
	/* Scatter: QP 1 receives into the column. */
	fill(b0, total, 6);
	ASSERT_EQ(0, post_recv(q1, (void *)(uintptr_t)BASE, total, mw->rkey, 3));
	ASSERT_EQ(0, post_send(q0, IBV_WR_SEND, b0, total, l0, 0, 0, 0, 4));
	ASSERT_EQ(1, poll1(c0, &wc, 30000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	ASSERT_EQ(1, poll1(c1, &wc, 30000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(0, mismatches(b0, map, total));
	/* Bound again without local write: the receive fails, the memory unchanged. */
	ASSERT_EQ(0, bind_layout(self, mw, &col, WIN_RIGHTS, NULL));
	fill(b0, total, 7);
	ASSERT_EQ(0, post_recv(q1, (void *)(uintptr_t)BASE, total, mw->rkey, 5));
	ASSERT_EQ(0, post_send(q0, IBV_WR_SEND, b0, total, l0, 0, 0, 0, 6));
	ASSERT_EQ(1, poll1(c1, &wc, 30000));
	EXPECT_EQ(IBV_WC_LOC_PROT_ERR, wc.status);
	EXPECT_NE(0, mismatches(b0, map, total));
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	EXPECT_EQ(0, ibv_dealloc_mw(mw));
}

/* Pages of [p, p + len) in memory (mincore). */
static int resident(void *p, size_t len)
{
	unsigned char v[LEN / 4096];
	int n = 0;

	if (len > sizeof(v) * 4096 || mincore(p, len, v))
		return -1;
	for (size_t i = 0; i < len / 4096; i++)
		n += v[i] & 1;
	return n;
}

/*
 * A layout over explicit and implicit ODP memory carries its data, and only the pages its
 * elements lie in fault: 8 bytes every 8 KiB touch every other page of the MR, the pages
 * between stay unmapped (num_page_fault_pages grows by the touched pages alone), and a READ
 * back faults nothing more.
 */
TEST_F(objs, a_layout_over_odp_memory_carries_its_data)
{
	static __u64 map[MAXW];

	for (int implicit = 0; implicit < 2; implicit++) {
		char *odp = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
				 0);
		int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND;
		struct ibv_mr *mr = implicit ? ibv_reg_mr(self->d.pd, NULL, SIZE_MAX, acc) :
				    ibv_reg_mr(self->d.pd, odp, LEN, acc);
		struct ibv_mw *mw = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_1, 1);
		struct layout l = { RODP_XMW_KIND_COMPOSITE, 1,
				    { ent(mr, odp + 24, 8, 1, 1,
					  (const __u64[][2]){ { 8192, LEN / 8192 } }) } };
		size_t total = model(&l, map);
		long pages;

		ASSERT_NE(MAP_FAILED, odp);
		ASSERT_NE(NULL, mr);
		ASSERT_NE(NULL, mw);
		ASSERT_EQ(0, rodp_xmw_grant_noncontig(mr));
		ASSERT_EQ(0, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
		fill(self->rc.buf[0], total, 9 + implicit);
		pages = hw_counter("rodp0", "num_page_fault_pages");
		EXPECT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, total, BASE,
						  mw->rkey));
		EXPECT_EQ(0, mismatches((unsigned char *)self->rc.buf[0], map, total));
		EXPECT_EQ(LEN / 8192, hw_counter("rodp0", "num_page_fault_pages") - pages)
			TH_LOG("implicit %d", implicit);
		/* The pages between the elements were never mapped: still none in memory. */
		EXPECT_EQ(LEN / 8192, resident(odp, LEN)) TH_LOG("implicit %d", implicit);
		memset(self->rc.buf[0], 0, total);
		pages = hw_counter("rodp0", "num_page_fault_pages");
		EXPECT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, total, BASE,
						  mw->rkey));
		EXPECT_EQ(0, mismatches((unsigned char *)self->rc.buf[0], map, total));
		EXPECT_EQ(pages, hw_counter("rodp0", "num_page_fault_pages"));
		EXPECT_EQ(0, ibv_dealloc_mw(mw));
		EXPECT_EQ(0, ibv_dereg_mr(mr));
		munmap(odp, LEN);
	}
}

/*
 * An unprivileged user binds a layout of its own memory through the send queue of its own QP
 * (type 2B) and names the window's key in its own local SGEs: nothing needs privilege, a peer
 * WRITE lands in window order, a SEND gathers through the key, and its LOCAL_INV ends the
 * binding (the MR deregisters). A layout naming root's MR, or root's bound window (nesting),
 * by its key is refused before anything is posted.
 */
TEST_F(objs, an_unprivileged_user_binds_through_the_send_queue_and_sends_through_the_key)
{
	struct ibv_mw *x = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_1, 1);
	struct layout col = { RODP_XMW_KIND_COMPOSITE, 1,
			      { ent(self->mr, self->mem + 8, 8, 1, 1,
				    (const __u64[][2]){ { 512, 64 } }) } };
	__u32 xkey;
	pid_t pid;
	int st;

	/* Root's window X, 512 bytes of root's memory, bound while the child runs. */
	ASSERT_NE(NULL, x);
	ASSERT_EQ(0, rodp_xmw_grant_noncontig(self->mr));
	ASSERT_EQ(0, bind_layout(self, x, &col, WIN_RIGHTS, NULL));
	xkey = x->rkey;
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		struct ibv_send_wr inv = { .wr_id = 4, .opcode = IBV_WR_LOCAL_INV,
					   .send_flags = IBV_SEND_SIGNALED }, *bad;
		static __u64 map[MAXW];
		struct rodp_xmw_bind_wr bw;
		enum ibv_wc_opcode op;
		struct rc_pair rc;
		struct ibv_mw *mw;
		struct ibv_mr *mr;
		struct layout l, foreign;
		struct ibv_wc wc;
		uint64_t total = 0;
		struct dev d;
		uint32_t key;
		size_t n;
		char *mem;

		if (become_nobody())
			_exit(1);
		if (dev_open(&d, "rodp0") || rc_pair_open(&rc, &d, NULL, LEN, &rc_default))
			_exit(2);
		mem = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		mr = mem == MAP_FAILED ? NULL :
		     ibv_reg_mr(d.pd, mem, LEN, ALL_ACCESS | IBV_ACCESS_MW_BIND);
		mw = rodp_xmw_alloc_mw_ex(d.pd, IBV_MW_TYPE_2, 2);
		if (!mr || !mw || rodp_xmw_grant_noncontig(mr))
			_exit(3);
		/* 12 bytes every 256 interleaved with 4 bytes every 64, two of those per cycle. */
		l = (struct layout){ RODP_XMW_KIND_INTERLEAVED, 2, {
			ent(mr, mem + 16, 12, 1, 1, (const __u64[][2]){ { 256, 20 } }),
			ent(mr, mem + LEN / 2, 4, 2, 1, (const __u64[][2]){ { 64, 40 } }) } };
		n = model(&l, map);
		key = next_key(mw->rkey);
		bw = (struct rodp_xmw_bind_wr){ .wr_id = 1, .send_flags = IBV_SEND_SIGNALED,
						.rkey = key, .addr = BASE,
						.access = WIN_RIGHTS | IBV_ACCESS_LOCAL_WRITE,
						.kind = l.kind, .entries = l.e, .num_entries = l.n };
		/* The parent's (root's) MR named by its key: of another PD, refused at the stage,
		 * nothing posted. */
		foreign = l;
		foreign.e[0].key = self->mr->lkey;
		bw.entries = foreign.e;
		if (rodp_xmw_post_bind_layout(rc.qp[1], mw, &bw, &total) != EINVAL)
			_exit(12);
		/* Root's window X as the second entry, its footprint (316 bytes) inside X and its
		 * rights covered: only its PD is wrong. */
		foreign = l;
		foreign.e[1] = xmw_ent(xkey, BASE, 4, 2, 1, (const __u64[][2]){ { 8, 40 } });
		bw.entries = foreign.e;
		if (rodp_xmw_post_bind_layout(rc.qp[1], mw, &bw, &total) != EINVAL)
			_exit(13);
		bw.entries = l.e;
		if (rodp_xmw_post_bind_layout(rc.qp[1], mw, &bw, &total) || total != n)
			_exit(4);
		if (complete1(rc.cq[1], &op) != IBV_WC_SUCCESS || op != IBV_WC_BIND_MW)
			_exit(5);
		mw->rkey = key;
		/* QP 0 writes the window through QP 1; the bytes land where the model says. */
		fill(rc.buf[0], n, 21);
		if (rc_xfer(&rc, IBV_WR_RDMA_WRITE, 0, n, BASE, key) != IBV_WC_SUCCESS)
			_exit(6);
		if (mismatches((unsigned char *)rc.buf[0], map, n))
			_exit(7);
		/* QP 1 sends the window's bytes, gathered through its key, into QP 0's buffer. */
		memset(rc.buf[0], 0, n);
		if (post_recv(rc.qp[0], rc.buf[0], n, rc.mr[0]->lkey, 2) ||
		    post_send(rc.qp[1], IBV_WR_SEND, (void *)(uintptr_t)BASE, n, key, 0, 0, 0, 3) ||
		    poll1(rc.cq[1], &wc, 30000) != 1 || wc.status != IBV_WC_SUCCESS ||
		    poll1(rc.cq[0], &wc, 30000) != 1 || wc.status != IBV_WC_SUCCESS)
			_exit(8);
		if (mismatches((unsigned char *)rc.buf[0], map, n))
			_exit(9);
		/* Its own LOCAL_INV ends the binding: the MR is let go. */
		inv.invalidate_rkey = key;
		if (ibv_post_send(rc.qp[1], &inv, &bad) || complete1(rc.cq[1], NULL) != IBV_WC_SUCCESS)
			_exit(10);
		_exit(!ibv_dereg_mr(mr) && !ibv_dealloc_mw(mw) ? 0 : 11);
	}
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_TRUE(WIFEXITED(st));
	EXPECT_EQ(0, WEXITSTATUS(st));
	EXPECT_EQ(0, ibv_dealloc_mw(x));
}

/* Each validity rule of xmw.rst's table that a bind by call can break, with its errno. */
/* Posts a bind of l to the type 2B window mw on QP q of the pair under key; the post's errno. */
static int post_bind2(FIXTURE_DATA(objs) *self, int q, struct ibv_mw *mw, const struct layout *l,
		      uint32_t key, uint64_t *total)
{
	struct rodp_xmw_bind_wr bw = {
		.wr_id = 20 + q, .send_flags = IBV_SEND_SIGNALED, .rkey = key, .addr = BASE,
		.access = WIN_RIGHTS, .kind = l->kind, .entries = l->e, .num_entries = l->n,
	};

	return rodp_xmw_post_bind_layout(self->rc.qp[q], mw, &bw, total);
}

/*
 * A type 2B window binds a layout through the send queue: the bind completes in order with
 * the work requests around it (a bind posted right behind the local invalidate that frees the
 * window succeeds), and the window then carries data for the QP it was bound through alone.
 * LOCAL_INV and a peer's SEND_WITH_INV end the binding (the MRs are let go: deregistration
 * succeeds), and so does deallocation. A bind of a window that is not free, or that keeps its
 * key byte, completes with IBV_WC_MW_BIND_ERR; a layout the rules refuse is refused by the
 * call, with its errno, before anything is posted; each call refuses the other type.
 */
TEST_F(objs, a_type_2b_window_binds_a_layout_through_the_send_queue)
{
	static __u64 map[MAXW];
	char *m = self->mem;
	struct ibv_mr *hi = ibv_reg_mr(self->d.pd, m + LEN / 2, LEN / 2,
				       ALL_ACCESS | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_2, 4);
	struct ibv_mw *mw1 = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_1, 4);
	struct ibv_sge sge = { (uintptr_t)self->rc.buf[0], 16, self->rc.mr[0]->lkey };
	struct ibv_send_wr inv = { .wr_id = 9, .opcode = IBV_WR_LOCAL_INV }, *bad;
	struct ibv_send_wr sinv = { .wr_id = 3, .sg_list = &sge, .num_sge = 1,
				    .opcode = IBV_WR_SEND_WITH_INV,
				    .send_flags = IBV_SEND_SIGNALED };
	struct rodp_xmw_bind_wr bw;
	enum ibv_wc_opcode op;
	struct ibv_wc wc;
	struct layout l;
	uint64_t total = 0;
	uint32_t key;
	size_t n;

	ASSERT_NE(NULL, hi);
	ASSERT_NE(NULL, mw);
	ASSERT_NE(NULL, mw1);
	ASSERT_EQ(0, rodp_xmw_grant_noncontig(self->mr));
	l = (struct layout){ RODP_XMW_KIND_INTERLEAVED, 2, {
		ent(self->mr, m + 8, 8, 1, 1, (const __u64[][2]){ { 512, 40 } }),
		ent(hi, m + LEN / 2 + 4, 4, 2, 1, (const __u64[][2]){ { 48, 30 } }) } };
	n = model(&l, map);
	/* Refused by the call, nothing posted: an MR without the grant, the wrong types. */
	EXPECT_EQ(EACCES, post_bind2(self, 1, mw, &l, next_key(mw->rkey), NULL));
	ASSERT_EQ(0, rodp_xmw_grant_noncontig(hi));
	EXPECT_EQ(EINVAL, post_bind2(self, 1, mw, &l, next_key(mw->rkey) ^ 0x100, NULL));
	EXPECT_EQ(EINVAL, post_bind2(self, 1, mw1, &l, next_key(mw1->rkey), NULL));
	EXPECT_EQ(EINVAL, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	bw = (struct rodp_xmw_bind_wr){ .comp_mask = 1, .rkey = next_key(mw->rkey), .addr = BASE,
					.access = WIN_RIGHTS, .kind = l.kind, .entries = l.e,
					.num_entries = l.n };
	EXPECT_EQ(EINVAL, rodp_xmw_post_bind_layout(self->rc.qp[1], mw, &bw, NULL));
	EXPECT_EQ(0, poll1(self->rc.cq[1], &wc, 100));

	/* Bound through QP 1, it serves QP 1: QP 0's accesses arrive there. */
	key = next_key(mw->rkey);
	ASSERT_EQ(0, post_bind2(self, 1, mw, &l, key, &total));
	EXPECT_EQ(n, total);
	ASSERT_EQ(IBV_WC_SUCCESS, complete1(self->rc.cq[1], &op));
	EXPECT_EQ(IBV_WC_BIND_MW, op);
	mw->rkey = key;
	EXPECT_EQ(0, check_range(self, mw, map, 0, n, 3));
	EXPECT_EQ(0, check_range(self, mw, map, 5, n - 9, 4));
	EXPECT_EQ(EBUSY, ibv_dereg_mr(hi));
	/* Bound, it takes no other bind, and keeps its binding. */
	ASSERT_EQ(0, post_bind2(self, 1, mw, &l, next_key(key), NULL));
	EXPECT_EQ(IBV_WC_MW_BIND_ERR, complete1(self->rc.cq[1], &op));
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	EXPECT_EQ(0, check_range(self, mw, map, 0, n, 5));

	/* A local invalidate and a bind behind it, posted together: done in order. */
	inv.invalidate_rkey = key;
	ASSERT_EQ(0, ibv_post_send(self->rc.qp[1], &inv, &bad));
	key = next_key(key);
	ASSERT_EQ(0, post_bind2(self, 1, mw, &l, key, NULL));
	EXPECT_EQ(IBV_WC_SUCCESS, complete1(self->rc.cq[1], &op));
	EXPECT_EQ(IBV_WC_BIND_MW, op);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 8, BASE,
						 mw->rkey)) TH_LOG("the invalidated key");
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	mw->rkey = key;
	EXPECT_EQ(0, check_range(self, mw, map, 0, n, 6));

	/* The peer's SEND_WITH_INV on QP 1 ends it; the MRs are free again. */
	sinv.invalidate_rkey = key;
	ASSERT_EQ(0, post_recv(self->rc.qp[1], self->rc.buf[1], 64, self->rc.mr[1]->lkey, 4));
	ASSERT_EQ(0, ibv_post_send(self->rc.qp[0], &sinv, &bad));
	ASSERT_EQ(1, poll1(self->rc.cq[0], &wc, 20000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	ASSERT_EQ(1, poll1(self->rc.cq[1], &wc, 20000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_INV);
	EXPECT_EQ(key, wc.invalidated_rkey);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 8, BASE,
						 mw->rkey)) TH_LOG("the key invalidated by the peer");
	ASSERT_EQ(0, rc_reset_pair(&self->rc));

	/* Bound through QP 0, it serves QP 0 alone: QP 0's own accesses arrive at QP 1. */
	key = next_key(key);
	ASSERT_EQ(0, post_bind2(self, 0, mw, &l, key, NULL));
	EXPECT_EQ(IBV_WC_SUCCESS, complete1(self->rc.cq[0], &op));
	mw->rkey = key;
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 8, BASE,
						 mw->rkey)) TH_LOG("another QP's window");
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	/* A bind that keeps the key byte is no bind. */
	inv.invalidate_rkey = key;
	inv.send_flags = IBV_SEND_SIGNALED;
	ASSERT_EQ(0, ibv_post_send(self->rc.qp[0], &inv, &bad));
	EXPECT_EQ(IBV_WC_SUCCESS, complete1(self->rc.cq[0], &op));
	ASSERT_EQ(0, post_bind2(self, 0, mw, &l, key, NULL));
	EXPECT_EQ(IBV_WC_MW_BIND_ERR, complete1(self->rc.cq[0], &op));
	ASSERT_EQ(0, rc_reset_pair(&self->rc));

	/* Deallocation ends a binding too. */
	key = next_key(key);
	ASSERT_EQ(0, post_bind2(self, 1, mw, &l, key, NULL));
	EXPECT_EQ(IBV_WC_SUCCESS, complete1(self->rc.cq[1], &op));
	EXPECT_EQ(EBUSY, ibv_dereg_mr(hi));
	EXPECT_EQ(0, ibv_dealloc_mw(mw));
	EXPECT_EQ(0, ibv_dereg_mr(hi));
	EXPECT_EQ(0, ibv_dealloc_mw(mw1));
}

/* XBIND raw, as the library calls it: on a type 2B window, the stage of l under key. */
static int xbind_raw(struct ibv_qp *qp, struct ibv_mw *mw, const struct layout *l, __u32 key)
{
	struct rodp_xmw_bind args = { .addr = BASE, .access = WIN_RIGHTS, .kind = l->kind,
				      .rkey = key };
	struct rodp_xmw_bind_resp resp;
	struct {
		struct ib_uverbs_ioctl_hdr hdr;
		struct ib_uverbs_attr attr[5];
	} req = {
		.hdr = { .length = sizeof(req), .object_id = UVERBS_OBJECT_MW,
			 .method_id = RODP_METHOD_MW_XBIND, .num_attrs = 5,
			 .driver_id = RDMA_DRIVER_RXE },
		.attr = {
			{ .attr_id = RODP_ATTR_MW_XBIND_HANDLE, .data = mw->handle },
			{ .attr_id = RODP_ATTR_MW_XBIND_QP, .data = qp->handle },
			{ .attr_id = RODP_ATTR_MW_XBIND_ARGS, .len = sizeof(args),
			  .data = (uintptr_t)&args },
			{ .attr_id = RODP_ATTR_MW_XBIND_ENTRIES, .len = l->n * sizeof(l->e[0]),
			  .data = (uintptr_t)l->e },
			{ .attr_id = RODP_ATTR_MW_XBIND_RESP, .len = sizeof(resp),
			  .data = (uintptr_t)&resp },
		},
	};

	return ioctl(mw->context->cmd_fd, RDMA_VERBS_IOCTL, &req) ? errno : 0;
}

/* A bind WR on QP 1 as the library posts it (the window itself as the MR) or, with mr, an
 * ordinary bind of the MR's first total bytes (rodp_mw.h's bind2); waits: its status. */
static int bind_wr(FIXTURE_DATA(objs) *self, struct ibv_mw *mw, struct ibv_mr *mr, __u32 key,
		   uint64_t total)
{
	struct ibv_mr me = { .context = self->d.ctx, .pd = self->d.pd, .lkey = mw->rkey };

	return bind2(self->rc.qp[1], self->rc.cq[1], mw, key, mr ? mr : &me,
		     mr ? (uintptr_t)mr->addr : BASE, total, WIN_RIGHTS);
}

/*
 * A staged layout is bound only by a bind request naming the window itself, with its key,
 * address, length and rights: one without a stage, one after a later stage replaced it, and
 * one after an MR of the layout was re-registered complete with IBV_WC_MW_BIND_ERR; an
 * ordinary bind of an MR never takes the stage.
 */
TEST_F(objs, a_staged_layout_is_bound_only_by_its_own_bind_request)
{
	static __u64 map[MAXW];
	struct ibv_mw *mw = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_2, 4);
	struct layout l = { RODP_XMW_KIND_COMPOSITE, 1,
			    { ent(self->mr, (char *)self->mem + 8, 8, 1, 1,
				  (const __u64[][2]){ { 512, 32 } }) } };
	size_t n = model(&l, map);
	__u32 key, lkey = 0;

	ASSERT_NE(NULL, mw);
	ASSERT_EQ(0, rodp_xmw_grant_noncontig(self->mr));
	/* No stage. */
	key = next_key(mw->rkey);
	EXPECT_EQ(IBV_WC_MW_BIND_ERR, bind_wr(self, mw, NULL, key, n));
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	/* A later stage replaced it. */
	ASSERT_EQ(0, xbind_raw(self->rc.qp[1], mw, &l, key));
	ASSERT_EQ(0, xbind_raw(self->rc.qp[1], mw, &l, next_key(key)));
	EXPECT_EQ(IBV_WC_MW_BIND_ERR, bind_wr(self, mw, NULL, key, n));
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	/* An ordinary bind with the stage's values binds the MR's range, and leaves the stage. */
	ASSERT_EQ(0, xbind_raw(self->rc.qp[1], mw, &l, key));
	self->mr->addr = (void *)BASE;
	EXPECT_EQ(IBV_WC_MW_BIND_ERR, bind_wr(self, mw, self->mr, key, n))
		TH_LOG("the MR does not hold BASE: an ordinary bind fails");
	self->mr->addr = self->mem;
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	EXPECT_EQ(IBV_WC_SUCCESS, bind_wr(self, mw, NULL, key, n)) TH_LOG("the stage stayed");
	mw->rkey = key;
	EXPECT_EQ(0, check_range(self, mw, map, 0, n, 9));
	/* Re-registered between the stage and the bind. */
	ASSERT_EQ(IBV_WC_SUCCESS, local_inv(self->rc.qp[1], self->rc.cq[1], key));
	key = next_key(key);
	ASSERT_EQ(0, xbind_raw(self->rc.qp[1], mw, &l, key));
	ASSERT_EQ(0, rereg_cmd(self->d.ctx, self->mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, 0, 0,
			       NULL, ALL_ACCESS | IBV_ACCESS_MW_BIND, &lkey, NULL));
	ASSERT_EQ(self->mr->lkey, lkey) TH_LOG("re-registration keeps the key");
	EXPECT_EQ(IBV_WC_MW_BIND_ERR, bind_wr(self, mw, NULL, key, n));
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	/* Staged again after the re-registration, it binds. */
	ASSERT_EQ(0, xbind_raw(self->rc.qp[1], mw, &l, key));
	EXPECT_EQ(IBV_WC_SUCCESS, bind_wr(self, mw, NULL, key, n));
	EXPECT_EQ(0, ibv_dealloc_mw(mw));
}

TEST_F(objs, every_rule_has_its_errno)
{
	char *m = self->mem;
	struct ibv_mw *mw = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_1, 2);
	struct ibv_mw *plain = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_1);
	struct ibv_mw *t2 = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_2, 2);
	struct ibv_mr *ro = ibv_reg_mr(self->d.pd, m, LEN, IBV_ACCESS_REMOTE_READ);
	struct ibv_pd *pd2 = ibv_alloc_pd(self->d.ctx);
	struct ibv_mr *other = pd2 ? ibv_reg_mr(pd2, m, LEN, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct layout ok = { RODP_XMW_KIND_COMPOSITE, 1,
			     { ent(self->mr, m, 8, 1, 1, (const __u64[][2]){ { 16, 4 } }) } };
	struct layout l;
	__u32 key;

	ASSERT_NE(NULL, mw);
	ASSERT_NE(NULL, plain);
	ASSERT_NE(NULL, t2);
	ASSERT_NE(NULL, ro);
	ASSERT_NE(NULL, other);
	/* Not granted yet. */
	EXPECT_EQ(EACCES, bind_layout(self, mw, &ok, WIN_RIGHTS, NULL));
	ASSERT_EQ(0, rodp_xmw_grant_noncontig(self->mr));
	ASSERT_EQ(0, rodp_xmw_grant_noncontig(ro));
	ASSERT_EQ(0, rodp_xmw_grant_noncontig(other));
	/* A window without a budget, a type 2B window. */
	EXPECT_EQ(EINVAL, bind_layout(self, plain, &ok, WIN_RIGHTS, NULL));
	EXPECT_EQ(EINVAL, bind_layout(self, t2, &ok, WIN_RIGHTS, NULL));
	/* Unknown kind, unknown right, zero-based. */
	l = ok;
	l.kind = 2;
	EXPECT_EQ(EINVAL, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	EXPECT_EQ(EINVAL, bind_layout(self, mw, &ok, WIN_RIGHTS | (1 << 30), NULL));
	EXPECT_EQ(EINVAL, bind_layout(self, mw, &ok, WIN_RIGHTS | IBV_ACCESS_ZERO_BASED, NULL));
	/* More entries than the budget. */
	l = ok;
	l.n = 3;
	l.e[1] = l.e[2] = ok.e[0];
	EXPECT_EQ(EINVAL, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	/* Zero length, count, repeat; a repeat in a composite; too many dimensions. */
	l = ok;
	l.e[0].len = 0;
	EXPECT_EQ(EINVAL, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	l = ok;
	l.e[0].dims[0].count = 0;
	EXPECT_EQ(EINVAL, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	l = ok;
	l.e[0].repeat_count = 0;
	l.kind = RODP_XMW_KIND_INTERLEAVED;
	EXPECT_EQ(EINVAL, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	l = ok;
	l.e[0].repeat_count = 2;
	EXPECT_EQ(EINVAL, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	l = ok;
	l.e[0].ndims = RODP_XMW_MAX_DIMS + 1;
	EXPECT_EQ(EINVAL, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	/* Arithmetic past 2^64: counts, a stride's reach. */
	l = ok;
	l.e[0].ndims = 2;
	l.e[0].dims[0].count = l.e[0].dims[1].count = 1ULL << 32;
	EXPECT_EQ(EOVERFLOW, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	l = ok;
	l.e[0].dims[0].stride = ~0ULL / 2;
	EXPECT_EQ(EOVERFLOW, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	/* A total over max_total: overlap presents the same 8 bytes 2^38 times. */
	l = ok;
	l.e[0].dims[0].stride = 0;
	l.e[0].dims[0].count = self->caps.max_total / 8 + 1;
	EXPECT_EQ(EINVAL, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	/* A key of nothing; an MR of another PD; a footprint past the MR's end or before it. */
	l = ok;
	l.e[0].key = self->mr->lkey ^ 0x80;
	EXPECT_EQ(EINVAL, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	l.e[0].key = other->lkey;
	EXPECT_EQ(EINVAL, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	l = ok;
	l.e[0].start = (uintptr_t)m + LEN - 8 - 3 * 16 + 1;
	EXPECT_EQ(EINVAL, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	l.e[0].start = (uintptr_t)m - 1;
	EXPECT_EQ(EINVAL, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	/* Remote write over an MR without local write: rights not covered; read alone is. */
	l = ok;
	l.e[0].key = ro->lkey;
	EXPECT_EQ(EACCES, bind_layout(self, mw, &l, IBV_ACCESS_REMOTE_WRITE, NULL));
	EXPECT_EQ(0, bind_layout(self, mw, &l, IBV_ACCESS_REMOTE_READ, NULL));
	/* The window being bound in its own layout; a window not bound (a_layout_names_a_window
	 * has the other nesting rules). */
	l = ok;
	l.e[0].key = mw->rkey;
	EXPECT_EQ(ELOOP, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	l.e[0].key = t2->rkey;
	EXPECT_EQ(EINVAL, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	/* Every rule kept: bound, under a new key (same index, new key byte). */
	key = mw->rkey;
	EXPECT_EQ(0, bind_layout(self, mw, &ok, WIN_RIGHTS, NULL));
	EXPECT_EQ(key & ~0xffu, mw->rkey & ~0xffu);
	EXPECT_NE(key, mw->rkey);
	EXPECT_EQ(0, ibv_dealloc_mw(mw));
	EXPECT_EQ(0, ibv_dealloc_mw(plain));
	EXPECT_EQ(0, ibv_dealloc_mw(t2));
	EXPECT_EQ(0, ibv_dereg_mr(ro));
	EXPECT_EQ(0, ibv_dereg_mr(other));
	EXPECT_EQ(0, ibv_dealloc_pd(pd2));
}

/*
 * Nesting (xmw.rst, example 5 and "Nesting"): 4096 bytes of an MR followed by the whole
 * matrix-column window X. Byte for byte by READ and WRITE, a SEND gathering through the key,
 * an atomic into one of X's cells; the rules of a window entry with their errnos; once X is
 * bound again, the bytes through it fail and the MR part still works.
 */
TEST_F(objs, a_layout_names_a_window)
{
	static __u64 xmap[MAXW], map[MAXW];
	char *m = self->mem, *h = m + LEN / 2;
	struct ibv_mw *x = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_1, 2);
	struct ibv_mw *w = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_1, 2);
	struct ibv_mw *v = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_1, 2);
	struct ibv_mw *t2 = ibv_alloc_mw(self->d.pd, IBV_MW_TYPE_2);
	struct layout col = { RODP_XMW_KIND_COMPOSITE, 1,
			      { ent(self->mr, m + 8, 8, 1, 1, (const __u64[][2]){ { 512, 64 } }) } };
	struct layout l = { RODP_XMW_KIND_COMPOSITE, 2,
			    { ent(self->mr, h, 4096, 1, 0, NULL),
			      xmw_ent(0, BASE, 512, 1, 0, NULL) } };
	struct layout bad;
	__u64 *cell = (__u64 *)(m + 520);
	unsigned char *b0 = (unsigned char *)self->rc.buf[0];
	uint64_t total = 0;
	struct ibv_wc wc;

	ASSERT_NE(NULL, x);
	ASSERT_NE(NULL, w);
	ASSERT_NE(NULL, v);
	ASSERT_NE(NULL, t2);
	ASSERT_EQ(0, rodp_xmw_grant_noncontig(self->mr));
	ASSERT_EQ(512, model(&col, xmap));
	ASSERT_EQ(0, bind_layout(self, x, &col, WIN_RIGHTS, NULL));
	l.e[1].key = x->rkey;
	ASSERT_EQ(0, bind_layout(self, w, &l, WIN_RIGHTS, &total));
	ASSERT_EQ(4608, total);
	for (size_t i = 0; i < 4096; i++)
		map[i] = (uintptr_t)h + i;
	memcpy(map + 4096, xmap, 512 * sizeof(*map));
	/* xmw.rst's table for example 5. */
	EXPECT_EQ((uintptr_t)h + 4095, map[4095]);
	EXPECT_EQ((uintptr_t)m + 8, map[4096]);
	EXPECT_EQ((uintptr_t)m + 520, map[4104]);
	EXPECT_EQ((uintptr_t)m + 32271, map[4607]);
	EXPECT_EQ(0, check_range(self, w, map, 0, total, 11));
	EXPECT_EQ(0, check_range(self, w, map, 4090, 30, 12));
	EXPECT_EQ(0, check_range(self, w, map, 4100, 500, 13));
	/* A SEND from QP 1 gathers through the outer key, across both parts. */
	fill(m, LEN, 14);
	memset(b0, 0, total);
	ASSERT_EQ(0, post_recv(self->rc.qp[0], b0, total, self->rc.mr[0]->lkey, 1));
	ASSERT_EQ(0, post_send(self->rc.qp[1], IBV_WR_SEND, (void *)(uintptr_t)BASE, total,
			       w->rkey, 0, 0, 0, 2));
	ASSERT_EQ(1, poll1(self->rc.cq[1], &wc, 30000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	ASSERT_EQ(1, poll1(self->rc.cq[0], &wc, 30000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(0, mismatches(b0, map, total));
	/* An atomic into X's cell 1 (outer offset 4104, memory m + 520). */
	*cell = 100;
	EXPECT_EQ(IBV_WC_SUCCESS, fetch_add2(self, BASE + 4104, w->rkey));
	EXPECT_EQ(100, *(__u64 *)self->rc.buf[0]);
	EXPECT_EQ(102, *cell);

	/* Depth 3: a layout naming W, which names X. */
	bad = (struct layout){ RODP_XMW_KIND_COMPOSITE, 1, { xmw_ent(w->rkey, BASE, 8, 1, 0, NULL) } };
	EXPECT_EQ(ELOOP, bind_layout(self, v, &bad, WIN_RIGHTS, NULL));
	/* X under a stale key; a footprint past X's end or before its base. */
	bad.e[0] = xmw_ent(x->rkey ^ 1, BASE, 8, 1, 0, NULL);
	EXPECT_EQ(EINVAL, bind_layout(self, v, &bad, WIN_RIGHTS, NULL));
	bad.e[0] = xmw_ent(x->rkey, BASE + 505, 8, 1, 0, NULL);
	EXPECT_EQ(EINVAL, bind_layout(self, v, &bad, WIN_RIGHTS, NULL));
	bad.e[0] = xmw_ent(x->rkey, BASE - 1, 8, 1, 0, NULL);
	EXPECT_EQ(EINVAL, bind_layout(self, v, &bad, WIN_RIGHTS, NULL));
	/* A type 2B window (bound, on QP 1) in a type 1 window's layout. */
	ASSERT_EQ(0, bind_wr(self, t2, self->mr, (t2->rkey & ~0xffu) | ((t2->rkey + 1) & 0xff),
			     4096));
	bad.e[0] = xmw_ent(t2->rkey, (uintptr_t)m, 8, 1, 0, NULL);
	EXPECT_EQ(EINVAL, bind_layout(self, v, &bad, WIN_RIGHTS, NULL));
	/* Rights: X bound again for remote read only; a writing layout over it is refused. */
	ASSERT_EQ(0, bind_layout(self, x, &col, IBV_ACCESS_REMOTE_READ, NULL));
	bad.e[0] = xmw_ent(x->rkey, BASE, 8, 1, 0, NULL);
	EXPECT_EQ(EACCES, bind_layout(self, v, &bad, WIN_RIGHTS, NULL));
	EXPECT_EQ(0, bind_layout(self, v, &bad, IBV_ACCESS_REMOTE_READ, NULL));

	/* W named X's earlier binding: its bytes through X fail, its MR part works. */
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 8, BASE + 4096,
						 w->rkey));
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 16, BASE + 4090,
						 w->rkey));
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	EXPECT_EQ(0, check_range(self, w, map, 0, 4096, 15));
	/* Deallocating X leaves W's MR part working too; V read X's current binding. */
	EXPECT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 8, BASE, v->rkey));
	EXPECT_EQ(0, ibv_dealloc_mw(x));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 8, BASE, v->rkey));
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	EXPECT_EQ(0, check_range(self, w, map, 0, 4096, 16));
	EXPECT_EQ(0, ibv_dealloc_mw(v));
	EXPECT_EQ(0, ibv_dealloc_mw(w));
	EXPECT_EQ(0, ibv_dealloc_mw(t2));
}

/*
 * The searches one access makes in inner layouts cost at most 2^21 entry visits (xmw.rst,
 * "Nesting"): a window of 256 one-byte entries interleaved costs 256 * 513 a search, so 15
 * separate bytes of it read through an outer window fit and 16 are a remote access error.
 */
TEST_F(objs, a_nested_access_has_a_bounded_cost)
{
	static struct rodp_xmw_entry big[256];
	unsigned char *m = (unsigned char *)self->mem, *b0 = (unsigned char *)self->rc.buf[0];
	struct ibv_mw *x = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_1, 256);
	struct ibv_mw *w = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_1, 1);
	struct layout l;
	uint64_t total = 0;

	ASSERT_NE(NULL, x);
	ASSERT_NE(NULL, w);
	ASSERT_EQ(0, rodp_xmw_grant_noncontig(self->mr));
	for (int i = 0; i < 256; i++)
		big[i] = ent(self->mr, m + i, 1, 1, 0, NULL);
	ASSERT_EQ(0, rodp_xmw_bind_layout(self->rc.qp[1], x, BASE, WIN_RIGHTS,
					  RODP_XMW_KIND_INTERLEAVED, big, 256, &total));
	ASSERT_EQ(256, total);
	/* Every other byte of X, 16 of them: 16 pieces to resolve. */
	l = (struct layout){ RODP_XMW_KIND_COMPOSITE, 1,
			     { xmw_ent(x->rkey, BASE, 1, 1, 1, (const __u64[][2]){ { 2, 16 } }) } };
	ASSERT_EQ(0, bind_layout(self, w, &l, WIN_RIGHTS, &total));
	ASSERT_EQ(16, total);
	fill(m, 256, 21);
	memset(b0, 0, 16);
	EXPECT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 15, BASE, w->rkey));
	for (int j = 0; j < 15; j++)
		EXPECT_EQ(m[2 * j], b0[j]);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 16, BASE,
						 w->rkey));
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	EXPECT_EQ(0, ibv_dealloc_mw(w));
	EXPECT_EQ(0, ibv_dealloc_mw(x));
}

/* An MR under a bound layout refuses deregistration until the window lets it go. */
TEST_F(objs, an_mr_under_a_layout_stays_until_the_window_lets_go)
{
	struct ibv_mr *mr = ibv_reg_mr(self->d.pd, self->mem, LEN, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mw *mw = rodp_xmw_alloc_mw_ex(self->d.pd, IBV_MW_TYPE_1, 2);
	struct layout l = { RODP_XMW_KIND_COMPOSITE, 2, {
		ent(mr, self->mem, 8, 1, 0, NULL), ent(mr, self->mem, 8, 1, 0, NULL) } };
	char line[1024];

	ASSERT_NE(NULL, mr);
	ASSERT_NE(NULL, mw);
	ASSERT_EQ(0, rodp_xmw_grant_noncontig(mr));
	ASSERT_EQ(0, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	ASSERT_EQ(0, res_line(mr, line, sizeof(line)));
	/* Counted once per entry. */
	EXPECT_NE(NULL, strstr(line, "drv_windows 2")) TH_LOG("%s", line);
	/* An ordinary zero-length bind unbinds it. */
	ASSERT_EQ(IBV_WC_SUCCESS, bind1(self->rc.qp[1], self->rc.cq[1], mw, self->mr, self->mem, 0,
					0));
	ASSERT_EQ(0, res_line(mr, line, sizeof(line)));
	EXPECT_EQ(NULL, strstr(line, "drv_windows"));
	/* Bound again: busy. (ib_core drops the MR from `rdma resource` on any dereg attempt,
	 * refused or not, so the counts are read before.) */
	ASSERT_EQ(0, bind_layout(self, mw, &l, WIN_RIGHTS, NULL));
	EXPECT_EQ(EBUSY, ibv_dereg_mr(mr));
	EXPECT_EQ(-EBUSY, rereg_cmd(self->d.ctx, mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, 0, 0, NULL,
				    IBV_ACCESS_LOCAL_WRITE, NULL, NULL));
	/* Deallocation lets go as well. */
	EXPECT_EQ(0, ibv_dealloc_mw(mw));
	EXPECT_EQ(0, ibv_dereg_mr(mr));
}

/* rxe's own device (the port is rxe's once rodp's last device is gone). Loading rdma_rxe
 * takes tens of seconds under TCG. */
FIXTURE(other) {};
FIXTURE_SETUP(other)
{
	ensure_netdevs();
	link_delete("rodp0");
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
