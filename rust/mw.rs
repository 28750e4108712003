// SPDX-License-Identifier: GPL-2.0

//! Memory windows (rxe's `rxe_mw.c`): type 1 and type 2B windows onto part of an MR, bound and
//! invalidated by work requests, and the remote accesses that go through them.
//!
//! A window's rkey is `index << 8 | key byte` (see `keys.rs`), the byte random at allocation.
//! Every operation names the window by its whole current key: a bind (the rxe provider passes
//! the key it knows as the bind's `mw_rkey`, as rxe requires), an invalidation and a remote
//! access. A bind takes the new key byte from the work request and refuses one that would leave
//! the key unchanged, so a key handed out for an earlier binding never reaches a later one. Only
//! QPs of the window's PD bind or invalidate it. The window holds the MR it is bound to; the MR
//! counts its windows and refuses deregistration and re-registration while any is bound.
//!
//! Locks: a window's state, then an MR's window count ([`MrShared::add_window`]); nothing is
//! taken under the count.
//!
//! A remote access through a window holds the window and the MR ([`MrRef`], entered under the
//! window's state lock while it is bound); deallocation waits for those accesses. An
//! invalidation or a rebind does not wait (it runs in the engine, which never sleeps for
//! another QP): an access that resolved the old binding finishes on it.

use crate::{
    device::{Device, Pd},
    engine::Run,
    gate::{Gate, Gated, Pass},
    ib::{
        abi::Bind as BindWr,
        uapi::{kind, XBind, XEntry},
        verbs::access,
        wq,
    },
    keys::{self, Reach, Tables},
    limit::Token,
    mr::{Fault, MrRef, MrShared},
    qp::QpShared,
    xmw::{
        self,
        layout::{self, Entry, Kind},
    },
};
use kernel::{
    alloc::KVVec,
    new_mutex,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc, Mutex, MutexGuard,
    },
};

pub(crate) use keys::MAX_MW;

/// Remote rights a window grants.
const RIGHTS: u32 = access::REMOTE_READ | access::REMOTE_WRITE | access::REMOTE_ATOMIC;

/// Access bits a bind accepts: the rights, zero-based addressing, and local write, which means
/// nothing for a window (rxe accepts it too, and rdma-core's tests pass it).
const BIND_ACCESS: u32 = RIGHTS | access::ZERO_BASED | access::LOCAL_WRITE;

/// Access bits of a layout's binding that let the device write the memory under it: every
/// MR below must be writable (an MR entry's own access, a window entry's binding).
const WRITES: u32 = access::REMOTE_WRITE | access::REMOTE_ATOMIC | access::LOCAL_WRITE;

/// What a window is bound to.
enum Target {
    /// `length` bytes of one MR from `mr_off` (an ordinary bind).
    Range {
        mr: Arc<MrShared>,
        mr_off: u64,
        length: u64,
    },
    /// A layout over MRs and windows, `total` bytes (an extended window's bind,
    /// `Documentation/xmw.rst`); each entry holds its object, an MR counting the window as
    /// bound to it once per entry. `nested` when an entry names a window.
    Layout {
        kind: Kind,
        entries: KVec<Entry<Obj>>,
        total: u64,
        nested: bool,
    },
}

/// What a layout entry names.
enum Obj {
    /// An MR.
    Mr(Arc<MrShared>),
    /// A window, by its index and the binding it had when the layout was bound (its
    /// [`State::serial`]): the bytes mapped through it fail once that binding has ended. Not
    /// held: a deallocated window leaves nothing behind in the layouts that named it.
    Window(u32, u64),
}

impl Obj {
    /// Which registration or binding of its key the entry found (compared when a staged
    /// bind executes).
    fn serial(&self) -> u64 {
        match self {
            Self::Mr(mr) => mr.serial,
            Self::Window(_, serial) => *serial,
        }
    }
}

/// A type for the pieces of an access through a layout: the memory (`M`, held or not) and
/// where in its MR: an element, or a run of elements of that MR one stride apart.
type Pieces<M> = KVVec<(M, Run)>;

/// A piece of an access that maps through a nested window, resolved after the outer window's
/// lock is dropped (a window's lock is never taken under another's): its place among the
/// pieces, the window's index, the binding the layout named, the address in the window, the
/// length.
struct Later {
    at: usize,
    index: u32,
    serial: u64,
    addr: u64,
    len: u64,
}

/// Source of [`State::serial`]: one number per binding of any window, so that a window
/// allocated later at the same index never matches a layout's reference to an older one.
static NEXT_BINDING: Atomic<u64> = Atomic::new(1);

/// The most work, in layout entries visited, the nested pieces of one access may cost: each
/// costs about a search of its window's layout ([`Bound::find_cost`]), and a peer's access
/// must not keep the responder busy for long. 4,096 pieces through a window of 16
/// interleaved entries (528 each) fit.
const MAX_NESTED_COST: u64 = 1 << 21;

