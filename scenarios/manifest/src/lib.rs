//! `scenarios/manifest.toml`: what syncspy must report for each scenario run, relative to the
//! ground truth the program prints, and the pairs `syncspy demo` compares. One parser and one
//! set of types for every reader of the manifest (the scenario checks, `syncspy demo`).
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
//! [run.gpu_idle]                        # optional: GPU idle gaps (runs traced, mode on)
//! behind = ["device_sync"]              # blamed on waits of these kinds (gpu.causes)
//! min_gaps = "iters"                    # at least fraction x this many
//! fraction = 0.5                        # (a step's gap can be missed); only with
//!                                       # min_gaps
//! max_gaps = 1                          # at most (a healthy run: the final wait's; a
//!                                       # number not below min_gaps)
//! min_share = 0.9                       # of the idle time received, behind these kinds
//!
//! [[job]]                               # a distributed job: scn-<scenario> starts one
//! id = "ddp-straggler"                  # process per rank, each prints its truth line
//! scenario = "ddp-straggler"            # (one of JOB_SCENARIOS)
//! pattern = "stalling"
//! summary = "..."
//! args = ["--ranks", "4", "--late", "2"]
//! ranks = "ranks"                       # processes: an expression over the truth args
//! none_of = ["poll_wait"]               # report kinds that must be 0 in every rank
//! [job.counts]                          # exact per rank, as run.counts; expressions over
//! stream_sync = "steps + steps * is_late" # that rank's args (is_late: 1 on the late rank)
//! [job.non_stall]                       # as run.non_stall, per rank
//! [job.straggler]                       # the report's jobs[].straggler
//! rank = "late"                         # the rank it names (an expression)
//! site = "late_sync"                    # optional: a key of the straggler's truth line
//!                                       # `sites` ("file.rs:LINE"): the line its top site
//!                                       # must name
//!
//! [[comparison]]                        # the same work done two ways, for `syncspy demo`
//! title = "..."
//! stalling = "sync-small-gemm"          # run ids
//! healthy = "sync-small-gemm-async"
//! ```
//!
//! The checks of one run's report against the manifest live with the scenario programs
//! (`syncspy_scenarios::manifest::check`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

/// The manifest shipped with the scenarios (`scenarios/manifest.toml`).
pub const BUNDLED: &str = include_str!("../../manifest.toml");

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
    /// Distributed jobs, one process per rank.
    #[serde(rename = "job", default)]
    pub jobs: Vec<JobRun>,
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
    /// The GPU idle gaps the run must show (runs are traced with `SYNCSPY_GPU_IDLE=on`).
    pub gpu_idle: Option<GpuIdleRule>,
}

/// GPU idle gaps blamed on waits of some kinds: a stalling run leaves a gap behind each
/// step's wait, a healthy one keeps the GPU fed.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuIdleRule {
    /// The stall kinds the gaps are blamed on (the report's `gpu.causes[].cause`).
    pub behind: Vec<String>,
    /// At least `fraction` of this many gaps behind them.
    pub min_gaps: Option<Count>,
    /// The share of `min_gaps` required (absent: 1, [`GpuIdleRule::required_fraction`]): a
    /// step's gap can be missed (the last wait's is closed by no later work; a real GPU's
    /// gaps under 10 µs are only counted). Only with `min_gaps`.
    pub fraction: Option<f64>,
    /// At most this many gaps behind them.
    pub max_gaps: Option<Count>,
    /// At least this share of the idle time received is behind them.
    pub min_share: Option<f64>,
}

impl GpuIdleRule {
    /// The share of `min_gaps` required: `fraction`, 1 when not given.
    pub fn required_fraction(&self) -> f64 {
        self.fraction.unwrap_or(1.0)
    }
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

/// A distributed job: `scn-<scenario>` starts `ranks` processes, one rank each, and each
/// prints its truth line (with its `rank`). Each rank is checked as a run is (`counts`,
/// `non_stall`, every rank alike; expressions over the rank's own truth args), `none_of`
/// must be absent from every rank, and the report's job must name the straggler.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRun {
    pub id: String,
    pub scenario: String,
    pub pattern: Pattern,
    pub summary: String,
    #[serde(default)]
    pub args: Vec<String>,
    pub sim_time_scale: Option<f64>,
    /// The number of processes (truth lines).
    pub ranks: Count,
    #[serde(default)]
    pub counts: BTreeMap<String, Count>,
    #[serde(default)]
    pub non_stall: BTreeMap<String, Count>,
    /// Kinds of the report (stall kinds, `poll_wait`, `host_wait`) that no rank may show.
    #[serde(default)]
    pub none_of: Vec<String>,
    pub straggler: Option<StragglerRule>,
}

