// SPDX-License-Identifier: GPL-2.0

//! The responder (rxe's `rxe_resp.c`): checks a message against the receiving QP, executes
//! it on the QP's memory and receive queue, completes receives, and answers with an ACK, a NAK
//! or an RNR NAK.
//!
//! It runs in the requester's run (its worker, or a user's doorbell) with the receiving QP's
//! receive side locked, holding the
//! requester's send side: so it never faults and never waits for anything user space
//! controls. It uses the receiving QP's own ODP memory only where it is mapped: for a missing
//! page it hands exactly the range it needs to the receiving QP's own fault work
//! ([`super::fault`]) and answers [`Reply::Wait`]; the requester runs again when that fault
//! ends, and the retried delivery finds the pages, or the fault's failure, and ends as a
//! failed fault always did. It copies from and to the requester's memory only the pages the
//! requester has mapped (the requester faulted them in before delivering). When one of them
//! went away in between (the copy tells whose page it found missing), the message is given up
//! with [`Reply::Retry`]: the requester faults
//! again and retries. Either way a receive WQE taken stays pending for the next delivery.

use super::{
    fault::{self, Want},
    packet::grh,
    xfer::{resolve, transfer, Seg, Segs, Src},
    Message, Nak, Reply, GRH_LEN,
};
use crate::{
    ib::{
        abi::Wc,
        umem::AtomicOp,
        verbs::{access, flush, wc_flags, wc_opcode, Event, QpState, QpType, WcStatus, WrOpcode},
    },
    mr::MrRef,
    mw::Via,
    odp::{Faults, UNMAPPED, UNMAPPED_SRC},
    qp::{QpShared, RecvSide},
    stats::Counter,
};
use kernel::{
    prelude::*,
    sync::{
        atomic::Acquire,
        barrier::{smp_mb, Full},
        Arc,
    },
};

/// Executes `m` at the responder QP `dst` and returns its answer.
pub(super) fn receive(dst: &Arc<QpShared>, m: &Message<'_>) -> Reply {
    let mut rq = dst.rq.lock();
    // rxe's `check_addr`: a connected QP hears only its peer. Checked first, so that a message
    // from anyone else changes nothing (no state, no receive, no event) and gets no answer: its
    // requester retries and ends with a retry-exceeded error, as for a lost packet.
    if !dst.qp_type.is_ud() && rq.peer != (m.src_qpn, m.src_gid) {
        drop(rq);
        dst.tables.stats.inc(Counter::RcvdPeerErr);
        return Reply::Drop;
    }
    if !dst.can_receive() {
        return Reply::Drop;
    }
    if let Some(ud) = &m.ud {
        if ud.qkey != dst.qkey.load(Acquire) {
            return Reply::Drop;
        }
    }
    comm_established(dst, &mut rq);
    let r = match m.opcode {
        WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => send(dst, &mut rq, m),
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => write(dst, &mut rq, m),
        WrOpcode::RdmaRead => read(dst, m),
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd | WrOpcode::AtomicWrite => {
            atomic(dst, m)
        }
        WrOpcode::Flush => flush(dst, m),
        // Local operations never leave the requester.
        WrOpcode::LocalInv | WrOpcode::BindMw | WrOpcode::RegMr => Reply::Nak(Nak::InvReq),
    };
    rq.segs.clear();
    drop(rq);
    answered(dst, r)
}

/// Raises `IB_EVENT_COMM_EST` for the first message since RTR.
pub(super) fn comm_established(dst: &QpShared, rq: &mut RecvSide) {
    if !rq.established {
        rq.established = true;
        if dst.state() == QpState::Rtr {
            dst.events.event(Event::CommEst);
        }
    }
}

