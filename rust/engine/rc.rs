// SPDX-License-Identifier: GPL-2.0

//! Reliable connection with a peer on another host: rxe's `rxe_req.c`, `rxe_resp.c` and
//! `rxe_comp.c` as they meet the wire.
//!
//! **Requester.** The WQE at the head of the send queue goes out as packets of the path MTU with
//! PSNs from the QP's `sq_psn` on, the last one asking for an ACK (and every [`PKTS_PER_ACK`]th of
//! a long one); an RDMA READ asks for at most [`READ_CHUNK`] bytes per request. While the head
//! waits for its answer, the WQEs behind it go too ([`send_ahead`]: up to [`AHEAD`] messages within
//! [`UNACKED_PSNS`] PSNs): SENDs, WRITEs, READs of one request and atomics, at most `max_rd_atomic`
//! (and [`RD_OUTSTANDING`]) READs and atomics at once, a fenced WQE only when none is outstanding;
//! nothing goes behind a READ of more than one request, an ATOMIC WRITE or a FLUSH. The completer's
//! half ([`response`]) runs on the device's inbox work and only records the answer in the QP's
//! [`Answer`] (a READ's data goes into a buffer there: the inbox never touches a requester's
//! memory, which may need a fault) and schedules the requester, which completes the WQEs in order
//! on its own worker. An ACK is cumulative: one for a message behind the head answers every message
//! up to it, and a NAK there answers those before it and is kept for its own message. A SEND or
//! WRITE of more packets than [`UNACKED_PSNS`] goes in steps ([`more`]), each up to that many
//! packets past the last one an ACK within the message (asked for every [`PKTS_PER_ACK`] packets)
//! says the peer has; sent again, it goes from the first packet the peer lacks. Sending the head
//! again (after a timer or a PSN sequence NAK) sends the messages behind it again too, with the
//! same PSNs (go back N). No answer within the retransmission timer sends the message again,
//! `retry_cnt` times; a READ whose response packets still arrive when the timer fires waits on (as
//! rxe, whose completer restarts the timer with every packet), and a READ sent again asks only for
//! what is missing, from the first response packet not received (IBTA 9.7.5.1.1); an RNR NAK waits
//! for the peer's RNR timer, `rnr_retry` times (7: for ever); a PSN sequence NAK sends it again at
//! once; any other NAK completes the WQE with the matching error. An ATOMIC WRITE or FLUSH is one
//! packet, answered by an empty READ response (or an ACK); rxe does not keep a FLUSH for
//! duplicates, so a lost answer from rxe ends in retries up to `retry_cnt`.
//!
//! **Responder.** A request packet ([`request`]) is taken only from the connected peer (the route's
//! GID, with the QP number the packet names) and only at the expected PSN; a later PSN gets one PSN
//! sequence NAK, an earlier one is a duplicate: SEND and WRITE are acknowledged again, a READ is
//! executed again from the request when it asks for a part of a READ taken (the PSNs of its
//! response, its key and a range inside its range), an atomic's result is replayed; both from
//! the last [`RESOURCES`] READs and atomics taken. Its memory is the QP's own: a page of ODP
//! memory that is not mapped is handed to the QP's fault work and the packet gets an RNR NAK with
//! the QP's `min_rnr_timer`, so that the peer sends it again once the fault had time to end
//! (mlx5's answer to a responder page fault too). A WRITE is checked whole at its first packet,
//! and its fault takes in the rest of the WRITE with the packet's pages (up to `fault::AHEAD`), so
//! that one fault serves the whole WRITE. Memory that cannot be faulted in gets the NAK a local
//! requester would see as `REM_ACCESS_ERR` or `REM_OP_ERR`. A READ's response of more than
//! [`READ_BURST`] packets is sent by the QP's response work ([`respond`]), a burst at a time;
//! meanwhile the QP's request packets are kept (at most [`HELD_MAX`]) and taken after it, in
//! order.

use super::{
    comp::Exec,
    fault,
    packet::{
        header::{
            Aeth, AtomicAckEth, AtomicEth, Bth, Headers, Ieth, ImmDt, NakCode, Packet, Reth,
            Syndrome,
        },
        opcode::{Ext, Kind, Opcode, Position, Service},
        psn::{Mtu, Psn},
    },
    resp,
    wire::{self, Backlog, Tx},
    xfer::{gather, transfer, Seg, Src},
    Message, Nak, Reply,
};
use crate::{
    ib::{
        umem::AtomicOp,
        verbs::{access, QpAttr, QpType, WcStatus, WrOpcode},
    },
    keys,
    keys::Tables,
    odp::Faults,
    qp::{QpShared, RecvSide},
    stats::Counter,
};
use core::cell::Cell;
use kernel::{
    new_mutex,
    prelude::*,
    sync::{
        atomic::{Acquire, Atomic, Relaxed},
        Arc, Mutex, MutexGuard,
    },
    time::{Delta, Instant, Monotonic},
};

/// Bytes of an RDMA READ one request asks for: the response waits in a buffer of this size
/// until the requester copies it into place.
const READ_CHUNK: usize = 64 << 10;

/// READs and atomics a responder keeps for duplicate requests (IBTA's responder resources): as
/// many as a QP's `max_dest_rd_atomic` may be (a requester has that many outstanding at most,
/// and any of them may be asked for again).
const RESOURCES: usize = crate::qp::MAX_RD_ATOMIC as usize;

/// A READ or an atomic the responder took, kept for its duplicates.
#[derive(Clone, Copy)]
enum Taken {
    /// A READ: its first PSN, its response packets, and the range and key it read.
    Read {
        psn: Psn,
        n: u32,
        va: u64,
        len: u64,
        rkey: u32,
    },
    /// An atomic: its PSN and the value it found.
    Atomic { psn: Psn, orig: u64 },
}

impl Taken {
    /// Whether a duplicate READ at `psn` of `n` packets, of `len` bytes at `va` through
    /// `rkey`, asks for a part of this READ: from one of its response PSNs on (a requester
    /// asking again from the first response packet it lacks, IBTA 9.7.5.1.1), within its PSNs,
    /// its key and its range (rxe's `duplicate_request` checks all but the end PSN; a
    /// requester asking again ends where the READ ended, rxe's and rodp's alike). Anything else
    /// was never asked for on this connection and is not answered: the packet of a spoofed
    /// source, sent to make the responder send memory towards its peer, is dropped.
    fn covers_read(&self, psn: Psn, n: u32, va: u64, len: u64, rkey: u32) -> bool {
        let Taken::Read {
            psn: first,
            n: count,
            va: start,
            len: whole,
            rkey: key,
        } = *self
        else {
            return false;
        };
        let end = first.add(count);
        psn.diff(first) >= 0
            && psn.add(n).diff(end) <= 0
            && rkey == key
            && va >= start
            && (va - start).checked_add(len).is_some_and(|e| e <= whole)
    }
}

/// Response packets of one READ sent in a go. A READ of more is answered by its QP's response
/// work ([`respond`]), this many packets at a time: a peer's long READ (up to 2 GiB) then holds
/// up no other QP of the device behind it on the inbox (rxe, too, answers a READ a budget of
/// packets at a time on the QP's own task).
const READ_BURST: u32 = 16;

/// Request packets a responder keeps while its response work answers a READ: taken after the
/// READ, in order. A requester has at most 128 PSNs outstanding (rxe's and rodp's), the READ's
/// response PSNs among them, so a conforming peer sends fewer than this many behind it. One
/// more is dropped (and counted), and once the kept ones are taken a PSN sequence NAK asks for
/// it again. All QPs of a device keep at most as many as its inbox holds ([`Backlog::keep`]).
const HELD_MAX: usize = 128;

/// Source of [`Responder::epoch`].
static NEXT_EPOCH: Atomic<u64> = Atomic::new(1);

/// A READ its QP's response work answers, and how far it got.
#[derive(Clone, Copy)]
struct Reading {
    /// The READ's first PSN, its response packets, and the next one to send.
    psn: Psn,
    n: u32,
    next: u32,
    /// What it reads (checked when the READ was taken), at the path MTU of then.
    va: u64,
    len: u64,
    rkey: u32,
    mtu: Mtu,
    /// The AETH's MSN.
    msn: u32,
    /// The way back: the peer's QP and GID, and the local GID the READ came to.
    dest: u32,
    peer: [u8; 16],
    local: [u8; 16],
    /// The [`Responder::epoch`] it belongs to.
    epoch: u64,
}

/// A request packet that came while its QP's response work answered a READ: its bytes (the
/// UDP payload, checked), the addresses it came from and to, and its place in the device's
/// budget.
struct Held {
    raw: KVec<u8>,
    from: [u8; 16],
    to: [u8; 16],
    place: Place,
}

/// A kept packet's place among those its device keeps ([`Backlog::keep`]): given back when
/// the packet goes. One that goes without being taken (its responder reset or in error) counts
/// in `rcvd_dropped_pkts`.
struct Place {
    tables: Arc<Tables>,
    taken: bool,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.tables.backlog.unkeep();
        if !self.taken {
            self.tables.stats.inc(Counter::RcvdDroppedPkts);
        }
    }
}

/// How long a destroyed RC QP's responder still acknowledges the last message it took again
/// ([`Parted`]): several of a requester's retransmission timeouts (67 ms at `timeout` 14, a
/// second at the 18 rdma_cm gives RoCE, two resends at 20).
const LINGER: Delta = Delta::from_millis(10_000);

/// Destroyed RC QPs a device remembers at once ([`Parted`]); a newer one takes the oldest's
/// place.
const PARTED_MAX: usize = 32;

/// Where the responder of a destroyed RC QP was: its number, its peer's QP and GID, the local
/// GID, the PSN it expected next and its MSN (the last packet it took, at the PSN before, was
/// a SEND's or a WRITE's), and when it went.
#[derive(Clone, Copy)]
struct Last {
    qpn: u32,
    peer_qpn: u32,
    peer: [u8; 16],
    local: [u8; 16],
    epsn: Psn,
    msn: u32,
    at: Instant<Monotonic>,
}

/// The RC QPs of a device destroyed in the last [`LINGER`]: for that long a duplicate of the
/// last message one took, from its peer, is acknowledged again, as the QP would have (a TCP
/// connection's TIME-WAIT does the same for its last ACK). An application typically destroys
/// its QP as soon as its last receive completes, right after the responder sent that
/// message's ACK; when the ACK does not arrive, or arrives while the peer's requester is
/// sending the message again after its timer fired early (rxe's completer then drops it, or
/// moves its PSN on without completing the WQE, see Documentation/rodp.rst), the peer resends
/// to a QP that is gone, and rxe's, which takes `retry_cnt` 7 as "for ever", resends for ever.
/// Nothing else reaches a destroyed QP: the packet is dropped and counted.
#[pin_data]
pub(crate) struct Parted {
    #[pin]
    ring: Mutex<Ring>,
}

/// The last [`PARTED_MAX`] destroyed RC QPs, and the place of the next.
struct Ring {
    last: [Option<Last>; PARTED_MAX],
    next: usize,
}

impl Ring {
    fn put(&mut self, last: Last) {
        self.last[self.next] = Some(last);
        self.next = (self.next + 1) % PARTED_MAX;
    }

    /// What the newest QP numbered `qpn` answers a duplicate at `psn`, from `from` to `to`,
    /// with: its state, when that was its peer and local GID and `psn` comes before the one it
    /// expected next.
    fn find(&self, qpn: u32, from: &[u8; 16], to: &[u8; 16], psn: Psn) -> Option<Last> {
        (1..=PARTED_MAX)
            .filter_map(|k| self.last[(self.next + PARTED_MAX - k) % PARTED_MAX])
            .find(|l| l.qpn == qpn)
            .filter(|l| l.peer == *from && l.local == *to && psn.diff(l.epsn) < 0)
    }
}

impl Parted {
    /// None yet.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            ring <- new_mutex!(Ring {
                last: [None; PARTED_MAX],
                next: 0,
            }),
        })
    }

    /// Remembers the responder `rq` of the RC QP `qpn`, destroyed now, when the last packet
    /// it took from a peer on another host was a SEND's or a WRITE's.
    pub(crate) fn remember(&self, qpn: u32, rq: &RecvSide) {
        let w = &rq.wire;
        // No message taken (a QP of a peer on this host, or reset since; one in error keeps
        // its responder), or a READ or an atomic last, which a plain ACK does not answer.
        if w.msn == 0 || w.acked != w.epsn.add(u32::MAX) {
            return;
        }
        self.ring.lock().put(Last {
            qpn,
            peer_qpn: rq.peer.0,
            peer: rq.peer.1,
            local: rq.local,
            epsn: w.epsn,
            msn: w.msn,
            at: Instant::now(),
        });
    }

    /// Answers the request packet `p`, from `from` to the local GID `to`, for a QP number no
    /// QP has: an ACK when a QP of that number, destroyed in the last [`LINGER`], had taken it
    /// (a duplicate of its last SEND or WRITE, from its peer, that ends its message or asks
    /// for an ACK); whether it did.
    pub(crate) fn answer(
        &self,
        tables: &Arc<Tables>,
        p: &Packet<'_>,
        from: &[u8; 16],
        to: &[u8; 16],
    ) -> bool {
        let asks = p.hdr.bth.ack_req || p.info.position.ends();
        if p.info.service != Service::Rc
            || !matches!(p.info.kind, Kind::Send | Kind::Write)
            || !asks
        {
            return false;
        }
        let qpn = p.hdr.bth.dest_qpn;
        let Some(l) = self.ring.lock().find(qpn, from, to, p.hdr.bth.psn) else {
            return false;
        };
        if l.at.elapsed() > LINGER {
            return false;
        }
        let Some(tx) = flow_back(tables, qpn, to, from, l.peer_qpn) else {
            return false;
        };
        tables.stats.inc(Counter::DuplicateRequest);
        send_ack(
            tables,
            &tx,
            Syndrome::Ack(NO_CREDITS),
            l.epsn.add(u32::MAX),
            l.msn,
        );
        true
    }
}

/// Who hands a request packet to the responder ([`request`]).
pub(super) enum By<'a> {
    /// The device's inbox, with the packet's bytes: kept (in [`Responder::held`]) while the
    /// QP's response work answers a READ.
    Inbox(&'a [u8]),
    /// The QP's response work, taking what it kept, in order, for the responder of this
    /// [`Responder::epoch`] (a packet kept for a responder since replaced is dropped).
    Work(u64),
}

/// The AETH credit field rxe sends: no end-to-end flow control.
const NO_CREDITS: u8 = 0x1f;

/// A SEND or WRITE packet whose PSN is a multiple of this, less one, is acknowledged even when
/// it does not ask (the IBA lets a responder acknowledge any packet): rxe's requester arms its
/// retransmission timer at a message's first packet and only an ACK moves it on, so a long
/// message whose packets all come before one ACK at its end had that time (67 ms at
/// ibv_rc_pingpong's `timeout` 14) to cross the link and be placed whole, which under emulation
/// it did not always; the retry that followed met rxe's lost completion (see `rodp.rst`).
const ACK_EVERY: u32 = 16;

/// While more than [`BEHIND`] datagrams wait in the device's inbox, every this many: the time
/// between two ACKs of a QP is then that of the packets of every QP taken in between, which
/// the queue (and one vCPU that also runs the applications) stretches; the timer of rxe's
/// requester does not tell that from a loss.
const ACK_EVERY_BEHIND: u32 = 4;

/// Datagrams waiting in the inbox beyond which it is behind ([`ACK_EVERY_BEHIND`]).
const BEHIND: u64 = 32;

/// Whether the SEND or WRITE packet at `psn` that did not ask for an ACK gets one.
fn unasked_ack(backlog: &Backlog, psn: Psn) -> bool {
    let every = if backlog.waiting() > BEHIND {
        ACK_EVERY_BEHIND
    } else {
        ACK_EVERY
    };
    psn.get() % every == every - 1
}

/// Messages sent behind the one at the head while it waits for its answer.
const AHEAD: usize = 32;

/// PSNs the requester has unacknowledged at most (rxe's `RXE_MAX_UNACKED_PSNS`): a message
/// goes behind the head only if it fits, and a SEND or WRITE of more packets goes out in
/// steps, never more than this many packets past the last one its peer is known to have (a
/// 1 MiB WRITE at path MTU 1024 is 1,024 packets, more than some queues on a path hold; sent
/// back to back, its tail was lost at every try).
const UNACKED_PSNS: u32 = 128;

