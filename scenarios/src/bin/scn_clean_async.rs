//! `scn-clean-async`: the negative control. The same work as `scn-item-in-loop`, but the
//! counts stay on the GPU (the counter accumulates) and the host reads the total once, at
//! the end: no synchronization inside the loop, so the host's work of the next step
//! (`--host-us`) overlaps the GPU's work of this one.
//!
//! Expect: one stream_sync (the final read, about the whole loop's GPU time `gpu_ms.loop`),
//! no per-step stall of any kind.

use std::process::ExitCode;
use std::time::Instant;

use syncspy_scenarios::cuda::cudaMemcpyKind::cudaMemcpyDeviceToHost as D2H;
use syncspy_scenarios::scenario::{calls, ms_since, Args, Ctx, Outcome};
use syncspy_scenarios::specs::CLEAN_ASYNC as SPEC;
use syncspy_scenarios::truth::Kind;

fn main() -> ExitCode {
    let a = Args::parse(&SPEC);
    let n = a.size;
    let mut c = Ctx::new();
    let s = c.r.stream(&mut c.t, false);
    let x = c.r.device::<f32>(&mut c.t, n as usize);
    let count = c.r.device::<u32>(&mut c.t, 1);
    let host = c.r.pinned::<u32>(&mut c.t, 1);
    // SAFETY: `count` is 4 bytes of device memory.
    unsafe { calls::memset_async(&mut c.t, count.cast(), 4, s) };

    let start = Instant::now();
    for _ in 0..a.iters {
        a.host_work();
        c.spans.begin(&mut c.t, &mut c.r, s);
        c.k.spin(&mut c.t, s, a.work_ns());
        c.k.fill(&mut c.t, s, x, n, 1.0);
        c.k.scale(&mut c.t, s, x, n / 3, -1.0);
        c.k.count_positive(&mut c.t, s, x, n, count);
        c.spans.end(&mut c.t, &mut c.r, s);
    }
    let enqueue_ms = ms_since(start);
    // SAFETY: 4 bytes of device memory to 4 bytes of pinned memory.
    unsafe {
        let (dst, src) = (host.cast(), count.cast_const().cast());
        calls::memcpy_async(&mut c.t, Kind::NonStall, dst, src, 4, D2H, s);
    }
    calls::stream_sync(&mut c.t, s);
    let loop_ms = ms_since(start);
    // SAFETY: the copy completed with the stream.
    let total = u64::from(unsafe { host.read() });
    calls::device_sync(&mut c.t);
    let (work, envelope) = (c.spans.total_ms(), c.spans.envelope_ms());
    let t = c.finish();

    let mut o = Outcome::new(SPEC, a, t);
    o.gpu_ms.insert("work", work);
    o.gpu_ms.insert("loop", envelope);
    o.wall_ms.insert("loop", loop_ms);
    o.wall_ms.insert("enqueue", enqueue_ms);
    o.checks.insert("count", total == a.iters * (n - n / 3));
    o.print()
}
