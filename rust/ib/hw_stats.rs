// SPDX-License-Identifier: GPL-2.0

//! Hardware counters (`struct rdma_hw_stats`): what `rdma statistic show link` and the port's
//! `hw_counters/` directory in sysfs display.

use super::device::{Device, Driver};
use crate::bindings;
use kernel::prelude::*;

/// The name of one counter, in a table the driver declares once.
#[repr(transparent)]
pub(crate) struct StatDesc(bindings::rdma_stat_desc);

// SAFETY: The descriptor only holds a pointer to a static string.
unsafe impl Sync for StatDesc {}

impl StatDesc {
    /// A counter called `name`.
    pub(crate) const fn new(name: &'static CStr) -> Self {
        Self(bindings::rdma_stat_desc {
            name: name.as_ptr().cast(),
            flags: 0,
            priv_: core::ptr::null(),
        })
    }
}

impl<T: Driver> Device<T> {
    /// # Safety
    ///
    /// Called by ib_core for a live device of this driver.
    pub(super) unsafe extern "C" fn alloc_hw_port_stats_cb(
        _ib: *mut bindings::ib_device,
        _port: u32,
    ) -> *mut bindings::rdma_hw_stats {
        let descs = T::COUNTERS;
        // SAFETY: `descs` is a static table of `rdma_stat_desc`s (`repr(transparent)`); ib_core
        // copies nothing and keeps the pointer, which stays valid forever. Lifespan 0: values
        // are read fresh on every query.
        unsafe {
            bindings::rdma_alloc_hw_stats_struct(descs.as_ptr().cast(), descs.len() as i32, 0)
        }
    }

    /// # Safety
    ///
    /// Called by ib_core for a live device of this driver with a stats struct from
    /// `alloc_hw_port_stats_cb`.
    pub(super) unsafe extern "C" fn get_hw_stats_cb(
        ib: *mut bindings::ib_device,
        stats: *mut bindings::rdma_hw_stats,
        _port: u32,
        _index: c_int,
    ) -> c_int {
        // SAFETY: Per the safety requirements.
        let dev = unsafe { Device::<T>::from_raw(ib) };
        // SAFETY: The struct was allocated with `num_counters` values after it.
        let values = unsafe {
            let n = (*stats).num_counters as usize;
            (*stats).value.as_mut_slice(n)
        };
        T::counters(dev, values);
        values.len() as c_int
    }
}
