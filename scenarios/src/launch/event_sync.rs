//! `scn-event-sync`: the launcher of `scn-event-sync-cuda` (see `syncspy_scenarios::launch`).

fn main() -> std::process::ExitCode {
    syncspy_scenarios::launch::main()
}
