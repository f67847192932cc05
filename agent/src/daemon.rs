//! `syncspy agent`: a headless daemon that follows every instrumented process on the host
//! (every segment in `SYNCSPY_DIR`, whatever its session), and serves Prometheus metrics at
//! `/metrics` and a JSON snapshot at `/api/v1/snapshot`.
//!
//! A [`Collector`] scans and drains the segments every `interval` and keeps a [`Snapshot`];
//! HTTP requests are answered from the latest snapshot, so a scrape never waits for a scan.
//!
//! Ended processes stay in the snapshot for `retain`, then are forgotten: their totals move
//! into per-program counters (so Prometheus counters never go down), and their segment file
//! is removed when no `syncspy run` owns it (session 0: a program started with
//! `LD_PRELOAD=libsyncspy.so` by hand or by a launcher). Segments of a `syncspy run` session
//! are left to that run, which removes them itself (or keeps them with `--keep-segments`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use syncspy_abi::Kind;

use crate::metrics;
use syncspy_read::follow::{Followed, Follower};
use syncspy_read::monotonic_ns;
use syncspy_read::report::process_report;
pub use syncspy_read::snapshot::{
    latency_of, ForgottenProgram, Latency, Snapshot, SnapshotProcess, LATENCY_BOUNDS_NS,
    SNAPSHOT_VERSION,
};
use syncspy_read::symbolize::Symbolizer;

/// Distinct `program` label values; later programs are labelled `other`.
pub const MAX_PROGRAMS: usize = 50;
/// Warnings kept in the snapshot (the latest ones).
pub const MAX_WARNINGS: usize = 20;
/// The default address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9599";

/// The program a process runs: the file name of `argv[0]`, or for an interpreter (python,
/// torchrun, ...) that of its script, e.g. `python3 train.py`.
pub fn program_of(argv: &[String]) -> String {
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    let Some(first) = argv.first().filter(|a| !a.is_empty()) else {
        return "unknown".to_string();
    };
    let prog = base(first);
    let interpreter = ["python", "torchrun", "accelerate", "deepspeed"]
        .iter()
        .any(|p| prog.starts_with(p));
    if interpreter {
        // The first argument that is not an option: the script (`-m mod` keeps `mod`).
        let mut it = argv[1..].iter();
        while let Some(a) = it.next() {
            if a == "-m" {
                if let Some(m) = it.next() {
                    return format!("{prog} -m {m}");
                }
            } else if !a.starts_with('-') {
                return format!("{prog} {}", base(a));
            }
        }
    }
    prog
}

/// Follows all segments of a folder and keeps the host's totals.
pub struct Collector {
    follower: Follower,
    sym: Symbolizer,
    retain: Duration,
    keep_segments: bool,
    /// Program -> label, bounded by `MAX_PROGRAMS`.
    labels: BTreeMap<String, String>,
    forgotten: BTreeMap<String, ForgottenProgram>,
    warnings: Vec<String>,
    host: String,
}

impl Collector {
    pub fn new(dir: PathBuf, retain: Duration, keep_segments: bool) -> Collector {
        Collector {
            follower: Follower::new(dir, None),
            sym: Symbolizer::new(),
            retain,
            keep_segments,
            labels: BTreeMap::new(),
            forgotten: BTreeMap::new(),
            warnings: Vec::new(),
            host: hostname(),
        }
    }

    fn warn(&mut self, w: String) {
        eprintln!("syncspy agent: warning: {w}");
        self.warnings.push(w);
        if self.warnings.len() > MAX_WARNINGS {
            self.warnings.remove(0);
        }
    }

    fn label(&mut self, argv: &[String]) -> String {
        let program = program_of(argv);
        if let Some(l) = self.labels.get(&program) {
            return l.clone();
        }
        let l = if self.labels.len() < MAX_PROGRAMS {
            program.clone()
        } else {
            "other".to_string()
        };
        self.labels.insert(program, l.clone());
        l
    }

