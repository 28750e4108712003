// SPDX-License-Identifier: GPL-2.0

//! The engine (rxe's `rxe_req.c`, `rxe_resp.c`, `rxe_comp.c`): runs the send queue of a QP on
//! the module's workqueue, executes each WQE against the destination QP, and completes it.
//!
//! The requester builds a [`Message`] per WQE and hands it to the transport ([`deliver`]),
//! which answers with a [`Reply`] the way a responder's ACK, NAK or RNR NAK would. Peers on
//! this host are served directly: the responder copies between the two QPs' registered memory
//! without building packets. A packet transport (RoCEv2 to another host) plugs in at
//! [`deliver`] without changing the requester or the verbs layer.

use crate::{
    device::Device,
    ib::{
        abi::{self, SendWqe, Sge, Wc},
        netdev,
        umem::AtomicOp,
        verbs::{
            access, send_flags, wc_flags, wc_opcode, wc_status, wr_opcode, Event, QpState, QpType,
        },
    },
    mcast,
    mr::{Fault, MrShared},
    qp::{QpShared, RecvSide, SendSide},
    stats::{packets, Counter},
};
use kernel::{
    prelude::*,
    sync::{atomic::Acquire, Arc},
    time::{delay::fsleep, Delta},
};

/// WQEs one run of a requester handles before yielding the worker.
const BUDGET: u32 = 256;

/// Largest message (2 GiB, the IBA limit).
const MAX_MSG: u64 = 1 << 31;

/// Bytes of GRH before the data of a UD receive.
const GRH_LEN: usize = 40;

/// RNR NAK timer codes in microseconds (IBA table 45; code 0 is the longest).
const RNR_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
    5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760,
    327_680, 491_520,
];

/// Per-QP scratch space the engine reuses for every WQE, so the data path does not allocate.
pub(crate) struct Scratch {
    sges: KVec<Sge>,
    segs: KVec<Seg>,
}

impl Scratch {
    /// Room for `max_sge` entries.
    pub(crate) fn new(max_sge: u32) -> Result<Self> {
        Ok(Self {
            sges: KVec::with_capacity(max_sge as usize, GFP_KERNEL)?,
            segs: KVec::with_capacity(max_sge as usize, GFP_KERNEL)?,
        })
    }
}

/// A registered memory range taking part in a transfer.
pub(crate) struct Seg {
    mr: Arc<MrShared>,
    off: usize,
    len: usize,
}

/// Where message data comes from.
#[derive(Clone, Copy)]
pub(crate) enum Src<'a> {
    /// Inline data from the WQE.
    Inline(&'a [u8]),
    /// Registered memory.
    Segs(&'a [Seg]),
}

/// One message from a requester to a responder QP.
pub(crate) struct Message<'a> {
    /// `IB_WR_*` operation.
    pub(crate) opcode: u32,
    /// Sending QP number.
    pub(crate) src_qpn: u32,
    /// Immediate data (network order).
    pub(crate) imm: u32,
    /// Whether the receiver's solicited event fires.
    pub(crate) solicited: bool,
    /// Payload length (RDMA read: length to read).
    pub(crate) len: usize,
    /// Payload of sends and writes.
    pub(crate) data: Src<'a>,
    /// Remote address of RDMA and atomic operations.
    pub(crate) remote_addr: u64,
    /// Remote key of RDMA and atomic operations.
    pub(crate) rkey: u32,
    /// The atomic operation.
    pub(crate) atomic: Option<AtomicOp>,
    /// Where read data goes (the requester's memory).
    pub(crate) read_into: &'a [Seg],
    /// UD: Q_Key and the GRH the receiver sees.
    pub(crate) ud: Option<Ud>,
}

/// UD addressing carried with a message.
#[derive(Clone, Copy)]
pub(crate) struct Ud {
    /// Q_Key of the message.
    pub(crate) qkey: u32,
    /// Sender's GID.
    pub(crate) sgid: [u8; 16],
    /// Destination GID.
    pub(crate) dgid: [u8; 16],
    /// Hop limit.
    pub(crate) hop_limit: u8,
    /// Traffic class.
    pub(crate) tclass: u8,
}

