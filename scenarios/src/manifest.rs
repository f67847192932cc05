//! `scenarios/manifest.toml` (parsed by the `syncspy-manifest` crate) and the checks of one
//! run's report against it.
//!
//! [`check`] compares one run's report process with the manifest and the truth line: the
//! program's own account must match the manifest (it did what the manifest says), syncspy's
//! counts and bytes must equal the account exactly (per kind and per non-stalling API),
//! syncspy's time per kind must lie inside the program's own timing of the same calls (the
//! hook runs inside it), and each stall rule must hold. [`runner`] runs scenarios under
//! `syncspy run` and collects what `check` needs.
//!
//! The `gpu_idle` rules need a run traced throughout (`SYNCSPY_GPU_IDLE=on`, the runner's
//! `trace_gpu`): a run made without asking for it has them skipped, and a run that asked but
//! whose report shows another mode fails them.

use serde_json::Value;

pub use syncspy_manifest::*;

/// One comparison of expected and found.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub what: String,
    pub expected: String,
    pub found: String,
    pub ok: bool,
}

/// Everything checked for one run.
#[derive(Debug, Clone, Default)]
pub struct Verdict {
    pub id: String,
    pub findings: Vec<Finding>,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        !self.findings.is_empty() && self.findings.iter().all(|f| f.ok)
    }

    fn push(&mut self, what: impl Into<String>, expected: String, found: String, ok: bool) {
        self.findings.push(Finding {
            what: what.into(),
            expected,
            found,
            ok,
        });
    }

    pub fn failures(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| !f.ok)
    }

    /// Markdown table rows: `| run | check | expected | found | ok |`.
    pub fn markdown_rows(&self) -> String {
        self.findings
            .iter()
            .map(|f| {
                format!(
                    "| {} | {} | {} | {} | {} |\n",
                    self.id,
                    f.what,
                    f.expected,
                    f.found,
                    if f.ok { "ok" } else { "**MISMATCH**" }
                )
            })
            .collect()
    }
}

