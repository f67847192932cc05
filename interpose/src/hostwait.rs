//! Waits that a host function ends (`host_wait`): a Python thread blocked, without the GIL,
//! until the GPU reached a host function queued with `cuLaunchHostFunc` and that function woke
//! it. JAX's `block_until_ready` and `jax.device_get` wait this way: XLA queues a host
//! function behind the step's work, the user's thread waits on a future, and the host function
//! completes the future. No CUDA call stalls for it on any thread, so only this path sees it.
//!
//! **How a wait is told.** When the program queues a host function while Python frames are
//! being attributed, the library queues its own trampoline instead, with a slot that holds the
//! program's function and argument, the stream, the device and the queuing call's native
//! stack (`queue`). When the driver runs the trampoline:
//! 1. before the program's function, the Python thread blocked without the GIL is looked for
//!    (`python::blocked_thread`, the waiter rule: the main thread first) and its kernel state
//!    read (`/proc/self/task/TID/stat`): it must be asleep (`S` or `D`);
//! 2. the program's function runs;
//! 3. after it, the thread is read again: if it is runnable now, or has used CPU time since,
//!    this function woke it, and the wait is recorded on that thread, at its Python line.
//!
//! Step 1 delays the wake it looks for. A host function that leaves the main thread asleep
//! when it returns, time after time (XLA's: it hands the wake to a thread of its own), is
//! looked at after it runs instead (`later`): before it, only the main thread's CPU clock is
//! read (twice: off the CPU, it does not move); after it, the look, valid if the thread is
//! asleep and has not run since (its frames are then the ones it waits with). A look after
//! that finds the thread has run and is awake sends that function back to the look before,
//! the wait counted as a look skipped.
//!
//! A host function that runs while a thread sleeps for another reason (`time.sleep`, a queue)
//! does not wake it: nothing is recorded. Nor for a thread inside a CUDA call that waits (a
//! stream synchronize that a host function's stream work happens to end): that call is timed
//! as its own stall (`stalls`), and would otherwise be counted twice. When several host functions run during one wait,
//! only the one that woke the thread records it.
//!
//! **Its duration** runs from when the thread began to wait to when the function woke it. The
//! start is not observed: it is the thread's last reference point (when it last queued a host
//! function, or last woke from a `host_wait`) plus the CPU time it used since. So time the
//! thread spent off the CPU for other reasons after that point (a sleep, I/O, waiting for a
//! lock) counts as part of the wait; without a reference point the wait starts when its host
//! function was queued.
//!
//! A host function queued on a stream that is capturing a CUDA graph runs at every replay of
//! the graph; it is queued as it is (the stream's capture status is asked of the driver at
//! each queuing), so waits that graph host nodes end are not seen.
//!
//! **Cost.** Queuing: the driver's capture status of the stream, the stack capture of a stall
//! (cached per call site), two clock reads and a slot. Running, for a function looked at
//! after: three reads of the main thread's CPU clock, and, when it has run since the last
//! look, its `/proc` state and the key of its stack (`python::memo`: its pages read with one
//! `process_vm_readv`); a wait at a stack not seen before costs a walk of the blocked
//! thread's frames. All under the waiter reads' budget (5% of the process's wall time).
//! The time is the library's own (`overhead_ns`), outside the 1% budget (`shed::outside`). Slots
//! are fixed (`SLOTS`); when all are taken, the program's function is queued as it is. The
//! driver runs host functions in order on its own thread, which is not a Python thread; the
//! trampoline makes no CUDA call (host functions must not).
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};

use syncspy_abi::record::{Record, FLAG_PER_THREAD, NO_SITE};
use syncspy_abi::{Api, Direction, Kind};

use crate::clock::now_ns;
use crate::errno::{errno, set_errno};
use crate::init::active;
use crate::python::{self, waiter};
use crate::real::Real;
use crate::state::Runtime;

/// A host function as the driver calls it (`CUhostFn`).
pub type HostFn = unsafe extern "C" fn(*mut c_void);

/// Host functions queued and not yet run that the library can follow at once.
pub const SLOTS: usize = 1024;

const FREE: u8 = 0;
const FILLING: u8 = 1;
const QUEUED: u8 = 2;

struct Slot {
    state: AtomicU8,
    func: AtomicUsize,
    data: AtomicUsize,
    queued_ns: AtomicU64,
    stream: AtomicU64,
    site: AtomicU32,
    device: AtomicI32,
    flags: AtomicU8,
}

static PENDING: [Slot; SLOTS] = [const {
    Slot {
        state: AtomicU8::new(FREE),
        func: AtomicUsize::new(0),
        data: AtomicUsize::new(0),
        queued_ns: AtomicU64::new(0),
        stream: AtomicU64::new(0),
        site: AtomicU32::new(NO_SITE),
        device: AtomicI32::new(-1),
        flags: AtomicU8::new(0),
    }
}; SLOTS];

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// What the program asked to queue, as `cuLaunchHostFunc` received it.
pub struct Queued {
    pub stream: u64,
    pub flags: u8,
    pub device: i32,
    pub func: usize,
    pub data: usize,
}

