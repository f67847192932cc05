//! `scn-item-in-loop`: a scalar read back every step, the way PyTorch 2.11's `.item()` does it
//! (a `cudaMemcpyAsync` into pinned memory, then `cudaStreamSynchronize`), so the host waits
//! for the whole step's GPU work every step.
//!
//! Per step: host work (`--host-us`, a sleep), then on the GPU `spin` (`--work-us`), `fill` x
//! with 1, `scale` its first third by -1, `count_positive` into a device counter, copy the count
//! to pinned memory (`--pageable`: pageable, the copy stalls, as `.cpu()`'s), sync the stream,
//! check the count (real results: size - size/3). Expect: stream_sync = iters, each about the
//! step's GPU time (`gpu_ms.work`); the pinned copies non-stalling (or memcpy_pageable = iters).

use std::process::ExitCode;
use std::time::Instant;

use syncspy_scenarios::cuda::cudaMemcpyKind::cudaMemcpyDeviceToHost as D2H;
use syncspy_scenarios::scenario::{calls, ms_since, Args, Ctx, Outcome};
use syncspy_scenarios::specs::ITEM_IN_LOOP as SPEC;
use syncspy_scenarios::truth::Kind;

fn main() -> ExitCode {
    let a = Args::parse(&SPEC);
    let n = a.size;
    let mut c = Ctx::new();
    let s = c.r.stream(&mut c.t, false);
    let x = c.r.device::<f32>(&mut c.t, n as usize);
    let count = c.r.device::<u32>(&mut c.t, 1);
    let (host, copy_kind) = readback_buffer(&mut c, a.pageable);
    let expected = n - n / 3;
    let mut counts_ok = true;

    let start = Instant::now();
    for _ in 0..a.iters {
        a.host_work();
        c.spans.begin(&mut c.t, &mut c.r, s);
        c.k.spin(&mut c.t, s, a.work_ns());
        c.k.fill(&mut c.t, s, x, n, 1.0);
        c.k.scale(&mut c.t, s, x, n / 3, -1.0);
        // SAFETY: `count` is 4 bytes of device memory; `host` 4 bytes of host memory.
        unsafe {
            calls::memset_async(&mut c.t, count.cast(), 4, s);
            c.k.count_positive(&mut c.t, s, x, n, count);
            c.spans.end(&mut c.t, &mut c.r, s);
            let (dst, src) = (host.cast(), count.cast_const().cast());
            calls::memcpy_async(&mut c.t, copy_kind, dst, src, 4, D2H, s);
        }
        calls::stream_sync(&mut c.t, s);
        // SAFETY: the copy into `host` completed with the stream.
        counts_ok &= u64::from(unsafe { host.read() }) == expected;
    }
    let loop_ms = ms_since(start);
    calls::device_sync(&mut c.t);
    let work = c.spans.total_ms();
    // From each step's work to the next step's (the 4-byte copy, then idle through the host's
    // work): the GPU idle behind the syncs, measured by the program's own events.
    let between = c.spans.between_ms();
    let t = c.finish();

    let mut o = Outcome::new(SPEC, a, t);
    o.gpu_ms.insert("work", work);
    o.gpu_ms.insert("between", between);
    o.wall_ms.insert("loop", loop_ms);
    o.checks.insert("count", counts_ok);
    o.print()
}

/// Where each step's count is read back to, and the kind of that copy: 4 bytes of pinned memory
/// (not a stall), or with `--pageable` of pageable memory (a `memcpy_pageable`, the thread
/// waiting for the step's work in the copy).
fn readback_buffer(c: &mut Ctx, pageable: bool) -> (*mut u32, Kind) {
    if pageable {
        (Box::leak(Box::new(0u32)), Kind::MemcpyPageable)
    } else {
        (c.r.pinned::<u32>(&mut c.t, 1), Kind::NonStall)
    }
}
