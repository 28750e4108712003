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

/// Registered memory taking part in a transfer: a range of an MR, or through an extended
/// window a run of elements of one MR (one held reference for all of them); deregistration of
/// its MR waits until it drops (the scatter lists are cleared after every WQE and message).
pub(crate) struct Seg {
    pub(super) mr: MrRef,
    pub(super) run: Run,
}

/// Where a [`Seg`]'s bytes are in its MR: `count` elements of `len` bytes, the first at `off`,
/// each `stride` bytes after the one before (a plain range is one element).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub(super) off: usize,
    pub(super) len: usize,
    pub(super) stride: usize,
    pub(super) count: usize,
}

impl Run {
    /// `len` bytes at `off`.
    pub(crate) fn one(off: usize, len: usize) -> Self {
        Self {
            off,
            len,
            stride: 0,
            count: 1,
        }
    }

    /// The elements: the offset in the MR and the length of each.
    fn elements(self) -> impl Iterator<Item = (usize, usize)> {
        (0..self.count).map(move |k| (self.off + k * self.stride, self.len))
    }

    /// How many bytes the run holds.
    fn bytes(&self) -> usize {
        self.len * self.count
    }

    /// Where byte `pos` (below [`Run::bytes`]) of the run is in the MR, and how many bytes of
    /// its element follow from there.
    fn at(&self, pos: usize) -> (usize, usize) {
        if self.len == 0 {
            return (self.off, 0);
        }
        let (k, b) = (pos / self.len, pos % self.len);
        (self.off + k * self.stride + b, self.len - b)
    }

    /// Takes the element of `len` bytes at `off` as the run's next one when it is that: as
    /// long as its elements and one stride after its last (the second element sets the
    /// stride, any distance forward). `false` when it is not.
    pub(crate) fn extend(&mut self, off: usize, len: usize) -> bool {
        let next = match self.count {
            1 => off >= self.off,
            n => {
                n.checked_mul(self.stride)
                    .and_then(|d| self.off.checked_add(d))
                    == Some(off)
            }
        };
        if !next || len != self.len || len == 0 {
            return false;
        }
        if self.count == 1 {
            self.stride = off - self.off;
        }
        self.count += 1;
        true
    }
}

impl Seg {
    /// `len` bytes of `mr` at `off`.
    pub(super) fn one(mr: MrRef, off: usize, len: usize) -> Self {
        Self {
            mr,
            run: Run::one(off, len),
        }
    }

    /// How many bytes the segment holds.
    pub(super) fn bytes(&self) -> usize {
        self.run.bytes()
    }

    /// Where byte `pos` (below [`Seg::bytes`]) is in the MR, and how many bytes of its
    /// element follow from there.
    pub(super) fn at(&self, pos: usize) -> (usize, usize) {
        self.run.at(pos)
    }

    /// The elements: the offset in the MR and the length of each.
    pub(super) fn elements(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.run.elements()
    }
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
            Reach::One(mr, off) => Self::One([Seg::one(mr, off, len)]),
            Reach::Pieces(p) => {
                let flags = GFP_KERNEL | __GFP_NOWARN;
                let mut v: KVVec<Seg> = KVVec::new();
                for (mr, run) in p {
                    // Elements of one MR reached the same way, one stride apart: one run.
                    if let Some(last) = v.last_mut() {
                        if run.count == 1 && last.mr.same(&mr) && last.run.extend(run.off, run.len)
                        {
                            continue;
                        }
                    }
                    v.push(Seg { mr, run }, flags).map_err(|_| Fault::Range)?;
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
        out.push(Seg::one(mr, off, s.length as usize), GFP_KERNEL)
            .map_err(|_| Fault::Range)?;
    }
    if total > MAX_MSG {
        return Err(Fault::Range);
    }
    Ok(total as usize)
}

/// Resolves an SGE naming an extended window's key (`Documentation/xmw.rst`, "Local SGEs"):
/// a range per element, each faulted in (with `fault`) outside the window's lock, and the
/// elements of one MR one stride apart held once, as a run.
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
    let first = out.len();
    for (mr, run) in pieces {
        if fault && mr.is_odp() {
            for (off, len) in run.elements() {
                mr.touch(off, len, write).map_err(|_| Fault::Range)?;
            }
        }
        if out.len() > first && run.count == 1 {
            if let Some(last) = out.last_mut() {
                if last.mr.is(&mr) && last.run.extend(run.off, run.len) {
                    continue;
                }
            }
        }
        let mr = mr.enter().ok_or(Fault::Key)?;
        out.push(Seg { mr, run }, GFP_KERNEL)
            .map_err(|_| Fault::Range)?;
    }
    Ok(())
}

