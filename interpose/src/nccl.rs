//! Collective communication (NCCL): each collective's time on this rank's GPU, always on.
//!
//! A collective runs on its rank's GPU from when the stream reaches it until every rank of
//! the communicator has reached it: the rank the others wait for spends the least time in
//! collectives. The hooks below (`ncclAllReduce` and the other collectives, `ncclGroupStart`
//! and `ncclGroupEnd`, and the communicator constructors, for its identity) record a CUDA
//! event on the collective's stream before and after the real call; the `syncspy-nccl`
//! thread reads the pairs once the GPU is past them, and adds their elapsed time to the
//! segment's collectives part (`syncspy_abi::collectives`). Per call: a stream-capture query
//! and two `cudaEventRecord`s (none while the stream is capturing a CUDA graph: the events
//! would be graph nodes, not timings).
//!
//! A call inside `ncclGroupStart`/`ncclGroupEnd` is only queued by NCCL; the group's
//! collectives are launched at the outermost `ncclGroupEnd`, so the events go around that call,
//! one pair per stream the group used (at most `GROUP_STREAMS`).
//!
//! The events are made with the runtime API (`cudaEventCreateWithFlags`, default flags: timed)
//! on the calling thread's current device, and kept in `SLOTS` for reuse. A program without
//! the runtime in reach (driver-only) gets its collectives counted, not measured
//! (`collectives.unmeasured`).

// The exported names are NCCL's.
#![allow(non_snake_case)]

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
use std::sync::Mutex;

use crate::clock::now_ns;
use crate::entry::enter;
use crate::errno::{errno, set_errno};
use crate::real::Real;
use crate::state::Runtime;

/// `ncclResult_t` as the C ABI carries it.
pub type NcclResult = c_int;
/// `ncclComm_t`: an opaque pointer.
pub type NcclComm = *mut c_void;
/// `cudaStream_t`.
pub type Stream = *mut c_void;

/// `ncclSystemError`: what a hook returns when no NCCL library defines the real function.
const NCCL_SYSTEM_ERROR: NcclResult = 2;

/// `ncclUniqueId`: 128 opaque bytes, passed by value to the communicator constructors.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NcclUniqueId {
    pub internal: [u8; 128],
}

/// The first collectives of a process are all measured; after them, one in `SAMPLE_PERIOD`,
/// chosen by a hash of the call's index in the process, so that every rank of an SPMD job
/// (which makes the same collective calls in the same order) measures the same calls, and a
/// loop whose step makes a fixed number of collectives is not sampled at one phase of it.
/// A sampled measurement counts `SAMPLE_PERIOD` times. Measured on an all-reduce-heavy loop
/// (16,000 a second, docs/performance.md), measuring every call cost about 17% of its time
/// (two event records on the calling thread, and the reading thread's runtime calls contending
/// with the launches).
const MEASURE_ALL: u64 = 1024;
const SAMPLE_PERIOD: u64 = 16;

/// Whether the collective call of index `i` (from 0, in the process) is measured, and its
/// weight.
fn sampled(i: u64) -> Option<u32> {
    if i < MEASURE_ALL {
        return Some(1);
    }
    // splitmix64's finalizer: neighbouring indices spread over the whole range.
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z.is_multiple_of(SAMPLE_PERIOD)
        .then_some(SAMPLE_PERIOD as u32)
}

/// Measurements in flight at once: collectives queued on the GPU and not yet read.
const SLOT_COUNT: usize = 1024;
/// Streams of one group measured (more are counted, not measured).
const GROUP_STREAMS: usize = 4;
/// Communicators whose identity is kept.
const COMM_COUNT: usize = 64;

const FREE: u8 = 0;
const CLAIMED: u8 = 1;
const PENDING: u8 = 2;
/// `Slot::device` of a slot without events.
const NO_EVENTS: i32 = i32::MIN;

