// SPDX-License-Identifier: GPL-2.0

//! IB devices with Rust driver data (`struct ib_device`, `struct ib_device_ops`).
//!
//! ib_core allocates the device (`_ib_alloc_device`) with room for the driver's data after the
//! `ib_device`, and frees it after calling `dealloc_driver`, which drops that data in place.
//! Everything a device reports (driver id, ABI, capabilities, port attributes) comes from its
//! [`Driver`]; this file only carries it to ib_core.

use super::{
    event::Events,
    hw_stats::{DriverAttrs, MrCounters, StatDesc},
    mmap,
    netdev::{NetDev, NetDevRef},
    object::{Ah, Cq, Mw, Pd, Qp, Srq, UContext},
    uapi::{Uapi, XBind, XEntry},
    udata::Udata,
    verbs::{Advice, Notify, QpAttr, QpInit, RecvWr, Route, SendWr, SgList, SrqAttr, WcOut},
};
use crate::ib::bindings;
use core::{mem::offset_of, ptr::addr_of_mut};
use kernel::{
    error::{from_result, VTABLE_DEFAULT_ERROR},
    prelude::*,
    sync::{
        atomic::{Atomic, Full},
        Arc,
    },
    types::Opaque,
    ThisModule,
};

/// What a device binds of extended memory windows (`struct rodp_xmw_caps`,
/// `Documentation/xmw.rst`): the layout kinds (`RODP_XMW_*` flags) and the limits.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct XmwCaps {
    pub(crate) flags: u32,
    pub(crate) max_list: u32,
    pub(crate) max_inline_list: u32,
    pub(crate) max_depth: u32,
    pub(crate) max_dims: u32,
    pub(crate) max_total: u64,
}

/// The driver ids user space picks a provider by (`enum rdma_driver_id`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub(crate) enum DriverId {
    /// The soft-RoCE driver's (`RDMA_DRIVER_RXE`), which rdma-core's rxe provider binds.
    Rxe = bindings::rdma_driver_id_RDMA_DRIVER_RXE,
}

/// The link layer of a port (`enum rdma_link_layer`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub(crate) enum LinkLayer {
    /// Ethernet (RoCE).
    Ethernet = bindings::rdma_link_layer_IB_LINK_LAYER_ETHERNET,
}

/// Legacy uverbs write commands ib_core leaves off unless a driver asks
/// (`enum ib_uverbs_write_cmds`).
pub(crate) mod write_cmd {
    use crate::ib::bindings;

    /// `POST_SEND`.
    pub(crate) const POST_SEND: u32 = bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_SEND;
    /// `REQ_NOTIFY_CQ`.
    pub(crate) const REQ_NOTIFY_CQ: u32 =
        bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_REQ_NOTIFY_CQ;
}

/// Bits of `enum ib_kernel_cap_flags`.
pub(crate) mod kernel_cap {
    use crate::ib::bindings;

    /// `IB_ACCESS_ON_DEMAND` MRs (the core refuses them otherwise).
    pub(crate) const ON_DEMAND_PAGING: u64 =
        bindings::ib_kernel_cap_flags_IBK_ON_DEMAND_PAGING as u64;
    /// `rdma link delete` may remove the device.
    pub(crate) const ALLOW_USER_UNREG: u64 =
        bindings::ib_kernel_cap_flags_IBK_ALLOW_USER_UNREG as u64;
}

/// Bits of `enum ib_odp_general_cap_bits` and `enum ib_odp_transport_cap_bits`.
pub(crate) mod odp_cap {
    use crate::ib::bindings;

    /// Explicit ODP MRs.
    pub(crate) const SUPPORT: u64 = bindings::ib_odp_general_cap_bits_IB_ODP_SUPPORT as u64;
    /// Implicit ODP MRs (`reg_mr(NULL, SIZE_MAX)`).
    pub(crate) const SUPPORT_IMPLICIT: u64 =
        bindings::ib_odp_general_cap_bits_IB_ODP_SUPPORT_IMPLICIT as u64;
    /// Sends from ODP memory.
    pub(crate) const SEND: u32 = bindings::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_SEND;
    /// Receives into ODP memory.
    pub(crate) const RECV: u32 = bindings::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_RECV;
    /// RDMA writes targeting ODP memory.
    pub(crate) const WRITE: u32 = bindings::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_WRITE;
    /// RDMA reads of ODP memory.
    pub(crate) const READ: u32 = bindings::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_READ;
    /// Atomics on ODP memory.
    pub(crate) const ATOMIC: u32 = bindings::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_ATOMIC;
    /// SRQ receives into ODP memory.
    pub(crate) const SRQ_RECV: u32 = bindings::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_SRQ_RECV;
    /// FLUSH of ODP memory.
    pub(crate) const FLUSH: u32 = bindings::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_FLUSH;
    /// ATOMIC WRITE into ODP memory.
    pub(crate) const ATOMIC_WRITE: u32 =
        bindings::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_ATOMIC_WRITE;
}

/// Bits of `enum ib_port_capability_mask_bits`.
pub(crate) mod port_cap {
    use crate::ib::bindings;

    /// The port runs a communication manager.
    pub(crate) const CM_SUP: u32 = bindings::ib_port_capability_mask_bits_IB_PORT_CM_SUP;
}

/// Bits of a port's `core_cap_flags` (`RDMA_CORE_PORT_*`).
pub(crate) mod core_cap {
    use crate::ib::bindings;

