//! The "last N seconds" view: a ring of per-second bins per kind and per call site, fed with
//! each record as it arrives and keyed by the second in which the call ended. Memory is
//! bounded: at most `secs + 1` seconds are kept, each with at most `MAX_SITES_PER_SECOND`
//! site bins (further sites in that second count in `overflow`).

use std::collections::VecDeque;

use syncspy_abi::{Kind, Record};
use syncspy_read::aggregate::{SiteKey, SiteMap};

use crate::loghist::LogHist;
use crate::model::STALL_KINDS;

/// Distinct call sites one second may hold.
pub const MAX_SITES_PER_SECOND: usize = 256;
/// Longest window the monitor accepts, seconds.
pub const MAX_WINDOW_SECS: u64 = 300;

/// Events of one kind or site.
#[derive(Clone, Debug, Default)]
pub struct Bin {
    pub hist: LogHist,
    pub total_ns: u64,
    pub max_ns: u64,
}

impl Bin {
    pub fn record(&mut self, ns: u64) {
        self.hist.record(ns);
        self.total_ns = self.total_ns.saturating_add(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    pub fn merge(&mut self, o: &Bin) {
        self.hist.merge(&o.hist);
        self.total_ns = self.total_ns.saturating_add(o.total_ns);
        self.max_ns = self.max_ns.max(o.max_ns);
    }

    pub fn count(&self) -> u64 {
        self.hist.count()
    }
}

struct Second {
    t: u64,
    kinds: [Option<Box<Bin>>; STALL_KINDS.len()],
    sites: SiteMap<Bin>,
}

/// The index of a host stall kind in `STALL_KINDS`.
pub fn kind_index(k: Kind) -> Option<usize> {
    STALL_KINDS.iter().position(|x| *x == k)
}

/// Per-second bins of one process.
pub struct Window {
    secs: u64,
    seconds: VecDeque<Second>,
    /// Events whose site found no room in its second.
    pub overflow: u64,
}

/// A window merged over its seconds.
#[derive(Default)]
pub struct Merged {
    pub kinds: [Option<Bin>; STALL_KINDS.len()],
    pub sites: SiteMap<Bin>,
}

impl Window {
    pub fn new(secs: u64) -> Window {
        Window {
            secs: secs.clamp(1, MAX_WINDOW_SECS),
            seconds: VecDeque::new(),
            overflow: 0,
        }
    }

    pub fn secs(&self) -> u64 {
        self.secs
    }

    pub fn clear(&mut self) {
        self.seconds.clear();
    }

    /// Adds a record; `now_s` is the current CLOCK_MONOTONIC second. Records that ended
    /// before the window (read late, e.g. when the monitor attached) are not added.
    pub fn add(&mut self, r: &Record, now_s: u64) {
        let Some(ki) = kind_index(r.kind) else { return };
        let t = (r.start_ns.saturating_add(r.duration_ns) / 1_000_000_000).min(now_s);
        if t + self.secs <= now_s {
            return;
        }
        // Records arrive nearly in time order: look from the back.
        let pos = self.seconds.iter().rposition(|s| s.t <= t);
        let idx = match pos {
            Some(i) if self.seconds[i].t == t => i,
            p => {
                let at = p.map_or(0, |i| i + 1);
                self.seconds.insert(
                    at,
                    Second {
                        t,
                        kinds: Default::default(),
                        sites: SiteMap::default(),
                    },
                );
                at
            }
        };
        let s = &mut self.seconds[idx];
        s.kinds[ki]
            .get_or_insert_with(Default::default)
            .record(r.duration_ns);
        let key = SiteKey {
            site: r.site,
            kind: r.kind,
            api: r.api,
        };
        if let Some(b) = s.sites.get_mut(&key) {
            b.record(r.duration_ns);
        } else if s.sites.len() < MAX_SITES_PER_SECOND {
            s.sites.entry(key).or_default().record(r.duration_ns);
        } else {
            self.overflow += 1;
        }
        self.expire(now_s);
    }

    /// Drops seconds that fell out of the window.
    pub fn expire(&mut self, now_s: u64) {
        while self
            .seconds
            .front()
            .is_some_and(|s| s.t + self.secs <= now_s)
        {
            self.seconds.pop_front();
        }
    }

    /// Everything in the window ending at `now_s`.
    pub fn merged(&mut self, now_s: u64) -> Merged {
        self.expire(now_s);
        let mut m = Merged::default();
        for s in &self.seconds {
            for (i, k) in s.kinds.iter().enumerate() {
                if let Some(b) = k {
                    m.kinds[i].get_or_insert_with(Default::default).merge(b);
                }
            }
            for (key, b) in &s.sites {
                m.sites.entry(*key).or_default().merge(b);
            }
        }
        m
    }

    /// Seconds held (bounded by `secs + 1`).
    pub fn held(&self) -> usize {
        self.seconds.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncspy_abi::{Api, Direction};

    fn rec(kind: Kind, end_s: u64, dur: u64, site: u32) -> Record {
        Record {
            kind,
            api: Api::CudaStreamSynchronize,
            direction: Direction::None,
            flags: 0,
            device: 0,
            start_ns: end_s * 1_000_000_000 - dur,
            duration_ns: dur,
            bytes: 0,
            stream: 0,
            tid: 1,
            site,
            result: 0,
            polls: 0,
        }
    }

    #[test]
    fn keeps_only_the_last_seconds_and_stays_bounded() {
        let mut w = Window::new(10);
        for t in 100..200u64 {
            w.add(&rec(Kind::StreamSync, t, 1_000, 1), t);
            assert!(w.held() <= 11);
        }
        let m = w.merged(199);
        let b = m.kinds[0].as_ref().unwrap();
        assert_eq!(b.count(), 10);
        assert_eq!(b.total_ns, 10_000);
        // Ten seconds later nothing is left.
        assert!(w.merged(209).kinds[0].is_none());
    }

    #[test]
    fn late_records_older_than_the_window_are_not_recent() {
        let mut w = Window::new(5);
        w.add(&rec(Kind::DeviceSync, 10, 7, 0), 100);
        w.add(&rec(Kind::DeviceSync, 98, 9, 0), 100);
        // Out of order but inside the window.
        w.add(&rec(Kind::DeviceSync, 97, 11, 0), 100);
        let m = w.merged(100);
        let b = m.kinds[1].as_ref().unwrap();
        assert_eq!((b.count(), b.total_ns, b.max_ns), (2, 20, 11));
        // GPU idle gaps are not host stalls.
        w.add(&rec(Kind::GpuIdle, 100, 5, 0), 100);
        assert_eq!(w.merged(100).sites.len(), 1);
    }

    #[test]
    fn sites_per_second_are_capped() {
        let mut w = Window::new(5);
        for site in 0..(MAX_SITES_PER_SECOND as u32 + 10) {
            w.add(&rec(Kind::StreamSync, 50, 1, site), 50);
        }
        assert_eq!(w.overflow, 10);
        let m = w.merged(50);
        assert_eq!(m.sites.len(), MAX_SITES_PER_SECOND);
        // The kind still counts every event.
        assert_eq!(
            m.kinds[0].as_ref().unwrap().count(),
            MAX_SITES_PER_SECOND as u64 + 10
        );
    }
}
