// SPDX-License-Identifier: GPL-2.0

//! Verbs attributes as plain Rust values (`struct ib_qp_attr`, `ib_qp_init_attr`,
//! `rdma_ah_attr`, `ib_srq_attr` and the IBA enums of `include/rdma/ib_verbs.h`).
//!
//! The binding layer converts between these and the C structures, so the driver above it never reads
//! a raw binding.

use super::abi::{SendWqe, Sge, Wc};
use crate::ib::bindings;
use kernel::prelude::*;

/// A QP state (`enum ib_qp_state`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub(crate) enum QpState {
    /// Reset.
    Reset = bindings::ib_qp_state_IB_QPS_RESET,
    /// Initialised.
    Init = bindings::ib_qp_state_IB_QPS_INIT,
    /// Ready to receive.
    Rtr = bindings::ib_qp_state_IB_QPS_RTR,
    /// Ready to send.
    Rts = bindings::ib_qp_state_IB_QPS_RTS,
    /// Send queue drained.
    Sqd = bindings::ib_qp_state_IB_QPS_SQD,
    /// Send queue error.
    Sqe = bindings::ib_qp_state_IB_QPS_SQE,
    /// Error.
    Err = bindings::ib_qp_state_IB_QPS_ERR,
}

impl QpState {
    /// The state for a raw value, if it names one.
    pub(crate) fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            bindings::ib_qp_state_IB_QPS_RESET => Self::Reset,
            bindings::ib_qp_state_IB_QPS_INIT => Self::Init,
            bindings::ib_qp_state_IB_QPS_RTR => Self::Rtr,
            bindings::ib_qp_state_IB_QPS_RTS => Self::Rts,
            bindings::ib_qp_state_IB_QPS_SQD => Self::Sqd,
            bindings::ib_qp_state_IB_QPS_SQE => Self::Sqe,
            bindings::ib_qp_state_IB_QPS_ERR => Self::Err,
            _ => return None,
        })
    }
}

/// A QP transport type (`enum ib_qp_type`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
    /// The general services QP (QP1), a UD QP that ib_mad creates for each port.
    Gsi,
}

impl QpType {
    /// The type `v` names; `None` for the others (SMI, XRC, raw, driver).
    pub(super) fn from_raw(v: u32) -> Option<Self> {
        match v {
            bindings::ib_qp_type_IB_QPT_RC => Some(Self::Rc),
            bindings::ib_qp_type_IB_QPT_UC => Some(Self::Uc),
            bindings::ib_qp_type_IB_QPT_UD => Some(Self::Ud),
            bindings::ib_qp_type_IB_QPT_GSI => Some(Self::Gsi),
            _ => None,
        }
    }

    fn to_raw(self) -> u32 {
        match self {
            Self::Rc => bindings::ib_qp_type_IB_QPT_RC,
            Self::Uc => bindings::ib_qp_type_IB_QPT_UC,
            Self::Gsi => bindings::ib_qp_type_IB_QPT_GSI,
            Self::Ud => bindings::ib_qp_type_IB_QPT_UD,
        }
    }

    /// Whether the QP sends and receives datagrams (UD and the GSI QP).
    pub(crate) fn is_ud(self) -> bool {
        matches!(self, Self::Ud | Self::Gsi)
    }
}

/// Bits of `ib_qp_attr_mask`.
pub(crate) mod qp_mask {
    use crate::ib::bindings;

    /// `qp_state`.
    pub(crate) const STATE: u32 = bindings::ib_qp_attr_mask_IB_QP_STATE;
    /// `cur_qp_state`.
    pub(crate) const CUR_STATE: u32 = bindings::ib_qp_attr_mask_IB_QP_CUR_STATE;
    /// `en_sqd_async_notify`.
    pub(crate) const EN_SQD_ASYNC_NOTIFY: u32 = bindings::ib_qp_attr_mask_IB_QP_EN_SQD_ASYNC_NOTIFY;
    /// `qp_access_flags`.
    pub(crate) const ACCESS_FLAGS: u32 = bindings::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS;
    /// `pkey_index`.
    pub(crate) const PKEY_INDEX: u32 = bindings::ib_qp_attr_mask_IB_QP_PKEY_INDEX;
    /// `port_num`.
    pub(crate) const PORT: u32 = bindings::ib_qp_attr_mask_IB_QP_PORT;
    /// `qkey`.
    pub(crate) const QKEY: u32 = bindings::ib_qp_attr_mask_IB_QP_QKEY;
    /// `ah_attr`.
    pub(crate) const AV: u32 = bindings::ib_qp_attr_mask_IB_QP_AV;
    /// `path_mtu`.
    pub(crate) const PATH_MTU: u32 = bindings::ib_qp_attr_mask_IB_QP_PATH_MTU;
    /// `timeout`.
    pub(crate) const TIMEOUT: u32 = bindings::ib_qp_attr_mask_IB_QP_TIMEOUT;
    /// `retry_cnt`.
    pub(crate) const RETRY_CNT: u32 = bindings::ib_qp_attr_mask_IB_QP_RETRY_CNT;
    /// `rnr_retry`.
    pub(crate) const RNR_RETRY: u32 = bindings::ib_qp_attr_mask_IB_QP_RNR_RETRY;
    /// `rq_psn`.
    pub(crate) const RQ_PSN: u32 = bindings::ib_qp_attr_mask_IB_QP_RQ_PSN;
    /// `max_rd_atomic`.
    pub(crate) const MAX_QP_RD_ATOMIC: u32 = bindings::ib_qp_attr_mask_IB_QP_MAX_QP_RD_ATOMIC;
    /// `min_rnr_timer`.
    pub(crate) const MIN_RNR_TIMER: u32 = bindings::ib_qp_attr_mask_IB_QP_MIN_RNR_TIMER;
    /// `sq_psn`.
    pub(crate) const SQ_PSN: u32 = bindings::ib_qp_attr_mask_IB_QP_SQ_PSN;
    /// `max_dest_rd_atomic`.
    pub(crate) const MAX_DEST_RD_ATOMIC: u32 = bindings::ib_qp_attr_mask_IB_QP_MAX_DEST_RD_ATOMIC;
    /// `cap`.
    pub(crate) const CAP: u32 = bindings::ib_qp_attr_mask_IB_QP_CAP;
    /// `dest_qp_num`.
    pub(crate) const DEST_QPN: u32 = bindings::ib_qp_attr_mask_IB_QP_DEST_QPN;
}

