//! Copies. Synchronous forms are `memcpy_sync` events; asynchronous forms are
//! `memcpy_pageable` events when their host side is pageable and counted non-stalling calls
//! otherwise.

use std::ffi::{c_int, c_void};

use cudarc::runtime::sys::{cudaMemcpy3DParms, cudaStream_t};
use syncspy_abi::record::FLAG_PER_THREAD;
use syncspy_abi::{Api, Direction};

use super::{export_pair, real, RawError, RawKind, STREAM_PER_THREAD};
use crate::call::Call;
use crate::classify::{self, direction};
use crate::entry::hook;

type MemcpyFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize, RawKind) -> RawError;
pub type MemcpyAsyncFn =
    unsafe extern "C" fn(*mut c_void, *const c_void, usize, RawKind, cudaStream_t) -> RawError;
type Memcpy2DFn = unsafe extern "C" fn(
    *mut c_void,
    usize,
    *const c_void,
    usize,
    usize,
    usize,
    RawKind,
) -> RawError;
type Memcpy2DAsyncFn = unsafe extern "C" fn(
    *mut c_void,
    usize,
    *const c_void,
    usize,
    usize,
    usize,
    RawKind,
    cudaStream_t,
) -> RawError;
type Memcpy3DFn = unsafe extern "C" fn(*const cudaMemcpy3DParms) -> RawError;
type Memcpy3DAsyncFn = unsafe extern "C" fn(*const cudaMemcpy3DParms, cudaStream_t) -> RawError;
type ToSymbolFn =
    unsafe extern "C" fn(*const c_void, *const c_void, usize, usize, RawKind) -> RawError;
type ToSymbolAsyncFn = unsafe extern "C" fn(
    *const c_void,
    *const c_void,
    usize,
    usize,
    RawKind,
    cudaStream_t,
) -> RawError;
type FromSymbolFn =
    unsafe extern "C" fn(*mut c_void, *const c_void, usize, usize, RawKind) -> RawError;
type FromSymbolAsyncFn = unsafe extern "C" fn(
    *mut c_void,
    *const c_void,
    usize,
    usize,
    RawKind,
    cudaStream_t,
) -> RawError;
type PeerFn = unsafe extern "C" fn(*mut c_void, c_int, *const c_void, c_int, usize) -> RawError;

/// `call` marked as made on the per-thread default stream (`_ptds`/`_ptsz` forms).
pub(crate) fn per_thread(call: Call, ptds: bool) -> Call {
    if ptds {
        Call {
            flags: call.flags | FLAG_PER_THREAD,
            ..call
        }
    } else {
        call
    }
}

/// The stream a synchronous copy is ordered in: the legacy default stream, or the per-thread
/// one for `_ptds` forms.
pub(crate) fn sync_stream(ptds: bool) -> u64 {
    if ptds {
        STREAM_PER_THREAD
    } else {
        0
    }
}

/// Direction of a symbol copy: the symbol is device memory; `kind` says where the other
/// side is (`cudaMemcpyDefault` resolved from that pointer).
fn symbol_direction(kind: RawKind, to_symbol: bool, other: *const c_void) -> Direction {
    let d = if to_symbol {
        direction(kind, std::ptr::null(), other)
    } else {
        direction(kind, other, std::ptr::null())
    };
    match (to_symbol, d) {
        // The null stand-in for the symbol reads as host memory under cudaMemcpyDefault.
        (true, Direction::HostToHost) => Direction::HostToDevice,
        (false, Direction::HostToHost) => Direction::DeviceToHost,
        (true, Direction::DeviceToHost) => Direction::DeviceToDevice,
        (false, Direction::HostToDevice) => Direction::DeviceToDevice,
        _ => d,
    }
}

// ---- cudaMemcpy -------------------------------------------------------------------------

