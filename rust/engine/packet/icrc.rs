// SPDX-License-Identifier: GPL-2.0

//! The invariant CRC of a RoCEv2 packet (rxe's `rxe_icrc.c`, the IBTA RoCEv2 annex A17.3.3).
//!
//! A CRC-32 (IEEE, LSB first) started at all ones over 8 bytes of ones (the masked LRH of
//! InfiniBand), the IP header, the UDP header, the BTH and everything after it up to the ICRC,
//! with the fields routers may change masked to ones: IPv4 TOS, TTL and header checksum; IPv6
//! traffic class, flow label and hop limit; the UDP checksum; the BTH's byte 4 (FECN, BECN
//! and reserved bits). The result is inverted and sent least significant byte first.
//!
//! rxe starts its CRC at `0xdebb20e3`, the CRC state after the 8 bytes of ones, and stores the
//! inverted `u32` in host order (little-endian on every host it interoperates with).

// Used by the wire transport (issue 13), wired in next.
#![allow(dead_code)]

use super::{
    header::ICRC_LEN,
    opcode::{
        Ext,
        Opcode,
        BTH_LEN, //
    },
};
use crate::ib::crc::crc32_le;
use kernel::prelude::*;

/// The CRC state after 8 bytes of ones from all ones (rxe's seed).
const SEED: u32 = 0xdebb_20e3;

/// Bytes of FLUSH's extension headers (FETH, RETH).
const FLUSH_EXT_LEN: usize = Ext::FETH.or(Ext::RETH).len();

