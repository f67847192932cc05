//! Python call sites (ABI 1.1): for a recorded event whose thread was running Python code, the
//! user's Python frames, innermost first, as (file, function, line).
//!
//! When the writing process has a supported CPython at segment creation, two tables follow the
//! module map:
//! - the Python site table, one `PySiteEntry` per entry of the native site table, at the same
//!   index: the Python frames of that call site as (code id, line) pairs;
//! - the code table, one `PyCodeEntry` per code object (function): its file name and qualified
//!   name, interned like call sites (open addressing, the entry claimed by a CAS of its key,
//!   published by a Release store of `state`). Ids are `index + 1`.
//!
//! A call site with Python frames is interned in the native site table under the native stack's
//! hash salted with the Python stack's, so two Python lines over one native stack (two `.item()`
//! calls in one loop) are two sites whose native frames are equal. Readers older than ABI 1.1
//! see them as native sites with equal stacks; newer ones call
//! [`SegmentReader::python_frames`] for each site and [`SegmentReader::python_status`] once.
//!
//! Without the tables (no Python in the process, an unsupported version, or a 1.0 segment) every
//! site has no Python frames; `python_status` says which case it is.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::layout::{Header, Ident};
use crate::segment::{OpenError, SegmentReader, SegmentWriter};
use crate::sites::{self, MAX_FRAMES};

/// Python frames kept per call site; deeper Python stacks keep their innermost frames.
pub const MAX_PY_FRAMES: usize = 32;
/// Bytes of a file name kept (its end, where the name is, when longer).
pub const FILE_MAX: usize = 360;
/// Bytes of a qualified function name kept (its start when longer).
pub const NAME_MAX: usize = 128;

/// `PyLive::status`: no CPython was found in the process when its segment was created (or the
/// segment predates ABI 1.1).
pub const PY_ABSENT: u32 = 0;
/// A supported CPython: Python frames are recorded.
pub const PY_SUPPORTED: u32 = 1;
/// A CPython whose frame layout this build does not know: native frames only.
pub const PY_UNSUPPORTED: u32 = 2;

/// Entry states of both tables.
pub const STATE_WRITING: u32 = 1;
pub const STATE_READY: u32 = 2;

/// `PySiteEntry::flags`: the walk stopped before the outermost frame (a stack deeper than
/// the walk goes, `MAX_PY_WALK` frames): the outermost frames are missing.
pub const FLAG_TRUNCATED: u32 = 1;
/// `PySiteEntry::flags` (ABI 1.5): the stack was deeper than `MAX_PY_FRAMES`; the entry keeps
/// its innermost `MAX_PY_FRAMES / 2` frames, one `SKIPPED_CODE` frame whose line is the number
/// of frames left out, and its outermost frames (where the user's code is).
pub const FLAG_ELIDED: u32 = 2;
/// `PySiteEntry::flags` (ABI 1.6): the entry's frames are not the call site's own (its thread
/// had none) but those of another Python thread that was waiting for the call, blocked outside
/// the GIL, when it stalled ("waited for by"); `nframes` is 0 and `waiter_frames` counts them.
/// `FLAG_TRUNCATED` and `FLAG_ELIDED` then describe that stack.
pub const FLAG_WAITED_BY: u32 = 4;
/// `PySiteEntry::flags` (ABI 1.6), with `FLAG_WAITED_BY`: the waiting thread was the
/// interpreter's main thread.
pub const FLAG_WAITER_MAIN: u32 = 8;
/// The code id of the frame that stands for the frames left out of a deep stack (its line:
/// how many). Never a code table id (those are at most 2^20).
pub const SKIPPED_CODE: u32 = u32::MAX;

