// SPDX-License-Identifier: GPL-2.0

//! UD multicast (rxe's `rxe_mcast.c`): the QPs of a device attached to each group (by MGID).
//! The engine delivers a datagram sent to a group to every attached QP on every rodp device of
//! the host, the sender's own included when it is attached (as multicast loopback does).

use crate::engine::Gid;
use kernel::{new_mutex, prelude::*, sync::Mutex};

/// Multicast groups per device (as rxe).
pub(crate) const MAX_GROUPS: u32 = 8192;
/// QPs per group (as rxe).
pub(crate) const MAX_QP_ATTACH: u32 = 56;
/// Attachments per device.
pub(crate) const MAX_TOTAL_ATTACH: u32 = MAX_GROUPS * MAX_QP_ATTACH;

/// The QP number a UD send to a multicast group names.
pub(crate) const MULTICAST_QPN: u32 = 0xff_ffff;

struct Member {
    mgid: [u8; 16],
    qpn: u32,
}

struct State {
    members: KVec<Member>,
    /// Distinct groups among `members`.
    groups: u32,
}

impl State {
    fn in_group(&self, mgid: &[u8; 16]) -> u32 {
        self.members.iter().filter(|x| x.mgid == *mgid).count() as u32
    }

    fn remove(&mut self, i: usize) {
        let last = self.members.len() - 1;
        self.members.swap(i, last);
        if let Some(gone) = self.members.pop() {
            if self.in_group(&gone.mgid) == 0 {
                self.groups -= 1;
            }
        }
    }
}

/// A device's multicast attachments.
#[pin_data]
pub(crate) struct Groups {
    #[pin]
    state: Mutex<State>,
}

impl Groups {
    /// No attachments.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            state <- new_mutex!(State {
                members: KVec::new(),
                groups: 0,
            }),
        })
    }

    /// Attaches QP `qpn` to group `mgid`; attaching twice is not an error.
    pub(crate) fn attach(&self, mgid: &[u8; 16], qpn: u32) -> Result {
        if !Gid(*mgid).is_multicast() {
            return Err(EINVAL);
        }
        let mut s = self.state.lock();
        if s.members.iter().any(|x| x.mgid == *mgid && x.qpn == qpn) {
            return Ok(());
        }
        let in_group = s.in_group(mgid);
        if in_group >= MAX_QP_ATTACH
            || s.members.len() as u32 >= MAX_TOTAL_ATTACH
            || (in_group == 0 && s.groups >= MAX_GROUPS)
        {
            return Err(ENOMEM);
        }
        s.members.push(Member { mgid: *mgid, qpn }, GFP_KERNEL)?;
        if in_group == 0 {
            s.groups += 1;
        }
        Ok(())
    }

    /// Detaches QP `qpn` from group `mgid`; `EINVAL` if it is not attached.
    pub(crate) fn detach(&self, mgid: &[u8; 16], qpn: u32) -> Result {
        let mut s = self.state.lock();
        let i = s
            .members
            .iter()
            .position(|x| x.mgid == *mgid && x.qpn == qpn)
            .ok_or(EINVAL)?;
        s.remove(i);
        Ok(())
    }

    /// Detaches QP `qpn` from every group (the QP is being destroyed).
    pub(crate) fn detach_qp(&self, qpn: u32) {
        let mut s = self.state.lock();
        while let Some(i) = s.members.iter().position(|x| x.qpn == qpn) {
            s.remove(i);
        }
    }

    /// Appends the QPs attached to `mgid` to `out`.
    pub(crate) fn attached(&self, mgid: &[u8; 16], out: &mut KVec<u32>) -> Result {
        for x in self.state.lock().members.iter().filter(|x| x.mgid == *mgid) {
            out.push(x.qpn, GFP_KERNEL)?;
        }
        Ok(())
    }
}

#[kunit_tests(rodp_mcast)]
mod tests {
    use super::*;

    const G1: [u8; 16] = [0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 224, 0, 0, 1];
    const G2: [u8; 16] = [0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 224, 0, 0, 2];

    fn attached(g: &Groups, mgid: &[u8; 16]) -> Result<KVec<u32>> {
        let mut v = KVec::new();
        g.attached(mgid, &mut v)?;
        Ok(v)
    }

    #[test]
    fn attach_detach_and_limits() -> Result {
        let g = KBox::pin_init(Groups::new(), GFP_KERNEL)?;
        let mut unicast = G1;
        unicast[0] = 0xfe;
        assert_eq!(g.attach(&unicast, 16), Err(EINVAL));
        g.attach(&G1, 16)?;
        g.attach(&G1, 16)?;
        g.attach(&G1, 17)?;
        g.attach(&G2, 17)?;
        assert_eq!(attached(&g, &G1)?.len(), 2);
        assert_eq!(attached(&g, &G2)?.as_slice(), &[17]);
        g.detach(&G1, 16)?;
        assert_eq!(g.detach(&G1, 16), Err(EINVAL));
        g.detach_qp(17);
        assert!(attached(&g, &G1)?.is_empty() && attached(&g, &G2)?.is_empty());
        for q in 0..MAX_QP_ATTACH {
            g.attach(&G1, 100 + q)?;
        }
        assert_eq!(g.attach(&G1, 1), Err(ENOMEM));
        Ok(())
    }
}
