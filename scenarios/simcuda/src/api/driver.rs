//! The driver face of the simulator: the `libcuda.so.1` functions that syncspy wraps, the few
//! a driver-API program needs around them, and `cuGetProcAddress`, over the same engine as
//! the runtime functions.
//!
//! `syncspy run --sim` links the library as `libcuda.so.1` too; loaded under both names it is
//! one object (the loader recognizes the file), so the two faces share one simulated device.
//!
//! Like NVIDIA's runtime, the runtime face reaches the driver through what
//! `dlopen("libcuda.so.1")`, `dlsym(handle, "cuGetProcAddress_v2")` and `cuGetProcAddress`
//! return (`Route`): its synchronizations, copies, frees and pinned allocations are made by
//! calling the driver functions. So a tool that interposes both layers sees a runtime call
//! arrive at the driver inside it, as on a GPU. When no `libcuda.so.1` is on the library path,
//! or it is another library than this one, the runtime face does the work itself.
//!
//! Each driver function runs the runtime face's body for the same operation (with the
//! runtime's validation: the same `cudaError_t` semantics), marked as being inside the
//! driver so the runtime face does not route it again. The `CUresult` returned is the
//! `cudaError_t` number, which is the same number for the codes the simulator produces
//! (success, invalid value, out of memory, not ready, invalid handle, launch failures);
//! the runtime face takes back the exact `cudaError_t` from a thread-local slot.
#![allow(non_snake_case)]

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdeviceptr, CUdriverProcAddressQueryResult, CUevent, CUhostFn,
    CUmemorytype, CUpointer_attribute, CUstream,
};
use cudarc::runtime::sys::{cudaError_t, cudaMemcpyKind, cudaMemoryType, cudaPointerAttributes};

use super::*;

/// `CUresult` as the C ABI carries it.
pub type CuResult = u32;

thread_local! {
    /// Set while a driver function runs the runtime face's body.
    static IN_DRIVER: Cell<bool> = const { Cell::new(false) };
    /// The exact `cudaError_t` of the last driver function this thread ran.
    static DETAIL: Cell<Option<cudaError_t>> = const { Cell::new(None) };
}

/// Runs the runtime body `f` as a driver function: marked, its exact code kept.
fn face(f: impl FnOnce() -> cudaError_t) -> CuResult {
    let was = IN_DRIVER.with(|c| c.replace(true));
    let code = f();
    IN_DRIVER.with(|c| c.set(was));
    DETAIL.with(|d| d.set(Some(code)));
    code as u32
}

/// Calls a driver function through `call` for the runtime face and returns its exact code.
fn via(call: impl FnOnce() -> CuResult) -> cudaError_t {
    DETAIL.with(|d| d.set(None));
    let raw = call();
    DETAIL.with(Cell::take).unwrap_or(if raw == 0 {
        cudaError_t::cudaSuccess
    } else {
        cudaError_t::cudaErrorUnknown
    })
}

const H2D: u32 = cudaMemcpyKind::cudaMemcpyHostToDevice as u32;
const D2H: u32 = cudaMemcpyKind::cudaMemcpyDeviceToHost as u32;
const D2D: u32 = cudaMemcpyKind::cudaMemcpyDeviceToDevice as u32;
const DEFAULT: u32 = cudaMemcpyKind::cudaMemcpyDefault as u32;

type Sync0 = unsafe extern "C" fn(CUcontext) -> CuResult;
type StreamFn = unsafe extern "C" fn(CUstream) -> CuResult;
type EventFn = unsafe extern "C" fn(CUevent) -> CuResult;
type CopyFn = unsafe extern "C" fn(CUdeviceptr, CUdeviceptr, usize) -> CuResult;
type CopyAsyncFn = unsafe extern "C" fn(CUdeviceptr, CUdeviceptr, usize, CUstream) -> CuResult;
type FreeFn = unsafe extern "C" fn(CUdeviceptr) -> CuResult;
type HostPtrFn = unsafe extern "C" fn(*mut c_void) -> CuResult;
type AllocHostFn = unsafe extern "C" fn(*mut *mut c_void, usize) -> CuResult;
type HostAllocFn = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> CuResult;
type HostRegisterFn = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> CuResult;
type GetProcV2 = unsafe extern "C" fn(
    *const c_char,
    *mut *mut c_void,
    c_int,
    u64,
    *mut CUdriverProcAddressQueryResult,
) -> CuResult;

