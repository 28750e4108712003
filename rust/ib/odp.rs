// SPDX-License-Identifier: GPL-2.0

//! On-demand paging memory (`include/rdma/ib_umem_odp.h`): an `ib_umem_odp` pins nothing. Its
//! `mmu_interval_notifier` tells rodp when the process's mappings change; a device access
//! faults the pages it needs in through hmm (`ib_umem_odp_map_dma_and_lock`) and copies while
//! holding the umem's mutex, which the invalidation callback takes too, so a copy never sees a
//! page the kernel has taken away.

use super::{
    device::{Device, Driver},
    umem::{AtomicOp, Mapped},
};
use crate::bindings;
use core::ptr::NonNull;
use kernel::{
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
};

/// Largest range one fault maps (the batching bound).
const FAULT_BATCH: usize = 2 << 20;

/// Fault attempts before an access gives up (each one lost to an invalidation).
const ATTEMPTS: u32 = 8;

/// ODP event counts, per MR and per device.
pub(crate) struct OdpCounters {
    /// Faults resolved (one per batch mapped).
    pub(crate) faults: Atomic<u64>,
    /// Pages those faults mapped.
    pub(crate) fault_pages: Atomic<u64>,
    /// Invalidation callbacks that covered the MR.
    pub(crate) invalidations: Atomic<u64>,
    /// Mapped pages those callbacks took away.
    pub(crate) invalidation_pages: Atomic<u64>,
    /// Prefetch requests handled.
    pub(crate) prefetches: Atomic<u64>,
    /// Accesses that found their pages invalidated between faulting and copying.
    pub(crate) contentions: Atomic<u64>,
    /// Faults that failed (unmapped or read-only memory).
    pub(crate) failed: Atomic<u64>,
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
                contentions: Atomic::new(0),
                failed: Atomic::new(0),
            },
            GFP_KERNEL,
        )?)
    }
}

/// Adds `n` to `field` of each set.
fn count(sets: &[Arc<OdpCounters>; 2], field: impl Fn(&OdpCounters) -> &Atomic<u64>, n: u64) {
    for c in sets {
        field(c).fetch_add(n, Relaxed);
    }
}

/// An ODP registration of user memory.
///
/// # Invariants
///
/// `raw` came from `ib_umem_odp_get` with [`OPS`] and is released on drop; its `private` is
/// `counters` (leaked from a box, freed after the release); `dev` carries one
/// `ib_device_try_get` reference owned by this object.
pub(crate) struct OdpUmem {
    raw: NonNull<bindings::ib_umem_odp>,
    counters: NonNull<[Arc<OdpCounters>; 2]>,
    dev: NonNull<bindings::ib_device>,
    /// Whether the pages may be mapped writable.
    writable: bool,
}

// SAFETY: The umem is used under its own mutex; the counters are atomics.
unsafe impl Send for OdpUmem {}
// SAFETY: As above.
unsafe impl Sync for OdpUmem {}

static OPS: bindings::mmu_interval_notifier_ops = bindings::mmu_interval_notifier_ops {
    invalidate: Some(invalidate_cb),
    invalidate_start: None,
    invalidate_finish: None,
};

/// The invalidation callback: takes the affected pages away (marking written ones dirty)
/// while no copy runs.
///
/// # Safety
///
/// Called by the MM for a notifier registered by [`OdpUmem::get`] that is not yet released.
unsafe extern "C" fn invalidate_cb(
    mni: *mut bindings::mmu_interval_notifier,
    range: *const bindings::mmu_notifier_range,
    cur_seq: c_ulong,
) -> bool {
    // SAFETY: Per the safety requirements the notifier is embedded in a live ODP umem.
    let odp = unsafe { bindings::odp_of_notifier(mni) };
    // SAFETY: `range` is valid for the call.
    if !unsafe { bindings::mmu_range_blockable(range) } {
        return false;
    }
    // SAFETY: The umem is live (above); `private` holds the counters (type invariant of the
    // owning `OdpUmem`), which outlive the notifier.
    unsafe {
        bindings::odp_lock(odp);
        bindings::mmu_interval_set_seq(mni, cur_seq);
        let ustart = bindings::odp_start(odp) as u64;
        let uend = bindings::odp_end(odp) as u64;
        let start = ustart.max((*range).start as u64);
        let end = uend.min((*range).end as u64);
        if start < end {
            let shift = (*odp).page_shift;
            let first = ((start - ustart) >> shift) as usize;
            let last = ((end - ustart).div_ceil(1 << shift)) as usize;
            let taken = bindings::odp_count_valid(odp, first, last);
            bindings::ib_umem_odp_unmap_dma_pages(odp, start, end);
            let sets = &*(*odp).private.cast::<[Arc<OdpCounters>; 2]>();
            count(sets, |c| &c.invalidations, 1);
            count(sets, |c| &c.invalidation_pages, taken as u64);
        }
        bindings::odp_unlock(odp);
    }
    true
}

