//! The GPU idle tracker: from activity records (kernels, copies, memsets, each a `[start, end)`
//! on one device) to merged busy time, idle gaps and busy-fraction samples. Pure: no FFI, no
//! clock, no I/O; the CUPTI glue (`gpu::cupti`) feeds it and writes what it reports into the
//! segment.
//!
//! Records arrive in buffers, out of order across streams and across buffers. Nothing is final
//! when it arrives: a record delivered later may fill what looks like a gap now. The caller
//! says how far time is final with a *watermark* ([`Tracker::advance`]): every record that
//! starts before the watermark has been delivered. Up to the watermark the tracker then
//! - accounts each device's time as busy (inside the union of its records, whatever stream)
//!   or idle (outside it), into cumulative counters and fixed windows (one
//!   [`Event::Sample`] per window of `window_ns`, aligned to multiples of it);
//! - reports each idle gap between two busy intervals ([`Event::Gap`]) once the activity that
//!   ends it starts before the watermark. The time before a device's first activity, and the
//!   idle time after its last one, are accounted as idle but are not gaps: a gap needs both
//!   ends.
//!
//! A record that starts before the watermark but arrives after it broke the promise: its part
//! before the watermark is counted in `late_ns` and dropped, the rest is tracked as usual.
//! Timestamps are moved onto the host clock by adding `offset_ns` to each.

/// One activity record: work that occupied `device` from `start_ns` to `end_ns` (exclusive),
/// on the activity source's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Activity {
    pub device: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// A kernel of a collective-communication library (its name begins with `nccl`): busy
    /// time like any other, and also added to the device's collective counters.
    pub collective: bool,
}

/// What [`Tracker::advance`] reports, on the host clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// `device` ran nothing from `start_ns` for `len_ns`, between two pieces of work; only
    /// gaps of at least `min_gap_ns` (shorter ones are counted in [`DeviceTotals`]).
    Gap {
        device: u32,
        start_ns: u64,
        len_ns: u64,
    },
    /// A window is complete: of its `span_ns` accounted ns (the window's length, less what
    /// preceded the device's first activity or a restart), `busy_ns` were busy.
    Sample {
        device: u32,
        /// Start of the window (a multiple of `window_ns`).
        window_ns: u64,
        span_ns: u64,
        busy_ns: u64,
    },
}

/// Cumulative figures of one device, exact up to `final_ns`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceTotals {
    /// Time accounted (busy or idle) since the device's first activity.
    pub span_ns: u64,
    pub busy_ns: u64,
    /// Gaps shorter than `min_gap_ns`: not reported as events, counted here.
    pub short_gaps: u64,
    pub short_gap_ns: u64,
    /// Gaps reported as [`Event::Gap`], and their total length.
    pub gaps: u64,
    pub gap_ns: u64,
    /// Time of records that arrived after the watermark had passed it (dropped).
    pub late_ns: u64,
    /// Everything before this is final (0 before the device's first accounted activity).
    pub final_ns: u64,
    /// Busy fraction of the last complete window, in parts per million; `None` before one.
    pub last_sample_ppm: Option<u32>,
}

#[derive(Debug)]
struct Device {
    id: u32,
    /// Busy intervals not yet final: disjoint, sorted, none touching another.
    pending: Vec<(u64, u64)>,
    /// Accounted up to here; `None` until the first advance after the device's first record
    /// (or after a stop).
    final_to: Option<u64>,
    /// End of the last busy interval accounted: the start of the next gap.
    last_end: Option<u64>,
    window_start: u64,
    window_span: u64,
    window_busy: u64,
    totals: DeviceTotals,
}

/// Merges activity into busy intervals per device and reports gaps and samples.
#[derive(Debug)]
pub struct Tracker {
    devices: Vec<Device>,
    min_gap_ns: u64,
    window_ns: u64,
    offset_ns: i64,
}

impl Tracker {
    /// `min_gap_ns`: shorter gaps are only counted; `window_ns`: the length of a sample
    /// window (at least 1).
    pub fn new(min_gap_ns: u64, window_ns: u64) -> Tracker {
        Tracker {
            devices: Vec::new(),
            min_gap_ns,
            window_ns: window_ns.max(1),
            offset_ns: 0,
        }
    }

