//! What a stall becomes: its call site (the stack, the Python frames), the record in the ring
//! (or the totals alone when detail is shed), the library's own cost; and a thread's polling
//! run of not-ready queries, which becomes one `poll_wait`.

use std::sync::atomic::Ordering;

use syncspy_abi::cost::SHED_STACKS;
use syncspy_abi::record::NO_SITE;
use syncspy_abi::{Api, Kind, Record};

use crate::call::{Call, NOT_READY};
use crate::clock::now_ns;
use crate::device::current_device;
use crate::stack;
use crate::state::Runtime;

/// Writes one stall event: call site, device, record, totals, overhead.
#[inline(never)]
pub(crate) fn emit(
    rt: &Runtime,
    kind: Kind,
    call: &Call,
    t0: u64,
    t1: u64,
    result: u32,
    polls: u32,
) -> u32 {
    let duration = t1.saturating_sub(t0);
    let weight = crate::guard::overhead_weight();
    let shed = crate::shed::level(&rt.seg);
    let stacks = rt.cfg.stacks && duration >= rt.cfg.stack_min_ns;
    let (site, truncated, unwound) = if stacks && shed < SHED_STACKS {
        stack::capture_site(rt, weight)
    } else {
        if stacks {
            rt.seg.cost().stacks_shed.fetch_add(1, Ordering::Relaxed);
        }
        (NO_SITE, false, false)
    };
    // Two Python lines over one native stack are two sites.
    let site = if rt.cfg.python && shed < SHED_STACKS {
        crate::python::site(rt, site)
    } else {
        site
    };
    let rec = Record {
        kind,
        api: call.api,
        direction: call.direction,
        flags: call.flags
            | if truncated {
                syncspy_abi::record::FLAG_STACK_TRUNCATED
            } else {
                0
            },
        device: current_device(),
        start_ns: t0,
        duration_ns: duration,
        bytes: call.bytes,
        stream: call.stream,
        tid: crate::guard::tid(),
        site,
        result,
        polls,
    };
    rt.write(&rec, shed);
    // Sampled (see `guard::overhead_weight`): a third clock read on every event would
    // be a fifth of its cost. An unwind's cost is always timed, once.
    if let Some(w) = if unwound { Some(1) } else { weight } {
        let ns = now_ns().saturating_sub(t1).saturating_mul(w);
        rt.seg.live().overhead_ns.fetch_add(ns, Ordering::Relaxed);
        if unwound {
            crate::shed::outside(ns);
        }
    }
    crate::shed::check(&rt.seg, t1);
    site
}

/// This thread's polling run (`hook_query`): at most one open at a time.
pub(crate) mod poll {
    use std::cell::Cell;
    use syncspy_abi::Api;

    /// Time outside the queries between two answers of a run: more than this, asleep, and the
    /// thread was checking between them, not waiting (`slept`). NCCL's watchdog sleeps 100 ms
    /// between two `cudaEventQuery`s, a heartbeat or progress bar longer. A spinning loop asks
    /// again within microseconds; a Python loop that loses the GIL to another thread between
    /// two asks, within one switch interval (5 ms).
    pub const MAX_GAP_NS: u64 = 10_000_000;
    /// A run whose time outside the queries is at most this was back to back, whatever the
    /// thread did between them (`spun`).
    pub const SHORT_AWAY_NS: u64 = 2_000_000;

    pub use crate::clock::thread_cpu_ns;

