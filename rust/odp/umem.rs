// SPDX-License-Identifier: GPL-2.0

//! One ODP umem as rodp uses it (the role of mlx5's `pagefault_mr` and rxe's
//! `rxe_odp_mr_copy`): faults in batches, retries an access that loses to an invalidation,
//! copies while holding the umem's mutex (two umems' in address order), and counts.

use super::{
    implicit::Children,
    mtt::{Mtt, State},
    CounterSets, Faults, ATTEMPTS, FAULT_BATCH, HOLD, UNMAPPED, UNMAPPED_SRC,
};
use crate::{
    ib::{
        device::{Device, Driver},
        odp::{ImplicitUmemOdp, Locked, UmemOdp},
        umem::PageRef,
        wq,
    },
    mem::{copy_pages, Pages},
};
use kernel::{
    page::PAGE_SIZE,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
};

/// An ODP registration of user memory: an explicit MR's, or one child of an implicit MR.
pub(crate) struct OdpUmem {
    umem: UmemOdp<State>,
    /// Offset of the umem's first byte in its first page.
    lead: usize,
    /// Whether the pages may be mapped writable.
    writable: bool,
    /// An implicit MR's child: the accesses holding it now ([`super::implicit::Held`]), and
    /// those ever begun, which the reaper reads to keep a child an access may be faulting.
    pub(super) users: Atomic<u32>,
    pub(super) holds: Atomic<u64>,
    /// The reaper passed it over for a hold: the last hold's end queues the reaper again.
    pub(super) reap_wanted: Atomic<bool>,
}

impl OdpUmem {
    /// Registers `len` bytes of the calling process's memory at `addr` for on-demand paging.
    pub(crate) fn get<T: Driver>(
        dev: &Device<T>,
        addr: u64,
        len: u64,
        access: u32,
        counters: CounterSets,
    ) -> Result<Self> {
        let len = usize::try_from(len).map_err(|_| EINVAL)?;
        let state = State {
            counters,
            parent: None,
            invalidations: Atomic::new(0),
        };
        Ok(Self {
            umem: UmemOdp::get(dev, addr, len, access, state, 0)?,
            lead: addr as usize % PAGE_SIZE,
            writable: super::writable(access),
            users: Atomic::new(0),
            holds: Atomic::new(0),
            reap_wanted: Atomic::new(false),
        })
    }

    /// The child of `root` over `len` bytes at `addr`, in `parent`'s children.
    pub(super) fn child(
        root: &ImplicitUmemOdp,
        addr: u64,
        len: usize,
        writable: bool,
        counters: CounterSets,
        parent: Arc<Children>,
    ) -> Result<Self> {
        let state = State {
            counters,
            parent: Some(parent),
            invalidations: Atomic::new(0),
        };
        Ok(Self {
            umem: root.alloc_child(addr, len, state, 0)?,
            lead: addr as usize % PAGE_SIZE,
            writable,
            users: Atomic::new(0),
            holds: Atomic::new(0),
            reap_wanted: Atomic::new(false),
        })
    }

    /// The implicit MR's children this child belongs to.
    pub(super) fn parent(&self) -> Option<&Arc<Children>> {
        self.umem.data().parent.as_ref()
    }

