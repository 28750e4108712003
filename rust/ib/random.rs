// SPDX-License-Identifier: GPL-2.0

//! Random numbers (`include/linux/random.h`): the kernel crate has no safe wrapper for them.

use crate::ib::bindings;

/// A random `u32` from the kernel's CRNG (`get_random_u32`).
pub(crate) fn u32() -> u32 {
    // SAFETY: `get_random_u32` has no preconditions and may be called in any context.
    unsafe { bindings::get_random_u32() }
}

/// A random number in `0..n`, or 0 if `n` is 0 (the multiply-shift of
/// `get_random_u32_below`, without its rejection step: the bias is below `n / 2^32`).
pub(crate) fn below(n: u32) -> u32 {
    ((u64::from(u32()) * u64::from(n)) >> 32) as u32
}
