//! Evaluating a budget against a report: one result per rule and process.
//!
//! Where the numbers come from:
//! - A rule without `site`/`allow_sites` uses the exact per-kind totals of the segment header
//!   (`kinds` in the report): count, time and bytes are exact whatever the reader missed.
//! - A rule with site patterns must look at call sites, which come from the records the
//!   reader received. Events it did not receive (`lost_records`) and events without a call
//!   stack (`SYNCSPY_STACKS=0`, `SYNCSPY_STACK_MIN_NS`, a full call-site table) might or might
//!   not match, so the measured value is an interval: at least the matching events seen, at
//!   most those plus every unattributed event of the rule's kinds. The check fails safe: a
//!   limit below the least value is a violation; a limit inside the interval cannot be
//!   decided and the rule is "not evaluated" (exit 2 when nothing else failed).
//! - `max_gpu_idle_share` (and limits on `gpu_idle` events alone) need GPU idle time, which is
//!   not measured yet: they are "not measured" and skipped, which does not change the exit
//!   code; the summary and JUnit (`<skipped>`) say so.
//! - Per-iteration limits divide by the number of iteration-marking events of the process
//!   (`[iterations]`): an average over the run. A process with no marking event is measured
//!   as one iteration, so a per-iteration limit is never looser than the whole-run amount.

use syncspy_abi::Kind;

use super::file::{Budget, Iterations, Limit, Measure, Rule};
use crate::summary::{fmt_bytes, fmt_ns, user_frames};
use syncspy_read::plural;
use syncspy_read::report::{ProcessReport, Report, Site};
pub use syncspy_read::verdict::{
    BudgetReport, CheckStatus, IterationCount, LimitResult, Outcome, RuleResult, SiteHit,
};

/// Sites listed per result.
pub const RESULT_SITES: usize = 5;

/// An interval `lo..=hi` in which a measured quantity lies.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Span {
    lo: f64,
    hi: f64,
}

impl Span {
    fn exact(v: f64) -> Span {
        Span { lo: v, hi: v }
    }
    fn add(&mut self, lo: f64, hi: f64) {
        self.lo += lo;
        self.hi += hi;
    }
    fn is_exact(&self) -> bool {
        self.lo == self.hi
    }
}

/// The events of a process that a rule (or the iteration marker) selects.
#[derive(Default)]
struct Selection<'a> {
    count: Span,
    total_ns: Span,
    bytes: Span,
    /// Sites whose events certainly count.
    hits: Vec<&'a Site>,
    /// Events of the rule's kinds the reader never received.
    unseen: u64,
    /// Events at sites without a captured stack.
    frameless: u64,
}

#[derive(PartialEq)]
enum Match {
    Yes,
    No,
    Unknown,
}

/// Whether a pattern names the site: a substring of one of its frames, or a Python frame
/// named as `FILE:FUNCTION` / `FILE:LINE` (`train.py:train_step`, `train.py:142`).
fn any_frame_contains(s: &Site, patterns: &[String]) -> bool {
    patterns.iter().any(|p| {
        s.frames.iter().any(|f| f.contains(p.as_str())) || s.python.iter().any(|f| f.matches(p))
    })
}

fn site_match(s: &Site, sites: &[String], allow: &[String]) -> Match {
    if s.frames.is_empty() {
        return if sites.is_empty() && allow.is_empty() {
            Match::Yes
        } else {
            Match::Unknown
        };
    }
    let selected = sites.is_empty() || any_frame_contains(s, sites);
    if selected && !any_frame_contains(s, allow) {
        Match::Yes
    } else {
        Match::No
    }
}

/// The kinds a rule counts: its own, or every host-stall kind.
fn rule_kinds(kinds: &[Kind]) -> Vec<Kind> {
    if kinds.is_empty() {
        Kind::ALL
            .iter()
            .copied()
            .filter(|k| k.is_host_stall())
            .collect()
    } else {
        kinds.to_vec()
    }
}

