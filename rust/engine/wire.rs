// SPDX-License-Identifier: GPL-2.0

//! The RoCEv2 wire, for peers on other hosts (rxe's `rxe_net.c` and `rxe_recv.c`): packets out
//! through the namespace's UDP tunnel socket ([`Tx`]), packets in through the device's
//! [`Inbox`].
//!
//! A UD send to a GID that is no rodp device's on this host leaves as one RoCEv2 packet (BTH,
//! DETH, ImmDt with immediate data, payload, ICRC), sent from the requester's work item; RC
//! traffic is [`super::rc`]'s. A received packet is checked in softirq context (parse, ICRC,
//! no IPv4 options, the default P_Key's partition), copied into its device's inbox (bounded)
//! and handed out by the inbox's work item: a UD datagram to the responder as a local message,
//! an RC or UC request to [`super::rc::request`] (which may keep it for the QP's response work
//! while that answers a long READ), an RC answer to [`super::rc::response`]. Every received
//! packet counts in `rcvd_pkts`; one that no QP takes also in `rcvd_dropped_pkts`.

use super::{
    packet::{
        header::{packet_len, pad_len, parse, Bth, Deth, Headers, ImmDt, Packet},
        icrc::{self, IpHeader},
        opcode::{Opcode, Service},
        psn::Psn,
    },
    rc, resp,
    xfer::{gather, Src},
    Gid, Message, Reply, Ud,
};
use crate::{
    device::Device,
    ib::{
        netdev::NetDevRef,
        udp::{self, Datagram, IPV4_HLEN, IPV6_HLEN, UDP_HLEN},
        verbs::{QpType, WrOpcode},
    },
    keys::Tables,
    mcast,
    qp::QpShared,
    stats::{Counter, Stats},
};
use core::cell::Cell;
use kernel::{
    impl_has_work, new_mutex, new_spinlock_irq, new_work,
    prelude::*,
    sync::{
        atomic::{Acquire, Atomic, Relaxed, Release},
        Arc, Mutex, SpinLockIrq,
    },
    workqueue::{Work, WorkItem},
};

use super::net::ROCE_V2_PORT;

/// Largest UD payload (the largest path MTU).
const MAX_UD_PAYLOAD: usize = 4096;

/// Datagrams an inbox holds before it drops a larger one: two messages of 1 MiB at path MTU 1024,
/// the largest a kernel storage client sends (nvmet-rdma answers a 1 MiB read with one RDMA WRITE;
/// rodp's requester sends at most 128 packets of one past what its peer acknowledged, rxe's the
/// same). A small one (at most [`SMALL`] bytes: an ACK or a NAK, a READ or atomic request, an
/// atomic's answer, but also a SEND or WRITE of a few bytes) is dropped only at four times as many:
/// each costs little, and a lost answer costs its requester a retransmission timeout.
const INBOX_LEN: usize = 2048;

/// Batches of datagrams an inbox's work delivers in one run: then it lets other work of the
/// queue run (datagrams that came meanwhile have queued it again).
const ROUNDS: usize = 4;

/// The size up to which a datagram counts as small: that of the largest without data (BTH,
/// AtomicETH and ICRC: an atomic request).
const SMALL: usize = 64;

/// The UDP source port of a flow between two QPs (rxe hashes the QP numbers into the
/// dynamic range; any port there interoperates).
pub(super) fn src_port(src_qpn: u32, dst_qpn: u32) -> u16 {
    let h = (src_qpn ^ dst_qpn.rotate_left(12)).wrapping_mul(0x9e37_79b9);
    0xc000 | (h >> 18) as u16
}

/// Why a packet did not leave.
pub(super) enum NotSent {
    /// The sender's own memory could not be read (a local protection error).
    Local,
    /// No route, no netdev, no memory for the packet, ...: lost, as on a network.
    Lost,
}

/// Where a QP's packets go: the netdev of its device and the addresses of the flow.
pub(super) struct Tx {
    ndev: NetDevRef,
    /// The interface the packets leave by (the source GID's: a VLAN device for its address).
    oif: i32,
    src: [u8; 16],
    dst: [u8; 16],
    src_port: u16,
    ttl: u8,
    tclass: u8,
    /// The QP the packets are for.
    pub(super) dest_qpn: u32,
}

