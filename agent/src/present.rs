//! `syncspy report`: one saved report, or two compared, in the format asked for.

use std::path::Path;

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

fn load(path: &Path) -> Result<Report, String> {
    report::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Renders one report, or the change from the first to the second.
pub fn render(files: &[&Path], format: Format) -> Result<String, String> {
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
        _ => Err("give one report, or two to compare (before, after)".to_string()),
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<String, String> {
    let mut s = serde_json::to_string_pretty(v).map_err(|e| e.to_string())?;
    s.push('\n');
    Ok(s)
}