/// Bits of `enum ib_access_flags` (also the `IBV_ACCESS_*` values).
pub(crate) mod access {
    use crate::ib::bindings;

    /// Local write.
    pub(crate) const LOCAL_WRITE: u32 = bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE;
    /// Remote write.
    pub(crate) const REMOTE_WRITE: u32 = bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE;
    /// Remote read.
    pub(crate) const REMOTE_READ: u32 = bindings::ib_access_flags_IB_ACCESS_REMOTE_READ;
    /// Remote atomic.
    pub(crate) const REMOTE_ATOMIC: u32 = bindings::ib_access_flags_IB_ACCESS_REMOTE_ATOMIC;
    /// On-demand paging.
    pub(crate) const ON_DEMAND: u32 = bindings::ib_access_flags_IB_ACCESS_ON_DEMAND;
    /// The memory is backed by huge pages (a hint: rodp translates 4 KiB pages either way).
    pub(crate) const HUGETLB: u32 = bindings::ib_access_flags_IB_ACCESS_HUGETLB;
    /// Memory windows may be bound to the MR.
    pub(crate) const MW_BIND: u32 = bindings::ib_access_flags_IB_ACCESS_MW_BIND;
    /// A window addressed from 0 rather than by virtual address.
    pub(crate) const ZERO_BASED: u32 = bindings::ib_access_flags_IB_ZERO_BASED;
    /// Flags a consumer may pass that a device is free to ignore.
    pub(crate) const OPTIONAL: u32 = bindings::ib_access_flags_IB_ACCESS_OPTIONAL;
    /// A FLUSH may make writes to the memory globally visible.
    pub(crate) const FLUSH_GLOBAL: u32 = bindings::ib_access_flags_IB_ACCESS_FLUSH_GLOBAL;
    /// A FLUSH may make writes to the memory persistent.
    pub(crate) const FLUSH_PERSISTENT: u32 = bindings::ib_access_flags_IB_ACCESS_FLUSH_PERSISTENT;
}

/// A FLUSH's placement types (`enum ib_placement_type`) and selectivity levels
/// (`enum ib_selectivity_level`).
pub(crate) mod flush {
    use crate::ib::bindings;

    /// Writes made globally visible.
    pub(crate) const GLOBAL: u8 = bindings::ib_placement_type_IB_FLUSH_GLOBAL as u8;
    /// Writes made persistent.
    pub(crate) const PERSISTENT: u8 = bindings::ib_placement_type_IB_FLUSH_PERSISTENT as u8;
    /// The range the request names.
    pub(crate) const RANGE: u8 = bindings::ib_selectivity_level_IB_FLUSH_RANGE as u8;
    /// The whole MR of the key (address and length ignored).
    pub(crate) const MR: u8 = bindings::ib_selectivity_level_IB_FLUSH_MR as u8;
}

/// A global route: where a packet goes and from which GID (`struct ib_global_route`).
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Route {
    /// Destination GID.
    pub(crate) dgid: [u8; 16],
    /// Flow label.
    pub(crate) flow_label: u32,
    /// Index of the source GID in the port's table.
    pub(crate) sgid_index: u8,
    /// Hop limit.
    pub(crate) hop_limit: u8,
    /// Traffic class.
    pub(crate) traffic_class: u8,
    /// Service level.
    pub(crate) sl: u8,
    /// Port.
    pub(crate) port_num: u32,
}