/// A SEND or WRITE asks for an ACK every this many packets (rxe's `RXE_MAX_PKT_PER_ACK`), and
/// at the last packet of every step: each ACK tells the requester how far the peer got, opens
/// the window further and is where a resend starts.
const PKTS_PER_ACK: u32 = 64;

/// READs and atomics outstanding at most (the head's among them), whatever `max_rd_atomic`
/// allows (a peer keeps at least that many atomic results for duplicates).
const RD_OUTSTANDING: usize = 16;

/// Bytes of READ responses buffered at most for the READs behind the head.
const READ_BEHIND_BYTES: usize = 4 * READ_CHUNK;

/// The requester's state of an RC QP whose peer is on another host (in `SendSide`).
#[derive(Default)]
pub(crate) struct Requester {
    /// PSN of the next new packet.
    next_psn: Psn,
    /// One past the last PSN ever sent (or, for a SEND or WRITE at the head going in steps,
    /// reserved): going back N lowers `next_psn`, not this. The peer may acknowledge up to it
    /// (it took those packets before they went again).
    sent_end: Psn,
    /// The message of the WQE at the head, sent and not answered yet.
    inflight: Option<InFlight>,
    /// One past the last PSN of the head sent: a SEND or WRITE of more than [`UNACKED_PSNS`]
    /// packets goes in steps ([`paced`]), the rest when its peer acknowledges the first.
    head_sent: Psn,
    /// The messages of the WQEs behind it, sent while it waits (the first `n_ahead`).
    ahead: [InFlight; AHEAD],
    n_ahead: usize,
    /// The last answer was an RNR NAK: sending again after its timer is no transport retry.
    after_rnr: bool,
    /// How far the peer had got into the head's message when the requester last looked
    /// (`Due::reached`).
    seen_reached: Psn,
    /// The head went again from this PSN (`Due::reached`) for a PSN sequence NAK, and the peer
    /// has got no further since: another sequence NAK there is a copy of that one (doubled by
    /// the network; a responder NAKs a gap once, until the packet comes), which the resend
    /// under way answers already. Going back N again would send the packets twice more and
    /// spend a retry; rxe's completer, too, starts no retry for a NAK while one it started
    /// runs (`started_retry`). The timer still resends a resend that was lost.
    nak_resent: Option<Psn>,
    /// The inbox's mark ([`Backlog`]) when the retransmission timer fired with datagrams
    /// that arrived before it still queued: the retry waits until the inbox gets past them.
    inbox_mark: Option<u64>,
}

impl Requester {
    /// A requester whose next packet has PSN `psn` (`sq_psn`).
    pub(crate) fn new(psn: u32) -> Self {
        Self {
            next_psn: Psn::new(psn),
            sent_end: Psn::new(psn),
            ..Default::default()
        }
    }

    /// The PSN of the next new packet (`sq_psn` as `ibv_query_qp` shows it, as rxe does).
    pub(crate) fn next_psn(&self) -> u32 {
        self.next_psn.get()
    }

    /// Forgets the message in flight (flush, reset).
    pub(crate) fn forget(&mut self) {
        self.inflight = None;
        self.n_ahead = 0;
        self.after_rnr = false;
        self.sent_end = self.next_psn;
        self.head_sent = self.next_psn;
        self.inbox_mark = None;
        self.nak_resent = None;
    }

    /// Messages sent behind the head, waiting for their answers.
    pub(super) fn ahead(&self) -> usize {
        if self.inflight.is_some() {
            self.n_ahead
        } else {
            0
        }
    }

    /// Whether a message may go behind the head: the window has room.
    pub(super) fn window_open(&self) -> bool {
        self.inflight
            .is_some_and(|head| self.n_ahead < AHEAD && self.outstanding(head) < UNACKED_PSNS)
    }

    /// Whether a message of `npkts` packets fits in the window behind the head `head`.
    fn fits(&self, head: InFlight, npkts: u32) -> bool {
        self.outstanding(head) + npkts <= UNACKED_PSNS
    }

    /// PSNs sent from the head `head` on (a 24-bit distance, never negative: one message of
    /// 2 GiB at a path MTU of 256 is 2^23 PSNs).
    fn outstanding(&self, head: InFlight) -> u32 {
        self.next_psn.get().wrapping_sub(head.first.get()) & Psn::MASK
    }

    /// Forgets the messages sent behind the head `f`, which goes again as `g`: go back N, so
    /// the WQEs behind it go again with the same PSNs (the peer answers what it took already as
    /// a duplicate). The next message starts after the later of `f`'s and `g`'s PSNs (a READ
    /// asked again for what is missing never takes PSNs past `f`'s: every response packet
    /// taken but the last carries the path MTU).
    fn rewind(&mut self, f: InFlight, g: InFlight) {
        self.n_ahead = 0;
        self.next_psn = latest(f.first.add(f.npkts), g.first.add(g.npkts));
        self.sent_end = latest(self.sent_end, self.next_psn);
    }

    /// Takes the next `npkts` PSNs for a message (or, after going back N, again).
    fn take_psns(&mut self, npkts: u32) -> Psn {
        let first = self.next_psn;
        self.next_psn = first.add(npkts);
        self.sent_end = latest(self.sent_end, self.next_psn);
        first
    }
}

/// The later of two PSNs (within half the PSN space of each other).
fn latest(a: Psn, b: Psn) -> Psn {
    if b.diff(a) > 0 {
        b
    } else {
        a
    }
}

/// One message (a READ: one chunk of it) on the wire.
#[derive(Clone, Copy, Default)]
struct InFlight {
    /// PSN of its first packet.
    first: Psn,
    /// Its packets (a READ: its response packets, which take the PSNs).
    npkts: u32,
    /// A READ chunk: where in the WQE's data it goes, and its length.
    off: usize,
    len: usize,
}

/// What a requester waits for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Awaited {
    Ack,
    Read,
    Atomic,
    /// A FLUSH or ATOMIC WRITE: answered by an empty RDMA READ response (as rxe answers), or
    /// an ACK.
    Placed,
}

/// What the peer owes for one message: the kind of answer and its PSNs, and a READ's data as
/// it arrives.
struct Due {
    kind: Awaited,
    first: Psn,
    last: Psn,
    /// A READ: the PSN of the next response packet, the data so far and its length (the
    /// buffer reserved for it).
    next: Psn,
    buf: KVec<u8>,
    want: usize,
    /// The peer took every packet before this one (an ACK, an RNR NAK or a PSN sequence NAK
    /// within the message says so): how far the message got, so that an answer further on is
    /// progress, and where a SEND or WRITE goes again from.
    reached: Psn,
    /// One past the last PSN of the message sent so far (a SEND or WRITE goes in steps): no
    /// answer within the message names a PSN from here on.
    sent: Psn,
}

impl Due {
    /// Expects the answer of `kind` to the message `f` (a READ: its `f.len` bytes into `buf`).
    fn new(kind: Awaited, f: InFlight, buf: KVec<u8>) -> Self {
        Due {
            kind,
            first: f.first,
            last: f.first.add(f.npkts - 1),
            next: f.first,
            buf,
            want: if kind == Awaited::Read { f.len } else { 0 },
            reached: f.first,
            sent: f.first.add(f.npkts),
        }
    }

    /// Takes the READ response packet `p` at `psn`, the path MTU being `mtu` bytes: `None`
    /// when it is not the next one, ends the response anywhere but at `last`, or does not
    /// fill exactly what is left there, or (before the last) exactly the path MTU; else
    /// whether the READ's data is complete (so `next` never passes `last` with data missing).
    fn take_read(&mut self, p: &Packet<'_>, psn: Psn, mtu: usize) -> Option<bool> {
        let at_last = psn == self.last;
        if psn != self.next || p.info.position.ends() != at_last {
            return None;
        }
        // In the buffer reserved for it: it never grows here.
        let room = self.want - self.buf.len();
        let n = p.payload.len();
        if n > room
            || (at_last && n != room)
            || (!at_last && n != mtu)
            || self.buf.extend_from_slice(p.payload, GFP_ATOMIC).is_err()
        {
            return None;
        }
        self.next = self.next.add(1);
        Some(at_last)
    }
}

struct Expect {
    /// The peer's GID: answers from anyone else are dropped.
    peer: [u8; 16],
    /// The path MTU in bytes: every READ response packet but a READ's last carries exactly
    /// that.
    mtu: usize,
    /// The answer of the message at the head.
    due: Due,
    /// The last PSN sent behind the head (`due.last` when nothing is), including what went
    /// before the requester went back N: ACKs and NAKs up to it are the peer's.
    sent_last: Psn,
    /// The last PSN behind the head that an ACK covered: the messages up to it are done.
    acked: Option<Psn>,
    /// A NAK for a message behind the head, kept for when it gets there.
    later: Option<(Psn, Outcome)>,
    /// The READs and atomics behind the head, in PSN order, with their answers so far
    /// (capacity for [`RD_OUTSTANDING`] reserved when the head is sent).
    reads: KVec<Behind>,
    /// Nothing goes behind the head: a READ with more requests to come, an ATOMIC WRITE or a
    /// FLUSH.
    alone: bool,
}

/// A READ or an atomic sent behind the head: its answer is taken as it comes, and waits for
/// when the message gets to the head.
struct Behind {
    due: Due,
    /// An atomic's original value.
    orig: Option<u64>,
    /// The whole answer is here.
    done: bool,
}

impl Expect {
    /// Waits for the answer to the message `f` behind the head, which gets there: it may have
    /// come already.
    fn promote(&mut self, f: InFlight) -> Option<Outcome> {
        let mut buf = core::mem::take(&mut self.due.buf);
        buf.clear();
        self.due = Due::new(Awaited::Ack, f, buf);
        if self.reads.first().is_some_and(|b| b.due.first == f.first) {
            if let Ok(b) = self.reads.remove(0) {
                // A READ or an atomic: only its own answer completes it (an ACK of a later
                // message says that its answer was lost).
                self.due = b.due;
                if b.done {
                    return Some(Outcome::Ack(b.orig.unwrap_or(0)));
                }
            }
        }
        match self.acked {
            Some(a) if a.diff(self.due.last) >= 0 => {
                if self.due.kind == Awaited::Ack {
                    return Some(Outcome::Ack(0));
                }
            }
            // Nothing behind this message is acknowledged yet: forgotten, so that it never
            // ages into a PSN far ahead (24 bits wrap).
            Some(_) => self.acked = None,
            None => {}
        }
        match self.later {
            Some((p, o)) if p.diff(self.due.first) >= 0 && p.diff(self.due.last) <= 0 => {
                self.later = None;
                // A sequence or RNR NAK within it: the peer took every packet before `p`, from
                // where it goes again (as `answer` takes one for the head).
                if matches!(o, Outcome::Resend(_) | Outcome::Rnr(_)) {
                    self.due.reached = p;
                }
                Some(match o {
                    Outcome::Resend(_) => Outcome::Resend(p != self.due.first),
                    o => o,
                })
            }
            // A NAK for a message before this one (answered by an ACK since) is stale.
            Some((p, _)) if p.diff(self.due.first) < 0 => {
                self.later = None;
                None
            }
            _ => None,
        }
    }
}

/// How the peer answered.
#[derive(Clone, Copy)]
enum Outcome {
    Ack(u64),
    Nak(Nak),
    Rnr(u8),
    /// A PSN sequence NAK within the message: send it again now; whether the peer took more
    /// of it than before (progress: the transport retries start afresh, as rxe's do on every
    /// answer that moves on).
    Resend(bool),
}

/// The answer to the message in flight, filled by the completer (inbox work) and taken by the
/// requester (in `QpShared`, under a spinlock of its own so that the inbox never waits for a
/// requester).
#[derive(Default)]
pub(crate) struct Answer {
    expect: Option<Expect>,
    outcome: Option<Outcome>,
    /// A response packet of the head's READ, or an ACK or NAK within its SEND or WRITE that
    /// moved it on, was taken since the message was sent or the timer last fired.
    progress: bool,
    /// The requester waits out an RNR NAK's timer: an RNR NAK for the head arriving now
    /// answers a transmission from before the wait (see [`record`]).
    rnr_wait: bool,
    /// The room for the READs and atomics behind the head, kept for the next message sent
    /// from the head (one allocation per QP, not one per message).
    spare: KVec<Behind>,
}

impl Answer {
    /// Expects nothing (flush, reset, destroy).
    pub(crate) fn forget(&mut self) {
        self.expect = None;
        self.outcome = None;
        self.progress = false;
        self.rnr_wait = false;
    }
}

/// What executing a WQE for a remote peer came to.
pub(super) enum Step {
    /// The answer: mapped to a completion as a local responder's would be.
    Reply(Reply),
    /// Sent (or sent again): wait for the answer under the retransmission timer.
    Exec(Exec),
    /// Nothing sent: the answer is still arriving, the retransmission timer runs again.
    Waiting,
    /// Failed locally (the requester's own memory) or ran out of retries.
    Done(WcStatus),
}

/// The requester's part: sends, resends or finishes the message `m` of the WQE at the head of
/// `qp`'s send queue; `segs` are its local buffers (a READ's destination), `timer_running`
/// whether the retransmission or RNR timer still runs, `retry_left` the WQE's transport
/// retries.
#[expect(clippy::too_many_arguments)]
pub(super) fn execute(
    qp: &Arc<QpShared>,
    st: &mut Requester,
    timer_running: bool,
    retry_left: &mut Option<u8>,
    a: &QpAttr,
    sgid: &[u8; 16],
    m: &Message<'_>,
    segs: &[Seg],
) -> Step {
    let step = advance(qp, st, timer_running, retry_left, a, sgid, m, segs);
    if let Step::Done(_) = step {
        // The WQE completes in error: nothing of it stays in flight.
        st.forget();
        qp.answer.lock().forget();
    }
    step
}

