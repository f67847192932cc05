//! `scn-sync-big-gemm`: an 8192 x 8192 GEMM per step, each followed by
//! `cudaDeviceSynchronize` (`--async`: one synchronization at the end). The synchronization
//! costs what it costs with a small GEMM, but is a negligible share of a step this long. See
//! `syncspy_scenarios::sync_gemm`.

use std::process::ExitCode;

use syncspy_scenarios::scenario::Spec;
use syncspy_scenarios::sync_gemm;

const SPEC: Spec = Spec {
    size: Some((8192, "matrix side n (n x n FP32)")),
    async_flag: true,
    check_flag: true,
    ..Spec::new(
        "sync-big-gemm",
        "a big GEMM per step + cudaDeviceSynchronize (--async: the healthy variant)",
        8,
    )
};

fn main() -> ExitCode {
    sync_gemm::run(SPEC)
}
