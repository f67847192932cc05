//! GPU activity (ABI 1.2): how busy each GPU was and when it ran nothing.
//!
//! The library traces the GPU's own activity (kernels, copies, memsets; CUPTI on a real GPU, the
//! simulated runtime's timeline under `--sim`), merges it per device across streams, and
//! publishes two things:
//! - **idle gaps** as ring records of kind `gpu_idle` (API `gpu_activity`): `start_ns` is when
//!   the device drained (the end of its last work), `duration_ns` the time until its next work
//!   started, `device` the device ordinal. Only gaps of at least `min_gap_ns`; the exact
//!   totals of those are in `live.kinds[gpu_idle]` as for every kind (not in `live.apis`);
//! - **busy time**, in this header part: per device, the time accounted so far (`span_ns`,
//!   from its first traced work to `final_ns`) and how much of it was busy (`busy_ns`), plus
//!   the busy fraction of the last complete window. Readers take differences between two
//!   reads for the busy fraction of any period they like.
//!
//! Everything is final up to `final_ns`: activity arrives in buffers, late and out of order,
//! so the library reports a period only once nothing can change it.

use std::sync::atomic::{AtomicU32, AtomicU64};

/// Devices a segment has counters for; activity of devices past this is not accounted.
pub const GPU_DEVICES: usize = 16;

/// `GpuLive::state`: not traced (mode `off`, or no CUDA work seen yet).
pub const GPU_OFF: u32 = 0;
/// Activity is being traced.
pub const GPU_TRACING: u32 = 1;
/// Duty mode, between two traced windows.
pub const GPU_PAUSED: u32 = 2;
/// No activity source: no CUPTI library found, or it refused to trace.
pub const GPU_UNAVAILABLE: u32 = 3;
/// Another tool (torch.profiler, Nsight) took the activity source over; syncspy stepped back.
pub const GPU_YIELDED: u32 = 4;

/// `GpuLive::mode` (`SYNCSPY_GPU_IDLE`).
pub const MODE_OFF: u32 = 0;
pub const MODE_ON: u32 = 1;
pub const MODE_DUTY: u32 = 2;

/// `GpuLive::source`.
pub const SOURCE_NONE: u32 = 0;
pub const SOURCE_CUPTI: u32 = 1;
/// The simulated runtime (scenarios/simcuda) standing in for CUPTI.
pub const SOURCE_SIMULATED: u32 = 2;

/// `GpuDevice::sample_ppm` before the first complete window.
pub const NO_SAMPLE: u32 = u32::MAX;

/// Counters of one device. `device` is written once (a compare-and-swap from 0); the others
/// are stored by the library's one GPU thread (Relaxed, monotonic except `sample_ppm`).
#[repr(C)]
pub struct GpuDevice {
    /// The CUDA device ordinal + 1; 0 while the entry is free.
    pub device: AtomicU32,
    /// Busy fraction of the last complete window, parts per million; `NO_SAMPLE` before.
    pub sample_ppm: AtomicU32,
    /// Time accounted since the device's first traced work (busy or idle, traced windows
    /// only), up to `final_ns`.
    pub span_ns: AtomicU64,
    /// Of it, the time the device ran something (the union over its streams).
    pub busy_ns: AtomicU64,
    /// Gaps shorter than `min_gap_ns`: counted here, not written to the ring.
    pub short_gaps: AtomicU64,
    pub short_gap_ns: AtomicU64,
    /// CLOCK_MONOTONIC ns up to which this device's figures are final.
    pub final_ns: AtomicU64,
}

/// The GPU part of the header, appended at ABI 1.2. All atomics: the library stores `mode`,
/// `min_gap_ns`, `window_ns` once when its GPU tracing starts, then `state` (Release); the rest
/// as it goes (Relaxed).
#[repr(C)]
pub struct GpuLive {
    /// `GPU_*`.
    pub state: AtomicU32,
    /// `MODE_*`: what `SYNCSPY_GPU_IDLE` asked for.
    pub mode: AtomicU32,
    /// `SOURCE_*`.
    pub source: AtomicU32,
    /// Times the library stepped back for another tool, or could not start.
    pub yields: AtomicU32,
    /// Shortest gap written to the ring.
    pub min_gap_ns: AtomicU64,
    /// Length of the windows of `GpuDevice::sample_ppm`.
    pub window_ns: AtomicU64,
    /// Activity records received.
    pub records: AtomicU64,
    /// Records the activity source reported dropped (its buffers were full).
    pub dropped: AtomicU64,
    /// Time of activity that arrived after its period was final: not accounted.
    pub late_ns: AtomicU64,
    /// Host time during which tracing was on (duty mode: the traced windows).
    pub traced_ns: AtomicU64,
    pub devices: [GpuDevice; GPU_DEVICES],
}

