// SPDX-License-Identifier: GPL-2.0

//! Memory regions (rxe's `rxe_mr.c`): pinned user memory, the DMA MR of kernel PDs, fast
//! registrations of kernel memory ([`fast`]), access checks, and the copies and atomics the
//! engine performs on their memory.
//!
//! Keys, the tables and the lookups through keys are in `keys.rs`.

use crate::{
    device::{Device, Pd},
    gate::{Gate, Gated, Pass},
    ib::{
        hw_stats::{DriverAttrs, MrCounters},
        kmem,
        umem::{AtomicOp, Umem},
        verbs::{access, rereg},
    },
    keys::{self, Tables},
    limit::Token,
    mem::{self, copy_pages, Pages},
    mw::MwShared,
    odp::{src_side, CounterSets, Faults, Odp, OdpCounters, OdpUmem},
};
use core::ops::Deref;
use kernel::{
    impl_has_work, new_mutex, new_work,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc, Mutex,
    },
    workqueue::{Work, WorkItem},
};

pub(crate) use keys::MAX_MR;

pub(crate) mod fast;

/// Largest MR in bytes.
pub(crate) const MAX_MR_SIZE: u64 = 1 << 40;

/// Access flags rodp implements.
const SUPPORTED: u32 = access::HUGETLB
    | access::MW_BIND
    | access::LOCAL_WRITE
    | access::REMOTE_WRITE
    | access::REMOTE_READ
    | access::REMOTE_ATOMIC
    | access::ON_DEMAND
    | access::FLUSH_GLOBAL;

/// The bounce buffer of a copy in which kernel memory (a kernel consumer's DMA MR) takes part;
/// user memory, pinned or ODP, is copied page to page without one.
const BOUNCE: usize = 1024;

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
    /// On-demand paging, explicit or implicit: pages are faulted in when the engine touches
    /// them.
    Odp(Odp),
    /// A fast registration's blocks of kernel memory; offsets count from the registered iova.
    Fast(fast::Blocks),
}

/// What an MR keeps across re-registrations: the lock that orders window binds against
/// deregistration and re-registration, the number of windows bound, an MR of
/// `ib_alloc_mr`'s page list, and the grant of non-contiguous binding.
#[pin_data]
pub(crate) struct Anchor {
    #[pin]
    windows: Mutex<u32>,
    stage: Option<Arc<fast::Stage>>,
    /// Extended windows' layouts may name the MR (`IBV_ACCESS_BIND_MW_NONCONTIG`,
    /// `Documentation/xmw.rst`): set by [`Mr::grant_noncontig`], never cleared.
    noncontig: Atomic<bool>,
}

/// An MR as the engine sees it: one registration. Re-registering puts a new one in the table
/// under the same key. Accesses hold it through an [`MrRef`]; deregistration and
/// re-registration wait for those that found it.
#[pin_data]
pub(crate) struct MrShared {
    /// lkey = rkey.
    pub(crate) key: u32,
    /// Never reused (unlike keys and addresses): what a responder's fault outcome names the
    /// registration by without holding it (`engine::fault`).
    pub(crate) serial: u64,
    pub(crate) pd: u64,
    pub(crate) access: u32,
    pub(crate) iova: u64,
    pub(crate) length: u64,
    /// The user address the memory starts at (0 for kernel and implicit ODP memory).
    start: u64,
    /// Shared with the next registration when a re-registration can keep it.
    mem: Arc<Memory>,
    /// The access the memory was set up for (whether pages were pinned or fault writable).
    mem_access: u32,
    anchor: Arc<Anchor>,
    /// The accesses in flight (see [`MrRef`]).
    #[pin]
    gate: Gate,
}

/// Source of [`MrShared::serial`].
static NEXT_SERIAL: Atomic<u64> = Atomic::new(1);

impl Gated for MrShared {
    fn gate(&self) -> &Gate {
        &self.gate
    }
}

