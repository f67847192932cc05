//! Waits that a host function ends (`host_wait`, issue 26): a Python thread that queues host
//! functions with `cuLaunchHostFunc` and blocks, without the GIL, until one of them wakes it
//! (as JAX's `block_until_ready` and `device_get` wait) has each wait recorded at its line,
//! timed from when it began to wait. A host function that runs while the thread sleeps for
//! another reason (`time.sleep`), or that runs before the one that wakes it, records nothing.
//! Runs on the simulated driver, whose streams run host functions on their own thread, in
//! order. Needs `python3` on PATH.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;

mod common;
use common::{run_sim_env, TempDir};

/// The tests of this file run one at a time: a wait is told by a wake within 2 ms of its host
/// function (and a relayed one through a second Python thread), and two of these jobs at
/// once on a 2-core machine delayed such wakes past it (a relayed wait missed, once in CI).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Line 21 waits (4 times, 30 ms each, behind a 30 ms host function) for a host function that
/// wakes it itself; line 33 (3 times) for one that wakes another thread, which then wakes it
/// (as XLA's host functions hand their work to a thread of XLA's); line 38 sleeps while a host
/// function runs (2 times): not a wait for it. The sleep (300 ms) is long against the host
/// function's 10 ms: only a wake within 2 ms after a host function could be taken for its
/// wake, and a loaded machine delayed the simulated stream's 10 ms by 40 ms once when the
/// sleep was 50 ms.
const SCRIPT: &str = concat!(
    common::sim_preamble!(),
    "\
post = ctypes.cast(libc.sem_post, ctypes.c_void_p)
noop = ctypes.cast(libc.getpid, ctypes.c_void_p)
sem = ctypes.create_string_buffer(64)
assert libc.sem_init(sem, 0, 0) == 0
for _ in range(4):
    assert cu.cuLaunchHostFunc(s, usleep, 30000) == 0
    assert cu.cuLaunchHostFunc(s, post, ctypes.addressof(sem)) == 0
    libc.sem_wait(sem)
relayed = ctypes.create_string_buffer(64)
assert libc.sem_init(relayed, 0, 0) == 0
def relay():
    for _ in range(3):
        libc.sem_wait(sem)
        libc.sem_post(relayed)
t = threading.Thread(target=relay)
t.start()
for _ in range(3):
    assert cu.cuLaunchHostFunc(s, usleep, 30000) == 0
    assert cu.cuLaunchHostFunc(s, post, ctypes.addressof(sem)) == 0
    libc.sem_wait(relayed)
t.join()
for _ in range(2):
    assert cu.cuLaunchHostFunc(s, usleep, 10000) == 0
    assert cu.cuLaunchHostFunc(s, noop, None) == 0
    time.sleep(0.3)
"
);

/// Runs `text` under `syncspy run --sim` with `env`; the script's path, the report's first
/// process and syncspy's stderr.
fn run(d: &TempDir, text: &str, env: &[(&str, &str)]) -> (String, Value, String) {
    let script = d.file("hw.py", text);
    let script = script.to_str().unwrap();
    let report = d.path().join("r.json");
    let o = run_sim_env(
        d,
        &["--report", report.to_str().unwrap()],
        &["python3", script],
        env,
    );
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let r: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    (script.to_string(), r["processes"][0].clone(), stderr)
}

/// A folder with `waitlib.py`, one function that waits on a semaphore: the library function
/// two lines wait through.
fn waitlib(d: &TempDir) -> std::path::PathBuf {
    let lib = d.path().join("site-packages");
    std::fs::create_dir(&lib).unwrap();
    std::fs::write(
        lib.join("waitlib.py"),
        "def wait(libc, sem):\n    libc.sem_wait(sem)\n",
    )
    .unwrap();
    lib
}

