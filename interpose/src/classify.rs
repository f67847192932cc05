//! Turning a call's arguments into what syncspy reports: direction, bytes, and whether an
//! asynchronous copy stalls because its host side is pageable.

use std::ffi::c_void;

use cudarc::runtime::sys::cudaMemcpyKind;
use syncspy_abi::record::FLAG_HOST_PINNED;
use syncspy_abi::{Api, Direction, Kind};

use crate::call::Call;
use crate::pinned::{self, MemType};

/// Which side of a copy is host memory, for the pinned-ness question.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostSide {
    Src,
    Dst,
    Both,
    Neither,
}

pub(crate) fn is_device_side(addr: u64) -> bool {
    matches!(
        pinned::memory_type(addr),
        Some(MemType::Device | MemType::Managed)
    )
}

/// Direction of a copy from its `cudaMemcpyKind` (raw value), resolving `cudaMemcpyDefault`
/// from the pointers' attributes. Unknown kinds give `Direction::None`.
pub fn direction(kind: u32, dst: *const c_void, src: *const c_void) -> Direction {
    use cudaMemcpyKind::*;
    match kind {
        k if k == cudaMemcpyHostToHost as u32 => Direction::HostToHost,
        k if k == cudaMemcpyHostToDevice as u32 => Direction::HostToDevice,
        k if k == cudaMemcpyDeviceToHost as u32 => Direction::DeviceToHost,
        k if k == cudaMemcpyDeviceToDevice as u32 => Direction::DeviceToDevice,
        k if k == cudaMemcpyDefault as u32 => {
            match (is_device_side(src as u64), is_device_side(dst as u64)) {
                (false, true) => Direction::HostToDevice,
                (true, false) => Direction::DeviceToHost,
                (true, true) => Direction::DeviceToDevice,
                (false, false) => Direction::HostToHost,
            }
        }
        _ => Direction::None,
    }
}

pub fn host_side(d: Direction) -> HostSide {
    match d {
        Direction::HostToDevice => HostSide::Src,
        Direction::DeviceToHost => HostSide::Dst,
        Direction::HostToHost => HostSide::Both,
        Direction::DeviceToDevice | Direction::None => HostSide::Neither,
    }
}

/// A synchronous copy: a `memcpy_sync` event, except device-to-device copies, which the
/// runtime performs without host-side synchronization (documented, and seen on an H100:
/// `scenarios/simcuda/probe/h100-cuda13.0.txt`); those are counted as non-stalling calls.
pub fn sync_copy(api: Api, direction: Direction, bytes: u64, stream: u64) -> Call {
    let kind = (direction != Direction::DeviceToDevice).then_some(Kind::MemcpySync);
    Call {
        kind,
        api,
        direction,
        bytes,
        stream,
        flags: 0,
    }
}

/// An asynchronous copy: host-to-host copies are fully synchronous whatever the memory
/// (`memcpy_sync`); otherwise a `memcpy_pageable` event when the host side is pageable and a
/// counted non-stalling call when it is pinned or there is no host side.
pub fn async_copy(
    api: Api,
    direction: Direction,
    dst: *const c_void,
    src: *const c_void,
    bytes: u64,
    stream: u64,
) -> Call {
    let pinned = match host_side(direction) {
        HostSide::Src => pinned::is_pinned(src as u64, bytes),
        HostSide::Dst => pinned::is_pinned(dst as u64, bytes),
        HostSide::Both => {
            pinned::is_pinned(src as u64, bytes) && pinned::is_pinned(dst as u64, bytes)
        }
        HostSide::Neither => true,
    };
    let kind = match direction {
        Direction::HostToHost => Some(Kind::MemcpySync),
        Direction::None => None,
        _ if !pinned => Some(Kind::MemcpyPageable),
        _ => None,
    };
    let flags = if pinned && host_side(direction) != HostSide::Neither {
        FLAG_HOST_PINNED
    } else {
        0
    };
    Call {
        kind,
        api,
        direction,
        bytes,
        stream,
        flags,
    }
}

/// A call that synchronizes as a side effect (`cudaFree`, host allocation, registration).
pub fn implicit(api: Api, bytes: u64) -> Call {
    Call {
        kind: Some(Kind::ImplicitSync),
        api,
        direction: Direction::None,
        bytes,
        stream: 0,
        flags: 0,
    }
}

/// `cudaMemset`: synchronous (an implicit sync) when the target is host-visible memory,
/// asynchronous on device memory.
pub fn memset(api: Api, ptr: *const c_void, bytes: u64) -> Call {
    let host_visible = pinned::is_pinned(ptr as u64, bytes);
    Call {
        kind: host_visible.then_some(Kind::ImplicitSync),
        api,
        direction: Direction::None,
        bytes,
        stream: 0,
        flags: 0,
    }
}