/// The Python part of the header, written once by the creator before the segment is published.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyIdent {
    pub sites_offset: u64,
    pub codes_offset: u64,
    /// Entries of the Python site table: `Ident::site_capacity`, or 0 without Python tables.
    pub site_capacity: u32,
    pub site_entry_size: u32,
    /// Entries of the code table, a power of two (0 without Python tables).
    pub code_capacity: u32,
    pub code_entry_size: u32,
    /// `MAX_PY_FRAMES` of the writer.
    pub max_frames: u32,
    pub _reserved: u32,
}

/// Python counters updated while the process runs. The writer stores `status` and `version`
/// once, right after creating the segment (Release); everything else is `fetch_add` (Relaxed).
#[repr(C)]
pub struct PyLive {
    /// `PY_ABSENT`, `PY_SUPPORTED` or `PY_UNSUPPORTED`.
    pub status: AtomicU32,
    /// `PY_VERSION_HEX` of the interpreter (`0x030b07f0` is 3.11.7 final); 0 when absent.
    pub version: AtomicU32,
    /// Recorded events whose thread had Python frames.
    pub stacks: AtomicU64,
    /// Of those, stacks cut at `MAX_PY_FRAMES` (the outermost frames dropped).
    pub truncated: AtomicU64,
    /// Walks stopped at a frame that failed validation (the frames inside it are kept).
    pub rejected: AtomicU64,
    /// Events recorded while the interpreter was finalizing: no Python frames were read.
    pub finalizing: AtomicU64,
    /// Code objects that found no free entry in the code table; their frames read as unknown.
    pub codes_dropped: AtomicU32,
    /// Code entries claimed.
    pub codes_used: AtomicU32,
}

/// Appended to `Header` at ABI 1.1.
#[repr(C)]
pub struct PyHeader {
    pub ident: PyIdent,
    pub live: PyLive,
}

/// The Python frames of one call site.
#[repr(C)]
pub struct PySiteEntry {
    /// 0 free, `STATE_WRITING` while the writer fills it, `STATE_READY` once complete.
    pub state: AtomicU32,
    /// Frames in use, `0..=MAX_PY_FRAMES`.
    pub nframes: AtomicU32,
    /// `FLAG_*` bits.
    pub flags: AtomicU32,
    /// ABI 1.6, with `FLAG_WAITED_BY`: how many of `frames` are the waiting thread's
    /// (`0..=MAX_PY_FRAMES`); 0 otherwise and in older segments (reserved, always 0, before).
    pub waiter_frames: AtomicU32,
    /// `code id << 32 | line`, innermost first. Code id 0: the code table was full; line 0:
    /// the line table had no line for the instruction.
    pub frames: [AtomicU64; MAX_PY_FRAMES],
}

const _: () = assert!(std::mem::size_of::<PySiteEntry>() == 272);

/// One code object's names.
#[repr(C)]
pub struct PyCodeEntry {
    /// Identity of the code object (see the writer), forced non-zero; 0 while free.
    pub key: AtomicU64,
    /// 0 free or being written, `STATE_READY` once the names are complete.
    pub state: AtomicU32,
    pub file_len: u16,
    pub name_len: u16,
    /// `co_firstlineno`: the line of the `def`.
    pub first_line: u32,
    pub _reserved: u32,
    /// UTF-8 (`file_len` bytes).
    pub file: [u8; FILE_MAX],
    /// UTF-8 qualified name (`co_qualname`; `co_name` before 3.11).
    pub name: [u8; NAME_MAX],
}

const _: () = assert!(std::mem::size_of::<PyCodeEntry>() == 512);

/// Entries probed before the code table gives up on a code object.
const MAX_PROBES: usize = 64;

fn align64(v: u64) -> u64 {
    v.div_ceil(64) * 64
}

