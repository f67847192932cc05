//! Copies: linear, 2D, 3D (pitched pointers only), to and from symbols, between devices, in
//! their synchronous, asynchronous and per-thread-default-stream forms. Which of them block the
//! caller is decided in `transfer.rs`.
//!
//! Symbols: the simulator has no module registration (no `__cudaRegisterVar`), so a `symbol`
//! argument is taken to be device memory from `cudaMalloc`/`cudaMallocManaged`, and anything
//! else is `cudaErrorInvalidSymbol`. (The real runtime answers `cudaErrorInvalidSymbol` for a
//! `cudaMalloc` pointer, since it is no registered variable.)
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void};
use std::ptr::addr_of;

use cudarc::runtime::sys::{
    cudaError_t, cudaMemcpy3DParms, cudaMemcpyKind, cudaPitchedPtr, cudaPos, cudaStream_t,
};

use super::entry;
use crate::error::CudaResult;
use crate::runtime::runtime;
use crate::transfer::{memcpy_kind, CopyPlan, Form, StreamArg};
use crate::work::Shape;

fn copy(
    dst: *mut c_void,
    src: *const c_void,
    shape: Shape,
    kind: u32,
    stream: StreamArg,
    form: Form,
) -> CudaResult {
    let kind = memcpy_kind(kind)?;
    let rt = runtime();
    let plan = CopyPlan::new(&rt.memory(), dst.cast(), src.cast(), shape, kind)?;
    plan.map_or(Ok(()), |plan| plan.submit(rt, stream, form))
}

/// The shape of a 2D copy: rows may not be wider than either pitch.
fn planar(width: usize, height: usize, dpitch: usize, spitch: usize) -> CudaResult<Shape> {
    if width > dpitch || width > spitch {
        return Err(cudaError_t::cudaErrorInvalidPitchValue);
    }
    Ok(Shape::planar(width, height, dpitch, spitch))
}

/// Address of `pos` in a pitched allocation, and its slice pitch; checks that a box of
/// `extent` rows starting there stays inside each slice.
fn pitched_origin(
    ptr: cudaPitchedPtr,
    pos: cudaPos,
    width: usize,
    height: usize,
    depth: usize,
) -> CudaResult<(*mut c_void, usize)> {
    let invalid = cudaError_t::cudaErrorInvalidValue;
    if width > 0 && pos.x.checked_add(width).is_none_or(|end| end > ptr.pitch) {
        return Err(cudaError_t::cudaErrorInvalidPitchValue);
    }
    if depth > 1 && pos.y.checked_add(height).is_none_or(|end| end > ptr.ysize) {
        return Err(invalid);
    }
    let slice = ptr.pitch.checked_mul(ptr.ysize).ok_or(invalid)?;
    let offset = pos
        .z
        .checked_mul(slice)
        .and_then(|o| o.checked_add(pos.y.checked_mul(ptr.pitch)?))
        .and_then(|o| o.checked_add(pos.x))
        .ok_or(invalid)?;
    Ok((
        (ptr.ptr as usize).wrapping_add(offset) as *mut c_void,
        slice,
    ))
}

/// # Safety
/// `p` is null or points to a readable `cudaMemcpy3DParms`.
unsafe fn copy_3d(p: *const cudaMemcpy3DParms, stream: StreamArg, form: Form) -> CudaResult {
    if p.is_null() {
        return Err(cudaError_t::cudaErrorInvalidValue);
    }
    // SAFETY: `p` is readable (caller's contract). `kind` is read as its u32 representation,
    // since the program may have stored a value outside the enum.
    let (params, kind) = unsafe {
        (
            (
                (*p).srcArray,
                (*p).dstArray,
                (*p).srcPtr,
                (*p).srcPos,
                (*p).dstPtr,
                (*p).dstPos,
                (*p).extent,
            ),
            addr_of!((*p).kind).cast::<u32>().read(),
        )
    };
    let (src_array, dst_array, src_ptr, src_pos, dst_ptr, dst_pos, extent) = params;
    if !src_array.is_null() || !dst_array.is_null() {
        // CUDA arrays are not simulated.
        return Err(cudaError_t::cudaErrorInvalidValue);
    }
    let (w, h, d) = (extent.width, extent.height, extent.depth);
    let (dst, dst_slice) = pitched_origin(dst_ptr, dst_pos, w, h, d)?;
    let (src, src_slice) = pitched_origin(src_ptr, src_pos, w, h, d)?;
    let shape = Shape {
        width: w,
        height: h,
        depth: d,
        dst_pitch: dst_ptr.pitch,
        dst_slice,
        src_pitch: src_ptr.pitch,
        src_slice,
    };
    copy(dst, src, shape, kind, stream, form)
}

