// SPDX-License-Identifier: GPL-2.0

//! The rxe uverbs ABI (`include/uapi/rdma/rdma_user_rxe.h`): WQE and CQE layouts in the shared
//! rings, and the driver data of create responses.
//!
//! Everything here is parsed from, or serialised to, plain bytes: ring contents are written by
//! user space at any time and are never trusted beyond their values.

use super::verbs::{WcStatus, WrOpcode};
use crate::ib::bindings;
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

/// The `u32` at `off` of `b` (0 past its end).
pub(super) fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(off..off + 4) {
        a.copy_from_slice(s);
    }
    u32::from_ne_bytes(a)
}

/// The `u64` at `off` of `b` (0 past its end).
pub(super) fn u64_at(b: &[u8], off: usize) -> u64 {
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
    /// Writes the entry as the `i`th of the list that starts at `off` in `b`.
    pub(crate) fn write(&self, b: &mut [u8], off: usize, i: usize) {
        let at = off + i * SGE_SIZE;
        put(
            b,
            at + offset_of!(bindings::rxe_sge, addr),
            &self.addr.to_ne_bytes(),
        );
        put(
            b,
            at + offset_of!(bindings::rxe_sge, length),
            &self.length.to_ne_bytes(),
        );
        put(
            b,
            at + offset_of!(bindings::rxe_sge, lkey),
            &self.lkey.to_ne_bytes(),
        );
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
    /// A FLUSH's placement type and selectivity level.
    pub(crate) flush_type: u8,
    pub(crate) flush_level: u8,
}

/// Offsets of the fields of `struct rxe_send_wqe`.
struct SendOff {
    wr_id: usize,
    opcode: usize,
    send_flags: usize,
    imm: usize,
    rdma_addr: usize,
    rdma_rkey: usize,
    atomic_addr: usize,
    atomic_rkey: usize,
    compare_add: usize,
    swap: usize,
    remote_qpn: usize,
    remote_qkey: usize,
    ah_num: usize,
    length: usize,
    num_sge: usize,
    flush_rkey: usize,
    flush_type: usize,
    flush_level: usize,
}

const SEND_OFF: SendOff = {
    type W = bindings::rxe_send_wqe;
    type R = bindings::rxe_send_wr;
    type U = bindings::rxe_send_wr__bindgen_ty_2;
    type Rdma = bindings::rxe_send_wr__bindgen_ty_2__bindgen_ty_2;
    type Atomic = bindings::rxe_send_wr__bindgen_ty_2__bindgen_ty_3;
    type Ud = bindings::rxe_send_wr__bindgen_ty_2__bindgen_ty_4;
    type Flush = bindings::rxe_send_wr__bindgen_ty_2__bindgen_ty_1;
    let wr = offset_of!(W, wr);
    let u = wr + offset_of!(R, wr);
    let rdma = u + offset_of!(U, rdma);
    let atomic = u + offset_of!(U, atomic);
    let ud = u + offset_of!(U, ud);
    let flush = u + offset_of!(U, flush);
    let dma = offset_of!(W, dma);
    SendOff {
        wr_id: wr + offset_of!(R, wr_id),
        opcode: wr + offset_of!(R, opcode),
        send_flags: wr + offset_of!(R, send_flags),
        imm: wr + offset_of!(R, ex),
        rdma_addr: rdma + offset_of!(Rdma, remote_addr),
        rdma_rkey: rdma + offset_of!(Rdma, rkey),
        atomic_addr: atomic + offset_of!(Atomic, remote_addr),
        atomic_rkey: atomic + offset_of!(Atomic, rkey),
        compare_add: atomic + offset_of!(Atomic, compare_add),
        swap: atomic + offset_of!(Atomic, swap),
        remote_qpn: ud + offset_of!(Ud, remote_qpn),
        remote_qkey: ud + offset_of!(Ud, remote_qkey),
        ah_num: ud + offset_of!(Ud, ah_num),
        length: dma + offset_of!(bindings::rxe_dma_info, length),
        num_sge: dma + offset_of!(bindings::rxe_dma_info, num_sge),
        flush_rkey: flush + offset_of!(Flush, rkey),
        flush_type: flush + offset_of!(Flush, type_),
        flush_level: flush + offset_of!(Flush, level),
    }
};

/// Whether a WQE of `opcode` uses the atomic part of the union: atomics, and a fast
/// registration, which only the kernel's own rings carry (its key, iova, length and rights
/// where an atomic's key, address, operands are).
fn is_atomic(opcode: u32) -> bool {
    WrOpcode::from_raw(opcode).is_some_and(|o| o.is_atomic() || o == WrOpcode::RegMr)
}

impl SendWqe {
    /// Parses the fixed part of a send WQE.
    pub(crate) fn parse(b: &[u8]) -> Self {
        let o = &SEND_OFF;
        let opcode = u32_at(b, o.opcode);
        let atomic = is_atomic(opcode);
        // A FLUSH's address is where an RDMA operation's is, its key four bytes further.
        let flush = opcode == WrOpcode::Flush as u32;
        let rkey_at = match (atomic, flush) {
            (true, _) => o.atomic_rkey,
            (_, true) => o.flush_rkey,
            _ => o.rdma_rkey,
        };
        Self {
            wr_id: u64_at(b, o.wr_id),
            opcode,
            send_flags: u32_at(b, o.send_flags),
            imm_data: u32_at(b, o.imm),
            remote_addr: u64_at(b, if atomic { o.atomic_addr } else { o.rdma_addr }),
            rkey: u32_at(b, rkey_at),
            compare_add: u64_at(b, o.compare_add),
            swap: u64_at(b, o.swap),
            remote_qpn: u32_at(b, o.remote_qpn),
            remote_qkey: u32_at(b, o.remote_qkey),
            ah_num: u32_at(b, o.ah_num),
            length: u32_at(b, o.length),
            num_sge: u32_at(b, o.num_sge),
            flush_type: b.get(o.flush_type).copied().unwrap_or(0),
            flush_level: b.get(o.flush_level).copied().unwrap_or(0),
        }
    }

    /// Writes the fixed part of a send WQE (the kernel's own rings), as `parse` reads it; `ud`
    /// selects the datagram fields of the union.
    pub(crate) fn write(&self, b: &mut [u8], ud: bool) {
        let o = &SEND_OFF;
        let atomic = is_atomic(self.opcode);
        put(b, o.wr_id, &self.wr_id.to_ne_bytes());
        put(b, o.opcode, &self.opcode.to_ne_bytes());
        put(b, o.send_flags, &self.send_flags.to_ne_bytes());
        put(b, o.imm, &self.imm_data.to_ne_bytes());
        // The operation's part of the union: atomic, UD (an address handle) or RDMA.
        if atomic {
            put(b, o.atomic_addr, &self.remote_addr.to_ne_bytes());
            put(b, o.atomic_rkey, &self.rkey.to_ne_bytes());
            put(b, o.compare_add, &self.compare_add.to_ne_bytes());
            put(b, o.swap, &self.swap.to_ne_bytes());
        } else if ud {
            put(b, o.remote_qpn, &self.remote_qpn.to_ne_bytes());
            put(b, o.remote_qkey, &self.remote_qkey.to_ne_bytes());
            put(b, o.ah_num, &self.ah_num.to_ne_bytes());
        } else {
            put(b, o.rdma_addr, &self.remote_addr.to_ne_bytes());
            put(b, o.rdma_rkey, &self.rkey.to_ne_bytes());
        }
        put(b, o.length, &self.length.to_ne_bytes());
        put(b, o.num_sge, &self.num_sge.to_ne_bytes());
    }
}

/// The fields of a memory window bind WQE (`wr.mw` of `struct rxe_send_wqe`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Bind {
    /// Start of the window in the MR's iova space.
    pub(crate) addr: u64,
    /// Length; 0 unbinds a type 1 window.
    pub(crate) length: u64,
    /// The MR's key.
    pub(crate) mr_lkey: u32,
    /// The window's key (its index selects the window).
    pub(crate) mw_rkey: u32,
    /// The new key; its low byte becomes the window's key byte.
    pub(crate) rkey: u32,
    /// `IB_ACCESS_*` rights and `IB_ZERO_BASED`.
    pub(crate) access: u32,
}

