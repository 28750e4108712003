// SPDX-License-Identifier: GPL-2.0

//! Buffers shared with user space through the context's mmap (`rdma_user_mmap_entry`).
//!
//! A driver inserts an [`Entry`] for a zeroed vmalloc buffer and returns the offset to user
//! space in a create response (`struct mminfo`); user space maps that offset on the device
//! file. The `mmap` op looks the offset up, maps the buffer's pages and registers the VMA with
//! ib_core (`rdma_umap_priv_init`, as `rdma_user_mmap_io` does for I/O memory): each VMA holds a
//! reference on its entry, and disassociation (`rdma link delete`, module unload with the
//! device file still open) zaps every registered VMA, after which the core's fault handler
//! backs it with a zero page. ib_core calls `mmap_free` once the driver's handle is removed and
//! no VMA holds the entry any more. The shared rings are built on this.

use super::{device::Driver, object::UContext};
use crate::ib::bindings;
use core::ptr::{addr_of_mut, NonNull};
use kernel::{error::from_result, prelude::*, types::Opaque};

/// An mmap entry owning a buffer that user space can map.
///
/// # Invariants
///
/// `buf` is a `vmalloc_user` allocation (page aligned, zeroed) of the entry's size, freed on
/// drop.
#[repr(C)]
pub(crate) struct Entry {
    entry: Opaque<bindings::rdma_user_mmap_entry>,
    buf: NonNull<u8>,
}

// SAFETY: The buffer is plain memory; the entry is managed under ib_core's locks.
unsafe impl Send for Entry {}
// SAFETY: As above.
unsafe impl Sync for Entry {}

impl Drop for Entry {
    fn drop(&mut self) {
        // The entry is dropped from `mmap_free` only, when the driver's handle is removed and
        // no VMA holds a reference (each VMA `mmap_cb` mapped holds one until it is closed or
        // zapped by disassociation). A page table entry left over (disassociation skips the
        // VMAs of an exiting mm) holds its own page reference (`vm_insert_page`), so that page
        // outlives the buffer rather than being reused while mapped.
        // SAFETY: `buf` came from `vmalloc_user` (type invariant); nothing uses it any more.
        unsafe { bindings::vfree(self.buf.as_ptr().cast()) };
    }
}

/// What a [`Handle`] owns.
enum Backing {
    /// An inserted entry of a user context.
    Mapped(NonNull<Entry>),
    /// A buffer only the kernel uses (the rings of kernel verbs objects), from `vmalloc_user`.
    Kernel(NonNull<u8>),
}

/// The driver's handle on a buffer: an inserted entry, removed on drop (new mappings fail,
/// existing ones keep the buffer until they are unmapped or zapped), or a kernel-only buffer,
/// freed on drop.
pub(crate) struct Handle {
    backing: Backing,
    size: usize,
}

// SAFETY: Removal may happen from any thread.
unsafe impl Send for Handle {}
// SAFETY: The handle only exposes the buffer pointer and offset.
unsafe impl Sync for Handle {}

impl Handle {
    /// Allocates a zeroed buffer of `size` bytes and makes it mappable on `ctx`.
    ///
    /// Returns the handle; [`Handle::offset`] is what user space passes to `mmap`.
    pub(crate) fn new<T: Driver>(ctx: &UContext<T>, size: usize) -> Result<Self> {
        let (buf, size) = alloc(size)?;
        let entry = KBox::new(
            Entry {
                entry: Opaque::zeroed(),
                buf,
            },
            GFP_KERNEL,
        )
        .inspect_err(|_| {
            // SAFETY: `buf` was just allocated and is not shared.
            unsafe { bindings::vfree(buf.as_ptr().cast()) }
        })?;
        let entry = KBox::into_raw(entry);
        // SAFETY: `entry` is a live, zeroed mmap entry; on success ib_core owns it until
        // `mmap_free_cb`, on failure it is still ours.
        let ret = unsafe {
            bindings::rdma_user_mmap_entry_insert(
                ctx.as_raw(),
                addr_of_mut!((*entry).entry).cast(),
                size,
            )
        };
        if ret != 0 {
            // SAFETY: Insertion failed, so the box is still exclusively ours.
            drop(unsafe { KBox::from_raw(entry) });
            return Err(Error::from_errno(ret));
        }
        Ok(Self {
            // SAFETY: `entry` is non-null (it came from a box).
            backing: Backing::Mapped(unsafe { NonNull::new_unchecked(entry) }),
            size,
        })
    }