    /// RoCEv1 and RoCEv2 (UDP encapsulation) on an Ethernet port.
    pub(crate) const IBA_ROCE_UDP_ENCAP: u32 = bindings::RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
}

/// The size of a management datagram (`IB_MGMT_MAD_SIZE`).
pub(crate) const MGMT_MAD_SIZE: u32 = bindings::IB_MGMT_MAD_SIZE;

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
    /// [`kernel_cap`] flags.
    pub(crate) kernel_cap_flags: u64,
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
    /// ODP capabilities ([`odp_cap`] `SUPPORT*`).
    pub(crate) odp_general_caps: u64,
    /// ODP operations on RC QPs ([`odp_cap`] transport bits).
    pub(crate) rc_odp_caps: u32,
    /// ODP operations on UD QPs ([`odp_cap`] transport bits).
    pub(crate) ud_odp_caps: u32,
    /// Pages in a fast registration's page list (0: no fast registration).
    pub(crate) max_fast_reg_page_list_len: u32,
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
    /// [`port_cap`] flags.
    pub(crate) port_cap_flags: u32,
    /// Largest message in bytes.
    pub(crate) max_msg_sz: u32,
    /// Number of P_Key table entries.
    pub(crate) pkey_tbl_len: u16,
    /// Number of virtual lanes.
    pub(crate) max_vl_num: u8,
    /// Link speed (`IB_SPEED_*`), e.g. from [`Device::eth_speed`].
    pub(crate) active_speed: u16,
    /// Link width (`IB_WIDTH_*`), e.g. from [`Device::eth_speed`].
    pub(crate) active_width: u8,
}

/// What ib_core caches of a port at registration (`struct ib_port_immutable`).
pub(crate) struct PortImmutable {
    /// [`core_cap`] flags: the port's protocols.
    pub(crate) core_cap_flags: u32,
    /// Number of P_Key table entries.
    pub(crate) pkey_tbl_len: u16,
    /// Number of GID table entries.
    pub(crate) gid_tbl_len: i32,
    /// Largest management datagram ([`MGMT_MAD_SIZE`]; 0 for none).
    pub(crate) max_mad_size: u32,
}

/// A directory of read-only counter files in each device's sysfs directory,
/// `<ibdev>/DIR/<name>`, read through [`Driver::sysfs_stat`].
pub(crate) struct SysfsStats {
    /// The directory's name.
    pub(crate) dir: &'static CStr,
    /// The files, one per counter.
    pub(crate) names: &'static [StatDesc],
}

