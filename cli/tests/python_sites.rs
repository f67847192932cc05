//! Python call sites end to end, without a GPU: `syncspy run --sim` on a Python script that
//! reaches the simulated runtime through a C library it loads with ctypes (as torch reaches
//! the real one: through a library's dynamic symbol table, without the GIL). The report, the
//! summary and a budget must name the script's own lines.
//!
//! The script and the C library are the preload library's fixtures
//! (interpose/tests/python/frames.py, pycaller.c). Needs `python3` on PATH (the test fails
//! without it) and a C compiler.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod common;
use common::{artifact, run_sim, TempDir, SYNCSPY};

use syncspy_test_support::pycaller::{self, fixture};

fn build_caller(dir: &Path) -> PathBuf {
    pycaller::build(dir, &artifact("libsimcudart.so"))
}

fn syncspy(dir: &TempDir, args: &[&str], lib: &Path) -> std::process::Output {
    Command::new(SYNCSPY)
        .args(args)
        .arg("--")
        .arg("python3")
        .arg(fixture("frames.py"))
        .arg(lib)
        .env("SYNCSPY_DIR", dir.path())
        .env("SIMCUDA_TIME_SCALE", "1")
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .output()
        .expect("start syncspy")
}

#[test]
fn report_summary_and_budget_name_the_scripts_lines() {
    let d = TempDir::new("py-sites");
    let lib = build_caller(d.path());
    let m = pycaller::markers();
    // The interpreter names the file as it was given on the command line.
    let script = fixture("frames.py");
    let script = script.to_str().unwrap();
    let report = d.path().join("r.json");
    let o = syncspy(
        &d,
        &["run", "--sim", "--report", report.to_str().unwrap()],
        &lib,
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");

    let r: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let p = &r["processes"][0];
    assert_eq!(p["python"]["state"], "supported", "{}", p["python"]);
    let sites = p["sites"].as_array().unwrap();
    let by_location: BTreeMap<String, &Value> = sites
        .iter()
        .filter_map(|s| Some((s["location"].as_str()?.to_string(), s)))
        .collect();
    let loc = |name: &str, function: &str| format!("{script}:{} in {function}", m[name]);
    // Two lines of one loop are two sites, 3 syncs each, whatever native paths they took.
    for line in ["loop_a", "loop_b"] {
        let s = by_location
            .get(&loc(line, "loop"))
            .unwrap_or_else(|| panic!("no site at {line}: {:?}", by_location.keys()));
        assert_eq!(s["count"], 3, "{s}");
        // A sync inside a C library names no pattern syncspy is certain of: no advice.
        assert!(s["advice"].is_null(), "{s}");
        assert_eq!(s["frames"][0], loc(line, "loop"));
        let py = s["python"].as_array().unwrap();
        assert_eq!(py[0]["line"], m[line]);
        assert_eq!(py[0]["function"], "loop");
        assert_eq!(py[1]["line"], m["main_loop"]);
        assert_eq!(py[1]["function"], "main");
        assert_eq!(py[2]["function"], "<module>");
    }
    // The innermost of nested calls, a generator, a method, a Python thread.
    assert_eq!(
        by_location[&loc("inner", "inner")]["python"][2]["line"],
        m["outer"]
    );
    assert_eq!(by_location[&loc("gen", "gen")]["count"], 2);
    assert!(by_location.contains_key(&loc("method", "Model.step")));
    assert!(by_location.contains_key(&loc("worker", "worker")));
    // The C thread has no Python frames: its site is native.
    assert!(
        sites
            .iter()
            .any(|s| s["python"].is_null() && s["count"].as_u64() == Some(2)),
        "{sites:?}"
    );

    // The summary names the lines too.
    assert!(
        stderr.contains(&format!("at {}", loc("loop_a", "loop"))),
        "{stderr}"
    );

    // A budget names a Python function: the nested call's 1 sync is over a limit of 0; the
    // loop's line is allowed.
    let budget = d.file(
        "b.toml",
        "[[rule]]\nname = \"no sync in inner\"\nkind = \"stream_sync\"\nsite = \"frames.py:inner\"\nmax_count = 0\n\n\
         [[rule]]\nname = \"only the loop\"\nkind = \"stream_sync\"\nallow_sites = [\"frames.py:loop\", \"frames.py:gen\", \"frames.py:worker\", \"frames.py:Model.step\", \"frames.py:inner\", \"pc_c_thread\", \"c_thread\"]\nmax_count = 0\n",
    );
    let o = syncspy(
        &d,
        &["check", "--sim", "--budget", budget.to_str().unwrap()],
        &lib,
    );
    let out = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("no sync in inner"), "{out}");
    assert!(out.contains(&loc("inner", "inner")), "{out}");
}

