//! `cudacalls`: makes exactly the CUDA runtime calls it is told to, and prints what it did.
//!
//! ```text
//! cudacalls [--iters N] [--threads T] [--fork] OP...
//! ```
//! Each OP runs in order, the whole list `--iters` times, in each of `--threads` threads
//! (each thread with its own streams and buffers; the threads start at once). `--fork` forks before the first CUDA call;
//! parent and child both run the list. At exit each process prints one JSON line of ground
//! truth: per CUDA function, the number of calls, bytes, and host time measured around each.
//!
//! Streams: `s0` legacy default, `s1` the thread's own blocking stream, `sn` its own
//! non-blocking stream, `sp` the per-thread default stream. DIR: h2d d2h d2d h2h.
//! MEM: pageable pinned registered.
//!
//! ```text
//! busy=S:US            host function sleeping US µs in stream S: GPU work of known length
//! sync=S  sync-ptsz=S  cudaStreamSynchronize(_ptsz)
//! sync-a=S  sync-b=S   cudaStreamSynchronize from one function reached via two callers
//! device-sync          cudaDeviceSynchronize
//! event-sync=S         cudaEventRecord on S, then cudaEventSynchronize
//! poll=S               spin on cudaStreamQuery(S) until it is not cudaErrorNotReady
//! poll-event=S         cudaEventRecord on S, then spin on cudaEventQuery the same way
//! query=S              one cudaStreamQuery(S), whatever it answers (no spin)
//! memcpy=DIR:BYTES[:MEM]   memcpy-ptds=DIR:BYTES   memcpy-default=DIR:BYTES
//! async=DIR:BYTES:MEM:S    async-ptsz=DIR:BYTES:MEM:S
//! memcpy2d=DIR:W:H         async2d=DIR:W:H:MEM:S
//! memcpy3d=DIR:W:H:D       async3d=DIR:W:H:D:MEM:S
//! peer=BYTES  free  free-null  host-alloc=BYTES  malloc-host=BYTES  register=BYTES
//! memset=BYTES  memset-host=BYTES  sleep=US
//! ```

use std::ffi::c_void;
use std::process::ExitCode;
use std::ptr::null_mut;
use std::time::Duration;

use syncspy_scenarios::cuda::*;
use syncspy_scenarios::truth::Truth;

const STREAM_PER_THREAD: usize = 2;
const BUF: usize = 16 << 20;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mem {
    Pageable,
    Pinned,
    Registered,
}

struct Ctx {
    t: Truth,
    s1: cudaStream_t,
    sn: cudaStream_t,
    dev: *mut c_void,
    dev2: *mut c_void,
    pageable: Vec<u8>,
    pageable2: Vec<u8>,
    pinned: *mut c_void,
    pinned2: *mut c_void,
    registered: *mut c_void,
    event: cudaEvent_t,
}

fn check_call(rc: cudaError_t, what: &str) {
    check(rc, what)
}

impl Ctx {
    fn new() -> Ctx {
        let mut t = Truth::default();
        let mut s1 = null_mut();
        let mut sn = null_mut();
        let (mut dev, mut dev2, mut pinned, mut pinned2) =
            (null_mut(), null_mut(), null_mut(), null_mut());
        let mut event = null_mut();
        // SAFETY: plain runtime calls with valid out-pointers.
        unsafe {
            check_call(
                t.call("cudaStreamCreateWithFlags", 0, || {
                    cudaStreamCreateWithFlags(&mut s1, 0)
                }),
                "stream",
            );
            check_call(
                t.call("cudaStreamCreateWithFlags", 0, || {
                    cudaStreamCreateWithFlags(&mut sn, 1)
                }),
                "stream",
            );
            check_call(
                t.call("cudaMalloc", 0, || cudaMalloc(&mut dev, BUF)),
                "cudaMalloc",
            );
            check_call(
                t.call("cudaMalloc", 0, || cudaMalloc(&mut dev2, BUF)),
                "cudaMalloc",
            );
            check_call(
                t.call("cudaMallocHost", BUF as u64, || {
                    cudaMallocHost(&mut pinned, BUF)
                }),
                "cudaMallocHost",
            );
            check_call(
                t.call("cudaMallocHost", BUF as u64, || {
                    cudaMallocHost(&mut pinned2, BUF)
                }),
                "cudaMallocHost",
            );
            check_call(
                t.call("cudaEventCreate", 0, || cudaEventCreate(&mut event)),
                "cudaEventCreate",
            );
        }
        let mut registered = null_mut();
        // SAFETY: page-aligned allocation for cudaHostRegister.
        unsafe {
            if libc::posix_memalign(&mut registered, 4096, BUF) != 0 {
                panic!("posix_memalign failed");
            }
            check_call(
                t.call("cudaHostRegister", BUF as u64, || {
                    cudaHostRegister(registered, BUF, 0)
                }),
                "cudaHostRegister",
            );
        }
        Ctx {
            t,
            s1,
            sn,
            dev,
            dev2,
            pageable: vec![0u8; BUF],
            pageable2: vec![0u8; BUF],
            pinned,
            pinned2,
            registered,
            event,
        }
    }