/// One measurement: the events before and after a collective (or a group's collectives on one
/// stream). `state` is FREE → CLAIMED (the calling thread, by CAS) → PENDING (Release, with
/// the other fields written) → FREE (the reading thread, Release, after the reads).
struct Slot {
    state: AtomicU8,
    /// The device the events were made on; `NO_EVENTS` before the first use.
    device: AtomicI32,
    before: AtomicUsize,
    after: AtomicUsize,
    called_ns: AtomicU64,
    comm: AtomicUsize,
    /// How many collectives the measurement stands for (`sampled`).
    weight: AtomicU32,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SLOT: Slot = Slot {
    state: AtomicU8::new(FREE),
    device: AtomicI32::new(NO_EVENTS),
    before: AtomicUsize::new(0),
    after: AtomicUsize::new(0),
    called_ns: AtomicU64::new(0),
    comm: AtomicUsize::new(0),
    weight: AtomicU32::new(1),
};

static SLOTS: [Slot; SLOT_COUNT] = [EMPTY_SLOT; SLOT_COUNT];
/// Where the next claim starts looking.
static HINT: AtomicUsize = AtomicUsize::new(0);

/// A communicator the library saw made: its pointer, a hash of its unique id (the same in
/// every rank; 0 unknown), this process's rank plus one and the rank count (0 unknown).
struct CommEntry {
    comm: AtomicUsize,
    id: AtomicU64,
    rank_1: AtomicU32,
    size: AtomicU32,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_COMM: CommEntry = CommEntry {
    comm: AtomicUsize::new(0),
    id: AtomicU64::new(0),
    rank_1: AtomicU32::new(0),
    size: AtomicU32::new(0),
};

static COMMS: [CommEntry; COMM_COUNT] = [EMPTY_COMM; COMM_COUNT];

/// The reading thread was started (reset in a forked child).
static STARTED: AtomicBool = AtomicBool::new(false);
/// The process is exiting: the reading thread stops before the runtime tears down.
static EXIT: AtomicBool = AtomicBool::new(false);
/// Held by whoever reads events: the thread, or the exit handler's last reading.
static READING: Mutex<()> = Mutex::new(());

type EventCreateFn = unsafe extern "C" fn(*mut *mut c_void, u32) -> u32;
type EventRecordFn = unsafe extern "C" fn(*mut c_void, Stream) -> u32;
type EventFn = unsafe extern "C" fn(*mut c_void) -> u32;
type ElapsedFn = unsafe extern "C" fn(*mut f32, *mut c_void, *mut c_void) -> u32;
type SetDeviceFn = unsafe extern "C" fn(c_int) -> u32;
type CommIntFn = unsafe extern "C" fn(NcclComm, *mut c_int) -> NcclResult;

static EVENT_CREATE: Real = Real::new(c"cudaEventCreateWithFlags");
static EVENT_RECORD: Real = Real::new(c"cudaEventRecord");
static EVENT_QUERY: Real = Real::new(c"cudaEventQuery");
static EVENT_ELAPSED: Real = Real::new(c"cudaEventElapsedTime");
static EVENT_DESTROY: Real = Real::new(c"cudaEventDestroy");
static SET_DEVICE: Real = Real::new(c"cudaSetDevice");
static COMM_USER_RANK: Real = Real::nccl(c"ncclCommUserRank");
static COMM_COUNT_FN: Real = Real::nccl(c"ncclCommCount");

/// This thread's open group: its depth, whether it is measured (by its first call's index,
/// `sampled`: 0 not measured, else the weight) and the streams its collectives used.
#[derive(Clone, Copy)]
struct Group {
    depth: u32,
    decided: bool,
    weight: u32,
    n: usize,
    streams: [usize; GROUP_STREAMS],
    comms: [usize; GROUP_STREAMS],
}

const NO_GROUP: Group = Group {
    depth: 0,
    decided: false,
    weight: 0,
    n: 0,
    streams: [0; GROUP_STREAMS],
    comms: [0; GROUP_STREAMS],
};

thread_local! {
    static GROUP: Cell<Group> = const { Cell::new(NO_GROUP) };
}

/// Resolves the real NCCL function once, or returns `ncclSystemError` from the hook.
macro_rules! real_nccl {
    ($name:expr, $ty:ty) => {{
        static REAL: Real = Real::nccl($name);
        match REAL.get::<$ty>() {
            Some(f) => f,
            None => return NCCL_SYSTEM_ERROR,
        }
    }};
}

/// The path of every collective hook: counted; measured around the real call unless a group
/// is open on this thread (then its stream is noted for the group's end).
fn collective(comm: NcclComm, stream: Stream, real: impl FnOnce() -> NcclResult) -> NcclResult {
    let errno_in = errno();
    let Some((rt, _reentry)) = enter(errno_in) else {
        return real();
    };
    let c = rt.seg.collectives();
    let index = c.calls.fetch_add(1, Relaxed);
    let weight = sampled(index);
    let in_group = GROUP.try_with(|g| g.get().depth > 0).unwrap_or(false);
    if in_group {
        let noted = GROUP
            .try_with(|g| {
                let mut v = g.get();
                if !v.decided {
                    // The group's first call decides for the group.
                    v.decided = true;
                    v.weight = weight.unwrap_or(0);
                    g.set(v);
                }
                if v.weight == 0 {
                    return true;
                }
                let s = stream as usize;
                if v.streams[..v.n].contains(&s) {
                    return true;
                }
                if v.n == GROUP_STREAMS {
                    return false;
                }
                v.streams[v.n] = s;
                v.comms[v.n] = comm as usize;
                v.n += 1;
                g.set(v);
                true
            })
            .unwrap_or(false);
        if !noted {
            c.unmeasured.fetch_add(1, Relaxed);
        }
        set_errno(errno_in);
        return real();
    }
    let Some(weight) = weight else {
        set_errno(errno_in);
        return real();
    };
    let slot = catch_unwind(AssertUnwindSafe(|| {
        note_comm(comm);
        begin(stream, comm, weight)
    }))
    .ok()
    .flatten();
    if slot.is_none() {
        c.unmeasured.fetch_add(1, Relaxed);
    }
    set_errno(errno_in);
    let result = real();
    let errno_out = errno();
    if let Some(i) = slot {
        let ok =
            catch_unwind(AssertUnwindSafe(|| end(rt, i, stream, result == 0))).unwrap_or(false);
        if !ok && result == 0 {
            c.unmeasured.fetch_add(1, Relaxed);
        }
    }
    set_errno(errno_out);
    result
}

/// Claims a slot and records its "before" event on `stream`; `None` when the stream is
/// capturing a graph (or cannot say), no slot is free, or an event call failed.
fn begin(stream: Stream, comm: NcclComm, weight: u32) -> Option<usize> {
    if crate::hostwait::capturing(stream as u64, false) != Some(false) {
        return None;
    }
    let record = EVENT_RECORD.get::<EventRecordFn>()?;
    let i = claim()?;
    let s = &SLOTS[i];
    let ok = events_for(s, crate::device::current_device())
        // SAFETY: the runtime's `cudaEventRecord(cudaEvent_t, cudaStream_t)` with an event
        // this library made on the current device and the stream the program passes to NCCL.
        .is_some_and(|(before, _)| unsafe { record(before as *mut c_void, stream) } == 0);
    if !ok {
        s.state.store(FREE, Release);
        return None;
    }
    s.called_ns.store(now_ns(), Relaxed);
    s.comm.store(comm as usize, Relaxed);
    s.weight.store(weight, Relaxed);
    Some(i)
}

/// Records slot `i`'s "after" event and hands the slot to the reading thread; gives the slot
/// back when the collective failed or the event could not be recorded. Whether it measures.
fn end(rt: &'static Runtime, i: usize, stream: Stream, succeeded: bool) -> bool {
    let s = &SLOTS[i];
    let record = EVENT_RECORD.get::<EventRecordFn>();
    let ok = succeeded
        && record.is_some_and(|f| {
            // SAFETY: as in `begin`, with the slot's second event.
            unsafe { f(s.after.load(Relaxed) as *mut c_void, stream) == 0 }
        });
    if !ok {
        s.state.store(FREE, Release);
        return false;
    }
    s.state.store(PENDING, Release);
    start_reader(rt);
    true
}

/// A free slot, claimed.
fn claim() -> Option<usize> {
    let start = HINT.fetch_add(1, Relaxed);
    (0..SLOT_COUNT).map(|k| (start + k) % SLOT_COUNT).find(|i| {
        SLOTS[*i]
            .state
            .compare_exchange(FREE, CLAIMED, Acquire, Relaxed)
            .is_ok()
    })
}

/// The slot's two events, made on `device` (remade if the slot's were made on another).
fn events_for(s: &Slot, device: i32) -> Option<(usize, usize)> {
    if s.device.load(Relaxed) == device {
        return Some((s.before.load(Relaxed), s.after.load(Relaxed)));
    }
    let create = EVENT_CREATE.get::<EventCreateFn>()?;
    if s.device.load(Relaxed) != NO_EVENTS {
        if let Some(destroy) = EVENT_DESTROY.get::<EventFn>() {
            // SAFETY: events this library made and no longer uses (the slot is claimed).
            unsafe {
                destroy(s.before.load(Relaxed) as *mut c_void);
                destroy(s.after.load(Relaxed) as *mut c_void);
            }
        }
        s.device.store(NO_EVENTS, Relaxed);
    }
    let (mut a, mut b) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the runtime's `cudaEventCreateWithFlags(cudaEvent_t*, unsigned)` with local
    // out-pointers and flags 0 (cudaEventDefault: timed).
    if unsafe { create(&mut a, 0) } != 0 || unsafe { create(&mut b, 0) } != 0 {
        return None;
    }
    s.before.store(a as usize, Relaxed);
    s.after.store(b as usize, Relaxed);
    s.device.store(device, Relaxed);
    Some((a as usize, b as usize))
}

/// Starts the reading thread once per process image.
fn start_reader(rt: &'static Runtime) {
    if STARTED.load(Relaxed) || STARTED.swap(true, AcqRel) {
        return;
    }
    // The exit handler is registered now, after the CUDA runtime's own (it is initialised by
    // the time a collective is queued): it runs first, while the runtime still works.
    // SAFETY: registers an `extern "C"` function of this library, which stays loaded.
    unsafe { libc::atexit(at_exit) };
    let spawned = std::thread::Builder::new()
        .name("syncspy-nccl".into())
        .spawn(move || read_loop(rt));
    if spawned.is_err() {
        STARTED.store(false, Release);
    }
}

fn read_loop(rt: &'static Runtime) {
    let _reentry = crate::guard::Reentry::enter();
    loop {
        let busy = {
            let Ok(_held) = READING.lock() else {
                return;
            };
            if EXIT.load(Acquire) {
                return;
            }
            read_done(rt)
        };
        // Collectives in flight (or just read: more are coming): read again soon, so that a
        // loop of thousands a second never runs out of slots; otherwise sleep longer.
        let ms = if busy { 2 } else { 50 };
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// Reads every pending slot whose "after" event is done; whether it read some or some are
/// still pending.
fn read_done(rt: &'static Runtime) -> bool {
    let (Some(query), Some(elapsed), Some(set_device)) = (
        EVENT_QUERY.get::<EventFn>(),
        EVENT_ELAPSED.get::<ElapsedFn>(),
        SET_DEVICE.get::<SetDeviceFn>(),
    ) else {
        return false;
    };
    let c = rt.seg.collectives();
    let mut pending = false;
    let mut current = NO_EVENTS;
    for s in &SLOTS {
        if s.state.load(Acquire) != PENDING {
            continue;
        }
        let device = s.device.load(Relaxed);
        if device != current && device >= 0 {
            // SAFETY: the runtime's `cudaSetDevice(int)`: this thread's own current device.
            unsafe { set_device(device) };
            current = device;
        }
        let (before, after) = (
            s.before.load(Relaxed) as *mut c_void,
            s.after.load(Relaxed) as *mut c_void,
        );
        // SAFETY: `cudaEventQuery(cudaEvent_t)` on an event this library made and recorded.
        match unsafe { query(after) } {
            0 => {
                let mut ms = 0f32;
                // SAFETY: `cudaEventElapsedTime(float*, cudaEvent_t, cudaEvent_t)` with a
                // local out-value and the slot's two events, both recorded and done.
                if unsafe { elapsed(&mut ms, before, after) } == 0 {
                    let ns = (f64::from(ms.max(0.0)) * 1e6) as u64;
                    let ns = ns.saturating_mul(u64::from(s.weight.load(Relaxed)));
                    c.add_measured(s.called_ns.load(Relaxed), now_ns(), ns);
                    let (id, rank, size) = comm_of(s.comm.load(Relaxed));
                    c.set_comm(id, rank, size);
                } else {
                    c.unmeasured.fetch_add(1, Relaxed);
                }
                s.state.store(FREE, Release);
                pending = true;
            }
            crate::call::NOT_READY => pending = true,
            _ => {
                c.unmeasured.fetch_add(1, Relaxed);
                s.state.store(FREE, Release);
            }
        }
    }
    pending
}

/// The exit handler: the reading thread stops, and what the GPU finished is read once more.
extern "C" fn at_exit() {
    let _ = catch_unwind(|| {
        let held = READING.lock();
        EXIT.store(true, Release);
        if held.is_ok() {
            if let Some(rt) = crate::init::active() {
                read_done(rt);
            }
        }
    });
}

/// In a forked child: no reading thread, and the parent's events are not this process's.
pub fn after_fork_in_child() {
    STARTED.store(false, Relaxed);
    EXIT.store(false, Relaxed);
    for s in &SLOTS {
        s.state.store(FREE, Relaxed);
        s.device.store(NO_EVENTS, Relaxed);
    }
    GROUP.with(|g| g.set(NO_GROUP));
}

/// FNV-1a of `bytes`, continuing from `h`.
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// Keeps a communicator's identity (a full table keeps what it has).
fn remember(comm: NcclComm, id: u64, rank: Option<c_int>, size: Option<c_int>) {
    if comm.is_null() {
        return;
    }
    let key = comm as usize;
    let entry = COMMS
        .iter()
        .find(|e| e.comm.load(Relaxed) == key)
        .or_else(|| {
            COMMS
                .iter()
                .find(|e| e.comm.compare_exchange(0, key, AcqRel, Relaxed).is_ok())
        });
    let Some(e) = entry else {
        return;
    };
    let as_u32 = |v: Option<c_int>, plus: u32| {
        v.and_then(|v| u32::try_from(v).ok())
            .map_or(0, |v| v.saturating_add(plus))
    };
    if id != 0 {
        e.id.store(id, Relaxed);
    }
    e.rank_1.store(as_u32(rank, 1), Relaxed);
    e.size.store(as_u32(size, 0), Relaxed);
}

/// A communicator not seen made (by a constructor this library does not hook): its rank and
/// size, asked of NCCL on the thread that uses it.
fn note_comm(comm: NcclComm) {
    let key = comm as usize;
    if key == 0 || COMMS.iter().any(|e| e.comm.load(Relaxed) == key) {
        return;
    }
    let ask = |f: &Real| {
        let f = f.get::<CommIntFn>()?;
        let mut v: c_int = -1;
        // SAFETY: `ncclCommUserRank`/`ncclCommCount(const ncclComm_t, int*)` on the
        // communicator the program is using in this very call, with a local out-value.
        (unsafe { f(comm, &mut v) } == 0).then_some(v)
    };
    remember(comm, 0, ask(&COMM_USER_RANK), ask(&COMM_COUNT_FN));
}

/// What the library knows of a communicator: id hash, rank, size.
fn comm_of(comm: usize) -> (u64, Option<u32>, Option<u32>) {
    COMMS
        .iter()
        .find(|e| comm != 0 && e.comm.load(Relaxed) == comm)
        .map_or((0, None, None), |e| {
            (
                e.id.load(Relaxed),
                e.rank_1.load(Relaxed).checked_sub(1),
                Some(e.size.load(Relaxed)).filter(|n| *n != 0),
            )
        })
}

/// After a constructor: remembers the new communicator under `id` (when it succeeded).
fn made(result: NcclResult, comm: *mut NcclComm, id: u64, rank: c_int, nranks: c_int) {
    if result != 0 || comm.is_null() {
        return;
    }
    let errno_in = errno();
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: NCCL wrote the new communicator to the program's out-pointer, which it
        // passed to us non-null.
        let c = unsafe { *comm };
        remember(c, id, Some(rank), Some(nranks));
    }));
    set_errno(errno_in);
}

// ---- The exported entry points (nccl.h's signatures) ----

type GroupFn = unsafe extern "C" fn() -> NcclResult;
type InitRankFn = unsafe extern "C" fn(*mut NcclComm, c_int, NcclUniqueId, c_int) -> NcclResult;
type InitRankConfigFn =
    unsafe extern "C" fn(*mut NcclComm, c_int, NcclUniqueId, c_int, *mut c_void) -> NcclResult;
type SplitFn =
    unsafe extern "C" fn(NcclComm, c_int, c_int, *mut NcclComm, *mut c_void) -> NcclResult;

/// Exports a collective `$name` with nccl.h's arguments `$arg: $ty`, of which `$comm` and
/// `$stream` are the communicator and the stream: it finds the real function of its name and
/// forwards the caller's arguments, unchanged, through `collective`.
macro_rules! export_collective {
    ($($name:ident($($arg:ident: $ty:ty),* $(,)?) on $comm:ident, $stream:ident;)+) => {$(
        /// # Safety
        /// Same contract as NCCL's function of the same name.
        #[cfg_attr(not(test), no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> NcclResult {
            type RealFn = unsafe extern "C" fn($($ty),*) -> NcclResult;
            let f = real_nccl!(
                // SAFETY: a literal NUL-terminated name.
                unsafe { std::ffi::CStr::from_bytes_with_nul_unchecked(
                    concat!(stringify!($name), "\0").as_bytes()
                ) },
                RealFn
            );
            // SAFETY: the real function with the caller's arguments, unchanged.
            collective($comm, $stream, || unsafe { f($($arg),*) })
        }
    )+};
}

