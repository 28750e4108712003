// SPDX-License-Identifier: GPL-2.0

//! The rodp device: `rdma link add`/`delete`, device and port attributes (rxe's `rxe.c`,
//! `rxe_net.c` and the query verbs of `rxe_verbs.c`).

use crate::{
    ah, cq, engine,
    ib::{
        self,
        device::{
            core_cap, kernel_cap, odp_cap, port_cap, write_cmd, BoundDevice, DriverId, LinkLayer,
            NewDevice, PortImmutable, SysfsStats, XmwCaps, MGMT_MAD_SIZE,
        },
        event::Events,
        hw_stats::{DriverAttrs, MrCounters, StatDesc},
        link::{self, Link},
        netdev::{self, ib_mtu_for, NetDevRef},
        uapi::{XBind, XEntry},
        udata::Udata,
        verbs::{
            advise_flags, device_cap, srq_type, Advice, Notify, QpAttr, QpInit, RecvWr, Route,
            SendWr, SgList, SrqAttr, WcOut, WrOpcode,
        },
        DeviceAttr, NetDev, PortAttr,
    },
    keys::Tables,
    limit::Limit,
    mcast, mr, mw,
    odp::OdpCounters,
    pd, qp, srq, stats, ucontext, xmw,
};
use kernel::{
    prelude::*,
    sync::{
        atomic::{Acquire, Atomic, Full},
        Arc,
    },
    ModuleMetadata, ThisModule,
};

/// This module, the owner of every rodp device.
const MODULE: &ThisModule = &<crate::RodpModule as ModuleMetadata>::THIS_MODULE;

/// The in-tree soft-RoCE driver, which must never be loaded next to rodp (see
/// `Documentation/rodp.rst`): it claims every device with rodp's driver id as its own.
const RXE_MODULE: &CStr = c"rdma_rxe";

/// The uverbs ABI version of the rxe provider (`RXE_UVERBS_ABI_VERSION` in rxe.h); rdma-core's
/// rxe provider binds only devices that report it.
const RXE_UVERBS_ABI_VERSION: u32 = 2;

/// Number of GID entries per port: room for many addresses, small enough to read quickly.
pub(crate) const GID_TABLE_LEN: i32 = 128;

/// Number of P_Key entries per port: the default P_Key only, as RoCE uses.
const PKEY_TABLE_LEN: u16 = 1;

/// Largest message: 2 GiB, the IBA limit for a single message.
pub(crate) const MAX_MSG_SIZE: u32 = 1 << 31;

/// Maximum number of protection domains per device; the `max_pd` module parameter may set a
/// lower one.
pub(crate) const MAX_PD: u32 = 1 << 16;

/// The PD limit of a device created now: the `max_pd` module parameter, if it is within
/// 1..=`MAX_PD` (checked when the module loads: the parameter cannot change afterwards).
pub(crate) fn max_pd() -> Result<u32> {
    match crate::module_parameters::max_pd.value() {
        n @ 1..=MAX_PD => Ok(n),
        n => {
            pr_warn!("max_pd={n} is not within 1..={MAX_PD}\n");
            Err(EINVAL)
        }
    }
}

/// Number of rodp devices alive or being created; while nonzero, rdma_rxe may not load.
static DEVICES: Atomic<i32> = Atomic::new(0);

/// One unit of [`DEVICES`], held by each device, and by `newlink` from before its rdma_rxe
/// check: either the check sees rdma_rxe, or rdma_rxe's module notifier sees this unit.
struct Alive;

impl Alive {
    fn new() -> Self {
        DEVICES.fetch_add(1, Full);
        Self
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        DEVICES.fetch_sub(1, Full);
    }
}

/// The driver data of one rodp device.
pub(crate) struct Rodp {
    /// Its netdev's namespace's RoCEv2 port (dropped first: nothing is received afterwards).
    _net: engine::Binding,
    /// `sys_image_guid`, from the netdev's MAC address.
    guid_be: u64,
    /// Protection domains allocated, at most `max_pd` (the module parameter when the device
    /// was created).
    pub(crate) pds: Limit,
    /// CQs allocated.
    pub(crate) cqs: Limit,
    /// QPs allocated.
    pub(crate) qps: Limit,
    /// SRQs allocated.
    pub(crate) srqs: Limit,
    /// MRs registered.
    pub(crate) mrs: Limit,
    /// AHs allocated.
    pub(crate) ahs: Limit,
    /// Memory windows allocated.
    pub(crate) mws: Limit,
    /// Numbered objects.
    pub(crate) tables: Arc<Tables>,
    /// `<debugfs>/rodp/<ibdev>/`.
    _debugfs: Pin<KBox<kernel::debugfs::Scope<Arc<OdpCounters>>>>,
    /// Keeps rdma_rxe out while this device exists.
    _alive: Alive,
}

