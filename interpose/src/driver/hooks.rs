//! The bodies of the driver wrappers, the wrapper instances `dlsym` and `cuGetProcAddress`
//! hand out, and the exported driver symbols for programs linked against libcuda.
//!
//! Classification is the runtime hooks' (`classify.rs`): the same kinds for the same waits.
//! Driver copies name their direction by function (`HtoD`, `DtoH`) or by memory types
//! (`cuMemcpy`, the 2D/3D descriptors); unified pointers are asked of the driver or runtime
//! (`pinned::memory_type`). Return values are handled as raw `CUresult` integers.

// The exported names are the CUDA driver's.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_uint, c_void};

use cudarc::driver::sys::{
    CUcontext, CUdeviceptr, CUdriverProcAddressQueryResult, CUevent, CUfunction, CUgraphExec,
    CUlaunchConfig, CUmemorytype, CUstream, CUDA_MEMCPY2D, CUDA_MEMCPY3D,
};
use syncspy_abi::{Api, Direction, Kind};

use super::{slot_fn, Family, INSTANCES, PTDS_BASE};
use crate::call::Call;
use crate::classify;
use crate::entry::{self, hook, hook_query};
use crate::guard;
use crate::hooks::memcpy::{per_thread, sync_stream};
use crate::pinned;
use crate::real::{Real, DRIVER_MISSING};
use syncspy_abi::record::FLAG_PER_THREAD;

/// `CUresult` as the C ABI carries it.
pub type RawResult = u32;

type CtxSyncFn = unsafe extern "C" fn(CUcontext) -> RawResult;
type CtxSyncV1Fn = unsafe extern "C" fn() -> RawResult;
type StreamFn = unsafe extern "C" fn(CUstream) -> RawResult;
type EventFn = unsafe extern "C" fn(CUevent) -> RawResult;
type MemcpyFn = unsafe extern "C" fn(CUdeviceptr, CUdeviceptr, usize) -> RawResult;
type HtoDFn = unsafe extern "C" fn(CUdeviceptr, *const c_void, usize) -> RawResult;
type DtoHFn = unsafe extern "C" fn(*mut c_void, CUdeviceptr, usize) -> RawResult;
type Memcpy2DFn = unsafe extern "C" fn(*const CUDA_MEMCPY2D) -> RawResult;
type Memcpy3DFn = unsafe extern "C" fn(*const CUDA_MEMCPY3D) -> RawResult;
type MemcpyAsyncFn = unsafe extern "C" fn(CUdeviceptr, CUdeviceptr, usize, CUstream) -> RawResult;
type HtoDAsyncFn = unsafe extern "C" fn(CUdeviceptr, *const c_void, usize, CUstream) -> RawResult;
type DtoHAsyncFn = unsafe extern "C" fn(*mut c_void, CUdeviceptr, usize, CUstream) -> RawResult;
type Memcpy2DAsyncFn = unsafe extern "C" fn(*const CUDA_MEMCPY2D, CUstream) -> RawResult;
type Memcpy3DAsyncFn = unsafe extern "C" fn(*const CUDA_MEMCPY3D, CUstream) -> RawResult;
type FreeFn = unsafe extern "C" fn(CUdeviceptr) -> RawResult;
type HostPtrFn = unsafe extern "C" fn(*mut c_void) -> RawResult;
type AllocHostFn = unsafe extern "C" fn(*mut *mut c_void, usize) -> RawResult;
type HostAllocFn = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> RawResult;
type HostRegisterFn = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> RawResult;
pub type LaunchHostFuncFn =
    unsafe extern "C" fn(CUstream, Option<crate::hostwait::HostFn>, *mut c_void) -> RawResult;
pub type LaunchKernelFn = unsafe extern "C" fn(
    CUfunction,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    CUstream,
    *mut *mut c_void,
    *mut *mut c_void,
) -> RawResult;
type LaunchCooperativeFn = unsafe extern "C" fn(
    CUfunction,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    CUstream,
    *mut *mut c_void,
) -> RawResult;
type LaunchKernelExFn = unsafe extern "C" fn(
    *const CUlaunchConfig,
    CUfunction,
    *mut *mut c_void,
    *mut *mut c_void,
) -> RawResult;
type GraphLaunchFn = unsafe extern "C" fn(CUgraphExec, CUstream) -> RawResult;
type GetProcFn = unsafe extern "C" fn(*const c_char, *mut *mut c_void, i32, u64) -> RawResult;
type GetProcV2Fn = unsafe extern "C" fn(
    *const c_char,
    *mut *mut c_void,
    i32,
    u64,
    *mut CUdriverProcAddressQueryResult,
) -> RawResult;

/// One side of a copy: host memory at an address, or device memory.
#[derive(Clone, Copy)]
enum Side {
    Host(u64),
    Device,
}

/// The side of a unified-addressing pointer, from what the driver (or runtime) says it is.
fn unified(addr: u64) -> Side {
    if classify::is_device_side(addr) {
        Side::Device
    } else {
        Side::Host(addr)
    }
}

