//! The agent's view of the host, as `syncspy agent` serves it at `/api/v1/snapshot` and as
//! `syncspy-top --agent` reads it: the wire model, shared by both sides.
//!
//! "Snapshot" in the reader, the agent and the monitor means this JSON. The hidden `syncspy
//! snapshot` command prints another format, the window (`cli/src/snapshot.rs`), which has a
//! version field of the same name and nothing else in common (docs/contracts.md, "Related
//! formats").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use syncspy_abi::Kind;

use crate::aggregate::{Dist, ProcessAgg, HALF_DECADES_NS};
use crate::names::KindName;
use crate::report::ProcessReport;

/// Count, time and bytes of a kind or a site in one report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Amounts {
    pub count: u64,
    pub total_ns: u64,
    pub bytes: u64,
}

impl Amounts {
    pub fn add(&mut self, count: u64, total_ns: u64, bytes: u64) {
        self.count = self.count.saturating_add(count);
        self.total_ns = self.total_ns.saturating_add(total_ns);
        self.bytes = self.bytes.saturating_add(bytes);
    }
}

/// `syncspy_snapshot` of the snapshots this code serves (the window's field of that name counts
/// its own versions).
pub const SNAPSHOT_VERSION: u32 = 1;

/// Upper bounds (ns) of the latency buckets served at `/metrics`: half decades from 10 µs to
/// 10 s, so `histogram_quantile` is within a factor of about 1.8 whatever the scale.
pub const LATENCY_BOUNDS_NS: &[u64] = HALF_DECADES_NS.split_at(2).1.split_at(13).0;

/// The recorded durations of one kind, bucketed at `LATENCY_BOUNDS_NS`. Built from the
/// records the agent received, so `count` may be below the exact event count when records
/// were lost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub count: u64,
    pub sum_ns: u64,
    /// Values in each bucket (not cumulative): one per bound, then one above the last.
    pub buckets: Vec<u64>,
}

impl Latency {
    /// The buckets of a recorded distribution.
    pub fn of(d: &Dist) -> Latency {
        Latency {
            count: d.count(),
            sum_ns: d.total_ns(),
            buckets: d.bucket_counts(LATENCY_BOUNDS_NS),
        }
    }

    pub fn add(&mut self, o: &Latency) {
        self.count = self.count.saturating_add(o.count);
        self.sum_ns = self.sum_ns.saturating_add(o.sum_ns);
        if self.buckets.len() < o.buckets.len() {
            self.buckets.resize(o.buckets.len(), 0);
        }
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            *a = a.saturating_add(*b);
        }
    }
}

/// Recorded latency buckets per kind name, of the kinds with records.
pub fn latency_of(a: &ProcessAgg) -> BTreeMap<KindName, Latency> {
    Kind::ALL
        .iter()
        .filter_map(|k| Some(((*k).into(), Latency::of(a.kind_dist(*k)?))))
        .collect()
}

/// One followed process in a snapshot: its report (as in `syncspy run --report`), the
/// bounded program label its metrics carry, and its recorded latency buckets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SnapshotProcess {
    pub program: String,
    #[serde(flatten)]
    pub report: ProcessReport,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub latency: BTreeMap<KindName, Latency>,
}

/// What the processes of one program that ended and were forgotten added up to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ForgottenProgram {
    pub processes: u64,
    pub kinds: BTreeMap<KindName, Amounts>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub latency: BTreeMap<KindName, Latency>,
    pub dropped_events: u64,
    pub lost_records: u64,
    pub overhead_ns: u64,
    /// The part of `overhead_ns` that was the host-wait machinery (ABI 1.11).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub host_wait_overhead_ns: u64,
    /// What their libraries shed to keep within budget, by what (`shed_amounts`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub shed: BTreeMap<String, u64>,
    /// The GPU idle their libraries measured behind stream and device syncs (ABI 1.10):
    /// syncs measured and the idle behind them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub idle_after_syncs: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub idle_after_ns: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// What one process's library shed, by what (`stacks`, `gap_records`, `records`, `looks`):
