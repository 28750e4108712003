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

/* One method call with one output attribute; 0 or an errno value. */
static int call_out(struct ibv_context *ctx, uint16_t object, uint16_t method, uint16_t attr,
		    void *out, uint16_t len)
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
			/* rodp presents itself as rxe: the provider and the core's ID are rxe's. */
			.driver_id = RDMA_DRIVER_RXE,
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
	return 0;
}

int rodp_xmw_query_device(struct ibv_context *ctx, struct rodp_xmw_mw_caps *caps)
{
	struct rodp_xmw_caps k;
	int err;

	if (!ctx || !caps)
		return EINVAL;
	memset(&k, 0, sizeof(k));
	err = call_out(ctx, UVERBS_OBJECT_DEVICE, RODP_METHOD_DEVICE_QUERY_XMW,
		       RODP_ATTR_QUERY_XMW_CAPS, &k, sizeof(k));
	/*
	 * A device without rodp's methods: rxe does not know the method (EPROTONOSUPPORT), a
	 * driver with another ID refuses the call's driver ID (EINVAL: the call itself is
	 * well-formed).
	 */
	if (err == EPROTONOSUPPORT || err == EOPNOTSUPP || err == EINVAL)
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
