//! `scn-implicit-free`: a temporary buffer allocated and freed every step with `cudaMalloc` /
//! `cudaFree`. `cudaFree` synchronizes the device, so each step's free waits for the GPU work
//! queued before it (what a caching allocator exists to avoid).
//!
//! Per step: `cudaMalloc` (`--size` bytes), `spin` (`--work-us`), `fill` the buffer,
//! `cudaFree`.
//! Expect: implicit_sync = iters, each about the step's GPU time (`gpu_ms.work`); nothing else
//! but the final device_sync.

use std::process::ExitCode;
use std::time::Instant;

use syncspy_scenarios::scenario::{calls, ms_since, Args, Ctx, Outcome};
use syncspy_scenarios::specs::IMPLICIT_FREE as SPEC;

fn main() -> ExitCode {
    let a = Args::parse(&SPEC);
    let n = a.size / 4;
    let mut c = Ctx::new();
    let s = c.r.stream(&mut c.t, false);

    let start = Instant::now();
    for _ in 0..a.iters {
        let buf = calls::malloc(&mut c.t, (n * 4) as usize).cast::<f32>();
        c.spans.begin(&mut c.t, &mut c.r, s);
        c.k.spin(&mut c.t, s, a.work_ns());
        c.k.fill(&mut c.t, s, buf, n, 1.0);
        c.spans.end(&mut c.t, &mut c.r, s);
        calls::free(&mut c.t, buf.cast());
    }
    let loop_ms = ms_since(start);
    calls::device_sync(&mut c.t);
    let work = c.spans.total_ms();
    let t = c.finish();

    let mut o = Outcome::new(SPEC, a, t);
    o.gpu_ms.insert("work", work);
    o.wall_ms.insert("loop", loop_ms);
    o.print()
}