/// the amounts of `syncspy_shed_total`.
pub fn shed_amounts(c: &crate::report::CostReport) -> BTreeMap<String, u64> {
    [
        ("stacks", c.stacks_shed),
        ("gap_records", c.gap_records_shed),
        ("records", c.records_shed),
        ("looks", c.looks_skipped),
    ]
    .into_iter()
    .map(|(w, n)| (w.to_string(), n))
    .collect()
}

impl ForgottenProgram {
    /// Adds `o`'s totals to these (a label given back folds into its user's `other`).
    pub fn absorb(&mut self, o: &ForgottenProgram) {
        self.processes = self.processes.saturating_add(o.processes);
        for (k, a) in &o.kinds {
            self.kinds
                .entry(k.clone())
                .or_default()
                .add(a.count, a.total_ns, a.bytes);
        }
        for (k, l) in &o.latency {
            self.latency.entry(k.clone()).or_default().add(l);
        }
        self.dropped_events = self.dropped_events.saturating_add(o.dropped_events);
        self.lost_records = self.lost_records.saturating_add(o.lost_records);
        self.overhead_ns = self.overhead_ns.saturating_add(o.overhead_ns);
        self.host_wait_overhead_ns = self
            .host_wait_overhead_ns
            .saturating_add(o.host_wait_overhead_ns);
        for (w, n) in &o.shed {
            let e = self.shed.entry(w.clone()).or_default();
            *e = e.saturating_add(*n);
        }
        self.idle_after_syncs = self.idle_after_syncs.saturating_add(o.idle_after_syncs);
        self.idle_after_ns = self.idle_after_ns.saturating_add(o.idle_after_ns);
    }
}

/// The agent's view of the host (`/api/v1/snapshot`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub syncspy_snapshot: u32,
    pub host: String,
    /// When the snapshot was taken (Unix time, ns).
    pub time_unix_ns: u64,
    pub segment_dir: String,
    /// Processes followed now: running, and ended within the retention time.
    pub processes: Vec<SnapshotProcess>,
    /// Totals of ended processes no longer followed, by program label.
    pub forgotten: BTreeMap<String, ForgottenProgram>,
    /// Files in the segment folder that could not be read.
    pub segments_skipped: usize,
    /// What the agent's budgets dropped since it started (`limits::Dropped`), by what:
    /// `segment`, `histogram`, `module`, `deferred_poll`, `compacted`, `deferred_stack`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reader_dropped: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "<[crate::warning::Warning]>::is_empty")]
    pub warnings: crate::warning::Warnings,
}

/// Where `syncspy agent` writes, and `syncspy-top --agent` reads, the token that
/// `/api/v1/snapshot` asks for (`Authorization: Bearer TOKEN`) when `--token-file` is not
/// given: `/run/syncspy/agent.token` for root, `$XDG_RUNTIME_DIR/syncspy-agent.token` for
/// another user; `None` when neither applies.
pub fn default_token_file() -> Option<PathBuf> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return Some(PathBuf::from("/run/syncspy/agent.token"));
    }
    std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(&d).join("syncspy-agent.token"))
}

/// The token in a token file (its first line, without surrounding white space).
pub fn read_token(path: &Path) -> std::io::Result<String> {
    // Never a FIFO (a hang) or a device (an endless read).
    let bytes = crate::safe_file::read_bounded(path, 64 << 10, "a token file")?;
    let text = String::from_utf8_lossy(&bytes);
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the token file is empty",
        ));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_buckets_split_the_recorded_values_at_the_bounds() {
        let mut d = Dist::new(crate::aggregate::PROCESS_SIGFIG);
        for v in [
            5_000,
            5_000,
            50_000,
            50_000,
            50_000,
            2_000_000,
            20_000_000_000,
        ] {
            d.record(v, 0);
        }
        let l = Latency::of(&d);
        let mut want = vec![0; LATENCY_BOUNDS_NS.len() + 1];
        want[0] = 2; // <= 10 µs
        want[2] = 3; // (31.6 µs, 100 µs]
        want[5] = 1; // (1 ms, 3.16 ms]
        want[LATENCY_BOUNDS_NS.len()] = 1; // above 10 s
        assert_eq!(l.buckets, want);
        assert_eq!((l.count, l.sum_ns), (7, 20_002_160_000));
        let mut sum = l.clone();
        sum.add(&l);
        assert_eq!(sum.count, 14);
        assert_eq!(sum.buckets[2], 6);
    }
}
