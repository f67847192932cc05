//! JUnit XML for `syncspy check --junit FILE`: one `<testcase>` per rule and process.
//!
//! A violation is a `<failure>`, a rule that could not be evaluated an `<error>`, a rule whose
//! quantity is not measured (GPU idle) `<skipped>`. Problems of the run as a whole (the
//! command failed, no process reported) are one extra `<testcase name="run">` with an
//! `<error>`, so CI shows them next to the rules.
//!
//! A testcase's name stays the same from run to run, so CI keeps each rule's history: the
//! rule and the process's program (`no syncs [python3 train.py]`), with `#2`, `#3`, ... for
//! further processes of the same program, in the report's order; the pid and the whole
//! command line are in the testcase's text.

use std::fmt::Write as _;

use crate::budget::eval::{BudgetReport, CheckStatus, RuleResult};
use crate::budget::text::process_label;
use crate::summary::fmt_ns;

/// Text made safe for XML attribute values and content: markup escaped, characters XML 1.0
/// cannot carry (most control characters) replaced.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            '\n' => o.push_str("&#10;"),
            '\t' => o.push_str("&#9;"),
            '\r' => o.push_str("&#13;"),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => o.push('\u{FFFD}'),
            c => o.push(c),
        }
    }
    o
}

/// The details of a result: the process, every limit, the sites that counted, the notes.
fn details(r: &RuleResult) -> String {
    let mut d = String::new();
    let _ = writeln!(d, "process: {}", process_label(r));
    for l in &r.limits {
        let _ = writeln!(d, "{}", l.message);
    }
    if let Some(it) = &r.iterations {
        let _ = writeln!(d, "iterations: {}", it.count);
    }
    for s in &r.sites {
        let _ = writeln!(
            d,
            "{} {} x{} total {}",
            s.kind,
            s.api,
            s.count,
            fmt_ns(s.total_ns)
        );
        for f in &s.frames {
            let _ = writeln!(d, "    at {f}");
        }
    }
    for n in &r.notes {
        let _ = writeln!(d, "note: {n}");
    }
    d
}

/// The failure message: the limits that decided the status, and the top site.
fn message(r: &RuleResult) -> String {
    let mut parts: Vec<String> = r
        .limits
        .iter()
        .filter(|l| l.status == r.status)
        .map(|l| l.message.clone())
        .collect();
    if parts.is_empty() {
        parts = r.notes.clone();
    }
    let mut m = parts.join("; ");
    let judged = matches!(r.status, CheckStatus::Fail | CheckStatus::NotEvaluated);
    if let Some(s) = r.sites.first().filter(|_| judged) {
        let at = s.frames.first().map(String::as_str).unwrap_or("(no stack)");
        let _ = write!(m, "; top site: {} x{} at {at}", s.api, s.count);
    }
    m
}

/// The testcase names of `results`, in order: `RULE [PROGRAM]`, `RULE [PROGRAM #2]` for the
/// second process of that program under that rule, ...; no pid, which changes every run.
pub fn testcase_names(results: &[RuleResult]) -> Vec<String> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    results
        .iter()
        .map(|r| {
            let program = match r.pid {
                Some(_) => {
                    let argv: Vec<String> =
                        r.cmdline.split_whitespace().map(str::to_string).collect();
                    syncspy_read::program::program_of(&argv)
                }
                None => "no process".to_string(),
            };
            let key = format!("{}\0{program}", r.rule);
            let n = match seen.iter_mut().find(|(k, _)| *k == key) {
                Some((_, n)) => {
                    *n += 1;
                    *n
                }
                None => {
                    seen.push((key, 1));
                    1
                }
            };
            if n == 1 {
                format!("{} [{program}]", r.rule)
            } else {
                format!("{} [{program} #{n}]", r.rule)
            }
        })
        .collect()
}

