//! `scn-ddp-straggler`: the launcher of the job's ranks (`scn-ddp-straggler-cuda`, one process
//! per rank; see `syncspy_scenarios::ddp`).

fn main() -> std::process::ExitCode {
    syncspy_scenarios::ddp::launch()
}
