// SPDX-License-Identifier: GPL-2.0

//! GIDs (`include/rdma/ib_cache.h`): reading a port's table and finding the device that owns
//! an address, which is how the local transport routes a packet to its destination device.

use super::device::{Device, Driver};
use crate::ib::bindings;
use kernel::{error::from_err_ptr, prelude::*};

impl<T: Driver> Device<T> {
    /// The GID at `index` of port 1.
    pub(crate) fn query_gid(&self, index: u32) -> Result<[u8; 16]> {
        // SAFETY: All-zero is a valid GID.
        let mut gid: bindings::ib_gid = unsafe { core::mem::zeroed() };
        // SAFETY: The device is live; `gid` is valid for writes.
        kernel::error::to_result(unsafe {
            bindings::rdma_query_gid(self.as_raw(), 1, index as i32, &mut gid)
        })?;
        // SAFETY: `ib_gid` is a union of plain bytes.
        Ok(unsafe { *gid.raw })
    }

    /// Whether the device's GID table holds `gid` (as a RoCEv2 or RoCEv1 entry).
    fn has_gid(&self, gid: &[u8; 16]) -> bool {
        [
            bindings::ib_gid_type_IB_GID_TYPE_ROCE_UDP_ENCAP,
            bindings::ib_gid_type_IB_GID_TYPE_IB,
        ]
        .into_iter()
        .any(|ty| {
            // SAFETY: The device is live; `gid` is 16 readable bytes, the layout of `ib_gid`.
            let attr = unsafe {
                bindings::rdma_find_gid(
                    self.as_raw(),
                    gid.as_ptr().cast(),
                    ty,
                    core::ptr::null_mut(),
                )
            };
            match from_err_ptr(attr.cast_mut()) {
                Ok(attr) => {
                    // SAFETY: `rdma_find_gid` returned a referenced entry.
                    unsafe { bindings::rdma_put_gid_attr(attr) };
                    true
                }
                Err(_) => false,
            }
        })
    }

    /// Calls `f` with the registered device of this driver whose GID table holds `gid`.
    ///
    /// The device cannot go away during the call; `f` should only take references it needs.
    pub(crate) fn with_gid_owner<R>(gid: &[u8; 16], f: impl FnOnce(&Self) -> R) -> Option<R> {
        let mut f = Some(f);
        Self::find_map(|dev| {
            if dev.has_gid(gid) {
                f.take().map(|f| f(dev))
            } else {
                None
            }
        })
    }

    /// The ifindex of the netdev this device's RoCE v2 GID `gid` belongs to (the VLAN device
    /// for an address of a VLAN on the device's netdev), if the device has that GID.
    pub(crate) fn gid_ifindex(&self, gid: &[u8; 16]) -> Option<i32> {
        // SAFETY: The device is live; `gid` is 16 readable bytes, the layout of `ib_gid`.
        let attr = unsafe {
            bindings::rdma_find_gid(
                self.as_raw(),
                gid.as_ptr().cast(),
                bindings::ib_gid_type_IB_GID_TYPE_ROCE_UDP_ENCAP,
                core::ptr::null_mut(),
            )
        };
        let attr = from_err_ptr(attr.cast_mut()).ok()?;
        // SAFETY: `rdma_find_gid` returned a referenced entry, released right after.
        let ifindex = unsafe {
            let i = bindings::gid_attr_ifindex(attr);
            bindings::rdma_put_gid_attr(attr);
            i
        };
        (ifindex > 0).then_some(ifindex)
    }

    /// Calls `f` with every registered device of this driver (under the same rules as
    /// [`Device::with_gid_owner`]).
    pub(crate) fn for_each(mut f: impl FnMut(&Self)) {
        Self::find_map(|dev| -> Option<()> {
            f(dev);
            None
        });
    }
}
