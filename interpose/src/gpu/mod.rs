//! GPU idle gaps: when the GPU ran nothing, measured from its own activity records.
//!
//! - [`track`]: the pure core, from activity records to busy time, gaps and samples;
//! - [`cupti`]: the activity source (CUPTI, or the simulated runtime's stand-in under `--sim`);
//! - this module: the library's one GPU thread, which owns the source, feeds the tracker and
//!   publishes what it reports into the segment (the GPU part of the header, `gpu_idle`
//!   records in the ring; `syncspy_abi::gpu`).
//!
//! Nothing here runs on the application's hot path but once: at the process's first hooked
//! call, right after the segment is created and before the call reaches the runtime, CUPTI is
//! started on the calling thread (loaded, callbacks registered, kinds enabled: tens of ms,
//! counted as syncspy's overhead), where no context creation or exit of the program can
//! overlap it (started on the GPU thread, it did, and crashed short programs inside
//! `cuptiActivityEnable`). Mode `off` starts it on the GPU thread when a reader asks. An
//! `atexit` barrier registered after CUPTI's and the runtime's own teardown has the thread
//! disable syncspy's kinds, flush and end before them. Each 100 ms the GPU thread flushes
//! CUPTI's buffers and accounts time
//! up to a watermark 500 ms in the past (activity arrives late and out of order; work that
//! started before the watermark must have completed and been delivered by then: a piece of
//! work longer than that, running across a gap of another stream, can make a gap look longer
//! than it was).
//!
//! `SYNCSPY_GPU_IDLE` (docs/contracts.md, section 4): `off`; `on` (trace all the time); `duty`
//! (the default: trace 1 s in every 10 s, which keeps CUPTI's per-launch cost off 90% of the
//! run and still gives a live idle share). Another CUPTI client wins: when one registers its
//! own activity callbacks or subscribes (`torch.profiler`'s Kineto does both) through the
//! exported `cuptiActivityRegisterCallbacks` / `cuptiSubscribe` below, syncspy first disables
//! its kinds and flushes its buffers back to itself, marks the GPU part `yielded`, and then
//! passes the call on unchanged; it does not trace again in that process. If another client
//! was there first (its subscription makes `cuptiSubscribe` fail), syncspy does not start.

pub mod cupti;
pub mod track;

use std::cell::Cell;
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering};
use std::sync::Mutex;

use syncspy_abi::gpu::{
    GPU_OFF, GPU_PAUSED, GPU_TRACING, GPU_UNAVAILABLE, GPU_YIELDED, MODE_DUTY, MODE_OFF, MODE_ON,
    SOURCE_CUPTI, SOURCE_SIMULATED,
};
use syncspy_abi::SegmentWriter;

use crate::clock::now_ns;
use track::{Activity, Event, Tracker};

pub use crate::config::GpuConfig;

/// Length of the busy-fraction windows.
pub const WINDOW_NS: u64 = 1_000_000_000;
/// How often buffers are flushed and time accounted.
pub const FLUSH_NS: u64 = 100_000_000;
/// How far behind the last flush time is final.
pub const HOLD_NS: u64 = 500_000_000;
/// Duty mode: traced `DUTY_ON_NS` of every `DUTY_PERIOD_NS`.
pub const DUTY_ON_NS: u64 = 1_000_000_000;
pub const DUTY_PERIOD_NS: u64 = 10_000_000_000;

/// The tracker, shared by the GPU thread and CUPTI's buffer callbacks (which may run on
/// CUPTI's own thread).
static TRACKER: Mutex<Option<Tracker>> = Mutex::new(None);
/// The segment the GPU thread writes into (a leaked `&'static SegmentWriter`).
static SEGMENT: AtomicPtr<SegmentWriter> = AtomicPtr::new(std::ptr::null_mut());
/// The CUPTI functions in use (a leaked `&'static cupti::Api`), once the source started.
static API: AtomicPtr<cupti::Api> = AtomicPtr::new(std::ptr::null_mut());
/// Set when another client registered activity callbacks or subscribed: syncspy is out.
static FOREIGN: AtomicBool = AtomicBool::new(false);
/// Serializes enabling, disabling and flushing between the GPU thread and a foreign client's
/// takeover.
static CONTROL: Mutex<bool> = Mutex::new(false);
/// 0 not started, 1 started in this process image (a fork child does not trace).
static STARTED: AtomicU8 = AtomicU8::new(0);
/// The exit handler asks for a last pass (1) and waits for it (2).
static EXIT: AtomicU8 = AtomicU8::new(0);
/// Mode `off`: the GPU thread waits for a reader's request, with nothing to flush at exit.
static WAITING: AtomicBool = AtomicBool::new(false);
/// Set by detach: the GPU thread disables its kinds, accounts what was delivered and ends.
static DETACH: AtomicBool = AtomicBool::new(false);
/// Whether CUPTI calls syncspy's clock for its timestamps (registered once per process:
/// CUPTI takes it only before the first kind is enabled, so a second attach reuses it).
static ON_HOST_CLOCK: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set on the GPU thread: CUPTI calls it makes through the exported names are its own.
    static ON_GPU_THREAD: Cell<bool> = const { Cell::new(false) };
}

