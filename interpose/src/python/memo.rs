//! A wait at a stack seen before, found again cheaply: `blocked_thread`'s first try.
//!
//! A loop waits at the same stack step after step. The full look (`waiter::find`: the thread
//! list, a walk that checks every code object, a second read that the thread has not moved)
//! costs tens of page reads, and runs before the program's host function. Once a full look
//! found the main thread waiting, this keeps its thread state and maps the key of its whole
//! stack (`waiter::stack_key`, over the native site of the queuing call) to the site found.
//! A later look reads only the key (the GIL's holder, the thread state, its frames: a few
//! pages, read with one system call when they are the last key's) and, when the key is known,
//! takes its site. The thread must not run meanwhile: its CPU clock is read before and after
//! and must not have moved (frames read while it ran could mix two stacks), else the full
//! look runs. A second key while the clock still reads the same (another native site of the
//! same look) reads no memory. Only the main thread is kept: the waiter
//! rule picks it whenever it waits, so a look at it alone decides as the full look would.
//! Kept per thread (the driver runs host functions on one) and per segment (`FORK_GEN`).
use std::cell::RefCell;
use std::sync::atomic::Ordering;

use super::layout::Python;
use super::mem::{Remote, PAGES};
use super::waiter::{self, Found};
use super::walk::mix;
use super::Blocked;
use crate::clock::cpu_of;
use crate::guard::FORK_GEN;

/// Stacks kept (direct-mapped by key).
const WAYS: usize = 64;

struct Memo {
    fork_gen: u32,
    /// The main thread's state and where its interpreter's GIL is.
    main: Option<(usize, (usize, usize))>,
    keys: [(u64, u32); WAYS],
    /// The pages the last stack key was read from (read again together at the next one).
    pages: [usize; PAGES],
    /// The main thread's CPU time when its stack was last read, its thread state, and that
    /// stack's key (0: none). The same CPU time later means the thread has not run since: the
    /// same stack.
    last: (u64, usize, u64),
}

const EMPTY: Memo = Memo {
    fork_gen: 0,
    main: None,
    keys: [(0, 0); WAYS],
    pages: [0; PAGES],
    last: (0, 0, 0),
};

thread_local! {
    static MEMO: RefCell<Memo> = const { RefCell::new(EMPTY) };
}

fn with<R>(f: impl FnOnce(&mut Memo) -> Option<R>) -> Option<R> {
    MEMO.try_with(|m| {
        let mut m = m.try_borrow_mut().ok()?;
        let gen = FORK_GEN.load(Ordering::Relaxed);
        if m.fork_gen != gen {
            *m = Memo {
                fork_gen: gen,
                ..EMPTY
            };
        }
        f(&mut m)
    })
    .ok()
    .flatten()
}

fn way(key: u64) -> usize {
    (key >> 7) as usize % WAYS
}

/// What a look is for: a host function's wait (`blocked_thread`) or a stall another thread
/// makes while the main thread waits for it (`waited`); their sites differ.
#[derive(Clone, Copy)]
pub struct Use {
    /// The native site of the call looked from.
    pub native: u32,
    /// Told apart by this.
    pub salt: u64,
    /// The looking thread's own state (0: none): never the one looked at.
    pub me: usize,
}

/// The main thread's key for `u`, if the thread stayed off the CPU while it was read (`c0`:
/// its CPU time before). The stack is read once per stretch off the CPU: a second key at the
/// same CPU time (another host function or stall of this thread during the same sleep) reuses
/// it. Its pages are read with one system call when they are the last key's (`prefetch`).
fn key(py: &Python, m: &mut Remote, main: (usize, (usize, usize)), u: Use, c0: u64) -> Option<u64> {
    if main.0 == u.me {
        return None;
    }
    let known =
        with(|s| (s.last.2 != 0 && (s.last.0, s.last.1) == (c0, main.0)).then_some(s.last.2));
    let stack = match known {
        Some(stack) => stack,
        None => {
            m.reset();
            m.prefetch(&with(|s| Some(s.pages)).unwrap_or([0; PAGES]));
            waiter::stack_key(py, m, main.0, main.1)?
        }
    };
    // Not run since `c0` (a caller's `c0` may be older than now: `learn`'s is from before its
    // look), so the stack read, or known, at `c0` is the one it waits with.
    if cpu_of(crate::guard::pid())? != c0 {
        return None;
    }
    if known.is_none() {
        with(|s| {
            s.pages = m.pages();
            s.last = (c0, main.0, stack);
            Some(())
        });
    }
    Some(mix(mix(stack, u64::from(u.native)), u.salt) | 1)
}

/// The main thread waiting at a stack seen before, with that stack's site; `None` when it
/// is not known, not waiting, or ran while it was read.
pub fn quick(py: &Python, m: &mut Remote, u: Use) -> Option<Blocked> {
    let main = with(|m| m.main)?;
    let tid = crate::guard::pid();
    let c0 = cpu_of(tid)?;
    let key = key(py, m, main, u, c0)?;
    let site = with(|m| {
        let (k, site) = m.keys[way(key)];
        (k == key).then_some(site)
    })?;
    Some(Blocked { site, tid })
}

/// Keeps what a full look for `u` found (`found`, whose stack is `site`, the main thread's
/// CPU time `c0` read before that look began), if it was the main thread and it has not run
/// since.
pub fn learn(py: &Python, m: &mut Remote, u: Use, found: Found, site: u32, c0: Option<u64>) {
    let (true, Some(c0)) = (found.main, c0) else {
        return;
    };
    let main = (found.tstate, found.gil);
    let Some(key) = key(py, m, main, u, c0) else {
        return;
    };
    with(|m| {
        m.main = Some(main);
        m.keys[way(key)] = (key, site);
        Some(())
    });
}
