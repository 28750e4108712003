// SPDX-License-Identifier: GPL-2.0

//! The requester (rxe's `rxe_req.c`): takes WQEs from a QP's send queue in order, checks them,
//! resolves local memory and the destination, and turns each into a [`Message`] for the
//! transport; window operations complete here, in order with the WQEs around them.

use super::{
    comp::{self, Exec},
    deliver,
    fault::Ticket,
    packet::{header::Feth, Gid},
    rc,
    share::{self, Job},
    wire,
    xfer::{gather, refault, resolve, transfer, Scratch, Seg, Src},
    Message, Nak, Reply, Ud,
};
use crate::{
    device::Device,
    ib::{
        abi::{self, SendWqe, Sge},
        netdev,
        umem::AtomicOp,
        verbs::{access, send_flags, Event, QpAttr, QpState, QpType, WcStatus, WrOpcode},
        wq,
    },
    mcast,
    mw::Via,
    odp::Faults,
    qp::{QpShared, SendSide},
    queue::Queue,
    stats::{packets, Counter},
};
use core::cell::Cell;
use kernel::{
    alloc::KVVec,
    page::PAGE_SIZE,
    prelude::*,
    sync::{atomic::Acquire, Arc},
};

/// WQEs one run of a requester handles before yielding the worker.
const BUDGET: u32 = 256;

/// Bytes one run of a requester moves before yielding the worker: the run ends after the WQE
/// that takes it past this (one WQE may carry 2 GiB; its copy gives the CPU away every MiB).
const BYTE_BUDGET: usize = 1 << 20;

/// Deliveries of one message before the requester gives up on pages of its own memory that
/// keep going away before the responder copies them (an invalidation after each fault): the
/// WQE then completes with `IBV_WC_LOC_PROT_ERR`. Like the ODP layer's fault attempts, only
/// memory that changes faster than it can be faulted in, hundreds of times in a row, gets
/// there.
const DELIVERIES: u32 = 256;

/// Largest SEND or WRITE whose data the requester copies aside when its pages went away
/// between its fault and the responder's copy twice in a row (see [`deliver_mapped`]).
const BOUNCE_MAX: usize = 1 << 20;

/// Runs a QP's send queue until it is empty, blocked, waiting for a timer, or the budget (of
/// WQEs or bytes) is used; then the QP's work item is queued again, behind the others.
pub(crate) fn run_send_queue(qp: &Arc<QpShared>) {
    // Parked while its user holds its share of the workers (`share`): queued again later.
    let Some(_worker) = share::enter(qp, Job::Requester) else {
        return;
    };
    // A kernel consumer's QP may carry the writeback that reclaim waits for (`ib::wq`).
    let _noio = qp.kernel.then(crate::ib::wq::NoIo::begin);
    run(qp, true);
}

/// Runs a QP's send queue in the caller, a user's doorbell (`ibv_post_send`): the process that
/// posted does the work, on its own CPU time and at once, instead of waiting for a worker
/// (each wait for a worker is a scheduling delay, a whole tick when the poster busy-polls its
/// CQ on the same CPU). It never waits for the send queue: when another holds it (its worker,
/// which may be faulting memory in), or when the budget is used, the worker is scheduled.
pub(crate) fn run_send_queue_now(qp: &Arc<QpShared>) {
    run(qp, false);
}

/// Runs the send queue up to the budget, waiting for its lock (`wait`) or not.
fn run(qp: &Arc<QpShared>, wait: bool) {
    let mut moved = 0;
    for _ in 0..BUDGET {
        if !step(qp, &mut moved, wait) {
            return;
        }
        if moved >= BYTE_BUDGET {
            break;
        }
    }
    qp.kick();
}

