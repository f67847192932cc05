//! The hook entry: the one path every hooked call takes (`hook`, and its forms for queries,
//! `hook_query`, and for host functions, `hook_host_func`). It asks for the runtime (`enter`),
//! keeps errno, guards re-entry, times the real call, and hands a stall to `record`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use syncspy_abi::record::FLAG_PER_THREAD;
use syncspy_abi::{Api, Direction};

use crate::call::{Call, NOT_READY};
use crate::clock::now_ns;
use crate::device::current_device;
use crate::errno::{errno, set_errno};
use crate::guard::Reentry;
use crate::init::active;
use crate::record::{self, poll};
use crate::state::{disable, Runtime, INITIALIZING, MISSED, STATE};

/// What every hook does first: the runtime, when recording and not re-entered from the
/// library's own work; `None` tells the hook to forward the call, with errno as it came.
/// A call made while the library initialises is counted as missed.
#[inline(always)]
pub(crate) fn enter(errno_in: i32) -> Option<(&'static Runtime, Reentry)> {
    let Some(rt) = active() else {
        if STATE.load(Ordering::Relaxed) == INITIALIZING {
            MISSED.fetch_add(1, Ordering::Relaxed);
        }
        set_errno(errno_in);
        return None;
    };
    Some((rt, Reentry::enter()?))
}

/// The one path every hook takes. `describe` classifies the call (only when recording);
/// `real` performs it. Non-stalling calls are counted and forwarded untimed; stalls are
/// timed and recorded. Panics in the library's own work disable recording and never reach
/// the application; errno is preserved across the library's work.
#[inline(always)]
pub fn hook(describe: impl FnOnce() -> Call, real: impl FnOnce() -> u32) -> u32 {
    // The library's own work (initialisation, pointer queries) must not leave errno changed.
    let errno_in = errno();
    let Some((rt, _reentry)) = enter(errno_in) else {
        return real();
    };
    let described = catch_unwind(AssertUnwindSafe(describe));
    set_errno(errno_in);
    let Ok(call) = described else {
        disable();
        return real();
    };
    if queues_work(&call) {
        crate::behind::work_queued(call.stream, call.flags & FLAG_PER_THREAD != 0);
    }
    let Some(kind) = call.kind else {
        rt.count(&call);
        let result = real();
        first_return();
        return result;
    };
    let (open, before_ns) = crate::behind::before_wait(rt, kind, &call);
    let t0 = now_ns();
    // With a polling run open, the thread's counters as the stall starts (`end_poll_run`).
    let before = poll::open().then(poll::Counters::now);
    let mark = crate::hostwait::stalls::enter();
    let result = real();
    drop(mark);
    let t1 = now_ns();
    first_return();
    if before_ns > 0 && t1.saturating_sub(t0) > before_ns {
        // The GPU was still busy: the host would have waited through the measurement's work.
        crate::shed::outside(before_ns);
    }
    let errno_out = errno();
    let recorded = catch_unwind(AssertUnwindSafe(|| {
        // A wait of its own ends this thread's polling run, if one is open: its time is
        // the run's up to here, not this stall's too.
        if let Some(c) = before {
            record::end_poll_run(rt, t0, c);
        }
        let site = record::emit(rt, kind, &call, t0, t1, result, 0);
        crate::behind::after_wait(rt, open, kind, &call, t0, site, result);
    }));
    if recorded.is_err() {
        disable();
    }
    set_errno(errno_out);
    result
}

/// Whether a call queues work on the GPU (a copy of any kind, a memset): it ends the thread's
/// measurement of the GPU idle behind its last stall (`behind`).
#[inline(always)]
fn queues_work(call: &Call) -> bool {
    call.direction != Direction::None || matches!(call.api, Api::CudaMemset | Api::CudaMemsetPtds)
}

/// The path of the query hooks (`cudaStreamQuery`, `cudaEventQuery` and their driver forms).
/// A query never waits: it is counted as a call that did not stall, like any. A run of
/// queries of one stream or event on one thread that return not-ready, up to the query of
/// that object that returns anything else, is one `poll_wait` (see `poll`). The usual query
/// (ready, no run open on the thread) costs one more branch and a thread-local read than
/// a counted call.
#[inline(always)]
pub fn hook_query(api: Api, object: u64, flags: u8, real: impl FnOnce() -> u32) -> u32 {
    let errno_in = errno();
    let Some((rt, _reentry)) = enter(errno_in) else {
        return real();
    };
    set_errno(errno_in);
    rt.seg.live().calls[api as usize].add_untimed(0);
    // While a run is open, what happens inside every query counts as asking (`poll::ASKING`).
    let entered = poll::open().then(|| (now_ns(), poll::thread_vcsw()));
    let result = real();
    first_return();
    if result == NOT_READY || entered.is_some() {
        let errno_out = errno();
        if catch_unwind(AssertUnwindSafe(|| {
            record::poll_step(rt, api, object, flags, result, entered)
        }))
        .is_err()
        {
            disable();
        }
        set_errno(errno_out);
    }
    result
}

/// The path of `cuLaunchHostFunc`: counted as a call that does not wait; while Python frames
/// are attributed, the program's host function is queued behind the library's trampoline,
/// which records the `host_wait` it ends (`hostwait`). `real` queues the function and
/// argument it is given.
#[inline(always)]
pub fn hook_host_func(
    api: Api,
    stream: u64,
    flags: u8,
    func: usize,
    data: usize,
    real: impl FnOnce(usize, usize) -> u32,
) -> u32 {
    let errno_in = errno();
    let Some((rt, _reentry)) = enter(errno_in) else {
        return real(func, data);
    };
    rt.seg.live().calls[api as usize].add_untimed(0);
    let wrapped = catch_unwind(AssertUnwindSafe(|| {
        crate::hostwait::queue(
            rt,
            crate::hostwait::Queued {
                stream,
                flags,
                device: current_device(),
                func,
                data,
            },
        )
    }))
    .ok()
    .flatten();
    set_errno(errno_in);
    let result = match wrapped {
        Some((trampoline, slot)) => {
            let r = real(trampoline, slot);
            if r != 0 {
                crate::hostwait::unqueue(slot);
            }
            r
        }
        None => real(func, data),
    };
    first_return();
    result
}

/// Set once a hooked call of this process has returned from the real function.
static RETURNED: AtomicBool = AtomicBool::new(false);

/// After the real function: the first time, the CUDA runtime has initialised (and registered
/// its teardown at exit), so the GPU part's exit barrier is registered now, to run before it.
#[inline]
fn first_return() {
    if !RETURNED.load(Ordering::Relaxed) {
        first_return_slow();
    }
}

#[cold]
fn first_return_slow() {
    if !RETURNED.swap(true, Ordering::AcqRel) {
        let e = errno();
        let _ = catch_unwind(crate::gpu::register_exit_quiesce);
        set_errno(e);
    }
}
