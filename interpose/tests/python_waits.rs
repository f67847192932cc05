//! Stalls on a thread with no Python frames, blamed on the Python line that waits for them
//! (issue 26), end to end without a GPU: tests/python/waits.py starts a C worker thread of
//! pycaller.c that calls the simulated runtime's `cudaStreamSynchronize` while a Python thread
//! waits for it on a condition inside a ctypes call (which releases the GIL), as JAX's
//! `block_until_ready` waits on a host future while XLA's threads sync. The segment must give
//! each stall the waiting line as a separate "waited for by" stack (`SegmentReader::waited_by`),
//! never as the site's own frames: the main thread at two lines, a non-main thread while the
//! main thread runs Python, and no line at all while the only other Python thread (the main
//! one) runs Python and waits for nothing.
//!
//! Runs under `python3` and every CPython 3.10+ that pyenv installed (and
//! `SYNCSPY_TEST_PYTHONS`): `syncspy_test_support::pycaller::interpreters`. Needs the workspace
//! built (libsyncspy.so, libsimcudart.so) and `cc`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use syncspy_abi::python::{PyWaiter, PythonState};
use syncspy_abi::SegmentReader;
use syncspy_test_support::{pycaller, TempDir};

mod common;

/// Per record: its own Python frame count and its waiter.
struct Run {
    events: Vec<(usize, Option<PyWaiter>)>,
    sites: Vec<u32>,
    reader: SegmentReader,
    _dir: TempDir,
}

fn run(python: &str) -> Run {
    run_script(python, "waits.py", &[])
}

fn run_script(python: &str, script: &str, args: &[&str]) -> Run {
    let common::Recorded {
        reader,
        records,
        dir,
    } = common::record_script(python, script, args, "waits");
    let events = records
        .iter()
        .map(|r| (reader.python_frames(r.site).len(), reader.waited_by(r.site)))
        .collect();
    Run {
        events,
        sites: records.iter().map(|r| r.site).collect(),
        reader,
        _dir: dir,
    }
}

