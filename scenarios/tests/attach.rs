//! `syncspy attach` / `syncspy detach` on a live process, without a GPU: the real syncspy
//! and libsyncspy.so against `attach-target` (scenarios/src/attach_target.c, linked lazy,
//! BIND_NOW and -fno-plt) running on the simulated runtime. The target does exactly the
//! calls it is told on stdin and answers each, so "the calls made while attached" is known;
//! its main thread checks vector registers and MXCSR around every read (exit 99 if changed).
//!
//! Needs ptrace of a child (root, or kernel.yama.ptrace_scope ≤ 1) and the workspace built.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use common::{artifact, with_sim_runtime, TempDir};
use serde_json::Value;

const LAZY: &str = env!("SYNCSPY_ATTACH_TARGET_LAZY");
const NOW: &str = env!("SYNCSPY_ATTACH_TARGET_NOW");
const NOPLT: &str = env!("SYNCSPY_ATTACH_TARGET_NOPLT");
const CALLER_LIB: &str = env!("SYNCSPY_CUDACALLER_LIB");
const SHIM_LIB: &str = env!("SYNCSPY_SHIM_LIB");

struct Target {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    pid: i32,
    main: i32,
    waiter: i32,
    sleeper: i32,
    epoller: i32,
    /// Keeps the simulated runtime's folder (and what else the target needs) alive.
    _keep: Box<dyn std::any::Any>,
}

impl Target {
    fn start(exe: &str, env: &[(&str, &str)]) -> Target {
        let sim = with_sim_runtime("attach-sim");
        // The simulator's CUPTI too, found next to the runtime as torch's is: attach traces
        // GPU idle gaps by default, so every attach here starts and ends that thread.
        std::os::unix::fs::symlink(
            artifact("libsimcudart.so"),
            sim.path().join("libcupti.so.13"),
        )
        .unwrap();
        let mut cmd = Command::new(exe);
        cmd.env("LD_LIBRARY_PATH", sim.path())
            .envs(env.iter().copied());
        Target::spawn(cmd, Box::new(sim), |c| c.id() as i32)
    }

    /// Starts `cmd` (the target, or what runs it), whose process `pid_of` finds once it is
    /// ready; `keep` lives as long as the target.
    fn spawn(
        mut cmd: Command,
        keep: Box<dyn std::any::Any>,
        pid_of: impl FnOnce(&Child) -> i32,
    ) -> Target {
        let mut child = cmd
            .env("SIMCUDA_QUIET", "1")
            .env("SIMCUDA_TIME_SCALE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start attach-target");
        let stdin = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut t = Target {
            child,
            stdin,
            lines,
            pid: 0,
            main: 0,
            waiter: 0,
            sleeper: 0,
            epoller: 0,
            _keep: keep,
        };
        let ready = t.line();
        t.pid = pid_of(&t.child);
        let tid = |k: &str| -> i32 {
            ready
                .split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {k} in {ready:?}"))
        };
        t.main = tid("main=");
        t.waiter = tid("waiter=");
        t.sleeper = tid("sleeper=");
        t.epoller = tid("epoller=");
        t
    }

