// SPDX-License-Identifier: GPL-2.0

//! Faults of a responder's own ODP memory, on the responder QP's own work item (the role of
//! mlx5's page-fault work queue: the NIC answers the message with an RNR NAK while the driver
//! faults, and the requester retries).
//!
//! The responder runs in the requester's run (its work item, or the doorbell of the process that
//! posted), holding the requester's send side: it
//! never faults there. When a range of its own memory is not mapped, it records the range
//! ([`Want`]) and the waiting requester here and answers [`super::Reply::Wait`]; the fault
//! runs on the responder QP's fault work, holding no lock of any QP, and then kicks every
//! requester that waited. The retried delivery finds the pages mapped, or the failure of the
//! fault it waited for ([`Ticket`]) recorded for exactly that range ([`FaultState::done`]), and
//! ends as a synchronous fault that failed would have; or, after [`ROUNDS`] faults that each
//! succeeded and were undone before it came back, as one that kept losing to invalidations.

use crate::{mr::MrShared, qp::QpShared};
use core::cell::Cell;
use kernel::{
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
};

/// The most bytes a fault takes in beyond the range a delivery found unmapped
/// (`Message::ahead`; mlx5 prefetches up to 4 MiB of an RDMA request in its responder's
/// page fault, `MAX_PREFETCH_LEN` in its `odp.c`).
pub(crate) const AHEAD: usize = 1 << 20;

/// A range of a responder's own memory to fault in.
#[derive(Clone)]
pub(crate) struct Want {
    mr: Arc<MrShared>,
    off: usize,
    len: usize,
    /// Bytes after the range taken in with it when they can be (see [`run`]).
    ahead: usize,
    write: bool,
}

impl Want {
    /// `[off, off + len)` of `mr`, writable when `write`.
    pub(crate) fn new(mr: Arc<MrShared>, off: usize, len: usize, write: bool) -> Self {
        Self {
            mr,
            off,
            len,
            ahead: 0,
            write,
        }
    }

    /// The same range, with up to `n` bytes after it (within the MR) taken in too.
    pub(crate) fn ahead(self, n: usize) -> Self {
        let end = self.off.saturating_add(self.len);
        let room = usize::try_from(self.mr.length).map_or(usize::MAX, |l| l.saturating_sub(end));
        Self {
            ahead: n.min(room),
            ..self
        }
    }

    /// What the outcome of its fault remembers: the registration by its serial, not held (a
    /// deregistered MR's memory must go at once, whether or not a delivery comes back).
    fn name(&self) -> Named {
        Named {
            serial: self.mr.serial,
            off: self.off,
            len: self.len,
            write: self.write,
        }
    }
}

/// A [`Want`] by name.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Named {
    serial: u64,
    off: usize,
    len: usize,
    write: bool,
}

/// Rounds of one message in which its responder's fault of a range succeeded but the retried
/// delivery found the range unmapped again (an invalidation after each fault, say a responder
/// that keeps discarding its pages): the delivery then ends as a synchronous fault that kept
/// losing to invalidations ended (`EAGAIN` after the ODP layer's 256 attempts).
const ROUNDS: u32 = 256;

/// The number of the next fault of any responder (never 0, never reused: a ticket names one
/// fault of one QP).
static SEQ: Atomic<u64> = Atomic::new(1);

/// What the message at the head of a requester's send queue knows of the responder's fault it
/// waits for (`SendSide::ticket`, reset with every WQE): the number of the fault it waits for
/// (0: none) and its [`ROUNDS`] so far. Only a delivery holding a fault's number takes its
/// outcome.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(crate) struct Ticket {
    seq: u64,
    rounds: u32,
}

impl Ticket {
    /// The number of the fault waited for (0: none).
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }
}

/// A requester waiting for a fault (`FaultState::waiters`), if it is to be scheduled when the
/// fault ends (not one on the wire: it sends the message again by itself), and its ticket.
pub(crate) type Waiter<'a> = (Option<&'a Arc<QpShared>>, &'a Cell<Ticket>);

/// A responder QP's fault state (`QpShared::fault`): taken under the QP's receive side by the
/// responder and alone by the fault work, never held across a fault.
pub(crate) struct FaultState {
    /// The range queued or being faulted, and the fault's number.
    want: Option<(u64, Want)>,
    /// The requesters to schedule when the fault ends.
    waiters: KVec<Arc<QpShared>>,
    /// The last fault's number, range and outcome: for the deliveries that waited for it.
    done: Option<(u64, Named, Result)>,
}

/// What [`FaultState::check`] tells a delivery that found a range of its own memory unmapped.
#[derive(PartialEq, Eq, Debug)]
enum Verdict {
    /// Fault it (again), or wait for the fault under way.
    Ask,
    /// Fail with this error.
    Fail(Error),
}

