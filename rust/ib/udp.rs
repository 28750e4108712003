// SPDX-License-Identifier: GPL-2.0

//! UDP tunnel sockets and UDP/IP transmit (`include/net/udp_tunnel.h`, `net/ip.h`,
//! `net/ipv6.h`), the way a RoCEv2 driver uses them (rxe's `rxe_net.c`).
//!
//! - [`Tunnel`]: a kernel UDP socket pair (IPv4, and IPv6-only) bound to one port of one
//!   network namespace, shared by its handles; every datagram it receives is handed to a
//!   [`Receiver`] as a [`Packet`] and then freed. Dropping the last handle releases both
//!   sockets and waits until no callback runs.
//! - [`send`]: one UDP datagram out of an interface, routed per call, its payload written by the
//!   caller, which also sees the IP and UDP headers exactly as they go out (for RoCEv2's ICRC).
//! - [`Pernet`]: the namespace exit callback that releases a dying namespace's tunnels while
//!   the namespace can still be used.
//!
//! No policy here: which port, which namespace, and what a packet means are the caller's.

use super::netdev::NetDev;
use crate::ib::bindings;
use core::any::TypeId;
use kernel::{
    global_lock,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        rcu::synchronize_rcu,
        Arc, ArcBorrow,
    },
    types::Opaque,
};

/// A network namespace, borrowed from something that keeps it alive (a netdev in it, the
/// namespace's exit callback, `init_net`).
#[repr(transparent)]
pub(crate) struct Net(Opaque<bindings::net>);

impl Net {
    /// # Safety
    ///
    /// `ptr` points to a namespace that stays alive for `'a`.
    unsafe fn from_raw<'a>(ptr: *mut bindings::net) -> &'a Net {
        // SAFETY: `Net` is a transparent wrapper; the caller guarantees validity for `'a`.
        unsafe { &*ptr.cast::<Net>() }
    }

    fn as_raw(&self) -> *mut bindings::net {
        self.0.get()
    }

    /// The initial namespace, which never dies.
    pub(crate) fn init() -> &'static Net {
        // SAFETY: `init_net` is static.
        unsafe { Net::from_raw(bindings::init_net_ptr()) }
    }

    /// An identity for this namespace while it is alive (its address: a later namespace may
    /// reuse it after this one's [`Pernet::net_exit`]).
    pub(crate) fn id(&self) -> usize {
        self.as_raw() as usize
    }
}

impl NetDev {
    /// The namespace the device is in now.
    pub(crate) fn net(&self) -> &Net {
        // SAFETY: The device is live for the borrow, and a device's namespace outlives its
        // membership in it (a namespace's devices are moved out or unregistered before it dies).
        unsafe { Net::from_raw(bindings::dev_net(self.as_raw())) }
    }

    /// The interface index (unique within its namespace).
    pub(crate) fn ifindex(&self) -> i32 {
        // SAFETY: The device is live (type invariant of `NetDev`).
        unsafe { bindings::netdev_ifindex(self.as_raw()) }
    }
}

/// Length of an IPv4 header without options.
pub(crate) const IPV4_HLEN: usize = 20;
/// Length of an IPv6 header.
pub(crate) const IPV6_HLEN: usize = 40;
/// Length of a UDP header.
pub(crate) const UDP_HLEN: usize = 8;

/// The GID form of an IPv4 address: `::ffff:a.b.c.d`.
pub(crate) fn ipv4_mapped(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

/// The IPv4 address of an IPv4-mapped GID.
pub(crate) fn ipv4_of(gid: &[u8; 16]) -> Option<[u8; 4]> {
    (gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff)
        .then(|| [gid[12], gid[13], gid[14], gid[15]])
}

/// A received datagram, valid during [`Receiver::receive`] only. Everything in it came from
/// the network: nothing is trusted beyond what the IP and UDP layers checked (lengths, the UDP
/// checksum when nonzero, the destination being local).
pub(crate) struct Packet<'a> {
    /// The UDP header and payload.
    udp: &'a [u8],
    /// The IP header, options or IPv6 extension headers included.
    ip: &'a [u8],
    src: [u8; 16],
    dst: [u8; 16],
    ipv6: bool,
    ifindex: i32,
    lower_ifindex: i32,
}