impl Bind {
    const MW: usize = offset_of!(bindings::rxe_send_wqe, wr)
        + offset_of!(bindings::rxe_send_wr, wr)
        + offset_of!(bindings::rxe_send_wr__bindgen_ty_2, mw);

    /// Parses the bind fields of a send WQE.
    pub(crate) fn parse(b: &[u8]) -> Self {
        type M = bindings::rxe_send_wr__bindgen_ty_2__bindgen_ty_5;
        Self {
            addr: u64_at(b, Self::MW + offset_of!(M, addr)),
            length: u64_at(b, Self::MW + offset_of!(M, length)),
            mr_lkey: u32_at(b, Self::MW + offset_of!(M, mr_lkey)),
            mw_rkey: u32_at(b, Self::MW + offset_of!(M, mw_rkey)),
            rkey: u32_at(b, Self::MW + offset_of!(M, rkey)),
            access: u32_at(b, Self::MW + offset_of!(M, access)),
        }
    }
}

/// The address vector in a kernel consumer's UD send WQE (rxe's `wr.ud.av`, which rxe's kernel
/// path fills the same way): user WQEs name an AH by number instead and are never read this way.
/// The source GID's 16 bytes are kept at the start of `sgid_addr`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Av {
    /// Destination GID.
    pub(crate) dgid: [u8; 16],
    /// Source GID.
    pub(crate) sgid: [u8; 16],
    /// Hop limit.
    pub(crate) hop_limit: u8,
    /// Traffic class.
    pub(crate) tclass: u8,
}

