//! Redirecting a running process's calls into the CUDA runtime through the hooks, by
//! rewriting import slots (GOT entries) of its loaded modules; and putting them back.
//!
//! For every loaded module (but this library and the vDSO) the dynamic section gives the
//! relocation tables. A `R_X86_64_JUMP_SLOT` (calls through the PLT) or `R_X86_64_GLOB_DAT`
//! (`-fno-plt` calls, address-taking) relocation against an undefined symbol that this
//! library exports as a hook is a slot to redirect: a `cuda*` runtime function, a `cu*`
//! driver function (programs linked against libcuda), and `dlsym`, so that a driver function
//! looked up after attach (`dlsym(handle, "cuStreamSynchronize")`, `cuGetProcAddress` found
//! that way) is handed out wrapped, as under the preload. Its current 8 bytes are kept as
//! the original: the real function when bound, or, under lazy binding with the slot not
//! yet resolved, the module's own PLT stub (restoring that lets the next call resolve as it
//! would have). A slot bound somewhere other than the function the hook forwards to (another
//! copy, another interposer) is left alone and reported. Driver function pointers the
//! program fetched before attach (the CUDA runtime's table from `cuGetProcAddress`) stay
//! unseen: they are in no import slot.
//!
//! The store is one aligned 8-byte atomic write; a read-only page (full RELRO) is made
//! writable for it and given back its protection at once (the protection is read after the
//! module is pinned: a module another thread is loading is then relocated and protected). A
//! module with redirected slots is pinned with `dlopen(RTLD_NOLOAD)` until detach, so that a
//! `dlclose` cannot unmap the slots.
//!
//! The same redirection serves `import syncspy` (the **in-process mode**, `syncspy_import_hooks`):
//! there the library is loaded `RTLD_GLOBAL` after the C library, so its exported `cuda*`
//! hooks bind the references the loader resolves later, but its `dlsym` comes after glibc's
//! and answers nobody. Lookups by handle (`ctypes.CDLL("libcudart.so.13").cudaMemcpy`,
//! cuda-python, the runtime's own `dlsym(libcuda, "cuGetProcAddress_v2")`) then got the
//! runtime's and the driver's own functions: a ctypes call of the runtime was not seen at
//! all, or only as the driver calls under it, by the driver's names. Redirecting every
//! module's `dlsym` slot to the library's `dlsym` gives them what `syncspy run`'s preload
//! gives: the runtime's exported hooks and the wrapped driver functions. Modules loaded
//! later are redirected at the next lookup made through a redirected `dlsym` once the
//! loader has added objects (Python's import calls `dlsym(handle, "PyInit_...")` right after
//! `dlopen`, ctypes looks each function up), and whenever the Python side asks
//! (`syncspy.status()`, `watch()`). Nothing is restored there: the redirected slots, and the
//! pins of their modules, stay for the life of the process.

use std::ffi::{c_void, CStr, CString};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use syncspy_abi::objects::for_each_object;

const R_X86_64_64: u32 = 1;
const R_X86_64_GLOB_DAT: u32 = 6;
const R_X86_64_JUMP_SLOT: u32 = 7;

const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_RELAENT: i64 = 9;
const DT_STRSZ: i64 = 10;
const DT_JMPREL: i64 = 23;

#[repr(C)]
struct Dyn {
    tag: i64,
    val: u64,
}

#[repr(C)]
struct Rela {
    offset: u64,
    info: u64,
    addend: i64,
}

