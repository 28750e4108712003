// SPDX-License-Identifier: GPL-2.0

//! The IBTA transport headers (rxe's `rxe_hdr.h`): each built into and parsed from its bytes,
//! and whole packets parsed from the untrusted bytes of a UDP datagram.
//!
//! A packet here is a UDP payload: the BTH, the extension headers its opcode carries (in the
//! order of [`Ext::ORDER`]), the payload, 0 to 3 bytes of pad, and the 4-byte ICRC.

// Used by the wire transport (issue 13), wired in next.
#![allow(dead_code)]

use super::{
    opcode::{
        Ext,
        Kind,
        OpInfo,
        Opcode,
        Position,
        BTH_LEN, //
    },
    psn::Psn,
};
use kernel::prelude::*;

/// Bytes of the ICRC.
pub(crate) const ICRC_LEN: usize = 4;

/// Why a packet was refused: each a drop reason the transport can count.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ParseError {
    /// Shorter than its BTH, its opcode's headers or its ICRC.
    Truncated,
    /// An opcode rodp does not speak (RD, CNP, reserved, ...).
    UnknownOpcode,
    /// A BTH transport header version other than 0.
    BadTver,
    /// The packet's length is not a multiple of 4 bytes.
    Unaligned,
    /// The pad count is larger than what follows the headers.
    PadTooLong,
    /// Payload or pad on an opcode that carries none.
    UnexpectedPayload,
    /// A payload length the opcode cannot have: a FIRST or MIDDLE packet empty or padded, an
    /// ATOMIC WRITE of other than 8 bytes.
    BadPayloadLength,
    /// An AETH syndrome with a reserved type or NAK code.
    BadSyndrome,
}

impl ParseError {
    /// A short name for counters and logs.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ParseError::Truncated => "truncated",
            ParseError::UnknownOpcode => "unknown_opcode",
            ParseError::BadTver => "bad_tver",
            ParseError::Unaligned => "unaligned",
            ParseError::PadTooLong => "pad_too_long",
            ParseError::UnexpectedPayload => "unexpected_payload",
            ParseError::BadPayloadLength => "bad_payload_length",
            ParseError::BadSyndrome => "bad_syndrome",
        }
    }
}

/// Why headers could not be built.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum BuildError {
    /// The BTH's opcode is not in the table.
    UnknownOpcode,
    /// The headers present are not the ones the opcode carries.
    WrongHeaders,
    /// Payload given to an opcode that carries none.
    UnexpectedPayload,
    /// The buffer is too small.
    NoRoom,
}

/// Base transport header (12 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Bth {
    /// The opcode.
    pub(crate) opcode: Opcode,
    /// Solicited event (SE).
    pub(crate) solicited: bool,
    /// Migration state (M).
    pub(crate) migrated: bool,
    /// Bytes of pad after the payload (0 to 3).
    pub(crate) pad: u8,
    /// Partition key.
    pub(crate) pkey: u16,
    /// Forward explicit congestion notification (F).
    pub(crate) fecn: bool,
    /// Backward explicit congestion notification (B).
    pub(crate) becn: bool,
    /// Destination QP number (24 bits).
    pub(crate) dest_qpn: u32,
    /// Acknowledge request (A).
    pub(crate) ack_req: bool,
    /// Packet sequence number.
    pub(crate) psn: Psn,
}

impl Bth {
    /// A BTH for `opcode` to `dest_qpn` at `psn` with the default P_Key and every flag clear.
    pub(crate) fn new(opcode: Opcode, dest_qpn: u32, psn: Psn) -> Bth {
        Bth {
            opcode,
            solicited: false,
            migrated: false,
            pad: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qpn,
            ack_req: false,
            psn,
        }
    }

    /// Writes the BTH, with transport header version 0; fields are cut to their widths.
    pub(crate) fn write(&self, b: &mut [u8; 12]) {
        b[0] = self.opcode.0;
        b[1] = u8::from(self.solicited) << 7 | u8::from(self.migrated) << 6 | (self.pad & 3) << 4;
        put(b, 2, &self.pkey.to_be_bytes());
        let qpn = u32::from(self.fecn) << 31 | u32::from(self.becn) << 30 | self.dest_qpn & QPN;
        put(b, 4, &qpn.to_be_bytes());
        let apsn = u32::from(self.ack_req) << 31 | self.psn.get();
        put(b, 8, &apsn.to_be_bytes());
    }

    /// Reads a BTH; reserved bits are ignored, a non-zero version refused.
    pub(crate) fn read(b: &[u8; 12]) -> Result<Bth, ParseError> {
        if b[1] & 0x0f != 0 {
            return Err(ParseError::BadTver);
        }
        let qpn = get32(b, 4);
        let apsn = get32(b, 8);
        Ok(Bth {
            opcode: Opcode(b[0]),
            solicited: b[1] & 0x80 != 0,
            migrated: b[1] & 0x40 != 0,
            pad: (b[1] >> 4) & 3,
            pkey: u16::from_be_bytes([b[2], b[3]]),
            fecn: qpn & 1 << 31 != 0,
            becn: qpn & 1 << 30 != 0,
            dest_qpn: qpn & QPN,
            ack_req: apsn & 1 << 31 != 0,
            psn: Psn::new(apsn),
        })
    }
}