/// The side a 2D/3D descriptor names, from its raw `CUmemorytype` (arrays are device memory;
/// an unknown type is taken as device memory, so no host side is guessed).
fn described(memtype: u32, host: u64, device: u64) -> Side {
    match memtype {
        t if t == CUmemorytype::CU_MEMORYTYPE_HOST as u32 => Side::Host(host),
        t if t == CUmemorytype::CU_MEMORYTYPE_UNIFIED as u32 => unified(device),
        _ => Side::Device,
    }
}

/// Direction and the host addresses (destination, source; 0 for device sides) of a copy.
fn direction(src: Side, dst: Side) -> (Direction, u64, u64) {
    match (src, dst) {
        (Side::Host(s), Side::Device) => (Direction::HostToDevice, 0, s),
        (Side::Device, Side::Host(d)) => (Direction::DeviceToHost, d, 0),
        (Side::Device, Side::Device) => (Direction::DeviceToDevice, 0, 0),
        (Side::Host(s), Side::Host(d)) => (Direction::HostToHost, d, s),
    }
}

fn sync_copy(api: Api, src: Side, dst: Side, bytes: u64, ptds: bool) -> Call {
    let (dir, ..) = direction(src, dst);
    per_thread(
        classify::sync_copy(api, dir, bytes, sync_stream(ptds)),
        ptds,
    )
}

fn async_copy(api: Api, src: Side, dst: Side, bytes: u64, stream: CUstream, ptds: bool) -> Call {
    let (dir, d, s) = direction(src, dst);
    let call = classify::async_copy(
        api,
        dir,
        d as *const c_void,
        s as *const c_void,
        bytes,
        stream as u64,
    );
    per_thread(call, ptds)
}

/// Whether this thread is already inside a recorded call (a runtime function calling the
/// driver): then the driver call is the runtime call's own work, forwarded untouched.
#[inline(always)]
fn nested() -> bool {
    guard::in_hook()
}

/// # Safety
/// `f` is the real `cuCtxSynchronize` (either version: `ctx` is forwarded whatever it is,
/// and the first version ignores it) and `ctx` the caller's.
unsafe fn ctx_sync(f: CtxSyncFn, ctx: CUcontext, _ptds: bool) -> RawResult {
    hook(
        || Call::new(Kind::DeviceSync, Api::CuCtxSynchronize),
        // SAFETY: the caller's arguments to the real function (this function's `# Safety`).
        || unsafe { f(ctx) },
    )
}

/// # Safety
/// `f` is the real `cuStreamSynchronize` (or `_ptsz`) and `stream` the caller's.
unsafe fn stream_sync(f: StreamFn, stream: CUstream, ptds: bool) -> RawResult {
    hook(
        || {
            per_thread(
                Call {
                    stream: stream as u64,
                    ..Call::new(Kind::StreamSync, Api::CuStreamSynchronize)
                },
                ptds,
            )
        },
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(stream) },
    )
}

/// # Safety
/// `f` is the real `cuEventSynchronize` and `event` the caller's.
unsafe fn event_sync(f: EventFn, event: CUevent, _ptds: bool) -> RawResult {
    hook(
        || Call::new(Kind::EventSync, Api::CuEventSynchronize),
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(event) },
    )
}

/// # Safety
/// `f` is the real `cuStreamQuery` (or `_ptsz`) and `stream` the caller's.
unsafe fn stream_query(f: StreamFn, stream: CUstream, ptds: bool) -> RawResult {
    let flags = if ptds { FLAG_PER_THREAD } else { 0 };
    // SAFETY: as in `ctx_sync`.
    hook_query(Api::CuStreamQuery, stream as u64, flags, || unsafe {
        f(stream)
    })
}

/// # Safety
/// `f` is the real `cuEventQuery` and `event` the caller's.
unsafe fn event_query(f: EventFn, event: CUevent, _ptds: bool) -> RawResult {
    // SAFETY: as in `ctx_sync`.
    hook_query(Api::CuEventQuery, event as u64, 0, || unsafe { f(event) })
}

/// # Safety
/// `f` is the real `cuMemcpy` (or `_ptds`); the arguments are the caller's.
unsafe fn memcpy(f: MemcpyFn, dst: CUdeviceptr, src: CUdeviceptr, n: usize, ptds: bool) -> u32 {
    hook(
        || sync_copy(Api::CuMemcpy, unified(src), unified(dst), n as u64, ptds),
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(dst, src, n) },
    )
}

/// # Safety
/// `f` is the real `cuMemcpyHtoD_v2` (or `_ptds`); the arguments are the caller's.
unsafe fn htod(f: HtoDFn, dst: CUdeviceptr, src: *const c_void, n: usize, ptds: bool) -> u32 {
    hook(
        || {
            let src = Side::Host(src as u64);
            sync_copy(Api::CuMemcpyHtoD, src, Side::Device, n as u64, ptds)
        },
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(dst, src, n) },
    )
}

