//! Which CPython this process runs, and where the fields the frame walk reads live in it.
//!
//! Resolved once, when the segment is created, with `dlsym(RTLD_DEFAULT)`: the interpreter is
//! either the main executable (built with `--export-dynamic`, as Debian's is) or a
//! `libpython3.x.so` it links, both in the global scope. The version comes from `Py_Version`
//! (3.11+) or the string of `Py_GetVersion()` (3.10). Offsets of 3.10–3.12 are constants of
//! those releases (checked with `offsetof` against each release's headers); 3.13 publishes
//! its own offsets in `_Py_DebugOffsets` at the start of `_PyRuntime`, which are read and
//! used instead of the constants.

use std::ffi::{c_char, c_void, CStr};

/// `PY_VERSION_HEX` of major.minor.micro (a final release).
pub const fn version_hex(major: u32, minor: u32, micro: u32) -> u32 {
    major << 24 | minor << 16 | micro << 8 | 0xf0
}

/// Offsets (bytes) of everything the walk and the decoder read, for one CPython minor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub minor: u8,
    /// `PyThreadState` → 3.10 `frame`, 3.11/3.12 `cframe`, 3.13 `current_frame`.
    pub tstate_frame: usize,
    /// 3.11/3.12: `_PyCFrame::current_frame`.
    pub cframe_current: Option<usize>,
    /// 3.10 `PyFrameObject::f_back`; 3.11+ `_PyInterpreterFrame::previous`.
    pub frame_previous: usize,
    /// `f_code`; 3.13 `f_executable`.
    pub frame_code: usize,
    /// 3.10 `f_lasti` (an `int` in code units); 3.11+ `prev_instr` / `instr_ptr` (a pointer).
    pub frame_instr: usize,
    /// 3.11+ `owner` (a `char`).
    pub frame_owner: Option<usize>,
    /// `PyObject::ob_type`.
    pub ob_type: usize,
    /// `PyVarObject::ob_size`: code units of a code object (3.11+), bytes of a `bytes`.
    pub ob_size: usize,
    pub code_firstlineno: usize,
    pub code_filename: usize,
    /// `co_qualname` (3.11+), `co_name` (3.10).
    pub code_name: usize,
    pub code_linetable: usize,
    /// 3.11+: `co_code_adaptive`, the instructions the instruction pointer points into.
    pub code_adaptive: Option<usize>,
    /// `PyBytesObject::ob_sval`.
    pub bytes_data: usize,
    pub unicode_length: usize,
    pub unicode_state: usize,
    /// `sizeof(PyASCIIObject)`: where a compact ASCII string's characters start.
    pub unicode_ascii_size: usize,
    /// `sizeof(PyCompactUnicodeObject)`: where other compact strings' characters start.
    pub unicode_compact_size: usize,
    /// `_PyRuntimeState::_finalizing`: non-NULL once the interpreter is shutting down.
    pub runtime_finalizing: usize,
    /// Where the other threads' states are (read only at a stall on a thread with no Python
    /// frames, `python::waiter`).
    pub threads: Threads,
}

/// Offsets (bytes) that lead from `_PyRuntime` to every thread state of the main
/// interpreter, and tell which one holds the GIL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Threads {
    /// `_PyRuntimeState::interpreters.main`.
    pub runtime_interp_main: usize,
    /// `_PyRuntimeState::main_thread`: the `pthread_t` of the main thread.
    pub runtime_main_thread: usize,
    /// `PyInterpreterState::threads.head` (3.10: `tstate_head`).
    pub interp_threads_head: usize,
    /// `PyThreadState::next`.
    pub tstate_next: usize,
    /// `PyThreadState::thread_id` (a `pthread_t`).
    pub tstate_thread_id: usize,
    pub gil: GilAt,
}

