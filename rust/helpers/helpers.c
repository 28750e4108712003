// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers for rodp's binding layer (rust/ib/): static inlines, macros and the struct fields
 * bindgen cannot reach, exported as functions. Nothing else: logic lives in Rust.
 */
#include <linux/etherdevice.h>
#include <linux/if_vlan.h>
#include <linux/vmalloc.h>
#include <rdma/ib_addr.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_verbs.h>
#include <rdma/uverbs_ioctl.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_umem_odp.h>
#include <linux/hmm.h>
#include <linux/highmem.h>
#include <linux/scatterlist.h>
#include <linux/workqueue.h>
#include <linux/memcontrol.h>
#include <linux/sched/mm.h>
#include <net/netlink.h>
#include <rodp_helpers.h>
#include <rodp_umap.h>

#if __has_include(<core_priv.h>)
#include <core_priv.h>
static_assert(sizeof(struct rodp_umap_priv) == sizeof(struct rdma_umap_priv));
static_assert(offsetof(struct rodp_umap_priv, vma) == offsetof(struct rdma_umap_priv, vma));
static_assert(offsetof(struct rodp_umap_priv, list) == offsetof(struct rdma_umap_priv, list));
static_assert(offsetof(struct rodp_umap_priv, entry) == offsetof(struct rdma_umap_priv, entry));
#endif

struct ib_device *rodp_helper_ib_alloc_device(size_t size)
{
	return _ib_alloc_device(size, &init_net);
}

struct net_device *rodp_helper_netdev_notifier_info_to_dev(void *info)
{
	return netdev_notifier_info_to_dev(info);
}

void rodp_helper_dev_put(struct net_device *ndev)
{
	dev_put(ndev);
}

unsigned int rodp_helper_netdev_mtu(const struct net_device *ndev)
{
	return READ_ONCE(ndev->mtu);
}

bool rodp_helper_netdev_is_up(const struct net_device *ndev)
{
	return netif_get_flags(ndev) & IFF_UP;
}

enum ib_port_state rodp_helper_ib_get_curr_port_state(struct net_device *ndev)
{
	return ib_get_curr_port_state(ndev);
}

/* The netdev's MAC address into mac[ETH_ALEN]; false when it has none that long. */
bool rodp_helper_netdev_mac(const struct net_device *ndev, u8 *mac)
{
	if (ndev->addr_len < ETH_ALEN)
		return false;
	memcpy(mac, ndev->dev_addr, ETH_ALEN);
	return true;
}

void rodp_helper_eth_random_addr(u8 *mac)
{
	eth_random_addr(mac);
}

const char *rodp_helper_netdev_name(const struct net_device *ndev)
{
	return ndev->name;
}

bool rodp_helper_is_vlan_dev(const struct net_device *ndev)
{
	return is_vlan_dev(ndev);
}

enum ib_mtu rodp_helper_iboe_get_mtu(int mtu)
{
	return iboe_get_mtu(mtu);
}

/* The module area: every struct module lives inside it. */
unsigned long rodp_helper_modules_vaddr(void)
{
	return MODULES_VADDR;
}

unsigned long rodp_helper_modules_end(void)
{
	return MODULES_END;
}

const char *rodp_helper_module_name(const struct module *mod)
{
	return mod->name;
}

int rodp_helper_notifier_from_errno(int err)
{
	return notifier_from_errno(err);
}

struct ib_ucontext *rodp_helper_udata_to_ucontext(struct ib_udata *udata)
{
	struct uverbs_attr_bundle *bundle =
		container_of(udata, struct uverbs_attr_bundle, driver_udata);

	return bundle->context;
}

void *rodp_helper_vmalloc_user(unsigned long size)
{
	return vmalloc_user(size);
}

void rodp_helper_vfree(void *addr)
{
	vfree(addr);
}

int rodp_helper_remap_vmalloc_range(struct vm_area_struct *vma, void *addr)
{
	return remap_vmalloc_range(vma, addr, 0);
}

bool rodp_helper_vma_is_shared(const struct vm_area_struct *vma)
{
	return vma->vm_flags & VM_SHARED;
}

void rodp_helper_mark_name_assigned_by_user(struct ib_device *ibdev)
{
	ib_mark_name_assigned_by_user(ibdev);
}

