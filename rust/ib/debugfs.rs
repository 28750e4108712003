// SPDX-License-Identifier: GPL-2.0

//! rodp's directory in debugfs, `<debugfs>/rodp/`: made at module load, removed at unload,
//! with one directory per device under it (`kernel::debugfs`).
//!
//! `rdma_link_ops::newlink` has no context argument, so the root lives in a global lock that
//! the module's [`Root`] fills and empties.

use kernel::{
    debugfs::{Dir, Scope, ScopedDir},
    global_lock,
    prelude::*,
};

global_lock! {
    // SAFETY: `Root::new` initialises it at module load, before any device (its only other
    // user) can exist.
    unsafe(uninit) static ROOT: Mutex<Option<Dir>> = None;
}

/// Ownership of `<debugfs>/rodp/`, held by the module.
pub(crate) struct Root(());

impl Root {
    /// Makes the directory; called once, from module init.
    pub(crate) fn new() -> Self {
        // SAFETY: Called once per module load, before anything else uses `ROOT`.
        unsafe { ROOT.init() };
        *ROOT.lock() = Some(Dir::new(c"rodp"));
        Self(())
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        // Devices hold their own references to the directory; it goes with the last one.
        drop(ROOT.lock().take());
    }
}

/// Makes `<debugfs>/rodp/<name>/`, filled by `init` with files that show `data`; the
/// directory goes when the returned scope is dropped.
pub(crate) fn device_dir<T, F>(name: &CStr, data: T, init: F) -> Result<Pin<KBox<Scope<T>>>>
where
    T: Send + Sync + 'static,
    F: for<'d, 's> FnOnce(&'d T, &'s ScopedDir<'d, 's>),
{
    let root = ROOT.lock().clone().ok_or(ENOENT)?;
    KBox::pin_init(root.scope(data, name, init), GFP_KERNEL)
}