/// A rodp device as ib_core's callbacks see it.
pub(crate) type Device = ib::Device<Rodp>;

/// The netdev of the device whose objects are `tables`, if it still has one. Takes the list
/// of devices' lock.
pub(crate) fn netdev_of(tables: &Arc<Tables>) -> Option<NetDevRef> {
    Device::find_map(|d| Arc::ptr_eq(&d.tables, tables).then(|| d.netdev(1))).flatten()
}

/// Where packets from the GID `src` of the device whose objects are `tables` leave: the
/// device's netdev (its namespace) and the interface of the GID's entry (a VLAN device for a
/// VLAN's address, so that its packets are tagged), or the netdev itself.
pub(crate) fn route_of(tables: &Arc<Tables>, src: &[u8; 16]) -> Option<(NetDevRef, i32)> {
    Device::find_map(|d| {
        Arc::ptr_eq(&d.tables, tables).then(|| {
            let n = d.netdev(1)?;
            let oif = d.gid_ifindex(src).unwrap_or_else(|| n.ifindex());
            Some((n, oif))
        })
    })
    .flatten()
}

/// Leaves the IP multicast group of `mgid` on `ndev` (a group's last member is gone). A
/// netdev that is gone took its memberships with it.
pub(crate) fn leave_group(ndev: Option<&NetDev>, mgid: &[u8; 16]) {
    if let Some(n) = ndev {
        // Fails only for a group the netdev no longer has (its addresses went away).
        let _ = n.mc_group(mgid, false);
    }
}
/// A user context of a rodp device.
pub(crate) type UContext = ib::object::UContext<Rodp>;
/// A PD of a rodp device.
pub(crate) type Pd = ib::object::Pd<Rodp>;

impl Rodp {
    fn new(name: &CStr, ndev: &NetDev, guid_be: u64, alive: Alive) -> Result<Self> {
        let odp = OdpCounters::new()?;
        let debugfs = stats::debugfs(name, odp.clone())?;
        let tables = Arc::pin_init(Tables::new(odp), GFP_KERNEL)?;
        Ok(Self {
            _net: engine::Binding::new(ndev, tables.clone())?,
            guid_be,
            pds: Limit::new(max_pd()?)?,
            cqs: Limit::new(cq::MAX_CQ)?,
            qps: Limit::new(qp::MAX_QP)?,
            srqs: Limit::new(srq::MAX_SRQ)?,
            mrs: Limit::new(mr::MAX_MR)?,
            ahs: Limit::new(ah::MAX_AH)?,
            mws: Limit::new(mw::MAX_MW)?,
            tables,
            _debugfs: debugfs,
            _alive: alive,
        })
    }
}

#[vtable]
impl ib::Driver for Rodp {
    type UContext = ucontext::UContext;
    type Pd = pd::Pd;
    type Cq = cq::Cq;
    type Qp = qp::Qp;
    type Srq = srq::Srq;
    type Ah = ah::Ah;
    type Mr = mr::Mr;
    type Mw = mw::Mw;

    const DRIVER_ID: DriverId = DriverId::Rxe;

    const UVERBS_ABI_VER: u32 = RXE_UVERBS_ABI_VERSION;

    // The rxe provider rings its send doorbell with POST_SEND and arms CQs with REQ_NOTIFY_CQ.
    const WRITE_CMDS: &'static [u32] = &[write_cmd::POST_SEND, write_cmd::REQ_NOTIFY_CQ];

    const COUNTERS: &'static [StatDesc] = &stats::NAMES;

    // `<ibdev>/odp_stats/`, the device's ODP totals under the names of the earlier Mellanox
    // OFED stack.
    const SYSFS_STATS: Option<SysfsStats> = Some(SysfsStats {
        dir: c"odp_stats",
        names: stats::ODP_NAMES,
    });

