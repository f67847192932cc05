//! Libraries of PTX and kernel launches: `cudaLibraryLoadData` → `cudaLibraryGetKernel` →
//! `cudaLaunchKernel` with the `cudaKernel_t` as the function. Which kernels exist and what
//! they do: `kernel.rs`.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::runtime::sys::{cudaError_t, cudaKernel_t, cudaLibrary_t, cudaStream_t, dim3};

use super::{entry, Out};
use crate::engine::{EngineKind, EngineRef};
use crate::error::CudaResult;
use crate::kernel::{self, Launch};
use crate::runtime::runtime;
use crate::work::{KernelWork, Op, Work};

/// Option arrays must be given when their count is not zero.
fn check_options(count: c_uint, keys: *const c_void, values: *const *mut c_void) -> CudaResult {
    if count > 0 && (keys.is_null() || values.is_null()) {
        return Err(cudaError_t::cudaErrorInvalidValue);
    }
    Ok(())
}

/// `cudaLibraryLoadData`: loads PTX text (NUL-terminated). JIT and library options are
/// accepted and ignored. Cubins and fat binaries give `cudaErrorInvalidKernelImage` (the
/// simulator reads PTX only), text that is no PTX `cudaErrorInvalidPtx`.
///
/// # Safety
/// `library` is null or writable; `code` is null or NUL-terminated; the option arrays hold
/// their counts of entries.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // the C signature
pub unsafe extern "C" fn cudaLibraryLoadData(
    library: *mut cudaLibrary_t,
    code: *const c_void,
    jit_options: *mut c_void,
    jit_option_values: *mut *mut c_void,
    num_jit_options: c_uint,
    library_options: *mut c_void,
    library_option_values: *mut *mut c_void,
    num_library_options: c_uint,
) -> cudaError_t {
    entry(|| {
        let out = Out::new(library)?;
        check_options(num_jit_options, jit_options, jit_option_values)?;
        check_options(num_library_options, library_options, library_option_values)?;
        let rt = runtime();
        rt.current_device()?;
        // SAFETY: the caller's contract.
        let handle = unsafe { rt.modules().load(code) }?;
        // SAFETY: the caller's contract.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// `cudaLibraryUnload`: the library's kernel handles become invalid; launches already queued
/// still run.
#[no_mangle]
pub extern "C" fn cudaLibraryUnload(library: cudaLibrary_t) -> cudaError_t {
    entry(|| runtime().modules().unload(library))
}

/// `cudaLibraryGetKernel`: the kernel `name` of `library`, or `cudaErrorSymbolNotFound`.
///
/// # Safety
/// `p_kernel` is null or writable; `name` is null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn cudaLibraryGetKernel(
    p_kernel: *mut cudaKernel_t,
    library: cudaLibrary_t,
    name: *const c_char,
) -> cudaError_t {
    entry(|| {
        let out = Out::new(p_kernel)?;
        if name.is_null() {
            return Err(cudaError_t::cudaErrorInvalidValue);
        }
        // SAFETY: the caller's contract.
        let name = unsafe { CStr::from_ptr(name) };
        let kernel = runtime().modules().get_kernel(library, name)?;
        // SAFETY: the caller's contract.
        unsafe { out.write(kernel) };
        Ok(())
    })
}

/// `cudaLibraryGetKernelCount`.
///
/// # Safety
/// `count` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cudaLibraryGetKernelCount(
    count: *mut c_uint,
    library: cudaLibrary_t,
) -> cudaError_t {
    entry(|| {
        let out = Out::new(count)?;
        let n = runtime().modules().kernel_count(library)?;
        // SAFETY: the caller's contract.
        unsafe { out.write(n as c_uint) };
        Ok(())
    })
}

#[cold]
fn warn_no_model(name: &str) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        eprintln!(
            "simcuda: kernel {name} has no model in the simulator (scenarios/simcuda/src/kernel.rs \
             lists those it runs); launches of it fail with cudaErrorNotSupported"
        );
    }
}

/// # Safety
/// As [`cudaLaunchKernel`].
unsafe fn launch(
    func: *const c_void,
    grid: dim3,
    block: dim3,
    args: *mut *mut c_void,
    stream: cudaStream_t,
    per_thread_default: bool,
) -> CudaResult {
    let rt = runtime();
    let kernel = rt.modules().kernel(func)?.clone();
    let Some(model) = kernel.model else {
        warn_no_model(&kernel.entry.name);
        return Err(cudaError_t::cudaErrorNotSupported);
    };
    kernel::check_geometry(grid, block)?;
    // SAFETY: the caller's contract: one pointer per parameter of the kernel, whose sizes the
    // model matched against the PTX.
    let launch = unsafe { Launch::decode(model, args, grid, block) }?;

    let mut keep = Vec::new();
    let mut fault = None;
    match launch.accesses() {
        None => fault = Some(cudaError_t::cudaErrorIllegalAddress),
        Some(accesses) => {
            let map = rt.memory();
            for a in accesses.iter().filter(|a| a.bytes > 0) {
                match map
                    .find(a.addr)
                    .filter(|alloc| alloc.contains(a.addr, a.bytes))
                {
                    Some(alloc) => {
                        if a.addr % a.align != 0 {
                            fault.get_or_insert(cudaError_t::cudaErrorMisalignedAddress);
                        }
                        keep.push(alloc.clone());
                    }
                    None => {
                        fault.get_or_insert(cudaError_t::cudaErrorIllegalAddress);
                    }
                }
            }
        }
    }

    let mut g = rt.sched.lock();
    let id = rt.resolve_stream(&mut g, stream, per_thread_default)?;
    let device = g.stream(id)?.device;
    let op = Op {
        work: Work::Kernel(KernelWork {
            launch,
            fault,
            gemm_max_n: rt.config.gemm_compute_max_n,
        }),
        engine: Some(EngineRef {
            device,
            kind: EngineKind::Compute,
        }),
        duration_ns: kernel::duration_ns(&rt.config, &launch),
        keep,
    };
    rt.sched.enqueue(&mut g, id, op, Vec::new(), 0)?;
    Ok(())
}

/// `cudaLaunchKernel` with a `cudaKernel_t` from `cudaLibraryGetKernel` as `func` (functions
/// registered by nvcc-compiled host code do not exist here: `cudaErrorInvalidDeviceFunction`).
/// Returns at once; the kernel runs on the device's compute engine in stream order. Dynamic
/// shared memory is ignored.
///
/// # Safety
/// `args` holds one pointer per kernel parameter, each to a readable value of the parameter's
/// type; the memory the kernel touches stays valid until it has run, as CUDA requires.
#[no_mangle]
pub unsafe extern "C" fn cudaLaunchKernel(
    func: *const c_void,
    grid_dim: dim3,
    block_dim: dim3,
    args: *mut *mut c_void,
    _shared_mem: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    // SAFETY: the caller's contract.
    entry(|| unsafe { launch(func, grid_dim, block_dim, args, stream, false) })
}

/// `cudaLaunchKernel_ptsz`: stream 0 is the per-thread default stream.
///
/// # Safety
/// As [`cudaLaunchKernel`].
#[no_mangle]
pub unsafe extern "C" fn cudaLaunchKernel_ptsz(
    func: *const c_void,
    grid_dim: dim3,
    block_dim: dim3,
    args: *mut *mut c_void,
    _shared_mem: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    // SAFETY: the caller's contract.
    entry(|| unsafe { launch(func, grid_dim, block_dim, args, stream, true) })
}
