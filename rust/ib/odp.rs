// SPDX-License-Identifier: GPL-2.0

//! On-demand paging memory (`include/rdma/ib_umem_odp.h`; the roles of mlx5's `odp.c`): an
//! `ib_umem_odp` pins nothing. Its `mmu_interval_notifier` tells rodp when the process's
//! mappings change; a device access faults the pages it needs in through hmm
//! (`ib_umem_odp_map_dma_and_lock`) and copies while holding the umem's mutex, which the
//! invalidation callback takes too, so a copy never sees a page the kernel has taken away.
//!
//! Each umem has its own translation table (the MTT): per page, the hmm pfn the device may use,
//! copied from the umem's pfn list only for the range a fault has just validated and cleared
//! by the callback. It makes the count of mapped pages exact, which the statistics and the
//! reaping of implicit children rely on.
//!
//! An implicit MR (`reg_mr(NULL, SIZE_MAX)`) covers the whole address space: a parent umem
//! from `ib_umem_odp_alloc_implicit`, and children of 1 GiB made on first touch by
//! `ib_umem_odp_alloc_child`, kept in an XArray, reaped by deferred work once the kernel has
//! invalidated all their pages, and all released with the parent.

use super::{
    device::{Device, Driver},
    umem::{copy_pages, non_err, AtomicOp, DevRef, Mapped, Pages},
    wq,
};
use crate::bindings;
use core::{cell::UnsafeCell, ptr::NonNull};
use kernel::{
    alloc::KVVec,
    impl_has_work, new_mutex, new_work,
    page::PAGE_SIZE,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc, Mutex,
    },
    workqueue::{Work, WorkItem},
    xarray::{AllocKind, XArray},
};

/// Largest range one fault maps (the batching bound).
const FAULT_BATCH: usize = 2 << 20;

/// Most bytes one hold of a umem's mutex copies (an invalidation waits at most that long).
const HOLD: usize = 64 << 10;

/// Fault attempts before an access gives up (each one lost to an invalidation). A device
/// retries a fault it loses to the MM: only memory that changes faster than it can be faulted
/// in, hundreds of times in a row, ends an access in error.
const ATTEMPTS: u32 = 256;

/// Address space each child of an implicit MR covers: 1 GiB (mlx5's `mlx5_imr_mtt_shift`).
pub(crate) const CHILD_SHIFT: u32 = 30;
const CHILD_SIZE: usize = 1 << CHILD_SHIFT;

/// ODP event counts, per MR and per device.
pub(crate) struct OdpCounters {
    /// Faults resolved (one per access or prefetch that had to map pages).
    pub(crate) faults: Atomic<u64>,
    /// Pages those faults made usable.
    pub(crate) fault_pages: Atomic<u64>,
    /// Invalidation callbacks that covered the MR.
    pub(crate) invalidations: Atomic<u64>,
    /// Mapped pages those callbacks took away.
    pub(crate) invalidation_pages: Atomic<u64>,
    /// Prefetch requests handled.
    pub(crate) prefetches: Atomic<u64>,
    /// Pages of prefetched ranges mapped when their prefetch finished.
    pub(crate) prefetch_pages: Atomic<u64>,
    /// Accesses that found their pages invalidated between faulting and copying.
    pub(crate) contentions: Atomic<u64>,
    /// Faults that failed (unmapped or read-only memory).
    pub(crate) failed: Atomic<u64>,
    /// Pages mapped for the device now.
    pub(crate) mapped: Atomic<u64>,
    /// ODP MRs registered now (device totals).
    pub(crate) mrs: Atomic<u64>,
    /// Device accesses and prefetches whose key named no MR (device totals).
    pub(crate) mrs_not_found: Atomic<u64>,
}

impl OdpCounters {
    /// All zero.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Ok(Arc::new(
            Self {
                faults: Atomic::new(0),
                fault_pages: Atomic::new(0),
                invalidations: Atomic::new(0),
                invalidation_pages: Atomic::new(0),
                prefetches: Atomic::new(0),
                prefetch_pages: Atomic::new(0),
                contentions: Atomic::new(0),
                failed: Atomic::new(0),
                mapped: Atomic::new(0),
                mrs: Atomic::new(0),
                mrs_not_found: Atomic::new(0),
            },
            GFP_KERNEL,
        )?)
    }
}