fn check(python: &str) {
    let r = run(python);
    let m = pycaller::markers_of("waits.py", "# W:");
    let script = pycaller::fixture("waits.py");
    let status = r.reader.python_status();
    assert_eq!(status.state, PythonState::Supported, "{python}: {status}");
    assert_eq!(
        r.events.len(),
        3 + 2 + 4 + 2 + 1,
        "{python}: {:?}",
        r.events
    );
    // No stall happened on a thread with Python frames: no site has frames of its own.
    assert!(
        r.events.iter().all(|e| e.0 == 0),
        "{python}: {:?}",
        r.events
    );
    // (function, line, main) of the waiting thread's innermost frame in the script, with the
    // lines of the script's frames under it.
    let waiting = |e: &(usize, Option<PyWaiter>)| {
        let w = e.1.as_ref()?;
        let lines: Vec<(String, u32)> = w
            .stack
            .frames
            .iter()
            .filter(|f| Path::new(&f.file) == script)
            .map(|f| (f.function.clone(), f.line))
            .collect();
        Some((lines, w.main))
    };
    let count = |want: &[(&str, &str)], main: bool| {
        let want: Vec<(String, u32)> = want.iter().map(|(f, l)| (f.to_string(), m[*l])).collect();
        r.events
            .iter()
            .filter(|e| waiting(e) == Some((want.clone(), main)))
            .count()
    };
    let at_a = [
        ("step", "wait_a"),
        ("main", "main_step"),
        ("<module>", "module"),
    ];
    let at_b = [
        ("fetch", "wait_b"),
        ("main", "main_fetch"),
        ("<module>", "module"),
    ];
    assert_eq!(count(&at_a, true), 3, "{python}: {:?}", r.events);
    assert_eq!(count(&at_b, true), 2, "{python}: {:?}", r.events);
    // The worker thread's stack: the waiting line first, then threading's frames.
    let thread: Vec<_> = r
        .events
        .iter()
        .filter(|e| e.1.as_ref().is_some_and(|w| !w.main))
        .collect();
    assert_eq!(thread.len(), 2, "{python}: {:?}", r.events);
    for e in &thread {
        let (lines, _) = waiting(e).unwrap();
        assert_eq!(lines, vec![("in_thread".to_string(), m["thread_wait"])]);
        assert!(e.1.as_ref().unwrap().stack.frames[1]
            .file
            .ends_with("threading.py"));
    }
    // 63 frames deep (61 of `deep`, `main`, `<module>`), read from another thread: the 16
    // innermost, the mark of the 32 left out, the 15 outermost.
    let deep: Vec<_> = r
        .events
        .iter()
        .filter_map(|e| e.1.as_ref())
        .filter(|w| w.stack.frames.len() == 32)
        .collect();
    assert_eq!(deep.len(), 1, "{python}: {:?}", r.events);
    let f = &deep[0].stack.frames;
    assert!(deep[0].main && !deep[0].stack.truncated, "{python}");
    assert_eq!(
        (f[0].function.as_str(), f[0].line),
        ("deep", m["deep_wait"])
    );
    assert!(f[1..16]
        .iter()
        .all(|x| x.function == "deep" && x.line == m["deep_rec"]));
    assert_eq!(f[16].skipped, 32, "{python}: {f:?}");
    assert!(f[17..30]
        .iter()
        .all(|x| x.function == "deep" && x.line == m["deep_rec"]));
    assert_eq!(
        (f[30].function.as_str(), f[30].line),
        ("main", m["main_deep"])
    );
    assert_eq!(
        (f[31].function.as_str(), f[31].line),
        ("<module>", m["module"])
    );
    // The main thread ran Python during busy()'s 4 stalls: no waiting line.
    assert_eq!(
        r.events.iter().filter(|e| e.1.is_none()).count(),
        4,
        "{python}: {:?}",
        r.events
    );
    // Two waiting lines over one native stack are two sites; each keeps that native stack.
    let sites_at = |line: &str| -> Vec<u32> {
        r.sites
            .iter()
            .zip(&r.events)
            .filter(|(_, e)| {
                waiting(e).is_some_and(|(l, _)| l.first().map(|f| f.1) == Some(m[line]))
            })
            .map(|(s, _)| *s)
            .collect()
    };
    let (a, b) = (sites_at("wait_a"), sites_at("wait_b"));
    assert!(
        a.iter().all(|x| !b.contains(x)),
        "{python}: two lines share a site"
    );
    assert!(
        a.iter()
            .any(|x| b.iter().any(|y| r.reader.site(*x) == r.reader.site(*y))),
        "{python}: the two waiting lines' stalls have no native stack in common"
    );
    assert_eq!(status.rejected, 0, "{python}");
    assert_eq!(
        status.stacks, 0,
        "{python}: no stall had Python frames of its own"
    );
}

/// Frames that change under the reader (waits_churn.py): a thread recursing to random depths
/// and releasing the GIL at the bottom while a C worker syncs 3000 times. No crash, every
/// stall recorded, and every waiting stack kept is made of the script's frames, `threading`'s
/// and `time.sleep`'s caller: torn reads are dropped, not recorded as garbage.
#[test]
fn a_waiting_thread_whose_frames_churn_is_read_safely() {
    for python in pycaller::interpreters() {
        let r = run_script(&python, "waits_churn.py", &["3000"]);
        assert_eq!(r.events.len(), 3000, "{python}");
        let script = pycaller::fixture("waits_churn.py");
        // (The main thread, running Python, is off the GIL too at moments, when the other
        // thread takes it: it may be named then, at its spinning line.)
        let mut kept = 0;
        for w in r.events.iter().filter_map(|e| e.1.as_ref()) {
            kept += 1;
            for f in w.stack.frames.iter().filter(|f| f.skipped == 0) {
                assert!(
                    Path::new(&f.file) == script || f.file.ends_with("threading.py"),
                    "{python}: a frame of neither the script nor threading: {f:?}"
                );
                assert!(f.line > 0, "{python}: {f:?}");
            }
        }
        eprintln!("{python}: {kept} of 3000 stalls got a waiting stack");
    }
}

#[test]
fn stalls_on_a_native_thread_name_the_python_line_that_waits_for_them() {
    for python in pycaller::interpreters() {
        check(&python);
    }
}