fn segment() -> Option<&'static SegmentWriter> {
    let p = SEGMENT.load(Ordering::Acquire);
    // SAFETY: stored once from a leaked `&'static SegmentWriter` (the runtime is never freed).
    (!p.is_null()).then(|| unsafe { &*p })
}

fn api() -> Option<&'static cupti::Api> {
    let p = API.load(Ordering::Acquire);
    // SAFETY: stored once from a leaked Box, never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// The records of a completed buffer (CUPTI's callback).
fn sink(acts: &[Activity]) {
    if let Ok(mut t) = TRACKER.lock() {
        if let Some(t) = t.as_mut() {
            for a in acts {
                t.add(*a);
            }
        }
    }
    if let Some(seg) = segment() {
        for a in acts.iter().filter(|a| a.collective) {
            seg.record_collective(
                i32::try_from(a.device).unwrap_or(i32::MAX),
                a.end_ns - a.start_ns,
            );
        }
    }
}

/// Starts GPU tracing for the process whose segment is `seg` (at its first hooked call,
/// once per process image; at each attach): in modes `on` and `duty` CUPTI is started here,
/// on the caller's thread (tens of ms, once), then a thread of its own does the rest; in
/// mode `off` the caller only spawns that thread.
pub fn start(seg: &'static SegmentWriter, cfg: GpuConfig) {
    if STARTED.swap(1, Ordering::AcqRel) != 0 {
        return;
    }
    let g = seg.gpu();
    g.mode.store(cfg.mode, Ordering::Relaxed);
    g.min_gap_ns.store(cfg.min_gap_ns, Ordering::Relaxed);
    g.window_ns.store(WINDOW_NS, Ordering::Relaxed);
    if cfg.mode == MODE_OFF {
        // Nothing is traced, and CUPTI is not loaded, unless a reader asks (the thread
        // below waits for a request in the segment's control part). Attached processes get
        // no thread at all in this mode.
        g.state.store(GPU_OFF, Ordering::Release);
        if crate::attach::attached() {
            STARTED.store(0, Ordering::Release);
            return;
        }
    }
    SEGMENT.store(seg as *const _ as *mut _, Ordering::Release);
    // Tracing from the start: CUPTI is started here, on the calling thread (the process's
    // first hooked call, before it reaches the runtime; or the attach worker), not on the GPU
    // thread. Started there, it raced the process: enabling activity while the runtime
    // created its context or a short program exited crashed inside cuptiActivityEnable
    // (SIGSEGV, H100, CUDA 13.0). Here it comes before the runtime's initialisation, as
    // CUPTI's own samples do it, and no exit can begin meanwhile. It costs this one call the
    // loading of CUPTI (docs/performance.md).
    let ready = if cfg.mode == MODE_OFF {
        None
    } else {
        let prev = ON_GPU_THREAD.with(|c| c.replace(true));
        let r = std::panic::catch_unwind(|| set_up(seg, cfg)).ok().flatten();
        ON_GPU_THREAD.with(|c| c.set(prev));
        // After CUPTI's own teardown registration: the exit barrier runs before it.
        register_exit_quiesce();
        match r {
            Some(r) => Some(r),
            None => {
                // Unavailable or yielded (the state says which): no thread to wait for.
                EXIT.store(2, Ordering::Release);
                return;
            }
        }
    };
    let enabled = ready.as_ref().map(|r| r.api);
    let spawned = std::thread::Builder::new()
        .name("syncspy-gpu".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            ON_GPU_THREAD.with(|c| c.set(true));
            let _ = std::panic::catch_unwind(move || run(seg, cfg, ready));
            EXIT.store(2, Ordering::Release);
        });
    if spawned.is_err() {
        // Nothing would flush or end what was enabled.
        if let Some(api) = enabled {
            set_enabled(api, false);
        }
        EXIT.store(2, Ordering::Release);
        g.state.store(GPU_UNAVAILABLE, Ordering::Release);
    }
}

