//! The exported CUDA runtime entry points, by family. Each forwards to the real function
//! through `entry::hook`; the body of a family lives in one function shared by the plain
//! and the per-thread-default-stream (`_ptds` / `_ptsz`) symbols.
//!
//! Return values and `cudaMemcpyKind` arguments are handled as their raw C integers: a
//! runtime newer than these bindings may return error codes (or be passed kinds) that the
//! Rust enums do not list, and holding such a value in a Rust enum is undefined behaviour.
//! Every struct and handle type is cudarc's.

// The exported names are the CUDA runtime's.
#![allow(non_snake_case)]

pub mod exports;
pub mod launch;
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
    ($name:expr, $ty:ty) => {{
        static REAL: $crate::real::Real = $crate::real::Real::new($name);
        match REAL.get::<$ty>() {
            Some(f) => f,
            None => return $crate::real::MISSING,
        }
    }};
}
pub(crate) use real;

/// Exports a runtime function and its per-thread-default-stream variant: `$plain` and
/// `$variant` (with `Api` ids `$plain_api`, `$variant_api`) take the C arguments `$arg`, find
/// the real function of their own name (C signature `$ty`), and hand both to the family's
/// `$body` along with whether the call is the variant. Every `$body` is an `unsafe fn` whose
/// contract is "`f` is the real function and the arguments are the caller's".
macro_rules! export_pair {
    ($body:ident: $ty:ty; $plain:ident = $plain_api:ident, $variant:ident = $variant_api:ident;
     ($($arg:ident: $aty:ty),* $(,)?)) => {
        $crate::hooks::export_pair!(
            @one $body, $ty, $plain, $plain_api, false, ($($arg: $aty),*)
        );
        $crate::hooks::export_pair!(
            @one $body, $ty, $variant, $variant_api, true, ($($arg: $aty),*)
        );
    };
    (@one $body:ident, $ty:ty, $name:ident, $api:ident, $variant:literal,
     ($($arg:ident: $aty:ty),*)) => {
        /// # Safety
        /// Same contract as the CUDA runtime function of the same name.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $aty),*) -> $crate::hooks::RawError {
            let f = $crate::hooks::real!(
                match ::std::ffi::CStr::from_bytes_with_nul(
                    concat!(stringify!($name), "\0").as_bytes()
                ) {
                    Ok(c) => c,
                    Err(_) => panic!("symbol names have no NUL"),
                },
                $ty
            );
            // SAFETY: `f` is the real function of this symbol's name, typed with its C
            // signature, and the arguments are our caller's, who upholds that function's
            // contract (this function's `# Safety`): exactly what `$body` requires.
            unsafe { $body(::syncspy_abi::Api::$api, f, $($arg,)* $variant) }
        }
    };
}
pub(crate) use export_pair;
