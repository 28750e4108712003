// SPDX-License-Identifier: GPL-2.0

//! The data-path ops of `struct ib_device_ops`: CQs, MRs, AHs, SRQs and QPs.
//!
//! Each trampoline turns ib_core's pointers into safe views, calls the [`Driver`], and writes
//! back what ib_core reads from the C object (`cqe`, `qp_num`, keys, capabilities). Destroy ops
//! ask the driver first, then revoke the object's [`Events`] and drop its data.

use super::{
    device::{Device, Driver},
    event::{Events, Target},
    object::{Ah, Cq, Mr, MrBox, Pd, Qp, Srq, UContext, WithEvents},
    udata::Udata,
    verbs::{Notify, QpAttr, QpInit, Route, SrqAttr},
};
use crate::bindings;
use core::ptr::NonNull;
use kernel::{error::from_result, prelude::*};

/// The user context of a uverbs call, or `EINVAL` for kernel callers (which rodp does not
/// serve: it is not a kernel verbs provider).
///
/// # Safety
///
/// `udata` is null or the valid udata of a uverbs call on a context of driver `T`.
unsafe fn user_ctx<'a, T: Driver>(udata: *mut bindings::ib_udata) -> Result<&'a UContext<T>> {
    // SAFETY: Per the safety requirements.
    unsafe { UContext::<T>::from_udata(udata) }.ok_or(EOPNOTSUPP)
}

