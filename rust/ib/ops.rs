// SPDX-License-Identifier: GPL-2.0

//! The data-path ops of `struct ib_device_ops`: CQs, MRs, AHs, SRQs and QPs.
//!
//! Each trampoline turns ib_core's pointers into safe views, calls the [`Driver`], and writes
//! back what ib_core reads from the C object (`cqe`, `qp_num`, keys, capabilities). Destroy ops
//! ask the driver first, then revoke the object's [`Events`] and drop its data. Argument checks
//! are the driver's: a trampoline fails only where a C value has no Rust form.

use super::{
    abi::SendWqe,
    device::{Device, Driver},
    event::{Events, Target},
    object::{Ah, Cq, Mr, MrBox, Mw, Pd, Qp, Srq, UContext, WithEvents},
    udata::Udata,
    verbs::{Advice, Notify, QpAttr, QpInit, RecvWr, Route, SendWr, SgList, SrqAttr, WcOut},
};
use crate::ib::bindings;
use core::ptr::NonNull;
use kernel::{container_of, error::from_result, prelude::*};

/// The caller of a verb: a user context with its udata, or neither for a kernel consumer.
///
/// # Safety
///
/// `udata` is null (a kernel caller) or the valid udata of a uverbs call on a context of driver
/// `T`, valid for `'a`.
unsafe fn caller<'a, T: Driver>(
    udata: *mut bindings::ib_udata,
) -> (Option<&'a UContext<T>>, Option<Udata<'a>>) {
    // SAFETY: Per the safety requirements.
    unsafe { (UContext::<T>::from_udata(udata), Udata::from_raw(udata)) }
}

/// A PD of this driver and its device.
///
/// # Safety
///
/// `pd` is a live PD set up by `alloc_pd_cb`, valid for `'a`.
unsafe fn pd_and_device<'a, T: Driver>(pd: *mut bindings::ib_pd) -> (&'a Device<T>, &'a Pd<T>) {
    // SAFETY: Per the safety requirements; the PD's data was written by `alloc_pd_cb`, and a
    // live PD's device is live and ours.
    unsafe {
        let pd = Pd::<T>::from_raw(pd);
        (Device::<T>::from_raw((*pd.as_raw()).device), pd)
    }
}