/// The report process's `host_wait` sites: (location, count), sorted.
fn host_waits_by_line(p: &Value) -> Vec<(String, u64)> {
    let mut got: Vec<(String, u64)> = p["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "host_wait")
        .map(|s| {
            (
                s["location"].as_str().unwrap_or("").to_string(),
                s["count"].as_u64().unwrap(),
            )
        })
        .collect();
    got.sort();
    got
}

#[test]
fn a_wait_that_a_host_function_ends_is_recorded_at_its_line() {
    let _one = one_at_a_time();
    let d = TempDir::new("host-wait");
    let (script, p, stderr) = run(&d, SCRIPT, &[]);
    let p = &p;
    let sites = p["sites"].as_array().unwrap();
    let got: Vec<(&str, &str, u64, &str)> = sites
        .iter()
        .map(|s| {
            (
                s["kind"].as_str().unwrap(),
                s["api"].as_str().unwrap(),
                s["count"].as_u64().unwrap(),
                s["location"].as_str().unwrap_or(""),
            )
        })
        .collect();
    let direct = format!("{script}:21 in <module>");
    let relayed = format!("{script}:33 in <module>");
    assert_eq!(
        got,
        vec![
            ("host_wait", "cuLaunchHostFunc", 4, direct.as_str()),
            ("host_wait", "cuLaunchHostFunc", 3, relayed.as_str()),
        ],
        "{stderr}"
    );
    // Each wait is the 30 ms host function ahead of the one that woke the thread, not the
    // queuing of both nor the sleeps that follow.
    for s in sites {
        let ms = |k: &str| s[k].as_f64().unwrap() / 1e6;
        assert!((29.0..60.0).contains(&ms("p50_ns")), "p50 {}", ms("p50_ns"));
        assert!((29.0..60.0).contains(&ms("max_ns")), "max {}", ms("max_ns"));
    }
    assert_eq!(p["kinds"]["host_wait"]["count"].as_u64(), Some(7), "{p}");
    // Every host function queued is a call that did not stall.
    assert_eq!(
        p["non_stall_calls"]["cuLaunchHostFunc"]["count"].as_u64(),
        Some(18)
    );
}

/// A host function queued while its stream captures a graph runs at every replay: it is
/// queued as the program's own (the library's trampoline serves one run), so the program
/// runs as before and no wait is recorded. The simulator captures nothing; its test knob makes
/// every stream say it is capturing.
#[test]
fn a_host_function_queued_during_capture_is_left_as_it_is() {
    let _one = one_at_a_time();
    let d = TempDir::new("host-wait-capture");
    let (_, p, stderr) = run(&d, SCRIPT, &[("SIMCUDA_CAPTURING", "1")]);
    assert_eq!(p["sites"].as_array().map(Vec::len), Some(0), "{stderr}");
    assert_eq!(
        p["non_stall_calls"]["cuLaunchHostFunc"]["count"].as_u64(),
        Some(18),
        "{stderr}"
    );
}

/// A thread inside a CUDA call that waits (here `cuStreamSynchronize`, behind a 30 ms host
/// function on the same stream) is not also waiting for the host function: the call is one
/// `stream_sync` at its line, and no `host_wait` is recorded for it (it was counted twice:
/// the thread sleeps in the call, and wakes right after the host function).
const SYNC_SCRIPT: &str = concat!(
    common::sim_preamble!(),
    "\
for _ in range(3):
    assert cu.cuLaunchHostFunc(s, usleep, 30000) == 0
    assert cu.cuStreamSynchronize(s) == 0
"
);

#[test]
fn a_thread_in_a_waiting_cuda_call_is_not_also_a_host_wait() {
    let _one = one_at_a_time();
    let d = TempDir::new("host-wait-sync");
    let (script, p, stderr) = run(&d, SYNC_SCRIPT, &[]);
    let sites: Vec<(&str, u64, &str)> = p["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["kind"].as_str().unwrap(),
                s["count"].as_u64().unwrap(),
                s["location"].as_str().unwrap_or(""),
            )
        })
        .collect();
    let at = format!("{script}:16 in <module>");
    assert_eq!(sites, [("stream_sync", 3, at.as_str())], "{stderr}");
}