/// The body of `cudaMemcpy` and `cudaMemcpy_ptds`.
///
/// # Safety
/// `f` is the real `cudaMemcpy` (or its variant) and the other arguments are the
/// caller's, valid for it: they are forwarded unchanged.
unsafe fn memcpy(
    api: Api,
    f: MemcpyFn,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    k: RawKind,
    ptds: bool,
) -> RawError {
    hook(
        || {
            per_thread(
                classify::sync_copy(api, direction(k, dst, src), n as u64, sync_stream(ptds)),
                ptds,
            )
        },
        // SAFETY: `f` is the real function and these are the caller's arguments,
        // unchanged (this function's `# Safety`).
        || unsafe { f(dst, src, n, k) },
    )
}

export_pair! {
    memcpy: MemcpyFn;
    cudaMemcpy = CudaMemcpy, cudaMemcpy_ptds = CudaMemcpyPtds;
    (dst: *mut c_void, src: *const c_void, count: usize, kind: RawKind)
}

/// The body of `cudaMemcpyAsync` and `cudaMemcpyAsync_ptsz`.
///
/// # Safety
/// `f` and the arguments follow the contract of `cudaMemcpyAsync`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn memcpy_async(
    api: Api,
    f: MemcpyAsyncFn,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    k: RawKind,
    s: cudaStream_t,
    ptsz: bool,
) -> RawError {
    hook(
        || {
            per_thread(
                classify::async_copy(api, direction(k, dst, src), dst, src, n as u64, s as u64),
                ptsz,
            )
        },
        // SAFETY: `f` is the real function and these are the caller's arguments,
        // unchanged (this function's `# Safety`).
        || unsafe { f(dst, src, n, k, s) },
    )
}

export_pair! {
    memcpy_async: MemcpyAsyncFn;
    cudaMemcpyAsync = CudaMemcpyAsync, cudaMemcpyAsync_ptsz = CudaMemcpyAsyncPtsz;
    (dst: *mut c_void, src: *const c_void, count: usize, kind: RawKind, stream: cudaStream_t)
}

// ---- cudaMemcpy2D -----------------------------------------------------------------------

/// The body of `cudaMemcpy2D` and `cudaMemcpy2D_ptds`.
///
/// # Safety
/// `f` is the real `cudaMemcpy2D` (or its variant) and the other arguments are the
/// caller's, valid for it: they are forwarded unchanged.
#[allow(clippy::too_many_arguments)]
unsafe fn memcpy_2d(
    api: Api,
    f: Memcpy2DFn,
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    w: usize,
    h: usize,
    k: RawKind,
    ptds: bool,
) -> RawError {
    let bytes = (w as u64).saturating_mul(h as u64);
    hook(
        || {
            per_thread(
                classify::sync_copy(api, direction(k, dst, src), bytes, sync_stream(ptds)),
                ptds,
            )
        },
        // SAFETY: `f` is the real function and these are the caller's arguments,
        // unchanged (this function's `# Safety`).
        || unsafe { f(dst, dpitch, src, spitch, w, h, k) },
    )
}

export_pair! {
    memcpy_2d: Memcpy2DFn;
    cudaMemcpy2D = CudaMemcpy2D, cudaMemcpy2D_ptds = CudaMemcpy2DPtds;
    (
        dst: *mut c_void,
        dpitch: usize,
        src: *const c_void,
        spitch: usize,
        width: usize,
        height: usize,
        kind: RawKind,
    )
}

/// The body of `cudaMemcpy2DAsync` and `cudaMemcpy2DAsync_ptsz`.
///
/// # Safety
/// `f` is the real `cudaMemcpy2DAsync` (or its variant) and the other arguments are the
/// caller's, valid for it: they are forwarded unchanged.
#[allow(clippy::too_many_arguments)]
unsafe fn memcpy_2d_async(
    api: Api,
    f: Memcpy2DAsyncFn,
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    w: usize,
    h: usize,
    k: RawKind,
    s: cudaStream_t,
    ptsz: bool,
) -> RawError {
    let bytes = (w as u64).saturating_mul(h as u64);
    // The host side spans the pitched rows, not just width × height.
    let span = |pitch: usize| {
        (pitch as u64)
            .saturating_mul(h.saturating_sub(1) as u64)
            .saturating_add(w as u64)
    };
    hook(
        || {
            let d = direction(k, dst, src);
            let mut c = classify::async_copy(api, d, dst, src, span(spitch.max(dpitch)), s as u64);
            c.bytes = bytes;
            per_thread(c, ptsz)
        },
        // SAFETY: `f` is the real function and these are the caller's arguments,
        // unchanged (this function's `# Safety`).
        || unsafe { f(dst, dpitch, src, spitch, w, h, k, s) },
    )
}