impl FaultState {
    /// Nothing wanted, nothing done.
    pub(crate) fn new() -> Self {
        Self {
            want: None,
            waiters: KVec::new(),
            done: None,
        }
    }

    /// [`verdict`] for this state.
    fn check(&self, t: Ticket, n: Named) -> (Verdict, Ticket) {
        verdict(self.want.as_ref().map(|w| w.0), self.done, t, n)
    }

    /// Forgets the fault queued and the last outcome (a reset or destroyed QP: no delivery
    /// that waited before may take them); returns the waiters to schedule.
    fn forget(&mut self) -> KVec<Arc<QpShared>> {
        self.want = None;
        self.done = None;
        core::mem::take(&mut self.waiters)
    }
}

/// The verdict for a delivery with ticket `t` that found `n` unmapped, given the fault `under_way`
/// and the last one `done`; and its ticket updated. The outcome of a fault counts only for the
/// deliveries that waited for it, and only for its range: a failure recorded is not another
/// delivery's, nor one's after a reset. A message that asks again after the fault it waited for
/// ended (a success, whose pages went away again since, or another range's fault) starts one more
/// round.
fn verdict(
    under_way: Option<u64>,
    done: Option<(u64, Named, Result)>,
    t: Ticket,
    n: Named,
) -> (Verdict, Ticket) {
    if t.seq == 0 || under_way == Some(t.seq) {
        return (Verdict::Ask, t);
    }
    if let Some((seq, d, Err(e))) = done {
        if seq == t.seq && d == n {
            return (Verdict::Fail(e), Ticket::default());
        }
    }
    let rounds = t.rounds + 1;
    if rounds >= ROUNDS {
        return (Verdict::Fail(EAGAIN), Ticket::default());
    }
    (Verdict::Ask, Ticket { seq: 0, rounds })
}

/// The responder of `dst` found `w` of its own memory unmapped during a delivery; `from` is the
/// requester that waits for it (none for a datagram, which is lost: its receiver's fault is
/// only queued for the next one; for an RC packet from the wire only its ticket: its requester
/// sends it again after the RNR NAK). `Err` with the error of the fault that `from` waited for, of
/// exactly this range (the delivery then ends as a failed fault of its own would), or `EAGAIN`
/// after [`ROUNDS`]; otherwise `Ok` once the fault is queued (or one is under way) and `from`
/// will be scheduled when it ends: the message waits.
pub(super) fn ask(dst: &Arc<QpShared>, from: Option<Waiter<'_>>, w: Want) -> Result {
    let mut f = dst.fault.lock();
    if let Some((q, ticket)) = from {
        let (v, mut t) = f.check(ticket.get(), w.name());
        if let Verdict::Fail(e) = v {
            ticket.set(t);
            return Err(e);
        }
        if let Some(q) = q.filter(|q| !f.waiters.iter().any(|x| Arc::ptr_eq(x, q))) {
            // The data path allocates here only while a fault is under way; without memory
            // the delivery fails as the fault would.
            if f.waiters.push(q.clone(), GFP_KERNEL).is_err() {
                ticket.set(Ticket::default());
                return Err(ENOMEM);
            }
        }
        // With another range under way, `from` waits for that one; its end schedules `from`,
        // whose next delivery asks for this one.
        t.seq = match &f.want {
            Some((seq, _)) => *seq,
            None => SEQ.fetch_add(1, Relaxed),
        };
        ticket.set(t);
        if f.want.is_none() {
            f.want = Some((t.seq, w));
            drop(f);
            // Not queued while `want` was empty: the last run cleared it before it returned.
            dst.kick_fault();
        }
    } else if f.want.is_none() {
        f.want = Some((SEQ.fetch_add(1, Relaxed), w));
        drop(f);
        dst.kick_fault();
    }
    Ok(())
}

/// The delivery holding `ticket` found the range it waited for mapped: the outcome of that
/// fault is nobody else's.
pub(super) fn found(dst: &QpShared, ticket: &Cell<Ticket>) {
    let seq = ticket.get().seq;
    if seq == 0 {
        return;
    }
    let mut f = dst.fault.lock();
    if matches!(f.done, Some((s, _, _)) if s == seq) {
        f.done = None;
    }
}

/// Forgets `qp`'s queued fault and last outcome (modify to RESET, destroy) and schedules the
/// requesters that waited, whose next delivery finds the QP reset.
pub(crate) fn forget(qp: &QpShared) {
    let waiters = qp.fault.lock().forget();
    for q in waiters {
        q.kick();
    }
}