/// A registration in use by one access (a scatter entry of a transfer, a remote access):
/// deregistration and re-registration of the MR, and deallocation of the window the access
/// went through, wait until it drops. Taken only while the registration is its key's current
/// one, after the access's checks.
pub(crate) struct MrRef {
    mr: Pass<MrShared>,
    /// The window a remote access went through.
    _window: Option<Pass<MwShared>>,
    /// The window whose layout named that window, for an access through a nested window.
    _outer: Option<Pass<MwShared>>,
}

impl MrRef {
    /// The same access, made through the window `w`.
    pub(crate) fn through(self, w: Pass<MwShared>) -> Self {
        Self {
            mr: self.mr,
            _window: Some(w),
            _outer: None,
        }
    }

    /// The same access, made through the window `w` named by the layout of window `outer`
    /// (`Documentation/xmw.rst`, "Nesting"): deallocating either waits for it.
    pub(crate) fn through_nested(self, w: Pass<MwShared>, outer: Pass<MwShared>) -> Self {
        Self {
            mr: self.mr,
            _window: Some(w),
            _outer: Some(outer),
        }
    }

    /// Whether this holds `mr`.
    pub(crate) fn is(&self, mr: &Arc<MrShared>) -> bool {
        Arc::ptr_eq(self.mr.obj(), mr)
    }

    /// Whether `o` is an access to the same registration made the same way (through the same
    /// windows, which deallocation waits for).
    pub(crate) fn same(&self, o: &MrRef) -> bool {
        let w = |a: &Option<Pass<MwShared>>, b: &Option<Pass<MwShared>>| match (a, b) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a.obj(), b.obj()),
            _ => false,
        };
        self.is(o.mr.obj()) && w(&self._window, &o._window) && w(&self._outer, &o._outer)
    }

    /// The registration, to hold outside the access (see `engine::fault`).
    pub(crate) fn shared(&self) -> Arc<MrShared> {
        self.mr.obj().clone()
    }
}

impl Deref for MrRef {
    type Target = MrShared;

    fn deref(&self) -> &MrShared {
        &self.mr
    }
}

/// The driver data of an MR.
pub(crate) struct Mr {
    /// The key it was made with (a fast registration changes the key byte).
    key: u32,
    /// Its registrations' anchor: what tells them from another MR's at the same index.
    anchor: Arc<Anchor>,
    tables: Arc<Tables>,
    /// Set once deregistration took the MR out of the table.
    gone: Atomic<bool>,
    _token: Token,
}

/// Whether memory for `acc` must be writable (`ib_access_writable`).
fn writable(acc: u32) -> bool {
    acc & (access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_ATOMIC | access::MW_BIND)
        != 0
}

/// The rights of a user MR, as rodp keeps them: optional bits dropped, unknown ones refused,
/// the huge-page hint dropped (rodp translates 4 KiB pages whatever backs them; ib_core would
/// size an ODP umem's pages by it, and refuse it for implicit ODP).
fn user_access(acc: u32) -> Result<u32> {
    let acc = acc & !access::OPTIONAL;
    if acc & !SUPPORTED != 0 {
        return Err(EOPNOTSUPP);
    }
    Ok(acc & !access::HUGETLB)
}

