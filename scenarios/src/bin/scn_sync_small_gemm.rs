//! `scn-sync-small-gemm`: a 512 x 512 GEMM per step, each followed by `cudaDeviceSynchronize`
//! (`--async`: one synchronization at the end). The synchronization costs about the same at
//! any size; with a kernel this short it is a large share of each step. See
//! `syncspy_scenarios::sync_gemm`.

use std::process::ExitCode;

use syncspy_scenarios::scenario::Spec;
use syncspy_scenarios::sync_gemm;

const SPEC: Spec = Spec {
    size: Some((512, "matrix side n (n x n FP32)")),
    async_flag: true,
    check_flag: true,
    ..Spec::new(
        "sync-small-gemm",
        "a small GEMM per step + cudaDeviceSynchronize (--async: the healthy variant)",
        200,
    )
};

fn main() -> ExitCode {
    sync_gemm::run(SPEC)
}
