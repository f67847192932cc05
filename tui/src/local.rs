//! Local data: follow the segments in `SYNCSPY_DIR` directly. Each monitor has its own
//! cursors, so several monitors and the agent can follow one process without disturbing each
//! other (or the process). Call sites are symbolized on a worker thread, so a large library's
//! debug info never holds up a refresh.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::mpsc;

use syncspy_abi::modules::Module;
use syncspy_abi::{Kind, Record};
use syncspy_agent::aggregate::{monotonic_ns, Lifecycle, LiveSnapshot, ProcessAgg, SiteKey};
use syncspy_agent::follow::{Followed, Follower};
use syncspy_agent::report::location_of;
use syncspy_agent::symbolize::Symbolizer;

use crate::loghist::LogHist;
use crate::model::{KindRow, Proc, Scope, SiteRow, Snapshot, State, STALL_KINDS};
use crate::window::{kind_index, Bin, Window};
use crate::Source;

/// Sites listed per process and scope.
pub const MAX_SITES_SHOWN: usize = 100;
/// Ended processes kept (the oldest beyond this are forgotten).
pub const MAX_ENDED: usize = 64;
/// Problems listed at most (the oldest beyond this are dropped).
const MAX_PROBLEMS: usize = 20;
/// Period over which events/s and stall/s are measured.
const RATE_SPAN_NS: u64 = 2_000_000_000;

/// Symbolized frames of one site: (text, location).
type SiteFrames = (Vec<String>, Option<String>);
type SymKey = (u32, u64, u32);

struct SymRequest {
    key: SymKey,
    stack: Vec<u64>,
    modules: Vec<Module>,
}

/// Symbolizes on its own thread; answers arrive through `done`.
struct SymWorker {
    tx: mpsc::Sender<SymRequest>,
    done: mpsc::Receiver<(SymKey, SiteFrames)>,
    pending: HashSet<SymKey>,
    cache: HashMap<SymKey, SiteFrames>,
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
                    let frames = sym.stack(&req.stack, &req.modules);
                    let loc = location_of(&frames);
                    let text = frames.into_iter().map(|f| f.text).collect();
                    if done_tx.send((req.key, (text, loc))).is_err() {
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

    fn forget(&mut self, pid: u32, start: u64) {
        self.cache.retain(|k, _| (k.0, k.1) != (pid, start));
    }
}

/// The monitor's own additions to a followed segment (same index as in
/// `Follower::processes()`).
struct Extra {
    window: Window,
    /// Cumulative latency cells per kind, since start or reset (the bars of "all").
    cum: [LogHist; STALL_KINDS.len()],
    /// Header totals at the last reset.
    baseline: Option<LiveSnapshot>,
    /// (time, events written, stall ns) samples for the rates.
    samples: VecDeque<(u64, u64, u64)>,
    /// When this monitor saw the process end (for dropping the oldest ended ones).
    ended_seen: Option<u64>,
}

impl Extra {
    fn new(window_secs: u64) -> Extra {
        Extra {
            window: Window::new(window_secs),
            cum: Default::default(),
            baseline: None,
            samples: VecDeque::new(),
            ended_seen: None,
        }
    }

    fn add(&mut self, r: &Record, now_s: u64) {
        self.window.add(r, now_s);
        if let Some(i) = kind_index(r.kind) {
            self.cum[i].record(r.duration_ns);
        }
    }

    /// After a poll of `f`: notes its end and samples its rates.
    fn polled(&mut self, f: &Followed, now_ns: u64) {
        if f.ended() && self.ended_seen.is_none() {
            self.ended_seen = Some(now_ns);
        }
        self.samples
            .push_back((now_ns, f.agg.live.events_written, f.agg.stall_ns()));
        while self.samples.len() > 2 && self.samples[1].0 + RATE_SPAN_NS <= now_ns {
            self.samples.pop_front();
        }
    }

    /// Counts from now on; `f`'s aggregate starts over from its current header totals.
    fn reset(&mut self, f: &mut Followed) {
        let mut fresh = ProcessAgg::new(f.reader.ident());
        fresh.live = f.agg.live.clone();
        fresh.gone_ns = f.agg.gone_ns;
        self.baseline = Some(f.agg.live.clone());
        f.agg = fresh;
        self.window.clear();
        self.cum = Default::default();
    }

