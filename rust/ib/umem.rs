// SPDX-License-Identifier: GPL-2.0

//! User memory the device accesses (`include/rdma/ib_umem.h`): pinned registrations and the
//! byte-level copies and atomics the engine performs on them.
//!
//! The engine never sees a page pointer: it names memory as a [`PageList`] and a byte offset.

use super::device::{Device, Driver};
use crate::bindings;
use core::ptr::NonNull;
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

/// A 64-bit atomic operation on device-visible memory.
#[derive(Clone, Copy, Debug)]
pub(crate) enum AtomicOp {
    /// Compare and swap: `(compare, swap)`.
    CmpSwap(u64, u64),
    /// Fetch and add.
    FetchAdd(u64),
}

/// A page mapped into the kernel for the duration of a borrow.
pub(super) struct Mapped(NonNull<u8>);

impl Mapped {
    pub(super) fn new(page: NonNull<bindings::page>) -> Self {
        // SAFETY: The page is pinned (invariant of the list it came from); `kmap_local_page`
        // never fails.
        let p = unsafe { bindings::kmap_local_page(page.as_ptr()) }.cast::<u8>();
        // SAFETY: A mapping is never NULL.
        Self(unsafe { NonNull::new_unchecked(p) })
    }
}

impl Mapped {
    /// Copies `out.len()` bytes at `po` into `out`; `po + out.len()` must not pass the page.
    pub(super) fn read(&self, po: usize, out: &mut [u8]) {
        assert!(po + out.len() <= PAGE_SIZE);
        // SAFETY: The mapping covers the page and the range stays inside it (asserted); the
        // page may change under the copy (user memory): bytes only.
        unsafe {
            core::ptr::copy_nonoverlapping(self.0.as_ptr().add(po), out.as_mut_ptr(), out.len())
        };
    }

    /// Copies `data` to `po`; `po + data.len()` must not pass the page.
    pub(super) fn write(&self, po: usize, data: &[u8]) {
        assert!(po + data.len() <= PAGE_SIZE);
        // SAFETY: As in `read`, with the roles swapped.
        unsafe {
            core::ptr::copy_nonoverlapping(data.as_ptr(), self.0.as_ptr().add(po), data.len())
        };
    }

    /// Performs `op` on the 64-bit word at `po` (8-byte aligned, inside the page).
    pub(super) fn atomic(&self, po: usize, op: AtomicOp) -> Result<u64> {
        if po % 8 != 0 || po + 8 > PAGE_SIZE {
            return Err(EINVAL);
        }
        // SAFETY: `po` is 8-byte aligned and the word lies inside the mapping.
        let p = unsafe { self.0.as_ptr().add(po) }.cast::<u64>();
        // SAFETY: `p` is a valid, aligned word for the duration of the mapping.
        Ok(unsafe {
            match op {
                AtomicOp::CmpSwap(cmp, swap) => bindings::atomic64_cmpxchg(p, cmp, swap),
                AtomicOp::FetchAdd(add) => bindings::atomic64_fetch_add(p, add),
            }
        })
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: Unmaps what `new` mapped, in reverse order of mapping (callers nest them).
        unsafe { bindings::kunmap_local(self.0.as_ptr().cast()) };
    }
}

/// Memory the engine copies between page by page: pinned pages, or an ODP range while its
/// mutex is held.
pub(crate) trait Pages {
    /// The page holding byte `off` (writable when `write`), the offset in it, and how many
    /// bytes from there the page and the memory both still hold.
    fn page_at(&self, off: usize, write: bool) -> Result<(NonNull<bindings::page>, usize, usize)>;
}

impl Pages for PageList {
    fn page_at(&self, off: usize, _write: bool) -> Result<(NonNull<bindings::page>, usize, usize)> {
        let left = self.len.checked_sub(off).filter(|&l| l > 0).ok_or(EFAULT)?;
        let (page, po) = self.locate(off);
        Ok((page, po, (PAGE_SIZE - po).min(left)))
    }
}

/// Copies `len` bytes from `src` at `soff` to `dst` at `doff`, page to page, with no bounce
/// buffer.
pub(crate) fn copy_pages(
    dst: &impl Pages,
    mut doff: usize,
    src: &impl Pages,
    mut soff: usize,
    len: usize,
) -> Result {
    let mut left = len;
    while left > 0 {
        let (dp, dpo, droom) = dst.page_at(doff, true)?;
        let (sp, spo, sroom) = src.page_at(soff, false)?;
        let n = droom.min(sroom).min(left);
        let d = Mapped::new(dp);
        let s = Mapped::new(sp);
        // SAFETY: Both mappings cover their page and `n` stays inside both. Source and
        // destination may be the same page (a loopback copy onto itself): `copy` allows
        // overlap.
        unsafe { core::ptr::copy(s.0.as_ptr().add(spo), d.0.as_ptr().add(dpo), n) };
        drop(s);
        drop(d);
        left -= n;
        doff += n;
        soff += n;
    }
    Ok(())
}

impl PageList {
    /// The page holding byte `off` and the offset in it; `off < len` is checked by callers.
    fn locate(&self, off: usize) -> (NonNull<bindings::page>, usize) {
        let abs = self.offset + off;
        (self.pages[abs / PAGE_SIZE], abs % PAGE_SIZE)
    }

    fn check(&self, off: usize, len: usize) -> Result {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(EFAULT),
        }
    }

    /// Copies `out.len()` bytes at `off` into `out`.
    pub(crate) fn read(&self, mut off: usize, out: &mut [u8]) -> Result {
        self.check(off, out.len())?;
        let mut done = 0;
        while done < out.len() {
            let (page, po) = self.locate(off);
            let n = (PAGE_SIZE - po).min(out.len() - done);
            Mapped::new(page).read(po, &mut out[done..done + n]);
            done += n;
            off += n;
        }
        Ok(())
    }

    /// Copies `data` to `off`.
    pub(crate) fn write(&self, mut off: usize, data: &[u8]) -> Result {
        self.check(off, data.len())?;
        let mut done = 0;
        while done < data.len() {
            let (page, po) = self.locate(off);
            let n = (PAGE_SIZE - po).min(data.len() - done);
            Mapped::new(page).write(po, &data[done..done + n]);
            done += n;
            off += n;
        }
        Ok(())
    }

    /// Copies `len` bytes from `src` at `src_off` to `self` at `off`, page to page.
    pub(crate) fn copy_from(
        &self,
        off: usize,
        src: &PageList,
        src_off: usize,
        len: usize,
    ) -> Result {
        self.check(off, len)?;
        src.check(src_off, len)?;
        copy_pages(self, off, src, src_off, len)
    }

    /// Performs `op` on the naturally aligned 64-bit word at `off`; returns its old value.
    pub(crate) fn atomic(&self, off: usize, op: AtomicOp) -> Result<u64> {
        self.check(off, 8)?;
        let (page, po) = self.locate(off);
        Mapped::new(page).atomic(po, op)
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
