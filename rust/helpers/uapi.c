// SPDX-License-Identifier: GPL-2.0
/*
 * rodp's driver-specific uverbs methods (include/rodp-xmw-abi.h): the static tables only C's
 * macros can build (Documentation/xmw-interface.md, 1.5). Each handler is a trampoline to the
 * Rust function the binding layer passed in (include/rodp_uapi.h); the tables are given to
 * ib_core through ib_device.driver_def before the device is registered.
 */
#define UVERBS_MODULE_NAME rodp
#include <rdma/uverbs_named_ioctl.h>
#include <rodp-xmw-abi.h>
#include <rodp_uapi.h>
#include <rodp_helpers.h>

/* The Rust handlers (one driver per module: the same functions for every device). */
static struct rodp_uapi_ops rodp_uapi;

static int UVERBS_HANDLER(RODP_METHOD_DEVICE_QUERY_XMW)(struct uverbs_attr_bundle *attrs)
{
	return READ_ONCE(rodp_uapi.query_xmw)(attrs);
}

static int UVERBS_HANDLER(RODP_METHOD_MR_XMW_GRANT)(struct uverbs_attr_bundle *attrs)
{
	return READ_ONCE(rodp_uapi.mr_grant)(attrs);
}

static int UVERBS_HANDLER(RODP_METHOD_MW_XINIT)(struct uverbs_attr_bundle *attrs)
{
	return READ_ONCE(rodp_uapi.mw_xinit)(attrs);
}

static int UVERBS_HANDLER(RODP_METHOD_MW_XBIND)(struct uverbs_attr_bundle *attrs)
{
	return READ_ONCE(rodp_uapi.mw_xbind)(attrs);
}

DECLARE_UVERBS_NAMED_METHOD(RODP_METHOD_DEVICE_QUERY_XMW,
			    UVERBS_ATTR_PTR_OUT(RODP_ATTR_QUERY_XMW_CAPS,
						UVERBS_ATTR_STRUCT(struct rodp_xmw_caps, max_total),
						UA_MANDATORY));

/* Objects are taken for reading: a concurrent post or bind on them must not see EBUSY. */
DECLARE_UVERBS_NAMED_METHOD(RODP_METHOD_MR_XMW_GRANT,
			    UVERBS_ATTR_IDR(RODP_ATTR_MR_XMW_GRANT_HANDLE, UVERBS_OBJECT_MR,
					    UVERBS_ACCESS_READ, UA_MANDATORY));

DECLARE_UVERBS_NAMED_METHOD(RODP_METHOD_MW_XINIT,
			    UVERBS_ATTR_IDR(RODP_ATTR_MW_XINIT_HANDLE, UVERBS_OBJECT_MW,
					    UVERBS_ACCESS_READ, UA_MANDATORY),
			    UVERBS_ATTR_PTR_IN(RODP_ATTR_MW_XINIT_MAX_DESCRIPTORS,
					       UVERBS_ATTR_TYPE(__u32), UA_MANDATORY));

/* The entries are copied by the handler: at most 64 KiB (the attribute length is 16 bits). */
DECLARE_UVERBS_NAMED_METHOD(RODP_METHOD_MW_XBIND,
			    UVERBS_ATTR_IDR(RODP_ATTR_MW_XBIND_HANDLE, UVERBS_OBJECT_MW,
					    UVERBS_ACCESS_READ, UA_MANDATORY),
			    UVERBS_ATTR_IDR(RODP_ATTR_MW_XBIND_QP, UVERBS_OBJECT_QP,
					    UVERBS_ACCESS_READ, UA_MANDATORY),
			    UVERBS_ATTR_PTR_IN(RODP_ATTR_MW_XBIND_ARGS,
					       UVERBS_ATTR_STRUCT(struct rodp_xmw_bind, reserved),
					       UA_MANDATORY),
			    UVERBS_ATTR_PTR_IN(RODP_ATTR_MW_XBIND_ENTRIES,
					       UVERBS_ATTR_MIN_SIZE(sizeof(struct rodp_xmw_entry)),
					       UA_MANDATORY),
			    UVERBS_ATTR_PTR_OUT(RODP_ATTR_MW_XBIND_RESP,
						UVERBS_ATTR_STRUCT(struct rodp_xmw_bind_resp, total),
						UA_MANDATORY));

ADD_UVERBS_METHODS(rodp_device, UVERBS_OBJECT_DEVICE,
		   &UVERBS_METHOD(RODP_METHOD_DEVICE_QUERY_XMW));
ADD_UVERBS_METHODS(rodp_mr, UVERBS_OBJECT_MR, &UVERBS_METHOD(RODP_METHOD_MR_XMW_GRANT));
ADD_UVERBS_METHODS(rodp_mw, UVERBS_OBJECT_MW, &UVERBS_METHOD(RODP_METHOD_MW_XINIT),
		   &UVERBS_METHOD(RODP_METHOD_MW_XBIND));

static const struct uapi_definition rodp_uapi_defs[] = {
	UAPI_DEF_CHAIN_OBJ_TREE(UVERBS_OBJECT_DEVICE, &rodp_device),
	UAPI_DEF_CHAIN_OBJ_TREE(UVERBS_OBJECT_MR, &rodp_mr),
	UAPI_DEF_CHAIN_OBJ_TREE(UVERBS_OBJECT_MW, &rodp_mw),
	{},
};

const struct uapi_definition *rodp_helper_uapi_defs(const struct rodp_uapi_ops *ops)
{
	WRITE_ONCE(rodp_uapi.query_xmw, ops->query_xmw);
	WRITE_ONCE(rodp_uapi.mr_grant, ops->mr_grant);
	WRITE_ONCE(rodp_uapi.mw_xinit, ops->mw_xinit);
	WRITE_ONCE(rodp_uapi.mw_xbind, ops->mw_xbind);
	return rodp_uapi_defs;
}
