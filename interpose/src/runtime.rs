//! The library's global state: configuration, this process's segment, and the two paths a
//! hooked call takes (counted non-stall call, or timed and recorded stall).
//!
//! State machine (one relaxed-cost Acquire load on the fast path):
//! `UNINIT` → (first hooked call wins a CAS) `INITIALIZING` → `ACTIVE` | `DISABLED`.
//! The segment is created lazily on the first CUDA call, so processes that never use CUDA
//! (shells, compilers started by the job) leave no segment behind. The fork child goes back
//! to `UNINIT` and creates its own segment on its first call.
//!
//! Attach (see `attach/`) adds `DORMANT`: hooks pass through, no segment. A library preloaded
//! with `SYNCSPY_DORMANT=1`, or injected by `syncspy attach`, waits there until armed
//! (`DORMANT` → `UNINIT`, then as above) and goes back there when disarmed.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};

use syncspy_abi::cost::{SHED_RECORDS, SHED_STACKS};
use syncspy_abi::record::NO_SITE;
use syncspy_abi::{Api, Kind, Record, SegmentParams, SegmentWriter};

use crate::call::{Call, NOT_READY};
use crate::clock::now_ns;
use crate::config::{off_by_env_cached, Config};
use crate::errno::{errno, set_errno};
use crate::guard::{self, Reentry};
use crate::real::Real;
use crate::stack;

const UNINIT: u8 = 0;
const INITIALIZING: u8 = 1;
const ACTIVE: u8 = 2;
const DISABLED: u8 = 3;
const DORMANT: u8 = 4;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());
/// Calls forwarded unrecorded because another thread's initialisation did not finish in
/// time (see `wait_for_init`): added to the segment's drop counter once it exists.
static MISSED: AtomicU64 = AtomicU64::new(0);
/// When the current initialisation began (`now_ns`); waits for it end a fixed time later.
static INIT_BEGAN: AtomicU64 = AtomicU64::new(0);
/// How long, from its start, other threads wait for an initialisation. It normally takes
/// about 2 ms (most of it reserving the segment's memory); a machine with more runnable
/// threads than cores can deschedule the initialising thread for tens of ms, and a missed
/// call makes the totals inexact. The wait ends at one point in time for every thread, so
/// an initialisation that is truly stuck (on a lock a waiting thread holds) costs the
/// process this much once, not once per call.
const INIT_PATIENCE_NS: u64 = 1_000_000_000;

pub struct Runtime {
    pub seg: SegmentWriter,
    pub cfg: Config,
    /// Runtime address range of libsyncspy itself: its frames are cut from stacks.
    pub own: (u64, u64),
    /// `dlpi_adds` when the module map was last brought up to date.
    pub modules_adds: AtomicU64,
    pub refreshing: AtomicBool,
}

/// Leaves the reason a segment could not be created where `syncspy run` looks for it
/// (`SYNCSPY_FAILED_DIR`, set by the run): one file per process, best effort.
fn note_failure(pid: u32, start: u64, reason: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let Some(dir) = std::env::var_os("SYNCSPY_FAILED_DIR").filter(|d| !d.is_empty()) else {
        return;
    };
    let path = PathBuf::from(dir).join(format!("{pid}-{start}"));
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        let _ = writeln!(f, "{}", reason.replace('\n', " "));
    }
}

