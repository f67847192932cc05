//! The reader side of syncspy: find and follow the shared-memory segments that
//! `libsyncspy.so` writes, aggregate them, symbolize call sites, and report.
//!
//! - [`follow`]: discover the segments of a session in `SYNCSPY_DIR` and drain their rings.
//! - [`aggregate`]: per-process exact totals and latency histograms.
//! - [`symbolize`]: call-site stacks to `symbol (file:line)` with blazesym.
//! - [`report`]: the JSON report (version 1) and how it is built.
//! - [`summary`]: the text summary printed when a run ends and by `syncspy report`.
//! - [`run`]: `syncspy run`, start a command under the library and report on it.
//! - [`budget`]: budget files, their evaluation against a report, and the verdict's text.
//! - [`junit`]: the verdict as JUnit XML.
//! - [`trace`]: `--trace FILE`, the recorded events as Chrome trace / Perfetto JSON.
//! - [`check`]: `syncspy check`, a run followed by a budget's verdict.
//! - [`daemon`]: `syncspy agent`, every segment of the host behind HTTP; [`metrics`] its
//!   Prometheus text.
//! - [`markdown`]: a saved report as markdown; [`compare`]: two reports side by side;
//!   [`present`]: `syncspy report`, which shows either.

pub mod aggregate;
pub mod budget;
pub mod check;
pub mod compare;
pub mod daemon;
pub mod demo;
pub mod follow;
pub mod junit;
pub mod markdown;
pub mod metrics;
pub mod present;
pub mod report;
pub mod run;
pub mod signals;
pub mod summary;
pub mod symbolize;
pub mod trace;

#[cfg(test)]
mod test_support;
