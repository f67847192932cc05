//! What every scenario program (`scn-<name>`, src/bin/scn_*.rs) shares: its command line,
//! the CUDA calls it makes (each recorded in its ground truth with the kind syncspy must
//! give it), GPU timings from CUDA events, and the one JSON line it prints at exit.
//!
//! The line (one object, on stdout, last):
//! ```text
//! {"scenario": "item-in-loop", "pid": 1234,
//!  "args": {"iters": 20, "size": 65536, "work_us": 2000, ...},
//!  "kinds": {"stream_sync": {"count": 20, "bytes": 0, "total_ns": ..., "max_ns": ...}, ...},
//!  "non_stall": {"cudaMemcpyAsync": {"count": 20, "bytes": 80, ...}},
//!  "calls": {"cudaLaunchKernel": {...}, ...},
//!  "gpu_ms": {"work": 40.1, ...}, "wall_ms": {"loop": 41.0},
//!  "checks": {"count": true}, "ok": true}
//! ```
//! `kinds` lists all six stall kinds (zero counts included); `gpu_ms` holds the CUDA-event
//! timings of the GPU work the program waited for (names per scenario: the manifest refers to
//! them); `checks` are the data checks (real results of the kernels). A failed check makes the
//! program exit with status 1 after printing the line.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::process::ExitCode;
use std::ptr::null_mut;
use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::cuda::*;
use crate::kernels::Kernels;
use crate::truth::{Kind, Tally, Truth};

/// The command line a scenario accepts, and its defaults.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub name: &'static str,
    pub about: &'static str,
    pub iters: u64,
    /// Default `--size` and what it counts; `None`: no `--size`.
    pub size: Option<(u64, &'static str)>,
    /// Default `--work-us`: GPU work per step (the `spin` kernel); `None`: not accepted.
    pub work_us: Option<u64>,
    /// Default `--host-us`: host work per step (the program sleeps, as if preparing the next
    /// batch); `None`: not accepted.
    pub host_us: Option<u64>,
    /// Default `--threads`; `None`: not accepted.
    pub threads: Option<u64>,
    /// Whether `--async` (the healthy variant) is accepted.
    pub async_flag: bool,
    /// Whether `--check` (read the result back and verify it) is accepted.
    pub check_flag: bool,
    /// Whether `--pageable` (read back into pageable memory) is accepted.
    pub pageable_flag: bool,
}

impl Spec {
    pub const fn new(name: &'static str, about: &'static str, iters: u64) -> Spec {
        Spec {
            name,
            about,
            iters,
            size: None,
            work_us: None,
            host_us: None,
            threads: None,
            async_flag: false,
            check_flag: false,
            pageable_flag: false,
        }
    }

    pub fn usage(&self) -> String {
        let mut u = format!(
            "scn-{}: {}\n\nusage: scn-{} [--iters N]",
            self.name, self.about, self.name
        );
        let mut opts = format!("  --iters N      steps (default {})\n", self.iters);
        if let Some((d, what)) = self.size {
            u.push_str(" [--size N]");
            opts.push_str(&format!("  --size N       {what} (default {d})\n"));
        }
        if let Some(d) = self.work_us {
            u.push_str(" [--work-us N]");
            opts.push_str(&format!(
                "  --work-us N    GPU work per step, in µs (default {d})\n"
            ));
        }
        if let Some(d) = self.host_us {
            u.push_str(" [--host-us N]");
            opts.push_str(&format!(
                "  --host-us N    host work per step, in µs (default {d})\n"
            ));
        }
        if let Some(d) = self.threads {
            u.push_str(" [--threads N]");
            opts.push_str(&format!("  --threads N    host threads (default {d})\n"));
        }
        if self.async_flag {
            u.push_str(" [--async]");
            opts.push_str("  --async        the healthy variant: no synchronization per step\n");
        }
        if self.check_flag {
            u.push_str(" [--check]");
            opts.push_str("  --check        read the result back and verify it\n");
        }
        if self.pageable_flag {
            u.push_str(" [--pageable]");
            opts.push_str(
                "  --pageable     read back into pageable memory (a stalling copy, then the sync)\n",
            );
        }
        format!(
            "{u}\n\n{opts}\nPrints its ground truth as one JSON line on stdout at exit (see \
             scenarios/src/scenario.rs)."
        )
    }
}