impl<'a> Packet<'a> {
    /// Parses the addresses; `None` when the headers are not IPv4/IPv6 plus UDP.
    fn new(udp: &'a [u8], ip: &'a [u8], ifindex: i32, lower_ifindex: i32) -> Option<Self> {
        if udp.len() < UDP_HLEN {
            return None;
        }
        let (ipv6, src, dst) = match ip.first()? >> 4 {
            4 if ip.len() >= IPV4_HLEN => (
                false,
                ipv4_mapped(ip[12..16].try_into().ok()?),
                ipv4_mapped(ip[16..20].try_into().ok()?),
            ),
            6 if ip.len() >= IPV6_HLEN => (
                true,
                ip[8..24].try_into().ok()?,
                ip[24..40].try_into().ok()?,
            ),
            _ => return None,
        };
        Some(Self {
            udp,
            ip,
            src,
            dst,
            ipv6,
            ifindex,
            lower_ifindex,
        })
    }

    /// The bytes after the UDP header (for RoCEv2: BTH to ICRC); at most 65527 bytes.
    pub(crate) fn payload(&self) -> &'a [u8] {
        &self.udp[UDP_HLEN..]
    }

    /// The UDP header as received (ports, length, checksum).
    pub(crate) fn udp_header(&self) -> &'a [u8] {
        &self.udp[..UDP_HLEN]
    }

    /// The IP header as received: 20 bytes or more (options) for IPv4, 40 or more (extension
    /// headers) for IPv6.
    pub(crate) fn ip_header(&self) -> &'a [u8] {
        self.ip
    }

    /// Whether it came over IPv6.
    pub(crate) fn is_ipv6(&self) -> bool {
        self.ipv6
    }

    /// The source address as a GID (IPv4-mapped for IPv4).
    pub(crate) fn src_gid(&self) -> &[u8; 16] {
        &self.src
    }

    /// The destination address as a GID (IPv4-mapped for IPv4).
    pub(crate) fn dst_gid(&self) -> &[u8; 16] {
        &self.dst
    }

    /// The UDP source port.
    pub(crate) fn src_port(&self) -> u16 {
        u16::from_be_bytes([self.udp[0], self.udp[1]])
    }

    /// The ingress interface (a VLAN device when the packet was tagged).
    pub(crate) fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// The ingress interface, or for a VLAN device the real device under it.
    pub(crate) fn lower_ifindex(&self) -> i32 {
        self.lower_ifindex
    }
}

/// What a [`Tunnel`] hands its datagrams to (8-byte aligned: checked at compile time).
pub(crate) trait Receiver: Send + Sync + 'static {
    /// Called for each datagram received, in softirq context under RCU: must not sleep (no
    /// mutex, no `GFP_KERNEL`, only interrupt-safe spinlocks), and must not keep `pkt`; says
    /// whether the datagram was taken. It is freed when this returns: as consumed when taken,
    /// else as dropped (what drop monitors and `kfree_skb` tracing count). Calls may run on
    /// several CPUs at once.
    fn receive(&self, pkt: &Packet<'_>) -> bool;
}

/// A kernel UDP socket pair (IPv4, and IPv6-only) bound to one port, set up as a UDP tunnel.
///
/// # Invariants
///
/// `sk4` is a live tunnel socket, `sk6` one or null (no IPv6 in the kernel); their user data
/// stays valid until they are released in `drop`.
struct Sockets {
    sk4: *mut bindings::sock,
    sk6: *mut bindings::sock,
}

/// The `encap_rcv` function of a tunnel.
type EncapRcv = unsafe extern "C" fn(*mut bindings::sock, *mut bindings::sk_buff) -> c_int;

impl Sockets {
    /// # Safety
    ///
    /// `user` stays valid for `rcv` until the sockets are dropped.
    unsafe fn open(net: &Net, port: u16, rcv: EncapRcv, user: *mut c_void) -> Result<Self> {
        let open = |ipv6: bool| -> Result<*mut bindings::sock> {
            let mut sk = core::ptr::null_mut();
            // SAFETY: `net` is alive (type invariant); `rcv` and `user` per the safety
            // requirements.
            kernel::error::to_result(unsafe {
                bindings::udp_tunnel_open(net.as_raw(), ipv6, port, Some(rcv), user, &mut sk)
            })?;
            Ok(sk)
        };
        let mut this = Self {
            sk4: open(false)?,
            sk6: core::ptr::null_mut(),
        };
        match open(true) {
            Ok(sk) => this.sk6 = sk,
            Err(e) if e == EAFNOSUPPORT || e == EPFNOSUPPORT => {}
            // `this` drops, releasing the IPv4 socket.
            Err(e) => return Err(e),
        }
        Ok(this)
    }
}