/// # Safety
/// `f` is the real `cuMemcpyDtoH_v2` (or `_ptds`); the arguments are the caller's.
unsafe fn dtoh(f: DtoHFn, dst: *mut c_void, src: CUdeviceptr, n: usize, ptds: bool) -> u32 {
    hook(
        || {
            let dst = Side::Host(dst as u64);
            sync_copy(Api::CuMemcpyDtoH, Side::Device, dst, n as u64, ptds)
        },
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(dst, src, n) },
    )
}

/// # Safety
/// `f` is the real `cuMemcpyDtoD_v2` (or `_ptds`); the arguments are the caller's.
unsafe fn dtod(f: MemcpyFn, dst: CUdeviceptr, src: CUdeviceptr, n: usize, ptds: bool) -> u32 {
    hook(
        || {
            sync_copy(
                Api::CuMemcpyDtoD,
                Side::Device,
                Side::Device,
                n as u64,
                ptds,
            )
        },
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(dst, src, n) },
    )
}

/// Sides and bytes of a 2D copy descriptor (zero bytes and device sides for NULL).
///
/// # Safety
/// `p` is NULL or points to a `CUDA_MEMCPY2D` valid for reads.
unsafe fn describe_2d(p: *const CUDA_MEMCPY2D) -> (Side, Side, u64) {
    if p.is_null() {
        return (Side::Device, Side::Device, 0);
    }
    // The memory types are read as raw integers: a program may pass a value the enum
    // does not list.
    // SAFETY: `p` is valid for reads (this function's `# Safety`); the fields are read in
    // place, the enum ones as the 4-byte integers they are.
    unsafe {
        let src_t = std::ptr::addr_of!((*p).srcMemoryType).cast::<u32>().read();
        let dst_t = std::ptr::addr_of!((*p).dstMemoryType).cast::<u32>().read();
        let bytes = ((*p).WidthInBytes as u64).saturating_mul((*p).Height as u64);
        (
            described(src_t, (*p).srcHost as u64, (*p).srcDevice),
            described(dst_t, (*p).dstHost as u64, (*p).dstDevice),
            bytes,
        )
    }
}

/// Sides and bytes of a 3D copy descriptor.
///
/// # Safety
/// `p` is NULL or points to a `CUDA_MEMCPY3D` valid for reads.
unsafe fn describe_3d(p: *const CUDA_MEMCPY3D) -> (Side, Side, u64) {
    if p.is_null() {
        return (Side::Device, Side::Device, 0);
    }
    // SAFETY: as in `describe_2d`.
    unsafe {
        let src_t = std::ptr::addr_of!((*p).srcMemoryType).cast::<u32>().read();
        let dst_t = std::ptr::addr_of!((*p).dstMemoryType).cast::<u32>().read();
        let bytes = ((*p).WidthInBytes as u64)
            .saturating_mul((*p).Height as u64)
            .saturating_mul((*p).Depth as u64);
        (
            described(src_t, (*p).srcHost as u64, (*p).srcDevice),
            described(dst_t, (*p).dstHost as u64, (*p).dstDevice),
            bytes,
        )
    }
}

/// # Safety
/// `f` is the real `cuMemcpy2D_v2`/`cuMemcpy2DUnaligned_v2` (or `_ptds`); `p` the caller's.
unsafe fn memcpy_2d(f: Memcpy2DFn, p: *const CUDA_MEMCPY2D, ptds: bool) -> RawResult {
    hook(
        || {
            // SAFETY: `p` is the caller's descriptor, which the driver reads too.
            let (s, d, n) = unsafe { describe_2d(p) };
            sync_copy(Api::CuMemcpy2D, s, d, n, ptds)
        },
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(p) },
    )
}

/// # Safety
/// `f` is the real `cuMemcpy3D_v2` (or `_ptds`); `p` the caller's.
unsafe fn memcpy_3d(f: Memcpy3DFn, p: *const CUDA_MEMCPY3D, ptds: bool) -> RawResult {
    hook(
        || {
            // SAFETY: as in `memcpy_2d`.
            let (s, d, n) = unsafe { describe_3d(p) };
            sync_copy(Api::CuMemcpy3D, s, d, n, ptds)
        },
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(p) },
    )
}

/// # Safety
/// `f` is the real `cuMemcpyAsync` (or `_ptsz`); the arguments are the caller's.
unsafe fn memcpy_async(
    f: MemcpyAsyncFn,
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    stream: CUstream,
    ptds: bool,
) -> RawResult {
    hook(
        || {
            let (s, d) = (unified(src), unified(dst));
            async_copy(Api::CuMemcpyAsync, s, d, n as u64, stream, ptds)
        },
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(dst, src, n, stream) },
    )
}

