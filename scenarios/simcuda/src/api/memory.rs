//! Allocation, registration and pointer queries.
//!
//! Which calls synchronize the device follows CUDA 13 on an H100: `cudaFree` (non-null),
//! `cudaFreeHost` and `cudaHostUnregister` wait for all device work first; `cudaMalloc`,
//! `cudaMallocHost`, `cudaHostAlloc` and `cudaHostRegister` do not.
#![allow(non_snake_case)]

use std::ffi::{c_uint, c_void};

use cudarc::runtime::sys::{
    cudaError_t, cudaHostAllocMapped, cudaHostAllocPortable, cudaHostAllocWriteCombined,
    cudaHostRegisterIoMemory, cudaHostRegisterMapped, cudaHostRegisterPortable,
    cudaHostRegisterReadOnly, cudaMemAttachGlobal, cudaMemAttachHost, cudaMemoryType,
    cudaPointerAttributes,
};

use super::{entry, Out};
use crate::error::CudaResult;
use crate::memory::MemKind;
use crate::runtime::runtime;

/// `cudaPointerAttributes::device` for memory no device knows (`cudaInvalidDeviceId`).
const INVALID_DEVICE_ID: i32 = -2;

/// Allocates `size` bytes of `kind` on the current device; a size of 0 gives NULL, as CUDA does.
fn allocate(out: *mut *mut c_void, size: usize, kind: MemKind) -> CudaResult {
    let out = Out::new(out)?;
    let rt = runtime();
    let device = rt.current_device()?;
    let ptr = if size == 0 {
        std::ptr::null_mut()
    } else {
        rt.memory().allocate(size, kind, device)? as *mut c_void
    };
    // SAFETY: the entry point's contract: `out` is valid for writing a pointer.
    unsafe { out.write(ptr) };
    Ok(())
}

/// Frees the allocation starting exactly at `ptr` if it is one of `kinds`, after waiting for
/// the device work that may still use it.
fn release(ptr: *mut c_void, kinds: &[MemKind], wrong: cudaError_t) -> CudaResult {
    let rt = runtime();
    let base = ptr as usize;
    let device = match rt.memory().find_base(base) {
        Some(a) if kinds.contains(&a.kind) => a.device,
        _ => return Err(wrong),
    };
    if kinds.contains(&MemKind::Device) {
        rt.sched.sync_device(device)?;
    } else {
        // Pinned memory may be reached from any device.
        rt.sync_all_devices()?;
    }
    let mut map = rt.memory();
    match map.find_base(base) {
        Some(a) if kinds.contains(&a.kind) => {
            map.remove(base);
            Ok(())
        }
        // Freed by another thread while we waited.
        _ => Err(wrong),
    }
}

/// `cudaMalloc`.
///
/// # Safety
/// `dev_ptr` is null or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn cudaMalloc(dev_ptr: *mut *mut c_void, size: usize) -> cudaError_t {
    entry(|| allocate(dev_ptr, size, MemKind::Device))
}

/// `cudaMallocManaged`: `flags` must be `cudaMemAttachGlobal` or `cudaMemAttachHost`.
///
/// # Safety
/// `dev_ptr` is null or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn cudaMallocManaged(
    dev_ptr: *mut *mut c_void,
    size: usize,
    flags: c_uint,
) -> cudaError_t {
    entry(|| {
        if flags != cudaMemAttachGlobal && flags != cudaMemAttachHost {
            return Err(cudaError_t::cudaErrorInvalidValue);
        }
        allocate(dev_ptr, size, MemKind::Managed)
    })
}

/// `cudaFree`: NULL is a no-op; otherwise waits for the device, then frees.
#[no_mangle]
pub extern "C" fn cudaFree(dev_ptr: *mut c_void) -> cudaError_t {
    if let Some(r) = super::driver::route() {
        // SAFETY: the driver's cuMemFree_v2 with the caller's pointer.
        return super::driver::call_via(|| unsafe { (r.free)(dev_ptr as u64) });
    }
    entry(|| {
        if dev_ptr.is_null() {
            return Ok(());
        }
        release(
            dev_ptr,
            &[MemKind::Device, MemKind::Managed],
            cudaError_t::cudaErrorInvalidValue,
        )
    })
}

/// `cudaMallocHost`: pinned host memory.
///
/// # Safety
/// `ptr` is null or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) -> cudaError_t {
    if let Some(r) = super::driver::route() {
        // SAFETY: the driver's cuMemAllocHost_v2 with the caller's arguments.
        return super::driver::call_via(|| unsafe { (r.alloc_host)(ptr, size) });
    }
    entry(|| allocate(ptr, size, MemKind::Pinned))
}

/// `cudaHostAlloc`: pinned host memory; the flags (portable, mapped, write-combined) change
/// nothing in the simulator, where all pinned memory is mapped and portable.
///
/// # Safety
/// `p_host` is null or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn cudaHostAlloc(
    p_host: *mut *mut c_void,
    size: usize,
    flags: c_uint,
) -> cudaError_t {
    if let Some(r) = super::driver::route() {
        // SAFETY: the driver's cuMemHostAlloc with the caller's arguments.
        return super::driver::call_via(|| unsafe { (r.host_alloc)(p_host, size, flags) });
    }
    entry(|| {
        let known = cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;
        if flags & !known != 0 {
            return Err(cudaError_t::cudaErrorInvalidValue);
        }
        allocate(p_host, size, MemKind::Pinned)
    })
}

