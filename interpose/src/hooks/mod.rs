//! The exported CUDA runtime entry points, by family. Each forwards to the real function
//! through `runtime::hook`; the body of a family lives in one function shared by the plain
//! and the per-thread-default-stream (`_ptds` / `_ptsz`) symbols.
//!
//! Return values and `cudaMemcpyKind` arguments are handled as their raw C integers: a
//! runtime newer than these bindings may return error codes (or be passed kinds) that the
//! Rust enums do not list, and holding such a value in a Rust enum is undefined behaviour.
//! Every struct and handle type is cudarc's.

// The exported names are the CUDA runtime's.
#![allow(non_snake_case)]

pub mod memcpy;
pub mod memory;
pub mod sync;

/// `cudaError_t` as the C ABI carries it.
pub type RawError = u32;
/// `cudaMemcpyKind` as the C ABI carries it.
pub type RawKind = std::ffi::c_uint;

/// `cudaStreamPerThread`: the stream `_ptds` synchronous calls are ordered in.
pub const STREAM_PER_THREAD: u64 = 2;

/// Resolves the real function once (`name`, with C signature `ty`), or returns
/// `cudaErrorSharedObjectSymbolNotFound` from the calling hook when no runtime defines it.
macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static REAL: $crate::real::Real = $crate::real::Real::new($name);
        match REAL.get::<$ty>() {
            Some(f) => f,
            None => return $crate::real::MISSING,
        }
    }};
}
pub(crate) use real;
