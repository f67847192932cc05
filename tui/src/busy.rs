//! The GPU pane's sparkline: each device's busy share, second by second, from the
//! cumulative (traced span, busy time) counters the library keeps per device. The monitor
//! samples them at every refresh; a second's share is the busy time over the traced time
//! added between the first samples of that second and of the next one. Seconds without
//! traced time (tracing off, between duty windows) have no share: the pane leaves them
//! blank rather than drawing an idle GPU.

use std::collections::{HashMap, VecDeque};

/// Per device, the busy share of the last seconds.
#[derive(Clone, Debug, Default)]
pub struct BusyHistory {
    secs: u64,
    /// Per device: the sample that opened the current second `(second, span, busy)`.
    open: HashMap<i32, (u64, u64, u64)>,
    /// Per device: `(second, share)`, oldest first, at most `secs` seconds.
    closed: HashMap<i32, VecDeque<(u64, Option<f64>)>>,
}

impl BusyHistory {
    /// Keeps `secs` seconds (the monitor's window).
    pub fn new(secs: u64) -> BusyHistory {
        BusyHistory {
            secs: secs.max(1),
            ..BusyHistory::default()
        }
    }

    /// One refresh's counters at second `now_s`: `(device, span_ns, busy_ns)` since start.
    pub fn sample(&mut self, now_s: u64, devices: impl IntoIterator<Item = (i32, u64, u64)>) {
        for (dev, span, busy) in devices {
            let Some(&(sec, span0, busy0)) = self.open.get(&dev) else {
                self.open.insert(dev, (now_s, span, busy));
                continue;
            };
            if now_s <= sec {
                continue;
            }
            let dspan = span.saturating_sub(span0);
            let share =
                (dspan > 0).then(|| (busy.saturating_sub(busy0) as f64 / dspan as f64).min(1.0));
            let q = self.closed.entry(dev).or_default();
            // Refreshes more than a second apart: every second between gets the average.
            let first = sec.max(now_s.saturating_sub(self.secs));
            for s in first..now_s {
                q.push_back((s, share));
            }
            while q.len() as u64 > self.secs {
                q.pop_front();
            }
            self.open.insert(dev, (now_s, span, busy));
        }
    }

    /// The devices seen, in order.
    pub fn devices(&self) -> Vec<i32> {
        let mut d: Vec<i32> = self.open.keys().copied().collect();
        d.sort_unstable();
        d
    }

    /// The shares of the `secs` seconds before `now_s`, oldest first (`None`: no traced time
    /// that second, or not sampled).
    pub fn shares(&self, device: i32, now_s: u64) -> Vec<Option<f64>> {
        let from = now_s.saturating_sub(self.secs);
        let mut out = vec![None; (now_s - from) as usize];
        if let Some(q) = self.closed.get(&device) {
            for &(s, share) in q {
                if (from..now_s).contains(&s) {
                    out[(s - from) as usize] = share;
                }
            }
        }
        out
    }

    /// Starts over (the `r` key).
    pub fn clear(&mut self) {
        self.open.clear();
        self.closed.clear();
    }
}

/// One character per second: ` ` no traced time, then eight levels of busy share
/// (`▁`..`█`, or `.:-=+*#@` in ASCII).
pub fn sparkline(shares: &[Option<f64>], ascii: bool) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    const ASCII: [char; 8] = ['.', ':', '-', '=', '+', '*', '#', '@'];
    let levels = if ascii { ASCII } else { BLOCKS };
    shares
        .iter()
        .map(|s| match s {
            None => ' ',
            Some(v) => levels[((v.clamp(0.0, 1.0) * 8.0) as usize).min(7)],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_second_gets_the_busy_share_of_the_time_traced_in_it() {
        let mut h = BusyHistory::new(5);
        h.sample(100, [(0, 0, 0)]);
        // Two refreshes in second 100, then the first one of 101 closes it: 600 of 1000.
        h.sample(100, [(0, 400, 300)]);
        h.sample(101, [(0, 1_000, 600)]);
        // Second 101: nothing traced (a duty pause).
        h.sample(102, [(0, 1_000, 600)]);
        // Second 102 fully busy.
        h.sample(103, [(0, 2_000, 1_600)]);
        assert_eq!(
            h.shares(0, 103),
            vec![None, None, Some(0.6), None, Some(1.0)]
        );
        assert_eq!(sparkline(&h.shares(0, 103), false), "  ▅ █");
        assert_eq!(sparkline(&h.shares(0, 103), true), "  + @");
    }

    #[test]
    fn a_long_pause_between_refreshes_spreads_its_average_and_old_seconds_age_out() {
        let mut h = BusyHistory::new(3);
        h.sample(10, [(1, 0, 0), (0, 0, 0)]);
        h.sample(14, [(1, 4_000, 1_000), (0, 0, 0)]);
        // Seconds 11..13 are in the window of 3 before 14; 10 aged out.
        assert_eq!(h.shares(1, 14), vec![Some(0.25); 3]);
        assert_eq!(h.shares(0, 14), vec![None; 3]);
        assert_eq!(h.devices(), vec![0, 1]);
        // A second later the oldest is gone and the one not yet closed is blank.
        assert_eq!(h.shares(1, 15), vec![Some(0.25), Some(0.25), None]);
        h.clear();
        assert!(h.devices().is_empty());
        assert_eq!(h.shares(1, 15), vec![None; 3]);
    }

    #[test]
    fn counters_that_go_back_or_overshoot_do_not_break_the_line() {
        let mut h = BusyHistory::new(2);
        h.sample(1, [(0, 1_000, 900)]);
        // A reset segment (counters smaller) and busy above span: clamped, no panic.
        h.sample(2, [(0, 500, 100)]);
        h.sample(3, [(0, 600, 900)]);
        assert_eq!(h.shares(0, 3), vec![None, Some(1.0)]);
        assert_eq!(sparkline(&[Some(-1.0), Some(2.0)], false), "▁█");
    }
}
