//! Kernel and graph launches of the CUDA runtime: never a stall and not counted. The first
//! launch a thread makes after a stall ends the measurement of the GPU idle behind that stall
//! (`behind`). The driver's launches (`cuLaunchKernel` ..., which the runtime itself calls)
//! are wrapped in `driver::hooks`; whichever the thread reaches first ends the measurement.

use std::ffi::c_void;

use cudarc::runtime::sys::{cudaGraphExec_t, cudaLaunchConfig_t, cudaStream_t, dim3};

use super::RawError;

type LaunchFn = unsafe extern "C" fn(
    *const c_void,
    dim3,
    dim3,
    *mut *mut c_void,
    usize,
    cudaStream_t,
) -> RawError;
type LaunchExFn =
    unsafe extern "C" fn(*const cudaLaunchConfig_t, *const c_void, *mut *mut c_void) -> RawError;
type GraphLaunchFn = unsafe extern "C" fn(cudaGraphExec_t, cudaStream_t) -> RawError;

/// Exports one launch function: ends this thread's measurement on the launch's stream, then
/// calls the real function of the same name.
macro_rules! launch {
    ($name:ident: $ty:ty, per_thread = $pt:literal, stream = |$($arg:ident),*| $stream:expr;
     ($($p:ident: $pty:ty),*)) => {
        /// # Safety
        /// Same contract as the CUDA runtime function of the same name.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($p: $pty),*) -> RawError {
            let f = super::real!(
                match ::std::ffi::CStr::from_bytes_with_nul(
                    concat!(stringify!($name), "\0").as_bytes()
                ) {
                    Ok(c) => c,
                    Err(_) => panic!("symbol names have no NUL"),
                },
                $ty
            );
            let stream = {
                let ($($arg,)*) = ($($arg,)*);
                $stream
            };
            crate::behind::launch_queued(stream, $pt);
            // SAFETY: `f` is the real function of this symbol's name, typed with its C
            // signature, with our caller's arguments (this function's `# Safety`).
            unsafe { f($($p),*) }
        }
    };
}

launch!(cudaLaunchKernel: LaunchFn, per_thread = false, stream = |stream| stream as u64;
    (func: *const c_void, grid: dim3, block: dim3, args: *mut *mut c_void, shmem: usize,
     stream: cudaStream_t));
launch!(cudaLaunchKernel_ptsz: LaunchFn, per_thread = true, stream = |stream| stream as u64;
    (func: *const c_void, grid: dim3, block: dim3, args: *mut *mut c_void, shmem: usize,
     stream: cudaStream_t));
launch!(cudaLaunchKernelExC: LaunchExFn, per_thread = false,
    stream = |config| config_stream(config);
    (config: *const cudaLaunchConfig_t, func: *const c_void, args: *mut *mut c_void));
launch!(cudaLaunchKernelExC_ptsz: LaunchExFn, per_thread = true,
    stream = |config| config_stream(config);
    (config: *const cudaLaunchConfig_t, func: *const c_void, args: *mut *mut c_void));
launch!(cudaGraphLaunch: GraphLaunchFn, per_thread = false, stream = |stream| stream as u64;
    (graph: cudaGraphExec_t, stream: cudaStream_t));
launch!(cudaGraphLaunch_ptsz: GraphLaunchFn, per_thread = true, stream = |stream| stream as u64;
    (graph: cudaGraphExec_t, stream: cudaStream_t));

/// The stream of a launch configuration (0 for a null configuration, which the runtime
/// rejects).
fn config_stream(config: *const cudaLaunchConfig_t) -> u64 {
    if config.is_null() {
        return 0;
    }
    // SAFETY: a non-null configuration the caller passes to the runtime, which reads it too.
    unsafe { (*config).stream as u64 }
}