u64 rodp_helper_mmap_get_offset(const struct rdma_user_mmap_entry *entry)
{
	return rdma_user_mmap_get_offset(entry);
}

/* Ring indices shared with user space: acquire on read, release on write. */
u32 rodp_helper_load_acquire_u32(const u32 *p)
{
	return smp_load_acquire(p);
}

void rodp_helper_store_release_u32(u32 *p, u32 v)
{
	smp_store_release(p, v);
}

/* Fills pages[] with the pinned pages of a umem, in order; returns how many. */
size_t rodp_helper_umem_pages(struct ib_umem *umem, struct page **pages, size_t n)
{
	struct sg_page_iter iter;
	size_t i = 0;

	for_each_sgtable_page(&umem->sgt_append.sgt, &iter, 0) {
		if (i == n)
			break;
		pages[i++] = sg_page_iter_page(&iter);
	}
	return i;
}

void *rodp_helper_kmap_local_page(struct page *page)
{
	return kmap_local_page(page);
}

void rodp_helper_kunmap_local(void *addr)
{
	kunmap_local(addr);
}

/* 64-bit atomics on memory the device exposes: compare-and-swap and fetch-and-add. */
u64 rodp_helper_atomic64_cmpxchg(u64 *p, u64 old, u64 new)
{
	return cmpxchg64(p, old, new);
}

u64 rodp_helper_atomic64_fetch_add(u64 *p, u64 add)
{
	return (u64)atomic64_fetch_add((s64)add, (atomic64_t *)p);
}

/* ATOMIC WRITE: the 8 bytes land at once, after everything written before them (as rxe). */
void rodp_helper_atomic64_store_release(u64 *p, u64 v)
{
	atomic64_set_release((atomic64_t *)p, (s64)v);
}

struct workqueue_struct *rodp_helper_alloc_workqueue(const char *name, unsigned int flags)
{
	return alloc_workqueue("%s", flags, 0, name);
}

int rodp_helper_copy_to_udata(struct ib_udata *udata, void *src, size_t len)
{
	return ib_copy_to_udata(udata, src, len);
}

int rodp_helper_copy_from_udata(void *dst, struct ib_udata *udata, size_t len)
{
	return ib_copy_from_udata(dst, udata, len);
}

struct ib_udata *rodp_helper_bundle_udata(struct uverbs_attr_bundle *attrs)
{
	return &attrs->driver_udata;
}

/* The object of a handle attribute, NULL when the attribute is absent. */
void *rodp_helper_uverbs_attr_get_obj(const struct uverbs_attr_bundle *attrs, u16 idx)
{
	void *obj = uverbs_attr_get_obj(attrs, idx);

	return IS_ERR(obj) ? NULL : obj;
}

int rodp_helper_uverbs_copy_from(void *to, const struct uverbs_attr_bundle *attrs, size_t idx,
				 size_t size)
{
	return _uverbs_copy_from(to, attrs, idx, size);
}

/* At most size bytes of an input attribute, the rest of to zeroed. */
int rodp_helper_uverbs_copy_from_or_zero(void *to, const struct uverbs_attr_bundle *attrs,
					 size_t idx, size_t size)
{
	return _uverbs_copy_from_or_zero(to, attrs, idx, size);
}

/* The length of an input attribute, or a negative errno when it is absent. */
int rodp_helper_uverbs_attr_get_len(const struct uverbs_attr_bundle *attrs, u16 idx)
{
	return uverbs_attr_get_len(attrs, idx);
}

bool rodp_helper_ib_device_try_get(struct ib_device *dev)
{
	return ib_device_try_get(dev);
}

bool rodp_helper_virt_addr_valid(const void *p)
{
	return virt_addr_valid(p);
}

unsigned long rodp_helper_odp_start(struct ib_umem_odp *odp)
{
	return ib_umem_start(odp);
}

unsigned long rodp_helper_odp_end(struct ib_umem_odp *odp)
{
	return ib_umem_end(odp);
}

void rodp_helper_odp_lock(struct ib_umem_odp *odp)
{
	mutex_lock(&odp->umem_mutex);
}

/*
 * The second of two umem mutexes a copy between ODP ranges holds; the caller takes them in
 * address order, so two copies never wait for each other.
 */
