//! Streams, events and who blocks for how long. Timing assertions have strict lower bounds
//! (a wait can never be shorter than the work it waits for) and generous upper bounds (CI
//! machines are slow and shared).

mod common;

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use cudarc::runtime::sys::{cudaEventDisableTiming, cudaEvent_t, cudaStream_t};
use simcudart as sim;

/// Upper bound for a call that must not block (it only enqueues).
const NO_WAIT_MS: f64 = 5.0;

fn event(flags: u32) -> cudaEvent_t {
    let mut e = std::ptr::null_mut();
    assert_eq!(
        // SAFETY: `e` is a local, a valid out-pointer for the call.
        unsafe { sim::cudaEventCreateWithFlags(&mut e, flags) },
        cudaSuccess
    );
    e
}

fn elapsed_ms(start: cudaEvent_t, end: cudaEvent_t) -> f32 {
    let mut ms = -1.0f32;
    assert_eq!(
        // SAFETY: `ms` is a local, a valid out-pointer for the call.
        unsafe { sim::cudaEventElapsedTime(&mut ms, start, end) },
        cudaSuccess
    );
    ms
}

static ORDER: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Host function `id` sleeps longer the smaller its id, then logs it.
unsafe extern "C" fn log_after_sleep(arg: *mut c_void) {
    let id = arg as usize;
    std::thread::sleep(Duration::from_millis(5 * (4 - id as u64)));
    ORDER.lock().expect("order log").push(id);
}

unsafe extern "C" fn fill_0xab_after_sleep(arg: *mut c_void) {
    std::thread::sleep(Duration::from_millis(20));
    // SAFETY: the test passes a 4096-byte pinned buffer.
    unsafe { std::ptr::write_bytes(arg.cast::<u8>(), 0xab, 4096) };
}

#[test]
fn work_in_one_stream_runs_in_order() {
    let _serial = serial();
    let s = stream(true);
    ORDER.lock().unwrap().clear();
    for id in 1..=3usize {
        // SAFETY: the function only reads its argument as an integer.
        let rc = unsafe { sim::cudaLaunchHostFunc(s, Some(log_after_sleep), id as *mut c_void) };
        assert_eq!(rc, cudaSuccess);
    }
    // Data follows the same order: the copy reads what the host function wrote before it.
    let (src, back, dev) = (pinned_alloc(4096), pinned_alloc(4096), device_alloc(4096));
    // SAFETY: `src`, `back` and `dev` hold 4096 bytes, the count of both copies and of the host
    // function's fill of `src`; `back` is read as a slice after the stream synchronized.
    unsafe {
        let rc = sim::cudaLaunchHostFunc(s, Some(fill_0xab_after_sleep), src.cast());
        assert_eq!(rc, cudaSuccess);
        assert_eq!(
            sim::cudaMemcpyAsync(dev.cast(), src.cast(), 4096, H2D, s),
            cudaSuccess
        );
        assert_eq!(
            sim::cudaMemcpyAsync(back.cast(), dev.cast(), 4096, D2H, s),
            cudaSuccess
        );
        assert_eq!(sim::cudaStreamSynchronize(s), cudaSuccess);
        assert_eq!(*ORDER.lock().unwrap(), vec![1, 2, 3]);
        assert!(std::slice::from_raw_parts(back, 4096)
            .iter()
            .all(|b| *b == 0xab));
        assert_eq!(sim::cudaStreamDestroy(s), cudaSuccess);
    }
}

#[test]
fn host_functions_of_all_streams_run_one_at_a_time() {
    // As on CUDA 13 (probe: two 20 ms host functions on two streams take 40 ms).
    let _serial = serial();
    let (a, b) = (stream(true), stream(true));
    let (t, _) = timed(|| {
        host_sleep(a, 20);
        host_sleep(b, 20);
        assert_eq!(sim::cudaStreamSynchronize(a), cudaSuccess);
        assert_eq!(sim::cudaStreamSynchronize(b), cudaSuccess);
    });
    assert!(t >= 40.0, "{t} ms");
    assert!(t < 200.0, "{t} ms");
}

