//! `scn-nonzero-dynamic-shape`: the launcher of `scn-nonzero-dynamic-shape-cuda` (see `syncspy_scenarios::launch`).

fn main() -> std::process::ExitCode {
    syncspy_scenarios::launch::main()
}
