//! Per-process aggregation of one segment: exact totals copied from the header, and latency
//! distributions (HDR histograms) built from the ring records this reader received.
//!
//! The two sources can differ only by records the reader lost (ring overflow, a writer that
//! never finished a slot): counts, totals, bytes and maxima come from the header and are
//! exact; percentiles and call sites come from the records and cover `recorded_count` of
//! `count` events. Reports show both.

use std::collections::{BTreeMap, HashMap, VecDeque};

use hdrhistogram::Histogram;
use syncspy_abi::gpu::GpuStatus;
use syncspy_abi::layout::{TotalsSnapshot, API_SLOTS, KIND_SLOTS};
use syncspy_abi::{Api, Direction, Ident, Kind, PollStats, ProcState, Record, SegmentReader};

/// Smallest duration a histogram tracks; shorter ones are clamped to it and counted.
pub const HIST_LOW_NS: u64 = 1;
/// Largest duration a histogram tracks (one hour); longer ones are clamped and counted.
pub const HIST_HIGH_NS: u64 = 3_600 * 1_000_000_000;
/// Significant digits of the per-kind and per-API histograms.
pub const PROCESS_SIGFIG: u8 = 3;
/// Significant digits of the per-call-site histograms. Two digits (1% precision) instead of
/// three keep one histogram at ~36 KiB instead of ~270 KiB: a process may have thousands of
/// sites, and a site's p99 does not need more.
pub const SITE_SIGFIG: u8 = 2;

/// Half decades from 1 µs to 31.6 s (ns): the cell edges of the monitor's latency bars and
/// the bucket bounds of the agent's latency histogram use slices of it.
pub const HALF_DECADES_NS: [u64; 16] = [
    1_000,
    3_162,
    10_000,
    31_623,
    100_000,
    316_228,
    1_000_000,
    3_162_278,
    10_000_000,
    31_622_777,
    100_000_000,
    316_227_766,
    1_000_000_000,
    3_162_277_660,
    10_000_000_000,
    31_622_776_602,
];

/// A latency distribution with explicit bounds, plus exact figures over the same values.
#[derive(Clone)]
pub struct Dist {
    hist: Histogram<u64>,
    /// Values outside `HIST_LOW_NS..=HIST_HIGH_NS`, recorded clamped to the nearest bound.
    clamped: u64,
    total_ns: u64,
    max_ns: u64,
    bytes: u64,
    /// `poll_wait` events: the not-ready queries of those recorded (`Record::polls`).
    polls: u64,
}

impl Dist {
    /// An empty distribution with `sigfig` significant digits (1..=5).
    pub fn new(sigfig: u8) -> Dist {
        let hist = Histogram::new_with_bounds(HIST_LOW_NS, HIST_HIGH_NS, sigfig.clamp(1, 5))
            .expect("constant histogram bounds are valid");
        Dist {
            hist,
            clamped: 0,
            total_ns: 0,
            max_ns: 0,
            bytes: 0,
            polls: 0,
        }
    }

    /// Adds the not-ready queries of a recorded `poll_wait`.
    pub fn add_polls(&mut self, polls: u32) {
        self.polls = self.polls.saturating_add(u64::from(polls));
    }

    /// The not-ready queries of the recorded `poll_wait` events.
    pub fn polls(&self) -> u64 {
        self.polls
    }

    /// Adds one event.
    pub fn record(&mut self, duration_ns: u64, bytes: u64) {
        let v = duration_ns.clamp(HIST_LOW_NS, HIST_HIGH_NS);
        if v != duration_ns {
            self.clamped += 1;
        }
        self.hist.saturating_record(v);
        self.total_ns = self.total_ns.saturating_add(duration_ns);
        self.max_ns = self.max_ns.max(duration_ns);
        self.bytes = self.bytes.saturating_add(bytes);
    }

    /// Events recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Sum of the recorded durations (unclamped).
    pub fn total_ns(&self) -> u64 {
        self.total_ns
    }

    /// Largest recorded duration (unclamped).
    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Values that fell outside the histogram's bounds.
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// Adds every event of `other` (two call sites shown as one).
    pub fn merge(&mut self, other: &Dist) {
        // Same bounds and precision by construction (`Dist::new`); saturating on overflow.
        let _ = self.hist.add(&other.hist);
        self.clamped = self.clamped.saturating_add(other.clamped);
        self.total_ns = self.total_ns.saturating_add(other.total_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
        self.bytes = self.bytes.saturating_add(other.bytes);
    }

    /// The recorded values split at `bounds_ns` (ascending upper bounds, inclusive): one
    /// count per bound, then one for the values above the last; within the histogram's
    /// precision (a value is placed by the top of its HDR bin). One pass over the bins
    /// that hold values.
    pub fn bucket_counts(&self, bounds_ns: &[u64]) -> Vec<u64> {
        let mut out = vec![0u64; bounds_ns.len() + 1];
        for v in self.hist.iter_recorded() {
            let top = self.hist.highest_equivalent(v.value_iterated_to());
            let i = bounds_ns.partition_point(|b| *b < top);
            out[i] = out[i].saturating_add(v.count_at_value());
        }
        out
    }

    /// Heap bytes the histogram's counts take (an estimate for `limits`).
    pub fn heap_bytes(&self) -> u64 {
        (self.hist.distinct_values() as u64).saturating_mul(8)
    }

    /// The same events at `sigfig` significant digits (a smaller histogram).
    pub fn downsampled(&self, sigfig: u8) -> Dist {
        if self.hist.sigfig() <= sigfig {
            return self.clone();
        }
        let mut hist = Histogram::new_with_bounds(HIST_LOW_NS, HIST_HIGH_NS, sigfig.clamp(1, 5))
            .expect("constant histogram bounds are valid");
        // Same bounds: a histogram of less precision takes every value of this one.
        let _ = hist.add(&self.hist);
        Dist {
            hist,
            clamped: self.clamped,
            total_ns: self.total_ns,
            max_ns: self.max_ns,
            bytes: self.bytes,
            polls: self.polls,
        }
    }

    /// The value at quantile `q` (0..=1), within the histogram's precision and never above
    /// the exact maximum; 0 when nothing was recorded.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.hist.is_empty() {
            return 0;
        }
        self.hist.value_at_quantile(q).min(self.max_ns)
    }
}