/// The fault work of the responder QP `qp`: faults the wanted range in with no lock held
/// (charged to the memory cgroup of the MR's registration, as every fault of it), records the
/// outcome and schedules the requesters that waited.
pub(crate) fn run(qp: &Arc<QpShared>) {
    // Parked while the QP's user holds its share of the workers (`share`): the wanted range
    // stays queued, and the work is queued again later.
    let Some(_worker) = super::share::enter(qp, super::share::Job::Fault) else {
        return;
    };
    let Some((seq, w)) = qp.fault.lock().want.clone() else {
        return;
    };
    // A registration deregistered or replaced since is not faulted: the retried delivery
    // finds its key gone.
    let r = match w.mr.enter() {
        Some(access) => {
            drop(access);
            // The bytes ahead are a bonus: when they cannot be taken in (a hole after the
            // range, read-only memory), the range alone decides.
            match w.ahead {
                0 => w.mr.touch(w.off, w.len, w.write),
                n => {
                    w.mr.touch(w.off, w.len + n, w.write)
                        .or_else(|_| w.mr.touch(w.off, w.len, w.write))
                }
            }
        }
        None => Err(ENOENT),
    };
    let waiters = {
        let mut f = qp.fault.lock();
        if !matches!(f.want, Some((s, _)) if s == seq) {
            // Forgotten meanwhile (a reset): its outcome is nobody's.
            return;
        }
        f.want = None;
        f.done = Some((seq, w.name(), r));
        core::mem::take(&mut f.waiters)
    };
    for q in waiters {
        q.kick();
    }
}

#[kunit_tests(rodp_resp_fault)]
mod tests {
    use super::*;

    const fn named(serial: u64, off: usize) -> Named {
        Named {
            serial,
            off,
            len: 4096,
            write: true,
        }
    }

    const fn ticket(seq: u64, rounds: u32) -> Ticket {
        Ticket { seq, rounds }
    }

    #[test]
    fn a_failure_is_only_its_waiters_for_its_range() {
        let mut f = FaultState::new();
        f.done = Some((7, named(1, 0), Err(EFAULT)));
        // A delivery that never waited (a new message, or one after a reset): no failure.
        assert_eq!(
            f.check(ticket(0, 0), named(1, 0)),
            (Verdict::Ask, ticket(0, 0))
        );
        // One that waited for another fault: not its failure either.
        assert_eq!(f.check(ticket(6, 0), named(1, 0)).0, Verdict::Ask);
        // Its waiter, for another range, another registration, or a read of it: not its.
        assert_eq!(f.check(ticket(7, 0), named(1, 4096)).0, Verdict::Ask);
        assert_eq!(f.check(ticket(7, 0), named(2, 0)).0, Verdict::Ask);
        let read = Named {
            write: false,
            ..named(1, 0)
        };
        assert_eq!(f.check(ticket(7, 0), read).0, Verdict::Ask);
        // Its waiter for its range: every waiter of that fault gets it.
        let want = (Verdict::Fail(EFAULT), Ticket::default());
        assert_eq!(f.check(ticket(7, 3), named(1, 0)), want);
        assert_eq!(f.check(ticket(7, 0), named(1, 0)), want);
    }

    #[test]
    fn a_fault_under_way_is_waited_for_without_a_round() {
        let done = Some((4, named(1, 0), Err(EFAULT)));
        // The fault 5 is queued: nothing ended for its waiter yet.
        let v = verdict(Some(5), done, ticket(5, 2), named(1, 0));
        assert_eq!(v, (Verdict::Ask, ticket(5, 2)));
    }

    #[test]
    fn a_success_whose_pages_went_again_is_a_round_up_to_the_limit() {
        let mut f = FaultState::new();
        f.done = Some((9, named(3, 0), Ok(())));
        assert_eq!(
            f.check(ticket(9, 0), named(3, 0)),
            (Verdict::Ask, ticket(0, 1))
        );
        assert_eq!(
            f.check(ticket(9, ROUNDS - 2), named(3, 0)),
            (Verdict::Ask, ticket(0, ROUNDS - 1))
        );
        assert_eq!(
            f.check(ticket(9, ROUNDS - 1), named(3, 0)),
            (Verdict::Fail(EAGAIN), Ticket::default())
        );
    }

    #[test]
    fn forgetting_drops_the_queued_fault_and_the_outcome() {
        let mut f = FaultState::new();
        f.done = Some((11, named(1, 0), Err(EFAULT)));
        assert!(f.forget().is_empty());
        assert!(f.done.is_none() && f.want.is_none());
        // Its former waiter now only starts a round.
        assert_eq!(
            f.check(ticket(11, 0), named(1, 0)),
            (Verdict::Ask, ticket(0, 1))
        );
    }
}