fn select<'a>(
    p: &'a ProcessReport,
    kinds: &[Kind],
    sites: &[String],
    allow: &[String],
) -> Selection<'a> {
    let kinds = rule_kinds(kinds);
    let mut sel = Selection::default();
    let of_kinds = || {
        p.sites
            .iter()
            .filter(|s| s.kind.known().is_some_and(|k| kinds.contains(&k)))
    };
    if sites.is_empty() && allow.is_empty() {
        // Exact header totals.
        for n in &kinds {
            if let Some(k) = p.kinds.get(n.name()) {
                let (c, t, b) = (k.count as f64, k.total_ns as f64, k.bytes as f64);
                sel.count.add(c, c);
                sel.total_ns.add(t, t);
                sel.bytes.add(b, b);
            }
        }
        sel.hits = of_kinds().collect();
        return sel;
    }
    for s in of_kinds() {
        let (c, t, b) = (s.count as f64, s.total_ns as f64, s.bytes as f64);
        match site_match(s, sites, allow) {
            Match::Yes => {
                sel.count.add(c, c);
                sel.total_ns.add(t, t);
                sel.bytes.add(b, b);
                sel.hits.push(s);
            }
            Match::Unknown => {
                sel.count.add(0.0, c);
                sel.total_ns.add(0.0, t);
                sel.bytes.add(0.0, b);
                sel.frameless = sel.frameless.saturating_add(s.count);
            }
            Match::No => {}
        }
    }
    // What the header counted beyond the records received: could be anywhere.
    for n in &kinds {
        let Some(k) = p.kinds.get(n.name()) else {
            continue;
        };
        let seen = p.sites.iter().filter(|s| s.kind == *n);
        let (mut c, mut t, mut b) = (0u64, 0u64, 0u64);
        for s in seen {
            c = c.saturating_add(s.count);
            t = t.saturating_add(s.total_ns);
            b = b.saturating_add(s.bytes);
        }
        let unseen = k.count.saturating_sub(c);
        sel.unseen = sel.unseen.saturating_add(unseen);
        sel.count.add(0.0, unseen as f64);
        sel.total_ns.add(0.0, k.total_ns.saturating_sub(t) as f64);
        sel.bytes.add(0.0, k.bytes.saturating_sub(b) as f64);
    }
    sel
}

fn fmt_count(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// A value of `measure` for people.
pub fn fmt_measure(measure: Measure, v: f64) -> String {
    match measure {
        Measure::Count => fmt_count(v),
        Measure::TotalNs => fmt_ns(v.round().max(0.0) as u64),
        Measure::Bytes => {
            if v.fract() == 0.0 {
                fmt_bytes(v as u64)
            } else {
                format!("{v:.1} B")
            }
        }
        Measure::StallShare | Measure::GpuIdleShare => format!("{:.2}%", v * 100.0),
    }
}

/// What the value counts, agreeing with it (`1 event`, `3 events`, `1.50 events`).
fn noun(measure: Measure, v: f64) -> &'static str {
    match measure {
        Measure::Count => plural::word(v, "event", "events"),
        Measure::TotalNs => "stalled",
        Measure::Bytes => "moved",
        Measure::StallShare => "of wall time stalled",
        Measure::GpuIdleShare => "of its active time GPU idle",
    }
}

fn judge(limit: &Limit, v: Span) -> LimitResult {
    let per = if limit.per_iteration {
        " per iteration"
    } else {
        ""
    };
    let max_text = fmt_measure(limit.measure, limit.max);
    let (status, message) = if v.lo > limit.max {
        let at_least = if v.is_exact() { "" } else { "at least " };
        (
            CheckStatus::Fail,
            format!(
                "{at_least}{} {}{per} > {} {max_text}",
                fmt_measure(limit.measure, v.lo),
                noun(limit.measure, v.lo),
                limit.key
            ),
        )
    } else if v.hi > limit.max {
        (
            CheckStatus::NotEvaluated,
            format!(
                "between {} and {} {}{per}: cannot tell against {} {max_text}",
                fmt_measure(limit.measure, v.lo),
                fmt_measure(limit.measure, v.hi),
                noun(limit.measure, v.hi),
                limit.key
            ),
        )
    } else {
        let up_to = if v.is_exact() { "" } else { "at most " };
        (
            CheckStatus::Pass,
            format!(
                "{up_to}{} {}{per} <= {} {max_text}",
                fmt_measure(limit.measure, v.hi),
                noun(limit.measure, v.hi),
                limit.key
            ),
        )
    };
    LimitResult {
        key: limit.key.to_string(),
        max: limit.max,
        value: v.lo,
        value_max: (!v.is_exact()).then_some(v.hi),
        status,
        message,
    }
}

fn not_measured(limit: &Limit, why: &str) -> LimitResult {
    LimitResult {
        key: limit.key.to_string(),
        max: limit.max,
        value: 0.0,
        value_max: None,
        status: CheckStatus::NotMeasured,
        message: format!("{} not measured: {why}", limit.key),
    }
}

const GPU_IDLE_NOT_MEASURED: &str = "GPU idle time was not measured for this process \
     (SYNCSPY_GPU_IDLE=off, no CUPTI, no GPU work, or another tool held the activity source; \
     skipped: does not change the exit code)";

fn site_hit(s: &Site) -> SiteHit {
    SiteHit {
        kind: s.kind.clone(),
        api: s.api.clone(),
        count: s.count,
        total_ns: s.total_ns,
        bytes: s.bytes,
        frames: user_frames(s).into_iter().map(str::to_string).collect(),
    }
}

fn iteration_count(p: &ProcessReport, it: &Iterations) -> Span {
    select(p, &it.kinds, &it.sites, &[]).count
}

