//! The segment's accessors of the `job` section ([`crate::job`]): kept on the segment's
//! side so that the section file holds only its layout types and the segment depends on
//! them, never the reverse.

use crate::job::*;
use crate::layout::Header;
use crate::segment::SegmentReader;

impl SegmentReader {
    /// The job this process is a rank of; `None` for segments older than ABI 1.3, and
    /// processes that are no rank of a job (and frozen readers: the file may end before the
    /// header does).
    pub fn job(&self) -> Option<JobInfo> {
        if !self.has_part(3, JOB_END) {
            return None;
        }
        // SAFETY: the validated `header_size` (at most HEADER_RESERVED, which the mapping
        // holds) covers `JobIdent`; it is plain data valid for any bit pattern, copied once.
        let job = unsafe {
            std::ptr::read_volatile(
                self.v.map.ptr.add(std::mem::offset_of!(Header, job)) as *const JobIdent
            )
        };
        job.info()
    }
}
