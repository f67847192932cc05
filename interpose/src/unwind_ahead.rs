//! The unwind tables of the loaded objects, read into the page cache ahead of the first
//! stack, on a short-lived thread of the library's own.
//!
//! A stack is unwound on the program's thread, at the stall (`stack`). The unwinder reads
//! each frame's object's `.eh_frame_hdr` (a binary search) and `.eh_frame` (the frame's
//! description). Nothing else reads them, so in a process that has not thrown through a
//! library they are still on disk: the first stack through libtorch on a GPU host whose page
//! cache was cold took 28 ms of page faults on the program's thread, against well under a
//! millisecond once cached (docs/performance.md). Here, whenever the dynamic linker has
//! loaded something new (`stack::refresh_modules`), a thread reads each new object's
//! `.eh_frame_hdr` and asks the kernel to read its `.eh_frame` ahead (`MADV_WILLNEED`).
//!
//! The object's memory is never dereferenced: the thread copies what it reads with
//! `process_vm_readv`, which answers an error, not a fault, should the object be unloaded
//! meanwhile, and holds no lock of the dynamic linker while it reads. Each object is read
//! ahead once; the page cache it fills is the kernel's, shared with every process that maps
//! the same file.

use std::ops::{ControlFlow, Range};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use gimli::{BaseAddresses, EhFrameHdr, NativeEndian, Pointer};
use syncspy_abi::objects::for_each_object;

/// The most of one object's `.eh_frame` read ahead: bounds the work on a corrupt table.
const MAX_EH_FRAME: u64 = 256 << 20;

/// Whether a reading thread runs.
static RUNNING: AtomicBool = AtomicBool::new(false);
/// The `.eh_frame_hdr` addresses already read ahead.
static DONE: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// One object's unwind tables, as the dynamic linker lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Tables {
    /// Runtime range of `.eh_frame_hdr` (`PT_GNU_EH_FRAME`).
    hdr: Range<u64>,
    /// Runtime ranges of the object's `PT_LOAD` segments.
    segments: Vec<Range<u64>>,
}

/// The objects loaded now that have an `.eh_frame_hdr`.
fn loaded() -> Vec<Tables> {
    let mut out = Vec::new();
    for_each_object(|o| -> ControlFlow<()> {
        if let Some(ph) = o
            .program_headers()
            .iter()
            .find(|ph| ph.p_type == libc::PT_GNU_EH_FRAME && ph.p_memsz > 0)
        {
            let start = o.bias().wrapping_add(ph.p_vaddr);
            out.push(Tables {
                hdr: start..start.wrapping_add(ph.p_memsz),
                segments: o.segments().collect(),
            });
        }
        ControlFlow::Continue(())
    });
    out
}