/// The driver functions the runtime face calls, as `cuGetProcAddress` gave them.
pub(crate) struct Route {
    pub ctx_sync: Sync0,
    pub stream_sync: [StreamFn; 2],
    pub event_sync: EventFn,
    /// By direction: default (unified), h2d, d2h, d2d; `[legacy, per-thread]` each. The
    /// h2d/d2h forms take a host pointer where these signatures say `CUdeviceptr`: the same
    /// 64-bit argument, and they are only called with what the runtime face was given.
    pub copy: [[CopyFn; 2]; 4],
    pub copy_async: [[CopyAsyncFn; 2]; 4],
    pub free: FreeFn,
    pub free_host: HostPtrFn,
    pub alloc_host: AllocHostFn,
    pub host_alloc: HostAllocFn,
    pub host_register: HostRegisterFn,
    pub host_unregister: HostPtrFn,
}

/// The route to the driver for the runtime face on this thread now: none inside a driver
/// function, or when the driver is not this library.
pub(crate) fn route() -> Option<&'static Route> {
    if IN_DRIVER.with(Cell::get) {
        return None;
    }
    static ROUTE: OnceLock<Option<Route>> = OnceLock::new();
    ROUTE.get_or_init(load).as_ref()
}

/// Opens `libcuda.so.1` as the CUDA runtime does and gets the driver functions from it.
fn load() -> Option<Route> {
    use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
    // SAFETY: loading the driver runs its initialisers only; when it is this library (below)
    // it is already loaded, so none run.
    let lib = unsafe { Library::open(Some("libcuda.so.1"), RTLD_NOW | RTLD_LOCAL) }.ok()?;
    // SAFETY: only the address is read and compared.
    let marker = unsafe { lib.get::<*mut c_void>(c"simcuda_driver_face") }.map(|s| *s);
    if marker.ok() != Some(simcuda_driver_face as *mut c_void) {
        // Another libcuda (a real driver): never route the simulator into it (the library is
        // closed again as it drops).
        return None;
    }
    // SAFETY: cuGetProcAddress_v2's C signature; a NULL address reads as None.
    let gpa = unsafe { lib.get::<Option<GetProcV2>>(c"cuGetProcAddress_v2") }
        .ok()
        .and_then(|f| *f)?;
    // Kept for the process: the functions taken from it are used for its life.
    std::mem::forget(lib);
    let get = |name: &CStr, ptds: bool| -> Option<*mut c_void> {
        let mut p = std::ptr::null_mut();
        let flags = if ptds { 2 } else { 1 };
        // SAFETY: `gpa` is cuGetProcAddress_v2 (this library's, perhaps wrapped); the
        // arguments are a C string and locals.
        let rc = unsafe { gpa(name.as_ptr(), &mut p, 13000, flags, std::ptr::null_mut()) };
        (rc == 0 && !p.is_null()).then_some(p)
    };
    macro_rules! take {
        ($name:literal, $ptds:expr, $ty:ty) => {
            // SAFETY: cuGetProcAddress returned the function `$name` (version 13000), whose
            // C signature `$ty` is.
            unsafe { std::mem::transmute::<*mut c_void, $ty>(get($name, $ptds)?) }
        };
    }
    macro_rules! both {
        ($name:literal, $ty:ty) => {
            [take!($name, false, $ty), take!($name, true, $ty)]
        };
    }
    Some(Route {
        ctx_sync: take!(c"cuCtxSynchronize", false, Sync0),
        stream_sync: both!(c"cuStreamSynchronize", StreamFn),
        event_sync: take!(c"cuEventSynchronize", false, EventFn),
        copy: [
            both!(c"cuMemcpy", CopyFn),
            both!(c"cuMemcpyHtoD", CopyFn),
            both!(c"cuMemcpyDtoH", CopyFn),
            both!(c"cuMemcpyDtoD", CopyFn),
        ],
        copy_async: [
            both!(c"cuMemcpyAsync", CopyAsyncFn),
            both!(c"cuMemcpyHtoDAsync", CopyAsyncFn),
            both!(c"cuMemcpyDtoHAsync", CopyAsyncFn),
            both!(c"cuMemcpyDtoDAsync", CopyAsyncFn),
        ],
        free: take!(c"cuMemFree", false, FreeFn),
        free_host: take!(c"cuMemFreeHost", false, HostPtrFn),
        alloc_host: take!(c"cuMemAllocHost", false, AllocHostFn),
        host_alloc: take!(c"cuMemHostAlloc", false, HostAllocFn),
        host_register: take!(c"cuMemHostRegister", false, HostRegisterFn),
        host_unregister: take!(c"cuMemHostUnregister", false, HostPtrFn),
    })
}

