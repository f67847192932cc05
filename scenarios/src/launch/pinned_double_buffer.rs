//! `scn-pinned-double-buffer`: the launcher of `scn-pinned-double-buffer-cuda` (see `syncspy_scenarios::launch`).

fn main() -> std::process::ExitCode {
    syncspy_scenarios::launch::main()
}
