// SPDX-License-Identifier: GPL-2.0

//! rodp: a software RDMA device in Rust with complete On-Demand Paging.
//!
//! See `Documentation/rodp.rst`. Layers, top to bottom: module and device (`device`), verbs
//! objects, keys, the engine, memory (`odp`, `mem`), statistics, and the binding layer over
//! ib_core (`ib`); `Documentation/design.rst` has the map.

// The binding layer is the only place for `unsafe`; the compiler keeps it so.
#![deny(unsafe_code)]

mod ah;
mod cq;
mod device;
mod engine;
mod gate;
#[expect(unsafe_code, reason = "the binding layer wraps the C APIs")]
mod ib;
mod keys;
mod limit;
mod mcast;
mod mem;
mod mr;
mod mw;
mod odp;
mod pd;
mod qp;
mod queue;
mod srq;
mod stats;
mod table;
mod ucontext;
mod xmw;

use kernel::prelude::*;

module! {
    type: RodpModule,
    name: "rodp",
    authors: ["The rodp developers"],
    description: "Software RDMA device with On-Demand Paging",
    license: "GPL",
    alias: ["rdma-link-rodp"],
    params: {
        max_pd: u32 {
            default: 65536,
            description: "Protection domains per device, 1 to 65536 (default 65536)",
        },
    },
}

/// The module: the `rodp` link type, alive from load to unload.
///
/// Fields drop in order: the link registration removes every device (and so every QP and every
/// UDP tunnel) before the namespace exit callback goes and the workqueue the engine runs on is
/// drained and destroyed.
#[pin_data]
struct RodpModule {
    #[pin]
    link: ib::link::Registration<device::Rodp>,
    #[pin]
    _pernet: ib::udp::Pernet,
    _wq: ib::wq::ModuleQueue,
    _debugfs: ib::debugfs::Root,
}

impl kernel::InPlaceModule for RodpModule {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            // A parameter out of range fails the load, not each device's creation later.
            _debugfs: {
                device::max_pd()?;
                ib::debugfs::Root::new()
            },
            _wq: ib::wq::ModuleQueue::new()?,
            _pernet <- ib::udp::Pernet::new(),
            link <- ib::link::Registration::new(),
        })
    }
}
