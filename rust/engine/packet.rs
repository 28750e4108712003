// SPDX-License-Identifier: GPL-2.0

//! RoCEv2 packets (the header code of rxe's `rxe_hdr.h`, `rxe_opcode.c`, `rxe_icrc.c` and
//! `rxe_net.c`): GIDs as RoCE reads them, the GRH a UD receive finds before its data, and the
//! wire format's pure logic — the opcode table ([`opcode`]), the transport headers built and
//! parsed from untrusted bytes ([`header`]), the ICRC ([`icrc`]), PSN arithmetic and path MTUs
//! ([`psn`]).

pub(crate) mod header;
pub(crate) mod icrc;
pub(crate) mod opcode;
pub(crate) mod psn;

use kernel::prelude::*;

/// A GID as RoCEv2 reads it: an IPv6 address, or an IPv4 address mapped into one
/// (`::ffff:a.b.c.d`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) struct Gid(pub(crate) [u8; 16]);

impl Gid {
    /// Whether the GID is an IPv4-mapped address (`ipv6_addr_v4mapped`).
    pub(crate) fn is_v4_mapped(&self) -> bool {
        let g = &self.0;
        g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff
    }

    /// Whether the GID is a multicast GID: an IPv6 multicast address, or an IPv4-mapped one
    /// of 224.0.0.0/4 (what rdma_cm joins for IPv4 groups on RoCEv2), as ib_core's
    /// `rdma_is_multicast_addr` says.
    pub(crate) fn is_multicast(&self) -> bool {
        if self.is_v4_mapped() {
            self.0[12] & 0xf0 == 0xe0
        } else {
            self.0[0] == 0xff
        }
    }
}

/// Bytes RoCEv2 puts after the IP header: UDP (8), BTH (12), DETH (8); and the ICRC (4) after
/// the payload.
const ROCE_UD_OVERHEAD: u32 = 8 + 12 + 8 + 4;

/// The 40 bytes a UD receive finds before the data, as RoCEv2 delivers them: for an
/// IPv4-mapped destination GID, 20 zero bytes and the IPv4 header; otherwise the IPv6 header.
/// (libibverbs' `ibv_init_ah_from_wc` tells the two apart by the IPv4 header's checksum.)
pub(super) fn grh(
    sgid: &[u8; 16],
    dgid: &[u8; 16],
    payload: u32,
    hop_limit: u8,
    tclass: u8,
) -> [u8; 40] {
    let mut b = [0u8; 40];
    if Gid(*dgid).is_v4_mapped() {
        let h = &mut b[20..];
        h[0] = 0x45;
        h[1] = tclass;
        h[2..4].copy_from_slice(&((20 + ROCE_UD_OVERHEAD + payload) as u16).to_be_bytes());
        // Don't fragment.
        h[6] = 0x40;
        h[8] = hop_limit;
        // UDP.
        h[9] = 17;
        h[12..16].copy_from_slice(&sgid[12..]);
        h[16..20].copy_from_slice(&dgid[12..]);
        let csum = ipv4_checksum(h);
        h[10..12].copy_from_slice(&csum.to_be_bytes());
    } else {
        // The IPv6 header (`struct ib_grh`): version, class and flow; payload length; next
        // header; hop limit; source; destination.
        b[..4].copy_from_slice(&(6u32 << 28 | u32::from(tclass) << 20).to_be_bytes());
        b[4..6].copy_from_slice(&((ROCE_UD_OVERHEAD + payload) as u16).to_be_bytes());
        b[6] = 17;
        b[7] = hop_limit;
        b[8..24].copy_from_slice(sgid);
        b[24..40].copy_from_slice(dgid);
    }
    b
}

/// The IPv4 header checksum of `h` (its checksum field zero).
fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[kunit_tests(rodp_packet)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_grh_has_a_valid_header() {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s[10..].copy_from_slice(&[0xff, 0xff, 10, 0, 0, 1]);
        d[10..].copy_from_slice(&[0xff, 0xff, 10, 0, 0, 2]);
        let g = grh(&s, &d, 100, 64, 0);
        assert!(g[..20].iter().all(|&x| x == 0));
        assert_eq!(g[20], 0x45);
        assert_eq!(u16::from_be_bytes([g[22], g[23]]), 20 + 32 + 100);
        assert_eq!(&g[32..36], &[10, 0, 0, 1]);
        assert_eq!(&g[36..40], &[10, 0, 0, 2]);
        // A header with its checksum sums to 0xffff.
        assert_eq!(ipv4_checksum(&g[20..]), 0);
    }

    #[test]
    fn ipv6_grh_carries_both_gids() {
        let s = [0xfeu8; 16];
        let d = [0x20u8; 16];
        let g = grh(&s, &d, 100, 1, 0);
        assert_eq!(g[0] >> 4, 6);
        assert_eq!(u16::from_be_bytes([g[4], g[5]]), 32 + 100);
        assert_eq!(g[6], 17);
        assert_eq!(&g[8..24], &s);
        assert_eq!(&g[24..40], &d);
    }

    #[test]
    fn multicast_gids_of_both_families() {
        let mut v4 = [0u8; 16];
        v4[10..].copy_from_slice(&[0xff, 0xff, 224, 0, 1, 1]);
        assert!(Gid(v4).is_v4_mapped());
        assert!(Gid(v4).is_multicast());
        v4[12] = 10;
        assert!(!Gid(v4).is_multicast());
        assert!(Gid([0xff; 16]).is_multicast());
        assert!(!Gid([0xfe; 16]).is_multicast());
        assert!(!Gid([0xfe; 16]).is_v4_mapped());
    }
}