/// Parsed command line.
#[derive(Clone, Copy, Debug)]
pub struct Args {
    pub iters: u64,
    pub size: u64,
    pub work_us: u64,
    pub host_us: u64,
    pub threads: u64,
    pub async_mode: bool,
    pub check: bool,
    pub pageable: bool,
}

impl Args {
    /// Parses the process's arguments; prints usage and exits on `-h` or a bad argument.
    pub fn parse(spec: &Spec) -> Args {
        match Args::parse_from(
            spec,
            std::env::args_os()
                .skip(1)
                .map(|a| a.to_string_lossy().into_owned()),
        ) {
            Ok(Some(a)) => a,
            Ok(None) => {
                println!("{}", spec.usage());
                std::process::exit(0);
            }
            Err(e) => {
                eprintln!("scn-{}: {e}\n\n{}", spec.name, spec.usage());
                std::process::exit(2);
            }
        }
    }

    /// `Ok(None)` for `--help`.
    pub fn parse_from(
        spec: &Spec,
        args: impl IntoIterator<Item = String>,
    ) -> Result<Option<Args>, String> {
        let mut a = Args {
            iters: spec.iters,
            size: spec.size.map_or(0, |s| s.0),
            work_us: spec.work_us.unwrap_or(0),
            host_us: spec.host_us.unwrap_or(0),
            threads: spec.threads.unwrap_or(1),
            async_mode: false,
            check: false,
            pageable: false,
        };
        let mut it = args.into_iter();
        while let Some(flag) = it.next() {
            let mut value = |slot: &mut u64, accepted: bool| -> Result<(), String> {
                if !accepted {
                    return Err(format!("{flag} is not an option of this scenario"));
                }
                let v = it.next().ok_or(format!("{flag} needs a value"))?;
                *slot = v
                    .parse()
                    .map_err(|_| format!("{flag}: not a number: {v:?}"))?;
                Ok(())
            };
            match flag.as_str() {
                "-h" | "--help" => return Ok(None),
                "--iters" => value(&mut a.iters, true)?,
                "--size" => value(&mut a.size, spec.size.is_some())?,
                "--work-us" => value(&mut a.work_us, spec.work_us.is_some())?,
                "--host-us" => value(&mut a.host_us, spec.host_us.is_some())?,
                "--threads" => value(&mut a.threads, spec.threads.is_some())?,
                "--async" if spec.async_flag => a.async_mode = true,
                "--check" if spec.check_flag => a.check = true,
                "--pageable" if spec.pageable_flag => a.pageable = true,
                _ => return Err(format!("unknown argument {flag:?}")),
            }
        }
        if a.iters == 0 || a.threads == 0 || (spec.size.is_some() && a.size == 0) {
            return Err("--iters, --size and --threads must be at least 1".into());
        }
        Ok(Some(a))
    }

    pub fn work_ns(&self) -> u64 {
        self.work_us * 1000
    }

    /// The host's own work of one step (a sleep of `--host-us`).
    pub fn host_work(&self) {
        if self.host_us > 0 {
            std::thread::sleep(std::time::Duration::from_micros(self.host_us));
        }
    }

    fn to_json(self, spec: &Spec) -> Value {
        let mut m = Map::new();
        m.insert("iters".into(), self.iters.into());
        if spec.size.is_some() {
            m.insert("size".into(), self.size.into());
        }
        if spec.work_us.is_some() {
            m.insert("work_us".into(), self.work_us.into());
        }
        if spec.host_us.is_some() {
            m.insert("host_us".into(), self.host_us.into());
        }
        if spec.threads.is_some() {
            m.insert("threads".into(), self.threads.into());
        }
        if spec.async_flag {
            m.insert("async".into(), self.async_mode.into());
        }
        if spec.check_flag {
            m.insert("check".into(), self.check.into());
        }
        if spec.pageable_flag {
            m.insert("pageable".into(), self.pageable.into());
        }
        Value::Object(m)
    }
}