/// Two lines that wait through the same library function (as JAX's `device_get` does, through
/// `ArrayImpl._value`): the library's frame is the same frame at the same instruction, called
/// from the same depth, for both; each wait is still named at its own line (a look that
/// reused the stack found at the first line once named every later wait there).
#[test]
fn waits_through_one_library_function_are_named_at_each_calling_line() {
    let _one = one_at_a_time();
    let d = TempDir::new("host-wait-lib");
    let lib = waitlib(&d);
    let text = format!(
        "{}{}",
        common::sim_preamble!(),
        format_args!(
            "\
import sys
sys.path.insert(0, {lib:?})
import waitlib
post = ctypes.cast(libc.sem_post, ctypes.c_void_p)
sem = ctypes.create_string_buffer(64)
assert libc.sem_init(sem, 0, 0) == 0
def once():
    assert cu.cuLaunchHostFunc(s, usleep, 20000) == 0
    assert cu.cuLaunchHostFunc(s, post, ctypes.addressof(sem)) == 0
once(); waitlib.wait(libc, sem)
for _ in range(3):
    once(); waitlib.wait(libc, sem)
",
            lib = lib.to_str().unwrap()
        )
    );
    let (script, p, stderr) = run(&d, &text, &[]);
    let got = host_waits_by_line(&p);
    assert_eq!(
        got,
        [
            (format!("{script}:23 in <module>"), 1),
            (format!("{script}:25 in <module>"), 3),
        ],
        "{stderr}"
    );
}

/// A long loop that waits at two lines in turn through one library function, as a training
/// loop waits at `block_until_ready` and then at `device_get`: every wait is named at its own
/// line. After the first wait at each stack the look is the cheap one (`python::memo`: the
/// key of the whole stack, read from its frames); a key that covered only the innermost
/// frames would name every wait at one line.
#[test]
fn a_long_loop_of_waits_at_two_lines_counts_each_at_its_line() {
    let _one = one_at_a_time();
    let d = TempDir::new("host-wait-loop");
    let lib = waitlib(&d);
    let text = format!(
        "{}{}",
        common::sim_preamble!(),
        format_args!(
            "\
import sys
sys.path.insert(0, {lib:?})
import waitlib
post = ctypes.cast(libc.sem_post, ctypes.c_void_p)
sem = ctypes.create_string_buffer(64)
assert libc.sem_init(sem, 0, 0) == 0
def once():
    assert cu.cuLaunchHostFunc(s, usleep, 5000) == 0
    assert cu.cuLaunchHostFunc(s, post, ctypes.addressof(sem)) == 0
for _ in range(150):
    once(); waitlib.wait(libc, sem)
    once(); waitlib.wait(libc, sem)
",
            lib = lib.to_str().unwrap()
        )
    );
    let (script, p, stderr) = run(&d, &text, &[]);
    let got = host_waits_by_line(&p);
    assert_eq!(
        got,
        [
            (format!("{script}:24 in <module>"), 150),
            (format!("{script}:25 in <module>"), 150),
        ],
        "{stderr}"
    );
    // The machinery's time is said apart, as a part of the library's own time.
    let own = p["overhead_ns"].as_u64().unwrap();
    let host_wait = p["host_wait_overhead_ns"].as_u64().unwrap_or(0);
    assert!(host_wait > 0 && host_wait <= own, "{host_wait} of {own}");
    assert!(
        stderr.contains("of which the host-wait machinery (queuing, looks, the watch for wakes)"),
        "{stderr}"
    );
}

