//! The collectives part of the header (ABI 1.8): the process's collective-communication calls
//! (NCCL), measured by the library always, whatever the GPU tracing mode.
//!
//! In data-parallel training every rank meets the others at each collective. A collective runs
//! on its rank's GPU from when that rank's stream reaches it until every rank has reached it
//! (and the data moved): the rank the others wait for spends the least time in them, the
//! others the time they waited. The library hooks the NCCL calls (`ncclAllReduce`,
//! `ncclBroadcast`, `ncclReduce`, `ncclAllGather`, `ncclReduceScatter`, `ncclSend`,
//! `ncclRecv`; a group's calls are measured together at its `ncclGroupEnd`), records a CUDA
//! event on the collective's stream before and after it, and reads the events once they are
//! done, from its own thread: their elapsed time is the collective's time on the GPU. That is
//! the clock-free measure that compares ranks on different nodes: per rank, the share of its
//! measured window spent in collectives (`gpu_ns / (last_ns - first_ns)`).
//!
//! Written by the library (Relaxed `fetch_add`/stores), read Relaxed by readers; `calls` is
//! bumped on the calling thread, everything else on the library's thread that reads the
//! events.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The collectives part of the header, appended at ABI 1.8.
#[repr(C)]
#[derive(Default)]
pub struct CollectiveLive {
    /// Collective calls the program made (each call of a group counts).
    pub calls: AtomicU64,
    /// Measurements completed: a collective, or a group's collectives on one stream.
    pub measured: AtomicU64,
    /// Their summed GPU time (event before to event after), waiting for other ranks included.
    pub gpu_ns: AtomicU64,
    /// The longest one.
    pub max_ns: AtomicU64,
    /// CLOCK_MONOTONIC ns at the call of the first measured collective (0: none yet).
    pub first_ns: AtomicU64,
    /// CLOCK_MONOTONIC ns when the latest measurement was read (its collective done by then).
    pub last_ns: AtomicU64,
    /// Calls not measured: every measurement slot busy, the stream capturing a CUDA graph,
    /// or an event call that failed.
    pub unmeasured: AtomicU64,
    /// The communicator of the latest measured collective: a hash of its `ncclUniqueId`
    /// (the same in every rank of it; 0 when the library did not see it created).
    pub comm_id: AtomicU64,
    /// This process's rank in that communicator, plus one, and its size (0: unknown; a
    /// zero-filled part says nothing).
    pub comm_rank_1: AtomicU32,
    pub comm_size: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<CollectiveLive>() == 72);

/// End of the collectives part in the header: a segment whose `header_size` reaches it has one.
pub const COLLECTIVES_END: usize = 7288;

/// A reader's copy of the collectives part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollectiveCalls {
    pub calls: u64,
    pub measured: u64,
    pub gpu_ns: u64,
    pub max_ns: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    pub unmeasured: u64,
    pub comm_id: u64,
    pub comm_rank: Option<u32>,
    pub comm_size: Option<u32>,
}

impl CollectiveCalls {
    /// The window the measurements cover: from the first measured collective's call to the
    /// latest measurement (0 before the first).
    pub fn window_ns(&self) -> u64 {
        if self.first_ns == 0 {
            return 0;
        }
        self.last_ns.saturating_sub(self.first_ns)
    }
}

impl CollectiveLive {
    /// Adds one measurement: `gpu_ns` of GPU time for a collective called at `called_ns`, read
    /// at `read_ns`.
    pub fn add_measured(&self, called_ns: u64, read_ns: u64, gpu_ns: u64) {
        // The first call time is set once (0 until then); later ones are never earlier.
        let _ = self.first_ns.compare_exchange(
            0,
            called_ns.max(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        self.gpu_ns.fetch_add(gpu_ns, Ordering::Relaxed);
        if gpu_ns > self.max_ns.load(Ordering::Relaxed) {
            self.max_ns.fetch_max(gpu_ns, Ordering::Relaxed);
        }
        self.last_ns.fetch_max(read_ns, Ordering::Relaxed);
        self.measured.fetch_add(1, Ordering::Relaxed);
    }

    /// Notes the communicator of a measured collective.
    pub fn set_comm(&self, id: u64, rank: Option<u32>, size: Option<u32>) {
        self.comm_id.store(id, Ordering::Relaxed);
        self.comm_rank_1
            .store(rank.map_or(0, |r| r.saturating_add(1)), Ordering::Relaxed);
        self.comm_size.store(size.unwrap_or(0), Ordering::Relaxed);
    }

    pub fn status(&self) -> CollectiveCalls {
        CollectiveCalls {
            calls: self.calls.load(Ordering::Relaxed),
            measured: self.measured.load(Ordering::Relaxed),
            gpu_ns: self.gpu_ns.load(Ordering::Relaxed),
            max_ns: self.max_ns.load(Ordering::Relaxed),
            first_ns: self.first_ns.load(Ordering::Relaxed),
            last_ns: self.last_ns.load(Ordering::Relaxed),
            unmeasured: self.unmeasured.load(Ordering::Relaxed),
            comm_id: self.comm_id.load(Ordering::Relaxed),
            comm_rank: self.comm_rank_1.load(Ordering::Relaxed).checked_sub(1),
            comm_size: Some(self.comm_size.load(Ordering::Relaxed)).filter(|n| *n != 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measurements_add_up_over_the_window_from_the_first_call() {
        let c = CollectiveLive::default();
        assert_eq!(c.status().window_ns(), 0);
        c.add_measured(1_000, 5_000, 3_000);
        c.add_measured(6_000, 9_000, 1_000);
        let s = c.status();
        assert_eq!((s.measured, s.gpu_ns, s.max_ns), (2, 4_000, 3_000));
        assert_eq!(s.window_ns(), 8_000);
        assert_eq!((s.comm_rank, s.comm_size), (None, None));
        c.set_comm(7, Some(0), Some(4));
        let s = c.status();
        assert_eq!((s.comm_id, s.comm_rank, s.comm_size), (7, Some(0), Some(4)));
        c.set_comm(7, None, None);
        assert_eq!((c.status().comm_rank, c.status().comm_size), (None, None));
    }
}
