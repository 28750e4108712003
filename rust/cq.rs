// SPDX-License-Identifier: GPL-2.0

//! Completion queues (rxe's `rxe_cq.c`): a ring of `struct ib_uverbs_wc` that user space polls,
//! completion notification and overflow.

use crate::{
    device::{Device, UContext},
    ib::{
        abi::{self, Wc},
        event::Events,
        udata::Udata,
        verbs::{wc_status, Event, Notify},
    },
    limit::Token,
    queue::Queue,
};
use kernel::{
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
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
    notify: Notify,
}

/// A CQ as the engine sees it.
#[pin_data]
pub(crate) struct CqShared {
    #[pin]
    state: Mutex<State>,
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
    /// Creates a CQ of at least `cqe` entries and returns its ring to user space.
    pub(crate) fn new(
        dev: &Device,
        ctx: &UContext,
        cqe: u32,
        events: &Arc<Events>,
        udata: &mut Udata<'_>,
    ) -> Result<(Self, u32)> {
        check_depth(cqe)?;
        if udata.outlen() < abi::MmInfo::SIZE {
            return Err(EINVAL);
        }
        let token = dev.cqs.take()?;
        let queue = Queue::new(ctx, cqe, abi::CQE_SIZE)?;
        udata.write(&queue.mm_info().to_bytes())?;
        let n = queue.capacity();
        let shared = Arc::pin_init(
            pin_init!(CqShared {
                state <- new_mutex!(State { queue: Some(queue), prod: 0, notify: Notify::None }),
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
        let mut s = self.shared.state.lock();
        let old = s.queue.as_ref().ok_or(EINVAL)?;
        let cons = old.consumer();
        if old.count(s.prod, cons) > cqe {
            return Err(EINVAL);
        }
        let new = Queue::new(ctx, cqe, abi::CQE_SIZE)?;
        let n = new.take_from(old, cons, s.prod)?;
        udata.write(&new.mm_info().to_bytes())?;
        new.set_producer(n);
        s.prod = n;
        let cap = new.capacity();
        s.queue = Some(new);
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

    /// Stops the CQ: later completions are dropped.
    pub(crate) fn destroy(&self) {
        self.shared.state.lock().queue = None;
    }
}

impl CqShared {
    /// Writes a completion; `solicited` marks a solicited receive. Returns false when the CQ
    /// overflowed (reported as `IB_EVENT_CQ_ERR`) or is gone.
    pub(crate) fn post(&self, wc: &Wc, solicited: bool) -> bool {
        let mut s = self.state.lock();
        let prod = s.prod;
        let Some(q) = s.queue.as_ref() else {
            return false;
        };
        let next = q.next(prod);
        if next == q.consumer() {
            drop(s);
            self.events.event(Event::CqErr);
            return false;
        }
        if q.write(prod, &wc.to_bytes()).is_err() {
            return false;
        }
        q.set_producer(next);
        s.prod = next;
        let fire = match s.notify {
            Notify::Next => true,
            Notify::Solicited => solicited || wc.status != wc_status::SUCCESS,
            Notify::None => false,
        };
        if fire {
            s.notify = Notify::None;
            self.events.completion();
        }
        true
    }
}
