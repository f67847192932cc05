//! Streams: ordered queues of operations, each drained by its own worker thread (see
//! `scheduler.rs`), and the completion records that events and waits refer to.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar};

use cudarc::runtime::sys::cudaStream_t;

use crate::completion::Completion;
use crate::work::Op;

/// Internal identity of a stream; never reused within a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct StreamId(pub u64);

/// Handles of created streams carry this tag in their top 16 bits: a non-canonical address, so
/// a handle can never be a real pointer, and a stray pointer is never mistaken for a handle.
const STREAM_TAG: u64 = 0x5c0d << 48;
const TAG_MASK: u64 = 0xffff << 48;

impl StreamId {
    pub fn to_handle(self) -> cudaStream_t {
        (STREAM_TAG | self.0) as usize as cudaStream_t
    }

    /// The id a created stream's handle encodes, if it has the stream tag.
    pub fn from_handle(handle: cudaStream_t) -> Option<Self> {
        let bits = handle as usize as u64;
        (bits & TAG_MASK == STREAM_TAG).then_some(Self(bits & !TAG_MASK))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamKind {
    /// The legacy default stream (handle 0 or `cudaStreamLegacy`), one per device.
    Legacy,
    /// A per-thread default stream (`cudaStreamPerThread`, or 0 in `_ptds`/`_ptsz` calls).
    PerThread,
    /// `cudaStreamCreate`, or `cudaStreamCreateWithFlags(cudaStreamDefault)`.
    Blocking,
    /// `cudaStreamCreateWithFlags(cudaStreamNonBlocking)`.
    NonBlocking,
}

impl StreamKind {
    /// Streams that synchronize with the legacy default stream. The per-thread default stream
    /// is a blocking stream (CUDA docs: it "will synchronize with the legacy default stream").
    pub fn is_blocking(self) -> bool {
        matches!(self, StreamKind::PerThread | StreamKind::Blocking)
    }

    /// Streams a program creates and may destroy by handle.
    pub fn is_user(self) -> bool {
        matches!(self, StreamKind::Blocking | StreamKind::NonBlocking)
    }
}

/// An operation waiting in a stream.
#[derive(Debug)]
pub(crate) struct Queued {
    pub op: Op,
    pub done: Arc<Completion>,
    /// Operations of other streams that must complete first (legacy stream semantics,
    /// `cudaStreamWaitEvent`).
    pub deps: Vec<Arc<Completion>>,
    /// When the host enqueued it: the device cannot start it earlier.
    pub enqueued_ns: u64,
    /// Bytes of the device's staging buffer it occupies until done.
    pub staged_bytes: usize,
}

impl Queued {
    pub fn deps_done(&self) -> bool {
        self.deps.iter().all(|d| d.is_done())
    }

    /// Earliest modeled start: after the host enqueued it and every dependency ended.
    pub fn ready_ns(&self, stream_last_end_ns: u64) -> u64 {
        self.deps
            .iter()
            .filter_map(|d| d.end_ns())
            .fold(self.enqueued_ns.max(stream_last_end_ns), u64::max)
    }
}

#[derive(Debug)]
pub(crate) struct Stream {
    pub device: usize,
    pub kind: StreamKind,
    pub queue: VecDeque<Queued>,
    /// Completion of the newest operation enqueued (running, queued or done).
    pub tail: Option<Arc<Completion>>,
    /// Modeled end of the last operation that finished.
    pub last_end_ns: u64,
    /// Destroyed by the program: no new work; the worker exits once the queue is drained.
    pub destroyed: bool,
    /// Wakes the worker when work arrives or the stream is destroyed.
    pub wake: Arc<Condvar>,
}

impl Stream {
    pub fn new(device: usize, kind: StreamKind) -> Self {
        Self {
            device,
            kind,
            queue: VecDeque::new(),
            tail: None,
            last_end_ns: 0,
            destroyed: false,
            wake: Arc::new(Condvar::new()),
        }
    }

    /// Completion of the newest operation, if it is still pending.
    pub fn pending_tail(&self) -> Option<Arc<Completion>> {
        self.tail.as_ref().filter(|t| !t.is_done()).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_reject_other_values() {
        let id = StreamId(42);
        assert_eq!(StreamId::from_handle(id.to_handle()), Some(id));
        for raw in [0usize, 1, 2, 0x7fff_0000_1000] {
            assert_eq!(StreamId::from_handle(raw as cudaStream_t), None);
        }
    }

    #[test]
    fn ready_time_is_the_latest_constraint() {
        let dep = Completion::pending();
        let q = Queued {
            op: Op::marker(),
            done: Completion::pending(),
            deps: vec![dep.clone()],
            enqueued_ns: 100,
            staged_bytes: 0,
        };
        assert!(!q.deps_done());
        dep.complete(300);
        assert!(q.deps_done());
        assert_eq!(q.ready_ns(200), 300);
        assert_eq!(q.ready_ns(400), 400);
    }
}
