//! How the walk and the decoder read interpreter memory.
//!
//! - [`Local`]: plain volatile loads, for the calling thread's own frames, which cannot change
//!   or be freed while the thread sits in the hook (see `walk`). Every read succeeds, so the
//!   generic walk compiles to the same loads as before there was a choice.
//! - [`Remote`]: for another thread's frames, which can be popped, freed and unmapped under the
//!   reader at any moment (3.11+ frames live in data-stack chunks that the interpreter
//!   `munmap`s when a chunk empties). Every read goes through `process_vm_readv(2)` on our own
//!   pid, which copies what is mapped and answers `EFAULT` for what is not, instead of a
//!   fault: a torn or freed structure reads as garbage or as nothing, never as a crash. Pages
//!   are read whole into a small cache (frames of one thread share a few pages; a code object
//!   lies in one or two), so a 60-frame walk costs tens of system calls, not hundreds. It
//!   never blocks and takes no lock: the kernel call copies memory and returns.
//!
//! `process_vm_readv` on one's own process needs no privilege (the kernel lets a thread group
//! inspect itself before any security module is asked), but a seccomp filter may refuse it
//! (`EPERM`, `ENOSYS`): then [`Remote::available`] turns false for the process and nothing of
//! another thread is read.

use std::sync::atomic::{AtomicBool, Ordering};

/// Reads of interpreter memory. `None`: the memory could not be read.
pub trait Mem {
    /// # Safety
    /// For `Local`: `p` is readable for `size_of::<T>()` bytes. `Remote` has no requirement.
    unsafe fn read<T: Copy>(&mut self, p: usize) -> Option<T>;

    /// Reads `out.len()` bytes at `p`.
    ///
    /// # Safety
    /// As for `read`.
    unsafe fn bytes(&mut self, p: usize, out: &mut [u8]) -> bool;

    /// Calls `f` with the `n` bytes at `p` (a line table: up to a megabyte). `Local` lends
    /// the memory itself; `Remote` copies it into a buffer it allocates (the cold path).
    ///
    /// # Safety
    /// As for `read`.
    unsafe fn with_bytes<R>(&mut self, p: usize, n: usize, f: impl FnOnce(&[u8]) -> R)
        -> Option<R>;

    /// A pointer-sized word at `p + off`.
    ///
    /// # Safety
    /// As for `read`.
    #[inline(always)]
    unsafe fn word(&mut self, p: usize, off: usize) -> Option<usize> {
        // SAFETY: the caller's contract.
        unsafe { self.read::<usize>(p.wrapping_add(off)) }
    }
}

/// The calling thread's own memory: direct loads.
pub struct Local;

impl Mem for Local {
    #[inline(always)]
    unsafe fn read<T: Copy>(&mut self, p: usize) -> Option<T> {
        // SAFETY: the caller's contract.
        Some(unsafe { std::ptr::read_volatile(p as *const T) })
    }

    #[inline(always)]
    unsafe fn bytes(&mut self, p: usize, out: &mut [u8]) -> bool {
        // SAFETY: the caller's contract: `out.len()` readable bytes at `p`.
        unsafe { std::ptr::copy_nonoverlapping(p as *const u8, out.as_mut_ptr(), out.len()) };
        true
    }

    #[inline(always)]
    unsafe fn with_bytes<R>(
        &mut self,
        p: usize,
        n: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Option<R> {
        // SAFETY: the caller's contract: `n` readable bytes at `p`.
        Some(f(unsafe { std::slice::from_raw_parts(p as *const u8, n) }))
    }
}

const PAGE: usize = 4096;
/// Pages the cache holds.
pub const PAGES: usize = 8;

/// Set once `process_vm_readv` was refused (seccomp): no other thread is read again.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// Another thread's memory, read through the kernel, with a page cache.
pub struct Remote {
    pid: libc::pid_t,
    /// Page base addresses (0: empty) and their bytes.
    tags: [usize; PAGES],
    pages: [[u8; PAGE]; PAGES],
    /// The next page to replace (round robin).
    next: usize,
    /// System calls made.
    pub calls: u32,
}

impl Remote {
    /// Whether another thread's memory can be read in this process.
    pub fn available() -> bool {
        !REFUSED.load(Ordering::Relaxed)
    }

    pub const fn new() -> Remote {
        Remote {
            pid: 0,
            tags: [0; PAGES],
            pages: [[0; PAGE]; PAGES],
            next: 0,
            calls: 0,
        }
    }

