//! What a reader warns about, as the report (`warnings`) and the agent's snapshot carry it:
//! each kind of warning a variant, its text written in one place ([`Warning`]'s `Display`).
//! The JSON holds the text, as it always did; reading it back maps a text this build writes
//! to its variant and keeps any other (a newer syncspy's, a symbol file's note) as text.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::follow::SegmentProblem;

/// One warning. Two warnings are equal when their texts are.
#[derive(Clone, Debug)]
pub enum Warning {
    /// A file of the segment folder that could not be read: `skipped PATH: WHY`.
    SegmentSkipped { path: String, why: String },
    /// Processes of the run that could not record (their segment could not be made):
    /// `N processes could not record: REASON; REASON`, the most frequent reason first.
    CouldNotRecord {
        processes: usize,
        reasons: Vec<String>,
    },
    /// The `--trace` file was cut at `--trace-limit`:
    /// `the trace PATH holds only the first KEPT of SEEN recorded events (raise --trace-limit)`.
    TraceCut { path: String, kept: u64, seen: u64 },
    /// What `syncspy attach` could not cover (`attach: not covered: ...`).
    Attach(String),
    /// Anything else: a symbol file's note, an agent's trouble with its folder, a text from
    /// another version of syncspy.
    Text(String),
}

const SKIPPED: &str = "skipped ";
const COULD_NOT_RECORD: &str = " could not record: ";
const TRACE: &str = "the trace ";
const TRACE_KEPT: &str = " holds only the first ";
const TRACE_END: &str = " recorded events (raise --trace-limit)";
const ATTACH: &str = "attach: ";

impl Warning {
    /// The warning of processes that could not record, from the reason each gave (one per
    /// process); `None` when there are none. The distinct reasons are listed, the most
    /// frequent first.
    pub fn could_not_record(reasons: &[String]) -> Option<Warning> {
        if reasons.is_empty() {
            return None;
        }
        let mut counts: Vec<(usize, &str)> = Vec::new();
        for r in reasons {
            match counts.iter_mut().find(|(_, s)| *s == r.as_str()) {
                Some((n, _)) => *n += 1,
                None => counts.push((1, r.as_str())),
            }
        }
        counts.sort_by_key(|c| std::cmp::Reverse(c.0));
        Some(Warning::CouldNotRecord {
            processes: reasons.len(),
            reasons: counts.into_iter().map(|(_, s)| s.to_string()).collect(),
        })
    }

    /// The warning a text stands for: the variant whose text it is, else the text itself.
    pub fn parse(text: &str) -> Warning {
        Self::recognise(text).unwrap_or_else(|| Warning::Text(text.to_string()))
    }

    fn recognise(text: &str) -> Option<Warning> {
        if let Some(rest) = text.strip_prefix(SKIPPED) {
            let (path, why) = rest.split_once(": ")?;
            return Some(Warning::SegmentSkipped {
                path: path.to_string(),
                why: why.to_string(),
            });
        }
        if let Some(rest) = text.strip_prefix(ATTACH) {
            return Some(Warning::Attach(rest.to_string()));
        }
        if let Some(rest) = text.strip_prefix(TRACE) {
            let rest = rest.strip_suffix(TRACE_END)?;
            let (path, counts) = rest.rsplit_once(TRACE_KEPT)?;
            let (kept, seen) = counts.split_once(" of ")?;
            return Some(Warning::TraceCut {
                path: path.to_string(),
                kept: kept.parse().ok()?,
                seen: seen.parse().ok()?,
            });
        }
        let (head, reasons) = text.split_once(COULD_NOT_RECORD)?;
        let processes: usize = head
            .strip_suffix(" processes")
            .or_else(|| head.strip_suffix(" process"))?
            .parse()
            .ok()?;
        Some(Warning::CouldNotRecord {
            processes,
            reasons: reasons.split("; ").map(str::to_string).collect(),
        })
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::SegmentSkipped { path, why } => write!(f, "{SKIPPED}{path}: {why}"),
            Warning::CouldNotRecord { processes, reasons } => write!(
                f,
                "{processes} process{}{COULD_NOT_RECORD}{}",
                if *processes == 1 { "" } else { "es" },
                reasons.join("; ")
            ),
            Warning::TraceCut { path, kept, seen } => {
                write!(f, "{TRACE}{path}{TRACE_KEPT}{kept} of {seen}{TRACE_END}")
            }
            Warning::Attach(what) => write!(f, "{ATTACH}{what}"),
            Warning::Text(t) => f.write_str(t),
        }
    }
}

impl PartialEq for Warning {
    fn eq(&self, o: &Self) -> bool {
        self.to_string() == o.to_string()
    }
}
impl Eq for Warning {}