void rodp_helper_odp_lock_second(struct ib_umem_odp *odp)
{
	mutex_lock_nested(&odp->umem_mutex, SINGLE_DEPTH_NESTING);
}

void rodp_helper_odp_unlock(struct ib_umem_odp *odp)
{
	mutex_unlock(&odp->umem_mutex);
}

struct ib_umem_odp *rodp_helper_odp_of_notifier(struct mmu_interval_notifier *mni)
{
	return container_of(mni, struct ib_umem_odp, notifier);
}

bool rodp_helper_mmu_range_blockable(const struct mmu_notifier_range *range)
{
	return mmu_notifier_range_blockable(range);
}

void rodp_helper_mmu_interval_set_seq(struct mmu_interval_notifier *mni, unsigned long seq)
{
	mmu_interval_set_seq(mni, seq);
}

/* ODP: entry idx of the umem's pfn list (hmm's view); the caller holds umem_mutex. */
u64 rodp_helper_odp_pfn(struct ib_umem_odp *odp, size_t idx)
{
	return odp->map.pfn_list[idx];
}

/* ODP: the page of an hmm pfn rodp copied into its MTT while the pfn was valid. */
struct page *rodp_helper_hmm_pfn_to_page(u64 pfn)
{
	return hmm_pfn_to_page(pfn);
}

/* ODP: a page the device may have written is dirty (ib_core does this only for DMA devices). */
void rodp_helper_set_page_dirty_head(struct page *page)
{
	set_page_dirty(compound_head(page));
}

/*
 * Implicit ODP: ib_umem_odp_alloc_implicit() records current->mm without a reference, and
 * children are made from it later, possibly after the process has exited; hold the mm_struct
 * for the parent's life. Returns the end of the process's user address space.
 */
u64 rodp_helper_odp_grab_mm(struct ib_umem_odp *odp)
{
	mmgrab(odp->umem.owning_mm);
	return odp->umem.owning_mm->task_size;
}

void rodp_helper_odp_drop_mm(struct ib_umem_odp *odp)
{
	mmdrop(odp->umem.owning_mm);
}

/*
 * ODP memory accounting: the memory cgroup of the registering process, charged for the
 * translation tables rodp allocates later from any context (the engine's workers included).
 * A void pointer: NULL without CONFIG_MEMCG.
 */
void *rodp_helper_memcg_get(void)
{
	return get_mem_cgroup_from_mm(current->mm);
}

void *rodp_helper_memcg_clone(void *memcg)
{
#ifdef CONFIG_MEMCG
	if (memcg)
		css_get(&((struct mem_cgroup *)memcg)->css);
#endif
	return memcg;
}

void rodp_helper_memcg_put(void *memcg)
{
	mem_cgroup_put(memcg);
}

void *rodp_helper_set_active_memcg(void *memcg)
{
	return set_active_memcg(memcg);
}

/* Nested netlink attributes for the per-MR restrack views. */
struct nlattr *rodp_helper_nl_nest_start(struct sk_buff *msg, int attr)
{
	return nla_nest_start(msg, attr);
}

void rodp_helper_nl_nest_end(struct sk_buff *msg, struct nlattr *nest)
{
	nla_nest_end(msg, nest);
}

void rodp_helper_nl_nest_cancel(struct sk_buff *msg, struct nlattr *nest)
{
	nla_nest_cancel(msg, nest);
}

void rodp_helper_cond_resched(void)
{
	cond_resched();
}

/* UDP tunnel sockets and UDP/IP transmit (rust/ib/udp.rs). */
#include <net/udp_tunnel.h>
#include <linux/igmp.h>
#include <linux/inetdevice.h>
#include <net/addrconf.h>
#include <net/ip.h>
#include <net/ipv6.h>
#include <net/route.h>
#include <net/net_namespace.h>

struct net *rodp_helper_dev_net(const struct net_device *ndev)
{
	return dev_net(ndev);
}

int rodp_helper_netdev_ifindex(const struct net_device *ndev)
{
	return READ_ONCE(ndev->ifindex);
}

struct net *rodp_helper_init_net_ptr(void)
{
	return &init_net;
}