    fn lock(&self) -> Locked<'_, State> {
        self.umem.lock()
    }

    /// Copies `len` bytes from `src` at `soff` to `dst` at `doff`, page to page, holding both
    /// umems' mutexes (taken in address order; one when they are the same umem) for at most
    /// 64 KiB at a time; faults missing pages in and retries when an invalidation wins, in
    /// pieces half as large each time (see [`Pieces`]). A side that `faults` does not let fault
    /// fails the copy with [`UNMAPPED`] when it misses a page (bytes before that piece are
    /// copied).
    pub(crate) fn copy(
        dst: &OdpUmem,
        doff: usize,
        src: &OdpUmem,
        soff: usize,
        len: usize,
        faults: Faults,
    ) -> Result {
        if !dst.writable {
            return Err(EFAULT);
        }
        let mut pos = 0;
        let mut pieces = Pieces::new();
        while pos < len {
            loop {
                let n = pieces.next(pos, len);
                let (dpages, spages) = (dst.span(doff + pos, n), src.span(soff + pos, n));
                // Whether each side misses pages; copied when neither does.
                let missing = |d: &Locked<'_, State>, s: &Locked<'_, State>| {
                    (
                        d.missing(dpages.clone(), true) > 0,
                        s.missing(spages.clone(), false) > 0,
                    )
                };
                let (dmiss, smiss) = if core::ptr::eq(dst, src) {
                    let l = dst.lock();
                    let m = missing(&l, &l);
                    if m == (false, false) {
                        let v = OdpView {
                            odp: dst,
                            l,
                            write: true,
                        };
                        copy_pages(&v, doff + pos, &v, soff + pos, n)?;
                    }
                    m
                } else {
                    let dst_first = dst.umem.key() < src.umem.key();
                    let (a, b) = if dst_first { (dst, src) } else { (src, dst) };
                    let la = a.lock();
                    let lb = b.umem.lock_nested();
                    let (ld, ls) = if dst_first { (la, lb) } else { (lb, la) };
                    let m = missing(&ld, &ls);
                    if m == (false, false) {
                        let d = OdpView {
                            odp: dst,
                            l: ld,
                            write: true,
                        };
                        let s = OdpView {
                            odp: src,
                            l: ls,
                            write: false,
                        };
                        copy_pages(&d, doff + pos, &s, soff + pos, n)?;
                    }
                    m
                };
                if (dmiss, smiss) == (false, false) {
                    pos += n;
                    pieces.copied();
                    break;
                }
                if dmiss && !faults.dst {
                    return Err(UNMAPPED);
                }
                if smiss && !faults.src {
                    return Err(UNMAPPED_SRC);
                }
                pieces.missed(n, dst.counters())?;
                let n = pieces.next(pos, len);
                if dmiss {
                    dst.fault(doff + pos, n, true)?;
                }
                if smiss {
                    src.fault(soff + pos, n, false)?;
                }
            }
        }
        Ok(())
    }

    fn counters(&self) -> &CounterSets {
        &self.umem.data().counters
    }

    /// The user address of byte `off` of the registration.
    fn va(&self, off: usize) -> u64 {
        self.umem.address() + off as u64
    }

    /// MTT index and in-page offset of byte `off`.
    fn locate(&self, off: usize) -> (usize, usize) {
        let abs = self.lead + off;
        (abs / PAGE_SIZE, abs % PAGE_SIZE)
    }

    /// MTT indices of the pages under `[off, off + len)`.
    fn span(&self, off: usize, len: usize) -> core::ops::Range<usize> {
        if len == 0 {
            return 0..0;
        }
        self.locate(off).0..self.locate(off + len - 1).0 + 1
    }

    /// Whether no page is mapped.
    pub(super) fn idle(&self) -> bool {
        let mut l = self.lock();
        *l.locked() == 0
    }

    /// Maps `[off, off + len)` (writable when `write`) in batches of at most 2 MiB, then runs
    /// `f` with the mutex held and every page of the range present; retries when an
    /// invalidation wins the race. Without `fault`, runs `f` only if every page is mapped
    /// already, and fails with [`UNMAPPED`] otherwise.
    pub(crate) fn with_pages<R>(
        &self,
        off: usize,
        len: usize,
        write: bool,
        fault: bool,
        f: impl FnOnce(&OdpView<'_>) -> Result<R>,
    ) -> Result<R> {
        if write && !self.writable {
            return Err(EFAULT);
        }
        let pages = self.span(off, len);
        for attempt in 0..ATTEMPTS {
            let l = self.lock();
            if l.missing(pages.clone(), write) == 0 {
                return f(&OdpView {
                    odp: self,
                    l,
                    write,
                });
            }
            drop(l);
            if !fault {
                return Err(UNMAPPED);
            }
            if attempt > 0 {
                self.counters().add(|c| &c.contentions, 1);
            }
            // A fault that lost to invalidations throughout (EAGAIN) ends the access: its
            // ATTEMPTS asks are the limit, not ATTEMPTS times ATTEMPTS.
            self.fault(off, len, write)?;
        }
        Err(EAGAIN)
    }

    /// Runs `f(view, offset, length)` over `[off, off + len)` in pieces of at most 64 KiB, each
    /// with the mutex held and its pages present (see `with_pages`, also for `fault`). A piece
    /// whose pages went away between its fault and `f` is faulted again half as large (see
    /// [`Pieces`]): memory the MM keeps invalidating is still copied, a page at a time if need
    /// be, where insisting on 64 KiB present at once would retry for ever.
    pub(crate) fn with_chunks(
        &self,
        off: usize,
        len: usize,
        write: bool,
        fault: bool,
        mut f: impl FnMut(&OdpView<'_>, usize, usize) -> Result,
    ) -> Result {
        if write && !self.writable {
            return Err(EFAULT);
        }
        let mut pos = 0;
        let mut pieces = Pieces::new();
        while pos < len {
            let n = pieces.next(pos, len);
            let l = self.lock();
            if l.missing(self.span(off + pos, n), write) == 0 {
                let v = OdpView {
                    odp: self,
                    l,
                    write,
                };
                f(&v, off + pos, n)?;
                pos += n;
                pieces.copied();
                continue;
            }
            drop(l);
            if !fault {
                return Err(UNMAPPED);
            }
            pieces.missed(n, self.counters())?;
            self.fault(off + pos, pieces.next(pos, len), write)?;
        }
        Ok(())
    }

    /// Faults `[off, off + len)` in (writable when `write`): every page is mapped once at
    /// least, not all of them at the same time, so memory that the MM keeps invalidating is
    /// faulted in as long as one page stays long enough to be mapped. One fault (counted once)
    /// asks hmm for one page first, then twice as many each time no invalidation of the umem
    /// came during the last ask, up to 2 MiB, and half as many when one came. hmm retries a
    /// range an invalidation hit for as long as each try reads a page in (its time limit
    /// starts again whenever a fault of it had to wait, as a FUSE or NFS page's does): asked
    /// for more pages than the MM leaves alone long enough, it would never return.
    /// [`ATTEMPTS`] asks that hmm gave up on end it with `EAGAIN`.
    pub(crate) fn fault(&self, off: usize, len: usize, write: bool) -> Result {
        if write && !self.writable {
            return Err(EFAULT);
        }
        let seq = || self.umem.data().invalidations.load(Relaxed);
        let mut pos = 0;
        let mut piece = PAGE_SIZE;
        let mut lost = 0;
        let mut asked = false;
        let mut usable = 0;
        while pos < len {
            // Pages mapped already are passed under one hold of the lock, up to the first one
            // missing or a batch's worth (a long mapped range still gives the CPU away).
            let w = (len - pos).min(FAULT_BATCH);
            let span = self.span(off + pos, w);
            match self.lock().first_missing(span.clone(), write) {
                None => {
                    pos += w;
                    wq::cond_resched();
                    continue;
                }
                // The ask starts at that page (it begins past `off + pos`).
                Some(i) if i > span.start => pos = i * PAGE_SIZE - self.lead - off,
                Some(_) => {}
            }
            let n = (len - pos).min(piece);
            let before = seq();
            match self.map(off + pos, n, write, true) {
                Ok(u) => {
                    asked = true;
                    usable += u;
                    pos += n;
                    piece = next_ask(piece, seq() == before);
                }
                Err(e) if e == EBUSY => {
                    self.counters().add(|c| &c.contentions, 1);
                    lost += 1;
                    if lost >= ATTEMPTS {
                        return Err(EAGAIN);
                    }
                    piece = shrink(n, 16);
                }
                Err(e) => return Err(e),
            }
        }
        if asked {
            self.counters().add(|c| &c.faults, 1);
            self.counters().add(|c| &c.fault_pages, usable as u64);
        }
        Ok(())
    }

    /// Maps `[off, off + len)` into the MTT: with `fault`, faulting missing pages in (writable
    /// when `write`), without, only the pages present. Returns the pages it made usable.
    fn map(&self, off: usize, len: usize, write: bool, fault: bool) -> Result<usize> {
        let mut done = 0;
        let mut usable = 0;
        while done < len {
            let n = (len - done).min(FAULT_BATCH);
            let mut l = match self
                .umem
                .map_dma_and_lock(self.va(off + done), n, write, fault)
            {
                Ok(l) => l,
                // hmm's walk kept losing to invalidations until its timeout: a lost race.
                Err(e) if e == EBUSY => return Err(EBUSY),
                Err(_) => {
                    self.counters().add(|c| &c.failed, 1);
                    return Err(EFAULT);
                }
            };
            usable += l.fill(self.span(off + done, n), write);
            drop(l);
            done += n;
            // A fault of a large range gives the CPU away between batches.
            wq::cond_resched();
        }
        Ok(usable)
    }

    /// Prefetch: faults `[off, off + len)` in (writable when `write`), or with `!fault` maps
    /// only the pages that are present; counts the range's pages mapped afterwards.
    pub(super) fn prefetch(&self, off: usize, len: usize, write: bool, fault: bool) -> Result {
        if fault {
            self.fault(off, len, write)?;
        } else {
            // Pages the MM keeps changing are simply not mapped ahead.
            self.map(off, len, false, false)
                .or_else(|e| if e == EBUSY { Ok(0) } else { Err(e) })?;
        }
        let pages = self.span(off, len);
        let n = pages.len() - self.lock().missing(pages, false);
        self.counters().add(|c| &c.prefetch_pages, n as u64);
        Ok(())
    }
}

/// Where a copy in pieces ([`OdpUmem::copy`], [`OdpUmem::with_chunks`]) stands: the size of its
/// next piece and the misses of the current one. A piece whose pages went away between its
/// fault and its copy is faulted again half as large; after [`REGROW`] pieces in a row copied
/// without a contention (at most the one fault of pages not mapped before) the pieces double
/// again, up to [`HOLD`], so that a spell of invalidations does not leave the rest of a long
/// copy in single pages.
struct Pieces {
    piece: usize,
    misses: u32,
    streak: u32,
}

/// Pieces copied in a row without a contention before the next is twice as large.
const REGROW: u32 = 8;

impl Pieces {
    fn new() -> Self {
        Self {
            piece: HOLD,
            misses: 0,
            streak: 0,
        }
    }

    /// The length of the piece at `pos` of a copy of `len` bytes.
    fn next(&self, pos: usize, len: usize) -> usize {
        (len - pos).min(self.piece)
    }

    /// The current piece was copied.
    fn copied(&mut self) {
        // One miss is the fault of pages never mapped, not a contention.
        if self.misses <= 1 {
            self.streak += 1;
            if self.streak >= REGROW {
                self.piece = (self.piece * 2).min(HOLD);
                self.streak = 0;
            }
        } else {
            self.streak = 0;
        }
        self.misses = 0;
    }

    /// The current piece, of `n` bytes, found pages missing (and is faulted in again); counts
    /// a contention in `counters` from its second miss on, which also halves the piece.
    /// `EAGAIN` after [`ATTEMPTS`] misses.
    fn missed(&mut self, n: usize, counters: &CounterSets) -> Result {
        if self.miss(n) {
            counters.add(|c| &c.contentions, 1);
        }
        if self.misses > ATTEMPTS {
            return Err(EAGAIN);
        }
        Ok(())
    }

    /// [`Pieces::missed`]'s bookkeeping; whether the miss is a contention.
    fn miss(&mut self, n: usize) -> bool {
        self.misses += 1;
        if self.misses == 1 {
            return false;
        }
        self.streak = 0;
        self.piece = shrink(n, 2);
        true
    }
}

/// The piece to fault and access next after one of `n` bytes lost to an invalidation: `n / by`,
/// a page at least. Pages faulted together must all stay until they are used; fewer of them
/// need a shorter quiet spell of the MM.
fn shrink(n: usize, by: usize) -> usize {
    (n / by).max(PAGE_SIZE)
}

/// The next ask of a fault after one of `piece` bytes: twice as large when no invalidation came
/// during it (`quiet`), up to [`FAULT_BATCH`], else half as large, a page at least.
fn next_ask(piece: usize, quiet: bool) -> usize {
    if quiet {
        (piece * 2).min(FAULT_BATCH)
    } else {
        shrink(piece, 2)
    }
}

impl Drop for OdpUmem {
    fn drop(&mut self) {
        // Counted and dirtied here; the binding then releases the umem.
        let mut l = self.lock();
        let n = l.pages();
        l.clear(0..n);
    }
}

/// The pages of an ODP range while its mutex is held: byte copies and atomics.
pub(crate) struct OdpView<'a> {
    odp: &'a OdpUmem,
    l: Locked<'a, State>,
    write: bool,
}

