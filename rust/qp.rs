// SPDX-License-Identifier: GPL-2.0

//! Queue pairs (rxe's `rxe_qp.c`): creation with the shared send and receive rings, the IBA
//! state machine, attributes, flushing, and the send doorbell that wakes the engine.
//!
//! A kernel consumer's QP (ib_mad's QP1 among them) has the same rings, in kernel memory: its
//! `post_send` and `post_recv` write WQEs into them exactly as the rxe provider does from user
//! space, so the engine serves both alike.

use crate::{
    cq::CqShared,
    device::{Device, Pd, UContext},
    engine::{Answer, FaultState, Peer, RcRequester, RcResponder, Scratch, Seg, Ticket},
    ib::{
        abi::{self, RecvWqe, SendWqe, Sge, Wc},
        event::Events,
        kmem,
        udata::Udata,
        verbs::{
            self, qp_mask, send_flags, Event, QpAttr, QpCap, QpInit, QpState, QpType, RecvWr,
            Route, SendWr, WcStatus, WrOpcode,
        },
        wq,
    },
    keys::Tables,
    limit::Token,
    queue::Queue,
    srq::{recv_wqe_size, SrqShared},
};
use core::cell::Cell;
use kernel::{
    impl_has_hr_timer, impl_has_work, new_mutex, new_spinlock, new_spinlock_irq, new_work,
    prelude::*,
    sync::{
        atomic::{Acquire, Atomic, Full, Relaxed, Release},
        Arc, ArcBorrow, Mutex, SpinLock, SpinLockIrq,
    },
    time::{
        hrtimer::{
            ArcHrTimerHandle, HrTimer, HrTimerCallback, HrTimerCallbackContext, HrTimerRestart,
            RelativeMode,
        },
        Monotonic,
    },
    workqueue::{self, Work, WorkItem},
};

/// Maximum number of QPs per device.
pub(crate) const MAX_QP: u32 = 1 << 16;
/// Largest send or receive queue.
pub(crate) const MAX_QP_WR: u32 = 1 << 14;
/// Scatter/gather entries per WR.
pub(crate) const MAX_SGE: u32 = 32;
/// Inline data bytes per send WR.
pub(crate) const MAX_INLINE: u32 = 512;
/// Outstanding RDMA reads and atomics per QP (as rxe).
pub(crate) const MAX_RD_ATOMIC: u32 = 128;
/// First QP number handed out (0 and 1 are the special QPs; rxe starts at 16).
pub(crate) const MIN_QPN: u32 = 16;
/// The number of the GSI QP.
const GSI_QPN: u32 = 1;
/// Last QP number (24 bits).
pub(crate) const MAX_QPN: u32 = (1 << 24) - 1;

/// A receive WQE taken from a ring: its id and scatter list.
pub(crate) struct RecvSlot {
    /// Consumer's id.
    pub(crate) wr_id: u64,
    /// Where the data goes.
    pub(crate) sges: KVec<Sge>,
    buf: KVec<u8>,
}

impl RecvSlot {
    /// Room for WQEs of up to `max_sge` entries.
    pub(crate) fn new(max_sge: u32) -> Result<Self> {
        Ok(Self {
            wr_id: 0,
            sges: KVec::with_capacity(max_sge as usize, GFP_KERNEL)?,
            buf: KVec::from_elem(0u8, recv_wqe_size(max_sge), GFP_KERNEL)?,
        })
    }

    /// Loads slot `i` of `q`, a ring of WQEs of at most `max_sge` entries.
    pub(crate) fn load(&mut self, q: &Queue, i: u32, max_sge: u32) -> Result {
        let n = self.buf.len().min(q.elem_size());
        q.read(i, &mut self.buf[..n])?;
        let w = RecvWqe::parse(&self.buf);
        if w.num_sge > max_sge || recv_wqe_size(w.num_sge) > n {
            return Err(EINVAL);
        }
        self.wr_id = w.wr_id;
        self.sges.clear();
        for k in 0..w.num_sge as usize {
            self.sges
                .push(Sge::parse(&self.buf, abi::RECV_WQE_HEADER, k), GFP_KERNEL)?;
        }
        Ok(())
    }
}