/// A plain copy of a segment's live counters (the `Live` section's atomics, its header's
/// state and parts), taken after a poll.
#[derive(Clone, Debug)]
pub struct LiveCounters {
    pub state: ProcState,
    /// CLOCK_MONOTONIC ns of the process's exit handler, 0 while running.
    pub ended_ns: u64,
    pub write_seq: u64,
    pub events_written: u64,
    pub events_dropped: u64,
    pub overhead_ns: u64,
    pub stack_captures: u64,
    pub stack_ns: u64,
    pub stack_cache_hits: u64,
    pub sites_used: u32,
    pub sites_dropped: u32,
    pub modules_used: u32,
    pub modules_dropped: u32,
    /// Exact totals per kind (`Kind as usize`).
    pub kinds: [TotalsSnapshot; KIND_SLOTS],
    /// Exact totals per API (`Api as usize`).
    pub apis: [TotalsSnapshot; API_SLOTS],
    /// Non-stalling calls per API (count and bytes; not timed).
    pub calls: [TotalsSnapshot; API_SLOTS],
    /// The GPU part of the header (ABI 1.2); `None` for older segments.
    pub gpu: Option<GpuStatus>,
    /// The control part of the header (ABI 1.4: tracing request, collective kernels);
    /// `None` for older segments.
    pub control: Option<syncspy_abi::control::ControlStatus>,
    /// The collectives part (ABI 1.8: NCCL calls and their GPU time); `None` for older
    /// segments.
    pub collectives: Option<syncspy_abi::collectives::CollectiveCalls>,
    /// The cost part (ABI 1.9: the library's budget and what it shed); `None` for older
    /// segments.
    pub cost: Option<syncspy_abi::cost::CostStatus>,
    /// The host-wait machinery's share of `overhead_ns` (ABI 1.11); `None` for older
    /// segments.
    pub host_wait_own_ns: Option<u64>,
}

impl Default for LiveCounters {
    fn default() -> Self {
        LiveCounters {
            state: ProcState::Running,
            ended_ns: 0,
            write_seq: 0,
            events_written: 0,
            events_dropped: 0,
            overhead_ns: 0,
            stack_captures: 0,
            stack_ns: 0,
            stack_cache_hits: 0,
            sites_used: 0,
            sites_dropped: 0,
            modules_used: 0,
            modules_dropped: 0,
            kinds: [TotalsSnapshot::default(); KIND_SLOTS],
            apis: [TotalsSnapshot::default(); API_SLOTS],
            calls: [TotalsSnapshot::default(); API_SLOTS],
            gpu: None,
            control: None,
            collectives: None,
            cost: None,
            host_wait_own_ns: None,
        }
    }
}

impl LiveCounters {
    /// Host stalls counted (every kind but `gpu_idle`, which is the GPU's, not the host's).
    pub fn stall_events(&self) -> u64 {
        Kind::ALL
            .iter()
            .filter(|k| k.is_host_stall())
            .map(|k| self.kind(*k).count)
            .fold(0u64, u64::saturating_add)
    }

    pub fn read(r: &SegmentReader) -> LiveCounters {
        use std::sync::atomic::Ordering::Relaxed;
        let live = r.live();
        LiveCounters {
            state: r.state(),
            ended_ns: live.ended_ns.load(Relaxed),
            write_seq: r.head(),
            events_written: live.written(),
            events_dropped: live.events_dropped.load(Relaxed),
            overhead_ns: live.overhead_ns.load(Relaxed),
            stack_captures: live.stack_captures.load(Relaxed),
            stack_ns: live.stack_ns.load(Relaxed),
            stack_cache_hits: live.stack_cache_hits.load(Relaxed),
            sites_used: live.sites_used.load(Relaxed),
            sites_dropped: live.sites_dropped.load(Relaxed),
            modules_used: live.modules_used.load(Relaxed),
            modules_dropped: live.modules_dropped.load(Relaxed),
            kinds: std::array::from_fn(|i| live.kinds[i].snapshot()),
            apis: std::array::from_fn(|i| live.apis[i].snapshot()),
            calls: std::array::from_fn(|i| live.calls[i].snapshot()),
            gpu: r.gpu_status(),
            control: r.control_status(),
            collectives: r.collective_calls(),
            cost: r.cost_status(),
            host_wait_own_ns: r.host_wait_own_ns(),
        }
    }

    pub fn kind(&self, k: Kind) -> TotalsSnapshot {
        self.kinds.get(k as usize).copied().unwrap_or_default()
    }

    pub fn api(&self, a: Api) -> TotalsSnapshot {
        self.apis.get(a as usize).copied().unwrap_or_default()
    }

    pub fn calls(&self, a: Api) -> TotalsSnapshot {
        self.calls.get(a as usize).copied().unwrap_or_default()
    }

    /// Over every device of the GPU part: `(span_ns, busy_ns)`; zeros without one.
    pub fn gpu_busy(&self) -> (u64, u64) {
        self.gpu.as_ref().map(GpuStatus::busy).unwrap_or_default()
    }

    /// (active ns, busy ns) of the GPU, all devices together: its time from each device's
    /// first work to its last final one (busy time, the gaps and the short gaps), so without
    /// the set-up before and the teardown after. The one definition of the GPU's idle share
    /// every view shows (`1 - busy / active`).
    pub fn gpu_active(&self) -> (u64, u64) {
        let (span, busy) = self.gpu_busy();
        let short: u64 = self.gpu.as_ref().map_or(0, |g| {
            g.devices
                .iter()
                .map(|d| d.short_gap_ns)
                .fold(0, u64::saturating_add)
        });
        let between = self.kind(Kind::GpuIdle).total_ns.saturating_add(short);
        (busy.saturating_add(between).min(span.max(busy)), busy)
    }
}

/// What a GPU idle gap is blamed on (reader-side attribution, [`GapCauses`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GapCause {
    /// A host stall of this call site: the one the host was in when the GPU drained, or else
    /// the first one it began during the gap.
    Stall(SiteKey),
    /// No recorded host stall explains the gap: the host was doing something else (Python,
    /// data loading, a CUDA call that does not stall) until it launched the next work.
    HostBusyElsewhere,
}

/// One host stall remembered for attribution.
#[derive(Clone, Copy, Debug)]
struct RecentStall {
    start: u64,
    end: u64,
    device: i32,
    key: SiteKey,
}

/// Host stalls kept for attribution. Gap records trail the stalls around them by the GPU
/// tracer's finality delay (well under a second); a process stalling 20,000 times a second
/// still keeps a few seconds of them.
pub const RECENT_STALLS: usize = 1 << 16;

/// How far behind the latest stalls kept a stall's end may be and still be kept: a real
/// writer's records arrive nearly in order of their end (its threads' records interleave by
/// a few), so this bounds the cost of keeping one (a hostile segment's records in random
/// order cost a search of the whole window and a move of half of it each).
pub const OUT_OF_ORDER_STALLS: usize = 1024;

