// SPDX-License-Identifier: GPL-2.0

//! The BTH opcodes rodp speaks (rxe's `rxe_opcode.c`, `include/rdma/ib_pack.h`): for each, the
//! extension headers it carries, its service, its place in a message and whether it carries
//! payload, as one `const` table.

// Used by the wire transport (issue 13), wired in next.
#![allow(dead_code)]

use kernel::prelude::*;

/// A BTH opcode (`IB_OPCODE_*`): the service in the top three bits, the operation below.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Opcode(pub(crate) u8);

/// A set of extension transport headers, each a bit.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Ext(u8);

impl Ext {
    /// No extension header.
    pub(crate) const NONE: Ext = Ext(0);
    /// Datagram ETH (Q_Key, source QP): UD.
    pub(crate) const DETH: Ext = Ext(1 << 0);
    /// FLUSH ETH (placement type, selectivity level).
    pub(crate) const FETH: Ext = Ext(1 << 1);
    /// RDMA ETH (virtual address, rkey, DMA length).
    pub(crate) const RETH: Ext = Ext(1 << 2);
    /// Atomic ETH (virtual address, rkey, swap or add, compare).
    pub(crate) const ATOMIC_ETH: Ext = Ext(1 << 3);
    /// ACK ETH (syndrome, MSN).
    pub(crate) const AETH: Ext = Ext(1 << 4);
    /// Atomic ACK ETH (original value).
    pub(crate) const ATOMIC_ACK_ETH: Ext = Ext(1 << 5);
    /// Immediate data.
    pub(crate) const IMM_DT: Ext = Ext(1 << 6);
    /// Invalidate ETH (the rkey to invalidate).
    pub(crate) const IETH: Ext = Ext(1 << 7);

    /// Every extension header in wire order (IBTA 9.2: DETH, FETH, RETH or AtomicETH or AETH,
    /// AtomicAckETH, ImmDt or IETH), with its length in bytes.
    pub(crate) const ORDER: [(Ext, usize); 8] = [
        (Ext::DETH, 8),
        (Ext::FETH, 4),
        (Ext::RETH, 16),
        (Ext::ATOMIC_ETH, 28),
        (Ext::AETH, 4),
        (Ext::ATOMIC_ACK_ETH, 8),
        (Ext::IMM_DT, 4),
        (Ext::IETH, 4),
    ];

    /// The union of two sets.
    pub(crate) const fn or(self, other: Ext) -> Ext {
        Ext(self.0 | other.0)
    }

    /// The intersection of two sets.
    pub(crate) const fn and(self, other: Ext) -> Ext {
        Ext(self.0 & other.0)
    }

    /// Whether every header of `other` is in the set.
    pub(crate) const fn contains(self, other: Ext) -> bool {
        self.0 & other.0 == other.0
    }

    /// Bytes the headers of the set take.
    pub(crate) const fn len(self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < Ext::ORDER.len() {
            if self.contains(Ext::ORDER[i].0) {
                n += Ext::ORDER[i].1;
            }
            i += 1;
        }
        n
    }
}

/// The transport service of an opcode (its top three bits).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Service {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
}

/// What a packet does.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    /// SEND (with or without immediate or invalidate).
    Send,
    /// RDMA WRITE (with or without immediate).
    Write,
    /// RDMA READ request.
    ReadRequest,
    /// RDMA READ response (data back to the requester).
    ReadResponse,
    /// ACK or NAK.
    Ack,
    /// The answer to an atomic (ACK with the original value).
    AtomicAck,
    /// Atomic compare and swap.
    CompareSwap,
    /// Atomic fetch and add.
    FetchAdd,
    /// ATOMIC WRITE (8 bytes written atomically).
    AtomicWrite,
    /// FLUSH (make written data persistent or visible).
    Flush,
}

/// Where a packet sits in its message.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Position {
    /// First of several.
    First,
    /// Neither first nor last.
    Middle,
    /// Last of several.
    Last,
    /// The whole message.
    Only,
}

impl Position {
    /// Whether the packet starts a message.
    pub(crate) fn starts(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }

    /// Whether the packet ends a message.
    pub(crate) fn ends(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// What an opcode is.
#[derive(Debug)]
pub(crate) struct OpInfo {
    /// The opcode.
    pub(crate) opcode: Opcode,
    /// Its name, as `ib_pack.h` spells it without `IB_OPCODE_`.
    pub(crate) name: &'static str,
    /// Its service.
    pub(crate) service: Service,
    /// What it does.
    pub(crate) kind: Kind,
    /// Its place in a message.
    pub(crate) position: Position,
    /// Its extension headers.
    pub(crate) ext: Ext,
    /// Whether it carries payload (for ATOMIC WRITE exactly 8 bytes).
    pub(crate) payload: bool,
}

impl OpInfo {
    /// Bytes of its headers, BTH included.
    pub(crate) const fn header_len(&self) -> usize {
        BTH_LEN + self.ext.len()
    }

    /// Whether a requester sends it (the others are responses: READ responses and ACKs).
    pub(crate) fn is_request(&self) -> bool {
        !matches!(self.kind, Kind::ReadResponse | Kind::Ack | Kind::AtomicAck)
    }

    /// Whether it consumes a receive WQE at the responder (the first packet of a SEND, or a
    /// WRITE with immediate's last).
    pub(crate) fn consumes_recv(&self) -> bool {
        match self.kind {
            Kind::Send => self.position.starts(),
            Kind::Write => self.ext.contains(Ext::IMM_DT),
            _ => false,
        }
    }
}

/// Bytes of the BTH.
pub(crate) const BTH_LEN: usize = 12;

/// Defines the opcode constants and the table from one list.
macro_rules! opcodes {
    ($($name:ident = $code:literal, $service:ident, $kind:ident, $position:ident, $ext:expr,
       $payload:literal;)*) => {
        impl Opcode {
            $(
                #[doc = concat!("`IB_OPCODE_", stringify!($name), "`.")]
                pub(crate) const $name: Opcode = Opcode($code);
            )*
        }

        /// Every opcode rxe 7.3 sends or accepts on RC, UC and UD, in opcode order (RD is
        /// absent: rxe has no RD QPs).
        pub(crate) const OPCODES: &[OpInfo] = &[$(OpInfo {
            opcode: Opcode($code),
            name: stringify!($name),
            service: Service::$service,
            kind: Kind::$kind,
            position: Position::$position,
            ext: $ext,
            payload: $payload,
        }),*];
    };
}

/// ImmDt alone.
const IMM: Ext = Ext::IMM_DT;
/// RETH and ImmDt.
const RETH_IMM: Ext = Ext::RETH.or(Ext::IMM_DT);

opcodes! {
    RC_SEND_FIRST = 0x00, Rc, Send, First, Ext::NONE, true;
    RC_SEND_MIDDLE = 0x01, Rc, Send, Middle, Ext::NONE, true;
    RC_SEND_LAST = 0x02, Rc, Send, Last, Ext::NONE, true;
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03, Rc, Send, Last, IMM, true;
    RC_SEND_ONLY = 0x04, Rc, Send, Only, Ext::NONE, true;
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05, Rc, Send, Only, IMM, true;
    RC_RDMA_WRITE_FIRST = 0x06, Rc, Write, First, Ext::RETH, true;
    RC_RDMA_WRITE_MIDDLE = 0x07, Rc, Write, Middle, Ext::NONE, true;
    RC_RDMA_WRITE_LAST = 0x08, Rc, Write, Last, Ext::NONE, true;
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09, Rc, Write, Last, IMM, true;
    RC_RDMA_WRITE_ONLY = 0x0a, Rc, Write, Only, Ext::RETH, true;
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0b, Rc, Write, Only, RETH_IMM, true;
    RC_RDMA_READ_REQUEST = 0x0c, Rc, ReadRequest, Only, Ext::RETH, false;
    RC_RDMA_READ_RESPONSE_FIRST = 0x0d, Rc, ReadResponse, First, Ext::AETH, true;
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0e, Rc, ReadResponse, Middle, Ext::NONE, true;
    RC_RDMA_READ_RESPONSE_LAST = 0x0f, Rc, ReadResponse, Last, Ext::AETH, true;
    RC_RDMA_READ_RESPONSE_ONLY = 0x10, Rc, ReadResponse, Only, Ext::AETH, true;
    RC_ACKNOWLEDGE = 0x11, Rc, Ack, Only, Ext::AETH, false;
    RC_ATOMIC_ACKNOWLEDGE = 0x12, Rc, AtomicAck, Only, Ext::AETH.or(Ext::ATOMIC_ACK_ETH), false;
    RC_COMPARE_SWAP = 0x13, Rc, CompareSwap, Only, Ext::ATOMIC_ETH, false;
    RC_FETCH_ADD = 0x14, Rc, FetchAdd, Only, Ext::ATOMIC_ETH, false;
    RC_SEND_LAST_WITH_INVALIDATE = 0x16, Rc, Send, Last, Ext::IETH, true;
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17, Rc, Send, Only, Ext::IETH, true;
    RC_FLUSH = 0x1c, Rc, Flush, Only, Ext::FETH.or(Ext::RETH), false;
    RC_ATOMIC_WRITE = 0x1d, Rc, AtomicWrite, Only, Ext::RETH, true;
    UC_SEND_FIRST = 0x20, Uc, Send, First, Ext::NONE, true;
    UC_SEND_MIDDLE = 0x21, Uc, Send, Middle, Ext::NONE, true;
    UC_SEND_LAST = 0x22, Uc, Send, Last, Ext::NONE, true;
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23, Uc, Send, Last, IMM, true;
    UC_SEND_ONLY = 0x24, Uc, Send, Only, Ext::NONE, true;
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25, Uc, Send, Only, IMM, true;
    UC_RDMA_WRITE_FIRST = 0x26, Uc, Write, First, Ext::RETH, true;
    UC_RDMA_WRITE_MIDDLE = 0x27, Uc, Write, Middle, Ext::NONE, true;
    UC_RDMA_WRITE_LAST = 0x28, Uc, Write, Last, Ext::NONE, true;
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29, Uc, Write, Last, IMM, true;
    UC_RDMA_WRITE_ONLY = 0x2a, Uc, Write, Only, Ext::RETH, true;
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2b, Uc, Write, Only, RETH_IMM, true;
    UD_SEND_ONLY = 0x64, Ud, Send, Only, Ext::DETH, true;
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65, Ud, Send, Only, Ext::DETH.or(IMM), true;
}

/// Marks an opcode with no row in [`INDEX`].
const NO_ROW: u8 = u8::MAX;

/// The row of [`OPCODES`] for each of the 256 opcodes, or [`NO_ROW`].
const INDEX: [u8; 256] = {
    let mut index = [NO_ROW; 256];
    let mut i = 0;
    while i < OPCODES.len() {
        index[OPCODES[i].opcode.0 as usize] = i as u8;
        i += 1;
    }
    index
};

impl Opcode {
    /// What the opcode is, or `None` for one rodp does not speak (RD, CNP, reserved, ...).
    pub(crate) fn info(self) -> Option<&'static OpInfo> {
        OPCODES.get(usize::from(INDEX[usize::from(self.0)]))
    }
}

impl Opcode {
    /// The opcode of a packet of `kind` at `position` in a message on `service`, with
    /// `trailer` (`Ext::IMM_DT`, `Ext::IETH` or `Ext::NONE`); `None` if there is none (an RC
    /// READ has no FIRST, UC has no READ, ...).
    pub(crate) fn of(
        service: Service,
        kind: Kind,
        position: Position,
        trailer: Ext,
    ) -> Option<Opcode> {
        let trailers = Ext::IMM_DT.or(Ext::IETH);
        OPCODES
            .iter()
            .find(|o| {
                o.service == service
                    && o.kind == kind
                    && o.position == position
                    && o.ext.and(trailers) == trailer
            })
            .map(|o| o.opcode)
    }
}

#[kunit_tests(rodp_opcode)]
mod tests {
    use super::*;

