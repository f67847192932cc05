//! The GPU idle each stall causes, measured at every stall with two CUDA events (ABI 1.10),
//! whether or not the GPU's activity is being traced.
//!
//! A stream or device sync waits for the work queued before it; once the GPU has finished
//! that work it sits idle until the host queues more. Before the real sync, the library
//! records a *drain* event on the waited stream (for a device sync, the legacy default
//! stream, which waits for every blocking stream's work). A blocking or pageable copy between
//! host and device waits the same way, for the work queued before it and then for itself: its
//! drain event is recorded on the copy's stream before the copy, so its measurement includes
//! the copy's own transfer (microseconds for the scalars a loop reads back; `.cpu()` is such a
//! copy followed by a sync that finds nothing left). After the stall returns, the thread
//! is *armed*: the next work it queues (a kernel or graph launch, an async copy, a copy or
//! memset through a hooked call) first records a *resume* event on that work's stream. The
//! GPU time between the two events is the idle the stall caused: from when the GPU finished
//! the waited-for work to when the next work reached it. The thread reads the pair at its
//! next stall, before waiting (the GPU passed both events long before), or the exit handler
//! does; it is written as a `gpu_idle` record of API `stall_events` with the stall's start,
//! thread, stream and site, and the stall's kind and API in `result`.
//!
//! A second stall before any new work (two syncs in a row) caused no idle of its own: the GPU
//! was already idle, behind the first. It is counted as measured, with 0 ns, in the totals
//! only (no record). Not measured: event syncs, host-to-host copies and the other kinds of
//! stall; a stall whose event could not be recorded (a capturing stream,
//! another context's stream, no free slot); stalls while the library sheds gap records or
//! more, or while its own time in the current second is past three quarters of its budget
//! (`shed::room`: the measurement takes what the budget leaves, so that call sites are not
//! shed for it); a thread that queues no more work; and a process the library was injected
//! into (`syncspy attach` of a process started without it), whose launches it sees only in
//! part. A process started with the library preloaded dormant and armed by `syncspy attach`
//! is measured: its wrappers were handed out from the start. A measurement begun in one
//! recording session (a segment, its `Runtime`) and read in another is dropped. The report says
//! how many of the stalls of the measured kinds were measured.
//!
//! The resume event waits for whatever was queued on its stream before it: when the next
//! launch goes to another stream that still has work queued, the measurement runs to the end
//! of that work (longer than the idle). The measurement follows the stalling thread: work
//! another thread queues on the GPU before this thread's next launch falls inside it.
//!
//! The events are the driver API's (`cuEventRecord` ...): the resume is recorded inside
//! whatever is launching (the CUDA runtime's `cudaLaunchKernel` calls the driver's
//! `cuLaunchKernel`, which syncspy wraps), where calling into the runtime could re-enter it.
//! Each slot keeps its two events for reuse, remade when the context differs.
//!
//! Cost: at a stall, a capture query and one event record before the wait, and one elapsed-time
//! read of the previous stall's pair; at the next work, one event record.
//! Every launch pays two relaxed loads while no thread is armed.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};

use syncspy_abi::cost::{SHED_GAPS, SHED_RECORDS};
use syncspy_abi::record::{stall_result, FLAG_PER_THREAD, NO_SITE};
use syncspy_abi::{Api, Direction, Kind, Record};

use crate::call::Call;
use crate::clock::now_ns;
use crate::real::Real;
use crate::state::Runtime;

/// Measurements in flight at once: threads armed, and pairs not yet read.
const SLOT_COUNT: usize = 256;
/// Pairs a thread keeps to read at its next stall (more are read at exit).
const THREAD_PAIRS: usize = 4;
/// `cudaStreamPerThread` / `CU_STREAM_PER_THREAD`: the per-thread default stream's handle.
const PER_THREAD_STREAM: u64 = 2;

const FREE: u8 = 0;
const CLAIMED: u8 = 1;
const ARMED: u8 = 2;
const RESUMED: u8 = 3;
const NONE: u32 = u32::MAX;

