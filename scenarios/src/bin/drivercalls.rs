//! `drivercalls`: uses the CUDA driver API only, finding it the way programs that load the
//! driver themselves do, and prints what it did (the same ground-truth line as `cudacalls`,
//! by driver function).
//!
//! ```text
//! drivercalls MODE [ITERS]
//! ```
//! MODE says how the driver functions are found, after `dlopen("libcuda.so.1", RTLD_LOCAL)`:
//! - `procaddr`: `dlsym(handle, "cuGetProcAddress_v2")`, then `cuGetProcAddress_v2` for
//!   every function (frameworks, cudarc);
//! - `static`: as NVIDIA's statically linked runtime does: `cuGetProcAddress_v2` found with
//!   `dlsym`, then `cuGetProcAddress` asked for itself, and that one used for every function,
//!   legacy and per-thread-default-stream forms alike;
//! - `dlsym`: `dlsym(handle, "cuMemcpyDtoH_v2")` for each function (JAX/XLA's stubs, Triton).
//!
//! Each iteration makes, in order: a 1 ms host function and `cuStreamSynchronize` (stream
//! sync); blocking 4 KiB `cuMemcpyHtoD` and `cuMemcpyDtoH` from and to pageable memory
//! (memcpy sync); `cuMemcpyDtoHAsync` into pageable memory (memcpy pageable); `cuMemcpyHtoDAsync`
//! from pinned memory (not a stall); `cuMemcpyAsync` from pageable memory to the device
//! (memcpy pageable, direction from the pointers); `cuEventRecord` + `cuEventSynchronize`
//! (event sync); `cuCtxSynchronize` (device sync); `cuStreamSynchronize_ptsz` of the
//! per-thread default stream (stream sync; `static` and `procaddr` only); `cuMemcpyDtoD`
//! (not a stall). Set-up and tear-down: `cuMemAllocHost`, `cuMemHostRegister`,
//! `cuMemHostUnregister`, `cuMemFreeHost`, `cuMemFree` (implicit syncs). With
//! `DRIVERCALLS_POLL=1`, each iteration also polls a 1 ms host function with `cuStreamQuery`
//! until it is done, then one through an event with `cuEventQuery` (polling waits).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::process::ExitCode;
use std::time::Duration;

use cudarc::driver::sys::{CUcontext, CUdevice, CUdeviceptr, CUevent, CUstream};
use syncspy_scenarios::loader::{why, Library, RTLD_LOCAL, RTLD_NOW};
use syncspy_scenarios::truth::{Kind, Truth};

type Res = u32;
type GetProcV2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> Res;

struct Driver {
    init: unsafe extern "C" fn(c_uint) -> Res,
    device_get: unsafe extern "C" fn(*mut CUdevice, c_int) -> Res,
    retain: unsafe extern "C" fn(*mut CUcontext, CUdevice) -> Res,
    set_current: unsafe extern "C" fn(CUcontext) -> Res,
    alloc: unsafe extern "C" fn(*mut CUdeviceptr, usize) -> Res,
    stream_create: unsafe extern "C" fn(*mut CUstream, c_uint) -> Res,
    event_create: unsafe extern "C" fn(*mut CUevent, c_uint) -> Res,
    event_record: unsafe extern "C" fn(CUevent, CUstream) -> Res,
    host_func: unsafe extern "C" fn(
        CUstream,
        Option<unsafe extern "C" fn(*mut c_void)>,
        *mut c_void,
    ) -> Res,
    /// Called with a NULL context: ignored by the first version, "the current context"
    /// for CUDA 13's `cuCtxSynchronize_v2`, whichever `cuGetProcAddress` returns.
    ctx_sync: unsafe extern "C" fn(CUcontext) -> Res,
    stream_sync: unsafe extern "C" fn(CUstream) -> Res,
    stream_sync_ptsz: Option<unsafe extern "C" fn(CUstream) -> Res>,
    event_sync: unsafe extern "C" fn(CUevent) -> Res,
    stream_query: unsafe extern "C" fn(CUstream) -> Res,
    event_query: unsafe extern "C" fn(CUevent) -> Res,
    htod: unsafe extern "C" fn(CUdeviceptr, *const c_void, usize) -> Res,
    dtoh: unsafe extern "C" fn(*mut c_void, CUdeviceptr, usize) -> Res,
    dtod: unsafe extern "C" fn(CUdeviceptr, CUdeviceptr, usize) -> Res,
    htod_async: unsafe extern "C" fn(CUdeviceptr, *const c_void, usize, CUstream) -> Res,
    dtoh_async: unsafe extern "C" fn(*mut c_void, CUdeviceptr, usize, CUstream) -> Res,
    copy_async: unsafe extern "C" fn(CUdeviceptr, CUdeviceptr, usize, CUstream) -> Res,
    free: unsafe extern "C" fn(CUdeviceptr) -> Res,
    alloc_host: unsafe extern "C" fn(*mut *mut c_void, usize) -> Res,
    free_host: unsafe extern "C" fn(*mut c_void) -> Res,
    register: unsafe extern "C" fn(*mut c_void, usize, c_uint) -> Res,
    unregister: unsafe extern "C" fn(*mut c_void) -> Res,
}

