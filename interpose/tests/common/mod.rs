//! What the Python frame tests share: the library under test and one script run under it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use syncspy_abi::{Cursor, Record, SegmentReader};
use syncspy_test_support::{artifact, pycaller, target_dir, Running, TempDir};

/// This crate's libsyncspy.so: `cargo test` rebuilds it under deps/ without copying it up to
/// the target folder (`cargo build` does), so the newer of the two is the current one.
pub fn preload_library() -> PathBuf {
    let up = target_dir().join("libsyncspy.so");
    let deps = target_dir().join("deps/libsyncspy.so");
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (mtime(&up), mtime(&deps)) {
        (Some(a), Some(b)) if b > a => deps,
        (None, Some(_)) => deps,
        _ => artifact("libsyncspy.so"),
    }
}

/// One script's run under the library: its segment and every record in it.
pub struct Recorded {
    pub reader: SegmentReader,
    pub records: Vec<Record>,
    pub dir: TempDir,
}

/// Runs `python <fixture script> <the C caller library> args...` under the library, with a
/// segment folder of its own; it must succeed within 60 s and leave one segment.
pub fn record_script(python: &str, script: &str, args: &[&str], tag: &str) -> Recorded {
    let dir = TempDir::new(tag);
    let lib = pycaller::build(dir.path(), &artifact("libsimcudart.so"));
    let segs = dir.path().join("segments");
    std::fs::create_dir_all(&segs).unwrap();
    let child = Command::new(python)
        .arg(pycaller::fixture(script))
        .arg(&lib)
        .args(args)
        .env("LD_PRELOAD", preload_library())
        .env("SYNCSPY_DIR", &segs)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {python} ({e}): this test needs CPython"));
    let mut child = Running(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "{python} {script} hung");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(
        status.success(),
        "{python} {script} failed: {status}: {err}"
    );
    let found: Vec<_> = std::fs::read_dir(&segs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("syncspy-"))
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one instrumented process: {found:?} ({err})"
    );
    let reader = SegmentReader::open(&found[0]).unwrap();
    let mut records = Vec::new();
    reader.poll(&mut Cursor::from_start(), usize::MAX, 0, |r| {
        records.push(r.unwrap())
    });
    Recorded {
        reader,
        records,
        dir,
    }
}