/// One measurement. `state`: FREE → CLAIMED (the stalling thread, by CAS) → ARMED (the sync
/// returned) → RESUMED (the next work's event recorded) → FREE (read, by that thread or the
/// exit handler, which claim it back by CAS from RESUMED).
struct Slot {
    state: AtomicU8,
    /// The context the events were made in; 0 before the first use.
    ctx: AtomicUsize,
    drain: AtomicUsize,
    resume: AtomicUsize,
    start_ns: AtomicU64,
    stream: AtomicU64,
    device: AtomicU32,
    tid: AtomicU32,
    site: AtomicU32,
    /// `stall_result` of the stall, and its `FLAG_PER_THREAD` bit.
    what: AtomicU32,
    flags: AtomicU8,
    /// The runtime (its address: one per segment, never freed) the stall was recorded in.
    runtime: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    state: AtomicU8::new(FREE),
    ctx: AtomicUsize::new(0),
    drain: AtomicUsize::new(0),
    resume: AtomicUsize::new(0),
    start_ns: AtomicU64::new(0),
    stream: AtomicU64::new(0),
    device: AtomicU32::new(0),
    tid: AtomicU32::new(0),
    site: AtomicU32::new(NO_SITE),
    what: AtomicU32::new(0),
    flags: AtomicU8::new(0),
    runtime: AtomicUsize::new(0),
};

static SLOTS: [Slot; SLOT_COUNT] = [EMPTY; SLOT_COUNT];
/// Threads armed now: while 0, the work hooks do nothing else.
static ARMED_THREADS: AtomicUsize = AtomicUsize::new(0);
/// A launch hook has run in this process: without one (a process attached to, whose launches
/// bypass the library) a stall is not measured, as only a copy would end it.
static LAUNCH_SEEN: AtomicBool = AtomicBool::new(false);
static EXIT_HANDLER: AtomicBool = AtomicBool::new(false);

/// A thread's armed slot (`NONE`: not armed). A thread that ends armed gives its slot back and
/// leaves the count of armed threads, so that launches do not keep looking for it.
struct Armed(Cell<u32>);

impl Armed {
    fn get(&self) -> u32 {
        self.0.get()
    }

    fn set(&self, i: u32) {
        self.0.set(i);
    }

    fn replace(&self, i: u32) -> u32 {
        self.0.replace(i)
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        let i = self.0.replace(NONE);
        if i != NONE {
            ARMED_THREADS.fetch_sub(1, Relaxed);
            SLOTS[i as usize].state.store(FREE, Release);
        }
    }
}

thread_local! {
    static ARMED_SLOT: Armed = const { Armed(Cell::new(NONE)) };
    /// Pairs this thread recorded and has not read.
    static PAIRS: Cell<[u32; THREAD_PAIRS]> = const { Cell::new([NONE; THREAD_PAIRS]) };
}

type CtxGetFn = unsafe extern "C" fn(*mut usize) -> u32;
type EventCreateFn = unsafe extern "C" fn(*mut usize, u32) -> u32;
type EventRecordFn = unsafe extern "C" fn(usize, u64) -> u32;
type EventFn = unsafe extern "C" fn(usize) -> u32;
type ElapsedFn = unsafe extern "C" fn(*mut f32, usize, usize) -> u32;

static CTX_GET: Real = Real::driver(c"cuCtxGetCurrent");
static EVENT_CREATE: Real = Real::driver(c"cuEventCreate");
static EVENT_RECORD: Real = Real::driver(c"cuEventRecord");
static EVENT_ELAPSED: Real = Real::driver(c"cuEventElapsedTime");
static EVENT_ELAPSED_V2: Real = Real::driver(c"cuEventElapsedTime_v2");
static EVENT_DESTROY: Real = Real::driver(c"cuEventDestroy_v2");

/// What `before_wait` opened for a stall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Open {
    /// Not measured.
    No,
    /// The thread was already armed: no work since its last stall.
    BackToBack,
    /// The drain event of this slot is recorded.
    Slot(u32),
}

