//! What a queued operation does when the simulated device reaches it: copy bytes, set bytes,
//! call a host function, or nothing (markers for event records and stream waits).

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use cudarc::runtime::sys::cudaError_t;

use crate::engine::EngineRef;
use crate::kernel::Launch;
use crate::memory::Allocation;

/// Geometry of a copy, in bytes: `depth` slices of `height` rows of `width` bytes. A linear copy
/// is one row; a 2D copy has one slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub dst_pitch: usize,
    pub dst_slice: usize,
    pub src_pitch: usize,
    pub src_slice: usize,
}

impl Shape {
    pub fn linear(bytes: usize) -> Self {
        Self::planar(bytes, 1, bytes, bytes)
    }

    pub fn planar(width: usize, height: usize, dst_pitch: usize, src_pitch: usize) -> Self {
        Self {
            width,
            height,
            depth: 1,
            dst_pitch,
            dst_slice: 0,
            src_pitch,
            src_slice: 0,
        }
    }

    /// Bytes moved; `None` on overflow.
    pub fn bytes(&self) -> Option<usize> {
        self.width.checked_mul(self.height)?.checked_mul(self.depth)
    }

    /// Distance from the first to one past the last byte touched on one side; `None` on
    /// overflow, `Some(0)` for an empty copy.
    fn extent(&self, pitch: usize, slice: usize) -> Option<usize> {
        if self.bytes()? == 0 {
            return Some(0);
        }
        (self.depth - 1)
            .checked_mul(slice)?
            .checked_add((self.height - 1).checked_mul(pitch)?)?
            .checked_add(self.width)
    }

    pub fn dst_extent(&self) -> Option<usize> {
        self.extent(self.dst_pitch, self.dst_slice)
    }

    pub fn src_extent(&self) -> Option<usize> {
        self.extent(self.src_pitch, self.src_slice)
    }

    /// Calls `row(offset_in_dst, offset_in_src)` for every row, with the source laid out either
    /// as described or packed (`packed_src`, the layout of a staged snapshot).
    fn for_each_row(&self, packed_src: bool, mut row: impl FnMut(usize, usize)) {
        let (src_pitch, src_slice) = if packed_src {
            (self.width, self.width * self.height)
        } else {
            (self.src_pitch, self.src_slice)
        };
        for z in 0..self.depth {
            for y in 0..self.height {
                row(
                    z * self.dst_slice + y * self.dst_pitch,
                    z * src_slice + y * src_pitch,
                );
            }
        }
    }

    /// Copies the source rows into a packed buffer: the staging a driver does for pageable
    /// memory, which lets the call return before the device reads the data.
    ///
    /// # Safety
    /// `src` must be readable for [`Shape::src_extent`] bytes.
    pub unsafe fn gather(&self, src: *const u8) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes().unwrap_or(0));
        self.for_each_row(false, |_, s| {
            // SAFETY: every row lies within `src_extent`, which the caller made readable.
            let row = unsafe { std::slice::from_raw_parts(src.add(s), self.width) };
            out.extend_from_slice(row);
        });
        out
    }
}

/// Where a copy reads from.
#[derive(Debug)]
pub(crate) enum Source {
    /// Live memory: device, pinned, or pageable memory of a caller that waits for the copy.
    Memory(*const u8),
    /// A packed snapshot taken when the call was made.
    Staged(Vec<u8>),
}

#[derive(Debug)]
pub(crate) struct CopyWork {
    pub dst: *mut u8,
    pub src: Source,
    pub shape: Shape,
}

#[derive(Debug)]
pub(crate) struct MemsetWork {
    pub dst: *mut u8,
    pub value: u8,
    pub len: usize,
}

#[derive(Debug)]
pub(crate) struct HostFnWork {
    pub func: unsafe extern "C" fn(*mut c_void),
    pub user_data: *mut c_void,
}

#[derive(Debug)]
pub(crate) struct KernelWork {
    pub launch: Launch,
    /// Set at launch when an argument points outside reachable memory or is misaligned: the
    /// kernel faults when the device reaches it, as on a GPU.
    pub fault: Option<cudaError_t>,
    /// `SIMCUDA_GEMM_COMPUTE_MAX_N` at launch.
    pub gemm_max_n: usize,
}

#[derive(Debug)]
pub(crate) enum Work {
    Copy(CopyWork),
    Memset(MemsetWork),
    HostFn(HostFnWork),
    Kernel(KernelWork),
    /// An NCCL operation (`crate::nccl`): run by the stream's worker, which gets its modeled
    /// end from it (`NcclWork::run`).
    Nccl(crate::nccl::exec::NcclWork),
    /// Does nothing; its completion time is what an event records.
    Marker,
}

/// One operation as the API layer hands it to a stream.
#[derive(Debug)]
pub(crate) struct Op {
    pub work: Work,
    /// The engine it occupies, `None` for markers and host-to-host copies done by the CPU.
    pub engine: Option<EngineRef>,
    /// Modeled duration; host functions last as long as they really run.
    pub duration_ns: u64,
    /// Allocations the work touches, kept mapped until it has run.
    pub keep: Vec<Arc<Allocation>>,
}