impl OdpUmem {
    /// Registers `len` bytes of the calling process's memory at `addr` for on-demand paging;
    /// events are counted in `mr` and `dev_counters`.
    pub(crate) fn get<T: Driver>(
        dev: &Device<T>,
        addr: u64,
        len: u64,
        access: u32,
        mr: Arc<OdpCounters>,
        dev_counters: Arc<OdpCounters>,
    ) -> Result<Self> {
        let len = usize::try_from(len).map_err(|_| EINVAL)?;
        let counters = KBox::new([mr, dev_counters], GFP_KERNEL)?;
        // SAFETY: The device is live (a verbs call is running on it).
        if !unsafe { bindings::ib_device_try_get(dev.as_raw()) } {
            return Err(ENODEV);
        }
        // SAFETY: FFI call on a live device from the registering process's context; `OPS` is
        // static.
        let raw = unsafe {
            bindings::ib_umem_odp_get(dev.as_raw(), addr as c_ulong, len, access as i32, &OPS)
        };
        // SAFETY: `raw` is a pointer or an error pointer.
        if unsafe { bindings::is_err(raw.cast()) } {
            // SAFETY: As above; the device reference taken above is given back.
            let e = unsafe {
                bindings::ib_device_put(dev.as_raw());
                bindings::ptr_err(raw.cast())
            };
            return Err(Error::from_errno(e as i32));
        }
        let counters = NonNull::from(KBox::leak(counters));
        // SAFETY: `raw` is a valid ODP umem. Its notifier may already run (the process can
        // unmap at any time); the callback reads `private` only under the mutex taken here.
        unsafe {
            bindings::odp_lock(raw);
            (*raw).private = counters.as_ptr().cast();
            bindings::odp_unlock(raw);
        }
        // INVARIANT: See the type; the device reference moves into the object.
        Ok(Self {
            // SAFETY: Not an error pointer, so a valid umem.
            raw: unsafe { NonNull::new_unchecked(raw) },
            counters,
            // SAFETY: A live device is not null.
            dev: unsafe { NonNull::new_unchecked(dev.as_raw()) },
            writable: access & bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE != 0
                || access
                    & (bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE
                        | bindings::ib_access_flags_IB_ACCESS_REMOTE_ATOMIC)
                    != 0,
        })
    }

    fn counters(&self) -> &[Arc<OdpCounters>; 2] {
        // SAFETY: Live until drop (type invariant).
        unsafe { self.counters.as_ref() }
    }

    /// The user address of byte `off` of the registration.
    fn va(&self, off: usize) -> u64 {
        // SAFETY: `raw` is live; `address` is fixed at registration.
        let base = unsafe { (*self.raw.as_ptr()).umem.address };
        base as u64 + off as u64
    }

    fn page_shift(&self) -> u32 {
        // SAFETY: As above.
        unsafe { (*self.raw.as_ptr()).page_shift }
    }

    /// The pfn-list index and in-page offset of user address `va`.
    fn locate(&self, va: u64) -> (usize, usize) {
        // SAFETY: As above.
        let start = unsafe { bindings::odp_start(self.raw.as_ptr()) } as u64;
        let shift = self.page_shift();
        (
            ((va - start) >> shift) as usize,
            (va & ((1u64 << shift) - 1)) as usize,
        )
    }