    fn line(&mut self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(30))
            .expect("attach-target answers")
    }

    /// Sends a command, returns its answer.
    fn cmd(&mut self, c: &str) -> String {
        writeln!(self.stdin, "{c}").unwrap();
        self.stdin.flush().unwrap();
        let l = self.line();
        assert!(!l.starts_with("FP CLOBBERED"), "{l}");
        l
    }

    /// The GOT slots of the program's cuda* imports: name → address.
    fn slots(&mut self) -> Vec<(String, u64)> {
        writeln!(self.stdin, "slots").unwrap();
        let mut v = Vec::new();
        loop {
            let l = self.line();
            if l == "done slots" {
                return v;
            }
            let mut it = l.split_whitespace().skip(1);
            let name = it.next().unwrap().to_string();
            let addr = u64::from_str_radix(it.next().unwrap().trim_start_matches("0x"), 16);
            v.push((name, addr.unwrap()));
        }
    }

    /// The slots of the imports named `names`, as `slots` lists them.
    fn slots_named(&mut self, names: &[&str]) -> Vec<(String, u64)> {
        let v: Vec<(String, u64)> = self
            .slots()
            .into_iter()
            .filter(|(n, _)| names.contains(&n.as_str()))
            .collect();
        assert_eq!(v.len(), names.len(), "{names:?}: {v:?}");
        v
    }

    /// The 8 bytes of each slot, read from outside through /proc/PID/mem.
    fn got(&self, slots: &[(String, u64)]) -> Vec<u64> {
        let mem = std::fs::File::open(format!("/proc/{}/mem", self.pid)).unwrap();
        slots
            .iter()
            .map(|(_, a)| {
                let mut b = [0u8; 8];
                mem.read_exact_at(&mut b, *a).unwrap();
                u64::from_le_bytes(b)
            })
            .collect()
    }

    /// Tells the target to exit with `code`; returns its status and its signal account.
    fn exit(mut self, code: i32) -> (ExitStatus, String) {
        writeln!(self.stdin, "exit {code}").unwrap();
        let signals = self.line();
        let st = self.child.wait().unwrap();
        (st, signals)
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if self.pid > 0 && self.pid != self.child.id() as i32 {
            // SAFETY: kill of the target a wrapper of ours started (it ends the wrapper).
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `syncspy attach`.
struct Attach {
    child: Child,
    report: PathBuf,
    stderr: Receiver<String>,
    log: String,
}

fn start_attach(
    t: &Target,
    dir: &TempDir,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<Attach, String> {
    start_attach_under(&[], t, dir, args, env)
}

/// [`start_attach`], `syncspy` run by `wrapper` (a program and its arguments) when given.
fn start_attach_under(
    wrapper: &[&str],
    t: &Target,
    dir: &TempDir,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<Attach, String> {
    let report = dir
        .path()
        .join(format!("report-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&report);
    let syncspy = artifact("syncspy");
    let mut cmd = match wrapper.split_first() {
        Some((prog, rest)) => {
            let mut c = Command::new(prog);
            c.args(rest).arg(&syncspy);
            c
        }
        None => Command::new(&syncspy),
    };
    let mut child = cmd
        .arg("attach")
        .arg(t.pid.to_string())
        .arg("--report")
        .arg(&report)
        .args(args)
        .env("SYNCSPY_DIR", dir.path())
        .env("SYNCSPY_LIB", artifact("libsyncspy.so"))
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start syncspy attach");
    let err = child.stderr.take().unwrap();
    let (tx, stderr) = channel();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut a = Attach {
        child,
        report,
        stderr,
        log: String::new(),
    };
    // Attached once it says so (or the library says it is dormant and arms itself).
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        match a.stderr.recv_timeout(Duration::from_millis(50)) {
            Ok(l) => {
                a.log.push_str(&l);
                a.log.push('\n');
                if l.contains("syncspy: attached to process")
                    || l.contains("runs libsyncspy.so dormant")
                {
                    return Ok(a);
                }
            }
            Err(_) => {
                if let Ok(Some(st)) = a.child.try_wait() {
                    a.log.extend(a.stderr.try_iter().map(|l| l + "\n"));
                    return Err(format!("syncspy attach ended with {st}:\n{}", a.log));
                }
            }
        }
    }
    panic!("syncspy attach did not attach:\n{}", a.log);
}

impl Attach {
    /// Ctrl-C: detach, report. Returns the report.
    fn finish(self) -> Value {
        // SAFETY: kill of our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        self.report()
    }

    /// `syncspy detach PID` from another process; this attach ends and reports.
    fn detach_from_outside(self, pid: i32, dir: &TempDir) -> Value {
        let out = Command::new(artifact("syncspy"))
            .args(["detach", &pid.to_string()])
            .env("SYNCSPY_DIR", dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(err.contains("detached from process"), "{err}");
        self.report()
    }

    fn report(mut self) -> Value {
        let st = self.child.wait().unwrap();
        self.log.extend(self.stderr.iter().map(|l| l + "\n"));
        assert!(st.success(), "syncspy attach: {st}\n{}", self.log);
        assert!(self.log.contains(", detached"), "{}", self.log);
        let text = std::fs::read_to_string(&self.report).unwrap();
        serde_json::from_str(&text).unwrap()
    }
}

/// Whether some call site of `api` in the report has a stack (frames).
fn has_stack(report: &Value, api: &str) -> bool {
    report["processes"][0]["sites"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| s["api"] == api && s["frames"].as_array().is_some_and(|f| !f.is_empty()))
}

fn count(report: &Value, api: &str) -> u64 {
    let procs = report["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "{report:#}");
    procs[0]["apis"][api]["count"].as_u64().unwrap_or(0)
}

/// The whole cycle on one build: calls before, while and after attach; a second attach.
fn attach_cycle(exe: &str, victim: fn(&Target) -> i32) {
    let dir = TempDir::new("attach");
    let mut t = Target::start(exe, &[]);
    assert_eq!(t.cmd("sync 5"), "done sync 5");
    let slots = t.slots();
    let names: Vec<&str> = slots.iter().map(|(n, _)| n.as_str()).collect();
    for n in [
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaMemcpy",
    ] {
        assert!(names.contains(&n), "{names:?}");
    }
    let before = t.got(&slots);

    for round in 0..2 {
        let tid = victim(&t).to_string();
        let a = start_attach(&t, &dir, &["--thread", &tid], &[]).unwrap();
        // Redirected while attached (cudaMalloc has no hook and stays).
        let during = t.got(&slots);
        for (i, (n, _)) in slots.iter().enumerate() {
            if n == "cudaMalloc" {
                assert_eq!(during[i], before[i], "{n}");
            } else {
                assert_ne!(during[i], before[i], "{n} not redirected");
            }
        }
        assert_eq!(t.cmd("sync 7"), "done sync 7");
        assert_eq!(t.cmd("memcpy 3"), "done memcpy 3");
        assert_eq!(t.cmd("devsync 2"), "done devsync 2");
        let r = a.finish();
        // The injected library's start-up is apart from its cost while recording.
        let p = &r["processes"][0];
        let startup = p["startup_overhead_ns"]
            .as_u64()
            .expect("the start-up, apart");
        assert!(
            startup <= p["overhead_ns"].as_u64().unwrap(),
            "round {round}: {p}"
        );
        assert_eq!(count(&r, "cudaStreamSynchronize"), 7, "round {round}");
        assert_eq!(count(&r, "cudaMemcpy"), 3, "round {round}");
        assert_eq!(count(&r, "cudaDeviceSynchronize"), 2, "round {round}");
        // Each attach's segment has the call sites' stacks, the second too (the threads'
        // stack caches must not hand out ids of the first attach's segment).
        assert!(
            has_stack(&r, "cudaStreamSynchronize"),
            "round {round}: {r:#}"
        );
        // Detached: the GOT is as it was (lazy slots still unresolved), and calls go on.
        assert_eq!(t.got(&slots), before, "round {round}");
        assert_eq!(t.cmd("sync 4"), "done sync 4");
        // No segment or control file left behind.
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| !n.to_string_lossy().starts_with("report-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
    let (st, signals) = t.exit(7);
    assert_eq!(st.code(), Some(7));
    // The dead stack below the reading main thread's red zone, which the frame and the
    // calls used when it was the victim, was put back.
    assert_eq!(numbers(&signals)[5], 0, "stack changed: {signals}");
}

#[test]
fn bind_now_full_relro_through_a_futex_waiter() {
    attach_cycle(NOW, |t| t.waiter);
}

#[test]
fn lazy_binding_with_unresolved_slots_through_the_reading_main_thread() {
    // devsync and memcpy were never called: their slots still point at the PLT.
    attach_cycle(LAZY, |t| t.main);
}

#[test]
fn no_plt_through_a_sleeping_thread() {
    attach_cycle(NOPLT, |t| t.sleeper);
}

fn numbers(line: &str) -> Vec<i64> {
    line.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

#[test]
fn a_thread_in_epoll_wait_sees_no_eintr() {
    // epoll_wait ends with EINTR when its thread is stopped; attach makes the kernel issue it
    // again, since no signal came.
    let dir = TempDir::new("attach-epoll");
    let mut t = Target::start(NOW, &[]);
    for _ in 0..2 {
        let tid = t.epoller.to_string();
        let a = start_attach(&t, &dir, &["--thread", &tid], &[]).unwrap();
        assert!(a.log.contains("(in epoll_wait)"), "{}", a.log);
        assert_eq!(t.cmd("sync 3"), "done sync 3");
        assert_eq!(count(&a.finish(), "cudaStreamSynchronize"), 3);
    }
    let (st, signals) = t.exit(0);
    assert_eq!(st.code(), Some(0));
    assert_eq!(
        numbers(&signals)[4],
        0,
        "EINTR seen in epoll_wait: {signals}"
    );
}

#[test]
fn a_child_forked_while_attached_is_recorded_and_one_forked_after_is_not() {
    let dir = TempDir::new("attach-fork");
    let mut t = Target::start(NOW, &[]);
    let a = start_attach(&t, &dir, &[], &[]).unwrap();
    assert_eq!(t.cmd("fork 4"), "done fork 4 0");
    assert_eq!(t.cmd("sync 1"), "done sync 1");
    let r = a.finish();
    let procs = r["processes"].as_array().unwrap();
    let calls = |me: bool| -> u64 {
        procs
            .iter()
            .filter(|p| (p["pid"].as_i64() == Some(t.pid as i64)) == me)
            .map(|p| {
                p["apis"]["cudaStreamSynchronize"]["count"]
                    .as_u64()
                    .unwrap_or(0)
            })
            .sum()
    };
    assert_eq!((calls(true), calls(false)), (1, 4), "{r:#}");
    // Detached: a new child inherits the restored GOT and records nothing.
    assert_eq!(t.cmd("fork 2"), "done fork 2 0");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(segments_in(dir.path()), 0);
    assert_eq!(t.exit(0).0.code(), Some(0));
}

/// Issue 24: attach reads under the reader protocol. It registers as the reader of its
/// session and leases what it follows, so a reclaimer that passes while it has not scanned
/// yet (the library's before it makes a segment, an agent's) leaves the segment of a child
/// that already ended to it; its calls are in the report.
#[test]
fn a_reclaimer_leaves_an_ended_child_to_the_attach_that_has_not_read_it_yet() {
    use syncspy_abi::lifecycle::{reclaim, Policy};
    let dir = TempDir::new("attach-reclaim");
    let mut t = Target::start(NOW, &[]);
    let a = start_attach(&t, &dir, &[], &[]).unwrap();
    let regs: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!(".syncspy-reader-{}-", a.child.id())))
        .collect();
    assert_eq!(regs.len(), 1, "attach registers as a reader: {regs:?}");
    // The attacher, stopped, reads nothing while the child runs and ends.
    // SAFETY: signals to our own child.
    unsafe { libc::kill(a.child.id() as i32, libc::SIGSTOP) };
    assert_eq!(t.cmd("fork 4"), "done fork 4 0");
    let policy = Policy {
        linger_ns: 0,
        cap_bytes: 0,
    };
    let swept = reclaim(dir.path(), policy, &|_| false);
    // SAFETY: as above.
    unsafe { libc::kill(a.child.id() as i32, libc::SIGCONT) };
    let swept = swept.unwrap();
    assert!(swept.removed.is_empty(), "{:?}", swept.removed);
    assert_eq!(t.cmd("sync 1"), "done sync 1");
    let r = a.finish();
    let procs = r["processes"].as_array().unwrap();
    let child: u64 = procs
        .iter()
        .filter(|p| p["pid"].as_i64() != Some(t.pid as i64))
        .filter_map(|p| p["apis"]["cudaStreamSynchronize"]["count"].as_u64())
        .sum();
    assert_eq!(child, 4, "{r:#}");
    // Read, then removed, with the lease and the registration.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| !n.to_string_lossy().starts_with("report-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(t.exit(0).0.code(), Some(0));
}

/// Issue 24: the segment folder moved away while attached: attach says it cannot read it
/// (it used to drop that silently), and reports what it read before.
#[test]
fn a_segment_folder_that_goes_away_under_an_attach_is_said() {
    let dir = TempDir::new("attach-scan-error");
    let seg = dir.path().join("seg");
    std::fs::create_dir(&seg).unwrap();
    let mut t = Target::start(NOW, &[]);
    let seg_env = seg.to_string_lossy().into_owned();
    let mut a = start_attach(&t, &dir, &[], &[("SYNCSPY_DIR", &seg_env)]).unwrap();
    assert_eq!(t.cmd("sync 2"), "done sync 2");
    // Followed once a poll (100 ms) has seen it.
    std::thread::sleep(Duration::from_millis(500));
    // The control file goes with the folder: the attach ends.
    std::fs::rename(&seg, dir.path().join("seg-moved")).unwrap();
    let st = a.child.wait().unwrap();
    a.log.extend(a.stderr.iter().map(|l| l + "\n"));
    assert!(st.success(), "{st}: {}", a.log);
    let said = format!("syncspy: warning: cannot read {}: ", seg.display());
    assert_eq!(a.log.matches(&said).count(), 1, "{}", a.log);
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&a.report).unwrap()).unwrap();
    assert_eq!(count(&r, "cudaStreamSynchronize"), 2);
}

#[test]
fn the_thread_attach_chooses_itself_and_syncspy_detach_ends_it() {
    let dir = TempDir::new("attach-auto");
    let mut t = Target::start(NOW, &[]);
    let a = start_attach(&t, &dir, &[], &[]).unwrap();
    assert_eq!(t.cmd("sync 3"), "done sync 3");
    let r = a.detach_from_outside(t.pid, &dir);
    assert_eq!(count(&r, "cudaStreamSynchronize"), 3);
    assert_eq!(t.cmd("sync 2"), "done sync 2");
    // Nothing to detach any more.
    let out = Command::new(artifact("syncspy"))
        .args(["detach", &t.pid.to_string()])
        .env("SYNCSPY_DIR", dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not attached"));
    assert_eq!(t.exit(0).0.code(), Some(0));
}

#[test]
fn driver_imports_and_driver_functions_looked_up_while_attached_are_recorded() {
    // Each build: the program's own cuStreamSynchronize import (PLT, BIND_NOW GOT, -fno-plt
    // GLOB_DAT) and a pointer that dlsym hands out on a fresh libcuda handle while attached.
    for exe in [LAZY, NOW, NOPLT] {
        let dir = TempDir::new("attach-driver");
        let mut t = Target::start(exe, &[]);
        assert_eq!(t.cmd("drv 2"), "done drv 2");
        let slots = t.slots_named(&["cuStreamSynchronize", "dlsym"]);
        let before = t.got(&slots);
        let a = start_attach(&t, &dir, &[], &[]).unwrap();
        let during = t.got(&slots);
        for (i, (n, _)) in slots.iter().enumerate() {
            assert_ne!(during[i], before[i], "{exe}: {n} not redirected");
        }
        assert_eq!(t.cmd("drv 3"), "done drv 3");
        assert_eq!(t.cmd("dsym 4"), "done dsym 4");
        let r = a.finish();
        assert_eq!(count(&r, "cuStreamSynchronize"), 7, "{exe}: {r:#}");
        // Detached: the slots are as they were, and calls (a wrapper kept from the attach
        // included, in `dsym`: a fresh lookup) go on unrecorded.
        assert_eq!(t.got(&slots), before, "{exe}");
        assert_eq!(t.cmd("drv 1"), "done drv 1");
        assert_eq!(t.cmd("dsym 1"), "done dsym 1");
        assert_eq!(t.exit(5).0.code(), Some(5), "{exe}");
    }
}

#[test]
fn a_slot_not_resolved_yet_that_another_interposer_would_take_is_left_to_it() {
    // Lazy binding, with a shim preloaded that defines cudaDeviceSynchronize: the program's
    // slot for it is unresolved at attach, and would resolve to the shim, not the runtime.
    let dir = TempDir::new("attach-shim");
    let tally = dir.path().join("shim-calls");
    let tally_s = tally.to_string_lossy().into_owned();
    let mut t = Target::start(
        LAZY,
        &[("LD_PRELOAD", SHIM_LIB), ("SHIM_COUNT", tally_s.as_str())],
    );
    let slots = t.slots_named(&["cudaDeviceSynchronize", "cudaStreamSynchronize"]);
    let before = t.got(&slots);
    let a = start_attach(&t, &dir, &[], &[]).unwrap();
    let during = t.got(&slots);
    for (i, (n, _)) in slots.iter().enumerate() {
        if n == "cudaDeviceSynchronize" {
            assert_eq!(during[i], before[i], "{n} taken from the shim");
        } else {
            assert_ne!(during[i], before[i], "{n} not redirected");
        }
    }
    assert_eq!(t.cmd("devsync 2"), "done devsync 2");
    assert_eq!(t.cmd("sync 3"), "done sync 3");
    let r = a.finish();
    assert_eq!(count(&r, "cudaStreamSynchronize"), 3, "{r:#}");
    assert_eq!(count(&r, "cudaDeviceSynchronize"), 0, "{r:#}");
    let told = r["warnings"].as_array().unwrap().iter().any(|w| {
        let w = w.as_str().unwrap_or("");
        w.contains("not covered") && w.contains("cudaDeviceSynchronize")
    });
    assert!(told, "the report does not say what the shim keeps: {r:#}");
    // The shim saw both calls while attached: as many calls to it as 2 calls make once
    // detached (the simulated runtime calls it again from inside, the same each time).
    let calls = || std::fs::read(&tally).unwrap().len();
    let while_attached = calls();
    assert_eq!(t.cmd("devsync 1"), "done devsync 1");
    let per_call = calls() - while_attached;
    assert!(per_call >= 1);
    assert_eq!(while_attached, 2 * per_call, "the shim's calls");
    assert_eq!(t.exit(4).0.code(), Some(4));
}

/// The names of the process's threads.
fn thread_names(pid: i32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .collect()
}

#[test]
fn gpu_idle_is_traced_while_attached_and_nothing_of_it_runs_on_after_detach() {
    let dir = TempDir::new("attach-gpu");
    let mut t = Target::start(NOW, &[]);
    for round in 0..2 {
        let a = start_attach(&t, &dir, &[], &[]).unwrap();
        assert_eq!(t.cmd("memcpy 3"), "done memcpy 3");
        assert_eq!(t.cmd("sync 2"), "done sync 2");
        let names = thread_names(t.pid);
        assert!(
            names.iter().any(|n| n == "syncspy-gpu"),
            "round {round}: {names:?}"
        );
        // Past the tracker's hold (500 ms), so that time is accounted.
        std::thread::sleep(Duration::from_millis(800));
        let r = a.finish();
        let gpu = &r["processes"][0]["gpu"];
        assert_eq!(gpu["mode"], "on", "round {round}: {gpu:#}");
        assert_eq!(gpu["measured"], true, "round {round}: {gpu:#}");
        // The copies' records, this attach's only (each attach's segment counts its own).
        let records = gpu["records"].as_u64().unwrap_or(0);
        assert!((1..=6).contains(&records), "round {round}: {gpu:#}");
        let names = thread_names(t.pid);
        assert!(
            !names.iter().any(|n| n.starts_with("syncspy")),
            "round {round}: left running after detach: {names:?}"
        );
        assert_eq!(t.cmd("memcpy 1"), "done memcpy 1");
    }
    // --gpu-idle off: no GPU thread at all.
    let a = start_attach(&t, &dir, &["--gpu-idle", "off"], &[]).unwrap();
    assert_eq!(t.cmd("sync 1"), "done sync 1");
    let names = thread_names(t.pid);
    assert!(!names.iter().any(|n| n == "syncspy-gpu"), "{names:?}");
    let r = a.finish();
    assert_eq!(r["processes"][0]["gpu"]["mode"], "off", "{r:#}");
    assert_eq!(t.exit(6).0.code(), Some(6));
}

#[test]
fn a_library_loaded_after_attach_is_covered() {
    let dir = TempDir::new("attach-dlopen");
    let mut t = Target::start(NOW, &[]);
    let a = start_attach(&t, &dir, &[], &[]).unwrap();
    assert_eq!(t.cmd(&format!("dlopen {CALLER_LIB}")), "done dlopen");
    // The library's worker looks for new modules every 100 ms.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(t.cmd("lib 5"), "done lib 5");
    let r = a.finish();
    assert_eq!(count(&r, "cudaStreamSynchronize"), 5, "{r:#}");
    assert_eq!(t.cmd("lib 2"), "done lib 2");
    assert_eq!(t.exit(3).0.code(), Some(3));
}

#[test]
fn a_signal_storm_loses_no_signal_and_no_call() {
    let dir = TempDir::new("attach-storm");
    let mut t = Target::start(LAZY, &[]);
    assert_eq!(t.cmd("storm on"), "done storm");
    let main = t.main.to_string();
    let a = start_attach(&t, &dir, &["--thread", &main], &[]).unwrap();
    assert_eq!(t.cmd("sync 10"), "done sync 10");
    let r = a.finish();
    assert_eq!(count(&r, "cudaStreamSynchronize"), 10);
    assert_eq!(t.cmd("storm off"), "done storm");
    let (st, signals) = t.exit(0);
    assert_eq!(st.code(), Some(0));
    // "signals SENT RECEIVED rt SENT RECEIVED eintr N stack N": real-time signals queue, none
    // may be lost.
    let f = numbers(&signals);
    assert_eq!(f.len(), 6, "{signals}");
    assert!(f[2] > 100, "the storm ran: {signals}");
    assert_eq!(f[2], f[3], "real-time signals lost: {signals}");
    assert!(f[1] > 0, "{signals}");
}

fn lib_loaded(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .contains("libsyncspy.so")
}

#[test]
fn the_attacher_killed_after_any_step_leaves_the_target_unharmed() {
    let dir = TempDir::new("attach-kill");
    let lease = [("SYNCSPY_ATTACH_LEASE_MS", "1000")];
    // (step, on a fresh target). The first target is killed at each step before and at the
    // dlopen call, then, the library loaded by the thread on its own, at each step of the
    // arming call; fresh targets take the kills inside and after the dlopen call.
    let plan = [
        ("seized", true),
        ("stopped", false),
        ("frame-written", false),
        ("call-set", false),
        ("call-set", false),
        ("in-call", false),
        ("call-returned", false),
        ("restoring", false),
        ("in-call", true),
        ("call-returned", true),
    ];
    let mut t: Option<Target> = None;
    for (i, (s, fresh)) in plan.into_iter().enumerate() {
        if fresh {
            if let Some(old) = t.take() {
                assert_eq!(old.exit(9).0.code(), Some(9));
            }
            t = Some(Target::start(LAZY, &[]));
        }
        let t = t.as_mut().unwrap();
        let loaded = lib_loaded(t.pid);
        // Alternate the thread: read (main, FP-checked), futex and sleep victims.
        let tid = [t.main, t.waiter, t.sleeper][i % 3].to_string();
        let mut env = lease.to_vec();
        env.push(("SYNCSPY_TEST_ATTACH_ABORT_AT", s));
        match start_attach(t, &dir, &["--thread", &tid], &env) {
            Ok(mut a) => panic!("step {s}: attached although killed:\n{}", {
                let _ = a.child.kill();
                a.log
            }),
            Err(log) => assert!(log.contains("signal: 9"), "step {s}: {log}"),
        }
        // The target answers, its registers intact; a half-done attach lapses with its lease.
        assert_eq!(t.cmd("sync 2"), "done sync 2", "after step {s}");
        if !loaded && matches!(s, "call-set" | "in-call" | "call-returned") {
            assert!(
                lib_loaded(t.pid),
                "the thread finished dlopen on its own ({s})"
            );
        }
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(t.cmd("devsync 1"), "done devsync 1", "after step {s}");
    }
    // And a normal attach still works, with exact counts.
    let mut t = t.unwrap();
    let main = t.main.to_string();
    let a = start_attach(&t, &dir, &["--thread", &main], &lease).unwrap();
    assert_eq!(t.cmd("sync 6"), "done sync 6");
    assert_eq!(count(&a.finish(), "cudaStreamSynchronize"), 6);
    assert_eq!(t.exit(9).0.code(), Some(9));
}

#[test]
fn the_process_ending_while_attached_keeps_its_exit_code() {
    let dir = TempDir::new("attach-exit");
    let mut t = Target::start(NOW, &[]);
    // Without a terminal, --tui says so and attaches without the monitor.
    let mut a = start_attach(&t, &dir, &["--tui"], &[]).unwrap();
    assert_eq!(t.cmd("sync 2"), "done sync 2");
    let (st, _) = t.exit(42);
    assert_eq!(st.code(), Some(42));
    let ast = a.child.wait().unwrap();
    a.log.extend(a.stderr.iter().map(|l| l + "\n"));
    assert!(ast.success(), "{}", a.log);
    assert!(a.log.contains("it ended"), "{}", a.log);
    assert!(a.log.contains("--tui needs a terminal"), "{}", a.log);
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&a.report).unwrap()).unwrap();
    assert_eq!(count(&r, "cudaStreamSynchronize"), 2);
}

#[test]
fn refuses_a_process_that_is_already_traced() {
    let dir = TempDir::new("attach-traced");
    let mut t = Target::start(NOW, &[]);
    let pid = t.pid;
    // Trace it from a thread of this test (ptrace belongs to the tracing thread).
    let (tx, rx) = channel::<()>();
    let (ready_tx, ready_rx) = channel::<()>();
    let tracer = std::thread::spawn(move || {
        // SAFETY: PTRACE_SEIZE of our child, detached below before the thread ends.
        let r = unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0, 0) };
        assert_eq!(r, 0, "seize: {}", std::io::Error::last_os_error());
        ready_tx.send(()).unwrap();
        rx.recv().unwrap();
    });
    ready_rx.recv().unwrap();
    let e = start_attach(&t, &dir, &[], &[]).err().expect("refused");
    assert!(e.contains("already traced"), "{e}");
    tx.send(()).unwrap();
    tracer.join().unwrap();
    assert_eq!(t.cmd("sync 1"), "done sync 1");
    assert_eq!(t.exit(0).0.code(), Some(0));
}

fn segments_in(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("syncspy-") && !n.starts_with("syncspy-attach-")
        })
        .count()
}

#[test]
fn a_dormant_preload_arms_without_ptrace_and_disarms() {
    let dir = TempDir::new("attach-dormant");
    let lib = artifact("libsyncspy.so");
    let dirs = dir.path().to_string_lossy().into_owned();
    let mut t = Target::start(
        NOW,
        &[
            ("LD_PRELOAD", lib.to_str().unwrap()),
            ("SYNCSPY_DORMANT", "1"),
            ("SYNCSPY_DIR", &dirs),
        ],
    );
    assert_eq!(t.cmd("sync 5"), "done sync 5");
    assert_eq!(segments_in(dir.path()), 0, "dormant: no segment");
    let slots = t.slots();
    for round in 0..2 {
        let before = t.got(&slots);
        let a = start_attach(&t, &dir, &[], &[]).unwrap();
        assert!(a.log.contains("dormant"), "{}", a.log);
        // The library looks for the control file at most once a second, from a CUDA call;
        // the call that arms it is recorded.
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(t.cmd("sync 7"), "done sync 7");
        let r = a.finish();
        assert_eq!(count(&r, "cudaStreamSynchronize"), 7, "round {round}");
        assert!(
            has_stack(&r, "cudaStreamSynchronize"),
            "round {round}: {r:#}"
        );
        // Armed through its file, the preload started before the attach: no start-up here.
        assert!(
            r["processes"][0].get("startup_overhead_ns").is_none(),
            "round {round}: {r:#}"
        );
        // Preloaded: nothing to patch, the GOT was never touched.
        assert_eq!(t.got(&slots), before);
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(t.cmd("sync 3"), "done sync 3");
    }
    assert_eq!(t.exit(5).0.code(), Some(5));
}

/// Issue 25: links another user planted at the attach files' predictable names, in a sticky
/// folder, are never followed; the files are 0600 (the control file carries the session id).
#[test]
fn attach_files_never_follow_planted_links_and_are_private() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: not root, so no files of another user can be planted");
        return;
    }
    let dir = TempDir::new("attach-planted");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = dir.path().join("root-owned");
    std::fs::write(&victim, "precious\n").unwrap();
    // Old enough that the link does not look like a live attach's control file.
    std::fs::File::options()
        .write(true)
        .open(&victim)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    let mut t = Target::start(NOW, &[]);
    let control = dir.path().join(format!("syncspy-attach-{}", t.pid));
    std::os::unix::fs::symlink(&victim, &control).unwrap();
    std::os::unix::fs::lchown(&control, Some(65534), Some(65534)).unwrap();

    let a = start_attach(&t, &dir, &[], &[]).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    let mut report = control.as_os_str().to_owned();
    report.push(".report");
    for p in [control.as_path(), Path::new(&report)] {
        let m = std::fs::symlink_metadata(p).unwrap();
        assert!(m.is_file(), "{}", p.display());
        assert_eq!(m.mode() & 0o777, 0o600, "{}", p.display());
        assert_eq!(m.uid(), 0, "{}", p.display());
    }
    assert_eq!(t.cmd("sync 2"), "done sync 2");
    let r = a.finish();
    assert_eq!(count(&r, "cudaStreamSynchronize"), 2);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert_eq!(t.exit(0).0.code(), Some(0));
}

