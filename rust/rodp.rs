// SPDX-License-Identifier: GPL-2.0

//! rodp: a software RDMA device in Rust with complete On-Demand Paging.
//!
//! See `Documentation/rodp.rst`. Layers, top to bottom: module and device (`device`), verbs
//! objects (`pd`, `ucontext`), and the FFI layer over ib_core (`ib`).

mod bindings;
mod device;
mod ib;
mod limit;
mod pd;
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
#[pin_data]
struct RodpModule {
    #[pin]
    link: ib::link::Registration<device::Rodp>,
}

impl kernel::InPlaceModule for RodpModule {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        try_pin_init!(Self { link <- ib::link::Registration::new() })
    }
}
