//! The CUPTI activity source: finds the process's libcupti (or the simulated runtime's stand-in),
//! registers buffer callbacks, enables kernel, memcpy and memset records, and hands each record
//! to the tracker. The library is opened and every CUPTI function looked up with libloading
//! (`dlopen`/`dlsym` underneath, see `sym`), and each is called through a pointer
//! whose signature takes its types from `cudarc::cupti::sys` and returns the raw `CUptiResult`
//! integer (a newer CUPTI may return codes the Rust enum does not list).
//!
//! Record layouts are cudarc's CUDA 13.0 ones (`CUpti_ActivityKernel10`, `CUpti_ActivityMemcpy6`,
//! `CUpti_ActivityMemset4`); fields are read at their `offset_of!` with unaligned reads, after
//! the record's kind (its first `u32`) was checked, so no Rust enum is ever built from CUPTI's
//! bytes.

use std::ffi::{c_int, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use cudarc::cupti::sys::{
    CUpti_ActivityKernel10, CUpti_ActivityKind, CUpti_ActivityMemcpy6, CUpti_ActivityMemset4,
    CUpti_BuffersCallbackCompleteFunc, CUpti_BuffersCallbackRequestFunc, CUpti_CallbackFunc,
    CUpti_SubscriberHandle, CUpti_TimestampCallbackFunc,
};

use libloading::os::unix::Library;

use super::track::Activity;

/// `CUPTI_SUCCESS`.
pub const OK: u32 = 0;

const KIND_MEMCPY: u32 = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY as u32;
const KIND_MEMSET: u32 = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET as u32;
const KIND_KERNEL: u32 = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_KERNEL as u32;
const KIND_CONCURRENT_KERNEL: u32 =
    CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL as u32;

/// The kinds traced: every piece of work that occupies a device.
pub const KINDS: [CUpti_ActivityKind; 3] = [
    CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY,
    CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET,
];

type RegisterCallbacks = unsafe extern "C" fn(
    CUpti_BuffersCallbackRequestFunc,
    CUpti_BuffersCallbackCompleteFunc,
) -> u32;
type Enable = unsafe extern "C" fn(CUpti_ActivityKind) -> u32;
type FlushAll = unsafe extern "C" fn(u32) -> u32;
type GetNextRecord = unsafe extern "C" fn(*mut u8, usize, *mut *mut c_void) -> u32;
type GetTimestamp = unsafe extern "C" fn(*mut u64) -> u32;
type RegisterTimestamp = unsafe extern "C" fn(CUpti_TimestampCallbackFunc) -> u32;
type Subscribe =
    unsafe extern "C" fn(*mut CUpti_SubscriberHandle, CUpti_CallbackFunc, *mut c_void) -> u32;
type Unsubscribe = unsafe extern "C" fn(CUpti_SubscriberHandle) -> u32;
type NumDropped = unsafe extern "C" fn(*mut c_void, u32, *mut usize) -> u32;

/// The CUPTI functions syncspy uses, from one loaded library.
pub struct Api {
    pub register_callbacks: RegisterCallbacks,
    pub enable: Enable,
    pub disable: Enable,
    pub flush_all: FlushAll,
    pub get_next_record: GetNextRecord,
    pub get_timestamp: GetTimestamp,
    pub register_timestamp: Option<RegisterTimestamp>,
    pub subscribe: Subscribe,
    pub unsubscribe: Unsubscribe,
    pub num_dropped: Option<NumDropped>,
    /// The library is the simulated runtime's stand-in (it exports `simcudaCuptiSimulated`).
    pub simulated: bool,
}

/// `name` in `lib`, as a raw address; null when the library does not define it.
///
/// Through libloading (`Library::get`), which calls `dlerror` and `dlsym`. Inside
/// libsyncspy.so that `dlsym` binds, as the hand-written `libc::dlsym` here did before, to
/// the dynamic linker's answer for the name `dlsym` (one `GLOB_DAT` relocation for the
/// whole library): preloaded, the library's own exported `dlsym` (`driver/dlsym.rs`);
/// injected `RTLD_LOCAL` by `syncspy attach`, glibc's. The exported one is harmless here: a
/// lookup by library handle (never `RTLD_NEXT`) reaches glibc's `dlsym` by a jump that keeps
/// the caller's return address, unless the name is a wrapped driver function (`cu` and an
/// upper-case letter, `driver::wants`) or an exported runtime one (`cuda...`,
/// `hooks::exports::hook`); CUPTI's names begin `cupti` and the stand-in's marker `simcuda`,
/// so neither is intercepted. (`import syncspy`'s in-process check, `on_lookup`, runs
/// before the lookup as it did for the hand-written call.) A lookup by handle never sees
/// the library's own `cuptiActivityRegisterCallbacks` and `cuptiSubscribe` exports.
/// libloading reads the thread's `dlerror` message after a failed lookup (glibc keeps it per
/// thread), so a missing optional function (`simcudaCuptiSimulated` in a real CUPTI) no
/// longer leaves its message pending on the program's thread.
fn sym(lib: &Library, name: &CStr) -> *mut c_void {
    // SAFETY: `lib` is open (never closed: `open_library`) and `name` a C string; the symbol
    // is read as a raw address, never called as such.
    match unsafe { lib.get::<*mut c_void>(name) } {
        Ok(s) => s.into_raw(),
        Err(_) => std::ptr::null_mut(),
    }
}

/// `name` in `lib` as `F`, a function pointer type matching its C signature.
fn func<F: Copy>(lib: &Library, name: &CStr) -> Option<F> {
    const { assert!(size_of::<F>() == size_of::<*mut c_void>()) };
    let p = sym(lib, name);
    // SAFETY: `F` is a function pointer type of pointer size (asserted) and every caller names
    // the CUPTI function whose C signature `F` is.
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

impl Api {
    /// The functions of the library `lib`; `None` when one that is needed is missing.
    pub fn load(lib: &Library) -> Option<Api> {
        Some(Api {
            register_callbacks: func(lib, c"cuptiActivityRegisterCallbacks")?,
            enable: func(lib, c"cuptiActivityEnable")?,
            disable: func(lib, c"cuptiActivityDisable")?,
            flush_all: func(lib, c"cuptiActivityFlushAll")?,
            get_next_record: func(lib, c"cuptiActivityGetNextRecord")?,
            get_timestamp: func(lib, c"cuptiGetTimestamp")?,
            register_timestamp: func(lib, c"cuptiActivityRegisterTimestampCallback"),
            subscribe: func(lib, c"cuptiSubscribe")?,
            unsubscribe: func(lib, c"cuptiUnsubscribe")?,
            num_dropped: func(lib, c"cuptiActivityGetNumDroppedRecords"),
            simulated: !sym(lib, c"simcudaCuptiSimulated").is_null(),
        })
    }
}

/// `dlopen(path, flags)` through libloading; `None` when it fails (the error, which
/// libloading copies from `dlerror`, is dropped: no CUPTI). The library is leaked, so never
/// closed: `Library`'s `Drop` would `dlclose` it, and the functions in `Api`, CUPTI's
/// threads and the callbacks registered with it live as long as the process. (A candidate
/// that fails to open holds no handle.)
fn open(path: &CStr, flags: c_int) -> Option<&'static Library> {
    // With its NUL, the path goes to dlopen as it is, not copied.
    let path = OsStr::from_bytes(path.to_bytes_with_nul());
    // SAFETY: dlopen runs the library's constructors (CUPTI's are benign; this runs from
    // `gpu::set_up`, once per process: at the first hooked call before it reaches the
    // runtime, on the attach worker, or on syncspy's GPU thread when a reader asks).
    let lib = unsafe { Library::open(Some(path), flags) }.ok()?;
    Some(Box::leak(Box::new(lib)))
}

/// The loaded libcupti: the process's own copy when it has one (torch ships one, and the
/// simulated runtime answers to the name under `--sim`), else one from the usual CUDA places.
/// Opened `RTLD_LOCAL` (the program's symbol resolution is unchanged) and never closed.
pub fn open_library() -> Option<&'static Library> {
    const SONAMES: [&CStr; 3] = [c"libcupti.so.13", c"libcupti.so.12", c"libcupti.so"];
    // 1. Already loaded, by soname.
    for s in SONAMES {
        if let Some(l) = open(s, libc::RTLD_NOW | libc::RTLD_NOLOAD) {
            return Some(l);
        }
    }
    // 2. Already loaded under another file name (a vendored copy): by path.
    let mut buf = [0u8; libc::PATH_MAX as usize];
    if let Some(p) = crate::real::loaded_path_with(b"libcupti", &mut buf) {
        if let Some(l) = open(p, libc::RTLD_NOW | libc::RTLD_NOLOAD) {
            return Some(l);
        }
    }
    // 3. Next to the loaded CUDA runtime (torch's nvidia/cu13/lib, the CUDA toolkit's lib
    //    folder, the simulated runtime's private folder).
    let mut buf = [0u8; libc::PATH_MAX as usize];
    if let Some(rt) = crate::real::loaded_path_with(b"libcudart", &mut buf) {
        let rt = rt.to_bytes();
        if let Some(slash) = rt.iter().rposition(|b| *b == b'/') {
            for s in SONAMES {
                let mut p = rt[..=slash].to_vec();
                p.extend_from_slice(s.to_bytes_with_nul());
                if let Ok(c) = CStr::from_bytes_with_nul(&p) {
                    if let Some(l) = open(c, libc::RTLD_NOW | libc::RTLD_LOCAL) {
                        return Some(l);
                    }
                }
            }
        }
    }
    // 4. The usual CUDA places, then the loader's search path.
    for p in [
        c"/usr/local/cuda/lib64/libcupti.so.13",
        c"/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
        c"/usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13",
        c"/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcupti.so.13",
        c"/usr/local/cuda/lib64/libcupti.so",
    ]
    .into_iter()
    .chain(SONAMES)
    {
        if let Some(l) = open(p, libc::RTLD_NOW | libc::RTLD_LOCAL) {
            return Some(l);
        }
    }
    None
}