impl Drop for Sockets {
    fn drop(&mut self) {
        for sk in [self.sk4, self.sk6] {
            if !sk.is_null() {
                // SAFETY: A live socket of ours (type invariant), released once. Its user data
                // is cleared first, so no callback starts with it afterwards.
                unsafe { bindings::udp_tunnel_close(sk) };
            }
        }
        // Callbacks that read the user data before it was cleared finish within a grace
        // period (they run under RCU); only then may the user data go.
        synchronize_rcu();
    }
}

/// One shared socket pair: a namespace's port for one receiver type.
struct Entry {
    net: usize,
    port: u16,
    ty: TypeId,
    serial: u64,
    /// Live [`Tunnel`] handles; each holds a reference on the receiver `rx` points to.
    users: usize,
    /// `Arc::as_ptr` of the receiver, a `T` of type `ty`.
    rx: *const c_void,
    _sockets: Sockets,
}

// SAFETY: The sockets are released once, from whichever thread drops the entry; the receiver
// pointer is only turned back into an `Arc` of its own type under the registry's lock.
unsafe impl Send for Entry {}

global_lock! {
    // SAFETY: `Pernet::new` initialises it at module load, before any tunnel exists.
    unsafe(uninit) static SHARED: Mutex<KVec<Entry>> = KVec::new();
}

/// Serial numbers of entries (a namespace's address may be reused after it dies).
static SERIAL: Atomic<u64> = Atomic::new(0);

/// A handle on the UDP tunnel of one port of one namespace, shared by every handle of the
/// same receiver type, port and namespace: the first [`Tunnel::get`] binds the port (IPv4 and
/// IPv6), the drop of the last handle releases it before returning. Every datagram to the port
/// goes to the receiver (see [`Receiver`]) instead of a socket queue, and is then freed.
///
/// When the namespace dies first ([`Pernet`]), the port is released then and the handles stay
/// valid, receiving nothing.
pub(crate) struct Tunnel<T: Receiver> {
    serial: u64,
    rx: Arc<T>,
}

impl<T: Receiver> Tunnel<T> {
    /// A handle on the tunnel of `port` in `net`, binding it with the receiver `make` returns
    /// when no handle exists (`EADDRINUSE` when another socket has the port). Sleeps.
    pub(crate) fn get(net: &Net, port: u16, make: impl FnOnce() -> Result<Arc<T>>) -> Result<Self> {
        // The socket's user data is a pointer whose low three bits carry flags
        // (`SK_USER_DATA_PTRMASK`): the receiver must be 8-byte aligned.
        const { assert!(core::mem::align_of::<T>() >= 8) };
        let ty = TypeId::of::<T>();
        let mut shared = SHARED.lock();
        if let Some(e) = shared
            .iter_mut()
            .find(|e| e.net == net.id() && e.port == port && e.ty == ty)
        {
            // SAFETY: `rx` is a `T` (same type id) kept alive by the entry's `users > 0`
            // handles, which cannot drop their references while we hold the lock.
            let rx: Arc<T> = unsafe { ArcBorrow::from_raw(e.rx.cast::<T>()) }.into();
            e.users += 1;
            return Ok(Self {
                serial: e.serial,
                rx,
            });
        }
        let rx = make()?;
        let user = Arc::as_ptr(&rx).cast::<c_void>();
        // SAFETY: The sockets are dropped with their entry, which goes when the last handle
        // (each keeping `rx` alive) goes, or at the namespace's exit; either way before `rx`.
        let sockets = unsafe { Sockets::open(net, port, Self::encap_rcv, user.cast_mut()) }?;
        let serial = SERIAL.fetch_add(1, Relaxed);
        shared.push(
            Entry {
                net: net.id(),
                port,
                ty,
                serial,
                users: 1,
                rx: user,
                _sockets: sockets,
            },
            GFP_KERNEL,
        )?;
        Ok(Self { serial, rx })
    }