impl<T: Driver> Device<T> {
    /// # Safety
    ///
    /// ib_core passes a zeroed CQ object of `size_ib_cq` bytes with `device` set.
    pub(super) unsafe extern "C" fn create_cq_cb(
        cq: *mut bindings::ib_cq,
        attr: *const bindings::ib_cq_init_attr,
        attrs: *mut bindings::uverbs_attr_bundle,
    ) -> c_int {
        from_result(|| {
            // SAFETY: `device` of a CQ being created is live and ours.
            let dev = unsafe { Device::<T>::from_raw((*cq).device) };
            // SAFETY: `attr` is valid for the call.
            let attr = unsafe { &*attr };
            if attr.flags != 0 {
                return Err(EOPNOTSUPP);
            }
            if attrs.is_null() {
                return Err(EOPNOTSUPP);
            }
            // SAFETY: A user CQ's bundle is valid for the call; its driver udata is embedded.
            let raw_udata = unsafe { bindings::bundle_udata(attrs) };
            // SAFETY: As above.
            let ctx = unsafe { user_ctx::<T>(raw_udata) }?;
            // SAFETY: As above.
            let mut udata = unsafe { Udata::from_raw(raw_udata) }.ok_or(EINVAL)?;
            // SAFETY: `cq` is live until `destroy_cq_cb` revokes the sink.
            let events = Events::new(Target::Cq(unsafe { NonNull::new_unchecked(cq) }))?;
            let (data, cqe) = T::create_cq(dev, ctx, attr.cqe, &events, &mut udata)?;
            // SAFETY: The object has room for a `Cq<T>` and nothing was written yet; `cqe` is
            // read by uverbs for the response.
            unsafe {
                (*cq).cqe = cqe as i32;
                Cq::<T>::init(cq, WithEvents { events, data });
            }
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// `cq` was set up by `create_cq_cb`; `udata` is the valid udata of the call.
    pub(super) unsafe extern "C" fn resize_cq_cb(
        cq: *mut bindings::ib_cq,
        cqe: c_uint,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: Per the safety requirements.
            let ctx = unsafe { user_ctx::<T>(udata) }?;
            // SAFETY: As above.
            let mut u = unsafe { Udata::from_raw(udata) }.ok_or(EINVAL)?;
            // SAFETY: Per the safety requirements.
            let obj = unsafe { Cq::<T>::from_raw(cq) };
            let n = T::resize_cq(&obj.data().data, ctx, cqe, &mut u)?;
            // SAFETY: ib_core reads `cqe` back for the response.
            unsafe { (*cq).cqe = n as i32 };
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// `cq` was set up by `create_cq_cb`.
    pub(super) unsafe extern "C" fn req_notify_cq_cb(
        cq: *mut bindings::ib_cq,
        flags: u32,
    ) -> c_int {
        from_result(|| {
            let (arm, report) = Notify::from_raw(flags)?;
            // SAFETY: Per the safety requirements.
            let obj = unsafe { Cq::<T>::from_raw(cq) };
            Ok(T::req_notify_cq(&obj.data().data, arm, report)?.into())
        })
    }

    /// # Safety
    ///
    /// `cq` was set up by `create_cq_cb`; after success it is not used again.
    pub(super) unsafe extern "C" fn destroy_cq_cb(
        cq: *mut bindings::ib_cq,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: Per the safety requirements.
            let obj = unsafe { Cq::<T>::from_raw(cq) };
            T::destroy_cq(&obj.data().data)?;
            obj.data().events.revoke();
            // SAFETY: Nothing uses the data after this.
            unsafe { Cq::<T>::drop_data(cq) };
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// ib_core passes a live PD of this driver from a uverbs call.
    pub(super) unsafe extern "C" fn reg_user_mr_cb(
        pd: *mut bindings::ib_pd,
        start: u64,
        length: u64,
        iova: u64,
        access: c_int,
        _dmah: *mut bindings::ib_dmah,
        udata: *mut bindings::ib_udata,
    ) -> *mut bindings::ib_mr {
        let r = (|| -> Result<*mut bindings::ib_mr> {
            // SAFETY: Per the safety requirements.
            unsafe { user_ctx::<T>(udata) }?;
            // SAFETY: Per the safety requirements; the PD's data was written by `alloc_pd_cb`.
            let pd = unsafe { Pd::<T>::from_raw(pd) };
            // SAFETY: The PD's device is live and ours.
            let dev = unsafe { Device::<T>::from_raw((*pd.as_raw()).device) };
            let (data, key) = T::reg_user_mr(dev, pd, start, length, iova, access as u32)?;
            let mr = MrBox::<T>::new(data)?;
            let raw = mr.as_raw();
            // SAFETY: A fresh MR; ib_core fills in the rest after this returns.
            unsafe {
                (*raw).lkey = key;
                (*raw).rkey = key;
                (*raw).iova = iova;
                (*raw).length = length;
            }
            Ok(mr.into_raw())
        })();
        match r {
            Ok(p) => p,
            Err(e) => e.to_ptr(),
        }
    }

    /// # Safety
    ///
    /// `mr` came from `reg_user_mr_cb`; after success it is not used again.
    pub(super) unsafe extern "C" fn dereg_mr_cb(
        mr: *mut bindings::ib_mr,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: Per the safety requirements.
            let obj = unsafe { Mr::<T>::from_raw(mr) };
            T::dereg_mr(obj.data())?;
            // SAFETY: The MR is ours again and nothing uses it after this.
            drop(unsafe { MrBox::<T>::from_raw(mr) });
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// ib_core passes a zeroed AH object with `device` and `pd` set, and valid attributes.
    pub(super) unsafe extern "C" fn create_ah_cb(
        ah: *mut bindings::ib_ah,
        init: *mut bindings::rdma_ah_init_attr,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: Per the safety requirements.
            let (dev, pd, route) = unsafe {
                (
                    Device::<T>::from_raw((*ah).device),
                    Pd::<T>::from_raw((*ah).pd),
                    Route::from_ah_attr(&*(*init).ah_attr),
                )
            };
            // SAFETY: `udata` is null or valid for the call.
            let mut u = unsafe { Udata::from_raw(udata) };
            let data = T::create_ah(dev, pd, &route, u.as_mut())?;
            // SAFETY: The object has room for an `Ah<T>` and nothing was written yet.
            unsafe { Ah::<T>::init(ah, data) };
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// `ah` was set up by `create_ah_cb` and is not used after this call.
    pub(super) unsafe extern "C" fn destroy_ah_cb(ah: *mut bindings::ib_ah, _flags: u32) -> c_int {
        // SAFETY: Per the safety requirements.
        let obj = unsafe { Ah::<T>::from_raw(ah) };
        T::destroy_ah(obj.data());
        // SAFETY: Nothing uses the data after this.
        unsafe { Ah::<T>::drop_data(ah) };
        0
    }

    /// # Safety
    ///
    /// ib_core passes a zeroed SRQ object with `device` and `pd` set, and valid attributes.
    pub(super) unsafe extern "C" fn create_srq_cb(
        srq: *mut bindings::ib_srq,
        init: *mut bindings::ib_srq_init_attr,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: Per the safety requirements.
            let ctx = unsafe { user_ctx::<T>(udata) }?;
            // SAFETY: As above.
            let mut u = unsafe { Udata::from_raw(udata) }.ok_or(EINVAL)?;
            // SAFETY: Per the safety requirements.
            let (dev, pd, init) = unsafe {
                (
                    Device::<T>::from_raw((*srq).device),
                    Pd::<T>::from_raw((*srq).pd),
                    &mut *init,
                )
            };
            if init.srq_type != bindings::ib_srq_type_IB_SRQT_BASIC {
                return Err(EOPNOTSUPP);
            }
            let mut attr = SrqAttr::from_raw(&init.attr);
            // SAFETY: `srq` is live until `destroy_srq_cb` revokes the sink.
            let events = Events::new(Target::Srq(unsafe { NonNull::new_unchecked(srq) }))?;
            let data = T::create_srq(dev, pd, ctx, &mut attr, &events, &mut u)?;
            attr.to_raw(&mut init.attr);
            // SAFETY: The object has room for an `Srq<T>` and nothing was written yet.
            unsafe { Srq::<T>::init(srq, WithEvents { events, data }) };
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// `srq` was set up by `create_srq_cb`; the other pointers are valid for the call.
    pub(super) unsafe extern "C" fn modify_srq_cb(
        srq: *mut bindings::ib_srq,
        attr: *mut bindings::ib_srq_attr,
        mask: u32,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: Per the safety requirements.
            let ctx = unsafe { user_ctx::<T>(udata) }?;
            // SAFETY: As above.
            let mut u = unsafe { Udata::from_raw(udata) }.ok_or(EINVAL)?;
            // SAFETY: Per the safety requirements.
            let (obj, attr) = unsafe { (Srq::<T>::from_raw(srq), SrqAttr::from_raw(&*attr)) };
            T::modify_srq(&obj.data().data, ctx, &attr, mask, &mut u)?;
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// `srq` was set up by `create_srq_cb`; `attr` is valid for writes.
    pub(super) unsafe extern "C" fn query_srq_cb(
        srq: *mut bindings::ib_srq,
        attr: *mut bindings::ib_srq_attr,
    ) -> c_int {
        // SAFETY: Per the safety requirements.
        let obj = unsafe { Srq::<T>::from_raw(srq) };
        // SAFETY: Per the safety requirements.
        T::query_srq(&obj.data().data).to_raw(unsafe { &mut *attr });
        0
    }

    /// # Safety
    ///
    /// `srq` was set up by `create_srq_cb`; after success it is not used again.
    pub(super) unsafe extern "C" fn destroy_srq_cb(
        srq: *mut bindings::ib_srq,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: Per the safety requirements.
            let obj = unsafe { Srq::<T>::from_raw(srq) };
            T::destroy_srq(&obj.data().data)?;
            obj.data().events.revoke();
            // SAFETY: Nothing uses the data after this.
            unsafe { Srq::<T>::drop_data(srq) };
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// ib_core passes a zeroed QP object with `device`, `pd`, CQs and SRQ set, and valid
    /// attributes.
    pub(super) unsafe extern "C" fn create_qp_cb(
        qp: *mut bindings::ib_qp,
        init: *mut bindings::ib_qp_init_attr,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: Per the safety requirements.
            let ctx = unsafe { user_ctx::<T>(udata) }?;
            // SAFETY: As above.
            let mut u = unsafe { Udata::from_raw(udata) }.ok_or(EINVAL)?;
            // SAFETY: Per the safety requirements.
            let init = unsafe { &mut *init };
            if init.send_cq.is_null() || init.recv_cq.is_null() {
                return Err(EINVAL);
            }
            if !init.xrcd.is_null() || !init.rwq_ind_tbl.is_null() {
                return Err(EOPNOTSUPP);
            }
            // SAFETY: Per the safety requirements; CQs and SRQs of this device were set up by
            // their create ops and are held by the QP under construction.
            let (dev, pd, scq, rcq, srq) = unsafe {
                (
                    Device::<T>::from_raw((*qp).device),
                    Pd::<T>::from_raw((*qp).pd),
                    Cq::<T>::from_raw(init.send_cq),
                    Cq::<T>::from_raw(init.recv_cq),
                    (!init.srq.is_null()).then(|| Srq::<T>::from_raw(init.srq)),
                )
            };
            let mut qi = QpInit::from_raw(init);
            // SAFETY: `qp` is live until `destroy_qp_cb` revokes the sink.
            let events = Events::new(Target::Qp(unsafe { NonNull::new_unchecked(qp) }))?;
            let (data, qpn) = T::create_qp(
                dev,
                pd,
                ctx,
                &mut qi,
                (&scq.data().data, &rcq.data().data),
                srq.map(|s| &s.data().data),
                &events,
                &mut u,
            )?;
            qi.to_raw(init);
            // SAFETY: The object has room for a `Qp<T>`; ib_core reads `qp_num`.
            unsafe {
                (*qp).qp_num = qpn;
                Qp::<T>::init(qp, WithEvents { events, data });
            }
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// `qp` was set up by `create_qp_cb`; `attr` is valid for the call.
    pub(super) unsafe extern "C" fn modify_qp_cb(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_attr,
        mask: c_int,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: Per the safety requirements.
            let (dev, obj, attr) = unsafe {
                (
                    Device::<T>::from_raw((*qp).device),
                    Qp::<T>::from_raw(qp),
                    QpAttr::from_raw(&*attr),
                )
            };
            T::modify_qp(dev, &obj.data().data, &attr, mask as u32)?;
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// `qp` was set up by `create_qp_cb`; the output structures are valid for writes.
    pub(super) unsafe extern "C" fn query_qp_cb(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_attr,
        _mask: c_int,
        init: *mut bindings::ib_qp_init_attr,
    ) -> c_int {
        // SAFETY: Per the safety requirements.
        let obj = unsafe { Qp::<T>::from_raw(qp) };
        let (a, i) = T::query_qp(&obj.data().data);
        // SAFETY: Per the safety requirements; uverbs zeroed both before the call. The linked
        // objects are those ib_core knows.
        unsafe {
            a.to_raw(&mut *attr);
            i.to_raw(&mut *init);
            (*init).send_cq = (*qp).send_cq;
            (*init).recv_cq = (*qp).recv_cq;
            (*init).srq = (*qp).srq;
        }
        0
    }

    /// # Safety
    ///
    /// `qp` was set up by `create_qp_cb`; after success it is not used again.
    pub(super) unsafe extern "C" fn destroy_qp_cb(
        qp: *mut bindings::ib_qp,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: Per the safety requirements.
            let obj = unsafe { Qp::<T>::from_raw(qp) };
            T::destroy_qp(&obj.data().data)?;
            obj.data().events.revoke();
            // SAFETY: Nothing uses the data after this.
            unsafe { Qp::<T>::drop_data(qp) };
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// `qp` was set up by `create_qp_cb`.
    pub(super) unsafe extern "C" fn post_send_cb(
        qp: *mut bindings::ib_qp,
        wr: *const bindings::ib_send_wr,
        bad: *mut *const bindings::ib_send_wr,
    ) -> c_int {
        // Only user QPs exist: their WRs are in the shared ring, and the command is a doorbell.
        if !wr.is_null() {
            if !bad.is_null() {
                // SAFETY: `bad` is valid for writes.
                unsafe { *bad = wr };
            }
            return EOPNOTSUPP.to_errno();
        }
        from_result(|| {
            // SAFETY: Per the safety requirements.
            let obj = unsafe { Qp::<T>::from_raw(qp) };
            T::post_send(&obj.data().data)?;
            Ok(0)
        })
    }
}