#[repr(C)]
struct Sym {
    name: u32,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

/// One redirected slot.
struct Slot {
    addr: u64,
    original: u64,
    hook: u64,
    /// The runtime's function, which a lazy resolve racing the patch may write.
    real: u64,
    /// The owning module's mapped range (an unresolved slot points into it).
    module: (u64, u64),
}

struct Pinned(*mut c_void);
// SAFETY: a dlopen handle is a process-wide token; dlclose may be called from any thread.
unsafe impl Send for Pinned {}

#[derive(Default)]
struct State {
    slots: Vec<Slot>,
    pins: Vec<Pinned>,
    /// Modules already looked at: (load bias, path).
    seen: Vec<(u64, Vec<u8>)>,
}

static STATE: Mutex<State> = Mutex::new(State {
    slots: Vec::new(),
    pins: Vec::new(),
    seen: Vec::new(),
});

/// A loaded module as copied out of `dl_iterate_phdr` (nothing of the loader's is kept).
struct Module {
    path: Vec<u8>,
    bias: u64,
    dynamic: Option<u64>,
    range: (u64, u64),
}

fn modules() -> Vec<Module> {
    let mut v = Vec::new();
    for_each_object::<()>(|o| {
        let dynamic = o
            .program_headers()
            .iter()
            .find(|ph| ph.p_type == libc::PT_DYNAMIC)
            .map(|ph| o.bias().wrapping_add(ph.p_vaddr));
        let range = o.extent().map(|r| (r.start, r.end)).unwrap_or((0, 0));
        v.push(Module {
            path: o.name().to_bytes().to_vec(),
            bias: o.bias(),
            dynamic,
            range,
        });
        ControlFlow::Continue(())
    });
    v
}

fn own_range() -> (u64, u64) {
    let here = own_range as *const () as u64;
    modules()
        .into_iter()
        .find(|m| m.range.0 <= here && here < m.range.1)
        .map(|m| m.range)
        .unwrap_or((0, 0))
}

/// This library's export `name`, if it is one of its own functions (dlsym on its handle also
/// searches its dependencies).
fn own_export(name: &CStr, own: (u64, u64)) -> Option<u64> {
    let mut info: libc::Dl_info = empty_dl_info();
    // SAFETY: `info` is a valid out-pointer; dladdr only inspects the loader's tables.
    if unsafe { libc::dladdr(own_range as *const c_void, &mut info) } == 0
        || info.dli_fname.is_null()
    {
        return None;
    }
    // SAFETY: dli_fname is the loader's NUL-terminated path of this library, which is
    // loaded (this code runs in it); RTLD_NOLOAD takes a reference only, dropped below.
    let h = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return None;
    }
    // SAFETY: a handle just returned by dlopen and a NUL-terminated name (the real dlsym:
    // this library's own `dlsym` export is an interposer).
    let p = unsafe { crate::real::dlsym(h, name) } as u64;
    // SAFETY: closes the reference taken above; the library stays loaded.
    unsafe { libc::dlclose(h) };
    (own.0 <= p && p < own.1).then_some(p)
}

fn empty_dl_info() -> libc::Dl_info {
    libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    }
}

/// Pins a loaded module by path (the main program by the null path) so that it stays
/// mapped; `None` if it is not loaded (any more).
fn pin(path: &[u8]) -> Option<Pinned> {
    let h = if path.is_empty() {
        // SAFETY: dlopen(NULL) returns the main program's handle.
        unsafe { libc::dlopen(std::ptr::null(), libc::RTLD_LAZY) }
    } else {
        let c = CString::new(path).ok()?;
        // SAFETY: a NUL-terminated path; RTLD_NOLOAD never loads anything new.
        unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) }
    };
    (!h.is_null()).then_some(Pinned(h))
}

fn unpin(p: Pinned) {
    // SAFETY: a handle from `pin`, closed once.
    unsafe { libc::dlclose(p.0) };
}

/// The dynamic-section addresses of a module: glibc relocates them in place when the section
/// is writable, and leaves them as virtual addresses when it is not (and for the vDSO).
fn dyn_ptr(bias: u64, v: u64) -> u64 {
    if v < bias {
        v.wrapping_add(bias)
    } else {
        v
    }
}

#[derive(Default)]
struct Tables {
    symtab: u64,
    strtab: u64,
    strsz: u64,
    jmprel: u64,
    pltrelsz: u64,
    rela: u64,
    relasz: u64,
    relaent: u64,
}

/// # Safety
/// `dynamic` is the address of a loaded, pinned module's `PT_DYNAMIC`.
unsafe fn tables(bias: u64, dynamic: u64) -> Tables {
    let mut t = Tables {
        relaent: size_of::<Rela>() as u64,
        ..Tables::default()
    };
    let mut d = dynamic as *const Dyn;
    for _ in 0..4096 {
        // SAFETY: the dynamic section is an array of `Dyn` ending in DT_NULL, mapped while
        // the module is (caller's contract); at most 4096 entries are read.
        let e = unsafe { &*d };
        match e.tag {
            DT_NULL => break,
            DT_SYMTAB => t.symtab = dyn_ptr(bias, e.val),
            DT_STRTAB => t.strtab = dyn_ptr(bias, e.val),
            DT_STRSZ => t.strsz = e.val,
            DT_JMPREL => t.jmprel = dyn_ptr(bias, e.val),
            DT_PLTRELSZ => t.pltrelsz = e.val,
            DT_RELA => t.rela = dyn_ptr(bias, e.val),
            DT_RELASZ => t.relasz = e.val,
            DT_RELAENT => t.relaent = e.val,
            _ => {}
        }
        // SAFETY: still inside the array (the DT_NULL entry ends it).
        d = unsafe { d.add(1) };
    }
    t
}

