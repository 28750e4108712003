// SPDX-License-Identifier: GPL-2.0

//! The rodp device: `rdma link add`/`delete`, device and port attributes (rxe's `rxe.c`,
//! `rxe_net.c` and the query verbs of `rxe_verbs.c`).

use crate::{
    ib::{
        self,
        device::{BoundDevice, NewDevice},
        link::{self, Link},
        netdev::ib_mtu_for,
        object::UContext,
        DeviceAttr, NetDev, PortAttr,
    },
    limit::Limit,
    pd, ucontext,
};
use kernel::{
    prelude::*,
    sync::atomic::{Acquire, Atomic, Full},
    ModuleMetadata, ThisModule,
};

/// This module, the owner of every rodp device.
const MODULE: &ThisModule = &<crate::RodpModule as ModuleMetadata>::THIS_MODULE;

/// The in-tree soft-RoCE driver, which must never be loaded next to rodp (see
/// `Documentation/rodp.rst`): it claims every device with rodp's driver id as its own.
const RXE_MODULE: &CStr = c"rdma_rxe";

/// Number of GID entries per port: room for many addresses, small enough to read quickly.
pub(crate) const GID_TABLE_LEN: i32 = 128;

/// Largest message: 2 GiB, the IBA limit for a single message.
pub(crate) const MAX_MSG_SIZE: u32 = 1 << 31;

/// Maximum number of protection domains per device.
pub(crate) const MAX_PD: u32 = 1 << 16;

/// Number of rodp devices alive or being created; while nonzero, rdma_rxe may not load.
static DEVICES: Atomic<i32> = Atomic::new(0);

/// One unit of [`DEVICES`], held by each device, and by `newlink` from before its rdma_rxe
/// check: either the check sees rdma_rxe, or rdma_rxe's module notifier sees this unit.
struct Alive;

impl Alive {
    fn new() -> Self {
        DEVICES.fetch_add(1, Full);
        Self
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        DEVICES.fetch_sub(1, Full);
    }
}

/// The driver data of one rodp device.
pub(crate) struct Rodp {
    /// `sys_image_guid`, from the netdev's MAC address.
    guid_be: u64,
    /// Protection domains allocated, at most `MAX_PD`.
    pub(crate) pds: Limit,
    /// Keeps rdma_rxe out while this device exists.
    _alive: Alive,
}

/// A rodp device as ib_core's callbacks see it.
pub(crate) type Device = ib::Device<Rodp>;

impl Rodp {
    fn new(ndev: &NetDev, alive: Alive) -> Result<Self> {
        Ok(Self {
            guid_be: u64::from_ne_bytes(ndev.eui64()),
            pds: Limit::new(MAX_PD)?,
            _alive: alive,
        })
    }
}

#[vtable]
impl ib::Driver for Rodp {
    type UContext = ucontext::UContext;
    type Pd = pd::Pd;

    fn query_device(dev: &Device) -> DeviceAttr {
        // Only what works is reported: no QPs, CQs or MRs yet.
        DeviceAttr {
            sys_image_guid_be: dev.guid_be,
            vendor_id: 0xffffff,
            max_pd: MAX_PD,
            max_pkeys: 1,
            allow_user_unreg: true,
            ..Default::default()
        }
    }

    fn query_port(dev: &Device, _port: u32) -> Result<PortAttr> {
        let ndev = dev.netdev(1).ok_or(ENODEV)?;
        let mtu = ndev.mtu();
        Ok(PortAttr {
            active: ndev.is_active(),
            link_up: ndev.is_up(),
            max_mtu: ib_mtu_for(u32::MAX),
            active_mtu: ib_mtu_for(mtu),
            phys_mtu: mtu,
            gid_tbl_len: GID_TABLE_LEN,
            max_msg_sz: MAX_MSG_SIZE,
            pkey_tbl_len: 1,
        })
    }

    fn alloc_ucontext(dev: &Device) -> Result<ucontext::UContext> {
        ucontext::UContext::new(dev)
    }

    fn alloc_pd(dev: &Device, _ctx: Option<&UContext<Rodp>>) -> Result<pd::Pd> {
        pd::Pd::new(dev)
    }
}

impl Link for Rodp {
    const TYPE: &'static CStr = c"rodp";

    fn newlink(name: &CStr, ndev: &NetDev) -> Result {
        let alive = Alive::new();
        if link::module_loaded(RXE_MODULE) {
            pr_err!("{RXE_MODULE:?} is loaded: refusing to create {name:?}; unload it first\n");
            return Err(EBUSY);
        }
        if ndev.is_vlan() {
            pr_err!(
                "{name:?}: create it on the real device under {:?}\n",
                ndev.name()
            );
            return Err(EPERM);
        }
        if let Some(dev) = BoundDevice::on(ndev) {
            return Err(if dev.is_owned_by(MODULE) {
                pr_err!("{:?} already has a rodp device\n", ndev.name());
                EEXIST
            } else {
                pr_err!("{:?} already has an rxe device\n", ndev.name());
                EBUSY
            });
        }
        let new = NewDevice {
            name,
            netdev: ndev,
            node_desc: c"rodp",
            owner: MODULE,
        };
        ib::Device::<Rodp>::register(&new, Rodp::new(ndev, alive)).map_err(|e| {
            // ib_core says ENFILE when the name is taken (nldev rejects the '%' patterns that
            // could also run out of numbers); EEXIST says what happened.
            if e == ENFILE {
                pr_err!("an RDMA device called {name:?} exists already\n");
                EEXIST
            } else {
                e
            }
        })
    }

    fn netdev_unregister(ndev: &NetDev) {
        // ib_core holds a reference on the netdev until the device is gone.
        if let Some(dev) = BoundDevice::on(ndev).filter(|d| d.is_owned_by(MODULE)) {
            dev.unregister_queued();
        }
    }

    fn module_coming(name: &CStr) -> Result {
        if name == RXE_MODULE && DEVICES.load(Acquire) > 0 {
            pr_err!(
                "refusing to load {RXE_MODULE:?} while rodp devices exist: delete them first\n"
            );
            return Err(EBUSY);
        }
        Ok(())
    }

    fn teardown() {
        // rdma_rxe cannot load while rodp devices exist, so when it is loaded now every device
        // of the shared driver id is rxe's own and must be left alone.
        if !link::module_loaded(RXE_MODULE) {
            ib::device::unregister_all();
        }
    }
}
