// SPDX-License-Identifier: GPL-2.0

//! The completer (rxe's `rxe_comp.c`): turns the answer to a send WQE into its completion,
//! or into a retry after the RNR or transport timer, and flushes the send queue of a QP in
//! error.
//!
//! Waiting is a timer per QP (an hrtimer that wakes the requester): a worker never sleeps for
//! a peer, so QPs in backoff cost no worker and cannot delay other QPs.

use super::fault::Ticket;
use crate::{
    ib::{
        abi::{SendWqe, Wc},
        verbs::{send_flags, WcStatus, WrOpcode},
    },
    qp::{QpShared, SendSide},
    queue::Queue,
    stats::Counter,
};
use kernel::{
    sync::{
        atomic::{Acquire, Release},
        Arc, ArcBorrow, MutexGuard,
    },
    time::{
        hrtimer::{HrTimerPointer, HrTimerRestart},
        Delta,
    },
};

/// RNR NAK timer codes in microseconds (IBA table 45; code 0 is the longest).
const RNR_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
    5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760,
    327_680, 491_520,
];

/// The shortest RNR timer of a wait for a responder's fault, in microseconds. The fault's end
/// runs the waiting WQE at once; its timer only counts the RNR retries (and would catch a lost
/// wake-up), so it need not run the requester every 10 us for as long as a stalled fault lasts
/// (for ever with `rnr_retry` 7).
const FAULT_RETRY_US: u32 = 1000;

/// What executing a WQE came to.
pub(super) enum Exec {
    /// Complete with a status; `byte_len` for reads and atomics.
    Done(WcStatus, u32),
    /// The responder had no receive WQE.
    Rnr(u8),
    /// No answer: retry later.
    NoAnswer,
    /// The responder faults its own memory in: run again when its fault work schedules this
    /// QP, or when a timer fires. RC waits as for the RNR NAK a responder on another host
    /// answers while it faults (`Some` of the responder's RNR timer code): each expiry is an
    /// RNR retry, so `rnr_retry` bounds the wait for one fault (7: no bound) exactly as on the
    /// wire. UC (`None`) has no RNR: the transport timer bounds it.
    Wait(Option<u8>),
    /// Sent to a peer on another host (again, after a timer or a PSN sequence NAK): run when
    /// its answer arrives, or when the retransmission timer, armed afresh, fires.
    Sent,
    /// Still waiting for that answer: nothing changes.
    Pending,
    /// The retransmission timer expired while datagrams that arrived before it still wait in
    /// the device's inbox (`wire::Backlog`): no retry is spent, and the requester looks again
    /// after an eighth of the timeout.
    Recheck,
    /// Not for a user's doorbell (its memory is paged on demand, and a fault must not block
    /// `ibv_post_send`): the QP's worker runs it.
    Defer,
}

/// The transport timer in microseconds: 4.096 us * 2^code; code 0 means "infinite", retried
/// every 10 ms here.
fn timeout_us(code: u8) -> i64 {
    if code == 0 {
        return 10_000;
    }
    let us = (4096u64 << code.min(24)) / 1000;
    us.clamp(100, 2_000_000) as i64
}

/// The retransmission timer (microseconds) of a WQE with `left` of the QP's `retry_cnt` (its
/// `timeout` code) transport retries
/// left (`None`: none spent since its last answer that moved on): the QP's timeout, doubled by
/// each retry spent in a row, up to four times it. IBTA lets the transport timer run up to four
/// times the timeout; backing off within that keeps a peer that is slow to answer (a loaded
/// host, one vCPU serving many QPs) from being flooded by every QP's retransmissions at once,
/// each of which it must take and acknowledge again, until it falls so far behind that no
/// answer arrives in time (TCP backs off likewise, RFC 6298 5.5).
fn retry_us(timeout: u8, retry_cnt: u8, left: Option<u8>) -> i64 {
    let spent = left.map_or(0, |l| retry_cnt.saturating_sub(l));
    timeout_us(timeout) << spent.min(2)
}

/// Arms `qp`'s backoff timer: the WQE at the head runs again when it fires.
fn backoff(qp: &Arc<QpShared>, sq: &mut SendSide, delay: Delta) {
    // A timer still running (a WQE waiting for a fault ran early and got another answer) is
    // cancelled first: dropping its handle later would cancel the new one.
    sq.backoff = None;
    qp.backoff_armed.store(true, Release);
    sq.backoff = Some(qp.clone().start(delay));
}