/// The send side: ring and the requester's progress.
pub(crate) struct SendSide {
    pub(crate) queue: Option<Arc<Queue>>,
    /// The kernel's consumer index.
    pub(crate) cons: u32,
    /// Scratch space for one WQE.
    pub(crate) buf: KVec<u8>,
    /// RNR retries left for the WQE at the head (reset per WQE).
    pub(crate) rnr_left: Option<u8>,
    /// Transport retries left for the WQE at the head (reset per WQE).
    pub(crate) retry_left: Option<u8>,
    /// The connected peer (RC) and the attribute generation it was resolved for.
    pub(crate) peer: Option<(Peer, u64)>,
    /// The GID this QP sends from (its route's `sgid_index`, looked up by `modify`): the source
    /// GID its RC messages carry.
    pub(crate) sgid: [u8; 16],
    /// Whether the SQ-drained event was raised for the current SQD period.
    pub(crate) drained: bool,
    /// The requester's copy of the attributes, and the generation it was taken at.
    pub(crate) attr: QpAttr,
    pub(crate) attr_gen: Option<u64>,
    /// Reused for every WQE.
    pub(crate) scratch: Scratch,
    /// The RNR or retransmission timer the WQE at the head waits for; dropping it cancels it.
    pub(crate) backoff: Option<ArcHrTimerHandle<QpShared>>,
    /// The WQE at the head waits for a responder's fault (`Reply::Wait`): an RNR timer (RC)
    /// or the retransmission timer (UC) bounds the wait, the fault's end runs it earlier.
    pub(crate) waiting: bool,
    /// What the WQE at the head knows of that fault (reset per WQE).
    pub(crate) ticket: Cell<Ticket>,
    /// The number of the fault it waited for when it last ran (0: none).
    pub(crate) wait_seq: u64,
    /// RC with a peer on another host: PSNs and the message in flight.
    pub(crate) wire: RcRequester,
}

/// The receive side: ring (none with an SRQ) and the responder's scratch slot.
pub(crate) struct RecvSide {
    pub(crate) queue: Option<Arc<Queue>>,
    /// The kernel's consumer index.
    pub(crate) cons: u32,
    /// Whether the first message since RTR was seen (`IB_EVENT_COMM_EST`).
    pub(crate) established: bool,
    /// The connected peer (RC) as `modify` last set it, `dest_qp_num` and the route's `dgid`:
    /// the only source the responder accepts messages from (a copy, so that the responder
    /// takes no attribute lock).
    pub(crate) peer: (u32, [u8; 16]),
    /// The GID the QP's route sends from (its `sgid_index`, as `modify` last set it): the only
    /// destination the responder takes a peer's messages at (another of the host's addresses
    /// reaches the device too, rxe's `check_addr` refuses it as well).
    pub(crate) local: [u8; 16],
    /// The receive WQE being filled (own ring or SRQ).
    pub(crate) slot: RecvSlot,
    /// Whether `slot` holds a WQE taken from the ring that is not completed yet: a message
    /// that had to be delivered again (the requester's pages went away, see `engine::resp`)
    /// left it, and the next message that needs a receive WQE fills it. A flush completes it.
    pub(crate) pending: bool,
    /// Its resolved scatter list.
    pub(crate) segs: KVec<Seg>,
    /// RC with a peer on another host: the expected PSN and the message being received.
    pub(crate) wire: RcResponder,
}

/// Source of [`QpShared::serial`].
static NEXT_SERIAL: Atomic<u64> = Atomic::new(1);

/// A QP as the engine sees it.
#[pin_data]
pub(crate) struct QpShared {
    /// QP number.
    pub(crate) qpn: u32,
    /// Never reused (unlike QP numbers): what a type 2B window bound to this QP remembers.
    pub(crate) serial: u64,
    /// Transport.
    pub(crate) qp_type: QpType,
    /// PD identity.
    pub(crate) pd: u64,
    /// Whether every send WR completes.
    pub(crate) sig_all: bool,
    /// A kernel consumer's QP: its UD WQEs carry their address (see [`abi::Av`]).
    pub(crate) kernel: bool,
    /// Limits of the send ring.
    pub(crate) max_send_sge: u32,
    /// Inline bytes per send WR.
    pub(crate) max_inline: u32,
    /// Scatter/gather entries per receive WR.
    pub(crate) max_recv_sge: u32,
    /// Completions of sends.
    pub(crate) scq: Arc<CqShared>,
    /// Completions of receives.
    pub(crate) rcq: Arc<CqShared>,
    /// Shared receive queue, if attached.
    pub(crate) srq: Option<Arc<SrqShared>>,
    /// The owning device's keys, AHs and QPs.
    pub(crate) tables: Arc<Tables>,
    /// The user whose share of the engine's workers this QP's work uses
    /// (`engine::current_user` when it was created; `None`: root or a kernel consumer).
    pub(crate) user: Option<u32>,
    /// `QpState` as `u32`; changed under `attrs`, read anywhere.
    state: Atomic<u32>,
    /// Responder view of attributes, readable without the `attrs` lock.
    pub(crate) access: Atomic<u32>,
    /// Q_Key (UD).
    pub(crate) qkey: Atomic<u32>,
    /// RNR NAK timer code.
    pub(crate) min_rnr_timer: Atomic<u32>,
    /// Reads and atomics accepted as responder (0: none).
    pub(crate) max_dest_rd_atomic: Atomic<u32>,
    /// The path MTU (`enum ib_mtu`), as the responder holds packets to it.
    pub(crate) path_mtu: Atomic<u32>,
    /// The answer to the RC message in flight to a peer on another host (`engine::rc`).
    #[pin]
    pub(crate) answer: SpinLock<Answer>,
    /// Changes whenever the attributes or state do, so the requester re-resolves its peer.
    generation: Atomic<u64>,
    /// Attributes set by `modify_qp`; the requester reads a copy.
    #[pin]
    pub(crate) attrs: Mutex<QpAttr>,
    #[pin]
    pub(crate) sq: Mutex<SendSide>,
    #[pin]
    pub(crate) rq: Mutex<RecvSide>,
    #[pin]
    work: Work<QpShared>,
    /// Faults of this QP's own ODP memory that its responder met (`engine::fault`): taken
    /// under `rq`, never held across a fault.
    #[pin]
    pub(crate) fault: Mutex<FaultState>,
    /// Runs those faults, on the module's workqueue.
    #[pin]
    fault_work: Work<QpShared, 1>,
    /// Answers a peer's long READ a burst at a time, then the requests that came meanwhile
    /// (`engine::rc::respond`).
    #[pin]
    resp_work: Work<QpShared, 2>,
    /// Wakes the requester when a backoff ends.
    #[pin]
    timer: HrTimer<QpShared>,
    /// Whether `timer` was armed and has not fired yet; meaningful only while
    /// `SendSide::backoff` holds the timer's handle.
    pub(crate) backoff_armed: Atomic<bool>,
    pub(crate) events: Arc<Events>,
}

