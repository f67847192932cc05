//! The library's budget for its own time: past it, detail is shed in a fixed order, every
//! total kept exact (the segment's `cost` part, ABI 1.9; docs/contracts.md says the rule).
//!
//! The cost compared is `live.overhead_ns`, the library's own time in the calls it records
//! (sampled: see `guard::overhead_weight`), over windows of about `WINDOW_NS` of wall time:
//! what it grew by in a window, against the budget's share of the window. One-time costs are
//! left out: the first window opens at the first recorded event (after the start-up: the
//! segment, CUPTI's loading), and a full stack unwind (a call site met for the first time, or
//! a thread's stack cache missed) counts apart (`outside`): a program's first steps unwind
//! each of its call sites once, which is not what it costs while it runs. Over the budget, one more level is shed (`cost::SHED_STACKS`, then `SHED_GAPS`, then
//! `SHED_RECORDS`), at most one a window, so that each level's effect is measured before the
//! next; under a quarter of the budget for `CALM_NS`, one level is taken back.
//!
//! The hot path pays one relaxed load and a compare per recorded event (`due`); the window
//! is closed by whichever thread first finds it due, the others go on.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use syncspy_abi::cost::{CostLive, SHED_NONE, SHED_RECORDS};
use syncspy_abi::SegmentWriter;

/// Length of a window.
pub const WINDOW_NS: u64 = 1_000_000_000;
/// How long the cost must stay under a quarter of the budget before a level is taken back.
pub const CALM_NS: u64 = 1_000_000_000;
/// The budget when `SYNCSPY_BUDGET` is not set: 1% of the wall time.
pub const DEFAULT_PPM: u32 = 10_000;

/// When the current window ends (0: no window yet).
static DUE_NS: AtomicU64 = AtomicU64::new(0);
/// Where the current window began: its time and `overhead_ns` then.
static START_NS: AtomicU64 = AtomicU64::new(0);
static START_OVERHEAD: AtomicU64 = AtomicU64::new(0);
/// Since when the cost has stayed under a quarter of the budget (0: it has not).
static CALM_SINCE_NS: AtomicU64 = AtomicU64::new(0);
/// The library's time the budget leaves out (in `overhead_ns` too, see `outside`); and its
/// value when the current window began.
static OUTSIDE_NS: AtomicU64 = AtomicU64::new(0);
static START_OUTSIDE: AtomicU64 = AtomicU64::new(0);

/// Counts `ns` of the library's time (already in `overhead_ns`) as outside the budget:
/// one-time costs (a full stack unwind, the start of GPU tracing, a slot's events made), work
/// hidden in a wait that followed it (`behind::before_wait`), and the looks at a waiting
/// thread's Python frames (`hostwait`), which have a budget of their own
/// (`python::waiter::Budget`): shedding stacks would end the host waits' counts, not only
/// their detail.
pub fn outside(ns: u64) {
    OUTSIDE_NS.fetch_add(ns, Relaxed);
}

/// Adds `ns` to the library's own time (`overhead_ns`) and counts it outside the budget
/// (`outside`).
pub fn own_outside(seg: &SegmentWriter, ns: u64) {
    seg.live().overhead_ns.fetch_add(ns, Relaxed);
    outside(ns);
}

/// `own_outside` for the host-wait machinery (`hostwait`: the queuing of a host function
/// behind the trampoline, the trampoline's looks, the watcher's CPU time), which the segment
/// also counts apart (`OwnLive::host_wait_ns`) so that readers can say what share it took.
pub fn own_host_wait(seg: &SegmentWriter, ns: u64) {
    own_outside(seg, ns);
    seg.own().host_wait_ns.fetch_add(ns, Relaxed);
}

/// Parses `SYNCSPY_BUDGET`: a percentage of the wall time (`1`, `0.5`, `2%`); `0` or `off`
/// for none. `None` for anything else.
pub fn parse_ppm(v: &str) -> Option<u32> {
    let v = v.trim();
    if v.eq_ignore_ascii_case("off") {
        return Some(0);
    }
    let pct: f64 = v.strip_suffix('%').unwrap_or(v).trim().parse().ok()?;
    (pct.is_finite() && (0.0..=100.0).contains(&pct)).then(|| (pct * 10_000.0).round() as u32)
}

/// What to shed now (a `cost::SHED_*` level).
#[inline(always)]
pub fn level(seg: &SegmentWriter) -> u32 {
    seg.cost().level.load(Relaxed)
}

/// After a recorded event at `now_ns`: closes the window when it is due.
#[inline(always)]
pub fn check(seg: &SegmentWriter, now_ns: u64) {
    let due = DUE_NS.load(Relaxed);
    if now_ns >= due {
        close(seg, now_ns, due);
    }
}

#[cold]
#[inline(never)]
fn close(seg: &SegmentWriter, now_ns: u64, due: u64) {
    // One thread closes a window; the others see the new due time.
    if DUE_NS
        .compare_exchange(due, now_ns + WINDOW_NS, Relaxed, Relaxed)
        .is_err()
    {
        return;
    }
    let overhead = seg.live().overhead_ns.load(Relaxed);
    let began = START_NS.swap(now_ns, Relaxed);
    let outside = OUTSIDE_NS.load(Relaxed);
    let spent = overhead
        .saturating_sub(START_OVERHEAD.swap(overhead, Relaxed))
        .saturating_sub(outside.saturating_sub(START_OUTSIDE.swap(outside, Relaxed)));
    let cost = seg.cost();
    let ppm = cost.budget_ppm.load(Relaxed);
    if due == 0 || began == 0 || ppm == 0 {
        // The first window opens now.
        return;
    }
    let allowed = u128::from(now_ns.saturating_sub(began)) * u128::from(ppm) / 1_000_000;
    decide(cost, now_ns, u128::from(spent), allowed);
}