/// Whether the head WQE must still wait for its backoff timer; forgets an expired one. A WQE
/// waiting for a responder's fault runs whenever it is scheduled (the fault's end schedules
/// it): the timer only bounds the wait.
pub(super) fn backing_off(qp: &QpShared, sq: &mut SendSide) -> bool {
    if sq.backoff.is_none() {
        return false;
    }
    if qp.backoff_armed.load(Acquire) {
        return !sq.waiting;
    }
    sq.backoff = None;
    false
}

/// The backoff timer's callback (hard interrupt context): wakes the requester.
pub(crate) fn backoff_expired(qp: ArcBorrow<'_, QpShared>) -> HrTimerRestart {
    qp.backoff_armed.store(false, Release);
    Arc::from(qp).kick();
    HrTimerRestart::NoRestart
}

/// Finishes the WQE `w` at the head of `qp`'s send queue `q` with the result of executing
/// it; returns whether the requester goes on with the next WQE.
pub(super) fn complete(
    qp: &Arc<QpShared>,
    mut sq: MutexGuard<'_, SendSide>,
    q: &Queue,
    w: &SendWqe,
    op: Option<WrOpcode>,
    exec: Exec,
) -> bool {
    let a = sq.attr;
    let stats = &qp.tables.stats;
    match exec {
        Exec::Pending => return false,
        Exec::Defer => {
            drop(sq);
            qp.kick();
            return false;
        }
        Exec::Sent | Exec::Recheck => {
            sq.waiting = true;
            let us = match exec {
                Exec::Recheck => (timeout_us(a.timeout) / 8).max(100),
                _ => retry_us(a.timeout, a.retry_cnt, sq.retry_left),
            };
            backoff(qp, &mut sq, Delta::from_micros(us));
            return false;
        }
        _ => {}
    }
    let waited_for_fault = matches!(exec, Exec::Wait(_));
    let waited = core::mem::replace(&mut sq.waiting, waited_for_fault);
    if waited_for_fault {
        // Waiting for another fault than before (the last one ended): the timer and the retries
        // start again; only a wait without progress runs out of them. `fault::ROUNDS` bounds
        // the faults.
        let seq = sq.ticket.get().seq();
        if core::mem::replace(&mut sq.wait_seq, seq) != seq {
            sq.retry_left = None;
            sq.rnr_left = None;
            sq.backoff = None;
        } else if waited && sq.backoff.is_some() {
            // Run early (a doorbell) while the timer runs: wait on, counting nothing.
            return false;
        }
    }
    let (status, byte_len) = match exec {
        Exec::Done(s, l) => (s, l),
        Exec::Rnr(timer) | Exec::Wait(Some(timer)) => {
            stats.inc(Counter::RcvdRnrErr);
            let left = sq.rnr_left.get_or_insert(a.rnr_retry);
            if *left == 0 {
                stats.inc(Counter::RetryRnrExceededErr);
                (WcStatus::RnrRetryExcErr, 0)
            } else {
                // 7 means "retry forever".
                if *left != 7 {
                    *left -= 1;
                }
                let mut us = RNR_US[usize::from(timer & 31)];
                if waited_for_fault {
                    us = us.max(FAULT_RETRY_US);
                }
                backoff(qp, &mut sq, Delta::from_micros(us.into()));
                return false;
            }
        }
        Exec::NoAnswer
        | Exec::Wait(None)
        | Exec::Sent
        | Exec::Recheck
        | Exec::Pending
        | Exec::Defer => {
            let left = sq.retry_left.get_or_insert(a.retry_cnt);
            if *left == 0 && a.timeout != 0 {
                stats.inc(Counter::RetryExceededErr);
                (WcStatus::RetryExcErr, 0)
            } else {
                if a.timeout != 0 {
                    *left -= 1;
                }
                if matches!(exec, Exec::NoAnswer) {
                    // Re-resolve: the peer may appear or change state meanwhile.
                    sq.peer = None;
                }
                let us = retry_us(a.timeout, a.retry_cnt, sq.retry_left);
                backoff(qp, &mut sq, Delta::from_micros(us));
                return false;
            }
        }
    };
    sq.rnr_left = None;
    sq.retry_left = None;
    sq.ticket.set(Ticket::default());
    sq.wait_seq = 0;
    // A timer still running for a wait the fault's end cut short must not hold up the next WQE.
    sq.backoff = None;
    // Free the slot before the completion is visible: a consumer that sees the completion may
    // post into the slot at once.
    sq.cons = q.next(sq.cons);
    q.set_consumer(sq.cons);
    let failed = status != WcStatus::Success;
    // In ERR before the completion is visible (a consumer that sees it may reset the QP at
    // once, and a later move to ERR would undo that), and the completion posted while the
    // send queue is held: `destroy_qp` takes it, so no completion follows the destroy.
    let entered_err = failed && {
        stats.inc(Counter::SendErr);
        qp.enter_err()
    };
    if entered_err && qp.srq.is_none() {
        // The receives are flushed before the send's error completion is visible too: a
        // consumer that sees it may reset the QP and post new receives at once.
        qp.flush_recv();
    }
    if failed || qp.sig_all || w.send_flags & send_flags::SIGNALED != 0 {
        qp.scq
            .post(&send_wc(qp, w, op, status, byte_len), false, &qp.events);
    }
    drop(sq);
    if entered_err {
        if qp.srq.is_some() {
            // The SRQ's last-WQE event, raised with no ring lock held (its handler may call
            // back into the verbs).
            qp.flush_recv();
        }
        qp.kick();
    }
    true
}