/// Sets up the memory of a user MR: pinned, explicit ODP, or implicit ODP for `start` 0 and
/// `length` `u64::MAX`; returns it and the MR's length (an implicit MR reaches the process's
/// whole address space, and no further).
fn user_memory(
    dev: &Device,
    start: u64,
    length: u64,
    iova: u64,
    acc: u32,
) -> Result<(Memory, u64)> {
    let odp = acc & access::ON_DEMAND != 0;
    let implicit = odp && start == 0 && length == u64::MAX;
    if implicit && iova != 0 {
        // The parent's keys name user addresses as they are.
        return Err(EINVAL);
    }
    if !implicit && (length > MAX_MR_SIZE || iova.checked_add(length).is_none()) {
        return Err(EINVAL);
    }
    let mem = if odp {
        // Per-MR counts (for rdma netlink) and the device's totals.
        let counters = CounterSets {
            mr: OdpCounters::new()?,
            dev: dev.tables.odp.clone(),
        };
        Memory::Odp(if implicit {
            Odp::implicit(dev, acc, counters)?
        } else {
            Odp::explicit(dev, start, length, acc, counters)?
        })
    } else {
        Memory::Pinned(Umem::get(dev, start, length, acc)?)
    };
    let length = match &mem {
        Memory::Odp(o) => o.limit().unwrap_or(length),
        _ => length,
    };
    Ok((mem, length))
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
        let acc = user_access(acc)?;
        let token = dev.mrs.take()?;
        let (mem, length) = user_memory(dev, start, length, iova, acc)?;
        Self::insert(dev, pd, token, acc, (start, iova, length), mem, None)
    }

    /// The DMA MR of a kernel PD (`ib_alloc_pd`): all kernel memory, for local access only
    /// (rodp offers no global rkey).
    pub(crate) fn dma(dev: &Device, pd: &Pd, acc: u32) -> Result<(Self, u32)> {
        if acc & !access::LOCAL_WRITE != 0 {
            return Err(EOPNOTSUPP);
        }
        let token = dev.mrs.take()?;
        Self::insert(dev, pd, token, acc, (0, 0, u64::MAX), Memory::Kernel, None)
    }

    /// An MR of a kernel PD for fast registration (`ib_alloc_mr`) with room for `max_pages`
    /// blocks, reaching nothing until a registration (see [`fast`]).
    pub(crate) fn fast(dev: &Device, pd: &Pd, max_pages: u32) -> Result<(Self, u32)> {
        let stage = fast::Stage::new(max_pages)?;
        let token = dev.mrs.take()?;
        let none = fast::Blocks::none();
        Self::insert(
            dev,
            pd,
            token,
            0,
            (0, 0, 0),
            Memory::Fast(none),
            Some(stage),
        )
    }

    /// Starts the page list of an MR of [`Mr::fast`] afresh, in blocks of `size` bytes.
    pub(crate) fn map_start(&self, size: u32) -> Result {
        self.anchor.stage.as_ref().ok_or(EINVAL)?.start(size)
    }

    /// Adds the block at `addr` to the page list of an MR of [`Mr::fast`].
    pub(crate) fn map_page(&self, addr: u64) -> Result {
        self.anchor.stage.as_ref().ok_or(EINVAL)?.push(addr)
    }

    /// Enters a new MR with `range` = (start, iova, length) in the device's table; one with a
    /// page list (`stage`) is closed until a fast registration.
    fn insert(
        dev: &Device,
        pd: &Pd,
        token: Token,
        acc: u32,
        range: (u64, u64, u64),
        mem: Memory,
        stage: Option<Arc<fast::Stage>>,
    ) -> Result<(Self, u32)> {
        let pd_id = pd.data().id;
        let mem = Arc::new(mem, GFP_KERNEL)?;
        let closed = stage.is_some();
        let anchor = Arc::pin_init(
            pin_init!(Anchor {
                windows <- new_mutex!(0),
                stage,
                noncontig: Atomic::new(false),
            }),
            GFP_KERNEL,
        )?;
        let (start, iova, length) = range;
        let held = anchor.clone();
        let shared = dev.tables.insert_mr(|key| {
            let mr = Arc::pin_init(
                pin_init!(MrShared {
                    key,
                    serial: NEXT_SERIAL.fetch_add(1, Relaxed),
                    pd: pd_id,
                    access: acc,
                    iova,
                    length,
                    start,
                    mem,
                    mem_access: acc,
                    anchor: held,
                    gate <- Gate::new(),
                }),
                GFP_KERNEL,
            )?;
            if closed {
                mr.gate.shut();
            }
            Ok(mr)
        })?;
        let key = shared.key;
        Ok((
            Self {
                key,
                anchor,
                tables: dev.tables.clone(),
                gone: Atomic::new(false),
                _token: token,
            },
            key,
        ))
    }

    /// Deregisters the MR: `EBUSY` while windows are bound to it. Returns once no access
    /// through the key can happen any more: later lookups fail, and the accesses that found
    /// the MR before (a transfer's scatter entry, a peer's READ, WRITE or atomic) have finished.
    pub(crate) fn deregister(&self) -> Result {
        // A fast registration executing meanwhile replaces the registration: take that one.
        let cur = loop {
            let Some(cur) = self.shared() else {
                return Ok(());
            };
            let windows = cur.anchor.windows.lock();
            if *windows > 0 {
                return Err(EBUSY);
            }
            if self.tables.mrs.remove_if(keys::index(self.key), &cur) {
                self.gone.store(true, Relaxed);
                drop(windows);
                break cur;
            }
        };
        // Out of the table first, so every access either entered already or finds nothing.
        cur.gate.close();
        Ok(())
    }

    /// Re-registers the MR in place (`flags` of [`rereg`]; `pd` is the new or the same PD) and
    /// returns its key, which never changes. The memory is kept when neither the translation
    /// nor the paging mode changes and it is writable enough for the new rights; otherwise new
    /// memory is set up (pinned or faulted as a new registration would) before anything
    /// changes, so a failure leaves the MR as it was. `EBUSY` while windows are bound. Returns
    /// once the accesses that found the old registration (its translation, rights and PD) have
    /// finished; an access racing the swap fails as a deregistered key would.
    #[expect(clippy::too_many_arguments)]
    pub(crate) fn reregister(
        &self,
        dev: &Device,
        flags: u32,
        start: u64,
        length: u64,
        iova: u64,
        acc: u32,
        pd: &Pd,
    ) -> Result<u32> {
        if flags & !(rereg::TRANS | rereg::PD | rereg::ACCESS) != 0 {
            return Err(EOPNOTSUPP);
        }
        let cur = self.shared().ok_or(EINVAL)?;
        if matches!(*cur.mem, Memory::Kernel | Memory::Fast(_)) {
            return Err(EOPNOTSUPP);
        }
        if cur.windows() > 0 {
            return Err(EBUSY);
        }
        let acc = if flags & rereg::ACCESS != 0 {
            user_access(acc)?
        } else {
            cur.access
        };
        let same_paging = (acc ^ cur.mem_access) & access::ON_DEMAND == 0;
        let (mem, mem_access, range) = if flags & rereg::TRANS != 0 {
            let (m, len) = user_memory(dev, start, length, iova, acc)?;
            (Arc::new(m, GFP_KERNEL)?, acc, (start, iova, len))
        } else if same_paging && (!writable(acc) || writable(cur.mem_access)) {
            (
                cur.mem.clone(),
                cur.mem_access,
                (cur.start, cur.iova, cur.length),
            )
        } else {
            // The same range, pinned or faulted differently. An implicit MR covers the address
            // space and cannot be pinned.
            let implicit = matches!(&*cur.mem, Memory::Odp(o) if o.as_implicit().is_some());
            if implicit && acc & access::ON_DEMAND == 0 {
                return Err(EOPNOTSUPP);
            }
            let (s, l) = if implicit {
                (0, u64::MAX)
            } else {
                (cur.start, cur.length)
            };
            let (m, len) = user_memory(dev, s, l, cur.iova, acc)?;
            (Arc::new(m, GFP_KERNEL)?, acc, (s, cur.iova, len))
        };
        let (start, iova, length) = range;
        let (key, anchor) = (cur.key, cur.anchor.clone());
        let new = Arc::pin_init(
            pin_init!(MrShared {
                key,
                serial: NEXT_SERIAL.fetch_add(1, Relaxed),
                pd: pd.data().id,
                access: acc,
                iova,
                length,
                start,
                mem,
                mem_access,
                anchor,
                gate <- Gate::new(),
            }),
            GFP_KERNEL,
        )?;
        let windows = cur.anchor.windows.lock();
        if *windows > 0 {
            return Err(EBUSY);
        }
        self.tables.mrs.replace(keys::index(self.key), &cur, new)?;
        drop(windows);
        cur.gate.close();
        Ok(cur.key)
    }
}

