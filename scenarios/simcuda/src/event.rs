//! Events: a handle that remembers the completion of the marker its last `cudaEventRecord`
//! queued. Timestamps come from the modeled device timeline, so `cudaEventElapsedTime` reports
//! modeled durations, not the simulator's scheduling noise.

use std::sync::Arc;

use cudarc::runtime::sys::{
    cudaEventBlockingSync, cudaEventDisableTiming, cudaEventInterprocess, cudaEvent_t,
};

use crate::completion::Completion;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct EventId(pub u64);

/// Event handles carry this tag in their top 16 bits (non-canonical, never a real pointer).
const EVENT_TAG: u64 = 0x5e0e << 48;
const TAG_MASK: u64 = 0xffff << 48;

impl EventId {
    pub fn to_handle(self) -> cudaEvent_t {
        (EVENT_TAG | self.0) as usize as cudaEvent_t
    }

    pub fn from_handle(handle: cudaEvent_t) -> Option<Self> {
        let bits = handle as usize as u64;
        (bits & TAG_MASK == EVENT_TAG).then_some(Self(bits & !TAG_MASK))
    }
}

/// Flags `cudaEventCreateWithFlags` accepts. Interprocess events must also disable timing.
pub(crate) fn valid_flags(flags: u32) -> bool {
    let known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
    flags & !known == 0
        && (flags & cudaEventInterprocess == 0 || flags & cudaEventDisableTiming != 0)
}

#[derive(Debug)]
pub(crate) struct Event {
    pub device: usize,
    pub flags: u32,
    /// The marker of the last record; `None` until the first `cudaEventRecord`.
    pub record: Option<Arc<Completion>>,
}

impl Event {
    pub fn timing_disabled(&self) -> bool {
        self.flags & cudaEventDisableTiming != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_follow_the_runtime_rules() {
        assert!(valid_flags(0));
        assert!(valid_flags(cudaEventBlockingSync | cudaEventDisableTiming));
        assert!(valid_flags(cudaEventInterprocess | cudaEventDisableTiming));
        assert!(!valid_flags(cudaEventInterprocess));
        assert!(!valid_flags(64));
    }

    #[test]
    fn handles_round_trip() {
        let id = EventId(7);
        assert_eq!(EventId::from_handle(id.to_handle()), Some(id));
        assert_eq!(EventId::from_handle(std::ptr::null_mut()), None);
    }
}
