//! `syncspy report A B`: what changed between two reports, per kind and per call site, as
//! text, markdown (a PR comment) or JSON.
//!
//! Processes differ between runs (pids, sometimes their number), so both reports are summed
//! over their processes. Kind figures are the exact header totals; site figures come from
//! the records received (see `lost_records`), and a site is the same in both reports when
//! its kind, API and shown frames (the innermost frames outside the CUDA runtime and
//! syncspy, `symbol (file:line)`) are the same: a site whose line moved shows as one gone and
//! one new.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use syncspy_read::names::{ApiName, KindName};

use crate::budget::CheckStatus;
use crate::markdown::{md_cell, md_code};
use crate::summary::{fmt_bytes, fmt_ns, shell_words, user_frames};
use syncspy_read::plural;
use syncspy_read::report::Report;
pub use syncspy_read::snapshot::Amounts;

/// Sites listed in text and markdown (JSON has them all).
pub const SHOWN_SITES: usize = 10;

/// One report, summed over its processes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Side {
    /// The file it was read from.
    pub file: String,
    pub command: Vec<String>,
    pub exit_code: i32,
    pub wall_ns: u64,
    pub processes: usize,
    /// Host stall time summed over processes.
    pub stall_ns: u64,
    pub lost_records: u64,
    pub dropped_events: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KindChange {
    pub kind: KindName,
    pub before: Amounts,
    pub after: Amounts,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteChange {
    pub kind: KindName,
    pub api: ApiName,
    /// The frames that identify the site (innermost first); empty when no stack was captured.
    pub frames: Vec<String>,
    pub before: Amounts,
    pub after: Amounts,
}

/// A budget rule's worst status over the processes of each report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuleChange {
    pub rule: String,
    pub before: Option<CheckStatus>,
    pub after: Option<CheckStatus>,
}

/// The whole comparison (what `--format json` prints).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub before: Side,
    pub after: Side,
    /// Every kind seen in either report, in the kinds' order.
    pub kinds: Vec<KindChange>,
    /// Every site seen in either report, largest change of total time first.
    pub sites: Vec<SiteChange>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleChange>,
}

/// A saturating sum: reports are user input, and their numbers may be anything.
fn sum(v: impl Iterator<Item = u64>) -> u64 {
    v.fold(0, u64::saturating_add)
}

fn side(file: &str, r: &Report) -> Side {
    Side {
        file: file.to_string(),
        command: r.command.clone(),
        exit_code: r.exit_code,
        wall_ns: r.wall_ns,
        processes: r.processes.len(),
        stall_ns: sum(r.processes.iter().map(|p| p.stall_ns)),
        lost_records: sum(r.processes.iter().map(|p| p.lost_records)),
        dropped_events: sum(r.processes.iter().map(|p| p.dropped_events)),
    }
}

type SiteKey = (KindName, ApiName, Vec<String>);

fn kinds_of(r: &Report) -> BTreeMap<KindName, Amounts> {
    let mut m: BTreeMap<KindName, Amounts> = BTreeMap::new();
    for p in &r.processes {
        for (k, s) in &p.kinds {
            m.entry(k.clone())
                .or_default()
                .add(s.count, s.total_ns, s.bytes);
        }
    }
    m
}

fn sites_of(r: &Report) -> BTreeMap<SiteKey, Amounts> {
    let mut m: BTreeMap<SiteKey, Amounts> = BTreeMap::new();
    for p in &r.processes {
        for s in &p.sites {
            let frames = user_frames(s).into_iter().map(str::to_string).collect();
            m.entry((s.kind.clone(), s.api.clone(), frames))
                .or_default()
                .add(s.count, s.total_ns, s.bytes);
        }
    }
    m
}

fn rules_of(r: &Report) -> BTreeMap<String, CheckStatus> {
    let mut m: BTreeMap<String, CheckStatus> = BTreeMap::new();
    for res in r.budget.iter().flat_map(|b| &b.results) {
        let e = m.entry(res.rule.clone()).or_insert(res.status);
        *e = (*e).max(res.status);
    }
    m
}