impl Runtime {
    /// The runtime if recording is active; initialises on first use.
    #[inline(always)]
    pub fn active() -> Option<&'static Runtime> {
        match STATE.load(Ordering::Acquire) {
            // SAFETY: RUNTIME is set before STATE becomes ACTIVE (Release) and never freed.
            ACTIVE => Some(unsafe { &*RUNTIME.load(Ordering::Relaxed) }),
            UNINIT => Runtime::init(),
            INITIALIZING => Runtime::wait_for_init(),
            // Armed by this very call: it is recorded.
            DORMANT if crate::attach::dormant_poll() => Runtime::active_after_arm(),
            DORMANT => None,
            _ => None,
        }
    }

    #[cold]
    #[inline(never)]
    fn active_after_arm() -> Option<&'static Runtime> {
        match STATE.load(Ordering::Acquire) {
            // SAFETY: as in `active`.
            ACTIVE => Some(unsafe { &*RUNTIME.load(Ordering::Relaxed) }),
            _ => None,
        }
    }

    /// Another thread is creating the segment (about 2 ms). Waiting for it keeps the totals
    /// exact when many threads make their first CUDA call at once. The wait is bounded (see
    /// `INIT_PATIENCE_NS`): if the initialising thread is itself stuck (say, on a loader lock
    /// this thread holds), the call goes on unrecorded and is counted as dropped.
    #[cold]
    #[inline(never)]
    fn wait_for_init() -> Option<&'static Runtime> {
        let own_start = now_ns();
        loop {
            // Zero until the initialising thread has stored its start (a moment after it won
            // the state): until then, this thread's own start stands in.
            let began = INIT_BEGAN.load(Ordering::Acquire);
            let deadline = if began == 0 { own_start } else { began } + INIT_PATIENCE_NS;
            match STATE.load(Ordering::Acquire) {
                // SAFETY: as in `active`.
                ACTIVE => return Some(unsafe { &*RUNTIME.load(Ordering::Relaxed) }),
                INITIALIZING if now_ns() < deadline => std::thread::yield_now(),
                _ => return None,
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn init() -> Option<&'static Runtime> {
        // Several threads can meet UNINIT at once (their first CUDA calls): the one that
        // loses the race waits for the winner like any later caller, or its call is missed.
        match STATE.compare_exchange(UNINIT, INITIALIZING, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {}
            Err(INITIALIZING) => return Runtime::wait_for_init(),
            // SAFETY: as in `active`.
            Err(ACTIVE) => return Some(unsafe { &*RUNTIME.load(Ordering::Relaxed) }),
            Err(_) => return None,
        }
        let t0 = now_ns();
        INIT_BEGAN.store(t0, Ordering::Release);
        let rt = catch_unwind(Runtime::create).ok().flatten();
        match rt {
            Some(rt) => {
                let rt: &'static Runtime = Box::leak(Box::new(rt));
                let live = rt.seg.live();
                live.events_dropped
                    .fetch_add(MISSED.swap(0, Ordering::Relaxed), Ordering::Relaxed);
                live.overhead_ns
                    .fetch_add(now_ns().saturating_sub(t0), Ordering::Relaxed);
                RUNTIME.store(rt as *const Runtime as *mut Runtime, Ordering::Relaxed);
                // A disarm that came meanwhile (it waits for INITIALIZING to end) wins.
                let _ = STATE.compare_exchange(
                    INITIALIZING,
                    ACTIVE,
                    Ordering::Release,
                    Ordering::Relaxed,
                );
                crate::attach::on_runtime_created();
                // GPU activity: CUPTI started here (this call pays its loading, counted as
                // syncspy's overhead), then a thread of its own.
                let g0 = now_ns();
                let _ = catch_unwind(|| crate::gpu::start(&rt.seg, rt.cfg.gpu));
                live.overhead_ns
                    .fetch_add(now_ns().saturating_sub(g0), Ordering::Relaxed);
                Some(rt)
            }
            None => {
                let _ = STATE.compare_exchange(
                    INITIALIZING,
                    DISABLED,
                    Ordering::Release,
                    Ordering::Relaxed,
                );
                None
            }
        }
    }

    fn create() -> Option<Runtime> {
        if off_by_env_cached() {
            return None;
        }
        let cfg = Config::from_env();
        // SAFETY: getpid cannot fail.
        let pid = unsafe { libc::getpid() } as u32;
        let start = syncspy_abi::process_start_ticks(pid).unwrap_or(0);
        let mut params = SegmentParams::new(pid, start);
        params.ring_capacity = cfg.ring;
        params.site_capacity = cfg.sites;
        params.session = cfg.session;
        params.cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
        // The launcher's environment (torchrun, Slurm, MPI): which job this process is a
        // rank of. Read like the settings above, once; nothing in it can fail.
        params.job =
            syncspy_abi::job::JobIdent::from_lookup(&|name| std::env::var(name).ok(), cfg.session);
        if cfg.python {
            params.python_code_capacity = crate::python::probe();
        }
        // Where this process lives, for readers in other PID and mount namespaces.
        params.origin = syncspy_abi::origin::Origin::of_this_process();
        // Make room first: segments of ended processes that nobody reads any more (after
        // their linger), and the folder's size cap. Errors only mean nothing was reclaimed.
        let reclaimed = syncspy_abi::lifecycle::reclaim(
            &cfg.dir,
            syncspy_abi::lifecycle::Policy::from_env(),
            &|_| false,
        );
        // Sized for its folder: never the job's shared memory (a container's /dev/shm is
        // 64 MiB, shared with its DataLoader workers and NCCL).
        if let Ok(room) = syncspy_abi::lifecycle::Room::of(
            &cfg.dir,
            reclaimed.as_ref().map_or(0, |r| r.bytes_left),
        ) {
            match syncspy_abi::lifecycle::fit(&params, room) {
                Ok(p) => params = p,
                Err(why) => {
                    eprintln!("syncspy: not recording this process: {why}");
                    note_failure(pid, start, &why);
                    return None;
                }
            }
        }
        let seg = match SegmentWriter::create(&cfg.dir, &params) {
            Ok(s) => s,
            Err(e) => {
                eprintln!(
                    "syncspy: not recording this process: cannot create its segment: {e} \
                     (SYNCSPY_DIR, default /dev/shm, must be writable and have room for \
                     about {} MiB; SYNCSPY_RING sets most of it)",
                    (cfg.ring as u64 * 64 + cfg.sites as u64 * 512 + (1 << 20)) >> 20
                );
                note_failure(pid, start, &e.to_string());
                return None;
            }
        };
        if cfg.python {
            crate::python::publish(&seg);
        }
        seg.cost()
            .budget_ppm
            .store(cfg.budget_ppm, Ordering::Relaxed);
        // Site ids cached by threads belong to the previous segment, if any (a re-attach).
        guard::FORK_GEN.fetch_add(1, Ordering::Relaxed);
        let own = stack::own_range();
        let rt = Runtime {
            seg,
            cfg,
            own,
            modules_adds: AtomicU64::new(u64::MAX),
            refreshing: AtomicBool::new(false),
        };
        stack::refresh_modules(&rt);
        Some(rt)
    }

    /// Counts a call that did not stall.
    #[inline]
    fn count(&self, call: &Call) {
        self.seg.live().calls[call.api as usize].add_untimed(call.bytes);
    }

    /// Writes one stall event: call site, device, record, totals, overhead.
    #[inline(never)]
    fn emit(&self, kind: Kind, call: &Call, t0: u64, t1: u64, result: u32, polls: u32) {
        let duration = t1.saturating_sub(t0);
        let weight = guard::overhead_weight();
        let shed = crate::shed::level(&self.seg);
        let stacks = self.cfg.stacks && duration >= self.cfg.stack_min_ns;
        let (site, truncated, unwound) = if stacks && shed < SHED_STACKS {
            stack::capture_site(self, weight)
        } else {
            if stacks {
                self.seg.cost().stacks_shed.fetch_add(1, Ordering::Relaxed);
            }
            (NO_SITE, false, false)
        };
        // Two Python lines over one native stack are two sites.
        let site = if self.cfg.python && shed < SHED_STACKS {
            crate::python::site(self, site)
        } else {
            site
        };
        let rec = Record {
            kind,
            api: call.api,
            direction: call.direction,
            flags: call.flags
                | if truncated {
                    syncspy_abi::record::FLAG_STACK_TRUNCATED
                } else {
                    0
                },
            device: current_device(),
            start_ns: t0,
            duration_ns: duration,
            bytes: call.bytes,
            stream: call.stream,
            tid: guard::tid(),
            site,
            result,
            polls,
        };
        self.write(&rec, shed);
        // Sampled (see `guard::overhead_weight`): a third clock read on every event would
        // be a fifth of its cost. An unwind's cost is always timed, once.
        if let Some(w) = if unwound { Some(1) } else { weight } {
            let ns = now_ns().saturating_sub(t1).saturating_mul(w);
            self.seg.live().overhead_ns.fetch_add(ns, Ordering::Relaxed);
            if unwound {
                crate::shed::one_time(ns);
            }
        }
        crate::shed::check(&self.seg, t1);
    }

    /// Writes `rec` to the ring and the totals, or to the totals alone when records are shed
    /// (`shed` is the level read for this event).
    pub(crate) fn write(&self, rec: &Record, shed: u32) {
        if shed >= SHED_RECORDS {
            self.seg.count(rec);
            self.seg.cost().records_shed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.seg.record(rec);
        }
    }
}