/// The verbs a driver implements.
///
/// Methods with a default body are optional. An optional verb the driver does not implement
/// leaves its slot in `struct ib_device_ops` NULL and ib_core answers for it (`EOPNOTSUPP`, or
/// its own default such as the link layer of the node type), so the default body never runs.
/// ib_core calls a few C ops whenever their object exists: `dealloc_ucontext`, `dealloc_mw`,
/// `destroy_ah` and `destroy_srq` are installed with the verb that creates the object, and the
/// driver's hook in them ([`Driver::dealloc_mw`], [`Driver::destroy_ah`],
/// [`Driver::destroy_srq`]) is optional, by default doing nothing before the data is dropped.
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

    /// The driver id user space picks its provider by.
    const DRIVER_ID: DriverId;

    /// The uverbs ABI version the provider expects.
    const UVERBS_ABI_VER: u32;

    /// Legacy write commands ([`write_cmd`]) the provider issues besides ib_core's defaults.
    const WRITE_CMDS: &'static [u32] = &[];

    /// The names of the port's hardware counters, read through [`Driver::counters`].
    const COUNTERS: &'static [StatDesc] = &[];

    /// Counter files in each device's sysfs directory, read through [`Driver::sysfs_stat`].
    const SYSFS_STATS: Option<SysfsStats> = None;

    /// Reports device attributes; `udata` is the driver part of a user query.
    fn query_device(dev: &Device<Self>, udata: Option<&Udata<'_>>) -> Result<DeviceAttr>;

    /// What the device binds of extended memory windows (`RODP_METHOD_DEVICE_QUERY_XMW`,
    /// `include/rodp-xmw-abi.h`): nothing unless the driver says so.
    fn xmw_caps() -> XmwCaps {
        XmwCaps::default()
    }

    /// Grants non-contiguous binding of `mr` (`RODP_METHOD_MR_XMW_GRANT`; the MR is one of
    /// the caller's).
    fn xmw_grant(_mr: &Self::Mr) -> Result {
        Err(EOPNOTSUPP)
    }

    /// Gives window `mw` a budget of `max_descriptors` layout entries
    /// (`RODP_METHOD_MW_XINIT`; the window is one of the caller's).
    fn xmw_init(_mw: &Self::Mw, _max_descriptors: u32) -> Result {
        Err(EOPNOTSUPP)
    }

    /// Binds the layout `entries` to window `mw` through `qp`, or stages it for a type 2B
    /// window's bind work request (`RODP_METHOD_MW_XBIND`, both the caller's): returns the
    /// window's length.
    fn xmw_bind(_mw: &Self::Mw, _qp: &Self::Qp, _bind: &XBind, _entries: &[XEntry]) -> Result<u64> {
        Err(EOPNOTSUPP)
    }

    /// Reports attributes of port `port`.
    fn query_port(dev: &Device<Self>, port: u32) -> Result<PortAttr>;

    /// Reports what ib_core caches of port `port` at registration.
    fn get_port_immutable(dev: &Device<Self>, port: u32) -> Result<PortImmutable>;

    /// Reads entry `index` of port `port`'s P_Key table.
    fn query_pkey(_dev: &Device<Self>, _port: u32, _index: u16) -> Result<u16> {
        Err(EOPNOTSUPP)
    }

    /// The link layer of port `port`.
    fn get_link_layer(_dev: &Device<Self>, _port: u32) -> LinkLayer {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Creates the data of a new user context.
    fn alloc_ucontext(_dev: &Device<Self>) -> Result<Self::UContext> {
        Err(EOPNOTSUPP)
    }

    /// The device is going away while a user context is open: when implemented, ib_core lets
    /// the device go without waiting for user space to close the context (it zaps the
    /// context's mappings and fails its later calls); otherwise unregistration waits.
    fn disassociate_ucontext(_ctx: &UContext<Self>) {}

    /// Creates the data of a new protection domain.
    fn alloc_pd(dev: &Device<Self>, ctx: Option<&UContext<Self>>) -> Result<Self::Pd>;

    /// Creates a CQ of at least `cqe` entries with `flags` (`enum ib_uverbs_ex_create_cq_flags`),
    /// for user space (`ctx` and `udata`) or for a kernel consumer (neither); returns its data
    /// and the actual depth.
    fn create_cq(
        dev: &Device<Self>,
        ctx: Option<&UContext<Self>>,
        cqe: u32,
        flags: u32,
        events: &Arc<Events>,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<(Self::Cq, u32)>;

    /// Takes up to `out.len()` completions from a kernel CQ; returns how many were written.
    fn poll_cq(cq: &Self::Cq, out: &mut WcOut<'_>) -> usize;

    /// Resizes a CQ to at least `cqe` entries, for user space (`ctx` and `udata`) or a kernel
    /// consumer (neither); returns the actual depth.
    fn resize_cq(
        _cq: &Self::Cq,
        _ctx: Option<&UContext<Self>>,
        _cqe: u32,
        _udata: Option<&mut Udata<'_>>,
    ) -> Result<u32> {
        Err(EOPNOTSUPP)
    }

    /// Arms a CQ; returns whether completions may have been missed (when asked to report).
    fn req_notify_cq(cq: &Self::Cq, arm: Notify, report_missed: bool) -> Result<bool>;

    /// Prepares a CQ for destruction; an error keeps it alive.
    fn destroy_cq(cq: &Self::Cq) -> Result;

    /// Registers memory of the calling process (`ctx`; `None` for a kernel caller); returns the
    /// MR data and its key (lkey = rkey).
    fn reg_user_mr(
        dev: &Device<Self>,
        pd: &Pd<Self>,
        ctx: Option<&UContext<Self>>,
        start: u64,
        length: u64,
        iova: u64,
        access: u32,
    ) -> Result<(Self::Mr, u32)>;

    /// Creates the DMA MR of a kernel PD: kernel memory by its virtual DMA address (see
    /// [`super::kmem`]); returns the MR data and its key.
    fn get_dma_mr(dev: &Device<Self>, pd: &Pd<Self>, access: u32) -> Result<(Self::Mr, u32)>;

    /// Allocates an MR of a kernel PD for fast registration (`ib_alloc_mr`,
    /// `IB_MR_TYPE_MEM_REG`) with room for `max_pages` blocks; returns its data and key. It
    /// reaches nothing until an `IB_WR_REG_MR` work request registers the page list
    /// `ib_map_mr_sg` gave it.
    fn alloc_mr(_dev: &Device<Self>, _pd: &Pd<Self>, _max_pages: u32) -> Result<(Self::Mr, u32)> {
        Err(EOPNOTSUPP)
    }

    /// Starts the page list of an MR of [`Driver::alloc_mr`] afresh, in blocks of `page_size`
    /// bytes (`ib_map_mr_sg`); [`Driver::map_mr_page`] adds the blocks.
    fn map_mr_start(_mr: &Self::Mr, _page_size: u32) -> Result {
        Err(EOPNOTSUPP)
    }

    /// Adds the block at DMA address `addr` to the page list (`ENOMEM` when it is full).
    fn map_mr_page(_mr: &Self::Mr, _addr: u64) -> Result {
        Err(EOPNOTSUPP)
    }

    /// Prepares an MR for deregistration; an error keeps it registered.
    fn dereg_mr(mr: &Self::Mr) -> Result;

    /// Re-registers an MR in place (`IB_MR_REREG_*` in `flags`; `pd` is the MR's PD when the
    /// flags do not change it) for the calling process (`ctx`; `None` for a kernel caller);
    /// returns the key, which ib_core reports as lkey and rkey. On error the MR is unchanged.
    #[expect(clippy::too_many_arguments)]
    fn rereg_user_mr(
        _dev: &Device<Self>,
        _mr: &Self::Mr,
        _ctx: Option<&UContext<Self>>,
        _flags: u32,
        _start: u64,
        _length: u64,
        _iova: u64,
        _access: u32,
        _pd: &Pd<Self>,
    ) -> Result<u32> {
        Err(EOPNOTSUPP)
    }

    /// Allocates a memory window of type 1 (`type2: false`) or 2B for the calling process
    /// (`ctx`; `None` for a kernel caller); returns its data and rkey.
    fn alloc_mw(
        _dev: &Device<Self>,
        _pd: &Pd<Self>,
        _ctx: Option<&UContext<Self>>,
        _type2: bool,
    ) -> Result<(Self::Mw, u32)> {
        Err(EOPNOTSUPP)
    }

    /// Prepares a memory window for deallocation; an error keeps it. Its data is dropped
    /// after this.
    fn dealloc_mw(_mw: &Self::Mw) -> Result {
        Ok(())
    }

    /// Creates an address handle.
    fn create_ah(
        _dev: &Device<Self>,
        _pd: &Pd<Self>,
        _route: &Route,
        _udata: Option<&mut Udata<'_>>,
    ) -> Result<Self::Ah> {
        Err(EOPNOTSUPP)
    }

    /// Prepares an address handle for destruction; its data is dropped after this.
    fn destroy_ah(_ah: &Self::Ah) {}

    /// Creates an SRQ of type `srq_type` (`enum ib_srq_type`) for user space (`ctx` and
    /// `udata`) or a kernel consumer (neither); `attr` is updated to what was allocated.
    fn create_srq(
        _dev: &Device<Self>,
        _pd: &Pd<Self>,
        _ctx: Option<&UContext<Self>>,
        _srq_type: u32,
        _attr: &mut SrqAttr,
        _events: &Arc<Events>,
        _udata: Option<&mut Udata<'_>>,
    ) -> Result<Self::Srq> {
        Err(EOPNOTSUPP)
    }

    /// Resizes or arms an SRQ.
    fn modify_srq(
        _srq: &Self::Srq,
        _ctx: Option<&UContext<Self>>,
        _attr: &SrqAttr,
        _mask: u32,
        _udata: Option<&mut Udata<'_>>,
    ) -> Result {
        Err(EOPNOTSUPP)
    }

    /// Reports SRQ attributes.
    fn query_srq(_srq: &Self::Srq) -> Result<SrqAttr> {
        Err(EOPNOTSUPP)
    }

    /// Prepares an SRQ for destruction; an error keeps it. Its data is dropped after this.
    fn destroy_srq(_srq: &Self::Srq) -> Result {
        Ok(())
    }

    /// Creates a QP, for user space (`ctx` and `udata`) or a kernel consumer (neither);
    /// `init.cap` is updated to what was allocated. `cqs` are the send and receive CQs (ib_core
    /// passes none for some QP types). Returns the data and the QP number.
    #[expect(clippy::too_many_arguments)]
    fn create_qp(
        dev: &Device<Self>,
        pd: &Pd<Self>,
        ctx: Option<&UContext<Self>>,
        init: &mut QpInit,
        cqs: (Option<&Self::Cq>, Option<&Self::Cq>),
        srq: Option<&Self::Srq>,
        events: &Arc<Events>,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<(Self::Qp, u32)>;

    /// Modifies a QP.
    fn modify_qp(dev: &Device<Self>, qp: &Self::Qp, attr: &QpAttr, mask: u32) -> Result;

    /// Reports a QP's attributes.
    fn query_qp(_qp: &Self::Qp) -> Result<(QpAttr, QpInit)> {
        Err(EOPNOTSUPP)
    }

    /// Prepares a QP for destruction: no completion or event follows it.
    fn destroy_qp(qp: &Self::Qp) -> Result;

    /// The send doorbell (`POST_SEND` with no WRs from user space; after a kernel consumer's
    /// list of WRs).
    fn post_send(qp: &Self::Qp) -> Result;

    /// Queues a kernel consumer's send WR; may be called in atomic context.
    fn post_send_wr(qp: &Self::Qp, wr: &SendWr<'_, Self::Ah>) -> Result;

    /// Queues a kernel consumer's receive WR; may be called in atomic context.
    fn post_recv_wr(qp: &Self::Qp, wr: &RecvWr<'_>) -> Result;

    /// Queues a kernel consumer's receive WR on an SRQ; may be called in atomic context.
    fn post_srq_recv_wr(_srq: &Self::Srq, _wr: &RecvWr<'_>) -> Result {
        Err(EOPNOTSUPP)
    }

    /// Prefetches the ranges `sges` of ODP MRs of `pd` (`ibv_advise_mr`) with `flags`
    /// (`IB_UVERBS_ADVISE_MR_FLAG_*`, see [`super::verbs::advise_flags`]).
    fn advise_mr(
        _dev: &Device<Self>,
        _pd: &Pd<Self>,
        _advice: Advice,
        _flags: u32,
        _sges: SgList<'_>,
    ) -> Result {
        Err(EOPNOTSUPP)
    }

    /// Attaches a QP to the multicast group `mgid`.
    fn attach_mcast(_dev: &Device<Self>, _qp: &Self::Qp, _mgid: &[u8; 16]) -> Result {
        Err(EOPNOTSUPP)
    }

    /// Detaches a QP from the multicast group `mgid`.
    fn detach_mcast(_dev: &Device<Self>, _qp: &Self::Qp, _mgid: &[u8; 16]) -> Result {
        Err(EOPNOTSUPP)
    }

    /// For `rdma -dd resource show mr`: writes the MR's driver attributes.
    fn fill_mr_attrs(_mr: &Self::Mr, _out: &mut DriverAttrs) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// For `rdma statistic mr show`: writes the MR's counters (none for an MR that has none).
    fn fill_mr_counters(_mr: &Self::Mr, _out: &mut MrCounters) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Current values of the port's counters, in [`Driver::COUNTERS`] order.
    fn counters(_dev: &Device<Self>, _out: &mut [u64]) {}

    /// The value of counter `index` of [`Driver::SYSFS_STATS`].
    fn sysfs_stat(_dev: &Device<Self>, _index: usize) -> u64 {
        0
    }
}

/// An IB device whose driver data is a `T`.
///
/// # Invariants
///
/// `ib` was allocated by `_ib_alloc_device` with room for `Self`; `data` and `sysfs` are
/// initialised from the moment the ops table is installed until `dealloc_driver` drops them.
#[repr(C)]
#[pin_data]
pub(crate) struct Device<T: Driver> {
    #[pin]
    ib: Opaque<bindings::ib_device>,
    #[pin]
    data: T,
    /// The files of `T::SYSFS_STATS`; ib_core points the device's sysfs directory at them.
    sysfs: SysfsGroup,
}

// SAFETY: The C part is protected by ib_core's own locking; `T` is `Send + Sync`; the sysfs
// group is written before registration and only read afterwards.
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
    /// The netdev of port 1 (the device's only port).
    pub(crate) netdev: &'a NetDev,
    /// The node GUID, in network byte order.
    pub(crate) node_guid_be: u64,
    /// Node description shown by `ibv_devinfo`.
    pub(crate) node_desc: &'a CStr,
    /// The module that owns the device (pinned while user contexts are open).
    pub(crate) owner: &'static ThisModule,
}

/// One counter file of a [`SysfsGroup`]: the attribute sysfs passes back, and its index.
#[repr(C)]
struct StatAttr {
    attr: bindings::device_attribute,
    index: usize,
}

/// A device's sysfs counter directory (`struct attribute_group`), built from
/// [`Driver::SYSFS_STATS`].
///
/// # Invariants
///
/// When `_attrs` is not empty, `group.attrs` points to `_ptrs`, which holds a pointer to each
/// entry of `_attrs` and a final null; neither vector is resized afterwards.
struct SysfsGroup {
    group: bindings::attribute_group,
    _attrs: KVec<StatAttr>,
    _ptrs: KVec<*mut bindings::attribute>,
}

impl SysfsGroup {
    /// The files of `stats`, each showing [`Driver::sysfs_stat`] of driver `T`.
    fn new<T: Driver>(stats: &SysfsStats) -> Result<Self> {
        let n = stats.names.len();
        let mut attrs = KVec::with_capacity(n, GFP_KERNEL)?;
        for (index, desc) in stats.names.iter().enumerate() {
            // SAFETY: All-zero is a valid attribute (no name, no callbacks).
            let mut attr: bindings::device_attribute = unsafe { core::mem::zeroed() };
            attr.attr.name = desc.name();
            attr.attr.mode = 0o444;
            // Heap attributes need a static lock class (`sysfs_attr_init`).
            #[cfg(CONFIG_DEBUG_LOCK_ALLOC)]
            {
                attr.attr.key = kernel::static_lock_class!().as_ptr();
            }
            attr.__bindgen_anon_1.show = Some(Device::<T>::sysfs_show_cb);
            attrs.push(StatAttr { attr, index }, GFP_KERNEL)?;
        }
        let mut ptrs = KVec::with_capacity(n + 1, GFP_KERNEL)?;
        for a in attrs.iter_mut() {
            ptrs.push(addr_of_mut!(a.attr.attr), GFP_KERNEL)?;
        }
        ptrs.push(core::ptr::null_mut(), GFP_KERNEL)?;
        // SAFETY: All-zero is a valid, empty group.
        let mut group: bindings::attribute_group = unsafe { core::mem::zeroed() };
        group.name = stats.dir.as_char_ptr();
        // INVARIANT: `ptrs` lists `attrs` and a null; both keep their buffers from now on.
        group.__bindgen_anon_2.attrs = ptrs.as_mut_ptr();
        Ok(Self {
            group,
            _attrs: attrs,
            _ptrs: ptrs,
        })
    }

    /// No files.
    fn empty() -> Self {
        Self {
            // SAFETY: All-zero is a valid, empty group.
            group: unsafe { core::mem::zeroed() },
            _attrs: KVec::new(),
            _ptrs: KVec::new(),
        }
    }
}

/// A registered device in the list of this module's devices.
struct Listed(*mut bindings::ib_device);

// SAFETY: A plain pointer, dereferenced only under the list's lock (see `DEVICES`).
unsafe impl Send for Listed {}

kernel::sync::global_lock! {
    // SAFETY: Initialised by `init_device_list` from module init, before any device exists.
    unsafe(uninit) static DEVICES: Mutex<KVec<Listed>> = KVec::new();
}

/// Whether [`DEVICES`] is initialised.
static DEVICES_READY: Atomic<bool> = Atomic::new(false);

/// Initialises the list of this module's devices; called from module init.
pub(super) fn init_device_list() {
    if !DEVICES_READY.xchg(true, Full) {
        // SAFETY: Only the first call gets here; module init runs before any device exists.
        unsafe { DEVICES.init() };
    }
}

/// `Some(op)` when the driver implements the verb behind it (`HAS_*`), else a NULL slot.
macro_rules! op_if {
    ($has:expr, $op:expr) => {
        if $has {
            Some($op)
        } else {
            None
        }
    };
}

impl<T: Driver> Device<T> {
    /// Allocates, initialises and registers a device; on return ib_core owns it.
    ///
    /// The device may be unregistered (and freed) by another thread as soon as this returns, so
    /// nothing is handed back.
    pub(crate) fn register(new: &NewDevice<'_>, init: impl PinInit<T, Error>) -> Result {
        // ib_core finds the driver's object at the address of its `ib_device`.
        const { assert!(offset_of!(Self, ib) == 0) };
        let sysfs = match &T::SYSFS_STATS {
            Some(stats) => SysfsGroup::new::<T>(stats)?,
            None => SysfsGroup::empty(),
        };
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
        // SAFETY: As above; the group is written in place, at its final address.
        unsafe { addr_of_mut!((*this).sysfs).write(sysfs) };
        // `data` is initialised, so the device may be listed (it is delisted in
        // `dealloc_driver_cb`, which every path below reaches).
        let listed = DEVICES.lock().push(Listed(ib), GFP_KERNEL);
        if let Err(e) = listed {
            // SAFETY: `data` and `sysfs` are initialised and no ops are installed: drop them,
            // then free.
            unsafe {
                core::ptr::drop_in_place(addr_of_mut!((*this).data));
                core::ptr::drop_in_place(addr_of_mut!((*this).sysfs));
                bindings::ib_dealloc_device(ib);
            }
            return Err(e.into());
        }
        let mut ops = Self::OPS;
        ops.owner = new.owner.as_ptr();
        if T::SYSFS_STATS.is_some() {
            // SAFETY: The group lives in the device, which outlives its sysfs files.
            ops.device_group = unsafe { &raw const (*this).sysfs.group };
        }
        // SAFETY: `ib` is a valid, unregistered device that we own; `data` is initialised, so the
        // `dealloc_driver` op installed here may drop it. `ib_set_device_ops` copies `ops`.
        unsafe {
            (*ib).node_type = bindings::RDMA_NODE_IB_CA as u8;
            (*ib).phys_port_cnt = 1;
            (*ib).num_comp_vectors = 1;
            (*ib).local_dma_lkey = 0;
            (*ib).node_guid = new.node_guid_be;
            let desc = new.node_desc.to_bytes();
            let n = desc.len().min((*ib).node_desc.len() - 1);
            for (d, s) in (*ib).node_desc.iter_mut().zip(&desc[..n]) {
                *d = *s as kernel::ffi::c_char;
            }
            for cmd in T::WRITE_CMDS {
                (*ib).uverbs_cmd_mask |= 1u64 << cmd;
            }
            bindings::mark_name_assigned_by_user(ib);
            bindings::ib_set_device_ops(ib, &ops);
            // The driver-specific uverbs methods (rust/helpers/uapi.c): static tables.
            (*ib).driver_def = bindings::uapi_defs(&Uapi::<T>::OPS);
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

    /// The speed and width (`IB_SPEED_*`, `IB_WIDTH_*`) that match the Ethernet link speed of
    /// the netdev of `port`; SDR x1 when it is unknown.
    pub(crate) fn eth_speed(&self, port: u32) -> (u16, u8) {
        let (mut speed, mut width) = (
            bindings::ib_port_speed_IB_SPEED_SDR as u16,
            bindings::ib_port_width_IB_WIDTH_1X as u8,
        );
        // SAFETY: The device is live; the out-pointers are valid locals. On failure the core
        // leaves them as they are.
        unsafe { bindings::ib_get_eth_speed(self.as_raw(), port, &mut speed, &mut width) };
        (speed, width)
    }

    /// Calls `f` with each registered device of this driver until it returns `Some`; returns
    /// that.
    ///
    /// The devices cannot go away during the call; `f` should only take references it needs.
    pub(crate) fn find_map<R>(mut f: impl FnMut(&Self) -> Option<R>) -> Option<R> {
        let list = DEVICES.lock();
        list.iter().find_map(|d| {
            // SAFETY: Listed devices are this driver's and their data is live while the lock
            // is held (they leave the list in `dealloc_driver` before their data is dropped).
            f(unsafe { Self::from_raw(d.0) })
        })
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

    /// The ops table; `owner` and `device_group` are filled in per device. Optional ops stay
    /// NULL unless the driver implements them.
    const OPS: bindings::ib_device_ops = bindings::ib_device_ops {
        driver_id: T::DRIVER_ID as u32,
        uverbs_abi_ver: T::UVERBS_ABI_VER,
        query_device: Some(Self::query_device_cb),
        query_port: Some(Self::query_port_cb),
        query_pkey: op_if!(T::HAS_QUERY_PKEY, Self::query_pkey_cb),
        get_port_immutable: Some(Self::get_port_immutable_cb),
        get_link_layer: op_if!(T::HAS_GET_LINK_LAYER, Self::get_link_layer_cb),
        alloc_ucontext: op_if!(T::HAS_ALLOC_UCONTEXT, Self::alloc_ucontext_cb),
        dealloc_ucontext: op_if!(T::HAS_ALLOC_UCONTEXT, Self::dealloc_ucontext_cb),
        disassociate_ucontext: op_if!(T::HAS_DISASSOCIATE_UCONTEXT, Self::disassociate_ucontext_cb),
        mmap: op_if!(T::HAS_ALLOC_UCONTEXT, mmap::mmap_cb),
        mmap_free: op_if!(T::HAS_ALLOC_UCONTEXT, mmap::mmap_free_cb),
        alloc_pd: Some(Self::alloc_pd_cb),
        dealloc_pd: Some(Self::dealloc_pd_cb),
        dealloc_driver: Some(Self::dealloc_driver_cb),
        create_cq: Some(Self::create_cq_cb),
        resize_user_cq: op_if!(T::HAS_RESIZE_CQ, Self::resize_cq_cb),
        req_notify_cq: Some(Self::req_notify_cq_cb),
        destroy_cq: Some(Self::destroy_cq_cb),
        reg_user_mr: Some(Self::reg_user_mr_cb),
        dereg_mr: Some(Self::dereg_mr_cb),
        rereg_user_mr: op_if!(T::HAS_REREG_USER_MR, Self::rereg_user_mr_cb),
        alloc_mw: op_if!(T::HAS_ALLOC_MW, Self::alloc_mw_cb),
        dealloc_mw: op_if!(T::HAS_ALLOC_MW, Self::dealloc_mw_cb),
        create_ah: op_if!(T::HAS_CREATE_AH, Self::create_ah_cb),
        create_user_ah: op_if!(T::HAS_CREATE_AH, Self::create_ah_cb),
        destroy_ah: op_if!(T::HAS_CREATE_AH, Self::destroy_ah_cb),
        create_srq: op_if!(T::HAS_CREATE_SRQ, Self::create_srq_cb),
        modify_srq: op_if!(T::HAS_MODIFY_SRQ, Self::modify_srq_cb),
        query_srq: op_if!(T::HAS_QUERY_SRQ, Self::query_srq_cb),
        destroy_srq: op_if!(T::HAS_CREATE_SRQ, Self::destroy_srq_cb),
        create_qp: Some(Self::create_qp_cb),
        modify_qp: Some(Self::modify_qp_cb),
        query_qp: op_if!(T::HAS_QUERY_QP, Self::query_qp_cb),
        destroy_qp: Some(Self::destroy_qp_cb),
        post_send: Some(Self::post_send_cb),
        post_recv: Some(Self::post_recv_cb),
        post_srq_recv: op_if!(T::HAS_CREATE_SRQ, Self::post_srq_recv_cb),
        poll_cq: Some(Self::poll_cq_cb),
        get_dma_mr: Some(Self::get_dma_mr_cb),
        alloc_mr: op_if!(T::HAS_ALLOC_MR, Self::alloc_mr_cb),
        map_mr_sg: op_if!(T::HAS_ALLOC_MR, Self::map_mr_sg_cb),
        attach_mcast: op_if!(T::HAS_ATTACH_MCAST, Self::attach_mcast_cb),
        detach_mcast: op_if!(T::HAS_DETACH_MCAST, Self::detach_mcast_cb),
        advise_mr: op_if!(T::HAS_ADVISE_MR, Self::advise_mr_cb),
        alloc_hw_port_stats: op_if!(T::HAS_COUNTERS, Self::alloc_hw_port_stats_cb),
        get_hw_stats: op_if!(T::HAS_COUNTERS, Self::get_hw_stats_cb),
        fill_res_mr_entry: op_if!(T::HAS_FILL_MR_ATTRS, Self::fill_res_mr_entry_cb),
        fill_stat_mr_entry: op_if!(T::HAS_FILL_MR_COUNTERS, Self::fill_stat_mr_entry_cb),
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

    /// Shows one counter file of the device's [`SysfsGroup`].
    ///
    /// # Safety
    ///
    /// Called by sysfs for a counter file of a registered device of this driver.
    unsafe extern "C" fn sysfs_show_cb(
        d: *mut bindings::device,
        attr: *mut bindings::device_attribute,
        buf: *mut c_char,
    ) -> isize {
        // SAFETY: The files are in the directory of an `ib_core_device` (`rdma_device_to_ibdev`)
        // whose owner is a device of this driver, live while its files are; `attr` is the first
        // field of a `StatAttr`.
        let (dev, index) = unsafe {
            let core = kernel::container_of!(d, bindings::ib_core_device, dev);
            let sa = kernel::container_of!(attr, StatAttr, attr);
            (Device::<T>::from_raw((*core).owner), (*sa).index)
        };
        let v: u64 = T::sysfs_stat(dev, index);
        // SAFETY: `buf` is the page sysfs provides; the format takes one `u64`.
        unsafe { bindings::sysfs_emit(buf, c"%llu\n".as_char_ptr(), v) as isize }
    }

    /// # Safety
    ///
    /// ib_core passes a live device of this driver and a valid attribute buffer.
    unsafe extern "C" fn query_device_cb(
        ib: *mut bindings::ib_device,
        attr: *mut bindings::ib_device_attr,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: Per the function's safety requirements.
            let dev = unsafe { Device::<T>::from_raw(ib) };
            // SAFETY: `udata` is null or valid for the call.
            let u = unsafe { Udata::from_raw(udata) };
            let a = T::query_device(dev, u.as_ref())?;
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
                (*attr).kernel_cap_flags = a.kernel_cap_flags;
                let c = &mut (*attr).odp_caps;
                c.general_caps = a.odp_general_caps;
                c.per_transport_caps.rc_odp_caps = a.rc_odp_caps;
                c.per_transport_caps.ud_odp_caps = a.ud_odp_caps;
                (*attr).device_cap_flags = a.device_cap_flags;
                (*attr).max_qp = a.max_qp;
                (*attr).max_qp_wr = a.max_qp_wr;
                (*attr).max_send_sge = a.max_sge;
                (*attr).max_recv_sge = a.max_sge;
                (*attr).max_sge_rd = a.max_sge_rd;
                (*attr).max_cq = a.max_cq;
                (*attr).max_cqe = a.max_cqe;
                (*attr).max_mr = a.max_mr;
                (*attr).max_mw = a.max_mw;
                (*attr).max_qp_rd_atom = a.max_qp_rd_atom;
                (*attr).max_qp_init_rd_atom = a.max_qp_init_rd_atom;
                (*attr).max_res_rd_atom = a.max_res_rd_atom;
                (*attr).max_srq = a.max_srq;
                (*attr).max_srq_wr = a.max_srq_wr;
                (*attr).max_srq_sge = a.max_srq_sge;
                (*attr).max_ah = a.max_ah;
                (*attr).max_fast_reg_page_list_len = a.max_fast_reg_page_list_len;
                (*attr).max_mcast_grp = a.max_mcast_grp;
                (*attr).max_mcast_qp_attach = a.max_mcast_qp_attach;
                (*attr).max_total_mcast_qp_attach = a.max_total_mcast_qp_attach;
                (*attr).atomic_cap = if a.atomic_hca {
                    bindings::ib_atomic_cap_IB_ATOMIC_HCA
                } else {
                    bindings::ib_atomic_cap_IB_ATOMIC_NONE
                };
            }
            Ok(0)
        })
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
            // SAFETY: Per the function's safety requirements.
            let dev = unsafe { Device::<T>::from_raw(ib) };
            let a = T::query_port(dev, port)?;
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
                (*attr).port_cap_flags = a.port_cap_flags;
                (*attr).max_msg_sz = a.max_msg_sz;
                (*attr).pkey_tbl_len = a.pkey_tbl_len;
                (*attr).max_vl_num = a.max_vl_num;
                (*attr).active_speed = a.active_speed;
                (*attr).active_width = a.active_width;
            }
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// ib_core passes a live device of this driver and a valid output pointer.
    unsafe extern "C" fn query_pkey_cb(
        ib: *mut bindings::ib_device,
        port: u32,
        index: u16,
        pkey: *mut u16,
    ) -> c_int {
        from_result(|| {
            // SAFETY: Per the function's safety requirements.
            let dev = unsafe { Device::<T>::from_raw(ib) };
            let v = T::query_pkey(dev, port, index)?;
            // SAFETY: `pkey` is valid for writes.
            unsafe { *pkey = v };
            Ok(0)
        })
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
            // SAFETY: Per the function's safety requirements.
            let dev = unsafe { Device::<T>::from_raw(ib) };
            let a = T::get_port_immutable(dev, port)?;
            // SAFETY: `imm` is valid for writes.
            unsafe {
                (*imm).core_cap_flags = a.core_cap_flags;
                (*imm).pkey_tbl_len = a.pkey_tbl_len.into();
                (*imm).gid_tbl_len = a.gid_tbl_len;
                (*imm).max_mad_size = a.max_mad_size;
            }
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// Called by ib_core for a live device of this driver.
    unsafe extern "C" fn get_link_layer_cb(
        ib: *mut bindings::ib_device,
        port: u32,
    ) -> bindings::rdma_link_layer {
        // SAFETY: Per the function's safety requirements.
        let dev = unsafe { Device::<T>::from_raw(ib) };
        T::get_link_layer(dev, port) as bindings::rdma_link_layer
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
        // SAFETY: Per the safety requirements.
        unsafe { UContext::<T>::drop_data(uctx) };
    }

    /// # Safety
    ///
    /// Called by ib_core for a context set up by `alloc_ucontext_cb` while the device goes
    /// away.
    unsafe extern "C" fn disassociate_ucontext_cb(uctx: *mut bindings::ib_ucontext) {
        // SAFETY: Per the safety requirements; the context is live until `dealloc_ucontext`.
        T::disassociate_ucontext(unsafe { UContext::<T>::from_raw(uctx) });
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
        // SAFETY: Per the safety requirements.
        unsafe { Pd::<T>::drop_data(pd) };
        0
    }

    /// # Safety
    ///
    /// Called once by ib_core (from `ib_dealloc_device`) after the last op; `ib` is ours.
    unsafe extern "C" fn dealloc_driver_cb(ib: *mut bindings::ib_device) {
        {
            let mut list = DEVICES.lock();
            list.retain(|d| d.0 != ib);
            if list.is_empty() {
                // Give the buffer back: the static list is not dropped at module exit.
                *list = KVec::new();
            }
        }
        let this = ib.cast::<Self>();
        // SAFETY: `data` and `sysfs` were initialised and the device listed before the ops were
        // installed (type invariant); after delisting, nothing reaches the data any more, and
        // the sysfs files are gone with the registration.
        unsafe {
            core::ptr::drop_in_place(addr_of_mut!((*this).data));
            core::ptr::drop_in_place(addr_of_mut!((*this).sysfs));
        }
    }
}

/// A registered device of a driver id, referenced (`ib_device_get_by_netdev`).
///
/// # Invariants
///
/// `self.0` is a device on which this object owns one `ib_device_get` reference.
pub(crate) struct BoundDevice(*mut bindings::ib_device);

impl BoundDevice {
    /// The device of driver id `id` bound to `ndev`, if any (of this module or another).
    pub(crate) fn on(ndev: &NetDev, id: DriverId) -> Option<Self> {
        // SAFETY: `ndev` is live; a non-null result carries a device reference.
        let ib = unsafe { bindings::ib_device_get_by_netdev(ndev.as_raw(), id as u32) };
        // INVARIANT: The reference is handed to the new object; a null pointer never makes one
        // (`then`, not `then_some`, which would build and drop a `Self(null)`).
        (!ib.is_null()).then(|| Self(ib))
    }

    /// Whether `owner` registered the device.
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

/// Unregisters every device of driver id `id`; waits until each is gone.
///
/// The caller makes sure that all such devices are its own.
pub(crate) fn unregister_all(id: DriverId) {
    // SAFETY: FFI call; ib_core serialises against concurrent unregistration.
    unsafe { bindings::ib_unregister_driver(id as u32) };
}
