// SPDX-License-Identifier: GPL-2.0

//! Completion queues (rxe's `rxe_cq.c`): a ring of `struct ib_uverbs_wc` that user space polls
//! (or, for a kernel consumer, `poll_cq` reads), completion notification and overflow.
//!
//! The state lock is interrupt-safe: kernel consumers poll and arm CQs from any context.

use crate::{
    device::{Device, UContext},
    ib::{
        abi::{self, Wc},
        event::Events,
        udata::Udata,
        verbs::{Event, Notify, WcOut, WcStatus},
    },
    limit::Token,
    queue::Queue,
};
use kernel::{
    new_spinlock_irq,
    prelude::*,
    sync::{Arc, SpinLockIrq},
};

/// Largest CQ depth (as rxe: `RXE_MAX_LOG_CQE` 15).
pub(crate) const MAX_CQE: u32 = (1 << 15) - 1;

/// Maximum number of CQs per device.
pub(crate) const MAX_CQ: u32 = 1 << 16;

struct State {
    /// `None` once destroyed.
    queue: Option<Queue>,
    /// The kernel's producer index (never read back from user space).
    prod: u32,
    /// The consumer index of a kernel consumer's CQ (user space keeps its own).
    cons: u32,
    notify: Notify,
    /// A kernel consumer's CQ: per slot, the event sink of the QP whose completion it holds
    /// (the consumer finds the `ib_qp` there). Empty for user CQs.
    owners: KVec<Option<Arc<Events>>>,
}

/// A CQ as the engine sees it.
#[pin_data]
pub(crate) struct CqShared {
    #[pin]
    state: SpinLockIrq<State>,
    events: Arc<Events>,
}

/// The driver data of a CQ.
pub(crate) struct Cq {
    pub(crate) shared: Arc<CqShared>,
    _token: Token,
}

fn check_depth(cqe: u32) -> Result {
    if cqe == 0 || cqe > MAX_CQE {
        return Err(EINVAL);
    }
    Ok(())
}

impl Cq {
    /// Creates a CQ of at least `cqe` entries; a user CQ's ring goes back to user space.
    pub(crate) fn new(
        dev: &Device,
        ctx: Option<&UContext>,
        cqe: u32,
        events: &Arc<Events>,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<(Self, u32)> {
        check_depth(cqe)?;
        if udata
            .as_ref()
            .is_some_and(|u| u.outlen() < abi::MmInfo::SIZE)
        {
            return Err(EINVAL);
        }
        let token = dev.cqs.take()?;
        let queue = Queue::new(ctx, cqe, abi::CQE_SIZE)?;
        let n = queue.capacity();
        let mut owners = KVec::new();
        match udata {
            Some(u) => u.write(&queue.mm_info().to_bytes())?,
            None => {
                owners = KVec::with_capacity(n as usize + 1, GFP_KERNEL)?;
                for _ in 0..=n {
                    owners.push(None, GFP_KERNEL)?;
                }
            }
        }
        let shared = Arc::pin_init(
            pin_init!(CqShared {
                state <- new_spinlock_irq!(State {
                    queue: Some(queue),
                    prod: 0,
                    cons: 0,
                    notify: Notify::None,
                    owners,
                }),
                events: events.clone(),
            }),
            GFP_KERNEL,
        )?;
        Ok((
            Self {
                shared,
                _token: token,
            },
            n,
        ))
    }

    /// Replaces the ring by one of at least `cqe` entries, keeping queued completions.
    pub(crate) fn resize(&self, ctx: &UContext, cqe: u32, udata: &mut Udata<'_>) -> Result<u32> {
        check_depth(cqe)?;
        if udata.outlen() < abi::MmInfo::SIZE {
            return Err(EINVAL);
        }
        // Built, and described to user space, before taking the lock (both may sleep); the
        // provider maps the new ring only if the call succeeds.
        let new = Queue::new(Some(ctx), cqe, abi::CQE_SIZE)?;
        udata.write(&new.mm_info().to_bytes())?;
        let cap = new.capacity();
        let mut s = self.shared.state.lock();
        let old = s.queue.as_ref().ok_or(EINVAL)?;
        let cons = old.consumer();
        if old.count(s.prod, cons) > cqe {
            return Err(EINVAL);
        }
        let mut tmp = [0u8; abi::CQE_SIZE];
        let n = new.take_from(old, cons, s.prod, &mut tmp)?;
        new.set_producer(n);
        let old = s.queue.replace(new);
        s.prod = n;
        drop(s);
        // Dropped without the lock: removing its mmap entry may sleep.
        drop(old);
        Ok(cap)
    }

    /// Arms notification; with `report`, says whether completions are already waiting.
    pub(crate) fn req_notify(&self, arm: Notify, report: bool) -> bool {
        let mut s = self.shared.state.lock();
        if s.notify != Notify::Next {
            s.notify = arm;
        }
        report && s.queue.as_ref().is_some_and(|q| q.consumer() != s.prod)
    }

    /// Takes completions of a kernel consumer's CQ into `out`; returns how many. Completions
    /// of QPs destroyed meanwhile are dropped.
    pub(crate) fn poll(&self, out: &mut WcOut<'_>) -> usize {
        let mut s = self.shared.state.lock();
        let State {
            queue,
            prod,
            cons,
            owners,
            ..
        } = &mut *s;
        let Some(q) = queue.as_ref() else {
            return 0;
        };
        let mut n = 0;
        let mut b = [0u8; abi::CQE_SIZE];
        while n < out.len() && *cons != *prod {
            let owner = owners.get_mut(*cons as usize).and_then(Option::take);
            if q.read(*cons, &mut b).is_err() {
                break;
            }
            *cons = q.next(*cons);
            if let Some(qp) = owner {
                if out.set(n, &Wc::parse(&b), &qp) {
                    n += 1;
                }
            }
        }
        q.set_consumer(*cons);
        n
    }

    /// Stops the CQ: later completions are dropped.
    pub(crate) fn destroy(&self) {
        let q = self.shared.state.lock().queue.take();
        drop(q);
    }
}

impl CqShared {
    /// Writes a completion of the QP whose event sink is `qp`; `solicited` marks a solicited
    /// receive. Returns false when the CQ overflowed (reported as `IB_EVENT_CQ_ERR`) or is gone.
    pub(crate) fn post(&self, wc: &Wc, solicited: bool, qp: &Arc<Events>) -> bool {
        let mut s = self.state.lock();
        let State {
            queue,
            prod,
            notify,
            owners,
            ..
        } = &mut *s;
        let Some(q) = queue.as_ref() else {
            return false;
        };
        let next = q.next(*prod);
        if next == q.consumer() {
            drop(s);
            self.events.event(Event::CqErr);
            return false;
        }
        if q.write(*prod, &wc.to_bytes()).is_err() {
            return false;
        }
        if let Some(o) = owners.get_mut(*prod as usize) {
            *o = Some(qp.clone());
        }
        q.set_producer(next);
        *prod = next;
        let fire = match *notify {
            Notify::Next => true,
            Notify::Solicited => solicited || wc.status != WcStatus::Success,
            Notify::None => false,
        };
        if fire {
            *notify = Notify::None;
        }
        // The handler runs without the state lock: a kernel consumer may poll from it.
        drop(s);
        if fire {
            self.events.completion();
        }
        true
    }
}
