// SPDX-License-Identifier: GPL-2.0

//! On-demand paging umems (`include/rdma/ib_umem_odp.h`, `include/linux/mmu_notifier.h`): an
//! `ib_umem_odp` pins nothing; its `mmu_interval_notifier` reports when the process's mappings
//! change, and `ib_umem_odp_map_dma_and_lock` faults pages in through hmm and returns with the
//! umem's mutex held.
//!
//! This binding keeps the one rule the kernel imposes on a driver: no page is reachable after
//! its invalidation. Each umem carries a table of the hmm pfns the device may use, filled only
//! from a fault that has just succeeded ([`Locked::install`]) and cleared by the notifier
//! trampoline, under the mutex, before the MM can free the pages. What rodp does with it (the
//! MTT's accounting, fault batching and retries, implicit children) is `crate::odp`, which
//! implements [`Notifier`].
//!
//! The table is sparse: chunks of [`CHUNK`] entries (2 MiB of address space in one page),
//! allocated before a fault takes the mutex and freed when an invalidation empties them, so it
//! costs what is mapped, not the length of the umem. Every allocation is charged to the memory
//! cgroup of the process that registered, whichever context makes it, and fails with `ENOMEM`
//! rather than warn.

use super::{
    device::{Device, Driver},
    umem::{non_err, DevRef, PageRef},
};
use crate::ib::bindings;
use core::{cell::UnsafeCell, ffi::c_void, ops::Range, ptr::NonNull};
use kernel::{
    alloc::{flags, Flags, KVVec},
    page::PAGE_SIZE,
    prelude::*,
};

/// hmm pfn flag: the entry names a page (`HMM_PFN_VALID`).
pub(crate) const PFN_VALID: u64 = bindings::hmm_pfn_flags_HMM_PFN_VALID as u64;
/// hmm pfn flag: the page may be written (`HMM_PFN_WRITE`).
pub(crate) const PFN_WRITE: u64 = bindings::hmm_pfn_flags_HMM_PFN_WRITE as u64;

/// Entries in one chunk of a umem's table: one page of entries, 2 MiB of address space.
pub(crate) const CHUNK: usize = PAGE_SIZE / core::mem::size_of::<u64>();

/// How the tables are allocated: charged to the memory cgroup in effect (see [`Memcg`]), and
/// failing with `ENOMEM` instead of warning (a user chooses the sizes).
fn table_gfp() -> Flags {
    flags::GFP_KERNEL_ACCOUNT | flags::__GFP_NOWARN
}

/// The entries of one chunk.
type Chunk = [u64; CHUNK];

/// A reference to a memory cgroup (`struct mem_cgroup`), to charge allocations made for a
/// process from any context (`set_active_memcg`). Null without `CONFIG_MEMCG`.
///
/// # Invariants
///
/// `0` is null or a memory cgroup this object holds a reference to.
struct Memcg(*mut c_void);

// SAFETY: A counted reference, usable and releasable from any thread.
unsafe impl Send for Memcg {}
// SAFETY: As above; it is only read.
unsafe impl Sync for Memcg {}

impl Memcg {
    /// The calling process's memory cgroup.
    fn current() -> Self {
        // SAFETY: FFI call from process context; it returns a referenced cgroup or null.
        // INVARIANT: Referenced.
        Self(unsafe { bindings::memcg_get() })
    }

    /// Another reference to the same cgroup.
    fn clone_ref(&self) -> Self {
        // SAFETY: `self.0` is null or referenced (type invariant); the call takes one more.
        // INVARIANT: Referenced.
        Self(unsafe { bindings::memcg_clone(self.0) })
    }

    /// Runs `f` with its `__GFP_ACCOUNT` allocations charged to this cgroup.
    fn charge<R>(&self, f: impl FnOnce() -> R) -> R {
        // SAFETY: The cgroup is referenced (type invariant) for the whole scope, which ends
        // by restoring the previous one, as `set_active_memcg` requires.
        let old = unsafe { bindings::set_active_memcg(self.0) };
        let r = f();
        // SAFETY: See above.
        unsafe { bindings::set_active_memcg(old) };
        r
    }
}

