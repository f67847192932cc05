//! Finding and following segments: scan `SYNCSPY_DIR` for `syncspy-<pid>-<start>` files,
//! open the new ones, keep those of one session, and drain their rings into a `ProcessAgg`.
//!
//! A scan opens only names (and inodes) not seen before, so it is cheap to repeat every
//! ~50 ms. A file that does not open (foreign, truncated, another ABI) is remembered with its
//! error, reported once, and never retried.
//!
//! Each followed segment is known by its [`SegmentKey`], which stays the same for the life of
//! the follower whatever is forgotten around it, and carries a value of the caller's type `S`
//! (the monitor keeps its time window there, `syncspy run` nothing): callers never keep
//! vectors parallel to the follower's.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};

use syncspy_abi::lifecycle::{self, OwnedFile, Owner, Readers};
use syncspy_abi::{parse_segment_name, Cursor, Ident, OpenError, ProcState, Record, SegmentReader};

use crate::aggregate::{LiveCounters, ProcessAgg};
use crate::limits::{Budget, Dropped, Limits, Pool};
use crate::monotonic_ns;

/// Polls a claimed-but-unfinished ring slot may hold a reader back before it counts as lost
/// (a writer is between claim and publish for microseconds; at ~50 ms a poll this is ample).
pub const PATIENCE: u32 = 4;
/// Problems a follower keeps (the oldest beyond this are dropped).
pub const MAX_PROBLEMS: usize = 256;
/// Records taken from one ring per poll, so one busy process cannot starve the others.
pub const POLL_BUDGET: usize = 1 << 20;
/// A watched folder is still listed in full this often (a safety net for events lost);
/// between listings a scan opens only the names inotify reported, so its cost does not grow
/// with the files that sit in the folder unchanged.
pub const LIST_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
/// Names kept from inotify between scans; beyond, the next scan lists the folder instead.
pub const MAX_PENDING: usize = 65_536;

/// The identity of a process: its pid and its start time in clock ticks since boot (the pair
/// is unique on a host, where a pid alone is reused). Plain data, passed by value and made by
/// callers too (map keys: the monitor and `syncspy trace` make them): its fields stay public.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessKey {
    pub pid: u32,
    pub start_ticks: u64,
}

/// The identity of one segment: its process, and when the library created it (a process
/// that `exec`s gets a new segment under the same name, with a later `created_ns`). Plain
/// data like [`ProcessKey`]: its fields stay public.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentKey {
    pub process: ProcessKey,
    /// CLOCK_MONOTONIC ns of the segment's creation.
    pub created_ns: u64,
}

impl SegmentKey {
    pub fn of(ident: &Ident) -> SegmentKey {
        SegmentKey {
            process: ProcessKey {
                pid: ident.pid,
                start_ticks: ident.start_ticks,
            },
            created_ns: ident.created_ns,
        }
    }

    pub fn pid(&self) -> u32 {
        self.process.pid
    }
}

/// One call site of one segment: the site id is only meaningful within its segment. Plain
/// data like [`ProcessKey`] (callers make it to look sites up): its fields stay public.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteRef {
    pub segment: SegmentKey,
    pub site: u32,
}

/// One segment this follower reads, with the caller's state `S` for it.
pub struct Followed<S = ()> {
    key: SegmentKey,
    reader: SegmentReader,
    cursor: Cursor,
    agg: ProcessAgg,
    /// Inode of the file when it was opened: a later file under the same name (the process
    /// exec'd and the library created its segment again) is a different segment.
    ino: u64,
    /// The file's size when it was found truncated (its reader is then frozen), and whether
    /// that was reported.
    truncated: Option<(u64, bool)>,
    /// The caller's own state for this segment, created with `S::default()`.
    state: S,
    /// This reader's lease on the segment (`Follower::with_leases`), held until dropped or
    /// released.
    lease: Option<OwnedFile>,
    /// The owner uid of the segment file (whose budget it counts in, `limits`).
    uid: u32,
    /// Modules of its map a report uses (`Limits::modules_per_segment`; all without a
    /// budget), and how many beyond were counted as dropped.
    module_cap: usize,
    modules_over: u64,
    /// When this reader first saw the process ended (monotonic ns).
    ended_seen_ns: Option<u64>,
    /// The last poll left records in the ring (its work budget ran out).
    behind: bool,
}

/// A followed segment's reader, cursor, aggregate, inode and owner are the follower's to
/// write (it polls, compacts and releases), so callers read them (`reader`, `agg`, `uid`);
/// the caller's own state `S` is theirs to write (`state_mut`), and the only write to the
/// aggregate from outside is a monitor's reset (`restart_records`).
impl<S> Followed<S> {
    pub fn key(&self) -> SegmentKey {
        self.key
    }

    /// The segment's reader (its header, tables, and the control word a reader may write:
    /// `SegmentReader::request_gpu_trace` takes `&self`).
    pub fn reader(&self) -> &SegmentReader {
        &self.reader
    }

    /// What was read of the segment: its header counters as of the last poll and what the
    /// records received built.
    pub fn agg(&self) -> &ProcessAgg {
        &self.agg
    }

    /// The owner uid of the segment file (whose budget it counts in, `limits`).
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// The caller's own state for this segment.
    pub fn state(&self) -> &S {
        &self.state
    }

    /// The caller's own state, to write: the follower never reads it (the monitor keeps its
    /// window, rates and reset baseline there).
    pub fn state_mut(&mut self) -> &mut S {
        &mut self.state
    }

    /// The aggregate, read, with the caller's state to write: for a caller that updates its
    /// state from the figures (both borrowed at once).
    pub fn agg_and_state_mut(&mut self) -> (&ProcessAgg, &mut S) {
        (&self.agg, &mut self.state)
    }

    /// Starts the aggregate's record counts over from now, for a monitor's reset
    /// ([`ProcessAgg::restart_records`]): what the records built (distributions, call sites,
    /// copies, GPU gap causes, the ring's delivered, lost and corrupt counts) is forgotten;
    /// the header's exact totals since the process started stay, and the caller subtracts
    /// them against the baseline it keeps.
    pub fn restart_records(&mut self) {
        self.agg.restart_records();
    }

    /// Whether the writing process has ended (exit handler ran, or it no longer exists).
    pub fn ended(&self) -> bool {
        matches!(self.agg.live().state, ProcState::Exited(_)) || self.agg.gone_ns().is_some()
    }

    /// The module map a report symbolizes with: its first `Limits::modules_per_segment`
    /// entries under a budget, every entry otherwise.
    pub fn modules(&self) -> Vec<syncspy_abi::modules::Module> {
        self.reader.modules_upto(self.module_cap)
    }

    /// Drains the ring into the aggregate (at most `budget` records unless `patience` is 0),
    /// handing each record to `sink` as well. Returns the records delivered and whether the
    /// budget ran out with records left.
    fn poll(
        &mut self,
        patience: u32,
        budget: usize,
        sink: &mut dyn FnMut(SegmentKey, &mut S, &Record),
    ) -> (u64, bool) {
        let delivered = self.poll_ring(patience, budget, sink);
        if self.ended_seen_ns.is_none() && self.ended() {
            self.ended_seen_ns = Some(monotonic_ns());
        }
        delivered
    }

