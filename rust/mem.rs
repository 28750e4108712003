// SPDX-License-Identifier: GPL-2.0

//! The page copy engine (the loops of rxe's `rxe_mr_copy` and `rxe_mr_do_atomic_op`): byte
//! copies and 64-bit atomics over memory named page by page, pinned ([`PageList`]) or an ODP
//! range whose mutex is held (`crate::odp`).
//!
//! The engine never sees a page: it names memory as [`Pages`] and a byte offset.

use crate::ib::umem::{AtomicOp, PageList, PageRef};
use kernel::prelude::*;

/// Memory the engine copies between page by page: pinned pages, or an ODP range while its
/// mutex is held.
pub(crate) trait Pages {
    /// The page holding byte `off` (writable when `write`), the offset in it, and how many
    /// bytes from there the page and the memory both still hold.
    fn page_at(&self, off: usize, write: bool) -> Result<(PageRef<'_>, usize, usize)>;

    /// Checks before an access that `[off, off + len)` may be accessed (written when
    /// `write`), so that a refused access changes nothing.
    fn check(&self, off: usize, len: usize, write: bool) -> Result;

    /// Copies `out.len()` bytes at `off` into `out`.
    fn read(&self, mut off: usize, out: &mut [u8]) -> Result {
        self.check(off, out.len(), false)?;
        let mut done = 0;
        while done < out.len() {
            let (page, po, room) = self.page_at(off, false)?;
            let n = room.min(out.len() - done);
            page.map(|m| m.read(po, &mut out[done..done + n]));
            done += n;
            off += n;
        }
        Ok(())
    }

    /// Copies `data` to `off`.
    fn write(&self, mut off: usize, data: &[u8]) -> Result {
        self.check(off, data.len(), true)?;
        let mut done = 0;
        while done < data.len() {
            let (page, po, room) = self.page_at(off, true)?;
            let n = room.min(data.len() - done);
            page.map(|m| m.write(po, &data[done..done + n]));
            done += n;
            off += n;
        }
        Ok(())
    }

    /// Copies `len` bytes from `src` at `src_off` to `off`, page to page.
    fn copy_from(&self, off: usize, src: &impl Pages, src_off: usize, len: usize) -> Result {
        self.check(off, len, true)?;
        src.check(src_off, len, false)?;
        copy_pages(self, off, src, src_off, len)
    }

    /// Performs `op` on the naturally aligned 64-bit word at `off`; returns its old value.
    fn atomic(&self, off: usize, op: AtomicOp) -> Result<u64> {
        self.check(off, 8, true)?;
        let (page, po, room) = self.page_at(off, true)?;
        if po % 8 != 0 || room < 8 {
            return Err(EINVAL);
        }
        page.map(|m| m.atomic(po, op))
    }
}

impl Pages for PageList {
    fn page_at(&self, off: usize, _write: bool) -> Result<(PageRef<'_>, usize, usize)> {
        self.page(off)
    }

    fn check(&self, off: usize, len: usize, _write: bool) -> Result {
        match off.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(EFAULT),
        }
    }
}

/// Copies `count` elements of `len` bytes, element `k` from `src` at `soff + k * sstride` to
/// `dst` at `doff + k * dstride` (a gather from or scatter into an extended window's run of
/// elements), page to page. The elements step forward, so the first and the last bound them
/// all: checked once.
#[expect(clippy::too_many_arguments)]
pub(crate) fn copy_strided(
    dst: &impl Pages,
    doff: usize,
    dstride: usize,
    src: &impl Pages,
    soff: usize,
    sstride: usize,
    len: usize,
    count: usize,
) -> Result {
    let Some(steps) = count.checked_sub(1) else {
        return Ok(());
    };
    let last = |off: usize, stride: usize| {
        stride
            .checked_mul(steps)
            .and_then(|d| off.checked_add(d))
            .ok_or(EFAULT)
    };
    let (dlast, slast) = (last(doff, dstride)?, last(soff, sstride)?);
    dst.check(doff, len, true)?;
    dst.check(dlast, len, true)?;
    src.check(soff, len, false)?;
    src.check(slast, len, false)?;
    let mut k = 0;
    while k < count {
        let (d, s) = (doff + k * dstride, soff + k * sstride);
        // A side whose elements are back to back stays mapped for those of them its page
        // holds whole (a gather's destination, a scatter's source), the other side's page
        // is mapped per element.
        let packed = if dstride == len {
            Some(dst.page_at(d, true)?)
        } else if sstride == len {
            Some(src.page_at(s, false)?)
        } else {
            None
        };
        let Some((packed, po, m)) = packed
            .map(|(p, po, room)| (p, po, (room / len.max(1)).min(count - k)))
            .filter(|&(_, _, m)| m >= 2)
        else {
            copy_pages(dst, d, src, s, len)?;
            k += 1;
            continue;
        };
        packed.map(|p| -> Result {
            for j in 0..m {
                let at = po + j * len;
                let (page, o, left) = if dstride == len {
                    src.page_at(s + j * sstride, false)?
                } else {
                    dst.page_at(d + j * dstride, true)?
                };
                if left < len {
                    // The element crosses a page of the other side.
                    copy_pages(dst, d + j * dstride, src, s + j * sstride, len)?;
                } else if dstride == len {
                    page.map(|q| p.copy_from(at, q, o, len));
                } else {
                    page.map(|q| q.copy_from(o, p, at, len));
                }
            }
            Ok(())
        })?;
        k += m;
    }
    Ok(())
}

/// Copies `len` bytes from `src` at `soff` to `dst` at `doff`, page to page, with no bounce
/// buffer.
pub(crate) fn copy_pages(
    dst: &(impl Pages + ?Sized),
    mut doff: usize,
    src: &(impl Pages + ?Sized),
    mut soff: usize,
    len: usize,
) -> Result {
    let mut left = len;
    while left > 0 {
        let (dp, dpo, droom) = dst.page_at(doff, true)?;
        let (sp, spo, sroom) = src.page_at(soff, false)?;
        let n = droom.min(sroom).min(left);
        dp.map(|d| sp.map(|s| d.copy_from(dpo, s, spo, n)));
        left -= n;
        doff += n;
        soff += n;
    }
    Ok(())
}
