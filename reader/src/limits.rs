//! What a reader spends on the segments it follows, bounded whatever they say: a segment is
//! written by whoever runs the process, and on a shared host that may be anyone.
//!
//! - **Per segment**: at most [`Limits::modules_per_segment`] modules of its module map are
//!   used (the rest dropped and counted); call-site histograms are already capped by
//!   `aggregate::MAX_SITE_KEYS` and frames by the ABI (`sites::MAX_FRAMES`).
//! - **Per user** (the owner uid of the segment file) **and in total**: the segments
//!   followed and their estimated heap bytes ([`ProcessAgg::heap_bytes`]). A user at their
//!   cap gets no new segment followed (skipped and counted, retried when the user is under
//!   it again), and the histograms their segments would add are refused (counted in the
//!   processes' `refused_site_records`, figures from the header stay exact). Over the total,
//!   a user still gets up to a fair share (the total over the users present, at least
//!   [`Limits::reserve_per_user`]), so one user's flood never takes another's room. Readers
//!   of several folders in one process (the agent's own and its pods') share one [`Pool`]:
//!   a user's segments count once over all of them, wherever they put them.
//! - **Per step**: each user's segments get at most [`Limits::records_per_user_step`]
//!   records drained per poll between them, starting where the last poll stopped, so one
//!   user's busy rings never delay another user's.
//! - **Ended processes** are compacted soon after their final drain
//!   ([`ProcessAgg::compact`]): a few top sites kept, histograms at two significant
//!   digits, the attribution buffers freed; their totals come from the header and stay exact.
//!
//! Everything dropped is counted in [`Dropped`], which the agent serves as
//! `syncspy_reader_dropped_total{what=...}`.
//!
//! [`ProcessAgg::heap_bytes`]: crate::aggregate::ProcessAgg::heap_bytes
//! [`ProcessAgg::compact`]: crate::aggregate::ProcessAgg::compact

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The budgets of one reader. `Limits::default()` are the documented defaults; each can be
/// set through the environment (see [`Limits::from_env`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Segments followed at once per user (`SYNCSPY_READER_SEGMENTS_PER_USER`).
    pub segments_per_user: usize,
    /// Estimated heap bytes per user (`SYNCSPY_READER_MB_PER_USER`, in MiB).
    pub bytes_per_user: u64,
    /// Segments followed at once over every user (`SYNCSPY_READER_SEGMENTS`).
    pub segments_total: usize,
    /// Estimated heap bytes over every user (`SYNCSPY_READER_MB`, in MiB).
    pub bytes_total: u64,
    /// Segments any user may still have followed when the total is reached.
    pub reserve_per_user: usize,
    /// Records drained per poll from one user's rings together.
    pub records_per_user_step: usize,
    /// Modules of one segment's map a reader uses to symbolize.
    pub modules_per_segment: usize,
    /// How long after its end an ended process is compacted (ns).
    pub compact_after_ns: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            segments_per_user: 256,
            bytes_per_user: 256 << 20,
            segments_total: 2048,
            bytes_total: 1 << 30,
            reserve_per_user: 16,
            records_per_user_step: 1 << 20,
            modules_per_segment: 2048,
            compact_after_ns: 2_000_000_000,
        }
    }
}

impl Limits {
    /// The defaults, with what the environment sets; a value that is not a positive whole
    /// number is ignored with a warning on standard error.
    pub fn from_env() -> Limits {
        Limits::from_vars(
            |k| std::env::var(k).ok(),
            |w| eprintln!("syncspy: warning: {w}"),
        )
    }

    /// Like `from_env`, reading variables through `var` and saying what it ignored to `warn`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>, mut warn: impl FnMut(String)) -> Limits {
        let mut num = |k: &str| {
            let v = var(k)?;
            match v.trim().parse::<u64>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    warn(format!(
                        "{k}={v:?} is not a positive whole number: the default is used"
                    ));
                    None
                }
            }
        };
        let mut l = Limits::default();
        if let Some(n) = num("SYNCSPY_READER_SEGMENTS_PER_USER") {
            l.segments_per_user = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(n) = num("SYNCSPY_READER_MB_PER_USER") {
            l.bytes_per_user = n.saturating_mul(1 << 20);
        }
        if let Some(n) = num("SYNCSPY_READER_SEGMENTS") {
            l.segments_total = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(n) = num("SYNCSPY_READER_MB") {
            l.bytes_total = n.saturating_mul(1 << 20);
        }
        l
    }
}