/// A folder outside /dev/shm (which the container gets a private tmpfs on), removed on drop.
struct JobDir(PathBuf);

impl Drop for JobDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Why a container cannot be made here (None: it can): it takes root and `unshare`.
fn no_containers() -> Option<String> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    match Command::new("unshare")
        .args(["--pid", "--fork", "--mount", "--mount-proc", "true"])
        .output()
    {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "unshare --pid --mount fails: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("no unshare: {e}")),
    }
}

/// The target in a container: its own PID and mount namespaces (it is pid 1 there), a
/// private tmpfs on /dev/shm (its segment folder), and the folder holding libsyncspy.so
/// (the workspace's target folder) hidden under an empty tmpfs, so the library is nowhere
/// in its file system. The program and the simulated runtime are copies in a folder of
/// their own.
fn start_in_container(exe: &str, hide_lib: bool, env: &[(&str, &str)]) -> Target {
    start_in_container_as(exe, hide_lib, env, None)
}

/// [`start_in_container`], the program run as user `uid` (set after the mounts) when given.
fn start_in_container_as(
    exe: &str,
    hide_lib: bool,
    env: &[(&str, &str)],
    uid: Option<u32>,
) -> Target {
    start_in_container_shm(exe, hide_lib, env, uid, "mode=1777")
}

