// SPDX-License-Identifier: GPL-2.0

//! Accesses in flight through a key (the references rxe's `rxe_cleanup` waits for): an access
//! enters the gate of the registration or window it resolved and leaves when it is done;
//! deregistration, re-registration and window deallocation close the gate, so no access
//! enters any more, and wait until the accesses inside have left.
//!
//! The gate's lock is innermost: nothing is taken under it, and it is taken under anything.

use core::ops::Deref;
use kernel::{
    new_condvar, new_spinlock,
    prelude::*,
    sync::{Arc, CondVar, CondVarTimeoutResult, SpinLock},
    time::{delay::fsleep, msecs_to_jiffies, Delta},
};

/// Longest a closing verb waits for the accesses inside (see [`Gate::close`]).
pub(crate) const CLOSE_WAIT_MS: u32 = 10_000;

/// One sleep of that wait.
const SLICE_MS: u32 = 100;

/// Who is inside a gate.
struct Inside {
    /// Accesses inside.
    count: usize,
    /// Closed: nobody enters any more.
    closed: bool,
}

/// The accesses in flight through one registration or window.
#[pin_data]
pub(crate) struct Gate {
    #[pin]
    inside: SpinLock<Inside>,
    /// Signalled when the last access leaves a closed gate.
    #[pin]
    empty: CondVar,
}

impl Gate {
    /// An open gate with nobody inside.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            inside <- new_spinlock!(Inside {
                count: 0,
                closed: false,
            }),
            empty <- new_condvar!(),
        })
    }

    /// Counts one more access; `false` once the gate is closed.
    fn enter(&self) -> bool {
        let mut inside = self.inside.lock();
        match inside.count.checked_add(1) {
            Some(n) if !inside.closed => {
                inside.count = n;
                true
            }
            _ => false,
        }
    }

    /// Uncounts an access that entered.
    fn leave(&self) {
        let mut inside = self.inside.lock();
        inside.count = inside.count.saturating_sub(1);
        if inside.count == 0 && inside.closed {
            self.empty.notify_all();
        }
    }

    /// Closes the gate without waiting for the accesses inside (an MR of `ib_alloc_mr`, made
    /// closed).
    pub(crate) fn shut(&self) {
        self.inside.lock().closed = true;
    }

    /// Whether the gate is closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.inside.lock().closed
    }

    /// Closes the gate and waits until every access that entered has left, for at most
    /// [`CLOSE_WAIT_MS`]; returns whether they all left. Sleeps: the caller holds no lock an
    /// access in flight may need (accesses hold only their QPs' locks and ODP umem mutexes, and
    /// leave when their message is done).
    ///
    /// The bound is for an access that cannot finish: one stuck in a fault of another user's
    /// ODP memory (a stalled FUSE file of the peer's) would otherwise make the verb, and the
    /// exit of the process calling it, wait for as long as that user likes. Giving up is
    /// memory-safe (an access keeps the registration's memory alive by its reference); what
    /// the caller loses is the promise that nothing moves through the old key after it returns.
    pub(crate) fn close(&self) -> bool {
        let mut inside = self.inside.lock();
        inside.closed = true;
        let mut left = CLOSE_WAIT_MS;
        while inside.count > 0 && left > 0 {
            let slice = left.min(SLICE_MS);
            left -= slice;
            match self
                .empty
                .wait_interruptible_timeout(&mut inside, msecs_to_jiffies(slice))
            {
                // A pending signal ends an interruptible sleep at once: sleep the slice out
                // without the lock (the verb cannot fail, and a signal must not shorten the
                // wait).
                CondVarTimeoutResult::Signal { .. } => {
                    drop(inside);
                    fsleep(Delta::from_millis(slice.into()));
                    inside = self.inside.lock();
                }
                CondVarTimeoutResult::Timeout | CondVarTimeoutResult::Woken { .. } => {}
            }
        }
        inside.count == 0
    }
}

/// An object with a [`Gate`].
pub(crate) trait Gated: Send + Sync {
    /// Its gate.
    fn gate(&self) -> &Gate;
}

/// One access inside the gate of a `T`; it leaves when the pass drops.
pub(crate) struct Pass<T: Gated>(Arc<T>);

impl<T: Gated> Pass<T> {
    /// Enters `obj`'s gate; `None` once it is closed.
    pub(crate) fn enter(obj: &Arc<T>) -> Option<Self> {
        obj.gate().enter().then(|| Self(obj.clone()))
    }

    /// The object, to hold without being inside its gate.
    pub(crate) fn obj(&self) -> &Arc<T> {
        &self.0
    }
}

impl<T: Gated> Deref for Pass<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Gated> Drop for Pass<T> {
    fn drop(&mut self) {
        self.0.gate().leave();
    }
}

#[kunit_tests(rodp_gate)]
mod tests {
    use super::*;

    #[pin_data]
    struct Obj {
        #[pin]
        gate: Gate,
    }

    impl Gated for Obj {
        fn gate(&self) -> &Gate {
            &self.gate
        }
    }

    #[test]
    fn a_closed_gate_refuses_and_an_empty_one_closes_at_once() -> Result {
        let o = Arc::pin_init(pin_init!(Obj { gate <- Gate::new() }), GFP_KERNEL)?;
        let a = Pass::enter(&o);
        assert!(a.is_some());
        assert!(Pass::enter(&o).is_some());
        drop(a);
        assert_eq!(o.gate.inside.lock().count, 0);
        assert!(o.gate.close());
        assert!(Pass::enter(&o).is_none());
        Ok(())
    }
}
