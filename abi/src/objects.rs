//! The objects the dynamic linker has loaded into this process (the program, its shared
//! libraries, the vDSO), through one safe wrapper of `dl_iterate_phdr`. The writer builds the
//! segment's module map from it and finds a CUDA runtime loaded under another file name;
//! readers' tests take their own executable's module map entry from it.
//!
//! Iterating allocates nothing and takes no lock of ours, so it may run inside a hook; the
//! dynamic linker holds its own lock while the callback runs (see [`for_each_object`]).

use std::any::Any;
use std::ffi::{c_int, c_void, CStr};
use std::ops::{ControlFlow, Range};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use crate::modules::gnu_build_id;

/// An ELF program header of a loaded object (64-bit targets, the only ones syncspy builds for).
pub type ProgramHeader = libc::Elf64_Phdr;

/// One loaded object as the dynamic linker describes it. It is lent to the callback of
/// [`for_each_object`] and cannot outlive that call: the object may be unloaded after it.
pub struct LoadedObject<'a> {
    name: &'a CStr,
    bias: u64,
    headers: &'a [ProgramHeader],
    adds: u64,
}

impl<'a> LoadedObject<'a> {
    /// The path the object was loaded under, as the loader was given it (not necessarily
    /// absolute). Empty for the main program, which glibc lists first.
    pub fn name(&self) -> &'a CStr {
        self.name
    }

    /// Load bias: runtime address minus the ELF virtual address (`dlpi_addr`).
    pub fn bias(&self) -> u64 {
        self.bias
    }

    /// The object's program headers, read from its mapped image.
    pub fn program_headers(&self) -> &'a [ProgramHeader] {
        self.headers
    }

    /// Runtime address ranges of the object's `PT_LOAD` segments, in header order.
    pub fn segments(&self) -> impl Iterator<Item = Range<u64>> + 'a {
        let bias = self.bias;
        self.headers
            .iter()
            .filter(|ph| ph.p_type == libc::PT_LOAD)
            // Wrapping: address arithmetic is modular (a bias may be "negative" for objects
            // linked above where they were mapped).
            .map(move |ph| {
                let start = bias.wrapping_add(ph.p_vaddr);
                start..start.wrapping_add(ph.p_memsz)
            })
    }

    /// The runtime address range spanned by all `PT_LOAD` segments; `None` for an object
    /// without any (or whose segments are all empty).
    pub fn extent(&self) -> Option<Range<u64>> {
        let (start, end) = self.segments().fold((u64::MAX, 0), |(lo, hi), r| {
            (lo.min(r.start), hi.max(r.end))
        });
        (start < end).then_some(start..end)
    }

    /// The GNU build id from the object's `PT_NOTE` segments, if it has one. Only notes
    /// that lie inside a readable, file-backed part of a `PT_LOAD` segment are read, since
    /// only those are certainly mapped.
    pub fn build_id(&self) -> Option<&'a [u8]> {
        let mapped = |ph: &ProgramHeader| {
            self.headers.iter().any(|load| {
                load.p_type == libc::PT_LOAD
                    && load.p_flags & libc::PF_R != 0
                    && ph.p_vaddr >= load.p_vaddr
                    && ph.p_vaddr.checked_add(ph.p_memsz) <= load.p_vaddr.checked_add(load.p_filesz)
            })
        };
        self.headers
            .iter()
            .filter(|ph| ph.p_type == libc::PT_NOTE && ph.p_memsz > 0 && mapped(ph))
            .find_map(|ph| {
                let base = self.bias.wrapping_add(ph.p_vaddr) as *const u8;
                // SAFETY: the note lies inside the file-backed part of a readable PT_LOAD
                // segment (checked above), which the loader mapped at bias + p_vaddr and
                // keeps mapped while the object is loaded, that is for at least 'a; the
                // image is never written after relocation, so no `&mut` aliases it.
                let notes = unsafe { std::slice::from_raw_parts(base, ph.p_memsz as usize) };
                gnu_build_id(notes)
            })
    }

    /// The number of objects the dynamic linker has loaded since the process started
    /// (`dlpi_adds`, the same in every object's description); 0 if the C library does not
    /// report it. It grows with every `dlopen` that maps something new, so an unchanged
    /// value means no new object since it was last read.
    pub fn adds(&self) -> u64 {
        self.adds
    }

    /// # Safety
    /// `info` is a description that `dl_iterate_phdr` passed to its callback together with
    /// `size`, and `'a` does not extend beyond that callback.
    unsafe fn from_info(info: &'a libc::dl_phdr_info, size: usize) -> LoadedObject<'a> {
        let name = if info.dlpi_name.is_null() {
            c""
        } else {
            // SAFETY: a non-null `dlpi_name` is a NUL-terminated string owned by the loader's
            // record of the object, which lives while the callback runs (caller's contract).
            unsafe { CStr::from_ptr(info.dlpi_name) }
        };
        let headers = if info.dlpi_phdr.is_null() || info.dlpi_phnum == 0 {
            &[][..]
        } else {
            // SAFETY: `dlpi_phdr` points to `dlpi_phnum` program headers in the object's
            // mapped (read-only after relocation) image, valid while the callback runs.
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) }
        };
        // `dlpi_adds` exists only if the C library's struct is long enough to hold it
        // (glibc since 2.4); `size` says how long it is.
        let adds = if size >= std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) {
            info.dlpi_adds
        } else {
            0
        };
        LoadedObject {
            name,
            bias: info.dlpi_addr,
            headers,
            adds,
        }
    }
}