/// Device address `offset` bytes into `symbol`, which must be device memory.
fn symbol_address(symbol: *const c_void, offset: usize) -> CudaResult<usize> {
    let base = symbol as usize;
    match runtime().memory().find(base) {
        Some(a) if a.kind.is_device() => base
            .checked_add(offset)
            .ok_or(cudaError_t::cudaErrorInvalidValue),
        _ => Err(cudaError_t::cudaErrorInvalidSymbol),
    }
}

/// A copy to or from a symbol accepts its one host direction (`host`), device-to-device and
/// default.
fn symbol_kind(kind: u32, host: cudaMemcpyKind) -> Result<(), cudaError_t> {
    use cudaMemcpyKind::*;
    let parsed = memcpy_kind(kind)?;
    if parsed == host || matches!(parsed, cudaMemcpyDeviceToDevice | cudaMemcpyDefault) {
        Ok(())
    } else {
        Err(cudaError_t::cudaErrorInvalidMemcpyDirection)
    }
}

fn to_symbol(
    symbol: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: u32,
    stream: StreamArg,
    form: Form,
) -> CudaResult {
    symbol_kind(kind, cudaMemcpyKind::cudaMemcpyHostToDevice)?;
    let dst = symbol_address(symbol, offset)? as *mut c_void;
    copy(dst, src, Shape::linear(count), kind, stream, form)
}

fn from_symbol(
    dst: *mut c_void,
    symbol: *const c_void,
    count: usize,
    offset: usize,
    kind: u32,
    stream: StreamArg,
    form: Form,
) -> CudaResult {
    symbol_kind(kind, cudaMemcpyKind::cudaMemcpyDeviceToHost)?;
    let src = symbol_address(symbol, offset)? as *const c_void;
    copy(dst, src, Shape::linear(count), kind, stream, form)
}

fn peer(
    dst: *mut c_void,
    dst_device: c_int,
    src: *const c_void,
    src_device: c_int,
    count: usize,
    stream: StreamArg,
    form: Form,
) -> CudaResult {
    let rt = runtime();
    let dst_device = rt.device_index(dst_device)?;
    let src_device = rt.device_index(src_device)?;
    let plan = CopyPlan::peer(
        &rt.memory(),
        dst.cast(),
        dst_device,
        src.cast(),
        src_device,
        count,
    )?;
    plan.map_or(Ok(()), |plan| plan.submit(rt, stream, form))
}

fn sync(per_thread_default: bool) -> StreamArg {
    StreamArg::default_stream(per_thread_default)
}

fn on(stream: cudaStream_t, per_thread_default: bool) -> StreamArg {
    StreamArg {
        handle: stream,
        per_thread_default,
    }
}

/// `cudaMemcpy`.
///
/// # Safety
/// `dst` and `src` are valid for `count` bytes, as CUDA requires.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpy(
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: u32,
) -> cudaError_t {
    if let (Some(r), Some(i)) = (super::driver::route(), super::driver::copy_index(kind)) {
        return super::driver::copy_via(r, i, false, dst, src, count);
    }
    entry(|| {
        copy(
            dst,
            src,
            Shape::linear(count),
            kind,
            sync(false),
            Form::Sync,
        )
    })
}

/// `cudaMemcpy_ptds`: `cudaMemcpy` ordered in the per-thread default stream.
///
/// # Safety
/// As [`cudaMemcpy`].
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpy_ptds(
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: u32,
) -> cudaError_t {
    if let (Some(r), Some(i)) = (super::driver::route(), super::driver::copy_index(kind)) {
        return super::driver::copy_via(r, i, true, dst, src, count);
    }
    entry(|| copy(dst, src, Shape::linear(count), kind, sync(true), Form::Sync))
}

