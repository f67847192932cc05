//! `syncspy check` end to end, without a GPU: the real `libsyncspy.so` preloaded into
//! `cudacalls` running against the simulated CUDA runtime (`--sim`), judged against budgets
//! that pass, fail, cannot be decided, or are malformed.
//!
//! Needs the workspace built (`cargo build --workspace`): `cudacalls`, `libsyncspy.so` and
//! `libsimcudart.so` are taken from the target folder of the `syncspy` under test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

mod common;
use common::{cudacalls, TempDir, SYNCSPY};

struct Checked {
    out: Output,
    junit: Option<String>,
    report: Option<Value>,
}

impl Checked {
    fn code(&self) -> i32 {
        self.out.status.code().unwrap_or(-1)
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
}

/// `syncspy check --sim --budget B --junit J --report R [extra] -- CMD` in a private folder.
fn check(d: &TempDir, budget: &str, env: &[(&str, &str)], cmd: &[&str]) -> Checked {
    let b = d.file("budget.toml", budget);
    let junit = d.path().join("junit.xml");
    let report = d.path().join("report.json");
    let _ = std::fs::remove_file(&junit);
    let _ = std::fs::remove_file(&report);
    let out = Command::new(SYNCSPY)
        .args(["check", "--sim", "--budget"])
        .arg(&b)
        .arg("--junit")
        .arg(&junit)
        .arg("--report")
        .arg(&report)
        .arg("--")
        .args(cmd)
        .env("SYNCSPY_DIR", d.path())
        .env("SIMCUDA_TIME_SCALE", "1")
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .envs(env.iter().copied())
        .output()
        .expect("start syncspy");
    Checked {
        junit: std::fs::read_to_string(&junit).ok(),
        report: std::fs::read(&report)
            .ok()
            .map(|b| serde_json::from_slice(&b).expect("the report is JSON")),
        out,
    }
}

/// Three steps, each: 2 ms of GPU work and a wait for it in `run_op`, a wait reached through
/// `path_a` and one through `path_b` (the iteration marker below), a 4 KiB pageable copy.
fn workload() -> Vec<String> {
    [
        "--iters",
        "3",
        "busy=s1:2000",
        "sync=s1",
        "sync-a=s1",
        "sync-b=s1",
        "async=d2h:4096:pageable:s1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn cmd(prog: &str, args: &[String]) -> Vec<String> {
    let mut v = vec![prog.to_string()];
    v.extend(args.iter().cloned());
    v
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

const PASSING: &str = r#"
[iterations]
kind = "stream_sync"
site = "path_b"

[[rule]]
name = "only the known syncs"
kind = "stream_sync"
max_count = 9
allow_sites = ["nothing-matches-this"]

[[rule]]
name = "no device syncs in the steps"
kind = "device_sync"
site = "run_op"
forbid = true

[[rule]]
name = "pageable bytes per step"
kind = "memcpy_pageable"
max_bytes_per_iteration = 4096
max_count = 3

[[rule]]
name = "stall share"
max_stall_share = 1.0

[[rule]]
name = "gpu idle"
max_gpu_idle_share = 0.05
"#;

#[test]
fn a_gpu_idle_budget_is_evaluated_where_the_gpu_is_traced() {
    // The simulated runtime's activity records: the workload's GPU sits idle between its
    // steps far more than 5% of the time, so the same budget fails on that one rule.
    let d = TempDir::new("gpu-idle");
    let c = cudacalls();
    let r = check(
        &d,
        PASSING,
        &[("SYNCSPY_GPU_IDLE", "on")],
        &strs(&cmd(&c, &workload())),
    );
    let err = r.stderr();
    assert_eq!(r.code(), 1, "{err}");
    assert!(err.contains("FAIL    gpu idle"), "{err}");
    assert!(
        err.contains("OVER BUDGET (1 failed, 0 not evaluated, 4 passed, 0 not measured)"),
        "{err}"
    );
}

#[test]
fn a_budget_that_holds_exits_0() {
    let d = TempDir::new("pass");
    let c = cudacalls();
    // GPU idle not traced: its rule is reported as not measured, not failed.
    let r = check(
        &d,
        PASSING,
        &[("SYNCSPY_GPU_IDLE", "off")],
        &strs(&cmd(&c, &workload())),
    );
    let err = r.stderr();
    assert_eq!(r.code(), 0, "{err}");
    assert!(
        err.contains("within budget (0 failed, 0 not evaluated, 4 passed, 1 not measured)"),
        "{err}"
    );
    assert!(err.contains("SKIP    gpu idle"), "{err}");
    assert!(err.contains("not measured"), "{err}");
    // The run's own summary comes first, as with `syncspy run`.
    assert!(
        err.find("top call sites").unwrap() < err.find("budget ").unwrap(),
        "{err}"
    );

    let v = r.report.unwrap();
    let b = &v["budget"];
    assert_eq!(b["outcome"], "within_budget");
    let results = b["results"].as_array().unwrap();
    assert_eq!(results.len(), 5);
    let per_step = results
        .iter()
        .find(|x| x["rule"] == "pageable bytes per step")
        .unwrap();
    assert_eq!(per_step["iterations"]["count"], 3);
    let limit = |key: &str| {
        per_step["limits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["key"] == key)
            .unwrap()
            .clone()
    };
    assert_eq!(limit("max_bytes_per_iteration")["value"], 4096.0);
    assert_eq!(limit("max_count")["value"], 3.0);
    // One process: every result names it.
    let pid = v["processes"][0]["pid"].as_u64().unwrap();
    assert!(results.iter().all(|x| x["pid"].as_u64() == Some(pid)));

    let j = r.junit.unwrap();
    assert!(
        j.contains(r#"tests="5" failures="0" errors="0" skipped="1""#),
        "{j}"
    );
    assert_eq!(j.matches("<testcase ").count(), 5, "{j}");
    assert!(j.contains("name=\"stall share [cudacalls]\""), "{j}");
    // Stable names: the pid is in the text only.
    assert!(!j.contains(&format!("[pid {pid}")), "{j}");
}

#[test]
fn a_violated_budget_exits_1_and_names_the_violation_and_its_site() {
    let d = TempDir::new("fail");
    let c = cudacalls();
    let budget = r#"
[[rule]]
name = "no stream syncs in the step"
kind = "stream_sync"
site = "run_op"
allow_sites = ["path_a", "path_b"]
max_count = 0

[[rule]]
name = "syncs through path_a are fine"
kind = "stream_sync"
site = "path_a"
max_count = 3

[[rule]]
name = "pageable copies"
kind = "memcpy_pageable"
max_bytes = 8192
"#;
    let r = check(&d, budget, &[], &strs(&cmd(&c, &workload())));
    let err = r.stderr();
    assert_eq!(r.code(), 1, "{err}");
    assert!(
        err.contains("OVER BUDGET (2 failed, 0 not evaluated, 1 passed"),
        "{err}"
    );
    let v = r.report.unwrap();
    let pid = v["processes"][0]["pid"].as_u64().unwrap();
    assert!(
        err.contains(&format!("FAIL    no stream syncs in the step  [pid {pid} ")),
        "{err}"
    );
    assert!(err.contains("3 events > max_count 0"), "{err}");
    assert!(err.contains("12.0 KiB moved > max_bytes 8.0 KiB"), "{err}");
    // The violation's call site: the wait in run_op, not the allowed ones.
    let fail_block = &err[err.find("FAIL    no stream syncs").unwrap()..];
    let fail_block = &fail_block[..fail_block.find("\n  FAIL").unwrap_or(fail_block.len())];
    assert!(fail_block.contains("at cudacalls::run_op"), "{fail_block}");
    assert!(
        !fail_block.contains("path_a") && !fail_block.contains("path_b"),
        "{fail_block}"
    );
    assert!(err.contains("exit 1"), "{err}");

    let j = r.junit.unwrap();
    assert!(
        j.contains(r#"tests="3" failures="2" errors="0" skipped="0""#),
        "{j}"
    );
    assert!(
        j.contains(
            "<testcase classname=\"syncspy.budget\" name=\"no stream syncs in the step [cudacalls]\""
        ),
        "{j}"
    );
    assert!(
        j.contains(r#"<failure message="3 events &gt; max_count 0; top site: cudaStreamSynchronize x3 at cudacalls::sync_op"#),
        "{j}"
    );
    assert_eq!(v["budget"]["outcome"], "over_budget");
    let failed: Vec<&str> = v["budget"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["status"] == "fail")
        .map(|x| x["rule"].as_str().unwrap())
        .collect();
    assert_eq!(
        failed,
        vec!["no stream syncs in the step", "pageable copies"]
    );
}

#[test]
fn a_bad_budget_file_exits_2_with_its_line_before_anything_runs() {
    let d = TempDir::new("bad");
    let marker = d.path().join("ran");
    let budget = "[[rule]]\nname = \"a\"\nkind = \"stream_sync\"\nmax_cout = 0\n";
    let r = check(&d, budget, &[], &["touch", marker.to_str().unwrap()]);
    let err = r.stderr();
    assert_eq!(r.code(), 2, "{err}");
    assert!(err.starts_with("syncspy: bad budget file "), "{err}");
    assert!(
        err.contains("budget.toml: line 4, column 1: unknown field `max_cout`"),
        "{err}"
    );
    assert!(err.contains("4 | max_cout = 0"), "{err}");
    assert!(
        !marker.exists(),
        "the command must not run with a bad budget"
    );
    assert!(r.junit.is_none() && r.report.is_none());

    let r = check(
        &d,
        "[[rule]]\nname = \"a\"\nkind = \"stream_synk\"\nmax_count = 0\n",
        &[],
        &["true"],
    );
    assert_eq!(r.code(), 2);
    assert!(r.stderr().contains("line 3"), "{}", r.stderr());
    assert!(
        r.stderr().contains("unknown event kind `stream_synk`"),
        "{}",
        r.stderr()
    );

    let o = Command::new(SYNCSPY)
        .args(["check", "--budget", "/nonexistent/b.toml", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cannot read budget file /nonexistent/b.toml"),
        "{err}"
    );
}

#[test]
fn setup_errors_and_commands_that_cannot_start_exit_2() {
    let d = TempDir::new("setup");
    let budget = "[[rule]]\nname = \"a\"\nmax_count = 0\n";
    let r = check(&d, budget, &[], &["syncspy-no-such-command-xyz"]);
    assert_eq!(r.code(), 2, "{}", r.stderr());
    assert!(
        r.stderr().contains("syncspy-no-such-command-xyz"),
        "{}",
        r.stderr()
    );
    assert!(r.stderr().contains("not found"), "{}", r.stderr());

    let r = check(
        &d,
        budget,
        &[("SYNCSPY_LIB", "/nonexistent/libsyncspy.so")],
        &["true"],
    );
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr()
            .contains("SYNCSPY_LIB=/nonexistent/libsyncspy.so"),
        "{}",
        r.stderr()
    );

    let b = d.file("b.toml", budget);
    let o = Command::new(SYNCSPY)
        .args(["check", "--budget"])
        .arg(&b)
        .args(["--junit", "/nonexistent/dir/j.xml", "--", "true"])
        .env("SYNCSPY_DIR", d.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--junit /nonexistent/dir/j.xml"));
}

#[test]
fn a_failed_command_or_no_instrumented_process_is_not_within_budget() {
    let d = TempDir::new("cmdfail");
    let c = cudacalls();
    let budget = "[[rule]]\nname = \"generous\"\nmax_count = 1000\n";
    let script = format!("{c} sync=s1 >/dev/null; exit 3");
    let r = check(&d, budget, &[], &["sh", "-c", &script]);
    let err = r.stderr();
    assert_eq!(r.code(), 2, "{err}");
    assert!(err.contains("the command exited with code 3"), "{err}");
    assert!(err.contains("NOT EVALUATED"), "{err}");
    let j = r.junit.unwrap();
    assert!(
        j.contains(r#"<testcase classname="syncspy.budget" name="run" time="0">"#),
        "{j}"
    );

    let r = check(&d, budget, &[], &["true"]);
    assert_eq!(r.code(), 2, "{}", r.stderr());
    assert!(
        r.stderr().contains("no instrumented process"),
        "{}",
        r.stderr()
    );
}

#[test]
fn lost_records_make_site_rules_fail_safe() {
    let d = TempDir::new("lost");
    let c = cudacalls();
    // A 16-record ring and thousands of back-to-back waits, all in run_op: the reader loses
    // records, so it cannot know how many of the 3000 waits were in run_op.
    let ops = ["--iters", "3000", "sync=s1"];
    let undecided = r#"
[[rule]]
name = "run_op syncs"
kind = "stream_sync"
site = "run_op"
max_count = 2999
[[rule]]
name = "all syncs, from the exact totals"
kind = "stream_sync"
max_count = 3000
"#;
    let mut args = vec![c.as_str()];
    args.extend(ops);
    let r = check(&d, undecided, &[("SYNCSPY_RING", "16")], &args);
    let err = r.stderr();
    let v = r.report.as_ref().unwrap();
    assert!(
        v["processes"][0]["lost_records"].as_u64().unwrap() > 0,
        "the reader was expected to fall behind:\n{err}"
    );
    assert_eq!(r.code(), 2, "{err}");
    assert!(err.contains("UNKNOWN run_op syncs"), "{err}");
    assert!(err.contains("cannot tell against max_count 2999"), "{err}");
    assert!(err.contains("raise SYNCSPY_RING"), "{err}");
    assert!(
        err.contains("ok      all syncs, from the exact totals"),
        "{err}"
    );
    let j = r.junit.unwrap();
    assert!(j.contains(r#"type="not_evaluated""#), "{j}");

    // Already over the limit with the records received: a definite violation.
    let over = "[[rule]]\nname = \"none in run_op\"\nkind = \"stream_sync\"\nsite = \"run_op\"\nmax_count = 0\n";
    let r = check(&d, over, &[("SYNCSPY_RING", "16")], &args);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    assert!(r.stderr().contains("at least "), "{}", r.stderr());
}

#[test]
fn a_check_without_a_budget_is_a_usage_error() {
    // `--budget` is required.
    let o = Command::new(SYNCSPY)
        .args(["check", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// The budget example of the user guide's page on `syncspy check` (it was the README's).
#[test]
fn the_guide_budget_example_is_a_valid_budget() {
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/guide/ci-budgets.md"),
    )
    .unwrap();
    let section = &page[page
        .find("# Checking a budget in CI")
        .expect("the guide's page on syncspy check")..];
    let start = section.find("```toml\n").expect("a toml example") + "```toml\n".len();
    let example = &section[start..start + section[start..].find("```").unwrap()];
    let b = syncspy_cli::budget::parse("docs/guide/ci-budgets.md", example).unwrap();
    assert_eq!(b.rules.len(), 3);
    assert!(b.iterations.is_some());
}

#[test]
fn a_violation_with_a_junit_file_that_cannot_be_written_exits_2() {
    let d = TempDir::new("junit-unwritable");
    let b = d.file(
        "budget.toml",
        "[[rule]]\nname = \"no syncs\"\nkind = \"stream_sync\"\nmax_count = 0\n",
    );
    let c = cudacalls();
    // /proc exists, so the path passes the early check, but no file can be made there.
    let o = Command::new(SYNCSPY)
        .args(["check", "--sim", "--budget"])
        .arg(&b)
        .args(["--junit", "/proc/syncspy-test-junit.xml", "--"])
        .args([c.as_str(), "--iters", "2", "sync=s1"])
        .env("SYNCSPY_DIR", d.path())
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    // Over budget, but the file CI reads is missing: not checked (2), and the verdict said.
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cannot write the JUnit file /proc/syncspy-test-junit.xml"),
        "{err}"
    );
    assert!(err.contains("OVER BUDGET"), "{err}");
}
