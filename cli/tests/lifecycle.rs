//! The life of a segment (docs/architecture.md, "Segment lifecycle"): short `syncspy run`
//! jobs are never lost to a running agent, processes that cannot record say so, and ended
//! processes' segments are reclaimed without any reader.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};

mod common;
use common::{
    artifact, cudacalls, eventually, metric, metrics, run_sim, start_agent, Running, TempDir,
    SYNCSPY,
};

/// Names of the segment files in `dir` (not leases, registrations or temporaries).
fn segments(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| syncspy_abi::parse_segment_name(n).is_some())
        .collect();
    v.sort();
    v
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn ten_short_runs_in_a_row_are_all_counted_by_a_running_agent() {
    let d = TempDir::new("lifecycle-agent");
    // A slow interval: the agent must not depend on scanning between a job's start and
    // its end (inotify wakes it; the run hands its segments over).
    let (_agent, addr) = start_agent(
        d.path(),
        &d.path().join("agent.token"),
        &["--interval-ms", "2000", "--retain-secs", "0"],
    );

    let c = cudacalls();
    for i in 0..10 {
        let o = run_sim(&d, &[], &[&c, "--iters", "2", "busy=s1:200", "sync=s1"]);
        assert_eq!(o.status.code(), Some(0), "run {i}: {}", text(&o.stderr));
    }
    let forgotten = r#"syncspy_forgotten_processes_total{program="cudacalls"}"#;
    let events = r#"syncspy_stall_events_total{program="cudacalls",kind="stream_sync"}"#;
    // Every job's segment is read, forgotten (retain 0) and then removed by the agent.
    let m = eventually("ten jobs counted and their segments gone", || {
        let m = metrics(&addr);
        (metric(&m, forgotten) >= Some(10) && segments(d.path()).is_empty()).then_some(m)
    });
    assert_eq!(metric(&m, forgotten), Some(10), "{m}");
    assert_eq!(metric(&m, events), Some(20), "{m}");
    let leases: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".lease-"))
        .collect();
    assert!(leases.is_empty(), "{leases:?}");
}

/// A folder whose path is so long that no file name fits under it (`ENAMETOOLONG`): it
/// exists and is writable, even to root, yet no segment can be created in it.
fn folder_with_no_room_for_names(d: &TempDir) -> std::path::PathBuf {
    let mut p = d.path().to_path_buf();
    while p.as_os_str().len() < 4000 {
        p.push("x".repeat(200));
    }
    let need = 4080 - p.as_os_str().len();
    p.push("y".repeat(need));
    std::fs::create_dir_all(&p).unwrap();
    p
}

#[test]
fn processes_that_cannot_record_say_so_and_the_run_exits_2() {
    let d = TempDir::new("lifecycle-full");
    let dir = folder_with_no_room_for_names(&d);
    let c = cudacalls();
    let o = Command::new(SYNCSPY)
        .args(["run", "--sim", "--"])
        .args(["sh", "-c"])
        .arg(format!(
            "{c} --iters 1 sync=s1 && {c} --iters 1 sync=s1 && echo both-ran"
        ))
        .env("SYNCSPY_DIR", &dir)
        .env("SIMCUDA_TIME_SCALE", "1")
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .output()
        .unwrap();
    let err = text(&o.stderr);
    // The command ran on, unchanged.
    assert!(text(&o.stdout).contains("both-ran"), "{err}");
    assert_eq!(o.status.code(), Some(2), "{err}");
    // One line from each process, naming the folder and the reason.
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("syncspy: not recording this process"))
        .collect();
    assert_eq!(lines.len(), 2, "{err}");
    for l in &lines {
        assert!(l.contains(dir.to_str().unwrap()), "{l}");
        assert!(l.contains("File name too long"), "{l}");
    }
    assert!(
        err.contains("2 processes could not record: ") && err.contains("File name too long"),
        "{err}"
    );
    assert!(
        !err.contains("never called"),
        "no guess when the reason is known: {err}"
    );
}