/// Attributes GPU idle gaps to the host stalls around them, from the records received: each
/// gap goes to the host stall that overlapped the instant the GPU drained (the longest such
/// overlap when several threads stalled), else to the first host stall that began during the
/// gap, else to [`GapCause::HostBusyElsewhere`]. Only stalls on the gap's device (or on an
/// unknown one) count.
#[derive(Clone, Debug, Default)]
pub struct GapCauses {
    /// Sorted by end.
    recent: VecDeque<RecentStall>,
    /// The longest duration among the stalls ever kept: bounds the search.
    max_len: u64,
    causes: HashMap<GapCause, (u64, u64)>,
    /// Stalls not kept: their end was further behind the latest ones than
    /// [`OUT_OF_ORDER_STALLS`].
    out_of_order: u64,
}

impl GapCauses {
    /// Stalls not kept for attribution because they arrived too far out of order.
    pub fn out_of_order(&self) -> u64 {
        self.out_of_order
    }

    /// Remembers a host stall.
    pub fn stall(&mut self, r: &Record) {
        let s = RecentStall {
            start: r.start_ns,
            end: r.start_ns.saturating_add(r.duration_ns),
            device: r.device,
            key: SiteKey {
                site: r.site,
                kind: r.kind,
                api: r.api,
            },
        };
        // Records arrive about in order of their end (threads interleave): insert from the
        // back, at most OUT_OF_ORDER_STALLS back.
        let at = self
            .recent
            .iter()
            .rev()
            .take(OUT_OF_ORDER_STALLS + 1)
            .take_while(|x| x.end > s.end)
            .count();
        if at > OUT_OF_ORDER_STALLS {
            self.out_of_order += 1;
            return;
        }
        self.max_len = self.max_len.max(r.duration_ns);
        let at = self.recent.len() - at;
        if self.recent.len() == RECENT_STALLS {
            self.recent.pop_front();
            if at == 0 {
                // Older than every stall left: the window has moved past it.
                self.out_of_order += 1;
                return;
            }
            self.recent.insert(at - 1, s);
        } else {
            self.recent.insert(at, s);
        }
    }

    /// Attributes one gap of `device` from `start` for `len` ns; returns its cause.
    pub fn gap(&mut self, device: i32, start: u64, len: u64) -> GapCause {
        let end = start.saturating_add(len);
        let first = self.recent.partition_point(|x| x.end <= start);
        let mut over: Option<(u64, SiteKey)> = None;
        let mut during: Option<(u64, SiteKey)> = None;
        for x in self.recent.range(first..) {
            // Sorted by end: past here every stall starts after the gap ended.
            if x.end.saturating_sub(self.max_len) >= end {
                break;
            }
            if x.device >= 0 && x.device != device {
                continue;
            }
            if x.start <= start {
                let overlap = x.end.min(end) - start;
                if over.is_none_or(|(o, _)| overlap > o) {
                    over = Some((overlap, x.key));
                }
            } else if x.start < end && during.is_none_or(|(t, _)| x.start < t) {
                during = Some((x.start, x.key));
            }
        }
        let cause = match over.or(during) {
            Some((_, key)) => GapCause::Stall(key),
            None => GapCause::HostBusyElsewhere,
        };
        let c = self.causes.entry(cause).or_default();
        c.0 += 1;
        c.1 = c.1.saturating_add(len);
        cause
    }

    /// Every cause with its `(gaps, idle ns)`, most idle time first.
    pub fn by_total(&self) -> Vec<(GapCause, u64, u64)> {
        let mut v: Vec<_> = self.causes.iter().map(|(c, (n, t))| (*c, *n, *t)).collect();
        v.sort_by(|a, b| b.2.cmp(&a.2).then(b.1.cmp(&a.1)).then(a.0.cmp(&b.0)));
        v
    }
}

/// One call site as aggregated: a stack (site id; 0 when none was captured) seen making
/// calls of one kind through one API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteKey {
    pub site: u32,
    pub kind: Kind,
    pub api: Api,
}

/// A map keyed by call site. A record's key is hashed once per record on the monitor's and
/// the agent's hot path, so it uses a fast non-keyed hash (the keys are ids from a segment,
/// not strings; a segment could choose colliding ids, but the maps are bounded by
/// [`MAX_SITE_KEYS`], so collisions cost at most that many probes).
pub type SiteMap<V> = HashMap<SiteKey, V, foldhash::fast::FixedState>;

/// Call sites (site, kind, API) a process keeps a histogram for (each ~36 KiB): whatever its
/// segment says, a process costs a reader at most this many. Records of further sites count
/// in their kind's and API's figures, not in a site's, and are counted in
/// [`ProcessAgg::refused_site_records`].
pub const MAX_SITE_KEYS: usize = 1024;

/// Call sites an ended process keeps once compacted ([`ProcessAgg::compact`]), those with
/// the most recorded time.
pub const COMPACT_SITES: usize = 16;
/// Heap bytes of one histogram at [`PROCESS_SIGFIG`] and at [`SITE_SIGFIG`], as charged to
/// a user's account (`limits::Account`) when a process makes one.
pub const PROCESS_DIST_BYTES: u64 = 33_792 * 8;
pub const SITE_DIST_BYTES: u64 = 4_608 * 8;

/// How a process ended, as far as the reader can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    Running,
    /// The library's exit handler ran with this status.
    Exited(i32),
    /// The process is gone without an exit handler (killed by a signal, `_exit`).
    Gone,
    /// The state word holds a value this reader does not know.
    Unknown,
}

impl Lifecycle {
    pub fn name(self) -> &'static str {
        match self {
            Lifecycle::Running => "running",
            Lifecycle::Exited(_) => "exited",
            Lifecycle::Gone => "gone",
            Lifecycle::Unknown => "unknown",
        }
    }
}

/// `cudaErrorStreamCaptureUnsupported` and `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` (the same
/// number): a synchronizing call made while its stream was capturing a CUDA graph; the
/// capture is invalidated.
pub const CAPTURE_UNSUPPORTED: u32 = 900;