impl Mr {
    /// What the engine sees of this MR: its current registration, under whatever key.
    fn shared(&self) -> Option<Arc<MrShared>> {
        self.tables
            .mrs
            .get(keys::index(self.key))
            .filter(|m| core::ptr::eq(&*m.anchor, &*self.anchor))
    }

    /// Grants extended memory windows' layouts the right to name this MR, the proposal's
    /// `IBV_ACCESS_BIND_MW_NONCONTIG` (`RODP_METHOD_MR_XMW_GRANT`; the kernel refuses access
    /// bits it does not know at registration, so the grant comes by its own call). It lasts
    /// until deregistration, through re-registrations, like the MR's key.
    pub(crate) fn grant_noncontig(&self) -> Result {
        if self.gone.load(Relaxed) {
            return Err(EINVAL);
        }
        self.anchor.noncontig.store(true, Relaxed);
        Ok(())
    }

    /// For `rdma -dd resource show mr`: `odp` (`explicit` or `implicit`) and an implicit
    /// MR's `odp_children`, for ODP MRs; `windows`, the number of memory windows bound, when
    /// there are any; `bind_noncontig` 1 once [granted](Mr::grant_noncontig).
    pub(crate) fn fill_attrs(&self, out: &mut DriverAttrs) -> Result {
        let Some(s) = self.shared() else {
            return Ok(());
        };
        if self.anchor.noncontig.load(Relaxed) {
            out.u32(c"bind_noncontig", 1)?;
        }
        if let Memory::Odp(o) = &*s.mem {
            match o.as_implicit() {
                Some(i) => {
                    out.string(c"odp", c"implicit")?;
                    out.u32(c"odp_children", i.children().try_into().unwrap_or(u32::MAX))?;
                }
                None => out.string(c"odp", c"explicit")?,
            }
        }
        match s.windows() {
            0 => Ok(()),
            n => out.u32(c"windows", n),
        }
    }