impl_has_work! {
    impl HasWork<Self> for QpShared { self.work }
    impl HasWork<Self, 1> for QpShared { self.fault_work }
    impl HasWork<Self, 2> for QpShared { self.resp_work }
}

impl_has_hr_timer! {
    impl HasHrTimer<Self> for QpShared { mode: RelativeMode<Monotonic>, field: self.timer }
}

impl HrTimerCallback for QpShared {
    type Pointer<'a> = Arc<QpShared>;

    fn run(this: ArcBorrow<'_, Self>, _ctx: HrTimerCallbackContext<'_, Self>) -> HrTimerRestart {
        crate::engine::backoff_expired(this)
    }
}

impl WorkItem for QpShared {
    type Pointer = Arc<QpShared>;

    fn run(this: Arc<QpShared>) {
        crate::engine::run_send_queue(&this);
    }
}

impl WorkItem<1> for QpShared {
    type Pointer = Arc<QpShared>;

    fn run(this: Arc<QpShared>) {
        crate::engine::run_fault(&this);
    }
}

impl WorkItem<2> for QpShared {
    type Pointer = Arc<QpShared>;

    fn run(this: Arc<QpShared>) {
        // A kernel consumer's READ responses may be what reclaim waits for, as the inbox's.
        let _noio = wq::NoIo::begin();
        crate::engine::respond(&this);
    }
}

/// The driver data of a QP.
pub(crate) struct Qp {
    pub(crate) shared: Arc<QpShared>,
    init: QpInit,
    /// The producer side of a kernel consumer's rings.
    kernel: Option<Pin<KBox<KernelPost>>>,
    _token: Token,
}

/// One ring a kernel consumer posts to (a QP's or an SRQ's), and room to build a WQE.
pub(crate) struct Producer {
    pub(crate) queue: Arc<Queue>,
    buf: KVec<u8>,
}

impl Producer {
    pub(crate) fn new(queue: &Arc<Queue>) -> Result<Self> {
        Ok(Self {
            queue: queue.clone(),
            buf: KVec::from_elem(0u8, queue.elem_size(), GFP_KERNEL)?,
        })
    }

    /// Publishes the WQE built in `buf` (`len` bytes); `ENOMEM` when the ring is full.
    fn push(&mut self, len: usize) -> Result {
        let q = &self.queue;
        // Only this producer (under its lock) and a reset to RESET move the published index.
        let prod = q.producer();
        let next = q.next(prod);
        if next == q.consumer() {
            return Err(ENOMEM);
        }
        q.write(prod, self.buf.get(..len).ok_or(EINVAL)?)?;
        q.set_producer(next);
        Ok(())
    }

    /// Publishes a receive WQE for `wr` (its SGE count checked by the caller).
    pub(crate) fn push_recv(&mut self, wr: &RecvWr<'_>) -> Result {
        let n = wr.sges.len();
        let b = &mut self.buf;
        RecvWqe {
            wr_id: wr.wr_id,
            num_sge: n as u32,
        }
        .write(b);
        for (idx, g) in wr.sges.iter().enumerate() {
            g.write(b, abi::RECV_WQE_HEADER, idx);
        }
        self.push(recv_wqe_size(n as u32))
    }
}

