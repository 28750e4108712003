/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Memory window and re-registration helpers for rodp's kselftests: binds through ibv_bind_mw
 * (type 1) and IBV_WR_BIND_MW (type 2B), invalidations, and IB_USER_VERBS_CMD_REREG_MR written
 * straight to the context's command file (the rxe provider rodp shares has no rereg_mr, so
 * libibverbs answers EOPNOTSUPP without asking the kernel).
 */
#ifndef RODP_MW_H
#define RODP_MW_H

#include <rdma/ib_user_verbs.h>
#include "rodp_verbs.h"

#define WIN_RIGHTS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* ibv_inc_rkey: the next key byte. */
static inline uint32_t next_key(uint32_t key)
{
	return (key & ~0xffu) | ((key + 1) & 0xff);
}

/* Completes one send-queue WR of qp on cq; returns its status (-1: none came). */
static inline int complete1(struct ibv_cq *cq, enum ibv_wc_opcode *op)
{
	struct ibv_wc wc;

	if (poll1(cq, &wc, 20000) != 1)
		return -1;
	if (op)
		*op = wc.opcode;
	return wc.status;
}

/* Binds a type 1 window with ibv_bind_mw; returns the completion status (or -errno). */
static inline int bind1(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mw *mw,
			struct ibv_mr *mr, void *addr, uint64_t len, unsigned int access)
{
	struct ibv_mw_bind b = {
		.wr_id = 7, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = mr, .addr = (uintptr_t)addr, .length = len,
			       .mw_access_flags = access },
	};
	int ret = ibv_bind_mw(qp, mw, &b);

	return ret ? -ret : complete1(cq, NULL);
}

/*
 * Binds a window with an IBV_WR_BIND_MW WR giving it key; returns the completion status. On
 * success mw->rkey becomes key, as ibv_bind_mw does for type 1: the rxe provider names the window
 * by mw->rkey in the next bind, and rxe and rodp refuse a bind naming a stale key.
 */
static inline int bind2(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mw *mw, uint32_t key,
			struct ibv_mr *mr, uint64_t addr, uint64_t len, unsigned int access)
{
	struct ibv_send_wr wr = { .wr_id = 8, .opcode = IBV_WR_BIND_MW,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	enum ibv_wc_opcode op;
	int st;

	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = key;
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = addr;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = access;
	if (ibv_post_send(qp, &wr, &bad))
		return -errno;
	st = complete1(cq, &op);
	if (st == IBV_WC_SUCCESS && op != IBV_WC_BIND_MW)
		return -1;
	if (st == IBV_WC_SUCCESS)
		mw->rkey = key;
	return st;
}

/* Posts a local invalidate of key; returns the completion status. */
static inline int local_inv(struct ibv_qp *qp, struct ibv_cq *cq, uint32_t key)
{
	struct ibv_send_wr wr = { .wr_id = 9, .opcode = IBV_WR_LOCAL_INV,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	enum ibv_wc_opcode op;
	int st;

	wr.invalidate_rkey = key;
	if (ibv_post_send(qp, &wr, &bad))
		return -errno;
	st = complete1(cq, &op);
	if (st == IBV_WC_SUCCESS && op != IBV_WC_LOCAL_INV)
		return -1;
	return st;
}

/*
 * IB_USER_VERBS_CMD_REREG_MR on ctx's command file: 0 or -errno; *lkey and *rkey (if given)
 * receive the keys the kernel reports.
 */
static inline int rereg_cmd(struct ibv_context *ctx, struct ibv_mr *mr, int flags, void *addr,
			    uint64_t len, uint64_t iova, struct ibv_pd *pd, int access,
			    uint32_t *lkey, uint32_t *rkey)
{
	struct {
		struct ib_uverbs_cmd_hdr hdr;
		struct ib_uverbs_rereg_mr cmd;
	} req = { 0 };
	struct ib_uverbs_rereg_mr_resp resp = { 0 };

	req.hdr.command = IB_USER_VERBS_CMD_REREG_MR;
	req.hdr.in_words = sizeof(req) / 4;
	req.hdr.out_words = sizeof(resp) / 4;
	req.cmd.response = (uintptr_t)&resp;
	req.cmd.mr_handle = mr->handle;
	req.cmd.flags = flags;
	req.cmd.start = (uintptr_t)addr;
	req.cmd.length = len;
	req.cmd.hca_va = iova;
	req.cmd.pd_handle = pd ? pd->handle : 0;
	req.cmd.access_flags = access;
	if (write(ctx->cmd_fd, &req, sizeof(req)) != sizeof(req))
		return -errno;
	if (lkey)
		*lkey = resp.lkey;
	if (rkey)
		*rkey = resp.rkey;
	return 0;
}

/* The MR's line in `rdma -dd resource show mr`. */
static inline int res_line(struct ibv_mr *mr, char *line, size_t len)
{
	char out[4096], pat[32], *at, *end;

	snprintf(pat, sizeof(pat), "rkey 0x%x ", mr->rkey);
	if (sh(out, sizeof(out), "rdma -dd resource show mr dev rodp0") ||
	    !(at = strstr(out, pat)))
		return -1;
	while (at > out && at[-1] != '\n')
		at--;
	/* The line and the driver attributes' continuation line. */
	end = strchr(at, '\n');
	if (end && end[1] == ' ')
		end = strchr(end + 1, '\n');
	snprintf(line, len, "%.*s", end ? (int)(end - at) : (int)strlen(at), at);
	return 0;
}

#endif
