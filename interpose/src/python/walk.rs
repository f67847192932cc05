//! The per-event part: walk the calling thread's Python frames and note, for each, its code
//! object and the instruction it is at. No allocation, no lock, no syscall, no GIL.
//!
//! Why the reads are safe: the thread state is the one CPython bound to this OS thread, and
//! the frames hanging from it are this thread's own. While the thread sits in a CUDA call it
//! runs no Python, so none of its frames is pushed, popped or freed under the walk (another
//! thread may run Python meanwhile, but it never touches this thread's frames; a generator
//! frame in the chain is running, and a running generator cannot be resumed elsewhere). The
//! one exception is interpreter shutdown, which may free other threads' states: the walk is
//! skipped once `_PyRuntime._finalizing` is set. Against a wrong layout or torn data every
//! pointer is checked before it is followed (non-null, aligned, in the user address range),
//! every code object's type must be `&PyCode_Type` (3.10 frames: `&PyFrame_Type`) and its
//! instruction inside its code, and the walk is bounded; a frame that fails stops the walk,
//! keeping the frames inside it.

use syncspy_abi::python::MAX_PY_FRAMES;

use super::layout::{Python, OWNED_BY_CSTACK};
use super::mem::{Local, Mem};

/// Frames visited at most (shim frames are skipped without being kept): past Python's
/// default recursion limit (1000), so the outermost frames (the user's) are reached.
pub const MAX_STEPS: usize = 1024;
/// Of a stack deeper than `MAX_PY_FRAMES`: the innermost frames kept, then one skipped-frames
/// mark, then the `OUTER` outermost.
pub const INNER: usize = MAX_PY_FRAMES / 2;
pub const OUTER: usize = MAX_PY_FRAMES - INNER - 1;
/// Frames after the innermost `INNER` are kept in a ring of this many slots (the entries
/// `INNER..MAX_PY_FRAMES` of `frames`): the last ones seen, the outermost.
const RING: usize = MAX_PY_FRAMES - INNER;

/// The frames of one walk, innermost first.
pub struct Walk {
    /// Code object address and instruction offset in code units.
    pub frames: [(usize, u32); MAX_PY_FRAMES],
    pub n: usize,
    /// The walk stopped at `MAX_STEPS` before the outermost frame.
    pub truncated: bool,
    /// Frames left out of the middle of a stack deeper than `MAX_PY_FRAMES`: then
    /// `frames[INNER]` is the mark (`(0, skipped)`), the innermost before it, the outermost
    /// after. 0 otherwise.
    pub skipped: u32,
    /// A frame failed validation and ended the walk.
    pub rejected: bool,
    /// Hash of (code, instruction, first line) of every kept frame; never 0 when `n > 0`.
    pub hash: u64,
}

impl Walk {
    pub const fn new() -> Walk {
        Walk {
            frames: [(0, 0); MAX_PY_FRAMES],
            n: 0,
            truncated: false,
            skipped: 0,
            rejected: false,
            hash: 0,
        }
    }
}

/// A pointer worth following: non-null, 8-aligned, in the lower half of a 48-bit address space,
/// above the first page.
#[inline(always)]
pub fn plausible(p: usize) -> bool {
    (4096..1 << 47).contains(&p) && p.is_multiple_of(8)
}

/// Reads a word at `p + off`.
///
/// # Safety
/// `p + off` is readable (see the module comment for why the walk's addresses are).
#[inline(always)]
pub unsafe fn word(p: usize, off: usize) -> usize {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::read_volatile((p + off) as *const usize) }
}

#[inline(always)]
pub fn mix(h: u64, v: u64) -> u64 {
    (h ^ v).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(29)
}

/// Walks the frames of `tstate`, this thread's state.
///
/// # Safety
/// `tstate` is the calling thread's `PyThreadState` (from `PyGILState_GetThisThreadState`),
/// of the interpreter `py` describes, not finalizing.
///
/// Kept out of line, as it was before the walk became generic: the per-stall hot path has the
/// same shape (measured in docs/performance.md).
#[inline(never)]
pub unsafe fn walk(py: &Python, tstate: usize, w: &mut Walk) {
    // SAFETY: the caller's contract, which is `walk_with`'s for `Local`.
    unsafe { walk_with(py, &mut Local, tstate, w) }
}

/// The first frame of `tstate`'s chain (0: none; `None`: unreadable or implausible).
///
/// # Safety
/// For `Local`, as for `walk`; `Remote` has no requirement.
#[inline(always)]
pub unsafe fn top_frame<M: Mem>(py: &Python, m: &mut M, tstate: usize) -> Option<usize> {
    let l = &py.layout;
    if !plausible(tstate) {
        return None;
    }
    // SAFETY: a live thread state (the caller's contract) and an offset inside it.
    let f = unsafe { m.word(tstate, l.tstate_frame) }?;
    match l.cframe_current {
        // 3.11/3.12: `tstate->cframe` is on the thread's C stack, in a live eval-loop frame
        // (or the thread state's root cframe).
        Some(_) if f == 0 => Some(0),
        Some(_) if !plausible(f) => None,
        // SAFETY: checked above; see the module comment.
        Some(current) => unsafe { m.word(f, current) },
        None => Some(f),
    }
}