/// Handles the WQE at the head of the send queue, adding the bytes it moved to `moved`;
/// returns whether to go on. Without `wait`, a send queue someone else holds is left to the
/// QP's worker.
fn step(qp: &Arc<QpShared>, moved: &mut usize, wait: bool) -> bool {
    let generation = qp.generation();
    let lock = || {
        let sq = if wait {
            Some(qp.sq.lock())
        } else {
            qp.sq.try_lock()
        };
        if sq.is_none() {
            qp.kick();
        }
        sq
    };
    let Some(mut sq) = lock() else {
        return false;
    };
    if sq.attr_gen != Some(generation) {
        // Copied under the attribute lock taken before the ring lock, as `modify` does.
        drop(sq);
        let a = *qp.attrs.lock();
        let Some(again) = lock() else {
            return false;
        };
        sq = again;
        sq.attr = a;
        sq.attr_gen = Some(generation);
    }
    let Some(q) = sq.queue.clone() else {
        return false;
    };
    match qp.state() {
        QpState::Rts => {}
        QpState::Err | QpState::Sqe => {
            comp::flush(qp, &mut sq, &q);
            if qp.state() == QpState::Err && qp.srq.is_none() {
                // A kernel consumer's receives posted after the failure (user space rings
                // the doorbell, which flushes them itself).
                drop(sq);
                qp.flush_recv();
            }
            return false;
        }
        QpState::Sqd => {
            if !sq.drained {
                sq.drained = true;
                if sq.attr.en_sqd_async_notify {
                    qp.events.event(Event::SqDrained);
                }
            }
            return false;
        }
        _ => return false,
    }
    if comp::backing_off(qp, &mut sq) || q.producer() == sq.cons {
        return false;
    }
    let SendSide {
        cons,
        buf,
        peer,
        sgid,
        attr,
        scratch,
        ticket,
        wire,
        backoff,
        retry_left,
        ..
    } = &mut *sq;
    let remote = Remote {
        wire,
        timer_running: backoff.is_some(),
        retry_left,
        behind: false,
        now: !wait,
    };
    let n = buf.len().min(q.elem_size());
    if q.read(*cons, &mut buf[..n]).is_err() {
        return false;
    }
    let wqe = SendWqe::parse(buf);
    let op = WrOpcode::from_raw(wqe.opcode);
    if !qp.qp_type.is_ud() && peer.as_ref().is_none_or(|(_, g)| *g != generation) {
        *peer = find_peer(&attr.route.dgid, attr.dest_qp_num, qp.qp_type).map(|p| (p, generation));
    }
    let exec = match op {
        Some(op) if op.valid_for(qp.qp_type) => execute(
            qp,
            attr,
            op,
            &wqe,
            &buf[..n],
            peer.as_ref().map(|(p, _)| (p, &*sgid)),
            scratch,
            ticket,
            remote,
            moved,
        ),
        _ => Exec::Done(WcStatus::LocQpOpErr, 0),
    };
    scratch.clear();
    if matches!(exec, Exec::Sent | Exec::Recheck | Exec::Pending) && op.is_some_and(rc::pipelines) {
        // The head waits for its answer from another host: the WQEs behind it go meanwhile.
        send_behind(qp, &q, &mut sq, moved, !wait);
    }
    comp::complete(qp, sq, &q, &wqe, op, exec)
}

/// Sends the WQEs behind the head of `qp`'s send queue `q` (an RC QP whose peer is
/// on another host) while the head waits for its answer, as many as the transport's window
/// takes; adds the bytes sent to `moved`. `now`: in a user's doorbell.
fn send_behind(qp: &Arc<QpShared>, q: &Queue, sq: &mut SendSide, moved: &mut usize, now: bool) {
    let SendSide {
        cons,
        buf,
        peer,
        sgid,
        attr,
        scratch,
        ticket,
        wire,
        retry_left,
        ..
    } = sq;
    let Some((peer @ Peer::Remote, _)) = peer.as_ref() else {
        return;
    };
    if qp.qp_type != QpType::Rc {
        return;
    }
    let n = buf.len().min(q.elem_size());
    let mut i = q.next(*cons);
    for _ in 0..wire.ahead() {
        i = q.next(i);
    }
    while wire.window_open() && i != q.producer() && q.read(i, &mut buf[..n]).is_ok() {
        let w = SendWqe::parse(buf);
        let Some(op) = WrOpcode::from_raw(w.opcode).filter(|o| rc::pipelines(*o)) else {
            return;
        };
        let remote = Remote {
            wire,
            timer_running: true,
            retry_left,
            behind: true,
            now,
        };
        let raw = &buf[..n];
        let exec = execute(
            qp,
            attr,
            op,
            &w,
            raw,
            Some((peer, sgid)),
            scratch,
            ticket,
            remote,
            moved,
        );
        scratch.clear();
        match exec {
            Exec::Sent => {}
            // ODP memory in a user's doorbell: the worker sends it (and what follows).
            Exec::Defer => {
                qp.kick();
                return;
            }
            _ => return,
        }
        i = q.next(i);
    }
}