/// [`start_in_container_as`], its /dev/shm mounted with the tmpfs options `shm` (a size:
/// Docker's 64 MiB).
fn start_in_container_shm(
    exe: &str,
    hide_lib: bool,
    env: &[(&str, &str)],
    uid: Option<u32>,
    shm: &str,
) -> Target {
    let job = JobDir(std::env::temp_dir().join(format!(
        "syncspy-test-container-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    )));
    let _ = std::fs::remove_dir_all(&job.0);
    std::fs::create_dir_all(&job.0).unwrap();
    std::fs::copy(exe, job.0.join("attach-target")).unwrap();
    std::fs::copy(artifact("libsimcudart.so"), job.0.join("libsimcudart.so")).unwrap();
    for name in ["libcudart.so.13", "libcuda.so.1", "libcupti.so.13"] {
        std::os::unix::fs::symlink("libsimcudart.so", job.0.join(name)).unwrap();
    }
    // Without `hide_lib`, an empty folder of the job's is hidden instead.
    let hidden = if hide_lib {
        artifact("libsyncspy.so").parent().unwrap().to_path_buf()
    } else {
        std::fs::create_dir(job.0.join("empty")).unwrap();
        job.0.join("empty")
    };
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--pid",
        "--fork",
        "--kill-child",
        "--mount",
        "--mount-proc",
        "--propagation",
        "private",
        "sh",
        "-c",
        "mount -t tmpfs -o \"$1\" ct-shm /dev/shm && mount -t tmpfs -o ro ct-hide \"$2\" \
         && shift 2 && exec \"$@\"",
        "sh",
        shm,
    ])
    .arg(&hidden);
    if let Some(uid) = uid {
        cmd.arg("setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .arg("--clear-groups");
    }
    cmd.arg(job.0.join("attach-target"))
        .env("LD_LIBRARY_PATH", &job.0)
        .env_remove("SYNCSPY_DIR")
        .env_remove("LD_PRELOAD")
        .envs(env.iter().copied());
    Target::spawn(cmd, Box::new(job), |c| {
        // unshare's one child, which became the target (pid 1 in its namespace).
        let kids = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", c.id()))
            .unwrap_or_default();
        kids.split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .expect("the container's process")
    })
}

#[test]
fn attach_into_a_container_without_the_library_from_the_node() {
    if let Some(why) = no_containers() {
        eprintln!("skipped: attach into a container needs root and unshare: {why}");
        return;
    }
    let dir = TempDir::new("attach-container");
    let mut t = start_in_container(NOW, true, &[]);
    // It is in a container as issue 23 has it: pid 1 of its own PID namespace, another
    // mount namespace, no libsyncspy.so at the node's path, and the node's segment folder
    // (this test's, in /dev/shm) not visible.
    let status = std::fs::read_to_string(format!("/proc/{}/status", t.pid)).unwrap();
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert!(nspid.ends_with("\t1"), "{nspid}");
    let ns = |p: &str| std::fs::read_link(p).unwrap();
    assert_ne!(
        ns("/proc/self/ns/mnt"),
        ns(&format!("/proc/{}/ns/mnt", t.pid))
    );
    let pid = t.pid;
    let inside = |p: &Path| PathBuf::from(format!("/proc/{pid}/root{}", p.display()));
    assert!(!inside(&artifact("libsyncspy.so")).exists());
    assert!(!inside(dir.path()).exists());
    assert_eq!(t.cmd("sync 5"), "done sync 5");
    let slots = t.slots();
    let before = t.got(&slots);
    let shm = inside(Path::new("/dev/shm"));
    for round in 0..2 {
        let a = start_attach(&t, &dir, &[], &[]).unwrap();
        let during = t.got(&slots);
        for (i, (n, _)) in slots.iter().enumerate() {
            if n != "cudaMalloc" {
                assert_ne!(during[i], before[i], "round {round}: {n} not redirected");
            }
        }
        // Loaded from memory; the descriptor it came through is closed again.
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", t.pid)).unwrap();
        assert!(maps.contains("/memfd:libsyncspy.so (deleted)"), "{maps}");
        let fds: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{}/fd", t.pid))
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .collect();
        assert!(
            !fds.iter().any(|l| l.to_string_lossy().contains("memfd:")),
            "{fds:?}"
        );
        // The segment and the control file (named for pid 1) are in the container's own
        // /dev/shm, none in the node's folder.
        let names = |d: &Path| -> Vec<String> {
            std::fs::read_dir(d)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with("report-"))
                .collect()
        };
        assert!(
            names(&shm).iter().any(|n| n == "syncspy-attach-1"),
            "{:?}",
            names(&shm)
        );
        assert_eq!(segments_in(&shm), 1, "{:?}", names(&shm));
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
        assert_eq!(t.cmd("sync 7"), "done sync 7");
        assert_eq!(t.cmd("memcpy 3"), "done memcpy 3");
        assert_eq!(t.cmd("devsync 2"), "done devsync 2");
        let r = a.finish();
        assert_eq!(
            count(&r, "cudaStreamSynchronize"),
            7,
            "round {round}: {r:#}"
        );
        assert_eq!(count(&r, "cudaMemcpy"), 3, "round {round}");
        assert_eq!(count(&r, "cudaDeviceSynchronize"), 2, "round {round}");
        assert_eq!(t.got(&slots), before, "round {round}");
        assert_eq!(t.cmd("sync 4"), "done sync 4");
        // Nothing of syncspy left in the container's folder or the node's.
        assert!(names(&shm).is_empty(), "round {round}: {:?}", names(&shm));
        assert!(names(dir.path()).is_empty(), "round {round}");
    }
    // The second attach reused the library loaded from memory the first time.
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", t.pid)).unwrap();
    let copies = maps
        .lines()
        .filter(|l| l.ends_with("/memfd:libsyncspy.so (deleted)"))
        .filter(|l| l.split_whitespace().nth(2) == Some("00000000"))
        .count();
    assert_eq!(copies, 1, "{maps}");
    let (st, _) = t.exit(7);
    assert_eq!(st.code(), Some(7));
}

#[test]
fn an_attach_in_dockers_64_mib_dev_shm_loses_no_record_at_50k_events_a_second() {
    if let Some(why) = no_containers() {
        eprintln!("skipped: a container with a 64 MiB /dev/shm needs root and unshare: {why}");
        return;
    }
    // Issue 36: attached to a loop traced at a few thousand records a second, the reader
    // lost records. The segment goes to the container's /dev/shm, which is 64 MiB as
    // Docker's: the library sizes it for that folder (2 MiB), and the ring was cut first, to
    // 1,024 slots, which this rate overflows between two reads.
    let dir = TempDir::new("attach-rate");
    let mut t = start_in_container_shm(NOW, false, &[], None, "mode=1777,size=64m");
    // GPU idle traced all along (attach's default), every gap a record (1 us and longer):
    // 25,000 copies a second, in batches every 2 ms, the simulated GPU idle between any two,
    // so each copy is a memcpy_sync record and a gap record: about 50,000 records a second
    // for 2 s. Detached at once after, while the GPU thread still holds the last half second
    // of gaps: its last pass writes them then. No budget for the library's own time: this is
    // about the ring, and past a budget the library sheds gap records on purpose.
    let a = start_attach(
        &t,
        &dir,
        &[],
        &[("SYNCSPY_GPU_IDLE_MIN_US", "1"), ("SYNCSPY_BUDGET", "off")],
    )
    .unwrap();
    let n = 50_000u64;
    assert_eq!(
        t.cmd(&format!("paced 25000 {n}")),
        format!("done paced {n}")
    );
    let r = a.finish();
    let p = &r["processes"][0];
    let kind = |k: &str| p["kinds"][k]["count"].as_u64().unwrap_or(0);
    let (copies, gaps) = (kind("memcpy_sync"), kind("gpu_idle"));
    eprintln!(
        "{copies} copies, {gaps} gaps, {} received, {} lost, {} dropped, in {:.2} s",
        p["recorded_events"],
        p["lost_records"],
        p["dropped_events"],
        p["wall_ns"].as_u64().unwrap_or(0) as f64 / 1e9
    );
    assert_eq!(copies, n, "{p:#}");
    // A gap after each copy but the last (and maybe one before the first).
    assert!((n - 1..=n).contains(&gaps), "{:#}", p["gpu"]);
    assert_eq!(p["lost_records"], 0, "{:#}", p["gpu"]);
    assert_eq!(p["dropped_events"], 0);
    // Every event in the totals was received: the percentiles and sites cover them all.
    assert_eq!(p["recorded_events"].as_u64(), Some(copies + gaps));
    assert_eq!(t.exit(0).0.code(), Some(0));
}

#[test]
fn attach_into_a_container_that_has_the_library_at_the_same_path_loads_it_by_that_path() {
    if let Some(why) = no_containers() {
        eprintln!("skipped: attach into a container needs root and unshare: {why}");
        return;
    }
    let dir = TempDir::new("attach-container-path");
    let mut t = start_in_container(LAZY, false, &[]);
    let slots = t.slots();
    let before = t.got(&slots);
    let a = start_attach(&t, &dir, &[], &[]).unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", t.pid)).unwrap();
    let lib = artifact("libsyncspy.so").canonicalize().unwrap();
    assert!(maps.contains(&*lib.to_string_lossy()), "{maps}");
    assert!(!maps.contains("memfd:libsyncspy"), "{maps}");
    assert_eq!(t.cmd("sync 3"), "done sync 3");
    assert_eq!(t.cmd("memcpy 2"), "done memcpy 2");
    // `syncspy detach` from the node finds the control file in the container.
    let r = a.detach_from_outside(t.pid, &dir);
    assert_eq!(count(&r, "cudaStreamSynchronize"), 3, "{r:#}");
    assert_eq!(count(&r, "cudaMemcpy"), 2, "{r:#}");
    assert_eq!(t.got(&slots), before);
    let shm = PathBuf::from(format!("/proc/{}/root/dev/shm", t.pid));
    assert_eq!(std::fs::read_dir(&shm).unwrap().count(), 0);
    assert_eq!(t.exit(3).0.code(), Some(3));
}

/// The absolute paths of the libraries `ldd` names for `file` (the loader's included).
fn ldd_paths(file: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(file).output().expect("ldd");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let p = l.split_once("=> ").map_or(l, |(_, p)| p);
            let p = p.split(" (").next()?.trim();
            p.starts_with('/').then(|| PathBuf::from(p))
        })
        .collect()
}