pub(crate) static GET_DEVICE: Real = Real::new(c"cudaGetDevice");
/// The driver's `cuCtxGetDevice`, for programs with no runtime to ask (a statically linked
/// runtime, the driver API alone).
static CTX_GET_DEVICE: Real = Real::driver(c"cuCtxGetDevice");

pub(crate) fn current_device() -> i32 {
    type GetDevice = unsafe extern "C" fn(*mut i32) -> u32;
    let Some(f) = GET_DEVICE
        .get::<GetDevice>()
        .or_else(|| CTX_GET_DEVICE.get::<GetDevice>())
    else {
        return -1;
    };
    let mut d = -1;
    // SAFETY: `f` is the runtime's cudaGetDevice or the driver's cuCtxGetDevice (both resolved
    // with this signature: `CUdevice` is an `int`), whose only requirement is a valid `int`
    // out-pointer: `d` is a local.
    if unsafe { f(&mut d) } == 0 {
        d
    } else {
        -1
    }
}

/// What every hook does first: the runtime, when recording and not re-entered from the
/// library's own work; `None` tells the hook to forward the call, with errno as it came.
/// A call made while the library initialises is counted as missed.
#[inline(always)]
pub(crate) fn enter(errno_in: i32) -> Option<(&'static Runtime, Reentry)> {
    let Some(rt) = Runtime::active() else {
        if STATE.load(Ordering::Relaxed) == INITIALIZING {
            MISSED.fetch_add(1, Ordering::Relaxed);
        }
        set_errno(errno_in);
        return None;
    };
    Some((rt, Reentry::enter()?))
}

