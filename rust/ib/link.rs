// SPDX-License-Identifier: GPL-2.0

//! `rdma link` types and the notifiers a software RDMA driver needs
//! (`include/rdma/rdma_netlink.h`, `linux/netdevice.h`, `linux/module.h`).

use super::netdev::NetDev;
use crate::ib::bindings;
use core::marker::PhantomData;
use kernel::{error::from_result, prelude::*, types::Opaque};

/// A link type: what `rdma link add NAME type TYPE netdev IF` creates.
pub(crate) trait Link: 'static {
    /// The type name (`rodp`).
    const TYPE: &'static CStr;

    /// Creates a device called `name` on `ndev`.
    fn newlink(name: &CStr, ndev: &NetDev) -> Result;

    /// `ndev` is being unregistered: devices bound to it must let go of it.
    fn netdev_unregister(ndev: &NetDev);

    /// A module called `name` is about to start; an error vetoes its loading.
    fn module_coming(name: &CStr) -> Result;

    /// Called while tearing the registration down, after the link type is gone and before the
    /// notifiers are: remove every device.
    fn teardown();
}

/// The registration of link type `T` and its netdev and module notifiers.
#[pin_data(PinnedDrop)]
pub(crate) struct Registration<T: Link> {
    #[pin]
    ops: Opaque<bindings::rdma_link_ops>,
    #[pin]
    netdev_nb: Opaque<bindings::notifier_block>,
    #[pin]
    module_nb: Opaque<bindings::notifier_block>,
    _link: PhantomData<T>,
}

// SAFETY: The C structures are only touched by their registration functions, under their locks.
unsafe impl<T: Link> Send for Registration<T> {}
// SAFETY: As above.
unsafe impl<T: Link> Sync for Registration<T> {}

impl<T: Link> Registration<T> {
    /// Registers the notifiers, then the link type; first makes the list of devices ready.
    ///
    /// Only the netdev notifier can fail (when a replayed event is refused), so it goes first:
    /// an error leaves nothing registered behind.
    pub(crate) fn new() -> impl PinInit<Self, Error> {
        super::device::init_device_list();
        try_pin_init!(Self {
            netdev_nb <- Opaque::try_ffi_init(|nb: *mut bindings::notifier_block| {
                // SAFETY: `nb` is pinned memory that outlives the registration (dropped in
                // `PinnedDrop`).
                let ret = unsafe {
                    nb.write(bindings::notifier_block {
                        notifier_call: Some(Self::netdev_cb),
                        ..pin_init::zeroed()
                    });
                    bindings::register_netdevice_notifier(nb)
                };
                kernel::error::to_result(ret)
            }),
            module_nb <- Opaque::try_ffi_init(|nb: *mut bindings::notifier_block| {
                // SAFETY: As above.
                unsafe {
                    nb.write(bindings::notifier_block {
                        notifier_call: Some(Self::module_cb),
                        ..pin_init::zeroed()
                    });
                    kernel::error::to_result(bindings::register_module_notifier(nb))
                }
            }),
            ops <- Opaque::ffi_init(|ops: *mut bindings::rdma_link_ops| {
                // SAFETY: `ops` is pinned and outlives the registration; `TYPE` is static.
                unsafe {
                    ops.write(bindings::rdma_link_ops {
                        type_: T::TYPE.as_char_ptr(),
                        newlink: Some(Self::newlink_cb),
                        ..pin_init::zeroed()
                    });
                    bindings::rdma_link_register(ops);
                }
            }),
            _link: PhantomData,
        })
    }

    /// # Safety
    ///
    /// Called by nldev with a valid name and a referenced netdev.
    unsafe extern "C" fn newlink_cb(name: *const c_char, ndev: *mut bindings::net_device) -> c_int {
        from_result(|| {
            // SAFETY: Per the function's safety requirements.
            let (name, ndev) = unsafe { (CStr::from_char_ptr(name), NetDev::from_raw(ndev)) };
            T::newlink(name, ndev).map(|()| 0)
        })
    }

    /// # Safety
    ///
    /// Called by the netdev notifier chain with a valid `netdev_notifier_info`.
    unsafe extern "C" fn netdev_cb(
        _nb: *mut bindings::notifier_block,
        event: c_ulong,
        info: *mut c_void,
    ) -> c_int {
        if event == bindings::netdev_cmd_NETDEV_UNREGISTER as c_ulong {
            // SAFETY: The chain passes a valid info whose netdev is live during the call.
            let ndev = unsafe { NetDev::from_raw(bindings::netdev_notifier_info_to_dev(info)) };
            T::netdev_unregister(ndev);
        }
        bindings::NOTIFY_DONE as c_int
    }

    /// # Safety
    ///
    /// Called by the module notifier chain with a valid `struct module`.
    unsafe extern "C" fn module_cb(
        _nb: *mut bindings::notifier_block,
        state: c_ulong,
        module: *mut c_void,
    ) -> c_int {
        if state != bindings::module_state_MODULE_STATE_COMING as c_ulong {
            return bindings::NOTIFY_DONE as c_int;
        }
        // SAFETY: The chain passes the module being loaded; its name is a C string.
        let name = unsafe { CStr::from_char_ptr(bindings::module_name(module.cast())) };
        match T::module_coming(name) {
            Ok(()) => bindings::NOTIFY_DONE as c_int,
            // SAFETY: Pure conversion.
            Err(e) => unsafe { bindings::notifier_from_errno(e.to_errno()) },
        }
    }
}

#[pinned_drop]
impl<T: Link> PinnedDrop for Registration<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: All three were registered in `new` (a failed init never reaches drop).
        unsafe { bindings::rdma_link_unregister(self.ops.get()) };
        T::teardown();
        // SAFETY: As above.
        unsafe {
            bindings::unregister_netdevice_notifier(self.netdev_nb.get());
            bindings::unregister_module_notifier(self.module_nb.get());
        }
    }
}

/// Whether a module called `name` is loaded.
///
/// `find_module` is private to module.c, so this walks the module list from `this` module's own
/// entry under RCU, as `find_module_all` does from the list head. The head lives in vmlinux
/// data, outside the module area, and is skipped by address: every other entry is the `list`
/// member of a `struct module` in module memory.
pub(crate) fn module_loaded(this: &ThisModule, name: &CStr) -> bool {
    let _rcu = kernel::sync::rcu::read_lock();
    // SAFETY: Constants of the architecture.
    let area = unsafe { bindings::modules_vaddr()..bindings::modules_end() };
    // SAFETY: `this` is the calling module, loaded while its code runs.
    let start = unsafe { &raw mut (*this.as_ptr()).list };
    // SAFETY: Entries of the RCU-protected module list stay valid until the read-side section
    // ends; each `next` is read once, as `rcu_dereference` does.
    let next = |p: *mut bindings::list_head| unsafe { (&raw const (*p).next).read_volatile() };
    let mut p = next(start);
    while p != start {
        if area.contains(&(p as c_ulong)) {
            // SAFETY: `p` is the `list` member of a live `struct module` (see above).
            let m = unsafe { kernel::container_of!(p, bindings::module, list) };
            // SAFETY: As above; `name` is a NUL-terminated array.
            let found = unsafe {
                (*m).state != bindings::module_state_MODULE_STATE_UNFORMED
                    && CStr::from_char_ptr((*m).name.as_ptr()) == name
            };
            if found {
                return true;
            }
        }
        p = next(p);
    }
    false
}
