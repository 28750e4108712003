// SPDX-License-Identifier: GPL-2.0

//! Data movement for the engine (the copy loops of rxe's `rxe_mr.c`): scatter/gather lists
//! resolved against a QP's keys, and copies between them.

use super::MAX_MSG;
use crate::{
    ib::{abi::Sge, verbs::access, wq},
    keys::{self, Reach},
    mr::{Fault, MrRef},
    odp::Faults,
    qp::QpShared,
};
use kernel::{alloc::KVVec, prelude::*};

/// Per-QP scratch space the requester reuses for every WQE, so the data path does not
/// allocate.
pub(crate) struct Scratch {
    pub(super) sges: KVec<Sge>,
    pub(super) segs: KVec<Seg>,
}

impl Scratch {
    /// Room for `max_sge` entries.
    pub(crate) fn new(max_sge: u32) -> Result<Self> {
        Ok(Self {
            sges: KVec::with_capacity(max_sge as usize, GFP_KERNEL)?,
            segs: KVec::with_capacity(max_sge as usize, GFP_KERNEL)?,
        })
    }

    /// Drops the MR references of the last WQE: a deregistered MR's pages (and its device
    /// reference) must not outlive it in a scratch list.
    pub(super) fn clear(&mut self) {
        self.sges.clear();
        self.segs.clear();
    }
}

/// A registered memory range taking part in a transfer; deregistration of its MR waits until
/// it drops (the scatter lists are cleared after every WQE and message).
pub(crate) struct Seg {
    pub(super) mr: MrRef,
    pub(super) off: usize,
    pub(super) len: usize,
}

/// The responder's memory for one RDMA access: one range, or through an extended window a
/// range per element (`Reach`).
pub(crate) enum Segs {
    One([Seg; 1]),
    Many(KVVec<Seg>),
}

impl Segs {
    /// The ranges of `r`, an access of `len` bytes.
    pub(super) fn of(r: Reach, len: usize) -> Result<Self, Fault> {
        Ok(match r {
            Reach::One(mr, off) => Self::One([Seg { mr, off, len }]),
            Reach::Pieces(p) => {
                let flags = GFP_KERNEL | __GFP_NOWARN;
                let mut v = KVVec::with_capacity(p.len(), flags).map_err(|_| Fault::Range)?;
                for (mr, off, len) in p {
                    v.push(Seg { mr, off, len }, flags)
                        .map_err(|_| Fault::Range)?;
                }
                Self::Many(v)
            }
        })
    }
}

impl core::ops::Deref for Segs {
    type Target = [Seg];

    fn deref(&self) -> &[Seg] {
        match self {
            Self::One(s) => s,
            Self::Many(v) => v,
        }
    }
}