/// The target chrooted inside its own PID and mount namespaces (issue 37, item 7): a folder
/// holding copies of the program, the simulated runtime and the C libraries they and
/// libsyncspy.so need (at the node's paths), with /proc mounted inside (the library comes
/// from memory: `dlopen("/proc/self/fd/N")`) and its own sticky /dev/shm. Its
/// /proc/PID/maps, read from the node, shows the node's full paths (`<folder>/lib/…`),
/// which its root (`<folder>`) does not hold. The mounts end with the namespace.
fn start_chrooted(exe: &str) -> Target {
    use std::os::unix::fs::PermissionsExt;
    let jail = JobDir(std::env::temp_dir().join(format!(
        "syncspy-test-chroot-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    )));
    let _ = std::fs::remove_dir_all(&jail.0);
    let job = jail.0.join("job");
    std::fs::create_dir_all(&job).unwrap();
    for d in ["proc", "dev/shm", "tmp"] {
        let p = jail.0.join(d);
        std::fs::create_dir_all(&p).unwrap();
        if d != "proc" {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o1777)).unwrap();
        }
    }
    std::fs::copy(exe, job.join("attach-target")).unwrap();
    std::fs::copy(artifact("libsimcudart.so"), job.join("libsimcudart.so")).unwrap();
    for name in ["libcudart.so.13", "libcuda.so.1", "libcupti.so.13"] {
        std::os::unix::fs::symlink("libsimcudart.so", job.join(name)).unwrap();
    }
    let mut libs = Vec::new();
    for f in [
        PathBuf::from(exe),
        artifact("libsimcudart.so"),
        artifact("libsyncspy.so"),
    ] {
        libs.extend(ldd_paths(&f));
    }
    assert!(
        libs.iter().any(|p| p.ends_with("libc.so.6")),
        "no libc.so.6 in ldd's output: {libs:?}"
    );
    for lib in libs {
        let to = jail.0.join(lib.strip_prefix("/").unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&lib, &to).unwrap();
    }
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--pid",
        "--fork",
        "--kill-child",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        "mount -t proc jail-proc \"$1/proc\" && exec chroot \"$1\" /job/attach-target",
        "sh",
    ])
    .arg(&jail.0)
    .env("LD_LIBRARY_PATH", "/job")
    .env_remove("SYNCSPY_DIR")
    .env_remove("LD_PRELOAD");
    Target::spawn(cmd, Box::new(jail), |c| {
        // unshare's one child, which became the target (pid 1 in its namespace).
        let kids = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", c.id()))
            .unwrap_or_default();
        kids.split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .expect("the chrooted process")
    })
}