/// Calls `f` for each loaded object, in the dynamic linker's order (the main program first),
/// until it returns `Break`; returns the `Break` value, or `None` when every object was
/// visited.
///
/// `f` runs with the dynamic linker's lock held. It must not load or unload objects
/// (`dlopen`, `dlclose`, or anything that may call them): another thread inside `dlopen`
/// can be waiting for that lock while holding the one `dlopen` needs. Copy out what a later
/// `dlopen` needs instead. A panic in `f` stops the iteration, is carried across the C
/// library's frames (unwinding through them would skip the unlock), and resumes in the
/// caller once the lock is released.
pub fn for_each_object<R>(mut f: impl FnMut(&LoadedObject<'_>) -> ControlFlow<R>) -> Option<R> {
    let mut state = State {
        f: &mut f,
        result: None,
        panic: None,
    };
    // SAFETY: `visit::<R>` has the callback signature `dl_iterate_phdr` expects and treats
    // `data` as the `State<R>` passed here, which outlives the call; `dl_iterate_phdr` calls
    // it only on this thread, before returning.
    unsafe {
        libc::dl_iterate_phdr(
            Some(visit::<R>),
            &mut state as *mut State<'_, R> as *mut c_void,
        )
    };
    if let Some(payload) = state.panic {
        resume_unwind(payload);
    }
    state.result
}

struct State<'f, R> {
    f: &'f mut dyn FnMut(&LoadedObject<'_>) -> ControlFlow<R>,
    result: Option<R>,
    panic: Option<Box<dyn Any + Send>>,
}

/// The C callback. Nothing in it can unwind into `dl_iterate_phdr`: the user's closure runs
/// under `catch_unwind`, and the rest does not panic (an `extern "C"` function that did
/// would abort rather than unwind).
extern "C" fn visit<R>(info: *mut libc::dl_phdr_info, size: usize, data: *mut c_void) -> c_int {
    // SAFETY: `data` is the `&mut State<R>` that `for_each_object` passed to
    // `dl_iterate_phdr`, which calls back on the same thread while that frame (and so the
    // borrow) is live; no other reference to it exists during the call.
    let state = unsafe { &mut *(data as *mut State<'_, R>) };
    // SAFETY: `info` and `size` come from `dl_iterate_phdr` for this call, and the
    // `LoadedObject` is dropped before we return to it.
    let object = unsafe { LoadedObject::from_info(&*info, size) };
    // AssertUnwindSafe: after a panic nothing here touches `f` again; the payload resumes in
    // the caller, whose own unwind boundary judges what the closure captured.
    match catch_unwind(AssertUnwindSafe(|| (state.f)(&object))) {
        Ok(ControlFlow::Continue(())) => 0,
        Ok(ControlFlow::Break(r)) => {
            state.result = Some(r);
            1
        }
        Err(payload) => {
            state.panic = Some(payload);
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_function_of_this_binary() -> u64 {
        std::hint::black_box(7)
    }

    #[test]
    fn the_main_program_comes_first_and_holds_its_own_code() {
        let here = a_function_of_this_binary as *const () as u64;
        let (name, extent, segments) = for_each_object(|o| {
            ControlFlow::Break((
                o.name().to_bytes().to_vec(),
                o.extent(),
                o.segments().collect::<Vec<_>>(),
            ))
        })
        .expect("at least one object");
        assert_eq!(name, b"");
        let extent = extent.expect("the program has PT_LOAD segments");
        assert!(extent.contains(&here), "{extent:x?} lacks {here:#x}");
        assert!(segments.iter().any(|s| s.contains(&here)));
        assert!(segments
            .iter()
            .all(|s| extent.start <= s.start && s.end <= extent.end));
    }

    #[test]
    fn visits_every_object_until_break() {
        let mut all = Vec::new();
        let none: Option<()> = for_each_object(|o| {
            all.push((o.name().to_bytes().to_vec(), o.bias(), o.adds()));
            ControlFlow::Continue(())
        });
        assert_eq!(none, None);
        assert!(all.len() >= 2, "{all:?}");
        assert!(all
            .iter()
            .any(|(n, bias, _)| { n.windows(7).any(|w| w == b"libc.so") && *bias != 0 }));
        // Every description reports the same load count, at least one per object seen.
        assert!(all
            .iter()
            .all(|(_, _, a)| *a == all[0].2 && *a >= all.len() as u64));
        // Break stops at once and hands back its value.
        let mut calls = 0;
        let second = for_each_object(|o| {
            calls += 1;
            if calls == 2 {
                ControlFlow::Break(o.bias())
            } else {
                ControlFlow::Continue(())
            }
        });
        assert_eq!((second, calls), (Some(all[1].1), 2));
    }

    #[test]
    fn a_panic_in_the_callback_resumes_in_the_caller_with_the_loader_unlocked() {
        let mut calls = 0;
        let caught = std::panic::catch_unwind(AssertUnwindSafe(|| {
            for_each_object(|_| -> ControlFlow<()> {
                calls += 1;
                panic!("from the callback");
            })
        }));
        let payload = caught.expect_err("the panic reaches the caller");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"from the callback"));
        assert_eq!(calls, 1);
        // Another thread can take the loader's lock, so it was released.
        let n = std::thread::spawn(|| {
            let mut n = 0;
            for_each_object(|_| -> ControlFlow<()> {
                n += 1;
                ControlFlow::Continue(())
            });
            n
        })
        .join()
        .expect("iterating from another thread");
        assert!(n >= 2);
    }

    #[test]
    fn build_ids_come_from_mapped_notes() {
        // The Rust toolchain links with --build-id, and so are distribution libraries.
        let ids: Vec<Option<Vec<u8>>> = {
            let mut v = Vec::new();
            for_each_object(|o| -> ControlFlow<()> {
                v.push(o.build_id().map(<[u8]>::to_vec));
                ControlFlow::Continue(())
            });
            v
        };
        assert!(ids.iter().flatten().any(|id| id.len() >= 16), "{ids:?}");
    }
}