impl Tx {
    /// The flow from QP `qpn` of the device of `tables` at GID `src` to QP `dest_qpn` at `dst`;
    /// `None` when the device has no netdev (any more).
    pub(super) fn new(
        tables: &Arc<Tables>,
        qpn: u32,
        src: &[u8; 16],
        dst: &[u8; 16],
        dest_qpn: u32,
        hop_limit: u8,
        tclass: u8,
    ) -> Option<Tx> {
        let (ndev, oif) = crate::device::route_of(tables, src)?;
        Some(Tx {
            ndev,
            oif,
            src: *src,
            dst: *dst,
            src_port: src_port(qpn, dest_qpn),
            ttl: if hop_limit == 0 { 64 } else { hop_limit },
            tclass,
            dest_qpn,
        })
    }

    /// Sends one packet: `hdr` (its pad set here) and `payload` bytes that `fill` writes,
    /// then the ICRC; counts it in `sent_pkts` and `sent_bytes`, or, lost on its way out, in
    /// `sent_dropped_pkts`.
    pub(super) fn send(
        &self,
        stats: &Stats,
        mut hdr: Headers,
        payload: usize,
        fill: impl FnOnce(&mut [u8]) -> Result,
    ) -> Result<(), NotSent> {
        hdr.bth.pad = pad_len(payload);
        let info = hdr.info().map_err(|_| {
            stats.inc(Counter::SentDroppedPkts);
            NotSent::Lost
        })?;
        let len = packet_len(info, payload);
        let d = Datagram {
            src: &self.src,
            dst: &self.dst,
            src_port: self.src_port,
            dst_port: ROCE_V2_PORT,
            ttl: self.ttl,
            tclass: self.tclass,
        };
        let local = Cell::new(false);
        udp::send(self.ndev.net(), self.oif, &d, len, |headers, out| {
            // Headers, payload, then pad and ICRC room (`send` zeroed them).
            let hlen = hdr.write(out).map_err(|_| EINVAL)?;
            let data = out.get_mut(hlen..hlen + payload).ok_or(EINVAL)?;
            fill(data).inspect_err(|_| local.set(true))?;
            let (ip, udp) = ip_udp(headers).ok_or(EINVAL)?;
            icrc::generate(ip, udp, out);
            Ok(())
        })
        .map_err(|_| {
            if local.get() {
                NotSent::Local
            } else {
                stats.inc(Counter::SentDroppedPkts);
                NotSent::Lost
            }
        })?;
        stats.inc(Counter::SentPkts);
        stats.add(Counter::SentBytes, payload as u64);
        Ok(())
    }
}

/// Sends the UD message `m` (its `ud` set) to QP `dest_qpn` at the GID `m.ud.dgid` on another
/// host, out of the netdev of `qp`'s device. Runs on `qp`'s work item (the payload's ODP pages
/// may fault, in the requester's own memory) with no spinlock held.
pub(super) fn send_ud(qp: &QpShared, m: &Message<'_>, dest_qpn: u32) -> Result<(), NotSent> {
    let ud = m.ud.as_ref().ok_or(NotSent::Lost)?;
    if m.len > MAX_UD_PAYLOAD {
        return Err(NotSent::Local);
    }
    let tx = Tx::new(
        &qp.tables,
        m.src_qpn,
        &ud.sgid,
        &ud.dgid,
        dest_qpn,
        ud.hop_limit,
        ud.tclass,
    )
    .ok_or(NotSent::Lost)?;
    let imm = matches!(m.opcode, WrOpcode::SendWithImm);
    let opcode = if imm {
        Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
    } else {
        Opcode::UD_SEND_ONLY
    };
    let mut bth = Bth::new(opcode, dest_qpn, Psn::new(0));
    bth.solicited = m.solicited;
    let mut hdr = Headers::new(bth);
    hdr.deth = Some(Deth {
        qkey: ud.qkey,
        src_qpn: m.src_qpn,
    });
    if imm {
        hdr.imm = Some(ImmDt(m.imm));
    }
    tx.send(&qp.tables.stats, hdr, m.len, |out| {
        gather(m.data, 0, out, true)
    })
}

