//! Is this host address pinned (page-locked, mapped or managed)?
//!
//! The pointer-attribute query is the authority, but it costs a runtime call; the fast path
//! answers from what the library saw itself. Ranges returned by `cudaMallocHost` /
//! `cudaHostAlloc` / `cudaHostRegister` go into a lock-free registry (removed again before
//! `cudaFreeHost` / `cudaHostUnregister`), and each thread caches the last range it hit,
//! validated by a generation counter that every removal bumps. Addresses the registry does
//! not know (pinned by the driver API, by another library, or pageable) are asked of the
//! runtime each time: no negative answer is cached, so memory pinned behind our back is
//! still seen as pinned.

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use cudarc::runtime::sys::{cudaMemoryType, cudaPointerAttributes};

use crate::real::Real;

const SLOTS: usize = 4096;

struct Range {
    start: AtomicU64,
    /// Exclusive end; 0 while the slot is free or being filled.
    end: AtomicU64,
}

static RANGES: [Range; SLOTS] = [const {
    Range {
        start: AtomicU64::new(0),
        end: AtomicU64::new(0),
    }
}; SLOTS];
/// Slots `0..HIGH` may be in use.
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// Bumped on every removal; cached hits from an older generation are re-checked.
static GEN: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static LAST: Cell<(u64, u64, u64)> = const { Cell::new((0, 0, 0)) };
}

/// Records a pinned range `[start, start + len)`.
pub fn add(start: u64, len: u64) {
    if start == 0 || len == 0 {
        return;
    }
    for (i, r) in RANGES.iter().enumerate() {
        if r.start
            .compare_exchange(0, start, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            r.end.store(start.saturating_add(len), Ordering::Release);
            HIGH.fetch_max(i + 1, Ordering::AcqRel);
            return;
        }
    }
    // Registry full: lookups of this range fall back to the attribute query.
}

/// Forgets the range starting at `start`; returns its length if it was known.
pub fn remove(start: u64) -> Option<u64> {
    let high = HIGH.load(Ordering::Acquire).min(SLOTS);
    for r in &RANGES[..high] {
        if r.start.load(Ordering::Acquire) == start && start != 0 {
            let end = r.end.swap(0, Ordering::AcqRel);
            GEN.fetch_add(1, Ordering::AcqRel);
            r.start.store(0, Ordering::Release);
            return Some(end.saturating_sub(start));
        }
    }
    None
}

/// Forgets every range: a library injected again after a detach missed the frees made
/// while it was not called, and memory freed then may be pageable now. Unknown addresses are
/// asked of the runtime, so forgetting costs speed, never correctness.
pub fn clear() {
    let high = HIGH.load(Ordering::Acquire).min(SLOTS);
    for r in &RANGES[..high] {
        if r.end.swap(0, Ordering::AcqRel) != 0 {
            GEN.fetch_add(1, Ordering::AcqRel);
            r.start.store(0, Ordering::Release);
        }
    }
}

fn registry_lookup(addr: u64) -> Option<(u64, u64)> {
    let high = HIGH.load(Ordering::Acquire).min(SLOTS);
    for r in &RANGES[..high] {
        let s = r.start.load(Ordering::Acquire);
        if s != 0 && s <= addr {
            let e = r.end.load(Ordering::Acquire);
            if addr < e {
                return Some((s, e));
            }
        }
    }
    None
}

/// Whether `[addr, addr + len)` is pinned (or mapped, or managed) host memory.
#[inline]
pub fn is_pinned(addr: u64, len: u64) -> bool {
    let gen = GEN.load(Ordering::Acquire);
    let end = addr.saturating_add(len.max(1));
    let hit = LAST
        .try_with(|c| {
            let (s, e, g) = c.get();
            g == gen && s <= addr && end <= e
        })
        .unwrap_or(false);
    hit || is_pinned_slow(addr, end, gen)
}

#[cold]
#[inline(never)]
fn is_pinned_slow(addr: u64, end: u64, gen: u64) -> bool {
    if let Some((s, e)) = registry_lookup(addr) {
        if end <= e {
            let _ = LAST.try_with(|c| c.set((s, e, gen)));
            return true;
        }
    }
    matches!(memory_type(addr), Some(MemType::Host | MemType::Managed))
}

/// Memory types as the runtime reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemType {
    Unregistered,
    Host,
    Device,
    Managed,
}

static POINTER_ATTRIBUTES: Real = Real::new(c"cudaPointerGetAttributes");
static PEEK_LAST_ERROR: Real = Real::new(c"cudaPeekAtLastError");
static GET_LAST_ERROR: Real = Real::new(c"cudaGetLastError");

static DRIVER_POINTER_ATTRIBUTE: Real = Real::driver(c"cuPointerGetAttribute");

