//! What the monitor shows, independent of where it came from (local segments or an agent):
//! plain data, so screens can be rendered and tested from fixed data.

use std::sync::Arc;
use syncspy_abi::Kind;

use syncspy_read::alike::{RowKey, SiteLook};
pub use syncspy_read::follow::ProcessKey;
use syncspy_read::names::ApiName;
use syncspy_read::python::Waiter;

use crate::loghist::BAR_CELLS;

/// The host stall kinds, in the order the monitor lists them.
pub const STALL_KINDS: [Kind; 8] = [
    Kind::StreamSync,
    Kind::DeviceSync,
    Kind::EventSync,
    Kind::MemcpySync,
    Kind::MemcpyPageable,
    Kind::ImplicitSync,
    Kind::PollWait,
    Kind::HostWait,
];

/// One refresh of everything the monitor knows.
#[derive(Clone, Debug, Default)]
pub struct Refresh {
    /// Where the data comes from (`/dev/shm`, `http://host:9599`).
    pub source: String,
    pub processes: Vec<Proc>,
    /// Segments that could not be read, errors reaching the agent: shown, never fatal.
    pub problems: Vec<String>,
    /// Length of the "recent" window, seconds.
    pub window_secs: u64,
    /// The GPU tracing request the monitor keeps up (the `g` key): the process and what the
    /// last request gave (`Ok`: the process's tracing state; `Err`: why not).
    pub gpu_request: Option<(ProcessKey, Result<String, String>)>,
}

/// How a process stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Running,
    Exited(i32),
    /// Ended without the library's exit handler (killed, `_exit`).
    Gone,
    Unknown,
}

/// The report's state as the monitor shows it (a name it does not know is `Unknown`).
impl From<&syncspy_read::report::ProcessState> for State {
    fn from(s: &syncspy_read::report::ProcessState) -> Self {
        use syncspy_read::report::ProcessState as P;
        match s {
            P::Running => State::Running,
            P::Exited(s) => State::Exited(s.unwrap_or(0)),
            P::Gone => State::Gone,
            P::Unknown | P::Other(_) => State::Unknown,
        }
    }
}

impl State {
    pub fn ended(self) -> bool {
        matches!(self, State::Exited(_) | State::Gone)
    }

    pub fn label(self) -> String {
        match self {
            State::Running => "running".into(),
            State::Exited(s) => format!("exited {s}"),
            State::Gone => "gone".into(),
            State::Unknown => "unknown".into(),
        }
    }
}

/// One instrumented process.
#[derive(Clone, Debug)]
pub struct Proc {
    /// The pid in the process's own PID namespace (1 for a container's first process).
    pub pid: u32,
    /// Its pid on the node, when it is in another PID namespace (or the two differ): what
    /// the screen shows, since two containers' processes may both be pid 1.
    pub host_pid: Option<u32>,
    /// Start time in clock ticks: with the pid, names one process for its whole life.
    pub start_ticks: u64,
    pub command: String,
    pub state: State,
    /// Events the library counted per second, over the last couple of seconds (`None`
    /// until two samples exist or once the process ended).
    pub events_per_s: Option<f64>,
    /// Seconds of host stall per second of wall time, same period (more than 1 when several
    /// threads wait at once).
    pub stall_per_s: Option<f64>,
    /// Share of its active time (first work to last) the GPU ran nothing, recently (once it
    /// has ended, over its whole run); `None` while not measured.
    pub gpu_idle_share: Option<f64>,
    /// Events the library could not write (ring full).
    pub dropped: u64,
    /// Records this reader never received (percentiles and sites miss them, totals do not).
    pub lost: u64,
    /// What its library sheds now to keep within its budget (`CostReport::shedding_now`:
    /// `stacks`, `gap records`, `records`, each level with the ones before it); `None` when
    /// nothing is shed.
    pub shedding: Option<String>,
    pub wall_ns: u64,
    /// Since start (or since the last reset).
    pub all: Scope,
    /// The last `window_secs` seconds; `None` when the source cannot tell.
    pub recent: Option<Scope>,
    /// The distributed job the process is a rank of (ABI 1.3); `None` outside one.
    pub job: Option<RankOf>,
    /// What the GPU pane shows; `None` when the source has no GPU part for the process
    /// (a segment older than ABI 1.2).
    pub gpu: Option<GpuView>,
}