// SAFETY: an `Op` is built on the calling thread and run once on a stream's worker thread.
// Its pointers are (a) inside allocations that `keep` holds mapped, (b) the memory of a caller
// that blocks until this op completes (pageable copies that are not staged), or (c) a host
// function and its argument, which CUDA's contract says run on a runtime thread.
unsafe impl Send for Op {}

impl Op {
    pub fn marker() -> Self {
        Self {
            work: Work::Marker,
            engine: None,
            duration_ns: 0,
            keep: Vec::new(),
        }
    }

    pub fn is_host_fn(&self) -> bool {
        matches!(self.work, Work::HostFn(_))
    }

    /// Performs the work. Fails with the device's fault when it would touch memory the program
    /// had freed (an illegal address) or a kernel's arguments are bad.
    pub fn run(&self) -> Result<(), cudaError_t> {
        if self.keep.iter().any(|a| a.is_freed()) {
            return Err(cudaError_t::cudaErrorIllegalAddress);
        }
        match &self.work {
            Work::Copy(copy) => {
                let (src, packed) = match &copy.src {
                    Source::Memory(p) => (*p, false),
                    Source::Staged(buf) => (buf.as_ptr(), true),
                };
                copy.shape.for_each_row(packed, |d, s| {
                    // SAFETY: the API layer checked both extents against live allocations or
                    // the caller's memory (see `unsafe impl Send for Op`); `ptr::copy` allows
                    // overlap, as cudaMemcpy within one allocation may.
                    unsafe { ptr::copy(src.add(s), copy.dst.add(d), copy.shape.width) };
                });
            }
            Work::Memset(set) => {
                // SAFETY: `dst..dst+len` was checked to lie in an allocation that `keep` holds.
                unsafe { ptr::write_bytes(set.dst, set.value, set.len) };
            }
            Work::HostFn(f) => {
                // SAFETY: the program passed this function and argument to cudaLaunchHostFunc.
                unsafe { (f.func)(f.user_data) };
            }
            Work::Kernel(k) => {
                if let Some(fault) = k.fault {
                    return Err(fault);
                }
                // SAFETY: at launch every range the kernel touches was found inside an
                // allocation, aligned, and `keep` holds those allocations (checked above to be
                // still live); the device owns the memory while the kernel runs.
                unsafe { k.launch.run(k.gemm_max_n) };
            }
            // The scheduler runs these itself (`NcclWork::run`): its end is not the op's.
            Work::Nccl(_) | Work::Marker => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemKind, MemoryMap};

    #[test]
    fn work_on_freed_memory_faults_instead_of_touching_it() {
        let mut map = MemoryMap::new(1);
        let base = map.allocate(4096, MemKind::Device, 0).unwrap();
        let op = Op {
            work: Work::Memset(MemsetWork {
                dst: base as *mut u8,
                value: 1,
                len: 4096,
            }),
            engine: None,
            duration_ns: 0,
            keep: vec![Arc::clone(map.find(base).unwrap())],
        };
        map.remove(base);
        // Still mapped (the op holds it), but the program freed it: a fault, no write.
        assert_eq!(op.run(), Err(cudaError_t::cudaErrorIllegalAddress));
    }

    #[test]
    fn extents_cover_the_last_row() {
        let s = Shape {
            width: 4,
            height: 3,
            depth: 2,
            dst_pitch: 8,
            dst_slice: 32,
            src_pitch: 4,
            src_slice: 12,
        };
        assert_eq!(s.bytes(), Some(24));
        assert_eq!(s.dst_extent(), Some(32 + 16 + 4));
        assert_eq!(s.src_extent(), Some(24));
        assert_eq!(Shape::linear(0).dst_extent(), Some(0));
        let huge = Shape::planar(usize::MAX, 2, usize::MAX, usize::MAX);
        assert_eq!(huge.bytes(), None);
    }

    #[test]
    fn pitched_copy_moves_only_the_rows() {
        let src: Vec<u8> = (0..24).collect();
        let mut dst = vec![0xffu8; 24];
        let shape = Shape::planar(3, 4, 6, 6);
        let op = Op {
            work: Work::Copy(CopyWork {
                dst: dst.as_mut_ptr(),
                src: Source::Memory(src.as_ptr()),
                shape,
            }),
            engine: None,
            duration_ns: 0,
            keep: Vec::new(),
        };
        assert!(op.run().is_ok());
        assert_eq!(&dst[..9], &[0, 1, 2, 0xff, 0xff, 0xff, 6, 7, 8]);
        // A staged snapshot is packed and lands in the same place.
        // SAFETY: `src` is 24 readable bytes, the source extent of `shape`.
        let staged = unsafe { shape.gather(src.as_ptr()) };
        assert_eq!(staged, vec![0, 1, 2, 6, 7, 8, 12, 13, 14, 18, 19, 20]);
        let mut dst2 = vec![0xffu8; 24];
        let op = Op {
            work: Work::Copy(CopyWork {
                dst: dst2.as_mut_ptr(),
                src: Source::Staged(staged),
                shape,
            }),
            engine: None,
            duration_ns: 0,
            keep: Vec::new(),
        };
        assert!(op.run().is_ok());
        assert_eq!(dst, dst2);
    }
}
