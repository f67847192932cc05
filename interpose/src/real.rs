//! Finding the real CUDA runtime functions behind the interposed ones.
//!
//! `dlsym(RTLD_NEXT, name)` finds them when the runtime is in the global scope (linked by
//! the program, or dlopened RTLD_GLOBAL). When it arrived later with RTLD_LOCAL (ctypes,
//! Python extension modules), RTLD_NEXT returns NULL although its callers still bind to our
//! symbols; then the loaded runtime is looked up by soname with RTLD_NOLOAD, and failing
//! that by walking the loaded objects for a path that names libcudart. Each symbol is
//! resolved once and cached.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

pub struct Real {
    name: &'static CStr,
    ptr: AtomicPtr<c_void>,
    /// The dynamic linker's `dlpi_adds` when resolution last failed (0: never failed). A
    /// failed lookup is retried only once more objects have been loaded, so a missing
    /// symbol costs one counter read per call, not a search.
    failed_at: AtomicU64,
}

impl Real {
    pub const fn new(name: &'static CStr) -> Real {
        Real {
            name,
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
        let adds = crate::stack::loader_adds();
        if self.failed_at.load(Ordering::Relaxed) == adds {
            return std::ptr::null_mut();
        }
        // SAFETY: dlsym/dlopen with valid C strings.
        let mut p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) };
        if p.is_null() {
            p = resolve_in_loaded_runtime(self.name);
        }
        if p.is_null() {
            self.failed_at.store(adds, Ordering::Relaxed);
        } else {
            self.ptr.store(p, Ordering::Relaxed);
        }
        p
    }
}

fn resolve_in_loaded_runtime(name: &CStr) -> *mut c_void {
    for soname in [c"libcudart.so.13", c"libcudart.so.12", c"libcudart.so"] {
        let p = sym_in(soname.as_ptr(), name);
        if !p.is_null() {
            return p;
        }
    }
    // A runtime loaded under another file name (vendored copies): find it by path.
    let mut found: Vec<u8> = Vec::new();
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: called by dl_iterate_phdr with a valid info and our `found`.
        unsafe {
            let found = &mut *(data as *mut Vec<u8>);
            let n = (*info).dlpi_name;
            if n.is_null() {
                return 0;
            }
            let path = CStr::from_ptr(n).to_bytes();
            let file = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
            if file.windows(9).any(|w| w == b"libcudart") {
                found.extend_from_slice(path);
                found.push(0);
                return 1;
            }
            0
        }
    }
    // SAFETY: the callback only reads `info` and writes `found`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut found as *mut Vec<u8> as *mut c_void) };
    if found.is_empty() {
        return std::ptr::null_mut();
    }
    sym_in(found.as_ptr() as *const c_char, name)
}

fn sym_in(object: *const c_char, name: &CStr) -> *mut c_void {
    // SAFETY: RTLD_NOLOAD only returns objects already loaded; the handle is closed again
    // (the object stays loaded: its other users hold references).
    unsafe {
        let h = libc::dlopen(object, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if h.is_null() {
            return std::ptr::null_mut();
        }
        let p = libc::dlsym(h, name.as_ptr());
        libc::dlclose(h);
        p
    }
}

/// `cudaErrorSharedObjectSymbolNotFound`: returned when no real function can be found, which
/// only happens when the program calls the runtime without any runtime loaded.
pub const MISSING: u32 =
    cudarc::runtime::sys::cudaError::cudaErrorSharedObjectSymbolNotFound as u32;