export_collective! {
    ncclAllReduce(
        sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int,
        op: c_int, comm: NcclComm, stream: Stream,
    ) on comm, stream;
    ncclBroadcast(
        sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int,
        root: c_int, comm: NcclComm, stream: Stream,
    ) on comm, stream;
    ncclReduce(
        sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int,
        op: c_int, root: c_int, comm: NcclComm, stream: Stream,
    ) on comm, stream;
    ncclAllGather(
        sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: usize, datatype: c_int,
        comm: NcclComm, stream: Stream,
    ) on comm, stream;
    ncclReduceScatter(
        sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: usize, datatype: c_int,
        op: c_int, comm: NcclComm, stream: Stream,
    ) on comm, stream;
    ncclSend(
        sendbuff: *const c_void, count: usize, datatype: c_int, peer: c_int, comm: NcclComm,
        stream: Stream,
    ) on comm, stream;
    ncclRecv(
        recvbuff: *mut c_void, count: usize, datatype: c_int, peer: c_int, comm: NcclComm,
        stream: Stream,
    ) on comm, stream;
}

/// # Safety
/// Same contract as NCCL's function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclGroupStart() -> NcclResult {
    let f = real_nccl!(c"ncclGroupStart", GroupFn);
    // SAFETY: the real function, which takes no arguments.
    let r = unsafe { f() };
    if r == 0 {
        let _ = GROUP.try_with(|g| {
            let mut v = g.get();
            if v.depth == 0 {
                v = NO_GROUP;
            }
            v.depth = v.depth.saturating_add(1);
            g.set(v);
        });
    }
    r
}

