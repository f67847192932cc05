//! `scn-pageable-h2d`: the launcher of `scn-pageable-h2d-cuda` (see `syncspy_scenarios::launch`).

fn main() -> std::process::ExitCode {
    syncspy_scenarios::launch::main()
}
