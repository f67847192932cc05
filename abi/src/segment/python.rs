//! The segment's accessors of the `python` section ([`crate::python`]): kept on the segment's
//! side so that the section file holds only its layout types and the segment depends on
//! them, never the reverse.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::layout::{Header, Ident};
use crate::python::*;
use crate::segment::{OpenError, SegmentReader, SegmentWriter};
use crate::sites::{self, MAX_FRAMES};

impl SegmentWriter {
    fn py_header(&self) -> &PyHeader {
        // SAFETY: the writer's mapping starts with this build's `Header` (checked at creation);
        // `PyHeader` is read through shared references only: plain fields written before the
        // segment was published, atomics afterwards.
        unsafe { &(*(self.v.map.ptr as *const Header)).python }
    }

    /// The Python counters.
    pub fn python_live(&self) -> &PyLive {
        &self.py_header().live
    }

    /// Whether this segment has Python tables.
    pub fn has_python_tables(&self) -> bool {
        self.v.py.site_capacity != 0
    }

    /// Publishes what the process's interpreter is: `PY_*` and its `PY_VERSION_HEX`.
    pub fn set_python(&self, status: u32, version: u32) {
        let live = self.python_live();
        live.version.store(version, Ordering::Relaxed);
        live.status.store(status, Ordering::Release);
    }

    fn py_sites(&self) -> &[PySiteEntry] {
        if self.v.py.site_capacity == 0 {
            return &[];
        }
        // SAFETY: laid out at creation inside the mapping, 64-byte aligned; all atomics.
        unsafe {
            std::slice::from_raw_parts(
                self.v.map.ptr.add(self.v.py.sites_offset) as *const PySiteEntry,
                self.v.py.site_capacity,
            )
        }
    }

    /// Interns the call site made of native site `native`'s stack and a Python stack that
    /// hashes to `py_hash`. `None` when the native site is not published, there are no Python
    /// tables, or the site table is full around the site's home (counted in `sites_dropped`).
    /// Never waits.
    pub fn intern_python_site(&self, native: u32, py_hash: u64) -> Option<u32> {
        if !self.has_python_tables() {
            return None;
        }
        let e = self.v.sites().get((native as usize).checked_sub(1)?)?;
        if e.state.load(Ordering::Acquire) != sites::STATE_READY {
            return None;
        }
        let n = (e.nframes.load(Ordering::Relaxed) as usize).min(MAX_FRAMES);
        let mut frames = [0u64; MAX_FRAMES];
        for (dst, src) in frames.iter_mut().zip(&e.frames[..n]) {
            *dst = src.load(Ordering::Relaxed);
        }
        let frames = &frames[..n];
        sites::intern_hashed(
            self.v.live(),
            self.v.sites(),
            frames,
            salted_hash(frames, py_hash),
        )
    }