/// `cudaMemcpyAsync`.
///
/// # Safety
/// `dst` and `src` are valid for `count` bytes until the copy completes, as CUDA requires.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyAsync(
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: u32,
    stream: cudaStream_t,
) -> cudaError_t {
    if let (Some(r), Some(i)) = (super::driver::route(), super::driver::copy_index(kind)) {
        return super::driver::copy_async_via(r, i, false, dst, src, count, stream);
    }
    entry(|| {
        copy(
            dst,
            src,
            Shape::linear(count),
            kind,
            on(stream, false),
            Form::Async,
        )
    })
}

/// `cudaMemcpyAsync_ptsz`: stream 0 is the per-thread default stream.
///
/// # Safety
/// As [`cudaMemcpyAsync`].
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyAsync_ptsz(
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: u32,
    stream: cudaStream_t,
) -> cudaError_t {
    if let (Some(r), Some(i)) = (super::driver::route(), super::driver::copy_index(kind)) {
        return super::driver::copy_async_via(r, i, true, dst, src, count, stream);
    }
    entry(|| {
        copy(
            dst,
            src,
            Shape::linear(count),
            kind,
            on(stream, true),
            Form::Async,
        )
    })
}

/// `cudaMemcpy2D`.
///
/// # Safety
/// `dst` and `src` are valid for their pitched extents, as CUDA requires.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpy2D(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: u32,
) -> cudaError_t {
    entry(|| {
        let shape = planar(width, height, dpitch, spitch)?;
        copy(dst, src, shape, kind, sync(false), Form::Sync)
    })
}

/// `cudaMemcpy2D_ptds`.
///
/// # Safety
/// As [`cudaMemcpy2D`].
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpy2D_ptds(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: u32,
) -> cudaError_t {
    entry(|| {
        let shape = planar(width, height, dpitch, spitch)?;
        copy(dst, src, shape, kind, sync(true), Form::Sync)
    })
}

/// `cudaMemcpy2DAsync`.
///
/// # Safety
/// As [`cudaMemcpy2D`], until the copy completes.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // the C signature
pub unsafe extern "C" fn cudaMemcpy2DAsync(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: u32,
    stream: cudaStream_t,
) -> cudaError_t {
    entry(|| {
        let shape = planar(width, height, dpitch, spitch)?;
        copy(dst, src, shape, kind, on(stream, false), Form::Async)
    })
}

/// `cudaMemcpy2DAsync_ptsz`.
///
/// # Safety
/// As [`cudaMemcpy2DAsync`].
#[no_mangle]
#[allow(clippy::too_many_arguments)] // the C signature
pub unsafe extern "C" fn cudaMemcpy2DAsync_ptsz(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: u32,
    stream: cudaStream_t,
) -> cudaError_t {
    entry(|| {
        let shape = planar(width, height, dpitch, spitch)?;
        copy(dst, src, shape, kind, on(stream, true), Form::Async)
    })
}

/// `cudaMemcpy3D`: pitched pointers only; CUDA arrays give `cudaErrorInvalidValue`.
///
/// # Safety
/// `p` is null or a readable `cudaMemcpy3DParms` whose pointers are valid for their extents.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpy3D(p: *const cudaMemcpy3DParms) -> cudaError_t {
    // SAFETY: the caller's contract.
    entry(|| unsafe { copy_3d(p, sync(false), Form::Sync) })
}

/// `cudaMemcpy3D_ptds`.
///
/// # Safety
/// As [`cudaMemcpy3D`].
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpy3D_ptds(p: *const cudaMemcpy3DParms) -> cudaError_t {
    // SAFETY: the caller's contract.
    entry(|| unsafe { copy_3d(p, sync(true), Form::Sync) })
}

/// `cudaMemcpy3DAsync`.
///
/// # Safety
/// As [`cudaMemcpy3D`], until the copy completes.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpy3DAsync(
    p: *const cudaMemcpy3DParms,
    stream: cudaStream_t,
) -> cudaError_t {
    // SAFETY: the caller's contract.
    entry(|| unsafe { copy_3d(p, on(stream, false), Form::Async) })
}

/// `cudaMemcpy3DAsync_ptsz`.
///
/// # Safety
/// As [`cudaMemcpy3DAsync`].
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpy3DAsync_ptsz(
    p: *const cudaMemcpy3DParms,
    stream: cudaStream_t,
) -> cudaError_t {
    // SAFETY: the caller's contract.
    entry(|| unsafe { copy_3d(p, on(stream, true), Form::Async) })
}