/// The bits of a QP number.
const QPN: u32 = (1 << 24) - 1;

/// The `N` bytes at `at` in `b` (zeros past its end: callers read fixed offsets of fixed-size
/// headers, so that never happens).
fn bytes<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut v = [0; N];
    if let Some(s) = b.get(at..at.saturating_add(N)) {
        v.copy_from_slice(s);
    }
    v
}

/// The big-endian `u32` at `at` in `b`.
fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(bytes(b, at))
}

/// The big-endian `u64` at `at` in `b`.
fn get64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(bytes(b, at))
}

/// Writes `v` at `at` in `b` (nothing past its end, as for [`bytes`]).
fn put(b: &mut [u8], at: usize, v: &[u8]) {
    if let Some(d) = b.get_mut(at..at.saturating_add(v.len())) {
        d.copy_from_slice(v);
    }
}

/// Splits a fixed-size header off the front of `b`.
fn take<'a, const N: usize>(b: &mut &'a [u8]) -> Result<&'a [u8; N], ParseError> {
    let (h, rest) = b.split_first_chunk::<N>().ok_or(ParseError::Truncated)?;
    *b = rest;
    Ok(h)
}

/// Writes header `$h` at the front of the slice `$b` and moves `$b` past it.
macro_rules! emit {
    ($b:ident, $h:expr) => {
        let (room, rest) = $b.split_first_chunk_mut().ok_or(BuildError::NoRoom)?;
        $h.write(room);
        $b = rest;
    };
}

/// Datagram ETH (8 bytes): UD.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Deth {
    /// Q_Key.
    pub(crate) qkey: u32,
    /// Source QP number (24 bits).
    pub(crate) src_qpn: u32,
}

impl Deth {
    /// Writes the DETH.
    pub(crate) fn write(&self, b: &mut [u8; 8]) {
        put(b, 0, &self.qkey.to_be_bytes());
        put(b, 4, &(self.src_qpn & QPN).to_be_bytes());
    }

    /// Reads a DETH.
    pub(crate) fn read(b: &[u8; 8]) -> Deth {
        Deth {
            qkey: get32(b, 0),
            src_qpn: get32(b, 4) & QPN,
        }
    }
}

/// FLUSH ETH (4 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Feth {
    /// Placement type (4 bits: `IB_FLUSH_GLOBAL`, `IB_FLUSH_PERSISTENT`).
    pub(crate) placement: u8,
    /// Selectivity level (2 bits: `IB_FLUSH_RANGE`, `IB_FLUSH_MR`).
    pub(crate) selectivity: u8,
}

impl Feth {
    /// Writes the FETH.
    pub(crate) fn write(&self, b: &mut [u8; 4]) {
        let bits = u32::from(self.selectivity & 3) << 4 | u32::from(self.placement & 0xf);
        *b = bits.to_be_bytes();
    }

    /// Reads a FETH.
    pub(crate) fn read(b: &[u8; 4]) -> Feth {
        Feth {
            placement: b[3] & 0xf,
            selectivity: (b[3] >> 4) & 3,
        }
    }
}

/// RDMA ETH (16 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Reth {
    /// Remote virtual address.
    pub(crate) va: u64,
    /// Remote key.
    pub(crate) rkey: u32,
    /// DMA length of the whole message.
    pub(crate) len: u32,
}

impl Reth {
    /// Writes the RETH.
    pub(crate) fn write(&self, b: &mut [u8; 16]) {
        put(b, 0, &self.va.to_be_bytes());
        put(b, 8, &self.rkey.to_be_bytes());
        put(b, 12, &self.len.to_be_bytes());
    }

    /// Reads a RETH.
    pub(crate) fn read(b: &[u8; 16]) -> Reth {
        Reth {
            va: get64(b, 0),
            rkey: get32(b, 8),
            len: get32(b, 12),
        }
    }
}

/// Atomic ETH (28 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct AtomicEth {
    /// Remote virtual address (8-byte aligned for a valid request).
    pub(crate) va: u64,
    /// Remote key.
    pub(crate) rkey: u32,
    /// The value to swap in (compare and swap) or to add (fetch and add).
    pub(crate) swap_add: u64,
    /// The value to compare with (compare and swap).
    pub(crate) compare: u64,
}

impl AtomicEth {
    /// Writes the AtomicETH.
    pub(crate) fn write(&self, b: &mut [u8; 28]) {
        put(b, 0, &self.va.to_be_bytes());
        put(b, 8, &self.rkey.to_be_bytes());
        put(b, 12, &self.swap_add.to_be_bytes());
        put(b, 20, &self.compare.to_be_bytes());
    }

