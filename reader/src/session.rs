//! One reader session: the protocol every front end (`syncspy run`, `check`, `attach`, the
//! agent, the monitor) follows to read a segment folder, written once.
//!
//! - On creation: watch the folder with inotify (optional), and register as a reader of it
//!   (optional: `syncspy_abi::lifecycle::register`, for one session or for every segment), so
//!   that no other reader or reclaimer removes an ended segment this one has not drained.
//! - [`ReaderSession::step`]: register again if that failed before, scan for new segments
//!   (taking a lease on each when asked), drain every ring into the sink; returns the problems
//!   found since the last call: a folder that cannot be listed (once, until it can again), a
//!   segment that cannot be followed, a registration that failed.
//! - [`ReaderSession::wait`]: until something appears in the folder (watched) or a timeout.
//! - [`ReaderSession::finish`]: the last scan, the final drain (ended processes' claimed but
//!   unfinished slots count as lost at once), then the segments this session may remove are
//!   removed (see [`Removal`]), then what nobody reads any more is reclaimed (optional), and
//!   only then the registration is dropped: until the end, nobody removes what this session
//!   still reads.
//!
//! [`Follower`] is the engine underneath; [`ReaderSession::follower`] gives it to callers that
//! keep state per segment or forget segments themselves (the agent, the monitor).

use std::path::{Path, PathBuf};

use syncspy_abi::lifecycle::{self, OwnedFile, Policy, Scope};
use syncspy_abi::{Ident, Record};

use crate::follow::{Followed, Follower, SegmentKey, SegmentProblem};

/// What a session does with the files of the segments it followed, at [`ReaderSession::finish`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// Leaves every file as it is (a reader that writes nothing: the monitor, a pod's folder).
    Leave,
    /// Removes the files of ended processes that no other reader wants, and hands the others
    /// over (`Followed::release`): `syncspy run`.
    Ended,
    /// Removes every followed file once drained, ended or not: `syncspy attach`, whose
    /// process lives on detached and writes its segment no more.
    All,
    /// Marks every followed file kept (`syncspy_abi::lifecycle::keep`), so that no reader or
    /// reclaimer removes it: `syncspy run --keep-segments`.
    Keep,
}

/// How a [`ReaderSession`] reads its folder. Settings the caller fills in (through
/// [`SessionOptions::new`] and its builder methods, or the fields): they stay public.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// The segment folder.
    pub dir: PathBuf,
    /// Follow only the segments of this session (`None`: every segment).
    pub session: Option<u64>,
    /// Follow only the segments of this process.
    pub pid: Option<u32>,
    /// Count another user's segment only when its process descends from this one
    /// (`Follower::with_tree`).
    pub tree: Option<u32>,
    /// Follow only segments of this reader's user (`Follower::with_own_only`).
    pub own_only: bool,
    /// Take a lease on every segment followed.
    pub leases: bool,
    /// Register as a reader of the folder: of `session` when set, else of every segment.
    pub register: bool,
    /// Watch the folder with inotify, so that `wait` returns when a segment appears.
    pub watch: bool,
    /// What `finish` does with the files of the segments followed.
    pub removal: Removal,
    /// At `finish`, after the removal, reclaim the folder's segments nobody reads any more
    /// (`syncspy_abi::lifecycle::reclaim`) under this policy.
    pub reclaim: Option<Policy>,
    /// Bound what the session spends on segments (`Follower::with_budget`): long-lived
    /// readers of every user's segments (the agent, the monitor).
    /// Readers of one pool count their segments together (`Follower::with_pool`).
    pub budget: Option<crate::limits::Pool>,
}

impl SessionOptions {
    /// Reads every segment of `dir`, writing nothing there: no lease, no registration, no
    /// removal.
    pub fn new(dir: impl Into<PathBuf>) -> SessionOptions {
        SessionOptions {
            dir: dir.into(),
            session: None,
            pid: None,
            tree: None,
            own_only: false,
            leases: false,
            register: false,
            watch: false,
            removal: Removal::Leave,
            reclaim: None,
            budget: None,
        }
    }