/// Adds a piece to `v`; an access touches at most [`xmw::MAX_PIECES`] elements (a peer's READ
/// may be 2 GiB long, of one-byte elements), so it has at most that many pieces.
fn push_piece<T>(v: &mut KVVec<T>, t: T) -> Result<(), Fault> {
    if v.len() >= xmw::MAX_PIECES {
        return Err(Fault::Range);
    }
    v.push(t, GFP_KERNEL | __GFP_NOWARN)
        .map_err(|_| Fault::Range)
}

/// Calls `f` with each element piece of `[off, off + len)` of a checked layout, in window
/// order: the entry's object, the address in it, the length. Located once, then stepped
/// element by element.
fn walk<O>(
    kind: Kind,
    entries: &[Entry<O>],
    off: u64,
    len: u64,
    mut f: impl FnMut(&O, u64, u64) -> Result<(), Fault>,
) -> Result<(), Fault> {
    let (mut w, end) = (off, off + len);
    let mut spot = layout::find(kind, entries, w);
    while w < end {
        let s = spot.ok_or(Fault::Range)?;
        let e = &entries[s.entry];
        let n = (e.len - s.b).min(end - w);
        f(&e.obj, e.addr(s.k) + s.b, n)?;
        w += n;
        spot = layout::next(kind, entries, s);
    }
    Ok(())
}

/// A window's binding.
struct Bound {
    target: Target,
    /// The address the window starts at: in the MR's iova space for an ordinary window, the
    /// window's own for an extended one.
    base: u64,
    rights: u32,
    /// Remote addresses count from the window's start rather than being iovas.
    zero_based: bool,
    /// Type 2B: the serial of the QP the window was bound through, the only one it serves.
    qp: Option<u64>,
}

impl Bound {
    fn length(&self) -> u64 {
        match &self.target {
            Target::Range { length, .. } => *length,
            Target::Layout { total, .. } => *total,
        }
    }

    /// Uncounts the window at every MR it was bound to.
    fn release(self) {
        match self.target {
            Target::Range { mr, .. } => mr.remove_window(),
            Target::Layout { entries, .. } => {
                for e in entries.iter() {
                    if let Obj::Mr(mr) = &e.obj {
                        mr.remove_window();
                    }
                }
            }
        }
    }

    /// The offset in the window of an access at `addr` of `len` bytes, inside its range.
    fn offset(&self, addr: u64, len: u64) -> Result<u64, Fault> {
        let off = if self.zero_based {
            addr
        } else {
            addr.checked_sub(self.base).ok_or(Fault::Range)?
        };
        match off.checked_add(len) {
            Some(end) if end <= self.length() => Ok(off),
            _ => Err(Fault::Range),
        }
    }

    /// Whether every MR under the binding lets the device write it.
    fn writable(&self) -> bool {
        let w = |mr: &MrShared| mr.access & access::LOCAL_WRITE != 0;
        match &self.target {
            Target::Range { mr, .. } => w(mr),
            Target::Layout { entries, .. } => entries
                .iter()
                .all(|e| matches!(&e.obj, Obj::Mr(mr) if w(mr))),
        }
    }

    /// The pieces of the range `[off, off + len)` of the binding (checked), `mr` making each
    /// MR piece's memory (under the window's lock); counts the elements in `elements` (at most
    /// [`xmw::MAX_PIECES`] for an access). An access through a layout gets a piece per run of
    /// elements of one MR one stride apart (its memory made once), and a [`Later`] where it
    /// maps through a nested window. A run takes only elements found by this call, with no
    /// nested piece between them: pieces of another nesting level are held through other
    /// windows.
    fn pieces<M>(
        &self,
        off: u64,
        len: u64,
        out: &mut Pieces<M>,
        later: &mut KVVec<Later>,
        elements: &mut usize,
        mut mr: impl FnMut(&Arc<MrShared>) -> Result<M, Fault>,
    ) -> Result<(), Fault> {
        let mut count = || {
            *elements += 1;
            if *elements > xmw::MAX_PIECES {
                return Err(Fault::Range);
            }
            Ok(())
        };
        match &self.target {
            Target::Range { mr: m, mr_off, .. } => {
                count()?;
                push_piece(
                    out,
                    (mr(m)?, Run::one((mr_off + off) as usize, len as usize)),
                )
            }
            Target::Layout { kind, entries, .. } => {
                let first = out.len();
                // The MR of the last piece pushed by this call.
                let mut last: Option<*const MrShared> = None;
                walk(*kind, entries, off, len, |o, a, n| match *o {
                    Obj::Mr(ref m) => {
                        count()?;
                        let moff = piece_offset(m, a, n)? as usize;
                        let end = out.len();
                        let open = end > first && later.last().is_none_or(|l| l.at < end);
                        if open && last == Some(Arc::as_ptr(m)) {
                            if let Some((_, run)) = out.last_mut() {
                                if run.extend(moff, n as usize) {
                                    return Ok(());
                                }
                            }
                        }
                        push_piece(out, (mr(m)?, Run::one(moff, n as usize)))?;
                        last = Some(Arc::as_ptr(m));
                        Ok(())
                    }
                    Obj::Window(index, serial) => {
                        // Consecutive bytes of the same window are one piece to resolve.
                        if let Some(p) = later.last_mut() {
                            let same = p.index == index && p.serial == serial;
                            if same && p.at == out.len() && p.addr.checked_add(p.len) == Some(a) {
                                p.len += n;
                                return Ok(());
                            }
                        }
                        count()?;
                        let at = out.len();
                        push_piece(
                            later,
                            Later {
                                at,
                                index,
                                serial,
                                addr: a,
                                len: n,
                            },
                        )
                    }
                })
            }
        }
    }

