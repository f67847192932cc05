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
    // Its stacks are symbolized over the first few steps (a bounded share each step).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut big = get_auth(&addr, "/api/v1/snapshot", d.path()).1;
    while big.len() <= 2_000_000 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        big = get_auth(&addr, "/api/v1/snapshot", d.path()).1;
    }
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

// Issue 25: a shared GPU server is hostile. Another user plants links, FIFOs and devices at
// the paths syncspy writes; syncspy often runs as root.

/// The user the planted files belong to (`nobody`).
const OTHER_USER: u32 = 65534;

/// Whether this test runs as root: planting another user's files needs it. CI runs as root.
fn root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("{test}: skipped: not root, so no files of another user can be planted");
    }
    root
}

/// A sticky, world-writable folder in `d`, like /tmp or /dev/shm.
fn sticky_folder(d: &TempDir) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let s = d.path().join("sticky");
    std::fs::create_dir(&s).unwrap();
    std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o1777)).unwrap();
    s
}

/// A symbolic link at `at` to `to`, owned by the other user (as if that user made it).
fn plant_link(to: &Path, at: &Path) {
    std::os::unix::fs::symlink(to, at).unwrap();
    std::os::unix::fs::lchown(at, Some(OTHER_USER), Some(OTHER_USER)).unwrap();
}

/// A FIFO at `at`, owned by the other user.
fn plant_fifo(at: &Path) {
    mkfifo(at);
    std::os::unix::fs::lchown(at, Some(OTHER_USER), Some(OTHER_USER)).unwrap();
}

/// A file of root's, outside the sticky folder, that a planted link points to.
fn root_file(d: &TempDir) -> std::path::PathBuf {
    d.file("root-owned", "precious\n")
}