    /// Reads an AtomicETH.
    pub(crate) fn read(b: &[u8; 28]) -> AtomicEth {
        AtomicEth {
            va: get64(b, 0),
            rkey: get32(b, 8),
            swap_add: get64(b, 12),
            compare: get64(b, 20),
        }
    }
}

/// A NAK code (the low five bits of a NAK's syndrome).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum NakCode {
    /// PSN sequence error.
    PsnSeqErr = 0,
    /// Invalid request.
    InvReq = 1,
    /// Remote access error.
    RemAccess = 2,
    /// Remote operational error.
    RemOp = 3,
    /// Invalid RD request (RD only; parsed so that a peer's NAK is understood).
    InvRdReq = 4,
}

/// What an AETH says.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Syndrome {
    /// ACK, with the end-to-end credit count (`0x1f`: unlimited, what rxe sends).
    Ack(u8),
    /// RNR NAK, with the RNR timer code (5 bits, `IB_RNR_TIMER_*`).
    RnrNak(u8),
    /// NAK.
    Nak(NakCode),
}

impl Syndrome {
    /// The syndrome byte.
    pub(crate) fn byte(self) -> u8 {
        match self {
            Syndrome::Ack(credits) => credits & 0x1f,
            Syndrome::RnrNak(timer) => 0x20 | timer & 0x1f,
            Syndrome::Nak(code) => 0x60 | code as u8,
        }
    }

    /// The syndrome of a byte; reserved types (bit 7, `010`) and NAK codes refused.
    pub(crate) fn from_byte(b: u8) -> Result<Syndrome, ParseError> {
        let low = b & 0x1f;
        Ok(match b & 0xe0 {
            0x00 => Syndrome::Ack(low),
            0x20 => Syndrome::RnrNak(low),
            0x60 => Syndrome::Nak(match low {
                0 => NakCode::PsnSeqErr,
                1 => NakCode::InvReq,
                2 => NakCode::RemAccess,
                3 => NakCode::RemOp,
                4 => NakCode::InvRdReq,
                _ => return Err(ParseError::BadSyndrome),
            }),
            _ => return Err(ParseError::BadSyndrome),
        })
    }
}

/// ACK ETH (4 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Aeth {
    /// ACK, RNR NAK or NAK.
    pub(crate) syndrome: Syndrome,
    /// Message sequence number (24 bits).
    pub(crate) msn: u32,
}

impl Aeth {
    /// Writes the AETH.
    pub(crate) fn write(&self, b: &mut [u8; 4]) {
        *b = (u32::from(self.syndrome.byte()) << 24 | self.msn & QPN).to_be_bytes();
    }

    /// Reads an AETH.
    pub(crate) fn read(b: &[u8; 4]) -> Result<Aeth, ParseError> {
        Ok(Aeth {
            syndrome: Syndrome::from_byte(b[0])?,
            msn: get32(b, 0) & QPN,
        })
    }
}

/// Atomic ACK ETH (8 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct AtomicAckEth {
    /// The value the atomic found.
    pub(crate) orig: u64,
}

impl AtomicAckEth {
    /// Writes the AtomicAckETH.
    pub(crate) fn write(&self, b: &mut [u8; 8]) {
        *b = self.orig.to_be_bytes();
    }

    /// Reads an AtomicAckETH.
    pub(crate) fn read(b: &[u8; 8]) -> AtomicAckEth {
        AtomicAckEth {
            orig: u64::from_be_bytes(*b),
        }
    }
}

/// Immediate data (4 bytes), kept as `__be32` is in memory: the wire bytes are the value's
/// native-order bytes, as `ib_uverbs_wc.ex.imm_data` and the engine's `Message::imm` hold it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct ImmDt(pub(crate) u32);

impl ImmDt {
    /// Writes the ImmDt.
    pub(crate) fn write(&self, b: &mut [u8; 4]) {
        *b = self.0.to_ne_bytes();
    }

    /// Reads an ImmDt.
    pub(crate) fn read(b: &[u8; 4]) -> ImmDt {
        ImmDt(u32::from_ne_bytes(*b))
    }
}

/// Invalidate ETH (4 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Ieth {
    /// The rkey to invalidate.
    pub(crate) rkey: u32,
}

impl Ieth {
    /// Writes the IETH.
    pub(crate) fn write(&self, b: &mut [u8; 4]) {
        *b = self.rkey.to_be_bytes();
    }

    /// Reads an IETH.
    pub(crate) fn read(b: &[u8; 4]) -> Ieth {
        Ieth {
            rkey: u32::from_be_bytes(*b),
        }
    }
}