/// Takes a slot for the program's host function and returns the function and argument to
/// queue instead (the trampoline and the slot's number), or `None` to queue the program's
/// own: no Python attribution, no call-site stacks, no function, or no free slot.
pub fn queue(rt: &Runtime, q: Queued) -> Option<(usize, usize)> {
    if q.func == 0 || !rt.cfg.python || !rt.cfg.stacks || !python::supported() {
        return None;
    }
    if capturing(q.stream, q.flags & FLAG_PER_THREAD != 0) != Some(false) {
        return None;
    }
    stalls::arm();
    let t0 = now_ns();
    refs::set(segment(rt), crate::guard::tid(), t0, waiter::cpu_ns());
    let (native, _, _) = crate::stack::capture_site(rt, crate::guard::overhead_weight());
    if native == NO_SITE {
        return None;
    }
    let first = NEXT.fetch_add(1, Relaxed);
    let got = (0..64).map(|k| (first + k) % SLOTS).find(|&i| {
        PENDING[i]
            .state
            .compare_exchange(FREE, FILLING, Acquire, Relaxed)
            .is_ok()
    });
    let i = got?;
    let s = &PENDING[i];
    s.func.store(q.func, Relaxed);
    s.data.store(q.data, Relaxed);
    s.queued_ns.store(t0, Relaxed);
    s.stream.store(q.stream, Relaxed);
    s.site.store(native, Relaxed);
    s.device.store(q.device, Relaxed);
    s.flags.store(q.flags, Relaxed);
    s.state.store(QUEUED, Release);
    // The queuing (the thread's CPU clock, the call site, a slot) is the host-wait
    // machinery's time, like the trampoline's looks. Counted here, once a slot is taken: a
    // call that queues nothing pays no clock read (one that found no site or no free slot
    // leaves its stack look uncounted).
    crate::shed::own_host_wait(&rt.seg, now_ns().saturating_sub(t0));
    Some((trampoline as *const () as usize, i + 1))
}

/// Whether `stream` is capturing a CUDA graph (`None`: the driver could not say). A host
/// function captured into a graph runs at every replay, and a slot serves one run: a captured
/// one (or one whose stream cannot be asked) is queued as the program's own.
pub(crate) fn capturing(stream: u64, per_thread: bool) -> Option<bool> {
    type IsCapturing = unsafe extern "C" fn(*mut c_void, *mut u32) -> u32;
    static PLAIN: Real = Real::driver(c"cuStreamIsCapturing");
    static PER_THREAD: Real = Real::driver(c"cuStreamIsCapturing_ptsz");
    let f = if per_thread {
        PER_THREAD.get::<IsCapturing>()
    } else {
        PLAIN.get::<IsCapturing>()
    }?;
    let mut status = u32::MAX;
    // SAFETY: the driver's `cuStreamIsCapturing(CUstream, CUstreamCaptureStatus*)`, with the
    // stream the program is queuing on and a local out-value (the enum is a C int).
    let rc = unsafe { f(stream as *mut c_void, &mut status) };
    // CU_STREAM_CAPTURE_STATUS_NONE is 0.
    (rc == 0).then_some(status != 0)
}

/// Gives back the slot `queue` returned when the driver refused the host function.
pub fn unqueue(arg: usize) {
    if let Some(s) = arg.checked_sub(1).and_then(|i| PENDING.get(i)) {
        s.state.store(FREE, Release);
    }
}

/// What `before` saw of the blocked thread.
#[derive(Clone, Copy)]
struct Seen {
    site: u32,
    tid: u32,
    /// When it was seen asleep, and its CPU time then.
    at_ns: u64,
    cpu_ns: u64,
}

/// The function the driver runs in place of the program's (`queue`); `arg` is the slot's
/// number.
unsafe extern "C" fn trampoline(arg: *mut c_void) {
    let Some(s) = (arg as usize).checked_sub(1).and_then(|i| PENDING.get(i)) else {
        return;
    };
    if s.state.load(Acquire) != QUEUED {
        // Not ours to run (cannot happen: the driver runs each queued function once).
        return;
    }
    let func = s.func.load(Relaxed);
    let data = s.data.load(Relaxed);
    let queued_ns = s.queued_ns.load(Relaxed);
    let stream = s.stream.load(Relaxed);
    let native = s.site.load(Relaxed);
    let device = s.device.load(Relaxed);
    let flags = s.flags.load(Relaxed);
    s.state.store(FREE, Release);
    let errno_in = errno();
    let rt = active();
    let look0 = now_ns();
    let plan = rt.map_or(Plan::Nothing, |rt| {
        catch_unwind(AssertUnwindSafe(|| plan(rt, func, native))).unwrap_or(Plan::Nothing)
    });
    let look_ns = now_ns().saturating_sub(look0);
    if matches!(plan, Plan::Seen(_)) {
        let _ = catch_unwind(watch::supersede);
    }
    set_errno(errno_in);
    // SAFETY: `func` is the non-null host function the program queued with `data`, to be run
    // once on this thread: the driver's contract, which it is being kept now.
    unsafe { std::mem::transmute::<usize, HostFn>(func)(data as *mut c_void) };
    let Some(rt) = rt else {
        return;
    };
    let after0 = now_ns();
    // What the look found; `read_asleep`: the look after the function, which has just read
    // the thread asleep, not run since.
    let (seen, read_asleep) = match plan {
        Plan::Nothing => (None, false),
        Plan::Seen(seen) => (Some(seen), false),
        Plan::Later(off_cpu) => {
            let errno_out = errno();
            let seen = catch_unwind(AssertUnwindSafe(|| look_after(rt, func, native, off_cpu)))
                .ok()
                .flatten();
            if seen.is_some() {
                let _ = catch_unwind(watch::supersede);
            }
            set_errno(errno_out);
            (seen, true)
        }
    };
    if let Some(seen) = seen {
        let errno_out = errno();
        let _ = catch_unwind(AssertUnwindSafe(|| {
            after(
                rt,
                seen,
                read_asleep,
                Record {
                    kind: Kind::HostWait,
                    api: Api::CuLaunchHostFunc,
                    direction: Direction::None,
                    flags,
                    device,
                    start_ns: queued_ns,
                    duration_ns: 0,
                    bytes: 0,
                    stream,
                    tid: seen.tid,
                    site: seen.site,
                    result: 0,
                    polls: 0,
                },
                func,
            )
        }));
        set_errno(errno_out);
    }
    // The look's time is the library's own (before the program's function, it delays the
    // wake it looks for): in `overhead_ns`, under the looks' budget rather than the 1%.
    crate::shed::own_host_wait(&rt.seg, look_ns + now_ns().saturating_sub(after0));
}

