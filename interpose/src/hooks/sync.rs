//! Explicit synchronization: device, stream, event.

use cudarc::runtime::sys::{cudaEvent_t, cudaStream_t};
use syncspy_abi::record::FLAG_PER_THREAD;
use syncspy_abi::{Api, Kind};

use super::{export_pair, real, RawError};
use crate::call::Call;
use crate::entry::{hook, hook_query};

type NoArgs = unsafe extern "C" fn() -> RawError;
pub type StreamFn = unsafe extern "C" fn(cudaStream_t) -> RawError;
type EventFn = unsafe extern "C" fn(cudaEvent_t) -> RawError;

/// # Safety
/// Same contract as the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaDeviceSynchronize() -> RawError {
    let f = real!(c"cudaDeviceSynchronize", NoArgs);
    hook(
        || Call::new(Kind::DeviceSync, Api::CudaDeviceSynchronize),
        // SAFETY: `f` is the real `cudaDeviceSynchronize`, which takes no arguments.
        || unsafe { f() },
    )
}

/// The body of `cudaStreamSynchronize` and its `_ptsz` variant.
///
/// # Safety
/// `f` is the real `cudaStreamSynchronize` (or its variant) and `stream` is the caller's,
/// valid for it: it is forwarded unchanged.
pub unsafe fn stream_sync(
    api: Api,
    f: StreamFn,
    stream: cudaStream_t,
    per_thread: bool,
) -> RawError {
    hook(
        || Call {
            stream: stream as u64,
            flags: if per_thread { FLAG_PER_THREAD } else { 0 },
            ..Call::new(Kind::StreamSync, api)
        },
        // SAFETY: `f` is the real function and these are the caller's arguments,
        // unchanged (this function's `# Safety`).
        || unsafe { f(stream) },
    )
}

export_pair! {
    stream_sync: StreamFn;
    cudaStreamSynchronize = CudaStreamSynchronize,
    cudaStreamSynchronize_ptsz = CudaStreamSynchronizePtsz;
    (stream: cudaStream_t)
}

/// # Safety
/// Same contract as the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaEventSynchronize(event: cudaEvent_t) -> RawError {
    let f = real!(c"cudaEventSynchronize", EventFn);
    hook(
        || Call::new(Kind::EventSync, Api::CudaEventSynchronize),
        // SAFETY: `f` is the real `cudaEventSynchronize` and gets our caller's arguments
        // unchanged; the caller upholds its contract (this function's `# Safety`).
        || unsafe { f(event) },
    )
}

/// The body of `cudaStreamQuery` and its `_ptsz` variant: a call that does not wait, whose
/// not-ready runs are `poll_wait`s (`entry::hook_query`).
///
/// # Safety
/// `f` is the real `cudaStreamQuery` (or its variant) and `stream` is the caller's, valid
/// for it: it is forwarded unchanged.
pub unsafe fn stream_query(
    api: Api,
    f: StreamFn,
    stream: cudaStream_t,
    per_thread: bool,
) -> RawError {
    let flags = if per_thread { FLAG_PER_THREAD } else { 0 };
    // SAFETY: `f` is the real function and these are the caller's arguments, unchanged
    // (this function's `# Safety`).
    hook_query(api, stream as u64, flags, || unsafe { f(stream) })
}

export_pair! {
    stream_query: StreamFn;
    cudaStreamQuery = CudaStreamQuery,
    cudaStreamQuery_ptsz = CudaStreamQueryPtsz;
    (stream: cudaStream_t)
}

/// # Safety
/// Same contract as the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaEventQuery(event: cudaEvent_t) -> RawError {
    let f = real!(c"cudaEventQuery", EventFn);
    // SAFETY: `f` is the real `cudaEventQuery` and gets our caller's argument unchanged; the
    // caller upholds its contract (this function's `# Safety`).
    hook_query(Api::CudaEventQuery, event as u64, 0, || unsafe { f(event) })
}
