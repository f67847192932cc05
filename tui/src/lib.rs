//! `syncspy-top`, the live monitor: which processes stall, how long, how often, and which
//! code is to blame.
//!
//! - [`model`]: what the screen shows, as plain data (a [`model::Refresh`] each time the
//!   data is read).
//! - [`local`]: that data from the segments in `SYNCSPY_DIR`; [`agent`]: from a
//!   `syncspy agent`'s `/api/v1/snapshot`.
//! - [`window`] + [`loghist`]: the "last N seconds" view, per-second bins in bounded memory;
//!   [`busy`]: the GPU pane's busy share per second.
//! - [`app`]: the state machine (`App`, `Action`); [`ui`]: `impl Widget for &App`.
//! - [`term`]: the terminal, the event loop (one channel for keys, resizes and data), and the
//!   guard that restores the terminal on exit and on panic.

#![forbid(unsafe_code)]

pub mod agent;
pub mod app;
pub mod busy;
pub mod local;
pub mod loghist;
pub mod model;
pub mod term;
pub mod ui;
pub mod window;

use model::{ProcessKey, Refresh};

/// Where refreshes come from.
pub trait Source: Send {
    /// Reads what is new and returns the current view.
    fn step(&mut self) -> Refresh;
    /// Counts from now on (the `r` key).
    fn reset(&mut self);
    /// Stops following a (dismissed, ended) process.
    fn forget(&mut self, process: ProcessKey);
    /// Whether work that the next refreshes will show is still under way (call sites being
    /// symbolized), so a one-shot `--print` can wait for it.
    fn busy(&self) -> bool {
        false
    }
    /// Why the latest refresh could not read the data at all (an agent unreachable or
    /// refusing), or None when it could: a one-shot `--print` reports it and fails instead of
    /// printing an empty screen.
    fn failure(&self) -> Option<String> {
        None
    }
    /// Asks the library of `process` to trace GPU activity for the next `secs` seconds
    /// (the `g` key; repeated at each refresh while it is on). Returns a short status for
    /// the GPU line, or why it could not.
    fn request_gpu_trace(&mut self, process: ProcessKey, secs: u64) -> Result<String, String> {
        let _ = (process, secs);
        Err("not from this source".into())
    }
}
