//! Waits on another thread, blamed on the waiting Python line.
//!
//! A stall recorded on a thread with no Python frames (XLA's threads under JAX's
//! `block_until_ready`, a C++ runtime's worker, a native pin-memory thread) would name only a
//! native stack. Its cause is usually a Python thread blocked, without the GIL, in a call that
//! waits for that thread. At such a stall, and only then, the interpreter's other thread
//! states are read and the waiting one's Python stack is attached to the event as a separate
//! "waited on behalf of" stack (see `python::waited`).
//!
//! **The rule.** Candidates are the main interpreter's thread states other than the calling
//! thread's that (a) have a Python frame (a thread state with none is idle: a C thread that
//! once took the GIL, a thread that has not started or has finished) and (b) do not hold the
//! GIL (`locked` and `last_holder` is the thread: it is running Python, not waiting). Of
//! those, the main thread (`thread_id == _PyRuntime.main_thread`) is taken; without it, the
//! only candidate if there is exactly one; with several and no main thread, none (which one
//! waits cannot be told, and a wrong line is worse than none).
//!
//! **Safety.** Another thread's frames can change or be freed under the reader at any moment.
//! Every read goes through `mem::Remote` (`process_vm_readv` on our own pid: unmapped memory
//! answers an error, never a fault); pointers are checked as the own-thread walk checks them
//! (plausible, code objects of `PyCode_Type`, instructions inside their code), the thread
//! list and the walk are bounded, and the result is kept only when, read again afterwards,
//! the thread still does not hold the GIL and its innermost frame is the same. Nothing here
//! takes the GIL or a lock, allocates (but the cold line-table read) or waits: a second
//! thread arriving while one reads gives up at once (`with_scratch`).
//!
//! **Cost.** Nothing for a thread with Python frames (the hot path never comes here) and
//! nothing in a process without an interpreter. At a stall of a thread without Python frames:
//! the thread list (a few reads per thread) and one walk, tens of system calls; a process-wide
//! budget (`Budget`) keeps the total under 5% of the process's wall time (after a first 5 ms).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::layout::{GilAt, Python};
use super::mem::{Mem, Remote};
use super::walk::{self, plausible, Walk};

/// Thread states looked at, at most.
pub const MAX_THREADS: usize = 256;

/// Why no waiting thread was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    /// The interpreter's structures could not be read or were implausible.
    Unreadable,
    /// No thread state is blocked with Python frames outside the GIL.
    NoneWaiting,
    /// Several threads, none the main thread, are blocked: which one waits is unknown.
    Ambiguous,
    /// The thread ran, or its frames changed, while they were read.
    Torn,
}

/// The waiting thread `find` picked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    /// It is the interpreter's main thread.
    pub main: bool,
    /// Its `PyThreadState`.
    pub tstate: usize,
    /// Where the GIL's `locked` flag and holder are.
    pub gil: (usize, usize),
}

/// Finds the waiting thread (the module's rule) and walks its frames into `w`. `me`: the
/// calling thread's own state (0 if it has none).
pub fn find(py: &Python, m: &mut Remote, me: usize, w: &mut Walk) -> Result<Found, Miss> {
    let at = locate(py, m, me)?;
    // SAFETY: `Remote` reads have no requirement.
    unsafe { walk::walk_with(py, m, at.found.tstate, w) };
    if w.n == 0 {
        return Err(Miss::Torn);
    }
    if !still_blocked(py, m, &at) {
        return Err(Miss::Torn);
    }
    Ok(at.found)
}

/// The waiting thread `locate` picked, with what tells later that it has not moved.
struct Located {
    found: Found,
    /// Its innermost frame when it was picked.
    top: usize,
}

/// The thread state holding the GIL now (0: nobody); `None` if unreadable.
fn gil_holder(m: &mut Remote, (locked_at, holder_at): (usize, usize)) -> Option<usize> {
    // SAFETY: `Remote` reads have no requirement.
    let (locked, holder) = unsafe { (m.read::<i32>(locked_at)?, m.word(holder_at, 0)?) };
    Some(if locked != 0 { holder } else { 0 })
}

