//! The collector: follows every segment of the agent's folder (one reader session, registered
//! for the whole folder, leasing each segment, watched with inotify) and the pods' own folders
//! (read-only), forgets ended processes into per-program totals, reclaims the folder, and makes
//! the [`Snapshot`] the HTTP side serves.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use syncspy_abi::lifecycle::{self, Policy, Scope};
use syncspy_abi::Kind;

use crate::pods;
use syncspy_read::follow::Followed;
use syncspy_read::limits::{Dropped, Limits, Pool};
use syncspy_read::monotonic_ns;
use syncspy_read::report::process_report;
use syncspy_read::session::{ReaderSession, SessionOptions, SessionProblem};
use syncspy_read::snapshot::{
    latency_of, ForgottenProgram, Snapshot, SnapshotProcess, SNAPSHOT_VERSION,
};
use syncspy_read::symbolize::{PassBudget, Symbolizer};

/// What one snapshot may spend on stacks not symbolized before: the rest wait for the next
/// steps (`Symbolizer::begin_pass`), so symbolizing never holds up the collection.
const SYMBOLIZE_PER_STEP: PassBudget = PassBudget {
    frames: 16_384,
    frames_per_segment: 2_048,
};

/// The longest time between two reclaims of the folder, and between two surveys of its
/// readers (each lists the whole folder; the reclaim lstats every segment file in it).
const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(2);

