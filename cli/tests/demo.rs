//! `syncspy demo --sim` end to end: the bundled scenario pairs run on the simulated CUDA
//! runtime, and the final table compares the timed loops of each pair.
//!
//! Needs the workspace built (`cargo build --workspace`): the `scn-*` binaries,
//! `libsyncspy.so` and `libsimcudart.so` are taken from the target folder of the `syncspy`
//! under test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

mod common;
use common::{artifact, TempDir, SYNCSPY};

const MANIFEST: &str = include_str!("../../scenarios/manifest.toml");

/// (title, stalling id, healthy id) of the manifest's comparisons.
fn comparisons() -> Vec<(String, String, String)> {
    let v: toml::Value = toml::from_str(MANIFEST).unwrap();
    v["comparison"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap().to_string();
            (s("title"), s("stalling"), s("healthy"))
        })
        .collect()
}

/// The whitespace-split cells of `id`'s row in the table: id, way, steps/s, waits per step,
/// GPU idle, [speed-up].
fn row<'a>(table: &'a str, id: &str) -> Vec<&'a str> {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(id))
        .unwrap_or_else(|| panic!("no row for {id} in:\n{table}"))
        .split_whitespace()
        .collect()
}

/// The waits per step of `id`'s row.
fn per_step(table: &str, id: &str) -> f64 {
    let r = row(table, id);
    r.get(3)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no stalls per step in {r:?}"))
}

#[test]
fn demo_on_the_simulator_compares_every_pair() {
    artifact("scn-item-in-loop");
    let d = TempDir::new("demo");
    let out = Command::new(SYNCSPY)
        .args(["demo", "--sim", "--iters", "20"])
        .env("SYNCSPY_DIR", d.path())
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .env_remove("SYNCSPY_RING")
        .output()
        .expect("start syncspy");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let at = stdout
        .find("syncspy demo: the same work, the stalling way and the healthy way")
        .unwrap_or_else(|| panic!("no table:\n{stdout}\n{stderr}"));
    let table = &stdout[at..];
    let pairs = comparisons();
    assert!(!pairs.is_empty());
    for (title, stalling, healthy) in &pairs {
        assert!(table.contains(title.as_str()), "{title} missing:\n{table}");
        // Each run was also shown with its caption and summary.
        assert!(
            stdout.contains(&format!("] {stalling} (stalling): ")),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!("] {healthy} (healthy): ")),
            "{stdout}"
        );
        // Every pair, big GEMMs included: a sync per step vs none inside the loop.
        let (s, h) = (per_step(table, stalling), per_step(table, healthy));
        assert!(
            s > h,
            "{stalling} {s} stalls/step should exceed {healthy} {h}:\n{table}"
        );
        // The healthy way waits at most once or twice in all: near zero a step.
        assert!(h <= 0.3, "{healthy} {h} waits/step:\n{table}");
        let r = row(table, healthy);
        let speedup: f64 = r
            .last()
            .and_then(|c| c.strip_suffix('x'))
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no speed-up in {r:?}"));
        assert!(speedup > 0.0, "{r:?}");
        // The GPU's idle share (of its active time) is measured on the simulator too (its
        // activity records): the pair whose loop dominates its run is required to show the
        // difference (39% vs 3% on a quiet machine). A run of a few milliseconds may end
        // before its tracing has started (`n/m`).
        if stalling == "item-in-loop" {
            let idle = |id: &str| -> f64 {
                let r = row(table, id);
                r.get(4)
                    .and_then(|c| c.strip_suffix('%'))
                    .and_then(|c| c.parse().ok())
                    .unwrap_or_else(|| panic!("no GPU idle share in {r:?}:\n{table}"))
            };
            let (is, ih) = (idle(stalling), idle(healthy));
            assert!(is > ih, "{stalling} {is}% <= {healthy} {ih}%:\n{table}");
        } else {
            let cell = row(table, healthy).get(4).copied().unwrap_or("");
            assert!(
                cell == "n/m" || cell.ends_with('%'),
                "{healthy}: GPU idle {cell:?}"
            );
        }
    }
    // The scenarios' ground-truth JSON lines feed the table and are not printed, nor are
    // the simulator's notes.
    assert!(!stdout.contains("\"wall_ms\""), "{stdout}");
    assert!(!stderr.contains("simcuda:"), "{stderr}");
    // No share of the loop above 100% (the table shows none at all).
    assert!(!table.contains(">100%"), "{table}");
    // No segment files left behind.
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
}

#[test]
fn demo_tui_without_a_terminal_says_so_and_still_compares() {
    artifact("scn-item-in-loop");
    let d = TempDir::new("demo-tui");
    let out = Command::new(SYNCSPY)
        .args(["demo", "--sim", "--iters", "10", "--tui"])
        .env("SYNCSPY_DIR", d.path())
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .env_remove("SYNCSPY_RING")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("start syncspy");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("--tui needs a terminal"), "{stdout}");
    let at = stdout
        .find("syncspy demo: the same work, the stalling way and the healthy way")
        .unwrap_or_else(|| panic!("no table:\n{stdout}\n{stderr}"));
    // Every run's ground truth was still read: each row has its steps per second.
    for (_, stalling, healthy) in comparisons() {
        for id in [stalling, healthy] {
            let cells = row(&stdout[at..], &id);
            assert!(cells.len() >= 3 && cells[2] != "-", "row {id}: {cells:?}");
        }
    }
}
