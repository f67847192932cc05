//! The budget's verdict for people: printed by `syncspy check` after the run's summary.

use std::fmt::Write as _;

use super::eval::{BudgetReport, CheckStatus, Outcome, RuleResult};
use crate::summary::fmt_ns;
use syncspy_read::plural;

/// Sites shown under a failed (or undecided) result, and frames per site.
pub const SHOWN_SITES: usize = 3;
pub const SHOWN_FRAMES: usize = 3;

fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(3)).collect();
        t.push_str("...");
        t
    }
}

/// `pid 12 python train.py`, or `no process` for results that are not about one.
pub fn process_label(r: &RuleResult) -> String {
    match r.pid {
        Some(pid) => format!("pid {pid} {}", short(&r.cmdline, 50)),
        None => "no process".to_string(),
    }
}

/// The one-line verdict.
pub fn verdict(b: &BudgetReport) -> String {
    let counts = format!(
        "{} failed, {} not evaluated, {} passed, {} not measured",
        b.count(CheckStatus::Fail),
        b.count(CheckStatus::NotEvaluated),
        b.count(CheckStatus::Pass),
        b.count(CheckStatus::NotMeasured)
    );
    match b.outcome {
        Outcome::WithinBudget => format!("within budget ({counts})"),
        Outcome::OverBudget => format!("OVER BUDGET ({counts})"),
        Outcome::NotEvaluated => format!("budget NOT EVALUATED ({counts})"),
    }
}

fn render_result(out: &mut String, r: &RuleResult) {
    let _ = writeln!(
        out,
        "  {:<7} {}  [{}]",
        r.status.label(),
        r.rule,
        process_label(r)
    );
    for l in &r.limits {
        let _ = writeln!(out, "          {}", l.message);
    }
    if let Some(it) = &r.iterations {
        match it.count_max {
            Some(m) => {
                let _ = writeln!(out, "          iterations: {} to {m}", it.count);
            }
            None => {
                let _ = writeln!(out, "          iterations: {}", it.count);
            }
        }
    }
    if matches!(r.status, CheckStatus::Fail | CheckStatus::NotEvaluated) {
        for (i, s) in r.sites.iter().take(SHOWN_SITES).enumerate() {
            let _ = writeln!(
                out,
                "          {}. {} {}  x{}  total {}",
                i + 1,
                s.kind,
                s.api,
                s.count,
                fmt_ns(s.total_ns)
            );
            if s.frames.is_empty() {
                let _ = writeln!(out, "               (no stack captured)");
            }
            for f in s.frames.iter().take(SHOWN_FRAMES) {
                let _ = writeln!(out, "               at {f}");
            }
        }
        let n = r.sites.len().saturating_sub(SHOWN_SITES);
        if n > 0 {
            let _ = writeln!(
                out,
                "          ... {n} more {} in the JSON report",
                plural::word(n, "site", "sites")
            );
        }
    }
    for n in &r.notes {
        let _ = writeln!(out, "          note: {n}");
    }
}

/// The whole budget section: failures first, then the undecided, then the rest.
pub fn render(b: &BudgetReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out);
    let _ = writeln!(out, "budget {}: {}", b.file, verdict(b));
    let mut order: Vec<&RuleResult> = b.results.iter().collect();
    // Stable: within one status, the file's order.
    order.sort_by_key(|r| std::cmp::Reverse(r.status));
    for r in order {
        render_result(&mut out, r);
    }
    for p in &b.problems {
        let _ = writeln!(out, "  !! {p}");
    }
    // Text from segments and reports (command lines, frames) may hold escape sequences.
    syncspy_read::text::terminal(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::eval::{LimitResult, SiteHit};

    fn result(rule: &str, status: CheckStatus, message: &str) -> RuleResult {
        RuleResult {
            rule: rule.into(),
            line: 1,
            pid: Some(7),
            cmdline: "python train.py".into(),
            status,
            limits: vec![LimitResult {
                key: "max_count".into(),
                message: message.into(),
                status,
                ..LimitResult::default()
            }],
            iterations: None,
            sites: Vec::new(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn failures_come_first_with_their_sites() {
        let mut fail = result("no syncs", CheckStatus::Fail, "3 events > max_count 0");
        fail.sites.push(SiteHit {
            kind: "stream_sync".into(),
            api: "cudaStreamSynchronize".into(),
            count: 3,
            total_ns: 1_200_000,
            bytes: 0,
            frames: vec![
                "a (x.cc:1)".into(),
                "b (x.cc:2)".into(),
                "c".into(),
                "d".into(),
            ],
        });
        let b = BudgetReport {
            file: "b.toml".into(),
            outcome: Outcome::OverBudget,
            results: vec![
                result("share", CheckStatus::Pass, "1.00% <= max_stall_share 5.00%"),
                fail,
                result(
                    "idle",
                    CheckStatus::NotMeasured,
                    "max_gpu_idle_share not measured",
                ),
            ],
            problems: vec!["the command exited with code 3".into()],
        };
        let s = render(&b);
        assert!(
            s.contains(
                "budget b.toml: OVER BUDGET (1 failed, 0 not evaluated, 1 passed, 1 not measured)"
            ),
            "{s}"
        );
        let fail_at = s.find("FAIL    no syncs  [pid 7 python train.py]").unwrap();
        let ok_at = s.find("ok      share").unwrap();
        let skip_at = s.find("SKIP    idle").unwrap();
        assert!(fail_at < ok_at && ok_at < skip_at, "{s}");
        assert!(s.contains("3 events > max_count 0"), "{s}");
        assert!(
            s.contains("1. stream_sync cudaStreamSynchronize  x3  total 1.20 ms"),
            "{s}"
        );
        assert!(
            s.contains("at b (x.cc:2)") && s.contains("at c\n") && !s.contains("at d"),
            "{s}"
        );
        assert!(s.contains("!! the command exited with code 3"), "{s}");
    }
}