/// # Safety
/// `f` is the real `cuMemcpyHtoDAsync_v2` (or `_ptsz`); the arguments are the caller's.
unsafe fn htod_async(
    f: HtoDAsyncFn,
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    stream: CUstream,
    ptds: bool,
) -> RawResult {
    hook(
        || {
            let s = Side::Host(src as u64);
            async_copy(
                Api::CuMemcpyHtoDAsync,
                s,
                Side::Device,
                n as u64,
                stream,
                ptds,
            )
        },
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(dst, src, n, stream) },
    )
}

/// # Safety
/// `f` is the real `cuMemcpyDtoHAsync_v2` (or `_ptsz`); the arguments are the caller's.
unsafe fn dtoh_async(
    f: DtoHAsyncFn,
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
    stream: CUstream,
    ptds: bool,
) -> RawResult {
    hook(
        || {
            let d = Side::Host(dst as u64);
            async_copy(
                Api::CuMemcpyDtoHAsync,
                Side::Device,
                d,
                n as u64,
                stream,
                ptds,
            )
        },
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(dst, src, n, stream) },
    )
}

/// # Safety
/// `f` is the real `cuMemcpyDtoDAsync_v2` (or `_ptsz`); the arguments are the caller's.
unsafe fn dtod_async(
    f: MemcpyAsyncFn,
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    stream: CUstream,
    ptds: bool,
) -> RawResult {
    hook(
        || {
            let (s, d) = (Side::Device, Side::Device);
            async_copy(Api::CuMemcpyDtoDAsync, s, d, n as u64, stream, ptds)
        },
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(dst, src, n, stream) },
    )
}

/// # Safety
/// `f` is the real `cuMemcpy2DAsync_v2` (or `_ptsz`); the arguments are the caller's.
unsafe fn memcpy_2d_async(
    f: Memcpy2DAsyncFn,
    p: *const CUDA_MEMCPY2D,
    stream: CUstream,
    ptds: bool,
) -> RawResult {
    hook(
        || {
            // SAFETY: as in `memcpy_2d`.
            let (s, d, n) = unsafe { describe_2d(p) };
            async_copy(Api::CuMemcpy2DAsync, s, d, n, stream, ptds)
        },
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(p, stream) },
    )
}

/// # Safety
/// `f` is the real `cuMemcpy3DAsync_v2` (or `_ptsz`); the arguments are the caller's.
unsafe fn memcpy_3d_async(
    f: Memcpy3DAsyncFn,
    p: *const CUDA_MEMCPY3D,
    stream: CUstream,
    ptds: bool,
) -> RawResult {
    hook(
        || {
            // SAFETY: as in `memcpy_2d`.
            let (s, d, n) = unsafe { describe_3d(p) };
            async_copy(Api::CuMemcpy3DAsync, s, d, n, stream, ptds)
        },
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(p, stream) },
    )
}

/// # Safety
/// `f` is the real `cuMemFree_v2` and `ptr` the caller's.
unsafe fn mem_free(f: FreeFn, ptr: CUdeviceptr, _ptds: bool) -> RawResult {
    hook(
        || {
            let mut c = classify::implicit(Api::CuMemFree, 0);
            if ptr == 0 {
                c.kind = None;
            }
            c
        },
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(ptr) },
    )
}

/// Forgets a pinned range before the driver releases it (outermost calls only: a runtime
/// call that reaches here did it already).
fn forget_pinned(ptr: *mut c_void) -> u64 {
    if crate::config::tracking() && !nested() {
        pinned::remove(ptr as u64).unwrap_or(0)
    } else {
        0
    }
}

fn remember_pinned(ptr: *mut c_void, size: usize) {
    if crate::config::tracking() && !nested() {
        pinned::add(ptr as u64, size as u64);
    }
}

/// # Safety
/// `f` is the real `cuMemFreeHost` and `ptr` the caller's.
unsafe fn mem_free_host(f: HostPtrFn, ptr: *mut c_void, _ptds: bool) -> RawResult {
    let size = forget_pinned(ptr);
    hook(
        || classify::implicit(Api::CuMemFreeHost, size),
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(ptr) },
    )
}

/// # Safety
/// `f` is the real `cuMemHostUnregister` and `ptr` the caller's.
unsafe fn host_unregister(f: HostPtrFn, ptr: *mut c_void, _ptds: bool) -> RawResult {
    let size = forget_pinned(ptr);
    hook(
        || classify::implicit(Api::CuMemHostUnregister, size),
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(ptr) },
    )
}

/// # Safety
/// `f` is the real `cuMemAllocHost_v2`; the arguments are the caller's.
unsafe fn alloc_host(f: AllocHostFn, pp: *mut *mut c_void, size: usize, _ptds: bool) -> u32 {
    let track = !nested();
    let rc = hook(
        || classify::implicit(Api::CuMemAllocHost, size as u64),
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(pp, size) },
    );
    if rc == 0 && track && !pp.is_null() {
        // SAFETY: on success the driver stored the allocation in `*pp`.
        remember_pinned(unsafe { *pp }, size);
    }
    rc
}

