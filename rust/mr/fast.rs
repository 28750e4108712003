// SPDX-License-Identifier: GPL-2.0

//! Fast registration (rxe's `rxe_alloc_mr`, `rxe_map_mr_sg`, `rxe_reg_fast_mr` and
//! `rxe_invalidate_mr`; IBA 10.6.3.6 and 11.4.1.2): the memory registration kernel consumers
//! (NFS over RDMA, NVMe over Fabrics) make through the send queue.
//!
//! `ib_alloc_mr` makes an MR of a kernel PD with room for a page list ([`Stage`]) and no
//! registration that reaches anything: its gate is shut, so every access through its key fails
//! as through a stale key. `ib_map_mr_sg` fills the page list with blocks of kernel memory
//! (`ib_sg_to_pages`: DMA addresses, which are kernel virtual addresses under ib_core's virtual
//! DMA, see `kmem`). An `IB_WR_REG_MR` work request, executed in order on the send queue,
//! registers a copy of the page list ([`Blocks`]) under the key the request names (the MR's
//! index with a key byte of the consumer's choosing, `ib_update_fast_reg_key`), with its rights,
//! iova and length: a new registration in the key's table slot, as a re-registration is. An
//! invalidation, local (`IB_WR_LOCAL_INV`) or by a SEND with invalidate arriving for it, closes
//! the registration's gate and waits for the accesses inside, as deregistration does: the
//! consumer frees the memory once it sees the invalidation's completion, and no copy may
//! reach it then (both run in process context: the send queue's worker, the responder's inbox
//! work or a local requester). Invalidating an invalid registration succeeds, as in rxe. A
//! registration is allowed only while the current one is closed (an MR is registered,
//! invalidated, registered again); it waits for that one's accesses too.

use super::{Memory, MrShared, NEXT_SERIAL};
use crate::{
    gate::Gate,
    ib::{kmem, umem::AtomicOp, verbs::access},
    keys::{self, Tables},
};
use kernel::{
    new_spinlock_irq,
    prelude::*,
    sync::{atomic::Relaxed, Arc, SpinLockIrq},
};

/// Largest page list of one MR (rxe's `RXE_MAX_FMR_PAGE_LIST_LEN`).
pub(crate) const MAX_PAGES: u32 = 512;

/// Smallest and largest block of a page list (`page_size` of `ib_map_mr_sg`).
const MIN_BLOCK_SHIFT: u32 = 9;
const MAX_BLOCK_SHIFT: u32 = 31;

/// The rights a fast registration may grant: local and remote access, no windows, no paging.
const RIGHTS: u32 =
    access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

/// The page list of an MR of `ib_alloc_mr`, as `ib_map_mr_sg` left it (in the MR's anchor,
/// shared by its registrations). Filled in any context a consumer maps in; read when a
/// registration executes.
#[pin_data]
pub(crate) struct Stage {
    #[pin]
    list: SpinLockIrq<List>,
}

struct List {
    /// Block addresses (capacity: the MR's `max_num_sg`, allocated once).
    blocks: KVec<u64>,
    /// log2 of the block size.
    shift: u32,
}

impl Stage {
    /// An empty page list with room for `max` blocks.
    pub(super) fn new(max: u32) -> Result<Arc<Self>> {
        if max == 0 || max > MAX_PAGES {
            return Err(EINVAL);
        }
        let blocks = KVec::with_capacity(max as usize, GFP_KERNEL)?;
        Arc::pin_init(
            pin_init!(Self {
                list <- new_spinlock_irq!(List {
                    blocks,
                    shift: MIN_BLOCK_SHIFT,
                }),
            }),
            GFP_KERNEL,
        )
    }

    /// Starts the list afresh with blocks of `size` bytes (a power of two, 512 bytes to 2 GiB).
    pub(super) fn start(&self, size: u32) -> Result {
        if !size.is_power_of_two()
            || !(MIN_BLOCK_SHIFT..=MAX_BLOCK_SHIFT).contains(&size.trailing_zeros())
        {
            return Err(EINVAL);
        }
        let mut l = self.list.lock();
        l.blocks.clear();
        l.shift = size.trailing_zeros();
        Ok(())
    }

    /// Adds the block at `addr` (aligned to the block size); `ENOMEM` when the list is full.
    pub(super) fn push(&self, addr: u64) -> Result {
        let mut l = self.list.lock();
        if addr & ((1u64 << l.shift) - 1) != 0 {
            return Err(EINVAL);
        }
        if l.blocks.len() == l.blocks.capacity() {
            return Err(ENOMEM);
        }
        // Within the capacity reserved: allocates nothing.
        Ok(l.blocks.push(addr, GFP_ATOMIC)?)
    }

