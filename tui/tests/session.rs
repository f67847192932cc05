//! `syncspy-top --session ID`: the local source follows only the segments of that session.
//! Two segments of different sessions are written with the ABI crate in a private folder.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use syncspy_abi::{SegmentParams, SegmentWriter};
use syncspy_tui::local::LocalSource;
use syncspy_tui::Source;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("syncspy-top-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

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
