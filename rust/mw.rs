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
    gate::{Gate, Gated, Pass},
    ib::{
        abi::Bind as BindWr,
        uapi::{kind, XBind, XEntry},
        verbs::access,
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
    sync::{Arc, Mutex, MutexGuard},
};

pub(crate) use keys::MAX_MW;

/// Remote rights a window grants.
const RIGHTS: u32 = access::REMOTE_READ | access::REMOTE_WRITE | access::REMOTE_ATOMIC;

/// Access bits a bind accepts: the rights, zero-based addressing, and local write, which means
/// nothing for a window (rxe accepts it too, and rdma-core's tests pass it).
const BIND_ACCESS: u32 = RIGHTS | access::ZERO_BASED | access::LOCAL_WRITE;

/// What a window is bound to.
enum Target {
    /// `length` bytes of one MR from `mr_off` (an ordinary bind).
    Range {
        mr: Arc<MrShared>,
        mr_off: u64,
        length: u64,
    },
    /// A layout over MRs, `total` bytes (an extended window's bind, `Documentation/xmw.rst`);
    /// each entry holds its MR, which counts the window as bound to it once per entry.
    Layout {
        kind: Kind,
        entries: KVec<Entry<Arc<MrShared>>>,
        total: u64,
    },
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
            Target::Layout { entries, .. } => entries.iter().for_each(|e| e.obj.remove_window()),
        }
    }
}

struct State {
    key: u32,
    bound: Option<Bound>,
    /// The most entries a layout bound to the window may have (`alloc_mw_ex`'s
    /// `max_descriptors`); 0 for a window that is not extended.
    descriptors: u32,
    /// Deallocated: never bound again.
    freed: bool,
    /// A type 2B window's layout checked by `RODP_METHOD_MW_XBIND` and waiting for its bind
    /// work request ([`MwShared::bind_staged`]); it holds no MR.
    staged: Option<Shaped>,
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
            st.bound.take()
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
    pub(crate) fn bind(&self, tables: &Tables, qp: &QpShared, w: &BindWr) -> Result<(), ()> {
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
        let old = st.bound.take();
        st.bound = target.map(|(mr, mr_off)| Bound {
            target: Target::Range {
                mr,
                mr_off,
                length: w.length,
            },
            base: w.addr,
            rights,
            zero_based,
            qp: self.type2.then_some(qp.serial),
        });
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
        let old = st.bound.take();
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
        let off = if b.zero_based {
            addr
        } else {
            addr.checked_sub(b.base).ok_or(Fault::Range)?
        };
        match off.checked_add(len) {
            Some(end) if end <= b.length() => {}
            _ => return Err(Fault::Range),
        }
        // Entered while bound, under the state lock deallocation takes before it closes the
        // gate; a bound MR cannot be deregistered.
        let enter = |mr: &Arc<MrShared>| -> Result<MrRef, Fault> {
            let w = Pass::enter(self).ok_or(Fault::Key)?;
            Ok(mr.enter().ok_or(Fault::Key)?.through(w))
        };
        match &b.target {
            Target::Range { mr, mr_off, .. } => Ok(Reach::One(enter(mr)?, (mr_off + off) as usize)),
            Target::Layout { kind, entries, .. } => {
                let mut pieces = KVVec::new();
                let (mut w, end) = (off, off + len);
                // Located once, then stepped element by element.
                let mut spot = layout::find(*kind, entries, w);
                while w < end {
                    // Bounded: a peer's READ may be 2 GiB long, of one-byte elements.
                    if pieces.len() == xmw::MAX_PIECES {
                        return Err(Fault::Range);
                    }
                    let s = spot.ok_or(Fault::Range)?;
                    let e = &entries[s.entry];
                    let n = (e.len - s.b).min(end - w);
                    let mr = &e.obj;
                    let moff = piece_offset(mr, e.addr(s.k) + s.b, n)?;
                    pieces
                        .push(
                            (enter(mr)?, moff as usize, n as usize),
                            GFP_KERNEL | __GFP_NOWARN,
                        )
                        .map_err(|_| Fault::Range)?;
                    w += n;
                    spot = layout::next(*kind, entries, s);
                }
                Ok(Reach::Pieces(pieces))
            }
        }
    }