/// What one module's scan found, for the report.
#[derive(Default)]
struct Coverage {
    patched: Vec<String>,
    elsewhere: Vec<String>,
    in_data: Vec<String>,
    failed: Vec<String>,
}

/// Which real function a hooked import forwards to, found the way the hook finds it (so the
/// slot is redirected only where the hook will call the very function it replaces).
fn real_of(name: &CStr) -> u64 {
    let bytes = name.to_bytes();
    if bytes == b"dlsym" {
        return crate::real::dlsym_fn().map_or(0, |f| f as usize as u64);
    }
    if is_driver_name(bytes) {
        return crate::real::lookup_driver(name) as u64;
    }
    crate::real::lookup_runtime(name) as u64
}

/// Page protection of the mapping holding `addr`, from /proc/self/maps.
fn protection(maps: &str, addr: u64) -> Option<i32> {
    maps.lines().find_map(|l| {
        let (range, rest) = l.split_once(' ')?;
        let (a, b) = range.split_once('-')?;
        let (a, b) = (
            u64::from_str_radix(a, 16).ok()?,
            u64::from_str_radix(b, 16).ok()?,
        );
        if !(a <= addr && addr < b) {
            return None;
        }
        let p = rest.as_bytes();
        let mut prot = 0;
        if p.first() == Some(&b'r') {
            prot |= libc::PROT_READ;
        }
        if p.get(1) == Some(&b'w') {
            prot |= libc::PROT_WRITE;
        }
        if p.get(2) == Some(&b'x') {
            prot |= libc::PROT_EXEC;
        }
        Some(prot)
    })
}

/// Stores `value` into the slot at `addr` (8-aligned, in a pinned module), making its page
/// writable for the store if it is not. False if the page could not be made writable.
fn store(addr: u64, value: u64, maps: &str) -> bool {
    if !addr.is_multiple_of(8) {
        return false;
    }
    let Some(prot) = protection(maps, addr) else {
        return false;
    };
    let page = addr & !4095;
    if prot & libc::PROT_WRITE == 0 {
        // SAFETY: `page` is the page of a GOT slot of a pinned module; adding write access
        // changes nothing else about it.
        if unsafe { libc::mprotect(page as *mut c_void, 4096, prot | libc::PROT_WRITE) } != 0 {
            return false;
        }
    }
    // SAFETY: `addr` is an 8-aligned GOT slot, writable now, that the program only ever
    // reads as a whole pointer (the loader writes it the same way).
    unsafe { AtomicU64::from_ptr(addr as *mut u64) }.store(value, Ordering::SeqCst);
    if prot & libc::PROT_WRITE == 0 {
        // SAFETY: as above, giving the page its protection back.
        unsafe { libc::mprotect(page as *mut c_void, 4096, prot) };
    }
    true
}

fn load(addr: u64) -> u64 {
    // SAFETY: `addr` is an 8-aligned GOT slot of a pinned module (readable: GOTs are).
    unsafe { AtomicU64::from_ptr(addr as *mut u64) }.load(Ordering::SeqCst)
}

fn is_driver_name(n: &[u8]) -> bool {
    n.len() > 2 && n.starts_with(b"cu") && n[2].is_ascii_uppercase()
}

/// Redirects the slots of every module not looked at yet; returns report lines for the
/// modules that import something of the CUDA APIs.
pub(super) fn patch_new_modules() -> String {
    let Ok(mut st) = STATE.lock() else {
        return String::new();
    };
    patch_new_modules_locked(&mut st)
}

