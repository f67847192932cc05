//! Local data: follow the segments in `SYNCSPY_DIR` directly. Each monitor has its own
//! cursors, so several monitors and the agent can follow one process without disturbing each
//! other (or the process). Call sites are symbolized on a worker thread, so a large library's
//! debug info never holds up a refresh.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::PathBuf;
use std::sync::mpsc;

use syncspy_abi::modules::Module;
use syncspy_abi::{parse_segment_name, process_running, Cursor, Kind, OpenError, ProcState};
use syncspy_abi::{Record, SegmentReader};
use syncspy_agent::aggregate::{monotonic_ns, Lifecycle, LiveSnapshot, ProcessAgg, SiteKey};
use syncspy_agent::follow::{describe_open_error, Followed, PATIENCE, POLL_BUDGET};
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

/// A followed process with the monitor's own additions to the agent's aggregate.
struct Tracked {
    f: Followed,
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

impl Tracked {
    fn poll(&mut self, now_ns: u64) {
        let now_s = now_ns / 1_000_000_000;
        let agg = &mut self.f.agg;
        let (window, cum) = (&mut self.window, &mut self.cum);
        let mut sink = |r: &Record| {
            agg.add_record(r);
            window.add(r, now_s);
            if let Some(i) = kind_index(r.kind) {
                cum[i].record(r.duration_ns);
            }
        };
        let st = self
            .f
            .reader
            .poll(&mut self.f.cursor, POLL_BUDGET, PATIENCE, |r| {
                if let Ok(r) = r {
                    sink(&r);
                }
            });
        self.f.agg.add_poll(&st);
        self.f.agg.live = LiveSnapshot::read(&self.f.reader);
        if self.f.agg.gone_ns.is_none()
            && matches!(self.f.agg.live.state, ProcState::Running)
            && !process_running(self.f.agg.pid, self.f.agg.start_ticks)
        {
            self.f.agg.gone_ns = Some(now_ns);
        }
        if self.f.ended() && self.ended_seen.is_none() {
            self.ended_seen = Some(now_ns);
        }
        let stall = self.f.agg.stall_ns();
        self.samples
            .push_back((now_ns, self.f.agg.live.events_written, stall));
        while self.samples.len() > 2 && self.samples[1].0 + RATE_SPAN_NS <= now_ns {
            self.samples.pop_front();
        }
    }

    fn reset(&mut self) {
        let a = &self.f.agg;
        let mut fresh = ProcessAgg::new(self.f.reader.ident());
        fresh.live = a.live.clone();
        fresh.gone_ns = a.gone_ns;
        self.baseline = Some(a.live.clone());
        self.f.agg = fresh;
        self.window.clear();
        self.cum = Default::default();
    }

