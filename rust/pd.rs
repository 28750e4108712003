// SPDX-License-Identifier: GPL-2.0

//! Protection domains (rxe's `rxe_alloc_pd` / `rxe_dealloc_pd`).

use crate::{device::Device, limit::Token};
use kernel::prelude::*;

/// The driver data of a protection domain; holds one unit of the device's PD limit.
pub(crate) struct Pd {
    _token: Token,
}

impl Pd {
    /// Allocates a PD on `dev`, within the device's advertised `max_pd`.
    pub(crate) fn new(dev: &Device) -> Result<Self> {
        Ok(Self {
            _token: dev.pds.take()?,
        })
    }
}
