//! Kernels: the PTX of kernels/ loaded with `cudaLibraryLoadData`, launched with
//! `cudaLaunchKernel`; real results, modeled durations, engines, and the errors of misuse.

mod common;

use std::ffi::{c_void, CStr};
use std::time::Duration;

use common::*;
use cudarc::runtime::sys::{
    cudaError_t, cudaEvent_t, cudaKernel_t, cudaLibrary_t, cudaStream_t, dim3,
};
use simcudart as sim;

const LIMIT: Duration = Duration::from_secs(20);

/// The tests of this file run one at a time: `bad_pointers_fault_on_the_device` forks, and a
/// fork while another test's thread holds a lock (the simulator's, the allocator's) leaves the
/// child waiting on it forever (seen once in CI: the child hung for the 20 s limit).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn d(x: u32, y: u32) -> dim3 {
    dim3 { x, y, z: 1 }
}

fn load(ptx: &str) -> Result<cudaLibrary_t, cudaError_t> {
    let mut lib = std::ptr::null_mut();
    let nul = format!("{}\0", ptx.trim_end_matches('\0'));
    // SAFETY: NUL-terminated text, no options.
    let rc = unsafe {
        sim::cudaLibraryLoadData(
            &mut lib,
            nul.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    if rc == cudaSuccess {
        Ok(lib)
    } else {
        Err(rc)
    }
}

fn kernels() -> cudaLibrary_t {
    load(syncspy_kernels::PTX).expect("the kernels' PTX loads")
}

fn kernel(lib: cudaLibrary_t, name: &CStr) -> cudaKernel_t {
    let mut k = std::ptr::null_mut();
    assert_eq!(
        // SAFETY: `k` is a valid out-pointer and `name` a NUL-terminated string.
        unsafe { sim::cudaLibraryGetKernel(&mut k, lib, name.as_ptr()) },
        cudaSuccess
    );
    k
}

/// Launches `k` with the argument values behind `args`.
fn launch(
    k: cudaKernel_t,
    grid: dim3,
    block: dim3,
    args: &mut [*mut c_void],
    s: cudaStream_t,
) -> cudaError_t {
    // SAFETY: each pointer in `args` points to a live local of the parameter's type.
    unsafe { sim::cudaLaunchKernel(k as *const c_void, grid, block, args.as_mut_ptr(), 0, s) }
}

fn arg<T>(v: &mut T) -> *mut c_void {
    (v as *mut T).cast()
}

fn to_host<T: Copy + Default>(dev: *const u8, n: usize) -> Vec<T> {
    let mut out = vec![T::default(); n];
    // SAFETY: `dev` holds at least n values of T (the tests' allocations).
    let rc = unsafe {
        sim::cudaMemcpy(
            out.as_mut_ptr().cast(),
            dev.cast(),
            n * std::mem::size_of::<T>(),
            D2H,
        )
    };
    assert_eq!(rc, cudaSuccess);
    out
}

fn event() -> cudaEvent_t {
    let mut e = std::ptr::null_mut();
    // SAFETY: `e` is a local, a valid out-pointer for the call.
    assert_eq!(unsafe { sim::cudaEventCreate(&mut e) }, cudaSuccess);
    e
}

fn elapsed_ms(a: cudaEvent_t, b: cudaEvent_t) -> f64 {
    let mut ms = 0.0f32;
    assert_eq!(
        // SAFETY: `ms` is a local, a valid out-pointer for the call.
        unsafe { sim::cudaEventElapsedTime(&mut ms, a, b) },
        cudaSuccess
    );
    f64::from(ms)
}

#[test]
fn the_library_holds_every_kernel_of_kernels_dir() {
    let _serial = serial();
    let lib = kernels();
    let mut n = 0u32;
    assert_eq!(
        // SAFETY: `n` is a local, a valid out-pointer for the call.
        unsafe { sim::cudaLibraryGetKernelCount(&mut n, lib) },
        cudaSuccess
    );
    assert_eq!(n as usize, syncspy_kernels::KERNELS.len());
    for name in syncspy_kernels::KERNELS {
        let c = std::ffi::CString::new(name).unwrap();
        assert!(!kernel(lib, &c).is_null());
    }
    let mut k = std::ptr::null_mut();
    // SAFETY: valid out-pointer and name.
    unsafe {
        assert_eq!(
            sim::cudaLibraryGetKernel(&mut k, lib, c"missing".as_ptr()),
            cudaErrorSymbolNotFound
        );
        assert_eq!(
            sim::cudaLibraryGetKernel(&mut k, lib, std::ptr::null()),
            cudaErrorInvalidValue
        );
    }
    assert_eq!(sim::cudaLibraryUnload(lib), cudaSuccess);
    assert_eq!(sim::cudaLibraryUnload(lib), cudaErrorInvalidResourceHandle);
}

#[test]
fn fill_scale_and_count_compute_real_results_in_stream_order() {
    let _serial = serial();
    let lib = kernels();
    let (fill, scale, count) = (
        kernel(lib, c"fill"),
        kernel(lib, c"scale"),
        kernel(lib, c"count_positive"),
    );
    let s = stream(false);
    let n: u64 = 100_000;
    let x = device_alloc(n as usize * 4);
    let counter = device_alloc(4);
    let (mut xp, mut n_all, mut one) = (x as u64, n, 1.5f32);
    let (mut third, mut minus) = (n / 3, -2.0f32);
    let mut cp = counter as u64;
    assert_eq!(
        // SAFETY: `counter` is 4 bytes of device memory.
        unsafe { sim::cudaMemsetAsync(counter.cast(), 0, 4, s) },
        cudaSuccess
    );
    let grid = d(64, 1);
    let block = d(256, 1);
    assert_eq!(
        launch(
            fill,
            grid,
            block,
            &mut [arg(&mut xp), arg(&mut n_all), arg(&mut one)],
            s
        ),
        cudaSuccess
    );
    assert_eq!(
        launch(
            scale,
            grid,
            block,
            &mut [arg(&mut xp), arg(&mut third), arg(&mut minus)],
            s
        ),
        cudaSuccess
    );
    for _ in 0..2 {
        // The count accumulates.
        assert_eq!(
            launch(
                count,
                grid,
                block,
                &mut [arg(&mut xp), arg(&mut n_all), arg(&mut cp)],
                s
            ),
            cudaSuccess
        );
    }
    assert_eq!(sim::cudaStreamSynchronize(s), cudaSuccess);
    let values: Vec<f32> = to_host(x, n as usize);
    assert!(values[..third as usize].iter().all(|v| *v == -3.0));
    assert!(values[third as usize..].iter().all(|v| *v == 1.5));
    let c: Vec<u32> = to_host(counter, 1);
    assert_eq!(c[0] as u64, 2 * (n - third));
    assert_eq!(sim::cudaStreamDestroy(s), cudaSuccess);
}

#[test]
fn gemm_multiplies_matrices_of_any_size() {
    let _serial = serial();
    let lib = kernels();
    let gemm = kernel(lib, c"gemm");
    for n in [1usize, 16, 37] {
        let a: Vec<f32> = (0..n * n).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
        let b: Vec<f32> = (0..n * n).map(|i| ((i * 3) % 5) as f32 * 0.25).collect();
        let (da, db, dc) = (
            device_alloc(n * n * 4),
            device_alloc(n * n * 4),
            device_alloc(n * n * 4),
        );
        // SAFETY: device buffers of n*n floats.
        unsafe {
            assert_eq!(
                sim::cudaMemcpy(da.cast(), a.as_ptr().cast(), n * n * 4, H2D),
                cudaSuccess
            );
            assert_eq!(
                sim::cudaMemcpy(db.cast(), b.as_ptr().cast(), n * n * 4, H2D),
                cudaSuccess
            );
        }
        let tiles = n.div_ceil(syncspy_kernels::GEMM_TILE as usize) as u32;
        let tile = syncspy_kernels::GEMM_TILE;
        let (mut pa, mut pb, mut pc, mut nn) = (da as u64, db as u64, dc as u64, n as i32);
        let rc = launch(
            gemm,
            d(tiles, tiles),
            d(tile, tile),
            &mut [arg(&mut pa), arg(&mut pb), arg(&mut pc), arg(&mut nn)],
            LEGACY,
        );
        assert_eq!(rc, cudaSuccess);
        let c: Vec<f32> = to_host(dc, n * n);
        for i in 0..n {
            for j in 0..n {
                let want: f32 = (0..n).map(|k| a[i * n + k] * b[k * n + j]).sum();
                assert!((c[i * n + j] - want).abs() < 1e-3, "n {n} c[{i}][{j}]");
            }
        }
    }
}

#[test]
fn kernel_durations_follow_their_arguments() {
    let _serial = serial();
    let lib = kernels();
    let (spin, gemm) = (kernel(lib, c"spin"), kernel(lib, c"gemm"));
    let s = stream(true);
    let (e0, e1, e2) = (event(), event(), event());
    let mut ns: u64 = 30_000_000;
    // n = 2048: above SIMCUDA_GEMM_COMPUTE_MAX_N, timed only. 2 * 2048³ FLOP at 8 TFLOP/s is
    // 2.147 ms, plus the 2 µs launch cost.
    let n = 2048usize;
    let m = device_alloc(n * n * 4);
    let (mut p, mut nn) = (m as u64, n as i32);
    let (launched, _) = timed(|| {
        assert_eq!(sim::cudaEventRecord(e0, s), cudaSuccess);
        assert_eq!(
            launch(spin, d(1, 1), d(1, 1), &mut [arg(&mut ns)], s),
            cudaSuccess
        );
        assert_eq!(sim::cudaEventRecord(e1, s), cudaSuccess);
        let rc = launch(
            gemm,
            d(128, 128),
            d(16, 16),
            &mut [arg(&mut p), arg(&mut p), arg(&mut p), arg(&mut nn)],
            s,
        );
        assert_eq!(rc, cudaSuccess);
        assert_eq!(sim::cudaEventRecord(e2, s), cudaSuccess);
    });
    assert!(launched < 5.0, "launches return at once: {launched} ms");
    let (waited, _) = timed(|| assert_eq!(sim::cudaStreamSynchronize(s), cudaSuccess));
    let both = launched + waited;
    assert!(both >= 30.0 + 2.147, "the sync waits for both: {both} ms");
    // Device time is modeled: exact but for the host's gaps between the calls (generous
    // bounds for loaded machines).
    let spin_ms = elapsed_ms(e0, e1);
    let gemm_ms = elapsed_ms(e1, e2);
    assert!((30.0..40.0).contains(&spin_ms), "spin {spin_ms} ms");
    assert!((2.147..13.0).contains(&gemm_ms), "gemm {gemm_ms} ms");

    // The time scale applies to kernels too.
    let _scale = TimeScale::set(0.1);
    assert_eq!(sim::cudaEventRecord(e0, s), cudaSuccess);
    assert_eq!(
        launch(spin, d(1, 1), d(1, 1), &mut [arg(&mut ns)], s),
        cudaSuccess
    );
    assert_eq!(sim::cudaEventRecord(e1, s), cudaSuccess);
    assert_eq!(sim::cudaEventSynchronize(e1), cudaSuccess);
    let scaled = elapsed_ms(e0, e1);
    assert!((3.0..13.0).contains(&scaled), "scaled spin {scaled} ms");
}

#[test]
fn kernels_queue_on_the_compute_engine_and_overlap_copies() {
    let _serial = serial();
    let lib = kernels();
    let spin = kernel(lib, c"spin");
    // 25 MB at 25 GB/s: 1 ms; scaled by 40: 40 ms. A 1 ms spin scaled: 40 ms.
    let _scale = TimeScale::set(40.0);
    const BYTES: usize = 25_000_000;
    let (dev, host) = (device_alloc(BYTES), pinned_alloc(BYTES));
    // SAFETY: both buffers hold BYTES; touching them first keeps page faults out.
    unsafe { sim::cudaMemcpy(dev.cast(), host.cast(), BYTES, H2D) };
    let (a, b) = (stream(true), stream(true));
    let mut ns: u64 = 1_000_000;
    let both = |f: &dyn Fn(&mut u64)| {
        let mut ns = ns;
        timed(|| {
            f(&mut ns);
            assert_eq!(sim::cudaStreamSynchronize(a), cudaSuccess);
            assert_eq!(sim::cudaStreamSynchronize(b), cudaSuccess);
        })
        .0
    };
    let overlap = both(&|ns| {
        assert_eq!(
            launch(spin, d(1, 1), d(1, 1), &mut [arg(ns)], a),
            cudaSuccess
        );
        // SAFETY: as above.
        let rc = unsafe { sim::cudaMemcpyAsync(dev.cast(), host.cast(), BYTES, H2D, b) };
        assert_eq!(rc, cudaSuccess);
    });
    assert!(overlap >= 40.0, "{overlap} ms");
    assert!(
        overlap < 70.0,
        "a kernel and a copy did not overlap: {overlap} ms"
    );
    let serial_kernels = both(&|ns| {
        assert_eq!(
            launch(spin, d(1, 1), d(1, 1), &mut [arg(ns)], a),
            cudaSuccess
        );
        assert_eq!(
            launch(spin, d(1, 1), d(1, 1), &mut [arg(ns)], b),
            cudaSuccess
        );
    });
    assert!(
        serial_kernels >= 80.0,
        "kernels of two streams share one engine: {serial_kernels} ms"
    );
    ns += 1;
    assert!(ns > 0);
}

#[test]
fn misuse_gets_cuda_error_codes() {
    let _serial = serial();
    let lib = kernels();
    let spin = kernel(lib, c"spin");
    let mut ns: u64 = 1;
    // SAFETY: the calls below pass invalid handles and values on purpose, never bad memory.
    unsafe {
        let mut args = [arg(&mut ns)];
        let a = args.as_mut_ptr();
        let rc = sim::cudaLaunchKernel(std::ptr::null(), d(1, 1), d(1, 1), a, 0, LEGACY);
        assert_eq!(rc, cudaErrorInvalidDeviceFunction);
        assert_eq!(sim::cudaGetLastError(), cudaErrorInvalidDeviceFunction);
        let host_fn = misuse_gets_cuda_error_codes as *const c_void;
        let rc = sim::cudaLaunchKernel(host_fn, d(1, 1), d(1, 1), a, 0, LEGACY);
        assert_eq!(rc, cudaErrorInvalidDeviceFunction);
        for (g, b) in [
            (d(0, 1), d(1, 1)),
            (d(1, 1), d(2048, 1)),
            (d(1, 1), d(64, 32)),
        ] {
            let rc = sim::cudaLaunchKernel(spin as *const c_void, g, b, a, 0, LEGACY);
            assert_eq!(rc, cudaErrorInvalidConfiguration);
        }
        let rc = sim::cudaLaunchKernel(
            spin as *const c_void,
            d(1, 1),
            d(1, 1),
            std::ptr::null_mut(),
            0,
            LEGACY,
        );
        assert_eq!(rc, cudaErrorInvalidValue);
        let bogus_stream = 0x1234usize as cudaStream_t;
        let rc = sim::cudaLaunchKernel(spin as *const c_void, d(1, 1), d(1, 1), a, 0, bogus_stream);
        assert_eq!(rc, cudaErrorInvalidResourceHandle);
        let mut out = std::ptr::null_mut();
        let rc = sim::cudaLibraryLoadData(
            &mut out,
            c"x".as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            1,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
        assert_eq!(rc, cudaErrorInvalidValue, "options counted but not given");
    }
    assert_eq!(load("\x7fELF\x02\x01"), Err(cudaErrorInvalidKernelImage));
    assert_eq!(load("__global__ void k() {}"), Err(cudaErrorInvalidPtx));
    // A kernel the simulator has no model for loads, but cannot be launched.
    let foreign = load(".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry mystery(\n)\n{\n\tret;\n}\n")
        .unwrap();
    let k = kernel(foreign, c"mystery");
    assert_eq!(
        launch(k, d(1, 1), d(1, 1), &mut [], LEGACY),
        cudaErrorNotSupported
    );
    // Unloading invalidates its kernels.
    assert_eq!(sim::cudaLibraryUnload(foreign), cudaSuccess);
    assert_eq!(
        launch(k, d(1, 1), d(1, 1), &mut [], LEGACY),
        cudaErrorInvalidDeviceFunction
    );
    // Failed launches leave nothing queued and no fault behind.
    sync_device();
}

/// Bad pointers in a launch fault when the kernel runs: the launch succeeds, the next
/// synchronization returns the device's sticky error. Each case runs in a forked child, since
/// the fault would stay with the test binary's device.
#[test]
fn bad_pointers_fault_on_the_device() {
    let _serial = serial();
    type Case = fn(cudaKernel_t, *mut u8) -> cudaError_t;
    let cases: [(&str, Case, cudaError_t); 4] = [
        (
            "pageable pointer",
            |fill, _| {
                let mut host = vec![0f32; 16];
                let (mut p, mut n, mut v) = (host.as_mut_ptr() as u64, 16u64, 1.0f32);
                launch(
                    fill,
                    d(1, 1),
                    d(32, 1),
                    &mut [arg(&mut p), arg(&mut n), arg(&mut v)],
                    LEGACY,
                )
            },
            cudaErrorIllegalAddress,
        ),
        (
            "past the end of an allocation",
            |fill, dev| {
                let (mut p, mut n, mut v) = (dev as u64, 4096u64, 1.0f32);
                launch(
                    fill,
                    d(1, 1),
                    d(32, 1),
                    &mut [arg(&mut p), arg(&mut n), arg(&mut v)],
                    LEGACY,
                )
            },
            cudaErrorIllegalAddress,
        ),
        (
            "misaligned",
            |fill, dev| {
                let (mut p, mut n, mut v) = (dev as u64 + 2, 4u64, 1.0f32);
                launch(
                    fill,
                    d(1, 1),
                    d(32, 1),
                    &mut [arg(&mut p), arg(&mut n), arg(&mut v)],
                    LEGACY,
                )
            },
            cudaErrorMisalignedAddress,
        ),
        (
            "freed before the launch",
            |fill, dev| {
                assert_eq!(sim::cudaFree(dev.cast()), cudaSuccess);
                let (mut p, mut n, mut v) = (dev as u64, 16u64, 1.0f32);
                // The launch itself cannot know; the device finds out.
                launch(
                    fill,
                    d(1, 1),
                    d(32, 1),
                    &mut [arg(&mut p), arg(&mut n), arg(&mut v)],
                    LEGACY,
                )
            },
            cudaErrorIllegalAddress,
        ),
    ];
    for (what, case, want) in cases {
        let status = in_child(LIMIT, || {
            let lib = kernels();
            let fill = kernel(lib, c"fill");
            let dev = device_alloc(1024);
            let launched = case(fill, dev) == cudaSuccess;
            let synced = sim::cudaDeviceSynchronize();
            let sticky = sim::cudaDeviceSynchronize();
            let reset = sim::cudaDeviceReset() == cudaSuccess
                && sim::cudaDeviceSynchronize() == cudaSuccess;
            match (launched, synced == want, sticky == want, reset) {
                (false, ..) => 1,
                (_, false, ..) => 2,
                (_, _, false, _) => 3,
                (_, _, _, false) => 4,
                _ => 0,
            }
        });
        assert_eq!(
            status,
            Some(0),
            "{what}: failed step (1-based) in the child"
        );
    }
}