impl Drop for Memcg {
    fn drop(&mut self) {
        // SAFETY: Our reference (type invariant); the call accepts null.
        unsafe { bindings::memcg_put(self.0) };
    }
}

/// A umem's table: per page, an hmm pfn or 0, in chunks of [`CHUNK`] entries that exist only
/// while one of their entries is nonzero (or a fault has just placed them).
struct Table {
    /// Per chunk: its entries, if allocated.
    chunks: KVVec<Option<KBox<Chunk>>>,
    /// Per chunk: its nonzero entries.
    used: KVVec<u16>,
    /// Number of pages (entries) the table covers.
    pages: usize,
}

impl Table {
    /// An empty table for `pages` pages: its top level only.
    fn new(pages: usize) -> Result<Self> {
        let n = pages.div_ceil(CHUNK);
        let mut chunks = KVVec::with_capacity(n, table_gfp())?;
        for _ in 0..n {
            chunks.push_within_capacity(None).map_err(|_| ENOMEM)?;
        }
        Ok(Self {
            chunks,
            used: KVVec::from_elem(0, n, table_gfp())?,
            pages,
        })
    }

    /// Entry `idx`; `None` past the table.
    fn get(&self, idx: usize) -> Option<u64> {
        if idx >= self.pages {
            return None;
        }
        Some(
            self.chunks[idx / CHUNK]
                .as_ref()
                .map_or(0, |c| c[idx % CHUNK]),
        )
    }

    /// Sets entry `idx` to `pfn` (nonzero); `false` if its chunk is not allocated.
    fn set(&mut self, idx: usize, pfn: u64) -> bool {
        let (n, i) = (idx / CHUNK, idx % CHUNK);
        let Some(c) = self.chunks.get_mut(n).and_then(Option::as_mut) else {
            return false;
        };
        if c[i] == 0 {
            self.used[n] += 1;
        }
        c[i] = pfn;
        true
    }

    /// Clears entry `idx` and returns what it held (0 past the table); frees its chunk when
    /// that was the chunk's last entry.
    fn take(&mut self, idx: usize) -> u64 {
        let (n, i) = (idx / CHUNK, idx % CHUNK);
        let Some(c) = self.chunks.get_mut(n).and_then(Option::as_mut) else {
            return 0;
        };
        let old = core::mem::replace(&mut c[i], 0);
        if old != 0 {
            self.used[n] -= 1;
            if self.used[n] == 0 {
                self.chunks[n] = None;
            }
        }
        old
    }

    /// The chunk indices under the pages `pages` (clamped to the table).
    fn chunks_of(&self, pages: Range<usize>) -> Range<usize> {
        let end = pages.end.min(self.pages);
        if pages.start >= end {
            return 0..0;
        }
        pages.start / CHUNK..end.div_ceil(CHUNK)
    }

    /// Chunks under `pages` not allocated.
    fn absent(&self, pages: Range<usize>) -> usize {
        self.chunks_of(pages)
            .filter(|&n| self.chunks[n].is_none())
            .count()
    }

    /// Gives the chunks under `pages` that are not allocated one from `spare` each, as long
    /// as it has some.
    fn place(&mut self, pages: Range<usize>, spare: &mut KVec<KBox<Chunk>>) {
        for n in self.chunks_of(pages) {
            if self.chunks[n].is_none() {
                match spare.pop() {
                    Some(c) => self.chunks[n] = Some(c),
                    None => return,
                }
            }
        }
    }

    /// Frees the chunks under `pages` that hold no entry (placed for a fault that did not
    /// fill them).
    fn trim(&mut self, pages: Range<usize>) {
        for n in self.chunks_of(pages) {
            if self.used[n] == 0 {
                self.chunks[n] = None;
            }
        }
    }

