// SPDX-License-Identifier: GPL-2.0

//! rodp's driver-specific uverbs methods (`include/rodp-xmw-abi.h`; the tables are C, in
//! `rust/helpers/uapi.c`): the handlers the tables' trampolines call, each with the call's
//! attribute bundle. ib_core has checked the call before (driver ID, the method, the
//! attributes' lengths) and resolved each handle attribute in the caller's own uverbs file,
//! typed, and holds those objects for the call; the handlers read the attributes and hand the
//! driver its objects.

use super::{
    device::{Driver, XmwCaps},
    object::{Mr, Mw},
};
use crate::ib::bindings;
use core::{marker::PhantomData, mem::size_of};
use kernel::{
    error::{from_result, to_result},
    ffi::c_int,
    prelude::*,
};

/// The handlers of driver `T`.
pub(super) struct Uapi<T>(PhantomData<T>);

impl<T: Driver> Uapi<T> {
    /// What `rust/helpers/uapi.c` calls (it copies the table when the device is set up).
    pub(super) const OPS: bindings::rodp_uapi_ops = bindings::rodp_uapi_ops {
        query_xmw: Some(Self::query_xmw_cb),
        mr_grant: Some(Self::mr_grant_cb),
        mw_xinit: Some(Self::mw_xinit_cb),
    };

    /// `RODP_METHOD_DEVICE_QUERY_XMW`: copies [`Driver::xmw_caps`] out.
    ///
    /// # Safety
    ///
    /// ib_core passes the live bundle of a call of that method.
    unsafe extern "C" fn query_xmw_cb(attrs: *mut bindings::uverbs_attr_bundle) -> c_int {
        let c: XmwCaps = T::xmw_caps();
        let out = bindings::rodp_xmw_caps {
            flags: c.flags,
            max_mkey_list_sz: c.max_list,
            max_mkey_inline_list_sz: c.max_inline_list,
            max_mw_recursion_depth: c.max_depth,
            max_mw_stride_dimension: c.max_dims,
            reserved: 0,
            max_total: c.max_total,
        };
        // SAFETY: `attrs` is live for the call; uapi.c declares the attribute as the output
        // of a `struct rodp_xmw_caps`, and `uverbs_copy_to` copies at most the user's length.
        unsafe {
            bindings::uverbs_copy_to(
                attrs,
                bindings::rodp_xmw_query_attrs_RODP_ATTR_QUERY_XMW_CAPS as usize,
                (&raw const out).cast(),
                size_of::<bindings::rodp_xmw_caps>(),
            )
        }
    }

    /// `RODP_METHOD_MR_XMW_GRANT`: [`Driver::xmw_grant`] on the MR the handle names.
    ///
    /// # Safety
    ///
    /// ib_core passes the live bundle of a call of that method.
    unsafe extern "C" fn mr_grant_cb(attrs: *mut bindings::uverbs_attr_bundle) -> c_int {
        from_result(|| {
            let id = bindings::rodp_xmw_mr_grant_attrs_RODP_ATTR_MR_XMW_GRANT_HANDLE;
            // SAFETY: `attrs` is live; uapi.c declares the attribute a mandatory handle of
            // UVERBS_OBJECT_MR, which ib_core resolved in the caller's file on this device
            // and holds for the call. User MRs of this device are made by `reg_user_mr_cb`
            // (rodp offers no other kind to user space), so the driver data is set.
            let mr = unsafe {
                let raw = bindings::uverbs_attr_get_obj(attrs, id as u16);
                if raw.is_null() {
                    return Err(EINVAL);
                }
                Mr::<T>::from_raw(raw.cast())
            };
            T::xmw_grant(mr.data())?;
            Ok(0)
        })
    }

    /// `RODP_METHOD_MW_XINIT`: [`Driver::xmw_init`] on the window the handle names with the
    /// descriptor budget the call gives.
    ///
    /// # Safety
    ///
    /// ib_core passes the live bundle of a call of that method.
    unsafe extern "C" fn mw_xinit_cb(attrs: *mut bindings::uverbs_attr_bundle) -> c_int {
        from_result(|| {
            let handle = bindings::rodp_xmw_mw_xinit_attrs_RODP_ATTR_MW_XINIT_HANDLE;
            let max = bindings::rodp_xmw_mw_xinit_attrs_RODP_ATTR_MW_XINIT_MAX_DESCRIPTORS;
            let mut n = 0u32;
            // SAFETY: `attrs` is live; uapi.c declares `handle` a mandatory handle of
            // UVERBS_OBJECT_MW, resolved by ib_core in the caller's file on this device and
            // held for the call (windows are made by `alloc_mw_cb`, which sets the data), and
            // `max` a mandatory input of exactly a `__u32`, which is what is copied.
            let mw = unsafe {
                let raw = bindings::uverbs_attr_get_obj(attrs, handle as u16);
                if raw.is_null() {
                    return Err(EINVAL);
                }
                to_result(bindings::uverbs_copy_from(
                    (&raw mut n).cast(),
                    attrs,
                    max as usize,
                    size_of::<u32>(),
                ))?;
                Mw::<T>::from_raw(raw.cast())
            };
            T::xmw_init(mw.data(), n)?;
            Ok(0)
        })
    }
}
