//! Budgets for `syncspy check`: a TOML file of rules ([`mod@file`]), evaluated against a report
//! ([`eval`]), and shown to people ([`text`]).
//!
//! Evaluation reads only the [`Report`](syncspy_read::report::Report), so a rule means the same
//! whether it is checked right after a run or (in tests) against a synthetic report.

pub mod eval;
pub mod file;
pub mod text;

pub use eval::{evaluate, BudgetReport, CheckStatus, Outcome, RuleResult};
pub use file::{load, parse, Budget, BudgetError, Limit, Measure, Rule};
