// SPDX-License-Identifier: GPL-2.0

//! rodp: a software RDMA device in Rust with complete On-Demand Paging.
//!
//! See `Documentation/rodp.rst`. Layers, top to bottom: module and device (`device`), verbs
//! objects (`pd`, `ucontext`), and the FFI layer over ib_core (`ib`).

#[deny(unsafe_code)]
mod ah;
#[deny(unsafe_code)]
mod cq;
#[deny(unsafe_code)]
mod device;
#[deny(unsafe_code)]
mod engine;
mod ib;
#[deny(unsafe_code)]
mod keys;
#[deny(unsafe_code)]
mod limit;
#[deny(unsafe_code)]
mod mcast;
#[deny(unsafe_code)]
mod mem;
#[deny(unsafe_code)]
mod mr;
#[deny(unsafe_code)]
mod mw;
#[deny(unsafe_code)]
mod odp;
#[deny(unsafe_code)]
mod pd;
#[deny(unsafe_code)]
mod qp;
#[deny(unsafe_code)]
mod queue;
#[deny(unsafe_code)]
mod srq;
#[deny(unsafe_code)]
mod stats;
#[deny(unsafe_code)]
mod table;
#[deny(unsafe_code)]
mod ucontext;

use kernel::prelude::*;

module! {
    type: RodpModule,
    name: "rodp",
    authors: ["The rodp developers"],
    description: "Software RDMA device with On-Demand Paging",
    license: "GPL",
    alias: ["rdma-link-rodp"],
}

/// The module: the `rodp` link type, alive from load to unload.
///
/// Fields drop in order: the link registration removes every device (and so every QP) before
/// the workqueue the engine runs on is drained and destroyed.
#[pin_data]
struct RodpModule {
    #[pin]
    link: ib::link::Registration<device::Rodp>,
    _wq: ib::wq::ModuleQueue,
    _debugfs: ib::debugfs::Root,
}

impl kernel::InPlaceModule for RodpModule {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            _debugfs: ib::debugfs::Root::new(),
            _wq: ib::wq::ModuleQueue::new()?,
            link <- ib::link::Registration::new(),
        })
    }
}
