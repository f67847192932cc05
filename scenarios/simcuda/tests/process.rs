//! Process life: a fork child gets a working simulator of its own (and reads the environment
//! afresh, which the multi-device tests use), and exiting with work pending neither hangs nor
//! crashes.

mod common;

use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

use common::*;
use cudarc::runtime::sys::{cudaMemoryType, cudaPointerAttributes};
use simcudart as sim;

const LIMIT: Duration = Duration::from_secs(20);

/// Everything a child checks, as an exit code: 0 when all passed, else the failed step.
fn check(steps: &[(bool, &str)]) -> i32 {
    steps
        .iter()
        .position(|(ok, _)| !ok)
        .map_or(0, |i| i as i32 + 1)
}

fn round_trip() -> bool {
    let src = [42u8; 256];
    let mut back = [0u8; 256];
    let dev = device_alloc(256);
    // SAFETY: `src`, `back` and `dev` hold 256 bytes, the count of both copies; `dev` is not used
    // after it is freed.
    unsafe {
        sim::cudaMemcpy(dev.cast(), src.as_ptr().cast(), 256, H2D) == cudaSuccess
            && sim::cudaMemcpy(back.as_mut_ptr().cast(), dev.cast(), 256, D2H) == cudaSuccess
            && back == src
            && sim::cudaFree(dev.cast()) == cudaSuccess
    }
}

#[test]
fn a_fork_child_gets_a_fresh_working_simulator() {
    let _serial = serial();
    // The parent has state and work in flight when it forks.
    let s = stream(false);
    host_sleep(s, 300);
    let dev = device_alloc(1 << 20);
    let status = in_child(LIMIT, || {
        let start = Instant::now();
        let mut n: c_int = 0;
        // SAFETY: `n` is a local, a valid out-pointer for the call.
        let count_ok = unsafe { sim::cudaGetDeviceCount(&mut n) } == cudaSuccess && n == 1;
        // The parent's allocations and streams mean nothing here.
        // SAFETY: cudaPointerAttributes is a plain C struct of integers and pointers; all-zero is
        // valid.
        let mut attrs: cudaPointerAttributes = unsafe { std::mem::zeroed() };
        // SAFETY: `attrs` is a local, a valid out-pointer; `dev` is only looked up, not accessed.
        let rc = unsafe { sim::cudaPointerGetAttributes(&mut attrs, dev.cast()) };
        let forgot = rc == cudaSuccess && attrs.type_ == cudaMemoryType::cudaMemoryTypeUnregistered;
        let stale = sim::cudaStreamQuery(s) == cudaErrorInvalidResourceHandle;
        let data = round_trip();
        let own = stream(false);
        host_sleep(own, 20);
        let synced = sim::cudaStreamSynchronize(own) == cudaSuccess;
        // The parent's 300 ms host function is not the child's to wait for.
        let device_sync = sim::cudaDeviceSynchronize() == cudaSuccess;
        let quick = start.elapsed() < Duration::from_millis(250);
        check(&[
            (count_ok, "device count"),
            (forgot, "parent allocation forgotten"),
            (stale, "parent stream unknown"),
            (data, "round trip"),
            (synced, "own stream"),
            (device_sync, "device sync"),
            (quick, "did not wait for the parent's work"),
        ])
    });
    assert_eq!(status, Some(0), "failed step (1-based) in the child");
    // The parent is unaffected.
    assert_eq!(sim::cudaStreamQuery(s), cudaErrorNotReady);
    assert!(round_trip());
    sync_device();
}

#[test]
fn exiting_with_work_pending_does_not_hang() {
    let _serial = serial();
    let start = Instant::now();
    let status = in_child(LIMIT, || {
        let s = stream(true);
        host_sleep(s, 10_000);
        let dev = device_alloc(4096);
        let pinned = pinned_alloc(4096);
        // SAFETY: valid allocations of 4096 bytes.
        unsafe { sim::cudaMemcpyAsync(dev.cast(), pinned.cast(), 4096, H2D, s) };
        // A normal exit: atexit handlers and thread-local destructors run.
        // SAFETY: ends the child process.
        unsafe { libc::exit(3) }
    });
    assert_eq!(status, Some(3));
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "exit waited for pending work"
    );
}