/// Bytes of one activity buffer.
pub const BUFFER_SIZE: usize = 1 << 20;

/// Where completed buffers' records go: set once by the GPU thread before it registers the
/// callbacks (a `fn(&[Activity])`).
pub static SINK: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());
/// Records seen (of the traced kinds) and buffers with dropped records.
pub static RECORDS: AtomicU64 = AtomicU64::new(0);
/// The `cuptiActivityGetNextRecord` of the registered library (for the completion callback).
pub static NEXT_RECORD: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

/// CUPTI asks for a buffer. `malloc`-compatible memory: should another tool take CUPTI over
/// while one is outstanding, its own completion callback would `free` it.
///
/// # Safety
/// Called by CUPTI with valid out-pointers.
pub unsafe extern "C" fn buffer_requested(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
) {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: posix_memalign writes `p` only on success; 8 is a power of two multiple of the
    // pointer size, the alignment CUPTI requires.
    let ok = unsafe { libc::posix_memalign(&mut p, 8, BUFFER_SIZE) } == 0;
    // SAFETY: CUPTI passes valid out-pointers. A null buffer (no memory) makes CUPTI drop
    // records, which it counts.
    unsafe {
        *buffer = if ok { p.cast() } else { std::ptr::null_mut() };
        *size = if ok { BUFFER_SIZE } else { 0 };
        *max_records = 0;
    }
}