/// The IP and UDP headers at the start of `h` (as `udp::send` shows them, or as received).
fn ip_udp(h: &[u8]) -> Option<(IpHeader<'_>, &[u8; 8])> {
    let ip_len = match h.first()? >> 4 {
        4 => IPV4_HLEN,
        6 => IPV6_HLEN,
        _ => return None,
    };
    let ip = if ip_len == IPV4_HLEN {
        IpHeader::V4(h.get(..IPV4_HLEN)?.try_into().ok()?)
    } else {
        IpHeader::V6(h.get(..IPV6_HLEN)?.try_into().ok()?)
    };
    let udp = h.get(ip_len..ip_len + UDP_HLEN)?.try_into().ok()?;
    Some((ip, udp))
}

/// A packet received for a device, waiting in its [`Inbox`]: its UDP payload (checked: it
/// parses and its ICRC is right) and what the IP header said.
struct Inbound {
    sgid: [u8; 16],
    dgid: [u8; 16],
    hop_limit: u8,
    tclass: u8,
    raw: KVec<u8>,
}

/// How far a device's inbox has got: datagrams queued for delivery, and datagrams delivered or
/// refused, since the device was created (in [`Tables`]).
///
/// A requester whose retransmission timer fires while datagrams that arrived before the expiry
/// still wait in the inbox lets the inbox get past them before it spends a transport retry:
/// one of them may be its answer. Under load (many QPs, a slow host) the inbox can lag its
/// peers by more than a short timeout (`timeout` 14 is 67 ms); a requester that counted that
/// lag against its peer would run out of retries while its answer waits here, and its peer,
/// done, would never answer the retransmissions. It looks again after an eighth of its
/// timeout. The wait is as long as the inbox takes to get through what it held at the expiry
/// (a bounded number of datagrams, taken in order), not longer: what arrives later, a flood
/// included, does not extend it.
pub(crate) struct Backlog {
    queued: Atomic<u64>,
    taken: Atomic<u64>,
    /// Request packets the device's QPs keep behind long READs (`rc`'s responder): at most
    /// as many as the inbox holds, so that keeping them costs no more memory than the inbox
    /// could.
    kept: Atomic<u32>,
}

impl Backlog {
    /// Nothing arrived yet.
    pub(crate) const fn new() -> Self {
        Self {
            queued: Atomic::new(0),
            taken: Atomic::new(0),
            kept: Atomic::new(0),
        }
    }

    /// What has arrived so far: the mark a requester waits for the inbox to reach.
    pub(crate) fn mark(&self) -> u64 {
        self.queued.load(Acquire)
    }

    /// Datagrams queued and not yet delivered or refused.
    pub(crate) fn waiting(&self) -> u64 {
        let taken = self.taken.load(Acquire);
        self.queued.load(Acquire).saturating_sub(taken)
    }

    /// Whether every datagram queued before `mark` was taken was delivered or refused.
    pub(crate) fn reached(&self, mark: u64) -> bool {
        self.taken.load(Acquire) >= mark
    }

    pub(super) fn queue(&self) {
        self.queued.fetch_add(1, Release);
    }

    pub(super) fn take(&self) {
        self.taken.fetch_add(1, Release);
    }

    /// Takes one of the device's places for a kept request packet; `false` when all are taken.
    pub(super) fn keep(&self) -> bool {
        if self.kept.fetch_add(1, Relaxed) < INBOX_LEN as u32 {
            return true;
        }
        self.kept.fetch_sub(1, Relaxed);
        false
    }

    /// Gives a place [`Backlog::keep`] took back.
    pub(super) fn unkeep(&self) {
        self.kept.fetch_sub(1, Relaxed);
    }
}

/// A device's received datagrams, delivered in process context by its work item.
#[pin_data]
pub(crate) struct Inbox {
    #[pin]
    queue: SpinLockIrq<KVec<Inbound>>,
    /// The buffer of the last batch delivered (up to [`INBOX_LEN`] entries), kept for the
    /// queue's next turn; only the work uses it.
    #[pin]
    spare: Mutex<KVec<Inbound>>,
    #[pin]
    work: Work<Inbox>,
    tables: Arc<Tables>,
}

impl_has_work! {
    impl HasWork<Self> for Inbox { self.work }
}

impl WorkItem for Inbox {
    type Pointer = Arc<Inbox>;

    fn run(this: Arc<Inbox>) {
        // Replies to a kernel consumer's writeback come through here (`ib::wq`).
        let _noio = crate::ib::wq::NoIo::begin();
        this.deliver();
    }
}

