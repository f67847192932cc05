//! Call sites: the native stack of return addresses at a stall, unwound with the platform's
//! DWARF unwinder (`_Unwind_Backtrace` from libgcc_s, which reads `.eh_frame`; frame
//! pointers are not reliable in libtorch), interned in the segment's site table; and the
//! module map that lets readers symbolize those addresses offline.
//!
//! Cost is bounded: stacks are taken only for stalls (never on the non-stalling fast path),
//! at most `SYNCSPY_STACK_DEPTH` frames, optionally only for stalls longer than
//! `SYNCSPY_STACK_MIN_NS`; the time spent is published in the header (`stack_ns`).
//!
//! A stall that repeats from the same place (the common case: a sync in a training loop)
//! does not unwind again. Each thread caches recent stacks keyed by its stack position, with
//! the stack slots that held each return address; a later stall at the same stack position
//! takes the cached stack only if every one of those slots still holds the same return
//! address. With the same stack pointer and return address, a frame whose CFA is computed
//! from the stack pointer puts its caller's return address in the same slot, so for such
//! frames the whole chain is the one the unwinder would find. A frame that allocates a
//! dynamic amount of stack (alloca, VLAs) computes its CFA from the frame pointer; if the
//! allocation size changed between two stalls at the same depth and stale stack contents
//! happen to hold the old return addresses, the cache can return the older stack: a wrong
//! call site, never a wrong count or duration. `SYNCSPY_STACK_CACHE=0` turns the cache off.
//! The cache reads only inside the calling thread's own pthread stack (fibers, coroutines
//! and alternate signal stacks always unwind), is dropped in a fork child, and is x86_64
//! only (the return address sits at CFA − 8); elsewhere every stall unwinds.
use std::ffi::{c_int, c_void};
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;

use syncspy_abi::objects::for_each_object;
use syncspy_abi::record::NO_SITE;
use syncspy_abi::sites::MAX_FRAMES;

use crate::clock::now_ns;
use crate::state::Runtime;

extern "C" {
    fn _Unwind_Backtrace(
        trace: extern "C" fn(ctx: *mut c_void, arg: *mut c_void) -> c_int,
        arg: *mut c_void,
    ) -> c_int;
    fn _Unwind_GetIP(ctx: *mut c_void) -> usize;
    fn _Unwind_GetCFA(ctx: *mut c_void) -> usize;
}

const URC_NO_REASON: c_int = 0;
const URC_END_OF_STACK: c_int = 5;

struct Walk {
    frames: [u64; MAX_FRAMES],
    /// Stack address that held each frame's return address.
    slots: [u64; MAX_FRAMES],
    n: usize,
    depth: usize,
    /// Leading frames inside this range (the library itself) are skipped.
    own: (u64, u64),
    skipping: bool,
    truncated: bool,
}