    fn query_device(dev: &Device, udata: Option<&Udata<'_>>) -> Result<DeviceAttr> {
        if udata.is_some_and(|u| u.inlen() != 0 || u.outlen() != 0) {
            return Err(EINVAL);
        }
        let (send, recv, write, read, atomic, srq_recv) = (
            odp_cap::SEND,
            odp_cap::RECV,
            odp_cap::WRITE,
            odp_cap::READ,
            odp_cap::ATOMIC,
            odp_cap::SRQ_RECV,
        );
        Ok(DeviceAttr {
            sys_image_guid_be: dev.guid_be,
            vendor_id: 0xffffff,
            max_mr_size: mr::MAX_MR_SIZE,
            page_size_cap: kernel::page::PAGE_SIZE as u64,
            max_pd: dev.pds.max(),
            max_pkeys: PKEY_TABLE_LEN,
            kernel_cap_flags: kernel_cap::ALLOW_USER_UNREG | kernel_cap::ON_DEMAND_PAGING,
            device_cap_flags: device_cap::RC_RNR_NAK_GEN
                | device_cap::SRQ_RESIZE
                | device_cap::SYS_IMAGE_GUID
                | device_cap::PORT_ACTIVE_EVENT
                | device_cap::MEM_WINDOW
                | device_cap::MEM_WINDOW_TYPE_2B
                | device_cap::FLUSH_GLOBAL
                | device_cap::ATOMIC_WRITE
                | device_cap::MEM_MGT_EXTENSIONS,
            max_qp: qp::MAX_QP,
            max_qp_wr: qp::MAX_QP_WR,
            max_sge: qp::MAX_SGE,
            max_sge_rd: qp::MAX_SGE,
            max_cq: cq::MAX_CQ,
            max_cqe: cq::MAX_CQE,
            max_mr: mr::MAX_MR,
            max_mw: mw::MAX_MW,
            max_qp_rd_atom: qp::MAX_RD_ATOMIC,
            max_qp_init_rd_atom: qp::MAX_RD_ATOMIC,
            max_res_rd_atom: qp::MAX_RD_ATOMIC * qp::MAX_QP,
            max_srq: srq::MAX_SRQ,
            max_srq_wr: srq::MAX_SRQ_WR,
            max_srq_sge: srq::MAX_SRQ_SGE,
            max_ah: ah::MAX_AH,
            atomic_hca: true,
            max_fast_reg_page_list_len: mr::fast::MAX_PAGES,
            max_mcast_grp: mcast::MAX_GROUPS,
            max_mcast_qp_attach: mcast::MAX_QP_ATTACH,
            max_total_mcast_qp_attach: mcast::MAX_TOTAL_ATTACH,
            odp_general_caps: odp_cap::SUPPORT | odp_cap::SUPPORT_IMPLICIT,
            rc_odp_caps: send
                | recv
                | write
                | read
                | atomic
                | srq_recv
                | odp_cap::FLUSH
                | odp_cap::ATOMIC_WRITE,
            ud_odp_caps: send | recv | srq_recv,
            ..Default::default()
        })
    }

    fn query_port(dev: &Device, port: u32) -> Result<PortAttr> {
        if port != 1 {
            return Err(EINVAL);
        }
        let ndev = dev.netdev(1).ok_or(ENODEV)?;
        let mtu = ndev.mtu();
        let (active_speed, active_width) = dev.eth_speed(port);
        Ok(PortAttr {
            active: ndev.is_active(),
            link_up: ndev.is_up(),
            max_mtu: ib_mtu_for(u32::MAX),
            active_mtu: ib_mtu_for(mtu),
            phys_mtu: mtu,
            gid_tbl_len: GID_TABLE_LEN,
            port_cap_flags: port_cap::CM_SUP,
            max_msg_sz: MAX_MSG_SIZE,
            pkey_tbl_len: PKEY_TABLE_LEN,
            max_vl_num: 1,
            active_speed,
            active_width,
        })
    }

    fn get_port_immutable(_dev: &Device, port: u32) -> Result<PortImmutable> {
        if port != 1 {
            return Err(EINVAL);
        }
        Ok(PortImmutable {
            core_cap_flags: core_cap::IBA_ROCE_UDP_ENCAP,
            pkey_tbl_len: PKEY_TABLE_LEN,
            gid_tbl_len: GID_TABLE_LEN,
            max_mad_size: MGMT_MAD_SIZE,
        })
    }

    fn query_pkey(_dev: &Device, port: u32, index: u16) -> Result<u16> {
        // One entry: the default full-membership P_Key, as RoCE uses.
        if port != 1 || index != 0 {
            return Err(EINVAL);
        }
        Ok(0xffff)
    }

