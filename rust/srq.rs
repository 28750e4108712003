// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues (rxe's `rxe_srq.c`): a receive ring shared by QPs, resize and the
//! limit event. A user's SRQ ring is mapped into its process; a kernel consumer's (nvmet-rdma
//! with `use_srq=1`, ib_srpt) is in kernel memory and posted to through `ib_post_srq_recv`, in
//! any context.

use crate::{
    device::{Device, Pd, UContext},
    ib::verbs::RecvWr,
    ib::{
        abi,
        event::Events,
        udata::{self, Udata},
        verbs::{srq_mask, Event, SrqAttr},
    },
    limit::Token,
    qp::{Producer, RecvSlot},
    queue::Queue,
};
use kernel::{
    new_mutex, new_spinlock_irq,
    prelude::*,
    sync::{Arc, Mutex, SpinLockIrq},
};

/// Maximum number of SRQs per device.
pub(crate) const MAX_SRQ: u32 = 1 << 16;
/// Largest SRQ depth.
pub(crate) const MAX_SRQ_WR: u32 = 1 << 14;
/// Scatter/gather entries per SRQ WR.
pub(crate) const MAX_SRQ_SGE: u32 = 32;

struct State {
    /// `None` once destroyed.
    queue: Option<Arc<Queue>>,
    /// The kernel's consumer index.
    cons: u32,
    max_wr: u32,
    limit: u32,
}

/// An SRQ as the engine sees it.
#[pin_data]
pub(crate) struct SrqShared {
    /// The PD the SRQ was created in.
    pub(crate) pd: u64,
    /// Scatter/gather entries per WR.
    pub(crate) max_sge: u32,
    #[pin]
    state: Mutex<State>,
    events: Arc<Events>,
}

/// The driver data of an SRQ.
pub(crate) struct Srq {
    pub(crate) shared: Arc<SrqShared>,
    /// The producer side of a kernel consumer's SRQ. Lock order: the SRQ's state, then this.
    kernel: Option<Pin<KBox<SpinLockIrq<Producer>>>>,
    _token: Token,
}

/// Size of a receive WQE with `sge` entries.
pub(crate) fn recv_wqe_size(sge: u32) -> usize {
    abi::RECV_WQE_HEADER + sge as usize * abi::SGE_SIZE
}