/// A looked-up function as the function pointer type `F`.
///
/// # Safety
/// `p` is a function whose C signature `F` is.
unsafe fn cast<F: Copy>(p: *mut c_void) -> F {
    const { assert!(size_of::<F>() == size_of::<*mut c_void>()) };
    // SAFETY: same size (asserted); the caller's contract.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}

/// How to look a function up: by base name, and whether the per-thread form is wanted.
type Lookup<'a> = dyn Fn(&CStr, &CStr, bool) -> Option<*mut c_void> + 'a;

fn load(mode: &str) -> Result<Driver, String> {
    // libloading calls dlopen and dlsym themselves, so a preloaded interposer sees the ways
    // of finding the driver that this program imitates.
    // SAFETY: loading the driver runs no CUDA initialisation (`cuInit` does, below).
    let lib = unsafe { Library::open(Some("libcuda.so.1"), RTLD_NOW | RTLD_LOCAL) }
        .map_err(|e| format!("cannot dlopen libcuda.so.1: {}", why(&e)))?;
    // Never closed: the functions taken from it are called until the process ends.
    let lib: &'static Library = Box::leak(Box::new(lib));
    let sym = |name: &CStr| {
        // SAFETY: only the address is read here; `cast` gives it its C signature.
        let p = unsafe { lib.get::<*mut c_void>(name) }.map(|s| *s);
        p.ok().filter(|p| !p.is_null())
    };
    let gpa = || -> Result<GetProcV2, String> {
        // SAFETY: cuGetProcAddress_v2's C signature (the status enum as an int); a NULL
        // address reads as None.
        let f = unsafe { lib.get::<Option<GetProcV2>>(c"cuGetProcAddress_v2") };
        f.map_err(|e| why(&e))
            .and_then(|f| f.ok_or_else(|| "NULL".into()))
            .map_err(|e| format!("no cuGetProcAddress_v2: {e}"))
    };
    let via = |gpa: GetProcV2| {
        move |base: &CStr, _: &CStr, ptds: bool| {
            let mut p = std::ptr::null_mut();
            let mut status = 0;
            // SAFETY: a C string and locals; 2 is CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.
            let rc = unsafe {
                gpa(
                    base.as_ptr(),
                    &mut p,
                    13000,
                    if ptds { 2 } else { 0 },
                    &mut status,
                )
            };
            (rc == 0 && status == 0 && !p.is_null()).then_some(p)
        }
    };
    let lookup: Box<Lookup> = match mode {
        "procaddr" => Box::new(via(gpa()?)),
        "static" => {
            let first = via(gpa()?);
            let own = first(c"cuGetProcAddress", c"", false).ok_or("cuGetProcAddress of itself")?;
            // SAFETY: cuGetProcAddress at version 13000 is the 5-argument form.
            let own = unsafe { std::mem::transmute::<*mut c_void, GetProcV2>(own) };
            Box::new(via(own))
        }
        "dlsym" => {
            Box::new(|_: &CStr, exact: &CStr, ptds: bool| if ptds { None } else { sym(exact) })
        }
        _ => return Err(format!("unknown mode {mode}")),
    };
    macro_rules! f {
        ($base:literal, $exact:literal) => {{
            let p = lookup($base, $exact, false).ok_or(concat!("no ", stringify!($base)))?;
            // SAFETY: the driver function of that name, typed with its C signature by the
            // field it goes into.
            unsafe { cast(p) }
        }};
    }
    Ok(Driver {
        init: f!(c"cuInit", c"cuInit"),
        device_get: f!(c"cuDeviceGet", c"cuDeviceGet"),
        retain: f!(c"cuDevicePrimaryCtxRetain", c"cuDevicePrimaryCtxRetain"),
        set_current: f!(c"cuCtxSetCurrent", c"cuCtxSetCurrent"),
        alloc: f!(c"cuMemAlloc", c"cuMemAlloc_v2"),
        stream_create: f!(c"cuStreamCreate", c"cuStreamCreate"),
        event_create: f!(c"cuEventCreate", c"cuEventCreate"),
        event_record: f!(c"cuEventRecord", c"cuEventRecord"),
        host_func: f!(c"cuLaunchHostFunc", c"cuLaunchHostFunc"),
        ctx_sync: f!(c"cuCtxSynchronize", c"cuCtxSynchronize"),
        stream_sync: f!(c"cuStreamSynchronize", c"cuStreamSynchronize"),
        stream_sync_ptsz: lookup(c"cuStreamSynchronize", c"", true)
            // SAFETY: as in `f!`.
            .map(|p| unsafe { cast(p) }),
        event_sync: f!(c"cuEventSynchronize", c"cuEventSynchronize"),
        stream_query: f!(c"cuStreamQuery", c"cuStreamQuery"),
        event_query: f!(c"cuEventQuery", c"cuEventQuery"),
        htod: f!(c"cuMemcpyHtoD", c"cuMemcpyHtoD_v2"),
        dtoh: f!(c"cuMemcpyDtoH", c"cuMemcpyDtoH_v2"),
        dtod: f!(c"cuMemcpyDtoD", c"cuMemcpyDtoD_v2"),
        htod_async: f!(c"cuMemcpyHtoDAsync", c"cuMemcpyHtoDAsync_v2"),
        dtoh_async: f!(c"cuMemcpyDtoHAsync", c"cuMemcpyDtoHAsync_v2"),
        copy_async: f!(c"cuMemcpyAsync", c"cuMemcpyAsync"),
        free: f!(c"cuMemFree", c"cuMemFree_v2"),
        alloc_host: f!(c"cuMemAllocHost", c"cuMemAllocHost_v2"),
        free_host: f!(c"cuMemFreeHost", c"cuMemFreeHost"),
        register: f!(c"cuMemHostRegister", c"cuMemHostRegister_v2"),
        unregister: f!(c"cuMemHostUnregister", c"cuMemHostUnregister"),
    })
}

unsafe extern "C" fn sleep_1ms(_: *mut c_void) {
    std::thread::sleep(Duration::from_millis(1));
}

fn check(rc: Res, what: &str) -> Result<(), String> {
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("{what} failed: CUresult {rc}"))
    }
}