#[test]
fn copies_on_different_engines_overlap_and_on_one_engine_queue() {
    let _serial = serial();
    const BYTES: usize = 4 << 20;
    // 4 MiB at 25 GB/s plus 3 µs is 170.8 µs; scaled by 200: 34.2 ms per copy.
    let _scale = TimeScale::set(200.0);
    let copy_ms = 34.15;
    let (dev_a, dev_b) = (device_alloc(BYTES), device_alloc(BYTES));
    let (host_a, host_b) = (pinned_alloc(BYTES), pinned_alloc(BYTES));
    let (s1, s2) = (stream(true), stream(true));
    let both = |f: &dyn Fn()| {
        timed(|| {
            f();
            assert_eq!(sim::cudaStreamSynchronize(s1), cudaSuccess);
            assert_eq!(sim::cudaStreamSynchronize(s2), cudaSuccess);
        })
        .0
    };
    // SAFETY: `dev_a`, `dev_b`, `host_a` and `host_b` each hold BYTES, the count of every copy, and
    // outlive the synchronizations in `both`.
    unsafe {
        // Touch every page once so page faults do not count below.
        sim::cudaMemcpy(dev_a.cast(), host_a.cast(), BYTES, H2D);
        sim::cudaMemcpy(dev_b.cast(), host_b.cast(), BYTES, H2D);
        let h2d_and_d2h = both(&|| {
            sim::cudaMemcpyAsync(dev_a.cast(), host_a.cast(), BYTES, H2D, s1);
            sim::cudaMemcpyAsync(host_b.cast(), dev_b.cast(), BYTES, D2H, s2);
        });
        assert!(h2d_and_d2h >= copy_ms, "{h2d_and_d2h} ms");
        assert!(
            h2d_and_d2h < 1.7 * copy_ms,
            "H2D and D2H did not overlap: {h2d_and_d2h} ms"
        );

        let two_h2d = both(&|| {
            sim::cudaMemcpyAsync(dev_a.cast(), host_a.cast(), BYTES, H2D, s1);
            sim::cudaMemcpyAsync(dev_b.cast(), host_b.cast(), BYTES, H2D, s2);
        });
        assert!(
            two_h2d >= 2.0 * copy_ms,
            "one copy engine per direction: {two_h2d} ms"
        );

        let copy_and_host_fn = both(&|| {
            sim::cudaMemcpyAsync(dev_a.cast(), host_a.cast(), BYTES, H2D, s1);
            host_sleep(s2, 34);
        });
        assert!(copy_and_host_fn >= copy_ms, "{copy_and_host_fn} ms");
        assert!(
            copy_and_host_fn < 1.7 * copy_ms,
            "no overlap: {copy_and_host_fn} ms"
        );
    }
}

#[test]
fn legacy_stream_synchronizes_with_blocking_streams_only() {
    let _serial = serial();
    let (blocking, non_blocking) = (stream(false), stream(true));
    let marker = event(0);
    let record_on_legacy_and_wait = || {
        timed(|| {
            assert_eq!(sim::cudaEventRecord(marker, LEGACY), cudaSuccess);
            assert_eq!(sim::cudaEventSynchronize(marker), cudaSuccess);
        })
        .0
    };

    host_sleep(blocking, 30);
    let t = record_on_legacy_and_wait();
    assert!(
        t >= 25.0,
        "legacy stream did not wait for a blocking stream: {t} ms"
    );

    host_sleep(non_blocking, 30);
    let t = record_on_legacy_and_wait();
    assert!(
        t < 15.0,
        "legacy stream waited for a non-blocking stream: {t} ms"
    );
    sync_device();

    // And the other way round: a blocking stream waits for earlier legacy work.
    host_sleep(LEGACY, 30);
    let (t, _) = timed(|| {
        assert_eq!(sim::cudaEventRecord(marker, blocking), cudaSuccess);
        assert_eq!(sim::cudaEventSynchronize(marker), cudaSuccess);
    });
    assert!(
        t >= 25.0,
        "blocking stream did not wait for the legacy stream: {t} ms"
    );

    // Synchronizing or querying the legacy stream covers the blocking streams (CUDA 13).
    let start = Instant::now();
    host_sleep(blocking, 30);
    assert_eq!(sim::cudaStreamQuery(LEGACY), cudaErrorNotReady);
    assert_eq!(sim::cudaStreamSynchronize(LEGACY), cudaSuccess);
    assert!(ms(start.elapsed()) >= 30.0);
    assert_eq!(sim::cudaStreamQuery(LEGACY), cudaSuccess);
    // cudaStreamLegacy (1) is the same stream as 0.
    host_sleep(blocking, 30);
    assert_eq!(sim::cudaStreamQuery(1 as cudaStream_t), cudaErrorNotReady);
    sync_device();
}