/// Whether stalls of `kind` are measured: syncs, and blocking or pageable copies between host
/// and device (whose drain event, recorded before the copy on its stream, marks the end of the
/// work the copy waits for: the measurement includes the copy itself).
fn measured(kind: Kind, call: &Call) -> bool {
    let copy = matches!(kind, Kind::MemcpySync | Kind::MemcpyPageable);
    kind.idle_measured_behind()
        && (!copy
            || matches!(
                call.direction,
                Direction::HostToDevice | Direction::DeviceToHost
            ))
}

/// The stream a stall waits on (or queues its copy on), as the driver names it.
fn waited_stream(kind: Kind, stream: u64, flags: u8) -> u64 {
    let per_thread = flags & FLAG_PER_THREAD != 0;
    match kind {
        // A device sync: the legacy default stream waits for every blocking stream.
        Kind::DeviceSync => 0,
        _ if stream == 0 && per_thread => PER_THREAD_STREAM,
        _ => stream,
    }
}

/// Before the real sync of a stall: reads this thread's finished pairs, then records the
/// drain event; and the time that took (in the library's own time already). Never fails the
/// call: any problem leaves the stall unmeasured.
pub(crate) fn before_wait(rt: &'static Runtime, kind: Kind, call: &Call) -> (Open, u64) {
    if !measured(kind, call) || !LAUNCH_SEEN.load(Relaxed) || !rt.cfg.idle_after {
        return (Open::No, 0);
    }
    // Injected by `syncspy attach`: the runtime and cuBLAS took their driver functions
    // unwrapped at start, so some launches pass unseen, and a measurement would run to a later
    // launch. Not measured. (A dormant preload handed its wrappers out from the start.)
    if crate::attach::injected_into() {
        return (Open::No, 0);
    }
    let t = now_ns();
    let open = catch_unwind(AssertUnwindSafe(|| {
        read_pairs(rt);
        if ARMED_SLOT.try_with(Armed::get).unwrap_or(NONE) != NONE {
            return Open::BackToBack;
        }
        // Optional detail: it takes only what the budget leaves, so that the call sites are
        // never shed for it.
        if crate::shed::level(&rt.seg) >= SHED_GAPS || !crate::shed::room(&rt.seg) {
            return Open::No;
        }
        drain(waited_stream(kind, call.stream, call.flags)).map_or(Open::No, Open::Slot)
    }))
    .unwrap_or(Open::No);
    (open, spent(rt, t))
}

/// Claims a slot and records its drain event on `stream`.
fn drain(stream: u64) -> Option<u32> {
    let per_thread = stream == PER_THREAD_STREAM;
    if crate::hostwait::capturing(if per_thread { 0 } else { stream }, per_thread) != Some(false) {
        return None;
    }
    let record = EVENT_RECORD.get::<EventRecordFn>()?;
    let i = claim()?;
    let s = &SLOTS[i];
    // SAFETY: `cuEventRecord(CUevent, CUstream)` with an event this library made in the
    // current context and the stream the program waits on (or a default stream handle).
    let ok = events_for(s).is_some_and(|(d, _)| unsafe { record(d, stream) } == 0);
    if !ok {
        s.state.store(FREE, Release);
        return None;
    }
    Some(i as u32)
}