/// The producer side of a kernel consumer's QP; posting may happen in atomic context.
#[pin_data]
struct KernelPost {
    #[pin]
    send: SpinLockIrq<Producer>,
    /// `None` with an SRQ.
    #[pin]
    recv: SpinLockIrq<Option<Producer>>,
}

/// Size of a send WQE with room for `sge` entries or `inline` bytes.
pub(crate) fn send_wqe_size(sge: u32, inline: u32) -> usize {
    abi::SEND_WQE_HEADER + (sge as usize * abi::SGE_SIZE).max(inline as usize)
}

fn check_cap(cap: &QpCap, has_srq: bool) -> Result {
    if cap.max_send_wr > MAX_QP_WR || cap.max_send_sge > MAX_SGE || cap.max_inline_data > MAX_INLINE
    {
        return Err(EINVAL);
    }
    if !has_srq && (cap.max_recv_wr > MAX_QP_WR || cap.max_recv_sge > MAX_SGE) {
        return Err(EINVAL);
    }
    Ok(())
}

impl Qp {
    /// Creates an RC or UD QP with its rings, or for a kernel consumer also the GSI QP.
    #[expect(clippy::too_many_arguments)]
    pub(crate) fn new(
        dev: &Device,
        pd: &Pd,
        ctx: Option<&UContext>,
        init: &mut QpInit,
        cqs: (&Arc<CqShared>, &Arc<CqShared>),
        srq: Option<&Arc<SrqShared>>,
        events: &Arc<Events>,
        mut udata: Option<&mut Udata<'_>>,
    ) -> Result<(Self, u32)> {
        match init.qp_type {
            QpType::Rc | QpType::Uc | QpType::Ud => {}
            QpType::Gsi if ctx.is_none() => {}
            _ => return Err(EOPNOTSUPP),
        }
        if init.create_flags != 0 {
            return Err(EOPNOTSUPP);
        }
        check_cap(&init.cap, init.has_srq)?;
        if udata
            .as_ref()
            .is_some_and(|u| u.outlen() < 2 * abi::MmInfo::SIZE)
        {
            return Err(EINVAL);
        }
        let token = dev.qps.take()?;
        let cap = &mut init.cap;
        let sq = Arc::new(
            Queue::new(
                ctx,
                cap.max_send_wr,
                send_wqe_size(cap.max_send_sge, cap.max_inline_data),
            )?,
            GFP_KERNEL,
        )?;
        cap.max_send_wr = sq.capacity();
        let max_recv_sge = cap.max_recv_sge.max(1);
        let rq = if init.has_srq {
            cap.max_recv_wr = 0;
            cap.max_recv_sge = 0;
            None
        } else {
            let q = Queue::new(ctx, cap.max_recv_wr, recv_wqe_size(max_recv_sge))?;
            cap.max_recv_wr = q.capacity();
            Some(Arc::new(q, GFP_KERNEL)?)
        };
        if let Some(u) = udata.as_mut() {
            let rq_mi = rq.as_deref().map(Queue::mm_info).unwrap_or_default();
            u.write(&abi::create_qp_resp(rq_mi, sq.mm_info()))?;
        }
        let kernel = match udata {
            Some(_) => None,
            None => {
                let send = Producer::new(&sq)?;
                let recv = rq.as_ref().map(Producer::new).transpose()?;
                Some(KBox::pin_init(
                    pin_init!(KernelPost {
                        send <- new_spinlock_irq!(send),
                        recv <- new_spinlock_irq!(recv),
                    }),
                    GFP_KERNEL,
                )?)
            }
        };
        let buf = KVec::from_elem(0u8, sq.elem_size(), GFP_KERNEL)?;
        let recv_sge = srq.map_or(max_recv_sge, |s| s.max_sge);
        let recv_slot = RecvSlot::new(recv_sge)?;
        let segs = KVec::with_capacity(recv_sge as usize, GFP_KERNEL)?;
        let scratch = Scratch::new(init.cap.max_send_sge.max(1))?;
        let i = *init;
        let pd = pd.data().id;
        let is_kernel = kernel.is_some();
        let make = |qpn| {
            Arc::pin_init(
                pin_init!(QpShared {
                    qpn,
                    serial: NEXT_SERIAL.fetch_add(1, Relaxed),
                    qp_type: i.qp_type,
                    pd,
                    sig_all: i.sig_all,
                    kernel: is_kernel,
                    max_send_sge: i.cap.max_send_sge,
                    max_inline: i.cap.max_inline_data,
                    max_recv_sge,
                    scq: cqs.0.clone(),
                    rcq: cqs.1.clone(),
                    srq: srq.cloned(),
                    tables: dev.tables.clone(),
                    user: if is_kernel { None } else { crate::engine::current_user() },
                    state: Atomic::new(QpState::Reset as u32),
                    access: Atomic::new(0),
                    qkey: Atomic::new(0),
                    min_rnr_timer: Atomic::new(0),
                    max_dest_rd_atomic: Atomic::new(0),
                    path_mtu: Atomic::new(0),
                    answer <- new_spinlock!(Answer::default()),
                    generation: Atomic::new(0),
                    attrs <- new_mutex!(initial_attr(&i)),
                    sq <- new_mutex!(SendSide {
                        queue: Some(sq),
                        cons: 0,
                        buf,
                        rnr_left: None,
                        retry_left: None,
                        peer: None,
                        sgid: [0; 16],
                        drained: false,
                        attr: initial_attr(&i),
                        attr_gen: None,
                        scratch,
                        backoff: None,
                        waiting: false,
                        ticket: Cell::new(Ticket::default()),
                        wait_seq: 0,
                        wire: RcRequester::default(),
                    }),
                    rq <- new_mutex!(RecvSide {
                        queue: rq,
                        cons: 0,
                        established: false,
                        peer: (0, [0; 16]),
                        local: [0; 16],
                        slot: recv_slot,
                        pending: false,
                        segs,
                        wire: RcResponder::default(),
                    }),
                    work <- new_work!("QpShared::work"),
                    fault <- new_mutex!(FaultState::new()),
                    fault_work <- new_work!("QpShared::fault_work"),
                    resp_work <- new_work!("QpShared::resp_work"),
                    timer <- HrTimer::new(),
                    backoff_armed: Atomic::new(false),
                    events: events.clone(),
                }),
                GFP_KERNEL,
            )
        };
        let shared = if i.qp_type == QpType::Gsi {
            dev.tables.qps.insert_at(GSI_QPN, make)?
        } else {
            dev.tables.qps.insert(make)?
        };
        let qpn = shared.qpn;
        Ok((
            Self {
                shared,
                init: *init,
                kernel,
                _token: token,
            },
            qpn,
        ))
    }

