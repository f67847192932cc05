//! The simulated NCCL: ranks as threads of this process (one simulator) and as forked
//! processes (one simulator each, as `torchrun` runs them), meeting in a private folder.
//!
//! Tests take turns (`serial`): the folder is set process-wide, and the timing tests must not
//! see each other's work. Tests whose operations fail (a device's fault is sticky) run in
//! forked children. Ranks that are threads share the one simulated device, so their streams
//! are non-blocking: a `cudaMemcpy` of one rank (legacy stream) would otherwise wait for
//! another rank's collective, which waits for the first rank (real NCCL refuses two ranks on
//! one GPU).
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::{c_int, c_void, CStr};
use std::path::PathBuf;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use common::*;
use cudarc::runtime::sys::{cudaEvent_t, cudaStream_t};
use sim::{ncclComm_t, ncclResult_t, ncclUniqueId};
use simcudart as sim;
use syncspy_test_support::TempDir;

use ncclResult_t::*;

const I32: c_int = 2;
const F32: c_int = 7;
const SUM: c_int = 0;
const MAX: c_int = 2;
const AVG: c_int = 4;

/// Runs alone, with a fresh meeting folder set for the simulated NCCL (removed at the end).
/// A rank left waiting by a failed test gives up after 20 s instead of the default 600.
fn setup() -> (MutexGuard<'static, ()>, TempDir) {
    let s = serial();
    let d = TempDir::new("simnccl");
    sim::set_nccl_dir(Some(d.path()));
    sim::set_nccl_timeout(Duration::from_secs(20));
    (s, d)
}

fn unique_id() -> ncclUniqueId {
    let mut id = ncclUniqueId { internal: [0; 128] };
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { sim::ncclGetUniqueId(&mut id) }, ncclSuccess);
    id
}

/// The folder an id names (the simulator's id: 8 bytes of magic, then the path).
fn id_dir(id: &ncclUniqueId) -> PathBuf {
    let bytes: Vec<u8> = id.internal[8..]
        .iter()
        .map(|c| *c as u8)
        .take_while(|b| *b != 0)
        .collect();
    PathBuf::from(String::from_utf8(bytes).unwrap())
}

fn init(nranks: c_int, id: ncclUniqueId, rank: c_int) -> Result<ncclComm_t, ncclResult_t> {
    let mut comm = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    match unsafe { sim::ncclCommInitRank(&mut comm, nranks, id, rank) } {
        ncclSuccess => Ok(comm),
        e => Err(e),
    }
}

/// Device memory holding `values`.
fn device_f32(values: &[f32]) -> *mut f32 {
    let p = device_alloc(values.len() * 4);
    // SAFETY: `p` holds the bytes of `values`.
    let rc = unsafe { sim::cudaMemcpy(p.cast(), values.as_ptr().cast(), values.len() * 4, H2D) };
    assert_eq!(rc, cudaSuccess);
    p.cast()
}

fn read_f32(p: *const f32, n: usize) -> Vec<f32> {
    let mut v = vec![0f32; n];
    // SAFETY: `p` is device memory of at least `n` floats.
    let rc = unsafe { sim::cudaMemcpy(v.as_mut_ptr().cast(), p.cast(), n * 4, D2H) };
    assert_eq!(rc, cudaSuccess);
    v
}

fn event() -> cudaEvent_t {
    let mut e = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { sim::cudaEventCreate(&mut e) }, cudaSuccess);
    e
}

fn record(e: cudaEvent_t, s: cudaStream_t) {
    assert_eq!(sim::cudaEventRecord(e, s), cudaSuccess);
}

fn elapsed_ms(a: cudaEvent_t, b: cudaEvent_t) -> f32 {
    let mut ms = 0f32;
    // SAFETY: a valid out-pointer.
    let rc = unsafe { sim::cudaEventElapsedTime(&mut ms, a, b) };
    assert_eq!(rc, cudaSuccess);
    ms
}

