//! `scn-sync-small-gemm`: the launcher of `scn-sync-small-gemm-cuda` (see `syncspy_scenarios::launch`).

fn main() -> std::process::ExitCode {
    syncspy_scenarios::launch::main()
}
