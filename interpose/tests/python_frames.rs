//! End to end, without a GPU: a Python script (tests/python/frames.py) reaches the simulated
//! CUDA runtime through a C library it loads with ctypes (tests/python/pycaller.c), under the
//! preloaded libsyncspy.so; the segment must name the exact file, line and function of every
//! sync, innermost first: two lines of one loop, nested calls, a generator, a method, a
//! `threading.Thread`, and none for a C thread that never ran Python.
//!
//! Runs `python3` from PATH (it must exist: the test fails, not skips, without it), then every
//! CPython 3.10+ that pyenv installed and every interpreter listed in `SYNCSPY_TEST_PYTHONS`
//! (colon-separated paths): `pycaller::interpreters`. Needs the workspace built (`cargo build --workspace`: libsyncspy.so and
//! libsimcudart.so) and a C compiler (`cc`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use syncspy_abi::python::{PyFrameInfo, PythonState};
use syncspy_abi::SegmentReader;
use syncspy_test_support::{pycaller, TempDir};

mod common;

fn fixture(name: &str) -> PathBuf {
    pycaller::fixture(name)
}

struct Run {
    version: (u32, u32),
    /// Per record: its site and that site's Python frames.
    events: Vec<(u32, Vec<PyFrameInfo>)>,
    reader: SegmentReader,
    _dir: TempDir,
}

fn run(python: &str) -> Run {
    let probe = Command::new(python)
        .args([
            "-c",
            "import sys; print(sys.version_info[0], sys.version_info[1])",
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python} ({e}): this test needs CPython"));
    assert!(probe.status.success(), "{python} failed to start");
    let v = String::from_utf8(probe.stdout).unwrap();
    let mut v = v.split_whitespace().map(|x| x.parse::<u32>().unwrap());
    let version = (v.next().unwrap(), v.next().unwrap());

    let common::Recorded {
        reader,
        records,
        dir,
    } = common::record_script(python, "frames.py", &[], "frames");
    let events = records
        .iter()
        .map(|r| (r.site, reader.python_frames(r.site)))
        .collect();
    Run {
        version,
        events,
        reader,
        _dir: dir,
    }
}

/// (function, line) of each frame, innermost first, with the file checked to be frames.py.
fn lines(frames: &[PyFrameInfo]) -> Vec<(String, u32)> {
    let script = fixture("frames.py");
    frames
        .iter()
        .filter(|f| Path::new(&f.file) == script)
        .map(|f| (f.function.clone(), f.line))
        .collect()
}

fn check(python: &str) {
    let r = run(python);
    let m = pycaller::markers();
    let at = |name: &str| m[name];
    let status = r.reader.python_status();
    assert_eq!(status.state, PythonState::Supported, "{python}: {status}");
    let v = status.version.unwrap();
    assert_eq!((u32::from(v.major), u32::from(v.minor)), r.version);
    // Qualified names from 3.11; plain names before.
    let q = |qual: &str| {
        if r.version >= (3, 11) {
            qual.to_string()
        } else {
            qual.rsplit('.').next().unwrap().to_string()
        }
    };
    let f = |name: &str, line: &str| (name.to_string(), at(line));

    // 6 in the loop, 1 nested, 2 in the generator, 1 in the thread, 1 method, 2 in C.
    assert_eq!(r.events.len(), 13, "{python}: {:?}", r.events);
    let top = |e: &(u32, Vec<PyFrameInfo>)| lines(&e.1).first().cloned();
    let with_top = |want: (String, u32)| -> Vec<&(u32, Vec<PyFrameInfo>)> {
        r.events
            .iter()
            .filter(|e| top(e) == Some(want.clone()))
            .collect()
    };

    // Two lines of one loop: two sites, over one native stack.
    let a = with_top(f("loop", "loop_a"));
    let b = with_top(f("loop", "loop_b"));
    assert_eq!((a.len(), b.len()), (3, 3), "{python}: {:?}", r.events);
    // (The first runs of a line may take another native path than later ones, before the
    // interpreter specializes the call, so one line may have more than one site.)
    assert!(
        a.iter().all(|x| b.iter().all(|y| x.0 != y.0)),
        "{python}: two lines share a site"
    );
    assert!(
        a.iter()
            .any(|x| b.iter().any(|y| r.reader.site(x.0) == r.reader.site(y.0))),
        "{python}: no two events of the loop's lines have the same native stack"
    );
    assert!(!r.reader.site(a[0].0).unwrap().is_empty());
    assert_eq!(
        lines(&a[0].1),
        vec![
            f("loop", "loop_a"),
            f("main", "main_loop"),
            f("<module>", "module")
        ]
    );
    // Every frame of the script is in its file with a line; the first frame names it.
    assert!(a[0]
        .1
        .iter()
        .all(|fr| fr.line > 0 && !fr.function.is_empty()));

    let nested = with_top(f("inner", "inner"));
    assert_eq!(nested.len(), 1, "{python}");
    assert_eq!(
        lines(&nested[0].1),
        vec![
            f("inner", "inner"),
            f("middle", "middle"),
            f("outer", "outer"),
            f("main", "main_outer"),
            f("<module>", "module"),
        ]
    );

    let gen = with_top(f("gen", "gen"));
    assert_eq!(gen.len(), 2, "{python}");
    assert_eq!(gen[0].1, gen[1].1);
    assert_eq!(
        lines(&gen[0].1),
        vec![
            f("gen", "gen"),
            f("consume", "consume"),
            f("main", "main_consume"),
            f("<module>", "module"),
        ]
    );

    let method = with_top((q("Model.step"), at("method")));
    assert_eq!(method.len(), 1, "{python}: {:?}", r.events);
    assert_eq!(lines(&method[0].1)[1], f("main", "main_method"));

    // A thread started from Python: its own frames, then threading's.
    let worker = with_top(f("worker", "worker"));
    assert_eq!(worker.len(), 1, "{python}");
    let w = &worker[0].1;
    assert_eq!(lines(w), vec![f("worker", "worker")]);
    assert!(
        w[1].file.ends_with("threading.py") && w[1].function == q("Thread.run"),
        "{python}: {w:?}"
    );

    // A C thread that never ran Python: a native site, no Python frames of its own; the main
    // thread waited for it (blocked in pthread_join inside the ctypes call), and says where,
    // apart (issue 26).
    let native: Vec<_> = r.events.iter().filter(|e| e.1.is_empty()).collect();
    assert_eq!(native.len(), 2, "{python}: {:?}", r.events);
    assert!(native.iter().all(|e| r.reader.site(e.0).is_some()));
    for e in &native {
        let w = r.reader.waited_by(e.0).expect("the main thread waited");
        assert!(w.main, "{python}");
        assert_eq!(
            lines(&w.stack.frames)[0],
            f("main", "main_cthread"),
            "{python}"
        );
    }
    // Sites with frames of their own have no waiter.
    assert!(r
        .events
        .iter()
        .filter(|e| !e.1.is_empty())
        .all(|e| r.reader.waited_by(e.0).is_none()));

    assert_eq!(status.rejected, 0, "{python}");
    assert_eq!(status.stacks, 11, "{python}");
}

#[test]
fn python_frames_name_each_sync_line_on_every_interpreter() {
    for python in pycaller::interpreters() {
        check(&python);
    }
}
