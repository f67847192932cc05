//! `syncspy demo --sim` end to end: the bundled scenario pairs run on the simulated CUDA
//! runtime, and the final table compares each pair.
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

/// The stall share (percent) of `id`'s row in the table.
fn share(table: &str, id: &str) -> f64 {
    let row = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(id))
        .unwrap_or_else(|| panic!("no row for {id} in:\n{table}"));
    row.split_whitespace()
        .find_map(|t| t.strip_suffix('%'))
        .unwrap_or_else(|| panic!("no share in {row:?}"))
        .parse()
        .unwrap()
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
        let (s, h) = (share(table, stalling), share(table, healthy));
        // Big GEMMs are the counter-example the pair exists for: the GPU work dwarfs the
        // sync's cost, so both ways wait for about the whole run.
        if stalling == "sync-big-gemm" {
            assert!(s > 50.0 && h > 50.0, "{stalling} {s}% / {healthy} {h}%");
        } else {
            assert!(
                s > h,
                "{stalling} {s}% should exceed {healthy} {h}%:\n{table}"
            );
        }
    }
    // No segment files left behind.
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
}