    fn poll_ring(
        &mut self,
        patience: u32,
        budget: usize,
        sink: &mut dyn FnMut(SegmentKey, &mut S, &Record),
    ) -> (u64, bool) {
        self.behind = false;
        if self.reader.frozen() {
            return (0, false);
        }
        if !self.reader.intact() {
            // Someone truncated the file: reading on would fault. Keep what was read.
            self.truncated = Some((self.reader.file_size(), false));
            self.reader.freeze();
            if self.agg.gone_ns().is_none()
                && !matches!(self.agg.live().state, ProcState::Exited(_))
            {
                self.agg.mark_gone(monotonic_ns());
            }
            return (0, false);
        }
        let key = self.key;
        let mut delivered = 0;
        loop {
            let (agg, state) = (&mut self.agg, &mut self.state);
            let st = self.reader.poll(&mut self.cursor, budget, patience, |r| {
                // Undecodable records are counted through `PollStats::corrupt`.
                if let Ok(r) = r {
                    agg.add_record(&r);
                    sink(key, state, &r);
                }
            });
            self.agg.add_poll(&st);
            delivered += st.delivered;
            // Only a final drain (patience 0) keeps going until the ring is empty.
            if st.delivered + st.corrupt < budget as u64 {
                break;
            }
            if patience != 0 {
                self.behind = true;
                break;
            }
        }
        self.agg.set_live(LiveCounters::read(&self.reader));
        if self.agg.gone_ns().is_none()
            && matches!(self.agg.live().state, ProcState::Running)
            && !self.reader.writer_alive()
        {
            self.agg.mark_gone(monotonic_ns());
        }
        (delivered, self.behind)
    }

    /// Removes this segment's file, unless a newer segment replaced it under the same name.
    /// `Ok(false)` when there was nothing to remove.
    pub fn remove_file(&self) -> io::Result<bool> {
        lifecycle::remove_if_same(self.reader.path(), self.ino)
    }

    /// Whether the file this segment was opened from is no longer under its name (removed,
    /// or replaced by a newer segment): nobody new can find it, so once drained its mapping
    /// only keeps memory in use.
    pub fn unlinked(&self) -> bool {
        match std::fs::symlink_metadata(self.reader.path()) {
            Ok(m) => m.ino() != self.ino || m.nlink() == 0,
            Err(e) => e.kind() == io::ErrorKind::NotFound,
        }
    }

    /// Gives up this reader's lease, if any, and nothing else.
    pub fn take_lease(&mut self) -> Option<OwnedFile> {
        self.lease.take()
    }

    /// Whether this reader holds a lease on the segment.
    pub fn leased(&self) -> bool {
        self.lease.is_some()
    }

    /// Gives up this reader's lease (if any), then removes the file if the process has ended
    /// and no other reader wants it: no other live lease, no live `syncspy run` of its
    /// session and, when `hand_over` is set, no live reader of the whole folder (an agent,
    /// which will pick it up). `Ok(true)` when the file was removed.
    pub fn release(&mut self, hand_over: bool) -> io::Result<bool> {
        self.release_with(hand_over, &mut None)
    }

    /// Like `release`, with the folder's readers surveyed at most once for every segment
    /// released with the same `survey` (one step's), rather than once each.
    pub fn release_with(
        &mut self,
        hand_over: bool,
        survey: &mut Option<Readers>,
    ) -> io::Result<bool> {
        self.lease = None;
        if !self.ended() {
            return Ok(false);
        }
        let dir = match self.reader.path().parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let readers = match survey {
            Some(r) => r,
            None => survey.insert(Readers::survey(dir)?),
        };
        let me = Owner::me();
        let name = self
            .reader
            .path()
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if readers.wanted_by_others(name, self.agg.session(), me)
            || (hand_over && readers.folder_reader_besides(me))
        {
            return Ok(false);
        }
        self.remove_file()
    }
}

/// A file that looked like a segment but could not be followed. Only the follower finds
/// them; callers read them (`path`, `error`).
#[derive(Clone, Debug)]
pub struct SegmentProblem {
    path: PathBuf,
    error: String,
}

impl SegmentProblem {
    /// A problem with the file at `path` (a test's: the follower finds its own).
    #[cfg(test)]
    pub(crate) fn new(path: impl Into<PathBuf>, error: impl Into<String>) -> SegmentProblem {
        SegmentProblem {
            path: path.into(),
            error: error.into(),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What was wrong with it, and what to do about it where known.
    pub fn error(&self) -> &str {
        &self.error
    }
}

impl std::fmt::Display for SegmentProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "skipped {}: {}", self.path.display(), self.error)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    Followed,
    /// Not followed: its user (this uid) was at their budget (`limits`).
    Refused(u32),
    /// A valid segment of another session, or another user's file: not ours.
    Ignored,
    Failed,
}

/// Makes the caller's state for a newly found segment.
type MakeState<S> = Box<dyn FnMut(&Ident) -> S + Send>;

/// Follows the segments of one session (or of every session) in one folder, keeping a value
/// of type `S` per segment for the caller.
pub struct Follower<S = ()> {
    make_state: MakeState<S>,
    dir: PathBuf,
    session: Option<u64>,
    pid: Option<u32>,
    /// Counts another user's segment only when its process descends from this one.
    tree: Option<u32>,
    /// `with_own_only`.
    own_only: bool,
    seen: HashMap<(OsString, u64), Seen>,
    /// In the order they were found.
    followed: Vec<Followed<S>>,
    problems: Vec<SegmentProblem>,
    problems_taken: usize,
    /// Take a lease on each segment followed.
    leases: bool,
    /// Wakes `wait` when a file appears in the folder, and names it (`pending`).
    watch: Option<inotify::Inotify>,
    /// Names inotify reported since the last scan (opened by the next one without listing
    /// the folder); at most `MAX_PENDING`, beyond which the next scan lists the folder.
    pending: Vec<OsString>,
    /// The next scan lists the whole folder (first scan, a full or overflowed event queue,
    /// a folder that could not be read).
    list_due: bool,
    /// When the folder was last listed (the safety net: every `LIST_EVERY` even when watched).
    last_listing: Option<std::time::Instant>,
    /// How many times the folder was listed, and how many segment files scans lstat'ed or
    /// opened one by one.
    listings: u64,
    touched: u64,
    /// `LIST_EVERY`, unless set otherwise (`with_listing_every`).
    list_every: std::time::Duration,
    /// Entries refused for their user's budget, per uid, in the order found: tried again,
    /// newest first and without listing the folder, when that user has room.
    refused: HashMap<u32, Vec<(OsString, u64)>>,
    /// A reader's registration appeared (`take_reader_appeared`).
    reader_appeared: bool,
    /// The budgets of a reader of every user's segments (`with_budget`); `None`: unbounded.
    budget: Option<Budget>,
    /// Where the next poll starts in `followed` (rotated, so that a work budget spent early
    /// does not always fall on the same segments).
    next_poll: usize,
}