    /// The ranges of a local access of `len` bytes at `addr` through this window's key `key`
    /// (an SGE of a QP of PD `pd`, `Documentation/xmw.rst`, "Local SGEs"): only an extended
    /// window's, bound under `key`; writing (`need` has `LOCAL_WRITE`) needs local write in
    /// its rights. The MRs are returned unheld, for the caller to fault in outside the
    /// window's lock and then enter; a range per element, [`xmw::MAX_PIECES`] at most.
    pub(crate) fn local(
        &self,
        pd: u64,
        key: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<KVVec<(Arc<MrShared>, usize, usize)>, Fault> {
        let st = self.state.lock();
        let b = st.bound.as_ref().ok_or(Fault::Key)?;
        let Target::Layout { kind, entries, .. } = &b.target else {
            return Err(Fault::Key);
        };
        if st.key != key || self.pd != pd {
            return Err(Fault::Key);
        }
        if need & access::LOCAL_WRITE != 0 && b.rights & access::LOCAL_WRITE == 0 {
            return Err(Fault::Access);
        }
        let off = addr.checked_sub(b.base).ok_or(Fault::Range)?;
        let end = match off.checked_add(len) {
            Some(end) if end <= b.length() => end,
            _ => return Err(Fault::Range),
        };
        let mut pieces = KVVec::new();
        let mut w = off;
        let mut spot = layout::find(*kind, entries, w);
        while w < end {
            if pieces.len() == xmw::MAX_PIECES {
                return Err(Fault::Range);
            }
            let s = spot.ok_or(Fault::Range)?;
            let e = &entries[s.entry];
            let n = (e.len - s.b).min(end - w);
            let moff = piece_offset(&e.obj, e.addr(s.k) + s.b, n)?;
            pieces
                .push(
                    (e.obj.clone(), moff as usize, n as usize),
                    GFP_KERNEL | __GFP_NOWARN,
                )
                .map_err(|_| Fault::Range)?;
            w += n;
            spot = layout::next(*kind, entries, s);
        }
        Ok(pieces)
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

    /// The MRs a shaped layout names, looked up in `tables`: each an MR of this PD granting
    /// non-contiguous binding, covering the rights the window gives, with the entry's
    /// footprint inside it. No window may be named yet: a window in a layout is depth 2, over
    /// the reported limit of 1 (an entry naming this window included).
    fn objects(&self, tables: &Tables, l: &Shaped) -> Result<KVec<Entry<Arc<MrShared>>>> {
        let writes =
            l.access & (access::REMOTE_WRITE | access::REMOTE_ATOMIC | access::LOCAL_WRITE);
        let mut entries = KVec::with_capacity(l.entries.len(), GFP_KERNEL_ACCOUNT)?;
        for e in l.entries.iter() {
            if keys::is_window(e.obj) {
                return Err(ELOOP);
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
            entries.push(e.with(mr), GFP_KERNEL_ACCOUNT)?;
        }
        Ok(entries)
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
        entries: KVec<Entry<Arc<MrShared>>>,
        key: u32,
    ) -> Result {
        // The budget again: it may have changed while the window was free.
        if st.freed || entries.len() > st.descriptors as usize {
            return Err(EINVAL);
        }
        for (n, e) in entries.iter().enumerate() {
            if !e.obj.add_window(tables) {
                entries.iter().take(n).for_each(|e| e.obj.remove_window());
                return Err(EINVAL);
            }
        }
        let old = st.bound.take();
        st.bound = Some(Bound {
            target: Target::Layout {
                kind: l.kind,
                entries,
                total: l.total,
            },
            base: l.base,
            // A layout's key is also an lkey: local write is one of its rights.
            rights: l.access & (RIGHTS | access::LOCAL_WRITE),
            zero_based: false,
            qp: self.type2.then_some(qp.serial),
        });
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
        &self,
        tables: &Tables,
        qp: &QpShared,
        x: &XBind,
        given: &[XEntry],
    ) -> Result<u64> {
        let l = self.shape(qp, x, given)?;
        let entries = self.objects(tables, &l)?;
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
                serials.push(e.obj.serial, GFP_KERNEL_ACCOUNT)?;
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
    fn bind_staged(&self, tables: &Tables, qp: &QpShared, w: &BindWr) -> Result<(), ()> {
        let l = {
            let mut st = self.state.lock();
            let s = st.staged.as_ref().ok_or(())?;
            if s.rkey != w.rkey || s.base != w.addr || s.total != w.length || s.access != w.access {
                return Err(());
            }
            st.staged.take().ok_or(())?
        };
        let entries = self.objects(tables, &l).map_err(|_| ())?;
        if entries.len() != l.serials.len()
            || entries
                .iter()
                .zip(l.serials.iter())
                .any(|(e, s)| e.obj.serial != *s)
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
