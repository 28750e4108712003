// SPDX-License-Identifier: GPL-2.0

//! User contexts: one per open of the device by a process (rxe's `rxe_alloc_ucontext`).

use crate::device::Device;
use kernel::prelude::*;

/// The driver data of a user context.
pub(crate) struct UContext {
    /// Name of the device, for messages about this context.
    _private: (),
}

impl UContext {
    /// Creates the context data; the rxe ABI passes no driver data with the command.
    pub(crate) fn new(_dev: &Device) -> Result<Self> {
        Ok(Self { _private: () })
    }
}
