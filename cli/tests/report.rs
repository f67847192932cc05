//! `syncspy report`: a saved report in each format, and two reports compared, from real runs
//! of `cudacalls` under the simulated runtime.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use serde_json::Value;

mod common;
use common::{cudacalls, run_sim, TempDir, SYNCSPY};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn report(args: &[&str]) -> Output {
    Command::new(SYNCSPY)
        .arg("report")
        .args(args)
        .output()
        .unwrap()
}

/// Two runs of the same program: 3 waits in sync_op before, 5 waits and 2 pageable copies
/// after.
fn two_reports(d: &TempDir) -> (String, String) {
    let c = cudacalls();
    let a = d.path().join("before.json").to_string_lossy().into_owned();
    let b = d.path().join("after.json").to_string_lossy().into_owned();
    let o = run_sim(
        d,
        &["--report", &a],
        &[&c, "--iters", "3", "busy=s1:3000", "sync=s1"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = run_sim(
        d,
        &["--report", &b],
        &[
            &c,
            "--iters",
            "5",
            "busy=s1:3000",
            "sync=s1",
            "async=d2h:4096:pageable:s1",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    (a, b)
}

#[test]
fn one_report_prints_as_text_markdown_and_json() {
    let d = TempDir::new("report-one");
    let (a, b) = two_reports(&d);
    let saved: Value = serde_json::from_slice(&std::fs::read(&a).unwrap()).unwrap();

    let o = report(&[&a]);
    assert_eq!(o.status.code(), Some(0));
    let t = text(&o.stdout);
    assert!(t.contains("stream_sync"), "{t}");
    assert!(t.contains("top call sites"), "{t}");

    let o = report(&["--format", "markdown", &a]);
    assert_eq!(o.status.code(), Some(0));
    let m = text(&o.stdout);
    assert!(m.starts_with("### syncspy: `"), "{m}");
    assert!(m.contains("| `stream_sync` | 3 |"), "{m}");
    assert!(m.contains("`cudacalls::sync_op"), "{m}");

    let o = report(&["--format", "json", &a]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v, saved);

    // The pageable copies of the second run carry the pinned-memory advice, in the report
    // and under the site in the summary; the stream syncs of a native program carry none.
    let after: Value = serde_json::from_slice(&std::fs::read(&b).unwrap()).unwrap();
    let sites = after["processes"][0]["sites"].as_array().unwrap();
    let pageable = sites
        .iter()
        .find(|s| s["kind"] == "memcpy_pageable")
        .unwrap();
    assert!(
        pageable["advice"]
            .as_str()
            .unwrap()
            .contains("pinned memory"),
        "{pageable}"
    );
    let sync = sites.iter().find(|s| s["kind"] == "stream_sync").unwrap();
    assert!(sync["advice"].is_null(), "{sync}");
    let o = report(&[&b]);
    assert!(
        text(&o.stdout).contains("advice: the host buffer is pageable"),
        "{}",
        text(&o.stdout)
    );

    let o = report(&["--format", "yaml", &a]);
    assert_eq!(o.status.code(), Some(2));
    let o = report(&["/nonexistent/r.json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("cannot read /nonexistent/r.json"));
    let o = report(&[&a, &a, &a]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn two_reports_compare_per_kind_and_per_site() {
    let d = TempDir::new("report-two");
    let (a, b) = two_reports(&d);

    let o = report(&["--format", "json", &a, &b]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let kind = |k: &str| {
        v["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["kind"] == k)
            .unwrap_or_else(|| panic!("no {k} in {v:#}"))
            .clone()
    };
    assert_eq!(kind("stream_sync")["before"]["count"], 3);
    assert_eq!(kind("stream_sync")["after"]["count"], 5);
    assert_eq!(kind("memcpy_pageable")["before"]["count"], 0);
    assert_eq!(kind("memcpy_pageable")["after"]["count"], 5);
    assert_eq!(kind("memcpy_pageable")["after"]["bytes"], 5 * 4096);
    // The wait in sync_op is one site in both runs (same binary, same line).
    let sync_sites: Vec<&Value> = v["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "stream_sync")
        .collect();
    assert_eq!(sync_sites.len(), 1, "{v:#}");
    assert_eq!(sync_sites[0]["before"]["count"], 3);
    assert_eq!(sync_sites[0]["after"]["count"], 5);
    assert!(sync_sites[0]["frames"][0]
        .as_str()
        .unwrap()
        .contains("cudacalls::sync_op"));

    let o = report(&["--format", "markdown", &a, &b]);
    assert_eq!(o.status.code(), Some(0));
    let m = text(&o.stdout);
    assert!(
        m.contains("### syncspy: host stalls, before → after"),
        "{m}"
    );
    assert!(m.contains("| `stream_sync` | 3 | 5 | +2 (+66.7%) |"), "{m}");
    assert!(
        m.contains("| `memcpy_pageable` | 0 | 5 | +5 (new) |"),
        "{m}"
    );
    assert!(m.contains("| 3 → 5 |"), "{m}");

    let o = report(&[&a, &b]);
    assert_eq!(o.status.code(), Some(0));
    let t = text(&o.stdout);
    assert!(t.contains(&format!("before: {a}")), "{t}");
    assert!(t.contains("x3 -> x5"), "{t}");
    assert!(t.contains("+2 (+66.7%)"), "{t}");
}

/// A report from a newer syncspy, with names this one does not know (a kind, an API, a copy
/// direction, a process state, a GPU state and mode, a gap cause, a warning): read and shown
/// in every format, written back unchanged, never refused.
#[test]
fn names_this_build_does_not_know_are_read_shown_and_kept() {
    let d = TempDir::new("report-unknown-names");
    let stats = r#"{"count":2,"total_ns":3000000,"bytes":0,"p50_ns":1000000,"p90_ns":2000000,
        "p99_ns":2000000,"max_ns":2000000,"recorded_count":2}"#;
    let json = format!(
        r#"{{"syncspy_report":1,"command":["./new"],"exit_code":0,"wall_ns":9000000,
        "processes":[{{"pid":5,"cmdline":"./new","dropped_events":0,"stall_ns":3000000,
        "wall_ns":9000000,"kinds":{{"tensor_sync":{stats},"stream_sync":{stats}}},
        "apis":{{"cudaTensorWait":{stats}}},
        "sites":[{{"kind":"tensor_sync","api":"cudaTensorWait","count":2,"total_ns":3000000,
        "p99_ns":2000000,"frames":["f (new.rs:3)"]}}],
        "gpu":{{"idle":{{"count":1,"total_ns":1000,"p50_ns":1000,"p99_ns":1000,"max_ns":1000}},
        "busy_fraction":0.5,"measured":true,"state":"throttled","mode":"sampled",
        "causes":[{{"cause":"tensor_sync","api":"cudaTensorWait","site_id":3,"count":1,
        "total_ns":1000,"share":1.0}}]}},
        "state":"frozen","copies":{{"tensor_sync":{{"x2y":{{"count":1,"bytes":8,"total_ns":5}}}}}}}}],
        "warnings":["a warning of a newer syncspy"]}}"#
    );
    let path = d.path().join("new.json");
    std::fs::write(&path, &json).unwrap();
    let p = path.to_str().unwrap();
    // The markdown names no process state.
    for (format, shown) in [
        (
            "text",
            &["tensor_sync", "[frozen]", "a warning of a newer syncspy"][..],
        ),
        (
            "markdown",
            &["tensor_sync", "a warning of a newer syncspy"][..],
        ),
    ] {
        let o = report(&["--format", format, p]);
        let out = text(&o.stdout);
        assert!(o.status.success(), "{format}: {}", text(&o.stderr));
        for shown in shown {
            assert!(out.contains(shown), "{format}: no {shown} in\n{out}");
        }
    }
    let o = report(&["--format", "json", p]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let back: Value = serde_json::from_slice(&o.stdout).unwrap();
    let want: Value = serde_json::from_str(&json).unwrap();
    // Every name as it was (fields the file left out come back with their defaults).
    for at in [
        "/processes/0/kinds/tensor_sync",
        "/processes/0/apis/cudaTensorWait",
        "/processes/0/sites/0/kind",
        "/processes/0/sites/0/api",
        "/processes/0/gpu/state",
        "/processes/0/gpu/mode",
        "/processes/0/gpu/causes/0",
        "/processes/0/state",
        "/processes/0/copies",
        "/warnings",
    ] {
        assert!(want.pointer(at).is_some(), "{at}");
        assert_eq!(back.pointer(at), want.pointer(at), "{at}");
    }
    assert_eq!(back["processes"][0].get("exit_status"), None);
}