/// A stack deeper than the 32 frames a site keeps (a `torch.compile` loop's are 79): the
/// innermost frames, a mark of those left out, and the outermost ones, where the user's line
/// is. Here the deep part is a library's (a module in a `site-packages` folder recursing 60
/// deep before it syncs through ctypes), so the report's location must be the script's own
/// line of the call, which the innermost 32 frames alone do not reach.
#[test]
fn deep_stacks_keep_both_ends_and_the_location_is_the_users_outer_line() {
    // On every interpreter: python3 and each CPython 3.10+ pyenv has.
    for python in pycaller::interpreters() {
        deep_stack_on(&python);
    }
}

fn deep_stack_on(python: &str) {
    let d = TempDir::new("py-deep");
    let lib = build_caller(d.path());
    let pkgs = d.path().join("site-packages");
    std::fs::create_dir_all(&pkgs).unwrap();
    std::fs::write(
        pkgs.join("deeplib.py"),
        "def down(lib, n):\n    if n == 0:\n        return lib.pc_sync()\n    return down(lib, n - 1)\n",
    )
    .unwrap();
    let script = d.file(
        "deep.py",
        "import ctypes\nimport sys\n\nsys.path.insert(0, sys.argv[2])\nimport deeplib\n\n\
         lib = ctypes.CDLL(sys.argv[1])\n\n\ndef main():\n    for _ in range(2):\n        \
         deeplib.down(lib, 60)\n\n\nmain()\n",
    );
    let (call_line, module_line) = (12, 15);
    let report = d.path().join("r.json");
    let o = run_sim(
        &d,
        &["--report", report.to_str().unwrap()],
        &[
            python,
            script.to_str().unwrap(),
            lib.to_str().unwrap(),
            pkgs.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{python}: {stderr}");
    let r: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let p = &r["processes"][0];
    assert_eq!(
        p["python"]["state"], "supported",
        "{python}: {}",
        p["python"]
    );
    let script = script.to_str().unwrap();
    let site = p["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "stream_sync" && s["count"] == 2)
        .unwrap_or_else(|| panic!("no site of the two syncs: {}", p["sites"]));
    assert_eq!(
        site["location"],
        format!("{script}:{call_line} in main"),
        "{site}"
    );
    // 61 frames of `down`, `main`, `<module>`: the 16 innermost, the mark of the 32 left
    // out, then the 15 outermost (13 of `down`, `main`, `<module>`).
    let py = site["python"].as_array().unwrap();
    assert_eq!(py.len(), 32, "{site}");
    assert!(py[..16].iter().all(|f| f["function"] == "down"), "{site}");
    assert_eq!(py[0]["line"], 3);
    assert_eq!(py[16]["skipped"], 32, "{site}");
    assert!(py[17..30].iter().all(|f| f["function"] == "down"), "{site}");
    assert_eq!(py[30]["function"], "main");
    assert_eq!(py[30]["line"], call_line);
    assert_eq!(py[31]["function"], "<module>");
    assert_eq!(py[31]["line"], module_line);
    // The summary shows the user's line.
    assert!(
        stderr.contains(&format!("at {script}:{call_line} in main")),
        "{stderr}"
    );
}

/// Stalls on a C worker thread while a Python thread waits for it (issue 26): the report gives
/// each site the waiting line as `waited_by`, apart from the site's own location and frames
/// (the worker's, native), and the summary says "waited for by waits.py:N".
#[test]
fn the_report_names_the_line_that_waited_for_a_native_threads_stalls() {
    let d = TempDir::new("py-waits");
    let lib = build_caller(d.path());
    let m = pycaller::markers_of("waits.py", "# W:");
    let report = d.path().join("r.json");
    // Its segment kept for the monitor, below.
    let o = run_sim(
        &d,
        &["--keep-segments", "--report", report.to_str().unwrap()],
        &[
            "python3",
            fixture("waits.py").to_str().unwrap(),
            lib.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let r: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let sites = r["processes"][0]["sites"].as_array().unwrap();
    let script = fixture("waits.py");
    let script = script.to_str().unwrap();
    // (waiting location, main thread) -> count
    let mut waited: BTreeMap<(String, bool), u64> = BTreeMap::new();
    let mut unwaited = 0;
    for s in sites {
        assert!(
            s["python"].is_null(),
            "a worker's site has no Python frames: {s}"
        );
        let loc = s["location"].as_str().unwrap_or("");
        assert!(
            !loc.contains("waits.py"),
            "the stall's own location stays native: {s}"
        );
        match s.get("waited_by") {
            Some(w) => {
                *waited
                    .entry((
                        w["location"].as_str().unwrap().to_string(),
                        w["main_thread"].as_bool().unwrap(),
                    ))
                    .or_default() += s["count"].as_u64().unwrap();
            }
            None => unwaited += s["count"].as_u64().unwrap(),
        }
    }
    let at = |name: &str, function: &str| format!("{script}:{} in {function}", m[name]);
    let want: BTreeMap<(String, bool), u64> = [
        ((at("wait_a", "step"), true), 3),
        ((at("wait_b", "fetch"), true), 2),
        ((at("thread_wait", "in_thread"), false), 2),
        ((at("deep_wait", "deep"), true), 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(waited, want, "{sites:?}");
    assert_eq!(unwaited, 4, "{sites:?}");
    for line in ["wait_a", "wait_b"] {
        assert!(
            stderr.contains(&format!("waited for by waits.py:{}", m[line])),
            "{stderr}"
        );
    }
    assert!(
        stderr.contains(&format!(
            "waited for by waits.py:{} (a non-main thread)",
            m["thread_wait"]
        )),
        "{stderr}"
    );

    // The monitor on the segments: a row per waiting line, as the report lists them (one
    // native stack, the worker's, waited for by several lines: several rows), each saying it.
    let top = Command::new(artifact("syncspy-top"))
        .arg("--dir")
        .arg(d.path())
        .args(["--print", "--after", "1", "--size", "200x60"])
        .env("SYNCSPY_DIR", d.path())
        .output()
        .unwrap();
    let screen = String::from_utf8_lossy(&top.stdout);
    assert!(top.status.success(), "{screen}");
    let mut shown: BTreeMap<String, u64> = BTreeMap::new();
    for l in screen.lines() {
        if let Some((_, w)) = l.split_once(", waited for by ") {
            let w = w.split(|c: char| c.is_whitespace() || c == '│').next();
            *shown.entry(w.unwrap().to_string()).or_default() += 1;
        }
    }
    let mut reported: BTreeMap<String, u64> = BTreeMap::new();
    for s in sites {
        if let Some(w) = s.get("waited_by") {
            // `/abs/waits.py:21 in main` as the summary shortens it: `waits.py:21`.
            let at = w["location"]
                .as_str()
                .unwrap()
                .split(" in ")
                .next()
                .unwrap();
            let short = at.rsplit('/').next().unwrap().to_string();
            *reported.entry(short).or_default() += 1;
        }
    }
    assert_eq!(
        shown, reported,
        "the monitor's rows and the report's\n{screen}"
    );
    for line in ["wait_a", "wait_b", "thread_wait"] {
        let w = format!("waits.py:{}", m[line]);
        assert!(shown.contains_key(&w), "{w}\n{screen}");
    }
}