    /// For `rdma statistic mr show`, as mlx5 names them: `page_faults` (pages),
    /// `page_faults_handled` (faults), `page_invalidations` (pages),
    /// `page_invalidations_handled` (callbacks), `page_prefetch` (pages); ODP MRs only.
    pub(crate) fn fill_counters(&self, out: &mut MrCounters) -> Result {
        let Some(s) = self.shared() else {
            return Ok(());
        };
        let Memory::Odp(o) = &*s.mem else {
            return Ok(());
        };
        let c = o.counters();
        out.counter(c"page_faults", c.fault_pages.load(Relaxed))?;
        out.counter(c"page_faults_handled", c.faults.load(Relaxed))?;
        out.counter(c"page_invalidations", c.invalidation_pages.load(Relaxed))?;
        out.counter(c"page_invalidations_handled", c.invalidations.load(Relaxed))?;
        out.counter(c"page_prefetch", c.prefetch_pages.load(Relaxed))
    }
}

/// The checked ranges of one `ibv_advise_mr` prefetch, run at once (with the flush flag) or
/// on the module's workqueue.
pub(crate) struct Prefetch {
    ranges: KVec<(Arc<MrShared>, usize, usize)>,
    write: bool,
    fault: bool,
}

/// A prefetch queued on the module's workqueue, holding a worker of its user's share from
/// being queued until it is done (`engine::share`).
#[pin_data]
struct Deferred {
    prefetch: Prefetch,
    _worker: crate::engine::Held,
    #[pin]
    work: Work<Deferred>,
}

