// SPDX-License-Identifier: GPL-2.0

//! CRC-32 (`include/linux/crc32.h`): the kernel's table-driven or CPU-accelerated `crc32_le`,
//! which the kernel crate does not wrap.

use crate::ib::bindings;

/// Continues the IEEE CRC-32 (LSB first, polynomial `0xedb88320`) `crc` over `data`, with no
/// inversion on entry or exit (`crc32_le`).
pub(crate) fn crc32_le(crc: u32, data: &[u8]) -> u32 {
    // SAFETY: `data` is a valid slice: its pointer is readable for `data.len()` bytes for the
    // duration of the call, and `crc32_le` only reads them; it may be called in any context.
    unsafe { bindings::crc32_le(crc, data.as_ptr().cast(), data.len()) }
}