/// The index into `Route::copy` for a runtime copy kind; `None` for kinds the runtime face
/// handles itself (host to host, invalid values).
pub(crate) fn copy_index(kind: u32) -> Option<usize> {
    match kind {
        DEFAULT => Some(0),
        H2D => Some(1),
        D2H => Some(2),
        D2D => Some(3),
        _ => None,
    }
}

/// A synchronous runtime copy made through the driver.
pub(crate) fn copy_via(
    r: &Route,
    i: usize,
    ptds: bool,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
) -> cudaError_t {
    // SAFETY: the driver function for this direction, with the runtime caller's pointers as
    // 64-bit values (the driver face casts them back).
    via(|| unsafe { r.copy[i][ptds as usize](dst as u64, src as u64, n) })
}

/// An asynchronous runtime copy made through the driver.
pub(crate) fn copy_async_via(
    r: &Route,
    i: usize,
    ptds: bool,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    stream: cudarc::runtime::sys::cudaStream_t,
) -> cudaError_t {
    // SAFETY: as in `copy_via`; the stream handles of both faces are the same values.
    via(|| unsafe { r.copy_async[i][ptds as usize](dst as u64, src as u64, n, stream.cast()) })
}

/// Calls a routed driver function for the runtime face.
pub(crate) fn call_via(call: impl FnOnce() -> CuResult) -> cudaError_t {
    via(call)
}

/// Marks this library as the simulator's driver face (the runtime face checks that the
/// `libcuda.so.1` it opened is this very library).
#[no_mangle]
pub extern "C" fn simcuda_driver_face() {}

#[no_mangle]
pub extern "C" fn cuInit(_flags: c_uint) -> CuResult {
    0
}

/// # Safety
/// `v` is null or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(v: *mut c_int) -> CuResult {
    // SAFETY: the caller's contract.
    face(|| unsafe { cudaDriverGetVersion(v) })
}

/// # Safety
/// `dev` is null or valid for writing a `CUdevice`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(dev: *mut CUdevice, ordinal: c_int) -> CuResult {
    let mut n = 0;
    // SAFETY: `n` is a local.
    let rc = unsafe { cudaGetDeviceCount(&mut n) };
    if rc != cudaError_t::cudaSuccess || dev.is_null() || ordinal < 0 || ordinal >= n {
        return cudaError_t::cudaErrorInvalidValue as u32;
    }
    // SAFETY: checked non-null; the caller's contract.
    unsafe { dev.write(ordinal) };
    0
}

/// The primary context of device `d` is the handle `d + 1`.
///
/// # Safety
/// `ctx` is null or valid for writing a `CUcontext`.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, dev: CUdevice) -> CuResult {
    if ctx.is_null() || dev < 0 {
        return cudaError_t::cudaErrorInvalidValue as u32;
    }
    // SAFETY: checked non-null; the caller's contract.
    unsafe { ctx.write((dev as usize + 1) as CUcontext) };
    0
}

#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CuResult {
    if ctx.is_null() {
        return 0;
    }
    face(|| cudaSetDevice(ctx as usize as c_int - 1))
}

/// # Safety
/// `dev` is null or valid for writing a `CUdevice`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(dev: *mut CUdevice) -> CuResult {
    // SAFETY: the caller's contract.
    face(|| unsafe { cudaGetDevice(dev) })
}

