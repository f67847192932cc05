//! `scn-event-sync`: the host waits for an event after each step (`cudaEventRecord`, then
//! `cudaEventSynchronize`), a common way to bound how far it runs ahead.
//!
//! Per step: `spin` (`--work-us`), `fill` an array, record the end event, synchronize on it.
//! Expect: event_sync = iters, each about the step's GPU time (`gpu_ms.work`).

use std::process::ExitCode;
use std::time::Instant;

use syncspy_scenarios::scenario::{calls, ms_since, Args, Ctx, Outcome};
use syncspy_scenarios::specs::EVENT_SYNC as SPEC;

fn main() -> ExitCode {
    let a = Args::parse(&SPEC);
    let n = a.size;
    let mut c = Ctx::new();
    let s = c.r.stream(&mut c.t, true);
    let x = c.r.device::<f32>(&mut c.t, n as usize);

    let start = Instant::now();
    for _ in 0..a.iters {
        c.spans.begin(&mut c.t, &mut c.r, s);
        c.k.spin(&mut c.t, s, a.work_ns());
        c.k.fill(&mut c.t, s, x, n, 1.0);
        let done = c.spans.end(&mut c.t, &mut c.r, s);
        calls::event_sync(&mut c.t, done);
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