#[expect(clippy::too_many_arguments)]
fn advance(
    qp: &Arc<QpShared>,
    st: &mut Requester,
    timer_running: bool,
    retry_left: &mut Option<u8>,
    a: &QpAttr,
    sgid: &[u8; 16],
    m: &Message<'_>,
    segs: &[Seg],
) -> Step {
    let Some(mtu) = Mtu::from_ib(a.path_mtu) else {
        return Step::Done(WcStatus::LocQpOpErr);
    };
    let f = match st.inflight {
        Some(f) => f,
        None if st.n_ahead > 0 => {
            st.after_rnr = false;
            match promote(qp, st) {
                Some(f) => f,
                // Sent already: its answer is awaited under a timer armed afresh.
                None => return Step::Exec(Exec::Sent),
            }
        }
        None => return start(qp, st, a, sgid, m, mtu, 0),
    };
    let (outcome, buf, reached) = {
        let mut ans = qp.answer.lock();
        let reached = ans.expect.as_ref().map(|e| e.due.reached);
        let o = ans.outcome.take();
        // An RNR NAK's wait, if one ran, is over; one taken now starts (see `record`), in the
        // same hold of the lock, so that no RNR NAK arriving meanwhile counts twice.
        ans.rnr_wait = matches!(o, Some(Outcome::Rnr(_)));
        // Messages behind the head wait for their answers in the same `Expect`.
        let buf = match o {
            Some(Outcome::Ack(_)) if st.n_ahead == 0 => ans.expect.take().map(|mut e| {
                e.reads.clear();
                ans.spare = core::mem::take(&mut e.reads);
                e.due.buf
            }),
            Some(Outcome::Ack(_)) => ans.expect.as_mut().map(|e| core::mem::take(&mut e.due.buf)),
            _ => None,
        };
        (o, buf, reached)
    };
    // The peer took more of the message than before (an ACK or a NAK within it): the
    // transport retries start afresh, as rxe's do on every answer that moves on.
    if let Some(r) = reached.filter(|r| *r != st.seen_reached) {
        st.seen_reached = r;
        *retry_left = None;
    }
    // A copy of the sequence NAK the head went again for: no answer.
    let outcome = match outcome {
        Some(Outcome::Resend(false))
            if !st.after_rnr && st.nak_resent.is_some() && reached == st.nak_resent =>
        {
            None
        }
        o => o,
    };
    if outcome.is_none() {
        if let Some(step) = more(qp, st, a, sgid, m, mtu, f) {
            return step;
        }
    }
    match outcome {
        Some(Outcome::Ack(orig)) => {
            st.inflight = None;
            st.nak_resent = None;
            if m.opcode == WrOpcode::RdmaRead {
                let data = buf.as_deref().and_then(|b| b.get(..f.len));
                let placed = data.is_some_and(|d| {
                    let to_local = Faults {
                        dst: true,
                        src: false,
                    };
                    transfer(segs, f.off, Src::Inline(d), f.len, to_local).is_ok()
                });
                if !placed {
                    return Step::Done(WcStatus::LocProtErr);
                }
                let done = f.off + f.len;
                if done < m.len {
                    // Only a READ sent whole from the head has more requests (its user grew
                    // the WQE while it was in flight otherwise).
                    if st.n_ahead > 0 {
                        return Step::Done(WcStatus::LocLenErr);
                    }
                    *retry_left = None;
                    return start(qp, st, a, sgid, m, mtu, done);
                }
            }
            Step::Reply(Reply::Ack(orig))
        }
        Some(Outcome::Nak(n)) => {
            st.forget();
            qp.answer.lock().forget();
            Step::Reply(Reply::Nak(n))
        }
        Some(Outcome::Rnr(t)) => {
            st.after_rnr = true;
            Step::Reply(Reply::Rnr(t))
        }
        // A PSN sequence NAK: a transport retry, as a timer's expiry is (rxe counts both);
        // one that says the peer got further than before starts the retries afresh.
        Some(Outcome::Resend(further)) if !core::mem::take(&mut st.after_rnr) => {
            if further {
                *retry_left = None;
            }
            st.nak_resent = reached;
            again(qp, st, Some(retry_left), a, sgid, m, mtu, f)
        }
        // One after an RNR NAK: the peer refused the packets sent behind the one it could
        // not take yet (rxe and rodp keep their expected PSN there), and the RNR wait is over.
        Some(Outcome::Resend(_)) => {
            st.nak_resent = reached;
            again(qp, st, None, a, sgid, m, mtu, f)
        }
        None if timer_running => Step::Exec(Exec::Pending),
        // After an RNR NAK's wait the message goes again without a transport retry (whatever
        // came before the NAK).
        None if core::mem::take(&mut st.after_rnr) => again(qp, st, None, a, sgid, m, mtu, f),
        None if core::mem::take(&mut qp.answer.lock().progress) => {
            st.inbox_mark = None;
            Step::Waiting
        }
        // The retransmission timer expired, but the answer may be among the datagrams that
        // arrived before and wait in the inbox: looked at again soon, until it got past them.
        None if inbox_behind(&qp.tables.backlog, &mut st.inbox_mark) => Step::Exec(Exec::Recheck),
        // The retransmission timer expired.
        None => again(qp, st, Some(retry_left), a, sgid, m, mtu, f),
    }
}

/// Whether a retransmission timer's expiry waits for the inbox `b`: datagrams that arrived
/// before it are still queued. The first expiry takes the mark (`mark`), a later one looks
/// whether the inbox got past it; the requester spends the retry once it has.
fn inbox_behind(b: &Backlog, mark: &mut Option<u64>) -> bool {
    let m = *mark.get_or_insert_with(|| b.mark());
    if b.reached(m) {
        *mark = None;
        return false;
    }
    true
}

/// Sends the next step of the head's SEND or WRITE `f` once its peer has acknowledged enough
/// of the last: up to [`UNACKED_PSNS`] packets past the last one it is known to have. `None`
/// when the head is no SEND or WRITE, all of it went, the window is still full, an answer
/// waits to be taken, or an RNR NAK's wait runs.
fn more(
    qp: &Arc<QpShared>,
    st: &mut Requester,
    a: &QpAttr,
    sgid: &[u8; 16],
    m: &Message<'_>,
    mtu: Mtu,
    f: InFlight,
) -> Option<Step> {
    // After an RNR NAK the peer takes nothing past it until its timer has run.
    if !paced(m.opcode) || st.after_rnr {
        return None;
    }
    let k = u32::try_from(st.head_sent.diff(f.first)).ok()?;
    if k >= f.npkts {
        return None;
    }
    let beyond = {
        let mut ans = qp.answer.lock();
        // An answer that came meanwhile is the next run's.
        if ans.outcome.is_some() {
            return None;
        }
        let reached = ans.expect.as_ref()?.due.reached;
        let beyond = u32::try_from(st.head_sent.diff(reached))
            .ok()
            .filter(|b| *b < UNACKED_PSNS)?;
        // The timer starts afresh with this step: the progress that opened it is used up.
        ans.progress = false;
        beyond
    };
    let g = InFlight {
        first: st.head_sent,
        npkts: f.npkts - k,
        off: f.off + k as usize * mtu.bytes() as usize,
        len: f.len,
    };
    Some(send_again(
        qp,
        st,
        a,
        sgid,
        m,
        mtu,
        g,
        UNACKED_PSNS - beyond,
    ))
}

/// Makes the first message sent behind the head (of the WQE now at the head) the one in
/// flight; returns it when its answer came already.
fn promote(qp: &QpShared, st: &mut Requester) -> Option<InFlight> {
    let f = st.ahead[0];
    st.ahead.copy_within(1..st.n_ahead, 0);
    st.n_ahead -= 1;
    st.inflight = Some(f);
    st.inbox_mark = None;
    // It went whole (it fitted in the window).
    st.head_sent = f.first.add(f.npkts);
    let mut ans = qp.answer.lock();
    let Answer {
        expect,
        outcome,
        progress,
        ..
    } = &mut *ans;
    *outcome = expect.as_mut().and_then(|e| e.promote(f));
    // Answers to the message before it are no progress of this one.
    *progress = false;
    outcome.is_some().then_some(f)
}

/// Whether a WQE of operation `op` may be sent behind the head while it waits, and have WQEs
/// sent behind it: SENDs, WRITEs, READs and atomics (an ATOMIC WRITE or a FLUSH waits until
/// it is at the head, and nothing goes behind it).
pub(super) fn pipelines(op: WrOpcode) -> bool {
    matches!(
        op,
        WrOpcode::Send
            | WrOpcode::SendWithImm
            | WrOpcode::SendWithInv
            | WrOpcode::RdmaWrite
            | WrOpcode::RdmaWriteWithImm
            | WrOpcode::RdmaRead
            | WrOpcode::AtomicCmpAndSwp
            | WrOpcode::AtomicFetchAndAdd
    )
}

/// Sends the message `m` of the WQE behind the last one sent, while the head waits for its
/// answer; whether it went. `fence`: the WQE waits for every READ and atomic before it.
pub(super) fn send_ahead(
    qp: &Arc<QpShared>,
    st: &mut Requester,
    a: &QpAttr,
    sgid: &[u8; 16],
    m: &Message<'_>,
    fence: bool,
) -> bool {
    let Some(mtu) = Mtu::from_ib(a.path_mtu) else {
        return false;
    };
    let Some(head) = st.inflight.filter(|_| st.window_open()) else {
        return false;
    };
    let kind = match m.opcode {
        // A READ behind the head is one request: its response has a buffer of its own.
        WrOpcode::RdmaRead if m.len <= READ_CHUNK => Awaited::Read,
        WrOpcode::RdmaRead => return false,
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => Awaited::Atomic,
        op if pipelines(op) => Awaited::Ack,
        _ => return false,
    };
    let f = InFlight {
        first: st.next_psn,
        npkts: match kind {
            Awaited::Atomic => 1,
            _ => mtu.packets(m.len as u64) as u32,
        },
        off: 0,
        len: m.len,
    };
    let want = if kind == Awaited::Read { m.len } else { 0 };
    let room = |e: &Expect| room_behind(e, a, kind, want, fence);
    // A READ or an atomic is checked before its entry is allocated, and again when it goes
    // in; a SEND or a WRITE only then (one lock per message on this path). A message that
    // does not fit waits until it is at the head, where it goes out in steps.
    if !st.fits(head, f.npkts)
        || (kind != Awaited::Ack && !qp.answer.lock().expect.as_ref().is_some_and(&room))
    {
        return false;
    }
    let mut read = None;
    if kind != Awaited::Ack {
        let mut buf = KVec::new();
        if kind == Awaited::Read && buf.reserve(m.len, GFP_KERNEL).is_err() {
            return false;
        }
        read = Some(Behind {
            due: Due::new(kind, f, buf),
            orig: None,
            done: false,
        });
    }
    let Some(tx) = peer_tx(qp, a, sgid) else {
        return false;
    };
    // Its answer may come before `transmit` returns.
    let before = {
        let mut ans = qp.answer.lock();
        let Some(e) = ans.expect.as_mut().filter(|e| room(e)) else {
            return false;
        };
        if let Some(b) = read {
            if e.reads.push(b, GFP_ATOMIC).is_err() {
                return false;
            }
        }
        let before = e.sent_last;
        e.sent_last = latest(before, f.first.add(f.npkts - 1));
        before
    };
    // A message whose own memory fails goes again at the head, which completes it in error.
    if let Err(wire::NotSent::Local) = transmit(qp, &tx, m, mtu, f, f.npkts, Service::Rc) {
        if let Some(e) = qp.answer.lock().expect.as_mut() {
            e.sent_last = before;
            if kind != Awaited::Ack {
                e.reads.pop();
            }
        }
        return false;
    }
    st.take_psns(f.npkts);
    st.ahead[st.n_ahead] = f;
    st.n_ahead += 1;
    true
}

/// Whether a message awaiting an answer of `kind` (a READ: `want` bytes of response) may go
/// behind the head of `e` now: not behind one that goes alone, a fenced one (`fence`) only when
/// no READ or atomic is outstanding, a READ or an atomic only within `max_rd_atomic` (and
/// [`RD_OUTSTANDING`], the room reserved in `reads`) and [`READ_BEHIND_BYTES`].
fn room_behind(e: &Expect, a: &QpAttr, kind: Awaited, want: usize, fence: bool) -> bool {
    let outstanding =
        e.reads.len() + usize::from(matches!(e.due.kind, Awaited::Read | Awaited::Atomic));
    if e.alone || (fence && outstanding > 0) {
        return false;
    }
    kind == Awaited::Ack
        || (outstanding < RD_OUTSTANDING.min(usize::from(a.max_rd_atomic))
            && e.reads.len() < e.reads.capacity()
            && e.reads.iter().map(|r| r.due.want).sum::<usize>() + want <= READ_BEHIND_BYTES)
}

/// Sends the message `m` (a READ: its chunk at `off`) for the first time.
fn start(
    qp: &Arc<QpShared>,
    st: &mut Requester,
    a: &QpAttr,
    sgid: &[u8; 16],
    m: &Message<'_>,
    mtu: Mtu,
    off: usize,
) -> Step {
    // A new message (or a READ's next request) follows no RNR NAK, and its timer has not
    // fired yet.
    st.after_rnr = false;
    st.inbox_mark = None;
    let (kind, npkts, len) = match m.opcode {
        WrOpcode::RdmaRead => {
            // The WQE is read again for every chunk: its user may have shrunk it meanwhile.
            let Some(rest) = m.len.checked_sub(off) else {
                return Step::Done(WcStatus::LocLenErr);
            };
            let len = rest.min(READ_CHUNK);
            (Awaited::Read, mtu.packets(len as u64) as u32, len)
        }
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => (Awaited::Atomic, 1, 8),
        // One packet each; a FLUSH's length is the remote range's, its packet carries none.
        WrOpcode::Flush | WrOpcode::AtomicWrite => (Awaited::Placed, 1, m.len),
        _ => (Awaited::Ack, mtu.packets(m.len as u64) as u32, m.len),
    };
    let mut buf = KVec::new();
    if kind == Awaited::Read && buf.reserve(len, GFP_KERNEL).is_err() {
        return Step::Done(WcStatus::LocQpOpErr);
    }
    let alone = kind == Awaited::Placed || off + len < m.len;
    let mut reads = KVec::new();
    if !alone {
        reads = core::mem::take(&mut qp.answer.lock().spare);
        reads.clear();
        if reads.capacity() < RD_OUTSTANDING && reads.reserve(RD_OUTSTANDING, GFP_KERNEL).is_err() {
            return Step::Done(WcStatus::LocQpOpErr);
        }
    }
    let f = InFlight {
        first: st.take_psns(npkts),
        npkts,
        off,
        len,
    };
    st.inflight = Some(f);
    *qp.answer.lock() = Answer {
        expect: Some(Expect {
            peer: a.route.dgid,
            mtu: mtu.bytes() as usize,
            due: Due::new(kind, f, buf),
            // Sent before already when the requester went back N.
            sent_last: latest(f.first.add(npkts - 1), st.sent_end.add(u32::MAX)),
            acked: None,
            later: None,
            reads,
            alone,
        }),
        outcome: None,
        progress: false,
        rnr_wait: false,
        spare: KVec::new(),
    };
    send_again(qp, st, a, sgid, m, mtu, f, UNACKED_PSNS)
}

/// What of `f` to ask for (again) and expects the answer to it in `e`: a READ whose first
/// response packets arrived asks for the rest, from the first packet missing (the peer sends
/// it from that PSN, as IBTA 9.7.5.1.1 allows, rxe too); a SEND or WRITE goes from the first
/// packet the peer lacks (`Due::reached`); anything else is sent whole.
fn rest(e: &mut Expect, f: InFlight, mtu: Mtu) -> InFlight {
    // Everything behind it goes again: their answers come again too (ACKs of what the peer
    // took already are still taken, up to `sent_last`).
    e.later = None;
    e.reads.clear();
    let got = e.due.buf.len();
    if e.due.kind == Awaited::Read && got > 0 && got < f.len {
        let len = f.len - got;
        let npkts = mtu.packets(len as u64) as u32;
        e.due.last = e.due.next.add(npkts - 1);
        e.sent_last = e.due.last;
        return InFlight {
            first: e.due.next,
            npkts,
            off: f.off + got,
            len,
        };
    }
    e.due.next = e.due.first;
    e.due.last = f.first.add(f.npkts - 1);
    e.due.buf.clear();
    // A SEND or a WRITE goes again from the first packet its peer does not have (a sequence
    // NAK's PSN, or past an ACK within it), as its middle and last packets.
    let k = e.due.reached.diff(f.first);
    if e.due.kind == Awaited::Ack && k > 0 && (k as u32) < f.npkts {
        return InFlight {
            first: e.due.reached,
            npkts: f.npkts - k as u32,
            off: f.off + k as usize * mtu.bytes() as usize,
            len: f.len,
        };
    }
    f
}

/// What of the message in flight `f` goes again, its answer awaited afresh; `None` when an
/// answer came since the requester looked (after it took none, or while it waited for an
/// RNR NAK's timer): the run its arrival queued takes it, and nothing goes again (sending
/// again would forget it, and a peer that has moved on never answers twice).
fn reask(ans: &mut Answer, f: InFlight, mtu: Mtu) -> Option<InFlight> {
    if ans.outcome.is_some() {
        return None;
    }
    ans.progress = false;
    Some(match ans.expect.as_mut() {
        Some(e) => rest(e, f, mtu),
        None => f,
    })
}

/// Sends the message in flight `f` again with the messages behind it (go back N): with
/// `retry_left`, as a transport retry, or completes its WQE with `RETRY_EXC_ERR` when
/// `retry_cnt` retries are spent (`timeout` 0 retries for ever); without, after an RNR NAK's
/// wait. Sends nothing when an answer came since the requester looked ([`reask`]).
#[expect(clippy::too_many_arguments)]
fn again(
    qp: &Arc<QpShared>,
    st: &mut Requester,
    retry_left: Option<&mut Option<u8>>,
    a: &QpAttr,
    sgid: &[u8; 16],
    m: &Message<'_>,
    mtu: Mtu,
    f: InFlight,
) -> Step {
    let left = retry_left.map(|l| l.get_or_insert(a.retry_cnt));
    let g = {
        let mut ans = qp.answer.lock();
        // Out of retries, unless the answer came meanwhile.
        if ans.outcome.is_none() && a.timeout != 0 && left.as_deref() == Some(&0) {
            ans.forget();
            drop(ans);
            qp.tables.stats.inc(Counter::RetryExceededErr);
            st.forget();
            return Step::Done(WcStatus::RetryExcErr);
        }
        reask(&mut ans, f, mtu)
    };
    let Some(g) = g else {
        // Nothing went again: after an RNR NAK's wait, a resend still follows that wait; and
        // no resend answers a sequence NAK (the next one is acted on).
        st.after_rnr |= left.is_none();
        st.nak_resent = None;
        return Step::Exec(Exec::Pending);
    };
    if let Some(left) = left {
        if a.timeout != 0 {
            *left -= 1;
        }
        qp.tables.stats.inc(Counter::CompleterRetryErr);
    }
    st.rewind(f, g);
    st.inbox_mark = None;
    send_again(qp, st, a, sgid, m, mtu, g, UNACKED_PSNS)
}

