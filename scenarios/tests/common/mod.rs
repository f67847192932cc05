//! Helpers shared by the scenario tests: the workspace's build artifacts and a private folder
//! that holds `libcudart.so.13 -> libsimcudart.so`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test uses a subset

#[allow(unused_imports)] // each test uses a subset
pub use syncspy_test_support::{artifact, target_dir, TempDir};

/// A private folder holding `libcudart.so.13 -> libsimcudart.so`, `libcuda.so.1` (the
/// simulator is the driver too) and `libnccl.so.2` (and NCCL): put it on `LD_LIBRARY_PATH` to
/// run a program against the simulator without syncspy.
pub fn with_sim_runtime(tag: &str) -> TempDir {
    let d = TempDir::new(tag);
    for name in ["libcudart.so.13", "libcuda.so.1", "libnccl.so.2"] {
        std::os::unix::fs::symlink(artifact("libsimcudart.so"), d.path().join(name)).unwrap();
    }
    d
}