/// The one path every hook takes. `describe` classifies the call (only when recording);
/// `real` performs it. Non-stalling calls are counted and forwarded untimed; stalls are
/// timed and recorded. Panics in the library's own work disable recording and never reach
/// the application; errno is preserved across the library's work.
#[inline(always)]
pub fn hook(describe: impl FnOnce() -> Call, real: impl FnOnce() -> u32) -> u32 {
    // The library's own work (initialisation, pointer queries) must not leave errno changed.
    let errno_in = errno();
    let Some((rt, _reentry)) = enter(errno_in) else {
        return real();
    };
    let described = catch_unwind(AssertUnwindSafe(describe));
    set_errno(errno_in);
    let Ok(call) = described else {
        disable();
        return real();
    };
    let Some(kind) = call.kind else {
        rt.count(&call);
        let result = real();
        first_return();
        return result;
    };
    let t0 = now_ns();
    // With a polling run open, the thread's counters as the stall starts (`end_poll_run`).
    let before = poll::open().then(poll::Counters::now);
    let mark = crate::hostwait::stalls::enter();
    let result = real();
    drop(mark);
    let t1 = now_ns();
    first_return();
    let errno_out = errno();
    let recorded = catch_unwind(AssertUnwindSafe(|| {
        // A wait of its own ends this thread's polling run, if one is open: its time is
        // the run's up to here, not this stall's too.
        if let Some(c) = before {
            rt.end_poll_run(t0, c);
        }
        rt.emit(kind, &call, t0, t1, result, 0)
    }));
    if recorded.is_err() {
        disable();
    }
    set_errno(errno_out);
    result
}

/// The path of the query hooks (`cudaStreamQuery`, `cudaEventQuery` and their driver forms).
/// A query never waits: it is counted as a call that did not stall, like any. A run of
/// queries of one stream or event on one thread that return not-ready, up to the query of
/// that object that returns anything else, is one `poll_wait` (see `poll`). The usual query
/// (ready, no run open on the thread) costs one more branch and a thread-local read than
/// a counted call.
#[inline(always)]
pub fn hook_query(api: Api, object: u64, flags: u8, real: impl FnOnce() -> u32) -> u32 {
    let errno_in = errno();
    let Some((rt, _reentry)) = enter(errno_in) else {
        return real();
    };
    set_errno(errno_in);
    rt.seg.live().calls[api as usize].add_untimed(0);
    // While a run is open, what happens inside every query counts as asking (`poll::ASKING`).
    let entered = poll::open().then(|| (now_ns(), poll::thread_vcsw()));
    let result = real();
    first_return();
    if result == NOT_READY || entered.is_some() {
        let errno_out = errno();
        if catch_unwind(AssertUnwindSafe(|| {
            rt.poll_step(api, object, flags, result, entered)
        }))
        .is_err()
        {
            disable();
        }
        set_errno(errno_out);
    }
    result
}

/// The path of `cuLaunchHostFunc`: counted as a call that does not wait; while Python frames
/// are attributed, the program's host function is queued behind the library's trampoline,
/// which records the `host_wait` it ends (`hostwait`). `real` queues the function and
/// argument it is given.
#[inline(always)]
pub fn hook_host_func(
    api: Api,
    stream: u64,
    flags: u8,
    func: usize,
    data: usize,
    real: impl FnOnce(usize, usize) -> u32,
) -> u32 {
    let errno_in = errno();
    let Some((rt, _reentry)) = enter(errno_in) else {
        return real(func, data);
    };
    rt.seg.live().calls[api as usize].add_untimed(0);
    let wrapped = catch_unwind(AssertUnwindSafe(|| {
        crate::hostwait::queue(
            rt,
            crate::hostwait::Queued {
                stream,
                flags,
                device: current_device(),
                func,
                data,
            },
        )
    }))
    .ok()
    .flatten();
    set_errno(errno_in);
    let result = match wrapped {
        Some((trampoline, slot)) => {
            let r = real(trampoline, slot);
            if r != 0 {
                crate::hostwait::unqueue(slot);
            }
            r
        }
        None => real(func, data),
    };
    first_return();
    result
}

