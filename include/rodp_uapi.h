/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The Rust handlers of rodp's driver-specific uverbs methods (include/rodp-xmw-abi.h), given to
 * the C tables of rust/helpers/uapi.c: one per method, each called with the call's bundle.
 */
#ifndef RODP_UAPI_H
#define RODP_UAPI_H

struct uverbs_attr_bundle;

struct rodp_uapi_ops {
	int (*query_xmw)(struct uverbs_attr_bundle *attrs);
	int (*mr_grant)(struct uverbs_attr_bundle *attrs);
	int (*mw_xinit)(struct uverbs_attr_bundle *attrs);
	int (*mw_xbind)(struct uverbs_attr_bundle *attrs);
};

#endif
