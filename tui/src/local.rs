//! Local data: follow the segments in `SYNCSPY_DIR` directly. Each monitor has its own
//! cursors, so several monitors and the agent can follow one process without disturbing each
//! other (or the process). Call sites are symbolized on a worker thread, so a large library's
//! debug info never holds up a refresh.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;

use syncspy_abi::modules::Module;
use syncspy_abi::{Api, Kind, ProcState, Record};
use syncspy_read::aggregate::{GapCause, LiveCounters, ProcessAgg, SiteKey};
use syncspy_read::alike::SiteLook;
use syncspy_read::follow::{Followed, ProcessKey, SegmentKey, SiteRef};
use syncspy_read::monotonic_ns;
use syncspy_read::python::{self, PyFrame, Waiter};
use syncspy_read::rates::Rates;
use syncspy_read::report::{
    collectives_of, fraction, gpu_measured, location_of, IdleCause, ProcessState, StallSite,
};
use syncspy_read::session::{ReaderSession, SessionOptions};
use syncspy_read::symbolize::Symbolizer;

use crate::busy::BusyHistory;
use crate::loghist::LogHist;
use crate::model::{
    GapCauseRow, GapStats, GpuDeviceView, GpuView, KindRow, Proc, RankOf, Refresh, Scope, SiteRow,
    State, STALL_KINDS,
};
use crate::window::{kind_index, Merged, Window};
use crate::Source;

pub use crate::model::MAX_SITES_SHOWN;
/// Ended processes kept (the oldest beyond this are forgotten).
pub const MAX_ENDED: usize = 64;
pub use crate::model::MAX_GAP_CAUSES;
/// Problems listed at most (the oldest beyond this are dropped).
const MAX_PROBLEMS: usize = 20;
/// How the line about the reader's budgets (`syncspy_read::limits`) begins.
const OVER_BUDGET: &str = "over budget: ";
/// Period over which events/s and stall/s are measured.
const RATE_SPAN_NS: u64 = 2_000_000_000;

/// Symbolized frames of one site: how they read (what they print, the key of the reader's
/// merge rule), the location, and the Python thread that waited for it (part of the key too).
type SiteFrames = (Arc<SiteLook>, Option<String>, Option<Waiter>);

struct SymRequest {
    key: SiteRef,
    stack: Vec<u64>,
    /// The site's Python frames (innermost first), merged with the native ones.
    python: Vec<PyFrame>,
    /// The Python thread that waited for the site's calls (ABI 1.6), kept apart.
    waited_by: Option<Waiter>,
    /// The segment's module map (bounded, `limits`), shared by its requests of one view.
    modules: std::sync::Arc<[Module]>,
}

/// Symbolizes on its own thread; answers arrive through `done`.
struct SymWorker {
    tx: mpsc::Sender<SymRequest>,
    done: mpsc::Receiver<(SiteRef, SiteFrames)>,
    pending: HashSet<SiteRef>,
    cache: HashMap<SiteRef, SiteFrames>,
}

impl SymWorker {
    fn new() -> SymWorker {
        let (tx, rx) = mpsc::channel::<SymRequest>();
        let (done_tx, done) = mpsc::channel();
        std::thread::Builder::new()
            .name("syncspy-top-symbolize".into())
            .spawn(move || {
                let mut sym = Symbolizer::new();
                for req in rx {
                    let (look, frames) =
                        SiteLook::of(sym.stack(&req.stack, &req.modules), &req.python);
                    let loc = match python::user_frame(&req.python) {
                        Some(i) => Some(req.python[i].text()),
                        None => location_of(&frames),
                    };
                    let v = (Arc::new(look), loc, req.waited_by);
                    if done_tx.send((req.key, v)).is_err() {
                        break;
                    }
                }
            })
            .expect("spawning a thread");
        SymWorker {
            tx,
            done,
            pending: HashSet::new(),
            cache: HashMap::new(),
        }
    }

    fn collect(&mut self) {
        while let Ok((k, v)) = self.done.try_recv() {
            self.pending.remove(&k);
            self.cache.insert(k, v);
        }
    }

    fn forget(&mut self, process: ProcessKey) {
        self.cache.retain(|k, _| k.segment.process != process);
    }
}