/// Picks the waiting thread by the module's rule, without walking its frames.
fn locate(py: &Python, m: &mut Remote, me: usize) -> Result<Located, Miss> {
    let t = &py.layout.threads;
    m.reset();
    // SAFETY: `Remote` reads have no requirement.
    let interp = unsafe { m.word(py.runtime, t.runtime_interp_main) }.ok_or(Miss::Unreadable)?;
    if !plausible(interp) {
        return Err(Miss::Unreadable);
    }
    // SAFETY: as above.
    let main_tid = unsafe { m.word(py.runtime, t.runtime_main_thread) }.ok_or(Miss::Unreadable)?;
    let gil = match t.gil {
        GilAt::Runtime { locked, holder } => (py.runtime + locked, py.runtime + holder),
        GilAt::Interp {
            ptr,
            locked,
            holder,
        } => {
            // SAFETY: as above.
            let g = unsafe { m.word(interp, ptr) }.ok_or(Miss::Unreadable)?;
            if !plausible(g) {
                return Err(Miss::Unreadable);
            }
            (g + locked, g + holder)
        }
    };
    let holder = gil_holder(m, gil).ok_or(Miss::Unreadable)?;
    // SAFETY: as above.
    let mut ts = unsafe { m.word(interp, t.interp_threads_head) }.ok_or(Miss::Unreadable)?;
    let mut main = None;
    let mut other = None;
    let mut others = 0;
    for _ in 0..MAX_THREADS {
        if ts == 0 {
            break;
        }
        if !plausible(ts) {
            return Err(Miss::Torn);
        }
        // SAFETY: as above.
        let next = unsafe { m.word(ts, t.tstate_next) }.ok_or(Miss::Torn)?;
        if ts != me && ts != holder {
            // SAFETY: as above.
            if let Some(top) = unsafe { walk::top_frame(py, m, ts) }.filter(|f| *f != 0) {
                // SAFETY: as above.
                let tid = unsafe { m.word(ts, t.tstate_thread_id) }.ok_or(Miss::Torn)?;
                if tid == main_tid {
                    main = Some((ts, top));
                } else {
                    others += 1;
                    other = Some((ts, top));
                }
            }
        }
        ts = next;
    }
    let (pick, is_main) = match (main, other) {
        (Some(p), _) => (p, true),
        (None, Some(p)) if others == 1 => (p, false),
        (None, Some(_)) => return Err(Miss::Ambiguous),
        (None, None) => return Err(Miss::NoneWaiting),
    };
    Ok(Located {
        found: Found {
            main: is_main,
            tstate: pick.0,
            gil,
        },
        top: pick.1,
    })
}

/// Whether the thread `at` picked is still off the GIL at the same innermost frame, read
/// again (not from the page cache).
fn still_blocked(py: &Python, m: &mut Remote, at: &Located) -> bool {
    m.reset();
    // SAFETY: `Remote` reads have no requirement.
    let top = unsafe { walk::top_frame(py, m, at.found.tstate) };
    gil_holder(m, at.found.gil) != Some(at.found.tstate) && top == Some(at.top)
}