/// Where the Python tables go in a new segment that ends at `end`: `(ident, new end)`.
/// `code_capacity == 0` gives no tables.
pub(crate) fn plan(site_capacity: u32, code_capacity: u32, end: u64) -> (PyIdent, u64) {
    if code_capacity == 0 {
        return (PyIdent::default(), end);
    }
    let code_capacity = code_capacity.clamp(16, 1 << 20).next_power_of_two();
    let sites_offset = align64(end);
    let codes_offset =
        align64(sites_offset + site_capacity as u64 * size_of::<PySiteEntry>() as u64);
    let end = codes_offset + code_capacity as u64 * size_of::<PyCodeEntry>() as u64;
    let ident = PyIdent {
        sites_offset,
        codes_offset,
        site_capacity,
        site_entry_size: size_of::<PySiteEntry>() as u32,
        code_capacity,
        code_entry_size: size_of::<PyCodeEntry>() as u32,
        max_frames: MAX_PY_FRAMES as u32,
        _reserved: 0,
    };
    (ident, end)
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

/// Hash of a call site with Python frames: the native stack's hash salted with the Python
/// stack's, never 0.
pub fn salted_hash(native: &[u64], py_hash: u64) -> u64 {
    let h = sites::stack_hash(native) ^ py_hash.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h ^ h >> 31).wrapping_mul(0xbf58_476d_1ce4_e5b9) | 1
}

/// A code object's names as the writer decodes them, before they are interned.
pub struct CodeText {
    pub file: [u8; FILE_MAX],
    pub file_len: usize,
    pub name: [u8; NAME_MAX],
    pub name_len: usize,
    pub first_line: u32,
}

impl CodeText {
    pub const fn new() -> CodeText {
        CodeText {
            file: [0; FILE_MAX],
            file_len: 0,
            name: [0; NAME_MAX],
            name_len: 0,
            first_line: 0,
        }
    }

    /// Sets the file name (UTF-8); a longer one keeps its end, cut at a character boundary.
    pub fn set_file(&mut self, s: &[u8]) {
        let mut from = s.len().saturating_sub(FILE_MAX);
        while from < s.len() && (s[from] & 0xc0) == 0x80 {
            from += 1;
        }
        let t = &s[from..];
        self.file[..t.len()].copy_from_slice(t);
        self.file_len = t.len();
    }

    /// Sets the function name (UTF-8); a longer one keeps its start, cut at a character
    /// boundary.
    pub fn set_name(&mut self, s: &[u8]) {
        let mut to = s.len().min(NAME_MAX);
        while to > 0 && to < s.len() && (s[to] & 0xc0) == 0x80 {
            to -= 1;
        }
        self.name[..to].copy_from_slice(&s[..to]);
        self.name_len = to;
    }
}

impl Default for CodeText {
    fn default() -> Self {
        CodeText::new()
    }
}

/// One Python frame of a call site, as the writer stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PyFrameRef {
    /// Code table id (0: unknown).
    pub code: u32,
    /// Source line (0: unknown).
    pub line: u32,
}

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

/// Copies `t` into a claimed code entry and publishes it.
///
/// # Safety
/// `e` points to an entry of the writable mapping that the caller claimed.
unsafe fn write_code(e: *mut PyCodeEntry, t: &CodeText) {
    let file = &t.file[..t.file_len.min(FILE_MAX)];
    let name = &t.name[..t.name_len.min(NAME_MAX)];
    // SAFETY: the caller owns the entry (see above); the writes stay inside it.
    unsafe {
        std::ptr::copy_nonoverlapping(
            file.as_ptr(),
            std::ptr::addr_of_mut!((*e).file).cast::<u8>(),
            file.len(),
        );
        std::ptr::copy_nonoverlapping(
            name.as_ptr(),
            std::ptr::addr_of_mut!((*e).name).cast::<u8>(),
            name.len(),
        );
        std::ptr::addr_of_mut!((*e).file_len).write(file.len() as u16);
        std::ptr::addr_of_mut!((*e).name_len).write(name.len() as u16);
        std::ptr::addr_of_mut!((*e).first_line).write(t.first_line);
        (*e).state.store(STATE_READY, Ordering::Release);
    }
}