/// The GPU pane of one process: how busy each device was, second by second, the idle gaps
/// and what the host was doing in them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuView {
    /// The library's GPU tracing: state and mode (`tracing, mode duty`).
    pub tracing: String,
    pub devices: Vec<GpuDeviceView>,
    /// Idle gaps received since start (or reset): count, total, percentiles, and bars
    /// (`None` from an agent, which sends no distribution).
    pub gaps: GapStats,
    /// Gaps shorter than the library's `min_gap_ns` are only counted: how many, how long.
    pub short_gaps: (u64, u64),
    pub min_gap_ns: u64,
    /// Most idle time first.
    pub causes: Vec<GapCauseRow>,
    /// The GPU idle the library measured behind syncs and blocking copies, since start
    /// (ABI 1.10; `None` when nothing was measured).
    pub behind: Option<Behind>,
}

/// The GPU idle measured behind syncs: the report's (`BehindStalls::of` for a segment).
pub type Behind = syncspy_read::report::BehindStalls;

/// Gap causes the GPU pane lists.
pub const MAX_GAP_CAUSES: usize = 8;

impl GpuView {
    /// The pane as both sources list it: devices by number, causes most idle time first
    /// (at most [`MAX_GAP_CAUSES`]).
    pub fn in_display_order(mut self) -> GpuView {
        self.devices.sort_by_key(|d| d.device);
        self.causes.sort_by_key(|c| std::cmp::Reverse(c.total_ns));
        self.causes.truncate(MAX_GAP_CAUSES);
        self
    }

    /// `tracing, mode duty`: the library's GPU tracing state and mode (both sources).
    pub fn tracing_label(state: &str, mode: &str) -> String {
        format!("{state}, mode {mode}")
    }

    /// Whether anything was measured (time accounted on some device, or a gap).
    pub fn measured(&self) -> bool {
        self.gaps.count > 0 || self.devices.iter().any(|d| d.busy_share.is_some())
    }
}

/// Durations of the idle gaps.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GapStats {
    pub count: u64,
    pub total_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub bars: Option<[u64; BAR_CELLS]>,
}

/// One device of a process.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuDeviceView {
    pub device: i32,
    /// Busy share of the traced time since the process started.
    pub busy_share: Option<f64>,
    /// Busy share of each second of the window, oldest first; `None` for a second with no
    /// traced time (tracing off, paused between duty windows, or not reported yet).
    pub per_second: Vec<Option<f64>>,
}

/// The idle gaps blamed on one cause: the report's row, whichever the source.
pub use syncspy_read::report::GapCauseReport as GapCauseRow;

/// A process's place in a distributed job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankOf {
    pub job: String,
    pub rank: Option<u32>,
    /// Time in collective (NCCL) kernels and the time the GPU was traced, when both are
    /// known (ABI 1.4, GPU traced).
    pub trace: Option<(u64, u64)>,
    /// The rank's own measurement of its NCCL calls: time in collectives and its window
    /// (ABI 1.8). The job's straggler is the rank the others waited for in collectives, by
    /// the report's choice of the two (`syncspy_read::jobs::collective_shares`).
    pub nccl: Option<(u64, u64)>,
}

impl RankOf {
    /// Rank `rank` of job `job`; its collective share by the report's rule
    /// (`report::collective_share`: time in collective kernels and the traced time, only when
    /// the GPU was measured), whichever the source.
    pub fn new(
        job: &str,
        rank: Option<u32>,
        collective_ns: Option<u64>,
        gpu_measured: bool,
        traced_ns: u64,
    ) -> RankOf {
        RankOf {
            job: job.to_string(),
            rank,
            trace: syncspy_read::report::collective_share(collective_ns, gpu_measured, traced_ns),
            nccl: None,
        }
    }

    /// With the rank's own measurement of its NCCL calls (time in collectives, window; ABI
    /// 1.8), when it has one.
    pub fn with_nccl(mut self, share: Option<(u64, u64)>) -> RankOf {
        self.nccl = share;
        self
    }

    /// The rank's collective share as shown: its own NCCL measurement, else the traced
    /// kernels.
    pub fn collective(&self) -> Option<(u64, u64)> {
        self.nccl.or(self.trace)
    }