impl Pages for OdpView<'_> {
    fn page_at(&self, off: usize, write: bool) -> Result<(PageRef<'_>, usize, usize)> {
        if write && !self.write {
            return Err(EFAULT);
        }
        let (idx, po) = self.odp.locate(off);
        let page = self.l.page(idx, write).ok_or(EFAULT)?;
        Ok((page, po, PAGE_SIZE - po))
    }

    fn check(&self, _off: usize, _len: usize, write: bool) -> Result {
        if write && !self.write {
            return Err(EFAULT);
        }
        Ok(())
    }
}

#[kunit_tests(rodp_odp_fault)]
mod tests {
    use super::*;

    #[test]
    fn asks_grow_while_the_mm_is_quiet_and_shrink_when_not() -> Result {
        let (mut piece, mut asks) = (PAGE_SIZE, 1);
        while piece < FAULT_BATCH {
            piece = next_ask(piece, true);
            asks += 1;
        }
        // One page to 2 MiB in ten asks: a fault of 2 MiB of quiet memory asks ten times.
        assert_eq!((piece, asks), (FAULT_BATCH, 10));
        assert_eq!(next_ask(FAULT_BATCH, true), FAULT_BATCH);
        assert_eq!(next_ask(FAULT_BATCH, false), FAULT_BATCH / 2);
        assert_eq!(next_ask(2 * PAGE_SIZE, false), PAGE_SIZE);
        assert_eq!(next_ask(PAGE_SIZE, false), PAGE_SIZE);
        // hmm gave up on 48 KiB: 3 KiB is less than a page.
        assert_eq!(shrink(12 * PAGE_SIZE, 16), PAGE_SIZE);
        assert_eq!(shrink(HOLD, 2), HOLD / 2);
        Ok(())
    }