/// Panics with the runtime's message unless `rc` is success.
#[track_caller]
fn ok(rc: cudaError_t, what: &str) {
    check(rc, what)
}

/// The CUDA calls the scenarios make, each recorded in `t` with the kind syncspy must give it.
///
/// Stream and event handles are raw pointers in the C API, but opaque: the runtime checks them
/// and answers a bad one with an error code (a panic here), never by dereferencing it on the
/// host. Functions whose pointers the runtime does access on the host are `unsafe`.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub mod calls {
    use super::*;

    pub fn device_sync(t: &mut Truth) {
        // SAFETY: no arguments.
        let rc = t.classified("cudaDeviceSynchronize", Kind::DeviceSync, 0, || unsafe {
            cudaDeviceSynchronize()
        });
        ok(rc, "cudaDeviceSynchronize");
    }

    pub fn stream_sync(t: &mut Truth, s: cudaStream_t) {
        // SAFETY: a live stream.
        let rc = t.classified("cudaStreamSynchronize", Kind::StreamSync, 0, || unsafe {
            cudaStreamSynchronize(s)
        });
        ok(rc, "cudaStreamSynchronize");
    }

    pub fn event_sync(t: &mut Truth, e: cudaEvent_t) {
        // SAFETY: a live event.
        let rc = t.classified("cudaEventSynchronize", Kind::EventSync, 0, || unsafe {
            cudaEventSynchronize(e)
        });
        ok(rc, "cudaEventSynchronize");
    }

    pub fn record(t: &mut Truth, e: cudaEvent_t, s: cudaStream_t) {
        // SAFETY: a live event and stream.
        let rc = t.call("cudaEventRecord", 0, || unsafe { cudaEventRecord(e, s) });
        ok(rc, "cudaEventRecord");
    }

    pub fn wait_event(t: &mut Truth, s: cudaStream_t, e: cudaEvent_t) {
        // SAFETY: a live event and stream.
        let rc = t.call("cudaStreamWaitEvent", 0, || unsafe {
            cudaStreamWaitEvent(s, e, 0)
        });
        ok(rc, "cudaStreamWaitEvent");
    }

    /// `cudaMemcpy` between host and device: it blocks (`memcpy_sync`).
    ///
    /// # Safety
    /// `dst` and `src` are valid for `bytes` on their sides.
    pub unsafe fn memcpy(
        t: &mut Truth,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: cudaMemcpyKind,
    ) {
        // SAFETY: the caller's contract.
        let rc = t.classified("cudaMemcpy", Kind::MemcpySync, bytes as u64, || unsafe {
            cudaMemcpy(dst, src, bytes, kind)
        });
        ok(rc, "cudaMemcpy");
    }

    /// `cudaMemcpyAsync`; `host` says what the host side is: `MemcpyPageable` for pageable
    /// memory, `NonStall` for pinned.
    ///
    /// # Safety
    /// `dst` and `src` are valid for `bytes` until the copy completes.
    pub unsafe fn memcpy_async(
        t: &mut Truth,
        host: Kind,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: cudaMemcpyKind,
        s: cudaStream_t,
    ) {
        // SAFETY: the caller's contract.
        let rc = t.classified("cudaMemcpyAsync", host, bytes as u64, || unsafe {
            cudaMemcpyAsync(dst, src, bytes, kind, s)
        });
        ok(rc, "cudaMemcpyAsync");
    }

    /// `cudaMemsetAsync`, which syncspy does not hook.
    ///
    /// # Safety
    /// `dst` is device memory of at least `bytes`.
    pub unsafe fn memset_async(t: &mut Truth, dst: *mut c_void, bytes: usize, s: cudaStream_t) {
        // SAFETY: the caller's contract.
        let rc = t.call("cudaMemsetAsync", 0, || unsafe {
            cudaMemsetAsync(dst, 0, bytes, s)
        });
        ok(rc, "cudaMemsetAsync");
    }

    pub fn malloc(t: &mut Truth, bytes: usize) -> *mut c_void {
        let mut p = null_mut();
        // SAFETY: valid out-pointer.
        let rc = t.call("cudaMalloc", 0, || unsafe { cudaMalloc(&mut p, bytes) });
        ok(rc, "cudaMalloc");
        p
    }

    /// `cudaFree` of device memory: an implicit synchronization.
    pub fn free(t: &mut Truth, p: *mut c_void) {
        // SAFETY: memory from `malloc`, freed once.
        let rc = t.classified("cudaFree", Kind::ImplicitSync, 0, || unsafe { cudaFree(p) });
        ok(rc, "cudaFree");
    }
}