/// `CUDA_ERROR_NOT_READY`: what a query answers while work is pending.
const NOT_READY: Res = 600;

/// The buffers, stream and event every iteration uses.
struct Work {
    a: CUdeviceptr,
    b: CUdeviceptr,
    s: CUstream,
    e: CUevent,
    /// `N` bytes allocated with `cuMemAllocHost`.
    pinned: *mut c_void,
    /// `N` bytes of the caller's, registered with `cuMemHostRegister`.
    registered: *mut c_void,
    /// `N` bytes of the caller's, pageable.
    pageable: *mut c_void,
}

/// The size of each buffer.
const N: usize = 4096;

fn run(mode: &str, iters: u32) -> Result<Truth, String> {
    // DRIVERCALLS_POLL=1: each iteration also spins on cuStreamQuery and cuEventQuery.
    let poll = std::env::var_os("DRIVERCALLS_POLL").is_some_and(|v| v == "1");
    let d = load(mode)?;
    let mut t = Truth::default();
    let mut pageable = vec![1u8; N];
    let mut registered = vec![0u8; N];
    // SAFETY: every call is a driver function with its C signature, given locals and the
    // buffers above, which outlive the calls (each iteration ends synchronized).
    unsafe {
        let w = set_up(&d, &mut t, &mut registered, &mut pageable)?;
        for _ in 0..iters {
            iteration(&d, &mut t, &w)?;
            if poll {
                poll_until_done(&d, &mut t, &w)?;
            }
            if let Some(f) = d.stream_sync_ptsz {
                let k = Kind::StreamSync;
                let per_thread = std::ptr::null_mut();
                check(
                    t.classified("cuStreamSynchronize", k, 0, || f(per_thread)),
                    "ptsz",
                )?;
            }
        }
        tear_down(&d, &mut t, &w)?;
    }
    Ok(t)
}