impl_has_work! {
    impl HasWork<Self> for Deferred { self.work }
}

impl WorkItem for Deferred {
    type Pointer = Pin<KBox<Deferred>>;

    fn run(this: Pin<KBox<Deferred>>) {
        // Nobody waits for deferred advice: a range that cannot be faulted in (a hole) stays
        // unmapped, counted in `num_failed_resolutions`, and its first access fails as usual.
        let _ = this.prefetch.run_now();
    }
}

impl Prefetch {
    /// An empty prefetch of readable (`write`: writable) pages; `fault: false` maps only the
    /// pages present.
    pub(crate) fn new(write: bool, fault: bool) -> Self {
        Self {
            ranges: KVec::new(),
            write,
            fault,
        }
    }

    /// Adds `len` bytes at `addr` through `key`, checked against `pd` as ib_core and users
    /// expect: an unknown key or another PD's MR `ENOENT` (as mlx5), a write without local
    /// write `EACCES`, a range outside the MR `EFAULT`, an MR that is not ODP `EINVAL` (as rxe).
    pub(crate) fn add(
        &mut self,
        tables: &Tables,
        pd: u64,
        key: u32,
        addr: u64,
        len: u32,
    ) -> Result {
        let mr = tables.mr(key).ok_or(ENOENT)?;
        let need = if self.write { access::LOCAL_WRITE } else { 0 };
        let off = mr.check(pd, addr, len.into(), need).map_err(|f| match f {
            Fault::Key => ENOENT,
            Fault::Access => EACCES,
            Fault::Range => EFAULT,
        })?;
        if !matches!(*mr.mem, Memory::Odp(_)) {
            return Err(EINVAL);
        }
        self.ranges.push((mr, off, len as usize), GFP_KERNEL)?;
        Ok(())
    }

    /// Maps every range now.
    pub(crate) fn run_now(&self) -> Result {
        for (mr, off, len) in self.ranges.iter() {
            if let Memory::Odp(o) = &*mr.mem {
                o.prefetch(*off, *len, self.write, self.fault)?;
            }
        }
        Ok(())
    }

    /// Maps the ranges on the module's workqueue (the device's `tables`); the MRs stay alive
    /// until it is done. When the calling user's share of the workers is taken, they are mapped
    /// now instead, by the caller (with the outcome of deferred advice: none).
    pub(crate) fn queue(self, tables: &Arc<Tables>) -> Result {
        let Some(worker) = crate::engine::take_worker(tables, crate::engine::current_user()) else {
            let _ = self.run_now();
            return Ok(());
        };
        let d = KBox::pin_init(
            pin_init!(Deferred {
                prefetch: self,
                _worker: worker,
                work <- new_work!("rodp::mr::Deferred::work"),
            }),
            GFP_KERNEL,
        )?;
        // A new work item is never queued already.
        crate::ib::wq::get().enqueue(d);
        Ok(())
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // An MR ib_core never took (its allocation failed) was not deregistered; its key may
        // have been guessed meanwhile.
        if !self.gone.load(Relaxed) {
            if let Some(cur) = self.shared() {
                self.tables.mrs.remove_if(keys::index(self.key), &cur);
                cur.gate.close();
            }
        }
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
        if matches!(*self.mem, Memory::Kernel) && !kmem::valid(off, len as usize) {
            return Err(Fault::Range);
        }
        Ok(off as usize)
    }

    /// Holds this registration for an access, unless it was deregistered or replaced.
    pub(crate) fn enter(self: &Arc<Self>) -> Option<MrRef> {
        Some(MrRef {
            mr: Pass::enter(self)?,
            _window: None,
            _outer: None,
        })
    }

    /// Counts a window bound to this registration; `false` when it is no longer the key's
    /// current one (deregistered or re-registered meanwhile).
    pub(crate) fn add_window(self: &Arc<Self>, tables: &Tables) -> bool {
        let mut windows = self.anchor.windows.lock();
        if !tables.mrs.holds(keys::index(self.key), self) {
            return false;
        }
        *windows += 1;
        true
    }