    #[test]
    fn the_index_finds_every_row_and_nothing_else() {
        let mut found = 0;
        for code in 0..=255u8 {
            if let Some(i) = Opcode(code).info() {
                assert_eq!(i.opcode, Opcode(code));
                found += 1;
            }
        }
        assert_eq!(found, OPCODES.len());
        assert_eq!(OPCODES.len(), 39);
        // In opcode order, so no opcode twice.
        assert!(OPCODES.windows(2).all(|w| w[0].opcode.0 < w[1].opcode.0));
        for unknown in [
            0x15, 0x18, 0x1e, 0x2c, 0x40, 0x4c, 0x60, 0x63, 0x80, 0x81, 0xe0, 0xff,
        ] {
            assert!(Opcode(unknown).info().is_none());
        }
    }

    #[test]
    fn rows_agree_with_their_opcode_bits() {
        for o in OPCODES {
            let (service, prefix) = match o.opcode.0 >> 5 {
                0 => (Some(Service::Rc), "RC_"),
                1 => (Some(Service::Uc), "UC_"),
                3 => (Some(Service::Ud), "UD_"),
                _ => (None, ""),
            };
            assert_eq!(Some(o.service), service);
            assert!(o.name.starts_with(prefix));
            // The operation bits mean the same on every service.
            let same = OPCODES
                .iter()
                .filter(|p| p.opcode.0 & 0x1f == o.opcode.0 & 0x1f);
            for p in same {
                assert_eq!(
                    (p.kind, p.position, p.payload),
                    (o.kind, o.position, o.payload)
                );
            }
        }
    }

