// SPDX-License-Identifier: GPL-2.0

//! Keys and tables (rxe's `rxe_pool.c` indices and the key lookups of `rxe_mr.c` and
//! `rxe_mw.c`): the numbered objects of a device, the MR and window key space, and every access
//! made through a key — local and remote accesses, window binds and invalidations.
//!
//! A key is `index << 8 | key byte`. MRs take the indices `1..=`[`MAX_MR`], windows the
//! indices above ([`MIN_MW`]`..=`[`MAX_MW_INDEX`]), so one lookup tells windows and MRs apart.
//! Neither part is predictable (rxe's `rxe_get_next_key` randomises the byte only): a new MR or
//! window takes a random free index (a [`Table::new_random`]) and a random key byte, so the
//! keys a user was given just before and after someone else's tell nothing about it, and a key
//! of an earlier object at the same index reaches a new one with odds of 1 in 256. A bind gives
//! a window the byte its work request names (see `mw.rs`). Re-registration keeps an MR's key.
//! Every lookup compares the whole key: a stale key (of a freed object, or of a window before
//! its latest bind) reaches nothing. QP numbers are random too, below the multicast QPN.
//!
//! The checks an access makes belong to the object it reaches: [`MrShared::check`] for an MR,
//! `MwShared`'s for a window (each citing the IBA rule it enforces).