/// Each wait runs three host functions, two that leave the thread asleep and one that wakes
/// it: after a few dozen waits the first two are looked at after they run (`hostwait::later`),
/// the second within the same sleep as the first (no read: the thread has not run). Each wait
/// is still counted once, at its line, and no look is skipped. The waking function runs 10 ms
/// after the queuing: the thread is asleep by then even on a loaded machine (with 4 ms, one
/// wait in 200 did not happen: the post came first).
#[test]
fn waits_that_run_several_host_functions_are_each_counted_once_at_their_line() {
    let _one = one_at_a_time();
    let d = TempDir::new("host-wait-later");
    let text = format!(
        "{}{}",
        common::sim_preamble!(),
        "\
post = ctypes.cast(libc.sem_post, ctypes.c_void_p)
sem = ctypes.create_string_buffer(64)
assert libc.sem_init(sem, 0, 0) == 0
def queue():
    assert cu.cuLaunchHostFunc(s, usleep, 5000) == 0
    assert cu.cuLaunchHostFunc(s, usleep, 5000) == 0
    assert cu.cuLaunchHostFunc(s, post, ctypes.addressof(sem)) == 0
for _ in range(60):
    queue(); libc.sem_wait(sem)
    queue(); libc.sem_wait(sem)
"
    );
    let (script, p, stderr) = run(&d, &text, &[]);
    let got = host_waits_by_line(&p);
    assert_eq!(
        got,
        [
            (format!("{script}:22 in <module>"), 60),
            (format!("{script}:23 in <module>"), 60),
        ],
        "{stderr}"
    );
    assert_eq!(p["cost"]["looks_skipped"].as_u64().unwrap_or(0), 0, "{p:#}");
}

/// Attach, detach, attach again to a job preloaded dormant whose main thread waits for host
/// functions that another thread queues (as XLA's threads queue some of JAX's: the main
/// thread's reference point for where a wait begins comes only from its recorded waits): the
/// first wait of the second attach begins after that attach, not at the last wait of the
/// first. Before reference points kept their segment,
/// that wait stretched over the whole time between the two attaches (2.9 to 3.1 s in JAX's
/// loop on the H100).
#[test]
fn a_wait_after_a_reattach_does_not_reach_back_to_the_last_attach() {
    let _one = one_at_a_time();
    let d = TempDir::new("host-wait-reattach");
    let pid_file = d.path().join("pid");
    let stop = d.path().join("stop");
    let body = format!(
        "\
import os
post = ctypes.cast(libc.sem_post, ctypes.c_void_p)
asked = ctypes.create_string_buffer(64)
done = ctypes.create_string_buffer(64)
assert libc.sem_init(asked, 0, 0) == 0 and libc.sem_init(done, 0, 0) == 0
def queuer():
    assert cu.cuCtxSetCurrent(ctx) == 0
    while True:
        libc.sem_wait(asked)
        assert cu.cuLaunchHostFunc(s, usleep, 2000) == 0
        assert cu.cuLaunchHostFunc(s, post, ctypes.addressof(done)) == 0
threading.Thread(target=queuer, daemon=True).start()
open({pid:?} + '.tmp', 'w').write(str(os.getpid()))
os.rename({pid:?} + '.tmp', {pid:?})
end = time.time() + 30
while not os.path.exists({stop:?}) and time.time() < end:
    libc.sem_post(asked)
    libc.sem_wait(done)
",
        pid = pid_file.to_str().unwrap(),
        stop = stop.to_str().unwrap(),
    );
    let text = format!("{}{body}", common::sim_preamble!());
    let script = d.file("reattach.py", &text);
    // Killed at the end of the test whatever happens; its stderr kept in a file.
    let job_err = d.path().join("job.err");
    let (mut job, pid) = common::dormant_job(
        &d,
        &["python3", script.to_str().unwrap()],
        &pid_file,
        &job_err,
    );
    let attach = |n: u32| -> Value {
        let report = d.path().join(format!("r{n}.json"));
        common::attach_report(&d, &pid, &["--duration", "1"], &report)["processes"][0].clone()
    };
    let first = attach(1);
    // Waits go on unrecorded between the two attaches.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let second = attach(2);
    std::fs::write(&stop, "").unwrap();
    let status = job.child().wait().unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "{}",
        std::fs::read_to_string(&job_err).unwrap_or_default()
    );
    for (n, p) in [(1, &first), (2, &second)] {
        let waits = &p["kinds"]["host_wait"];
        assert!(
            waits["count"].as_u64().unwrap_or(0) >= 20,
            "attach {n}: {p:#}"
        );
        // A wait is about 2 ms; a loaded machine may stretch one, never to the 1.5 s between.
        let max_ms = waits["max_ns"].as_u64().unwrap() as f64 / 1e6;
        assert!(
            max_ms < 500.0,
            "attach {n}: a wait of {max_ms} ms: {waits:#}"
        );
    }
}
