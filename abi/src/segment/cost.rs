//! The segment's accessors of the `cost` section ([`crate::cost`]): kept on the segment's side
//! so that the section file holds only its layout types and the segment depends on them,
//! never the reverse.

use crate::cost::*;
use crate::layout::Header;
use crate::segment::{SegmentReader, SegmentWriter};

impl SegmentWriter {
    /// The cost part of this segment's header.
    pub fn cost(&self) -> &CostLive {
        // SAFETY: the writer's mapping starts with this build's `Header`; `CostLive` is all
        // atomics, accessed through shared references.
        unsafe { &(*(self.v.map.ptr as *const Header)).cost }
    }

    /// The own-time part of this segment's header.
    pub fn own(&self) -> &OwnLive {
        // SAFETY: as for `cost`: this build's `Header`, all atomics.
        unsafe { &(*(self.v.map.ptr as *const Header)).own }
    }
}

impl SegmentReader {
    /// The host-wait machinery's share of the library's own time (`OwnLive`); `None` for
    /// segments older than ABI 1.11 and frozen readers.
    pub fn host_wait_own_ns(&self) -> Option<u64> {
        if !self.has_part(11, OWN_END) {
            return None;
        }
        // SAFETY: `has_part`: the header holds `OwnLive`; it is all atomics, valid for any bit
        // pattern.
        let part = unsafe { &(*(self.v.map.ptr as *const Header)).own };
        Some(part.host_wait_ns())
    }

    /// The cost part; `None` for segments older than ABI 1.9 and frozen readers.
    pub fn cost_status(&self) -> Option<CostStatus> {
        if !self.has_part(9, COST_END) {
            return None;
        }
        // SAFETY: the validated `header_size` (at most HEADER_RESERVED, which the mapping
        // holds) covers `CostLive`; it is all atomics, valid for any bit pattern.
        let part = unsafe { &(*(self.v.map.ptr as *const Header)).cost };
        Some(part.status())
    }
}
