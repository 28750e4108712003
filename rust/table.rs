// SPDX-License-Identifier: GPL-2.0

//! Number-indexed tables of shared objects (rxe's `rxe_pool.c` indices): QPs by number, MRs by
//! key index, AHs by number.

use crate::ib::{random, xarray::IdArray};
use kernel::{
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
};

/// A table handing out numbers in `[min, max]`: cyclically, so a freed number is reused as late
/// as possible (stale handles fail instead of reaching a new object), or from a random point
/// on, so that nobody can tell the next number from the last (see [`Table::new_random`]).
#[pin_data]
pub(crate) struct Table<T: Send + Sync + 'static> {
    #[pin]
    xa: IdArray<Arc<T>>,
    /// The number to try first.
    #[pin]
    cursor: Mutex<u32>,
    min: u32,
    max: u32,
    /// Each insert starts its search at a random number.
    random: bool,
}

impl<T: Send + Sync + 'static> Table<T> {
    /// An empty table for numbers `min..=max` (`min > 0`), handed out in turn.
    pub(crate) fn new(min: u32, max: u32) -> impl PinInit<Self> {
        pin_init!(Self {
            xa <- IdArray::new(),
            cursor <- new_mutex!(min),
            min,
            max,
            random: false,
        })
    }

    /// An empty table for numbers `min..=max` (`min > 0`) whose inserts take the first free
    /// number from a random point on (wrapping to `min`): numbers handed out before and after
    /// someone else's do not tell it. A freed number comes back only when a search hits it, as
    /// unlikely as any other in a large range.
    ///
    /// The cost is the XArray's: scattered numbers share few nodes, up to one 576-byte node per
    /// object (a few per object while the table is nearly empty), against one per 64 objects
    /// handed out in turn.
    pub(crate) fn new_random(min: u32, max: u32) -> impl PinInit<Self> {
        pin_init!(Self {
            xa <- IdArray::new(),
            cursor <- new_mutex!(min),
            min,
            max,
            random: true,
        })
    }

    /// Picks a free number, builds the object for it with `make` and stores it; `ENOMEM` if
    /// every number is taken.
    ///
    /// The XArray finds the first free number from the cursor (or, for a random table, a random
    /// number) on, wrapping to `min` once, however far away, and reserves it while `make` runs.
    /// Inserts are serialised by the cursor lock.
    pub(crate) fn insert(&self, make: impl FnOnce(u32) -> Result<Arc<T>>) -> Result<Arc<T>> {
        let mut cursor = self.cursor.lock();
        if self.random {
            *cursor = self.min + random::below(self.max - self.min + 1);
        }
        let id = self
            .xa
            .lock()
            .reserve_cyclic(self.min, self.max, &mut cursor)
            .map_err(|e| if e == EBUSY { ENOMEM } else { e })?;
        let stored = self.store(id, make);
        if stored.is_err() {
            // Gives the reserved number back.
            self.xa.lock().remove(id);
        }
        stored
    }

    /// Builds the object for the fixed number `id` (outside `[min, max]`, such as QP1) with
    /// `make` and stores it; `EBUSY` if the number is taken.
    pub(crate) fn insert_at(
        &self,
        id: u32,
        make: impl FnOnce(u32) -> Result<Arc<T>>,
    ) -> Result<Arc<T>> {
        let _cursor = self.cursor.lock();
        if self.xa.lock().get(id).is_some() {
            return Err(EBUSY);
        }
        self.store(id, make)
    }

    /// Builds and stores the object for the free or reserved number `id`; the caller holds the
    /// cursor.
    fn store(&self, id: u32, make: impl FnOnce(u32) -> Result<Arc<T>>) -> Result<Arc<T>> {
        let obj = make(id)?;
        self.xa.lock().store(id, obj.clone()).map_err(|e| e.error)?;
        Ok(obj)
    }

    /// The object numbered `id`.
    pub(crate) fn get(&self, id: u32) -> Option<Arc<T>> {
        self.xa.lock().get(id).map(Arc::from)
    }

    /// Removes the object numbered `id`.
    pub(crate) fn remove(&self, id: u32) -> Option<Arc<T>> {
        self.xa.lock().remove(id)
    }

    /// Removes the object numbered `id` if it is `cur`; returns whether it was.
    pub(crate) fn remove_if(&self, id: u32, cur: &Arc<T>) -> bool {
        let mut xa = self.xa.lock();
        let same = xa.get(id).is_some_and(|o| core::ptr::eq(&*o, &**cur));
        // Dropped after the lock: the last reference may free memory that sleeps to release.
        let old = if same { xa.remove(id) } else { None };
        drop(xa);
        drop(old);
        same
    }

    /// Whether the object numbered `id` is `cur`.
    pub(crate) fn holds(&self, id: u32, cur: &Arc<T>) -> bool {
        self.xa
            .lock()
            .get(id)
            .is_some_and(|o| core::ptr::eq(&*o, &**cur))
    }

    /// Puts `new` in place of `cur` as the object numbered `id`; `EAGAIN` (and no change) if
    /// `cur` is not the object numbered `id` any more.
    pub(crate) fn replace(&self, id: u32, cur: &Arc<T>, new: Arc<T>) -> Result {
        let mut xa = self.xa.lock();
        let same = xa.get(id).is_some_and(|o| core::ptr::eq(&*o, &**cur));
        if !same {
            return Err(EAGAIN);
        }
        // The slot is occupied: storing over it allocates nothing.
        let old = xa.store(id, new).map_err(|e| e.error)?;
        drop(xa);
        drop(old);
        Ok(())
    }
}

