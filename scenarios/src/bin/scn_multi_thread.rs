//! `scn-multi-thread`: several host threads, each with its own stream, each synchronizing its
//! stream after every step: syncspy must count every thread's waits in the one process.
//!
//! Per thread and step: `spin` (`--work-us`), `fill` the thread's array, `cudaStreamSynchronize`.
//! At its end each thread frees its array (`cudaFree`: an implicit sync).
//! Expect: stream_sync = threads x iters, about the threads' summed step GPU times
//! (`gpu_ms.work`); implicit_sync = threads.

use std::process::ExitCode;
use std::time::Instant;

use syncspy_scenarios::kernels::Kernels;
use syncspy_scenarios::scenario::{calls, ms_since, Args, Ctx, GpuSpans, Outcome, Resources};
use syncspy_scenarios::specs::MULTI_THREAD as SPEC;
use syncspy_scenarios::truth::Truth;

/// One thread's loop; returns its account and its GPU time in ms.
fn worker(k: &Kernels, a: Args) -> (Truth, f64) {
    let mut t = Truth::default();
    let mut r = Resources::default();
    let mut spans = GpuSpans::default();
    let s = r.stream(&mut t, true);
    let x = r.device::<f32>(&mut t, a.size as usize);
    for _ in 0..a.iters {
        spans.begin(&mut t, &mut r, s);
        k.spin(&mut t, s, a.work_ns());
        k.fill(&mut t, s, x, a.size, 1.0);
        spans.end(&mut t, &mut r, s);
        calls::stream_sync(&mut t, s);
    }
    let work = spans.total_ms();
    r.release(&mut t);
    (t, work)
}

fn main() -> ExitCode {
    let a = Args::parse(&SPEC);
    let mut c = Ctx::new();
    let start = Instant::now();
    let mut work = 0.0;
    let k = &c.k;
    let results: Vec<(Truth, f64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..a.threads)
            .map(|_| scope.spawn(move || worker(k, a)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker thread panicked"))
            .collect()
    });
    for (t, ms) in &results {
        c.t.merge(t);
        work += ms;
    }
    let loop_ms = ms_since(start);
    calls::device_sync(&mut c.t);
    let t = c.finish();

    let mut o = Outcome::new(SPEC, a, t);
    o.gpu_ms.insert("work", work);
    o.wall_ms.insert("loop", loop_ms);
    o.print()
}