/// An MR's counters and its device's totals, counted together.
#[derive(Clone)]
pub(crate) struct CounterSets {
    /// The MR's own (shown per MR through rdma netlink).
    pub(crate) mr: Arc<OdpCounters>,
    /// The device's totals.
    pub(crate) dev: Arc<OdpCounters>,
}

impl CounterSets {
    /// Adds `n` to `field` of both sets.
    fn add(&self, field: impl Fn(&OdpCounters) -> &Atomic<u64>, n: u64) {
        field(&self.mr).fetch_add(n, Relaxed);
        field(&self.dev).fetch_add(n, Relaxed);
    }

    /// Subtracts `n` from `field` of both sets.
    fn sub(&self, field: impl Fn(&OdpCounters) -> &Atomic<u64>, n: u64) {
        field(&self.mr).fetch_sub(n, Relaxed);
        field(&self.dev).fetch_sub(n, Relaxed);
    }
}

/// The hmm pfn flags a page needs to be read (`write`: written) by the device.
const fn need(write: bool) -> u64 {
    let valid = bindings::hmm_pfn_flags_HMM_PFN_VALID as u64;
    if write {
        valid | bindings::hmm_pfn_flags_HMM_PFN_WRITE as u64
    } else {
        valid
    }
}

/// What the notifier callback of one umem reaches through `ib_umem_odp::private`.
struct State {
    counters: CounterSets,
    /// The MTT: per page, the hmm pfn the device may use, or 0. Used only under the umem's
    /// mutex.
    mtt: UnsafeCell<KVVec<u64>>,
    /// Nonzero entries of `mtt`; under the mutex.
    mapped: UnsafeCell<usize>,
    /// For a child of an implicit MR: the parent's children, told when the last page goes.
    parent: Option<Arc<Children>>,
}

/// A umem's mutex, held; gives access to its [`State`].
///
/// # Invariants
///
/// `raw`'s `umem_mutex` is held by this object, which unlocks it on drop; `state` is `raw`'s.
struct Locked<'a> {
    raw: NonNull<bindings::ib_umem_odp>,
    state: &'a State,
}

impl Locked<'_> {
    fn mtt(&self) -> &[u64] {
        // SAFETY: The mutex is held (type invariant), so no writer runs.
        unsafe { &*self.state.mtt.get() }
    }

    fn mtt_mut(&mut self) -> &mut [u64] {
        // SAFETY: The mutex is held and `self` is borrowed exclusively: no other reference.
        unsafe { &mut *self.state.mtt.get() }
    }

    fn mapped_mut(&mut self) -> &mut usize {
        // SAFETY: As in `mtt_mut`.
        unsafe { &mut *self.state.mapped.get() }
    }

    /// Whether MTT entry `idx` is usable (writable when `write`).
    fn usable(&self, idx: usize, write: bool) -> bool {
        let need = need(write);
        self.mtt().get(idx).is_some_and(|pfn| pfn & need == need)
    }

    /// The page of MTT entry `idx` if usable (writable when `write`).
    fn page(&self, idx: usize, write: bool) -> Option<NonNull<bindings::page>> {
        if !self.usable(idx, write) {
            return None;
        }
        // SAFETY: A valid hmm pfn names a page; it stays allocated until the callback, which
        // needs the mutex we hold, clears the entry.
        NonNull::new(unsafe { bindings::hmm_pfn_to_page(self.mtt()[idx]) })
    }

    /// Entries in `pages` not usable (not writable when `write`).
    fn missing(&self, pages: core::ops::Range<usize>, write: bool) -> usize {
        pages.filter(|&i| !self.usable(i, write)).count()
    }

    /// Copies the entries of `pages` that the umem's pfn list holds as valid (a fault has just
    /// validated them) into the MTT; returns how many became usable (writable when `write`).
    fn fill(&mut self, pages: core::ops::Range<usize>, write: bool) -> usize {
        let (valid, need) = (need(false), need(write));
        let (mut usable, mut new) = (0, 0);
        for i in pages {
            // SAFETY: The umem is live and its mutex held; `i` is below the MTT's length, which
            // is the pfn list's.
            let pfn = unsafe { bindings::odp_pfn(self.raw.as_ptr(), i) };
            let old = self.mtt()[i];
            if pfn & valid == 0 {
                continue;
            }
            usable += usize::from(pfn & need == need && old & need != need);
            new += usize::from(old & valid == 0);
            self.mtt_mut()[i] = pfn;
        }
        *self.mapped_mut() += new;
        self.state.counters.add(|c| &c.mapped, new as u64);
        usable
    }

    /// Takes the entries of `pages` away, marking writable pages dirty (the device may have
    /// written them); returns how many were mapped.
    fn clear(&mut self, pages: core::ops::Range<usize>) -> usize {
        let mut taken = 0;
        for i in pages {
            if let Some(page) = self.page(i, true) {
                // SAFETY: The page is live (see `page`).
                unsafe { bindings::set_page_dirty_head(page.as_ptr()) };
            }
            let e = &mut self.mtt_mut()[i];
            taken += usize::from(*e != 0);
            *e = 0;
        }
        *self.mapped_mut() -= taken;
        self.state.counters.sub(|c| &c.mapped, taken as u64);
        taken
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // SAFETY: Held (type invariant).
        unsafe { bindings::odp_unlock(self.raw.as_ptr()) };
    }
}