    /// Claims the Python entry of site `id` for writing: `true` for exactly one caller, which
    /// then calls `publish_python_site`.
    pub fn claim_python_site(&self, id: u32) -> bool {
        let Some(e) = (id as usize)
            .checked_sub(1)
            .and_then(|i| self.py_sites().get(i))
        else {
            return false;
        };
        e.state
            .compare_exchange(0, STATE_WRITING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Fills and publishes the claimed Python entry of site `id`. Frames past `MAX_PY_FRAMES`
    /// are dropped and the entry marked truncated. `elided`: a frame of `frames` is a
    /// `SKIPPED_CODE` frame (`FLAG_ELIDED`).
    pub fn publish_python_site(
        &self,
        id: u32,
        frames: &[PyFrameRef],
        truncated: bool,
        elided: bool,
    ) {
        self.publish_site(id, frames, truncated, elided, None);
    }

    /// Fills and publishes the claimed Python entry of site `id` with the frames of the Python
    /// thread that waited for the call (`FLAG_WAITED_BY`; `main`: it was the main thread).
    /// The entry's own frame count stays 0, so a reader older than ABI 1.6 sees a site with no
    /// Python frames, as it saw it before, and never takes the waiter's frames for the site's.
    pub fn publish_waiter_site(
        &self,
        id: u32,
        frames: &[PyFrameRef],
        truncated: bool,
        elided: bool,
        main: bool,
    ) {
        self.publish_site(id, frames, truncated, elided, Some(main));
    }

    /// The two above: the site's own frames (`waiter: None`), or a waiter's (`Some(main)`),
    /// counted in `waiter_frames` with the entry's own count left 0.
    fn publish_site(
        &self,
        id: u32,
        frames: &[PyFrameRef],
        truncated: bool,
        elided: bool,
        waiter: Option<bool>,
    ) {
        let Some(e) = (id as usize)
            .checked_sub(1)
            .and_then(|i| self.py_sites().get(i))
        else {
            return;
        };
        let n = frames.len().min(MAX_PY_FRAMES);
        for (dst, f) in e.frames.iter().zip(&frames[..n]) {
            dst.store(
                u64::from(f.code) << 32 | u64::from(f.line),
                Ordering::Relaxed,
            );
        }
        let cut = truncated || frames.len() > MAX_PY_FRAMES;
        let mut flags = if cut { FLAG_TRUNCATED } else { 0 } | if elided { FLAG_ELIDED } else { 0 };
        match waiter {
            None => e.nframes.store(n as u32, Ordering::Relaxed),
            Some(main) => {
                e.nframes.store(0, Ordering::Relaxed);
                e.waiter_frames.store(n as u32, Ordering::Relaxed);
                flags |= FLAG_WAITED_BY | if main { FLAG_WAITER_MAIN } else { 0 };
            }
        }
        e.flags.store(flags, Ordering::Relaxed);
        e.state.store(STATE_READY, Ordering::Release);
    }

    /// The id of the code object identified by `key` (non-zero) in the code table. The first
    /// caller for a key claims an entry and `fill` decodes the names into it, so each code
    /// object is decoded once; `None` when the table is full around the key's home (counted).
    /// Never waits: a caller that finds the entry still being written gets its id.
    pub fn intern_code(&self, key: u64, fill: impl FnOnce(&mut CodeText)) -> Option<u32> {
        let cap = self.v.py.code_capacity;
        if cap == 0 {
            return None;
        }
        let key = key | 1;
        // SAFETY: laid out at creation inside the writable mapping, 64-byte aligned.
        let table = unsafe { self.v.map.ptr.add(self.v.py.codes_offset) as *mut PyCodeEntry };
        let live = self.python_live();
        for probe in 0..MAX_PROBES.min(cap) {
            let idx = (key as usize).wrapping_add(probe) & (cap - 1);
            // SAFETY: `idx < cap`; only the atomic `key` is borrowed shared here.
            let slot = unsafe { &(*table.add(idx)).key };
            let k = match slot.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    let mut text = CodeText::new();
                    fill(&mut text);
                    // SAFETY: this thread claimed the entry by the CAS above and is its only
                    // writer; readers look at its plain fields only after `state` is READY.
                    unsafe { write_code(table.add(idx), &text) };
                    live.codes_used.fetch_add(1, Ordering::Relaxed);
                    return Some(idx as u32 + 1);
                }
                Err(k) => k,
            };
            if k == key {
                return Some(idx as u32 + 1);
            }
        }
        live.codes_dropped.fetch_add(1, Ordering::Relaxed);
        None
    }
}

impl SegmentReader {
    fn py_live(&self) -> Option<&PyLive> {
        if self.frozen() || !self.v.py.header {
            return None;
        }
        // SAFETY: `py.header` is set only when the validated `header_size` covers `PyHeader`,
        // and the mapping holds at least HEADER_RESERVED bytes; `PyLive` is all atomics.
        Some(unsafe { &(*(self.v.map.ptr as *const Header)).python.live })
    }

