// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers for rodp's FFI layer (rust/ib/): static inlines and macros exported as functions.
 */
#include <linux/etherdevice.h>
#include <linux/if_vlan.h>
#include <linux/rculist.h>
#include <linux/vmalloc.h>
#include <net/addrconf.h>
#include <rdma/ib_addr.h>
#include <rdma/ib_verbs.h>
#include <rdma/uverbs_ioctl.h>
#include <rodp_helpers.h>

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

/* The node GUID: EUI-64 from the netdev's MAC, or random when it has none (as rxe does). */
void rodp_helper_netdev_eui48(const struct net_device *ndev, u8 *eui64)
{
	u8 mac[ETH_ALEN];

	if (ndev->addr_len >= ETH_ALEN)
		memcpy(mac, ndev->dev_addr, ETH_ALEN);
	else
		eth_random_addr(mac);
	addrconf_addr_eui48(eui64, mac);
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

/*
 * Whether a module of this name is loaded. module.c keeps find_module() private, so walk the
 * module list from our own entry under RCU, as find_module_all() does from the list head. The
 * head itself lives in vmlinux data, outside the module area, and is skipped by address:
 * every real entry is the `list` member of a struct module inside module memory.
 */
bool rodp_helper_module_loaded(const char *name)
{
	struct list_head *self = &THIS_MODULE->list, *p;
	bool found = false;

	rcu_read_lock();
	for (p = rcu_dereference(list_next_rcu(self)); p != self;
	     p = rcu_dereference(list_next_rcu(p))) {
		struct module *mod;

		if ((unsigned long)p < MODULES_VADDR || (unsigned long)p >= MODULES_END)
			continue;
		mod = container_of(p, struct module, list);
		if (mod->state != MODULE_STATE_UNFORMED && !strcmp(mod->name, name)) {
			found = true;
			break;
		}
	}
	rcu_read_unlock();
	return found;
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

void rodp_helper_mark_name_assigned_by_user(struct ib_device *ibdev)
{
	ib_mark_name_assigned_by_user(ibdev);
}

u64 rodp_helper_mmap_get_offset(const struct rdma_user_mmap_entry *entry)
{
	return rdma_user_mmap_get_offset(entry);
}