/// Where the GIL's `locked` flag and `last_holder` (the thread state that took it last) are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GilAt {
    /// 3.10/3.11: one GIL, in `_PyRuntime.ceval.gil`: offsets from `_PyRuntime`.
    Runtime { locked: usize, holder: usize },
    /// 3.12+: `PyInterpreterState::ceval.gil` points to it: that pointer's offset in the
    /// interpreter state, then offsets inside `_gil_runtime_state`.
    Interp {
        ptr: usize,
        locked: usize,
        holder: usize,
    },
}

/// `_frameowner::FRAME_OWNED_BY_CSTACK` (3.12+): a shim frame the C stack pushed, with no
/// user code.
pub const OWNED_BY_CSTACK: u8 = 3;

/// What every built-in layout shares (the object header, `str` and `bytes` offsets); the
/// version's own fields are zero here.
const fn base(minor: u8) -> Layout {
    Layout {
        minor,
        tstate_frame: 0,
        cframe_current: None,
        frame_previous: 0,
        frame_code: 0,
        frame_instr: 0,
        frame_owner: None,
        ob_type: 8,
        ob_size: 16,
        code_firstlineno: 0,
        code_filename: 0,
        code_name: 0,
        code_linetable: 0,
        code_adaptive: None,
        bytes_data: 32,
        unicode_length: 16,
        unicode_state: 32,
        unicode_ascii_size: 40,
        unicode_compact_size: 56,
        runtime_finalizing: 24,
        threads: Threads {
            runtime_interp_main: 0,
            runtime_main_thread: 0,
            interp_threads_head: 0,
            tstate_next: 8,
            tstate_thread_id: 0,
            gil: GilAt::Runtime {
                locked: 0,
                holder: 0,
            },
        },
    }
}

/// The thread offsets of a built-in layout, checked with `offsetof` against each release's
/// internal headers (Py_BUILD_CORE): 3.10.13, 3.11.7, 3.12.1, 3.13.0.
const fn threads(
    interp_main: usize,
    main_thread: usize,
    head: usize,
    thread_id: usize,
    gil: GilAt,
) -> Threads {
    Threads {
        runtime_interp_main: interp_main,
        runtime_main_thread: main_thread,
        interp_threads_head: head,
        tstate_next: 8,
        tstate_thread_id: thread_id,
        gil,
    }
}

/// The GIL of a 3.12+ interpreter, behind its pointer at `ptr` in the interpreter state.
const fn gil_ptr(ptr: usize) -> GilAt {
    GilAt::Interp {
        ptr,
        locked: 16,
        holder: 8,
    }
}

impl Layout {
    /// The built-in layout of CPython 3.`minor` (x86_64 and other LP64 targets, default
    /// build: not free-threaded, not debug).
    pub const fn known(minor: u8) -> Option<Layout> {
        let base = base(minor);
        Some(match minor {
            10 => Layout {
                tstate_frame: 24,
                frame_previous: 24,
                frame_code: 32,
                frame_instr: 96,
                code_firstlineno: 40,
                code_filename: 104,
                code_name: 112,
                code_linetable: 120,
                unicode_ascii_size: 48,
                unicode_compact_size: 72,
                runtime_finalizing: 16,
                threads: threads(
                    40,
                    72,
                    8,
                    176,
                    GilAt::Runtime {
                        locked: 368,
                        holder: 360,
                    },
                ),
                ..base
            },
            11 => Layout {
                tstate_frame: 56,
                cframe_current: Some(8),
                frame_previous: 48,
                frame_code: 32,
                frame_instr: 56,
                frame_owner: Some(69),
                code_firstlineno: 72,
                code_filename: 112,
                code_name: 128,
                code_linetable: 136,
                code_adaptive: Some(184),
                unicode_ascii_size: 48,
                unicode_compact_size: 72,
                threads: threads(
                    48,
                    80,
                    16,
                    152,
                    GilAt::Runtime {
                        locked: 376,
                        holder: 368,
                    },
                ),
                ..base
            },
            12 => Layout {
                tstate_frame: 56,
                cframe_current: Some(0),
                frame_previous: 8,
                frame_code: 0,
                frame_instr: 56,
                frame_owner: Some(70),
                code_firstlineno: 68,
                code_filename: 112,
                code_name: 128,
                code_linetable: 136,
                code_adaptive: Some(192),
                threads: threads(48, 64, 72, 136, gil_ptr(384)),
                ..base
            },
            13 => Layout {
                tstate_frame: 72,
                frame_previous: 8,
                frame_code: 0,
                frame_instr: 56,
                frame_owner: Some(70),
                code_firstlineno: 68,
                code_filename: 112,
                code_name: 128,
                code_linetable: 136,
                code_adaptive: Some(200),
                runtime_finalizing: 608,
                threads: threads(640, 656, 7344, 152, gil_ptr(16)),
                ..base
            },
            _ => return None,
        })
    }

