//! Programs that make CUDA stall patterns happen and know exactly what they did.
//!
//! They reach the CUDA runtime through the dynamic symbol table (see `build.rs`), so they
//! run unchanged against the real `libcudart.so.13` on a GPU machine or the simulated one
//! (`scenarios/simcuda`) anywhere else, with `libsyncspy.so` preloaded or not.

pub mod cuda;
pub mod kernels;
pub mod manifest;
pub mod scenario;
pub mod sync_gemm;
pub mod truth;
pub mod validate;

/// The scenario programs, `scn-<name>` each (the names are a contract: tools and the manifest
/// refer to them), in the order a demo shows them.
pub const SCENARIOS: [&str; 10] = [
    "item-in-loop",
    "clean-async",
    "sync-small-gemm",
    "sync-big-gemm",
    "pageable-h2d",
    "pinned-double-buffer",
    "nonzero-dynamic-shape",
    "implicit-free",
    "event-sync",
    "multi-thread",
];
