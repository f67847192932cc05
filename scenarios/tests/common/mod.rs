//! Helpers shared by the scenario tests: the workspace's build artifacts and a private folder
//! that holds `libcudart.so.13 -> libsimcudart.so`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test uses a subset

use std::path::PathBuf;

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

pub use syncspy_test_support::TempDir;

/// A private folder holding `libcudart.so.13 -> libsimcudart.so`: put it on
/// `LD_LIBRARY_PATH` to run a program against the simulator without syncspy.
pub fn with_sim_runtime(tag: &str) -> TempDir {
    let d = TempDir::new(tag);
    std::os::unix::fs::symlink(
        artifact("libsimcudart.so"),
        d.path().join("libcudart.so.13"),
    )
    .unwrap();
    d
}