/// The IP header of a packet, as received or about to be sent (addresses, lengths and, for
/// IPv4, the identification final: they are covered).
#[derive(Clone, Copy)]
pub(crate) enum IpHeader<'a> {
    /// IPv4 without options (rxe neither sends nor, for the ICRC, reads them).
    V4(&'a [u8; 20]),
    /// IPv6 without extension headers.
    V6(&'a [u8; 40]),
}

/// The ICRC of the packet `packet` (the UDP payload up to, not including, its ICRC) carried
/// in `ip` and `udp`, as the 4 bytes that follow the pad on the wire.
///
/// rxe-compatible to the byte, including one quirk: for RC FLUSH, whose row in rxe's opcode
/// table has no payload offset, rxe continues the CRC over the whole packet from its BTH on
/// again (unmasked) after the headers, and so does this function.
pub(crate) fn icrc(ip: IpHeader<'_>, udp: &[u8; 8], packet: &[u8]) -> [u8; ICRC_LEN] {
    let mut crc = SEED;
    match ip {
        IpHeader::V4(h) => {
            let mut m = *h;
            // TOS, TTL, header checksum.
            m[1] = 0xff;
            m[8] = 0xff;
            m[10] = 0xff;
            m[11] = 0xff;
            crc = crc32_le(crc, &m);
        }
        IpHeader::V6(h) => {
            let mut m = *h;
            // Traffic class and flow label (all of bytes 0-3 but the version), hop limit.
            m[0] |= 0x0f;
            m[1] = 0xff;
            m[2] = 0xff;
            m[3] = 0xff;
            m[7] = 0xff;
            crc = crc32_le(crc, &m);
        }
    }
    let mut u = *udp;
    // UDP checksum.
    u[6] = 0xff;
    u[7] = 0xff;
    crc = crc32_le(crc, &u);
    let (bth, rest) = packet.split_at(packet.len().min(BTH_LEN));
    let mut b = [0u8; BTH_LEN];
    b.iter_mut().zip(bth).for_each(|(d, s)| *d = *s);
    // FECN, BECN, resv6a.
    b[4] = 0xff;
    crc = crc32_le(crc, b.get(..bth.len()).unwrap_or(&b));
    if packet.first() == Some(&Opcode::RC_FLUSH.0) {
        // rxe: the headers after the BTH, then "the payload" from offset 0 to the ICRC.
        crc = crc32_le(crc, rest.get(..FLUSH_EXT_LEN).unwrap_or(rest));
        crc = crc32_le(crc, packet);
    } else {
        crc = crc32_le(crc, rest);
    }
    (!crc).to_le_bytes()
}

/// Writes the ICRC of the UDP payload `datagram` (headers, payload, pad, then 4 bytes of room,
/// as `header::build` leaves it) into its last 4 bytes. Does nothing to a datagram shorter
/// than an ICRC.
pub(crate) fn generate(ip: IpHeader<'_>, udp: &[u8; 8], datagram: &mut [u8]) {
    if let Some((packet, room)) = datagram.split_last_chunk_mut::<ICRC_LEN>() {
        *room = icrc(ip, udp, packet);
    }
}

/// Whether the ICRC at the end of the received UDP payload `datagram` is right (a datagram
/// shorter than an ICRC is not).
pub(crate) fn check(ip: IpHeader<'_>, udp: &[u8; 8], datagram: &[u8]) -> bool {
    datagram
        .split_last_chunk::<ICRC_LEN>()
        .is_some_and(|(packet, got)| icrc(ip, udp, packet) == *got)
}

#[kunit_tests(rodp_icrc)]
mod tests {
    use super::*;
    use crate::engine::packet::{
        header::{
            build,
            parse,
            Bth,
            Feth,
            Headers,
            Reth, //
        },
        psn::Psn,
    };

    /// Decodes a hex string (no separators) into `N` bytes.
    fn hex<const N: usize>(s: &str) -> [u8; N] {
        let d = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
        let mut out = [0u8; N];
        for (o, p) in out.iter_mut().zip(s.as_bytes().chunks(2)) {
            *o = d(p[0]) << 4 | d(*p.get(1).unwrap_or(&b'0'));
        }
        out
    }

    /// A RoCEv2 CNP (opcode 0x81) sent by a Mellanox ConnectX-4 Lx, from the capture in
    /// Scapy's `test/contrib/roce.uts` ("RoCE CNP captured on ConnectX-4 Lx"): hardware
    /// computed this ICRC, over a real packet's IPv4 identification and TOS (0xc2).
    #[test]
    fn ipv4_icrc_matches_a_connectx4_capture() {
        let ip: [u8; 20] = hex("45c2003c718c4000401191610a0011010a001201");
        let udp: [u8; 8] = hex("000012b700280000");
        let mut pkt = [0u8; 28];
        pkt[..12].copy_from_slice(&hex::<12>("8100ffff4000011800000000"));
        let want = [0x82, 0xfd, 0x00, 0x2a];
        assert_eq!(icrc(IpHeader::V4(&ip), &udp, &pkt), want);
        // Masked fields do not matter; anything else does.
        let mut ip2 = ip;
        ip2[1] = 0;
        ip2[8] = 1;
        ip2[10] = 0x12;
        let mut udp2 = udp;
        udp2[6] = 0x55;
        pkt[4] = 0x80;
        assert_eq!(icrc(IpHeader::V4(&ip2), &udp2, &pkt), want);
        ip2[5] ^= 1;
        assert!(icrc(IpHeader::V4(&ip2), &udp2, &pkt) != want);
        pkt[27] = 1;
        assert!(icrc(IpHeader::V4(&ip), &udp, &pkt) != want);
    }

    /// Scapy's RoCE layer's UC SEND_ONLY example (`roce.uts`, "RoCE layer": M set, 18 bytes
    /// of payload and 2 of pad), whose ICRC Scapy computes as `0x78f353f3`.
    #[test]
    fn ipv4_icrc_matches_scapy() -> Result {
        let ip: [u8; 20] = hex("45010040047840004011b4d5c0a80007c0a80007");
        let udp: [u8; 8] = hex("c00012b7002caca2");
        let pkt: [u8; 32] = hex("2460ffff000000d300cf17104630818be28935d90e9a95505401be885e500000");
        assert_eq!(
            icrc(IpHeader::V4(&ip), &udp, &pkt),
            [0x78, 0xf3, 0x53, 0xf3]
        );
        let mut whole = [0u8; 36];
        whole[..32].copy_from_slice(&pkt);
        whole[32..].copy_from_slice(&[0x78, 0xf3, 0x53, 0xf3]);
        assert!(check(IpHeader::V4(&ip), &udp, &whole));
        let p = parse(&whole).map_err(|_| EINVAL)?;
        assert_eq!(p.payload.len(), 18);
        assert!(p.hdr.bth.migrated);
        assert_eq!(p.icrc, [0x78, 0xf3, 0x53, 0xf3]);
        Ok(())
    }

    /// An RC SEND_ONLY over IPv6 as rxe builds it, with the masked fields non-zero (traffic
    /// class 0x12, flow label 0xabcde, UDP checksum 0x1234, FECN). The expected ICRC was
    /// computed outside rodp with Python: the 8 bytes `ff`, the IPv6 header with bytes 0-3
    /// or'ed with `0fffffff` and byte 7 set to `ff`, the UDP header with bytes 6-7 `ffff`,
    /// the BTH with byte 4 `ff`, then the payload and pad; `zlib.crc32` of that, packed `<I`.
    #[test]
    fn ipv6_icrc_matches_python() {
        let ip: [u8; 40] = hex(concat!(
            "612abcde00201140",
            "20010db8000000000000000000000001",
            "20010db8000000000000000000000002"
        ));
        let udp: [u8; 8] = hex("c0de12b700201234");
        let mut bth = Bth::new(Opcode::RC_SEND_ONLY, 0x11, Psn::new(0x12_3456));
        bth.solicited = true;
        bth.fecn = true;
        bth.ack_req = true;
        let mut buf = [0u8; 24];
        assert_eq!(build(&Headers::new(bth), b"rodp v6", &mut buf), Ok(24));
        assert_eq!(&buf[..12], &hex::<12>("0490ffff8000001180123456"));
        assert_eq!(&buf[12..20], b"rodp v6\0");
        assert_eq!(
            icrc(IpHeader::V6(&ip), &udp, &buf[..20]),
            [0x79, 0x71, 0xb7, 0x39]
        );
        // The version nibble is covered, the traffic class and flow label are not.
        let mut ip2 = ip;
        ip2[0] = 0x6f;
        ip2[2] = 0;
        ip2[7] = 1;
        assert_eq!(
            icrc(IpHeader::V6(&ip2), &udp, &buf[..20]),
            [0x79, 0x71, 0xb7, 0x39]
        );
        ip2[0] = 0x5f;
        assert!(icrc(IpHeader::V6(&ip2), &udp, &buf[..20]) != [0x79, 0x71, 0xb7, 0x39]);
    }

    /// An RC FLUSH over IPv4, whose ICRC rxe computes over the headers and then over the whole
    /// packet again from the BTH (see [`icrc`]). Expected value from Python, emulating
    /// `rxe_icrc_hdr` and `rxe_icrc_generate` for this opcode (`zlib.crc32` of the 8 bytes
    /// `ff`, the masked IPv4, UDP and BTH, bytes 12-31 of the packet, then bytes 0-31 again);
    /// the standard coverage would give `2395425e`.
    #[test]
    fn flush_icrc_follows_rxe() {
        let ip: [u8; 20] = hex("45000040abcd400040110000c6120001c6120002");
        let udp: [u8; 8] = hex("d00012b7002c0000");
        let mut h = Headers::new(Bth::new(Opcode::RC_FLUSH, 0x22, Psn::new(7)));
        h.bth.ack_req = true;
        h.feth = Some(Feth {
            placement: 1,
            selectivity: 1,
        });
        h.reth = Some(Reth {
            va: 0x7f00_0000_1000,
            rkey: 0x123_4567,
            len: 4096,
        });
        let mut buf = [0u8; 36];
        assert_eq!(build(&h, &[], &mut buf), Ok(36));
        generate(IpHeader::V4(&ip), &udp, &mut buf);
        assert_eq!(&buf[32..], &[0xb0, 0xd8, 0xff, 0xae]);
        assert!(check(IpHeader::V4(&ip), &udp, &buf));
        buf[35] ^= 1;
        assert!(!check(IpHeader::V4(&ip), &udp, &buf));
        let want: [u8; 32] =
            hex("1c00ffff00000022800000070000001100007f00000010000123456700001000");
        assert_eq!(&buf[..32], &want);
        assert_eq!(
            icrc(IpHeader::V4(&ip), &udp, &buf[..32]),
            [0xb0, 0xd8, 0xff, 0xae]
        );
    }

    /// Short and empty packets give an ICRC and no panic (the parser refuses them anyway).
    #[test]
    fn short_packets_do_not_panic() {
        let ip = [0x45u8; 20];
        let udp = [0u8; 8];
        let _ = icrc(IpHeader::V4(&ip), &udp, &[]);
        let _ = icrc(IpHeader::V4(&ip), &udp, &[0x1c]);
        let _ = icrc(IpHeader::V4(&ip), &udp, &[0x1c, 0, 0, 0, 0, 0]);
        let _ = icrc(IpHeader::V6(&[0x60; 40]), &udp, &[0; 13]);
        assert!(!check(IpHeader::V4(&ip), &udp, &[0; 3]));
        let mut three = [0u8; 3];
        generate(IpHeader::V4(&ip), &udp, &mut three);
        assert_eq!(three, [0; 3]);
    }
}
