// SPDX-License-Identifier: GPL-2.0

//! Address handles (rxe's `rxe_av.c`, `rxe_create_ah`): where UD sends go. The number returned
//! to user space (`ah_num`) is what the provider puts in each UD send WQE.

use crate::{
    device::{Device, Pd},
    ib::{abi, udata::Udata, verbs::Route},
    keys::Tables,
    limit::Token,
};
use kernel::{prelude::*, sync::Arc};

/// Maximum number of AHs per device (as rxe: 32 Ki - 1).
pub(crate) const MAX_AH: u32 = (1 << 15) - 1;

/// An AH as the engine sees it.
pub(crate) struct AhShared {
    /// Number in the device's table.
    pub(crate) num: u32,
    /// The PD the AH was created in.
    pub(crate) pd: u64,
    /// Destination and source GID index.
    pub(crate) route: Route,
    /// The source GID (at `route.sgid_index` when the AH was created).
    pub(crate) sgid: [u8; 16],
}

/// The driver data of an AH.
pub(crate) struct Ah {
    /// The number in the device's table; 0 for a kernel consumer's AH, which is not listed:
    /// its sends carry the address itself (see [`Ah::kernel_av`]).
    num: u32,
    /// A kernel consumer's AH.
    kernel: Option<AhShared>,
    tables: Arc<Tables>,
    _token: Token,
}

impl Ah {
    /// Creates an AH for `route`; user AHs get their number in the response.
    pub(crate) fn new(
        dev: &Device,
        pd: &Pd,
        route: &Route,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<Self> {
        if route.port_num != 1 {
            return Err(EINVAL);
        }
        let sgid = dev.query_gid(route.sgid_index.into())?;
        let token = dev.ahs.take()?;
        let pd = pd.data().id;
        let route = *route;
        let Some(u) = udata else {
            // Kernel consumers may create AHs in atomic context (ib_cm does, under its
            // locks): nothing here allocates or sleeps.
            return Ok(Self {
                num: 0,
                kernel: Some(AhShared {
                    num: 0,
                    pd,
                    route,
                    sgid,
                }),
                tables: dev.tables.clone(),
                _token: token,
            });
        };
        let shared = dev.tables.ahs.insert(|num| {
            Ok(Arc::new(
                AhShared {
                    num,
                    pd,
                    route,
                    sgid,
                },
                GFP_KERNEL,
            )?)
        })?;
        let ah = Self {
            num: shared.num,
            kernel: None,
            tables: dev.tables.clone(),
            _token: token,
        };
        // Older providers pass no room for the number and build the address themselves.
        if u.outlen() >= abi::create_ah_resp(0).len() {
            u.write(&abi::create_ah_resp(ah.num))?;
        }
        Ok(ah)
    }
}

impl Ah {
    /// A kernel consumer's AH: the address its UD sends carry, and its PD.
    pub(crate) fn kernel_av(&self) -> Option<(abi::Av, u64)> {
        self.kernel.as_ref().map(|a| (a.av(), a.pd))
    }
}

impl AhShared {
    /// The address as a send WQE carries it.
    pub(crate) fn av(&self) -> abi::Av {
        abi::Av {
            dgid: self.route.dgid,
            sgid: self.sgid,
            hop_limit: self.route.hop_limit,
            tclass: self.route.traffic_class,
        }
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        if self.kernel.is_none() {
            self.tables.ahs.remove(self.num);
        }
    }
}
