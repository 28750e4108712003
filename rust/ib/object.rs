// SPDX-License-Identifier: GPL-2.0

//! Verbs objects that ib_core allocates with room for driver data (`INIT_RDMA_OBJ_SIZE`).
//!
//! ib_core allocates `size_ib_<obj>` zeroed bytes, fills in the `ib_<obj>` part and calls the
//! driver's create op; the driver writes its data after the C struct. The destroy op drops the
//! data; ib_core frees the memory.

use super::{device::Driver, event::Events};
use crate::ib::bindings;
use core::{marker::PhantomData, mem::offset_of, ptr::addr_of_mut};
use kernel::{prelude::*, sync::Arc, types::Opaque};

/// A C verbs object `C` followed by driver data `D`.
///
/// # Invariants
///
/// `data` is initialised between the object's create op and its destroy op.
#[repr(C)]
pub(crate) struct Object<C, D, T> {
    ib: Opaque<C>,
    data: D,
    _driver: PhantomData<T>,
}

impl<C, D, T> Object<C, D, T> {
    /// The C struct must come first: ib_core uses one pointer for both.
    const IB_FIRST: () = assert!(offset_of!(Self, ib) == 0);

    /// Writes the driver data into a freshly allocated object.
    ///
    /// # Safety
    ///
    /// `ib` points to an ib_core allocation of at least `size_of::<Self>()` bytes whose data
    /// part is not initialised.
    pub(crate) unsafe fn init(ib: *mut C, data: D) {
        let () = Self::IB_FIRST;
        // SAFETY: Per the safety requirements the memory is ours to write.
        unsafe { addr_of_mut!((*ib.cast::<Self>()).data).write(data) };
    }

    /// Drops the driver data.
    ///
    /// # Safety
    ///
    /// The data was written by [`Object::init`] and is not used after this call.
    pub(crate) unsafe fn drop_data(ib: *mut C) {
        // SAFETY: Per the safety requirements the data is initialised and unused from now on.
        unsafe { core::ptr::drop_in_place(addr_of_mut!((*ib.cast::<Self>()).data)) };
    }

    /// Borrows an initialised object.
    ///
    /// # Safety
    ///
    /// `ib` is a live object whose data was written by [`Object::init`], for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ib: *mut C) -> &'a Self {
        // SAFETY: Per the safety requirements.
        unsafe { &*ib.cast::<Self>() }
    }

    /// The C object.
    pub(crate) fn as_raw(&self) -> *mut C {
        self.ib.get()
    }

    /// The driver data.
    pub(crate) fn data(&self) -> &D {
        &self.data
    }
}

/// Driver data of an object that reports completions or events, with its sink.
pub(crate) struct WithEvents<D> {
    /// Revoked by the destroy op before the data is dropped.
    pub(crate) events: Arc<Events>,
    /// The driver's data.
    pub(crate) data: D,
}

/// A completion queue (`struct ib_cq`) of driver `T`.
pub(crate) type Cq<T> = Object<bindings::ib_cq, WithEvents<<T as Driver>::Cq>, T>;

/// A queue pair (`struct ib_qp`) of driver `T`.
pub(crate) type Qp<T> = Object<bindings::ib_qp, WithEvents<<T as Driver>::Qp>, T>;

/// A shared receive queue (`struct ib_srq`) of driver `T`.
pub(crate) type Srq<T> = Object<bindings::ib_srq, WithEvents<<T as Driver>::Srq>, T>;

/// An address handle (`struct ib_ah`) of driver `T`.
pub(crate) type Ah<T> = Object<bindings::ib_ah, <T as Driver>::Ah, T>;

/// A memory window (`struct ib_mw`) of driver `T`.
pub(crate) type Mw<T> = Object<bindings::ib_mw, <T as Driver>::Mw, T>;

/// A memory region (`struct ib_mr`) of driver `T`; unlike the others the driver allocates it.
pub(crate) type Mr<T> = Object<bindings::ib_mr, <T as Driver>::Mr, T>;

/// An MR allocation owned by the driver until it is handed to ib_core.
pub(crate) struct MrBox<T: Driver>(KBox<Mr<T>>);

impl<T: Driver> MrBox<T> {
    /// Allocates an MR with a zeroed `ib_mr` and `data`.
    pub(crate) fn new(data: T::Mr) -> Result<Self> {
        let () = Mr::<T>::IB_FIRST;
        Ok(Self(KBox::new(
            Object {
                ib: Opaque::zeroed(),
                data,
                _driver: PhantomData,
            },
            GFP_KERNEL,
        )?))
    }

    /// The C object.
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_mr {
        self.0.as_raw()
    }

    /// Hands the MR to ib_core; [`MrBox::from_raw`] takes it back.
    pub(crate) fn into_raw(self) -> *mut bindings::ib_mr {
        KBox::into_raw(self.0).cast()
    }

    /// Takes back an MR handed out by [`MrBox::into_raw`].
    ///
    /// # Safety
    ///
    /// `mr` came from `into_raw` and ib_core no longer uses it.
    pub(crate) unsafe fn from_raw(mr: *mut bindings::ib_mr) -> Self {
        // SAFETY: Per the safety requirements.
        Self(unsafe { KBox::from_raw(mr.cast()) })
    }
}

/// A user context (`struct ib_ucontext`) of driver `T`.
pub(crate) type UContext<T> = Object<bindings::ib_ucontext, <T as Driver>::UContext, T>;

/// A protection domain (`struct ib_pd`) of driver `T`.
pub(crate) type Pd<T> = Object<bindings::ib_pd, <T as Driver>::Pd, T>;

impl<T: Driver> UContext<T> {
    /// The context that issued a user command, or `None` for kernel callers.
    ///
    /// # Safety
    ///
    /// `udata` is null or the valid udata of a uverbs call on a context of driver `T`.
    pub(crate) unsafe fn from_udata<'a>(udata: *mut bindings::ib_udata) -> Option<&'a Self> {
        if udata.is_null() {
            return None;
        }
        // SAFETY: A uverbs udata is embedded in a `uverbs_attr_bundle` whose context is live
        // for the call (`rdma_udata_to_drv_context`).
        let uctx = unsafe { bindings::udata_to_ucontext(udata) };
        // SAFETY: Contexts of this device were created by `alloc_ucontext_cb`.
        (!uctx.is_null()).then(|| unsafe { Self::from_raw(uctx) })
    }
}