    /// Pages of `[off, off + len)` not mapped (or not writable when `write`); the caller holds
    /// the mutex.
    fn missing(&self, off: usize, len: usize, write: bool) -> usize {
        if len == 0 {
            return 0;
        }
        let (first, _) = self.locate(self.va(off));
        let (last, _) = self.locate(self.va(off + len - 1));
        (first..=last)
            // SAFETY: The mutex is held (caller); the index is checked by the helper.
            .filter(|&i| unsafe { bindings::odp_page(self.raw.as_ptr(), i, write) }.is_null())
            .count()
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
        let raw = self.raw.as_ptr();
        for attempt in 0..ATTEMPTS {
            // SAFETY: `raw` is live.
            unsafe { bindings::odp_lock(raw) };
            let missing = self.missing(off, len, write);
            if missing == 0 {
                let r = f(&OdpView { odp: self, write });
                // SAFETY: Locked above.
                unsafe { bindings::odp_unlock(raw) };
                return r;
            }
            // SAFETY: Locked above.
            unsafe { bindings::odp_unlock(raw) };
            if attempt > 0 {
                count(self.counters(), |c| &c.contentions, 1);
            }
            self.fault(off, len, write, missing)?;
        }
        Err(EAGAIN)
    }

    /// Faults `[off, off + len)` in; `missing` pages were absent.
    fn fault(&self, off: usize, len: usize, write: bool, missing: usize) -> Result {
        // SAFETY: Pure function.
        let mask = unsafe { bindings::hmm_pfn_mask(write) };
        let mut done = 0;
        while done < len.max(1) {
            let n = (len - done).min(FAULT_BATCH).max(1);
            // SAFETY: `raw` is live; on success the call returns with the mutex held.
            let r = unsafe {
                bindings::ib_umem_odp_map_dma_and_lock(
                    self.raw.as_ptr(),
                    self.va(off + done),
                    n as u64,
                    mask,
                    true,
                )
            };
            if r < 0 {
                count(self.counters(), |c| &c.failed, 1);
                return Err(EFAULT);
            }
            // SAFETY: Locked by the successful call.
            unsafe { bindings::odp_unlock(self.raw.as_ptr()) };
            done += n;
        }
        count(self.counters(), |c| &c.faults, 1);
        count(self.counters(), |c| &c.fault_pages, missing as u64);
        Ok(())
    }

    /// Prefetch: faults `[off, off + len)` in (writable when `write`), or with `!fault` maps
    /// only the pages that are present.
    pub(crate) fn prefetch(&self, off: usize, len: usize, write: bool, fault: bool) -> Result {
        count(self.counters(), |c| &c.prefetches, 1);
        if fault {
            return self.with_pages(off, len, write, |_| Ok(()));
        }
        // SAFETY: Pure function.
        let mask = unsafe { bindings::hmm_pfn_mask(false) };
        // SAFETY: `raw` is live; on success the call returns with the mutex held.
        let r = unsafe {
            bindings::ib_umem_odp_map_dma_and_lock(
                self.raw.as_ptr(),
                self.va(off),
                len.max(1) as u64,
                mask,
                false,
            )
        };
        if r < 0 {
            return Err(EFAULT);
        }
        // SAFETY: Locked by the successful call.
        unsafe { bindings::odp_unlock(self.raw.as_ptr()) };
        Ok(())
    }
}

impl Drop for OdpUmem {
    fn drop(&mut self) {
        // SAFETY: Releasing unregisters the notifier (no callback runs after it); then the
        // counters box and the device reference are ours to give back (type invariant).
        unsafe {
            bindings::ib_umem_odp_release(self.raw.as_ptr());
            drop(KBox::from_raw(self.counters.as_ptr()));
            bindings::ib_device_put(self.dev.as_ptr());
        }
    }
}

/// The pages of an ODP range while its mutex is held: byte copies and atomics.
pub(crate) struct OdpView<'a> {
    odp: &'a OdpUmem,
    write: bool,
}

impl OdpView<'_> {
    /// The mapped page holding byte `off`, and the offset in it.
    fn page(&self, off: usize, write: bool) -> Result<(Mapped, usize, usize)> {
        let (idx, po) = self.odp.locate(self.odp.va(off));
        // SAFETY: The mutex is held for the view's life.
        let page = unsafe { bindings::odp_page(self.odp.raw.as_ptr(), idx, write) };
        let page = NonNull::new(page).ok_or(EFAULT)?;
        Ok((
            Mapped::new(page),
            po,
            (1usize << self.odp.page_shift()) - po,
        ))
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