/*
 * A kernel UDP socket of `net` bound to `port` (IPv4, or IPv6 only), set up as a UDP tunnel
 * whose encap_rcv is `rcv` and whose sk_user_data is `user`. The configuration structures
 * hold bitfields and unions under #if, which is why this is C.
 */
int rodp_helper_udp_tunnel_open(struct net *net, bool ipv6, u16 port,
				int (*rcv)(struct sock *sk, struct sk_buff *skb), void *user,
				struct sock **skp)
{
	struct udp_port_cfg cfg = {};
	struct udp_tunnel_sock_cfg tnl = {};
	struct socket *sock;
	int err;

	cfg.family = ipv6 ? AF_INET6 : AF_INET;
	cfg.ipv6_v6only = ipv6;
	cfg.local_udp_port = htons(port);
	err = udp_sock_create(net, &cfg, &sock);
	if (err)
		return err;
	tnl.sk_user_data = user;
	tnl.encap_type = 1;
	tnl.encap_rcv = rcv;
	setup_udp_tunnel_sock(net, sock->sk, &tnl);
	*skp = sock->sk;
	return 0;
}

void rodp_helper_udp_tunnel_close(struct sock *sk)
{
	udp_tunnel_sock_release(sk);
}

void *rodp_helper_sk_user_data(struct sock *sk)
{
	return rcu_dereference_sk_user_data(sk);
}

/*
 * A received UDP skb made linear: returns its UDP header (NULL if it cannot be made linear),
 * with the UDP length, the IP header and its length, the ingress netdev's ifindex and, for a
 * VLAN device, its real device's (else the same). NULL also for the copy of a multicast
 * datagram this host sent that IP loops back to its own listeners (PACKET_LOOPBACK): rodp
 * delivers to the host's own group members without packets.
 */
u8 *rodp_helper_udp_rx(struct sk_buff *skb, unsigned int *len, u8 **nh, unsigned int *nh_len,
		       int *ifindex, int *lower_ifindex)
{
	struct net_device *dev = skb->dev;
	u8 *th;

	if (!dev || skb->pkt_type == PACKET_LOOPBACK || skb_linearize(skb))
		return NULL;
	th = skb_transport_header(skb);
	if (th < skb->data || th > skb_tail_pointer(skb))
		return NULL;
	*len = skb_tail_pointer(skb) - th;
	*nh = skb_network_header(skb);
	*nh_len = th - *nh;
	*ifindex = dev->ifindex;
	*lower_ifindex = is_vlan_dev(dev) ? vlan_dev_real_dev(dev)->ifindex : dev->ifindex;
	return th;
}

void rodp_helper_kfree_skb(struct sk_buff *skb)
{
	kfree_skb(skb);
}

void rodp_helper_consume_skb(struct sk_buff *skb)
{
	consume_skb(skb);
}

/*
 * Joins (or leaves) the IP multicast group of the multicast GID `gid` on `dev`, as a socket's
 * membership would (IGMP/MLD reports, the MAC filter): an IPv4-mapped GID is an IPv4 group,
 * any other an IPv6 one. Memberships are counted per address, so rdma_cm's own join of the
 * same IPv4 group (cma_igmp_send) does not disturb this one. Sleeps (RTNL for IPv4).
 */
int rodp_helper_mc_group(struct net_device *dev, const u8 *gid, bool join)
{
	const struct in6_addr *a = (const struct in6_addr *)gid;

	if (ipv6_addr_v4mapped(a)) {
		struct in_device *in_dev;
		int err = -ENODEV;

		rtnl_lock();
		in_dev = __in_dev_get_rtnl(dev);
		if (in_dev) {
			if (join)
				ip_mc_inc_group(in_dev, a->s6_addr32[3]);
			else
				ip_mc_dec_group(in_dev, a->s6_addr32[3]);
			err = 0;
		}
		rtnl_unlock();
		return err;
	}
#if IS_ENABLED(CONFIG_IPV6)
	return join ? ipv6_dev_mc_inc(dev, a) : ipv6_dev_mc_dec(dev, a);
#else
	return -EAFNOSUPPORT;
#endif
}

