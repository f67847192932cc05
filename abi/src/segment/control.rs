//! The segment's accessors of the `control` section ([`crate::control`]): kept on the segment's
//! side so that the section file holds only its layout types and the segment depends on
//! them, never the reverse.

use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::sync::atomic::Ordering;

use crate::control::*;
use crate::layout::Header;
use crate::segment::{SegmentReader, SegmentWriter};

impl SegmentWriter {
    /// The control part of this segment's header.
    pub fn control(&self) -> &Control {
        // SAFETY: the writer's mapping starts with this build's `Header`; `Control` is all
        // atomics, accessed through shared references.
        unsafe { &(*(self.v.map.ptr as *const Header)).control }
    }

    /// Adds one collective kernel of `ordinal` (claiming its device entry as
    /// [`SegmentWriter::gpu_device`] does).
    pub fn record_collective(&self, ordinal: i32, busy_ns: u64) {
        let Some(d) = self.gpu_device(ordinal) else {
            return;
        };
        let i = self
            .gpu()
            .devices
            .iter()
            .position(|e| std::ptr::eq(e, d))
            .unwrap_or(0);
        let c = &self.control().collectives[i];
        c.count.fetch_add(1, Ordering::Relaxed);
        c.busy_ns.fetch_add(busy_ns, Ordering::Relaxed);
    }
}

impl SegmentReader {
    fn control_part(&self) -> Option<&Control> {
        if !self.has_part(4, CONTROL_END) {
            return None;
        }
        // SAFETY: the validated `header_size` (at most HEADER_RESERVED, which the mapping
        // holds) covers `Control`; it is all atomics, valid for any bit pattern.
        Some(unsafe { &(*(self.v.map.ptr as *const Header)).control })
    }

    /// The control part; `None` for segments older than ABI 1.4 (and frozen readers).
    pub fn control_status(&self) -> Option<ControlStatus> {
        let c = self.control_part()?;
        let g = self.gpu_live()?;
        let r = Ordering::Relaxed;
        let collectives = g
            .devices
            .iter()
            .zip(&c.collectives)
            .filter_map(|(d, c)| {
                let key = d.device.load(r);
                (key != 0).then(|| CollectiveStatus {
                    device: (key - 1) as i32,
                    count: c.count.load(r),
                    busy_ns: c.busy_ns.load(r),
                })
            })
            .collect();
        Some(ControlStatus {
            trace_until_ns: c.trace_until_ns.load(r),
            trace_granted_ns: c.trace_granted_ns.load(r),
            collectives,
        })
    }

    /// Asks the process's library to trace GPU activity at least until `until_ns`
    /// (CLOCK_MONOTONIC). Raises the request, never lowers it: returns `Ok(false)` when a
    /// request as late or later is already there. The write is one `pwrite` of eight bytes
    /// on the file this reader maps (opened without following links and checked to be the
    /// same file); the mapping stays read-only.
    pub fn request_gpu_trace(&self, until_ns: u64) -> Result<bool, RequestError> {
        let Some(c) = self.control_part() else {
            return Err(RequestError::TooOld);
        };
        if c.trace_until_ns.load(Ordering::Relaxed) >= until_ns {
            return Ok(false);
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(self.path())
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::ELOOP) => RequestError::Replaced,
                _ => RequestError::Io(e),
            })?;
        let meta = file.metadata().map_err(RequestError::Io)?;
        if !meta.file_type().is_file() || (meta.dev(), meta.ino()) != self.file_id() {
            return Err(RequestError::Replaced);
        }
        file.write_all_at(&until_ns.to_ne_bytes(), TRACE_UNTIL_OFFSET)
            .map_err(RequestError::Io)?;
        Ok(true)
    }
}