/// Whether a message of operation `op` goes out in steps of at most [`UNACKED_PSNS`] packets
/// past the last one its peer is known to have: a SEND or a WRITE (a READ asks for at most
/// [`READ_CHUNK`] bytes at a time, the rest are one packet).
fn paced(op: WrOpcode) -> bool {
    op.is_send() || matches!(op, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm)
}

/// Sends the packets of `f` (again), from the head's message: a SEND or a WRITE at most `room`
/// of them ([`paced`]), the rest later ([`more`]); what goes wrong on the way is a lost packet.
#[expect(clippy::too_many_arguments)]
fn send_again(
    qp: &Arc<QpShared>,
    st: &mut Requester,
    a: &QpAttr,
    sgid: &[u8; 16],
    m: &Message<'_>,
    mtu: Mtu,
    f: InFlight,
    room: u32,
) -> Step {
    let count = if paced(m.opcode) {
        f.npkts.min(room)
    } else {
        f.npkts
    };
    st.head_sent = f.first.add(count);
    if paced(m.opcode) {
        // Answers may name these PSNs before `transmit` returns.
        if let Some(e) = qp.answer.lock().expect.as_mut() {
            e.due.sent = st.head_sent;
        }
    }
    let Some(tx) = peer_tx(qp, a, sgid) else {
        return Step::Exec(Exec::Sent);
    };
    match transmit(qp, &tx, m, mtu, f, count, Service::Rc) {
        Err(wire::NotSent::Local) => {
            qp.answer.lock().forget();
            Step::Done(WcStatus::LocProtErr)
        }
        _ => Step::Exec(Exec::Sent),
    }
}

/// The requester of a UC QP whose peer is on another host: sends the message `m` as packets
/// of the path MTU with the next PSNs and is done (UC has no answers: a lost packet loses the
/// message, which the responder drops). Only the local side can fail it: its own memory.
pub(super) fn send_unacked(
    qp: &QpShared,
    st: &mut Requester,
    a: &QpAttr,
    sgid: &[u8; 16],
    m: &Message<'_>,
) -> WcStatus {
    let Some(mtu) = Mtu::from_ib(a.path_mtu) else {
        return WcStatus::LocQpOpErr;
    };
    let npkts = mtu.packets(m.len as u64) as u32;
    let f = InFlight {
        first: st.take_psns(npkts),
        npkts,
        off: 0,
        len: m.len,
    };
    let Some(tx) = peer_tx(qp, a, sgid) else {
        return WcStatus::Success;
    };
    match transmit(qp, &tx, m, mtu, f, f.npkts, Service::Uc) {
        Err(wire::NotSent::Local) => WcStatus::LocProtErr,
        _ => WcStatus::Success,
    }
}

/// The flow to the connected peer of `qp` (attributes `a`) from the GID `sgid`.
fn peer_tx(qp: &QpShared, a: &QpAttr, sgid: &[u8; 16]) -> Option<Tx> {
    Tx::new(
        &qp.tables,
        qp.qpn,
        sgid,
        &a.route.dgid,
        a.dest_qp_num,
        a.route.hop_limit,
        a.route.traffic_class,
    )
}

/// The trailer header of the last packet of `op`.
fn trailer(op: WrOpcode) -> Ext {
    match op {
        WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm => Ext::IMM_DT,
        WrOpcode::SendWithInv => Ext::IETH,
        _ => Ext::NONE,
    }
}

/// Builds and sends the request packets of `f` (a SEND's or WRITE's first `count` of them),
/// as RC or UC (`service`) packets. A SEND or WRITE's `f` may start within the message (at
/// byte `f.off`, sent again from there): its packets are then middle and last ones.
fn transmit(
    qp: &QpShared,
    tx: &Tx,
    m: &Message<'_>,
    mtu: Mtu,
    f: InFlight,
    count: u32,
    service: Service,
) -> Result<(), wire::NotSent> {
    let stats = &qp.tables.stats;
    let dest_qpn = tx.dest_qpn;
    let one = |op: Opcode| {
        let mut bth = Bth::new(op, dest_qpn, f.first);
        bth.ack_req = true;
        Headers::new(bth)
    };
    match m.opcode {
        WrOpcode::RdmaRead => {
            let mut h = one(Opcode::RC_RDMA_READ_REQUEST);
            h.reth = Some(Reth {
                va: m.remote_addr.wrapping_add(f.off as u64),
                rkey: m.rkey,
                len: f.len as u32,
            });
            return tx.send(stats, h, 0, |_| Ok(()));
        }
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
            let (op, swap_add, compare) = match m.atomic {
                Some(AtomicOp::CmpSwap(c, s)) => (Opcode::RC_COMPARE_SWAP, s, c),
                Some(AtomicOp::FetchAdd(x)) => (Opcode::RC_FETCH_ADD, x, 0),
                _ => return Err(wire::NotSent::Local),
            };
            let mut h = one(op);
            h.atomic_eth = Some(AtomicEth {
                va: m.remote_addr,
                rkey: m.rkey,
                swap_add,
                compare,
            });
            return tx.send(stats, h, 0, |_| Ok(()));
        }
        WrOpcode::Flush => {
            let mut h = one(Opcode::RC_FLUSH);
            h.reth = Some(Reth {
                va: m.remote_addr,
                rkey: m.rkey,
                len: m.len as u32,
            });
            h.feth = m.flush;
            return tx.send(stats, h, 0, |_| Ok(()));
        }
        WrOpcode::AtomicWrite => {
            let mut h = one(Opcode::RC_ATOMIC_WRITE);
            h.reth = Some(Reth {
                va: m.remote_addr,
                rkey: m.rkey,
                len: 8,
            });
            let local = core::cell::Cell::new(false);
            let r = tx.send(stats, h, 8, |out| {
                gather(m.data, 0, out, true).inspect_err(|_| local.set(true))
            });
            return if local.get() {
                Err(wire::NotSent::Local)
            } else {
                r
            };
        }
        _ => {}
    }
    let kind = if m.opcode.is_send() {
        Kind::Send
    } else {
        Kind::Write
    };
    let size = mtu.bytes() as usize;
    // The packets of the message before `f`'s first.
    let k0 = (f.off / size) as u32;
    for i in 0..count.min(f.npkts) {
        let k = k0 + i;
        let last = i + 1 == f.npkts;
        let position = match (k == 0, last) {
            (true, true) => Position::Only,
            (true, false) => Position::First,
            (false, false) => Position::Middle,
            (false, true) => Position::Last,
        };
        let tr = if last { trailer(m.opcode) } else { Ext::NONE };
        let op = Opcode::of(service, kind, position, tr).ok_or(wire::NotSent::Local)?;
        let mut bth = Bth::new(op, dest_qpn, f.first.add(i));
        // UC has no acknowledgements to ask for.
        bth.ack_req = service == Service::Rc && asks_ack(k, i + 1 == count);
        bth.solicited = last && m.solicited;
        let mut h = Headers::new(bth);
        if kind == Kind::Write && k == 0 {
            h.reth = Some(Reth {
                va: m.remote_addr,
                rkey: m.rkey,
                len: m.len as u32,
            });
        }
        if tr == Ext::IMM_DT {
            h.imm = Some(ImmDt(m.imm));
        } else if tr == Ext::IETH {
            h.ieth = Some(Ieth { rkey: m.imm });
        }
        let off = k as usize * size;
        // The WQE is read again for every send: its user may have shrunk it meanwhile.
        let n = m
            .len
            .checked_sub(off)
            .ok_or(wire::NotSent::Local)?
            .min(size);
        let local = core::cell::Cell::new(false);
        let r = tx.send(stats, h, n, |out| {
            gather(m.data, off, out, true).inspect_err(|_| local.set(true))
        });
        if local.get() {
            return Err(wire::NotSent::Local);
        }
        // A packet that did not leave is lost; the rest still go (the peer NAKs the gap).
        let _ = r;
        crate::ib::wq::cond_resched();
    }
    Ok(())
}

/// Whether the request packet `k` of a SEND or WRITE (counted from 0) asks for an ACK: every
/// [`PKTS_PER_ACK`]th, and the last one sent (`last_sent`: of the step, which is the message's
/// last packet when it is).
fn asks_ack(k: u32, last_sent: bool) -> bool {
    last_sent || (k + 1) % PKTS_PER_ACK == 0
}

/// The completer's part (on the inbox work): takes the response `p` from `from` for `qp`'s
/// message in flight, if it is one; whether it was.
pub(super) fn response(qp: &Arc<QpShared>, p: &Packet<'_>, from: &[u8; 16]) -> bool {
    let psn = p.hdr.bth.psn;
    let taken = {
        let mut ans = qp.answer.lock();
        let Answer {
            expect,
            outcome,
            progress,
            rnr_wait,
            ..
        } = &mut *ans;
        match expect.as_mut() {
            Some(e) if e.peer == *from => {
                // Only the head's own READ data, or an ACK within it, is progress (answers to
                // later messages never hold off its retransmission).
                let data = p.info.kind == Kind::ReadResponse
                    && psn.diff(e.due.first) >= 0
                    && psn.diff(e.due.last) <= 0;
                let reached = e.due.reached;
                let o = record(e, outcome, *rnr_wait, p, psn);
                let further = e.due.reached != reached;
                if let (Some(None), true) = (o, data || further) {
                    *progress = true;
                }
                // An ACK within a SEND or WRITE may open the window for its next step.
                o.map(|o| (o, further))
            }
            _ => None,
        }
    };
    if let Some((Some(_), _) | (None, true)) = taken {
        qp.kick();
    }
    taken.is_some()
}

/// Takes the answer `p` at `psn` for the message `e` waits for into `outcome`, the head's
/// answer not yet taken by the requester: as [`answer`]. A sequence NAK's resend or an RNR
/// NAK's wait not begun yet gives way to an answer that follows it (the packets it missed came
/// late, reordered; the peer took the message when it came again): going back N then would
/// only ask for an answer again, from a peer that may have moved on (one whose QP a NAK behind
/// the head put in error never answers). But a sequence NAK no further on than an RNR NAK is
/// for the packets sent behind the refused one, and leaves the RNR NAK's wait in place. An RNR
/// NAK for the head while the requester waits out one (`rnr_wait`) answers a transmission from
/// before that wait, which ends in sending the message again anyway: it is no answer (taking
/// it would wait again and spend another of the `rnr_retry` retries). So is an RNR NAK not
/// acted on yet once an answer says the peer got past its packet.
fn record(
    e: &mut Expect,
    outcome: &mut Option<Outcome>,
    rnr_wait: bool,
    p: &Packet<'_>,
    psn: Psn,
) -> Option<Option<Outcome>> {
    let open = matches!(outcome, None | Some(Outcome::Resend(_) | Outcome::Rnr(_)));
    let reached = e.due.reached;
    let o = answer(e, p, psn, open);
    if matches!((o, *outcome), (Some(None), Some(Outcome::Rnr(_)))) && e.due.reached != reached {
        *outcome = None;
    }
    match (o, *outcome) {
        (Some(Some(Outcome::Resend(false))), Some(Outcome::Rnr(_))) => Some(None),
        (Some(Some(Outcome::Resend(y))), _) => {
            let x = matches!(outcome, Some(Outcome::Resend(true)));
            *outcome = Some(Outcome::Resend(x || y));
            o
        }
        (Some(Some(Outcome::Rnr(_))), _) if rnr_wait => Some(None),
        (Some(Some(n)), _) => {
            *outcome = Some(n);
            o
        }
        _ => o,
    }
}

/// Whether `p` at `psn` is an answer to the message `e` waits for (`None`: it is not), and
/// what it says when it ends the wait (a READ response's data is kept).
fn answer(e: &mut Expect, p: &Packet<'_>, psn: Psn, open: bool) -> Option<Option<Outcome>> {
    // Within the message, and among the packets sent so far.
    let within =
        psn.diff(e.due.first) >= 0 && psn.diff(e.due.last) <= 0 && psn.diff(e.due.sent) < 0;
    let syndrome = p.hdr.aeth.map(|a| a.syndrome);
    let behind = psn.diff(e.due.last) > 0 && psn.diff(e.sent_last) <= 0;
    // Only an answer of its own completes a READ or an atomic at the head; a later answer
    // says that (some of) its own was lost, and the timer asks for it again.
    let later_answers_head = open && e.due.kind == Awaited::Ack;
    if behind && matches!(p.info.kind, Kind::ReadResponse | Kind::AtomicAck) {
        // The answer to a READ or an atomic behind the head, kept for when it gets there.
        if !matches!(syndrome, None | Some(Syndrome::Ack(_))) {
            return None;
        }
        let mtu = e.mtu;
        let b = e
            .reads
            .iter_mut()
            .find(|b| psn.diff(b.due.first) >= 0 && psn.diff(b.due.last) <= 0)?;
        match (p.info.kind, b.due.kind) {
            (Kind::ReadResponse, Awaited::Read) => {
                b.done = b.due.take_read(p, psn, mtu)?;
            }
            (Kind::AtomicAck, Awaited::Atomic) if psn == b.due.first && !b.done => {
                b.orig = Some(p.hdr.atomic_ack_eth?.orig);
                b.done = true;
            }
            _ => return None,
        }
        // The peer executed every message before it: an ACK of them.
        let upto = b.due.first.add(u32::MAX);
        if e.acked.is_none_or(|a| upto.diff(a) > 0) {
            e.acked = Some(upto);
        }
        return Some(later_answers_head.then_some(Outcome::Ack(0)));
    }
    if p.info.kind == Kind::Ack && behind {
        // Behind the head: an ACK there is cumulative, and a NAK says the peer took every
        // packet before it, so either answers the head too.
        let (upto, nak) = match syndrome? {
            Syndrome::Ack(_) => (psn, None),
            Syndrome::RnrNak(t) => (psn.add(u32::MAX), Some(Outcome::Rnr(t))),
            Syndrome::Nak(code) => (psn.add(u32::MAX), Some(nak_outcome(code))),
        };
        if e.acked.is_none_or(|a| upto.diff(a) > 0) {
            e.acked = Some(upto);
        }
        if let Some(o) = nak {
            // The earliest NAK counts: the peer took nothing after it.
            if e.later.is_none_or(|(q, _)| psn.diff(q) < 0) {
                e.later = Some((psn, o));
            }
        }
        return Some(later_answers_head.then_some(Outcome::Ack(0)));
    }
    if !open {
        // The head has its answer already.
        return None;
    }
    match (p.info.kind, syndrome) {
        (Kind::Ack, Some(Syndrome::Ack(_)))
            if matches!(e.due.kind, Awaited::Ack | Awaited::Placed)
                && psn == e.due.last
                && within =>
        {
            Some(Some(Outcome::Ack(0)))
        }
        // Within a SEND or WRITE (it asked every [`PKTS_PER_ACK`] packets): the peer has every
        // packet up to this one. No answer yet, but the window moves on.
        (Kind::Ack, Some(Syndrome::Ack(_))) if e.due.kind == Awaited::Ack && within => {
            let next = psn.add(1);
            if next.diff(e.due.reached) > 0 {
                e.due.reached = next;
            }
            Some(None)
        }
        (Kind::ReadResponse, Some(Syndrome::Ack(_)))
            if e.due.kind == Awaited::Placed
                && psn == e.due.last
                && p.info.position == Position::Only
                && p.payload.is_empty() =>
        {
            Some(Some(Outcome::Ack(0)))
        }
        // The peer took every packet before it: the message goes again from there after the
        // wait.
        // (One for a packet before the furthest the peer is known to have is stale.)
        (Kind::Ack, Some(Syndrome::RnrNak(t))) if within => {
            if psn.diff(e.due.reached) < 0 {
                return Some(None);
            }
            e.due.reached = psn;
            Some(Some(Outcome::Rnr(t)))
        }
        // The peer expects this packet: the message goes again from there. (One for a packet
        // before the furthest the peer is known to have is stale: it answers a transmission
        // from before a later answer.)
        (Kind::Ack, Some(Syndrome::Nak(NakCode::PsnSeqErr))) if within => {
            let d = psn.diff(e.due.reached);
            if d < 0 {
                return Some(None);
            }
            if d > 0 {
                e.due.reached = psn;
            }
            Some(Some(Outcome::Resend(d > 0)))
        }
        (Kind::Ack, Some(Syndrome::Nak(code))) if within => Some(Some(nak_outcome(code))),
        (Kind::AtomicAck, Some(Syndrome::Ack(_)))
            if e.due.kind == Awaited::Atomic && psn == e.due.first =>
        {
            p.hdr.atomic_ack_eth.map(|a| Some(Outcome::Ack(a.orig)))
        }
        (Kind::ReadResponse, syndrome) if e.due.kind == Awaited::Read => {
            if !matches!(syndrome, None | Some(Syndrome::Ack(_))) {
                return None;
            }
            let done = e.due.take_read(p, psn, e.mtu)?;
            Some(done.then_some(Outcome::Ack(0)))
        }
        _ => None,
    }
}