    /// Uncounts a window that was bound to this registration.
    pub(crate) fn remove_window(&self) {
        let mut windows = self.anchor.windows.lock();
        *windows = windows.saturating_sub(1);
    }

    /// Whether extended windows' layouts may name the MR ([`Mr::grant_noncontig`]).
    pub(crate) fn noncontig(&self) -> bool {
        self.anchor.noncontig.load(Relaxed)
    }

    /// Number of windows bound.
    pub(crate) fn windows(&self) -> u32 {
        *self.anchor.windows.lock()
    }

    /// Copies `data` to offset `off` (as returned by [`MrShared::check`]); without `fault`,
    /// into ODP pages mapped already (see [`Faults`]). ODP memory is written 64 KiB at most
    /// under one hold of its umem's mutex (`with_chunks`); a write that fails at a page not
    /// mapped may have written the bytes before it.
    pub(crate) fn write(&self, off: usize, data: &[u8], fault: bool) -> Result {
        match &*self.mem {
            Memory::Pinned(u) => u.pages().write(off, data),
            Memory::Kernel => kmem::write(off as u64, data),
            Memory::Fast(b) => b.write(off, data),
            Memory::Odp(o) => o.each_chunk(off, data.len(), true, fault, |v, voff, at, vn| {
                v.write(voff, &data[at..at + vn])
            }),
        }
    }

    /// Copies `out.len()` bytes at offset `off` into `out`; without `fault`, from ODP pages
    /// mapped already (see [`Faults`]), 64 KiB at most under one hold of a umem's mutex.
    pub(crate) fn read(&self, off: usize, out: &mut [u8], fault: bool) -> Result {
        match &*self.mem {
            Memory::Pinned(u) => u.pages().read(off, out),
            Memory::Kernel => kmem::read(off as u64, out),
            Memory::Fast(b) => b.read(off, out),
            Memory::Odp(o) => o.each_chunk(off, out.len(), false, fault, |v, voff, at, vn| {
                v.read(voff, &mut out[at..at + vn])
            }),
        }
    }

    /// Whether the memory is paged on demand (explicit or implicit ODP).
    pub(crate) fn is_odp(&self) -> bool {
        matches!(&*self.mem, Memory::Odp(_))
    }

    /// Faults an ODP range in (for a whole message: every page mapped once, see
    /// [`crate::odp::OdpUmem::fault`]); nothing to do for other memory.
    pub(crate) fn touch(&self, off: usize, len: usize, write: bool) -> Result {
        match &*self.mem {
            Memory::Odp(o) => o.each(off, len, |u, uoff, _, n| u.fault(uoff, n, write)),
            _ => Ok(()),
        }
    }

    /// Whether an ODP range is mapped (writable when `write`) without faulting anything in:
    /// [`crate::odp::UNMAPPED`] when a page (or an implicit MR's child) is missing, `EFAULT`
    /// for a write to memory that cannot be written. Other memory is always mapped.
    pub(crate) fn mapped(&self, off: usize, len: usize, write: bool) -> Result {
        match &*self.mem {
            Memory::Odp(o) => o.each_in(off, len, false, |u, uoff, _, n| {
                u.with_pages(uoff, n, write, false, |_| Ok(()))
            }),
            _ => Ok(()),
        }
    }

