//! Validating the whole manifest: run every scenario under syncspy (or read saved runs), check
//! each against the manifest, and render the result as Markdown tables (what
//! docs/gpu-validation.md records). Used by the `scenario-check` program.

use std::fmt::Write as _;

use serde_json::Value;

use crate::manifest::runner::{saved, verdict, Outcome, Runner};
use crate::manifest::{Manifest, Pattern, Run, Verdict};
use crate::truth::Kind;

/// One run's outcome and verdict.
#[derive(Debug)]
pub struct Checked {
    pub run: Run,
    pub outcome: Outcome,
    pub verdict: Verdict,
}

/// Runs (or, with `runner` `None`, reads from `saved_dir`) every run whose id passes `select`.
pub fn check_all(
    m: &Manifest,
    runner: Option<&Runner>,
    saved_dir: &std::path::Path,
    select: impl Fn(&str) -> bool,
) -> Vec<Checked> {
    m.runs
        .iter()
        .filter(|r| select(&r.id))
        .map(|run| {
            let outcome = match runner {
                Some(rn) => rn.run(m, run, &[]),
                None => saved(saved_dir, &run.id),
            };
            let verdict = verdict(run, &outcome);
            Checked {
                run: run.clone(),
                outcome,
                verdict,
            }
        })
        .collect()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn nonzero_kinds(kinds: &Value) -> String {
    let list: Vec<String> = Kind::STALLS
        .iter()
        .filter_map(|k| {
            let c = kinds[k.name()]["count"].as_u64().unwrap_or(0);
            (c > 0).then(|| format!("{} {c}", k.name()))
        })
        .collect();
    if list.is_empty() {
        "none".into()
    } else {
        list.join(", ")
    }
}

/// The process's stall share of its wall time, from the report.
pub fn stall_share(process: &Value) -> f64 {
    f(&process["stall_ns"]) / f(&process["wall_ns"]).max(1.0)
}

/// Markdown: one summary row per run, the comparisons, then every finding.
pub fn markdown(m: &Manifest, checked: &[Checked]) -> String {
    let mut s = String::new();
    s.push_str(
        "| run | pattern | stall kinds found (count) | syncspy stall ms | share of wall | \
         GPU ms (CUDA events) | loop wall ms | result |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for c in checked {
        let p = c.outcome.process();
        let t = c.outcome.truth.as_ref();
        let gpu = t
            .and_then(|t| t["gpu_ms"].as_object())
            .map(|g| {
                g.iter()
                    .map(|(k, v)| format!("{k} {:.2}", f(v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.2} | {:.1}% | {} | {:.2} | {} |",
            c.run.id,
            match c.run.pattern {
                Pattern::Stalling => "stalling",
                Pattern::Healthy => "healthy",
            },
            p.map(|p| nonzero_kinds(&p["kinds"])).unwrap_or_default(),
            p.map(|p| f(&p["stall_ns"]) / 1e6).unwrap_or(0.0),
            p.map(stall_share).unwrap_or(0.0) * 100.0,
            gpu,
            t.map(|t| f(&t["wall_ms"]["loop"])).unwrap_or(0.0),
            if c.verdict.ok() { "ok" } else { "**FAILED**" },
        );
    }
    if !m.comparisons.is_empty() {
        s.push_str(
            "\n| the same work | stalling: loop wall ms, stall share | healthy: loop wall ms, \
             stall share |\n| --- | --- | --- |\n",
        );
        for cmp in &m.comparisons {
            let find = |id: &str| checked.iter().find(|c| c.run.id == id);
            let cell = |c: Option<&Checked>| match c {
                Some(c) => format!(
                    "{:.2} ms, {:.1}%",
                    c.outcome
                        .truth
                        .as_ref()
                        .map(|t| f(&t["wall_ms"]["loop"]))
                        .unwrap_or(0.0),
                    c.outcome.process().map(stall_share).unwrap_or(0.0) * 100.0
                ),
                None => "not run".into(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} |",
                cmp.title,
                cell(find(&cmp.stalling)),
                cell(find(&cmp.healthy))
            );
        }
    }
    s.push_str("\n| run | check | expected | found | result |\n| --- | --- | --- | --- | --- |\n");
    for c in checked {
        s.push_str(&c.verdict.markdown_rows());
    }
    s
}