static OPS: bindings::mmu_interval_notifier_ops = bindings::mmu_interval_notifier_ops {
    invalidate: Some(invalidate_cb),
    invalidate_start: None,
    invalidate_finish: None,
};

/// The invalidation callback: takes the affected pages away while no copy runs.
///
/// # Safety
///
/// Called by the MM for a notifier registered by [`OdpUmem::new`] that is not yet released.
unsafe extern "C" fn invalidate_cb(
    mni: *mut bindings::mmu_interval_notifier,
    range: *const bindings::mmu_notifier_range,
    cur_seq: c_ulong,
) -> bool {
    // SAFETY: `range` is valid for the call.
    if !unsafe { bindings::mmu_range_blockable(range) } {
        return false;
    }
    // SAFETY: Per the safety requirements the notifier is embedded in a live ODP umem; its
    // `private` is null or its `State`, set under the mutex and freed only after release.
    let (odp, state, start, end) = unsafe {
        let odp = bindings::odp_of_notifier(mni);
        bindings::odp_lock(odp);
        bindings::mmu_interval_set_seq(mni, cur_seq);
        (
            odp,
            (*odp).private.cast::<State>(),
            ((*range).start as u64).max(bindings::odp_start(odp) as u64),
            ((*range).end as u64).min(bindings::odp_end(odp) as u64),
        )
    };
    let Some(state) = NonNull::new(state) else {
        // Nothing was mapped yet: the state comes before the first fault.
        // SAFETY: Locked above.
        unsafe { bindings::odp_unlock(odp) };
        return true;
    };
    // INVARIANT: Locked above; the state is this umem's.
    let mut l = Locked {
        // SAFETY: `odp` is not null (it embeds `mni`).
        raw: unsafe { NonNull::new_unchecked(odp) },
        // SAFETY: See above.
        state: unsafe { state.as_ref() },
    };
    if start < end {
        // SAFETY: The umem is live.
        let base = unsafe { bindings::odp_start(odp) } as u64;
        let first = ((start - base) / PAGE_SIZE as u64) as usize;
        let last = ((end - base).div_ceil(PAGE_SIZE as u64)) as usize;
        let taken = l.clear(first..last);
        // SAFETY: The mutex is held, as the call requires.
        unsafe { bindings::ib_umem_odp_unmap_dma_pages(odp, start, end) };
        let c = &l.state.counters;
        c.add(|c| &c.invalidations, 1);
        c.add(|c| &c.invalidation_pages, taken as u64);
        if taken > 0 && *l.mapped_mut() == 0 {
            if let Some(p) = &l.state.parent {
                p.schedule_reap();
            }
        }
    }
    true
}

/// An ODP registration of user memory: an explicit MR's, or one child of an implicit MR.
///
/// # Invariants
///
/// `raw` is a live ODP umem with a notifier using [`OPS`], released on drop; its `private` is
/// `state` (leaked from a box, freed after the release), with one MTT entry per page of the
/// umem.
pub(crate) struct OdpUmem {
    raw: NonNull<bindings::ib_umem_odp>,
    state: NonNull<State>,
    /// Given back after the umem is released (fields drop after `drop`).
    _dev: DevRef,
    /// Offset of the umem's first byte in its first page.
    lead: usize,
    /// Whether the pages may be mapped writable.
    writable: bool,
}

// SAFETY: The umem and its state are used under the umem's mutex; the counters are atomics.
unsafe impl Send for OdpUmem {}
// SAFETY: As above.
unsafe impl Sync for OdpUmem {}

