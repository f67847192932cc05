//! The CUDA driver API (`libcuda.so.1`): wrappers for the driver functions that stall, handed
//! out where programs find driver functions.
//!
//! Three ways in, one set of bodies (`hooks.rs`):
//! - **Exported symbols** (`cuStreamSynchronize`, `cuMemcpyDtoH_v2`, ...) for programs linked
//!   against libcuda: LD_PRELOAD puts them first, as for the runtime functions.
//! - **`dlsym`** (`dlsym.rs`): `dlsym(handle, "cuMemcpyDtoH_v2")` on a handle of libcuda
//!   returns a wrapper of what the real `dlsym` found (XLA's stubs and cudarc load driver
//!   functions this way).
//! - **`cuGetProcAddress`** (and `_v2`, `_ptsz`), itself found through `dlsym`: the CUDA runtime,
//!   static or shared, and frameworks get every driver function from it.
//!
//! A wrapper must call the very function the program would have called, and there may be
//! several (the `_ptds`/`_ptsz` forms, another libcuda), so wrappers are instances: each
//! family (one C signature) has `INSTANCES` wrapper functions, each with a slot holding the
//! real function it forwards to. A real function gets the first free slot of its family and
//! keeps it; when a family's slots are used up, the real function is handed out unwrapped
//! (its calls are then not seen, and nothing else changes). Half of the slots are for
//! per-thread-default-stream forms, so a wrapper knows which it forwards to without a lookup.
//!
//! Only signatures syncspy knows are wrapped: exact exported names for `dlsym` (`BY_SYMBOL`:
//! the `_v2` forms, not the 32-bit first versions), and for `cuGetProcAddress` base names
//! requested at a `cudaVersion` at or after the one that introduced today's signature
//! (`BY_PROC`). Anything else passes through untouched.
//!
//! No double counting: a runtime call that syncspy records holds the thread's re-entrancy
//! guard while the runtime runs, so the driver call it makes is forwarded unrecorded
//! (`entry::hook`), and the driver wrappers keep no pinned ranges for it either.

pub mod dlsym;
pub mod hooks;

use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, Ordering};

/// One C signature of wrapped driver functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    CtxSync,
    StreamSync,
    EventSync,
    /// `cuStreamQuery`, `cuEventQuery`: calls that do not wait, whose not-ready runs are
    /// `poll_wait`s.
    StreamQuery,
    EventQuery,
    Memcpy,
    HtoD,
    DtoH,
    DtoD,
    Memcpy2D,
    Memcpy3D,
    MemcpyAsync,
    HtoDAsync,
    DtoHAsync,
    DtoDAsync,
    Memcpy2DAsync,
    Memcpy3DAsync,
    MemFree,
    MemFreeHost,
    MemAllocHost,
    MemHostAlloc,
    MemHostRegister,
    MemHostUnregister,
    /// `cuLaunchHostFunc`: a call that does not wait, whose host function may end a
    /// `host_wait` (`hostwait`).
    LaunchHostFunc,
    /// `cuLaunchKernel`, `cuLaunchKernelEx`, `cuLaunchCooperativeKernel`, `cuGraphLaunch`:
    /// calls that queue work and are not counted; the first after a stall ends the
    /// measurement of the GPU idle behind it (`behind`).
    LaunchKernel,
    LaunchKernelEx,
    LaunchCooperative,
    GraphLaunch,
    /// `cuGetProcAddress` (CUDA 11.3 to 11.8 signature).
    GetProc,
    /// `cuGetProcAddress_v2` (CUDA 12 and later).
    GetProcV2,
}

const FAMILIES: usize = Family::GetProcV2 as usize + 1;
/// Wrapper instances per family: `0..PTDS_BASE` for legacy-stream forms, the rest for
/// per-thread-default-stream forms.
pub const INSTANCES: usize = 8;
pub const PTDS_BASE: usize = INSTANCES / 2;

static SLOTS: [[AtomicPtr<c_void>; INSTANCES]; FAMILIES] =
    [const { [const { AtomicPtr::new(std::ptr::null_mut()) }; INSTANCES] }; FAMILIES];

use Family::*;