/// Reads `len` bytes of this process's memory at `addr` by copy: `None` where any of it is
/// not mapped readable.
fn copy_in(addr: u64, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` is `buf`, writable for `len` bytes; the remote range is only read by
    // the kernel, which answers EFAULT for what is not mapped.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (usize::try_from(n).ok() == Some(len)).then_some(buf)
}

/// The runtime range of an object's `.eh_frame`, from the copy of its `.eh_frame_hdr`: from
/// the header's pointer to the end of the last description its search table lists, within
/// the segment that holds it. `None` without a search table or on anything inconsistent.
fn eh_frame_range(t: &Tables, hdr: &[u8]) -> Option<Range<u64>> {
    let bases = BaseAddresses::default().set_eh_frame_hdr(t.hdr.start);
    let parsed = EhFrameHdr::new(hdr, NativeEndian).parse(&bases, 8).ok()?;
    let Pointer::Direct(start) = parsed.eh_frame_ptr() else {
        return None;
    };
    let segment = t.segments.iter().find(|s| s.contains(&start))?;
    let table = parsed.table()?;
    let mut last = None;
    let mut rows = table.iter(&bases);
    while let Ok(Some((_, fde))) = rows.next() {
        if let Pointer::Direct(a) = fde {
            if a >= start && a < segment.end {
                last = Some(last.map_or(a, |l: u64| l.max(a)));
            }
        }
    }
    let last = last?;
    // The last description's length: 4 bytes, or 0xffffffff and 8 more.
    let head = copy_in(last, 4)?;
    let len = u32::from_ne_bytes(head.try_into().ok()?);
    let end = if len == u32::MAX {
        let ext = copy_in(last + 4, 8)?;
        (last + 12).checked_add(u64::from_ne_bytes(ext.try_into().ok()?))?
    } else {
        last + 4 + u64::from(len)
    };
    let end = end.min(segment.end).min(start.saturating_add(MAX_EH_FRAME));
    (end > start).then_some(start..end)
}

/// Asks the kernel to read `range` of a file mapping ahead; it returns without waiting.
fn will_need(range: &Range<u64>) {
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096);
    let start = range.start & !(page - 1);
    let Ok(len) = usize::try_from(range.end - start) else {
        return;
    };
    // SAFETY: MADV_WILLNEED only advises: it changes no memory and answers ENOMEM for a range
    // not mapped (an object unloaded meanwhile).
    unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_WILLNEED) };
}

/// Reads one object's tables ahead: `.eh_frame_hdr` by copying it (which faults it in), then
/// `.eh_frame` by advice. Returns the `.eh_frame` range asked for.
fn read_ahead(t: &Tables) -> Option<Range<u64>> {
    let len = usize::try_from(t.hdr.end.checked_sub(t.hdr.start)?).ok()?;
    let hdr = copy_in(t.hdr.start, len)?;
    let range = eh_frame_range(t, &hdr)?;
    will_need(&range);
    Some(range)
}

/// One pass: every loaded object not read ahead yet.
fn pass() {
    for t in loaded() {
        {
            let Ok(mut done) = DONE.lock() else { return };
            if done.contains(&t.hdr.start) {
                continue;
            }
            done.push(t.hdr.start);
        }
        read_ahead(&t);
    }
}

/// The dynamic linker has loaded something since the last look: reads the new objects'
/// unwind tables ahead on a thread of its own, unless one runs (it looks again before it
/// ends). Never waits; a thread that cannot start leaves the first stacks to fault.
pub(crate) fn request() {
    if RUNNING.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("syncspy-unwind".into())
        .stack_size(128 * 1024)
        .spawn(|| {
            let _ = std::panic::catch_unwind(|| loop {
                let adds = crate::real::loader_adds();
                pass();
                RUNNING.store(false, Ordering::Release);
                // A load after the pass began whose request found this thread running.
                if crate::real::loader_adds() == adds || RUNNING.swap(true, Ordering::AcqRel) {
                    break;
                }
            });
            RUNNING.store(false, Ordering::Release);
        });
    if spawned.is_err() {
        RUNNING.store(false, Ordering::Release);
    }
}

/// In a fork child: no reading thread runs there.
pub(crate) fn after_fork_in_child() {
    RUNNING.store(false, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tables of the object that holds `addr`.
    fn tables_of(addr: u64) -> Tables {
        loaded()
            .into_iter()
            .find(|t| t.segments.iter().any(|s| s.contains(&addr)))
            .expect("the object holding this code has an .eh_frame_hdr")
    }

    #[test]
    fn the_range_read_ahead_holds_the_description_of_a_function_of_the_object() {
        // This test's own function and libc's: the unwinder would look both up.
        for pc in [
            the_range_read_ahead_holds_the_description_of_a_function_of_the_object as *const ()
                as u64,
            libc::getpid as *const () as u64,
        ] {
            let t = tables_of(pc);
            let range = read_ahead(&t).expect("a search table and a range");
            let hdr = copy_in(t.hdr.start, (t.hdr.end - t.hdr.start) as usize).unwrap();
            let bases = BaseAddresses::default().set_eh_frame_hdr(t.hdr.start);
            let parsed = EhFrameHdr::new(&hdr[..], NativeEndian)
                .parse(&bases, 8)
                .unwrap();
            let Pointer::Direct(fde) = parsed.table().unwrap().lookup(pc, &bases).unwrap() else {
                panic!("a direct pointer");
            };
            assert!(range.contains(&fde), "{fde:#x} in {range:x?}");
            let seg = t
                .segments
                .iter()
                .find(|s| s.contains(&range.start))
                .unwrap();
            assert!(range.end <= seg.end, "{range:x?} within {seg:x?}");
        }
    }

    #[test]
    fn an_unmapped_header_is_an_answer_not_a_fault() {
        assert_eq!(copy_in(8, 64), None);
        let t = Tables {
            hdr: 0x1000..0x1100,
            segments: vec![0x1000..0x2000, 0x3000..0x4000],
        };
        assert_eq!(read_ahead(&t), None);
        // A header that says nothing sensible.
        assert_eq!(eh_frame_range(&t, &[0xff; 16]), None);
    }

    #[test]
    fn a_pass_reads_each_object_once_and_the_thread_ends() {
        pass();
        let n = DONE.lock().unwrap().len();
        assert!(n >= 2, "the test binary and libc at least: {n}");
        pass();
        assert_eq!(DONE.lock().unwrap().len(), n);
        request();
        let t0 = std::time::Instant::now();
        while RUNNING.load(Ordering::Acquire) {
            assert!(t0.elapsed().as_secs() < 30, "the reading thread ends");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