/// A NAK code.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Nak {
    /// Invalid request.
    InvReq,
    /// Remote access error.
    Access,
    /// Remote operational error.
    Op,
}

/// The responder's answer.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Reply {
    /// Done; for atomics, the original value.
    Ack(u64),
    /// Refused.
    Nak(Nak),
    /// No receive WQE: retry after the given RNR timer code.
    Rnr(u8),
    /// Silently dropped (destination not ready, wrong Q_Key, ...).
    Drop,
}

/// What executing a WQE came to.
enum Exec {
    /// Complete with a status; `byte_len` for reads and atomics.
    Done(u32, u32),
    /// The responder had no receive WQE.
    Rnr(u8),
    /// No answer: retry later.
    NoAnswer,
}

enum Step {
    Idle,
    Again,
    Wait(Delta),
}

/// Runs a QP's send queue until it is empty, blocked, or the budget is used.
pub(crate) fn run_send_queue(qp: &Arc<QpShared>) {
    for _ in 0..BUDGET {
        match step(qp) {
            Step::Idle => return,
            Step::Again => {}
            Step::Wait(d) => fsleep(d),
        }
    }
    qp.kick();
}

fn timeout_delay(code: u8) -> Delta {
    // 4.096 us * 2^code; code 0 means "infinite", retried every 10 ms here.
    if code == 0 {
        return Delta::from_millis(10);
    }
    let us = (4096u64 << code.min(24)) / 1000;
    Delta::from_micros(us.clamp(100, 2_000_000) as i64)
}

fn step(qp: &Arc<QpShared>) -> Step {
    let generation = qp.generation();
    let mut sq = qp.sq.lock();
    if sq.attr_gen != Some(generation) {
        // Copied under the attribute lock taken before the ring lock, as `modify` does.
        drop(sq);
        let a = *qp.attrs.lock();
        sq = qp.sq.lock();
        sq.attr = a;
        sq.attr_gen = Some(generation);
    }
    let SendSide {
        queue,
        cons,
        buf,
        rnr_left,
        retry_left,
        peer,
        drained,
        attr,
        scratch,
        ..
    } = &mut *sq;
    let a = *attr;
    let Some(q) = queue.as_ref() else {
        return Step::Idle;
    };
    match qp.state() {
        QpState::Rts => {}
        QpState::Err | QpState::Sqe => {
            flush_send(qp, q, cons, buf);
            if qp.state() == QpState::Err && qp.srq.is_none() {
                // A kernel consumer's receives posted after the failure (user space rings
                // the doorbell, which flushes them itself).
                drop(sq);
                qp.flush_recv();
            }
            return Step::Idle;
        }
        QpState::Sqd => {
            if !*drained {
                *drained = true;
                if a.en_sqd_async_notify {
                    qp.events.event(Event::SqDrained);
                }
            }
            return Step::Idle;
        }
        _ => return Step::Idle,
    }
    if q.producer() == *cons {
        return Step::Idle;
    }
    let n = buf.len().min(q.elem_size());
    if q.read(*cons, &mut buf[..n]).is_err() {
        return Step::Idle;
    }
    let wqe = SendWqe::parse(buf);
    if qp.qp_type == QpType::Rc && peer.as_ref().is_none_or(|(_, g)| *g != generation) {
        *peer = find_rc_peer(&a.route.dgid, a.dest_qp_num).map(|p| (p, generation));
    }
    let exec = execute(
        qp,
        &a,
        &wqe,
        &buf[..n],
        peer.as_ref().map(|(p, _)| p),
        scratch,
    );
    // MRs are referenced only while a message moves: a deregistered MR's pages (and its
    // device reference) must not outlive it in a scratch list.
    scratch.segs.clear();
    let (status, byte_len) = match exec {
        Exec::Done(s, l) => (s, l),
        Exec::Rnr(timer) => {
            qp.tables.stats.inc(Counter::RcvdRnrErr);
            let left = rnr_left.get_or_insert(a.rnr_retry);
            if *left == 0 {
                qp.tables.stats.inc(Counter::RetryRnrExceededErr);
                (wc_status::RNR_RETRY_EXC_ERR, 0)
            } else {
                // 7 means "retry forever".
                if *left != 7 {
                    *left -= 1;
                }
                return Step::Wait(Delta::from_micros(RNR_US[usize::from(timer & 31)].into()));
            }
        }
        Exec::NoAnswer => {
            let left = retry_left.get_or_insert(a.retry_cnt);
            if *left == 0 && a.timeout != 0 {
                qp.tables.stats.inc(Counter::RetryExceededErr);
                (wc_status::RETRY_EXC_ERR, 0)
            } else {
                if a.timeout != 0 {
                    *left -= 1;
                }
                // Re-resolve: the peer may appear or change state meanwhile.
                *peer = None;
                return Step::Wait(timeout_delay(a.timeout));
            }
        }
    };
    *rnr_left = None;
    *retry_left = None;
    // Free the slot before the completion is visible: a consumer that sees the completion may
    // post into the slot at once.
    *cons = q.next(*cons);
    q.set_consumer(*cons);
    if status != wc_status::SUCCESS {
        qp.tables.stats.inc(Counter::SendErr);
        // In ERR before the completion is visible: a consumer that sees it may reset the QP at
        // once, and a later move to ERR would undo that.
        drop(sq);
        qp.fail(None);
    }
    let signaled = qp.sig_all || wqe.send_flags & send_flags::SIGNALED != 0;
    if signaled || status != wc_status::SUCCESS {
        qp.scq.post(
            &Wc {
                wr_id: wqe.wr_id,
                status,
                opcode: send_wc_opcode(wqe.opcode),
                byte_len,
                qp_num: qp.qpn,
                port_num: 1,
                ..Default::default()
            },
            false,
            &qp.events,
        );
    }
    Step::Again
}

