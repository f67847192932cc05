//! The look at the waiting main thread, taken by the library's own thread while the main
//! thread sleeps, before the host function that ends its wait runs.
//!
//! A look by the trampoline is on the driver's host-function thread, which runs the host
//! functions of every stream in turn: before the program's function it delays the wake it
//! looks for; after it (`later`), it still delays the next host function, the one the
//! program's next wait is for. Measured on an H100 with JAX's loop (in-process A/B, python
//! mode): 1.08 with the look after the function, 0.98 with no look at all.
//!
//! So when a host function that has ended a wait of the main thread before is queued
//! (`want`), the watcher thread (`watch`) reads the main
//! thread's CPU clock at each of its polls; once two reads a poll apart agree (the thread is
//! off the CPU) and its state says it sleeps, it takes the look for the native site of each
//! function queued since, reads the clock again (unchanged: the frames were read while the
//! thread slept) and publishes what it found: the segment, the thread's CPU time and the
//! sites (`site`). The trampoline then reads only the main thread's CPU clock (and, before
//! the function, its state): the same CPU time means the thread has not run since the look,
//! so it waits at that stack. When the function runs first (a wait shorter than a few
//! polls), or the main thread is not the one that waits, the trampoline looks itself.
//!
//! The watcher polls every 20 us for the first 300 us after the function was queued, then
//! every 200 us, at most `WANT_NS` after it (the main thread may not wait for it at all). Its
//! time is the library's own (`overhead_ns`), under the looks' budget: out of it, it stops
//! polling until the next queuing; its looks refused by the budget are not counted as
//! skipped (the trampoline's are).
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize};

use syncspy_abi::record::NO_SITE;

use super::{asleep, main_cpu, thread_cpu_ns, thread_state};
use crate::clock::now_ns;
use crate::python::{self, waiter};
use crate::state::Runtime;

/// Native sites kept between two looks (direct-mapped; a collision keeps the later one).
const NATIVES: usize = 4;
/// How long after a function was queued the watcher waits for the main thread to sleep.
pub const WANT_NS: u64 = 2_000_000;
/// How long after it the watcher polls every 20 us (`fast`).
pub const FAST_NS: u64 = 300_000;

static WANTED: [AtomicU32; NATIVES] = [const { AtomicU32::new(NO_SITE) }; NATIVES];
/// When a look was last wanted (0: none is).
static WANTED_NS: AtomicU64 = AtomicU64::new(0);

/// The published look: a sequence number (odd while it is written), the segment, the main
/// thread's CPU time, and (native site, site found) pairs.
static SEQ: AtomicU64 = AtomicU64::new(0);
static SEGMENT: AtomicUsize = AtomicUsize::new(0);
static CPU: AtomicU64 = AtomicU64::new(0);
static FOUND: [(AtomicU32, AtomicU32); NATIVES] =
    [const { (AtomicU32::new(NO_SITE), AtomicU32::new(NO_SITE)) }; NATIVES];

/// Set by the watcher before it sleeps with nothing to do: `want` must wake it.
pub static IDLE: AtomicBool = AtomicBool::new(false);

/// A host function with the native site `native` was queued: the next look is to cover it.
/// `arm`: the function has ended a wait of the main thread before (`later::known`), so the
/// watcher is to look at the main thread when it sleeps; a program that queues host
/// functions no thread waits for (callbacks) does not set the watcher polling. Whether the
/// watcher must be woken.
pub fn want(native: u32, arm: bool) -> bool {
    let slot = &WANTED[native as usize % NATIVES];
    if slot.load(Relaxed) != native {
        slot.store(native, Relaxed);
    }
    if !arm {
        return false;
    }
    // Sequentially consistent with the watcher's `IDLE` then `wanted`: one of the two sees
    // the other's store, so a want is never left with the watcher asleep.
    WANTED_NS.store(now_ns().max(1), SeqCst);
    IDLE.load(SeqCst)
}

/// The host function's own look found the thread: none is wanted of the watcher until the
/// next function is queued.
pub fn cancel() {
    WANTED_NS.store(0, Relaxed);
}

/// Whether a look is wanted now.
pub fn wanted(now: u64) -> bool {
    let at = WANTED_NS.load(SeqCst);
    at != 0 && now.saturating_sub(at) <= WANT_NS
}

/// Whether the watcher should poll often (every 20 us) for the look: in the first `FAST_NS`
/// after the function was queued (a loop's thread waits right after it queues: JAX's within
/// about 100 us); after that, a thread still running is polled every 200 us, so that a
/// program that queues host functions and goes on running costs the watcher little.
pub fn fast(now: u64) -> bool {
    let at = WANTED_NS.load(Relaxed);
    at != 0 && now.saturating_sub(at) <= FAST_NS
}