    /// About what locating an offset in the binding costs, in entries visited
    /// ([`layout::find`]): a pass over a composite layout's entries, a pass per run of an
    /// interleaved one's (at most `2n + 1` runs).
    fn find_cost(&self) -> u64 {
        match &self.target {
            Target::Range { .. } => 1,
            Target::Layout { kind, entries, .. } => {
                let n = entries.len() as u64;
                match kind {
                    Kind::Composite => n,
                    Kind::Interleaved => n * (2 * n + 1),
                }
            }
        }
    }
}

/// The pieces `out` with the nested ones `later` put in their places, each resolved by
/// `f` (under its window's lock, none other held).
fn splice<M>(
    out: Pieces<M>,
    later: KVVec<Later>,
    mut f: impl FnMut(&Later, &mut Pieces<M>) -> Result<(), Fault>,
) -> Result<Pieces<M>, Fault> {
    if later.is_empty() {
        return Ok(out);
    }
    let mut all = KVVec::new();
    let mut rest = out.into_iter();
    let mut at = 0;
    for l in later.iter() {
        while at < l.at {
            push_piece(&mut all, rest.next().ok_or(Fault::Range)?)?;
            at += 1;
        }
        f(l, &mut all)?;
        // Only mutexes are held here (the QP's in the engine).
        wq::cond_resched();
    }
    for p in rest {
        push_piece(&mut all, p)?;
    }
    Ok(all)
}

struct State {
    key: u32,
    bound: Option<Bound>,
    /// Names the current value of `bound`, new at every bind, invalidation and deallocation
    /// (from [`NEXT_BINDING`]): layouts naming the window keep the value of the binding they
    /// found.
    serial: u64,
    /// The most entries a layout bound to the window may have (`alloc_mw_ex`'s
    /// `max_descriptors`); 0 for a window that is not extended.
    descriptors: u32,
    /// Deallocated: never bound again.
    freed: bool,
    /// A type 2B window's layout checked by `RODP_METHOD_MW_XBIND` and waiting for its bind
    /// work request ([`MwShared::bind_staged`]); it holds no MR.
    staged: Option<Shaped>,
}

impl State {
    /// Ends the binding (`None`) or puts `new` in its place; returns the old one, to release
    /// outside the lock.
    fn replace(&mut self, new: Option<Bound>) -> Option<Bound> {
        self.serial = NEXT_BINDING.fetch_add(1, Relaxed);
        core::mem::replace(&mut self.bound, new)
    }
}

/// A layout bind whose shape is checked: its entries still name their MRs by key.
struct Shaped {
    kind: Kind,
    entries: KVec<Entry<u32>>,
    total: u64,
    /// The window's base address, the bind's access bits and the new key.
    base: u64,
    access: u32,
    rkey: u32,
    /// A staged layout's MRs as the stage found them ([`MrShared::serial`]): a bind fails if
    /// one was re-registered since.
    serials: KVec<u64>,
}