/// The address of `rt`, which names its segment: runtimes are never freed (`init`).
fn segment(rt: &Runtime) -> usize {
    rt as *const Runtime as usize
}

/// What the trampoline does around the program's function.
enum Plan {
    /// No thread to look at.
    Nothing,
    /// Looked before the function (step 1).
    Seen(Seen),
    /// The main thread was off the CPU (when, and its CPU time then): look after the
    /// function.
    Later((u64, u64)),
}

/// Before the program's function: the look (step 1), or, for a function that leaves the
/// waiting thread asleep when it returns (`later::wanted`), only the main thread's CPU clock
/// (`main_off_cpu`), the look coming after the function (`look_after`), off the wake's path.
fn plan(rt: &Runtime, func: usize, native: u32) -> Plan {
    if native != NO_SITE && rt.cfg.python && later::wanted(func) {
        return main_off_cpu().map_or(Plan::Nothing, Plan::Later);
    }
    before(rt, native).map_or(Plan::Nothing, Plan::Seen)
}

/// Thread `tid` now: when (the monotonic clock), its scheduler state and its CPU time, the
/// reads spent from the looks' budget.
fn thread_now(tid: u32) -> (u64, Option<u8>, Option<u64>) {
    let at_ns = now_ns();
    let state = thread_state(tid);
    let cpu_ns = thread_cpu_ns(tid);
    waiter::Budget::spend(now_ns().saturating_sub(at_ns));
    (at_ns, state, cpu_ns)
}

/// Whether a thread state says it is asleep (`S` or `D`).
fn asleep(state: Option<u8>) -> bool {
    matches!(state, Some(b'S' | b'D'))
}

/// The main thread's (wall time, CPU time) if it is off the CPU now: two reads of its CPU
/// clock that agree (the kernel adds a running thread's time up to the moment it is read, so
/// its clock moves between two reads). This is on the wake's path, before the program's
/// function: its state is not read here (the `/proc` stat read costs about ten clock reads:
/// 1.9 us against 0.2 us on the dev machine). A thread off the CPU because it was preempted
/// rather than asleep is told apart after the function (`look_after`).
fn main_off_cpu() -> Option<(u64, u64)> {
    let tid = crate::guard::pid();
    let at_ns = now_ns();
    let (c0, c1) = (thread_cpu_ns(tid), thread_cpu_ns(tid));
    waiter::Budget::spend(now_ns().saturating_sub(at_ns));
    (c0 == c1).then_some((at_ns, c0?))
}

/// The main thread's CPU time, the read spent from the looks' budget.
fn main_cpu() -> Option<u64> {
    waiter::Budget::timed(|| thread_cpu_ns(crate::guard::pid()))
}

/// The main thread, seen asleep at `at_ns` with CPU time `cpu_ns`, waiting at `site`; `None`
/// while it is inside a waiting CUDA call (timed as its own stall, `stalls`).
fn main_seen(site: u32, (at_ns, cpu_ns): (u64, u64)) -> Option<Seen> {
    let tid = crate::guard::pid();
    (!stalls::contains(tid)).then_some(Seen {
        site,
        tid,
        at_ns,
        cpu_ns,
    })
}

thread_local! {
    /// The last look after a function that found the main thread waiting: the runtime (the
    /// segment its sites belong to), the thread's CPU time then, the native site looked from,
    /// and the site found.
    static LAST_LOOK: std::cell::Cell<(usize, u64, u32, u32)> =
        const { std::cell::Cell::new((0, 0, NO_SITE, NO_SITE)) };
}