#[test]
fn attach_into_a_chroot_finds_the_c_library_by_its_device_and_inode() {
    if let Some(why) = no_containers() {
        eprintln!("skipped: attach into a chroot needs root and unshare: {why}");
        return;
    }
    let dir = TempDir::new("attach-chroot");
    let mut t = start_chrooted(NOW);
    // As issue 37 has it: its root is the folder, and its maps name the C library by the
    // node's full path, which is not inside that root.
    let root = std::fs::read_link(format!("/proc/{}/root", t.pid)).unwrap();
    assert_ne!(root, Path::new("/"));
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", t.pid)).unwrap();
    let libc_path = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.ends_with("/libc.so.6"))
        .unwrap_or_else(|| panic!("no libc.so.6 in {maps}"))
        .to_string();
    assert!(libc_path.starts_with(&*root.to_string_lossy()), "{maps}");
    assert!(!PathBuf::from(format!("/proc/{}/root{libc_path}", t.pid)).exists());
    assert_eq!(t.cmd("sync 2"), "done sync 2");
    let slots = t.slots();
    let before = t.got(&slots);
    // As root (the very file through /proc/PID/map_files), then without CAP_SYS_ADMIN and
    // CAP_CHECKPOINT_RESTORE (no map_files: the node's path, whose device and inode are the
    // mapping's); the second attach arms the copy the first loaded from memory.
    let no_map_files = [
        "setpriv",
        "--inh-caps=-sys_admin,-checkpoint_restore",
        "--bounding-set=-sys_admin,-checkpoint_restore",
    ];
    for (round, wrapper) in [&[][..], &no_map_files[..]].into_iter().enumerate() {
        let a = start_attach_under(wrapper, &t, &dir, &[], &[])
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let during = t.got(&slots);
        for (i, (n, _)) in slots.iter().enumerate() {
            if n != "cudaMalloc" {
                assert_ne!(during[i], before[i], "round {round}: {n} not redirected");
            }
        }
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", t.pid)).unwrap();
        assert!(maps.contains("/memfd:libsyncspy.so (deleted)"), "{maps}");
        assert_eq!(t.cmd("sync 5"), "done sync 5");
        assert_eq!(t.cmd("memcpy 3"), "done memcpy 3");
        let r = a.finish();
        assert_eq!(
            count(&r, "cudaStreamSynchronize"),
            5,
            "round {round}: {r:#}"
        );
        assert_eq!(count(&r, "cudaMemcpy"), 3, "round {round}");
        assert_eq!(t.got(&slots), before, "round {round}");
        let shm = PathBuf::from(format!("/proc/{}/root/dev/shm", t.pid));
        assert_eq!(std::fs::read_dir(&shm).unwrap().count(), 0, "round {round}");
    }
    assert_eq!(t.cmd("sync 1"), "done sync 1");
    assert_eq!(t.exit(4).0.code(), Some(4));
}

