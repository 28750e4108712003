// SPDX-License-Identifier: GPL-2.0

//! The FFI layer: safe wrappers over ib_core (`include/rdma/ib_verbs.h`, `rdma_netlink.h`).
//!
//! This is the only part of rodp that touches the generated bindings. Everything above it works
//! with the safe types defined here.

pub(crate) mod abi;
pub(crate) mod debugfs;
pub(crate) mod device;
pub(crate) mod event;
pub(crate) mod gid;
pub(crate) mod hw_stats;
pub(crate) mod kmem;
pub(crate) mod link;
pub(crate) mod mmap;
pub(crate) mod netdev;
pub(crate) mod object;
pub(crate) mod odp;
mod ops;
pub(crate) mod udata;
pub(crate) mod umem;
pub(crate) mod verbs;
pub(crate) mod wq;
pub(crate) mod xarray;

pub(crate) use device::{Device, DeviceAttr, Driver, PortAttr};
pub(crate) use netdev::NetDev;