    /// The first index in `pages` whose entry is nonzero, skipping absent chunks.
    fn next_mapped(&self, pages: Range<usize>) -> Option<usize> {
        let end = pages.end.min(self.pages);
        let mut idx = pages.start;
        while idx < end {
            let n = idx / CHUNK;
            let stop = ((n + 1) * CHUNK).min(end);
            if let Some(c) = &self.chunks[n] {
                if let Some(i) = (idx..stop).find(|&i| c[i % CHUNK] != 0) {
                    return Some(i);
                }
            }
            idx = stop;
        }
        None
    }

    /// Allocates chunks of zero entries, `n` of them.
    fn alloc_chunks(n: usize) -> Result<KVec<KBox<Chunk>>> {
        let mut v = KVec::with_capacity(n, table_gfp())?;
        for _ in 0..n {
            let c = KBox::<Chunk>::init(pin_init::zeroed::<Chunk>(), table_gfp())?;
            v.push_within_capacity(c).map_err(|_| ENOMEM)?;
        }
        Ok(v)
    }
}

/// The driver's side of an ODP umem's notifier.
pub(crate) trait Notifier: Send + Sync + Sized {
    /// Driver state used only under the umem's mutex (reached through [`Locked::locked`]).
    type Locked: Send;

    /// The MM is taking pages `pages` (indices into the umem's table, not empty) away.
    ///
    /// Called with the mutex held from a blockable context: the trampoline refuses a
    /// non-blockable range (the OOM reaper's), as the mutex cannot be taken there, and the MM
    /// backs off as `mmu_interval_notifier_ops` allows. After it returns the binding clears the range's table entries, which are
    /// still readable here (to dirty written pages), and unmaps them from the umem.
    fn invalidate(l: &mut Locked<'_, Self>, pages: Range<usize>);
}

/// What `ib_umem_odp::private` points to.
///
/// # Invariants
///
/// A nonzero `table` entry is the hmm pfn of a page a successful fault validated, with
/// `HMM_PFN_VALID` set, and no invalidation has covered the page since: the trampoline clears
/// covered entries under the mutex, before the MM may free the pages.
struct Private<T: Notifier> {
    /// Per page, an hmm pfn the device may use, or 0; under the umem's mutex.
    table: UnsafeCell<Table>,
    /// The driver's state under the mutex.
    locked: UnsafeCell<T::Locked>,
    /// The driver's state shared without the mutex.
    data: T,
    /// Charged for the table.
    memcg: Memcg,
}

/// A umem's mutex, held; gives access to its page table and the driver's state.
///
/// # Invariants
///
/// `raw`'s `umem_mutex` is held by this object, which unlocks it on drop; `private` is `raw`'s.
/// `fresh` are the table indices a successful fault has just validated under this hold (empty
/// for a plain lock).
pub(crate) struct Locked<'a, T: Notifier> {
    raw: NonNull<bindings::ib_umem_odp>,
    private: &'a Private<T>,
    fresh: Range<usize>,
}

impl<'a, T: Notifier> Locked<'a, T> {
    fn table(&self) -> &Table {
        // SAFETY: The mutex is held (type invariant), so no writer runs.
        unsafe { &*self.private.table.get() }
    }

    fn table_mut(&mut self) -> &mut Table {
        // SAFETY: The mutex is held and `self` is borrowed exclusively: no other reference.
        unsafe { &mut *self.private.table.get() }
    }