    /// This thread's voluntary context switches (it blocked: a sleep, a condition variable, a
    /// lock), 0 if unreadable. A thread only preempted (a spinner on a loaded machine) makes
    /// none.
    pub fn thread_vcsw() -> u64 {
        // SAFETY: `rusage` is plain data; zeroed is a valid value to be overwritten.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid, writable rusage for the call's duration.
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
            return 0;
        }
        ru.ru_nvcsw as u64
    }

    /// The thread's clocks at one moment.
    #[derive(Clone, Copy, Default)]
    pub struct Counters {
        pub cpu_ns: u64,
        pub vcsw: u64,
        /// `ASKING` and `ASKING_VCSW` then.
        pub asking_ns: u64,
        pub asking_vcsw: u64,
    }

    impl Counters {
        pub fn now() -> Counters {
            Counters {
                cpu_ns: thread_cpu_ns(),
                vcsw: thread_vcsw(),
                asking_ns: ASKING.try_with(Cell::get).unwrap_or(0),
                asking_vcsw: ASKING_VCSW.try_with(Cell::get).unwrap_or(0),
            }
        }
    }

    /// What the thread did away from the queries, between two moments.
    #[derive(Clone, Copy, Default)]
    pub struct Away {
        pub ns: u64,
        pub cpu_ns: u64,
        /// Voluntary switches outside the queries: the thread blocked on something else.
        pub vcsw: u64,
    }

    impl Away {
        pub fn add(self, o: Away) -> Away {
            Away {
                ns: self.ns.saturating_add(o.ns),
                cpu_ns: self.cpu_ns.saturating_add(o.cpu_ns),
                vcsw: self.vcsw.saturating_add(o.vcsw),
            }
        }
    }

    #[derive(Clone, Copy)]
    pub struct Run {
        /// When the run's first query returned not-ready (`now_ns`); 0: no run open.
        pub start_ns: u64,
        /// When its latest not-ready query returned, and the thread's counters then.
        pub last_ns: u64,
        pub last: Counters,
        /// Since the run opened, up to its latest answer.
        pub away: Away,
        /// The stream or event queried.
        pub object: u64,
        /// Not-ready queries so far.
        pub polls: u32,
        pub api: Api,
        pub flags: u8,
    }

    pub const NONE: Run = Run {
        start_ns: 0,
        last_ns: 0,
        last: Counters {
            cpu_ns: 0,
            vcsw: 0,
            asking_ns: 0,
            asking_vcsw: 0,
        },
        away: Away {
            ns: 0,
            cpu_ns: 0,
            vcsw: 0,
        },
        object: 0,
        polls: 0,
        api: Api::CudaStreamQuery,
        flags: 0,
    };

    thread_local! {
        pub static RUN: Cell<Run> = const { Cell::new(NONE) };
        /// Time this thread spent inside query calls made while a run was open (any object),
        /// and its voluntary switches there: asking, wherever the driver kept it (a query may
        /// wait on a lock).
        pub static ASKING: Cell<u64> = const { Cell::new(0) };
        pub static ASKING_VCSW: Cell<u64> = const { Cell::new(0) };
    }

    /// Whether a run is open on this thread (false during thread teardown).
    #[inline(always)]
    pub fn open() -> bool {
        RUN.try_with(|c| c.get().start_ns != 0).unwrap_or(false)
    }

    /// Since `run`'s latest answer, up to `end_ns` with the thread's counters `now`.
    pub fn away_since(run: &Run, end_ns: u64, now: &Counters) -> Away {
        let wall = end_ns.saturating_sub(run.last_ns);
        let inside = now.asking_ns.saturating_sub(run.last.asking_ns);
        let vcsw = now.vcsw.saturating_sub(run.last.vcsw);
        let inside_vcsw = now.asking_vcsw.saturating_sub(run.last.asking_vcsw);
        Away {
            ns: wall.saturating_sub(inside),
            cpu_ns: now.cpu_ns.saturating_sub(run.last.cpu_ns),
            vcsw: vcsw.saturating_sub(inside_vcsw),
        }
    }

    /// Whether the thread went to sleep: it blocked outside the queries and spent less than an
    /// eighth of its time away on the CPU. A spinner that was only preempted (a loaded
    /// machine) blocked nowhere; one that loses the GIL blocks but stays on the CPU for more.
    fn asleep(a: &Away) -> bool {
        a.vcsw > 0 && a.cpu_ns < a.ns / 8
    }

    /// Whether the thread slept between two answers: more than `MAX_GAP_NS` away, asleep.
    pub fn slept(a: &Away) -> bool {
        a.ns > MAX_GAP_NS && asleep(a)
    }

    /// Whether the thread kept asking over the whole run: it was away only briefly, or was
    /// not asleep while away. A thread that asks at each wake-up of a condition variable
    /// (NCCL's watchdog is also woken by each new collective, so its checks may come a few
    /// milliseconds apart) sleeps through nearly all of it.
    pub fn spun(run: &Run) -> bool {
        run.away.ns <= SHORT_AWAY_NS || !asleep(&run.away)
    }
}

