// SPDX-License-Identifier: GPL-2.0

//! The address map of an extended memory window's layout (`Documentation/xmw.rst`): which
//! byte of which entry's object each window offset stands for, the layout's total length and
//! footprints, and the checks a bind makes on the arithmetic. Pure arithmetic over the
//! entries, no allocation and no kernel object: the objects an entry names are the caller's
//! (`O`), and resolving a nested window is the caller's next step.
//!
//! A bind checks a layout here ([`check`], [`needs`]); a remote access through a bound
//! layout finds its first element ([`find`]) and steps from there ([`next`]).

use kernel::prelude::*;

/// Most dimensions of one entry (`max_mw_stride_dimension`).
pub(crate) const MAX_DIMS: usize = 4;

/// `a / b`, 0 for `b` 0: the layouts this module walks are [`check`]ed, so no divisor is 0,
/// and a division that cannot panic keeps panic calls (which objtool does not know for
/// division) out of the code.
fn div(a: u64, b: u64) -> u64 {
    a.checked_div(b).unwrap_or(0)
}

/// `a % b`, 0 for `b` 0 (see [`div`]).
fn rem(a: u64, b: u64) -> u64 {
    a.checked_rem(b).unwrap_or(0)
}

/// One dimension of an entry: `count` steps of `stride` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dim {
    pub(crate) stride: u64,
    pub(crate) count: u64,
}

/// One entry of a layout: elements of `len` bytes of the object `obj`, the first at `start`,
/// the others where the dimensions (dimension 0 innermost) put them; in an interleaved layout
/// `repeat` of them in each cycle.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry<O> {
    pub(crate) obj: O,
    pub(crate) start: u64,
    pub(crate) len: u64,
    pub(crate) repeat: u64,
    pub(crate) dims: [Dim; MAX_DIMS],
    pub(crate) ndims: usize,
}

/// How a layout puts its entries' elements in a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Each entry's elements, then the next entry's.
    Composite,
    /// Cycles in which each entry gives its next `repeat` elements (or what it has left).
    Interleaved,
}

/// Why a layout is refused (each becomes the errno `Documentation/xmw.rst` gives it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Invalid {
    /// No entries, a zero length, count or repeat, too many dimensions, a composite entry
    /// repeated (`EINVAL`).
    Shape,
    /// An element count, a footprint or the total does not fit in 64 bits (`EOVERFLOW`).
    Overflow,
}

impl<O> Entry<O> {
    /// The same entry naming `obj` (the object a bind resolved its key to).
    pub(crate) fn with<P>(&self, obj: P) -> Entry<P> {
        Entry {
            obj,
            start: self.start,
            len: self.len,
            repeat: self.repeat,
            dims: self.dims,
            ndims: self.ndims,
        }
    }

    fn dims(&self) -> &[Dim] {
        &self.dims[..self.ndims.min(MAX_DIMS)]
    }

    /// The number of elements, the product of the counts (1 without dimensions).
    pub(crate) fn elements(&self) -> Option<u64> {
        self.dims()
            .iter()
            .try_fold(1u64, |n, d| n.checked_mul(d.count))
    }

    /// The length of the entry's footprint: from `start` to one past its last byte.
    pub(crate) fn footprint(&self) -> Option<u64> {
        self.dims().iter().try_fold(self.len, |f, d| {
            d.stride
                .checked_mul(d.count.checked_sub(1)?)
                .and_then(|s| f.checked_add(s))
        })
    }

    /// The object address of element `k` (`k` below [`Entry::elements`], the footprint
    /// checked: no overflow).
    pub(crate) fn addr(&self, mut k: u64) -> u64 {
        let mut a = self.start;
        for d in self.dims() {
            a += d.stride * rem(k, d.count);
            k = div(k, d.count);
        }
        a
    }

    /// The bytes of the entry's stream, `elements * len`.
    fn bytes(&self) -> Option<u64> {
        self.elements()?.checked_mul(self.len)
    }

    /// The cycles in which an interleaved entry still gives elements, `ceil(n / repeat)`.
    fn cycles(&self) -> u64 {
        let n = self.elements().unwrap_or(0);
        div(n, self.repeat) + u64::from(rem(n, self.repeat) != 0)
    }

    /// The elements it gives in cycle `j`: `repeat`, what is left, or none.
    fn given(&self, j: u64) -> u64 {
        let n = self.elements().unwrap_or(0);
        match j.checked_mul(self.repeat) {
            Some(used) if used < n => (n - used).min(self.repeat),
            _ => 0,
        }
    }
}

