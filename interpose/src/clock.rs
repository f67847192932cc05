//! CLOCK_MONOTONIC in nanoseconds, the segment's clock (`syncspy_abi::clock`).

/// Forced inline: the hot path reads the clock twice per stall.
#[inline(always)]
pub fn now_ns() -> u64 {
    syncspy_abi::clock::monotonic_ns()
}