/// # Safety
/// Same contract as NCCL's function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclGroupEnd() -> NcclResult {
    let f = real_nccl!(c"ncclGroupEnd", GroupFn);
    let g = GROUP.try_with(|g| g.get()).unwrap_or(NO_GROUP);
    let outermost = g.depth == 1;
    let _ = GROUP.try_with(|c| {
        let mut v = c.get();
        v.depth = v.depth.saturating_sub(1);
        c.set(v);
    });
    let errno_in = errno();
    let entered = if outermost && g.n > 0 && g.weight > 0 {
        enter(errno_in)
    } else {
        None
    };
    let Some((rt, _reentry)) = entered else {
        set_errno(errno_in);
        // SAFETY: the real function, which takes no arguments.
        return unsafe { f() };
    };
    let mut slots = [None; GROUP_STREAMS];
    for (k, slot) in slots.iter_mut().enumerate().take(g.n) {
        *slot = catch_unwind(AssertUnwindSafe(|| {
            note_comm(g.comms[k] as NcclComm);
            begin(g.streams[k] as Stream, g.comms[k] as NcclComm, g.weight)
        }))
        .ok()
        .flatten();
    }
    set_errno(errno_in);
    // SAFETY: the real function, which takes no arguments.
    let result = unsafe { f() };
    let errno_out = errno();
    let c = rt.seg.collectives();
    for (slot, stream) in slots.iter().zip(g.streams).take(g.n) {
        let measured = slot.is_some_and(|i| {
            catch_unwind(AssertUnwindSafe(|| {
                end(rt, i, stream as Stream, result == 0)
            }))
            .unwrap_or(false)
        });
        if !measured && result == 0 {
            c.unmeasured.fetch_add(1, Relaxed);
        }
    }
    set_errno(errno_out);
    result
}