    /// The receiver.
    pub(crate) fn receiver(&self) -> &Arc<T> {
        &self.rx
    }

    /// The `encap_rcv` of the sockets: hands the datagram to the receiver, then frees it.
    ///
    /// # Safety
    ///
    /// Called by the UDP layer under RCU with one of our sockets and an skb we now own.
    unsafe extern "C" fn encap_rcv(sk: *mut bindings::sock, skb: *mut bindings::sk_buff) -> c_int {
        // SAFETY: `sk` is one of our sockets; its user data is cleared before it is released.
        let rx = unsafe { bindings::sk_user_data(sk) }.cast::<T>();
        let (mut len, mut nh, mut nh_len) = (0, core::ptr::null_mut(), 0);
        let (mut ifindex, mut lower) = (0, 0);
        let mut taken = false;
        // SAFETY: We own `skb`; the out-pointers are locals.
        let th = unsafe {
            bindings::udp_rx(
                skb,
                &mut len,
                &mut nh,
                &mut nh_len,
                &mut ifindex,
                &mut lower,
            )
        };
        if !rx.is_null() && !th.is_null() {
            // SAFETY: The helper returned the linear UDP datagram and IP header inside `skb`,
            // which stays ours (and unmodified) until freed below.
            let (udp, ip) = unsafe {
                (
                    core::slice::from_raw_parts(th, len as usize),
                    core::slice::from_raw_parts(nh, nh_len as usize),
                )
            };
            if let Some(pkt) = Packet::new(udp, ip, ifindex, lower) {
                // SAFETY: Non-null user data is a live `T`: the sockets are released, and a
                // grace period waited for, before the last reference on it can go.
                taken = unsafe { (*rx).receive(&pkt) };
            }
        }
        if taken {
            // SAFETY: The skb is ours, and nothing refers to it any more.
            unsafe { bindings::consume_skb(skb) };
        } else {
            // SAFETY: As above.
            unsafe { bindings::kfree_skb(skb) };
        }
        0
    }
}

impl<T: Receiver> Drop for Tunnel<T> {
    fn drop(&mut self) {
        let mut shared = SHARED.lock();
        if let Some(i) = shared.iter().position(|e| e.serial == self.serial) {
            shared[i].users -= 1;
            if shared[i].users == 0 {
                // Releases the port before the lock (and then `rx`) goes.
                drop(shared.remove(i));
                if shared.is_empty() {
                    // The static is never dropped: free its buffer while nothing is shared.
                    *shared = KVec::new();
                }
            }
        }
    }
}

/// Registration of the namespace exit callback that releases the tunnels of a dying namespace
/// (their handles stay valid). Made once by the module before any [`Tunnel`]; its drop, after
/// the last tunnel handle, unregisters.
#[pin_data(PinnedDrop)]
pub(crate) struct Pernet {
    #[pin]
    ops: Opaque<bindings::pernet_operations>,
}

// SAFETY: The C structure is only touched by the pernet registration functions.
unsafe impl Send for Pernet {}
// SAFETY: As above.
unsafe impl Sync for Pernet {}

impl Pernet {
    /// Registers; no callback for namespaces that exist or appear.
    pub(crate) fn new() -> impl PinInit<Self, Error> {
        // SAFETY: Called once per module load, before anything else uses `SHARED`.
        unsafe { SHARED.init() };
        try_pin_init!(Self {
            ops <- Opaque::try_ffi_init(|ops: *mut bindings::pernet_operations| {
                // SAFETY: `ops` is pinned and outlives the registration (`PinnedDrop`).
                unsafe {
                    ops.write(bindings::pernet_operations {
                        exit: Some(Self::exit_cb),
                        ..pin_init::zeroed()
                    });
                    kernel::error::to_result(bindings::register_pernet_subsys(ops))
                }
            }),
        })
    }

    /// # Safety
    ///
    /// Called by the namespace code with a namespace being dismantled (still alive).
    unsafe extern "C" fn exit_cb(net: *mut bindings::net) {
        // The sockets are released here, while the namespace is alive.
        let mut shared = SHARED.lock();
        shared.retain(|e| e.net != net as usize);
        if shared.is_empty() {
            *shared = KVec::new();
        }
    }
}

