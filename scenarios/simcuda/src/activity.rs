//! The device work the simulated CUPTI reports (`api/cupti.rs`): which activity kinds are
//! enabled and the records waiting for the client's next flush. The stream workers record
//! here (the scheduler), the CUPTI entry points of the API read and deliver; a module of its
//! own so that the scheduler does not import the API.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use cudarc::cupti::sys::CUpti_ActivityKind;

use crate::engine::EngineKind;
use crate::work::{Op, Work};

pub(crate) const KIND_MEMCPY: u32 = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY as u32;
pub(crate) const KIND_MEMSET: u32 = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET as u32;
pub(crate) const KIND_KERNEL: u32 = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_KERNEL as u32;
pub(crate) const KIND_CONCURRENT_KERNEL: u32 =
    CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL as u32;

/// Records kept between two flushes; more are dropped (and counted).
pub const MAX_PENDING: usize = 1 << 20;

/// Bit `1 << kind` per enabled kind.
pub(crate) static ENABLED: AtomicU32 = AtomicU32::new(0);
pub(crate) static DROPPED: AtomicU64 = AtomicU64::new(0);
pub(crate) static PENDING: Mutex<Vec<Activity>> = Mutex::new(Vec::new());

/// One piece of device work, as a record will say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Activity {
    pub kind: u32,
    pub device: u32,
    pub stream: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub bytes: u64,
    /// `CUpti_ActivityMemcpyKind` for copies.
    pub copy_kind: u8,
    pub name: &'static CStr,
}

fn enabled(kind: u32) -> bool {
    ENABLED.load(Ordering::Relaxed) & (1 << kind) != 0
}

/// Called by a stream's worker when `op` ran on `device` from `start_ns` to `end_ns`.
pub(crate) fn record(op: &Op, device: usize, stream: u64, start_ns: u64, end_ns: u64) {
    if ENABLED.load(Ordering::Relaxed) == 0 {
        return;
    }
    let (kind, bytes, copy_kind, name) = match &op.work {
        Work::Kernel(k) => {
            let kind = if enabled(KIND_CONCURRENT_KERNEL) {
                KIND_CONCURRENT_KERNEL
            } else {
                KIND_KERNEL
            };
            (kind, 0, 0, k.launch.name())
        }
        Work::Copy(c) => {
            // CUPTI_ACTIVITY_MEMCPY_KIND_HTOD 1, DTOH 2, DTOD 8.
            let copy_kind = match op.engine.map(|e| e.kind) {
                Some(EngineKind::CopyH2D) => 1,
                Some(EngineKind::CopyD2H) => 2,
                _ => 8,
            };
            let bytes = c.shape.bytes().unwrap_or(0) as u64;
            (KIND_MEMCPY, bytes, copy_kind, c"")
        }
        Work::Memset(m) => (KIND_MEMSET, m.len as u64, 0, c""),
        // NCCL's work is kernels (`ncclDevKernel_...`), which use no engine of the model.
        Work::Nccl(n) => {
            let kind = if enabled(KIND_CONCURRENT_KERNEL) {
                KIND_CONCURRENT_KERNEL
            } else {
                KIND_KERNEL
            };
            (kind, 0, 0, n.kernel_name())
        }
        Work::HostFn(_) | Work::Marker => return,
    };
    if !enabled(kind) || (op.engine.is_none() && !matches!(op.work, Work::Nccl(_))) {
        return;
    }
    let a = Activity {
        kind,
        device: device as u32,
        stream: stream as u32,
        start_ns,
        end_ns,
        bytes,
        copy_kind,
        name,
    };
    let Ok(mut p) = PENDING.lock() else {
        return;
    };
    if p.len() >= MAX_PENDING {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    } else {
        p.push(a);
    }
}