#[test]
fn a_preloaded_program_whose_segment_cannot_be_created_runs_on_and_says_why_once() {
    let d = TempDir::new("lifecycle-file");
    let lib = d.path().join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::os::unix::fs::symlink(artifact("libsimcudart.so"), lib.join("libcudart.so.13")).unwrap();
    // SYNCSPY_DIR names a regular file: nothing can be created "in" it.
    let not_a_dir = d.path().join("not-a-folder");
    std::fs::write(&not_a_dir, b"").unwrap();
    let plain = |preload: bool| {
        let mut cmd = Command::new(cudacalls());
        cmd.args(["--iters", "3", "busy=s1:100", "sync=s1"])
            .env("LD_LIBRARY_PATH", &lib)
            .env("SYNCSPY_DIR", &not_a_dir)
            .env_remove("SYNCSPY_SESSION")
            .env_remove("SYNCSPY_FAILED_DIR");
        if preload {
            cmd.env("LD_PRELOAD", artifact("libsyncspy.so"));
        }
        cmd.output().unwrap()
    };
    let (with, without) = (plain(true), plain(false));
    assert_eq!(with.status.code(), without.status.code());
    // The same calls, made the same number of times (pid and timings differ).
    let calls = |out: &[u8]| -> Vec<(String, u64)> {
        let v: serde_json::Value = serde_json::from_slice(out).unwrap();
        v["calls"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, c)| (k.clone(), c["count"].as_u64().unwrap()))
            .collect()
    };
    assert_eq!(calls(&with.stdout), calls(&without.stdout));
    assert_eq!(calls(&with.stdout).len(), 13);
    let err = text(&with.stderr);
    let ours: Vec<&str> = err.lines().filter(|l| l.starts_with("syncspy:")).collect();
    assert_eq!(ours.len(), 1, "{err}");
    assert!(ours[0].contains(not_a_dir.to_str().unwrap()), "{err}");
    assert!(ours[0].contains("Not a directory"), "{err}");
}

#[test]
fn a_killed_runs_segments_are_reclaimed_by_the_next_run() {
    let d = TempDir::new("lifecycle-killed");
    let marker = d.path().join("marker");
    let c = cudacalls();
    let mut run = Running(
        Command::new(SYNCSPY)
            .args(["run", "--sim", "--", "sh", "-c"])
            .arg(format!(
                "{c} --iters 1 sync=s1 >/dev/null; echo $$ > {m}.tmp; mv {m}.tmp {m}; exec sleep 60",
                m = marker.display()
            ))
            .env("SYNCSPY_DIR", d.path())
            .env_remove("SYNCSPY_LIB")
            .env_remove("SYNCSPY_SIM_LIB")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // cudacalls has exited (its segment says so) when the marker appears.
    let sleeper: i32 = eventually("the marker", || {
        std::fs::read_to_string(&marker).ok()?.trim().parse().ok()
    });
    let left = segments(d.path());
    assert_eq!(left.len(), 1, "{left:?}");
    run.0.kill().unwrap();
    run.0.wait().unwrap();
    // SAFETY: kill has no memory-safety preconditions; `sleeper` is the shell's pid that
    // exec'd sleep, a child of the killed run that this test started.
    unsafe { libc::kill(sleeper, libc::SIGKILL) };
    // The killed run left its segment (and its void registration and lease) behind.
    assert_eq!(segments(d.path()), left);

    // The next run, on its way out, reclaims it (no linger, to keep the test short).
    let o = Command::new(SYNCSPY)
        .args(["run", "--sim", "--", "true"])
        .env("SYNCSPY_DIR", d.path())
        .env("SYNCSPY_LINGER_MS", "0")
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(segments(d.path()).is_empty(), "{:?}", segments(d.path()));
    let rest: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "marker")
        .collect();
    assert!(
        rest.is_empty(),
        "void leases and registrations go too: {rest:?}"
    );
}

/// Bytes a file takes on disk (what fills a tmpfs), as the cap counts them.
fn on_disk(m: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    m.blocks() * 512
}

#[test]
fn many_preloaded_processes_with_no_reader_keep_the_folder_under_its_cap() {
    // 1000 preloaded processes, two at a time, each leaving its segment behind with nobody
    // to read it (a linger of ten minutes: only the cap removes segments).
    const PROCESSES: usize = 1000;
    let d = TempDir::new("lifecycle-cap");
    let lib = d.path().join("lib");
    let seg = d.path().join("seg");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::create_dir_all(&seg).unwrap();
    std::os::unix::fs::symlink(artifact("libsimcudart.so"), lib.join("libcudart.so.13")).unwrap();
    let cap_mb = 8;
    let biggest = std::sync::atomic::AtomicU64::new(0);
    let run = || {
        let o = Command::new(cudacalls())
            .args(["--iters", "1", "sync=s1"])
            .env("LD_PRELOAD", artifact("libsyncspy.so"))
            .env("LD_LIBRARY_PATH", &lib)
            .env("SYNCSPY_DIR", &seg)
            .env("SYNCSPY_RING", "4096")
            .env("SYNCSPY_DIR_CAP_MB", cap_mb.to_string())
            .env("SYNCSPY_GPU_IDLE", "off")
            .env_remove("SYNCSPY_SESSION")
            .env("SYNCSPY_LINGER_MS", "600000")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert!(!text(&o.stderr).contains("syncspy:"), "{}", text(&o.stderr));
        let sizes: Vec<u64> = std::fs::read_dir(&seg)
            .unwrap()
            .filter_map(|e| e.ok()?.metadata().ok())
            .map(|m| on_disk(&m))
            .collect();
        let big = biggest.fetch_max(
            sizes.iter().copied().max().unwrap_or(0),
            std::sync::atomic::Ordering::Relaxed,
        );
        // The cap is applied before each new segment is created: at most the cap plus the
        // segments of the two processes that may be starting at once.
        let total: u64 = sizes.iter().sum();
        assert!(
            total <= (cap_mb << 20) + 2 * big.max(sizes.iter().copied().max().unwrap_or(0)),
            "{total} bytes in the folder"
        );
    };
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..PROCESSES / 2 {
                    run();
                }
            });
        }
    });
    assert!(biggest.into_inner() > 0);
    // The folder holds more than one segment (the cap, not the linger, removed them), and
    // those of the dead processes kept take only the pages they used.
    let left = segments(&seg);
    assert!(left.len() > 1, "{left:?}");
    let full = std::fs::read_dir(&seg)
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| on_disk(m) >= m.len())
        .count();
    assert!(full < left.len(), "no segment was shrunk: {left:?}");
}