#[test]
fn per_thread_default_streams_are_per_thread_and_blocking() {
    let _serial = serial();
    let start = Instant::now();
    host_sleep(PER_THREAD, 40);
    std::thread::spawn(|| {
        // Another thread's per-thread stream is idle, under both spellings.
        assert_eq!(sim::cudaStreamQuery_ptsz(LEGACY), cudaSuccess);
        assert_eq!(sim::cudaStreamQuery(PER_THREAD), cudaSuccess);
    })
    .join()
    .unwrap();
    assert_eq!(sim::cudaStreamQuery_ptsz(LEGACY), cudaErrorNotReady);
    // Plain entry points: 0 is the legacy stream, which is idle but waits for this thread's
    // per-thread stream when it records.
    let marker = event(0);
    assert_eq!(sim::cudaEventRecord(marker, LEGACY), cudaSuccess);
    assert_eq!(sim::cudaEventSynchronize(marker), cudaSuccess);
    assert!(ms(start.elapsed()) >= 40.0);

    host_sleep(PER_THREAD, 30);
    let (t, _) = timed(|| assert_eq!(sim::cudaStreamSynchronize_ptsz(LEGACY), cudaSuccess));
    assert!(t >= 25.0, "{t} ms");

    // A thread's default stream finishes its work after the thread ends.
    static RAN: AtomicBool = AtomicBool::new(false);
    unsafe extern "C" fn mark(_: *mut c_void) {
        std::thread::sleep(Duration::from_millis(20));
        RAN.store(true, Ordering::SeqCst);
    }
    std::thread::spawn(|| {
        // SAFETY: `mark` ignores its argument.
        let rc = unsafe { sim::cudaLaunchHostFunc_ptsz(LEGACY, Some(mark), std::ptr::null_mut()) };
        assert_eq!(rc, cudaSuccess);
    })
    .join()
    .unwrap();
    sync_device();
    assert!(RAN.load(Ordering::SeqCst));
}

#[test]
fn synchronize_calls_block_until_the_work_is_done() {
    let _serial = serial();
    let s = stream(true);
    host_sleep(s, 30);
    let (t, rc) = timed(|| sim::cudaStreamSynchronize(s));
    assert_eq!(rc, cudaSuccess);
    assert!((30.0..200.0).contains(&t), "cudaStreamSynchronize: {t} ms");

    let e = event(0);
    host_sleep(s, 30);
    assert_eq!(sim::cudaEventRecord(e, s), cudaSuccess);
    assert_eq!(sim::cudaEventQuery(e), cudaErrorNotReady);
    let (t, rc) = timed(|| sim::cudaEventSynchronize(e));
    assert_eq!(rc, cudaSuccess);
    assert!((30.0..200.0).contains(&t), "cudaEventSynchronize: {t} ms");
    assert_eq!(sim::cudaEventQuery(e), cudaSuccess);

    // The device waits for non-blocking streams too.
    host_sleep(s, 30);
    let (t, rc) = timed(|| sim::cudaDeviceSynchronize());
    assert_eq!(rc, cudaSuccess);
    assert!((30.0..200.0).contains(&t), "cudaDeviceSynchronize: {t} ms");

    // Nothing pending: no wait.
    let (t, _) = timed(|| sim::cudaStreamSynchronize(s));
    assert!(t < NO_WAIT_MS, "{t} ms");
}