/// The peer of a connected (RC or UC) QP.
pub(crate) enum Peer {
    /// A QP of a device on this host: served directly.
    Local(Arc<QpShared>),
    /// A QP on another host (its GID is no local device's): reached through the wire ([`rc`]).
    Remote,
}

/// The peer QP `qpn` at `dgid` of a QP of type `t`; `None` when the GID is local and names no
/// QP of that type there.
fn find_peer(dgid: &[u8; 16], qpn: u32, t: QpType) -> Option<Peer> {
    match Device::with_gid_owner(dgid, |dev| dev.tables.qps.get(qpn)) {
        None => Some(Peer::Remote),
        Some(p) => p.filter(|p| p.qp_type == t).map(Peer::Local),
    }
}

/// What the requester of an RC QP with a remote peer keeps for the WQE at the head.
struct Remote<'a> {
    wire: &'a mut rc::Requester,
    /// Whether the retransmission or RNR timer still runs.
    timer_running: bool,
    retry_left: &'a mut Option<u8>,
    /// The WQE is behind the head, which waits for its answer: send it if the window allows
    /// ([`rc::send_ahead`]), complete nothing.
    behind: bool,
    /// Run in a user's doorbell: a WQE with ODP memory is left to the worker ([`Exec::Defer`]).
    now: bool,
}