/// # Safety
/// `p` is null or valid for writing a `CUdeviceptr`.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(p: *mut CUdeviceptr, size: usize) -> CuResult {
    // SAFETY: the caller's contract (a device pointer is a 64-bit address here).
    face(|| unsafe { cudaMalloc(p.cast(), size) })
}

/// # Safety
/// `s` is null or valid for writing a `CUstream`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(s: *mut CUstream, flags: c_uint) -> CuResult {
    // SAFETY: the caller's contract; CU_STREAM_NON_BLOCKING is cudaStreamNonBlocking (1).
    face(|| unsafe { cudaStreamCreateWithFlags(s.cast(), flags) })
}

/// # Safety
/// `e` is null or valid for writing a `CUevent`.
#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(e: *mut CUevent, flags: c_uint) -> CuResult {
    // SAFETY: the caller's contract; the flag values of both APIs are the same.
    face(|| unsafe { cudaEventCreateWithFlags(e.cast(), flags) })
}

#[no_mangle]
pub extern "C" fn cuEventRecord(e: CUevent, s: CUstream) -> CuResult {
    face(|| cudaEventRecord(e.cast(), s.cast()))
}

#[no_mangle]
pub extern "C" fn cuEventDestroy_v2(e: CUevent) -> CuResult {
    face(|| cudaEventDestroy(e.cast()))
}

/// # Safety
/// `ms` is null or valid for writing a `float`.
#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(
    ms: *mut f32,
    start: CUevent,
    end: CUevent,
) -> CuResult {
    // SAFETY: the caller's contract.
    face(|| unsafe { cudaEventElapsedTime(ms, start.cast(), end.cast()) })
}

/// The current context: the calling thread's current device's primary context, as
/// `cuDevicePrimaryCtxRetain` names it (device + 1).
///
/// # Safety
/// `ctx` is null or valid for writing a `CUcontext`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut CUcontext) -> CuResult {
    if ctx.is_null() {
        return cudaError_t::cudaErrorInvalidValue as u32;
    }
    let mut dev: c_int = 0;
    // SAFETY: a local out-value.
    let rc = unsafe { cudaGetDevice(&mut dev) };
    if rc != cudaError_t::cudaSuccess {
        return rc as u32;
    }
    // SAFETY: checked non-null; the caller's contract.
    unsafe { ctx.write((dev as usize + 1) as CUcontext) };
    0
}

/// # Safety
/// As `cudaLaunchHostFunc`.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchHostFunc(s: CUstream, f: CUhostFn, data: *mut c_void) -> CuResult {
    // SAFETY: the caller's contract; `CUhostFn` and `cudaHostFn_t` are the same C type.
    face(|| unsafe { cudaLaunchHostFunc(s.cast(), f, data) })
}

/// `cuGraphLaunch`: the simulator builds no graphs; a launch of any handle succeeds as an
/// empty graph's would (nothing runs on the stream), so that a program can reach the call
/// (tests of what a preloaded library does at a graph launch).
#[no_mangle]
pub extern "C" fn cuGraphLaunch(_graph: *mut c_void, _s: CUstream) -> CuResult {
    0
}

/// Whether a stream is capturing a graph: the simulator captures nothing, so never, unless
/// `SIMCUDA_CAPTURING=1` (a test knob: every stream then says it is capturing).
///
/// # Safety
/// `status` is null or valid for writing a `CUstreamCaptureStatus` (a C int).
#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(_s: CUstream, status: *mut c_int) -> CuResult {
    if status.is_null() {
        return 1; // CUDA_ERROR_INVALID_VALUE
    }
    let on = std::env::var("SIMCUDA_CAPTURING").is_ok_and(|v| v == "1");
    // SAFETY: checked non-null; the caller's contract.
    unsafe { *status = c_int::from(on) };
    0
}

/// `cuStreamIsCapturing` for the per-thread default stream's form.
///
/// # Safety
/// As `cuStreamIsCapturing`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing_ptsz(s: CUstream, status: *mut c_int) -> CuResult {
    // SAFETY: the caller's contract.
    unsafe { cuStreamIsCapturing(s, status) }
}

