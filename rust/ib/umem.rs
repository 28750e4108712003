// SPDX-License-Identifier: GPL-2.0

//! Pinned user memory (`include/rdma/ib_umem.h`) and page access (`include/linux/highmem.h`):
//! `ib_umem` registrations, their pages as a [`PageList`], a page handle ([`PageRef`]) that is
//! kmapped through a guard ([`Mapped`]), and 64-bit atomics on a mapped page.
//!
//! No page pointer leaves this module: the copy engine above it (`crate::mem`) names memory by
//! [`PageRef`] and byte offset.

use super::device::{Device, Driver};
use crate::ib::bindings;
use core::{marker::PhantomData, ptr::NonNull};
use kernel::{
    alloc::KVVec,
    page::{PAGE_MASK, PAGE_SIZE},
    prelude::*,
};

/// Pages backing a byte range, in order.
///
/// # Invariants
///
/// Every page stays allocated (pinned by the owner of the list) while the list exists; `offset`
/// is below `PAGE_SIZE`, and `offset + len` fits in the pages.
pub(crate) struct PageList {
    pages: KVVec<NonNull<bindings::page>>,
    offset: usize,
    len: usize,
}

// SAFETY: Page pointers are plain references to pinned memory usable from any thread.
unsafe impl Send for PageList {}
// SAFETY: As above; all access goes through kmap and copies.
unsafe impl Sync for PageList {}

impl PageList {
    /// Bytes in the list.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The page holding byte `off`, the offset in it, and how many bytes from there the page
    /// and the list both still hold; `EFAULT` past the end.
    pub(crate) fn page(&self, off: usize) -> Result<(PageRef<'_>, usize, usize)> {
        let left = self.len.checked_sub(off).filter(|&l| l > 0).ok_or(EFAULT)?;
        let abs = self.offset + off;
        let po = abs % PAGE_SIZE;
        // SAFETY: The list's pages stay pinned while it exists (type invariant), which the
        // returned handle's borrow of `self` covers.
        let page = unsafe { PageRef::new(self.pages[abs / PAGE_SIZE]) };
        Ok((page, po, (PAGE_SIZE - po).min(left)))
    }
}

/// A 64-bit atomic operation on device-visible memory.
#[derive(Clone, Copy, Debug)]
pub(crate) enum AtomicOp {
    /// Compare and swap: `(compare, swap)`.
    CmpSwap(u64, u64),
    /// Fetch and add.
    FetchAdd(u64),
    /// Store (an ATOMIC WRITE's 8 bytes, in memory order), after every earlier store.
    Write(u64),
}

/// A page of memory the device may access (`struct page`), kept allocated for `'a` by its
/// owner: a pinned umem, or an ODP umem whose mutex is held.
///
/// # Invariants
///
/// `page` is a live page for the whole of `'a`.
#[derive(Clone, Copy)]
pub(crate) struct PageRef<'a> {
    page: NonNull<bindings::page>,
    _owner: PhantomData<&'a bindings::page>,
}

impl<'a> PageRef<'a> {
    /// Wraps `page`.
    ///
    /// # Safety
    ///
    /// `page` stays allocated for `'a`.
    pub(super) unsafe fn new(page: NonNull<bindings::page>) -> Self {
        // INVARIANT: Per the safety requirements.
        Self {
            page,
            _owner: PhantomData,
        }
    }

    /// Runs `f` with the page mapped into the kernel (`kmap_local_page`); nested calls unmap
    /// in reverse order, as `kunmap_local` requires.
    pub(crate) fn map<R>(self, f: impl FnOnce(&Mapped<'_>) -> R) -> R {
        f(&Mapped::new(self))
    }

    /// Marks the page (its compound head) dirty: the device may have written it.
    pub(crate) fn set_dirty(self) {
        // SAFETY: The page is live (type invariant).
        unsafe { bindings::set_page_dirty_head(self.page.as_ptr()) };
    }
}

/// A page mapped into the kernel, unmapped on drop (`kmap_local_page` / `kunmap_local`).
///
/// Only [`PageRef::map`] makes one, and lends it for the length of a call, so mappings nest.
///
/// # Invariants
///
/// `0` is the start of a mapping of a whole page that stays allocated for `'a`.
pub(crate) struct Mapped<'a>(NonNull<u8>, PhantomData<&'a bindings::page>);