/// CUPTI hands a buffer back: its records go to the sink, then the buffer is freed.
///
/// # Safety
/// Called by CUPTI with a buffer from [`buffer_requested`] holding `valid` bytes of records.
pub unsafe extern "C" fn buffer_completed(
    _ctx: cudarc::driver::sys::CUcontext,
    _stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    if buffer.is_null() {
        return;
    }
    // Never unwind into CUPTI.
    let _ = std::panic::catch_unwind(|| {
        let next = NEXT_RECORD.load(Ordering::Acquire);
        let sink = SINK.load(Ordering::Acquire);
        if next.is_null() || sink.is_null() {
            return;
        }
        // SAFETY: both were stored from values of exactly these types.
        let next: GetNextRecord = unsafe { std::mem::transmute::<*mut (), GetNextRecord>(next) };
        // SAFETY: as above.
        let sink: fn(&[Activity]) =
            unsafe { std::mem::transmute::<*mut (), fn(&[Activity])>(sink) };
        let mut out = Vec::with_capacity(256);
        let mut rec: *mut c_void = std::ptr::null_mut();
        loop {
            // SAFETY: `buffer` holds `valid` bytes of records CUPTI wrote; `rec` is the cursor
            // CUPTI advances (null to start).
            let rc = unsafe { next(buffer, valid, &mut rec) };
            // CUPTI_ERROR_MAX_LIMIT_REACHED at the end; another error (a corrupt buffer):
            // keep what was read.
            if rc != OK || rec.is_null() {
                break;
            }
            // SAFETY: CUPTI returned a pointer to a complete record inside the buffer.
            if let Some(a) = unsafe { activity_of(rec.cast()) } {
                out.push(a);
            }
            if out.len() == out.capacity() {
                sink(&out);
                out.clear();
            }
        }
        sink(&out);
    });
    // SAFETY: the buffer came from `buffer_requested` (posix_memalign) and CUPTI is done
    // with it.
    unsafe { libc::free(buffer.cast()) };
}

