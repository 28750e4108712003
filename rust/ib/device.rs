// SPDX-License-Identifier: GPL-2.0

//! IB devices with Rust driver data (`struct ib_device`, `struct ib_device_ops`).
//!
//! ib_core allocates the device (`_ib_alloc_device`) with room for the driver's data after the
//! `ib_device`, and frees it after calling `dealloc_driver`, which drops that data in place.

use super::{
    event::Events,
    mmap,
    netdev::{NetDev, NetDevRef},
    object::{Ah, Cq, Mw, Pd, Qp, Srq, UContext},
    udata::Udata,
    verbs::{Advice, Notify, QpAttr, QpInit, RecvWr, Route, SendWr, SgList, SrqAttr, WcOut},
};
use crate::bindings;
use core::{mem::offset_of, ptr::addr_of_mut};
use kernel::{error::from_result, prelude::*, sync::Arc, types::Opaque, ThisModule};

/// The uverbs ABI version of the rxe provider (`RXE_UVERBS_ABI_VERSION` in rxe.h); rdma-core's
/// rxe provider binds only devices that report it.
const RXE_UVERBS_ABI_VERSION: u32 = 2;

/// Device attributes a driver reports from `query_device`; zero means "not supported".
#[derive(Default)]
pub(crate) struct DeviceAttr {
    /// `sys_image_guid`, in network byte order as the core expects.
    pub(crate) sys_image_guid_be: u64,
    /// Largest MR in bytes.
    pub(crate) max_mr_size: u64,
    /// Supported page sizes as a bit mask.
    pub(crate) page_size_cap: u64,
    /// IEEE OUI of the vendor.
    pub(crate) vendor_id: u32,
    /// Vendor part number.
    pub(crate) vendor_part_id: u32,
    /// Hardware version.
    pub(crate) hw_ver: u32,
    /// Maximum number of protection domains.
    pub(crate) max_pd: u32,
    /// Number of partition keys in the table.
    pub(crate) max_pkeys: u16,
    /// Whether `rdma link delete` may remove the device (`IBK_ALLOW_USER_UNREG`).
    pub(crate) allow_user_unreg: bool,
    /// `IB_DEVICE_*` capability flags.
    pub(crate) device_cap_flags: u64,
    /// Maximum number of QPs.
    pub(crate) max_qp: u32,
    /// Maximum depth of a send or receive queue.
    pub(crate) max_qp_wr: u32,
    /// Scatter/gather entries per send or receive WR.
    pub(crate) max_sge: u32,
    /// Scatter/gather entries per RDMA read WR.
    pub(crate) max_sge_rd: u32,
    /// Maximum number of CQs.
    pub(crate) max_cq: u32,
    /// Maximum CQ depth.
    pub(crate) max_cqe: u32,
    /// Maximum number of MRs.
    pub(crate) max_mr: u32,
    /// Maximum number of memory windows (0: none).
    pub(crate) max_mw: u32,
    /// Outstanding RDMA reads and atomics per QP as responder.
    pub(crate) max_qp_rd_atom: u32,
    /// Outstanding RDMA reads and atomics per QP as requester.
    pub(crate) max_qp_init_rd_atom: u32,
    /// Outstanding RDMA reads and atomics per device as responder.
    pub(crate) max_res_rd_atom: u32,
    /// Maximum number of SRQs.
    pub(crate) max_srq: u32,
    /// Maximum SRQ depth.
    pub(crate) max_srq_wr: u32,
    /// Scatter/gather entries per SRQ WR.
    pub(crate) max_srq_sge: u32,
    /// Maximum number of address handles.
    pub(crate) max_ah: u32,
    /// Whether atomics are atomic with respect to this device (`IB_ATOMIC_HCA`).
    pub(crate) atomic_hca: bool,
    /// Explicit ODP MRs for RC (send, receive, write, read, atomic, SRQ receive) and UD (send,
    /// receive, SRQ receive).
    pub(crate) odp: bool,
    /// Implicit ODP MRs (`reg_mr(NULL, SIZE_MAX)`), with `odp`.
    pub(crate) odp_implicit: bool,
    /// Multicast groups.
    pub(crate) max_mcast_grp: u32,
    /// QPs per multicast group.
    pub(crate) max_mcast_qp_attach: u32,
    /// Multicast attachments in all.
    pub(crate) max_total_mcast_qp_attach: u32,
}

