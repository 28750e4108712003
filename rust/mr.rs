// SPDX-License-Identifier: GPL-2.0

//! Memory regions (rxe's `rxe_mr.c`): pinned user memory, the DMA MR of kernel PDs, keys,
//! access checks, and the copies and atomics the engine performs on their memory.
//!
//! A key is `index << 8 | variant`: the index finds the MR in the device's table; the variant
//! byte changes each time an index is reused, so a stale key does not reach a new MR.

use crate::{
    device::{Device, Pd, Tables},
    ib::{
        kmem,
        odp::{OdpCounters, OdpUmem},
        umem::{AtomicOp, Umem},
        verbs::access,
    },
    limit::Token,
};
use kernel::{
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
};

/// Maximum number of MRs per device (key indices `1..=MAX_MR`).
pub(crate) const MAX_MR: u32 = (1 << 24) - 1;

/// Largest MR in bytes.
pub(crate) const MAX_MR_SIZE: u64 = 1 << 40;

/// Access flags rodp implements.
const SUPPORTED: u32 = access::LOCAL_WRITE
    | access::REMOTE_WRITE
    | access::REMOTE_READ
    | access::REMOTE_ATOMIC
    | access::ON_DEMAND;

/// Bytes copied per step when ODP memory takes part (each step holds the umem's mutex).
const ODP_CHUNK: usize = 1024;

/// Variant bytes for new keys.
static VARIANT: Atomic<u32> = Atomic::new(0);

/// Why an access through a key failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Unknown or stale key, or another PD's MR.
    Key,
    /// The MR lacks the right.
    Access,
    /// Outside the MR.
    Range,
}

/// The memory behind an MR.
enum Memory {
    /// Pinned user pages; offsets count from the MR's start.
    Pinned(Umem),
    /// Kernel memory of a kernel consumer (the DMA MR); offsets are kernel virtual addresses.
    Kernel,
    /// On-demand paging: pages are faulted in when the engine touches them.
    Odp(OdpUmem),
}

/// An MR as the engine sees it.
pub(crate) struct MrShared {
    /// lkey = rkey.
    pub(crate) key: u32,
    pd: u64,
    access: u32,
    iova: u64,
    length: u64,
    mem: Memory,
}

/// The driver data of an MR.
pub(crate) struct Mr {
    key: u32,
    tables: Arc<Tables>,
    _token: Token,
}

impl Mr {
    /// Pins `length` bytes at `start`, reachable at `iova` with `acc` rights.
    pub(crate) fn register(
        dev: &Device,
        pd: &Pd,
        start: u64,
        length: u64,
        iova: u64,
        acc: u32,
    ) -> Result<(Self, u32)> {
        let acc = acc & !access::OPTIONAL;
        if acc & !SUPPORTED != 0 {
            return Err(EOPNOTSUPP);
        }
        if length > MAX_MR_SIZE || iova.checked_add(length).is_none() {
            return Err(EINVAL);
        }
        let token = dev.mrs.take()?;
        let mem = if acc & access::ON_DEMAND != 0 {
            if start == 0 && length == u64::MAX {
                // Implicit ODP is not offered yet (the device does not report it).
                return Err(EOPNOTSUPP);
            }
            // Per-MR counts (for rdma netlink) and the device's totals.
            let umem = OdpUmem::get(
                dev,
                start,
                length,
                acc,
                OdpCounters::new()?,
                dev.tables.odp.clone(),
            )?;
            Memory::Odp(umem)
        } else {
            Memory::Pinned(Umem::get(dev, start, length, acc)?)
        };
        Self::insert(dev, pd, token, acc, iova, length, mem)
    }

    /// The DMA MR of a kernel PD (`ib_alloc_pd`): all kernel memory, for local access only
    /// (rodp offers no global rkey).
    pub(crate) fn dma(dev: &Device, pd: &Pd, acc: u32) -> Result<(Self, u32)> {
        if acc & !access::LOCAL_WRITE != 0 {
            return Err(EOPNOTSUPP);
        }
        let token = dev.mrs.take()?;
        Self::insert(dev, pd, token, acc, 0, u64::MAX, Memory::Kernel)
    }