impl Srq {
    /// Creates an SRQ: a user's (`user`: its context and udata), whose ring goes to user space,
    /// or a kernel consumer's.
    pub(crate) fn new(
        dev: &Device,
        pd: &Pd,
        user: Option<(&UContext, &mut Udata<'_>)>,
        attr: &mut SrqAttr,
        events: &Arc<Events>,
    ) -> Result<Self> {
        if attr.max_wr == 0 || attr.max_wr > MAX_SRQ_WR || attr.max_sge > MAX_SRQ_SGE {
            return Err(EINVAL);
        }
        if attr.srq_limit > attr.max_wr {
            return Err(EINVAL);
        }
        let max_sge = attr.max_sge.max(1);
        let token = dev.srqs.take()?;
        let ctx = user.as_ref().map(|(c, _)| *c);
        let queue = Arc::new(
            Queue::new(ctx, attr.max_wr, recv_wqe_size(max_sge))?,
            GFP_KERNEL,
        )?;
        attr.max_wr = queue.capacity();
        attr.max_sge = max_sge;
        let kernel = match user {
            Some((_, udata)) => {
                udata.write(&abi::create_srq_resp(queue.mm_info(), 0))?;
                None
            }
            None => Some(KBox::pin_init(
                new_spinlock_irq!(Producer::new(&queue)?),
                GFP_KERNEL,
            )?),
        };
        let shared = Arc::pin_init(
            pin_init!(SrqShared {
                pd: pd.data().id,
                max_sge,
                state <- new_mutex!(State {
                    queue: Some(queue),
                    cons: 0,
                    max_wr: attr.max_wr,
                    limit: attr.srq_limit,
                }),
                events: events.clone(),
            }),
            GFP_KERNEL,
        )?;
        Ok(Self {
            shared,
            kernel,
            _token: token,
        })
    }

    /// Queues a kernel consumer's receive WR (any context).
    pub(crate) fn post_recv_wr(&self, wr: &RecvWr<'_>) -> Result {
        let k = self.kernel.as_ref().ok_or(EINVAL)?;
        if wr.sges.len() > self.shared.max_sge as usize {
            return Err(EINVAL);
        }
        k.lock().push_recv(wr)
    }

    /// Resizes (keeping queued WQEs) and/or arms the limit; `user` is a user's context and
    /// udata, `None` for a kernel consumer.
    ///
    /// The SRQ's lock is taken by the engine while it holds other QPs' locks, so nothing under
    /// it touches user memory (which may fault on a stalled FUSE daemon): as rxe does, the
    /// command is read and the new ring's mmap information written to user space before the
    /// lock is taken. A failure after that (queued WQEs or the limit no longer fit) drops the
    /// new ring; user space maps a new ring only when the command succeeded. A kernel
    /// consumer's posts wait on their lock while the WQEs move to the new ring.
    pub(crate) fn modify(
        &self,
        user: Option<(&UContext, &mut Udata<'_>)>,
        attr: &SrqAttr,
        mask: u32,
    ) -> Result {
        if mask & !(srq_mask::MAX_WR | srq_mask::LIMIT) != 0 {
            return Err(EINVAL);
        }
        let resize = mask & srq_mask::MAX_WR != 0;
        if resize && (attr.max_wr == 0 || attr.max_wr > MAX_SRQ_WR) {
            return Err(EINVAL);
        }
        // The new ring, its mmap information already with user space, and a WQE's buffer.
        let mut new = if resize {
            let ctx = user.as_ref().map(|(c, _)| *c);
            let size = recv_wqe_size(self.shared.max_sge);
            let new = Arc::new(Queue::new(ctx, attr.max_wr, size)?, GFP_KERNEL)?;
            let tmp = KVec::from_elem(0u8, new.elem_size(), GFP_KERNEL)?;
            if let Some((_, udata)) = user {
                let mut cmd = [0u8; abi::MODIFY_SRQ_CMD];
                udata.read(&mut cmd)?;
                let addr = abi::modify_srq_mmap_info_addr(&cmd);
                udata::write_user(addr, &new.mm_info().to_bytes())?;
            }
            Some((new, tmp))
        } else {
            None
        };
        // The kernel producer's old ring, freed (vfree, which may sleep) after both locks go.
        let mut retired: Option<Arc<Queue>> = None;
        let mut s = self.shared.state.lock();
        let mut producer = self.kernel.as_ref().map(|k| k.lock());
        let old = s.queue.as_ref().ok_or(EINVAL)?;
        let prod = old.producer();
        let queued = old.count(prod, s.cons);
        let max_wr = if resize { attr.max_wr } else { s.max_wr };
        let limit = if mask & srq_mask::LIMIT != 0 {
            attr.srq_limit
        } else {
            s.limit
        };
        if mask & srq_mask::LIMIT != 0 && limit > max_wr {
            return Err(EINVAL);
        }
        // Borrowed, not moved: on an early return the new ring too is freed after the locks.
        if let Some((new, tmp)) = &mut new {
            if max_wr < queued || max_wr < limit {
                return Err(EINVAL);
            }
            let n = new.take_from(old, s.cons, prod, tmp)?;
            new.set_producer(n);
            if let Some(p) = producer.as_mut() {
                retired = Some(core::mem::replace(&mut p.queue, new.clone()));
            }
            s.cons = 0;
            s.max_wr = new.capacity();
            s.queue = Some(new.clone());
        }
        s.limit = limit;
        drop(producer);
        drop(s);
        drop(retired);
        Ok(())
    }

    /// Current attributes.
    pub(crate) fn query(&self) -> SrqAttr {
        let s = self.shared.state.lock();
        SrqAttr {
            max_wr: s.max_wr,
            max_sge: self.shared.max_sge,
            srq_limit: s.limit,
        }
    }

    /// Stops the SRQ.
    pub(crate) fn destroy(&self) {
        self.shared.state.lock().queue = None;
    }
}

impl SrqShared {
    /// Takes the next receive WQE, if any, raising the limit event when the queue falls below
    /// the armed limit.
    pub(crate) fn pop(&self, slot: &mut RecvSlot) -> bool {
        let mut s = self.state.lock();
        let cons = s.cons;
        let Some(q) = s.queue.as_ref() else {
            return false;
        };
        let prod = q.producer();
        if prod == cons || slot.load(q, cons, self.max_sge).is_err() {
            return false;
        }
        let next = q.next(cons);
        q.set_consumer(next);
        let left = q.count(prod, next);
        s.cons = next;
        if s.limit != 0 && left < s.limit {
            s.limit = 0;
            drop(s);
            self.events.event(Event::SrqLimitReached);
        }
        true
    }
}