    /// One round: find new segments, drain all, forget (and maybe remove) those that ended
    /// more than `retain` ago.
    pub fn step(&mut self) {
        if let Err(e) = self.follower.scan() {
            let w = format!("cannot read {}: {e}", self.follower.dir().display());
            if !self.warnings.contains(&w) {
                self.warn(w);
            }
        }
        let problems: Vec<String> = self
            .follower
            .take_new_problems()
            .iter()
            .map(|p| p.to_string())
            .collect();
        for p in problems {
            self.warn(p);
        }
        self.follower.poll();

        let now = monotonic_ns();
        let retain = u64::try_from(self.retain.as_nanos()).unwrap_or(u64::MAX);
        let stale = |f: &Followed| {
            f.ended() && {
                let end = match f.agg.live.ended_ns {
                    0 => f.agg.gone_ns.unwrap_or(now),
                    e => e,
                };
                now.saturating_sub(end) >= retain
            }
        };
        let gone = self.follower.forget(stale);
        for f in gone {
            self.retire(&f);
        }
    }

    fn retire(&mut self, f: &Followed) {
        let label = self.label(&f.agg.argv);
        let a = &f.agg;
        let entry = self.forgotten.entry(label).or_default();
        entry.processes = entry.processes.saturating_add(1);
        for k in Kind::ALL {
            let t = a.live.kind(*k);
            if t.count > 0 {
                entry
                    .kinds
                    .entry(k.name().to_string())
                    .or_default()
                    .add(t.count, t.total_ns, t.bytes);
            }
        }
        for (kind, l) in latency_of(a) {
            entry.latency.entry(kind).or_default().add(&l);
        }
        // Saturating: every one of these comes from a segment, which may say anything.
        entry.dropped_events = entry.dropped_events.saturating_add(a.live.events_dropped);
        entry.lost_records = entry
            .lost_records
            .saturating_add(a.lost.saturating_sub(a.live.events_dropped));
        entry.overhead_ns = entry.overhead_ns.saturating_add(a.live.overhead_ns);
        if a.session == 0 && !self.keep_segments {
            if let Err(e) = f.remove_file() {
                self.warn(format!("cannot remove {}: {e}", f.reader.path().display()));
            }
        }
    }

