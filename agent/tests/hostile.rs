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

/// `GET path` with the token of the agent started on `seg`.
fn get_auth(addr: &str, path: &str, seg: &Path) -> (u16, String) {
    let token = syncspy_read::snapshot::read_token(&seg.join(".agent.token")).unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
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
            .arg("--token-file")
            .arg(seg.join(".agent.token"))
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
    let (_, snap) = get_auth(&addr, "/api/v1/snapshot", d.path());
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
    run_env(d, extra, &[])
}

/// `run_with`, with extra environment variables.
fn run_env(d: &TempDir, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let c = cudacalls();
    let child = Command::new(SYNCSPY)
        .envs(env.iter().copied())
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

/// Segments whose snapshot is several MB: `n` processes of `sites` call sites each.
fn big_segments(dir: &Path, n: u32, sites: u32) -> Vec<syncspy_abi::SegmentWriter> {
    use syncspy_abi::{Api, Kind, SegmentParams, SegmentWriter};
    (0..n)
        .map(|i| {
            let mut p = SegmentParams::new(3_000_000 + i, 77);
            p.ring_capacity = 4096;
            p.site_capacity = 2048;
            p.cmdline = format!("/opt/big-{i}\0--secret-flag\0").into_bytes();
            let w = SegmentWriter::create(dir, &p).unwrap();
            for s in 0..sites {
                let frames: Vec<u64> = (0..8)
                    .map(|f| 0x7f00_0000_0000 + u64::from(s) * 64 + f)
                    .collect();
                let site = w.intern_site(&frames).unwrap();
                w.record(&syncspy_test_support::rec(
                    Kind::StreamSync,
                    Api::CudaStreamSynchronize,
                    1000 + u64::from(s),
                    0,
                    site,
                ));
            }
            w
        })
        .collect()
}

#[test]
fn no_http_client_can_hold_up_another() {
    let d = TempDir::new("hostile-http");
    let _segs = big_segments(d.path(), 8, 1000);
    let (_agent, addr) = start_agent(d.path());
    let token = syncspy_read::snapshot::read_token(&d.path().join(".agent.token")).unwrap();
    let big = get_auth(&addr, "/api/v1/snapshot", d.path()).1;
    assert!(big.len() > 2_000_000, "snapshot of {} bytes", big.len());

    // One client pipelines 100 snapshot requests and never reads; another asks once and
    // never reads.
    let req = format!(
        "GET /api/v1/snapshot HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    let mut pipeliner = TcpStream::connect(&addr).unwrap();
    pipeliner.write_all(req.repeat(100).as_bytes()).unwrap();
    let mut sleeper = TcpStream::connect(&addr).unwrap();
    sleeper.write_all(req.as_bytes()).unwrap();
    let _silent = TcpStream::connect(&addr).unwrap(); // sends nothing at all
    std::thread::sleep(Duration::from_millis(500));

    // Everyone else, Prometheus included, is still answered promptly.
    for _ in 0..5 {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp)
            .expect("/metrics was held up by a client that does not read");
        assert_eq!(resp.split_whitespace().nth(1), Some("200"), "{resp}");
        assert!(resp.contains("syncspy_agent_info"), "{resp}");
    }
    let (status, again) = get_auth(&addr, "/api/v1/snapshot", d.path());
    assert_eq!(status, 200);
    assert!(again.len() > 2_000_000);
    drop((pipeliner, sleeper));
}

#[test]
fn the_snapshot_is_for_the_token_holder_and_metrics_for_anyone() {
    use std::os::unix::fs::PermissionsExt;
    let d = TempDir::new("hostile-auth");
    let _segs = big_segments(d.path(), 1, 3);
    let (_agent, addr) = start_agent(d.path());
    let tf = d.path().join(".agent.token");
    let mode = std::fs::metadata(&tf).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let (status, body) = get(&addr, "/api/v1/snapshot");
    assert_eq!(status, 401, "{body}");
    assert!(
        !body.contains("secret-flag") && !body.contains("/opt/big"),
        "{body}"
    );
    assert!(body.contains("Authorization: Bearer"), "{body}");
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /api/v1/snapshot HTTP/1.0\r\nAuthorization: Bearer {}\r\n\r\n",
        "0".repeat(64)
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert_eq!(resp.split_whitespace().nth(1), Some("401"), "{resp}");

    let (status, body) = get_auth(&addr, "/api/v1/snapshot", d.path());
    assert_eq!(status, 200);
    assert!(body.contains("secret-flag"), "{body}");
    let (status, body) = get(&addr, "/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("syncspy_processes"), "{body}");

    // The monitor reads the snapshot with the token file.
    let child = Command::new(artifact("syncspy-top"))
        .args(["--agent", &format!("http://{addr}"), "--token-file"])
        .arg(&tf)
        .args(["--print", "--after", "1", "--size", "120x20"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = wait_within(child, 30, "syncspy-top --agent --print");
    let screen = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(screen.contains("big-0"), "{screen}");
}

#[test]
fn syncspy_off_false_records_and_a_huge_site_table_is_capped() {
    let d = TempDir::new("hostile-env");
    let o = run_env(&d, &[], &[("SYNCSPY_OFF", "false")]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("stream_sync"),
        "SYNCSPY_OFF=false turned recording off:\n{err}"
    );

    let o = run_env(
        &d,
        &["--keep-segments"],
        &[("SYNCSPY_SITES", "4294967295"), ("SYNCSPY_STACKS", "maybe")],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("SYNCSPY_SITES=4294967295 is above"), "{err}");
    assert!(
        err.contains("SYNCSPY_STACKS=\"maybe\" is not a boolean"),
        "{err}"
    );
    let sizes: Vec<u64> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("syncspy-"))
        .map(|e| e.metadata().unwrap().len())
        .collect();
    assert!(!sizes.is_empty());
    assert!(
        sizes.iter().all(|s| *s < 100 << 20),
        "segment sizes {sizes:?}"
    );
}