/// The transport headers of one packet: its BTH and the extension headers its opcode carries.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Headers {
    /// Base transport header.
    pub(crate) bth: Bth,
    /// Datagram ETH.
    pub(crate) deth: Option<Deth>,
    /// FLUSH ETH.
    pub(crate) feth: Option<Feth>,
    /// RDMA ETH.
    pub(crate) reth: Option<Reth>,
    /// Atomic ETH.
    pub(crate) atomic_eth: Option<AtomicEth>,
    /// ACK ETH.
    pub(crate) aeth: Option<Aeth>,
    /// Atomic ACK ETH.
    pub(crate) atomic_ack_eth: Option<AtomicAckEth>,
    /// Immediate data.
    pub(crate) imm: Option<ImmDt>,
    /// Invalidate ETH.
    pub(crate) ieth: Option<Ieth>,
}

impl Headers {
    /// A BTH and no extension header.
    pub(crate) fn new(bth: Bth) -> Headers {
        Headers {
            bth,
            deth: None,
            feth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            imm: None,
            ieth: None,
        }
    }

    /// The extension headers present.
    pub(crate) fn ext(&self) -> Ext {
        [
            (self.deth.is_some(), Ext::DETH),
            (self.feth.is_some(), Ext::FETH),
            (self.reth.is_some(), Ext::RETH),
            (self.atomic_eth.is_some(), Ext::ATOMIC_ETH),
            (self.aeth.is_some(), Ext::AETH),
            (self.atomic_ack_eth.is_some(), Ext::ATOMIC_ACK_ETH),
            (self.imm.is_some(), Ext::IMM_DT),
            (self.ieth.is_some(), Ext::IETH),
        ]
        .into_iter()
        .filter(|(present, _)| *present)
        .fold(Ext::NONE, |set, (_, e)| set.or(e))
    }

    /// The opcode's row, if the headers are the ones it carries.
    pub(crate) fn info(&self) -> Result<&'static OpInfo, BuildError> {
        let info = self.bth.opcode.info().ok_or(BuildError::UnknownOpcode)?;
        if info.ext != self.ext() {
            return Err(BuildError::WrongHeaders);
        }
        Ok(info)
    }

    /// Writes the headers at the start of `buf` and returns their length.
    pub(crate) fn write(&self, buf: &mut [u8]) -> Result<usize, BuildError> {
        let len = self.info()?.header_len();
        let mut b = buf.get_mut(..len).ok_or(BuildError::NoRoom)?;
        // In `Ext::ORDER`.
        emit!(b, self.bth);
        if let Some(h) = &self.deth {
            emit!(b, h);
        }
        if let Some(h) = &self.feth {
            emit!(b, h);
        }
        if let Some(h) = &self.reth {
            emit!(b, h);
        }
        if let Some(h) = &self.atomic_eth {
            emit!(b, h);
        }
        if let Some(h) = &self.aeth {
            emit!(b, h);
        }
        if let Some(h) = &self.atomic_ack_eth {
            emit!(b, h);
        }
        if let Some(h) = &self.imm {
            emit!(b, h);
        }
        if let Some(h) = &self.ieth {
            emit!(b, h);
        }
        let _ = b;
        Ok(len)
    }

    /// Reads the BTH and the extension headers of `info` off the front of `b`.
    fn read(b: &mut &[u8], bth: Bth, info: &OpInfo) -> Result<Headers, ParseError> {
        let mut h = Headers::new(bth);
        let has = |e| info.ext.contains(e);
        // In `Ext::ORDER`.
        if has(Ext::DETH) {
            h.deth = Some(Deth::read(take(b)?));
        }
        if has(Ext::FETH) {
            h.feth = Some(Feth::read(take(b)?));
        }
        if has(Ext::RETH) {
            h.reth = Some(Reth::read(take(b)?));
        }
        if has(Ext::ATOMIC_ETH) {
            h.atomic_eth = Some(AtomicEth::read(take(b)?));
        }
        if has(Ext::AETH) {
            h.aeth = Some(Aeth::read(take(b)?)?);
        }
        if has(Ext::ATOMIC_ACK_ETH) {
            h.atomic_ack_eth = Some(AtomicAckEth::read(take(b)?));
        }
        if has(Ext::IMM_DT) {
            h.imm = Some(ImmDt::read(take(b)?));
        }
        if has(Ext::IETH) {
            h.ieth = Some(Ieth::read(take(b)?));
        }
        Ok(h)
    }
}

/// A parsed packet: its opcode's row, its headers, and its payload (pad and ICRC excluded).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Packet<'a> {
    /// What the opcode is.
    pub(crate) info: &'static OpInfo,
    /// The headers.
    pub(crate) hdr: Headers,
    /// The payload.
    pub(crate) payload: &'a [u8],
    /// The ICRC as received (checked apart, with the IP and UDP headers: `icrc::check`).
    pub(crate) icrc: [u8; ICRC_LEN],
}