/// Everything known about one process (one segment). Only the aggregate and the follower
/// that polls it write its fields (the follower: the header counters after each poll, when
/// the process was found gone, and what it knew when it opened the segment), so every field
/// is private and read through a method of the same name; the one write a caller makes is a
/// monitor's reset ([`ProcessAgg::restart_records`]).
pub struct ProcessAgg {
    pid: u32,
    start_ticks: u64,
    session: u64,
    argv: Vec<String>,
    /// CLOCK_MONOTONIC ns when the segment was created.
    created_ns: u64,
    created_unix_ns: u64,
    /// Header counters as of the last poll.
    live: LiveCounters,
    /// CLOCK_MONOTONIC ns when this reader first found the process gone without an exit
    /// handler; the end of its wall time.
    gone_ns: Option<u64>,
    /// Records delivered by the ring, sequence numbers this reader will never see, and
    /// complete records that did not decode.
    delivered: u64,
    lost: u64,
    corrupt: u64,
    /// Records whose site id lies outside the segment's site table: aggregated under "no
    /// site" (0).
    bad_site_records: u64,
    /// Records of a call site that found no room among the [`MAX_SITE_KEYS`] this process
    /// keeps, or whose histogram the user's heap budget refused (`limits`): in their kind's
    /// and API's figures, in no site's.
    refused_site_records: u64,
    /// Valid site ids are `1..=site_capacity` (from the validated header).
    site_capacity: u32,
    /// Recorded distributions, indexed by `Kind as usize` and `Api as usize`.
    kinds: Vec<Option<Dist>>,
    apis: Vec<Option<Dist>>,
    sites: SiteMap<Dist>,
    /// Copies received, by kind and direction: (count, bytes, total_ns).
    copies: BTreeMap<(Kind, Direction), (u64, u64, u64)>,
    /// GPU idle gaps received, blamed on host stalls.
    gap_causes: GapCauses,
    /// The distributed job the process is a rank of (ABI 1.3); set by whoever opened the
    /// segment (`SegmentReader::job`), `None` by `new`.
    job: Option<syncspy_abi::job::JobInfo>,
    /// Per call site, its calls that failed because their stream was capturing a CUDA graph
    /// (`cudaErrorStreamCaptureUnsupported`, 900): each broke the capture.
    capture_failures: SiteMap<u64>,
    /// Per call site, the GPU idle measured behind its stalls (ABI 1.10 `stall_events`
    /// records): (stalls measured, total ns). At most `MAX_SITE_KEYS` sites.
    idle_after: SiteMap<(u64, u64)>,
    /// Where the process lives seen from this reader (host pid, container); set by whoever
    /// opened the segment (`place::place`), the default by `new`.
    placement: crate::place::Placement,
    /// The heap budget of the segment's user (`limits`), charged for each histogram made;
    /// `None`: unbounded (a reader of one session's own processes).
    account: Option<std::sync::Arc<crate::limits::Account>>,
    /// Whether [`ProcessAgg::compact`] ran: the sites kept are the top ones only.
    compacted: bool,
}

/// Reading the figures (each field by a method of its name).
impl ProcessAgg {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The process's start time in clock ticks since boot (with the pid, its identity).
    pub fn start_ticks(&self) -> u64 {
        self.start_ticks
    }

    /// `SYNCSPY_SESSION` of the process (0 when unset).
    pub fn session(&self) -> u64 {
        self.session
    }

    /// Its command line, as the segment's header has it.
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// CLOCK_MONOTONIC ns when the segment was created.
    pub fn created_ns(&self) -> u64 {
        self.created_ns
    }

    /// Unix-epoch ns when the segment was created.
    pub fn created_unix_ns(&self) -> u64 {
        self.created_unix_ns
    }

    /// Header counters as of the last poll.
    pub fn live(&self) -> &LiveCounters {
        &self.live
    }

    /// CLOCK_MONOTONIC ns when this reader first found the process gone without an exit
    /// handler; the end of its wall time.
    pub fn gone_ns(&self) -> Option<u64> {
        self.gone_ns
    }

    /// Records the ring delivered to this reader.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Sequence numbers this reader will never see (overwritten, or never finished).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Complete records that did not decode.
    pub fn corrupt(&self) -> u64 {
        self.corrupt
    }

    /// Records whose site id lies outside the segment's site table: aggregated under "no
    /// site" (0).
    pub fn bad_site_records(&self) -> u64 {
        self.bad_site_records
    }

    /// Records of a call site that found no room among the [`MAX_SITE_KEYS`] this process
    /// keeps, or whose histogram the user's heap budget refused (`limits`).
    pub fn refused_site_records(&self) -> u64 {
        self.refused_site_records
    }

    /// GPU idle gaps received, blamed on host stalls.
    pub fn gap_causes(&self) -> &GapCauses {
        &self.gap_causes
    }

    /// The distributed job the process is a rank of (ABI 1.3), if any.
    pub fn job(&self) -> Option<&syncspy_abi::job::JobInfo> {
        self.job.as_ref()
    }

    /// Where the process lives seen from this reader (host pid, container).
    pub fn placement(&self) -> &crate::place::Placement {
        &self.placement
    }

    /// Whether [`ProcessAgg::compact`] ran: the sites kept are the top ones only.
    pub fn compacted(&self) -> bool {
        self.compacted
    }
}

/// Whether `account` (if any) lets a new histogram of `bytes` be made.
fn afford(account: &Option<std::sync::Arc<crate::limits::Account>>, bytes: u64) -> bool {
    account.as_ref().is_none_or(|a| a.charge(bytes))
}

impl ProcessAgg {
    pub fn new(ident: &Ident) -> ProcessAgg {
        ProcessAgg {
            pid: ident.pid,
            start_ticks: ident.start_ticks,
            session: ident.session,
            argv: ident.argv(),
            created_ns: ident.created_ns,
            created_unix_ns: ident.created_unix_ns,
            live: LiveCounters::default(),
            gone_ns: None,
            delivered: 0,
            lost: 0,
            corrupt: 0,
            bad_site_records: 0,
            refused_site_records: 0,
            site_capacity: ident.site_capacity,
            kinds: vec![None; KIND_SLOTS],
            apis: vec![None; API_SLOTS],
            sites: SiteMap::default(),
            copies: BTreeMap::new(),
            gap_causes: GapCauses::default(),
            job: None,
            capture_failures: SiteMap::default(),
            idle_after: SiteMap::default(),
            placement: crate::place::Placement::default(),
            account: None,
            compacted: false,
        }
    }

    /// The aggregate of a segment just opened by a follower: the job its header names
    /// (`SegmentReader::job`), where the process lives seen from this reader
    /// (`place::place`), and the heap account of its user (`None`: unbounded).
    pub(crate) fn opened(
        ident: &Ident,
        job: Option<syncspy_abi::job::JobInfo>,
        placement: crate::place::Placement,
        account: Option<std::sync::Arc<crate::limits::Account>>,
    ) -> ProcessAgg {
        ProcessAgg {
            job,
            placement,
            account,
            ..ProcessAgg::new(ident)
        }
    }

    /// The header counters, as the follower read them after a poll.
    pub(crate) fn set_live(&mut self, live: LiveCounters) {
        self.live = live;
    }

    /// The follower found the process gone at `now_ns` (CLOCK_MONOTONIC); the first time
    /// counts.
    pub(crate) fn mark_gone(&mut self, now_ns: u64) {
        self.gone_ns.get_or_insert(now_ns);
    }

