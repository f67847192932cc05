//! `scenario-check`: runs every scenario of scenarios/manifest.toml under `syncspy run` and
//! checks the reports against the manifest and the programs' ground truth; prints Markdown
//! tables and exits 1 on any mismatch.
//!
//! ```text
//! scenario-check [--sim] [--trace-gpu] [--syncspy PATH] [--bin-dir DIR] [--manifest FILE] --out DIR [--only ID,...]
//!                [--python | --python-only] [--python-bin python3] [--script-dir scenarios/python]
//!                [--python-iters 5,25]
//! scenario-check --saved DIR [--manifest FILE] [--python | --python-only]   # runs saved in DIR
//! ```
//! `--trace-gpu` traces GPU activity through each run (`SYNCSPY_GPU_IDLE=on`) and checks the
//! manifest's `gpu_idle` rules, which are skipped otherwise (tracing slows kernel launches on a
//! real GPU, which the stall-time rules of short runs notice).
//! `--python` also runs the PyTorch scenarios of the manifest (a GPU machine with torch), each
//! at the two iteration counts of `--python-iters`.
//! `--syncspy` and `--bin-dir` default to this program's own folder (a build's target folder,
//! or the folder the artifacts were copied to). Reports, truth lines and stderr are kept in
//! `--out` as `<id>.json`, `<id>.truth`, `<id>.err`.

use std::path::PathBuf;
use std::process::ExitCode;

use syncspy_scenarios::manifest::runner::Runner;
use syncspy_scenarios::manifest::Manifest;
use syncspy_scenarios::validate::python::{self, PyRunner};
use syncspy_scenarios::validate::{check_all, markdown};

fn usage() -> &'static str {
    "usage: scenario-check [--sim] [--trace-gpu] [--syncspy PATH] [--bin-dir DIR] [--manifest FILE] --out DIR [--only ID,...]\n                      [--python | --python-only] [--python-bin python3] [--script-dir scenarios/python] [--python-iters 5,25]\n       scenario-check --saved DIR [--manifest FILE] [--python | --python-only]"
}

/// What the command line asked for.
struct Args {
    sim: bool,
    trace_gpu: bool,
    syncspy: PathBuf,
    bin_dir: PathBuf,
    manifest: Option<PathBuf>,
    out: Option<PathBuf>,
    saved: Option<PathBuf>,
    only: Option<Vec<String>>,
    with_python: bool,
    native: bool,
    python_bin: String,
    script_dir: PathBuf,
    py_iters: (u64, u64),
}

/// The arguments, or the exit code after `--help` or a bad argument (said).
fn parse_args() -> Result<Args, ExitCode> {
    let here = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(PathBuf::from))
        .unwrap_or_default();
    let mut o = Args {
        sim: false,
        trace_gpu: false,
        syncspy: here.join("syncspy"),
        bin_dir: here,
        manifest: None,
        out: None,
        saved: None,
        only: None,
        with_python: false,
        native: true,
        python_bin: "python3".to_string(),
        script_dir: PathBuf::from("scenarios/python"),
        py_iters: (5, 25),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().map(PathBuf::from);
        match a.as_str() {
            "--sim" => o.sim = true,
            "--trace-gpu" => o.trace_gpu = true,
            "--syncspy" => o.syncspy = value().unwrap_or(o.syncspy),
            "--bin-dir" => o.bin_dir = value().unwrap_or(o.bin_dir),
            "--manifest" => o.manifest = value(),
            "--out" => o.out = value(),
            "--saved" => o.saved = value(),
            "--only" => {
                o.only =
                    value().map(|v| v.to_string_lossy().split(',').map(str::to_string).collect())
            }
            "--python" => o.with_python = true,
            "--python-only" => (o.with_python, o.native) = (true, false),
            "--python-bin" => {
                o.python_bin = value()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or(o.python_bin)
            }
            "--script-dir" => o.script_dir = value().unwrap_or(o.script_dir),
            "--python-iters" => {
                let v = value().map(|p| p.to_string_lossy().into_owned());
                let parsed = v.as_deref().and_then(|v| {
                    let (a, b) = v.split_once(',')?;
                    Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
                });
                match parsed {
                    Some((a, b)) if a < b => o.py_iters = (a, b),
                    _ => {
                        eprintln!("scenario-check: --python-iters wants A,B with A < B");
                        return Err(ExitCode::from(2));
                    }
                }
            }
            "-h" | "--help" => {
                println!("{}", usage());
                return Err(ExitCode::SUCCESS);
            }
            _ => {
                eprintln!("scenario-check: unknown argument {a:?}\n{}", usage());
                return Err(ExitCode::from(2));
            }
        }
    }
    Ok(o)
}

/// The folder of the runs' files, and the runner when they are to be made (`--out`) rather
/// than read back (`--saved`); the exit code after an error (said).
fn runs_dir(args: &Args) -> Result<(PathBuf, Option<Runner>), ExitCode> {
    match (&args.saved, &args.out) {
        (Some(dir), _) => Ok((dir.clone(), None)),
        (None, Some(dir)) => {
            if let Err(e) = std::fs::create_dir_all(dir) {
                eprintln!("scenario-check: {}: {e}", dir.display());
                return Err(ExitCode::from(2));
            }
            let runner = Runner {
                syncspy: args.syncspy.clone(),
                bin_dir: args.bin_dir.clone(),
                sim: args.sim,
                out_dir: dir.clone(),
                segment_dir: None,
                trace_gpu: args.trace_gpu,
            };
            Ok((dir.clone(), Some(runner)))
        }
        (None, None) => {
            eprintln!("scenario-check: give --out DIR or --saved DIR\n{}", usage());
            Err(ExitCode::from(2))
        }
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(code) => return code,
    };
    let m = match &args.manifest {
        Some(p) => Manifest::load(p),
        None => Ok(Manifest::bundled()),
    };
    let m = match m {
        Ok(m) => m,
        Err(e) => {
            eprintln!("scenario-check: {e}");
            return ExitCode::from(2);
        }
    };
    let only = &args.only;
    let select = |id: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == id));
    let (dir, runner) = match runs_dir(&args) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let checked = if args.native {
        check_all(&m, runner.as_ref(), &dir, select)
    } else {
        Vec::new()
    };
    let py_checked = if args.with_python {
        let py_runner = runner.as_ref().map(|r| PyRunner {
            syncspy: r.syncspy.clone(),
            python: args.python_bin.clone(),
            script_dir: args.script_dir.clone(),
            out_dir: dir.clone(),
        });
        python::check_all(&m.python, py_runner.as_ref(), &dir, args.py_iters, select)
    } else {
        Vec::new()
    };
    if args.native {
        print!("{}", markdown(&m, &checked));
    }
    if args.with_python {
        println!();
        print!("{}", python::markdown(&py_checked));
    }
    let failed: Vec<_> = checked
        .iter()
        .map(|c| (c.run.id.as_str(), c.verdict.ok()))
        .chain(
            py_checked
                .iter()
                .map(|c| (c.run.id.as_str(), c.verdict.ok())),
        )
        .filter(|(_, ok)| !ok)
        .map(|(id, _)| id)
        .collect();
    if failed.is_empty() {
        let n = checked.len() + py_checked.len();
        println!("\nall {n} runs match the manifest");
        ExitCode::SUCCESS
    } else {
        println!("\nFAILED: {}", failed.join(", "));
        ExitCode::FAILURE
    }
}
