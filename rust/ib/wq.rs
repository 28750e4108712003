// SPDX-License-Identifier: GPL-2.0

//! The module's workqueue (`alloc_workqueue` / `destroy_workqueue`): the engine's requesters
//! run on it, and module unload drains it. The kernel crate only wraps the system queues.

use crate::bindings;
use kernel::{prelude::*, workqueue::Queue};

/// Ownership of the module's workqueue: created at load, drained and destroyed on drop.
///
/// # Invariants
///
/// While a `ModuleQueue` exists, the helper's static workqueue pointer is valid.
pub(crate) struct ModuleQueue(());

impl ModuleQueue {
    /// Allocates the workqueue; only one may exist.
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: FFI call; called once from module init.
        kernel::error::to_result(unsafe { bindings::wq_create() })?;
        Ok(Self(()))
    }
}

impl Drop for ModuleQueue {
    fn drop(&mut self) {
        // SAFETY: Destroyed once; `destroy_workqueue` waits for queued and running work.
        unsafe { bindings::wq_destroy() };
    }
}

/// The module's workqueue.
///
/// Only code of this module enqueues work, and only while the module is loaded, which is while
/// the [`ModuleQueue`] in the module's state exists.
pub(crate) fn get() -> &'static Queue {
    // SAFETY: The pointer is valid from module init to module exit (see above).
    unsafe { Queue::from_raw(bindings::wq().cast()) }
}