    /// Empties the cache (the next reads see memory as it is now).
    pub fn reset(&mut self) {
        self.tags = [0; PAGES];
        self.next = 0;
        self.calls = 0;
        self.pid = crate::guard::pid() as libc::pid_t;
    }

    /// Copies `len` bytes at `addr` into `dst` with one system call; false on any shortfall.
    fn fetch(&mut self, addr: usize, dst: *mut u8, len: usize) -> bool {
        if addr < PAGE || REFUSED.load(Ordering::Relaxed) {
            return false;
        }
        self.calls += 1;
        let local = libc::iovec {
            iov_base: dst.cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: `local` describes `len` writable bytes the caller owns; the kernel checks
        // `remote` itself and answers EFAULT for memory that is not mapped readable.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        Self::copied(n) == len
    }

    /// The cached page at `base`, read in if needed.
    fn page(&mut self, base: usize) -> Option<&[u8; PAGE]> {
        // (Tag 0 marks an empty slot: the first page is never read.)
        if base == 0 {
            return None;
        }
        let i = match self.tags.iter().position(|t| *t == base) {
            Some(i) => i,
            None => {
                let i = self.next;
                self.next = (self.next + 1) % PAGES;
                self.tags[i] = 0;
                let dst = self.pages[i].as_mut_ptr();
                if !self.fetch(base, dst, PAGE) {
                    return None;
                }
                self.tags[i] = base;
                i
            }
        };
        Some(&self.pages[i])
    }

    fn copy(&mut self, mut p: usize, out: &mut [u8]) -> bool {
        let mut done = 0;
        while done < out.len() {
            let base = p & !(PAGE - 1);
            let off = p - base;
            let take = (PAGE - off).min(out.len() - done);
            let Some(page) = self.page(base) else {
                return false;
            };
            out[done..done + take].copy_from_slice(&page[off..off + take]);
            done += take;
            p += take;
        }
        true
    }

    /// The pages the cache holds, in the order they were read in (0: empty slot).
    pub fn pages(&self) -> [usize; PAGES] {
        let mut out = [0; PAGES];
        for (k, o) in out.iter_mut().enumerate() {
            *o = self.tags[(self.next + k) % PAGES];
        }
        out
    }

    /// Reads the pages at `bases` (page-aligned, 0 skipped) into an empty cache with one
    /// system call: a look that reads the same pages as the last one (a loop's stack) pays one
    /// `process_vm_readv` instead of one a page. The pages read whole are kept; the rest (a
    /// page no longer mapped: the read stops there) are read one by one if asked for.
    pub fn prefetch(&mut self, bases: &[usize]) {
        let mut local = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; PAGES];
        let mut remote = local;
        self.tags = [0; PAGES];
        let mut n = 0;
        for &b in bases.iter().take(PAGES) {
            if b < PAGE || b & (PAGE - 1) != 0 || self.tags[..n].contains(&b) {
                continue;
            }
            self.tags[n] = b;
            local[n].iov_base = self.pages[n].as_mut_ptr().cast();
            local[n].iov_len = PAGE;
            remote[n].iov_base = b as *mut libc::c_void;
            remote[n].iov_len = PAGE;
            n += 1;
        }
        let mut whole = 0;
        if n > 0 && !REFUSED.load(Ordering::Relaxed) {
            self.calls += 1;
            // SAFETY: each `local` entry describes a page of `self.pages` (distinct slots)
            // that this cache owns; the kernel checks `remote` itself and stops at the first
            // page that is not mapped readable, answering the bytes copied until then.
            let got = unsafe {
                libc::process_vm_readv(self.pid, local.as_ptr(), n as _, remote.as_ptr(), n as _, 0)
            };
            whole = Self::copied(got) / PAGE;
        }
        self.tags[whole..n].fill(0);
        self.next = whole % PAGES;
    }

    /// The bytes a `process_vm_readv` answered (0 on an error, noting a refusal for good).
    fn copied(got: isize) -> usize {
        if got < 0 {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            if e == libc::EPERM || e == libc::ENOSYS || e == libc::EACCES {
                REFUSED.store(true, Ordering::Relaxed);
            }
        }
        usize::try_from(got).unwrap_or(0)
    }