fn patch_new_modules_locked(st: &mut State) -> String {
    let own = own_range();
    let mut out = String::new();
    let runtime = crate::real::lookup_runtime(c"cudaStreamSynchronize") as u64;
    for m in modules() {
        if st.seen.iter().any(|(b, p)| *b == m.bias && *p == m.path) {
            continue;
        }
        st.seen.push((m.bias, m.path.clone()));
        let file = m.path.rsplit(|b| *b == b'/').next().unwrap_or(&m.path);
        if file.windows(9).any(|w| w == b"libcudart")
            && runtime != 0
            && !(m.range.0 <= runtime && runtime < m.range.1)
        {
            out.push_str(&format!(
                "not covered {}: a second CUDA runtime (the hooks forward to the first); \
                 calls that bind to it are not seen\n",
                String::from_utf8_lossy(&m.path)
            ));
        }
        let Some(dynamic) = m.dynamic else { continue };
        if m.range == own || m.path.windows(9).any(|w| w == b"linux-vds") {
            continue;
        }
        let Some(pin) = pin(&m.path) else { continue };
        // Read once the module is pinned: a module another thread was loading is now
        // relocated and its RELRO pages read-only (pinning waited for that load).
        let mut maps = None;
        // SAFETY: the module is pinned, so its dynamic section and tables stay mapped.
        let cov = unsafe { scan(&m, dynamic, &pin, own, &mut maps, &mut st.slots) };
        if cov.patched.is_empty() {
            unpin(pin);
        } else {
            st.pins.push(pin);
        }
        let name = if m.path.is_empty() {
            "(main program)".to_string()
        } else {
            String::from_utf8_lossy(&m.path).into_owned()
        };
        if !cov.patched.is_empty() {
            out.push_str(&format!(
                "covered {name}: {} call slots redirected\n",
                cov.patched.len()
            ));
        }
        if !cov.elsewhere.is_empty() {
            out.push_str(&format!(
                "not covered {name}: bound to another copy of the runtime or driver: {}\n",
                cov.elsewhere.join(" ")
            ));
        }
        if !cov.failed.is_empty() {
            out.push_str(&format!(
                "not covered {name}: slots that could not be written: {}\n",
                cov.failed.join(" ")
            ));
        }
        if !cov.in_data.is_empty() {
            out.push_str(&format!(
                "not covered {name}: function pointers stored in its data: {}\n",
                cov.in_data.join(" ")
            ));
        }
    }
    out
}

/// Where the loader would bind a not yet resolved import `name` of the module `pin` holds
/// open: the first definition in the global scope, else in the module's own dependencies (a
/// module loaded `RTLD_LOCAL` finds its runtime there). 0 when neither defines it. This
/// library's own exports are never the answer: it is loaded `RTLD_LOCAL` when injected, and
/// is only found here by way of its own scope.
fn binding_of(name: &CStr, pin: &Pinned, own: (u64, u64)) -> u64 {
    let not_own = |p: u64| (p != 0 && !(own.0 <= p && p < own.1)).then_some(p);
    // SAFETY: a pseudo-handle and a handle `pin` holds open; a NUL-terminated name.
    let global = unsafe { crate::real::dlsym(libc::RTLD_DEFAULT, name) } as u64;
    not_own(global)
        .or_else(|| {
            // SAFETY: as above.
            not_own(unsafe { crate::real::dlsym(pin.0, name) } as u64)
        })
        .unwrap_or(0)
}

