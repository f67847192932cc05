//! Helpers shared by the scenario tests: the workspace's build artifacts and a private folder
//! that holds `libcudart.so.13 -> libsimcudart.so`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test uses a subset

use std::path::{Path, PathBuf};

/// target/<profile>, from the test binary at target/<profile>/deps/<name>-<hash>.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

pub fn artifact(name: &str) -> PathBuf {
    let p = target_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace` first",
        p.display()
    );
    p
}

/// A private folder, removed on drop. In /dev/shm when there is one (segments belong in
/// tmpfs, as in production).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        // Unique per call: tests run in parallel threads of one process, and several may
        // ask for the same tag.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = base.join(format!("syncspy-scn-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }

    /// This folder, holding `libcudart.so.13 -> libsimcudart.so`: put it on
    /// `LD_LIBRARY_PATH` to run a program against the simulator without syncspy.
    pub fn with_sim_runtime(tag: &str) -> TempDir {
        let d = TempDir::new(tag);
        std::os::unix::fs::symlink(artifact("libsimcudart.so"), d.0.join("libcudart.so.13"))
            .unwrap();
        d
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
