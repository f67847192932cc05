//! `scn-nonzero-dynamic-shape`: a data-dependent shape, as `torch.nonzero` or boolean-mask
//! indexing produce: the host needs a count the GPU computes to size the next launch, so it
//! copies the count back with a blocking `cudaMemcpy` every step.
//!
//! Per step: the previous step's count sizes a `scale` launch; `spin` (`--work-us`); `fill`
//! x with 1, `scale` a step-dependent prefix by -1; `count_positive`; `cudaMemcpy` of the
//! count (4 bytes) to the host, checked against the expected value (real results).
//! Expect: memcpy_sync = iters (4 bytes each), each about the step's GPU time (`gpu_ms.work`).

use std::ffi::c_void;
use std::process::ExitCode;
use std::ptr::null_mut;
use std::time::Instant;

use syncspy_scenarios::cuda::cudaMemcpyKind::cudaMemcpyDeviceToHost as D2H;
use syncspy_scenarios::scenario::{calls, ms_since, Args, Ctx, Outcome};
use syncspy_scenarios::specs::NONZERO_DYNAMIC_SHAPE as SPEC;

fn main() -> ExitCode {
    let a = Args::parse(&SPEC);
    let n = a.size;
    let mut c = Ctx::new();
    // The legacy default stream: cudaMemcpy is ordered after the kernels there.
    let s = null_mut();
    let x = c.r.device::<f32>(&mut c.t, n as usize);
    let count = c.r.device::<u32>(&mut c.t, 1);
    let mut previous: Option<u64> = None;
    let mut counts_ok = true;

    let start = Instant::now();
    for i in 0..a.iters {
        let negatives = i * n / (2 * a.iters);
        c.spans.begin(&mut c.t, &mut c.r, s);
        if let Some(m) = previous {
            c.k.scale(&mut c.t, s, x, m, 0.5);
        }
        c.k.spin(&mut c.t, s, a.work_ns());
        c.k.fill(&mut c.t, s, x, n, 1.0);
        c.k.scale(&mut c.t, s, x, negatives, -1.0);
        // SAFETY: `count` is 4 bytes of device memory.
        unsafe { calls::memset_async(&mut c.t, count.cast(), 4, s) };
        c.k.count_positive(&mut c.t, s, x, n, count);
        c.spans.end(&mut c.t, &mut c.r, s);
        let mut host: u32 = 0;
        // SAFETY: 4 bytes on both sides.
        unsafe {
            let dst = (&mut host as *mut u32).cast::<c_void>();
            calls::memcpy(&mut c.t, dst, count.cast_const().cast(), 4, D2H)
        };
        counts_ok &= u64::from(host) == n - negatives;
        previous = Some(u64::from(host));
    }
    let loop_ms = ms_since(start);
    calls::device_sync(&mut c.t);
    let work = c.spans.total_ms();
    let t = c.finish();

    let mut o = Outcome::new(SPEC, a, t);
    o.gpu_ms.insert("work", work);
    o.wall_ms.insert("loop", loop_ms);
    o.checks.insert("count", counts_ok);
    o.print()
}