    /// `exp-7 r3` (`exp-7 r?` when the launcher gave no rank).
    pub fn label(&self) -> String {
        match self.rank {
            Some(r) => format!("{} r{r}", self.job),
            None => format!("{} r?", self.job),
        }
    }
}

impl Proc {
    /// The pid the screen shows: the node's when known, else the process's own.
    pub fn shown_pid(&self) -> u32 {
        self.host_pid.unwrap_or(self.pid)
    }

    pub fn key(&self) -> ProcessKey {
        ProcessKey {
            pid: self.pid,
            start_ticks: self.start_ticks,
        }
    }

    pub fn scope(&self, recent: bool) -> &Scope {
        match (&self.recent, recent) {
            (Some(r), true) => r,
            _ => &self.all,
        }
    }
}

/// Figures over one period.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// One row per stall kind with events, in `STALL_KINDS` order.
    pub kinds: Vec<KindRow>,
    /// Largest total first.
    pub sites: Vec<SiteRow>,
    /// Host stall time in the period, ns.
    pub stall_ns: u64,
}

impl Scope {
    /// The figures of one period; its host stall time is its kinds' (both sources).
    pub fn new(kinds: Vec<KindRow>, sites: Vec<SiteRow>) -> Scope {
        let stall_ns = kinds
            .iter()
            .map(|k| k.total_ns)
            .fold(0, u64::saturating_add);
        Scope {
            kinds,
            sites,
            stall_ns,
        }
    }

    /// The figures of one period from per-kind and per-site figures, as both sources list
    /// them: kinds with events in the period, in [`STALL_KINDS`] order; the sites by
    /// [`site_rows`].
    pub fn of(kinds: Vec<KindRow>, sites: Vec<(SiteRow, Option<Arc<SiteLook>>)>) -> Scope {
        let mut kinds: Vec<KindRow> = kinds
            .into_iter()
            .filter(|k| k.count > 0 && STALL_KINDS.contains(&k.kind))
            .collect();
        kinds.sort_by_key(|k| STALL_KINDS.iter().position(|s| *s == k.kind));
        Scope::new(kinds, site_rows(sites))
    }

    pub fn kind(&self, k: Kind) -> Option<&KindRow> {
        self.kinds.iter().find(|r| r.kind == k)
    }
}

/// Sites listed per process and scope.
pub const MAX_SITES_SHOWN: usize = 100;

/// The site rows of a scope from one row per call site (each with how its stack reads:
/// `None` while it is not symbolized, so it is merged with none; a row's `frames` are its
/// look's, filled here for the rows listed), as both sources list them:
/// the sites with calls in the period; those that read alike one row, by the reader's rule
/// (`syncspy_read::alike::sites`, the report's: one kind, API and look, and one waiter, so
/// two lines waiting over one native stack stay two rows): counts and totals added, the largest
/// maximum, the p99 and the site id of the largest part; largest total first (then most
/// calls, then site id, the report's order); at most [`MAX_SITES_SHOWN`].
pub fn site_rows(sites: Vec<(SiteRow, Option<Arc<SiteLook>>)>) -> Vec<SiteRow> {
    let mut sites: Vec<(SiteRow, Option<Arc<SiteLook>>)> =
        sites.into_iter().filter(|(s, _)| s.count > 0).collect();
    // Largest first, so that each merged row is its largest part's.
    sites.sort_by(|(a, _), (b, _)| by_total(a, b));
    let keyed = sites.into_iter().map(|(row, look)| {
        let key = look.as_ref().map(|l| {
            RowKey::new(row.kind.name(), row.api.as_str(), Arc::clone(l))
                .waited_by(row.waited_by.as_ref())
        });
        (key, (row, look))
    });
    let mut rows = syncspy_read::alike::sites(keyed, |(a, _), (b, _)| {
        a.count = a.count.saturating_add(b.count);
        a.total_ns = a.total_ns.saturating_add(b.total_ns);
        a.max_ns = a.max_ns.max(b.max_ns);
    });
    rows.sort_by(|(a, _), (b, _)| by_total(a, b));
    rows.truncate(MAX_SITES_SHOWN);
    rows.into_iter()
        .map(|(mut row, look)| {
            if let Some(l) = look {
                row.frames = l.frames().to_vec();
            }
            row
        })
        .collect()
}

