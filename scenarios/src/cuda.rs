//! The CUDA runtime functions the programs call, declared with cudarc's types, plus a
//! checked-call helper.

use std::ffi::{c_char, c_int, c_uint, c_void};

pub use cudarc::runtime::sys::{
    cudaError_t, cudaEvent_t, cudaExtent, cudaHostFn_t, cudaJitOption, cudaKernel_t,
    cudaLibraryOption, cudaLibrary_t, cudaMemcpy3DParms, cudaMemcpyKind, cudaPitchedPtr, cudaPos,
    cudaStream_t, dim3,
};

#[link(name = "cudart")]
extern "C" {
    pub fn cudaGetDeviceCount(count: *mut c_int) -> cudaError_t;
    pub fn cudaSetDevice(device: c_int) -> cudaError_t;
    pub fn cudaGetLastError() -> cudaError_t;
    pub fn cudaGetErrorString(e: cudaError_t) -> *const c_char;
    pub fn cudaDeviceSynchronize() -> cudaError_t;
    pub fn cudaMalloc(ptr: *mut *mut c_void, size: usize) -> cudaError_t;
    pub fn cudaFree(ptr: *mut c_void) -> cudaError_t;
    pub fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) -> cudaError_t;
    pub fn cudaHostAlloc(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> cudaError_t;
    pub fn cudaFreeHost(ptr: *mut c_void) -> cudaError_t;
    pub fn cudaHostRegister(ptr: *mut c_void, size: usize, flags: c_uint) -> cudaError_t;
    pub fn cudaHostUnregister(ptr: *mut c_void) -> cudaError_t;
    pub fn cudaMemcpy(
        dst: *mut c_void,
        src: *const c_void,
        n: usize,
        kind: cudaMemcpyKind,
    ) -> cudaError_t;
    pub fn cudaMemcpy_ptds(
        dst: *mut c_void,
        src: *const c_void,
        n: usize,
        kind: cudaMemcpyKind,
    ) -> cudaError_t;
    pub fn cudaMemcpyAsync(
        dst: *mut c_void,
        src: *const c_void,
        n: usize,
        kind: cudaMemcpyKind,
        stream: cudaStream_t,
    ) -> cudaError_t;
    pub fn cudaMemcpyAsync_ptsz(
        dst: *mut c_void,
        src: *const c_void,
        n: usize,
        kind: cudaMemcpyKind,
        stream: cudaStream_t,
    ) -> cudaError_t;
    pub fn cudaMemcpy2D(
        dst: *mut c_void,
        dpitch: usize,
        src: *const c_void,
        spitch: usize,
        width: usize,
        height: usize,
        kind: cudaMemcpyKind,
    ) -> cudaError_t;
    pub fn cudaMemcpy2DAsync(
        dst: *mut c_void,
        dpitch: usize,
        src: *const c_void,
        spitch: usize,
        width: usize,
        height: usize,
        kind: cudaMemcpyKind,
        stream: cudaStream_t,
    ) -> cudaError_t;
    pub fn cudaMemcpy3D(p: *const cudaMemcpy3DParms) -> cudaError_t;
    pub fn cudaMemcpy3DAsync(p: *const cudaMemcpy3DParms, stream: cudaStream_t) -> cudaError_t;
    pub fn cudaMemcpyPeer(
        dst: *mut c_void,
        dst_device: c_int,
        src: *const c_void,
        src_device: c_int,
        n: usize,
    ) -> cudaError_t;
    pub fn cudaMemset(ptr: *mut c_void, value: c_int, n: usize) -> cudaError_t;
    pub fn cudaMemsetAsync(
        ptr: *mut c_void,
        value: c_int,
        n: usize,
        stream: cudaStream_t,
    ) -> cudaError_t;
    pub fn cudaStreamCreateWithFlags(stream: *mut cudaStream_t, flags: c_uint) -> cudaError_t;
    pub fn cudaStreamDestroy(stream: cudaStream_t) -> cudaError_t;
    pub fn cudaStreamSynchronize(stream: cudaStream_t) -> cudaError_t;
    pub fn cudaStreamSynchronize_ptsz(stream: cudaStream_t) -> cudaError_t;
    pub fn cudaEventCreate(event: *mut cudaEvent_t) -> cudaError_t;
    pub fn cudaEventRecord(event: cudaEvent_t, stream: cudaStream_t) -> cudaError_t;
    pub fn cudaEventSynchronize(event: cudaEvent_t) -> cudaError_t;
    pub fn cudaEventElapsedTime(ms: *mut f32, start: cudaEvent_t, end: cudaEvent_t) -> cudaError_t;
    pub fn cudaEventDestroy(event: cudaEvent_t) -> cudaError_t;
    pub fn cudaLaunchHostFunc(
        stream: cudaStream_t,
        f: cudaHostFn_t,
        data: *mut c_void,
    ) -> cudaError_t;
    pub fn cudaStreamWaitEvent(
        stream: cudaStream_t,
        event: cudaEvent_t,
        flags: c_uint,
    ) -> cudaError_t;
    pub fn cudaStreamQuery(stream: cudaStream_t) -> cudaError_t;
    pub fn cudaEventCreateWithFlags(event: *mut cudaEvent_t, flags: c_uint) -> cudaError_t;
    pub fn cudaEventQuery(event: cudaEvent_t) -> cudaError_t;
    #[allow(clippy::too_many_arguments)] // the C signature
    pub fn cudaLibraryLoadData(
        library: *mut cudaLibrary_t,
        code: *const c_void,
        jit_options: *mut cudaJitOption,
        jit_option_values: *mut *mut c_void,
        num_jit_options: c_uint,
        library_options: *mut cudaLibraryOption,
        library_option_values: *mut *mut c_void,
        num_library_options: c_uint,
    ) -> cudaError_t;
    pub fn cudaLibraryUnload(library: cudaLibrary_t) -> cudaError_t;
    pub fn cudaLibraryGetKernel(
        kernel: *mut cudaKernel_t,
        library: cudaLibrary_t,
        name: *const c_char,
    ) -> cudaError_t;
    /// `func` is a `cudaKernel_t` from `cudaLibraryGetKernel` (CUDA 12+ accepts one in place
    /// of a device function symbol).
    pub fn cudaLaunchKernel(
        func: *const c_void,
        grid: dim3,
        block: dim3,
        args: *mut *mut c_void,
        shared_mem: usize,
        stream: cudaStream_t,
    ) -> cudaError_t;
}

/// Panics with the call and the runtime's message unless `rc` is success: these programs
/// are ground truth, and a failed call would make their account wrong.
#[track_caller]
pub fn check(rc: cudaError_t, what: &str) {
    if rc != cudaError_t::cudaSuccess {
        // SAFETY: the runtime returns a static NUL-terminated string for every code.
        let msg = unsafe { std::ffi::CStr::from_ptr(cudaGetErrorString(rc)) };
        panic!("{what} failed: {rc:?} ({})", msg.to_string_lossy());
    }
}