impl Route {
    /// Reads the route of an address vector.
    pub(crate) fn from_ah_attr(a: &bindings::rdma_ah_attr) -> Self {
        // SAFETY: `ib_gid` is a union of plain bytes.
        let dgid = unsafe { *a.grh.dgid.raw };
        Self {
            dgid,
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
            sl: a.sl,
            port_num: a.port_num,
        }
    }

    fn to_ah_attr(self, a: &mut bindings::rdma_ah_attr) {
        a.type_ = bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE;
        a.ah_flags = bindings::ib_ah_flags_IB_AH_GRH as u8;
        a.grh.dgid.raw = core::mem::ManuallyDrop::new(self.dgid);
        a.grh.flow_label = self.flow_label;
        a.grh.sgid_index = self.sgid_index;
        a.grh.hop_limit = self.hop_limit;
        a.grh.traffic_class = self.traffic_class;
        a.sl = self.sl;
        a.port_num = self.port_num;
    }
}

/// Queue sizes of a QP (`struct ib_qp_cap`).
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct QpCap {
    /// Send queue depth.
    pub(crate) max_send_wr: u32,
    /// Receive queue depth.
    pub(crate) max_recv_wr: u32,
    /// Scatter/gather entries per send WR.
    pub(crate) max_send_sge: u32,
    /// Scatter/gather entries per receive WR.
    pub(crate) max_recv_sge: u32,
    /// Inline data bytes per send WR.
    pub(crate) max_inline_data: u32,
}

impl QpCap {
    fn from_raw(c: &bindings::ib_qp_cap) -> Self {
        Self {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        }
    }

    fn to_raw(self, c: &mut bindings::ib_qp_cap) {
        c.max_send_wr = self.max_send_wr;
        c.max_recv_wr = self.max_recv_wr;
        c.max_send_sge = self.max_send_sge;
        c.max_recv_sge = self.max_recv_sge;
        c.max_inline_data = self.max_inline_data;
    }
}

/// What a QP is created with (`struct ib_qp_init_attr`), minus the objects it links to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpInit {
    /// Transport type.
    pub(crate) qp_type: QpType,
    /// Queue sizes; the driver writes back what it allocated.
    pub(crate) cap: QpCap,
    /// Whether every send WR completes (`IB_SIGNAL_ALL_WR`).
    pub(crate) sig_all: bool,
    /// Whether a shared receive queue is attached.
    pub(crate) has_srq: bool,
    /// `create_flags`, none of which rodp supports.
    pub(crate) create_flags: u32,
    /// Whether an XRC domain or a receive WQ indirection table is attached.
    pub(crate) has_xrcd_or_rwq_ind_tbl: bool,
}

impl QpInit {
    /// The attributes of `a`; `EOPNOTSUPP` for a QP type rodp does not know.
    pub(super) fn from_raw(a: &bindings::ib_qp_init_attr) -> Result<Self> {
        Ok(Self {
            qp_type: QpType::from_raw(a.qp_type).ok_or(EOPNOTSUPP)?,
            cap: QpCap::from_raw(&a.cap),
            sig_all: a.sq_sig_type == bindings::ib_sig_type_IB_SIGNAL_ALL_WR,
            has_srq: !a.srq.is_null(),
            create_flags: a.create_flags,
            has_xrcd_or_rwq_ind_tbl: !a.xrcd.is_null() || !a.rwq_ind_tbl.is_null(),
        })
    }

    pub(super) fn to_raw(self, a: &mut bindings::ib_qp_init_attr) {
        a.qp_type = self.qp_type.to_raw();
        self.cap.to_raw(&mut a.cap);
        a.sq_sig_type = if self.sig_all {
            bindings::ib_sig_type_IB_SIGNAL_ALL_WR
        } else {
            bindings::ib_sig_type_IB_SIGNAL_REQ_WR
        };
    }
}

/// QP attributes (`struct ib_qp_attr`): the fields rodp implements.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpAttr {
    /// Target state (`None`: not a state).
    pub(crate) qp_state: Option<QpState>,
    /// Assumed current state (`None`: not a state).
    pub(crate) cur_qp_state: Option<QpState>,
    /// Path MTU (`IB_MTU_*`).
    pub(crate) path_mtu: u32,
    /// Q_Key (UD).
    pub(crate) qkey: u32,
    /// Expected PSN of the responder.
    pub(crate) rq_psn: u32,
    /// Next PSN of the requester.
    pub(crate) sq_psn: u32,
    /// Connected QP number (RC, UC).
    pub(crate) dest_qp_num: u32,
    /// Remote access the responder allows.
    pub(crate) qp_access_flags: u32,
    /// Queue sizes.
    pub(crate) cap: QpCap,
    /// Primary path.
    pub(crate) route: Route,
    /// P_Key index.
    pub(crate) pkey_index: u16,
    /// Whether entering SQD raises an event.
    pub(crate) en_sqd_async_notify: bool,
    /// Whether the send queue is still draining in SQD.
    pub(crate) sq_draining: bool,
    /// Outstanding RDMA reads and atomics as requester.
    pub(crate) max_rd_atomic: u8,
    /// Outstanding RDMA reads and atomics as responder.
    pub(crate) max_dest_rd_atomic: u8,
    /// RNR NAK timer code the responder sends.
    pub(crate) min_rnr_timer: u8,
    /// Port.
    pub(crate) port_num: u32,
    /// Local ACK timeout code.
    pub(crate) timeout: u8,
    /// Transport retries.
    pub(crate) retry_cnt: u8,
    /// RNR retries (7: infinite).
    pub(crate) rnr_retry: u8,
}