/// Once the sync returned (its record written, `site` its call site): arms the thread, or
/// counts a back-to-back stall's 0 ns.
pub(crate) fn after_wait(
    rt: &'static Runtime,
    open: Open,
    kind: Kind,
    call: &Call,
    start_ns: u64,
    site: u32,
    result: u32,
) {
    let i = match open {
        Open::No => return,
        Open::BackToBack => {
            // No idle of its own: counted in the totals, with no record (a loop of syncs with
            // no work between them would otherwise write twice the records).
            if result == 0 {
                rt.seg.live().apis[Api::StallEvents as usize].add(0, 0);
            }
            return;
        }
        Open::Slot(i) => i as usize,
    };
    let s = &SLOTS[i];
    if result != 0 {
        s.state.store(FREE, Release);
        return;
    }
    s.start_ns.store(start_ns, Relaxed);
    s.stream.store(call.stream, Relaxed);
    s.device
        .store(crate::device::current_device() as u32, Relaxed);
    s.tid.store(crate::guard::tid(), Relaxed);
    s.site.store(site, Relaxed);
    s.what.store(stall_result(kind, call.api), Relaxed);
    s.flags.store(call.flags & FLAG_PER_THREAD, Relaxed);
    s.runtime.store(identity(rt), Relaxed);
    if ARMED_SLOT.try_with(|a| a.set(i as u32)).is_err() {
        s.state.store(FREE, Release);
        return;
    }
    s.state.store(ARMED, Release);
    ARMED_THREADS.fetch_add(1, Relaxed);
    if !EXIT_HANDLER.swap(true, AcqRel) {
        // Registered after the CUDA runtime's own exit handlers (it is initialised by now),
        // so it runs first, while the driver still works.
        // SAFETY: registers an `extern "C"` function of this library, which stays loaded.
        unsafe { libc::atexit(at_exit) };
    }
}

/// Work is being queued on `stream` by this thread (`per_thread`: a `_ptsz` form, whose
/// stream 0 is the per-thread default stream): ends this thread's armed measurement, if any.
#[inline(always)]
pub(crate) fn work_queued(stream: u64, per_thread: bool) {
    if ARMED_THREADS.load(Relaxed) != 0 {
        resume(stream, per_thread);
    }
}

/// A kernel or graph launch on `stream`: `work_queued`, and notes that launches are seen.
#[inline(always)]
pub(crate) fn launch_queued(stream: u64, per_thread: bool) {
    if !LAUNCH_SEEN.load(Relaxed) {
        LAUNCH_SEEN.store(true, Relaxed);
    }
    work_queued(stream, per_thread);
}

#[cold]
#[inline(never)]
fn resume(stream: u64, per_thread: bool) {
    // Another thread may be the one armed: this one only looks.
    let Ok(i) = ARMED_SLOT.try_with(|a| a.replace(NONE)) else {
        return;
    };
    if i == NONE {
        return;
    }
    let t = now_ns();
    let _ = catch_unwind(|| {
        ARMED_THREADS.fetch_sub(1, Relaxed);
        let s = &SLOTS[i as usize];
        let stream = if stream == 0 && per_thread {
            PER_THREAD_STREAM
        } else {
            stream
        };
        let recorded = EVENT_RECORD.get::<EventRecordFn>().is_some_and(|f| {
            // SAFETY: `cuEventRecord(CUevent, CUstream)` with the slot's second event (made in
            // this thread's context at the stall) and the stream the program queues on.
            unsafe { f(s.resume.load(Relaxed), stream) == 0 }
        });
        if !recorded {
            s.state.store(FREE, Release);
            return;
        }
        s.state.store(RESUMED, Release);
        // A thread with more pairs than it keeps leaves this one to the exit handler.
        let _ = PAIRS.try_with(|p| {
            let mut v = p.get();
            if let Some(free) = v.iter_mut().find(|x| **x == NONE) {
                *free = i;
                p.set(v);
            }
        });
    });
    if let Some(rt) = crate::init::active() {
        let _ = spent(rt, t);
    }
}

/// Reads this thread's pairs whose resume the GPU has passed.
fn read_pairs(rt: &'static Runtime) {
    let Ok(mut pairs) = PAIRS.try_with(Cell::get) else {
        return;
    };
    let mut changed = false;
    for p in pairs.iter_mut().filter(|p| **p != NONE) {
        if read(rt, *p as usize) {
            *p = NONE;
            changed = true;
        }
    }
    if changed {
        let _ = PAIRS.try_with(|c| c.set(pairs));
    }
}

