//! `syncspy agent`: a headless daemon that follows every instrumented process on the host
//! (every segment in `SYNCSPY_DIR`, whatever its session), and serves Prometheus metrics at
//! `/metrics` and a JSON snapshot at `/api/v1/snapshot`.
//!
//! A [`Collector`] scans and drains the segments every `interval` and keeps a [`Snapshot`];
//! HTTP requests are answered from the latest snapshot, so a scrape never waits for a scan.
//!
//! The agent reads its folder through one reader session (`syncspy_read::session`): it
//! registers as a reader of the whole folder and takes a lease on every segment it follows
//! (`syncspy_abi::lifecycle`), so that `syncspy run` hands its ended segments over
//! instead of removing them before the agent has read them; it watches the folder with
//! inotify, so a new segment is opened at once, not at the next interval.
//!
//! Ended processes stay in the snapshot for `retain` (and while the `syncspy run` of their
//! session still runs, so that the run hands them over), then are forgotten: their totals move
//! into per-program counters (so Prometheus counters never go down), the lease is given up,
//! and the segment file is removed unless another reader still wants it (a lease of its own,
//! or the live `syncspy run` of its session, which then removes it itself). A segment whose
//! file was removed under it is forgotten as soon as it is drained, so its memory is freed.
//! Every `HOUSEKEEPING_EVERY` (or every step, when steps are further apart) the agent also
//! reclaims what nobody reads (`syncspy_abi::lifecycle::reclaim`: ended processes' segments
//! after their linger, and the folder's size cap), and surveys the folder's readers (the live
//! `syncspy run`s) then and whenever a reader's file appears: with the folder's scan, which
//! opens only what inotify names between listings, a step's cost does not grow with the files
//! that sit in the folder unchanged (another user's, say, which a root agent leaves alone).
//!
//! Segment folders private to a pod or container (their own `/dev/shm`) are found through
//! `/proc` (`crate::pods`) and followed each with a reader session of its own, read-only: the
//! agent writes no registration or lease there and reclaims nothing there (the pod's own
//! library does). What a lease would say (that the agent reads a segment) lives only in the
//! agent's memory: the segments it follows, kept mapped until forgotten like the others.
//! A `syncspy run` in such a pod does not know of the agent and removes its segments at its
//! end; the agent then drains what it has mapped and forgets them. Their call sites are
//! symbolized with the modules inside the pod's root (`syncspy_read::symbolize::ModuleRoot`),
//! through a process of the pod's mount namespace (the writer, or one the discovery pass
//! found), not at the same paths on the node.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};

use syncspy_abi::lifecycle::{self, Policy, Scope};
use syncspy_abi::Kind;

use crate::{metrics, pods};
use syncspy_read::follow::Followed;
use syncspy_read::limits::{Dropped, Limits};
use syncspy_read::monotonic_ns;
use syncspy_read::report::process_report;
use syncspy_read::session::{ReaderSession, SessionOptions, SessionProblem};
pub use syncspy_read::snapshot::{
    latency_of, ForgottenProgram, Latency, Snapshot, SnapshotProcess, LATENCY_BOUNDS_NS,
    SNAPSHOT_VERSION,
};
use syncspy_read::symbolize::{PassBudget, Symbolizer};

/// What one snapshot may spend on stacks not symbolized before: the rest wait for the next
/// steps (`Symbolizer::begin_pass`), so symbolizing never holds up the collection.
pub const SYMBOLIZE_PER_STEP: PassBudget = PassBudget {
    frames: 16_384,
    frames_per_segment: 2_048,
};

/// `syncspy agent --help`, after the options: what it follows, every metric it serves, the
/// token, the exit status.
pub const HELP: &str = "\
Follows every segment in SYNCSPY_DIR (default /dev/shm), of any session; run it as the user
that runs the CUDA jobs (segments are mode 0600), or as root. It also follows, read-only, the
segment folders of processes in other mount namespaces (containers, pods with their own
/dev/shm), found every 3 s through /proc/<pid>/root: that needs the host's PID namespace
(Kubernetes hostPID) and CAP_SYS_PTRACE (docs/cluster.md); at most 256 such folders.
Per folder it follows at most 256 segments per user (owner of the file) and 2048 in all, and
spends at most 256 MiB per user and 1 GiB in all on their histograms (estimated); the rest is
skipped and counted (SYNCSPY_READER_SEGMENTS_PER_USER, SYNCSPY_READER_SEGMENTS,
SYNCSPY_READER_MB_PER_USER, SYNCSPY_READER_MB change the caps).