    /// Estimated heap bytes of this aggregate (its histograms and attribution buffers), for
    /// the reader's budgets (`limits`).
    pub fn heap_bytes(&self) -> u64 {
        let dists = self
            .kinds
            .iter()
            .chain(&self.apis)
            .flatten()
            .chain(self.sites.values())
            .map(|d| d.heap_bytes() + 64)
            .fold(0u64, u64::saturating_add);
        let recent =
            (self.gap_causes.recent.capacity() * std::mem::size_of::<RecentStall>()) as u64;
        let maps = ((self.capture_failures.capacity() + self.gap_causes.causes.capacity()) * 48
            + self.argv.iter().map(|a| a.len() + 24).sum::<usize>()) as u64;
        dists
            .saturating_add(recent)
            .saturating_add(maps)
            .saturating_add(1024)
    }

    /// Shrinks an ended process (after its final drain) to what its reports still need:
    /// the [`COMPACT_SITES`] sites with the most recorded time, every histogram at
    /// [`SITE_SIGFIG`] digits, no attribution buffer. Header totals, kinds, APIs, copies and
    /// gap causes are kept; the dropped sites' records stay in their kind's and API's figures.
    pub fn compact(&mut self) {
        for d in self.kinds.iter_mut().chain(self.apis.iter_mut()).flatten() {
            *d = d.downsampled(SITE_SIGFIG);
        }
        let keep: Vec<SiteKey> = self
            .sites_by_total()
            .into_iter()
            .take(COMPACT_SITES)
            .map(|(k, _)| k)
            .collect();
        let mut sites = SiteMap::default();
        for k in keep {
            if let Some(d) = self.sites.remove(&k) {
                sites.insert(k, d);
            }
        }
        self.sites = sites;
        self.capture_failures
            .retain(|k, _| self.sites.contains_key(k));
        self.capture_failures.shrink_to_fit();
        self.gap_causes.recent = VecDeque::new();
        self.compacted = true;
    }

    /// Starts what the records built over from now, for a monitor's reset: distributions,
    /// call sites, copies, GPU gap causes and GPU idle behind stalls, and the ring's
    /// delivered, lost, corrupt and refused counts. What identifies the process and what the
    /// reader knows of it stays: the header's counters as of the last poll (exact totals
    /// since the process started; a caller shows them since the reset by keeping a baseline
    /// of them), its end, its job, its place, its user's account (new histograms are
    /// charged to it as before) and whether it was compacted (an ended process is drained:
    /// nothing more arrives to compact).
    pub fn restart_records(&mut self) {
        self.delivered = 0;
        self.lost = 0;
        self.corrupt = 0;
        self.bad_site_records = 0;
        self.refused_site_records = 0;
        self.kinds = vec![None; KIND_SLOTS];
        self.apis = vec![None; API_SLOTS];
        self.sites = SiteMap::default();
        self.copies = BTreeMap::new();
        self.gap_causes = GapCauses::default();
        self.capture_failures = SiteMap::default();
        self.idle_after = SiteMap::default();
    }

    /// Adds one record from the ring.
    pub fn add_record(&mut self, r: &Record) {
        if r.api == Api::StallEvents {
            // The GPU idle measured behind one stall: its stall's site, not a traced gap.
            self.add_idle_after(r);
            return;
        }
        if r.kind == Kind::GpuIdle {
            // Not a call: no API, no call site; its cause comes from the host stalls.
            if let Some(slot) = self.kinds.get_mut(r.kind as usize) {
                if slot.is_some() || afford(&self.account, PROCESS_DIST_BYTES) {
                    slot.get_or_insert_with(|| Dist::new(PROCESS_SIGFIG))
                        .record(r.duration_ns, 0);
                }
            }
            self.gap_causes.gap(r.device, r.start_ns, r.duration_ns);
            return;
        }
        self.gap_causes.stall(r);
        if r.direction != Direction::None {
            let c = self.copies.entry((r.kind, r.direction)).or_default();
            c.0 = c.0.saturating_add(1);
            c.1 = c.1.saturating_add(r.bytes);
            c.2 = c.2.saturating_add(r.duration_ns);
        }
        // Decoded kinds and APIs are below the slot counts (the ABI's header arrays have
        // the same bounds); `get_mut` keeps a future mismatch from panicking.
        for slot in [
            self.kinds.get_mut(r.kind as usize),
            self.apis.get_mut(r.api as usize),
        ]
        .into_iter()
        .flatten()
        {
            if slot.is_none() && !afford(&self.account, PROCESS_DIST_BYTES) {
                continue;
            }
            let d = slot.get_or_insert_with(|| Dist::new(PROCESS_SIGFIG));
            d.record(r.duration_ns, r.bytes);
            d.add_polls(r.polls);
        }
        let site = if r.site > self.site_capacity {
            self.bad_site_records = self.bad_site_records.saturating_add(1);
            0
        } else {
            r.site
        };
        let key = SiteKey {
            site,
            kind: r.kind,
            api: r.api,
        };
        let full = self.sites.len() >= MAX_SITE_KEYS;
        if r.result == CAPTURE_UNSUPPORTED && (!full || self.sites.contains_key(&key)) {
            *self.capture_failures.entry(key).or_default() += 1;
        }
        match self.sites.get_mut(&key) {
            Some(d) => d.record(r.duration_ns, r.bytes),
            None if full => {
                self.refused_site_records = self.refused_site_records.saturating_add(1);
            }
            None if !afford(&self.account, SITE_DIST_BYTES) => {
                self.refused_site_records = self.refused_site_records.saturating_add(1);
            }
            None => {
                let mut d = Dist::new(SITE_SIGFIG);
                d.record(r.duration_ns, r.bytes);
                self.sites.insert(key, d);
            }
        }
    }

    /// Adds what one poll reported (records themselves go through `add_record`).
    pub fn add_poll(&mut self, s: &PollStats) {
        // Saturating: `lost` follows the segment's `write_seq`, which may say anything.
        self.delivered = self.delivered.saturating_add(s.delivered);
        self.lost = self.lost.saturating_add(s.lost);
        self.corrupt = self.corrupt.saturating_add(s.corrupt);
    }

    /// The recorded distribution of kind `k`, if any record of it arrived.
    pub fn kind_dist(&self, k: Kind) -> Option<&Dist> {
        self.kinds.get(k as usize)?.as_ref()
    }

    pub fn api_dist(&self, a: Api) -> Option<&Dist> {
        self.apis.get(a as usize)?.as_ref()
    }

    /// Copies received, by kind and direction: (count, bytes, total_ns).
    pub fn copies(&self) -> &BTreeMap<(Kind, Direction), (u64, u64, u64)> {
        &self.copies
    }

