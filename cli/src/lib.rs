//! The `syncspy` command line: run a command under `libsyncspy.so`, check it against a
//! budget, show saved reports, and serve the host's numbers as the node agent (`syncspy
//! agent`, the crate [`syncspy_agent`]). Reading segments, aggregation, symbolization and the
//! report model are in `syncspy_read`.
//!
//! - [`summary`]: the text summary printed when a run ends and by `syncspy report`.
//! - [`run`]: `syncspy run`, start a command under the library and report on it.
//! - [`recording`]: what `run` (and so `check`) and `attach` share: the reading of a
//!   recording and its end (final drain, report, files).
//! - [`attach`]: `syncspy attach PID` / `syncspy detach PID`, record a running process.
//! - [`budget`]: budget files, their evaluation against a report, and the verdict's text.
//! - [`junit`]: the verdict as JUnit XML.
//! - [`trace`]: `--trace FILE`, the recorded events as Chrome trace / Perfetto JSON.
//! - [`check`]: `syncspy check`, a run followed by a budget's verdict.
//! - [`markdown`]: a saved report as markdown; [`compare`]: two reports side by side;
//!   [`report`]: `syncspy report`, which shows either.
//! - [`snapshot`]: `syncspy snapshot` (hidden), one process's stalls in a time window as
//!   JSON, for the Python package.
//!
//! Each command's file is named after it: `run.rs`, `check.rs`, `report.rs`, `snapshot.rs`,
//! `demo.rs`, `attach/` (`attach` and `detach`); `syncspy agent` is the crate
//! [`syncspy_agent`] and `syncspy top` execs `syncspy-top` (`main.rs`).

pub mod attach;
pub mod budget;
pub mod check;
pub mod compare;
pub mod demo;
pub mod junit;
pub mod markdown;
pub mod recording;
pub mod report;
pub mod run;
pub mod signals;
pub mod snapshot;
pub mod summary;
pub mod trace;
