// SPDX-License-Identifier: GPL-2.0

//! The rxe uverbs ABI (`include/uapi/rdma/rdma_user_rxe.h`): WQE and CQE layouts in the shared
//! rings, and the driver data of create responses.
//!
//! Everything here is parsed from, or serialised to, plain bytes: ring contents are written by
//! user space at any time and are never trusted beyond their values.

use crate::bindings;
use core::mem::offset_of;
use kernel::prelude::*;

/// Size of the ring header (`struct rxe_queue_buf` up to `data`).
pub(crate) const QUEUE_HEADER: usize = offset_of!(bindings::rxe_queue_buf, data);
/// Offset of `log2_elem_size` in the ring header.
pub(crate) const QUEUE_LOG2_ELEM: usize = offset_of!(bindings::rxe_queue_buf, log2_elem_size);
/// Offset of `index_mask` in the ring header.
pub(crate) const QUEUE_INDEX_MASK: usize = offset_of!(bindings::rxe_queue_buf, index_mask);
/// Offset of `producer_index` in the ring header.
pub(crate) const QUEUE_PRODUCER: usize = offset_of!(bindings::rxe_queue_buf, producer_index);
/// Offset of `consumer_index` in the ring header.
pub(crate) const QUEUE_CONSUMER: usize = offset_of!(bindings::rxe_queue_buf, consumer_index);

/// Size of a send WQE without its scatter/gather list or inline data.
pub(crate) const SEND_WQE_HEADER: usize =
    offset_of!(bindings::rxe_send_wqe, dma) + offset_of!(bindings::rxe_dma_info, __bindgen_anon_1);
/// Size of a receive WQE without its scatter/gather list.
pub(crate) const RECV_WQE_HEADER: usize =
    offset_of!(bindings::rxe_recv_wqe, dma) + offset_of!(bindings::rxe_dma_info, __bindgen_anon_1);
/// Size of one scatter/gather entry.
pub(crate) const SGE_SIZE: usize = size_of::<bindings::rxe_sge>();
/// Size of a completion entry (`struct ib_uverbs_wc`).
pub(crate) const CQE_SIZE: usize = size_of::<bindings::ib_uverbs_wc>();

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(off..off + 4) {
        a.copy_from_slice(s);
    }
    u32::from_ne_bytes(a)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(off..off + 8) {
        a.copy_from_slice(s);
    }
    u64::from_ne_bytes(a)
}

fn put(b: &mut [u8], off: usize, v: &[u8]) {
    if let Some(d) = b.get_mut(off..off + v.len()) {
        d.copy_from_slice(v);
    }
}

/// One scatter/gather entry.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Sge {
    /// Virtual address (the MR's iova space).
    pub(crate) addr: u64,
    /// Length in bytes.
    pub(crate) length: u32,
    /// Local key.
    pub(crate) lkey: u32,
}

impl Sge {
    /// The `i`th entry of the list that starts at `off` in `b`.
    pub(crate) fn parse(b: &[u8], off: usize, i: usize) -> Self {
        let at = off + i * SGE_SIZE;
        Self {
            addr: u64_at(b, at + offset_of!(bindings::rxe_sge, addr)),
            length: u32_at(b, at + offset_of!(bindings::rxe_sge, length)),
            lkey: u32_at(b, at + offset_of!(bindings::rxe_sge, lkey)),
        }
    }
}

/// The fields of a send WQE (`struct rxe_send_wqe`) the engine uses.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SendWqe {
    /// Consumer's id.
    pub(crate) wr_id: u64,
    /// `IB_WR_*`.
    pub(crate) opcode: u32,
    /// `IB_SEND_*`.
    pub(crate) send_flags: u32,
    /// Immediate data, as stored (network order).
    pub(crate) imm_data: u32,
    /// Remote address of RDMA and atomic operations.
    pub(crate) remote_addr: u64,
    /// Remote key of RDMA and atomic operations.
    pub(crate) rkey: u32,
    /// Compare (CAS) or add (FAA) operand.
    pub(crate) compare_add: u64,
    /// Swap operand.
    pub(crate) swap: u64,
    /// UD destination QP.
    pub(crate) remote_qpn: u32,
    /// UD destination Q_Key.
    pub(crate) remote_qkey: u32,
    /// UD address handle number.
    pub(crate) ah_num: u32,
    /// Total length of the data.
    pub(crate) length: u32,
    /// Number of scatter/gather entries.
    pub(crate) num_sge: u32,
}

