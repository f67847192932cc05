//! `dlsym`, interposed: a lookup of a driver function that syncspy wraps gets the wrapper,
//! and a lookup of a runtime function syncspy exports, on the runtime's own handle, gets the
//! exported hook (`intercepted_runtime`: ctypes and cuda-python find the runtime that way).
//!
//! Programs that load the driver themselves (the CUDA runtime, static or shared; XLA's stubs;
//! cudarc) call `dlsym(handle, "cuGetProcAddress_v2")` or
//! `dlsym(handle, "cuStreamSynchronize")` with the handle `dlopen("libcuda.so.1")` gave them.
//! A lookup with a handle never sees LD_PRELOAD definitions, so the library defines `dlsym`
//! itself.
//!
//! The exported `dlsym` is a few instructions (x86-64 only): it asks `route` which function
//! should answer, then jumps there with the caller's arguments and return address intact.
//! Every other name goes to the real `dlsym` by that jump, so the
//! loader still sees the caller's own return address, and `RTLD_NEXT` keeps meaning "after
//! the caller". The wrapped names are answered by `intercepted`, which calls the real `dlsym`
//! and hands out a wrapper for what it found. An `RTLD_NEXT` lookup is never intercepted: it
//! means "the next definition after the caller", which only the real `dlsym`, seeing the
//! caller's return address, can answer. Made from libsyncspy it would be wrong: injected by
//! `syncspy attach` the library is loaded `RTLD_LOCAL` and nothing follows it (NULL), and
//! another interposer preloaded after it that looks up the function it wraps would be handed
//! its own definition back, and recurse. Only interposers look driver functions up that way.
//!
//! The real `dlsym` is found with `dlvsym(RTLD_NEXT, "dlsym", <glibc version>)`, which is not
//! interposed; the library's own lookups call it directly (`real::dlsym`), never the exported one.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::real::{dlsym as real, dlsym_fn as real_fn, DlsymFn};

/// Answers `dlsym` when the real one cannot be found (no known glibc version): not found.
unsafe extern "C" fn unavailable(_: *mut c_void, _: *const c_char) -> *mut c_void {
    std::ptr::null_mut()
}

/// Run before each lookup but `RTLD_NEXT` ones, once set (`on_lookup`): null, or an
/// `extern "C" fn()`.
static ON_LOOKUP: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// Has the exported `dlsym` run `f` before each lookup but `RTLD_NEXT` ones: the in-process
/// mode's check for modules loaded since its last pass (`attach::got`, `import syncspy`),
/// whose `dlsym` then answers nobody until their import slots are redirected.
pub(crate) fn on_lookup(f: extern "C" fn()) {
    ON_LOOKUP.store(f as *mut c_void, Ordering::Release);
}

/// Which function answers `dlsym(handle, name)`: the real `dlsym` for every name but the
/// wrapped driver functions looked up by handle or `RTLD_DEFAULT`, `intercepted` for those.
/// Called by the exported `dlsym` with its arguments; allocates nothing and takes no lock of
/// its own, except in `import syncspy`'s in-process mode, whose check (`on_lookup`) takes
/// a dynamic-linker lock for a moment and, when the loader has added objects since its last
/// pass, redirects their import slots first (never waiting for a lock of the library's).
extern "C" fn route(handle: *mut c_void, name: *const c_char) -> DlsymFn {
    let Some(real) = real_fn() else {
        return unavailable;
    };
    if name.is_null() || handle == libc::RTLD_NEXT {
        return real;
    }
    let check = ON_LOOKUP.load(Ordering::Acquire);
    if !check.is_null() {
        // SAFETY: only `on_lookup` stores here, an `extern "C" fn()`.
        let check = unsafe { std::mem::transmute::<*mut c_void, extern "C" fn()>(check) };
        check();
    }
    // SAFETY: `name` is the C string the program passed to dlsym (non-null), which dlsym
    // itself would read.
    let name = unsafe { CStr::from_ptr(name) };
    if super::wants(name.to_bytes()) {
        intercepted
    } else if crate::hooks::exports::hook(name.to_bytes()).is_some() {
        intercepted_runtime
    } else {
        real
    }
}

/// `dlsym` for a runtime function syncspy exports (`hooks::exports`): a program that looks
/// the runtime up on its own handle (ctypes, cuda-python) gets the exported hook, which then
/// records its calls under the name it called. Only when what the real lookup found is the
/// very function the hook forwards to: a second runtime (another copy, another version) keeps
/// its own functions, unseen as before, rather than have its calls sent to the first one.
unsafe extern "C" fn intercepted_runtime(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // SAFETY: `route` sends only non-null names here, the caller's C string.
    let name = unsafe { CStr::from_ptr(name) };
    // SAFETY: the program's own handle, which it passed to dlsym.
    let p = unsafe { real(handle, name) };
    if p.is_null() || !crate::config::tracking() {
        return p;
    }
    match crate::hooks::exports::hook(name.to_bytes()) {
        Some(hook) if hook != p && crate::real::lookup_runtime(name) == p => hook,
        _ => p,
    }
}

/// `dlsym` for a wrapped driver function: the real lookup, then the wrapper for what it found.
unsafe extern "C" fn intercepted(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // SAFETY: `route` sends only non-null names here, the caller's C string.
    let name = unsafe { CStr::from_ptr(name) };
    // SAFETY: the program's own handle, which it passed to dlsym.
    let p = unsafe { real(handle, name) };
    if p.is_null() {
        return p;
    }
    super::wrap_symbol(name.to_bytes(), p).unwrap_or(p)
}

/// The exported `dlsym`. It saves the two argument registers, calls `route` (the stack is
/// 16-byte aligned at the call: return address + two pushes + 8), restores them and jumps to
/// the function `route` returned, so that function returns straight to our caller.
///
/// # Safety
/// Same contract as glibc's `dlsym`.
#[cfg(all(target_arch = "x86_64", not(test)))]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {route}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "jmp rax",
        route = sym route,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_dlsym_is_found_and_routing_sends_other_names_to_it() {
        let real_dlsym = real_fn().expect("glibc's dlsym");
        // SAFETY: RTLD_DEFAULT and a C string literal.
        let getpid = unsafe { real_dlsym(libc::RTLD_DEFAULT, c"getpid".as_ptr()) };
        assert!(!getpid.is_null());
        // SAFETY: a pseudo-handle.
        assert_eq!(unsafe { real(libc::RTLD_DEFAULT, c"getpid") }, getpid);
        assert_eq!(
            route(std::ptr::null_mut(), c"getpid".as_ptr()) as usize,
            real_dlsym as usize
        );
        assert_eq!(
            route(std::ptr::null_mut(), std::ptr::null()) as usize,
            real_dlsym as usize
        );
        assert_eq!(
            route(std::ptr::null_mut(), c"cuStreamSynchronize".as_ptr()) as usize,
            intercepted as *const () as usize
        );
        // "The next definition after the caller" is the real dlsym's to answer.
        assert_eq!(
            route(libc::RTLD_NEXT, c"cuStreamSynchronize".as_ptr()) as usize,
            real_dlsym as usize
        );
        // A wrapped name that nothing defines: NULL, as the real dlsym answers.
        // SAFETY: the caller's contract: a handle and a C string.
        let none = unsafe { intercepted(libc::RTLD_DEFAULT, c"cuMemcpyDtoH_v2".as_ptr()) };
        assert!(none.is_null());
    }
}
