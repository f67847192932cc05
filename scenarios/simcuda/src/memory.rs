//! The allocation map: every range the simulated runtime knows (device, managed, pinned host and
//! registered host memory), keyed by base address so interior pointers resolve.
//!
//! Device and managed memory live in host RAM: one anonymous `mmap` per allocation, reserved
//! lazily by the kernel (`MAP_NORESERVE`), so a program may allocate gigabytes it never touches.
//! Allocations are shared as `Arc`s: queued work holds the allocations it touches, so a
//! mapping is unmapped only once no queued copy can reach it, whatever the program frees.

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cudarc::runtime::sys::cudaError_t;

use crate::error::CudaResult;

/// Global memory of one simulated device, as on an 80 GB H100.
pub(crate) const DEVICE_MEMORY_BYTES: usize = 80 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemKind {
    /// `cudaMalloc`.
    Device,
    /// `cudaMallocManaged`.
    Managed,
    /// `cudaMallocHost` / `cudaHostAlloc`: page-locked host memory owned by the runtime.
    Pinned,
    /// `cudaHostRegister`: the program's own memory, page-locked.
    Registered,
}

impl MemKind {
    /// Addressable by the device as device memory (a valid device side of a copy).
    pub fn is_device(self) -> bool {
        matches!(self, MemKind::Device | MemKind::Managed)
    }
}

/// An anonymous private mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; who may touch the bytes is the CUDA
// program's business, exactly as for real device memory.
unsafe impl Send for Mapping {}
// SAFETY: as above; `Mapping` exposes no interior mutability of its own.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(len: usize) -> Option<Self> {
        // SAFETY: an anonymous mapping with no address hint has no preconditions.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        NonNull::new(ptr.cast::<u8>()).map(|ptr| Self { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned, and this is the only owner.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[derive(Debug)]
pub(crate) struct Allocation {
    pub base: usize,
    pub len: usize,
    pub kind: MemKind,
    /// The device it lives on, or that was current when host memory was pinned.
    pub device: usize,
    /// `None` for registered memory, which the program owns.
    _backing: Option<Mapping>,
    /// Set when the program frees it; queued work that still reaches it reports a fault.
    freed: AtomicBool,
}

impl Allocation {
    /// Whether `[addr, addr + len)` lies inside this allocation.
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        addr >= self.base
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.base + self.len)
    }

    pub fn is_freed(&self) -> bool {
        self.freed.load(Ordering::Acquire)
    }
}

#[derive(Debug, Default)]
pub(crate) struct MemoryMap {
    by_base: BTreeMap<usize, Arc<Allocation>>,
    /// Bytes of device and managed memory in use, per device.
    used: Vec<usize>,
}

impl MemoryMap {
    pub fn new(devices: usize) -> Self {
        Self {
            by_base: BTreeMap::new(),
            used: vec![0; devices],
        }
    }

    /// The allocation that contains `addr`, if any.
    pub fn find(&self, addr: usize) -> Option<&Arc<Allocation>> {
        let (_, alloc) = self.by_base.range(..=addr).next_back()?;
        (addr < alloc.base + alloc.len).then_some(alloc)
    }

    /// The allocation that starts exactly at `addr`, if any.
    pub fn find_base(&self, addr: usize) -> Option<&Arc<Allocation>> {
        self.by_base.get(&addr)
    }

    fn overlaps(&self, addr: usize, len: usize) -> bool {
        let end = addr.saturating_add(len);
        self.find(addr).is_some() || self.by_base.range(addr..end).next().is_some()
    }

    /// Maps `len` bytes of a new allocation of `kind` on `device`. `Registered` is not allocated
    /// here (see [`MemoryMap::register`]).
    pub fn allocate(&mut self, len: usize, kind: MemKind, device: usize) -> CudaResult<usize> {
        debug_assert!(len > 0 && kind != MemKind::Registered);
        if kind.is_device() {
            let used = self.used[device];
            if used.saturating_add(len) > DEVICE_MEMORY_BYTES {
                return Err(cudaError_t::cudaErrorMemoryAllocation);
            }
            self.used[device] = used + len;
        }
        let Some(mapping) = Mapping::new(len) else {
            if kind.is_device() {
                self.used[device] -= len;
            }
            return Err(cudaError_t::cudaErrorMemoryAllocation);
        };
        let base = mapping.ptr.as_ptr() as usize;
        self.insert(base, len, kind, device, Some(mapping));
        Ok(base)
    }