use crate::{
    ah::{self, AhShared},
    engine::Run,
    ib::{abi::Bind as BindWr, random},
    mcast,
    mr::{fast, Fault, MrRef, MrShared},
    mw::{MwShared, Via},
    odp::OdpCounters,
    qp::{self, QpShared},
    stats::Stats,
    table::Table,
};
use kernel::{
    prelude::*,
    sync::{atomic::Relaxed, Arc},
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

/// The table index of `key`.
pub(crate) fn index(key: u32) -> u32 {
    key >> 8
}

/// Whether `key` names a window rather than an MR.
pub(crate) fn is_window(key: u32) -> bool {
    index(key) >= MIN_MW
}

/// A new key for `index`: a random key byte (rxe's `rxe_get_next_key`).
fn new_key(index: u32) -> u32 {
    index << 8 | (random::u32() & 0xff)
}

/// Where a remote access through a key lands ([`Tables::remote`]).
pub(crate) enum Reach {
    /// One range of one MR: the MR, held for the access, and the offset in it.
    One(MrRef, usize),
    /// Through an extended window: a range per element touched, in window order, the
    /// elements of one MR one stride apart as a run (the MR held for the access, where in it).
    Pieces(KVVec<(MrRef, Run)>),
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
    /// The engine's workers each user holds (`engine::share`).
    #[pin]
    pub(crate) workers: crate::engine::Workers,
    /// The device's ODP totals.
    pub(crate) odp: Arc<OdpCounters>,
    /// The device's counters.
    pub(crate) stats: Stats,
    /// How far the device's inbox has got (its requesters' timers wait for it).
    pub(crate) backlog: crate::engine::Backlog,
    /// The RC QPs destroyed a moment ago, whose last message a duplicate still gets an ACK.
    #[pin]
    pub(crate) parted: crate::engine::Parted,
}

impl Tables {
    /// Empty tables for a device whose ODP totals are `odp`.
    pub(crate) fn new(odp: Arc<OdpCounters>) -> impl PinInit<Self> {
        pin_init!(Self {
            // The top QPN is multicast's.
            qps <- Table::new_random(qp::MIN_QPN, qp::MAX_QPN.min(mcast::MULTICAST_QPN - 1)),
            mrs <- Table::new_random(1, MAX_MR),
            ahs <- Table::new(1, ah::MAX_AH),
            mws <- Table::new_random(MIN_MW, MAX_MW_INDEX),
            groups <- mcast::Groups::new(),
            workers <- crate::engine::Workers::new(),
            odp,
            stats: Stats::new(),
            backlog: crate::engine::Backlog::new(),
            parted <- crate::engine::Parted::new(),
        })
    }

    /// Enters the MR `make` builds for its new key.
    pub(crate) fn insert_mr(
        &self,
        make: impl FnOnce(u32) -> Result<Arc<MrShared>>,
    ) -> Result<Arc<MrShared>> {
        self.mrs.insert(|index| make(new_key(index)))
    }

    /// Enters the window `make` builds for its first key.
    pub(crate) fn insert_mw(
        &self,
        make: impl FnOnce(u32) -> Result<Arc<MwShared>>,
    ) -> Result<Arc<MwShared>> {
        self.mws.insert(|index| make(new_key(index)))
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

    /// The window whose current key is `key`. (The window's own checks compare the key again
    /// under its lock: a bind may change it meanwhile.)
    pub(crate) fn window(&self, key: u32) -> Option<Arc<MwShared>> {
        if !is_window(key) {
            return None;
        }
        self.mws.get(index(key)).filter(|w| w.key() == key)
    }

    /// Executes a bind posted on `qp` (IBA 10.6.7.2.x, with rxe's checks), which names the
    /// window by its current key: `Err` completes it with `IB_WC_MW_BIND_ERR`.
    pub(crate) fn bind_mw(&self, qp: &QpShared, w: &BindWr) -> Result<(), ()> {
        self.window(w.mw_rkey).ok_or(())?.bind(self, qp, w)
    }

    /// Invalidates the type 2B window or the fast registration whose current key is `key`, as
    /// `via` asks (see [`MwShared::invalidate`] and [`fast::invalidate`]). `Err` for other MRs'
    /// keys, type 1 windows, stale keys, windows not bound or registrations invalid already,
    /// and invalidations from a QP of another PD or one the window does not serve.
    pub(crate) fn invalidate(&self, key: u32, via: Via<'_>) -> Result<(), ()> {
        if !is_window(key) {
            let (Via::Local(qp) | Via::Send(qp)) = via;
            let mr = self.current(key).ok_or(())?;
            return fast::invalidate(&mr, qp.pd, key).map_err(|_| ());
        }
        self.window(key).ok_or(())?.invalidate(key, via)
    }

    /// Executes a fast registration posted on `qp` (see [`fast::register`]): `Err` completes it
    /// with `IB_WC_LOC_QP_OP_ERR`.
    pub(crate) fn register_fast(
        &self,
        qp: &QpShared,
        key: u32,
        iova: u64,
        length: u64,
        acc: u32,
    ) -> Result<(), ()> {
        fast::register(self, qp.pd, key, iova, length, acc).map_err(|_| ())
    }

    /// Resolves a remote access of `len` bytes at `addr` through `key` arriving on `qp`, with
    /// rights `right`: an MR's key, or a window's, checked against its binding (range, rights,
    /// PD and, for type 2B, QP). Returns the memory, held for the access (see [`MrRef`]).
    pub(crate) fn remote(
        &self,
        qp: &QpShared,
        key: u32,
        addr: u64,
        len: u64,
        right: u32,
    ) -> Result<Reach, Fault> {
        if !is_window(key) {
            let mr = self.mr(key).ok_or(Fault::Key)?;
            let off = mr.check(qp.pd, addr, len, right)?;
            return Ok(Reach::One(mr.enter().ok_or(Fault::Key)?, off));
        }
        self.window(key)
            .ok_or(Fault::Key)?
            .resolve(qp, key, addr, len, right)
    }

    /// Checks a remote access with rights `right` to everything the key `key` reaches (a FLUSH
    /// of the MR level, whose address and length mean nothing): an MR's whole range; a window
    /// is checked at `addr` (no window grants a FLUSH right).
    pub(crate) fn remote_whole(
        &self,
        qp: &QpShared,
        key: u32,
        addr: u64,
        right: u32,
    ) -> Result<(), Fault> {
        if is_window(key) {
            return self.remote(qp, key, addr, 0, right).map(|_| ());
        }
        let mr = self.mr(key).ok_or(Fault::Key)?;
        mr.check(qp.pd, mr.iova, 0, right).map(|_| ())
    }
}

#[kunit_tests(rodp_keys)]
mod tests {
    use super::*;

    #[test]
    fn new_keys_keep_their_index_and_do_not_count_up() {
        let mut prev = new_key(5);
        let mut steps = 0;
        for _ in 0..32 {
            let k = new_key(5);
            assert_eq!(index(k), 5);
            if k & 0xff == (prev + 1) & 0xff {
                steps += 1;
            }
            prev = k;
        }
        // A counter steps by one every time; random bytes do with odds of 1 in 256 each.
        assert!(steps < 8);
    }

    #[test]
    fn windows_and_mrs_are_told_apart_by_index() {
        assert!(!is_window(MAX_MR << 8 | 0xff));
        assert!(is_window(MIN_MW << 8));
        assert!(is_window(MAX_MW_INDEX << 8 | 0xff));
    }
}