/// Faults the ODP pages of `segs` in again (writable when `write`), on the requester's own
/// worker, after the responder found one of them unmapped.
pub(super) fn refault(segs: &[Seg], write: bool) -> Result {
    for s in segs {
        for (off, len) in s.elements() {
            s.mr.touch(off, len, write)?;
            wq::cond_resched();
        }
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
                if skip >= s.bytes() {
                    skip -= s.bytes();
                    continue;
                }
                // Element by element (one, for a plain range).
                while skip < s.bytes() && done < out.len() {
                    let (off, room) = s.at(skip);
                    let n = room.min(out.len() - done);
                    s.mr.read(off, &mut out[done..done + n], fault)?;
                    skip += n;
                    done += n;
                }
                skip = 0;
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
    while di < dst.len() && dpos >= dst[di].bytes() {
        dpos -= dst[di].bytes();
        di += 1;
    }
    let mut done = 0;
    let (mut si, mut spos) = (0usize, 0usize);
    while done < len {
        let d = dst.get(di).ok_or(EFAULT)?;
        // Up to the end of the destination's element (its range, for a plain one).
        let (doff, room) = d.at(dpos);
        let n = match src {
            Src::Inline(b) => {
                let n = room.min(len - done);
                d.mr.write(doff, b.get(done..done + n).ok_or(EFAULT)?, faults.dst)?;
                n
            }
            Src::Segs(ss) => {
                let s = ss.get(si).ok_or(EFAULT)?;
                let (soff, sroom) = s.at(spos);
                let n = match stencil(&d.run, dpos, room, &s.run, spos, sroom, len - done) {
                    // Whole elements of a run, as many as fit: one call.
                    Some((e, k, dstride, sstride)) => {
                        d.mr.copy_strided_from(doff, dstride, &s.mr, soff, sstride, e, k, faults)?;
                        e * k
                    }
                    None => {
                        let n = room.min(sroom).min(len - done).min(PIECE);
                        d.mr.copy_from(doff, &s.mr, soff, n, faults)?;
                        n
                    }
                };
                spos += n;
                if spos == s.bytes() {
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
        if dpos == d.bytes() {
            di += 1;
            dpos = 0;
        }
    }
    Ok(())
}

/// Whole elements to copy at once between the destination run `d` at byte `dpos` (with
/// `room` bytes left in its element) and the source run `s` at `spos` (`sroom` left), `left`
/// bytes still to copy: when one side is a run of several elements at an element's start and
/// the other a plain range with room for two of them or more, or a run of elements as long at
/// an element's start too. Returns the element length, how many, and each side's stride.
fn stencil(
    d: &Run,
    dpos: usize,
    room: usize,
    s: &Run,
    spos: usize,
    sroom: usize,
    left: usize,
) -> Option<(usize, usize, usize, usize)> {
    // A side's elements from `pos` on as (elements left, stride), for elements of `e` bytes.
    let side = |r: &Run, pos: usize, room: usize, e: usize| {
        if r.count > 1 {
            (r.len == e && pos % e == 0).then(|| ((r.bytes() - pos) / e, r.stride))
        } else {
            Some((room / e, e))
        }
    };
    let e = if s.count > 1 { s.len } else { d.len };
    if e == 0 || (s.count == 1 && d.count == 1) {
        return None;
    }
    let (dk, dstride) = side(d, dpos, room, e)?;
    let (sk, sstride) = side(s, spos, sroom, e)?;
    let k = dk.min(sk).min(left / e).min(PIECE / e);
    (k >= 2).then_some((e, k, dstride, sstride))
}

#[kunit_tests(rodp_xfer)]
mod tests {
    use super::*;

    /// A run of the elements at `offs`, `len` bytes each, or `None` if one does not extend it.
    fn run_of(offs: &[usize], len: usize) -> Option<Run> {
        let mut r = Run::one(offs[0], len);
        offs[1..].iter().all(|&o| r.extend(o, len)).then_some(r)
    }

    #[test]
    fn elements_one_stride_apart_make_one_run() {
        let r = run_of(&[40, 8232, 16424, 24616], 8);
        assert_eq!(
            r,
            Some(Run {
                off: 40,
                len: 8,
                stride: 8192,
                count: 4
            })
        );
        let r = r.unwrap_or(Run::one(0, 0));
        assert_eq!(r.bytes(), 32);
        // Byte 13 is byte 5 of element 1; 3 bytes of it follow.
        assert_eq!(r.at(13), (8232 + 5, 3));
        assert_eq!(r.at(31), (24616 + 7, 1));
        // The same element again (stride 0) is a run too; back-to-back elements are.
        assert!(run_of(&[64, 64, 64], 4).is_some());
        assert_eq!(run_of(&[0, 4, 8], 4).map(|r| r.at(9)), Some((9, 3)));
    }

    #[test]
    fn whole_elements_of_a_run_go_in_one_step() {
        let col = Run {
            off: 40,
            len: 8,
            stride: 8192,
            count: 1024,
        };
        let plain = Run::one(0, 8192);
        // A gather into a range: every element at once; from element 3 on, the rest.
        assert_eq!(
            stencil(&plain, 0, 8192, &col, 0, 8, 8192),
            Some((8, 1024, 8, 8192))
        );
        assert_eq!(
            stencil(&plain, 24, 8168, &col, 24, 8, 8168),
            Some((8, 1021, 8, 8192))
        );
        // A scatter from a range, bounded by what is left to copy and by the range's room.
        assert_eq!(
            stencil(&col, 0, 8, &plain, 0, 8192, 80),
            Some((8, 10, 8192, 8))
        );
        assert_eq!(
            stencil(&col, 0, 8, &plain, 0, 20, 8192),
            Some((8, 2, 8192, 8))
        );
        // Mid-element, room for one element only, two plain ranges: element by element.
        assert_eq!(stencil(&plain, 0, 8192, &col, 4, 4, 8188), None);
        assert_eq!(stencil(&plain, 0, 12, &col, 0, 8, 8192), None);
        assert_eq!(stencil(&plain, 0, 8192, &Run::one(0, 64), 0, 64, 64), None);
        // Two runs of elements as long: both in step; of other lengths: not.
        let rows = Run {
            off: 0,
            len: 8,
            stride: 16,
            count: 4,
        };
        assert_eq!(stencil(&rows, 8, 8, &col, 0, 8, 24), Some((8, 3, 16, 8192)));
        let wide = Run { len: 16, ..rows };
        assert_eq!(stencil(&wide, 0, 16, &col, 0, 8, 64), None);
        // Empty elements never loop.
        assert_eq!(
            stencil(&plain, 0, 8192, &Run { len: 0, ..col }, 0, 0, 8),
            None
        );
    }

    #[test]
    fn elements_out_of_step_start_a_new_run() {
        // Another stride, another length, a step back, an empty element.
        assert!(run_of(&[0, 100, 250], 8).is_none());
        let mut r = Run::one(100, 8);
        assert!(!r.extend(200, 4));
        assert!(!r.extend(50, 8));
        assert_eq!(r, Run::one(100, 8));
        assert!(!Run::one(0, 0).extend(0, 0));
        // A stride whose next step overflows ends the run.
        let mut big = Run::one(0, 1);
        assert!(big.extend(usize::MAX / 2 + 1, 1));
        assert!(!big.extend(usize::MAX, 1));
        assert_eq!(big.count, 2);
        // An empty run holds nothing and maps no byte past its start.
        assert_eq!(Run::one(7, 0).at(0), (7, 0));
    }
}