    /// Queues a kernel consumer's send WR (any context; the doorbell follows).
    pub(crate) fn post_send_wr(&self, wr: &SendWr<'_, crate::ah::Ah>) -> Result {
        let s = &self.shared;
        let k = self.kernel.as_ref().ok_or(EINVAL)?;
        if matches!(s.state(), QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(EINVAL);
        }
        // ib_core has no kernel work request that carries a FLUSH's or an ATOMIC WRITE's
        // fields: only user space posts them.
        if matches!(
            WrOpcode::from_raw(wr.wqe.opcode),
            Some(WrOpcode::Flush | WrOpcode::AtomicWrite)
        ) {
            return Err(EINVAL);
        }
        let n = wr.sges.len();
        if n > s.max_send_sge as usize {
            return Err(EINVAL);
        }
        let length: u64 = wr.sges.iter().map(|g| u64::from(g.length)).sum();
        let length = u32::try_from(length).map_err(|_| EINVAL)?;
        let mut wqe = SendWqe {
            length,
            num_sge: n as u32,
            ..wr.wqe
        };
        let av = if s.qp_type.is_ud() {
            let (av, pd) = wr.ah.and_then(|a| a.kernel_av()).ok_or(EINVAL)?;
            if pd != s.pd {
                return Err(EINVAL);
            }
            Some(av)
        } else {
            None
        };
        let read_like = WrOpcode::from_raw(wqe.opcode).is_some_and(WrOpcode::is_read_like);
        let inline = wqe.send_flags & send_flags::INLINE != 0 && !read_like;
        if inline && length > s.max_inline {
            return Err(EINVAL);
        }
        let mut p = k.send.lock();
        let b = &mut p.buf;
        b.fill(0);
        if inline {
            // The data is copied now, as a device would read it at posting time.
            wqe.num_sge = 0;
            let mut at = abi::SEND_WQE_HEADER;
            for g in wr.sges.iter() {
                let end = at + g.length as usize;
                kmem::read(g.addr, b.get_mut(at..end).ok_or(EINVAL)?)?;
                at = end;
            }
        } else {
            for (idx, g) in wr.sges.iter().enumerate() {
                g.write(b, abi::SEND_WQE_HEADER, idx);
            }
        }
        wqe.write(b, av.is_some());
        if let Some(av) = av {
            av.write(b);
        }
        let len = send_wqe_size(n as u32, if inline { length } else { 0 });
        p.push(len)
    }

    /// Queues a kernel consumer's receive WR (any context).
    pub(crate) fn post_recv_wr(&self, wr: &RecvWr<'_>) -> Result {
        let s = &self.shared;
        let k = self.kernel.as_ref().ok_or(EINVAL)?;
        let state = s.state();
        if state == QpState::Reset {
            return Err(EINVAL);
        }
        let n = wr.sges.len();
        if n > s.max_recv_sge as usize {
            return Err(EINVAL);
        }
        let mut guard = k.recv.lock();
        // A QP on an SRQ takes its receives from there.
        let Some(p) = &mut *guard else {
            return Err(EINVAL);
        };
        p.push_recv(wr)?;
        drop(guard);
        if state == QpState::Err {
            // Flushed by the engine (this may run in atomic context).
            s.kick();
        }
        Ok(())
    }

