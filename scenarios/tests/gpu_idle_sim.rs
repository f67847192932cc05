//! GPU idle gaps end to end without a GPU: `syncspy run --sim` links the simulated runtime
//! as `libcupti.so.13` too, the preloaded library traces its activity records (source
//! `simulated`), and the report has the gaps, their causes and the busy share.
//!
//! The scenario pairs do the same work the stalling way and the healthy way. A stalling step
//! waits for the GPU and then does 1 ms of host work while the GPU has nothing queued: one gap
//! per step, blamed on the step's sync at the scenario's loop line. The healthy way keeps the
//! GPU fed: no gap caused by a sync (a gap there is the host falling behind, on a loaded
//! machine; counted as `host_busy_elsewhere`).
//!
//! Needs the workspace built (`cargo build --workspace`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::Value;

use syncspy_test_support::{artifact, TempDir};

/// The report's only process of scenario `name`, run with GPU tracing `on`.
fn run(name: &str, dir: &TempDir, iters: u32) -> Value {
    let report = dir.path().join(format!("{name}.json"));
    let out = Command::new(artifact("syncspy"))
        .args(["run", "--sim", "--report"])
        .arg(&report)
        .arg("--")
        .arg(artifact(&format!("scn-{name}")))
        .args(["--iters", &iters.to_string()])
        .env("SYNCSPY_GPU_IDLE", "on")
        .env("SYNCSPY_DIR", dir.path())
        .env_remove("SYNCSPY_SESSION")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let procs = r["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "{r:#}");
    procs[0].clone()
}

/// Gaps blamed on `cause` (a kind, or `host_busy_elsewhere`): (count, location of the first).
fn gaps_of(p: &Value, cause: &str) -> (u64, String) {
    let causes = p["gpu"]["causes"].as_array().cloned().unwrap_or_default();
    let c: Vec<&Value> = causes.iter().filter(|c| c["cause"] == cause).collect();
    let n = c.iter().map(|c| c["count"].as_u64().unwrap()).sum();
    let loc = c
        .first()
        .and_then(|c| c["location"].as_str())
        .unwrap_or("")
        .to_string();
    (n, loc)
}

#[test]
fn stalling_scenarios_leave_the_gpu_idle_behind_their_sync_and_healthy_ones_keep_it_busy() {
    let dir = TempDir::new("gpu-idle-sim");
    let iters = 20;
    for (stalling, healthy, kind, line) in [
        (
            "item-in-loop",
            "clean-async",
            "stream_sync",
            "scn_item_in_loop.rs:",
        ),
        (
            "pageable-h2d",
            "pinned-double-buffer",
            "memcpy_pageable",
            "scn_pageable_h2d.rs:",
        ),
    ] {
        let s = run(stalling, &dir, iters);
        let h = run(healthy, &dir, iters);
        for (name, p) in [(stalling, &s), (healthy, &h)] {
            let g = &p["gpu"];
            assert_eq!(g["measured"], true, "{name}: {g:#}");
            assert_eq!(g["state"], "tracing", "{name}: {g:#}");
            assert!(g["collective_ns"].as_u64() == Some(0), "{name}: {g:#}");
        }
        // A gap per step (the first step's may come before tracing starts), each blamed on
        // the sync the GPU drained in, at the scenario's own loop line.
        let (n, loc) = gaps_of(&s, kind);
        assert!(
            n >= u64::from(iters) - 2,
            "{stalling}: {n} gaps blamed on {kind}: {:#}",
            s["gpu"]
        );
        assert!(loc.contains(line), "{stalling}: at {loc:?}");
        // The healthy way: no gap behind a sync of that kind.
        let (hn, _) = gaps_of(&h, kind);
        assert!(
            hn <= 1,
            "{healthy}: {hn} gaps behind {kind}: {:#}",
            h["gpu"]
        );
        // The busy share is over the traced run, set-up included: it separates the pair whose
        // loop is most of its run (the pageable copies also keep the copy engine busy longer,
        // so that pair's shares are close).
        let busy = |p: &Value| p["gpu"]["busy_fraction"].as_f64().unwrap();
        if stalling == "item-in-loop" {
            assert!(
                busy(&h) > busy(&s),
                "{healthy} busy {} <= {stalling} busy {}",
                busy(&h),
                busy(&s)
            );
        }
        // The simulated device reported every kind it ran: kernels, copies, memsets.
        assert!(s["gpu"]["devices"][0]["busy_ns"].as_u64().unwrap() > 0);
    }
}

#[test]
fn tracing_off_means_no_activity_source_is_loaded() {
    let dir = TempDir::new("gpu-idle-off");
    let report = dir.path().join("r.json");
    let out = Command::new(artifact("syncspy"))
        .args(["run", "--sim", "--report"])
        .arg(&report)
        .arg("--")
        .arg(artifact("scn-item-in-loop"))
        .args(["--iters", "5"])
        .env("SYNCSPY_GPU_IDLE", "off")
        .env("SYNCSPY_DIR", dir.path())
        .env_remove("SYNCSPY_SESSION")
        .output()
        .unwrap();
    assert!(out.status.success());
    let r: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let g = &r["processes"][0]["gpu"];
    assert_eq!(g["measured"], false, "{g:#}");
    assert_eq!(g["state"], "off", "{g:#}");
}
