/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR BSD-2-Clause) */
/*
 * librodp-xmw: rodp's extended memory windows for programs using the unchanged libibverbs
 * (Documentation/xmw.rst). It takes the ibv_context, ibv_pd, ibv_mr, ibv_mw and ibv_qp objects
 * the rxe provider made for a rodp device and reaches the kernel through the context's uverbs
 * command file; every check is the kernel's.
 *
 * Build against it with: pkg-config --cflags --libs rodp-xmw
 *
 * What the library does: it asks a device what it binds (rodp_xmw_query_device), grants an MR
 * non-contiguous binding (rodp_xmw_grant_noncontig), allocates a window with a descriptor
 * budget (rodp_xmw_alloc_mw_ex), binds a layout to a type 1 window by call
 * (rodp_xmw_bind_layout) and to a type 2 window through the send queue
 * (rodp_xmw_post_bind_layout). A device reports only what works.
 */
#ifndef RODP_XMW_H
#define RODP_XMW_H

#include <stdint.h>
#include <infiniband/verbs.h>
#include <rodp-xmw-abi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* rodp_xmw_mw_caps.general_caps: the layouts a device binds to a window, under the
 * proposal's names (the values are the kernel ABI's). */
enum rodp_xmw_general_caps {
	RODP_XMW_CAP_COMPOSITE = RODP_XMW_COMPOSITE,
	RODP_XMW_CAP_INTERLEAVED = RODP_XMW_INTERLEAVED,
	RODP_XMW_CAP_INTERLEAVED_REPETITION = RODP_XMW_INTERLEAVED_REPETITION,
	RODP_XMW_CAP_INTERLEAVED_NONUNIFORM_REPETITION = RODP_XMW_INTERLEAVED_NONUNIFORM_REPETITION,
	RODP_XMW_CAP_INTERLEAVED_NONUNIFORM_TOTAL_ITEMS =
		RODP_XMW_INTERLEAVED_NONUNIFORM_TOTAL_ITEMS,
};

/* What a device binds of extended memory windows (the proposal's memory window caps). */
struct rodp_xmw_mw_caps {
	uint32_t general_caps;			/* enum rodp_xmw_general_caps */
	uint32_t max_mkey_list_sz;		/* entries of one layout */
	uint32_t max_mkey_inline_list_sz;	/* entries a send-queue bind carries */
	uint32_t max_mw_recursion_depth;	/* windows within windows */
	uint32_t max_mw_stride_dimension;	/* dimensions of one entry */
	uint64_t max_total;			/* bytes a layout window presents at most */
};

/*
 * Fills caps with what the device of ctx binds. Returns 0, or an errno value:
 * EOPNOTSUPP when the device is not a rodp device (another driver has no such call), or the
 * error of the call (EINVAL for a NULL argument).
 */
int rodp_xmw_query_device(struct ibv_context *ctx, struct rodp_xmw_mw_caps *caps);

/*
 * Lets extended windows' layouts name mr, the proposal's IBV_ACCESS_BIND_MW_NONCONTIG (which
 * ibv_reg_mr cannot carry: the kernel refuses access bits it does not know). The grant lasts
 * until the MR is deregistered, through re-registrations. Returns 0 or an errno value
 * (EOPNOTSUPP on a device that is not rodp's, EINVAL for a NULL mr).
 */
int rodp_xmw_grant_noncontig(struct ibv_mr *mr);

/*
 * The proposal's alloc_mw_ex: ibv_alloc_mw, then a budget of max_descriptors layout entries
 * (1 to max_mkey_list_sz). Free the window with ibv_dealloc_mw. Returns NULL with errno set on
 * failure (EINVAL for a budget out of range, EOPNOTSUPP on a device that is not rodp's, or
 * ibv_alloc_mw's error).
 */
struct ibv_mw *rodp_xmw_alloc_mw_ex(struct ibv_pd *pd, enum ibv_mw_type type,
				    uint32_t max_descriptors);

/*
 * Binds a layout to mw, a type 1 window from rodp_xmw_alloc_mw_ex (EINVAL for a type 2 one),
 * through qp (of the window's
 * PD; any QP of it may then use the window): num_entries entries (struct rodp_xmw_entry of
 * rodp-xmw-abi.h, each naming an MR granted non-contiguous binding by its lkey) of the layout
 * kind (RODP_XMW_KIND_COMPOSITE or RODP_XMW_KIND_INTERLEAVED), the window starting at addr
 * with the rights access (IBV_ACCESS_REMOTE_*). The bind takes effect when the call returns.
 * On success mw->rkey is the window's new key and *total (if total is not NULL) its length.
 * Returns 0 or an errno value (Documentation/xmw.rst, "Validity rules"; EOPNOTSUPP on a device
 * that is not rodp's, EINVAL for NULL arguments or objects of two contexts).
 */
int rodp_xmw_bind_layout(struct ibv_qp *qp, struct ibv_mw *mw, uint64_t addr,
			 unsigned int access, enum rodp_xmw_kind kind,
			 const struct rodp_xmw_entry *entries, uint32_t num_entries,
			 uint64_t *total);

/* A bind of a layout through the send queue (rodp_xmw_post_bind_layout). */
struct rodp_xmw_bind_wr {
	uint32_t comp_mask;			/* 0: no fields beyond these yet */
	uint64_t wr_id;				/* as ibv_send_wr's */
	unsigned int send_flags;		/* IBV_SEND_SIGNALED, IBV_SEND_FENCE */
	uint32_t rkey;				/* the window's key after the bind, as
						 * IBV_WR_BIND_MW's: ibv_inc_rkey(mw->rkey) */
	uint64_t addr;				/* the window's base address */
	unsigned int access;			/* IBV_ACCESS_REMOTE_*, IBV_ACCESS_LOCAL_WRITE */
	enum rodp_xmw_kind kind;
	const struct rodp_xmw_entry *entries;
	uint32_t num_entries;
};

/*
 * Posts a bind of the layout of bw to mw, a type 2 window from rodp_xmw_alloc_mw_ex, on qp's
 * send queue; the window then serves qp alone. The layout is checked now (the errno values of
 * rodp_xmw_bind_layout) and staged on the window; the bind work request posted after it (one
 * that names the window itself as its MR) binds it when the send queue reaches it, in order
 * with the work requests before and after it, and completes (when signaled, or in error) with
 * IBV_WC_BIND_MW, or with IBV_WC_MW_BIND_ERR when the window is not free then, bw->rkey does
 * not change its key byte, an MR of the layout was deregistered or re-registered since, or a
 * later stage replaced this one: stage a window's next bind after its last one completed. As
 * with IBV_WR_BIND_MW, the caller sets mw->rkey to bw->rkey once the bind completed.
 * IBV_WR_LOCAL_INV of that key, a peer's IBV_WR_SEND_WITH_INV arriving on qp and
 * ibv_dealloc_mw end the binding. Returns 0, with the window's length in *total (if total is not
 * NULL), or an errno value: rodp_xmw_bind_layout's (EINVAL also for a type 1 window, a key
 * of another window or a comp_mask other than 0), or ibv_post_send's.
 */
int rodp_xmw_post_bind_layout(struct ibv_qp *qp, struct ibv_mw *mw,
			      const struct rodp_xmw_bind_wr *bw, uint64_t *total);

#ifdef __cplusplus
}
#endif

#endif