/// What a reader dropped to stay within its budgets, since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// New segments not followed: their user was at their cap of segments or bytes.
    pub segments: u64,
    /// Histograms (of a kind, an API or a call site) not made: their user was at their bytes
    /// cap. The records still count in the header's exact totals.
    pub histograms: u64,
    /// Modules of a segment's map beyond `modules_per_segment`, counted once per segment.
    pub modules: u64,
    /// Polls that left records in a user's rings for the next one (their work budget for
    /// the step was spent).
    pub deferred_polls: u64,
    /// Ended processes compacted to their totals and top sites.
    pub compacted: u64,
}

/// One line for a person: what the budgets left out (the agent's log, the monitor's
/// problems line).
impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} not followed, {} not made, {} not used, {} deferred",
            crate::plural::count(self.segments, "segment", "segments"),
            crate::plural::count(self.histograms, "histogram", "histograms"),
            crate::plural::count(self.modules, "module", "modules"),
            crate::plural::count(self.deferred_polls, "poll", "polls")
        )
    }
}

impl Dropped {
    /// `(what, count)` pairs, as the metric's label values.
    pub fn pairs(&self) -> [(&'static str, u64); 5] {
        [
            ("segment", self.segments),
            ("histogram", self.histograms),
            ("module", self.modules),
            ("deferred_poll", self.deferred_polls),
            ("compacted", self.compacted),
        ]
    }

    /// Adds another reader's counts (the agent's pod folders).
    pub fn add(&mut self, o: &Dropped) {
        self.segments = self.segments.saturating_add(o.segments);
        self.histograms = self.histograms.saturating_add(o.histograms);
        self.modules = self.modules.saturating_add(o.modules);
        self.deferred_polls = self.deferred_polls.saturating_add(o.deferred_polls);
        self.compacted = self.compacted.saturating_add(o.compacted);
    }
}

/// Heap bytes one user's aggregates may still take before the next recount: shared by that
/// user's followed segments (in every reader of a pool), charged as they make new histograms.
/// Each reader holds its own account per user over the user's one figure of bytes left, and
/// keeps what its segments charged since its last recount, so another reader's recount
/// counts them.
#[derive(Debug)]
pub struct Account {
    left: Arc<AtomicI64>,
    charged: AtomicU64,
    refused: AtomicU64,
}

impl Account {
    /// An account with `bytes` left.
    pub fn new(bytes: u64) -> Account {
        Account::over(Arc::new(AtomicI64::new(
            i64::try_from(bytes).unwrap_or(i64::MAX),
        )))
    }