/// Checks the arithmetic and shape of a layout (what a bind checks before it looks at the
/// objects) and returns its total length.
pub(crate) fn check<O>(kind: Kind, entries: &[Entry<O>]) -> Result<u64, Invalid> {
    if entries.is_empty() {
        return Err(Invalid::Shape);
    }
    let mut total = 0u64;
    for e in entries {
        let bad = e.len == 0
            || e.repeat == 0
            || e.ndims > MAX_DIMS
            || e.dims().iter().any(|d| d.count == 0)
            || (kind == Kind::Composite && e.repeat != 1);
        if bad {
            return Err(Invalid::Shape);
        }
        let end = e.footprint().and_then(|f| e.start.checked_add(f));
        let bytes = e.bytes();
        total = match (end, bytes) {
            (Some(_), Some(b)) => total.checked_add(b).ok_or(Invalid::Overflow)?,
            _ => return Err(Invalid::Overflow),
        };
    }
    Ok(total)
}

/// The capability a layout needs (`Documentation/xmw.rst`, "Objects and capabilities"): a
/// device binds the layout only if it reports that capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Needs {
    /// Entries one after the other (`COMPOSITE`).
    Composite,
    /// One element of each entry per cycle, all entries as long (`INTERLEAVED`).
    Interleaved,
    /// The same repeat for every entry, all ending in the same cycle
    /// (`INTERLEAVED_REPETITION`).
    Repetition,
    /// A repeat per entry, all ending in the same cycle
    /// (`INTERLEAVED_NONUNIFORM_REPETITION`).
    NonuniformRepetition,
    /// Entries that run out in different cycles (`INTERLEAVED_NONUNIFORM_TOTAL_ITEMS`).
    NonuniformTotal,
}

/// What a layout [`check`] accepted needs of the device.
pub(crate) fn needs<O>(kind: Kind, entries: &[Entry<O>]) -> Needs {
    if kind == Kind::Composite {
        return Needs::Composite;
    }
    let cycles = |e: &Entry<O>| {
        let n = e.elements().unwrap_or(0);
        (rem(n, e.repeat) == 0).then_some(div(n, e.repeat))
    };
    let first = &entries[0];
    let together = entries
        .iter()
        .all(|e| cycles(e).is_some() && cycles(e) == cycles(first));
    let same_repeat = entries.iter().all(|e| e.repeat == first.repeat);
    match (together, same_repeat, first.repeat) {
        (false, _, _) => Needs::NonuniformTotal,
        (true, true, 1) => Needs::Interleaved,
        (true, true, _) => Needs::Repetition,
        (true, false, _) => Needs::NonuniformRepetition,
    }
}

/// Where a window offset lands: entry `entry`, its element `k`, byte `b` of the element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Spot {
    pub(crate) entry: usize,
    pub(crate) k: u64,
    pub(crate) b: u64,
}

/// The entry, element and byte at window offset `w` of a layout [`check`] accepted; `None`
/// past its end.
pub(crate) fn find<O>(kind: Kind, entries: &[Entry<O>], w: u64) -> Option<Spot> {
    match kind {
        Kind::Composite => {
            let mut u = w;
            for (i, e) in entries.iter().enumerate() {
                let bytes = e.bytes()?;
                if u < bytes {
                    return Some(Spot {
                        entry: i,
                        k: div(u, e.len),
                        b: rem(u, e.len),
                    });
                }
                u -= bytes;
            }
            None
        }
        Kind::Interleaved => find_interleaved(entries, w),
    }
}

/// [`find`] for an interleaved layout: walks the runs of cycles in which every entry gives
/// the same number of elements (at most two boundaries per entry, where it gives its last
/// full repeat and where it runs out), each run a number of cycles of one size.
fn find_interleaved<O>(entries: &[Entry<O>], w: u64) -> Option<Spot> {
    let mut u = w;
    let mut j0 = 0u64;
    let last = entries.iter().map(|e| e.cycles()).max()?;
    while j0 < last {
        // The run ends at the first cycle after j0 where some entry's share changes.
        let j1 = entries
            .iter()
            .flat_map(|e| {
                let n = e.elements().unwrap_or(0);
                [div(n, e.repeat), e.cycles()]
            })
            .filter(|&b| b > j0)
            .min()
            .unwrap_or(last);
        let size: u64 = entries.iter().map(|e| e.given(j0) * e.len).sum();
        let run = (j1 - j0).checked_mul(size);
        match run {
            Some(r) if u >= r => {
                u -= r;
                j0 = j1;
            }
            _ => {
                let j = j0 + div(u, size);
                let mut t = rem(u, size);
                for (i, e) in entries.iter().enumerate() {
                    let part = e.given(j0) * e.len;
                    if t < part {
                        return Some(Spot {
                            entry: i,
                            k: j * e.repeat + div(t, e.len),
                            b: rem(t, e.len),
                        });
                    }
                    t -= part;
                }
                return None;
            }
        }
    }
    None
}