    fn finish(mut self) -> Truth {
        // SAFETY: releasing what `new` allocated.
        unsafe {
            let t = &mut self.t;
            check_call(
                t.call("cudaDeviceSynchronize", 0, || cudaDeviceSynchronize()),
                "sync",
            );
            check_call(
                t.call("cudaHostUnregister", BUF as u64, || {
                    cudaHostUnregister(self.registered)
                }),
                "unregister",
            );
            libc::free(self.registered);
            check_call(
                t.call("cudaFreeHost", BUF as u64, || cudaFreeHost(self.pinned)),
                "cudaFreeHost",
            );
            check_call(
                t.call("cudaFreeHost", BUF as u64, || cudaFreeHost(self.pinned2)),
                "cudaFreeHost",
            );
            check_call(t.call("cudaFree", 0, || cudaFree(self.dev)), "cudaFree");
            check_call(t.call("cudaFree", 0, || cudaFree(self.dev2)), "cudaFree");
            check_call(
                t.call("cudaEventDestroy", 0, || cudaEventDestroy(self.event)),
                "event",
            );
            check_call(
                t.call("cudaStreamDestroy", 0, || cudaStreamDestroy(self.s1)),
                "stream",
            );
            check_call(
                t.call("cudaStreamDestroy", 0, || cudaStreamDestroy(self.sn)),
                "stream",
            );
        }
        self.t
    }

    fn stream(&self, s: &str) -> cudaStream_t {
        match s {
            "s0" => null_mut(),
            "s1" => self.s1,
            "sn" => self.sn,
            "sp" => STREAM_PER_THREAD as cudaStream_t,
            _ => panic!("unknown stream {s:?} (s0 s1 sn sp)"),
        }
    }

    fn host(&mut self, mem: Mem, second: bool) -> *mut c_void {
        match (mem, second) {
            (Mem::Pageable, false) => self.pageable.as_mut_ptr().cast(),
            (Mem::Pageable, true) => self.pageable2.as_mut_ptr().cast(),
            (Mem::Pinned, false) => self.pinned,
            (Mem::Pinned, true) => self.pinned2,
            (Mem::Registered, _) => self.registered,
        }
    }

    /// (dst, src, kind) for a copy in `dir` with host memory of type `mem`.
    fn ends(&mut self, dir: &str, mem: Mem) -> (*mut c_void, *const c_void, cudaMemcpyKind) {
        use cudaMemcpyKind::*;
        match dir {
            "h2d" => (self.dev, self.host(mem, false), cudaMemcpyHostToDevice),
            "d2h" => (self.host(mem, false), self.dev, cudaMemcpyDeviceToHost),
            "d2d" => (self.dev2, self.dev, cudaMemcpyDeviceToDevice),
            "h2h" => (
                self.host(mem, true),
                self.host(mem, false),
                cudaMemcpyHostToHost,
            ),
            _ => panic!("unknown direction {dir:?} (h2d d2h d2d h2h)"),
        }
    }
}