    #[test]
    fn headers_follow_the_ibta_rules() {
        for o in OPCODES {
            let has = |e| o.ext.contains(e);
            // DETH exactly on UD, which has only SEND ONLY.
            assert_eq!(has(Ext::DETH), o.service == Service::Ud);
            if o.service == Service::Ud {
                assert_eq!((o.kind, o.position), (Kind::Send, Position::Only));
            }
            // UC has only SEND and WRITE.
            if o.service == Service::Uc {
                assert!(matches!(o.kind, Kind::Send | Kind::Write));
            }
            // A RETH starts a WRITE and is all a READ request, ATOMIC WRITE and FLUSH carry.
            let reth = match o.kind {
                Kind::Write => o.position.starts(),
                Kind::ReadRequest | Kind::AtomicWrite | Kind::Flush => true,
                _ => false,
            };
            assert_eq!(has(Ext::RETH), reth);
            assert_eq!(has(Ext::FETH), o.kind == Kind::Flush);
            assert_eq!(
                has(Ext::ATOMIC_ETH),
                matches!(o.kind, Kind::CompareSwap | Kind::FetchAdd)
            );
            assert_eq!(has(Ext::ATOMIC_ACK_ETH), o.kind == Kind::AtomicAck);
            // Every response but a READ response's middle carries an AETH; no request does.
            assert_eq!(
                has(Ext::AETH),
                !o.is_request() && o.position != Position::Middle
            );
            // Immediate data and invalidation end a SEND or WRITE; IETH on RC SENDs only.
            if has(Ext::IMM_DT) || has(Ext::IETH) {
                assert!(o.position.ends());
                assert!(!(has(Ext::IMM_DT) && has(Ext::IETH)));
            }
            if has(Ext::IETH) {
                assert_eq!((o.service, o.kind), (Service::Rc, Kind::Send));
            }
            if has(Ext::IMM_DT) {
                assert!(matches!(o.kind, Kind::Send | Kind::Write));
            }
            // Payload on data-moving packets only.
            let payload = matches!(
                o.kind,
                Kind::Send | Kind::Write | Kind::ReadResponse | Kind::AtomicWrite
            );
            assert_eq!(o.payload, payload);
            // Multi-packet messages are SENDs, WRITEs and READ responses.
            if o.position != Position::Only {
                assert!(matches!(
                    o.kind,
                    Kind::Send | Kind::Write | Kind::ReadResponse
                ));
            }
        }
    }

    #[test]
    fn header_lengths_match_rxe() {
        let len = |o: Opcode| o.info().map(|i| i.header_len());
        assert_eq!(len(Opcode::RC_SEND_MIDDLE), Some(12));
        assert_eq!(len(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE), Some(32));
        assert_eq!(len(Opcode::RC_RDMA_READ_RESPONSE_FIRST), Some(16));
        assert_eq!(len(Opcode::RC_ATOMIC_ACKNOWLEDGE), Some(24));
        assert_eq!(len(Opcode::RC_COMPARE_SWAP), Some(40));
        assert_eq!(len(Opcode::RC_FLUSH), Some(32));
        assert_eq!(len(Opcode::RC_ATOMIC_WRITE), Some(28));
        assert_eq!(len(Opcode::RC_SEND_ONLY_WITH_INVALIDATE), Some(16));
        assert_eq!(len(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE), Some(24));
        assert_eq!(Ext::ORDER.iter().map(|(_, n)| n).sum::<usize>(), 76);
    }

    #[test]
    fn opcodes_are_chosen_by_what_they_do() {
        use Kind::*;
        use Position::*;
        let of = Opcode::of;
        assert_eq!(
            of(Service::Rc, Send, First, Ext::NONE),
            Some(Opcode::RC_SEND_FIRST)
        );
        assert_eq!(
            of(Service::Rc, Send, Last, Ext::IETH),
            Some(Opcode::RC_SEND_LAST_WITH_INVALIDATE)
        );
        assert_eq!(
            of(Service::Uc, Write, Only, Ext::IMM_DT),
            Some(Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE)
        );
        assert_eq!(
            of(Service::Ud, Send, Only, Ext::NONE),
            Some(Opcode::UD_SEND_ONLY)
        );
        assert_eq!(of(Service::Uc, Send, Only, Ext::IETH), None);
        assert_eq!(of(Service::Uc, ReadRequest, Only, Ext::NONE), None);
        assert_eq!(of(Service::Ud, Send, First, Ext::NONE), None);
        assert_eq!(of(Service::Rc, Write, First, Ext::IMM_DT), None);
        for o in OPCODES {
            let trailer = o.ext.and(Ext::IMM_DT.or(Ext::IETH));
            assert_eq!(of(o.service, o.kind, o.position, trailer), Some(o.opcode));
        }
    }

    #[test]
    fn receives_are_consumed_where_rxe_consumes_them() {
        let c = |o: Opcode| o.info().map(|i| i.consumes_recv());
        assert_eq!(c(Opcode::RC_SEND_FIRST), Some(true));
        assert_eq!(c(Opcode::RC_SEND_MIDDLE), Some(false));
        assert_eq!(c(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE), Some(true));
        assert_eq!(c(Opcode::RC_RDMA_WRITE_ONLY), Some(false));
        assert_eq!(c(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE), Some(true));
        assert_eq!(c(Opcode::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE), Some(true));
        assert_eq!(c(Opcode::RC_RDMA_READ_REQUEST), Some(false));
    }
}
