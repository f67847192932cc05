//! `scn-ddp-straggler-cuda`: one rank of the data-parallel job that `scn-ddp-straggler` (the
//! launcher, `syncspy_scenarios::ddp`) starts, one process per rank, with torchrun's
//! environment.
//!
//! The rank takes its device (`LOCAL_RANK` modulo the device count), a stream, and joins the
//! job's NCCL communicator (rank 0 makes the id). Per step: the step's GPU work (`spin` for
//! `--work-us`, then `fill` the gradients with `rank + 1`); on the late rank only, a
//! `cudaStreamSynchronize` at the marked line (the truth line's `sites.late_sync`: it waits
//! for the step's GPU work, the late rank's longest host stall) and `--late-ms` of host work;
//! then, on every rank, `ncclAllReduce` of the gradients on the stream between two timed
//! events (`gpu_ms.allreduce`: this rank's GPU time in the all-reduces, the wait for the late
//! rank included), an event recorded after it and handed to the watchdog thread (it queries
//! it every 100 ms, as PyTorch's does), and a `cudaStreamSynchronize` (the loss's `.item()`:
//! on the other ranks it waits for the late one). At the end the gradients are read back
//! (`cudaMemcpy`) and checked: 1 + 2 + ... + ranks in every element.
//! Expect, per rank: stream_sync = steps (twice that on the late rank), memcpy_sync = 1,
//! implicit_sync = 1 (the gradients' `cudaFree`); no `poll_wait`; the job's straggler is the
//! late rank, at the marked line.

use std::ffi::c_int;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::json;
use syncspy_scenarios::cuda::cudaMemcpyKind::cudaMemcpyDeviceToHost as D2H;
use syncspy_scenarios::cuda::{
    self, cudaEventCreateWithFlags, cudaGetDeviceCount, cudaSetDevice, cudaStream_t,
};
use syncspy_scenarios::ddp::{self, DdpArgs, RankEnv, Watchdog};
use syncspy_scenarios::nccl::{self, ncclComm_t, ncclUniqueId, NCCL_FLOAT32, NCCL_SUM};
use syncspy_scenarios::scenario::{account, calls, ms_since, Ctx};
use syncspy_scenarios::truth::Truth;

/// `cudaEventDisableTiming`: the watchdog's events, as PyTorch makes them.
const DISABLE_TIMING: u32 = 2;

/// Runs `call` and gives the line it was written on (`line!` in a macro is the line of the
/// macro's use): the truth line names the straggler's site by it.
macro_rules! marked {
    ($call:expr) => {{
        $call;
        line!()
    }};
}

fn main() -> ExitCode {
    let me = "scn-ddp-straggler-cuda";
    let a = DdpArgs::parse(me);
    let env = match RankEnv::from_env(&a) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("{me}: {e}");
            return ExitCode::from(2);
        }
    };
    let rank = ddp::int(env.rank);
    let mut c = Ctx::new();
    c.t.merge(&set_device(&env));
    let s = c.r.stream(&mut c.t, false);
    let grad = c.r.device::<f32>(&mut c.t, a.size as usize);
    let comm = match join_job(&mut c, &env) {
        Ok(comm) => comm,
        Err(e) => {
            eprintln!("{me}: rank {rank}: {e}");
            return ExitCode::FAILURE;
        }
    };

    let watchdog = Watchdog::start();
    let mut late_site = None;
    let start = Instant::now();
    for _ in 0..a.steps {
        late_site = step(&mut c, &a, &env, &watchdog, s, grad, comm).or(late_site);
    }
    let loop_ms = ms_since(start);

    let mut head = [0f32; 4];
    let n = head.len().min(a.size as usize);
    // SAFETY: `head` holds `n` floats, `grad` at least as many; the stream is idle.
    unsafe { calls::memcpy(&mut c.t, head.as_mut_ptr().cast(), grad.cast(), n * 4, D2H) };
    let expected = (a.ranks * (a.ranks + 1) / 2) as f32;
    let sum_ok = head[..n].iter().all(|v| *v == expected);

    let dog = watchdog.stop();
    c.t.merge(&dog);
    let async_error = leave_job(&mut c, comm);

    let allreduce_ms = c.spans.total_ms();
    let polls = ddp::polls_json(&dog);
    let t = c.finish();
    let checks = json!({"allreduce_sum": sum_ok, "no_async_error": async_error == 0});
    let ok = sum_ok && async_error == 0;
    let sites = match late_site {
        Some(line) => json!({"late_sync": format!("scn_ddp_straggler.rs:{line}")}),
        None => json!({}),
    };
    let mut v = json!({
        "scenario": ddp::NAME,
        "pid": std::process::id(),
        "rank": env.rank,
        "args": a.to_json(env.rank),
        "gpu_ms": {"allreduce": allreduce_ms},
        "wall_ms": {"loop": loop_ms},
        "polls": polls,
        "sites": sites,
        "checks": checks,
        "ok": ok,
    });
    if let Some(o) = v.as_object_mut() {
        o.extend(account(&t));
    }
    println!("{v}");
    if ok {
        ExitCode::SUCCESS
    } else {
        eprintln!("{me}: rank {rank}: checks failed: {checks}");
        ExitCode::FAILURE
    }
}

