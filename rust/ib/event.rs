// SPDX-License-Identifier: GPL-2.0

//! Completion and asynchronous event delivery to a verbs object's consumer (`ib_cq`'s
//! `comp_handler`, the `event_handler` of CQs, QPs and SRQs).
//!
//! The driver keeps an [`Events`] for each CQ, QP and SRQ it creates and may call it from its
//! engine at any time; the binding layer revokes it when the object is destroyed, after which calls
//! do nothing.

use super::verbs::Event;
use crate::ib::bindings;
use core::ptr::NonNull;
use kernel::{
    new_spinlock_irq,
    prelude::*,
    sync::{
        atomic::{Acquire, Atomic, Release},
        Arc, SpinLockIrq,
    },
};

/// The object an [`Events`] reports on.
#[derive(Clone, Copy)]
pub(super) enum Target {
    /// A completion queue.
    Cq(NonNull<bindings::ib_cq>),
    /// A queue pair.
    Qp(NonNull<bindings::ib_qp>),
    /// A shared receive queue.
    Srq(NonNull<bindings::ib_srq>),
}

/// The event sink of one verbs object.
///
/// # Invariants
///
/// While `target` is `Some`, the object it points to is live: the binding layer sets it to `None`
/// (under the lock) in the object's destroy op, before ib_core frees it.
#[pin_data]
pub(crate) struct Events {
    /// An interrupt-safe lock: kernel consumers arm and poll CQs from any context, and their
    /// handlers run under it (as under a hardware driver's interrupt handler).
    #[pin]
    target: SpinLockIrq<Option<Target>>,
    /// The object's address, only ever handed back to ib_core (never dereferenced here), and
    /// whether it is still live; read without the lock by `poll_cq`, which runs under CQ locks.
    ident: Target,
    live: Atomic<bool>,
}

// SAFETY: The pointers are only dereferenced under the lock while the object is live.
unsafe impl Send for Events {}
// SAFETY: As above.
unsafe impl Sync for Events {}

impl Events {
    /// A sink for `target`, which must be live until [`Events::revoke`].
    pub(super) fn new(target: Target) -> Result<Arc<Self>> {
        // CQ sinks get their own lock class: a CQ's completion handler may call into verbs that
        // raise QP events.
        let lock = match target {
            Target::Cq(_) => new_spinlock_irq!(Some(target), "Events::cq"),
            _ => new_spinlock_irq!(Some(target), "Events::qp"),
        };
        // Inside `pin_init!`, `target` names the field being initialised.
        let ident = target;
        Arc::pin_init(
            pin_init!(Self {
                target <- lock,
                ident,
                live: Atomic::new(true),
            }),
            GFP_KERNEL,
        )
    }

    /// Stops delivery: the object is being destroyed.
    pub(super) fn revoke(&self) {
        self.live.store(false, Release);
        *self.target.lock() = None;
    }

    /// The QP this sink reports on, unless it was destroyed (kernel completions name it; a
    /// consumer polls only while its QPs exist).
    pub(super) fn qp_raw(&self) -> Option<*mut bindings::ib_qp> {
        match self.ident {
            Target::Qp(p) if self.live.load(Acquire) => Some(p.as_ptr()),
            _ => None,
        }
    }

    /// Calls the CQ's completion handler (`ib_cq.comp_handler`).
    pub(crate) fn completion(&self) {
        let t = self.target.lock();
        if let Some(Target::Cq(cq)) = *t {
            // SAFETY: The CQ is live while the target is set (type invariant), and ib_core set
            // the handler and context when it created the CQ.
            unsafe {
                let cq = cq.as_ptr();
                if let Some(h) = (*cq).comp_handler {
                    h(cq, (*cq).cq_context);
                }
            }
        }
    }

    /// Raises asynchronous event `ev` on the object.
    pub(crate) fn event(&self, ev: Event) {
        let t = self.target.lock();
        let Some(target) = *t else { return };
        // SAFETY: The object is live while the target is set (type invariant); handlers and
        // contexts were set by ib_core at creation; the event is built on the stack for the
        // call, as the C drivers do.
        unsafe {
            let mut e: bindings::ib_event = core::mem::zeroed();
            e.event = ev as u32;
            let (handler, ctx) = match target {
                Target::Cq(p) => {
                    let p = p.as_ptr();
                    e.device = (*p).device;
                    e.element.cq = core::mem::ManuallyDrop::new(p);
                    ((*p).event_handler, (*p).cq_context)
                }
                Target::Qp(p) => {
                    let p = p.as_ptr();
                    e.device = (*p).device;
                    e.element.qp = core::mem::ManuallyDrop::new(p);
                    ((*p).event_handler, (*p).qp_context)
                }
                Target::Srq(p) => {
                    let p = p.as_ptr();
                    e.device = (*p).device;
                    e.element.srq = core::mem::ManuallyDrop::new(p);
                    ((*p).event_handler, (*p).srq_context)
                }
            };
            if let Some(h) = handler {
                h(&mut e, ctx);
            }
        }
    }
}
