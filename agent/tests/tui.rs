//! `syncspy run --tui` without a terminal (stdout piped, as here): a one-line notice, then the
//! run goes on without the monitor: CMD's output comes through, the report is written and
//! syncspy ends with CMD's exit code.
//!
//! Needs the workspace built (`cargo build --workspace`): `cudacalls`, `libsyncspy.so` and
//! `libsimcudart.so` are taken from the target folder of the `syncspy` under test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{cudacalls, run_sim, TempDir};

#[test]
fn tui_without_a_terminal_prints_a_notice_and_runs_without_the_monitor() {
    let d = TempDir::new("tui-pipe");
    let report = d.path().join("report.json");
    let log = d.path().join("cmd.log");
    let c = cudacalls();
    // cudacalls, then exit 7: the exit code must be CMD's.
    let script = "\"$0\" --iters 3 sync=s1; exit 7";
    let out = run_sim(
        &d,
        &[
            "--tui",
            "--tui-log",
            log.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
        ],
        &["sh", "-c", script, &c],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(7), "{err}");
    let notices: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("running without the monitor"))
        .collect();
    assert_eq!(notices.len(), 1, "{err}");
    assert!(notices[0].contains("--tui needs a terminal"), "{err}");
    // Without the monitor nothing is redirected: CMD's output comes through, no log.
    assert!(stdout.contains("cudaStreamSynchronize"), "{stdout}");
    assert!(!log.exists());
    assert!(!err.contains("output is in"), "{err}");
    // The summary and the report as usual.
    assert!(err.contains("top call sites"), "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["exit_code"], 7);
    let kinds = v.to_string();
    assert!(kinds.contains("stream_sync"), "{kinds}");
}