impl QpAttr {
    pub(super) fn from_raw(a: &bindings::ib_qp_attr) -> Self {
        Self {
            qp_state: QpState::from_raw(a.qp_state),
            cur_qp_state: QpState::from_raw(a.cur_qp_state),
            path_mtu: a.path_mtu,
            qkey: a.qkey,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            dest_qp_num: a.dest_qp_num,
            qp_access_flags: a.qp_access_flags as u32,
            cap: QpCap::from_raw(&a.cap),
            route: Route::from_ah_attr(&a.ah_attr),
            pkey_index: a.pkey_index,
            en_sqd_async_notify: a.en_sqd_async_notify != 0,
            sq_draining: a.sq_draining != 0,
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            port_num: a.port_num,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
        }
    }

    pub(super) fn to_raw(self, a: &mut bindings::ib_qp_attr) {
        a.qp_state = self
            .qp_state
            .map_or(bindings::ib_qp_state_IB_QPS_ERR, |s| s as u32);
        a.cur_qp_state = self
            .cur_qp_state
            .map_or(bindings::ib_qp_state_IB_QPS_ERR, |s| s as u32);
        a.path_mtu = self.path_mtu;
        a.qkey = self.qkey;
        a.rq_psn = self.rq_psn;
        a.sq_psn = self.sq_psn;
        a.dest_qp_num = self.dest_qp_num;
        a.qp_access_flags = self.qp_access_flags as i32;
        self.cap.to_raw(&mut a.cap);
        self.route.to_ah_attr(&mut a.ah_attr);
        a.pkey_index = self.pkey_index;
        a.en_sqd_async_notify = self.en_sqd_async_notify.into();
        a.sq_draining = self.sq_draining.into();
        a.max_rd_atomic = self.max_rd_atomic;
        a.max_dest_rd_atomic = self.max_dest_rd_atomic;
        a.min_rnr_timer = self.min_rnr_timer;
        a.port_num = self.port_num;
        a.timeout = self.timeout;
        a.retry_cnt = self.retry_cnt;
        a.rnr_retry = self.rnr_retry;
    }
}

/// Whether the IBA allows moving a QP of `qp_type` from `cur` to `next` with attributes `mask`
/// (ib_core's table: required and optional attributes per transition).
pub(crate) fn modify_qp_is_ok(cur: QpState, next: QpState, qp_type: QpType, mask: u32) -> bool {
    // SAFETY: A pure function of its arguments.
    unsafe { bindings::ib_modify_qp_is_ok(cur as u32, next as u32, qp_type.to_raw(), mask) }
}

/// SRQ attributes (`struct ib_srq_attr`).
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct SrqAttr {
    /// Queue depth.
    pub(crate) max_wr: u32,
    /// Scatter/gather entries per WR.
    pub(crate) max_sge: u32,
    /// Limit below which the SRQ limit event fires (0: disarmed).
    pub(crate) srq_limit: u32,
}

impl SrqAttr {
    pub(super) fn from_raw(a: &bindings::ib_srq_attr) -> Self {
        Self {
            max_wr: a.max_wr,
            max_sge: a.max_sge,
            srq_limit: a.srq_limit,
        }
    }

    pub(super) fn to_raw(self, a: &mut bindings::ib_srq_attr) {
        a.max_wr = self.max_wr;
        a.max_sge = self.max_sge;
        a.srq_limit = self.srq_limit;
    }
}

/// SRQ types (`enum ib_srq_type`).
pub(crate) mod srq_type {
    use crate::ib::bindings;

    /// A plain shared receive queue.
    pub(crate) const BASIC: u32 = bindings::ib_srq_type_IB_SRQT_BASIC;
}

/// Bits of `enum ib_srq_attr_mask`.
pub(crate) mod srq_mask {
    use crate::ib::bindings;

    /// Resize.
    pub(crate) const MAX_WR: u32 = bindings::ib_srq_attr_mask_IB_SRQ_MAX_WR;
    /// Arm the limit.
    pub(crate) const LIMIT: u32 = bindings::ib_srq_attr_mask_IB_SRQ_LIMIT;
}

