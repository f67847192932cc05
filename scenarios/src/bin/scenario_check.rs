//! `scenario-check`: runs every scenario of scenarios/manifest.toml under `syncspy run` and
//! checks the reports against the manifest and the programs' ground truth; prints Markdown
//! tables and exits 1 on any mismatch.
//!
//! ```text
//! scenario-check [--sim] [--syncspy PATH] [--bin-dir DIR] [--manifest FILE] --out DIR [--only ID,...]
//! scenario-check --saved DIR [--manifest FILE]      # check runs saved earlier in DIR
//! ```
//! `--syncspy` and `--bin-dir` default to this program's own folder (a build's target folder,
//! or the folder the artifacts were copied to). Reports, truth lines and stderr are kept in
//! `--out` as `<id>.json`, `<id>.truth`, `<id>.err`.

use std::path::PathBuf;
use std::process::ExitCode;

use syncspy_scenarios::manifest::runner::Runner;
use syncspy_scenarios::manifest::Manifest;
use syncspy_scenarios::validate::{check_all, markdown};

fn usage() -> &'static str {
    "usage: scenario-check [--sim] [--syncspy PATH] [--bin-dir DIR] [--manifest FILE] --out DIR [--only ID,...]\n       scenario-check --saved DIR [--manifest FILE]"
}

fn main() -> ExitCode {
    let here = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(PathBuf::from))
        .unwrap_or_default();
    let (mut sim, mut syncspy, mut bin_dir) = (false, here.join("syncspy"), here.clone());
    let (mut manifest, mut out, mut saved, mut only) = (None, None, None, None::<Vec<String>>);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().map(PathBuf::from);
        match a.as_str() {
            "--sim" => sim = true,
            "--syncspy" => syncspy = value().unwrap_or(syncspy),
            "--bin-dir" => bin_dir = value().unwrap_or(bin_dir),
            "--manifest" => manifest = value(),
            "--out" => out = value(),
            "--saved" => saved = value(),
            "--only" => {
                only = value().map(|v| v.to_string_lossy().split(',').map(str::to_string).collect())
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
    let checked = match (saved, out) {
        (Some(dir), _) => check_all(&m, None, &dir, select),
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
            };
            check_all(&m, Some(&runner), &dir, select)
        }
        (None, None) => {
            eprintln!("scenario-check: give --out DIR or --saved DIR\n{}", usage());
            return ExitCode::from(2);
        }
    };
    print!("{}", markdown(&m, &checked));
    let failed: Vec<_> = checked
        .iter()
        .filter(|c| !c.verdict.ok())
        .map(|c| c.run.id.as_str())
        .collect();
    if failed.is_empty() {
        println!("\nall {} runs match the manifest", checked.len());
        ExitCode::SUCCESS
    } else {
        println!("\nFAILED: {}", failed.join(", "));
        ExitCode::FAILURE
    }
}
