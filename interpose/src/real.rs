//! Finding the real CUDA runtime and driver functions behind the interposed ones.
//!
//! `dlsym(RTLD_NEXT, name)` finds them when the runtime is in the global scope (linked by
//! the program, or dlopened RTLD_GLOBAL). When it arrived later with RTLD_LOCAL (ctypes,
//! Python extension modules), RTLD_NEXT returns NULL although its callers still bind to our
//! symbols; then the loaded runtime is looked up by soname with RTLD_NOLOAD, and failing
//! that by walking the loaded objects for a path that names libcudart (`libcuda.so` for the
//! driver's). Each symbol is resolved once and cached. Lookups call the real `dlsym`
//! (`dlsym`), never the library's own interposed one.
//!
//! These calls stay hand-written, not libloading (which loads CUPTI, `gpu/cupti.rs`):
//! libloading's `Library::get` calls the symbol `dlsym`, which in this library binds to its
//! own exported `dlsym` when preloaded (`driver/dlsym.rs`). That one answers a `cuda*` name
//! looked up by handle with `intercepted_runtime`, which calls back here (`lookup_runtime`),
//! so `sym_in` through libloading would recurse; and a wrapped `cu*` name with `intercepted`,
//! which hands out syncspy's wrapper where the real function is wanted. `RTLD_NEXT` has no
//! libloading form, and the real `dlsym` is itself found with `dlvsym`. They also run inside
//! hooks (the first call of each function), where libloading's failed `RTLD_NOLOAD` opens (a
//! soname not loaded: common) would allocate a copy of the error message.

use std::ffi::{c_char, c_void, CStr};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use syncspy_abi::objects::for_each_object;

/// Which library defines a symbol: where to look when RTLD_NEXT does not find it.
#[derive(Clone, Copy)]
enum Lib {
    Runtime,
    Driver,
    Nccl,
}

pub struct Real {
    name: &'static CStr,
    lib: Lib,
    ptr: AtomicPtr<c_void>,
    /// The dynamic linker's `dlpi_adds` when resolution last failed (0: never failed). A
    /// failed lookup is retried only once more objects have been loaded, so a missing
    /// symbol costs one counter read per call, not a search.
    failed_at: AtomicU64,
}

impl Real {
    /// A CUDA runtime function (`libcudart`).
    pub const fn new(name: &'static CStr) -> Real {
        Real::of(name, Lib::Runtime)
    }

    /// A CUDA driver function (`libcuda.so.1`).
    pub const fn driver(name: &'static CStr) -> Real {
        Real::of(name, Lib::Driver)
    }

    /// An NCCL function (`libnccl.so.2`).
    pub const fn nccl(name: &'static CStr) -> Real {
        Real::of(name, Lib::Nccl)
    }

    const fn of(name: &'static CStr, lib: Lib) -> Real {
        Real {
            name,
            lib,
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            failed_at: AtomicU64::new(0),
        }
    }

    /// The real function as `F` (a matching `unsafe extern "C" fn` type), or `None` if no
    /// loaded object defines it.
    #[inline]
    pub fn get<F: Copy>(&self) -> Option<F> {
        const { assert!(size_of::<F>() == size_of::<*mut c_void>()) };
        let mut p = self.ptr.load(Ordering::Relaxed);
        if p.is_null() {
            p = self.resolve();
            if p.is_null() {
                return None;
            }
        }
        // SAFETY: `F` is a function pointer type of the same size as a data pointer (asserted),
        // and `p` is the address of the symbol the caller's signature describes.
        Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
    }

    /// Points this symbol at `f` instead of the runtime's (benchmarks only).
    #[doc(hidden)]
    pub fn preset(&self, f: *mut c_void) {
        self.ptr.store(f, Ordering::Relaxed);
    }

    #[cold]
    #[inline(never)]
    fn resolve(&self) -> *mut c_void {
        let adds = loader_adds();
        if self.failed_at.load(Ordering::Relaxed) == adds {
            return std::ptr::null_mut();
        }
        let p = lookup(self.name, self.lib);
        if p.is_null() {
            self.failed_at.store(adds, Ordering::Relaxed);
        } else {
            self.ptr.store(p, Ordering::Relaxed);
        }
        p
    }
}

/// Where `name` (of `lib`) is defined outside this library: what a hook of that name
/// forwards to (null if nowhere). Not cached: `Real` caches.
fn lookup(name: &CStr, lib: Lib) -> *mut c_void {
    // SAFETY: RTLD_NEXT is a pseudo-handle.
    let p = unsafe { dlsym(libc::RTLD_NEXT, name) };
    if !p.is_null() {
        return p;
    }
    match lib {
        Lib::Runtime => resolve_in_loaded(RUNTIME_SONAMES, b"libcudart", name),
        Lib::Driver => resolve_in_loaded(DRIVER_SONAMES, b"libcuda.so", name),
        Lib::Nccl => resolve_in_loaded(NCCL_SONAMES, b"libnccl", name),
    }
}

/// Where the runtime function `name` is defined outside this library (see `lookup`).
pub fn lookup_runtime(name: &CStr) -> *mut c_void {
    lookup(name, Lib::Runtime)
}

/// Where the driver function `name` is defined outside this library (see `lookup`).
pub fn lookup_driver(name: &CStr) -> *mut c_void {
    lookup(name, Lib::Driver)
}