impl Inbox {
    /// An empty inbox for the device of `tables`.
    pub(crate) fn new(tables: Arc<Tables>) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Inbox {
                queue <- new_spinlock_irq!(KVec::new()),
                spare <- new_mutex!(KVec::new()),
                work <- new_work!("Inbox::work"),
                tables,
            }),
            GFP_KERNEL,
        )
    }

    /// Takes the datagram `pkt` received in softirq context (it is counted in `rcvd_pkts`
    /// already): checks it, copies what delivery needs and queues the work; `false` when it is
    /// dropped (malformed, bad ICRC, not a datagram rodp delivers yet, no memory, inbox full).
    pub(crate) fn receive(self: &Arc<Self>, pkt: &udp::Packet<'_>) -> bool {
        let Some(ib) = inbound(pkt) else {
            return false;
        };
        {
            let mut q = self.queue.lock();
            let room = if ib.raw.len() <= SMALL {
                4 * INBOX_LEN
            } else {
                INBOX_LEN
            };
            if q.len() >= room || q.push(ib, GFP_ATOMIC).is_err() {
                return false;
            }
            self.tables.backlog.queue();
        }
        let _ = crate::ib::wq::reclaim().enqueue(self.clone());
        true
    }

    /// Delivers the queued datagrams to their QPs, at most [`ROUNDS`] batches.
    fn deliver(self: &Arc<Self>) {
        // The queue gets the buffer of a batch delivered before (up to `INBOX_LEN` entries):
        // the softirq then appends without reallocating the queue, which it does with
        // interrupts off.
        let mut spare = core::mem::take(&mut *self.spare.lock());
        for _ in 0..ROUNDS {
            let mut batch = core::mem::replace(&mut *self.queue.lock(), spare);
            if batch.is_empty() {
                spare = batch;
                break;
            }
            for ib in batch.iter() {
                if !self.deliver_one(ib) {
                    self.tables.stats.inc(Counter::RcvdDroppedPkts);
                }
                self.tables.backlog.take();
            }
            batch.clear();
            spare = if batch.capacity() <= INBOX_LEN {
                batch
            } else {
                KVec::new()
            };
        }
        *self.spare.lock() = spare;
    }

    /// Delivers one packet; whether its QP took it.
    fn deliver_one(&self, ib: &Inbound) -> bool {
        let Ok(p) = parse(&ib.raw) else {
            return false;
        };
        // A group is addressed by QP 0xffffff only (the IBA's multicast QPN): a datagram to a
        // multicast address naming another QP reaches nobody.
        match (
            p.hdr.bth.dest_qpn == mcast::MULTICAST_QPN,
            Gid(ib.dgid).is_multicast(),
        ) {
            (false, false) => {}
            (true, true) => return p.info.service == Service::Ud && self.deliver_group(ib, &p),
            _ => return false,
        }
        let Some(qp) = self.tables.qps.get(p.hdr.bth.dest_qpn) else {
            // Perhaps a QP destroyed a moment ago that took it.
            return self
                .tables
                .parted
                .answer(&self.tables, &p, &ib.sgid, &ib.dgid);
        };
        match p.info.service {
            Service::Ud => self.deliver_ud(&qp, ib, &p),
            Service::Rc if qp.qp_type != QpType::Rc => false,
            Service::Rc if p.info.is_request() => {
                rc::request(&qp, &p, &ib.sgid, &ib.dgid, rc::By::Inbox(&ib.raw))
            }
            Service::Rc => rc::response(&qp, &p, &ib.sgid),
            // UC has requests only (no answers exist).
            Service::Uc if qp.qp_type == QpType::Uc => {
                rc::request(&qp, &p, &ib.sgid, &ib.dgid, rc::By::Inbox(&ib.raw))
            }
            Service::Uc => false,
        }
    }

    /// Delivers the UD datagram `p`, sent to a multicast group, to every QP of this device
    /// attached to the group its IP destination names; whether one took it. A datagram from
    /// another rodp device of this host (its source address is one of theirs: two netdevs on
    /// one link) reached this host's members already, without packets, and is dropped.
    fn deliver_group(&self, ib: &Inbound, p: &Packet<'_>) -> bool {
        let mut qpns = KVec::new();
        if self.tables.groups.attached(&ib.dgid, &mut qpns).is_err()
            || qpns.is_empty()
            || Device::with_gid_owner(&ib.sgid, |_| ()).is_some()
        {
            return false;
        }
        let mut taken = false;
        for n in qpns {
            if let Some(qp) = self.tables.qps.get(n) {
                taken |= self.deliver_ud(&qp, ib, p);
            }
        }
        taken
    }

    /// Delivers the UD datagram `p` to `qp`; whether a receive took it.
    fn deliver_ud(&self, qp: &Arc<QpShared>, ib: &Inbound, p: &Packet<'_>) -> bool {
        let Some(deth) = p.hdr.deth else {
            return false;
        };
        if !qp.qp_type.is_ud() {
            return false;
        }
        let imm = p.hdr.imm.map(|i| i.0);
        let m = Message {
            from: qp,
            ticket: None,
            resends: true,
            opcode: if imm.is_some() {
                WrOpcode::SendWithImm
            } else {
                WrOpcode::Send
            },
            src_qpn: deth.src_qpn,
            src_gid: ib.sgid,
            imm: imm.unwrap_or(0),
            solicited: p.hdr.bth.solicited,
            len: p.payload.len(),
            data: Src::Inline(p.payload),
            remote_addr: 0,
            rkey: 0,
            atomic: None,
            flush: None,
            read_into: &[],
            ahead: 0,
            ud: Some(Ud {
                qkey: deth.qkey,
                sgid: ib.sgid,
                dgid: ib.dgid,
                hop_limit: ib.hop_limit,
                tclass: ib.tclass,
            }),
        };
        let ok = matches!(resp::receive(qp, &m), Reply::Ack(_));
        if ok {
            self.tables
                .stats
                .add(Counter::RcvdBytes, p.payload.len() as u64);
        }
        ok
    }
}

