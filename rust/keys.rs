// SPDX-License-Identifier: GPL-2.0

//! Keys and tables (rxe's `rxe_pool.c` indices and the key lookups of `rxe_mr.c` and
//! `rxe_mw.c`): the numbered objects of a device, the MR and window key space, and every access
//! made through a key — local and remote accesses, window binds and invalidations.
//!
//! A key is `index << 8 | variant byte`. MRs take the indices `1..=`[`MAX_MR`], windows the
//! indices above ([`MIN_MW`]`..=`[`MAX_MW_INDEX`]), so one lookup tells windows and MRs apart.
//! A new MR or window takes the next variant byte of its kind, so a key of an earlier object at
//! the same index does not reach it; a bind gives a window the byte its work request names
//! (see `mw.rs`). Re-registration keeps an MR's key.
//!
//! The checks an access makes belong to the object it reaches: [`MrShared::check`] for an MR,
//! `MwShared`'s for a window (each citing the IBA rule it enforces).

use crate::{
    ah::{self, AhShared},
    ib::abi::Bind as BindWr,
    mcast,
    mr::{Fault, MrRef, MrShared},
    mw::MwShared,
    odp::OdpCounters,
    qp::{self, QpShared},
    stats::Stats,
    table::Table,
};
use kernel::{
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
};

/// Maximum number of MRs per device (key indices `1..=MAX_MR`; memory windows use the indices
/// above).
pub(crate) const MAX_MR: u32 = (1 << 23) - 1;

/// Lowest window index: the MRs' indices end below it.
pub(crate) const MIN_MW: u32 = MAX_MR + 1;

/// Highest window index.
pub(crate) const MAX_MW_INDEX: u32 = (1 << 24) - 1;

/// Maximum number of memory windows per device.
pub(crate) const MAX_MW: u32 = MAX_MW_INDEX - MIN_MW + 1;

/// Variant bytes for new MR keys.
static MR_VARIANT: Atomic<u32> = Atomic::new(0);

/// Variant bytes for new window keys.
static MW_VARIANT: Atomic<u32> = Atomic::new(0);

/// The table index of `key`.
pub(crate) fn index(key: u32) -> u32 {
    key >> 8
}

/// Whether `key` names a window rather than an MR.
pub(crate) fn is_window(key: u32) -> bool {
    index(key) >= MIN_MW
}

/// Enters the object `make` builds for its new key in `table`, the key's variant byte the next
/// of `variants`.
fn insert<T: Send + Sync + 'static>(
    table: &Table<T>,
    variants: &Atomic<u32>,
    make: impl FnOnce(u32) -> Result<Arc<T>>,
) -> Result<Arc<T>> {
    let variant = variants.fetch_add(1, Relaxed) & 0xff;
    table.insert(|index| make(index << 8 | variant))
}

/// The numbered objects of a device the engine looks up: QPs by number, MRs and windows by key,
/// AHs by number. Shared with the objects (they outlive their ib_core structs while work is in
/// flight).
#[pin_data]
pub(crate) struct Tables {
    /// QPs by number.
    #[pin]
    pub(crate) qps: Table<QpShared>,
    /// MRs by key index.
    #[pin]
    pub(crate) mrs: Table<MrShared>,
    /// AHs by number.
    #[pin]
    pub(crate) ahs: Table<AhShared>,
    /// Memory windows by key index.
    #[pin]
    pub(crate) mws: Table<MwShared>,
    /// Multicast attachments.
    #[pin]
    pub(crate) groups: mcast::Groups,
    /// The device's ODP totals.
    pub(crate) odp: Arc<OdpCounters>,
    /// The device's counters.
    pub(crate) stats: Stats,
}

impl Tables {
    /// Empty tables for a device whose ODP totals are `odp`.
    pub(crate) fn new(odp: Arc<OdpCounters>) -> impl PinInit<Self> {
        pin_init!(Self {
            qps <- Table::new(qp::MIN_QPN, qp::MAX_QPN),
            mrs <- Table::new(1, MAX_MR),
            ahs <- Table::new(1, ah::MAX_AH),
            mws <- Table::new(MIN_MW, MAX_MW_INDEX),
            groups <- mcast::Groups::new(),
            odp,
            stats: Stats::new(),
        })
    }

    /// Enters the MR `make` builds for its new key.
    pub(crate) fn insert_mr(
        &self,
        make: impl FnOnce(u32) -> Result<Arc<MrShared>>,
    ) -> Result<Arc<MrShared>> {
        insert(&self.mrs, &MR_VARIANT, make)
    }

    /// Enters the window `make` builds for its first key.
    pub(crate) fn insert_mw(
        &self,
        make: impl FnOnce(u32) -> Result<Arc<MwShared>>,
    ) -> Result<Arc<MwShared>> {
        insert(&self.mws, &MW_VARIANT, make)
    }

    /// The registration `key` names now, if the key is current. Counts nothing: for lookups
    /// that are no device access to memory (a bind, the MR's own verbs).
    pub(crate) fn current(&self, key: u32) -> Option<Arc<MrShared>> {
        self.mrs.get(index(key)).filter(|m| m.key == key)
    }

    /// The MR for `key`, for a device access (the engine's local and remote accesses, a
    /// prefetch): a miss counts as `num_mrs_not_found`, as mlx5 counts the keys its page-fault
    /// handler does not find. An access enters it ([`MrShared::enter`]) before it moves data.
    pub(crate) fn mr(&self, key: u32) -> Option<Arc<MrShared>> {
        let mr = self.current(key);
        if mr.is_none() {
            self.odp.mrs_not_found.fetch_add(1, Relaxed);
        }
        mr
    }

    /// The window `key` indexes, if `key` is a window's (its key byte is not checked).
    fn window(&self, key: u32) -> Option<Arc<MwShared>> {
        if !is_window(key) {
            return None;
        }
        self.mws.get(index(key))
    }

    /// Executes a bind posted on `qp` (IBA 10.6.7.2.x, with rxe's checks): `Err` completes it
    /// with `IB_WC_MW_BIND_ERR`.
    pub(crate) fn bind_mw(&self, qp: &QpShared, w: &BindWr) -> Result<(), ()> {
        self.window(w.mw_rkey).ok_or(())?.bind(self, qp, w)
    }

    /// Invalidates the type 2B window `key`: by a local invalidate (`via: None`), or by a
    /// send with invalidate arriving on `via`, which must be the QP the window is bound to.
    /// `Err` for MR keys, type 1 windows, stale keys and windows not bound.
    pub(crate) fn invalidate(&self, key: u32, via: Option<&QpShared>) -> Result<(), ()> {
        self.window(key).ok_or(())?.invalidate(key, via)
    }

    /// Resolves a remote access of `len` bytes at `addr` through `key` arriving on `qp`, with
    /// rights `right`: an MR's key, or a window's, checked against its binding (range, rights,
    /// PD and, for type 2B, QP). Returns the MR, held for the access (see [`MrRef`]), and the
    /// offset in it.
    pub(crate) fn remote(
        &self,
        qp: &QpShared,
        key: u32,
        addr: u64,
        len: u64,
        right: u32,
    ) -> Result<(MrRef, usize), Fault> {
        if !is_window(key) {
            let mr = self.mr(key).ok_or(Fault::Key)?;
            let off = mr.check(qp.pd, addr, len, right)?;
            return Ok((mr.enter().ok_or(Fault::Key)?, off));
        }
        self.window(key)
            .ok_or(Fault::Key)?
            .resolve(qp, key, addr, len, right)
    }
}