    #[test]
    fn pieces_halve_on_contention_and_grow_back_after_a_streak() -> Result {
        let mut p = Pieces::new();
        assert_eq!(p.next(0, 1 << 20), HOLD);
        assert_eq!(p.next(1 << 20, (1 << 20) + 100), 100);
        // The first miss is the fault of new pages; the second, a contention, halves.
        assert!(!p.miss(HOLD));
        assert_eq!(p.next(0, 1 << 20), HOLD);
        assert!(p.miss(HOLD));
        assert!(p.miss(HOLD / 2));
        assert_eq!(p.next(0, 1 << 20), HOLD / 4);
        // A piece copied after contentions starts no streak; REGROW clean ones double it.
        p.copied();
        for _ in 0..REGROW - 1 {
            p.copied();
        }
        assert_eq!(p.next(0, 1 << 20), HOLD / 4);
        p.copied();
        assert_eq!(p.next(0, 1 << 20), HOLD / 2);
        // A piece faulted once (new pages) and copied counts as clean.
        for _ in 0..REGROW {
            assert!(!p.miss(HOLD / 2));
            p.copied();
        }
        assert_eq!(p.next(0, 1 << 20), HOLD);
        for _ in 0..REGROW {
            p.copied();
        }
        assert_eq!(p.next(0, 1 << 20), HOLD);
        // A contention in the middle of a streak starts it again.
        for _ in 0..REGROW - 1 {
            p.copied();
        }
        assert!(!p.miss(HOLD));
        assert!(p.miss(HOLD));
        p.copied();
        for _ in 0..REGROW - 1 {
            p.copied();
        }
        assert_eq!(p.next(0, 1 << 20), HOLD / 2);
        Ok(())
    }
}