/// Compares `before` (read from `before_file`) with `after`.
pub fn compare(before_file: &str, before: &Report, after_file: &str, after: &Report) -> Comparison {
    let (kb, ka) = (kinds_of(before), kinds_of(after));
    // Kinds in their numeric order, unknown names (a newer writer) after, by name.
    let mut names: Vec<&KindName> = kb.keys().chain(ka.keys()).collect();
    names.sort_by_key(|n| (n.order(), *n));
    names.dedup();
    let kinds = names
        .into_iter()
        .map(|n| KindChange {
            kind: n.clone(),
            before: kb.get(n).copied().unwrap_or_default(),
            after: ka.get(n).copied().unwrap_or_default(),
        })
        .collect();

    let (sb, sa) = (sites_of(before), sites_of(after));
    let mut keys: Vec<&SiteKey> = sb.keys().chain(sa.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut sites: Vec<SiteChange> = keys
        .into_iter()
        .map(|k| SiteChange {
            kind: k.0.clone(),
            api: k.1.clone(),
            frames: k.2.clone(),
            before: sb.get(k).copied().unwrap_or_default(),
            after: sa.get(k).copied().unwrap_or_default(),
        })
        .collect();
    // Largest change first; equal changes: larger site first, then a stable order.
    sites.sort_by(|a, b| {
        let d = |s: &SiteChange| s.after.total_ns.abs_diff(s.before.total_ns);
        let big = |s: &SiteChange| s.after.total_ns.max(s.before.total_ns);
        d(b).cmp(&d(a)).then(big(b).cmp(&big(a)))
    });

    let (rb, ra) = (rules_of(before), rules_of(after));
    let mut rule_names: Vec<&String> = rb.keys().chain(ra.keys()).collect();
    rule_names.sort();
    rule_names.dedup();
    let rules = rule_names
        .into_iter()
        .map(|n| RuleChange {
            rule: n.clone(),
            before: rb.get(n).copied(),
            after: ra.get(n).copied(),
        })
        .collect();

    Comparison {
        before: side(before_file, before),
        after: side(after_file, after),
        kinds,
        sites,
        rules,
    }
}

/// `+3 (+50.0%)`, `-2 (-100.0%)`, `+4 (new)`, `0`.
fn change(before: u64, after: u64, fmt: impl Fn(u64) -> String) -> String {
    if before == after {
        return "0".to_string();
    }
    let sign = if after > before { "+" } else { "-" };
    let d = fmt(after.abs_diff(before));
    if before == 0 {
        format!("{sign}{d} (new)")
    } else {
        let pct = (after as f64 - before as f64) * 100.0 / before as f64;
        format!("{sign}{d} ({pct:+.1}%)")
    }
}

fn count_text(n: u64) -> String {
    n.to_string()
}

fn status_text(s: Option<CheckStatus>) -> &'static str {
    match s {
        None => "-",
        Some(CheckStatus::Pass) => "pass",
        Some(CheckStatus::Fail) => "FAIL",
        Some(CheckStatus::NotEvaluated) => "not evaluated",
        Some(CheckStatus::NotMeasured) => "not measured",
    }
}

fn loss_notes(c: &Comparison) -> Vec<String> {
    let mut v = Vec::new();
    for (label, s) in [("before", &c.before), ("after", &c.after)] {
        if s.lost_records > 0 {
            v.push(format!(
                "{label}: {} {} lost by the reader: site figures are incomplete, kind \
                 figures are exact",
                plural::count(s.lost_records, "record", "records"),
                plural::word(s.lost_records, "was", "were")
            ));
        }
        if s.exit_code != 0 {
            v.push(format!(
                "{label}: the command exited with code {}",
                s.exit_code
            ));
        }
    }
    v
}

/// The comparison as plain text.
pub fn render_text(c: &Comparison) -> String {
    let mut o = String::new();
    text_totals(&mut o, c);
    text_kinds(&mut o, c);
    text_sites(&mut o, c);
    text_rules(&mut o, c);
    for n in loss_notes(c) {
        let _ = writeln!(o, "note: {n}");
    }
    // Text from segments and reports (command lines, frames) may hold escape sequences.
    syncspy_read::text::terminal(&o).into_owned()
}