    pub fn session(mut self, session: Option<u64>) -> SessionOptions {
        self.session = session;
        self
    }

    pub fn pid(mut self, pid: Option<u32>) -> SessionOptions {
        self.pid = pid;
        self
    }

    pub fn tree(mut self, root: u32) -> SessionOptions {
        self.tree = Some(root);
        self
    }

    pub fn own_only(mut self, on: bool) -> SessionOptions {
        self.own_only = on;
        self
    }

    /// Leases on every segment and a registration for the folder: what a reader that
    /// removes segments needs, so that others leave them to it.
    pub fn claiming(mut self) -> SessionOptions {
        self.leases = true;
        self.register = true;
        self
    }

    pub fn watch(mut self, on: bool) -> SessionOptions {
        self.watch = on;
        self
    }

    pub fn removal(mut self, removal: Removal) -> SessionOptions {
        self.removal = removal;
        self
    }

    pub fn reclaim(mut self, policy: Option<Policy>) -> SessionOptions {
        self.reclaim = policy;
        self
    }

    pub fn budget(mut self, limits: crate::limits::Limits) -> SessionOptions {
        self.budget = Some(crate::limits::Pool::new(limits));
        self
    }

    /// Like `budget`, shared with the other sessions of `pool` (the agent's folders).
    pub fn shared_budget(mut self, pool: &crate::limits::Pool) -> SessionOptions {
        self.budget = Some(pool.clone());
        self
    }

    /// The registration this session makes, if any.
    fn scope(&self) -> Option<Scope> {
        let scope = match self.session {
            Some(s) => Scope::Session(s),
            None => Scope::All,
        };
        self.register.then_some(scope)
    }
}

/// Something a session met that its user should hear of, once.
#[derive(Clone, Debug)]
pub enum SessionProblem {
    /// The folder could not be listed: nothing new is found until it can again.
    Scan { dir: PathBuf, error: String },
    /// The registration as a reader could not be made: another reader or a reclaimer may
    /// remove an ended segment before this one has read it.
    Register {
        dir: PathBuf,
        scope: Scope,
        error: String,
    },
    /// The folder cannot be watched: new segments are found at each scan only.
    Watch { dir: PathBuf, error: String },
    /// A file that looked like a segment could not be followed, or was truncated while
    /// followed.
    Segment(SegmentProblem),
    /// A followed segment's file could not be removed at the end.
    Remove { path: PathBuf, error: String },
    /// A followed segment could not be marked kept.
    Keep { path: PathBuf, error: String },
    /// The folder could not be reclaimed at the end.
    Reclaim { dir: PathBuf, error: String },
}

impl std::fmt::Display for SessionProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionProblem::Scan { dir, error } => {
                write!(f, "cannot read {}: {error}", dir.display())
            }
            SessionProblem::Register { dir, scope, error } => write!(
                f,
                "cannot register as a reader of {} ({error}): {}",
                dir.display(),
                match scope {
                    Scope::Session(_) => {
                        "an agent may remove this run's segments before they are read"
                    }
                    Scope::All => "`syncspy run` jobs that end before the next scan may be missed",
                }
            ),
            SessionProblem::Watch { dir, error } => write!(
                f,
                "cannot watch {} with inotify ({error}): new segments are found at each interval",
                dir.display()
            ),
            SessionProblem::Segment(p) => write!(f, "{p}"),
            SessionProblem::Remove { path, error } => {
                write!(f, "cannot remove {}: {error}", path.display())
            }
            SessionProblem::Keep { path, error } => {
                write!(f, "cannot mark {} as kept: {error}", path.display())
            }
            SessionProblem::Reclaim { dir, error } => {
                write!(f, "cannot reclaim in {}: {error}", dir.display())
            }
        }
    }
}

