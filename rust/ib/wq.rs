// SPDX-License-Identifier: GPL-2.0

//! The module's workqueues (`alloc_workqueue` / `destroy_workqueue`): the engine's requesters
//! and deliveries run on them, and module unload drains them. The kernel crate only wraps the
//! system queues.
//!
//! Kernel consumers include storage (NFS over RDMA, NVMe over Fabrics): memory reclaim may
//! write pages back through a rodp QP and wait for it. So a kernel consumer's QP and the
//! inbox of received packets (which never faults user memory in: the responder leaves that to
//! the fault work) run on a queue of their own with a rescuer ([`reclaim`]: `WQ_MEM_RECLAIM`,
//! its work runs even when no new worker can be created), where no work waits for a user (a
//! user's QP may fault its memory in, and a stalled FUSE daemon behind that memory may stall it
//! for as long as it likes: that work, prefetches and ODP bookkeeping go to [`get`]). The work
//! that moves a kernel consumer's data also allocates under [`NoIo`]: reclaim from inside it
//! never starts I/O, which could wait for that very work.

use crate::ib::bindings;
use kernel::{
    prelude::*,
    sync::atomic::{Acquire, Atomic, Full, Release},
    workqueue::Queue,
};

/// The module's workqueues while a [`ModuleQueue`] exists, null otherwise: users' work, and
/// work that reclaim may wait for.
static WQ: Atomic<*mut bindings::workqueue_struct> = Atomic::new(core::ptr::null_mut());
static WQ_RECLAIM: Atomic<*mut bindings::workqueue_struct> = Atomic::new(core::ptr::null_mut());

/// Ownership of the module's workqueues: created at load, drained and destroyed on drop.
///
/// # Invariants
///
/// While a `ModuleQueue` exists, `WQ` and `WQ_RECLAIM` hold valid workqueues that it owns.
pub(crate) struct ModuleQueue(());

/// Allocates a workqueue named `name` with `flags` and installs it in `slot`, which must be
/// empty (`EBUSY` otherwise).
fn install(
    slot: &Atomic<*mut bindings::workqueue_struct>,
    name: &'static CStr,
    flags: u32,
) -> Result {
    // SAFETY: FFI call; the name is a static C string.
    let wq = unsafe { bindings::alloc_workqueue(name.as_char_ptr(), flags) };
    if wq.is_null() {
        return Err(ENOMEM);
    }
    if slot.cmpxchg(core::ptr::null_mut(), wq, Release).is_err() {
        // SAFETY: The queue is ours and unused.
        unsafe { bindings::destroy_workqueue(wq) };
        return Err(EBUSY);
    }
    Ok(())
}

/// Destroys the workqueue in `slot` (waiting for its queued and running work) and empties it.
///
/// # Safety
///
/// The slot holds a workqueue this module allocated, and no work is queued on it afterwards.
unsafe fn uninstall(slot: &Atomic<*mut bindings::workqueue_struct>) {
    let wq = slot.xchg(core::ptr::null_mut(), Full);
    if !wq.is_null() {
        // SAFETY: Per the safety requirements.
        unsafe { bindings::destroy_workqueue(wq) };
    }
}

impl ModuleQueue {
    /// Allocates the workqueues; fails with `EBUSY` when they exist already.
    pub(crate) fn new() -> Result<Self> {
        let unbound = bindings::wq_flags_WQ_UNBOUND;
        install(&WQ, c"rodp", unbound)?;
        if let Err(e) = install(
            &WQ_RECLAIM,
            c"rodp_reclaim",
            unbound | bindings::wq_flags_WQ_MEM_RECLAIM,
        ) {
            // SAFETY: `WQ` holds the queue just made, which nothing has used.
            unsafe { uninstall(&WQ) };
            return Err(e);
        }
        // INVARIANT: both slots now hold the new queues.
        Ok(Self(()))
    }
}

impl Drop for ModuleQueue {
    fn drop(&mut self) {
        // SAFETY: The queues are ours (type invariant). The module's state drops this after
        // every device is gone, and with them every object that queues work (each QP, inbox
        // and MR waits for or cancels its own work when it goes), so none is queued after.
        unsafe {
            uninstall(&WQ);
            uninstall(&WQ_RECLAIM);
        }
    }
}

/// The module's queue for users' work.
///
/// Only code of this module enqueues work, and only while the module is loaded, which is while
/// the [`ModuleQueue`] in the module's state exists.
pub(crate) fn get() -> &'static Queue {
    // SAFETY: The pointer is valid from module init to module exit (see above).
    unsafe { Queue::from_raw(WQ.load(Acquire).cast()) }
}

/// The module's queue for work that memory reclaim may wait for: kernel consumers' QPs and
/// the inbox (see the module's documentation). As [`get`].
pub(crate) fn reclaim() -> &'static Queue {
    // SAFETY: As in `get`.
    unsafe { Queue::from_raw(WQ_RECLAIM.load(Acquire).cast()) }
}

/// Gives the CPU to other tasks if one is due (`cond_resched`): long copies of the engine call
/// it between pieces. The caller must hold no spinlock and not be in atomic context (a work
/// item holding only mutexes).
pub(crate) fn cond_resched() {
    // SAFETY: FFI call without arguments; the caller may sleep (see above).
    unsafe { bindings::cond_resched() };
}

/// A scope in which the current task's allocations start no I/O (`memalloc_noio_save`): as
/// long as it lives, `GFP_KERNEL` acts as `GFP_NOIO`. Scopes nest; each must end in the task
/// and in the reverse order it began, which owning it on the stack of one function ensures
/// (it is neither `Send` nor `Clone`).
pub(crate) struct NoIo {
    flags: u32,
    _not_send: core::marker::PhantomData<*mut ()>,
}

impl NoIo {
    /// Begins the scope.
    pub(crate) fn begin() -> Self {
        // SAFETY: FFI call without arguments; it changes only the current task's flags.
        let flags = unsafe { bindings::memalloc_noio_save() };
        Self {
            flags,
            _not_send: core::marker::PhantomData,
        }
    }
}

impl Drop for NoIo {
    fn drop(&mut self) {
        // SAFETY: `flags` came from the matching save in this task (the type is not `Send`),
        // and inner scopes, dropped first, have restored theirs.
        unsafe { bindings::memalloc_noio_restore(self.flags) };
    }
}