/// One Python frame of a call site, decoded for a reader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyFrameInfo {
    /// `co_filename` as the interpreter knows it (usually absolute; `<stdin>`, `<string>` for
    /// code without a file). Empty when the writer's code table was full.
    pub file: String,
    /// Qualified name (`Trainer.step`, `main.<locals>.inner`, `<module>`); plain `co_name` on
    /// Python 3.10. Empty when the writer's code table was full.
    pub function: String,
    /// 1-based source line of the instruction running in this frame; 0 when unknown.
    pub line: u32,
    /// Not a frame but the mark of a deep stack's middle (ABI 1.5, `SKIPPED_CODE`): the number
    /// of frames left out here (file, function and line empty). 0 for a frame.
    pub skipped: u32,
}

/// The Python frames of one call site.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PyStack {
    /// Innermost (the frame that made the CUDA call) first.
    pub frames: Vec<PyFrameInfo>,
    /// The walk stopped before the outermost frame; the outermost frames are missing.
    pub truncated: bool,
}

/// The Python thread that waited for a call made on a thread with no Python frames (ABI 1.6):
/// its frames at the moment the call stalled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PyWaiter {
    /// The waiting thread's frames, innermost first (the line that waits, or calls the
    /// library that waits).
    pub stack: PyStack,
    /// The waiting thread was the interpreter's main thread.
    pub main: bool,
}

/// What the writing process's interpreter is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PythonState {
    /// No CPython in the process when its segment was created, or a writer older than ABI 1.1.
    Absent,
    /// Python frames are recorded.
    Supported,
    /// A CPython whose layout this build does not know: sites have native frames only.
    Unsupported,
    /// A status value this reader does not know.
    Unknown(u32),
}

/// A CPython version, from `PY_VERSION_HEX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PyVersion {
    pub major: u8,
    pub minor: u8,
    pub micro: u8,
}

impl PyVersion {
    pub fn from_hex(hex: u32) -> Option<PyVersion> {
        (hex != 0).then_some(PyVersion {
            major: (hex >> 24) as u8,
            minor: (hex >> 16) as u8,
            micro: (hex >> 8) as u8,
        })
    }
}

impl std::fmt::Display for PyVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.micro)
    }
}

/// The Python side of a segment, for a reader's summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PythonStatus {
    pub state: PythonState,
    pub version: Option<PyVersion>,
    /// Recorded events whose thread had Python frames ("Python seen" when non-zero).
    pub stacks: u64,
    /// Of those, stacks cut at `MAX_PY_FRAMES`.
    pub truncated: u64,
    /// Walks stopped at a frame that failed validation.
    pub rejected: u64,
    /// Events recorded while the interpreter was finalizing, taken without Python frames.
    pub finalizing: u64,
    /// Code objects the writer's code table had no room for (their frames have empty names).
    pub codes_dropped: u64,
}

impl Default for PythonStatus {
    fn default() -> Self {
        PythonStatus {
            state: PythonState::Absent,
            version: None,
            stacks: 0,
            truncated: 0,
            rejected: 0,
            finalizing: 0,
            codes_dropped: 0,
        }
    }
}

