// SPDX-License-Identifier: GPL-2.0

//! Counted resources with a maximum (rxe's pool `max_elem` limits).

use kernel::{
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
};

/// A resource count shared by a device and the objects it hands out.
struct Counter {
    max: u32,
    used: Atomic<u32>,
}

/// A limit on how many objects of one kind exist at once.
#[derive(Clone)]
pub(crate) struct Limit(Arc<Counter>);

/// One unit of a [`Limit`], returned on drop.
pub(crate) struct Token(Arc<Counter>);

impl Limit {
    /// A limit of `max` objects.
    pub(crate) fn new(max: u32) -> Result<Self> {
        Ok(Self(Arc::new(
            Counter {
                max,
                used: Atomic::new(0),
            },
            GFP_KERNEL,
        )?))
    }

    /// Takes one unit, or fails with `ENOMEM` when all `max` are in use (as ib_core expects
    /// when an object cannot be allocated).
    pub(crate) fn take(&self) -> Result<Token> {
        let c = &self.0;
        let mut cur = c.used.load(Relaxed);
        loop {
            if cur >= c.max {
                return Err(ENOMEM);
            }
            match c.used.cmpxchg(cur, cur + 1, Relaxed) {
                Ok(_) => return Ok(Token(self.0.clone())),
                Err(now) => cur = now,
            }
        }
    }

    /// The most units in use at once.
    pub(crate) fn max(&self) -> u32 {
        self.0.max
    }

    /// Units in use.
    pub(crate) fn used(&self) -> u32 {
        self.0.used.load(Relaxed)
    }
}

impl Drop for Token {
    fn drop(&mut self) {
        self.0.used.fetch_sub(1, Relaxed);
    }
}

#[kunit_tests(rodp_limit)]
mod tests {
    use super::*;

    #[test]
    fn takes_up_to_max_then_fails() -> Result {
        let limit = Limit::new(3)?;
        let a = limit.take()?;
        let _b = limit.take()?;
        let _c = limit.take()?;
        assert_eq!(limit.used(), 3);
        assert!(matches!(limit.take(), Err(e) if e == ENOMEM));
        drop(a);
        assert_eq!(limit.used(), 2);
        let _d = limit.take()?;
        assert_eq!(limit.used(), 3);
        Ok(())
    }

    #[test]
    fn zero_limit_refuses_everything() -> Result {
        let limit = Limit::new(0)?;
        assert!(limit.take().is_err());
        assert_eq!(limit.used(), 0);
        Ok(())
    }

    #[test]
    fn clones_share_the_count() -> Result {
        let limit = Limit::new(2)?;
        let other = limit.clone();
        let _a = limit.take()?;
        let _b = other.take()?;
        assert!(limit.take().is_err());
        assert_eq!(other.used(), 2);
        Ok(())
    }
}