/// Parses the UDP payload `b` of a RoCEv2 datagram. Checks what the bytes alone decide (the
/// opcode is known, lengths and pad agree with it); the QP's checks (P_Key, QP type and state,
/// PSN window, payload within the path MTU) and the ICRC are the caller's.
pub(crate) fn parse(b: &[u8]) -> Result<Packet<'_>, ParseError> {
    let mut rest = b;
    let bth_bytes = take::<BTH_LEN>(&mut rest)?;
    let info = Opcode(bth_bytes[0])
        .info()
        .ok_or(ParseError::UnknownOpcode)?;
    let bth = Bth::read(bth_bytes)?;
    let (mut body, icrc) = rest
        .split_last_chunk::<ICRC_LEN>()
        .ok_or(ParseError::Truncated)?;
    let hdr = Headers::read(&mut body, bth, info)?;
    // Headers and ICRC are multiples of 4 bytes: what is left is payload and pad.
    if body.len() % 4 != 0 {
        return Err(ParseError::Unaligned);
    }
    let pad = usize::from(bth.pad);
    if !info.payload {
        if !body.is_empty() || pad != 0 {
            return Err(ParseError::UnexpectedPayload);
        }
        return Ok(Packet {
            info,
            hdr,
            payload: body,
            icrc: *icrc,
        });
    }
    let len = body.len().checked_sub(pad).ok_or(ParseError::PadTooLong)?;
    let payload = body.get(..len).ok_or(ParseError::PadTooLong)?;
    let bad = match info.position {
        Position::First | Position::Middle => payload.is_empty() || pad != 0,
        Position::Last | Position::Only => info.kind == Kind::AtomicWrite && len != 8,
    };
    if bad {
        return Err(ParseError::BadPayloadLength);
    }
    Ok(Packet {
        info,
        hdr,
        payload,
        icrc: *icrc,
    })
}

/// Bytes of pad after a payload of `len` bytes.
pub(crate) fn pad_len(len: usize) -> u8 {
    (len.wrapping_neg() & 3) as u8
}

/// Bytes of a packet of `info` with `payload` bytes: headers, payload, pad and ICRC.
pub(crate) fn packet_len(info: &OpInfo, payload: usize) -> usize {
    info.header_len() + payload + usize::from(pad_len(payload)) + ICRC_LEN
}

/// Writes a packet into `buf`: `hdr` (its pad count set from the payload's length),
/// `payload`, zeroed pad, and room for the ICRC (zeroed; `icrc::generate` fills it once the
/// IP and UDP headers are final). Returns the packet's length, [`packet_len`].
pub(crate) fn build(hdr: &Headers, payload: &[u8], buf: &mut [u8]) -> Result<usize, BuildError> {
    let info = hdr.info()?;
    if !info.payload && !payload.is_empty() {
        return Err(BuildError::UnexpectedPayload);
    }
    let len = packet_len(info, payload.len());
    let buf = buf.get_mut(..len).ok_or(BuildError::NoRoom)?;
    let mut hdr = *hdr;
    hdr.bth.pad = pad_len(payload.len());
    let at = hdr.write(buf)?;
    let (data, tail) = buf
        .get_mut(at..)
        .ok_or(BuildError::NoRoom)?
        .split_at_mut_checked(payload.len())
        .ok_or(BuildError::NoRoom)?;
    data.copy_from_slice(payload);
    tail.fill(0);
    Ok(len)
}

#[kunit_tests(rodp_header)]
mod tests {
    use super::*;
    use crate::engine::packet::opcode::OPCODES;

    /// A BTH with every field set to something other than its default.
    fn bth(opcode: Opcode) -> Bth {
        Bth {
            opcode,
            solicited: true,
            migrated: true,
            pad: 0,
            pkey: 0x8001,
            fecn: true,
            becn: false,
            dest_qpn: 0xab_cdef,
            ack_req: true,
            psn: Psn::new(0xfe_dcba),
        }
    }

    /// Headers for `info`, each extension header present with distinctive values.
    fn headers(info: &OpInfo) -> Headers {
        let has = |e| info.ext.contains(e);
        let mut h = Headers::new(bth(info.opcode));
        if has(Ext::DETH) {
            h.deth = Some(Deth {
                qkey: 0x8001_0000,
                src_qpn: 0x12_3456,
            });
        }
        if has(Ext::FETH) {
            h.feth = Some(Feth {
                placement: 2,
                selectivity: 1,
            });
        }
        if has(Ext::RETH) {
            h.reth = Some(Reth {
                va: 0x0123_4567_89ab_cdef,
                rkey: 0xdead_beef,
                len: 0x8000_0000,
            });
        }
        if has(Ext::ATOMIC_ETH) {
            h.atomic_eth = Some(AtomicEth {
                va: 0xffff_0000_0000_1008,
                rkey: 0x0102_0304,
                swap_add: 0x1111_2222_3333_4444,
                compare: 0x5555_6666_7777_8888,
            });
        }
        if has(Ext::AETH) {
            h.aeth = Some(Aeth {
                syndrome: Syndrome::Nak(NakCode::RemAccess),
                msn: 0xff_fffe,
            });
        }
        if has(Ext::ATOMIC_ACK_ETH) {
            h.atomic_ack_eth = Some(AtomicAckEth {
                orig: 0x9999_aaaa_bbbb_cccc,
            });
        }
        if has(Ext::IMM_DT) {
            h.imm = Some(ImmDt(0x1234_5678));
        }
        if has(Ext::IETH) {
            h.ieth = Some(Ieth { rkey: 0x4321_8765 });
        }
        h
    }

