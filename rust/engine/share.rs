// SPDX-License-Identifier: GPL-2.0

//! How many of the engine's workers one user may hold at once on a device.
//!
//! Every QP's requester and fault work, and deferred prefetches, run on the module's one
//! workqueue, at most 256 items at a time (`WQ_DFL_ACTIVE`). A work item that faults memory a
//! user controls can block as long as that user likes (an ODP MR over a FUSE file whose daemon
//! stalls), and a user with 256 such items would hold every worker. So the work of one user
//! (the effective UID that created the QP or advised the MR) holds at most [`USER_WORKERS`]
//! workers of a device at a time: a QP's requester or fault work that finds its user's share
//! taken parks (it returns at once, holding nothing) and is queued again when one of the
//! user's items ends; a prefetch beyond the share runs in the caller of `ibv_advise_mr`
//! instead. Root and kernel consumers are not counted.

use crate::{keys::Tables, qp::QpShared};
use kernel::{
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
    task::Kuid,
};

/// Workers one user's work may hold on a device at a time (of the workqueue's 256).
pub(crate) const USER_WORKERS: u32 = 32;

/// The work item of a QP that parked.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Job {
    /// Its requester (`QpShared::work`).
    Requester,
    /// Its fault work (`QpShared::fault_work`).
    Fault,
}

/// The user whose work this is: the caller's effective UID (its kernel value), `None` for root
/// and kernel threads, which are not counted.
pub(crate) fn current_user() -> Option<u32> {
    let uid = Kuid::current_euid().into_raw().val;
    (uid != 0).then_some(uid)
}

/// One user's share.
struct Holder {
    uid: u32,
    /// Workers held.
    busy: u32,
    /// The QPs waiting for a worker, in order.
    parked: KVec<(Arc<QpShared>, Job)>,
}

/// A device's users holding workers.
#[pin_data]
pub(crate) struct Workers {
    #[pin]
    users: Mutex<KVec<Holder>>,
}

impl Workers {
    /// Nobody holding any.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            users <- new_mutex!(KVec::new()),
        })
    }

    /// Takes a worker for `uid` if its share is not used up; `park` is queued again when one is
    /// released otherwise. Without memory to keep the count, the work runs uncounted rather
    /// than never.
    fn take(&self, uid: u32, park: Option<(&Arc<QpShared>, Job)>) -> bool {
        let mut users = self.users.lock();
        let i = match users.iter().position(|h| h.uid == uid) {
            Some(i) => i,
            None => {
                let h = Holder {
                    uid,
                    busy: 0,
                    parked: KVec::new(),
                };
                if users.push(h, GFP_KERNEL).is_err() {
                    return true;
                }
                users.len() - 1
            }
        };
        let h = &mut users[i];
        if h.busy < USER_WORKERS {
            h.busy += 1;
            return true;
        }
        let Some((qp, job)) = park else {
            return false;
        };
        if h.parked
            .iter()
            .any(|(q, j)| Arc::ptr_eq(q, qp) && *j == job)
        {
            return false;
        }
        if h.parked.push((qp.clone(), job), GFP_KERNEL).is_err() {
            h.busy += 1;
            return true;
        }
        false
    }

    /// Releases a worker of `uid` and queues the first work of its that parked.
    fn release(&self, uid: u32) {
        let resume = {
            let mut users = self.users.lock();
            let Some(i) = users.iter().position(|h| h.uid == uid) else {
                return;
            };
            let h = &mut users[i];
            h.busy = h.busy.saturating_sub(1);
            let next = if h.parked.is_empty() {
                None
            } else {
                h.parked.remove(0).ok()
            };
            if h.busy == 0 && h.parked.is_empty() {
                let _ = users.remove(i);
            }
            next
        };
        // Queued with no lock held; the QP reference goes with the work or is dropped here.
        if let Some((qp, job)) = resume {
            match job {
                Job::Requester => qp.kick(),
                Job::Fault => qp.kick_fault(),
            }
        }
    }
}

/// A worker held for a user's work on a device, released on drop.
pub(crate) struct Held {
    share: Option<(Arc<Tables>, u32)>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some((t, uid)) = self.share.take() {
            t.workers.release(uid);
        }
    }
}

/// A worker on the device of `tables` for a deferred prefetch of `uid`, if its share is not
/// used up.
pub(crate) fn try_take(tables: &Arc<Tables>, uid: Option<u32>) -> Option<Held> {
    match uid {
        None => Some(Held { share: None }),
        Some(u) => tables.workers.take(u, None).then(|| Held {
            share: Some((tables.clone(), u)),
        }),
    }
}

/// A worker for `qp`'s `job` (its requester or fault work, about to run), or `None`: its user
/// holds its share already, and the job is queued again when one of them ends.
pub(crate) fn enter(qp: &Arc<QpShared>, job: Job) -> Option<Held> {
    let Some(uid) = qp.user else {
        return Some(Held { share: None });
    };
    qp.tables.workers.take(uid, Some((qp, job))).then(|| Held {
        share: Some((qp.tables.clone(), uid)),
    })
}

#[kunit_tests(rodp_share)]
mod tests {
    use super::*;

    #[test]
    fn a_user_holds_its_share_and_no_more() {
        let w = KBox::pin_init(Workers::new(), GFP_KERNEL).unwrap();
        for _ in 0..USER_WORKERS {
            assert!(w.take(1000, None));
        }
        assert!(!w.take(1000, None));
        // Another user's share is its own.
        assert!(w.take(1001, None));
        w.release(1000);
        assert!(w.take(1000, None));
        assert!(!w.take(1000, None));
        for _ in 0..USER_WORKERS {
            w.release(1000);
        }
        w.release(1001);
        // Nobody holds anything: no entry is left behind.
        assert!(w.users.lock().is_empty());
    }
}
