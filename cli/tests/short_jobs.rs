//! Issue 35, item 1: a root agent counts every user's short jobs. Each job of user `nobody`
//! ends long before the agent looks (its interval is longer than the job), so the process a
//! segment names is gone by then; the file's owner vouches for it (`Ownership::FileOwner`).
//! Before, the agent refused each as "owned by uid 65534, which process N does not run as (or
//! the process ended)" and counted 1 of 100.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

mod common;
use common::{artifact, eventually, metric, metrics, start_agent, TempDir};

/// Jobs of user nobody.
const JOBS: u64 = 30;

#[test]
fn a_root_agent_counts_every_short_job_of_another_user() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: not root, so no other user can run jobs here");
        return;
    }
    let d = TempDir::new("short-jobs");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let seg = d.path().join("shm");
    std::fs::create_dir(&seg).unwrap();
    std::fs::set_permissions(&seg, std::fs::Permissions::from_mode(0o1777)).unwrap();
    // The program and libraries where nobody can read them (the build folder may not be).
    let bin = d.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for f in ["cudacalls", "libsyncspy.so", "libsimcudart.so"] {
        std::fs::copy(artifact(f), bin.join(f)).unwrap();
        std::fs::set_permissions(bin.join(f), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::os::unix::fs::symlink(bin.join("libsimcudart.so"), bin.join("libcudart.so.13")).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();

    // The agent looks every 2 s: every job below is over by the time it looks.
    let token = d.path().join("agent.token");
    let (_agent, addr) = start_agent(&seg, &token, &["--interval-ms", "2000"]);
    for _ in 0..JOBS {
        let st = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(bin.join("cudacalls"))
            .args(["busy=s1:1000", "sync=s1"])
            .env("LD_PRELOAD", bin.join("libsyncspy.so"))
            .env("LD_LIBRARY_PATH", &bin)
            .env("SYNCSPY_DIR", &seg)
            .env("SIMCUDA_TIME_SCALE", "1")
            .env_remove("SYNCSPY_SESSION")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "a job of nobody failed: {st}");
    }
    let line = r#"syncspy_stall_events_total{program="cudacalls",kind="stream_sync"}"#;
    let counted = eventually("every job of nobody counted", || {
        metric(&metrics(&addr), line).filter(|n| *n >= JOBS)
    });
    assert_eq!(counted, JOBS, "one stream_sync per job");
}
