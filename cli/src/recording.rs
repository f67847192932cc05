//! A recording as `syncspy run` (and so `syncspy check`) and `syncspy attach` read it: this
//! session's segments drained while the recording lasts (into the trace, when one is kept),
//! then its one end: the final drain, the report, and the files written.

use std::path::{Path, PathBuf};

use syncspy_read::follow::Followed;
use syncspy_read::monotonic_ns;
use syncspy_read::report::{self, Report, RunInfo};
use syncspy_read::session::{ReaderSession, SessionProblem};
use syncspy_read::symbolize::Symbolizer;

use crate::trace::TraceSink;

/// The reading side of one recording, from the reader's registration to the report.
pub struct Recording {
    reader: ReaderSession,
    trace: Option<TraceSink>,
}

impl Recording {
    /// Reads `reader`'s session, keeping its events in `trace` when one is given; the
    /// reader's set-up problems (a folder it could not register in) are said at once.
    pub fn new(mut reader: ReaderSession, trace: Option<TraceSink>) -> Recording {
        for p in reader.take_problems() {
            eprintln!("syncspy: warning: {p}");
        }
        Recording { reader, trace }
    }

    /// One round of reading: new segments found, every ring drained (into the trace). Returns
    /// the problems found since the last round, each once, for the caller to say.
    pub fn step(&mut self) -> Vec<SessionProblem> {
        let trace = &mut self.trace;
        self.reader.step(|key, _, r| {
            if let Some(t) = trace.as_mut() {
                t.push(key, *r);
            }
        })
    }

    /// The processes followed so far.
    pub fn processes(&self) -> &[Followed] {
        self.reader.processes()
    }

    /// The end: the final drain (then the session's segments removed or handed over as it
    /// was told, and its registration dropped), the last problems said, and the report of
    /// `run` built from what was read.
    pub fn finish(mut self, run: &RunInfo) -> Recorded {
        let trace = &mut self.trace;
        let done = self.reader.finish(|key, _, r| {
            if let Some(t) = trace.as_mut() {
                t.push(key, *r);
            }
        });
        for p in &done.problems {
            eprintln!("syncspy: warning: {p}");
        }
        let mut sym = Symbolizer::new();
        let report = report::build(
            run,
            self.reader.processes(),
            self.reader.segment_problems(),
            &mut sym,
            monotonic_ns(),
        );
        Recorded {
            report,
            removed: done.removed,
            reader: self.reader,
            trace: self.trace,
            sym,
        }
    }
}

/// A finished recording: its report, and what the trace file is made from.
pub struct Recorded {
    pub report: Report,
    /// Segment files removed at the end.
    pub removed: Vec<PathBuf>,
    reader: ReaderSession,
    trace: Option<TraceSink>,
    sym: Symbolizer,
}

impl Recorded {
    /// The events kept for the trace, when one was asked for.
    pub fn trace(&self) -> Option<&TraceSink> {
        self.trace.as_ref()
    }

    /// Writes the trace file (nothing when no trace was kept), with the report's command.
    pub fn write_trace(&mut self, path: &Path) -> std::io::Result<()> {
        let Some(sink) = &self.trace else {
            return Ok(());
        };
        crate::trace::write(
            path,
            sink,
            self.reader.processes(),
            &self.report.command,
            &mut self.sym,
        )
    }
}

/// Writes the JSON report to `path`; the error says where it could not be written.
pub fn write_report(report: &Report, path: &Path) -> Result<(), String> {
    report::write(report, path)
        .map_err(|e| format!("cannot write the report to {}: {e}", path.display()))
}
