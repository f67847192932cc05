//! The `syncspy` binary from the outside: argument handling, exit codes, errors, the
//! environment the command gets, and a whole run over segments that a helper process (this
//! test executable, started as the command) writes with the ABI crate, so no CUDA and no
//! libsyncspy.so are needed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use syncspy_abi::{Api, Direction, Kind, Record, SegmentParams, SegmentWriter};
use syncspy_test_support::{Running, TempDir};

const SYNCSPY: &str = env!("CARGO_BIN_EXE_syncspy");
const HELPER_ENV: &str = "SYNCSPY_CLI_TEST_HELPER";
const STOP_ENV: &str = "SYNCSPY_CLI_TEST_STOP";

/// A shared object that is harmless to preload: the C library this test runs with.
fn harmless_shared_object() -> PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            let name = p.rsplit('/').next().unwrap_or("");
            name.starts_with("libc.so") || name.starts_with("libc-")
        })
        .map(PathBuf::from)
        .expect("libc in /proc/self/maps")
}

/// `syncspy ARGS` with a private segment folder and a harmless library.
fn syncspy(dir: &TempDir, args: &[&str]) -> Command {
    let mut c = Command::new(SYNCSPY);
    c.args(args)
        .env("SYNCSPY_DIR", dir.path())
        .env("SYNCSPY_LIB", harmless_shared_object())
        .env_remove("SYNCSPY_SIM_LIB")
        .env_remove(HELPER_ENV);
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// The `syncspy:` error line of a failed run: exactly one line, with a hint.
fn one_error_line(o: &Output) -> String {
    let err = text(&o.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected:\n{err}");
    assert!(lines[0].starts_with("syncspy: "), "{err}");
    lines[0].to_string()
}

// Every `--help` is snapshotted in tests/cmd (cli_help.rs).

#[test]
fn no_command_is_a_usage_error() {
    // No command is a usage error.
    let o = Command::new(SYNCSPY).arg("run").output().unwrap();
    assert_eq!(code(&o), 2);
}

#[test]
fn exit_code_is_the_commands_own() {
    let d = TempDir::new("exit");
    let o = syncspy(&d, &["run", "--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 3, "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("exited with code 3"), "{err}");
    assert!(err.contains("no instrumented process"), "{err}");
    // Without `--` too, and the command's own flags are its own.
    let o = syncspy(&d, &["run", "sh", "-c", "exit 4"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 4);
}

#[test]
fn a_command_killed_by_a_signal_gives_128_plus_the_signal() {
    let d = TempDir::new("sig");
    let o = syncspy(&d, &["run", "--", "sh", "-c", "kill -TERM $$"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 128 + 15, "{}", text(&o.stderr));
}

#[test]
fn missing_library_is_a_setup_error_that_says_what_to_do() {
    let d = TempDir::new("nolib");
    let marker = d.path().join("ran");
    let o = syncspy(&d, &["run", "--", "touch", marker.to_str().unwrap()])
        .env("SYNCSPY_LIB", "/nonexistent/libsyncspy.so")
        .output()
        .unwrap();
    assert_eq!(code(&o), 2);
    let line = one_error_line(&o);
    assert!(
        line.contains("SYNCSPY_LIB=/nonexistent/libsyncspy.so"),
        "{line}"
    );
    assert!(
        !marker.exists(),
        "the command must not run without the library"
    );

    // Discovery next to the executable: a copy of syncspy in a folder without the library.
    let exe = d.path().join("syncspy");
    std::fs::copy(SYNCSPY, &exe).unwrap();
    let o = Command::new(&exe)
        .args(["run", "--", "true"])
        .env("SYNCSPY_DIR", d.path())
        .env_remove("SYNCSPY_LIB")
        .output()
        .unwrap();
    assert_eq!(code(&o), 2);
    let line = one_error_line(&o);
    assert!(line.contains("libsyncspy.so not found"), "{line}");
    assert!(line.contains(d.path().to_str().unwrap()), "{line}");
    assert!(line.contains("SYNCSPY_LIB"), "{line}");
}

#[test]
fn the_library_next_to_the_executable_is_preloaded_before_the_users_own() {
    let d = TempDir::new("nextto");
    let exe = d.path().join("syncspy");
    std::fs::copy(SYNCSPY, &exe).unwrap();
    let lib = d.path().join("libsyncspy.so");
    std::fs::copy(harmless_shared_object(), &lib).unwrap();
    let user = harmless_shared_object();
    let o = Command::new(&exe)
        .args([
            "run",
            "--",
            "sh",
            "-c",
            "echo \"$LD_PRELOAD\"; echo \"$SYNCSPY_SESSION\"",
        ])
        .env("SYNCSPY_DIR", d.path())
        .env("LD_PRELOAD", &user)
        .env_remove("SYNCSPY_LIB")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let mut lines = out.lines();
    assert_eq!(
        lines.next().unwrap(),
        format!("{}:{}", lib.display(), user.display())
    );
    let session: u64 = lines.next().unwrap().parse().unwrap();
    assert_ne!(session, 0);
}

#[test]
fn a_command_that_cannot_start_exits_127() {
    let d = TempDir::new("nostart");
    let o = syncspy(&d, &["run", "--", "syncspy-no-such-command-xyz"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 127);
    let line = one_error_line(&o);
    assert!(line.contains("syncspy-no-such-command-xyz"), "{line}");
    assert!(line.contains("not found"), "{line}");

    let f = d.path().join("not-executable");
    std::fs::write(&f, b"#!/bin/sh\n").unwrap();
    let o = syncspy(&d, &["run", "--", f.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(code(&o), 127);
    assert!(one_error_line(&o).contains("permission denied"));
}

#[test]
fn an_unusable_segment_folder_is_a_setup_error() {
    let d = TempDir::new("baddir");
    let o = syncspy(&d, &["run", "--", "true"])
        .env("SYNCSPY_DIR", "/nonexistent/segments")
        .output()
        .unwrap();
    assert_eq!(code(&o), 2);
    assert_eq!(
        one_error_line(&o),
        "syncspy: SYNCSPY_DIR=/nonexistent/segments does not exist: set SYNCSPY_DIR to a \
         writable folder (default /dev/shm)"
    );
    let file = d.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let o = syncspy(&d, &["run", "--", "true"])
        .env("SYNCSPY_DIR", &file)
        .output()
        .unwrap();
    assert_eq!(code(&o), 2);
    assert!(one_error_line(&o).contains("is not a folder"));
}

#[test]
fn sim_puts_a_private_runtime_folder_first_and_removes_it() {
    let d = TempDir::new("sim");
    let sim = d.path().join("libsimcudart.so");
    std::fs::copy(harmless_shared_object(), &sim).unwrap();
    let script = "first=${LD_LIBRARY_PATH%%:*}; echo \"$first\"; echo \"$LD_LIBRARY_PATH\"; \
                  readlink \"$first/libcudart.so.13\"; readlink \"$first/libcudart.so\"";
    let o = syncspy(&d, &["run", "--sim", "--", "sh", "-c", script])
        .env("SYNCSPY_SIM_LIB", &sim)
        .env("LD_LIBRARY_PATH", "/opt/user/lib")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    let folder = Path::new(lines[0]);
    assert!(folder.is_absolute());
    assert_eq!(lines[1], format!("{}:/opt/user/lib", lines[0]));
    assert_eq!(lines[2], sim.to_str().unwrap());
    assert_eq!(lines[3], sim.to_str().unwrap());
    assert!(
        !folder.exists(),
        "the private folder is removed after the run"
    );

    let o = syncspy(&d, &["run", "--sim", "--", "true"])
        .env("SYNCSPY_SIM_LIB", "/nonexistent/libsimcudart.so")
        .output()
        .unwrap();
    assert_eq!(code(&o), 2);
    assert!(one_error_line(&o).contains("SYNCSPY_SIM_LIB"));
}

#[test]
fn tui_without_a_terminal_is_announced_and_the_run_goes_on() {
    let d = TempDir::new("tui");
    let o = syncspy(&d, &["run", "--tui", "--", "sh", "-c", "exit 5"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 5);
    assert!(text(&o.stderr).contains("running without the monitor"));
}

#[test]
fn report_is_written_and_printed_again_and_bad_paths_fail_early() {
    let d = TempDir::new("report");
    let r = d.path().join("r.json");
    let o = syncspy(
        &d,
        &[
            "run",
            "--report",
            r.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "exit 6",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(code(&o), 6);
    let v: Value = serde_json::from_slice(&std::fs::read(&r).unwrap()).unwrap();
    assert_eq!(v["syncspy_report"], 1);
    assert_eq!(v["exit_code"], 6);
    assert_eq!(v["command"], serde_json::json!(["sh", "-c", "exit 6"]));
    assert!(v["wall_ns"].as_u64().unwrap() > 0);
    assert_eq!(v["processes"], serde_json::json!([]));

    let o = Command::new(SYNCSPY)
        .args(["report", r.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(code(&o), 0);
    assert!(
        text(&o.stdout).contains("exited with code 6"),
        "{}",
        text(&o.stdout)
    );

    let o = Command::new(SYNCSPY)
        .args(["report", "/nonexistent/r.json"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 2);
    assert!(one_error_line(&o).contains("/nonexistent/r.json"));

    let marker = d.path().join("ran");
    let o = syncspy(
        &d,
        &[
            "run",
            "--report",
            "/nonexistent/dir/r.json",
            "--",
            "touch",
            marker.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    assert_eq!(code(&o), 2);
    assert!(one_error_line(&o).contains("/nonexistent/dir"));
    assert!(!marker.exists());
}

#[test]
fn sigterm_to_syncspy_reaches_the_command() {
    let d = TempDir::new("fwd");
    let mut child = Running(
        syncspy(
            &d,
            &[
                "run",
                "--",
                "sh",
                "-c",
                "trap 'exit 7' TERM; echo ready; while :; do sleep 0.02; done",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    // SAFETY: plain syscall on the pid of a child we have not reaped.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "syncspy did not end after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        status.code(),
        Some(7),
        "the command's trap decides the exit code"
    );
}

// ---- A whole run over real segments -------------------------------------------------------

fn record(w: &SegmentWriter, kind: Kind, api: Api, duration_ns: u64, bytes: u64, site: u32) {
    w.record(&Record {
        kind,
        api,
        direction: Direction::None,
        flags: 0,
        device: 0,
        start_ns: 1,
        duration_ns,
        bytes,
        stream: 0,
        tid: std::process::id(),
        site,
        result: 0,
        polls: 0,
    });
}

/// Created by the lingering helper once its segment exists.
fn ready_file() -> PathBuf {
    let mut p = std::env::var_os(STOP_ENV).unwrap();
    p.push(".ready");
    PathBuf::from(p)
}

fn own_segment(role: &str) -> SegmentWriter {
    let dir = std::env::var_os("SYNCSPY_DIR").unwrap();
    let session: u64 = std::env::var("SYNCSPY_SESSION").unwrap().parse().unwrap();
    let pid = std::process::id();
    let mut p = SegmentParams::new(pid, syncspy_abi::process_start_ticks(pid).unwrap());
    p.session = session;
    p.ring_capacity = 256;
    p.site_capacity = 64;
    p.module_capacity = 16;
    p.cmdline = format!("helper\0{role}\0").into_bytes();
    SegmentWriter::create(Path::new(&dir), &p).unwrap()
}

/// Not a test of its own: the command of `a_run_follows_the_command_and_its_descendants`.
/// Does nothing unless started with `SYNCSPY_CLI_TEST_HELPER` set.
#[test]
// The "lingering" grandchild must outlive its parent: nobody waits for it here.
#[allow(clippy::zombie_processes)]
fn helper_writes_a_segment() {
    let Ok(role) = std::env::var(HELPER_ENV) else {
        return;
    };
    let w = own_segment(&role);
    let me = std::env::current_exe().unwrap();
    let helper = |role: &str| {
        let mut c = Command::new(&me);
        c.args(["--exact", "helper_writes_a_segment", "--nocapture"])
            .env(HELPER_ENV, role);
        c
    };
    match role.as_str() {
        "parent" => {
            for i in 1..=10 {
                record(
                    &w,
                    Kind::StreamSync,
                    Api::CudaStreamSynchronize,
                    i * 1_000_000,
                    0,
                    0,
                );
            }
            w.live().calls[Api::CudaMemcpyAsync as usize].add_untimed(4096);
            let o = helper("child").output().unwrap();
            assert!(o.status.success());
            // A grandchild that outlives the command; it says when its segment exists.
            let ready = ready_file();
            let _ = std::fs::remove_file(&ready);
            let _g = helper("lingering")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            while !ready.exists() {
                assert!(
                    Instant::now() < deadline,
                    "the lingering helper did not start"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        "child" => {
            for _ in 0..5 {
                record(&w, Kind::MemcpySync, Api::CudaMemcpy, 2_000, 1000, 0);
            }
        }
        "lingering" => {
            record(&w, Kind::DeviceSync, Api::CudaDeviceSynchronize, 50, 0, 0);
            std::fs::write(ready_file(), b"").unwrap();
            let stop = PathBuf::from(std::env::var_os(STOP_ENV).unwrap());
            let deadline = Instant::now() + Duration::from_secs(60);
            // Stop when told to, or when the test's folder is gone.
            let folder = stop.parent().unwrap().to_path_buf();
            while !stop.exists() && folder.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        _ => panic!("unknown helper role {role}"),
    }
    w.mark_exited(0);
}

#[test]
fn a_run_follows_the_command_and_its_descendants() {
    let d = TempDir::new("whole");
    let stop = d.path().join("stop");
    // A segment of another session in the same folder: not ours, left alone.
    let mut other = SegmentParams::new(1, 1);
    other.session = 12345;
    other.ring_capacity = 16;
    let other = SegmentWriter::create(d.path(), &other).unwrap();
    record(
        &other,
        Kind::DeviceSync,
        Api::CudaDeviceSynchronize,
        1,
        0,
        0,
    );
    // A file with a segment's name that is no segment: reported, skipped.
    std::fs::write(d.path().join("syncspy-2-2"), b"not a segment").unwrap();

    let report = d.path().join("r.json");
    let me = std::env::current_exe().unwrap();
    let o = syncspy(
        &d,
        &[
            "run",
            "--report",
            report.to_str().unwrap(),
            "--",
            me.to_str().unwrap(),
            "--exact",
            "helper_writes_a_segment",
            "--test-threads=1",
        ],
    )
    .env(HELPER_ENV, "parent")
    .env(STOP_ENV, &stop)
    .output()
    .unwrap();
    std::fs::write(&stop, b"").unwrap();
    let err = text(&o.stderr);
    assert_eq!(code(&o), 0, "{err}\n{}", text(&o.stdout));
    let v: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let procs = v["processes"].as_array().unwrap();
    let by_role = |role: &str| {
        procs
            .iter()
            .find(|p| p["cmdline"] == format!("helper {role}"))
            .unwrap_or_else(|| panic!("no {role} in {v:#}"))
    };
    assert_eq!(procs.len(), 3, "{v:#}");

    let parent = by_role("parent");
    assert_eq!(parent["state"], "exited");
    assert_eq!(parent["exit_status"], 0);
    let ss = &parent["kinds"]["stream_sync"];
    assert_eq!(ss["count"], 10);
    assert_eq!(ss["total_ns"], 55_000_000);
    assert_eq!(ss["max_ns"], 10_000_000);
    assert_eq!(ss["recorded_count"], 10);
    let p50 = ss["p50_ns"].as_u64().unwrap();
    assert!(p50.abs_diff(5_000_000) <= 5_000, "p50 {p50}");
    assert_eq!(parent["stall_ns"], 55_000_000);
    assert_eq!(parent["non_stall_calls"]["cudaMemcpyAsync"]["bytes"], 4096);
    assert_eq!(parent["lost_records"], 0);
    assert_eq!(parent["sites"][0]["count"], 10);

    let child = by_role("child");
    assert_eq!(child["state"], "exited");
    assert_eq!(child["kinds"]["memcpy_sync"]["count"], 5);
    assert_eq!(child["kinds"]["memcpy_sync"]["bytes"], 5000);

    let lingering = by_role("lingering");
    assert_eq!(lingering["state"], "running");
    assert_eq!(lingering["kinds"]["device_sync"]["count"], 1);
    let stat = PathBuf::from(format!("/proc/{}/stat", lingering["pid"]));
    // Running until its stat is gone or says zombie (reaped by init some time later).
    let alive = || {
        std::fs::read_to_string(&stat)
            .ok()
            .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().to_string()))
            .is_some_and(|r| !r.starts_with('Z'))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive() {
        assert!(
            Instant::now() < deadline,
            "the lingering helper did not stop"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    // The bad file is a warning, in the report and on stderr.
    let warnings = v["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].as_str().unwrap().contains("syncspy-2-2"));
    assert!(err.contains("syncspy-2-2"), "{err}");
    assert!(err.contains("pid "), "{err}");

    // Segments of ended processes are gone; the running one's and the other session's stay.
    let left: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| syncspy_abi::parse_segment_name(n).is_some())
        .collect();
    let lingering_seg = format!("syncspy-{}-{}", lingering["pid"], lingering["start_ticks"]);
    let mut want = vec![
        "syncspy-1-1".to_string(),
        "syncspy-2-2".to_string(),
        lingering_seg,
    ];
    want.sort();
    let mut left = left;
    left.sort();
    assert_eq!(left, want);
}

#[test]
fn keep_segments_keeps_them() {
    let d = TempDir::new("keep");
    let stop = d.path().join("stop");
    std::fs::write(&stop, b"").unwrap();
    let me = std::env::current_exe().unwrap();
    let o = syncspy(
        &d,
        &[
            "run",
            "--keep-segments",
            "--",
            me.to_str().unwrap(),
            "--exact",
            "helper_writes_a_segment",
            "--test-threads=1",
        ],
    )
    .env(HELPER_ENV, "child")
    .output()
    .unwrap();
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let n = std::fs::read_dir(d.path())
        .unwrap()
        .filter(|e| {
            syncspy_abi::parse_segment_name(&e.as_ref().unwrap().file_name().to_string_lossy())
                .is_some()
        })
        .count();
    assert_eq!(n, 1);
    assert!(text(&o.stderr).contains("memcpy_sync"));
    // Marked as kept: the next run, reclaiming with no linger and a cap of 0, leaves it.
    let o = syncspy(&d, &["run", "--", "true"])
        .env("SYNCSPY_LINGER_MS", "0")
        .env("SYNCSPY_DIR_CAP_MB", "0")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let names: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names
            .iter()
            .filter(|n| syncspy_abi::parse_segment_name(n).is_some())
            .count(),
        1,
        "{names:?}"
    );
    assert!(names.iter().any(|n| n.ends_with(".keep")), "{names:?}");
}
