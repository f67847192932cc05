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

fn main() -> ExitCode {
    let here = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(PathBuf::from))
        .unwrap_or_default();
    let (mut sim, mut syncspy, mut bin_dir) = (false, here.join("syncspy"), here.clone());
    let (mut manifest, mut out, mut saved, mut only) = (None, None, None, None::<Vec<String>>);
    let (mut with_python, mut native) = (false, true);
    let mut python_bin = "python3".to_string();
    let mut script_dir = PathBuf::from("scenarios/python");
    let mut py_iters = (5u64, 25u64);
    let mut trace_gpu = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().map(PathBuf::from);
        match a.as_str() {
            "--sim" => sim = true,
            "--trace-gpu" => trace_gpu = true,
            "--syncspy" => syncspy = value().unwrap_or(syncspy),
            "--bin-dir" => bin_dir = value().unwrap_or(bin_dir),
            "--manifest" => manifest = value(),
            "--out" => out = value(),
            "--saved" => saved = value(),
            "--only" => {
                only = value().map(|v| v.to_string_lossy().split(',').map(str::to_string).collect())
            }
            "--python" => with_python = true,
            "--python-only" => (with_python, native) = (true, false),
            "--python-bin" => {
                python_bin = value()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or(python_bin)
            }
            "--script-dir" => script_dir = value().unwrap_or(script_dir),
            "--python-iters" => {
                let v = value().map(|p| p.to_string_lossy().into_owned());
                let parsed = v.as_deref().and_then(|v| {
                    let (a, b) = v.split_once(',')?;
                    Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
                });
                match parsed {
                    Some((a, b)) if a < b => py_iters = (a, b),
                    _ => {
                        eprintln!("scenario-check: --python-iters wants A,B with A < B");
                        return ExitCode::from(2);
                    }
                }
            }
            "-h" | "--help" => {
                println!("{}", usage());
                return ExitCode::SUCCESS;
            }
            _ => {
                eprintln!("scenario-check: unknown argument {a:?}\n{}", usage());
                return ExitCode::from(2);
            }
        }
    }
    let m = match manifest {
        Some(p) => Manifest::load(&p),
        None => Ok(Manifest::bundled()),
    };
    let m = match m {
        Ok(m) => m,
        Err(e) => {
            eprintln!("scenario-check: {e}");
            return ExitCode::from(2);
        }
    };
    let select = |id: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == id));
    let (dir, runner) = match (saved, out) {
        (Some(dir), _) => (dir, None),
        (None, Some(dir)) => {
            if let Err(e) = std::fs::create_dir_all(&dir) {
                eprintln!("scenario-check: {}: {e}", dir.display());
                return ExitCode::from(2);
            }
            let runner = Runner {
                syncspy,
                bin_dir,
                sim,
                out_dir: dir.clone(),
                segment_dir: None,
                trace_gpu,
            };
            (dir, Some(runner))
        }
        (None, None) => {
            eprintln!("scenario-check: give --out DIR or --saved DIR\n{}", usage());
            return ExitCode::from(2);
        }
    };
    let checked = if native {
        check_all(&m, runner.as_ref(), &dir, select)
    } else {
        Vec::new()
    };
    let py_checked = if with_python {
        let py_runner = runner.as_ref().map(|r| PyRunner {
            syncspy: r.syncspy.clone(),
            python: python_bin.clone(),
            script_dir: script_dir.clone(),
            out_dir: dir.clone(),
        });
        python::check_all(&m.python, py_runner.as_ref(), &dir, py_iters, select)
    } else {
        Vec::new()
    };
    if native {
        print!("{}", markdown(&m, &checked));
    }
    if with_python {
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