impl Av {
    const AV: usize = offset_of!(bindings::rxe_send_wqe, wr)
        + offset_of!(bindings::rxe_send_wr, wr)
        + offset_of!(bindings::rxe_send_wr__bindgen_ty_2, ud)
        + offset_of!(bindings::rxe_send_wr__bindgen_ty_2__bindgen_ty_4, av);
    const GRH: usize = Self::AV + offset_of!(bindings::rxe_av, grh);
    const DGID: usize = Self::GRH + offset_of!(bindings::rxe_global_route, dgid);
    const HOP: usize = Self::GRH + offset_of!(bindings::rxe_global_route, hop_limit);
    const TCLASS: usize = Self::GRH + offset_of!(bindings::rxe_global_route, traffic_class);
    const SGID: usize = Self::AV + offset_of!(bindings::rxe_av, sgid_addr);

    /// Parses the address vector of a send WQE.
    pub(crate) fn parse(b: &[u8]) -> Self {
        let mut av = Self::default();
        if let Some(d) = b.get(Self::DGID..Self::DGID + 16) {
            av.dgid.copy_from_slice(d);
        }
        if let Some(d) = b.get(Self::SGID..Self::SGID + 16) {
            av.sgid.copy_from_slice(d);
        }
        av.hop_limit = b.get(Self::HOP).copied().unwrap_or(0);
        av.tclass = b.get(Self::TCLASS).copied().unwrap_or(0);
        av
    }

