// SPDX-License-Identifier: GPL-2.0

//! An XArray that finds free indices itself (`include/linux/xarray.h`, `__xa_alloc_cyclic`):
//! the kernel crate's `XArray` stores only at indices its user names, and cannot search.

use crate::ib::bindings;
use core::{marker::PhantomData, ptr, ptr::NonNull};
use kernel::{
    prelude::*,
    types::{ForeignOwnable, NotThreadSafe, Opaque},
    xarray::StoreError,
};

/// Owned objects by `u32` index, with the free indices tracked (`XA_FLAGS_ALLOC`) so that a free
/// one is found by the XArray's own search.
///
/// # Invariants
///
/// `xa` is an initialised `struct xarray` with `XA_FLAGS_ALLOC`, whose entries are reservations
/// (`XA_ZERO_ENTRY`) or came from `T::into_foreign`.
#[pin_data(PinnedDrop)]
pub(crate) struct IdArray<T: ForeignOwnable> {
    #[pin]
    xa: Opaque<bindings::xarray>,
    _p: PhantomData<T>,
}

impl<T: ForeignOwnable> IdArray<T> {
    /// An empty array.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            // SAFETY: `xa` is valid memory for an xarray while the closure runs.
            //
            // INVARIANT: initialised empty, with free-index tracking.
            xa <- Opaque::ffi_init(|xa| unsafe {
                bindings::xa_init_flags(xa, bindings::XA_FLAGS_ALLOC)
            }),
            _p: PhantomData,
        })
    }

    /// Locks the array.
    pub(crate) fn lock(&self) -> Guard<'_, T> {
        // SAFETY: `self.xa` is valid by the type invariant.
        unsafe { bindings::xa_lock(self.xa.get()) };
        Guard {
            xa: self,
            _not_send: NotThreadSafe,
        }
    }
}

#[pinned_drop]
impl<T: ForeignOwnable> PinnedDrop for IdArray<T> {
    fn drop(self: Pin<&mut Self>) {
        let xa = self.xa.get();
        let mut index = 0;
        // SAFETY: `xa` is valid by the type invariant.
        let mut p = unsafe { bindings::xa_find(xa, &mut index, usize::MAX, bindings::XA_PRESENT) };
        while !p.is_null() {
            // SAFETY: `p` came from `T::into_foreign` (`xa_find` skips reservations); nothing
            // else can reach the array being dropped, so each object is freed once.
            drop(unsafe { T::from_foreign(p) });
            // SAFETY: As above.
            p = unsafe {
                bindings::xa_find_after(xa, &mut index, usize::MAX, bindings::XA_PRESENT)
            };
        }
        // SAFETY: `self.xa` is valid by the type invariant and no longer used after this.
        unsafe { bindings::xa_destroy(self.xa.get()) };
    }
}

/// The array, locked; unlocked on drop.
#[must_use = "the lock unlocks immediately when the guard is unused"]
pub(crate) struct Guard<'a, T: ForeignOwnable> {
    xa: &'a IdArray<T>,
    _not_send: NotThreadSafe,
}

impl<T: ForeignOwnable> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: `self.xa.xa` is valid by the type invariant and this guard holds its lock.
        unsafe { bindings::xa_unlock(self.xa.xa.get()) };
    }
}

impl<T: ForeignOwnable> Guard<'_, T> {
    /// The object at `index` (`None` if the index is free or reserved).
    pub(crate) fn get(&self, index: u32) -> Option<T::Borrowed<'_>> {
        // SAFETY: `self.xa.xa` is valid by the type invariant.
        let p = unsafe { bindings::xa_load(self.xa.xa.get(), index as usize) };
        // SAFETY: `p` came from `T::into_foreign` (`xa_load` shows reservations as NULL), and
        // it stays in the array while `&self` borrows the locked guard.
        NonNull::new(p).map(|p| unsafe { T::borrow(p.as_ptr()) })
    }

    /// Removes the object at `index`, or the reservation of it; returns the object.
    pub(crate) fn remove(&mut self, index: u32) -> Option<T> {
        // SAFETY: `self.xa.xa` is valid by the type invariant; this guard holds its lock.
        let p = unsafe { bindings::__xa_erase(self.xa.xa.get(), index as usize) };
        // SAFETY: `p` is NULL (for a reservation too) or came from `T::into_foreign`; `&mut self`
        // ends every borrow made through `get`.
        unsafe { T::try_from_foreign(p) }
    }

    /// Stores `value` at `index`; returns the object that was there. May drop the lock and
    /// sleep to allocate memory (never when `index` is occupied or reserved).
    pub(crate) fn store(&mut self, index: u32, value: T) -> Result<Option<T>, StoreError<T>> {
        kernel::build_assert::build_assert!(
            T::FOREIGN_ALIGN >= 4,
            "pointers stored in an XArray must be 4-byte aligned"
        );
        let new = value.into_foreign();
        // SAFETY: `self.xa.xa` is valid by the type invariant; this guard holds its lock.
        //
        // INVARIANT: `new` came from `T::into_foreign`.
        let old = unsafe {
            bindings::__xa_store(self.xa.xa.get(), index as usize, new, bindings::GFP_KERNEL)
        };
        // SAFETY: `old` is an entry or an `xa_err` value, as `__xa_store` returns.
        let errno = unsafe { bindings::xa_err(old) };
        if errno != 0 {
            return Err(StoreError {
                // SAFETY: `new` came from `T::into_foreign`; `__xa_store` did not keep it.
                value: unsafe { T::from_foreign(new) },
                error: Error::from_errno(errno),
            });
        }
        // SAFETY: `old` is NULL (for a reservation too) or came from `T::into_foreign`.
        Ok(unsafe { T::try_from_foreign(old) })
    }

    /// Reserves the first free index in `next..=max`, else in `min..=max`, and moves `next`
    /// past it (`__xa_alloc_cyclic`): a freed index is reused as late as possible. A reserved
    /// index reads as free to [`Guard::get`] until [`Guard::store`] fills it or
    /// [`Guard::remove`] gives it back. `EBUSY` if every index in `min..=max` is taken. May
    /// drop the lock and sleep to allocate memory.
    pub(crate) fn reserve_cyclic(&mut self, min: u32, max: u32, next: &mut u32) -> Result<u32> {
        let mut id = 0u32;
        let limit = bindings::xa_limit { min, max };
        // INVARIANT: a NULL entry is stored as a reservation (`XA_ZERO_ENTRY`).
        //
        // SAFETY: `self.xa.xa` is valid and tracks free indices (type invariant); this guard
        // holds its lock, which `__xa_alloc_cyclic` may drop only to allocate.
        let ret = unsafe {
            bindings::__xa_alloc_cyclic(
                self.xa.xa.get(),
                &mut id,
                ptr::null_mut(),
                limit,
                next,
                bindings::GFP_KERNEL,
            )
        };
        if ret < 0 {
            return Err(Error::from_errno(ret));
        }
        Ok(id)
    }
}

// SAFETY: The array owns its objects and shares no state outside its lock: it may move to
// another thread when `T` may.
unsafe impl<T: ForeignOwnable + Send> Send for IdArray<T> {}

// SAFETY: Every access goes through the array's lock, and objects only move out of it by value:
// shared use is safe when `T` may be sent.
unsafe impl<T: ForeignOwnable + Send> Sync for IdArray<T> {}