/// A key of the whole stack of `tstate` while it waits without the GIL: a hash of every
/// frame's address, code object and instruction, read from the frames alone (no code object
/// is read: a few pages of the thread's frame stack). `None` when it holds the GIL, has no
/// frame, a read fails or the chain is deeper than a walk goes. Two waits with the same key
/// are at the same stack (`memo`): a frame holds its code object alive, and a caller that
/// differs differs in its instruction.
pub fn stack_key(py: &Python, m: &mut Remote, tstate: usize, gil: (usize, usize)) -> Option<u64> {
    let l = &py.layout;
    if gil_holder(m, gil)? == tstate {
        return None;
    }
    // SAFETY: `Remote` reads have no requirement.
    let mut f = unsafe { walk::top_frame(py, m, tstate) }?;
    if f == 0 {
        return None;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for _ in 0..walk::MAX_STEPS {
        if f == 0 {
            return Some(h | 1);
        }
        if !plausible(f) {
            return None;
        }
        // SAFETY: as above.
        let (previous, code, instr) = unsafe {
            let instr = match l.code_adaptive {
                Some(_) => m.word(f, l.frame_instr)?,
                None => m.read::<i32>(f + l.frame_instr)? as u32 as usize,
            };
            (
                m.word(f, l.frame_previous)?,
                m.word(f, l.frame_code)?,
                instr,
            )
        };
        h = walk::mix(walk::mix(walk::mix(h, f as u64), code as u64), instr as u64);
        f = previous;
    }
    None
}

/// The kernel's id of the thread of `found` (the one `/proc/self/task` lists), if it can be
/// told: the process id for the main thread; for another, `PyThreadState::native_thread_id`
/// (the word after `thread_id` in 3.11 and later). The caller checks it names a thread of
/// this process (`hostwait::thread_state` reads its `/proc/self/task` entry).
pub fn native_tid(py: &Python, m: &mut Remote, found: Found) -> Option<u32> {
    if found.main {
        return Some(crate::guard::pid());
    }
    if py.layout.minor < 11 {
        return None;
    }
    // SAFETY: `Remote` reads have no requirement.
    let tid = unsafe { m.word(found.tstate, py.layout.threads.tstate_thread_id + 8) }?;
    u32::try_from(tid).ok().filter(|t| *t > 0)
}

/// A `Remote` (32 KB of page cache) that one use shares, with its flag: 0 free, else
/// `guard::FORK_GEN + 1` of the holder's process, so a fork child whose parent had a reader
/// mid-read (a thread the child does not have) takes it over.
struct Scratch {
    busy: AtomicU32,
    mem: UnsafeCell<Remote>,
}

// SAFETY: `mem` is only reached by the thread that set `busy` (`with_scratch`).
unsafe impl Sync for Scratch {}

/// What a look is for; each has its own scratch, so that neither waits for the other: the
/// stalls of a runtime's own threads (`Waited`, any thread) and the looks of the host
/// functions (`HostWait`, the driver's thread), which come at the same moments under JAX.
#[derive(Clone, Copy)]
pub enum Purpose {
    Waited = 0,
    HostWait = 1,
}

static SCRATCH: [Scratch; 2] = [const {
    Scratch {
        busy: AtomicU32::new(0),
        mem: UnsafeCell::new(Remote::new()),
    }
}; 2];

/// Runs `f` with the page cache of `purpose`; `None` at once, without waiting, when another
/// thread has it or another thread's memory cannot be read in this process.
pub fn with_scratch<R>(purpose: Purpose, f: impl FnOnce(&mut Remote) -> R) -> Option<R> {
    let scratch = &SCRATCH[purpose as usize];
    if !Remote::available() {
        return None;
    }
    let mine = crate::guard::FORK_GEN
        .load(Ordering::Relaxed)
        .wrapping_add(1)
        .max(1);
    let held = scratch.busy.load(Ordering::Relaxed);
    if held == mine
        || scratch
            .busy
            .compare_exchange(held, mine, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        return None;
    }
    // SAFETY: this thread set `busy` above (from free, or from a parent process's holder that
    // does not exist in this one) and is the only one to reach `mem` until it clears it below;
    // `f` cannot call back into here (the hooks do not re-enter).
    let r = f(unsafe { &mut *scratch.mem.get() });
    scratch.busy.store(0, Ordering::Release);
    Some(r)
}

/// The calling thread's CPU time in ns (0 if unreadable).
pub use crate::clock::thread_cpu_ns as cpu_ns;

/// The process's budget for other-thread reads: the time they took may not pass 5 ms plus
/// 5% of the wall time since the first one, so a runtime that stalls many thousand times a
/// second on its own threads loses at most that share of its time to them. The looks run on
/// the stalling runtime threads and on the driver's host-function thread, not on the
/// program's Python threads. 5%, not 2%: a JAX loop queues about three host functions a
/// millisecond, and at about 10 µs a look (the memo's cheap look, the thread's state) 2%
/// covered half its waits; on the simulated driver at four host functions a millisecond, 5%
/// covered all of them (docs/performance.md).
pub struct Budget;

static SPENT_NS: AtomicU64 = AtomicU64::new(0);
static FIRST_NS: AtomicU64 = AtomicU64::new(0);
const FREE_NS: u64 = 5_000_000;

impl Budget {
    /// Whether a read may start at `now_ns`.
    pub fn allow(now_ns: u64) -> bool {
        let first = match FIRST_NS.load(Ordering::Relaxed) {
            0 => match FIRST_NS.compare_exchange(0, now_ns, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => now_ns,
                Err(t) => t,
            },
            t => t,
        };
        SPENT_NS.load(Ordering::Relaxed) <= FREE_NS + now_ns.saturating_sub(first) / 20
    }

    /// Counts the time a read took.
    pub fn spend(ns: u64) {
        SPENT_NS.fetch_add(ns, Ordering::Relaxed);
    }

    /// Runs `f`, a read, and spends its time. The time is the monotonic clock's (the vDSO):
    /// the calling thread's CPU clock, which a preempted read would not spend, is a system
    /// call, and two of them for each of a look's timed parts came to about as many system
    /// calls as the look's own reads (`process_vm_readv`, the `/proc` state).
    pub fn timed<R>(f: impl FnOnce() -> R) -> R {
        let t0 = crate::clock::now_ns();
        let r = f();
        Self::spend(crate::clock::now_ns().saturating_sub(t0));
        r
    }
}