    /// Exact header totals of kind `k` since start or reset.
    fn totals(&self, k: Kind) -> (u64, u64) {
        let t = self.f.agg.live.kind(k);
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

    fn rates(&self) -> (Option<f64>, Option<f64>) {
        if self.f.ended() || self.samples.len() < 2 {
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Seen {
    Followed,
    Ignored,
    Failed,
}

/// Follows every segment of a folder (or one pid's, or one session's).
pub struct LocalSource {
    dir: PathBuf,
    pid: Option<u32>,
    session: Option<u64>,
    window_secs: u64,
    seen: HashMap<(OsString, u64), Seen>,
    procs: Vec<Tracked>,
    problems: Vec<String>,
    sym: SymWorker,
}

impl LocalSource {
    pub fn new(dir: PathBuf, pid: Option<u32>, window_secs: u64) -> LocalSource {
        LocalSource {
            dir,
            pid,
            session: None,
            window_secs,
            seen: HashMap::new(),
            procs: Vec::new(),
            problems: Vec::new(),
            sym: SymWorker::new(),
        }
    }

    /// Follows only the segments whose `Ident::session` is `session` (`None`: every one).
    pub fn with_session(mut self, session: Option<u64>) -> LocalSource {
        self.session = session;
        self
    }

    fn scan(&mut self) {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) => {
                let p = format!("cannot read {}: {e}", self.dir.display());
                if !self.problems.contains(&p) {
                    self.problems.push(p);
                }
                return;
            }
        };
        let mut present = HashSet::new();
        for entry in rd.flatten() {
            let name = entry.file_name();
            let Some((pid, _)) = name.to_str().and_then(parse_segment_name) else {
                continue;
            };
            let key = (name.clone(), entry.ino());
            present.insert(key.clone());
            if self.seen.contains_key(&key) {
                continue;
            }
            if self.pid.is_some_and(|p| p != pid) {
                self.seen.insert(key, Seen::Ignored);
                continue;
            }
            let seen = match SegmentReader::open(&entry.path()) {
                Ok(reader) if self.session.is_some_and(|s| s != reader.ident().session) => {
                    Seen::Ignored
                }
                Ok(reader) => {
                    let agg = ProcessAgg::new(reader.ident());
                    self.procs.push(Tracked {
                        f: Followed {
                            reader,
                            cursor: Cursor::from_start(),
                            agg,
                            ino: entry.ino(),
                        },
                        window: Window::new(self.window_secs),
                        cum: Default::default(),
                        baseline: None,
                        samples: VecDeque::new(),
                        ended_seen: None,
                    });
                    Seen::Followed
                }
                Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(OpenError::Io(e))
                    if e.kind() == std::io::ErrorKind::PermissionDenied && !owned_by_us(&entry) =>
                {
                    Seen::Ignored
                }
                Err(e) => {
                    self.problems.push(format!(
                        "skipped {}: {}",
                        entry.path().display(),
                        describe_open_error(&e)
                    ));
                    Seen::Failed
                }
            };
            self.seen.insert(key, seen);
        }
        self.seen.retain(|k, _| present.contains(k));
        if self.problems.len() > 20 {
            let cut = self.problems.len() - 20;
            self.problems.drain(..cut);
        }
    }

    fn drop_oldest_ended(&mut self) {
        let ended = self.procs.iter().filter(|t| t.ended_seen.is_some()).count();
        if ended <= MAX_ENDED {
            return;
        }
        let mut times: Vec<u64> = self.procs.iter().filter_map(|t| t.ended_seen).collect();
        times.sort_unstable();
        let cutoff = times[ended - MAX_ENDED - 1];
        let gone: Vec<(u32, u64)> = self
            .procs
            .iter()
            .filter(|t| t.ended_seen.is_some_and(|e| e <= cutoff))
            .map(|t| (t.f.agg.pid, t.f.agg.start_ticks))
            .collect();
        for (pid, start) in gone {
            self.forget(pid, start);
        }
    }

    fn view(&mut self, idx: usize, now_ns: u64) -> Proc {
        let t = &mut self.procs[idx];
        let now_s = now_ns / 1_000_000_000;
        let merged = t.window.merged(now_s);
        let t = &self.procs[idx];
        let a = &t.f.agg;
        let key = (a.pid, a.start_ticks);

        // Since start (or reset): exact header totals, recorded percentiles.
        let mut all_kinds = Vec::new();
        for (i, k) in STALL_KINDS.iter().enumerate() {
            let (count, total_ns) = t.totals(*k);
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
        let (events_per_s, stall_per_s) = t.rates();
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
            let modules = self.procs[idx].f.reader.modules();
            for site in want {
                let k = (key.0, key.1, site);
                if self.sym.pending.contains(&k) || self.sym.cache.contains_key(&k) {
                    continue;
                }
                let stack = self.procs[idx].f.reader.site(site).unwrap_or_default();
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
        for t in &mut self.procs {
            t.poll(now);
        }
        self.drop_oldest_ended();
        let mut processes = Vec::with_capacity(self.procs.len());
        for i in 0..self.procs.len() {
            processes.push(self.view(i, now));
        }
        Snapshot {
            source: self.dir.display().to_string(),
            processes,
            problems: self.problems.clone(),
            window_secs: self.window_secs,
        }
    }

    fn reset(&mut self) {
        for t in &mut self.procs {
            t.reset();
        }
    }

    fn forget(&mut self, pid: u32, start_ticks: u64) {
        self.procs
            .retain(|t| (t.f.agg.pid, t.f.agg.start_ticks) != (pid, start_ticks));
        self.sym.forget(pid, start_ticks);
    }
}

fn owned_by_us(entry: &std::fs::DirEntry) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    entry.metadata().map(|m| m.uid() == me).unwrap_or(false)
}
