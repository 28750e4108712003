// SPDX-License-Identifier: GPL-2.0

//! Faults of a responder's own ODP memory, on the responder QP's own work item (the role of
//! mlx5's page-fault work queue: the NIC answers the message with an RNR NAK while the driver
//! faults, and the requester retries).
//!
//! The responder runs on the requester's work item, holding the requester's send side: it
//! never faults there. When a range of its own memory is not mapped, it records the range
//! ([`Want`]) and the waiting requester here and answers [`super::Reply::Wait`]; the fault
//! runs on the responder QP's fault work, holding no lock of any QP, and then kicks every
//! requester that waited. The retried delivery finds the pages mapped, or the fault's failure
//! recorded for exactly that range ([`FaultState::done`]), and ends as a synchronous fault that
//! failed would have.

use crate::{mr::MrShared, qp::QpShared};
use kernel::{prelude::*, sync::Arc};

/// A range of a responder's own memory to fault in.
#[derive(Clone)]
pub(crate) struct Want {
    mr: Arc<MrShared>,
    off: usize,
    len: usize,
    write: bool,
}

impl Want {
    /// `[off, off + len)` of `mr`, writable when `write`.
    pub(crate) fn new(mr: Arc<MrShared>, off: usize, len: usize, write: bool) -> Self {
        Self {
            mr,
            off,
            len,
            write,
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

/// A responder QP's fault state (`QpShared::fault`): taken under the QP's receive side by the
/// responder and alone by the fault work, never held across a fault.
pub(crate) struct FaultState {
    /// The range queued or being faulted.
    want: Option<Want>,
    /// The requesters to schedule when the fault ends.
    waiters: KVec<Arc<QpShared>>,
    /// The last fault's range and outcome, until a delivery needing that range takes it.
    done: Option<(Named, Result)>,
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

    /// The outcome of the fault of `n` if that is the last fault that ended; taken, so that
    /// one delivery uses it once.
    fn take_done(&mut self, n: Named) -> Option<Result> {
        match self.done {
            Some((d, r)) if d == n => {
                self.done = None;
                Some(r)
            }
            _ => None,
        }
    }
}

/// The responder of `dst` found `w` of its own memory unmapped during a delivery from `from`.
/// `Err` with the error of the fault of exactly this range that ended since (the delivery
/// then ends as a failed fault of its own would); otherwise `Ok` once the fault is queued (or
/// already under way) and `from` will be scheduled when it ends: the message waits.
pub(super) fn ask(dst: &Arc<QpShared>, from: &Arc<QpShared>, w: Want) -> Result {
    let mut f = dst.fault.lock();
    // A success means the pages went away again since: fault once more.
    f.take_done(w.name()).unwrap_or(Ok(()))?;
    if !f.waiters.iter().any(|q| Arc::ptr_eq(q, from)) {
        // The data path allocates here only while a fault is under way; without memory the
        // delivery fails as the fault would.
        f.waiters
            .push(from.clone(), GFP_KERNEL)
            .map_err(|_| ENOMEM)?;
    }
    // With another range under way, its end schedules `from`, whose next delivery asks for
    // this one.
    if f.want.is_none() {
        f.want = Some(w);
        drop(f);
        // Not queued while `want` was empty: the last run cleared it before it returned.
        let _ = crate::ib::wq::get().enqueue::<_, 1>(dst.clone());
    }
    Ok(())
}

/// The fault work of the responder QP `qp`: faults the wanted range in with no lock held
/// (charged to the memory cgroup of the MR's registration, as every fault of it), records the
/// outcome and schedules the requesters that waited.
pub(crate) fn run(qp: &QpShared) {
    let Some(w) = qp.fault.lock().want.clone() else {
        return;
    };
    // A registration deregistered or replaced since is not faulted: the retried delivery
    // finds its key gone.
    let r = match w.mr.enter() {
        Some(access) => {
            drop(access);
            w.mr.touch(w.off, w.len, w.write)
        }
        None => Err(ENOENT),
    };
    let waiters = {
        let mut f = qp.fault.lock();
        f.want = None;
        f.done = Some((w.name(), r));
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

    #[test]
    fn a_failure_is_taken_once_by_its_range_only() {
        let mut f = FaultState::new();
        assert!(f.take_done(named(1, 0)).is_none());
        f.done = Some((named(1, 0), Err(EFAULT)));
        // Another range, another registration at the same offset, or a read of it: not its.
        assert!(f.take_done(named(1, 4096)).is_none());
        assert!(f.take_done(named(2, 0)).is_none());
        let read = Named {
            write: false,
            ..named(1, 0)
        };
        assert!(f.take_done(read).is_none());
        assert_eq!(f.take_done(named(1, 0)), Some(Err(EFAULT)));
        assert!(f.take_done(named(1, 0)).is_none());
    }

    #[test]
    fn a_success_is_taken_too() {
        let mut f = FaultState::new();
        f.done = Some((named(3, 0), Ok(())));
        assert_eq!(f.take_done(named(3, 0)), Some(Ok(())));
        assert!(f.done.is_none());
    }
}
