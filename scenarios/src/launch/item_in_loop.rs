//! `scn-item-in-loop`: the launcher of `scn-item-in-loop-cuda` (see `syncspy_scenarios::launch`).

fn main() -> std::process::ExitCode {
    syncspy_scenarios::launch::main()
}