    /// The driver's shared state.
    pub(crate) fn data(&self) -> &'a T {
        &self.private.data
    }

    /// The driver's state under the mutex.
    pub(crate) fn locked(&mut self) -> &mut T::Locked {
        // SAFETY: As in `table_mut`.
        unsafe { &mut *self.private.locked.get() }
    }

    /// Number of pages the umem covers (entries of its table).
    pub(crate) fn pages(&self) -> usize {
        self.table().pages
    }

    /// Table entry `idx`: an hmm pfn with its flags ([`PFN_VALID`], [`PFN_WRITE`]), or 0;
    /// `None` past the umem.
    pub(crate) fn entry(&self, idx: usize) -> Option<u64> {
        self.table().get(idx)
    }

    /// The first index in `pages` whose entry is nonzero; skips unmapped 2 MiB at a time.
    pub(crate) fn next_mapped(&self, pages: Range<usize>) -> Option<usize> {
        self.table().next_mapped(pages)
    }

    /// The page of table entry `idx` if it holds `need` (flags among [`PFN_VALID`] and
    /// [`PFN_WRITE`]; [`PFN_VALID`] is always required).
    pub(crate) fn page_if(&self, idx: usize, need: u64) -> Option<PageRef<'_>> {
        let need = need | PFN_VALID;
        let pfn = self.entry(idx).filter(|pfn| pfn & need == need)?;
        // SAFETY: A nonzero entry names a page no invalidation has covered since its fault
        // (invariant of `Private`); an invalidation needs the mutex this guard holds, so the
        // page outlives the borrow of `self`.
        let page = NonNull::new(unsafe { bindings::hmm_pfn_to_page(pfn) })?;
        // SAFETY: See above.
        Some(unsafe { PageRef::new(page) })
    }

    /// hmm's pfn for page `idx` (`map.pfn_list`) if the fault this guard comes from has just
    /// validated it; `None` otherwise (hmm's list is written outside the mutex, so other
    /// entries may be stale).
    pub(crate) fn pfn(&self, idx: usize) -> Option<u64> {
        if !self.fresh.contains(&idx) || idx >= self.pages() {
            return None;
        }
        // SAFETY: The umem is live and its mutex held; `idx` is below the table's length,
        // which is the pfn list's.
        Some(unsafe { bindings::odp_pfn(self.raw.as_ptr(), idx) })
    }

    /// Copies hmm's pfn for page `idx` into the table when it is valid (see [`Self::pfn`]);
    /// returns it, or `None` (the entry unchanged, also when an invalidation took the chunk
    /// the fault had prepared: the caller's next attempt faults again).
    pub(crate) fn install(&mut self, idx: usize) -> Option<u64> {
        let pfn = self.pfn(idx).filter(|pfn| pfn & PFN_VALID != 0)?;
        // INVARIANT: Validated by the fault this guard comes from, under the same hold.
        self.table_mut().set(idx, pfn).then_some(pfn)
    }

    /// Clears table entry `idx`; returns what it held (0 past the umem).
    pub(crate) fn take(&mut self, idx: usize) -> u64 {
        self.table_mut().take(idx)
    }
}

impl<T: Notifier> Drop for Locked<'_, T> {
    fn drop(&mut self) {
        // Chunks a fault prepared and did not fill go now, not with the umem.
        let fresh = self.fresh.clone();
        self.table_mut().trim(fresh);
        // SAFETY: Held (type invariant).
        unsafe { bindings::odp_unlock(self.raw.as_ptr()) };
    }
}