fn num(s: &str) -> usize {
    s.parse().unwrap_or_else(|_| panic!("not a number: {s:?}"))
}

fn mem(s: Option<&str>) -> Mem {
    match s {
        None | Some("pageable") => Mem::Pageable,
        Some("pinned") => Mem::Pinned,
        Some("registered") => Mem::Registered,
        Some(m) => panic!("unknown memory {m:?} (pageable pinned registered)"),
    }
}

extern "C" fn sleep_in_stream(us: *mut c_void) {
    std::thread::sleep(Duration::from_micros(us as usize as u64));
}

fn pitched(ptr: *mut c_void, w: usize, h: usize) -> cudaPitchedPtr {
    cudaPitchedPtr {
        ptr,
        pitch: w,
        xsize: w,
        ysize: h,
    }
}

/// `cudaStreamSynchronize` from one shared function, reached through two different callers
/// at the same stack depth (ops `sync-a`, `sync-b`): the two stalls have the same immediate
/// caller and stack pointer and differ only further up, which syncspy must still tell apart.
#[inline(never)]
fn shared_sync(t: &mut Truth, s: cudaStream_t) {
    // SAFETY: a live stream handle.
    check(
        t.call("cudaStreamSynchronize", 0, || unsafe {
            cudaStreamSynchronize(s)
        }),
        "sync",
    );
}

#[inline(never)]
fn path_a(t: &mut Truth, s: cudaStream_t) {
    shared_sync(t, s);
    std::hint::black_box(());
}

#[inline(never)]
fn path_b(t: &mut Truth, s: cudaStream_t) {
    shared_sync(t, s);
    std::hint::black_box(());
}

fn run_op(c: &mut Ctx, op: &str) {
    let (name, arg) = op.split_once('=').unwrap_or((op, ""));
    let a: Vec<&str> = arg.split(':').collect();
    let done = sync_op(c, op, name, &a) || copy_op(c, op, name, &a) || memory_op(c, op, name, &a);
    if !done {
        panic!("unknown op {op:?}; see the doc comment of cudacalls.rs");
    }
}

/// The ops that wait for the GPU (or ask whether it is done); false for another op.
fn sync_op(c: &mut Ctx, op: &str, name: &str, a: &[&str]) -> bool {
    // SAFETY: every call gets buffers of BUF bytes (sizes are checked below) and live handles.
    unsafe {
        match name {
            "busy" => {
                let s = c.stream(a[0]);
                let us = num(a[1]);
                let rc = c.t.call("cudaLaunchHostFunc", 0, || {
                    cudaLaunchHostFunc(s, Some(sleep_in_stream), us as *mut c_void)
                });
                check(rc, "cudaLaunchHostFunc");
            }
            "sync" => {
                let s = c.stream(a[0]);
                check(
                    c.t.call("cudaStreamSynchronize", 0, || cudaStreamSynchronize(s)),
                    op,
                );
            }
            "sync-ptsz" => {
                let s = c.stream(a[0]);
                check(
                    c.t.call("cudaStreamSynchronize_ptsz", 0, || {
                        cudaStreamSynchronize_ptsz(s)
                    }),
                    op,
                );
            }
            "sync-a" => {
                let s = c.stream(a[0]);
                path_a(&mut c.t, s);
            }
            "sync-b" => {
                let s = c.stream(a[0]);
                path_b(&mut c.t, s);
            }
            "device-sync" => check(
                c.t.call("cudaDeviceSynchronize", 0, || cudaDeviceSynchronize()),
                op,
            ),
            "event-sync" => {
                let (s, e) = (c.stream(a[0]), c.event);
                check(c.t.call("cudaEventRecord", 0, || cudaEventRecord(e, s)), op);
                check(
                    c.t.call("cudaEventSynchronize", 0, || cudaEventSynchronize(e)),
                    op,
                );
            }
            "query" => {
                let s = c.stream(a[0]);
                let rc = c.t.call("cudaStreamQuery", 0, || cudaStreamQuery(s));
                if rc != cudaError_t::cudaErrorNotReady {
                    check(rc, op);
                }
            }
            "poll" | "poll-event" => {
                let (s, e) = (c.stream(a[0]), c.event);
                let api = if name == "poll" {
                    "cudaStreamQuery"
                } else {
                    check(c.t.call("cudaEventRecord", 0, || cudaEventRecord(e, s)), op);
                    "cudaEventQuery"
                };
                let t0 = std::time::Instant::now();
                let mut not_ready = 0;
                loop {
                    let rc = c.t.call(api, 0, || {
                        if name == "poll" {
                            cudaStreamQuery(s)
                        } else {
                            cudaEventQuery(e)
                        }
                    });
                    if rc != cudaError_t::cudaErrorNotReady {
                        check(rc, op);
                        break;
                    }
                    not_ready += 1;
                }
                c.t.spin(api, not_ready, t0.elapsed().as_nanos() as u64);
            }
            _ => return false,
        }
    }
    true
}

