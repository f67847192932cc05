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

/// `syncspy ARGS` in a pseudo-terminal (python3's pty module) from folder `d`, with `d` as
/// the segment folder: its exit code and everything it wrote.
fn in_a_terminal(d: &TempDir, args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import os, pty, sys; sys.exit(os.waitstatus_to_exitcode(pty.spawn(sys.argv[1:])))",
            common::SYNCSPY,
        ])
        .args(args)
        .current_dir(d.path())
        .env("SYNCSPY_DIR", d.path())
        .env("SIMCUDA_TIME_SCALE", "1")
        .env("TERM", "xterm-256color")
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("python3 is needed for this test");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn run_names_its_session_on_a_terminal_only() {
    let d = TempDir::new("run-session");
    let c = cudacalls();
    let (code, out) = in_a_terminal(&d, &["run", "--sim", "--", &c, "--iters", "1", "sync=s1"]);
    assert_eq!(code, 0, "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("syncspy: session "))
        .unwrap_or_else(|| panic!("no session line:\n{out}"));
    let id: u64 = line["syncspy: session ".len()..]
        .split(':')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(
        line.contains(&format!("`syncspy-top --session {id}`")),
        "{line}"
    );
    // Not in a log or a pipe.
    let piped = run_sim(&d, &[], &[&c, "--iters", "1", "sync=s1"]);
    let err = String::from_utf8_lossy(&piped.stderr);
    assert!(!err.contains("syncspy: session"), "{err}");
}

#[test]
fn tui_with_a_command_that_cannot_start_leaves_no_log() {
    let d = TempDir::new("tui-no-cmd");
    let log = d.path().join("cmd.log");
    let (code, out) = in_a_terminal(
        &d,
        &[
            "run",
            "--sim",
            "--tui",
            "--tui-log",
            log.to_str().unwrap(),
            "--",
            "/nonexistent/syncspy-test-cmd",
        ],
    );
    assert_eq!(code, 127, "{out}");
    assert!(out.contains("command not found"), "{out}");
    assert!(!log.exists(), "{out}");
    // Nor the default log in the current folder.
    let (code, out) = in_a_terminal(
        &d,
        &[
            "run",
            "--sim",
            "--tui",
            "--",
            "/nonexistent/syncspy-test-cmd",
        ],
    );
    assert_eq!(code, 127, "{out}");
    let logs: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .collect();
    assert!(logs.is_empty(), "{logs:?}");
}