/// # Safety
/// `f` is the real `cuMemHostAlloc`; the arguments are the caller's.
unsafe fn host_alloc(
    f: HostAllocFn,
    pp: *mut *mut c_void,
    size: usize,
    flags: c_uint,
    _ptds: bool,
) -> RawResult {
    let track = !nested();
    let rc = hook(
        || classify::implicit(Api::CuMemHostAlloc, size as u64),
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(pp, size, flags) },
    );
    if rc == 0 && track && !pp.is_null() {
        // SAFETY: on success the driver stored the allocation in `*pp`.
        remember_pinned(unsafe { *pp }, size);
    }
    rc
}

/// # Safety
/// `f` is the real `cuMemHostRegister` (either version); the arguments are the caller's.
unsafe fn host_register(
    f: HostRegisterFn,
    p: *mut c_void,
    size: usize,
    flags: c_uint,
    _ptds: bool,
) -> RawResult {
    let track = !nested();
    let rc = hook(
        || classify::implicit(Api::CuMemHostRegister, size as u64),
        // SAFETY: as in `ctx_sync`.
        || unsafe { f(p, size, flags) },
    );
    if rc == 0 && track {
        remember_pinned(p, size);
    }
    rc
}

/// Replaces a successfully looked-up driver function by its wrapper.
///
/// # Safety
/// `symbol` is NULL or a C string; `pfn` is NULL or valid for reads and writes of a pointer.
unsafe fn swap_in_wrapper(symbol: *const c_char, pfn: *mut *mut c_void, version: i32, ptds: bool) {
    if symbol.is_null() || pfn.is_null() {
        return;
    }
    // SAFETY: this function's `# Safety`; the real cuGetProcAddress just read and wrote them.
    unsafe {
        let name = std::ffi::CStr::from_ptr(symbol).to_bytes();
        if let Some(w) = super::wrap_proc(name, version, ptds, *pfn) {
            *pfn = w;
        }
    }
}