    /// An account over a user's bytes left, shared with their other accounts.
    fn over(left: Arc<AtomicI64>) -> Account {
        Account {
            left,
            charged: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Takes `bytes` from what is left; `false` (and counted) when that is not enough.
    pub fn charge(&self, bytes: u64) -> bool {
        let b = i64::try_from(bytes).unwrap_or(i64::MAX);
        let ok = self
            .left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
                (l >= b).then(|| l - b)
            })
            .is_ok();
        if ok {
            self.charged.fetch_add(bytes, Ordering::Relaxed);
        } else {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// Bytes left.
    pub fn left(&self) -> u64 {
        u64::try_from(self.left.load(Ordering::Relaxed)).unwrap_or(0)
    }

    fn take_refused(&self) -> u64 {
        self.refused.swap(0, Ordering::Relaxed)
    }
}

fn set_left(left: &AtomicI64, bytes: u64) {
    left.store(i64::try_from(bytes).unwrap_or(i64::MAX), Ordering::Relaxed);
}

/// One user's use over every reader of the pool, as of the last recount (and the admissions
/// since).
#[derive(Debug)]
struct User {
    segments: usize,
    bytes: u64,
    /// What the user's accounts may still charge, together.
    left: Arc<AtomicI64>,
}

/// One reader's use per user, `(segments, bytes)`: as of its last recount, with the segments
/// it admitted since; and its accounts, one per user.
#[derive(Debug, Default)]
struct Part {
    use_: HashMap<u32, (usize, u64)>,
    accounts: HashMap<u32, Arc<Account>>,
}

/// Budgets that several readers of one process hold together: the agent follows its own
/// folder and up to 256 pods' folders, each with a reader of its own, and a user's segments
/// (or the node's total) count once over all of them, however the user spreads them.
/// Cloning shares it; [`Pool::budget`] gives a reader its part.
#[derive(Clone, Debug)]
pub struct Pool(Arc<Mutex<Shared>>);

/// What the readers of a pool spend together.
#[derive(Debug)]
struct Shared {
    limits: Limits,
    /// The id the next reader's part gets.
    next_part: u64,
    /// Each reader's part.
    parts: HashMap<u64, Part>,
    /// The sums over the parts, per user.
    users: HashMap<u32, User>,
    segments: usize,
    bytes: u64,
}

impl Pool {
    pub fn new(limits: Limits) -> Pool {
        Pool(Arc::new(Mutex::new(Shared {
            limits,
            next_part: 0,
            parts: HashMap::new(),
            users: HashMap::new(),
            segments: 0,
            bytes: 0,
        })))
    }

    /// A reader's budget: its admissions and recounts count in this pool.
    pub fn budget(&self) -> Budget {
        let (limits, part) = {
            let mut s = self.lock();
            let part = s.next_part;
            s.next_part += 1;
            s.parts.insert(part, Part::default());
            (s.limits, part)
        };
        Budget {
            limits,
            pool: self.clone(),
            part,
            dropped: Dropped::default(),
            work: HashMap::new(),
            deferred: HashMap::new(),
        }
    }

    pub fn limits(&self) -> Limits {
        self.lock().limits
    }

    /// Segments followed over every reader: `(total, of uid)`.
    pub fn segments(&self, uid: u32) -> (usize, usize) {
        let s = self.lock();
        (s.segments, s.users.get(&uid).map_or(0, |u| u.segments))
    }

    /// Estimated heap bytes over every reader, as of their last recounts: `(total, of uid)`.
    pub fn bytes(&self, uid: u32) -> (u64, u64) {
        let s = self.lock();
        (s.bytes, s.users.get(&uid).map_or(0, |u| u.bytes))
    }

    /// The pool's users, with their segments and estimated bytes.
    pub fn users(&self) -> Vec<(u32, usize, u64)> {
        let s = self.lock();
        let mut v: Vec<(u32, usize, u64)> = s
            .users
            .iter()
            .map(|(uid, u)| (*uid, u.segments, u.bytes))
            .collect();
        v.sort_unstable();
        v
    }

    /// The readers share one thread in the agent; a poisoned lock only means a reader
    /// panicked mid-update, and the next recount sets every figure again.
    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Shared {
    /// The share of the total any one user may hold once the total is reached.
    fn fair_segments(&self, uid: u32) -> usize {
        let users = self.users.len() + usize::from(!self.users.contains_key(&uid));
        (self.limits.segments_total / users.max(1)).max(self.limits.reserve_per_user)
    }

    fn fair_bytes(&self, uid: u32) -> u64 {
        let users = self.users.len() + usize::from(!self.users.contains_key(&uid));
        self.limits.bytes_total / users.max(1) as u64
    }

    fn admits(&self, uid: u32) -> bool {
        let (mine, my_bytes) = self
            .users
            .get(&uid)
            .map_or((0, 0), |u| (u.segments, u.bytes));
        if mine >= self.limits.segments_per_user || my_bytes >= self.limits.bytes_per_user {
            return false;
        }
        let over_segments = self.segments >= self.limits.segments_total;
        let over_bytes = self.bytes >= self.limits.bytes_total;
        (!over_segments || mine < self.fair_segments(uid))
            && (!over_bytes || my_bytes < self.fair_bytes(uid))
    }

    /// The user's figures; a newcomer may charge up to their cap, within what is left of
    /// the total (until the next recount sets their share).
    fn user(&mut self, uid: u32) -> &mut User {
        let first =
            (self.limits.bytes_per_user).min(self.limits.bytes_total.saturating_sub(self.bytes));
        self.users.entry(uid).or_insert_with(|| User {
            segments: 0,
            bytes: 0,
            left: Arc::new(AtomicI64::new(i64::try_from(first).unwrap_or(i64::MAX))),
        })
    }

    /// Sums the parts again and sets what each user may still charge: their cap less their
    /// use, and over the total at most their fair share less their use. A part's use is its
    /// last recount and what its accounts charged since.
    fn resum(&mut self) {
        let mut per: HashMap<u32, (usize, u64)> = HashMap::new();
        for part in self.parts.values() {
            for (uid, (n, b)) in &part.use_ {
                let charged = part
                    .accounts
                    .get(uid)
                    .map_or(0, |a| a.charged.load(Ordering::Relaxed));
                let e = per.entry(*uid).or_default();
                e.0 += n;
                e.1 = e.1.saturating_add(*b).saturating_add(charged);
            }
        }
        // Users with nothing followed anywhere are dropped (their accounts die with their
        // segments).
        self.users.retain(|uid, _| per.contains_key(uid));
        self.segments = per.values().map(|p| p.0).sum();
        self.bytes = per.values().map(|p| p.1).fold(0, u64::saturating_add);
        let n = per.len().max(1) as u64;
        let over = self.bytes >= self.limits.bytes_total;
        let room = self.limits.bytes_total.saturating_sub(self.bytes);
        let (per_user, total) = (self.limits.bytes_per_user, self.limits.bytes_total);
        for (uid, (segments, bytes)) in per {
            let u = self.user(uid);
            u.segments = segments;
            u.bytes = bytes;
            let cap = if over {
                per_user.min(total / n)
            } else {
                per_user.min(bytes.saturating_add(room))
            };
            set_left(&u.left, cap.saturating_sub(bytes));
        }
    }
}

/// One reader's budget: its part of a [`Pool`] (its own, for a reader alone), and what it
/// dropped and drained itself.
#[derive(Debug)]
pub struct Budget {
    limits: Limits,
    pool: Pool,
    /// This reader's part in the pool.
    part: u64,
    dropped: Dropped,
    /// Records drained this poll, per user.
    work: HashMap<u32, usize>,
    deferred: HashMap<u32, bool>,
}

/// A reader let go (a pod's folder closed): its segments no longer count.
impl Drop for Budget {
    fn drop(&mut self) {
        let mut s = self.pool.lock();
        s.parts.remove(&self.part);
        s.resum();
    }
}

impl Budget {
    /// A budget of its own, shared with no other reader.
    pub fn new(limits: Limits) -> Budget {
        Pool::new(limits).budget()
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn dropped(&self) -> Dropped {
        self.dropped
    }

    /// The pool this budget is part of.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Segments followed over the pool, as of the last admission or recount:
    /// `(total, of uid)`.
    pub fn segments(&self, uid: u32) -> (usize, usize) {
        self.pool.segments(uid)
    }

    /// Estimated heap bytes over the pool, as of the last recount: `(total, of uid)`.
    pub fn bytes(&self, uid: u32) -> (u64, u64) {
        self.pool.bytes(uid)
    }

    /// Whether a new segment of `uid` may be followed now, over every reader of the pool.
    /// Does not count a refusal (the caller counts each file once, with
    /// [`Budget::refused`]).
    pub fn admits(&self, uid: u32) -> bool {
        self.pool.lock().admits(uid)
    }

    /// Counts a segment of `uid` as followed (until the next recount), and hands back the
    /// account its aggregate charges: one per user over the pool.
    pub fn admit(&mut self, uid: u32) -> Arc<Account> {
        let mut s = self.pool.lock();
        s.segments += 1;
        let u = s.user(uid);
        u.segments += 1;
        let left = Arc::clone(&u.left);
        let part = s.parts.entry(self.part).or_default();
        part.use_.entry(uid).or_default().0 += 1;
        Arc::clone(
            part.accounts
                .entry(uid)
                .or_insert_with(|| Arc::new(Account::over(left))),
        )
    }

    /// Counts a segment not followed for its user's budget.
    pub fn refused(&mut self) {
        self.dropped.segments = self.dropped.segments.saturating_add(1);
    }

    /// Counts modules dropped from one segment's map.
    pub fn modules_dropped(&mut self, n: u64) {
        self.dropped.modules = self.dropped.modules.saturating_add(n);
    }

    /// Counts a compacted process.
    pub fn compacted(&mut self) {
        self.dropped.compacted = self.dropped.compacted.saturating_add(1);
    }

    /// Recounts this reader's use from its followed segments, `(uid, estimated heap bytes)`
    /// each, and sets what each user's account has left over the pool (see `Shared::resum`).
    pub fn recount(&mut self, followed: impl IntoIterator<Item = (u32, u64)>) {
        let mut per: HashMap<u32, (usize, u64)> = HashMap::new();
        for (uid, bytes) in followed {
            let e = per.entry(uid).or_default();
            e.0 += 1;
            e.1 = e.1.saturating_add(bytes);
        }
        let refused = {
            let mut s = self.pool.lock();
            let part = s.parts.entry(self.part).or_default();
            // What the accounts charged is in the estimates now; accounts of users with no
            // segment here any more are let go (their segments hold them until forgotten).
            part.accounts.retain(|uid, _| per.contains_key(uid));
            let refused = part
                .accounts
                .values()
                .map(|a| {
                    a.charged.store(0, Ordering::Relaxed);
                    a.take_refused()
                })
                .fold(0, u64::saturating_add);
            part.use_ = per;
            s.resum();
            refused
        };
        self.dropped.histograms = self.dropped.histograms.saturating_add(refused);
    }

    /// Starts a poll: every user's work budget is whole again.
    pub fn begin_poll(&mut self) {
        self.work.clear();
        self.deferred.clear();
    }

    /// Records one segment of `uid` may take in this poll (at most `cap`).
    pub fn work_left(&self, uid: u32, cap: usize) -> usize {
        let used = self.work.get(&uid).copied().unwrap_or(0);
        self.limits
            .records_per_user_step
            .saturating_sub(used)
            .min(cap)
    }

    /// Charges `n` records drained to `uid`'s work budget; `more` says the ring still held
    /// records (counted once per user and poll when the budget is spent).
    pub fn worked(&mut self, uid: u32, n: u64, more: bool) {
        let w = self.work.entry(uid).or_default();
        *w = w.saturating_add(usize::try_from(n).unwrap_or(usize::MAX));
        if more && *w >= self.limits.records_per_user_step && !self.deferred.contains_key(&uid) {
            self.deferred.insert(uid, true);
            self.dropped.deferred_polls = self.dropped.deferred_polls.saturating_add(1);
        }
    }
}

/// The first `max` modules of a segment's map, and how many were dropped.
pub fn bounded_modules<T>(mut modules: Vec<T>, max: usize) -> (Vec<T>, u64) {
    let dropped = modules.len().saturating_sub(max) as u64;
    modules.truncate(max);
    (modules, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Limits {
        Limits {
            segments_per_user: 4,
            bytes_per_user: 1000,
            segments_total: 6,
            bytes_total: 1500,
            reserve_per_user: 2,
            records_per_user_step: 100,
            modules_per_segment: 3,
            compact_after_ns: 0,
        }
    }

    #[test]
    fn a_user_at_their_cap_is_refused_and_another_user_is_not() {
        let mut b = Budget::new(small());
        for _ in 0..4 {
            assert!(b.admits(1000));
            b.admit(1000);
        }
        assert!(!b.admits(1000), "the fifth segment of one user");
        b.refused();
        assert!(b.admits(0), "root is not held back by user 1000");
        b.admit(0);
        assert_eq!(b.segments(1000), (5, 4));
        assert_eq!(b.dropped().segments, 1);
        // Ended segments forgotten: the recount frees the room.
        b.recount([(1000, 10), (0, 10)]);
        assert_eq!(b.segments(1000), (2, 1));
        assert!(b.admits(1000));
    }

    #[test]
    fn over_the_total_each_user_keeps_a_fair_share() {
        let mut l = small();
        l.segments_per_user = 100;
        let mut b = Budget::new(l);
        for _ in 0..6 {
            b.admit(1000);
        }
        // The total (6) is reached by one user: they get no more, a newcomer still does.
        assert!(!b.admits(1000));
        assert!(b.admits(0));
        b.admit(0);
        assert!(b.admits(0), "root holds 1 of a fair share of 3");
        b.admit(0);
        b.admit(0);
        assert!(!b.admits(0), "at the fair share (6 / 2 users)");
        // Nobody goes below the reserve, however many users there are.
        let mut l = small();
        l.segments_total = 1;
        let mut b = Budget::new(l);
        b.admit(1);
        assert!(b.admits(1) && b.admits(2));
    }

    #[test]
    fn a_users_bytes_are_capped_by_their_account() {
        let mut b = Budget::new(small());
        let acc = b.admit(1000);
        assert!(acc.charge(600));
        assert!(acc.charge(400));
        assert!(!acc.charge(1), "the user's 1000 bytes are spent");
        // The recount sees 1000 bytes used: no new segment, nothing left to charge.
        b.recount([(1000, 1000)]);
        assert_eq!(b.dropped().histograms, 1);
        assert!(!b.admits(1000));
        assert_eq!(acc.left(), 0);
        // Another user gets what is left of the total (1500 - 1000).
        let other = b.admit(0);
        b.recount([(1000, 1000), (0, 0)]);
        assert_eq!(other.left(), 500);
        assert!(other.charge(500) && !other.charge(1));
        // Over the total, each user is cut to a fair share: 750 each.
        b.recount([(1000, 1000), (0, 600)]);
        assert_eq!(acc.left(), 0);
        assert_eq!(other.left(), 150);
        // Once the first user's segments are gone, their account is dropped and the other
        // user may grow to their own cap.
        b.recount([(0, 600)]);
        assert_eq!(other.left(), 400);
        assert!(b.admits(1000));
    }

    #[test]
    fn readers_of_one_pool_count_a_users_segments_and_bytes_together() {
        let pool = Pool::new(small());
        let mut folders: Vec<Budget> = (0..3).map(|_| pool.budget()).collect();
        // One user spreads segments over three folders: 4 in all, whichever folder.
        let mut admitted = 0;
        for i in 0..12 {
            let b = &mut folders[i % 3];
            if b.admits(1000) {
                b.admit(1000);
                admitted += 1;
            } else {
                b.refused();
            }
        }
        assert_eq!(admitted, 4, "the per-user cap holds over the folders");
        assert_eq!(pool.segments(1000), (4, 4));
        // Each folder recounts its own part; the sums stay over all of them.
        folders[0].recount([(1000, 400), (1000, 400)]);
        folders[1].recount([(1000, 100)]);
        assert_eq!(
            pool.bytes(1000),
            (900, 900),
            "folder 2 counts its admission only"
        );
        assert_eq!(pool.segments(1000), (4, 4));
        folders[2].recount([(1000, 150)]);
        assert_eq!(pool.bytes(1000), (1050, 1050));
        assert_eq!(pool.segments(1000), (4, 4));
        // Their bytes too: the account is one over the folders, 1000 less 1050 used.
        let acc = folders[1].admit(1000);
        assert_eq!(acc.left(), 0);
        assert!(!acc.charge(1));
        // Another user gets the rest of the total, whichever folder theirs are in.
        let root = folders[2].admit(0);
        folders[2].recount([(1000, 150), (0, 0)]);
        assert_eq!(root.left(), 1500 - 1050);
        // What each folder refused is its own, so the sum over folders counts each once.
        let refused: u64 = folders.iter().map(|b| b.dropped().segments).sum();
        assert_eq!(refused, 8);
        // A folder let go (a pod's, closed): its 2 segments and 800 bytes no longer count.
        assert_eq!(pool.segments(1000), (6, 5));
        folders.remove(0);
        assert_eq!(pool.segments(1000), (4, 3));
        assert_eq!(pool.bytes(1000), (250, 250));
        assert!(folders[0].admits(1000));
    }

    #[test]
    fn what_one_folder_charged_is_not_given_back_by_another_folders_recount() {
        let pool = Pool::new(small());
        let (mut a, mut b) = (pool.budget(), pool.budget());
        let in_a = a.admit(1000);
        let in_b = b.admit(1000);
        assert!(in_a.charge(700), "a's segment makes its histograms");
        // b recounts before a does: a's 700 bytes still count (1000 - 700 left).
        b.recount([(1000, 0)]);
        assert_eq!(in_b.left(), 300);
        assert!(!in_b.charge(301) && in_b.charge(300));
        // a's recount sees its estimate; b's charge is still counted.
        a.recount([(1000, 700)]);
        assert_eq!(in_a.left(), 0);
        b.recount([(1000, 300)]);
        assert_eq!((in_a.left(), pool.bytes(1000)), (0, (1000, 1000)));
        // The refusal is the folder's whose segment was refused.
        assert_eq!((a.dropped().histograms, b.dropped().histograms), (0, 1));
    }

    #[test]
    fn over_the_total_of_a_pool_each_user_keeps_a_fair_share_in_any_folder() {
        let mut l = small();
        l.segments_per_user = 100;
        let pool = Pool::new(l);
        let mut a = pool.budget();
        let mut b = pool.budget();
        for _ in 0..3 {
            a.admit(1000);
            b.admit(1000);
        }
        // The total (6) is reached by one user over two folders.
        assert!(!a.admits(1000) && !b.admits(1000));
        assert!(
            a.admits(0) && b.admits(0),
            "a newcomer still gets a fair share"
        );
    }

    #[test]
    fn work_is_budgeted_per_user_and_poll() {
        let mut b = Budget::new(small());
        b.begin_poll();
        assert_eq!(b.work_left(1000, 1 << 20), 100);
        b.worked(1000, 70, false);
        assert_eq!(b.work_left(1000, 1 << 20), 30);
        assert_eq!(b.work_left(1000, 10), 10);
        b.worked(1000, 30, true);
        b.worked(1000, 0, true);
        assert_eq!(b.work_left(1000, 1 << 20), 0);
        assert_eq!(b.work_left(0, 1 << 20), 100, "root's budget is its own");
        assert_eq!(b.dropped().deferred_polls, 1, "once per user and poll");
        b.begin_poll();
        assert_eq!(b.work_left(1000, 1 << 20), 100);
    }

    #[test]
    fn modules_beyond_the_cap_are_dropped_and_counted() {
        let (kept, dropped) = bounded_modules((0..10).collect::<Vec<u32>>(), 3);
        assert_eq!((kept, dropped), (vec![0, 1, 2], 7));
        let (kept, dropped) = bounded_modules(vec![1u8], 3);
        assert_eq!((kept.len(), dropped), (1, 0));
    }

    #[test]
    fn limits_come_from_the_environment_and_bad_values_are_ignored() {
        let env = |k: &str| match k {
            "SYNCSPY_READER_SEGMENTS_PER_USER" => Some("32".to_string()),
            "SYNCSPY_READER_MB" => Some("0".to_string()),
            "SYNCSPY_READER_MB_PER_USER" => Some("x".to_string()),
            _ => None,
        };
        let mut warned = Vec::new();
        let l = Limits::from_vars(env, |w| warned.push(w));
        assert_eq!(
            warned,
            [
                "SYNCSPY_READER_MB_PER_USER=\"x\" is not a positive whole number: the default is used",
                "SYNCSPY_READER_MB=\"0\" is not a positive whole number: the default is used",
            ]
        );
        assert_eq!(l.segments_per_user, 32);
        assert_eq!(l.bytes_total, Limits::default().bytes_total);
        assert_eq!(l.bytes_per_user, Limits::default().bytes_per_user);
    }
}