/// Asynchronous events rodp raises (`enum ib_event_type`).
#[derive(Clone, Copy, Debug)]
#[repr(u32)]
pub(crate) enum Event {
    /// A completion could not be written: the CQ overflowed.
    CqErr = bindings::ib_event_type_IB_EVENT_CQ_ERR,
    /// A QP entered the error state for a local reason.
    QpFatal = bindings::ib_event_type_IB_EVENT_QP_FATAL,
    /// A responder saw an invalid request.
    QpReqErr = bindings::ib_event_type_IB_EVENT_QP_REQ_ERR,
    /// A responder saw an access violation.
    QpAccessErr = bindings::ib_event_type_IB_EVENT_QP_ACCESS_ERR,
    /// The first message arrived in RTR.
    CommEst = bindings::ib_event_type_IB_EVENT_COMM_EST,
    /// The send queue drained in SQD.
    SqDrained = bindings::ib_event_type_IB_EVENT_SQ_DRAINED,
    /// The last WQE of a QP on an SRQ was consumed after the QP entered error.
    LastWqeReached = bindings::ib_event_type_IB_EVENT_QP_LAST_WQE_REACHED,
    /// Fewer WQEs than the armed limit remain on an SRQ.
    SrqLimitReached = bindings::ib_event_type_IB_EVENT_SRQ_LIMIT_REACHED,
}

/// A completion status (`enum ib_wc_status`, also `IBV_WC_*`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[repr(u32)]
pub(crate) enum WcStatus {
    /// Success.
    #[default]
    Success = bindings::ib_wc_status_IB_WC_SUCCESS,
    /// Local length error.
    LocLenErr = bindings::ib_wc_status_IB_WC_LOC_LEN_ERR,
    /// Local QP operation error.
    LocQpOpErr = bindings::ib_wc_status_IB_WC_LOC_QP_OP_ERR,
    /// Local protection error.
    LocProtErr = bindings::ib_wc_status_IB_WC_LOC_PROT_ERR,
    /// Flushed.
    WrFlushErr = bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR,
    /// A memory window bind failed.
    MwBindErr = bindings::ib_wc_status_IB_WC_MW_BIND_ERR,
    /// Remote invalid request.
    RemInvReqErr = bindings::ib_wc_status_IB_WC_REM_INV_REQ_ERR,
    /// Remote access error.
    RemAccessErr = bindings::ib_wc_status_IB_WC_REM_ACCESS_ERR,
    /// Remote operational error.
    RemOpErr = bindings::ib_wc_status_IB_WC_REM_OP_ERR,
    /// Transport retries exceeded.
    RetryExcErr = bindings::ib_wc_status_IB_WC_RETRY_EXC_ERR,
    /// RNR retries exceeded.
    RnrRetryExcErr = bindings::ib_wc_status_IB_WC_RNR_RETRY_EXC_ERR,
    /// Any other failure.
    GeneralErr = bindings::ib_wc_status_IB_WC_GENERAL_ERR,
}

impl WcStatus {
    /// The status a CQ entry carries, `GeneralErr` for a value rodp never writes.
    pub(crate) fn from_raw(v: u32) -> Self {
        [
            Self::Success,
            Self::LocLenErr,
            Self::LocQpOpErr,
            Self::LocProtErr,
            Self::WrFlushErr,
            Self::MwBindErr,
            Self::RemInvReqErr,
            Self::RemAccessErr,
            Self::RemOpErr,
            Self::RetryExcErr,
            Self::RnrRetryExcErr,
        ]
        .into_iter()
        .find(|s| *s as u32 == v)
        .unwrap_or(Self::GeneralErr)
    }
}

/// Completion opcodes (`enum ib_uverbs_wc_opcode`, `IBV_WC_RECV*`).
pub(crate) mod wc_opcode {
    use crate::ib::bindings;

    /// Send.
    pub(crate) const SEND: u32 = bindings::ib_uverbs_wc_opcode_IB_UVERBS_WC_SEND;
    /// RDMA write.
    pub(crate) const RDMA_WRITE: u32 = bindings::ib_uverbs_wc_opcode_IB_UVERBS_WC_RDMA_WRITE;
    /// RDMA read.
    pub(crate) const RDMA_READ: u32 = bindings::ib_uverbs_wc_opcode_IB_UVERBS_WC_RDMA_READ;
    /// Compare and swap.
    pub(crate) const COMP_SWAP: u32 = bindings::ib_uverbs_wc_opcode_IB_UVERBS_WC_COMP_SWAP;
    /// Fetch and add.
    pub(crate) const FETCH_ADD: u32 = bindings::ib_uverbs_wc_opcode_IB_UVERBS_WC_FETCH_ADD;
    /// Flush.
    pub(crate) const FLUSH: u32 = bindings::ib_uverbs_wc_opcode_IB_UVERBS_WC_FLUSH;
    /// Atomic write.
    pub(crate) const ATOMIC_WRITE: u32 = bindings::ib_uverbs_wc_opcode_IB_UVERBS_WC_ATOMIC_WRITE;
    /// Receive.
    pub(crate) const RECV: u32 = bindings::ib_wc_opcode_IB_WC_RECV;
    /// A memory window bind.
    pub(crate) const BIND_MW: u32 = bindings::ib_uverbs_wc_opcode_IB_UVERBS_WC_BIND_MW;
    /// A local invalidate.
    pub(crate) const LOCAL_INV: u32 = bindings::ib_uverbs_wc_opcode_IB_UVERBS_WC_LOCAL_INV;
    /// A fast registration (kernel consumers only).
    pub(crate) const REG_MR: u32 = bindings::ib_wc_opcode_IB_WC_REG_MR;
    /// Receive of an RDMA write with immediate.
    pub(crate) const RECV_RDMA_WITH_IMM: u32 = bindings::ib_wc_opcode_IB_WC_RECV_RDMA_WITH_IMM;
}

