// SPDX-License-Identifier: GPL-2.0

//! The binding layer: safe wrappers over ib_core (`include/rdma/ib_verbs.h`, `rdma_netlink.h`)
//! and the kernel C APIs rodp needs that the kernel crate does not wrap, with no rodp policy.
//!
//! This is the only part of rodp that touches the generated bindings, and the only one allowed
//! `unsafe`: `bindings` is private to it, and the crate root denies `unsafe_code` in every
//! other module. Everything above it works with the safe types defined here.

pub(crate) mod abi;
mod bindings;
pub(crate) mod crc;
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
pub(crate) mod random;
pub(crate) mod uapi;
pub(crate) mod udata;
pub(crate) mod udp;
pub(crate) mod umem;
pub(crate) mod verbs;
pub(crate) mod wq;
pub(crate) mod xarray;

pub(crate) use device::{Device, DeviceAttr, Driver, PortAttr};
pub(crate) use netdev::NetDev;
