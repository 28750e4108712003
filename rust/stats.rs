// SPDX-License-Identifier: GPL-2.0

//! Device counters (rxe's `rxe_hw_counters.c`): one set of atomics per device, shown by
//! `rdma statistic show link DEV/1` and `/sys/class/infiniband/DEV/ports/1/hw_counters/`.
//!
//! rodp moves whole messages between local QPs; packet counts are what RoCE would carry for
//! the same messages: one per path MTU of payload, at least one per message.

use crate::{
    ib::{self, hw_stats::StatDesc},
    odp::OdpCounters,
};
use kernel::{
    debugfs::Scope,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
};

/// A counter.
#[derive(Clone, Copy)]
#[repr(usize)]
pub(crate) enum Counter {
    /// Packets sent by requesters.
    SentPkts,
    /// Packets accepted by responders.
    RcvdPkts,
    /// Payload bytes sent.
    SentBytes,
    /// Payload bytes accepted.
    RcvdBytes,
    /// RNR NAKs a requester received.
    RcvdRnrErr,
    /// RNR NAKs a responder sent.
    SendRnrErr,
    /// Transport retries exhausted.
    RetryExceededErr,
    /// RNR retries exhausted.
    RetryRnrExceededErr,
    /// Send WRs completed in error (other than flushes).
    SendErr,
    /// Messages a responder refused (NAKs).
    RcvdErr,
    /// RDMA reads, writes and atomics sent.
    RdmaSends,
    /// RDMA reads, writes and atomics served.
    RdmaRecvs,
    /// Messages an RC responder dropped because they did not come from its connected peer
    /// (another QP number or source GID than its `dest_qp_num` and route's `dgid`).
    RcvdPeerErr,
    /// RoCEv2 packets the device received from the network that no QP took (malformed, bad
    /// ICRC, not a UD SEND, no such QP, refused by it). After the ODP totals in [`NAMES`].
    RcvdDroppedPkts = ODP_FIRST + ODP_NAMES.len(),
    /// Duplicate requests an RC responder answered again (rxe's name).
    DuplicateRequest,
    /// Requests an RC responder received beyond the expected PSN (rxe's name).
    OutOfSeqRequest,
    /// Messages an RC requester sent again after its retransmission timer expired (rxe's
    /// name).
    CompleterRetryErr,
    /// Packets the device could not send to the network (no route, no memory for the packet,
    /// refused by the IP layer or the netdev's queue). Lost as on a network: a requester's timer
    /// sends them again, a peer asks again for a lost answer.
    SentDroppedPkts,
}

/// The names, in `Counter` order, with the ODP totals (see [`read_odp`]) between the first
/// counters and those added later (an index, once shown, never changes).
pub(crate) static NAMES: [StatDesc; 24] = [
    StatDesc::new(c"sent_pkts"),
    StatDesc::new(c"rcvd_pkts"),
    StatDesc::new(c"sent_bytes"),
    StatDesc::new(c"rcvd_bytes"),
    StatDesc::new(c"rcvd_rnr_err"),
    StatDesc::new(c"send_rnr_err"),
    StatDesc::new(c"retry_exceeded_err"),
    StatDesc::new(c"retry_rnr_exceeded_err"),
    StatDesc::new(c"send_err"),
    StatDesc::new(c"rcvd_err"),
    StatDesc::new(c"rdma_sends"),
    StatDesc::new(c"rdma_recvs"),
    StatDesc::new(c"rcvd_peer_err"),
    StatDesc::new(c"num_page_faults"),
    StatDesc::new(c"num_page_fault_pages"),
    StatDesc::new(c"num_invalidations"),
    StatDesc::new(c"num_invalidation_pages"),
    StatDesc::new(c"num_prefetches_handled"),
    StatDesc::new(c"invalidations_faults_contentions"),
    StatDesc::new(c"rcvd_dropped_pkts"),
    StatDesc::new(c"duplicate_request"),
    StatDesc::new(c"out_of_seq_request"),
    StatDesc::new(c"completer_retry_err"),
    StatDesc::new(c"sent_dropped_pkts"),
];

/// Index of the first ODP counter in [`NAMES`].
pub(crate) const ODP_FIRST: usize = 13;

/// The ODP totals of [`NAMES`], also the files of `<ibdev>/odp_stats/` in sysfs.
pub(crate) const ODP_NAMES: &[StatDesc] = NAMES.split_at(ODP_FIRST).1.split_at(6).0;