/// `ncclAllReduce` in place on `n` floats.
fn all_reduce(
    buf: *mut f32,
    n: usize,
    op: c_int,
    comm: ncclComm_t,
    s: cudaStream_t,
) -> ncclResult_t {
    // SAFETY: `buf` is device memory of `n` floats, kept until the stream is synchronized.
    unsafe { sim::ncclAllReduce(buf.cast_const().cast(), buf.cast(), n, F32, op, comm, s) }
}

fn last_error() -> String {
    // SAFETY: the simulator returns a NUL-terminated buffer.
    unsafe { CStr::from_ptr(sim::ncclGetLastError(std::ptr::null_mut())) }
        .to_string_lossy()
        .into_owned()
}

/// What one rank of [`all_reduce_step`] saw.
#[derive(Debug)]
struct Seen {
    /// Device time from an event before the all-reduce to one after it.
    gpu_ms: f32,
    /// The stream queried while the late rank was not there yet.
    query_early: cudaError,
    data: Vec<f32>,
}

use cudarc::runtime::sys::cudaError_t as cudaError;

/// One rank: its input is `rank + 1` (4 floats); rank `late` calls the all-reduce `delay`
/// after the others; every rank queries its stream `delay / 2` after its call.
fn all_reduce_step(id: ncclUniqueId, n: c_int, rank: c_int, late: c_int, delay: Duration) -> Seen {
    let comm = init(n, id, rank).unwrap();
    let s = stream(true);
    let buf = device_f32(&[rank as f32 + 1.0; 4]);
    let (e0, e1) = (event(), event());
    if rank == late {
        std::thread::sleep(delay);
    }
    record(e0, s);
    assert_eq!(all_reduce(buf, 4, SUM, comm, s), ncclSuccess);
    record(e1, s);
    std::thread::sleep(delay / 2);
    let query_early = sim::cudaStreamQuery(s);
    assert_eq!(sim::cudaStreamSynchronize(s), cudaSuccess);
    let seen = Seen {
        gpu_ms: elapsed_ms(e0, e1),
        query_early,
        data: read_f32(buf, 4),
    };
    assert_eq!(sim::ncclCommDestroy(comm), ncclSuccess);
    assert_eq!(sim::cudaStreamDestroy(s), cudaSuccess);
    assert_eq!(sim::cudaFree(buf.cast()), cudaSuccess);
    seen
}