/// Exported driver symbols with the signature of a family, and whether each is a
/// per-thread-default-stream form.
const BY_SYMBOL: &[(&[u8], Family, bool)] = &[
    (b"cuCtxSynchronize", CtxSync, false),
    (b"cuCtxSynchronize_v2", CtxSync, false),
    (b"cuStreamSynchronize", StreamSync, false),
    (b"cuStreamSynchronize_ptsz", StreamSync, true),
    (b"cuEventSynchronize", EventSync, false),
    (b"cuStreamQuery", StreamQuery, false),
    (b"cuStreamQuery_ptsz", StreamQuery, true),
    (b"cuEventQuery", EventQuery, false),
    (b"cuMemcpy", Memcpy, false),
    (b"cuMemcpy_ptds", Memcpy, true),
    (b"cuMemcpyHtoD_v2", HtoD, false),
    (b"cuMemcpyHtoD_v2_ptds", HtoD, true),
    (b"cuMemcpyDtoH_v2", DtoH, false),
    (b"cuMemcpyDtoH_v2_ptds", DtoH, true),
    (b"cuMemcpyDtoD_v2", DtoD, false),
    (b"cuMemcpyDtoD_v2_ptds", DtoD, true),
    (b"cuMemcpy2D_v2", Memcpy2D, false),
    (b"cuMemcpy2D_v2_ptds", Memcpy2D, true),
    (b"cuMemcpy2DUnaligned_v2", Memcpy2D, false),
    (b"cuMemcpy2DUnaligned_v2_ptds", Memcpy2D, true),
    (b"cuMemcpy3D_v2", Memcpy3D, false),
    (b"cuMemcpy3D_v2_ptds", Memcpy3D, true),
    (b"cuMemcpyAsync", MemcpyAsync, false),
    (b"cuMemcpyAsync_ptsz", MemcpyAsync, true),
    (b"cuMemcpyHtoDAsync_v2", HtoDAsync, false),
    (b"cuMemcpyHtoDAsync_v2_ptsz", HtoDAsync, true),
    (b"cuMemcpyDtoHAsync_v2", DtoHAsync, false),
    (b"cuMemcpyDtoHAsync_v2_ptsz", DtoHAsync, true),
    (b"cuMemcpyDtoDAsync_v2", DtoDAsync, false),
    (b"cuMemcpyDtoDAsync_v2_ptsz", DtoDAsync, true),
    (b"cuMemcpy2DAsync_v2", Memcpy2DAsync, false),
    (b"cuMemcpy2DAsync_v2_ptsz", Memcpy2DAsync, true),
    (b"cuMemcpy3DAsync_v2", Memcpy3DAsync, false),
    (b"cuMemcpy3DAsync_v2_ptsz", Memcpy3DAsync, true),
    (b"cuMemFree_v2", MemFree, false),
    (b"cuMemFreeHost", MemFreeHost, false),
    (b"cuMemAllocHost_v2", MemAllocHost, false),
    (b"cuMemHostAlloc", MemHostAlloc, false),
    (b"cuMemHostRegister", MemHostRegister, false),
    (b"cuMemHostRegister_v2", MemHostRegister, false),
    (b"cuMemHostUnregister", MemHostUnregister, false),
    (b"cuLaunchHostFunc", LaunchHostFunc, false),
    (b"cuLaunchHostFunc_ptsz", LaunchHostFunc, true),
    (b"cuLaunchKernel", LaunchKernel, false),
    (b"cuLaunchKernel_ptsz", LaunchKernel, true),
    (b"cuLaunchKernelEx", LaunchKernelEx, false),
    (b"cuLaunchKernelEx_ptsz", LaunchKernelEx, true),
    (b"cuLaunchCooperativeKernel", LaunchCooperative, false),
    (b"cuLaunchCooperativeKernel_ptsz", LaunchCooperative, true),
    (b"cuGraphLaunch", GraphLaunch, false),
    (b"cuGraphLaunch_ptsz", GraphLaunch, true),
    (b"cuGetProcAddress", GetProc, false),
    (b"cuGetProcAddress_ptsz", GetProc, true),
    (b"cuGetProcAddress_v2", GetProcV2, false),
    (b"cuGetProcAddress_v2_ptsz", GetProcV2, true),
];

