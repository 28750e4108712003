// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * librodp-xmw: calls rodp's driver-specific uverbs methods (include/rodp-xmw-abi.h) with
 * RDMA_VERBS_IOCTL on the command file of a context the unchanged rxe provider opened
 * (Documentation/xmw-interface.md). The library holds no state: every call is one ioctl, and
 * every check is the kernel's.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include "rodp-xmw-abi.h"
#include "rodp-xmw.h"

/* One method call with n attributes (each marked mandatory here); 0 or an errno value. */
static int call(struct ibv_context *ctx, uint16_t object, uint16_t method,
		struct ib_uverbs_attr *attrs, unsigned int n)
{
	struct {
		struct ib_uverbs_ioctl_hdr hdr;
		struct ib_uverbs_attr attrs[5];
	} req = {
		.hdr = {
			.object_id = object,
			.method_id = method,
			.num_attrs = n,
			/* rodp presents itself as rxe: the provider and the core's ID are rxe's. */
			.driver_id = RDMA_DRIVER_RXE,
		},
	};

	if (n > 5)
		return EINVAL;
	req.hdr.length = sizeof(req.hdr) + n * sizeof(req.attrs[0]);
	for (unsigned int i = 0; i < n; i++) {
		req.attrs[i] = attrs[i];
		req.attrs[i].flags |= UVERBS_ATTR_F_MANDATORY;
	}
	if (ioctl(ctx->cmd_fd, RDMA_VERBS_IOCTL, &req))
		return errno;
	return 0;
}

/* rdma_rxe has none of these methods (EPROTONOSUPPORT); a driver with another ID refuses the
 * call's driver ID (EINVAL, on a call that is otherwise well-formed). */
static int not_rodp(int err)
{
	return err == EPROTONOSUPPORT || err == EOPNOTSUPP;
}

int rodp_xmw_query_device(struct ibv_context *ctx, struct rodp_xmw_mw_caps *caps);

/* The answer to a call on ctx's device that failed with err: EINVAL is another driver's
 * answer too, which the query (taking no arguments) tells apart. */
static int answer(struct ibv_context *ctx, int err)
{
	struct rodp_xmw_mw_caps caps;

	if (not_rodp(err) || (err == EINVAL && rodp_xmw_query_device(ctx, &caps) == EOPNOTSUPP))
		return EOPNOTSUPP;
	return err;
}

int rodp_xmw_query_device(struct ibv_context *ctx, struct rodp_xmw_mw_caps *caps)
{
	struct rodp_xmw_caps k;
	int err;

	if (!ctx || !caps)
		return EINVAL;
	struct ib_uverbs_attr out = {
		.attr_id = RODP_ATTR_QUERY_XMW_CAPS,
		.len = sizeof(k),
		.data = (uintptr_t)&k,
	};

	memset(&k, 0, sizeof(k));
	err = call(ctx, UVERBS_OBJECT_DEVICE, RODP_METHOD_DEVICE_QUERY_XMW, &out, 1);
	/* A well-formed call without arguments: EINVAL is another driver's answer too. */
	if (not_rodp(err) || err == EINVAL)
		return EOPNOTSUPP;
	if (err)
		return err;
	memset(caps, 0, sizeof(*caps));
	caps->general_caps = k.flags;
	caps->max_mkey_list_sz = k.max_mkey_list_sz;
	caps->max_mkey_inline_list_sz = k.max_mkey_inline_list_sz;
	caps->max_mw_recursion_depth = k.max_mw_recursion_depth;
	caps->max_mw_stride_dimension = k.max_mw_stride_dimension;
	caps->max_total = k.max_total;
	return 0;
}

int rodp_xmw_grant_noncontig(struct ibv_mr *mr)
{
	struct ib_uverbs_attr h = { .attr_id = RODP_ATTR_MR_XMW_GRANT_HANDLE };
	int err;

	if (!mr || !mr->context)
		return EINVAL;
	h.data = mr->handle;
	err = call(mr->context, UVERBS_OBJECT_MR, RODP_METHOD_MR_XMW_GRANT, &h, 1);
	return err ? answer(mr->context, err) : 0;
}

struct ibv_mw *rodp_xmw_alloc_mw_ex(struct ibv_pd *pd, enum ibv_mw_type type,
				    uint32_t max_descriptors)
{
	struct ib_uverbs_attr a[2] = {
		{ .attr_id = RODP_ATTR_MW_XINIT_HANDLE },
		/* Inputs of up to 8 bytes travel in the attribute itself. */
		{ .attr_id = RODP_ATTR_MW_XINIT_MAX_DESCRIPTORS, .len = sizeof(max_descriptors) },
	};
	struct ibv_mw *mw;
	int err;

	if (!pd || !pd->context) {
		errno = EINVAL;
		return NULL;
	}
	mw = ibv_alloc_mw(pd, type);
	if (!mw)
		return NULL;
	a[0].data = mw->handle;
	memcpy(&a[1].data, &max_descriptors, sizeof(max_descriptors));
	err = call(pd->context, UVERBS_OBJECT_MW, RODP_METHOD_MW_XINIT, a, 2);
	if (err) {
		ibv_dealloc_mw(mw);
		errno = answer(pd->context, err);
		return NULL;
	}
	return mw;
}