    /// Records the program's memory `[addr, addr + len)` as registered (page-locked).
    pub fn register(&mut self, addr: usize, len: usize, device: usize) -> CudaResult {
        if self.overlaps(addr, len) {
            return Err(cudaError_t::cudaErrorHostMemoryAlreadyRegistered);
        }
        self.insert(addr, len, MemKind::Registered, device, None);
        Ok(())
    }

    fn insert(
        &mut self,
        base: usize,
        len: usize,
        kind: MemKind,
        device: usize,
        backing: Option<Mapping>,
    ) {
        let alloc = Allocation {
            base,
            len,
            kind,
            device,
            _backing: backing,
            freed: AtomicBool::new(false),
        };
        self.by_base.insert(base, Arc::new(alloc));
    }

    /// Forgets the allocation starting at `base`. The memory itself goes when the last queued
    /// operation holding it finishes.
    pub fn remove(&mut self, base: usize) -> Option<Arc<Allocation>> {
        let alloc = self.by_base.remove(&base)?;
        alloc.freed.store(true, Ordering::Release);
        if alloc.kind.is_device() {
            self.used[alloc.device] -= alloc.len;
        }
        Some(alloc)
    }

    /// Bases of every allocation that belongs to `device` (for `cudaDeviceReset`).
    pub fn bases_on(&self, device: usize) -> Vec<usize> {
        self.by_base
            .values()
            .filter(|a| a.device == device)
            .map(|a| a.base)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interior_pointers_resolve_to_their_allocation() {
        let mut map = MemoryMap::new(1);
        let base = map.allocate(4096, MemKind::Device, 0).unwrap();
        assert_eq!(map.find(base).unwrap().base, base);
        assert_eq!(map.find(base + 4095).unwrap().base, base);
        assert!(map.find(base + 4096).is_none_or(|a| a.base != base));
        assert!(map.find_base(base + 1).is_none());
        let alloc = map.find(base + 10).unwrap();
        assert!(alloc.contains(base + 10, 4086));
        assert!(!alloc.contains(base + 10, 4087));
        assert!(!alloc.contains(base + 10, usize::MAX));
    }

    #[test]
    fn device_capacity_is_enforced_and_released() {
        let mut map = MemoryMap::new(1);
        assert_eq!(
            map.allocate(DEVICE_MEMORY_BYTES + 1, MemKind::Device, 0),
            Err(cudaError_t::cudaErrorMemoryAllocation)
        );
        let a = map
            .allocate(DEVICE_MEMORY_BYTES / 2, MemKind::Device, 0)
            .unwrap();
        let b = map
            .allocate(DEVICE_MEMORY_BYTES / 2, MemKind::Managed, 0)
            .unwrap();
        assert!(map.allocate(1, MemKind::Device, 0).is_err());
        // Pinned host memory does not count against the device.
        let p = map.allocate(4096, MemKind::Pinned, 0).unwrap();
        let removed = map.remove(a).unwrap();
        assert!(removed.is_freed());
        assert!(map.allocate(4096, MemKind::Device, 0).is_ok());
        map.remove(b);
        map.remove(p);
    }

    #[test]
    fn registration_rejects_overlap() {
        let mut map = MemoryMap::new(1);
        let buf = vec![0u8; 3 * 4096];
        let addr = buf.as_ptr() as usize;
        map.register(addr + 4096, 4096, 0).unwrap();
        for (start, len) in [(addr + 4096, 4096), (addr, 4097), (addr + 8191, 10)] {
            assert_eq!(
                map.register(start, len, 0),
                Err(cudaError_t::cudaErrorHostMemoryAlreadyRegistered)
            );
        }
        map.register(addr, 4096, 0).unwrap();
        assert_eq!(map.find(addr + 5000).unwrap().kind, MemKind::Registered);
    }
}