/// A query returned not-ready, or one returned while this thread has a run open
/// (`entered`: when that query was entered and the thread's voluntary switches then;
/// `None` if no run was open then).
///
/// Rules: the first not-ready query opens a run on its object (stream or event, under its
/// API), timed from its return. Further not-ready queries of that object are its polls.
/// The next query of that object that returns anything else (ready, or an error) ends it
/// and is recorded as one `poll_wait` from the run's start to that return, with the
/// number of not-ready polls and that query's result. Queries of other objects meanwhile
/// neither join nor end it (a loop over several streams waits for all of them: the run
/// is the wait for the first one found pending; the next not-ready one opens the next
/// run), and calls that did not stall do not end it. A stall recorded meanwhile on the
/// thread ends it at that stall's start (`end_poll_run`). A run still open when its thread
/// or process ends is not recorded.
///
/// Only a thread that keeps asking waits. What happens inside any query call counts as
/// asking; the rest is the thread's time away. When it slept since the run's latest
/// not-ready answer (`poll::slept`: more than 10 ms away, blocked outside the queries and
/// nearly all of it off the CPU, like NCCL's watchdog between two `cudaEventQuery`s), it
/// was checking: the run ends at that answer, recorded only if it had at least two and
/// spun; this query starts afresh (a new run if it is not-ready, nothing otherwise). A
/// run over which the thread was away asleep for most of more than 2 ms (`poll::spun`:
/// checks at each wake-up of a condition variable, a few milliseconds apart) is no wait
/// either, however it ends.
#[cold]
#[inline(never)]
pub(crate) fn poll_step(
    rt: &Runtime,
    api: Api,
    object: u64,
    flags: u8,
    result: u32,
    entered: Option<(u64, u64)>,
) {
    let Ok(run) = poll::RUN.try_with(std::cell::Cell::get) else {
        return;
    };
    let now = now_ns().max(1);
    let vcsw = poll::thread_vcsw();
    if let Some((entered_ns, entered_vcsw)) = entered {
        let _ = poll::ASKING.try_with(|a| a.set(a.get() + now.saturating_sub(entered_ns)));
        let _ = poll::ASKING_VCSW.try_with(|a| a.set(a.get() + vcsw.saturating_sub(entered_vcsw)));
    }
    let counters = poll::Counters {
        cpu_ns: poll::thread_cpu_ns(),
        vcsw,
        asking_ns: poll::ASKING.try_with(std::cell::Cell::get).unwrap_or(0),
        asking_vcsw: poll::ASKING_VCSW
            .try_with(std::cell::Cell::get)
            .unwrap_or(0),
    };
    let open = poll::Run {
        start_ns: now,
        last_ns: now,
        last: counters,
        polls: 1,
        object,
        api,
        flags,
        ..poll::NONE
    };
    if run.start_ns == 0 {
        // Only a not-ready result gets here without an open run.
        poll::RUN.set(open);
        return;
    }
    if run.api != api || run.object != object {
        return;
    }
    let away = poll::away_since(&run, now, &counters);
    if poll::slept(&away) {
        poll::RUN.set(if result == NOT_READY {
            open
        } else {
            poll::NONE
        });
        emit_given_up(rt, run);
        return;
    }
    let run = poll::Run {
        away: run.away.add(away),
        ..run
    };
    if result == NOT_READY {
        poll::RUN.set(poll::Run {
            polls: run.polls.saturating_add(1),
            last_ns: now,
            last: counters,
            ..run
        });
        return;
    }
    poll::RUN.set(poll::NONE);
    if poll::spun(&run) {
        emit_poll(rt, run, now, result);
    }
}

/// Ends this thread's open polling run at `end_ns` (a stall's start, when the thread's
/// counters were `at`), as a `poll_wait` that did not see the work done (result
/// not-ready); a run whose thread slept since its latest answer (`poll::slept`) ends at
/// that answer instead, and one that did not keep asking (`poll::spun`) is not recorded.
#[cold]
#[inline(never)]
pub(crate) fn end_poll_run(rt: &Runtime, end_ns: u64, at: poll::Counters) {
    let Ok(run) = poll::RUN.try_with(|c| c.replace(poll::NONE)) else {
        return;
    };
    if run.start_ns == 0 {
        return;
    }
    let away = poll::away_since(&run, end_ns, &at);
    if poll::slept(&away) {
        emit_given_up(rt, run);
        return;
    }
    let run = poll::Run {
        away: run.away.add(away),
        ..run
    };
    if poll::spun(&run) {
        emit_poll(rt, run, end_ns.max(run.start_ns), NOT_READY);
    }
}

/// A run its thread stopped asking in: a `poll_wait` up to its latest not-ready answer
/// when it had several and spun between them (a spin that gave up), nothing for checks.
fn emit_given_up(rt: &Runtime, run: poll::Run) {
    if run.polls >= 2 && poll::spun(&run) {
        emit_poll(rt, run, run.last_ns, NOT_READY);
    }
}

fn emit_poll(rt: &Runtime, run: poll::Run, end_ns: u64, result: u32) {
    let is_stream = matches!(
        run.api,
        Api::CudaStreamQuery | Api::CudaStreamQueryPtsz | Api::CuStreamQuery
    );
    let call = Call {
        stream: if is_stream { run.object } else { 0 },
        flags: run.flags,
        ..Call::new(Kind::PollWait, run.api)
    };
    emit(
        rt,
        Kind::PollWait,
        &call,
        run.start_ns,
        end_ns,
        result,
        run.polls,
    );
}