/// `cuPointerGetAttribute` for the memory type and managed-ness; unregistered host memory is
/// `CUDA_ERROR_INVALID_VALUE`, as on the driver.
///
/// # Safety
/// `data` is valid for writing 4 bytes.
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attr: u32,
    ptr: CUdeviceptr,
) -> CuResult {
    let mut a = std::mem::MaybeUninit::<cudaPointerAttributes>::zeroed();
    // SAFETY: `a` is a local the runtime face fills.
    let rc = face(|| unsafe { cudaPointerGetAttributes(a.as_mut_ptr(), ptr as *const c_void) });
    if rc != 0 || data.is_null() {
        return cudaError_t::cudaErrorInvalidValue as u32;
    }
    // SAFETY: zeroed, then filled on success.
    let t = unsafe { a.assume_init() }.type_;
    let (memtype, managed) = match t {
        cudaMemoryType::cudaMemoryTypeHost => (CUmemorytype::CU_MEMORYTYPE_HOST as u32, 0u32),
        cudaMemoryType::cudaMemoryTypeDevice => (CUmemorytype::CU_MEMORYTYPE_DEVICE as u32, 0),
        cudaMemoryType::cudaMemoryTypeManaged => (CUmemorytype::CU_MEMORYTYPE_DEVICE as u32, 1),
        _ => return cudaError_t::cudaErrorInvalidValue as u32,
    };
    let value = match attr {
        x if x == CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE as u32 => memtype,
        x if x == CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED as u32 => managed,
        _ => return cudaError_t::cudaErrorNotSupported as u32,
    };
    // SAFETY: the caller's contract.
    unsafe { data.cast::<u32>().write_unaligned(value) };
    0
}

/// `cuCtxSynchronize` (the first version ignores its argument register; `_v2` takes a
/// context, of which the simulator has one per device: the current device is synchronized).
#[no_mangle]
pub extern "C" fn cuCtxSynchronize(_ctx: CUcontext) -> CuResult {
    face(|| cudaDeviceSynchronize())
}

#[no_mangle]
pub extern "C" fn cuCtxSynchronize_v2(ctx: CUcontext) -> CuResult {
    cuCtxSynchronize(ctx)
}

#[no_mangle]
pub extern "C" fn cuStreamSynchronize(s: CUstream) -> CuResult {
    face(|| cudaStreamSynchronize(s.cast()))
}

#[no_mangle]
pub extern "C" fn cuStreamSynchronize_ptsz(s: CUstream) -> CuResult {
    face(|| cudaStreamSynchronize_ptsz(s.cast()))
}

#[no_mangle]
pub extern "C" fn cuEventSynchronize(e: CUevent) -> CuResult {
    face(|| cudaEventSynchronize(e.cast()))
}

/// `cuStreamQuery`: `CUDA_SUCCESS` when idle, `CUDA_ERROR_NOT_READY` (600, as the runtime's
/// code) while work is pending.
#[no_mangle]
pub extern "C" fn cuStreamQuery(s: CUstream) -> CuResult {
    face(|| cudaStreamQuery(s.cast()))
}

#[no_mangle]
pub extern "C" fn cuStreamQuery_ptsz(s: CUstream) -> CuResult {
    face(|| cudaStreamQuery_ptsz(s.cast()))
}

#[no_mangle]
pub extern "C" fn cuEventQuery(e: CUevent) -> CuResult {
    face(|| cudaEventQuery(e.cast()))
}