/// What [`ReaderSession::finish`] did. Plain data handed to the caller by value (which
/// moves its lists out): its fields stay public.
#[derive(Debug, Default)]
pub struct Finished {
    /// Records the last scan and the final drain delivered.
    pub records: u64,
    /// This session's segment files removed.
    pub removed: Vec<PathBuf>,
    /// Other segment files the reclaim removed.
    pub reclaimed: Vec<PathBuf>,
    /// Problems found while finishing.
    pub problems: Vec<SessionProblem>,
}

/// Reads one folder under the reader protocol (see the module's documentation), keeping a
/// value of type `S` per followed segment for the caller.
pub struct ReaderSession<S = ()> {
    follower: Follower<S>,
    scope: Option<Scope>,
    registration: Option<OwnedFile>,
    /// The registration failed and that was said (said again only after it succeeded).
    register_said: bool,
    /// The last scan failed and that was said (said again after a scan that succeeds).
    scan_failing: bool,
    removal: Removal,
    reclaim: Option<Policy>,
    /// Problems found outside a step (on creation), returned by the next one.
    pending: Vec<SessionProblem>,
    finished: bool,
}

impl<S: Default> ReaderSession<S> {
    /// A session whose segments' state starts as `S::default()`.
    pub fn new(opts: SessionOptions) -> ReaderSession<S> {
        ReaderSession::with_state(opts, |_| S::default())
    }
}

impl<S> ReaderSession<S> {
    /// A session whose segments' state `make` creates from their identity. Registers and
    /// starts watching now (a failure is returned by the first `step`, or `take_problems`).
    pub fn with_state(
        opts: SessionOptions,
        make: impl FnMut(&Ident) -> S + Send + 'static,
    ) -> ReaderSession<S> {
        let scope = opts.scope();
        let mut follower = Follower::with_state(&opts.dir, opts.session, make).with_pid(opts.pid);
        if let Some(root) = opts.tree {
            follower = follower.with_tree(root);
        }
        if opts.own_only {
            follower = follower.with_own_only();
        }
        if opts.leases {
            follower = follower.with_leases();
        }
        if let Some(pool) = &opts.budget {
            follower = follower.with_pool(pool);
        }
        let mut s = ReaderSession {
            follower,
            scope,
            registration: None,
            register_said: false,
            scan_failing: false,
            removal: opts.removal,
            reclaim: opts.reclaim,
            pending: Vec::new(),
            finished: false,
        };
        if opts.watch {
            if let Err(e) = s.follower.watch() {
                s.pending.push(SessionProblem::Watch {
                    dir: opts.dir.clone(),
                    error: e.to_string(),
                });
            }
        }
        s.register();
        s
    }

    /// Registers as a reader (again, when it failed before: the folder may have been
    /// missing). Nothing after `finish`.
    fn register(&mut self) {
        let Some(scope) = self.scope else { return };
        if self.registration.is_some() || self.finished {
            return;
        }
        match lifecycle::register(self.follower.dir(), scope) {
            Ok(r) => {
                self.registration = Some(r);
                self.register_said = false;
            }
            Err(e) => {
                if !self.register_said {
                    self.register_said = true;
                    self.pending.push(SessionProblem::Register {
                        dir: self.follower.dir().to_path_buf(),
                        scope,
                        error: e.to_string(),
                    });
                }
            }
        }
    }

    /// Scans for new segments; problems go to `pending`.
    fn scan(&mut self) {
        match self.follower.scan() {
            Ok(_) => self.scan_failing = false,
            Err(e) => {
                if !self.scan_failing {
                    self.scan_failing = true;
                    self.pending.push(SessionProblem::Scan {
                        dir: self.follower.dir().to_path_buf(),
                        error: e.to_string(),
                    });
                }
            }
        }
        self.take_segment_problems();
    }