    /// Applies `attr` under `mask`, following the IBA state machine; `dev_check` checks a new
    /// route against the device and returns its source GID.
    pub(crate) fn modify(
        &self,
        dev_check: impl Fn(&Route) -> Result<[u8; 16]>,
        attr: &QpAttr,
        mask: u32,
    ) -> Result {
        let s = &self.shared;
        let mut a = s.attrs.lock();
        let cur = if mask & qp_mask::CUR_STATE != 0 {
            attr.cur_qp_state.ok_or(EINVAL)?
        } else {
            s.state()
        };
        let next = if mask & qp_mask::STATE != 0 {
            attr.qp_state.ok_or(EINVAL)?
        } else {
            cur
        };
        if !verbs::modify_qp_is_ok(cur, next, s.qp_type, mask) {
            return Err(EINVAL);
        }
        if mask & qp_mask::PORT != 0 && attr.port_num != 1 {
            return Err(EINVAL);
        }
        if mask & qp_mask::PKEY_INDEX != 0 && attr.pkey_index != 0 {
            return Err(EINVAL);
        }
        if mask & qp_mask::MAX_QP_RD_ATOMIC != 0 && u32::from(attr.max_rd_atomic) > MAX_RD_ATOMIC {
            return Err(EINVAL);
        }
        if mask & qp_mask::MAX_DEST_RD_ATOMIC != 0
            && u32::from(attr.max_dest_rd_atomic) > MAX_RD_ATOMIC
        {
            return Err(EINVAL);
        }
        if (mask & qp_mask::RETRY_CNT != 0 && attr.retry_cnt > 7)
            || (mask & qp_mask::RNR_RETRY != 0 && attr.rnr_retry > 7)
            || (mask & qp_mask::MIN_RNR_TIMER != 0 && attr.min_rnr_timer > 31)
            || (mask & qp_mask::TIMEOUT != 0 && attr.timeout > 31)
        {
            return Err(EINVAL);
        }
        if mask & qp_mask::PATH_MTU != 0
            && !(crate::ib::netdev::IB_MTU_256..=crate::ib::netdev::IB_MTU_4096)
                .contains(&attr.path_mtu)
        {
            return Err(EINVAL);
        }
        let sgid = if mask & qp_mask::AV != 0 {
            Some(dev_check(&attr.route)?)
        } else {
            None
        };
        if mask & qp_mask::CAP != 0 {
            let c = &self.init.cap;
            if attr.cap.max_send_wr > c.max_send_wr || attr.cap.max_recv_wr > c.max_recv_wr {
                return Err(EINVAL);
            }
        }
        let n = &mut *a;
        macro_rules! take {
            ($bit:ident, $($f:ident),+) => {
                if mask & qp_mask::$bit != 0 { $(n.$f = attr.$f;)+ }
            };
        }
        take!(ACCESS_FLAGS, qp_access_flags);
        take!(PKEY_INDEX, pkey_index);
        take!(PORT, port_num);
        take!(QKEY, qkey);
        take!(AV, route);
        take!(PATH_MTU, path_mtu);
        take!(TIMEOUT, timeout);
        take!(RETRY_CNT, retry_cnt);
        take!(RNR_RETRY, rnr_retry);
        take!(RQ_PSN, rq_psn);
        take!(SQ_PSN, sq_psn);
        take!(MAX_QP_RD_ATOMIC, max_rd_atomic);
        take!(MIN_RNR_TIMER, min_rnr_timer);
        take!(MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
        take!(DEST_QPN, dest_qp_num);
        take!(EN_SQD_ASYNC_NOTIFY, en_sqd_async_notify);
        if let Some(g) = sgid {
            s.sq.lock().sgid = g;
            s.rq.lock().local = g;
        }
        if mask & (qp_mask::AV | qp_mask::DEST_QPN) != 0 {
            s.rq.lock().peer = (n.dest_qp_num, n.route.dgid);
        }
        if mask & qp_mask::SQ_PSN != 0 {
            s.sq.lock().wire = RcRequester::new(n.sq_psn);
        }
        if mask & qp_mask::RQ_PSN != 0 {
            s.rq.lock().wire = RcResponder::new(n.rq_psn);
        }
        s.path_mtu.store(n.path_mtu, Release);
        s.generation.fetch_add(1, Relaxed);
        s.access.store(n.qp_access_flags, Release);
        s.qkey.store(n.qkey, Release);
        s.min_rnr_timer.store(n.min_rnr_timer.into(), Release);
        s.max_dest_rd_atomic
            .store(n.max_dest_rd_atomic.into(), Release);
        if mask & qp_mask::STATE != 0 {
            match next {
                QpState::Reset => {
                    *n = initial_attr(&self.init);
                    s.reset();
                }
                QpState::Err => {
                    s.set_state(next);
                    drop(a);
                    s.flush_recv();
                    s.kick();
                    return Ok(());
                }
                QpState::Sqd => s.sq.lock().drained = false,
                _ => {}
            }
            if next == QpState::Rtr && cur != QpState::Rtr {
                s.rq.lock().established = false;
            }
            s.set_state(next);
            if matches!(next, QpState::Rts | QpState::Sqd | QpState::Sqe) {
                s.kick();
            }
        }
        Ok(())
    }

    /// Current attributes and creation parameters.
    pub(crate) fn query(&self) -> (QpAttr, QpInit) {
        let mut attr = *self.shared.attrs.lock();
        let st = self.shared.state();
        attr.qp_state = Some(st);
        attr.cur_qp_state = Some(st);
        attr.cap = self.init.cap;
        attr.sq_draining = false;
        if matches!(self.init.qp_type, QpType::Rc | QpType::Uc) {
            // The PSNs now: those of the transport to a peer on another host, which moves
            // them on (a peer on this host leaves them where `modify` put them).
            attr.sq_psn = self.shared.sq.lock().wire.next_psn();
            attr.rq_psn = self.shared.rq.lock().wire.epsn();
        }
        (attr, self.init)
    }

    /// Stops the QP: the engine no longer touches it, its rings go away, and its number is
    /// freed.
    pub(crate) fn destroy(&self) {
        let s = &self.shared;
        s.set_state(QpState::Err);
        // After the state: a packet the responder takes from now on finds the QP in error, so
        // what is remembered is its last.
        if s.qp_type == QpType::Rc {
            s.tables.parted.remember(s.qpn, &s.rq.lock());
        }
        {
            let mut sq = s.sq.lock();
            sq.queue = None;
            sq.peer = None;
            sq.backoff = None;
            sq.wire.forget();
        }
        s.answer.lock().forget();
        s.rq.lock().queue = None;
        // The requesters waiting for this QP's fault run again and find it gone.
        crate::engine::forget_faults(s);
        if s.qp_type.is_ud() {
            let ndev = crate::device::netdev_of(&s.tables);
            s.tables
                .groups
                .detach_qp(s.qpn, |g| crate::device::leave_group(ndev.as_deref(), g));
        }
        s.tables.qps.remove(s.qpn);
    }

    /// The send doorbell: `EINVAL` before RTS (the IBA's immediate error for posting to a
    /// send queue in RESET, INIT or RTR).
    pub(crate) fn doorbell(&self) -> Result {
        let s = &self.shared;
        match s.state() {
            QpState::Reset | QpState::Init | QpState::Rtr => return Err(EINVAL),
            // Receives posted after the QP failed are flushed too (user space has no other
            // way to tell the kernel about them). Kernel consumers may post in atomic
            // context: the engine flushes theirs.
            QpState::Err if s.srq.is_none() && self.kernel.is_none() => s.flush_recv(),
            _ => {}
        }
        if self.kernel.is_none() {
            // A user's doorbell, in the process that posted.
            crate::engine::run_send_queue_now(s);
        } else {
            s.kick();
        }
        Ok(())
    }
}

fn initial_attr(i: &QpInit) -> QpAttr {
    QpAttr {
        qp_state: Some(QpState::Reset),
        cur_qp_state: Some(QpState::Reset),
        path_mtu: crate::ib::netdev::IB_MTU_1024,
        qkey: 0,
        rq_psn: 0,
        sq_psn: 0,
        dest_qp_num: 0,
        qp_access_flags: 0,
        cap: i.cap,
        route: Route::default(),
        pkey_index: 0,
        en_sqd_async_notify: false,
        sq_draining: false,
        max_rd_atomic: 0,
        max_dest_rd_atomic: 0,
        min_rnr_timer: 0,
        port_num: 1,
        timeout: 0,
        retry_cnt: 0,
        rnr_retry: 0,
    }
}

impl QpShared {
    /// Current state.
    pub(crate) fn state(&self) -> QpState {
        QpState::from_raw(self.state.load(Acquire)).unwrap_or(QpState::Err)
    }