impl OdpUmem {
    /// Wraps the umem `alloc` makes for `len` bytes at `addr` on `dev`.
    fn new(
        dev: DevRef,
        addr: u64,
        len: usize,
        writable: bool,
        counters: CounterSets,
        parent: Option<Arc<Children>>,
        alloc: impl FnOnce(*mut bindings::ib_device) -> *mut bindings::ib_umem_odp,
    ) -> Result<Self> {
        let lead = addr as usize % PAGE_SIZE;
        let pages = lead.checked_add(len).ok_or(EOVERFLOW)?.div_ceil(PAGE_SIZE);
        let state = KBox::new(
            State {
                counters,
                mtt: UnsafeCell::new(KVVec::from_elem(0, pages, GFP_KERNEL)?),
                mapped: UnsafeCell::new(0),
                parent,
            },
            GFP_KERNEL,
        )?;
        let raw = non_err(alloc(dev.as_ptr()))?;
        let state = NonNull::from(KBox::leak(state));
        // SAFETY: `raw` is a valid ODP umem. Its notifier may already run (the process can
        // unmap at any time); the callback reads `private` only under the mutex taken here.
        unsafe {
            bindings::odp_lock(raw.as_ptr());
            (*raw.as_ptr()).private = state.as_ptr().cast();
            bindings::odp_unlock(raw.as_ptr());
        }
        // INVARIANT: See the type.
        Ok(Self {
            raw,
            state,
            _dev: dev,
            lead,
            writable,
        })
    }

    /// Registers `len` bytes of the calling process's memory at `addr` for on-demand paging.
    pub(crate) fn get<T: Driver>(
        dev: &Device<T>,
        addr: u64,
        len: u64,
        access: u32,
        counters: CounterSets,
    ) -> Result<Self> {
        let len = usize::try_from(len).map_err(|_| EINVAL)?;
        let dev = DevRef::get(dev)?;
        Self::new(dev, addr, len, writable(access), counters, None, |ib| {
            // SAFETY: FFI call on a live device (referenced) from the registering process's
            // context; `OPS` is static.
            unsafe { bindings::ib_umem_odp_get(ib, addr as c_ulong, len, access as i32, &OPS) }
        })
    }