macro_rules! copies {
    ($($name:ident, $async_name:ident, $kind:expr, $ptds:literal;)*) => {$(
        /// # Safety
        /// As the runtime copy of the same direction.
        #[no_mangle]
        pub unsafe extern "C" fn $name(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CuResult {
            let (d, s) = (dst as *mut c_void, src as *const c_void);
            // SAFETY: the caller's contract.
            face(|| unsafe {
                if $ptds { cudaMemcpy_ptds(d, s, n, $kind) } else { cudaMemcpy(d, s, n, $kind) }
            })
        }

        /// # Safety
        /// As the runtime copy of the same direction.
        #[no_mangle]
        pub unsafe extern "C" fn $async_name(
            dst: CUdeviceptr,
            src: CUdeviceptr,
            n: usize,
            stream: CUstream,
        ) -> CuResult {
            let (d, s, st) = (dst as *mut c_void, src as *const c_void, stream.cast());
            // SAFETY: the caller's contract.
            face(|| unsafe {
                if $ptds {
                    cudaMemcpyAsync_ptsz(d, s, n, $kind, st)
                } else {
                    cudaMemcpyAsync(d, s, n, $kind, st)
                }
            })
        }
    )*};
}

copies! {
    cuMemcpy, cuMemcpyAsync, DEFAULT, false;
    cuMemcpy_ptds, cuMemcpyAsync_ptsz, DEFAULT, true;
    cuMemcpyHtoD_v2, cuMemcpyHtoDAsync_v2, H2D, false;
    cuMemcpyHtoD_v2_ptds, cuMemcpyHtoDAsync_v2_ptsz, H2D, true;
    cuMemcpyDtoH_v2, cuMemcpyDtoHAsync_v2, D2H, false;
    cuMemcpyDtoH_v2_ptds, cuMemcpyDtoHAsync_v2_ptsz, D2H, true;
    cuMemcpyDtoD_v2, cuMemcpyDtoDAsync_v2, D2D, false;
    cuMemcpyDtoD_v2_ptds, cuMemcpyDtoDAsync_v2_ptsz, D2D, true;
}

#[no_mangle]
pub extern "C" fn cuMemFree_v2(p: CUdeviceptr) -> CuResult {
    face(|| cudaFree(p as *mut c_void))
}

#[no_mangle]
pub extern "C" fn cuMemFreeHost(p: *mut c_void) -> CuResult {
    face(|| cudaFreeHost(p))
}

/// # Safety
/// `pp` is null or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, size: usize) -> CuResult {
    // SAFETY: the caller's contract.
    face(|| unsafe { cudaMallocHost(pp, size) })
}

/// # Safety
/// `pp` is null or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(
    pp: *mut *mut c_void,
    size: usize,
    flags: c_uint,
) -> CuResult {
    // SAFETY: the caller's contract; CU_MEMHOSTALLOC_* are the cudaHostAlloc* values.
    face(|| unsafe { cudaHostAlloc(pp, size, flags) })
}

#[no_mangle]
pub extern "C" fn cuMemHostRegister_v2(p: *mut c_void, size: usize, flags: c_uint) -> CuResult {
    // CU_MEMHOSTREGISTER_* are the cudaHostRegister* values.
    face(|| cudaHostRegister(p, size, flags))
}

#[no_mangle]
pub extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CuResult {
    face(|| cudaHostUnregister(p))
}

