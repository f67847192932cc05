//! `scn-sync-big-gemm`: an 8192 x 8192 GEMM per step, each followed by
//! `cudaDeviceSynchronize` (`--async`: one synchronization at the end). The synchronization
//! costs what it costs with a small GEMM, but is a negligible share of a step this long. See
//! `syncspy_scenarios::sync_gemm`.

use std::process::ExitCode;

use syncspy_scenarios::specs::SYNC_BIG_GEMM as SPEC;
use syncspy_scenarios::sync_gemm;

fn main() -> ExitCode {
    sync_gemm::run(SPEC)
}