/// Executes one send WQE `w` (operation `op`) of `qp`; `raw` is the whole WQE (for its SGEs
/// or inline data); `peer` is an RC QP's peer and the GID it sends from; `ticket` what the WQE
/// knows of the responder's fault it waits for.
#[expect(clippy::too_many_arguments)]
fn execute(
    qp: &Arc<QpShared>,
    a: &QpAttr,
    op: WrOpcode,
    w: &SendWqe,
    raw: &[u8],
    peer: Option<(&Peer, &[u8; 16])>,
    scratch: &mut Scratch,
    ticket: &Cell<Ticket>,
    remote: Remote<'_>,
    moved: &mut usize,
) -> Exec {
    // Memory window operations complete locally, in order with the WQEs around them.
    match op {
        WrOpcode::BindMw => {
            let status = match qp.tables.bind_mw(qp, &abi::Bind::parse(raw)) {
                Ok(()) => WcStatus::Success,
                Err(()) => WcStatus::MwBindErr,
            };
            return Exec::Done(status, 0);
        }
        WrOpcode::LocalInv => {
            // The key to invalidate is where immediate data would be.
            let status = match qp.tables.invalidate(w.imm_data, Via::Local(qp)) {
                Ok(()) => WcStatus::Success,
                Err(()) => WcStatus::LocQpOpErr,
            };
            return Exec::Done(status, 0);
        }
        // A fast registration: only a kernel consumer's ring carries one (its fields where an
        // atomic's are, see `abi::SendWqe`); in a user's ring the opcode is unknown.
        WrOpcode::RegMr => {
            let rights = w.swap as u32;
            let done = qp.kernel
                && qp
                    .tables
                    .register_fast(qp, w.rkey, w.remote_addr, w.compare_add, rights)
                    .is_ok();
            let status = if done {
                WcStatus::Success
            } else {
                WcStatus::LocQpOpErr
            };
            return Exec::Done(status, 0);
        }
        _ => {}
    }
    let read_like = op.is_read_like();
    if op.needs_rd_atomic() && a.max_rd_atomic == 0 {
        return Exec::Done(WcStatus::LocQpOpErr, 0);
    }
    // Local data: an ATOMIC WRITE's 8 bytes in the WQE (where inline data goes), none for a
    // FLUSH (its length is the remote range's), inline bytes or registered memory.
    let Scratch { sges, segs } = scratch;
    let inline = w.send_flags & send_flags::INLINE != 0 && !read_like;
    let in_wqe = match op {
        WrOpcode::AtomicWrite => match raw.get(abi::SEND_WQE_HEADER..abi::SEND_WQE_HEADER + 8) {
            Some(b) => Some((b, 8)),
            None => return Exec::Done(WcStatus::LocLenErr, 0),
        },
        // The FETH has 4 bits of placement type and 2 of level: more is no FLUSH.
        WrOpcode::Flush if w.flush_type > 0xf || w.flush_level > 3 => {
            return Exec::Done(WcStatus::LocQpOpErr, 0);
        }
        WrOpcode::Flush => Some((&[][..], w.length as usize)),
        _ => None,
    };
    let (src, len) = if let Some((b, n)) = in_wqe {
        (Some(b), n)
    } else if inline {
        let len = w.length as usize;
        if w.length > qp.max_inline {
            return Exec::Done(WcStatus::LocLenErr, 0);
        }
        match raw.get(abi::SEND_WQE_HEADER..abi::SEND_WQE_HEADER + len) {
            Some(b) => (Some(b), len),
            None => return Exec::Done(WcStatus::LocLenErr, 0),
        }
    } else {
        if w.num_sge > qp.max_send_sge
            || abi::SEND_WQE_HEADER + w.num_sge as usize * abi::SGE_SIZE > raw.len()
        {
            return Exec::Done(WcStatus::LocQpOpErr, 0);
        }
        for i in 0..w.num_sge as usize {
            if sges
                .push(Sge::parse(raw, abi::SEND_WQE_HEADER, i), GFP_KERNEL)
                .is_err()
            {
                return Exec::Done(WcStatus::LocQpOpErr, 0);
            }
        }
        let need = if read_like { access::LOCAL_WRITE } else { 0 };
        match resolve(qp, sges, need, segs, !remote.now) {
            _ if remote.now && segs.iter().any(|s| s.mr.is_odp()) => return Exec::Defer,
            Ok(len) => (None, len),
            // Every local key, right or range fault is a local protection error.
            Err(_) => return Exec::Done(WcStatus::LocProtErr, 0),
        }
    };
    let data = match src {
        Some(b) => Src::Inline(b),
        None => Src::Segs(segs),
    };
    let atomic = match op {
        WrOpcode::AtomicCmpAndSwp => Some(AtomicOp::CmpSwap(w.compare_add, w.swap)),
        WrOpcode::AtomicFetchAndAdd => Some(AtomicOp::FetchAdd(w.compare_add)),
        WrOpcode::AtomicWrite => src
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(|b| AtomicOp::Write(u64::from_ne_bytes(b))),
        _ => None,
    };
    if atomic.is_some() && len < 8 {
        return Exec::Done(WcStatus::LocLenErr, 0);
    }
    let mut msg = Message {
        from: qp,
        opcode: op,
        src_qpn: qp.qpn,
        // Set with the destination below.
        src_gid: [0; 16],
        imm: w.imm_data,
        solicited: w.send_flags & send_flags::SOLICITED != 0,
        len: if atomic.is_some() { 8 } else { len },
        data,
        remote_addr: w.remote_addr,
        rkey: w.rkey,
        atomic,
        flush: (op == WrOpcode::Flush).then_some(Feth {
            placement: w.flush_type,
            selectivity: w.flush_level,
        }),
        read_into: segs,
        ud: None,
        ahead: 0,
        // A datagram never waits (see below).
        ticket: (!qp.qp_type.is_ud()).then_some(ticket),
        resends: false,
    };
    let dest = if qp.qp_type.is_ud() {
        // A kernel consumer's WQE carries the address (its AH was checked when posting); a
        // user WQE names an AH of the QP's PD.
        let av = if qp.kernel {
            abi::Av::parse(raw)
        } else {
            match qp.tables.ahs.get(w.ah_num).filter(|ah| ah.pd == qp.pd) {
                Some(ah) => ah.av(),
                None => return Exec::Done(WcStatus::LocQpOpErr, 0),
            }
        };
        if len > netdev::ib_mtu_bytes(netdev::IB_MTU_4096) as usize {
            return Exec::Done(WcStatus::LocLenErr, 0);
        }
        let qkey = if w.remote_qkey & 0x8000_0000 != 0 {
            qp.qkey.load(Acquire)
        } else {
            w.remote_qkey
        };
        msg.src_gid = av.sgid;
        msg.ud = Some(Ud {
            qkey,
            sgid: av.sgid,
            dgid: av.dgid,
            hop_limit: av.hop_limit,
            tclass: av.tclass,
        });
        if Gid(av.dgid).is_multicast() {
            return Exec::Done(multicast(qp, &msg, w.remote_qpn, a.path_mtu, moved), 0);
        }
        match Device::with_gid_owner(&av.dgid, |dev| dev.tables.qps.get(w.remote_qpn)) {
            Some(Some(d)) if d.qp_type.is_ud() => d,
            // Nobody listens there: a datagram is simply lost.
            Some(_) => return Exec::Done(WcStatus::Success, 0),
            // Another host's GID: the datagram goes on the wire. Only the local side can fail
            // it (its memory); a route or neighbour that is missing loses it, as the network
            // would.
            None => {
                return match wire::send_ud(qp, &msg, w.remote_qpn) {
                    Err(wire::NotSent::Local) => Exec::Done(WcStatus::LocProtErr, 0),
                    Ok(()) => Exec::Done(WcStatus::Success, len as u32),
                    Err(wire::NotSent::Lost) => Exec::Done(WcStatus::Success, 0),
                }
            }
        }
    } else {
        match peer {
            Some((Peer::Local(p), sgid)) => {
                msg.src_gid = *sgid;
                p.clone()
            }
            Some((Peer::Remote, sgid)) if qp.qp_type == QpType::Uc => {
                msg.src_gid = *sgid;
                let status = rc::send_unacked(qp, remote.wire, a, sgid, &msg);
                if status == WcStatus::Success {
                    *moved = moved.saturating_add(len);
                }
                return Exec::Done(status, len as u32);
            }
            Some((Peer::Remote, sgid)) => {
                msg.src_gid = *sgid;
                let Remote {
                    wire,
                    timer_running,
                    retry_left,
                    behind,
                    ..
                } = remote;
                if behind {
                    let fence = w.send_flags & send_flags::FENCE != 0;
                    if !rc::send_ahead(qp, wire, a, sgid, &msg, fence) {
                        return Exec::Pending;
                    }
                    *moved = moved.saturating_add(msg.carried());
                    return Exec::Sent;
                }
                let step = rc::execute(qp, wire, timer_running, retry_left, a, sgid, &msg, segs);
                return match step {
                    rc::Step::Reply(r) => {
                        if let Reply::Ack(_) = r {
                            if !op.is_send() {
                                qp.tables.stats.inc(Counter::RdmaSends);
                            }
                        }
                        // A peer on another host answers a fault with an RNR NAK, never a wait.
                        finish(qp, op, r, segs, len, 0)
                    }
                    rc::Step::Exec(e) => {
                        if let Exec::Sent = e {
                            *moved = moved.saturating_add(msg.carried());
                        }
                        e
                    }
                    rc::Step::Waiting => Exec::Sent,
                    rc::Step::Done(s) => Exec::Done(s, 0),
                };
            }
            // UC: a message to nobody is lost, and its requester never learns.
            None if qp.qp_type == QpType::Uc => return Exec::Done(WcStatus::Success, len as u32),
            None => return Exec::NoAnswer,
        }
    };
    let Some(reply) = deliver_mapped(&dest, &msg, segs, read_like, moved) else {
        return Exec::Done(WcStatus::LocProtErr, 0);
    };
    if let Reply::Ack(_) = reply {
        account(qp, &dest, op, len, netdev::ib_mtu_bytes(a.path_mtu));
    }
    let rnr_timer = dest.min_rnr_timer.load(Acquire) as u8;
    finish(qp, op, reply, segs, len, rnr_timer)
}

