//! `scn-sync-big-gemm`: the launcher of `scn-sync-big-gemm-cuda` (see `syncspy_scenarios::launch`).

fn main() -> std::process::ExitCode {
    syncspy_scenarios::launch::main()
}