/// Completion flags (`enum ib_wc_flags`).
pub(crate) mod wc_flags {
    use crate::ib::bindings;

    /// A GRH precedes the data.
    pub(crate) const GRH: u32 = bindings::ib_wc_flags_IB_WC_GRH;
    /// Immediate data is valid.
    pub(crate) const WITH_IMM: u32 = bindings::ib_wc_flags_IB_WC_WITH_IMM;
    /// The message invalidated the key in `imm_data`, as a CQ ring carries it: libibverbs'
    /// `IBV_WC_WITH_INV` (the rxe provider copies ring flags to `ibv_wc` unchanged; ib_core's
    /// `IB_WC_WITH_INVALIDATE`, bit 2, would read as `IBV_WC_IP_CSUM_OK` there).
    pub(crate) const WITH_INVALIDATE: u32 = 1 << 3;
    /// `WITH_INVALIDATE` for kernel consumers.
    pub(crate) const KERNEL_WITH_INVALIDATE: u32 = bindings::ib_wc_flags_IB_WC_WITH_INVALIDATE;
}

/// A work request opcode (`enum ib_wr_opcode`, also `IBV_WR_*`), parsed once from a WQE.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub(crate) enum WrOpcode {
    /// RDMA write.
    RdmaWrite = bindings::ib_wr_opcode_IB_WR_RDMA_WRITE,
    /// RDMA write with immediate.
    RdmaWriteWithImm = bindings::ib_wr_opcode_IB_WR_RDMA_WRITE_WITH_IMM,
    /// Send.
    Send = bindings::ib_wr_opcode_IB_WR_SEND,
    /// Send with immediate.
    SendWithImm = bindings::ib_wr_opcode_IB_WR_SEND_WITH_IMM,
    /// RDMA read.
    RdmaRead = bindings::ib_wr_opcode_IB_WR_RDMA_READ,
    /// Compare and swap.
    AtomicCmpAndSwp = bindings::ib_wr_opcode_IB_WR_ATOMIC_CMP_AND_SWP,
    /// Fetch and add.
    AtomicFetchAndAdd = bindings::ib_wr_opcode_IB_WR_ATOMIC_FETCH_AND_ADD,
    /// Invalidate a key locally.
    LocalInv = bindings::ib_wr_opcode_IB_WR_LOCAL_INV,
    /// Bind a memory window.
    BindMw = bindings::ib_wr_opcode_IB_WR_BIND_MW,
    /// Send, invalidating a key at the responder.
    SendWithInv = bindings::ib_wr_opcode_IB_WR_SEND_WITH_INV,
    /// Make the writes to a range (or an MR) globally visible.
    Flush = bindings::ib_wr_opcode_IB_WR_FLUSH,
    /// Write 8 bytes at once.
    AtomicWrite = bindings::ib_wr_opcode_IB_WR_ATOMIC_WRITE,
    /// Register the pages `ib_map_mr_sg` gave an MR of `ib_alloc_mr` (kernel consumers only).
    RegMr = bindings::ib_wr_opcode_IB_WR_REG_MR,
}

impl WrOpcode {
    /// Every opcode rodp executes.
    const ALL: [Self; 13] = [
        Self::RdmaWrite,
        Self::RdmaWriteWithImm,
        Self::Send,
        Self::SendWithImm,
        Self::RdmaRead,
        Self::AtomicCmpAndSwp,
        Self::AtomicFetchAndAdd,
        Self::LocalInv,
        Self::BindMw,
        Self::SendWithInv,
        Self::Flush,
        Self::AtomicWrite,
        Self::RegMr,
    ];