/// Step 1 after the program's function, for `Plan::Later`: the look at the main thread,
/// valid if it is asleep now and did not run while its frames were read. The reads, cheapest
/// first:
/// - its CPU clock: unchanged since it was seen off the CPU before the function, and the last
///   look found it waiting since then (`LAST_LOOK`), it waits at the same stack: no more;
/// - its state: runnable or running, and it ran during the function, the function may have
///   woken it too soon for a look after it: this function goes back to the look before
///   (`later::raced`), and the wait is counted as a look skipped. Runnable without having
///   run (preempted since before the function, or woken a moment ago): nothing;
/// - asleep: the look. If it ran during the function and sleeps again (it was preempted, not
///   waiting, when the function began), the look starts from now.
fn look_after(rt: &Runtime, func: usize, native: u32, (at_ns, cpu_ns): (u64, u64)) -> Option<Seen> {
    let tid = crate::guard::pid();
    let raced = || {
        later::raced(func);
        rt.seg.cost().looks_skipped.fetch_add(1, Relaxed);
        None
    };
    let segment = segment(rt);
    if main_cpu() == Some(cpu_ns) {
        let last = LAST_LOOK.try_with(|l| l.get()).ok();
        if let Some((seg, cpu, nat, site)) = last {
            if (seg, cpu, nat) == (segment, cpu_ns, native) {
                return main_seen(site, (at_ns, cpu_ns));
            }
        }
    }
    let (now, state, cpu) = thread_now(tid);
    let cpu = cpu?;
    if !asleep(state) {
        return if cpu == cpu_ns { None } else { raced() };
    }
    let base = if cpu == cpu_ns {
        (at_ns, cpu_ns)
    } else {
        (now, cpu)
    };
    let blocked = python::blocked_thread(rt, native, waiter::Purpose::HostWait);
    let still = main_cpu() == Some(base.1);
    match blocked {
        Some(b) if b.tid == tid && still => {
            let _ = LAST_LOOK.try_with(|l| l.set((segment, base.1, native, b.site)));
            main_seen(b.site, base)
        }
        // No Python thread waits: the main thread sleeps for another reason.
        None if still => None,
        // It ran while it was read (the function woke it), or another thread was found.
        _ => raced(),
    }
}

/// Step 1 (see the module): the Python thread blocked right now, if it is asleep.
fn before(rt: &Runtime, native: u32) -> Option<Seen> {
    let blocked = python::blocked_thread(rt, native, waiter::Purpose::HostWait)?;
    if stalls::contains(blocked.tid) {
        return None;
    }
    let (at_ns, state, cpu_ns) = thread_now(blocked.tid);
    asleep(state).then_some(Seen {
        site: blocked.site,
        tid: blocked.tid,
        at_ns,
        cpu_ns: cpu_ns?,
    })
}

/// Step 3: whether the program's function woke the thread `seen`. Woken already (runnable,
/// or it has run: the function signalled it itself): recorded now. Still asleep: the wake may
/// come from a thread the function signalled (XLA hands its host functions' work to a thread
/// of its own, which completes the future), so the thread is watched for a short while
/// (`watch`). `read_asleep`: the look after the function has just read it asleep (nothing to
/// read again).
fn after(rt: &Runtime, seen: Seen, read_asleep: bool, rec: Record, func: usize) {
    let (end_ns, woken) = if read_asleep {
        (now_ns(), None)
    } else {
        let (end_ns, state, cpu_now) = thread_now(seen.tid);
        let Some(cpu_now) = cpu_now else {
            return;
        };
        let woken = cpu_now > seen.cpu_ns || state == Some(b'R');
        (end_ns, woken.then_some(cpu_now))
    };
    if seen.tid == crate::guard::pid() {
        later::learn(func, woken.is_some());
    }
    if let Some(cpu_now) = woken {
        record(rt, &seen, rec, end_ns, cpu_now);
    } else {
        watch::submit(watch::Watched {
            seen,
            rec,
            ran_ns: end_ns,
        });
    }
}

/// Records the wait of `seen`, woken at `end_ns`, with its thread's CPU time `cpu_now` then;
/// that moment is the thread's next reference point.
fn record(rt: &Runtime, seen: &Seen, mut rec: Record, end_ns: u64, cpu_now: u64) {
    let reference = refs::get(segment(rt), seen.tid);
    // One wait per stretch of sleep: the host function that woke it directly and the watch
    // of an earlier one may both see the wake.
    if !refs::claim_stretch(seen.tid, seen.cpu_ns) {
        return;
    }
    rec.start_ns = start_of_wait(reference, seen, rec.start_ns);
    rec.duration_ns = end_ns.saturating_sub(rec.start_ns);
    refs::set(segment(rt), seen.tid, end_ns, cpu_now);
    rt.write(&rec, crate::shed::level(&rt.seg));
}

/// When the wait of `seen` began: its thread's reference point `(wall, cpu)` moved on by the
/// CPU time used since, never after it was seen asleep; `queued_ns` without a usable one.
fn start_of_wait(reference: Option<(u64, u64)>, seen: &Seen, queued_ns: u64) -> u64 {
    match reference {
        Some((wall, cpu)) if wall <= seen.at_ns && cpu <= seen.cpu_ns => {
            wall.saturating_add(seen.cpu_ns - cpu).min(seen.at_ns)
        }
        _ => queued_ns.min(seen.at_ns),
    }
}

/// The scheduler state letter of thread `tid` of this process (`R`, `S`, `D`, ...), read from
/// `/proc/self/task/TID/stat`; `None` if it cannot be read or names another thread. The main
/// thread's file (the usual waiter) stays open: one `pread` a look instead of three calls.
fn thread_state(tid: u32) -> Option<u8> {
    let mut buf = [0u8; 256];
    if tid == crate::guard::pid() {
        if let Some(state) = main_state(tid, &mut buf) {
            return Some(state);
        }
    }
    let fd = open_stat(tid)?;
    // SAFETY: `fd` was just opened here; `buf` is a local of the length given.
    let got = unsafe {
        let got = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        got
    };
    parse_state(&buf[..usize::try_from(got).ok()?], tid)
}