/// What a scenario allocated and created, released (and recorded) at the end.
#[derive(Debug, Default)]
pub struct Resources {
    device: Vec<*mut c_void>,
    pinned: Vec<(*mut c_void, usize)>,
    streams: Vec<cudaStream_t>,
    events: Vec<cudaEvent_t>,
}

// SAFETY: CUDA handles and device pointers may be used from any thread of the process.
unsafe impl Send for Resources {}

impl Resources {
    /// Device memory for `n` values of `T`, freed (an implicit sync) by [`Resources::release`].
    pub fn device<T>(&mut self, t: &mut Truth, n: usize) -> *mut T {
        let p = calls::malloc(t, n * std::mem::size_of::<T>());
        self.device.push(p);
        p.cast()
    }

    /// Pinned host memory for `n` values of `T` (`cudaMallocHost`: an implicit sync).
    pub fn pinned<T>(&mut self, t: &mut Truth, n: usize) -> *mut T {
        let bytes = n * std::mem::size_of::<T>();
        let mut p = null_mut();
        // SAFETY: valid out-pointer.
        let rc = t.classified(
            "cudaMallocHost",
            Kind::ImplicitSync,
            bytes as u64,
            || unsafe { cudaMallocHost(&mut p, bytes) },
        );
        ok(rc, "cudaMallocHost");
        self.pinned.push((p, bytes));
        p.cast()
    }

    pub fn stream(&mut self, t: &mut Truth, non_blocking: bool) -> cudaStream_t {
        let mut s = null_mut();
        // SAFETY: valid out-pointer.
        let rc = t.call("cudaStreamCreateWithFlags", 0, || unsafe {
            cudaStreamCreateWithFlags(&mut s, u32::from(non_blocking))
        });
        ok(rc, "cudaStreamCreateWithFlags");
        self.streams.push(s);
        s
    }

    /// An event; `timing: false` makes a dependency-only event (cudaEventDisableTiming).
    pub fn event(&mut self, t: &mut Truth, timing: bool) -> cudaEvent_t {
        let mut e = null_mut();
        let flags = if timing { 0 } else { 2 };
        // SAFETY: valid out-pointer.
        let rc = t.call("cudaEventCreateWithFlags", 0, || unsafe {
            cudaEventCreateWithFlags(&mut e, flags)
        });
        ok(rc, "cudaEventCreateWithFlags");
        self.events.push(e);
        e
    }