/// Whether a `cuGetProcAddress` lookup asked for per-thread-default-stream forms: the flag
/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`, or `_ptsz` entry points with the
/// default flags.
fn proc_ptds(flags: u64, ptsz_entry: bool) -> bool {
    flags & 2 != 0 || (ptsz_entry && flags & 1 == 0)
}

/// # Safety
/// `f` is the real `cuGetProcAddress` (or `_ptsz`); the arguments are the caller's.
unsafe fn get_proc(
    f: GetProcFn,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: i32,
    flags: u64,
    ptsz: bool,
) -> RawResult {
    // SAFETY: the caller's arguments to the real function.
    let rc = unsafe { f(symbol, pfn, version, flags) };
    if rc == 0 {
        // SAFETY: the real function accepted `symbol` and `pfn` and succeeded.
        unsafe { swap_in_wrapper(symbol, pfn, version, proc_ptds(flags, ptsz)) };
    }
    rc
}

/// # Safety
/// `f` is the real `cuGetProcAddress_v2` (or `_ptsz`); the arguments are the caller's.
unsafe fn get_proc_v2(
    f: GetProcV2Fn,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: i32,
    flags: u64,
    status: *mut CUdriverProcAddressQueryResult,
    ptsz: bool,
) -> RawResult {
    // SAFETY: the caller's arguments to the real function.
    let rc = unsafe { f(symbol, pfn, version, flags, status) };
    // The status is read as the raw integer it is (0: CU_GET_PROC_ADDRESS_SUCCESS).
    // SAFETY: `status` is NULL or the caller's out-parameter, which the driver just wrote.
    let found = status.is_null() || unsafe { status.cast::<i32>().read() } == 0;
    if rc == 0 && found {
        // SAFETY: the real function accepted `symbol` and `pfn` and succeeded.
        unsafe { swap_in_wrapper(symbol, pfn, version, proc_ptds(flags, ptsz)) };
    }
    rc
}

/// # Safety
/// `f` is the real `cuLaunchHostFunc` (or `_ptsz`); the arguments are the caller's.
pub unsafe fn launch_host_func(
    f: LaunchHostFuncFn,
    stream: CUstream,
    func: Option<crate::hostwait::HostFn>,
    data: *mut c_void,
    ptds: bool,
) -> RawResult {
    let flags = if ptds { FLAG_PER_THREAD } else { 0 };
    let func = func.map_or(0, |f| f as usize);
    entry::hook_host_func(
        Api::CuLaunchHostFunc,
        stream as u64,
        flags,
        func,
        data as usize,
        |func, data| {
            // SAFETY: `func` and `data` are the caller's, or the library's trampoline (an
            // `extern "C" fn(*mut c_void)`) with its slot number; a zero function stays NULL.
            unsafe {
                f(
                    stream,
                    std::mem::transmute::<usize, Option<crate::hostwait::HostFn>>(func),
                    data as *mut c_void,
                )
            }
        },
    )
}

/// Declares a family: its wrapper instances (`$inst::<N>`, forwarding to slot N) and its
/// exported symbols, each with whether it is a per-thread-default-stream form.
/// Families whose wrappers run their body even inside a recorded call: lookups are always
/// answered with wrappers, and a launch always ends a stall's measurement (`behind`).
const fn always_answered(f: Family) -> bool {
    matches!(
        f,
        Family::GetProc
            | Family::GetProcV2
            | Family::LaunchKernel
            | Family::LaunchKernelEx
            | Family::LaunchCooperative
            | Family::GraphLaunch
    )
}

/// # Safety
/// `f` is the real `cuLaunchKernel` (or `_ptsz`); the arguments are the caller's.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_kernel(
    f: LaunchKernelFn,
    func: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shmem: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    ptds: bool,
) -> RawResult {
    crate::behind::launch_queued(stream as u64, ptds);
    // SAFETY: the real function with the caller's arguments.
    unsafe { f(func, gx, gy, gz, bx, by, bz, shmem, stream, params, extra) }
}

/// # Safety
/// `f` is the real `cuLaunchCooperativeKernel` (or `_ptsz`); the arguments are the caller's.
#[allow(clippy::too_many_arguments)]
unsafe fn launch_cooperative(
    f: LaunchCooperativeFn,
    func: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shmem: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    ptds: bool,
) -> RawResult {
    crate::behind::launch_queued(stream as u64, ptds);
    // SAFETY: the real function with the caller's arguments.
    unsafe { f(func, gx, gy, gz, bx, by, bz, shmem, stream, params) }
}

/// # Safety
/// `f` is the real `cuLaunchKernelEx` (or `_ptsz`); the arguments are the caller's.
unsafe fn launch_kernel_ex(
    f: LaunchKernelExFn,
    config: *const CUlaunchConfig,
    func: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    ptds: bool,
) -> RawResult {
    let stream = if config.is_null() {
        0
    } else {
        // SAFETY: a non-null configuration the caller passes to the driver, which reads it
        // too.
        unsafe { (*config).hStream as u64 }
    };
    crate::behind::launch_queued(stream, ptds);
    // SAFETY: the real function with the caller's arguments.
    unsafe { f(config, func, params, extra) }
}

/// # Safety
/// `f` is the real `cuGraphLaunch` (or `_ptsz`); the arguments are the caller's.
unsafe fn graph_launch(
    f: GraphLaunchFn,
    graph: CUgraphExec,
    stream: CUstream,
    ptds: bool,
) -> RawResult {
    crate::behind::launch_queued(stream as u64, ptds);
    // SAFETY: the real function with the caller's arguments.
    unsafe { f(graph, stream) }
}

macro_rules! family {
    ($fam:ident, $inst:ident, $body:ident: $ty:ty; $params:tt; $($name:ident = $ptds:literal),*) => {
        family!(@inst $fam, $inst, $body, $ty, $params);
        $(family!(@export $fam, $name, $body, $ty, $ptds, $params);)*
    };
    (@inst $fam:ident, $inst:ident, $body:ident, $ty:ty, ($($arg:ident: $aty:ty),*)) => {
        /// A wrapper handed out by `dlsym` or `cuGetProcAddress`: forwards to the real
        /// function in slot `N` of its family.
        ///
        /// # Safety
        /// Same contract as the driver function it stands for.
        unsafe extern "C" fn $inst<const N: usize>($($arg: $aty),*) -> RawResult {
            let Some(f) = slot_fn::<$ty>(Family::$fam, N) else {
                return DRIVER_MISSING;
            };
            // Lookups are always answered with wrappers, nested or not.
            if !always_answered(Family::$fam) && nested() {
                // SAFETY: the real function with the caller's arguments.
                return unsafe { f($($arg),*) };
            }
            // SAFETY: `f` is the real function this instance was handed out for (its slot),
            // with the family's signature, and the arguments are our caller's: what `$body`
            // requires.
            unsafe { $body(f, $($arg,)* N >= PTDS_BASE) }
        }
    };
    (@export $fam:ident, $name:ident, $body:ident, $ty:ty, $ptds:literal,
     ($($arg:ident: $aty:ty),*)) => {
        /// # Safety
        /// Same contract as the CUDA driver function of the same name.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $aty),*) -> RawResult {
            static REAL: Real = Real::driver(
                match ::std::ffi::CStr::from_bytes_with_nul(
                    concat!(stringify!($name), "\0").as_bytes()
                ) {
                    Ok(c) => c,
                    Err(_) => panic!("symbol names have no NUL"),
                },
            );
            let Some(f) = REAL.get::<$ty>() else {
                return DRIVER_MISSING;
            };
            if !always_answered(Family::$fam) && nested() {
                // SAFETY: the real function with the caller's arguments.
                return unsafe { f($($arg),*) };
            }
            // SAFETY: `f` is the real function of this name, typed with its C signature,
            // and the arguments are our caller's (this function's `# Safety`).
            unsafe { $body(f, $($arg,)* $ptds) }
        }
    };
}

