// SPDX-License-Identifier: GPL-2.0

//! UD multicast (rxe's `rxe_mcast.c`): the QPs of a device attached to each group (by MGID).
//! The engine delivers a datagram sent to a group to every attached QP on every rodp device of
//! the host, the sender's own included when it is attached (as multicast loopback does).

use crate::engine::Gid;
use kernel::{
    new_mutex,
    prelude::*,
    rbtree::{RBTree, RBTreeNode, RBTreeNodeReservation},
    sync::Mutex,
    task::Kuid,
};

/// Multicast groups per device (as rxe).
pub(crate) const MAX_GROUPS: u32 = 8192;
/// QPs per group (as rxe).
pub(crate) const MAX_QP_ATTACH: u32 = 56;
/// Attachments per device.
pub(crate) const MAX_TOTAL_ATTACH: u32 = MAX_GROUPS * MAX_QP_ATTACH;
/// Attachments one user (other than root) may hold on a device: so many users are needed to
/// take all of the device's groups.
pub(crate) const MAX_USER_ATTACH: u32 = 1024;
/// Places in one group a user (other than root) may hold: another user can always join.
pub(crate) const MAX_USER_QP_ATTACH: u32 = MAX_QP_ATTACH / 2;

/// The QP number a UD send to a multicast group names.
pub(crate) const MULTICAST_QPN: u32 = 0xff_ffff;

/// Whom an attachment is charged to: the caller's effective UID (its kernel value, the same in
/// every user namespace). Root, and kernel consumers attaching from kernel threads, meet the
/// device's limits only.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct User(u32);

impl User {
    /// The user the current task acts as.
    fn current() -> Self {
        Self(Kuid::current_euid().into_raw().val)
    }

    fn capped(self) -> bool {
        self.0 != 0
    }
}

/// A QP attached to a group.
#[derive(Clone, Copy)]
struct Member {
    qpn: u32,
    user: User,
}

/// One device's attachments, indexed both ways so that no operation walks them all.
struct State {
    /// The groups with their members (at most [`MAX_QP_ATTACH`], room for all allocated when
    /// the group appears).
    groups: RBTree<[u8; 16], KVec<Member>>,
    /// Every attachment by QP then group, with the user it is charged to: a destroyed QP's
    /// attachments are found without visiting the others'.
    by_qp: RBTree<(u32, [u8; 16]), User>,
    /// Attachments per user holding any.
    users: RBTree<User, u32>,
    /// Entries of `groups`.
    num_groups: u32,
    /// Entries of `by_qp`.
    total: u32,
}

impl State {
    /// Removes QP `qpn` from group `mgid` and refunds `user` (the attachment has left
    /// `by_qp`); whether the group went with it.
    fn unlink(&mut self, mgid: &[u8; 16], qpn: u32, user: User) -> bool {
        let mut gone = false;
        if let Some(members) = self.groups.get_mut(mgid) {
            if let Some(i) = members.iter().position(|m| m.qpn == qpn) {
                let last = members.len() - 1;
                members.swap(i, last);
                members.pop();
            }
            if members.is_empty() {
                self.groups.remove(mgid);
                self.num_groups -= 1;
                gone = true;
            }
        }
        if let Some(n) = self.users.get_mut(&user) {
            *n -= 1;
            if *n == 0 {
                self.users.remove(&user);
            }
        }
        self.total -= 1;
        gone
    }
}

/// A device's multicast attachments.
///
/// The lock is the device's, held for a lookup and a copy of at most [`MAX_QP_ATTACH`] QP
/// numbers on a send, and for logarithmic steps (per attachment of the QP, on its destruction)
/// otherwise; nothing allocates under it.
///
/// A group's first attachment and its last detachment call the caller's `join` and `leave`
/// (the netdev's IP membership, which takes RTNL) under a second lock, `joined`, which
/// serializes attaching and detaching and is never taken on the data path: memberships follow
/// the groups in order while sends and receipts wait for nothing but `state`. A group whose
/// join failed (no IPv4 or IPv6 on the netdev) still works on this host, and is not left.
#[pin_data]
pub(crate) struct Groups {
    #[pin]
    state: Mutex<State>,
    /// The groups whose join succeeded (taken before `state`).
    #[pin]
    joined: Mutex<RBTree<[u8; 16], ()>>,
}