/// This thread's polling run (`hook_query`): at most one open at a time.
mod poll {
    use std::cell::Cell;
    use syncspy_abi::Api;

    /// Time outside the queries between two answers of a run: more than this, asleep, and the
    /// thread was checking between them, not waiting (`slept`). NCCL's watchdog sleeps 100 ms
    /// between two `cudaEventQuery`s, a heartbeat or progress bar longer. A spinning loop asks
    /// again within microseconds; a Python loop that loses the GIL to another thread between
    /// two asks, within one switch interval (5 ms).
    pub const MAX_GAP_NS: u64 = 10_000_000;
    /// A run whose time outside the queries is at most this was back to back, whatever the
    /// thread did between them (`spun`).
    pub const SHORT_AWAY_NS: u64 = 2_000_000;

    pub use crate::clock::thread_cpu_ns;

    /// This thread's voluntary context switches (it blocked: a sleep, a condition variable, a
    /// lock), 0 if unreadable. A thread only preempted (a spinner on a loaded machine) makes
    /// none.
    pub fn thread_vcsw() -> u64 {
        // SAFETY: `rusage` is plain data; zeroed is a valid value to be overwritten.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid, writable rusage for the call's duration.
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
            return 0;
        }
        ru.ru_nvcsw as u64
    }

    /// The thread's clocks at one moment.
    #[derive(Clone, Copy, Default)]
    pub struct Counters {
        pub cpu_ns: u64,
        pub vcsw: u64,
        /// `ASKING` and `ASKING_VCSW` then.
        pub asking_ns: u64,
        pub asking_vcsw: u64,
    }

    impl Counters {
        pub fn now() -> Counters {
            Counters {
                cpu_ns: thread_cpu_ns(),
                vcsw: thread_vcsw(),
                asking_ns: ASKING.try_with(Cell::get).unwrap_or(0),
                asking_vcsw: ASKING_VCSW.try_with(Cell::get).unwrap_or(0),
            }
        }
    }

    /// What the thread did away from the queries, between two moments.
    #[derive(Clone, Copy, Default)]
    pub struct Away {
        pub ns: u64,
        pub cpu_ns: u64,
        /// Voluntary switches outside the queries: the thread blocked on something else.
        pub vcsw: u64,
    }

    impl Away {
        pub fn add(self, o: Away) -> Away {
            Away {
                ns: self.ns.saturating_add(o.ns),
                cpu_ns: self.cpu_ns.saturating_add(o.cpu_ns),
                vcsw: self.vcsw.saturating_add(o.vcsw),
            }
        }
    }

    #[derive(Clone, Copy)]
    pub struct Run {
        /// When the run's first query returned not-ready (`now_ns`); 0: no run open.
        pub start_ns: u64,
        /// When its latest not-ready query returned, and the thread's counters then.
        pub last_ns: u64,
        pub last: Counters,
        /// Since the run opened, up to its latest answer.
        pub away: Away,
        /// The stream or event queried.
        pub object: u64,
        /// Not-ready queries so far.
        pub polls: u32,
        pub api: Api,
        pub flags: u8,
    }

    pub const NONE: Run = Run {
        start_ns: 0,
        last_ns: 0,
        last: Counters {
            cpu_ns: 0,
            vcsw: 0,
            asking_ns: 0,
            asking_vcsw: 0,
        },
        away: Away {
            ns: 0,
            cpu_ns: 0,
            vcsw: 0,
        },
        object: 0,
        polls: 0,
        api: Api::CudaStreamQuery,
        flags: 0,
    };

    thread_local! {
        pub static RUN: Cell<Run> = const { Cell::new(NONE) };
        /// Time this thread spent inside query calls made while a run was open (any object),
        /// and its voluntary switches there: asking, wherever the driver kept it (a query may
        /// wait on a lock).
        pub static ASKING: Cell<u64> = const { Cell::new(0) };
        pub static ASKING_VCSW: Cell<u64> = const { Cell::new(0) };
    }

    /// Whether a run is open on this thread (false during thread teardown).
    #[inline(always)]
    pub fn open() -> bool {
        RUN.try_with(|c| c.get().start_ns != 0).unwrap_or(false)
    }

    /// Since `run`'s latest answer, up to `end_ns` with the thread's counters `now`.
    pub fn away_since(run: &Run, end_ns: u64, now: &Counters) -> Away {
        let wall = end_ns.saturating_sub(run.last_ns);
        let inside = now.asking_ns.saturating_sub(run.last.asking_ns);
        let vcsw = now.vcsw.saturating_sub(run.last.vcsw);
        let inside_vcsw = now.asking_vcsw.saturating_sub(run.last.asking_vcsw);
        Away {
            ns: wall.saturating_sub(inside),
            cpu_ns: now.cpu_ns.saturating_sub(run.last.cpu_ns),
            vcsw: vcsw.saturating_sub(inside_vcsw),
        }
    }

    /// Whether the thread went to sleep: it blocked outside the queries and spent less than an
    /// eighth of its time away on the CPU. A spinner that was only preempted (a loaded
    /// machine) blocked nowhere; one that loses the GIL blocks but stays on the CPU for more.
    fn asleep(a: &Away) -> bool {
        a.vcsw > 0 && a.cpu_ns < a.ns / 8
    }

    /// Whether the thread slept between two answers: more than `MAX_GAP_NS` away, asleep.
    pub fn slept(a: &Away) -> bool {
        a.ns > MAX_GAP_NS && asleep(a)
    }

    /// Whether the thread kept asking over the whole run: it was away only briefly, or was
    /// not asleep while away. A thread that asks at each wake-up of a condition variable
    /// (NCCL's watchdog is also woken by each new collective, so its checks may come a few
    /// milliseconds apart) sleeps through nearly all of it.
    pub fn spun(run: &Run) -> bool {
        run.away.ns <= SHORT_AWAY_NS || !asleep(&run.away)
    }
}

