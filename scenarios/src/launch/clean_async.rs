//! `scn-clean-async`: the launcher of `scn-clean-async-cuda` (see `syncspy_scenarios::launch`).

fn main() -> std::process::ExitCode {
    syncspy_scenarios::launch::main()
}
