//! The user's Python frames at every recorded stall: `train.py:142 in train_step` rather than
//! the one native call site inside libtorch that every `.item()` shares.
//!
//! Design, by cost:
//! - Once per process (segment creation, `probe`): find CPython in the global scope, read its
//!   version and pick the frame layout (`layout`). No CPython: nothing more ever happens, and
//!   the segment has no Python tables. A CPython this build cannot walk: the segment says so
//!   once (`PY_UNSUPPORTED` with the version) and sites stay native.
//! - Per recorded event (`site`): the thread's `PyThreadState` comes from
//!   `PyGILState_GetThisThreadState()`, which reads the interpreter's thread-specific-storage
//!   key (`pthread_getspecific`) and needs neither the GIL nor a lock: the thread does not
//!   hold the GIL here (torch and ctypes release it around the call), and taking it could
//!   deadlock. The walk (`walk`) notes each frame's code object and instruction offset and
//!   hashes them; a per-thread cache maps (native site, Python hash) to the site id. No
//!   allocation, no syscall, no lock; the non-stalling path never gets here.
//! - Per new (native site, Python stack) pair, the cold path (`combine`): intern the pair as a
//!   site of its own (the native stack under a hash salted with the Python one, so two lines
//!   over one native stack are two sites), then decode each frame's line from its code
//!   object's line table and intern the code object's file and qualified name in the code
//!   table, once per code object (`decode`). Readers get strings and lines from the segment
//!   (`SegmentReader::python_frames`) with no access to the process.
//!
//! A thread without a Python thread state (a C thread), or a stack whose walk finds no Python
//! frame, keeps its native site, unless another Python thread was waiting for it at that
//! moment (`waiter`, the slow path of such a stall only): then the event gets a site of its
//! own over the same native stack, whose Python entry holds the waiting thread's frames as a
//! separate "waited for by" stack, never as the site's own frames (`waited`). Why the
//! in-process reads are safe is in `walk` (this thread's frames) and `waiter` (another's).

pub mod decode;
pub mod layout;
pub mod mem;
mod memo;
pub mod waiter;
pub mod walk;

use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use syncspy_abi::python::{PyFrameRef, MAX_PY_FRAMES, PY_SUPPORTED, PY_UNSUPPORTED};
use syncspy_abi::record::NO_SITE;
use syncspy_abi::{SegmentParams, SegmentWriter};

use crate::state::Runtime;
use layout::{Detected, Python};
use walk::Walk;

static DETECTED: OnceLock<Detected> = OnceLock::new();

/// Looks for CPython (once per process) and returns the code-table size the segment needs:
/// 0 without a supported interpreter.
pub fn probe() -> u32 {
    match DETECTED.get_or_init(layout::detect) {
        Detected::Supported(_) => SegmentParams::DEFAULT_PYTHON_CODES,
        _ => 0,
    }
}

/// Whether this process runs a CPython whose frames are read.
pub fn supported() -> bool {
    matches!(DETECTED.get(), Some(Detected::Supported(_)))
}

/// Says in a new segment what `probe` found.
pub fn publish(seg: &SegmentWriter) {
    match DETECTED.get() {
        Some(Detected::Supported(py)) if seg.has_python_tables() => {
            seg.set_python(PY_SUPPORTED, py.version)
        }
        Some(Detected::Supported(py)) => seg.set_python(PY_UNSUPPORTED, py.version),
        Some(Detected::Unsupported(v)) => seg.set_python(PY_UNSUPPORTED, *v),
        _ => {}
    }
}

/// Uses `py` instead of looking for an interpreter (tests and benchmarks); must come before
/// the segment is created. `false` if detection already ran.
pub fn install(py: Python) -> bool {
    DETECTED.set(Detected::Supported(py)).is_ok()
}

/// The call site of this event: `native` refined by the calling thread's Python stack, or
/// by the stack of the Python thread that waited for it.
#[inline]
pub fn site(rt: &Runtime, native: u32) -> u32 {
    match DETECTED.get() {
        Some(Detected::Supported(py)) if native != NO_SITE => attach(rt, py, native),
        _ => native,
    }
}

