// SPDX-License-Identifier: GPL-2.0

//! Extended memory windows (`Documentation/xmw.rst`, issue 15): windows whose binding is a
//! layout of pieces of MRs and windows rather than one range of one MR. What works so far:
//! the device's answer to what it binds ([`caps`]), MRs granting non-contiguous binding
//! (`Mr::grant_noncontig`), windows given a descriptor budget (`Mw::extend`), and the layout
//! arithmetic ([`layout`]). No layout kind is reported until a bound layout carries data.

pub(crate) mod layout;

use crate::ib::device::XmwCaps;

/// Most entries of one layout, and the largest descriptor budget a window may ask for
/// (`max_mkey_list_sz`).
pub(crate) const MAX_LIST: u32 = 256;

/// What the device binds (`RODP_METHOD_DEVICE_QUERY_XMW`): only limits that calls already
/// honour.
pub(crate) fn caps() -> XmwCaps {
    XmwCaps {
        max_list: MAX_LIST,
        ..XmwCaps::default()
    }
}