/// The notifier callback: the driver's [`Notifier::invalidate`], then the table cleared and
/// the pages unmapped, while no holder of the mutex can use them.
///
/// # Safety
///
/// Called by the MM for a notifier registered by [`UmemOdp::new`] with `T` that is not yet
/// released.
unsafe extern "C" fn invalidate_cb<T: Notifier>(
    mni: *mut bindings::mmu_interval_notifier,
    range: *const bindings::mmu_notifier_range,
    cur_seq: c_ulong,
) -> bool {
    // SAFETY: `range` is valid for the call.
    if !unsafe { bindings::mmu_range_blockable(range) } {
        return false;
    }
    // SAFETY: Per the safety requirements the notifier is embedded in a live ODP umem; its
    // `private` is null or its `Private<T>`, set under the mutex and freed only after release.
    let (odp, private, start, end) = unsafe {
        let odp = bindings::odp_of_notifier(mni);
        bindings::odp_lock(odp);
        bindings::mmu_interval_set_seq(mni, cur_seq);
        (
            odp,
            (*odp).private.cast::<Private<T>>(),
            ((*range).start as u64).max(bindings::odp_start(odp) as u64),
            ((*range).end as u64).min(bindings::odp_end(odp) as u64),
        )
    };
    let Some(private) = NonNull::new(private) else {
        // Nothing was mapped yet: the private part comes before the first fault.
        // SAFETY: Locked above.
        unsafe { bindings::odp_unlock(odp) };
        return true;
    };
    // INVARIANT: Locked above; the private part is this umem's.
    let mut l = Locked {
        // SAFETY: `odp` is not null (it embeds `mni`).
        raw: unsafe { NonNull::new_unchecked(odp) },
        // SAFETY: See above.
        private: unsafe { private.as_ref() },
        fresh: 0..0,
    };
    if start < end {
        // SAFETY: The umem is live.
        let base = unsafe { bindings::odp_start(odp) } as u64;
        let first = ((start - base) / PAGE_SIZE as u64) as usize;
        let last = ((end - base).div_ceil(PAGE_SIZE as u64)) as usize;
        T::invalidate(&mut l, first..last);
        let mut from = first;
        while let Some(i) = l.next_mapped(from..last) {
            l.take(i);
            from = i + 1;
        }
        // SAFETY: The mutex is held, as the call requires.
        unsafe { bindings::ib_umem_odp_unmap_dma_pages(odp, start, end) };
    }
    true
}

/// An ODP umem (`struct ib_umem_odp`): an explicit registration's, or one child of an implicit
/// one, with the driver's state `T` its notifier reaches.
///
/// # Invariants
///
/// `raw` is a live ODP umem whose notifier uses [`Self::OPS`], released on drop; its `private`
/// is `private` (leaked from a box, freed after the release), with one table entry per page of
/// the umem. `_dev` references the umem's device.
pub(crate) struct UmemOdp<T: Notifier> {
    raw: NonNull<bindings::ib_umem_odp>,
    private: NonNull<Private<T>>,
    /// Given back after the umem is released (fields drop after `drop`).
    _dev: DevRef,
}

// SAFETY: The umem and the state under its mutex are used with the mutex held; `T` is shared
// as `&T` only (it is `Sync`), and `T::Locked` is `Send`.
unsafe impl<T: Notifier> Send for UmemOdp<T> {}
// SAFETY: As above.
unsafe impl<T: Notifier> Sync for UmemOdp<T> {}

impl<T: Notifier> UmemOdp<T> {
    /// The notifier operations of umems with driver state `T`.
    const OPS: bindings::mmu_interval_notifier_ops = bindings::mmu_interval_notifier_ops {
        invalidate: Some(invalidate_cb::<T>),
        invalidate_start: None,
        invalidate_finish: None,
    };

    /// Wraps the umem `alloc` makes for `len` bytes at `addr` on `dev`; its table is charged
    /// to `memcg`.
    fn new(
        dev: DevRef,
        addr: u64,
        len: usize,
        data: T,
        locked: T::Locked,
        memcg: Memcg,
        alloc: impl FnOnce(
            *mut bindings::ib_device,
            &'static bindings::mmu_interval_notifier_ops,
        ) -> *mut bindings::ib_umem_odp,
    ) -> Result<Self> {
        let lead = addr as usize % PAGE_SIZE;
        let pages = lead.checked_add(len).ok_or(EOVERFLOW)?.div_ceil(PAGE_SIZE);
        let private = memcg.charge(|| -> Result<_> {
            Ok(KBox::new(
                Private {
                    table: UnsafeCell::new(Table::new(pages)?),
                    locked: UnsafeCell::new(locked),
                    data,
                    memcg: memcg.clone_ref(),
                },
                table_gfp(),
            )?)
        })?;
        let raw = non_err(alloc(dev.as_ptr(), &Self::OPS))?;
        let private = NonNull::from(KBox::leak(private));
        // SAFETY: `raw` is a valid ODP umem. Its notifier may already run (the process can
        // unmap at any time); the callback reads `private` only under the mutex taken here.
        unsafe {
            bindings::odp_lock(raw.as_ptr());
            (*raw.as_ptr()).private = private.as_ptr().cast();
            bindings::odp_unlock(raw.as_ptr());
        }
        // INVARIANT: See the type.
        Ok(Self {
            raw,
            private,
            _dev: dev,
        })
    }

