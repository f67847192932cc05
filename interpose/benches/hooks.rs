//! Cost of the library inside a CUDA call, against a stand-in "real" function that returns
//! at once, so only the library's own work is measured:
//! - `baseline`: calling the stand-in directly;
//! - `pinned_async_copy`: the fast path of a non-stalling call (`cudaMemcpyAsync` from
//!   pinned memory): classify, count, forward;
//! - `recorded_event_no_stack`: a stall event (`cudaStreamSynchronize`) timed and written
//!   to the ring with its totals, no stack capture;
//! - `stream_query_ready`: a `cudaStreamQuery` that finds its work done with no polling run
//!   open on the thread (the usual query): count, forward, one branch on the result;
//! - `stream_query_poll_run_of_8`: a query in a polling run of 7 not-ready answers and the
//!   ready one, which records the run's `poll_wait` (per query, the record shared by 8);
//! - `launch_kernel_unarmed`: the body of the `cuLaunchKernel` wrapper with no thread waiting
//!   for its next launch (the GPU idle behind a stall, `behind`): what every launch pays;
//! - `unwind_*`: the stack capture itself, per depth;
//! - `dormant_stream_sync`: a stall-kind call while the library is dormant (a preload with
//!   `SYNCSPY_DORMANT=1` waiting for an attach, or a process after detach): state check, the
//!   once-a-second control-file poll's clock read, forward.
//!
//! Run with `cargo bench -p syncspy-interpose --bench hooks`; numbers in docs/performance.md.

use std::ffi::c_void;

use criterion::{criterion_group, criterion_main, Criterion};
use cudarc::runtime::sys::cudaStream_t;
use syncspy::testing;
use syncspy_abi::Api;

unsafe extern "C" fn fake_copy(
    _: *mut c_void,
    _: *const c_void,
    _: usize,
    _: u32,
    _: cudaStream_t,
) -> u32 {
    0
}

unsafe extern "C" fn fake_sync(_: cudaStream_t) -> u32 {
    0
}

unsafe extern "C" fn fake_query_ready(_: cudaStream_t) -> u32 {
    0
}

/// Answers not-ready 7 times, then ready: a polling run of 8 queries.
unsafe extern "C" fn fake_query_run_of_8(_: cudaStream_t) -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    if N.fetch_add(1, Ordering::Relaxed) % 8 == 7 {
        0
    } else {
        600
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn fake_launch(
    _: cudarc::driver::sys::CUfunction,
    _: u32,
    _: u32,
    _: u32,
    _: u32,
    _: u32,
    _: u32,
    _: u32,
    _: cudarc::driver::sys::CUstream,
    _: *mut *mut c_void,
    _: *mut *mut c_void,
) -> u32 {
    0
}

unsafe extern "C" fn fake_get_device(d: *mut i32) -> u32 {
    // SAFETY: cudaGetDevice's contract is a valid `int` out-pointer, and the library's only
    // caller (`device::current_device`) passes one to a local.
    unsafe { *d = 0 };
    0
}

#[inline(never)]
fn nest(depth: usize, target: usize) -> usize {
    if depth == 0 {
        testing::unwind(target)
    } else {
        std::hint::black_box(nest(depth - 1, target))
    }
}

fn bench(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("syncspy-hookbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    // SAFETY: set before any thread reads the environment (the library reads it once).
    unsafe {
        std::env::set_var("SYNCSPY_DIR", &dir);
        std::env::set_var("SYNCSPY_STACKS", "0");
        std::env::set_var("SYNCSPY_DORMANT", "1");
    }
    let host = vec![0u8; 1 << 20];
    let dev = 0x7000_0000_0000usize as *mut c_void;
    testing::register_pinned(host.as_ptr() as u64, host.len() as u64);
    testing::use_get_device(fake_get_device);
    let kind_h2d = 1u32;
    let stream = 0x1234usize as cudaStream_t;

    c.bench_function("baseline_direct_call", |b| {
        // SAFETY: `fake_copy` ignores its arguments.
        b.iter(|| unsafe { fake_copy(dev, host.as_ptr().cast(), 4096, kind_h2d, stream) })
    });
    c.bench_function("pinned_async_copy", |b| {
        // SAFETY: `fake_copy` stands in for the real function and never dereferences the
        // pointers; the library itself only compares `host` (4096 bytes of a live 1 MiB
        // buffer) with the pinned registry.
        b.iter(|| unsafe {
            testing::memcpy_async(
                Api::CudaMemcpyAsync,
                fake_copy,
                dev,
                std::hint::black_box(host.as_ptr().cast()),
                4096,
                kind_h2d,
                stream,
                false,
            )
        })
    });
    c.bench_function("recorded_event_no_stack", |b| {
        // SAFETY: `fake_sync` stands in for the real function and ignores the stream handle.
        b.iter(|| unsafe {
            testing::stream_sync(Api::CudaStreamSynchronize, fake_sync, stream, false)
        })
    });
    c.bench_function("stream_query_ready", |b| {
        // SAFETY: `fake_query_ready` stands in for the real function and ignores the handle.
        b.iter(|| unsafe {
            testing::stream_query(Api::CudaStreamQuery, fake_query_ready, stream, false)
        })
    });
    c.bench_function("stream_query_poll_run_of_8", |b| {
        // SAFETY: as above.
        b.iter(|| unsafe {
            testing::stream_query(Api::CudaStreamQuery, fake_query_run_of_8, stream, false)
        })
    });
    c.bench_function("launch_kernel_unarmed", |b| {
        let null: *mut c_void = std::ptr::null_mut();
        // SAFETY: `fake_launch` stands in for the real function and ignores its arguments.
        b.iter(|| unsafe {
            testing::launch_kernel(
                fake_launch,
                null.cast(),
                1,
                1,
                1,
                32,
                1,
                1,
                0,
                std::hint::black_box(stream.cast()),
                null.cast(),
                null.cast(),
                false,
            )
        })
    });
    for depth in [16usize, 32, 62] {
        c.bench_function(&format!("unwind_{depth}_frames"), |b| {
            b.iter(|| nest(depth + 8, depth))
        });
    }
    // Last: dormant stays dormant (no control file in the bench's folder).
    testing::go_dormant();
    c.bench_function("dormant_stream_sync", |b| {
        // SAFETY: as for `recorded_event_no_stack`.
        b.iter(|| unsafe {
            testing::stream_sync(Api::CudaStreamSynchronize, fake_sync, stream, false)
        })
    });
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
