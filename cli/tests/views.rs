//! One process read through every view: the summary, the JSON report, its markdown, the
//! agent's metrics and snapshot, and the monitor on the segment folder and through the agent.
//! They are built from one model (docs/architecture.md), so they show the same counts, sites
//! and GPU idle share.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;

mod common;
use common::{artifact, eventually, metrics, start_agent, TempDir, SYNCSPY};

const HOST_STALLS: [&str; 3] = ["device_sync", "stream_sync", "implicit_sync"];

/// `kind -> count` from lines that start (after `prefix`) with a kind name and then its count.
fn counts(text: &str, prefix: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for l in text.lines() {
        let l = l.trim_start_matches(prefix).trim_start();
        let mut w = l.split(|c: char| c.is_whitespace() || c == '|' || c == '`');
        let w: Vec<&str> = w.by_ref().filter(|x| !x.is_empty()).take(2).collect();
        if let [k, n] = w[..] {
            if HOST_STALLS.contains(&k) || k == "gpu_idle" {
                if let Ok(n) = n.parse() {
                    out.entry(k.to_string()).or_insert(n);
                }
            }
        }
    }
    out
}

/// `(kind, API, count)` of each row of the monitor's call-site pane, as printed.
fn screen_sites(screen: &str) -> Vec<(String, String, u64)> {
    let mut out = Vec::new();
    let mut lines = screen
        .lines()
        .skip_while(|l| !l.contains("Top call sites by"));
    lines.next();
    for l in lines.take_while(|l| !l.contains('└')) {
        let t: Vec<&str> = l
            .split(|c: char| c.is_whitespace() || c == '│')
            .filter(|x| !x.is_empty())
            .collect();
        // #, SHARE, TOTAL ("-" or "1.33 ms"), COUNT, P99, KIND, API, WHERE.
        if t.len() < 4 || t[0].parse::<u32>().is_err() || !t[1].ends_with('%') {
            continue;
        }
        let at = if t[2] == "-" { 3 } else { 4 };
        let kind = t
            .iter()
            .skip(at + 1)
            .position(|w| HOST_STALLS.contains(w) || w.ends_with("_sync") || *w == "poll_wait");
        let (Some(n), Some(k)) = (t.get(at).and_then(|n| n.parse().ok()), kind) else {
            continue;
        };
        let k = at + 1 + k;
        out.push((t[k].to_string(), t.get(k + 1).unwrap_or(&"").to_string(), n));
    }
    out.sort();
    out
}

/// The percentage after `marker` in `text` (`idle 49.5% of its active` -> "49.5").
fn percent_after<'a>(text: &'a str, marker: &str) -> &'a str {
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker:?} in\n{text}"));
    let rest = &text[at + marker.len()..];
    rest.split('%').next().unwrap().trim()
}

fn get(addr: &str, path: &str, token: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp.split_once("\r\n\r\n").unwrap().1.to_string()
}

