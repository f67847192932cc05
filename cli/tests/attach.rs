//! `syncspy attach` refusals that need no ptrace: a process without a CUDA runtime or
//! driver (a shell, a launcher) is refused before anything is changed in it, and the
//! message names its descendants that have one. Needs `cargo build --workspace` (cudacalls,
//! libsimcudart.so).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{artifact, cudacalls, Running, TempDir, SYNCSPY};

fn attach(d: &TempDir, pid: u32) -> (i32, String) {
    let o = Command::new(SYNCSPY)
        .args(["attach", &pid.to_string(), "--duration", "1"])
        .env("SYNCSPY_DIR", d.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_process_without_cuda_is_refused_and_its_workers_with_cuda_are_named() {
    let d = TempDir::new("attach-no-cuda");
    let sleeper = Running(Command::new("sleep").arg("100").spawn().unwrap());
    let (code, err) = attach(&d, sleeper.0.id());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with(&format!(
            "syncspy: process {} (sleep 100) has no CUDA runtime or driver loaded",
            sleeper.0.id()
        )),
        "{err}"
    );
    assert!(
        err.contains("attach to the process that uses the GPU instead"),
        "{err}"
    );
    // Nothing was left behind: no control file, no segment.
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);

    // A launcher whose worker runs on the (simulated) runtime: the worker is named.
    let lib = d.path().join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::os::unix::fs::symlink(artifact("libsimcudart.so"), lib.join("libcudart.so.13")).unwrap();
    let launcher = Running(
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{} --iters 100 busy=s1:100 sync=s1 sleep=100000; exit 0",
                cudacalls()
            ))
            .env("LD_LIBRARY_PATH", &lib)
            .env("SIMCUDA_QUIET", "1")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let (code, err) = loop {
        let (code, err) = attach(&d, launcher.0.id());
        if err.contains("its descendants that have CUDA loaded") || Instant::now() > deadline {
            break (code, err);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // The worker, to end it with the test (the launcher's end does not).
    let worker: Option<i32> = err
        .lines()
        .skip(1)
        .find(|l| l.contains("cudacalls"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|p| p.parse().ok());
    if let Some(w) = worker {
        // SAFETY: a signal to the test's own grandchild.
        unsafe { libc::kill(w, libc::SIGKILL) };
    }
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("has no CUDA runtime or driver loaded"),
        "{err}"
    );
    assert!(worker.is_some(), "the worker is not named:\n{err}");
}