/// The rule's site patterns (of `site`, then `allow_sites`) that match no call site of the
/// process, whatever its kind: most likely a typo, which would silently turn a gate off.
/// None when some site has no stack (a pattern might match what was not captured).
fn unmatched_patterns<'a>(rule: &'a Rule, p: &ProcessReport) -> Vec<&'a str> {
    if p.sites.iter().any(|s| s.frames.is_empty()) && p.sites.iter().any(|s| s.count > 0) {
        return Vec::new();
    }
    rule.sites
        .iter()
        .chain(&rule.allow_sites)
        .filter(|pat| {
            !p.sites
                .iter()
                .any(|s| any_frame_contains(s, std::slice::from_ref(*pat)))
        })
        .map(String::as_str)
        .collect()
}

fn eval_process(rule: &Rule, iterations: Option<&Iterations>, p: &ProcessReport) -> RuleResult {
    let sel = select(p, &rule.kinds, &rule.sites, &rule.allow_sites);
    let mut notes = Vec::new();
    let unmatched = unmatched_patterns(rule, p);
    if !unmatched.is_empty() {
        notes.push(unmatched_note(rule, &unmatched));
    }
    let gpu_only = !rule.kinds.is_empty() && rule.kinds.iter().all(|k| *k == Kind::GpuIdle);
    if !p.gpu.measured && rule.kinds.contains(&Kind::GpuIdle) && !gpu_only {
        notes.push("gpu_idle events were not measured: counted as none".to_string());
    }
    let iters = iterations.map(|it| iteration_count(p, it));
    let limits: Vec<LimitResult> = rule
        .limits
        .iter()
        .map(|limit| judge_limit(limit, p, &sel, iters, gpu_only))
        .collect();
    let mut status = limits
        .iter()
        .map(|l| l.status)
        .max()
        .unwrap_or(CheckStatus::Pass);
    if rule.require_match && !unmatched.is_empty() {
        status = CheckStatus::Fail;
    }
    if limits
        .iter()
        .any(|l| l.status == CheckStatus::NotEvaluated && l.value_max.is_some())
    {
        notes.push(sites_missing_note(&sel, p));
    }
    let per_iteration = rule.limits.iter().any(|l| l.per_iteration);
    let iterations = iters.filter(|_| per_iteration).map(|s| IterationCount {
        count: s.lo as u64,
        count_max: (!s.is_exact()).then_some(s.hi as u64),
    });
    if iterations.as_ref().is_some_and(|i| i.count == 0) {
        notes.push(
            "no iteration-marking event in this process: per-iteration limits compare the \
             whole run"
                .to_string(),
        );
    }
    RuleResult {
        rule: rule.name.clone(),
        line: rule.line,
        pid: Some(p.pid),
        cmdline: p.cmdline.clone(),
        status,
        limits,
        iterations,
        // Nothing of the selection was judged when every limit was not measured.
        sites: if status == CheckStatus::NotMeasured {
            Vec::new()
        } else {
            sel.hits
                .iter()
                .take(RESULT_SITES)
                .map(|s| site_hit(s))
                .collect()
        },
        notes,
    }
}

/// The note of a rule whose site patterns matched nothing (`unmatched`).
fn unmatched_note(rule: &Rule, unmatched: &[&str]) -> String {
    let list: Vec<String> = unmatched.iter().map(|u| format!("`{u}`")).collect();
    format!(
        "matched nothing: no call site of this process contains {}; check the pattern{}",
        list.join(", "),
        if rule.require_match {
            " (require_match: the rule fails)"
        } else {
            " (require_match = true makes this a failure)"
        }
    )
}

/// One limit of a rule judged on a process: its selection `sel`, per iteration by `iters`
/// where the limit asks; not measured where the GPU was not, not evaluated without a wall
/// time for a share.
fn judge_limit(
    limit: &Limit,
    p: &ProcessReport,
    sel: &Selection<'_>,
    iters: Option<Span>,
    gpu_only: bool,
) -> LimitResult {
    match limit.measure {
        Measure::GpuIdleShare if !p.gpu.measured => not_measured(limit, GPU_IDLE_NOT_MEASURED),
        _ if gpu_only && !p.gpu.measured => not_measured(limit, GPU_IDLE_NOT_MEASURED),
        Measure::StallShare | Measure::GpuIdleShare if p.wall_ns == 0 => {
            let mut r = judge(
                limit,
                Span {
                    lo: 0.0,
                    hi: f64::INFINITY,
                },
            );
            r.status = CheckStatus::NotEvaluated;
            r.message = format!("{}: the process's wall time is unknown", limit.key);
            r
        }
        m => {
            let wall = p.wall_ns as f64;
            let mut v = match m {
                Measure::Count => sel.count,
                Measure::TotalNs => sel.total_ns,
                Measure::Bytes => sel.bytes,
                Measure::StallShare => Span {
                    lo: sel.total_ns.lo / wall,
                    hi: sel.total_ns.hi / wall,
                },
                // The share of its active time (first work to last) the GPU ran
                // nothing; a report from before that figure, of its traced time; one
                // without busy time has only its gaps, over the wall time.
                Measure::GpuIdleShare => Span::exact(
                    p.gpu
                        .active_idle_share
                        .or(p.gpu.idle_share)
                        .unwrap_or(p.gpu.idle.total_ns as f64 / wall),
                ),
            };
            if limit.per_iteration {
                let it = iters.unwrap_or(Span::exact(1.0));
                v = Span {
                    lo: v.lo / it.hi.max(1.0),
                    hi: v.hi / it.lo.max(1.0),
                };
            }
            judge(limit, v)
        }
    }
}