/// Reads a `T`'s field at `off` of record `rec`.
///
/// # Safety
/// `rec` points to a complete record of a type at least `off + size_of::<V>()` bytes long.
unsafe fn field<V: Copy>(rec: *const u8, off: usize) -> V {
    // SAFETY: the caller's contract; unaligned because CUPTI packs some record types.
    unsafe { std::ptr::read_unaligned(rec.add(off).cast::<V>()) }
}

/// The activity of one record of a traced kind; `None` for other kinds.
///
/// # Safety
/// `rec` points to a complete CUPTI activity record.
pub unsafe fn activity_of(rec: *const u8) -> Option<Activity> {
    use std::mem::offset_of;
    // SAFETY: every record starts with its kind, a u32.
    let kind: u32 = unsafe { field(rec, 0) };
    let mut collective = false;
    let (start, end, device) = match kind {
        // SAFETY: a complete record of this kind has the layout of the struct read.
        KIND_KERNEL | KIND_CONCURRENT_KERNEL => unsafe {
            let name = field::<*const u8>(rec, offset_of!(CUpti_ActivityKernel10, name));
            // SAFETY: CUPTI's name is a C string it owns while the buffer is processed (or
            // null); `starts_with_nccl` reads at most up to its NUL.
            collective = starts_with_nccl(name);
            (
                field::<u64>(rec, offset_of!(CUpti_ActivityKernel10, start)),
                field::<u64>(rec, offset_of!(CUpti_ActivityKernel10, end)),
                field::<u32>(rec, offset_of!(CUpti_ActivityKernel10, deviceId)),
            )
        },
        // SAFETY: a complete record of this kind has the layout of the struct read.
        KIND_MEMCPY => unsafe {
            (
                field::<u64>(rec, offset_of!(CUpti_ActivityMemcpy6, start)),
                field::<u64>(rec, offset_of!(CUpti_ActivityMemcpy6, end)),
                field::<u32>(rec, offset_of!(CUpti_ActivityMemcpy6, deviceId)),
            )
        },
        // SAFETY: a complete record of this kind has the layout of the struct read.
        KIND_MEMSET => unsafe {
            (
                field::<u64>(rec, offset_of!(CUpti_ActivityMemset4, start)),
                field::<u64>(rec, offset_of!(CUpti_ActivityMemset4, end)),
                field::<u32>(rec, offset_of!(CUpti_ActivityMemset4, deviceId)),
            )
        },
        _ => return None,
    };
    RECORDS.fetch_add(1, Ordering::Relaxed);
    // A record whose end CUPTI could not take has end 0 (or before start): no interval.
    (end > start).then_some(Activity {
        device,
        start_ns: start,
        end_ns: end,
        collective,
    })
}