const RUNTIME_SONAMES: &[&CStr] = &[c"libcudart.so.13", c"libcudart.so.12", c"libcudart.so"];
const DRIVER_SONAMES: &[&CStr] = &[c"libcuda.so.1", c"libcuda.so"];
const NCCL_SONAMES: &[&CStr] = &[c"libnccl.so.2", c"libnccl.so"];

fn resolve_in_loaded(sonames: &[&CStr], file_needle: &[u8], name: &CStr) -> *mut c_void {
    for soname in sonames {
        let p = sym_in(soname.as_ptr(), name);
        if !p.is_null() {
            return p;
        }
    }
    // A library loaded under another file name (vendored copies): find it by path.
    let mut buf = [0u8; libc::PATH_MAX as usize];
    match loaded_path_with(file_needle, &mut buf) {
        Some(path) => sym_in(path.as_ptr(), name),
        None => std::ptr::null_mut(),
    }
}

/// The path of the first loaded object whose file name contains `needle`, copied into `buf`:
/// copied because `dlopen` must not run while the loader's lock is held, into the caller's
/// buffer because this can run inside a hook. A path that does not fit is skipped (with a
/// `PATH_MAX` buffer, it could not be opened anyway).
pub(crate) fn loaded_path_with<'b>(needle: &[u8], buf: &'b mut [u8]) -> Option<&'b CStr> {
    let len = for_each_object(|o| {
        let full = o.name().to_bytes_with_nul();
        let path = o.name().to_bytes();
        let file = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
        if !needle.is_empty()
            && full.len() <= buf.len()
            && file.windows(needle.len()).any(|w| w == needle)
        {
            buf[..full.len()].copy_from_slice(full);
            return ControlFlow::Break(full.len());
        }
        ControlFlow::Continue(())
    })?;
    CStr::from_bytes_with_nul(&buf[..len]).ok()
}

pub(crate) fn sym_in(object: *const c_char, name: &CStr) -> *mut c_void {
    // SAFETY: RTLD_NOLOAD only returns objects already loaded; the handle is closed again
    // (the object stays loaded: its other users hold references).
    unsafe {
        let h = libc::dlopen(object, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if h.is_null() {
            return std::ptr::null_mut();
        }
        let p = dlsym(h, name); // the handle just opened
        libc::dlclose(h);
        p
    }
}

/// `cudaErrorSharedObjectSymbolNotFound`: returned when no real function can be found, which
/// only happens when the program calls the runtime without any runtime loaded.
pub const MISSING: u32 =
    cudarc::runtime::sys::cudaError::cudaErrorSharedObjectSymbolNotFound as u32;

/// `CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND`: the driver functions' `MISSING`.
pub const DRIVER_MISSING: u32 =
    cudarc::driver::sys::CUresult::CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND as u32;

pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

static DLSYM: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// The versions glibc has defined `dlsym` under: 2.34 (merged into libc), 2.2.5 (x86-64's
/// first), 2.17 (aarch64's first).
const DLSYM_VERSIONS: [&CStr; 3] = [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"];

/// The real `dlsym`, resolved once.
pub fn dlsym_fn() -> Option<DlsymFn> {
    let mut p = DLSYM.load(Ordering::Acquire);
    if p.is_null() {
        for v in DLSYM_VERSIONS {
            // SAFETY: NUL-terminated literals and the RTLD_NEXT pseudo-handle; dlvsym only
            // reads them and is not interposed by this library.
            p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), v.as_ptr()) };
            if !p.is_null() {
                break;
            }
        }
        if p.is_null() {
            return None;
        }
        DLSYM.store(p, Ordering::Release);
    }
    // SAFETY: `p` is glibc's `dlsym`, whose C signature `DlsymFn` is.
    Some(unsafe { std::mem::transmute::<*mut c_void, DlsymFn>(p) })
}

/// Looks `name` up with the real `dlsym` (libsyncspy is the caller, for `RTLD_NEXT`); NULL
/// when not found or when the real `dlsym` cannot be found.
///
/// # Safety
/// `handle` is a pseudo-handle (`RTLD_NEXT`, `RTLD_DEFAULT`) or a handle `dlopen` returned
/// that is still open.
pub unsafe fn dlsym(handle: *mut c_void, name: &CStr) -> *mut c_void {
    match dlsym_fn() {
        // SAFETY: `real` is glibc's dlsym; `handle` is valid (this function's `# Safety`) and
        // `name` a C string; dlsym only reads them.
        Some(real) => unsafe { real(handle, name.as_ptr()) },
        None => std::ptr::null_mut(),
    }
}

/// `dlpi_adds` of the dynamic linker: the number of objects ever loaded. Reading it stops
/// the iteration at the first object, so this costs one loader-lock round trip.
pub fn loader_adds() -> u64 {
    for_each_object(|o| ControlFlow::Break(o.adds())).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_loaded_object_by_file_name_and_its_symbols() {
        let mut buf = [0u8; libc::PATH_MAX as usize];
        let path = loaded_path_with(b"libc.so", &mut buf).expect("libc is loaded");
        assert!(path.to_bytes().contains(&b'/'), "{path:?}");
        // SAFETY: RTLD_DEFAULT and a C string literal.
        let getpid = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"getpid".as_ptr()) };
        assert!(!getpid.is_null());
        assert_eq!(sym_in(path.as_ptr(), c"getpid"), getpid);
        // Not loaded; too long for the buffer.
        assert_eq!(loaded_path_with(b"no-such-object", &mut buf), None);
        assert_eq!(loaded_path_with(b"libc.so", &mut [0u8; 4]), None);
    }
}
