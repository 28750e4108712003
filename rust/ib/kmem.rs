// SPDX-License-Identifier: GPL-2.0

//! Kernel memory named by kernel verbs consumers.
//!
//! rodp registers with ib_core's virtual DMA (no `dma_device`), so the "DMA address" a kernel
//! consumer puts in a work request (`ib_dma_map_single`, `ib_dma_map_sg`) is the kernel virtual
//! address of its buffer, reached through the PD's DMA MR (`get_dma_mr`). A consumer may only
//! post memory it owns until the work request completes, as it would for a DMA engine; rodp
//! additionally refuses anything outside the kernel's linear map, so a wrong address ends in an
//! error completion instead of a fault.

use crate::ib::{
    bindings,
    umem::{atomic_at, AtomicOp},
};
use kernel::prelude::*;

/// Checks that `[addr, addr + len)` lies in the linear map (kmalloc and page allocator
/// memory), page by page.
fn check(addr: u64, len: usize) -> Result<*mut u8> {
    let end = addr.checked_add(len as u64).ok_or(EFAULT)?;
    if len == 0 {
        return Ok(addr as usize as *mut u8);
    }
    let page = kernel::page::PAGE_SIZE as u64;
    let mut p = addr & !(page - 1);
    while p < end {
        let probe = p.max(addr);
        // SAFETY: `virt_addr_valid` only computes on the address; it does not dereference it.
        if !unsafe { bindings::virt_addr_valid((probe as usize as *const u8).cast()) } {
            return Err(EFAULT);
        }
        p += page;
    }
    Ok(addr as usize as *mut u8)
}

/// Whether `[addr, addr + len)` is kernel memory rodp would access.
pub(crate) fn valid(addr: u64, len: usize) -> bool {
    check(addr, len).is_ok()
}

/// Copies `out.len()` bytes from kernel address `addr` into `out`.
pub(crate) fn read(addr: u64, out: &mut [u8]) -> Result {
    let src = check(addr, out.len())?;
    // SAFETY: The range is in the linear map (checked), so it is mapped; the kernel consumer
    // that posted it owns it until the work request completes (module doc). Raw copies do not
    // assume exclusive access.
    unsafe { core::ptr::copy(src, out.as_mut_ptr(), out.len()) };
    Ok(())
}

/// Copies `data` to kernel address `addr`.
pub(crate) fn write(addr: u64, data: &[u8]) -> Result {
    let dst = check(addr, data.len())?;
    // SAFETY: As in `read`; the consumer handed this memory to the device for writing.
    unsafe { core::ptr::copy(data.as_ptr(), dst, data.len()) };
    Ok(())
}

/// Performs `op` on the 64-bit word at kernel address `addr` (8-byte aligned); returns its old
/// value.
pub(crate) fn atomic(addr: u64, op: AtomicOp) -> Result<u64> {
    if addr % 8 != 0 {
        return Err(EINVAL);
    }
    let p = check(addr, 8)?.cast::<u64>();
    // SAFETY: The word is mapped and aligned (checked); the consumer handed it to the device
    // for atomic access.
    Ok(unsafe { atomic_at(p, op) })
}

#[kunit_tests(rodp_kmem)]
mod tests {
    use super::*;
    use kernel::alloc::{KVVec, VVec};

    #[test]
    fn kmalloc_memory_is_reachable() -> Result {
        let v = KVec::from_elem(0u8, 300, GFP_KERNEL)?;
        let addr = v.as_ptr() as u64;
        write(addr + 10, &[1, 2, 3])?;
        let mut out = [0u8; 4];
        read(addr + 9, &mut out)?;
        assert_eq!(out, [0, 1, 2, 3]);
        assert!(valid(addr, v.len()));
        Ok(())
    }

    #[test]
    fn other_addresses_are_refused() -> Result {
        let v = VVec::from_elem(0u8, 3 * kernel::page::PAGE_SIZE, GFP_KERNEL)?;
        assert!(!valid(v.as_ptr() as u64, v.len()));
        assert!(!valid(0, 8));
        assert!(!valid(u64::MAX - 2, 8));
        assert_eq!(read(16, &mut [0u8; 8]), Err(EFAULT));
        // Small `KVVec`s come from kmalloc: reachable.
        let k = KVVec::from_elem(0u8, 64, GFP_KERNEL)?;
        assert!(valid(k.as_ptr() as u64, 64));
        Ok(())
    }
}