/// What a NAK with `code` makes of the message it names.
fn nak_outcome(code: NakCode) -> Outcome {
    match code {
        NakCode::PsnSeqErr => Outcome::Resend(false),
        NakCode::RemAccess => Outcome::Nak(Nak::Access),
        NakCode::RemOp => Outcome::Nak(Nak::Op),
        NakCode::InvReq | NakCode::InvRdReq => Outcome::Nak(Nak::InvReq),
    }
}

/// The responder's state of an RC QP (in `RecvSide`).
pub(crate) struct Responder {
    /// The PSN expected next (`rq_psn` at first).
    epsn: Psn,
    /// Messages completed (the AETH's MSN).
    msn: u32,
    /// The PSN a duplicate SEND or WRITE is acknowledged at: the last packet of a SEND or a
    /// WRITE taken, never a READ's or an atomic's, whose requester would take a plain ACK at
    /// its PSN as the answer without the data (rxe's `check_ack` completes the WQE whose last
    /// PSN an ACK names; rxe's own responder keeps `ack_psn` for this). When it is not the
    /// PSN before `epsn`, a READ or an atomic was taken since, and duplicates get no ACK.
    acked: Psn,
    /// A PSN sequence NAK was sent for the gap at `epsn`: one is enough.
    nak_sent: bool,
    /// UC: the message under way was lost or refused; its packets are dropped up to the first
    /// packet of the next one.
    dropping: bool,
    /// The message being received.
    cur: Cur,
    /// The last READs and atomics taken, for duplicates.
    taken: [Option<Taken>; RESOURCES],
    next_taken: usize,
    /// RC: the fault the packet at `epsn` waits for (its RNR NAK), so that the packet sent
    /// again learns how it ended: one that failed (a hole, read-only memory) gets a NAK
    /// instead of an RNR NAK after each resend, for ever with an `rnr_retry` of 7.
    fault: fault::Ticket,
    /// The QP's response work answers a READ (`reading`, taken out while it sends) and then
    /// takes the request packets kept meanwhile (`held`): while `owned`, the inbox keeps every
    /// request packet for this QP there, so that the QP's answers keep its requests' order.
    owned: bool,
    reading: Option<Reading>,
    held: KVec<Held>,
    /// A request packet was not kept (beyond [`HELD_MAX`]): the response work sends a PSN
    /// sequence NAK once it has taken the others.
    held_lost: bool,
    /// Never the same for two responders: a READ the response work was answering when a reset
    /// or a new `rq_psn` replaced this one is not put back into its successor.
    epoch: u64,
}

#[derive(Default, Clone, Copy)]
enum Cur {
    #[default]
    Idle,
    /// A SEND, with the bytes placed so far.
    Send(usize),
    /// An RDMA WRITE: the next address, its key, the bytes still to come and the total.
    Write {
        va: u64,
        rkey: u32,
        resid: u64,
        total: u32,
    },
}

impl Default for Responder {
    fn default() -> Self {
        Self {
            epsn: Psn::default(),
            msn: 0,
            acked: Psn::default(),
            nak_sent: false,
            dropping: false,
            cur: Cur::Idle,
            taken: [None; RESOURCES],
            next_taken: 0,
            fault: fault::Ticket::default(),
            owned: false,
            reading: None,
            held: KVec::new(),
            held_lost: false,
            epoch: NEXT_EPOCH.fetch_add(1, Relaxed),
        }
    }
}

impl Responder {
    /// A responder expecting PSN `psn` (`rq_psn`).
    pub(crate) fn new(psn: u32) -> Self {
        let epsn = Psn::new(psn);
        Self {
            epsn,
            acked: epsn.add(u32::MAX),
            ..Default::default()
        }
    }

    /// UC: whether the packet at `psn` (at `position` in its message) is to be executed. A UC
    /// responder has no answers: a packet out of step loses the message under way, whose
    /// remaining packets are dropped, and the first packet of any later message starts afresh
    /// at its own PSN (IBTA 9.7.5.1.2; rxe's `check_psn`).
    fn uc_in_step(&mut self, psn: Psn, position: Position) -> bool {
        if psn == self.epsn && !self.dropping {
            return true;
        }
        self.cur = Cur::Idle;
        if !position.starts() {
            self.dropping = true;
            return false;
        }
        self.epsn = psn;
        self.dropping = false;
        true
    }

    /// The PSN expected next (`rq_psn` as `ibv_query_qp` shows it).
    pub(crate) fn epsn(&self) -> u32 {
        self.epsn.get()
    }

    /// Keeps the request packet `raw` (from `from` to `to`) for the response work; whether it
    /// was kept (not beyond [`HELD_MAX`] nor the device's budget, nor without memory).
    fn hold(&mut self, tables: &Arc<Tables>, raw: &[u8], from: &[u8; 16], to: &[u8; 16]) -> bool {
        let mut copy = KVec::new();
        let kept = self.held.len() < HELD_MAX
            && copy.extend_from_slice(raw, GFP_KERNEL).is_ok()
            && self.held.reserve(1, GFP_KERNEL).is_ok()
            && tables.backlog.keep();
        if kept {
            let place = Place {
                tables: tables.clone(),
                taken: false,
            };
            let h = Held {
                raw: copy,
                from: *from,
                to: *to,
                place,
            };
            // Room was reserved: this cannot fail (and what would fail is counted as dropped).
            let _ = self.held.push(h, GFP_KERNEL);
        }
        // The peer is asked for it again once the kept ones are taken (a duplicate or a packet
        // nobody would take gets that NAK too: harmless, it names the PSN expected).
        self.held_lost |= !kept;
        kept
    }

    /// The READ `m` at `psn` (checked), to answer at the path MTU `mtu` with the MSN of now to
    /// the peer's QP `dest` at `peer` from the local GID `local`.
    fn reading(
        &self,
        m: &Message<'_>,
        psn: Psn,
        mtu: Mtu,
        dest: u32,
        peer: &[u8; 16],
        local: &[u8; 16],
    ) -> Reading {
        Reading {
            psn,
            n: mtu.packets(m.len as u64) as u32,
            next: 0,
            va: m.remote_addr,
            len: m.len as u64,
            rkey: m.rkey,
            mtu,
            msn: self.msn,
            dest,
            peer: *peer,
            local: *local,
            epoch: self.epoch,
        }
    }

    /// Hands the READ `r` to the response work, which owns the request stream from now on.
    fn answer_later(&mut self, r: Reading) {
        self.reading = Some(r);
        self.owned = true;
    }
}

/// The operation a request packet belongs to.
fn wr_opcode(p: &Packet<'_>) -> Option<WrOpcode> {
    let ext = p.info.ext;
    Some(match p.info.kind {
        Kind::Send if ext.contains(Ext::IMM_DT) => WrOpcode::SendWithImm,
        Kind::Send if ext.contains(Ext::IETH) => WrOpcode::SendWithInv,
        Kind::Send => WrOpcode::Send,
        Kind::Write if ext.contains(Ext::IMM_DT) => WrOpcode::RdmaWriteWithImm,
        Kind::Write => WrOpcode::RdmaWrite,
        Kind::ReadRequest => WrOpcode::RdmaRead,
        Kind::CompareSwap => WrOpcode::AtomicCmpAndSwp,
        Kind::FetchAdd => WrOpcode::AtomicFetchAndAdd,
        Kind::AtomicWrite => WrOpcode::AtomicWrite,
        Kind::Flush => WrOpcode::Flush,
        _ => return None,
    })
}

/// The way back from `qp` at the local GID `local` to the peer's QP `dest_qpn` at `peer`;
/// looked up only for an answer, with no ring lock held (the device list has a lock of its own).
fn back_to(qp: &QpShared, local: &[u8; 16], peer: &[u8; 16], dest_qpn: u32) -> Option<Tx> {
    flow_back(&qp.tables, qp.qpn, local, peer, dest_qpn)
}

/// The flow of a responder's answers from QP `qpn` of the device of `tables` at the GID `local`
/// to the peer's QP `dest_qpn` at `peer` (its UDP source port hashed from `qpn` alone).
fn flow_back(
    tables: &Arc<Tables>,
    qpn: u32,
    local: &[u8; 16],
    peer: &[u8; 16],
    dest_qpn: u32,
) -> Option<Tx> {
    Tx::new(tables, qpn, local, peer, 0, 64, 0).map(|mut t| {
        t.dest_qpn = dest_qpn;
        t
    })
}

/// The responder's part (on the inbox work, or on the QP's response work, as `by` says):
/// executes the request packet `p` that came from `from` to the local GID `to` on `qp`, and
/// answers it; whether the packet was taken (or kept for the response work).
pub(super) fn request(
    qp: &Arc<QpShared>,
    p: &Packet<'_>,
    from: &[u8; 16],
    to: &[u8; 16],
    by: By<'_>,
) -> bool {
    let Some(op) = wr_opcode(p) else {
        return false;
    };
    let back = |dest_qpn: u32| back_to(qp, to, from, dest_qpn);
    let mut rq = qp.rq.lock();
    // Kept for a responder that a reset or a new `rq_psn` has replaced since.
    if matches!(by, By::Work(epoch) if rq.wire.epoch != epoch) {
        return false;
    }
    if rq.peer.1 != *from || rq.local != *to {
        drop(rq);
        qp.tables.stats.inc(Counter::RcvdPeerErr);
        return false;
    }
    if !qp.can_receive() {
        return false;
    }
    match by {
        By::Inbox(raw) if rq.wire.owned => return rq.wire.hold(&qp.tables, raw, from, to),
        _ => {}
    }
    let dest = rq.peer.0;
    let psn = p.hdr.bth.psn;
    let uc = qp.qp_type == QpType::Uc;
    if uc && !rq.wire.uc_in_step(psn, p.info.position) {
        return false;
    }
    let d = psn.diff(rq.wire.epsn);
    if d > 0 {
        // A gap: packets were lost. One NAK asks for them.
        qp.tables.stats.inc(Counter::OutOfSeqRequest);
        if !rq.wire.nak_sent {
            rq.wire.nak_sent = true;
            let (epsn, msn) = (rq.wire.epsn, rq.wire.msn);
            drop(rq);
            ack(
                qp,
                back(dest).as_ref(),
                Syndrome::Nak(NakCode::PsnSeqErr),
                epsn,
                msn,
            );
        }
        return false;
    }
    let fault = Cell::new(rq.wire.fault);
    let mut m = Message {
        from: qp,
        ticket: (!uc).then_some(&fault),
        resends: true,
        opcode: op,
        src_qpn: rq.peer.0,
        src_gid: *from,
        imm: match (p.hdr.imm, p.hdr.ieth) {
            (Some(i), _) => i.0,
            // The key to invalidate travels where immediate data would (host order).
            (_, Some(i)) => i.rkey,
            _ => 0,
        },
        solicited: p.hdr.bth.solicited,
        len: p.payload.len(),
        data: Src::Inline(p.payload),
        remote_addr: p.hdr.reth.map_or(0, |r| r.va),
        rkey: p.hdr.reth.map_or(0, |r| r.rkey),
        atomic: p.hdr.atomic_eth.map(|a| match p.info.kind {
            Kind::CompareSwap => AtomicOp::CmpSwap(a.compare, a.swap_add),
            _ => AtomicOp::FetchAdd(a.swap_add),
        }),
        flush: p.hdr.feth,
        read_into: &[],
        ud: None,
        ahead: 0,
    };
    if p.info.kind == Kind::AtomicWrite {
        // Its 8 bytes, in memory order (the parser took exactly 8).
        m.atomic = <[u8; 8]>::try_from(p.payload)
            .ok()
            .map(|b| AtomicOp::Write(u64::from_ne_bytes(b)));
    }
    // A READ's and a FLUSH's length is the RETH's; an ATOMIC WRITE's must say 8.
    let reth_len = matches!(
        p.info.kind,
        Kind::ReadRequest | Kind::Flush | Kind::AtomicWrite
    );
    if let Some(r) = p.hdr.reth.filter(|_| reth_len) {
        m.len = r.len as usize;
    }
    if let Some(a) = p.hdr.atomic_eth {
        m.remote_addr = a.va;
        m.rkey = a.rkey;
        m.len = 8;
    }
    if d < 0 {
        qp.tables.stats.inc(Counter::DuplicateRequest);
        // The fault ticket is the packet at `epsn`'s, not a duplicate's (a READ executed again).
        m.ticket = None;
        let w = &rq.wire;
        let (acked, epsn, msn) = (w.acked, w.epsn, w.msn);
        match p.info.kind {
            Kind::ReadRequest => {
                let mtu = qp_mtu(qp);
                let n = mtu.packets(m.len as u64) as u32;
                let (va, len, rkey) = (m.remote_addr, m.len as u64, m.rkey);
                // Only a part of a READ taken, whose whole response lies before `epsn`.
                if psn.add(n).diff(epsn) > 0
                    || !w
                        .taken
                        .iter()
                        .flatten()
                        .any(|t| t.covers_read(psn, n, va, len, rkey))
                {
                    return false;
                }
                let r = rq.wire.reading(&m, psn, mtu, dest, from, to);
                answer_read(qp, rq, r);
            }
            Kind::CompareSwap | Kind::FetchAdd => {
                let orig = w.taken.iter().flatten().find_map(|t| match *t {
                    Taken::Atomic { psn: p, orig } if p == psn => Some(orig),
                    _ => None,
                });
                drop(rq);
                match orig {
                    Some(v) => atomic_ack(qp, back(dest).as_ref(), psn, msn, v),
                    None => return false,
                }
            }
            // Answered again as the first time (rxe replays its resource), not executed.
            Kind::Flush | Kind::AtomicWrite => {
                drop(rq);
                placed_ack(qp, back(dest).as_ref(), psn, msn);
            }
            // A SEND or a WRITE: acknowledged again once per message (where it asks for an
            // ACK or ends), and only when nothing answered otherwise (a READ, an atomic) was
            // taken since the last SEND or WRITE. Such an answer acknowledges everything
            // before it, and its requester goes back to it anyway; an older ACK arriving
            // amid a READ's response packets would break rxe's completer (`check_ack` takes
            // it and forgets that a READ response is under way).
            _ => {
                drop(rq);
                let asks = p.hdr.bth.ack_req || p.info.position.ends();
                if asks && acked == epsn.add(u32::MAX) {
                    ack(
                        qp,
                        back(dest).as_ref(),
                        Syndrome::Ack(NO_CREDITS),
                        acked,
                        msn,
                    );
                }
            }
        }
        return true;
    }
    resp::comm_established(qp, &mut rq);
    let mtu = qp_mtu(qp);
    let mut read_now = None;
    let r = execute_in_order(qp, &mut rq, &m, p, mtu);
    rq.segs.clear();
    let w = &mut rq.wire;
    // A packet taken ends its fault's story; the next one starts its own.
    w.fault = match r {
        Reply::Ack(_) => fault::Ticket::default(),
        _ => fault.get(),
    };
    let msn = match r {
        // Taken: the PSN moves on (a READ takes one per response packet).
        Reply::Ack(orig) => {
            w.nak_sent = false;
            let n = match p.info.kind {
                Kind::ReadRequest => mtu.packets(m.len as u64) as u32,
                _ => 1,
            };
            w.epsn = psn.add(n);
            if matches!(p.info.kind, Kind::Send | Kind::Write) {
                w.acked = psn;
            }
            if p.info.position.ends() {
                w.msn = w.msn.wrapping_add(1) & Psn::MASK;
                w.cur = Cur::Idle;
            }
            let taken = match p.info.kind {
                Kind::ReadRequest => Some(Taken::Read {
                    psn,
                    n,
                    va: m.remote_addr,
                    len: m.len as u64,
                    rkey: m.rkey,
                }),
                _ if op.is_atomic() => Some(Taken::Atomic { psn, orig }),
                _ => None,
            };
            if taken.is_some() {
                let i = w.next_taken;
                w.taken[i] = taken;
                w.next_taken = (i + 1) % RESOURCES;
            }
            if p.info.kind == Kind::ReadRequest {
                // Its response (after the counting below), now or by the response work.
                read_now = Some(w.reading(&m, psn, mtu, dest, from, to));
            }
            w.msn
        }
        Reply::Nak(_) => {
            w.cur = Cur::Idle;
            w.dropping = uc;
            w.msn
        }
        // UC cannot ask again: the message is lost (a missing page is being faulted in for
        // the next one).
        _ if uc => {
            w.cur = Cur::Idle;
            w.dropping = true;
            return false;
        }
        Reply::Rnr(_) | Reply::Wait => w.msn,
        Reply::Drop | Reply::Retry => return false,
    };
    if let Some(r) = read_now {
        // A READ taken (an ACK, which `answered` leaves alone; its request carries no bytes).
        answer_read(qp, rq, r);
        return true;
    }
    drop(rq);
    // Counted, and a NAK moves an RC QP to ERR, with no ring lock held.
    let r = resp::answered(qp, r);
    if uc {
        // Nothing is answered: a message refused is dropped.
        if let Reply::Ack(_) = r {
            qp.tables
                .stats
                .add(Counter::RcvdBytes, p.payload.len() as u64);
        }
        return matches!(r, Reply::Ack(_));
    }
    match r {
        Reply::Ack(orig) => {
            qp.tables
                .stats
                .add(Counter::RcvdBytes, p.payload.len() as u64);
            match p.info.kind {
                Kind::CompareSwap | Kind::FetchAdd => {
                    atomic_ack(qp, back(dest).as_ref(), psn, msn, orig)
                }
                Kind::Flush | Kind::AtomicWrite => placed_ack(qp, back(dest).as_ref(), psn, msn),
                _ if p.hdr.bth.ack_req
                    || p.info.position.ends()
                    || unasked_ack(&qp.tables.backlog, psn) =>
                {
                    ack(qp, back(dest).as_ref(), Syndrome::Ack(NO_CREDITS), psn, msn)
                }
                _ => {}
            }
        }
        Reply::Nak(n) => {
            let code = match n {
                Nak::InvReq => NakCode::InvReq,
                Nak::Access => NakCode::RemAccess,
                Nak::Op => NakCode::RemOp,
            };
            ack(qp, back(dest).as_ref(), Syndrome::Nak(code), psn, msn);
        }
        _ => {
            // The receive queue is empty, or the memory is being faulted in: ask again later.
            let t = qp.min_rnr_timer.load(Acquire) as u8;
            ack(qp, back(dest).as_ref(), Syndrome::RnrNak(t), psn, msn);
        }
    }
    true
}

