//! When an operation finished: a leaf that streams, events, devices, the scheduler and the
//! NCCL work share, so that none of them imports another for it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// When an operation finished on the modeled timeline. Written once by a worker while it holds
/// the scheduler lock; read by anyone.
#[derive(Debug)]
pub(crate) struct Completion {
    /// CLOCK_MONOTONIC ns of the modeled end, or `PENDING`. Release store / acquire load, so a
    /// reader that sees the time also sees the bytes the operation wrote.
    end_ns: AtomicU64,
}

const PENDING: u64 = u64::MAX;

impl Completion {
    pub fn pending() -> Arc<Self> {
        Arc::new(Self {
            end_ns: AtomicU64::new(PENDING),
        })
    }

    pub fn end_ns(&self) -> Option<u64> {
        let end = self.end_ns.load(Ordering::Acquire);
        (end != PENDING).then_some(end)
    }

    pub fn is_done(&self) -> bool {
        self.end_ns().is_some()
    }

    pub fn complete(&self, end_ns: u64) {
        self.end_ns
            .store(end_ns.min(PENDING - 1), Ordering::Release);
    }
}
