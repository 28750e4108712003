// SPDX-License-Identifier: GPL-2.0

//! The RoCEv2 port of a network namespace, shared by the rodp devices whose netdevs are in it
//! (rxe's `rxe_ns.c` and the receive side of `rxe_net.c`), and which device a received packet
//! is for.
//!
//! The first device of a namespace binds UDP port 4791 there (IPv4 and IPv6), the last one's
//! removal releases it before `rdma link delete` returns (rdma_rxe binds the same port). A
//! packet belongs to the device whose netdev it arrived on, or, through a VLAN device, the
//! device on the VLAN's real device; a packet for no device is dropped uncounted. Every packet
//! of a device counts in `rcvd_pkts` and goes to its [`Inbox`] (`wire`); one the inbox or the
//! receiving QP refuses counts in `rcvd_dropped_pkts` too.

use super::wire::Inbox;
use crate::{
    ib::{
        udp::{Packet, Receiver, Tunnel},
        NetDev,
    },
    keys::Tables,
    stats::Counter,
};
use kernel::{
    new_spinlock_irq,
    prelude::*,
    sync::{rcu::synchronize_rcu, Arc, SpinLockIrq},
};

/// The IANA port of RoCEv2.
pub(crate) const ROCE_V2_PORT: u16 = 4791;

/// Largest UDP payload taken: the largest path MTU's payload and every header the transport
/// carries, rounded up. Anything longer is dropped before it is looked at.
const MAX_DATAGRAM: usize = 4096 + 128;

/// A device receiving through its namespace's tunnel.
struct Member {
    ifindex: i32,
    tables: Arc<Tables>,
    inbox: Arc<Inbox>,
}

/// The devices of one namespace, looked up in softirq context by ingress interface.
#[pin_data]
pub(crate) struct Receivers {
    #[pin]
    devs: SpinLockIrq<KVec<Member>>,
}

impl Receiver for Receivers {
    fn receive(&self, pkt: &Packet<'_>) -> bool {
        // Only the lookup holds the interrupt-safe lock: the packet's checks (its ICRC over the
        // whole datagram) and its copy run with interrupts on. A device whose binding goes
        // meanwhile may still get it: its inbox and tables live on in these references.
        let dev = {
            let devs = self.devs.lock();
            devs.iter()
                .find(|m| m.ifindex == pkt.ifindex())
                .or_else(|| devs.iter().find(|m| m.ifindex == pkt.lower_ifindex()))
                .map(|m| (m.tables.clone(), m.inbox.clone()))
        };
        let Some((tables, inbox)) = dev else {
            return false;
        };
        tables.stats.inc(Counter::RcvdPkts);
        let taken = pkt.payload().len() <= MAX_DATAGRAM && inbox.receive(pkt);
        if !taken {
            tables.stats.inc(Counter::RcvdDroppedPkts);
        }
        taken
    }
}

/// A device's membership in its namespace's tunnel: receives while it exists; the port is
/// released with the last one of the namespace.
pub(crate) struct Binding {
    ifindex: i32,
    tables: Arc<Tables>,
    tunnel: Tunnel<Receivers>,
}

impl Binding {
    /// Binds the device whose netdev is `ndev` and whose objects are `tables`. Sleeps.
    pub(crate) fn new(ndev: &NetDev, tables: Arc<Tables>) -> Result<Self> {
        let tunnel = Tunnel::get(ndev.net(), ROCE_V2_PORT, || {
            Arc::pin_init(
                pin_init!(Receivers {
                    devs <- new_spinlock_irq!(KVec::new()),
                }),
                GFP_KERNEL,
            )
        })
        .inspect_err(|e| {
            pr_err!(
                "cannot bind UDP port {ROCE_V2_PORT} in the namespace of {:?}: {e:?}\n",
                ndev.name()
            )
        })?;
        let ifindex = ndev.ifindex();
        let inbox = Inbox::new(tables.clone())?;
        // GFP_ATOMIC under the interrupt-safe lock; a failure drops clones only.
        tunnel.receiver().devs.lock().push(
            Member {
                ifindex,
                tables: tables.clone(),
                inbox,
            },
            GFP_ATOMIC,
        )?;
        Ok(Self {
            ifindex,
            tables,
            tunnel,
        })
    }
}

impl Drop for Binding {
    fn drop(&mut self) {
        let removed = {
            let mut devs = self.tunnel.receiver().devs.lock();
            devs.iter()
                .position(|m| m.ifindex == self.ifindex && Arc::ptr_eq(&m.tables, &self.tables))
                .and_then(|i| devs.remove(i).ok())
        };
        // A receive that found the member before it went holds references to its inbox and
        // tables until it returns (under RCU): the last ones go here, in process context.
        synchronize_rcu();
        // Dropped outside the interrupt-safe lock; the tunnel handle goes next.
        drop(removed);
    }
}