/// The monitor's own additions to a followed segment (its state in the follower).
struct Extra {
    window: Window,
    /// Cumulative latency cells per kind, since start or reset (the bars of "all").
    cum: [LogHist; STALL_KINDS.len()],
    /// Header totals at the last reset.
    baseline: Option<LiveCounters>,
    /// Stall events and stall time per second (`syncspy_read::rates`).
    rates: Rates,
    /// (time, GPU span ns, GPU busy ns) samples over the same period, for the idle share.
    gpu_samples: VecDeque<(u64, u64, u64)>,
    /// Per device, the busy share of each second of the window (the GPU pane's line).
    busy: BusyHistory,
    /// Idle gap durations since start or reset (the GPU pane's bars).
    gaps: LogHist,
    /// When this monitor saw the process end (for dropping the oldest ended ones).
    ended_seen: Option<u64>,
    /// When the process ended (its segment's end, else when it was seen gone).
    ended_at: Option<u64>,
}

impl Extra {
    fn new(window_secs: u64) -> Extra {
        Extra {
            window: Window::new(window_secs),
            cum: Default::default(),
            baseline: None,
            rates: Rates::default(),
            gpu_samples: VecDeque::new(),
            busy: BusyHistory::new(window_secs),
            gaps: LogHist::default(),
            ended_seen: None,
            ended_at: None,
        }
    }

    fn add(&mut self, r: &Record, now_s: u64) {
        if r.api == Api::StallEvents {
            // The GPU idle behind a stall (ABI 1.10), not a traced gap: in the report.
            return;
        }
        self.window.add(r, self.window_now(now_s));
        if let Some(i) = kind_index(r.kind) {
            self.cum[i].record(r.duration_ns);
        } else if r.kind == Kind::GpuIdle {
            self.gaps.record(r.duration_ns);
        }
    }

    /// The second the window ends at: now while the process runs, the second it ended
    /// once it has (its last N seconds stay on screen instead of sliding away).
    fn window_now(&self, now_s: u64) -> u64 {
        self.ended_at
            .map_or(now_s, |e| (e / 1_000_000_000).min(now_s))
    }

    /// After a poll of `f`: notes its end and samples its rates, until the poll after it
    /// ended (its final counters): from then on its figures stay as they were.
    fn polled(f: &mut Followed<Extra>, now_ns: u64) {
        if f.state().ended_seen.is_some() {
            return;
        }
        let ended = f.ended();
        let (a, x) = f.agg_and_state_mut();
        // Host stalls only: GPU idle gaps are records too, but not the host's waits.
        let (events, stall) = (a.live().stall_events(), a.stall_ns());
        let end_ns = match a.live().state {
            ProcState::Exited(_) if a.live().ended_ns != 0 => a.live().ended_ns,
            _ => a.gone_ns().unwrap_or(now_ns),
        };
        if ended {
            x.ended_seen = Some(now_ns);
            x.ended_at = Some(end_ns.min(now_ns));
        }
        x.rates.sample(now_ns, events, stall);
        // The GPU's active time (first work to last), the reader's one definition: set-up
        // and teardown are no idle the program's waits made.
        let (span, busy) = a.live().gpu_active();
        x.gpu_samples.push_back((now_ns, span, busy));
        if let Some(g) = &a.live().gpu {
            let devices = g.devices.iter().map(|d| (d.device, d.span_ns, d.busy_ns));
            x.busy.sample(now_ns / 1_000_000_000, devices);
        }
        // The GPU figures trail the host by the tracer's finality delay: a longer period.
        while x.gpu_samples.len() > 2 && x.gpu_samples[1].0 + 2 * RATE_SPAN_NS <= now_ns {
            x.gpu_samples.pop_front();
        }
    }

    /// The share of its active time the GPU ran nothing: while the process runs, over the
    /// last seconds when the tracer accounted time in them, else over the whole run; once it
    /// has ended, over its whole run (the final figure, as its report has it); `None` while
    /// not measured.
    fn gpu_idle_share(&self, a: &ProcessAgg) -> Option<f64> {
        if self.ended_seen.is_some() {
            return idle_share(None, None, a.live().gpu_active());
        }
        idle_share(
            self.gpu_samples.front(),
            self.gpu_samples.back(),
            a.live().gpu_active(),
        )
    }