impl std::fmt::Display for PythonStatus {
    /// One line for a report: "Python 3.11.7: frames recorded", "Python 3.14.0: Python frames
    /// not supported for this version", "no Python".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self
            .version
            .map(|v| format!("Python {v}"))
            .unwrap_or_else(|| "Python".to_string());
        match self.state {
            PythonState::Absent => f.write_str("no Python"),
            PythonState::Supported => write!(f, "{v}: frames recorded"),
            PythonState::Unsupported => {
                write!(f, "{v}: Python frames not supported for this version")
            }
            PythonState::Unknown(s) => write!(f, "{v}: unknown status {s}"),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::SegmentParams;

    fn tmpdir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("syncspy-abi-py-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn params(python: bool) -> SegmentParams {
        SegmentParams {
            ring_capacity: 16,
            site_capacity: 64,
            python_code_capacity: if python { 32 } else { 0 },
            ..SegmentParams::new(4545, 9)
        }
    }

    #[test]
    fn two_python_stacks_over_one_native_stack_are_two_sites_with_their_frames() {
        let dir = tmpdir("sites");
        let w = SegmentWriter::create(&dir, &params(true)).unwrap();
        assert!(w.has_python_tables());
        w.set_python(PY_SUPPORTED, 0x030b07f0);
        let native = w.intern_site(&[0x1000, 0x2000]).unwrap();
        let a = w.intern_python_site(native, 11).unwrap();
        let b = w.intern_python_site(native, 22).unwrap();
        assert!(a != b && a != native && b != native);
        assert_eq!(w.intern_python_site(native, 11), Some(a));
        let code = w
            .intern_code(0x77, |t| {
                t.set_file(b"/src/train.py");
                t.set_name(b"Trainer.step");
                t.first_line = 40;
            })
            .unwrap();
        // A second intern of the same key does not decode again.
        assert_eq!(w.intern_code(0x77, |_| panic!("decoded twice")), Some(code));
        assert!(w.claim_python_site(a));
        assert!(!w.claim_python_site(a), "an entry is claimed once");
        w.publish_python_site(
            a,
            &[
                PyFrameRef { code, line: 142 },
                PyFrameRef { code: 0, line: 0 },
            ],
            false,
            false,
        );

        let r = SegmentReader::open(w.path()).unwrap();
        assert_eq!(r.site(a), Some(vec![0x1000, 0x2000]));
        assert_eq!(r.site(b), Some(vec![0x1000, 0x2000]));
        let s = r.python_stack(a).unwrap();
        assert!(!s.truncated);
        assert_eq!(
            s.frames,
            vec![
                PyFrameInfo {
                    file: "/src/train.py".into(),
                    function: "Trainer.step".into(),
                    line: 142,
                    skipped: 0,
                },
                PyFrameInfo {
                    file: String::new(),
                    function: String::new(),
                    line: 0,
                    skipped: 0,
                },
            ]
        );
        // Claimed by nobody: not published.
        assert_eq!(r.python_stack(b), None);
        assert!(r.python_frames(native).is_empty());
        assert!(r.python_frames(0).is_empty());
        assert!(r.python_frames(1 << 20).is_empty());
        let st = r.python_status();
        assert_eq!(st.state, PythonState::Supported);
        assert_eq!(st.to_string(), "Python 3.11.7: frames recorded");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_waiter_stack_is_separate_from_the_sites_own_frames() {
        let dir = tmpdir("waiter");
        let w = SegmentWriter::create(&dir, &params(true)).unwrap();
        let native = w.intern_site(&[0x1000, 0x2000]).unwrap();
        let own = w.intern_python_site(native, 11).unwrap();
        let waited = w.intern_python_site(native, 33).unwrap();
        let code = w
            .intern_code(0x99, |t| {
                t.set_file(b"/src/jax_sync.py");
                t.set_name(b"main");
            })
            .unwrap();
        assert!(w.claim_python_site(own) && w.claim_python_site(waited));
        w.publish_python_site(own, &[PyFrameRef { code, line: 7 }], false, false);
        w.publish_waiter_site(waited, &[PyFrameRef { code, line: 21 }], false, false, true);
        let r = SegmentReader::open(w.path()).unwrap();
        // The waited-for site has no frames of its own (what a reader before 1.6 sees) ...
        assert_eq!(r.python_stack(waited), None);
        // ... and its waiter's, apart.
        let got = r.waited_by(waited).unwrap();
        assert!(got.main && !got.stack.truncated);
        assert_eq!(
            got.stack.frames,
            vec![PyFrameInfo {
                file: "/src/jax_sync.py".into(),
                function: "main".into(),
                line: 21,
                skipped: 0,
            }]
        );
        // A site with its own frames has no waiter, and the reverse.
        assert_eq!(r.waited_by(own), None);
        assert_eq!(r.python_frames(own)[0].line, 7);
        assert_eq!(r.waited_by(native), None);
        assert_eq!(r.waited_by(0), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn without_python_tables_sites_stay_native_and_status_says_why() {
        let dir = tmpdir("none");
        let w = SegmentWriter::create(&dir, &params(false)).unwrap();
        assert!(!w.has_python_tables());
        w.set_python(PY_UNSUPPORTED, 0x030e00f0);
        let native = w.intern_site(&[0x1000]).unwrap();
        assert_eq!(w.intern_python_site(native, 5), None);
        assert_eq!(w.intern_code(5, |_| {}), None);
        assert!(!w.claim_python_site(native));
        let r = SegmentReader::open(w.path()).unwrap();
        assert_eq!(r.python_stack(native), None);
        let st = r.python_status();
        assert_eq!(st.state, PythonState::Unsupported);
        assert_eq!(
            st.to_string(),
            "Python 3.14.0: Python frames not supported for this version"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_segment_of_abi_1_0_opens_with_no_python() {
        let dir = tmpdir("old");
        let w = SegmentWriter::create(&dir, &params(true)).unwrap();
        w.set_python(PY_SUPPORTED, 0x030b07f0);
        let mut bytes = std::fs::read(w.path()).unwrap();
        // What a 1.0 writer publishes: its shorter header and minor 0.
        let old = std::mem::offset_of!(Header, python) as u32;
        let at = std::mem::offset_of!(Ident, header_size);
        bytes[at..at + 4].copy_from_slice(&old.to_ne_bytes());
        let at = std::mem::offset_of!(Ident, abi_minor);
        bytes[at..at + 2].copy_from_slice(&0u16.to_ne_bytes());
        let f = dir.join("syncspy-1-1");
        std::fs::write(&f, &bytes).unwrap();
        let r = SegmentReader::open(&f).unwrap();
        assert_eq!(r.python_status(), PythonStatus::default());
        assert_eq!(r.python_stack(1), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn python_tables_out_of_bounds_are_corrupt() {
        let dir = tmpdir("corrupt");
        let w = SegmentWriter::create(&dir, &params(true)).unwrap();
        let good = std::fs::read(w.path()).unwrap();
        let base = std::mem::offset_of!(Header, python) + std::mem::offset_of!(PyHeader, ident);
        let f = dir.join("bad");
        for (field, value) in [
            (std::mem::offset_of!(PyIdent, codes_offset), u64::MAX - 7),
            (std::mem::offset_of!(PyIdent, sites_offset), 64),
        ] {
            let mut v = good.clone();
            v[base + field..base + field + 8].copy_from_slice(&value.to_ne_bytes());
            std::fs::write(&f, &v).unwrap();
            assert!(matches!(
                SegmentReader::open(&f),
                Err(OpenError::Corrupt("python tables"))
            ));
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn long_names_keep_the_informative_end_at_character_boundaries() {
        let mut t = CodeText::new();
        let long: Vec<u8> = "é".repeat(FILE_MAX).into_bytes();
        t.set_file(&long);
        assert!(t.file_len <= FILE_MAX && t.file_len > FILE_MAX - 2);
        assert!(std::str::from_utf8(&t.file[..t.file_len]).is_ok());
        let mut path = vec![b'x'; 1000];
        path.extend_from_slice(b"/train.py");
        t.set_file(&path);
        assert!(t.file[..t.file_len].ends_with(b"/train.py"));
        t.set_name(&long);
        assert!(t.name_len <= NAME_MAX && t.name_len > NAME_MAX - 2);
        assert!(std::str::from_utf8(&t.name[..t.name_len]).is_ok());
        assert_eq!(
            PyVersion::from_hex(0x030d00f0).unwrap().to_string(),
            "3.13.0"
        );
    }
}