/// The report's order of sites: largest total first, then most calls, then lowest site id.
fn by_total(a: &SiteRow, b: &SiteRow) -> std::cmp::Ordering {
    b.total_ns
        .cmp(&a.total_ns)
        .then(b.count.cmp(&a.count))
        .then(a.site_id.cmp(&b.site_id))
}

/// One stall kind.
#[derive(Clone, Debug, PartialEq)]
pub struct KindRow {
    pub kind: Kind,
    pub count: u64,
    pub total_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// Events per half-decade latency cell (`loghist::BAR_CELLS`); `None` when the source
    /// has no distribution (an agent snapshot).
    pub bars: Option<[u64; BAR_CELLS]>,
}

/// One call site: a stack making calls of one kind through one API.
#[derive(Clone, Debug, PartialEq)]
pub struct SiteRow {
    pub site_id: u32,
    pub kind: Kind,
    pub api: ApiName,
    pub count: u64,
    pub total_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// Where the program called (innermost frame outside the runtime and syncspy), or a
    /// placeholder while symbolizing / when no stack was captured.
    pub location: String,
    /// The symbolized stack, innermost first (empty until symbolized, or none captured).
    pub frames: Vec<String>,
    /// The Python thread that waited for these calls, made on a thread without Python
    /// frames (`report::Site::waited_by`); `None` for the others (and until symbolized).
    pub waited_by: Option<Waiter>,
}

impl SiteRow {
    /// The `location` a site shows once its stack is known (both sources): where the
    /// program called, else its innermost frame, else its id; a placeholder for site 0.
    pub fn location_of(site_id: u32, location: Option<&str>, frames: &[String]) -> String {
        if site_id == 0 {
            return "(no stack captured)".to_string();
        }
        location
            .or(frames.first().map(String::as_str))
            .map_or_else(|| format!("site {site_id}"), str::to_string)
    }

    /// `waited for by jax_sync.py:21`, with ` (a non-main thread)` when it was not the main
    /// thread: the summary's words; `None` without a waiter.
    pub fn waiter_label(&self) -> Option<String> {
        let w = self.waited_by.as_ref()?;
        let who = if w.main_thread {
            ""
        } else {
            " (a non-main thread)"
        };
        Some(format!("waited for by {}{who}", w.short()))
    }

    /// What to do about this site, when its frames name a pattern with certainty.
    pub fn advice(&self) -> Option<&'static str> {
        syncspy_read::advice::advice(
            self.kind.name(),
            self.api.as_str(),
            self.count,
            &self.frames,
        )
    }

    /// What identifies a site across refreshes (its rank and numbers change).
    pub fn key(&self) -> (u32, Kind, &str) {
        (self.site_id, self.kind, self.api.as_str())
    }

    /// Whether `needle` (lower case) appears in anything the user sees of this site.
    pub fn matches(&self, needle: &str) -> bool {
        needle.is_empty()
            || self.location.to_lowercase().contains(needle)
            || self.api.as_str().to_lowercase().contains(needle)
            || self.kind.name().contains(needle)
            || self
                .waiter_label()
                .is_some_and(|w| w.to_lowercase().contains(needle))
            || self
                .frames
                .iter()
                .any(|f| f.to_lowercase().contains(needle))
    }
}

/// `1.35 ms`, `890 us` (`µs` unless ascii), `12.0 s`, `-` for 0.
pub fn dur(ns: u64, ascii: bool) -> String {
    let us = if ascii { "us" } else { "µs" };
    let f = ns as f64;
    match ns {
        0 => "-".into(),
        1..=999 => format!("{ns} ns"),
        1_000..=999_999 => fmt3(f / 1e3, us),
        1_000_000..=999_999_999 => fmt3(f / 1e6, "ms"),
        _ => fmt3(f / 1e9, "s"),
    }
}

/// Three significant digits.
fn fmt3(v: f64, unit: &str) -> String {
    if v >= 99.95 {
        format!("{v:.0} {unit}")
    } else if v >= 9.995 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.2} {unit}")
    }
}