impl Groups {
    /// No attachments.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            state <- new_mutex!(State {
                groups: RBTree::new(),
                by_qp: RBTree::new(),
                users: RBTree::new(),
                num_groups: 0,
                total: 0,
            }),
            joined <- new_mutex!(RBTree::new()),
        })
    }

    /// Attaches QP `qpn` to group `mgid` for the calling user; attaching twice is not an
    /// error. `ENOMEM` past a limit (as rxe). When the group is new, `join` runs after it
    /// appeared; its failure leaves the group to this host.
    pub(crate) fn attach(
        &self,
        mgid: &[u8; 16],
        qpn: u32,
        join: impl FnOnce(&[u8; 16]) -> Result,
    ) -> Result {
        self.attach_as(mgid, qpn, User::current(), join)
    }

    fn attach_as(
        &self,
        mgid: &[u8; 16],
        qpn: u32,
        user: User,
        join: impl FnOnce(&[u8; 16]) -> Result,
    ) -> Result {
        if !Gid(*mgid).is_multicast() {
            return Err(EINVAL);
        }
        let joined_node = RBTreeNodeReservation::new(GFP_KERNEL)?;
        let mut joined = self.joined.lock();
        if self.link(mgid, qpn, user)? && join(mgid).is_ok() {
            joined.insert(joined_node.into_node(*mgid, ()));
        }
        Ok(())
    }

    /// Records the attachment; whether the group is new.
    fn link(&self, mgid: &[u8; 16], qpn: u32, user: User) -> Result<bool> {
        // Everything an attachment may need, allocated before locking (and dropped after
        // unlocking when not needed).
        let qp_node = RBTreeNode::new((qpn, *mgid), user, GFP_KERNEL)?;
        let user_node = RBTreeNodeReservation::new(GFP_KERNEL)?;
        let group_node = RBTreeNodeReservation::new(GFP_KERNEL)?;
        let mut members = KVec::with_capacity(MAX_QP_ATTACH as usize, GFP_KERNEL)?;
        let mut s = self.state.lock();
        if s.by_qp.get(&(qpn, *mgid)).is_some() {
            return Ok(false);
        }
        let group = s.groups.get(mgid);
        let in_group = group.map_or(0, |g| g.len() as u32);
        let mine_in_group = group.map_or(0, |g| g.iter().filter(|m| m.user == user).count());
        let mine = s.users.get(&user).copied().unwrap_or(0);
        if in_group >= MAX_QP_ATTACH
            || s.total >= MAX_TOTAL_ATTACH
            || (in_group == 0 && s.num_groups >= MAX_GROUPS)
            || (user.capped()
                && (mine >= MAX_USER_ATTACH || mine_in_group as u32 >= MAX_USER_QP_ATTACH))
        {
            return Err(ENOMEM);
        }
        let member = Member { qpn, user };
        let new = match s.groups.get_mut(mgid) {
            // Room for `MAX_QP_ATTACH` was allocated with the group: this does not allocate.
            Some(g) => {
                g.push_within_capacity(member).map_err(|_| ENOMEM)?;
                false
            }
            None => {
                members.push_within_capacity(member).map_err(|_| ENOMEM)?;
                s.groups.insert(group_node.into_node(*mgid, members));
                s.num_groups += 1;
                true
            }
        };
        match s.users.get_mut(&user) {
            Some(n) => *n += 1,
            None => {
                s.users.insert(user_node.into_node(user, 1));
            }
        }
        s.by_qp.insert(qp_node);
        s.total += 1;
        Ok(new)
    }

    /// Detaches QP `qpn` from group `mgid`; `EINVAL` if it is not attached. `leave` runs when
    /// the group, joined, loses its last member.
    pub(crate) fn detach(
        &self,
        mgid: &[u8; 16],
        qpn: u32,
        leave: impl FnOnce(&[u8; 16]),
    ) -> Result {
        let mut joined = self.joined.lock();
        let gone = {
            let mut s = self.state.lock();
            let user = s.by_qp.remove(&(qpn, *mgid)).ok_or(EINVAL)?;
            s.unlink(mgid, qpn, user)
        };
        if gone && joined.remove(mgid).is_some() {
            leave(mgid);
        }
        Ok(())
    }

    /// Detaches QP `qpn` from every group (the QP is being destroyed), with `leave` as for
    /// [`Groups::detach`] (`state` is taken for one attachment at a time).
    pub(crate) fn detach_qp(&self, qpn: u32, mut leave: impl FnMut(&[u8; 16])) {
        let mut joined = self.joined.lock();
        loop {
            let (mgid, gone) = {
                let mut s = self.state.lock();
                let Some(cursor) = s.by_qp.cursor_lower_bound_mut(&(qpn, [0; 16])) else {
                    return;
                };
                let (&(n, mgid), &user) = cursor.current();
                if n != qpn {
                    return;
                }
                cursor.remove_current();
                (mgid, s.unlink(&mgid, qpn, user))
            };
            if gone && joined.remove(&mgid).is_some() {
                leave(&mgid);
            }
        }
    }

    /// Appends the QPs attached to `mgid` to `out`.
    pub(crate) fn attached(&self, mgid: &[u8; 16], out: &mut KVec<u32>) -> Result {
        // At most `MAX_QP_ATTACH`: reserved before locking, so the copy does not allocate.
        out.reserve(MAX_QP_ATTACH as usize, GFP_KERNEL)?;
        if let Some(g) = self.state.lock().groups.get(mgid) {
            for m in g.iter() {
                out.push_within_capacity(m.qpn).map_err(|_| ENOMEM)?;
            }
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

    /// No IP membership (the tests run without a netdev).
    fn none(_: &[u8; 16]) -> Result {
        Ok(())
    }

    #[test]
    fn attach_detach_and_limits() -> Result {
        let g = KBox::pin_init(Groups::new(), GFP_KERNEL)?;
        let mut unicast = G1;
        unicast[0] = 0xfe;
        assert_eq!(g.attach(&unicast, 16, none), Err(EINVAL));
        g.attach(&G1, 16, none)?;
        g.attach(&G1, 16, none)?;
        g.attach(&G1, 17, none)?;
        g.attach(&G2, 17, none)?;
        assert_eq!(attached(&g, &G1)?.len(), 2);
        assert_eq!(attached(&g, &G2)?.as_slice(), &[17]);
        g.detach(&G1, 16, |_| ())?;
        assert_eq!(g.detach(&G1, 16, |_| ()), Err(EINVAL));
        g.detach_qp(17, |_| ());
        assert!(attached(&g, &G1)?.is_empty() && attached(&g, &G2)?.is_empty());
        for q in 0..MAX_QP_ATTACH {
            g.attach(&G1, 100 + q, none)?;
        }
        assert_eq!(g.attach(&G1, 1, none), Err(ENOMEM));
        Ok(())
    }

    /// A group's netdev membership is joined with its first member and left with its last,
    /// once each; a group whose join failed is not left.
    #[test]
    fn memberships_follow_the_groups() -> Result {
        let g = KBox::pin_init(Groups::new(), GFP_KERNEL)?;
        let (mut joins, mut leaves) = (KVec::<[u8; 16]>::new(), KVec::<[u8; 16]>::new());
        let mut join = |m: &[u8; 16]| joins.push(*m, GFP_KERNEL).map_err(|_| ENOMEM);
        g.attach(&G1, 16, &mut join)?;
        g.attach(&G1, 17, &mut join)?;
        g.attach(&G1, 17, &mut join)?;
        g.attach(&G2, 17, &mut join)?;
        assert_eq!(joins.as_slice(), &[G1, G2]);
        g.detach(&G1, 16, |m| {
            let _ = leaves.push(*m, GFP_KERNEL);
        })?;
        assert!(leaves.is_empty());
        g.detach_qp(17, |m| {
            let _ = leaves.push(*m, GFP_KERNEL);
        });
        assert_eq!(leaves.len(), 2);
        assert!(leaves.contains(&G1) && leaves.contains(&G2));
        // A join that fails: the group works on this host, and is not left.
        g.attach(&G1, 18, |_| Err(ENODEV))?;
        assert_eq!(attached(&g, &G1)?.as_slice(), &[18]);
        let mut left = false;
        g.detach(&G1, 18, |_| left = true)?;
        assert!(!left && g.joined.lock().iter().count() == 0);
        let s = g.state.lock();
        assert_eq!((s.num_groups, s.total, s.users.iter().count()), (0, 0, 0));
        Ok(())
    }

    #[test]
    fn per_user_limits() -> Result {
        let g = KBox::pin_init(Groups::new(), GFP_KERNEL)?;
        let (a, b, root) = (User(1000), User(1001), User(0));
        // One group: a user takes half of it, another user still joins, root fills it.
        for q in 0..MAX_USER_QP_ATTACH {
            g.attach_as(&G1, 100 + q, a, none)?;
        }
        assert_eq!(g.attach_as(&G1, 1, a, none), Err(ENOMEM));
        g.attach_as(&G1, 1, b, none)?;
        for q in 1 + MAX_USER_QP_ATTACH..MAX_QP_ATTACH {
            g.attach_as(&G1, 200 + q, root, none)?;
        }
        assert_eq!(g.attach_as(&G1, 2, root, none), Err(ENOMEM));
        // Many groups: a user's total is capped, another user's is not touched.
        let mut mgid = G2;
        for i in 0..MAX_USER_ATTACH - MAX_USER_QP_ATTACH {
            mgid[13..15].copy_from_slice(&(i as u16).to_be_bytes());
            g.attach_as(&mgid, 7, a, none)?;
        }
        mgid[13..15].copy_from_slice(&[0xff, 0xff]);
        assert_eq!(g.attach_as(&mgid, 7, a, none), Err(ENOMEM));
        g.attach_as(&mgid, 8, b, none)?;
        // Destroying the QP detaches it everywhere and refunds its user.
        g.detach_qp(7, |_| ());
        assert_eq!(
            g.state.lock().users.get(&a).copied(),
            Some(MAX_USER_QP_ATTACH)
        );
        g.attach_as(&mgid, 7, a, none)?;
        for q in 0..MAX_USER_QP_ATTACH {
            g.detach(&G1, 100 + q, |_| ())?;
        }
        g.detach_qp(7, |_| ());
        assert!(g.state.lock().users.get(&a).is_none());
        let s = g.state.lock();
        assert_eq!(
            (s.num_groups, s.total),
            (2, MAX_QP_ATTACH - MAX_USER_QP_ATTACH + 1)
        );
        Ok(())
    }
}
