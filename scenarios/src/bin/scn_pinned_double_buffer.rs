//! `scn-pinned-double-buffer`: the same work as `scn-pageable-h2d`, done the healthy way. The
//! batches live in pinned memory (`cudaMallocHost`); copies go on a copy stream and compute on
//! a compute stream, into two device buffers used in turn; events order them (compute waits
//! for its batch's copy, a copy waits until the compute that last used its buffer is done), so
//! copies overlap compute and the host never waits inside the loop.
//!
//! Expect: no pageable copy, no synchronization in the loop: the `cudaMemcpyAsync`s are
//! non-stalling, and the one stall is the final `cudaDeviceSynchronize`, about the whole
//! loop's GPU time (`gpu_ms.loop`, from the first copy's start to the last kernel's end).

use std::process::ExitCode;
use std::time::Instant;

use syncspy_scenarios::cuda::cudaMemcpyKind::{
    cudaMemcpyDeviceToHost as D2H, cudaMemcpyHostToDevice as H2D,
};
use syncspy_scenarios::scenario::{calls, ms_since, Args, Ctx, GpuSpans, Outcome};
use syncspy_scenarios::specs::PINNED_DOUBLE_BUFFER as SPEC;
use syncspy_scenarios::truth::Kind;

fn main() -> ExitCode {
    let a = Args::parse(&SPEC);
    let n = (a.size / 4) as usize;
    let bytes = n * 4;
    let mut c = Ctx::new();
    let batches: Vec<*mut f32> = (0..2).map(|_| c.r.pinned::<f32>(&mut c.t, n)).collect();
    for (b, p) in batches.iter().enumerate() {
        // SAFETY: `n` floats of pinned memory, not yet used by the device.
        unsafe { std::slice::from_raw_parts_mut(*p, n).fill(b as f32 + 1.0) };
    }
    let dev: Vec<*mut f32> = (0..2).map(|_| c.r.device::<f32>(&mut c.t, n)).collect();
    let copy = c.r.stream(&mut c.t, true);
    let comp = c.r.stream(&mut c.t, true);
    let copied: Vec<_> = (0..2).map(|_| c.r.event(&mut c.t, false)).collect();
    let consumed: Vec<_> = (0..2).map(|_| c.r.event(&mut c.t, false)).collect();
    let mut copies = GpuSpans::default();
    let mut kernels = GpuSpans::default();
    let mut whole = GpuSpans::default();

    let start = Instant::now();
    whole.begin(&mut c.t, &mut c.r, copy);
    for i in 0..a.iters as usize {
        let b = i % 2;
        if i >= 2 {
            calls::wait_event(&mut c.t, copy, consumed[b]);
        }
        copies.begin(&mut c.t, &mut c.r, copy);
        // SAFETY: pinned and device buffers of `bytes`; the batch is never written again.
        unsafe {
            let (dst, src) = (dev[b].cast(), batches[b].cast_const().cast());
            calls::memcpy_async(&mut c.t, Kind::NonStall, dst, src, bytes, H2D, copy)
        };
        copies.end(&mut c.t, &mut c.r, copy);
        calls::record(&mut c.t, copied[b], copy);
        calls::wait_event(&mut c.t, comp, copied[b]);
        kernels.begin(&mut c.t, &mut c.r, comp);
        c.k.spin(&mut c.t, comp, a.work_ns());
        c.k.scale(&mut c.t, comp, dev[b], n as u64, 2.0);
        kernels.end(&mut c.t, &mut c.r, comp);
        calls::record(&mut c.t, consumed[b], comp);
    }
    whole.end(&mut c.t, &mut c.r, comp);
    let enqueue_ms = ms_since(start);
    // Read the first elements of each buffer back into its batch (no longer needed), in
    // compute order.
    let m = 4.min(n);
    for b in 0..2 {
        // SAFETY: `m` floats on both sides; the copy stream is done with the batch (the compute
        // stream waited for its last copy).
        unsafe {
            let (dst, src) = (batches[b].cast(), dev[b].cast_const().cast());
            calls::memcpy_async(&mut c.t, Kind::NonStall, dst, src, m * 4, D2H, comp)
        };
    }
    calls::device_sync(&mut c.t);
    let loop_ms = ms_since(start);
    // Buffer b was last filled from batch b (value b + 1) and scaled by 2.
    let used = a.iters.min(2) as usize;
    let result = (0..used).all(|b| {
        // SAFETY: `batches[b]` holds `n >= m` pinned floats, and the device_sync above
        // completed every copy into it, so nothing writes it any more.
        unsafe { std::slice::from_raw_parts(batches[b], m) }
            .iter()
            .all(|v| *v == 2.0 * (b as f32 + 1.0))
    });
    let (copy_ms, kernel_ms, envelope) = (copies.total_ms(), kernels.total_ms(), whole.total_ms());
    let t = c.finish();

    let mut o = Outcome::new(SPEC, a, t);
    o.gpu_ms.insert("copy", copy_ms);
    o.gpu_ms.insert("compute", kernel_ms);
    o.gpu_ms.insert("loop", envelope);
    o.wall_ms.insert("loop", loop_ms);
    o.wall_ms.insert("enqueue", enqueue_ms);
    o.checks.insert("result", result);
    o.print()
}
