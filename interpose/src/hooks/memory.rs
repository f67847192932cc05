//! Calls that synchronize as a side effect: freeing device or host memory, allocating or
//! registering pinned host memory, and `cudaMemset` on host-visible memory. The pinned
//! registry (`pinned.rs`) is maintained here.

use std::ffi::{c_int, c_uint, c_void};

use syncspy_abi::record::FLAG_PER_THREAD;
use syncspy_abi::{Api, Direction};

use super::{real, RawError, STREAM_PER_THREAD};
use crate::call::Call;
use crate::classify;
use crate::entry::hook;
use crate::pinned;

type FreeFn = unsafe extern "C" fn(*mut c_void) -> RawError;
type MallocHostFn = unsafe extern "C" fn(*mut *mut c_void, usize) -> RawError;
type HostAllocFn = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> RawError;
type HostRegisterFn = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> RawError;
type MemsetFn = unsafe extern "C" fn(*mut c_void, c_int, usize) -> RawError;

/// # Safety
/// Same contract as the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaFree(ptr: *mut c_void) -> RawError {
    let f = real!(c"cudaFree", FreeFn);
    hook(
        || {
            let mut c = classify::implicit(Api::CudaFree, 0);
            // cudaFree(NULL) is the idiom for "initialise the context": no free, no sync.
            if ptr.is_null() {
                c.kind = None;
            }
            c
        },
        // SAFETY: `f` is the real `cudaFree` and gets our caller's arguments
        // unchanged; the caller upholds its contract (this function's `# Safety`).
        || unsafe { f(ptr) },
    )
}

/// Removes a pinned range before the runtime releases it, so no lookup can see freed memory
/// as pinned; returns its size when known.
fn forget_pinned(ptr: *mut c_void) -> u64 {
    if crate::config::tracking() {
        pinned::remove(ptr as u64).unwrap_or(0)
    } else {
        0
    }
}

fn remember_pinned(ptr: *mut c_void, size: usize) {
    if crate::config::tracking() {
        pinned::add(ptr as u64, size as u64);
    }
}

/// # Safety
/// Same contract as the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaFreeHost(ptr: *mut c_void) -> RawError {
    let f = real!(c"cudaFreeHost", FreeFn);
    let size = forget_pinned(ptr);
    hook(
        || classify::implicit(Api::CudaFreeHost, size),
        // SAFETY: `f` is the real `cudaFreeHost` and gets our caller's arguments
        // unchanged; the caller upholds its contract (this function's `# Safety`).
        || unsafe { f(ptr) },
    )
}

/// # Safety
/// Same contract as the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaHostUnregister(ptr: *mut c_void) -> RawError {
    let f = real!(c"cudaHostUnregister", FreeFn);
    let size = forget_pinned(ptr);
    hook(
        || classify::implicit(Api::CudaHostUnregister, size),
        // SAFETY: `f` is the real `cudaHostUnregister` and gets our caller's arguments
        // unchanged; the caller upholds its contract (this function's `# Safety`).
        || unsafe { f(ptr) },
    )
}

/// # Safety
/// Same contract as the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) -> RawError {
    let f = real!(c"cudaMallocHost", MallocHostFn);
    let rc = hook(
        || classify::implicit(Api::CudaMallocHost, size as u64),
        // SAFETY: `f` is the real `cudaMallocHost` and gets our caller's arguments
        // unchanged; the caller upholds its contract (this function's `# Safety`).
        || unsafe { f(ptr, size) },
    );
    if rc == 0 && !ptr.is_null() {
        // SAFETY: on success the runtime stored the allocation in `*ptr`.
        remember_pinned(unsafe { *ptr }, size);
    }
    rc
}

/// # Safety
/// Same contract as the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaHostAlloc(
    ptr: *mut *mut c_void,
    size: usize,
    flags: c_uint,
) -> RawError {
    let f = real!(c"cudaHostAlloc", HostAllocFn);
    let rc = hook(
        || classify::implicit(Api::CudaHostAlloc, size as u64),
        // SAFETY: `f` is the real `cudaHostAlloc` and gets our caller's arguments
        // unchanged; the caller upholds its contract (this function's `# Safety`).
        || unsafe { f(ptr, size, flags) },
    );
    if rc == 0 && !ptr.is_null() {
        // SAFETY: on success the runtime stored the allocation in `*ptr`.
        remember_pinned(unsafe { *ptr }, size);
    }
    rc
}

/// # Safety
/// Same contract as the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaHostRegister(
    ptr: *mut c_void,
    size: usize,
    flags: c_uint,
) -> RawError {
    let f = real!(c"cudaHostRegister", HostRegisterFn);
    let rc = hook(
        || classify::implicit(Api::CudaHostRegister, size as u64),
        // SAFETY: `f` is the real `cudaHostRegister` and gets our caller's arguments
        // unchanged; the caller upholds its contract (this function's `# Safety`).
        || unsafe { f(ptr, size, flags) },
    );
    if rc == 0 {
        remember_pinned(ptr, size);
    }
    rc
}

/// The body of `cudaMemset` and `cudaMemset_ptds`.
///
/// # Safety
/// `f` is the real `cudaMemset` (or its variant) and the other arguments are the caller's,
/// valid for it: they are forwarded unchanged.
unsafe fn memset(
    api: Api,
    f: MemsetFn,
    ptr: *mut c_void,
    value: c_int,
    n: usize,
    ptds: bool,
) -> RawError {
    hook(
        || {
            let c = classify::memset(api, ptr, n as u64);
            if ptds {
                Call {
                    flags: FLAG_PER_THREAD,
                    stream: STREAM_PER_THREAD,
                    direction: Direction::None,
                    ..c
                }
            } else {
                c
            }
        },
        // SAFETY: `f` is the real function and these are the caller's arguments,
        // unchanged (this function's `# Safety`).
        || unsafe { f(ptr, value, n) },
    )
}

/// # Safety
/// Same contract as the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMemset(ptr: *mut c_void, value: c_int, count: usize) -> RawError {
    let f = real!(c"cudaMemset", MemsetFn);
    // SAFETY: `f` is the real `cudaMemset` and the arguments are our caller's, who upholds its
    // contract (this function's `# Safety`).
    unsafe { memset(Api::CudaMemset, f, ptr, value, count, false) }
}

/// # Safety
/// Same contract as the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMemset_ptds(ptr: *mut c_void, value: c_int, count: usize) -> RawError {
    let f = real!(c"cudaMemset_ptds", MemsetFn);
    // SAFETY: `f` is the real `cudaMemset_ptds` and the arguments are our caller's, who upholds its
    // contract (this function's `# Safety`).
    unsafe { memset(Api::CudaMemsetPtds, f, ptr, value, count, true) }
}