/// The two files and commands, then wall time, host stalls and processes, before and after.
fn text_totals(o: &mut String, c: &Comparison) {
    let _ = writeln!(
        o,
        "before: {}  `{}`",
        c.before.file,
        shell_words(&c.before.command)
    );
    let _ = writeln!(
        o,
        "after:  {}  `{}`",
        c.after.file,
        shell_words(&c.after.command)
    );
    let _ = writeln!(o, "  {:<16} {:>14} {:>14}  change", "", "before", "after");
    let _ = writeln!(
        o,
        "  {:<16} {:>14} {:>14}  {}",
        "wall",
        fmt_ns(c.before.wall_ns),
        fmt_ns(c.after.wall_ns),
        change(c.before.wall_ns, c.after.wall_ns, fmt_ns)
    );
    let _ = writeln!(
        o,
        "  {:<16} {:>14} {:>14}  {}",
        "host stalls",
        fmt_ns(c.before.stall_ns),
        fmt_ns(c.after.stall_ns),
        change(c.before.stall_ns, c.after.stall_ns, fmt_ns)
    );
    let _ = writeln!(
        o,
        "  {:<16} {:>14} {:>14}",
        "processes", c.before.processes, c.after.processes
    );
}

/// Count and total time of each kind, before and after.
fn text_kinds(o: &mut String, c: &Comparison) {
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "  {:<16} {:>9} {:>9} {:>16} {:>12} {:>12} {:>22}",
        "kind", "count", "count", "change", "total", "total", "change"
    );
    for k in &c.kinds {
        let _ = writeln!(
            o,
            "  {:<16} {:>9} {:>9} {:>16} {:>12} {:>12} {:>22}",
            k.kind,
            k.before.count,
            k.after.count,
            change(k.before.count, k.after.count, count_text),
            fmt_ns(k.before.total_ns),
            fmt_ns(k.after.total_ns),
            change(k.before.total_ns, k.after.total_ns, fmt_ns)
        );
    }
}

/// The call sites that changed most, with their stacks, and how many more there are.
fn text_sites(o: &mut String, c: &Comparison) {
    if !c.sites.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(o, "  call sites, largest change first:");
    }
    for (i, s) in c.sites.iter().take(SHOWN_SITES).enumerate() {
        let _ = writeln!(
            o,
            "  {:>2}. {} {}  x{} -> x{}  total {} -> {}  ({})",
            i + 1,
            s.kind,
            s.api,
            s.before.count,
            s.after.count,
            fmt_ns(s.before.total_ns),
            fmt_ns(s.after.total_ns),
            change(s.before.total_ns, s.after.total_ns, fmt_ns)
        );
        if s.frames.is_empty() {
            let _ = writeln!(o, "        (no stack captured)");
        }
        for f in &s.frames {
            let _ = writeln!(o, "        at {f}");
        }
    }
    let n = c.sites.len().saturating_sub(SHOWN_SITES);
    if n > 0 {
        let _ = writeln!(
            o,
            "      ... {n} more {} (--format json lists them all)",
            plural::word(n, "site", "sites")
        );
    }
}

/// Each budget rule's verdict, before and after.
fn text_rules(o: &mut String, c: &Comparison) {
    if !c.rules.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(o, "  budget rules:");
        for r in &c.rules {
            let _ = writeln!(
                o,
                "    {}: {} -> {}",
                r.rule,
                status_text(r.before),
                status_text(r.after)
            );
        }
    }
}

/// The comparison as GitHub-flavoured markdown, for a pull request comment.
pub fn render_markdown(c: &Comparison) -> String {
    let mut o = String::new();
    md_totals(&mut o, c);
    md_kinds(&mut o, c);
    md_sites(&mut o, c);
    md_rules(&mut o, c);
    let notes = loss_notes(c);
    if !notes.is_empty() {
        let _ = writeln!(o);
        for n in notes {
            let _ = writeln!(o, "> {}", md_cell(&n));
        }
    }
    // Text from segments and reports (command lines, frames) may hold escape sequences.
    syncspy_read::text::terminal(&o).into_owned()
}