    /// A payload of `n` bytes, each its index.
    fn data<const N: usize>() -> [u8; N] {
        let mut d = [0u8; N];
        d.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        d
    }

    #[test]
    fn every_opcode_round_trips() -> Result {
        let payload = data::<13>();
        for info in OPCODES {
            let h = headers(info);
            let p: &[u8] = match (info.payload, info.kind) {
                (false, _) => &[],
                (true, Kind::AtomicWrite) => &payload[..8],
                (true, _) => match info.position {
                    // Full packets: a multiple of 4 bytes.
                    Position::First | Position::Middle => &payload[..12],
                    _ => &payload,
                },
            };
            let mut buf = [0xa5u8; 128];
            let len = build(&h, p, &mut buf).map_err(|_| EINVAL)?;
            assert_eq!(len, packet_len(info, p.len()));
            assert_eq!(len % 4, 0);
            let pkt = parse(&buf[..len]).map_err(|_| EINVAL)?;
            assert_eq!(pkt.info.opcode, info.opcode);
            let mut want = h;
            want.bth.pad = pad_len(p.len());
            assert_eq!(pkt.hdr, want);
            assert_eq!(pkt.payload, p);
            // Pad and ICRC room are zero.
            assert!(buf[info.header_len() + p.len()..len]
                .iter()
                .all(|&b| b == 0));
            // The parsed headers build the same bytes again.
            let mut again = [0u8; 128];
            assert_eq!(build(&pkt.hdr, pkt.payload, &mut again), Ok(len));
            assert_eq!(&again[..len], &buf[..len]);
        }
        Ok(())
    }

    #[test]
    fn headers_have_their_wire_layout() {
        let mut b = [0u8; 12];
        bth(Opcode::RC_SEND_ONLY).write(&mut b);
        assert_eq!(
            b,
            [0x04, 0xc0, 0x80, 0x01, 0x80, 0xab, 0xcd, 0xef, 0x80, 0xfe, 0xdc, 0xba]
        );
        // Fields are cut to their widths.
        let mut wide = bth(Opcode::RC_SEND_ONLY);
        wide.pad = 7;
        wide.dest_qpn = 0xff12_3456;
        wide.becn = true;
        wide.write(&mut b);
        assert_eq!(b[1], 0xf0);
        assert_eq!(&b[4..8], &[0xc0, 0x12, 0x34, 0x56]);
        // Reserved bits are ignored when read.
        let mut r = [0x11, 0x00, 0xff, 0xff, 0x3f, 0, 0, 1, 0x7f, 0, 0, 2];
        assert_eq!(
            Bth::read(&r).map(|h| (h.dest_qpn, h.fecn, h.ack_req)),
            Ok((1, false, false))
        );
        r[1] = 0x01;
        assert_eq!(Bth::read(&r), Err(ParseError::BadTver));

        let mut d = [0u8; 8];
        Deth {
            qkey: 0x8001_0000,
            src_qpn: 0xff00_0001,
        }
        .write(&mut d);
        assert_eq!(d, [0x80, 0x01, 0, 0, 0, 0, 0, 1]);
        let mut f = [0u8; 4];
        Feth {
            placement: 2,
            selectivity: 1,
        }
        .write(&mut f);
        assert_eq!(f, [0, 0, 0, 0x12]);
        let mut a = [0u8; 4];
        Aeth {
            syndrome: Syndrome::RnrNak(14),
            msn: 0x1_000_005,
        }
        .write(&mut a);
        assert_eq!(a, [0x2e, 0, 0, 5]);
        let mut i = [0u8; 4];
        ImmDt(u32::from_ne_bytes([1, 2, 3, 4])).write(&mut i);
        assert_eq!(i, [1, 2, 3, 4]);
    }

