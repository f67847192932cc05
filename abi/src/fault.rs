//! A segment truncated under its reader does not kill the reader.
//!
//! A reader maps each segment file it follows. The file's owner can truncate it at any moment;
//! a read of a mapped page past the new end then faults (SIGBUS), which kills the process: a
//! local user could stop the node agent, a monitor or `syncspy run` with a file of their own.
//! Readers check that a file is intact before each poll and stop reading one that is not
//! (`SegmentReader::intact`, `freeze`), but a truncation between that check and the reads
//! after it still faulted.
//!
//! Every reader mapping is listed here (`register`, up to `SLOTS` at once). A process that
//! calls `install` (the syncspy binaries do; the preloaded library never does: it must not
//! change its host program's signal handling) handles SIGBUS: a fault inside a listed mapping
//! maps private zero pages over the rest of that mapping, from the faulting page on, and the
//! read goes on with zeros, which the reader treats like any damaged content (records fail
//! their checks; the next `intact` check freezes the reader). A fault anywhere else gets the
//! disposition the process had before.
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Reader mappings listed at once; a mapping that finds no free entry is read unprotected.
pub const SLOTS: usize = 8192;

struct Region {
    start: AtomicUsize,
    len: AtomicUsize,
}

static REGIONS: [Region; SLOTS] = [const {
    Region {
        start: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
    }
}; SLOTS];

static REPLACED: AtomicU64 = AtomicU64::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);
static PAGE: AtomicUsize = AtomicUsize::new(4096);

struct Previous(libc::sigaction);
// SAFETY: written once before the handler is installed, then only read.
unsafe impl Sync for Previous {}
// SAFETY: as above.
unsafe impl Send for Previous {}
static PREVIOUS: OnceLock<Previous> = OnceLock::new();

/// Lists the mapping `[start, start + len)`; the entry to pass to `unregister`, or `None` when
/// every entry is taken (the mapping is then read unprotected).
pub(crate) fn register(start: usize, len: usize) -> Option<usize> {
    if start == 0 || len == 0 {
        return None;
    }
    for (i, r) in REGIONS.iter().enumerate() {
        if r.len.load(Ordering::Relaxed) == 0
            && r.len
                .compare_exchange(0, len, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            r.start.store(start, Ordering::Release);
            return Some(i);
        }
    }
    None
}

/// Takes entry `i` off the list, before its mapping is unmapped.
pub(crate) fn unregister(i: usize) {
    if let Some(r) = REGIONS.get(i) {
        r.start.store(0, Ordering::Release);
        r.len.store(0, Ordering::Release);
    }
}

/// Installs the SIGBUS handler in this process (once; later calls do nothing). `false` if the
/// system refused it.
pub fn install() -> bool {
    if INSTALLED.load(Ordering::Acquire) {
        return true;
    }
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 {
        PAGE.store(page as usize, Ordering::Relaxed);
    }
    // SAFETY: a zeroed sigaction is a valid out-value.
    let mut prev: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: with a null new action, sigaction only reads the current one into `prev`.
    if unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut prev) } != 0 {
        return false;
    }
    let _ = PREVIOUS.set(Previous(prev));
    // SAFETY: as above; the handler has the SA_SIGINFO signature and is async-signal-safe
    // (atomics, mmap, sigaction).
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = on_sigbus as *const () as usize;
    act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: `act.sa_mask` is a valid sigset to empty.
    unsafe { libc::sigemptyset(&mut act.sa_mask) };
    // SAFETY: a valid action for SIGBUS.
    if unsafe { libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut()) } != 0 {
        return false;
    }
    INSTALLED.store(true, Ordering::Release);
    true
}

/// Pages of truncated segments read as zeros since the process started.
pub fn replaced_faults() -> u64 {
    REPLACED.load(Ordering::Relaxed)
}

extern "C" fn on_sigbus(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::Relaxed);
    for r in REGIONS.iter() {
        let start = r.start.load(Ordering::Acquire);
        let len = r.len.load(Ordering::Acquire);
        if start == 0 || addr < start || addr - start >= len {
            continue;
        }
        let from = addr & !(page - 1);
        let end = start + len;
        // SAFETY: `[from, end)` lies inside a reader mapping this process made and still
        // holds (listed until just before it is unmapped); a fixed private anonymous mapping
        // over it replaces pages nobody else may use. mmap is async-signal-safe.
        let p = unsafe {
            libc::mmap(
                from as *mut c_void,
                end - from,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            REPLACED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        break;
    }
    // Not a segment's page: what the process did before.
    match PREVIOUS.get() {
        Some(Previous(prev))
            if prev.sa_sigaction != libc::SIG_DFL && prev.sa_sigaction != libc::SIG_IGN =>
        {
            if prev.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler took this signature when it was installed.
                let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { std::mem::transmute(prev.sa_sigaction) };
                f(sig, info, ctx);
            } else {
                // SAFETY: as above, for a plain handler.
                let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(prev.sa_sigaction) };
                f(sig);
            }
        }
        _ => {
            // Back to the default action: the faulting read runs again and kills the
            // process as it would have without this handler.
            // SAFETY: a zeroed sigaction with SIG_DFL (0) is the default action.
            let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
            dfl.sa_sigaction = libc::SIG_DFL;
            // SAFETY: a valid action; sigaction is async-signal-safe.
            unsafe { libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SegmentParams, SegmentReader, SegmentWriter};

    #[test]
    fn a_read_past_a_truncation_reads_zeros_instead_of_faulting() {
        assert!(install());
        let dir = std::env::temp_dir().join(format!("syncspy-fault-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut p = SegmentParams::new(4545, 779);
        p.ring_capacity = 64;
        let w = SegmentWriter::create(&dir, &p).unwrap();
        let r = SegmentReader::open(w.path()).unwrap();
        let (ptr, len) = (r.v.map.ptr, r.v.map.len);
        assert!(len > 3 * 4096);
        // SAFETY: inside the reader's mapping, which the file still covers.
        let before = unsafe { std::ptr::read_volatile(ptr) };
        assert_ne!(before, 0, "the magic's first byte");
        // The owner truncates the file; the reader reads past the new end without checking
        // first (the race `intact` cannot close).
        std::fs::OpenOptions::new()
            .write(true)
            .open(w.path())
            .unwrap()
            .set_len(4096)
            .unwrap();
        w.leak(); // the writer's own mapping ends early too: never touched again
        let n = replaced_faults();
        // SAFETY: inside the reader's mapping; past the file's end it faults, and the handler
        // puts zero pages there.
        let past = unsafe { std::ptr::read_volatile(ptr.add(len - 1)) };
        assert_eq!(past, 0);
        // SAFETY: as above; replaced already.
        let mid = unsafe { std::ptr::read_volatile(ptr.add(2 * 4096)) };
        assert_eq!(mid, 0);
        assert!(replaced_faults() > n);
        // The first page is still the file's.
        // SAFETY: inside the mapping and the file.
        assert_eq!(unsafe { std::ptr::read_volatile(ptr) }, before);
        drop(r);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