    /// Copies `len` bytes from `src` at `src_off` to `off`: page to page between pinned and ODP
    /// memory (holding the ODP umems' mutexes, in address order, up to 64 KiB at a time),
    /// through a bounce buffer when kernel memory takes part. A side `faults` does not let
    /// fault uses only its ODP pages mapped already and fails the copy at one that is not
    /// (bytes before it may be copied) with [`crate::odp::UNMAPPED`] for the destination's,
    /// [`crate::odp::UNMAPPED_SRC`] for the source's.
    pub(crate) fn copy_from(
        &self,
        off: usize,
        src: &MrShared,
        src_off: usize,
        len: usize,
        faults: Faults,
    ) -> Result {
        match (&*self.mem, &*src.mem) {
            (Memory::Pinned(d), Memory::Pinned(s)) => {
                return d.pages().copy_from(off, s.pages(), src_off, len);
            }
            (Memory::Odp(d), Memory::Pinned(s)) => {
                return d.each_chunk(off, len, true, faults.dst, |v, voff, at, vn| {
                    copy_pages(v, voff, s.pages(), src_off + at, vn)
                });
            }
            (Memory::Pinned(d), Memory::Odp(s)) => {
                return s
                    .each_chunk(src_off, len, false, faults.src, |v, voff, at, vn| {
                        copy_pages(d.pages(), off + at, v, voff, vn)
                    })
                    .map_err(src_side);
            }
            (Memory::Odp(d), Memory::Odp(s)) => {
                return d.each_in(off, len, faults.dst, |du, duoff, dpos, dn| {
                    // The copy tells the sides apart; a missing child of the source's
                    // implicit MR is the source's.
                    let mut copied = Ok(());
                    let r = s.each_in(src_off + dpos, dn, faults.src, |su, suoff, spos, sn| {
                        copied = OdpUmem::copy(du, duoff + spos, su, suoff, sn, faults);
                        copied
                    });
                    copied.and(r.map_err(src_side))
                });
            }
            _ => {}
        }
        if faults.src {
            src.touch(src_off, len, false)?;
        }
        if faults.dst {
            self.touch(off, len, true)?;
        }
        let mut bounce = [0u8; BOUNCE];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(bounce.len());
            src.read(src_off + done, &mut bounce[..n], faults.src)
                .map_err(src_side)?;
            self.write(off + done, &bounce[..n], faults.dst)?;
            done += n;
        }
        Ok(())
    }

    /// Copies `count` elements of `len` bytes from `src`, element `k` from `src_off + k *
    /// src_stride` to `off + k * stride` (a gather from or scatter into an extended window's
    /// run of elements): between pinned memory checked once and copied page to page (see
    /// [`crate::mem::copy_strided`]), else element by element as [`MrShared::copy_from`].
    #[expect(clippy::too_many_arguments)]
    pub(crate) fn copy_strided_from(
        &self,
        off: usize,
        stride: usize,
        src: &MrShared,
        src_off: usize,
        src_stride: usize,
        len: usize,
        count: usize,
        faults: Faults,
    ) -> Result {
        if let (Memory::Pinned(d), Memory::Pinned(s)) = (&*self.mem, &*src.mem) {
            let (d, s) = (d.pages(), s.pages());
            return mem::copy_strided(d, off, stride, s, src_off, src_stride, len, count);
        }
        for k in 0..count {
            self.copy_from(off + k * stride, src, src_off + k * src_stride, len, faults)?;
        }
        Ok(())
    }

    /// Performs `op` on the 64-bit word at offset `off`; returns its old value. The DMA MR's
    /// kernel memory takes no atomics (it grants no remote access); a fast registration's
    /// does. Without `fault`, an ODP page must be mapped already (else
    /// [`crate::odp::UNMAPPED`]).
    pub(crate) fn atomic(&self, off: usize, op: AtomicOp, fault: bool) -> Result<u64> {
        match &*self.mem {
            Memory::Pinned(u) => u.pages().atomic(off, op),
            Memory::Kernel => Err(EINVAL),
            Memory::Fast(b) => b.atomic(off, op),
            Memory::Odp(o) => {
                // An aligned word never crosses a child boundary: one piece.
                let mut old = 0;
                o.each_in(off, 8, fault, |u, uoff, _, _| {
                    old = u.with_pages(uoff, 8, true, fault, |v| v.atomic(uoff, op))?;
                    Ok(())
                })?;
                Ok(old)
            }
        }
    }
}
