//! Initialisation: the first hooked call of a process (or an attach) creates its segment,
//! and starts what runs beside the hooks: GPU tracing and, in a fork child of an attached
//! process, the attach worker. `active` is what every hook asks first.

use std::panic::catch_unwind;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use syncspy_abi::{SegmentParams, SegmentWriter};

use crate::clock::now_ns;
use crate::config::{off_by_env_cached, Config};
use crate::stack;
use crate::state::{
    Runtime, ACTIVE, DISABLED, DORMANT, INITIALIZING, INIT_BEGAN, INIT_PATIENCE_NS, MISSED,
    RUNTIME, STATE, UNINIT,
};

/// `attach::dormant_poll` and `attach::on_runtime_created`, which sit above this module
/// (arming reaches the GOT patcher and the driver's hooks). Set once, at load, by
/// `process::install_process_handlers`, before the state can be `DORMANT`; unset, there is no
/// attach to poll for or to start a worker for (its control file is set only by arming,
/// which comes later).
static DORMANT_POLL: OnceLock<fn() -> bool> = OnceLock::new();
static ON_RUNTIME_CREATED: OnceLock<fn()> = OnceLock::new();

/// Registers the attach side's part in the runtime's life (see `DORMANT_POLL`).
pub(crate) fn register_attach(dormant_poll: fn() -> bool, on_runtime_created: fn()) {
    let _ = DORMANT_POLL.set(dormant_poll);
    let _ = ON_RUNTIME_CREATED.set(on_runtime_created);
}

/// The runtime if recording is active; initialises on first use.
#[inline(always)]
pub(crate) fn active() -> Option<&'static Runtime> {
    match STATE.load(Ordering::Acquire) {
        // SAFETY: RUNTIME is set before STATE becomes ACTIVE (Release) and never freed.
        ACTIVE => Some(unsafe { &*RUNTIME.load(Ordering::Relaxed) }),
        UNINIT => init(),
        INITIALIZING => wait_for_init(),
        // Armed by this very call: it is recorded.
        DORMANT if dormant_poll() => active_after_arm(),
        DORMANT => None,
        _ => None,
    }
}

/// Called by a hook while `DORMANT`: `attach::dormant_poll` (true: armed now).
#[cold]
#[inline(never)]
fn dormant_poll() -> bool {
    DORMANT_POLL.get().is_some_and(|f| f())
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
        Err(INITIALIZING) => return wait_for_init(),
        // SAFETY: as in `active`.
        Err(ACTIVE) => return Some(unsafe { &*RUNTIME.load(Ordering::Relaxed) }),
        Err(_) => return None,
    }
    let t0 = now_ns();
    INIT_BEGAN.store(t0, Ordering::Release);
    let rt = catch_unwind(create).ok().flatten();
    match rt {
        Some(rt) => {
            let rt: &'static Runtime = Box::leak(Box::new(rt));
            let live = rt.seg.live();
            live.events_dropped
                .fetch_add(MISSED.swap(0, Ordering::Relaxed), Ordering::Relaxed);
            live.overhead_ns
                .fetch_add(now_ns().saturating_sub(t0), Ordering::Relaxed);
            // A new segment: the budget's windows start over (after a detach, the last
            // segment's counters are not this one's).
            crate::shed::reset();
            RUNTIME.store(rt as *const Runtime as *mut Runtime, Ordering::Relaxed);
            // A disarm that came meanwhile (it waits for INITIALIZING to end) wins.
            let _ =
                STATE.compare_exchange(INITIALIZING, ACTIVE, Ordering::Release, Ordering::Relaxed);
            crate::attach::on_runtime_created();
            // GPU activity: CUPTI started here (this call pays its loading, counted as
            // syncspy's overhead), then a thread of its own.
            // Other threads record meanwhile, and may have opened the budget's first window:
            // the start is a one-time cost, outside the budget.
            let g0 = now_ns();
            let _ = catch_unwind(|| crate::gpu::start(&rt.seg, rt.cfg.gpu));
            crate::shed::own_outside(&rt.seg, now_ns().saturating_sub(g0));
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
    if let Ok(room) =
        syncspy_abi::lifecycle::Room::of(&cfg.dir, reclaimed.as_ref().map_or(0, |r| r.bytes_left))
    {
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
    crate::guard::FORK_GEN.fetch_add(1, Ordering::Relaxed);
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

/// Creates the segment now rather than at the next hooked call (attach: the process shows
/// up in the reader at once).
pub(crate) fn start_now() -> bool {
    active().is_some()
}