/// The element that follows element `s.k` of entry `s.entry` in the window (`s.b` ignored),
/// at its first byte; `None` after the last. Costs at most a pass over the entries, where
/// [`find`] walks the layout from its start.
pub(crate) fn next<O>(kind: Kind, entries: &[Entry<O>], s: Spot) -> Option<Spot> {
    let at = |entry, k| Spot { entry, k, b: 0 };
    let e = entries.get(s.entry)?;
    match kind {
        Kind::Composite => {
            if s.k + 1 < e.elements()? {
                return Some(at(s.entry, s.k + 1));
            }
            // Entries have at least one element.
            (s.entry + 1 < entries.len()).then(|| at(s.entry + 1, 0))
        }
        Kind::Interleaved => {
            let j = div(s.k, e.repeat);
            // Still within this entry's share of cycle j.
            if s.k + 1 < j * e.repeat + e.given(j) {
                return Some(at(s.entry, s.k + 1));
            }
            // The next entry giving elements in cycle j, else the first in cycle j + 1.
            if let Some(i) = (s.entry + 1..entries.len()).find(|&i| entries[i].given(j) > 0) {
                return Some(at(i, j * entries[i].repeat));
            }
            let i = (0..entries.len()).find(|&i| entries[i].given(j + 1) > 0)?;
            Some(at(i, (j + 1) * entries[i].repeat))
        }
    }
}

#[kunit_tests(rodp_xmw_layout)]
mod tests {
    use super::*;

    const NO: Dim = Dim {
        stride: 0,
        count: 1,
    };

    fn entry(obj: u8, start: u64, len: u64, repeat: u64, dims: &[(u64, u64)]) -> Entry<u8> {
        let mut d = [NO; MAX_DIMS];
        for (i, &(stride, count)) in dims.iter().enumerate() {
            d[i] = Dim { stride, count };
        }
        Entry {
            obj,
            start,
            len,
            repeat,
            dims: d,
            ndims: dims.len(),
        }
    }

    /// The reference: the window's bytes one by one, cycle by cycle, as the definition says.
    fn model(kind: Kind, es: &[Entry<u8>]) -> Result<KVec<(u8, u64)>> {
        let mut out = KVec::new();
        let mut push = |e: &Entry<u8>, k: u64| -> Result {
            for b in 0..e.len {
                out.push((e.obj, e.addr(k) + b), GFP_KERNEL)?;
            }
            Ok(())
        };
        match kind {
            Kind::Composite => {
                for e in es {
                    for k in 0..e.elements().ok_or(EINVAL)? {
                        push(e, k)?;
                    }
                }
            }
            Kind::Interleaved => {
                let mut next = KVec::from_elem(0u64, es.len(), GFP_KERNEL)?;
                loop {
                    let mut any = false;
                    for (i, e) in es.iter().enumerate() {
                        for _ in 0..e.repeat {
                            if next[i] < e.elements().ok_or(EINVAL)? {
                                push(e, next[i])?;
                                next[i] += 1;
                                any = true;
                            }
                        }
                    }
                    if !any {
                        break;
                    }
                }
            }
        }
        Ok(out)
    }

    /// The piece of a window access that starts at offset `w`: the entry, the object address and
    /// the bytes (at most `max`) up to the end of the element; what an access through the window
    /// does before it goes to the next piece.
    fn piece<O>(kind: Kind, entries: &[Entry<O>], w: u64, max: u64) -> Option<(usize, u64, u64)> {
        let s = find(kind, entries, w)?;
        let e = &entries[s.entry];
        Some((s.entry, e.addr(s.k) + s.b, (e.len - s.b).min(max)))
    }

    fn at(kind: Kind, es: &[Entry<u8>], w: u64) -> Option<(u8, u64)> {
        let (e, a, _) = piece(kind, es, w, 1)?;
        Some((es[e].obj, a))
    }

    /// Whether the address map agrees with the model at every offset, ends where it ends, and
    /// [`check`] gives its length.
    fn same_as_model(kind: Kind, es: &[Entry<u8>]) -> Result<bool> {
        let m = model(kind, es)?;
        let len = m.len() as u64;
        Ok(check(kind, es) == Ok(len)
            && m.iter()
                .enumerate()
                .all(|(w, &want)| at(kind, es, w as u64) == Some(want))
            && find(kind, es, len).is_none())
    }

