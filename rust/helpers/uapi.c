// SPDX-License-Identifier: GPL-2.0
/*
 * rodp's driver-specific uverbs methods (include/rodp-xmw-abi.h): the static tables only C's
 * macros can build (Documentation/xmw-interface.md, 1.5). Each handler is a trampoline to the
 * Rust function the binding layer passed in; the tables are given to ib_core through
 * ib_device.driver_def before the device is registered.
 */
#define UVERBS_MODULE_NAME rodp
#include <rdma/uverbs_named_ioctl.h>
#include <rodp-xmw-abi.h>
#include <rodp_helpers.h>

/* The Rust handlers (one driver per module: the same functions for every device). */
static int (*rodp_query_xmw)(struct uverbs_attr_bundle *attrs);

static int UVERBS_HANDLER(RODP_METHOD_DEVICE_QUERY_XMW)(struct uverbs_attr_bundle *attrs)
{
	return READ_ONCE(rodp_query_xmw)(attrs);
}

DECLARE_UVERBS_NAMED_METHOD(RODP_METHOD_DEVICE_QUERY_XMW,
			    UVERBS_ATTR_PTR_OUT(RODP_ATTR_QUERY_XMW_CAPS,
						UVERBS_ATTR_STRUCT(struct rodp_xmw_caps, max_total),
						UA_MANDATORY));

ADD_UVERBS_METHODS(rodp_device, UVERBS_OBJECT_DEVICE,
		   &UVERBS_METHOD(RODP_METHOD_DEVICE_QUERY_XMW));

static const struct uapi_definition rodp_uapi_defs[] = {
	UAPI_DEF_CHAIN_OBJ_TREE(UVERBS_OBJECT_DEVICE, &rodp_device),
	{},
};

const struct uapi_definition *
rodp_helper_uapi_defs(int (*query_xmw)(struct uverbs_attr_bundle *attrs))
{
	WRITE_ONCE(rodp_query_xmw, query_xmw);
	return rodp_uapi_defs;
}
