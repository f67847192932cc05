//! `scenarios/manifest.toml`: what syncspy must report for each scenario run, relative to the
//! ground truth the program prints; its parser, and the checks of one run's report against it.
//!
//! ```text
//! version = 1
//! [defaults]
//! sim_time_scale = 1.0                  # SIMCUDA_TIME_SCALE of --sim runs
//!
//! [[run]]
//! id = "sync-small-gemm-async"          # unique; the report and truth files are named by it
//! scenario = "sync-small-gemm"          # the program scn-<scenario>
//! pattern = "healthy"                   # or "stalling"
//! summary = "..."                       # one line for people
//! args = ["--async"]
//! sim_time_scale = 0.1                  # optional, overrides the default
//! [run.counts]                          # exact count per stall kind; kinds not listed: 0
//! device_sync = 1                       # an integer, or an expression over the truth
//! implicit_sync = "3"                   # line's args: "iters + 1", "iters * threads"
//! [run.non_stall]                       # exact counts of calls that must not stall, by API
//! [[run.stall]]                         # time: the kinds' total vs a CUDA-event timing
//! kinds = ["device_sync"]
//! gpu = "loop"                          # a key of the truth line's gpu_ms
//! min = 0.5                             # stall >= min * gpu            (strict lower bound)
//! max = 2.0                             # stall <= max * gpu + slack (generous upper bound)
//! slack_ms = 20.0                       # slack: slack_ms + slack_ms_per_call * calls
//! slack_ms_per_call = 5.0
//! site = "scn_item_in_loop.rs"          # optional: in the top call site's frames
//!
//! [[comparison]]                        # the same work done two ways, for `syncspy demo`
//! title = "..."
//! stalling = "sync-small-gemm"          # run ids
//! healthy = "sync-small-gemm-async"
//! ```
//!
//! [`check`] compares one run's report process with the manifest and the truth line: the
//! program's own account must match the manifest (it did what the manifest says), syncspy's
//! counts and bytes must equal the account exactly (per kind and per non-stalling API),
//! syncspy's time per kind must lie inside the program's own timing of the same calls (the
//! hook runs inside it), and each stall rule must hold. [`runner`] runs scenarios under
//! `syncspy run` and collects what `check` needs.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::truth::Kind;
use crate::SCENARIOS;

/// The manifest shipped with the scenarios (`scenarios/manifest.toml`).
pub const BUNDLED: &str = include_str!("../manifest.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub version: u32,
    #[serde(default)]
    pub defaults: Defaults,
    #[serde(rename = "run")]
    pub runs: Vec<Run>,
    #[serde(rename = "comparison", default)]
    pub comparisons: Vec<Comparison>,
    /// PyTorch scenarios (scenarios/python/), checked on a GPU machine only.
    #[serde(rename = "python", default)]
    pub python: Vec<PythonRun>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    #[serde(default = "one")]
    pub sim_time_scale: f64,
}

fn one() -> f64 {
    1.0
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            sim_time_scale: 1.0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    Stalling,
    Healthy,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Stalling => "stalling",
            Pattern::Healthy => "healthy",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Run {
    pub id: String,
    pub scenario: String,
    pub pattern: Pattern,
    pub summary: String,
    #[serde(default)]
    pub args: Vec<String>,
    pub sim_time_scale: Option<f64>,
    #[serde(default)]
    pub counts: BTreeMap<String, Count>,
    #[serde(default)]
    pub non_stall: BTreeMap<String, Count>,
    #[serde(default)]
    pub stall: Vec<StallRule>,
    /// A substring the top call site's frames must contain (the program's own source file).
    pub site: Option<String>,
}

/// An expected count: a number, or a sum of products of numbers and the truth line's `args`
/// (`"iters + 1"`, `"iters * threads"`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Count {
    Exact(u64),
    Expr(String),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StallRule {
    pub kinds: Vec<String>,
    pub gpu: String,
    pub min: f64,
    pub max: f64,
    /// Allowance on the upper bound, in all.
    #[serde(default)]
    pub slack_ms: f64,
    /// Allowance on the upper bound per call of the kinds (wake-up latency of a loaded host).
    #[serde(default)]
    pub slack_ms_per_call: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Comparison {
    pub title: String,
    pub stalling: String,
    pub healthy: String,
}

/// A PyTorch scenario: `python3 scenarios/python/<script> --iters N`, run at two iteration
/// counts; the report's counts must differ by exactly `per_iter` times the difference (torch
/// makes calls of its own at start-up), and the stall per iteration must relate to the
/// script's CUDA-event time per iteration as `stall` says.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonRun {
    pub id: String,
    pub script: String,
    pub pattern: Pattern,
    pub summary: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Stall kinds: calls per iteration; kinds not listed must not grow.
    #[serde(default)]
    pub per_iter: BTreeMap<String, u64>,
    /// Non-stalling calls per iteration, by API; APIs not listed are not checked.
    #[serde(default)]
    pub non_stall_per_iter: BTreeMap<String, u64>,
    #[serde(default)]
    pub stall: Vec<StallRule>,
    /// A substring the top call site's frames must contain, if any.
    pub site: Option<String>,
}

/// Why a manifest could not be used.
#[derive(Debug, Clone, PartialEq)]
pub enum ManifestError {
    /// Not valid TOML or not the expected shape; the message names the line.
    Parse(String),
    /// Valid TOML with a wrong value: the run (or comparison) and what is wrong.
    Invalid { entry: String, reason: String },
    /// The file could not be read.
    Io(String),
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManifestError::Parse(m) => write!(f, "manifest: {m}"),
            ManifestError::Invalid { entry, reason } => write!(f, "manifest: {entry}: {reason}"),
            ManifestError::Io(m) => write!(f, "manifest: {m}"),
        }
    }
}