export_pair! {
    memcpy_2d_async: Memcpy2DAsyncFn;
    cudaMemcpy2DAsync = CudaMemcpy2DAsync, cudaMemcpy2DAsync_ptsz = CudaMemcpy2DAsyncPtsz;
    (
        dst: *mut c_void,
        dpitch: usize,
        src: *const c_void,
        spitch: usize,
        width: usize,
        height: usize,
        kind: RawKind,
        stream: cudaStream_t,
    )
}

// ---- cudaMemcpy3D -----------------------------------------------------------------------

/// What a `cudaMemcpy3DParms` moves: direction, bytes, and the host pointers to check.
/// Array sides are device memory. With arrays, `extent.width` counts elements, so bytes are
/// a lower bound there.
///
/// # Safety
/// `p` is null or points to a valid `cudaMemcpy3DParms`.
unsafe fn describe_3d(
    p: *const cudaMemcpy3DParms,
) -> (Direction, u64, *const c_void, *const c_void) {
    if p.is_null() {
        return (Direction::None, 0, std::ptr::null(), std::ptr::null());
    }
    // Fields are read one by one through raw pointers: no reference to the whole struct is
    // made, since its `kind` is a Rust enum that the caller may have set to any integer.
    // SAFETY: non-null and valid per the contract.
    let (src_array, dst_array, src_ptr, dst_ptr, extent, kind) = unsafe {
        (
            std::ptr::addr_of!((*p).srcArray).read(),
            std::ptr::addr_of!((*p).dstArray).read(),
            std::ptr::addr_of!((*p).srcPtr).read(),
            std::ptr::addr_of!((*p).dstPtr).read(),
            std::ptr::addr_of!((*p).extent).read(),
            std::ptr::addr_of!((*p).kind).cast::<u32>().read(),
        )
    };
    let bytes = (extent.width as u64)
        .saturating_mul(extent.height.max(1) as u64)
        .saturating_mul(extent.depth.max(1) as u64);
    let (src, dst) = (src_ptr.ptr as *const c_void, dst_ptr.ptr as *const c_void);
    let d = match (src_array.is_null(), dst_array.is_null()) {
        (true, true) => direction(kind, dst, src),
        (false, false) => Direction::DeviceToDevice,
        (false, true) => match direction(kind, dst, std::ptr::null()) {
            Direction::HostToHost | Direction::DeviceToHost => Direction::DeviceToHost,
            _ => Direction::DeviceToDevice,
        },
        (true, false) => match direction(kind, std::ptr::null(), src) {
            Direction::HostToHost | Direction::HostToDevice => Direction::HostToDevice,
            _ => Direction::DeviceToDevice,
        },
    };
    (d, bytes, dst, src)
}

/// The body of `cudaMemcpy3D` and `cudaMemcpy3D_ptds`.
///
/// # Safety
/// `f` is the real `cudaMemcpy3D` (or its variant) and the other arguments are the caller's,
/// valid for it: they are forwarded unchanged. `p` is also read here, so it is null or points
/// to a valid `cudaMemcpy3DParms` (the runtime requires no less).
unsafe fn memcpy_3d(api: Api, f: Memcpy3DFn, p: *const cudaMemcpy3DParms, ptds: bool) -> RawError {
    hook(
        || {
            // SAFETY: `p` is null or points to a valid parameter block (this function's
            // `# Safety`), which is all `describe_3d` requires.
            let (d, bytes, _, _) = unsafe { describe_3d(p) };
            per_thread(classify::sync_copy(api, d, bytes, sync_stream(ptds)), ptds)
        },
        // SAFETY: `f` is the real function and these are the caller's arguments,
        // unchanged (this function's `# Safety`).
        || unsafe { f(p) },
    )
}

