//! The whole scenario suite on the simulator, as CI runs it: every run of
//! scenarios/manifest.toml under the real `syncspy run --sim` with the real preloaded library,
//! each report checked against the manifest and the program's ground-truth line
//! (`syncspy_scenarios::manifest::check`: exact counts and bytes per kind, zero of the kinds
//! that must not appear, stall totals against CUDA-event timings).
//!
//! Needs the workspace built (`cargo build --workspace`). The runs go one at a time: the
//! timing bounds are robust to a loaded machine, but there is no need to load it further.

mod common;

use common::*;
use syncspy_scenarios::manifest::runner::Runner;
use syncspy_scenarios::manifest::Manifest;
use syncspy_scenarios::validate::{check_all, markdown};

#[test]
fn every_scenario_matches_the_manifest_on_the_simulator() {
    suite(false);
}

/// The same with GPU activity traced throughout (the simulator's CUPTI): the manifest's
/// `gpu_idle` rules, and every other check but the stall's lower bound (docs in `check`).
#[test]
fn every_scenario_matches_the_manifest_on_the_simulator_traced() {
    suite(true);
}

fn suite(trace_gpu: bool) {
    // The two suites run one after the other, not in parallel test threads: their timings.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let m = Manifest::bundled();
    let out = TempDir::new("manifest");
    let segments = TempDir::new("manifest-segments");
    let runner = Runner {
        syncspy: artifact("syncspy"),
        bin_dir: target_dir(),
        sim: true,
        out_dir: out.path().to_path_buf(),
        segment_dir: Some(segments.path().to_path_buf()),
        trace_gpu,
    };
    // Every binary the manifest names must exist before anything runs.
    for r in &m.runs {
        artifact(&format!("scn-{}", r.scenario));
    }
    artifact("libsyncspy.so");
    artifact("libsimcudart.so");

    let checked = check_all(&m, Some(&runner), out.path(), |_| true);
    assert_eq!(checked.len(), m.runs.len());
    let failed: Vec<String> = checked
        .iter()
        .filter(|c| !c.verdict.ok())
        .map(|c| {
            let why: Vec<String> = c
                .verdict
                .failures()
                .map(|f| format!("{}: expected {}, found {}", f.what, f.expected, f.found))
                .collect();
            format!(
                "{}:\n    {}\n    stderr: {}",
                c.run.id,
                why.join("\n    "),
                c.outcome.stderr
            )
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} runs do not match the manifest:\n{}\n\n{}",
        failed.len(),
        checked.len(),
        failed.join("\n"),
        markdown(&m, &checked)
    );
}