/// The main thread's state through its kept file. The descriptor is never closed by the
/// library: if the program closed it (and the number now names a file of its own), the read
/// fails or names another thread, and a new one is opened; the old number is left alone.
fn main_state(tid: u32, buf: &mut [u8; 256]) -> Option<u8> {
    static FD: AtomicI32 = AtomicI32::new(-1);
    for _ in 0..2 {
        let mut fd = FD.load(Relaxed);
        if fd < 0 {
            fd = open_stat(tid)?;
            if FD.compare_exchange(-1, fd, AcqRel, Relaxed).is_err() {
                // SAFETY: `fd` was just opened here and not published.
                unsafe { libc::close(fd) };
                fd = FD.load(Relaxed);
            }
        }
        // SAFETY: a read at offset 0 into a local buffer; a descriptor that is no longer the
        // library's fails or reads other content, which `parse_state` refuses.
        let got = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if let Some(state) = usize::try_from(got)
            .ok()
            .and_then(|n| parse_state(&buf[..n], tid))
        {
            return Some(state);
        }
        let _ = FD.compare_exchange(fd, -1, AcqRel, Relaxed);
    }
    None
}

/// Opens `/proc/self/task/TID/stat` read-only.
fn open_stat(tid: u32) -> Option<c_int> {
    let mut path = [0u8; 48];
    let n = write_path(&mut path, tid)?;
    // SAFETY: `path` is NUL-terminated at `n`.
    let fd = unsafe { libc::open(path[..=n].as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    (fd >= 0).then_some(fd)
}

/// `/proc/self/task/TID/stat` into `out`, NUL-terminated; the path's length.
fn write_path(out: &mut [u8; 48], tid: u32) -> Option<usize> {
    use std::io::Write;
    let mut w = &mut out[..];
    write!(w, "/proc/self/task/{tid}/stat\0").ok()?;
    let left = w.len();
    Some(out.len() - left - 1)
}

/// The state letter of a `stat` line `PID (COMM) STATE ...` whose PID is `tid` (COMM may hold
/// spaces and parentheses: the state follows the last `)`).
fn parse_state(line: &[u8], tid: u32) -> Option<u8> {
    let open = line.iter().position(|&b| b == b' ')?;
    if std::str::from_utf8(&line[..open])
        .ok()?
        .parse::<u32>()
        .ok()?
        != tid
    {
        return None;
    }
    let close = line.iter().rposition(|&b| b == b')')?;
    match line.get(close + 1..close + 3)? {
        [b' ', state] => Some(*state),
        _ => None,
    }
}

use crate::clock::cpu_of as thread_cpu_ns;

/// Which host functions are looked at after they run (`Plan::Later`). The look before the
/// program's function delays the wake it looks for (tens of microseconds: JAX's steps queue
/// three host functions each). A function that leaves the main thread asleep when it returns
/// (XLA's hands the wake to a thread of its own) can be looked at after it: the thread's frames
/// are the same as long as it has not run, which the look checks. Each function (by address)
/// starts with the look before; after `FIRST_STREAK` returns in a row that left the main thread
/// asleep, it is looked at after. A look after that finds the thread has run already goes
/// back to the look before, and the streak it needs is four times longer (at most
/// `MAX_STREAK`): a function that wakes the thread itself loses few waits.
mod later {
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};

    /// Functions followed (direct-mapped by address); one that collides starts over.
    const WAYS: usize = 16;
    pub const FIRST_STREAK: u32 = 32;
    pub const MAX_STREAK: u32 = 1 << 20;

    struct Entry {
        func: AtomicUsize,
        streak: AtomicU32,
        need: AtomicU32,
        after: AtomicBool,
    }

    static ENTRIES: [Entry; WAYS] = [const {
        Entry {
            func: AtomicUsize::new(0),
            streak: AtomicU32::new(0),
            need: AtomicU32::new(FIRST_STREAK),
            after: AtomicBool::new(false),
        }
    }; WAYS];

    /// Where `func` is followed.
    fn way(func: usize) -> &'static Entry {
        &ENTRIES[(func >> 4) % WAYS]
    }

    /// The entry of `func` (taken over from another function if need be).
    fn entry(func: usize) -> &'static Entry {
        let e = way(func);
        if e.func.load(Relaxed) != func {
            e.func.store(func, Relaxed);
            e.streak.store(0, Relaxed);
            e.need.store(FIRST_STREAK, Relaxed);
            e.after.store(false, Relaxed);
        }
        e
    }

    /// Whether `func` is looked at after it runs.
    pub fn wanted(func: usize) -> bool {
        let e = way(func);
        e.func.load(Relaxed) == func && e.after.load(Relaxed)
    }

    /// After `func` ran while the main thread waited: whether it had woken by then.
    pub fn learn(func: usize, woken: bool) {
        let e = entry(func);
        if woken {
            e.streak.store(0, Relaxed);
        } else if e.streak.fetch_add(1, Relaxed) + 1 >= e.need.load(Relaxed) {
            e.after.store(true, Relaxed);
        }
    }

    /// A look after `func` found the thread had run: back to the look before.
    pub fn raced(func: usize) {
        let e = entry(func);
        e.after.store(false, Relaxed);
        e.streak.store(0, Relaxed);
        let need = e.need.load(Relaxed);
        e.need
            .store(need.saturating_mul(4).min(MAX_STREAK), Relaxed);
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_function_that_leaves_the_thread_asleep_is_looked_at_after_and_a_race_sends_it_back() {
            let f = 0x7000_1230;
            assert!(!wanted(f));
            for _ in 0..FIRST_STREAK - 1 {
                learn(f, false);
            }
            assert!(!wanted(f), "one short of the streak");
            // A wake by the function itself starts the streak over.
            learn(f, true);
            for _ in 0..FIRST_STREAK - 1 {
                learn(f, false);
            }
            assert!(!wanted(f));
            learn(f, false);
            assert!(wanted(f));
            raced(f);
            assert!(!wanted(f));
            for _ in 0..FIRST_STREAK {
                learn(f, false);
            }
            assert!(
                !wanted(f),
                "the streak needed is four times longer after a race"
            );
            for _ in FIRST_STREAK..4 * FIRST_STREAK {
                learn(f, false);
            }
            assert!(wanted(f));
            // Another function is followed apart.
            assert!(!wanted(f + 0x1000));
        }
    }
}

