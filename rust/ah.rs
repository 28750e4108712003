// SPDX-License-Identifier: GPL-2.0

//! Address handles (rxe's `rxe_av.c`, `rxe_create_ah`): where UD sends go. The number returned
//! to user space (`ah_num`) is what the provider puts in each UD send WQE.

use crate::{
    device::{Device, Pd, Tables},
    ib::{abi, udata::Udata, verbs::Route},
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
    num: u32,
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
            tables: dev.tables.clone(),
            _token: token,
        };
        if let Some(u) = udata {
            // Older providers pass no room for the number and build the address themselves.
            if u.outlen() >= abi::create_ah_resp(0).len() {
                u.write(&abi::create_ah_resp(ah.num))?;
            }
        }
        Ok(ah)
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        self.tables.ahs.remove(self.num);
    }
}