/// The whole document.
pub fn render(b: &BudgetReport) -> String {
    let tests = b.results.len() + usize::from(!b.problems.is_empty());
    let failures = b.count(CheckStatus::Fail);
    let errors = b.count(CheckStatus::NotEvaluated) + usize::from(!b.problems.is_empty());
    let skipped = b.count(CheckStatus::NotMeasured);
    let suite = escape(&format!("syncspy budget {}", b.file));
    let mut x = String::new();
    let _ = writeln!(x, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    let _ = writeln!(
        x,
        r#"<testsuites name="syncspy check" tests="{tests}" failures="{failures}" errors="{errors}" skipped="{skipped}">"#
    );
    let _ = writeln!(
        x,
        r#"  <testsuite name="{suite}" tests="{tests}" failures="{failures}" errors="{errors}" skipped="{skipped}">"#
    );
    for (r, name) in b.results.iter().zip(testcase_names(&b.results)) {
        let name = escape(&name);
        let _ = write!(
            x,
            r#"    <testcase classname="syncspy.budget" name="{name}" time="0""#
        );
        let (tag, kind) = match r.status {
            // A pass with something to say (a pattern that matched nothing) keeps its notes.
            CheckStatus::Pass if !r.notes.is_empty() => {
                let _ = writeln!(x, ">");
                let _ = writeln!(x, "      <system-out>{}</system-out>", escape(&details(r)));
                let _ = writeln!(x, "    </testcase>");
                continue;
            }
            CheckStatus::Pass => {
                let _ = writeln!(x, "/>");
                continue;
            }
            CheckStatus::Fail => ("failure", "over_budget"),
            CheckStatus::NotEvaluated => ("error", "not_evaluated"),
            CheckStatus::NotMeasured => ("skipped", "not_measured"),
        };
        let _ = writeln!(x, ">");
        let msg = escape(&message(r));
        if tag == "skipped" {
            let _ = writeln!(x, r#"      <skipped message="{msg}"/>"#);
        } else {
            let _ = writeln!(
                x,
                r#"      <{tag} message="{msg}" type="{kind}">{}</{tag}>"#,
                escape(&details(r))
            );
        }
        let _ = writeln!(x, "    </testcase>");
    }
    if !b.problems.is_empty() {
        let msg = escape(&b.problems.join("; "));
        let _ = writeln!(
            x,
            r#"    <testcase classname="syncspy.budget" name="run" time="0">"#
        );
        let _ = writeln!(
            x,
            r#"      <error message="{msg}" type="run_failed">{msg}</error>"#
        );
        let _ = writeln!(x, "    </testcase>");
    }
    let _ = writeln!(x, "  </testsuite>");
    let _ = writeln!(x, "</testsuites>");
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::eval::{LimitResult, Outcome, SiteHit};

    #[test]
    fn escapes_markup_and_control_characters() {
        assert_eq!(
            escape("a<b> & \"c\" 'd'\n\u{1}"),
            "a&lt;b&gt; &amp; &quot;c&quot; &apos;d&apos;&#10;\u{FFFD}"
        );
    }

    #[test]
    fn names_carry_the_program_and_an_index_for_duplicates_not_the_pid() {
        let r = |rule: &str, pid: Option<u32>, cmd: &str| RuleResult {
            rule: rule.into(),
            line: 1,
            pid,
            cmdline: cmd.into(),
            status: CheckStatus::Pass,
            limits: Vec::new(),
            iterations: None,
            sites: Vec::new(),
            notes: Vec::new(),
        };
        let names = testcase_names(&[
            r("syncs", Some(12839), "/x/scn-clean-async --iters 3"),
            r("syncs", Some(12840), "/x/scn-clean-async --iters 3"),
            r("syncs", Some(12841), "python3 -u train.py --rank 0"),
            r("share", Some(12839), "/x/scn-clean-async --iters 3"),
            r("syncs", Some(12842), "/x/scn-clean-async"),
            r("syncs", None, ""),
        ]);
        assert_eq!(
            names,
            [
                "syncs [scn-clean-async]",
                "syncs [scn-clean-async #2]",
                "syncs [python3 train.py]",
                "share [scn-clean-async]",
                "syncs [scn-clean-async #3]",
                "syncs [no process]",
            ]
        );
    }

    #[test]
    fn one_testcase_per_result_with_failures_errors_and_skips() {
        let r = |rule: &str, status, msg: &str| RuleResult {
            rule: rule.into(),
            line: 1,
            pid: Some(9),
            cmdline: "./a <b>".into(),
            status,
            limits: vec![LimitResult {
                key: "max_count".into(),
                status,
                message: msg.into(),
                ..LimitResult::default()
            }],
            iterations: None,
            sites: Vec::new(),
            notes: Vec::new(),
        };
        let mut fail = r("no syncs", CheckStatus::Fail, "3 events > max_count 0");
        fail.sites.push(SiteHit {
            kind: "stream_sync".into(),
            api: "cudaStreamSynchronize".into(),
            count: 3,
            frames: vec!["f<T> (x.cc:1)".into()],
            ..SiteHit::default()
        });
        let b = BudgetReport {
            file: "b.toml".into(),
            outcome: Outcome::OverBudget,
            results: vec![
                fail,
                r("ok", CheckStatus::Pass, "fine"),
                r("gpu", CheckStatus::NotMeasured, "not measured"),
                r("lost", CheckStatus::NotEvaluated, "between 1 and 3"),
            ],
            problems: vec!["the command exited with code 3".into()],
        };
        let x = render(&b);
        assert!(
            x.contains(r#"tests="5" failures="1" errors="2" skipped="1""#),
            "{x}"
        );
        assert!(x.contains(r#"name="no syncs [a]""#), "{x}");
        // The pid is in the text, not in the name.
        assert!(x.contains("process: pid 9 ./a &lt;b&gt;&#10;"), "{x}");
        assert!(
            x.contains(r#"<failure message="3 events &gt; max_count 0; top site: cudaStreamSynchronize x3 at f&lt;T&gt; (x.cc:1)" type="over_budget">"#),
            "{x}"
        );
        assert!(
            x.contains(r#"<testcase classname="syncspy.budget" name="ok [a]" time="0"/>"#),
            "{x}"
        );
        assert!(x.contains(r#"<skipped message="not measured"/>"#), "{x}");
        assert!(
            x.contains(r#"<error message="between 1 and 3" type="not_evaluated">"#),
            "{x}"
        );
        assert!(
            x.contains(r#"name="run""#) && x.contains("exited with code 3"),
            "{x}"
        );
        assert_eq!(x.matches("<testcase ").count(), 5);
        assert_eq!(x.matches("</testcase>").count(), 4);
    }
}