/// The rank's device, as `torch.cuda.set_device(local_rank)` picks it; the calls' truth.
fn set_device(env: &RankEnv) -> Truth {
    let mut t0 = Truth::default();
    let mut devices: c_int = 0;
    // SAFETY: a valid out-pointer.
    let rc = t0.call("cudaGetDeviceCount", 0, || unsafe {
        cudaGetDeviceCount(&mut devices)
    });
    cuda::check(rc, "cudaGetDeviceCount");
    let device = (env.local_rank % devices.max(1) as u64) as c_int;
    // SAFETY: a device ordinal below the count.
    let rc = t0.call("cudaSetDevice", 0, || unsafe { cudaSetDevice(device) });
    cuda::check(rc, "cudaSetDevice");
    t0
}

/// The job's communicator: rank 0 makes the id and shares it, every rank joins with it.
fn join_job(c: &mut Ctx, env: &RankEnv) -> Result<ncclComm_t, String> {
    let id = env.share_id(
        || {
            let mut id = ncclUniqueId { internal: [0; 128] };
            // SAFETY: a valid out-pointer.
            let rc = c.t.call("ncclGetUniqueId", 0, || unsafe {
                nccl::ncclGetUniqueId(&mut id)
            });
            nccl::check(rc, "ncclGetUniqueId");
            id
        },
        Duration::from_secs(120),
    )?;
    let (rank, world) = (ddp::int(env.rank), ddp::int(env.world));
    let mut comm = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the id rank 0 made.
    let rc = c.t.call("ncclCommInitRank", 0, || unsafe {
        nccl::ncclCommInitRank(&mut comm, world, id, rank)
    });
    nccl::check(rc, "ncclCommInitRank");
    env.forget_id();
    Ok(comm)
}

/// One training step: the GPU work, the gradients all-reduced (the late rank first reads a
/// value back and works on the host), the watchdog's event, the loss read back. The line
/// of the late rank's read-back, on that rank.
fn step(
    c: &mut Ctx,
    a: &DdpArgs,
    env: &RankEnv,
    watchdog: &Watchdog,
    s: cudaStream_t,
    grad: *mut f32,
    comm: ncclComm_t,
) -> Option<u32> {
    let mut late_site = None;
    // Forward and backward: the step's GPU work, and the gradients (every element
    // `rank + 1`).
    c.k.spin(&mut c.t, s, a.work_us * 1000);
    c.k.fill(&mut c.t, s, grad, a.size, (env.rank + 1) as f32);
    if env.rank == a.late {
        // The straggler reads a value back before its all-reduce, then works on the host:
        // the other ranks' GPUs wait in the all-reduce meanwhile.
        late_site = Some(marked!(calls::stream_sync(&mut c.t, s)));
        std::thread::sleep(Duration::from_millis(a.late_ms));
    }
    c.spans.begin(&mut c.t, &mut c.r, s);
    let (send, recv) = (grad.cast_const().cast(), grad.cast());
    // SAFETY: `grad` is device memory of `size` floats, kept until the end.
    let rc = c.t.call("ncclAllReduce", 0, || unsafe {
        nccl::ncclAllReduce(send, recv, a.size as usize, NCCL_FLOAT32, NCCL_SUM, comm, s)
    });
    nccl::check(rc, "ncclAllReduce");
    c.spans.end(&mut c.t, &mut c.r, s);
    // The watchdog's event for this all-reduce.
    let mut e = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let rc = c.t.call("cudaEventCreateWithFlags", 0, || unsafe {
        cudaEventCreateWithFlags(&mut e, DISABLE_TIMING)
    });
    cuda::check(rc, "cudaEventCreateWithFlags");
    calls::record(&mut c.t, e, s);
    watchdog.watch(e);
    // The loss, read back: `.item()`.
    calls::stream_sync(&mut c.t, s);
    late_site
}

/// The communicator's asynchronous error, then the communicator destroyed.
fn leave_job(c: &mut Ctx, comm: ncclComm_t) -> i32 {
    let mut async_error = 0;
    // SAFETY: a valid out-pointer.
    let rc = c.t.call("ncclCommGetAsyncError", 0, || unsafe {
        nccl::ncclCommGetAsyncError(comm, &mut async_error)
    });
    nccl::check(rc, "ncclCommGetAsyncError");
    // SAFETY: the communicator made above, destroyed once, its work done.
    let rc = c.t.call("ncclCommDestroy", 0, || unsafe {
        nccl::ncclCommDestroy(comm)
    });
    nccl::check(rc, "ncclCommDestroy");
    async_error
}