#[test]
fn several_devices_have_their_own_streams_and_memory() {
    let _serial = serial();
    let status = in_child(LIMIT, || {
        std::env::set_var("SIMCUDA_DEVICES", "2");
        let mut n: c_int = 0;
        // SAFETY: `n` is a local, a valid out-pointer for the call.
        let count = unsafe { sim::cudaGetDeviceCount(&mut n) } == cudaSuccess && n == 2;
        let on_zero = device_alloc(4096);
        host_sleep(LEGACY, 200);
        let switched = sim::cudaSetDevice(1) == cudaSuccess;
        let on_one = device_alloc(4096);
        // SAFETY: cudaPointerAttributes is a plain C struct of integers and pointers; all-zero is
        // valid.
        let mut attrs: cudaPointerAttributes = unsafe { std::mem::zeroed() };
        // SAFETY: `attrs` is a local, a valid out-pointer for the call.
        let rc = unsafe { sim::cudaPointerGetAttributes(&mut attrs, on_one.cast()) };
        let located = rc == cudaSuccess && attrs.device == 1;
        // Device 1 is idle although device 0 is busy.
        let start = Instant::now();
        let idle = sim::cudaDeviceSynchronize() == cudaSuccess
            && sim::cudaStreamQuery(LEGACY) == cudaSuccess
            && start.elapsed() < Duration::from_millis(100);
        let src = [9u8; 4096];
        let mut back = [0u8; 4096];
        // SAFETY: `on_zero`, `on_one`, `src` and `back` each hold 4096 bytes, the count of every
        // copy.
        let peer = unsafe {
            sim::cudaMemcpy(on_zero.cast(), src.as_ptr().cast(), 4096, H2D) == cudaSuccess
                && sim::cudaMemcpyPeer(on_one.cast(), 1, on_zero.cast(), 0, 4096) == cudaSuccess
                && sim::cudaMemcpy(back.as_mut_ptr().cast(), on_one.cast(), 4096, D2H)
                    == cudaSuccess
                && back == src
        };
        let bad = sim::cudaSetDevice(2) == cudaErrorInvalidDevice;
        check(&[
            (count, "two devices"),
            (switched, "set device 1"),
            (located, "allocation on device 1"),
            (idle, "device 1 idle"),
            (peer, "peer copy"),
            (bad, "no device 2"),
        ])
    });
    assert_eq!(status, Some(0), "failed step (1-based) in the child");
}

#[test]
fn zero_devices_fail_like_a_machine_without_gpu() {
    let _serial = serial();
    let status = in_child(LIMIT, || {
        std::env::set_var("SIMCUDA_DEVICES", "0");
        let mut n: c_int = -1;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `n` and `p` are locals, valid out-pointers for the calls.
        let (count, malloc) =
            unsafe { (sim::cudaGetDeviceCount(&mut n), sim::cudaMalloc(&mut p, 16)) };
        check(&[
            (count == cudaErrorNoDevice && n == 0, "device count"),
            (malloc == cudaErrorNoDevice, "malloc"),
            (
                sim::cudaDeviceSynchronize() == cudaErrorNoDevice,
                "synchronize",
            ),
        ])
    });
    assert_eq!(status, Some(0), "failed step (1-based) in the child");
}

#[test]
fn device_reset_frees_everything_of_the_device() {
    let _serial = serial();
    // In a child: a reset frees memory that other tests of this binary might be using.
    let status = in_child(LIMIT, || {
        let dev = device_alloc(4096);
        let pinned = pinned_alloc(4096);
        let s = stream(false);
        host_sleep(s, 50);
        let start = Instant::now();
        let reset = sim::cudaDeviceReset() == cudaSuccess;
        let waited = start.elapsed() >= Duration::from_millis(50);
        // SAFETY: cudaPointerAttributes is a plain C struct of integers and pointers; all-zero is
        // valid.
        let mut attrs: cudaPointerAttributes = unsafe { std::mem::zeroed() };
        let gone = [dev, pinned].iter().all(|p| {
            // SAFETY: `attrs` is a local, a valid out-pointer for the call.
            let rc = unsafe { sim::cudaPointerGetAttributes(&mut attrs, p.cast()) };
            rc == cudaSuccess && attrs.type_ == cudaMemoryType::cudaMemoryTypeUnregistered
        });
        let stale = sim::cudaStreamQuery(s) == cudaErrorInvalidResourceHandle;
        let usable = round_trip() && sim::cudaStreamQuery(LEGACY) == cudaSuccess;
        check(&[
            (reset, "reset"),
            (waited, "waited for the device"),
            (gone, "memory freed"),
            (stale, "stream destroyed"),
            (usable, "device usable again"),
        ])
    });
    assert_eq!(status, Some(0), "failed step (1-based) in the child");
}