    fn insert(
        dev: &Device,
        pd: &Pd,
        token: Token,
        acc: u32,
        iova: u64,
        length: u64,
        mem: Memory,
    ) -> Result<(Self, u32)> {
        let pd_id = pd.data().id;
        let variant = VARIANT.fetch_add(1, Relaxed) & 0xff;
        let shared = dev.tables.mrs.insert(|index| {
            Ok(Arc::new(
                MrShared {
                    key: index << 8 | variant,
                    pd: pd_id,
                    access: acc,
                    iova,
                    length,
                    mem,
                },
                GFP_KERNEL,
            )?)
        })?;
        let key = shared.key;
        Ok((
            Self {
                key,
                tables: dev.tables.clone(),
                _token: token,
            },
            key,
        ))
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // Later accesses through the key fail; a transfer already under way finishes on its
        // own reference to the pages.
        self.tables.mrs.remove(self.key >> 8);
    }
}

impl MrShared {
    /// Checks an access of `len` bytes at `addr` with rights `need` from a QP in PD `pd`;
    /// returns the offset into the MR.
    pub(crate) fn check(&self, pd: u64, addr: u64, len: u64, need: u32) -> Result<usize, Fault> {
        if self.pd != pd {
            return Err(Fault::Key);
        }
        if self.access & need != need {
            return Err(Fault::Access);
        }
        let off = addr.checked_sub(self.iova).ok_or(Fault::Range)?;
        match off.checked_add(len) {
            Some(end) if end <= self.length => {}
            _ => return Err(Fault::Range),
        }
        // A kernel consumer's address must be memory rodp may touch (see `kmem`).
        if matches!(self.mem, Memory::Kernel) && !kmem::valid(off, len as usize) {
            return Err(Fault::Range);
        }
        Ok(off as usize)
    }

    /// Copies `data` to offset `off` (as returned by [`MrShared::check`]).
    pub(crate) fn write(&self, off: usize, data: &[u8]) -> Result {
        match &self.mem {
            Memory::Pinned(u) => u.pages().write(off, data),
            Memory::Kernel => kmem::write(off as u64, data),
            Memory::Odp(o) => o.with_pages(off, data.len(), true, |v| v.write(off, data)),
        }
    }

    /// Copies `out.len()` bytes at offset `off` into `out`.
    pub(crate) fn read(&self, off: usize, out: &mut [u8]) -> Result {
        match &self.mem {
            Memory::Pinned(u) => u.pages().read(off, out),
            Memory::Kernel => kmem::read(off as u64, out),
            Memory::Odp(o) => o.with_pages(off, out.len(), false, |v| v.read(off, out)),
        }
    }

    /// Faults an ODP range in at once (one batch for a whole message); nothing to do for
    /// other memory.
    pub(crate) fn touch(&self, off: usize, len: usize, write: bool) -> Result {
        match &self.mem {
            Memory::Odp(o) => o.with_pages(off, len, write, |_| Ok(())),
            _ => Ok(()),
        }
    }

    /// Copies `len` bytes from `src` at `src_off` to `off`: page to page between pinned MRs,
    /// through a bounce buffer when kernel or ODP memory takes part.
    pub(crate) fn copy_from(
        &self,
        off: usize,
        src: &MrShared,
        src_off: usize,
        len: usize,
    ) -> Result {
        if let (Memory::Pinned(d), Memory::Pinned(s)) = (&self.mem, &src.mem) {
            return d.pages().copy_from(off, s.pages(), src_off, len);
        }
        src.touch(src_off, len, false)?;
        self.touch(off, len, true)?;
        let mut bounce = [0u8; ODP_CHUNK];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(bounce.len());
            src.read(src_off + done, &mut bounce[..n])?;
            self.write(off + done, &bounce[..n])?;
            done += n;
        }
        Ok(())
    }

    /// Prefetches `len` bytes at offset `off` of an ODP MR (`EINVAL` for other MRs, as rxe).
    pub(crate) fn prefetch(&self, off: usize, len: usize, write: bool, fault: bool) -> Result {
        match &self.mem {
            Memory::Odp(o) => o.prefetch(off, len, write, fault),
            _ => Err(EINVAL),
        }
    }

    /// Performs `op` on the 64-bit word at offset `off`; returns its old value. Kernel memory
    /// takes no atomics (its MR grants no remote access).
    pub(crate) fn atomic(&self, off: usize, op: AtomicOp) -> Result<u64> {
        match &self.mem {
            Memory::Pinned(u) => u.pages().atomic(off, op),
            Memory::Kernel => Err(EINVAL),
            Memory::Odp(o) => o.with_pages(off, 8, true, |v| v.atomic(off, op)),
        }
    }
}

impl Tables {
    /// The MR for `key`, if the key is current.
    pub(crate) fn mr(&self, key: u32) -> Option<Arc<MrShared>> {
        self.mrs.get(key >> 8).filter(|m| m.key == key)
    }
}
