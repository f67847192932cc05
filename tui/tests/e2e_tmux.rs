//! End to end: a `cudacalls` scenario runs on the simulated CUDA runtime under
//! `syncspy run --sim`, `syncspy-top` runs in a real pseudo-terminal (a private tmux server),
//! and the screen must show the process, its stall kinds and its top call site; `q` must end
//! the monitor. `syncspy-top --print` must write the same screen as plain text without a
//! terminal. Needs `cargo build --workspace` first (for `syncspy`, `cudacalls` and the
//! libraries) and tmux.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_syncspy-top"))
        .parent()
        .expect("the binary is in a folder")
        .to_path_buf()
}

/// Kills what it started when the test ends, passed or not.
struct Cleanup {
    scenario: Option<Child>,
    socket: String,
    dir: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(c) = &mut self.scenario {
            // `syncspy run` leads a process group of its own (see `start_under_sim`): the
            // program under it goes too, not only the `syncspy` that a SIGKILL would orphan.
            // SAFETY: kill(2) of our own child's group (or of the child itself).
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn capture(socket: &str) -> String {
    let out = Command::new("tmux")
        .args(["-L", socket, "capture-pane", "-p", "-t", "top"])
        .output()
        .expect("running tmux");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts the scenario under `syncspy run --sim` in a private segment folder: 3 ms of stream
/// work then a wait for it, and a pageable copy, for minutes unless killed.
fn start_scenario(tag: &str) -> (PathBuf, Child) {
    start_under_sim(
        tag,
        "cudacalls",
        &[
            "--iters",
            "100000",
            "busy=s1:3000",
            "sync=s1",
            "async=d2h:4096:pageable:s1",
        ],
        &[],
    )
}

/// Runs `program ARGS` (a binary of the workspace) under `syncspy run --sim` with `env`, in
/// a private segment folder.
fn start_under_sim(
    tag: &str,
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (PathBuf, Child) {
    let t = target_dir();
    for need in ["syncspy", program, "libsyncspy.so", "libsimcudart.so"] {
        assert!(
            t.join(need).exists(),
            "{} missing: run `cargo build --workspace` first",
            t.join(need).display()
        );
    }
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("syncspy-top-e2e-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let child = Command::new(t.join("syncspy"))
        .args(["run", "--sim", "--"])
        .arg(t.join(program))
        .args(args)
        .envs(env.iter().copied())
        .env("SYNCSPY_DIR", &dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    (dir, child)
}

#[test]
fn print_mode_writes_one_screen_without_a_terminal() {
    let (dir, scenario) = start_scenario("print");
    let _cleanup = Cleanup {
        scenario: Some(scenario),
        socket: format!("syncspy-top-e2e-unused-{}", std::process::id()),
        dir: dir.clone(),
    };
    // Wait for the segment, so the 2 s of --after see the process from their start.
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_dir(&dir).unwrap().count() == 0 {
        assert!(Instant::now() < deadline, "no segment appeared in {dir:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_syncspy-top"))
        .args(["--print", "--after", "2", "--size", "100x30"])
        .env("SYNCSPY_DIR", &dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let screen = String::from_utf8(out.stdout).unwrap();
    assert_eq!(screen.lines().count(), 30, "{screen}");
    assert!(screen.lines().all(|l| l.chars().count() <= 100), "{screen}");
    assert!(
        !screen.contains('\x1b'),
        "escape sequences in plain text:\n{screen}"
    );
    let row = screen
        .lines()
        .find(|l| l.contains("cudacalls") && l.contains("running"))
        .unwrap_or_else(|| panic!("no process row:\n{screen}"));
    assert!(row.contains("ms/s"), "{row}\n{screen}");
    assert!(screen.contains("stream_sync") && screen.contains("memcpy_pageable"));
    // The top site, symbolized (print waits for the symbolizer), is the 3 ms stream wait.
    let top = screen.lines().find(|l| l.contains("│1 ")).unwrap_or("");
    assert!(
        top.contains("stream") && top.contains("cudacalls.rs:"),
        "{top}\n{screen}"
    );

    // Bad sizes are refused with a clear message.
    let bad = Command::new(env!("CARGO_BIN_EXE_syncspy-top"))
        .args(["--print", "--size", "12"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("COLSxROWS"));
}

#[test]
fn print_mode_with_the_gpu_pane_traces_a_process_on_request_and_names_the_gap_cause() {
    // GPU tracing off in the process: only the pane's request turns it on. Each step: a
    // 3 ms kernel, the `.item()` wait for it, then 2 ms of host work before the next launch:
    // a 2 ms idle gap each step, begun while the host was in the wait.
    let (dir, scenario) = start_under_sim(
        "gpu",
        "scn-item-in-loop",
        &[
            "--iters",
            "100000",
            "--work-us",
            "3000",
            "--host-us",
            "2000",
        ],
        &[("SYNCSPY_GPU_IDLE", "off")],
    );
    let _cleanup = Cleanup {
        scenario: Some(scenario),
        socket: format!("syncspy-top-e2e-unused-gpu-{}", std::process::id()),
        dir: dir.clone(),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_dir(&dir).unwrap().count() == 0 {
        assert!(Instant::now() < deadline, "no segment appeared in {dir:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_syncspy-top"))
        .args(["--print", "--gpu", "--after", "4", "--size", "120x40"])
        .env("SYNCSPY_DIR", &dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let screen = String::from_utf8(out.stdout).unwrap();
    let line = |needle: &str| {
        screen
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?}:\n{screen}"))
            .to_string()
    };
    // The pane's title: the process's own mode stays off, tracing runs on the request.
    let title = line("GPU pid");
    assert!(title.contains("mode off"), "{title}");
    assert!(title.contains("[traced on request"), "{title}");
    // Device 0 was traced, busy about 3 ms in 5 (the simulator's timing on a loaded machine
    // varies: only a broad range), with at least one second of the line drawn.
    let dev = line("device 0");
    let busy: f64 = dev
        .split("busy")
        .nth(1)
        .and_then(|r| r.trim().split('%').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no busy share in {dev:?}"));
    assert!((20.0..=90.0).contains(&busy), "{dev}");
    let cells = dev.split('│').nth(2).unwrap_or("");
    assert!(cells.chars().any(|c| c != ' '), "{dev}");
    // Gaps arrived, about 2 ms each, blamed on the wait at the scenario's `.item()` line.
    let gaps = line("idle gaps >=");
    assert!(!gaps.contains(": 0,"), "{gaps}");
    let cause = line("cudaStreamSynchronize");
    assert!(cause.contains("stream_sync"), "{cause}");
    assert!(cause.contains("scn_item_in_loop.rs:"), "{cause}\n{screen}");
}

#[test]
fn monitor_in_a_real_terminal_shows_process_kinds_and_top_site() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("tmux is not installed: skipping the pseudo-terminal test");
        return;
    }
    let socket = format!("syncspy-top-e2e-{}", std::process::id());
    let (dir, scenario) = start_scenario("tmux");
    let _cleanup = Cleanup {
        scenario: Some(scenario),
        socket: socket.clone(),
        dir: dir.clone(),
    };

    let top = format!(
        "env SYNCSPY_DIR={} TERM=xterm-256color {}",
        dir.display(),
        env!("CARGO_BIN_EXE_syncspy-top")
    );
    let ok = Command::new("tmux")
        .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d"])
        .args(["-s", "top", "-x", "100", "-y", "30", &top])
        .status()
        .unwrap();
    assert!(ok.success());

    let deadline = Instant::now() + Duration::from_secs(20);
    let screen = loop {
        let s = capture(&socket);
        let site_row = s
            .lines()
            .any(|l| l.contains("│1 ") && l.contains("stream") && l.contains("cudacalls.rs:"));
        if s.contains("cudacalls")
            && s.contains("running")
            && s.contains("stream_sync")
            && s.contains("memcpy_pageable")
            && site_row
        {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the screen never showed it all:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // The process row has a measured event rate and stall rate.
    let row = screen
        .lines()
        .find(|l| l.contains("cudacalls") && l.contains("running"))
        .unwrap();
    assert!(
        row.contains("ms/s") || row.contains("s/s"),
        "{row}\n{screen}"
    );

    // q quits and the terminal session ends with it.
    Command::new("tmux")
        .args(["-L", &socket, "send-keys", "-t", "top", "q"])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let alive = Command::new("tmux")
            .args(["-L", &socket, "has-session", "-t", "top"])
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !alive {
            break;
        }
        assert!(Instant::now() < deadline, "q did not end the monitor");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn attach_from_the_monitor_shows_a_running_process_and_q_detaches_it() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("tmux is not installed: skipping the pseudo-terminal test");
        return;
    }
    // A process started without syncspy: the simulated runtime on its library path only.
    let t = target_dir();
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("syncspy-top-e2e-attach-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(t.join("libsimcudart.so"), dir.join("libcudart.so.13")).unwrap();
    let child = Command::new(t.join("cudacalls"))
        .args(["--iters", "100000", "busy=s1:3000", "sync=s1"])
        .env("LD_LIBRARY_PATH", &dir)
        .env("SIMCUDA_QUIET", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let socket = format!("syncspy-top-e2e-attach-{}", std::process::id());
    let mut cleanup = Cleanup {
        scenario: Some(child),
        socket: socket.clone(),
        dir: dir.clone(),
    };
    let segs = dir.join("segments");
    std::fs::create_dir_all(&segs).unwrap();
    let top = format!(
        "env SYNCSPY_DIR={} TERM=xterm-256color {} --attach {pid} --window 5",
        segs.display(),
        env!("CARGO_BIN_EXE_syncspy-top")
    );
    let ok = Command::new("tmux")
        .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d"])
        .args(["-s", "top", "-x", "100", "-y", "30", &top])
        .status()
        .unwrap();
    assert!(ok.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let screen = loop {
        let s = capture(&socket);
        if s.contains("cudacalls") && s.contains("running") && s.contains("stream_sync") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the screen never showed it:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // The window option reached the monitor that `syncspy attach --tui` started.
    assert!(screen.contains("[last 5s]"), "{screen}");
    Command::new("tmux")
        .args(["-L", &socket, "send-keys", "-t", "top", "q"])
        .status()
        .unwrap();
    // q ends the monitor, the attach detaches and ends; the process runs on.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let alive = Command::new("tmux")
            .args(["-L", &socket, "has-session", "-t", "top"])
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !alive {
            break;
        }
        assert!(Instant::now() < deadline, "q did not end the attach");
        std::thread::sleep(Duration::from_millis(100));
    }
    let c = cleanup.scenario.as_mut().unwrap();
    assert!(
        matches!(c.try_wait(), Ok(None)),
        "the process did not run on"
    );
    // Detached: no segment or control file left, and the process is not traced.
    let left: Vec<_> = std::fs::read_dir(&segs).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.contains("TracerPid:\t0"), "{status}");
}