#[inline(never)]
fn attach(rt: &Runtime, py: &Python, native: u32) -> u32 {
    // SAFETY: `PyGILState_GetThisThreadState` takes no arguments and needs no GIL.
    let tstate = unsafe { (py.this_thread_state)() } as usize;
    if tstate == 0 {
        return waited(rt, py, native, 0);
    }
    let live = rt.seg.python_live();
    // SAFETY: `_PyRuntime` is a static of the interpreter; the offset lies inside it.
    if unsafe { walk::word(py.runtime, py.layout.runtime_finalizing) } != 0 {
        live.finalizing.fetch_add(1, Ordering::Relaxed);
        return native;
    }
    let mut w = Walk::new();
    // SAFETY: this thread's own state, of the interpreter `py` describes, not finalizing.
    unsafe { walk::walk(py, tstate, &mut w) };
    if w.rejected {
        live.rejected.fetch_add(1, Ordering::Relaxed);
    }
    if w.n == 0 {
        return waited(rt, py, native, tstate);
    }
    live.stacks.fetch_add(1, Ordering::Relaxed);
    if w.truncated || w.skipped > 0 {
        live.truncated.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(site) = cache::lookup(native, w.hash) {
        return site;
    }
    let site = combine(rt, py, native, &w);
    if site != native {
        cache::store(native, w.hash, site);
    }
    site
}

/// Salt of a waiting thread's stack hash: its sites never share an id with an own stack's.
const WAITED_SALT: u64 = 0x5741_4954_4544_4259;

/// The slow path of a stall on a thread with no Python frames (`me`: its thread state, 0 if
/// none): the site of `native` with the waiting Python thread's stack attached, or `native`.
#[cold]
#[inline(never)]
fn waited(rt: &Runtime, py: &Python, native: u32, me: usize) -> u32 {
    let u = memo::Use {
        native,
        salt: WAITED_SALT,
        me,
    };
    read_others(rt, py, waiter::Purpose::Waited, |m| {
        if let Some(b) = memo::quick(py, m, u) {
            return Some(b.site);
        }
        let c0 = crate::clock::cpu_of(crate::guard::pid());
        let mut w = Walk::new();
        let found = waiter::find(py, m, me, &mut w).ok()?;
        let main = found.main;
        let hash = (w.hash ^ WAITED_SALT ^ u64::from(main)).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let site = match cache::lookup(native, hash) {
            Some(site) => site,
            None => {
                let site = rt.seg.intern_python_site(native, hash)?;
                if rt.seg.claim_python_site(site) {
                    let refs = frame_refs(rt, py, m, &w);
                    rt.seg.publish_waiter_site(
                        site,
                        &refs[..w.n],
                        w.truncated,
                        w.skipped > 0,
                        main,
                    );
                }
                cache::store(native, hash, site);
                site
            }
        };
        memo::learn(py, m, u, found, site, c0);
        Some(site)
    })
    .unwrap_or(native)
}

/// Runs `read` over other threads' memory for `purpose`, unless the interpreter is
/// finalizing, the reads' budget is spent or another thread is reading for the same purpose
/// (both counted in the segment's `cost.looks_skipped`); its CPU time counts against the
/// budget.
fn read_others<R>(
    rt: &Runtime,
    py: &Python,
    purpose: waiter::Purpose,
    read: impl FnOnce(&mut mem::Remote) -> Option<R>,
) -> Option<R> {
    // SAFETY: `_PyRuntime` is a static of the interpreter; the offset lies inside it.
    if unsafe { walk::word(py.runtime, py.layout.runtime_finalizing) } != 0 {
        return None;
    }
    if !mem::Remote::available() {
        return None;
    }
    let skipped = || {
        rt.seg
            .cost()
            .looks_skipped
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        None
    };
    if !waiter::Budget::allow(crate::clock::now_ns()) {
        return skipped();
    }
    waiter::Budget::timed(|| waiter::with_scratch(purpose, read).unwrap_or_else(skipped))
}

/// A Python thread found blocked without the GIL as a host function was about to run
/// (`hostwait`).
pub struct Blocked {
    /// The site of the native stack given, with the blocked thread's Python stack as the
    /// site's own frames: that thread is the one that waits.
    pub site: u32,
    /// The blocked thread's kernel thread id.
    pub tid: u32,
}

/// The Python thread blocked without the GIL right now, by the rule of `waiter` (the main
/// thread first), with its stack interned over `native`; `None` without a supported
/// interpreter, when none is blocked, when the reads' budget is spent or another thread is
/// reading. Runs on a thread with no Python frames (the driver's host-function thread).
#[cold]
#[inline(never)]
pub fn blocked_thread(rt: &Runtime, native: u32, purpose: waiter::Purpose) -> Option<Blocked> {
    let Some(Detected::Supported(py)) = DETECTED.get() else {
        return None;
    };
    if native == NO_SITE || !rt.cfg.python {
        return None;
    }
    let u = memo::Use {
        native,
        salt: 0,
        me: 0,
    };
    read_others(rt, py, purpose, |m| {
        if let Some(b) = memo::quick(py, m, u) {
            return Some(b);
        }
        let c0 = crate::clock::cpu_of(crate::guard::pid());
        let mut w = Walk::new();
        let found = waiter::find(py, m, 0, &mut w).ok()?;
        let tid = waiter::native_tid(py, m, found)?;
        let site = match cache::lookup(native, w.hash) {
            Some(site) => site,
            None => {
                let site = rt.seg.intern_python_site(native, w.hash)?;
                if rt.seg.claim_python_site(site) {
                    let refs = frame_refs(rt, py, m, &w);
                    rt.seg
                        .publish_python_site(site, &refs[..w.n], w.truncated, w.skipped > 0);
                }
                cache::store(native, w.hash, site);
                site
            }
        };
        memo::learn(py, m, u, found, site, c0);
        Some(Blocked { site, tid })
    })
}

/// The (code id, line) of each frame of `w`, decoding names into the code table.
fn frame_refs<M: mem::Mem>(
    rt: &Runtime,
    py: &Python,
    m: &mut M,
    w: &Walk,
) -> [PyFrameRef; MAX_PY_FRAMES] {
    let mut refs = [PyFrameRef { code: 0, line: 0 }; MAX_PY_FRAMES];
    for (i, (r, &(code, instr))) in refs.iter_mut().zip(&w.frames[..w.n]).enumerate() {
        if w.skipped > 0 && i == walk::INNER {
            *r = PyFrameRef {
                code: syncspy_abi::python::SKIPPED_CODE,
                line: w.skipped,
            };
            continue;
        }
        // SAFETY: for `Local`, `code` was accepted by the walk of this thread's live frames,
        // which cannot change while the thread is in this hook; `Remote` needs nothing.
        unsafe {
            let key = decode::code_key(py, m, code);
            r.code = rt
                .seg
                .intern_code(key, |t| decode::names(py, m, code, t))
                .unwrap_or(0);
            r.line = decode::line(py, m, code, instr).unwrap_or(0);
        }
    }
    refs
}

/// Interns the (native site, Python stack) pair and, for a new pair, decodes its frames.
#[cold]
#[inline(never)]
fn combine(rt: &Runtime, py: &Python, native: u32, w: &Walk) -> u32 {
    let Some(site) = rt.seg.intern_python_site(native, w.hash) else {
        return native;
    };
    if rt.seg.claim_python_site(site) {
        let refs = frame_refs(rt, py, &mut mem::Local, w);
        rt.seg
            .publish_python_site(site, &refs[..w.n], w.truncated, w.skipped > 0);
    }
    site
}

/// Per-thread map of (native site, Python stack hash) to site, so a repeated stall costs the
/// walk and one probe here.
mod cache {
    use std::cell::RefCell;
    use std::sync::atomic::Ordering;

    use crate::guard::FORK_GEN;

    const WAYS: usize = 16;

    #[derive(Clone, Copy)]
    struct Slot {
        native: u32,
        site: u32,
        hash: u64,
    }

    struct Sites {
        /// `guard::FORK_GEN` when filled: a fork child has another segment and other ids.
        fork_gen: u32,
        slots: [Slot; WAYS],
    }

    const EMPTY: Slot = Slot {
        native: 0,
        site: 0,
        hash: 0,
    };

    thread_local! {
        static SITES: RefCell<Sites> = const {
            RefCell::new(Sites { fork_gen: 0, slots: [EMPTY; WAYS] })
        };
    }

    fn way(native: u32, hash: u64) -> usize {
        ((hash ^ u64::from(native).wrapping_mul(0x9e37_79b9)) >> 7) as usize % WAYS
    }

    pub fn lookup(native: u32, hash: u64) -> Option<u32> {
        SITES
            .try_with(|s| {
                let s = s.try_borrow().ok()?;
                if s.fork_gen != FORK_GEN.load(Ordering::Relaxed) {
                    return None;
                }
                let e = s.slots[way(native, hash)];
                (e.native == native && e.hash == hash && e.site != 0).then_some(e.site)
            })
            .ok()
            .flatten()
    }

    pub fn store(native: u32, hash: u64, site: u32) {
        let _ = SITES.try_with(|s| {
            let Ok(mut s) = s.try_borrow_mut() else {
                return;
            };
            let gen = FORK_GEN.load(Ordering::Relaxed);
            if s.fork_gen != gen {
                *s = Sites {
                    fork_gen: gen,
                    slots: [EMPTY; WAYS],
                };
            }
            s.slots[way(native, hash)] = Slot { native, site, hash };
        });
    }
}

/// Fake interpreter memory in the CPython 3.11 layout, for tests and the benchmark: a thread
/// state whose frame chain holds `depth` frames over `depth` code objects.
#[doc(hidden)]
pub mod fake {
    use std::ffi::c_void;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::layout::{Layout, Python};

    /// Stands in for `PyCode_Type` and the other type objects: only their addresses matter.
    static CODE_TYPE: [u64; 8] = [0; 8];
    static FRAME_TYPE: [u64; 8] = [0; 8];
    static UNICODE_TYPE: [u64; 8] = [0; 8];
    static BYTES_TYPE: [u64; 8] = [0; 8];
    /// A `_PyRuntime` that is not finalizing.
    static RUNTIME: [u64; 8] = [0; 8];
    /// What the fake `PyGILState_GetThisThreadState` returns.
    static TSTATE: AtomicUsize = AtomicUsize::new(0);

    extern "C" fn this_thread_state() -> *mut c_void {
        TSTATE.load(Ordering::Relaxed) as *mut c_void
    }

    /// The interpreter the fake memory belongs to.
    pub fn python() -> Python {
        Python {
            version: super::layout::version_hex(3, 11, 0),
            layout: Layout::known(11).expect("3.11 is known"),
            this_thread_state,
            code_type: CODE_TYPE.as_ptr() as usize,
            frame_type: FRAME_TYPE.as_ptr() as usize,
            unicode_type: UNICODE_TYPE.as_ptr() as usize,
            bytes_type: BYTES_TYPE.as_ptr() as usize,
            runtime: RUNTIME.as_ptr() as usize,
        }
    }

    /// A thread state with `depth` frames; frame `i` (0 innermost) runs code object `i` at
    /// instruction `instr[i]`, in a file `file<i>.py`, function `f<i>`, whose line table maps
    /// instruction `k` to line `100 * i + k + 1`.
    pub struct Stack {
        pub words: Vec<u64>,
        pub tstate: usize,
        pub codes: Vec<usize>,
    }

    const CODE_WORDS: usize = 64;
    const FRAME_WORDS: usize = 16;
    const STR_WORDS: usize = 16;

    impl Stack {
        pub fn new(instr: &[u32]) -> Stack {
            let l = Layout::known(11).expect("3.11 is known");
            let depth = instr.len();
            let units = 16usize;
            // code objects, then frames, then cframe + tstate, then strings and line tables.
            let code_at = |i: usize| i * CODE_WORDS;
            let frame_at = |i: usize| depth * CODE_WORDS + i * FRAME_WORDS;
            let cframe_at = depth * (CODE_WORDS + FRAME_WORDS);
            let tstate_at = cframe_at + 4;
            let str_at = |i: usize, k: usize| tstate_at + 16 + (3 * i + k) * STR_WORDS;
            let mut words = vec![0u64; str_at(depth, 0)];
            let base = words.as_mut_ptr() as usize;
            let addr = |w: usize| (base + 8 * w) as u64;
            let put = |w: &mut Vec<u64>, word: usize, off: usize, v: u64| {
                assert_eq!(off % 8, 0);
                w[word + off / 8] = v;
            };
            let mut codes = Vec::new();
            for (i, &ins) in instr.iter().enumerate() {
                let c = code_at(i);
                put(&mut words, c, l.ob_type, CODE_TYPE.as_ptr() as u64);
                put(&mut words, c, l.ob_size, units as u64);
                // co_firstlineno (72) is an int at the start of its word; the line table
                // below starts one line on.
                put(&mut words, c, l.code_firstlineno, 100 * i as u64);
                put(&mut words, c, l.code_filename, addr(str_at(i, 0)));
                put(&mut words, c, l.code_name, addr(str_at(i, 1)));
                put(&mut words, c, l.code_linetable, addr(str_at(i, 2)));
                let f = frame_at(i);
                put(&mut words, f, l.frame_code, addr(c));
                let prev = if i + 1 < depth {
                    addr(frame_at(i + 1))
                } else {
                    0
                };
                put(&mut words, f, l.frame_previous, prev);
                let adaptive = l.code_adaptive.expect("3.11 has co_code_adaptive");
                put(
                    &mut words,
                    f,
                    l.frame_instr,
                    addr(c) + adaptive as u64 + 2 * ins as u64,
                );
                codes.push(addr(c) as usize);
                // Strings: compact ASCII (state: kind 1, compact, ascii).
                for (k, text) in [format!("file{i}.py"), format!("f{i}")].iter().enumerate() {
                    let s = str_at(i, k);
                    put(&mut words, s, l.ob_type, UNICODE_TYPE.as_ptr() as u64);
                    put(&mut words, s, l.unicode_length, text.len() as u64);
                    put(&mut words, s, l.unicode_state, 1 << 2 | 1 << 5 | 1 << 6);
                    let data = s + l.unicode_ascii_size / 8;
                    for (j, b) in text.bytes().enumerate() {
                        words[data + j / 8] |= u64::from(b) << (8 * (j % 8));
                    }
                }
                // Line table: one short-form entry per unit, each one line further on
                // (code 10 + 1: "one line, +1", two column bytes).
                let t = str_at(i, 2);
                put(&mut words, t, l.ob_type, BYTES_TYPE.as_ptr() as u64);
                put(&mut words, t, l.ob_size, 3 * units as u64);
                let data = t + l.bytes_data / 8;
                for u in 0..units {
                    for (j, b) in [0x80u8 | 11 << 3, 0, 0].into_iter().enumerate() {
                        let at = 3 * u + j;
                        words[data + at / 8] |= u64::from(b) << (8 * (at % 8));
                    }
                }
            }
            let first = if depth > 0 { addr(frame_at(0)) } else { 0 };
            put(
                &mut words,
                cframe_at,
                l.cframe_current.expect("3.11 has cframes"),
                first,
            );
            put(&mut words, tstate_at, l.tstate_frame, addr(cframe_at));
            Stack {
                tstate: addr(tstate_at) as usize,
                words,
                codes,
            }
        }

        /// Makes the fake `PyGILState_GetThisThreadState` return this stack's thread state
        /// (`false`: no thread state, a C thread).
        pub fn make_current(&self, on: bool) {
            TSTATE.store(if on { self.tstate } else { 0 }, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncspy_abi::python::CodeText;

    #[test]
    fn the_walk_reads_fake_311_frames_innermost_first() {
        let py = fake::python();
        let stack = fake::Stack::new(&[3, 0, 7]);
        let mut w = Walk::new();
        // SAFETY: the fake memory is a well-formed 3.11 frame chain and outlives the walk.
        unsafe { walk::walk(&py, stack.tstate, &mut w) };
        assert_eq!((w.n, w.truncated, w.rejected), (3, false, false));
        let got: Vec<_> = w.frames[..3].to_vec();
        assert_eq!(
            got,
            vec![
                (stack.codes[0], 3),
                (stack.codes[1], 0),
                (stack.codes[2], 7)
            ]
        );
        // SAFETY: as above.
        unsafe {
            let m = &mut mem::Local;
            assert_eq!(decode::line(&py, m, stack.codes[2], 7), Some(208));
            assert_eq!(decode::line(&py, m, stack.codes[0], 3), Some(4));
            let mut t = CodeText::new();
            decode::names(&py, m, stack.codes[1], &mut t);
            assert_eq!(&t.file[..t.file_len], b"file1.py");
            assert_eq!(&t.name[..t.name_len], b"f1");
            assert_eq!(t.first_line, 100);
        }
        // Another instruction in the innermost frame: another hash.
        let other = fake::Stack::new(&[4, 0, 7]);
        let mut w2 = Walk::new();
        // SAFETY: as above.
        unsafe { walk::walk(&py, other.tstate, &mut w2) };
        assert_ne!(w.hash, w2.hash);
    }

    #[test]
    fn the_walk_is_bounded_and_stops_at_a_foreign_code_object() {
        let py = fake::python();
        // Deeper than the entry: the 16 innermost, the mark of the 19 left out, the 15
        // outermost (where the user's code is), in order.
        let deep = fake::Stack::new(&[1; 50]);
        let mut w = Walk::new();
        // SAFETY: well-formed fake frames.
        unsafe { walk::walk(&py, deep.tstate, &mut w) };
        assert_eq!(
            (w.n, w.truncated, w.rejected),
            (MAX_PY_FRAMES, false, false)
        );
        assert_eq!(w.skipped, 19);
        let kept: Vec<usize> = w.frames.iter().map(|f| f.0).collect();
        let mut want: Vec<usize> = deep.codes[..16].to_vec();
        want.push(0);
        want.extend(&deep.codes[35..]);
        assert_eq!(kept, want);
        assert_eq!(w.frames[walk::INNER], (0, 19));
        // Exactly full: no mark.
        let full = fake::Stack::new(&[1; MAX_PY_FRAMES]);
        // SAFETY: as above.
        unsafe { walk::walk(&py, full.tstate, &mut w) };
        assert_eq!((w.n, w.skipped, w.truncated), (MAX_PY_FRAMES, 0, false));
        assert_eq!(w.frames[MAX_PY_FRAMES - 1].0, full.codes[MAX_PY_FRAMES - 1]);
        // Past what the walk visits: the outermost frames are missing (truncated).
        let deeper = fake::Stack::new(&vec![1; walk::MAX_STEPS + 10]);
        // SAFETY: as above.
        unsafe { walk::walk(&py, deeper.tstate, &mut w) };
        assert_eq!((w.n, w.truncated), (MAX_PY_FRAMES, true));
        // A code object of another type (a wrong layout would look like this) ends the walk,
        // keeping the frames inside it.
        let mut bad = fake::Stack::new(&[1, 2, 3]);
        let l = py.layout;
        let code2 = bad.codes[2];
        let base = bad.words.as_ptr() as usize;
        bad.words[(code2 - base + l.ob_type) / 8] = 0xdead_0000;
        // SAFETY: the fake memory is still readable everywhere the walk goes.
        unsafe { walk::walk(&py, bad.tstate, &mut w) };
        assert_eq!((w.n, w.truncated, w.rejected), (2, false, true));
        // An unaligned frame pointer is not followed.
        let mut w3 = Walk::new();
        // SAFETY: the walk rejects the thread state before reading it.
        unsafe { walk::walk(&py, 0x1001, &mut w3) };
        assert_eq!(w3.n, 0);
    }
}