/// Opens `fifo` for writing and closes it, so that a reader blocked in its open gets EOF.
fn release_reader(fifo: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    for _ in 0..100 {
        if std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(fifo)
            .is_ok()
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_tui_log_at_a_link_planted_in_a_sticky_folder_is_not_followed() {
    if !root_or_skip("a_tui_log_at_a_link_planted_in_a_sticky_folder_is_not_followed") {
        return;
    }
    // --tui needs a terminal: `script` gives the run one.
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` (util-linux) to give syncspy run a terminal");
        return;
    }
    let d = TempDir::new("hostile-tuilog");
    let sticky = sticky_folder(&d);
    let victim = root_file(&d);
    let log = sticky.join("syncspy-run.log");
    plant_link(&victim, &log);
    let c = cudacalls();
    let line = format!(
        "{SYNCSPY} run --sim --tui --tui-log {} -- {c} --iters 2 sync=s1",
        log.display()
    );
    let child = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("SYNCSPY_DIR", d.path())
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = wait_within(child, 60, "syncspy run --tui under script");
    let out = text(&o.stdout) + &text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("cannot create the log"), "{out}");
    assert!(out.contains("not followed"), "{out}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(std::fs::symlink_metadata(&log)
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn a_report_fifo_that_nobody_reads_is_an_error_not_a_hang() {
    let d = TempDir::new("hostile-fifo-noreader");
    let fifo = d.path().join("report.fifo");
    mkfifo(&fifo);
    let o = run_with(&d, &["--report", fifo.to_str().unwrap()]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("a FIFO that nobody reads"), "{err}");
}

#[test]
fn another_users_fifo_gets_no_report() {
    use std::os::unix::fs::FileTypeExt;
    if !root_or_skip("another_users_fifo_gets_no_report") {
        return;
    }
    let d = TempDir::new("hostile-fifo-other");
    let sticky = sticky_folder(&d);
    // With its owner reading it: the report would have gone to that user.
    let fifo = sticky.join("report.json");
    plant_fifo(&fifo);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(&fifo).unwrap())
    };
    let o = run_with(&d, &["--report", fifo.to_str().unwrap()]);
    let err = text(&o.stderr);
    release_reader(&fifo);
    let got = reader.join().unwrap();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("a FIFO owned by user {OTHER_USER}")),
        "{err}"
    );
    assert!(got.is_empty(), "the other user read {} bytes", got.len());
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());

    // Without a reader: refused at once, not a hang (wait_within's deadline).
    let lonely = sticky.join("lonely.json");
    plant_fifo(&lonely);
    let o = run_with(&d, &["--report", lonely.to_str().unwrap()]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("a FIFO owned by user {OTHER_USER}")),
        "{err}"
    );
}

#[test]
fn a_report_path_flipped_between_a_fifo_and_a_link_never_reaches_the_link() {
    if !root_or_skip("a_report_path_flipped_between_a_fifo_and_a_link_never_reaches_the_link") {
        return;
    }
    let d = TempDir::new("hostile-flip");
    let sticky = sticky_folder(&d);
    let victim = root_file(&d);
    let path = sticky.join("report.json");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The other user swaps the path, atomically (rename), between its FIFO and its link to
    // a root file, as fast as it can.
    let flipper = {
        let (stop, path, victim, sticky) = (stop.clone(), path.clone(), victim.clone(), sticky);
        std::thread::spawn(move || {
            let (f, l) = (sticky.join(".f"), sticky.join(".l"));
            let mut flips = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::remove_file(&f);
                plant_fifo(&f);
                let _ = std::fs::rename(&f, &path);
                let _ = std::fs::remove_file(&l);
                plant_link(&victim, &l);
                let _ = std::fs::rename(&l, &path);
                flips += 1;
            }
            flips
        })
    };
    for _ in 0..3 {
        let o = run_with(&d, &["--report", path.to_str().unwrap()]);
        // Written (the link replaced) or refused (the other user's FIFO): either is fine.
        assert!(
            matches!(o.status.code(), Some(0 | 2)),
            "{}",
            text(&o.stderr)
        );
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "precious\n",
            "the report went through the link: {}",
            text(&o.stderr)
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(flipper.join().unwrap() > 10);
}

#[test]
fn reports_and_budgets_are_read_with_a_bound() {
    let d = TempDir::new("hostile-reads");
    for dev in ["/dev/zero", "/dev/urandom"] {
        let child = Command::new(SYNCSPY)
            .args(["report", dev])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let o = wait_within(child, 20, "syncspy report /dev/zero");
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("not a regular file"), "{err}");
    }
    // A FIFO nobody writes: not a hang.
    let fifo = d.path().join("report.fifo");
    mkfifo(&fifo);
    let child = Command::new(SYNCSPY)
        .arg("report")
        .arg(&fifo)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = wait_within(child, 20, "syncspy report FIFO");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    // A (sparse) report larger than the bound.
    let big = d.path().join("big.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len((256 << 20) + 1)
        .unwrap();
    let o = Command::new(SYNCSPY)
        .arg("report")
        .arg(&big)
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("too large for a syncspy report"), "{err}");

    // Budgets: a device, and a file over 1 MiB.
    let c = cudacalls();
    let big_budget = d.file("big.toml", &"# padding\n".repeat(120_000));
    for budget in [Path::new("/dev/zero"), big_budget.as_path()] {
        let child = Command::new(SYNCSPY)
            .args(["check", "--sim", "--budget"])
            .arg(budget)
            .args(["--", &c, "--iters", "1", "sync=s1"])
            .env("SYNCSPY_DIR", d.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let o = wait_within(child, 20, "syncspy check --budget /dev/zero");
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains("not a regular file") || err.contains("too large for a budget file"),
            "{err}"
        );
    }
}

/// What an escape sequence in a command line or frame would do to a terminal: set the
/// window title, write the clipboard (OSC 52), clear the screen (also through the C1 CSI),
/// reverse the text.
const EVIL: &str = "\x1b]0;pwned\x07\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\u{9b}2J\u{202e}";

/// Whether `out` holds anything a terminal would act on.
fn raw_controls(out: &str) -> Vec<char> {
    out.chars()
        .filter(|c| (c.is_control() && *c != '\n' && *c != '\t') || *c == '\u{202e}')
        .collect()
}

#[test]
fn escape_sequences_in_reports_reach_no_terminal() {
    let d = TempDir::new("hostile-escapes");
    let mut r: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report-v1.json"),
        )
        .unwrap(),
    )
    .unwrap();
    r["command"][0] = format!("./train{EVIL}").into();
    let p = &mut r["processes"][0];
    p["cmdline"] = format!("python3 evil{EVIL}.py").into();
    p["sites"][0]["location"] = format!("step (evil{EVIL}.py:3)").into();
    p["sites"][0]["frames"][0] = format!("step (evil{EVIL}.py:3)").into();
    r["warnings"] = serde_json::json!([format!("cannot read /opt/lib{EVIL}.so")]);
    let file = d.file("evil.json", &serde_json::to_string(&r).unwrap());
    let f = file.to_str().unwrap();
    for args in [
        vec!["report", f],
        vec!["report", "--format", "markdown", f],
        vec!["report", "--format", "json", f],
        vec!["report", f, f],
        vec!["report", "--format", "markdown", f, f],
    ] {
        let o = Command::new(SYNCSPY).args(&args).output().unwrap();
        let out = text(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
        assert!(
            raw_controls(&out).is_empty(),
            "{args:?}: raw {:?} in\n{out}",
            raw_controls(&out)
        );
        if args.len() == 2 {
            assert!(out.contains(r"\x1b]0;pwned"), "{args:?}:\n{out}");
        }
    }
    // JSON stays JSON, and says the same.
    let o = Command::new(SYNCSPY)
        .args(["report", "--format", "json", f])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["processes"][0]["cmdline"], r["processes"][0]["cmdline"]);

    // The summary of a run: the command's arguments.
    let c = cudacalls();
    let o = run_sim_args(&d, &["sh", "-c", "exec \"$0\" --iters 1 sync=s1", &c, EVIL]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("stream_sync"), "{err}");
    assert!(raw_controls(&err).is_empty(), "raw controls in\n{err}");
}

/// `syncspy run --sim -- CMD...` in `d`, with a deadline.
fn run_sim_args(d: &TempDir, cmd: &[&str]) -> std::process::Output {
    let child = Command::new(SYNCSPY)
        .args(["run", "--sim", "--"])
        .args(cmd)
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

/// A shell command that, like another user watching for new pids, puts that user's folders
/// at every predictable segment name of its own process (`syncspy-<pid>-<start>` and `-1` to
/// `-64`), then becomes `cudacalls`, which records two stream syncs.
fn squatted_cudacalls() -> Vec<String> {
    let script = format!(
        "st=$(cut -d' ' -f22 /proc/$$/stat); base=\"$SYNCSPY_DIR/syncspy-$$-$st\"; \
         set -- \"$base\"; n=1; while [ $n -le 64 ]; do set -- \"$@\" \"$base-$n\"; n=$((n+1)); done; \
         setpriv --reuid={OTHER_USER} --regid={OTHER_USER} --clear-groups mkdir \"$@\" || exit 99; \
         exec {} --iters 2 busy=s1:100 sync=s1",
        cudacalls()
    );
    vec!["sh".into(), "-c".into(), script]
}

#[test]
fn folders_at_every_predictable_segment_name_neither_blind_a_run_nor_fail_it() {
    if !root_or_skip("folders_at_every_predictable_segment_name_neither_blind_a_run_nor_fail_it") {
        return;
    }
    let d = TempDir::new("hostile-squat");
    let seg = sticky_folder(&d);
    let cmd = squatted_cudacalls();
    let run = |sub: &[&str]| {
        let child = Command::new(SYNCSPY)
            .args(sub)
            .arg("--")
            .args(&cmd)
            .env("SYNCSPY_DIR", &seg)
            .env("SIMCUDA_TIME_SCALE", "1")
            .env_remove("SYNCSPY_LIB")
            .env_remove("SYNCSPY_SIM_LIB")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_within(child, 60, "syncspy with squatted segment names")
    };
    let o = run(&["run", "--sim", "--report", "-"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("could not record"), "{err}");
    assert!(
        !err.contains("skipped"),
        "another user's folders are not this run's: {err}"
    );
    let out = text(&o.stdout);
    let json = &out[out.find("{\n").expect("no JSON report on stdout")..];
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(
        v["processes"][0]["kinds"]["stream_sync"]["count"], 2,
        "{json}"
    );

    let budget = d.file(
        "budget.toml",
        "[[rule]]\nname = \"syncs\"\nkind = \"stream_sync\"\nmax_count = 2\n",
    );
    let o = run(&["check", "--sim", "--budget", budget.to_str().unwrap()]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("2 events <= max_count 2"), "{err}");
    // Only the planted folders are left: the run's own segments were removed.
    for e in std::fs::read_dir(&seg).unwrap() {
        let e = e.unwrap();
        assert!(e.file_type().unwrap().is_dir(), "{:?} left", e.file_name());
    }
}

/// The pid of a child of `parent`, once it has one (within 10 s).
fn child_of(parent: u32) -> u32 {
    for _ in 0..500 {
        let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
            .unwrap_or_default();
        if let Some(c) = children.split_whitespace().next() {
            return c.parse().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("process {parent} started no child");
}

#[test]
fn a_segment_of_another_users_process_with_the_runs_session_is_not_counted() {
    if !root_or_skip("a_segment_of_another_users_process_with_the_runs_session_is_not_counted") {
        return;
    }
    let d = TempDir::new("hostile-forge");
    let seg = sticky_folder(&d);
    let tmp = d.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let budget = d.file(
        "budget.toml",
        "[[rule]]\nname = \"syncs\"\nkind = \"stream_sync\"\nmax_count = 100\n",
    );
    let check = Command::new(SYNCSPY)
        .args(["check", "--sim", "--budget"])
        .arg(&budget)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "sleep 1.5; exec {} --iters 2 busy=s1:100 sync=s1",
            cudacalls()
        ))
        .env("SYNCSPY_DIR", &seg)
        .env("TMPDIR", &tmp)
        .env("SIMCUDA_TIME_SCALE", "1")
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The session, as root sees it in the command's environment: once the child has run
    // exec (between fork and exec, its environment is still syncspy's own).
    let child = child_of(check.id());
    let session_of = || {
        let environ = std::fs::read(format!("/proc/{child}/environ")).unwrap_or_default();
        environ
            .split(|b| *b == 0)
            .find_map(|v| v.strip_prefix(b"SYNCSPY_SESSION="))
            .map(|v| text(v).parse::<u64>().unwrap())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let session = loop {
        match session_of() {
            Some(s) => break s,
            None if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            None => panic!("no SYNCSPY_SESSION in the command's environment within 10 s"),
        }
    };
    // Nothing another user can list names it.
    for e in std::fs::read_dir(&tmp).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            !name.contains(&format!("{session:016x}")) && !name.contains(&session.to_string()),
            "{name} shows the session"
        );
    }
    // Another user who learnt it anyway forges a segment of that session for a process of
    // its own, outside the run, with 5,000 syncs.
    let forger = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(artifact("forge-session"))
        .arg(&seg)
        .arg(session.to_string())
        .arg("4")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let _forger = Running(forger);
    let o = wait_within(check, 60, "syncspy check with a forged segment");
    let err = text(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(0),
        "the forged segment was counted:\n{err}"
    );
    assert!(err.contains("2 events <= max_count 100"), "{err}");
    assert!(!err.contains("forged"), "{err}");
    assert!(err.contains("not one this run started"), "{err}");
}

#[test]
fn bad_setting_values_each_get_one_warning_and_the_default() {
    let d = TempDir::new("hostile-settings");
    let bad = [
        ("SYNCSPY_DRIVER", "x"),
        ("SYNCSPY_GPU_IDLE", "bogus"),
        ("SYNCSPY_GPU_IDLE_MIN_US", "-1"),
        ("SYNCSPY_LINGER_MS", "-1"),
        ("SYNCSPY_DIR_CAP_MB", "-1"),
    ];
    let o = run_env(&d, &[], &bad);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("stream_sync"),
        "no summary (the defaults were not used):\n{err}"
    );
    for (k, v) in bad {
        let line = format!("syncspy: warning: {k}={v:?} is not");
        // One process, so once; `syncspy run` itself reads the folder policy too.
        let n = err.matches(&line).count();
        let most = if k.starts_with("SYNCSPY_DIR_CAP") || k.starts_with("SYNCSPY_LINGER") {
            2
        } else {
            1
        };
        assert!((1..=most).contains(&n), "{line}: {n} times in\n{err}");
    }
}

#[test]
fn attach_refusals_say_why() {
    if !root_or_skip("attach_refusals_say_why") {
        return;
    }
    // Root's process, which the other user may not attach to.
    let sleeper = Running(Command::new("sleep").arg("30").spawn().unwrap());
    let o = wait_within(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args([
                SYNCSPY,
                "attach",
                &sleeper.0.id().to_string(),
                "--duration",
                "1",
            ])
            .env("SYNCSPY_DIR", "/dev/shm")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        30,
        "syncspy attach to another user's process",
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("belongs to another user (root (uid 0))") && err.contains("as root"),
        "{err}"
    );
    drop(sleeper);

    // A zombie: exited, not yet collected.
    let mut z = Command::new("true").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let o = wait_within(
        Command::new(SYNCSPY)
            .args(["attach", &z.id().to_string(), "--duration", "1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        30,
        "syncspy attach to a zombie",
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("has exited"), "{err}");
    z.wait().unwrap();
}

/// Waits (10 s at most) until process `pid` runs `comm` with libsyncspy.so mapped: a job of
/// the other user started through `setpriv`, preloaded, once it has become its program.
fn preloaded_as(pid: u32, comm: &str) {
    for _ in 0..500 {
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        if name.trim() == comm && maps.contains("libsyncspy.so") {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("process {pid} did not become {comm} with libsyncspy.so preloaded");
}

/// Issue 35, item 4: the other user starts a dormant preloaded job whose SYNCSPY_DIR names a
/// folder of root's (0700, 0755), and waits for root's `syncspy attach`. Attach must not
/// create a file there, let alone give that user one: the folder is the job's environment's
/// word, not provably the job's. It says so, naming the folder, and uses the job's shared
/// sticky /dev/shm instead.
#[test]
fn attach_gives_another_users_job_no_file_in_a_folder_of_roots_that_the_job_names() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !root_or_skip(
        "attach_gives_another_users_job_no_file_in_a_folder_of_roots_that_the_job_names",
    ) {
        return;
    }
    let d = TempDir::new("hostile-attach-dir");
    // Root's attach records into a shared folder the job can write its segment in.
    let seg = sticky_folder(&d);
    let lib = artifact("libsyncspy.so");
    for mode in [0o700, 0o755] {
        let roots = d.path().join(format!("root-{mode:o}"));
        std::fs::create_dir(&roots).unwrap();
        std::fs::set_permissions(&roots, std::fs::Permissions::from_mode(mode)).unwrap();
        let job = Running(
            Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .args(["sleep", "60"])
                .env("LD_PRELOAD", &lib)
                .env("SYNCSPY_DORMANT", "1")
                .env("SYNCSPY_DIR", &roots)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let pid = job.0.id();
        preloaded_as(pid, "sleep");
        let shm_control = Path::new("/dev/shm").join(format!("syncspy-attach-{pid}"));
        let mut attach = Command::new(SYNCSPY)
            .args(["attach", &pid.to_string(), "--duration", "1"])
            .env("SYNCSPY_DIR", &seg)
            .env_remove("SYNCSPY_LIB")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Watched while attach runs (it removes its control file at the end).
        let (mut seen, mut in_shm) = (std::collections::BTreeSet::new(), None);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while attach.try_wait().unwrap().is_none() {
            assert!(std::time::Instant::now() < deadline, "attach did not end");
            for e in std::fs::read_dir(&roots).unwrap().flatten() {
                let m = e.metadata().unwrap();
                seen.insert(format!(
                    "{:?} (uid {}, mode {:o})",
                    e.file_name(),
                    m.uid(),
                    m.mode() & 0o7777
                ));
            }
            if let Ok(m) = std::fs::symlink_metadata(&shm_control) {
                in_shm = Some((m.uid(), m.mode() & 0o777));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let o = wait_within(attach, 10, "syncspy attach");
        let err = text(&o.stderr);
        assert!(
            seen.is_empty(),
            "mode {mode:o}: attach made files in root's folder: {seen:?}\n{err}"
        );
        assert!(
            err.contains(&format!("folder {} (its SYNCSPY_DIR)", roots.display()))
                && err.contains(
                    "belongs to root (uid 0), not to the process's user nobody (uid 65534)"
                )
                && err.contains("goes to /dev/shm"),
            "mode {mode:o}: {err}"
        );
        assert_eq!(o.status.code(), Some(0), "mode {mode:o}: {err}");
        // The control file was the job's to read, in its shared sticky folder, and is gone.
        assert_eq!(in_shm, Some((OTHER_USER, 0o600)), "mode {mode:o}: {err}");
        assert!(!shm_control.exists(), "mode {mode:o}");
        assert_eq!(std::fs::read_dir(&roots).unwrap().count(), 0);
        drop(job);
    }
}