    fn take_segment_problems(&mut self) {
        let new: Vec<SegmentProblem> = self.follower.take_new_problems().to_vec();
        self.pending
            .extend(new.into_iter().map(SessionProblem::Segment));
    }

    /// One round: register if not yet, scan, drain every ring into `sink` (each record with
    /// its segment's key and the caller's state for it). Returns the problems found since the
    /// last call, each once.
    pub fn step(&mut self, sink: impl FnMut(SegmentKey, &mut S, &Record)) -> Vec<SessionProblem> {
        self.register();
        self.scan();
        self.follower.poll_each(sink);
        self.take_segment_problems();
        self.take_problems()
    }

    /// Drains the rings without scanning (a folder whose processes are all gone, say).
    pub fn poll(&mut self, sink: impl FnMut(SegmentKey, &mut S, &Record)) -> Vec<SessionProblem> {
        self.follower.poll_each(sink);
        self.take_segment_problems();
        self.take_problems()
    }

    /// Problems found since the last call (or step).
    pub fn take_problems(&mut self) -> Vec<SessionProblem> {
        std::mem::take(&mut self.pending)
    }

    /// Waits up to `timeout` for something new in the folder (see `Follower::wait`).
    pub fn wait(&mut self, timeout: std::time::Duration) -> bool {
        self.follower.wait(timeout)
    }

    /// The end: a last scan, the final drain into `sink`, the removal this session's
    /// [`Removal`] asks for, the reclaim, and then the registration dropped, in that order.
    /// The followed segments stay readable (mapped) for a report. Steps after this still
    /// read, but register nothing again.
    pub fn finish(&mut self, mut sink: impl FnMut(SegmentKey, &mut S, &Record)) -> Finished {
        let mut out = Finished::default();
        self.scan();
        out.records = self.follower.final_drain_each(&mut sink);
        self.take_segment_problems();
        out.problems = self.take_problems();
        match self.removal {
            Removal::Leave => {}
            Removal::Ended => {
                let (removed, failed) = self.follower.remove_ended_segments();
                out.removed = removed;
                out.problems
                    .extend(failed.into_iter().map(|(path, e)| SessionProblem::Remove {
                        path,
                        error: e.to_string(),
                    }));
            }
            Removal::All => {
                for f in self.follower.processes_mut() {
                    drop(f.take_lease());
                    match f.remove_file() {
                        Ok(true) => out.removed.push(f.reader().path().to_path_buf()),
                        Ok(false) => {}
                        Err(e) => out.problems.push(SessionProblem::Remove {
                            path: f.reader().path().to_path_buf(),
                            error: e.to_string(),
                        }),
                    }
                }
            }
            Removal::Keep => {
                for f in self.follower.processes_mut() {
                    if let Err(e) = lifecycle::keep(f.reader().path()) {
                        out.problems.push(SessionProblem::Keep {
                            path: f.reader().path().to_path_buf(),
                            error: e.to_string(),
                        });
                    }
                    drop(f.take_lease());
                }
            }
        }
        if let Some(policy) = self.reclaim {
            // This session's kept segments stay; the others it removed or handed over.
            let mine = self.follower.paths();
            let keep = self.removal == Removal::Keep;
            let skip = |p: &Path| keep && mine.contains(p);
            match lifecycle::reclaim(self.follower.dir(), policy, &skip) {
                Ok(r) => out.reclaimed = r.removed,
                // An unreadable folder was said by the scan already.
                Err(_) if self.scan_failing => {}
                Err(e) => out.problems.push(SessionProblem::Reclaim {
                    dir: self.follower.dir().to_path_buf(),
                    error: e.to_string(),
                }),
            }
        }
        self.finished = true;
        self.registration = None;
        out
    }

    /// Whether this session holds its registration as a reader now.
    pub fn registered(&self) -> bool {
        self.registration.is_some()
    }

    pub fn dir(&self) -> &Path {
        self.follower.dir()
    }

