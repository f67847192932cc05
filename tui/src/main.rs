//! `syncspy-top`: the live monitor. Not built yet (see the monitor issue); until then it says
//! so and points at what exists.

fn main() -> std::process::ExitCode {
    eprintln!(
        "syncspy-top: the live monitor is not implemented yet.\n\
         Use `syncspy run -- CMD` for a summary and a JSON report of a command's stalls."
    );
    std::process::ExitCode::from(2)
}
