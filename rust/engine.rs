// SPDX-License-Identifier: GPL-2.0

//! The engine (rxe's `rxe_req.c`, `rxe_resp.c` and `rxe_comp.c`): runs the send queue of a QP
//! on the module's workqueue, executes each WQE at the destination QP, and completes it.
//!
//! The requester ([`req`]) builds a [`Message`] per WQE and hands it to the transport
//! ([`deliver`]), which answers with a [`Reply`] the way a responder's ACK, NAK or RNR NAK
//! would; the responder ([`resp`]) executes messages on a receiving QP; the completer
//! ([`comp`]) turns answers into completions, retries and RNR backoff. Backoff is a timer: no
//! worker ever sleeps waiting for a peer. The responder faults nothing on the requester's
//! worker: its own missing pages are faulted on its QP's own work item ([`fault`]). Peers on this host are served directly: the
//! responder copies between the two QPs' registered memory ([`xfer`]) without building
//! packets. A packet transport (RoCEv2 to another host) plugs in at [`deliver`] without
//! changing the requester, the responder or the verbs layer.

mod comp;
mod fault;
mod net;
mod packet;
mod rc;
mod req;
mod resp;
mod share;
mod wire;
mod xfer;

pub(crate) use comp::backoff_expired;
pub(crate) use fault::{forget as forget_faults, run as run_fault, FaultState, Ticket};
pub(crate) use net::Binding;
pub(crate) use packet::Gid;
pub(crate) use rc::{respond, Answer, Parted, Requester as RcRequester, Responder as RcResponder};
pub(crate) use req::{run_send_queue, run_send_queue_now, Peer};
pub(crate) use share::{current_user, try_take as take_worker, Held, Workers};
pub(crate) use wire::Backlog;
pub(crate) use xfer::{Run, Scratch, Seg};

use crate::{
    engine::packet::header::Feth,
    ib::{umem::AtomicOp, verbs::WrOpcode},
    qp::QpShared,
};
use core::cell::Cell;
use kernel::sync::Arc;
use xfer::Src;

/// Largest message (2 GiB, the IBA limit).
const MAX_MSG: u64 = 1 << 31;

/// Bytes of GRH before the data of a UD receive.
const GRH_LEN: usize = 40;

/// One message from a requester to a responder QP.
pub(crate) struct Message<'a> {
    /// The requester's QP: scheduled again when the responder's fault it waits for ends.
    pub(crate) from: &'a Arc<QpShared>,
    /// The responder's fault the message waits for (`fault::Ticket`, kept with the WQE at the
    /// head of the requester's send queue, or by an RC responder for the packet from the wire
    /// it expects); none for datagrams, which never wait.
    pub(crate) ticket: Option<&'a Cell<fault::Ticket>>,
    /// The requester sends the message again by itself (a packet from the wire, after its RNR
    /// NAK): `from` is not scheduled when the fault ends.
    pub(crate) resends: bool,
    /// The operation.
    pub(crate) opcode: WrOpcode,
    /// Sending QP number.
    pub(crate) src_qpn: u32,
    /// The GID the message comes from (the sending QP's source GID): with `src_qpn`, what an
    /// RC responder compares with its connected peer.
    pub(crate) src_gid: [u8; 16],
    /// Immediate data (network order).
    pub(crate) imm: u32,
    /// Whether the receiver's solicited event fires.
    pub(crate) solicited: bool,
    /// Payload length (RDMA read: length to read).
    pub(crate) len: usize,
    /// Payload of sends and writes.
    pub(crate) data: Src<'a>,
    /// Remote address of RDMA and atomic operations.
    pub(crate) remote_addr: u64,
    /// Remote key of RDMA and atomic operations.
    pub(crate) rkey: u32,
    /// The atomic operation (an ATOMIC WRITE's store too).
    pub(crate) atomic: Option<AtomicOp>,
    /// A FLUSH's placement type and selectivity level.
    pub(crate) flush: Option<Feth>,
    /// Where read data goes (the requester's memory).
    pub(crate) read_into: &'a [Seg],
    /// UD: Q_Key and the GRH the receiver sees.
    pub(crate) ud: Option<Ud>,
    /// Bytes of the message after this part, at the next addresses of the same MR, that a
    /// fault of the responder's own memory for this part may take in with it: the rest of an
    /// RDMA WRITE arriving packet by packet (at most [`fault::AHEAD`]); 0 for a message that
    /// arrives whole.
    pub(crate) ahead: usize,
}

impl Message<'_> {
    /// The bytes the message carries, for the requester's budget (a FLUSH names a range and
    /// carries none).
    pub(crate) fn carried(&self) -> usize {
        if self.opcode == WrOpcode::Flush {
            0
        } else {
            self.len
        }
    }
}

/// UD addressing carried with a message.
#[derive(Clone, Copy)]
pub(crate) struct Ud {
    /// Q_Key of the message.
    pub(crate) qkey: u32,
    /// Sender's GID.
    pub(crate) sgid: [u8; 16],
    /// Destination GID.
    pub(crate) dgid: [u8; 16],
    /// Hop limit.
    pub(crate) hop_limit: u8,
    /// Traffic class.
    pub(crate) tclass: u8,
}

/// A NAK code.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Nak {
    /// Invalid request.
    InvReq,
    /// Remote access error.
    Access,
    /// Remote operational error.
    Op,
}

/// The responder's answer.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Reply {
    /// Done; for atomics, the original value.
    Ack(u64),
    /// Refused.
    Nak(Nak),
    /// No receive WQE: retry after the given RNR timer code.
    Rnr(u8),
    /// Silently dropped (destination not ready, not from an RC responder's peer, wrong Q_Key,
    /// ...).
    Drop,
    /// Not executed: a page of the requester's ODP memory was unmapped when the responder came
    /// to copy it (the responder never faults the requester's memory, see `resp`). Nothing the
    /// message did is visible but data partly placed by an RDMA WRITE; the requester faults
    /// its pages in again and delivers the message again.
    Retry,
    /// Not executed yet: a page of the responder's own ODP memory was unmapped. The responder
    /// faults only on its own QP's fault work (`fault`), which schedules the requester again
    /// when it ends. An RC or UC requester waits for that under its retransmission timer (each
    /// expiry a retry); a UD one takes the datagram as lost. A receive WQE taken stays
    /// pending, data an RDMA WRITE placed stays.
    Wait,
}

/// The transport: delivers `m` to the responder QP `dst` and returns its answer. Every QP is
/// on this host today, so the responder runs at once.
pub(crate) fn deliver(dst: &Arc<QpShared>, m: &Message<'_>) -> Reply {
    resp::receive(dst, m)
}