/* The XBIND call: binds (type 1) or stages (type 2) the layout with the new key rkey. */
static int xbind(struct ibv_qp *qp, struct ibv_mw *mw, uint32_t rkey, uint64_t addr,
		 unsigned int access, enum rodp_xmw_kind kind,
		 const struct rodp_xmw_entry *entries, uint32_t num_entries, uint64_t *total)
{
	struct rodp_xmw_bind args = {
		.addr = addr,
		.access = access,
		.kind = kind,
		.rkey = rkey,
	};
	struct rodp_xmw_bind_resp resp = { 0 };
	size_t len = num_entries <= UINT16_MAX / sizeof(*entries) ?
		     num_entries * sizeof(*entries) : UINT16_MAX + 1;
	struct ib_uverbs_attr a[5] = {
		{ .attr_id = RODP_ATTR_MW_XBIND_HANDLE },
		{ .attr_id = RODP_ATTR_MW_XBIND_QP },
		{ .attr_id = RODP_ATTR_MW_XBIND_ARGS, .len = sizeof(args),
		  .data = (uintptr_t)&args },
		{ .attr_id = RODP_ATTR_MW_XBIND_ENTRIES, .len = (uint16_t)len,
		  .data = (uintptr_t)entries },
		{ .attr_id = RODP_ATTR_MW_XBIND_RESP, .len = sizeof(resp),
		  .data = (uintptr_t)&resp },
	};
	int err;

	/* One context's objects only: handles mean something only in their own file. */
	if (!qp || !mw || !entries || !num_entries || qp->context != mw->context ||
	    len > UINT16_MAX)
		return EINVAL;
	a[0].data = mw->handle;
	a[1].data = qp->handle;
	err = call(mw->context, UVERBS_OBJECT_MW, RODP_METHOD_MW_XBIND, a, 5);
	if (err)
		return answer(mw->context, err);
	*total = resp.total;
	return 0;
}

/* The next key of mw: its index, the next key byte (ibv_inc_rkey). */
static uint32_t next_rkey(const struct ibv_mw *mw)
{
	return (mw->rkey & ~0xffu) | ((mw->rkey + 1) & 0xff);
}

int rodp_xmw_bind_layout(struct ibv_qp *qp, struct ibv_mw *mw, uint64_t addr,
			 unsigned int access, enum rodp_xmw_kind kind,
			 const struct rodp_xmw_entry *entries, uint32_t num_entries,
			 uint64_t *total)
{
	uint64_t n = 0;
	uint32_t rkey;
	int err;

	if (!mw || mw->type != IBV_MW_TYPE_1)
		return EINVAL;
	rkey = next_rkey(mw);
	err = xbind(qp, mw, rkey, addr, access, kind, entries, num_entries, &n);
	if (err)
		return err;
	mw->rkey = rkey;
	if (total)
		*total = n;
	return 0;
}

int rodp_xmw_post_bind_layout(struct ibv_qp *qp, struct ibv_mw *mw,
			      const struct rodp_xmw_bind_wr *bw, uint64_t *total)
{
	/* The rxe provider reads only the key of the bind's MR: a layout bind names the window
	 * itself there (the kernel binds the staged layout only for such a request). */
	struct ibv_mr mr = { .context = qp ? qp->context : NULL, .pd = qp ? qp->pd : NULL };
	struct ibv_send_wr wr = { .opcode = IBV_WR_BIND_MW }, *bad = NULL;
	uint64_t n = 0;
	int err;

	if (!mw || mw->type != IBV_MW_TYPE_2 || !bw || bw->comp_mask || !bw->entries ||
	    !bw->num_entries)
		return EINVAL;
	err = xbind(qp, mw, bw->rkey, bw->addr, bw->access, bw->kind, bw->entries,
		    bw->num_entries, &n);
	if (err)
		return err;
	mr.lkey = mw->rkey;
	wr.wr_id = bw->wr_id;
	wr.send_flags = bw->send_flags;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = bw->rkey;
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){
		.mr = &mr, .addr = bw->addr, .length = n, .mw_access_flags = bw->access,
	};
	err = ibv_post_send(qp, &wr, &bad);
	if (err)
		return err;
	if (total)
		*total = n;
	return 0;
}