    /// Registers `len` bytes of the calling process's memory at `addr` with `access` rights
    /// (`ib_umem_odp_get`).
    pub(crate) fn get<D: Driver>(
        dev: &Device<D>,
        addr: u64,
        len: usize,
        access: u32,
        data: T,
        locked: T::Locked,
    ) -> Result<Self> {
        let dev = DevRef::get(dev)?;
        Self::new(dev, addr, len, data, locked, Memcg::current(), |ib, ops| {
            // SAFETY: FFI call on a live device (referenced) from the registering process's
            // context; `ops` is static.
            unsafe { bindings::ib_umem_odp_get(ib, addr as c_ulong, len, access as i32, ops) }
        })
    }

    /// The driver's shared state.
    pub(crate) fn data(&self) -> &T {
        // SAFETY: Live until drop (type invariant).
        unsafe { &self.private.as_ref().data }
    }

    /// The user address the umem starts at (`umem.address`, not page aligned).
    pub(crate) fn address(&self) -> u64 {
        // SAFETY: `raw` is live; `address` is fixed at registration.
        unsafe { (*self.raw.as_ptr()).umem.address as u64 }
    }

    /// A number that tells this umem from every other live one (its address), to take two
    /// umems' mutexes in a fixed order.
    pub(crate) fn key(&self) -> usize {
        self.raw.as_ptr() as usize
    }

    /// Takes the mutex.
    pub(crate) fn lock(&self) -> Locked<'_, T> {
        // SAFETY: `raw` is live.
        unsafe { bindings::odp_lock(self.raw.as_ptr()) };
        // SAFETY: Just locked.
        unsafe { self.assume_locked(0..0) }
    }

    /// Takes the mutex while holding another umem's (lockdep's `SINGLE_DEPTH_NESTING`); the
    /// caller orders the two so that two such holders never wait for each other.
    pub(crate) fn lock_nested(&self) -> Locked<'_, T> {
        // SAFETY: `raw` is live.
        unsafe { bindings::odp_lock_second(self.raw.as_ptr()) };
        // SAFETY: Just locked.
        unsafe { self.assume_locked(0..0) }
    }

    /// Faults `[va, va + len)` in through hmm (`ib_umem_odp_map_dma_and_lock`), writable with
    /// `write`, or with `!fault` only looks up the pages present; on success returns with the
    /// mutex held, the range's pfns ready for [`Locked::install`]. `EBUSY` means hmm kept
    /// losing to invalidations; `ENOMEM`, that the range's table chunks could not be had.
    pub(crate) fn map_dma_and_lock(
        &self,
        va: u64,
        len: usize,
        write: bool,
        fault: bool,
    ) -> Result<Locked<'_, T>> {
        let mask = if write {
            PFN_VALID | PFN_WRITE
        } else {
            PFN_VALID
        };
        // SAFETY: `raw` is live.
        let base = unsafe { bindings::odp_start(self.raw.as_ptr()) } as u64;
        // The call below checks that the range lies in the umem; the table clamps.
        let first = (va.saturating_sub(base) / PAGE_SIZE as u64) as usize;
        let end = va.saturating_add(len as u64).saturating_sub(base);
        let last = end.div_ceil(PAGE_SIZE as u64) as usize;
        // The chunks the range lacks are allocated before the fault, without the mutex: the
        // notifier takes it, and reclaim may run the notifier.
        let absent = self.lock().table().absent(first..last);
        // SAFETY: Live until drop (type invariant).
        let memcg = unsafe { &self.private.as_ref().memcg };
        let mut spare = memcg.charge(|| Table::alloc_chunks(absent))?;
        // SAFETY: `raw` is live; on success the call returns with the mutex held.
        let r = unsafe {
            bindings::ib_umem_odp_map_dma_and_lock(self.raw.as_ptr(), va, len as u64, mask, fault)
        };
        kernel::error::to_result(r)?;
        // SAFETY: Locked by the successful call, which validated the pfns of the pages under
        // the range (hmm's range is the page-aligned cover of it).
        let mut l = unsafe { self.assume_locked(first..last) };
        // Chunks an invalidation freed meanwhile stay absent: their pages are not installed,
        // and the caller's next attempt faults them again.
        l.table_mut().place(first..last, &mut spare);
        Ok(l)
    }

    /// # Safety
    ///
    /// The caller holds the umem's mutex and hands it to the returned guard; a fault under
    /// this hold has validated the pfns of `fresh`.
    unsafe fn assume_locked(&self, fresh: Range<usize>) -> Locked<'_, T> {
        // INVARIANT: Per the safety requirements; the private part is this umem's.
        Locked {
            raw: self.raw,
            // SAFETY: Live until drop (type invariant).
            private: unsafe { self.private.as_ref() },
            fresh,
        }
    }
}