/// Whether the kernel name `name` (a C string) is an NCCL kernel's: its function name
/// begins with `nccl` (`ncclDevKernel_*`, `ncclKernel_*`). CUPTI gives kernel names
/// mangled, so `_Z38ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorage...`
/// is one too (the Itanium prefix `_Z`, an optional `N` for a nested name, the identifier's
/// length); a plain `ncclDevKernel_...` (a demangled name) also counts. False for null.
///
/// # Safety
/// `name` is null or points to a NUL-terminated string.
unsafe fn starts_with_nccl(name: *const u8) -> bool {
    if name.is_null() {
        return false;
    }
    // SAFETY: every byte up to the first NUL is readable, and `at` never moves past a NUL:
    // each step compares the byte first, and NUL matches none of the bytes looked for.
    let at = |i: usize| unsafe { *name.add(i) };
    let mut i = 0;
    if at(0) == b'_' && at(1) == b'Z' {
        i = 2;
        if at(i) == b'N' {
            i += 1;
        }
        let digits = i;
        while at(i).is_ascii_digit() {
            i += 1;
        }
        if i == digits {
            return false;
        }
    }
    for (k, want) in b"nccl".iter().enumerate() {
        if at(i + k) != *want {
            return false;
        }
    }
    true
}

/// The host clock, for CUPTI's timestamps (`cuptiActivityRegisterTimestampCallback`): every
/// activity timestamp is then CLOCK_MONOTONIC ns, the segment's clock.
///
/// # Safety
/// None: it only reads the clock (`unsafe` is the callback type's).
pub unsafe extern "C" fn monotonic_timestamp() -> u64 {
    syncspy_abi::clock::monotonic_ns()
}