/// The completion (or retry) the answer `reply` to the WQE `op` of `len` bytes comes to;
/// an atomic's original value goes into `segs`. `rnr_timer` is the responder's RNR timer
/// code, for a wait for its fault.
fn finish(
    qp: &QpShared,
    op: WrOpcode,
    reply: Reply,
    segs: &[Seg],
    len: usize,
    rnr_timer: u8,
) -> Exec {
    if qp.qp_type == QpType::Uc {
        return match reply {
            // The responder's own page is faulted in: the message waits for it, as RC's does
            // (on one host nothing is lost meanwhile).
            Reply::Wait => Exec::Wait(None),
            // `deliver_mapped` answers it.
            Reply::Retry => Exec::Done(WcStatus::LocProtErr, 0),
            // Taken or dropped by the responder: UC has no answers.
            _ => Exec::Done(WcStatus::Success, len as u32),
        };
    }
    match reply {
        Reply::Ack(orig) => {
            let byte_len = if op.is_atomic() {
                if transfer(segs, 0, Src::Inline(&orig.to_ne_bytes()), 8, Faults::ALL).is_err() {
                    return Exec::Done(WcStatus::LocProtErr, 0);
                }
                8
            } else {
                len as u32
            };
            Exec::Done(WcStatus::Success, byte_len)
        }
        Reply::Nak(Nak::InvReq) => Exec::Done(WcStatus::RemInvReqErr, 0),
        Reply::Nak(Nak::Access) => Exec::Done(WcStatus::RemAccessErr, 0),
        Reply::Nak(Nak::Op) => Exec::Done(WcStatus::RemOpErr, 0),
        Reply::Rnr(t) => Exec::Rnr(t),
        // A receiver whose buffer is not mapped loses the datagram (its fault is queued for
        // the next one): an unreliable datagram may be lost, and a receiver must not hold up
        // its sender's queue, which serves every destination.
        Reply::Drop | Reply::Wait if qp.qp_type.is_ud() => Exec::Done(WcStatus::Success, 0),
        // As the RNR NAK with the responder's timer that its fault would answer on the wire.
        Reply::Wait => Exec::Wait(Some(rnr_timer)),
        Reply::Drop => Exec::NoAnswer,
        // `deliver_mapped` answers it.
        Reply::Retry => Exec::Done(WcStatus::LocProtErr, 0),
    }
}