#[test]
fn async_copies_block_only_for_pageable_memory() {
    let _serial = serial();
    let s = stream(false);
    let dev = device_alloc(8 << 20);
    let pinned = pinned_alloc(1 << 20);
    let mut pageable = vec![0u8; 8 << 20];
    let p = pageable.as_mut_ptr();
    // SAFETY: `dev` holds 8 MiB, `pinned` 1 MiB and `pageable` 8 MiB, more than each copy's count;
    // `pageable` is written between copies only after the ones reading it returned (pageable copies
    // read their source during the call, or before they return when staged), and the device is
    // synchronized before it is dropped.
    unsafe {
        host_sleep(s, 30);
        let (t, rc) = timed(|| sim::cudaMemcpyAsync(dev.cast(), pinned.cast(), 1 << 20, H2D, s));
        assert_eq!(rc, cudaSuccess);
        assert!(t < NO_WAIT_MS, "pinned H2D blocked {t} ms");
        let (t, _) = timed(|| sim::cudaMemcpyAsync(pinned.cast(), dev.cast(), 1 << 20, D2H, s));
        assert!(t < NO_WAIT_MS, "pinned D2H blocked {t} ms");

        // Device to pageable host: waits for the stream, then the copy.
        let (t, rc) = timed(|| sim::cudaMemcpyAsync(p.cast(), dev.cast(), 4096, D2H, s));
        assert_eq!(rc, cudaSuccess);
        assert!(t >= 25.0, "pageable D2H did not wait: {t} ms");

        // Pageable to device, larger than the 2 MiB staging buffer: waits too.
        host_sleep(s, 30);
        let (t, _) = timed(|| sim::cudaMemcpyAsync(dev.cast(), p.cast(), 4 << 20, H2D, s));
        assert!(t >= 30.0, "large pageable H2D did not wait: {t} ms");

        // Small pageable to device: staged, returns at once, and the data is taken at the call.
        pageable.fill(7);
        let p = pageable.as_mut_ptr();
        host_sleep(s, 30);
        let (t, _) = timed(|| sim::cudaMemcpyAsync(dev.cast(), p.cast(), 64 << 10, H2D, s));
        assert!(t < NO_WAIT_MS, "staged pageable H2D blocked {t} ms");
        pageable[..64 << 10].fill(9);
        let mut back = vec![0u8; 64 << 10];
        assert_eq!(
            sim::cudaMemcpy(back.as_mut_ptr().cast(), dev.cast(), 64 << 10, D2H),
            cudaSuccess
        );
        assert!(
            back.iter().all(|b| *b == 7),
            "the copy read the buffer after the call"
        );

        // The staging buffer holds 2 MiB: two 1 MiB copies fit, the third waits.
        host_sleep(s, 30);
        let p = pageable.as_ptr();
        for i in 0..3 {
            let (t, _) = timed(|| sim::cudaMemcpyAsync(dev.cast(), p.cast(), 1 << 20, H2D, s));
            if i < 2 {
                assert!(t < NO_WAIT_MS, "copy {i} blocked {t} ms");
            } else {
                assert!(t >= 20.0, "third copy did not wait: {t} ms");
            }
        }
        sync_device();
        sim::cudaStreamDestroy(s);
    }
}