/// Asks the driver what `addr` is, where no runtime can be asked (a statically linked runtime,
/// the driver API alone). The driver keeps no last error, so there is nothing to restore.
fn driver_memory_type(addr: u64) -> Option<MemType> {
    use cudarc::driver::sys::{CUmemorytype, CUpointer_attribute};
    type Attr = unsafe extern "C" fn(*mut c_void, u32, u64) -> u32;
    let query: Attr = DRIVER_POINTER_ATTRIBUTE.get()?;
    let (mut memtype, mut managed) = (0u32, 0u32);
    let memtype_attr = CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE as u32;
    let managed_attr = CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED as u32;
    // SAFETY: `query` is the driver's cuPointerGetAttribute, resolved with its signature (the
    // attribute enum passed as its 4-byte value); both attributes write a 4-byte value
    // (`CUmemorytype`, a bool as `unsigned int`) into the local given.
    unsafe {
        if query((&raw mut memtype).cast(), memtype_attr, addr) != 0 {
            // Memory the driver does not know: plain (pageable) host memory.
            return Some(MemType::Unregistered);
        }
        if query((&raw mut managed).cast(), managed_attr, addr) == 0 && managed != 0 {
            return Some(MemType::Managed);
        }
    }
    Some(match memtype {
        x if x == CUmemorytype::CU_MEMORYTYPE_HOST as u32 => MemType::Host,
        x if x == CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 => MemType::Device,
        x if x == CUmemorytype::CU_MEMORYTYPE_ARRAY as u32 => MemType::Device,
        _ => MemType::Unregistered,
    })
}

/// Asks the runtime what `addr` is (the driver when no runtime can be found). Never disturbs the thread's CUDA last-error state: when
/// the application has an error pending, it does not ask (the answer is `None`, "unknown").
pub fn memory_type(addr: u64) -> Option<MemType> {
    type Attr = unsafe extern "C" fn(*mut cudaPointerAttributes, *const std::ffi::c_void) -> u32;
    type Err = unsafe extern "C" fn() -> u32;
    if addr == 0 {
        return Some(MemType::Unregistered);
    }
    let (Some(query), Some(peek), Some(get)) = (
        POINTER_ATTRIBUTES.get::<Attr>(),
        PEEK_LAST_ERROR.get::<Err>(),
        GET_LAST_ERROR.get::<Err>(),
    ) else {
        return driver_memory_type(addr);
    };
    // SAFETY: `peek` is the runtime's cudaPeekAtLastError, resolved with its signature; it
    // takes no arguments and has no preconditions.
    if unsafe { peek() } != 0 {
        return None;
    }
    let mut attrs = std::mem::MaybeUninit::<cudaPointerAttributes>::zeroed();
    // SAFETY: the struct layout is cudarc's for the CUDA 13 runtime; the runtime fills it.
    let rc = unsafe { query(attrs.as_mut_ptr(), addr as *const std::ffi::c_void) };
    if rc != 0 {
        // Older runtimes report unregistered memory as an error and make it the thread's
        // last error; nothing was pending before the query, so clearing it restores the state.
        // SAFETY: `get` is the runtime's cudaGetLastError, resolved with its signature; it
        // takes no arguments and has no preconditions.
        unsafe { get() };
        return None;
    }
    // Read the enum as its raw value: a runtime newer than the bindings may report a type
    // this build does not know, and holding that in a Rust enum would be undefined.
    // SAFETY: `type_` is the first field, a 4-byte C enum, initialised (zeroed or filled).
    let raw = unsafe {
        std::ptr::addr_of!((*attrs.as_ptr()).type_)
            .cast::<u32>()
            .read()
    };
    Some(match raw {
        x if x == cudaMemoryType::cudaMemoryTypeHost as u32 => MemType::Host,
        x if x == cudaMemoryType::cudaMemoryTypeDevice as u32 => MemType::Device,
        x if x == cudaMemoryType::cudaMemoryTypeManaged as u32 => MemType::Managed,
        _ => MemType::Unregistered,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_add_lookup_remove() {
        let base = 0x5000_0000_0000u64;
        add(base, 4096);
        assert!(is_pinned(base, 4096));
        assert!(is_pinned(base + 100, 10));
        // Cached hit, then removal invalidates the cache.
        assert!(is_pinned(base + 8, 8));
        assert_eq!(remove(base), Some(4096));
        assert_eq!(registry_lookup(base + 8), None);
        // No runtime loaded in the unit test: unknown memory is not pinned.
        assert!(!is_pinned(base + 8, 8));
        // A copy that runs past the end of a pinned range is not wholly pinned.
        add(base, 4096);
        assert!(!is_pinned(base + 4000, 200));
        remove(base);
    }
}