#[test]
fn a_burst_of_short_preloaded_jobs_under_a_folder_cap_is_all_counted_by_a_running_agent() {
    // 100 back-to-back jobs, each a few ms, with a folder cap that the next job's reclaim
    // enforces at once: before, it removed ended segments the agent had not opened yet (it
    // counted 25 to 99 of 100).
    const JOBS: u64 = 100;
    let d = TempDir::new("lifecycle-burst");
    let lib = d.path().join("lib");
    let seg = d.path().join("seg");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::create_dir_all(&seg).unwrap();
    std::os::unix::fs::symlink(artifact("libsimcudart.so"), lib.join("libcudart.so.13")).unwrap();
    let (_agent, addr) = start_agent(
        &seg,
        &d.path().join("agent.token"),
        &["--interval-ms", "1000", "--retain-secs", "0"],
    );
    for i in 0..JOBS {
        let o = Command::new(cudacalls())
            .args(["--iters", "1", "sync=s1"])
            .env("LD_PRELOAD", artifact("libsyncspy.so"))
            .env("LD_LIBRARY_PATH", &lib)
            .env("SYNCSPY_DIR", &seg)
            .env("SYNCSPY_RING", "4096")
            .env("SYNCSPY_DIR_CAP_MB", "1")
            .env("SYNCSPY_LINGER_MS", "0")
            .env("SYNCSPY_GPU_IDLE", "off")
            .env_remove("SYNCSPY_SESSION")
            .output()
            .unwrap();
        assert!(o.status.success(), "job {i}: {}", text(&o.stderr));
    }
    let events = r#"syncspy_stall_events_total{program="cudacalls",kind="stream_sync"}"#;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let m = loop {
        let m = metrics(&addr);
        let done = metric(&m, events) >= Some(JOBS) && segments(&seg).is_empty();
        if done || std::time::Instant::now() > deadline {
            break m;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(
        metric(&m, events),
        Some(JOBS),
        "segments left: {:?}\n{m}",
        segments(&seg)
    );
    assert!(segments(&seg).is_empty(), "{:?}", segments(&seg));
}

/// Issue 24: the segment folder moved away while a run reads it. The run says once that it
/// cannot read it (not at every poll, and not silently), keeps what it read before, and
/// ends with the command's status.
#[test]
fn a_segment_folder_that_goes_away_under_a_run_is_said_once() {
    let d = TempDir::new("lifecycle-scan-error");
    let seg = d.path().join("seg");
    std::fs::create_dir(&seg).unwrap();
    let report = d.path().join("r.json");
    let script = format!(
        "{} --iters 3 sync=s1 && sleep 0.5 && mv \"$SYNCSPY_DIR\" \"$SYNCSPY_DIR.moved\" && \
         sleep 0.5",
        cudacalls()
    );
    let o = Command::new(SYNCSPY)
        .args(["run", "--sim", "--report"])
        .arg(&report)
        .args(["--", "sh", "-c", &script])
        .env("SYNCSPY_DIR", &seg)
        .env("SIMCUDA_TIME_SCALE", "1")
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let said = format!("syncspy: warning: cannot read {}: ", seg.display());
    assert_eq!(err.matches(&said).count(), 1, "{err}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let calls: u64 = r["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["apis"]["cudaStreamSynchronize"]["count"].as_u64())
        .sum();
    assert_eq!(calls, 3, "{r:#}");
}