/// Most time per call that the program's own timing may add to syncspy's (see [`check`]).
pub const OUTSIDE_HOOK_NS: u64 = 5_000_000;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// The frames of a report process's top call site, joined with ` | `.
pub fn top_site(process: &Value) -> String {
    process["sites"][0]["frames"]
        .as_array()
        .map(|fr| {
            fr.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .unwrap_or_default()
}

/// Checks one run: `truth` is the program's ground-truth line, `process` the report's entry
/// for its process (`processes[i]` of a syncspy report); `trace_gpu`: whether the run was
/// asked to trace GPU activity throughout (`SYNCSPY_GPU_IDLE=on`).
pub fn check(run: &Run, truth: &Value, process: &Value, trace_gpu: bool) -> Verdict {
    let mut v = Verdict {
        id: run.id.clone(),
        findings: Vec::new(),
    };
    let args = truth_args(truth);
    check_process(&mut v, truth, process);
    check_sites_listed_once(&mut v, process);
    check_stall_kinds(&mut v, run, &args, truth, process);
    check_non_stall_calls(&mut v, run, &args, truth, process);
    if let Some(site) = &run.site {
        check_top_site(&mut v, site, process);
    }
    for rule in &run.stall {
        check_stall_rule(&mut v, rule, truth, process, trace_gpu);
    }
    if let Some(rule) = &run.gpu_idle {
        check_gpu_idle(&mut v, rule, run.site.as_deref(), &args, process, trace_gpu);
    }
    v
}

/// The program's own data checks passed; its process exited 0 and dropped no event.
fn check_process(v: &mut Verdict, truth: &Value, process: &Value) {
    v.push(
        "program's data checks",
        "ok".into(),
        truth["checks"].to_string(),
        truth["ok"] == true,
    );
    let status = &process["exit_status"];
    v.push(
        "process",
        "exited 0, 0 dropped events".into(),
        format!(
            "{} {}, {} dropped",
            process["state"].as_str().unwrap_or("?"),
            status,
            u(&process["dropped_events"])
        ),
        status.as_i64() == Some(0) && u(&process["dropped_events"]) == 0,
    );
}

/// Sites that print alike are one row, in every view that lists them.
fn check_sites_listed_once(v: &mut Verdict, process: &Value) {
    let sites = process["sites"]
        .as_array()
        .map_or(&[][..], |v| v.as_slice());
    let mut seen = std::collections::HashSet::new();
    let alike: Vec<String> = sites
        .iter()
        .filter(|s| {
            !seen.insert((
                s["kind"].to_string(),
                s["api"].to_string(),
                s["frames"].to_string(),
            ))
        })
        .map(|s| format!("{} {} at {}", s["kind"], s["api"], s["location"]))
        .collect();
    v.push(
        "call sites listed once (no two print alike)",
        "none twice".into(),
        if alike.is_empty() {
            "none twice".into()
        } else {
            format!("twice: {}", alike.join("; "))
        },
        alike.is_empty(),
    );
}

/// Each stall kind's count (manifest = program = syncspy), bytes and time.
fn check_stall_kinds(
    v: &mut Verdict,
    run: &Run,
    args: &std::collections::BTreeMap<String, u64>,
    truth: &Value,
    process: &Value,
) {
    for kind in Kind::STALLS.map(Kind::name) {
        let expected = match run.counts.get(kind) {
            Some(c) => c.eval(args).map_err(|e| e.0),
            None => Ok(0),
        };
        let t = &truth["kinds"][kind];
        let r = &process["kinds"][kind];
        let (tc, rc) = (u(&t["count"]), u(&r["count"]));
        let (tb, rb) = (u(&t["bytes"]), u(&r["bytes"]));
        match expected {
            Ok(e) => v.push(
                format!("{kind} count (manifest = program = syncspy)"),
                e.to_string(),
                format!("program {tc}, syncspy {rc}"),
                e == tc && tc == rc,
            ),
            Err(msg) => v.push(format!("{kind} count"), msg, String::new(), false),
        }
        if tb > 0 || rb > 0 {
            v.push(
                format!("{kind} bytes"),
                tb.to_string(),
                rb.to_string(),
                tb == rb,
            );
        }
        if tc > 0 {
            // The hook runs inside the program's own timing of the same calls: never more,
            // and less only by what happens outside the hook (the program's timer, a
            // preemption between the two clock reads: up to a scheduler slice per call) and
            // by syncspy's own work (`overhead_ns`: its start, CUPTI's included, in the
            // process's first hooked call, which may be one of these).
            let (tt, rt) = (u(&t["total_ns"]), u(&r["total_ns"]));
            let floor = tt
                .saturating_sub(tc * OUTSIDE_HOOK_NS)
                .saturating_sub(u(&process["overhead_ns"]));
            v.push(
                format!("{kind} time inside the program's own timing"),
                format!("{} ..= {}", ms(floor), ms(tt)),
                ms(rt),
                rt <= tt && rt >= floor && rt > 0,
            );
        }
    }
}

/// Each non-stalling API's count (manifest = program = syncspy) and bytes.
fn check_non_stall_calls(
    v: &mut Verdict,
    run: &Run,
    args: &std::collections::BTreeMap<String, u64>,
    truth: &Value,
    process: &Value,
) {
    let no_calls = serde_json::Map::new();
    let truth_quiet = truth["non_stall"].as_object().unwrap_or(&no_calls);
    let mut apis: Vec<&String> = run.non_stall.keys().collect();
    apis.extend(
        truth_quiet
            .keys()
            .filter(|a| !run.non_stall.contains_key(*a)),
    );
    for api in apis {
        let expected = run
            .non_stall
            .get(api)
            .map_or(Ok(0), |c| c.eval(args).map_err(|e| e.0));
        let t = &truth["non_stall"][api];
        let r = &process["non_stall_calls"][api];
        let (tc, rc) = (u(&t["count"]), u(&r["count"]));
        match expected {
            Ok(e) => v.push(
                format!("non-stalling {api}"),
                e.to_string(),
                format!("program {tc}, syncspy {rc}"),
                e == tc && tc == rc,
            ),
            Err(msg) => v.push(format!("non-stalling {api}"), msg, String::new(), false),
        }
        let (tb, rb) = (u(&t["bytes"]), u(&r["bytes"]));
        v.push(
            format!("non-stalling {api} bytes"),
            tb.to_string(),
            rb.to_string(),
            tb == rb,
        );
    }
}

/// The top call site names `site`, in its frames and in its location.
fn check_top_site(v: &mut Verdict, site: &str, process: &Value) {
    let top = top_site(process);
    let found = top.contains(site);
    v.push(
        "top call site",
        format!("names {site}"),
        if found {
            format!("{site} found")
        } else {
            top.chars().take(120).collect()
        },
        found,
    );
    // And the site is shown by that frame: the first in the program's own code.
    let loc = process["sites"][0]["location"].as_str().unwrap_or("");
    v.push(
        "top call site's location",
        format!("names {site}"),
        loc.chars().take(120).collect(),
        loc.contains(site),
    );
}

/// The stall of the rule's kinds against the GPU work the program timed.
fn check_stall_rule(
    v: &mut Verdict,
    rule: &StallRule,
    truth: &Value,
    process: &Value,
    trace_gpu: bool,
) {
    let sum = |field: &str| -> u64 {
        rule.kinds
            .iter()
            .map(|k| u(&process["kinds"][k.as_str()][field]))
            .sum()
    };
    let (stall, calls) = (sum("total_ns") as f64 / 1e6, sum("count") as f64);
    // Waiting hidden by syncspy's own start (CUPTI's loading in the first hooked call,
    // while the GPU already works) counts toward the lower bound.
    let own_ms = u(&process["overhead_ns"]) as f64 / 1e6;
    let what = format!("{} stall vs gpu_ms.{}", rule.kinds.join("+"), rule.gpu);
    match truth["gpu_ms"][rule.gpu.as_str()].as_f64() {
        Some(gpu) => {
            let slack = rule.slack_ms + rule.slack_ms_per_call * calls;
            let (lo, hi) = (rule.min * gpu, rule.max * gpu + slack);
            // Traced, every launch also pays CUPTI's cost on the host, whose share of
            // the work grows and whose waits shrink: the lower bound, calibrated
            // untraced, does not hold; a stall longer than the GPU work still fails.
            let (expected, low_ok) = if trace_gpu {
                (
                    format!("<= {hi:.3} ms (gpu {gpu:.3} ms; traced: no lower bound)"),
                    true,
                )
            } else {
                (
                    format!("{lo:.3} ..= {hi:.3} ms (gpu {gpu:.3} ms)"),
                    stall + own_ms >= lo,
                )
            };
            v.push(
                what,
                expected,
                format!("{stall:.3} ms ({:.2}x)", stall / gpu.max(1e-9)),
                low_ok && stall <= hi,
            );
        }
        None => v.push(what, "a CUDA-event timing".into(), "missing".into(), false),
    }
}

/// The run's GPU idle gaps blamed on `rule.behind`, against the rule. Skipped for a run not
/// asked to trace GPU activity (`trace_gpu` false); failed for one asked whose report shows
/// another mode than `on` (the library did not trace it throughout, or has no GPU part).
fn check_gpu_idle(
    v: &mut Verdict,
    rule: &GpuIdleRule,
    site: Option<&str>,
    args: &std::collections::BTreeMap<String, u64>,
    process: &Value,
    trace_gpu: bool,
) {
    let g = &process["gpu"];
    // Gaps are counted over the whole run only when it was traced throughout.
    if g["mode"] != "on" {
        let mode = match g["mode"].as_str() {
            Some(m) => format!("mode {m}"),
            None => "no GPU tracing mode in the report".to_string(),
        };
        let (expected, found) = if trace_gpu {
            (
                " (SYNCSPY_GPU_IDLE=on was asked)",
                "the run was not traced as asked",
            )
        } else {
            ("", "skipped (GPU tracing not asked)")
        };
        v.push(
            "GPU idle rule",
            format!("a run traced in mode on{expected}"),
            format!("{mode}: {found}"),
            !trace_gpu,
        );
        return;
    }
    v.push(
        "GPU activity measured",
        "true".into(),
        g["measured"].to_string(),
        g["measured"] == true,
    );
    let no_causes = Vec::new();
    let causes: Vec<&Value> = g["causes"]
        .as_array()
        .unwrap_or(&no_causes)
        .iter()
        .filter(|c| rule.behind.iter().any(|k| c["cause"] == k.as_str()))
        .collect();
    let gaps: u64 = causes.iter().map(|c| u(&c["count"])).sum();
    let share: f64 = causes.iter().filter_map(|c| c["share"].as_f64()).sum();
    let behind = rule.behind.join("+");
    let mut bound = |what: &str, c: &Count, at_least: bool| match c.eval(args) {
        Ok(n) if at_least => {
            let lo = (n as f64 * rule.required_fraction()).ceil() as u64;
            v.push(
                format!("GPU idle gaps behind {behind} ({what})"),
                format!(">= {lo}"),
                gaps.to_string(),
                gaps >= lo,
            );
        }
        Ok(n) => v.push(
            format!("GPU idle gaps behind {behind} ({what})"),
            format!("<= {n}"),
            gaps.to_string(),
            gaps <= n,
        ),
        Err(e) => v.push(format!("GPU idle gaps ({what})"), e.0, String::new(), false),
    };
    if let Some(c) = &rule.min_gaps {
        bound("a gap behind each wait", c, true);
    }
    if let Some(c) = &rule.max_gaps {
        bound("the GPU kept fed", c, false);
    }
    if let Some(min) = rule.min_share {
        v.push(
            format!("share of the GPU idle time behind {behind}"),
            format!(">= {:.0}%", min * 100.0),
            format!("{:.1}%", share * 100.0),
            share >= min,
        );
    }
    // The gaps name the program's own line, as its top call site does.
    if let (Some(site), Some(top)) = (site.filter(|_| gaps > 0), causes.first()) {
        let loc = top["location"].as_str().unwrap_or("");
        v.push(
            format!("top {behind} gap cause's site"),
            format!("names {site}"),
            loc.chars().take(120).collect(),
            loc.contains(site),
        );
    }
}

/// Whether `location` names `file:line` exactly (not a longer line number).
fn names_line(location: &str, file_line: &str) -> bool {
    location.match_indices(file_line).any(|(at, m)| {
        !location[at + m.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
    })
}

/// Checks one run of a distributed job: `truths` are the ranks' truth lines (any order),
/// `report` the whole report of the run (its `processes` and `jobs`). Each rank is checked as
/// a run is ([`check`]: with the job's `counts` and `non_stall`, no stall rules, the findings
/// named `rank R: ...`), then `none_of`, the ranks' job identity, and the straggler.
pub fn check_job(job: &JobRun, truths: &[Value], report: &Value, trace_gpu: bool) -> Verdict {
    let mut v = Verdict {
        id: job.id.clone(),
        findings: Vec::new(),
    };
    let first = truths.first().map(truth_args).unwrap_or_default();
    let expected = job.ranks.eval(&first).map_err(|e| e.0);
    check_rank_numbers(&mut v, truths, &expected);
    let no_processes = Vec::new();
    let processes = report["processes"].as_array().unwrap_or(&no_processes);
    let shim = rank_run(job);
    let mut pids = Vec::new();
    for t in truths {
        let pid = t["pid"].as_u64();
        pids.extend(pid);
        let p = processes.iter().find(|p| p["pid"].as_u64() == pid);
        check_rank(&mut v, job, &shim, t, p, &expected, trace_gpu);
    }
    let Some(found) = check_job_in_report(&mut v, report, &pids) else {
        return v;
    };
    if let Some(rule) = &job.straggler {
        check_straggler(&mut v, rule, found, truths, &first);
    }
    v
}

/// One truth line per rank, ranks 0 to the job's size.
fn check_rank_numbers(v: &mut Verdict, truths: &[Value], expected: &Result<u64, String>) {
    let mut ranks: Vec<u64> = truths.iter().filter_map(|t| t["rank"].as_u64()).collect();
    ranks.sort_unstable();
    let all = expected
        .as_ref()
        .is_ok_and(|n| ranks.iter().copied().eq(0..*n) && truths.len() as u64 == *n);
    v.push(
        "ranks (one truth line each)",
        match expected {
            Ok(n) => format!("0..{n}"),
            Err(e) => e.clone(),
        },
        format!("{ranks:?}"),
        all,
    );
}

/// A rank checked as a run is: the job's `counts` and `non_stall`, no stall rules.
fn rank_run(job: &JobRun) -> Run {
    Run {
        id: job.id.clone(),
        scenario: job.scenario.clone(),
        pattern: job.pattern,
        summary: job.summary.clone(),
        args: job.args.clone(),
        sim_time_scale: job.sim_time_scale,
        counts: job.counts.clone(),
        non_stall: job.non_stall.clone(),
        stall: Vec::new(),
        site: None,
        gpu_idle: None,
    }
}

/// One rank (truth line `t`, its process `p` in the report): as a run, `none_of`, and its
/// job identity; findings named `rank R: ...`.
fn check_rank(
    v: &mut Verdict,
    job: &JobRun,
    shim: &Run,
    t: &Value,
    p: Option<&Value>,
    expected: &Result<u64, String>,
    trace_gpu: bool,
) {
    let rank = t["rank"].as_u64().unwrap_or(u64::MAX);
    let pid = t["pid"].as_u64();
    let Some(p) = p else {
        v.push(
            format!("rank {rank}: its process in the report"),
            format!("pid {pid:?}"),
            "missing".into(),
            false,
        );
        return;
    };
    for f in check(shim, t, p, trace_gpu).findings {
        v.push(
            format!("rank {rank}: {}", f.what),
            f.expected,
            f.found,
            f.ok,
        );
    }
    for k in &job.none_of {
        let n = u(&p["kinds"][k.as_str()]["count"]);
        v.push(
            format!("rank {rank}: no {k}"),
            "0".into(),
            n.to_string(),
            n == 0,
        );
    }
    let j = &p["job"];
    let (jr, jw) = (j["rank"].as_u64(), j["world_size"].as_u64());
    v.push(
        format!("rank {rank}: its job in the report"),
        format!("rank {rank} of {}", expected.clone().unwrap_or(0)),
        format!("rank {jr:?} of {jw:?}"),
        jr == Some(rank) && jw.is_some() && jw == expected.clone().ok(),
    );
}

/// The report's job holding these processes, with as many ranks.
fn check_job_in_report<'r>(v: &mut Verdict, report: &'r Value, pids: &[u64]) -> Option<&'r Value> {
    let jobs: &[Value] = report["jobs"].as_array().map_or(&[], Vec::as_slice);
    let found = jobs.iter().find(|j| {
        j["ranks"].as_array().is_some_and(|r| {
            pids.iter()
                .all(|pid| r.iter().any(|x| x["pid"].as_u64() == Some(*pid)))
        })
    });
    let Some(found) = found else {
        v.push(
            "the job in the report (jobs[])",
            format!("one job of pids {pids:?}"),
            format!("{} jobs, none with them all", jobs.len()),
            false,
        );
        return None;
    };
    let seen = found["ranks"].as_array().map_or(0, Vec::len);
    v.push(
        "the job's ranks",
        pids.len().to_string(),
        seen.to_string(),
        seen == pids.len(),
    );
    Some(found)
}

/// The job's straggler, and its site when the rule names one.
fn check_straggler(
    v: &mut Verdict,
    rule: &StragglerRule,
    found: &Value,
    truths: &[Value],
    first: &std::collections::BTreeMap<String, u64>,
) {
    let s = &found["straggler"];
    let want = rule.rank.eval(first).map_err(|e| e.0);
    let got = s["rank"].as_u64();
    v.push(
        "the job's straggler",
        match &want {
            Ok(r) => format!("rank {r}"),
            Err(e) => e.clone(),
        },
        match got {
            Some(r) => format!(
                "rank {r} ({} basis)",
                found["basis"].as_str().unwrap_or("?")
            ),
            None => format!("none ({} basis)", found["basis"].as_str().unwrap_or("?")),
        },
        want.as_ref().ok() == got.as_ref(),
    );
    if let (Some(key), Ok(r)) = (&rule.site, &want) {
        let line = truths
            .iter()
            .find(|t| t["rank"].as_u64() == Some(*r))
            .and_then(|t| t["sites"][key.as_str()].as_str());
        let loc = s["top_site"]["location"].as_str().unwrap_or("");
        v.push(
            "the straggler's site",
            match line {
                Some(l) => format!("names {l}"),
                None => format!("the straggler's truth line has no sites.{key}"),
            },
            loc.chars().take(160).collect(),
            line.is_some_and(|l| names_line(loc, l)),
        );
    }
}

/// Running scenarios under `syncspy run` and collecting the report and truth line of each.
pub mod runner {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use serde_json::Value;

    use super::{check, JobRun, Manifest, Run, Verdict};

    /// Where the programs are and how to run them.
    #[derive(Debug, Clone)]
    pub struct Runner {
        /// The `syncspy` binary.
        pub syncspy: PathBuf,
        /// Folder holding the `scn-*` binaries.
        pub bin_dir: PathBuf,
        /// Use the simulated runtime (`syncspy run --sim`, with each run's time scale).
        pub sim: bool,
        /// Where reports (`<id>.json`), truth (`<id>.truth`) and stderr (`<id>.err`) go.
        pub out_dir: PathBuf,
        /// SYNCSPY_DIR for the runs (None: syncspy's default).
        pub segment_dir: Option<PathBuf>,
        /// Trace GPU activity for the whole run (`SYNCSPY_GPU_IDLE=on`), which the `gpu_idle`
        /// rules need; off: the library's default mode, and those rules are skipped.
        pub trace_gpu: bool,
    }

    /// What one run produced.
    #[derive(Debug, Clone)]
    pub struct Outcome {
        pub truth: Option<Value>,
        pub report: Option<Value>,
        pub exit_code: Option<i32>,
        pub stderr: String,
        /// Whether the run was asked to trace GPU activity throughout ([`Runner::trace_gpu`]):
        /// then its `gpu_idle` rules fail, not skip, when the report shows another mode.
        pub trace_gpu: bool,
    }

    impl Outcome {
        /// The report entry of the program's process (by the truth line's pid).
        pub fn process(&self) -> Option<&Value> {
            let pid = self.truth.as_ref()?["pid"].as_u64()?;
            self.report.as_ref()?["processes"]
                .as_array()?
                .iter()
                .find(|p| p["pid"].as_u64() == Some(pid))
        }
    }

    /// The truth line in a program's stdout.
    pub fn truth_line(stdout: &str) -> Option<Value> {
        truth_lines(stdout).pop()
    }

    /// Every truth line in the output (a job's ranks print one each).
    pub fn truth_lines(stdout: &str) -> Vec<Value> {
        stdout
            .lines()
            .filter(|l| l.starts_with("{\"") && l.contains("\"scenario\""))
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect()
    }

    /// What one run of a distributed job produced.
    #[derive(Debug, Clone)]
    pub struct JobOutcome {
        /// The ranks' truth lines, in the order printed.
        pub truths: Vec<Value>,
        pub report: Option<Value>,
        pub exit_code: Option<i32>,
        pub stderr: String,
        pub trace_gpu: bool,
    }

    /// Checks a job's outcome; a run without a report is itself a failed finding.
    pub fn job_verdict(job: &JobRun, o: &JobOutcome) -> Verdict {
        match &o.report {
            Some(r) => super::check_job(job, &o.truths, r, o.trace_gpu),
            None => Verdict {
                id: job.id.clone(),
                findings: vec![super::Finding {
                    what: "ran".into(),
                    expected: "a report".into(),
                    found: format!(
                        "{} truth lines, exit {:?}: {}",
                        o.truths.len(),
                        o.exit_code,
                        o.stderr.lines().last().unwrap_or("")
                    ),
                    ok: false,
                }],
            },
        }
    }

    impl Runner {
        /// Runs `run` (with `extra` arguments after the manifest's) under syncspy.
        pub fn run(&self, m: &Manifest, run: &Run, extra: &[String]) -> Outcome {
            let args: Vec<String> = run.args.iter().chain(extra).cloned().collect();
            let (stdout, stderr, code, report) =
                self.syncspy_run(&run.id, &run.scenario, run.time_scale(m), &args);
            Outcome {
                truth: truth_line(&stdout),
                report,
                exit_code: code,
                stderr,
                trace_gpu: self.trace_gpu,
            }
        }

        /// Runs a distributed job (its launcher, which starts the ranks) under syncspy.
        pub fn run_job(&self, m: &Manifest, job: &JobRun, extra: &[String]) -> JobOutcome {
            let args: Vec<String> = job.args.iter().chain(extra).cloned().collect();
            let (stdout, stderr, code, report) =
                self.syncspy_run(&job.id, &job.scenario, job.time_scale(m), &args);
            JobOutcome {
                truths: truth_lines(&stdout),
                report,
                exit_code: code,
                stderr,
                trace_gpu: self.trace_gpu,
            }
        }

        /// `syncspy run [--sim] --report <out>/<id>.json -- scn-<scenario> args`: its stdout
        /// (saved as `<id>.truth`), stderr (`<id>.err`), exit code and report.
        fn syncspy_run(
            &self,
            id: &str,
            scenario: &str,
            time_scale: f64,
            args: &[String],
        ) -> (String, String, Option<i32>, Option<Value>) {
            let report = self.out_dir.join(format!("{id}.json"));
            let _ = std::fs::remove_file(&report);
            let mut cmd = Command::new(&self.syncspy);
            cmd.arg("run");
            if self.sim {
                cmd.arg("--sim")
                    .env("SIMCUDA_TIME_SCALE", time_scale.to_string());
            }
            if self.trace_gpu {
                cmd.env("SYNCSPY_GPU_IDLE", "on");
            }
            cmd.arg("--report")
                .arg(&report)
                .arg("--")
                .arg(self.bin_dir.join(format!("scn-{scenario}")))
                .args(args);
            if let Some(d) = &self.segment_dir {
                cmd.env("SYNCSPY_DIR", d);
            }
            let (stdout, stderr, code) = match cmd.output() {
                Ok(o) => (
                    String::from_utf8_lossy(&o.stdout).into_owned(),
                    String::from_utf8_lossy(&o.stderr).into_owned(),
                    o.status.code(),
                ),
                Err(e) => (String::new(), format!("could not start syncspy: {e}"), None),
            };
            let _ = std::fs::write(self.out_dir.join(format!("{id}.truth")), &stdout);
            let _ = std::fs::write(self.out_dir.join(format!("{id}.err")), &stderr);
            (stdout, stderr, code, read_json(&report))
        }
    }

    /// Reads a report and truth saved by [`Runner::run`] (for checking runs made elsewhere).
    /// Whether GPU tracing was asked is not saved: the `gpu_idle` rules of a saved run are
    /// checked when its report shows mode on, and skipped otherwise.
    pub fn saved(dir: &Path, id: &str) -> Outcome {
        let stdout = std::fs::read_to_string(dir.join(format!("{id}.truth"))).unwrap_or_default();
        Outcome {
            truth: truth_line(&stdout),
            report: read_json(&dir.join(format!("{id}.json"))),
            exit_code: None,
            stderr: std::fs::read_to_string(dir.join(format!("{id}.err"))).unwrap_or_default(),
            trace_gpu: false,
        }
    }

    fn read_json(path: &Path) -> Option<Value> {
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
    }

    /// Checks an outcome; a missing truth line or process is itself a failed finding.
    pub fn verdict(run: &Run, o: &Outcome) -> Verdict {
        match (&o.truth, o.process()) {
            (Some(t), Some(p)) => check(run, t, p, o.trace_gpu),
            _ => {
                let mut v = Verdict {
                    id: run.id.clone(),
                    findings: Vec::new(),
                };
                v.findings.push(super::Finding {
                    what: "ran".into(),
                    expected: "a truth line and its process in the report".into(),
                    found: format!(
                        "truth {}, report {}, exit {:?}: {}",
                        o.truth.is_some(),
                        o.report.is_some(),
                        o.exit_code,
                        o.stderr.lines().last().unwrap_or("")
                    ),
                    ok: false,
                });
                v
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_with(counts: &str, rule: &str) -> Run {
        let text = format!(
            "version = 1\n[[run]]\nid = \"a\"\nscenario = \"item-in-loop\"\n\
             pattern = \"stalling\"\nsummary = \"s\"\nsite = \"main.rs\"\n[run.counts]\n{counts}\n\
             [run.non_stall]\ncudaMemcpyAsync = \"iters\"\n{rule}"
        );
        Manifest::parse(&text).unwrap().runs.remove(0)
    }

    use serde_json::json;

    fn stats(count: u64, total_ms: f64) -> Value {
        json!({"count": count, "bytes": 0, "total_ns": (total_ms * 1e6) as u64})
    }

    #[test]
    fn check_finds_every_kind_of_mismatch() {
        let run = run_with(
            "stream_sync = \"iters\"\ndevice_sync = 1",
            "[[run.stall]]\nkinds = [\"stream_sync\"]\ngpu = \"work\"\nmin = 0.8\nmax = 2.0\nslack_ms = 1.0\n",
        );
        let truth = serde_json::json!({
            "scenario": "item-in-loop", "pid": 7, "args": {"iters": 10}, "ok": true,
            "checks": {"count": true},
            "kinds": {"stream_sync": stats(10, 21.0), "device_sync": stats(1, 0.1)},
            "non_stall": {"cudaMemcpyAsync": {"count": 10, "bytes": 40}},
            "gpu_ms": {"work": 20.0}
        });
        let good = serde_json::json!({
            "pid": 7, "state": "exited", "exit_status": 0, "dropped_events": 0,
            "kinds": {"stream_sync": stats(10, 20.5), "device_sync": stats(1, 0.05)},
            "non_stall_calls": {"cudaMemcpyAsync": {"count": 10, "bytes": 40}},
            "sites": [{"frames": ["wrapper (lib.rs:1)", "main (main.rs:9)"], "location": "main (main.rs:9)"}]
        });
        let v = check(&run, &truth, &good, false);
        assert!(v.ok(), "{:#?}", v.failures().collect::<Vec<_>>());

        let failing = |mutate: &dyn Fn(&mut Value), needle: &str| {
            let mut p = good.clone();
            mutate(&mut p);
            let v = check(&run, &truth, &p, false);
            let failed: Vec<_> = v.failures().map(|f| f.what.clone()).collect();
            assert!(
                failed.iter().any(|w| w.contains(needle)),
                "{needle}: {failed:?}"
            );
        };
        failing(
            &|p| p["kinds"]["stream_sync"]["count"] = 9.into(),
            "stream_sync count",
        );
        failing(
            &|p| p["kinds"]["memcpy_pageable"] = stats(1, 1.0),
            "memcpy_pageable count",
        );
        failing(
            &|p| p["kinds"]["stream_sync"] = stats(10, 10.0),
            "stall vs gpu_ms.work",
        );
        failing(
            &|p| p["kinds"]["stream_sync"] = stats(10, 25.0),
            "inside the program",
        );
        failing(
            &|p| p["non_stall_calls"]["cudaMemcpyAsync"]["bytes"] = 4.into(),
            "bytes",
        );
        failing(&|p| p["dropped_events"] = 3.into(), "process");
        failing(&|p| p["sites"] = json!([]), "top call site");
        failing(
            &|p| p["sites"][0]["location"] = "wrapper (lib.rs:1)".into(),
            "top call site's location",
        );
        // Traced, CUPTI's cost on the host shortens the waits: only the upper bound holds.
        let stall_failed = |p: &Value, traced: bool| {
            check(&run, &truth, p, traced)
                .failures()
                .any(|f| f.what.contains("stall vs"))
        };
        let mut short = good.clone();
        short["kinds"]["stream_sync"] = stats(10, 10.0);
        assert!(stall_failed(&short, false));
        assert!(!stall_failed(&short, true));
        let mut long = good.clone();
        long["kinds"]["stream_sync"] = stats(10, 100_000.0);
        assert!(stall_failed(&long, true));
        // The program itself must have done what the manifest says.
        let mut t2 = truth.clone();
        t2["args"]["iters"] = 11.into();
        assert!(!check(&run, &t2, &good, false).ok());
    }

    /// A job of 2 ranks, rank 1 late: its manifest entry, truth lines and report.
    fn job_case() -> (JobRun, Vec<Value>, Value) {
        let text = "version = 1\n[[run]]\nid = \"a\"\nscenario = \"item-in-loop\"\n\
                    pattern = \"stalling\"\nsummary = \"s\"\n\
                    [[job]]\nid = \"j\"\nscenario = \"ddp-straggler\"\npattern = \"stalling\"\n\
                    summary = \"s\"\nranks = \"ranks\"\nnone_of = [\"poll_wait\"]\n\
                    [job.counts]\nstream_sync = \"steps + steps * is_late\"\n\
                    [job.straggler]\nrank = \"late\"\nsite = \"late_sync\"\n";
        let job = Manifest::parse(text).unwrap().jobs.remove(0);
        let truth = |rank: u64| {
            let late = rank == 1;
            json!({
                "scenario": "ddp-straggler", "pid": 10 + rank, "rank": rank, "ok": true,
                "checks": {"allreduce_sum": true},
                "args": {"ranks": 2, "late": 1, "steps": 3, "rank": rank, "is_late": late},
                "kinds": {"stream_sync": stats(if late { 6 } else { 3 }, 30.0)},
                "sites": if late { json!({"late_sync": "scn_ddp_straggler.rs:109"}) } else { json!({}) },
            })
        };
        let process = |rank: u64| {
            json!({
                "pid": 10 + rank, "state": "exited", "exit_status": 0, "dropped_events": 0,
                "kinds": {"stream_sync": stats(if rank == 1 { 6 } else { 3 }, 29.0)},
                "job": {"id": "x", "rank": rank, "world_size": 2},
                "sites": [{"frames": ["main (scn_ddp_straggler.rs:120)"]}],
            })
        };
        let report = json!({
            "processes": [process(0), process(1)],
            "jobs": [{"id": "x", "basis": "collective_wait",
                "ranks": [{"rank": 0, "pid": 10}, {"rank": 1, "pid": 11}],
                "straggler": {"rank": 1, "pid": 11, "top_site": {"kind": "stream_sync",
                    "location": "scn_ddp_straggler::main (/w/scenarios/src/bin/scn_ddp_straggler.rs:109)"}}}],
        });
        (job, vec![truth(1), truth(0)], report)
    }

    #[test]
    fn a_job_is_checked_rank_by_rank_and_by_its_straggler() {
        let (job, truths, report) = job_case();
        let v = check_job(&job, &truths, &report, false);
        assert!(v.ok(), "{:#?}", v.failures().collect::<Vec<_>>());
        assert!(v
            .findings
            .iter()
            .any(|f| f.what == "rank 1: stream_sync count (manifest = program = syncspy)"));

        let failing = |truths: &[Value], report: &Value, needle: &str| {
            let v = check_job(&job, truths, report, false);
            let failed: Vec<_> = v.failures().map(|f| f.what.clone()).collect();
            assert!(
                failed.iter().any(|w| w.contains(needle)),
                "{needle}: {failed:?}"
            );
        };
        let with = |edit: &dyn Fn(&mut Value)| {
            let mut r = report.clone();
            edit(&mut r);
            r
        };
        failing(
            &truths,
            &with(&|r| r["jobs"][0]["straggler"]["rank"] = 0.into()),
            "the job's straggler",
        );
        failing(
            &truths,
            &with(&|r| r["jobs"][0]["straggler"] = Value::Null),
            "the job's straggler",
        );
        let other_line = "main (/w/scenarios/src/bin/scn_ddp_straggler.rs:1090)";
        failing(
            &truths,
            &with(&|r| r["jobs"][0]["straggler"]["top_site"]["location"] = other_line.into()),
            "the straggler's site",
        );
        failing(
            &truths,
            &with(&|r| r["processes"][0]["kinds"]["poll_wait"] = stats(2, 300.0)),
            "rank 0: no poll_wait",
        );
        failing(
            &truths,
            &with(&|r| r["processes"][1]["kinds"]["stream_sync"] = stats(3, 20.0)),
            "rank 1: stream_sync count",
        );
        failing(
            &truths,
            &with(&|r| r["processes"][1]["job"]["rank"] = 0.into()),
            "rank 1: its job",
        );
        failing(
            &truths,
            &with(&|r| r["jobs"] = json!([])),
            "the job in the report",
        );
        failing(
            &truths,
            &with(&|r| {
                let p = r["processes"][0].clone();
                r["processes"] = json!([p]);
            }),
            "rank 1: its process",
        );
        failing(&truths[..1], &report, "ranks");
        let mut no_site = truths.clone();
        no_site[0]["sites"] = json!({});
        failing(&no_site, &report, "the straggler's site");
        assert!(names_line("f (a.rs:109)", "a.rs:109"));
        assert!(!names_line("f (a.rs:1090)", "a.rs:109"));
        assert!(names_line("a.rs:1090 a.rs:109", "a.rs:109"));
    }

    /// The truth line of a 10-step loop with a `.item()`-like wait each step.
    fn loop_truth() -> Value {
        json!({
            "scenario": "item-in-loop", "pid": 7, "args": {"iters": 10}, "ok": true,
            "checks": {"count": true},
            "kinds": {"stream_sync": stats(10, 21.0), "device_sync": stats(1, 0.1)},
            "non_stall": {"cudaMemcpyAsync": {"count": 10, "bytes": 40}},
        })
    }

    /// syncspy's report of that loop's process, with `gpu` as its GPU section.
    fn loop_process(gpu: Value) -> Value {
        json!({
            "pid": 7, "state": "exited", "exit_status": 0, "dropped_events": 0,
            "kinds": {"stream_sync": stats(10, 20.5), "device_sync": stats(1, 0.05)},
            "non_stall_calls": {"cudaMemcpyAsync": {"count": 10, "bytes": 40}},
            "sites": [{"frames": ["main (main.rs:9)"], "location": "main (main.rs:9)"}],
            "gpu": gpu,
        })
    }

    #[test]
    fn gpu_idle_rules_count_the_gaps_behind_the_waits_and_their_share() {
        let stalling = run_with(
            "stream_sync = \"iters\"\ndevice_sync = 1",
            "[run.gpu_idle]\nbehind = [\"stream_sync\"]\nmin_gaps = \"iters\"\nfraction = 0.8\n\
             min_share = 0.9\n",
        );
        let truth = loop_truth();
        let cause = |cause: &str, count: u64, share: f64, loc: &str| json!({"cause": cause, "count": count, "share": share, "location": loc});
        let process =
            |causes: Value| loop_process(json!({"measured": true, "mode": "on", "causes": causes}));
        let failed = |run: &Run, p: &Value| -> Vec<String> {
            check(run, &truth, p, true)
                .failures()
                .map(|f| f.what.clone())
                .collect()
        };
        // 8 of 10 gaps (80% required), 95% of the idle time, at the program's line.
        let good = process(json!([
            cause("stream_sync", 8, 0.95, "main.rs:9"),
            cause("host_busy_elsewhere", 1, 0.05, ""),
        ]));
        assert!(
            failed(&stalling, &good).is_empty(),
            "{:?}",
            failed(&stalling, &good)
        );
        let few = process(json!([cause("stream_sync", 7, 0.95, "main.rs:9")]));
        assert!(failed(&stalling, &few)[0].contains("a gap behind each wait"));
        let elsewhere = process(json!([
            cause("stream_sync", 9, 0.5, "main.rs:9"),
            cause("host_busy_elsewhere", 9, 0.5, ""),
        ]));
        assert!(failed(&stalling, &elsewhere)[0].contains("share of the GPU idle time"));
        let wrong_line = process(json!([cause("stream_sync", 9, 1.0, "lib.rs:3")]));
        assert!(failed(&stalling, &wrong_line)[0].contains("gap cause's site"));
        let unmeasured = process(json!([]));
        let mut unmeasured = unmeasured;
        unmeasured["gpu"]["measured"] = false.into();
        assert!(failed(&stalling, &unmeasured)
            .iter()
            .any(|f| f.contains("GPU activity measured")));
        // A healthy run: at most one gap behind the kind.
        let healthy = run_with(
            "stream_sync = \"iters\"\ndevice_sync = 1",
            "[run.gpu_idle]\nbehind = [\"stream_sync\"]\nmax_gaps = 1\n",
        );
        let fed = process(json!([cause("host_busy_elsewhere", 3, 1.0, "")]));
        assert!(failed(&healthy, &fed).is_empty());
        assert!(failed(&healthy, &good)[0].contains("the GPU kept fed"));
        // A run not asked to trace throughout (the default duty mode): the rules are
        // skipped, and the verdict says so.
        let mut duty = few.clone();
        duty["gpu"]["mode"] = "duty".into();
        let v = check(&stalling, &truth, &duty, false);
        assert!(v.ok(), "{:?}", v.failures().collect::<Vec<_>>());
        assert!(v.markdown_rows().contains("mode duty: skipped"));
    }

    #[test]
    fn gpu_idle_rules_fail_when_tracing_was_asked_but_the_run_was_not_traced() {
        let stalling = run_with(
            "stream_sync = \"iters\"\ndevice_sync = 1",
            "[run.gpu_idle]\nbehind = [\"stream_sync\"]\nmin_gaps = \"iters\"\nfraction = 0.8\n",
        );
        let truth = loop_truth();
        let process = loop_process;
        for (gpu, found) in [
            // The library fell back to its default duty mode, or tracing was unavailable.
            (json!({"measured": true, "mode": "duty"}), "mode duty"),
            (json!({"measured": false, "mode": "off"}), "mode off"),
            // No GPU part at all.
            (Value::Null, "no GPU tracing mode in the report"),
        ] {
            let p = process(gpu);
            // Asked: a failure that says why.
            let v = check(&stalling, &truth, &p, true);
            let failed: Vec<&Finding> = v.failures().collect();
            assert_eq!(failed.len(), 1, "{failed:?}");
            assert_eq!(failed[0].what, "GPU idle rule");
            assert!(
                failed[0].expected.contains("SYNCSPY_GPU_IDLE=on"),
                "{failed:?}"
            );
            assert!(
                failed[0].found.starts_with(found)
                    && failed[0].found.contains("not traced as asked"),
                "{failed:?}"
            );
            assert!(v.markdown_rows().contains("**MISMATCH**"));
            // Not asked: skipped, as before.
            let v = check(&stalling, &truth, &p, false);
            assert!(v.ok(), "{:?}", v.failures().collect::<Vec<_>>());
            assert!(v.markdown_rows().contains(&format!("{found}: skipped")));
        }
        // The runner's outcome carries what was asked into its verdict.
        let outcome = |trace_gpu: bool| runner::Outcome {
            truth: Some(truth.clone()),
            report: Some(json!({"processes": [process(json!({"mode": "duty"}))]})),
            exit_code: Some(0),
            stderr: String::new(),
            trace_gpu,
        };
        assert!(!runner::verdict(&stalling, &outcome(true)).ok());
        assert!(runner::verdict(&stalling, &outcome(false)).ok());
    }

    #[test]
    fn gpu_idle_rules_that_cannot_hold_are_refused_when_parsed() {
        let manifest = |rule: &str| {
            format!(
                "version = 1\n[[run]]\nid = \"loop-a\"\nscenario = \"item-in-loop\"\n\
                 pattern = \"stalling\"\nsummary = \"s\"\n[run.gpu_idle]\n\
                 behind = [\"stream_sync\"]\n{rule}"
            )
        };
        // A fraction is of min_gaps: without it, it says nothing.
        let e = Manifest::parse(&manifest("fraction = 0.5\nmax_gaps = 1\n")).unwrap_err();
        assert!(
            matches!(&e, ManifestError::Invalid { entry, .. } if entry == "loop-a"),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("scenario \"item-in-loop\"")
                && msg.contains("fraction = 0.5 without min_gaps"),
            "{msg}"
        );
        // More gaps required than allowed.
        let e = Manifest::parse(&manifest("min_gaps = 5\nmax_gaps = 2\n")).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("loop-a")
                && msg.contains("scenario \"item-in-loop\"")
                && msg.contains("min_gaps (5) > max_gaps (2)"),
            "{msg}"
        );
        // What can hold still parses: equal bounds, a fraction with min_gaps, counts that
        // depend on the run's arguments (known only then).
        for ok in [
            "min_gaps = 2\nmax_gaps = 2\n",
            "min_gaps = \"iters\"\nfraction = 0.5\n",
            "min_gaps = \"iters\"\nmax_gaps = 1\n",
            "max_gaps = 1\n",
        ] {
            let m = Manifest::parse(&manifest(ok)).unwrap_or_else(|e| panic!("{ok}: {e}"));
            let rule = m.runs[0].gpu_idle.as_ref().unwrap();
            let f = if ok.contains("fraction") { 0.5 } else { 1.0 };
            assert_eq!(rule.required_fraction(), f, "{ok}");
        }
        // And the bundled manifest.
        Manifest::bundled();
    }
}
