//! The simulated device timeline is CLOCK_MONOTONIC in nanoseconds, read through syncspy's own
//! clock function (the clock of every segment timestamp), so device timestamps and host waits
//! can be compared directly.

pub(crate) use syncspy_abi::clock::monotonic_ns as now_ns;

/// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns`. An absolute deadline keeps a chain of
/// modeled operations from accumulating the scheduler's wake-up lateness.
pub(crate) fn sleep_until(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    while now_ns() < deadline_ns {
        // SAFETY: `ts` is a valid timespec; a null remainder is allowed with TIMER_ABSTIME.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        // EINTR: a signal woke us early; anything else cannot happen for valid arguments.
        if rc != 0 && rc != libc::EINTR {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeps_until_the_deadline() {
        let start = now_ns();
        sleep_until(start + 2_000_000);
        assert!(now_ns() >= start + 2_000_000);
        // A deadline in the past returns at once.
        let before = now_ns();
        sleep_until(start);
        assert!(now_ns() - before < 1_000_000);
    }
}
