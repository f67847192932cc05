//! The control part of the header (ABI 1.4): what readers ask of the library, and the time
//! each device spent in collective-communication kernels.
//!
//! **Tracing requests.** GPU activity tracing costs the traced program something on every
//! launch, so by default the library traces in a duty cycle (`SYNCSPY_GPU_IDLE=duty`). A
//! reader that wants every gap for a while (the monitor's GPU pane while it is open, the
//! agent on an HTTP request) raises `trace_until_ns` to a CLOCK_MONOTONIC time a few seconds
//! ahead and keeps raising it while it still wants it; the library's GPU thread reads it at
//! each tick and traces until then, then goes back to its mode. Readers never write through
//! a mapping (they map segments read-only): [`SegmentReader::request_gpu_trace`] writes the
//! eight bytes with one `pwrite` on the segment's file, after checking that the file under
//! the path is the one it maps. A request is only ever raised, never lowered, so readers do
//! not cut each other's windows short (two raising at once can lose one raise; the loser
//! raises again at its next refresh). The library answers in `trace_granted_ns`: the request
//! it is tracing for (0: none yet), so a reader can tell "asked" from "tracing".
//!
//! **Collectives.** Kernels of collective-communication libraries (NCCL's names begin with
//! `nccl`) run on the GPU while a rank waits for the others: in a data-parallel job, the rank
//! whose host stalled arrives last and its collectives are short, the others' long. Per
//! device (the same entries as `GpuLive::devices`), the library adds up their count and
//! time, for traced windows only. Readers compare ranks over the same period.
//!
//! [`SegmentReader::request_gpu_trace`]: crate::SegmentReader::request_gpu_trace

use std::io;
use std::sync::atomic::AtomicU64;

use crate::gpu::GPU_DEVICES;

/// Collective-kernel totals of one device.
#[repr(C)]
pub struct GpuCollective {
    /// Collective kernels that ended in traced time.
    pub count: AtomicU64,
    /// Their summed durations (kernels of one device may overlap: this is a sum, not a union).
    pub busy_ns: AtomicU64,
}

/// The control part of the header, appended at ABI 1.4. `trace_until_ns` is written by
/// readers (`pwrite`), the rest by the library's GPU thread (Relaxed); everything is read
/// Relaxed.
#[repr(C)]
pub struct Control {
    /// Trace GPU activity at least until this CLOCK_MONOTONIC time; 0: no request.
    pub trace_until_ns: AtomicU64,
    /// The request the library is tracing for, or last traced for; 0: none honoured yet.
    pub trace_granted_ns: AtomicU64,
    /// Indexed like `GpuLive::devices`.
    pub collectives: [GpuCollective; GPU_DEVICES],
}

const _: () = assert!(std::mem::size_of::<GpuCollective>() == 16);
const _: () = assert!(std::mem::size_of::<Control>() == 16 + 16 * GPU_DEVICES);

/// End of the control part in the header: a segment whose `header_size` reaches it has one.
pub const CONTROL_END: usize = 7184;

/// Offset of `trace_until_ns` in the segment file.
pub const TRACE_UNTIL_OFFSET: u64 = (CONTROL_END - std::mem::size_of::<Control>()
    + std::mem::offset_of!(Control, trace_until_ns)) as u64;

/// A reader's copy of the collective totals of one device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollectiveStatus {
    /// The device ordinal.
    pub device: i32,
    pub count: u64,
    pub busy_ns: u64,
}

/// A reader's copy of the control part.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControlStatus {
    pub trace_until_ns: u64,
    pub trace_granted_ns: u64,
    /// Devices with an entry in `GpuLive::devices`, in the same order.
    pub collectives: Vec<CollectiveStatus>,
}

/// Why a tracing request was not written.
#[derive(Debug)]
pub enum RequestError {
    /// The segment was written before ABI 1.4: its library reads no requests.
    TooOld,
    /// The file under the path is no longer the one this reader maps (removed or replaced).
    Replaced,
    Io(io::Error),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::TooOld => f.write_str(
                "the process's syncspy library is older than ABI 1.4 and reads no tracing requests",
            ),
            RequestError::Replaced => f.write_str("the segment file was removed or replaced"),
            RequestError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RequestError {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    use crate::segment::{SegmentParams, SegmentReader, SegmentWriter};

    #[test]
    fn a_request_reaches_the_writer_only_raising_and_collectives_read_back_per_device() {
        let dir = std::env::temp_dir().join(format!("syncspy-abi-ctl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut p = SegmentParams::new(78, 1);
        p.ring_capacity = 16;
        let w = SegmentWriter::create(&dir, &p).unwrap();
        let r = SegmentReader::open(w.path()).unwrap();
        assert_eq!(r.control_status().unwrap(), ControlStatus::default());

        assert!(r.request_gpu_trace(5_000).unwrap());
        assert_eq!(w.control().trace_until_ns.load(Ordering::Relaxed), 5_000);
        assert!(!r.request_gpu_trace(4_000).unwrap(), "never lowered");
        assert_eq!(w.control().trace_until_ns.load(Ordering::Relaxed), 5_000);
        assert!(r.request_gpu_trace(9_000).unwrap());
        assert_eq!(r.control_status().unwrap().trace_until_ns, 9_000);

        w.record_collective(3, 700);
        w.record_collective(0, 100);
        w.record_collective(3, 50);
        let s = r.control_status().unwrap();
        assert_eq!(
            s.collectives,
            vec![
                CollectiveStatus {
                    device: 3,
                    count: 2,
                    busy_ns: 750
                },
                CollectiveStatus {
                    device: 0,
                    count: 1,
                    busy_ns: 100
                },
            ]
        );

        // A file swapped in under the name is not written.
        let path = w.path().to_path_buf();
        std::fs::rename(&path, dir.join("moved")).unwrap();
        std::fs::write(&path, vec![0u8; 16]).unwrap();
        assert!(matches!(
            r.request_gpu_trace(20_000),
            Err(RequestError::Replaced)
        ));
        assert_eq!(std::fs::read(&path).unwrap(), vec![0u8; 16]);
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(dir.join("moved"), &path).unwrap();
        assert!(matches!(
            r.request_gpu_trace(20_000),
            Err(RequestError::Replaced)
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