/// The scatter/gather list of a kernel work request.
///
/// # Safety
///
/// `list` points to `n` valid entries (when `n > 0`) that outlive `'a`.
unsafe fn sg_list<'a>(list: *const bindings::ib_sge, n: c_int) -> Result<SgList<'a>> {
    let n = usize::try_from(n).map_err(|_| EINVAL)?;
    if n == 0 {
        return Ok(SgList(&[]));
    }
    if list.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: Per the safety requirements.
    Ok(SgList(unsafe { core::slice::from_raw_parts(list, n) }))
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
            // Kernel consumers pass no bundle.
            let raw_udata = if attrs.is_null() {
                core::ptr::null_mut()
            } else {
                // SAFETY: A user CQ's bundle is valid for the call; its driver udata is
                // embedded.
                unsafe { bindings::bundle_udata(attrs) }
            };
            // SAFETY: As above.
            let (ctx, mut u) = unsafe { caller::<T>(raw_udata) };
            // SAFETY: `cq` is live until `destroy_cq_cb` revokes the sink.
            let events = Events::new(Target::Cq(unsafe { NonNull::new_unchecked(cq) }))?;
            let (data, cqe) = T::create_cq(dev, ctx, attr.cqe, attr.flags, &events, u.as_mut())?;
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
    /// `cq` was set up by `create_cq_cb`; `udata` is null or the valid udata of the call.
    pub(super) unsafe extern "C" fn resize_cq_cb(
        cq: *mut bindings::ib_cq,
        cqe: c_uint,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: Per the safety requirements.
            let (ctx, mut u) = unsafe { caller::<T>(udata) };
            // SAFETY: Per the safety requirements.
            let obj = unsafe { Cq::<T>::from_raw(cq) };
            let n = T::resize_cq(&obj.data().data, ctx, cqe, u.as_mut())?;
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
    /// ib_core passes a live PD of this driver; `udata` is null or the valid udata of the call.
    pub(super) unsafe extern "C" fn reg_user_mr_cb(
        pd: *mut bindings::ib_pd,
        start: u64,
        length: u64,
        iova: u64,
        access: c_int,
        _dmah: *mut bindings::ib_dmah,
        udata: *mut bindings::ib_udata,
    ) -> *mut bindings::ib_mr {
        // SAFETY: Per the safety requirements.
        let (dev, pd, ctx) = unsafe {
            let (dev, pd) = pd_and_device::<T>(pd);
            (dev, pd, UContext::<T>::from_udata(udata))
        };
        let r = T::reg_user_mr(dev, pd, ctx, start, length, iova, access as u32);
        Self::new_mr(r, iova, length)
    }

    /// Hands a new MR (driver data and key) to ib_core with its range, or the error.
    fn new_mr(r: Result<(T::Mr, u32)>, iova: u64, length: u64) -> *mut bindings::ib_mr {
        let r = r.and_then(|(data, key)| {
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
        });
        match r {
            Ok(p) => p,
            Err(e) => e.to_ptr(),
        }
    }

    /// # Safety
    ///
    /// ib_core passes a live kernel PD of this driver (`ib_alloc_mr`).
    pub(super) unsafe extern "C" fn alloc_mr_cb(
        pd: *mut bindings::ib_pd,
        mr_type: bindings::ib_mr_type,
        max_num_sg: u32,
    ) -> *mut bindings::ib_mr {
        // SAFETY: Per the safety requirements.
        let (dev, pd) = unsafe { pd_and_device::<T>(pd) };
        // Only MRs registered through the send queue, one page list each.
        let r = if mr_type == bindings::ib_mr_type_IB_MR_TYPE_MEM_REG {
            T::alloc_mr(dev, pd, max_num_sg)
        } else {
            Err(EINVAL)
        };
        // Nothing is mapped until `ib_map_mr_sg` and a REG_MR work request.
        Self::new_mr(r, 0, 0)
    }

    /// # Safety
    ///
    /// `mr` came from `alloc_mr_cb` (ib_core calls this only for MRs of this driver's device);
    /// `sg` holds `sg_nents` DMA-mapped entries and `sg_offset` is null or valid, as
    /// `ib_sg_to_pages` requires.
    pub(super) unsafe extern "C" fn map_mr_sg_cb(
        mr: *mut bindings::ib_mr,
        sg: *mut bindings::scatterlist,
        sg_nents: c_int,
        sg_offset: *mut c_uint,
    ) -> c_int {
        // SAFETY: Per the safety requirements; `ib_map_mr_sg` set `page_size` before the call.
        let (obj, page_size) = unsafe { (Mr::<T>::from_raw(mr), (*mr).page_size) };
        if let Err(e) = T::map_mr_start(obj.data(), page_size) {
            return e.to_errno();
        }
        // SAFETY: Per the safety requirements; `set_page_cb` takes this MR.
        unsafe { bindings::ib_sg_to_pages(mr, sg, sg_nents, sg_offset, Some(Self::set_page_cb)) }
    }

    /// `ib_sg_to_pages`'s callback: one more block of the MR's page list.
    ///
    /// # Safety
    ///
    /// `mr` is the MR `map_mr_sg_cb` passed to `ib_sg_to_pages`.
    unsafe extern "C" fn set_page_cb(mr: *mut bindings::ib_mr, addr: u64) -> c_int {
        // SAFETY: Per the safety requirements.
        let obj = unsafe { Mr::<T>::from_raw(mr) };
        match T::map_mr_page(obj.data(), addr) {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
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
    /// `mr` came from `reg_user_mr_cb` and ib_core holds it for writing; `pd` is a live PD of
    /// the same device; `udata` is null or the valid udata of the call.
    pub(super) unsafe extern "C" fn rereg_user_mr_cb(
        mr: *mut bindings::ib_mr,
        flags: c_int,
        start: u64,
        length: u64,
        iova: u64,
        access: c_int,
        pd: *mut bindings::ib_pd,
        udata: *mut bindings::ib_udata,
    ) -> *mut bindings::ib_mr {
        // SAFETY: Per the safety requirements.
        let (dev, pd, obj, ctx) = unsafe {
            let (dev, pd) = pd_and_device::<T>(pd);
            (
                dev,
                pd,
                Mr::<T>::from_raw(mr),
                UContext::<T>::from_udata(udata),
            )
        };
        let r = T::rereg_user_mr(
            dev,
            obj.data(),
            ctx,
            flags as u32,
            start,
            length,
            iova,
            access as u32,
            pd,
        );
        match r {
            Ok(key) => {
                // SAFETY: ib_core holds the MR for writing; it updates the PD, iova and length
                // of an MR changed in place itself.
                unsafe {
                    (*mr).lkey = key;
                    (*mr).rkey = key;
                }
                // Changed in place: ib_core keeps the same `ib_mr`.
                core::ptr::null_mut()
            }
            Err(e) => e.to_ptr(),
        }
    }

    /// # Safety
    ///
    /// ib_core passes a zeroed MW object with `device`, `pd` and `type` set; `udata` is null or
    /// the valid udata of the call.
    pub(super) unsafe extern "C" fn alloc_mw_cb(
        mw: *mut bindings::ib_mw,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: Per the safety requirements.
            let (dev, pd, kind, ctx) = unsafe {
                let (dev, pd) = pd_and_device::<T>((*mw).pd);
                (dev, pd, (*mw).type_, UContext::<T>::from_udata(udata))
            };
            let type2 = match kind {
                bindings::ib_mw_type_IB_MW_TYPE_1 => false,
                bindings::ib_mw_type_IB_MW_TYPE_2 => true,
                _ => return Err(EINVAL),
            };
            let (data, rkey) = T::alloc_mw(dev, pd, ctx, type2)?;
            // SAFETY: The object has room for an `Mw<T>` and nothing was written yet; ib_core
            // reports `rkey` to user space.
            unsafe {
                Mw::<T>::init(mw, data);
                (*mw).rkey = rkey;
            }
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// `mw` was set up by `alloc_mw_cb`; after success it is not used again.
    pub(super) unsafe extern "C" fn dealloc_mw_cb(mw: *mut bindings::ib_mw) -> c_int {
        from_result(|| {
            // SAFETY: Per the safety requirements.
            let obj = unsafe { Mw::<T>::from_raw(mw) };
            T::dealloc_mw(obj.data())?;
            // SAFETY: Nothing uses the data after this.
            unsafe { Mw::<T>::drop_data(mw) };
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
    /// ib_core passes a zeroed SRQ object with `device` and `pd` set, and valid attributes;
    /// `udata` is null or the valid udata of the call.
    pub(super) unsafe extern "C" fn create_srq_cb(
        srq: *mut bindings::ib_srq,
        init: *mut bindings::ib_srq_init_attr,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: Per the safety requirements.
            let (ctx, mut u) = unsafe { caller::<T>(udata) };
            // SAFETY: Per the safety requirements.
            let (dev, pd, init) = unsafe {
                (
                    Device::<T>::from_raw((*srq).device),
                    Pd::<T>::from_raw((*srq).pd),
                    &mut *init,
                )
            };
            let mut attr = SrqAttr::from_raw(&init.attr);
            // SAFETY: `srq` is live until `destroy_srq_cb` revokes the sink.
            let events = Events::new(Target::Srq(unsafe { NonNull::new_unchecked(srq) }))?;
            let data = T::create_srq(dev, pd, ctx, init.srq_type, &mut attr, &events, u.as_mut())?;
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
            let (ctx, mut u) = unsafe { caller::<T>(udata) };
            // SAFETY: Per the safety requirements.
            let (obj, attr) = unsafe { (Srq::<T>::from_raw(srq), SrqAttr::from_raw(&*attr)) };
            T::modify_srq(&obj.data().data, ctx, &attr, mask, u.as_mut())?;
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
        from_result(|| {
            // SAFETY: Per the safety requirements.
            let obj = unsafe { Srq::<T>::from_raw(srq) };
            // SAFETY: Per the safety requirements.
            T::query_srq(&obj.data().data)?.to_raw(unsafe { &mut *attr });
            Ok(0)
        })
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
            // SAFETY: Per the safety requirements (kernel consumers pass no udata).
            let (ctx, mut u) = unsafe { caller::<T>(udata) };
            // SAFETY: Per the safety requirements.
            let init = unsafe { &mut *init };
            // SAFETY: Per the safety requirements; CQs and SRQs of this device were set up by
            // their create ops and are held by the QP under construction.
            let (dev, pd, scq, rcq, srq) = unsafe {
                (
                    Device::<T>::from_raw((*qp).device),
                    Pd::<T>::from_raw((*qp).pd),
                    (!init.send_cq.is_null()).then(|| Cq::<T>::from_raw(init.send_cq)),
                    (!init.recv_cq.is_null()).then(|| Cq::<T>::from_raw(init.recv_cq)),
                    (!init.srq.is_null()).then(|| Srq::<T>::from_raw(init.srq)),
                )
            };
            let mut qi = QpInit::from_raw(init)?;
            // SAFETY: `qp` is live until `destroy_qp_cb` revokes the sink.
            let events = Events::new(Target::Qp(unsafe { NonNull::new_unchecked(qp) }))?;
            let (data, qpn) = T::create_qp(
                dev,
                pd,
                ctx,
                &mut qi,
                (scq.map(|c| &c.data().data), rcq.map(|c| &c.data().data)),
                srq.map(|s| &s.data().data),
                &events,
                u.as_mut(),
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
        from_result(|| {
            // SAFETY: Per the safety requirements.
            let obj = unsafe { Qp::<T>::from_raw(qp) };
            let (a, i) = T::query_qp(&obj.data().data)?;
            // SAFETY: Per the safety requirements; uverbs zeroed both before the call. The
            // linked objects are those ib_core knows.
            unsafe {
                a.to_raw(&mut *attr);
                i.to_raw(&mut *init);
                (*init).send_cq = (*qp).send_cq;
                (*init).recv_cq = (*qp).recv_cq;
                (*init).srq = (*qp).srq;
            }
            Ok(0)
        })
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
    /// `qp` was set up by `create_qp_cb`; `wr` is null (the doorbell of a user QP) or a valid
    /// list of kernel send WRs, and `bad` is null or valid for writes.
    pub(super) unsafe extern "C" fn post_send_cb(
        qp: *mut bindings::ib_qp,
        mut wr: *const bindings::ib_send_wr,
        bad: *mut *const bindings::ib_send_wr,
    ) -> c_int {
        // SAFETY: Per the safety requirements.
        let obj = unsafe { Qp::<T>::from_raw(qp) };
        let data = &obj.data().data;
        let mut ret = Ok(());
        while !wr.is_null() {
            // SAFETY: `wr` is a valid WR of the consumer's list (safety requirements); the
            // containers are what ib_verbs.h prescribes for each opcode and QP type.
            let r = unsafe { Self::send_wr(qp, wr) }.and_then(|w| T::post_send_wr(data, &w));
            if let Err(e) = r {
                if !bad.is_null() {
                    // SAFETY: `bad` is valid for writes.
                    unsafe { *bad = wr };
                }
                ret = Err(e);
                break;
            }
            // SAFETY: As above.
            wr = unsafe { (*wr).next };
        }
        // Ring the doorbell for what was queued, even when a later WR was refused.
        from_result(|| {
            let rung = T::post_send(data);
            ret?;
            rung?;
            Ok(0)
        })
    }

    /// Reads a kernel send WR and its `ib_rdma_wr` / `ib_atomic_wr` / `ib_ud_wr` container (for
    /// the opcodes and QP types that have one).
    ///
    /// # Safety
    ///
    /// `qp` was set up by `create_qp_cb`; `wr` is a valid WR embedded in the container its
    /// opcode and the QP type call for, valid for `'a`.
    unsafe fn send_wr<'a>(
        qp: *mut bindings::ib_qp,
        wr: *const bindings::ib_send_wr,
    ) -> Result<SendWr<'a, T::Ah>> {
        // SAFETY: Per the safety requirements.
        let (w, qp_type) = unsafe { (&*wr, (*qp).qp_type) };
        let opcode = w.opcode;
        let mut wqe = SendWqe {
            // SAFETY: Both union members are 64 bits; either is passed back as is.
            wr_id: unsafe { *w.__bindgen_anon_1.wr_id },
            opcode,
            send_flags: w.send_flags as u32,
            // SAFETY: Immediate data and invalidate key share 32 bits.
            imm_data: unsafe { *w.ex.imm_data },
            ..Default::default()
        };
        let mut ah = None;
        match opcode {
            bindings::ib_wr_opcode_IB_WR_RDMA_WRITE
            | bindings::ib_wr_opcode_IB_WR_RDMA_WRITE_WITH_IMM
            | bindings::ib_wr_opcode_IB_WR_RDMA_READ => {
                // SAFETY: RDMA WRs are embedded in an `ib_rdma_wr`.
                let r = unsafe { &*container_of!(wr, bindings::ib_rdma_wr, wr) };
                wqe.remote_addr = r.remote_addr;
                wqe.rkey = r.rkey;
            }
            bindings::ib_wr_opcode_IB_WR_ATOMIC_CMP_AND_SWP
            | bindings::ib_wr_opcode_IB_WR_ATOMIC_FETCH_AND_ADD => {
                // SAFETY: Atomic WRs are embedded in an `ib_atomic_wr`.
                let a = unsafe { &*container_of!(wr, bindings::ib_atomic_wr, wr) };
                wqe.remote_addr = a.remote_addr;
                wqe.rkey = a.rkey;
                wqe.compare_add = a.compare_add;
                wqe.swap = a.swap;
            }
            bindings::ib_wr_opcode_IB_WR_REG_MR => {
                // SAFETY: REG_MR WRs are embedded in an `ib_reg_wr`.
                let r = unsafe { &*container_of!(wr, bindings::ib_reg_wr, wr) };
                let m = r.mr;
                if m.is_null() {
                    return Err(EINVAL);
                }
                // SAFETY: The consumer's MR is live while its WR is posted; only its plain
                // fields are read, through the pointer (its consumer owns the struct), whoever's
                // MR it is.
                let f = unsafe { ((*m).device, (*m).type_, (*m).lkey, (*m).iova, (*m).length) };
                let (device, mr_type, lkey, iova, length) = f;
                // SAFETY: `qp` is live (safety requirements).
                let qp_device = unsafe { (*qp).device };
                // The key names the MR by its index, as rxe checks: the MR of the request.
                if device != qp_device
                    || mr_type != bindings::ib_mr_type_IB_MR_TYPE_MEM_REG
                    || lkey >> 8 != r.key >> 8
                {
                    return Err(EINVAL);
                }
                // Where an atomic's fields go (see `abi::SendWqe`): the MR is named by the
                // new key's index.
                wqe.rkey = r.key;
                wqe.remote_addr = iova;
                wqe.compare_add = length;
                wqe.swap = u64::from(r.access as u32);
            }
            bindings::ib_wr_opcode_IB_WR_SEND | bindings::ib_wr_opcode_IB_WR_SEND_WITH_IMM => {
                if qp_type == bindings::ib_qp_type_IB_QPT_UD
                    || qp_type == bindings::ib_qp_type_IB_QPT_GSI
                {
                    // SAFETY: Sends on datagram QPs are embedded in an `ib_ud_wr`.
                    let u = unsafe { &*container_of!(wr, bindings::ib_ud_wr, wr) };
                    wqe.remote_qpn = u.remote_qpn;
                    wqe.remote_qkey = u.remote_qkey;
                    // SAFETY: The consumer's AH, if any, was created on this device by
                    // `create_ah_cb` and lives while the WR is posted.
                    ah = (!u.ah.is_null()).then(|| unsafe { Ah::<T>::from_raw(u.ah) }.data());
                }
            }
            // Other opcodes carry no fields this conversion reads; the driver decides on them.
            _ => {}
        }
        Ok(SendWr {
            wqe,
            ah,
            // SAFETY: The WR's list is valid while the WR is (safety requirements).
            sges: unsafe { sg_list(w.sg_list, w.num_sge) }?,
        })
    }

    /// # Safety
    ///
    /// `qp` was set up by `create_qp_cb`; `wr` is a valid list of kernel receive WRs and `bad`
    /// is null or valid for writes.
    pub(super) unsafe extern "C" fn post_recv_cb(
        qp: *mut bindings::ib_qp,
        wr: *const bindings::ib_recv_wr,
        bad: *mut *const bindings::ib_recv_wr,
    ) -> c_int {
        // SAFETY: Per the safety requirements.
        let obj = unsafe { Qp::<T>::from_raw(qp) };
        let data = &obj.data().data;
        // SAFETY: Per the safety requirements.
        unsafe { post_recv_list(wr, bad, |r| T::post_recv_wr(data, r)) }
    }

    /// # Safety
    ///
    /// `srq` was set up by `create_srq_cb`; `wr` is a valid list of kernel receive WRs and
    /// `bad` is null or valid for writes.
    pub(super) unsafe extern "C" fn post_srq_recv_cb(
        srq: *mut bindings::ib_srq,
        wr: *const bindings::ib_recv_wr,
        bad: *mut *const bindings::ib_recv_wr,
    ) -> c_int {
        // SAFETY: Per the safety requirements.
        let obj = unsafe { Srq::<T>::from_raw(srq) };
        let data = &obj.data().data;
        // SAFETY: Per the safety requirements.
        unsafe { post_recv_list(wr, bad, |r| T::post_srq_recv_wr(data, r)) }
    }

    /// # Safety
    ///
    /// `cq` was set up by `create_cq_cb` for a kernel consumer; `wc` has room for `n` entries.
    pub(super) unsafe extern "C" fn poll_cq_cb(
        cq: *mut bindings::ib_cq,
        n: c_int,
        wc: *mut bindings::ib_wc,
    ) -> c_int {
        let Ok(n) = usize::try_from(n) else {
            return EINVAL.to_errno();
        };
        if n == 0 || wc.is_null() {
            return 0;
        }
        // SAFETY: Per the safety requirements.
        let obj = unsafe { Cq::<T>::from_raw(cq) };
        // SAFETY: Per the safety requirements the array has `n` writable entries.
        let mut out = WcOut(unsafe { core::slice::from_raw_parts_mut(wc, n) });
        T::poll_cq(&obj.data().data, &mut out) as c_int
    }

    /// # Safety
    ///
    /// ib_core passes a live PD of this driver and `num_sge` valid entries.
    pub(super) unsafe extern "C" fn advise_mr_cb(
        pd: *mut bindings::ib_pd,
        advice: bindings::ib_uverbs_advise_mr_advice,
        flags: u32,
        list: *mut bindings::ib_sge,
        num_sge: u32,
        _attrs: *mut bindings::uverbs_attr_bundle,
    ) -> c_int {
        from_result(|| {
            let advice = Advice::from_raw(advice)?;
            // SAFETY: Per the safety requirements.
            let sges = unsafe { sg_list(list, num_sge.try_into().map_err(|_| EINVAL)?) }?;
            // SAFETY: Per the safety requirements.
            let (dev, pd) = unsafe { pd_and_device::<T>(pd) };
            T::advise_mr(dev, pd, advice, flags, sges)?;
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// `qp` was set up by `create_qp_cb`; `gid` is valid for reads.
    pub(super) unsafe extern "C" fn attach_mcast_cb(
        qp: *mut bindings::ib_qp,
        gid: *mut bindings::ib_gid,
        _lid: u16,
    ) -> c_int {
        // SAFETY: Per the safety requirements.
        let (dev, obj, mgid) = unsafe { Self::mcast_args(qp, gid) };
        from_result(|| T::attach_mcast(dev, &obj.data().data, &mgid).map(|()| 0))
    }

    /// # Safety
    ///
    /// `qp` was set up by `create_qp_cb`; `gid` is valid for reads.
    pub(super) unsafe extern "C" fn detach_mcast_cb(
        qp: *mut bindings::ib_qp,
        gid: *mut bindings::ib_gid,
        _lid: u16,
    ) -> c_int {
        // SAFETY: Per the safety requirements.
        let (dev, obj, mgid) = unsafe { Self::mcast_args(qp, gid) };
        from_result(|| T::detach_mcast(dev, &obj.data().data, &mgid).map(|()| 0))
    }

    /// # Safety
    ///
    /// As for `attach_mcast_cb`.
    unsafe fn mcast_args<'a>(
        qp: *mut bindings::ib_qp,
        gid: *mut bindings::ib_gid,
    ) -> (&'a Device<T>, &'a Qp<T>, [u8; 16]) {
        // SAFETY: Per the safety requirements; a GID is 16 plain bytes.
        unsafe {
            (
                Device::<T>::from_raw((*qp).device),
                Qp::<T>::from_raw(qp),
                *(*gid).raw,
            )
        }
    }

    /// # Safety
    ///
    /// ib_core passes a live kernel PD of this driver (`ib_alloc_pd`).
    pub(super) unsafe extern "C" fn get_dma_mr_cb(
        pd: *mut bindings::ib_pd,
        access: c_int,
    ) -> *mut bindings::ib_mr {
        // SAFETY: Per the safety requirements.
        let (dev, pd) = unsafe { pd_and_device::<T>(pd) };
        Self::new_mr(T::get_dma_mr(dev, pd, access as u32), 0, u64::MAX)
    }
}

/// Posts a kernel consumer's list of receive WRs with `post`, in order, up to the first that
/// fails: that one goes to `bad` and its error is returned.
///
/// # Safety
///
/// `wr` is a valid list of kernel receive WRs and `bad` is null or valid for writes.
unsafe fn post_recv_list(
    mut wr: *const bindings::ib_recv_wr,
    bad: *mut *const bindings::ib_recv_wr,
    mut post: impl FnMut(&RecvWr<'_>) -> Result,
) -> c_int {
    while !wr.is_null() {
        // SAFETY: `wr` is a valid WR of the consumer's list.
        let w = unsafe { &*wr };
        // SAFETY: The consumer's WR points at `num_sge` valid entries while it is posted.
        let r = unsafe { sg_list(w.sg_list, w.num_sge) }.and_then(|sges| {
            post(&RecvWr {
                // SAFETY: Both members of the union (`wr_id`, `wr_cqe`) are 64 bits, passed
                // back as they are.
                wr_id: unsafe { *w.__bindgen_anon_1.wr_id },
                sges,
            })
        });
        if let Err(e) = r {
            if !bad.is_null() {
                // SAFETY: `bad` is valid for writes.
                unsafe { *bad = wr };
            }
            return e.to_errno();
        }
        wr = w.next;
    }
    0
}
