//! `syncspy-top --session ID`: the local source follows only the segments of that session.
//! Two segments of different sessions are written with the ABI crate in a private folder.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use syncspy_abi::{SegmentParams, SegmentWriter};
use syncspy_test_support::TempDir;
use syncspy_tui::local::LocalSource;
use syncspy_tui::Source;

fn segment(dir: &Path, pid: u32, session: u64, cmd: &str) -> SegmentWriter {
    let mut p = SegmentParams::new(pid, 1000 + u64::from(pid));
    p.session = session;
    p.cmdline = format!("{cmd}\0").into_bytes();
    SegmentWriter::create(dir, &p).unwrap()
}

fn shown(src: &mut LocalSource) -> Vec<(u32, String)> {
    let mut v: Vec<(u32, String)> = src
        .step()
        .processes
        .into_iter()
        .map(|p| (p.pid, p.command))
        .collect();
    v.sort();
    v
}

#[test]
fn only_the_segments_of_the_chosen_session_are_followed() {
    let d = TempDir::new("session");
    let _a = segment(d.path(), 4_000_001, 111, "mine");
    let _b = segment(d.path(), 4_000_002, 222, "theirs");

    let mut one = LocalSource::new(d.path().to_path_buf(), None, 10).with_session(Some(111));
    assert_eq!(shown(&mut one), vec![(4_000_001, "mine".to_string())]);
    // A segment of the session that appears later is picked up; others still are not.
    let _c = segment(d.path(), 4_000_003, 111, "mine-child");
    let _e = segment(d.path(), 4_000_004, 333, "other");
    assert_eq!(
        shown(&mut one),
        vec![
            (4_000_001, "mine".to_string()),
            (4_000_003, "mine-child".to_string())
        ]
    );

    let mut other = LocalSource::new(d.path().to_path_buf(), None, 10).with_session(Some(222));
    assert_eq!(shown(&mut other), vec![(4_000_002, "theirs".to_string())]);

    // Without --session every segment shows.
    let mut all = LocalSource::new(d.path().to_path_buf(), None, 10).with_session(None);
    assert_eq!(shown(&mut all).len(), 4);
}

/// `n` stream-sync records that end now (so they count in the "last N seconds" window).
fn stall(w: &SegmentWriter, n: u64, dur_ns: u64) {
    use syncspy_abi::{Api, Direction, Kind, Record};
    let now = syncspy_read::monotonic_ns();
    for i in 0..n {
        w.record(&Record {
            kind: Kind::StreamSync,
            api: Api::CudaStreamSynchronize,
            direction: Direction::None,
            flags: 0,
            device: 0,
            start_ns: now - dur_ns - i,
            duration_ns: dur_ns,
            bytes: 0,
            stream: 0,
            tid: 1,
            site: 0,
            result: 0,
            polls: 0,
        });
    }
}