/// `cudaFreeHost`: NULL is a no-op; otherwise waits for all devices, then frees.
// The pointer is an address the simulator looks up (through the driver face too), never
// dereferenced: the function stays safe.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
#[no_mangle]
pub extern "C" fn cudaFreeHost(ptr: *mut c_void) -> cudaError_t {
    if let Some(r) = super::driver::route() {
        // SAFETY: the driver's cuMemFreeHost with the caller's pointer.
        return super::driver::call_via(|| unsafe { (r.free_host)(ptr) });
    }
    entry(|| {
        if ptr.is_null() {
            return Ok(());
        }
        release(ptr, &[MemKind::Pinned], cudaError_t::cudaErrorInvalidValue)
    })
}

/// `cudaHostRegister`: page-locks the program's memory (recorded, not really locked).
// The pointer is an address the simulator looks up (through the driver face too), never
// dereferenced: the function stays safe.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
#[no_mangle]
pub extern "C" fn cudaHostRegister(ptr: *mut c_void, size: usize, flags: c_uint) -> cudaError_t {
    if let Some(r) = super::driver::route() {
        // SAFETY: the driver's cuMemHostRegister_v2 with the caller's arguments.
        return super::driver::call_via(|| unsafe { (r.host_register)(ptr, size, flags) });
    }
    entry(|| {
        let known = cudaHostRegisterPortable
            | cudaHostRegisterMapped
            | cudaHostRegisterIoMemory
            | cudaHostRegisterReadOnly;
        if ptr.is_null() || size == 0 || flags & !known != 0 {
            return Err(cudaError_t::cudaErrorInvalidValue);
        }
        let rt = runtime();
        let device = rt.current_device()?;
        rt.memory().register(ptr as usize, size, device)
    })
}

/// `cudaHostUnregister`: waits for all devices, then forgets the registration.
// The pointer is an address the simulator looks up (through the driver face too), never
// dereferenced: the function stays safe.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
#[no_mangle]
pub extern "C" fn cudaHostUnregister(ptr: *mut c_void) -> cudaError_t {
    if let Some(r) = super::driver::route() {
        // SAFETY: the driver's cuMemHostUnregister with the caller's pointer.
        return super::driver::call_via(|| unsafe { (r.host_unregister)(ptr) });
    }
    entry(|| {
        release(
            ptr,
            &[MemKind::Registered],
            cudaError_t::cudaErrorHostMemoryNotRegistered,
        )
    })
}

/// `cudaHostGetDevicePointer`: with unified addressing the device pointer of mapped host
/// memory is the host pointer.
///
/// # Safety
/// `p_device` is null or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn cudaHostGetDevicePointer(
    p_device: *mut *mut c_void,
    p_host: *mut c_void,
    flags: c_uint,
) -> cudaError_t {
    entry(|| {
        let out = Out::new(p_device)?;
        if flags != 0 {
            return Err(cudaError_t::cudaErrorInvalidValue);
        }
        match runtime().memory().find(p_host as usize) {
            Some(a) if matches!(a.kind, MemKind::Pinned | MemKind::Registered) => {}
            _ => return Err(cudaError_t::cudaErrorInvalidValue),
        }
        // SAFETY: the caller's contract.
        unsafe { out.write(p_host) };
        Ok(())
    })
}

/// `cudaPointerGetAttributes`, with CUDA 11+ semantics: memory the runtime does not know is
/// `cudaMemoryTypeUnregistered` (success, device -2, host pointer = the pointer); interior
/// pointers resolve to their allocation.
///
/// # Safety
/// `attributes` is null or valid for writing a `cudaPointerAttributes`.
#[no_mangle]
pub unsafe extern "C" fn cudaPointerGetAttributes(
    attributes: *mut cudaPointerAttributes,
    ptr: *const c_void,
) -> cudaError_t {
    entry(|| {
        let out = Out::new(attributes)?;
        let p = ptr.cast_mut();
        let null = std::ptr::null_mut();
        let found = runtime()
            .memory()
            .find(ptr as usize)
            .map(|a| (a.kind, a.device as i32));
        let (type_, device, device_pointer, host_pointer) = match found {
            None => (
                cudaMemoryType::cudaMemoryTypeUnregistered,
                INVALID_DEVICE_ID,
                null,
                p,
            ),
            Some((MemKind::Device, d)) => (cudaMemoryType::cudaMemoryTypeDevice, d, p, null),
            Some((MemKind::Managed, d)) => (cudaMemoryType::cudaMemoryTypeManaged, d, p, p),
            Some((MemKind::Pinned | MemKind::Registered, d)) => {
                (cudaMemoryType::cudaMemoryTypeHost, d, p, p)
            }
        };
        let value = cudaPointerAttributes {
            type_,
            device,
            devicePointer: device_pointer,
            hostPointer: host_pointer,
            reserved: Default::default(),
        };
        // SAFETY: the caller's contract.
        unsafe { out.write(value) };
        Ok(())
    })
}
