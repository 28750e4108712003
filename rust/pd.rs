// SPDX-License-Identifier: GPL-2.0

//! Protection domains (rxe's `rxe_alloc_pd` / `rxe_dealloc_pd`).

use crate::{device::Device, limit::Token};
use kernel::{
    prelude::*,
    sync::atomic::{Atomic, Relaxed},
};

/// Source of PD identities: every PD of every device gets a different one.
static NEXT_ID: Atomic<u64> = Atomic::new(1);

/// The driver data of a protection domain; holds one unit of the device's PD limit.
pub(crate) struct Pd {
    /// What MRs, AHs and QPs compare to check they share this PD.
    pub(crate) id: u64,
    _token: Token,
}

impl Pd {
    /// Allocates a PD on `dev`, within the device's advertised `max_pd`.
    pub(crate) fn new(dev: &Device) -> Result<Self> {
        Ok(Self {
            id: NEXT_ID.fetch_add(1, Relaxed),
            _token: dev.pds.take()?,
        })
    }
}