impl<S: Default> Follower<S> {
    /// Follows segments in `dir` whose `Ident::session` is `session`; `None` follows all.
    /// Each segment's state starts as `S::default()`.
    pub fn new(dir: impl Into<PathBuf>, session: Option<u64>) -> Follower<S> {
        Follower::with_state(dir, session, |_| S::default())
    }
}

/// Raises this process's soft limit on open files to its hard limit, once: a reader keeps
/// each followed segment's file open (its lock says whether the writer runs), and a host with
/// many processes would exhaust the usual soft limit of 1024. For long-lived readers (the
/// agent, the monitor); not for one that starts the user's program, which would inherit it.
pub fn raise_open_file_limit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit with a pointer to a valid rlimit on the stack.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
                lim.rlim_cur = lim.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
        }
    });
}

impl<S> Follower<S> {
    /// Like [`Follower::new`], with each segment's state made by `make` from its identity.
    pub fn with_state(
        dir: impl Into<PathBuf>,
        session: Option<u64>,
        make: impl FnMut(&Ident) -> S + Send + 'static,
    ) -> Follower<S> {
        Follower {
            make_state: Box::new(make),
            dir: dir.into(),
            session,
            pid: None,
            tree: None,
            own_only: false,
            seen: HashMap::new(),
            followed: Vec::new(),
            problems: Vec::new(),
            problems_taken: 0,
            leases: false,
            watch: None,
            pending: Vec::new(),
            list_due: true,
            last_listing: None,
            listings: 0,
            touched: 0,
            list_every: LIST_EVERY,
            refused: HashMap::new(),
            reader_appeared: false,
            budget: None,
            next_poll: 0,
        }
    }

    /// Bounds what the segments followed cost this reader (`limits`): segments and heap
    /// bytes per user and in total, modules per segment, records per user and poll; ended
    /// processes are compacted. For readers of every user's segments (the agent, the
    /// monitor).
    pub fn with_budget(mut self, limits: Limits) -> Follower<S> {
        self.budget = Some(Budget::new(limits));
        self
    }

    /// Like `with_budget`, counting in `pool` with the other readers of it: a user's
    /// segments and bytes, and the total, are bounded over every folder of the pool.
    pub fn with_pool(mut self, pool: &Pool) -> Follower<S> {
        self.budget = Some(pool.budget());
        self
    }

    /// The budgets, when bounded.
    pub fn budget(&self) -> Option<&Budget> {
        self.budget.as_ref()
    }

    /// What the budgets dropped so far (zeros when unbounded).
    pub fn dropped(&self) -> Dropped {
        self.budget
            .as_ref()
            .map(Budget::dropped)
            .unwrap_or_default()
    }

    /// Follows a segment whose file belongs to another user than this reader's only when its
    /// process, found from here (`place`), descends from process `root` (`syncspy run`
    /// itself): another local user who learnt the session cannot add a process of their
    /// own to the run. A segment of this reader's own user is followed as before (no other
    /// user can make one).
    pub fn with_tree(mut self, root: u32) -> Follower<S> {
        self.tree = Some(root);
        self
    }

    /// Follows only segments whose file belongs to this reader's user: for a reader chosen by
    /// session alone (`syncspy-top --session`), with no process of its own to check descent
    /// from, another local user who learnt the session cannot add a process of theirs.
    pub fn with_own_only(mut self) -> Follower<S> {
        self.own_only = true;
        self
    }

    /// Takes a lease (see `syncspy_abi::lifecycle`) on every segment followed from now on,
    /// so that no other reader removes it before this one has drained it.
    pub fn with_leases(mut self) -> Follower<S> {
        self.leases = true;
        self
    }

    /// Watches the folder with inotify, so that `wait` returns as soon as a segment
    /// appears. Without it (inotify unavailable: out of watches, say) `wait` sleeps its
    /// whole timeout and the periodic scan finds new segments.
    pub fn watch(&mut self) -> io::Result<()> {
        use inotify::{Inotify, WatchMask};
        let ino = Inotify::init()?;
        // A segment is published by a rename; a lease or registration is created in place.
        ino.watches()
            .add(&self.dir, WatchMask::MOVED_TO | WatchMask::CREATE)?;
        self.watch = Some(ino);
        Ok(())
    }

    /// Waits up to `timeout` for something new in the folder (at once with `watch`; the
    /// whole timeout otherwise). Returns whether something appeared.
    pub fn wait(&mut self, timeout: std::time::Duration) -> bool {
        use std::os::fd::AsRawFd;
        let Some(ino) = &mut self.watch else {
            std::thread::sleep(timeout);
            return false;
        };
        let mut pfd = libc::pollfd {
            fd: ino.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `pfd` is one valid pollfd on the stack, and the count passed is 1; the fd
        // stays open for the call (owned by `ino`, borrowed here).
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n <= 0 {
            return false;
        }
        self.drain_events();
        true
    }

    /// Reads what inotify queued (the fd is non-blocking), keeping the names for `scan`.
    fn drain_events(&mut self) {
        use inotify::EventMask;
        let Some(ino) = &mut self.watch else { return };
        let mut buf = [0u8; 4096];
        let mut lost = false;
        loop {
            let Ok(events) = ino.read_events(&mut buf) else {
                break;
            };
            let mut any = false;
            for e in events {
                any = true;
                // The folder itself was removed (or unmounted): the watch is gone with it.
                if e.mask.contains(EventMask::IGNORED) {
                    lost = true;
                    continue;
                }
                if e.mask.contains(EventMask::Q_OVERFLOW) {
                    self.list_due = true;
                    continue;
                }
                let Some(name) = e.name else { continue };
                let Some(text) = name.to_str() else { continue };
                if text.starts_with(lifecycle::REG_PREFIX) {
                    self.reader_appeared = true;
                }
                if parse_segment_name(text).is_none() {
                    continue;
                }
                if self.list_due {
                    continue;
                }
                if self.pending.len() >= MAX_PENDING {
                    self.list_due = true;
                    self.pending.clear();
                } else {
                    self.pending.push(name.to_os_string());
                }
            }
            if !any {
                break;
            }
        }
        if lost {
            // Listed at every scan from now on, as a folder never watched: one made again
            // under the same name is found by its listing.
            self.watch = None;
            self.list_due = true;
        }
    }

    /// Whether a reader registered in the watched folder (its registration file appeared)
    /// since the last call; always true when the folder is not watched.
    pub fn take_reader_appeared(&mut self) -> bool {
        self.drain_events();
        std::mem::take(&mut self.reader_appeared) || self.watch.is_none()
    }

    /// How many times the folder was listed in full so far.
    pub fn listings(&self) -> u64 {
        self.listings
    }

    /// How many segment files scans lstat'ed or opened one by one so far.
    pub fn files_touched(&self) -> u64 {
        self.touched
    }

    /// Lists a watched folder in full at most this often between inotify's reports
    /// (`LIST_EVERY` by default).
    pub fn with_listing_every(mut self, every: std::time::Duration) -> Follower<S> {
        self.list_every = every;
        self
    }

    /// The descriptor `wait` polls, while the folder is watched (for a caller that waits on
    /// several folders at once, then calls `wait` with a zero timeout to drain it).
    pub fn watch_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.watch.as_ref().map(|w| w.as_fd())
    }