#[test]
fn synchronous_copies_and_memsets_follow_the_runtime() {
    let _serial = serial();
    let dev = device_alloc(1 << 20);
    let pinned = pinned_alloc(1 << 20);
    // SAFETY: `dev` and `pinned` hold 1 MiB; every copy and memset covers 4096 bytes at offsets of
    // at most 4096.
    unsafe {
        host_sleep(LEGACY, 30);
        let (t, rc) = timed(|| sim::cudaMemcpy(dev.cast(), dev.add(4096).cast(), 4096, D2D));
        assert_eq!(rc, cudaSuccess);
        assert!(t < NO_WAIT_MS, "D2D cudaMemcpy blocked {t} ms");
        let (t, rc) = timed(|| sim::cudaMemset(dev.cast(), 1, 4096));
        assert_eq!(rc, cudaSuccess);
        assert!(t < NO_WAIT_MS, "cudaMemset on device memory blocked {t} ms");
        let (t, rc) = timed(|| sim::cudaMemcpy(dev.cast(), pinned.cast(), 4096, H2D));
        assert_eq!(rc, cudaSuccess);
        assert!(t >= 25.0, "H2D cudaMemcpy did not wait: {t} ms");

        host_sleep(LEGACY, 30);
        let (t, rc) = timed(|| sim::cudaMemset(pinned.cast(), 1, 4096));
        assert_eq!(rc, cudaSuccess);
        assert!(
            t >= 30.0,
            "cudaMemset on pinned memory did not wait: {t} ms"
        );

        host_sleep(LEGACY, 30);
        let (t, rc) = timed(|| sim::cudaMemsetAsync(pinned.cast(), 1, 4096, LEGACY));
        assert_eq!(rc, cudaSuccess);
        assert!(t < NO_WAIT_MS, "cudaMemsetAsync blocked {t} ms");

        // The legacy stream does not wait for non-blocking streams.
        let nb = stream(true);
        sync_device();
        host_sleep(nb, 30);
        let (t, _) = timed(|| sim::cudaMemcpy(dev.cast(), pinned.cast(), 4096, H2D));
        assert!(
            t < NO_WAIT_MS,
            "cudaMemcpy waited for a non-blocking stream: {t} ms"
        );
        sync_device();
    }
}

#[test]
fn free_and_unregister_synchronize_the_device() {
    let _serial = serial();
    let nb = stream(true);
    let mut page = vec![0u8; 8192];
    // SAFETY: `p` is a local out-pointer, freed only after a successful allocation; `page` is a
    // live Vec of 8192 bytes, the range registered, and is unregistered before it is dropped.
    unsafe {
        let mut p = std::ptr::null_mut();
        host_sleep(nb, 30);
        sim::cudaMalloc(&mut p, 4096);
        // Did not wait: the 30 ms of work is still pending when it returns (a check that a
        // loaded machine's scheduling delays cannot fail, as a time bound could).
        assert_eq!(
            sim::cudaStreamQuery(nb),
            cudaErrorNotReady,
            "cudaMalloc waited"
        );
        let (t, rc) = timed(|| sim::cudaFree(p));
        assert_eq!(rc, cudaSuccess);
        assert!(t >= 25.0, "cudaFree did not synchronize: {t} ms");

        host_sleep(nb, 30);
        sim::cudaMallocHost(&mut p, 4096);
        sim::cudaHostRegister(page.as_mut_ptr().cast(), 8192, 0);
        assert_eq!(
            sim::cudaStreamQuery(nb),
            cudaErrorNotReady,
            "cudaMallocHost or cudaHostRegister waited (they do not on CUDA 13)"
        );
        let (t, rc) = timed(|| sim::cudaFreeHost(p));
        assert_eq!(rc, cudaSuccess);
        assert!(t >= 25.0, "cudaFreeHost did not synchronize: {t} ms");

        host_sleep(nb, 30);
        let (t, rc) = timed(|| sim::cudaHostUnregister(page.as_mut_ptr().cast()));
        assert_eq!(rc, cudaSuccess);
        assert!(t >= 30.0, "cudaHostUnregister did not synchronize: {t} ms");

        host_sleep(nb, 30);
        sim::cudaFree(std::ptr::null_mut());
        assert_eq!(
            sim::cudaStreamQuery(nb),
            cudaErrorNotReady,
            "cudaFree(NULL) waited"
        );
        sync_device();
    }
}

