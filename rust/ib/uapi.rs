// SPDX-License-Identifier: GPL-2.0

//! rodp's driver-specific uverbs methods (`include/rodp-xmw-abi.h`; the tables are C, in
//! `rust/helpers/uapi.c`): the handlers the tables' trampolines call, each with the call's
//! attribute bundle. ib_core has checked the call before (driver ID, the method, the
//! attributes' lengths) and resolved each handle attribute in the caller's own uverbs file,
//! typed, and holds those objects for the call; the handlers read the attributes and hand the
//! driver its objects.

use super::{
    abi::{u32_at, u64_at},
    device::{Driver, XmwCaps},
    object::{Mr, Mw, Qp},
};
use crate::ib::bindings;
use core::{
    marker::PhantomData,
    mem::{offset_of, size_of},
};
use kernel::{
    alloc::KVVec,
    error::{from_result, to_result},
    ffi::c_int,
    prelude::*,
};

/// Layout kinds (`enum rodp_xmw_kind`).
pub(crate) mod kind {
    use crate::ib::bindings;
    pub(crate) const COMPOSITE: u32 = bindings::rodp_xmw_kind_RODP_XMW_KIND_COMPOSITE;
    pub(crate) const INTERLEAVED: u32 = bindings::rodp_xmw_kind_RODP_XMW_KIND_INTERLEAVED;
}

/// The layouts a device binds (`enum rodp_xmw_cap_flags`).
pub(crate) mod cap {
    use crate::ib::bindings;
    pub(crate) const COMPOSITE: u32 = bindings::rodp_xmw_cap_flags_RODP_XMW_COMPOSITE;
    pub(crate) const INTERLEAVED: u32 = bindings::rodp_xmw_cap_flags_RODP_XMW_INTERLEAVED;
    pub(crate) const REPETITION: u32 = bindings::rodp_xmw_cap_flags_RODP_XMW_INTERLEAVED_REPETITION;
    pub(crate) const NONUNIFORM_REPETITION: u32 =
        bindings::rodp_xmw_cap_flags_RODP_XMW_INTERLEAVED_NONUNIFORM_REPETITION;
    pub(crate) const NONUNIFORM_TOTAL: u32 =
        bindings::rodp_xmw_cap_flags_RODP_XMW_INTERLEAVED_NONUNIFORM_TOTAL_ITEMS;
}

/// Most dimensions of one entry the ABI carries.
pub(crate) const MAX_DIMS: usize = bindings::RODP_XMW_MAX_DIMS as usize;

/// A layout bind, or a type 2B window's stage (`struct rodp_xmw_bind`): the window's base
/// address, rights, layout kind (`enum rodp_xmw_kind`) and new key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct XBind {
    pub(crate) addr: u64,
    pub(crate) access: u32,
    pub(crate) kind: u32,
    pub(crate) rkey: u32,
}

/// One layout entry (`struct rodp_xmw_entry`), as the caller gave it: nothing checked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct XEntry {
    pub(crate) key: u32,
    pub(crate) ndims: u32,
    pub(crate) start: u64,
    pub(crate) len: u64,
    pub(crate) repeat: u64,
    /// `(stride, count)`, dimension 0 innermost.
    pub(crate) dims: [(u64, u64); MAX_DIMS],
}

impl XEntry {
    const SIZE: usize = size_of::<bindings::rodp_xmw_entry>();

    /// Parses one `struct rodp_xmw_entry` of `SIZE` bytes.
    fn parse(b: &[u8]) -> Self {
        type E = bindings::rodp_xmw_entry;
        type D = bindings::rodp_xmw_dim;
        let mut dims = [(0, 0); MAX_DIMS];
        for (i, d) in dims.iter_mut().enumerate() {
            let at = offset_of!(E, dims) + i * size_of::<D>();
            *d = (
                u64_at(b, at + offset_of!(D, stride)),
                u64_at(b, at + offset_of!(D, count)),
            );
        }
        Self {
            key: u32_at(b, offset_of!(E, key)),
            ndims: u32_at(b, offset_of!(E, ndims)),
            start: u64_at(b, offset_of!(E, start)),
            len: u64_at(b, offset_of!(E, len)),
            repeat: u64_at(b, offset_of!(E, repeat_count)),
            dims,
        }
    }
}

/// The handlers of driver `T`.
pub(super) struct Uapi<T>(PhantomData<T>);

