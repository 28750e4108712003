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

/// The driver attributes of an object that `rdma -dd resource show` prints
/// (`RDMA_NLDEV_ATTR_DRIVER`), written through `rdma_nl_put_driver_*`.
pub(crate) struct DriverAttrs {
    msg: *mut bindings::sk_buff,
    /// Started with the first attribute, so an object with none adds no empty nest.
    nest: Option<Nest>,
}

impl DriverAttrs {
    fn nest(&mut self) -> Result<*mut bindings::sk_buff> {
        if self.nest.is_none() {
            // SAFETY: `msg` is a message nldev is building (see `fill_res_mr_entry_cb`).
            self.nest = Some(unsafe {
                Nest::start(self.msg, bindings::rdma_nldev_attr_RDMA_NLDEV_ATTR_DRIVER)
            }?);
        }
        Ok(self.msg)
    }

    /// Adds the string attribute `name` = `value`.
    pub(crate) fn string(&mut self, name: &'static CStr, value: &'static CStr) -> Result {
        let msg = self.nest()?;
        // SAFETY: `msg` is being built and its driver nest is open; the strings are static.
        Nest::check(unsafe {
            bindings::rdma_nl_put_driver_string(msg, name.as_char_ptr(), value.as_char_ptr())
        })
    }

    /// Adds the number attribute `name` = `value`.
    pub(crate) fn u32(&mut self, name: &'static CStr, value: u32) -> Result {
        let msg = self.nest()?;
        // SAFETY: As in `string`.
        Nest::check(unsafe { bindings::rdma_nl_put_driver_u32(msg, name.as_char_ptr(), value) })
    }
}

/// The counters of an MR that `rdma statistic mr show` prints
/// (`RDMA_NLDEV_ATTR_STAT_HWCOUNTERS`), written through `rdma_nl_stat_hwcounter_entry`.
pub(crate) struct MrCounters {
    msg: *mut bindings::sk_buff,
    /// Started with the first counter.
    nest: Option<Nest>,
}

impl MrCounters {
    /// Adds the counter `name` = `value`.
    pub(crate) fn counter(&mut self, name: &'static CStr, value: u64) -> Result {
        if self.nest.is_none() {
            // SAFETY: `msg` is a message nldev is building (see `fill_stat_mr_entry_cb`).
            self.nest = Some(unsafe {
                Nest::start(
                    self.msg,
                    bindings::rdma_nldev_attr_RDMA_NLDEV_ATTR_STAT_HWCOUNTERS,
                )
            }?);
        }
        // SAFETY: `msg` is being built and its counter nest is open; the name is static.
        Nest::check(unsafe {
            bindings::rdma_nl_stat_hwcounter_entry(self.msg, name.as_char_ptr(), value)
        })
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
            let mut attrs = DriverAttrs { msg, nest: None };
            T::fill_mr_attrs(data, &mut attrs)?;
            if let Some(n) = attrs.nest.take() {
                n.end();
            }
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
            let data = unsafe { Mr::<T>::from_raw(mr) }.data();
            let mut counters = MrCounters { msg, nest: None };
            T::fill_mr_counters(data, &mut counters)?;
            if let Some(n) = counters.nest.take() {
                n.end();
            }
            Ok(0)
        })
    }
}