    fn lock(&self) -> Locked<'_> {
        // SAFETY: `raw` is live.
        unsafe { bindings::odp_lock(self.raw.as_ptr()) };
        // SAFETY: Just locked.
        unsafe { self.assume_locked() }
    }

    /// Takes the mutex while holding another umem's, which is at a lower address.
    fn lock_second(&self) -> Locked<'_> {
        // SAFETY: `raw` is live.
        unsafe { bindings::odp_lock_second(self.raw.as_ptr()) };
        // SAFETY: Just locked.
        unsafe { self.assume_locked() }
    }

    /// Copies `len` bytes from `src` at `soff` to `dst` at `doff`, page to page, holding both
    /// umems' mutexes (taken in address order; one when they are the same umem) for at most
    /// 64 KiB at a time; faults missing pages in and retries when an invalidation wins.
    pub(crate) fn copy(
        dst: &OdpUmem,
        doff: usize,
        src: &OdpUmem,
        soff: usize,
        len: usize,
    ) -> Result {
        if !dst.writable {
            return Err(EFAULT);
        }
        let mut pos = 0;
        while pos < len {
            let n = (len - pos).min(HOLD);
            let (dpages, spages) = (dst.span(doff + pos, n), src.span(soff + pos, n));
            let mut attempt = 0;
            loop {
                // Whether each side misses pages; copied when neither does.
                let missing = |d: &Locked<'_>, s: &Locked<'_>| {
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
                    let dst_first = dst.raw.as_ptr() < src.raw.as_ptr();
                    let (a, b) = if dst_first { (dst, src) } else { (src, dst) };
                    let la = a.lock();
                    let lb = b.lock_second();
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
                    break;
                }
                attempt += 1;
                if attempt > 1 {
                    dst.counters().add(|c| &c.contentions, 1);
                }
                if attempt > ATTEMPTS {
                    return Err(EAGAIN);
                }
                if dmiss {
                    dst.fault_in(doff + pos, n, true)?;
                }
                if smiss {
                    src.fault_in(soff + pos, n, false)?;
                }
            }
            pos += n;
        }
        Ok(())
    }

    /// # Safety
    ///
    /// The caller holds the umem's mutex and hands it to the returned guard.
    unsafe fn assume_locked(&self) -> Locked<'_> {
        // INVARIANT: Per the safety requirements; the state is this umem's.
        Locked {
            raw: self.raw,
            // SAFETY: Live until drop (type invariant).
            state: unsafe { self.state.as_ref() },
        }
    }

    fn counters(&self) -> &CounterSets {
        // SAFETY: Live until drop (type invariant).
        unsafe { &self.state.as_ref().counters }
    }

    /// The user address of byte `off` of the registration.
    fn va(&self, off: usize) -> u64 {
        // SAFETY: `raw` is live; `address` is fixed at registration.
        let base = unsafe { (*self.raw.as_ptr()).umem.address };
        base as u64 + off as u64
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
    fn idle(&self) -> bool {
        let mut l = self.lock();
        *l.mapped_mut() == 0
    }

    /// Maps `[off, off + len)` (writable when `write`) in batches of at most 2 MiB, then runs
    /// `f` with the mutex held and every page of the range present; retries when an
    /// invalidation wins the race.
    pub(crate) fn with_pages<R>(
        &self,
        off: usize,
        len: usize,
        write: bool,
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
            if attempt > 0 {
                self.counters().add(|c| &c.contentions, 1);
            }
            self.fault_in(off, len, write)?;
        }
        Err(EAGAIN)
    }

    /// Faults `[off, off + len)` in; a fault that lost to invalidations throughout is left to
    /// the caller's next attempt.
    fn fault_in(&self, off: usize, len: usize, write: bool) -> Result {
        match self.map(off, len, write, true) {
            Err(e) if e == EBUSY => Ok(()),
            r => r.map(|_| ()),
        }
    }

    /// Runs `f(view, offset, length)` over `[off, off + len)` in pieces of at most 64 KiB, each
    /// with the mutex held and its pages present (see `with_pages`).
    pub(crate) fn with_chunks(
        &self,
        off: usize,
        len: usize,
        write: bool,
        mut f: impl FnMut(&OdpView<'_>, usize, usize) -> Result,
    ) -> Result {
        let mut pos = 0;
        while pos < len {
            let n = (len - pos).min(HOLD);
            self.with_pages(off + pos, n, write, |v| f(v, off + pos, n))?;
            pos += n;
        }
        Ok(())
    }

    /// Maps `[off, off + len)` into the MTT: with `fault`, faulting missing pages in (writable
    /// when `write`), without, only the pages present. Returns the pages it made usable.
    fn map(&self, off: usize, len: usize, write: bool, fault: bool) -> Result<usize> {
        let mask = need(write);
        let mut done = 0;
        let mut usable = 0;
        while done < len {
            let n = (len - done).min(FAULT_BATCH);
            // SAFETY: `raw` is live; on success the call returns with the mutex held.
            let r = unsafe {
                bindings::ib_umem_odp_map_dma_and_lock(
                    self.raw.as_ptr(),
                    self.va(off + done),
                    n as u64,
                    mask,
                    fault,
                )
            };
            if r == EBUSY.to_errno() {
                // hmm's walk kept losing to invalidations until its timeout: a lost race.
                return Err(EBUSY);
            }
            if r < 0 {
                self.counters().add(|c| &c.failed, 1);
                return Err(EFAULT);
            }
            // SAFETY: Locked by the successful call.
            usable += unsafe { self.assume_locked() }.fill(self.span(off + done, n), write);
            done += n;
        }
        if fault {
            self.counters().add(|c| &c.faults, 1);
            self.counters().add(|c| &c.fault_pages, usable as u64);
        }
        Ok(usable)
    }

    /// Prefetch: faults `[off, off + len)` in (writable when `write`), or with `!fault` maps
    /// only the pages that are present; counts the range's pages mapped afterwards.
    fn prefetch(&self, off: usize, len: usize, write: bool, fault: bool) -> Result {
        if fault {
            self.with_pages(off, len, write, |_| Ok(()))?;
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

impl Drop for OdpUmem {
    fn drop(&mut self) {
        {
            let mut l = self.lock();
            let n = l.mtt().len();
            l.clear(0..n);
        }
        // SAFETY: Releasing unregisters the notifier (no callback runs after it); then the
        // state is ours to free (type invariant).
        unsafe {
            bindings::ib_umem_odp_release(self.raw.as_ptr());
            drop(KBox::from_raw(self.state.as_ptr()));
        }
    }
}

/// Whether an MR with `access` may have its pages mapped writable.
fn writable(access: u32) -> bool {
    access
        & (bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE
            | bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE
            | bindings::ib_access_flags_IB_ACCESS_REMOTE_ATOMIC)
        != 0
}

/// The pages of an ODP range while its mutex is held: byte copies and atomics.
pub(crate) struct OdpView<'a> {
    odp: &'a OdpUmem,
    l: Locked<'a>,
    write: bool,
}

impl Pages for OdpView<'_> {
    fn page_at(&self, off: usize, write: bool) -> Result<(NonNull<bindings::page>, usize, usize)> {
        if write && !self.write {
            return Err(EFAULT);
        }
        let (idx, po) = self.odp.locate(off);
        let page = self.l.page(idx, write).ok_or(EFAULT)?;
        Ok((page, po, PAGE_SIZE - po))
    }
}

impl OdpView<'_> {
    /// The mapped page holding byte `off`, the offset in it and the bytes left in it.
    fn page(&self, off: usize, write: bool) -> Result<(Mapped, usize, usize)> {
        let (page, po, room) = self.page_at(off, write)?;
        Ok((Mapped::new(page), po, room))
    }

    /// Copies `out.len()` bytes at `off` into `out`.
    pub(crate) fn read(&self, mut off: usize, out: &mut [u8]) -> Result {
        let mut done = 0;
        while done < out.len() {
            let (m, po, room) = self.page(off, false)?;
            let n = room.min(out.len() - done);
            m.read(po, &mut out[done..done + n]);
            done += n;
            off += n;
        }
        Ok(())
    }

    /// Copies `data` to `off`.
    pub(crate) fn write(&self, mut off: usize, data: &[u8]) -> Result {
        if !self.write {
            return Err(EFAULT);
        }
        let mut done = 0;
        while done < data.len() {
            let (m, po, room) = self.page(off, true)?;
            let n = room.min(data.len() - done);
            m.write(po, &data[done..done + n]);
            done += n;
            off += n;
        }
        Ok(())
    }

    /// Performs `op` on the naturally aligned 64-bit word at `off`.
    pub(crate) fn atomic(&self, off: usize, op: AtomicOp) -> Result<u64> {
        let (m, po, room) = self.page(off, true)?;
        if po % 8 != 0 || room < 8 {
            return Err(EINVAL);
        }
        m.atomic(po, op)
    }
}