/// Host functions that ran while a Python thread slept and did not wake it themselves: a
/// thread of the library's (started at the first) watches the sleeping thread's CPU clock for
/// `WINDOW`; if it runs in that time, and no later host function found a thread asleep while
/// it still slept (`supersede`), that host function ended its wait, which is recorded then, ending when the thread woke (the
/// watch's reading less the CPU time it used since). Not woken in time: nothing is recorded
/// (a sleep, a queue, another thread's work ended it). The watcher sleeps while nothing is
/// watched, reads clocks every 20 us while an entry is younger than 200 us and every 200 us
/// after that. Its whole CPU time is the library's own (`overhead_ns`), and the time of its
/// reads counts against the waiter reads' budget. It keeps the scheduling policy it was
/// started with: at `SCHED_IDLE` (tried) a busy machine can hold its polls back past the
/// window, and a relayed wait went unrecorded once on the 2-core CI machine under load.
mod watch {
    use std::sync::{Mutex, TryLockError};
    use std::thread::Thread;
    use std::time::Duration;

    use super::*;

    /// How long after a host function ran its thread may wake for it to count as the wake.
    pub const WINDOW_NS: u64 = 2_000_000;
    /// Looks every `POLL` while an entry is younger than `YOUNG_NS` (most wakes come then:
    /// XLA's thread wakes the waiter within tens of microseconds), else every `LATE_POLL`.
    const POLL: Duration = Duration::from_micros(20);
    const LATE_POLL: Duration = Duration::from_micros(200);
    const YOUNG_NS: u64 = 200_000;
    /// Watched host functions at most; more are dropped (nothing recorded).
    const MAX: usize = 64;

    pub struct Watched {
        pub seen: Seen,
        pub rec: Record,
        /// When the program's function returned.
        pub ran_ns: u64,
    }

    static WATCHED: Mutex<Vec<Watched>> = Mutex::new(Vec::new());
    /// Set while the watcher pauses for `POLL` only: a new entry needs no wake.
    static SHORT: AtomicBool = AtomicBool::new(false);
    /// The watcher thread and the `guard::FORK_GEN` it was started in (a fork child has none).
    static WATCHER: Mutex<Option<(u32, Thread)>> = Mutex::new(None);

    pub fn submit(w: Watched) {
        // The watcher holds the list for a copy at a time: a few tries get it, never a wait.
        for _ in 0..1000 {
            match WATCHED.try_lock() {
                Ok(mut v) => {
                    if v.len() < MAX {
                        v.push(w);
                        drop(v);
                        // Polling every `POLL`, it sees the entry soon enough: no system call.
                        if !SHORT.load(Relaxed) {
                            wake();
                        }
                    }
                    return;
                }
                Err(TryLockError::WouldBlock) => std::hint::spin_loop(),
                Err(TryLockError::Poisoned(_)) => return,
            }
        }
    }

    /// A host function is about to run and found a thread asleep: it, not an earlier one, is
    /// what may wake a watched thread that has not woken yet (this one's own look decides for
    /// the thread it found, and which function woke another cannot be told), so those are no
    /// longer watched. A host function that found no one asleep leaves them (a thread about to
    /// wake from an earlier one's work). One clock read per watched thread; nothing if the
    /// list is busy.
    pub fn supersede() {
        let Ok(mut v) = WATCHED.try_lock() else {
            return;
        };
        v.retain(|w| thread_cpu_ns(w.seen.tid).is_some_and(|c| c > w.seen.cpu_ns));
    }

    /// Unparks the watcher, starting it first in this process if needed.
    pub fn wake() {
        let gen = crate::guard::FORK_GEN.load(Relaxed);
        let Ok(mut w) = WATCHER.try_lock() else {
            // Another thread is waking or starting it.
            return;
        };
        match &*w {
            Some((g, t)) if *g == gen => t.unpark(),
            _ => {
                let spawned = std::thread::Builder::new()
                    .name("syncspy-hostwait".into())
                    .spawn(run);
                if let Ok(h) = spawned {
                    *w = Some((gen, h.thread().clone()));
                }
            }
        }
    }

    fn run() {
        // SAFETY: sets this thread's own timer slack (1 us): its short sleeps stay short.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64, 0u64, 0u64, 0u64) };
        // This thread's CPU time when it was last spent.
        let mut own = waiter::cpu_ns();
        loop {
            // All of this thread's time (its clock reads, its sleeps and wakes) is the
            // library's own; the time of its reads is the looks' budget's.
            let cpu = waiter::cpu_ns();
            if let Some(rt) = active() {
                crate::shed::own_host_wait(&rt.seg, cpu.saturating_sub(own));
            }
            own = cpu;
            let youngest = WATCHED
                .lock()
                .map(|v| v.iter().map(|w| w.ran_ns).max())
                .unwrap_or(None);
            let Some(youngest) = youngest else {
                std::thread::park();
                continue;
            };
            let young = now_ns().saturating_sub(youngest) < YOUNG_NS;
            // A new entry's unpark ends a late pause early.
            SHORT.store(young, Relaxed);
            std::thread::park_timeout(if young { POLL } else { LATE_POLL });
            SHORT.store(false, Relaxed);
            let _ = waiter::Budget::timed(|| catch_unwind(AssertUnwindSafe(step)));
        }
    }

