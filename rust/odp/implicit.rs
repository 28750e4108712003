// SPDX-License-Identifier: GPL-2.0

//! Implicit ODP MRs (the role of mlx5's `odp.c` implicit MRs, `mlx5_ib_alloc_implicit_mr` and
//! `free_implicit_child_mr_work`): `reg_mr(NULL, SIZE_MAX)` covers the whole address space.
//!
//! A parent umem from `ib_umem_odp_alloc_implicit`, and children of 1 GiB made on first touch
//! by `ib_umem_odp_alloc_child`, kept in an XArray, reaped by deferred work once the kernel has
//! invalidated all their pages, and all released with the parent.

use super::{umem::OdpUmem, CounterSets};
use crate::ib::{
    device::{Device, Driver},
    odp::ImplicitUmemOdp,
    wq,
};
use core::ops::Deref;
use kernel::{
    impl_has_work, new_mutex, new_work,
    prelude::*,
    sync::{
        atomic::{Acquire, Full, Relaxed},
        Arc, Mutex,
    },
    workqueue::{Work, WorkItem},
    xarray::{AllocKind, XArray},
};

/// Address space each child of an implicit MR covers: 1 GiB (mlx5's `mlx5_imr_mtt_shift`).
pub(crate) const CHILD_SHIFT: u32 = 30;
const CHILD_SIZE: usize = 1 << CHILD_SHIFT;

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
    pub(super) fn schedule_reap(self: &Arc<Self>) {
        // Already queued: that run will see this child too.
        let _ = wq::get().enqueue(self.clone());
    }

    /// The child in `slot`, if any, held (see [`Held`]).
    pub(super) fn hold(&self, slot: usize) -> Option<Held> {
        let slots = self.slots.lock();
        slots.get(slot).map(|c| Held::new(Arc::from(c)))
    }

    /// The child in `slot`, made by `make` if there is none, held.
    fn get_or_make(&self, slot: usize, make: impl FnOnce() -> Result<OdpUmem>) -> Result<Held> {
        if let Some(c) = self.hold(slot) {
            return Ok(c);
        }
        let new = Arc::new(make()?, GFP_KERNEL)?;
        let mut occupied = self.occupied.lock();
        if let Some(winner) = self.hold(slot) {
            drop(occupied);
            // `new` is released here, outside the locks (the release may sleep).
            return Ok(winner);
        }
        occupied.reserve(1, GFP_KERNEL)?;
        // Held before the reaper can see it: a new child is idle until its first fault.
        let held = Held::new(new.clone());
        self.slots.lock().store(slot, new, GFP_KERNEL)?;
        occupied.push_within_capacity(slot).map_err(|_| ENOMEM)?;
        Ok(held)
    }

    /// Removes the children without mapped pages that no access holds, or all of them with
    /// `all`. A child an access is using stays alive (on the access's reference) until the
    /// access ends.
    fn reap(&self, all: bool) {
        let mut occupied = self.occupied.lock();
        occupied.retain(|slot| {
            let child = if all {
                self.slots.lock().remove(*slot)
            } else {
                let found = {
                    let slots = self.slots.lock();
                    slots.get(*slot).map(|c| {
                        let (users, holds) = (c.users.load(Acquire), c.holds.load(Relaxed));
                        (Arc::from(c), users, holds)
                    })
                };
                let Some((c, users, holds)) = found else {
                    return false;
                };
                // Held now: it may be faulting (and a new child has no page until then).
                if users != 0 {
                    return c.keep_for_hold();
                }
                // `idle` takes the umem's mutex: not under the XArray's spinlock. A hold that
                // ended before `users` was read mapped its pages before, and `idle` sees them.
                if !c.idle() {
                    return true;
                }
                let mut slots = self.slots.lock();
                // A hold begun since: it may have mapped pages after `idle` looked.
                if c.users.load(Acquire) != 0 || c.holds.load(Relaxed) != holds {
                    drop(slots);
                    return c.keep_for_hold();
                }
                slots.remove(*slot)
            };
            // Released outside the XArray's lock; the occupied lock may sleep.
            drop(child);
            false
        });
    }

    /// Number of children.
    fn len(&self) -> usize {
        self.occupied.lock().len()
    }
}

/// A child held by an access, which may fault pages into it: the reaper does not remove it
/// meanwhile. (A child is idle from when it is made until its first fault has mapped a page;
/// a reaper that removed it then would leave that fault's pages in a child nobody finds, and
/// the next access would make and fault another.)
pub(crate) struct Held(Arc<OdpUmem>);

impl Held {
    /// Counts the hold; under the XArray's lock, or before the child is stored there.
    fn new(c: Arc<OdpUmem>) -> Self {
        c.users.fetch_add(1, Relaxed);
        c.holds.fetch_add(1, Relaxed);
        Held(c)
    }
}

impl Deref for Held {
    type Target = OdpUmem;

    fn deref(&self) -> &OdpUmem {
        &self.0
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Its pages were mapped before: a reaper that reads 0 sees them. The last hold of a
        // child the reaper passed over queues it again (the child may be idle now).
        if self.0.users.fetch_sub(1, Full) == 1 && self.0.reap_wanted.xchg(false, Full) {
            if let Some(p) = self.0.parent() {
                p.schedule_reap();
            }
        }
    }
}

impl OdpUmem {
    /// The reaper keeps this child for a hold; the end of the last hold queues it again.
    /// Returns `true` (kept).
    fn keep_for_hold(&self) -> bool {
        self.reap_wanted.xchg(true, Full);
        // The hold ended before the flag was seen: queue the reaper now (it runs again after
        // this run, which is under way).
        if self.users.load(Acquire) == 0 && self.reap_wanted.xchg(false, Full) {
            if let Some(p) = self.parent() {
                p.schedule_reap();
            }
        }
        true
    }
}

/// The parent of an implicit MR: all of the process's address space.
///
/// The root is released after every child this object holds (a child an access or the reaper
/// still uses holds its own references to the mm and the device).
pub(crate) struct ImplicitOdp {
    root: ImplicitUmemOdp,
    pub(super) children: Arc<Children>,
    counters: CounterSets,
    writable: bool,
}

impl ImplicitOdp {
    /// An implicit ODP registration for the calling process.
    pub(super) fn new<T: Driver>(
        dev: &Device<T>,
        access: u32,
        counters: CounterSets,
    ) -> Result<Self> {
        let children = Children::new()?;
        Ok(Self {
            root: ImplicitUmemOdp::alloc(dev, access)?,
            children,
            counters,
            writable: super::writable(access),
        })
    }

    /// First address past the process's user address space.
    pub(super) fn va_end(&self) -> u64 {
        self.root.va_end()
    }

    /// The child covering `slot`, made on first use, held.
    pub(super) fn child(&self, slot: usize) -> Result<Held> {
        self.children.get_or_make(slot, || {
            OdpUmem::child(
                &self.root,
                (slot << CHILD_SHIFT) as u64,
                CHILD_SIZE,
                self.writable,
                self.counters.clone(),
                self.children.clone(),
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
        // Before the root goes (a field, dropped after this).
        self.children.reap(true);
    }
}

/// Splits `[off, off + len)` at 1 GiB boundaries: `f(slot, offset in slot, position, length)`.
pub(super) fn pieces(
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
