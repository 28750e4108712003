// SPDX-License-Identifier: GPL-2.0

//! The rings shared with user space (rxe's `rxe_queue.c`): `struct rxe_queue_buf` in a
//! buffer the context mmaps.
//!
//! Indices wrap at `index_mask`. The side that owns an index keeps its own copy and only
//! publishes it; the other side's index is read from the buffer, masked, and never trusted
//! beyond that (user space can write anything there).

use crate::{
    device::UContext,
    ib::{abi, mmap::Handle},
};
use kernel::prelude::*;

/// A ring of `2^n` slots of `2^m` bytes each; one slot is always free.
pub(crate) struct Queue {
    buf: Handle,
    log2_elem: u32,
    mask: u32,
}

impl Queue {
    /// A ring with room for at least `num_elem` elements of `elem_size` bytes.
    /// `ctx` is the user context that maps it; a ring of a kernel consumer's object has none.
    pub(crate) fn new(ctx: Option<&UContext>, num_elem: u32, elem_size: usize) -> Result<Self> {
        let slots = num_elem
            .checked_add(1)
            .and_then(u32::checked_next_power_of_two)
            .ok_or(EINVAL)?;
        let elem = elem_size.checked_next_power_of_two().ok_or(EINVAL)?;
        let size = (slots as usize)
            .checked_mul(elem)
            .and_then(|d| d.checked_add(abi::QUEUE_HEADER))
            .ok_or(EINVAL)?;
        let buf = match ctx {
            Some(ctx) => Handle::new(ctx, size)?,
            None => Handle::kernel(size)?,
        };
        let q = Self {
            buf,
            log2_elem: elem.trailing_zeros(),
            mask: slots - 1,
        };
        q.buf.store_release(abi::QUEUE_LOG2_ELEM, q.log2_elem)?;
        q.buf.store_release(abi::QUEUE_INDEX_MASK, q.mask)?;
        Ok(q)
    }

    /// Number of usable slots.
    pub(crate) fn capacity(&self) -> u32 {
        self.mask
    }

    /// Size of one slot in bytes.
    pub(crate) fn elem_size(&self) -> usize {
        1 << self.log2_elem
    }

    /// Where user space maps the ring.
    pub(crate) fn mm_info(&self) -> abi::MmInfo {
        abi::MmInfo {
            offset: self.buf.offset(),
            size: self.buf.size() as u32,
        }
    }

    /// The producer index as published.
    pub(crate) fn producer(&self) -> u32 {
        self.buf.load_acquire(abi::QUEUE_PRODUCER).unwrap_or(0) & self.mask
    }

    /// The consumer index as published.
    pub(crate) fn consumer(&self) -> u32 {
        self.buf.load_acquire(abi::QUEUE_CONSUMER).unwrap_or(0) & self.mask
    }

    /// Publishes the producer index.
    pub(crate) fn set_producer(&self, v: u32) {
        let _ = self.buf.store_release(abi::QUEUE_PRODUCER, v & self.mask);
    }

    /// Publishes the consumer index.
    pub(crate) fn set_consumer(&self, v: u32) {
        let _ = self.buf.store_release(abi::QUEUE_CONSUMER, v & self.mask);
    }

    /// The index after `i`.
    pub(crate) fn next(&self, i: u32) -> u32 {
        i.wrapping_add(1) & self.mask
    }

    /// Elements between `cons` and `prod`.
    pub(crate) fn count(&self, prod: u32, cons: u32) -> u32 {
        prod.wrapping_sub(cons) & self.mask
    }

    fn slot(&self, i: u32) -> usize {
        abi::QUEUE_HEADER + (((i & self.mask) as usize) << self.log2_elem)
    }

    /// Copies slot `i` (at most one slot) into `out`.
    pub(crate) fn read(&self, i: u32, out: &mut [u8]) -> Result {
        if out.len() > self.elem_size() {
            return Err(EINVAL);
        }
        self.buf.read(self.slot(i), out)
    }

    /// Copies `data` (at most one slot) into slot `i`.
    pub(crate) fn write(&self, i: u32, data: &[u8]) -> Result {
        if data.len() > self.elem_size() {
            return Err(EINVAL);
        }
        self.buf.write(self.slot(i), data)
    }

    /// Moves the elements from `cons` to `prod` of `old` to the start of `self`, `tmp.len()`
    /// bytes of each (at most a slot of either ring); returns how many (a resize keeps what was
    /// queued).
    pub(crate) fn take_from(
        &self,
        old: &Queue,
        mut cons: u32,
        prod: u32,
        tmp: &mut [u8],
    ) -> Result<u32> {
        let n = old.count(prod, cons);
        if n > self.capacity() {
            return Err(EINVAL);
        }
        for i in 0..n {
            old.read(cons, tmp)?;
            self.write(i, tmp)?;
            cons = old.next(cons);
        }
        Ok(n)
    }
}
