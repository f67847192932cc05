//! Programs that make CUDA stall patterns happen and know exactly what they did.
//!
//! They reach the CUDA runtime through the dynamic symbol table (see `build.rs`), so they
//! run unchanged against the real `libcudart.so.13` on a GPU machine or the simulated one
//! (`scenarios/simcuda`) anywhere else, with `libsyncspy.so` preloaded or not.

pub mod cuda;
pub mod ddp;
pub mod kernels;
pub mod launch;
pub mod loader;
pub mod manifest;
pub mod nccl;
pub mod scenario;
pub mod specs;
pub mod sync_gemm;
pub mod truth;
pub mod validate;

pub use syncspy_manifest::SCENARIOS;