fn send_wc_opcode(op: u32) -> u32 {
    match op {
        wr_opcode::RDMA_WRITE | wr_opcode::RDMA_WRITE_WITH_IMM => wc_opcode::RDMA_WRITE,
        wr_opcode::RDMA_READ => wc_opcode::RDMA_READ,
        wr_opcode::ATOMIC_CMP_AND_SWP => wc_opcode::COMP_SWAP,
        wr_opcode::ATOMIC_FETCH_AND_ADD => wc_opcode::FETCH_ADD,
        wr_opcode::BIND_MW => wc_opcode::BIND_MW,
        wr_opcode::LOCAL_INV => wc_opcode::LOCAL_INV,
        _ => wc_opcode::SEND,
    }
}

/// Completes every queued send WQE with `WR_FLUSH_ERR`.
fn flush_send(qp: &QpShared, q: &crate::queue::Queue, cons: &mut u32, buf: &mut [u8]) {
    let prod = q.producer();
    let n = buf.len().min(q.elem_size());
    while *cons != prod {
        if q.read(*cons, &mut buf[..n]).is_err() {
            break;
        }
        let w = SendWqe::parse(buf);
        *cons = q.next(*cons);
        q.set_consumer(*cons);
        qp.scq.post(
            &Wc {
                wr_id: w.wr_id,
                status: wc_status::WR_FLUSH_ERR,
                opcode: send_wc_opcode(w.opcode),
                qp_num: qp.qpn,
                ..Default::default()
            },
            false,
            &qp.events,
        );
    }
}

fn find_rc_peer(dgid: &[u8; 16], qpn: u32) -> Option<Arc<QpShared>> {
    Device::with_gid_owner(dgid, |dev| dev.tables.qps.get(qpn))
        .flatten()
        .filter(|p| p.qp_type == QpType::Rc)
}

/// Resolves scatter/gather entries against `qp`'s keys with rights `need`.
fn resolve(qp: &QpShared, sges: &[Sge], need: u32, out: &mut KVec<Seg>) -> Result<usize, Fault> {
    let mut total: u64 = 0;
    for s in sges.iter().filter(|s| s.length > 0) {
        let mr = qp.tables.mr(s.lkey).ok_or(Fault::Key)?;
        let off = mr.check(qp.pd, s.addr, s.length.into(), need)?;
        // ODP: the pages must exist (a hole or read-only memory is a local protection error).
        mr.touch(off, s.length as usize, need & access::LOCAL_WRITE != 0)
            .map_err(|_| Fault::Range)?;
        total += u64::from(s.length);
        out.push(
            Seg {
                mr,
                off,
                len: s.length as usize,
            },
            GFP_KERNEL,
        )
        .map_err(|_| Fault::Range)?;
    }
    if total > MAX_MSG {
        return Err(Fault::Range);
    }
    Ok(total as usize)
}