#[pinned_drop]
impl PinnedDrop for Pernet {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: Registered in `new`. This calls `exit` for every namespace alive.
        unsafe { bindings::unregister_pernet_subsys(self.ops.get()) };
        // The static outlives the module's data: leave no buffer behind (there are no
        // handles left, so there are no entries either).
        *SHARED.lock() = KVec::new();
    }
}

/// A datagram to send: addresses as GIDs (both IPv4-mapped for IPv4, or both IPv6).
pub(crate) struct Datagram<'a> {
    /// Source address (must be one of the interface's or at least local for the route).
    pub(crate) src: &'a [u8; 16],
    /// Destination address.
    pub(crate) dst: &'a [u8; 16],
    /// UDP source port.
    pub(crate) src_port: u16,
    /// UDP destination port.
    pub(crate) dst_port: u16,
    /// IPv4 TTL or IPv6 hop limit.
    pub(crate) ttl: u8,
    /// IPv4 TOS byte or IPv6 traffic class (DSCP and ECN).
    pub(crate) tclass: u8,
}

/// An route lookup's result, released on drop unless handed to an skb.
struct Dst(*mut bindings::dst_entry);

impl Drop for Dst {
    fn drop(&mut self) {
        // SAFETY: We own one reference on the route.
        unsafe { bindings::dst_release(self.0) };
    }
}

/// An skb being built, freed on drop unless sent.
struct Skb(*mut bindings::sk_buff);

impl Drop for Skb {
    fn drop(&mut self) {
        // SAFETY: We own the skb.
        unsafe { bindings::kfree_skb(self.0) };
    }
}

/// Converts a pointer-or-errno.
fn ptr_result<P>(p: *mut P) -> Result<*mut P> {
    // SAFETY: Pure inspection of the pointer value.
    let e = unsafe { bindings::ptr_err(p.cast()) };
    if e != 0 {
        return Err(Error::from_errno(e as i32));
    }
    if p.is_null() {
        return Err(ENOMEM);
    }
    Ok(p)
}

/// Writes the IP and UDP headers of `d` for `len` payload bytes into `h` (IPv4: 28 bytes,
/// IPv6: 48). IPv4: version 4, IHL 5, TOS `tclass`, total length, identification 0 (the caller
/// fills it), DF, TTL, protocol UDP, checksum 0 (computed on output), addresses. IPv6: version
/// 6, traffic class, flow label 0, payload length, next header UDP, hop limit, addresses. UDP:
/// ports, length, checksum 0 (as rxe: RoCEv2 relies on the ICRC).
fn write_headers(h: &mut [u8], d: &Datagram<'_>, v4: Option<([u8; 4], [u8; 4])>, len: usize) {
    let udp_len = (len + UDP_HLEN) as u16;
    let ip_len = match v4 {
        Some((s, t)) => {
            let tot = udp_len + IPV4_HLEN as u16;
            h[..IPV4_HLEN].copy_from_slice(&[
                0x45, d.tclass, 0, 0, 0, 0, 0x40, 0, d.ttl, 17, 0, 0, s[0], s[1], s[2], s[3], t[0],
                t[1], t[2], t[3],
            ]);
            h[2..4].copy_from_slice(&tot.to_be_bytes());
            IPV4_HLEN
        }
        None => {
            h[0] = 0x60 | (d.tclass >> 4);
            h[1] = d.tclass << 4;
            h[2] = 0;
            h[3] = 0;
            h[4..6].copy_from_slice(&udp_len.to_be_bytes());
            h[6] = 17;
            h[7] = d.ttl;
            h[8..24].copy_from_slice(d.src);
            h[24..40].copy_from_slice(d.dst);
            IPV6_HLEN
        }
    };
    let u = &mut h[ip_len..ip_len + UDP_HLEN];
    u[0..2].copy_from_slice(&d.src_port.to_be_bytes());
    u[2..4].copy_from_slice(&d.dst_port.to_be_bytes());
    u[4..6].copy_from_slice(&udp_len.to_be_bytes());
    u[6..8].copy_from_slice(&[0, 0]);
}

