//! `--trace FILE`: the Chrome trace of a real `--sim` run of `cudacalls` is valid JSON and
//! holds exactly the events the report says were recorded, per process and per kind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

mod common;
use common::{cudacalls, run_sim, TempDir, SYNCSPY};

fn read(p: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).expect("valid JSON")
}

/// (pid, kind) -> number of complete events in the trace.
fn x_events(trace: &Value) -> BTreeMap<(u64, String), u64> {
    let mut m = BTreeMap::new();
    for e in trace["traceEvents"].as_array().unwrap() {
        if e["ph"] == "X" {
            let k = (
                e["pid"].as_u64().unwrap(),
                e["cat"].as_str().unwrap().to_string(),
            );
            *m.entry(k).or_default() += 1;
        }
    }
    m
}

/// (pid, kind) -> `recorded_count` in the report.
fn recorded(report: &Value) -> BTreeMap<(u64, String), u64> {
    let mut m = BTreeMap::new();
    for p in report["processes"].as_array().unwrap() {
        let pid = p["pid"].as_u64().unwrap();
        for (kind, s) in p["kinds"].as_object().unwrap() {
            let n = s["recorded_count"].as_u64().unwrap();
            if n > 0 {
                m.insert((pid, kind.clone()), n);
            }
        }
    }
    m
}

#[test]
fn the_trace_holds_every_recorded_event() {
    let d = TempDir::new("trace");
    let c = cudacalls();
    let t = d.path().join("t.json");
    let r = d.path().join("r.json");
    let o = run_sim(
        &d,
        &[
            "--trace",
            t.to_str().unwrap(),
            "--report",
            r.to_str().unwrap(),
        ],
        &[
            &c,
            "--fork",
            "--threads",
            "2",
            "--iters",
            "20",
            "busy=s1:200",
            "sync=s1",
            "memcpy=h2d:4096",
            "async=d2h:1000:pageable:s1",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let trace = read(&t);
    let report = read(&r);
    assert_eq!(
        report["processes"].as_array().unwrap().len(),
        2,
        "fork: two processes"
    );
    let want = recorded(&report);
    assert_eq!(x_events(&trace), want);
    let total: u64 = want.values().sum();
    assert!(total >= 2 * 2 * 20 * 3, "{total}");
    assert_eq!(trace["otherData"]["events"], total);
    assert_eq!(trace["otherData"]["cut"], false);
    assert!(
        err.contains(&format!("trace: {total} events written")),
        "{err}"
    );

    let events = trace["traceEvents"].as_array().unwrap();
    // Both processes are named after their command lines.
    let names = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .count();
    assert_eq!(names, 2);
    // Their GPU idle gaps are on a named track per device, not on a thread.
    let gpu_tracks: Vec<&Value> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .collect();
    assert!(!gpu_tracks.is_empty(), "no GPU track");
    for t in &gpu_tracks {
        assert_eq!(t["args"]["name"], "GPU 0 idle", "{t}");
        assert_eq!(t["tid"].as_u64(), Some(1 << 30), "{t}");
    }
    let gap = events.iter().find(|e| e["cat"] == "gpu_idle").unwrap();
    assert_eq!(
        (gap["name"].as_str(), gap["tid"].as_u64()),
        (Some("GPU idle"), Some(1 << 30))
    );
    // A pageable copy carries its bytes, direction, stream and call site.
    let copy = events
        .iter()
        .find(|e| e["cat"] == "memcpy_pageable")
        .unwrap();
    assert_eq!(copy["name"], "cudaMemcpyAsync");
    assert_eq!(copy["args"]["bytes"], 1000);
    assert_eq!(copy["args"]["direction"], "d2h");
    assert!(copy["args"]["stream"].as_str().unwrap().starts_with("0x"));
    assert!(
        copy["args"]["frame"]
            .as_str()
            .unwrap()
            .contains("cudacalls::"),
        "{copy}"
    );
    // Durations and timestamps are microseconds: a wait for 200 µs of work lasts ~200.
    let long_wait = events
        .iter()
        .filter(|e| e["cat"] == "stream_sync")
        .map(|e| e["dur"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!((150.0..100_000.0).contains(&long_wait), "{long_wait}");
    // Each thread's events are its own.
    let tids: std::collections::BTreeSet<u64> = events
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| e["tid"].as_u64().unwrap())
        .collect();
    assert!(tids.len() >= 4, "2 processes x 2 threads: {tids:?}");
}

#[test]
fn a_trace_over_its_limit_is_cut_and_says_so() {
    let d = TempDir::new("trace-cut");
    let c = cudacalls();
    let t = d.path().join("t.json");
    let o = run_sim(
        &d,
        &["--trace", t.to_str().unwrap(), "--trace-limit", "10"],
        &[&c, "--iters", "50", "sync=s1"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let trace = read(&t);
    let x = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .count();
    assert_eq!(x, 10);
    let meta = &trace["otherData"];
    assert_eq!(meta["cut"], true);
    assert_eq!(meta["limit"], 10);
    assert!(meta["recorded_events"].as_u64().unwrap() > 50);
    assert!(
        meta["note"].as_str().unwrap().contains("first 10 of"),
        "{meta}"
    );
    assert!(err.contains("holds only the first 10 of"), "{err}");
    assert!(err.contains("--trace-limit"), "{err}");
}

#[test]
fn check_writes_a_trace_too_and_bad_trace_paths_fail_early() {
    let d = TempDir::new("trace-check");
    let c = cudacalls();
    let t = d.path().join("t.json");
    let b = d.file("b.toml", "[[rule]]\nname = \"a\"\nmax_count = 1000\n");
    let o = Command::new(SYNCSPY)
        .args(["check", "--sim", "--budget"])
        .arg(&b)
        .arg("--trace")
        .arg(&t)
        .args(["--", &c, "--iters", "4", "sync=s1"])
        .env("SYNCSPY_DIR", d.path())
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let trace = read(&t);
    let syncs = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "stream_sync")
        .count();
    assert_eq!(syncs, 4);

    let marker = d.path().join("ran");
    let o = run_sim(
        &d,
        &["--trace", "/nonexistent/dir/t.json"],
        &["touch", marker.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--trace /nonexistent/dir/t.json"));
    assert!(!marker.exists());
}