    fn set_state(&self, st: QpState) {
        self.state.store(st as u32, Release);
    }

    /// Whether the responder accepts messages (RTR and later, until error).
    pub(crate) fn can_receive(&self) -> bool {
        matches!(
            self.state(),
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    }

    /// The queue of the QP's requester and response work: the one memory reclaim may wait for
    /// with a kernel consumer's QP (as the inbox), else the users' one.
    fn queue(&self) -> &'static workqueue::Queue {
        if self.kernel {
            wq::reclaim()
        } else {
            wq::get()
        }
    }

    /// Schedules the requester.
    pub(crate) fn kick(self: &Arc<Self>) {
        let _ = self.queue().enqueue::<_, 0>(self.clone());
    }

    /// Schedules the QP's response work (`engine::rc::respond`).
    pub(crate) fn kick_responses(self: &Arc<Self>) {
        let _ = self.queue().enqueue::<_, 2>(self.clone());
    }

    /// Schedules the QP's fault work (`engine::fault`).
    pub(crate) fn kick_fault(self: &Arc<Self>) {
        let _ = wq::get().enqueue::<_, 1>(self.clone());
    }

    /// The attribute generation (see the field).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Acquire)
    }

    /// Moves the QP to the error state after a failure, raising `ev` if given.
    ///
    /// Takes no attribute lock, so the engine may call it while holding ring locks.
    pub(crate) fn fail(self: &Arc<Self>, ev: Option<Event>) {
        if self.enter_err() {
            if let Some(ev) = ev {
                self.events.event(ev);
            }
            self.flush_recv();
            self.kick();
        }
    }