    /// Kinds with events in the header totals or in the records, in numeric order.
    pub fn kinds_seen(&self) -> Vec<Kind> {
        Kind::ALL
            .iter()
            .copied()
            .filter(|k| self.live.kind(*k).count > 0 || self.kind_dist(*k).is_some())
            .collect()
    }

    /// APIs with stall events in the header totals or in the records.
    pub fn apis_seen(&self) -> Vec<Api> {
        Api::ALL
            .iter()
            .copied()
            .filter(|a| *a != Api::StallEvents)
            .filter(|a| self.live.api(*a).count > 0 || self.api_dist(*a).is_some())
            .collect()
    }

    /// APIs with non-stalling calls.
    pub fn calls_seen(&self) -> Vec<Api> {
        Api::ALL
            .iter()
            .copied()
            .filter(|a| self.live.calls(*a).count > 0)
            .collect()
    }

    /// The calls of call site `key` that broke a CUDA graph's capture (made while their
    /// stream was capturing: `cudaErrorStreamCaptureUnsupported`).
    pub fn capture_failures(&self, key: &SiteKey) -> u64 {
        self.capture_failures.get(key).copied().unwrap_or(0)
    }

    fn add_idle_after(&mut self, r: &Record) {
        let Some((kind, api)) = syncspy_abi::record::stall_of(r) else {
            return;
        };
        let site = if r.site > self.site_capacity {
            0
        } else {
            r.site
        };
        let key = SiteKey { site, kind, api };
        if !self.idle_after.contains_key(&key) && self.idle_after.len() >= MAX_SITE_KEYS {
            return;
        }
        let e = self.idle_after.entry(key).or_default();
        e.0 = e.0.saturating_add(1);
        e.1 = e.1.saturating_add(r.duration_ns);
    }

    /// The GPU idle measured behind the stalls of call site `key` that were received:
    /// (stalls measured, total ns).
    pub fn idle_after(&self, key: &SiteKey) -> (u64, u64) {
        self.idle_after.get(key).copied().unwrap_or_default()
    }

    /// Call sites, largest recorded total first (ties: more calls first, then key order).
    pub fn sites_by_total(&self) -> Vec<(SiteKey, &Dist)> {
        let mut v: Vec<_> = self.sites.iter().map(|(k, d)| (*k, d)).collect();
        v.sort_by(|a, b| {
            b.1.total_ns()
                .cmp(&a.1.total_ns())
                .then(b.1.count().cmp(&a.1.count()))
                .then(a.0.cmp(&b.0))
        });
        v
    }

    /// Sum of the exact totals of the kinds in which the host waited.
    pub fn stall_ns(&self) -> u64 {
        Kind::ALL
            .iter()
            .filter(|k| k.is_host_stall())
            .map(|k| self.live.kind(*k).total_ns)
            .fold(0u64, u64::saturating_add)
    }

    /// Values clamped into the histograms' bounds, over the per-kind histograms (every
    /// record lands in exactly one of them).
    pub fn clamped(&self) -> u64 {
        self.kinds
            .iter()
            .flatten()
            .map(Dist::clamped)
            .fold(0, u64::saturating_add)
    }

    pub fn lifecycle(&self) -> Lifecycle {
        match self.live.state {
            ProcState::Exited(s) => Lifecycle::Exited(s),
            ProcState::Running if self.gone_ns.is_some() => Lifecycle::Gone,
            ProcState::Running => Lifecycle::Running,
            ProcState::Unknown(_) => Lifecycle::Unknown,
        }
    }

