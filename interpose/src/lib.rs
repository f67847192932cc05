//! `libsyncspy.so`: loaded with `LD_PRELOAD`, it interposes the CUDA runtime and driver API
//! calls that make the host wait for the GPU (the driver's through `dlsym` and
//! `cuGetProcAddress` too, see `driver`), forwards each to the real runtime, and records the waits
//! into this process's shared-memory segment (see the `syncspy-abi` crate).
//!
//! Data flow of one call:
//! ```text
//! app → hooks::<family>::cudaX (exported symbol)
//!         ├─ classify (pinned? direction? bytes)          classify.rs, pinned.rs
//!         ├─ non-stall: count in the header, call real    (no clock, no record)
//!         └─ stall: time the real call, capture the stack, stack.rs
//!                   write one record + exact totals       record.rs
//! ```
//! Everything that can fail in the library's own work falls back to calling the real
//! function: the application sees the same return value, errno and behaviour as without it.

mod api;
mod attach;
mod behind;
mod call;
mod classify;
mod clock;
mod config;
mod device;
pub mod driver;
mod entry;
mod errno;
pub mod gpu;
mod guard;
pub mod hooks;
mod hostwait;
mod init;
pub mod nccl;
mod pinned;
mod process;
mod python;
mod real;
mod record;
mod shed;
mod stack;
mod state;
mod unwind_ahead;

pub use call::Call;
pub use classify::HostSide;

/// Entry points for the benchmarks: the same code paths the exported hooks take, with the
/// real function supplied by the caller. Not a stable API.
#[doc(hidden)]
pub mod testing {
    pub use crate::driver::hooks::{
        launch_host_func, launch_kernel, LaunchHostFuncFn, LaunchKernelFn,
    };
    pub use crate::hooks::memcpy::memcpy_async;
    pub use crate::hooks::sync::{stream_query, stream_sync};
    pub use crate::hostwait::HostFn;
    pub use crate::pinned::add as register_pinned;

    /// Uses `f` as the runtime's `cudaGetDevice` (a benchmark has no runtime to find).
    pub fn use_get_device(f: unsafe extern "C" fn(*mut i32) -> u32) {
        crate::device::GET_DEVICE.preset(f as *mut std::ffi::c_void);
    }

    /// Makes the library take `python::fake`'s 3.11 interpreter for the process's own (call
    /// before the first hooked call).
    pub fn use_fake_python() -> bool {
        crate::python::install(crate::python::fake::python())
    }

    pub use crate::python::fake::Stack as FakePythonStack;

    /// The site a recorded event with native site `native` gets (the per-event Python step);
    /// `None` before the runtime is active.
    pub fn python_site(native: u32) -> Option<u32> {
        let rt = crate::init::active()?;
        Some(crate::python::site(rt, native))
    }

    /// Interns a native stack in the process's segment.
    pub fn intern_native_site(frames: &[u64]) -> Option<u32> {
        crate::init::active()?.seg.intern_site(frames)
    }

    /// Puts the library in the dormant state (hooks pass through): what `SYNCSPY_DORMANT=1`
    /// gives before an attach and what a detach leaves.
    pub fn go_dormant() {
        crate::state::go_dormant();
    }

    /// Unwinds the calling thread's stack (no frames skipped); returns the frame count.
    pub fn unwind(depth: usize) -> usize {
        let mut f = [0u64; syncspy_abi::sites::MAX_FRAMES];
        crate::stack::capture((0, 0), depth, &mut f).0
    }
}
