//! The segment's accessors of the `gpu` section ([`crate::gpu`]): kept on the segment's
//! side so that the section file holds only its layout types and the segment depends on
//! them, never the reverse.

use std::sync::atomic::Ordering;

use crate::gpu::*;
use crate::layout::Header;
use crate::record::{Record, NO_SITE};
use crate::segment::{SegmentReader, SegmentWriter};
use crate::{Api, Direction, Kind};

impl SegmentWriter {
    /// The GPU part of this segment's header.
    pub fn gpu(&self) -> &GpuLive {
        // SAFETY: the writer's mapping starts with this build's `Header`; `GpuLive` is all
        // atomics, accessed through shared references.
        unsafe { &(*(self.v.map.ptr as *const Header)).gpu }
    }

    /// The counters of device `ordinal`, claiming a free entry on first use; `None` when the
    /// table is full or the ordinal negative.
    pub fn gpu_device(&self, ordinal: i32) -> Option<&GpuDevice> {
        let key = u32::try_from(ordinal).ok()?.checked_add(1)?;
        for d in &self.gpu().devices {
            match d
                .device
                .compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    d.sample_ppm.store(NO_SAMPLE, Ordering::Relaxed);
                    return Some(d);
                }
                Err(k) if k == key => return Some(d),
                Err(_) => {}
            }
        }
        None
    }

    /// Writes one idle gap of `device` to the ring and the `gpu_idle` totals.
    pub fn record_gpu_idle(&self, device: i32, start_ns: u64, len_ns: u64) {
        let rec = Record {
            kind: Kind::GpuIdle,
            api: Api::GpuActivity,
            direction: Direction::None,
            flags: 0,
            device,
            start_ns,
            duration_ns: len_ns,
            bytes: 0,
            stream: 0,
            tid: 0,
            site: NO_SITE,
            result: 0,
            polls: 0,
        };
        self.count_gpu_idle(len_ns);
        crate::ring::push(self.live(), self.v.slots(), &rec);
    }

    /// Writes the GPU idle measured behind one stall (a `gpu_idle` record of API
    /// `stall_events`, ABI 1.10) to the ring and to that API's totals; the `gpu_idle` kind's
    /// totals stay the traced gaps'. With `ring` false (records shed), the totals alone.
    pub fn record_stall_idle(&self, rec: &Record, ring: bool) {
        self.live().apis[Api::StallEvents as usize].add(rec.duration_ns, 0);
        if ring {
            crate::ring::push(self.live(), self.v.slots(), rec);
        }
    }

    /// Adds one idle gap to the `gpu_idle` totals without writing its record (a library
    /// shedding gap records to keep within its budget: `cost`).
    pub fn count_gpu_idle(&self, len_ns: u64) {
        self.live().kinds[Kind::GpuIdle as usize].add(len_ns, 0);
    }
}

impl SegmentReader {
    pub(crate) fn gpu_live(&self) -> Option<&GpuLive> {
        if !self.has_part(2, GPU_END) {
            return None;
        }
        // SAFETY: the validated `header_size` (at most HEADER_RESERVED, which the mapping
        // holds) covers `GpuLive`; it is all atomics, valid for any bit pattern.
        Some(unsafe { &(*(self.v.map.ptr as *const Header)).gpu })
    }

    /// The GPU part; `None` for segments older than ABI 1.2 (and frozen readers).
    pub fn gpu_status(&self) -> Option<GpuStatus> {
        let g = self.gpu_live()?;
        let r = Ordering::Relaxed;
        let devices = g
            .devices
            .iter()
            .filter_map(|d| {
                let key = d.device.load(r);
                (key != 0).then(|| GpuDeviceStatus {
                    device: (key - 1) as i32,
                    span_ns: d.span_ns.load(r),
                    busy_ns: d.busy_ns.load(r),
                    short_gaps: d.short_gaps.load(r),
                    short_gap_ns: d.short_gap_ns.load(r),
                    final_ns: d.final_ns.load(r),
                    sample_ppm: match d.sample_ppm.load(r) {
                        p if p <= 1_000_000 => Some(p),
                        _ => None,
                    },
                })
            })
            .collect();
        Some(GpuStatus {
            state: g.state.load(Ordering::Acquire),
            mode: g.mode.load(r),
            source: g.source.load(r),
            yields: g.yields.load(r),
            min_gap_ns: g.min_gap_ns.load(r),
            window_ns: g.window_ns.load(r),
            records: g.records.load(r),
            dropped: g.dropped.load(r),
            late_ns: g.late_ns.load(r),
            traced_ns: g.traced_ns.load(r),
            devices,
        })
    }
}