impl<'a> Mapped<'a> {
    fn new(page: PageRef<'a>) -> Self {
        // SAFETY: The page is live for `'a` (invariant of `PageRef`); `kmap_local_page` never
        // fails.
        let p = unsafe { bindings::kmap_local_page(page.page.as_ptr()) }.cast::<u8>();
        // INVARIANT: A mapping of the page, which outlives `self`.
        // SAFETY: A mapping is never NULL.
        Self(unsafe { NonNull::new_unchecked(p) }, PhantomData)
    }

    /// Copies `out.len()` bytes at `po` into `out`; `po + out.len()` must not pass the page.
    pub(crate) fn read(&self, po: usize, out: &mut [u8]) {
        assert!(po + out.len() <= PAGE_SIZE);
        // SAFETY: The mapping covers the page and the range stays inside it (asserted); the
        // page may change under the copy (user memory): bytes only.
        unsafe {
            core::ptr::copy_nonoverlapping(self.0.as_ptr().add(po), out.as_mut_ptr(), out.len())
        };
    }

    /// Copies `data` to `po`; `po + data.len()` must not pass the page.
    pub(crate) fn write(&self, po: usize, data: &[u8]) {
        assert!(po + data.len() <= PAGE_SIZE);
        // SAFETY: As in `read`, with the roles swapped.
        unsafe {
            core::ptr::copy_nonoverlapping(data.as_ptr(), self.0.as_ptr().add(po), data.len())
        };
    }

    /// Copies `n` bytes from `src` at `spo` to `po`; neither range may pass its page. Source
    /// and destination may be the same page (a loopback copy onto itself) and overlap.
    pub(crate) fn copy_from(&self, po: usize, src: &Mapped<'_>, spo: usize, n: usize) {
        assert!(po + n <= PAGE_SIZE && spo + n <= PAGE_SIZE);
        // SAFETY: Both mappings cover their page and `n` stays inside both (asserted);
        // `copy` allows overlap.
        unsafe { core::ptr::copy(src.0.as_ptr().add(spo), self.0.as_ptr().add(po), n) };
    }

    /// Performs `op` on the 64-bit word at `po` (8-byte aligned, inside the page).
    pub(crate) fn atomic(&self, po: usize, op: AtomicOp) -> Result<u64> {
        if po % 8 != 0 || po + 8 > PAGE_SIZE {
            return Err(EINVAL);
        }
        // SAFETY: `po` is 8-byte aligned and the word lies inside the mapping.
        let p = unsafe { self.0.as_ptr().add(po) }.cast::<u64>();
        // SAFETY: `p` is a valid, aligned word for the duration of the mapping.
        Ok(unsafe { atomic_at(p, op) })
    }
}

/// Performs `op` on the word at `p`; returns its old value.
///
/// # Safety
///
/// `p` is a valid, 8-byte aligned word the device may access atomically for the call.
pub(crate) unsafe fn atomic_at(p: *mut u64, op: AtomicOp) -> u64 {
    // SAFETY: Per the safety requirements.
    unsafe {
        match op {
            AtomicOp::CmpSwap(cmp, swap) => bindings::atomic64_cmpxchg(p, cmp, swap),
            AtomicOp::FetchAdd(add) => bindings::atomic64_fetch_add(p, add),
            AtomicOp::Write(v) => {
                bindings::atomic64_store_release(p, v);
                0
            }
        }
    }
}

impl Drop for Mapped<'_> {
    fn drop(&mut self) {
        // SAFETY: Unmaps what `new` mapped; `PageRef::map` lends mappings only for a call, so
        // they are unmapped in reverse order of mapping.
        unsafe { bindings::kunmap_local(self.0.as_ptr().cast()) };
    }
}

/// A pinned user memory registration (`struct ib_umem`) and its pages.
///
/// The engine may hold the last reference to an MR's memory for the length of a transfer, past
/// the MR's deregistration; the umem therefore holds a reference on its device, so
/// unregistration waits for it and `ib_umem_release` never runs on a freed device.
///
/// # Invariants
///
/// `raw` is a umem from `ib_umem_get_va`, released on drop; `pages` lists its pinned pages;
/// `_dev` references the umem's device and is given back after the release (fields drop
/// after `drop`).
pub(crate) struct Umem {
    raw: NonNull<bindings::ib_umem>,
    pages: PageList,
    _dev: DevRef,
}

// SAFETY: A umem may be released from any thread.
unsafe impl Send for Umem {}
// SAFETY: Shared access only reads the page list.
unsafe impl Sync for Umem {}