/// Delivers `msg` to `dest` and returns the answer, adding the bytes moved to `moved`. When
/// the responder found a page of this QP's memory `segs` unmapped (it never faults it, see
/// `resp`), the pages are faulted in again here, on this QP's own worker (a doorbell leaves
/// ODP memory to it) and under its own lock only (a fault that blocks, on a stalled FUSE
/// daemon say, blocks this QP alone), and the message is delivered again, up to
/// [`DELIVERIES`] times. A SEND or WRITE whose pages went away again is delivered from a copy
/// of its data (see [`bounce`]). `None` when the pages cannot be faulted in or kept going
/// away.
fn deliver_mapped(
    dest: &Arc<QpShared>,
    msg: &Message<'_>,
    segs: &[Seg],
    write: bool,
    moved: &mut usize,
) -> Option<Reply> {
    for i in 0..DELIVERIES {
        *moved = moved.saturating_add(msg.carried());
        // `Reply::Wait` returns: the responder's fault work schedules this QP again.
        match deliver(dest, msg) {
            // A page of the copy that cannot be faulted in ends the delivery as a failed
            // refault would (EAGAIN from a fault that kept losing included).
            Reply::Retry if !write && i > 0 => match bounce(msg).ok()? {
                Some(data) => {
                    *moved = moved.saturating_add(msg.carried());
                    return Some(deliver(
                        dest,
                        &Message {
                            data: Src::Inline(&data),
                            ..*msg
                        },
                    ));
                }
                None => refault(segs, write).ok()?,
            },
            Reply::Retry => refault(segs, write).ok()?,
            r => return Some(r),
        }
    }
    None
}

