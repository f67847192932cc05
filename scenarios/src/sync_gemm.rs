//! The body of `scn-sync-small-gemm` and `scn-sync-big-gemm`: n x n GEMMs on the legacy
//! default stream, with `cudaDeviceSynchronize` after each (or, with `--async`, once at the
//! end).
//!
//! One GEMM runs first and is waited for (`cudaDeviceSynchronize`): the first launch of a
//! kernel loads it, which is no part of a step.
//!
//! Ground truth: `gpu_ms.warmup` is that first GEMM's GPU time (an event pair around it), `gpu_ms.loop`
//! from the first timed GEMM's start to the last one's end, `gpu_ms.work` the warm-up's and
//! every timed GEMM's GPU time (what the syncs of the synchronizing variant wait for),
//! `gpu_ms.waited` the warm-up's plus the loop's (what the two syncs of `--async` wait for).
//! `per_step_us` gives wall, GPU and their difference per timed step: in the synchronizing
//! variant that difference is what
//! each synchronization costs beyond the kernel (the GPU idles while the host wakes up and
//! launches the next GEMM), about constant whatever n, so its share of a step shrinks as the
//! GEMM grows. `--check` fills A with 1 and B with 0.5 first, then reads C back (one
//! `cudaMemcpy`) and verifies that every element is n / 2 (in the simulator only up to
//! `SIMCUDA_GEMM_COMPUTE_MAX_N`).
//!
//! Expect: device_sync = iters + 2 (sync) or 2 (`--async`), each about one GEMM (sync) or the
//! whole loop (`--async`); three implicit syncs (the frees).

use std::process::ExitCode;
use std::ptr::null_mut;
use std::time::Instant;

use serde_json::json;

use crate::cuda::cudaMemcpyKind::cudaMemcpyDeviceToHost as D2H;
use crate::scenario::{calls, ms_since, Args, Ctx, GpuSpans, Outcome, Spec};

pub fn run(spec: Spec) -> ExitCode {
    let a = Args::parse(&spec);
    let n = a.size as usize;
    let mut c = Ctx::new();
    // The legacy default stream, as a straightforward program uses it.
    let s = null_mut();
    let ma = c.r.device::<f32>(&mut c.t, n * n);
    let mb = c.r.device::<f32>(&mut c.t, n * n);
    let mc = c.r.device::<f32>(&mut c.t, n * n);
    if a.check {
        // Without --check the matrices stay uninitialized: a GEMM's time does not depend on
        // the values, and the simulator then need not touch gigabytes of host RAM.
        c.k.fill(&mut c.t, s, ma, (n * n) as u64, 1.0);
        c.k.fill(&mut c.t, s, mb, (n * n) as u64, 0.5);
    }

    // One GEMM before the timed loop, waited for: the first launch of a kernel loads it.
    let mut warmup = GpuSpans::default();
    warmup.begin(&mut c.t, &mut c.r, s);
    c.k.gemm(&mut c.t, s, ma, mb, mc, n);
    warmup.end(&mut c.t, &mut c.r, s);
    calls::device_sync(&mut c.t);

    let start = Instant::now();
    for _ in 0..a.iters {
        c.spans.begin(&mut c.t, &mut c.r, s);
        c.k.gemm(&mut c.t, s, ma, mb, mc, n);
        c.spans.end(&mut c.t, &mut c.r, s);
        if !a.async_mode {
            calls::device_sync(&mut c.t);
        }
    }
    calls::device_sync(&mut c.t);
    let loop_ms = ms_since(start);
    let (work, envelope) = (c.spans.total_ms(), c.spans.envelope_ms());
    let warm = warmup.total_ms();
    let mut result = None;
    if a.check {
        let mut host = vec![0f32; n * n];
        // SAFETY: n*n floats on both sides.
        unsafe {
            calls::memcpy(
                &mut c.t,
                host.as_mut_ptr().cast(),
                mc.cast_const().cast(),
                n * n * 4,
                D2H,
            )
        };
        let want = n as f32 / 2.0;
        result = Some(host.iter().all(|v| *v == want));
    }
    let t = c.finish();

    let mut o = Outcome::new(spec, a, t);
    o.gpu_ms.insert("warmup", warm);
    o.gpu_ms.insert("loop", envelope);
    o.gpu_ms.insert("work", warm + work);
    o.gpu_ms.insert("waited", warm + envelope);
    o.wall_ms.insert("loop", loop_ms);
    let iters = a.iters as f64;
    let (wall_us, gpu_us) = (loop_ms * 1e3 / iters, work * 1e3 / iters);
    o.extra.insert(
        "per_step_us".into(),
        json!({"wall": wall_us, "gpu": gpu_us, "overhead": wall_us - gpu_us}),
    );
    if let Some(ok) = result {
        o.checks.insert("result", ok);
    }
    o.print()
}