/// `cudaMemcpyToSymbol`: `symbol` must be device memory (see the module documentation).
///
/// # Safety
/// `src` is valid for `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyToSymbol(
    symbol: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: u32,
) -> cudaError_t {
    entry(|| to_symbol(symbol, src, count, offset, kind, sync(false), Form::Sync))
}

/// `cudaMemcpyToSymbol_ptds`.
///
/// # Safety
/// As [`cudaMemcpyToSymbol`].
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyToSymbol_ptds(
    symbol: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: u32,
) -> cudaError_t {
    entry(|| to_symbol(symbol, src, count, offset, kind, sync(true), Form::Sync))
}

/// `cudaMemcpyToSymbolAsync`.
///
/// # Safety
/// As [`cudaMemcpyToSymbol`], until the copy completes.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyToSymbolAsync(
    symbol: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: u32,
    stream: cudaStream_t,
) -> cudaError_t {
    entry(|| {
        to_symbol(
            symbol,
            src,
            count,
            offset,
            kind,
            on(stream, false),
            Form::Async,
        )
    })
}

/// `cudaMemcpyToSymbolAsync_ptsz`.
///
/// # Safety
/// As [`cudaMemcpyToSymbolAsync`].
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyToSymbolAsync_ptsz(
    symbol: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: u32,
    stream: cudaStream_t,
) -> cudaError_t {
    entry(|| {
        to_symbol(
            symbol,
            src,
            count,
            offset,
            kind,
            on(stream, true),
            Form::Async,
        )
    })
}

/// `cudaMemcpyFromSymbol`: `symbol` must be device memory (see the module documentation).
///
/// # Safety
/// `dst` is valid for `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyFromSymbol(
    dst: *mut c_void,
    symbol: *const c_void,
    count: usize,
    offset: usize,
    kind: u32,
) -> cudaError_t {
    entry(|| from_symbol(dst, symbol, count, offset, kind, sync(false), Form::Sync))
}

/// `cudaMemcpyFromSymbol_ptds`.
///
/// # Safety
/// As [`cudaMemcpyFromSymbol`].
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyFromSymbol_ptds(
    dst: *mut c_void,
    symbol: *const c_void,
    count: usize,
    offset: usize,
    kind: u32,
) -> cudaError_t {
    entry(|| from_symbol(dst, symbol, count, offset, kind, sync(true), Form::Sync))
}

/// `cudaMemcpyFromSymbolAsync`.
///
/// # Safety
/// As [`cudaMemcpyFromSymbol`], until the copy completes.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyFromSymbolAsync(
    dst: *mut c_void,
    symbol: *const c_void,
    count: usize,
    offset: usize,
    kind: u32,
    stream: cudaStream_t,
) -> cudaError_t {
    entry(|| {
        from_symbol(
            dst,
            symbol,
            count,
            offset,
            kind,
            on(stream, false),
            Form::Async,
        )
    })
}

/// `cudaMemcpyFromSymbolAsync_ptsz`.
///
/// # Safety
/// As [`cudaMemcpyFromSymbolAsync`].
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyFromSymbolAsync_ptsz(
    dst: *mut c_void,
    symbol: *const c_void,
    count: usize,
    offset: usize,
    kind: u32,
    stream: cudaStream_t,
) -> cudaError_t {
    entry(|| {
        from_symbol(
            dst,
            symbol,
            count,
            offset,
            kind,
            on(stream, true),
            Form::Async,
        )
    })
}

/// `cudaMemcpyPeer`: between device memory of two devices, ordered in the legacy default
/// stream of the current device; does not block the caller.
///
/// # Safety
/// `dst` and `src` are valid for `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyPeer(
    dst: *mut c_void,
    dst_device: c_int,
    src: *const c_void,
    src_device: c_int,
    count: usize,
) -> cudaError_t {
    entry(|| {
        peer(
            dst,
            dst_device,
            src,
            src_device,
            count,
            sync(false),
            Form::Sync,
        )
    })
}

/// `cudaMemcpyPeerAsync`.
///
/// # Safety
/// As [`cudaMemcpyPeer`], until the copy completes.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyPeerAsync(
    dst: *mut c_void,
    dst_device: c_int,
    src: *const c_void,
    src_device: c_int,
    count: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    entry(|| {
        peer(
            dst,
            dst_device,
            src,
            src_device,
            count,
            on(stream, false),
            Form::Async,
        )
    })
}