/// What delivery needs of the received datagram `pkt`, if it is a well-formed RoCEv2 packet
/// with a right ICRC; allocates with `GFP_ATOMIC`.
fn inbound(pkt: &udp::Packet<'_>) -> Option<Inbound> {
    let datagram = pkt.payload();
    let p = parse(datagram).ok()?;
    // The default partition only: the port's one P_Key is 0xffff (RoCE's), which a packet's
    // P_Key matches when its low 15 bits are all ones (a full member matches a full or limited
    // one, IBA 10.9.3). Another partition's packet is dropped here, before it takes room in
    // the inbox, as rxe's `check_keys` drops it.
    if p.hdr.bth.pkey & 0x7fff != 0x7fff {
        return None;
    }
    let ip = pkt.ip_header();
    let (hdr_ip, hop_limit, tclass) = if pkt.is_ipv6() {
        let h: &[u8; 40] = ip.get(..IPV6_HLEN)?.try_into().ok()?;
        (IpHeader::V6(h), h[7], h[0] << 4 | h[1] >> 4)
    } else {
        let h: &[u8; 20] = ip.get(..IPV4_HLEN)?.try_into().ok()?;
        // Options are not covered by rxe's ICRC either: a header with them is refused.
        if h[0] & 0x0f != 5 {
            return None;
        }
        (IpHeader::V4(h), h[8], h[1])
    };
    let udp: &[u8; 8] = pkt.udp_header().try_into().ok()?;
    if !icrc::check(hdr_ip, udp, datagram) {
        return None;
    }
    if p.payload.len() > MAX_UD_PAYLOAD {
        return None;
    }
    let mut raw = KVec::with_capacity(datagram.len(), GFP_ATOMIC).ok()?;
    raw.extend_from_slice(datagram, GFP_ATOMIC).ok()?;
    Some(Inbound {
        sgid: *pkt.src_gid(),
        dgid: *pkt.dst_gid(),
        hop_limit,
        tclass,
        raw,
    })
}

#[kunit_tests(rodp_wire)]
mod tests {
    use super::*;

    #[test]
    fn kept_packets_share_one_budget_of_an_inbox_per_device() {
        let b = Backlog::new();
        for _ in 0..INBOX_LEN {
            assert!(b.keep());
        }
        // The next is refused (its QP drops and counts it), and refusing takes no place.
        assert!(!b.keep());
        assert!(!b.keep());
        b.unkeep();
        assert!(b.keep());
        assert!(!b.keep());
        // Queued and taken datagrams are another count.
        b.queue();
        b.queue();
        b.take();
        assert_eq!(b.waiting(), 1);
        assert!(b.reached(1));
        assert!(!b.reached(b.mark()));
    }
}