/// # Safety
/// Same contract as NCCL's function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut NcclComm,
    nranks: c_int,
    comm_id: NcclUniqueId,
    rank: c_int,
) -> NcclResult {
    let f = real_nccl!(c"ncclCommInitRank", InitRankFn);
    // SAFETY: the real function with the caller's arguments, unchanged.
    let r = unsafe { f(comm, nranks, comm_id, rank) };
    made(r, comm, fnv(FNV_START, &comm_id.internal), rank, nranks);
    r
}

/// # Safety
/// Same contract as NCCL's function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    comm: *mut NcclComm,
    nranks: c_int,
    comm_id: NcclUniqueId,
    rank: c_int,
    config: *mut c_void,
) -> NcclResult {
    let f = real_nccl!(c"ncclCommInitRankConfig", InitRankConfigFn);
    // SAFETY: the real function with the caller's arguments, unchanged.
    let r = unsafe { f(comm, nranks, comm_id, rank, config) };
    made(r, comm, fnv(FNV_START, &comm_id.internal), rank, nranks);
    r
}

/// # Safety
/// Same contract as NCCL's function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommSplit(
    comm: NcclComm,
    color: c_int,
    key: c_int,
    newcomm: *mut NcclComm,
    config: *mut c_void,
) -> NcclResult {
    let f = real_nccl!(c"ncclCommSplit", SplitFn);
    // SAFETY: the real function with the caller's arguments, unchanged.
    let r = unsafe { f(comm, color, key, newcomm, config) };
    if r == 0 && !newcomm.is_null() {
        let errno_in = errno();
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // The parent's id and the color name the new communicator alike in each of its
            // ranks; its rank and size are asked of NCCL at its first collective.
            let (parent, _, _) = comm_of(comm as usize);
            let id = if parent == 0 {
                0
            } else {
                fnv(parent, &color.to_ne_bytes())
            };
            // SAFETY: NCCL wrote the new communicator (possibly null: not a member) to the
            // program's non-null out-pointer.
            let new = unsafe { *newcomm };
            if id != 0 {
                remember(new, id, None, None);
            }
        }));
        set_errno(errno_in);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_ids_hash_alike_and_apart() {
        let a = NcclUniqueId { internal: [7; 128] };
        let mut b = a;
        b.internal[127] = 8;
        assert_eq!(fnv(FNV_START, &a.internal), fnv(FNV_START, &a.internal));
        assert_ne!(fnv(FNV_START, &a.internal), fnv(FNV_START, &b.internal));
        assert_ne!(fnv(1, &0i32.to_ne_bytes()), fnv(1, &1i32.to_ne_bytes()));
    }

    #[test]
    fn communicators_keep_their_identity_and_unknown_ones_say_so() {
        let comm = 0x5151_0000usize as NcclComm;
        remember(comm, 42, Some(2), Some(4));
        assert_eq!(comm_of(comm as usize), (42, Some(2), Some(4)));
        // Asked again (a later query of rank and size): the id stays.
        remember(comm, 0, Some(2), Some(4));
        assert_eq!(comm_of(comm as usize), (42, Some(2), Some(4)));
        assert_eq!(comm_of(0x6161_0000), (0, None, None));
        assert_eq!(comm_of(0), (0, None, None));
    }

    #[test]
    fn the_first_collectives_are_all_measured_then_one_in_the_period_without_phase() {
        assert!((0..MEASURE_ALL).all(|i| sampled(i) == Some(1)));
        let later: Vec<u64> = (MEASURE_ALL..MEASURE_ALL + 160_000)
            .filter(|i| sampled(*i).is_some())
            .collect();
        assert!((9_000..11_000).contains(&later.len()), "{}", later.len());
        assert!(later
            .iter()
            .all(|i| sampled(*i) == Some(SAMPLE_PERIOD as u32)));
        // A step of 8 collectives: every position in the step is measured about as often.
        for phase in 0..8 {
            let n = later.iter().filter(|i| *i % 8 == phase).count();
            assert!((1_000..1_500).contains(&n), "phase {phase}: {n}");
        }
    }

    #[test]
    fn slots_are_claimed_once_until_given_back() {
        let a = claim().unwrap();
        let b = claim().unwrap();
        assert_ne!(a, b);
        SLOTS[a].state.store(FREE, Release);
        SLOTS[b].state.store(FREE, Release);
    }
}