/// The data of the SEND or WRITE `msg` (of at most [`BOUNCE_MAX`] bytes), copied aside a page
/// at a time, each piece faulted in as it is copied: for a message whose pages an
/// invalidation keeps taking away between the requester's fault of all of them and the
/// responder's copy of all of them (memory the MM changes faster than the whole message can
/// be faulted in, a file whose page cache is dropped every few milliseconds say), where one
/// page at a time still makes progress. `None` for other messages, or when the copy cannot be
/// allocated (the message goes on with the retries); the error of a page that cannot be
/// faulted in.
fn bounce(msg: &Message<'_>) -> Result<Option<KVVec<u8>>> {
    let data_op = matches!(
        msg.opcode,
        WrOpcode::Send
            | WrOpcode::SendWithImm
            | WrOpcode::SendWithInv
            | WrOpcode::RdmaWrite
            | WrOpcode::RdmaWriteWithImm
    );
    if !data_op || !matches!(msg.data, Src::Segs(_)) || msg.len > BOUNCE_MAX {
        return Ok(None);
    }
    // Up to BOUNCE_MAX for one message: a failed allocation falls back to the retries, quietly.
    let Ok(mut data) = KVVec::from_elem(0u8, msg.len, GFP_KERNEL | __GFP_NOWARN) else {
        return Ok(None);
    };
    let mut k = 0;
    while k < msg.len {
        let n = (msg.len - k).min(PAGE_SIZE);
        gather(msg.data, k, &mut data[k..k + n], true)?;
        k += n;
        wq::cond_resched();
    }
    Ok(Some(data))
}

/// Delivers a datagram sent to a multicast group to every QP attached to it on the host, then
/// sends it on the wire to the group's IP multicast address for the members on other hosts
/// (the copy IP loops back, and one that reaches another rodp device of this host, are dropped
/// on receipt); returns the send's completion status. (Multicast allocates its list of
/// receivers: it is not the fast path.)
fn multicast(
    qp: &QpShared,
    msg: &Message<'_>,
    qpn: u32,
    path_mtu: u32,
    moved: &mut usize,
) -> WcStatus {
    let Some(mgid) = msg.ud.map(|u| u.dgid) else {
        return WcStatus::LocQpOpErr;
    };
    if qpn != mcast::MULTICAST_QPN {
        // A group has no QP numbers: the datagram reaches nobody.
        return WcStatus::Success;
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
        return WcStatus::LocQpOpErr;
    }
    for d in &dests {
        // The datagram's pages are faulted in again for each receiver that finds one unmapped.
        // A receiver whose own buffer is not mapped loses it (`Reply::Wait`: its fault is
        // queued for the next datagram), as an unreliable datagram may be lost.
        let segs = match msg.data {
            Src::Segs(s) => s,
            Src::Inline(_) => &[],
        };
        if let Some(Reply::Ack(_)) = deliver_mapped(d, msg, segs, false, moved) {
            account(qp, d, msg.opcode, msg.len, netdev::ib_mtu_bytes(path_mtu));
        }
    }
    match wire::send_ud(qp, msg, mcast::MULTICAST_QPN) {
        Err(wire::NotSent::Local) => WcStatus::LocProtErr,
        // Lost (no route, no memory) as the network may lose it.
        Ok(()) | Err(wire::NotSent::Lost) => WcStatus::Success,
    }
}

/// Counts a message that `qp` completed with `dst` on both devices.
fn account(qp: &QpShared, dst: &QpShared, op: WrOpcode, len: usize, mtu: u32) {
    let (req, resp) = (&qp.tables.stats, &dst.tables.stats);
    if !op.is_send() {
        req.inc(Counter::RdmaSends);
        resp.inc(Counter::RdmaRecvs);
    }
    // Reads and atomics carry their data in the responses.
    let (fwd, back) = match op {
        WrOpcode::RdmaRead => (0, len),
        _ if op.is_atomic() => (0, 8),
        // A FLUSH carries no data: its length is the range's.
        WrOpcode::Flush => (0, 0),
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