    /// Whether the writing process had Python, which version, and the Python counters. All
    /// default (`PythonState::Absent`) for segments older than ABI 1.1 and frozen readers.
    pub fn python_status(&self) -> PythonStatus {
        let Some(l) = self.py_live() else {
            return PythonStatus::default();
        };
        let state = match l.status.load(Ordering::Acquire) {
            PY_ABSENT => PythonState::Absent,
            PY_SUPPORTED => PythonState::Supported,
            PY_UNSUPPORTED => PythonState::Unsupported,
            s => PythonState::Unknown(s),
        };
        PythonStatus {
            state,
            version: PyVersion::from_hex(l.version.load(Ordering::Relaxed)),
            stacks: l.stacks.load(Ordering::Relaxed),
            truncated: l.truncated.load(Ordering::Relaxed),
            rejected: l.rejected.load(Ordering::Relaxed),
            finalizing: l.finalizing.load(Ordering::Relaxed),
            codes_dropped: u64::from(l.codes_dropped.load(Ordering::Relaxed)),
        }
    }

    /// The Python entry of call site `id` once its writer published it; `None` for a frozen or
    /// truncated segment, one without Python tables, an unknown id or an unpublished entry.
    fn published_py_site(&self, id: u32) -> Option<&PySiteEntry> {
        let py = self.v.py;
        if self.frozen() || py.site_capacity == 0 || !self.intact() {
            return None;
        }
        let idx = (id as usize).checked_sub(1)?;
        if idx >= py.site_capacity {
            return None;
        }
        // SAFETY: validated at open to lie inside the mapping, 64-byte aligned; atomics only.
        let e = unsafe { &*(self.v.map.ptr.add(py.sites_offset) as *const PySiteEntry).add(idx) };
        (e.state.load(Ordering::Acquire) == STATE_READY).then_some(e)
    }

    /// The Python frames of call site `id` (the `site` of a record), innermost first: the
    /// first is the line that made the CUDA call, or called the library that did. `None` when
    /// the site has no Python frames (a native thread, a program without Python, a segment
    /// without Python tables, an unknown id) or its entry is not yet published.
    ///
    /// Reads at most `MAX_PY_FRAMES` code entries; call it once per site, not per record.
    pub fn python_stack(&self, id: u32) -> Option<PyStack> {
        let e = self.published_py_site(id)?;
        let n = (e.nframes.load(Ordering::Relaxed) as usize).min(MAX_PY_FRAMES);
        if n == 0 {
            return None;
        }
        let frames = self.decode_frames(&e.frames[..n]);
        Some(PyStack {
            frames,
            truncated: e.flags.load(Ordering::Relaxed) & FLAG_TRUNCATED != 0,
        })
    }

    /// The Python thread that waited for call site `id` (ABI 1.6): set only for a site whose
    /// own thread had no Python frames, and never together with `python_stack(id)`. `None`
    /// for every other site, an unpublished entry, and segments older than 1.6.
    pub fn waited_by(&self, id: u32) -> Option<PyWaiter> {
        let e = self.published_py_site(id)?;
        let flags = e.flags.load(Ordering::Relaxed);
        let n = (e.waiter_frames.load(Ordering::Relaxed) as usize).min(MAX_PY_FRAMES);
        if flags & FLAG_WAITED_BY == 0 || n == 0 || e.nframes.load(Ordering::Relaxed) != 0 {
            return None;
        }
        let frames = self.decode_frames(&e.frames[..n]);
        Some(PyWaiter {
            stack: PyStack {
                frames,
                truncated: flags & FLAG_TRUNCATED != 0,
            },
            main: flags & FLAG_WAITER_MAIN != 0,
        })
    }

