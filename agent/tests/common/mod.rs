//! Helpers shared by the integration tests that run real programs under `syncspy`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

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

/// A private folder for segments and files (tmpfs when there is one), removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let n = N.fetch_add(1, Ordering::Relaxed);
        let d = base.join(format!("syncspy-check-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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