fn send_wc(qp: &QpShared, w: &SendWqe, op: Option<WrOpcode>, status: WcStatus, len: u32) -> Wc {
    Wc {
        wr_id: w.wr_id,
        status,
        // An opcode rodp does not know completes as what it most likely meant.
        opcode: op.map_or(WrOpcode::Send, |o| o).wc_opcode(),
        byte_len: len,
        qp_num: qp.qpn,
        port_num: 1,
        ..Default::default()
    }
}

/// Completes every queued send WQE with `WR_FLUSH_ERR` and forgets any backoff.
pub(super) fn flush(qp: &QpShared, sq: &mut SendSide, q: &Queue) {
    sq.backoff = None;
    sq.waiting = false;
    sq.wire.forget();
    qp.answer.lock().forget();
    sq.ticket.set(Ticket::default());
    sq.wait_seq = 0;
    let prod = q.producer();
    let n = sq.buf.len().min(q.elem_size());
    while sq.cons != prod {
        if q.read(sq.cons, &mut sq.buf[..n]).is_err() {
            break;
        }
        let w = SendWqe::parse(&sq.buf);
        sq.cons = q.next(sq.cons);
        q.set_consumer(sq.cons);
        let mut wc = send_wc(
            qp,
            &w,
            WrOpcode::from_raw(w.opcode),
            WcStatus::WrFlushErr,
            0,
        );
        wc.port_num = 0;
        qp.scq.post(&wc, false, &qp.events);
    }
}

#[kernel::prelude::kunit_tests(rodp_comp)]
mod tests {
    use super::*;

    #[test]
    fn the_transport_timer_follows_the_timeout_code() {
        // 4.096 us * 2^14 = 67.1 ms; 0 is "infinite", looked at every 10 ms.
        assert_eq!(timeout_us(14), 67_108);
        assert_eq!(timeout_us(0), 10_000);
        // Bounded below and above.
        assert_eq!(timeout_us(1), 100);
        assert_eq!(timeout_us(31), 2_000_000);
    }

    #[test]
    fn retries_in_a_row_back_off_up_to_four_times_the_timeout() {
        let t = timeout_us(14);
        // The first transmission, and one after an answer that moved on.
        assert_eq!(retry_us(14, 7, None), t);
        // After one retry, two, and more: 2T, 4T, 4T ...
        assert_eq!(retry_us(14, 7, Some(6)), 2 * t);
        assert_eq!(retry_us(14, 7, Some(5)), 4 * t);
        assert_eq!(retry_us(14, 7, Some(0)), 4 * t);
        // retry_cnt 0: no retry was spent.
        assert_eq!(retry_us(14, 0, Some(0)), t);
        // timeout 0 (retry for ever, nothing counted): the 10 ms stays.
        assert_eq!(retry_us(0, 7, Some(7)), 10_000);
    }
}
