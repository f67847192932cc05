//! Memset, in its synchronous, asynchronous and per-thread-default-stream forms.
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void};

use cudarc::runtime::sys::{cudaError_t, cudaStream_t};

use super::entry;
use crate::runtime::runtime;
use crate::transfer::{self, Form, StreamArg};

fn memset(
    dst: *mut c_void,
    value: c_int,
    count: usize,
    stream: StreamArg,
    form: Form,
) -> cudaError_t {
    // CUDA sets each byte to `value` converted to unsigned char.
    entry(|| transfer::memset(runtime(), dst.cast(), value as u8, count, stream, form))
}

fn on(stream: cudaStream_t, per_thread_default: bool) -> StreamArg {
    StreamArg {
        handle: stream,
        per_thread_default,
    }
}

/// `cudaMemset`: asynchronous for device memory, synchronous for pinned and managed memory.
///
/// # Safety
/// `dev_ptr..dev_ptr+count` is memory the program may write.
#[no_mangle]
pub unsafe extern "C" fn cudaMemset(
    dev_ptr: *mut c_void,
    value: c_int,
    count: usize,
) -> cudaError_t {
    memset(
        dev_ptr,
        value,
        count,
        StreamArg::default_stream(false),
        Form::Sync,
    )
}

/// `cudaMemset_ptds`.
///
/// # Safety
/// As [`cudaMemset`].
#[no_mangle]
pub unsafe extern "C" fn cudaMemset_ptds(
    dev_ptr: *mut c_void,
    value: c_int,
    count: usize,
) -> cudaError_t {
    memset(
        dev_ptr,
        value,
        count,
        StreamArg::default_stream(true),
        Form::Sync,
    )
}

/// `cudaMemsetAsync`: never blocks the caller.
///
/// # Safety
/// As [`cudaMemset`], until the memset completes.
#[no_mangle]
pub unsafe extern "C" fn cudaMemsetAsync(
    dev_ptr: *mut c_void,
    value: c_int,
    count: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    memset(dev_ptr, value, count, on(stream, false), Form::Async)
}

/// `cudaMemsetAsync_ptsz`.
///
/// # Safety
/// As [`cudaMemsetAsync`].
#[no_mangle]
pub unsafe extern "C" fn cudaMemsetAsync_ptsz(
    dev_ptr: *mut c_void,
    value: c_int,
    count: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    memset(dev_ptr, value, count, on(stream, true), Form::Async)
}
