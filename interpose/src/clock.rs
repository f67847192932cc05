//! CLOCK_MONOTONIC in nanoseconds, the segment's clock (`syncspy_abi::clock`), and the calling
//! thread's CPU time.

/// Forced inline: the hot path reads the clock twice per stall.
#[inline(always)]
pub fn now_ns() -> u64 {
    syncspy_abi::clock::monotonic_ns()
}

/// The calling thread's CPU time in ns (CLOCK_THREAD_CPUTIME_ID; 0 if unreadable). A system
/// call, not the vDSO: only for cold paths.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a local out-pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Thread `tid`'s CPU time in ns (of this process or any: the kernel checks), from its
/// per-thread CPU clock (the kernel's encoding of a thread id as a clock id: what
/// `pthread_getcpuclockid` returns); `None` if it cannot be read. A system call.
pub fn cpu_of(tid: u32) -> Option<u64> {
    let tid = std::ffi::c_int::try_from(tid).ok()?;
    let clock: libc::clockid_t = ((!tid) << 3) | 6;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a local out-pointer; an invalid clock id is answered with an error.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some((ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64)
}