#[test]
fn a_collective_completes_only_when_every_rank_has_reached_it() {
    let (_s, _dir) = setup();
    let id = unique_id();
    let delay = Duration::from_millis(80);
    let seen: Vec<Seen> = std::thread::scope(|sc| {
        let ranks: Vec<_> = (0..2)
            .map(|r| sc.spawn(move || all_reduce_step(id, 2, r, 1, delay)))
            .collect();
        ranks.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (early, late) = (&seen[0], &seen[1]);
    assert_eq!(early.data, [3.0; 4], "1 + 2 on every rank");
    assert_eq!(late.data, [3.0; 4]);
    // 40 ms after its call the early rank's all-reduce still waited for the late one; the late
    // rank's was done 40 ms after its own (everyone was there).
    assert_eq!(early.query_early, cudaErrorNotReady);
    assert_eq!(late.query_early, cudaSuccess);
    // The early rank's GPU spent the late rank's delay in the all-reduce (bounds wide enough for
    // a loaded 2-core machine, where a thread may wake late); the late one's hardly any time.
    assert!(
        (50.0..=400.0).contains(&early.gpu_ms),
        "early rank: {} ms in the all-reduce",
        early.gpu_ms
    );
    assert!(late.gpu_ms < 15.0, "late rank: {} ms", late.gpu_ms);
    assert!(
        !id_dir(&id).exists(),
        "the last rank to leave removes the folder"
    );
}

/// Forks `n` children running `child(i)` at once; their exit statuses (`None`: killed after
/// `limit` or signaled). Children talk only through their status (see `in_child`).
fn in_children(n: usize, limit: Duration, child: impl Fn(usize) -> i32) -> Vec<Option<i32>> {
    let pids: Vec<libc::pid_t> = (0..n)
        .map(|i| {
            // SAFETY: the child runs `child` and `_exit`s, never returning into the harness.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| child(i)))
                    .unwrap_or(101);
                // SAFETY: ends the child without the parent's atexit handlers.
                unsafe { libc::_exit(code) };
            }
            pid
        })
        .collect();
    let deadline = Instant::now() + limit;
    let mut status: Vec<Option<Option<i32>>> = vec![None; n];
    while status.iter().any(Option::is_none) {
        let late = Instant::now() > deadline;
        for (pid, slot) in pids.iter().zip(status.iter_mut()) {
            if slot.is_some() {
                continue;
            }
            let mut st = 0;
            // SAFETY: our child; a valid out-pointer.
            if unsafe { libc::waitpid(*pid, &mut st, libc::WNOHANG) } == *pid {
                *slot = Some(libc::WIFEXITED(st).then(|| libc::WEXITSTATUS(st)));
            } else if late {
                // SAFETY: killing and reaping our own child.
                unsafe {
                    libc::kill(*pid, libc::SIGKILL);
                    libc::waitpid(*pid, &mut st, 0);
                }
                *slot = Some(None);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    status.into_iter().flatten().collect()
}

/// 0 when every check passed, else the 1-based index of the first that failed.
fn steps(checks: &[bool]) -> i32 {
    checks.iter().position(|ok| !ok).map_or(0, |i| i as i32 + 1)
}

#[test]
fn four_processes_meet_and_the_early_ranks_gpus_wait_for_the_late_one() {
    let (_s, _dir) = setup();
    let id = unique_id();
    let delay = Duration::from_millis(100);
    let status = in_children(4, Duration::from_secs(30), |rank| {
        let late = 2;
        let seen = all_reduce_step(id, 4, rank as c_int, late, delay);
        let waited = if rank as c_int == late {
            seen.gpu_ms < 20.0
        } else {
            (60.0..=500.0).contains(&seen.gpu_ms)
        };
        steps(&[
            seen.data == [10.0; 4],
            waited,
            (seen.query_early == cudaErrorNotReady) == (rank as c_int != late),
        ])
    });
    assert_eq!(
        status,
        vec![Some(0); 4],
        "per rank: the failed check (1-based)"
    );
    assert!(!id_dir(&id).exists(), "the folder is removed");
}

/// Three ranks as threads: `f(rank, comm, stream)` runs on each after the communicator is made;
/// returns what each returned, after destroying the communicators.
fn three_ranks<T: Send>(f: impl Fn(usize, ncclComm_t, cudaStream_t) -> T + Sync) -> Vec<T> {
    let id = unique_id();
    let f = &f;
    let out = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..3)
            .map(|r| {
                sc.spawn(move || {
                    let comm = init(3, id, r as c_int).unwrap();
                    let s = stream(true);
                    let t = f(r, comm, s);
                    assert_eq!(sim::cudaStreamSynchronize(s), cudaSuccess);
                    assert_eq!(sim::ncclCommDestroy(comm), ncclSuccess);
                    assert_eq!(sim::cudaStreamDestroy(s), cudaSuccess);
                    t
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(!id_dir(&id).exists());
    out
}

#[test]
fn every_collective_computes_its_real_result() {
    let (_s, _dir) = setup();
    let got = three_ranks(|r, comm, s| {
        let x = r as f32 + 1.0;
        // Inputs: rank r holds [x, 10x] (reduce-scatter: [x, 2x, 3x, 4x, 5x, 6x]).
        let input = device_f32(&[x, 10.0 * x]);
        let rs_in = device_f32(&[x, 2.0 * x, 3.0 * x, 4.0 * x, 5.0 * x, 6.0 * x]);
        let (ar, bc, red, ag, rs) = (
            device_f32(&[0.0; 2]),
            device_f32(&[0.0; 2]),
            device_f32(&[-1.0; 2]),
            device_f32(&[0.0; 6]),
            device_f32(&[0.0; 2]),
        );
        let i = input.cast_const().cast::<c_void>();
        // SAFETY: device buffers of the counts given, kept until the stream is synchronized.
        unsafe {
            assert_eq!(
                sim::ncclAllReduce(i, ar.cast(), 2, F32, MAX, comm, s),
                ncclSuccess
            );
            assert_eq!(
                sim::ncclBroadcast(i, bc.cast(), 2, F32, 1, comm, s),
                ncclSuccess
            );
            assert_eq!(
                sim::ncclReduce(i, red.cast(), 2, F32, AVG, 0, comm, s),
                ncclSuccess
            );
            assert_eq!(
                sim::ncclAllGather(i, ag.cast(), 2, F32, comm, s),
                ncclSuccess
            );
            let rsi = rs_in.cast_const().cast();
            assert_eq!(
                sim::ncclReduceScatter(rsi, rs.cast(), 2, F32, SUM, comm, s),
                ncclSuccess
            );
        }
        assert_eq!(sim::cudaStreamSynchronize(s), cudaSuccess);
        [ar, bc, red, ag, rs]
            .iter()
            .zip([2, 2, 2, 6, 2])
            .map(|(p, n)| read_f32(*p, n))
            .collect::<Vec<_>>()
    });
    for (r, g) in got.iter().enumerate() {
        assert_eq!(g[0], [3.0, 30.0], "all-reduce max, rank {r}");
        assert_eq!(g[1], [2.0, 20.0], "broadcast from rank 1, rank {r}");
        let reduced = if r == 0 {
            vec![2.0, 20.0]
        } else {
            vec![-1.0, -1.0]
        };
        assert_eq!(g[2], reduced, "reduce (average) to rank 0, rank {r}");
        assert_eq!(
            g[3],
            [1.0, 10.0, 2.0, 20.0, 3.0, 30.0],
            "all-gather, rank {r}"
        );
        // Rank r's part of the sum 6 * [1, 2, ..., 6].
        let part = [6.0 * (2 * r + 1) as f32, 6.0 * (2 * r + 2) as f32];
        assert_eq!(g[4], part, "reduce-scatter, rank {r}");
    }
}

#[test]
fn a_group_enqueues_at_its_outermost_end_and_sends_meet_receives() {
    let (_s, _dir) = setup();
    let got = three_ranks(|r, comm, s| {
        // A ring: every rank receives from its left neighbour first, then sends to its right.
        // Outside a group, every receive would wait for a send queued behind it.
        let left = ((r + 2) % 3) as c_int;
        let right = ((r + 1) % 3) as c_int;
        let mine = device_f32(&[r as f32; 3]);
        let got = device_f32(&[-1.0; 3]);
        let sum = device_f32(&[1.0]);
        if r == 2 {
            std::thread::sleep(Duration::from_millis(60));
        }
        assert_eq!(sim::ncclGroupStart(), ncclSuccess);
        assert_eq!(sim::ncclGroupStart(), ncclSuccess);
        // SAFETY: device buffers of the counts given, kept until the stream is synchronized.
        unsafe {
            assert_eq!(
                sim::ncclRecv(got.cast(), 3, F32, left, comm, s),
                ncclSuccess
            );
            let m = mine.cast_const().cast();
            assert_eq!(sim::ncclSend(m, 3, F32, right, comm, s), ncclSuccess);
        }
        assert_eq!(sim::ncclGroupEnd(), ncclSuccess);
        // The inner end launched nothing.
        let held = sim::cudaStreamQuery(s);
        assert_eq!(all_reduce(sum, 1, SUM, comm, s), ncclSuccess);
        assert_eq!(sim::cudaStreamQuery(s), cudaSuccess, "still held");
        assert_eq!(sim::ncclGroupEnd(), ncclSuccess);
        // Rank 2 came 60 ms late: the others' groups wait for it on their streams.
        let launched = sim::cudaStreamQuery(s);
        assert_eq!(sim::cudaStreamSynchronize(s), cudaSuccess);
        (held, launched, read_f32(got, 3), read_f32(sum, 1))
    });
    for (r, (held, launched, received, sum)) in got.into_iter().enumerate() {
        assert_eq!(
            held, cudaSuccess,
            "rank {r}: nothing enqueued inside the group"
        );
        if r != 2 {
            assert_eq!(launched, cudaErrorNotReady, "rank {r}: enqueued at the end");
        }
        let left = ((r + 2) % 3) as f32;
        assert_eq!(
            received, [left; 3],
            "rank {r} received its left neighbour's data"
        );
        assert_eq!(sum, [3.0], "rank {r}: the all-reduce of the same group");
    }
    assert_eq!(
        sim::ncclGroupEnd(),
        ncclInvalidUsage,
        "an end without a start"
    );
}

#[test]
fn one_thread_initializes_several_ranks_in_a_group() {
    let (_s, _dir) = setup();
    let id = unique_id();
    let mut comms = [std::ptr::null_mut(); 2];
    assert_eq!(sim::ncclGroupStart(), ncclSuccess);
    for (r, c) in comms.iter_mut().enumerate() {
        // SAFETY: a valid out-pointer.
        let rc = unsafe { sim::ncclCommInitRank(c, 2, id, r as c_int) };
        assert_eq!(rc, ncclSuccess);
    }
    // A rank joins once.
    let mut again = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let rc = unsafe { sim::ncclCommInitRank(&mut again, 2, id, 1) };
    assert_eq!(rc, ncclInvalidUsage);
    assert_eq!(sim::ncclGroupEnd(), ncclSuccess);
    let bufs = [device_f32(&[1.0, 2.0]), device_f32(&[10.0, 20.0])];
    // Two ranks of one communicator on one stream would wait for each other: refused.
    let s = stream(true);
    assert_eq!(sim::ncclGroupStart(), ncclSuccess);
    for (c, b) in comms.iter().zip(bufs) {
        assert_eq!(all_reduce(b, 2, SUM, *c, s), ncclSuccess);
    }
    assert_eq!(sim::ncclGroupEnd(), ncclInvalidUsage);
    assert!(last_error().contains("same stream"), "{}", last_error());
    // A stream each (on a GPU: a device each).
    let streams = [s, stream(true)];
    assert_eq!(sim::ncclGroupStart(), ncclSuccess);
    for ((c, b), s) in comms.iter().zip(bufs).zip(streams) {
        assert_eq!(all_reduce(b, 2, SUM, *c, s), ncclSuccess);
    }
    assert_eq!(sim::ncclGroupEnd(), ncclSuccess);
    for s in streams {
        assert_eq!(sim::cudaStreamSynchronize(s), cudaSuccess);
    }
    for b in bufs {
        assert_eq!(read_f32(b, 2), [11.0, 22.0]);
    }
    let mut n = 0;
    for (r, c) in comms.iter().enumerate() {
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { sim::ncclCommUserRank(*c, &mut n) }, ncclSuccess);
        assert_eq!(n, r as c_int);
        assert_eq!(sim::ncclCommDestroy(*c), ncclSuccess);
    }
    assert!(!id_dir(&id).exists());
}

#[test]
fn bad_arguments_get_error_codes_never_a_crash() {
    let (_s, dir) = setup();
    // SAFETY: (every call below) out-pointers are null or valid; buffers are device memory
    // of the counts given, or deliberately bad pointers the simulator must refuse unread.
    unsafe {
        let mut v = 0;
        assert_eq!(
            sim::ncclGetVersion(std::ptr::null_mut()),
            ncclInvalidArgument
        );
        assert_eq!(sim::ncclGetVersion(&mut v), ncclSuccess);
        assert_eq!(v, 22105);
        assert_eq!(
            sim::ncclGetUniqueId(std::ptr::null_mut()),
            ncclInvalidArgument
        );

        let id = unique_id();
        let mut comm = std::ptr::null_mut();
        assert_eq!(
            sim::ncclCommInitRank(std::ptr::null_mut(), 1, id, 0),
            ncclInvalidArgument
        );
        assert_eq!(
            sim::ncclCommInitRank(&mut comm, 0, id, 0),
            ncclInvalidArgument
        );
        assert_eq!(
            sim::ncclCommInitRank(&mut comm, 1, id, 1),
            ncclInvalidArgument
        );
        assert_eq!(
            sim::ncclCommInitRank(&mut comm, 1, id, -1),
            ncclInvalidArgument
        );
        let zeros = ncclUniqueId { internal: [0; 128] };
        assert_eq!(
            sim::ncclCommInitRank(&mut comm, 1, zeros, 0),
            ncclInvalidArgument
        );
        let gone = unique_id();
        std::fs::remove_dir(id_dir(&gone)).unwrap();
        assert_eq!(
            sim::ncclCommInitRank(&mut comm, 1, gone, 0),
            ncclSystemError
        );
        assert!(last_error().contains("does not exist"), "{}", last_error());

        // A communicator of one rank.
        assert_eq!(sim::ncclCommInitRank(&mut comm, 1, id, 0), ncclSuccess);
        let s = stream(true);
        let buf = device_f32(&[1.0; 4]);
        let (b, c) = (buf.cast_const().cast::<c_void>(), buf.cast::<c_void>());
        let pageable = [0f32; 4];
        let p = pageable.as_ptr().cast::<c_void>();
        let bad_stream = 0x1234usize as cudaStream_t;
        for (what, rc) in [
            (
                "null comm",
                sim::ncclAllReduce(b, c, 4, F32, SUM, std::ptr::null_mut(), s),
            ),
            (
                "unknown comm",
                sim::ncclAllReduce(b, c, 4, F32, SUM, 0x77 as ncclComm_t, s),
            ),
            ("data type", sim::ncclAllReduce(b, c, 4, 12, SUM, comm, s)),
            (
                "negative type",
                sim::ncclAllReduce(b, c, 4, -1, SUM, comm, s),
            ),
            ("operation", sim::ncclAllReduce(b, c, 4, F32, 9, comm, s)),
            ("root", sim::ncclBroadcast(b, c, 4, F32, 1, comm, s)),
            ("peer", sim::ncclSend(b, 4, F32, 3, comm, s)),
            (
                "null send",
                sim::ncclAllReduce(std::ptr::null(), c, 4, F32, SUM, comm, s),
            ),
            (
                "null recv",
                sim::ncclRecv(std::ptr::null_mut(), 4, F32, 0, comm, s),
            ),
            ("pageable", sim::ncclAllReduce(p, c, 4, F32, SUM, comm, s)),
            (
                "past the end",
                sim::ncclAllReduce(b, c, 5, F32, SUM, comm, s),
            ),
            (
                "overflow",
                sim::ncclAllGather(b, c, usize::MAX / 2, I32, comm, s),
            ),
        ] {
            assert_eq!(rc, ncclInvalidArgument, "{what}");
            assert!(!last_error().is_empty(), "{what}: a message");
        }
        assert_eq!(
            sim::ncclAllReduce(b, c, 4, F32, SUM, comm, bad_stream),
            ncclUnhandledCudaError
        );
        // Empty calls need no buffers.
        let null = std::ptr::null_mut();
        assert_eq!(
            sim::ncclAllReduce(null, null, 0, F32, SUM, comm, s),
            ncclSuccess
        );
        assert_eq!(sim::ncclAllReduce(b, c, 4, F32, SUM, comm, s), ncclSuccess);
        assert_eq!(sim::cudaStreamSynchronize(s), cudaSuccess);
        assert_eq!(read_f32(buf, 4), [1.0; 4], "the sum over one rank");

        let mut n = -1;
        assert_eq!(
            sim::ncclCommCount(comm, std::ptr::null_mut()),
            ncclInvalidArgument
        );
        assert_eq!(sim::ncclCommCount(comm, &mut n), ncclSuccess);
        assert_eq!(n, 1);
        assert_eq!(sim::ncclCommCuDevice(comm, &mut n), ncclSuccess);
        assert_eq!(n, 0);
        assert_eq!(
            sim::ncclCommCount(std::ptr::null_mut(), &mut n),
            ncclInvalidArgument
        );
        let mut async_error = ncclInternalError;
        assert_eq!(
            sim::ncclCommGetAsyncError(comm, &mut async_error),
            ncclSuccess
        );
        assert_eq!(async_error, ncclSuccess);

        // An error inside a group is the group's: nothing of it is launched.
        assert_eq!(sim::ncclGroupStart(), ncclSuccess);
        assert_eq!(
            sim::ncclAllReduce(b, c, 4, 42, SUM, comm, s),
            ncclInvalidArgument
        );
        assert_eq!(sim::ncclAllReduce(b, c, 4, F32, SUM, comm, s), ncclSuccess);
        assert_eq!(sim::ncclGroupEnd(), ncclInvalidArgument);
        assert_eq!(sim::cudaStreamQuery(s), cudaSuccess, "nothing was launched");

        assert_eq!(sim::ncclCommDestroy(comm), ncclSuccess);
        assert_eq!(
            sim::ncclCommDestroy(comm),
            ncclInvalidArgument,
            "destroyed twice"
        );
        assert_eq!(
            sim::ncclAllReduce(b, c, 4, F32, SUM, comm, s),
            ncclInvalidArgument
        );
        assert_eq!(sim::ncclCommDestroy(std::ptr::null_mut()), ncclSuccess);
        assert_eq!(sim::ncclCommAbort(std::ptr::null_mut()), ncclSuccess);

        let text = |code| {
            CStr::from_ptr(sim::ncclGetErrorString(code))
                .to_str()
                .unwrap()
        };
        assert_eq!(text(0), "no error");
        assert_eq!(text(4), "invalid argument");
        assert_eq!(text(99), "unknown result code");

        // Without a folder to meet in, ids cannot be made.
        if std::env::var_os("SIMNCCL_DIR").is_none() {
            sim::set_nccl_dir(None);
            let mut id = zeros;
            assert_eq!(sim::ncclGetUniqueId(&mut id), ncclInvalidUsage);
            assert!(last_error().contains("SIMNCCL_DIR"), "{}", last_error());
        }
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "every communicator's folder is removed"
    );
}

#[test]
fn mismatched_calls_and_missing_ranks_fail_instead_of_hanging() {
    let (_s, _dir) = setup();
    // Rank 1 all-reduces 8 floats where rank 0 all-reduces 4.
    let id = unique_id();
    let status = in_children(2, Duration::from_secs(30), |rank| {
        let comm = init(2, id, rank as c_int).unwrap();
        let s = stream(true);
        let buf = device_f32(&[1.0; 8]);
        let queued = all_reduce(buf, 4 + 4 * rank, SUM, comm, s) == ncclSuccess;
        let failed = sim::cudaStreamSynchronize(s) == cudaErrorLaunchFailure;
        let mut e = ncclSuccess;
        // SAFETY: a valid out-pointer.
        let asked = unsafe { sim::ncclCommGetAsyncError(comm, &mut e) } == ncclSuccess;
        let said = last_error().contains("rank");
        steps(&[queued, failed, asked && e == ncclInvalidUsage, said])
    });
    assert_eq!(
        status,
        vec![Some(0); 2],
        "per rank: the failed check (1-based)"
    );

    // Rank 1 aborts instead of joining the all-reduce; rank 0 fails within a second or so.
    let id = unique_id();
    let status = in_children(2, Duration::from_secs(30), |rank| {
        let comm = init(2, id, rank as c_int).unwrap();
        if rank == 1 {
            return steps(&[sim::ncclCommAbort(comm) == ncclSuccess]);
        }
        let s = stream(true);
        let buf = device_f32(&[1.0; 4]);
        let start = Instant::now();
        let queued = all_reduce(buf, 4, SUM, comm, s) == ncclSuccess;
        let failed = sim::cudaStreamSynchronize(s) == cudaErrorLaunchFailure;
        let quick = start.elapsed() < Duration::from_secs(5);
        let mut e = ncclSuccess;
        // SAFETY: a valid out-pointer.
        unsafe { sim::ncclCommGetAsyncError(comm, &mut e) };
        let destroyed = sim::ncclCommDestroy(comm) == ncclSuccess;
        steps(&[queued, failed, quick, e == ncclRemoteError, destroyed])
    });
    assert_eq!(
        status,
        vec![Some(0); 2],
        "per rank: the failed check (1-based)"
    );
    assert!(!id_dir(&id).exists(), "both left: the folder is gone");

    // A rank whose process dies is noticed too.
    let id = unique_id();
    let status = in_children(2, Duration::from_secs(30), |rank| {
        let comm = init(2, id, rank as c_int).unwrap();
        if rank == 1 {
            // SAFETY: ends this child at once, as a crash would.
            unsafe { libc::_exit(0) };
        }
        let s = stream(true);
        let buf = device_f32(&[1.0; 4]);
        let queued = all_reduce(buf, 4, SUM, comm, s) == ncclSuccess;
        let failed = sim::cudaStreamSynchronize(s) == cudaErrorLaunchFailure;
        steps(&[queued, failed, last_error().contains("exited")])
    });
    assert_eq!(
        status,
        vec![Some(0); 2],
        "per rank: the failed check (1-based)"
    );
}

/// Kernel records of the simulated CUPTI: (name, start, end).
static KERNELS: std::sync::Mutex<Vec<(String, u64, u64)>> = std::sync::Mutex::new(Vec::new());

unsafe extern "C" fn request(buf: *mut *mut u8, size: *mut usize, max: *mut usize) {
    let b = vec![0u8; 1 << 16].into_boxed_slice();
    // SAFETY: CUPTI's out-pointers.
    unsafe {
        *size = b.len();
        *max = 0;
        *buf = Box::into_raw(b).cast();
    }
}

unsafe extern "C" fn complete(
    _ctx: cudarc::driver::sys::CUcontext,
    _stream: u32,
    buf: *mut u8,
    size: usize,
    valid: usize,
) {
    use cudarc::cupti::sys::CUpti_ActivityKernel10 as K;
    use std::mem::offset_of;
    let mut rec: *mut c_void = std::ptr::null_mut();
    // SAFETY: the buffer `request` made, with `valid` bytes of kernel records (the only kind
    // enabled), read at CUDA 13.0's offsets.
    unsafe {
        while sim::cuptiActivityGetNextRecord(buf, valid, &mut rec) == 0 {
            let r = rec as *const u8;
            let at = |off: usize| std::ptr::read_unaligned(r.add(off).cast::<u64>());
            let name = at(offset_of!(K, name)) as *const std::ffi::c_char;
            let name = CStr::from_ptr(name).to_string_lossy().into_owned();
            KERNELS
                .lock()
                .unwrap()
                .push((name, at(offset_of!(K, start)), at(offset_of!(K, end))));
        }
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(buf, size)));
    }
}

#[test]
fn cupti_reports_each_collective_as_an_nccl_kernel_spanning_the_wait() {
    let (_s, _dir) = setup();
    const KIND_KERNEL: u32 =
        cudarc::cupti::sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_KERNEL as u32;
    // SAFETY: callbacks of CUPTI's signatures.
    let rc = unsafe { sim::cuptiActivityRegisterCallbacks(Some(request), Some(complete)) };
    assert_eq!(rc, 0);
    assert_eq!(sim::cuptiActivityEnable(KIND_KERNEL), 0);
    let id = unique_id();
    let delay = Duration::from_millis(40);
    std::thread::scope(|sc| {
        for r in 0..2 {
            sc.spawn(move || all_reduce_step(id, 2, r, 1, delay));
        }
    });
    assert_eq!(sim::cuptiActivityFlushAll(1), 0);
    assert_eq!(sim::cuptiActivityDisable(KIND_KERNEL), 0);
    let got = std::mem::take(&mut *KERNELS.lock().unwrap());
    let ms: Vec<f64> = got
        .iter()
        .filter(|(name, ..)| name == "ncclDevKernel_AllReduce_Sum_f32_RING_LL")
        .map(|(_, start, end)| (end - start) as f64 / 1e6)
        .collect();
    assert_eq!(ms.len(), 2, "one kernel per rank: {got:?}");
    // The early rank's kernel ran while it waited for the late one.
    let (long, short) = (ms[0].max(ms[1]), ms[0].min(ms[1]));
    assert!(long >= 30.0 && short < 15.0, "{ms:?}");
}