    /// Writes the address vector of a send WQE.
    pub(crate) fn write(&self, b: &mut [u8]) {
        put(b, Self::DGID, &self.dgid);
        put(b, Self::SGID, &self.sgid);
        put(b, Self::HOP, &[self.hop_limit]);
        put(b, Self::TCLASS, &[self.tclass]);
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
    const WR_ID: usize = offset_of!(bindings::rxe_recv_wqe, wr_id);
    const NUM_SGE: usize =
        offset_of!(bindings::rxe_recv_wqe, dma) + offset_of!(bindings::rxe_dma_info, num_sge);

    /// Parses the fixed part of a receive WQE.
    pub(crate) fn parse(b: &[u8]) -> Self {
        Self {
            wr_id: u64_at(b, Self::WR_ID),
            num_sge: u32_at(b, Self::NUM_SGE),
        }
    }

    /// Writes the fixed part of a receive WQE (the kernel's own rings).
    pub(crate) fn write(&self, b: &mut [u8]) {
        put(b, Self::WR_ID, &self.wr_id.to_ne_bytes());
        put(b, Self::NUM_SGE, &self.num_sge.to_ne_bytes());
    }
}

/// A work completion as written to a CQ ring (`struct ib_uverbs_wc`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Wc {
    /// Consumer's id.
    pub(crate) wr_id: u64,
    /// Status.
    pub(crate) status: WcStatus,
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
    /// Parses an entry (the kernel's own CQ rings).
    pub(crate) fn parse(b: &[u8]) -> Self {
        type W = bindings::ib_uverbs_wc;
        Self {
            wr_id: u64_at(b, offset_of!(W, wr_id)),
            status: WcStatus::from_raw(u32_at(b, offset_of!(W, status))),
            opcode: u32_at(b, offset_of!(W, opcode)),
            byte_len: u32_at(b, offset_of!(W, byte_len)),
            imm_data: u32_at(b, offset_of!(W, ex)),
            qp_num: u32_at(b, offset_of!(W, qp_num)),
            src_qp: u32_at(b, offset_of!(W, src_qp)),
            wc_flags: u32_at(b, offset_of!(W, wc_flags)),
            port_num: b.get(offset_of!(W, port_num)).copied().unwrap_or(0),
        }
    }

