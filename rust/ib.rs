// SPDX-License-Identifier: GPL-2.0

//! The FFI layer: safe wrappers over ib_core (`include/rdma/ib_verbs.h`, `rdma_netlink.h`).
//!
//! This is the only part of rodp that touches the generated bindings. Everything above it works
//! with the safe types defined here.

pub(crate) mod device;
pub(crate) mod link;
pub(crate) mod mmap;
pub(crate) mod netdev;
pub(crate) mod object;

pub(crate) use device::{Device, DeviceAttr, Driver, PortAttr};
pub(crate) use netdev::NetDev;