    /// Exact header totals of kind `k` since start or reset.
    fn totals(&self, a: &ProcessAgg, k: Kind) -> (u64, u64) {
        let t = a.live.kind(k);
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
        if ended || self.samples.len() < 2 {
            return (None, None);
        }
        let (Some(a), Some(b)) = (self.samples.front(), self.samples.back()) else {
            return (None, None);
        };
        let dt = b.0.saturating_sub(a.0) as f64 / 1e9;
        if dt < 0.2 {
            return (None, None);
        }
        (
            Some(b.1.saturating_sub(a.1) as f64 / dt),
            Some(b.2.saturating_sub(a.2) as f64 / 1e9 / dt),
        )
    }
}

/// Follows every segment of a folder (or one pid's, or one session's).
pub struct LocalSource {
    follower: Follower,
    window_secs: u64,
    extras: Vec<Extra>,
    problems: Vec<String>,
    sym: SymWorker,
}

impl LocalSource {
    pub fn new(dir: PathBuf, pid: Option<u32>, window_secs: u64) -> LocalSource {
        LocalSource {
            follower: Follower::new(dir, None).with_pid(pid),
            window_secs,
            extras: Vec::new(),
            problems: Vec::new(),
            sym: SymWorker::new(),
        }
    }

    /// Follows only the segments whose `Ident::session` is `session` (`None`: every one).
    pub fn with_session(self, session: Option<u64>) -> LocalSource {
        // The follower is replaced: only before the first step, while nothing is followed.
        debug_assert!(self.extras.is_empty(), "with_session after a step");
        let follower = Follower::new(self.follower.dir(), session).with_pid(self.follower.pid());
        LocalSource { follower, ..self }
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

    fn scan(&mut self) {
        if let Err(e) = self.follower.scan() {
            let p = format!("cannot read {}: {e}", self.follower.dir().display());
            self.note(p);
        }
        let new: Vec<String> = self
            .follower
            .take_new_problems()
            .iter()
            .map(|p| p.to_string())
            .collect();
        for p in new {
            self.note(p);
        }
        let found = self.follower.processes().len();
        while self.extras.len() < found {
            self.extras.push(Extra::new(self.window_secs));
        }
    }

    fn poll(&mut self, now_ns: u64) {
        let now_s = now_ns / 1_000_000_000;
        let extras = &mut self.extras;
        self.follower.poll_each(|i, r| extras[i].add(r, now_s));
        for (x, f) in self.extras.iter_mut().zip(self.follower.processes()) {
            x.polled(f, now_ns);
        }
    }

    /// Stops following the processes `drop` picks (by index), keeping `extras` aligned.
    fn forget_where(&mut self, drop: impl Fn(&Followed, &Extra) -> bool) {
        let flags: Vec<bool> = self
            .follower
            .processes()
            .iter()
            .zip(&self.extras)
            .map(|(f, x)| drop(f, x))
            .collect();
        for f in self.follower.processes().iter().zip(&flags) {
            if *f.1 {
                self.sym.forget(f.0.agg.pid, f.0.agg.start_ticks);
            }
        }
        let (mut i, mut j) = (0, 0);
        self.follower.forget(|_| {
            i += 1;
            flags[i - 1]
        });
        self.extras.retain(|_| {
            j += 1;
            !flags[j - 1]
        });
    }

    fn drop_oldest_ended(&mut self) {
        let mut times: Vec<u64> = self.extras.iter().filter_map(|x| x.ended_seen).collect();
        if times.len() <= MAX_ENDED {
            return;
        }
        times.sort_unstable();
        let cutoff = times[times.len() - MAX_ENDED - 1];
        self.forget_where(|_, x| x.ended_seen.is_some_and(|e| e <= cutoff));
    }

    fn view(&mut self, idx: usize, now_ns: u64) -> Proc {
        let now_s = now_ns / 1_000_000_000;
        let merged = self.extras[idx].window.merged(now_s);
        let t = &self.extras[idx];
        let f = &self.follower.processes()[idx];
        let a = &f.agg;
        let key = (a.pid, a.start_ticks);

        // Since start (or reset): exact header totals, recorded percentiles.
        let mut all_kinds = Vec::new();
        for (i, k) in STALL_KINDS.iter().enumerate() {
            let (count, total_ns) = t.totals(a, *k);
            let d = a.kind_dist(*k);
            if count == 0 && d.is_none() {
                continue;
            }
            let max_ns = match (&t.baseline, d) {
                (None, _) => a.live.kind(*k).max_ns,
                (Some(_), Some(d)) => d.max_ns(),
                (Some(_), None) => 0,
            };
            all_kinds.push(KindRow {
                kind: *k,
                count,
                total_ns,
                p50_ns: d.map_or(0, |d| d.quantile(0.5)),
                p99_ns: d.map_or(0, |d| d.quantile(0.99)),
                max_ns,
                bars: Some(t.cum[i].bars()),
            });
        }
        let all_stall = all_kinds.iter().map(|r| r.total_ns).sum();
        let mut want = Vec::new();
        let all_sites: Vec<SiteRow> = a
            .sites_by_total()
            .into_iter()
            .take(MAX_SITES_SHOWN)
            .map(|(k, d)| {
                site_row(
                    &self.sym,
                    key,
                    k,
                    d.count(),
                    d.total_ns(),
                    d.quantile(0.99),
                    d.max_ns(),
                    &mut want,
                )
            })
            .collect();

        // The last N seconds, from the window's bins.
        let mut recent_kinds = Vec::new();
        for (i, k) in STALL_KINDS.iter().enumerate() {
            if let Some(b) = &merged.kinds[i] {
                recent_kinds.push(KindRow {
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
        let mut rs: Vec<(SiteKey, Bin)> = merged.sites.into_iter().collect();
        rs.sort_by(|x, y| {
            y.1.total_ns
                .cmp(&x.1.total_ns)
                .then(y.1.count().cmp(&x.1.count()))
                .then(x.0.cmp(&y.0))
        });
        let recent_sites: Vec<SiteRow> = rs
            .iter()
            .take(MAX_SITES_SHOWN)
            .map(|(k, b)| {
                site_row(
                    &self.sym,
                    key,
                    *k,
                    b.count(),
                    b.total_ns,
                    b.hist.quantile(0.99).min(b.max_ns),
                    b.max_ns,
                    &mut want,
                )
            })
            .collect();
        let recent_stall = recent_kinds.iter().map(|r| r.total_ns).sum();

        let idle = a.live.kind(Kind::GpuIdle);
        let wall_ns = a.wall_ns(now_ns);
        let (events_per_s, stall_per_s) = t.rates(f.ended());
        let state = match a.lifecycle() {
            Lifecycle::Running => State::Running,
            Lifecycle::Exited(s) => State::Exited(s),
            Lifecycle::Gone => State::Gone,
            Lifecycle::Unknown => State::Unknown,
        };
        let proc = Proc {
            pid: a.pid,
            start_ticks: a.start_ticks,
            command: a.argv.join(" "),
            state,
            events_per_s,
            stall_per_s,
            gpu_idle_share: (idle.count > 0 && wall_ns > 0)
                .then(|| idle.total_ns as f64 / wall_ns as f64),
            dropped: a.live.events_dropped,
            lost: a.lost,
            wall_ns,
            all: Scope {
                kinds: all_kinds,
                sites: all_sites,
                stall_ns: all_stall,
            },
            recent: Some(Scope {
                kinds: recent_kinds,
                sites: recent_sites,
                stall_ns: recent_stall,
            }),
        };
        // Ask for the stacks not symbolized yet.
        if !want.is_empty() {
            let reader = &self.follower.processes()[idx].reader;
            let modules = reader.modules();
            for site in want {
                let k = (key.0, key.1, site);
                if self.sym.pending.contains(&k) || self.sym.cache.contains_key(&k) {
                    continue;
                }
                let stack = reader.site(site).unwrap_or_default();
                self.sym.pending.insert(k);
                let _ = self.sym.tx.send(SymRequest {
                    key: k,
                    stack,
                    modules: modules.clone(),
                });
            }
        }
        proc
    }
}

#[allow(clippy::too_many_arguments)]
fn site_row(
    sym: &SymWorker,
    proc_key: (u32, u64),
    k: SiteKey,
    count: u64,
    total_ns: u64,
    p99_ns: u64,
    max_ns: u64,
    want: &mut Vec<u32>,
) -> SiteRow {
    let (location, frames) = if k.site == 0 {
        ("(no stack captured)".to_string(), Vec::new())
    } else {
        match sym.cache.get(&(proc_key.0, proc_key.1, k.site)) {
            Some((frames, loc)) => (
                loc.clone()
                    .or_else(|| frames.first().cloned())
                    .unwrap_or_else(|| format!("site {}", k.site)),
                frames.clone(),
            ),
            None => {
                if !want.contains(&k.site) {
                    want.push(k.site);
                }
                (format!("site {} (symbolizing...)", k.site), Vec::new())
            }
        }
    };
    SiteRow {
        site_id: k.site,
        kind: k.kind,
        api: k.api.name().to_string(),
        count,
        total_ns,
        p99_ns,
        max_ns,
        location,
        frames,
    }
}

impl Source for LocalSource {
    fn step(&mut self) -> Snapshot {
        self.sym.collect();
        self.scan();
        let now = monotonic_ns();
        self.poll(now);
        self.drop_oldest_ended();
        let mut processes = Vec::with_capacity(self.extras.len());
        for i in 0..self.extras.len() {
            processes.push(self.view(i, now));
        }
        Snapshot {
            source: self.follower.dir().display().to_string(),
            processes,
            problems: self.problems.clone(),
            window_secs: self.window_secs,
        }
    }

    fn reset(&mut self) {
        for (x, f) in self.extras.iter_mut().zip(self.follower.processes_mut()) {
            x.reset(f);
        }
    }

    fn busy(&self) -> bool {
        !self.sym.pending.is_empty()
    }

    fn forget(&mut self, pid: u32, start_ticks: u64) {
        self.forget_where(|f, _| (f.agg.pid, f.agg.start_ticks) == (pid, start_ticks));
    }
}