/// Whether to trace now: always in mode `on`, in duty mode during the on phase of each
/// period (from `t0`), and in any mode while a reader's request (`until`, CLOCK_MONOTONIC
/// ns; 0 for none) lasts.
pub fn want_tracing(mode: u32, t0: u64, now: u64, until: u64) -> bool {
    now < until
        || match mode {
            MODE_ON => true,
            MODE_DUTY => now.saturating_sub(t0) % DUTY_PERIOD_NS < DUTY_ON_NS,
            _ => false,
        }
}

/// The reader's request in the segment's control part (0: none).
fn requested(seg: &SegmentWriter) -> u64 {
    seg.control().trace_until_ns.load(Ordering::Relaxed)
}

/// The GPU thread.
fn run(seg: &'static SegmentWriter, cfg: GpuConfig, ready: Option<Ready>) {
    let g = seg.gpu();
    let ready = match ready {
        Some(r) => r,
        None => match wait_and_set_up(seg, cfg) {
            Some(r) => r,
            None => return,
        },
    };
    let Ready { api, t0 } = ready;
    let on_host_clock = ON_HOST_CLOCK.load(Ordering::Acquire);
    // The loop's end: the time traced counted, what arrived accounted; with `disable`,
    // syncspy's kinds off and its buffers flushed back first.
    let end = |tracing: bool, traced_since: u64, disable: bool| {
        let now = now_ns();
        if tracing {
            if disable {
                set_enabled(api, false);
                flush_forced(api);
            }
            g.traced_ns
                .fetch_add(now.saturating_sub(traced_since), Ordering::Relaxed);
        }
        finish(now);
    };
    let mut tracing = true;
    let mut traced_since = t0;
    let mut next_flush = t0 + FLUSH_NS;
    // Injected by attach, syncspy's exported CUPTI entry points interpose nothing: another
    // client (torch.profiler started while attached) is noticed by its subscription, looked
    // for once a second, and left CUPTI as it found it (nothing disabled under it).
    let mut flushes = 0u32;
    loop {
        if DETACH.load(Ordering::Acquire) {
            end(tracing, traced_since, true);
            g.state.store(GPU_PAUSED, Ordering::Release);
            return;
        }
        if FOREIGN.load(Ordering::Acquire) {
            // `step_back` disabled and flushed already; account what arrived and stop.
            finish(now_ns());
            g.traced_ns
                .fetch_add(now_ns().saturating_sub(traced_since), Ordering::Relaxed);
            return;
        }
        if EXIT.load(Ordering::Acquire) == 1 {
            // CUPTI quiet before the runtime tears down: syncspy's kinds off first.
            end(tracing, traced_since, true);
            return;
        }
        let now = now_ns();
        if now < next_flush {
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        }
        next_flush = now + FLUSH_NS;
        flushes = flushes.wrapping_add(1);
        if flushes.is_multiple_of(10) && crate::attach::attached() && !sole_client(api) {
            FOREIGN.store(true, Ordering::Release);
            end(tracing, traced_since, false);
            g.yields.fetch_add(1, Ordering::Relaxed);
            g.state.store(GPU_YIELDED, Ordering::Release);
            return;
        }
        let until = requested(seg);
        if now < until {
            seg.control()
                .trace_granted_ns
                .store(until, Ordering::Relaxed);
        }
        {
            let in_on = want_tracing(cfg.mode, t0, now, until);
            if tracing && !in_on {
                if !pause(api) {
                    return;
                }
                g.traced_ns
                    .fetch_add(now.saturating_sub(traced_since), Ordering::Relaxed);
                let idle = if cfg.mode == MODE_OFF {
                    GPU_OFF
                } else {
                    GPU_PAUSED
                };
                g.state.store(idle, Ordering::Release);
                tracing = false;
                continue;
            }
            if !tracing && in_on {
                if !set_enabled(api, true) {
                    g.state.store(GPU_UNAVAILABLE, Ordering::Release);
                    return;
                }
                traced_since = now;
                g.state.store(GPU_TRACING, Ordering::Release);
                tracing = true;
            }
        }
        if tracing {
            traced_pass(api, on_host_clock, now);
            g.traced_ns
                .fetch_add(now.saturating_sub(traced_since), Ordering::Relaxed);
            traced_since = now;
        }
    }
}