/// Where message data comes from.
#[derive(Clone, Copy)]
pub(crate) enum Src<'a> {
    /// Inline data from the WQE.
    Inline(&'a [u8]),
    /// Registered memory.
    Segs(&'a [Seg]),
}

/// Resolves scatter/gather entries against `qp`'s keys with rights `need`; returns the total
/// length. With `fault`, ODP ranges are faulted in (the requester's own memory, on its own
/// worker); the responder, which must not fault there, checks them itself.
pub(super) fn resolve(
    qp: &QpShared,
    sges: &[Sge],
    need: u32,
    out: &mut KVec<Seg>,
    fault: bool,
) -> Result<usize, Fault> {
    let mut total: u64 = 0;
    for s in sges.iter().filter(|s| s.length > 0) {
        if keys::is_window(s.lkey) {
            total += u64::from(s.length);
            window(qp, s, need, out, fault)?;
            continue;
        }
        let mr = qp.tables.mr(s.lkey).ok_or(Fault::Key)?;
        let off = mr.check(qp.pd, s.addr, s.length.into(), need)?;
        // ODP: the pages must exist (a hole or read-only memory is a local protection error).
        if fault {
            mr.touch(off, s.length as usize, need & access::LOCAL_WRITE != 0)
                .map_err(|_| Fault::Range)?;
        }
        total += u64::from(s.length);
        // Held after the fault, so deregistration never waits for one; refused if the MR was
        // deregistered or re-registered meanwhile.
        let mr = mr.enter().ok_or(Fault::Key)?;
        out.push(
            Seg {
                mr,
                off,
                len: s.length as usize,
            },
            GFP_KERNEL,
        )
        .map_err(|_| Fault::Range)?;
    }
    if total > MAX_MSG {
        return Err(Fault::Range);
    }
    Ok(total as usize)
}

/// Resolves an SGE naming an extended window's key (`Documentation/xmw.rst`, "Local SGEs"):
/// a range per element, each faulted in (with `fault`) outside the window's lock, then held.
fn window(
    qp: &QpShared,
    s: &Sge,
    need: u32,
    out: &mut KVec<Seg>,
    fault: bool,
) -> Result<(), Fault> {
    let w = qp.tables.window(s.lkey).ok_or(Fault::Key)?;
    let pieces = w.local(&qp.tables, qp.pd, s.lkey, s.addr, s.length.into(), need)?;
    let write = need & access::LOCAL_WRITE != 0;
    for (mr, off, len) in pieces {
        if fault {
            mr.touch(off, len, write).map_err(|_| Fault::Range)?;
        }
        let mr = mr.enter().ok_or(Fault::Key)?;
        out.push(Seg { mr, off, len }, GFP_KERNEL)
            .map_err(|_| Fault::Range)?;
    }
    Ok(())
}

/// Faults the ODP pages of `segs` in again (writable when `write`), on the requester's own
/// worker, after the responder found one of them unmapped.
pub(super) fn refault(segs: &[Seg], write: bool) -> Result {
    for s in segs {
        s.mr.touch(s.off, s.len, write)?;
        wq::cond_resched();
    }
    Ok(())
}

/// Most bytes one call of the copy engine moves: a long copy gives the CPU away between pieces
/// (the engine holds only mutexes, of its own QPs and of the target QP, while it copies).
const PIECE: usize = 1 << 20;

/// Copies `out.len()` bytes of `src`, from `skip` bytes in, into `out` (a packet being built).
/// With `fault`, ODP pages are faulted in (the requester's own memory, on its own work item);
/// without, they must be mapped.
pub(super) fn gather(src: Src<'_>, skip: usize, out: &mut [u8], fault: bool) -> Result {
    match src {
        Src::Inline(b) => out.copy_from_slice(b.get(skip..skip + out.len()).ok_or(EFAULT)?),
        Src::Segs(ss) => {
            let mut done = 0;
            let mut skip = skip;
            for s in ss {
                if done == out.len() {
                    break;
                }
                if skip >= s.len {
                    skip -= s.len;
                    continue;
                }
                let n = (s.len - skip).min(out.len() - done);
                s.mr.read(s.off + skip, &mut out[done..done + n], fault)?;
                skip = 0;
                done += n;
            }
            if done != out.len() {
                return Err(EFAULT);
            }
        }
    }
    Ok(())
}

/// Copies `len` bytes of `src` into `dst`, starting `skip` bytes into `dst`. ODP pages of a
/// side `faults` does not let fault must be mapped already: a page that is not fails the copy,
/// after the bytes before it may have been copied, with [`crate::odp::UNMAPPED`] when it is
/// `dst`'s, [`crate::odp::UNMAPPED_SRC`] when it is `src`'s.
pub(super) fn transfer(
    dst: &[Seg],
    skip: usize,
    src: Src<'_>,
    len: usize,
    faults: Faults,
) -> Result {
    let mut di = 0;
    let mut dpos = skip;
    // Find the destination segment that holds byte `skip`.
    while di < dst.len() && dpos >= dst[di].len {
        dpos -= dst[di].len;
        di += 1;
    }
    let mut done = 0;
    let (mut si, mut spos) = (0usize, 0usize);
    while done < len {
        let d = dst.get(di).ok_or(EFAULT)?;
        let room = d.len - dpos;
        let n = match src {
            Src::Inline(b) => {
                let n = room.min(len - done);
                d.mr.write(
                    d.off + dpos,
                    b.get(done..done + n).ok_or(EFAULT)?,
                    faults.dst,
                )?;
                n
            }
            Src::Segs(ss) => {
                let s = ss.get(si).ok_or(EFAULT)?;
                let n = room.min(s.len - spos).min(len - done).min(PIECE);
                d.mr.copy_from(d.off + dpos, &s.mr, s.off + spos, n, faults)?;
                spos += n;
                if spos == s.len {
                    si += 1;
                    spos = 0;
                }
                n
            }
        };
        if (done + n) / PIECE != done / PIECE {
            wq::cond_resched();
        }
        done += n;
        dpos += n;
        if dpos == d.len {
            di += 1;
            dpos = 0;
        }
    }
    Ok(())
}