/// # Safety
/// `m` is pinned (by `pin`) and `dynamic` its `PT_DYNAMIC` address.
unsafe fn scan(
    m: &Module,
    dynamic: u64,
    pin: &Pinned,
    own: (u64, u64),
    maps: &mut Option<String>,
    slots: &mut Vec<Slot>,
) -> Coverage {
    let mut cov = Coverage::default();
    // SAFETY: caller's contract.
    let t = unsafe { tables(m.bias, dynamic) };
    if t.symtab == 0 || t.strtab == 0 || t.relaent != size_of::<Rela>() as u64 {
        return cov;
    }
    for (base, size) in [(t.jmprel, t.pltrelsz), (t.rela, t.relasz)] {
        if base == 0 {
            continue;
        }
        for i in 0..size / size_of::<Rela>() as u64 {
            // SAFETY: the relocation table lies in the pinned module's mapped image.
            let r = unsafe { &*((base + i * size_of::<Rela>() as u64) as *const Rela) };
            let kind = (r.info & 0xffff_ffff) as u32;
            let sym = r.info >> 32;
            if sym == 0 || !matches!(kind, R_X86_64_JUMP_SLOT | R_X86_64_GLOB_DAT | R_X86_64_64) {
                continue;
            }
            // SAFETY: `sym` indexes the module's symbol table, as the loader uses it.
            let s = unsafe { &*((t.symtab + sym * size_of::<Sym>() as u64) as *const Sym) };
            if s.shndx != 0 || (t.strsz != 0 && s.name as u64 >= t.strsz) {
                continue; // defined here: the module's own function
            }
            // SAFETY: a NUL-terminated name in the module's string table.
            let name = unsafe { CStr::from_ptr((t.strtab + s.name as u64) as *const libc::c_char) };
            let bytes = name.to_bytes();
            if !(bytes.starts_with(b"cuda") || is_driver_name(bytes) || bytes == b"dlsym") {
                continue;
            }
            // Only what this library hooks (a driver function it does not wrap, such as
            // cuLaunchKernel, never stalls and needs nothing).
            let Some(hook) = own_export(name, own) else {
                continue;
            };
            let text = name.to_string_lossy().into_owned();
            let addr = m.bias.wrapping_add(r.offset);
            if kind == R_X86_64_64 {
                // A stored `dlsym` costs nothing of the CUDA APIs' coverage by itself, nor a
                // pointer the loader already bound to the hook (a module loaded after
                // `import syncspy` finds the hooks first in the global scope).
                let hooked =
                    addr.is_multiple_of(8) && load(addr) == hook.wrapping_add(r.addend as u64);
                if bytes != b"dlsym" && !hooked {
                    cov.in_data.push(text);
                }
                continue;
            }
            if slots.iter().any(|s| s.addr == addr) {
                continue;
            }
            let real = real_of(name);
            let current = load(addr);
            let unresolved = m.range.0 <= current && current < m.range.1;
            if real == 0 || current == hook {
                continue;
            }
            // A slot not resolved yet is redirected only if it would resolve to the very
            // function the hook forwards to: another interposer preloaded ahead of the
            // runtime or driver (a GPU-sharing shim) must keep its calls.
            let bound = if unresolved {
                binding_of(name, pin, own)
            } else {
                current
            };
            if bound != real {
                // `dlsym` bound to another version of it: nothing of the CUDA APIs lost.
                if bytes != b"dlsym" {
                    cov.elsewhere.push(text);
                }
                continue;
            }
            let maps = maps.get_or_insert_with(|| {
                std::fs::read_to_string("/proc/self/maps").unwrap_or_default()
            });
            if store(addr, hook, maps) {
                slots.push(Slot {
                    addr,
                    original: current,
                    hook,
                    real,
                    module: m.range,
                });
                cov.patched.push(text);
            } else {
                cov.failed.push(text);
            }
        }
    }
    cov
}

/// Re-redirects slots that a lazy resolve raced back to the runtime after the patch.
pub(super) fn recheck() {
    let Ok(st) = STATE.lock() else { return };
    recheck_locked(&st);
}

fn recheck_locked(st: &State) {
    let mut maps = None;
    for s in &st.slots {
        let v = load(s.addr);
        if v != s.hook && (v == s.real || (s.module.0 <= v && v < s.module.1)) {
            let maps = maps.get_or_insert_with(|| {
                std::fs::read_to_string("/proc/self/maps").unwrap_or_default()
            });
            store(s.addr, s.hook, maps);
        }
    }
}

/// Puts back the original bytes of every slot that still holds its hook, and forgets all.
pub(super) fn restore_all() {
    let Ok(mut st) = STATE.lock() else { return };
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    for s in st.slots.drain(..) {
        if load(s.addr) == s.hook {
            store(s.addr, s.original, &maps);
        }
    }
    for p in st.pins.drain(..) {
        unpin(p);
    }
    st.seen.clear();
}