    /// Reads `out.len()` bytes at `p` with one system call, bypassing the cache (long
    /// buffers: line tables).
    pub fn direct(&mut self, p: usize, out: &mut [u8]) -> bool {
        self.fetch(p, out.as_mut_ptr(), out.len())
    }
}

impl Mem for Remote {
    #[inline]
    unsafe fn read<T: Copy>(&mut self, p: usize) -> Option<T> {
        let mut buf = [0u8; 16];
        let n = size_of::<T>();
        if n > buf.len() || !self.copy(p, &mut buf[..n]) {
            return None;
        }
        // SAFETY: `T` is one of the plain integer types the walk reads (any bit pattern is a
        // value), and `buf` holds `size_of::<T>()` initialised bytes.
        Some(unsafe { std::ptr::read_unaligned(buf.as_ptr() as *const T) })
    }

    unsafe fn bytes(&mut self, p: usize, out: &mut [u8]) -> bool {
        if out.len() > 2 * PAGE {
            return self.direct(p, out);
        }
        self.copy(p, out)
    }

    unsafe fn with_bytes<R>(
        &mut self,
        p: usize,
        n: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Option<R> {
        let mut buf = vec![0u8; n];
        self.direct(p, &mut buf).then(|| f(&buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_reads_what_is_mapped_and_refuses_what_is_not() {
        let data: Vec<u64> = (0..2000).collect();
        let mut m = Box::new(Remote::new());
        m.reset();
        let p = data.as_ptr() as usize;
        // SAFETY: no requirement for `Remote`.
        unsafe {
            assert_eq!(m.read::<u64>(p + 8 * 3), Some(3));
            // Across a page boundary somewhere in 16 KB.
            for i in [511usize, 512, 1023, 1999] {
                assert_eq!(m.read::<u64>(p + 8 * i), Some(i as u64));
            }
            let mut out = [0u8; 8];
            assert!(m.bytes(p + 8 * 7, &mut out));
            assert_eq!(u64::from_ne_bytes(out), 7);
            // Not mapped: the first page.
            assert_eq!(m.read::<u64>(8), None);
        }
        // Freed and unmapped memory reads as nothing, without a fault.
        // SAFETY: an anonymous private mapping, unmapped before it is read.
        unsafe {
            let len = 4 * PAGE;
            let a = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(a, libc::MAP_FAILED);
            *(a as *mut u64) = 42;
            m.reset();
            assert_eq!(m.read::<u64>(a as usize), Some(42));
            libc::munmap(a, len);
            m.reset();
            assert_eq!(m.read::<u64>(a as usize), None);
        }
        assert!(Remote::available());
    }

    #[test]
    fn a_prefetch_reads_the_pages_at_once_and_stops_at_one_not_mapped() {
        // SAFETY: an anonymous private mapping of four pages, the third unmapped below.
        let a = unsafe {
            let a = libc::mmap(
                std::ptr::null_mut(),
                4 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(a, libc::MAP_FAILED);
            for k in 0..4 {
                *((a as usize + k * PAGE) as *mut u64) = 100 + k as u64;
            }
            a as usize
        };
        let mut m = Box::new(Remote::new());
        m.reset();
        m.prefetch(&[a, a + PAGE, a + 3 * PAGE, 0, a + PAGE + 8]);
        assert_eq!(m.calls, 1);
        // SAFETY: no requirement for `Remote`.
        unsafe {
            for k in [0usize, 1, 3] {
                assert_eq!(m.read::<u64>(a + k * PAGE), Some(100 + k as u64));
            }
        }
        assert_eq!(m.calls, 1, "every page came from the one read");
        let held: Vec<usize> = m.pages().into_iter().filter(|p| *p != 0).collect();
        assert_eq!(held, vec![a, a + PAGE, a + 3 * PAGE]);
        // A page gone: the read stops there; the pages before it are kept, the rest read
        // one by one when asked for, and what is not mapped reads as nothing.
        // SAFETY: the third page of the mapping above, not used after.
        unsafe { libc::munmap((a + 2 * PAGE) as *mut libc::c_void, PAGE) };
        m.reset();
        m.prefetch(&[a, a + 2 * PAGE, a + 3 * PAGE]);
        assert_eq!(m.calls, 1);
        // SAFETY: as above.
        unsafe {
            assert_eq!(m.read::<u64>(a), Some(100));
            assert_eq!(m.calls, 1);
            assert_eq!(m.read::<u64>(a + 2 * PAGE), None);
            assert_eq!(m.read::<u64>(a + 3 * PAGE), Some(103));
            libc::munmap(a as *mut libc::c_void, 4 * PAGE);
        }
        assert_eq!(m.calls, 3);
    }
}
