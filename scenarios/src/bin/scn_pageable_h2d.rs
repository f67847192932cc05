//! `scn-pageable-h2d`: input batches copied to the GPU from pageable (`malloc`) memory with
//! `cudaMemcpyAsync`. A pageable host-to-device copy larger than the driver's staging buffer
//! (2 MiB on CUDA 13) waits for the stream's earlier work and for the copy itself, so the host
//! stalls every step and copies never overlap compute. The same work as
//! `scn-pinned-double-buffer`, done the stalling way.
//!
//! Per step: copy batch i%2 (`--size` bytes, all elements i%2 + 1) to the device, `spin`
//! (`--work-us`), `scale` by 2. At the end one `cudaMemcpy` reads the first elements back
//! (they must be 2 * (last batch's value)).
//! Expect: memcpy_pageable = iters, about the GPU time of the steps (`gpu_ms.work`).

use std::process::ExitCode;
use std::time::Instant;

use syncspy_scenarios::cuda::cudaMemcpyKind::{
    cudaMemcpyDeviceToHost as D2H, cudaMemcpyHostToDevice as H2D,
};
use syncspy_scenarios::scenario::{calls, ms_since, Args, Ctx, Outcome};
use syncspy_scenarios::specs::PAGEABLE_H2D as SPEC;
use syncspy_scenarios::truth::Kind;

fn main() -> ExitCode {
    let a = Args::parse(&SPEC);
    let n = (a.size / 4) as usize;
    let bytes = n * 4;
    let batches: Vec<Vec<f32>> = (0..2).map(|b| vec![b as f32 + 1.0; n]).collect();
    let mut c = Ctx::new();
    let s = c.r.stream(&mut c.t, false);
    let d = c.r.device::<f32>(&mut c.t, n);

    let start = Instant::now();
    for i in 0..a.iters as usize {
        c.spans.begin(&mut c.t, &mut c.r, s);
        let src = batches[i % 2].as_ptr().cast();
        // SAFETY: `d` and the batch hold `bytes`; the call returns only once the batch has
        // been read (pageable memory), and the batches outlive the loop anyway.
        unsafe {
            calls::memcpy_async(&mut c.t, Kind::MemcpyPageable, d.cast(), src, bytes, H2D, s)
        };
        c.k.spin(&mut c.t, s, a.work_ns());
        c.k.scale(&mut c.t, s, d, n as u64, 2.0);
        c.spans.end(&mut c.t, &mut c.r, s);
    }
    calls::device_sync(&mut c.t);
    let loop_ms = ms_since(start);
    let work = c.spans.total_ms();
    let mut head = [0f32; 4];
    let m = head.len().min(n);
    // SAFETY: `m` floats on both sides.
    unsafe {
        let src = d.cast_const().cast();
        calls::memcpy(&mut c.t, head.as_mut_ptr().cast(), src, m * 4, D2H)
    };
    let t = c.finish();

    let want = 2.0 * (((a.iters - 1) % 2) as f32 + 1.0);
    let mut o = Outcome::new(SPEC, a, t);
    o.gpu_ms.insert("work", work);
    o.wall_ms.insert("loop", loop_ms);
    o.checks
        .insert("result", head[..m].iter().all(|v| *v == want));
    o.print()
}