/// Why limits on site patterns could not be evaluated: events the reader missed, events
/// without a call stack.
fn sites_missing_note(sel: &Selection<'_>, p: &ProcessReport) -> String {
    let mut why = Vec::new();
    if sel.unseen > 0 {
        why.push(format!(
            "{} {} not received by the reader (lost_records {}: raise SYNCSPY_RING)",
            plural::count(sel.unseen, "event", "events"),
            plural::word(sel.unseen, "was", "were"),
            p.lost_records
        ));
    }
    if sel.frameless > 0 {
        why.push(format!(
            "{} no call stack (SYNCSPY_STACKS=0, SYNCSPY_STACK_MIN_NS, or a full \
             call-site table)",
            plural::count(sel.frameless, "event has", "events have")
        ));
    }
    format!("site patterns need call sites, and {}", why.join("; "))
}

/// Evaluates every rule against every process of the report it applies to.
pub fn evaluate(budget: &Budget, report: &Report) -> BudgetReport {
    let mut results = Vec::new();
    let mut problems = Vec::new();
    if report.exit_code != 0 {
        problems.push(format!(
            "the command exited with code {}: the run did not complete",
            report.exit_code
        ));
    }
    if report.processes.is_empty() {
        problems.push(
            "no instrumented process reported: nothing to check (either the command never \
             called the CUDA runtime, or libsyncspy.so was not loaded: a static binary, or \
             LD_PRELOAD cleared by the program)"
                .to_string(),
        );
    }
    for rule in &budget.rules {
        let procs: Vec<&ProcessReport> = report
            .processes
            .iter()
            .filter(|p| {
                rule.process
                    .as_deref()
                    .is_none_or(|pat| p.cmdline.contains(pat))
            })
            .collect();
        if procs.is_empty() {
            let (why, status) = match (&rule.process, report.processes.is_empty()) {
                (Some(pat), false) => (
                    format!(
                        "matched nothing: no process's command line contains `{pat}` \
                         (process = \"{pat}\"); check the pattern"
                    ),
                    if rule.require_match {
                        CheckStatus::Fail
                    } else {
                        CheckStatus::NotEvaluated
                    },
                ),
                _ => (
                    "no instrumented process reported".to_string(),
                    CheckStatus::NotEvaluated,
                ),
            };
            results.push(RuleResult {
                rule: rule.name.clone(),
                line: rule.line,
                pid: None,
                cmdline: String::new(),
                status,
                limits: Vec::new(),
                iterations: None,
                sites: Vec::new(),
                notes: vec![why],
            });
            continue;
        }
        for p in procs {
            results.push(eval_process(rule, budget.iterations.as_ref(), p));
        }
    }
    let worst = results.iter().map(|r| r.status).max();
    let outcome = match worst {
        Some(CheckStatus::Fail) => Outcome::OverBudget,
        Some(CheckStatus::NotEvaluated) => Outcome::NotEvaluated,
        _ if !problems.is_empty() => Outcome::NotEvaluated,
        _ => Outcome::WithinBudget,
    };
    BudgetReport {
        file: budget.source.clone(),
        outcome,
        results,
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_of_one_is_one_event() {
        let limit = |max| Limit {
            key: "max_count",
            measure: Measure::Count,
            per_iteration: false,
            max,
        };
        assert_eq!(
            judge(&limit(0.0), Span::exact(1.0)).message,
            "1 event > max_count 0"
        );
        assert_eq!(
            judge(&limit(1.0), Span::exact(1.0)).message,
            "1 event <= max_count 1"
        );
        assert_eq!(
            judge(&limit(0.0), Span { lo: 1.0, hi: 3.0 }).message,
            "at least 1 event > max_count 0"
        );
        assert_eq!(
            judge(&limit(2.0), Span { lo: 1.0, hi: 3.0 }).message,
            "between 1 and 3 events: cannot tell against max_count 2"
        );
        assert_eq!(
            judge(&limit(2.0), Span::exact(2.0)).message,
            "2 events <= max_count 2"
        );
    }
    use crate::budget::file::parse;
    use syncspy_read::report::Stats;

    fn stats(count: u64, total_ns: u64, bytes: u64) -> Stats {
        Stats {
            count,
            total_ns,
            bytes,
            recorded_count: count,
            ..Stats::default()
        }
    }

    fn site(kind: &str, count: u64, total_ns: u64, bytes: u64, frames: &[&str]) -> Site {
        Site {
            kind: kind.into(),
            api: match kind {
                "stream_sync" => "cudaStreamSynchronize",
                "memcpy_pageable" => "cudaMemcpyAsync",
                _ => "cudaDeviceSynchronize",
            }
            .into(),
            count,
            total_ns,
            bytes,
            frames: frames.iter().map(|s| s.to_string()).collect(),
            frame_modules: frames.iter().map(|_| "train".to_string()).collect(),
            ..Site::default()
        }
    }

    /// A training process: 10 steps, each with one `.item()` stream sync (1 ms), one stray
    /// stream sync in `log_metrics` (3 events, 2 ms each), a pageable copy of 4 KiB per step,
    /// one device sync per step, 1 s of wall time.
    fn train_process() -> ProcessReport {
        let mut p = ProcessReport {
            pid: 100,
            cmdline: "python train.py".into(),
            wall_ns: 1_000_000_000,
            state: syncspy_read::report::ProcessState::Exited(Some(0)),
            ..ProcessReport::default()
        };
        p.kinds
            .insert("stream_sync".into(), stats(13, 16_000_000, 0));
        p.kinds
            .insert("memcpy_pageable".into(), stats(10, 5_000_000, 40960));
        p.kinds
            .insert("device_sync".into(), stats(10, 20_000_000, 0));
        p.stall_ns = 41_000_000;
        p.sites = vec![
            site(
                "device_sync",
                10,
                20_000_000,
                0,
                &["train_step (train.cc:50)"],
            ),
            site(
                "stream_sync",
                10,
                10_000_000,
                0,
                &["loss_item (train.cc:42)", "train_step (train.cc:60)"],
            ),
            site(
                "stream_sync",
                3,
                6_000_000,
                0,
                &["log_metrics (train.cc:90)", "main (train.cc:100)"],
            ),
            site(
                "memcpy_pageable",
                10,
                5_000_000,
                40960,
                &["load_batch (data.cc:7)"],
            ),
        ];
        p.recorded_events = 33;
        p
    }

    fn report(procs: Vec<ProcessReport>) -> Report {
        Report {
            syncspy_report: 1,
            command: vec!["python".into(), "train.py".into()],
            processes: procs,
            ..Report::default()
        }
    }

    fn run(budget: &str, r: &Report) -> BudgetReport {
        evaluate(&parse("b.toml", budget).unwrap(), r)
    }

    #[test]
    fn kind_limits_use_exact_totals() {
        let r = report(vec![train_process()]);
        let b = run(
            r#"
[[rule]]
name = "syncs"
kind = "stream_sync"
max_count = 13
max_total_ms = 16
[[rule]]
name = "too many syncs"
kind = ["stream_sync", "device_sync"]
max_count = 22
[[rule]]
name = "no device syncs"
kind = "device_sync"
forbid = true
"#,
            &r,
        );
        let st: Vec<_> = b
            .results
            .iter()
            .map(|x| (x.rule.as_str(), x.status))
            .collect();
        assert_eq!(
            st,
            vec![
                ("syncs", CheckStatus::Pass),
                ("too many syncs", CheckStatus::Fail),
                ("no device syncs", CheckStatus::Fail),
            ]
        );
        assert_eq!(b.outcome, Outcome::OverBudget);
        assert_eq!(b.outcome.exit_code(), 1);
        let l = &b.results[1].limits[0];
        assert_eq!((l.value, l.value_max), (23.0, None));
        assert_eq!(l.message, "23 events > max_count 22");
        assert_eq!(b.results[2].limits[0].message, "10 events > forbid 0");
        assert_eq!(
            b.results[0].limits[1].message,
            "16.00 ms stalled <= max_total_ms 16.00 ms"
        );
        // The violation names its call sites, largest first, with their frames.
        let sites = &b.results[1].sites;
        assert_eq!(sites[0].frames, vec!["train_step (train.cc:50)"]);
        assert_eq!(sites.len(), 3);
        assert_eq!(b.results[1].pid, Some(100));
    }

    #[test]
    fn site_patterns_name_python_files_functions_and_lines() {
        use syncspy_read::python::PyFrame;
        let py = |line: u32, function: &str| PyFrame {
            file: "/home/u/train.py".into(),
            line,
            function: function.into(),
            skipped: 0,
        };
        let mut p = train_process();
        // Two `.item()` lines of one loop: the same native frames, two Python lines.
        p.sites[1].python = vec![py(142, "train_step"), py(200, "main")];
        p.sites[2].python = vec![py(150, "log_metrics"), py(201, "main")];
        let r = report(vec![p]);
        let count = |b: &BudgetReport| b.results[0].limits[0].value;
        let b = run(
            "[[rule]]\nname = \"a\"\nkind = \"stream_sync\"\nsite = \"train.py:train_step\"\nmax_count = 100\n",
            &r,
        );
        assert_eq!(count(&b), 10.0);
        let b = run(
            "[[rule]]\nname = \"a\"\nkind = \"stream_sync\"\nsite = \"train.py:150\"\nmax_count = 100\n",
            &r,
        );
        assert_eq!(count(&b), 3.0);
        // Every stream sync but the allowed line is counted.
        let b = run(
            "[[rule]]\nname = \"a\"\nkind = \"stream_sync\"\nallow_sites = [\"train.py:142\"]\nmax_count = 100\n",
            &r,
        );
        assert_eq!(count(&b), 3.0);
        // Another file's name does not match.
        let b = run(
            "[[rule]]\nname = \"a\"\nkind = \"stream_sync\"\nsite = \"eval.py:train_step\"\nmax_count = 100\n",
            &r,
        );
        assert_eq!(count(&b), 0.0);
    }

    #[test]
    fn a_pattern_that_matches_nothing_is_reported_and_can_fail() {
        let r = report(vec![train_process()]);
        let b = run(
            r#"
[[rule]]
name = "typo"
kind = "stream_sync"
site = "loss_itme"
max_count = 0
[[rule]]
name = "typo required"
kind = "stream_sync"
site = ["loss_item", "loss_itme"]
allow_sites = "nowhere"
require_match = true
max_count = 100
[[rule]]
name = "no such process"
process = "eval.py"
require_match = true
max_count = 100
[[rule]]
name = "fine"
kind = "stream_sync"
site = "loss_item"
require_match = true
max_count = 100
"#,
            &r,
        );
        let by = |n: &str| b.results.iter().find(|x| x.rule == n).unwrap();
        // Counted as nothing (a pass), but said.
        let x = by("typo");
        assert_eq!(x.status, CheckStatus::Pass);
        assert!(x.notes[0].starts_with("matched nothing"), "{:?}", x.notes);
        assert!(x.notes[0].contains("`loss_itme`"), "{:?}", x.notes);
        // With require_match: a failure naming both patterns that matched nothing.
        let x = by("typo required");
        assert_eq!(x.status, CheckStatus::Fail);
        assert!(
            x.notes[0].contains("`loss_itme`, `nowhere`"),
            "{:?}",
            x.notes
        );
        assert!(!x.notes[0].contains("`loss_item`"), "{:?}", x.notes);
        assert_eq!(by("no such process").status, CheckStatus::Fail);
        let x = by("fine");
        assert_eq!(x.status, CheckStatus::Pass);
        assert!(x.notes.is_empty(), "{:?}", x.notes);
        assert_eq!(b.outcome, Outcome::OverBudget);
        // JUnit keeps the note of the passing rule.
        let xml = crate::junit::render(&b);
        assert!(
            xml.contains("matched nothing: no call site of this process contains `loss_itme`"),
            "{xml}"
        );
    }

    #[test]
    fn site_patterns_and_allowed_sites() {
        let r = report(vec![train_process()]);
        let b = run(
            r#"
[[rule]]
name = "no syncs in the step"
kind = "stream_sync"
site = "train_step"
allow_sites = ["loss_item"]
max_count = 0
[[rule]]
name = "no syncs anywhere but .item()"
kind = "stream_sync"
allow_sites = "loss_item"
max_count = 0
[[rule]]
name = "item syncs"
site = ["loss_item", "nowhere"]
max_count = 10
max_total_ms = 10
[[rule]]
name = "pageable bytes"
kind = "memcpy_pageable"
site = "data.cc"
max_bytes = 40000
"#,
            &r,
        );
        let by = |n: &str| b.results.iter().find(|x| x.rule == n).unwrap();
        // The only stream sync in train_step is the allowed .item().
        assert_eq!(by("no syncs in the step").status, CheckStatus::Pass);
        assert!(by("no syncs in the step").sites.is_empty());
        let x = by("no syncs anywhere but .item()");
        assert_eq!(x.status, CheckStatus::Fail);
        assert_eq!(x.limits[0].message, "3 events > max_count 0");
        assert_eq!(x.sites.len(), 1);
        assert_eq!(x.sites[0].frames[0], "log_metrics (train.cc:90)");
        assert_eq!(by("item syncs").status, CheckStatus::Pass);
        let x = by("pageable bytes");
        assert_eq!(x.status, CheckStatus::Fail);
        assert_eq!(x.limits[0].value, 40960.0);
        assert_eq!(x.limits[0].message, "40.0 KiB moved > max_bytes 39.1 KiB");
    }

    #[test]
    fn stall_share_and_gpu_idle_not_measured() {
        let r = report(vec![train_process()]);
        let b = run(
            r#"
[[rule]]
name = "stall share"
max_stall_share = 0.05
[[rule]]
name = "tight stall share"
max_stall_share = 0.04
[[rule]]
name = "gpu idle"
max_gpu_idle_share = 0.1
[[rule]]
name = "sync share"
kind = "stream_sync"
max_stall_share = 0.015
"#,
            &r,
        );
        let st: Vec<_> = b.results.iter().map(|x| x.status).collect();
        assert_eq!(
            st,
            vec![
                CheckStatus::Pass,
                CheckStatus::Fail,
                CheckStatus::NotMeasured,
                CheckStatus::Fail
            ]
        );
        assert_eq!(
            b.results[1].limits[0].message,
            "4.10% of wall time stalled > max_stall_share 4.00%"
        );
        assert!(
            b.results[2].limits[0].message.contains("not measured"),
            "{:?}",
            b.results[2]
        );
        assert!(b.results[2].sites.is_empty());
        // Not measured alone does not change the verdict.
        let b = run("[[rule]]\nname = \"g\"\nmax_gpu_idle_share = 0.1\n", &r);
        assert_eq!(b.outcome, Outcome::WithinBudget);
        let b = run(
            "[[rule]]\nname = \"g\"\nkind = \"gpu_idle\"\nmax_count = 0\n",
            &r,
        );
        assert_eq!(b.results[0].status, CheckStatus::NotMeasured);
        // Measured: the idle share of the traced time, compared like the others.
        let mut p = train_process();
        p.gpu.measured = true;
        p.gpu.idle.total_ns = 200_000_000;
        p.gpu.busy_fraction = Some(0.85);
        p.gpu.idle_share = Some(0.15);
        let b = run(
            "[[rule]]\nname = \"g\"\nmax_gpu_idle_share = 0.1\n[[rule]]\nname = \"h\"\nmax_gpu_idle_share = 0.2\n",
            &report(vec![p.clone()]),
        );
        assert_eq!(b.results[0].status, CheckStatus::Fail);
        assert_eq!(b.results[1].status, CheckStatus::Pass);
        assert!((b.results[0].limits[0].value - 0.15).abs() < 1e-12);
        assert_eq!(
            b.results[0].limits[0].message,
            "15.00% of its active time GPU idle > max_gpu_idle_share 10.00%"
        );
        // Only gaps (no busy time in the report): gap time over wall time.
        p.gpu.busy_fraction = None;
        p.gpu.idle_share = None;
        let b = run(
            "[[rule]]\nname = \"g\"\nmax_gpu_idle_share = 0.1\n",
            &report(vec![p]),
        );
        assert_eq!(b.results[0].status, CheckStatus::Fail);
    }

    #[test]
    fn lost_records_make_site_rules_fail_safe() {
        let mut p = train_process();
        // The reader missed 5 of the stream syncs (10 ms): they could be anywhere.
        p.kinds
            .insert("stream_sync".into(), stats(18, 26_000_000, 0));
        p.lost_records = 5;
        let r = report(vec![p]);
        let b = run(
            r#"
[[rule]]
name = "decided over"
kind = "stream_sync"
site = "log_metrics"
max_count = 2
[[rule]]
name = "undecided"
kind = "stream_sync"
site = "log_metrics"
max_count = 5
[[rule]]
name = "decided within"
kind = "stream_sync"
site = "log_metrics"
max_count = 8
[[rule]]
name = "kind only stays exact"
kind = "stream_sync"
max_count = 18
"#,
            &r,
        );
        let by = |n: &str| b.results.iter().find(|x| x.rule == n).unwrap();
        let x = by("decided over");
        assert_eq!(x.status, CheckStatus::Fail);
        assert_eq!(x.limits[0].message, "at least 3 events > max_count 2");
        let x = by("undecided");
        assert_eq!(x.status, CheckStatus::NotEvaluated);
        assert_eq!((x.limits[0].value, x.limits[0].value_max), (3.0, Some(8.0)));
        assert!(
            x.limits[0].message.starts_with("between 3 and 8 events"),
            "{x:?}"
        );
        assert!(x.notes[0].contains("5 events were not received"), "{x:?}");
        assert!(x.notes[0].contains("SYNCSPY_RING"), "{x:?}");
        assert_eq!(by("decided within").status, CheckStatus::Pass);
        assert_eq!(by("kind only stays exact").status, CheckStatus::Pass);
        assert_eq!(b.outcome, Outcome::OverBudget);
        // Without the definite violation the verdict is "not evaluated": exit 2.
        let b = run(
            "[[rule]]\nname = \"u\"\nkind = \"stream_sync\"\nsite = \"log_metrics\"\nmax_count = 5\n",
            &r,
        );
        assert_eq!(b.outcome, Outcome::NotEvaluated);
        assert_eq!(b.outcome.exit_code(), 2);
    }

    #[test]
    fn sites_without_stacks_are_unknown_to_site_rules() {
        let mut p = train_process();
        p.sites[2].frames.clear();
        p.sites[2].frame_modules.clear();
        let r = report(vec![p]);
        let b = run(
            "[[rule]]\nname = \"a\"\nkind = \"stream_sync\"\nallow_sites = \"loss_item\"\nmax_count = 0\n",
            &r,
        );
        assert_eq!(b.results[0].status, CheckStatus::NotEvaluated);
        assert!(b.results[0].notes[0].contains("3 events have no call stack"));
        // A rule without patterns does not care.
        let b = run(
            "[[rule]]\nname = \"a\"\nkind = \"stream_sync\"\nmax_count = 13\n",
            &r,
        );
        assert_eq!(b.results[0].status, CheckStatus::Pass);
    }

    #[test]
    fn per_iteration_limits_divide_by_marked_iterations() {
        let mut quiet = train_process();
        quiet.pid = 101;
        quiet.cmdline = "python loader.py".into();
        quiet.kinds.remove("device_sync");
        quiet.sites.remove(0);
        let r = report(vec![train_process(), quiet]);
        let b = run(
            r#"
[iterations]
kind = "device_sync"
site = "train_step"

[[rule]]
name = "syncs per step"
kind = "stream_sync"
max_count_per_iteration = 1.3
max_total_ms_per_iteration = 1.6
max_bytes_per_iteration = 0
[[rule]]
name = "copies per step"
kind = "memcpy_pageable"
max_bytes_per_iteration = 4000
"#,
            &r,
        );
        let x = &b.results[0];
        assert_eq!(x.pid, Some(100));
        assert_eq!(
            x.iterations,
            Some(IterationCount {
                count: 10,
                count_max: None
            })
        );
        assert_eq!(x.status, CheckStatus::Pass);
        assert_eq!(
            x.limits[0].message,
            "1.30 events per iteration <= max_count_per_iteration 1.30"
        );
        // The loader marks no iteration: its whole run counts as one.
        let x = &b.results[1];
        assert_eq!(x.pid, Some(101));
        assert_eq!(
            x.iterations,
            Some(IterationCount {
                count: 0,
                count_max: None
            })
        );
        assert_eq!(x.status, CheckStatus::Fail);
        assert!(
            x.notes
                .iter()
                .any(|n| n.contains("no iteration-marking event")),
            "{x:?}"
        );
        let x = &b.results[2];
        assert_eq!(x.status, CheckStatus::Fail);
        assert_eq!(
            x.limits[0].message,
            "4.0 KiB moved per iteration > max_bytes_per_iteration 3.9 KiB"
        );
    }

    #[test]
    fn rules_apply_per_process_and_can_pick_processes() {
        let mut other = train_process();
        other.pid = 200;
        other.cmdline = "python eval.py".into();
        other.kinds.remove("device_sync");
        let r = report(vec![train_process(), other]);
        let b = run(
            r#"
[[rule]]
name = "device syncs"
kind = "device_sync"
max_count = 0
[[rule]]
name = "eval only"
process = "eval.py"
kind = "device_sync"
max_count = 0
[[rule]]
name = "typo"
process = "evl.py"
max_count = 100
"#,
            &r,
        );
        let st: Vec<_> = b
            .results
            .iter()
            .map(|x| (x.rule.as_str(), x.pid, x.status))
            .collect();
        assert_eq!(
            st,
            vec![
                ("device syncs", Some(100), CheckStatus::Fail),
                ("device syncs", Some(200), CheckStatus::Pass),
                ("eval only", Some(200), CheckStatus::Pass),
                ("typo", None, CheckStatus::NotEvaluated),
            ]
        );
        assert!(b.results[3].notes[0].contains("evl.py"));
    }

    #[test]
    fn a_failed_command_or_no_process_is_not_within_budget() {
        let mut r = report(vec![train_process()]);
        r.exit_code = 3;
        let b = run("[[rule]]\nname = \"a\"\nmax_count = 1000\n", &r);
        assert_eq!(b.results[0].status, CheckStatus::Pass);
        assert_eq!(b.outcome, Outcome::NotEvaluated);
        assert!(b.problems[0].contains("exited with code 3"));
        // A definite violation still says "over budget".
        let b = run("[[rule]]\nname = \"a\"\nmax_count = 0\n", &r);
        assert_eq!(b.outcome, Outcome::OverBudget);
        let b = run("[[rule]]\nname = \"a\"\nmax_count = 0\n", &report(vec![]));
        assert_eq!(b.outcome, Outcome::NotEvaluated);
        assert_eq!(b.results[0].pid, None);
        assert!(b.problems[0].contains("no instrumented process"));
    }

    #[test]
    fn the_budget_section_round_trips_through_json() {
        let r = report(vec![train_process()]);
        let b = run(
            "[[rule]]\nname = \"a\"\nkind = \"stream_sync\"\nmax_count = 0\n",
            &r,
        );
        let v = serde_json::to_value(&b).unwrap();
        assert_eq!(v["outcome"], "over_budget");
        assert_eq!(v["results"][0]["status"], "fail");
        assert_eq!(v["results"][0]["limits"][0]["key"], "max_count");
        assert_eq!(v["results"][0]["limits"][0]["value"], 13.0);
        let back: BudgetReport = serde_json::from_value(v).unwrap();
        assert_eq!(back, b);
    }
}