    /// A copy of the list for a registration of `length` bytes at `iova` (whose offset in its
    /// block is the first byte's in the first block, as `ib_sg_to_pages` sets it); `EINVAL`
    /// when the blocks do not hold that much.
    fn snapshot(&self, iova: u64, length: u64) -> Result<Blocks> {
        let mut copy = KVec::with_capacity(MAX_PAGES as usize, GFP_KERNEL)?;
        let l = self.list.lock();
        let first = iova & ((1u64 << l.shift) - 1);
        let room = (l.blocks.len() as u64) << l.shift;
        if first.checked_add(length).is_none_or(|end| end > room) {
            return Err(EINVAL);
        }
        // Within the capacity reserved (`MAX_PAGES` at least): allocates nothing.
        copy.extend_from_slice(&l.blocks, GFP_ATOMIC)?;
        Ok(Blocks {
            blocks: copy,
            shift: l.shift,
            first,
        })
    }
}

/// The memory of a fast registration: blocks of kernel memory, the first byte of the
/// registration `first` bytes into the first block.
pub(crate) struct Blocks {
    blocks: KVec<u64>,
    shift: u32,
    first: u64,
}

impl Blocks {
    /// No memory: an MR before its first registration.
    pub(super) fn none() -> Self {
        Self {
            blocks: KVec::new(),
            shift: MIN_BLOCK_SHIFT,
            first: 0,
        }
    }

    /// Calls `f` with the kernel address, the position in `[0, len)` and the length of each
    /// piece of `[off, off + len)` that lies in one block.
    fn each(
        &self,
        off: usize,
        len: usize,
        mut f: impl FnMut(u64, usize, usize) -> Result,
    ) -> Result {
        let size = 1u64 << self.shift;
        let mut pos = 0;
        while pos < len {
            let at = self.first.checked_add((off + pos) as u64).ok_or(EFAULT)?;
            let block = *self.blocks.get((at >> self.shift) as usize).ok_or(EFAULT)?;
            let inside = at & (size - 1);
            let n = (len - pos).min((size - inside) as usize);
            f(block.checked_add(inside).ok_or(EFAULT)?, pos, n)?;
            pos += n;
        }
        Ok(())
    }

    /// Copies `out.len()` bytes at offset `off` into `out`.
    pub(super) fn read(&self, off: usize, out: &mut [u8]) -> Result {
        self.each(off, out.len(), |a, pos, n| {
            kmem::read(a, &mut out[pos..pos + n])
        })
    }

    /// Copies `data` to offset `off`.
    pub(super) fn write(&self, off: usize, data: &[u8]) -> Result {
        self.each(off, data.len(), |a, pos, n| {
            kmem::write(a, &data[pos..pos + n])
        })
    }

    /// Performs `op` on the aligned 64-bit word at offset `off`.
    pub(super) fn atomic(&self, off: usize, op: AtomicOp) -> Result<u64> {
        let mut old = Err(EINVAL);
        self.each(off, 8, |a, _, n| {
            // A word split between blocks is not one word of memory.
            if n == 8 {
                old = kmem::atomic(a, op);
            }
            Ok(())
        })?;
        old
    }
}

