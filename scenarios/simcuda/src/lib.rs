//! A simulated CUDA runtime: `libsimcudart.so`, with soname and symbol version
//! `libcudart.so.13`, for running CUDA programs (and syncspy around them) where no GPU is.
//!
//! It reproduces the **timing semantics** of the CUDA runtime API, so that a tool measuring
//! where the CPU waits for the GPU sees the waits a real GPU would cause: calls that block on
//! real CUDA block here for the modeled time, asynchronous calls return at once. The rules were
//! checked against CUDA 13.0 on an H100 with `probe/semantics.c`, which runs unchanged against
//! both (`tests/probe.rs` compares the simulator with the recorded real output).
//!
//! Modeled:
//! - streams as in-order queues run by a simulated device with four engines (compute, one
//!   copy engine per direction, the host-callback thread): work of different streams on
//!   different engines overlaps, work on one engine queues; the legacy default stream
//!   synchronizes with blocking streams but not with non-blocking ones; per-thread default
//!   streams; events with timestamps on the modeled timeline; host functions;
//! - copy and memset durations from bytes, link bandwidth and a fixed latency, scaled by
//!   `SIMCUDA_TIME_SCALE` (see `config.rs` for all variables);
//! - which calls block the host (`transfer.rs`, `api/memory.rs`): synchronous copies, pageable
//!   async copies (host-to-device ones are staged through a 2 MiB buffer like the driver's),
//!   memsets of host-visible memory, implicit synchronization in `cudaFree`, `cudaFreeHost`,
//!   `cudaHostUnregister`;
//! - real data movement (device memory is host RAM), pointer attributes, the per-thread last
//!   error, error codes of misuse as CUDA 13 returns them, several devices
//!   (`SIMCUDA_DEVICES`), and a fresh simulator in a fork child;
//! - kernels (`kernel.rs`, `api/launch.rs`): PTX loaded with `cudaLibraryLoadData`, kernels
//!   taken with `cudaLibraryGetKernel` and launched with `cudaLaunchKernel`. The simulator
//!   recognizes the kernels of kernels/ by name (`spin`, `fill`, `scale`, `count_positive`,
//!   `gemm`), runs them on the compute engine for a duration modeled from their arguments, and
//!   computes their real results; bad pointers fault on the device as on a GPU;
//! - NCCL (`nccl/`, `api/nccl.rs`; the library answers to `libnccl.so.2` too): communicators
//!   whose ranks are processes meeting in `$SIMNCCL_DIR`, collectives and messages queued on
//!   the caller's stream that complete when every rank has reached them (plus a transfer
//!   time), with their real results, groups, and their kernels in the CUPTI records.
//!
//! Not modeled (yet): other kernels (a PTX entry without a model loads, but launching it fails
//! with `cudaErrorNotSupported`), kernels registered by nvcc-compiled host code (`<<<...>>>`),
//! module globals (`symbol` arguments are device pointers, see `api/memcpy.rs`), CUDA arrays
//! and textures, graphs and stream capture, memory pools, concurrent kernels, stream
//! priorities, contention on the PCIe link between the two copy directions, and the real
//! runtime's refusal to work in a fork child of a process that used CUDA.

#![allow(unsafe_code)]

mod activity;
pub mod api;
mod clock;
mod completion;
mod config;
mod device;
mod engine;
mod error;
mod event;
mod kernel;
mod memory;
mod nccl;
mod runtime;
mod scheduler;
mod stream;
mod transfer;
mod work;

pub use api::*;

/// Sets the folder where the simulated NCCL's communicators meet (`SIMNCCL_DIR`) for the
/// rest of the process; `None` goes back to the variable. For tests and embedders.
pub fn set_nccl_dir(dir: Option<&std::path::Path>) {
    nccl::set_dir(dir);
}

/// Sets the longest wait of the simulated NCCL for the other ranks (`SIMNCCL_TIMEOUT_S`) for
/// the rest of the process; a test that fails while a rank waits then ends soon.
pub fn set_nccl_timeout(timeout: std::time::Duration) {
    nccl::settings().set_timeout(timeout);
}

/// Changes `SIMCUDA_TIME_SCALE` for the rest of the process (or until the next call): every
/// duration modeled from then on is multiplied by `scale`. For tests and for programs that
/// embed the simulator; ignored unless `scale` is finite and positive.
pub fn set_time_scale(scale: f64) {
    if scale.is_finite() && scale > 0.0 {
        runtime::runtime().config.set_time_scale(scale);
    }
}
