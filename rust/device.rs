// SPDX-License-Identifier: GPL-2.0

//! The rodp device: `rdma link add`/`delete`, device and port attributes (rxe's `rxe.c`,
//! `rxe_net.c` and the query verbs of `rxe_verbs.c`).

use crate::{
    ah, cq,
    ib::{
        self,
        device::{BoundDevice, NewDevice},
        event::Events,
        hw_stats::StatDesc,
        link::{self, Link},
        netdev::ib_mtu_for,
        udata::Udata,
        verbs::{
            device_cap, Advice, Notify, QpAttr, QpInit, RecvWr, Route, SendWr, SgList, SrqAttr,
            WcOut,
        },
        DeviceAttr, NetDev, PortAttr,
    },
    keys::Tables,
    limit::Limit,
    mcast, mr, mw,
    odp::OdpCounters,
    pd, qp, srq, stats, ucontext,
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

/// Number of GID entries per port: room for many addresses, small enough to read quickly.
pub(crate) const GID_TABLE_LEN: i32 = 128;

/// Largest message: 2 GiB, the IBA limit for a single message.
pub(crate) const MAX_MSG_SIZE: u32 = 1 << 31;

/// Maximum number of protection domains per device.
pub(crate) const MAX_PD: u32 = 1 << 16;

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
    /// `sys_image_guid`, from the netdev's MAC address.
    guid_be: u64,
    /// Protection domains allocated, at most `MAX_PD`.
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
/// A user context of a rodp device.
pub(crate) type UContext = ib::object::UContext<Rodp>;
/// A PD of a rodp device.
pub(crate) type Pd = ib::object::Pd<Rodp>;

impl Rodp {
    fn new(name: &CStr, ndev: &NetDev, alive: Alive) -> Result<Self> {
        let odp = OdpCounters::new()?;
        let debugfs = stats::debugfs(name, odp.clone())?;
        let tables = Arc::pin_init(Tables::new(odp), GFP_KERNEL)?;
        Ok(Self {
            guid_be: u64::from_ne_bytes(ndev.eui64()),
            pds: Limit::new(MAX_PD)?,
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

    fn query_device(dev: &Device) -> DeviceAttr {
        DeviceAttr {
            sys_image_guid_be: dev.guid_be,
            vendor_id: 0xffffff,
            max_mr_size: mr::MAX_MR_SIZE,
            page_size_cap: kernel::page::PAGE_SIZE as u64,
            max_pd: MAX_PD,
            max_pkeys: 1,
            allow_user_unreg: true,
            device_cap_flags: device_cap::RC_RNR_NAK_GEN
                | device_cap::SRQ_RESIZE
                | device_cap::SYS_IMAGE_GUID
                | device_cap::PORT_ACTIVE_EVENT
                | device_cap::MEM_WINDOW
                | device_cap::MEM_WINDOW_TYPE_2B,
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
            max_mcast_grp: mcast::MAX_GROUPS,
            max_mcast_qp_attach: mcast::MAX_QP_ATTACH,
            max_total_mcast_qp_attach: mcast::MAX_TOTAL_ATTACH,
            odp: true,
            odp_implicit: true,
            ..Default::default()
        }
    }

    fn query_port(dev: &Device, _port: u32) -> Result<PortAttr> {
        let ndev = dev.netdev(1).ok_or(ENODEV)?;
        let mtu = ndev.mtu();
        Ok(PortAttr {
            active: ndev.is_active(),
            link_up: ndev.is_up(),
            max_mtu: ib_mtu_for(u32::MAX),
            active_mtu: ib_mtu_for(mtu),
            phys_mtu: mtu,
            gid_tbl_len: GID_TABLE_LEN,
            max_msg_sz: MAX_MSG_SIZE,
            pkey_tbl_len: 1,
        })
    }

    fn alloc_ucontext(dev: &Device) -> Result<ucontext::UContext> {
        ucontext::UContext::new(dev)
    }

    fn alloc_pd(dev: &Device, _ctx: Option<&UContext>) -> Result<pd::Pd> {
        pd::Pd::new(dev)
    }

    fn create_cq(
        dev: &Device,
        ctx: Option<&UContext>,
        cqe: u32,
        events: &Arc<Events>,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<(cq::Cq, u32)> {
        cq::Cq::new(dev, ctx, cqe, events, udata)
    }

    fn poll_cq(cq: &cq::Cq, out: &mut WcOut<'_>) -> usize {
        cq.poll(out)
    }

    fn resize_cq(cq: &cq::Cq, ctx: &UContext, cqe: u32, udata: &mut Udata<'_>) -> Result<u32> {
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
        start: u64,
        length: u64,
        iova: u64,
        access: u32,
    ) -> Result<(mr::Mr, u32)> {
        mr::Mr::register(dev, pd, start, length, iova, access)
    }

    fn get_dma_mr(dev: &Device, pd: &Pd, access: u32) -> Result<(mr::Mr, u32)> {
        mr::Mr::dma(dev, pd, access)
    }

    fn dereg_mr(mr: &mr::Mr) -> Result {
        mr.deregister()
    }

    fn rereg_user_mr(
        dev: &Device,
        mr: &mr::Mr,
        flags: u32,
        start: u64,
        length: u64,
        iova: u64,
        access: u32,
        pd: &Pd,
    ) -> Result<u32> {
        mr.reregister(dev, flags, start, length, iova, access, pd)
    }

    fn alloc_mw(dev: &Device, pd: &Pd, type2: bool) -> Result<(mw::Mw, u32)> {
        mw::Mw::alloc(dev, pd, type2)
    }

    fn dealloc_mw(_mw: &mw::Mw) -> Result {
        // Dropping the data unbinds the window.
        Ok(())
    }

    fn create_ah(
        dev: &Device,
        pd: &Pd,
        route: &Route,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<ah::Ah> {
        ah::Ah::new(dev, pd, route, udata)
    }

    fn destroy_ah(_ah: &ah::Ah) {}

    fn create_srq(
        dev: &Device,
        pd: &Pd,
        ctx: &UContext,
        attr: &mut SrqAttr,
        events: &Arc<Events>,
        udata: &mut Udata<'_>,
    ) -> Result<srq::Srq> {
        srq::Srq::new(dev, pd, ctx, attr, events, udata)
    }

    fn modify_srq(
        srq: &srq::Srq,
        ctx: &UContext,
        attr: &SrqAttr,
        mask: u32,
        udata: &mut Udata<'_>,
    ) -> Result {
        srq.modify(ctx, attr, mask, udata)
    }

    fn query_srq(srq: &srq::Srq) -> SrqAttr {
        srq.query()
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
        cqs: (&cq::Cq, &cq::Cq),
        srq: Option<&srq::Srq>,
        events: &Arc<Events>,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<(qp::Qp, u32)> {
        qp::Qp::new(
            dev,
            pd,
            ctx,
            init,
            (&cqs.0.shared, &cqs.1.shared),
            srq.map(|s| &s.shared),
            events,
            udata,
        )
    }

    fn modify_qp(dev: &Device, qp: &qp::Qp, attr: &QpAttr, mask: u32) -> Result {
        qp.modify(
            |r: &Route| dev.query_gid(r.sgid_index.into()).map(|_| ()),
            attr,
            mask,
        )
    }

    fn query_qp(qp: &qp::Qp) -> (QpAttr, QpInit) {
        qp.query()
    }

    fn destroy_qp(qp: &qp::Qp) -> Result {
        qp.destroy();
        Ok(())
    }

    fn post_send(qp: &qp::Qp) -> Result {
        qp.doorbell()
    }

    fn post_send_wr(qp: &qp::Qp, wr: &SendWr<'_, ah::Ah>) -> Result {
        qp.post_send_wr(wr)
    }

    fn post_recv_wr(qp: &qp::Qp, wr: &RecvWr<'_>) -> Result {
        qp.post_recv_wr(wr)
    }

    fn advise_mr(dev: &Device, pd: &Pd, advice: Advice, flush: bool, sges: SgList<'_>) -> Result {
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
            p.queue()
        }
    }

    fn mr_odp_kind(mr: &mr::Mr) -> Option<(&'static CStr, Option<usize>)> {
        mr.odp_kind()
    }

    fn mr_windows(mr: &mr::Mr) -> u32 {
        mr.windows()
    }

    fn mr_odp_stats(mr: &mr::Mr) -> Option<[u64; 5]> {
        mr.odp_stats()
    }

    fn attach_mcast(dev: &Device, qp: &qp::Qp, mgid: &[u8; 16]) -> Result {
        // Only datagram QPs (not QP1) join groups.
        if qp.shared.qp_type != ib::verbs::QpType::Ud {
            return Err(EINVAL);
        }
        dev.tables.groups.attach(mgid, qp.shared.qpn)
    }

    fn detach_mcast(dev: &Device, qp: &qp::Qp, mgid: &[u8; 16]) -> Result {
        dev.tables.groups.detach(mgid, qp.shared.qpn)
    }

    fn odp_stats(dev: &Device) -> [u64; 6] {
        let mut out = [0u64; stats::NAMES.len()];
        stats::read_odp(&dev.tables.odp, &mut out);
        let mut v = [0u64; 6];
        v.copy_from_slice(&out[stats::NAMES.len() - 6..]);
        v
    }

    const COUNTERS: &'static [StatDesc] = &stats::NAMES;

    fn counters(dev: &Device, out: &mut [u64]) {
        dev.tables.stats.read(out);
        stats::read_odp(&dev.tables.odp, out);
    }
}

impl Link for Rodp {
    const TYPE: &'static CStr = c"rodp";

    fn newlink(name: &CStr, ndev: &NetDev) -> Result {
        let alive = Alive::new();
        if link::module_loaded(RXE_MODULE) {
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
        if let Some(dev) = BoundDevice::on(ndev) {
            return Err(if dev.is_owned_by(MODULE) {
                pr_err!("{:?} already has a rodp device\n", ndev.name());
                EEXIST
            } else {
                pr_err!("{:?} already has an rxe device\n", ndev.name());
                EBUSY
            });
        }
        let new = NewDevice {
            name,
            netdev: ndev,
            node_desc: c"rodp",
            owner: MODULE,
        };
        ib::Device::<Rodp>::register(&new, Rodp::new(name, ndev, alive)).map_err(|e| {
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
        if let Some(dev) = BoundDevice::on(ndev).filter(|d| d.is_owned_by(MODULE)) {
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
        if !link::module_loaded(RXE_MODULE) {
            ib::device::unregister_all();
        }
    }
}
