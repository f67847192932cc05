//! `scn-multi-thread`: the launcher of `scn-multi-thread-cuda` (see `syncspy_scenarios::launch`).

fn main() -> std::process::ExitCode {
    syncspy_scenarios::launch::main()
}