/// One pass of the GPU thread while tracing: CUPTI's buffers flushed, the offset of its clock
/// measured again (where its timestamps are not the host's clock), and what is older than
/// `HOLD_NS` published.
fn traced_pass(api: &'static cupti::Api, on_host_clock: bool, now: u64) {
    flush(api);
    if !on_host_clock {
        if let Some(off) = cupti::measure_offset(api.get_timestamp) {
            if let Ok(mut t) = TRACKER.lock() {
                if let Some(t) = t.as_mut() {
                    t.set_offset(off);
                }
            }
        }
    }
    advance(now.saturating_sub(HOLD_NS));
}

/// What a successful start of CUPTI hands the tracing loop.
struct Ready {
    api: &'static cupti::Api,
    /// When tracing began.
    t0: u64,
}

/// On the GPU thread in mode `off` (the other modes start CUPTI in `start`): waits, cheaply,
/// for a reader's request, then starts CUPTI; nothing of CUPTI is touched before.
fn wait_and_set_up(seg: &'static SegmentWriter, cfg: GpuConfig) -> Option<Ready> {
    WAITING.store(true, Ordering::Release);
    loop {
        if EXIT.load(Ordering::Acquire) != 0 || DETACH.load(Ordering::Acquire) {
            return None;
        }
        if now_ns() < requested(seg) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    WAITING.store(false, Ordering::SeqCst);
    let r = set_up(seg, cfg);
    // CUPTI registers its own teardown when it loads: the exit barrier goes after it.
    register_exit_quiesce();
    r
}

/// Loads CUPTI (once per process: a later attach finds it ready), registers syncspy's
/// callbacks and enables its kinds; the GPU part's state says why when it cannot.
fn set_up(seg: &'static SegmentWriter, cfg: GpuConfig) -> Option<Ready> {
    let g = seg.gpu();
    // Exiting (or detaching) already: CUPTI is not started at all.
    let leaving = || EXIT.load(Ordering::SeqCst) != 0 || DETACH.load(Ordering::Acquire);
    if leaving() {
        return None;
    }
    let unavailable = || {
        g.state.store(GPU_UNAVAILABLE, Ordering::Release);
        None
    };
    let first = api().is_none();
    let api: &'static cupti::Api = match api() {
        Some(api) => api,
        None => {
            let Some(handle) = as_cupti(cupti::open_library) else {
                return unavailable();
            };
            let Some(api) = as_cupti(|| cupti::Api::load(handle)) else {
                return unavailable();
            };
            Box::leak(Box::new(api))
        }
    };
    if FOREIGN.load(Ordering::Acquire) || !sole_client(api) {
        g.yields.fetch_add(1, Ordering::Relaxed);
        g.state.store(GPU_YIELDED, Ordering::Release);
        return None;
    }
    g.source.store(
        if api.simulated {
            SOURCE_SIMULATED
        } else {
            SOURCE_CUPTI
        },
        Ordering::Relaxed,
    );
    let mut tracker = Tracker::new(cfg.min_gap_ns, WINDOW_NS);
    // Timestamps on the host clock: CUPTI calls ours, or the offset is measured.
    if first {
        let on = api.register_timestamp.is_some_and(|f| {
            // SAFETY: cuptiActivityRegisterTimestampCallback with a function that only reads
            // CLOCK_MONOTONIC; called before any activity kind is enabled, as CUPTI requires.
            as_cupti(|| unsafe { f(Some(cupti::monotonic_timestamp)) }) == cupti::OK
        });
        ON_HOST_CLOCK.store(on, Ordering::Release);
    }
    if !ON_HOST_CLOCK.load(Ordering::Acquire) {
        match cupti::measure_offset(api.get_timestamp) {
            Some(off) => tracker.set_offset(off),
            None => return unavailable(),
        }
    }
    if let Ok(mut t) = TRACKER.lock() {
        *t = Some(tracker);
    }
    if leaving() {
        return None;
    }
    if first {
        cupti::NEXT_RECORD.store(api.get_next_record as *mut (), Ordering::Release);
        cupti::SINK.store(sink as fn(&[Activity]) as *mut (), Ordering::Release);
        // SAFETY: CUPTI's registration with two `extern "C"` functions of this library,
        // which stays loaded for the life of the process (preloaded, or injected and never
        // unloaded).
        let rc = as_cupti(|| unsafe {
            (api.register_callbacks)(Some(cupti::buffer_requested), Some(cupti::buffer_completed))
        });
        if rc != cupti::OK {
            return unavailable();
        }
        API.store(api as *const _ as *mut _, Ordering::Release);
    }
    if leaving() {
        return None;
    }
    let t0 = now_ns();
    if !set_enabled(api, true) {
        return unavailable();
    }
    g.state.store(GPU_TRACING, Ordering::Release);
    let until = requested(seg);
    if t0 < until {
        seg.control()
            .trace_granted_ns
            .store(until, Ordering::Relaxed);
    }
    Some(Ready { api, t0 })
}