    const M: u64 = 0x10000;

    #[test]
    fn matrix_column() -> Result {
        let es = [entry(0, M + 8, 8, 1, &[(512, 64)])];
        assert!(same_as_model(Kind::Composite, &es)?);
        assert!(same_as_model(Kind::Interleaved, &es)?);
        assert_eq!(es[0].footprint(), Some(32264));
        for (w, a) in [(0, M + 8), (8, M + 520), (100, M + 6156), (511, M + 32271)] {
            assert_eq!(at(Kind::Composite, &es, w), Some((0, a)));
        }
        Ok(())
    }

    #[test]
    fn two_entries_interleaved() -> Result {
        let (ma, mb) = (0x100000, 0x900000);
        let es = [
            entry(0, ma, 512, 1, &[(3072, 100)]),
            entry(1, mb, 8, 1, &[(48, 100)]),
        ];
        assert!(same_as_model(Kind::Interleaved, &es)?);
        assert_eq!(check(Kind::Interleaved, &es), Ok(52000));
        let want = [
            (511, (0, ma + 511)),
            (512, (1, mb)),
            (520, (0, ma + 3072)),
            (1039, (1, mb + 55)),
            (26000, (0, ma + 153600)),
            (51999, (1, mb + 4759)),
        ];
        for (w, a) in want {
            assert_eq!(at(Kind::Interleaved, &es, w), Some(a));
        }
        assert_eq!(es[0].footprint(), Some(304640));
        assert_eq!(es[1].footprint(), Some(4760));
        Ok(())
    }

    #[test]
    fn block_in_rows_and_in_cells() -> Result {
        let v = 0x40000;
        let rows = [entry(0, v + 8736, 32, 1, &[(256, 3), (8192, 2)])];
        let cells = [entry(0, v + 8736, 8, 1, &[(8, 4), (256, 3), (8192, 2)])];
        assert!(same_as_model(Kind::Composite, &rows)?);
        assert!(model(Kind::Composite, &rows)? == model(Kind::Composite, &cells)?);
        assert_eq!(at(Kind::Composite, &rows, 100), Some((0, v + 16932)));
        assert_eq!(at(Kind::Composite, &cells, 100), Some((0, v + 16932)));
        assert_eq!(at(Kind::Composite, &rows, 191), Some((0, v + 17471)));
        assert_eq!(rows[0].footprint(), Some(17472 - 8736));
        Ok(())
    }

    #[test]
    fn nonuniform_repetitions_and_totals() -> Result {
        let (pos, col, tex) = (0x1000, 0x2000, 0x3000);
        let es = [
            entry(0, pos, 1, 3, &[(1, 18)]),
            entry(1, col, 1, 3, &[(1, 18)]),
            entry(2, tex, 1, 2, &[(1, 12)]),
        ];
        assert!(same_as_model(Kind::Interleaved, &es)?);
        assert_eq!(check(Kind::Interleaved, &es), Ok(48));
        assert_eq!(at(Kind::Interleaved, &es, 3), Some((1, col)));
        assert_eq!(at(Kind::Interleaved, &es, 13), Some((1, col + 5)));
        assert_eq!(at(Kind::Interleaved, &es, 47), Some((2, tex + 11)));
        let short = [es[0], es[1], entry(2, tex, 1, 2, &[(1, 8)])];
        assert!(same_as_model(Kind::Interleaved, &short)?);
        assert!(steps_like_find(Kind::Interleaved, &es));
        assert!(steps_like_find(Kind::Interleaved, &short));
        assert_eq!(check(Kind::Interleaved, &short), Ok(44));
        assert_eq!(at(Kind::Interleaved, &short, 40), Some((0, pos + 17)));
        Ok(())
    }

    #[test]
    fn each_layout_needs_its_capability() {
        use Kind::{Composite as C, Interleaved as I};
        use Needs::*;
        // Three entries of one-byte elements each: (elements, repeat).
        let cases = [
            (C, [(5, 1), (3, 1), (3, 1)], Composite),
            (I, [(5, 1), (5, 1), (5, 1)], Interleaved),
            (I, [(6, 2), (6, 2), (6, 2)], Repetition),
            // The vertex example: 3, 3 and 2 per cycle, six cycles each.
            (I, [(18, 3), (18, 3), (12, 2)], NonuniformRepetition),
            (I, [(18, 3), (18, 3), (8, 2)], NonuniformTotal),
            (I, [(5, 1), (5, 1), (4, 1)], NonuniformTotal),
            // A last cycle only partly given is running out early too.
            (I, [(6, 2), (6, 2), (5, 2)], NonuniformTotal),
        ];
        for (kind, nr, want) in cases {
            let es = nr.map(|(n, r)| entry(0, 0, 1, r, &[(1, n)]));
            assert_eq!(needs(kind, &es), want);
        }
    }