/// Sends one UDP datagram of `len` payload bytes out of interface `ifindex` of `net`.
///
/// The route is looked up for this datagram (`EINVAL` for a source address that is not local,
/// `ENETUNREACH`/`EHOSTUNREACH` and the like when there is none); then `fill(headers, payload)`
/// writes the payload (zeroed beforehand) seeing the IP and UDP headers exactly as they go out
/// (see [`write_headers`]; the IPv4 identification is chosen by then, the IPv4 header checksum
/// is still 0 and is computed on output). An error from `fill` cancels the send. The datagram
/// is queued with `ip_local_out`/`ip6_local_out`, which may drop it later (neighbour
/// resolution, qdisc) without telling. Does not sleep; callable in any context but hard IRQ.
/// Nothing leaks on any path.
pub(crate) fn send(
    net: &Net,
    ifindex: i32,
    d: &Datagram<'_>,
    len: usize,
    fill: impl FnOnce(&[u8], &mut [u8]) -> Result,
) -> Result {
    let v4 = match (ipv4_of(d.src), ipv4_of(d.dst)) {
        (Some(s), Some(t)) => Some((s, t)),
        (None, None) => None,
        _ => return Err(EINVAL),
    };
    let ip_len = if v4.is_some() { IPV4_HLEN } else { IPV6_HLEN };
    if len > usize::from(u16::MAX) - UDP_HLEN - ip_len {
        return Err(EMSGSIZE);
    }
    let dst = match v4 {
        // SAFETY: `net` is alive; the addresses are 4 bytes each.
        Some((s, t)) => unsafe { bindings::route4(net.as_raw(), ifindex, s.as_ptr(), t.as_ptr()) },
        // SAFETY: As above, 16 bytes each.
        None => unsafe { bindings::route6(net.as_raw(), ifindex, d.src.as_ptr(), d.dst.as_ptr()) },
    };
    let dst = Dst(ptr_result(dst)?);
    let hdr_len = ip_len + UDP_HLEN;
    // SAFETY: `dst` is a live route; the lengths fit in 64 KiB.
    let skb = Skb(ptr_result(unsafe {
        bindings::udp_skb_alloc(dst.0, hdr_len as u32, len as u32)
    })?);
    // SAFETY: The skb holds `len` bytes of data, with room for `hdr_len` before them; the
    // route's reference moves to the skb.
    let h = unsafe {
        let h = bindings::udp_skb_push(skb.0, dst.0, ip_len as u32, v4.is_none());
        core::mem::forget(dst);
        core::slice::from_raw_parts_mut(h, hdr_len + len)
    };
    write_headers(h, d, v4, len);
    if v4.is_some() {
        // SAFETY: The skb's network header is the IPv4 header just written, its route set.
        unsafe { bindings::ip_select_ident(skb.0) };
    }
    let (headers, payload) = h.split_at_mut(hdr_len);
    fill(headers, payload)?;
    let skb = core::mem::ManuallyDrop::new(skb);
    // SAFETY: A complete packet with its route; the call consumes the skb.
    let ret = unsafe { bindings::udp_local_out(skb.0, v4.is_none()) };
    match ret {
        0 => Ok(()),
        r if r < 0 => Err(Error::from_errno(r)),
        // NET_XMIT_CN: queued, congestion noted; anything else positive: dropped.
        2 => Ok(()),
        _ => Err(ENOBUFS),
    }
}

#[kunit_tests(rodp_udp)]
mod tests {
    use super::*;
    use kernel::sync::atomic::{Atomic, Relaxed};

    #[test]
    fn gids_map_ipv4() {
        let g = ipv4_mapped([198, 18, 0, 1]);
        assert_eq!(ipv4_of(&g), Some([198, 18, 0, 1]));
        assert_eq!(ipv4_of(&[0u8; 16]), None);
        let mut v6 = [0u8; 16];
        v6[15] = 1;
        assert_eq!(ipv4_of(&v6), None);
    }

    #[test]
    fn headers_are_what_rxe_sends() {
        let (s, t) = (ipv4_mapped([10, 0, 0, 1]), ipv4_mapped([10, 0, 0, 2]));
        let d = Datagram {
            src: &s,
            dst: &t,
            src_port: 0xc000,
            dst_port: 4791,
            ttl: 64,
            tclass: 0x2e,
        };
        let mut h = [0xaau8; 28];
        write_headers(&mut h, &d, Some(([10, 0, 0, 1], [10, 0, 0, 2])), 100);
        assert_eq!(&h[..12], &[0x45, 0x2e, 0, 128, 0, 0, 0x40, 0, 64, 17, 0, 0]);
        assert_eq!(&h[20..], &[0xc0, 0, 0x12, 0xb7, 0, 108, 0, 0]);
        let mut h6 = [0xaau8; 48];
        write_headers(&mut h6, &d, None, 100);
        assert_eq!(&h6[..8], &[0x62, 0xe0, 0, 0, 0, 108, 17, 64]);
        assert_eq!(&h6[8..24], &s);
        assert_eq!(&h6[40..44], &[0xc0, 0, 0x12, 0xb7]);
    }