    fn decode_frames(&self, raw: &[AtomicU64]) -> Vec<PyFrameInfo> {
        raw.iter()
            .map(|f| {
                let w = f.load(Ordering::Relaxed);
                let code = (w >> 32) as u32;
                if code == SKIPPED_CODE {
                    return PyFrameInfo {
                        file: String::new(),
                        function: String::new(),
                        line: 0,
                        skipped: w as u32,
                    };
                }
                let (file, function) = self.code_names(code);
                PyFrameInfo {
                    file,
                    function,
                    line: w as u32,
                    skipped: 0,
                }
            })
            .collect()
    }

    /// `python_stack(id)`'s frames, or none.
    pub fn python_frames(&self, id: u32) -> Vec<PyFrameInfo> {
        self.python_stack(id).map(|s| s.frames).unwrap_or_default()
    }

    /// File and function of code id `code`; empty strings when unknown.
    fn code_names(&self, code: u32) -> (String, String) {
        let py = self.v.py;
        let Some(idx) = (code as usize)
            .checked_sub(1)
            .filter(|i| *i < py.code_capacity)
        else {
            return (String::new(), String::new());
        };
        // SAFETY: validated at open to lie inside the mapping; published entries are not
        // written again; volatile because the memory is shared with a process we do not trust.
        unsafe {
            let e = (self.v.map.ptr.add(py.codes_offset) as *const PyCodeEntry).add(idx);
            if (*e).state.load(Ordering::Acquire) != STATE_READY {
                return (String::new(), String::new());
            }
            let file_len = (std::ptr::read_volatile(&(*e).file_len) as usize).min(FILE_MAX);
            let name_len = (std::ptr::read_volatile(&(*e).name_len) as usize).min(NAME_MAX);
            let file = std::ptr::read_volatile(&(*e).file);
            let name = std::ptr::read_volatile(&(*e).name);
            (
                String::from_utf8_lossy(&file[..file_len]).into_owned(),
                String::from_utf8_lossy(&name[..name_len]).into_owned(),
            )
        }
    }
}

/// What a reader knows of the Python part of a segment, validated at open.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PyViews {
    /// The header holds `PyHeader` (ABI 1.1 or later).
    pub header: bool,
    pub sites_offset: usize,
    pub site_capacity: usize,
    pub codes_offset: usize,
    pub code_capacity: usize,
}

/// Checks the Python part of a header against the segment: the tables, when present, lie after
/// `after` (the end of the module map) and within `total_size`.
pub(crate) fn validate(id: &Ident, py: Option<&PyIdent>, after: u64) -> Result<PyViews, OpenError> {
    let Some(py) = py else {
        return Ok(PyViews::default());
    };
    let mut v = PyViews {
        header: true,
        ..PyViews::default()
    };
    if py.site_capacity == 0 && py.code_capacity == 0 {
        return Ok(v);
    }
    let bad = || OpenError::Corrupt("python tables");
    if py.site_capacity != id.site_capacity
        || py.site_entry_size as usize != size_of::<PySiteEntry>()
        || py.code_entry_size as usize != size_of::<PyCodeEntry>()
        || !py.code_capacity.is_power_of_two()
        || py.code_capacity > 1 << 20
        || !py.sites_offset.is_multiple_of(64)
        || !py.codes_offset.is_multiple_of(64)
        || py.sites_offset < after
    {
        return Err(bad());
    }
    let sites_end = py
        .sites_offset
        .checked_add(py.site_capacity as u64 * size_of::<PySiteEntry>() as u64)
        .ok_or_else(bad)?;
    let codes_end = py
        .codes_offset
        .checked_add(py.code_capacity as u64 * size_of::<PyCodeEntry>() as u64)
        .ok_or_else(bad)?;
    if py.codes_offset < sites_end || codes_end > id.total_size {
        return Err(bad());
    }
    v.sites_offset = py.sites_offset as usize;
    v.site_capacity = py.site_capacity as usize;
    v.codes_offset = py.codes_offset as usize;
    v.code_capacity = py.code_capacity as usize;
    Ok(v)
}