    /// Followed segments, in the order they were found.
    pub fn processes(&self) -> &[Followed<S>] {
        self.follower.processes()
    }

    /// The files of the followed segments (`Follower::paths`).
    pub fn paths(&self) -> std::collections::HashSet<PathBuf> {
        self.follower.paths()
    }

    /// Every segment problem kept (what a report lists as skipped).
    pub fn segment_problems(&self) -> &[SegmentProblem] {
        self.follower.problems()
    }

    /// The engine, for what the protocol leaves to the caller (per-segment state, forgetting
    /// segments, a watch descriptor to poll with others).
    pub fn follower(&self) -> &Follower<S> {
        &self.follower
    }

    pub fn follower_mut(&mut self) -> &mut Follower<S> {
        &mut self.follower
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncspy_abi::lifecycle::Owner;
    use syncspy_abi::{Api, Kind, SegmentParams, SegmentWriter};
    use syncspy_test_support::{rec, TempDir};

    fn params(pid: u32, session: u64) -> SegmentParams {
        let mut p = SegmentParams::new(pid, 1000 + pid as u64);
        p.session = session;
        p.ring_capacity = 64;
        p.site_capacity = 16;
        p.module_capacity = 8;
        p
    }

    fn sync(w: &SegmentWriter, n: usize) {
        for _ in 0..n {
            w.record(&rec(Kind::StreamSync, Api::CudaStreamSynchronize, 10, 0, 0));
        }
    }

    fn registration(dir: &Path) -> PathBuf {
        let me = Owner::me();
        dir.join(format!(".syncspy-reader-{}-{}", me.pid, me.start_ticks))
    }

    #[test]
    fn finish_drains_before_it_removes_and_drops_the_registration_last() {
        let dir = TempDir::new("session-finish");
        let w = SegmentWriter::create(dir.path(), &params(51, 9)).unwrap();
        let other = SegmentWriter::create(dir.path(), &params(52, 10)).unwrap();
        sync(&w, 2);
        let opts = SessionOptions::new(dir.path())
            .session(Some(9))
            .claiming()
            .removal(Removal::Ended);
        let mut s: ReaderSession = ReaderSession::new(opts);
        let reg = registration(dir.path());
        assert!(s.registered());
        assert_eq!(std::fs::read_to_string(&reg).unwrap(), "session 9\n");
        let mut seen = 0;
        assert!(s.step(|_, _, _| seen += 1).is_empty());
        assert_eq!(seen, 2);
        let lease = lifecycle::lease_path(w.path(), Owner::me()).unwrap();
        assert!(lease.exists());

        // Written after the last step, then the process ends: the final drain has them,
        // while the file, its lease and the registration are all still there.
        sync(&w, 3);
        w.mark_exited(0);
        w.release_lock();
        let path = w.path().to_path_buf();
        let mut during = Vec::new();
        let done = s.finish(|_, _, _| {
            during.push((path.exists(), lease.exists(), reg.exists()));
        });
        assert_eq!(done.records, 3);
        assert_eq!(during, vec![(true, true, true); 3]);
        assert!(done.problems.is_empty(), "{:?}", done.problems);
        assert_eq!(done.removed, vec![path.clone()]);
        // Then: removed, lease given up, registration dropped.
        assert!(!path.exists() && !lease.exists() && !reg.exists());
        assert!(!s.registered());
        // Another session's segment was not this one's to remove.
        assert!(other.path().exists());
        // The report still reads what was followed.
        assert_eq!(s.processes()[0].agg().delivered(), 5);
        // A step after the end registers nothing again.
        s.step(|_, _, _| {});
        assert!(!reg.exists());
    }

    #[test]
    fn a_folder_that_cannot_be_read_is_a_problem_said_once_per_outage() {
        let dir = TempDir::new("session-scan");
        let gone = dir.path().join("segments");
        std::fs::create_dir(&gone).unwrap();
        let mut s: ReaderSession = ReaderSession::new(SessionOptions::new(&gone));
        assert!(s.step(|_, _, _| {}).is_empty());
        std::fs::remove_dir(&gone).unwrap();
        let p = s.step(|_, _, _| {});
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(matches!(&p[0], SessionProblem::Scan { dir, .. } if dir == &gone));
        assert!(p[0]
            .to_string()
            .starts_with(&format!("cannot read {}: ", gone.display())));
        assert!(s.step(|_, _, _| {}).is_empty(), "said once");
        // At the end too: not said again, and the reclaim's failure not on top of it.
        let mut s2: ReaderSession = ReaderSession::new(
            SessionOptions::new(&gone).reclaim(Some(Policy::from_lookup(&|_| None))),
        );
        let done = s2.finish(|_, _, _| {});
        assert_eq!(done.problems.len(), 1, "{:?}", done.problems);
        assert!(matches!(done.problems[0], SessionProblem::Scan { .. }));
        // Readable again, then not: said again.
        std::fs::create_dir(&gone).unwrap();
        assert!(s.step(|_, _, _| {}).is_empty());
        std::fs::remove_dir(&gone).unwrap();
        assert_eq!(s.step(|_, _, _| {}).len(), 1);
    }

    #[test]
    fn a_failed_registration_is_said_once_and_made_when_the_folder_comes() {
        let dir = TempDir::new("session-register");
        let later = dir.path().join("later");
        let mut s: ReaderSession = ReaderSession::new(SessionOptions::new(&later).claiming());
        assert!(!s.registered());
        let p = s.step(|_, _, _| {});
        assert!(
            p.iter().any(|p| matches!(
                p,
                SessionProblem::Register {
                    scope: Scope::All,
                    ..
                }
            )),
            "{p:?}"
        );
        assert!(p.iter().any(|p| matches!(p, SessionProblem::Scan { .. })));
        let p = s.step(|_, _, _| {});
        assert!(p.is_empty(), "{p:?}");
        std::fs::create_dir(&later).unwrap();
        assert!(s.step(|_, _, _| {}).is_empty());
        assert!(s.registered());
        assert_eq!(
            std::fs::read_to_string(registration(&later)).unwrap(),
            "all\n"
        );
        drop(s);
        assert!(!registration(&later).exists());
    }

    #[test]
    fn removal_all_takes_running_segments_keep_marks_them_leave_leaves_them() {
        let dir = TempDir::new("session-removal");
        // This process: running.
        let me = std::process::id();
        let mut p = params(me, 3);
        p.start_ticks = syncspy_abi::process_start_ticks(me).unwrap();
        let w = SegmentWriter::create(dir.path(), &p).unwrap();
        sync(&w, 1);
        for (removal, removed) in [
            (Removal::Leave, false),
            (Removal::Ended, false),
            (Removal::Keep, false),
        ] {
            let mut s: ReaderSession = ReaderSession::new(
                SessionOptions::new(dir.path())
                    .session(Some(3))
                    .claiming()
                    .removal(removal),
            );
            let done = s.finish(|_, _, _| {});
            assert_eq!(done.records, 1, "{removal:?}");
            assert_eq!(!done.removed.is_empty(), removed, "{removal:?}");
            assert!(w.path().exists(), "{removal:?}");
        }
        let keep = dir.path().join(format!(
            ".{}.keep",
            w.path().file_name().unwrap().to_string_lossy()
        ));
        assert!(keep.exists(), "marked kept");
        std::fs::remove_file(&keep).unwrap();
        let mut s: ReaderSession = ReaderSession::new(
            SessionOptions::new(dir.path())
                .session(Some(3))
                .claiming()
                .removal(Removal::All),
        );
        let done = s.finish(|_, _, _| {});
        assert_eq!(done.removed, vec![w.path().to_path_buf()]);
        assert!(!w.path().exists());
        // Nothing of the session's is left: no lease, no registration.
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