    #[test]
    fn short_or_foreign_headers_are_not_packets() {
        let ip4 = [0x45u8; 20];
        assert!(Packet::new(&[0; 7], &ip4, 1, 1).is_none());
        assert!(Packet::new(&[0; 8], &ip4[..19], 1, 1).is_none());
        assert!(Packet::new(&[0; 8], &[0x55; 20], 1, 1).is_none());
        assert!(Packet::new(&[0; 8], &[0x60; 39], 1, 1).is_none());
        let p = Packet::new(&[0x12, 0x34, 0x12, 0xb7, 0, 8, 0, 0], &ip4, 3, 2);
        assert!(p.is_some());
        if let Some(p) = p {
            assert_eq!(p.src_port(), 0x1234);
            assert!(p.payload().is_empty());
            assert_eq!(p.src_gid(), &ipv4_mapped([0x45; 4]));
            assert_eq!((p.ifindex(), p.lower_ifindex()), (3, 2));
        }
    }

    /// Counts what it receives from loopback with the payload it expects.
    #[repr(align(8))]
    struct Count(Atomic<u32>);

    impl Receiver for Count {
        fn receive(&self, pkt: &Packet<'_>) -> bool {
            let mine =
                pkt.payload() == b"rodp-kunit" && pkt.src_port() == 0xc0de && pkt.ifindex() == 1;
            if mine {
                self.0.fetch_add(1, Relaxed);
            }
            mine
        }
    }

    /// A datagram sent with `send` to the loopback address reaches a tunnel's receiver, over
    /// IPv4 and IPv6. Uses a port of its own, so a RoCE socket on 4791 does not matter.
    #[test]
    fn loopback_datagram_reaches_the_tunnel() -> Result {
        const PORT: u16 = 47911;
        let rx = Arc::new(Count(Atomic::new(0)), GFP_KERNEL)?;
        let tunnel = Tunnel::get(Net::init(), PORT, || Ok(rx.clone()))?;
        let lo4 = ipv4_mapped([127, 0, 0, 1]);
        let mut lo6 = [0u8; 16];
        lo6[15] = 1;
        // Nothing asserted while the tunnel lives: a failed assertion ends the test thread
        // without dropping it.
        let mut seen = [0u32; 2];
        let mut sent = [false; 2];
        for (i, a) in [lo4, lo6].iter().enumerate() {
            let d = Datagram {
                src: a,
                dst: a,
                src_port: 0xc0de,
                dst_port: PORT,
                ttl: 64,
                tclass: 0,
            };
            let hlen = if i == 0 { 28 } else { 48 };
            sent[i] = send(Net::init(), 1, &d, 10, |h, p| {
                if h.len() != hlen {
                    return Err(EINVAL);
                }
                p.copy_from_slice(b"rodp-kunit");
                Ok(())
            })
            .is_ok();
            let mut waited = 0;
            while rx.0.load(Relaxed) < i as u32 + 1 && waited < 1000 {
                kernel::time::delay::fsleep(kernel::time::Delta::from_millis(10));
                waited += 10;
            }
            seen[i] = rx.0.load(Relaxed);
        }
        // A cancelled send sends nothing.
        let d = Datagram {
            src: &lo4,
            dst: &lo4,
            src_port: 0xc0de,
            dst_port: PORT,
            ttl: 64,
            tclass: 0,
        };
        let cancelled = send(Net::init(), 1, &d, 10, |_, _| Err(EINVAL));
        drop(tunnel);
        assert!(sent[0] && sent[1]);
        assert_eq!(seen, [1, 2]);
        assert!(cancelled.is_err());
        assert_eq!(rx.0.load(Relaxed), 2);
        // The port is free again.
        let again = Tunnel::get(Net::init(), PORT, || Ok(rx.clone()));
        assert!(again.is_ok());
        Ok(())
    }
}