    fn get_link_layer(_dev: &Device, _port: u32) -> LinkLayer {
        LinkLayer::Ethernet
    }

    fn alloc_ucontext(dev: &Device) -> Result<ucontext::UContext> {
        ucontext::UContext::new(dev)
    }

    fn disassociate_ucontext(_ctx: &UContext) {
        // Implemented so that `rdma link delete` need not wait for user space: the core zaps
        // the context's mmaps itself and fails later calls; rodp keeps no per-context hardware
        // state to release early.
    }

    fn alloc_pd(dev: &Device, _ctx: Option<&UContext>) -> Result<pd::Pd> {
        pd::Pd::new(dev)
    }

    fn create_cq(
        dev: &Device,
        ctx: Option<&UContext>,
        cqe: u32,
        flags: u32,
        events: &Arc<Events>,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<(cq::Cq, u32)> {
        if flags != 0 {
            return Err(EOPNOTSUPP);
        }
        cq::Cq::new(dev, ctx, cqe, events, udata)
    }

    fn poll_cq(cq: &cq::Cq, out: &mut WcOut<'_>) -> usize {
        cq.poll(out)
    }

    fn resize_cq(
        cq: &cq::Cq,
        ctx: Option<&UContext>,
        cqe: u32,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<u32> {
        // Served to user space only.
        let (ctx, udata) = ctx.zip(udata).ok_or(EOPNOTSUPP)?;
        cq.resize(ctx, cqe, udata)
    }

    fn req_notify_cq(cq: &cq::Cq, arm: Notify, report_missed: bool) -> Result<bool> {
        Ok(cq.req_notify(arm, report_missed))
    }

    fn destroy_cq(cq: &cq::Cq) -> Result {
        cq.destroy();
        Ok(())
    }

    fn reg_user_mr(
        dev: &Device,
        pd: &Pd,
        ctx: Option<&UContext>,
        start: u64,
        length: u64,
        iova: u64,
        access: u32,
    ) -> Result<(mr::Mr, u32)> {
        // Memory of a process, registered by that process; kernel consumers use DMA MRs.
        ctx.ok_or(EOPNOTSUPP)?;
        mr::Mr::register(dev, pd, start, length, iova, access)
    }

    fn get_dma_mr(dev: &Device, pd: &Pd, access: u32) -> Result<(mr::Mr, u32)> {
        mr::Mr::dma(dev, pd, access)
    }

    fn alloc_mr(dev: &Device, pd: &Pd, max_pages: u32) -> Result<(mr::Mr, u32)> {
        mr::Mr::fast(dev, pd, max_pages)
    }

    fn map_mr_start(mr: &mr::Mr, page_size: u32) -> Result {
        mr.map_start(page_size)
    }

    fn map_mr_page(mr: &mr::Mr, addr: u64) -> Result {
        mr.map_page(addr)
    }

    fn dereg_mr(mr: &mr::Mr) -> Result {
        mr.deregister()
    }

    fn rereg_user_mr(
        dev: &Device,
        mr: &mr::Mr,
        ctx: Option<&UContext>,
        flags: u32,
        start: u64,
        length: u64,
        iova: u64,
        access: u32,
        pd: &Pd,
    ) -> Result<u32> {
        ctx.ok_or(EOPNOTSUPP)?;
        mr.reregister(dev, flags, start, length, iova, access, pd)
    }

    fn alloc_mw(
        dev: &Device,
        pd: &Pd,
        ctx: Option<&UContext>,
        type2: bool,
    ) -> Result<(mw::Mw, u32)> {
        // Served to user space only; dropping the data at deallocation unbinds the window.
        ctx.ok_or(EOPNOTSUPP)?;
        mw::Mw::alloc(dev, pd, type2)
    }

    fn xmw_caps() -> XmwCaps {
        xmw::caps()
    }

    fn xmw_grant(mr: &mr::Mr) -> Result {
        mr.grant_noncontig()
    }

    fn xmw_init(mw: &mw::Mw, max_descriptors: u32) -> Result {
        mw.extend(max_descriptors)
    }

    fn xmw_bind(mw: &mw::Mw, qp: &qp::Qp, bind: &XBind, entries: &[XEntry]) -> Result<u64> {
        mw.bind_layout(&qp.shared, bind, entries)
    }

    fn create_ah(
        dev: &Device,
        pd: &Pd,
        route: &Route,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<ah::Ah> {
        ah::Ah::new(dev, pd, route, udata)
    }

    fn create_srq(
        dev: &Device,
        pd: &Pd,
        ctx: Option<&UContext>,
        kind: u32,
        attr: &mut SrqAttr,
        events: &Arc<Events>,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<srq::Srq> {
        // Of the basic type, for users and kernel consumers.
        if kind != srq_type::BASIC {
            return Err(EOPNOTSUPP);
        }
        srq::Srq::new(dev, pd, ctx.zip(udata), attr, events)
    }

    fn modify_srq(
        srq: &srq::Srq,
        ctx: Option<&UContext>,
        attr: &SrqAttr,
        mask: u32,
        udata: Option<&mut Udata<'_>>,
    ) -> Result {
        srq.modify(ctx.zip(udata), attr, mask)
    }

    fn query_srq(srq: &srq::Srq) -> Result<SrqAttr> {
        Ok(srq.query())
    }

    fn destroy_srq(srq: &srq::Srq) -> Result {
        srq.destroy();
        Ok(())
    }

    fn create_qp(
        dev: &Device,
        pd: &Pd,
        ctx: Option<&UContext>,
        init: &mut QpInit,
        cqs: (Option<&cq::Cq>, Option<&cq::Cq>),
        srq: Option<&srq::Srq>,
        events: &Arc<Events>,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<(qp::Qp, u32)> {
        let (Some(scq), Some(rcq)) = cqs else {
            return Err(EINVAL);
        };
        if init.has_xrcd_or_rwq_ind_tbl {
            return Err(EOPNOTSUPP);
        }
        qp::Qp::new(
            dev,
            pd,
            ctx,
            init,
            (&scq.shared, &rcq.shared),
            srq.map(|s| &s.shared),
            events,
            udata,
        )
    }

    fn modify_qp(dev: &Device, qp: &qp::Qp, attr: &QpAttr, mask: u32) -> Result {
        qp.modify(|r: &Route| dev.query_gid(r.sgid_index.into()), attr, mask)
    }

    fn query_qp(qp: &qp::Qp) -> Result<(QpAttr, QpInit)> {
        Ok(qp.query())
    }

    fn destroy_qp(qp: &qp::Qp) -> Result {
        qp.destroy();
        Ok(())
    }

    fn post_send(qp: &qp::Qp) -> Result {
        qp.doorbell()
    }

    fn post_send_wr(qp: &qp::Qp, wr: &SendWr<'_, ah::Ah>) -> Result {
        use WrOpcode::*;
        // Kernel consumers get sends, RDMA, atomics, fast registration and invalidation
        // (memory windows are for user space).
        let op = WrOpcode::from_raw(wr.wqe.opcode).ok_or(EINVAL)?;
        if !matches!(
            op,
            RdmaWrite
                | RdmaWriteWithImm
                | RdmaRead
                | AtomicCmpAndSwp
                | AtomicFetchAndAdd
                | Send
                | SendWithImm
                | SendWithInv
                | LocalInv
                | RegMr
        ) {
            return Err(EINVAL);
        }
        qp.post_send_wr(wr)
    }

    fn post_recv_wr(qp: &qp::Qp, wr: &RecvWr<'_>) -> Result {
        qp.post_recv_wr(wr)
    }

    fn post_srq_recv_wr(srq: &srq::Srq, wr: &RecvWr<'_>) -> Result {
        srq.post_recv_wr(wr)
    }

    fn advise_mr(dev: &Device, pd: &Pd, advice: Advice, flags: u32, sges: SgList<'_>) -> Result {
        if flags & !advise_flags::FLUSH != 0 {
            return Err(EOPNOTSUPP);
        }
        let flush = flags & advise_flags::FLUSH != 0;
        // Every range is checked before any is mapped; with the flush flag the work is done on
        // return, otherwise on the module's workqueue.
        let mut p = mr::Prefetch::new(
            advice == Advice::PrefetchWrite,
            advice != Advice::PrefetchNoFault,
        );
        for g in sges.iter() {
            p.add(&dev.tables, pd.data().id, g.lkey, g.addr, g.length)?;
        }
        if flush {
            p.run_now()
        } else {
            p.queue(&dev.tables)
        }
    }

    fn fill_mr_attrs(mr: &mr::Mr, out: &mut DriverAttrs) -> Result {
        mr.fill_attrs(out)
    }

    fn fill_mr_counters(mr: &mr::Mr, out: &mut MrCounters) -> Result {
        mr.fill_counters(out)
    }

    fn attach_mcast(dev: &Device, qp: &qp::Qp, mgid: &[u8; 16]) -> Result {
        // Only datagram QPs (not QP1) join groups.
        if qp.shared.qp_type != ib::verbs::QpType::Ud {
            return Err(EINVAL);
        }
        // The netdev joins the group's IP multicast group with its first member, so that
        // datagrams sent to it from other hosts arrive (rxe leaves that to rdma_cm).
        let ndev = dev.netdev(1);
        dev.tables.groups.attach(mgid, qp.shared.qpn, |g| {
            ndev.as_deref().ok_or(ENODEV)?.mc_group(g, true)
        })
    }

    fn detach_mcast(dev: &Device, qp: &qp::Qp, mgid: &[u8; 16]) -> Result {
        let ndev = dev.netdev(1);
        dev.tables
            .groups
            .detach(mgid, qp.shared.qpn, |g| leave_group(ndev.as_deref(), g))
    }

    fn sysfs_stat(dev: &Device, index: usize) -> u64 {
        let mut out = [0u64; stats::NAMES.len()];
        stats::read_odp(&dev.tables.odp, &mut out);
        out.get(stats::ODP_FIRST + index).copied().unwrap_or(0)
    }

    fn counters(dev: &Device, out: &mut [u64]) {
        dev.tables.stats.read(out);
        stats::read_odp(&dev.tables.odp, out);
    }
}

impl Link for Rodp {
    const TYPE: &'static CStr = c"rodp";

    fn newlink(name: &CStr, ndev: &NetDev) -> Result {
        let alive = Alive::new();
        if link::module_loaded(MODULE, RXE_MODULE) {
            pr_err!("{RXE_MODULE:?} is loaded: refusing to create {name:?}; unload it first\n");
            return Err(EBUSY);
        }
        if ndev.is_vlan() {
            pr_err!(
                "{name:?}: create it on the real device under {:?}\n",
                ndev.name()
            );
            return Err(EPERM);
        }
        if let Some(dev) = BoundDevice::on(ndev, <Self as ib::Driver>::DRIVER_ID) {
            return Err(if dev.is_owned_by(MODULE) {
                pr_err!("{:?} already has a rodp device\n", ndev.name());
                EEXIST
            } else {
                pr_err!("{:?} already has an rxe device\n", ndev.name());
                EBUSY
            });
        }
        // The node and system image GUIDs are one value.
        let guid_be = u64::from_ne_bytes(node_guid(ndev));
        let new = NewDevice {
            name,
            netdev: ndev,
            node_guid_be: guid_be,
            node_desc: c"rodp",
            owner: MODULE,
        };
        ib::Device::<Rodp>::register(&new, Rodp::new(name, ndev, guid_be, alive)).map_err(|e| {
            // ib_core says ENFILE when the name is taken (nldev rejects the '%' patterns that
            // could also run out of numbers); EEXIST says what happened.
            if e == ENFILE {
                pr_err!("an RDMA device called {name:?} exists already\n");
                EEXIST
            } else {
                e
            }
        })
    }

    fn netdev_unregister(ndev: &NetDev) {
        // ib_core holds a reference on the netdev until the device is gone.
        if let Some(dev) =
            BoundDevice::on(ndev, <Self as ib::Driver>::DRIVER_ID).filter(|d| d.is_owned_by(MODULE))
        {
            dev.unregister_queued();
        }
    }

    fn module_coming(name: &CStr) -> Result {
        if name == RXE_MODULE && DEVICES.load(Acquire) > 0 {
            pr_err!(
                "refusing to load {RXE_MODULE:?} while rodp devices exist: delete them first\n"
            );
            return Err(EBUSY);
        }
        Ok(())
    }

    fn teardown() {
        // rdma_rxe cannot load while rodp devices exist, so when it is loaded now every device
        // of the shared driver id is rxe's own and must be left alone.
        if !link::module_loaded(MODULE, RXE_MODULE) {
            ib::device::unregister_all(<Self as ib::Driver>::DRIVER_ID);
        }
    }
}

/// The node GUID, in network byte order: the netdev's MAC as a modified EUI-64 (`addrconf_addr_eui48`:
/// `ff:fe` in the middle, the universal/local bit flipped), or a random MAC's when it has none,
/// as rxe does.
fn node_guid(ndev: &NetDev) -> [u8; 8] {
    let m = ndev.mac().unwrap_or_else(netdev::random_mac);
    [m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]
}