/// Copies `len` bytes of `src` into `dst`, starting `skip` bytes into `dst`.
fn transfer(dst: &[Seg], skip: usize, src: Src<'_>, len: usize) -> Result {
    let mut di = 0;
    let mut dpos = skip;
    // Find the destination segment that holds byte `skip`.
    while di < dst.len() && dpos >= dst[di].len {
        dpos -= dst[di].len;
        di += 1;
    }
    let mut done = 0;
    let (mut si, mut spos) = (0usize, 0usize);
    while done < len {
        let d = dst.get(di).ok_or(EFAULT)?;
        let room = d.len - dpos;
        let n = match src {
            Src::Inline(b) => {
                let n = room.min(len - done);
                d.mr.write(d.off + dpos, b.get(done..done + n).ok_or(EFAULT)?)?;
                n
            }
            Src::Segs(ss) => {
                let s = ss.get(si).ok_or(EFAULT)?;
                let n = room.min(s.len - spos).min(len - done);
                d.mr.copy_from(d.off + dpos, &s.mr, s.off + spos, n)?;
                spos += n;
                if spos == s.len {
                    si += 1;
                    spos = 0;
                }
                n
            }
        };
        done += n;
        dpos += n;
        if dpos == d.len {
            di += 1;
            dpos = 0;
        }
    }
    Ok(())
}