    /// 3.13's layout with the offsets its runtime publishes: `debug` is the start of
    /// `_PyRuntime`, a `_Py_DebugOffsets` (cookie `xdebugpy`, the version, `free_threaded`,
    /// then sections of `u64` offsets, each led by the struct's size). `None` when the cookie
    /// or version does not match, the build is free-threaded (another object header), or an
    /// offset is out of range.
    ///
    /// # Safety
    /// `debug` points to at least 584 readable bytes (`sizeof(_Py_DebugOffsets)` in 3.13).
    pub unsafe fn from_debug_offsets_313(debug: *const u8) -> Option<Layout> {
        // SAFETY: in bounds of the 584 bytes the caller vouches for.
        let at = |off: usize| unsafe { std::ptr::read_unaligned(debug.add(off) as *const u64) };
        // SAFETY: as above.
        let cookie = unsafe { std::ptr::read_unaligned(debug as *const [u8; 8]) };
        if &cookie != b"xdebugpy" || at(8) >> 16 != 0x030d || at(16) != 0 {
            return None;
        }
        let small = |v: u64| (v < 4096).then_some(v as usize);
        let mut l = Layout::known(13)?;
        l.runtime_finalizing = small(at(32))?;
        l.tstate_frame = small(at(184))?;
        l.frame_previous = small(at(232))?;
        l.frame_code = small(at(240))?;
        l.frame_instr = small(at(248))?;
        l.frame_owner = Some(small(at(264))?);
        l.code_filename = small(at(280))?;
        l.code_name = small(at(296))?;
        l.code_linetable = small(at(304))?;
        l.code_firstlineno = small(at(312))?;
        l.code_adaptive = Some(small(at(344))?);
        l.ob_type = small(at(360))?;
        l.ob_size = small(at(416))?;
        l.bytes_data = small(at(528))?;
        l.unicode_state = small(at(544))?;
        l.unicode_length = small(at(552))?;
        l.unicode_ascii_size = small(at(560))?;
        // `PyCompactUnicodeObject` adds `utf8_length` and `utf8` to `PyASCIIObject`.
        l.unicode_compact_size = l.unicode_ascii_size + 16;
        // The threads: `interpreters.main` follows `interpreters.head`; the GIL's fields are
        // published as offsets in the interpreter of its embedded `_gil`, whose own offset is
        // `gil_runtime_state`: their difference is the offset inside the GIL's struct.
        // `main_thread` is not published: the constant of the 3.13 headers.
        let large = |v: u64| (v < 1 << 20).then_some(v as usize);
        let gil_base = large(at(120))?;
        let inside = |v: u64| large(v)?.checked_sub(gil_base).filter(|d| *d < 256);
        l.threads = Threads {
            runtime_interp_main: small(at(40))? + 8,
            runtime_main_thread: l.threads.runtime_main_thread,
            interp_threads_head: large(at(72))?,
            tstate_next: small(at(168))?,
            tstate_thread_id: small(at(192))?,
            gil: GilAt::Interp {
                ptr: small(at(112))?,
                locked: inside(at(136))?,
                holder: inside(at(144))?,
            },
        };
        Some(l)
    }
}