impl Runtime {
    /// A query returned not-ready, or one returned while this thread has a run open
    /// (`entered`: when that query was entered and the thread's voluntary switches then;
    /// `None` if no run was open then).
    ///
    /// Rules: the first not-ready query opens a run on its object (stream or event, under its
    /// API), timed from its return. Further not-ready queries of that object are its polls.
    /// The next query of that object that returns anything else (ready, or an error) ends it
    /// and is recorded as one `poll_wait` from the run's start to that return, with the
    /// number of not-ready polls and that query's result. Queries of other objects meanwhile
    /// neither join nor end it (a loop over several streams waits for all of them: the run
    /// is the wait for the first one found pending; the next not-ready one opens the next
    /// run), and calls that did not stall do not end it. A stall recorded meanwhile on the
    /// thread ends it at that stall's start (`end_poll_run`). A run still open when its thread
    /// or process ends is not recorded.
    ///
    /// Only a thread that keeps asking waits. What happens inside any query call counts as
    /// asking; the rest is the thread's time away. When it slept since the run's latest
    /// not-ready answer (`poll::slept`: more than 10 ms away, blocked outside the queries and
    /// nearly all of it off the CPU, like NCCL's watchdog between two `cudaEventQuery`s), it
    /// was checking: the run ends at that answer, recorded only if it had at least two and
    /// spun; this query starts afresh (a new run if it is not-ready, nothing otherwise). A
    /// run over which the thread was away asleep for most of more than 2 ms (`poll::spun`:
    /// checks at each wake-up of a condition variable, a few milliseconds apart) is no wait
    /// either, however it ends.
    #[cold]
    #[inline(never)]
    fn poll_step(
        &self,
        api: Api,
        object: u64,
        flags: u8,
        result: u32,
        entered: Option<(u64, u64)>,
    ) {
        let Ok(run) = poll::RUN.try_with(std::cell::Cell::get) else {
            return;
        };
        let now = now_ns().max(1);
        let vcsw = poll::thread_vcsw();
        if let Some((entered_ns, entered_vcsw)) = entered {
            let _ = poll::ASKING.try_with(|a| a.set(a.get() + now.saturating_sub(entered_ns)));
            let _ =
                poll::ASKING_VCSW.try_with(|a| a.set(a.get() + vcsw.saturating_sub(entered_vcsw)));
        }
        let counters = poll::Counters {
            cpu_ns: poll::thread_cpu_ns(),
            vcsw,
            asking_ns: poll::ASKING.try_with(std::cell::Cell::get).unwrap_or(0),
            asking_vcsw: poll::ASKING_VCSW
                .try_with(std::cell::Cell::get)
                .unwrap_or(0),
        };
        let open = poll::Run {
            start_ns: now,
            last_ns: now,
            last: counters,
            polls: 1,
            object,
            api,
            flags,
            ..poll::NONE
        };
        if run.start_ns == 0 {
            // Only a not-ready result gets here without an open run.
            poll::RUN.set(open);
            return;
        }
        if run.api != api || run.object != object {
            return;
        }
        let away = poll::away_since(&run, now, &counters);
        if poll::slept(&away) {
            poll::RUN.set(if result == NOT_READY {
                open
            } else {
                poll::NONE
            });
            self.emit_given_up(run);
            return;
        }
        let run = poll::Run {
            away: run.away.add(away),
            ..run
        };
        if result == NOT_READY {
            poll::RUN.set(poll::Run {
                polls: run.polls.saturating_add(1),
                last_ns: now,
                last: counters,
                ..run
            });
            return;
        }
        poll::RUN.set(poll::NONE);
        if poll::spun(&run) {
            self.emit_poll(run, now, result);
        }
    }