    /// Allocates a zeroed buffer of `size` bytes that only the kernel uses.
    pub(crate) fn kernel(size: usize) -> Result<Self> {
        let (buf, size) = alloc(size)?;
        Ok(Self {
            backing: Backing::Kernel(buf),
            size,
        })
    }

    /// The offset user space passes to `mmap` (0 for a kernel-only buffer).
    pub(crate) fn offset(&self) -> u64 {
        match self.backing {
            // SAFETY: The entry is live while the handle exists (ib_core frees it only after
            // removal).
            Backing::Mapped(entry) => unsafe {
                bindings::mmap_get_offset(Opaque::cast_into(addr_of_mut!((*entry.as_ptr()).entry)))
            },
            Backing::Kernel(_) => 0,
        }
    }

    fn buf(&self) -> NonNull<u8> {
        match self.backing {
            // SAFETY: The entry is live while the handle exists.
            Backing::Mapped(entry) => unsafe { (*entry.as_ptr()).buf },
            Backing::Kernel(buf) => buf,
        }
    }

    /// Size of the buffer in bytes (what user space maps).
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    fn check(&self, off: usize, len: usize) -> Result {
        match off.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(EINVAL),
        }
    }

    /// Reads the 32-bit word at `off` with acquire ordering (a ring index).
    pub(crate) fn load_acquire(&self, off: usize) -> Result<u32> {
        self.check(off, 4)?;
        if off % 4 != 0 {
            return Err(EINVAL);
        }
        // SAFETY: In bounds and aligned (checked); the buffer lives as long as `self`.
        Ok(unsafe { bindings::load_acquire_u32(self.buf().as_ptr().add(off).cast()) })
    }

    /// Writes the 32-bit word at `off` with release ordering (a ring index).
    pub(crate) fn store_release(&self, off: usize, v: u32) -> Result {
        self.check(off, 4)?;
        if off % 4 != 0 {
            return Err(EINVAL);
        }
        // SAFETY: In bounds and aligned (checked); the buffer lives as long as `self`.
        unsafe { bindings::store_release_u32(self.buf().as_ptr().add(off).cast(), v) };
        Ok(())
    }

    /// Copies `out.len()` bytes at `off` out of the buffer.
    pub(crate) fn read(&self, off: usize, out: &mut [u8]) -> Result {
        self.check(off, out.len())?;
        // SAFETY: In bounds (checked). User space may write concurrently: the bytes are plain
        // data that callers parse without trusting them.
        unsafe {
            core::ptr::copy_nonoverlapping(
                self.buf().as_ptr().add(off),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        Ok(())
    }

    /// Copies `data` into the buffer at `off`.
    pub(crate) fn write(&self, off: usize, data: &[u8]) -> Result {
        self.check(off, data.len())?;
        // SAFETY: In bounds (checked); see `read`.
        unsafe {
            core::ptr::copy_nonoverlapping(data.as_ptr(), self.buf().as_ptr().add(off), data.len())
        };
        Ok(())
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        match self.backing {
            // SAFETY: The entry was inserted and not yet removed; after this ib_core calls
            // `mmap_free_cb` once no mapping remains.
            Backing::Mapped(entry) => unsafe {
                bindings::rdma_user_mmap_entry_remove(Opaque::cast_into(addr_of_mut!(
                    (*entry.as_ptr()).entry
                )))
            },
            // SAFETY: The buffer came from `vmalloc_user` in `alloc` and was never mapped.
            Backing::Kernel(buf) => unsafe { bindings::vfree(buf.as_ptr().cast()) },
        }
    }
}

/// A zeroed `vmalloc_user` buffer of at least `size` bytes, and its size in whole pages.
fn alloc(size: usize) -> Result<(NonNull<u8>, usize)> {
    let size = size
        .checked_next_multiple_of(kernel::page::PAGE_SIZE)
        .ok_or(EINVAL)?;
    // SAFETY: FFI call.
    let raw = unsafe { bindings::vmalloc_user(size as kernel::ffi::c_ulong) };
    let buf = NonNull::new(raw.cast::<u8>()).ok_or(ENOMEM)?;
    Ok((buf, size))
}

/// The `mmap` op: maps the entry registered at the VMA's offset and registers the VMA with
/// ib_core, so that disassociation zaps it and the entry outlives it.
///
/// # Safety
///
/// ib_core (`ib_uverbs_mmap`) passes a live context and the VMA being set up, with the mmap
/// lock and the device's disassociation SRCU held and `vm_ops` set to its own.
pub(crate) unsafe extern "C" fn mmap_cb(
    uctx: *mut bindings::ib_ucontext,
    vma: *mut bindings::vm_area_struct,
) -> c_int {
    from_result(|| {
        // As `rdma_user_mmap_io`: the zero page that replaces the ring after disassociation
        // assumes a shared mapping, and a private one would only map copies anyway.
        // SAFETY: `vma` is live (the function's safety requirements).
        if !unsafe { bindings::vma_is_shared(vma) } {
            return Err(EINVAL);
        }
        // Allocated before anything is mapped; ib_uverbs' `vm_ops` `kfree` it.
        let umap = KBox::new(bindings::rodp_umap_priv::default(), GFP_KERNEL)?;
        // SAFETY: Per the function's safety requirements; a non-null result is referenced.
        let raw = unsafe { bindings::rdma_user_mmap_entry_get(uctx, vma) };
        if raw.is_null() {
            return Err(EINVAL);
        }
        let entry = raw.cast::<Entry>();
        // The pages are inserted with `vm_insert_page`, which makes the VMA `VM_MIXEDMAP`: the
        // kind `zap_special_vma_range` zaps.
        // SAFETY: All entries of rodp's contexts are `Entry`s (entry first, `repr(C)`); the
        // core checked that the VMA length equals the entry's size.
        let ret = unsafe { bindings::remap_vmalloc_range(vma, (*entry).buf.as_ptr().cast()) };
        if ret == 0 {
            // The core takes its own reference on the entry for the VMA, links the record into
            // the file's list and frees it with `kfree` when the VMA closes, so the box (from
            // `kmalloc`) is handed over.
            // SAFETY: The VMA is the device file's, set up under the locks `rdma_user_mmap_io`
            // expects (the function's safety requirements); `raw` is live (referenced above).
            unsafe { bindings::rdma_umap_priv_init(KBox::into_raw(umap), vma, raw) };
        }
        // SAFETY: Drops the reference taken by `rdma_user_mmap_entry_get`.
        unsafe { bindings::rdma_user_mmap_entry_put(raw) };
        kernel::error::to_result(ret).map(|()| 0)
    })
}

/// The `mmap_free` op: the entry is unreachable and unmapped.
///
/// # Safety
///
/// `entry` is an [`Entry`] inserted by [`Handle::new`], freed exactly once here.
pub(crate) unsafe extern "C" fn mmap_free_cb(entry: *mut bindings::rdma_user_mmap_entry) {
    // SAFETY: Per the function's safety requirements the box is ours again.
    drop(unsafe { KBox::from_raw(entry.cast::<Entry>()) });
}
