//! The clock of every timestamp in a segment (`Ident::clock_id` is
//! [`CLOCK_MONOTONIC`](crate::layout::CLOCK_MONOTONIC)): the writer stamps records with it,
//! readers compare those stamps with their own readings, and the simulated runtime runs its
//! device timeline on it, so all of them must read it the same way.

/// CLOCK_MONOTONIC now, in nanoseconds. On Linux a vDSO call (no system call), cheap enough
/// for the hooks' hot path.
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    // clock_gettime cannot fail for CLOCK_MONOTONIC, which every Linux kernel provides, and a
    // valid pointer, so the return value is not checked.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    // Seconds since boot: far from overflowing u64 nanoseconds (584 years).
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advances_with_real_time() {
        let a = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = monotonic_ns();
        assert!(b - a >= 2_000_000, "{a} -> {b}");
        assert!(a > 0);
    }
}