/// How an invalidation of a window arrives.
#[derive(Clone, Copy)]
pub(crate) enum Via<'a> {
    /// A local invalidate posted on this QP.
    Local(&'a QpShared),
    /// A send with invalidate arriving on this QP.
    Send(&'a QpShared),
}

/// A window as the engine sees it.
#[pin_data]
pub(crate) struct MwShared {
    pd: u64,
    type2: bool,
    #[pin]
    state: Mutex<State>,
    /// The remote accesses in flight through the window.
    #[pin]
    gate: Gate,
}

impl Gated for MwShared {
    fn gate(&self) -> &Gate {
        &self.gate
    }
}

/// The driver data of a window.
pub(crate) struct Mw {
    shared: Arc<MwShared>,
    index: u32,
    tables: Arc<Tables>,
    _token: Token,
}

impl Mw {
    /// Allocates a type 1 window (unbound, valid) or a type 2B window (free) in `pd`.
    pub(crate) fn alloc(dev: &Device, pd: &Pd, type2: bool) -> Result<(Self, u32)> {
        let token = dev.mws.take()?;
        let pd = pd.data().id;
        let shared = dev.tables.insert_mw(|key| {
            Arc::pin_init(
                pin_init!(MwShared {
                    pd,
                    type2,
                    state <- new_mutex!(State {
                        key,
                        bound: None,
                        serial: NEXT_BINDING.fetch_add(1, Relaxed),
                        descriptors: 0,
                        freed: false,
                        staged: None,
                    }),
                    gate <- Gate::new(),
                }),
                GFP_KERNEL,
            )
        })?;
        let key = shared.state.lock().key;
        Ok((
            Self {
                shared,
                index: keys::index(key),
                tables: dev.tables.clone(),
                _token: token,
            },
            key,
        ))
    }
}

impl Mw {
    /// Binds a layout through `qp`, or stages it for a type 2B window's bind work request
    /// (see [`MwShared::bind_layout`]).
    pub(crate) fn bind_layout(&self, qp: &QpShared, x: &XBind, entries: &[XEntry]) -> Result<u64> {
        self.shared.bind_layout(&self.tables, qp, x, entries)
    }

    /// Makes the window an extended one with a budget of `n` layout entries
    /// (`RODP_METHOD_MW_XINIT`, the second half of `alloc_mw_ex`): `n` from 1 to
    /// [`xmw::MAX_LIST`]; refused while the window is bound. The budget may change between
    /// bindings; the window still binds as an ordinary one too.
    pub(crate) fn extend(&self, n: u32) -> Result {
        if n == 0 || n > xmw::MAX_LIST {
            return Err(EINVAL);
        }
        let mut st = self.shared.state.lock();
        if st.bound.is_some() {
            return Err(EBUSY);
        }
        st.descriptors = n;
        Ok(())
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        // Deallocation invalidates: later accesses and binds through the key fail, and the MR
        // may be deregistered once the accesses that resolved the window have finished
        // (`dealloc_mw` returns after that).
        self.tables.mws.remove_if(self.index, &self.shared);
        let old = {
            let mut st = self.shared.state.lock();
            st.freed = true;
            st.staged = None;
            st.replace(None)
        };
        self.shared.gate.close();
        if let Some(b) = old {
            b.release();
        }
    }
}

/// The offset in `mr` of a layout piece of `n` bytes at its address `a`: the bind checked the
/// entry's footprint against the MR's range; checked again for each piece, as cheaply.
fn piece_offset(mr: &MrShared, a: u64, n: u64) -> Result<u64, Fault> {
    a.checked_sub(mr.iova)
        .filter(|o| o.checked_add(n).is_some_and(|x| x <= mr.length))
        .ok_or(Fault::Range)
}

impl MwShared {
    /// The window's current key.
    pub(crate) fn key(&self) -> u32 {
        self.state.lock().key
    }

    /// Executes the bind `w` of this window posted on `qp` (IBA 10.6.7.2.x, with rxe's checks),
    /// the MR it names looked up in `tables`: `Err` completes it with `IB_WC_MW_BIND_ERR`.
    pub(crate) fn bind(
        self: &Arc<Self>,
        tables: &Tables,
        qp: &QpShared,
        w: &BindWr,
    ) -> Result<(), ()> {
        // C10-72: the QP's PD is the window's.
        if self.pd != qp.pd || w.access & !BIND_ACCESS != 0 {
            return Err(());
        }
        // A layout bind names the window itself where an ordinary bind names its MR.
        if self.type2 && w.mr_lkey == w.mw_rkey {
            return self.bind_staged(tables, qp, w);
        }
        let zero_based = w.access & access::ZERO_BASED != 0;
        // o10-36.2.2: type 1 windows are addressed by virtual address.
        if zero_based && !self.type2 {
            return Err(());
        }
        let rights = w.access & RIGHTS;
        let target = if w.length > 0 {
            // Naming a dead MR is the bind's error, not a device access that missed.
            let mr = tables.current(w.mr_lkey).ok_or(())?;
            // C10-73 and C10-74: the MR allows binding, and memory the window lets peers
            // write is memory the MR may write.
            if mr.pd != qp.pd
                || mr.access & access::MW_BIND == 0
                || (rights & (access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0
                    && mr.access & access::LOCAL_WRITE == 0)
            {
                return Err(());
            }
            // C10-75: the window lies inside the MR.
            let off = w.addr.checked_sub(mr.iova).ok_or(())?;
            match off.checked_add(w.length) {
                Some(end) if end <= mr.length => {}
                _ => return Err(()),
            }
            Some((mr, off))
        } else if self.type2 {
            // o10-37.2.40: a type 2B window is invalidated, not bound empty.
            return Err(());
        } else {
            None
        };
        let mut st = self.state.lock();
        // o10-37.2.30: a type 2B window is bound only while free. The bind names the window by
        // its current key (rxe's `rxe_bind_mw`): a bind racing this one names a stale key.
        if st.freed || (self.type2 && st.bound.is_some()) || w.mw_rkey != st.key {
            return Err(());
        }
        let byte = w.rkey & 0xff;
        if byte == st.key & 0xff {
            return Err(());
        }
        if let Some((mr, _)) = &target {
            // Refused if the MR was deregistered or re-registered since the lookup.
            if !mr.add_window(tables) {
                return Err(());
            }
        }
        let old = st.replace(target.map(|(mr, mr_off)| Bound {
            target: Target::Range {
                mr,
                mr_off,
                length: w.length,
            },
            base: w.addr,
            rights,
            zero_based,
            qp: self.type2.then_some(qp.serial),
        }));
        st.key = (st.key & !0xff) | byte;
        drop(st);
        if let Some(b) = old {
            b.release();
        }
        Ok(())
    }

    /// Invalidates this window, named by `key`, if it is a type 2B window bound under that key:
    /// by a local invalidate posted on a QP of the window's PD, or by a send with invalidate
    /// arriving on the QP the window is bound to.
    pub(crate) fn invalidate(&self, key: u32, via: Via<'_>) -> Result<(), ()> {
        let mut st = self.state.lock();
        // o10-37.2.26: type 1 windows are not invalidated by work requests.
        if st.key != key || !self.type2 {
            return Err(());
        }
        let b = st.bound.as_ref().ok_or(())?;
        let (Via::Local(qp) | Via::Send(qp)) = via;
        // IBA 10.6.7.2: the invalidating QP's PD is the window's, as for a bind (C10-72), which
        // hardware enforces and rxe does not: a QP of another PD, another user's QP included,
        // cannot revoke a window it was never given.
        if self.pd != qp.pd {
            return Err(());
        }
        // A type 2B window serves one QP: a send with invalidate counts only when it arrives
        // there. (Local invalidates may come from any QP of the PD, as rdma-core's tests do.)
        if matches!(via, Via::Send(_)) && b.qp != Some(qp.serial) {
            return Err(());
        }
        let old = st.replace(None);
        drop(st);
        if let Some(b) = old {
            b.release();
        }
        Ok(())
    }

    /// Resolves a remote access of `len` bytes at `addr` through this window, named by `key`,
    /// arriving on `qp` with rights `right`, checked against the binding (key, range, rights, PD
    /// and, for type 2B, QP). Returns the memory, held for the access together with the
    /// window: one range of the MR, or through a layout a range per element touched.
    pub(crate) fn resolve(
        self: &Arc<Self>,
        qp: &QpShared,
        key: u32,
        addr: u64,
        len: u64,
        right: u32,
    ) -> Result<Reach, Fault> {
        let st = self.state.lock();
        let b = st.bound.as_ref().ok_or(Fault::Key)?;
        if st.key != key || self.pd != qp.pd || b.qp.is_some_and(|s| s != qp.serial) {
            return Err(Fault::Key);
        }
        if b.rights & right != right {
            return Err(Fault::Access);
        }
        let off = b.offset(addr, len)?;
        // Entered while bound, under the state lock deallocation takes before it closes the
        // gate; a bound MR cannot be deregistered.
        let enter = |mr: &Arc<MrShared>| -> Result<MrRef, Fault> {
            let w = Pass::enter(self).ok_or(Fault::Key)?;
            Ok(mr.enter().ok_or(Fault::Key)?.through(w))
        };
        if let Target::Range { mr, mr_off, .. } = &b.target {
            return Ok(Reach::One(enter(mr)?, (mr_off + off) as usize));
        }
        let (mut out, mut later, mut elements) = (KVVec::new(), KVVec::new(), 0);
        b.pieces(off, len, &mut out, &mut later, &mut elements, enter)?;
        drop(st);
        let mut budget = MAX_NESTED_COST;
        let pieces = splice(out, later, |l, all| {
            let x = qp.tables.mws.get(l.index).ok_or(Fault::Key)?;
            // The nested piece counted as one element: its own count instead.
            elements -= 1;
            x.nested(
                l,
                Some(qp),
                right,
                &mut budget,
                &mut elements,
                all,
                |inner, mr| {
                    let outer = Pass::enter(self).ok_or(Fault::Key)?;
                    let w = Pass::enter(inner).ok_or(Fault::Key)?;
                    Ok(mr.enter().ok_or(Fault::Key)?.through_nested(w, outer))
                },
            )
        })?;
        Ok(Reach::Pieces(pieces))
    }

    /// Resolves the piece `l` of an access through a layout that names this window, for a
    /// remote access arriving on `qp` with rights `right` or a local one (`qp` `None`): the
    /// binding the layout named must be the current one, and for a remote access must allow
    /// it (rights, the QP of a type 2B window). `mr` makes each piece's memory, under this
    /// window's lock; the search for the piece is charged to `budget`, its elements counted in
    /// `elements`.
    #[expect(clippy::too_many_arguments)]
    fn nested<M>(
        self: &Arc<Self>,
        l: &Later,
        qp: Option<&QpShared>,
        right: u32,
        budget: &mut u64,
        elements: &mut usize,
        out: &mut Pieces<M>,
        mut mr: impl FnMut(&Arc<Self>, &Arc<MrShared>) -> Result<M, Fault>,
    ) -> Result<(), Fault> {
        let st = self.state.lock();
        let b = st.bound.as_ref().ok_or(Fault::Key)?;
        if st.serial != l.serial {
            return Err(Fault::Key);
        }
        if let Some(qp) = qp {
            if b.qp.is_some_and(|s| s != qp.serial) {
                return Err(Fault::Key);
            }
            if b.rights & right != right {
                return Err(Fault::Access);
            }
        }
        let off = b.offset(l.addr, l.len)?;
        *budget = budget.checked_sub(b.find_cost()).ok_or(Fault::Range)?;
        let mut deeper = KVVec::new();
        b.pieces(off, l.len, out, &mut deeper, elements, |m| mr(self, m))?;
        // The bind refused windows under a nested one.
        if !deeper.is_empty() {
            return Err(Fault::Key);
        }
        Ok(())
    }

    /// The ranges of a local access of `len` bytes at `addr` through this window's key `key`
    /// (an SGE of a QP of PD `pd`, `Documentation/xmw.rst`, "Local SGEs"): only an extended
    /// window's, bound under `key`; writing (`need` has `LOCAL_WRITE`) needs local write in
    /// its rights. The MRs are returned unheld, for the caller to fault in outside the
    /// window's lock and then enter; a range per element or run of elements,
    /// [`xmw::MAX_PIECES`] elements at most.
    pub(crate) fn local(
        &self,
        tables: &Tables,
        pd: u64,
        key: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<Pieces<Arc<MrShared>>, Fault> {
        let st = self.state.lock();
        let b = st.bound.as_ref().ok_or(Fault::Key)?;
        if st.key != key || self.pd != pd || !matches!(b.target, Target::Layout { .. }) {
            return Err(Fault::Key);
        }
        if need & access::LOCAL_WRITE != 0 && b.rights & access::LOCAL_WRITE == 0 {
            return Err(Fault::Access);
        }
        let off = b.offset(addr, len)?;
        let (mut out, mut later, mut elements) = (KVVec::new(), KVVec::new(), 0);
        b.pieces(off, len, &mut out, &mut later, &mut elements, |mr| {
            Ok(mr.clone())
        })?;
        drop(st);
        let mut budget = MAX_NESTED_COST;
        splice(out, later, |l, all| {
            let x = tables.mws.get(l.index).ok_or(Fault::Key)?;
            elements -= 1;
            x.nested(l, None, 0, &mut budget, &mut elements, all, |_, mr| {
                Ok(mr.clone())
            })
        })
    }

    /// Checks a layout bind's shape through `qp` (`Documentation/xmw.rst`, "Validity rules":
    /// the kind, the access bits, the budget, the arithmetic, the capabilities): the entries
    /// as given, still naming their objects by key.
    fn shape(&self, qp: &QpShared, x: &XBind, given: &[XEntry]) -> Result<Shaped> {
        let kind = match x.kind {
            kind::COMPOSITE => Kind::Composite,
            kind::INTERLEAVED => Kind::Interleaved,
            _ => return Err(EINVAL),
        };
        // C10-72. Layout windows are addressed by their base: zero-based ones do not exist
        // (for type 1 windows none do, o10-36.2.2).
        if self.pd != qp.pd || x.access & !BIND_ACCESS != 0 || x.access & access::ZERO_BASED != 0 {
            return Err(EINVAL);
        }
        let budget = self.state.lock().descriptors as usize;
        if given.is_empty() || given.len() > budget {
            return Err(EINVAL);
        }
        let mut entries = KVec::with_capacity(given.len(), GFP_KERNEL_ACCOUNT)?;
        for g in given {
            entries.push(xmw::entry(g, g.key)?, GFP_KERNEL_ACCOUNT)?;
        }
        let total = layout::check(kind, &entries).map_err(xmw::errno)?;
        if xmw::caps().flags & xmw::needs_flag(layout::needs(kind, &entries)) == 0 {
            return Err(EOPNOTSUPP);
        }
        if total > xmw::MAX_TOTAL {
            return Err(EINVAL);
        }
        x.addr.checked_add(total).ok_or(EOVERFLOW)?;
        Ok(Shaped {
            kind,
            entries,
            total,
            base: x.addr,
            access: x.access,
            rkey: x.rkey,
            serials: KVec::new(),
        })
    }

    /// The objects a shaped layout names, looked up in `tables`, for a bind through `qp`
    /// (`Documentation/xmw.rst`, "Validity rules"): each an MR of this PD granting
    /// non-contiguous binding, or a window bound under the key named ([`MwShared::nestable`]);
    /// rights covered, the entry's footprint inside the object. Naming this window is a loop.
    fn objects(
        self: &Arc<Self>,
        tables: &Tables,
        qp: &QpShared,
        l: &Shaped,
    ) -> Result<KVec<Entry<Obj>>> {
        let writes = l.access & WRITES;
        let mut entries = KVec::with_capacity(l.entries.len(), GFP_KERNEL_ACCOUNT)?;
        for e in l.entries.iter() {
            if keys::is_window(e.obj) {
                let x = tables.window(e.obj).ok_or(EINVAL)?;
                if Arc::ptr_eq(&x, self) {
                    return Err(ELOOP);
                }
                let serial = x.nestable(e, qp, l.access, self.type2)?;
                let index = keys::index(e.obj);
                entries.push(e.with(Obj::Window(index, serial)), GFP_KERNEL_ACCOUNT)?;
                continue;
            }
            let mr = tables.current(e.obj).ok_or(EINVAL)?;
            if mr.pd != self.pd {
                return Err(EINVAL);
            }
            if !mr.noncontig() || (writes != 0 && mr.access & access::LOCAL_WRITE == 0) {
                return Err(EACCES);
            }
            let foot = e.footprint().ok_or(EOVERFLOW)?;
            match e
                .start
                .checked_sub(mr.iova)
                .and_then(|o| o.checked_add(foot))
            {
                Some(end) if end <= mr.length => {}
                _ => return Err(EINVAL),
            }
            entries.push(e.with(Obj::Mr(mr)), GFP_KERNEL_ACCOUNT)?;
        }
        Ok(entries)
    }

    /// Whether the entry `e` of a layout bound through `qp` with access bits `acc` may name
    /// this window (`Documentation/xmw.rst`, "Nesting"), the layout's window being type 2B
    /// when `type2`: bound under the key `e` names, of the QP's PD, of depth 1 (over MRs
    /// only), a type 2B window only for a type 2B one bound through the same QP, every remote
    /// right granted, writable MRs below for a writing layout, the footprint inside the
    /// window. Returns the binding's serial.
    fn nestable(&self, e: &Entry<u32>, qp: &QpShared, acc: u32, type2: bool) -> Result<u64> {
        let st = self.state.lock();
        let b = st
            .bound
            .as_ref()
            .filter(|_| st.key == e.obj)
            .ok_or(EINVAL)?;
        if self.pd != qp.pd {
            return Err(EINVAL);
        }
        if matches!(&b.target, Target::Layout { nested: true, .. }) {
            return Err(ELOOP);
        }
        if self.type2 && !(type2 && b.qp == Some(qp.serial)) {
            return Err(EINVAL);
        }
        let writes = acc & WRITES;
        if b.rights & acc & RIGHTS != acc & RIGHTS || (writes != 0 && !b.writable()) {
            return Err(EACCES);
        }
        let foot = e.footprint().ok_or(EOVERFLOW)?;
        b.offset(e.start, foot).map_err(|_| EINVAL)?;
        Ok(st.serial)
    }

    /// Binds the layout `l` over `entries` (its MRs) under the state lock `st` with the new
    /// key `key`, for type 2B windows to `qp` alone: counts the window at each entry's MR
    /// (refused, and undone, if one was deregistered or re-registered since the lookup) and
    /// releases the old binding. `EINVAL` if the window was deallocated or its budget shrank.
    fn install(
        &self,
        mut st: MutexGuard<'_, State>,
        tables: &Tables,
        qp: &QpShared,
        l: &Shaped,
        entries: KVec<Entry<Obj>>,
        key: u32,
    ) -> Result {
        // The budget again: it may have changed while the window was free.
        if st.freed || entries.len() > st.descriptors as usize {
            return Err(EINVAL);
        }
        let mrs = || {
            entries.iter().filter_map(|e| match &e.obj {
                Obj::Mr(mr) => Some(mr),
                Obj::Window(..) => None,
            })
        };
        for (n, mr) in mrs().enumerate() {
            if !mr.add_window(tables) {
                mrs().take(n).for_each(|mr| mr.remove_window());
                return Err(EINVAL);
            }
        }
        let nested = entries.iter().any(|e| matches!(e.obj, Obj::Window(..)));
        let old = st.replace(Some(Bound {
            target: Target::Layout {
                kind: l.kind,
                entries,
                total: l.total,
                nested,
            },
            base: l.base,
            // A layout's key is also an lkey: local write is one of its rights.
            rights: l.access & (RIGHTS | access::LOCAL_WRITE),
            zero_based: false,
            qp: self.type2.then_some(qp.serial),
        }));
        st.key = key;
        drop(st);
        if let Some(b) = old {
            b.release();
        }
        Ok(())
    }

    /// Binds the layout `given` to this window through `qp` (`RODP_METHOD_MW_XBIND`), with
    /// the base address, rights, kind and new key of `x`; the MRs the entries name are looked
    /// up in `tables`. A type 1 window is bound by the call. A type 2B window is bound through
    /// the send queue: the call checks the layout and stages it, and the next bind work
    /// request that names the window itself as its MR and carries the same new key, address,
    /// length (the layout's) and rights binds it, in order with the work requests around it
    /// ([`MwShared::bind`]).
    /// Returns the window's length.
    pub(crate) fn bind_layout(
        self: &Arc<Self>,
        tables: &Tables,
        qp: &QpShared,
        x: &XBind,
        given: &[XEntry],
    ) -> Result<u64> {
        let l = self.shape(qp, x, given)?;
        let entries = self.objects(tables, qp, &l)?;
        let total = l.total;
        let st = self.state.lock();
        // The new key names this window, with another key byte: for type 1 now, for type 2B
        // as the bind work request will find it (checked again then).
        if x.rkey & !0xff != st.key & !0xff || (!self.type2 && x.rkey & 0xff == st.key & 0xff) {
            return Err(EINVAL);
        }
        if self.type2 {
            if st.freed {
                return Err(EINVAL);
            }
            drop(st);
            // The MRs are looked up again when the bind executes; a staged layout holds none,
            // only which registrations they were.
            let mut l = l;
            let mut serials = KVec::with_capacity(entries.len(), GFP_KERNEL_ACCOUNT)?;
            for e in entries.iter() {
                serials.push(e.obj.serial(), GFP_KERNEL_ACCOUNT)?;
            }
            l.serials = serials;
            drop(entries);
            // A stage replaces one still waiting for its bind, which then fails.
            self.state.lock().staged = Some(l);
            return Ok(total);
        }
        self.install(st, tables, qp, &l, entries, x.rkey)?;
        Ok(total)
    }

    /// Executes the bind work request `w` of a type 2B window that names the window itself as
    /// its MR: the bind of the layout staged for it (`st.staged`, taken if it carries `w`'s new
    /// key, address, length and access bits; with none such the bind fails). The layout's MRs
    /// are looked up again: one deregistered or re-registered since the stage fails the bind.
    fn bind_staged(self: &Arc<Self>, tables: &Tables, qp: &QpShared, w: &BindWr) -> Result<(), ()> {
        let l = {
            let mut st = self.state.lock();
            let s = st.staged.as_ref().ok_or(())?;
            if s.rkey != w.rkey || s.base != w.addr || s.total != w.length || s.access != w.access {
                return Err(());
            }
            st.staged.take().ok_or(())?
        };
        let entries = self.objects(tables, qp, &l).map_err(|_| ())?;
        if entries.len() != l.serials.len()
            || entries
                .iter()
                .zip(l.serials.iter())
                .any(|(e, s)| e.obj.serial() != *s)
        {
            return Err(());
        }
        let st = self.state.lock();
        // o10-37.2.30 and the key rules of an ordinary bind.
        if st.bound.is_some() || w.mw_rkey != st.key || w.rkey & 0xff == st.key & 0xff {
            return Err(());
        }
        let key = (st.key & !0xff) | (w.rkey & 0xff);
        self.install(st, tables, qp, &l, entries, key)
            .map_err(|_| ())
    }
}

#[kunit_tests(rodp_mw)]
mod tests {
    use super::*;
    use crate::xmw::layout::{Dim, MAX_DIMS};

    fn later(at: usize, addr: u64) -> Later {
        Later {
            at,
            index: 0,
            serial: 0,
            addr,
            len: 1,
        }
    }

    #[test]
    fn nested_pieces_take_their_places() -> Result {
        let mut out = KVVec::new();
        for i in 0..3u64 {
            out.push((i, Run::one(0, 0)), GFP_KERNEL)?;
        }
        let mut l = KVVec::new();
        for (at, addr) in [(0, 10), (2, 20), (2, 30), (3, 40)] {
            l.push(later(at, addr), GFP_KERNEL)?;
        }
        let all =
            splice(out, l, |l, v| push_piece(v, (l.addr, Run::one(0, 0)))).map_err(|_| EINVAL)?;
        let order = [10, 0, 1, 20, 30, 2, 40];
        assert_eq!(all.len(), order.len());
        assert!(all.iter().zip(order).all(|(p, want)| p.0 == want));
        Ok(())
    }

    #[test]
    fn an_access_gets_at_most_max_pieces() -> Result {
        let mut out = KVVec::new();
        out.push((0u64, Run::one(0, 0)), GFP_KERNEL)?;
        let mut l = KVVec::new();
        l.push(later(1, 0), GFP_KERNEL)?;
        let many = |_: &Later, v: &mut Pieces<u64>| {
            for i in 0..xmw::MAX_PIECES as u64 {
                push_piece(v, (i, Run::one(0, 0)))?;
            }
            Ok(())
        };
        assert!(splice(out, l, many).is_err());
        Ok(())
    }

    /// A window bound to one entry naming window 7's binding 3: 8-byte elements `stride`
    /// apart, four of them, at 0x1000 in that window.
    fn through_window(stride: u64) -> Result<Bound> {
        let mut dims = [Dim {
            stride: 0,
            count: 1,
        }; MAX_DIMS];
        dims[0] = Dim { stride, count: 4 };
        let mut entries = KVec::new();
        entries.push(
            Entry {
                obj: Obj::Window(7, 3),
                start: 0x1000,
                len: 8,
                repeat: 1,
                dims,
                ndims: 1,
            },
            GFP_KERNEL,
        )?;
        Ok(Bound {
            target: Target::Layout {
                kind: Kind::Composite,
                entries,
                total: 32,
                nested: true,
            },
            base: 0,
            rights: RIGHTS,
            zero_based: false,
            qp: None,
        })
    }

    /// The nested pieces an access of `[off, off + len)` of `b` leaves to resolve.
    fn laters(b: &Bound, off: u64, len: u64) -> Result<KVVec<Later>> {
        let (mut out, mut later, mut n) = (KVVec::new(), KVVec::new(), 0);
        b.pieces(off, len, &mut out, &mut later, &mut n, |_| Ok(0u8))
            .map_err(|_| EINVAL)?;
        assert!(out.is_empty());
        Ok(later)
    }

    #[test]
    fn consecutive_bytes_of_a_window_are_one_piece() -> Result {
        let back_to_back = laters(&through_window(8)?, 4, 24)?;
        assert_eq!(back_to_back.len(), 1);
        let l = &back_to_back[0];
        assert_eq!((l.index, l.serial, l.addr, l.len), (7, 3, 0x1004, 24));
        let apart = laters(&through_window(16)?, 0, 32)?;
        assert_eq!(apart.len(), 4);
        assert!(apart
            .iter()
            .enumerate()
            .all(|(i, l)| l.addr == 0x1000 + 16 * i as u64 && l.len == 8 && l.at == 0));
        Ok(())
    }
}