    /// Ends this thread's open polling run at `end_ns` (a stall's start, when the thread's
    /// counters were `at`), as a `poll_wait` that did not see the work done (result
    /// not-ready); a run whose thread slept since its latest answer (`poll::slept`) ends at
    /// that answer instead, and one that did not keep asking (`poll::spun`) is not recorded.
    #[cold]
    #[inline(never)]
    fn end_poll_run(&self, end_ns: u64, at: poll::Counters) {
        let Ok(run) = poll::RUN.try_with(|c| c.replace(poll::NONE)) else {
            return;
        };
        if run.start_ns == 0 {
            return;
        }
        let away = poll::away_since(&run, end_ns, &at);
        if poll::slept(&away) {
            self.emit_given_up(run);
            return;
        }
        let run = poll::Run {
            away: run.away.add(away),
            ..run
        };
        if poll::spun(&run) {
            self.emit_poll(run, end_ns.max(run.start_ns), NOT_READY);
        }
    }

    /// A run its thread stopped asking in: a `poll_wait` up to its latest not-ready answer
    /// when it had several and spun between them (a spin that gave up), nothing for checks.
    fn emit_given_up(&self, run: poll::Run) {
        if run.polls >= 2 && poll::spun(&run) {
            self.emit_poll(run, run.last_ns, NOT_READY);
        }
    }

    fn emit_poll(&self, run: poll::Run, end_ns: u64, result: u32) {
        let is_stream = matches!(
            run.api,
            Api::CudaStreamQuery | Api::CudaStreamQueryPtsz | Api::CuStreamQuery
        );
        let call = Call {
            stream: if is_stream { run.object } else { 0 },
            flags: run.flags,
            ..Call::new(Kind::PollWait, run.api)
        };
        self.emit(
            Kind::PollWait,
            &call,
            run.start_ns,
            end_ns,
            result,
            run.polls,
        );
    }
}

/// Set once a hooked call of this process has returned from the real function.
static RETURNED: AtomicBool = AtomicBool::new(false);

/// After the real function: the first time, the CUDA runtime has initialised (and registered
/// its teardown at exit), so the GPU part's exit barrier is registered now, to run before it.
#[inline]
fn first_return() {
    if !RETURNED.load(Ordering::Relaxed) {
        first_return_slow();
    }
}

#[cold]
fn first_return_slow() {
    if !RETURNED.swap(true, Ordering::AcqRel) {
        let e = errno();
        let _ = catch_unwind(crate::gpu::register_exit_quiesce);
        set_errno(e);
    }
}

#[cold]
fn disable() {
    STATE.store(DISABLED, Ordering::Release);
}

