//! End to end, without a GPU: the real `libsyncspy.so`, preloaded by the real `syncspy run`,
//! into `cudacalls` running against the simulated CUDA runtime. Each test compares the
//! report with the ground truth the program printed about itself.
//!
//! Needs the workspace built (`cargo build --workspace`): the tests use `syncspy`,
//! `libsyncspy.so` and `libsimcudart.so` from the same target folder as themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use serde_json::Value;

use syncspy_test_support::{artifact, TempDir};

struct Run {
    out: Output,
    report: Value,
    /// One ground-truth line per process that ran `cudacalls`.
    truth: Vec<Value>,
}

impl Run {
    fn code(&self) -> i32 {
        self.out.status.code().unwrap_or(-1)
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }

    fn procs(&self) -> &Vec<Value> {
        self.report["processes"]
            .as_array()
            .expect("processes array")
    }

    fn proc_of(&self, pid: u64) -> &Value {
        self.procs()
            .iter()
            .find(|p| p["pid"].as_u64() == Some(pid))
            .unwrap_or_else(|| panic!("no process {pid} in report; stderr:\n{}", self.stderr()))
    }
}

/// `syncspy run --sim --report R -- CMD...` with a private SYNCSPY_DIR and extra env. GPU
/// idle tracing is off unless `env` says otherwise: these tests compare host stalls with the
/// program's own account (tests/gpu_idle_sim.rs covers the GPU side).
fn syncspy_run(tag: &str, env: &[(&str, &str)], cmd: &[&str]) -> Run {
    let dir = TempDir::new(tag);
    let report = dir.path().join("report.json");
    let out = Command::new(artifact("syncspy"))
        .args(["run", "--sim", "--report"])
        .arg(&report)
        .arg("--")
        .args(cmd)
        .env("SYNCSPY_DIR", dir.path())
        .env("SIMCUDA_TIME_SCALE", "1")
        .env("SYNCSPY_GPU_IDLE", "off")
        .envs(env.iter().copied())
        .output()
        .expect("start syncspy");
    let text = std::fs::read_to_string(&report).unwrap_or_else(|e| {
        panic!(
            "no report ({e}); stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let report: Value = serde_json::from_str(&text).expect("report is JSON");
    let truth = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("{\"pid\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Run { out, report, truth }
}

fn cudacalls() -> String {
    artifact("cudacalls").to_string_lossy().into_owned()
}

fn count(v: &Value) -> u64 {
    v["count"].as_u64().unwrap_or(0)
}

/// Every API the program called that syncspy records as a stall must appear in the report
/// with the same count and bytes; APIs it counts as non-stalling appear under
/// `non_stall_calls`. Returns nothing; panics with the first difference.
fn assert_matches_truth(p: &Value, truth: &Value) {
    let apis = &p["apis"];
    let calls = &p["non_stall_calls"];
    for (api, t) in truth["calls"].as_object().unwrap() {
        if !is_hooked(api) {
            continue;
        }
        let stalls = count(&apis[api]);
        let quiet = count(&calls[api]);
        if is_query(api) {
            // Every query is a call that did not stall; the runs of them that waited are
            // poll_wait events on top (polling_until_ready_is_one_poll_wait_per_spin).
            assert_eq!(quiet, count(t), "{api}: queries");
            continue;
        }
        assert_eq!(
            stalls + quiet,
            count(t),
            "{api}: report has {stalls} stalls + {quiet} non-stalling calls, program made {}",
            count(t)
        );
        let bytes =
            apis[api]["bytes"].as_u64().unwrap_or(0) + calls[api]["bytes"].as_u64().unwrap_or(0);
        assert_eq!(bytes, t["bytes"].as_u64().unwrap(), "{api}: bytes");
    }
}

fn is_hooked(api: &str) -> bool {
    syncspy_abi_names().contains(&api) || is_query(api)
}

fn is_query(api: &str) -> bool {
    ["cudaStreamQuery", "cudaStreamQuery_ptsz", "cudaEventQuery"].contains(&api)
}

fn syncspy_abi_names() -> Vec<&'static str> {
    vec![
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaStreamSynchronize_ptsz",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy_ptds",
        "cudaMemcpy2D",
        "cudaMemcpy3D",
        "cudaMemcpyPeer",
        "cudaMemcpyAsync",
        "cudaMemcpyAsync_ptsz",
        "cudaMemcpy2DAsync",
        "cudaMemcpy3DAsync",
        "cudaFree",
        "cudaFreeHost",
        "cudaMallocHost",
        "cudaHostAlloc",
        "cudaHostRegister",
        "cudaHostUnregister",
        "cudaMemset",
    ]
}

fn kind<'a>(p: &'a Value, k: &str) -> &'a Value {
    &p["kinds"][k]
}

#[test]
fn every_call_is_classified_and_counted_exactly() {
    let c = cudacalls();
    let ops = [
        "busy=s1:2000",
        "sync=s1",
        "sync-ptsz=sp",
        "device-sync",
        "event-sync=s1",
        "memcpy=h2d:4096",
        "memcpy=d2h:8192:pinned",
        "memcpy-ptds=d2d:1024",
        "memcpy-default=h2d:512",
        "memcpy2d=h2d:64:8",
        "memcpy3d=d2h:16:4:2",
        "peer=2048",
        "async=h2d:1000:pageable:s1",
        "async=d2h:3000:pageable:s1",
        "async=h2d:1000:pinned:s1",
        "async=d2h:1000:registered:s1",
        "async=d2d:1000:pageable:s1",
        "async=h2h:512:pinned:s1",
        "async-ptsz=h2d:100:pageable:sp",
        "async2d=h2d:32:4:pageable:s1",
        "async3d=h2d:8:2:2:pinned:s1",
        "free",
        "free-null",
        "host-alloc=65536",
        "malloc-host=4096",
        "register=8192",
        "memset=4096",
        "memset-host=4096",
    ];
    let mut cmd = vec![c.as_str(), "--iters", "3"];
    cmd.extend(ops);
    let r = syncspy_run("exact", &[], &cmd);
    assert_eq!(r.code(), 0, "stderr:\n{}", r.stderr());
    assert_eq!(r.truth.len(), 1);
    let pid = r.truth[0]["pid"].as_u64().unwrap();
    let p = r.proc_of(pid);
    assert_matches_truth(p, &r.truth[0]);

    // Kinds, per the classification rules (3 iterations of the op list, plus set-up and
    // tear-down calls of cudacalls itself: 2 cudaMallocHost, 1 cudaHostRegister, one final
    // cudaDeviceSynchronize, 1 cudaHostUnregister, 2 cudaFreeHost, 2 cudaFree).
    assert_eq!(count(kind(p, "stream_sync")), 3 * 2);
    assert_eq!(count(kind(p, "device_sync")), 3 + 1);
    assert_eq!(count(kind(p, "event_sync")), 3);
    // h2d, pinned d2h, cudaMemcpyDefault h2d, 2D, 3D, and the async host-to-host copy (fully
    // synchronous even between pinned buffers); the d2d `_ptds` copy and the peer copy do
    // not block the host and are counted as non-stalling.
    assert_eq!(count(kind(p, "memcpy_sync")), 3 * 6);
    // pageable h2d, pageable d2h, ptsz pageable h2d, pageable 2D.
    assert_eq!(count(kind(p, "memcpy_pageable")), 3 * 4);
    assert_eq!(
        kind(p, "memcpy_pageable")["bytes"].as_u64().unwrap(),
        3 * (1000 + 3000 + 100 + 128)
    );
    // free, host-alloc+free, malloc-host+free, register+unregister, memset-host; set-up/tear-down 8.
    assert_eq!(count(kind(p, "implicit_sync")), 3 * 8 + 8);
    // Non-stalling: pinned h2d, registered d2h, d2d async, pinned 3D async; cudaFree(NULL);
    // device memset.
    let quiet = &p["non_stall_calls"];
    assert_eq!(count(&quiet["cudaMemcpyAsync"]), 3 * 3);
    assert_eq!(count(&quiet["cudaMemcpy3DAsync"]), 3);
    assert_eq!(count(&quiet["cudaFree"]), 3);
    assert_eq!(count(&quiet["cudaMemset"]), 3);
    assert_eq!(count(&quiet["cudaMemcpy_ptds"]), 3);
    assert_eq!(count(&quiet["cudaMemcpyPeer"]), 3);
    assert_eq!(p["dropped_events"].as_u64(), Some(0));

    // Directions, per kind (3 iterations). Blocking copies: h2d 4096 + cudaMemcpyDefault
    // h2d 512 (resolved from pointer attributes) + 2D h2d 512; d2h 8192 + 3D d2h 128; no
    // d2d. Pageable async: h2d 1000 + ptsz 100 + 2D 128; d2h 3000.
    let copies = &p["copies"];
    let dir = |k: &str, d: &str| {
        (
            count(&copies[k][d]),
            copies[k][d]["bytes"].as_u64().unwrap_or(0),
        )
    };
    assert_eq!(dir("memcpy_sync", "h2d"), (3 * 3, 3 * (4096 + 512 + 512)));
    assert_eq!(dir("memcpy_sync", "d2h"), (3 * 2, 3 * (8192 + 128)));
    assert!(copies["memcpy_sync"].get("d2d").is_none());
    assert_eq!(
        dir("memcpy_pageable", "h2d"),
        (3 * 3, 3 * (1000 + 100 + 128))
    );
    assert_eq!(dir("memcpy_pageable", "d2h"), (3, 3 * 3000));
    assert_eq!(dir("memcpy_sync", "h2h"), (3, 3 * 512));
}

#[test]
fn polling_until_ready_is_one_poll_wait_per_spin() {
    let c = cudacalls();
    // Per iteration: 20 ms of stream work polled with cudaStreamQuery; 5 ms polled through
    // an event; a poll of the idle stream (ready at once: no wait); a sync in the middle of
    // nothing (its own stall, no poll run open).
    let r = syncspy_run(
        "poll",
        &[],
        &[
            &c,
            "--iters",
            "4",
            "busy=s1:20000",
            "poll=s1",
            "busy=s1:5000",
            "poll-event=s1",
            "poll=s1",
            "sync=s1",
        ],
    );
    assert_eq!(r.code(), 0, "stderr:\n{}", r.stderr());
    let t = &r.truth[0];
    let p = r.proc_of(t["pid"].as_u64().unwrap());
    assert_matches_truth(p, t);
    let (sq, eq) = (
        &t["polls"]["cudaStreamQuery"],
        &t["polls"]["cudaEventQuery"],
    );
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap();
    assert_eq!((n(sq, "spins"), n(sq, "waited")), (8, 4), "{t}");
    assert_eq!((n(eq, "spins"), n(eq, "waited")), (4, 4), "{t}");
    // One poll_wait per spin that saw the work pending, with exactly its not-ready answers.
    let pw = kind(p, "poll_wait");
    assert_eq!(count(pw), 8, "{pw}");
    assert_eq!(
        pw["polls"].as_u64(),
        Some(n(sq, "not_ready") + n(eq, "not_ready"))
    );
    for (api, truth, busy_ns) in [
        ("cudaStreamQuery", sq, 20_000_000),
        ("cudaEventQuery", eq, 5_000_000),
    ] {
        let a = &p["apis"][api];
        assert_eq!(count(a), 4, "{api}: {a}");
        assert_eq!(a["polls"].as_u64(), truth["not_ready"].as_u64(), "{api}");
        // Each wait runs from the first not-ready answer to the ready one: it covers the
        // GPU's busy time (less the moment before the first answer) and no more than the
        // program's own spin.
        let total = a["total_ns"].as_u64().unwrap();
        assert!(total >= 4 * (busy_ns - 1_000_000), "{api}: {total} ns");
        assert!(total <= n(truth, "wait_ns"), "{api}: {total} > {truth}");
    }
    // The waits are host stalls like the others: in stall_ns and in the report's sites.
    let stall: u64 = p["kinds"]
        .as_object()
        .unwrap()
        .values()
        .map(|k| k["total_ns"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(p["stall_ns"].as_u64().unwrap(), stall);
    assert!(stall >= pw["total_ns"].as_u64().unwrap());
    assert!(p["sites"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["kind"] == "poll_wait"));
    assert_eq!(count(kind(p, "stream_sync")), 4);
}

/// The rules that end a polling run (record::poll_step): a stall on the thread ends it at
/// the stall's start, as a wait that never saw the work done; queries of another object
/// neither join nor end it; only the query of its own object that finds the work done does.
#[test]
fn polling_runs_end_at_a_stall_or_at_their_own_objects_ready_answer() {
    let c = cudacalls();
    // Per iteration: (1) one not-ready query of s1, then a sync of s1: a run of 1 poll,
    // ended by the sync. (2) s1 busy for 20 ms: one query of s1 opens a run; a spin on an
    // event recorded on s1, until it is done (another object: its not-ready answers are not
    // the run's and open no run of their own); then a spin on s1, whose first answer (ready:
    // the event said the work is done) ends the run.
    let r = syncspy_run(
        "poll-rules",
        &[],
        &[
            &c,
            "--iters",
            "3",
            "busy=s1:5000",
            "query=s1",
            "sync=s1",
            "busy=s1:20000",
            "query=s1",
            "poll-event=s1",
            "poll=s1",
        ],
    );
    assert_eq!(r.code(), 0, "stderr:\n{}", r.stderr());
    let t = &r.truth[0];
    let p = r.proc_of(t["pid"].as_u64().unwrap());
    assert_matches_truth(p, t);
    let n = |api: &str, k: &str| t["polls"][api][k].as_u64().unwrap();
    // The program's own view: every event spin waited; every s1 spin found the work done.
    assert_eq!(n("cudaEventQuery", "waited"), 3, "{t}");
    assert_eq!(n("cudaStreamQuery", "not_ready"), 0, "{t}");
    // Two runs per iteration, both of cudaStreamQuery and of 1 poll (the opening query):
    // the one the sync ended and the one the s1 spin's ready answer ended. The event spin,
    // inside an open run, made none.
    let sq = &p["apis"]["cudaStreamQuery"];
    assert_eq!(count(sq), 6, "{sq}");
    assert_eq!(sq["polls"].as_u64(), Some(6), "{sq}");
    assert_eq!(count(&p["apis"]["cudaEventQuery"]), 0, "{}", p["apis"]);
    assert_eq!(count(kind(p, "poll_wait")), 6);
    assert_eq!(count(kind(p, "stream_sync")), 3);
    // The s1 runs cover most of its 20 ms of work each.
    let total = sq["total_ns"].as_u64().unwrap();
    assert!(total >= 3 * 15_000_000, "{total} ns");
}

/// A thread that sleeps between its queries (NCCL's watchdog: a `cudaEventQuery` every
/// 100 ms, or a few milliseconds apart when new collectives wake it) is checking, not
/// waiting: its not-ready answers make no `poll_wait`, neither when a later answer finds the
/// work done nor when the thread then synchronizes; a spin beside them is still one
/// `poll_wait` of its own length.
#[test]
fn queries_with_sleeps_between_them_are_checks_not_poll_waits() {
    let c = cudacalls();
    let mut ops: Vec<&str> = vec![&c, "--iters", "2", "busy=s1:250000"];
    // Checks every 100 ms until the work is done (the fourth finds it done).
    for _ in 0..4 {
        ops.extend(["query=s1", "sleep=100000"]);
    }
    // Checks 4 ms apart (a watchdog woken by each new collective) until 30 ms of work is done.
    ops.push("busy=s1:30000");
    for _ in 0..10 {
        ops.extend(["query=s1", "sleep=4000"]);
    }
    // A spin on 20 ms of work.
    ops.extend(["busy=s1:20000", "poll=s1"]);
    // Checks, then (after a sleep) a sync that waits for the rest.
    ops.extend([
        "busy=s1:300000",
        "query=s1",
        "sleep=100000",
        "query=s1",
        "sleep=50000",
    ]);
    ops.push("sync=s1");
    let r = syncspy_run("watchdog", &[], &ops);
    assert_eq!(r.code(), 0, "stderr:\n{}", r.stderr());
    let t = &r.truth[0];
    let p = r.proc_of(t["pid"].as_u64().unwrap());
    let n = |k: &str| t["polls"]["cudaStreamQuery"][k].as_u64().unwrap();
    // The program's own view: its checks saw the work pending (3 + 7 + 2 per iteration).
    assert!(n("not_ready") >= 2 * 10, "{t}");
    let pw = kind(p, "poll_wait");
    assert_eq!(count(pw), 2, "one per spin, none for the checks: {pw}");
    let total = pw["total_ns"].as_u64().unwrap();
    assert!(total < 2 * 40_000_000, "the spins' waits only: {total} ns");
    assert!(total >= 2 * 15_000_000, "{total} ns");
    assert_eq!(count(kind(p, "stream_sync")), 2);
    // Every query is still counted as a call.
    assert_matches_truth(p, t);
}

#[test]
fn stall_durations_are_the_waits_that_happened() {
    let c = cudacalls();
    // 5 × (20 ms of stream work, then wait for it); then 5 × (10 ms of work, pageable copy
    // that must wait behind it).
    let r = syncspy_run(
        "durations",
        &[],
        &[
            &c,
            "--iters",
            "5",
            "busy=s1:20000",
            "sync=s1",
            "busy=s1:10000",
            "async=d2h:4096:pageable:s1",
        ],
    );
    assert_eq!(r.code(), 0, "stderr:\n{}", r.stderr());
    let t = &r.truth[0];
    let p = r.proc_of(t["pid"].as_u64().unwrap());
    let ss = kind(p, "stream_sync");
    assert_eq!(count(ss), 5);
    let total = ss["total_ns"].as_u64().unwrap();
    let truth_total = t["calls"]["cudaStreamSynchronize"]["total_ns"]
        .as_u64()
        .unwrap();
    // syncspy times the real call only; the program's own timing also includes the hook.
    assert!(
        total <= truth_total,
        "syncspy {total} ns > program's {truth_total} ns"
    );
    assert!(total >= 5 * 19_000_000, "5 waits of 20 ms, got {total} ns");
    assert!(
        truth_total - total < 5 * 2_000_000,
        "hook overhead per call should be far below 2 ms"
    );
    let p50 = ss["p50_ns"].as_u64().unwrap();
    assert!((19_000_000..40_000_000).contains(&p50), "p50 {p50}");
    let pg = kind(p, "memcpy_pageable");
    assert_eq!(count(pg), 5);
    assert!(pg["total_ns"].as_u64().unwrap() >= 5 * 9_000_000);
    // The report's stall total is the sum of its kinds.
    let stall: u64 = p["kinds"]
        .as_object()
        .unwrap()
        .values()
        .map(|k| k["total_ns"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(p["stall_ns"].as_u64().unwrap(), stall);
}

#[test]
fn many_writer_threads_lose_nothing() {
    let c = cudacalls();
    let r = syncspy_run(
        "threads",
        &[],
        &[
            &c,
            "--threads",
            "6",
            "--iters",
            "300",
            "sync=s1",
            "sync=sn",
            "async=d2h:64:pageable:s1",
        ],
    );
    assert_eq!(r.code(), 0, "stderr:\n{}", r.stderr());
    let p = r.proc_of(r.truth[0]["pid"].as_u64().unwrap());
    assert_matches_truth(p, &r.truth[0]);
    assert_eq!(count(kind(p, "stream_sync")), 6 * 300 * 2);
    assert_eq!(count(kind(p, "memcpy_pageable")), 6 * 300);
    assert_eq!(p["dropped_events"].as_u64(), Some(0));
    assert_eq!(p["lost_records"].as_u64(), Some(0));
}

#[test]
fn threads_whose_first_cuda_calls_race_are_all_counted() {
    // Eight threads released together make the process's first CUDA calls: all but one
    // find the library initialising and must wait for it, whether they saw it start or
    // raced it for the start. Repeated, since the race is one of timing.
    let c = cudacalls();
    for round in 0..6 {
        let r = syncspy_run(
            "first-call-race",
            &[],
            &[&c, "--threads", "8", "sync=s1", "device-sync"],
        );
        assert_eq!(r.code(), 0, "round {round}, stderr:\n{}", r.stderr());
        let p = r.proc_of(r.truth[0]["pid"].as_u64().unwrap());
        assert_eq!(p["dropped_events"].as_u64(), Some(0), "round {round}");
        assert_matches_truth(p, &r.truth[0]);
        assert_eq!(count(kind(p, "stream_sync")), 8, "round {round}");
    }
}

#[test]
fn a_reader_that_falls_behind_learns_how_much_it_lost_and_totals_stay_exact() {
    let c = cudacalls();
    // A 16-record ring and thousands of back-to-back events: the reader, polling every few
    // tens of milliseconds, cannot keep up.
    let r = syncspy_run(
        "behind",
        &[("SYNCSPY_RING", "16")],
        &[&c, "--iters", "3000", "sync=s1"],
    );
    assert_eq!(r.code(), 0, "stderr:\n{}", r.stderr());
    let p = r.proc_of(r.truth[0]["pid"].as_u64().unwrap());
    let ss = kind(p, "stream_sync");
    assert_eq!(
        count(ss),
        3000,
        "header totals are exact whatever the ring lost"
    );
    let lost = p["lost_records"].as_u64().unwrap();
    assert!(lost > 0, "expected the reader to fall behind");
    // Every event of the process was either seen or counted lost.
    let events: u64 = p["kinds"].as_object().unwrap().values().map(count).sum();
    let recorded: u64 = p["kinds"]
        .as_object()
        .unwrap()
        .values()
        .map(|k| k["recorded_count"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(
        recorded + lost,
        events,
        "recorded {recorded} + lost {lost} != {events}"
    );
}

#[test]
fn fork_child_gets_its_own_segment() {
    let c = cudacalls();
    let r = syncspy_run(
        "fork",
        &[],
        &[&c, "--fork", "--iters", "4", "sync=s1", "memcpy=h2d:100"],
    );
    assert_eq!(r.code(), 0, "stderr:\n{}", r.stderr());
    assert_eq!(r.truth.len(), 2, "parent and child each print their truth");
    let pids: Vec<u64> = r.truth.iter().map(|t| t["pid"].as_u64().unwrap()).collect();
    assert_ne!(pids[0], pids[1]);
    for t in &r.truth {
        let p = r.proc_of(t["pid"].as_u64().unwrap());
        assert_matches_truth(p, t);
        assert_eq!(count(kind(p, "stream_sync")), 4);
        assert_eq!(count(kind(p, "memcpy_sync")), 4);
    }
}

#[test]
fn spawned_children_are_followed() {
    let c = cudacalls();
    let script = format!("{c} sync=s1 && {c} sync=s1 sync=s1");
    let r = syncspy_run("spawn", &[], &["sh", "-c", &script]);
    assert_eq!(r.code(), 0, "stderr:\n{}", r.stderr());
    assert_eq!(r.truth.len(), 2);
    for t in &r.truth {
        let p = r.proc_of(t["pid"].as_u64().unwrap());
        assert_matches_truth(p, t);
    }
    // The shell never called CUDA: it has no segment, so no entry.
    assert_eq!(r.procs().len(), 2);
}

#[test]
fn syncspy_off_forwards_everything_and_records_nothing() {
    let c = cudacalls();
    let r = syncspy_run(
        "off",
        &[("SYNCSPY_OFF", "1")],
        &[
            &c,
            "--iters",
            "3",
            "busy=s1:1000",
            "sync=s1",
            "memcpy=h2d:4096",
        ],
    );
    assert_eq!(r.code(), 0, "stderr:\n{}", r.stderr());
    assert_eq!(r.truth.len(), 1, "the program ran normally");
    assert_eq!(
        r.truth[0]["calls"]["cudaStreamSynchronize"]["count"].as_u64(),
        Some(3)
    );
    assert!(r.procs().is_empty(), "no segment, no process in the report");
}

#[test]
fn exit_code_is_the_commands_own() {
    let c = cudacalls();
    let r = syncspy_run(
        "exit",
        &[],
        &["sh", "-c", &format!("{c} sync=s1 >/dev/null; exit 7")],
    );
    assert_eq!(r.code(), 7);
    assert_eq!(r.report["exit_code"].as_i64(), Some(7));
    assert_eq!(r.procs().len(), 1);
}

#[test]
fn call_sites_name_the_calling_function() {
    let c = cudacalls();
    let r = syncspy_run(
        "sites",
        &[],
        &[&c, "--iters", "3", "busy=s1:3000", "sync=s1"],
    );
    assert_eq!(r.code(), 0, "stderr:\n{}", r.stderr());
    let p = r.proc_of(r.truth[0]["pid"].as_u64().unwrap());
    let sites = p["sites"].as_array().unwrap();
    assert!(!sites.is_empty());
    let top = &sites[0];
    assert_eq!(top["kind"], "stream_sync");
    assert_eq!(top["count"].as_u64(), Some(3));
    let frames: Vec<&str> = top["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(
        frames.iter().take(6).any(|f| f.contains("run_op")),
        "expected cudacalls::run_op near the top of {frames:#?}"
    );
    // Sorted by total stall time.
    let totals: Vec<u64> = sites
        .iter()
        .map(|s| s["total_ns"].as_u64().unwrap())
        .collect();
    assert!(totals.windows(2).all(|w| w[0] >= w[1]));
}

#[test]
fn a_runtime_loaded_with_rtld_local_is_still_interposed_and_forwarded() {
    let prog = artifact("cudacalls-dlopen").to_string_lossy().into_owned();
    let r = syncspy_run("dlopen", &[], &[&prog, "4", "2000"]);
    assert_eq!(r.code(), 0, "stderr:\n{}", r.stderr());
    let p = r.proc_of(r.truth[0]["pid"].as_u64().unwrap());
    let ss = kind(p, "stream_sync");
    assert_eq!(count(ss), 4);
    // The first sync is also the library's first call: creating the segment overlaps part of
    // that wait (the library's own time, counted in overhead_ns). The other three are whole.
    assert!(ss["total_ns"].as_u64().unwrap() >= 3 * 1_900_000, "{ss}");
    assert!(ss["p50_ns"].as_u64().unwrap() >= 1_900_000, "{ss}");
}

#[test]
fn stalls_that_differ_only_deep_in_the_stack_get_their_own_sites() {
    let c = cudacalls();
    // Same immediate caller, same stack depth, different callers above it, alternating:
    // the per-thread stack cache must not merge them.
    let r = syncspy_run(
        "deep",
        &[],
        &[&c, "--iters", "5", "sync-a=s1", "sync-b=s1", "sync-a=s1"],
    );
    assert_eq!(r.code(), 0, "stderr:\n{}", r.stderr());
    let p = r.proc_of(r.truth[0]["pid"].as_u64().unwrap());
    let sites: Vec<&Value> = p["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "stream_sync")
        .collect();
    let with = |name: &str| -> u64 {
        sites
            .iter()
            .filter(|s| {
                s["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f.as_str().unwrap().contains(name))
            })
            .map(|s| count(s))
            .sum()
    };
    assert_eq!(with("path_a"), 10, "sites: {sites:#?}");
    assert_eq!(with("path_b"), 5, "sites: {sites:#?}");
    assert!(
        p["stack_cache_hits"].as_u64().unwrap_or(0) > 0,
        "repeated stacks should hit the cache"
    );
}

/// The report's counts by kind and the driver functions it names, for `drivercalls MODE`.
fn driver_program(mode: &str) {
    let prog = artifact("drivercalls").to_string_lossy().into_owned();
    let r = syncspy_run(mode, &[], &[&prog, mode, "3"]);
    assert_eq!(r.code(), 0, "stderr:\n{}", r.stderr());
    let stdout = String::from_utf8_lossy(&r.out.stdout).into_owned();
    let summary: Value = stdout
        .lines()
        .find(|l| l.starts_with("{\"kinds\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .expect("drivercalls prints its kinds");
    let p = r.proc_of(r.truth[0]["pid"].as_u64().unwrap());
    // Exactly the program's own account, kind by kind, and nothing else.
    let truth = summary["kinds"].as_object().unwrap();
    let seen = p["kinds"].as_object().unwrap();
    for (k, n) in truth {
        assert_eq!(
            count(&seen[k]),
            n.as_u64().unwrap(),
            "{mode}: {k}: {seen:?}"
        );
    }
    assert_eq!(
        seen.iter().filter(|(_, v)| count(v) > 0).count(),
        truth.len(),
        "{mode}: {seen:?}"
    );
    for (api, n) in summary["non_stall"].as_object().unwrap() {
        assert_eq!(
            count(&p["non_stall_calls"][api]),
            n.as_u64().unwrap(),
            "{mode}: {api}"
        );
    }
    // Reported at the level the program called: driver functions, by their names.
    assert_matches_truth_driver(p, &r.truth[0]);
    assert_eq!(p["dropped_events"].as_u64(), Some(0));
}

/// Every driver function the program called is in the report with its count (stalls plus
/// calls that did not stall) and bytes.
fn assert_matches_truth_driver(p: &Value, truth: &Value) {
    for (api, t) in truth["calls"].as_object().unwrap() {
        let n = count(&p["apis"][api]) + count(&p["non_stall_calls"][api]);
        assert_eq!(n, count(t), "{api}");
        let bytes = p["apis"][api]["bytes"].as_u64().unwrap_or(0)
            + p["non_stall_calls"][api]["bytes"].as_u64().unwrap_or(0);
        assert_eq!(bytes, t["bytes"].as_u64().unwrap(), "{api}: bytes");
    }
}

/// Polling through the driver (`cuStreamQuery`, `cuEventQuery`), found each way a program
/// finds driver functions: one poll_wait per spin that saw the work pending, with exactly
/// the program's not-ready answers, under the driver names; every query also a call that did
/// not stall.
#[test]
fn driver_polling_is_one_poll_wait_per_spin_however_the_driver_was_found() {
    let prog = artifact("drivercalls").to_string_lossy().into_owned();
    for mode in ["procaddr", "static", "dlsym"] {
        let r = syncspy_run(mode, &[("DRIVERCALLS_POLL", "1")], &[&prog, mode, "3"]);
        assert_eq!(r.code(), 0, "stderr:\n{}", r.stderr());
        let t = &r.truth[0];
        let p = r.proc_of(t["pid"].as_u64().unwrap());
        for api in ["cuStreamQuery", "cuEventQuery"] {
            let truth = &t["polls"][api];
            // A spin that found the 1 ms of work already done (a busy machine) did not wait.
            let waited = truth["waited"].as_u64().unwrap();
            assert!(waited >= 1, "{mode}: {t}");
            let a = &p["apis"][api];
            assert_eq!(count(a), waited, "{mode} {api}: {}", p["apis"]);
            assert_eq!(a["polls"], truth["not_ready"], "{mode} {api}");
            assert_eq!(
                count(&p["non_stall_calls"][api]),
                count(&t["calls"][api]),
                "{mode} {api}"
            );
        }
        let waited: u64 = ["cuStreamQuery", "cuEventQuery"]
            .iter()
            .map(|a| t["polls"][a]["waited"].as_u64().unwrap())
            .sum();
        assert_eq!(count(kind(p, "poll_wait")), waited, "{mode}");
    }
}

#[test]
fn driver_api_found_with_dlsym_and_cu_get_proc_address_is_seen_exactly() {
    driver_program("procaddr");
}

#[test]
fn driver_api_found_as_the_static_runtime_finds_it_is_seen_exactly() {
    driver_program("static");
}

#[test]
fn driver_api_found_with_dlsym_by_exact_name_is_seen_exactly() {
    driver_program("dlsym");
}

#[test]
fn runtime_calls_that_reach_the_driver_are_recorded_once_at_the_runtime_level() {
    // The simulated runtime makes its syncs, copies, frees and pinned allocations through
    // the driver functions it got from cuGetProcAddress, as NVIDIA's does: each runtime call
    // arrives at the driver wrappers inside the runtime hook.
    let c = cudacalls();
    let ops = [
        "busy=s1:1000",
        "sync=s1",
        "sync-ptsz=sp",
        "device-sync",
        "event-sync=s1",
        "memcpy=h2d:4096",
        "async=d2h:3000:pageable:s1",
        "async=h2d:1000:pinned:s1",
        "free",
        "malloc-host=4096",
        "register=8192",
    ];
    let mut cmd = vec![c.as_str(), "--iters", "2"];
    cmd.extend(ops);
    let r = syncspy_run("nodouble", &[], &cmd);
    assert_eq!(r.code(), 0, "stderr:\n{}", r.stderr());
    let p = r.proc_of(r.truth[0]["pid"].as_u64().unwrap());
    assert_matches_truth(p, &r.truth[0]);
    // Set-up and tear-down of cudacalls: 2 cudaMallocHost, 1 cudaHostRegister, a final
    // device sync, 1 cudaHostUnregister, 2 cudaFreeHost, 2 cudaFree.
    assert_eq!(count(kind(p, "stream_sync")), 2 * 2);
    assert_eq!(count(kind(p, "device_sync")), 2 + 1);
    assert_eq!(count(kind(p, "memcpy_sync")), 2);
    assert_eq!(count(kind(p, "memcpy_pageable")), 2);
    assert_eq!(count(&p["non_stall_calls"]["cudaMemcpyAsync"]), 2);
    for section in ["apis", "non_stall_calls"] {
        for api in p[section].as_object().unwrap().keys() {
            assert!(
                api.starts_with("cuda"),
                "{section}: {api} seen at the driver too"
            );
        }
    }
}
