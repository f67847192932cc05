//! A frozen version 1 report: `tests/data/report-v1.json`, written by `syncspy check` on a
//! real run (tests/data/README.md says how), read by today's `syncspy report`. The figures in
//! the file must come out unchanged in every format, so a later syncspy keeps reading the
//! reports earlier ones wrote (docs/contracts.md, "The JSON report, version 1").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod common;
use common::{TempDir, SYNCSPY};

/// The parent and the forked child, in the order of their segments.
const PARENT: u64 = 15103;
const CHILD: u64 = 15116;

fn frozen() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report-v1.json")
}

fn frozen_json() -> Value {
    serde_json::from_slice(&std::fs::read(frozen()).unwrap()).unwrap()
}

fn report(args: &[&str], file: &Path) -> Output {
    Command::new(SYNCSPY)
        .arg("report")
        .args(args)
        .arg(file)
        .output()
        .unwrap()
}

fn stdout_of(o: &Output) -> String {
    assert!(
        o.status.success(),
        "syncspy report failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// The lines of `text` from the block of process `pid` to the next process's block.
fn block(text: &str, pid: u64) -> Vec<&str> {
    let head = format!("pid {pid} ");
    text.lines()
        .skip_while(|l| !l.starts_with(&head))
        .enumerate()
        .take_while(|(i, l)| *i == 0 || !l.starts_with("pid "))
        .map(|(_, l)| l)
        .collect()
}

#[test]
fn the_file_is_the_run_it_claims_to_be() {
    // What the rest of the tests rely on, read straight from the file.
    let r = frozen_json();
    assert_eq!(r["syncspy_report"], 1);
    assert_eq!(r["command"][0], "target/debug/cudacalls");
    assert_eq!(r["exit_code"], 0);
    let pids: Vec<u64> = r["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids, vec![PARENT, CHILD]);
    for p in r["processes"].as_array().unwrap() {
        let counts: Vec<(&str, u64)> = p["kinds"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.as_str(), v["count"].as_u64().unwrap()))
            .collect();
        assert_eq!(
            counts,
            vec![
                ("device_sync", 4),
                ("event_sync", 3),
                ("implicit_sync", 11),
                ("memcpy_pageable", 3),
                ("memcpy_sync", 6),
                ("stream_sync", 3)
            ]
        );
        assert_eq!(p["state"], "exited");
        assert_eq!(p["exit_status"], 0);
        assert_eq!(p["lost_records"], 0);
        assert_eq!(p["recorded_events"], 30);
    }
    assert_eq!(r["budget"]["outcome"], "over_budget");
}

#[test]
fn text_shows_the_processes_kinds_and_sites_of_the_file() {
    let out = stdout_of(&report(&[], &frozen()));
    assert!(out.contains("exited with code 0 after 128.61 ms"), "{out}");
    let r = frozen_json();
    for p in r["processes"].as_array().unwrap() {
        let pid = p["pid"].as_u64().unwrap();
        let b = block(&out, pid);
        assert!(!b.is_empty(), "no block for pid {pid}:\n{out}");
        assert!(b[0].contains("[exited 0]"), "{}", b[0]);
        // One row per kind: its exact count, and its total in ms to the microsecond.
        for (kind, s) in p["kinds"].as_object().unwrap() {
            let row: Vec<&str> = b
                .iter()
                .find(|l| l.split_whitespace().next() == Some(kind))
                .unwrap_or_else(|| panic!("no {kind} row for pid {pid}:\n{}", b.join("\n")))
                .split_whitespace()
                .collect();
            let total_ms = s["total_ns"].as_u64().unwrap() as f64 / 1e6;
            assert_eq!(row[1], s["count"].as_u64().unwrap().to_string(), "{row:?}");
            assert_eq!(row[2], format!("{total_ms:.3}"), "{row:?}");
        }
        assert!(
            b.contains(&"  calls that did not stall: cudaFree x3, cudaMemcpy x3 (3.0 KiB), cudaMemcpyAsync x3 (2.9 KiB)"),
            "{}",
            b.join("\n")
        );
    }
    // The top site of each process, with its frames: the program's own, not the scenario
    // harness's `Truth::timed` that the file also holds.
    let parent = block(&out, PARENT).join("\n");
    assert!(
        parent.contains(
            "   1. memcpy_sync cudaMemcpy  x3  total 61.32 ms  p99 59.66 ms\n        at \
             cudacalls::run_op::{{closure}} (scenarios/src/bin/cudacalls.rs:330)\n        at \
             cudacalls::run_op (scenarios/src/bin/cudacalls.rs:330)"
        ),
        "{parent}"
    );
    assert!(!parent.contains("Truth::timed"), "{parent}");
    let child = block(&out, CHILD).join("\n");
    assert!(
        child.contains(
            "   1. stream_sync cudaStreamSynchronize  x3  total 12.94 ms  p99 12.29 ms\n        \
             at cudacalls::run_op::{{closure}} (scenarios/src/bin/cudacalls.rs:287)"
        ),
        "{child}"
    );
    assert!(
        child.contains("... 11 more call sites in the JSON report"),
        "{child}"
    );
}

#[test]
fn json_gives_back_every_field_of_the_file() {
    let out = stdout_of(&report(&["--format", "json"], &frozen()));
    let back: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(back, frozen_json());
    // And a few of them by name, so a failure says what moved.
    let p = &back["processes"][1];
    assert_eq!(p["pid"], CHILD);
    assert_eq!(p["kinds"]["stream_sync"]["total_ns"], 12_938_790);
    assert_eq!(p["apis"]["cudaMemcpyAsync"]["count"], 6);
    assert_eq!(p["non_stall_calls"]["cudaMemcpy"]["bytes"], 3072);
    assert_eq!(p["copies"]["memcpy_sync"]["h2h"]["bytes"], 1536);
    let site = &p["sites"][0];
    assert_eq!(site["kind"], "stream_sync");
    assert_eq!(
        site["frames"][0],
        "cudacalls::run_op::{{closure}} (scenarios/src/bin/cudacalls.rs:287)"
    );
    assert_eq!(site["frame_modules"][0], "cudacalls");
    assert_eq!(site["location"], site["frames"][0]);
    assert_eq!(p["gpu"]["busy_fraction"], Value::Null);
    assert_eq!(p["gpu"]["measured"], false);
    let results = back["budget"]["results"].as_array().unwrap();
    assert_eq!(results.len(), 6);
    assert_eq!(results[2]["iterations"]["count"], 4);
}

#[test]
fn markdown_keeps_the_budget_verdict() {
    let out = stdout_of(&report(&["--format", "markdown"], &frozen()));
    assert!(
        out.contains(
            "#### Budget `cli/tests/data/budget.toml`: OVER BUDGET (2 failed, 0 not evaluated, \
             2 passed, 2 not measured)"
        ),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "| ❌ | no stream syncs | pid {PARENT} target/debug/cudacalls --fork --iters 3 \
             busy=s1... | 3 events > max_count 0<br>at cudacalls::run_op::{{{{closure}}}} \
             (scenarios/src/bin/cudacalls.rs:287) |"
        )),
        "{out}"
    );
    assert!(
        out.contains("| `memcpy_pageable` | 3 | 90.3 us | 31.8 us | 36.6 us | 36.6 us | 8.8 KiB |"),
        "{out}"
    );
}

#[test]
fn added_fields_are_ignored_and_another_version_is_refused() {
    let d = TempDir::new("frozen-report");
    // Fields a later version 1 might add: read as before.
    let mut r = frozen_json();
    r["added_later"] = Value::from("x");
    r["processes"][0]["added_later"] = Value::from(1);
    let f = d.path().join("newer.json");
    std::fs::write(&f, serde_json::to_vec(&r).unwrap()).unwrap();
    let out = stdout_of(&report(&[], &f));
    assert!(out.contains(&format!("pid {PARENT} ")), "{out}");

    r["syncspy_report"] = Value::from(2);
    std::fs::write(&f, serde_json::to_vec(&r).unwrap()).unwrap();
    let o = report(&[], &f);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("report version 2 is not supported (this syncspy reads version 1)"),
        "{err}"
    );

    // JSON that is no report at all (a trace, a package.json) is said to be that, not an
    // unsupported version.
    std::fs::write(&f, br#"{"traceEvents": []}"#).unwrap();
    let o = report(&[], &f);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("newer.json: not a syncspy report: JSON without a `syncspy_report`"),
        "{err}"
    );
    assert!(!err.contains("version 0"), "{err}");
}
