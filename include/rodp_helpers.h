/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C helpers for rodp: static inline functions and macros the Rust side cannot call, plus the
 * few places that walk kernel lists. Every function here is used only by rust/ib/.
 */
#ifndef RODP_HELPERS_H
#define RODP_HELPERS_H

#include <linux/module.h>
#include <linux/netdevice.h>
#include <rdma/ib_verbs.h>

struct ib_device *rodp_helper_ib_alloc_device(size_t size);
struct net_device *rodp_helper_netdev_notifier_info_to_dev(void *info);
void rodp_helper_dev_put(struct net_device *ndev);
unsigned int rodp_helper_netdev_mtu(const struct net_device *ndev);
bool rodp_helper_netdev_is_up(const struct net_device *ndev);
enum ib_port_state rodp_helper_ib_get_curr_port_state(struct net_device *ndev);
bool rodp_helper_netdev_mac(const struct net_device *ndev, u8 *mac);
void rodp_helper_eth_random_addr(u8 *mac);
const char *rodp_helper_netdev_name(const struct net_device *ndev);
bool rodp_helper_is_vlan_dev(const struct net_device *ndev);
enum ib_mtu rodp_helper_iboe_get_mtu(int mtu);
unsigned long rodp_helper_modules_vaddr(void);
unsigned long rodp_helper_modules_end(void);
const char *rodp_helper_module_name(const struct module *mod);
int rodp_helper_notifier_from_errno(int err);
struct ib_ucontext *rodp_helper_udata_to_ucontext(struct ib_udata *udata);
void *rodp_helper_vmalloc_user(unsigned long size);
void rodp_helper_vfree(void *addr);
void rodp_helper_cond_resched(void);
int rodp_helper_remap_vmalloc_range(struct vm_area_struct *vma, void *addr);
bool rodp_helper_vma_is_shared(const struct vm_area_struct *vma);
void rodp_helper_mark_name_assigned_by_user(struct ib_device *ibdev);
u64 rodp_helper_mmap_get_offset(const struct rdma_user_mmap_entry *entry);

/* rust/helpers/uapi.c: the driver-specific uverbs methods (include/rodp-xmw-abi.h). */
struct uverbs_attr_bundle;
struct uapi_definition;
struct rodp_uapi_ops;
const struct uapi_definition *rodp_helper_uapi_defs(const struct rodp_uapi_ops *ops);
void *rodp_helper_uverbs_attr_get_obj(const struct uverbs_attr_bundle *attrs, u16 idx);
int rodp_helper_uverbs_copy_from(void *to, const struct uverbs_attr_bundle *attrs, size_t idx,
				 size_t size);
int rodp_helper_uverbs_copy_from_or_zero(void *to, const struct uverbs_attr_bundle *attrs,
					 size_t idx, size_t size);
int rodp_helper_uverbs_attr_get_len(const struct uverbs_attr_bundle *attrs, u16 idx);

