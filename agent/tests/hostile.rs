//! Hostile input from other local users (issue 12): files planted in the segment folder, output
//! paths that are devices, FIFOs or links. Every test has a deadline, so a tool that hangs
//! fails the test instead of hanging the test run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

mod common;
use common::{artifact, cudacalls, Running, TempDir, SYNCSPY};
use syncspy_test_support::{mkfifo, wait_within};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A segment folder holding what any local user can put in /dev/shm: a FIFO and links named
/// like segments.
fn planted_folder(tag: &str) -> TempDir {
    let d = TempDir::new(tag);
    mkfifo(&d.path().join("syncspy-999991-1"));
    std::os::unix::fs::symlink("/etc/passwd", d.path().join("syncspy-999992-1")).unwrap();
    std::os::unix::fs::symlink(d.path(), d.path().join("syncspy-999993-1")).unwrap();
    d
}

/// `GET path` with a deadline: (status, body).
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    (
        head.split_whitespace().nth(1).unwrap().parse().unwrap(),
        body.to_string(),
    )
}

/// Starts `syncspy agent` on a free loopback port over `seg` and returns it with its address,
/// or fails the test when it does not start serving within 15 s.
fn start_agent(seg: &Path) -> (Running, String) {
    let mut agent = Running(
        Command::new(SYNCSPY)
            .args(["agent", "--listen", "127.0.0.1:0", "--interval-ms", "50"])
            .env("SYNCSPY_DIR", seg)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let lines = BufReader::new(agent.0.stderr.take().unwrap()).lines();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            if let Some(rest) = l.split("serving http://").nth(1) {
                let _ = tx.send(rest.split('/').next().unwrap_or("").to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("the agent did not start serving (blocked on a planted file?)");
    (agent, addr)
}

#[test]
fn a_fifo_and_links_in_the_segment_folder_do_not_hang_the_agent() {
    let d = planted_folder("hostile-agent");
    let (_agent, addr) = start_agent(d.path());
    let (status, body) = get(&addr, "/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("syncspy_segments_skipped 3"), "{body}");
    let (_, snap) = get(&addr, "/api/v1/snapshot");
    assert!(snap.contains("a FIFO, not a regular file"), "{snap}");
    assert!(
        snap.contains("a symbolic link, not a regular file"),
        "{snap}"
    );
    assert!(!snap.contains("root:"), "{snap}");
}

#[test]
fn a_fifo_in_the_segment_folder_does_not_hang_syncspy_run() {
    let d = planted_folder("hostile-run");
    let c = cudacalls();
    let child = Command::new(SYNCSPY)
        .args([
            "run",
            "--sim",
            "--",
            &c,
            "--iters",
            "2",
            "busy=s1:100",
            "sync=s1",
        ])
        .env("SYNCSPY_DIR", d.path())
        .env("SIMCUDA_TIME_SCALE", "1")
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = wait_within(child, 60, "syncspy run with a FIFO in SYNCSPY_DIR");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("stream_sync"), "no summary:\n{err}");
    // Its own segment is removed; the planted files are not its business.
    let left: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("syncspy-99999"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_fifo_in_the_segment_folder_does_not_hang_the_monitor_print() {
    let d = planted_folder("hostile-top");
    let child = Command::new(artifact("syncspy-top"))
        .args(["--print", "--after", "1", "--size", "100x20"])
        .env("SYNCSPY_DIR", d.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = wait_within(child, 30, "syncspy-top --print with a FIFO in SYNCSPY_DIR");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).lines().count(), 20);
}

/// `syncspy run --sim [extra] -- cudacalls ...` in `d`, with a deadline.
fn run_with(d: &TempDir, extra: &[&str]) -> std::process::Output {
    let c = cudacalls();
    let child = Command::new(SYNCSPY)
        .args(["run", "--sim"])
        .args(extra)
        .args(["--", &c, "--iters", "2", "busy=s1:100", "sync=s1"])
        .env("SYNCSPY_DIR", d.path())
        .env("SIMCUDA_TIME_SCALE", "1")
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_within(child, 60, "syncspy run")
}

#[test]
fn reports_and_traces_onto_a_full_device_exit_2_and_leave_the_device_alone() {
    use std::os::unix::fs::FileTypeExt;
    let d = TempDir::new("hostile-full");
    let full = syncspy_test_support::full_device(d.path());
    let f = full.to_str().unwrap();
    for flag in ["--report", "--trace"] {
        let o = run_with(&d, &[flag, f]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flag}: {err}");
        assert!(err.contains("No space left on device"), "{flag}: {err}");
        assert!(
            std::fs::metadata(&full)
                .unwrap()
                .file_type()
                .is_char_device(),
            "{flag} replaced the device"
        );
    }
}

#[test]
fn a_report_goes_to_stdout_with_a_dash_and_into_a_fifo() {
    let d = TempDir::new("hostile-dash");
    let o = run_with(&d, &["--report", "-"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let json = &out[out.find("{\n").expect("no JSON on stdout")..];
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(v["syncspy_report"], 1);
    assert!(!d.path().join("-").exists());

    let fifo = d.path().join("report.fifo");
    mkfifo(&fifo);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(&fifo).unwrap())
    };
    let o = run_with(&d, &["--report", fifo.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&reader.join().unwrap()).unwrap();
    assert_eq!(v["processes"][0]["kinds"]["stream_sync"]["count"], 2);
}

#[test]
fn a_junit_file_onto_a_full_device_exits_2() {
    let d = TempDir::new("hostile-junit");
    let full = syncspy_test_support::full_device(d.path());
    let budget = d.file(
        "budget.toml",
        "[[rule]]\nname = \"syncs\"\nkind = \"stream_sync\"\nmax_count = 100\n",
    );
    let c = cudacalls();
    let child = Command::new(SYNCSPY)
        .args(["check", "--sim", "--budget"])
        .arg(&budget)
        .arg("--junit")
        .arg(&full)
        .args(["--", &c, "--iters", "2", "busy=s1:100", "sync=s1"])
        .env("SYNCSPY_DIR", d.path())
        .env("SIMCUDA_TIME_SCALE", "1")
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = wait_within(child, 60, "syncspy check");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
}