impl JobRun {
    /// SIMCUDA_TIME_SCALE for a `--sim` run.
    pub fn time_scale(&self, m: &Manifest) -> f64 {
        self.sim_time_scale.unwrap_or(m.defaults.sim_time_scale)
    }
}

/// The straggler a job's report must name (`jobs[].straggler`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StragglerRule {
    /// Its rank: an expression over the truth args (`"late"`).
    pub rank: Count,
    /// A key of the straggler's truth line `sites`, whose value (`file.rs:LINE`) its top
    /// call site's location must name.
    pub site: Option<String>,
}

/// Kinds a report has besides the stall kinds, which `none_of` may name.
pub const OTHER_REPORT_KINDS: [&str; 2] = ["poll_wait", "host_wait"];

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

fn check_gpu_rule(
    entry: &str,
    scenario: &str,
    r: &GpuIdleRule,
    probe: &BTreeMap<String, u64>,
) -> Result<(), ManifestError> {
    for k in &r.behind {
        if !Kind::STALLS.iter().any(|s| s.name() == k) {
            return Err(invalid(entry, format!("gpu_idle: unknown kind {k:?}")));
        }
    }
    if r.behind.is_empty() {
        return Err(invalid(entry, "gpu_idle: `behind` needs a kind"));
    }
    for c in [&r.min_gaps, &r.max_gaps].into_iter().flatten() {
        c.eval(probe)
            .map_err(|e| invalid(entry, format!("gpu_idle: {}", e.0)))?;
    }
    if let Some(f) = r.fraction {
        if r.min_gaps.is_none() {
            return Err(invalid(
                entry,
                format!(
                    "gpu_idle of scenario {scenario:?}: fraction = {f} without min_gaps (it is \
                     the share of min_gaps required)"
                ),
            ));
        }
        if !(f > 0.0 && f <= 1.0) {
            return Err(invalid(entry, "gpu_idle: fraction must be in (0, 1]"));
        }
    }
    // Counts that name no truth-line argument are known now; the others depend on the run.
    let fixed = |c: &Option<Count>| c.as_ref().and_then(|c| c.eval(&BTreeMap::new()).ok());
    if let (Some(lo), Some(hi)) = (fixed(&r.min_gaps), fixed(&r.max_gaps)) {
        if lo > hi {
            return Err(invalid(
                entry,
                format!(
                    "gpu_idle of scenario {scenario:?}: min_gaps ({lo}) > max_gaps ({hi}), no \
                     run can have both"
                ),
            ));
        }
    }
    if r.min_share.is_some_and(|s| !(0.0..=1.0).contains(&s)) {
        return Err(invalid(entry, "gpu_idle: min_share must be in 0..=1"));
    }
    if r.min_gaps.is_none() && r.max_gaps.is_none() && r.min_share.is_none() {
        return Err(invalid(
            entry,
            "gpu_idle: nothing to check (min_gaps, max_gaps or min_share)",
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
        // Every name in an expression must be one a truth line can have.
        let names = ["iters", "size", "work_us", "threads", "async", "check"];
        let probe: BTreeMap<String, u64> = names.iter().map(|n| (n.to_string(), 1)).collect();
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
                c.eval(&probe)
                    .map_err(|e| invalid(&r.id, format!("counts.{k}: {}", e.0)))?;
            }
            if let Some(g) = &r.gpu_idle {
                check_gpu_rule(&r.id, &r.scenario, g, &probe)?;
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
        self.validate_jobs(&mut ids)?;
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

impl Manifest {
    fn validate_jobs<'a>(
        &'a self,
        ids: &mut std::collections::BTreeSet<&'a str>,
    ) -> Result<(), ManifestError> {
        // The names a job's truth line can have in `args`.
        let names = [
            "ranks", "late", "steps", "late_ms", "work_us", "size", "rank", "is_late",
        ];
        let probe: BTreeMap<String, u64> = names.iter().map(|n| (n.to_string(), 1)).collect();
        for j in &self.jobs {
            if !ids.insert(j.id.as_str()) {
                return Err(invalid(&j.id, "duplicate id"));
            }
            if !JOB_SCENARIOS.contains(&j.scenario.as_str()) {
                return Err(invalid(&j.id, format!("no job scenario {:?}", j.scenario)));
            }
            j.ranks
                .eval(&probe)
                .map_err(|e| invalid(&j.id, format!("ranks: {}", e.0)))?;
            for (k, c) in &j.counts {
                if !Kind::STALLS.iter().any(|s| s.name() == k) {
                    return Err(invalid(&j.id, format!("counts: unknown kind {k:?}")));
                }
                c.eval(&probe)
                    .map_err(|e| invalid(&j.id, format!("counts.{k}: {}", e.0)))?;
            }
            for (api, c) in &j.non_stall {
                c.eval(&probe)
                    .map_err(|e| invalid(&j.id, format!("non_stall.{api}: {}", e.0)))?;
            }
            for k in &j.none_of {
                let known = Kind::STALLS.iter().any(|s| s.name() == k)
                    || OTHER_REPORT_KINDS.contains(&k.as_str());
                if !known {
                    return Err(invalid(&j.id, format!("none_of: unknown kind {k:?}")));
                }
                if j.counts.get(k).is_some_and(|c| c.eval(&probe) != Ok(0)) {
                    return Err(invalid(&j.id, format!("{k} is in counts and none_of")));
                }
            }
            if let Some(s) = &j.straggler {
                s.rank
                    .eval(&probe)
                    .map_err(|e| invalid(&j.id, format!("straggler.rank: {}", e.0)))?;
                if s.site.as_deref().is_some_and(str::is_empty) {
                    return Err(invalid(&j.id, "straggler.site: empty"));
                }
            }
            if j.sim_time_scale
                .is_some_and(|s| !(s > 0.0 && s.is_finite()))
            {
                return Err(invalid(&j.id, "sim_time_scale must be positive"));
            }
        }
        Ok(())
    }
}

/// A comparison with its two runs resolved.
#[derive(Debug, Clone)]
pub struct Pair<'a> {
    pub title: &'a str,
    pub stalling: &'a Run,
    pub healthy: &'a Run,
}

impl Manifest {
    /// The comparisons, each with its two runs (parsing checked that they exist).
    pub fn pairs(&self) -> Vec<Pair<'_>> {
        self.comparisons
            .iter()
            .filter_map(|c| {
                Some(Pair {
                    title: &c.title,
                    stalling: self.run(&c.stalling)?,
                    healthy: self.run(&c.healthy)?,
                })
            })
            .collect()
    }
}

impl Run {
    /// SIMCUDA_TIME_SCALE for a `--sim` run.
    pub fn time_scale(&self, m: &Manifest) -> f64 {
        self.sim_time_scale.unwrap_or(m.defaults.sim_time_scale)
    }
}

/// The scenario programs, `scn-<name>` each (the names are a contract: tools and the manifest
/// refer to them), in the order a demo shows them.
pub const SCENARIOS: [&str; 10] = [
    "item-in-loop",
    "clean-async",
    "sync-small-gemm",
    "sync-big-gemm",
    "pageable-h2d",
    "pinned-double-buffer",
    "nonzero-dynamic-shape",
    "implicit-free",
    "event-sync",
    "multi-thread",
];

/// The distributed scenarios (`[[job]]`): `scn-<name>` starts one process per rank.
pub const JOB_SCENARIOS: [&str; 1] = ["ddp-straggler"];

/// How syncspy must classify a call: one of the report's stall kinds, or a call it counts but
/// does not time (`non_stall_calls`: pinned async copies, device memsets, `cudaFree(NULL)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    DeviceSync,
    StreamSync,
    EventSync,
    MemcpySync,
    MemcpyPageable,
    ImplicitSync,
    NonStall,
}

