/* SPDX-License-Identifier: GPL-2.0 */
/* Headers rodp's bindings are generated from (rust/bindings.rs). */
#include <linux/netdevice.h>
#include <linux/module.h>
#include <net/addrconf.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_mad.h>
#include <rdma/rdma_netlink.h>
#include <rdma/restrack.h>
#include <rdma/ib_umem_odp.h>
#include <rdma/uverbs_ioctl.h>
#include <uapi/rdma/rdma_user_rxe.h>
#include <linux/hmm.h>
#include <linux/mmu_notifier.h>
#include <rodp_umap.h>
#include <rodp-xmw-abi.h>
#include <rodp_uapi.h>
/* Exported by ib_core, declared only in its private core_priv.h (see rodp_umap.h). */
void rdma_umap_priv_init(struct rodp_umap_priv *priv, struct vm_area_struct *vma,
			 struct rdma_user_mmap_entry *entry);
#include <linux/crc32.h>