    /// The opcode `v` names, if rodp executes it.
    pub(crate) fn from_raw(v: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|o| *o as u32 == v)
    }

    /// Whether the responder answers with data (reads and atomics), so the requester needs
    /// `max_rd_atomic` credits and writable local memory.
    pub(crate) fn is_read_like(self) -> bool {
        matches!(
            self,
            Self::RdmaRead | Self::AtomicCmpAndSwp | Self::AtomicFetchAndAdd
        )
    }

    /// Whether the operation takes one of the responder's `max_dest_rd_atomic` resources, so
    /// the requester needs a `max_rd_atomic` credit (reads, atomics and atomic writes, as rxe).
    pub(crate) fn needs_rd_atomic(self) -> bool {
        self.is_read_like() || self == Self::AtomicWrite
    }

    /// Whether the operation is an atomic.
    pub(crate) fn is_atomic(self) -> bool {
        matches!(self, Self::AtomicCmpAndSwp | Self::AtomicFetchAndAdd)
    }

    /// Whether the message consumes a receive WQE as a send.
    pub(crate) fn is_send(self) -> bool {
        matches!(self, Self::Send | Self::SendWithImm | Self::SendWithInv)
    }

    /// The opcode of the send-side completion (`IB_UVERBS_WC_*`).
    pub(crate) fn wc_opcode(self) -> u32 {
        match self {
            Self::RdmaWrite | Self::RdmaWriteWithImm => wc_opcode::RDMA_WRITE,
            Self::RdmaRead => wc_opcode::RDMA_READ,
            Self::AtomicCmpAndSwp => wc_opcode::COMP_SWAP,
            Self::AtomicFetchAndAdd => wc_opcode::FETCH_ADD,
            Self::BindMw => wc_opcode::BIND_MW,
            Self::LocalInv => wc_opcode::LOCAL_INV,
            Self::Send | Self::SendWithImm | Self::SendWithInv => wc_opcode::SEND,
            Self::Flush => wc_opcode::FLUSH,
            Self::AtomicWrite => wc_opcode::ATOMIC_WRITE,
            Self::RegMr => wc_opcode::REG_MR,
        }
    }

    /// Whether a QP of type `t` may post it (IBA table 90: datagrams carry sends only; UC has
    /// no reads or atomics, and no opcode that carries a key to invalidate; FLUSH and ATOMIC
    /// WRITE are RC operations).
    pub(crate) fn valid_for(self, t: QpType) -> bool {
        match t {
            QpType::Rc => true,
            QpType::Uc => {
                !self.needs_rd_atomic() && !matches!(self, Self::SendWithInv | Self::Flush)
            }
            QpType::Ud | QpType::Gsi => matches!(self, Self::Send | Self::SendWithImm),
        }
    }
}

/// Send flags (`enum ib_send_flags`, also `IBV_SEND_*`).
pub(crate) mod send_flags {
    use crate::ib::bindings;

    /// Wait for the READs and atomics before it to complete.
    pub(crate) const FENCE: u32 = bindings::ib_send_flags_IB_SEND_FENCE as u32;
    /// Generate a completion.
    pub(crate) const SIGNALED: u32 = bindings::ib_send_flags_IB_SEND_SIGNALED as u32;
    /// Solicited event at the receiver.
    pub(crate) const SOLICITED: u32 = bindings::ib_send_flags_IB_SEND_SOLICITED as u32;
    /// Data is inline in the WQE.
    pub(crate) const INLINE: u32 = bindings::ib_send_flags_IB_SEND_INLINE as u32;
}

/// CQ notification request (`enum ib_cq_notify_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Notify {
    /// Not armed.
    None,
    /// Next solicited completion.
    Solicited,
    /// Next completion.
    Next,
}

impl Notify {
    pub(super) fn from_raw(flags: u32) -> Result<(Self, bool)> {
        let arm = match flags & bindings::ib_cq_notify_flags_IB_CQ_SOLICITED_MASK {
            bindings::ib_cq_notify_flags_IB_CQ_SOLICITED => Self::Solicited,
            bindings::ib_cq_notify_flags_IB_CQ_NEXT_COMP => Self::Next,
            _ => return Err(EINVAL),
        };
        let report = flags & bindings::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS != 0;
        Ok((arm, report))
    }
}

/// Bits of `enum ib_device_cap_flags`.
pub(crate) mod device_cap {
    use crate::ib::bindings;

    /// RNR NAKs are generated.
    pub(crate) const RC_RNR_NAK_GEN: u64 =
        bindings::ib_device_cap_flags_IB_DEVICE_RC_RNR_NAK_GEN as u64;
    /// SRQs can be resized.
    pub(crate) const SRQ_RESIZE: u64 = bindings::ib_device_cap_flags_IB_DEVICE_SRQ_RESIZE as u64;
    /// `sys_image_guid` is meaningful.
    pub(crate) const SYS_IMAGE_GUID: u64 =
        bindings::ib_device_cap_flags_IB_DEVICE_SYS_IMAGE_GUID as u64;
    /// Port active events are raised.
    pub(crate) const PORT_ACTIVE_EVENT: u64 =
        bindings::ib_device_cap_flags_IB_DEVICE_PORT_ACTIVE_EVENT as u64;
    /// Memory windows (type 1).
    pub(crate) const MEM_WINDOW: u64 = bindings::ib_device_cap_flags_IB_DEVICE_MEM_WINDOW as u64;
    /// Type 2B memory windows.
    pub(crate) const MEM_WINDOW_TYPE_2B: u64 =
        bindings::ib_device_cap_flags_IB_DEVICE_MEM_WINDOW_TYPE_2B as u64;
    /// FLUSH with the global placement type.
    pub(crate) const FLUSH_GLOBAL: u64 =
        bindings::ib_device_cap_flags_IB_DEVICE_FLUSH_GLOBAL as u64;
    /// ATOMIC WRITE.
    pub(crate) const ATOMIC_WRITE: u64 =
        bindings::ib_device_cap_flags_IB_DEVICE_ATOMIC_WRITE as u64;
    /// Fast registration (`IB_WR_REG_MR`), local and remote invalidation of its keys.
    pub(crate) const MEM_MGT_EXTENSIONS: u64 =
        bindings::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS as u64;
}

