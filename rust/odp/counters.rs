// SPDX-License-Identifier: GPL-2.0

//! ODP event counts, per MR and per device (the roles of mlx5's `odp_stats` and OFED's
//! `odp_stats/`); shown by `crate::stats` and per MR through rdma netlink.

use kernel::{
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
};

/// ODP event counts, per MR and per device.
pub(crate) struct OdpCounters {
    /// Faults resolved (one per access or prefetch that had to map pages).
    pub(crate) faults: Atomic<u64>,
    /// Pages those faults made usable.
    pub(crate) fault_pages: Atomic<u64>,
    /// Invalidation callbacks that covered the MR.
    pub(crate) invalidations: Atomic<u64>,
    /// Mapped pages those callbacks took away.
    pub(crate) invalidation_pages: Atomic<u64>,
    /// Prefetch requests handled.
    pub(crate) prefetches: Atomic<u64>,
    /// Pages of prefetched ranges mapped when their prefetch finished.
    pub(crate) prefetch_pages: Atomic<u64>,
    /// Accesses that found their pages invalidated between faulting and copying.
    pub(crate) contentions: Atomic<u64>,
    /// Faults that failed (unmapped or read-only memory).
    pub(crate) failed: Atomic<u64>,
    /// Pages mapped for the device now.
    pub(crate) mapped: Atomic<u64>,
    /// ODP MRs registered now (device totals).
    pub(crate) mrs: Atomic<u64>,
    /// Device accesses and prefetches whose key named no MR (device totals).
    pub(crate) mrs_not_found: Atomic<u64>,
}

impl OdpCounters {
    /// All zero.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Ok(Arc::new(
            Self {
                faults: Atomic::new(0),
                fault_pages: Atomic::new(0),
                invalidations: Atomic::new(0),
                invalidation_pages: Atomic::new(0),
                prefetches: Atomic::new(0),
                prefetch_pages: Atomic::new(0),
                contentions: Atomic::new(0),
                failed: Atomic::new(0),
                mapped: Atomic::new(0),
                mrs: Atomic::new(0),
                mrs_not_found: Atomic::new(0),
            },
            GFP_KERNEL,
        )?)
    }
}

/// An MR's counters and its device's totals, counted together.
#[derive(Clone)]
pub(crate) struct CounterSets {
    /// The MR's own (shown per MR through rdma netlink).
    pub(crate) mr: Arc<OdpCounters>,
    /// The device's totals.
    pub(crate) dev: Arc<OdpCounters>,
}

impl CounterSets {
    /// Adds `n` to `field` of both sets.
    pub(super) fn add(&self, field: impl Fn(&OdpCounters) -> &Atomic<u64>, n: u64) {
        field(&self.mr).fetch_add(n, Relaxed);
        field(&self.dev).fetch_add(n, Relaxed);
    }

    /// Subtracts `n` from `field` of both sets.
    pub(super) fn sub(&self, field: impl Fn(&OdpCounters) -> &Atomic<u64>, n: u64) {
        field(&self.mr).fetch_sub(n, Relaxed);
        field(&self.dev).fetch_sub(n, Relaxed);
    }
}