u32 rodp_helper_load_acquire_u32(const u32 *p);
void rodp_helper_store_release_u32(u32 *p, u32 v);
struct ib_umem;
size_t rodp_helper_umem_pages(struct ib_umem *umem, struct page **pages, size_t n);
void *rodp_helper_kmap_local_page(struct page *page);
void rodp_helper_kunmap_local(void *addr);
u64 rodp_helper_atomic64_cmpxchg(u64 *p, u64 old, u64 new);
u64 rodp_helper_atomic64_fetch_add(u64 *p, u64 add);
void rodp_helper_atomic64_store_release(u64 *p, u64 v);
struct workqueue_struct *rodp_helper_alloc_workqueue(const char *name, unsigned int flags);
unsigned int rodp_helper_memalloc_noio_save(void);
void rodp_helper_memalloc_noio_restore(unsigned int flags);
int rodp_helper_copy_to_udata(struct ib_udata *udata, void *src, size_t len);
int rodp_helper_copy_from_udata(void *dst, struct ib_udata *udata, size_t len);
struct uverbs_attr_bundle;
struct ib_udata *rodp_helper_bundle_udata(struct uverbs_attr_bundle *attrs);
bool rodp_helper_ib_device_try_get(struct ib_device *dev);
bool rodp_helper_virt_addr_valid(const void *p);
struct ib_umem_odp;
struct mmu_interval_notifier;
struct mmu_notifier_range;
unsigned long rodp_helper_odp_start(struct ib_umem_odp *odp);
unsigned long rodp_helper_odp_end(struct ib_umem_odp *odp);
void rodp_helper_odp_lock(struct ib_umem_odp *odp);
void rodp_helper_odp_lock_second(struct ib_umem_odp *odp);
void rodp_helper_odp_unlock(struct ib_umem_odp *odp);
struct ib_umem_odp *rodp_helper_odp_of_notifier(struct mmu_interval_notifier *mni);
bool rodp_helper_mmu_range_blockable(const struct mmu_notifier_range *range);
void rodp_helper_mmu_interval_set_seq(struct mmu_interval_notifier *mni, unsigned long seq);
u64 rodp_helper_odp_pfn(struct ib_umem_odp *odp, size_t idx);
struct page *rodp_helper_hmm_pfn_to_page(u64 pfn);
void rodp_helper_set_page_dirty_head(struct page *page);
u64 rodp_helper_odp_grab_mm(struct ib_umem_odp *odp);
void rodp_helper_odp_drop_mm(struct ib_umem_odp *odp);
void *rodp_helper_memcg_get(void);
void *rodp_helper_memcg_clone(void *memcg);
void rodp_helper_memcg_put(void *memcg);
void *rodp_helper_set_active_memcg(void *memcg);
struct sk_buff;
struct nlattr;
struct nlattr *rodp_helper_nl_nest_start(struct sk_buff *msg, int attr);
void rodp_helper_nl_nest_end(struct sk_buff *msg, struct nlattr *nest);
void rodp_helper_nl_nest_cancel(struct sk_buff *msg, struct nlattr *nest);

/* UDP tunnel sockets and UDP/IP transmit (rust/ib/udp.rs). */
struct net;
struct sock;
struct dst_entry;
struct net *rodp_helper_dev_net(const struct net_device *ndev);
int rodp_helper_netdev_ifindex(const struct net_device *ndev);
struct net *rodp_helper_init_net_ptr(void);
int rodp_helper_udp_tunnel_open(struct net *net, bool ipv6, u16 port,
				int (*rcv)(struct sock *sk, struct sk_buff *skb), void *user,
				struct sock **skp);
void rodp_helper_udp_tunnel_close(struct sock *sk);
void *rodp_helper_sk_user_data(struct sock *sk);
u8 *rodp_helper_udp_rx(struct sk_buff *skb, unsigned int *len, u8 **nh, unsigned int *nh_len,
		       int *ifindex, int *lower_ifindex);
void rodp_helper_kfree_skb(struct sk_buff *skb);
void rodp_helper_consume_skb(struct sk_buff *skb);
int rodp_helper_gid_attr_ifindex(const struct ib_gid_attr *attr);
int rodp_helper_mc_group(struct net_device *dev, const u8 *gid, bool join);
struct dst_entry *rodp_helper_route4(struct net *net, int oif, const u8 *saddr, const u8 *daddr);
struct dst_entry *rodp_helper_route6(struct net *net, int oif, const u8 *saddr, const u8 *daddr);
long rodp_helper_ptr_err(const void *p);
void rodp_helper_dst_release(struct dst_entry *dst);
struct sk_buff *rodp_helper_udp_skb_alloc(struct dst_entry *dst, unsigned int hdr_len,
					  unsigned int len);
u8 *rodp_helper_skb_data(struct sk_buff *skb);
u8 *rodp_helper_udp_skb_push(struct sk_buff *skb, struct dst_entry *dst, unsigned int ip_len,
			     bool ipv6);
void rodp_helper_ip_select_ident(struct sk_buff *skb);
int rodp_helper_udp_local_out(struct sk_buff *skb, bool ipv6);

#endif