impl Kind {
    /// The stall kinds, in the report's order.
    pub const STALLS: [Kind; 6] = [
        Kind::DeviceSync,
        Kind::StreamSync,
        Kind::EventSync,
        Kind::MemcpySync,
        Kind::MemcpyPageable,
        Kind::ImplicitSync,
    ];

    /// The name the report uses (`non_stall` for calls that do not stall).
    pub fn name(self) -> &'static str {
        match self {
            Kind::DeviceSync => "device_sync",
            Kind::StreamSync => "stream_sync",
            Kind::EventSync => "event_sync",
            Kind::MemcpySync => "memcpy_sync",
            Kind::MemcpyPageable => "memcpy_pageable",
            Kind::ImplicitSync => "implicit_sync",
            Kind::NonStall => "non_stall",
        }
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::STALLS
            .into_iter()
            .chain([Kind::NonStall])
            .find(|k| k.name() == name)
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
    fn the_bundled_manifest_has_every_job_scenario() {
        let m = Manifest::bundled();
        for s in JOB_SCENARIOS {
            assert!(m.jobs.iter().any(|j| j.scenario == s), "no job of {s}");
        }
        let j = &m.jobs[0];
        let args = args(&[("steps", 5), ("is_late", 1), ("late", 2), ("ranks", 4)]);
        assert_eq!(j.counts["stream_sync"].eval(&args), Ok(10));
        assert_eq!(j.straggler.as_ref().unwrap().rank.eval(&args), Ok(2));
        assert_eq!(j.ranks.eval(&args), Ok(4));
    }