impl<T: Notifier> Drop for UmemOdp<T> {
    fn drop(&mut self) {
        // SAFETY: Releasing unregisters the notifier (no callback runs after it) and unmaps
        // every page; then the private part is ours to free (type invariant).
        unsafe {
            bindings::ib_umem_odp_release(self.raw.as_ptr());
            drop(KBox::from_raw(self.private.as_ptr()));
        }
    }
}

/// The parent umem of an implicit ODP registration (`ib_umem_odp_alloc_implicit`): all of
/// the process's address space, from which children are made.
///
/// # Invariants
///
/// `root` came from `ib_umem_odp_alloc_implicit` and is released on drop; its `owning_mm`
/// carries an `mmgrab` of this object. `dev` references the root's device.
pub(crate) struct ImplicitUmemOdp {
    root: NonNull<bindings::ib_umem_odp>,
    /// Given back after the root is released (fields drop after `drop`).
    dev: DevRef,
    /// First address past the process's user address space.
    va_end: u64,
    /// The registering process's memory cgroup, charged for the children's tables.
    memcg: Memcg,
}

// SAFETY: The root is only read (and used to make children, which ib_core allows from any
// thread).
unsafe impl Send for ImplicitUmemOdp {}
// SAFETY: As above.
unsafe impl Sync for ImplicitUmemOdp {}

impl ImplicitUmemOdp {
    /// An implicit ODP registration with `access` rights for the calling process.
    pub(crate) fn alloc<D: Driver>(dev: &Device<D>, access: u32) -> Result<Self> {
        let dev = DevRef::get(dev)?;
        // SAFETY: FFI call on a live device (referenced) from the registering process's
        // context.
        let root = unsafe { bindings::ib_umem_odp_alloc_implicit(dev.as_ptr(), access as i32) };
        let root = non_err(root)?;
        // SAFETY: A valid umem whose `owning_mm` is the caller's mm, which is live. The root
        // takes no reference of its own; children are made from it later, possibly after the
        // process has exited.
        let va_end = unsafe { bindings::odp_grab_mm(root.as_ptr()) };
        // INVARIANT: See the type.
        Ok(Self {
            root,
            dev,
            va_end,
            memcg: Memcg::current(),
        })
    }

    /// First address past the process's user address space.
    pub(crate) fn va_end(&self) -> u64 {
        self.va_end
    }