#[test]
fn events_time_the_modeled_device_timeline() {
    let _serial = serial();
    const BYTES: usize = 8 << 20;
    // 8 MiB at 25 GB/s plus 3 µs: 0.3385 ms.
    let modeled_ms = 0.3385f32;
    let (dev, pinned) = (device_alloc(BYTES), pinned_alloc(BYTES));
    let s = stream(true);
    let (e0, e1) = (event(0), event(0));
    // SAFETY: `dev` and `pinned` hold BYTES, the count of the copy, and outlive the closure's
    // calls, each of which waits for the copy to finish.
    let copy_between_events = || unsafe {
        assert_eq!(sim::cudaEventRecord(e0, s), cudaSuccess);
        assert_eq!(
            sim::cudaMemcpyAsync(dev.cast(), pinned.cast(), BYTES, H2D, s),
            cudaSuccess
        );
        assert_eq!(sim::cudaEventRecord(e1, s), cudaSuccess);
        assert_eq!(sim::cudaEventSynchronize(e1), cudaSuccess);
        elapsed_ms(e0, e1)
    };
    copy_between_events(); // first touch of the pages
    let t = copy_between_events();
    assert!(t >= modeled_ms * 0.999, "{t} ms");
    assert!(t < modeled_ms + 5.0, "{t} ms");
    {
        let _scale = TimeScale::set(10.0);
        let t = copy_between_events();
        assert!(t >= 10.0 * modeled_ms * 0.999, "{t} ms at 10x");
        assert!(t < 10.0 * modeled_ms + 10.0, "{t} ms at 10x");
    }

    assert_eq!(sim::cudaEventRecord(e0, s), cudaSuccess);
    host_sleep(s, 30);
    assert_eq!(sim::cudaEventRecord(e1, s), cudaSuccess);
    let mut pending = 0.0f32;
    assert_eq!(
        // SAFETY: `pending` is a local, a valid out-pointer for the call.
        unsafe { sim::cudaEventElapsedTime(&mut pending, e0, e1) },
        cudaErrorNotReady
    );
    assert_eq!(sim::cudaEventSynchronize(e1), cudaSuccess);
    let t = elapsed_ms(e0, e1);
    assert!(
        (30.0..100.0).contains(&t),
        "{t} ms around a 30 ms host function"
    );

    // Misuse.
    let (fresh, untimed) = (event(0), event(cudaEventDisableTiming));
    let mut out = 0.0f32;
    // SAFETY: `out` is a local out-pointer; the null one is rejected.
    unsafe {
        assert_eq!(
            sim::cudaEventElapsedTime(&mut out, fresh, e1),
            cudaErrorInvalidResourceHandle
        );
        assert_eq!(sim::cudaEventRecord(untimed, s), cudaSuccess);
        assert_eq!(sim::cudaEventSynchronize(untimed), cudaSuccess);
        assert_eq!(
            sim::cudaEventElapsedTime(&mut out, e0, untimed),
            cudaErrorInvalidResourceHandle
        );
        assert_eq!(
            sim::cudaEventElapsedTime(std::ptr::null_mut(), e0, e1),
            cudaErrorInvalidValue
        );
    }
    // A never-recorded event is complete.
    assert_eq!(sim::cudaEventQuery(fresh), cudaSuccess);
    assert_eq!(sim::cudaEventSynchronize(fresh), cudaSuccess);
    assert_eq!(sim::cudaGetLastError(), cudaErrorInvalidValue);
}

#[test]
fn stream_wait_event_orders_work_across_streams() {
    let _serial = serial();
    let (a, b) = (stream(true), stream(true));
    let (e, done) = (event(0), event(0));
    host_sleep(a, 30);
    assert_eq!(sim::cudaEventRecord(e, a), cudaSuccess);
    assert_eq!(sim::cudaStreamWaitEvent(b, e, 0), cudaSuccess);
    assert_eq!(sim::cudaEventRecord(done, b), cudaSuccess);
    let (t, _) = timed(|| sim::cudaEventSynchronize(done));
    assert!(t >= 25.0, "b did not wait for a: {t} ms");
    // Waiting for a never-recorded event is a no-op.
    let fresh = event(0);
    assert_eq!(sim::cudaStreamWaitEvent(b, fresh, 0), cudaSuccess);
    assert_eq!(sim::cudaStreamQuery(b), cudaSuccess);
    assert_eq!(sim::cudaStreamWaitEvent(b, fresh, 2), cudaErrorInvalidValue);
    assert_eq!(sim::cudaStreamWaitEvent_ptsz(LEGACY, e, 0), cudaSuccess);
}

