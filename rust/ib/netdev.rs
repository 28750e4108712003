// SPDX-License-Identifier: GPL-2.0

//! Network devices as ib_core sees them (`include/linux/netdevice.h`, `rdma/ib_addr.h`).

use crate::ib::bindings;
use kernel::{prelude::*, types::Opaque};

/// A network device the caller holds a reference on for the lifetime of the borrow.
///
/// # Invariants
///
/// The wrapped `net_device` is live and referenced for as long as `&NetDev` exists.
#[repr(transparent)]
pub(crate) struct NetDev(Opaque<bindings::net_device>);

impl NetDev {
    /// Borrows a `net_device` pointer.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a live `net_device` that stays referenced for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::net_device) -> &'a NetDev {
        // SAFETY: `NetDev` is a transparent wrapper; the caller guarantees validity for `'a`.
        unsafe { &*ptr.cast::<NetDev>() }
    }

    /// Returns the raw pointer.
    pub(crate) fn as_raw(&self) -> *mut bindings::net_device {
        self.0.get()
    }

    /// The interface name (`eth0`).
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: `name` is a NUL-terminated array inside the live `net_device` (type invariant).
        unsafe { CStr::from_char_ptr(bindings::netdev_name(self.as_raw())) }
    }

    /// The MTU in bytes.
    pub(crate) fn mtu(&self) -> u32 {
        // SAFETY: The device is live (type invariant).
        unsafe { bindings::netdev_mtu(self.as_raw()) }
    }

    /// Whether the interface is administratively up.
    pub(crate) fn is_up(&self) -> bool {
        // SAFETY: The device is live (type invariant).
        unsafe { bindings::netdev_is_up(self.as_raw()) }
    }

    /// Whether this is a VLAN device stacked on another one.
    pub(crate) fn is_vlan(&self) -> bool {
        // SAFETY: The device is live (type invariant).
        unsafe { bindings::is_vlan_dev(self.as_raw()) }
    }

    /// Whether ib_core would call a port on this netdev active (running with carrier).
    pub(crate) fn is_active(&self) -> bool {
        // SAFETY: The device is live (type invariant).
        unsafe {
            bindings::ib_get_curr_port_state(self.as_raw())
                == bindings::ib_port_state_IB_PORT_ACTIVE
        }
    }

    /// Joins (`join`) or leaves the IP multicast group of the multicast GID `gid` on this
    /// device: IPv4 for an IPv4-mapped GID, else IPv6. Memberships are counted per group, one
    /// join to one leave. Sleeps (takes RTNL for IPv4).
    pub(crate) fn mc_group(&self, gid: &[u8; 16], join: bool) -> Result {
        // SAFETY: The device is live (type invariant); `gid` is 16 readable bytes; the caller
        // may sleep (documented) and holds neither RTNL nor the device's multicast locks.
        kernel::error::to_result(unsafe { bindings::mc_group(self.as_raw(), gid.as_ptr(), join) })
    }

    /// The MAC address, if the device has an Ethernet-sized one.
    pub(crate) fn mac(&self) -> Option<[u8; 6]> {
        let mut mac = [0u8; 6];
        // SAFETY: The device is live (type invariant) and `mac` has room for `ETH_ALEN` bytes.
        unsafe { bindings::netdev_mac(self.as_raw(), mac.as_mut_ptr()) }.then_some(mac)
    }
}

/// A random locally administered unicast MAC address (`eth_random_addr`).
pub(crate) fn random_mac() -> [u8; 6] {
    let mut mac = [0u8; 6];
    // SAFETY: `mac` has room for `ETH_ALEN` bytes.
    unsafe { bindings::eth_random_addr(mac.as_mut_ptr()) };
    mac
}

/// An owned reference on a network device, dropped with `dev_put`.
///
/// # Invariants
///
/// `self.0` points to a `net_device` on which this object owns one reference.
pub(crate) struct NetDevRef(*mut bindings::net_device);

impl NetDevRef {
    /// Takes over a reference returned by a `*_get_*` function.
    ///
    /// # Safety
    ///
    /// `ptr` is null or points to a `net_device` whose reference the caller hands over.
    pub(crate) unsafe fn from_raw(ptr: *mut bindings::net_device) -> Option<Self> {
        // INVARIANT: Non-null pointers carry a reference, per the safety requirements.
        (!ptr.is_null()).then(|| Self(ptr))
    }
}

impl core::ops::Deref for NetDevRef {
    type Target = NetDev;

    fn deref(&self) -> &NetDev {
        // SAFETY: We own a reference on the device (type invariant).
        unsafe { NetDev::from_raw(self.0) }
    }
}

impl Drop for NetDevRef {
    fn drop(&mut self) {
        // SAFETY: We own one reference (type invariant) and give it back.
        unsafe { bindings::dev_put(self.0) };
    }
}

/// `IB_MTU_256`, the smallest IB MTU.
pub(crate) const IB_MTU_256: u32 = bindings::ib_mtu_IB_MTU_256;
/// `IB_MTU_1024`.
pub(crate) const IB_MTU_1024: u32 = bindings::ib_mtu_IB_MTU_1024;
/// `IB_MTU_4096`, the largest IB MTU.
pub(crate) const IB_MTU_4096: u32 = bindings::ib_mtu_IB_MTU_4096;

/// Bytes in an IB MTU enum value (256 << (mtu - 1)).
pub(crate) fn ib_mtu_bytes(mtu: u32) -> u32 {
    256 << (mtu.clamp(IB_MTU_256, IB_MTU_4096) - 1)
}

/// The IB MTU enum value (`IB_MTU_*`) for an Ethernet MTU, after RoCE headers
/// (`iboe_get_mtu`), and never below `IB_MTU_256`, the smallest IB MTU.
pub(crate) fn ib_mtu_for(eth_mtu: u32) -> u32 {
    // SAFETY: Pure computation.
    let mtu = unsafe { bindings::iboe_get_mtu(eth_mtu.try_into().unwrap_or(i32::MAX)) };
    mtu.max(bindings::ib_mtu_IB_MTU_256)
}

#[kunit_tests(rodp_netdev)]
mod tests {
    use super::*;

    #[test]
    fn ib_mtu_follows_ethernet_mtu() {
        assert_eq!(ib_mtu_for(1500), bindings::ib_mtu_IB_MTU_1024);
        assert_eq!(ib_mtu_for(9000), bindings::ib_mtu_IB_MTU_4096);
        assert_eq!(ib_mtu_for(2200), bindings::ib_mtu_IB_MTU_2048);
        assert_eq!(ib_mtu_for(u32::MAX), bindings::ib_mtu_IB_MTU_4096);
    }

    #[test]
    fn tiny_ethernet_mtu_still_gives_a_valid_ib_mtu() {
        assert_eq!(ib_mtu_for(68), bindings::ib_mtu_IB_MTU_256);
        assert_eq!(ib_mtu_for(0), bindings::ib_mtu_IB_MTU_256);
    }
}