/// Reads slot `i` (RESUMED) and frees it; `false` while the GPU has not reached its resume
/// (or another reader took it). One driver call when it has: the elapsed time, which says
/// not-ready while an event is pending.
fn read(rt: &'static Runtime, i: usize) -> bool {
    let s = &SLOTS[i];
    let Some(elapsed) = EVENT_ELAPSED
        .get::<ElapsedFn>()
        .or_else(|| EVENT_ELAPSED_V2.get::<ElapsedFn>())
    else {
        return false;
    };
    if s.state
        .compare_exchange(RESUMED, CLAIMED, AcqRel, Relaxed)
        .is_err()
    {
        return true;
    }
    if stale(s, identity(rt)) {
        // Begun while recording into an earlier segment: not this one's.
        s.state.store(FREE, Release);
        return true;
    }
    let mut ms = 0f32;
    // SAFETY: `cuEventElapsedTime(float*, CUevent, CUevent)` with a local out-value and the
    // slot's two events, both recorded by this library.
    match unsafe { elapsed(&mut ms, s.drain.load(Relaxed), s.resume.load(Relaxed)) } {
        0 => write(rt, s, (f64::from(ms.max(0.0)) * 1e6) as u64),
        crate::call::NOT_READY => {
            s.state.store(RESUMED, Release);
            return false;
        }
        _ => {}
    }
    s.state.store(FREE, Release);
    true
}

/// Whether slot `s`'s stall was recorded into another segment than `runtime`'s (before a
/// detach and a new attach): a new segment comes with a new `Runtime`.
fn stale(s: &Slot, runtime: usize) -> bool {
    s.runtime.load(Relaxed) != runtime
}

fn identity(rt: &Runtime) -> usize {
    rt as *const Runtime as usize
}

/// Writes slot `s`'s measurement, `idle_ns` behind its stall.
fn write(rt: &Runtime, s: &Slot, idle_ns: u64) {
    let rec = Record {
        kind: Kind::GpuIdle,
        api: Api::StallEvents,
        direction: Direction::None,
        flags: s.flags.load(Relaxed),
        device: s.device.load(Relaxed) as i32,
        start_ns: s.start_ns.load(Relaxed),
        duration_ns: idle_ns,
        bytes: 0,
        stream: s.stream.load(Relaxed),
        tid: s.tid.load(Relaxed),
        site: s.site.load(Relaxed),
        result: s.what.load(Relaxed),
        polls: 0,
    };
    rt.seg
        .record_stall_idle(&rec, crate::shed::level(&rt.seg) < SHED_RECORDS);
}

/// The library's own time since `t`, added to its overhead; returned.
fn spent(rt: &Runtime, t: u64) -> u64 {
    let ns = now_ns().saturating_sub(t);
    rt.seg.live().overhead_ns.fetch_add(ns, Relaxed);
    ns
}

/// The first free slot: the same few slots serve a program's syncs, so their events are made
/// once (a slot's first use makes two events, tens of microseconds).
fn claim() -> Option<usize> {
    (0..SLOT_COUNT).find(|i| {
        SLOTS[*i]
            .state
            .compare_exchange(FREE, CLAIMED, Acquire, Relaxed)
            .is_ok()
    })
}

/// The slot's two events, made in the current context (remade if the slot's were made in
/// another).
fn events_for(s: &Slot) -> Option<(usize, usize)> {
    let get = CTX_GET.get::<CtxGetFn>()?;
    let mut ctx = 0usize;
    // SAFETY: `cuCtxGetCurrent(CUcontext*)` with a local out-value.
    if unsafe { get(&mut ctx) } != 0 || ctx == 0 {
        return None;
    }
    if s.ctx.load(Relaxed) == ctx {
        return Some((s.drain.load(Relaxed), s.resume.load(Relaxed)));
    }
    let create = EVENT_CREATE.get::<EventCreateFn>()?;
    if s.ctx.swap(0, Relaxed) != 0 {
        if let Some(destroy) = EVENT_DESTROY.get::<EventFn>() {
            // SAFETY: events this library made and no longer uses (the slot is claimed).
            unsafe {
                destroy(s.drain.load(Relaxed));
                destroy(s.resume.load(Relaxed));
            }
        }
    }
    let (mut a, mut b) = (0usize, 0usize);
    let t = now_ns();
    // SAFETY: `cuEventCreate(CUevent*, unsigned)` with local out-values and flags 0
    // (CU_EVENT_DEFAULT: timed).
    let made = unsafe { create(&mut a, 0) } == 0 && unsafe { create(&mut b, 0) } == 0;
    // Once per slot and context: outside the budget, like the library's start-up.
    crate::shed::outside(now_ns().saturating_sub(t));
    if !made {
        return None;
    }
    s.drain.store(a, Relaxed);
    s.resume.store(b, Relaxed);
    s.ctx.store(ctx, Relaxed);
    Some((a, b))
}

