//! Error reporting: last error and error names.
#![allow(non_snake_case)]

use std::ffi::c_char;

use cudarc::runtime::sys::cudaError_t;

use crate::error;

/// `cudaGetErrorString`. Takes the code as `u32` (see the module documentation of `api`).
#[no_mangle]
pub extern "C" fn cudaGetErrorString(error: u32) -> *const c_char {
    error::describe(error)
        .map_or(error::UNRECOGNIZED, |(_, text)| text)
        .as_ptr()
}

/// `cudaGetErrorName`. Takes the code as `u32` (see the module documentation of `api`).
#[no_mangle]
pub extern "C" fn cudaGetErrorName(error: u32) -> *const c_char {
    error::describe(error)
        .map_or(error::UNRECOGNIZED, |(name, _)| name)
        .as_ptr()
}

/// `cudaGetLastError`: the calling thread's last error, which it resets to `cudaSuccess`.
#[no_mangle]
pub extern "C" fn cudaGetLastError() -> cudaError_t {
    error::take_last()
}

/// `cudaPeekAtLastError`: the calling thread's last error, left in place.
#[no_mangle]
pub extern "C" fn cudaPeekAtLastError() -> cudaError_t {
    error::peek_last()
}