impl Umem {
    /// Pins `len` bytes of the calling process's memory at `addr` with `access` rights.
    pub(crate) fn get<T: Driver>(
        dev: &Device<T>,
        addr: u64,
        len: u64,
        access: u32,
    ) -> Result<Self> {
        let len_us = usize::try_from(len).map_err(|_| EINVAL)?;
        let dev_ref = DevRef::get(dev)?;
        // SAFETY: FFI call on a live device from the registering process's context.
        let raw = unsafe {
            bindings::ib_umem_get_attr_or_va(
                dev.as_raw(),
                core::ptr::null(),
                0,
                addr,
                len_us,
                access as i32,
            )
        };
        let raw = non_err(raw)?;
        let offset = (addr as usize) & !PAGE_MASK;
        let npages = (offset + len_us).div_ceil(PAGE_SIZE);
        let mut pages = KVVec::with_capacity(npages, GFP_KERNEL).inspect_err(|_| {
            // SAFETY: Nothing else refers to the umem yet.
            unsafe { bindings::ib_umem_release(raw.as_ptr()) }
        })?;
        let mut tmp =
            KVVec::<*mut bindings::page>::with_capacity(npages, GFP_KERNEL).inspect_err(|_| {
                // SAFETY: As above.
                unsafe { bindings::ib_umem_release(raw.as_ptr()) }
            })?;
        // SAFETY: `tmp` has room for `npages` pointers; the helper writes at most that many.
        let n = unsafe {
            let n = bindings::umem_pages(raw.as_ptr(), tmp.as_mut_ptr(), npages);
            tmp.inc_len(n);
            n
        };
        for p in tmp.iter().filter_map(|p| NonNull::new(*p)) {
            // Capacity was reserved above, so this cannot fail.
            let _ = pages.push(p, GFP_KERNEL);
        }
        if n != npages || pages.len() != npages {
            // SAFETY: Nothing else refers to the umem.
            unsafe { bindings::ib_umem_release(raw.as_ptr()) };
            return Err(EFAULT);
        }
        // INVARIANT: The umem pins exactly the pages covering `[addr, addr + len)`; the device
        // reference moves into the umem.
        Ok(Self {
            raw,
            pages: PageList {
                pages,
                offset,
                len: len_us,
            },
            _dev: dev_ref,
        })
    }

    /// The pinned pages.
    pub(crate) fn pages(&self) -> &PageList {
        &self.pages
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: The umem came from `ib_umem_get_va` and is released once; the page list
        // dies with `self`, so no page is used after the unpin. The device is still
        // registered-or-waiting: our reference holds its unregistration.
        unsafe { bindings::ib_umem_release(self.raw.as_ptr()) };
        // `dev` is given back after this, with the fields.
    }
}

/// One `ib_device_try_get` reference, given back on drop: the memory objects hold one, so that
/// unregistration waits for a transfer that outlives their MR.
///
/// # Invariants
///
/// The reference on the device was taken by `ib_device_try_get` and is owned by this object.
pub(super) struct DevRef(NonNull<bindings::ib_device>);

// SAFETY: A device reference may be given back from any thread.
unsafe impl Send for DevRef {}
// SAFETY: It is only read.
unsafe impl Sync for DevRef {}

impl DevRef {
    /// A reference on `dev`; `ENODEV` once it is unregistering.
    pub(super) fn get<T: Driver>(dev: &Device<T>) -> Result<Self> {
        Self::try_get(NonNull::new(dev.as_raw()).ok_or(ENODEV)?)
    }

    /// Another reference on the same device.
    pub(super) fn try_clone(&self) -> Result<Self> {
        Self::try_get(self.0)
    }

    fn try_get(dev: NonNull<bindings::ib_device>) -> Result<Self> {
        // SAFETY: Callers pass a live device: one a verbs call runs on, or one this object
        // already holds a reference on.
        if !unsafe { bindings::ib_device_try_get(dev.as_ptr()) } {
            return Err(ENODEV);
        }
        // INVARIANT: Just taken.
        Ok(Self(dev))
    }

    /// The device.
    pub(super) fn as_ptr(&self) -> *mut bindings::ib_device {
        self.0.as_ptr()
    }
}

impl Drop for DevRef {
    fn drop(&mut self) {
        // SAFETY: The reference was taken with `ib_device_try_get` and is given back once.
        unsafe { bindings::ib_device_put(self.0.as_ptr()) };
    }
}

/// The object an ib_core function returned, or the error its `ERR_PTR` carries (a null
/// pointer is `ENOMEM`).
pub(super) fn non_err<T>(p: *mut T) -> Result<NonNull<T>> {
    NonNull::new(kernel::error::from_err_ptr(p)?).ok_or(ENOMEM)
}