/// Port attributes a driver reports from `query_port`.
pub(crate) struct PortAttr {
    /// Whether the port is active.
    pub(crate) active: bool,
    /// Physical state: true when the link is up, false when disabled.
    pub(crate) link_up: bool,
    /// Largest IB MTU (`IB_MTU_*` value).
    pub(crate) max_mtu: u32,
    /// Current IB MTU (`IB_MTU_*` value).
    pub(crate) active_mtu: u32,
    /// Ethernet MTU of the underlying netdev.
    pub(crate) phys_mtu: u32,
    /// Number of GID table entries.
    pub(crate) gid_tbl_len: i32,
    /// Largest message in bytes.
    pub(crate) max_msg_sz: u32,
    /// Number of P_Key table entries.
    pub(crate) pkey_tbl_len: u16,
}

/// The verbs a driver implements; each optional one is left NULL in the ops table when absent.
#[vtable]
pub(crate) trait Driver: Sized + Send + Sync + 'static {
    /// Per-process context data (`struct ib_ucontext`).
    type UContext: Send + Sync;
    /// Protection domain data (`struct ib_pd`).
    type Pd: Send + Sync;
    /// Completion queue data (`struct ib_cq`).
    type Cq: Send + Sync;
    /// Queue pair data (`struct ib_qp`).
    type Qp: Send + Sync;
    /// Shared receive queue data (`struct ib_srq`).
    type Srq: Send + Sync;
    /// Address handle data (`struct ib_ah`).
    type Ah: Send + Sync;
    /// Memory region data (`struct ib_mr`).
    type Mr: Send + Sync;
    /// Memory window data (`struct ib_mw`).
    type Mw: Send + Sync;

    /// Reports device attributes.
    fn query_device(dev: &Device<Self>) -> DeviceAttr;

    /// Reports attributes of port `port` (1-based, already range checked).
    fn query_port(dev: &Device<Self>, port: u32) -> Result<PortAttr>;

    /// Creates the data of a new user context.
    fn alloc_ucontext(dev: &Device<Self>) -> Result<Self::UContext>;

    /// Creates the data of a new protection domain.
    fn alloc_pd(dev: &Device<Self>, ctx: Option<&UContext<Self>>) -> Result<Self::Pd>;

    /// Creates a CQ of at least `cqe` entries, for user space (`ctx` and `udata`) or for a
    /// kernel consumer (neither); returns its data and the actual depth.
    fn create_cq(
        dev: &Device<Self>,
        ctx: Option<&UContext<Self>>,
        cqe: u32,
        events: &Arc<Events>,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<(Self::Cq, u32)>;

    /// Takes up to `out.len()` completions from a kernel CQ; returns how many were written.
    fn poll_cq(cq: &Self::Cq, out: &mut WcOut<'_>) -> usize;

    /// Resizes a user CQ to at least `cqe` entries; returns the actual depth.
    fn resize_cq(
        cq: &Self::Cq,
        ctx: &UContext<Self>,
        cqe: u32,
        udata: &mut Udata<'_>,
    ) -> Result<u32>;

    /// Arms a CQ; returns whether completions may have been missed (when asked to report).
    fn req_notify_cq(cq: &Self::Cq, arm: Notify, report_missed: bool) -> Result<bool>;

    /// Prepares a CQ for destruction; an error keeps it alive.
    fn destroy_cq(cq: &Self::Cq) -> Result;

    /// Registers user memory; returns the MR data and its key (lkey = rkey).
    fn reg_user_mr(
        dev: &Device<Self>,
        pd: &Pd<Self>,
        start: u64,
        length: u64,
        iova: u64,
        access: u32,
    ) -> Result<(Self::Mr, u32)>;

    /// Creates the DMA MR of a kernel PD: kernel memory by its virtual DMA address (see
    /// [`super::kmem`]); returns the MR data and its key.
    fn get_dma_mr(dev: &Device<Self>, pd: &Pd<Self>, access: u32) -> Result<(Self::Mr, u32)>;

    /// Prepares an MR for deregistration; an error keeps it registered.
    fn dereg_mr(mr: &Self::Mr) -> Result;

    /// Re-registers a user MR in place (`IB_MR_REREG_*` in `flags`; `pd` is the MR's PD when
    /// the flags do not change it); returns the key, which ib_core reports as lkey and rkey. On
    /// error the MR is unchanged.
    #[allow(clippy::too_many_arguments)]
    fn rereg_user_mr(
        dev: &Device<Self>,
        mr: &Self::Mr,
        flags: u32,
        start: u64,
        length: u64,
        iova: u64,
        access: u32,
        pd: &Pd<Self>,
    ) -> Result<u32>;

    /// Allocates a memory window of type 1 (`type2: false`) or 2B; returns its data and rkey.
    fn alloc_mw(dev: &Device<Self>, pd: &Pd<Self>, type2: bool) -> Result<(Self::Mw, u32)>;

    /// Prepares a memory window for deallocation; an error keeps it.
    fn dealloc_mw(mw: &Self::Mw) -> Result;

    /// Creates an address handle.
    fn create_ah(
        dev: &Device<Self>,
        pd: &Pd<Self>,
        route: &Route,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<Self::Ah>;

    /// Prepares an address handle for destruction.
    fn destroy_ah(ah: &Self::Ah);

    /// Creates a user SRQ; `attr` is updated to what was allocated.
    fn create_srq(
        dev: &Device<Self>,
        pd: &Pd<Self>,
        ctx: &UContext<Self>,
        attr: &mut SrqAttr,
        events: &Arc<Events>,
        udata: &mut Udata<'_>,
    ) -> Result<Self::Srq>;

    /// Resizes or arms an SRQ.
    fn modify_srq(
        srq: &Self::Srq,
        ctx: &UContext<Self>,
        attr: &SrqAttr,
        mask: u32,
        udata: &mut Udata<'_>,
    ) -> Result;

    /// Reports SRQ attributes.
    fn query_srq(srq: &Self::Srq) -> SrqAttr;

    /// Prepares an SRQ for destruction.
    fn destroy_srq(srq: &Self::Srq) -> Result;

    /// Creates a QP, for user space (`ctx` and `udata`) or a kernel consumer (neither);
    /// `init.cap` is updated to what was allocated. Returns the data and the QP number.
    fn create_qp(
        dev: &Device<Self>,
        pd: &Pd<Self>,
        ctx: Option<&UContext<Self>>,
        init: &mut QpInit,
        cqs: (&Self::Cq, &Self::Cq),
        srq: Option<&Self::Srq>,
        events: &Arc<Events>,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<(Self::Qp, u32)>;

    /// Modifies a QP.
    fn modify_qp(dev: &Device<Self>, qp: &Self::Qp, attr: &QpAttr, mask: u32) -> Result;

    /// Reports a QP's attributes.
    fn query_qp(qp: &Self::Qp) -> (QpAttr, QpInit);

    /// Prepares a QP for destruction: no completion or event follows it.
    fn destroy_qp(qp: &Self::Qp) -> Result;

    /// The send doorbell (`POST_SEND` with no WRs from user space; after a kernel consumer's
    /// list of WRs).
    fn post_send(qp: &Self::Qp) -> Result;

    /// Queues a kernel consumer's send WR; may be called in atomic context.
    fn post_send_wr(qp: &Self::Qp, wr: &SendWr<'_, Self::Ah>) -> Result;

    /// Queues a kernel consumer's receive WR; may be called in atomic context.
    fn post_recv_wr(qp: &Self::Qp, wr: &RecvWr<'_>) -> Result;

    /// Prefetches the ranges `sges` of ODP MRs of `pd` (`ibv_advise_mr`); `flush` asks to
    /// finish before returning.
    fn advise_mr(
        dev: &Device<Self>,
        pd: &Pd<Self>,
        advice: Advice,
        flush: bool,
        sges: SgList<'_>,
    ) -> Result;

    /// Attaches a UD QP to the multicast group `mgid`.
    fn attach_mcast(dev: &Device<Self>, qp: &Self::Qp, mgid: &[u8; 16]) -> Result;

    /// Detaches a QP from the multicast group `mgid`.
    fn detach_mcast(dev: &Device<Self>, qp: &Self::Qp, mgid: &[u8; 16]) -> Result;

    /// For `rdma resource show mr`: whether an MR is an explicit or implicit ODP MR, and an
    /// implicit MR's number of children; `None` for other MRs.
    fn mr_odp_kind(mr: &Self::Mr) -> Option<(&'static CStr, Option<usize>)>;

    /// For `rdma resource show mr`: the number of memory windows bound to an MR.
    fn mr_windows(mr: &Self::Mr) -> u32;

    /// For `rdma statistic mr show`: an ODP MR's `page_faults`, `page_faults_handled`,
    /// `page_invalidations`, `page_invalidations_handled` and `page_prefetch`.
    fn mr_odp_stats(mr: &Self::Mr) -> Option<[u64; 5]>;

    /// The device's ODP totals, in the order of `<ibdev>/odp_stats/` in sysfs:
    /// `num_page_faults`, `num_page_fault_pages`, `num_invalidations`,
    /// `num_invalidation_pages`, `num_prefetches_handled`, `invalidations_faults_contentions`.
    fn odp_stats(dev: &Device<Self>) -> [u64; 6];

    /// Names of the port's hardware counters.
    const COUNTERS: &'static [super::hw_stats::StatDesc];

    /// Current values of the counters, in `COUNTERS` order.
    fn counters(dev: &Device<Self>, out: &mut [u64]);
}

/// An IB device whose driver data is a `T`.
///
/// # Invariants
///
/// `ib` was allocated by `_ib_alloc_device` with room for `Self`; `data` is initialised from
/// the moment the ops table is installed until `dealloc_driver` drops it.
#[repr(C)]
#[pin_data]
pub(crate) struct Device<T: Driver> {
    #[pin]
    ib: Opaque<bindings::ib_device>,
    #[pin]
    data: T,
    /// Index in the list of rodp devices (for GID lookups), set before registration.
    list_id: u32,
}

// SAFETY: The C part is protected by ib_core's own locking; `T` is `Send + Sync`.
unsafe impl<T: Driver> Send for Device<T> {}
// SAFETY: As above.
unsafe impl<T: Driver> Sync for Device<T> {}

impl<T: Driver> core::ops::Deref for Device<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.data
    }
}

/// What a new device is called and bound to.
pub(crate) struct NewDevice<'a> {
    /// The `rdma link add` name.
    pub(crate) name: &'a CStr,
    /// The netdev of port 1.
    pub(crate) netdev: &'a NetDev,
    /// Node description shown by `ibv_devinfo`.
    pub(crate) node_desc: &'a CStr,
    /// The module that owns the device (pinned while user contexts are open).
    pub(crate) owner: &'static ThisModule,
}

impl<T: Driver> Device<T> {
    /// Allocates, initialises and registers a device; on return ib_core owns it.
    ///
    /// The device may be unregistered (and freed) by another thread as soon as this returns, so
    /// nothing is handed back.
    pub(crate) fn register(new: &NewDevice<'_>, init: impl PinInit<T, Error>) -> Result {
        // ib_core finds the driver's object at the address of its `ib_device`.
        const { assert!(offset_of!(Self, ib) == 0) };
        // SAFETY: FFI call; the size covers `Self`, whose first field is the `ib_device`.
        let ib = unsafe { bindings::ib_alloc_device(size_of::<Self>()) };
        if ib.is_null() {
            return Err(ENOMEM);
        }
        let this = ib.cast::<Self>();
        // SAFETY: `this` points to fresh, exclusively owned memory large enough for `Self`.
        if let Err(e) = unsafe { init.__init(addr_of_mut!((*this).data)) } {
            // SAFETY: No ops are installed yet, so this frees only ib_core's part.
            unsafe { bindings::ib_dealloc_device(ib) };
            return Err(e);
        }
        // SAFETY: `this` is exclusively ours; `data` is initialised, so the device may be listed
        // (it is delisted in `dealloc_driver_cb`, which every path below reaches).
        let ret = unsafe { bindings::devs_add(ib, addr_of_mut!((*this).list_id)) };
        if ret != 0 {
            // SAFETY: `data` is initialised and no ops are installed: drop it, then free.
            unsafe {
                core::ptr::drop_in_place(addr_of_mut!((*this).data));
                bindings::ib_dealloc_device(ib);
            }
            return Err(Error::from_errno(ret));
        }
        let mut ops = Self::OPS;
        ops.owner = new.owner.as_ptr();
        // SAFETY: FFI calls; the group is static, and the reader is valid for as long as
        // devices of this driver (and so their sysfs files) exist.
        unsafe {
            ops.device_group = bindings::odp_group();
            bindings::set_odp_reader(Some(Self::odp_stat_cb));
        }
        // SAFETY: `ib` is a valid, unregistered device that we own; `data` is initialised, so the
        // `dealloc_driver` op installed here may drop it. `ib_set_device_ops` copies `ops`.
        unsafe {
            (*ib).node_type = bindings::RDMA_NODE_IB_CA as _;
            (*ib).phys_port_cnt = 1;
            (*ib).num_comp_vectors = 1;
            (*ib).local_dma_lkey = 0;
            (*ib).node_guid = u64::from_ne_bytes(new.netdev.eui64());
            let desc = new.node_desc.to_bytes();
            let n = desc.len().min((*ib).node_desc.len() - 1);
            for (d, s) in (*ib).node_desc.iter_mut().zip(&desc[..n]) {
                *d = *s as _;
            }
            // Legacy write commands ib_core leaves off by default: the rxe provider rings its
            // send doorbell with POST_SEND and arms CQs with REQ_NOTIFY_CQ.
            (*ib).uverbs_cmd_mask |= 1
                << bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_SEND
                | 1 << bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_REQ_NOTIFY_CQ;
            bindings::mark_name_assigned_by_user(ib);
            bindings::ib_set_device_ops(ib, &ops);
        }
        // SAFETY: `ib` is valid and the netdev is referenced by the caller; the core takes its
        // own reference.
        let ret = unsafe { bindings::ib_device_set_netdev(ib, new.netdev.as_raw(), 1) };
        let ret = if ret == 0 {
            // SAFETY: `ib` is fully set up; NULL selects ib_core's virtual DMA.
            unsafe {
                bindings::ib_register_device(ib, new.name.as_char_ptr(), core::ptr::null_mut())
            }
        } else {
            ret
        };
        if ret != 0 {
            // SAFETY: After a failed registration the caller deallocates; this runs
            // `dealloc_driver`, which drops `data`.
            unsafe { bindings::ib_dealloc_device(ib) };
        }
        kernel::error::to_result(ret)
    }

    /// Returns the raw `ib_device`.
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_device {
        self.ib.get()
    }

    /// The netdev bound to `port`, referenced.
    pub(crate) fn netdev(&self, port: u32) -> Option<NetDevRef> {
        // SAFETY: The device is live; the returned pointer carries a reference or is null.
        unsafe { NetDevRef::from_raw(bindings::ib_device_get_netdev(self.as_raw(), port)) }
    }

    /// Returns the device for an `ib_device` that ib_core passed to a callback.
    ///
    /// # Safety
    ///
    /// `ib` must be a live device created by [`Device::register`] with driver `T`.
    pub(crate) unsafe fn from_raw<'a>(ib: *mut bindings::ib_device) -> &'a Self {
        // SAFETY: By the safety requirements and `offset_of` assertion, `ib` is a `Self`.
        unsafe { &*ib.cast::<Self>() }
    }

    /// The ops table; `owner` is filled in per device.
    const OPS: bindings::ib_device_ops = bindings::ib_device_ops {
        driver_id: bindings::rdma_driver_id_RDMA_DRIVER_RXE,
        uverbs_abi_ver: RXE_UVERBS_ABI_VERSION,
        query_device: Some(Self::query_device_cb),
        query_port: Some(Self::query_port_cb),
        query_pkey: Some(Self::query_pkey_cb),
        get_port_immutable: Some(Self::get_port_immutable_cb),
        get_link_layer: Some(Self::get_link_layer_cb),
        alloc_ucontext: Some(Self::alloc_ucontext_cb),
        dealloc_ucontext: Some(Self::dealloc_ucontext_cb),
        disassociate_ucontext: Some(Self::disassociate_ucontext_cb),
        alloc_pd: Some(Self::alloc_pd_cb),
        dealloc_pd: Some(Self::dealloc_pd_cb),
        mmap: Some(mmap::mmap_cb),
        mmap_free: Some(mmap::mmap_free_cb),
        dealloc_driver: Some(Self::dealloc_driver_cb),
        create_cq: Some(Self::create_cq_cb),
        resize_user_cq: Some(Self::resize_cq_cb),
        req_notify_cq: Some(Self::req_notify_cq_cb),
        destroy_cq: Some(Self::destroy_cq_cb),
        reg_user_mr: Some(Self::reg_user_mr_cb),
        dereg_mr: Some(Self::dereg_mr_cb),
        rereg_user_mr: Some(Self::rereg_user_mr_cb),
        alloc_mw: Some(Self::alloc_mw_cb),
        dealloc_mw: Some(Self::dealloc_mw_cb),
        create_ah: Some(Self::create_ah_cb),
        create_user_ah: Some(Self::create_ah_cb),
        destroy_ah: Some(Self::destroy_ah_cb),
        create_srq: Some(Self::create_srq_cb),
        modify_srq: Some(Self::modify_srq_cb),
        query_srq: Some(Self::query_srq_cb),
        destroy_srq: Some(Self::destroy_srq_cb),
        create_qp: Some(Self::create_qp_cb),
        modify_qp: Some(Self::modify_qp_cb),
        query_qp: Some(Self::query_qp_cb),
        destroy_qp: Some(Self::destroy_qp_cb),
        post_send: Some(Self::post_send_cb),
        post_recv: Some(Self::post_recv_cb),
        poll_cq: Some(Self::poll_cq_cb),
        get_dma_mr: Some(Self::get_dma_mr_cb),
        attach_mcast: Some(Self::attach_mcast_cb),
        advise_mr: Some(Self::advise_mr_cb),
        detach_mcast: Some(Self::detach_mcast_cb),
        alloc_hw_port_stats: Some(Self::alloc_hw_port_stats_cb),
        get_hw_stats: Some(Self::get_hw_stats_cb),
        fill_res_mr_entry: Some(Self::fill_res_mr_entry_cb),
        fill_stat_mr_entry: Some(Self::fill_stat_mr_entry_cb),
        size_ib_ucontext: size_of::<UContext<T>>(),
        size_ib_pd: size_of::<Pd<T>>(),
        size_ib_cq: size_of::<Cq<T>>(),
        size_ib_qp: size_of::<Qp<T>>(),
        size_ib_srq: size_of::<Srq<T>>(),
        size_ib_ah: size_of::<Ah<T>>(),
        size_ib_mw: size_of::<Mw<T>>(),
        // SAFETY: All-zero is a valid `ib_device_ops` (NULL ops, zero sizes); `pin_init::zeroed`
        // cannot be used because of its bitfields.
        ..unsafe { core::mem::zeroed() }
    };

    /// Reads ODP counter `idx` of a device for its `odp_stats` sysfs files.
    ///
    /// # Safety
    ///
    /// Called by the sysfs show functions of a registered device of this driver.
    unsafe extern "C" fn odp_stat_cb(ib: *mut bindings::ib_device, idx: c_uint) -> u64 {
        // SAFETY: Per the function's safety requirements.
        let dev = unsafe { Device::<T>::from_raw(ib) };
        T::odp_stats(dev).get(idx as usize).copied().unwrap_or(0)
    }

    /// # Safety
    ///
    /// ib_core passes a live device of this driver and a valid attribute buffer.
    unsafe extern "C" fn query_device_cb(
        ib: *mut bindings::ib_device,
        attr: *mut bindings::ib_device_attr,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: Per the function's safety requirements.
        let dev = unsafe { Device::<T>::from_raw(ib) };
        // SAFETY: `udata` is null or valid for the call.
        if !udata.is_null() && unsafe { (*udata).inlen != 0 || (*udata).outlen != 0 } {
            return EINVAL.to_errno();
        }
        let a = T::query_device(dev);
        // SAFETY: `attr` is valid for writes; ib_core zeroed it before the call.
        unsafe {
            (*attr).sys_image_guid = a.sys_image_guid_be;
            (*attr).max_mr_size = a.max_mr_size;
            (*attr).page_size_cap = a.page_size_cap;
            (*attr).vendor_id = a.vendor_id;
            (*attr).vendor_part_id = a.vendor_part_id;
            (*attr).hw_ver = a.hw_ver;
            (*attr).max_pd = a.max_pd;
            (*attr).max_pkeys = a.max_pkeys;
            (*attr).kernel_cap_flags = if a.allow_user_unreg {
                bindings::ib_kernel_cap_flags_IBK_ALLOW_USER_UNREG as u64
            } else {
                0
            };
            if a.odp {
                (*attr).kernel_cap_flags |=
                    bindings::ib_kernel_cap_flags_IBK_ON_DEMAND_PAGING as u64;
                let c = &mut (*attr).odp_caps;
                c.general_caps = bindings::ib_odp_general_cap_bits_IB_ODP_SUPPORT as u64;
                if a.odp_implicit {
                    c.general_caps |=
                        bindings::ib_odp_general_cap_bits_IB_ODP_SUPPORT_IMPLICIT as u64;
                }
                let (send, recv, write, read, atomic, srq) = (
                    bindings::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_SEND,
                    bindings::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_RECV,
                    bindings::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_WRITE,
                    bindings::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_READ,
                    bindings::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_ATOMIC,
                    bindings::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_SRQ_RECV,
                );
                c.per_transport_caps.rc_odp_caps = send | recv | write | read | atomic | srq;
                c.per_transport_caps.ud_odp_caps = send | recv | srq;
            }
            (*attr).device_cap_flags = a.device_cap_flags;
            (*attr).max_qp = a.max_qp as _;
            (*attr).max_qp_wr = a.max_qp_wr as _;
            (*attr).max_send_sge = a.max_sge as _;
            (*attr).max_recv_sge = a.max_sge as _;
            (*attr).max_sge_rd = a.max_sge_rd as _;
            (*attr).max_cq = a.max_cq as _;
            (*attr).max_cqe = a.max_cqe as _;
            (*attr).max_mr = a.max_mr as _;
            (*attr).max_mw = a.max_mw as _;
            (*attr).max_qp_rd_atom = a.max_qp_rd_atom as _;
            (*attr).max_qp_init_rd_atom = a.max_qp_init_rd_atom as _;
            (*attr).max_res_rd_atom = a.max_res_rd_atom as _;
            (*attr).max_srq = a.max_srq as _;
            (*attr).max_srq_wr = a.max_srq_wr as _;
            (*attr).max_srq_sge = a.max_srq_sge as _;
            (*attr).max_ah = a.max_ah as _;
            (*attr).max_mcast_grp = a.max_mcast_grp as _;
            (*attr).max_mcast_qp_attach = a.max_mcast_qp_attach as _;
            (*attr).max_total_mcast_qp_attach = a.max_total_mcast_qp_attach as _;
            (*attr).atomic_cap = if a.atomic_hca {
                bindings::ib_atomic_cap_IB_ATOMIC_HCA
            } else {
                bindings::ib_atomic_cap_IB_ATOMIC_NONE
            };
        }
        0
    }

    /// # Safety
    ///
    /// ib_core passes a live device of this driver and a valid attribute buffer.
    unsafe extern "C" fn query_port_cb(
        ib: *mut bindings::ib_device,
        port: u32,
        attr: *mut bindings::ib_port_attr,
    ) -> c_int {
        from_result(|| {
            if port != 1 {
                return Err(EINVAL);
            }
            // SAFETY: Per the function's safety requirements.
            let dev = unsafe { Device::<T>::from_raw(ib) };
            let a = T::query_port(dev, port)?;
            let mut speed = 0u16;
            let mut width = 0u8;
            // SAFETY: `ib` is live; the out-pointers are valid locals. On failure the core
            // leaves the SDR x1 defaults, which is what an unknown link speed should show.
            unsafe { bindings::ib_get_eth_speed(ib, port, &mut speed, &mut width) };
            // SAFETY: `attr` is valid for writes; ib_core zeroed it before the call.
            unsafe {
                (*attr).state = if a.active {
                    bindings::ib_port_state_IB_PORT_ACTIVE
                } else {
                    bindings::ib_port_state_IB_PORT_DOWN
                };
                (*attr).phys_state = if a.active || a.link_up {
                    bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_LINK_UP as u8
                } else {
                    bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_DISABLED as u8
                };
                (*attr).max_mtu = a.max_mtu;
                (*attr).active_mtu = a.active_mtu;
                (*attr).phys_mtu = a.phys_mtu;
                (*attr).gid_tbl_len = a.gid_tbl_len;
                (*attr).port_cap_flags = bindings::ib_port_capability_mask_bits_IB_PORT_CM_SUP;
                (*attr).max_msg_sz = a.max_msg_sz;
                (*attr).pkey_tbl_len = a.pkey_tbl_len;
                (*attr).max_vl_num = 1;
                (*attr).active_speed = speed;
                (*attr).active_width = width;
            }
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// ib_core passes a live device of this driver and a valid output pointer.
    unsafe extern "C" fn query_pkey_cb(
        _ib: *mut bindings::ib_device,
        port: u32,
        index: u16,
        pkey: *mut u16,
    ) -> c_int {
        // One entry: the default full-membership P_Key, as RoCE uses.
        if port != 1 || index != 0 {
            return EINVAL.to_errno();
        }
        // SAFETY: `pkey` is valid for writes.
        unsafe { *pkey = 0xffff };
        0
    }

    /// # Safety
    ///
    /// ib_core passes a live device of this driver and a valid output pointer.
    unsafe extern "C" fn get_port_immutable_cb(
        ib: *mut bindings::ib_device,
        port: u32,
        imm: *mut bindings::ib_port_immutable,
    ) -> c_int {
        from_result(|| {
            if port != 1 {
                return Err(EINVAL);
            }
            // SAFETY: Per the function's safety requirements.
            let dev = unsafe { Device::<T>::from_raw(ib) };
            let a = T::query_port(dev, port)?;
            // SAFETY: `imm` is valid for writes.
            unsafe {
                (*imm).core_cap_flags = bindings::RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
                (*imm).pkey_tbl_len = a.pkey_tbl_len.into();
                (*imm).gid_tbl_len = a.gid_tbl_len;
                (*imm).max_mad_size = bindings::IB_MGMT_MAD_SIZE as u32;
            }
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// Called by ib_core for a live device.
    unsafe extern "C" fn get_link_layer_cb(
        _ib: *mut bindings::ib_device,
        _port: u32,
    ) -> bindings::rdma_link_layer {
        bindings::rdma_link_layer_IB_LINK_LAYER_ETHERNET
    }

    /// # Safety
    ///
    /// ib_core passes a zeroed context object of `size_ib_ucontext` bytes.
    unsafe extern "C" fn alloc_ucontext_cb(
        uctx: *mut bindings::ib_ucontext,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: `device` of a context being created is live and ours.
            let dev = unsafe { Device::<T>::from_raw((*uctx).device) };
            let data = T::alloc_ucontext(dev)?;
            // SAFETY: The object has room for a `UContext<T>` and nothing was written yet.
            unsafe { UContext::<T>::init(uctx, data) };
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// `uctx` was set up by `alloc_ucontext_cb` and is not used after this call.
    unsafe extern "C" fn dealloc_ucontext_cb(uctx: *mut bindings::ib_ucontext) {
        // SAFETY: Per the function's safety requirements.
        unsafe { UContext::<T>::drop_data(uctx) };
    }

    /// # Safety
    ///
    /// Called by ib_core for a live context while the device goes away.
    unsafe extern "C" fn disassociate_ucontext_cb(_uctx: *mut bindings::ib_ucontext) {
        // The core zaps the context's mmaps itself and fails later calls; rodp keeps no
        // per-context hardware state to release early.
    }

    /// # Safety
    ///
    /// ib_core passes a zeroed PD object of `size_ib_pd` bytes whose `device` is set.
    unsafe extern "C" fn alloc_pd_cb(
        pd: *mut bindings::ib_pd,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: `device` of a PD being created is live and ours.
            let dev = unsafe { Device::<T>::from_raw((*pd).device) };
            // SAFETY: For user PDs `udata` is valid and names the owning context; its
            // `ib_ucontext` was created by `alloc_ucontext_cb`.
            let ctx = unsafe { UContext::<T>::from_udata(udata) };
            let data = T::alloc_pd(dev, ctx)?;
            // SAFETY: The object has room for a `Pd<T>` and nothing was written yet.
            unsafe { Pd::<T>::init(pd, data) };
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// `pd` was set up by `alloc_pd_cb` and is not used after this call.
    unsafe extern "C" fn dealloc_pd_cb(
        pd: *mut bindings::ib_pd,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: Per the function's safety requirements.
        unsafe { Pd::<T>::drop_data(pd) };
        0
    }

    /// # Safety
    ///
    /// Called once by ib_core (from `ib_dealloc_device`) after the last op; `ib` is ours.
    unsafe extern "C" fn dealloc_driver_cb(ib: *mut bindings::ib_device) {
        let this = ib.cast::<Self>();
        // SAFETY: `data` was initialised and the device listed before the ops were installed
        // (type invariant); after delisting, nothing reaches the data any more.
        unsafe {
            bindings::devs_del((*this).list_id);
            core::ptr::drop_in_place(addr_of_mut!((*this).data));
        }
    }
}

/// A registered device of the RXE driver id, referenced (`ib_device_get_by_netdev`).
///
/// # Invariants
///
/// `self.0` is a device on which this object owns one `ib_device_get` reference.
pub(crate) struct BoundDevice(*mut bindings::ib_device);

impl BoundDevice {
    /// The RXE-ABI device bound to `ndev`, if any: rodp's own or kernel rxe's.
    pub(crate) fn on(ndev: &NetDev) -> Option<Self> {
        // SAFETY: `ndev` is live; a non-null result carries a device reference.
        let ib = unsafe {
            bindings::ib_device_get_by_netdev(
                ndev.as_raw(),
                bindings::rdma_driver_id_RDMA_DRIVER_RXE,
            )
        };
        // INVARIANT: The reference is handed to the new object; a null pointer never makes one
        // (`then`, not `then_some`, which would build and drop a `Self(null)`).
        (!ib.is_null()).then(|| Self(ib))
    }

    /// Whether `owner` registered the device (rodp's devices carry rodp as owner).
    pub(crate) fn is_owned_by(&self, owner: &ThisModule) -> bool {
        // SAFETY: The device is referenced (type invariant); `ops` is fixed after registration.
        unsafe { (*self.0).ops.owner == owner.as_ptr() }
    }

    /// Starts unregistering the device on ib_core's workqueue; does not wait.
    pub(crate) fn unregister_queued(&self) {
        // SAFETY: The device is referenced and registered with a `dealloc_driver` op.
        unsafe { bindings::ib_unregister_device_queued(self.0) };
    }
}

impl Drop for BoundDevice {
    fn drop(&mut self) {
        // SAFETY: Gives back the reference owned per the type invariant.
        unsafe { bindings::ib_device_put(self.0) };
    }
}

/// Unregisters every device of the RXE driver id; waits until each is gone.
///
/// Only called at module exit, when no rxe module is loaded (so all such devices are ours).
pub(crate) fn unregister_all() {
    // SAFETY: FFI call; ib_core serialises against concurrent unregistration.
    unsafe { bindings::ib_unregister_driver(bindings::rdma_driver_id_RDMA_DRIVER_RXE) };
}
