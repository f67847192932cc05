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
//! The object's memory is never dereferenced: the thread copies what it reads through the
//! kernel (`python::mem::Remote`, `process_vm_readv`), which answers an error, not a fault,
//! should the object be unloaded meanwhile, and holds no lock of the dynamic linker while it
//! reads. Each object is read
//! ahead once; the page cache it fills is the kernel's, shared with every process that maps
//! the same file.

use std::ops::{ControlFlow, Range};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use gimli::{BaseAddresses, EhFrameHdr, NativeEndian, Pointer};
use syncspy_abi::objects::for_each_object;

use crate::python::mem::{Mem, Remote};

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

/// Where an object's `.eh_frame` starts, the last description its search table lists, and the
/// segment that holds them, from the copy of its `.eh_frame_hdr`. `None` without a search
/// table or on anything inconsistent.
fn eh_frame_bounds(t: &Tables, hdr: &[u8]) -> Option<(u64, u64, Range<u64>)> {
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
    Some((start, last?, segment.clone()))
}

/// The runtime range of an object's `.eh_frame`: from the header's pointer to the end of the
/// last description its search table lists, within the segment that holds it.
fn eh_frame_range(t: &Tables, m: &mut Remote) -> Option<Range<u64>> {
    let len = usize::try_from(t.hdr.end.checked_sub(t.hdr.start)?).ok()?;
    let (start, last, segment) =
        // SAFETY: `Remote` reads through the kernel; it has no requirement.
        unsafe { m.with_bytes(t.hdr.start as usize, len, |hdr| eh_frame_bounds(t, hdr)) }??;
    // The last description's length: 4 bytes, or 0xffffffff and 8 more.
    // SAFETY: as above.
    let len = unsafe { m.read::<u32>(last as usize) }?;
    let end = if len == u32::MAX {
        // SAFETY: as above.
        let ext = unsafe { m.read::<u64>(last as usize + 4) }?;
        (last + 12).checked_add(ext)?
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
    let mut m = Box::new(Remote::new());
    m.reset();
    let range = eh_frame_range(t, &mut m)?;
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
            // SAFETY: the test binary's own, loaded header.
            let hdr = unsafe {
                std::slice::from_raw_parts(
                    t.hdr.start as *const u8,
                    (t.hdr.end - t.hdr.start) as usize,
                )
            };
            let bases = BaseAddresses::default().set_eh_frame_hdr(t.hdr.start);
            let parsed = EhFrameHdr::new(hdr, NativeEndian).parse(&bases, 8).unwrap();
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
        let t = Tables {
            hdr: 0x1000..0x1100,
            segments: vec![0x1000..0x2000, 0x3000..0x4000],
        };
        assert_eq!(read_ahead(&t), None);
        // A header that says nothing sensible.
        assert_eq!(eh_frame_bounds(&t, &[0xff; 16]), None);
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
