//! The reading side of syncspy, shared by the `syncspy` CLI (run, check, report), the node
//! agent (`syncspy-agent`) and the `syncspy-top` monitor: everything between a segment that
//! `libsyncspy.so` writes and a number on a screen or in a file.
//!
//! - [`follow`]: discover the segments in `SYNCSPY_DIR` and drain their rings; each followed
//!   segment has a stable [`follow::SegmentKey`] and a slot for the caller's own state.
//! - [`session`]: the reader protocol every front end follows on top of `follow`: scan,
//!   register, lease, drain, final drain, removal, problems said once.
//! - [`aggregate`]: per-process exact totals and latency histograms.
//! - [`names`]: kinds, APIs and other closed vocabularies as enums that serialize by name,
//!   unknown names kept as text.
//! - [`limits`]: what a reader spends on hostile segments, bounded per segment, per user and
//!   in total; what it dropped, counted.
//! - [`alike`]: the merge rules every view shares (sites that print alike, gap causes at
//!   one line).
//! - [`symbolize`]: call-site stacks to `symbol (file:line)` with blazesym.
//! - [`report`]: the JSON report (version 1), how it is built from followed segments, read
//!   and written; [`verdict`]: its `budget` section.
//! - [`jobs`]: processes grouped by distributed job (ABI 1.3), ranks side by side, the
//!   straggler.
//! - [`rates`]: rates over a window, right whatever the source's refresh.
//! - [`place`]: where a segment's process lives seen from here: its host pid and container.
//! - [`program`]: the program a process runs, as people name it (`python3 train.py`).
//! - [`in_root`]: a path opened as another process sees it, inside its root (a container's).
//! - [`warning`]: what readers warn about, one variant per kind of warning, its text in one
//!   place.
//! - [`snapshot`]: the agent's view of the host, as served over HTTP.
//! - [`stop`]: the stop signals of a reader that runs until asked to end, as one flag.
//!
//! The clock of every timestamp is `CLOCK_MONOTONIC` ([`monotonic_ns`]).

pub mod advice;
pub mod aggregate;
pub mod alike;
pub mod follow;
pub mod in_root;
pub mod limits;
pub mod names;
pub mod place;
pub mod plural;
pub mod program;
pub mod python;
pub mod rates;
pub mod report;
/// The report's `jobs` section (`report::jobs`), by its old name.
pub use report::jobs;
pub mod safe_file;
pub mod session;
pub mod snapshot;
pub mod stop;
pub mod symbolize;
pub mod text;
pub mod verdict;
pub mod warning;

pub use syncspy_abi::clock::monotonic_ns;
