//! Copies and memsets: which memory each side is, which engine moves the bytes and for how
//! long, and whether the calling thread waits. The waiting rules are CUDA's "API
//! synchronization behavior", as CUDA 13 showed them on an H100 (`probe/semantics.c`):
//!
//! | call | host side | caller |
//! | --- | --- | --- |
//! | cudaMemcpy H2D / D2H | any | waits for the stream's earlier work and the copy |
//! | cudaMemcpy D2D, cudaMemcpyPeer | — | returns at once |
//! | cudaMemcpyAsync H2D | pinned, registered, managed | returns at once |
//! | cudaMemcpyAsync H2D | pageable, fits the free staging buffer | data staged, returns at once |
//! | cudaMemcpyAsync H2D | pageable, larger | waits for the stream and the copy |
//! | cudaMemcpyAsync D2H | pageable | waits for the stream and the copy |
//! | cudaMemcpyAsync D2H | pinned, registered, managed | returns at once |
//! | any copy host to host | — | waits (done by the CPU in stream order) |
//! | cudaMemset | device memory | returns at once |
//! | cudaMemset | pinned, registered or managed memory | waits |
//! | cudaMemsetAsync | any | returns at once |

use std::sync::Arc;

use cudarc::runtime::sys::{cudaError_t, cudaMemcpyKind, cudaStream_t};

use crate::config::Link;
use crate::engine::{EngineKind, EngineRef};
use crate::error::CudaResult;
use crate::memory::{Allocation, MemKind, MemoryMap};
use crate::runtime::Runtime;
use crate::work::{CopyWork, MemsetWork, Op, Shape, Source, Work};

/// The synchronous (`cudaMemcpy`, `cudaMemset`) or asynchronous (`...Async`) form of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    Sync,
    Async,
}

/// The stream a call is ordered in: a handle, and whether handle 0 means the per-thread
/// default stream (the `_ptds` / `_ptsz` entry points).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamArg {
    pub handle: cudaStream_t,
    pub per_thread_default: bool,
}

impl StreamArg {
    /// The default stream of a synchronous call.
    pub fn default_stream(per_thread_default: bool) -> Self {
        Self {
            handle: std::ptr::null_mut(),
            per_thread_default,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    HostToHost,
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
    /// Between two devices, from `src_device`.
    Peer {
        src_device: usize,
    },
}

/// What one side of a copy is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Device or managed memory.
    Device,
    /// Pinned or registered host memory.
    Pinned,
    /// Memory the runtime does not know.
    Pageable,
}

/// A validated copy, before it is ordered in a stream.
#[derive(Debug)]
pub(crate) struct CopyPlan {
    dst: *mut u8,
    src: *const u8,
    shape: Shape,
    direction: Direction,
    /// The host side is pageable memory.
    pageable: bool,
    keep: Vec<Arc<Allocation>>,
}

/// Converts the `kind` argument, received as its integer representation (see `api`).
pub(crate) fn memcpy_kind(kind: u32) -> CudaResult<cudaMemcpyKind> {
    use cudaMemcpyKind::*;
    Ok(match kind {
        0 => cudaMemcpyHostToHost,
        1 => cudaMemcpyHostToDevice,
        2 => cudaMemcpyDeviceToHost,
        3 => cudaMemcpyDeviceToDevice,
        4 => cudaMemcpyDefault,
        _ => return Err(cudaError_t::cudaErrorInvalidMemcpyDirection),
    })
}

fn classify(
    map: &MemoryMap,
    addr: *const u8,
    extent: usize,
) -> CudaResult<(Class, Option<Arc<Allocation>>)> {
    let addr = addr as usize;
    match map.find(addr) {
        // A range that starts in device memory must end there: the device would fault.
        Some(a) if a.kind.is_device() => {
            if a.contains(addr, extent) {
                Ok((Class::Device, Some(Arc::clone(a))))
            } else {
                Err(cudaError_t::cudaErrorInvalidValue)
            }
        }
        Some(a) if a.contains(addr, extent) => Ok((Class::Pinned, Some(Arc::clone(a)))),
        // Host memory the runtime does not know, or running past a pinned range.
        _ => Ok((Class::Pageable, None)),
    }
}

impl CopyPlan {
    /// Checks a copy of `shape` from `src` to `dst` with the program's `kind`. `None` means
    /// there is nothing to copy.
    pub fn new(
        map: &MemoryMap,
        dst: *mut u8,
        src: *const u8,
        shape: Shape,
        kind: cudaMemcpyKind,
    ) -> CudaResult<Option<Self>> {
        use cudaMemcpyKind::*;
        let invalid = cudaError_t::cudaErrorInvalidValue;
        let bytes = shape.bytes().ok_or(invalid)?;
        let dst_extent = shape.dst_extent().ok_or(invalid)?;
        let src_extent = shape.src_extent().ok_or(invalid)?;
        if bytes == 0 {
            return Ok(None);
        }
        if dst.is_null() || src.is_null() {
            return Err(invalid);
        }
        let (dst_class, dst_alloc) = classify(map, dst, dst_extent)?;
        let (src_class, src_alloc) = classify(map, src, src_extent)?;
        let (dst_dev, src_dev) = (dst_class == Class::Device, src_class == Class::Device);
        let direction = match kind {
            cudaMemcpyHostToHost => Direction::HostToHost,
            cudaMemcpyHostToDevice if dst_dev => Direction::HostToDevice,
            cudaMemcpyDeviceToHost if src_dev => Direction::DeviceToHost,
            cudaMemcpyDeviceToDevice if dst_dev && src_dev => Direction::DeviceToDevice,
            cudaMemcpyDefault => match (dst_dev, src_dev) {
                (true, true) => Direction::DeviceToDevice,
                (true, false) => Direction::HostToDevice,
                (false, true) => Direction::DeviceToHost,
                (false, false) => Direction::HostToHost,
            },
            // The side the kind names as device memory is not.
            _ => return Err(invalid),
        };
        let pageable = match direction {
            Direction::HostToDevice => src_class == Class::Pageable,
            Direction::DeviceToHost => dst_class == Class::Pageable,
            _ => false,
        };
        Ok(Some(Self {
            dst,
            src,
            shape,
            direction,
            pageable,
            keep: dst_alloc.into_iter().chain(src_alloc).collect(),
        }))
    }