#[test]
fn destroyed_streams_finish_their_work() {
    let _serial = serial();
    static RAN: AtomicBool = AtomicBool::new(false);
    unsafe extern "C" fn mark(_: *mut c_void) {
        std::thread::sleep(Duration::from_millis(20));
        RAN.store(true, Ordering::SeqCst);
    }
    let s = stream(false);
    assert_eq!(
        // SAFETY: `mark` ignores its argument.
        unsafe { sim::cudaLaunchHostFunc(s, Some(mark), std::ptr::null_mut()) },
        cudaSuccess
    );
    let (t, rc) = timed(|| sim::cudaStreamDestroy(s));
    assert_eq!(rc, cudaSuccess);
    assert!(t < NO_WAIT_MS, "cudaStreamDestroy blocked {t} ms");
    assert_eq!(sim::cudaStreamQuery(s), cudaErrorInvalidResourceHandle);
    sync_device();
    assert!(RAN.load(Ordering::SeqCst));
}

#[test]
fn bad_handles_and_values_are_rejected() {
    let _serial = serial();
    let bogus = 0x1234_5678 as cudaStream_t;
    assert_eq!(
        sim::cudaStreamSynchronize(bogus),
        cudaErrorInvalidResourceHandle
    );
    assert_eq!(sim::cudaStreamQuery(bogus), cudaErrorInvalidResourceHandle);
    assert_eq!(
        sim::cudaStreamDestroy(LEGACY),
        cudaErrorInvalidResourceHandle
    );
    assert_eq!(
        sim::cudaStreamDestroy(PER_THREAD),
        cudaErrorInvalidResourceHandle
    );
    assert_eq!(
        sim::cudaEventRecord(bogus.cast(), LEGACY),
        cudaErrorInvalidResourceHandle
    );
    assert_eq!(
        sim::cudaEventQuery(std::ptr::null_mut()),
        cudaErrorInvalidResourceHandle
    );
    let e = event(0);
    assert_eq!(
        sim::cudaEventRecord(e, bogus),
        cudaErrorInvalidResourceHandle
    );
    assert_eq!(sim::cudaEventDestroy(e), cudaSuccess);
    assert_eq!(sim::cudaEventDestroy(e), cudaErrorInvalidResourceHandle);
    assert_eq!(sim::cudaEventSynchronize(e), cudaErrorInvalidResourceHandle);
    let mut s = std::ptr::null_mut();
    let mut ev = std::ptr::null_mut();
    // SAFETY: `s` and `ev` are local out-pointers; every call is rejected for its flags or a null
    // pointer before writing anything.
    unsafe {
        assert_eq!(
            sim::cudaStreamCreateWithFlags(&mut s, 7),
            cudaErrorInvalidValue
        );
        assert_eq!(
            sim::cudaStreamCreate(std::ptr::null_mut()),
            cudaErrorInvalidValue
        );
        assert_eq!(
            sim::cudaEventCreateWithFlags(&mut ev, 64),
            cudaErrorInvalidValue
        );
        assert_eq!(
            sim::cudaLaunchHostFunc(LEGACY, None, std::ptr::null_mut()),
            cudaErrorInvalidValue
        );
    }
    // The last error is per thread, reset by cudaGetLastError, and "not ready" is no error.
    assert_eq!(sim::cudaPeekAtLastError(), cudaErrorInvalidValue);
    let q = stream(true);
    host_sleep(q, 20);
    assert_eq!(sim::cudaStreamQuery(q), cudaErrorNotReady);
    assert_eq!(sim::cudaGetLastError(), cudaErrorInvalidValue);
    assert_eq!(sim::cudaGetLastError(), cudaSuccess);
    sync_device();
}