impl SendWqe {
    /// Parses the fixed part of a send WQE.
    pub(crate) fn parse(b: &[u8]) -> Self {
        type W = bindings::rxe_send_wqe;
        type R = bindings::rxe_send_wr;
        type U = bindings::rxe_send_wr__bindgen_ty_2;
        let wr = offset_of!(W, wr);
        let u = wr + offset_of!(R, wr);
        let rdma = u + offset_of!(U, rdma);
        let atomic = u + offset_of!(U, atomic);
        let ud = u + offset_of!(U, ud);
        let dma = offset_of!(W, dma);
        let opcode = u32_at(b, wr + offset_of!(R, opcode));
        let is_atomic = opcode == bindings::ib_wr_opcode_IB_WR_ATOMIC_CMP_AND_SWP
            || opcode == bindings::ib_wr_opcode_IB_WR_ATOMIC_FETCH_AND_ADD;
        Self {
            wr_id: u64_at(b, wr + offset_of!(R, wr_id)),
            opcode,
            send_flags: u32_at(b, wr + offset_of!(R, send_flags)),
            imm_data: u32_at(b, wr + offset_of!(R, ex)),
            remote_addr: if is_atomic {
                u64_at(
                    b,
                    atomic
                        + offset_of!(
                            bindings::rxe_send_wr__bindgen_ty_2__bindgen_ty_3,
                            remote_addr
                        ),
                )
            } else {
                u64_at(
                    b,
                    rdma + offset_of!(
                        bindings::rxe_send_wr__bindgen_ty_2__bindgen_ty_2,
                        remote_addr
                    ),
                )
            },
            rkey: if is_atomic {
                u32_at(
                    b,
                    atomic + offset_of!(bindings::rxe_send_wr__bindgen_ty_2__bindgen_ty_3, rkey),
                )
            } else {
                u32_at(
                    b,
                    rdma + offset_of!(bindings::rxe_send_wr__bindgen_ty_2__bindgen_ty_2, rkey),
                )
            },
            compare_add: u64_at(
                b,
                atomic
                    + offset_of!(
                        bindings::rxe_send_wr__bindgen_ty_2__bindgen_ty_3,
                        compare_add
                    ),
            ),
            swap: u64_at(
                b,
                atomic + offset_of!(bindings::rxe_send_wr__bindgen_ty_2__bindgen_ty_3, swap),
            ),
            remote_qpn: u32_at(
                b,
                ud + offset_of!(
                    bindings::rxe_send_wr__bindgen_ty_2__bindgen_ty_4,
                    remote_qpn
                ),
            ),
            remote_qkey: u32_at(
                b,
                ud + offset_of!(
                    bindings::rxe_send_wr__bindgen_ty_2__bindgen_ty_4,
                    remote_qkey
                ),
            ),
            ah_num: u32_at(
                b,
                ud + offset_of!(bindings::rxe_send_wr__bindgen_ty_2__bindgen_ty_4, ah_num),
            ),
            length: u32_at(b, dma + offset_of!(bindings::rxe_dma_info, length)),
            num_sge: u32_at(b, dma + offset_of!(bindings::rxe_dma_info, num_sge)),
        }
    }
}

/// The fields of a receive WQE (`struct rxe_recv_wqe`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RecvWqe {
    /// Consumer's id.
    pub(crate) wr_id: u64,
    /// Number of scatter/gather entries.
    pub(crate) num_sge: u32,
}

impl RecvWqe {
    /// Parses the fixed part of a receive WQE.
    pub(crate) fn parse(b: &[u8]) -> Self {
        let dma = offset_of!(bindings::rxe_recv_wqe, dma);
        Self {
            wr_id: u64_at(b, offset_of!(bindings::rxe_recv_wqe, wr_id)),
            num_sge: u32_at(b, dma + offset_of!(bindings::rxe_dma_info, num_sge)),
        }
    }
}

/// A work completion as written to a CQ ring (`struct ib_uverbs_wc`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Wc {
    /// Consumer's id.
    pub(crate) wr_id: u64,
    /// `IB_WC_*` status.
    pub(crate) status: u32,
    /// `IB_UVERBS_WC_*` opcode.
    pub(crate) opcode: u32,
    /// Bytes received.
    pub(crate) byte_len: u32,
    /// Immediate data (network order, as sent).
    pub(crate) imm_data: u32,
    /// The local QP.
    pub(crate) qp_num: u32,
    /// The sending QP (UD).
    pub(crate) src_qp: u32,
    /// `IB_WC_*` flags.
    pub(crate) wc_flags: u32,
    /// Port.
    pub(crate) port_num: u8,
}

impl Wc {
    /// Serialises the entry.
    pub(crate) fn to_bytes(&self) -> [u8; CQE_SIZE] {
        type W = bindings::ib_uverbs_wc;
        let mut b = [0u8; CQE_SIZE];
        put(&mut b, offset_of!(W, wr_id), &self.wr_id.to_ne_bytes());
        put(&mut b, offset_of!(W, status), &self.status.to_ne_bytes());
        put(&mut b, offset_of!(W, opcode), &self.opcode.to_ne_bytes());
        put(
            &mut b,
            offset_of!(W, byte_len),
            &self.byte_len.to_ne_bytes(),
        );
        put(&mut b, offset_of!(W, ex), &self.imm_data.to_ne_bytes());
        put(&mut b, offset_of!(W, qp_num), &self.qp_num.to_ne_bytes());
        put(&mut b, offset_of!(W, src_qp), &self.src_qp.to_ne_bytes());
        put(
            &mut b,
            offset_of!(W, wc_flags),
            &self.wc_flags.to_ne_bytes(),
        );
        put(&mut b, offset_of!(W, port_num), &[self.port_num]);
        b
    }
}