/// (pid, stall count since start or reset, stall count in the recent window) of every
/// process shown. The first comes from the segment's header, the second from the monitor's
/// own per-process window: both must stay with their process.
fn counts(src: &mut LocalSource) -> Vec<(u32, u64, u64)> {
    let mut v: Vec<(u32, u64, u64)> = src
        .step()
        .processes
        .into_iter()
        .map(|p| {
            let recent = p
                .recent
                .as_ref()
                .map_or(0, |r| r.kinds.iter().map(|k| k.count).sum());
            (p.pid, p.all.kinds.iter().map(|k| k.count).sum(), recent)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn forgetting_one_process_keeps_the_others_numbers_and_pid_limits_what_is_followed() {
    let d = TempDir::new("forget");
    let a = segment(d.path(), 4_100_001, 1, "a");
    let b = segment(d.path(), 4_100_002, 1, "b");
    let c = segment(d.path(), 4_100_003, 1, "c");
    stall(&a, 3, 100);
    stall(&b, 5, 100);
    stall(&c, 7, 100);
    let mut src = LocalSource::new(d.path().to_path_buf(), None, 10);
    assert_eq!(
        counts(&mut src),
        vec![(4_100_001, 3, 3), (4_100_002, 5, 5), (4_100_003, 7, 7)]
    );

    src.forget(syncspy_tui::model::ProcessKey {
        pid: 4_100_002,
        start_ticks: 1000 + 4_100_002,
    });
    stall(&a, 1, 100);
    stall(&c, 2, 100);
    // The forgotten process is not opened again while its file exists; the others keep
    // their own numbers (the monitor's per-process state stays with its process).
    assert_eq!(counts(&mut src), vec![(4_100_001, 4, 4), (4_100_003, 9, 9)]);

    // After a reset only what came later counts.
    src.reset();
    stall(&c, 1, 100);
    assert_eq!(counts(&mut src), vec![(4_100_001, 0, 0), (4_100_003, 1, 1)]);

    let mut one = LocalSource::new(d.path().to_path_buf(), Some(4_100_003), 10);
    assert_eq!(counts(&mut one), vec![(4_100_003, 10, 10)]);
}

/// Whether this process maps a file at `path` (`/proc/self/maps`).
fn mapped(path: &Path) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let p = path.to_string_lossy();
    maps.lines().any(|l| l.contains(p.as_ref()))
}

#[test]
fn a_removed_ended_segment_is_unmapped_and_its_process_still_shown_until_dismissed() {
    let d = TempDir::new("retire");
    let ended = segment(d.path(), 4_000_003, 0, "done");
    let _running = segment(d.path(), 4_000_004, 0, "running");
    ended.mark_exited(3);
    let path = ended.path().to_path_buf();
    let mut src = LocalSource::new(d.path().to_path_buf(), None, 10);
    assert_eq!(shown(&mut src).len(), 2);
    assert_eq!(src.mapped(), 2);
    assert!(mapped(&path));

    // Removed (by `syncspy run` on its way out, the agent, a reclaimer): let go at once, and
    // still shown as it ended.
    std::fs::remove_file(&path).unwrap();
    drop(ended);
    let snap = src.step();
    assert_eq!(src.mapped(), 1, "only the running process stays mapped");
    assert!(!mapped(&path), "the removed segment is still mapped");
    let done = snap.processes.iter().find(|p| p.pid == 4_000_003).unwrap();
    assert!(done.state.ended(), "{:?}", done.state);
    assert_eq!(shown(&mut src).len(), 2, "shown until dismissed");

    // Dismissed (`d`): gone from the screen.
    src.forget(done.key());
    assert_eq!(shown(&mut src), vec![(4_000_004, "running".to_string())]);
}

/// Another local user who learnt the session cannot add a process to it: with `--session`,
/// a segment whose file belongs to another user, for a process of that user's, is not shown,
/// and the monitor says why. (Runs as root, as CI does: `nobody` runs a `sleep`, and the file
/// claiming that process is given to `nobody`, as that user could write it.)
#[test]
fn a_session_shows_only_the_monitors_own_users_segments() {
    let d = TempDir::new("session-owner");
    let mut sleeper = std::process::Command::new("runuser")
        .args(["-u", "nobody", "--", "sleep", "30"])
        .spawn()
        .expect("runuser (run the tests as root)");
    // runuser execs sleep in a child of its own: find the process that runs as nobody.
    let nobody_pid = (0..200)
        .find_map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            std::fs::read_to_string(format!("/proc/{}/task/{0}/children", sleeper.id()))
                .ok()
                .and_then(|c| c.split_whitespace().next().and_then(|p| p.parse().ok()))
                .or_else(|| {
                    let st =
                        std::fs::read_to_string(format!("/proc/{}/status", sleeper.id())).ok()?;
                    st.lines()
                        .any(|l| l.starts_with("Uid:") && l.contains("65534"))
                        .then_some(sleeper.id())
                })
        })
        .expect("nobody's sleep");
    let _mine = segment(d.path(), 4_100_001, 111, "mine");
    let theirs = segment(d.path(), nobody_pid, 111, "planted");
    std::os::unix::fs::chown(theirs.path(), Some(65534), Some(65534)).unwrap();
    let mut src = LocalSource::new(d.path().to_path_buf(), None, 10).with_session(Some(111));
    let snap = src.step();
    let pids: Vec<u32> = snap.processes.iter().map(|p| p.pid).collect();
    // Without --session the monitor shows every user's processes, as before.
    let mut all = LocalSource::new(d.path().to_path_buf(), None, 10).with_session(None);
    let every = all.step().processes.len();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_eq!(pids, [4_100_001], "{:?}", snap.problems);
    assert!(
        snap.problems
            .iter()
            .any(|p| p.contains("belongs to uid 65534") && p.contains("not shown")),
        "{:?}",
        snap.problems
    );
    assert_eq!(every, 2);
}