/// The interpreter's symbols the walk needs.
#[derive(Clone, Copy, Debug)]
pub struct Python {
    pub version: u32,
    pub layout: Layout,
    /// `PyGILState_GetThisThreadState`: the thread state bound to the calling OS thread,
    /// read from the interpreter's thread-specific-storage key; no GIL, no lock.
    pub this_thread_state: unsafe extern "C" fn() -> *mut c_void,
    pub code_type: usize,
    /// 3.10: `PyFrame_Type` (frames are objects there).
    pub frame_type: usize,
    pub unicode_type: usize,
    pub bytes_type: usize,
    /// `&_PyRuntime`.
    pub runtime: usize,
}

/// What the process has. Made once per process and kept in a static: its size does not matter.
#[derive(Clone, Copy, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Detected {
    Absent,
    /// A CPython whose version (`PY_VERSION_HEX`, 0 if unreadable) this build cannot walk.
    Unsupported(u32),
    Supported(Python),
}

fn sym(name: &CStr) -> usize {
    // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT searches the global scope.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
}

/// `"3.10.13 (main, ...)"` → `PY_VERSION_HEX`.
pub fn parse_version(s: &[u8]) -> Option<u32> {
    let end = s.iter().position(|b| *b == b' ').unwrap_or(s.len());
    let mut it = std::str::from_utf8(&s[..end]).ok()?.split('.');
    let major: u32 = it.next()?.parse().ok()?;
    let minor: u32 = it.next()?.parse().ok()?;
    // The micro part may carry a suffix ("0rc1", "7+").
    let micro = it.next().map_or(0, |m| {
        m.bytes().take_while(u8::is_ascii_digit).fold(0u32, |a, d| {
            a.saturating_mul(10).saturating_add(u32::from(d - b'0'))
        })
    });
    (major < 256 && minor < 256).then(|| version_hex(major, minor, micro.min(255)))
}

