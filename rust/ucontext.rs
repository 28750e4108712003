// SPDX-License-Identifier: GPL-2.0

//! User contexts: one per open of the device by a process (rxe's `rxe_alloc_ucontext`).

use crate::device::Device;
use kernel::prelude::*;

/// The driver data of a user context: nothing yet. The rxe ABI passes no driver data with the
/// command, and ib_core's uobjects track what a context owns.
pub(crate) struct UContext;

impl UContext {
    /// Creates the context data.
    pub(crate) fn new(_dev: &Device) -> Result<Self> {
        Ok(Self)
    }
}