#[test]
fn one_process_reads_the_same_in_every_view() {
    let d = TempDir::new("views");
    let token = d.path().join("agent.token");
    let (_agent, addr) = start_agent(d.path(), &token, &["--retain-secs", "3600"]);

    // The run: its summary on stderr, its JSON report. GPU traced all along.
    let report = d.path().join("r.json");
    let run = Command::new(SYNCSPY)
        .args(["run", "--sim", "--report"])
        .arg(&report)
        .arg("--")
        .arg(artifact("scn-item-in-loop"))
        .args(["--iters", "20"])
        .env("SYNCSPY_DIR", d.path())
        .env("SIMCUDA_TIME_SCALE", "1")
        .env("SYNCSPY_GPU_IDLE", "on")
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .output()
        .unwrap();
    assert!(run.status.success());
    let summary = String::from_utf8_lossy(&run.stderr).into_owned();
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let p = &json["processes"][0];
    let pid = p["pid"].as_u64().unwrap();
    let truth: BTreeMap<String, u64> = p["kinds"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(truth["stream_sync"], 20, "{truth:?}");
    assert!(truth["gpu_idle"] > 0, "{truth:?}");

    // The summary and the markdown.
    assert_eq!(counts(&summary, ""), truth, "summary:\n{summary}");
    let md = Command::new(SYNCSPY)
        .args(["report", "--format", "markdown"])
        .arg(&report)
        .output()
        .unwrap();
    let md = String::from_utf8_lossy(&md.stdout).into_owned();
    assert_eq!(counts(&md, "|"), truth, "markdown:\n{md}");
    let idle = percent_after(&summary, "), idle ");
    assert_eq!(percent_after(&md, "), idle "), idle, "{md}");

    // The agent's metrics (host stalls) and its snapshot (the whole model).
    let token = std::fs::read_to_string(&token).unwrap();
    let m = eventually("the agent counts the run", || {
        let m = metrics(&addr);
        m.contains(r#"kind="stream_sync"} 20"#).then_some(m)
    });
    for k in HOST_STALLS {
        let line =
            format!(r#"syncspy_stall_events_total{{program="scn-item-in-loop",kind="{k}"}} "#);
        let n: u64 = m
            .lines()
            .find_map(|l| l.strip_prefix(&line))
            .map_or(0, |v| v.trim().parse().unwrap());
        assert_eq!(n, truth.get(k).copied().unwrap_or(0), "{k}:\n{m}");
    }
    let gaps = m
        .lines()
        .find_map(|l| l.strip_prefix(r#"syncspy_gpu_idle_gaps_total{program="scn-item-in-loop"} "#))
        .map(|v| v.trim().parse::<u64>().unwrap());
    assert_eq!(gaps, Some(truth["gpu_idle"]), "{m}");
    // The GPU idle measured behind the syncs: the report's exact totals, in the metrics.
    let behind = &p["gpu"]["behind_stalls"];
    assert!(behind["measured"].as_u64().unwrap() >= 19, "{behind}");
    let measured = m.lines().find_map(|l| {
        l.strip_prefix(r#"syncspy_gpu_idle_measured_syncs_total{program="scn-item-in-loop"} "#)
    });
    assert_eq!(
        measured.map(|v| v.trim().parse::<u64>().unwrap()),
        behind["measured"].as_u64(),
        "{m}"
    );
    let snap: serde_json::Value =
        serde_json::from_str(&get(&addr, "/api/v1/snapshot", token.trim())).unwrap();
    let sp = snap["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["pid"].as_u64() == Some(pid))
        .expect("the process in the snapshot");
    let site = |v: &serde_json::Value| {
        v["sites"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["kind"].to_string(),
                    s["api"].to_string(),
                    s["count"].as_u64(),
                )
            })
            .collect::<Vec<_>>()
    };
    // (The snapshot's process is the report's, flattened beside its program label.)
    assert_eq!(site(sp), site(p), "sites, snapshot vs report");
    for (k, n) in &truth {
        assert_eq!(sp["kinds"][k]["count"].as_u64(), Some(*n), "{k}");
    }
    assert_eq!(
        sp["gpu"]["active_idle_share"],
        p["gpu"]["active_idle_share"]
    );

    // The monitor: on the folder, and through the agent.
    let top = |args: &[&str]| {
        let o = Command::new(artifact("syncspy-top"))
            .args(args)
            .args(["--print", "--after", "2", "--size", "160x40"])
            .env("SYNCSPY_DIR", d.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let local = top(&["--dir", d.path().to_str().unwrap()]);
    let via = top(&[
        "--agent",
        &format!("http://{addr}"),
        "--token-file",
        d.path().join("agent.token").to_str().unwrap(),
    ]);
    let hosts: BTreeMap<String, u64> = truth
        .iter()
        .filter(|(k, _)| *k != "gpu_idle")
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    // The call sites: the report's rows (sites that print alike are one), one per row.
    let mut json_sites: Vec<(String, String, u64)> = p["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["kind"].as_str().unwrap().to_string(),
                s["api"].as_str().unwrap().to_string(),
                s["count"].as_u64().unwrap(),
            )
        })
        .collect();
    json_sites.sort();
    assert!(!json_sites.is_empty(), "{p}");
    for (name, screen) in [("local", &local), ("agent", &via)] {
        assert_eq!(counts(screen, "│"), hosts, "{name}:\n{screen}");
        assert_eq!(
            screen_sites(screen),
            json_sites,
            "{name}: the call sites\n{screen}"
        );
        assert_eq!(
            percent_after(screen, "GPU idle: "),
            idle,
            "{name}: the GPU idle share\n{screen}"
        );
    }
}