family!(CtxSync, ctx_sync_w, ctx_sync: CtxSyncFn; (ctx: CUcontext); cuCtxSynchronize_v2 = false);
family!(StreamSync, stream_sync_w, stream_sync: StreamFn; (stream: CUstream);
    cuStreamSynchronize = false, cuStreamSynchronize_ptsz = true);
family!(EventSync, event_sync_w, event_sync: EventFn; (event: CUevent); cuEventSynchronize = false);
family!(StreamQuery, stream_query_w, stream_query: StreamFn; (stream: CUstream);
    cuStreamQuery = false, cuStreamQuery_ptsz = true);
family!(EventQuery, event_query_w, event_query: EventFn; (event: CUevent); cuEventQuery = false);
family!(Memcpy, memcpy_w, memcpy: MemcpyFn; (dst: CUdeviceptr, src: CUdeviceptr, n: usize);
    cuMemcpy = false, cuMemcpy_ptds = true);
family!(HtoD, htod_w, htod: HtoDFn; (dst: CUdeviceptr, src: *const c_void, n: usize);
    cuMemcpyHtoD_v2 = false, cuMemcpyHtoD_v2_ptds = true);
family!(DtoH, dtoh_w, dtoh: DtoHFn; (dst: *mut c_void, src: CUdeviceptr, n: usize);
    cuMemcpyDtoH_v2 = false, cuMemcpyDtoH_v2_ptds = true);
family!(DtoD, dtod_w, dtod: MemcpyFn; (dst: CUdeviceptr, src: CUdeviceptr, n: usize);
    cuMemcpyDtoD_v2 = false, cuMemcpyDtoD_v2_ptds = true);
family!(Memcpy2D, memcpy_2d_w, memcpy_2d: Memcpy2DFn; (p: *const CUDA_MEMCPY2D);
    cuMemcpy2D_v2 = false, cuMemcpy2D_v2_ptds = true,
    cuMemcpy2DUnaligned_v2 = false, cuMemcpy2DUnaligned_v2_ptds = true);
family!(Memcpy3D, memcpy_3d_w, memcpy_3d: Memcpy3DFn; (p: *const CUDA_MEMCPY3D);
    cuMemcpy3D_v2 = false, cuMemcpy3D_v2_ptds = true);
family!(MemcpyAsync, memcpy_async_w, memcpy_async: MemcpyAsyncFn;
    (dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: CUstream);
    cuMemcpyAsync = false, cuMemcpyAsync_ptsz = true);
family!(HtoDAsync, htod_async_w, htod_async: HtoDAsyncFn;
    (dst: CUdeviceptr, src: *const c_void, n: usize, stream: CUstream);
    cuMemcpyHtoDAsync_v2 = false, cuMemcpyHtoDAsync_v2_ptsz = true);
family!(DtoHAsync, dtoh_async_w, dtoh_async: DtoHAsyncFn;
    (dst: *mut c_void, src: CUdeviceptr, n: usize, stream: CUstream);
    cuMemcpyDtoHAsync_v2 = false, cuMemcpyDtoHAsync_v2_ptsz = true);
family!(DtoDAsync, dtod_async_w, dtod_async: MemcpyAsyncFn;
    (dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: CUstream);
    cuMemcpyDtoDAsync_v2 = false, cuMemcpyDtoDAsync_v2_ptsz = true);
family!(Memcpy2DAsync, memcpy_2d_async_w, memcpy_2d_async: Memcpy2DAsyncFn;
    (p: *const CUDA_MEMCPY2D, stream: CUstream);
    cuMemcpy2DAsync_v2 = false, cuMemcpy2DAsync_v2_ptsz = true);
family!(Memcpy3DAsync, memcpy_3d_async_w, memcpy_3d_async: Memcpy3DAsyncFn;
    (p: *const CUDA_MEMCPY3D, stream: CUstream);
    cuMemcpy3DAsync_v2 = false, cuMemcpy3DAsync_v2_ptsz = true);
family!(MemFree, mem_free_w, mem_free: FreeFn; (ptr: CUdeviceptr); cuMemFree_v2 = false);
family!(MemFreeHost, mem_free_host_w, mem_free_host: HostPtrFn; (ptr: *mut c_void);
    cuMemFreeHost = false);
family!(MemAllocHost, alloc_host_w, alloc_host: AllocHostFn; (pp: *mut *mut c_void, size: usize);
    cuMemAllocHost_v2 = false);
family!(MemHostAlloc, host_alloc_w, host_alloc: HostAllocFn;
    (pp: *mut *mut c_void, size: usize, flags: c_uint); cuMemHostAlloc = false);
family!(MemHostRegister, host_register_w, host_register: HostRegisterFn;
    (p: *mut c_void, size: usize, flags: c_uint);
    cuMemHostRegister = false, cuMemHostRegister_v2 = false);
family!(MemHostUnregister, host_unregister_w, host_unregister: HostPtrFn; (ptr: *mut c_void);
    cuMemHostUnregister = false);
family!(LaunchHostFunc, launch_host_func_w, launch_host_func: LaunchHostFuncFn;
    (stream: CUstream, func: Option<crate::hostwait::HostFn>, data: *mut c_void);
    cuLaunchHostFunc = false, cuLaunchHostFunc_ptsz = true);