/// Base name (and per-thread form) → this library's function, for `cuGetProcAddress`.
fn lookup(name: &[u8], ptds: bool) -> Option<*mut c_void> {
    let f: *mut c_void = match (name, ptds) {
        (b"cuInit", _) => cuInit as *mut c_void,
        (b"cuDriverGetVersion", _) => cuDriverGetVersion as *mut c_void,
        (b"cuDeviceGet", _) => cuDeviceGet as *mut c_void,
        (b"cuDevicePrimaryCtxRetain", _) => cuDevicePrimaryCtxRetain as *mut c_void,
        (b"cuCtxSetCurrent", _) => cuCtxSetCurrent as *mut c_void,
        (b"cuCtxGetDevice", _) => cuCtxGetDevice as *mut c_void,
        (b"cuMemAlloc", _) => cuMemAlloc_v2 as *mut c_void,
        (b"cuStreamCreate", _) => cuStreamCreate as *mut c_void,
        (b"cuEventCreate", _) => cuEventCreate as *mut c_void,
        (b"cuEventRecord", _) => cuEventRecord as *mut c_void,
        (b"cuLaunchHostFunc", _) => cuLaunchHostFunc as *mut c_void,
        (b"cuPointerGetAttribute", _) => cuPointerGetAttribute as *mut c_void,
        (b"cuGetProcAddress", _) => cuGetProcAddress_v2 as *mut c_void,
        (b"cuCtxSynchronize", _) => cuCtxSynchronize as *mut c_void,
        (b"cuStreamSynchronize", false) => cuStreamSynchronize as *mut c_void,
        (b"cuStreamSynchronize", true) => cuStreamSynchronize_ptsz as *mut c_void,
        (b"cuEventSynchronize", _) => cuEventSynchronize as *mut c_void,
        (b"cuStreamQuery", false) => cuStreamQuery as *mut c_void,
        (b"cuStreamQuery", true) => cuStreamQuery_ptsz as *mut c_void,
        (b"cuEventQuery", _) => cuEventQuery as *mut c_void,
        (b"cuMemcpy", false) => cuMemcpy as *mut c_void,
        (b"cuMemcpy", true) => cuMemcpy_ptds as *mut c_void,
        (b"cuMemcpyHtoD", false) => cuMemcpyHtoD_v2 as *mut c_void,
        (b"cuMemcpyHtoD", true) => cuMemcpyHtoD_v2_ptds as *mut c_void,
        (b"cuMemcpyDtoH", false) => cuMemcpyDtoH_v2 as *mut c_void,
        (b"cuMemcpyDtoH", true) => cuMemcpyDtoH_v2_ptds as *mut c_void,
        (b"cuMemcpyDtoD", false) => cuMemcpyDtoD_v2 as *mut c_void,
        (b"cuMemcpyDtoD", true) => cuMemcpyDtoD_v2_ptds as *mut c_void,
        (b"cuMemcpyAsync", false) => cuMemcpyAsync as *mut c_void,
        (b"cuMemcpyAsync", true) => cuMemcpyAsync_ptsz as *mut c_void,
        (b"cuMemcpyHtoDAsync", false) => cuMemcpyHtoDAsync_v2 as *mut c_void,
        (b"cuMemcpyHtoDAsync", true) => cuMemcpyHtoDAsync_v2_ptsz as *mut c_void,
        (b"cuMemcpyDtoHAsync", false) => cuMemcpyDtoHAsync_v2 as *mut c_void,
        (b"cuMemcpyDtoHAsync", true) => cuMemcpyDtoHAsync_v2_ptsz as *mut c_void,
        (b"cuMemcpyDtoDAsync", false) => cuMemcpyDtoDAsync_v2 as *mut c_void,
        (b"cuMemcpyDtoDAsync", true) => cuMemcpyDtoDAsync_v2_ptsz as *mut c_void,
        (b"cuMemFree", _) => cuMemFree_v2 as *mut c_void,
        (b"cuMemFreeHost", _) => cuMemFreeHost as *mut c_void,
        (b"cuMemAllocHost", _) => cuMemAllocHost_v2 as *mut c_void,
        (b"cuMemHostAlloc", _) => cuMemHostAlloc as *mut c_void,
        (b"cuMemHostRegister", _) => cuMemHostRegister_v2 as *mut c_void,
        (b"cuMemHostUnregister", _) => cuMemHostUnregister as *mut c_void,
        _ => return None,
    };
    Some(f)
}

/// `cuGetProcAddress_v2`: the functions above by base name; `CU_GET_PROC_ADDRESS_PER_THREAD_
/// DEFAULT_STREAM` (2) selects the per-thread forms. Versions before 3020 (the 32-bit first
/// copies) are not simulated: CUDA_ERROR_NOT_FOUND.
///
/// # Safety
/// `symbol` is a C string; `pfn` is valid for writing a pointer; `status` is null or valid
/// for writing the status.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut CUdriverProcAddressQueryResult,
) -> CuResult {
    const NOT_FOUND: u32 = 500;
    if symbol.is_null() || pfn.is_null() {
        return cudaError_t::cudaErrorInvalidValue as u32;
    }
    // SAFETY: the caller's contract.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let found = if version >= 3020 {
        lookup(name, flags & 2 != 0)
    } else {
        None
    };
    // SAFETY: the caller's contract.
    unsafe {
        pfn.write(found.unwrap_or(std::ptr::null_mut()));
        if !status.is_null() {
            status.write(if found.is_some() {
                CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS
            } else {
                CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
            });
        }
    }
    if found.is_some() {
        0
    } else {
        NOT_FOUND
    }
}

/// `cuGetProcAddress` (CUDA 11.3 signature).
///
/// # Safety
/// As [`cuGetProcAddress_v2`].
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CuResult {
    // SAFETY: the caller's contract.
    unsafe { cuGetProcAddress_v2(symbol, pfn, version, flags, std::ptr::null_mut()) }
}