/// The context, two device buffers, a stream and an event; the pinned buffer and the
/// registered one (implicit syncs).
///
/// # Safety
/// `d` holds the driver's functions with their C signatures.
unsafe fn set_up(
    d: &Driver,
    t: &mut Truth,
    registered: &mut [u8],
    pageable: &mut [u8],
) -> Result<Work, String> {
    // SAFETY: driver functions with their C signatures, given locals and the caller's
    // buffers of N bytes.
    unsafe {
        check((d.init)(0), "cuInit")?;
        let (mut dev, mut ctx) = (0, std::ptr::null_mut());
        check((d.device_get)(&mut dev, 0), "cuDeviceGet")?;
        check((d.retain)(&mut ctx, dev), "cuDevicePrimaryCtxRetain")?;
        check((d.set_current)(ctx), "cuCtxSetCurrent")?;
        let (mut a, mut b, mut s, mut e) = (0, 0, std::ptr::null_mut(), std::ptr::null_mut());
        check((d.alloc)(&mut a, N), "cuMemAlloc")?;
        check((d.alloc)(&mut b, N), "cuMemAlloc")?;
        check((d.stream_create)(&mut s, 0), "cuStreamCreate")?;
        check((d.event_create)(&mut e, 0), "cuEventCreate")?;
        let mut pinned = std::ptr::null_mut();
        let n = N as u64;
        check(
            t.classified("cuMemAllocHost", Kind::ImplicitSync, n, || {
                (d.alloc_host)(&mut pinned, N)
            }),
            "cuMemAllocHost",
        )?;
        let reg = registered.as_mut_ptr().cast::<c_void>();
        check(
            t.classified("cuMemHostRegister", Kind::ImplicitSync, n, || {
                (d.register)(reg, N, 0)
            }),
            "cuMemHostRegister",
        )?;
        Ok(Work {
            a,
            b,
            s,
            e,
            pinned,
            registered: reg,
            pageable: pageable.as_mut_ptr().cast::<c_void>(),
        })
    }
}

