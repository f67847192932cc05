//! The library's state: where it is in its life (`STATE`) and this process's `Runtime` (its
//! segment and settings). The floor of the crate: every module that records stands on it,
//! and it imports none of them (only the clock and the settings).
//!
//! State machine (one relaxed-cost Acquire load on the fast path, `init::active`):
//! `UNINIT` → (first hooked call wins a CAS) `INITIALIZING` → `ACTIVE` | `DISABLED`.
//! The segment is created lazily on the first CUDA call, so processes that never use CUDA
//! (shells, compilers started by the job) leave no segment behind. The fork child goes back
//! to `UNINIT` and creates its own segment on its first call.
//!
//! Attach (see `attach/`) adds `DORMANT`: hooks pass through, no segment. A library preloaded
//! with `SYNCSPY_DORMANT=1`, or injected by `syncspy attach`, waits there until armed
//! (`DORMANT` → `UNINIT`, then as above) and goes back there when disarmed.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};

use syncspy_abi::cost::SHED_RECORDS;
use syncspy_abi::{Record, SegmentWriter};

use crate::call::Call;
use crate::config::Config;

pub(crate) const UNINIT: u8 = 0;
pub(crate) const INITIALIZING: u8 = 1;
pub(crate) const ACTIVE: u8 = 2;
pub(crate) const DISABLED: u8 = 3;
pub(crate) const DORMANT: u8 = 4;

pub(crate) static STATE: AtomicU8 = AtomicU8::new(UNINIT);
pub(crate) static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());
/// Calls forwarded unrecorded because another thread's initialisation did not finish in
/// time (see `wait_for_init`): added to the segment's drop counter once it exists.
pub(crate) static MISSED: AtomicU64 = AtomicU64::new(0);
/// When the current initialisation began (`now_ns`); waits for it end a fixed time later.
pub(crate) static INIT_BEGAN: AtomicU64 = AtomicU64::new(0);
/// How long, from its start, other threads wait for an initialisation. It normally takes
/// about 2 ms (most of it reserving the segment's memory); a machine with more runnable
/// threads than cores can deschedule the initialising thread for tens of ms, and a missed
/// call makes the totals inexact. The wait ends at one point in time for every thread, so
/// an initialisation that is truly stuck (on a lock a waiting thread holds) costs the
/// process this much once, not once per call.
pub(crate) const INIT_PATIENCE_NS: u64 = 1_000_000_000;

pub(crate) struct Runtime {
    pub seg: SegmentWriter,
    pub cfg: Config,
    /// Runtime address range of libsyncspy itself: its frames are cut from stacks.
    pub own: (u64, u64),
    /// `dlpi_adds` when the module map was last brought up to date.
    pub modules_adds: AtomicU64,
    pub refreshing: AtomicBool,
}

impl Runtime {
    /// Counts a call that did not stall.
    #[inline]
    pub(crate) fn count(&self, call: &Call) {
        self.seg.live().calls[call.api as usize].add_untimed(call.bytes);
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

/// The runtime in use, if recording is active (no initialisation: see `init::active`).
pub(crate) fn current() -> Option<&'static Runtime> {
    if STATE.load(Ordering::Acquire) != ACTIVE {
        return None;
    }
    // SAFETY: RUNTIME is set before STATE becomes ACTIVE (Release) and never freed.
    Some(unsafe { &*RUNTIME.load(Ordering::Relaxed) })
}

#[cold]
pub(crate) fn disable() {
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
    Some(current()?.seg.path().to_path_buf())
}

/// CUDA calls that reached the hooks while recording into the segment in use: every recorded
/// event (`apis`) and every counted call that did not stall (`calls`). 0 without a segment.
pub(crate) fn calls_seen() -> u64 {
    let Some(rt) = current() else {
        return 0;
    };
    let live = rt.seg.live();
    live.apis
        .iter()
        .chain(live.calls.iter())
        .map(|t| t.count.load(Ordering::Relaxed))
        .fold(0u64, u64::wrapping_add)
}

/// At load, with `SYNCSPY_DORMANT` set: hooks pass through until armed.
pub(crate) fn start_dormant() {
    STATE.store(DORMANT, Ordering::Release);
}

/// In a fork child, first: the parent's segment stays the parent's. Forgets it (its mapping
/// is leaked, not unmapped, in case a pointer to it is still on this thread's stack); its
/// liveness lock is the parent's too: this copy of the descriptor is closed, or the parent's
/// segment would look alive for as long as this child runs.
pub(crate) fn forget_parent() {
    let parent = RUNTIME.swap(std::ptr::null_mut(), Ordering::Relaxed);
    if !parent.is_null() {
        // SAFETY: a non-null RUNTIME points at the leaked, never freed Runtime (`init`).
        unsafe { (*parent).seg.release_lock() };
    }
    // The child's first initialisation starts its own patience, not the parent's.
    INIT_BEGAN.store(0, Ordering::Relaxed);
}

/// In a fork child: a dormant parent has a dormant child; an armed one a child that records
/// (and starts its own attach worker on its first call, see `attach::on_runtime_created`).
pub(crate) fn restart_in_child() {
    if STATE.load(Ordering::Relaxed) != DORMANT {
        STATE.store(UNINIT, Ordering::Release);
    }
}
