/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ib_core's record of one user mapping of a device file: struct rdma_umap_priv of
 * drivers/infiniband/core/core_priv.h, a private header, although rdma_umap_priv_init() that
 * fills it is exported. rdma_umap_priv_init() puts the VMA on the file's list that
 * disassociation zaps; ib_uverbs' vm_ops free the record (kfree) when the VMA closes. The
 * layout must stay that of the core: helpers.c checks it when the kernel source is at hand.
 */
#ifndef RODP_UMAP_H
#define RODP_UMAP_H

#include <linux/list.h>

struct vm_area_struct;
struct rdma_user_mmap_entry;

struct rodp_umap_priv {
	struct vm_area_struct *vma;
	struct list_head list;
	struct rdma_user_mmap_entry *entry;
};

#endif