const _: () = assert!(std::mem::size_of::<GpuDevice>() == 48);
const _: () = assert!(std::mem::size_of::<GpuLive>() == 64 + 48 * GPU_DEVICES);

/// End of the GPU part in the header: a segment whose `header_size` reaches it has one.
pub const GPU_END: usize = 6760;

/// What a reader knows of one device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuDeviceStatus {
    pub device: i32,
    pub span_ns: u64,
    pub busy_ns: u64,
    pub short_gaps: u64,
    pub short_gap_ns: u64,
    pub final_ns: u64,
    /// Busy fraction of the last complete window, ppm.
    pub sample_ppm: Option<u32>,
}

/// A reader's copy of the GPU part.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuStatus {
    pub state: u32,
    pub mode: u32,
    pub source: u32,
    pub yields: u32,
    pub min_gap_ns: u64,
    pub window_ns: u64,
    pub records: u64,
    pub dropped: u64,
    pub late_ns: u64,
    pub traced_ns: u64,
    /// Devices with an entry, in the order they were first seen.
    pub devices: Vec<GpuDeviceStatus>,
}

impl GpuStatus {
    /// The name of `state` in reports: `off`, `tracing`, `paused`, `unavailable`, `yielded`.
    pub fn state_name(&self) -> &'static str {
        match self.state {
            GPU_OFF => "off",
            GPU_TRACING => "tracing",
            GPU_PAUSED => "paused",
            GPU_UNAVAILABLE => "unavailable",
            GPU_YIELDED => "yielded",
            _ => "unknown",
        }
    }

    /// The name of `mode`: `off`, `on`, `duty`.
    pub fn mode_name(&self) -> &'static str {
        match self.mode {
            MODE_OFF => "off",
            MODE_ON => "on",
            MODE_DUTY => "duty",
            _ => "unknown",
        }
    }

    /// Sums over the devices: `(span_ns, busy_ns)`.
    pub fn busy(&self) -> (u64, u64) {
        self.devices.iter().fold((0, 0), |(s, b), d| {
            (s.saturating_add(d.span_ns), b.saturating_add(d.busy_ns))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    use crate::ring::Cursor;
    use crate::segment::{SegmentParams, SegmentReader, SegmentWriter};
    use crate::{Api, Kind};

    #[test]
    fn gaps_reach_the_ring_and_the_totals_and_counters_read_back() {
        let dir = std::env::temp_dir().join(format!("syncspy-abi-gpu-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut p = SegmentParams::new(77, 1);
        p.ring_capacity = 16;
        let w = SegmentWriter::create(&dir, &p).unwrap();
        let r = SegmentReader::open(w.path()).unwrap();
        assert_eq!(r.gpu_status().unwrap(), GpuStatus::default());
        w.gpu().mode.store(MODE_ON, Ordering::Relaxed);
        w.gpu().state.store(GPU_TRACING, Ordering::Release);
        let d1 = w.gpu_device(1).unwrap();
        d1.busy_ns.store(300, Ordering::Relaxed);
        d1.span_ns.store(1000, Ordering::Relaxed);
        assert!(std::ptr::eq(w.gpu_device(1).unwrap(), d1));
        assert!(w.gpu_device(-1).is_none());
        w.gpu_device(0)
            .unwrap()
            .sample_ppm
            .store(250_000, Ordering::Relaxed);
        for i in 2..GPU_DEVICES as i32 {
            assert!(w.gpu_device(i).is_some());
        }
        assert!(w.gpu_device(99).is_none(), "the table is full");
        w.record_gpu_idle(1, 5_000, 700);
        w.record_gpu_idle(0, 6_000, 300);

        let g = r.gpu_status().unwrap();
        assert_eq!((g.state_name(), g.mode_name()), ("tracing", "on"));
        assert_eq!(g.devices.len(), GPU_DEVICES);
        assert_eq!(g.devices[0].device, 1);
        assert_eq!(g.devices[0].sample_ppm, None);
        assert_eq!(g.devices[1].sample_ppm, Some(250_000));
        assert_eq!(g.busy(), (1000, 300));
        let t = r.live().kinds[Kind::GpuIdle as usize].snapshot();
        assert_eq!((t.count, t.total_ns, t.max_ns), (2, 1000, 700));
        assert_eq!(r.live().apis[Api::GpuActivity as usize].snapshot().count, 0);
        let mut got = Vec::new();
        r.poll(&mut Cursor::from_start(), usize::MAX, 0, |x| {
            got.push(x.unwrap())
        });
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[0].kind, got[0].api, got[0].device, got[0].start_ns),
            (Kind::GpuIdle, Api::GpuActivity, 1, 5_000)
        );
        assert_eq!(got[1].duration_ns, 300);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