/// The path MTU the responder holds a QP to (4096 before one is set).
fn qp_mtu(qp: &QpShared) -> Mtu {
    Mtu::from_ib(qp.path_mtu.load(Acquire)).unwrap_or(Mtu::Mtu4096)
}

/// Executes the in-order request packet `p` (its message `m`) on `qp`.
fn execute_in_order(
    qp: &Arc<QpShared>,
    rq: &mut crate::qp::RecvSide,
    m: &Message<'_>,
    p: &Packet<'_>,
    mtu: Mtu,
) -> Reply {
    let pos = p.info.position;
    // Packets of a message in order: FIRST, MIDDLE..., LAST, of one kind.
    let cur = rq.wire.cur;
    let continues = !pos.starts();
    let fits = match (cur, p.info.kind) {
        (Cur::Send(_), Kind::Send) | (Cur::Write { .. }, Kind::Write) => continues,
        (Cur::Idle, _) => !continues,
        _ => false,
    };
    // A packet that does not end its message carries exactly the path MTU; none carries more.
    let size = mtu.bytes() as usize;
    if !fits || p.payload.len() > size || (!pos.ends() && p.payload.len() != size) {
        return Reply::Nak(Nak::InvReq);
    }
    match p.info.kind {
        Kind::Send => {
            let off = match cur {
                Cur::Send(off) => off,
                _ => 0,
            };
            let r = resp::send_part(qp, rq, m, off, pos.starts(), pos.ends());
            if let Reply::Ack(_) = r {
                rq.wire.cur = Cur::Send(off + p.payload.len());
            }
            r
        }
        Kind::Write => {
            let (va, rkey, resid, total) = match (cur, p.hdr.reth) {
                (
                    Cur::Write {
                        va,
                        rkey,
                        resid,
                        total,
                    },
                    _,
                ) => (va, rkey, resid, total),
                // No message is longer than 2 GiB (rxe's `check_length` too).
                (_, Some(r)) if u64::from(r.len) <= super::MAX_MSG => {
                    (r.va, r.rkey, u64::from(r.len), r.len)
                }
                _ => return Reply::Nak(Nak::InvReq),
            };
            // The last packet carries exactly what is left, an earlier one leaves some for it.
            let len = p.payload.len() as u64;
            if (pos.ends() && len != resid) || (!pos.ends() && len >= resid) {
                return Reply::Nak(Nak::InvReq);
            }
            // A WRITE of several packets is checked whole at its first packet (as rxe's
            // `check_rkey` checks the rest of the RETH's length at every packet): one reaching
            // beyond its MR, or through an extended window touching more elements than an
            // access may, fails before a byte is placed. (A WRITE_ONLY's range is all of it.)
            let first = !matches!(cur, Cur::Write { .. });
            if first && !pos.ends() {
                let whole = u64::from(total);
                if qp
                    .tables
                    .remote(qp, rkey, va, whole, access::REMOTE_WRITE)
                    .is_err()
                {
                    return Reply::Nak(Nak::Access);
                }
            }
            // A fault for this packet takes in the pages of the packets still to come with it
            // (one fault for the WRITE, so one RNR NAK, not one per page: each sends its
            // requester back).
            let ahead = if keys::is_window(rkey) {
                0
            } else {
                (resid - len).min(fault::AHEAD as u64) as usize
            };
            let part = Message {
                remote_addr: va,
                rkey,
                ahead,
                ..*m
            };
            let r = resp::write_part(qp, rq, &part, total, pos.ends());
            if let Reply::Ack(_) = r {
                rq.wire.cur = Cur::Write {
                    va: va.wrapping_add(len),
                    rkey,
                    resid: resid - len,
                    total,
                };
            }
            r
        }
        // A READ of more than 2 GiB would take more than half the PSN space for its response.
        Kind::ReadRequest if m.len as u64 > super::MAX_MSG => Reply::Nak(Nak::InvReq),
        Kind::ReadRequest => match resp::read_target(qp, m) {
            Ok(_) => Reply::Ack(0),
            Err(r) => r,
        },
        Kind::CompareSwap | Kind::FetchAdd | Kind::AtomicWrite => resp::atomic(qp, m),
        Kind::Flush => resp::flush(qp, m),
        _ => Reply::Nak(Nak::InvReq),
    }
}

/// Sends an ACK or NAK for `psn`.
fn ack(qp: &QpShared, tx: Option<&Tx>, syndrome: Syndrome, psn: Psn, msn: u32) {
    if let Some(tx) = tx {
        send_ack(&qp.tables, tx, syndrome, psn, msn);
    }
}

fn send_ack(tables: &Tables, tx: &Tx, syndrome: Syndrome, psn: Psn, msn: u32) {
    let mut h = Headers::new(Bth::new(Opcode::RC_ACKNOWLEDGE, tx.dest_qpn, psn));
    h.aeth = Some(Aeth { syndrome, msn });
    let _ = tx.send(&tables.stats, h, 0, |_| Ok(()));
}

/// Answers a FLUSH or an ATOMIC WRITE at `psn` as rxe does: an RDMA READ response without
/// data.
fn placed_ack(qp: &QpShared, tx: Option<&Tx>, psn: Psn, msn: u32) {
    let Some(tx) = tx else { return };
    let mut h = Headers::new(Bth::new(
        Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        tx.dest_qpn,
        psn,
    ));
    h.aeth = Some(Aeth {
        syndrome: Syndrome::Ack(NO_CREDITS),
        msn,
    });
    let _ = tx.send(&qp.tables.stats, h, 0, |_| Ok(()));
}

fn atomic_ack(qp: &QpShared, tx: Option<&Tx>, psn: Psn, msn: u32, orig: u64) {
    let Some(tx) = tx else { return };
    let mut h = Headers::new(Bth::new(Opcode::RC_ATOMIC_ACKNOWLEDGE, tx.dest_qpn, psn));
    h.aeth = Some(Aeth {
        syndrome: Syndrome::Ack(NO_CREDITS),
        msn,
    });
    h.atomic_ack_eth = Some(AtomicAckEth { orig });
    let _ = tx.send(&qp.tables.stats, h, 0, |_| Ok(()));
}

/// Answers the READ `r` of `qp`, whose responder `rq` holds: at once when it is short and
/// nothing waits before it, else by the QP's response work.
fn answer_read(qp: &Arc<QpShared>, mut rq: MutexGuard<'_, RecvSide>, mut r: Reading) {
    // None is pending: while one is, the inbox keeps the QP's requests, and the response work
    // takes none.
    debug_assert!(rq.wire.reading.is_none());
    if r.n > READ_BURST {
        rq.wire.answer_later(r);
        drop(rq);
        qp.kick_responses();
        return;
    }
    drop(rq);
    let _ = read_some(qp, &mut r, READ_BURST);
}

/// Sends the next response packets of the READ `r`, at most `burst` of them; whether the
/// response is ended (all sent, or the rest lost). The memory is looked up again for the
/// packets sent (it was checked when the READ was taken): a page gone since loses the rest of
/// the response, which the peer asks for again.
fn read_some(qp: &Arc<QpShared>, r: &mut Reading, burst: u32) -> Result<bool> {
    let Some(tx) = back_to(qp, &r.local, &r.peer, r.dest) else {
        return Ok(true);
    };
    let size = u64::from(r.mtu.bytes());
    let end = r.n.min(r.next.saturating_add(burst));
    let start = u64::from(r.next) * size;
    let bytes = (u64::from(end) * size).min(r.len) - start;
    let m = Message {
        from: qp,
        ticket: None,
        resends: true,
        opcode: WrOpcode::RdmaRead,
        src_qpn: r.dest,
        src_gid: r.peer,
        imm: 0,
        solicited: false,
        len: bytes as usize,
        data: Src::Inline(&[]),
        remote_addr: r.va.wrapping_add(start),
        rkey: r.rkey,
        atomic: None,
        flush: None,
        read_into: &[],
        ud: None,
        ahead: 0,
    };
    let segs = resp::read_target(qp, &m).map_err(|_| EACCES)?;
    let segs: &[Seg] = segs.as_deref().unwrap_or(&[]);
    // The first range each packet reads from, and where it starts in this part: a cursor, so
    // that many ranges (a layout's) are walked once, not once per packet.
    let (mut first, mut before) = (0usize, 0usize);
    for i in r.next..end {
        let position = match (i == 0, i + 1 == r.n) {
            (true, true) => Position::Only,
            (true, false) => Position::First,
            (false, false) => Position::Middle,
            (false, true) => Position::Last,
        };
        let op = Opcode::of(Service::Rc, Kind::ReadResponse, position, Ext::NONE).ok_or(EINVAL)?;
        let mut h = Headers::new(Bth::new(op, tx.dest_qpn, r.psn.add(i)));
        if position != Position::Middle {
            h.aeth = Some(Aeth {
                syndrome: Syndrome::Ack(NO_CREDITS),
                msn: r.msn,
            });
        }
        let off = (u64::from(i - r.next) * size) as usize;
        let k = (size as usize).min(bytes as usize - off);
        while first < segs.len() && off - before >= segs[first].bytes() {
            before += segs[first].bytes();
            first += 1;
        }
        let rest = &segs[first..];
        tx.send(&qp.tables.stats, h, k, |out| {
            gather(Src::Segs(rest), off - before, out, false)
        })
        .map_err(|_| EIO)?;
        crate::ib::wq::cond_resched();
    }
    r.next = end;
    Ok(end == r.n)
}

/// The QP's response work: sends the next [`READ_BURST`] packets of the READ it answers, or
/// takes up to as many request packets kept meanwhile, in order; then it is queued again (other
/// work runs in between) until nothing is left, when the inbox takes the QP's requests again.
pub(crate) fn respond(qp: &Arc<QpShared>) {
    let mut rq = qp.rq.lock();
    if !qp.can_receive() {
        // Nothing more is answered (the error state, a reset: the responder is new then); the
        // packets kept count as dropped.
        let w = &mut rq.wire;
        w.reading = None;
        w.held.clear();
        w.owned = false;
        return;
    }
    if let Some(mut r) = rq.wire.reading.take() {
        // Sent with the lock dropped: the inbox keeps this QP's requests meanwhile (`owned`).
        drop(rq);
        let ended = !matches!(read_some(qp, &mut r, READ_BURST), Ok(false));
        let mut rq = qp.rq.lock();
        if rq.wire.epoch != r.epoch || !rq.wire.owned {
            return;
        }
        if !ended {
            rq.wire.reading = Some(r);
        }
        drop(rq);
        qp.kick_responses();
        return;
    }
    let epoch = rq.wire.epoch;
    for _ in 0..READ_BURST {
        let Ok(mut h) = rq.wire.held.remove(0) else {
            // All taken: the inbox hands the QP's requests over again.
            let w = &mut rq.wire;
            w.owned = false;
            if core::mem::take(&mut w.held_lost) && !w.nak_sent {
                // One was not kept: the peer sends it again from the PSN expected.
                w.nak_sent = true;
                let (epsn, msn, dest, to) = (w.epsn, w.msn, rq.peer.0, rq.local);
                let from = rq.peer.1;
                drop(rq);
                let nak = Syndrome::Nak(NakCode::PsnSeqErr);
                ack(qp, back_to(qp, &to, &from, dest).as_ref(), nak, epsn, msn);
            }
            return;
        };
        drop(rq);
        // Counted below if this delivery does not take it.
        h.place.taken = true;
        let taken = match super::packet::header::parse(&h.raw) {
            Ok(p) => request(qp, &p, &h.from, &h.to, By::Work(epoch)),
            Err(_) => false,
        };
        if !taken {
            qp.tables.stats.inc(Counter::RcvdDroppedPkts);
        }
        rq = qp.rq.lock();
        // A READ it started goes first (on the next run); a responder put in this one's place
        // has nothing kept.
        if rq.wire.reading.is_some() || !rq.wire.owned || rq.wire.epoch != epoch {
            break;
        }
    }
    drop(rq);
    qp.kick_responses();
}

#[kunit_tests(rodp_rc)]
mod tests {
    use super::*;
    use crate::engine::packet::header::{build, parse};

    fn last(qpn: u32, peer: u8, epsn: u32) -> Last {
        Last {
            qpn,
            peer_qpn: 7,
            peer: [peer; 16],
            local: [9; 16],
            epsn: Psn::new(epsn),
            msn: 1,
            at: Instant::now(),
        }
    }

