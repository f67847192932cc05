//! The GPU idle each stall causes, measured always on (issue 36, ABI 1.10): at every stream
//! and device sync the library records an event before the wait and another before the
//! thread's next launch, so each sync's GPU cost is exact with GPU tracing in its default
//! mode or off. `scn-item-in-loop` syncs every step, then works on the host (`--host-us`)
//! before the next step's work; it measures the GPU time between its steps' work with its
//! own events (`gpu_ms.between`), which the report's figure must match.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;

mod common;
use common::{artifact, run_sim_report, TempDir};

const ITERS: u64 = 30;

/// Runs the loop with `env`: the report's process and the program's own account.
fn run(d: &TempDir, env: &[(&str, &str)]) -> (Value, Value) {
    run_with(d, &[], env)
}

/// Runs the loop with extra arguments `args` and `env`.
fn run_with(d: &TempDir, args: &[&str], env: &[(&str, &str)]) -> (Value, Value) {
    let program = artifact("scn-item-in-loop");
    let iters = ITERS.to_string();
    let mut cmd = vec![
        program.to_str().unwrap(),
        "--iters",
        &iters,
        "--host-us",
        "3000",
        "--work-us",
        "1000",
    ];
    cmd.extend_from_slice(args);
    let (p, truth, _) = run_sim_report(d, &cmd, env);
    (p, truth)
}

fn site<'a>(p: &'a Value, kind: &str) -> &'a Value {
    p["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} site: {p}"))
}

/// The site of `kind` stalled every step, and the GPU idle measured behind all its stalls but
/// the last (which no launch follows) is within 5% of the program's own events; returns that
/// site's `gpu_idle_after`.
fn check_measured_at<'a>(p: &'a Value, truth: &Value, kind: &str) -> &'a Value {
    let stalls = site(p, kind);
    assert_eq!(stalls["count"], ITERS, "{stalls}");
    let after = &stalls["gpu_idle_after"];
    assert_eq!(after["count"], ITERS - 1, "{stalls}");
    let measured_ms = after["total_ns"].as_u64().unwrap() as f64 / 1e6;
    let between_ms = truth["gpu_ms"]["between"].as_f64().unwrap();
    // The program's figure and the library's differ by where the events fall (the step's
    // 4-byte copy, the records' placement).
    assert!(
        (measured_ms - between_ms).abs() <= 0.05 * between_ms,
        "measured {measured_ms:.3} ms behind the {kind}s, the program's events {between_ms:.3} ms"
    );
    // At least the host's 3 ms a step.
    assert!(measured_ms >= 3.0 * (ITERS - 1) as f64, "{measured_ms}");
    after
}

fn check_each_sync_is_measured(p: &Value, truth: &Value) {
    let after = check_measured_at(p, truth, "stream_sync");
    // The final device sync follows the last stream sync with no work between: measured,
    // with no idle of its own (in the totals, not as a record).
    let b = &p["gpu"]["behind_stalls"];
    assert_eq!(b["syncs"], ITERS + 1, "{b}");
    assert_eq!(b["measured"], ITERS, "{b}");
    assert_eq!(b["total_ns"], after["total_ns"], "{b}");
    assert!(
        !p["apis"].as_object().unwrap().contains_key("stall_events"),
        "{}",
        p["apis"]
    );
}

#[test]
fn each_syncs_gpu_idle_is_measured_in_the_default_mode() {
    let d = TempDir::new("idle-after");
    let (p, truth) = run(&d, &[]);
    assert_eq!(p["gpu"]["mode"], "duty", "{}", p["gpu"]);
    check_each_sync_is_measured(&p, &truth);
}

#[test]
fn each_syncs_gpu_idle_is_measured_with_gpu_tracing_off() {
    let d = TempDir::new("idle-after-off");
    let (p, truth) = run(&d, &[("SYNCSPY_GPU_IDLE", "off")]);
    assert_eq!(p["gpu"]["measured"], false, "{}", p["gpu"]);
    check_each_sync_is_measured(&p, &truth);
}

#[test]
fn traced_gaps_keep_their_own_count() {
    // With tracing on all the time, the traced gaps are their own records: one behind each
    // step's sync, none of them the library's event measurements (29 more, had they been
    // mixed in). A loaded machine adds a few: a host slower to launch a step's kernels than
    // the GPU to run them leaves gaps inside the step (33 seen once on CI's 2 cores).
    let d = TempDir::new("idle-after-on");
    let (p, truth) = run(&d, &[("SYNCSPY_GPU_IDLE", "on")]);
    check_each_sync_is_measured(&p, &truth);
    let gaps = p["kinds"]["gpu_idle"]["count"].as_u64().unwrap();
    assert!(
        (ITERS - 1..=ITERS - 1 + ITERS / 3).contains(&gaps),
        "{gaps} traced gaps"
    );
}

#[test]
fn each_pageable_copys_gpu_idle_is_measured() {
    // `.cpu()`'s way: the copy into pageable memory waits for the step's work, and the stream
    // sync after it finds nothing left to wait for. The copy is the stall measured (from the
    // end of the work it waited for, the copy itself included, as the program's events count
    // it); the sync, with no work since, counts with no idle of its own.
    let d = TempDir::new("idle-after-pageable");
    let (p, truth) = run_with(&d, &["--pageable"], &[]);
    let after = check_measured_at(&p, &truth, "memcpy_pageable");
    let syncs = site(&p, "stream_sync");
    assert_eq!(syncs["count"], ITERS, "{syncs}");
    assert!(syncs.get("gpu_idle_after").is_none(), "{syncs}");
    // Copies, stream syncs and the final device sync; all measured but the last copy.
    let b = &p["gpu"]["behind_stalls"];
    assert_eq!(b["syncs"], 2 * ITERS + 1, "{b}");
    assert_eq!(b["measured"], 2 * ITERS, "{b}");
    assert_eq!(b["total_ns"], after["total_ns"], "{b}");
}