impl From<&SegmentProblem> for Warning {
    fn from(p: &SegmentProblem) -> Self {
        Warning::SegmentSkipped {
            path: p.path().display().to_string(),
            why: p.error().to_string(),
        }
    }
}

/// A text from elsewhere (a symbol file's note, a caller's message): its variant when it has
/// one.
impl From<String> for Warning {
    fn from(s: String) -> Self {
        Warning::parse(&s)
    }
}

impl From<&str> for Warning {
    fn from(s: &str) -> Self {
        Warning::parse(s)
    }
}

impl Serialize for Warning {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Warning {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Warning::parse(&String::deserialize(d)?))
    }
}

/// The warnings of a report or snapshot, in the order they arose. Serialized as the list of
/// their texts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Warnings(Vec<Warning>);

impl Warnings {
    /// Adds a warning (a text is mapped to its variant when it has one).
    pub fn push(&mut self, w: impl Into<Warning>) {
        self.0.push(w.into());
    }

    /// Whether some warning is of the kind `matches` accepts.
    pub fn any(&self, matches: impl Fn(&Warning) -> bool) -> bool {
        self.0.iter().any(matches)
    }
}

impl std::ops::Deref for Warnings {
    type Target = [Warning];
    fn deref(&self) -> &[Warning] {
        &self.0
    }
}

impl<'a> IntoIterator for &'a Warnings {
    type Item = &'a Warning;
    type IntoIter = std::slice::Iter<'a, Warning>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<W: Into<Warning>> FromIterator<W> for Warnings {
    fn from_iter<I: IntoIterator<Item = W>>(it: I) -> Self {
        Warnings(it.into_iter().map(Into::into).collect())
    }
}

impl<W: Into<Warning>> Extend<W> for Warnings {
    fn extend<I: IntoIterator<Item = W>>(&mut self, it: I) {
        self.0.extend(it.into_iter().map(Into::into));
    }
}

impl<W: Into<Warning>> From<Vec<W>> for Warnings {
    fn from(v: Vec<W>) -> Self {
        v.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_variant() -> Vec<Warning> {
        vec![
            Warning::SegmentSkipped {
                path: "/dev/shm/syncspy-26-1".into(),
                why: "truncated: 10000 bytes".into(),
            },
            Warning::could_not_record(&["a".into(), "b; c".into(), "b; c".into()]).unwrap(),
            Warning::could_not_record(&["EMFILE".into()]).unwrap(),
            Warning::TraceCut {
                path: "/tmp/t of 3.json".into(),
                kept: 10,
                seen: 12,
            },
            Warning::Attach("not covered: cudaMemcpy (static runtime)".into()),
            Warning::Text("cannot read symbols of libx.so: no build id".into()),
        ]
    }

    #[test]
    fn each_warning_reads_back_from_its_text_as_its_variant() {
        for w in every_variant() {
            let json = serde_json::to_string(&w).unwrap();
            assert_eq!(json, serde_json::to_string(&w.to_string()).unwrap());
            let back: Warning = serde_json::from_str(&json).unwrap();
            assert_eq!(back, w);
            assert_eq!(
                std::mem::discriminant(&back),
                std::mem::discriminant(&w),
                "{w}"
            );
        }
    }

    #[test]
    fn the_texts_are_the_ones_reports_always_held() {
        let w = Warning::could_not_record(&["x".into(), "y".into(), "y".into()]).unwrap();
        assert_eq!(w.to_string(), "3 processes could not record: y; x");
        assert_eq!(
            Warning::could_not_record(&["x".into()])
                .unwrap()
                .to_string(),
            "1 process could not record: x"
        );
        assert_eq!(Warning::could_not_record(&[]), None);
        let p = SegmentProblem::new("/dev/shm/syncspy-1-2", "bad");
        assert_eq!(Warning::from(&p).to_string(), p.to_string());
    }

    #[test]
    fn a_known_warning_is_recognised_by_variant_not_by_a_substring() {
        // A warning that only mentions the words is not one.
        let quoted = Warning::parse("cannot read /srv/why 2 processes could not record: x.so");
        assert!(matches!(quoted, Warning::Text(_)), "{quoted:?}");
        let real = Warning::parse("2 processes could not record: File name too long");
        match real {
            Warning::CouldNotRecord { processes, reasons } => {
                assert_eq!(processes, 2);
                assert_eq!(reasons, ["File name too long"]);
            }
            other => panic!("{other:?}"),
        }
        let mut ws = Warnings::default();
        ws.push("skipped /x: y".to_string());
        assert!(ws.any(|w| matches!(w, Warning::SegmentSkipped { .. })));
        assert!(!ws.any(|w| matches!(w, Warning::CouldNotRecord { .. })));
    }
}
