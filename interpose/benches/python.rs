//! Added cost of Python frames per recorded event, with a 50-frame Python stack in the
//! CPython 3.11 layout (fake interpreter memory, `python::fake`), against a stand-in "real"
//! function that returns at once:
//! - `recorded_event_native_thread`: a stall (`cudaStreamSynchronize`) recorded with its
//!   native stack (from the stack cache) on a thread without a Python thread state, as a C
//!   thread: since issue 26 it also takes the slow path that looks for a Python thread
//!   waiting for it (here the fake interpreter's thread list is unreadable: one system call,
//!   until the process-wide budget is spent, then the budget check alone);
//! - `recorded_event_python_50_frames`: the same stall on a thread whose Python stack is 50
//!   frames deep (32 kept): the walk, the hash, the per-thread site cache;
//! - `python_site_50_frames`: the Python step alone;
//! - `host_function_queued_and_run_no_waiter`: `cuLaunchHostFunc` through the library with a
//!   stand-in driver that runs the host function at once: the queuing (native stack from the
//!   cache, a slot, the thread's reference point: two clock reads) and the trampoline's look
//!   for a blocked Python thread (none here: as above, one failed read while the budget
//!   lasts, then the budget check alone).
//!
//! The difference of the first two is the added cost per event. Run with
//! `cargo bench -p syncspy-interpose --bench python`.

use criterion::{criterion_group, criterion_main, Criterion};
use cudarc::runtime::sys::cudaStream_t;
use syncspy::testing;
use syncspy_abi::Api;

unsafe extern "C" fn fake_sync(_: cudaStream_t) -> u32 {
    0
}

/// A driver that runs each host function at once, on the queuing thread.
unsafe extern "C" fn fake_launch_host_func(
    _: cudarc::driver::sys::CUstream,
    f: Option<testing::HostFn>,
    data: *mut std::ffi::c_void,
) -> u32 {
    if let Some(f) = f {
        // SAFETY: the function and argument `launch_host_func` queued.
        unsafe { f(data) };
    }
    0
}

extern "C" fn host_noop(_: *mut std::ffi::c_void) {}

unsafe extern "C" fn fake_get_device(d: *mut i32) -> u32 {
    // SAFETY: the library passes a valid out-pointer.
    unsafe { *d = 0 };
    0
}

fn bench(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("syncspy-pybench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    // SAFETY: set before any thread reads the environment (the library reads it once).
    unsafe { std::env::set_var("SYNCSPY_DIR", &dir) };
    testing::use_get_device(fake_get_device);
    assert!(
        testing::use_fake_python(),
        "the fake interpreter comes first"
    );
    let stack = testing::FakePythonStack::new(&[5; 50]);
    let stream = 0x1234usize as cudaStream_t;
    let sync = || {
        // SAFETY: the stand-in takes any stream.
        unsafe { testing::stream_sync(Api::CudaStreamSynchronize, fake_sync, stream, false) }
    };

    stack.make_current(false);
    c.bench_function("recorded_event_native_thread", |b| b.iter(sync));
    stack.make_current(true);
    c.bench_function("recorded_event_python_50_frames", |b| b.iter(sync));

    let native = testing::intern_native_site(&[0x7f00_0000_1000, 0x7f00_0000_2000])
        .expect("the runtime is active");
    let combined = testing::python_site(native).expect("the runtime is active");
    assert_ne!(combined, native, "the fake Python stack refines the site");
    c.bench_function("python_site_50_frames", |b| {
        b.iter(|| testing::python_site(std::hint::black_box(native)))
    });
    // A host function queued and run while no Python thread is blocked (the fake interpreter
    // has none): the queuing (stack, slot, clocks) and the trampoline's look for a waiter.
    stack.make_current(false);
    c.bench_function("host_function_queued_and_run_no_waiter", |b| {
        // SAFETY: the fake driver runs `host_noop`, which ignores its argument.
        b.iter(|| unsafe {
            testing::launch_host_func(
                fake_launch_host_func,
                std::ptr::null_mut(),
                Some(host_noop),
                std::ptr::null_mut(),
                false,
            )
        })
    });
    drop(stack);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