/// Puts the library in `DORMANT` (hooks pass through) from any state but `INITIALIZING`,
/// which it waits out (tens of microseconds). The runtime in use stays allocated: a thread
/// may still be inside a hook with it.
pub(crate) fn go_dormant() {
    loop {
        let s = STATE.load(Ordering::Acquire);
        if s == INITIALIZING {
            std::thread::yield_now();
            continue;
        }
        if STATE
            .compare_exchange(s, DORMANT, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// `DORMANT` (or `DISABLED` after a failed start) → `UNINIT`: the next hooked call creates a
/// fresh segment with the current configuration. False if recording is already on.
pub(crate) fn arm() -> bool {
    // `arm` runs under the attach lock, so only a hooked call's initialisation can move the
    // state meanwhile, and it cannot start from DORMANT or DISABLED.
    if !matches!(STATE.load(Ordering::Acquire), DORMANT | DISABLED) {
        return false;
    }
    // The next initialisation stores its own start; waiters must not use the last one's
    // (cleared before the state allows one to begin).
    INIT_BEGAN.store(0, Ordering::Release);
    for from in [DORMANT, DISABLED] {
        if STATE
            .compare_exchange(from, UNINIT, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return true;
        }
    }
    false
}

/// The file of the segment in use, if any.
pub(crate) fn segment_path() -> Option<PathBuf> {
    if STATE.load(Ordering::Acquire) != ACTIVE {
        return None;
    }
    // SAFETY: as in `Runtime::active`.
    let rt = unsafe { &*RUNTIME.load(Ordering::Relaxed) };
    Some(rt.seg.path().to_path_buf())
}

/// CUDA calls that reached the hooks while recording into the segment in use: every recorded
/// event (`apis`) and every counted call that did not stall (`calls`). 0 without a segment.
pub(crate) fn calls_seen() -> u64 {
    if STATE.load(Ordering::Acquire) != ACTIVE {
        return 0;
    }
    // SAFETY: as in `Runtime::active`.
    let rt = unsafe { &*RUNTIME.load(Ordering::Relaxed) };
    let live = rt.seg.live();
    live.apis
        .iter()
        .chain(live.calls.iter())
        .map(|t| t.count.load(Ordering::Relaxed))
        .fold(0u64, u64::wrapping_add)
}

/// Creates the segment now rather than at the next hooked call (attach: the process shows
/// up in the reader at once).
pub(crate) fn start_now() -> bool {
    Runtime::active().is_some()
}

/// Registers the fork and exit handlers when the library is loaded, before any thread can
/// be inside the first CUDA call: a fork during initialisation must still reset the child.
/// Handlers survive fork, so this runs once per process image; each handler consults the
/// current state when it runs.
#[used]
#[link_section = ".init_array"]
static INSTALL_PROCESS_HANDLERS: extern "C" fn() = install_process_handlers;

extern "C" fn install_process_handlers() {
    if crate::attach::dormant_by_env() {
        STATE.store(DORMANT, Ordering::Release);
    }
    // SAFETY: both functions only store the pointers of `extern "C"` functions of this
    // library, which stays loaded for the life of the process (it is preloaded), and a null
    // argument that `at_exit` ignores.
    unsafe {
        libc::pthread_atfork(None, None, Some(after_fork_in_child));
        on_exit(at_exit, std::ptr::null_mut());
    }
}

extern "C" {
    /// glibc's `on_exit`: like `atexit`, with the exit status.
    fn on_exit(f: extern "C" fn(i32, *mut libc::c_void), arg: *mut libc::c_void) -> i32;
}

extern "C" fn at_exit(status: i32, _: *mut libc::c_void) {
    if STATE.load(Ordering::Acquire) == ACTIVE {
        // SAFETY: see `Runtime::active`.
        let rt = unsafe { &*RUNTIME.load(Ordering::Relaxed) };
        let _ = catch_unwind(crate::gpu::at_exit);
        rt.seg.mark_exited(status);
    }
}

extern "C" fn after_fork_in_child() {
    // The parent's segment stays the parent's: forget it (its mapping is leaked, not
    // unmapped, in case a pointer to it is still on this thread's stack) and start over.
    // Its liveness lock is the parent's too: this copy of the descriptor is closed, or the
    // parent's segment would look alive for as long as this child runs.
    let parent = RUNTIME.swap(std::ptr::null_mut(), Ordering::Relaxed);
    if !parent.is_null() {
        // SAFETY: a non-null RUNTIME points at the leaked, never freed Runtime (`init`).
        unsafe { (*parent).seg.release_lock() };
    }
    // The child's first initialisation starts its own patience, not the parent's.
    INIT_BEGAN.store(0, Ordering::Relaxed);
    crate::gpu::after_fork_in_child();
    crate::nccl::after_fork_in_child();
    // A dormant parent has a dormant child; an armed one a child that records (and starts
    // its own attach worker on its first call, see `attach::on_runtime_created`).
    if STATE.load(Ordering::Relaxed) != DORMANT {
        STATE.store(UNINIT, Ordering::Release);
    }
    crate::attach::after_fork_in_child();
    crate::shed::reset();
    guard::FORK_GEN.fetch_add(1, Ordering::Relaxed);
}
