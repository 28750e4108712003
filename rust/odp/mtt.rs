// SPDX-License-Identifier: GPL-2.0

//! The translation table of one ODP umem (the role of mlx5's MTT, `odp.c`'s
//! `pagefault_real_mr` / `mlx5_ib_invalidate_range`): per page, the hmm pfn the device may use.
//!
//! Entries are copied from the umem's pfn list only for the range a fault has just validated,
//! and cleared by the invalidation callback. That makes the count of mapped pages exact, which
//! the statistics and the reaping of implicit children rely on. The table itself is kept by the
//! binding (`crate::ib::odp`), which guarantees that no cleared page stays reachable; this
//! module decides what is usable, counts, dirties and reports.

use super::{implicit::Children, CounterSets};
use crate::ib::{
    odp::{Locked, Notifier, PFN_VALID, PFN_WRITE},
    umem::PageRef,
};
use core::ops::Range;
use kernel::sync::{
    atomic::{Atomic, Relaxed},
    Arc,
};

/// The hmm pfn flags a page needs to be read (`write`: written) by the device.
const fn need(write: bool) -> u64 {
    if write {
        PFN_VALID | PFN_WRITE
    } else {
        PFN_VALID
    }
}

/// What the notifier callback of one umem reaches.
pub(super) struct State {
    pub(super) counters: CounterSets,
    /// For a child of an implicit MR: the parent's children, told when the last page goes.
    pub(super) parent: Option<Arc<Children>>,
    /// Invalidations of this umem so far: a fault compares them before and after to learn
    /// whether the MM changed the memory meanwhile (`OdpUmem::fault`).
    pub(super) invalidations: Atomic<u64>,
}

impl Notifier for State {
    /// Entries of the MTT in use (nonzero).
    type Locked = usize;

    fn invalidate(l: &mut Locked<'_, Self>, pages: Range<usize>) {
        let taken = l.clear(pages);
        let state = l.data();
        state.invalidations.fetch_add(1, Relaxed);
        let c = &state.counters;
        c.add(|c| &c.invalidations, 1);
        c.add(|c| &c.invalidation_pages, taken as u64);
        if taken > 0 && *l.locked() == 0 {
            if let Some(p) = &state.parent {
                p.schedule_reap();
            }
        }
    }
}

/// A umem's MTT, its mutex held.
pub(super) trait Mtt {
    /// Whether entry `idx` is usable (writable when `write`).
    fn usable(&self, idx: usize, write: bool) -> bool;

    /// The page of entry `idx` if usable (writable when `write`).
    fn page(&self, idx: usize, write: bool) -> Option<PageRef<'_>>;

    /// Entries in `pages` not usable (not writable when `write`).
    fn missing(&self, pages: Range<usize>, write: bool) -> usize {
        pages.filter(|&i| !self.usable(i, write)).count()
    }

    /// The first entry in `pages` not usable (not writable when `write`).
    fn first_missing(&self, mut pages: Range<usize>, write: bool) -> Option<usize> {
        pages.find(|&i| !self.usable(i, write))
    }

    /// Copies the entries of `pages` that the umem's pfn list holds as valid (the fault this
    /// guard comes from has just validated them) into the MTT; returns how many became usable
    /// (writable when `write`).
    fn fill(&mut self, pages: Range<usize>, write: bool) -> usize;

    /// Takes the entries of `pages` away, marking writable pages dirty (the device may have
    /// written them); returns how many were mapped.
    fn clear(&mut self, pages: Range<usize>) -> usize;
}

impl Mtt for Locked<'_, State> {
    fn usable(&self, idx: usize, write: bool) -> bool {
        let need = need(write);
        self.entry(idx).is_some_and(|pfn| pfn & need == need)
    }

    fn page(&self, idx: usize, write: bool) -> Option<PageRef<'_>> {
        self.page_if(idx, need(write))
    }

    fn fill(&mut self, pages: Range<usize>, write: bool) -> usize {
        let need = need(write);
        let (mut usable, mut new) = (0, 0);
        for i in pages {
            let old = self.entry(i).unwrap_or(0);
            let Some(pfn) = self.install(i) else {
                continue;
            };
            usable += usize::from(pfn & need == need && old & need != need);
            new += usize::from(old & PFN_VALID == 0);
        }
        *self.locked() += new;
        self.data().counters.add(|c| &c.mapped, new as u64);
        usable
    }

    fn clear(&mut self, pages: Range<usize>) -> usize {
        let mut taken = 0;
        // Only mapped entries: the range may be the whole of a large, sparsely used umem.
        let mut from = pages.start;
        while let Some(i) = self.next_mapped(from..pages.end) {
            if let Some(page) = self.page(i, true) {
                page.set_dirty();
            }
            taken += usize::from(self.take(i) != 0);
            from = i + 1;
        }
        *self.locked() -= taken;
        self.data().counters.sub(|c| &c.mapped, taken as u64);
        taken
    }
}
