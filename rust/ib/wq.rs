// SPDX-License-Identifier: GPL-2.0

//! The module's workqueue (`alloc_workqueue` / `destroy_workqueue`): the engine's requesters
//! run on it, and module unload drains it. The kernel crate only wraps the system queues.
//!
//! Kernel consumers include storage (NFS over RDMA, NVMe over Fabrics): memory reclaim may
//! write pages back through a rodp QP and wait for it. So the queue has a rescuer
//! (`WQ_MEM_RECLAIM`: its work runs even when no new worker can be created), and the work that
//! moves a kernel consumer's data allocates under [`NoIo`]: reclaim from inside it never
//! starts I/O, which could wait for that very work.

use crate::ib::bindings;
use kernel::{
    prelude::*,
    sync::atomic::{Acquire, Atomic, Full, Release},
    workqueue::Queue,
};

/// The module's workqueue while a [`ModuleQueue`] exists, null otherwise.
static WQ: Atomic<*mut bindings::workqueue_struct> = Atomic::new(core::ptr::null_mut());

/// Ownership of the module's workqueue: created at load, drained and destroyed on drop.
///
/// # Invariants
///
/// While a `ModuleQueue` exists, `WQ` holds a valid workqueue that it owns.
pub(crate) struct ModuleQueue(());

impl ModuleQueue {
    /// Allocates the workqueue; fails with `EBUSY` when one exists already.
    pub(crate) fn new() -> Result<Self> {
        let flags = bindings::wq_flags_WQ_UNBOUND | bindings::wq_flags_WQ_MEM_RECLAIM;
        // SAFETY: FFI call; the name is a static C string.
        let wq = unsafe { bindings::alloc_workqueue(c"rodp".as_char_ptr(), flags) };
        if wq.is_null() {
            return Err(ENOMEM);
        }
        if WQ.cmpxchg(core::ptr::null_mut(), wq, Release).is_err() {
            // SAFETY: The queue is ours and unused.
            unsafe { bindings::destroy_workqueue(wq) };
            return Err(EBUSY);
        }
        // INVARIANT: `WQ` now holds the new queue.
        Ok(Self(()))
    }
}

impl Drop for ModuleQueue {
    fn drop(&mut self) {
        let wq = WQ.xchg(core::ptr::null_mut(), Full);
        // SAFETY: The queue is ours (type invariant); `destroy_workqueue` waits for queued and
        // running work.
        unsafe { bindings::destroy_workqueue(wq) };
    }
}

/// The module's workqueue.
///
/// Only code of this module enqueues work, and only while the module is loaded, which is while
/// the [`ModuleQueue`] in the module's state exists.
pub(crate) fn get() -> &'static Queue {
    // SAFETY: The pointer is valid from module init to module exit (see above).
    unsafe { Queue::from_raw(WQ.load(Acquire).cast()) }
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
