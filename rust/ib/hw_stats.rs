// SPDX-License-Identifier: GPL-2.0

//! Hardware counters (`struct rdma_hw_stats`): what `rdma statistic show link` and the port's
//! `hw_counters/` directory in sysfs display; and the per-MR attributes of rdma netlink
//! (`fill_res_mr_entry`, `fill_stat_mr_entry`) behind `rdma resource show mr` and
//! `rdma statistic mr show`.

use super::{
    device::{Device, Driver},
    object::Mr,
};
use crate::ib::bindings;
use kernel::prelude::*;

/// The name of one counter, in a table the driver declares once.
#[repr(transparent)]
pub(crate) struct StatDesc(bindings::rdma_stat_desc);

// SAFETY: The descriptor only holds a pointer to a static string.
unsafe impl Sync for StatDesc {}

impl StatDesc {
    /// A counter called `name`.
    #[expect(
        clippy::disallowed_methods,
        reason = "a const fn: `CStrExt::as_char_ptr` is a trait method"
    )]
    pub(crate) const fn new(name: &'static CStr) -> Self {
        Self(bindings::rdma_stat_desc {
            name: name.as_ptr().cast(),
            flags: 0,
            priv_: core::ptr::null(),
        })
    }

    /// The name, a static C string.
    pub(super) fn name(&self) -> *const c_char {
        self.0.name
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

/// Names of the per-MR ODP counters, in the order of [`Driver::mr_odp_stats`] (mlx5's).
const MR_STATS: [&CStr; 5] = [
    c"page_faults",
    c"page_faults_handled",
    c"page_invalidations",
    c"page_invalidations_handled",
    c"page_prefetch",
];

/// A nested netlink attribute being filled; cancelled unless ended.
struct Nest {
    msg: *mut bindings::sk_buff,
    nest: *mut bindings::nlattr,
}

impl Nest {
    /// # Safety
    ///
    /// `msg` is a netlink message being built by nldev.
    unsafe fn start(msg: *mut bindings::sk_buff, attr: u32) -> Result<Self> {
        // SAFETY: Per the safety requirements.
        let nest = unsafe { bindings::nl_nest_start(msg, attr as c_int) };
        if nest.is_null() {
            return Err(EMSGSIZE);
        }
        Ok(Self { msg, nest })
    }

    /// Ends the nest with what was added.
    fn end(self) {
        // SAFETY: `nest` was started in `msg` and not ended or cancelled.
        unsafe { bindings::nl_nest_end(self.msg, self.nest) };
        core::mem::forget(self);
    }

    fn check(r: c_int) -> Result {
        if r != 0 {
            Err(EMSGSIZE)
        } else {
            Ok(())
        }
    }
}

impl Drop for Nest {
    fn drop(&mut self) {
        // SAFETY: As in `end`.
        unsafe { bindings::nl_nest_cancel(self.msg, self.nest) };
    }
}

impl<T: Driver> Device<T> {
    /// # Safety
    ///
    /// Called by nldev with a message being built and a live MR of this driver.
    pub(super) unsafe extern "C" fn fill_res_mr_entry_cb(
        msg: *mut bindings::sk_buff,
        mr: *mut bindings::ib_mr,
    ) -> c_int {
        kernel::error::from_result(|| {
            // SAFETY: Per the safety requirements.
            let data = unsafe { Mr::<T>::from_raw(mr) }.data();
            let odp = T::mr_odp_kind(data);
            let windows = T::mr_windows(data);
            if odp.is_none() && windows == 0 {
                return Ok(0);
            }
            // SAFETY: Per the safety requirements.
            let n = unsafe { Nest::start(msg, bindings::rdma_nldev_attr_RDMA_NLDEV_ATTR_DRIVER) }?;
            if let Some((kind, children)) = odp {
                // SAFETY: `msg` is being built; the strings are static.
                Nest::check(unsafe {
                    bindings::rdma_nl_put_driver_string(
                        msg,
                        c"odp".as_char_ptr(),
                        kind.as_char_ptr(),
                    )
                })?;
                if let Some(c) = children {
                    // SAFETY: As above.
                    Nest::check(unsafe {
                        bindings::rdma_nl_put_driver_u32(
                            msg,
                            c"odp_children".as_char_ptr(),
                            c as u32,
                        )
                    })?;
                }
            }
            if windows > 0 {
                // SAFETY: As above.
                Nest::check(unsafe {
                    bindings::rdma_nl_put_driver_u32(msg, c"windows".as_char_ptr(), windows)
                })?;
            }
            n.end();
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// As for `fill_res_mr_entry_cb`.
    pub(super) unsafe extern "C" fn fill_stat_mr_entry_cb(
        msg: *mut bindings::sk_buff,
        mr: *mut bindings::ib_mr,
    ) -> c_int {
        kernel::error::from_result(|| {
            // SAFETY: Per the safety requirements.
            let Some(values) = T::mr_odp_stats(unsafe { Mr::<T>::from_raw(mr) }.data()) else {
                return Ok(0);
            };
            // SAFETY: Per the safety requirements.
            let n = unsafe {
                Nest::start(
                    msg,
                    bindings::rdma_nldev_attr_RDMA_NLDEV_ATTR_STAT_HWCOUNTERS,
                )
            }?;
            for (name, v) in MR_STATS.iter().zip(values) {
                // SAFETY: `msg` is being built; the names are static.
                Nest::check(unsafe {
                    bindings::rdma_nl_stat_hwcounter_entry(msg, name.as_char_ptr(), v)
                })?;
            }
            n.end();
            Ok(0)
        })
    }
}