/// Copies a device's ODP totals into their places in `out` (`NAMES` order).
pub(crate) fn read_odp(c: &OdpCounters, out: &mut [u64]) {
    let v = [
        &c.faults,
        &c.fault_pages,
        &c.invalidations,
        &c.invalidation_pages,
        &c.prefetches,
        &c.contentions,
    ];
    for (o, a) in out.iter_mut().skip(ODP_FIRST).zip(v) {
        *o = a.load(Relaxed);
    }
}

/// A device's debugfs view of its ODP state, `<debugfs>/rodp/<ibdev>/odp_stats/`:
/// `num_failed_resolutions`, `num_mrs_not_found`, `num_odp_mr_pages` (pages mapped for the
/// device now) and `num_odp_mrs` (ODP MRs registered now), the names of the earlier Mellanox
/// OFED stack.
pub(crate) fn debugfs(
    name: &CStr,
    odp: Arc<OdpCounters>,
) -> Result<Pin<KBox<Scope<Arc<OdpCounters>>>>> {
    ib::debugfs::device_dir(name, odp, |c, dir| {
        let d = dir.dir(c"odp_stats");
        d.read_callback_file(c"num_failed_resolutions", &c.failed, &show);
        d.read_callback_file(c"num_mrs_not_found", &c.mrs_not_found, &show);
        d.read_callback_file(c"num_odp_mr_pages", &c.mapped, &show);
        d.read_callback_file(c"num_odp_mrs", &c.mrs, &show);
    })
}

/// Prints a counter as a debugfs file's contents.
fn show(v: &Atomic<u64>, f: &mut kernel::fmt::Formatter<'_>) -> kernel::fmt::Result {
    writeln!(f, "{}", v.load(Relaxed))
}

/// The counters of one device, indexed like [`NAMES`] (the ODP totals' slots unused).
pub(crate) struct Stats([Atomic<u64>; NAMES.len()]);

impl Stats {
    /// All zero.
    pub(crate) fn new() -> Self {
        Self([const { Atomic::new(0) }; NAMES.len()])
    }

    /// Adds `n` to counter `c`.
    pub(crate) fn add(&self, c: Counter, n: u64) {
        self.0[c as usize].fetch_add(n, Relaxed);
    }

    /// Adds one to counter `c`.
    pub(crate) fn inc(&self, c: Counter) {
        self.add(c, 1);
    }

    /// Copies the values out, in `NAMES` order (zero in the ODP totals' places).
    pub(crate) fn read(&self, out: &mut [u64]) {
        for (o, v) in out.iter_mut().zip(self.0.iter()) {
            *o = v.load(Relaxed);
        }
    }
}

/// Packets RoCE would use for `len` bytes at an MTU of `mtu` bytes.
pub(crate) fn packets(len: usize, mtu: u32) -> u64 {
    (len.div_ceil(mtu.max(256) as usize)).max(1) as u64
}

#[kunit_tests(rodp_stats)]
mod tests {
    use super::*;

    #[test]
    fn packets_follow_the_mtu() {
        assert_eq!(packets(0, 1024), 1);
        assert_eq!(packets(1, 1024), 1);
        assert_eq!(packets(1024, 1024), 1);
        assert_eq!(packets(1025, 1024), 2);
        assert_eq!(packets(65536, 4096), 16);
    }

    #[test]
    fn counters_add_up_in_name_order() {
        let s = Stats::new();
        s.inc(Counter::SentPkts);
        s.add(Counter::RdmaRecvs, 5);
        s.add(Counter::RcvdDroppedPkts, 3);
        s.add(Counter::SentDroppedPkts, 2);
        let mut out = [0u64; NAMES.len()];
        s.read(&mut out);
        assert_eq!(out[0], 1);
        assert_eq!(out[11], 5);
        assert_eq!(out[19], 3);
        assert_eq!(out[23], 2);
        assert_eq!(out.iter().sum::<u64>(), 11);
        assert_eq!(NAMES.len(), out.len());
    }

    #[test]
    fn odp_totals_follow_the_message_counters() -> Result {
        let c = OdpCounters::new()?;
        c.fault_pages.store(64, Relaxed);
        c.contentions.store(1, Relaxed);
        let mut out = [7u64; NAMES.len()];
        read_odp(&c, &mut out);
        assert_eq!(out[12], 7);
        assert_eq!(&out[ODP_FIRST..ODP_FIRST + 6], &[0, 64, 0, 0, 0, 1]);
        assert_eq!(out[19], 7);
        assert_eq!(ODP_NAMES.len(), 6);
        Ok(())
    }
}
