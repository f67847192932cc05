//! The part of the segment header that writers update while the process runs (`Live`, its
//! per-kind and per-API `Totals`) and the constants sizing it. A leaf under `layout` (whose
//! `Header` embeds it) and the tables that count into it (`ring`, `sites`, `modules`); its
//! items are re-exported from `layout`, their public path.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Slots of per-kind totals; indexed by `Kind as usize`.
pub const KIND_SLOTS: usize = 16;
/// Slots of per-API totals; indexed by `Api as usize`.
pub const API_SLOTS: usize = 64;
/// `Live::state` values (low 32 bits). For `STATE_EXITED` the high 32 bits hold the exit
/// status as passed to `exit`.
pub const STATE_RUNNING: u64 = 1;
pub const STATE_EXITED: u64 = 2;

/// Exact running totals for one kind or API. Writers `fetch_add` (Relaxed); readers load
/// (Relaxed). Exact even when a reader misses ring records.
#[repr(C)]
#[derive(Default)]
pub struct Totals {
    pub count: AtomicU64,
    pub total_ns: AtomicU64,
    pub bytes: AtomicU64,
    /// Largest single duration, maintained with `fetch_max`.
    pub max_ns: AtomicU64,
}

impl Totals {
    #[inline]
    pub fn add(&self, duration_ns: u64, bytes: u64) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.total_ns.fetch_add(duration_ns, Ordering::Relaxed);
        if bytes != 0 {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        // A plain load first: most events are not a new maximum, and a load is far cheaper
        // than the read-modify-write.
        if duration_ns > self.max_ns.load(Ordering::Relaxed) {
            self.max_ns.fetch_max(duration_ns, Ordering::Relaxed);
        }
    }

    /// Counts a call that is not timed (a non-stalling call).
    #[inline]
    pub fn add_untimed(&self, bytes: u64) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if bytes != 0 {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    pub fn snapshot(&self) -> TotalsSnapshot {
        TotalsSnapshot {
            count: self.count.load(Ordering::Relaxed),
            total_ns: self.total_ns.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            max_ns: self.max_ns.load(Ordering::Relaxed),
        }
    }
}

/// A plain copy of `Totals`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TotalsSnapshot {
    pub count: u64,
    pub total_ns: u64,
    pub bytes: u64,
    pub max_ns: u64,
}

/// Fields updated while the process runs. Every field is an atomic; the comment on each says
/// who writes it and with which ordering.
#[repr(C)]
pub struct Live {
    /// Low 32 bits: `STATE_RUNNING` / `STATE_EXITED`; high 32: exit status. Written by the
    /// process (Release) at creation and from its exit handler.
    pub state: AtomicU64,
    /// CLOCK_MONOTONIC ns of the exit handler (0 while running).
    pub ended_ns: AtomicU64,
    /// Next ring sequence number to claim (`fetch_add`, Relaxed). Readers load it Acquire.
    /// Sequence `n` lives in slot `n % ring_capacity`. Range: `0..u64::MAX`.
    pub write_seq: AtomicU64,
    /// Unused (always 0): records written are `write_seq - events_dropped`
    /// ([`Live::written`]). Kept so the layout does not change.
    pub events_written: AtomicU64,
    /// Events that were counted in the totals but could not be written to the ring (slot
    /// still held by a stalled writer, or the segment not ready yet).
    pub events_dropped: AtomicU64,
    /// Call-site entries in use, and stacks that found no free entry.
    pub sites_used: AtomicU32,
    pub sites_dropped: AtomicU32,
    /// Module entries claimed (may exceed capacity; entries past it are dropped), and drops.
    pub modules_used: AtomicU32,
    pub modules_dropped: AtomicU32,
    /// Nanoseconds the library spent on its own work in recorded calls (classification,
    /// record write, stack capture): the instrumentation overhead. An estimate: after a
    /// thread's first 64 events, timed on one event in 8 and counted 8 times.
    pub overhead_ns: AtomicU64,
    /// Stacks unwound in full, and the nanoseconds spent finding call sites (unwinding,
    /// interning, and cache checks).
    pub stack_captures: AtomicU64,
    pub stack_ns: AtomicU64,
    /// Call sites found in the writer's per-thread stack cache without unwinding.
    pub stack_cache_hits: AtomicU64,
    /// Exact totals of recorded events per kind (`Kind as usize`).
    pub kinds: [Totals; KIND_SLOTS],
    /// Exact totals of recorded events per API (`Api as usize`).
    pub apis: [Totals; API_SLOTS],
    /// Calls that did not stall and were not recorded in the ring, per API: pinned or
    /// device-only async copies, `cudaFree(NULL)`, memsets on device memory.
    pub calls: [Totals; API_SLOTS],
}

impl Live {
    /// Records written to the ring, or being written: every claimed sequence number that was
    /// not dropped.
    pub fn written(&self) -> u64 {
        let dropped = self.events_dropped.load(Ordering::Relaxed);
        self.write_seq
            .load(Ordering::Acquire)
            .saturating_sub(dropped)
    }
}