    /// One look at every watched thread. The list is held only to copy from and to it, never
    /// while clocks are read: a host function queuing an entry does not find it busy for long.
    fn step() {
        let now = now_ns();
        let tids: Vec<u32> = match WATCHED.lock() {
            Ok(v) => {
                let mut t: Vec<u32> = v.iter().map(|w| w.seen.tid).collect();
                t.sort_unstable();
                t.dedup();
                t
            }
            Err(_) => return,
        };
        let clocks: Vec<(u32, Option<u64>)> =
            tids.into_iter().map(|t| (t, thread_cpu_ns(t))).collect();
        let Ok(mut v) = WATCHED.lock() else {
            return;
        };
        let mut woke: Vec<(Watched, u64)> = Vec::new();
        let mut i = 0;
        while i < v.len() {
            let Some(&(_, cpu)) = clocks.iter().find(|(t, _)| *t == v[i].seen.tid) else {
                // Added since the clocks were read: the next look.
                i += 1;
                continue;
            };
            match cpu {
                Some(c) if c > v[i].seen.cpu_ns => woke.push((v.swap_remove(i), c)),
                Some(_) if now.saturating_sub(v[i].ran_ns) <= WINDOW_NS => i += 1,
                _ => {
                    v.swap_remove(i);
                }
            }
        }
        drop(v);
        let Some(rt) = active() else {
            return;
        };
        for (k, (w, cpu)) in woke.iter().enumerate() {
            // Of host functions that ran while the thread slept the same stretch, the latest.
            let later = woke.iter().enumerate().any(|(j, (o, _))| {
                j != k
                    && o.seen.tid == w.seen.tid
                    && o.seen.cpu_ns == w.seen.cpu_ns
                    && (o.ran_ns, j) > (w.ran_ns, k)
            });
            if later {
                continue;
            }
            let end = now.saturating_sub(cpu - w.seen.cpu_ns).max(w.ran_ns);
            record(rt, &w.seen, w.rec, end, *cpu);
        }
    }
}

/// The threads inside a CUDA call that waits (a stall being timed), once a host function has
/// been queued in the process: such a thread's wait is that call's, never a `host_wait`. A
/// stall marks its thread in a small table for the call's duration (a compare-and-swap and a
/// store); before any host function, nothing is marked.
pub mod stalls {
    use super::*;

    const N: usize = 1024;
    const PROBES: usize = 4;
    static ARMED: AtomicBool = AtomicBool::new(false);
    static IN: [AtomicU32; N] = [const { AtomicU32::new(0) }; N];

    /// From now on stalls mark their threads.
    pub fn arm() {
        if !ARMED.load(Relaxed) {
            ARMED.store(true, Relaxed);
        }
    }

    fn home(tid: u32) -> usize {
        (tid.wrapping_mul(0x9e37_79b1) >> 22) as usize % N
    }

    /// Held while a stall of thread `tid` runs; unmarks it when dropped.
    pub struct Mark(Option<usize>);

    /// Marks the calling thread as inside a waiting call, if host functions are in use (until
    /// then: one relaxed load, not even the thread id).
    #[inline(always)]
    pub fn enter() -> Mark {
        if !ARMED.load(Relaxed) {
            return Mark(None);
        }
        enter_armed(crate::guard::tid())
    }

    #[inline(never)]
    fn enter_armed(tid: u32) -> Mark {
        if tid == 0 {
            return Mark(None);
        }
        let h = home(tid);
        Mark(
            (0..PROBES)
                .map(|k| (h + k) % N)
                .find(|&j| IN[j].compare_exchange(0, tid, Acquire, Relaxed).is_ok()),
        )
    }

    impl Drop for Mark {
        #[inline(always)]
        fn drop(&mut self) {
            if let Some(j) = self.0 {
                IN[j].store(0, Release);
            }
        }
    }

    /// Whether thread `tid` is inside a waiting call now.
    pub fn contains(tid: u32) -> bool {
        let h = home(tid);
        (0..PROBES).any(|k| IN[(h + k) % N].load(Acquire) == tid)
    }
}

/// Each thread's reference point for the start of its next wait: `(wall ns, CPU ns)` when it
/// last queued a host function or woke from a `host_wait`, under the same segment (between
/// two attaches the thread is not followed: a point from before would stretch the first wait
/// after over the whole time between). A small table mapped by thread id; a thread whose
/// entry another took has none (its wait starts at the queuing). Entries are read and written
/// under a flag that is tried, never waited for.
mod refs {
    use super::*;

    const N: usize = 64;

    struct Ref {
        busy: AtomicBool,
        tid: AtomicU32,
        /// The segment (`segment`) the point was taken under.
        seg: AtomicUsize,
        wall: AtomicU64,
        cpu: AtomicU64,
        /// The CPU time at which the thread was last seen asleep in a wait that was recorded:
        /// a stretch of sleep ends one wait only.
        recorded: AtomicU64,
    }