    #[test]
    fn unasked_acks_come_every_4th_psn_while_the_inbox_is_behind() {
        let b = Backlog::new();
        let acks = |b: &Backlog| (0..64).filter(|&n| unasked_ack(b, Psn::new(n))).count();
        // 15, 31, 47, 63.
        assert_eq!(acks(&b), 4);
        for _ in 0..BEHIND {
            b.queue();
        }
        assert_eq!(acks(&b), 4);
        b.queue();
        assert_eq!(acks(&b), 16);
        assert!(unasked_ack(&b, Psn::new(3)) && !unasked_ack(&b, Psn::new(4)));
        b.take();
        assert_eq!(acks(&b), 4);
        // The last PSN before the wrap is a 16th's.
        assert!(unasked_ack(&b, Psn::new(Psn::MASK)));
    }

    #[test]
    fn parted_qps_answer_duplicates_from_their_peer_newest_first() {
        let mut r = Ring {
            last: [None; PARTED_MAX],
            next: 0,
        };
        let (a, b, local) = ([1; 16], [2; 16], [9; 16]);
        assert!(r.find(5, &a, &local, Psn::new(0)).is_none());
        r.put(last(5, 1, 10));
        // Before the PSN it expected (half the PSN space back), from its peer, to its GID.
        assert_eq!(r.find(5, &a, &local, Psn::new(9)).map(|l| l.msn), Some(1));
        assert!(r
            .find(5, &a, &local, Psn::new(10 + (1 << 23) + 1))
            .is_some());
        assert!(r.find(5, &a, &local, Psn::new(10)).is_none());
        assert!(r.find(5, &a, &local, Psn::new(11)).is_none());
        assert!(r.find(5, &b, &local, Psn::new(9)).is_none());
        assert!(r.find(5, &a, &a, Psn::new(9)).is_none());
        assert!(r.find(6, &a, &local, Psn::new(9)).is_none());
        // A newer QP of the number (with another peer) hides the older.
        r.put(last(5, 2, 20));
        assert!(r.find(5, &a, &local, Psn::new(9)).is_none());
        assert_eq!(
            r.find(5, &b, &local, Psn::new(19)).map(|l| l.epsn),
            Some(Psn::new(20))
        );
        // The oldest gives way to the newest.
        for n in 0..PARTED_MAX as u32 - 1 {
            r.put(last(100 + n, 1, 10));
        }
        assert!(r.find(5, &b, &local, Psn::new(19)).is_some());
        r.put(last(200, 1, 10));
        assert!(r.find(5, &b, &local, Psn::new(19)).is_none());
        assert!(r.find(200, &a, &local, Psn::new(9)).is_some());
        assert!(r.find(101, &a, &local, Psn::new(9)).is_some());
    }

    /// An expectation of `kind` for PSNs `first..=last` (a READ of `want` bytes).
    fn expect(kind: Awaited, first: u32, last: u32, want: usize) -> Expect {
        Expect {
            peer: [0; 16],
            mtu: 256,
            due: due(kind, first, last, want),
            sent_last: Psn::new(last),
            acked: None,
            later: None,
            reads: KVec::new(),
            alone: false,
        }
    }

    /// The answer of `kind` to the message at PSNs `first..=last` (a READ of `want` bytes).
    fn due(kind: Awaited, first: u32, last: u32, want: usize) -> Due {
        let mut buf = KVec::new();
        buf.reserve(want, GFP_KERNEL).unwrap();
        Due {
            kind,
            first: Psn::new(first),
            last: Psn::new(last),
            next: Psn::new(first),
            buf,
            want,
            reached: Psn::new(first),
            sent: Psn::new(last).add(1),
        }
    }

    /// A READ of `want` bytes (or, with `want` 0, an atomic) sent behind the head of `e` at
    /// PSNs `first..=last`.
    fn behind(e: &mut Expect, first: u32, last: u32, want: usize) {
        let kind = if want > 0 {
            Awaited::Read
        } else {
            Awaited::Atomic
        };
        let b = Behind {
            due: due(kind, first, last, want),
            orig: None,
            done: false,
        };
        e.reads.push(b, GFP_KERNEL).unwrap();
        e.sent_last = Psn::new(last);
    }

    /// What `e` makes of a packet `op` at `psn` with `syndrome` and `payload`.
    fn feed(
        e: &mut Expect,
        op: Opcode,
        psn: u32,
        syndrome: Option<Syndrome>,
        payload: &[u8],
    ) -> Option<Option<Outcome>> {
        feed_to(e, true, op, psn, syndrome, payload)
    }

    /// The same, while the head's answer is still awaited (`open`) or not.
    fn feed_to(
        e: &mut Expect,
        open: bool,
        op: Opcode,
        psn: u32,
        syndrome: Option<Syndrome>,
        payload: &[u8],
    ) -> Option<Option<Outcome>> {
        with_packet(op, psn, syndrome, payload, |p| {
            answer(e, p, Psn::new(psn), open)
        })
    }

