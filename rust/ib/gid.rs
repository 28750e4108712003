// SPDX-License-Identifier: GPL-2.0

//! GIDs (`include/rdma/ib_cache.h`): reading a port's table and finding the device that owns
//! an address, which is how the local transport routes a packet to its destination device.

use super::device::{Device, Driver};
use crate::bindings;
use kernel::prelude::*;

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

    /// Calls `f` with the registered device of this driver whose GID table holds `gid`.
    ///
    /// The device cannot go away during the call; `f` should only take references it needs.
    pub(crate) fn with_gid_owner<R>(gid: &[u8; 16], f: impl FnOnce(&Self) -> R) -> Option<R> {
        // SAFETY: FFI call; released below.
        unsafe { bindings::devs_lock() };
        // SAFETY: The lock is held; `gid` is 16 readable bytes.
        let ib = unsafe { bindings::devs_find_gid_locked(gid.as_ptr()) };
        // SAFETY: Listed devices are ours and their data is live while the lock is held
        // (they leave the list in `dealloc_driver` before their data is dropped).
        let r = (!ib.is_null()).then(|| f(unsafe { Self::from_raw(ib) }));
        // SAFETY: Taken above.
        unsafe { bindings::devs_unlock() };
        r
    }

    /// Calls `f` with every registered device of this driver (under the same rules as
    /// [`Device::with_gid_owner`]).
    pub(crate) fn for_each(mut f: impl FnMut(&Self)) {
        let mut idx: c_ulong = 0;
        // SAFETY: FFI call; released below.
        unsafe { bindings::devs_lock() };
        loop {
            // SAFETY: The lock is held; `idx` is a valid cursor.
            let ib = unsafe { bindings::devs_next_locked(&mut idx) };
            if ib.is_null() {
                break;
            }
            // SAFETY: As in `with_gid_owner`.
            f(unsafe { Self::from_raw(ib) });
        }
        // SAFETY: Taken above.
        unsafe { bindings::devs_unlock() };
    }
}
