//! The verdict of a budget (`syncspy check`), as it is saved in the report's `budget`
//! section: part of the report model, so every reader of a report understands it. Budget
//! files and their evaluation live in the `syncspy` CLI.

use serde::{Deserialize, Serialize};

/// A check's status, from least to most severe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// The quantity is not measured by this syncspy (GPU idle time): skipped.
    NotMeasured,
    #[default]
    Pass,
    /// Could not be decided (records lost, stacks missing, no process): fail safe.
    NotEvaluated,
    Fail,
}

impl CheckStatus {
    pub fn label(self) -> &'static str {
        match self {
            CheckStatus::NotMeasured => "SKIP",
            CheckStatus::Pass => "ok",
            CheckStatus::NotEvaluated => "UNKNOWN",
            CheckStatus::Fail => "FAIL",
        }
    }
}

/// The verdict of a whole budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    WithinBudget,
    OverBudget,
    /// Nothing was over budget, but something could not be checked.
    NotEvaluated,
}

impl Outcome {
    /// `syncspy check`'s exit code for this verdict.
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::WithinBudget => 0,
            Outcome::OverBudget => 1,
            Outcome::NotEvaluated => 2,
        }
    }
}

/// One limit of one rule in one process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitResult {
    /// The key in the budget file (`max_count`, `max_stall_share`, ...).
    pub key: String,
    /// The limit in the measure's unit: events, ns, bytes, or a fraction.
    pub max: f64,
    /// The measured value (the least it can be when `value_max` is present).
    pub value: f64,
    /// The most the value can be, when events could not be attributed to sites.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_max: Option<f64>,
    pub status: CheckStatus,
    /// For people: `3 events > max_count 0`.
    pub message: String,
}

/// A call site that counted for a rule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteHit {
    pub kind: crate::names::KindName,
    pub api: crate::names::ApiName,
    pub count: u64,
    pub total_ns: u64,
    pub bytes: u64,
    /// The innermost frames outside the CUDA runtime and syncspy.
    pub frames: Vec<String>,
}

/// Iteration-marking events in a process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IterationCount {
    pub count: u64,
    /// The most it can be, when marking events could not be attributed to sites.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_max: Option<u64>,
}

/// One rule in one process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuleResult {
    pub rule: String,
    /// Line of the rule in the budget file.
    pub line: usize,
    /// `None` when no process could be checked against the rule.
    pub pid: Option<u32>,
    pub cmdline: String,
    pub status: CheckStatus,
    pub limits: Vec<LimitResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<IterationCount>,
    /// Sites whose events counted, largest total first (at most `RESULT_SITES`).
    pub sites: Vec<SiteHit>,
    /// Why something was not measured or not evaluated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The `budget` section of the report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BudgetReport {
    /// The budget file.
    pub file: String,
    pub outcome: Outcome,
    pub results: Vec<RuleResult>,
    /// Problems with the run as a whole (the command failed, no process reported).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

impl BudgetReport {
    pub fn count(&self, s: CheckStatus) -> usize {
        self.results.iter().filter(|r| r.status == s).count()
    }
}