    /// A child over `len` bytes at `addr` (`ib_umem_odp_alloc_child`).
    pub(crate) fn alloc_child<T: Notifier>(
        &self,
        addr: u64,
        len: usize,
        data: T,
        locked: T::Locked,
    ) -> Result<UmemOdp<T>> {
        let root = self.root.as_ptr();
        let memcg = self.memcg.clone_ref();
        UmemOdp::new(
            self.dev.try_clone()?,
            addr,
            len,
            data,
            locked,
            memcg,
            |_, ops| {
                // SAFETY: The root is live (type invariant); `ops` is static.
                unsafe { bindings::ib_umem_odp_alloc_child(root, addr as c_ulong, len, ops) }
            },
        )
    }
}

impl Drop for ImplicitUmemOdp {
    fn drop(&mut self) {
        // SAFETY: The root and the mm grab are ours (type invariant). A child holds its own
        // references to the mm and the device, so it may outlive the root.
        unsafe {
            bindings::odp_drop_mm(self.root.as_ptr());
            bindings::ib_umem_odp_release(self.root.as_ptr());
        }
    }
}

#[kunit_tests(rodp_odp_table)]
mod tests {
    use super::*;

    /// A table of `pages` with the chunks under `pages` placed.
    fn table(pages: usize, placed: Range<usize>) -> Result<Table> {
        let mut t = Table::new(pages)?;
        let mut spare = Table::alloc_chunks(t.absent(placed.clone()))?;
        t.place(placed, &mut spare);
        assert!(spare.is_empty());
        Ok(t)
    }

    #[test]
    fn chunks_follow_the_mapped_entries() -> Result {
        // 1 GiB: only the top level until something is placed.
        let mut t = Table::new(1 << 18)?;
        assert_eq!(t.chunks.len(), 512);
        assert_eq!(t.absent(0..1 << 18), 512);
        assert_eq!(t.get(5), Some(0));
        assert_eq!(t.get(1 << 18), None);
        assert!(!t.set(5, PFN_VALID));
        // A range across a chunk boundary needs two chunks.
        let mut spare = Table::alloc_chunks(t.absent(CHUNK - 1..CHUNK + 1))?;
        assert_eq!(spare.len(), 2);
        t.place(CHUNK - 1..CHUNK + 1, &mut spare);
        assert!(t.set(CHUNK - 1, PFN_VALID) && t.set(CHUNK, PFN_VALID | PFN_WRITE));
        assert_eq!(t.get(CHUNK), Some(PFN_VALID | PFN_WRITE));
        assert_eq!(t.next_mapped(0..1 << 18), Some(CHUNK - 1));
        assert_eq!(t.next_mapped(CHUNK + 1..1 << 18), None);
        // Taking a chunk's last entry frees it; a second take finds nothing.
        assert_eq!(t.take(CHUNK - 1), PFN_VALID);
        assert!(t.chunks[0].is_none());
        assert_eq!(t.take(CHUNK - 1), 0);
        assert!(t.chunks[1].is_some());
        assert_eq!(t.take(CHUNK), PFN_VALID | PFN_WRITE);
        assert_eq!(t.absent(0..1 << 18), 512);
        Ok(())
    }

    #[test]
    fn placed_chunks_left_empty_are_trimmed() -> Result {
        let mut t = table(3 * CHUNK + 1, 0..3 * CHUNK + 1)?;
        assert_eq!(t.absent(0..3 * CHUNK + 1), 0);
        assert!(t.set(3 * CHUNK, PFN_VALID));
        t.trim(0..3 * CHUNK + 1);
        assert_eq!(t.absent(0..3 * CHUNK), 3);
        assert_eq!(t.get(3 * CHUNK), Some(PFN_VALID));
        // Ranges are clamped to the table.
        assert_eq!(t.chunks_of(3 * CHUNK..usize::MAX), 3..4);
        assert_eq!(t.chunks_of(5 * CHUNK..6 * CHUNK), 0..0);
        Ok(())
    }
}