extern "C" fn step(ctx: *mut c_void, arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Walk` passed to `_Unwind_Backtrace` below; `ctx` is the
    // unwinder's context for this frame.
    let (w, ip, cfa) = unsafe {
        (
            &mut *(arg as *mut Walk),
            _Unwind_GetIP(ctx) as u64,
            _Unwind_GetCFA(ctx) as u64,
        )
    };
    if ip == 0 {
        return URC_END_OF_STACK;
    }
    // In a backtrace callback the CFA is that of the frame just unwound (the callee), so
    // this frame's return address `ip` was pushed at CFA − 8.
    let slot = cfa.wrapping_sub(8);
    if w.skipping && w.own.0 <= ip && ip < w.own.1 {
        return URC_NO_REASON;
    }
    w.skipping = false;
    if w.n >= w.depth {
        w.truncated = true;
        return URC_END_OF_STACK;
    }
    w.frames[w.n] = ip;
    w.slots[w.n] = slot;
    w.n += 1;
    URC_NO_REASON
}

/// Unwinds the calling thread's stack: return addresses, innermost first, without the
/// leading frames that lie in `own`. Returns the frames and whether the depth cut them.
pub fn capture(own: (u64, u64), depth: usize, out: &mut [u64; MAX_FRAMES]) -> (usize, bool) {
    let w = walk(own, depth);
    out[..w.n].copy_from_slice(&w.frames[..w.n]);
    (w.n, w.truncated)
}

fn walk(own: (u64, u64), depth: usize) -> Walk {
    let mut w = Walk {
        frames: [0; MAX_FRAMES],
        slots: [0; MAX_FRAMES],
        n: 0,
        depth: depth.min(MAX_FRAMES),
        own,
        skipping: true,
        truncated: false,
    };
    // SAFETY: `step` has the callback signature `_Unwind_Backtrace` expects and treats `arg`
    // as the `Walk` passed here, which outlives the call (the walk ends before it returns).
    unsafe { _Unwind_Backtrace(step, &mut w as *mut Walk as *mut c_void) };
    w
}

/// Finds the call site of the current stall: from the thread's stack cache when the stack
/// is provably the same as a cached one, else by unwinding and interning. Returns the site
/// id, whether the stack was cut at the depth limit, and whether it was unwound. An unwind
/// is always timed into `stack_ns`; a cache hit only when `weight` says so (see
/// `guard::overhead_weight`), counted `weight` times.
#[inline(never)]
pub fn capture_site(rt: &Runtime, weight: Option<u64>) -> (u32, bool, bool) {
    let marker = 0u8;
    // The address of a local: a deterministic function of the stack pointer at the hook.
    let key = std::hint::black_box(&marker) as *const u8 as usize;
    let live = rt.seg.live();
    if rt.cfg.stack_cache {
        let t0 = weight.map(|_| now_ns());
        if let Some((site, truncated)) = cache::lookup(key) {
            live.stack_cache_hits.fetch_add(1, Ordering::Relaxed);
            if let (Some(t0), Some(w)) = (t0, weight) {
                live.stack_ns.fetch_add(
                    now_ns().saturating_sub(t0).saturating_mul(w),
                    Ordering::Relaxed,
                );
            }
            return (site, truncated, false);
        }
    }
    let t0 = now_ns();
    let w = walk(rt.own, rt.cfg.stack_depth);
    refresh_modules(rt);
    let site = if w.n == 0 {
        NO_SITE
    } else {
        rt.seg.intern_site(&w.frames[..w.n]).unwrap_or(NO_SITE)
    };
    if site != NO_SITE && rt.cfg.stack_cache {
        cache::store(key, &w, site);
    }
    live.stack_captures.fetch_add(1, Ordering::Relaxed);
    live.stack_ns
        .fetch_add(now_ns().saturating_sub(t0), Ordering::Relaxed);
    (site, w.truncated, true)
}

/// One loaded object as `dl_iterate_phdr` describes it.
struct Object {
    path: Vec<u8>,
    bias: u64,
    start: u64,
    end: u64,
    build_id: Vec<u8>,
}

fn objects() -> Vec<Object> {
    let mut out = Vec::new();
    for_each_object(|o| -> ControlFlow<()> {
        if let Some(extent) = o.extent() {
            out.push(Object {
                path: o.name().to_bytes().to_vec(),
                bias: o.bias(),
                start: extent.start,
                end: extent.end,
                build_id: o.build_id().unwrap_or_default().to_vec(),
            });
        }
        ControlFlow::Continue(())
    });
    out
}

/// Brings the segment's module map up to date when the dynamic linker has loaded objects
/// since the last look. Only one thread refreshes at a time; others go on without waiting.
pub fn refresh_modules(rt: &Runtime) {
    let adds = crate::real::loader_adds();
    if rt.modules_adds.load(Ordering::Acquire) == adds {
        return;
    }
    if rt.refreshing.swap(true, Ordering::Acquire) {
        return;
    }
    let known = rt.seg.modules();
    for o in objects() {
        if known.iter().any(|m| m.bias == o.bias && m.start == o.start) {
            continue;
        }
        let path = if o.path.is_empty() {
            exe_path()
        } else {
            o.path
        };
        rt.seg
            .add_module(&path, o.bias, o.start, o.end, &o.build_id);
    }
    rt.modules_adds.store(adds, Ordering::Release);
    rt.refreshing.store(false, Ordering::Release);
    if rt.cfg.stacks {
        crate::unwind_ahead::request();
    }
}

fn exe_path() -> Vec<u8> {
    std::fs::read_link("/proc/self/exe")
        .map(|p| std::os::unix::ffi::OsStringExt::into_vec(p.into_os_string()))
        .unwrap_or_default()
}

/// Runtime address range of the object holding this code (libsyncspy.so).
pub fn own_range() -> (u64, u64) {
    let here = own_range as *const () as u64;
    objects()
        .into_iter()
        .find(|o| o.start <= here && here < o.end)
        .map(|o| (o.start, o.end))
        .unwrap_or((0, 0))
}

/// The per-thread stack cache (see the module comment).
mod cache {
    use std::cell::RefCell;
    use std::sync::atomic::Ordering;

    use syncspy_abi::sites::MAX_FRAMES;

    use super::Walk;
    use crate::guard::FORK_GEN;

    const WAYS: usize = 8;

    #[derive(Clone, Copy)]
    struct Entry {
        key: usize,
        n: usize,
        truncated: bool,
        site: u32,
        frames: [u64; MAX_FRAMES],
        slots: [u64; MAX_FRAMES],
    }

    const EMPTY: Entry = Entry {
        key: 0,
        n: 0,
        truncated: false,
        site: 0,
        frames: [0; MAX_FRAMES],
        slots: [0; MAX_FRAMES],
    };

    struct ThreadStacks {
        entries: [Entry; WAYS],
        /// This thread's pthread stack, `[lo, hi)`: keys and slots must lie inside it.
        lo: usize,
        hi: usize,
        /// `guard::FORK_GEN` when the entries were made: a fork child starts empty.
        fork_gen: u32,
    }

    thread_local! {
        static STACKS: RefCell<Option<Box<ThreadStacks>>> = const { RefCell::new(None) };
    }

    fn way(key: usize) -> usize {
        (key >> 4) % WAYS
    }

    /// The calling thread's stack as pthread reports it, `(lo, hi)`; `(0, 0)` if unknown.
    fn stack_bounds() -> (usize, usize) {
        // SAFETY: `pthread_attr_t` is an opaque byte array, so all-zero is a valid value;
        // pthread_getattr_np initialises it for our own, live thread, and it is read only
        // after that succeeded and destroyed once; `addr` and `size` are local out-pointers.
        unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
                return (0, 0);
            }
            let (mut addr, mut size) = (std::ptr::null_mut(), 0usize);
            let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
            libc::pthread_attr_destroy(&mut attr);
            if rc != 0 {
                return (0, 0);
            }
            (addr as usize, addr as usize + size)
        }
    }

    /// The cached site for a stall at stack position `key`, if every return-address slot
    /// of the cached stack still holds its return address.
    pub fn lookup(key: usize) -> Option<(u32, bool)> {
        if !cfg!(target_arch = "x86_64") {
            return None;
        }
        STACKS
            .try_with(|s| {
                let s = s.try_borrow().ok()?;
                let ts = s.as_ref()?;
                if ts.fork_gen != FORK_GEN.load(Ordering::Relaxed) || key < ts.lo || key >= ts.hi {
                    return None;
                }
                let e = &ts.entries[way(key)];
                if e.key != key || e.n == 0 {
                    return None;
                }
                for (slot, frame) in e.slots[..e.n].iter().zip(&e.frames[..e.n]) {
                    let slot = *slot as usize;
                    if slot < key || slot.checked_add(8)? > ts.hi {
                        return None;
                    }
                    // SAFETY: `slot` lies between this function's frame and the top of the
                    // thread's stack, in the live frames of our callers.
                    let v = unsafe { std::ptr::read_volatile(slot as *const u64) };
                    if v != *frame {
                        return None;
                    }
                }
                Some((e.site, e.truncated))
            })
            .ok()
            .flatten()
    }

    /// Remembers an unwound stack.
    pub fn store(key: usize, w: &Walk, site: u32) {
        if !cfg!(target_arch = "x86_64") || w.n == 0 {
            return;
        }
        let _ = STACKS.try_with(|s| {
            let Ok(mut s) = s.try_borrow_mut() else {
                return;
            };
            let gen = FORK_GEN.load(Ordering::Relaxed);
            let fresh = || {
                let (lo, hi) = stack_bounds();
                ThreadStacks {
                    entries: [EMPTY; WAYS],
                    lo,
                    hi,
                    fork_gen: gen,
                }
            };
            let ts = s.get_or_insert_with(|| Box::new(fresh()));
            if ts.fork_gen != gen {
                // A fork child: the parent's stacks and site ids are not this process's.
                **ts = fresh();
            }
            let inside = |a: u64| (a as usize) >= key && (a as usize).saturating_add(8) <= ts.hi;
            if key < ts.lo || key >= ts.hi || !w.slots[..w.n].iter().all(|s| inside(*s)) {
                return;
            }
            ts.entries[way(key)] = Entry {
                key,
                n: w.n,
                truncated: w.truncated,
                site,
                frames: w.frames,
                slots: w.slots,
            };
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn leaf(out: &mut [u64; MAX_FRAMES]) -> (usize, bool) {
        capture((0, 0), MAX_FRAMES, out)
    }

    #[test]
    fn unwinds_through_rust_frames_and_respects_depth() {
        let mut f = [0u64; MAX_FRAMES];
        let (n, _) = leaf(&mut f);
        assert!(n >= 3, "expected a real stack, got {n} frames");
        let (n2, cut) = capture((0, 0), 2, &mut f);
        assert_eq!((n2, cut), (2, true));
        // Skipping our own object leaves the frames above it.
        let own = own_range();
        assert!(own.0 < own.1);
        let (n3, _) = capture(own, MAX_FRAMES, &mut f);
        assert!(n3 < n);
    }

    #[test]
    fn loaded_objects_carry_their_build_ids() {
        let objs = objects();
        assert!(objs.iter().any(|o| !o.build_id.is_empty()));
    }
}