/// The site the watcher found for `native`, if its look was at `segment` and the main
/// thread's CPU time was then `cpu_ns` (it has not run since).
pub fn site(segment: usize, cpu_ns: u64, native: u32) -> Option<u32> {
    let seq = SEQ.load(Acquire);
    if seq == 0 || seq & 1 == 1 {
        return None;
    }
    let same = SEGMENT.load(Relaxed) == segment && CPU.load(Relaxed) == cpu_ns;
    let site = FOUND
        .iter()
        .find(|(n, _)| n.load(Relaxed) == native)
        .map(|(_, s)| s.load(Relaxed));
    fence(Acquire);
    (same && SEQ.load(Relaxed) == seq).then_some(site).flatten()
}

/// Whether the last look published has a site for `native` (no clock read: whether to ask
/// `site`).
pub fn has(native: u32) -> bool {
    SEQ.load(Relaxed) != 0 && FOUND.iter().any(|(n, _)| n.load(Relaxed) == native)
}

/// Publishes a look (the watcher is the only writer). The number is taken even first: a
/// fork child whose parent's watcher was writing finds it odd, and starts over from there.
fn publish(segment: usize, cpu_ns: u64, found: &[(u32, u32)]) {
    let seq = SEQ.load(Relaxed) & !1;
    SEQ.store(seq + 1, Relaxed);
    fence(Release);
    SEGMENT.store(segment, Relaxed);
    CPU.store(cpu_ns, Relaxed);
    for (i, (n, s)) in FOUND.iter().enumerate() {
        let (native, site) = found.get(i).copied().unwrap_or((NO_SITE, NO_SITE));
        n.store(native, Relaxed);
        s.store(site, Relaxed);
    }
    SEQ.store(seq + 2, Release);
}

/// One poll of the watcher while a look is wanted. `last`: the main thread's CPU time at
/// the previous poll. Returns the time it took, the library's own (its reads are spent from
/// the looks' budget; the look spends its own).
pub fn poll(rt: &Runtime, last: &mut Option<u64>) -> u64 {
    let t0 = now_ns();
    if !waiter::Budget::allow(t0) {
        // Out of budget: no look is taken, nor polled for, until the next queuing.
        cancel();
        return 0;
    }
    let tid = crate::guard::pid();
    // Off the CPU since the last poll (not still running), and asleep (not preempted).
    let settled = waiter::Budget::timed(|| {
        let cpu = thread_cpu_ns(tid)?;
        (last.replace(cpu) == Some(cpu) && asleep(thread_state(tid))).then_some(cpu)
    });
    if let Some(cpu) = settled {
        WANTED_NS.store(0, Relaxed);
        let mut found = [(NO_SITE, NO_SITE); NATIVES];
        let mut n = 0;
        for w in &WANTED {
            let native = w.swap(NO_SITE, Relaxed);
            if native == NO_SITE {
                continue;
            }
            if let Some(b) = python::blocked_thread(rt, native, waiter::Purpose::Prelook) {
                if b.tid == tid {
                    found[n] = (native, b.site);
                    n += 1;
                }
            }
        }
        if n > 0 && main_cpu() == Some(cpu) {
            publish(super::segment(rt), cpu, &found[..n]);
        }
    }
    now_ns().saturating_sub(t0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_look_serves_only_its_segment_cpu_time_and_native_site() {
        publish(7, 100, &[(11, 21), (12, 22)]);
        assert_eq!(site(7, 100, 11), Some(21));
        assert_eq!(site(7, 100, 12), Some(22));
        assert!(has(12) && !has(13));
        // The thread ran since the look, another segment, a site not looked for: nothing.
        assert_eq!(site(7, 101, 11), None);
        assert_eq!(site(8, 100, 11), None);
        assert_eq!(site(7, 100, 13), None);
        // A new look replaces the old one whole.
        publish(7, 200, &[(13, 23)]);
        assert_eq!(site(7, 100, 11), None);
        assert_eq!(site(7, 200, 11), None);
        assert_eq!(site(7, 200, 13), Some(23));
        // Left odd (a fork child of a watcher that was writing): nothing is read, and the
        // next look is.
        SEQ.fetch_add(1, Relaxed);
        assert_eq!(site(7, 200, 13), None);
        publish(9, 300, &[(14, 24)]);
        assert_eq!(site(9, 300, 14), Some(24));
    }

    #[test]
    fn a_look_is_wanted_for_a_while_after_a_queuing_until_one_is_taken() {
        cancel();
        want(41, false);
        assert!(
            !wanted(now_ns()),
            "a function that never ended a wait does not arm it"
        );
        want(40, true);
        let now = now_ns();
        assert!(wanted(now) && fast(now));
        let later = now + FAST_NS + 1_000;
        assert!(
            wanted(later) && !fast(later),
            "polled less often after a while"
        );
        assert!(!wanted(now + WANT_NS + 1_000_000), "not after the window");
        cancel();
        assert!(!wanted(now) && !fast(now));
    }
}