/// The copies; false for another op.
fn copy_op(c: &mut Ctx, op: &str, name: &str, a: &[&str]) -> bool {
    // SAFETY: every call gets buffers of BUF bytes (sizes are checked below) and live handles.
    unsafe {
        match name {
            "memcpy" | "memcpy-ptds" | "memcpy-default" => {
                let n = num(a[1]);
                assert!(n <= BUF);
                let (d, s, mut k) = c.ends(a[0], mem(a.get(2).copied()));
                if name == "memcpy-default" {
                    k = cudaMemcpyKind::cudaMemcpyDefault;
                }
                let rc = if name == "memcpy-ptds" {
                    c.t.call("cudaMemcpy_ptds", n as u64, || cudaMemcpy_ptds(d, s, n, k))
                } else {
                    c.t.call("cudaMemcpy", n as u64, || cudaMemcpy(d, s, n, k))
                };
                check(rc, op);
            }
            "async" | "async-ptsz" => {
                let n = num(a[1]);
                assert!(n <= BUF);
                let (d, s, k) = c.ends(a[0], mem(a.get(2).copied()));
                let st = c.stream(a.get(3).copied().unwrap_or("s1"));
                let rc = if name == "async-ptsz" {
                    c.t.call("cudaMemcpyAsync_ptsz", n as u64, || {
                        cudaMemcpyAsync_ptsz(d, s, n, k, st)
                    })
                } else {
                    c.t.call("cudaMemcpyAsync", n as u64, || {
                        cudaMemcpyAsync(d, s, n, k, st)
                    })
                };
                check(rc, op);
            }
            "memcpy2d" | "async2d" => {
                let (w, h) = (num(a[1]), num(a[2]));
                assert!(w * h <= BUF);
                let (d, s, k) = c.ends(a[0], mem(a.get(3).copied()));
                let rc = if name == "async2d" {
                    let st = c.stream(a.get(4).copied().unwrap_or("s1"));
                    c.t.call("cudaMemcpy2DAsync", (w * h) as u64, || {
                        cudaMemcpy2DAsync(d, w, s, w, w, h, k, st)
                    })
                } else {
                    c.t.call("cudaMemcpy2D", (w * h) as u64, || {
                        cudaMemcpy2D(d, w, s, w, w, h, k)
                    })
                };
                check(rc, op);
            }
            "memcpy3d" | "async3d" => {
                let (w, h, dd) = (num(a[1]), num(a[2]), num(a[3]));
                assert!(w * h * dd <= BUF);
                let (d, s, k) = c.ends(a[0], mem(a.get(4).copied()));
                let mut p: cudaMemcpy3DParms = std::mem::zeroed();
                p.srcPtr = pitched(s as *mut c_void, w, h);
                p.dstPtr = pitched(d, w, h);
                p.extent = cudaExtent {
                    width: w,
                    height: h,
                    depth: dd,
                };
                p.kind = k;
                let n = (w * h * dd) as u64;
                let rc = if name == "async3d" {
                    let st = c.stream(a.get(5).copied().unwrap_or("s1"));
                    c.t.call("cudaMemcpy3DAsync", n, || cudaMemcpy3DAsync(&p, st))
                } else {
                    c.t.call("cudaMemcpy3D", n, || cudaMemcpy3D(&p))
                };
                check(rc, op);
            }
            "peer" => {
                let n = num(a[0]);
                let (d, s) = (c.dev2, c.dev);
                check(
                    c.t.call("cudaMemcpyPeer", n as u64, || cudaMemcpyPeer(d, 0, s, 0, n)),
                    op,
                );
            }
            _ => return false,
        }
    }
    true
}