    /// Counts from now on: the header's totals less a baseline taken now, and the
    /// aggregate's record counts started over (`Followed::restart_records`).
    fn reset(f: &mut Followed<Extra>) {
        f.restart_records();
        let (a, x) = f.agg_and_state_mut();
        x.baseline = Some(a.live().clone());
        x.window.clear();
        x.cum = Default::default();
        x.busy.clear();
        x.gaps = LogHist::default();
    }

    /// Exact header totals of kind `k` since start or reset.
    fn totals(&self, a: &ProcessAgg, k: Kind) -> (u64, u64) {
        let t = a.live().kind(k);
        let b = self
            .baseline
            .as_ref()
            .map(|b| b.kind(k))
            .unwrap_or_default();
        (
            t.count.saturating_sub(b.count),
            t.total_ns.saturating_sub(b.total_ns),
        )
    }

    fn rates(&self, ended: bool) -> (Option<f64>, Option<f64>) {
        match self.rates.per_second() {
            Some((ev, st)) if !ended => (Some(ev), Some(st)),
            _ => (None, None),
        }
    }
}

/// `1 - busy/span` between two `(time, span, busy)` samples when the span grew between them,
/// else over `lifetime` (`(span, busy)` since the start); `None` without accounted time.
fn idle_share(
    first: Option<&(u64, u64, u64)>,
    last: Option<&(u64, u64, u64)>,
    lifetime: (u64, u64),
) -> Option<f64> {
    if let (Some(a), Some(b)) = (first, last) {
        let span = b.1.saturating_sub(a.1);
        if span > 0 {
            return Some(1.0 - b.2.saturating_sub(a.2) as f64 / span as f64);
        }
    }
    (lifetime.0 > 0).then(|| 1.0 - lifetime.1 as f64 / lifetime.0 as f64)
}

/// Follows every segment of a folder (or one pid's, or one session's).
pub struct LocalSource {
    /// Reads without leases or a registration: the monitor writes nothing in the folder.
    reader: ReaderSession<Extra>,
    window_secs: u64,
    problems: Vec<String>,
    sym: SymWorker,
    /// Ended processes whose segment file is gone: their last view, kept for the screen
    /// until dismissed, while their mapping is let go (it alone kept the memory in use).
    retired: Vec<Proc>,
    /// The filters the source follows with (`pid 42`, `session 7`), named on the screen so
    /// that a mistyped one does not read as "nothing runs".
    filters: Vec<String>,
}

impl LocalSource {
    pub fn new(dir: PathBuf, pid: Option<u32>, window_secs: u64) -> LocalSource {
        LocalSource {
            reader: reader(dir, None, pid, window_secs),
            window_secs,
            problems: Vec::new(),
            sym: SymWorker::new(),
            retired: Vec::new(),
            filters: pid.map(|p| format!("pid {p}")).into_iter().collect(),
        }
    }

    /// Follows only the segments whose `Ident::session` is `session` (`None`: every one).
    pub fn with_session(self, session: Option<u64>) -> LocalSource {
        // The follower is replaced: only before the first step, while nothing is followed.
        debug_assert!(
            self.reader.processes().is_empty(),
            "with_session after a step"
        );
        let dir = self.reader.dir().to_path_buf();
        let reader = reader(dir, session, self.reader.follower().pid(), self.window_secs);
        let mut filters = self.filters.clone();
        filters.extend(session.map(|s| format!("session {s}")));
        LocalSource {
            reader,
            filters,
            ..self
        }
    }

    fn note(&mut self, p: String) {
        if !self.problems.contains(&p) {
            self.problems.push(p);
        }
        if self.problems.len() > MAX_PROBLEMS {
            let cut = self.problems.len() - MAX_PROBLEMS;
            self.problems.drain(..cut);
        }
    }

    /// Scans, drains every ring into the segments' windows and samples their rates; notes
    /// the problems found. Returns the time of the poll.
    fn read(&mut self) -> u64 {
        let now_s = monotonic_ns() / 1_000_000_000;
        let problems = self.reader.step(|_, x, r| x.add(r, now_s));
        for p in problems {
            self.note(p.to_string());
        }
        // What the budgets left out, as one line that changes in place.
        let d = self.reader.follower().dropped();
        if d.segments + d.histograms + d.modules > 0 {
            self.problems.retain(|p| !p.starts_with(OVER_BUDGET));
            self.note(format!("{OVER_BUDGET}{d} (their users at their caps)"));
        }
        let now_ns = monotonic_ns();
        for f in self.reader.follower_mut().processes_mut() {
            Extra::polled(f, now_ns);
        }
        now_ns
    }