/// `12`, `1.2k`, `3.4M`.
pub fn count(n: u64) -> String {
    let f = n as f64;
    if n < 10_000 {
        n.to_string()
    } else if n < 1_000_000 {
        format!("{:.1}k", f / 1e3)
    } else if n < 1_000_000_000 {
        format!("{:.1}M", f / 1e6)
    } else {
        format!("{:.1}G", f / 1e9)
    }
}

/// A rate per second, `-` when unknown.
pub fn rate(r: Option<f64>) -> String {
    match r {
        None => "-".into(),
        Some(r) if r < 10.0 => format!("{r:.1}"),
        Some(r) => count(r.round() as u64),
    }
}

/// Stall seconds per second as `420 ms/s`, `-` when unknown.
pub fn stall_rate(r: Option<f64>, ascii: bool) -> String {
    match r {
        None => "-".into(),
        Some(r) if r <= 0.0 => "0".into(),
        Some(r) => format!("{}/s", dur((r * 1e9) as u64, ascii)).replace(' ', ""),
    }
}

pub fn percent(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sources_share_the_rows_rules() {
        let row = |kind, total_ns| KindRow {
            kind,
            count: 1,
            total_ns,
            p50_ns: 0,
            p99_ns: 0,
            max_ns: 0,
            bars: None,
        };
        let s = Scope::new(
            vec![row(Kind::StreamSync, 30), row(Kind::DeviceSync, u64::MAX)],
            Vec::new(),
        );
        assert_eq!(s.stall_ns, u64::MAX);
        let frames = vec!["f (a.rs:1)".to_string()];
        assert_eq!(
            SiteRow::location_of(0, Some("x.py:1"), &frames),
            "(no stack captured)"
        );
        assert_eq!(SiteRow::location_of(4, Some("x.py:1"), &frames), "x.py:1");
        assert_eq!(SiteRow::location_of(4, None, &frames), "f (a.rs:1)");
        assert_eq!(SiteRow::location_of(4, None, &[]), "site 4");
        assert_eq!(
            GpuView::tracing_label("paused", "duty"),
            "paused, mode duty"
        );
        let cause = |total_ns| GapCauseRow {
            total_ns,
            ..GapCauseRow::default()
        };
        let device = |device| GpuDeviceView {
            device,
            ..GpuDeviceView::default()
        };
        let v = GpuView {
            devices: vec![device(1), device(0)],
            causes: (0..10).map(cause).collect(),
            ..GpuView::default()
        }
        .in_display_order();
        let devices: Vec<i32> = v.devices.iter().map(|d| d.device).collect();
        assert_eq!(devices, [0, 1]);
        let totals: Vec<u64> = v.causes.iter().map(|c| c.total_ns).collect();
        assert_eq!(totals, [9, 8, 7, 6, 5, 4, 3, 2]);
    }

    fn site(site_id: u32, count: u64, total_ns: u64, p99_ns: u64, max_ns: u64) -> SiteRow {
        SiteRow {
            site_id,
            kind: Kind::MemcpySync,
            api: "cudaMemcpy".into(),
            count,
            total_ns,
            p99_ns,
            max_ns,
            location: format!("site {site_id}"),
            frames: Vec::new(),
            waited_by: None,
        }
    }

    #[test]
    fn site_rows_merge_what_reads_alike_and_keep_the_reports_order() {
        let look = |f: &str| Some(Arc::new(SiteLook::printed(vec![f.to_string()])));
        let rows = site_rows(vec![
            // The smaller part first: the row is still the larger one's.
            (site(2, 1, 80, 150, 90), look("f (a.c:3)")),
            (site(1, 19, 1_900, 100, 120), look("f (a.c:3)")),
            (site(3, 5, 500, 100, 100), look("g (a.c:9)")),
            // Not symbolized yet: never merged, even with another of no look.
            (site(4, 5, 500, 100, 100), None),
            (site(5, 6, 500, 100, 100), None),
            // No calls in the period: no row.
            (site(6, 0, 0, 0, 0), look("h (a.c:1)")),
        ]);
        let shown: Vec<(u32, u64, u64, u64, u64)> = rows
            .iter()
            .map(|s| (s.site_id, s.count, s.total_ns, s.p99_ns, s.max_ns))
            .collect();
        assert_eq!(
            shown,
            [
                (1, 20, 1_980, 100, 120),
                (5, 6, 500, 100, 100),
                (3, 5, 500, 100, 100),
                (4, 5, 500, 100, 100)
            ]
        );
        // One kind or API apart: apart.
        let mut other = site(7, 1, 1, 1, 1);
        other.kind = Kind::StreamSync;
        let rows = site_rows(vec![
            (site(1, 1, 1, 1, 1), look("f (a.c:3)")),
            (other, look("f (a.c:3)")),
        ]);
        assert_eq!(rows.len(), 2);
        // Waited for by two lines, over one native stack: two rows, as in the report; by
        // one line: one.
        let waited = |id: u32, line: u32| {
            let mut s = site(id, 1, u64::from(id), 1, 1);
            s.waited_by = Some(Waiter {
                location: Some(format!("/src/w.py:{line} in main")),
                main_thread: true,
                python: vec![syncspy_read::python::PyFrame {
                    file: "/src/w.py".into(),
                    line,
                    function: "main".into(),
                    skipped: 0,
                }],
            });
            (s, look("f (a.c:3)"))
        };
        let rows = site_rows(vec![waited(1, 21), waited(2, 30), waited(3, 21)]);
        let shown: Vec<(u32, u64, Option<String>)> = rows
            .iter()
            .map(|s| (s.site_id, s.count, s.waiter_label()))
            .collect();
        assert_eq!(
            shown,
            [
                (3, 2, Some("waited for by w.py:21".to_string())),
                (2, 1, Some("waited for by w.py:30".to_string())),
            ]
        );
        let many = (1..=300)
            .map(|i| (site(i, 1, u64::from(i), 1, 1), None))
            .collect();
        assert_eq!(site_rows(many).len(), MAX_SITES_SHOWN);
    }

    #[test]
    fn kinds_are_listed_with_events_in_order_and_ranks_by_the_reports_rule() {
        let row = |kind, count| KindRow {
            kind,
            count,
            total_ns: count,
            p50_ns: 0,
            p99_ns: 0,
            max_ns: 0,
            bars: None,
        };
        let s = Scope::of(
            vec![
                row(Kind::PollWait, 2),
                row(Kind::DeviceSync, 0),
                row(Kind::StreamSync, 1),
            ],
            Vec::new(),
        );
        let kinds: Vec<Kind> = s.kinds.iter().map(|k| k.kind).collect();
        assert_eq!(kinds, [Kind::StreamSync, Kind::PollWait]);
        assert_eq!(s.stall_ns, 3);
        // Collective time counts only when the GPU was measured.
        let r = RankOf::new("exp", Some(1), Some(5), true, 9);
        assert_eq!(
            (r.label(), r.collective()),
            ("exp r1".to_string(), Some((5, 9)))
        );
        assert_eq!(
            RankOf::new("exp", None, Some(5), false, 9).collective(),
            None
        );
        assert_eq!(RankOf::new("exp", None, None, true, 9).collective(), None);
        // The rank's own NCCL measurement comes first, traced or not.
        let n = RankOf::new("exp", None, None, false, 0).with_nccl(Some((7, 100)));
        assert_eq!(n.collective(), Some((7, 100)));
        let kept = RankOf::new("exp", None, Some(5), true, 9).with_nccl(None);
        assert_eq!(kept.collective(), Some((5, 9)));
    }

    #[test]
    fn durations_and_counts_read_well() {
        assert_eq!(dur(0, false), "-");
        assert_eq!(dur(512, false), "512 ns");
        assert_eq!(dur(7_100, true), "7.10 us");
        assert_eq!(dur(1_330_000, false), "1.33 ms");
        assert_eq!(dur(79_738_000, false), "79.7 ms");
        assert_eq!(dur(465_200_000, false), "465 ms");
        assert_eq!(dur(12_000_000_000, false), "12.0 s");
        assert_eq!(count(61), "61");
        assert_eq!(count(14_200), "14.2k");
        assert_eq!(rate(Some(100_000.0)), "100.0k");
        assert_eq!(rate(None), "-");
        assert_eq!(stall_rate(Some(0.42), true), "420ms/s");
        assert_eq!(percent(0.188), "18.8%");
    }
}