    /// `f` of a packet `op` at `psn` with `syndrome` and `payload`.
    fn with_packet<R>(
        op: Opcode,
        psn: u32,
        syndrome: Option<Syndrome>,
        payload: &[u8],
        f: impl FnOnce(&Packet<'_>) -> R,
    ) -> R {
        let mut h = Headers::new(Bth::new(op, 7, Psn::new(psn)));
        h.aeth = syndrome.map(|syndrome| Aeth { syndrome, msn: 1 });
        if op == Opcode::RC_ATOMIC_ACKNOWLEDGE {
            h.atomic_ack_eth = Some(AtomicAckEth { orig: 99 });
        }
        let mut b = [0u8; 512];
        let n = build(&h, payload, &mut b).unwrap();
        let p = parse(&b[..n]).unwrap();
        f(&p)
    }

    /// A message at PSNs `first..first + npkts`.
    fn msg(first: u32, npkts: u32) -> InFlight {
        InFlight {
            first: Psn::new(first),
            npkts,
            off: 0,
            len: 0,
        }
    }

    fn is_ack(o: Option<Option<Outcome>>) -> bool {
        matches!(o, Some(Some(Outcome::Ack(_))))
    }

    #[test]
    fn a_timer_expiry_waits_for_the_datagrams_queued_before_it_only() {
        let b = Backlog::new();
        let mut mark = None;
        // Nothing queued: the retry is spent at once.
        assert!(!inbox_behind(&b, &mut mark));
        assert_eq!(mark, None);
        b.queue();
        b.queue();
        assert!(inbox_behind(&b, &mut mark));
        // One taken, and one more arrives after the expiry: the wait is for the first two.
        b.take();
        b.queue();
        assert!(inbox_behind(&b, &mut mark));
        b.take();
        assert!(!inbox_behind(&b, &mut mark));
        assert_eq!(mark, None);
        // The next expiry takes a new mark: the third is still queued.
        assert!(inbox_behind(&b, &mut mark));
        assert_eq!(mark, Some(3));
    }

    #[test]
    fn an_ack_completes_only_at_the_last_psn() {
        let ack = Some(Syndrome::Ack(NO_CREDITS));
        let mut e = expect(Awaited::Ack, 10, 12, 0);
        // Within the message: the peer's progress, no answer.
        assert!(matches!(
            feed(&mut e, Opcode::RC_ACKNOWLEDGE, 11, ack, &[]),
            Some(None)
        ));
        assert!(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 13, ack, &[]).is_none());
        assert!(is_ack(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 12, ack, &[])));
        // Across the wrap of the 24-bit PSN.
        let mut e = expect(Awaited::Ack, 0xff_ffff, 0, 0);
        assert!(is_ack(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 0, ack, &[])));
    }

    #[test]
    fn an_ack_within_a_send_or_write_moves_its_window_on() {
        let ack = Some(Syndrome::Ack(NO_CREDITS));
        let seq = Some(Syndrome::Nak(NakCode::PsnSeqErr));
        let mtu = Mtu::from_ib(3).unwrap();
        // A WRITE of 200 packets at 10..=209, 1024 bytes each.
        let mut e = expect(Awaited::Ack, 10, 209, 0);
        let f = InFlight {
            len: 200 * 1024,
            ..msg(10, 200)
        };
        // Nothing acknowledged: it goes again whole.
        let g = rest(&mut e, f, mtu);
        assert_eq!((g.first.get(), g.npkts, g.off), (10, 200, 0));
        assert!(matches!(
            feed(&mut e, Opcode::RC_ACKNOWLEDGE, 73, ack, &[]),
            Some(None)
        ));
        assert_eq!(e.due.reached.get(), 74);
        // An older ACK (a duplicate's) takes nothing back.
        assert!(matches!(
            feed(&mut e, Opcode::RC_ACKNOWLEDGE, 40, ack, &[]),
            Some(None)
        ));
        assert_eq!(e.due.reached.get(), 74);
        // Sent again from the first packet the peer lacks, as a middle packet 64 KiB in.
        let g = rest(&mut e, f, mtu);
        assert_eq!((g.first.get(), g.npkts, g.off), (74, 136, 64 * 1024));
        // A sequence NAK further on is progress, and where the next resend starts.
        assert!(matches!(
            feed(&mut e, Opcode::RC_ACKNOWLEDGE, 100, seq, &[]),
            Some(Some(Outcome::Resend(true)))
        ));
        let g = rest(&mut e, f, mtu);
        assert_eq!((g.first.get(), g.npkts, g.off), (100, 110, 90 * 1024));
        // Sent up to 199 only: nothing names a PSN past that.
        e.due.sent = Psn::new(200);
        let rnr = Some(Syndrome::RnrNak(1));
        assert!(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 209, ack, &[]).is_none());
        assert!(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 200, rnr, &[]).is_none());
        assert!(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 205, seq, &[]).is_none());
        assert_eq!(e.due.reached.get(), 100);
        // An RNR NAK says the peer has everything before it.
        assert!(matches!(
            feed(&mut e, Opcode::RC_ACKNOWLEDGE, 120, rnr, &[]),
            Some(Some(Outcome::Rnr(1)))
        ));
        assert_eq!(e.due.reached.get(), 120);
        e.due.sent = Psn::new(210);
        assert!(is_ack(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 209, ack, &[])));
        // A READ's ACK within it is no answer of a READ.
        let mut e = expect(Awaited::Read, 10, 12, 3 * 1024);
        assert!(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 11, ack, &[]).is_none());
    }

    #[test]
    fn messages_go_behind_the_head_only_within_the_window() {
        let mut st = Requester::new(10);
        let head = msg(10, 1);
        st.take_psns(1);
        st.inflight = Some(head);
        assert!(st.fits(head, UNACKED_PSNS - 1));
        assert!(!st.fits(head, UNACKED_PSNS));
        st.take_psns(UNACKED_PSNS - 2);
        assert!(st.window_open() && st.fits(head, 1) && !st.fits(head, 2));
        st.take_psns(1);
        assert!(!st.window_open());
        // ACKs asked for every PKTS_PER_ACK packets and at the end of each step.
        assert!(asks_ack(PKTS_PER_ACK - 1, false) && asks_ack(2 * PKTS_PER_ACK - 1, false));
        assert!(!asks_ack(0, false) && !asks_ack(PKTS_PER_ACK, false) && asks_ack(5, true));
    }

    #[test]
    fn answers_behind_the_head_are_kept_for_when_it_gets_there() {
        let ack = Some(Syndrome::Ack(NO_CREDITS));
        let seq = Some(Syndrome::Nak(NakCode::PsnSeqErr));
        // The head at 10..=12, messages 13..=15 and 16..=20 behind it.
        let mut e = expect(Awaited::Ack, 10, 12, 0);
        e.sent_last = Psn::new(20);
        // A coalesced ACK answers the head and the message it names.
        assert!(is_ack(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 15, ack, &[])));
        // The head has its answer: a NAK behind it is only kept.
        assert!(matches!(
            feed_to(&mut e, false, Opcode::RC_ACKNOWLEDGE, 18, seq, &[]),
            Some(None)
        ));
        // Nothing beyond what was sent, and no ACK of the head's own twice.
        assert!(feed_to(&mut e, false, Opcode::RC_ACKNOWLEDGE, 21, ack, &[]).is_none());
        assert!(feed_to(&mut e, false, Opcode::RC_ACKNOWLEDGE, 12, ack, &[]).is_none());
        assert!(matches!(e.promote(msg(13, 3)), Some(Outcome::Ack(_))));
        // The NAK at 18 says the peer has 16 and 17: it goes again from 18.
        assert!(matches!(e.promote(msg(16, 5)), Some(Outcome::Resend(true))));
        assert_eq!(e.due.reached, Psn::new(18));
        assert!(e.later.is_none());
        // The head at 16..=20 again (sent again, nothing behind it): only its own last PSN.
        e.sent_last = e.due.last;
        assert!(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 21, ack, &[]).is_none());
        assert!(is_ack(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 20, ack, &[])));
    }

    #[test]
    fn going_back_n_keeps_the_peers_acks_of_what_went_before() {
        let ack = Some(Syndrome::Ack(NO_CREDITS));
        // PSNs near the wrap: the head at 0xfffffe..=0xffffff, then 0..=2 and 3 behind it.
        let mut st = Requester::new(0xff_fffe);
        assert_eq!(st.take_psns(2).get(), 0xff_fffe);
        assert_eq!(st.take_psns(3).get(), 0);
        assert_eq!(st.take_psns(1).get(), 3);
        assert_eq!(st.sent_end.get(), 4);
        // Back N: the head goes again, the PSNs behind it are taken again, the end stays.
        st.rewind(msg(0xff_fffe, 2), msg(0xff_fffe, 2));
        assert_eq!(st.next_psn(), 0);
        assert_eq!(st.take_psns(3).get(), 0);
        assert_eq!(st.sent_end.get(), 4);
        let mut e = expect(Awaited::Ack, 0xff_fffe, 0xff_ffff, 0);
        e.sent_last = Psn::new(3);
        let _ = rest(&mut e, msg(0xff_fffe, 2), Mtu::from_ib(1).unwrap());
        // The peer took everything before, and answers the head's duplicate at PSN 3.
        assert!(is_ack(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 3, ack, &[])));
        assert!(matches!(e.promote(msg(0, 3)), Some(Outcome::Ack(_))));
        assert!(matches!(e.promote(msg(3, 1)), Some(Outcome::Ack(_))));
        // Never beyond what went out.
        assert!(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 4, ack, &[]).is_none());
        // A flush forgets it.
        st.forget();
        assert_eq!(st.sent_end.get(), st.next_psn());
    }

    #[test]
    fn naks_count_only_within_the_message() {
        let mut e = expect(Awaited::Ack, 10, 12, 0);
        let rnr = Some(Syndrome::RnrNak(3));
        assert!(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 9, rnr, &[]).is_none());
        assert!(matches!(
            feed(&mut e, Opcode::RC_ACKNOWLEDGE, 11, rnr, &[]),
            Some(Some(Outcome::Rnr(3)))
        ));
        let seq = Some(Syndrome::Nak(NakCode::PsnSeqErr));
        // The RNR NAK at 11 said the peer has 10: a NAK there is stale, no answer.
        assert!(matches!(
            feed(&mut e, Opcode::RC_ACKNOWLEDGE, 10, seq, &[]),
            Some(None)
        ));
        // One further on than any answer before says the peer took more of the message:
        // progress, once; one behind it is stale.
        for (psn, further) in [
            (11, Some(false)),
            (12, Some(true)),
            (12, Some(false)),
            (11, None),
        ] {
            let o = feed(&mut e, Opcode::RC_ACKNOWLEDGE, psn, seq, &[]);
            match further {
                Some(y) => assert!(matches!(o, Some(Some(Outcome::Resend(f))) if f == y)),
                None => assert!(matches!(o, Some(None))),
            }
        }
        let acc = Some(Syndrome::Nak(NakCode::RemAccess));
        assert!(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 20, acc, &[]).is_none());
        assert!(matches!(
            feed(&mut e, Opcode::RC_ACKNOWLEDGE, 12, acc, &[]),
            Some(Some(Outcome::Nak(Nak::Access)))
        ));
        // An atomic's answer is no ACK for a SEND.
        assert!(feed(
            &mut e,
            Opcode::RC_ATOMIC_ACKNOWLEDGE,
            12,
            Some(Syndrome::Ack(0x1f)),
            &[]
        )
        .is_none());
    }

    #[test]
    fn an_ack_after_a_sequence_nak_not_yet_acted_on_replaces_it() {
        let ack = Some(Syndrome::Ack(NO_CREDITS));
        let seq = Some(Syndrome::Nak(NakCode::PsnSeqErr));
        let acc = Some(Syndrome::Nak(NakCode::RemAccess));
        let mut e = expect(Awaited::Ack, 10, 13, 0);
        let mut out = None;
        let rec = |e: &mut Expect, out: &mut Option<Outcome>, psn, syn| {
            with_packet(Opcode::RC_ACKNOWLEDGE, psn, syn, &[], |p| {
                record(e, out, false, p, Psn::new(psn))
            })
        };
        // Two NAKs before the requester looks: the progress of either is kept.
        rec(&mut e, &mut out, 12, seq);
        rec(&mut e, &mut out, 12, seq);
        assert!(matches!(out, Some(Outcome::Resend(true))));
        // The packets came after all (reordered): the ACK of the whole message wins.
        assert!(is_ack(rec(&mut e, &mut out, 13, ack)));
        assert!(matches!(out, Some(Outcome::Ack(_))));
        // Once answered, nothing replaces the answer.
        assert!(rec(&mut e, &mut out, 13, acc).is_none());
        assert!(rec(&mut e, &mut out, 11, seq).is_none());
        assert!(matches!(out, Some(Outcome::Ack(_))));
    }

    #[test]
    fn an_rnr_nak_gives_way_to_later_answers_and_is_stale_during_its_wait() {
        let ack = Some(Syndrome::Ack(NO_CREDITS));
        let seq = Some(Syndrome::Nak(NakCode::PsnSeqErr));
        let rnr = Some(Syndrome::RnrNak(14));
        let acc = Some(Syndrome::Nak(NakCode::RemAccess));
        let rec = |e: &mut Expect, out: &mut Option<Outcome>, wait, psn, syn| {
            with_packet(Opcode::RC_ACKNOWLEDGE, psn, syn, &[], |p| {
                record(e, out, wait, p, Psn::new(psn))
            })
        };
        // A SEND at 10..=13; an RNR NAK at 11 not acted on yet.
        let mut e = expect(Awaited::Ack, 10, 13, 0);
        let mut out = None;
        rec(&mut e, &mut out, false, 11, rnr);
        assert!(matches!(out, Some(Outcome::Rnr(14))) && e.due.reached == Psn::new(11));
        // The sequence NAK for the packets sent behind the refused one leaves its wait.
        assert!(matches!(rec(&mut e, &mut out, false, 11, seq), Some(None)));
        assert!(matches!(out, Some(Outcome::Rnr(_))));
        // A sequence NAK further on says the peer took it when it came again.
        rec(&mut e, &mut out, false, 12, seq);
        assert!(matches!(out, Some(Outcome::Resend(true))));
        // An ACK of the whole message replaces an RNR NAK.
        let mut out = Some(Outcome::Rnr(14));
        assert!(is_ack(rec(&mut e, &mut out, false, 13, ack)));
        assert!(matches!(out, Some(Outcome::Ack(_))));
        // A NAK behind the head (the peer's QP in error now) answers the head, kept for later.
        let mut e = expect(Awaited::Ack, 10, 13, 0);
        e.sent_last = Psn::new(15);
        let mut out = Some(Outcome::Rnr(14));
        assert!(is_ack(rec(&mut e, &mut out, false, 14, acc)));
        assert!(matches!(out, Some(Outcome::Ack(_))));
        assert!(matches!(e.later, Some((p, Outcome::Nak(Nak::Access))) if p == Psn::new(14)));
        // While the requester waits out an RNR NAK, another one for the head is stale: no
        // answer, whatever came before it; an ACK still is.
        let mut e = expect(Awaited::Ack, 10, 13, 0);
        let mut out = None;
        assert!(matches!(rec(&mut e, &mut out, true, 11, rnr), Some(None)));
        assert!(out.is_none() && e.due.reached == Psn::new(11));
        rec(&mut e, &mut out, true, 11, seq);
        assert!(matches!(out, Some(Outcome::Resend(false))));
        assert!(matches!(rec(&mut e, &mut out, true, 11, rnr), Some(None)));
        assert!(matches!(out, Some(Outcome::Resend(false))));
        assert!(is_ack(rec(&mut e, &mut out, true, 13, ack)));
        assert!(matches!(out, Some(Outcome::Ack(_))));
        // An ACK within the message past the refused packet makes an RNR NAK not acted on
        // stale; an RNR NAK before what the peer is known to have is stale too.
        let mut e = expect(Awaited::Ack, 10, 13, 0);
        let mut out = None;
        rec(&mut e, &mut out, false, 11, rnr);
        assert!(matches!(rec(&mut e, &mut out, false, 12, ack), Some(None)));
        assert!(out.is_none() && e.due.reached == Psn::new(13));
        assert!(matches!(rec(&mut e, &mut out, false, 11, rnr), Some(None)));
        assert!(out.is_none() && e.due.reached == Psn::new(13));
    }

    #[test]
    fn reads_and_atomics_behind_the_head_keep_their_answers() {
        let ack = Some(Syndrome::Ack(NO_CREDITS));
        // A SEND at 10, a READ of 300 bytes at 11..=12, an atomic at 13, a SEND at 14.
        let mut e = expect(Awaited::Ack, 10, 10, 0);
        behind(&mut e, 11, 12, 300);
        behind(&mut e, 13, 13, 0);
        e.sent_last = Psn::new(14);
        let first = [1u8; 256];
        let last = [2u8; 44];
        // The READ's first response answers the SEND at the head.
        assert!(is_ack(feed(
            &mut e,
            Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            11,
            ack,
            &first
        )));
        // An atomic's answer at a READ's PSN: not taken.
        assert!(feed_to(&mut e, false, Opcode::RC_ATOMIC_ACKNOWLEDGE, 12, ack, &[]).is_none());
        assert!(matches!(
            feed_to(
                &mut e,
                false,
                Opcode::RC_RDMA_READ_RESPONSE_LAST,
                12,
                ack,
                &last
            ),
            Some(None)
        ));
        assert!(matches!(
            feed_to(&mut e, false, Opcode::RC_ATOMIC_ACKNOWLEDGE, 13, ack, &[]),
            Some(None)
        ));
        // A duplicate atomic answer is not taken twice.
        assert!(feed_to(&mut e, false, Opcode::RC_ATOMIC_ACKNOWLEDGE, 13, ack, &[]).is_none());
        assert!(matches!(e.promote(msg(11, 2)), Some(Outcome::Ack(0))));
        assert!(e.due.kind == Awaited::Read);
        assert_eq!(e.due.buf.len(), 300);
        assert_eq!((e.due.buf[255], e.due.buf[256]), (1, 2));
        assert!(matches!(e.promote(msg(13, 1)), Some(Outcome::Ack(99))));
        // The SEND at 14 waits for its own ACK.
        assert!(e.promote(msg(14, 1)).is_none());
        assert!(e.reads.is_empty());
        assert!(is_ack(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 14, ack, &[])));
    }

    #[test]
    fn only_its_own_answer_completes_a_read_or_an_atomic() {
        let ack = Some(Syndrome::Ack(NO_CREDITS));
        // A READ at the head (10), a SEND behind it (11): the SEND's ACK says the READ's
        // response was lost; the READ still waits for it.
        let mut e = expect(Awaited::Read, 10, 10, 4);
        e.sent_last = Psn::new(11);
        assert!(matches!(
            feed(&mut e, Opcode::RC_ACKNOWLEDGE, 11, ack, &[]),
            Some(None)
        ));
        assert!(is_ack(feed(
            &mut e,
            Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            10,
            ack,
            &[5; 4]
        )));
        assert!(matches!(e.promote(msg(11, 1)), Some(Outcome::Ack(_))));
        // SENDs at 20 and 21, an atomic at 22 whose answer was lost, a SEND at 23: the SEND at
        // 21 gets to the head past the atomic's entry, which stays; the ACK of 23 leaves the
        // atomic waiting at the head.
        let mut e = expect(Awaited::Ack, 20, 20, 0);
        behind(&mut e, 22, 22, 0);
        e.sent_last = Psn::new(23);
        assert!(is_ack(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 21, ack, &[])));
        assert!(matches!(e.promote(msg(21, 1)), Some(Outcome::Ack(_))));
        assert_eq!(e.reads.len(), 1);
        assert!(e.promote(msg(22, 1)).is_none());
        assert!(e.due.kind == Awaited::Atomic);
        assert!(matches!(
            feed(&mut e, Opcode::RC_ACKNOWLEDGE, 23, ack, &[]),
            Some(None)
        ));
        assert!(matches!(
            feed(&mut e, Opcode::RC_ATOMIC_ACKNOWLEDGE, 22, ack, &[]),
            Some(Some(Outcome::Ack(99)))
        ));
        assert!(matches!(e.promote(msg(23, 1)), Some(Outcome::Ack(_))));
        // Going back N forgets what came for the READs behind the head: they go again.
        let mut e = expect(Awaited::Ack, 30, 30, 0);
        behind(&mut e, 31, 31, 4);
        let r = rest(&mut e, msg(30, 1), Mtu::Mtu1024);
        assert!(r.first == Psn::new(30) && e.reads.is_empty());
        assert!(feed(&mut e, Opcode::RC_RDMA_READ_RESPONSE_ONLY, 31, ack, &[5; 4]).is_none());
    }

    #[test]
    fn read_responses_are_taken_in_order_and_in_size() {
        let ack = Some(Syndrome::Ack(NO_CREDITS));
        let mut e = expect(Awaited::Read, 5, 6, 300);
        let first = [1u8; 256];
        let last = [2u8; 44];
        // Out of order, then a plain ACK: neither is taken.
        assert!(feed(&mut e, Opcode::RC_RDMA_READ_RESPONSE_LAST, 6, ack, &last).is_none());
        assert!(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 6, ack, &[]).is_none());
        assert!(matches!(
            feed(&mut e, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 5, ack, &first),
            Some(None)
        ));
        // A duplicate of the first is not taken twice.
        assert!(feed(&mut e, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 5, ack, &first).is_none());
        assert!(is_ack(feed(
            &mut e,
            Opcode::RC_RDMA_READ_RESPONSE_LAST,
            6,
            ack,
            &last
        )));
        assert_eq!(e.due.buf.len(), 300);
        assert_eq!(e.due.buf[255], 1);
        assert_eq!(e.due.buf[256], 2);
        // More data than asked for is refused.
        let mut e = expect(Awaited::Read, 5, 5, 100);
        assert!(feed(&mut e, Opcode::RC_RDMA_READ_RESPONSE_ONLY, 5, ack, &first).is_none());
        assert_eq!(e.due.buf.len(), 0);
    }

    #[test]
    fn a_read_sent_again_asks_only_for_what_is_missing() {
        let ack = Some(Syndrome::Ack(NO_CREDITS));
        let mtu = Mtu::Mtu256;
        // 700 bytes at PSNs 5..=7, going to offset 64 KiB of the WQE's data.
        let f = InFlight {
            off: 64 << 10,
            len: 700,
            ..msg(5, 3)
        };
        let mut e = expect(Awaited::Read, 5, 7, 700);
        // Nothing arrived: all of it again.
        let r = rest(&mut e, f, mtu);
        assert!(r.first == Psn::new(5) && r.npkts == 3 && r.off == f.off && r.len == 700);
        let one = [3u8; 256];
        assert!(matches!(
            feed(&mut e, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 5, ack, &one),
            Some(None)
        ));
        // The first packet arrived: the rest from PSN 6, and it completes at PSN 7.
        let r = rest(&mut e, f, mtu);
        assert!(r.first == Psn::new(6) && r.npkts == 2);
        assert_eq!((r.off, r.len), (f.off + 256, 444));
        assert!(e.due.last == Psn::new(7) && e.due.buf.len() == 256);
        let two = [4u8; 256];
        let three = [5u8; 188];
        assert!(feed(&mut e, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 6, ack, &two).is_some());
        assert!(is_ack(feed(
            &mut e,
            Opcode::RC_RDMA_READ_RESPONSE_LAST,
            7,
            ack,
            &three
        )));
        assert_eq!((e.due.buf[255], e.due.buf[256], e.due.buf[699]), (3, 4, 5));
        // A peer that sends a packet short of the path MTU before the last is not heard.
        let mut e = expect(Awaited::Read, 5, 7, 700);
        let short = [6u8; 100];
        assert!(feed(&mut e, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 5, ack, &short).is_none());
        assert!(e.due.buf.is_empty() && e.due.next == Psn::new(5));
        // Anything else is sent whole, expected from its first PSN.
        let mut e = expect(Awaited::Ack, 5, 7, 0);
        e.due.next = Psn::new(7);
        let r = rest(&mut e, f, mtu);
        assert!(r.first == Psn::new(5) && r.len == 700 && e.due.next == Psn::new(5));
    }

    #[test]
    fn an_answer_that_came_meanwhile_is_taken_not_asked_for_again() {
        let ack = Some(Syndrome::Ack(NO_CREDITS));
        let mtu = Mtu::Mtu256;
        // 700 bytes at PSNs 5..=7.
        let f = InFlight {
            len: 700,
            ..msg(5, 3)
        };
        let mut ans = Answer {
            expect: Some(expect(Awaited::Read, 5, 7, 700)),
            ..Default::default()
        };
        let e = ans.expect.as_mut().unwrap();
        let (one, two, three) = ([3u8; 256], [4u8; 256], [5u8; 188]);
        assert!(feed(e, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 5, ack, &one).is_some());
        assert!(feed(e, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 6, None, &two).is_some());
        // The requester found no answer and its timer expired; the last packet comes now.
        let o = feed(e, Opcode::RC_RDMA_READ_RESPONSE_LAST, 7, ack, &three);
        assert!(is_ack(o));
        ans.outcome = o.flatten();
        ans.progress = true;
        // Nothing goes again, and the answer and its data stay for the next run.
        assert!(reask(&mut ans, f, mtu).is_none());
        assert!(ans.outcome.is_some() && ans.progress);
        assert_eq!(ans.expect.as_ref().map(|e| e.due.buf.len()), Some(700));
        // Without an answer the message goes again, from what is missing.
        ans.outcome = None;
        let e = ans.expect.as_mut().unwrap();
        e.due.buf.truncate(256);
        e.due.next = Psn::new(6);
        let r = reask(&mut ans, f, mtu).unwrap();
        assert!(r.first == Psn::new(6) && r.npkts == 2 && r.len == 444 && !ans.progress);
    }

    #[test]
    fn an_atomic_ack_carries_the_original_value() {
        let mut e = expect(Awaited::Atomic, 40, 40, 0);
        let ack = Some(Syndrome::Ack(NO_CREDITS));
        assert!(feed(&mut e, Opcode::RC_ACKNOWLEDGE, 40, ack, &[]).is_none());
        assert!(matches!(
            feed(&mut e, Opcode::RC_ATOMIC_ACKNOWLEDGE, 40, ack, &[]),
            Some(Some(Outcome::Ack(99)))
        ));
    }

    #[test]
    fn uc_drops_a_broken_message_and_starts_again_at_a_first_packet() {
        let mut r = Responder::new(10);
        assert!(r.uc_in_step(Psn::new(10), Position::First));
        r.epsn = Psn::new(11);
        // PSN 11 was lost: 12, a MIDDLE, and 13, the LAST, are dropped.
        assert!(!r.uc_in_step(Psn::new(12), Position::Middle));
        assert!(r.dropping);
        assert!(!r.uc_in_step(Psn::new(13), Position::Last));
        // Even a packet at the expected PSN, if it continues the broken message.
        r.epsn = Psn::new(11);
        assert!(!r.uc_in_step(Psn::new(11), Position::Last));
        // The next message starts wherever its first packet is.
        assert!(r.uc_in_step(Psn::new(20), Position::Only));
        assert_eq!(r.epsn(), 20);
        assert!(!r.dropping);
        // In step again.
        r.epsn = Psn::new(21);
        assert!(r.uc_in_step(Psn::new(21), Position::First));
        // Across the 24-bit wrap.
        let mut w = Responder::new(0xff_ffff);
        assert!(w.uc_in_step(Psn::new(0xff_ffff), Position::First));
        w.epsn = Psn::new(0);
        assert!(w.uc_in_step(Psn::new(0), Position::Last));
    }
}