impl std::error::Error for ManifestError {}

/// Why an expected count could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountError(pub String);

impl Count {
    /// The value for a run whose truth line has these `args` (numbers and booleans).
    pub fn eval(&self, args: &BTreeMap<String, u64>) -> Result<u64, CountError> {
        let expr = match self {
            Count::Exact(n) => return Ok(*n),
            Count::Expr(e) => e,
        };
        let mut sum = 0u64;
        for term in expr.split('+') {
            let mut product = 1u64;
            for factor in term.split('*') {
                let f = factor.trim();
                let v = match f.parse::<u64>() {
                    Ok(v) => v,
                    Err(_) => *args
                        .get(f)
                        .ok_or_else(|| CountError(format!("{expr:?}: unknown name {f:?}")))?,
                };
                product = product
                    .checked_mul(v)
                    .ok_or_else(|| CountError(format!("{expr:?}: overflow")))?;
            }
            sum = sum
                .checked_add(product)
                .ok_or_else(|| CountError(format!("{expr:?}: overflow")))?;
        }
        Ok(sum)
    }
}

/// The numeric arguments of a truth line (`args`; booleans as 0 or 1).
pub fn truth_args(truth: &Value) -> BTreeMap<String, u64> {
    truth["args"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| {
                    let n = v.as_u64().or_else(|| v.as_bool().map(u64::from))?;
                    Some((k.clone(), n))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn invalid(entry: &str, reason: impl Into<String>) -> ManifestError {
    ManifestError::Invalid {
        entry: entry.to_string(),
        reason: reason.into(),
    }
}

fn check_rule(entry: &str, r: &StallRule) -> Result<(), ManifestError> {
    for k in &r.kinds {
        if !Kind::STALLS.iter().any(|s| s.name() == k) {
            return Err(invalid(entry, format!("stall rule: unknown kind {k:?}")));
        }
    }
    let sane = r.min >= 0.0
        && r.max >= r.min
        && r.max.is_finite()
        && r.slack_ms >= 0.0
        && r.slack_ms_per_call >= 0.0;
    if r.kinds.is_empty() || !sane {
        return Err(invalid(
            entry,
            "stall rule: needs kinds and 0 <= min <= max, slacks >= 0",
        ));
    }
    Ok(())
}

impl Manifest {
    /// Parses and validates a manifest.
    pub fn parse(text: &str) -> Result<Manifest, ManifestError> {
        let m: Manifest = toml::from_str(text).map_err(|e| ManifestError::Parse(e.to_string()))?;
        m.validate()?;
        Ok(m)
    }

    pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ManifestError::Io(format!("{}: {e}", path.display())))?;
        Manifest::parse(&text)
    }

    /// The manifest shipped with the scenarios.
    pub fn bundled() -> Manifest {
        Manifest::parse(BUNDLED).expect("scenarios/manifest.toml is valid (a test checks it)")
    }

    pub fn run(&self, id: &str) -> Option<&Run> {
        self.runs.iter().find(|r| r.id == id)
    }

    fn validate(&self) -> Result<(), ManifestError> {
        if self.version != 1 {
            return Err(invalid(
                "version",
                format!("{} (this reader knows 1)", self.version),
            ));
        }
        let mut ids = std::collections::BTreeSet::new();
        for r in &self.runs {
            if !ids.insert(r.id.as_str()) {
                return Err(invalid(&r.id, "duplicate id"));
            }
            if !SCENARIOS.contains(&r.scenario.as_str()) {
                return Err(invalid(&r.id, format!("no scenario {:?}", r.scenario)));
            }
            for (k, c) in &r.counts {
                if !Kind::STALLS.iter().any(|s| s.name() == k) {
                    return Err(invalid(&r.id, format!("counts: unknown kind {k:?}")));
                }
                // Every name must be one a truth line can have.
                let names = ["iters", "size", "work_us", "threads", "async", "check"];
                let probe: BTreeMap<String, u64> =
                    names.iter().map(|n| (n.to_string(), 1)).collect();
                c.eval(&probe)
                    .map_err(|e| invalid(&r.id, format!("counts.{k}: {}", e.0)))?;
            }
            for rule in &r.stall {
                check_rule(&r.id, rule)?;
            }
            if r.sim_time_scale
                .is_some_and(|s| !(s > 0.0 && s.is_finite()))
            {
                return Err(invalid(&r.id, "sim_time_scale must be positive"));
            }
        }
        for c in &self.comparisons {
            for id in [&c.stalling, &c.healthy] {
                if !ids.contains(id.as_str()) {
                    return Err(invalid(&c.title, format!("no run {id:?}")));
                }
            }
        }
        for p in &self.python {
            if !ids.insert(p.id.as_str()) {
                return Err(invalid(&p.id, "duplicate id"));
            }
            for rule in &p.stall {
                check_rule(&p.id, rule)?;
            }
        }
        Ok(())
    }
}

impl Run {
    /// SIMCUDA_TIME_SCALE for a `--sim` run.
    pub fn time_scale(&self, m: &Manifest) -> f64 {
        self.sim_time_scale.unwrap_or(m.defaults.sim_time_scale)
    }
}

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
/// for its process (`processes[i]` of a syncspy report).
pub fn check(run: &Run, truth: &Value, process: &Value) -> Verdict {
    let mut v = Verdict {
        id: run.id.clone(),
        findings: Vec::new(),
    };
    let args = truth_args(truth);
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

    for kind in Kind::STALLS.map(Kind::name) {
        let expected = match run.counts.get(kind) {
            Some(c) => c.eval(&args).map_err(|e| e.0),
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
            // preemption between the two clock reads: up to a scheduler slice per call).
            let (tt, rt) = (u(&t["total_ns"]), u(&r["total_ns"]));
            let floor = tt.saturating_sub(tc * OUTSIDE_HOOK_NS);
            v.push(
                format!("{kind} time inside the program's own timing"),
                format!("{} ..= {}", ms(floor), ms(tt)),
                ms(rt),
                rt <= tt && rt >= floor && rt > 0,
            );
        }
    }

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
            .map_or(Ok(0), |c| c.eval(&args).map_err(|e| e.0));
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

    if let Some(site) = &run.site {
        let top = top_site(process);
        let found = top.contains(site.as_str());
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
    }

    for rule in &run.stall {
        let sum = |field: &str| -> u64 {
            rule.kinds
                .iter()
                .map(|k| u(&process["kinds"][k.as_str()][field]))
                .sum()
        };
        let (stall, calls) = (sum("total_ns") as f64 / 1e6, sum("count") as f64);
        let what = format!("{} stall vs gpu_ms.{}", rule.kinds.join("+"), rule.gpu);
        match truth["gpu_ms"][rule.gpu.as_str()].as_f64() {
            Some(gpu) => {
                let slack = rule.slack_ms + rule.slack_ms_per_call * calls;
                let (lo, hi) = (rule.min * gpu, rule.max * gpu + slack);
                v.push(
                    what,
                    format!("{lo:.3} ..= {hi:.3} ms (gpu {gpu:.3} ms)"),
                    format!("{stall:.3} ms ({:.2}x)", stall / gpu.max(1e-9)),
                    stall >= lo && stall <= hi,
                );
            }
            None => v.push(what, "a CUDA-event timing".into(), "missing".into(), false),
        }
    }
    v
}

/// Running scenarios under `syncspy run` and collecting the report and truth line of each.
pub mod runner {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use serde_json::Value;

    use super::{check, Manifest, Run, Verdict};

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
    }

    /// What one run produced.
    #[derive(Debug, Clone)]
    pub struct Outcome {
        pub truth: Option<Value>,
        pub report: Option<Value>,
        pub exit_code: Option<i32>,
        pub stderr: String,
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
        stdout
            .lines()
            .filter(|l| l.starts_with("{\"") && l.contains("\"scenario\""))
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .next_back()
    }

    impl Runner {
        /// Runs `run` (with `extra` arguments after the manifest's) under syncspy.
        pub fn run(&self, m: &Manifest, run: &Run, extra: &[String]) -> Outcome {
            let report = self.out_dir.join(format!("{}.json", run.id));
            let _ = std::fs::remove_file(&report);
            let mut cmd = Command::new(&self.syncspy);
            cmd.arg("run");
            if self.sim {
                cmd.arg("--sim")
                    .env("SIMCUDA_TIME_SCALE", run.time_scale(m).to_string());
            }
            cmd.arg("--report")
                .arg(&report)
                .arg("--")
                .arg(self.bin_dir.join(format!("scn-{}", run.scenario)))
                .args(&run.args)
                .args(extra);
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
            let _ = std::fs::write(self.out_dir.join(format!("{}.truth", run.id)), &stdout);
            let _ = std::fs::write(self.out_dir.join(format!("{}.err", run.id)), &stderr);
            Outcome {
                truth: truth_line(&stdout),
                report: read_json(&report),
                exit_code: code,
                stderr,
            }
        }
    }

    /// Reads a report and truth saved by [`Runner::run`] (for checking runs made elsewhere).
    pub fn saved(dir: &Path, id: &str) -> Outcome {
        let stdout = std::fs::read_to_string(dir.join(format!("{id}.truth"))).unwrap_or_default();
        Outcome {
            truth: truth_line(&stdout),
            report: read_json(&dir.join(format!("{id}.json"))),
            exit_code: None,
            stderr: std::fs::read_to_string(dir.join(format!("{id}.err"))).unwrap_or_default(),
        }
    }

    fn read_json(path: &Path) -> Option<Value> {
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
    }

    /// Checks an outcome; a missing truth line or process is itself a failed finding.
    pub fn verdict(run: &Run, o: &Outcome) -> Verdict {
        match (&o.truth, o.process()) {
            (Some(t), Some(p)) => check(run, t, p),
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

    fn args(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn counts_are_numbers_or_sums_of_products() {
        let a = args(&[("iters", 20), ("threads", 4)]);
        assert_eq!(Count::Exact(3).eval(&a), Ok(3));
        assert_eq!(Count::Expr("iters".into()).eval(&a), Ok(20));
        assert_eq!(Count::Expr("iters + 1".into()).eval(&a), Ok(21));
        assert_eq!(
            Count::Expr("iters * threads + threads".into()).eval(&a),
            Ok(84)
        );
        assert_eq!(Count::Expr("2*iters".into()).eval(&a), Ok(40));
        assert!(Count::Expr("iters - 1".into()).eval(&a).is_err());
        assert!(Count::Expr("size".into()).eval(&a).is_err());
    }

    #[test]
    fn the_bundled_manifest_is_valid_and_covers_every_scenario() {
        let m = Manifest::bundled();
        for s in SCENARIOS {
            assert!(
                m.runs.iter().any(|r| r.scenario == s),
                "no run of scenario {s}"
            );
        }
        for c in &m.comparisons {
            assert_eq!(m.run(&c.stalling).unwrap().pattern, Pattern::Stalling);
            assert_eq!(m.run(&c.healthy).unwrap().pattern, Pattern::Healthy);
        }
    }

    #[test]
    fn bad_manifests_get_errors_that_say_where() {
        let e = Manifest::parse("version = 1\n[[run]]\nid = 3\n").unwrap_err();
        assert!(
            matches!(&e, ManifestError::Parse(m) if m.contains("line 3")),
            "{e}"
        );
        let run = |extra: &str| {
            format!(
                "version = 1\n[[run]]\nid = \"a\"\nscenario = \"item-in-loop\"\n\
                 pattern = \"stalling\"\nsummary = \"s\"\n{extra}"
            )
        };
        assert!(Manifest::parse(&run("")).is_ok());
        for (extra, needle) in [
            ("[run.counts]\nstream_snyc = 1\n", "unknown kind"),
            (
                "[run.counts]\nstream_sync = \"iters + x\"\n",
                "unknown name",
            ),
            (
                "[[run.stall]]\nkinds = [\"stream_sync\"]\ngpu = \"w\"\nmin = 2.0\nmax = 1.0\n",
                "min <= max",
            ),
            (
                "[[comparison]]\ntitle = \"t\"\nstalling = \"a\"\nhealthy = \"b\"\n",
                "no run",
            ),
        ] {
            let e = Manifest::parse(&run(extra)).unwrap_err();
            assert!(e.to_string().contains(needle), "{extra}: {e}");
        }
        let e = Manifest::parse(&run("").replace("item-in-loop", "nope")).unwrap_err();
        assert!(e.to_string().contains("no scenario"), "{e}");
        let e = Manifest::parse(&run("colour = 1\n")).unwrap_err();
        assert!(
            matches!(e, ManifestError::Parse(_)),
            "unknown fields are refused"
        );
    }

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
            "sites": [{"frames": ["wrapper (lib.rs:1)", "main (main.rs:9)"]}]
        });
        let v = check(&run, &truth, &good);
        assert!(v.ok(), "{:#?}", v.failures().collect::<Vec<_>>());

        let failing = |mutate: &dyn Fn(&mut Value), needle: &str| {
            let mut p = good.clone();
            mutate(&mut p);
            let v = check(&run, &truth, &p);
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
        // The program itself must have done what the manifest says.
        let mut t2 = truth.clone();
        t2["args"]["iters"] = 11.into();
        assert!(!check(&run, &t2, &good).ok());
    }
}
