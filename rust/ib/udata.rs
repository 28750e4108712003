// SPDX-License-Identifier: GPL-2.0

//! The driver-specific part of a uverbs command (`struct ib_udata`): input and response bytes.

use crate::ib::bindings;
use kernel::{
    prelude::*,
    uaccess::{UserPtr, UserSlice},
};

/// The driver data of one uverbs call.
///
/// # Invariants
///
/// `raw` is the valid udata of the call in progress, for `'a`.
pub(crate) struct Udata<'a> {
    raw: &'a mut bindings::ib_udata,
}

impl<'a> Udata<'a> {
    /// Wraps the udata ib_core passed, or `None` for kernel callers.
    ///
    /// # Safety
    ///
    /// `raw` is null or the valid udata of the call in progress, for `'a`.
    pub(crate) unsafe fn from_raw(raw: *mut bindings::ib_udata) -> Option<Self> {
        // SAFETY: Per the safety requirements.
        unsafe { raw.as_mut() }.map(|raw| Self { raw })
    }

    /// Bytes of driver input.
    pub(crate) fn inlen(&self) -> usize {
        self.raw.inlen
    }

    /// Room for the driver response.
    pub(crate) fn outlen(&self) -> usize {
        self.raw.outlen
    }

    /// Reads exactly `out.len()` bytes of driver input.
    pub(crate) fn read(&mut self, out: &mut [u8]) -> Result {
        if self.inlen() < out.len() {
            return Err(EINVAL);
        }
        // SAFETY: `out` is valid for its length; the helper copies from the user buffer.
        kernel::error::to_result(unsafe {
            bindings::copy_from_udata(out.as_mut_ptr().cast(), self.raw, out.len())
        })
    }

    /// Writes the driver response; fails with `EINVAL` when user space left no room for it.
    pub(crate) fn write(&mut self, data: &[u8]) -> Result {
        if self.outlen() < data.len() {
            return Err(EINVAL);
        }
        // SAFETY: `data` is valid for its length; the helper copies to the user buffer.
        kernel::error::to_result(unsafe {
            bindings::copy_to_udata(self.raw, data.as_ptr().cast_mut().cast(), data.len())
        })
    }
}

/// Copies `data` to the calling process's memory at `addr` (an address a command carried).
pub(crate) fn write_user(addr: u64, data: &[u8]) -> Result {
    let addr = usize::try_from(addr).map_err(|_| EFAULT)?;
    UserSlice::new(UserPtr::from_addr(addr), data.len())
        .writer()
        .write_slice(data)
}