/// Executes one send WQE of `qp`; `raw` is the whole WQE (for its SGEs or inline data).
fn execute(
    qp: &Arc<QpShared>,
    a: &crate::ib::verbs::QpAttr,
    w: &SendWqe,
    raw: &[u8],
    peer: Option<&Arc<QpShared>>,
    scratch: &mut Scratch,
) -> Exec {
    let op = w.opcode;
    let valid = match qp.qp_type {
        QpType::Ud | QpType::Gsi => matches!(op, wr_opcode::SEND | wr_opcode::SEND_WITH_IMM),
        _ => matches!(
            op,
            wr_opcode::SEND
                | wr_opcode::SEND_WITH_IMM
                | wr_opcode::RDMA_WRITE
                | wr_opcode::RDMA_WRITE_WITH_IMM
                | wr_opcode::RDMA_READ
                | wr_opcode::ATOMIC_CMP_AND_SWP
                | wr_opcode::ATOMIC_FETCH_AND_ADD
                | wr_opcode::SEND_WITH_INV
                | wr_opcode::LOCAL_INV
                | wr_opcode::BIND_MW
        ),
    };
    if !valid {
        return Exec::Done(wc_status::LOC_QP_OP_ERR, 0);
    }
    // Memory window operations complete locally, in order with the WQEs around them.
    match op {
        wr_opcode::BIND_MW => {
            let status = match qp.tables.bind_mw(qp, &abi::Bind::parse(raw)) {
                Ok(()) => wc_status::SUCCESS,
                Err(()) => wc_status::MW_BIND_ERR,
            };
            return Exec::Done(status, 0);
        }
        wr_opcode::LOCAL_INV => {
            // The key to invalidate is where immediate data would be.
            let status = match qp.tables.invalidate(w.imm_data, None) {
                Ok(()) => wc_status::SUCCESS,
                Err(()) => wc_status::LOC_QP_OP_ERR,
            };
            return Exec::Done(status, 0);
        }
        _ => {}
    }
    let is_read_like = matches!(
        op,
        wr_opcode::RDMA_READ | wr_opcode::ATOMIC_CMP_AND_SWP | wr_opcode::ATOMIC_FETCH_AND_ADD
    );
    if is_read_like && a.max_rd_atomic == 0 {
        return Exec::Done(wc_status::LOC_QP_OP_ERR, 0);
    }
    // Local data: inline bytes or registered memory.
    let Scratch { sges, segs } = scratch;
    sges.clear();
    segs.clear();
    let inline = w.send_flags & send_flags::INLINE != 0 && !is_read_like;
    let (src, len) = if inline {
        let len = w.length as usize;
        if w.length > qp.max_inline {
            return Exec::Done(wc_status::LOC_LEN_ERR, 0);
        }
        match raw.get(abi::SEND_WQE_HEADER..abi::SEND_WQE_HEADER + len) {
            Some(b) => (Some(b), len),
            None => return Exec::Done(wc_status::LOC_LEN_ERR, 0),
        }
    } else {
        if w.num_sge > qp.max_send_sge
            || abi::SEND_WQE_HEADER + w.num_sge as usize * abi::SGE_SIZE > raw.len()
        {
            return Exec::Done(wc_status::LOC_QP_OP_ERR, 0);
        }
        for i in 0..w.num_sge as usize {
            if sges
                .push(Sge::parse(raw, abi::SEND_WQE_HEADER, i), GFP_KERNEL)
                .is_err()
            {
                return Exec::Done(wc_status::LOC_QP_OP_ERR, 0);
            }
        }
        let need = if is_read_like { access::LOCAL_WRITE } else { 0 };
        match resolve(qp, sges, need, segs) {
            Ok(len) => (None, len),
            // Every local key, right or range fault is a local protection error.
            Err(_) => return Exec::Done(wc_status::LOC_PROT_ERR, 0),
        }
    };
    let data = match src {
        Some(b) => Src::Inline(b),
        None => Src::Segs(segs),
    };
    let atomic = match op {
        wr_opcode::ATOMIC_CMP_AND_SWP => Some(AtomicOp::CmpSwap(w.compare_add, w.swap)),
        wr_opcode::ATOMIC_FETCH_AND_ADD => Some(AtomicOp::FetchAdd(w.compare_add)),
        _ => None,
    };
    if atomic.is_some() && len < 8 {
        return Exec::Done(wc_status::LOC_LEN_ERR, 0);
    }
    let mut msg = Message {
        opcode: op,
        src_qpn: qp.qpn,
        imm: w.imm_data,
        solicited: w.send_flags & send_flags::SOLICITED != 0,
        len: if atomic.is_some() { 8 } else { len },
        data,
        remote_addr: w.remote_addr,
        rkey: w.rkey,
        atomic,
        read_into: segs,
        ud: None,
    };
    let dest = if qp.qp_type.is_ud() {
        // A kernel consumer's WQE carries the address (its AH was checked when posting); a
        // user WQE names an AH of the QP's PD.
        let av = if qp.kernel {
            abi::Av::parse(raw)
        } else {
            match qp.tables.ahs.get(w.ah_num).filter(|ah| ah.pd == qp.pd) {
                Some(ah) => ah.av(),
                None => return Exec::Done(wc_status::LOC_QP_OP_ERR, 0),
            }
        };
        if len > netdev::ib_mtu_bytes(netdev::IB_MTU_4096) as usize {
            return Exec::Done(wc_status::LOC_LEN_ERR, 0);
        }
        let qkey = if w.remote_qkey & 0x8000_0000 != 0 {
            qp.qkey.load(Acquire)
        } else {
            w.remote_qkey
        };
        msg.ud = Some(Ud {
            qkey,
            sgid: av.sgid,
            dgid: av.dgid,
            hop_limit: av.hop_limit,
            tclass: av.tclass,
        });
        if mcast::is_multicast(&av.dgid) {
            return Exec::Done(multicast(qp, &msg, w.remote_qpn, a.path_mtu), 0);
        }
        let dest = Device::with_gid_owner(&av.dgid, |dev| dev.tables.qps.get(w.remote_qpn))
            .flatten()
            .filter(|p| p.qp_type.is_ud());
        match dest {
            Some(d) => d,
            // Nobody listens there: a datagram is simply lost.
            None => return Exec::Done(wc_status::SUCCESS, 0),
        }
    } else {
        match peer {
            Some(p) => p.clone(),
            None => return Exec::NoAnswer,
        }
    };
    let reply = deliver(&dest, &msg);
    if let Reply::Ack(_) = reply {
        account(qp, &dest, op, len, netdev::ib_mtu_bytes(a.path_mtu));
    }
    match reply {
        Reply::Ack(orig) => {
            let byte_len = match op {
                wr_opcode::RDMA_READ => len as u32,
                wr_opcode::ATOMIC_CMP_AND_SWP | wr_opcode::ATOMIC_FETCH_AND_ADD => {
                    if transfer(segs, 0, Src::Inline(&orig.to_ne_bytes()), 8).is_err() {
                        return Exec::Done(wc_status::LOC_PROT_ERR, 0);
                    }
                    8
                }
                _ => len as u32,
            };
            Exec::Done(wc_status::SUCCESS, byte_len)
        }
        Reply::Nak(Nak::InvReq) => Exec::Done(wc_status::REM_INV_REQ_ERR, 0),
        Reply::Nak(Nak::Access) => Exec::Done(wc_status::REM_ACCESS_ERR, 0),
        Reply::Nak(Nak::Op) => Exec::Done(wc_status::REM_OP_ERR, 0),
        Reply::Rnr(t) => Exec::Rnr(t),
        Reply::Drop if qp.qp_type.is_ud() => Exec::Done(wc_status::SUCCESS, 0),
        Reply::Drop => Exec::NoAnswer,
    }
}