    /// Moves the QP to the error state; returns `false` if it was there already. Takes no
    /// lock: the completer calls it with the send queue held, before the error completion.
    pub(crate) fn enter_err(&self) -> bool {
        if self.state.xchg(QpState::Err as u32, Full) == QpState::Err as u32 {
            return false;
        }
        self.generation.fetch_add(1, Relaxed);
        true
    }

    /// Empties the rings and indices (modify to RESET).
    fn reset(&self) {
        let mut sq = self.sq.lock();
        if let Some(q) = sq.queue.as_ref() {
            q.set_producer(0);
            q.set_consumer(0);
        }
        sq.cons = 0;
        sq.peer = None;
        sq.backoff = None;
        sq.rnr_left = None;
        sq.retry_left = None;
        sq.waiting = false;
        sq.ticket.set(Ticket::default());
        sq.wait_seq = 0;
        sq.wire = RcRequester::default();
        drop(sq);
        self.answer.lock().forget();
        // No delivery after the reset takes an outcome of before.
        crate::engine::forget_faults(self);
        let mut rq = self.rq.lock();
        if let Some(q) = rq.queue.as_ref() {
            q.set_producer(0);
            q.set_consumer(0);
        }
        rq.cons = 0;
        rq.pending = false;
        rq.wire = RcResponder::default();
    }

    /// Completes every queued receive with `WR_FLUSH_ERR` (or, on an SRQ, reports the last
    /// WQE as reached).
    ///
    /// Does nothing unless the QP is in ERR: a flush that comes late (after the consumer reset
    /// the QP and posted new receives) must not take them.
    pub(crate) fn flush_recv(&self) {
        let mut rq = self.rq.lock();
        if self.state() != QpState::Err {
            return;
        }
        if rq.pending {
            // Taken before any WQE still in the ring: completed first.
            rq.pending = false;
            self.rcq.post(
                &Wc {
                    wr_id: rq.slot.wr_id,
                    status: WcStatus::WrFlushErr,
                    qp_num: self.qpn,
                    ..Default::default()
                },
                false,
                &self.events,
            );
        }
        if self.srq.is_some() {
            drop(rq);
            self.events.event(Event::LastWqeReached);
            return;
        }
        let mut cons = rq.cons;
        let Some(q) = rq.queue.as_ref() else {
            return;
        };
        let prod = q.producer();
        let mut slot = [0u8; abi::RECV_WQE_HEADER];
        while cons != prod {
            if q.read(cons, &mut slot).is_err() {
                break;
            }
            let w = RecvWqe::parse(&slot);
            cons = q.next(cons);
            q.set_consumer(cons);
            self.rcq.post(
                &Wc {
                    wr_id: w.wr_id,
                    status: WcStatus::WrFlushErr,
                    qp_num: self.qpn,
                    ..Default::default()
                },
                false,
                &self.events,
            );
        }
        rq.cons = cons;
    }

    /// Takes the next receive WQE (own ring or SRQ) into `rq.slot`, or keeps the pending one
    /// there, and marks it pending until the caller completes it; the caller holds `rq`.
    pub(crate) fn pop_recv(&self, rq: &mut RecvSide) -> bool {
        if rq.pending {
            return true;
        }
        rq.pending = self.pop_next(rq);
        rq.pending
    }

    fn pop_next(&self, rq: &mut RecvSide) -> bool {
        let RecvSide {
            queue, cons, slot, ..
        } = rq;
        if let Some(srq) = &self.srq {
            return srq.pop(slot);
        }
        let Some(q) = queue.as_ref() else {
            return false;
        };
        if q.producer() == *cons || slot.load(q, *cons, self.max_recv_sge).is_err() {
            return false;
        }
        *cons = q.next(*cons);
        q.set_consumer(*cons);
        true
    }
}