/// Warnings kept in the snapshot (the latest ones).
const MAX_WARNINGS: usize = 20;

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
    /// Program labels, with a quota per user (`crate::labels`).
    labels: crate::labels::ProgramLabels,
    forgotten: BTreeMap<String, ForgottenProgram>,
    warnings: Vec<String>,
    host: String,
    policy: Policy,
    limits: Limits,
    /// The budgets of every folder together: a user's segments (and the node's total) count
    /// once over the agent's folder and all the pods' folders.
    pool: Pool,
    /// Where the next snapshot starts symbolizing (rotated, so every process gets a turn
    /// of the per-step budget).
    next_report: usize,
    /// What the budgets dropped, as last logged.
    logged_dropped: Dropped,
    /// What the budgets of pods' folders closed since dropped.
    closed_dropped: Dropped,
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
        Collector::with_limits(dir, retain, keep_segments, Limits::from_env())
    }

    /// Like `new`, with these budgets instead of the environment's.
    pub fn with_limits(
        dir: PathBuf,
        retain: Duration,
        keep_segments: bool,
        limits: Limits,
    ) -> Collector {
        let pool = Pool::new(limits);
        let mut c = Collector {
            reader: ReaderSession::new(
                SessionOptions::new(dir)
                    .claiming()
                    .watch(true)
                    .shared_budget(&pool),
            ),
            pods: Vec::new(),
            discovery: pods::Discovery::new(),
            pod_watch: None,
            pods_over_cap: 0,
            sym: Symbolizer::new(),
            retain,
            keep_segments,
            labels: crate::labels::ProgramLabels::new(syncspy_read::safe_file::euid()),
            forgotten: BTreeMap::new(),
            warnings: Vec::new(),
            host: hostname(),
            policy: Policy::from_env(),
            limits,
            pool,
            next_report: 0,
            logged_dropped: Dropped::default(),
            closed_dropped: Dropped::default(),
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
        self.close_gone_pods();
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
            reader: ReaderSession::new(SessionOptions::new(path).shared_budget(&self.pool)),
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

    /// One round: find new segments, drain all, forget (and maybe remove) those that ended
    /// more than `retain` ago.
    pub fn step(&mut self) {
        let problems = self.reader.step(|_, _, _| {});
        self.warn_new(problems);
        self.discover();
        self.drain_pods();
        self.survey_runs();
        let retired = self.forget_stale();
        if retired > 0 {
            self.release_unused_labels();
        }
        self.trim(retired);
        self.close_gone_pods();
        self.reclaim_if_due();
        self.log_dropped();
    }

    /// Drains each pod's segments and warns of their problems (once each).
    fn drain_pods(&mut self) {
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
    }

    /// The live `syncspy run`s: their ended segments are kept (and leased) until the run
    /// ends, so that the run hands them over rather than removes them. Surveyed again when
    /// a reader's file appeared (a run registers before its program starts) or
    /// `HOUSEKEEPING_EVERY` passed.
    fn survey_runs(&mut self) {
        let appeared = self.reader.follower_mut().take_reader_appeared();
        if !appeared
            && self
                .last_survey
                .is_some_and(|t| t.elapsed() < HOUSEKEEPING_EVERY)
        {
            return;
        }
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

    /// Forgets and retires the segments that are done with, in the agent's folder and the
    /// pods'; returns how many.
    fn forget_stale(&mut self) -> usize {
        let now = monotonic_ns();
        let retain = u64::try_from(self.retain.as_nanos()).unwrap_or(u64::MAX);
        let runs = &self.runs;
        // A segment removed under us is drained (just now) and let go: nobody else can find
        // it, and its mapping alone keeps its memory in use.
        // A user at their cap of segments (over every folder): their compacted ended
        // processes are retired at once (totals kept), to make room for their new ones.
        let mut per_user: std::collections::HashMap<u32, usize> = Default::default();
        for f in self.followed() {
            *per_user.entry(f.uid()).or_default() += 1;
        }
        let cap = self.limits.segments_per_user;
        let at_cap = |f: &Followed| per_user.get(&f.uid()).is_some_and(|n| *n >= cap);
        let ended_long_ago = |f: &Followed| {
            let end = match f.agg().live().ended_ns {
                0 => f.agg().gone_ns().unwrap_or(now),
                e => e,
            };
            now.saturating_sub(end) >= retain
        };
        let stale = |f: &Followed| {
            f.unlinked()
                || f.ended() && f.agg().compacted() && at_cap(f)
                || f.ended()
                    && !(f.agg().session() != 0 && runs.contains(&f.agg().session()))
                    && ended_long_ago(f)
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
                || f.ended() && f.agg().compacted() && at_cap(f)
                || f.ended() && ended_long_ago(f)
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
        retired
    }

    /// Labels that no live process uses any more go back to their user's quota.
    fn release_unused_labels(&mut self) {
        let live: Vec<(u32, Vec<String>)> = self
            .followed()
            .map(|f| (f.uid(), f.agg().argv().to_vec()))
            .collect();
        let live: Vec<(u32, &[String])> = live.iter().map(|(u, a)| (*u, a.as_slice())).collect();
        self.labels.release_unused(&live, &mut self.forgotten);
    }

    /// Every `HOUSEKEEPING_EVERY` (unless segments are kept), removes ended segments in the
    /// agent's folder that no one follows, by the reclaim policy.
    fn reclaim_if_due(&mut self) {
        let reclaim_due = self
            .last_reclaim
            .is_none_or(|t| t.elapsed() >= HOUSEKEEPING_EVERY);
        if self.keep_segments || !reclaim_due {
            return;
        }
        self.last_reclaim = Some(std::time::Instant::now());
        // Never a segment it follows.
        let followed = self.reader.paths();
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

    /// Moves a forgotten segment's totals into its program's counters and lets go of its
    /// file: released (and removed when nobody wants it) in the agent's folder, left as it
    /// is in a pod's (`pod`), where the agent writes nothing.
    fn retire(&mut self, f: &mut Followed, pod: bool, survey: &mut Option<lifecycle::Readers>) {
        let k = f.key();
        self.sym
            .forget_owner((k.process.pid, k.process.start_ticks, k.created_ns));
        let label = self.labels.label(f.uid(), f.agg().argv());
        let a = f.agg();
        let entry = self.forgotten.entry(label).or_default();
        entry.processes = entry.processes.saturating_add(1);
        for k in Kind::ALL {
            let t = a.live().kind(*k);
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
        entry.dropped_events = entry.dropped_events.saturating_add(a.live().events_dropped);
        entry.lost_records = entry
            .lost_records
            .saturating_add(a.lost().saturating_sub(a.live().events_dropped));
        entry.overhead_ns = entry.overhead_ns.saturating_add(a.live().overhead_ns);
        entry.host_wait_overhead_ns = entry
            .host_wait_overhead_ns
            .saturating_add(a.live().host_wait_own_ns.unwrap_or(0));
        if let Some(b) = syncspy_read::report::BehindStalls::of(a.live()) {
            entry.idle_after_syncs = entry.idle_after_syncs.saturating_add(b.measured);
            entry.idle_after_ns = entry.idle_after_ns.saturating_add(b.total_ns);
        }
        if let Some(c) = a
            .live()
            .cost
            .filter(syncspy_abi::cost::CostStatus::anything_shed)
        {
            let amounts =
                syncspy_read::snapshot::shed_amounts(&syncspy_read::report::CostReport::of(&c));
            for (w, n) in amounts {
                let e = entry.shed.entry(w).or_default();
                *e = e.saturating_add(n);
            }
        }
        if self.keep_segments || pod {
            drop(f.take_lease());
        } else if let Err(e) = f.release_with(false, survey) {
            self.warn(format!(
                "cannot remove {}: {e}",
                f.reader().path().display()
            ));
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

    /// Every segment followed, in the agent's folder and the pods' folders.
    fn followed(&self) -> impl Iterator<Item = &Followed> {
        self.reader
            .processes()
            .iter()
            .chain(self.pods.iter().flat_map(|p| p.reader.processes()))
    }

    /// Closes the folders of gone mount namespaces whose segments are all forgotten, keeping
    /// what their budgets dropped (served as counters, which never go down).
    fn close_gone_pods(&mut self) {
        let (closed, kept) = std::mem::take(&mut self.pods)
            .into_iter()
            .partition(|p| p.gone && p.reader.processes().is_empty());
        self.pods = kept;
        for p in closed {
            self.closed_dropped.add(&p.reader.follower().dropped());
        }
    }

    /// What the budgets dropped, over the folder and the pods' folders (closed ones too).
    pub fn dropped(&self) -> Dropped {
        let mut d = self.reader.follower().dropped();
        d.add(&self.closed_dropped);
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
        let argvs: Vec<(u32, Vec<String>)> = self
            .followed()
            .map(|f| (f.uid(), f.agg().argv().to_vec()))
            .collect();
        let labels: Vec<String> = argvs
            .iter()
            .map(|(uid, a)| self.labels.label(*uid, a))
            .collect();
        let followed = self
            .reader
            .processes()
            .iter()
            .chain(self.pods.iter().flat_map(|p| p.reader.processes()));
        // (Not `self.followed()`: the symbolizer is borrowed mutably below.)
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
                latency: latency_of(f.agg()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics;
    use syncspy_abi::{Api, SegmentParams, SegmentWriter};
    use syncspy_test_support::{rec, TempDir};

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

    /// One user (this test's) spreads 3 live segments into each of the agent's folder and 6
    /// pods' folders, each with histograms of 2 kinds, 2 APIs and 8 call sites when `heavy`
    /// (about 1.4 MiB estimated); returns the segments the agent follows, their estimated
    /// heap bytes, and the pool's figure of the user's segments.
    fn spread_over_folders(limits: Limits, heavy: bool) -> (usize, u64, usize) {
        use std::os::unix::fs::MetadataExt;
        let me = std::process::id();
        let start = syncspy_abi::process_start_ticks(me).unwrap();
        let folders: Vec<TempDir> = (0..7)
            .map(|i| TempDir::new(&format!("daemon-spread-{i}")))
            .collect();
        let mut writers = Vec::new();
        for (i, d) in folders.iter().enumerate() {
            for j in 0..3u64 {
                // This running process, under start times of its own: live segments.
                let mut p = SegmentParams::new(me, start + 1 + i as u64 * 3 + j);
                p.ring_capacity = 256;
                p.site_capacity = 16;
                p.module_capacity = 8;
                p.cmdline = b"/opt/spread\0".to_vec();
                let w = SegmentWriter::create(d.path(), &p).unwrap();
                let records = if heavy { 8 } else { 1 };
                for site in 0..records {
                    w.record(&rec(
                        Kind::StreamSync,
                        Api::CudaStreamSynchronize,
                        10,
                        0,
                        site,
                    ));
                    w.record(&rec(
                        Kind::DeviceSync,
                        Api::CudaDeviceSynchronize,
                        10,
                        0,
                        site,
                    ));
                }
                writers.push(w);
            }
        }
        // Discovery keeps a pod's folder while a process of its mount namespace lives
        // (pods.rs counts others, not the agent): this test's namespace stands in for it.
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mnt_ns = std::fs::metadata("/proc/self/ns/mnt").unwrap().ino();
        let mut c = Collector::with_limits(
            folders[0].path().to_path_buf(),
            Duration::from_secs(3600),
            true,
            limits,
        );
        for d in &folders[1..] {
            let dir = std::os::fd::OwnedFd::from(std::fs::File::open(d.path()).unwrap());
            let m = std::fs::metadata(d.path()).unwrap();
            c.follow_pod(pods::Found {
                id: (m.dev(), m.ino()),
                dir,
                mnt_ns,
                pid: me,
                segment_dir: d.path().to_path_buf(),
            });
        }
        // Steps enough for every refused segment to be retried and every record read.
        for _ in 0..6 {
            c.step();
        }
        let _ = other.kill();
        let _ = other.wait();
        assert_eq!(c.pods.len(), 6, "the pods' folders stay followed");
        let followed = c.followed().count();
        let bytes = c.followed().map(|f| f.agg().heap_bytes()).sum();
        let me_uid = syncspy_read::safe_file::euid();
        let pooled = c.pool.segments(me_uid).1;
        drop(writers);
        (followed, bytes, pooled)
    }

    #[test]
    fn one_user_spreading_segments_over_many_folders_stays_within_the_per_user_budget() {
        // Unbounded but for the defaults: all 21 followed, about 1.4 MiB each.
        let (all, all_bytes, _) = spread_over_folders(Limits::default(), true);
        assert_eq!(all, 21);
        assert!(all_bytes > 21 << 20, "{all_bytes}");
        // 5 segments per user: 5 over the 7 folders (each folder alone holds only 3).
        let segments = Limits {
            segments_per_user: 5,
            ..Limits::default()
        };
        assert_eq!(spread_over_folders(segments, false).0, 5);
        // 4 MiB per user: the histograms beyond are refused, in whichever folder, so the
        // user's estimate stays near the cap (the part of each segment not charged, 1 KiB
        // and its maps, comes on top). Segments found in one scan are all admitted before
        // their records are read: the bytes bound the histograms, not the segments.
        let bytes = Limits {
            bytes_per_user: 4 << 20,
            ..Limits::default()
        };
        let (n, used, pooled) = spread_over_folders(bytes, true);
        assert_eq!(n, pooled, "the pool counts every folder's segments");
        assert!(
            used <= (4 << 20) + n as u64 * 16_384,
            "{used} bytes for {n}"
        );
    }

    #[test]
    fn the_node_total_holds_over_the_agents_folder_and_the_pods_folders() {
        // One user alone may reach the whole total, and no more, over every folder.
        let segments = Limits {
            segments_total: 6,
            reserve_per_user: 1,
            ..Limits::default()
        };
        assert_eq!(spread_over_folders(segments, false).0, 6);
        let bytes = Limits {
            bytes_total: 4 << 20,
            ..Limits::default()
        };
        let (n, used, _) = spread_over_folders(bytes, true);
        assert!(
            used <= (4 << 20) + n as u64 * 16_384,
            "{used} bytes for {n}"
        );
    }

    #[test]
    fn what_a_closed_pod_folders_budget_dropped_stays_counted() {
        use std::os::unix::fs::MetadataExt;
        let (host, pod) = (TempDir::new("daemon-host"), TempDir::new("daemon-pod"));
        let me = std::process::id();
        let start = syncspy_abi::process_start_ticks(me).unwrap();
        let ws: Vec<SegmentWriter> = [host.path(), pod.path()]
            .iter()
            .zip(1u64..)
            .map(|(d, i)| {
                let mut p = SegmentParams::new(me, start + i);
                p.ring_capacity = 64;
                p.site_capacity = 16;
                p.module_capacity = 8;
                p.cmdline = b"/opt/one\0".to_vec();
                SegmentWriter::create(d, &p).unwrap()
            })
            .collect();
        let limits = Limits {
            segments_per_user: 1,
            ..Limits::default()
        };
        let mut c = Collector::with_limits(host.path().to_path_buf(), Duration::ZERO, true, limits);
        c.step();
        let m = std::fs::metadata(pod.path()).unwrap();
        c.follow_pod(pods::Found {
            id: (m.dev(), m.ino()),
            dir: std::os::fd::OwnedFd::from(std::fs::File::open(pod.path()).unwrap()),
            mnt_ns: 0,
            pid: me,
            segment_dir: pod.path().to_path_buf(),
        });
        c.step();
        assert_eq!(
            c.dropped().segments,
            1,
            "the pod's segment, over the user's cap"
        );
        // No process of its mount namespace is left (as the next discovery pass finds): the
        // folder is closed.
        c.pods[0].gone = true;
        c.step();
        assert!(c.pods.is_empty());
        assert_eq!(c.dropped().segments, 1, "a counter does not go down");
        drop(ws);
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
}