    /// The host as of the last step.
    pub fn snapshot(&mut self) -> Snapshot {
        let now = monotonic_ns();
        let mut processes = Vec::new();
        let argvs: Vec<Vec<String>> = self
            .follower
            .processes()
            .iter()
            .map(|f| f.agg.argv.clone())
            .collect();
        let labels: Vec<String> = argvs.iter().map(|a| self.label(a)).collect();
        for (f, program) in self.follower.processes().iter().zip(labels) {
            processes.push(SnapshotProcess {
                program,
                report: process_report(f, &mut self.sym, now),
                latency: latency_of(&f.agg),
            });
        }
        let mut warnings = self.warnings.clone();
        warnings.extend(self.sym.notes().iter().cloned());
        Snapshot {
            syncspy_snapshot: SNAPSHOT_VERSION,
            host: self.host.clone(),
            time_unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
            segment_dir: self.follower.dir().display().to_string(),
            processes,
            forgotten: self.forgotten.clone(),
            segments_skipped: self.follower.problems().len(),
            warnings,
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// What `syncspy agent` was asked to do.
#[derive(Clone, Debug)]
pub struct DaemonOptions {
    pub listen: String,
    pub dir: PathBuf,
    /// How often segments are scanned and drained, and the snapshot refreshed.
    pub interval: Duration,
    /// How long ended processes stay in the snapshot.
    pub retain: Duration,
    /// Never remove segment files.
    pub keep_segments: bool,
}

fn respond(req: tiny_http::Request, snapshot: &Mutex<Arc<Snapshot>>) {
    let snap = snapshot
        .lock()
        .map(|s| Arc::clone(&s))
        .unwrap_or_else(|p| Arc::clone(&p.into_inner()));
    let url = req.url().split('?').next().unwrap_or("").to_string();
    let text = "text/plain; charset=utf-8";
    let (status, body, ctype) = if *req.method() != tiny_http::Method::Get {
        (405, "only GET\n".to_string(), text)
    } else {
        match url.as_str() {
            "/metrics" => match metrics::render(&snap) {
                Ok(m) => (200, m, metrics::CONTENT_TYPE),
                Err(e) => (500, format!("{e}\n"), text),
            },
            "/api/v1/snapshot" => match serde_json::to_string(&*snap) {
                Ok(j) => (200, j, "application/json"),
                Err(e) => (500, format!("{e}\n"), text),
            },
            "/" => (
                200,
                "syncspy agent\n/metrics            Prometheus metrics\n/api/v1/snapshot    \
                 every followed process as JSON\n"
                    .to_string(),
                text,
            ),
            _ => (404, "not found\n".to_string(), text),
        }
    };
    let mut resp = tiny_http::Response::from_string(body).with_status_code(status);
    // Constant ASCII: always a valid header.
    if let Ok(h) = tiny_http::Header::from_bytes(&b"Content-Type"[..], ctype.as_bytes()) {
        resp = resp.with_header(h);
    }
    // A client that went away is not the agent's problem.
    let _ = req.respond(resp);
}

/// Why the daemon could not start.
#[derive(Debug)]
pub enum ServeError {
    /// The address could not be bound.
    Listen {
        addr: String,
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The thread that answers HTTP requests could not be started.
    Thread(std::io::Error),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Listen { addr, source } => write!(f, "cannot listen on {addr}: {source}"),
            ServeError::Thread(e) => write!(f, "cannot start the HTTP thread: {e}"),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::Listen { source, .. } => Some(source.as_ref()),
            ServeError::Thread(e) => Some(e),
        }
    }
}

/// Runs the daemon until the process is stopped. Fails only at start, when the address cannot
/// be bound (an unusable segment folder is reported in the snapshot and retried).
pub fn serve(opts: &DaemonOptions) -> Result<std::convert::Infallible, ServeError> {
    let server = tiny_http::Server::http(&opts.listen).map_err(|source| ServeError::Listen {
        addr: opts.listen.clone(),
        source,
    })?;
    let addr = server
        .server_addr()
        .to_ip()
        .map(|a: SocketAddr| a.to_string())
        .unwrap_or_else(|| opts.listen.clone());
    if !server
        .server_addr()
        .to_ip()
        .is_some_and(|a| a.ip().is_loopback())
    {
        eprintln!(
            "syncspy agent: warning: serving on {addr}, which is not loopback: anyone who can \
             reach it sees command lines and call sites"
        );
    }
    let mut collector = Collector::new(opts.dir.clone(), opts.retain, opts.keep_segments);
    collector.step();
    let shared = Arc::new(Mutex::new(Arc::new(collector.snapshot())));
    eprintln!(
        "syncspy agent: following segments in {}; serving http://{addr}/metrics and \
         http://{addr}/api/v1/snapshot",
        opts.dir.display()
    );
    // The collector stays on this thread (the symbolizer is not Send); requests are
    // answered on another from the latest snapshot.
    let for_http = Arc::clone(&shared);
    std::thread::Builder::new()
        .name("syncspy-http".into())
        .spawn(move || {
            for req in server.incoming_requests() {
                respond(req, &for_http);
            }
        })
        .map_err(ServeError::Thread)?;
    loop {
        std::thread::sleep(opts.interval);
        collector.step();
        let snap = Arc::new(collector.snapshot());
        if let Ok(mut s) = shared.lock() {
            *s = snap;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncspy_abi::{Api, SegmentParams, SegmentWriter};
    use syncspy_read::aggregate::Dist;
    use syncspy_test_support::{rec, TempDir};

    #[test]
    fn latency_buckets_split_the_recorded_values_at_the_bounds() {
        let mut d = Dist::new(syncspy_read::aggregate::PROCESS_SIGFIG);
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

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn programs_are_named_by_binary_or_script() {
        assert_eq!(
            program_of(&argv(&["/usr/bin/cudacalls", "--iters", "3"])),
            "cudacalls"
        );
        assert_eq!(
            program_of(&argv(&["python3", "-u", "/work/train.py", "--lr", "1"])),
            "python3 train.py"
        );
        assert_eq!(
            program_of(&argv(&["python", "-m", "torch.distributed.run"])),
            "python -m torch.distributed.run"
        );
        assert_eq!(program_of(&argv(&["python3"])), "python3");
        assert_eq!(program_of(&[]), "unknown");
    }

    fn segment(dir: &std::path::Path, pid: u32, session: u64, name: &str) -> SegmentWriter {
        let mut p = SegmentParams::new(pid, 100 + pid as u64);
        p.session = session;
        p.ring_capacity = 64;
        p.site_capacity = 16;
        p.module_capacity = 8;
        p.cmdline = format!("{name}\0").into_bytes();
        SegmentWriter::create(dir, &p).unwrap()
    }

    #[test]
    fn ended_processes_are_forgotten_their_totals_kept_and_only_unowned_files_removed() {
        let dir = TempDir::new("daemon");
        // Pids that do not exist with these start times: gone at once.
        let manual = segment(dir.path(), 41, 0, "/opt/train");
        let owned = segment(dir.path(), 42, 77, "/opt/train");
        for w in [&manual, &owned] {
            w.record(&rec(
                Kind::StreamSync,
                Api::CudaStreamSynchronize,
                1_000,
                0,
                0,
            ));
        }
        manual.mark_exited(0);

        let mut c = Collector::new(dir.path().to_path_buf(), Duration::from_secs(3600), false);
        c.step();
        let s = c.snapshot();
        assert_eq!(s.processes.len(), 2);
        assert!(s.processes.iter().all(|p| p.program == "train"));
        assert_eq!(s.processes[0].report.kinds["stream_sync"].count, 1);
        assert!(s.forgotten.is_empty());

        // With no retention, both are forgotten; only the unowned file goes.
        c.retain = Duration::ZERO;
        c.step();
        let s = c.snapshot();
        assert!(s.processes.is_empty());
        let f = &s.forgotten["train"];
        assert_eq!(f.processes, 2);
        assert_eq!(f.kinds["stream_sync"].count, 2);
        assert_eq!(f.kinds["stream_sync"].total_ns, 2_000);
        assert!(!manual.path().exists(), "session 0: nobody else removes it");
        assert!(
            owned.path().exists(),
            "a syncspy run session's file is left to the run"
        );
        // Not picked up again while the file exists.
        c.step();
        assert!(c.snapshot().processes.is_empty());
        assert_eq!(c.snapshot().forgotten["train"].processes, 2);
        // The counters did not go down.
        let m = metrics::render(&c.snapshot()).unwrap();
        assert!(
            m.contains(r#"syncspy_stall_events_total{program="train",kind="stream_sync"} 2"#),
            "{m}"
        );
    }

    #[test]
    fn header_counters_at_u64_max_neither_wrap_nor_panic_when_forgotten() {
        use std::sync::atomic::Ordering::Relaxed;
        let dir = TempDir::new("daemon-max");
        let ws: Vec<SegmentWriter> = (0..2)
            .map(|i| segment(dir.path(), 51 + i, 0, "/opt/huge"))
            .collect();
        for w in &ws {
            let l = w.live();
            l.events_dropped.store(u64::MAX, Relaxed);
            l.overhead_ns.store(u64::MAX, Relaxed);
            l.write_seq.store(u64::MAX, Relaxed);
            let t = &l.kinds[Kind::StreamSync as usize];
            t.count.store(u64::MAX, Relaxed);
            t.total_ns.store(u64::MAX, Relaxed);
            t.bytes.store(u64::MAX, Relaxed);
            w.mark_exited(0);
        }
        let mut c = Collector::new(dir.path().to_path_buf(), Duration::ZERO, true);
        c.step(); // found, drained and (retain 0) forgotten at once
        c.step();
        let s = c.snapshot();
        let f = &s.forgotten["huge"];
        assert_eq!(f.processes, 2);
        assert_eq!(f.dropped_events, u64::MAX);
        assert_eq!(f.overhead_ns, u64::MAX);
        assert_eq!(f.kinds["stream_sync"].count, u64::MAX);
        let m = metrics::render(&s).unwrap();
        assert!(
            m.contains(&format!(
                r#"syncspy_stall_events_total{{program="huge",kind="stream_sync"}} {}"#,
                u64::MAX
            )),
            "{m}"
        );
    }

    #[test]
    fn program_labels_are_bounded() {
        let dir = TempDir::new("daemon-labels");
        let mut c = Collector::new(dir.path().to_path_buf(), Duration::ZERO, true);
        for i in 0..MAX_PROGRAMS + 5 {
            let l = c.label(&argv(&[&format!("prog{i}")]));
            if i < MAX_PROGRAMS {
                assert_eq!(l, format!("prog{i}"));
            } else {
                assert_eq!(l, "other");
            }
        }
        // A known program keeps its label.
        assert_eq!(c.label(&argv(&["prog3"])), "prog3");
    }
}
