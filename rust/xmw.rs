// SPDX-License-Identifier: GPL-2.0

//! Extended memory windows (`Documentation/xmw.rst`, issue 15): windows whose binding is a
//! layout of pieces of MRs rather than one range of one MR. Here: what the device binds
//! ([`caps`]), the translation of a bind's entries and of the layout's verdicts, and the
//! layout arithmetic ([`layout`]). MRs grant non-contiguous binding (`Mr::grant_noncontig`),
//! windows take a descriptor budget (`Mw::extend`) and bind a layout
//! (`MwShared::bind_layout`), and accesses walk it and the windows it names
//! (`MwShared::resolve`, `MwShared::local`).

pub(crate) mod layout;

use crate::ib::{
    device::XmwCaps,
    uapi::{cap, XEntry, MAX_DIMS as ABI_DIMS},
};
use kernel::prelude::*;
use layout::{Dim, Entry, Invalid, Needs, MAX_DIMS};

/// Most entries of one layout, and the largest descriptor budget a window may ask for
/// (`max_mkey_list_sz`).
pub(crate) const MAX_LIST: u32 = 256;

/// Most elements one remote access through a layout touches (a packet of the largest MTU
/// in one-byte elements): a longer READ or WRITE is a remote access error.
pub(crate) const MAX_PIECES: usize = 4096;

/// The longest layout, `max_mr_size` (a window larger than any MR serves no transfer, and
/// overlapping entries could otherwise present memory many times over).
pub(crate) const MAX_TOTAL: u64 = 1 << 40;

/// Deepest nesting: a layout may name windows whose bindings name MRs only
/// (`Documentation/xmw.rst`, "Nesting"). Each level resolves its pieces under its own
/// window's lock, after the level above dropped its own.
pub(crate) const MAX_DEPTH: u32 = 2;

/// What the device binds (`RODP_METHOD_DEVICE_QUERY_XMW`): every layout kind, by call and
/// staged for the send queue (no inline entries), windows nested [`MAX_DEPTH`] deep.
pub(crate) fn caps() -> XmwCaps {
    XmwCaps {
        flags: cap::COMPOSITE
            | cap::INTERLEAVED
            | cap::REPETITION
            | cap::NONUNIFORM_REPETITION
            | cap::NONUNIFORM_TOTAL,
        max_list: MAX_LIST,
        max_inline_list: 0,
        max_depth: MAX_DEPTH,
        max_dims: MAX_DIMS as u32,
        max_total: MAX_TOTAL,
    }
}

/// The capability flag a layout needs.
pub(crate) fn needs_flag(n: Needs) -> u32 {
    match n {
        Needs::Composite => cap::COMPOSITE,
        Needs::Interleaved => cap::INTERLEAVED,
        Needs::Repetition => cap::REPETITION,
        Needs::NonuniformRepetition => cap::NONUNIFORM_REPETITION,
        Needs::NonuniformTotal => cap::NONUNIFORM_TOTAL,
    }
}

/// The errno of a layout [`layout::check`] refused.
pub(crate) fn errno(i: Invalid) -> Error {
    match i {
        Invalid::Shape => EINVAL,
        Invalid::Overflow => EOVERFLOW,
    }
}

/// The layout entry a bind gave, naming `obj`: too many dimensions is `EINVAL`.
pub(crate) fn entry<O>(g: &XEntry, obj: O) -> Result<Entry<O>> {
    const _: () = assert!(MAX_DIMS == ABI_DIMS);
    let ndims = g.ndims as usize;
    if ndims > MAX_DIMS {
        return Err(EINVAL);
    }
    let mut dims = [Dim {
        stride: 0,
        count: 1,
    }; MAX_DIMS];
    for (d, &(stride, count)) in dims.iter_mut().zip(&g.dims[..ndims]) {
        *d = Dim { stride, count };
    }
    Ok(Entry {
        obj,
        start: g.start,
        len: g.len,
        repeat: g.repeat,
        dims,
        ndims,
    })
}