/// Delivers a datagram sent to a multicast group to every QP attached to it on the host;
/// returns the send's completion status. (Multicast allocates its list of receivers: it is not
/// the fast path.)
fn multicast(qp: &QpShared, msg: &Message<'_>, qpn: u32, path_mtu: u32) -> u32 {
    let Some(mgid) = msg.ud.map(|u| u.dgid) else {
        return wc_status::LOC_QP_OP_ERR;
    };
    if qpn != mcast::MULTICAST_QPN {
        // A group has no QP numbers: the datagram reaches nobody.
        return wc_status::SUCCESS;
    }
    let mut dests = KVec::new();
    let mut ok = true;
    Device::for_each(|dev| {
        let mut qpns = KVec::new();
        ok &= dev.tables.groups.attached(&mgid, &mut qpns).is_ok();
        for n in qpns {
            if let Some(d) = dev.tables.qps.get(n) {
                ok &= dests.push(d, GFP_KERNEL).is_ok();
            }
        }
    });
    if !ok {
        return wc_status::LOC_QP_OP_ERR;
    }
    for d in &dests {
        if let Reply::Ack(_) = deliver(d, msg) {
            account(qp, d, msg.opcode, msg.len, netdev::ib_mtu_bytes(path_mtu));
        }
    }
    wc_status::SUCCESS
}

/// Counts a message that `qp` completed with `dst` on both devices.
fn account(qp: &QpShared, dst: &QpShared, op: u32, len: usize, mtu: u32) {
    let (req, resp) = (&qp.tables.stats, &dst.tables.stats);
    let rdma = !matches!(
        op,
        wr_opcode::SEND | wr_opcode::SEND_WITH_IMM | wr_opcode::SEND_WITH_INV
    );
    if rdma {
        req.inc(Counter::RdmaSends);
        resp.inc(Counter::RdmaRecvs);
    }
    // Reads and atomics carry their data in the responses.
    let (fwd, back) = match op {
        wr_opcode::RDMA_READ => (0, len),
        wr_opcode::ATOMIC_CMP_AND_SWP | wr_opcode::ATOMIC_FETCH_AND_ADD => (0, 8),
        _ => (len, 0),
    };
    req.add(Counter::SentPkts, packets(fwd, mtu));
    req.add(Counter::SentBytes, fwd as u64);
    resp.add(Counter::RcvdPkts, packets(fwd, mtu));
    resp.add(Counter::RcvdBytes, fwd as u64);
    if back > 0 {
        resp.add(Counter::SentPkts, packets(back, mtu));
        resp.add(Counter::SentBytes, back as u64);
        req.add(Counter::RcvdPkts, packets(back, mtu));
        req.add(Counter::RcvdBytes, back as u64);
    }
}