/// Allocation, registration, memset and sleeping; false for another op.
fn memory_op(c: &mut Ctx, op: &str, name: &str, a: &[&str]) -> bool {
    // SAFETY: every call gets buffers of BUF bytes (sizes are checked below) and live handles.
    unsafe {
        match name {
            "free" => {
                let mut p = null_mut();
                check(c.t.call("cudaMalloc", 0, || cudaMalloc(&mut p, 256)), op);
                check(c.t.call("cudaFree", 0, || cudaFree(p)), op);
            }
            "free-null" => check(c.t.call("cudaFree", 0, || cudaFree(null_mut())), op),
            "host-alloc" | "malloc-host" => {
                let n = num(a[0]);
                let mut p = null_mut();
                let rc = if name == "host-alloc" {
                    c.t.call("cudaHostAlloc", n as u64, || cudaHostAlloc(&mut p, n, 0))
                } else {
                    c.t.call("cudaMallocHost", n as u64, || cudaMallocHost(&mut p, n))
                };
                check(rc, op);
                check(c.t.call("cudaFreeHost", n as u64, || cudaFreeHost(p)), op);
            }
            "register" => {
                let n = num(a[0]);
                let mut p = null_mut();
                assert_eq!(libc::posix_memalign(&mut p, 4096, n), 0);
                check(
                    c.t.call("cudaHostRegister", n as u64, || cudaHostRegister(p, n, 0)),
                    op,
                );
                check(
                    c.t.call("cudaHostUnregister", n as u64, || cudaHostUnregister(p)),
                    op,
                );
                libc::free(p);
            }
            "memset" => {
                let n = num(a[0]);
                let d = c.dev;
                check(c.t.call("cudaMemset", n as u64, || cudaMemset(d, 0, n)), op);
            }
            "memset-host" => {
                let n = num(a[0]);
                let d = c.pinned;
                check(c.t.call("cudaMemset", n as u64, || cudaMemset(d, 0, n)), op);
            }
            "sleep" => std::thread::sleep(Duration::from_micros(num(a[0]) as u64)),
            _ => return false,
        }
    }
    true
}

fn run_thread(ops: &[String], iters: usize) -> Truth {
    let mut c = Ctx::new();
    for _ in 0..iters {
        for op in ops {
            run_op(&mut c, op);
        }
    }
    c.finish()
}

fn main() -> ExitCode {
    let mut iters = 1;
    let mut threads = 1;
    let mut fork = false;
    let mut ops = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--iters" => iters = num(&args.next().unwrap_or_default()),
            "--threads" => threads = num(&args.next().unwrap_or_default()),
            "--fork" => fork = true,
            "-h" | "--help" => {
                println!(
                    "usage: cudacalls [--iters N] [--threads T] [--fork] OP...  (ops: see source)"
                );
                return ExitCode::SUCCESS;
            }
            _ => ops.push(a),
        }
    }
    let child = if fork {
        // SAFETY: no CUDA call has been made and no thread started yet.
        match unsafe { libc::fork() } {
            -1 => panic!("fork failed"),
            0 => true,
            _ => false,
        }
    } else {
        false
    };
    let mut total = Truth::default();
    // The threads start together: their first CUDA calls come at the same moment, the race
    // a library that initialises on first use must get right.
    let start = std::sync::Barrier::new(threads);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    run_thread(&ops, iters)
                })
            })
            .collect();
        for h in hs {
            total.merge(&h.join().expect("worker thread panicked"));
        }
    });
    println!("{}", total.to_json(std::process::id()));
    if fork && !child {
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::wait(&mut status) };
        if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