    /// Follows only the segments of process `pid` (`None`: every process).
    pub fn with_pid(mut self, pid: Option<u32>) -> Follower<S> {
        self.pid = pid;
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process this follower is limited to, if any.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Opens segments that appeared since the last scan; returns how many are new. Fails
    /// only when the folder itself cannot be read.
    ///
    /// A watched folder is listed only at the first scan, when inotify lost events, and every
    /// `LIST_EVERY` as a safety net; in between a scan opens the names inotify reported and
    /// tries again the entries refused for a user who has room now, and touches no other
    /// file: its cost does not grow with the files that sit in the folder unchanged. An
    /// unwatched folder is listed at every scan (entries already seen cost no system call).
    pub fn scan(&mut self) -> io::Result<usize> {
        if let Some(b) = &mut self.budget {
            b.recount(self.followed.iter().map(|f| (f.uid, f.agg.heap_bytes())));
        }
        self.drain_events();
        let full = self.watch.is_none()
            || self.list_due
            || self
                .last_listing
                .is_none_or(|t| t.elapsed() >= self.list_every);
        let mut new = 0;
        if full {
            // Listed now: what inotify queued is in the listing. Due again if this fails.
            self.list_due = true;
            self.pending.clear();
            let listing = std::fs::read_dir(&self.dir)?;
            self.list_due = false;
            self.last_listing = Some(std::time::Instant::now());
            self.listings += 1;
            let mut present = std::collections::HashSet::new();
            for entry in listing {
                let Ok(entry) = entry else { continue };
                let name = entry.file_name();
                let Some(pid) = name.to_str().and_then(parse_segment_name).map(|(p, _)| p) else {
                    continue;
                };
                let key = (name, entry.ino());
                present.insert(key.clone());
                if self.seen.contains_key(&key) {
                    continue;
                }
                new += self.consider(key, pid, None, false);
            }
            // Forget files that are gone, so a long-lived follower does not grow with every
            // process the host ever ran.
            self.seen.retain(|k, _| present.contains(k));
            for list in self.refused.values_mut() {
                list.retain(|k| present.contains(k));
            }
            self.refused.retain(|_, l| !l.is_empty());
        } else {
            for name in std::mem::take(&mut self.pending) {
                let Some((pid, _)) = name.to_str().and_then(parse_segment_name) else {
                    continue;
                };
                // Gone again already (a short process whose file was removed): nothing to do.
                self.touched += 1;
                let Ok(meta) = std::fs::symlink_metadata(self.dir.join(&name)) else {
                    continue;
                };
                let key = (name, meta.ino());
                if self.seen.contains_key(&key) {
                    continue;
                }
                new += self.consider(key, pid, Some(meta), false);
            }
        }
        new += self.retry_refused();
        Ok(new)
    }

    /// Tries again, newest found first, the entries refused for a user's budget, for each
    /// user who has room now (and only while they have): one lstat and an open each.
    fn retry_refused(&mut self) -> usize {
        let Some(b) = &self.budget else { return 0 };
        let uids: Vec<u32> = self
            .refused
            .keys()
            .copied()
            .filter(|u| b.admits(*u))
            .collect();
        let mut new = 0;
        for uid in uids {
            let mut list = self.refused.remove(&uid).unwrap_or_default();
            while let Some(key) = list.pop() {
                if !self.budget.as_ref().is_some_and(|b| b.admits(uid)) {
                    list.push(key);
                    break;
                }
                self.seen.remove(&key);
                let Some((pid, _)) = key.0.to_str().and_then(parse_segment_name) else {
                    continue;
                };
                // Removed, or replaced under its name (the new file is found as new).
                self.touched += 1;
                let meta = match std::fs::symlink_metadata(self.dir.join(&key.0)) {
                    Ok(m) if m.ino() == key.1 => m,
                    _ => continue,
                };
                new += self.consider(key, pid, Some(meta), true);
            }
            if !list.is_empty() {
                // Refused again meanwhile (its owner changed): after the older ones.
                list.extend(self.refused.remove(&uid).unwrap_or_default());
                self.refused.insert(uid, list);
            }
        }
        new
    }

    /// Decides about one segment file not seen before (or refused before, `retry`): follows
    /// it, refuses it for its user's budget, ignores it or reports it. `meta` is its lstat,
    /// when already made. Returns 1 when it is followed now.
    fn consider(
        &mut self,
        key: (OsString, u64),
        pid: u32,
        meta: Option<std::fs::Metadata>,
        retry: bool,
    ) -> usize {
        let path = self.dir.join(&key.0);
        let ino = key.1;
        if self.pid.is_some_and(|p| p != pid) {
            self.seen.insert(key, Seen::Ignored);
            return 0;
        }
        // The file's owner, without opening it: a user over their budget costs an lstat.
        let meta = meta.or_else(|| {
            self.touched += 1;
            std::fs::symlink_metadata(&path).ok()
        });
        let uid = meta.as_ref().map(|m| m.uid()).unwrap_or(u32::MAX);
        if self.refuse_over_budget(&key, uid, retry) {
            return 0;
        }
        self.touched += 1;
        let seen = match SegmentReader::open(&path) {
            Ok(reader) => self.admit(reader, path, ino, uid),
            // Removed between listing and opening: nothing to follow.
            Err(OpenError::Io(e)) if e.kind() == io::ErrorKind::NotFound => return 0,
            // Another user's segment (mode 0600) cannot belong to our session.
            Err(OpenError::Io(e))
                if e.kind() == io::ErrorKind::PermissionDenied && !owned_by_us(&meta) =>
            {
                Seen::Ignored
            }
            // Neither ours nor its process's: a follower of one session (`syncspy run`)
            // leaves it unmentioned, like any other user's file; one that follows every
            // process (the agent, the monitor) says it skipped it.
            Err(OpenError::Owner { .. }) if self.session.is_some() => Seen::Ignored,
            // Another user's folder, FIFO or link named like a segment (one for each new
            // pid, to make every run warn): not this session's, since its processes'
            // segments are regular files, which take another name when theirs is taken.
            Err(OpenError::NotRegular(_)) if self.session.is_some() && !owned_by_us(&meta) => {
                Seen::Ignored
            }
            Err(e) => {
                self.push_problem(SegmentProblem {
                    path,
                    error: describe_open_error(&e),
                });
                Seen::Failed
            }
        };
        let new = usize::from(seen == Seen::Followed);
        self.seen.insert(key, seen);
        new
    }

    /// Refuses the segment `key` when its user (`uid`) is at their budget: kept to be tried
    /// again, after the ones refused before; counted once (not again at a `retry`).
    fn refuse_over_budget(&mut self, key: &(OsString, u64), uid: u32, retry: bool) -> bool {
        let Some(b) = &mut self.budget else {
            return false;
        };
        if b.admits(uid) {
            return false;
        }
        if !retry {
            b.refused();
        }
        self.refused.entry(uid).or_default().push(key.clone());
        self.seen.insert(key.clone(), Seen::Refused(uid));
        true
    }

    /// An opened segment: ignored when it is another session's, or (said as a problem) when
    /// its file is another user's where only one's own are trusted, or its process is not in
    /// the run's tree; else followed.
    fn admit(&mut self, reader: SegmentReader, path: PathBuf, ino: u64, uid: u32) -> Seen {
        let placement = || crate::place::place(reader.ident(), reader.origin().as_ref());
        let mut placed = None;
        let foreign_to_tree = self.tree.is_some_and(|root| {
            reader.owner_uid() != Some(crate::safe_file::euid()) && {
                let p = placed.insert(placement());
                !p.host_pid().is_some_and(|pid| descends_from(pid, root))
            }
        });
        let foreign_owner = self.own_only && reader.owner_uid() != Some(crate::safe_file::euid());
        if self.session.is_some_and(|s| s != reader.ident().session) {
            Seen::Ignored
        } else if foreign_owner {
            self.push_problem(SegmentProblem {
                path,
                error: format!(
                    "not shown: its file belongs to uid {}, not to this reader's user \
                     (a session's segments are trusted only from one's own user)",
                    reader.owner_uid().map_or("?".into(), |u| u.to_string()),
                ),
            });
            Seen::Ignored
        } else if foreign_to_tree {
            self.push_problem(SegmentProblem {
                path,
                error: format!(
                    "not counted: its file belongs to uid {}, and its process {} is \
                     not one this run started",
                    reader.owner_uid().map_or("?".into(), |u| u.to_string()),
                    reader.ident().pid
                ),
            });
            Seen::Ignored
        } else {
            let placement = placed.unwrap_or_else(placement);
            self.follow_new(reader, &path, ino, uid, placement);
            Seen::Followed
        }
    }

    /// Starts following an admitted segment: its aggregate (accounted to its user's budget),
    /// its state, and its lease.
    fn follow_new(
        &mut self,
        reader: SegmentReader,
        path: &Path,
        ino: u64,
        uid: u32,
        placement: crate::place::Placement,
    ) {
        let (account, module_cap) = match &mut self.budget {
            Some(b) => (Some(b.admit(uid)), b.limits().modules_per_segment),
            None => (None, usize::MAX),
        };
        let agg = ProcessAgg::opened(reader.ident(), reader.job(), placement, account);
        let state = (self.make_state)(reader.ident());
        // Without a lease the segment is still followed, as before leases.
        let lease = if self.leases {
            lifecycle::take_lease(path).ok()
        } else {
            None
        };
        self.followed.push(Followed {
            key: SegmentKey::of(reader.ident()),
            reader,
            cursor: Cursor::from_start(),
            agg,
            ino,
            truncated: None,
            state,
            lease,
            uid,
            module_cap,
            modules_over: 0,
            ended_seen_ns: None,
            behind: false,
        });
    }

    /// Drains every followed ring (bounded per segment) and refreshes header counters;
    /// returns the records delivered.
    pub fn poll(&mut self) -> u64 {
        self.poll_each(|_, _, _| {})
    }

    /// Like `poll`, and hands every record to `sink` with its segment's key and state.
    pub fn poll_each(&mut self, mut sink: impl FnMut(SegmentKey, &mut S, &Record)) -> u64 {
        let mut n = 0;
        let Some(budget) = &mut self.budget else {
            for f in &mut self.followed {
                n += f.poll(PATIENCE, POLL_BUDGET, &mut sink).0;
            }
            self.report_truncated();
            return n;
        };
        // Bounded: each user's segments share one work budget, from a rotating start.
        budget.begin_poll();
        let len = self.followed.len();
        let start = self.next_poll % len.max(1);
        self.next_poll = self.next_poll.wrapping_add(1);
        let now = monotonic_ns();
        let compact_after = budget.limits().compact_after_ns;
        for i in (start..len).chain(0..start) {
            let f = &mut self.followed[i];
            let left = budget.work_left(f.uid, POLL_BUDGET);
            if left == 0 {
                budget.worked(f.uid, 0, true);
                continue;
            }
            let (got, behind) = f.poll(PATIENCE, left, &mut sink);
            budget.worked(f.uid, got, behind);
            n += got;
            let over = u64::from(f.agg.live().modules_used)
                .min(u64::from(f.reader.ident().module_capacity))
                .saturating_sub(f.module_cap as u64);
            if over > f.modules_over {
                budget.modules_dropped(over - f.modules_over);
                f.modules_over = over;
            }
            // Ended, drained and past the grace: keep its totals and top sites only.
            if !f.agg.compacted()
                && !behind
                && f.ended_seen_ns
                    .is_some_and(|e| now.saturating_sub(e) >= compact_after)
            {
                f.agg.compact();
                budget.compacted();
            }
        }
        self.report_truncated();
        n
    }

    /// Reports, once each, segments found truncated while followed.
    fn report_truncated(&mut self) {
        let mut found = Vec::new();
        for f in &mut self.followed {
            if let Some((size, reported @ false)) = &mut f.truncated {
                *reported = true;
                found.push(SegmentProblem {
                    path: f.reader.path().to_path_buf(),
                    error: format!(
                        "the file was truncated to {size} bytes while followed; its numbers \
                         stop at the last read (nothing may write to or truncate a segment)"
                    ),
                });
            }
        }
        for p in found {
            self.push_problem(p);
        }
    }

    /// Keeps a problem; only the latest `MAX_PROBLEMS` are kept, so a long-lived follower
    /// does not grow with every bad file it ever met.
    fn push_problem(&mut self, p: SegmentProblem) {
        self.problems.push(p);
        if self.problems.len() > MAX_PROBLEMS {
            let cut = self.problems.len() - MAX_PROBLEMS;
            self.problems.drain(..cut);
            self.problems_taken = self.problems_taken.saturating_sub(cut);
        }
    }

    /// The last drain: everything the rings still hold. Slots of ended processes that were
    /// claimed but never completed count as lost at once (`patience = 0`); processes that
    /// still run get the usual patience, so a record being written is not miscounted.
    pub fn final_drain(&mut self) -> u64 {
        self.final_drain_each(|_, _, _| {})
    }

    /// Like `final_drain`, and hands every record to `sink` as `poll_each` does.
    pub fn final_drain_each(&mut self, mut sink: impl FnMut(SegmentKey, &mut S, &Record)) -> u64 {
        let mut n = 0;
        for f in &mut self.followed {
            // Refresh the state first: the process may have ended since the last poll.
            n += f.poll(PATIENCE, POLL_BUDGET, &mut sink).0;
            n += f
                .poll(if f.ended() { 0 } else { PATIENCE }, POLL_BUDGET, &mut sink)
                .0;
        }
        self.report_truncated();
        n
    }

    /// Followed segments, in the order they were found.
    pub fn processes(&self) -> &[Followed<S>] {
        &self.followed
    }

    /// The files of the followed segments (what a reclaimer must leave alone).
    pub fn paths(&self) -> std::collections::HashSet<PathBuf> {
        self.followed
            .iter()
            .map(|f| f.reader().path().to_path_buf())
            .collect()
    }

    /// Followed segments, mutable (to update the caller's state, or restart an aggregate's
    /// record counts for a reset).
    pub fn processes_mut(&mut self) -> impl Iterator<Item = &mut Followed<S>> {
        self.followed.iter_mut()
    }

    /// The followed segment `key`, if it is still followed.
    pub fn get(&self, key: SegmentKey) -> Option<&Followed<S>> {
        self.followed.iter().find(|f| f.key == key)
    }

    /// Every problem found so far.
    pub fn problems(&self) -> &[SegmentProblem] {
        &self.problems
    }

    /// Problems found since the last call (to print each once as it appears).
    pub fn take_new_problems(&mut self) -> &[SegmentProblem] {
        let from = self.problems_taken;
        self.problems_taken = self.problems.len();
        &self.problems[from..]
    }

    /// Removes the files of followed segments whose process has ended (after the last
    /// drain), releasing this reader's leases first: a file another reader still wants (see
    /// `Followed::release`) is handed over to it instead, and a file replaced under the same
    /// name by a newer segment is left alone. Returns the removed paths and the failures.
    pub fn remove_ended_segments(&mut self) -> (Vec<PathBuf>, Vec<(PathBuf, io::Error)>) {
        let (mut removed, mut failed) = (Vec::new(), Vec::new());
        for f in self.followed.iter_mut().filter(|f| f.ended()) {
            match f.release(true) {
                Ok(true) => removed.push(f.reader.path().to_path_buf()),
                Ok(false) => {}
                Err(e) => failed.push((f.reader.path().to_path_buf(), e)),
            }
        }
        (removed, failed)
    }

    /// Stops following the segments `forget` picks and hands them back (their files stay).
    /// A forgotten segment is not opened again while its file exists; the keys of the others
    /// do not change.
    pub fn forget(&mut self, mut forget: impl FnMut(&Followed<S>) -> bool) -> Vec<Followed<S>> {
        let (gone, keep) = std::mem::take(&mut self.followed)
            .into_iter()
            .partition(|f| forget(f));
        self.followed = keep;
        gone
    }
}

/// Whether process `pid` is `root` or one of its descendants, by the parent links in /proc
/// (a process orphaned by its parent's end has left the tree).
pub fn descends_from(mut pid: u32, root: u32) -> bool {
    for _ in 0..4096 {
        if pid == root {
            return true;
        }
        if pid <= 1 {
            return false;
        }
        let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
            return false;
        };
        // `pid (comm) state ppid ...`: the command may hold spaces and parentheses.
        let Some(close) = stat.iter().rposition(|b| *b == b')') else {
            return false;
        };
        let Some(ppid) = std::str::from_utf8(&stat[close + 1..])
            .ok()
            .and_then(|rest| rest.split_ascii_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
        else {
            return false;
        };
        pid = ppid;
    }
    false
}

fn owned_by_us(meta: &Option<std::fs::Metadata>) -> bool {
    meta.as_ref()
        .is_some_and(|m| m.uid() == crate::safe_file::euid())
}

/// The reader's error with what to do about it.
pub fn describe_open_error(e: &OpenError) -> String {
    match e {
        OpenError::Io(io) if io.kind() == io::ErrorKind::PermissionDenied => {
            format!("{io} (run syncspy as the user that runs the instrumented program)")
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncspy_abi::{process_running, Api, Kind, SegmentParams, SegmentWriter};
    use syncspy_test_support::{rec, TempDir};

    fn params(pid: u32, session: u64, ring: u32) -> SegmentParams {
        let mut p = SegmentParams::new(pid, 1000 + pid as u64);
        p.session = session;
        p.ring_capacity = ring;
        p.site_capacity = 64;
        p.module_capacity = 16;
        p.cmdline = format!("prog{pid}\0--flag\0").into_bytes();
        p
    }

    #[test]
    fn a_watched_scan_of_an_unchanged_folder_touches_no_file_and_room_retries_the_refused() {
        let dir = TempDir::new("follow-unchanged");
        let limits = Limits {
            segments_per_user: 2,
            ..Limits::default()
        };
        let mut writers: Vec<SegmentWriter> = (0..40)
            .map(|i| SegmentWriter::create(dir.path(), &params(500 + i, 7, 16)).unwrap())
            .collect();
        std::fs::write(dir.path().join("syncspy-999-1"), vec![0x55u8; 9000]).unwrap();
        // No safety-net listing within the test, whatever the machine's speed.
        let mut f: Follower = Follower::new(dir.path(), None)
            .with_budget(limits)
            .with_listing_every(std::time::Duration::from_secs(3600));
        f.watch().unwrap();
        assert_eq!(f.scan().unwrap(), 2);
        assert_eq!(f.listings(), 1);
        assert_eq!(f.problems().len(), 1, "{:?}", f.problems());
        let after_first = f.files_touched();
        assert!(after_first >= 41, "{after_first}");
        // 38 refused, one bad file: nothing of them is looked at again, nor listed.
        for _ in 0..20 {
            assert_eq!(f.scan().unwrap(), 0);
        }
        assert_eq!(f.listings(), 1);
        assert_eq!(f.files_touched(), after_first);
        assert_eq!(f.problems().len(), 1);
        // A new file is found from inotify's report alone: one lstat (its user has no room).
        writers.push(SegmentWriter::create(dir.path(), &params(600, 7, 16)).unwrap());
        f.wait(std::time::Duration::from_secs(5));
        assert_eq!(f.scan().unwrap(), 0);
        assert_eq!(f.listings(), 1);
        assert_eq!(f.files_touched(), after_first + 1);
        // Room again: refused files are followed (the newest found first), without a listing.
        let gone = f.forget(|_| true);
        assert_eq!(gone.len(), 2);
        assert_eq!(f.scan().unwrap(), 2);
        assert_eq!(f.listings(), 1);
        assert!(f.files_touched() <= after_first + 1 + 4);
        let mut pids: Vec<u32> = f.processes().iter().map(|p| p.key().pid()).collect();
        pids.sort();
        assert_eq!(pids.len(), 2);
        assert!(pids.contains(&600), "{pids:?}");
        assert!(
            pids.iter()
                .all(|p| gone.iter().all(|g| g.key().pid() != *p)),
            "{pids:?}"
        );
        // Removed files are forgotten at the next listing (and the refused with them).
        drop(writers);
        for e in std::fs::read_dir(dir.path()).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
        let mut f = f.with_listing_every(std::time::Duration::ZERO);
        assert_eq!(f.scan().unwrap(), 0);
        assert_eq!(f.listings(), 2);
        assert!(f.seen.is_empty() && f.refused.is_empty());
    }

    #[test]
    fn a_watched_folder_removed_and_made_again_is_listed_at_every_scan() {
        let dir = TempDir::new("follow-remade");
        let sub = dir.path().join("segs");
        std::fs::create_dir(&sub).unwrap();
        let mut f: Follower =
            Follower::new(&sub, None).with_listing_every(std::time::Duration::from_secs(3600));
        f.watch().unwrap();
        assert_eq!(f.scan().unwrap(), 0);
        std::fs::remove_dir(&sub).unwrap();
        assert!(f.scan().is_err());
        std::fs::create_dir(&sub).unwrap();
        let _w = SegmentWriter::create(&sub, &params(41, 7, 16)).unwrap();
        // The old watch died with the folder: the new segment is found by a listing.
        assert_eq!(f.scan().unwrap(), 1);
        assert!(f.watch_fd().is_none());
    }

    #[test]
    fn follows_only_its_session_and_reports_a_bad_file_once() {
        let dir = TempDir::new("follow-session");
        let mine = SegmentWriter::create(dir.path(), &params(11, 7, 64)).unwrap();
        let theirs = SegmentWriter::create(dir.path(), &params(12, 8, 64)).unwrap();
        std::fs::write(dir.path().join("syncspy-13-14"), vec![0x55u8; 9000]).unwrap();
        std::fs::write(dir.path().join("unrelated-file"), b"hello").unwrap();
        mine.record(&rec(
            Kind::DeviceSync,
            Api::CudaDeviceSynchronize,
            100,
            0,
            0,
        ));
        theirs.record(&rec(
            Kind::DeviceSync,
            Api::CudaDeviceSynchronize,
            100,
            0,
            0,
        ));

        let mut f: Follower = Follower::new(dir.path(), Some(7));
        assert_eq!(f.scan().unwrap(), 1);
        assert_eq!(f.poll(), 1);
        assert_eq!(f.processes().len(), 1);
        assert_eq!(f.processes()[0].agg.pid(), 11);
        assert_eq!(f.processes()[0].agg.argv(), vec!["prog11", "--flag"]);
        assert_eq!(f.problems().len(), 1);
        assert!(f.problems()[0].path.ends_with("syncspy-13-14"));
        assert!(f.problems()[0].error.contains("not a syncspy segment"));
        assert_eq!(f.take_new_problems().len(), 1);

        // Rescans open nothing again and report nothing again.
        assert_eq!(f.scan().unwrap(), 0);
        assert_eq!(f.problems().len(), 1);
        assert_eq!(f.take_new_problems().len(), 0);

        // A descendant appearing later is picked up.
        let child = SegmentWriter::create(dir.path(), &params(15, 7, 64)).unwrap();
        child.record(&rec(Kind::StreamSync, Api::CudaStreamSynchronize, 5, 0, 0));
        assert_eq!(f.scan().unwrap(), 1);
        assert_eq!(f.poll(), 1);

        // Following every session sees all three valid segments.
        let mut all: Follower = Follower::new(dir.path(), None);
        assert_eq!(all.scan().unwrap(), 3);
    }

    #[test]
    fn ended_segments_are_removed_running_ones_kept() {
        let dir = TempDir::new("follow-remove");
        // Killed: its lock went with it, its state still says running.
        let gone = SegmentWriter::create(dir.path(), &params(11, 7, 16)).unwrap();
        gone.release_lock();
        let exited = SegmentWriter::create(dir.path(), &params(12, 7, 16)).unwrap();
        exited.mark_exited(3);
        exited.release_lock();
        // A process in another PID namespace: pid 1 here is another process, but its lock
        // says it runs.
        let far = SegmentWriter::create(dir.path(), &params(1, 7, 16)).unwrap();
        let me = std::process::id();
        let start = syncspy_abi::process_start_ticks(me).unwrap();
        let mut p = params(me, 7, 16);
        p.start_ticks = start;
        let alive = SegmentWriter::create(dir.path(), &p).unwrap();

        let mut f: Follower = Follower::new(dir.path(), Some(7));
        f.scan().unwrap();
        f.final_drain();
        let (removed, failed) = f.remove_ended_segments();
        assert!(failed.is_empty());
        assert_eq!(removed.len(), 2);
        assert!(!gone.path().exists());
        assert!(!exited.path().exists());
        assert!(alive.path().exists());
        assert!(far.path().exists());
        let life: Vec<_> = f
            .processes()
            .iter()
            .map(|p| (p.agg.pid(), p.agg.lifecycle()))
            .collect();
        use crate::aggregate::Lifecycle;
        assert!(life.contains(&(11, Lifecycle::Gone)));
        assert!(life.contains(&(12, Lifecycle::Exited(3))));
        assert!(life.contains(&(me, Lifecycle::Running)));
        assert!(life.contains(&(1, Lifecycle::Running)));
    }

    #[test]
    fn a_zombie_is_not_running() {
        let me = std::process::id();
        let start = syncspy_abi::process_start_ticks(me).unwrap();
        assert!(process_running(me, start));
        assert!(!process_running(me, start + 1));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start = syncspy_abi::process_start_ticks(pid);
        // Not reaped yet: a zombie once it has exited.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while start.is_some_and(|s| process_running(pid, s)) {
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
        child.wait().unwrap();
    }

    #[test]
    fn a_segment_truncated_while_followed_is_frozen_not_a_crash() {
        let dir = TempDir::new("follow-truncated");
        let w = SegmentWriter::create(dir.path(), &params(21, 7, 64)).unwrap();
        let site = w.intern_site(&[0x1000, 0x2000]).unwrap();
        for _ in 0..3 {
            w.record(&rec(
                Kind::StreamSync,
                Api::CudaStreamSynchronize,
                50,
                0,
                site,
            ));
        }
        let mut f: Follower = Follower::new(dir.path(), Some(7));
        f.scan().unwrap();
        assert_eq!(f.poll(), 3);
        assert!(f.processes()[0].reader.intact());

        // Someone truncates the file: reading the ring, the site table or the header past
        // the new end would fault (SIGBUS) and kill the follower.
        std::fs::OpenOptions::new()
            .write(true)
            .open(w.path())
            .unwrap()
            .set_len(4096)
            .unwrap();
        // The writer's own mapping now ends early too; it must not be touched again.
        w.leak();
        assert_eq!(f.poll(), 0);
        assert_eq!(f.final_drain(), 0);
        let p = &f.processes()[0];
        assert!(p.reader.frozen());
        assert_eq!(p.agg.delivered(), 3, "what was read before is kept");
        assert_eq!(p.agg.live().kind(Kind::StreamSync).count, 3);
        assert_eq!(p.agg.lifecycle(), crate::aggregate::Lifecycle::Gone);
        assert_eq!(p.reader.site(site), None);
        assert!(p.reader.modules().is_empty());
        let problems: Vec<String> = f.problems().iter().map(|p| p.to_string()).collect();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("truncated to 4096 bytes"),
            "{problems:?}"
        );
        // A report of it (which reads sites and modules to symbolize) is built as usual.
        let mut sym = crate::symbolize::Symbolizer::new();
        let r = crate::report::process_report(p, &mut sym, monotonic_ns());
        assert_eq!(r.kinds["stream_sync"].count, 3);
        assert_eq!(f.poll(), 0);
        assert_eq!(f.problems().len(), 1, "reported once");
    }

    #[test]
    fn fifos_and_links_named_like_segments_are_skipped_without_blocking() {
        let dir = TempDir::new("follow-fifo");
        let w = SegmentWriter::create(dir.path(), &params(31, 7, 64)).unwrap();
        w.record(&rec(Kind::DeviceSync, Api::CudaDeviceSynchronize, 9, 0, 0));
        let fifo = dir.path().join("syncspy-32-1");
        syncspy_test_support::mkfifo(&fifo);
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("syncspy-33-1")).unwrap();
        std::os::unix::fs::symlink(w.path(), dir.path().join("syncspy-34-1")).unwrap();
        let path = dir.path().to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut f: Follower = Follower::new(path, None);
            let n = f.scan().unwrap();
            let problems: Vec<String> = f.problems().iter().map(|p| p.to_string()).collect();
            let _ = tx.send((n, f.poll(), problems));
        });
        let (n, polled, problems) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the scan blocked on the FIFO");
        assert_eq!((n, polled), (1, 1));
        assert_eq!(problems.len(), 3, "{problems:?}");
        let of = |name: &str| problems.iter().find(|p| p.contains(name)).unwrap().clone();
        assert!(of("syncspy-32-1").contains("a FIFO, not a regular file"));
        for link in ["syncspy-33-1", "syncspy-34-1"] {
            let p = of(link);
            assert!(p.contains("a symbolic link, not a regular file"), "{p}");
            assert!(!p.contains("passwd") && !p.contains("bytes"), "{p}");
        }
    }

    #[test]
    fn leases_are_taken_and_released_and_an_unlinked_file_is_noticed() {
        let dir = TempDir::new("follow-lease");
        let w = SegmentWriter::create(dir.path(), &params(41, 7, 16)).unwrap();
        w.mark_exited(0);
        let mut f: Follower = Follower::new(dir.path(), None).with_leases();
        f.watch().unwrap();
        f.scan().unwrap();
        let me = Owner::me();
        let lease = lifecycle::lease_path(w.path(), me).unwrap();
        assert!(f.processes()[0].leased() && lease.exists());
        assert!(!f.processes()[0].unlinked());
        // A new segment wakes `wait` at once (inotify), long before its timeout.
        let t0 = std::time::Instant::now();
        let w2 = SegmentWriter::create(dir.path(), &params(42, 7, 16)).unwrap();
        assert!(f.wait(std::time::Duration::from_secs(600)));
        assert!(t0.elapsed() < std::time::Duration::from_secs(300));
        assert_eq!(f.scan().unwrap(), 1);
        // Removed under the reader: noticed.
        std::fs::remove_file(w2.path()).unwrap();
        assert!(f.processes()[1].unlinked());
        // While another reader of the whole folder runs (pid 1 stands in for an agent), an
        // ended segment is handed over, not removed.
        let init = syncspy_abi::process_start_ticks(1).unwrap();
        let agent = dir.path().join(format!(".syncspy-reader-1-{init}"));
        std::fs::write(&agent, "all\n").unwrap();
        f.final_drain();
        let (removed, failed) = f.remove_ended_segments();
        assert!(removed.is_empty() && failed.is_empty());
        assert!(w.path().exists() && !lease.exists());
        std::fs::remove_file(&agent).unwrap();
        // Releasing the lease of an ended segment nobody else wants removes it.
        let (removed, failed) = f.remove_ended_segments();
        assert!(failed.is_empty());
        assert_eq!(removed, vec![w.path().to_path_buf()]);
        assert!(!lease.exists());
    }

    fn small_limits() -> Limits {
        Limits {
            segments_per_user: 2,
            records_per_user_step: 10,
            compact_after_ns: 0,
            ..Limits::default()
        }
    }

    #[test]
    fn a_user_over_their_cap_is_skipped_counted_and_followed_once_there_is_room() {
        let dir = TempDir::new("follow-cap");
        let ws: Vec<_> = (0..3)
            .map(|i| SegmentWriter::create(dir.path(), &params(51 + i, 7, 16)).unwrap())
            .collect();
        let mut f: Follower = Follower::new(dir.path(), None).with_budget(small_limits());
        assert_eq!(f.scan().unwrap(), 2);
        assert_eq!(f.dropped().segments, 1);
        // Rescans do not count the same file again.
        assert_eq!(f.scan().unwrap(), 0);
        assert_eq!(f.dropped().segments, 1);
        // One forgotten: the skipped one is followed at the next scan.
        let first = f.processes()[0].key();
        assert_eq!(f.forget(|p| p.key() == first).len(), 1);
        assert_eq!(f.scan().unwrap(), 1);
        assert_eq!(f.processes().len(), 2);
        let pids: Vec<u32> = f.processes().iter().map(|p| p.agg.pid()).collect();
        assert_eq!(pids.len(), 2);
        drop(ws);
        // Without a budget every segment is followed.
        let mut all: Follower = Follower::new(dir.path(), None);
        assert_eq!(all.scan().unwrap(), 3);
        assert_eq!(all.dropped(), Dropped::default());
    }

    #[test]
    fn one_users_rings_share_a_work_budget_per_poll_and_ended_ones_are_compacted() {
        let dir = TempDir::new("follow-work");
        let a = SegmentWriter::create(dir.path(), &params(61, 7, 64)).unwrap();
        let b = SegmentWriter::create(dir.path(), &params(62, 7, 64)).unwrap();
        for w in [&a, &b] {
            for _ in 0..8 {
                w.record(&rec(Kind::StreamSync, Api::CudaStreamSynchronize, 5, 0, 0));
            }
        }
        let mut f: Follower = Follower::new(dir.path(), None).with_budget(small_limits());
        f.scan().unwrap();
        // 16 records waiting, 10 a poll for their user.
        assert_eq!(f.poll(), 10);
        assert_eq!(f.dropped().deferred_polls, 1);
        assert_eq!(f.poll(), 6);
        let got: u64 = f.processes().iter().map(|p| p.agg.delivered()).sum();
        assert_eq!(got, 16);
        assert!(f.processes().iter().all(|p| !p.agg.compacted()));
        // Ended: compacted at the next poll (no grace here), once.
        a.mark_exited(0);
        f.poll();
        f.poll();
        assert_eq!(f.dropped().compacted, 1);
        let ended = f.processes().iter().find(|p| p.agg.pid() == 61).unwrap();
        assert!(ended.agg.compacted());
        assert_eq!(ended.agg.live().kind(Kind::StreamSync).count, 8);
    }

    #[test]
    fn missing_folder_is_an_error_not_a_panic() {
        let mut f: Follower = Follower::new("/nonexistent/syncspy-test-dir", None);
        assert!(f.scan().is_err());
        assert_eq!(f.poll(), 0);
    }
}