/// `struct mminfo`: where user space maps a ring.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MmInfo {
    /// The mmap offset on the device file.
    pub(crate) offset: u64,
    /// Size in bytes.
    pub(crate) size: u32,
}

impl MmInfo {
    /// Serialised size.
    pub(crate) const SIZE: usize = size_of::<bindings::mminfo>();

    /// Serialises the entry.
    pub(crate) fn to_bytes(self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        put(
            &mut b,
            offset_of!(bindings::mminfo, offset),
            &self.offset.to_ne_bytes(),
        );
        put(
            &mut b,
            offset_of!(bindings::mminfo, size),
            &self.size.to_ne_bytes(),
        );
        b
    }
}

/// The driver response of `create_qp` (`struct rxe_create_qp_resp`).
pub(crate) fn create_qp_resp(
    rq: MmInfo,
    sq: MmInfo,
) -> [u8; size_of::<bindings::rxe_create_qp_resp>()] {
    let mut b = [0u8; size_of::<bindings::rxe_create_qp_resp>()];
    put(
        &mut b,
        offset_of!(bindings::rxe_create_qp_resp, rq_mi),
        &rq.to_bytes(),
    );
    put(
        &mut b,
        offset_of!(bindings::rxe_create_qp_resp, sq_mi),
        &sq.to_bytes(),
    );
    b
}

/// The driver response of `create_srq` (`struct rxe_create_srq_resp`).
pub(crate) fn create_srq_resp(
    mi: MmInfo,
    srq_num: u32,
) -> [u8; size_of::<bindings::rxe_create_srq_resp>()] {
    let mut b = [0u8; size_of::<bindings::rxe_create_srq_resp>()];
    put(
        &mut b,
        offset_of!(bindings::rxe_create_srq_resp, mi),
        &mi.to_bytes(),
    );
    put(
        &mut b,
        offset_of!(bindings::rxe_create_srq_resp, srq_num),
        &srq_num.to_ne_bytes(),
    );
    b
}

/// The driver response of `create_ah` (`struct rxe_create_ah_resp`).
pub(crate) fn create_ah_resp(ah_num: u32) -> [u8; size_of::<bindings::rxe_create_ah_resp>()] {
    let mut b = [0u8; size_of::<bindings::rxe_create_ah_resp>()];
    put(
        &mut b,
        offset_of!(bindings::rxe_create_ah_resp, ah_num),
        &ah_num.to_ne_bytes(),
    );
    b
}

/// Size of the driver command of `modify_srq` (`struct rxe_modify_srq_cmd`).
pub(crate) const MODIFY_SRQ_CMD: usize = size_of::<bindings::rxe_modify_srq_cmd>();

/// The user address in a `modify_srq` driver command where the new ring's `mminfo` goes.
pub(crate) fn modify_srq_mmap_info_addr(cmd: &[u8]) -> u64 {
    u64_at(
        cmd,
        offset_of!(bindings::rxe_modify_srq_cmd, mmap_info_addr),
    )
}

/// Bytes RoCEv2 puts after the IP header: UDP (8), BTH (12), DETH (8); and the ICRC (4) after
/// the payload.
const ROCE_UD_OVERHEAD: u32 = 8 + 12 + 8 + 4;

/// The 40 bytes a UD receive finds before the data, as RoCEv2 delivers them: for an
/// IPv4-mapped destination GID, 20 zero bytes and the IPv4 header; otherwise the IPv6 header.
/// (libibverbs' `ibv_init_ah_from_wc` tells the two apart by the IPv4 header's checksum.)
pub(crate) fn grh(
    sgid: &[u8; 16],
    dgid: &[u8; 16],
    payload: u32,
    hop_limit: u8,
    tclass: u8,
) -> [u8; 40] {
    let mut b = [0u8; 40];
    let v4 = dgid[..10].iter().all(|&x| x == 0) && dgid[10] == 0xff && dgid[11] == 0xff;
    if v4 {
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
        type G = bindings::ib_grh;
        let vtf = 6u32 << 28 | u32::from(tclass) << 20;
        put(
            &mut b,
            offset_of!(G, version_tclass_flow),
            &vtf.to_be_bytes(),
        );
        put(
            &mut b,
            offset_of!(G, paylen),
            &((ROCE_UD_OVERHEAD + payload) as u16).to_be_bytes(),
        );
        put(&mut b, offset_of!(G, next_hdr), &[17]);
        put(&mut b, offset_of!(G, hop_limit), &[hop_limit]);
        put(&mut b, offset_of!(G, sgid), sgid);
        put(&mut b, offset_of!(G, dgid), dgid);
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

#[kunit_tests(rodp_abi)]
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
}