    /// Frees device memory (`cudaFree`: implicit syncs) and pinned memory (`cudaFreeHost`:
    /// implicit syncs), destroys streams and events. Call after the last synchronization.
    pub fn release(self, t: &mut Truth) {
        for p in self.device {
            calls::free(t, p);
        }
        for (p, bytes) in self.pinned {
            // SAFETY: memory from cudaMallocHost, freed once.
            let rc = t.classified(
                "cudaFreeHost",
                Kind::ImplicitSync,
                bytes as u64,
                || unsafe { cudaFreeHost(p) },
            );
            ok(rc, "cudaFreeHost");
        }
        for e in self.events {
            // SAFETY: a live event, destroyed once.
            let rc = t.call("cudaEventDestroy", 0, || unsafe { cudaEventDestroy(e) });
            ok(rc, "cudaEventDestroy");
        }
        for s in self.streams {
            // SAFETY: a live stream, destroyed once.
            let rc = t.call("cudaStreamDestroy", 0, || unsafe { cudaStreamDestroy(s) });
            ok(rc, "cudaStreamDestroy");
        }
    }
}

/// GPU time of marked stretches of stream work, from pairs of CUDA events. Read with
/// [`GpuSpans::total_ms`] only after a synchronization covered the last span (reading does not
/// synchronize, so it adds no call syncspy would see).
#[derive(Debug, Default)]
pub struct GpuSpans {
    spans: Vec<(cudaEvent_t, cudaEvent_t)>,
    open: Option<cudaEvent_t>,
}

// SAFETY: event handles may be used from any thread.
unsafe impl Send for GpuSpans {}

impl GpuSpans {
    pub fn begin(&mut self, t: &mut Truth, r: &mut Resources, s: cudaStream_t) {
        let e = r.event(t, true);
        calls::record(t, e, s);
        self.open = Some(e);
    }

    /// Ends the open span; returns its end event.
    pub fn end(&mut self, t: &mut Truth, r: &mut Resources, s: cudaStream_t) -> cudaEvent_t {
        let start = self.open.take().expect("GpuSpans::end without begin");
        let e = r.event(t, true);
        calls::record(t, e, s);
        self.spans.push((start, e));
        e
    }

    fn elapsed(a: cudaEvent_t, b: cudaEvent_t) -> f64 {
        let mut ms = 0.0f32;
        // SAFETY: valid out-pointer, live events.
        ok(
            unsafe { cudaEventElapsedTime(&mut ms, a, b) },
            "cudaEventElapsedTime",
        );
        f64::from(ms)
    }

    /// Sum of the spans, in ms.
    pub fn total_ms(&self) -> f64 {
        self.spans.iter().map(|(a, b)| Self::elapsed(*a, *b)).sum()
    }

    /// The GPU time between consecutive spans, summed: from each span's end to the next one's
    /// start (the GPU's idle there, and any work outside the spans), in ms.
    pub fn between_ms(&self) -> f64 {
        self.spans
            .windows(2)
            .map(|w| Self::elapsed(w[0].1, w[1].0))
            .sum()
    }

    /// From the first span's start to the last span's end, in ms.
    pub fn envelope_ms(&self) -> f64 {
        match (self.spans.first(), self.spans.last()) {
            (Some((a, _)), Some((_, b))) => Self::elapsed(*a, *b),
            _ => 0.0,
        }
    }
}

/// The scenario's account, printed as its ground-truth line by [`Outcome::print`].
#[derive(Debug)]
pub struct Outcome {
    pub spec: Spec,
    pub args: Args,
    pub truth: Truth,
    pub gpu_ms: BTreeMap<&'static str, f64>,
    pub wall_ms: BTreeMap<&'static str, f64>,
    pub checks: BTreeMap<&'static str, bool>,
    /// Anything else worth reporting (derived figures).
    pub extra: Map<String, Value>,
}

impl Outcome {
    pub fn new(spec: Spec, args: Args, truth: Truth) -> Outcome {
        Outcome {
            spec,
            args,
            truth,
            gpu_ms: BTreeMap::new(),
            wall_ms: BTreeMap::new(),
            checks: BTreeMap::new(),
            extra: Map::new(),
        }
    }