/// The children of an implicit MR, by 1 GiB slot.
#[pin_data]
pub(crate) struct Children {
    /// Children by slot (address >> 30); lookups take only the XArray's lock.
    #[pin]
    slots: XArray<Arc<OdpUmem>>,
    /// Occupied slots; every insertion and removal holds this lock, which makes the insert
    /// race-safe (the loser of a race for a slot reuses the winner's child).
    #[pin]
    occupied: Mutex<KVec<usize>>,
    /// Reaps children without pages; queued by the notifier callback.
    #[pin]
    work: Work<Children>,
}

impl_has_work! {
    impl HasWork<Self> for Children { self.work }
}

impl WorkItem for Children {
    type Pointer = Arc<Children>;

    fn run(this: Arc<Children>) {
        this.reap(false);
    }
}

impl Children {
    fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                slots <- XArray::new(AllocKind::Alloc),
                occupied <- new_mutex!(KVec::new()),
                work <- new_work!("rodp::odp::Children::work"),
            }),
            GFP_KERNEL,
        )
    }

    /// Queues the reaper (on the module's workqueue, which module unload drains).
    fn schedule_reap(self: &Arc<Self>) {
        // Already queued: that run will see this child too.
        let _ = wq::get().enqueue(self.clone());
    }

    /// The child in `slot`, if any.
    fn get(&self, slot: usize) -> Option<Arc<OdpUmem>> {
        self.slots.lock().get(slot).map(Arc::from)
    }

    /// The child in `slot`, made by `make` if there is none.
    fn get_or_make(
        &self,
        slot: usize,
        make: impl FnOnce() -> Result<OdpUmem>,
    ) -> Result<Arc<OdpUmem>> {
        if let Some(c) = self.get(slot) {
            return Ok(c);
        }
        let new = Arc::new(make()?, GFP_KERNEL)?;
        let mut occupied = self.occupied.lock();
        if let Some(winner) = self.get(slot) {
            drop(occupied);
            // `new` is released here, outside the locks (the release may sleep).
            return Ok(winner);
        }
        occupied.reserve(1, GFP_KERNEL)?;
        self.slots.lock().store(slot, new.clone(), GFP_KERNEL)?;
        occupied.push_within_capacity(slot).map_err(|_| ENOMEM)?;
        Ok(new)
    }

    /// Removes the children without mapped pages, or all of them with `all`. A child an
    /// access is using stays alive (on the access's reference) until the access ends.
    fn reap(&self, all: bool) {
        let mut occupied = self.occupied.lock();
        occupied.retain(|slot| {
            let keep = !all && self.get(*slot).is_some_and(|c| !c.idle());
            if !keep {
                // Released outside the XArray's lock; the occupied lock may sleep.
                let child = self.slots.lock().remove(*slot);
                drop(child);
            }
            keep
        });
    }

    /// Number of children.
    fn len(&self) -> usize {
        self.occupied.lock().len()
    }
}

