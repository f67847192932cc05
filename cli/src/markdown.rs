//! A saved report as GitHub-flavoured markdown (`syncspy report --format markdown FILE`), for
//! a pull request comment or a CI job summary.

use std::fmt::Write as _;

use crate::budget::CheckStatus;
use crate::summary::{
    fmt_bytes, fmt_ns, gap_cause, gpu_measured, gpu_not_measured, gpu_stopped, shell_words,
    user_frames, TOP_CAUSES, TOP_SITES,
};
use syncspy_read::plural;
use syncspy_read::report::{ProcessReport, Report};
use syncspy_read::verdict::BudgetReport;

/// Text for a markdown table cell: pipes escaped, line breaks removed.
pub fn md_cell(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace(['\n', '\r'], " ")
}

/// A code span for a markdown table cell (backticks in the text become quotes).
pub fn md_code(s: &str) -> String {
    format!("`{}`", md_cell(&s.replace('`', "'")))
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// The process's GPU: the summary's `GPU:` line and its gap causes as a table (nothing for a
/// segment older than ABI 1.2).
fn render_gpu(o: &mut String, p: &ProcessReport) {
    let g = &p.gpu;
    let Some(state) = g.state.as_ref() else {
        return;
    };
    let _ = writeln!(o);
    let Some(busy) = g.busy_fraction else {
        let _ = writeln!(
            o,
            "**GPU:** not measured: {}",
            md_cell(gpu_not_measured(state))
        );
        return;
    };
    let _ = writeln!(o, "**GPU:** {}", md_cell(&gpu_measured(g, busy)));
    if let Some(why) = state.known().as_ref().and_then(gpu_stopped) {
        let _ = writeln!(o, "({why})");
    }
    if g.causes.is_empty() {
        return;
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "| GPU idle by cause | share | count | total | where |");
    let _ = writeln!(o, "|---|---:|---:|---:|---|");
    for c in g.causes.iter().take(TOP_CAUSES) {
        let _ = writeln!(
            o,
            "| {} | {:.1}% | {} | {} | {} |",
            md_cell(&gap_cause(c)),
            c.share * 100.0,
            c.count,
            fmt_ns(c.total_ns),
            c.cause.location().map_or_else(|| "-".to_string(), md_code)
        );
    }
}

/// The whole report.
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "### syncspy: {}", md_code(&shell_words(&r.command)));
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "Exited with code {} after {}; {} instrumented process{}.",
        r.exit_code,
        fmt_ns(r.wall_ns),
        r.processes.len(),
        if r.processes.len() == 1 { "" } else { "es" }
    );
    for p in &r.processes {
        render_process(&mut o, p);
    }
    if let Some(b) = &r.budget {
        render_budget(&mut o, b);
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(o);
        for w in &r.warnings {
            let _ = writeln!(o, "> warning: {}", md_cell(&w.to_string()));
        }
    }
    // Text from segments and reports (command lines, frames) may hold escape sequences.
    syncspy_read::text::terminal(&o).into_owned()
}

/// A process: its heading, its kinds, its top sites, its GPU and what was lost.
fn render_process(o: &mut String, p: &ProcessReport) {
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "#### pid {} {}: host stalls {} ({} of {} wall)",
        p.pid,
        md_code(&p.cmdline),
        fmt_ns(p.stall_ns),
        pct(p.stall_ns, p.wall_ns),
        fmt_ns(p.wall_ns)
    );
    if p.kinds.values().all(|k| k.count == 0) {
        let _ = writeln!(o);
        let _ = writeln!(o, "No stalls.");
        render_gpu(o, p);
        return;
    }
    render_kinds(o, p);
    render_sites(o, p);
    render_gpu(o, p);
    let missed = p.lost_records.saturating_sub(p.dropped_events);
    if p.dropped_events > 0 || missed > 0 {
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "> {} dropped by the library, {} lost by the reader: percentiles and sites \
             cover {}; totals are exact.",
            plural::count(p.dropped_events, "event", "events"),
            plural::count(missed, "record", "records"),
            plural::count(p.recorded_events, "event", "events")
        );
    }
}

/// The table of a process's kinds, in the kinds' order.
fn render_kinds(o: &mut String, p: &ProcessReport) {
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "| kind | count | total | p50 | p99 | max | bytes | wall |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut names: Vec<_> = p.kinds.iter().collect();
    names.sort_by_key(|(n, _)| n.order());
    for (n, k) in names {
        let _ = writeln!(
            o,
            "| `{}` | {} | {} | {} | {} | {} | {} | {} |",
            md_cell(n.as_str()),
            k.count,
            fmt_ns(k.total_ns),
            fmt_ns(k.p50_ns),
            fmt_ns(k.p99_ns),
            fmt_ns(k.max_ns),
            if k.bytes == 0 {
                "-".to_string()
            } else {
                fmt_bytes(k.bytes)
            },
            pct(k.total_ns, p.wall_ns)
        );
    }
}

/// The table of a process's top call sites.
fn render_sites(o: &mut String, p: &ProcessReport) {
    if !p.sites.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(o, "| # | kind | API | where | count | total | p99 |");
        let _ = writeln!(o, "|---:|---|---|---|---:|---:|---:|");
    }
    for (i, s) in p.sites.iter().take(TOP_SITES).enumerate() {
        let frames = user_frames(s);
        let at = if frames.is_empty() {
            "(no stack)".to_string()
        } else {
            frames
                .iter()
                .take(2)
                .map(|f| md_code(f))
                .collect::<Vec<_>>()
                .join("<br>")
        };
        let _ = writeln!(
            o,
            "| {} | `{}` | `{}` | {at} | {} | {} | {} |",
            i + 1,
            md_cell(s.kind.as_str()),
            md_cell(s.api.as_str()),
            s.count,
            fmt_ns(s.total_ns),
            fmt_ns(s.p99_ns)
        );
    }
}

