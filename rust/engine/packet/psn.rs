// SPDX-License-Identifier: GPL-2.0

//! Packet sequence numbers and path MTUs (rxe's `psn_compare` in `rxe_hdr.h`, `ib_mtu_enum_to_int`
//! in `include/rdma/ib_verbs.h`).

// Used by the wire transport (issue 13), wired in next.
#![allow(dead_code)]

use core::cmp::Ordering;
use kernel::prelude::*;

/// A 24-bit packet sequence number.
///
/// # Invariants
///
/// The value is below `2^24`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) struct Psn(u32);

impl Psn {
    /// The bits a PSN has.
    pub(crate) const MASK: u32 = (1 << 24) - 1;

    /// The PSN of the low 24 bits of `v` (a QP attribute, a BTH field).
    pub(crate) const fn new(v: u32) -> Psn {
        // INVARIANT: masked to 24 bits.
        Psn(v & Psn::MASK)
    }

    /// Its value.
    pub(crate) const fn get(self) -> u32 {
        self.0
    }

    /// The PSN `n` packets later, wrapping at `2^24`.
    pub(crate) const fn add(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_add(n))
    }

    /// How far `self` is after `other` (negative: before), taken within the window of `2^23`
    /// on either side that IBTA 9.7.2 gives PSNs (`psn_compare`); exactly `2^23` apart counts as
    /// before.
    pub(crate) const fn diff(self, other: Psn) -> i32 {
        // The 24-bit difference, moved to the top of an `i32` so that its bit 23 is the sign.
        (self.0.wrapping_sub(other.0) << 8) as i32 >> 8
    }

    /// Orders `self` and `other` within the window, as [`Psn::diff`] does.
    pub(crate) fn compare(self, other: Psn) -> Ordering {
        self.diff(other).cmp(&0)
    }
}

/// A path MTU (`enum ib_mtu`): the payload bytes of one packet.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mtu {
    /// 256 bytes (`IB_MTU_256`).
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes (`IB_MTU_4096`).
    Mtu4096 = 5,
}

impl Mtu {
    /// Every MTU, smallest first.
    const ALL: [Mtu; 5] = [
        Mtu::Mtu256,
        Mtu::Mtu512,
        Mtu::Mtu1024,
        Mtu::Mtu2048,
        Mtu::Mtu4096,
    ];

    /// The MTU of an `enum ib_mtu` value, `None` if it names none.
    pub(crate) fn from_ib(v: u32) -> Option<Mtu> {
        Mtu::ALL.into_iter().find(|m| *m as u32 == v)
    }

    /// Its `enum ib_mtu` value.
    pub(crate) fn ib(self) -> u32 {
        self as u32
    }

    /// Its size in bytes.
    pub(crate) fn bytes(self) -> u32 {
        256 << (self as u32 - 1)
    }

    /// The MTU of exactly `bytes`, `None` if no MTU has that size.
    pub(crate) fn from_bytes(bytes: u32) -> Option<Mtu> {
        Mtu::ALL.into_iter().find(|m| m.bytes() == bytes)
    }

    /// The largest MTU of at most `bytes` (what a link of `bytes` of RoCE payload carries),
    /// `None` below 256.
    pub(crate) fn at_most(bytes: u32) -> Option<Mtu> {
        Mtu::ALL.into_iter().rev().find(|m| m.bytes() <= bytes)
    }

    /// Packets a message of `len` bytes takes (a message of zero bytes takes one).
    pub(crate) fn packets(self, len: u64) -> u64 {
        len.div_ceil(u64::from(self.bytes())).max(1)
    }
}

#[kunit_tests(rodp_psn)]
mod tests {
    use super::*;

    #[test]
    fn psns_wrap_at_24_bits() {
        assert_eq!(Psn::new(0x1ff_ffff).get(), 0xff_ffff);
        assert_eq!(Psn::new(0xff_ffff).add(1), Psn::new(0));
        assert_eq!(Psn::new(0xff_fffe).add(5).get(), 3);
        assert_eq!(Psn::new(7).add(0x100_0000), Psn::new(7));
        assert_eq!(Psn::new(0).add(u32::MAX).get(), 0xff_ffff);
    }

    #[test]
    fn psns_compare_within_the_window() {
        let p = |v| Psn::new(v);
        assert_eq!(p(5).compare(p(5)), Ordering::Equal);
        assert_eq!(p(6).compare(p(5)), Ordering::Greater);
        assert_eq!(p(5).compare(p(6)), Ordering::Less);
        // Across the wrap: 0 is one after 0xffffff.
        assert_eq!(p(0).compare(p(0xff_ffff)), Ordering::Greater);
        assert_eq!(p(0).diff(p(0xff_ffff)), 1);
        assert_eq!(p(0xff_ffff).diff(p(2)), -3);
        // The window's edges: 2^23 - 1 ahead is after, 2^23 ahead is before.
        assert_eq!(p(0x7f_ffff).diff(p(0)), 0x7f_ffff);
        assert_eq!(p(0x80_0000).diff(p(0)), -0x80_0000);
        assert_eq!(p(0x80_0000).compare(p(0)), Ordering::Less);
        assert_eq!(
            p(0x12_3456).add(0x7f_ffff).compare(p(0x12_3456)),
            Ordering::Greater
        );
    }

    #[test]
    fn mtus_convert_both_ways() -> Result {
        assert_eq!(Mtu::from_ib(0), None);
        assert_eq!(Mtu::from_ib(6), None);
        for (v, bytes) in [(1, 256), (2, 512), (3, 1024), (4, 2048), (5, 4096)] {
            let Some(m) = Mtu::from_ib(v) else {
                return Err(EINVAL);
            };
            assert_eq!(m.ib(), v);
            assert_eq!(m.bytes(), bytes);
            assert_eq!(Mtu::from_bytes(bytes), Some(m));
            assert_eq!(Mtu::at_most(bytes), Some(m));
            assert_eq!(Mtu::at_most(bytes * 2 - 1), Some(m));
        }
        assert_eq!(Mtu::from_bytes(1500), None);
        assert_eq!(Mtu::at_most(255), None);
        // A 1500-byte Ethernet link less IPv4, UDP, BTH and ICRC.
        assert_eq!(Mtu::at_most(1500 - 20 - 8 - 12 - 4), Some(Mtu::Mtu1024));
        assert_eq!(Mtu::at_most(u32::MAX), Some(Mtu::Mtu4096));
        Ok(())
    }

    #[test]
    fn messages_take_whole_packets() {
        let m = Mtu::Mtu1024;
        assert_eq!(m.packets(0), 1);
        assert_eq!(m.packets(1), 1);
        assert_eq!(m.packets(1024), 1);
        assert_eq!(m.packets(1025), 2);
        assert_eq!(Mtu::Mtu4096.packets(1 << 31), 1 << 19);
        assert_eq!(Mtu::Mtu256.packets(u64::MAX), u64::MAX / 256 + 1);
    }
}