/// The parent of an implicit MR: all of the process's address space.
///
/// # Invariants
///
/// `root` came from `ib_umem_odp_alloc_implicit` and is released on drop, after every child;
/// its `owning_mm` carries an `mmgrab` of this object.
pub(crate) struct ImplicitOdp {
    root: NonNull<bindings::ib_umem_odp>,
    children: Arc<Children>,
    /// Given back after the root is released (fields drop after `drop`).
    dev: DevRef,
    counters: CounterSets,
    /// First address past the process's user address space.
    va_end: u64,
    writable: bool,
}

// SAFETY: The root is only read (and used to make children, which ib_core allows from any
// thread); the rest is synchronised.
unsafe impl Send for ImplicitOdp {}
// SAFETY: As above.
unsafe impl Sync for ImplicitOdp {}

impl ImplicitOdp {
    /// An implicit ODP registration for the calling process.
    fn new<T: Driver>(dev: &Device<T>, access: u32, counters: CounterSets) -> Result<Self> {
        let children = Children::new()?;
        let dev = DevRef::get(dev)?;
        // SAFETY: FFI call on a live device (referenced) from the registering process's
        // context.
        let root =
            non_err(unsafe { bindings::ib_umem_odp_alloc_implicit(dev.as_ptr(), access as i32) })?;
        // SAFETY: A valid umem whose `owning_mm` is the caller's mm, which is live. The root
        // takes no reference of its own; children are made from it later.
        let va_end = unsafe { bindings::odp_grab_mm(root.as_ptr()) };
        // INVARIANT: See the type.
        Ok(Self {
            root,
            children,
            dev,
            counters,
            va_end,
            writable: writable(access),
        })
    }

    /// The child covering `slot`, made on first use.
    fn child(&self, slot: usize) -> Result<Arc<OdpUmem>> {
        self.children.get_or_make(slot, || {
            let addr = (slot << CHILD_SHIFT) as u64;
            let root = self.root.as_ptr();
            OdpUmem::new(
                self.dev.try_clone()?,
                addr,
                CHILD_SIZE,
                self.writable,
                self.counters.clone(),
                Some(self.children.clone()),
                // SAFETY: The root is live (type invariant); `OPS` is static.
                |_| unsafe {
                    bindings::ib_umem_odp_alloc_child(root, addr as c_ulong, CHILD_SIZE, &OPS)
                },
            )
        })
    }

    /// Number of children now.
    pub(crate) fn children(&self) -> usize {
        self.children.len()
    }
}

impl Drop for ImplicitOdp {
    fn drop(&mut self) {
        self.children.reap(true);
        // SAFETY: Every child is released (a child still used by the reaper holds its own
        // references to the mm and the device); the root and the mm grab are ours (type
        // invariant).
        unsafe {
            bindings::odp_drop_mm(self.root.as_ptr());
            bindings::ib_umem_odp_release(self.root.as_ptr());
        }
    }
}

/// The ODP memory of an MR: explicit (an address range) or implicit (the address space).
pub(crate) struct Odp {
    kind: Kind,
    counters: CounterSets,
}

enum Kind {
    Explicit(OdpUmem),
    Implicit(ImplicitOdp),
}

impl Odp {
    /// An explicit ODP MR over `len` bytes at `addr`.
    pub(crate) fn explicit<T: Driver>(
        dev: &Device<T>,
        addr: u64,
        len: u64,
        access: u32,
        counters: CounterSets,
    ) -> Result<Self> {
        let umem = OdpUmem::get(dev, addr, len, access, counters.clone())?;
        Ok(Self::with(Kind::Explicit(umem), counters))
    }

