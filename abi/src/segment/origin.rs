//! The segment's accessors of the `origin` section ([`crate::origin`]): kept on the segment's
//! side so that the section file holds only its layout types and the segment depends on
//! them, never the reverse.

use crate::layout::Header;
use crate::origin::*;
use crate::segment::SegmentReader;

impl SegmentReader {
    /// The origin part; `None` for segments older than ABI 1.5 (and frozen readers: the file
    /// may end before the header does).
    pub fn origin(&self) -> Option<Origin> {
        if !self.has_part(5, ORIGIN_END) {
            return None;
        }
        // SAFETY: the validated `header_size` (at most HEADER_RESERVED, which the mapping
        // holds) covers `Origin`; it is plain data valid for any bit pattern, copied once.
        Some(unsafe {
            std::ptr::read_volatile(
                self.v.map.ptr.add(std::mem::offset_of!(Header, origin)) as *const Origin
            )
        })
    }
}
