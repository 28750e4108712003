// SPDX-License-Identifier: GPL-2.0

//! On-demand paging memory (the roles of mlx5's `odp.c` and rxe's `rxe_odp.c`): the ODP memory
//! of an MR, explicit or implicit, over the `ib_umem_odp` binding (`crate::ib::odp`).
//!
//! A umem pins nothing. A device access faults the pages it needs in through hmm, in batches,
//! and copies while holding the umem's mutex, which the invalidation callback takes too, so a
//! copy never sees a page the kernel has taken away; an access that loses to an invalidation
//! retries. Each umem has its own translation table ([`mtt`]), sparse and charged to the
//! registering process's memory cgroup; an implicit MR is made of children of 1 GiB
//! ([`implicit`]). Events are counted per MR and per device ([`counters`]).

mod counters;
mod implicit;
mod mtt;
mod umem;

pub(crate) use counters::{CounterSets, OdpCounters};
pub(crate) use umem::{OdpUmem, OdpView};

use crate::ib::{
    device::{Device, Driver},
    verbs::access,
};
use implicit::{pieces, ImplicitOdp};
use kernel::{prelude::*, sync::atomic::Relaxed};

/// Longest explicit ODP MR (`EINVAL` beyond): 16 GiB. ib_core gives an explicit umem an hmm
/// pfn list of 8 bytes per page of its whole length at registration (`kvcalloc`, not charged to
/// a memory cgroup), 32 MiB at this bound; an implicit MR reaches the whole address space with
/// children of 1 GiB made as they are touched.
pub(crate) const MAX_EXPLICIT: u64 = 16 << 30;

/// Largest range one fault maps (the batching bound).
const FAULT_BATCH: usize = 2 << 20;

/// Most bytes one hold of a umem's mutex copies (an invalidation waits at most that long).
const HOLD: usize = 64 << 10;

/// Fault attempts before an access gives up (each one lost to an invalidation). A device
/// retries a fault it loses to the MM: only memory that changes faster than it can be faulted
/// in, hundreds of times in a row, ends an access in error.
const ATTEMPTS: u32 = 256;

/// The error of an access that may not fault (see [`Faults`]) and found a page unmapped; of a
/// copy, a page of its destination.
pub(crate) const UNMAPPED: Error = ENODATA;

/// The error of a copy that may not fault and found a page of its source unmapped (so that the
/// responder knows whose page it was without looking again, when it may be mapped again).
pub(crate) const UNMAPPED_SRC: Error = ENOMSG;

/// [`UNMAPPED`] of a copy's source as [`UNMAPPED_SRC`].
pub(crate) fn src_side(e: Error) -> Error {
    if e == UNMAPPED {
        UNMAPPED_SRC
    } else {
        e
    }
}

/// Which sides of a copy may fault missing pages in. The responder copies between the
/// requester's memory and its own on the requester's worker, holding the requester's send side
/// and its own receive side, where a fault could wait for ever on user space (a FUSE daemon
/// behind a `MAP_SHARED` mapping); there neither side faults, and an unmapped page fails the
/// copy with [`UNMAPPED`] (the requester, or the responder's fault work, faults it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Faults {
    /// The destination may fault.
    pub(crate) dst: bool,
    /// The source may fault.
    pub(crate) src: bool,
}

impl Faults {
    /// Both sides fault.
    pub(crate) const ALL: Self = Self {
        dst: true,
        src: true,
    };
}