/// Base names `cuGetProcAddress` is asked for, the family of what it returns, and the
/// `cudaVersion` from which it returns that signature (cudaTypedefs.h's `PFN_..._vNNNN`):
/// the `_v2` copies and their 64-bit sizes and device pointers date from CUDA 3.2.
/// `cuGetProcAddress` itself has two entries: the 5-argument form from CUDA 12.0.
const BY_PROC: &[(&[u8], Family, i32)] = &[
    (b"cuCtxSynchronize", CtxSync, 0),
    (b"cuStreamSynchronize", StreamSync, 0),
    (b"cuEventSynchronize", EventSync, 0),
    (b"cuStreamQuery", StreamQuery, 0),
    (b"cuEventQuery", EventQuery, 0),
    (b"cuMemcpy", Memcpy, 0),
    (b"cuMemcpyHtoD", HtoD, 3020),
    (b"cuMemcpyDtoH", DtoH, 3020),
    (b"cuMemcpyDtoD", DtoD, 3020),
    (b"cuMemcpy2D", Memcpy2D, 3020),
    (b"cuMemcpy2DUnaligned", Memcpy2D, 3020),
    (b"cuMemcpy3D", Memcpy3D, 3020),
    (b"cuMemcpyAsync", MemcpyAsync, 0),
    (b"cuMemcpyHtoDAsync", HtoDAsync, 3020),
    (b"cuMemcpyDtoHAsync", DtoHAsync, 3020),
    (b"cuMemcpyDtoDAsync", DtoDAsync, 3020),
    (b"cuMemcpy2DAsync", Memcpy2DAsync, 3020),
    (b"cuMemcpy3DAsync", Memcpy3DAsync, 3020),
    (b"cuMemFree", MemFree, 3020),
    (b"cuMemFreeHost", MemFreeHost, 0),
    (b"cuMemAllocHost", MemAllocHost, 3020),
    (b"cuMemHostAlloc", MemHostAlloc, 0),
    (b"cuMemHostRegister", MemHostRegister, 0),
    (b"cuMemHostUnregister", MemHostUnregister, 0),
    (b"cuLaunchHostFunc", LaunchHostFunc, 10000),
    (b"cuLaunchKernel", LaunchKernel, 4000),
    (b"cuLaunchKernelEx", LaunchKernelEx, 11060),
    (b"cuLaunchCooperativeKernel", LaunchCooperative, 9000),
    (b"cuGraphLaunch", GraphLaunch, 10000),
    (b"cuGetProcAddress", GetProcV2, 12000),
    (b"cuGetProcAddress", GetProc, 0),
];

/// Whether `dlsym` must answer `name` itself. Cheap for everything else: driver names start
/// with `cu` and an upper-case letter (runtime names with `cuda`).
pub fn wants(name: &[u8]) -> bool {
    name.len() > 2
        && name.starts_with(b"cu")
        && name[2].is_ascii_uppercase()
        && BY_SYMBOL.iter().any(|(n, ..)| *n == name)
}

/// The wrapper to hand out for the exported driver symbol `name` found at `real`, if syncspy
/// wraps it.
pub fn wrap_symbol(name: &[u8], real: *mut c_void) -> Option<*mut c_void> {
    let (_, family, ptds) = BY_SYMBOL.iter().find(|(n, ..)| *n == name)?;
    wrapper_for(*family, real, *ptds)
}

/// The wrapper to hand out for what `cuGetProcAddress(name, version, ...)` returned.
pub fn wrap_proc(name: &[u8], version: i32, ptds: bool, real: *mut c_void) -> Option<*mut c_void> {
    let (_, family, _) = BY_PROC
        .iter()
        .find(|(n, _, since)| *n == name && version >= *since)?;
    wrapper_for(*family, real, ptds)
}

/// The wrapper instance of `family` that forwards to `real`, claiming a free slot if `real`
/// has none yet. `None` (hand out `real` itself) when recording is off, when `real` is one of
/// libsyncspy's own functions, or when the family's slots are all taken.
fn wrapper_for(family: Family, real: *mut c_void, ptds: bool) -> Option<*mut c_void> {
    if real.is_null() || !crate::config::tracking() || !enabled() || is_own(real) {
        return None;
    }
    let base = if ptds { PTDS_BASE } else { 0 };
    for (i, slot) in SLOTS[family as usize]
        .iter()
        .enumerate()
        .skip(base)
        .take(PTDS_BASE)
    {
        let cur = slot.load(Ordering::Acquire);
        let ours = cur == real
            || (cur.is_null()
                && match slot.compare_exchange(
                    std::ptr::null_mut(),
                    real,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => true,
                    Err(now) => now == real,
                });
        if ours {
            return Some(hooks::instance(family, i));
        }
    }
    None
}

/// Whether `dlsym` and `cuGetProcAddress` hand out wrappers: not with `SYNCSPY_DRIVER=0`
/// (then only the runtime functions, and driver functions a program links directly, are
/// seen: what the library saw before it knew the driver; for comparisons).
fn enabled() -> bool {
    use std::sync::atomic::AtomicU8;
    static ON: AtomicU8 = AtomicU8::new(2);
    match ON.load(Ordering::Relaxed) {
        0 => false,
        1 => true,
        _ => {
            let on = match std::env::var("SYNCSPY_DRIVER") {
                Err(std::env::VarError::NotPresent) => true,
                Ok(v) if v.trim().is_empty() => true,
                Ok(v) => crate::config::parse_bool(&v).unwrap_or_else(|| {
                    eprintln!(
                        "syncspy: warning: SYNCSPY_DRIVER={v:?} is not 0 or 1: the default 1 used"
                    );
                    true
                }),
                Err(std::env::VarError::NotUnicode(v)) => {
                    eprintln!(
                        "syncspy: warning: SYNCSPY_DRIVER={v:?} is not 0 or 1: the default 1 used"
                    );
                    true
                }
            };
            ON.store(on as u8, Ordering::Relaxed);
            on
        }
    }
}

