//! `syncspy report`: one saved report, or two compared, in the format asked for.

use std::path::{Path, PathBuf};

use crate::compare;
use crate::markdown;
use crate::summary;
use syncspy_read::report::{self, Report};

/// Output formats of `syncspy report`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The summary `syncspy run` prints
    Text,
    /// The report (or the comparison) as JSON
    Json,
    /// Markdown tables, for a pull request comment
    Markdown,
}

/// Why `syncspy report` could not show its input.
#[derive(Debug)]
pub enum ReportError {
    /// A report file could not be read (missing, not JSON, another version).
    Read {
        path: PathBuf,
        source: report::ReadError,
    },
    /// Neither one nor two files were given.
    FileCount(usize),
    /// The JSON output could not be produced.
    Json(serde_json::Error),
}

impl std::fmt::Display for ReportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReportError::Read { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            ReportError::FileCount(n) => write!(
                f,
                "give one report, or two to compare (before, after); got {n}"
            ),
            ReportError::Json(e) => write!(f, "cannot write JSON: {e}"),
        }
    }
}

impl std::error::Error for ReportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReportError::Read { source, .. } => Some(source),
            ReportError::Json(e) => Some(e),
            ReportError::FileCount(_) => None,
        }
    }
}

fn load(path: &Path) -> Result<Report, ReportError> {
    report::read(path).map_err(|source| ReportError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Renders one report, or the change from the first to the second.
pub fn render(files: &[&Path], format: Format) -> Result<String, ReportError> {
    match files {
        [one] => {
            let r = load(one)?;
            Ok(match format {
                Format::Text => summary::render(&r),
                Format::Markdown => markdown::render(&r),
                Format::Json => json(&r)?,
            })
        }
        [before, after] => {
            let (a, b) = (load(before)?, load(after)?);
            let c = compare::compare(
                &before.display().to_string(),
                &a,
                &after.display().to_string(),
                &b,
            );
            Ok(match format {
                Format::Text => compare::render_text(&c),
                Format::Markdown => compare::render_markdown(&c),
                Format::Json => json(&c)?,
            })
        }
        _ => Err(ReportError::FileCount(files.len())),
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<String, ReportError> {
    let mut s = serde_json::to_string_pretty(v).map_err(ReportError::Json)?;
    s.push('\n');
    Ok(syncspy_read::text::json(&s).into_owned())
}
