//! Per-thread state: the re-entrancy guard and the cached kernel thread id.
//!
//! Accessed with `try_with`, so a hook running during thread teardown (TLS destroyed) still
//! forwards to the real function, just without recording.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};

/// Bumped in the fork child, so cached thread ids from the parent are refreshed.
pub static FORK_GEN: AtomicU32 = AtomicU32::new(0);

thread_local! {
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
    static TID: Cell<(u32, u32)> = const { Cell::new((0, u32::MAX)) };
    static EVENTS: Cell<u32> = const { Cell::new(0) };
}

/// The library's own time is timed on one recorded event in this many, per thread (the
/// first of each thread included), and counted this many times: a clock read saved on the
/// others.
pub const OVERHEAD_SAMPLE: u32 = 8;

/// Whether this thread's current recorded event is one whose own cost is timed.
#[inline]
pub fn time_overhead() -> bool {
    EVENTS
        .try_with(|c| {
            let n = c.get();
            c.set(n.wrapping_add(1));
            n % OVERHEAD_SAMPLE == 0
        })
        .unwrap_or(false)
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

#[cold]
fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}
