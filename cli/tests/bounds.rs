//! Issue 25, items 6 and 7: one local user floods the segment folder with valid segments
//! (many live ones, many short-lived ones). The agent follows at most its cap of that user's
//! segments, counts the rest as dropped, and still counts root's job.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};

mod common;
use common::{
    artifact, cudacalls, eventually, metric, metrics, snapshot, Running, TempDir, SYNCSPY,
};

/// The flooding user (`nobody`).
const OTHER_USER: u32 = 65534;
/// The agent's cap of segments per user in this test.
const CAP: usize = 16;

fn root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("{test}: skipped: not root, so no other user can write segments");
    }
    root
}

/// `hostile-writer MODE DIR SECS N` as user nobody (setpriv execs, so the pid is the
/// writer's and killing it ends the flood).
fn flood(bin: &std::path::Path, mode: &str, dir: &std::path::Path, n: &str) -> Running {
    Running(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(bin)
            .arg(mode)
            .arg(dir)
            .args(["60", n])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// The flooding user's processes in a snapshot.
fn flooders(s: &serde_json::Value) -> usize {
    s["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["cmdline"]
                .as_str()
                .is_some_and(|c| c.starts_with("hostile-writer"))
        })
        .count()
}

#[test]
fn one_users_flood_stays_within_its_cap_and_roots_job_is_counted() {
    if !root_or_skip("one_users_flood_stays_within_its_cap_and_roots_job_is_counted") {
        return;
    }
    let d = TempDir::new("bounds-flood");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let seg = d.path().join("shm");
    std::fs::create_dir(&seg).unwrap();
    std::fs::set_permissions(&seg, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let lib = d.path().join("lib");
    std::fs::create_dir(&lib).unwrap();
    std::os::unix::fs::symlink(artifact("libsimcudart.so"), lib.join("libcudart.so.13")).unwrap();
    // The writer where nobody can run it (the build folder may not be theirs to enter).
    let writer = d.path().join("hostile-writer");
    std::fs::copy(artifact("hostile-writer"), &writer).unwrap();
    std::fs::set_permissions(&writer, std::fs::Permissions::from_mode(0o755)).unwrap();

    let token_file = d.path().join("agent.token");
    let mut agent = Running(
        Command::new(SYNCSPY)
            .args(["agent", "--listen", "127.0.0.1:0", "--interval-ms", "50"])
            .arg("--token-file")
            .arg(&token_file)
            .env("SYNCSPY_DIR", &seg)
            .env("SYNCSPY_READER_SEGMENTS_PER_USER", CAP.to_string())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(agent.0.stderr.take().unwrap()).lines();
    let addr = eventually("the agent's address", || {
        let l = lines.next()?.ok()?;
        let rest = l.split("serving http://").nth(1)?;
        Some(rest.split('/').next()?.to_string())
    });
    let (tx, log) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let token = syncspy_read::snapshot::read_token(&token_file).unwrap();

    // 120 live segments and 100 short-lived ones a second, all of user nobody.
    let _live = flood(&writer, "live", &seg, "120");
    let _tiny = flood(&writer, "tiny", &seg, "100");
    let theirs = || {
        std::fs::read_dir(&seg)
            .unwrap()
            .filter_map(|e| e.ok()?.metadata().ok())
            .filter(|m| m.uid() == OTHER_USER)
            .count()
    };
    eventually("the flood to fill the folder", || {
        (theirs() >= 3 * CAP).then_some(())
    });
    let dropped = r#"syncspy_reader_dropped_total{what="segment"}"#;
    eventually("segments of the flooding user to be dropped", || {
        metric(&metrics(&addr), dropped).filter(|n| *n > 0)
    });

    // Root's job, while the flood goes on.
    let mut prog = Running(
        Command::new(cudacalls())
            .args(["--iters", "5", "busy=s1:1000", "sync=s1", "sleep=100000"])
            .env("LD_PRELOAD", artifact("libsyncspy.so"))
            .env("LD_LIBRARY_PATH", &lib)
            .env("SYNCSPY_DIR", &seg)
            .env("SIMCUDA_TIME_SCALE", "1")
            .env_remove("SYNCSPY_SESSION")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut most = 0;
    while prog.0.try_wait().unwrap().is_none() {
        most = most.max(flooders(&snapshot(&addr, &token)));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let events = r#"syncspy_stall_events_total{program="cudacalls",kind="stream_sync"}"#;
    eventually("root's job to be counted", || {
        most = most.max(flooders(&snapshot(&addr, &token)));
        metric(&metrics(&addr), events).filter(|n| *n == 5)
    });
    assert!(
        most <= CAP,
        "the agent followed {most} segments of the flooding user, over its cap of {CAP}"
    );
    assert!(
        most > 0,
        "the flooding user's segments are followed up to the cap"
    );
    let m = metrics(&addr);
    assert!(metric(&m, dropped).unwrap() > 0, "{m}");
    // The agent says so in its log.
    let said = eventually("the agent's line about its budget", || {
        log.try_iter().find(|l| l.contains("over budget"))
    });
    assert!(
        said.contains("segments not followed") || said.contains("1 segment not followed"),
        "{said}"
    );
}