    /// From the segment's creation to the process's end, or to `now_ns` while it runs.
    pub fn wall_ns(&self, now_ns: u64) -> u64 {
        let end = match self.live.state {
            ProcState::Exited(_) if self.live.ended_ns != 0 => self.live.ended_ns,
            _ => self.gone_ns.unwrap_or(now_ns),
        };
        end.saturating_sub(self.created_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dist_percentiles_are_within_hdr_precision_and_clamp_to_the_exact_max() {
        let mut d = Dist::new(PROCESS_SIGFIG);
        for v in 1..=1000u64 {
            d.record(v * 1000, 1);
        }
        assert_eq!(d.count(), 1000);
        assert_eq!(d.total_ns(), 1000 * 500_500);
        let close = |got: u64, want: u64| got.abs_diff(want) * 1000 <= want;
        assert!(close(d.quantile(0.5), 500_000), "{}", d.quantile(0.5));
        assert!(close(d.quantile(0.9), 900_000), "{}", d.quantile(0.9));
        assert!(close(d.quantile(0.99), 990_000), "{}", d.quantile(0.99));
        assert_eq!(d.quantile(1.0), 1_000_000);
        assert_eq!(d.clamped(), 0);
        assert_eq!(Dist::new(SITE_SIGFIG).quantile(0.5), 0);
    }

    fn stall(kind: Kind, api: Api, device: i32, start: u64, len: u64, site: u32) -> Record {
        Record {
            kind,
            api,
            direction: Direction::None,
            flags: 0,
            device,
            start_ns: start,
            duration_ns: len,
            bytes: 0,
            stream: 0,
            tid: 1,
            site,
            result: 0,
            polls: 0,
        }
    }

    fn ident(site_capacity: u32) -> Ident {
        // SAFETY: Ident is plain integers and byte arrays, valid all zero.
        let mut id: Ident = unsafe { std::mem::zeroed() };
        id.site_capacity = site_capacity;
        id
    }

    fn record(site: u32, kind: Kind, api: Api) -> Record {
        Record {
            kind,
            api,
            direction: Direction::None,
            flags: 0,
            device: 0,
            start_ns: 1,
            duration_ns: 1000,
            bytes: 0,
            stream: 0,
            tid: 1,
            site,
            result: 0,
            polls: 0,
        }
    }

    #[test]
    fn gaps_are_blamed_on_the_stall_the_host_was_in_when_the_gpu_drained() {
        let mut g = GapCauses::default();
        let sync = SiteKey {
            site: 3,
            kind: Kind::StreamSync,
            api: Api::CudaStreamSynchronize,
        };
        let copy = SiteKey {
            site: 4,
            kind: Kind::MemcpyPageable,
            api: Api::CudaMemcpyAsync,
        };
        // A stream sync from 1000 to 5000 on device 0: the GPU drained at 4000 inside it.
        g.stall(&stall(sync.kind, sync.api, 0, 1000, 4000, 3));
        // A pageable copy that began during a later gap (the host was in no stall when the
        // GPU drained at 10_000).
        g.stall(&stall(copy.kind, copy.api, 0, 10_500, 100, 4));
        // A stall on another device explains nothing on device 0.
        g.stall(&stall(sync.kind, sync.api, 1, 19_000, 5000, 3));
        assert_eq!(g.gap(0, 4000, 1500), GapCause::Stall(sync));
        assert_eq!(g.gap(0, 10_000, 2000), GapCause::Stall(copy));
        assert_eq!(g.gap(0, 20_000, 300), GapCause::HostBusyElsewhere);
        assert_eq!(g.gap(1, 20_000, 300), GapCause::Stall(sync));
        // A gap that starts as the stall ends is not inside it.
        assert_eq!(g.gap(0, 5000, 10), GapCause::HostBusyElsewhere);
        assert_eq!(
            g.by_total(),
            vec![
                (GapCause::Stall(copy), 1, 2000),
                (GapCause::Stall(sync), 2, 1800),
                (GapCause::HostBusyElsewhere, 2, 310),
            ]
        );
    }

    #[test]
    fn of_overlapping_stalls_the_longest_overlap_wins_and_order_of_arrival_does_not_matter() {
        let key = |site| SiteKey {
            site,
            kind: Kind::EventSync,
            api: Api::CudaEventSynchronize,
        };
        // Thread A waits from 0 to 2000, thread B from 500 to 9000 (device unknown); the GPU
        // drains at 1000 and idles until 8000: B's wait covers more of the gap, whichever
        // record arrives first.
        for order in [[0, 1], [1, 0]] {
            let mut g = GapCauses::default();
            let recs = [
                stall(Kind::EventSync, Api::CudaEventSynchronize, 0, 0, 2000, 1),
                stall(Kind::EventSync, Api::CudaEventSynchronize, -1, 500, 8500, 2),
            ];
            for i in order {
                g.stall(&recs[i]);
            }
            assert_eq!(g.gap(0, 1000, 7000), GapCause::Stall(key(2)));
        }
    }

    /// A stall whose end is further behind the latest ones than OUT_OF_ORDER_STALLS is not
    /// kept (counted), so records in random order cannot make each one cost a search and a
    /// move of the whole window; nearly ordered ones (threads interleaving) are kept in order.
    #[test]
    fn stalls_far_out_of_order_are_counted_not_kept() {
        let (k, a) = (Kind::StreamSync, Api::CudaStreamSynchronize);
        let mut g = GapCauses::default();
        for i in 0..2000u64 {
            g.stall(&stall(k, a, 0, 1_000_000 + i * 100, 10, 1));
        }
        // 10 back among the latest: kept, in order of its end.
        g.stall(&stall(k, a, 0, 1_000_000 + 1989 * 100 + 50, 10, 2));
        // 1500 back: not kept.
        g.stall(&stall(k, a, 0, 1_000_000 + 500 * 100 + 50, 10, 3));
        assert_eq!(g.out_of_order(), 1);
        assert_eq!(g.recent.len(), 2001);
        assert!(g
            .recent
            .iter()
            .zip(g.recent.iter().skip(1))
            .all(|(x, y)| x.end <= y.end));
        assert_eq!(
            g.gap(0, 1_000_000 + 1989 * 100 + 55, 1),
            GapCause::Stall(SiteKey {
                site: 2,
                kind: k,
                api: a
            })
        );
        assert_eq!(
            g.gap(0, 1_000_000 + 500 * 100 + 55, 1),
            GapCause::HostBusyElsewhere
        );
        // A full window: a stall older than every one kept is dropped as the window moves.
        let mut g = GapCauses::default();
        for i in 0..RECENT_STALLS as u64 {
            g.stall(&stall(k, a, 0, 10_000 + i * 10, 1, 1));
        }
        g.stall(&stall(
            k,
            a,
            0,
            10_000 + (RECENT_STALLS as u64 - 5) * 10 + 5,
            1,
            2,
        ));
        assert_eq!(g.recent.len(), RECENT_STALLS);
        assert_eq!(g.out_of_order(), 0);
        assert!(g
            .recent
            .iter()
            .zip(g.recent.iter().skip(1))
            .all(|(x, y)| x.end <= y.end));
    }

    #[test]
    fn add_record_keeps_gaps_out_of_apis_and_sites() {
        let id = Ident {
            magic: syncspy_abi::layout::MAGIC,
            abi_major: 1,
            abi_minor: 2,
            header_size: 0,
            record_size: 64,
            ring_capacity: 16,
            ring_offset: 0,
            site_capacity: 16,
            site_entry_size: 512,
            sites_offset: 0,
            module_capacity: 16,
            module_entry_size: 512,
            modules_offset: 0,
            total_size: 0,
            pid: 1,
            clock_id: 1,
            start_ticks: 1,
            session: 0,
            created_ns: 0,
            created_unix_ns: 0,
            site_max_frames: 62,
            cmdline_len: 0,
            cmdline: [0; syncspy_abi::layout::CMDLINE_MAX],
        };
        let mut a = ProcessAgg::new(&id);
        a.add_record(&stall(
            Kind::DeviceSync,
            Api::CudaDeviceSynchronize,
            0,
            0,
            100,
            5,
        ));
        a.add_record(&stall(Kind::GpuIdle, Api::GpuActivity, 0, 50, 700, 0));
        assert_eq!(a.kind_dist(Kind::GpuIdle).map(Dist::total_ns), Some(700));
        assert!(a.api_dist(Api::GpuActivity).is_none());
        assert_eq!(a.sites_by_total().len(), 1);
        assert_eq!(
            a.gap_causes.by_total()[0].0,
            GapCause::Stall(SiteKey {
                site: 5,
                kind: Kind::DeviceSync,
                api: Api::CudaDeviceSynchronize
            })
        );
    }

    #[test]
    fn site_ids_outside_the_table_go_to_no_site_and_sites_are_capped() {
        let mut a = ProcessAgg::new(&ident(64));
        let (k, api) = (Kind::StreamSync, Api::CudaStreamSynchronize);
        a.add_record(&record(64, k, api));
        a.add_record(&record(65, k, api));
        a.add_record(&record(u32::MAX, k, api));
        assert_eq!(a.bad_site_records, 2);
        let sites: Vec<(u32, u64)> = a
            .sites_by_total()
            .iter()
            .map(|(key, d)| (key.site, d.count()))
            .collect();
        assert_eq!(sites, vec![(0, 2), (64, 1)]);

        // A segment whose records name a new site each (as many as its table allows).
        let mut a = ProcessAgg::new(&ident(1 << 20));
        let n = MAX_SITE_KEYS as u32 + 500;
        for site in 1..=n {
            a.add_record(&record(site, k, api));
        }
        // Known sites keep counting once the cap is reached.
        a.add_record(&record(1, k, api));
        assert_eq!(a.sites_by_total().len(), MAX_SITE_KEYS);
        assert_eq!(a.refused_site_records, 500);
        assert_eq!(a.bad_site_records, 0);
        assert_eq!(a.kind_dist(k).unwrap().count(), u64::from(n) + 1);
        assert_eq!(a.sites_by_total()[0].1.count(), 2);
    }

    #[test]
    fn a_users_account_refuses_histograms_beyond_its_bytes_and_totals_stay() {
        use crate::limits::Account;
        let (k, api) = (Kind::StreamSync, Api::CudaStreamSynchronize);
        // Room for the kind's and the API's histograms and three sites.
        let acc = std::sync::Arc::new(Account::new(2 * PROCESS_DIST_BYTES + 3 * SITE_DIST_BYTES));
        let mut a = ProcessAgg::new(&ident(1 << 10));
        a.account = Some(std::sync::Arc::clone(&acc));
        for site in 1..=10 {
            a.add_record(&record(site, k, api));
        }
        assert_eq!(a.sites_by_total().len(), 3);
        assert_eq!(a.refused_site_records, 7);
        assert_eq!(a.kind_dist(k).unwrap().count(), 10);
        assert_eq!(acc.left(), 0);
        // A kind not seen before gets no histogram either; known ones keep counting.
        a.add_record(&record(1, Kind::DeviceSync, Api::CudaDeviceSynchronize));
        assert!(a.kind_dist(Kind::DeviceSync).is_none());
        a.add_record(&record(2, k, api));
        assert_eq!(a.kind_dist(k).unwrap().count(), 11);
        // The estimate counts what was made.
        let made = 2 * PROCESS_DIST_BYTES + 3 * SITE_DIST_BYTES;
        assert!(a.heap_bytes() >= made && a.heap_bytes() < made + 64 * 1024);
    }

    #[test]
    fn compaction_keeps_totals_and_top_sites_and_frees_the_rest() {
        let (k, api) = (Kind::StreamSync, Api::CudaStreamSynchronize);
        let mut a = ProcessAgg::new(&ident(1 << 10));
        for site in 1..=200u32 {
            let mut r = record(site, k, api);
            // Site 200 has the most time, then 199, ...
            r.duration_ns = u64::from(site) * 1_000;
            a.add_record(&r);
        }
        for i in 0..RECENT_STALLS as u64 {
            let mut r = record(1, k, api);
            r.start_ns = i;
            a.gap_causes.stall(&r);
        }
        let before = a.heap_bytes();
        let (count, total) = (
            a.kind_dist(k).unwrap().count(),
            a.kind_dist(k).unwrap().total_ns(),
        );
        let p99 = a.kind_dist(k).unwrap().quantile(0.99);
        a.compact();
        assert!(a.compacted);
        let after = a.heap_bytes();
        assert!(after * 10 < before, "{before} -> {after} bytes");
        let sites = a.sites_by_total();
        assert_eq!(sites.len(), COMPACT_SITES);
        assert_eq!(sites[0].0.site, 200);
        assert_eq!(
            sites[COMPACT_SITES - 1].0.site,
            200 - COMPACT_SITES as u32 + 1
        );
        let d = a.kind_dist(k).unwrap();
        assert_eq!((d.count(), d.total_ns()), (count, total));
        // Two significant digits: within 1%.
        assert!(
            d.quantile(0.99).abs_diff(p99) * 100 <= p99,
            "{p99} {}",
            d.quantile(0.99)
        );
    }

    /// A monitor's reset: what the records built starts over, what identifies the process
    /// and the header's counters stay, and new histograms are still charged to the user.
    #[test]
    fn restarting_records_forgets_what_they_built_and_keeps_the_process() {
        use crate::limits::Account;
        let (k, api) = (Kind::StreamSync, Api::CudaStreamSynchronize);
        let acc = std::sync::Arc::new(Account::new(1 << 30));
        let mut a = ProcessAgg::new(&ident(4));
        a.account = Some(std::sync::Arc::clone(&acc));
        a.placement = crate::place::Placement::with_host_pid(77);
        a.gone_ns = Some(5);
        a.live.kinds[k as usize].count = 9;
        a.add_record(&record(1, k, api));
        a.add_record(&record(9, k, api));
        a.add_record(&stall(Kind::GpuIdle, Api::GpuActivity, 0, 50, 700, 0));
        let mut copy = record(2, Kind::MemcpyPageable, Api::CudaMemcpyAsync);
        copy.direction = Direction::HostToDevice;
        a.add_record(&copy);
        a.add_poll(&PollStats {
            delivered: 4,
            lost: 2,
            corrupt: 1,
        });
        assert_eq!(a.bad_site_records, 1);

        a.restart_records();
        assert_eq!((a.delivered, a.lost, a.corrupt), (0, 0, 0));
        assert_eq!((a.bad_site_records, a.refused_site_records), (0, 0));
        assert!(a.kind_dist(k).is_none() && a.api_dist(api).is_none());
        assert!(a.kind_dist(Kind::GpuIdle).is_none());
        assert!(a.sites_by_total().is_empty() && a.copies().is_empty());
        assert!(a.gap_causes.by_total().is_empty());
        assert_eq!(a.live.kind(k).count, 9);
        assert_eq!(a.gone_ns, Some(5));
        assert_eq!(a.placement.host_pid(), Some(77));

        let left = acc.left();
        a.add_record(&record(3, k, api));
        assert_eq!(a.kind_dist(k).map(Dist::count), Some(1));
        assert_eq!(a.sites_by_total().len(), 1);
        assert_eq!(left - acc.left(), 2 * PROCESS_DIST_BYTES + SITE_DIST_BYTES);
    }

    #[test]
    fn poll_counts_saturate() {
        let mut a = ProcessAgg::new(&ident(16));
        let huge = PollStats {
            delivered: u64::MAX,
            lost: u64::MAX,
            corrupt: u64::MAX,
        };
        a.add_poll(&huge);
        a.add_poll(&huge);
        assert_eq!(
            (a.delivered, a.lost, a.corrupt),
            (u64::MAX, u64::MAX, u64::MAX)
        );
    }

    #[test]
    fn out_of_bounds_values_are_clamped_and_counted() {
        let mut d = Dist::new(SITE_SIGFIG);
        d.record(0, 0);
        d.record(HIST_HIGH_NS * 2, 0);
        d.record(500, 0);
        assert_eq!(d.clamped(), 2);
        assert_eq!(d.count(), 3);
        // Exact figures keep the real values.
        assert_eq!(d.max_ns(), HIST_HIGH_NS * 2);
        assert_eq!(d.total_ns(), HIST_HIGH_NS * 2 + 500);
        assert!(d.quantile(1.0) >= HIST_HIGH_NS);
    }
}