Metrics (labels: program, at most 50 values then \"other\"; kind; state):
  syncspy_stall_events_total, syncspy_stall_seconds_total, syncspy_stall_bytes_total
    (host stalls: every kind but the GPU's idle gaps)
  syncspy_stall_duration_seconds (histogram of single stalls, half-decade buckets from
    10 us to 10 s)
  syncspy_gpu_idle_seconds_total, syncspy_gpu_idle_gaps_total,
  syncspy_gpu_idle_gap_duration_seconds (histogram), syncspy_gpu_busy_ratio (where the GPU
    is traced)
  syncspy_processes, syncspy_dropped_events_total, syncspy_lost_records_total,
  syncspy_overhead_seconds_total, syncspy_forgotten_processes_total,
  syncspy_segments_skipped, syncspy_agent_info
  syncspy_reader_dropped_total (label what: segment, histogram, module, deferred_poll,
    deferred_stack, compacted; what the reader budgets left out, docs/contracts.md)
  syncspy_process_info (labels pid, host_pid, container, pod_uid: at most 256 live
    processes)
Distributed jobs (labels: job_id, at most 8 then \"other\"; rank, at most 64 per job):
  syncspy_job_rank_stall_seconds_total, syncspy_job_rank_gpu_idle_behind_stalls_seconds_total,
  syncspy_job_rank_collective_seconds_total, syncspy_job_rank_collective_wait_seconds_total,
  syncspy_job_ranks, syncspy_job_straggler_rank, syncspy_job_straggler_excess_seconds

/metrics is for anyone who can connect (loopback by default). /api/v1/snapshot (command lines,
call stacks) needs `Authorization: Bearer TOKEN`, with the random token the agent writes at
start to --token-file (mode 0600: the agent's user and root); `syncspy-top --agent` reads it.

Exit status: 2 when the address cannot be bound, the token file cannot be written or
SYNCSPY_DIR is unusable.";

/// The shortest time between two steps of the collector.
pub const MIN_STEP_GAP: Duration = Duration::from_millis(100);

/// The longest time between two reclaims of the folder, and between two surveys of its
/// readers (each lists the whole folder; the reclaim lstats every segment file in it).
pub const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(2);

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

/// A pod's (or container's) own segment folder, followed read-only (`crate::pods`).
struct PodFolder {
    /// Reads without leases or a registration: nothing is written into a pod's folder.
    reader: ReaderSession,
    id: pods::FolderId,
    mnt_ns: u64,
    /// Where it is, for people (`/proc/<pid>/root/dev/shm`, through the process it was
    /// found, or last seen, through).
    describe: String,
    /// The folder, open: the follower reads it as `/proc/self/fd/<n>`, so this lives as
    /// long as a segment followed in it does.
    _dir: std::os::fd::OwnedFd,
    watch: Option<inotify::WatchDescriptor>,
    /// No process of its mount namespace is left: no longer scanned; dropped once its
    /// segments are forgotten.
    gone: bool,
}

/// Follows all segments of a folder, and of the pods' own folders, and keeps the host's
/// totals.
pub struct Collector {
    /// The folder's reader: registered for every segment, leasing each, watched.
    reader: ReaderSession,
    /// Pods' folders (`crate::pods`), at most `pods::MAX_POD_FOLDERS`.
    pods: Vec<PodFolder>,
    discovery: pods::Discovery,
    /// One inotify instance for every pod folder (instances are few per user; watches many).
    pod_watch: Option<inotify::Inotify>,
    /// Pods' folders left unfollowed (over the cap) at the last pass, as last warned.
    pods_over_cap: usize,
    sym: Symbolizer,
    retain: Duration,
    keep_segments: bool,
    /// Program -> label, bounded by `MAX_PROGRAMS`.
    labels: BTreeMap<String, String>,
    forgotten: BTreeMap<String, ForgottenProgram>,
    warnings: Vec<String>,
    host: String,
    policy: Policy,
    limits: Limits,
    /// Where the next snapshot starts symbolizing (rotated, so every process gets a turn
    /// of the per-step budget).
    next_report: usize,
    /// What the budgets dropped, as last logged.
    logged_dropped: Dropped,
    /// Processes let go since the heap was last trimmed, and when that was.
    retired_since_trim: usize,
    last_trim: Option<std::time::Instant>,
    /// When the last `over budget` line was logged.
    last_drop_log: Option<std::time::Instant>,
    /// The sessions of the live `syncspy run`s, as last surveyed, and when.
    runs: Vec<u64>,
    last_survey: Option<std::time::Instant>,
    /// When the folder was last reclaimed.
    last_reclaim: Option<std::time::Instant>,
}

impl Collector {
    pub fn new(dir: PathBuf, retain: Duration, keep_segments: bool) -> Collector {
        let limits = Limits::from_env();
        let mut c = Collector {
            reader: ReaderSession::new(
                SessionOptions::new(dir)
                    .claiming()
                    .watch(true)
                    .budget(limits),
            ),
            pods: Vec::new(),
            discovery: pods::Discovery::new(),
            pod_watch: None,
            pods_over_cap: 0,
            sym: Symbolizer::new(),
            retain,
            keep_segments,
            labels: BTreeMap::new(),
            forgotten: BTreeMap::new(),
            warnings: Vec::new(),
            host: hostname(),
            policy: Policy::from_env(),
            limits,
            next_report: 0,
            logged_dropped: Dropped::default(),
            retired_since_trim: 0,
            last_trim: None,
            last_drop_log: None,
            runs: Vec::new(),
            last_survey: None,
            last_reclaim: None,
        };
        let problems = c.reader.take_problems();
        c.warn_new(problems);
        c
    }

    /// Warns of each problem: a segment's always (the session says each once), the
    /// folder's (unreadable, not registered) when not already among the warnings kept.
    fn warn_new(&mut self, problems: Vec<SessionProblem>) {
        for p in problems {
            let w = p.to_string();
            if matches!(p, SessionProblem::Segment(_)) || !self.warnings.contains(&w) {
                self.warn(w);
            }
        }
    }

    /// Waits up to `timeout` for a new segment, in the folder or a pod's (returns at once
    /// when one appears).
    pub fn wait(&mut self, timeout: Duration) {
        use std::os::fd::AsRawFd;
        let Some(pw) = &mut self.pod_watch else {
            self.reader.wait(timeout);
            return;
        };
        let mut fds = vec![libc::pollfd {
            fd: pw.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if let Some(fd) = self.reader.follower().watch_fd() {
            fds.push(libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `fds` is a vector of valid pollfds, passed with its length; each fd stays
        // open for the call (owned by the inotify instances, borrowed here).
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        // Drain both queues (what appeared is found by the scans).
        let mut buf = [0u8; 4096];
        while pw.read_events(&mut buf).is_ok_and(|e| e.count() > 0) {}
        self.reader.wait(Duration::ZERO);
    }

    /// A discovery pass, when due: follows the pods' folders found, refreshes where the
    /// known ones are, and marks those whose mount namespace has no process left.
    fn discover(&mut self) {
        use std::os::unix::fs::MetadataExt;
        if !self.discovery.due(std::time::Instant::now()) {
            return;
        }
        let host = std::fs::metadata(self.reader.dir())
            .ok()
            .map(|m| (m.dev(), m.ino()));
        let known: Vec<pods::FolderId> = self.pods.iter().map(|p| p.id).chain(host).collect();
        let pass = self.discovery.pass(&|id| known.contains(&id));
        // The modules of a pod's processes are read inside its root: through the writer
        // while it lives, else through any process of its mount namespace.
        self.sym
            .set_namespace_pids(pass.alive.iter().map(|(ns, pid)| (*ns, *pid)));
        for p in &mut self.pods {
            match pass.alive.get(&p.mnt_ns) {
                Some(&pid) if !p.gone => {
                    // Only for people: the folder itself is held open.
                    if !p.describe.starts_with(&format!("/proc/{pid}/")) {
                        if let Some(rest) = p.describe.split_once("/root").map(|(_, r)| r) {
                            p.describe = format!("/proc/{pid}/root{rest}");
                        }
                    }
                }
                Some(_) => {}
                None => {
                    p.gone = true;
                    if let (Some(w), Some(pw)) = (p.watch.take(), &mut self.pod_watch) {
                        let _ = pw.watches().remove(w);
                    }
                }
            }
        }
        let mut over = 0;
        for found in pass.found {
            let live = self.pods.iter().filter(|p| !p.gone).count();
            if live >= pods::MAX_POD_FOLDERS {
                over += 1;
                self.discovery.retry(found.pid);
                continue;
            }
            self.follow_pod(found);
        }
        // Folders of gone mount namespaces whose segments are all forgotten are closed.
        self.pods
            .retain(|p| !(p.gone && p.reader.processes().is_empty()));
        if over != self.pods_over_cap {
            self.pods_over_cap = over;
            if over > 0 {
                self.warn(format!(
                    "{over} pods' segment folders are not followed: over the cap of {} \
                     (their processes are not in the metrics)",
                    pods::MAX_POD_FOLDERS
                ));
            }
        }
    }

    fn follow_pod(&mut self, found: pods::Found) {
        use std::os::fd::AsRawFd;
        let path = PathBuf::from(format!("/proc/self/fd/{}", found.dir.as_raw_fd()));
        let describe = found.describe();
        if self.pod_watch.is_none() {
            match inotify::Inotify::init() {
                Ok(i) => self.pod_watch = Some(i),
                Err(e) => self.warn(format!(
                    "cannot watch pods' segment folders with inotify ({e}): their new \
                     segments are found at each interval"
                )),
            }
        }
        let watch = self.pod_watch.as_mut().and_then(|pw| {
            pw.watches()
                .add(
                    &path,
                    inotify::WatchMask::MOVED_TO | inotify::WatchMask::CREATE,
                )
                .ok()
        });
        eprintln!(
            "syncspy agent: following the segments of mount namespace {} in {describe}",
            found.mnt_ns
        );
        self.pods.push(PodFolder {
            // No leases, no registration: nothing is written into a pod's folder.
            reader: ReaderSession::new(SessionOptions::new(path).budget(self.limits)),
            id: found.id,
            mnt_ns: found.mnt_ns,
            describe,
            _dir: found.dir,
            watch,
            gone: false,
        });
    }

    fn warn(&mut self, w: String) {
        eprintln!("syncspy: warning: {w}");
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
        let problems = self.reader.step(|_, _, _| {});
        self.warn_new(problems);
        self.discover();
        let mut problems = Vec::new();
        for p in self.pods.iter_mut() {
            // A gone pod's folder is not scanned: its segments are drained until forgotten.
            let found = if p.gone {
                p.reader.poll(|_, _, _| {})
            } else {
                p.reader.step(|_, _, _| {})
            };
            // Named for people, not as the agent reaches it (/proc/self/fd/N).
            let dir = p.reader.dir().display().to_string();
            for pr in found {
                problems.push(pr.to_string().replace(&dir, &p.describe));
            }
        }
        for w in problems {
            if !self.warnings.contains(&w) {
                self.warn(w);
            }
        }

        let now = monotonic_ns();
        let retain = u64::try_from(self.retain.as_nanos()).unwrap_or(u64::MAX);
        // The live `syncspy run`s: their ended segments are kept (and leased) until the run
        // ends, so that the run hands them over rather than removes them.
        // Surveyed again when a reader's file appeared (a run registers before its program
        // starts) or `HOUSEKEEPING_EVERY` passed.
        let appeared = self.reader.follower_mut().take_reader_appeared();
        if appeared
            || self
                .last_survey
                .is_none_or(|t| t.elapsed() >= HOUSEKEEPING_EVERY)
        {
            let me = lifecycle::Owner::me();
            self.last_survey = Some(std::time::Instant::now());
            self.runs = lifecycle::Readers::survey(self.reader.dir())
                .map(|r| {
                    r.registered
                        .iter()
                        .filter(|(o, _)| *o != me)
                        .filter_map(|(_, s)| match s {
                            Scope::Session(n) => Some(*n),
                            Scope::All => None,
                        })
                        .collect()
                })
                .unwrap_or_default();
        }
        let runs = &self.runs;
        // A segment removed under us is drained (just now) and let go: nobody else can find
        // it, and its mapping alone keeps its memory in use.
        // A user at their cap of segments: their compacted ended processes are retired at
        // once (totals kept), to make room for their new ones.
        let mut per_user: std::collections::HashMap<u32, usize> = Default::default();
        for f in self.reader.processes() {
            *per_user.entry(f.uid).or_default() += 1;
        }
        let cap = self.limits.segments_per_user;
        let at_cap = |f: &Followed| per_user.get(&f.uid).is_some_and(|n| *n >= cap);
        let stale = |f: &Followed| {
            f.unlinked()
                || f.ended() && f.agg.compacted && at_cap(f)
                || f.ended() && !(f.agg.session != 0 && runs.contains(&f.agg.session)) && {
                    let end = match f.agg.live.ended_ns {
                        0 => f.agg.gone_ns.unwrap_or(now),
                        e => e,
                    };
                    now.saturating_sub(end) >= retain
                }
        };
        let gone = self.reader.follower_mut().forget(stale);
        let mut retired = gone.len();
        // One survey of the folder's readers for every file let go in this step.
        let mut survey = None;
        for mut f in gone {
            self.retire(&mut f, false, &mut survey);
        }
        // A pod's segments: forgotten the same way; the pod's own library removes them.
        let pod_stale = |f: &Followed| {
            f.unlinked()
                || f.ended() && {
                    let end = match f.agg.live.ended_ns {
                        0 => f.agg.gone_ns.unwrap_or(now),
                        e => e,
                    };
                    now.saturating_sub(end) >= retain
                }
        };
        let gone: Vec<Followed> = self
            .pods
            .iter_mut()
            .flat_map(|p| p.reader.follower_mut().forget(pod_stale))
            .collect();
        retired += gone.len();
        for mut f in gone {
            self.retire(&mut f, true, &mut survey);
        }
        self.trim(retired);
        self.pods
            .retain(|p| !(p.gone && p.reader.processes().is_empty()));
        let reclaim_due = self
            .last_reclaim
            .is_none_or(|t| t.elapsed() >= HOUSEKEEPING_EVERY);
        if !self.keep_segments && reclaim_due {
            self.last_reclaim = Some(std::time::Instant::now());
            let followed: std::collections::HashSet<PathBuf> = self
                .reader
                .processes()
                .iter()
                .map(|f| f.reader.path().to_path_buf())
                .collect();
            // Nor one it has not read yet: a job that began and ended since this step's scan
            // would otherwise be removed unread whenever the folder is over its cap (another
            // user's files, which this agent does not reclaim, can keep it there).
            let grace = Duration::from_nanos(lifecycle::AGENT_GRACE_NS);
            let recent = |p: &std::path::Path| {
                std::fs::symlink_metadata(p)
                    .ok()
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age < grace)
            };
            let skip = |p: &std::path::Path| followed.contains(p) || recent(p);
            if let Err(e) = lifecycle::reclaim(self.reader.dir(), self.policy, &skip) {
                let w = format!("cannot reclaim in {}: {e}", self.reader.dir().display());
                if !self.warnings.contains(&w) {
                    self.warn(w);
                }
            }
        }
        self.log_dropped();
    }

    /// Moves a forgotten segment's totals into its program's counters and lets go of its
    /// file: released (and removed when nobody wants it) in the agent's folder, left as it
    /// is in a pod's (`pod`), where the agent writes nothing.
    fn retire(&mut self, f: &mut Followed, pod: bool, survey: &mut Option<lifecycle::Readers>) {
        let k = f.key();
        self.sym
            .forget_owner((k.process.pid, k.process.start_ticks, k.created_ns));
        let label = self.label(&f.agg.argv);
        let a = &f.agg;
        let entry = self.forgotten.entry(label).or_default();
        entry.processes = entry.processes.saturating_add(1);
        for k in Kind::ALL {
            let t = a.live.kind(*k);
            if t.count > 0 {
                entry
                    .kinds
                    .entry((*k).into())
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
        if self.keep_segments || pod {
            drop(f.take_lease());
        } else if let Err(e) = f.release_with(false, survey) {
            self.warn(format!("cannot remove {}: {e}", f.reader.path().display()));
        }
    }

    /// Hands freed heap back to the system after processes were let go (at most every 5 s):
    /// a flood of short processes otherwise leaves the agent's resident memory at its peak.
    fn trim(&mut self, retired: usize) {
        self.retired_since_trim += retired;
        let due = self
            .last_trim
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(5));
        if self.retired_since_trim == 0 || !due {
            return;
        }
        self.retired_since_trim = 0;
        self.last_trim = Some(std::time::Instant::now());
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim has no preconditions; it only releases free heap memory.
        unsafe {
            libc::malloc_trim(0);
        }
    }

    /// What the budgets dropped, over the folder and the pods' folders.
    pub fn dropped(&self) -> Dropped {
        let mut d = self.reader.follower().dropped();
        for p in &self.pods {
            d.add(&p.reader.follower().dropped());
        }
        d
    }

    /// `dropped` as the snapshot's `reader_dropped`, with the stacks left for later steps.
    fn dropped_pairs(&self) -> BTreeMap<String, u64> {
        let mut m: BTreeMap<String, u64> = self
            .dropped()
            .pairs()
            .iter()
            .map(|(w, n)| (w.to_string(), *n))
            .collect();
        m.insert("deferred_stack".to_string(), self.sym.deferred());
        m
    }

    /// Logs what the budgets dropped so far, in one line, at most once a minute.
    fn log_dropped(&mut self) {
        let d = self.dropped();
        // One line a minute at most: a flood changes the counts at every step.
        if d == self.logged_dropped
            || self
                .last_drop_log
                .is_some_and(|t| t.elapsed() < Duration::from_secs(60))
        {
            return;
        }
        let was = self.logged_dropped;
        self.logged_dropped = d;
        // Compactions are the budgets' routine, not a drop worth a line of its own.
        if (d.segments, d.histograms, d.modules, d.deferred_polls)
            == (
                was.segments,
                was.histograms,
                was.modules,
                was.deferred_polls,
            )
        {
            return;
        }
        self.last_drop_log = Some(std::time::Instant::now());
        eprintln!(
            "syncspy agent: over budget (docs/contracts.md, reader budgets), since start: {d}"
        );
    }

    /// The host as of the last step.
    pub fn snapshot(&mut self) -> Snapshot {
        let now = monotonic_ns();
        let mut processes = Vec::new();
        let followed: Vec<&Followed> = self
            .reader
            .processes()
            .iter()
            .chain(self.pods.iter().flat_map(|p| p.reader.processes()))
            .collect();
        let argvs: Vec<Vec<String>> = followed.iter().map(|f| f.agg.argv.clone()).collect();
        drop(followed);
        let labels: Vec<String> = argvs.iter().map(|a| self.label(a)).collect();
        let followed = self
            .reader
            .processes()
            .iter()
            .chain(self.pods.iter().flat_map(|p| p.reader.processes()));
        // Stacks not symbolized before get a bounded share of this step; the first process
        // to get it rotates, so every process gets its turn.
        self.sym.begin_pass(Some(SYMBOLIZE_PER_STEP));
        let followed: Vec<(&Followed, String)> = followed.zip(labels).collect();
        let start = self.next_report % followed.len().max(1);
        self.next_report = self.next_report.wrapping_add(1);
        let mut reports: Vec<Option<SnapshotProcess>> = vec![None; followed.len()];
        for i in (start..followed.len()).chain(0..start) {
            let (f, program) = &followed[i];
            reports[i] = Some(SnapshotProcess {
                program: program.clone(),
                report: process_report(f, &mut self.sym, now),
                latency: latency_of(&f.agg),
            });
        }
        processes.extend(reports.into_iter().flatten());
        let mut warnings = self.warnings.clone();
        warnings.extend(self.sym.notes().iter().cloned());
        Snapshot {
            syncspy_snapshot: SNAPSHOT_VERSION,
            host: self.host.clone(),
            time_unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
            segment_dir: self.reader.dir().display().to_string(),
            processes,
            forgotten: self.forgotten.clone(),
            reader_dropped: self.dropped_pairs(),
            segments_skipped: self.reader.segment_problems().len()
                + self
                    .pods
                    .iter()
                    .map(|p| p.reader.segment_problems().len())
                    .sum::<usize>(),
            warnings: warnings.into(),
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
    /// Where to write the token that `/api/v1/snapshot` asks for (mode 0600).
    pub token_file: PathBuf,
}

/// Connections served at once; further ones are closed at once. Each costs a task and
/// at most `MAX_REQUEST_HEAD` bytes of buffer; a response body is shared, not copied.
pub const MAX_CONNECTIONS: usize = 256;
/// Bytes of request head read from one connection (hyper's smallest buffer is 8 KiB).
pub const MAX_REQUEST_HEAD: usize = 16 * 1024;
/// A client has this long to send its request head.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection, request and response together, is closed after this long, read or not.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(30);

/// One snapshot and, rendered on first request, its two representations (shared by every
/// connection that asks before the next snapshot).
struct Served {
    snapshot: Arc<Snapshot>,
    metrics: OnceLock<Result<Bytes, String>>,
    json: OnceLock<Result<Bytes, String>>,
}

impl Served {
    fn new(snapshot: Snapshot) -> Arc<Served> {
        Arc::new(Served {
            snapshot: Arc::new(snapshot),
            metrics: OnceLock::new(),
            json: OnceLock::new(),
        })
    }
}

type Latest = Arc<Mutex<Arc<Served>>>;

/// Whether `headers` carry `Authorization: Bearer <token>` (compared in constant time).
fn authorized(headers: &hyper::HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (a, b) = (given.trim().as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Longest GPU tracing request `POST /api/v1/gpu-trace` takes, in seconds.
pub const MAX_TRACE_SECS: u64 = 300;

/// `POST /api/v1/gpu-trace?pid=N&seconds=S`: asks the library of followed process `pid` to
/// trace GPU activity for the next `S` seconds (default 10, at most `MAX_TRACE_SECS`),
/// whatever its `SYNCSPY_GPU_IDLE` mode. Returns the status and a one-line answer.
pub fn gpu_trace(snapshot: &Snapshot, query: &str) -> (u16, String) {
    let mut pid = None;
    let mut secs = Some(10u64);
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        match kv.split_once('=') {
            Some(("pid", v)) => pid = v.parse::<u32>().ok(),
            Some(("seconds", v)) => secs = v.parse().ok(),
            _ => return (400, format!("unknown parameter {kv:?}: pid=N&seconds=S\n")),
        }
    }
    let Some(pid) = pid else {
        return (
            400,
            "pid=N is required (a process the agent follows)\n".into(),
        );
    };
    let Some(secs) = secs.filter(|s| (1..=MAX_TRACE_SECS).contains(s)) else {
        return (400, format!("seconds must be 1 to {MAX_TRACE_SECS}\n"));
    };
    let Some(p) = snapshot
        .processes
        .iter()
        // The pid on this node first: processes of other PID namespaces (pods) share small
        // pids (1, often).
        .filter(|p| p.report.state.is_running())
        .find(|p| p.report.host_pid == Some(pid))
        .or_else(|| {
            snapshot
                .processes
                .iter()
                .filter(|p| p.report.state.is_running())
                .find(|p| p.report.pid == pid && p.report.host_pid.is_none())
        })
    else {
        return (
            404,
            format!("process {pid} is not a running process this agent follows\n"),
        );
    };
    let r = match syncspy_abi::SegmentReader::open(std::path::Path::new(&p.report.segment)) {
        Ok(r) => r,
        Err(e) => {
            return (
                410,
                format!("process {pid}: its segment cannot be opened: {e}\n"),
            )
        }
    };
    let until = monotonic_ns().saturating_add(secs * 1_000_000_000);
    match r.request_gpu_trace(until) {
        Ok(_) => (
            200,
            format!(
                "process {pid}: GPU activity traced for the next {secs} s (its tracing was {})\n",
                r.gpu_status().map(|g| g.state_name()).unwrap_or("unknown")
            ),
        ),
        Err(syncspy_abi::control::RequestError::TooOld) => (
            409,
            format!(
                "process {pid}: its syncspy library is older than ABI 1.4 and takes no tracing \
                 requests (restart it with this version's libsyncspy.so)\n"
            ),
        ),
        Err(syncspy_abi::control::RequestError::Replaced) => {
            (410, format!("process {pid}: its segment is gone\n"))
        }
        Err(syncspy_abi::control::RequestError::Io(e)) => (
            500,
            format!("process {pid}: cannot write the request into its segment: {e}\n"),
        ),
    }
}

fn respond(
    req: &Request<hyper::body::Incoming>,
    latest: &Latest,
    token: &str,
    token_file: &str,
) -> Response<Full<Bytes>> {
    let served = latest
        .lock()
        .map(|s| Arc::clone(&s))
        .unwrap_or_else(|p| Arc::clone(&p.into_inner()));
    let text = "text/plain; charset=utf-8";
    let plain = |status: u16, body: String| (status, Bytes::from(body), text);
    let rendered = |r: &Result<Bytes, String>, ctype| match r {
        Ok(b) => (200, b.clone(), ctype),
        Err(e) => plain(500, format!("{e}\n")),
    };
    let trace = req.uri().path() == "/api/v1/gpu-trace";
    let (status, body, ctype) = if trace && req.method() != hyper::Method::POST {
        plain(405, "POST /api/v1/gpu-trace?pid=N&seconds=S\n".into())
    } else if trace && !authorized(req.headers(), token) {
        plain(
            401,
            format!(
                "a tracing request needs `Authorization: Bearer TOKEN`, with the token the agent \
                 wrote to {token_file}\n"
            ),
        )
    } else if trace {
        let (status, body) = gpu_trace(&served.snapshot, req.uri().query().unwrap_or(""));
        plain(status, body)
    } else if req.method() != hyper::Method::GET {
        plain(405, "only GET\n".into())
    } else {
        match req.uri().path() {
            "/metrics" => rendered(
                served.metrics.get_or_init(|| {
                    metrics::render(&served.snapshot)
                        .map(Bytes::from)
                        .map_err(|e| e.to_string())
                }),
                metrics::CONTENT_TYPE,
            ),
            "/api/v1/snapshot" if !authorized(req.headers(), token) => plain(
                401,
                format!(
                    "the snapshot (command lines, call stacks) needs `Authorization: Bearer \
                     TOKEN`, with the token the agent wrote to {token_file} (readable by the \
                     agent's user and root)\n"
                ),
            ),
            "/api/v1/snapshot" => rendered(
                served.json.get_or_init(|| {
                    serde_json::to_vec(&*served.snapshot)
                        .map(Bytes::from)
                        .map_err(|e| e.to_string())
                }),
                "application/json",
            ),
            "/" => plain(
                200,
                "syncspy agent\n/metrics            Prometheus metrics\n/api/v1/snapshot    \
                 every followed process as JSON (Authorization: Bearer TOKEN)\nPOST \
                 /api/v1/gpu-trace?pid=N&seconds=S    trace a process's GPU activity for S \
                 seconds (Authorization: Bearer TOKEN)\n"
                    .into(),
            ),
            _ => plain(404, "not found\n".into()),
        }
    };
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(ctype),
    );
    if status == 401 {
        resp.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Bearer realm=\"syncspy\""),
        );
    }
    resp
}

/// Accepts connections until the process ends: each on a task of its own with a bounded
/// buffer, a header timeout and a deadline, one request per connection (pipelined ones
/// are not read), at most `MAX_CONNECTIONS` at once. No client can hold up another: a
/// client that never reads its response holds only its own task, until the deadline; and
/// when every slot is taken, a new connection takes the slot of the oldest one that has not
/// sent a request yet (connections opened and left idle, however many and however often
/// reopened, cannot keep a scrape out: it sends its request at once).
async fn accept_loop(
    listener: tokio::net::TcpListener,
    latest: Latest,
    token: Arc<str>,
    token_file: Arc<str>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Connections that have not sent a request yet, oldest first: (id, how to close it).
    type Idle = Mutex<VecDeque<(u64, Arc<tokio::sync::Notify>)>>;
    let idle: Arc<Idle> = Arc::default();
    let active = Arc::new(AtomicUsize::new(0));
    let mut next_id = 0u64;
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(_) => {
                // Out of file descriptors, say: let some connections end first.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if active.load(Ordering::Acquire) >= MAX_CONNECTIONS {
            let oldest = idle.lock().ok().and_then(|mut q| q.pop_front());
            match oldest {
                // It closes at once; its slot is this one's.
                Some((_, close)) => close.notify_one(),
                None => continue, // every slot is serving a request: dropped, closed at once
            }
        }
        active.fetch_add(1, Ordering::AcqRel);
        let id = next_id;
        next_id += 1;
        let close = Arc::new(tokio::sync::Notify::new());
        if let Ok(mut q) = idle.lock() {
            q.push_back((id, Arc::clone(&close)));
        }
        let (latest, token, token_file) = (
            Arc::clone(&latest),
            Arc::clone(&token),
            Arc::clone(&token_file),
        );
        let (idle, active) = (Arc::clone(&idle), Arc::clone(&active));
        tokio::spawn(async move {
            let forget = {
                let idle = Arc::clone(&idle);
                move || {
                    if let Ok(mut q) = idle.lock() {
                        q.retain(|(i, _)| *i != id);
                    }
                }
            };
            let requested = forget.clone();
            let svc = hyper::service::service_fn(move |req| {
                // A request came: this connection is no longer one to evict.
                requested();
                let resp = respond(&req, &latest, &token, &token_file);
                async move { Ok::<_, std::convert::Infallible>(resp) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(false)
                .max_buf_size(MAX_REQUEST_HEAD)
                .serve_connection(TokioIo::new(stream), svc);
            // A client that went away, ran out of time or was evicted idle is not the
            // agent's problem.
            let mut served = std::pin::pin!(tokio::time::timeout(CONNECTION_DEADLINE, conn));
            let mut evicted = std::pin::pin!(close.notified());
            std::future::poll_fn(|cx| {
                use std::future::Future;
                if served.as_mut().poll(cx).is_ready() || evicted.as_mut().poll(cx).is_ready() {
                    std::task::Poll::Ready(())
                } else {
                    std::task::Poll::Pending
                }
            })
            .await;
            forget();
            active.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// Writes a new random token to `path` (0600, replacing the file whole) and returns it.
pub fn write_token(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut raw = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut raw)?;
    let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    // tempfile creates 0600 with O_EXCL under a random name; the rename replaces whatever
    // was at the path (a link included) without writing through it.
    let mut tmp = tempfile::Builder::new()
        .prefix(".syncspy-agent-token.")
        .tempfile_in(dir)?;
    writeln!(tmp, "{token}")?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(token)
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
    /// The token file could not be written.
    Token {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Listen { addr, source } => write!(f, "cannot listen on {addr}: {source}"),
            ServeError::Thread(e) => write!(f, "cannot start the HTTP thread: {e}"),
            ServeError::Token { path, source } => write!(
                f,
                "cannot write the token file {}: {source} (give another with --token-file)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::Listen { source, .. } => Some(source.as_ref()),
            ServeError::Thread(e) => Some(e),
            ServeError::Token { source, .. } => Some(source),
        }
    }
}

/// Set by SIGINT or SIGTERM: the daemon cleans up and returns.
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, std::sync::atomic::Ordering::SeqCst);
}

const STOP_SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// Blocks (`block`) or unblocks SIGINT and SIGTERM in the calling thread: threads started
/// while they are blocked keep them blocked, so they reach the main thread, whose wait they
/// cut short.
fn mask_stop_signals(block: bool) {
    // SAFETY: the set is initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in STOP_SIGNALS {
            libc::sigaddset(&mut set, sig);
        }
        let how = if block {
            libc::SIG_BLOCK
        } else {
            libc::SIG_UNBLOCK
        };
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

fn install_stop_handlers() {
    for sig in STOP_SIGNALS {
        // SAFETY: `sa` is zeroed then its mask emptied; the handler only stores to an atomic.
        // No SA_RESTART: the main thread's wait returns at once.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Removes the token file if it still holds `token` (another agent may have replaced it).
fn remove_token(path: &std::path::Path, token: &str) {
    if std::fs::read_to_string(path).is_ok_and(|t| t.trim() == token) {
        if let Err(e) = std::fs::remove_file(path) {
            eprintln!(
                "syncspy: warning: cannot remove the token file {}: {e}",
                path.display()
            );
        }
    }
}

/// Runs the daemon until SIGINT or SIGTERM, then removes its token file (and its registration
/// as a reader of the folder) and returns. Fails only at start, when the address cannot be
/// bound or the token file written (an unusable segment folder is reported in the snapshot
/// and retried).
pub fn serve(opts: &DaemonOptions) -> Result<(), ServeError> {
    STOP.store(false, std::sync::atomic::Ordering::SeqCst);
    install_stop_handlers();
    mask_stop_signals(true);
    let started = serve_until_stopped(opts);
    mask_stop_signals(false);
    started
}

fn serve_until_stopped(opts: &DaemonOptions) -> Result<(), ServeError> {
    // One open file per followed segment (its lock tells whether its process runs).
    syncspy_read::follow::raise_open_file_limit();
    let listen_err = |source: Box<dyn std::error::Error + Send + Sync>| ServeError::Listen {
        addr: opts.listen.clone(),
        source,
    };
    let listener =
        std::net::TcpListener::bind(&opts.listen).map_err(|e| listen_err(Box::new(e)))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| listen_err(Box::new(e)))?;
    let local = listener.local_addr().map_err(|e| listen_err(Box::new(e)))?;
    let addr = local.to_string();
    if !local.ip().is_loopback() {
        eprintln!(
            "syncspy: warning: serving on {addr}, which is not loopback: anyone who can \
             reach it reads the metrics (the snapshot still needs the token)"
        );
    }
    let token = write_token(&opts.token_file).map_err(|source| ServeError::Token {
        path: opts.token_file.clone(),
        source,
    })?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("syncspy-http")
        .enable_io()
        .enable_time()
        .build()
        .map_err(ServeError::Thread)?;
    let listener = {
        let _in_rt = rt.enter();
        tokio::net::TcpListener::from_std(listener).map_err(|e| listen_err(Box::new(e)))?
    };
    let mut collector = Collector::new(opts.dir.clone(), opts.retain, opts.keep_segments);
    collector.step();
    let latest: Latest = Arc::new(Mutex::new(Served::new(collector.snapshot())));
    eprintln!(
        "syncspy agent: following segments in {}; serving http://{addr}/metrics and \
         http://{addr}/api/v1/snapshot (with the token in {})",
        opts.dir.display(),
        opts.token_file.display()
    );
    // The collector stays on this thread (the symbolizer is not Send); requests are
    // answered on the runtime's threads from the latest snapshot.
    let for_http = Arc::clone(&latest);
    let token_file: Arc<str> = opts.token_file.display().to_string().into();
    let http_token: Arc<str> = token.clone().into();
    std::thread::Builder::new()
        .name("syncspy-accept".into())
        .spawn(move || rt.block_on(accept_loop(listener, for_http, http_token, token_file)))
        .map_err(ServeError::Thread)?;
    // Every thread is started (the runtime's too, with the signals blocked): from now on
    // SIGINT and SIGTERM reach this one.
    mask_stop_signals(false);
    let stopping = || STOP.load(std::sync::atomic::Ordering::SeqCst);
    // A folder where segments keep appearing wakes `wait` at once each time: steps are
    // still at least this far apart, so a flood of new files cannot keep the collector busy.
    let min_gap = opts.interval.min(MIN_STEP_GAP);
    let mut last_step = std::time::Instant::now();
    while !stopping() {
        collector.wait(opts.interval);
        if let Some(rest) = min_gap.checked_sub(last_step.elapsed()) {
            std::thread::sleep(rest);
        }
        if stopping() {
            break;
        }
        last_step = std::time::Instant::now();
        collector.step();
        let served = Served::new(collector.snapshot());
        if let Ok(mut s) = latest.lock() {
            *s = served;
        }
    }
    remove_token(&opts.token_file, &token);
    drop(collector);
    eprintln!("syncspy agent: stopped");
    Ok(())
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
        // Both processes have ended: the kernel dropped their liveness locks.
        manual.release_lock();
        owned.release_lock();
        // The `syncspy run` of session 77, alive (pid 1 stands in for it).
        let init = syncspy_abi::process_start_ticks(1).unwrap();
        std::fs::write(
            dir.path().join(format!(".syncspy-reader-1-{init}")),
            "session 77\n",
        )
        .unwrap();

        let mut c = Collector::new(dir.path().to_path_buf(), Duration::from_secs(3600), false);
        c.step();
        let s = c.snapshot();
        assert_eq!(s.processes.len(), 2);
        assert!(s.processes.iter().all(|p| p.program == "train"));
        assert_eq!(s.processes[0].report.kinds["stream_sync"].count, 1);
        assert!(s.forgotten.is_empty());

        let names = |d: &std::path::Path| -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        // With no retention, the unowned one is forgotten and its file removed; the one of a
        // live `syncspy run` stays followed and leased until that run ends.
        c.retain = Duration::ZERO;
        c.step();
        let s = c.snapshot();
        assert_eq!(s.processes.len(), 1);
        assert_eq!(s.processes[0].report.pid, 42);
        assert_eq!(s.forgotten["train"].processes, 1);
        assert!(!manual.path().exists(), "session 0: nobody else removes it");
        assert!(
            owned.path().exists(),
            "a live syncspy run's file is left to the run"
        );
        let me = syncspy_abi::lifecycle::Owner::me();
        let lease = format!(".syncspy-42-142.lease-{}-{}", me.pid, me.start_ticks);
        assert!(
            names(dir.path()).contains(&lease),
            "{:?}",
            names(dir.path())
        );
        // Not picked up again while the file exists.
        c.step();
        assert_eq!(c.snapshot().processes.len(), 1);
        assert_eq!(c.snapshot().forgotten["train"].processes, 1);
        // The run ends (its registration gone; a void one of a dead process is cleared
        // away): the segment is forgotten and, wanted by nobody, removed.
        std::fs::write(dir.path().join(".syncspy-reader-11-1"), "session 77\n").unwrap();
        std::fs::remove_file(dir.path().join(format!(".syncspy-reader-1-{init}"))).unwrap();
        c.step();
        let s = c.snapshot();
        assert!(s.processes.is_empty());
        let f = &s.forgotten["train"];
        assert_eq!(f.processes, 2);
        assert_eq!(f.kinds["stream_sync"].count, 2);
        assert_eq!(f.kinds["stream_sync"].total_ns, 2_000);
        assert!(!owned.path().exists());
        assert_eq!(
            names(dir.path()),
            vec![format!(".syncspy-reader-{}-{}", me.pid, me.start_ticks)]
        );
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
    fn a_segment_removed_under_the_agent_is_let_go_at_the_next_step() {
        let dir = TempDir::new("daemon-unlinked");
        // This test's own process: running, so neither retain nor reclaim would drop it.
        let me = std::process::id();
        let mut p = SegmentParams::new(me, syncspy_abi::process_start_ticks(me).unwrap());
        p.ring_capacity = 64;
        p.site_capacity = 16;
        p.module_capacity = 8;
        p.cmdline = b"/opt/live\0".to_vec();
        let w = SegmentWriter::create(dir.path(), &p).unwrap();
        w.record(&rec(Kind::DeviceSync, Api::CudaDeviceSynchronize, 10, 0, 0));
        let mut c = Collector::new(dir.path().to_path_buf(), Duration::from_secs(3600), false);
        c.step();
        assert_eq!(c.snapshot().processes.len(), 1);
        c.step();
        assert_eq!(
            c.snapshot().processes.len(),
            1,
            "kept while its file is there"
        );
        std::fs::remove_file(w.path()).unwrap();
        c.step();
        let s = c.snapshot();
        assert!(
            s.processes.is_empty(),
            "the mapping of a removed file is dropped"
        );
        assert_eq!(s.forgotten["live"].processes, 1);
        assert_eq!(s.forgotten["live"].kinds["device_sync"].count, 1);
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

#[cfg(test)]
mod gpu_trace_tests {
    use super::*;
    use syncspy_abi::{SegmentParams, SegmentWriter};
    use syncspy_read::report::ProcessReport;
    use syncspy_test_support::TempDir;

    #[test]
    fn a_tracing_request_reaches_the_followed_process_and_bad_ones_are_refused() {
        let dir = TempDir::new("gpu-trace");
        let mut p = SegmentParams::new(std::process::id(), 1);
        p.ring_capacity = 16;
        let w = SegmentWriter::create(dir.path(), &p).unwrap();
        let snap = Snapshot {
            processes: vec![SnapshotProcess {
                program: "train.py".into(),
                report: ProcessReport {
                    pid: 4242,
                    state: "running".into(),
                    segment: w.path().to_string_lossy().into_owned(),
                    ..ProcessReport::default()
                },
                latency: BTreeMap::new(),
            }],
            ..Snapshot::default()
        };
        let before = monotonic_ns();
        let (status, body) = gpu_trace(&snap, "pid=4242&seconds=30");
        assert_eq!(status, 200, "{body}");
        let until = w
            .control()
            .trace_until_ns
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(until >= before + 30_000_000_000, "{until} {before}");
        assert!(until <= monotonic_ns() + 30_000_000_000);
        // The default is 10 s, which does not lower a later request.
        assert_eq!(gpu_trace(&snap, "pid=4242").0, 200);
        assert_eq!(
            w.control()
                .trace_until_ns
                .load(std::sync::atomic::Ordering::Relaxed),
            until
        );
        for (query, status) in [
            ("", 400),
            ("pid=x", 400),
            ("pid=4242&seconds=0", 400),
            ("pid=4242&seconds=301", 400),
            ("pid=4242&colour=red", 400),
            ("pid=7", 404),
        ] {
            let (got, body) = gpu_trace(&snap, query);
            assert_eq!(got, status, "{query}: {body}");
            assert!(body.ends_with('\n') && body.len() > 10, "{body:?}");
        }
        // A process of another PID namespace (pid 1 in its pod) is named by its pid here.
        let mut pod = snap.processes[0].clone();
        pod.report.pid = 1;
        pod.report.host_pid = Some(4243);
        let snap2 = Snapshot {
            processes: vec![pod],
            ..Snapshot::default()
        };
        assert_eq!(gpu_trace(&snap2, "pid=4243").0, 200);
        assert_eq!(gpu_trace(&snap2, "pid=1").0, 404);
        // Gone: the file removed.
        std::fs::remove_file(w.path()).unwrap();
        assert_eq!(gpu_trace(&snap, "pid=4242").0, 410);
    }
}
