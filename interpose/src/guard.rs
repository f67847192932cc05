//! Per-thread state: the re-entrancy guard and the cached kernel thread id.
//!
//! Accessed with `try_with`, so a hook running during thread teardown (TLS destroyed) still
//! forwards to the real function, just without recording.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Bumped whenever the process's segment changes: in a fork child (cached thread ids are the
/// parent's) and when a segment is created (a re-attach makes a new one, whose call-site and
/// Python-site ids start over). The per-thread caches of thread ids, stacks and Python sites
/// compare it and start empty when it moved.
pub static FORK_GEN: AtomicU32 = AtomicU32::new(0);

thread_local! {
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
    static TID: Cell<(u32, u32)> = const { Cell::new((0, u32::MAX)) };
    static EVENTS: Cell<u32> = const { Cell::new(0) };
}

/// After its first `OVERHEAD_EXACT` recorded events, a thread times the library's own work
/// (its overhead, and a stack-cache lookup) on one event in `OVERHEAD_SAMPLE` and counts
/// it that many times: two clock reads saved on the others. The first events, which carry
/// one-off costs (resolving symbols, a thread's first stack), are all timed and counted
/// once, as are events that unwind a stack.
pub const OVERHEAD_SAMPLE: u32 = 8;
pub const OVERHEAD_EXACT: u32 = 64;

/// The weight of this thread's current recorded event's own cost: `Some(1)` when timed
/// exactly, `Some(OVERHEAD_SAMPLE)` when timed as a sample, `None` when not timed.
#[inline]
pub fn overhead_weight() -> Option<u64> {
    EVENTS
        .try_with(|c| {
            let n = c.get();
            c.set(n.saturating_add(1));
            if n < OVERHEAD_EXACT {
                Some(1)
            } else if n % OVERHEAD_SAMPLE == OVERHEAD_SAMPLE - 1 {
                Some(u64::from(OVERHEAD_SAMPLE))
            } else {
                None
            }
        })
        .unwrap_or(Some(1))
}

/// Held while the library does its own work inside a hook; a CUDA call made meanwhile (by
/// the library or by something it calls) is forwarded without recording.
pub struct Reentry(());

impl Reentry {
    #[inline]
    pub fn enter() -> Option<Reentry> {
        IN_HOOK
            .try_with(|c| {
                if c.replace(true) {
                    None
                } else {
                    Some(Reentry(()))
                }
            })
            .ok()
            .flatten()
    }
}

impl Drop for Reentry {
    #[inline]
    fn drop(&mut self) {
        let _ = IN_HOOK.try_with(|c| c.set(false));
    }
}

/// Whether this thread is inside a hooked call that holds the guard (a recorded call in
/// progress, or the library's own work).
#[inline]
pub fn in_hook() -> bool {
    IN_HOOK.try_with(|c| c.get()).unwrap_or(false)
}

/// Kernel thread id of the caller, cached per thread (one syscall per thread and fork).
#[inline]
pub fn tid() -> u32 {
    let gen = FORK_GEN.load(Ordering::Relaxed);
    TID.try_with(|c| {
        let (tid, g) = c.get();
        if g == gen {
            tid
        } else {
            let t = gettid();
            c.set((t, gen));
            t
        }
    })
    .unwrap_or_else(|_| gettid())
}

/// The process id, cached (`getpid` is a system call; the looks at a waiting thread ask for it
/// several times each): taken again after a fork (`FORK_GEN`).
#[inline]
pub fn pid() -> u32 {
    static PID: AtomicU64 = AtomicU64::new(u64::MAX);
    let gen = FORK_GEN.load(Ordering::Relaxed);
    let v = PID.load(Ordering::Relaxed);
    if v >> 32 == u64::from(gen) {
        return v as u32;
    }
    // SAFETY: getpid has no arguments and cannot fail.
    let p = unsafe { libc::getpid() } as u32;
    PID.store(u64::from(gen) << 32 | u64::from(p), Ordering::Relaxed);
    p
}

#[cold]
fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cached_pid_is_the_process_id_and_follows_a_new_generation() {
        assert_eq!(pid(), std::process::id());
        FORK_GEN.fetch_add(1, Ordering::Relaxed);
        assert_eq!(pid(), std::process::id());
        assert_eq!(pid(), std::process::id());
    }

    #[test]
    fn overhead_weights_are_exact_first_then_sampled_and_add_up() {
        // A fresh thread: its own counter.
        let w: Vec<Option<u64>> =
            std::thread::spawn(|| (0..1064).map(|_| overhead_weight()).collect())
                .join()
                .unwrap();
        assert!(w[..OVERHEAD_EXACT as usize].iter().all(|x| *x == Some(1)));
        let rest = &w[OVERHEAD_EXACT as usize..];
        let sampled = rest.iter().filter(|x| x.is_some()).count();
        assert_eq!(sampled, rest.len() / OVERHEAD_SAMPLE as usize);
        assert!(rest
            .iter()
            .flatten()
            .all(|x| *x == u64::from(OVERHEAD_SAMPLE)));
        // The weights stand for every event: their sum is the number of events.
        let total: u64 = w.iter().flatten().sum();
        assert_eq!(total, w.len() as u64);
    }
}