    /// Serialises the entry.
    pub(crate) fn to_bytes(self) -> [u8; CQE_SIZE] {
        type W = bindings::ib_uverbs_wc;
        let mut b = [0u8; CQE_SIZE];
        put(&mut b, offset_of!(W, wr_id), &self.wr_id.to_ne_bytes());
        put(
            &mut b,
            offset_of!(W, status),
            &(self.status as u32).to_ne_bytes(),
        );
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

#[kunit_tests(rodp_abi)]
mod tests {
    use super::*;

    #[test]
    fn bind_fields_sit_where_the_rxe_provider_writes_them() {
        // `struct rxe_send_wr`: wr_id, reserved, opcode, send_flags, ex, then the union, whose
        // `mw` member is addr, length, mr_lkey, mw_rkey, rkey, access (rdma_user_rxe.h).
        let mut b = [0u8; SEND_WQE_HEADER];
        b[24..32].copy_from_slice(&0x7000_1000u64.to_ne_bytes());
        b[32..40].copy_from_slice(&0x2000u64.to_ne_bytes());
        b[40..44].copy_from_slice(&0x105u32.to_ne_bytes());
        b[44..48].copy_from_slice(&0x80_0001u32.to_ne_bytes());
        b[48..52].copy_from_slice(&0x80_0002u32.to_ne_bytes());
        b[52..56].copy_from_slice(&0x22u32.to_ne_bytes());
        let m = Bind::parse(&b);
        assert_eq!((m.addr, m.length), (0x7000_1000, 0x2000));
        assert_eq!(
            (m.mr_lkey, m.mw_rkey, m.rkey, m.access),
            (0x105, 0x80_0001, 0x80_0002, 0x22)
        );
        // The invalidate key of LOCAL_INV and SEND_WITH_INV shares the immediate's place.
        b[20..24].copy_from_slice(&0x80_0003u32.to_ne_bytes());
        assert_eq!(SendWqe::parse(&b).imm_data, 0x80_0003);
    }

    #[test]
    fn flush_fields_sit_where_the_rxe_provider_writes_them() {
        // rdma-core's `wr_flush`: `wr.flush` = { remote_addr, length, rkey, type, level } after
        // the 24 bytes of id, opcode, flags and immediate; the length goes to `dma.length`.
        let mut b = [0u8; SEND_WQE_HEADER];
        b[12..16].copy_from_slice(&bindings::ib_wr_opcode_IB_WR_FLUSH.to_ne_bytes());
        b[24..32].copy_from_slice(&0x7000_2000u64.to_ne_bytes());
        b[32..36].copy_from_slice(&0x55u32.to_ne_bytes());
        b[36..40].copy_from_slice(&0x80_0004u32.to_ne_bytes());
        b[40] = 1;
        b[41] = 1;
        let w = SendWqe::parse(&b);
        assert_eq!((w.remote_addr, w.rkey), (0x7000_2000, 0x80_0004));
        assert_eq!((w.flush_type, w.flush_level), (1, 1));
        // Any other opcode reads its key at the RDMA place.
        b[12..16].copy_from_slice(&bindings::ib_wr_opcode_IB_WR_ATOMIC_WRITE.to_ne_bytes());
        assert_eq!(SendWqe::parse(&b).rkey, 0x55);
    }

    #[test]
    fn send_wqe_round_trips() {
        let mut b = [0u8; SEND_WQE_HEADER];
        let atomic = SendWqe {
            wr_id: 7,
            opcode: bindings::ib_wr_opcode_IB_WR_ATOMIC_CMP_AND_SWP,
            send_flags: 2,
            remote_addr: 0x1000,
            rkey: 0x123,
            compare_add: 0x0102_0304_0506_0708,
            swap: 9,
            length: 8,
            num_sge: 1,
            ..Default::default()
        };
        atomic.write(&mut b, false);
        let p = SendWqe::parse(&b);
        assert_eq!((p.wr_id, p.opcode, p.send_flags), (7, atomic.opcode, 2));
        assert_eq!((p.remote_addr, p.rkey), (0x1000, 0x123));
        assert_eq!(
            (p.compare_add, p.swap, p.length, p.num_sge),
            (atomic.compare_add, 9, 8, 1)
        );
        let mut b = [0u8; SEND_WQE_HEADER];
        let ud = SendWqe {
            opcode: bindings::ib_wr_opcode_IB_WR_SEND,
            remote_qpn: 1,
            remote_qkey: 0x8001_0000,
            // A kernel WQE names no AH (it carries the address).
            ah_num: 0,
            ..Default::default()
        };
        ud.write(&mut b, true);
        let p = SendWqe::parse(&b);
        assert_eq!((p.remote_qpn, p.remote_qkey, p.ah_num), (1, 0x8001_0000, 0));
        let av = Av {
            dgid: [1; 16],
            sgid: [2; 16],
            hop_limit: 64,
            tclass: 3,
        };
        av.write(&mut b);
        let q = Av::parse(&b);
        assert_eq!(
            (q.dgid, q.sgid, q.hop_limit, q.tclass),
            (av.dgid, av.sgid, 64, 3)
        );
        // The address vector leaves the WQE's other fields alone.
        assert_eq!(SendWqe::parse(&b).remote_qkey, 0x8001_0000);
        let mut r = [0u8; RECV_WQE_HEADER + SGE_SIZE];
        RecvWqe {
            wr_id: 3,
            num_sge: 1,
        }
        .write(&mut r);
        let sge = Sge {
            addr: 0xffff_8880_0000_1000,
            length: 256,
            lkey: 0x100,
        };
        sge.write(&mut r, RECV_WQE_HEADER, 0);
        let w = RecvWqe::parse(&r);
        let s = Sge::parse(&r, RECV_WQE_HEADER, 0);
        assert_eq!((w.wr_id, w.num_sge), (3, 1));
        assert_eq!((s.addr, s.length, s.lkey), (sge.addr, 256, 0x100));
    }

    #[test]
    fn wc_round_trips() {
        let wc = Wc {
            wr_id: 1,
            status: WcStatus::LocProtErr,
            opcode: 128,
            byte_len: 296,
            imm_data: 0x1234,
            qp_num: 1,
            src_qp: 1,
            wc_flags: 1,
            port_num: 1,
        };
        let p = Wc::parse(&wc.to_bytes());
        assert_eq!(
            (p.wr_id, p.status, p.opcode, p.byte_len),
            (1, WcStatus::LocProtErr, 128, 296)
        );
        assert_eq!(
            (p.imm_data, p.qp_num, p.src_qp, p.wc_flags, p.port_num),
            (0x1234, 1, 1, 1, 1)
        );
    }
}