/// Counts the answer `r` of the responder `dst` and moves it to ERR when it is a NAK; returns
/// `r`. Called with no ring lock held (the QP's event handler may call back). A UC responder
/// only drops a message it cannot take (IBTA 9.9.3, rxe's class D and E errors): its QP goes
/// on, and its requester never learns.
pub(super) fn answered(dst: &Arc<QpShared>, r: Reply) -> Reply {
    match r {
        Reply::Nak(_) => dst.tables.stats.inc(Counter::RcvdErr),
        Reply::Rnr(_) => dst.tables.stats.inc(Counter::SendRnrErr),
        _ => {}
    }
    if dst.qp_type == QpType::Uc {
        return r;
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
    // Only RC asks the requester to come back; UC and UD lose the message.
    Err(if dst.qp_type == QpType::Rc {
        Reply::Rnr(dst.min_rnr_timer.load(Acquire) as u8)
    } else {
        Reply::Drop
    })
}

fn recv_wc(dst: &QpShared, m: &Message<'_>, wr_id: u64, status: WcStatus) -> Wc {
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

/// Completes the receive WQE in `rq.slot` (no longer `pending`) with `wc`.
fn recv_done(dst: &QpShared, pending: &mut bool, wc: &Wc, solicited: bool) {
    *pending = false;
    dst.rcq.post(wc, solicited, &dst.events);
}

/// Completes the receive WQE in `rq.slot` with an error.
fn recv_err(dst: &QpShared, m: &Message<'_>, pending: &mut bool, wr_id: u64, status: WcStatus) {
    recv_done(dst, pending, &recv_wc(dst, m, wr_id, status), false);
}

/// Neither side faults during delivery.
const MAPPED: Faults = Faults {
    dst: false,
    src: false,
};

/// Why the responder's own memory is not usable now.
enum Miss {
    /// Its fault is queued on the QP's fault work, which schedules the requester again.
    Wait,
    /// Its fault failed (a hole, read-only memory, ...), as a synchronous fault could.
    Failed,
}

/// Hands the fault of `len` bytes at `off` of `mr`, the responder's own memory, to the QP's
/// fault work (see [`Miss`]).
fn wait_for(
    dst: &Arc<QpShared>,
    m: &Message<'_>,
    mr: &MrRef,
    off: usize,
    len: usize,
    write: bool,
) -> Miss {
    let from = m.ticket.map(|t| ((!m.resends).then_some(m.from), t));
    let w = Want::new(mr.shared(), off, len, write).ahead(m.ahead);
    match fault::ask(dst, from, w) {
        Ok(()) => Miss::Wait,
        Err(_) => Miss::Failed,
    }
}

/// Whether `len` bytes at `off` of `mr`, the responder's own memory, are mapped (writable when
/// `write`); when they are not, their fault goes to the QP's fault work.
fn own(
    dst: &Arc<QpShared>,
    m: &Message<'_>,
    mr: &MrRef,
    off: usize,
    len: usize,
    write: bool,
) -> Result<(), Miss> {
    match mr.mapped(off, len, write) {
        Ok(()) => {
            if let Some(t) = m.ticket {
                fault::found(dst, t);
            }
            Ok(())
        }
        Err(e) if e == UNMAPPED => Err(wait_for(dst, m, mr, off, len, write)),
        Err(_) => Err(Miss::Failed),
    }
}

/// [`own`] for each of `segs`, in order.
fn own_segs(dst: &Arc<QpShared>, m: &Message<'_>, segs: &[Seg], write: bool) -> Result<(), Miss> {
    segs.iter().try_for_each(|s| {
        s.elements()
            .try_for_each(|(off, len)| own(dst, m, &s.mr, off, len, write))
    })
}

/// Calls `f` with the MR, offset and length of each piece of the bytes `start..start + len`
/// of `segs` (as far as `segs` reach), in order, until it fails.
fn each_piece<E>(
    segs: &[Seg],
    start: usize,
    len: usize,
    mut f: impl FnMut(&MrRef, usize, usize) -> Result<(), E>,
) -> Result<(), E> {
    let end = start.saturating_add(len);
    let mut base = 0;
    for s in segs {
        let n = s.bytes();
        let (mut pos, hi) = (start.max(base), end.min(base + n));
        while pos < hi {
            let (off, rest) = s.at(pos - base);
            let k = rest.min(hi - pos);
            if k == 0 {
                break;
            }
            f(&s.mr, off, k)?;
            pos += k;
        }
        base += n;
        if base >= end {
            break;
        }
    }
    Ok(())
}

/// [`own_segs`] for a later part of a message, the bytes `start..start + len` of `segs`: when
/// they are all mapped, nothing else is looked at; else the rest of `segs` from `start` is
/// owned, so that one fault takes in what the message still needs (as at its first part).
fn own_part(
    dst: &Arc<QpShared>,
    m: &Message<'_>,
    segs: &[Seg],
    start: usize,
    len: usize,
    write: bool,
) -> Result<(), Miss> {
    if each_piece(segs, start, len, |mr, off, k| mr.mapped(off, k, write)).is_ok() {
        if let Some(t) = m.ticket {
            fault::found(dst, t);
        }
        return Ok(());
    }
    each_piece(segs, start, usize::MAX, |mr, off, k| {
        own(dst, m, mr, off, k, write)
    })
}

/// The answer to a copy at the responder that failed with `e`; `segs` are the responder's side
/// of it, the copy's destination when `write` (else its source). An unmapped page is the
/// responder's own (its fault is queued, even if the page is back already: the requester's
/// memory is not to blame) or else the requester's ([`Reply::Retry`]), as the copy tells.
fn copy_failed(dst: &Arc<QpShared>, m: &Message<'_>, segs: &[Seg], write: bool, e: Error) -> Reply {
    let (mine, theirs) = if write {
        (UNMAPPED, UNMAPPED_SRC)
    } else {
        (UNMAPPED_SRC, UNMAPPED)
    };
    if e == theirs {
        return Reply::Retry;
    }
    if e != mine {
        return Reply::Nak(Nak::Op);
    }
    let miss = match own_segs(dst, m, segs, write) {
        // Mapped again since: fault the first range anyway, which finds it mapped.
        Ok(()) => match segs.first() {
            Some(s) => wait_for(dst, m, &s.mr, s.run.off, s.run.len, write),
            None => Miss::Failed,
        },
        Err(miss) => miss,
    };
    match miss {
        Miss::Wait => Reply::Wait,
        Miss::Failed => Reply::Nak(Nak::Op),
    }
}

/// The data copy into the responder's memory `dst` from the requester's, both of which must be
/// mapped, and the answer when it fails.
fn copy_in(qp: &Arc<QpShared>, dst: &[Seg], skip: usize, m: &Message<'_>) -> Result<(), Reply> {
    transfer(dst, skip, m.data, m.len, MAPPED).map_err(|e| copy_failed(qp, m, dst, true, e))
}

fn send(dst: &Arc<QpShared>, rq: &mut RecvSide, m: &Message<'_>) -> Reply {
    send_part(dst, rq, m, 0, true, true)
}

/// Places `m`, the part at `off` of a SEND (all of it when `first` and `last`), into the
/// receive WQE the first part takes; the last part completes it.
pub(super) fn send_part(
    dst: &Arc<QpShared>,
    rq: &mut RecvSide,
    m: &Message<'_>,
    off: usize,
    first: bool,
    last: bool,
) -> Reply {
    if first {
        if let Err(r) = take_recv(dst, rq) {
            return r;
        }
    } else if !rq.pending {
        // A later part whose receive WQE was flushed meanwhile.
        return Reply::Nak(Nak::InvReq);
    }
    let RecvSide {
        slot,
        segs,
        pending,
        ..
    } = rq;
    let wr_id = slot.wr_id;
    segs.clear();
    let skip = if m.ud.is_some() { GRH_LEN } else { 0 } + off;
    // The receive buffers: their keys, then their pages, which must be mapped (a hole or
    // read-only memory is a local protection error, as for the requester). All of them at the
    // first packet, so that one fault takes in what the message needs; a later packet's own
    // bytes only (each packet checking the whole buffer made a long SEND cost its pages times
    // its packets).
    let room = match resolve(dst, &slot.sges, access::LOCAL_WRITE, segs, false)
        .map_err(|_| Miss::Failed)
        .and_then(|n| {
            if first {
                own_segs(dst, m, segs, true)
            } else {
                own_part(dst, m, segs, skip, m.len, true)
            }
            .map(|()| n)
        }) {
        Ok(n) => n,
        // The WQE stays pending.
        Err(Miss::Wait) => return Reply::Wait,
        Err(Miss::Failed) => {
            recv_err(dst, m, pending, wr_id, WcStatus::LocProtErr);
            return Reply::Nak(Nak::Op);
        }
    };
    if m.len + skip > room {
        recv_err(dst, m, pending, wr_id, WcStatus::LocLenErr);
        return if m.ud.is_some() {
            Reply::Drop
        } else {
            Reply::Nak(Nak::InvReq)
        };
    }
    let mut flags = 0;
    if let Some(ud) = &m.ud {
        let h = grh(&ud.sgid, &ud.dgid, m.len as u32, ud.hop_limit, ud.tclass);
        if let Err(e) = transfer(segs, 0, Src::Inline(&h), GRH_LEN, MAPPED) {
            return copy_failed(dst, m, segs, true, e);
        }
        flags |= wc_flags::GRH;
    }
    // An unmapped page leaves the receive WQE pending for the next delivery.
    if let Err(r) = copy_in(dst, segs, skip, m) {
        return r;
    }
    if !last {
        return Reply::Ack(0);
    }
    let mut wc = recv_wc(dst, m, wr_id, WcStatus::Success);
    wc.byte_len = (m.len + skip) as u32;
    if m.opcode == WrOpcode::SendWithImm {
        flags |= wc_flags::WITH_IMM;
        wc.imm_data = m.imm;
    }
    if m.opcode == WrOpcode::SendWithInv {
        // The data is in place: the receive buffers' passes go first, or an invalidation of
        // the registration holding them would wait (up to the gate's limit, in the worker
        // every QP of the device shares) for this very access to leave.
        segs.clear();
        // The key travels where immediate data would; the window must be bound to this QP.
        if dst.tables.invalidate(m.imm, Via::Send(dst)).is_err() {
            recv_err(dst, m, pending, wr_id, WcStatus::RemInvReqErr);
            return Reply::Nak(Nak::InvReq);
        }
        flags |= wc_flags::WITH_INVALIDATE;
        wc.imm_data = m.imm;
    }
    wc.wc_flags = flags;
    recv_done(dst, pending, &wc, m.solicited);
    Reply::Ack(0)
}

/// The responder's memory for an RDMA access (a range per element through an extended
/// window), or the answer: a NAK, or [`Reply::Wait`] while its pages are faulted in.
fn remote_segs(
    dst: &Arc<QpShared>,
    m: &Message<'_>,
    len: usize,
    right: u32,
) -> Result<Segs, Reply> {
    if dst.access.load(Acquire) & right == 0 {
        return Err(Reply::Nak(Nak::Access));
    }
    // An MR's key or a window's.
    let segs = dst
        .tables
        .remote(dst, m.rkey, m.remote_addr, len as u64, right)
        .and_then(|r| Segs::of(r, len))
        .map_err(|_| Reply::Nak(Nak::Access))?;
    // ODP: pages that cannot be faulted in (a hole, read-only memory) deny the access.
    match own_segs(dst, m, &segs, right != access::REMOTE_READ) {
        Ok(()) => Ok(segs),
        Err(Miss::Wait) => Err(Reply::Wait),
        Err(Miss::Failed) => Err(Reply::Nak(Nak::Access)),
    }
}

fn write(dst: &Arc<QpShared>, rq: &mut RecvSide, m: &Message<'_>) -> Reply {
    write_part(dst, rq, m, m.len as u32, true)
}

/// Places `m`, a part of an RDMA WRITE of `total` bytes at its own remote address, and for the
/// last part of a WRITE with immediate completes a receive WQE.
pub(super) fn write_part(
    dst: &Arc<QpShared>,
    rq: &mut RecvSide,
    m: &Message<'_>,
    total: u32,
    last: bool,
) -> Reply {
    let target = if m.len > 0 {
        match remote_segs(dst, m, m.len, access::REMOTE_WRITE) {
            Ok(t) => Some(t),
            Err(r) => return r,
        }
    } else if dst.access.load(Acquire) & access::REMOTE_WRITE == 0 {
        return Reply::Nak(Nak::Access);
    } else {
        None
    };
    let imm = last && m.opcode == WrOpcode::RdmaWriteWithImm;
    if imm {
        if let Err(r) = take_recv(dst, rq) {
            return r;
        }
    }
    if let Some(segs) = target {
        // Data placed before an unmapped page stays; the retry writes it again.
        if let Err(r) = copy_in(dst, &segs, 0, m) {
            return r;
        }
    }
    if imm {
        let mut wc = recv_wc(dst, m, rq.slot.wr_id, WcStatus::Success);
        wc.opcode = wc_opcode::RECV_RDMA_WITH_IMM;
        wc.byte_len = total;
        wc.wc_flags = wc_flags::WITH_IMM;
        wc.imm_data = m.imm;
        recv_done(dst, &mut rq.pending, &wc, m.solicited);
    }
    Reply::Ack(0)
}

/// The memory an RDMA READ of `m.len` bytes reads (none for zero bytes), or the answer.
pub(super) fn read_target(dst: &Arc<QpShared>, m: &Message<'_>) -> Result<Option<Segs>, Reply> {
    if dst.max_dest_rd_atomic.load(Acquire) == 0 {
        return Err(Reply::Nak(Nak::InvReq));
    }
    if m.len == 0 {
        return Ok(None);
    }
    remote_segs(dst, m, m.len, access::REMOTE_READ).map(Some)
}

fn read(dst: &Arc<QpShared>, m: &Message<'_>) -> Reply {
    let segs = match read_target(dst, m) {
        Ok(Some(t)) => t,
        Ok(None) => return Reply::Ack(0),
        Err(r) => return r,
    };
    // Into the reader's memory; both sides must be mapped.
    match transfer(m.read_into, 0, Src::Segs(&segs), m.len, MAPPED) {
        Ok(()) => Reply::Ack(0),
        Err(e) => copy_failed(dst, m, &segs, false, e),
    }
}

/// The aligned word an atomic at `m.remote_addr` works on, or the answer: through an
/// extended window its 8 bytes must lie in one element and map to an aligned MR address
/// (else an invalid request).
fn remote_word(dst: &Arc<QpShared>, m: &Message<'_>, right: u32) -> Result<(MrRef, usize), Reply> {
    let [Seg { mr, run }] = match remote_segs(dst, m, 8, right)? {
        Segs::One(s) => s,
        Segs::Many(v) => {
            let mut it = v.into_iter();
            match (it.next(), it.next()) {
                (Some(s), None) if s.run.count == 1 && (s.mr.iova + s.run.off as u64) % 8 == 0 => {
                    [s]
                }
                _ => return Err(Reply::Nak(Nak::InvReq)),
            }
        }
    };
    Ok((mr, run.off))
}

/// An atomic, or an ATOMIC WRITE (its 8 bytes stored at once, after everything written
/// before; it needs the right to write, as rxe's `atomic_write_reply`): each takes a
/// `max_dest_rd_atomic` resource and an aligned word.
pub(super) fn atomic(dst: &Arc<QpShared>, m: &Message<'_>) -> Reply {
    let Some(op) = m.atomic else {
        return Reply::Nak(Nak::InvReq);
    };
    if dst.max_dest_rd_atomic.load(Acquire) == 0 || m.remote_addr % 8 != 0 || m.len != 8 {
        return Reply::Nak(Nak::InvReq);
    }
    let right = match op {
        AtomicOp::Write(_) => access::REMOTE_WRITE,
        _ => access::REMOTE_ATOMIC,
    };
    let (mr, off) = match remote_word(dst, m, right) {
        Ok(t) => t,
        Err(r) => return r,
    };
    match mr.atomic(off, op, false) {
        Ok(orig) => Reply::Ack(orig),
        // Invalidated since `remote_word` found it mapped.
        Err(e) if e == UNMAPPED => match wait_for(dst, m, &mr, off, 8, true) {
            Miss::Wait => Reply::Wait,
            Miss::Failed => Reply::Nak(Nak::InvReq),
        },
        Err(_) => Reply::Nak(Nak::InvReq),
    }
}

/// A FLUSH (rxe's `process_flush`): an unknown placement type or level is an invalid request
/// (rxe ignores them); the QP must allow each placement type asked for and the key grant it
/// over the range, or at the MR level over everything it reaches, else it is a remote access
/// error (a QP without the right is one for every operation in rodp; rxe calls it an invalid
/// request). rodp places data with the CPU's own stores, so
/// making what came before globally visible is a full barrier; no MR has the persistent right
/// (rodp does not offer it), so a persistent FLUSH is a remote access error.
pub(super) fn flush(dst: &Arc<QpShared>, m: &Message<'_>) -> Reply {
    let Some(f) = m.flush else {
        return Reply::Nak(Nak::InvReq);
    };
    let mut need = 0;
    if f.placement & flush::GLOBAL != 0 {
        need |= access::FLUSH_GLOBAL;
    }
    if f.placement & flush::PERSISTENT != 0 {
        need |= access::FLUSH_PERSISTENT;
    }
    let known = f.placement & !(flush::GLOBAL | flush::PERSISTENT) == 0;
    if need == 0 || !known || !matches!(f.selectivity, flush::RANGE | flush::MR) {
        return Reply::Nak(Nak::InvReq);
    }
    if dst.access.load(Acquire) & need != need {
        return Reply::Nak(Nak::Access);
    }
    let t = &dst.tables;
    let granted = if f.selectivity == flush::MR {
        t.remote_whole(dst, m.rkey, m.remote_addr, need)
    } else {
        t.remote(dst, m.rkey, m.remote_addr, m.len as u64, need)
            .map(|_| ())
    };
    if granted.is_err() {
        return Reply::Nak(Nak::Access);
    }
    smp_mb(Full);
    Reply::Ack(0)
}