/// Walks the frames of `tstate` through `m`: `Local` for the calling thread's own,
/// `Remote` for another thread's (where every read may fail and the walk then stops, as at a
/// frame that fails validation).
///
/// # Safety
/// For `Local`, as for `walk`. For `Remote`, `tstate` may be anything.
#[inline(always)]
pub unsafe fn walk_with<M: Mem>(py: &Python, m: &mut M, tstate: usize, w: &mut Walk) {
    let l = &py.layout;
    w.n = 0;
    w.truncated = false;
    w.skipped = 0;
    w.rejected = false;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    if !plausible(tstate) {
        return;
    }
    // SAFETY: the caller's contract.
    let Some(mut f) = (unsafe { top_frame(py, m, tstate) }) else {
        w.rejected = true;
        return;
    };
    // Frames kept so far, counting those the ring overwrote.
    let mut seen = 0usize;
    let mut steps = 0;
    loop {
        if steps == MAX_STEPS {
            w.truncated = f != 0;
            break;
        }
        steps += 1;
        if f == 0 {
            break;
        }
        if !plausible(f) {
            w.rejected = true;
            break;
        }
        // SAFETY: `f` is a frame of this thread (module comment) and was checked.
        let Some(previous) = (unsafe { m.word(f, l.frame_previous) }) else {
            w.rejected = true;
            break;
        };
        if let Some(owner) = l.frame_owner {
            // SAFETY: as above.
            let Some(owner) = (unsafe { m.read::<u8>(f + owner) }) else {
                w.rejected = true;
                break;
            };
            if l.minor >= 12 && owner == OWNED_BY_CSTACK {
                f = previous;
                continue;
            }
        } else {
            // 3.10: frames are objects.
            // SAFETY: as above.
            if unsafe { m.word(f, l.ob_type) } != Some(py.frame_type) {
                w.rejected = true;
                break;
            }
        }
        // SAFETY: as above.
        let code = unsafe { m.word(f, l.frame_code) }.unwrap_or(0);
        // SAFETY: `code` was checked before its header is read.
        if !plausible(code) || unsafe { m.word(code, l.ob_type) } != Some(py.code_type) {
            w.rejected = true;
            break;
        }
        let instr = match l.code_adaptive {
            Some(adaptive) => {
                // SAFETY: `f` and `code` were checked above.
                let (Some(ip), Some(units)) =
                    (unsafe { (m.word(f, l.frame_instr), m.word(code, l.ob_size)) })
                else {
                    w.rejected = true;
                    break;
                };
                let start = code + adaptive;
                let offset = ip.wrapping_sub(start) / 2;
                if ip < start || offset >= units {
                    // A frame not yet started (an "incomplete" frame): not user code yet.
                    f = previous;
                    continue;
                }
                offset as u32
            }
            // SAFETY: `f` was checked above; `f_lasti` is an `int`.
            None => match unsafe { m.read::<i32>(f + l.frame_instr) } {
                None => {
                    w.rejected = true;
                    break;
                }
                Some(lasti) if lasti >= 0 => lasti as u32,
                Some(_) => {
                    f = previous;
                    continue;
                }
            },
        };
        // SAFETY: `code` was checked above.
        let Some(first) = (unsafe { m.read::<i32>(code + l.code_firstlineno) }) else {
            w.rejected = true;
            break;
        };
        // Every frame is in the hash, those left out too: the site is the whole stack.
        h = mix(mix(mix(h, code as u64), u64::from(instr)), first as u64);
        let slot = if seen < INNER {
            seen
        } else {
            INNER + (seen - INNER) % RING
        };
        w.frames[slot] = (code, instr);
        seen += 1;
        f = previous;
    }
    w.hash = h | 1;
    keep_ends(w, seen);
}

/// Sets `w.n` after a walk that kept `seen` frames. Of a stack deeper than the entry: the
/// innermost, the skipped-frames mark, then the last `OUTER` seen, in order (they sit in the
/// ring of `frames[INNER..]`).
#[inline(always)]
fn keep_ends(w: &mut Walk, seen: usize) {
    if seen <= MAX_PY_FRAMES {
        w.n = seen;
        return;
    }
    let mut outer = [(0usize, 0u32); OUTER];
    for (i, o) in outer.iter_mut().enumerate() {
        let k = seen - OUTER + i;
        *o = w.frames[INNER + (k - INNER) % RING];
    }
    w.skipped = u32::try_from(seen - INNER - OUTER).unwrap_or(u32::MAX);
    w.frames[INNER] = (0, w.skipped);
    w.frames[INNER + 1..].copy_from_slice(&outer);
    w.n = MAX_PY_FRAMES;
}