/// Whether an MR with `access` may have its pages mapped writable.
fn writable(access: u32) -> bool {
    access & (access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0
}

/// The ODP memory of an MR: explicit (an address range) or implicit (the address space).
pub(crate) struct Odp {
    kind: Kind,
    counters: CounterSets,
}

enum Kind {
    Explicit(OdpUmem),
    Implicit(ImplicitOdp),
}

impl Odp {
    /// An explicit ODP MR over `len` bytes at `addr`.
    pub(crate) fn explicit<T: Driver>(
        dev: &Device<T>,
        addr: u64,
        len: u64,
        access: u32,
        counters: CounterSets,
    ) -> Result<Self> {
        if len > MAX_EXPLICIT {
            return Err(EINVAL);
        }
        let umem = OdpUmem::get(dev, addr, len, access, counters.clone())?;
        Ok(Self::with(Kind::Explicit(umem), counters))
    }

    /// An implicit ODP MR over the calling process's address space.
    pub(crate) fn implicit<T: Driver>(
        dev: &Device<T>,
        access: u32,
        counters: CounterSets,
    ) -> Result<Self> {
        let parent = ImplicitOdp::new(dev, access, counters.clone())?;
        Ok(Self::with(Kind::Implicit(parent), counters))
    }

    fn with(kind: Kind, counters: CounterSets) -> Self {
        counters.dev.mrs.fetch_add(1, Relaxed);
        Self { kind, counters }
    }

    /// The implicit parent, if this is one.
    pub(crate) fn as_implicit(&self) -> Option<&ImplicitOdp> {
        match &self.kind {
            Kind::Implicit(i) => Some(i),
            Kind::Explicit(_) => None,
        }
    }

    /// The MR's own counters.
    pub(crate) fn counters(&self) -> &OdpCounters {
        &self.counters.mr
    }

    /// First byte offset past what the MR can reach: the address space for an implicit MR.
    pub(crate) fn limit(&self) -> Option<u64> {
        self.as_implicit().map(|i| i.va_end())
    }

    /// Runs `f(umem, offset in it, position in the range, length)` for each umem under
    /// `[off, off + len)`, in order; an implicit MR makes the children it needs.
    pub(crate) fn each(
        &self,
        off: usize,
        len: usize,
        f: impl FnMut(&OdpUmem, usize, usize, usize) -> Result,
    ) -> Result {
        self.each_in(off, len, true, f)
    }

    /// [`Odp::each`]; without `fault`, an implicit MR makes no child (making one takes the
    /// process's mmap lock) and a missing one fails with [`UNMAPPED`].
    pub(crate) fn each_in(
        &self,
        off: usize,
        len: usize,
        fault: bool,
        mut f: impl FnMut(&OdpUmem, usize, usize, usize) -> Result,
    ) -> Result {
        match &self.kind {
            Kind::Explicit(u) => f(u, off, 0, len),
            Kind::Implicit(i) => pieces(off, len, |slot, coff, pos, n| {
                let child = if fault {
                    i.child(slot)?
                } else {
                    i.children.hold(slot).ok_or(UNMAPPED)?
                };
                let r = f(&child, coff, pos, n);
                let idle = r.is_err() && child.idle();
                // Let go before the reaper may look.
                drop(child);
                if idle {
                    // A child made for memory the process does not have: no invalidation will
                    // ever reap it, so the reaper is told now.
                    i.children.schedule_reap();
                }
                r
            }),
        }
    }

    /// [`Self::each_in`] and [`OdpUmem::with_chunks`] together: `f` gets each chunk's view
    /// (writable when `write`), its offset in the view's umem, its position in
    /// `[off, off + len)` and its length.
    pub(crate) fn each_chunk(
        &self,
        off: usize,
        len: usize,
        write: bool,
        fault: bool,
        mut f: impl FnMut(&OdpView<'_>, usize, usize, usize) -> Result,
    ) -> Result {
        self.each_in(off, len, fault, |u, uoff, pos, n| {
            u.with_chunks(uoff, n, write, fault, |v, voff, vn| {
                f(v, voff, pos + (voff - uoff), vn)
            })
        })
    }

    /// Prefetch of `[off, off + len)`: faults the range in (writable when `write`), or with
    /// `!fault` maps the pages present (of an implicit MR: only in children that exist).
    pub(crate) fn prefetch(&self, off: usize, len: usize, write: bool, fault: bool) -> Result {
        self.counters.add(|c| &c.prefetches, 1);
        match (&self.kind, fault) {
            (Kind::Implicit(i), false) => pieces(off, len, |slot, coff, _, n| {
                i.children
                    .hold(slot)
                    .map_or(Ok(()), |c| c.prefetch(coff, n, false, false))
            }),
            _ => self.each(off, len, |u, uoff, _, n| u.prefetch(uoff, n, write, fault)),
        }
    }
}

impl Drop for Odp {
    fn drop(&mut self) {
        self.counters.dev.mrs.fetch_sub(1, Relaxed);
    }
}