    /// Host clock minus activity clock: added to every timestamp fed from now on.
    pub fn set_offset(&mut self, offset_ns: i64) {
        self.offset_ns = offset_ns;
    }

    pub fn offset(&self) -> i64 {
        self.offset_ns
    }

    fn shift(&self, t: u64) -> u64 {
        t.saturating_add_signed(self.offset_ns)
    }

    fn device(&mut self, id: u32) -> &mut Device {
        let i = match self.devices.iter().position(|d| d.id == id) {
            Some(i) => i,
            None => {
                self.devices.push(Device {
                    id,
                    pending: Vec::new(),
                    final_to: None,
                    last_end: None,
                    window_start: 0,
                    window_span: 0,
                    window_busy: 0,
                    totals: DeviceTotals::default(),
                });
                self.devices.len() - 1
            }
        };
        &mut self.devices[i]
    }

    /// Adds one record (in any order relative to the others).
    pub fn add(&mut self, a: Activity) {
        let (mut s, e) = (self.shift(a.start_ns), self.shift(a.end_ns));
        let d = self.device(a.device);
        if let Some(f) = d.final_to {
            if s < f {
                d.totals.late_ns += e.min(f) - s;
                s = f;
            }
        }
        if e <= s {
            return;
        }
        insert(&mut d.pending, s, e);
    }

    /// Every record that starts before `watermark_ns` (host clock) has been added: accounts
    /// each device up to it and reports what became final, in time order per device.
    pub fn advance(&mut self, watermark_ns: u64, out: &mut (impl FnMut(Event) + ?Sized)) {
        let (min_gap, window) = (self.min_gap_ns, self.window_ns);
        for d in &mut self.devices {
            d.advance(watermark_ns, min_gap, window, out);
        }
    }

    /// Tracing stops at `at_ns` (duty cycle off, another tool took the activity source):
    /// accounts up to it, then forgets the open state, so that nothing is reported across the
    /// time not traced. Records added later start each device afresh.
    pub fn stop(&mut self, at_ns: u64, out: &mut (impl FnMut(Event) + ?Sized)) {
        self.advance(at_ns, out);
        for d in &mut self.devices {
            d.pending.clear();
            d.final_to = None;
            d.last_end = None;
            d.window_span = 0;
            d.window_busy = 0;
        }
    }

    /// The devices seen so far, in the order they were first seen, with their totals.
    pub fn totals(&self) -> impl Iterator<Item = (u32, &DeviceTotals)> {
        self.devices.iter().map(|d| (d.id, &d.totals))
    }
}

/// Inserts `[s, e)` into disjoint sorted `v`, merging what it overlaps or touches.
fn insert(v: &mut Vec<(u64, u64)>, s: u64, e: u64) {
    // First interval that ends at or after `s` (may merge), and the first that starts after
    // `e` (may not).
    let lo = v.partition_point(|iv| iv.1 < s);
    let hi = v.partition_point(|iv| iv.0 <= e);
    if lo == hi {
        v.insert(lo, (s, e));
        return;
    }
    let merged = (v[lo].0.min(s), v[hi - 1].1.max(e));
    v.drain(lo + 1..hi);
    v[lo] = merged;
}

impl Device {
    fn advance(
        &mut self,
        w: u64,
        min_gap: u64,
        window: u64,
        out: &mut (impl FnMut(Event) + ?Sized),
    ) {
        let cursor = match self.final_to {
            Some(f) => f,
            None => match self.pending.first() {
                // The device's accounting starts with its first activity.
                Some(&(s, _)) if s < w => {
                    self.window_start = s - s % window;
                    self.window_span = 0;
                    self.window_busy = 0;
                    s
                }
                _ => return,
            },
        };
        if w <= cursor {
            return;
        }
        let mut cursor = cursor;
        while let Some(&(s, e)) = self.pending.first() {
            if s >= w {
                break;
            }
            if s > cursor {
                self.account(cursor, s, false, window, out);
            }
            if let Some(le) = self.last_end {
                if s > le {
                    let len = s - le;
                    if len >= min_gap {
                        self.totals.gaps += 1;
                        self.totals.gap_ns += len;
                        out(Event::Gap {
                            device: self.id,
                            start_ns: le,
                            len_ns: len,
                        });
                    } else {
                        self.totals.short_gaps += 1;
                        self.totals.short_gap_ns += len;
                    }
                }
            }
            let s = s.max(cursor);
            if e <= w {
                self.account(s, e, true, window, out);
                self.pending.remove(0);
                self.last_end = Some(e);
                cursor = e;
            } else {
                // Still running at the watermark: busy up to it; the rest stays pending.
                self.account(s, w, true, window, out);
                self.pending[0].0 = w;
                self.last_end = Some(w);
                cursor = w;
            }
        }
        if cursor < w {
            self.account(cursor, w, false, window, out);
        }
        self.final_to = Some(w);
        self.totals.final_ns = w;
    }