#[test]
fn attach_refuses_a_container_whose_seccomp_profile_forbids_memfd_and_leaves_it_unharmed() {
    if let Some(why) = no_containers() {
        eprintln!("skipped: attach into a container needs root and unshare: {why}");
        return;
    }
    let dir = TempDir::new("attach-container-seccomp");
    let mut t = start_in_container(NOPLT, true, &[("ATTACH_TARGET_NO_MEMFD", "1")]);
    assert_eq!(t.cmd("sync 2"), "done sync 2");
    let slots = t.slots();
    let before = t.got(&slots);
    let e = start_attach(&t, &dir, &[], &[]).err().expect("refused");
    for what in [
        "memfd_create failed",
        "seccomp",
        "SYNCSPY_DORMANT=1",
        "mount",
    ] {
        assert!(e.contains(what), "{what}: {e}");
    }
    // Nothing loaded, nothing changed, no file left; the job goes on and ends as it would.
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", t.pid)).unwrap();
    assert!(!maps.contains("libsyncspy"), "{maps}");
    assert_eq!(t.got(&slots), before);
    let shm = PathBuf::from(format!("/proc/{}/root/dev/shm", t.pid));
    assert_eq!(std::fs::read_dir(&shm).unwrap().count(), 0);
    assert_eq!(t.cmd("sync 3"), "done sync 3");
    let (st, signals) = t.exit(6);
    assert_eq!(st.code(), Some(6));
    // No EINTR reached the program, and the chosen thread's dead stack was put back.
    assert_eq!(numbers(&signals)[4], 0, "{signals}");
    assert_eq!(numbers(&signals)[5], 0, "{signals}");
}