export_pair! {
    memcpy_3d: Memcpy3DFn;
    cudaMemcpy3D = CudaMemcpy3D, cudaMemcpy3D_ptds = CudaMemcpy3DPtds;
    (p: *const cudaMemcpy3DParms)
}

/// The body of `cudaMemcpy3DAsync` and `cudaMemcpy3DAsync_ptsz`.
///
/// # Safety
/// `f` is the real `cudaMemcpy3DAsync` (or its variant) and the other arguments are the caller's,
/// valid for it: they are forwarded unchanged. `p` is also read here, so it is null or points
/// to a valid `cudaMemcpy3DParms` (the runtime requires no less).
unsafe fn memcpy_3d_async(
    api: Api,
    f: Memcpy3DAsyncFn,
    p: *const cudaMemcpy3DParms,
    s: cudaStream_t,
    ptsz: bool,
) -> RawError {
    hook(
        || {
            // SAFETY: `p` is null or points to a valid parameter block (this function's
            // `# Safety`), which is all `describe_3d` requires.
            let (d, bytes, dst, src) = unsafe { describe_3d(p) };
            per_thread(
                classify::async_copy(api, d, dst, src, bytes, s as u64),
                ptsz,
            )
        },
        // SAFETY: `f` is the real function and these are the caller's arguments,
        // unchanged (this function's `# Safety`).
        || unsafe { f(p, s) },
    )
}

export_pair! {
    memcpy_3d_async: Memcpy3DAsyncFn;
    cudaMemcpy3DAsync = CudaMemcpy3DAsync, cudaMemcpy3DAsync_ptsz = CudaMemcpy3DAsyncPtsz;
    (p: *const cudaMemcpy3DParms, stream: cudaStream_t)
}

// ---- symbols ----------------------------------------------------------------------------

/// The body of `cudaMemcpyToSymbol` and `cudaMemcpyToSymbol_ptds`.
///
/// # Safety
/// `f` is the real `cudaMemcpyToSymbol` (or its variant) and the other arguments are the
/// caller's, valid for it: they are forwarded unchanged.
#[allow(clippy::too_many_arguments)]
unsafe fn to_symbol(
    api: Api,
    f: ToSymbolFn,
    sym: *const c_void,
    src: *const c_void,
    n: usize,
    off: usize,
    k: RawKind,
    ptds: bool,
) -> RawError {
    hook(
        || {
            per_thread(
                classify::sync_copy(
                    api,
                    symbol_direction(k, true, src),
                    n as u64,
                    sync_stream(ptds),
                ),
                ptds,
            )
        },
        // SAFETY: `f` is the real function and these are the caller's arguments,
        // unchanged (this function's `# Safety`).
        || unsafe { f(sym, src, n, off, k) },
    )
}

export_pair! {
    to_symbol: ToSymbolFn;
    cudaMemcpyToSymbol = CudaMemcpyToSymbol, cudaMemcpyToSymbol_ptds = CudaMemcpyToSymbolPtds;
    (sym: *const c_void, src: *const c_void, count: usize, offset: usize, kind: RawKind)
}

/// The body of `cudaMemcpyFromSymbol` and `cudaMemcpyFromSymbol_ptds`.
///
/// # Safety
/// `f` is the real `cudaMemcpyFromSymbol` (or its variant) and the other arguments are the
/// caller's, valid for it: they are forwarded unchanged.
#[allow(clippy::too_many_arguments)]
unsafe fn from_symbol(
    api: Api,
    f: FromSymbolFn,
    dst: *mut c_void,
    sym: *const c_void,
    n: usize,
    off: usize,
    k: RawKind,
    ptds: bool,
) -> RawError {
    hook(
        || {
            per_thread(
                classify::sync_copy(
                    api,
                    symbol_direction(k, false, dst),
                    n as u64,
                    sync_stream(ptds),
                ),
                ptds,
            )
        },
        // SAFETY: `f` is the real function and these are the caller's arguments,
        // unchanged (this function's `# Safety`).
        || unsafe { f(dst, sym, n, off, k) },
    )
}