    /// An implicit ODP MR over the calling process's address space.
    pub(crate) fn implicit<T: Driver>(
        dev: &Device<T>,
        access: u32,
        counters: CounterSets,
    ) -> Result<Self> {
        let parent = ImplicitOdp::new(dev, access, counters.clone())?;
        Ok(Self::with(Kind::Implicit(parent), counters))
    }

    fn with(kind: Kind, counters: CounterSets) -> Self {
        counters.dev.mrs.fetch_add(1, Relaxed);
        Self { kind, counters }
    }

    /// The implicit parent, if this is one.
    pub(crate) fn as_implicit(&self) -> Option<&ImplicitOdp> {
        match &self.kind {
            Kind::Implicit(i) => Some(i),
            Kind::Explicit(_) => None,
        }
    }

    /// The MR's own counters.
    pub(crate) fn counters(&self) -> &OdpCounters {
        &self.counters.mr
    }

    /// First byte offset past what the MR can reach: the address space for an implicit MR.
    pub(crate) fn limit(&self) -> Option<u64> {
        self.as_implicit().map(|i| i.va_end)
    }

    /// Runs `f(umem, offset in it, position in the range, length)` for each umem under
    /// `[off, off + len)`, in order; an implicit MR makes the children it needs.
    pub(crate) fn each(
        &self,
        off: usize,
        len: usize,
        mut f: impl FnMut(&OdpUmem, usize, usize, usize) -> Result,
    ) -> Result {
        match &self.kind {
            Kind::Explicit(u) => f(u, off, 0, len),
            Kind::Implicit(i) => pieces(off, len, |slot, coff, pos, n| {
                let child = i.child(slot)?;
                let r = f(&child, coff, pos, n);
                if r.is_err() && child.idle() {
                    // A child made for memory the process does not have: no invalidation will
                    // ever reap it, so the reaper is told now.
                    i.children.schedule_reap();
                }
                r
            }),
        }
    }

    /// Prefetch of `[off, off + len)`: faults the range in (writable when `write`), or with
    /// `!fault` maps the pages present (of an implicit MR: only in children that exist).
    pub(crate) fn prefetch(&self, off: usize, len: usize, write: bool, fault: bool) -> Result {
        self.counters.add(|c| &c.prefetches, 1);
        match (&self.kind, fault) {
            (Kind::Implicit(i), false) => pieces(off, len, |slot, coff, _, n| {
                i.children
                    .get(slot)
                    .map_or(Ok(()), |c| c.prefetch(coff, n, false, false))
            }),
            _ => self.each(off, len, |u, uoff, _, n| u.prefetch(uoff, n, write, fault)),
        }
    }
}

impl Drop for Odp {
    fn drop(&mut self) {
        self.counters.dev.mrs.fetch_sub(1, Relaxed);
    }
}

/// Splits `[off, off + len)` at 1 GiB boundaries: `f(slot, offset in slot, position, length)`.
fn pieces(
    mut off: usize,
    len: usize,
    mut f: impl FnMut(usize, usize, usize, usize) -> Result,
) -> Result {
    let end = off.checked_add(len).ok_or(EFAULT)?;
    let mut pos = 0;
    while off < end {
        let coff = off % CHILD_SIZE;
        let n = (CHILD_SIZE - coff).min(end - off);
        f(off >> CHILD_SHIFT, coff, pos, n)?;
        off += n;
        pos += n;
    }
    Ok(())
}

#[kunit_tests(rodp_odp)]
mod tests {
    use super::*;

    fn split(off: usize, len: usize) -> Result<KVec<(usize, usize, usize, usize)>> {
        let mut v = KVec::new();
        pieces(off, len, |s, o, p, n| Ok(v.push((s, o, p, n), GFP_KERNEL)?))?;
        Ok(v)
    }

    #[test]
    fn pieces_split_at_gib_boundaries() -> Result {
        assert_eq!(&split(4096, 8192)?[..], &[(0, 4096, 0, 8192)]);
        assert_eq!(
            &split(CHILD_SIZE - 100, 300)?[..],
            &[(0, CHILD_SIZE - 100, 0, 100), (1, 0, 100, 200)]
        );
        let three = split(5 * CHILD_SIZE - 1, 2 * CHILD_SIZE + 2)?;
        assert_eq!(three.len(), 4);
        assert_eq!(three[3], (7, 0, 2 * CHILD_SIZE + 1, 1));
        assert!(split(0, 0)?.is_empty());
        assert!(split(usize::MAX, 2).is_err());
        Ok(())
    }
}