/// The exit handler: every pair the GPU has passed is read, whichever thread recorded it.
extern "C" fn at_exit() {
    let _ = catch_unwind(|| {
        let Some(rt) = crate::init::active() else {
            return;
        };
        for (i, s) in SLOTS.iter().enumerate() {
            if s.state.load(Acquire) == RESUMED {
                read(rt, i);
            }
        }
    });
}

/// In a forked child: the parent's events and armed threads are not this process's.
pub(crate) fn after_fork_in_child() {
    ARMED_THREADS.store(0, Relaxed);
    EXIT_HANDLER.store(false, Relaxed);
    for s in &SLOTS {
        s.state.store(FREE, Relaxed);
        s.ctx.store(0, Relaxed);
    }
    let _ = ARMED_SLOT.try_with(|a| a.set(NONE));
    let _ = PAIRS.try_with(|p| p.set([NONE; THREAD_PAIRS]));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syncs_and_copies_between_host_and_device_are_measured() {
        for k in Kind::ALL {
            for d in [
                Direction::None,
                Direction::HostToDevice,
                Direction::DeviceToHost,
                Direction::HostToHost,
                Direction::DeviceToDevice,
            ] {
                let call = Call {
                    direction: d,
                    ..Call::new(*k, Api::CudaMemcpy)
                };
                let copy = matches!(d, Direction::HostToDevice | Direction::DeviceToHost);
                assert_eq!(
                    measured(*k, &call),
                    matches!(k, Kind::StreamSync | Kind::DeviceSync)
                        || (copy && matches!(k, Kind::MemcpySync | Kind::MemcpyPageable)),
                    "{k} {d:?}"
                );
            }
        }
    }

    #[test]
    fn a_thread_that_ends_armed_gives_its_slot_back() {
        let i = claim().expect("a free slot");
        SLOTS[i].state.store(ARMED, Release);
        let before = ARMED_THREADS.fetch_add(1, Relaxed);
        std::thread::spawn(move || ARMED_SLOT.with(|a| a.set(i as u32)))
            .join()
            .unwrap();
        assert_eq!(ARMED_THREADS.load(Relaxed), before);
        assert_eq!(SLOTS[i].state.load(Acquire), FREE);
    }

    #[test]
    fn a_measurement_begun_before_a_new_segment_is_stale() {
        let s = Slot { ..EMPTY };
        s.runtime.store(0x7f00_1000, Relaxed);
        assert!(!stale(&s, 0x7f00_1000));
        // After a detach and a new attach: another runtime.
        assert!(stale(&s, 0x7f00_2000));
    }

    #[test]
    fn the_waited_stream_names_the_per_thread_default_stream() {
        assert_eq!(waited_stream(Kind::StreamSync, 0, FLAG_PER_THREAD), 2);
        assert_eq!(waited_stream(Kind::StreamSync, 0, 0), 0);
        assert_eq!(waited_stream(Kind::StreamSync, 0x55, FLAG_PER_THREAD), 0x55);
        assert_eq!(waited_stream(Kind::DeviceSync, 0x55, 0), 0);
        // A copy's stream, the `_ptds` form's stream 0 the per-thread one.
        assert_eq!(waited_stream(Kind::MemcpyPageable, 0x55, 0), 0x55);
        assert_eq!(waited_stream(Kind::MemcpySync, 0, FLAG_PER_THREAD), 2);
    }
}
