//! Issue 37, item 6: `syncspy check` without `--sim` on a machine without a GPU says to add
//! `--sim`, instead of asking whether the command called the runtime through libcudart.so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::{TempDir, SYNCSPY};

#[test]
fn a_check_that_saw_nothing_on_a_machine_without_a_gpu_says_to_add_sim() {
    let d = TempDir::new("check-hint");
    let budget = d.path().join("b.toml");
    std::fs::write(
        &budget,
        "[[rule]]\nname = \"none\"\nkind = \"stream_sync\"\nmax_count = 0\n",
    )
    .unwrap();
    let out = std::process::Command::new(SYNCSPY)
        .args(["check", "--budget"])
        .arg(&budget)
        .args(["--", "true"])
        .env("SYNCSPY_DIR", d.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no instrumented process reported"), "{err}");
    assert!(!err.contains("through libcudart.so?"), "{err}");
    let gpu = std::path::Path::new("/dev/nvidiactl").exists();
    assert_eq!(err.contains("syncspy check --sim"), !gpu, "{err}");
}
