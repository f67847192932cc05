//! The `scn-*` commands: each scenario's launcher (`scenarios/src/launch/*.rs` call [`main`]). A scenario program reaches the CUDA runtime
//! through its dynamic symbol table, so the loader refuses to start it where no
//! `libcudart.so.13` can be found, before it could print a word. The launcher, which needs no
//! runtime, answers `--help` and bad arguments itself, says plainly when no runtime can be
//! loaded (and how to run the scenario on the simulator), and otherwise becomes the program
//! (`scn-NAME-cuda` next to it) by `exec`: same process, same arguments and environment
//! (a preloaded libsyncspy.so included), so what syncspy records is the program's own.

use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use crate::scenario::Args;
use crate::specs;

/// The runtime the programs are linked against.
pub(crate) const RUNTIME: &str = "libcudart.so.13";

/// The launcher's whole work: called by each `scn-NAME` command's `main`.
pub fn main() -> ExitCode {
    let exe = std::env::current_exe().unwrap_or_default();
    let file = exe
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Some(spec) = file.strip_prefix("scn-").and_then(specs::by_name) else {
        eprintln!(
            "{file}: not a scenario launcher name (scn-NAME, NAME one of: {})",
            specs::ALL.map(|s| s.name).join(", ")
        );
        return ExitCode::from(2);
    };
    let argv0 = std::env::args_os()
        .next()
        .unwrap_or_else(|| file.clone().into());
    // Passed on as given; parsed as text (an argument that is not UTF-8 is then unknown).
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let text = args.iter().map(|a| a.to_string_lossy().into_owned());
    match Args::parse_from(spec, text) {
        Ok(None) => {
            println!("{}", spec.usage());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{file}: {e}\n\n{}", spec.usage());
            return ExitCode::from(2);
        }
        Ok(Some(_)) => {}
    }
    if let Err(why) = runtime_loads() {
        eprintln!(
            "{file}: no CUDA runtime: {why}\n\
             Run it on the simulator with `syncspy run --sim -- {file} ...`, or on a machine \
             with the CUDA 13 runtime ({}) on the library path (LD_LIBRARY_PATH or ldconfig).",
            RUNTIME
        );
        return ExitCode::from(2);
    }
    let program = exe.with_file_name(format!("{file}-cuda"));
    let e = std::process::Command::new(&program)
        .arg0(argv0)
        .args(&args)
        .exec();
    eprintln!("{file}: cannot run {}: {e}", program.display());
    ExitCode::from(2)
}

/// Whether the dynamic loader can load the CUDA runtime here (the program's own search:
/// LD_LIBRARY_PATH, the cache, the system folders); why not, in the loader's words.
fn runtime_loads() -> Result<(), String> {
    loads(RUNTIME)
}

/// Whether the dynamic loader can load `lib` here; why not, in the loader's words.
pub(crate) fn loads(lib: &str) -> Result<(), String> {
    use crate::loader::{why, Library, RTLD_LAZY, RTLD_LOCAL};
    // SAFETY: loading the runtime (or NCCL) runs no CUDA initialisation (that happens at its
    // first call); the library is closed again when the handle drops, at once.
    unsafe { Library::open(Some(lib), RTLD_LAZY | RTLD_LOCAL) }
        .map(drop)
        .map_err(|e| why(&e))
}