export_pair! {
    from_symbol: FromSymbolFn;
    cudaMemcpyFromSymbol = CudaMemcpyFromSymbol,
    cudaMemcpyFromSymbol_ptds = CudaMemcpyFromSymbolPtds;
    (dst: *mut c_void, sym: *const c_void, count: usize, offset: usize, kind: RawKind)
}

/// The body of `cudaMemcpyToSymbolAsync` and `cudaMemcpyToSymbolAsync_ptsz`.
///
/// # Safety
/// `f` is the real `cudaMemcpyToSymbolAsync` (or its variant) and the other arguments are the
/// caller's, valid for it: they are forwarded unchanged.
#[allow(clippy::too_many_arguments)]
unsafe fn to_symbol_async(
    api: Api,
    f: ToSymbolAsyncFn,
    sym: *const c_void,
    src: *const c_void,
    n: usize,
    off: usize,
    k: RawKind,
    s: cudaStream_t,
    ptsz: bool,
) -> RawError {
    hook(
        || {
            let d = symbol_direction(k, true, src);
            per_thread(
                classify::async_copy(api, d, std::ptr::null(), src, n as u64, s as u64),
                ptsz,
            )
        },
        // SAFETY: `f` is the real function and these are the caller's arguments,
        // unchanged (this function's `# Safety`).
        || unsafe { f(sym, src, n, off, k, s) },
    )
}

export_pair! {
    to_symbol_async: ToSymbolAsyncFn;
    cudaMemcpyToSymbolAsync = CudaMemcpyToSymbolAsync,
    cudaMemcpyToSymbolAsync_ptsz = CudaMemcpyToSymbolAsyncPtsz;
    (
        sym: *const c_void,
        src: *const c_void,
        count: usize,
        offset: usize,
        kind: RawKind,
        stream: cudaStream_t,
    )
}

/// The body of `cudaMemcpyFromSymbolAsync` and `cudaMemcpyFromSymbolAsync_ptsz`.
///
/// # Safety
/// `f` is the real `cudaMemcpyFromSymbolAsync` (or its variant) and the other arguments are the
/// caller's, valid for it: they are forwarded unchanged.
#[allow(clippy::too_many_arguments)]
unsafe fn from_symbol_async(
    api: Api,
    f: FromSymbolAsyncFn,
    dst: *mut c_void,
    sym: *const c_void,
    n: usize,
    off: usize,
    k: RawKind,
    s: cudaStream_t,
    ptsz: bool,
) -> RawError {
    hook(
        || {
            let d = symbol_direction(k, false, dst);
            per_thread(
                classify::async_copy(api, d, dst, std::ptr::null(), n as u64, s as u64),
                ptsz,
            )
        },
        // SAFETY: `f` is the real function and these are the caller's arguments,
        // unchanged (this function's `# Safety`).
        || unsafe { f(dst, sym, n, off, k, s) },
    )
}

export_pair! {
    from_symbol_async: FromSymbolAsyncFn;
    cudaMemcpyFromSymbolAsync = CudaMemcpyFromSymbolAsync,
    cudaMemcpyFromSymbolAsync_ptsz = CudaMemcpyFromSymbolAsyncPtsz;
    (
        dst: *mut c_void,
        sym: *const c_void,
        count: usize,
        offset: usize,
        kind: RawKind,
        stream: cudaStream_t,
    )
}

// ---- peer -------------------------------------------------------------------------------

/// # Safety
/// Same contract as the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMemcpyPeer(
    dst: *mut c_void,
    dst_device: c_int,
    src: *const c_void,
    src_device: c_int,
    count: usize,
) -> RawError {
    let f = real!(c"cudaMemcpyPeer", PeerFn);
    hook(
        || {
            classify::sync_copy(
                Api::CudaMemcpyPeer,
                Direction::DeviceToDevice,
                count as u64,
                0,
            )
        },
        // SAFETY: `f` is the real `cudaMemcpyPeer` and gets our caller's arguments
        // unchanged; the caller upholds its contract (this function's `# Safety`).
        || unsafe { f(dst, dst_device, src, src_device, count) },
    )
}