#[test]
fn the_attacher_killed_while_loading_from_memory_leaves_the_container_unharmed() {
    if let Some(why) = no_containers() {
        eprintln!("skipped: attach into a container needs root and unshare: {why}");
        return;
    }
    let dir = TempDir::new("attach-container-kill");
    let lease = [("SYNCSPY_ATTACH_LEASE_MS", "1000")];
    let mut t = start_in_container(NOW, true, &[]);
    let slots = t.slots();
    let before = t.got(&slots);
    let memfd_maps = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .unwrap()
            .contains("/memfd:libsyncspy.so (deleted)")
    };
    // Killed once memfd_create returned (nothing loaded), then inside the dlopen call (the
    // thread finishes it on its own: the library is loaded, not armed).
    for (step, loaded) in [("call-returned:1", false), ("in-call:2", true)] {
        let mut env = lease.to_vec();
        env.push(("SYNCSPY_TEST_ATTACH_ABORT_AT", step));
        match start_attach(&t, &dir, &[], &env) {
            Ok(mut a) => panic!("step {step}: attached although killed:\n{}", {
                let _ = a.child.kill();
                a.log
            }),
            Err(log) => assert!(log.contains("signal: 9"), "step {step}: {log}"),
        }
        assert_eq!(t.cmd("sync 2"), "done sync 2", "after step {step}");
        // The target's thread finishes a dlopen the attacher was killed in on its own, at its
        // own pace: on a loaded machine that can come after the program answered.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while loaded && !memfd_maps(t.pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(memfd_maps(t.pid), loaded, "after step {step}");
        assert_eq!(t.got(&slots), before, "after step {step}");
        std::thread::sleep(Duration::from_millis(1500));
    }
    // The next attach arms the library the killed one left loaded; counts are exact.
    let a = start_attach(&t, &dir, &[], &lease).unwrap();
    assert_eq!(t.cmd("sync 6"), "done sync 6");
    assert_eq!(count(&a.finish(), "cudaStreamSynchronize"), 6);
    assert_eq!(t.got(&slots), before);
    let (st, signals) = t.exit(9);
    assert_eq!(st.code(), Some(9));
    assert_eq!(numbers(&signals)[4], 0, "{signals}");
}

/// The user another user's job runs as in the tests below (`nobody`).
const NOBODY: u32 = 65534;

/// A folder of root's with `mode` outside /dev/shm (which a container gets its own of), so
/// that a process in a container sees it too; removed on drop.
fn roots_folder(tag: &str, mode: u32) -> JobDir {
    use std::os::unix::fs::PermissionsExt;
    let d = JobDir(std::env::temp_dir().join(format!(
        "syncspy-test-{tag}-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    )));
    let _ = std::fs::remove_dir_all(&d.0);
    std::fs::create_dir(&d.0).unwrap();
    std::fs::set_permissions(&d.0, std::fs::Permissions::from_mode(mode)).unwrap();
    d
}

/// Issue 35, item 4, end to end: a dormant preloaded job of another user whose SYNCSPY_DIR
/// names a folder of root's (0700) is attached by root: the control file goes to the job's
/// shared sticky /dev/shm (the library looks there too), never into root's folder, and the
/// attach records exactly, then leaves nothing behind.
#[test]
fn a_dormant_job_of_another_user_naming_a_folder_of_roots_is_attached_through_dev_shm() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: not root, so no job of another user can be started");
        return;
    }
    // Root's attach records into a shared sticky folder the job can write its segment in.
    let dir = TempDir::new("attach-other-user");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let roots = roots_folder("attach-roots", 0o700);
    let lib = artifact("libsyncspy.so");
    let sim = with_sim_runtime("attach-sim-nobody");
    std::os::unix::fs::symlink(
        artifact("libsimcudart.so"),
        sim.path().join("libcupti.so.13"),
    )
    .unwrap();
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={NOBODY}"))
        .arg(format!("--regid={NOBODY}"))
        .arg("--clear-groups")
        .arg(NOW)
        .env("LD_LIBRARY_PATH", sim.path())
        .env("LD_PRELOAD", &lib)
        .env("SYNCSPY_DORMANT", "1")
        .env("SYNCSPY_DIR", &roots.0);
    let mut t = Target::spawn(cmd, Box::new(sim), |c| c.id() as i32);
    assert_eq!(t.cmd("sync 5"), "done sync 5");
    let in_roots = || -> Vec<String> {
        std::fs::read_dir(&roots.0)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    };
    let shm_control = Path::new("/dev/shm").join(format!("syncspy-attach-{}", t.pid));
    for round in 0..2 {
        let a = start_attach(&t, &dir, &[], &[]).unwrap();
        assert!(
            a.log.contains(&format!(
                "folder {} (its SYNCSPY_DIR) is not used for the attach control file",
                roots.0.display()
            )) && a.log.contains("belongs to root (uid 0)"),
            "{}",
            a.log
        );
        assert!(in_roots().is_empty(), "round {round}: {:?}", in_roots());
        let m = std::fs::symlink_metadata(&shm_control).unwrap();
        assert_eq!((m.uid(), m.mode() & 0o777), (NOBODY, 0o600));
        // The library looks for the control file at most once a second, from a CUDA call.
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(t.cmd("sync 7"), "done sync 7");
        let r = a.finish();
        assert_eq!(
            count(&r, "cudaStreamSynchronize"),
            7,
            "round {round}: {r:#}"
        );
        assert!(in_roots().is_empty(), "round {round}: {:?}", in_roots());
        assert!(!shm_control.exists(), "round {round}");
        assert_eq!(segments_in(dir.path()), 0, "round {round}");
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(t.cmd("sync 3"), "done sync 3");
    }
    assert_eq!(t.exit(4).0.code(), Some(4));
}

/// The same through a container (another mount namespace, its own /dev/shm), by injection:
/// a job of another user in it whose SYNCSPY_DIR names a folder of root's (0755) that the
/// container sees. Its control file and segment go to the container's own /dev/shm; root's
/// folder gets nothing.
#[test]
fn a_job_of_another_user_in_a_container_naming_a_folder_of_roots_is_attached_through_its_dev_shm() {
    if let Some(why) = no_containers() {
        eprintln!("skipped: attach into a container needs root and unshare: {why}");
        return;
    }
    let dir = TempDir::new("attach-container-other-user");
    let roots = roots_folder("attach-container-roots", 0o755);
    let roots_s = roots.0.to_string_lossy().into_owned();
    let mut t = start_in_container_as(NOW, true, &[("SYNCSPY_DIR", &roots_s)], Some(NOBODY));
    let status = std::fs::read_to_string(format!("/proc/{}/status", t.pid)).unwrap();
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("Uid:") && l.contains(&NOBODY.to_string())),
        "{status}"
    );
    assert!(PathBuf::from(format!("/proc/{}/root{roots_s}", t.pid)).is_dir());
    assert_eq!(t.cmd("sync 2"), "done sync 2");
    let a = start_attach(&t, &dir, &[], &[]).unwrap();
    assert!(
        a.log
            .contains(&format!("folder {roots_s} (its SYNCSPY_DIR) is not used"))
            && a.log.contains("goes to /dev/shm"),
        "{}",
        a.log
    );
    let shm = PathBuf::from(format!("/proc/{}/root/dev/shm", t.pid));
    assert!(shm.join("syncspy-attach-1").is_file());
    assert_eq!(segments_in(&shm), 1);
    assert_eq!(std::fs::read_dir(&roots.0).unwrap().count(), 0);
    assert_eq!(t.cmd("sync 6"), "done sync 6");
    let r = a.finish();
    assert_eq!(count(&r, "cudaStreamSynchronize"), 6, "{r:#}");
    assert_eq!(std::fs::read_dir(&roots.0).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(&shm).unwrap().count(), 0);
    assert_eq!(t.exit(2).0.code(), Some(2));
}