    /// Stops following the processes `drop` picks.
    fn forget_where(&mut self, drop: impl Fn(&Followed<Extra>) -> bool) {
        for gone in self.reader.follower_mut().forget(drop) {
            self.sym.forget(gone.key().process);
        }
    }

    /// Ended processes whose file was removed (by `syncspy run`, the agent, a reclaimer),
    /// drained and with every stack symbolized: keeps their view and unmaps their segment.
    fn retire_unlinked(&mut self, now_ns: u64) {
        if !self.sym.pending.is_empty() {
            return;
        }
        let sym = &mut self.sym;
        let mut views = Vec::new();
        for f in self.reader.follower_mut().processes_mut() {
            if f.ended() && f.unlinked() {
                views.push(view(f, sym, now_ns));
            }
        }
        if views.is_empty() {
            return;
        }
        self.reader
            .follower_mut()
            .forget(|f| f.ended() && f.unlinked());
        self.retired.extend(views);
        if self.retired.len() > MAX_ENDED {
            let cut = self.retired.len() - MAX_ENDED;
            self.retired.drain(..cut);
        }
    }

    /// Segments this source has mapped now.
    pub fn mapped(&self) -> usize {
        self.reader.processes().len()
    }

    fn drop_oldest_ended(&mut self) {
        let mut times: Vec<u64> = self
            .reader
            .processes()
            .iter()
            .filter_map(|f| f.state().ended_seen)
            .collect();
        if times.len() <= MAX_ENDED {
            return;
        }
        times.sort_unstable();
        let cutoff = times[times.len() - MAX_ENDED - 1];
        self.forget_where(|f| f.state().ended_seen.is_some_and(|e| e <= cutoff));
    }
}

/// A reader session whose segments each carry the monitor's `Extra`.
fn reader(
    dir: PathBuf,
    session: Option<u64>,
    pid: Option<u32>,
    window_secs: u64,
) -> ReaderSession<Extra> {
    // A session's segments are trusted only from the monitor's own user: it has no process of
    // its own to check their descent from, as `syncspy run` does.
    let opts = SessionOptions::new(dir)
        .session(session)
        .own_only(session.is_some())
        .pid(pid)
        .budget(syncspy_read::limits::Limits::from_env());
    ReaderSession::with_state(opts, move |_| Extra::new(window_secs))
}

/// The monitor's view of one followed process; asks `sym` for the stacks it lacks.
fn view(f: &mut Followed<Extra>, sym: &mut SymWorker, now_ns: u64) -> Proc {
    // An ended process's window and GPU seconds end where it ended.
    let now_s = f.state().window_now(now_ns / 1_000_000_000);
    let merged = f.state_mut().window.merged(now_s);
    let t = f.state();
    let a = f.agg();
    let key = f.key();
    // The stacks not symbolized yet, asked for at the end.
    let mut want = Vec::new();
    let all = Scope::of(all_kind_rows(t, a), all_site_rows(sym, key, a, &mut want));
    let recent = Scope::of(
        recent_kind_rows(&merged),
        recent_site_rows(sym, key, &merged, &mut want),
    );
    let wall_ns = a.wall_ns(now_ns);
    let (events_per_s, stall_per_s) = t.rates(f.ended());
    let state = State::from(&ProcessState::from(a.lifecycle()));
    let proc = Proc {
        pid: a.pid(),
        // As the report shows it: the node's pid of a process in another PID namespace.
        host_pid: a
            .placement()
            .host_pid()
            .filter(|h| *h != a.pid() || a.placement().foreign_ns()),
        start_ticks: a.start_ticks(),
        command: a.argv().join(" "),
        state,
        events_per_s,
        stall_per_s,
        gpu_idle_share: t.gpu_idle_share(a),
        dropped: a.live().events_dropped,
        lost: a.lost(),
        shedding: a
            .live()
            .cost
            .and_then(|c| syncspy_read::report::CostReport::of(&c).shedding_now()),
        wall_ns,
        all,
        recent: Some(recent),
        job: rank_of(a),
        gpu: gpu_view(t, a, key, sym, now_s, &mut want),
    };
    request_stacks(f, sym, key, want);
    proc
}