    /// A copy between device memory of two devices (`cudaMemcpyPeer`).
    pub fn peer(
        map: &MemoryMap,
        dst: *mut u8,
        dst_device: usize,
        src: *const u8,
        src_device: usize,
        bytes: usize,
    ) -> CudaResult<Option<Self>> {
        let Some(mut plan) = Self::new(
            map,
            dst,
            src,
            Shape::linear(bytes),
            cudaMemcpyKind::cudaMemcpyDeviceToDevice,
        )?
        else {
            return Ok(None);
        };
        if src_device != dst_device {
            plan.direction = Direction::Peer { src_device };
        }
        Ok(Some(plan))
    }

    /// Orders the copy in `stream` and, where CUDA blocks the caller, waits for it.
    pub fn submit(self, rt: &'static Runtime, stream: StreamArg, form: Form) -> CudaResult {
        let bytes = self.shape.bytes().unwrap_or(0);
        let may_stage = form == Form::Async
            && self.direction == Direction::HostToDevice
            && self.pageable
            && bytes <= rt.config.staging_bytes;
        // SAFETY: the source extent was checked against its allocation, or is the program's
        // pageable memory, which it promised readable for the copy.
        let snapshot = may_stage.then(|| unsafe { self.shape.gather(self.src) });

        let mut g = rt.sched.lock();
        let id = rt.resolve_stream(&mut g, stream.handle, stream.per_thread_default)?;
        let device = g.stream(id)?.device;
        let staged = match snapshot {
            Some(buf) if g.devices[device].staging_free >= bytes => {
                g.devices[device].staging_free -= bytes;
                Some(buf)
            }
            _ => None,
        };
        let staged_bytes = if staged.is_some() { bytes } else { 0 };
        let caller_waits = match (form, self.direction) {
            (_, Direction::HostToHost) => true,
            (Form::Sync, Direction::DeviceToDevice | Direction::Peer { .. }) => false,
            (Form::Sync, _) => true,
            (Form::Async, Direction::HostToDevice) => self.pageable && staged.is_none(),
            (Form::Async, Direction::DeviceToHost) => self.pageable,
            (Form::Async, Direction::DeviceToDevice | Direction::Peer { .. }) => false,
        };
        let link = match self.direction {
            Direction::HostToHost => Link::Host,
            Direction::HostToDevice | Direction::DeviceToHost if self.pageable => Link::Pageable,
            Direction::HostToDevice | Direction::DeviceToHost | Direction::Peer { .. } => {
                Link::Pinned
            }
            Direction::DeviceToDevice => Link::Device,
        };
        let engine = match self.direction {
            Direction::HostToHost => None,
            Direction::HostToDevice => Some((device, EngineKind::CopyH2D)),
            Direction::DeviceToHost => Some((device, EngineKind::CopyD2H)),
            Direction::DeviceToDevice => Some((device, EngineKind::Compute)),
            Direction::Peer { src_device } => Some((src_device, EngineKind::CopyD2H)),
        };
        let op = Op {
            work: Work::Copy(CopyWork {
                dst: self.dst,
                src: staged.map_or(Source::Memory(self.src), Source::Staged),
                shape: self.shape,
            }),
            engine: engine.map(|(device, kind)| EngineRef { device, kind }),
            duration_ns: rt.config.transfer_ns(bytes, link),
            keep: self.keep,
        };
        let done = rt.sched.enqueue(&mut g, id, op, Vec::new(), staged_bytes)?;
        if caller_waits {
            let g = rt.sched.wait_for(g, &[done]);
            return g.fault(device);
        }
        Ok(())
    }
}

/// `cudaMemset` / `cudaMemsetAsync`: sets `count` bytes at `dst` to `value`.
pub(crate) fn memset(
    rt: &'static Runtime,
    dst: *mut u8,
    value: u8,
    count: usize,
    stream: StreamArg,
    form: Form,
) -> CudaResult {
    if count == 0 {
        return Ok(());
    }
    let alloc = rt
        .memory()
        .find(dst as usize)
        .filter(|a| a.contains(dst as usize, count))
        .cloned()
        // Pageable memory, or a range running off its allocation.
        .ok_or(cudaError_t::cudaErrorInvalidValue)?;
    // Pinned and managed memory are visible to the host at once, so the synchronous form
    // completes before returning; device memory is not, so it need not.
    let caller_waits = form == Form::Sync && alloc.kind != MemKind::Device;
    let link = if alloc.kind.is_device() {
        Link::Device
    } else {
        Link::Pinned
    };
    let mut g = rt.sched.lock();
    let id = rt.resolve_stream(&mut g, stream.handle, stream.per_thread_default)?;
    let device = g.stream(id)?.device;
    let op = Op {
        work: Work::Memset(MemsetWork {
            dst,
            value,
            len: count,
        }),
        engine: Some(EngineRef {
            device,
            kind: EngineKind::Compute,
        }),
        duration_ns: rt.config.transfer_ns(count, link),
        keep: vec![alloc],
    };
    let done = rt.sched.enqueue(&mut g, id, op, Vec::new(), 0)?;
    if caller_waits {
        let g = rt.sched.wait_for(g, &[done]);
        return g.fault(device);
    }
    Ok(())
}