/// The transport: delivers `m` to the responder QP `dst` on this host and returns its answer.
pub(crate) fn deliver(dst: &Arc<QpShared>, m: &Message<'_>) -> Reply {
    let mut rq = dst.rq.lock();
    if !dst.can_receive() {
        return Reply::Drop;
    }
    if let Some(ud) = &m.ud {
        if ud.qkey != dst.qkey.load(Acquire) {
            return Reply::Drop;
        }
    }
    if !rq.established {
        rq.established = true;
        if dst.state() == QpState::Rtr {
            dst.events.event(Event::CommEst);
        }
    }
    let r = match m.opcode {
        wr_opcode::SEND | wr_opcode::SEND_WITH_IMM | wr_opcode::SEND_WITH_INV => {
            respond_send(dst, &mut rq, m)
        }
        wr_opcode::RDMA_WRITE | wr_opcode::RDMA_WRITE_WITH_IMM => respond_write(dst, &mut rq, m),
        wr_opcode::RDMA_READ => respond_read(dst, m),
        _ => respond_atomic(dst, m),
    };
    rq.segs.clear();
    drop(rq);
    match r {
        Reply::Nak(_) => dst.tables.stats.inc(Counter::RcvdErr),
        Reply::Rnr(_) => dst.tables.stats.inc(Counter::SendRnrErr),
        _ => {}
    }
    match r {
        Reply::Nak(Nak::Access) => dst.fail(Some(Event::QpAccessErr)),
        Reply::Nak(Nak::InvReq) => dst.fail(Some(Event::QpReqErr)),
        Reply::Nak(Nak::Op) => dst.fail(Some(Event::QpFatal)),
        _ => {}
    }
    r
}

/// Takes a receive WQE for a message into `rq.slot`, or says what to answer when there is
/// none.
fn take_recv(dst: &QpShared, rq: &mut RecvSide) -> Result<(), Reply> {
    if dst.pop_recv(rq) {
        return Ok(());
    }
    Err(if dst.qp_type.is_ud() {
        Reply::Drop
    } else {
        Reply::Rnr(dst.min_rnr_timer.load(Acquire) as u8)
    })
}

fn recv_wc(dst: &QpShared, m: &Message<'_>, wr_id: u64, status: u32) -> Wc {
    Wc {
        wr_id,
        status,
        opcode: wc_opcode::RECV,
        qp_num: dst.qpn,
        src_qp: m.src_qpn,
        port_num: 1,
        ..Default::default()
    }
}

fn respond_send(dst: &Arc<QpShared>, rq: &mut RecvSide, m: &Message<'_>) -> Reply {
    if let Err(r) = take_recv(dst, rq) {
        return r;
    }
    let RecvSide { slot, segs, .. } = rq;
    segs.clear();
    let room = match resolve(dst, &slot.sges, access::LOCAL_WRITE, segs) {
        Ok(n) => n,
        Err(_) => {
            dst.rcq.post(
                &recv_wc(dst, m, slot.wr_id, wc_status::LOC_PROT_ERR),
                false,
                &dst.events,
            );
            return Reply::Nak(Nak::Op);
        }
    };
    let grh = if m.ud.is_some() { GRH_LEN } else { 0 };
    if m.len + grh > room {
        dst.rcq.post(
            &recv_wc(dst, m, slot.wr_id, wc_status::LOC_LEN_ERR),
            false,
            &dst.events,
        );
        return if m.ud.is_some() {
            Reply::Drop
        } else {
            Reply::Nak(Nak::InvReq)
        };
    }
    let mut flags = 0;
    if let Some(ud) = &m.ud {
        let h = abi::grh(&ud.sgid, &ud.dgid, m.len as u32, ud.hop_limit, ud.tclass);
        if transfer(segs, 0, Src::Inline(&h), GRH_LEN).is_err() {
            return Reply::Nak(Nak::Op);
        }
        flags |= wc_flags::GRH;
    }
    if transfer(segs, grh, m.data, m.len).is_err() {
        return Reply::Nak(Nak::Op);
    }
    let mut wc = recv_wc(dst, m, slot.wr_id, wc_status::SUCCESS);
    wc.byte_len = (m.len + grh) as u32;
    if m.opcode == wr_opcode::SEND_WITH_IMM {
        flags |= wc_flags::WITH_IMM;
        wc.imm_data = m.imm;
    }
    if m.opcode == wr_opcode::SEND_WITH_INV {
        // The key travels where immediate data would; the window must be bound to this QP.
        if dst.tables.invalidate(m.imm, Some(dst)).is_err() {
            dst.rcq.post(
                &recv_wc(dst, m, slot.wr_id, wc_status::REM_INV_REQ_ERR),
                false,
                &dst.events,
            );
            return Reply::Nak(Nak::InvReq);
        }
        flags |= wc_flags::WITH_INVALIDATE;
        wc.imm_data = m.imm;
    }
    wc.wc_flags = flags;
    dst.rcq.post(&wc, m.solicited, &dst.events);
    Reply::Ack(0)
}