    #[test]
    fn bad_jobs_get_errors_that_say_where() {
        let job = |extra: &str| {
            format!(
                "version = 1\n[[run]]\nid = \"a\"\nscenario = \"item-in-loop\"\n\
                 pattern = \"stalling\"\nsummary = \"s\"\n\
                 [[job]]\nid = \"j\"\nscenario = \"ddp-straggler\"\npattern = \"stalling\"\n\
                 summary = \"s\"\nranks = \"ranks\"\n{extra}"
            )
        };
        let m = Manifest::parse(&job("none_of = [\"poll_wait\"]\n")).unwrap();
        assert_eq!(m.jobs[0].none_of, ["poll_wait"]);
        assert!(m.jobs[0].straggler.is_none());
        for (extra, needle) in [
            ("none_of = [\"poll_wiat\"]\n", "none_of: unknown kind"),
            ("[job.counts]\nstream_snyc = 1\n", "counts: unknown kind"),
            ("[job.counts]\nstream_sync = \"iters\"\n", "unknown name"),
            ("[job.straggler]\nrank = \"slowest\"\n", "straggler.rank"),
            ("[job.straggler]\nrank = 1\nsite = \"\"\n", "straggler.site"),
            (
                "none_of = [\"stream_sync\"]\n[job.counts]\nstream_sync = 2\n",
                "in counts and none_of",
            ),
            ("sim_time_scale = 0.0\n", "sim_time_scale"),
        ] {
            let e = Manifest::parse(&job(extra)).unwrap_err();
            assert!(e.to_string().contains(needle), "{extra}: {e}");
        }
        let e = Manifest::parse(&job("").replace("ddp-straggler", "item-in-loop")).unwrap_err();
        assert!(e.to_string().contains("no job scenario"), "{e}");
        let e = Manifest::parse(&job("").replace("id = \"j\"", "id = \"a\"")).unwrap_err();
        assert!(e.to_string().contains("duplicate id"), "{e}");
        let e = Manifest::parse(&job("ranks = 2\n")).unwrap_err();
        assert!(matches!(e, ManifestError::Parse(_)), "{e}");
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
            (
                "[run.gpu_idle]\nbehind = [\"stream_snyc\"]\nmax_gaps = 1\n",
                "gpu_idle: unknown kind",
            ),
            (
                "[run.gpu_idle]\nbehind = [\"stream_sync\"]\n",
                "nothing to check",
            ),
            (
                "[run.gpu_idle]\nbehind = [\"stream_sync\"]\nmin_share = 1.5\n",
                "min_share",
            ),
            (
                "[run.gpu_idle]\nbehind = [\"stream_sync\"]\nmin_gaps = 3\nfraction = 0.0\n",
                "fraction",
            ),
            (
                "[run.gpu_idle]\nbehind = [\"stream_sync\"]\nmin_gaps = \"steps\"\n",
                "unknown name",
            ),
            (
                "[run.gpu_idle]\nbehind = [\"stream_sync\"]\nmax_gaps = 1\nfraction = 0.5\n",
                "gpu_idle of scenario \"item-in-loop\": fraction = 0.5 without min_gaps",
            ),
            (
                "[run.gpu_idle]\nbehind = [\"stream_sync\"]\nmin_gaps = 3\nmax_gaps = \"1 + 1\"\n",
                "gpu_idle of scenario \"item-in-loop\": min_gaps (3) > max_gaps (2)",
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
}