#[kunit_tests(rodp_table)]
mod tests {
    use super::*;

    fn table(min: u32, max: u32) -> Result<Pin<KBox<Table<u32>>>> {
        KBox::pin_init(Table::new(min, max), GFP_KERNEL)
    }

    fn insert(t: &Table<u32>) -> Result<u32> {
        Ok(*t.insert(|id| Ok(Arc::new(id, GFP_KERNEL)?))?)
    }

    #[test]
    fn numbers_are_handed_out_in_turn_and_found() -> Result {
        let t = table(5, 100)?;
        assert_eq!(insert(&t)?, 5);
        assert_eq!(insert(&t)?, 6);
        assert_eq!(t.get(6).map(|v| *v), Some(6));
        assert!(t.get(7).is_none());
        Ok(())
    }

    #[test]
    fn a_freed_number_is_reused_last() -> Result {
        let t = table(1, 3)?;
        assert_eq!(insert(&t)?, 1);
        assert_eq!(insert(&t)?, 2);
        assert!(t.remove(1).is_some());
        assert!(t.get(1).is_none());
        // 3 is still fresh; only then does the cursor wrap to the freed 1.
        assert_eq!(insert(&t)?, 3);
        assert_eq!(insert(&t)?, 1);
        Ok(())
    }

    #[test]
    fn a_full_table_refuses() -> Result {
        let t = table(1, 2)?;
        insert(&t)?;
        insert(&t)?;
        assert_eq!(insert(&t), Err(ENOMEM));
        Ok(())
    }

    #[test]
    fn a_free_number_far_from_the_cursor_is_found() -> Result {
        // More numbers than a bounded probe (once 65,536 slots) would look at.
        const MAX: u32 = 70_000;
        let t = table(1, MAX)?;
        let taken = Arc::new(0u32, GFP_KERNEL)?;
        // Every number but the last, the cursor left at the first.
        for id in 1..MAX {
            t.insert_at(id, |_| Ok(taken.clone()))?;
        }
        assert_eq!(insert(&t)?, MAX);
        assert_eq!(insert(&t), Err(ENOMEM));
        // Past the last number the search starts over from the first.
        assert!(t.remove(2).is_some());
        assert_eq!(insert(&t)?, 2);
        Ok(())
    }

    #[test]
    fn a_fixed_number_is_taken_once() -> Result {
        let t = table(16, 20)?;
        assert_eq!(
            t.insert_at(1, |id| Ok(Arc::new(id, GFP_KERNEL)?))?.as_ref(),
            &1
        );
        assert_eq!(
            t.insert_at(1, |id| Ok(Arc::new(id, GFP_KERNEL)?)).err(),
            Some(EBUSY)
        );
        // The cyclic numbers stay in their range.
        assert_eq!(insert(&t)?, 16);
        t.remove(1);
        assert!(t.insert_at(1, |id| Ok(Arc::new(id, GFP_KERNEL)?)).is_ok());
        Ok(())
    }

    #[test]
    fn replace_and_remove_only_the_object_named() -> Result {
        let t = table(1, 4)?;
        let a = t.insert(|id| Ok(Arc::new(id, GFP_KERNEL)?))?;
        let other = Arc::new(1u32, GFP_KERNEL)?;
        // Equal values, different objects: nothing happens.
        assert_eq!(t.replace(1, &other, Arc::new(7, GFP_KERNEL)?), Err(EAGAIN));
        assert!(!t.remove_if(1, &other));
        assert!(t.holds(1, &a));
        let b = Arc::new(9u32, GFP_KERNEL)?;
        t.replace(1, &a, b.clone())?;
        assert!(!t.holds(1, &a));
        assert_eq!(t.get(1).map(|v| *v), Some(9));
        assert!(!t.remove_if(1, &a));
        assert!(t.remove_if(1, &b));
        assert!(t.get(1).is_none());
        Ok(())
    }

    #[test]
    fn random_numbers_do_not_follow_each_other() -> Result {
        const MAX: u32 = 1 << 23;
        let t: Pin<KBox<Table<u32>>> = KBox::pin_init(Table::new_random(1, MAX), GFP_KERNEL)?;
        let mut prev = insert(&t)?;
        let mut in_turn = 0;
        for _ in 0..31 {
            let id = insert(&t)?;
            assert!((1..=MAX).contains(&id));
            assert_eq!(t.get(id).map(|v| *v), Some(id));
            if id == prev + 1 {
                in_turn += 1;
            }
            prev = id;
        }
        // Handed out in turn, all 31 would be; at random, each is with odds of 1 in 2^23.
        assert!(in_turn < 4);
        Ok(())
    }

    #[test]
    fn a_random_table_fills_up_and_refuses() -> Result {
        let t: Pin<KBox<Table<u32>>> = KBox::pin_init(Table::new_random(5, 8), GFP_KERNEL)?;
        let mut seen = 0u32;
        for _ in 0..4 {
            let id = insert(&t)?;
            assert!((5..=8).contains(&id));
            seen |= 1 << id;
        }
        assert_eq!(seen, 0b1_1110_0000);
        assert_eq!(insert(&t), Err(ENOMEM));
        // A freed number is found from wherever the search starts.
        assert!(t.remove(6).is_some());
        assert_eq!(insert(&t)?, 6);
        Ok(())
    }

    #[test]
    fn a_failed_make_stores_nothing() -> Result {
        let t = table(1, 2)?;
        assert_eq!(t.insert(|_| Err(EINVAL)).err(), Some(EINVAL));
        assert!(t.get(1).is_none());
        assert_eq!(insert(&t)?, 2);
        Ok(())
    }
}