/// The real function behind wrapper instance `i` of `family`, as `F` (the family's C
/// signature).
#[inline(always)]
fn slot_fn<F: Copy>(family: Family, i: usize) -> Option<F> {
    const { assert!(size_of::<F>() == size_of::<*mut c_void>()) };
    let p = SLOTS[family as usize][i].load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    // SAFETY: `F` is a function pointer type of the same size as a data pointer (asserted);
    // a slot of `family` only ever holds a function with that family's signature
    // (`wrap_symbol`, `wrap_proc`), and the caller asks for that signature.
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// Whether `p` lies in libsyncspy itself (an exported wrapper found by a lookup).
fn is_own(p: *mut c_void) -> bool {
    let mut a = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    let mut b = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr only reads the address and writes the out-struct it is given.
    let (ra, rb) = unsafe {
        (
            libc::dladdr(p, a.as_mut_ptr()),
            libc::dladdr(is_own as *const c_void, b.as_mut_ptr()),
        )
    };
    // SAFETY: both were zero-initialised and dladdr fills them on success.
    ra != 0 && rb != 0 && unsafe { a.assume_init().dli_fbase == b.assume_init().dli_fbase }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_signatures_are_wrapped() {
        assert!(wants(b"cuMemcpyDtoH_v2"));
        assert!(wants(b"cuGetProcAddress_v2"));
        // The 32-bit first versions, other driver functions, runtime names.
        assert!(!wants(b"cuMemcpyDtoH"));
        assert!(!wants(b"cuMemFree"));
        assert!(!wants(b"cuLaunchHostFunc_v2"));
        assert!(!wants(b"cuModuleLaunch"));
        assert!(!wants(b"cudaStreamSynchronize"));
        // Launches are wrapped: the first after a stall ends its GPU idle measurement.
        assert!(wants(b"cuLaunchKernel"));
        assert!(wants(b"cuGraphLaunch_ptsz"));
        assert!(!wants(b"cu"));
        // cuGetProcAddress: old versions get no wrapper, cuGetProcAddress itself the
        // signature of the version asked for.
        let fake = 0x1000 as *mut c_void;
        assert_eq!(wrap_proc(b"cuMemcpyDtoH", 3010, false, fake), None);
        assert_eq!(wrap_proc(b"cuLaunchKernelEx", 11050, false, fake), None);
        assert_eq!(wrap_proc(b"cuModuleLoad", 13000, false, fake), None);
        let w = wrap_proc(b"cuMemcpyDtoH", 13000, false, fake).expect("wrapped");
        assert_eq!(w, hooks::instance(DtoH, 0));
        // The same real function keeps its wrapper; a per-thread form gets another half.
        assert_eq!(wrap_symbol(b"cuMemcpyDtoH_v2", fake), Some(w));
        assert_eq!(
            wrap_symbol(b"cuMemcpyDtoH_v2_ptds", 0x2000 as *mut c_void),
            Some(hooks::instance(DtoH, PTDS_BASE))
        );
        assert_eq!(
            wrap_proc(b"cuGetProcAddress", 12000, false, fake),
            Some(hooks::instance(GetProcV2, 0))
        );
        assert_eq!(
            wrap_proc(b"cuGetProcAddress", 11080, false, fake),
            Some(hooks::instance(GetProc, 0))
        );
        // Full: the real function itself is handed out.
        for i in 0..PTDS_BASE {
            let p = (0x10_000 * (i + 1)) as *mut c_void;
            assert_eq!(
                wrap_symbol(b"cuEventSynchronize", p),
                Some(hooks::instance(EventSync, i))
            );
        }
        assert_eq!(
            wrap_symbol(b"cuEventSynchronize", 0x99_000 as *mut c_void),
            None
        );
        assert_eq!(slot_fn::<usize>(EventSync, 1), Some(0x20_000));
        // libsyncspy's own functions are never wrapped.
        assert_eq!(
            wrap_symbol(b"cuStreamSynchronize", is_own as *mut c_void),
            None
        );
    }
}