/// Bits of `enum ib_mr_rereg_flags`.
pub(crate) mod rereg {
    use crate::ib::bindings;

    /// New address, length and iova.
    pub(crate) const TRANS: u32 = bindings::ib_mr_rereg_flags_IB_MR_REREG_TRANS;
    /// New PD.
    pub(crate) const PD: u32 = bindings::ib_mr_rereg_flags_IB_MR_REREG_PD;
    /// New access rights.
    pub(crate) const ACCESS: u32 = bindings::ib_mr_rereg_flags_IB_MR_REREG_ACCESS;
}

/// A kernel consumer's scatter/gather list (`struct ib_sge` array of a work request).
#[derive(Clone, Copy)]
pub(crate) struct SgList<'a>(pub(super) &'a [bindings::ib_sge]);

impl SgList<'_> {
    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The entries.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Sge> + '_ {
        self.0.iter().map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
    }
}

/// A kernel consumer's send work request: the fields of `struct ib_send_wr` and its
/// `ib_rdma_wr` / `ib_atomic_wr` / `ib_ud_wr` container, as a WQE without its AH number.
pub(crate) struct SendWr<'a, A> {
    /// The WQE's fixed part; `ah_num`, `length` and `num_sge` are left to the driver.
    pub(crate) wqe: SendWqe,
    /// The UD destination's address handle.
    pub(crate) ah: Option<&'a A>,
    /// The data.
    pub(crate) sges: SgList<'a>,
}

/// A kernel consumer's receive work request (`struct ib_recv_wr`).
pub(crate) struct RecvWr<'a> {
    /// Consumer's id (`wr_id` or `wr_cqe`).
    pub(crate) wr_id: u64,
    /// Where the data goes.
    pub(crate) sges: SgList<'a>,
}

/// The work completions a kernel consumer polls into (`struct ib_wc` array).
pub(crate) struct WcOut<'a>(pub(super) &'a mut [bindings::ib_wc]);

impl WcOut<'_> {
    /// Room for this many completions.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Fills entry `i` from `wc`, for the QP whose events `qp` are (the consumer finds its
    /// `ib_qp` there). Returns false, leaving the entry, when the QP is already destroyed.
    pub(crate) fn set(&mut self, i: usize, wc: &Wc, qp: &super::event::Events) -> bool {
        let Some(raw) = qp.qp_raw() else {
            return false;
        };
        let Some(o) = self.0.get_mut(i) else {
            return false;
        };
        // SAFETY: All-zero is a valid `ib_wc` (integers, a NULL pointer, unions of them).
        *o = unsafe { core::mem::zeroed() };
        o.__bindgen_anon_1.wr_id = core::mem::ManuallyDrop::new(wc.wr_id);
        o.status = wc.status as u32;
        // The uverbs completion opcodes have the kernel's values.
        o.opcode = wc.opcode;
        o.byte_len = wc.byte_len;
        o.qp = raw;
        o.ex.imm_data = core::mem::ManuallyDrop::new(wc.imm_data);
        o.src_qp = wc.src_qp;
        let mut flags = wc.wc_flags & (wc_flags::GRH | wc_flags::WITH_IMM);
        if wc.wc_flags & wc_flags::WITH_INVALIDATE != 0 {
            flags |= wc_flags::KERNEL_WITH_INVALIDATE;
        }
        o.wc_flags = flags as i32;
        o.port_num = wc.port_num.into();
        true
    }
}

/// What `ibv_advise_mr` asks for (`enum ib_uverbs_advise_mr_advice`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Advice {
    /// Fault the range in for reading.
    Prefetch,
    /// Fault the range in for writing.
    PrefetchWrite,
    /// Map what is present, without faulting.
    PrefetchNoFault,
}

/// Bits of the flags of `ibv_advise_mr` (`enum ib_uverbs_advise_mr_flag`).
pub(crate) mod advise_flags {
    use crate::ib::bindings;

    /// Finish before returning.
    pub(crate) const FLUSH: u32 = bindings::ib_uverbs_advise_mr_flag_IB_UVERBS_ADVISE_MR_FLAG_FLUSH;
}

impl Advice {
    pub(super) fn from_raw(v: u32) -> Result<Self> {
        Ok(match v {
            bindings::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH => {
                Self::Prefetch
            }
            bindings::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE => {
                Self::PrefetchWrite
            }
            bindings::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT => {
                Self::PrefetchNoFault
            }
            _ => return Err(EOPNOTSUPP),
        })
    }
}