    static REFS: [Ref; N] = [const {
        Ref {
            busy: AtomicBool::new(false),
            tid: AtomicU32::new(0),
            seg: AtomicUsize::new(0),
            wall: AtomicU64::new(0),
            cpu: AtomicU64::new(0),
            recorded: AtomicU64::new(u64::MAX),
        }
    }; N];

    fn entry(tid: u32) -> &'static Ref {
        &REFS[(tid.wrapping_mul(0x9e37_79b1) >> 26) as usize % N]
    }

    fn with<R>(tid: u32, f: impl FnOnce(&Ref) -> R) -> Option<R> {
        let r = entry(tid);
        r.busy.compare_exchange(false, true, AcqRel, Relaxed).ok()?;
        let out = f(r);
        r.busy.store(false, Release);
        Some(out)
    }

    pub fn set(seg: usize, tid: u32, wall: u64, cpu: u64) {
        with(tid, |r| {
            if r.tid.swap(tid, Relaxed) != tid {
                r.recorded.store(u64::MAX, Relaxed);
            }
            r.seg.store(seg, Relaxed);
            r.wall.store(wall, Relaxed);
            r.cpu.store(cpu, Relaxed);
        });
    }

    /// Claims the recording of the wait of `tid` asleep at CPU time `cpu`: false if that
    /// stretch of sleep was recorded already (or, rarely, the entry stayed busy).
    pub fn claim_stretch(tid: u32, cpu: u64) -> bool {
        for _ in 0..64 {
            let claimed = with(tid, |r| {
                if r.tid.load(Relaxed) != tid {
                    r.tid.store(tid, Relaxed);
                    r.wall.store(0, Relaxed);
                    r.cpu.store(u64::MAX, Relaxed);
                } else if r.recorded.load(Relaxed) == cpu {
                    return false;
                }
                r.recorded.store(cpu, Relaxed);
                true
            });
            if let Some(c) = claimed {
                return c;
            }
            std::hint::spin_loop();
        }
        false
    }

    pub fn get(seg: usize, tid: u32) -> Option<(u64, u64)> {
        with(tid, |r| {
            (r.tid.load(Relaxed) == tid && r.seg.load(Relaxed) == seg)
                .then(|| (r.wall.load(Relaxed), r.cpu.load(Relaxed)))
        })
        .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_follows_the_last_parenthesis_and_the_pid_must_match() {
        assert_eq!(parse_state(b"42 (python3) S 1 42 42 0", 42), Some(b'S'));
        assert_eq!(parse_state(b"42 (a) (b) R 1", 42), Some(b'R'));
        assert_eq!(parse_state(b"43 (python3) S 1", 42), None);
        assert_eq!(parse_state(b"42 (python3", 42), None);
        assert_eq!(parse_state(b"", 42), None);
    }

    #[test]
    fn this_thread_reads_as_running_and_its_clock_moves() {
        let tid = crate::guard::tid();
        assert_eq!(thread_state(tid), Some(b'R'));
        let a = thread_cpu_ns(tid).unwrap();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_add(i));
        }
        assert!(thread_cpu_ns(tid).unwrap() > a, "{x}");
        assert_eq!(thread_state(u32::MAX >> 1), None);
    }

    #[test]
    fn a_sleeping_thread_reads_as_asleep() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            tx.send(crate::guard::tid()).unwrap();
            done_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        // It blocks in `recv` within moments; poll for it rather than assume.
        let mut state = None;
        for _ in 0..2000 {
            state = thread_state(tid);
            if state == Some(b'S') {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(state, Some(b'S'));
        done_tx.send(()).unwrap();
        h.join().unwrap();
    }

    #[test]
    fn the_start_is_the_reference_moved_on_by_the_cpu_time_used() {
        let seen = Seen {
            site: 1,
            tid: 1,
            at_ns: 10_000,
            cpu_ns: 700,
        };
        // Queued at 1,000 with 500 ns of CPU; 200 ns more of CPU, then asleep.
        assert_eq!(start_of_wait(Some((1_000, 500)), &seen, 900), 1_200);
        // No reference, or one from after the thread was seen: from the queuing.
        assert_eq!(start_of_wait(None, &seen, 900), 900);
        assert_eq!(start_of_wait(Some((11_000, 500)), &seen, 900), 900);
        // Never after the moment it was seen asleep.
        assert_eq!(start_of_wait(Some((9_990, 0)), &seen, 900), 10_000);
        assert_eq!(start_of_wait(None, &seen, 20_000), 10_000);
    }

    #[test]
    fn a_thread_is_marked_only_while_its_stall_runs_once_armed() {
        let tid = crate::guard::tid();
        stalls::arm();
        {
            let _m = stalls::enter();
            assert!(stalls::contains(tid));
            assert!(!stalls::contains(tid.wrapping_add(1)));
        }
        assert!(!stalls::contains(tid));
    }

    #[test]
    fn a_stretch_of_sleep_is_recorded_once() {
        assert!(refs::claim_stretch(777_101, 5));
        assert!(!refs::claim_stretch(777_101, 5));
        assert!(refs::claim_stretch(777_101, 6));
    }

    #[test]
    fn a_reference_is_per_thread() {
        refs::set(1, 777_001, 5, 6);
        assert_eq!(refs::get(1, 777_001), Some((5, 6)));
        assert_eq!(refs::get(1, 777_002), None);
        // A reference point from an earlier segment (before a detach) is none.
        assert_eq!(refs::get(2, 777_001), None);
    }
}