/// Each stall kind since start (or reset): exact header totals, recorded percentiles.
fn all_kind_rows(t: &Extra, a: &ProcessAgg) -> Vec<KindRow> {
    let mut rows = Vec::new();
    for (i, k) in STALL_KINDS.iter().enumerate() {
        let (count, total_ns) = t.totals(a, *k);
        let d = a.kind_dist(*k);
        if count == 0 && d.is_none() {
            continue;
        }
        let max_ns = match (&t.baseline, d) {
            (None, _) => a.live().kind(*k).max_ns,
            (Some(_), Some(d)) => d.max_ns(),
            (Some(_), None) => 0,
        };
        rows.push(KindRow {
            kind: *k,
            count,
            total_ns,
            p50_ns: d.map_or(0, |d| d.quantile(0.5)),
            p99_ns: d.map_or(0, |d| d.quantile(0.99)),
            max_ns,
            bars: Some(t.cum[i].bars()),
        });
    }
    rows
}

/// Every site since start, so that those that read alike are one row (`model::site_rows`),
/// as in the report; each is symbolized once, in the background (`want`).
fn all_site_rows(
    sym: &SymWorker,
    key: SegmentKey,
    a: &ProcessAgg,
    want: &mut Vec<u32>,
) -> Vec<(SiteRow, Option<Arc<SiteLook>>)> {
    a.sites_by_total()
        .into_iter()
        .map(|(k, d)| {
            site_row(
                sym,
                key,
                k,
                d.count(),
                d.total_ns(),
                d.quantile(0.99),
                d.max_ns(),
                want,
            )
        })
        .collect()
}

/// Each stall kind in the last N seconds, from the window's bins.
fn recent_kind_rows(merged: &Merged) -> Vec<KindRow> {
    let mut rows = Vec::new();
    for (i, k) in STALL_KINDS.iter().enumerate() {
        if let Some(b) = &merged.kinds[i] {
            rows.push(KindRow {
                kind: *k,
                count: b.count(),
                total_ns: b.total_ns,
                p50_ns: b.hist.quantile(0.5).min(b.max_ns),
                p99_ns: b.hist.quantile(0.99).min(b.max_ns),
                max_ns: b.max_ns,
                bars: Some(b.hist.bars()),
            });
        }
    }
    rows
}

/// Every site in the last N seconds, from the window's bins.
fn recent_site_rows(
    sym: &SymWorker,
    key: SegmentKey,
    merged: &Merged,
    want: &mut Vec<u32>,
) -> Vec<(SiteRow, Option<Arc<SiteLook>>)> {
    merged
        .sites
        .iter()
        .map(|(k, b)| {
            site_row(
                sym,
                key,
                *k,
                b.count(),
                b.total_ns,
                b.hist.quantile(0.99).min(b.max_ns),
                b.max_ns,
                want,
            )
        })
        .collect()
}

/// The process's place in its job: its collectives' and GPU time, NCCL's share.
fn rank_of(a: &ProcessAgg) -> Option<RankOf> {
    a.job().map(|j| {
        RankOf::new(
            &j.id,
            j.rank,
            collectives_of(a.live()).map(|(ns, _)| ns),
            gpu_measured(a.live()),
            a.live().gpu.as_ref().map_or(0, |g| g.traced_ns),
        )
        .with_nccl(
            a.live()
                .collectives
                .as_ref()
                .and_then(|c| syncspy_read::report::CollectivesReport::of(c).share()),
        )
    })
}

/// Asks the symbolizing thread for the stacks of the sites in `want` that it neither has
/// nor is working on.
fn request_stacks(f: &Followed<Extra>, sym: &mut SymWorker, key: SegmentKey, want: Vec<u32>) {
    if want.is_empty() {
        return;
    }
    let reader = f.reader();
    let modules: std::sync::Arc<[Module]> = f.modules().into();
    for site in want {
        let k = SiteRef { segment: key, site };
        if sym.pending.contains(&k) || sym.cache.contains_key(&k) {
            continue;
        }
        let stack = reader.site(site).unwrap_or_default();
        let python = reader
            .python_stack(site)
            .map(|s| python::frames_of(&s))
            .unwrap_or_default();
        let waited_by = reader.waited_by(site).map(|w| Waiter::of(&w));
        sym.pending.insert(k);
        let _ = sym.tx.send(SymRequest {
            key: k,
            stack,
            python,
            waited_by,
            modules: std::sync::Arc::clone(&modules),
        });
    }
}