/* The ifindex of the netdev a GID table entry belongs to (a VLAN device for its address); 0 when it has none. */
int rodp_helper_gid_attr_ifindex(const struct ib_gid_attr *attr)
{
	struct net_device *ndev;
	int ifindex = 0;

	rcu_read_lock();
	ndev = rdma_read_gid_attr_ndev_rcu(attr);
	if (!IS_ERR(ndev))
		ifindex = ndev->ifindex;
	rcu_read_unlock();
	return ifindex;
}

/* The route of a UDP flow from `saddr` to `daddr` out of `oif`: a dst or an ERR_PTR. */
struct dst_entry *rodp_helper_route4(struct net *net, int oif, const u8 *saddr, const u8 *daddr)
{
	struct flowi4 fl = {
		.flowi4_oif = oif,
		.flowi4_proto = IPPROTO_UDP,
	};
	struct rtable *rt;

	memcpy(&fl.saddr, saddr, 4);
	memcpy(&fl.daddr, daddr, 4);
	rt = ip_route_output_key(net, &fl);
	return IS_ERR(rt) ? ERR_CAST(rt) : &rt->dst;
}

struct dst_entry *rodp_helper_route6(struct net *net, int oif, const u8 *saddr, const u8 *daddr)
{
#if IS_ENABLED(CONFIG_IPV6)
	struct flowi6 fl6 = {
		.flowi6_oif = oif,
		.flowi6_proto = IPPROTO_UDP,
	};
	struct dst_entry *dst;
	int err;

	memcpy(&fl6.saddr, saddr, 16);
	memcpy(&fl6.daddr, daddr, 16);
	dst = ip6_dst_lookup_flow(net, NULL, &fl6, NULL);
	if (!IS_ERR(dst) && dst->error) {
		err = dst->error;
		dst_release(dst);
		return ERR_PTR(err);
	}
	return dst;
#else
	return ERR_PTR(-EAFNOSUPPORT);
#endif
}

long rodp_helper_ptr_err(const void *p)
{
	return IS_ERR(p) ? PTR_ERR(p) : 0;
}

void rodp_helper_dst_release(struct dst_entry *dst)
{
	dst_release(dst);
}

/* An skb with `len` zeroed bytes of data and room for `hdr_len` bytes of headers below them. */
struct sk_buff *rodp_helper_udp_skb_alloc(struct dst_entry *dst, unsigned int hdr_len,
					  unsigned int len)
{
	unsigned int head = hdr_len + LL_RESERVED_SPACE(dst->dev);
	struct sk_buff *skb = alloc_skb(head + len, GFP_ATOMIC);

	if (!skb)
		return NULL;
	skb_reserve(skb, head);
	skb_put_zero(skb, len);
	return skb;
}

u8 *rodp_helper_skb_data(struct sk_buff *skb)
{
	return skb->data;
}

/*
 * Pushes a UDP header and an IP header of `ip_len` bytes in front of the data, marks where
 * they start, and hands `dst` (and its reference) to the skb. Returns the IP header.
 */
u8 *rodp_helper_udp_skb_push(struct sk_buff *skb, struct dst_entry *dst, unsigned int ip_len,
			     bool ipv6)
{
	__skb_push(skb, sizeof(struct udphdr));
	skb_reset_transport_header(skb);
	__skb_push(skb, ip_len);
	skb_reset_network_header(skb);
	skb_dst_set(skb, dst);
	skb->dev = dst->dev;
	skb->protocol = htons(ipv6 ? ETH_P_IPV6 : ETH_P_IP);
	return skb->data;
}

/* Fills the IPv4 header's identification, as the stack does for its own packets. */
void rodp_helper_ip_select_ident(struct sk_buff *skb)
{
	__ip_select_ident(dev_net(skb_dst(skb)->dev), ip_hdr(skb), 1);
}

/* Sends a packet built above; the skb is consumed whatever the outcome. */
int rodp_helper_udp_local_out(struct sk_buff *skb, bool ipv6)
{
	struct net *net = dev_net(skb_dst(skb)->dev);

	if (ipv6)
		return ip6_local_out(net, NULL, skb);
	return ip_local_out(net, NULL, skb);
}

/* A kernel consumer's data path allocates without starting I/O (see rust/ib/wq.rs). */
unsigned int rodp_helper_memalloc_noio_save(void)
{
	return memalloc_noio_save();
}

void rodp_helper_memalloc_noio_restore(unsigned int flags)
{
	memalloc_noio_restore(flags);
}