impl<T: Driver> Uapi<T> {
    /// What `rust/helpers/uapi.c` calls (it copies the table when the device is set up).
    pub(super) const OPS: bindings::rodp_uapi_ops = bindings::rodp_uapi_ops {
        query_xmw: Some(Self::query_xmw_cb),
        mr_grant: Some(Self::mr_grant_cb),
        mw_xinit: Some(Self::mw_xinit_cb),
        mw_xbind: Some(Self::mw_xbind_cb),
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
            // ib_core resolved this mandatory UVERBS_OBJECT_MR handle (uapi.c) in the caller's
            // file on this device and holds it for the call; user MRs of this device all come
            // from `reg_user_mr_cb` (rodp offers no other kind), so the driver data is set.
            // SAFETY: `attrs` is live for the call, and the attribute is that handle.
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
            // uapi.c declares `handle` a mandatory UVERBS_OBJECT_MW handle, which ib_core
            // resolved in the caller's file on this device and holds for the call (windows
            // come from `alloc_mw_cb`, which sets the data), and `max` a mandatory `__u32`.
            // SAFETY: `attrs` is live for the call; exactly a `__u32` is copied into `n`.
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

    /// `RODP_METHOD_MW_XBIND`: [`Driver::xmw_bind`] of the window the handle names, through
    /// the QP the other handle names, with the call's arguments and entries; copies the
    /// layout's length out.
    ///
    /// # Safety
    ///
    /// ib_core passes the live bundle of a call of that method.
    unsafe extern "C" fn mw_xbind_cb(attrs: *mut bindings::uverbs_attr_bundle) -> c_int {
        from_result(|| {
            let a_mw = bindings::rodp_xmw_mw_xbind_attrs_RODP_ATTR_MW_XBIND_HANDLE as u16;
            let a_qp = bindings::rodp_xmw_mw_xbind_attrs_RODP_ATTR_MW_XBIND_QP as u16;
            let a_args = bindings::rodp_xmw_mw_xbind_attrs_RODP_ATTR_MW_XBIND_ARGS;
            let a_ents = bindings::rodp_xmw_mw_xbind_attrs_RODP_ATTR_MW_XBIND_ENTRIES;
            let a_resp = bindings::rodp_xmw_mw_xbind_attrs_RODP_ATTR_MW_XBIND_RESP;
            type B = bindings::rodp_xmw_bind;
            let mut args = [0u8; size_of::<B>()];
            // uapi.c declares the attribute a mandatory `struct rodp_xmw_bind`; ib_core
            // checked its length and that any bytes past the struct are zero, so a longer,
            // newer struct copies its known part.
            // SAFETY: `attrs` is live for the call; `args` has room for the struct.
            to_result(unsafe {
                bindings::uverbs_copy_from_or_zero(
                    args.as_mut_ptr().cast(),
                    attrs,
                    a_args as usize,
                    args.len(),
                )
            })?;
            if u32_at(&args, offset_of!(B, reserved)) != 0 {
                return Err(EINVAL);
            }
            let bind = XBind {
                addr: u64_at(&args, offset_of!(B, addr)),
                access: u32_at(&args, offset_of!(B, access)),
                kind: u32_at(&args, offset_of!(B, kind)),
                rkey: u32_at(&args, offset_of!(B, rkey)),
            };
            // SAFETY: `attrs` is live; the attribute is a mandatory input.
            let len = unsafe { bindings::uverbs_attr_get_len(attrs, a_ents as u16) };
            let len = usize::try_from(len).map_err(|_| EINVAL)?;
            // No more entries than a layout may have: the budget is checked again later.
            if len == 0
                || len % XEntry::SIZE != 0
                || len / XEntry::SIZE > T::xmw_caps().max_list as usize
            {
                return Err(EINVAL);
            }
            let mut raw = KVVec::from_elem(0u8, len, GFP_KERNEL_ACCOUNT | __GFP_NOWARN)?;
            // SAFETY: `attrs` is live; `raw` has room for the attribute's `len` bytes.
            to_result(unsafe {
                bindings::uverbs_copy_from(raw.as_mut_ptr().cast(), attrs, a_ents as usize, len)
            })?;
            let flags = GFP_KERNEL_ACCOUNT | __GFP_NOWARN;
            let mut entries = KVVec::with_capacity(len / XEntry::SIZE, flags)?;
            for c in raw.chunks_exact(XEntry::SIZE) {
                entries.push(XEntry::parse(c), flags)?;
            }
            // uapi.c declares mandatory UVERBS_OBJECT_MW and UVERBS_OBJECT_QP handles, which
            // ib_core resolved in the caller's file on this device and holds for the call;
            // windows come from `alloc_mw_cb` and QPs from `create_qp_cb`, which set the data.
            // SAFETY: `attrs` is live for the call, and the attributes are those handles.
            let (mw, qp) = unsafe {
                let mw = bindings::uverbs_attr_get_obj(attrs, a_mw);
                let qp = bindings::uverbs_attr_get_obj(attrs, a_qp);
                if mw.is_null() || qp.is_null() {
                    return Err(EINVAL);
                }
                (Mw::<T>::from_raw(mw.cast()), Qp::<T>::from_raw(qp.cast()))
            };
            // Bound from here: a failure to copy the length out (the caller's buffer) is still
            // reported, with the window bound under the new key.
            let total = T::xmw_bind(mw.data(), &qp.data().data, &bind, &entries)?;
            let resp = bindings::rodp_xmw_bind_resp { total };
            // SAFETY: `attrs` is live; the attribute is the output of a
            // `struct rodp_xmw_bind_resp`, and `uverbs_copy_to` copies at most the user's
            // length.
            to_result(unsafe {
                bindings::uverbs_copy_to(
                    attrs,
                    a_resp as usize,
                    (&raw const resp).cast(),
                    size_of::<bindings::rodp_xmw_bind_resp>(),
                )
            })?;
            Ok(0)
        })
    }
}
