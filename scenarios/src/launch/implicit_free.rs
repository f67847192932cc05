//! `scn-implicit-free`: the launcher of `scn-implicit-free-cuda` (see `syncspy_scenarios::launch`).

fn main() -> std::process::ExitCode {
    syncspy_scenarios::launch::main()
}