/// The GPU pane of a process; `None` for segments without a GPU part.
fn gpu_view(
    t: &Extra,
    a: &ProcessAgg,
    key: SegmentKey,
    sym: &SymWorker,
    now_s: u64,
    want: &mut Vec<u32>,
) -> Option<GpuView> {
    let g = a.live().gpu.as_ref()?;
    let (count, total_ns) = t.totals(a, Kind::GpuIdle);
    let d = a.kind_dist(Kind::GpuIdle);
    let max_ns = match &t.baseline {
        None => a.live().kind(Kind::GpuIdle).max_ns,
        Some(_) => d.map_or(0, |d| d.max_ns()),
    };
    let gaps = GapStats {
        count,
        total_ns,
        p50_ns: d.map_or(0, |d| d.quantile(0.5)),
        p99_ns: d.map_or(0, |d| d.quantile(0.99)),
        max_ns,
        bars: Some(t.gaps.bars()),
    };
    let devices: Vec<GpuDeviceView> = g
        .devices
        .iter()
        .map(|dev| GpuDeviceView {
            device: dev.device,
            busy_share: fraction(dev.busy_ns, dev.span_ns),
            per_second: t.busy.shares(dev.device, now_s),
        })
        .collect();
    let causes = a.gap_causes().by_total();
    let received = causes
        .iter()
        .map(|c| c.2)
        .fold(0, u64::saturating_add)
        .max(1);
    // The reader's merge rule (`syncspy_read::alike`): causes at one line are one row.
    let causes = syncspy_read::report::merge_gap_causes(
        causes
            .into_iter()
            .map(|(cause, count, total_ns)| {
                let cause = match cause {
                    GapCause::Stall(k) => {
                        let (row, _) = site_row(sym, key, k, count, total_ns, 0, 0, want);
                        IdleCause::Stall(StallSite {
                            kind: k.kind.into(),
                            api: k.api.into(),
                            site_id: 0,
                            location: Some(row.location).filter(|l| !l.is_empty()),
                        })
                    }
                    GapCause::HostBusyElsewhere => IdleCause::HostBusyElsewhere,
                };
                GapCauseRow {
                    cause,
                    count,
                    total_ns,
                    share: total_ns as f64 / received as f64,
                }
            })
            .collect(),
    );
    let view = GpuView {
        tracing: GpuView::tracing_label(g.state_name(), g.mode_name()),
        devices,
        gaps,
        short_gaps: g.devices.iter().fold((0, 0), |(n, t), d| {
            (
                n.saturating_add(d.short_gaps),
                t.saturating_add(d.short_gap_ns),
            )
        }),
        min_gap_ns: g.min_gap_ns,
        causes,
        behind: syncspy_read::report::BehindStalls::of(a.live()),
    };
    Some(view.in_display_order())
}

/// The row of one call site of `segment` with its figures, and how its stack reads once
/// symbolized (the key `model::site_rows` merges by); a site not symbolized yet is added to
/// `want`.
#[allow(clippy::too_many_arguments)]
fn site_row(
    sym: &SymWorker,
    segment: SegmentKey,
    k: SiteKey,
    count: u64,
    total_ns: u64,
    p99_ns: u64,
    max_ns: u64,
    want: &mut Vec<u32>,
) -> (SiteRow, Option<Arc<SiteLook>>) {
    let (location, look, waited_by) = if k.site == 0 {
        // No stack: what the report prints for it (no frames).
        (
            SiteRow::location_of(0, None, &[]),
            Some(Arc::new(SiteLook::printed(Vec::new()))),
            None,
        )
    } else {
        match sym.cache.get(&SiteRef {
            segment,
            site: k.site,
        }) {
            Some((look, loc, waited_by)) => (
                SiteRow::location_of(k.site, loc.as_deref(), look.frames()),
                Some(Arc::clone(look)),
                waited_by.clone(),
            ),
            None => {
                // Asked for below (once: the worker's pending set); keyed by its id
                // meanwhile, so merged with none.
                want.push(k.site);
                (format!("site {} (symbolizing...)", k.site), None, None)
            }
        }
    };
    let row = SiteRow {
        site_id: k.site,
        kind: k.kind,
        api: k.api.into(),
        count,
        total_ns,
        p99_ns,
        max_ns,
        location,
        // Its look's, for the rows listed (`model::site_rows`).
        frames: Vec::new(),
        waited_by,
    };
    (row, look)
}

