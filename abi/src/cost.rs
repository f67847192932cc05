//! The cost part of the header (ABI 1.9): the library's budget for its own time, and the
//! detail it shed to stay within it.
//!
//! The library times its own work in the calls it records (`Live::overhead_ns`). Past its
//! budget (a share of the process's wall time, `SYNCSPY_BUDGET`, default 1%) it sheds detail in
//! a fixed order, one level at a time, and takes it back when its cost has fallen well under
//! the budget:
//! 1. call-site stacks (events are recorded with no site);
//! 2. and GPU idle gap records (the gaps' totals stay exact);
//! 3. and the per-event records of the ring (every total stays exact: counts, time, bytes per
//!    kind and API).
//!
//! What it shed is counted here, so that readers say it. Looks at other threads' Python
//! frames (a `host_wait`'s line, the line a stall was waited on by) have a budget of their
//! own; the looks it skipped are counted here too.
//!
//! Written by the library (Relaxed stores and `fetch_add`), read Relaxed by readers.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Nothing shed.
pub const SHED_NONE: u32 = 0;
/// Call-site stacks shed.
pub const SHED_STACKS: u32 = 1;
/// Stacks and GPU idle gap records shed.
pub const SHED_GAPS: u32 = 2;
/// Stacks, gap records and per-event records shed: totals only.
pub const SHED_RECORDS: u32 = 3;

/// The cost part of the header, appended at ABI 1.9.
#[repr(C)]
#[derive(Default)]
pub struct CostLive {
    /// The budget in parts per million of the process's wall time (10,000 is 1%); 0: none.
    pub budget_ppm: AtomicU32,
    /// What is shed now: `SHED_NONE` to `SHED_RECORDS`.
    pub level: AtomicU32,
    /// Times the level rose.
    pub raised: AtomicU64,
    /// CLOCK_MONOTONIC ns when shedding last began (from `SHED_NONE`; 0: never).
    pub shed_since_ns: AtomicU64,
    /// Recorded events whose call-site stack was not taken.
    pub stacks_shed: AtomicU64,
    /// GPU idle gaps not written to the ring (in the totals).
    pub gaps_shed: AtomicU64,
    /// Events not written to the ring (in the totals).
    pub records_shed: AtomicU64,
    /// Looks at another thread's Python frames skipped, their own budget spent or another
    /// thread looking for the same purpose: waits that a host function ended not recorded,
    /// stalls not named at the line that waited for them.
    pub looks_skipped: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<CostLive>() == 56);

/// End of the cost part in the header: a segment whose `header_size` reaches it has one.
pub const COST_END: usize = 7344;

/// The library's own time by part (ABI 1.11), appended after the cost part: what share of
/// `Live::overhead_ns` a part took, so that a reader can say where the time went.
#[repr(C)]
#[derive(Default)]
pub struct OwnLive {
    /// The host-wait machinery: the library's work around the program's host functions
    /// (the looks at the waiting thread before and after each, the hand-off) and the whole
    /// CPU time of its thread that watches a sleeping waiter for its wake. It is outside the
    /// 1% budget (the looks have a budget of their own), and part of `overhead_ns`.
    pub host_wait_ns: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<OwnLive>() == 8);

/// End of the own-time part: a segment whose `header_size` reaches it has one.
pub const OWN_END: usize = 7352;

impl OwnLive {
    /// The host-wait machinery's time so far.
    pub fn host_wait_ns(&self) -> u64 {
        self.host_wait_ns.load(Ordering::Relaxed)
    }
}

/// A reader's copy of the cost part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CostStatus {
    pub budget_ppm: u32,
    pub level: u32,
    pub raised: u64,
    pub shed_since_ns: u64,
    pub stacks_shed: u64,
    pub gaps_shed: u64,
    pub records_shed: u64,
    pub looks_skipped: u64,
}

impl CostStatus {
    /// Whether any detail was ever shed or any look skipped: what a reader has to say.
    pub fn anything_shed(&self) -> bool {
        self.raised > 0 || self.level > SHED_NONE || self.looks_skipped > 0
    }

    /// The name of what level `level` sheds (each level sheds the ones before it too): the
    /// report's `shedding` and every view's word for it.
    pub fn level_key(level: u32) -> &'static str {
        match level {
            SHED_NONE => "none",
            SHED_STACKS => "stacks",
            SHED_GAPS => "gap_records",
            _ => "records",
        }
    }
}

impl CostLive {
    /// The reader's copy.
    pub fn status(&self) -> CostStatus {
        let r = Ordering::Relaxed;
        CostStatus {
            budget_ppm: self.budget_ppm.load(r),
            level: self.level.load(r),
            raised: self.raised.load(r),
            shed_since_ns: self.shed_since_ns.load(r),
            stacks_shed: self.stacks_shed.load(r),
            gaps_shed: self.gaps_shed.load(r),
            records_shed: self.records_shed.load(r),
            looks_skipped: self.looks_skipped.load(r),
        }
    }
}