/// The heading and the table of wall time, host stalls and processes.
fn md_totals(o: &mut String, c: &Comparison) {
    let _ = writeln!(o, "### syncspy: host stalls, before → after");
    let _ = writeln!(o);
    let _ = writeln!(o, "| | before | after | change |");
    let _ = writeln!(o, "|---|---:|---:|---:|");
    let _ = writeln!(
        o,
        "| wall | {} | {} | {} |",
        fmt_ns(c.before.wall_ns),
        fmt_ns(c.after.wall_ns),
        change(c.before.wall_ns, c.after.wall_ns, fmt_ns)
    );
    let _ = writeln!(
        o,
        "| host stalls | {} | {} | {} |",
        fmt_ns(c.before.stall_ns),
        fmt_ns(c.after.stall_ns),
        change(c.before.stall_ns, c.after.stall_ns, fmt_ns)
    );
    let _ = writeln!(
        o,
        "| processes | {} | {} | |",
        c.before.processes, c.after.processes
    );
}

/// The table of kinds: counts and totals before and after, bytes after.
fn md_kinds(o: &mut String, c: &Comparison) {
    let _ = writeln!(o);
    let _ = writeln!(o, "#### By kind");
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "| kind | count before | count after | change | total before | total after | change | bytes after |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for k in &c.kinds {
        let _ = writeln!(
            o,
            "| `{}` | {} | {} | {} | {} | {} | {} | {} |",
            md_cell(k.kind.as_str()),
            k.before.count,
            k.after.count,
            change(k.before.count, k.after.count, count_text),
            fmt_ns(k.before.total_ns),
            fmt_ns(k.after.total_ns),
            change(k.before.total_ns, k.after.total_ns, fmt_ns),
            if k.after.bytes == 0 {
                "-".to_string()
            } else {
                fmt_bytes(k.after.bytes)
            }
        );
    }
}

/// The table of the call sites that changed most, and how many more there are.
fn md_sites(o: &mut String, c: &Comparison) {
    if !c.sites.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(o, "#### Call sites, largest change first");
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "| kind | API | where | count | total before | total after | change |"
        );
        let _ = writeln!(o, "|---|---|---|---:|---:|---:|---:|");
        for s in c.sites.iter().take(SHOWN_SITES) {
            let at = if s.frames.is_empty() {
                "(no stack)".to_string()
            } else {
                s.frames
                    .iter()
                    .take(2)
                    .map(|f| md_code(f))
                    .collect::<Vec<_>>()
                    .join("<br>")
            };
            let _ = writeln!(
                o,
                "| `{}` | `{}` | {at} | {} → {} | {} | {} | {} |",
                md_cell(s.kind.as_str()),
                md_cell(s.api.as_str()),
                s.before.count,
                s.after.count,
                fmt_ns(s.before.total_ns),
                fmt_ns(s.after.total_ns),
                change(s.before.total_ns, s.after.total_ns, fmt_ns)
            );
        }
        let n = c.sites.len().saturating_sub(SHOWN_SITES);
        if n > 0 {
            let _ = writeln!(o);
            let _ = writeln!(
                o,
                "{n} more {}: `syncspy report --format json BEFORE AFTER` lists them all.",
                plural::word(n, "site", "sites")
            );
        }
    }
}