/// The in-process mode is on: `syncspy_import_hooks` was called.
static IMPORTED: AtomicBool = AtomicBool::new(false);
/// The loader's `dlpi_adds` when the last in-process pass began.
static IMPORT_ADDS: AtomicU64 = AtomicU64::new(0);
/// What the in-process passes found, one line each ("covered …", "not covered …"), each once.
static IMPORT_REPORT: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// One in-process pass: redirects the slots of the modules loaded since the last pass (all,
/// the first time) and re-checks the redirected ones; `force`: even when the loader has
/// added nothing since. Never waits for the lock: while another thread is in a pass (or an
/// attach's worker is), or this thread re-entered it, it returns at once and a later lookup
/// or call does the work.
fn import_pass(force: bool) {
    if !IMPORTED.load(Ordering::Acquire) {
        return;
    }
    let adds = crate::real::loader_adds();
    if !force && IMPORT_ADDS.load(Ordering::Acquire) == adds {
        return;
    }
    let Ok(mut st) = STATE.try_lock() else {
        return;
    };
    let report = patch_new_modules_locked(&mut st);
    recheck_locked(&st);
    drop(st);
    IMPORT_ADDS.store(adds, Ordering::Release);
    if report.is_empty() {
        return;
    }
    if let Ok(mut lines) = IMPORT_REPORT.lock() {
        for line in report.lines() {
            if !lines.iter().any(|l| l == line) {
                lines.push(line.to_string());
            }
        }
    }
}

/// Run by the exported `dlsym` before each lookup (but `RTLD_NEXT` ones) in the in-process
/// mode: a pass when the loader has added objects since the last one. Leaves errno as it was
/// (the pass reads files); glibc's `dlsym` resets `dlerror`'s state itself.
extern "C" fn import_lookup() {
    let errno = crate::errno::errno();
    let _ = std::panic::catch_unwind(|| import_pass(false));
    crate::errno::set_errno(errno);
}

/// `import syncspy`'s in-process mode (see the module's documentation): on the first call,
/// has the exported `dlsym` check for newly loaded modules before each lookup; then
/// redirects the import slots (`dlsym`, and `cuda*`/`cu*` ones still bound to the runtime or
/// driver) of every module loaded since the last call. The Python package calls it when it
/// has loaded the library itself (not preloaded, not injected), and again before it reads
/// what was recorded. Returns the number of slots redirected in all, or -1 when it failed;
/// 0 with nothing done under `SYNCSPY_OFF` (the hooks pass everything through).
#[no_mangle]
pub extern "C" fn syncspy_import_hooks() -> i64 {
    std::panic::catch_unwind(|| {
        if !crate::config::tracking() {
            return 0;
        }
        if !IMPORTED.swap(true, Ordering::AcqRel) {
            crate::driver::dlsym::on_lookup(import_lookup);
        }
        import_pass(true);
        STATE.lock().map_or(-1, |st| st.slots.len() as i64)
    })
    .unwrap_or(-1)
}

/// Writes what the in-process passes found, NUL-terminated, into `buf` (`len` bytes): one
/// line per module, `covered PATH: N call slots redirected` or `not covered PATH: WHY`.
/// Returns the length without the NUL (0: nothing yet), or `-(length + 1)` when `buf` is too
/// small (nothing written).
///
/// # Safety
/// `buf` is null (with `len` 0) or points at `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn syncspy_import_report(buf: *mut libc::c_char, len: usize) -> isize {
    let text = std::panic::catch_unwind(|| {
        IMPORT_REPORT
            .lock()
            .map(|l| l.iter().map(|x| format!("{x}\n")).collect::<String>())
            .unwrap_or_default()
    })
    .unwrap_or_default();
    let n = isize::try_from(text.len()).unwrap_or(isize::MAX - 1);
    if buf.is_null() || text.len() >= len {
        return -(n + 1);
    }
    // SAFETY: `buf` holds `len` > text.len() writable bytes (checked above; the contract).
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        *buf.add(text.len()) = 0;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protection_comes_from_the_mapping_that_holds_the_address() {
        let maps = "1000-3000 r--p 00000000 00:00 0 /x\n3000-4000 rw-p 0 00:00 0\n";
        assert_eq!(protection(maps, 0x1000), Some(libc::PROT_READ));
        assert_eq!(protection(maps, 0x2fff), Some(libc::PROT_READ));
        assert_eq!(
            protection(maps, 0x3008),
            Some(libc::PROT_READ | libc::PROT_WRITE)
        );
        assert_eq!(protection(maps, 0x4000), None);
        assert!(is_driver_name(b"cuLaunchKernel"));
        assert!(!is_driver_name(b"cudaMalloc"));
        assert!(!is_driver_name(b"cuda"));
        assert_eq!(dyn_ptr(0x1000, 0x10), 0x1010);
        assert_eq!(dyn_ptr(0x1000, 0x2000), 0x2000);
    }
}