/// Looks for a CPython in the global scope.
pub fn detect() -> Detected {
    let gil = sym(c"PyGILState_GetThisThreadState");
    if gil == 0 {
        return Detected::Absent;
    }
    let version = match sym(c"Py_Version") {
        // SAFETY: `Py_Version` is a `const unsigned long` (3.11+).
        p if p != 0 => (unsafe { std::ptr::read(p as *const u64) }) as u32,
        _ => match sym(c"Py_GetVersion") {
            0 => 0,
            f => {
                // SAFETY: `const char *Py_GetVersion(void)` formats a static buffer; it
                // needs neither the GIL nor an initialised interpreter.
                let s = unsafe {
                    let f: unsafe extern "C" fn() -> *const c_char = std::mem::transmute(f);
                    f()
                };
                if s.is_null() {
                    0
                } else {
                    // SAFETY: a NUL-terminated string from the interpreter.
                    parse_version(unsafe { CStr::from_ptr(s) }.to_bytes()).unwrap_or(0)
                }
            }
        },
    };
    let (major, minor) = (version >> 24, (version >> 16) & 0xff);
    let runtime = sym(c"_PyRuntime");
    let layout = match (major, minor) {
        // SAFETY: `_PyRuntime` of 3.13 starts with its `_Py_DebugOffsets`.
        (3, 13) if runtime != 0 => unsafe { Layout::from_debug_offsets_313(runtime as *const u8) },
        (3, 10..=12) => Layout::known(minor as u8),
        _ => None,
    };
    let types = (
        sym(c"PyCode_Type"),
        sym(c"PyFrame_Type"),
        sym(c"PyUnicode_Type"),
        sym(c"PyBytes_Type"),
    );
    match (layout, types) {
        (Some(layout), (code, frame, unicode, bytes))
            if runtime != 0 && code != 0 && frame != 0 && unicode != 0 && bytes != 0 =>
        {
            Detected::Supported(Python {
                version,
                layout,
                // SAFETY: the symbol is `PyThreadState *PyGILState_GetThisThreadState(void)`.
                this_thread_state: unsafe {
                    std::mem::transmute::<usize, unsafe extern "C" fn() -> *mut c_void>(gil)
                },
                code_type: code,
                frame_type: frame,
                unicode_type: unicode,
                bytes_type: bytes,
                runtime,
            })
        }
        _ => Detected::Unsupported(version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_from_the_version_string() {
        assert_eq!(
            parse_version(b"3.10.13 (main, Jan 1 2024) [GCC]"),
            Some(0x030a0df0)
        );
        assert_eq!(parse_version(b"3.13.0rc1"), Some(0x030d00f0));
        assert_eq!(parse_version(b"3.9"), Some(0x030900f0));
        assert_eq!(parse_version(b"garbage"), None);
    }

    #[test]
    fn thread_offsets_of_each_minor() {
        let t = |m| Layout::known(m).unwrap().threads;
        assert_eq!(
            t(10).gil,
            GilAt::Runtime {
                locked: 368,
                holder: 360
            }
        );
        assert_eq!(
            (t(11).interp_threads_head, t(11).tstate_thread_id),
            (16, 152)
        );
        assert_eq!(
            t(12).gil,
            GilAt::Interp {
                ptr: 384,
                locked: 16,
                holder: 8
            }
        );
        assert_eq!(
            (t(13).runtime_interp_main, t(13).runtime_main_thread),
            (640, 656)
        );
    }

    #[test]
    fn known_layouts_are_the_supported_minors() {
        assert!(Layout::known(9).is_none() && Layout::known(14).is_none());
        for m in 10..=13 {
            let l = Layout::known(m).unwrap();
            assert_eq!(l.minor, m);
            assert_eq!(l.frame_owner.is_some(), m >= 11);
            assert_eq!(l.code_adaptive.is_some(), m >= 11);
        }
    }

    #[test]
    fn debug_offsets_need_the_cookie_and_version() {
        let mut d = [0u8; 584];
        assert_eq!(
            // SAFETY: 584 bytes.
            unsafe { Layout::from_debug_offsets_313(d.as_ptr()) },
            None
        );
        d[..8].copy_from_slice(b"xdebugpy");
        d[8..16].copy_from_slice(&0x030d00f0u64.to_ne_bytes());
        let known = Layout::known(13).unwrap();
        let put = |d: &mut [u8; 584], at: usize, v: usize| {
            d[at..at + 8].copy_from_slice(&(v as u64).to_ne_bytes())
        };
        for (at, v) in [
            (32, known.runtime_finalizing),
            (184, known.tstate_frame),
            (232, known.frame_previous),
            (240, known.frame_code),
            (248, known.frame_instr),
            (264, 70),
            (280, known.code_filename),
            (296, known.code_name),
            (304, known.code_linetable),
            (312, known.code_firstlineno),
            (344, 200),
            (360, known.ob_type),
            (416, known.ob_size),
            (528, known.bytes_data),
            (544, known.unicode_state),
            (552, known.unicode_length),
            (560, known.unicode_ascii_size),
            // The threads: interpreters.head, threads.head, tstate next and thread_id,
            // ceval.gil, the embedded `_gil` and its locked and last_holder fields.
            (40, 632),
            (72, 7344),
            (168, 8),
            (192, 152),
            (112, 16),
            (120, 9000),
            (136, 9016),
            (144, 9008),
        ] {
            put(&mut d, at, v);
        }
        // SAFETY: 584 bytes.
        let parsed = unsafe { Layout::from_debug_offsets_313(d.as_ptr()) };
        assert_eq!(parsed, Some(known));
        // A free-threaded build has another object header.
        d[16] = 1;
        // SAFETY: 584 bytes.
        assert_eq!(unsafe { Layout::from_debug_offsets_313(d.as_ptr()) }, None);
    }
}