/// The budget's verdict and each rule's result.
fn render_budget(o: &mut String, b: &BudgetReport) {
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "#### Budget {}: {}",
        md_code(&b.file),
        md_cell(&crate::budget::text::verdict(b))
    );
    let _ = writeln!(o);
    let _ = writeln!(o, "| | rule | process | result |");
    let _ = writeln!(o, "|---|---|---|---|");
    for res in &b.results {
        let mark = match res.status {
            CheckStatus::Fail => "❌",
            CheckStatus::NotEvaluated => "⚠️",
            CheckStatus::NotMeasured => "➖",
            CheckStatus::Pass => "✅",
        };
        let mut what: Vec<String> = res.limits.iter().map(|l| l.message.clone()).collect();
        what.extend(res.notes.iter().cloned());
        if matches!(res.status, CheckStatus::Fail | CheckStatus::NotEvaluated) {
            if let Some(f) = res.sites.first().and_then(|s| s.frames.first()) {
                what.push(format!("at {f}"));
            }
        }
        let _ = writeln!(
            o,
            "| {mark} | {} | {} | {} |",
            md_cell(&res.rule),
            md_cell(&crate::budget::text::process_label(res)),
            what.iter()
                .map(|w| md_cell(w))
                .collect::<Vec<_>>()
                .join("<br>")
        );
    }
    for p in &b.problems {
        let _ = writeln!(o);
        let _ = writeln!(o, "> {}", md_cell(p));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncspy_read::report::{ProcessReport, Site, Stats};

    #[test]
    fn a_report_renders_as_tables() {
        let mut p = ProcessReport {
            pid: 7,
            cmdline: "python train.py".into(),
            wall_ns: 1_000_000_000,
            stall_ns: 250_000_000,
            ..ProcessReport::default()
        };
        p.kinds.insert(
            "stream_sync".into(),
            Stats {
                count: 4,
                total_ns: 250_000_000,
                p99_ns: 100_000_000,
                ..Stats::default()
            },
        );
        p.sites.push(Site {
            kind: "stream_sync".into(),
            api: "cudaStreamSynchronize".into(),
            count: 4,
            total_ns: 250_000_000,
            frames: vec!["f (a.cc:1)".into(), "g (a.cc:2)".into(), "h".into()],
            ..Site::default()
        });
        let r = Report {
            syncspy_report: 1,
            command: vec!["python".into(), "train.py".into()],
            wall_ns: 1_100_000_000,
            processes: vec![p],
            ..Report::default()
        };
        let m = render(&r);
        assert!(m.starts_with("### syncspy: `python train.py`\n"), "{m}");
        assert!(
            m.contains(
                "#### pid 7 `python train.py`: host stalls 250.00 ms (25.0% of 1.000 s wall)"
            ),
            "{m}"
        );
        assert!(m.contains("| `stream_sync` | 4 | 250.00 ms |"), "{m}");
        assert!(m.contains("| 1 | `stream_sync` | `cudaStreamSynchronize` | `f (a.cc:1)`<br>`g (a.cc:2)` | 4 |"), "{m}");
        assert!(!m.contains("`h`"), "{m}");
        // No GPU part in the segment (older than ABI 1.2): no GPU section.
        assert!(!m.contains("GPU"), "{m}");
    }

    #[test]
    fn the_gpu_section_is_the_summarys_line_and_its_gap_causes() {
        use syncspy_read::report::{GapCauseReport, Gpu, GpuDevice, IdleStats};
        let mut p = ProcessReport {
            pid: 7,
            cmdline: "python train.py".into(),
            wall_ns: 1_000_000_000,
            ..ProcessReport::default()
        };
        p.gpu = Gpu {
            busy_fraction: Some(0.75),
            measured: true,
            state: Some("tracing".into()),
            mode: Some("on".into()),
            min_gap_ns: 10_000,
            idle: IdleStats {
                count: 3,
                total_ns: 2_500_000,
                ..IdleStats::default()
            },
            devices: vec![GpuDevice {
                span_ns: 10_000_000,
                busy_ns: 7_500_000,
                ..GpuDevice::default()
            }],
            causes: vec![GapCauseReport {
                cause: syncspy_read::report::IdleCause::parse(
                    "stream_sync",
                    "cudaStreamSynchronize",
                    0,
                    Some("train.py:42 in step".into()),
                ),
                count: 3,
                total_ns: 2_500_000,
                share: 1.0,
            }],
            ..Gpu::default()
        };
        let mut r = Report {
            syncspy_report: 1,
            command: vec!["python".into(), "train.py".into()],
            processes: vec![p.clone()],
            ..Report::default()
        };
        let m = render(&r);
        // The same figures as the text summary's GPU line.
        let text = crate::summary::render(&r);
        let line = text
            .lines()
            .find_map(|l| l.trim_start().strip_prefix("GPU: "))
            .unwrap();
        assert!(m.contains(&format!("**GPU:** {line}\n")), "{m}\n{text}");
        assert!(
            line.starts_with("busy 75.0% of 10.00 ms traced (on)"),
            "{line}"
        );
        assert!(
            m.contains("| stream_sync cudaStreamSynchronize | 100.0% | 3 | 2.50 ms | `train.py:42 in step` |"),
            "{m}"
        );
        // Not measured: the reason, as in the summary.
        p.gpu.busy_fraction = None;
        p.gpu.state = Some("unavailable".into());
        r.processes = vec![p];
        let m = render(&r);
        assert!(
            m.contains("**GPU:** not measured: no activity source (CUPTI not found or refused)"),
            "{m}"
        );
    }
}