/// Host clock minus CUPTI's clock, measured: the reading bracketed most tightly of a few.
pub fn measure_offset(get: GetTimestamp) -> Option<i64> {
    let mut best: Option<(u64, i64)> = None;
    for _ in 0..7 {
        let mut c = 0u64;
        let t0 = syncspy_abi::clock::monotonic_ns();
        // SAFETY: `get` is cuptiGetTimestamp; `c` a valid out-pointer.
        let rc = unsafe { get(&mut c) };
        let t1 = syncspy_abi::clock::monotonic_ns();
        if rc != OK {
            return None;
        }
        let mid = t0 / 2 + t1 / 2;
        let off = mid as i64 - c as i64;
        if best.is_none_or(|(w, _)| t1 - t0 < w) {
            best = Some((t1 - t0, off));
        }
    }
    best.map(|b| b.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn records_of_the_traced_kinds_are_read_at_cudarcs_offsets() {
        // A kernel record as CUPTI 13.0 lays it out, built in a zeroed buffer of its size.
        let mut k = vec![0u8; size_of::<CUpti_ActivityKernel10>()];
        let put = |b: &mut [u8], off: usize, v: &[u8]| b[off..off + v.len()].copy_from_slice(v);
        put(&mut k, 0, &KIND_CONCURRENT_KERNEL.to_ne_bytes());
        put(
            &mut k,
            offset_of!(CUpti_ActivityKernel10, start),
            &1000u64.to_ne_bytes(),
        );
        put(
            &mut k,
            offset_of!(CUpti_ActivityKernel10, end),
            &2500u64.to_ne_bytes(),
        );
        put(
            &mut k,
            offset_of!(CUpti_ActivityKernel10, deviceId),
            &3u32.to_ne_bytes(),
        );
        // SAFETY: a complete record of its kind.
        let a = unsafe { activity_of(k.as_ptr()) };
        assert_eq!(
            a,
            Some(Activity {
                device: 3,
                start_ns: 1000,
                end_ns: 2500,
                collective: false,
            })
        );
        // The same record named like an NCCL kernel is a collective; a near miss is not.
        for (name, want) in [
            (&b"ncclDevKernel_AllReduce_Sum_f32_RING_LL\0"[..], true),
            (b"nccl\0", true),
            (b"ncc\0", false),
            (b"gemm_nccl\0", false),
            (
                b"_Z38ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE\0",
                true,
            ),
            (b"_ZN4nccl6kernelEv\0", true),
            (b"_Z4gemmPfS_\0", false),
            (b"_Z\0", false),
            (b"_Znccl\0", false),
        ] {
            put(
                &mut k,
                offset_of!(CUpti_ActivityKernel10, name),
                &(name.as_ptr() as usize).to_ne_bytes(),
            );
            // SAFETY: a complete record whose name points to a C string that outlives it.
            let a = unsafe { activity_of(k.as_ptr()) }.unwrap();
            assert_eq!(a.collective, want, "{:?}", std::str::from_utf8(name));
        }
        let mut m = vec![0u8; size_of::<CUpti_ActivityMemset4>()];
        put(&mut m, 0, &KIND_MEMSET.to_ne_bytes());
        put(
            &mut m,
            offset_of!(CUpti_ActivityMemset4, start),
            &7u64.to_ne_bytes(),
        );
        put(
            &mut m,
            offset_of!(CUpti_ActivityMemset4, end),
            &9u64.to_ne_bytes(),
        );
        // SAFETY: as above.
        let a = unsafe { activity_of(m.as_ptr()) };
        assert_eq!(a.map(|a| a.end_ns), Some(9));
        // An unfinished record (end 0) and another kind are no activity.
        put(
            &mut m,
            offset_of!(CUpti_ActivityMemset4, end),
            &0u64.to_ne_bytes(),
        );
        // SAFETY: as above.
        assert_eq!(unsafe { activity_of(m.as_ptr()) }, None);
        put(&mut m, 0, &5u32.to_ne_bytes());
        // SAFETY: as above (a short record of an untraced kind is not read past its kind).
        assert_eq!(unsafe { activity_of(m.as_ptr()) }, None);
    }

    #[test]
    fn a_missing_library_or_function_is_none_not_a_panic() {
        // Not there: neither loaded (RTLD_NOLOAD) nor loadable.
        let missing = c"libsyncspy-no-such-library.so.0";
        assert!(open(missing, libc::RTLD_NOW | libc::RTLD_NOLOAD).is_none());
        assert!(open(missing, libc::RTLD_NOW | libc::RTLD_LOCAL).is_none());
        assert!(open(
            c"/no/such/dir/libcupti.so.13",
            libc::RTLD_NOW | libc::RTLD_LOCAL
        )
        .is_none());
        // A loaded library found by soname with RTLD_NOLOAD, which defines none of CUPTI's
        // functions: no API, and its own functions are found.
        let libc_so = open(c"libc.so.6", libc::RTLD_NOW | libc::RTLD_NOLOAD).expect("libc");
        assert!(Api::load(libc_so).is_none());
        assert!(sym(libc_so, c"cuptiGetTimestamp").is_null());
        // libloading took the failure's message: none is left pending on this thread.
        // SAFETY: dlerror takes no arguments (its state is per thread in glibc).
        assert!(unsafe { libc::dlerror() }.is_null());
        // SAFETY: RTLD_DEFAULT and a C string literal.
        let getpid = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"getpid".as_ptr()) };
        assert_eq!(sym(libc_so, c"getpid"), getpid);
        let f = func::<unsafe extern "C" fn() -> libc::pid_t>(libc_so, c"getpid").expect("getpid");
        // SAFETY: getpid's C signature.
        assert_eq!(unsafe { f() }, std::process::id() as libc::pid_t);
    }

    #[test]
    fn an_offset_is_measured_against_a_clock_running_behind() {
        unsafe extern "C" fn behind(t: *mut u64) -> u32 {
            // SAFETY: the caller passes a valid out-pointer.
            unsafe { *t = syncspy_abi::clock::monotonic_ns() - 5_000_000 };
            OK
        }
        let off = measure_offset(behind).unwrap();
        assert!((off - 5_000_000).abs() < 1_000_000, "{off}");
        unsafe extern "C" fn failing(_: *mut u64) -> u32 {
            1
        }
        assert_eq!(measure_offset(failing), None);
    }
}