/// One iteration's calls, one or two of each kind, after a 1 ms host function.
///
/// # Safety
/// `d` holds the driver's functions with their C signatures; `w` came from [`set_up`] and
/// its buffers are alive.
unsafe fn iteration(d: &Driver, t: &mut Truth, w: &Work) -> Result<(), String> {
    let (a, b, s, e, pg) = (w.a, w.b, w.s, w.e, w.pageable);
    let n = N as u64;
    // SAFETY: driver functions with their C signatures, given the work's live buffers.
    unsafe {
        check(
            (d.host_func)(s, Some(sleep_1ms), std::ptr::null_mut()),
            "cuLaunchHostFunc",
        )?;
        let k = Kind::StreamSync;
        check(
            t.classified("cuStreamSynchronize", k, 0, || (d.stream_sync)(s)),
            "sync",
        )?;
        let k = Kind::MemcpySync;
        check(
            t.classified("cuMemcpyHtoD", k, n, || (d.htod)(a, pg, N)),
            "htod",
        )?;
        check(
            t.classified("cuMemcpyDtoH", k, n, || (d.dtoh)(pg, a, N)),
            "dtoh",
        )?;
        let k = Kind::MemcpyPageable;
        check(
            t.classified("cuMemcpyDtoHAsync", k, 1000, || {
                (d.dtoh_async)(pg, a, 1000, s)
            }),
            "dtoh async",
        )?;
        check(
            t.classified("cuMemcpyAsync", k, 512, || {
                (d.copy_async)(b, pg as u64, 512, s)
            }),
            "copy async",
        )?;
        let k = Kind::NonStall;
        check(
            t.classified("cuMemcpyHtoDAsync", k, 1000, || {
                (d.htod_async)(a, w.pinned, 1000, s)
            }),
            "htod async",
        )?;
        check(
            t.classified("cuMemcpyDtoD", k, 256, || (d.dtod)(b, a, 256)),
            "dtod",
        )?;
        check((d.event_record)(e, s), "cuEventRecord")?;
        let k = Kind::EventSync;
        check(
            t.classified("cuEventSynchronize", k, 0, || (d.event_sync)(e)),
            "event",
        )?;
        let k = Kind::DeviceSync;
        check(
            t.classified("cuCtxSynchronize", k, 0, || {
                (d.ctx_sync)(std::ptr::null_mut())
            }),
            "ctx sync",
        )?;
    }
    Ok(())
}

/// A 1 ms host function polled with cuStreamQuery until done, then one polled through an
/// event with cuEventQuery.
///
/// # Safety
/// As [`iteration`].
unsafe fn poll_until_done(d: &Driver, t: &mut Truth, w: &Work) -> Result<(), String> {
    let (s, e) = (w.s, w.e);
    for api in ["cuStreamQuery", "cuEventQuery"] {
        // SAFETY: driver functions with their C signatures, given the work's stream and
        // event.
        unsafe {
            check(
                (d.host_func)(s, Some(sleep_1ms), std::ptr::null_mut()),
                "cuLaunchHostFunc",
            )?;
            if api == "cuEventQuery" {
                check((d.event_record)(e, s), "cuEventRecord")?;
            }
            let t0 = std::time::Instant::now();
            let mut not_ready = 0;
            loop {
                let rc = t.call(api, 0, || {
                    if api == "cuStreamQuery" {
                        (d.stream_query)(s)
                    } else {
                        (d.event_query)(e)
                    }
                });
                if rc != NOT_READY {
                    check(rc, api)?;
                    break;
                }
                not_ready += 1;
            }
            t.spin(api, not_ready, t0.elapsed().as_nanos() as u64);
        }
    }
    Ok(())
}

/// The set-up undone: unregister, free the pinned and the device buffers (implicit syncs).
///
/// # Safety
/// As [`iteration`].
unsafe fn tear_down(d: &Driver, t: &mut Truth, w: &Work) -> Result<(), String> {
    let n = N as u64;
    let k = Kind::ImplicitSync;
    // SAFETY: driver functions with their C signatures, given what set_up made.
    unsafe {
        check(
            t.classified("cuMemHostUnregister", k, n, || (d.unregister)(w.registered)),
            "unregister",
        )?;
        check(
            t.classified("cuMemFreeHost", k, n, || (d.free_host)(w.pinned)),
            "free host",
        )?;
        check(t.classified("cuMemFree", k, 0, || (d.free)(w.a)), "free")?;
        check(t.classified("cuMemFree", k, 0, || (d.free)(w.b)), "free")?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or("procaddr");
    let iters = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(3);
    match run(mode, iters) {
        Ok(t) => {
            println!("{}", t.to_json(std::process::id()));
            let kinds: Vec<String> = t
                .kinds
                .iter()
                .map(|(k, v)| format!("\"{k}\":{}", v.count))
                .collect();
            let quiet: Vec<String> = t
                .non_stall
                .iter()
                .map(|(k, v)| format!("\"{k}\":{}", v.count))
                .collect();
            println!(
                "{{\"kinds\":{{{}}},\"non_stall\":{{{}}}}}",
                kinds.join(","),
                quiet.join(",")
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("drivercalls: {e}");
            ExitCode::FAILURE
        }
    }
}