    /// Whether stepping with [`next`] from offset 0 visits every element in window order, as
    /// [`find`] locates each one's first byte, and ends after the last.
    fn steps_like_find(kind: Kind, es: &[Entry<u8>]) -> bool {
        let Ok(total) = check(kind, es) else {
            return false;
        };
        let mut w = 0;
        let mut s = find(kind, es, 0);
        while let Some(cur) = s {
            if find(kind, es, w) != Some(cur) {
                return false;
            }
            w += es[cur.entry].len;
            s = next(kind, es, cur);
        }
        w == total
    }

    #[test]
    fn pieces_end_at_element_boundaries() {
        let es = [entry(0, M + 8, 8, 1, &[(512, 64)])];
        assert_eq!(piece(Kind::Composite, &es, 4, 100), Some((0, M + 12, 4)));
        assert_eq!(piece(Kind::Composite, &es, 8, 3), Some((0, M + 520, 3)));
        assert_eq!(piece(Kind::Composite, &es, 512, 8), None);
    }

    #[test]
    fn bad_shapes_and_overflows_are_refused() -> Result {
        use Invalid::{Overflow, Shape};
        use Kind::{Composite as C, Interleaved as I};
        let ok = entry(0, 0, 8, 1, &[(16, 4)]);
        assert_eq!(check::<u8>(C, &[]), Err(Shape));
        assert_eq!(check(C, &[entry(0, 0, 0, 1, &[])]), Err(Shape));
        assert_eq!(check(C, &[entry(0, 0, 8, 0, &[])]), Err(Shape));
        assert_eq!(check(C, &[entry(0, 0, 8, 2, &[])]), Err(Shape));
        assert_eq!(check(I, &[entry(0, 0, 8, 2, &[])]), Ok(8));
        assert_eq!(check(C, &[entry(0, 0, 8, 1, &[(8, 0)])]), Err(Shape));
        let mut five = ok;
        five.ndims = MAX_DIMS + 1;
        assert_eq!(check(C, &[five]), Err(Shape));
        // Counts whose product, strides whose reach, or a total past 2^64.
        let huge = entry(0, 0, 1, 1, &[(1, 1 << 32), (1, 1 << 32)]);
        assert_eq!(check(C, &[huge]), Err(Overflow));
        let far = entry(0, 0, 8, 1, &[(u64::MAX / 2, 3)]);
        assert_eq!(check(C, &[far]), Err(Overflow));
        let end = entry(0, u64::MAX - 8, 16, 1, &[]);
        assert_eq!(check(C, &[end]), Err(Overflow));
        let big = entry(0, 0, 1 << 62, 1, &[(0, 2)]);
        assert_eq!(check(C, &[big, big]), Err(Overflow));
        // Overlap is allowed: a stride of 0 repeats one element.
        let same = entry(0, 64, 8, 1, &[(0, 3)]);
        assert!(same_as_model(C, &[same])?);
        assert_eq!(check(C, &[ok, same]), Ok(56));
        Ok(())
    }

    /// A small xorshift generator, so that the random layouts are the same in every run.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self, below: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0.checked_rem(below).unwrap_or(0)
        }
    }

    #[test]
    fn random_layouts_match_the_model() -> Result {
        let mut r = Rng(0x2545_f491_4f6c_dd1d);
        let mut bad = 0;
        for _ in 0..300 {
            let kind = if r.next(2) == 0 {
                Kind::Composite
            } else {
                Kind::Interleaved
            };
            let mut es = KVec::new();
            for i in 0..1 + r.next(4) {
                let mut dims = KVec::new();
                for _ in 0..r.next(4) {
                    dims.push((r.next(64), 1 + r.next(4)), GFP_KERNEL)?;
                }
                let repeat = if kind == Kind::Composite {
                    1
                } else {
                    1 + r.next(3)
                };
                let e = entry(i as u8, r.next(4096), 1 + r.next(16), repeat, &dims);
                es.push(e, GFP_KERNEL)?;
            }
            if !same_as_model(kind, &es)? || !steps_like_find(kind, &es) {
                bad += 1;
            }
        }
        assert_eq!(bad, 0);
        Ok(())
    }
}
