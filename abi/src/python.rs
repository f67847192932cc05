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
//!
//! [`SegmentReader::python_frames`]: crate::SegmentReader::python_frames
//! [`SegmentReader::python_status`]: crate::SegmentReader::python_status

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::sites;

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
pub(crate) const MAX_PROBES: usize = 64;

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

/// Copies `t` into a claimed code entry and publishes it.
///
/// # Safety
/// `e` points to an entry of the writable mapping that the caller claimed.
pub(crate) unsafe fn write_code(e: *mut PyCodeEntry, t: &CodeText) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Header, Ident};
    use crate::segment::{OpenError, SegmentParams, SegmentReader, SegmentWriter};

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