    pub fn ok(&self) -> bool {
        self.checks.values().all(|c| *c)
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "scenario": self.spec.name,
            "pid": std::process::id(),
            "args": self.args.to_json(&self.spec),
            "gpu_ms": self.gpu_ms,
            "wall_ms": self.wall_ms,
            "checks": self.checks,
            "ok": self.ok(),
        });
        if let Some(o) = v.as_object_mut() {
            o.extend(account(&self.truth));
            o.extend(self.extra.clone());
        }
        v
    }

    /// Prints the ground-truth line; the exit status says whether every data check passed.
    pub fn print(&self) -> ExitCode {
        println!("{}", self.to_json());
        if self.ok() {
            ExitCode::SUCCESS
        } else {
            let failed: Vec<_> = self.checks.iter().filter(|(_, v)| !**v).collect();
            eprintln!("scn-{}: data checks failed: {failed:?}", self.spec.name);
            ExitCode::FAILURE
        }
    }
}

/// The account part of a truth line: `kinds` (all six stall kinds, zero counts included),
/// `non_stall` and `calls`, each a `{"count", "bytes", "total_ns", "max_ns"}` per name.
pub fn account(truth: &Truth) -> Map<String, Value> {
    let tally = |t: &Tally| json!({"count": t.count, "bytes": t.bytes, "total_ns": t.total_ns, "max_ns": t.max_ns});
    let kinds: Map<String, Value> = Kind::STALLS
        .iter()
        .map(|k| {
            let t = truth.kinds.get(k.name()).copied().unwrap_or_default();
            (k.name().to_string(), tally(&t))
        })
        .collect();
    let by_api = |m: &BTreeMap<&'static str, Tally>| -> Map<String, Value> {
        m.iter().map(|(k, v)| (k.to_string(), tally(v))).collect()
    };
    let mut m = Map::new();
    m.insert("kinds".into(), kinds.into());
    m.insert("non_stall".into(), by_api(&truth.non_stall).into());
    m.insert("calls".into(), by_api(&truth.calls).into());
    m
}

/// The common frame of a scenario: the loaded kernels, the account, the resources.
#[derive(Debug)]
pub struct Ctx {
    pub t: Truth,
    pub k: Kernels,
    pub r: Resources,
    pub spans: GpuSpans,
}

impl Ctx {
    pub fn new() -> Ctx {
        let mut t = Truth::default();
        let k = Kernels::load(&mut t);
        Ctx {
            t,
            k,
            r: Resources::default(),
            spans: GpuSpans::default(),
        }
    }

    /// Releases everything (after the program's last synchronization; read the spans first,
    /// their events go too) and returns the account.
    pub fn finish(self) -> Truth {
        let Ctx { mut t, k, r, .. } = self;
        r.release(&mut t);
        k.unload(&mut t);
        t
    }
}

impl Default for Ctx {
    fn default() -> Self {
        Ctx::new()
    }
}

/// Milliseconds since `t`.
pub fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(spec: &Spec, args: &[&str]) -> Result<Option<Args>, String> {
        Args::parse_from(spec, args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn flags_are_accepted_only_where_they_apply() {
        let mut spec = Spec::new("x", "test", 7);
        spec.size = Some((512, "matrix side"));
        spec.async_flag = true;
        let a = parse(&spec, &[]).unwrap().unwrap();
        assert_eq!((a.iters, a.size, a.async_mode), (7, 512, false));
        let a = parse(&spec, &["--iters", "3", "--size", "64", "--async"])
            .unwrap()
            .unwrap();
        assert_eq!((a.iters, a.size, a.async_mode), (3, 64, true));
        assert!(parse(&spec, &["--threads", "2"]).is_err());
        assert!(parse(&spec, &["--check"]).is_err());
        assert!(parse(&spec, &["--iters"]).is_err());
        assert!(parse(&spec, &["--iters", "x"]).is_err());
        assert!(parse(&spec, &["--iters", "0"]).is_err());
        assert!(parse(&spec, &["-h"]).unwrap().is_none());
        assert!(spec.usage().contains("--async"));
        assert!(!spec.usage().contains("--threads"));
    }
}