/// The level after a window that cost `spent` ns of the library's time where the budget
/// allowed `allowed`.
fn decide(cost: &CostLive, now_ns: u64, spent: u128, allowed: u128) {
    let level = cost.level.load(Relaxed);
    if spent > allowed {
        CALM_SINCE_NS.store(0, Relaxed);
        if level < SHED_RECORDS {
            if level == SHED_NONE {
                cost.shed_since_ns.store(now_ns, Relaxed);
            }
            cost.level.store(level + 1, Relaxed);
            cost.raised.fetch_add(1, Relaxed);
        }
        return;
    }
    if spent.saturating_mul(4) >= allowed {
        CALM_SINCE_NS.store(0, Relaxed);
        return;
    }
    let calm = CALM_SINCE_NS.load(Relaxed);
    if calm == 0 {
        CALM_SINCE_NS.store(now_ns, Relaxed);
    } else if level > SHED_NONE && now_ns.saturating_sub(calm) >= CALM_NS {
        cost.level.store(level - 1, Relaxed);
        CALM_SINCE_NS.store(now_ns, Relaxed);
    }
}

/// Whether the current window leaves room for optional detail (the GPU idle behind each
/// sync, `behind`): the library's own time in it so far, one-time costs apart, is under three
/// quarters of a whole window's budget. Always with no budget or before the first window.
pub fn room(seg: &SegmentWriter) -> bool {
    let ppm = seg.cost().budget_ppm.load(Relaxed);
    if ppm == 0 || START_NS.load(Relaxed) == 0 {
        return true;
    }
    let spent = seg
        .live()
        .overhead_ns
        .load(Relaxed)
        .saturating_sub(START_OVERHEAD.load(Relaxed))
        .saturating_sub(
            OUTSIDE_NS
                .load(Relaxed)
                .saturating_sub(START_OUTSIDE.load(Relaxed)),
        );
    within(spent, ppm)
}

/// `room`'s rule: `spent` ns under three quarters of a window's share at `ppm`.
fn within(spent: u64, ppm: u32) -> bool {
    let window_budget = u128::from(WINDOW_NS) * u128::from(ppm) / 1_000_000;
    u128::from(spent) * 4 < window_budget * 3
}

/// A fork child starts its own windows (its segment is new).
pub fn reset() {
    DUE_NS.store(0, Relaxed);
    START_NS.store(0, Relaxed);
    START_OVERHEAD.store(0, Relaxed);
    CALM_SINCE_NS.store(0, Relaxed);
    OUTSIDE_NS.store(0, Relaxed);
    START_OUTSIDE.store(0, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncspy_abi::cost::{SHED_GAPS, SHED_STACKS};

    #[test]
    fn budgets_parse_as_percentages_and_off() {
        assert_eq!(parse_ppm("1"), Some(10_000));
        assert_eq!(parse_ppm("0.5%"), Some(5_000));
        assert_eq!(parse_ppm(" 2 % "), Some(20_000));
        assert_eq!(parse_ppm("off"), Some(0));
        assert_eq!(parse_ppm("0"), Some(0));
        assert_eq!(parse_ppm("-1"), None);
        assert_eq!(parse_ppm("200"), None);
        assert_eq!(parse_ppm("lots"), None);
    }

    #[test]
    fn optional_detail_has_room_under_three_quarters_of_a_windows_budget() {
        // 1% of a 1 s window: 10 ms; room below 7.5 ms.
        assert!(within(0, 10_000));
        assert!(within(7_499_999, 10_000));
        assert!(!within(7_500_000, 10_000));
        assert!(!within(50_000_000, 10_000));
        // A larger budget leaves more.
        assert!(within(7_500_000, 20_000));
    }

    #[test]
    fn over_budget_sheds_one_level_a_window_and_a_calm_second_takes_one_back() {
        let cost = CostLive::default();
        let ms = 1_000_000u64;
        // 2 ms against 1 ms allowed: over, three windows in a row.
        for (i, want) in [SHED_STACKS, SHED_GAPS, SHED_RECORDS, SHED_RECORDS]
            .into_iter()
            .enumerate()
        {
            decide(&cost, (i as u64 + 1) * 100 * ms, 2 * ms as u128, ms as u128);
            assert_eq!(cost.level.load(Relaxed), want);
        }
        assert_eq!(cost.raised.load(Relaxed), 3);
        assert_eq!(cost.shed_since_ns.load(Relaxed), 100 * ms);
        // Between a quarter and all of the budget: stays.
        decide(&cost, 600 * ms, (ms / 2) as u128, ms as u128);
        assert_eq!(cost.level.load(Relaxed), SHED_RECORDS);
        // Under a quarter: calm from 700 ms; a level back once a second has passed.
        for t in [700, 1000, 1600] {
            decide(&cost, t * ms, (ms / 10) as u128, ms as u128);
            assert_eq!(cost.level.load(Relaxed), SHED_RECORDS, "{t}");
        }
        decide(&cost, 1700 * ms, (ms / 10) as u128, ms as u128);
        assert_eq!(cost.level.load(Relaxed), SHED_GAPS);
        decide(&cost, 2700 * ms, (ms / 10) as u128, ms as u128);
        assert_eq!(cost.level.load(Relaxed), SHED_STACKS);
        // Over again: up at once.
        decide(&cost, 2800 * ms, 3 * ms as u128, ms as u128);
        assert_eq!(cost.level.load(Relaxed), SHED_GAPS);
        assert_eq!(cost.raised.load(Relaxed), 4);
    }
}