/// The responder's MR for an RDMA or atomic access, or the NAK to send.
fn remote_mr(
    dst: &QpShared,
    m: &Message<'_>,
    len: usize,
    right: u32,
) -> Result<(Arc<MrShared>, usize), Reply> {
    if dst.access.load(Acquire) & right == 0 {
        return Err(Reply::Nak(Nak::Access));
    }
    // An MR's key or a window's.
    let (mr, off) = dst
        .tables
        .remote(dst, m.rkey, m.remote_addr, len as u64, right)
        .map_err(|_| Reply::Nak(Nak::Access))?;
    // ODP: pages that cannot be faulted in (a hole, read-only memory) deny the access.
    mr.touch(off, len, right != access::REMOTE_READ)
        .map_err(|_| Reply::Nak(Nak::Access))?;
    Ok((mr, off))
}

fn respond_write(dst: &Arc<QpShared>, rq: &mut RecvSide, m: &Message<'_>) -> Reply {
    let target = if m.len > 0 {
        match remote_mr(dst, m, m.len, access::REMOTE_WRITE) {
            Ok(t) => Some(t),
            Err(r) => return r,
        }
    } else if dst.access.load(Acquire) & access::REMOTE_WRITE == 0 {
        return Reply::Nak(Nak::Access);
    } else {
        None
    };
    let imm = m.opcode == wr_opcode::RDMA_WRITE_WITH_IMM;
    if imm {
        if let Err(r) = take_recv(dst, rq) {
            return r;
        }
    }
    if let Some((mr, off)) = target {
        let seg = [Seg {
            mr,
            off,
            len: m.len,
        }];
        if transfer(&seg, 0, m.data, m.len).is_err() {
            return Reply::Nak(Nak::Op);
        }
    }
    if imm {
        let mut wc = recv_wc(dst, m, rq.slot.wr_id, wc_status::SUCCESS);
        wc.opcode = wc_opcode::RECV_RDMA_WITH_IMM;
        wc.byte_len = m.len as u32;
        wc.wc_flags = wc_flags::WITH_IMM;
        wc.imm_data = m.imm;
        dst.rcq.post(&wc, m.solicited, &dst.events);
    }
    Reply::Ack(0)
}

fn respond_read(dst: &QpShared, m: &Message<'_>) -> Reply {
    if dst.max_dest_rd_atomic.load(Acquire) == 0 {
        return Reply::Nak(Nak::InvReq);
    }
    if m.len == 0 {
        return Reply::Ack(0);
    }
    let (mr, off) = match remote_mr(dst, m, m.len, access::REMOTE_READ) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let seg = [Seg {
        mr,
        off,
        len: m.len,
    }];
    if transfer(m.read_into, 0, Src::Segs(&seg), m.len).is_err() {
        return Reply::Nak(Nak::Op);
    }
    Reply::Ack(0)
}

fn respond_atomic(dst: &QpShared, m: &Message<'_>) -> Reply {
    let Some(op) = m.atomic else {
        return Reply::Nak(Nak::InvReq);
    };
    if dst.max_dest_rd_atomic.load(Acquire) == 0 || m.remote_addr % 8 != 0 {
        return Reply::Nak(Nak::InvReq);
    }
    let (mr, off) = match remote_mr(dst, m, 8, access::REMOTE_ATOMIC) {
        Ok(t) => t,
        Err(r) => return r,
    };
    match mr.atomic(off, op) {
        Ok(orig) => Reply::Ack(orig),
        Err(_) => Reply::Nak(Nak::InvReq),
    }
}
