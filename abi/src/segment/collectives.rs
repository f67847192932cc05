//! The segment's accessors of the `collectives` section ([`crate::collectives`]): kept on the segment's
//! side so that the section file holds only its layout types and the segment depends on
//! them, never the reverse.

use crate::collectives::*;
use crate::layout::Header;
use crate::segment::{SegmentReader, SegmentWriter};

impl SegmentWriter {
    /// The collectives part of this segment's header.
    pub fn collectives(&self) -> &CollectiveLive {
        // SAFETY: the writer's mapping starts with this build's `Header`; `CollectiveLive` is
        // all atomics, accessed through shared references.
        unsafe { &(*(self.v.map.ptr as *const Header)).collectives }
    }
}

impl SegmentReader {
    /// The collectives part; `None` for segments older than ABI 1.8 and frozen readers.
    pub fn collective_calls(&self) -> Option<CollectiveCalls> {
        if !self.has_part(8, COLLECTIVES_END) {
            return None;
        }
        // SAFETY: the validated `header_size` (at most HEADER_RESERVED, which the mapping
        // holds) covers `CollectiveLive`; it is all atomics, valid for any bit pattern.
        let part = unsafe { &(*(self.v.map.ptr as *const Header)).collectives };
        Some(part.status())
    }
}
