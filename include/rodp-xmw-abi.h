/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR BSD-2-Clause) */
/*
 * rodp's extended memory windows: the user/kernel ABI (Documentation/xmw.rst for the
 * semantics, Documentation/xmw-interface.md for the mechanism). Driver-specific uverbs
 * methods on core objects, reached with RDMA_VERBS_IOCTL on the context's command file and
 * driver_id RDMA_DRIVER_RXE; objects are named by the handles libibverbs keeps in ibv_pd,
 * ibv_mr, ibv_mw and ibv_qp. Shared by the kernel's method tables, bindgen and the library.
 *
 * Implemented: the query, the MR grant, the window's budget (XINIT), and XBIND: the bind by
 * call of a layout to a type 1 window, or the stage of a layout on a type 2 window, which the
 * next bind work request for the window with the same new key, address, length (the
 * layout's total) and access bits binds when the send queue reaches it.
 */
#ifndef RODP_XMW_ABI_H
#define RODP_XMW_ABI_H

#include <linux/types.h>
#include <rdma/ib_user_ioctl_cmds.h>

/* Driver IDs carry the namespace bit: IDs below it are the core's own. */
#define RODP_XMW_ID(n) ((1U << UVERBS_ID_NS_SHIFT) + (n))

/* On UVERBS_OBJECT_DEVICE: what the device does (no object attribute: any context). */
enum rodp_xmw_device_methods {
	RODP_METHOD_DEVICE_QUERY_XMW = RODP_XMW_ID(0),
};

enum rodp_xmw_query_attrs {
	RODP_ATTR_QUERY_XMW_CAPS = RODP_XMW_ID(0),	/* out: struct rodp_xmw_caps */
};

/* On UVERBS_OBJECT_MR: grants non-contiguous binding (IBV_ACCESS_BIND_MW_NONCONTIG). */
enum rodp_xmw_mr_methods {
	RODP_METHOD_MR_XMW_GRANT = RODP_XMW_ID(0),
};

enum rodp_xmw_mr_grant_attrs {
	RODP_ATTR_MR_XMW_GRANT_HANDLE = RODP_XMW_ID(0),	/* the MR, read access */
};

/* On UVERBS_OBJECT_MW: makes a window extended, binds (type 1) or stages (type 2) a layout. */
enum rodp_xmw_mw_methods {
	RODP_METHOD_MW_XINIT = RODP_XMW_ID(0),
	RODP_METHOD_MW_XBIND = RODP_XMW_ID(1),
};

enum rodp_xmw_mw_xinit_attrs {
	RODP_ATTR_MW_XINIT_HANDLE = RODP_XMW_ID(0),	/* the window, read access */
	RODP_ATTR_MW_XINIT_MAX_DESCRIPTORS = RODP_XMW_ID(1),	/* in: __u32 */
};

enum rodp_xmw_mw_xbind_attrs {
	RODP_ATTR_MW_XBIND_HANDLE = RODP_XMW_ID(0),	/* the window, read access */
	RODP_ATTR_MW_XBIND_QP = RODP_XMW_ID(1),		/* the QP it is bound through */
	RODP_ATTR_MW_XBIND_ARGS = RODP_XMW_ID(2),	/* in: struct rodp_xmw_bind */
	RODP_ATTR_MW_XBIND_ENTRIES = RODP_XMW_ID(3),	/* in: struct rodp_xmw_entry[] */
	RODP_ATTR_MW_XBIND_RESP = RODP_XMW_ID(4),	/* out: struct rodp_xmw_bind_resp */
};

/* rodp_xmw_caps.flags: the layouts the device binds (xmw.rst, "Objects and capabilities"). */
enum rodp_xmw_cap_flags {
	RODP_XMW_COMPOSITE = 1 << 0,
	RODP_XMW_INTERLEAVED = 1 << 1,
	RODP_XMW_INTERLEAVED_REPETITION = 1 << 2,
	RODP_XMW_INTERLEAVED_NONUNIFORM_REPETITION = 1 << 3,
	RODP_XMW_INTERLEAVED_NONUNIFORM_TOTAL_ITEMS = 1 << 4,
};

struct rodp_xmw_caps {
	__u32 flags;			/* enum rodp_xmw_cap_flags */
	__u32 max_mkey_list_sz;		/* entries of one layout, max_descriptors */
	__u32 max_mkey_inline_list_sz;	/* entries a send-queue bind carries in its WQE */
	__u32 max_mw_recursion_depth;
	__u32 max_mw_stride_dimension;
	__u32 reserved;
	__aligned_u64 max_total;	/* the longest layout (max_mr_size) */
};

enum rodp_xmw_kind {
	RODP_XMW_KIND_COMPOSITE = 0,
	RODP_XMW_KIND_INTERLEAVED = 1,
};

#define RODP_XMW_MAX_DIMS 4

struct rodp_xmw_dim {
	__aligned_u64 stride;
	__aligned_u64 count;
};

/* One entry: elements of len bytes of the MR or bound window named by key (rodp's MR and
 * window keys share one key space), the first at start (an address of that object). */
struct rodp_xmw_entry {
	__u32 key;
	__u32 ndims;			/* 0 .. max_mw_stride_dimension */
	__aligned_u64 start;
	__aligned_u64 len;
	__aligned_u64 repeat_count;	/* 1 in a COMPOSITE layout */
	struct rodp_xmw_dim dims[RODP_XMW_MAX_DIMS];	/* dimension 0 innermost */
};

/* A layout bind: the window's base address, rights (IBV_ACCESS_* of a window bind) and
 * layout kind; the entries come in RODP_ATTR_MW_XBIND_ENTRIES. */
struct rodp_xmw_bind {
	__aligned_u64 addr;
	__u32 access;
	__u32 kind;			/* enum rodp_xmw_kind */
	__u32 rkey;			/* the key to bind under (the window's, new key byte) */
	__u32 reserved;
};

struct rodp_xmw_bind_resp {
	__aligned_u64 total;		/* the window's length */
};

#endif