family!(LaunchKernel, launch_kernel_w, launch_kernel: LaunchKernelFn;
    (func: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
     shmem: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void);
    cuLaunchKernel = false, cuLaunchKernel_ptsz = true);
family!(LaunchKernelEx, launch_kernel_ex_w, launch_kernel_ex: LaunchKernelExFn;
    (config: *const CUlaunchConfig, func: CUfunction, params: *mut *mut c_void,
     extra: *mut *mut c_void);
    cuLaunchKernelEx = false, cuLaunchKernelEx_ptsz = true);
family!(LaunchCooperative, launch_cooperative_w, launch_cooperative: LaunchCooperativeFn;
    (func: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
     shmem: c_uint, stream: CUstream, params: *mut *mut c_void);
    cuLaunchCooperativeKernel = false, cuLaunchCooperativeKernel_ptsz = true);
family!(GraphLaunch, graph_launch_w, graph_launch: GraphLaunchFn;
    (graph: CUgraphExec, stream: CUstream); cuGraphLaunch = false, cuGraphLaunch_ptsz = true);
family!(GetProc, get_proc_w, get_proc: GetProcFn;
    (symbol: *const c_char, pfn: *mut *mut c_void, version: i32, flags: u64);
    cuGetProcAddress = false, cuGetProcAddress_ptsz = true);
family!(GetProcV2, get_proc_v2_w, get_proc_v2: GetProcV2Fn;
    (symbol: *const c_char, pfn: *mut *mut c_void, version: i32, flags: u64,
     status: *mut CUdriverProcAddressQueryResult);
    cuGetProcAddress_v2 = false, cuGetProcAddress_v2_ptsz = true);

/// `cuCtxSynchronize` as programs linked against libcuda call it: no arguments.
///
/// # Safety
/// Same contract as the CUDA driver function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuCtxSynchronize() -> RawResult {
    static REAL: Real = Real::driver(c"cuCtxSynchronize");
    let Some(f) = REAL.get::<CtxSyncV1Fn>() else {
        return DRIVER_MISSING;
    };
    if nested() {
        // SAFETY: the real function, which takes no arguments.
        return unsafe { f() };
    }
    hook(
        || Call::new(Kind::DeviceSync, Api::CuCtxSynchronize),
        // SAFETY: as above.
        || unsafe { f() },
    )
}

macro_rules! instances {
    ($inst:ident) => {
        [
            $inst::<0> as *mut c_void,
            $inst::<1> as *mut c_void,
            $inst::<2> as *mut c_void,
            $inst::<3> as *mut c_void,
            $inst::<4> as *mut c_void,
            $inst::<5> as *mut c_void,
            $inst::<6> as *mut c_void,
            $inst::<7> as *mut c_void,
        ]
    };
}

/// Wrapper instance `i` of `family`.
pub fn instance(family: Family, i: usize) -> *mut c_void {
    let all: [*mut c_void; INSTANCES] = match family {
        Family::CtxSync => instances!(ctx_sync_w),
        Family::StreamSync => instances!(stream_sync_w),
        Family::EventSync => instances!(event_sync_w),
        Family::StreamQuery => instances!(stream_query_w),
        Family::EventQuery => instances!(event_query_w),
        Family::Memcpy => instances!(memcpy_w),
        Family::HtoD => instances!(htod_w),
        Family::DtoH => instances!(dtoh_w),
        Family::DtoD => instances!(dtod_w),
        Family::Memcpy2D => instances!(memcpy_2d_w),
        Family::Memcpy3D => instances!(memcpy_3d_w),
        Family::MemcpyAsync => instances!(memcpy_async_w),
        Family::HtoDAsync => instances!(htod_async_w),
        Family::DtoHAsync => instances!(dtoh_async_w),
        Family::DtoDAsync => instances!(dtod_async_w),
        Family::Memcpy2DAsync => instances!(memcpy_2d_async_w),
        Family::Memcpy3DAsync => instances!(memcpy_3d_async_w),
        Family::MemFree => instances!(mem_free_w),
        Family::MemFreeHost => instances!(mem_free_host_w),
        Family::MemAllocHost => instances!(alloc_host_w),
        Family::MemHostAlloc => instances!(host_alloc_w),
        Family::MemHostRegister => instances!(host_register_w),
        Family::MemHostUnregister => instances!(host_unregister_w),
        Family::LaunchHostFunc => instances!(launch_host_func_w),
        Family::LaunchKernel => instances!(launch_kernel_w),
        Family::LaunchKernelEx => instances!(launch_kernel_ex_w),
        Family::LaunchCooperative => instances!(launch_cooperative_w),
        Family::GraphLaunch => instances!(graph_launch_w),
        Family::GetProc => instances!(get_proc_w),
        Family::GetProcV2 => instances!(get_proc_v2_w),
    };
    all[i % INSTANCES]
}