impl Source for LocalSource {
    fn step(&mut self) -> Refresh {
        self.sym.collect();
        let now = self.read();
        self.drop_oldest_ended();
        self.retire_unlinked(now);
        let sym = &mut self.sym;
        let mut processes: Vec<Proc> = self
            .reader
            .follower_mut()
            .processes_mut()
            .map(|f| view(f, sym, now))
            .collect();
        processes.extend(self.retired.iter().cloned());
        let dir = self.reader.dir().display().to_string();
        Refresh {
            source: if self.filters.is_empty() {
                dir
            } else {
                format!("{dir}, {} only", self.filters.join(", "))
            },
            processes,
            problems: self.problems.clone(),
            window_secs: self.window_secs,
            ..Refresh::default()
        }
    }

    fn request_gpu_trace(&mut self, process: ProcessKey, secs: u64) -> Result<String, String> {
        use syncspy_abi::control::RequestError;
        let f = self
            .reader
            .processes()
            .iter()
            .find(|f| f.key().process == process && !f.ended())
            .ok_or("the process is not running")?;
        let until = monotonic_ns().saturating_add(secs.saturating_mul(1_000_000_000));
        match f.reader().request_gpu_trace(until) {
            Ok(_) => Ok(f
                .reader()
                .gpu_status()
                .map_or("unknown", |g| g.state_name())
                .to_string()),
            Err(RequestError::TooOld) => Err("its syncspy library is too old (ABI < 1.4)".into()),
            Err(RequestError::Replaced) => Err("its segment is gone".into()),
            Err(RequestError::Io(e)) => Err(format!("cannot write the request: {e}")),
        }
    }

    fn reset(&mut self) {
        for f in self.reader.follower_mut().processes_mut() {
            Extra::reset(f);
        }
    }

    fn busy(&self) -> bool {
        !self.sym.pending.is_empty()
    }

    fn forget(&mut self, process: ProcessKey) {
        self.forget_where(|f| f.key().process == process);
        self.retired.retain(|p| p.key() != process);
    }
}

#[cfg(test)]
mod tests {
    use crate::Source;

    #[test]
    fn an_empty_screen_names_the_filters_it_follows_with() {
        let dir = syncspy_test_support::TempDir::new("local-filters");
        let mut plain = super::LocalSource::new(dir.path().to_path_buf(), None, 10);
        assert_eq!(plain.step().source, dir.path().display().to_string());
        let mut typo =
            super::LocalSource::new(dir.path().to_path_buf(), None, 10).with_session(Some(12345));
        let s = typo.step();
        assert!(s.processes.is_empty());
        assert_eq!(
            s.source,
            format!("{}, session 12345 only", dir.path().display())
        );
        let mut one = super::LocalSource::new(dir.path().to_path_buf(), Some(42), 10);
        assert!(one.step().source.ends_with(", pid 42 only"));
    }

    #[test]
    fn gpu_idle_share_is_recent_when_the_span_grew_else_over_the_run() {
        // 1 s accounted between the samples, 0.25 s of it busy.
        let (a, b) = (
            (0, 4_000_000_000, 3_000_000_000),
            (9, 5_000_000_000, 3_250_000_000),
        );
        assert_eq!(super::idle_share(Some(&a), Some(&b), (5, 1)), Some(0.75));
        // Nothing newly final: the whole run's share.
        let c = (9, 4_000_000_000, 3_000_000_000);
        assert_eq!(super::idle_share(Some(&a), Some(&c), (4, 3)), Some(0.25));
        assert_eq!(super::idle_share(None, None, (0, 0)), None);
    }
}
