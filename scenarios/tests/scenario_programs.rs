//! Every scenario program against the simulated runtime, without syncspy: it runs, prints one
//! ground-truth line with its name, passes its data checks (the simulator computes the
//! kernels' real results), and answers `--help`.

mod common;

use std::os::unix::ffi::OsStrExt;
use std::process::Command;

use common::*;
use serde_json::Value;
use syncspy_scenarios::SCENARIOS;

fn run(tag: &str, name: &str, args: &[&str]) -> (std::process::Output, Option<Value>) {
    let lib = common::with_sim_runtime(tag);
    let out = Command::new(artifact(&format!("scn-{name}")))
        .args(args)
        .env("LD_LIBRARY_PATH", lib.path())
        .env("SIMCUDA_TIME_SCALE", "0.2")
        .output()
        .expect("start the scenario");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(lines.len() <= 1, "{name}: more than one JSON line");
    (out, lines.into_iter().next())
}

#[test]
fn every_scenario_runs_and_checks_its_results() {
    for name in SCENARIOS {
        let (out, truth) = run(name, name, &["--iters", "3"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name} failed: {stderr}");
        let truth = truth.unwrap_or_else(|| panic!("{name}: no ground-truth line"));
        assert_eq!(truth["scenario"], *name);
        assert_eq!(truth["ok"], true, "{name}: {truth}");
        assert_eq!(truth["args"]["iters"], 3);
        assert_eq!(
            truth["kinds"].as_object().unwrap().len(),
            6,
            "{name}: all kinds"
        );
        for (key, ms) in truth["gpu_ms"].as_object().unwrap() {
            assert!(ms.as_f64().unwrap() > 0.0, "{name}: gpu_ms.{key} = {ms}");
        }
    }
}

#[test]
fn gemm_results_are_real_where_the_simulator_computes_them() {
    for name in ["sync-small-gemm", "sync-big-gemm"] {
        for mode in [&[][..], &["--async"][..]] {
            let args = [&["--size", "48", "--iters", "2", "--check"][..], mode].concat();
            let (out, truth) = run(name, name, &args);
            assert!(out.status.success(), "{name} {mode:?}");
            let truth = truth.unwrap();
            assert_eq!(truth["checks"]["result"], true, "{name} {mode:?}");
            let syncs = truth["kinds"]["device_sync"]["count"].as_u64();
            // After the warm-up GEMM, each step (unless --async), the end.
            assert_eq!(syncs, Some(if mode.is_empty() { 4 } else { 2 }));
        }
    }
}

#[test]
fn help_and_bad_arguments() {
    for name in SCENARIOS {
        let (out, truth) = run(name, name, &["--help"]);
        assert!(out.status.success());
        assert!(truth.is_none());
        assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("usage: scn-{name}")));
        let (out, _) = run(name, name, &["--bogus"]);
        assert_eq!(out.status.code(), Some(2), "{name}: a bad argument exits 2");
    }
}

#[test]
fn without_a_cuda_runtime_help_works_and_a_run_says_why_not() {
    // No simulated runtime on the library path: the loader finds no libcudart.so.13 (unless
    // the machine has CUDA installed system-wide, checked below).
    let empty = TempDir::new("no-runtime");
    let bare = |name: &str, args: &[&str]| {
        Command::new(artifact(&format!("scn-{name}")))
            .args(args)
            .env("LD_LIBRARY_PATH", empty.path())
            .output()
            .expect("start the scenario")
    };
    for name in SCENARIOS {
        let out = bare(name, &["--help"]);
        assert!(out.status.success(), "{name}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("usage: scn-{name}")));
        let out = bare(name, &["--bogus"]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("unknown argument"));
    }
    // An argument that is not UTF-8: refused like any unknown one, not a panic.
    let odd = std::ffi::OsStr::from_bytes(b"--it\xffers");
    let out = Command::new(artifact("scn-item-in-loop"))
        .arg(odd)
        .env("LD_LIBRARY_PATH", empty.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown argument"));
    let out = bare("item-in-loop", &["--iters", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        eprintln!("this machine has a CUDA runtime on its default library path: not checked");
        return;
    }
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("scn-item-in-loop: no CUDA runtime"), "{err}");
    assert!(err.contains("libcudart.so.13"), "{err}");
    assert!(err.contains("syncspy run --sim"), "{err}");
    assert!(out.stdout.is_empty());
}