    #[test]
    fn each_header_round_trips() {
        let r = Reth {
            va: u64::MAX,
            rkey: 1,
            len: u32::MAX,
        };
        let mut b16 = [0u8; 16];
        r.write(&mut b16);
        assert_eq!(Reth::read(&b16), r);
        let a = AtomicEth {
            va: 8,
            rkey: u32::MAX,
            swap_add: 1,
            compare: u64::MAX,
        };
        let mut b28 = [0u8; 28];
        a.write(&mut b28);
        assert_eq!(AtomicEth::read(&b28), a);
        let k = AtomicAckEth {
            orig: 0x0102_0304_0506_0708,
        };
        let mut b8 = [0u8; 8];
        k.write(&mut b8);
        assert_eq!(b8, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(AtomicAckEth::read(&b8), k);
        let d = Deth {
            qkey: 7,
            src_qpn: 0xff_ffff,
        };
        d.write(&mut b8);
        assert_eq!(Deth::read(&b8), d);
        let mut b4 = [0u8; 4];
        let i = Ieth { rkey: 0xcafe_f00d };
        i.write(&mut b4);
        assert_eq!(Ieth::read(&b4), i);
        let f = Feth {
            placement: 0xf,
            selectivity: 3,
        };
        f.write(&mut b4);
        assert_eq!(Feth::read(&b4), f);
        ImmDt(9).write(&mut b4);
        assert_eq!(ImmDt::read(&b4), ImmDt(9));
    }

    #[test]
    fn syndromes_round_trip_and_reserved_ones_are_refused() {
        let mut valid = 0;
        for b in 0..=255u8 {
            if let Ok(s) = Syndrome::from_byte(b) {
                assert_eq!(s.byte(), b);
                let mut a = [0u8; 4];
                Aeth {
                    syndrome: s,
                    msn: 3,
                }
                .write(&mut a);
                assert_eq!(
                    Aeth::read(&a),
                    Ok(Aeth {
                        syndrome: s,
                        msn: 3
                    })
                );
                valid += 1;
            }
        }
        // 32 ACKs, 32 RNR NAKs, 5 NAKs.
        assert_eq!(valid, 69);
        assert_eq!(Syndrome::from_byte(0x1f), Ok(Syndrome::Ack(0x1f)));
        assert_eq!(
            Syndrome::from_byte(0x60),
            Ok(Syndrome::Nak(NakCode::PsnSeqErr))
        );
        assert_eq!(Syndrome::from_byte(0x65), Err(ParseError::BadSyndrome));
        assert_eq!(Syndrome::from_byte(0x40), Err(ParseError::BadSyndrome));
        assert_eq!(Syndrome::from_byte(0x80), Err(ParseError::BadSyndrome));
        let mut ack = [0u8; 20];
        let mut h = Headers::new(Bth::new(Opcode::RC_ACKNOWLEDGE, 1, Psn::new(1)));
        h.aeth = Some(Aeth {
            syndrome: Syndrome::Ack(0x1f),
            msn: 1,
        });
        assert_eq!(build(&h, &[], &mut ack), Ok(20));
        ack[12] = 0x41;
        assert_eq!(parse(&ack).map(|_| ()), Err(ParseError::BadSyndrome));
    }

    /// `parse`'s error for `b`, if any.
    fn err(b: &[u8]) -> Option<ParseError> {
        parse(b).err()
    }

    #[test]
    fn malformed_packets_are_refused_with_their_reason() -> Result {
        use ParseError::*;
        // A valid RC SEND_ONLY of 5 bytes: BTH, 5 + 3 pad, ICRC.
        let mut send = [0u8; 24];
        let h = Headers::new(Bth::new(Opcode::RC_SEND_ONLY, 2, Psn::new(3)));
        assert_eq!(build(&h, b"hello", &mut send), Ok(24));
        assert_eq!(parse(&send).map(|p| p.payload.len()), Ok(5));

        assert_eq!(err(&[]), Some(Truncated));
        assert_eq!(err(&send[..11]), Some(Truncated));
        // A BTH and no ICRC.
        assert_eq!(err(&send[..12]), Some(Truncated));
        assert_eq!(err(&send[..15]), Some(Truncated));
        // Lengths that are not whole words.
        assert_eq!(err(&send[..21]), Some(Unaligned));
        assert_eq!(err(&send[..17]), Some(Unaligned));
        // Pad longer than what follows the headers: BTH, 0 bytes, ICRC with pad 3.
        let mut short = send;
        assert_eq!(err(&short[..16]), Some(PadTooLong));
        // Pad 0 makes all 8 bytes payload.
        short[1] &= !0x30;
        assert_eq!(parse(&short).map(|p| p.payload.len()), Ok(8));
        // Version 1.
        let mut v = send;
        v[1] |= 1;
        assert_eq!(err(&v), Some(BadTver));
        // Opcodes rodp does not speak.
        for op in [0x15, 0x40, 0x64 + 2, 0x81, 0xff] {
            let mut u = send;
            u[0] = op;
            assert_eq!(err(&u), Some(UnknownOpcode));
        }

        // An ACK with payload or pad.
        let mut ack = [0u8; 24];
        let mut a = Headers::new(Bth::new(Opcode::RC_ACKNOWLEDGE, 2, Psn::new(3)));
        a.aeth = Some(Aeth {
            syndrome: Syndrome::Ack(0x1f),
            msn: 0,
        });
        assert_eq!(
            build(&a, &[1], &mut ack),
            Err(BuildError::UnexpectedPayload)
        );
        assert_eq!(build(&a, &[], &mut ack), Ok(20));
        assert!(parse(&ack[..20]).is_ok());
        assert_eq!(err(&ack), Some(UnexpectedPayload));
        ack[1] |= 0x10;
        assert_eq!(err(&ack[..20]), Some(UnexpectedPayload));
        // Its AETH cut short.
        assert_eq!(err(&ack[..16]), Some(Truncated));

        // A READ request without its RETH.
        let mut rd = [0u8; 32];
        let mut r = Headers::new(Bth::new(Opcode::RC_RDMA_READ_REQUEST, 2, Psn::new(3)));
        r.reth = Some(Reth {
            va: 0,
            rkey: 1,
            len: 4096,
        });
        assert_eq!(build(&r, &[], &mut rd), Ok(32));
        assert!(parse(&rd).is_ok());
        assert_eq!(err(&rd[..28]), Some(Truncated));
        assert_eq!(err(&rd[..16]), Some(Truncated));

        // FIRST and MIDDLE packets must be full: not empty, not padded.
        let mut first = [0u8; 24];
        let f = Headers::new(Bth::new(Opcode::RC_SEND_FIRST, 2, Psn::new(3)));
        assert_eq!(build(&f, &[7; 8], &mut first), Ok(24));
        assert!(parse(&first).is_ok());
        assert_eq!(build(&f, &[7; 5], &mut first), Ok(24));
        assert_eq!(err(&first), Some(BadPayloadLength));
        let mut middle = [0u8; 16];
        let m = Headers::new(Bth::new(Opcode::UC_SEND_MIDDLE, 2, Psn::new(3)));
        assert_eq!(build(&m, &[], &mut middle), Ok(16));
        assert_eq!(err(&middle), Some(BadPayloadLength));
        // LAST and ONLY may be empty.
        let l = Headers::new(Bth::new(Opcode::RC_RDMA_WRITE_LAST, 2, Psn::new(3)));
        assert_eq!(build(&l, &[], &mut middle), Ok(16));
        assert!(parse(&middle).is_ok());

        // ATOMIC WRITE carries exactly 8 bytes.
        let mut aw = [0u8; 48];
        let mut w = Headers::new(Bth::new(Opcode::RC_ATOMIC_WRITE, 2, Psn::new(3)));
        w.reth = Some(Reth {
            va: 8,
            rkey: 1,
            len: 8,
        });
        assert_eq!(build(&w, &[1; 8], &mut aw), Ok(40));
        assert!(parse(&aw[..40]).is_ok());
        assert_eq!(build(&w, &[1; 4], &mut aw), Ok(36));
        assert_eq!(err(&aw[..36]), Some(BadPayloadLength));
        assert_eq!(build(&w, &[1; 12], &mut aw), Ok(44));
        assert_eq!(err(&aw[..44]), Some(BadPayloadLength));
        Ok(())
    }

    #[test]
    fn build_refuses_what_it_cannot_write() {
        let mut buf = [0u8; 64];
        let mut h = Headers::new(Bth::new(Opcode::RC_RDMA_WRITE_FIRST, 2, Psn::new(3)));
        // WRITE FIRST needs its RETH.
        assert_eq!(build(&h, &[0; 4], &mut buf), Err(BuildError::WrongHeaders));
        h.reth = Some(Reth {
            va: 0,
            rkey: 0,
            len: 4,
        });
        assert_eq!(build(&h, &[0; 4], &mut buf), Ok(36));
        h.imm = Some(ImmDt(0));
        assert_eq!(build(&h, &[0; 4], &mut buf), Err(BuildError::WrongHeaders));
        h.imm = None;
        assert_eq!(build(&h, &[0; 4], &mut buf[..35]), Err(BuildError::NoRoom));
        assert_eq!(h.write(&mut buf[..27]), Err(BuildError::NoRoom));
        assert_eq!(h.write(&mut buf[..28]), Ok(28));
        h.bth.opcode = Opcode(0x81);
        assert_eq!(build(&h, &[], &mut buf), Err(BuildError::UnknownOpcode));
    }

    #[test]
    fn truncations_and_mutations_never_panic() -> Result {
        let payload = data::<64>();
        for info in OPCODES {
            let h = headers(info);
            let p: &[u8] = match (info.payload, info.kind) {
                (false, _) => &[],
                (true, Kind::AtomicWrite) => &payload[..8],
                (true, _) => &payload[..63],
            };
            let mut buf = [0u8; 160];
            let len = build(&h, p, &mut buf).map_err(|_| EINVAL)?;
            for cut in 0..len {
                let _ = parse(&buf[..cut]);
            }
            for at in 0..len {
                for x in [0x01u8, 0x30, 0x80, 0xff] {
                    let mut m = buf;
                    m[at] ^= x;
                    if let Ok(pkt) = parse(&m[..len]) {
                        // Whatever parses is consistent with its length.
                        let total = pkt.info.header_len()
                            + pkt.payload.len()
                            + usize::from(pkt.hdr.bth.pad)
                            + ICRC_LEN;
                        assert_eq!(total, len);
                    }
                }
            }
        }
        Ok(())
    }
}
