//! Helpers shared by the integration tests that run real programs under `syncspy`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

#[allow(unused_imports)] // each test uses a subset
pub use syncspy_test_support::{Running, TempDir};

pub const SYNCSPY: &str = env!("CARGO_BIN_EXE_syncspy");

pub fn artifact(name: &str) -> PathBuf {
    let p = Path::new(SYNCSPY).parent().unwrap().join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace` first",
        p.display()
    );
    p
}

pub fn cudacalls() -> String {
    artifact("cudacalls").to_string_lossy().into_owned()
}

/// `syncspy run --sim [extra...] -- CMD` with `d` as the segment folder.
pub fn run_sim(d: &TempDir, extra: &[&str], cmd: &[&str]) -> std::process::Output {
    std::process::Command::new(SYNCSPY)
        .args(["run", "--sim"])
        .args(extra)
        .arg("--")
        .args(cmd)
        .env("SYNCSPY_DIR", d.path())
        .env("SIMCUDA_TIME_SCALE", "1")
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .env_remove("SYNCSPY_RING")
        .output()
        .expect("start syncspy")
}