/// Executes a fast registration posted on a QP of PD `pd` (`IB_WR_REG_MR`, with rxe's checks
/// and IBA's rule that remote write or atomic rights need local write): the MR of `key`'s
/// index, an MR of `ib_alloc_mr` in the same PD whose current registration is closed
/// (invalidated, or never registered), gets a new one under `key` with rights `acc`,
/// reaching `length` bytes at `iova` through its page list. `Err` completes the work request
/// with `IB_WC_LOC_QP_OP_ERR`.
pub(crate) fn register(
    tables: &Tables,
    pd: u64,
    key: u32,
    iova: u64,
    length: u64,
    acc: u32,
) -> Result {
    let acc = acc & !access::OPTIONAL;
    if keys::is_window(key)
        || acc & !RIGHTS != 0
        || (acc & (access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0
            && acc & access::LOCAL_WRITE == 0)
        || iova.checked_add(length).is_none()
    {
        return Err(EINVAL);
    }
    let index = keys::index(key);
    let cur = tables.mrs.get(index).ok_or(EINVAL)?;
    let stage = cur.anchor.stage.as_ref().ok_or(EINVAL)?;
    if cur.pd != pd || !cur.gate.is_closed() {
        return Err(EINVAL);
    }
    // Closed, perhaps with accesses still inside: they finish with the old page list first.
    cur.gate.close();
    let mem = Arc::new(Memory::Fast(stage.snapshot(iova, length)?), GFP_KERNEL)?;
    let anchor = cur.anchor.clone();
    let new = Arc::pin_init(
        pin_init!(MrShared {
            key,
            serial: NEXT_SERIAL.fetch_add(1, Relaxed),
            pd,
            access: acc,
            iova,
            length,
            start: 0,
            mem,
            mem_access: acc,
            anchor,
            gate <- Gate::new(),
        }),
        GFP_KERNEL,
    )?;
    // `EAGAIN` when another registration or the MR's deregistration came first.
    tables.mrs.replace(index, &cur, new)
}

/// Invalidates the fast registration `mr`, named by `key`, for a QP of PD `pd`, and waits until
/// the accesses inside have left. `Err` for keys of other MRs, other PDs' MRs and stale keys.
pub(crate) fn invalidate(mr: &Arc<MrShared>, pd: u64, key: u32) -> Result {
    if mr.key != key || mr.pd != pd || mr.anchor.stage.is_none() {
        return Err(EINVAL);
    }
    if !mr.gate.close() {
        pr_info!(
            "rodp: invalidating key {:#x}: accesses still inside after {} ms\n",
            key,
            crate::gate::CLOSE_WAIT_MS
        );
    }
    Ok(())
}

#[kunit_tests(rodp_fast)]
mod tests {
    use super::*;

    /// Three 512-byte kmalloc blocks (naturally aligned: a power-of-two kmalloc size).
    fn blocks() -> Result<KVec<KVec<u8>>> {
        let mut v = KVec::new();
        for _ in 0..3 {
            v.push(KVec::from_elem(0u8, 512, GFP_KERNEL)?, GFP_KERNEL)?;
        }
        Ok(v)
    }

    #[test]
    fn bytes_land_where_the_page_list_puts_them() -> Result {
        let bufs = blocks()?;
        let stage = Stage::new(4)?;
        stage.start(512)?;
        for b in bufs.iter() {
            stage.push(b.as_ptr() as u64)?;
        }
        // The registration starts 100 bytes into the first block.
        let iova = 0x1000_0000_0000_0064;
        let b = stage.snapshot(iova, 3 * 512 - 100)?;
        let mut d = KVec::with_capacity(1000, GFP_KERNEL)?;
        for i in 0..1000u32 {
            d.push(i as u8, GFP_KERNEL)?;
        }
        b.write(50, &d)?;
        // Offset 50 is byte 150 of block 0; 362 bytes there, 512 in block 1, 126 in block 2.
        assert_eq!(bufs[0][149], 0);
        assert_eq!(bufs[0][150], 0);
        assert_eq!(bufs[0][151], 1);
        assert_eq!(bufs[0][511], 361u32 as u8);
        assert_eq!(bufs[1][0], 362u32 as u8);
        assert_eq!(bufs[2][0], 874u32 as u8);
        assert_eq!(bufs[2][125], 999u32 as u8);
        assert_eq!(bufs[2][126], 0);
        let mut out = [0u8; 4];
        b.read(410, &mut out)?;
        assert_eq!(
            out,
            [360u32 as u8, 361u32 as u8, 362u32 as u8, 363u32 as u8]
        );
        // Past the last block: nothing is touched.
        assert_eq!(b.write(3 * 512 - 100, &[1]), Err(EFAULT));
        Ok(())
    }

    #[test]
    fn a_registration_fits_its_page_list() -> Result {
        let bufs = blocks()?;
        let stage = Stage::new(2)?;
        stage.start(512)?;
        stage.push(bufs[0].as_ptr() as u64)?;
        stage.push(bufs[1].as_ptr() as u64)?;
        // Full.
        assert_eq!(stage.push(bufs[2].as_ptr() as u64), Err(ENOMEM));
        // Not aligned to the block size.
        stage.start(512)?;
        assert_eq!(stage.push(bufs[0].as_ptr() as u64 + 8), Err(EINVAL));
        stage.push(bufs[0].as_ptr() as u64)?;
        stage.push(bufs[1].as_ptr() as u64)?;
        assert!(stage.snapshot(8, 1024 - 8).is_ok());
        assert_eq!(stage.snapshot(8, 1024 - 7).err(), Some(EINVAL));
        assert_eq!(stage.snapshot(0, u64::MAX).err(), Some(EINVAL));
        // Block sizes: powers of two from 512 bytes.
        assert_eq!(stage.start(256), Err(EINVAL));
        assert_eq!(stage.start(3 << 12), Err(EINVAL));
        assert_eq!(Stage::new(MAX_PAGES + 1).err(), Some(EINVAL));
        Ok(())
    }

    #[test]
    fn atomics_take_whole_words_of_one_block() -> Result {
        let bufs = blocks()?;
        let stage = Stage::new(2)?;
        stage.start(512)?;
        stage.push(bufs[0].as_ptr() as u64)?;
        stage.push(bufs[1].as_ptr() as u64)?;
        let b = stage.snapshot(0, 1024)?;
        assert_eq!(b.atomic(512, AtomicOp::FetchAdd(5))?, 0);
        assert_eq!(b.atomic(512, AtomicOp::CmpSwap(5, 9))?, 5);
        let mut w = [0u8; 8];
        b.read(512, &mut w)?;
        assert_eq!(u64::from_ne_bytes(w), 9);
        // Unaligned.
        assert_eq!(b.atomic(4, AtomicOp::FetchAdd(1)), Err(EINVAL));
        Ok(())
    }
}