/// Runs `f`, which calls into CUPTI, with the calling thread named `cupti`, then gives the
/// thread its name back: threads CUPTI starts inherit the name of the thread that made them,
/// and outlive a detach (they are CUPTI's, not syncspy's or the program's: `ps -L` should
/// say so).
fn as_cupti<T>(f: impl FnOnce() -> T) -> T {
    let mut name = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included, into `name`.
    let got = unsafe {
        libc::prctl(
            libc::PR_GET_NAME,
            name.as_mut_ptr() as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    let set = |n: *const u8| {
        // SAFETY: PR_SET_NAME with a NUL-terminated name of at most 16 bytes; it renames
        // only the calling thread.
        unsafe { libc::prctl(libc::PR_SET_NAME, n as libc::c_ulong, 0, 0, 0) };
    };
    if got == 0 {
        set(c"cupti".as_ptr().cast());
    }
    let r = f();
    if got == 0 {
        set(name.as_ptr());
    }
    r
}

/// Whether no other client holds CUPTI: a subscription fails when one has subscribed.
fn sole_client(api: &cupti::Api) -> bool {
    as_cupti(|| sole_client_now(api))
}

fn sole_client_now(api: &cupti::Api) -> bool {
    let mut sub: cudarc::cupti::sys::CUpti_SubscriberHandle = std::ptr::null_mut();
    // SAFETY: cuptiSubscribe with a valid out-pointer, no callback and no user data; the
    // subscription is released at once.
    unsafe {
        if (api.subscribe)(&mut sub, None, std::ptr::null_mut()) != cupti::OK {
            return false;
        }
        (api.unsubscribe)(sub);
    }
    true
}

/// Enables (or disables) the traced kinds; on a failure to enable, disables those enabled.
fn set_enabled(api: &cupti::Api, on: bool) -> bool {
    as_cupti(|| set_enabled_now(api, on))
}

fn set_enabled_now(api: &cupti::Api, on: bool) -> bool {
    let Ok(_c) = CONTROL.lock() else {
        return false;
    };
    if FOREIGN.load(Ordering::Acquire) {
        return false;
    }
    for (i, k) in cupti::KINDS.iter().enumerate() {
        // SAFETY: cuptiActivityEnable/Disable with a kind CUPTI defines.
        let rc = unsafe {
            if on {
                (api.enable)(*k)
            } else {
                (api.disable)(*k)
            }
        };
        if on && rc != cupti::OK {
            for k in &cupti::KINDS[..i] {
                // SAFETY: as above.
                unsafe { (api.disable)(*k) };
            }
            return false;
        }
    }
    true
}

/// Duty mode's off phase: kinds disabled, buffers flushed, everything accounted.
fn pause(api: &cupti::Api) -> bool {
    if !set_enabled(api, false) {
        return false;
    }
    flush_forced(api);
    let now = now_ns();
    publish(|t, out| t.stop(now, out));
    true
}

/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`: buffers that are not full are delivered too.
const FLUSH_FORCED: u32 = 1;

fn flush(api: &cupti::Api) {
    flush_with(api, 0);
}

/// At the end of a traced window or of the process: every buffer, full or not, comes back
/// now (a plain flush returns only full ones, and a window's last, partly filled buffer would
/// otherwise arrive only after its window was closed, or never).
fn flush_forced(api: &cupti::Api) {
    flush_with(api, FLUSH_FORCED);
}

fn flush_with(api: &cupti::Api, flag: u32) {
    if let Ok(_c) = CONTROL.lock() {
        // SAFETY: cuptiActivityFlushAll(flag): delivers buffers to the callbacks (0: the
        // full ones; FLUSH_FORCED: every one).
        as_cupti(|| unsafe { (api.flush_all)(flag) });
    }
    if let (Some(seg), Some(n)) = (segment(), api.num_dropped) {
        let mut dropped = 0usize;
        // SAFETY: cuptiActivityGetNumDroppedRecords for all contexts (NULL) and streams (0)
        // with a valid out-pointer.
        if unsafe { n(std::ptr::null_mut(), 0, &mut dropped) } == cupti::OK && dropped > 0 {
            seg.gpu()
                .dropped
                .fetch_add(dropped as u64, Ordering::Relaxed);
        }
    }
}

fn advance(watermark: u64) {
    publish(|t, out| t.advance(watermark, out));
}

/// The last pass: everything delivered is final.
fn finish(at: u64) {
    publish(|t, out| t.stop(at, out));
}

/// Runs `f` on the tracker and writes what it reports, and the counters, into the segment.
fn publish(f: impl FnOnce(&mut Tracker, &mut dyn FnMut(Event))) {
    let Some(seg) = segment() else { return };
    let Ok(mut guard) = TRACKER.lock() else {
        return;
    };
    let Some(t) = guard.as_mut() else { return };
    let mut gaps = Vec::new();
    f(t, &mut |e| {
        if let Event::Gap {
            device,
            start_ns,
            len_ns,
        } = e
        {
            gaps.push((device, start_ns, len_ns));
        }
    });
    let g = seg.gpu();
    let r = Ordering::Relaxed;
    let mut late = 0;
    for (id, tot) in t.totals() {
        late += tot.late_ns;
        let Some(d) = seg.gpu_device(id as i32) else {
            continue;
        };
        d.span_ns.store(tot.span_ns, r);
        d.busy_ns.store(tot.busy_ns, r);
        d.short_gaps.store(tot.short_gaps, r);
        d.short_gap_ns.store(tot.short_gap_ns, r);
        d.final_ns.store(tot.final_ns, r);
        if let Some(p) = tot.last_sample_ppm {
            d.sample_ppm.store(p, r);
        }
    }
    g.late_ns.store(late, r);
    g.records.store(cupti::RECORDS.load(Ordering::Relaxed), r);
    drop(guard);
    for (device, start, len) in gaps {
        if crate::shed::level(seg) >= syncspy_abi::cost::SHED_GAPS {
            seg.count_gpu_idle(len);
            seg.cost().gaps_shed.fetch_add(1, Ordering::Relaxed);
        } else {
            seg.record_gpu_idle(device as i32, start, len);
        }
    }
}

/// From the exit handler: asks the GPU thread for a last pass (flush, everything delivered
/// accounted) and waits for it at most 300 ms.
pub fn at_exit() {
    last_pass(300_000_000);
}

/// The GPU thread's last pass at exit, waited for at most `patience_ns`: once asked, the
/// thread makes no new CUPTI call but the ones that end tracing (kinds disabled, buffers
/// flushed back, everything accounted).
fn last_pass(patience_ns: u64) {
    if STARTED.load(Ordering::Acquire) == 0 || segment().is_none() {
        return;
    }
    if EXIT
        .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        return;
    }
    // SeqCst with the thread's own `WAITING` store and `EXIT` load (`run`): either this
    // sees it leave the wait, or it sees the request and touches no CUPTI.
    if WAITING.load(Ordering::SeqCst) {
        // Nothing was traced: the exit need not wait for the thread.
        return;
    }
    let deadline = now_ns() + patience_ns;
    while EXIT.load(Ordering::Acquire) != 2 && now_ns() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// Registered with `atexit` after CUPTI started and after the process's first hooked call
/// returned (by then the CUDA runtime has registered its own teardown): exit runs it before
/// CUPTI's and the runtime's teardown, and it waits for the GPU thread to disable syncspy's
/// kinds, flush and end, so that no CUPTI call of syncspy's overlaps them. Waits up to 2 s
/// (a thread idle between passes answers in about 10 ms, plus its last flush).
extern "C" fn quiesce_at_exit() {
    let _ = std::panic::catch_unwind(|| last_pass(2_000_000_000));
}

/// See `quiesce_at_exit`. Called after each event that registers a teardown the barrier
/// must precede: CUPTI's start, the runtime's first return (exit runs the latest
/// registration first; the others find the thread ended). At most 4 registrations per
/// process; a fork child inherits them, with its GPU part already ended.
pub fn register_exit_quiesce() {
    static COUNT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    if COUNT.fetch_add(1, Ordering::AcqRel) < 4 {
        // SAFETY: registers a function of this library, which is never unloaded.
        unsafe { libc::atexit(quiesce_at_exit) };
    }
}

/// At detach: the GPU thread disables its kinds, flushes, accounts what arrived and ends
/// (waited for at most 1 s), so that nothing of syncspy runs on in the process and a later
/// attach starts a fresh one. CUPTI stays loaded with syncspy's callbacks registered and no
/// kind enabled by syncspy.
pub fn stop_for_detach() {
    if STARTED.load(Ordering::Acquire) == 0 {
        return;
    }
    DETACH.store(true, Ordering::Release);
    let deadline = now_ns() + 1_000_000_000;
    while EXIT.load(Ordering::Acquire) != 2 && now_ns() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    if EXIT.load(Ordering::Acquire) != 2 {
        // Still inside CUPTI: it ends at its next look at DETACH, which stays set; no
        // second thread is started meanwhile (STARTED stays 1).
        return;
    }
    SEGMENT.store(std::ptr::null_mut(), Ordering::Release);
    if let Ok(mut t) = TRACKER.lock() {
        *t = None;
    }
    // The next attach's segment counts its own records.
    cupti::RECORDS.store(0, Ordering::Relaxed);
    WAITING.store(false, Ordering::Release);
    EXIT.store(0, Ordering::Release);
    DETACH.store(false, Ordering::Release);
    STARTED.store(0, Ordering::Release);
}

/// In a fork child: the parent's GPU thread is not there, so nothing waits for it at exit or
/// writes into the parent's segment from here (the child does not trace its GPU).
pub fn after_fork_in_child() {
    SEGMENT.store(std::ptr::null_mut(), Ordering::Release);
    API.store(std::ptr::null_mut(), Ordering::Release);
    EXIT.store(2, Ordering::Release);
}

/// Another client takes CUPTI over: syncspy's kinds off, its buffers back to it, counted.
fn step_back() {
    if ON_GPU_THREAD.with(|c| c.get()) {
        return;
    }
    if FOREIGN.swap(true, Ordering::AcqRel) {
        return;
    }
    let Some(seg) = segment() else { return };
    if let Some(api) = api() {
        if let Ok(_c) = CONTROL.lock() {
            for k in cupti::KINDS {
                // SAFETY: cuptiActivityDisable with a kind CUPTI defines.
                unsafe { (api.disable)(k) };
            }
            // SAFETY: as in `flush`: syncspy's outstanding buffers come back to syncspy's
            // callback before the other client registers its own.
            unsafe { (api.flush_all)(0) };
        }
    }
    let g = seg.gpu();
    g.yields.fetch_add(1, Ordering::Relaxed);
    g.state.store(GPU_YIELDED, Ordering::Release);
}

/// The real CUPTI function `name`: the next definition after this library, or the one in the
/// loaded libcupti when it was loaded `RTLD_LOCAL`.
///
/// Hand-written, not libloading (which opens and looks CUPTI up for `cupti::open_library`):
/// this runs inside the exported `cuptiActivityRegisterCallbacks` and `cuptiSubscribe`, on
/// the other client's call, and `RTLD_NEXT` ("the next definition after this library") has
/// no libloading form; the fallbacks are `real::sym_in`'s (see `real.rs`).
fn real_cupti(name: &CStr) -> *mut c_void {
    // SAFETY: RTLD_NEXT and a C string.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if !p.is_null() {
        return p;
    }
    for soname in [c"libcupti.so.13", c"libcupti.so.12", c"libcupti.so"] {
        let p = crate::real::sym_in(soname.as_ptr(), name);
        if !p.is_null() {
            return p;
        }
    }
    let mut buf = [0u8; libc::PATH_MAX as usize];
    match crate::real::loaded_path_with(b"libcupti", &mut buf) {
        Some(path) => crate::real::sym_in(path.as_ptr(), name),
        None => std::ptr::null_mut(),
    }
}

/// `CUPTI_ERROR_NOT_INITIALIZED`: what the exported CUPTI entry points return when no
/// libcupti defines the real function (nobody could have called them then).
const CUPTI_NOT_INITIALIZED: u32 = 15;

#[allow(non_snake_case)] // CUPTI's name
/// Another client (torch.profiler's Kineto, a user's CUPTI code) registers its activity
/// callbacks: syncspy steps back first, then the call goes through unchanged.
///
/// # Safety
/// Same contract as CUPTI's `cuptiActivityRegisterCallbacks`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuptiActivityRegisterCallbacks(
    requested: cudarc::cupti::sys::CUpti_BuffersCallbackRequestFunc,
    completed: cudarc::cupti::sys::CUpti_BuffersCallbackCompleteFunc,
) -> u32 {
    let _ = std::panic::catch_unwind(step_back);
    let p = real_cupti(c"cuptiActivityRegisterCallbacks");
    if p.is_null() {
        return CUPTI_NOT_INITIALIZED;
    }
    // SAFETY: `p` is CUPTI's function of this name and signature; the arguments are the
    // caller's.
    unsafe {
        let f: unsafe extern "C" fn(
            cudarc::cupti::sys::CUpti_BuffersCallbackRequestFunc,
            cudarc::cupti::sys::CUpti_BuffersCallbackCompleteFunc,
        ) -> u32 = std::mem::transmute::<*mut c_void, _>(p);
        f(requested, completed)
    }
}

#[allow(non_snake_case)] // CUPTI's name
/// Another client subscribes to CUPTI callbacks: syncspy steps back first (see above).
///
/// # Safety
/// Same contract as CUPTI's `cuptiSubscribe`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuptiSubscribe(
    subscriber: *mut cudarc::cupti::sys::CUpti_SubscriberHandle,
    callback: cudarc::cupti::sys::CUpti_CallbackFunc,
    userdata: *mut c_void,
) -> u32 {
    let _ = std::panic::catch_unwind(step_back);
    let p = real_cupti(c"cuptiSubscribe");
    if p.is_null() {
        return CUPTI_NOT_INITIALIZED;
    }
    // SAFETY: as above.
    unsafe {
        let f: unsafe extern "C" fn(
            *mut cudarc::cupti::sys::CUpti_SubscriberHandle,
            cudarc::cupti::sys::CUpti_CallbackFunc,
            *mut c_void,
        ) -> u32 = std::mem::transmute::<*mut c_void, _>(p);
        f(subscriber, callback, userdata)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tracing_follows_the_mode_and_a_readers_request() {
        let s = 1_000_000_000u64;
        // On: always. Duty: 1 s in every 10, from the start.
        assert!(want_tracing(MODE_ON, 0, 5 * s, 0));
        assert!(want_tracing(MODE_DUTY, 100, 100 + s / 2, 0));
        assert!(!want_tracing(MODE_DUTY, 100, 100 + 2 * s, 0));
        assert!(want_tracing(MODE_DUTY, 100, 100 + 10 * s + 1, 0));
        // Off: never, unless asked.
        assert!(!want_tracing(MODE_OFF, 0, 5 * s, 0));
        // A request turns it on until its time, in the off phase of duty mode and in off.
        assert!(want_tracing(MODE_DUTY, 0, 2 * s, 3 * s));
        assert!(want_tracing(MODE_OFF, 0, 2 * s, 3 * s));
        assert!(!want_tracing(MODE_OFF, 0, 3 * s, 3 * s));
        assert!(!want_tracing(MODE_DUTY, 0, 4 * s, 3 * s));
    }

    use super::*;

    #[test]
    fn the_mode_defaults_to_duty_and_parses_off_and_on() {
        let c = GpuConfig::parse(None, None);
        assert_eq!((c.mode, c.min_gap_ns), (MODE_DUTY, 10_000));
        assert_eq!(GpuConfig::parse(Some("off"), None).mode, MODE_OFF);
        assert_eq!(GpuConfig::parse(Some(" on "), Some("50")).mode, MODE_ON);
        assert_eq!(GpuConfig::parse(Some("on"), Some("50")).min_gap_ns, 50_000);
        assert_eq!(GpuConfig::parse(Some("sometimes"), Some("x")), c);
    }

    #[test]
    fn false_is_off_and_a_bad_value_warns() {
        // `false` used to leave duty-mode tracing on.
        for v in ["false", "FALSE", "no", "0", "off"] {
            assert_eq!(GpuConfig::parse(Some(v), None).mode, MODE_OFF, "{v}");
        }
        for v in ["true", "yes", "1", "on"] {
            assert_eq!(GpuConfig::parse(Some(v), None).mode, MODE_ON, "{v}");
        }
        let mut w = Vec::new();
        let c = GpuConfig::parse_warn(Some("duty"), Some("25"), &mut w);
        assert_eq!((c.mode, c.min_gap_ns, w.len()), (MODE_DUTY, 25_000, 0));
        let c = GpuConfig::parse_warn(Some("bogus"), Some("-1"), &mut w);
        assert_eq!((c.mode, c.min_gap_ns), (MODE_DUTY, 10_000));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with("SYNCSPY_GPU_IDLE=\"bogus\" is not"),
            "{w:?}"
        );
        assert!(
            w[1].starts_with("SYNCSPY_GPU_IDLE_MIN_US=\"-1\" is not"),
            "{w:?}"
        );
    }
}