    /// Accounts `[from, to)` as busy or idle, window by window.
    fn account(
        &mut self,
        from: u64,
        to: u64,
        busy: bool,
        window: u64,
        out: &mut (impl FnMut(Event) + ?Sized),
    ) {
        let mut t = from;
        while t < to {
            let wend = self.window_start + window;
            let piece = to.min(wend) - t;
            self.totals.span_ns += piece;
            self.window_span += piece;
            if busy {
                self.totals.busy_ns += piece;
                self.window_busy += piece;
            }
            t += piece;
            if t == wend {
                if let Some(ppm) = (self.window_busy * 1_000_000).checked_div(self.window_span) {
                    self.totals.last_sample_ppm = Some(ppm as u32);
                    out(Event::Sample {
                        device: self.id,
                        window_ns: self.window_start,
                        span_ns: self.window_span,
                        busy_ns: self.window_busy,
                    });
                }
                self.window_start = wend;
                self.window_span = 0;
                self.window_busy = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn act(device: u32, start_ns: u64, end_ns: u64) -> Activity {
        Activity {
            device,
            start_ns,
            end_ns,
            collective: false,
        }
    }

    fn run(t: &mut Tracker, w: u64) -> (Vec<(u32, u64, u64)>, Vec<Event>) {
        let mut gaps = Vec::new();
        let mut samples = Vec::new();
        t.advance(w, &mut |e| match e {
            Event::Gap {
                device,
                start_ns,
                len_ns,
            } => gaps.push((device, start_ns, len_ns)),
            s => samples.push(s),
        });
        (gaps, samples)
    }

    fn totals(t: &Tracker, device: u32) -> DeviceTotals {
        *t.totals().find(|(d, _)| *d == device).unwrap().1
    }

    #[test]
    fn overlap_across_streams_is_one_busy_interval() {
        // Stream A: [100, 200) and [300, 400); stream B: [150, 320): the device is busy from
        // 100 to 400 without a break.
        let mut t = Tracker::new(1, 1_000_000);
        for a in [act(0, 100, 200), act(0, 300, 400), act(0, 150, 320)] {
            t.add(a);
        }
        t.add(act(0, 600, 700));
        let (gaps, _) = run(&mut t, 10_000);
        assert_eq!(gaps, vec![(0, 400, 200)]);
        let tot = totals(&t, 0);
        assert_eq!(tot.busy_ns, 300 + 100);
        // Accounted from the first activity to the watermark.
        assert_eq!(tot.span_ns, 10_000 - 100);
        assert_eq!((tot.gaps, tot.gap_ns), (1, 200));
    }

    #[test]
    fn nested_and_touching_intervals_merge() {
        let mut t = Tracker::new(1, 1_000_000);
        // A long kernel with two short ones inside, a copy that starts exactly where it ends,
        // then a gap of 50.
        for a in [
            act(0, 1000, 5000),
            act(0, 1200, 1300),
            act(0, 4000, 4500),
            act(0, 5000, 5200),
            act(0, 5250, 5300),
        ] {
            t.add(a);
        }
        let (gaps, _) = run(&mut t, 6000);
        assert_eq!(gaps, vec![(0, 5200, 50)]);
        assert_eq!(totals(&t, 0).busy_ns, 4200 + 50);
    }

    #[test]
    fn out_of_order_buffers_give_the_same_gaps_as_in_order() {
        let acts = [
            act(0, 0, 10),
            act(0, 30, 40),
            act(0, 35, 60),
            act(0, 100, 120),
            act(0, 121, 130),
            act(0, 200, 210),
        ];
        let mut in_order = Tracker::new(1, 50);
        acts.iter().for_each(|a| in_order.add(*a));
        let want = run(&mut in_order, 1000);
        assert_eq!(
            want.0,
            vec![(0, 10, 20), (0, 60, 40), (0, 120, 1), (0, 130, 70)]
        );
        // Buffers delivered newest first, with the watermark behind what was delivered.
        let mut t = Tracker::new(1, 50);
        t.add(acts[5]);
        t.add(acts[3]);
        let (g, _) = run(&mut t, 0);
        assert!(g.is_empty());
        t.add(acts[4]);
        t.add(acts[2]);
        t.add(acts[0]);
        // Only what starts before 20 is promised: the gap [10, 30) is not final yet.
        let (g1, s1) = run(&mut t, 20);
        assert!(g1.is_empty(), "{g1:?}");
        t.add(acts[1]);
        let (g2, s2) = run(&mut t, 1000);
        assert_eq!([g1, g2].concat(), want.0);
        assert_eq!([s1, s2].concat(), want.1);
        assert_eq!(totals(&t, 0), totals(&in_order, 0));
    }

    #[test]
    fn a_gap_is_reported_only_once_its_end_is_final() {
        let mut t = Tracker::new(1, 1_000_000);
        t.add(act(0, 0, 100));
        // Idle after the last activity is not a gap: nothing ended it yet.
        let (g, _) = run(&mut t, 500);
        assert!(g.is_empty());
        assert_eq!(totals(&t, 0).busy_ns, 100);
        assert_eq!(totals(&t, 0).span_ns, 500);
        // Work that runs across the watermark: busy up to it, no gap inside it afterwards.
        t.add(act(0, 700, 1200));
        let (g, _) = run(&mut t, 1000);
        assert_eq!(g, vec![(0, 100, 600)]);
        t.add(act(0, 1300, 1400));
        let (g, _) = run(&mut t, 2000);
        assert_eq!(g, vec![(0, 1200, 100)]);
        let tot = totals(&t, 0);
        assert_eq!(tot.busy_ns, 100 + 500 + 100);
        assert_eq!(tot.span_ns, 2000);
        assert_eq!(tot.final_ns, 2000);
    }

    #[test]
    fn short_gaps_are_counted_not_reported_and_late_records_are_trimmed() {
        let mut t = Tracker::new(50, 1_000_000);
        t.add(act(0, 0, 100));
        t.add(act(0, 110, 200)); // gap of 10: short
        t.add(act(0, 300, 400)); // gap of 100: reported
        let (g, _) = run(&mut t, 500);
        assert_eq!(g, vec![(0, 200, 100)]);
        let tot = totals(&t, 0);
        assert_eq!((tot.short_gaps, tot.short_gap_ns), (1, 10));
        // A record from before the watermark: its final part is dropped and counted.
        t.add(act(0, 450, 520));
        t.add(act(0, 600, 700));
        let (g, _) = run(&mut t, 1000);
        // The surviving part [500, 520) ends the gap that began at 400, and a gap to 600
        // follows it.
        assert_eq!(g, vec![(0, 400, 100), (0, 520, 80)]);
        let tot = totals(&t, 0);
        assert_eq!(tot.late_ns, 50);
        assert_eq!(tot.busy_ns, 100 + 90 + 100 + 20 + 100);
    }

    #[test]
    fn clock_offset_moves_every_timestamp() {
        // The activity clock runs 1_000_000 ns behind the host clock.
        let mut t = Tracker::new(1, 1_000_000_000);
        t.set_offset(1_000_000);
        t.add(act(3, 0, 100));
        t.add(act(3, 400, 500));
        let (g, _) = run(&mut t, 2_000_000);
        assert_eq!(g, vec![(3, 1_000_100, 300)]);
        // And backwards: saturating at 0.
        let mut t = Tracker::new(1, 1_000_000_000);
        t.set_offset(-1_000);
        t.add(act(0, 500, 1_500));
        t.add(act(0, 2_000, 2_500));
        let (g, _) = run(&mut t, 10_000);
        assert_eq!(g, vec![(0, 500, 500)]);
        assert_eq!(t.offset(), -1_000);
    }

    #[test]
    fn devices_are_tracked_apart() {
        let mut t = Tracker::new(1, 1_000_000);
        // Device 1 is busy while device 0 idles: device 0 still has its gap.
        t.add(act(0, 0, 100));
        t.add(act(1, 50, 900));
        t.add(act(0, 800, 900));
        let (g, _) = run(&mut t, 1000);
        assert_eq!(g, vec![(0, 100, 700)]);
        assert_eq!(totals(&t, 1).busy_ns, 850);
        assert_eq!(totals(&t, 1).span_ns, 950);
        assert_eq!(t.totals().map(|(d, _)| d).collect::<Vec<_>>(), vec![0, 1]);
    }

    #[test]
    fn samples_cover_aligned_windows_and_add_up_to_the_totals() {
        let mut t = Tracker::new(1, 100);
        // Busy [50, 120), [180, 260); windows [0,100) (from 50), [100,200), [200,300).
        t.add(act(0, 50, 120));
        t.add(act(0, 180, 260));
        let (_, s) = run(&mut t, 300);
        let want = vec![
            Event::Sample {
                device: 0,
                window_ns: 0,
                span_ns: 50,
                busy_ns: 50,
            },
            Event::Sample {
                device: 0,
                window_ns: 100,
                span_ns: 100,
                busy_ns: 40,
            },
            Event::Sample {
                device: 0,
                window_ns: 200,
                span_ns: 100,
                busy_ns: 60,
            },
        ];
        assert_eq!(s, want);
        assert_eq!(totals(&t, 0).last_sample_ppm, Some(600_000));
        assert_eq!(totals(&t, 0).busy_ns, 150);
        assert_eq!(totals(&t, 0).span_ns, 250);
    }

    #[test]
    fn stop_reports_nothing_across_the_untraced_time() {
        let mut t = Tracker::new(1, 1_000_000);
        t.add(act(0, 0, 100));
        run(&mut t, 200);
        t.stop(300, &mut |_| {});
        assert_eq!(totals(&t, 0).span_ns, 300);
        // Traced again from 5000: the idle time from 100 to 5000 is no gap, and the untraced
        // time is not accounted.
        t.add(act(0, 5000, 5100));
        t.add(act(0, 5200, 5300));
        let (g, _) = run(&mut t, 6000);
        assert_eq!(g, vec![(0, 5100, 100)]);
        assert_eq!(totals(&t, 0).span_ns, 300 + 1000);
    }

    #[test]
    fn random_streams_match_a_brute_force_union() {
        // Deterministic pseudo-random activity on one device, delivered shuffled in buffers
        // with a watermark that lags: busy time must equal the union's length.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let mut acts = Vec::new();
        for _ in 0..400 {
            let s = next(100_000);
            acts.push(act(0, s, s + 1 + next(500)));
        }
        let mut busy = vec![false; 101_000];
        for a in &acts {
            busy[a.start_ns as usize..a.end_ns as usize]
                .iter_mut()
                .for_each(|b| *b = true);
        }
        let first = acts.iter().map(|a| a.start_ns).min().unwrap() as usize;
        let union = busy.iter().filter(|b| **b).count() as u64;
        let gaps_brute = (first..101_000)
            .filter(|i| *i > first && busy[*i] && !busy[*i - 1])
            .count() as u64;
        // Sorted by start, delivered in buffers of 16 whose order is shuffled within a lag.
        acts.sort_by_key(|a| a.start_ns);
        let mut t = Tracker::new(1, 7_000);
        let mut n_gaps = 0;
        for chunk in acts.chunks(16).collect::<Vec<_>>().chunks(3) {
            for c in chunk.iter().rev() {
                c.iter().for_each(|a| t.add(*a));
            }
            // Everything that starts before the last delivered start has arrived.
            let w = chunk.last().unwrap().last().unwrap().start_ns;
            t.advance(w, &mut |e| n_gaps += matches!(e, Event::Gap { .. }) as u64);
        }
        t.advance(101_000, &mut |e| {
            n_gaps += matches!(e, Event::Gap { .. }) as u64
        });
        let tot = totals(&t, 0);
        assert_eq!(tot.busy_ns, union);
        assert_eq!(tot.late_ns, 0);
        assert_eq!(n_gaps + tot.short_gaps, gaps_brute);
        assert_eq!(tot.span_ns, 101_000 - first as u64);
    }
}
