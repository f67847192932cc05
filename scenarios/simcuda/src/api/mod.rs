//! The exported C API of `libcudart.so.13`, one module per family.
//!
//! Every entry point catches panics (a panic never unwinds into C; it becomes
//! `cudaErrorUnknown`) and records a failing code as the thread's last error. Functions that
//! dereference a caller's pointer or call a caller's function are `unsafe`; the rest (handles
//! and integers only) are safe, since no argument value can make them misbehave.
//!
//! Parameters of enum type in C (`cudaMemcpyKind`, `cudaError_t`) are received as their `u32`
//! representation, which has the same ABI: a Rust enum holding a value outside its variants is
//! undefined behaviour, and C callers can pass any value (`cudaMemcpy(..., 7)` must answer
//! `cudaErrorInvalidMemcpyDirection`). Every struct and handle type is cudarc's.

use std::panic::{self, AssertUnwindSafe};
use std::ptr::NonNull;

use cudarc::runtime::sys::cudaError_t;

use crate::error::{self, CudaResult};

pub(crate) mod cupti;
mod device;
pub mod driver;
mod errors;
mod event;
mod launch;
mod memcpy;
mod memory;
mod memset;
mod nccl;
mod stream;

pub use cupti::*;
pub use device::*;
pub use errors::*;
pub use event::*;
pub use launch::*;
pub use memcpy::*;
pub use memory::*;
pub use memset::*;
pub use nccl::*;
pub use stream::*;

/// Runs the body of an entry point: panics become `cudaErrorUnknown`, errors are recorded as
/// the thread's last error.
fn entry(body: impl FnOnce() -> CudaResult) -> cudaError_t {
    let code = match panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return cudaError_t::cudaSuccess,
        Ok(Err(code)) => code,
        Err(_) => cudaError_t::cudaErrorUnknown,
    };
    error::record(code);
    code
}

/// An out-parameter, checked for null before any work is done.
struct Out<T>(NonNull<T>);

impl<T> Out<T> {
    fn new(ptr: *mut T) -> CudaResult<Self> {
        NonNull::new(ptr)
            .map(Self)
            .ok_or(cudaError_t::cudaErrorInvalidValue)
    }

    /// # Safety
    /// The pointer given to [`Out::new`] must be valid for a write of `T`.
    unsafe fn write(self, value: T) {
        // SAFETY: non-null by construction; valid by the caller's contract.
        unsafe { self.0.as_ptr().write(value) }
    }
}
