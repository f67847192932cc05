//! `scn-sync-small-gemm`: a 512 x 512 GEMM per step, each followed by `cudaDeviceSynchronize`
//! (`--async`: one synchronization at the end). The synchronization costs about the same at
//! any size; with a kernel this short it is a large share of each step. See
//! `syncspy_scenarios::sync_gemm`.

use std::process::ExitCode;

use syncspy_scenarios::specs::SYNC_SMALL_GEMM as SPEC;
use syncspy_scenarios::sync_gemm;

fn main() -> ExitCode {
    sync_gemm::run(SPEC)
}
