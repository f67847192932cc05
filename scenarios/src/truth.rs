//! The ground-truth account a program prints at exit: per CUDA API, how many calls it made,
//! the bytes they moved, and the host time each took as the program itself measured it; and,
//! for the calls made through [`Truth::classified`], how syncspy must classify them.

use std::collections::BTreeMap;
use std::time::Instant;

#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    pub count: u64,
    pub bytes: u64,
    pub total_ns: u64,
    pub max_ns: u64,
}

pub use syncspy_manifest::Kind;

#[derive(Debug, Default)]
pub struct Truth {
    /// Every call, by API.
    pub calls: BTreeMap<&'static str, Tally>,
    /// Calls made through [`Truth::classified`] that stall, by kind name.
    pub kinds: BTreeMap<&'static str, Tally>,
    /// Calls made through [`Truth::classified`] that do not stall, by API.
    pub non_stall: BTreeMap<&'static str, Tally>,
    /// Spins on a query until it found the work done (`cudacalls` `poll=S`), by API.
    pub polls: BTreeMap<&'static str, Spins>,
}

/// Spin loops on one query API: how many, how many of them saw the work pending at least
/// once (each of those is one `poll_wait`), the not-ready answers, and the time from before
/// the first query to after the last, summed over the spins that waited.
#[derive(Clone, Copy, Debug, Default)]
pub struct Spins {
    pub spins: u64,
    pub waited: u64,
    pub not_ready: u64,
    pub wait_ns: u64,
}

impl Tally {
    fn add(&mut self, bytes: u64, ns: u64) {
        self.count += 1;
        self.bytes += bytes;
        self.total_ns += ns;
        self.max_ns = self.max_ns.max(ns);
    }

    fn merge(&mut self, other: &Tally) {
        self.count += other.count;
        self.bytes += other.bytes;
        self.total_ns += other.total_ns;
        self.max_ns = self.max_ns.max(other.max_ns);
    }
}

impl Truth {
    /// Runs `f` (one CUDA call named `api`), timing it, and adds it to the account.
    pub fn call<R>(&mut self, api: &'static str, bytes: u64, f: impl FnOnce() -> R) -> R {
        self.timed(api, bytes, f).0
    }

    /// Runs `f` (one CUDA call named `api`, which syncspy must classify as `kind`), timing it,
    /// and adds it to the account under its API and its kind.
    pub fn classified<R>(
        &mut self,
        api: &'static str,
        kind: Kind,
        bytes: u64,
        f: impl FnOnce() -> R,
    ) -> R {
        let (r, ns) = self.timed(api, bytes, f);
        match kind {
            Kind::NonStall => self.non_stall.entry(api).or_default().add(bytes, ns),
            k => self.kinds.entry(k.name()).or_default().add(bytes, ns),
        }
        r
    }

    fn timed<R>(&mut self, api: &'static str, bytes: u64, f: impl FnOnce() -> R) -> (R, u64) {
        let t = Instant::now();
        let r = f();
        let ns = t.elapsed().as_nanos() as u64;
        self.calls.entry(api).or_default().add(bytes, ns);
        (r, ns)
    }

    /// One spin on query `api` that got `not_ready` not-ready answers before the ready one,
    /// taking `ns` from before its first query to after its last.
    pub fn spin(&mut self, api: &'static str, not_ready: u64, ns: u64) {
        let s = self.polls.entry(api).or_default();
        s.spins += 1;
        if not_ready > 0 {
            s.waited += 1;
            s.not_ready += not_ready;
            s.wait_ns += ns;
        }
    }

    pub fn merge(&mut self, other: &Truth) {
        for (k, v) in &other.polls {
            let s = self.polls.entry(k).or_default();
            s.spins += v.spins;
            s.waited += v.waited;
            s.not_ready += v.not_ready;
            s.wait_ns += v.wait_ns;
        }
        for (map, theirs) in [
            (&mut self.calls, &other.calls),
            (&mut self.kinds, &other.kinds),
            (&mut self.non_stall, &other.non_stall),
        ] {
            for (k, v) in theirs {
                map.entry(k).or_default().merge(v);
            }
        }
    }

    /// One JSON object: `{"pid":..,"calls":{"api":{"count":..,"bytes":..,"total_ns":..,"max_ns":..}},
    /// "polls":{"api":{"spins":..,"waited":..,"not_ready":..,"wait_ns":..}}}`.
    pub fn to_json(&self, pid: u32) -> String {
        let calls: Vec<String> = self
            .calls
            .iter()
            .map(|(k, v)| {
                format!(
                    "\"{k}\":{{\"count\":{},\"bytes\":{},\"total_ns\":{},\"max_ns\":{}}}",
                    v.count, v.bytes, v.total_ns, v.max_ns
                )
            })
            .collect();
        let polls: Vec<String> = self
            .polls
            .iter()
            .map(|(k, v)| {
                format!(
                    "\"{k}\":{{\"spins\":{},\"waited\":{},\"not_ready\":{},\"wait_ns\":{}}}",
                    v.spins, v.waited, v.not_ready, v.wait_ns
                )
            })
            .collect();
        format!(
            "{{\"pid\":{pid},\"calls\":{{{}}},\"polls\":{{{}}}}}",
            calls.join(","),
            polls.join(",")
        )
    }
}