/// The table of budget rules' verdicts, before and after.
fn md_rules(o: &mut String, c: &Comparison) {
    if !c.rules.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(o, "#### Budget");
        let _ = writeln!(o);
        let _ = writeln!(o, "| rule | before | after |");
        let _ = writeln!(o, "|---|---|---|");
        for r in &c.rules {
            let _ = writeln!(
                o,
                "| {} | {} | {} |",
                md_cell(&r.rule),
                status_text(r.before),
                status_text(r.after)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncspy_read::report::{ProcessReport, Site, Stats};

    fn proc_with(syncs: u64, sync_ns: u64, extra_site: bool) -> ProcessReport {
        let mut p = ProcessReport {
            pid: 1,
            stall_ns: sync_ns,
            wall_ns: 1_000_000_000,
            ..ProcessReport::default()
        };
        p.kinds.insert(
            "stream_sync".into(),
            Stats {
                count: syncs,
                total_ns: sync_ns,
                ..Stats::default()
            },
        );
        p.sites.push(Site {
            kind: "stream_sync".into(),
            api: "cudaStreamSynchronize".into(),
            count: syncs,
            total_ns: sync_ns,
            frames: vec!["hook".into(), "step (a|b.cc:1)".into()],
            frame_modules: vec!["libsyncspy.so".into(), "train".into()],
            ..Site::default()
        });
        if extra_site {
            p.kinds.insert(
                "memcpy_pageable".into(),
                Stats {
                    count: 2,
                    total_ns: 4_000_000,
                    bytes: 8192,
                    ..Stats::default()
                },
            );
            p.sites.push(Site {
                kind: "memcpy_pageable".into(),
                api: "cudaMemcpyAsync".into(),
                count: 2,
                total_ns: 4_000_000,
                bytes: 8192,
                frames: vec!["load (d.cc:9)".into()],
                ..Site::default()
            });
        }
        p
    }

    fn report(p: Vec<ProcessReport>) -> Report {
        Report {
            syncspy_report: 1,
            command: vec!["train".into()],
            wall_ns: 2_000_000_000,
            processes: p,
            ..Report::default()
        }
    }

    #[test]
    fn kinds_and_sites_are_matched_and_summed_over_processes() {
        let before = report(vec![
            proc_with(10, 10_000_000, false),
            proc_with(2, 2_000_000, false),
        ]);
        let after = report(vec![proc_with(3, 3_000_000, true)]);
        let c = compare("a.json", &before, "b.json", &after);
        assert_eq!(c.before.processes, 2);
        assert_eq!(c.before.stall_ns, 12_000_000);
        assert_eq!(c.kinds.len(), 2);
        assert_eq!(c.kinds[0].kind.as_str(), "stream_sync");
        assert_eq!(c.kinds[0].before.count, 12);
        assert_eq!(c.kinds[0].after.count, 3);
        assert_eq!(c.kinds[1].kind.as_str(), "memcpy_pageable");
        assert_eq!(c.kinds[1].before, Amounts::default());
        // The runtime frame is not part of the site's identity.
        assert_eq!(c.sites[0].frames, vec!["step (a|b.cc:1)"]);
        assert_eq!(c.sites[0].before.total_ns, 12_000_000);
        assert_eq!(c.sites[0].after.total_ns, 3_000_000);
        // -9 ms is a larger change than +4 ms.
        assert_eq!(c.sites[1].kind.as_str(), "memcpy_pageable");

        let t = render_text(&c);
        assert!(t.contains("-9 (-75.0%)"), "{t}");
        assert!(t.contains("-9.00 ms (-75.0%)"), "{t}");
        assert!(t.contains("+4.00 ms (new)"), "{t}");
        assert!(t.contains("x12 -> x3"), "{t}");

        let m = render_markdown(&c);
        assert!(m.contains("| `stream_sync` | 12 | 3 | -9 (-75.0%) | 12.00 ms | 3.00 ms | -9.00 ms (-75.0%) | - |"), "{m}");
        assert!(m.contains("`step (a\\|b.cc:1)`"), "{m}");
        assert!(
            m.contains("| `memcpy_pageable` | `cudaMemcpyAsync` | `load (d.cc:9)` | 0 → 2 |"),
            "{m}"
        );
        // Every table row has as many cells as its header.
        for table in m.split("\n\n").filter(|b| b.starts_with('|')) {
            let cells = |l: &str| l.replace("\\|", "").matches('|').count();
            let mut lines = table.lines();
            let n = cells(lines.next().unwrap());
            assert!(lines.all(|l| cells(l) == n), "{table}");
        }

        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["kinds"][0]["after"]["count"], 3);
        let back: Comparison = serde_json::from_value(v).unwrap();
        assert_eq!(back, c);
    }

    /// `syncspy report a.json b.json`: the kind table's columns line up whatever the names'
    /// lengths.
    #[test]
    fn the_kind_table_columns_line_up_for_names_of_every_length() {
        let mut before = proc_with(10, 10_000_000, true);
        before.kinds.insert(
            "gpu_idle".into(),
            Stats {
                count: 3,
                total_ns: 3_000,
                ..Stats::default()
            },
        );
        let after = proc_with(3, 3_000_000, false);
        let c = compare(
            "a.json",
            &report(vec![before]),
            "b.json",
            &report(vec![after]),
        );
        let t = render_text(&c);
        let header = t
            .lines()
            .find(|l| l.trim_start().starts_with("kind "))
            .unwrap_or_else(|| panic!("no kind table: {t}"));
        // Where the first "count" heading ends: every row's before-count ends there too.
        let count_end = header.find("count").map(|i| i + "count".len());
        let rows: Vec<&str> = t
            .lines()
            .filter(|l| {
                ["stream_sync", "memcpy_pageable", "gpu_idle"]
                    .iter()
                    .any(|n| l.starts_with(&format!("  {n} ")))
            })
            .collect();
        assert_eq!(rows.len(), 3, "{t}");
        for row in rows {
            let name = row.split_whitespace().next().unwrap_or_default();
            let count = row[2 + name.len()..].trim_start();
            let end = row.len() - count.len() + count.find(' ').unwrap_or(count.len());
            assert_eq!(
                Some(end),
                count_end,
                "misaligned:\n{header}\n{row}\nin\n{t}"
            );
            assert_eq!(row.len(), header.len(), "misaligned:\n{header}\n{row}");
        }
    }

    #[test]
    fn counts_of_one_take_the_singular() {
        let mut after = proc_with(1, 1_000, false);
        after.lost_records = 1;
        for i in 0..SHOWN_SITES {
            after.sites.push(Site {
                kind: "stream_sync".into(),
                api: "cudaStreamSynchronize".into(),
                count: 1,
                total_ns: 10,
                frames: vec![format!("f{i} (x.cc:{i})")],
                ..Site::default()
            });
        }
        let c = compare(
            "a",
            &report(vec![proc_with(1, 1_000, false)]),
            "b",
            &report(vec![after]),
        );
        assert_eq!(c.sites.len(), SHOWN_SITES + 1);
        let t = render_text(&c);
        assert!(t.contains("after: 1 record was lost by the reader"), "{t}");
        assert!(t.contains("... 1 more site (--format json"), "{t}");
        let m = render_markdown(&c);
        assert!(m.contains("1 more site: `syncspy report"), "{m}");
    }

    #[test]
    fn changes_read_naturally() {
        assert_eq!(change(5, 5, count_text), "0");
        assert_eq!(change(0, 4, count_text), "+4 (new)");
        assert_eq!(change(4, 0, count_text), "-4 (-100.0%)");
        assert_eq!(change(2, 3, count_text), "+1 (+50.0%)");
        assert_eq!(md_code("a`b|c"), "`a'b\\|c`");
    }

    #[test]
    fn budget_rules_and_losses_are_shown() {
        use crate::budget::eval::{BudgetReport, Outcome, RuleResult};
        let mut a = report(vec![proc_with(1, 1, false)]);
        let mut b = a.clone();
        let res = |status| RuleResult {
            rule: "no syncs".into(),
            line: 1,
            pid: Some(1),
            cmdline: String::new(),
            status,
            limits: Vec::new(),
            iterations: None,
            sites: Vec::new(),
            notes: Vec::new(),
        };
        a.budget = Some(BudgetReport {
            file: "b.toml".into(),
            outcome: Outcome::WithinBudget,
            results: vec![res(CheckStatus::Pass)],
            problems: Vec::new(),
        });
        b.budget = Some(BudgetReport {
            file: "b.toml".into(),
            outcome: Outcome::OverBudget,
            results: vec![res(CheckStatus::Pass), res(CheckStatus::Fail)],
            problems: Vec::new(),
        });
        b.processes[0].lost_records = 7;
        let c = compare("a", &a, "b", &b);
        assert_eq!(c.rules[0].before, Some(CheckStatus::Pass));
        assert_eq!(c.rules[0].after, Some(CheckStatus::Fail));
        let t = render_text(&c);
        assert!(t.contains("no syncs: pass -> FAIL"), "{t}");
        assert!(t.contains("after: 7 records were lost"), "{t}");
        let m = render_markdown(&c);
        assert!(m.contains("| no syncs | pass | FAIL |"), "{m}");
    }
}
