//! `syncspy check`: run a command exactly like `syncspy run`, then judge the report against a
//! budget file and exit 0 (within budget), 1 (over budget) or 2 (could not check).

use std::path::PathBuf;

use crate::budget::{self, BudgetError, BudgetReport};
use crate::junit;
use crate::run::{self, check_output_path, RunError, RunOptions};
use syncspy_read::report::{self, Report};

/// Every rule held in every process.
pub const EXIT_WITHIN_BUDGET: i32 = 0;
/// At least one rule was violated.
pub const EXIT_OVER_BUDGET: i32 = 1;
/// The budget could not be checked: bad budget file, setup error, the command did not start
/// or failed, no instrumented process, a rule that could not be decided, an output not
/// written.
pub const EXIT_NOT_CHECKED: i32 = 2;

/// `syncspy check --help`, after the options: the budget format and the exit codes.
pub const HELP: &str = "\
Budget file (TOML; unknown keys are errors):
  [iterations]                    optional: which events mark one iteration
  kind = \"device_sync\"            a kind or a list of kinds
  site = \"train_step\"             optional site pattern(s)

  [[rule]]                        one or more
  name = \"no syncs in the step\"   required, unique; shown in the summary and JUnit
  kind = \"stream_sync\"            a kind or a list (default: every host-stall kind):
                                  device_sync stream_sync event_sync memcpy_sync
                                  memcpy_pageable implicit_sync poll_wait host_wait
                                  gpu_idle
  site = \"train.py:142\"           optional: only events at sites matching a pattern
  allow_sites = [\"loss.item\"]     optional: events at matching sites are exempt
  process = \"train.py\"            optional: only processes whose command line contains it
  require_match = true            optional: a site or process pattern that matches nothing
                                  fails the rule (without it, it is only reported)
  limits, at least one (the events the rule selects, in each process):
  forbid = true                   no event at all (same as max_count = 0)
  max_count, max_total_ms, max_bytes
  max_count_per_iteration, max_total_ms_per_iteration, max_bytes_per_iteration
                                  averages over the iterations of [iterations]; a process
                                  that marks none counts as one iteration
  max_stall_share = 0.05          stall time / the process's wall time
  max_gpu_idle_share = 0.2        the share of its active time (first work to last) the GPU ran nothing
                                  (SYNCSPY_GPU_IDLE); skipped when not measured
  A site pattern is a substring of a site's symbolized frames (\"symbol (file:line)\"),
  or a Python frame as FILE:FUNCTION or FILE:LINE (\"train.py:train_step\", \"train.py:142\").
  Rules hold per process: each violation names the pid and command and its call sites.
  Site rules count the records received: if records were lost (lost_records) or stacks
  are missing, a rule the unattributed events could push either way is not evaluated
  (exit 2); one already over its limit without them fails (exit 1).

Exit status:
  0    within budget
  1    over budget: at least one rule failed (even if CMD exited non-zero or another
       rule could not be evaluated)
  2    not checked: bad budget file (its line and column are shown), a setup error
       (library not found, SYNCSPY_DIR unusable), CMD could not start or exited non-zero,
       no instrumented process reported, a rule could not be evaluated, or the report,
       JUnit or trace file could not be written (this last one also when over budget)

Runs CMD like `syncspy run` (same environment, same summary), then prints the verdict.";

/// What `syncspy check` was asked to do.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    pub budget: PathBuf,
    pub junit: Option<PathBuf>,
    /// The JSON report, written with its `budget` section.
    pub report: Option<PathBuf>,
    /// How to run the command; its `report` is ignored (see `report` above).
    pub run: RunOptions,
}

/// Why the budget could not be checked; every case exits `EXIT_NOT_CHECKED`.
#[derive(Debug)]
pub enum CheckError {
    Budget(BudgetError),
    Run(RunError),
    /// The run ended but an output file could not be written.
    Output(String),
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckError::Budget(e) => write!(f, "{e}"),
            CheckError::Run(e) => write!(f, "{e}"),
            CheckError::Output(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for CheckError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CheckError::Budget(e) => Some(e),
            CheckError::Run(e) => Some(e),
            CheckError::Output(_) => None,
        }
    }
}

/// Whether the NVIDIA driver's control device exists (a GPU machine).
fn has_nvidia_driver() -> bool {
    std::path::Path::new("/dev/nvidiactl").exists()
}

/// A finished check.
#[derive(Debug)]
pub struct CheckOutcome {
    pub exit_code: i32,
    pub verdict: BudgetReport,
    /// The run's report, with the verdict in its `budget` section.
    pub report: Report,
}

/// Loads the budget (before anything runs), runs the command, judges, prints the verdict to
/// stderr, and writes the requested files.
pub fn check(opts: &CheckOptions) -> Result<CheckOutcome, CheckError> {
    let budget = budget::load(&opts.budget).map_err(CheckError::Budget)?;
    if let Some(j) = &opts.junit {
        check_output_path("--junit", "an XML file", j).map_err(CheckError::Run)?;
    }
    if let Some(r) = &opts.report {
        check_output_path("--report", "a JSON file", r).map_err(CheckError::Run)?;
    }
    let mut run_opts = opts.run.clone();
    run_opts.report = None;
    let outcome = run::run(&run_opts).map_err(CheckError::Run)?;

    let mut verdict = budget::evaluate(&budget, &outcome.report);
    if outcome.report.processes.is_empty() && !run_opts.sim && !has_nvidia_driver() {
        verdict.problems.push(
            "there is no NVIDIA driver on this machine (/dev/nvidiactl is missing): to check \
             the command without a GPU, run it on the simulated CUDA runtime with \
             `syncspy check --sim --budget ... -- CMD`"
                .to_string(),
        );
    }
    eprint!("{}", budget::text::render(&verdict));
    let mut report = outcome.report;
    report.budget = Some(verdict.clone());
    let exit_code = verdict.outcome.exit_code();

    let mut failed = Vec::new();
    if let Some(j) = &opts.junit {
        if let Err(e) = report::write_atomic(j, junit::render(&verdict).as_bytes()) {
            failed.push(format!("cannot write the JUnit file {}: {e}", j.display()));
        }
    }
    if let Some(r) = &opts.report {
        if let Err(m) = crate::recording::write_report(&report, r) {
            failed.push(m);
        }
    }
    if !failed.is_empty() {
        return Err(CheckError::Output(format!(
            "{} ({})",
            failed.join("; "),
            budget::text::verdict(&verdict)
        )));
    }
    eprintln!(
        "syncspy check: {} -> exit {exit_code}",
        budget::text::verdict(&verdict)
    );
    Ok(CheckOutcome {
        exit_code,
        verdict,
        report,
    })
}
