//! Rates over a window of samples, right whatever the source's refresh.
//!
//! A view samples cumulative counters (stall events, stall time) and shows how fast they
//! grow. Taken between two consecutive refreshes, that is only right when every refresh sees
//! new figures: the monitor over an agent refreshes faster than the agent collects, so half
//! its deltas were zero and the others several collections' worth ("0" and "3.88s/s" by
//! turns on a steady process). Here each sample carries the time its figures were *measured*
//! (the agent's collection time, or the local read), a sample with no newer measurement is
//! ignored, and the rate is taken over the samples of the last [`Rates::span_ns`].

use std::collections::VecDeque;

/// Cumulative figures at one time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sample {
    at_ns: u64,
    events: u64,
    stall_ns: u64,
}

/// Stall events and stall time per second over a sliding window.
#[derive(Clone, Debug)]
pub struct Rates {
    span_ns: u64,
    samples: VecDeque<Sample>,
}

/// What a rate is shown over by default: long enough to hold several agent collections.
pub const DEFAULT_SPAN_NS: u64 = 3_000_000_000;
/// The shortest time a rate is computed over.
const MIN_DT_NS: u64 = 200_000_000;

impl Default for Rates {
    fn default() -> Rates {
        Rates::new(DEFAULT_SPAN_NS)
    }
}

impl Rates {
    pub fn new(span_ns: u64) -> Rates {
        Rates {
            span_ns,
            samples: VecDeque::new(),
        }
    }

    /// The window the rates are taken over.
    pub fn span_ns(&self) -> u64 {
        self.span_ns
    }

    /// Adds the cumulative `events` and `stall_ns` as measured at `at_ns` (any clock, the
    /// same for every sample). A sample no later than the last one is the same measurement
    /// seen again, and ignored; counters that went down (a reset) start the window over.
    pub fn sample(&mut self, at_ns: u64, events: u64, stall_ns: u64) {
        if let Some(last) = self.samples.back() {
            if at_ns <= last.at_ns {
                return;
            }
            if events < last.events || stall_ns < last.stall_ns {
                self.samples.clear();
            }
        }
        self.samples.push_back(Sample {
            at_ns,
            events,
            stall_ns,
        });
        while self.samples.len() > 2 && self.samples[1].at_ns + self.span_ns <= at_ns {
            self.samples.pop_front();
        }
    }

    /// (events per second, stall seconds per second) over the window; `None` until two
    /// measurements at least 200 ms apart.
    pub fn per_second(&self) -> Option<(f64, f64)> {
        let (a, b) = (self.samples.front()?, self.samples.back()?);
        let dt = b.at_ns.saturating_sub(a.at_ns);
        if dt < MIN_DT_NS {
            return None;
        }
        let dt = dt as f64 / 1e9;
        Some((
            b.events.saturating_sub(a.events) as f64 / dt,
            b.stall_ns.saturating_sub(a.stall_ns) as f64 / 1e9 / dt,
        ))
    }

    /// Forgets every sample (the counters were reset).
    pub fn clear(&mut self) {
        self.samples.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_viewer_faster_than_its_source_sees_a_steady_rate() {
        // The source measures every second (100 events, 0.25 s of stalls each); the viewer
        // refreshes every 250 ms and sees each measurement four times.
        let mut r = Rates::default();
        let mut seen = Vec::new();
        for tick in 0..40u64 {
            let now = tick * 250 * MS;
            let measured = now / 1000 / MS * 1000 * MS;
            let n = measured / (1000 * MS);
            r.sample(measured, n * 100, n * 250 * MS);
            if let Some(x) = r.per_second() {
                seen.push(x);
            }
        }
        assert!(seen.len() > 30, "{}", seen.len());
        for (ev, st) in seen {
            assert!((ev - 100.0).abs() < 1e-6, "{ev}");
            assert!((st - 0.25).abs() < 1e-9, "{st}");
        }
    }

    #[test]
    fn the_window_slides_and_a_reset_starts_over() {
        let mut r = Rates::new(2000 * MS);
        r.sample(0, 0, 0);
        assert_eq!(r.per_second(), None);
        r.sample(100 * MS, 10, 0);
        assert_eq!(r.per_second(), None, "too short a time");
        // 1000/s for 5 s, then idle: the rate goes to 0 within the window.
        for s in 1..=5 {
            r.sample(s * 1000 * MS, s * 1000, 0);
        }
        assert_eq!(r.per_second().map(|x| x.0.round()), Some(1000.0));
        for s in 6..=8 {
            r.sample(s * 1000 * MS, 5000, 0);
        }
        assert_eq!(r.per_second().map(|x| x.0), Some(0.0));
        r.sample(9000 * MS, 3, 0);
        assert_eq!(r.per_second(), None);
    }
}
