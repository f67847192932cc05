//! The budget file (TOML): what it may say, and parsing it into a [`Budget`] with errors that
//! name the line and column.
//!
//! ```toml
//! [iterations]                  # optional: how the program marks one iteration
//! kind = "device_sync"          # events of this kind (or list of kinds) count iterations
//! site = "train_step"           # optional: only those at matching sites
//!
//! [[rule]]
//! name = "no stream syncs in the step"   # required, unique
//! kind = "stream_sync"                    # a kind or a list; default: every host-stall kind
//! site = "train.py:142"                   # optional: only events at matching sites
//! allow_sites = ["loss.item"]             # optional: events at these sites are exempt
//! process = "train.py"                    # optional: only processes whose command matches
//! require_match = true                    # optional: a pattern that matches nothing fails
//! max_count = 0                           # limits (at least one): see `Measure`
//! ```
//! Site patterns are substrings of a site's symbolized frames (`symbol (file:line)`); a
//! pattern list matches when any pattern does. Unknown keys are errors.

use std::fmt;
use std::ops::Range;

use serde::de::{self, Deserializer, IntoDeserializer, SeqAccess, Visitor};
use serde::Deserialize;
use syncspy_abi::Kind;
use toml::Spanned;

/// A parsed, validated budget.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    /// The file name as given, for messages.
    pub source: String,
    pub iterations: Option<Iterations>,
    pub rules: Vec<Rule>,
}

/// Which events mark one iteration of the program (`[iterations]`).
#[derive(Clone, Debug, PartialEq)]
pub struct Iterations {
    pub kinds: Vec<Kind>,
    /// Substring patterns; empty: every site.
    pub sites: Vec<String>,
}

/// One `[[rule]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub name: String,
    /// Line of the rule in the file (1-based).
    pub line: usize,
    /// Kinds counted; empty: every kind in which the host waited (all but `gpu_idle`).
    pub kinds: Vec<Kind>,
    /// Only events at sites matching one of these (empty: every site).
    pub sites: Vec<String>,
    /// Events at sites matching one of these are exempt.
    pub allow_sites: Vec<String>,
    /// Only processes whose command line contains this.
    pub process: Option<String>,
    pub limits: Vec<Limit>,
    /// A `site`, `allow_sites` or `process` pattern that matches nothing fails the rule
    /// (`require_match = true`) instead of only being reported.
    pub require_match: bool,
}

impl Rule {
    /// Whether the rule looks at call sites (and so depends on the records received).
    pub fn uses_sites(&self) -> bool {
        !self.sites.is_empty() || !self.allow_sites.is_empty()
    }
}

/// What a limit measures over the events a rule selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// Number of events.
    Count,
    /// Time spent in them, ns (the file says milliseconds).
    TotalNs,
    /// Bytes they moved.
    Bytes,
    /// Their time over the process's wall time (0..=1).
    StallShare,
    /// The share of the GPU's active time (first work to last) it ran nothing (0..=1);
    /// skipped when not measured.
    GpuIdleShare,
}

/// One limit of a rule: `measure` (per iteration when `per_iteration`) must be `<= max`.
#[derive(Clone, Debug, PartialEq)]
pub struct Limit {
    /// The key as written in the file (`max_count`, `max_total_ms_per_iteration`, ...).
    pub key: &'static str,
    pub measure: Measure,
    pub per_iteration: bool,
    /// In the measure's unit: count, ns, bytes, or a fraction.
    pub max: f64,
}

/// Why a budget file was rejected, with the position (1-based line and column) when known.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetError {
    pub source: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
    /// The offending line of the file, for context ("" when unknown).
    pub snippet: String,
}

impl fmt::Display for BudgetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            return write!(
                f,
                "cannot read budget file {}: {}",
                self.source, self.message
            );
        }
        write!(
            f,
            "bad budget file {}: line {}, column {}: {}",
            self.source, self.line, self.column, self.message
        )?;
        if !self.snippet.is_empty() {
            write!(f, "\n    {} | {}", self.line, self.snippet)?;
        }
        Ok(())
    }
}

impl std::error::Error for BudgetError {}

/// 1-based line and column of byte `offset` in `text`, and the text of that line.
fn position(text: &str, offset: usize) -> (usize, usize, String) {
    let offset = offset.min(text.len());
    let before = &text[..floor_char_boundary(text, offset)];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let column = before[line_start..].chars().count() + 1;
    let line_text = text[line_start..].lines().next().unwrap_or("").to_string();
    (line, column, line_text)
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// A kind name, checked against the known kinds.
#[derive(Clone, Copy, Debug)]
struct KindName(Kind);

impl<'de> Deserialize<'de> for KindName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Kind::from_name(&s).map(KindName).ok_or_else(|| {
            let known: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
            de::Error::custom(format!(
                "unknown event kind `{s}`, expected one of {}",
                known.join(", ")
            ))
        })
    }
}

/// A site pattern: a non-empty substring.
#[derive(Clone, Debug)]
struct Pattern(String);

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.is_empty() {
            return Err(de::Error::custom(
                "an empty site pattern matches every site: remove it, or name a function or \
                 file:line",
            ));
        }
        Ok(Pattern(s))
    }
}

/// One value or a list of them: `kind = "stream_sync"` or `kind = ["a", "b"]`.
#[derive(Clone, Debug)]
struct OneOrMany<T>(Vec<T>);

/// The pattern strings of an optional one-or-many field (none when it is absent).
fn patterns(v: Option<OneOrMany<Pattern>>) -> Vec<String> {
    v.map(|s| s.0)
        .unwrap_or_default()
        .into_iter()
        .map(|p| p.0)
        .collect()
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = OneOrMany<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a list of strings")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                T::deserialize(s.into_deserializer()).map(|t| OneOrMany(vec![t]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut v = Vec::new();
                while let Some(t) = seq.next_element()? {
                    v.push(t);
                }
                if v.is_empty() {
                    return Err(de::Error::custom(
                        "an empty list: leave the key out, or name at least one",
                    ));
                }
                Ok(OneOrMany(v))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A non-negative finite number.
#[derive(Clone, Copy, Debug)]
struct NonNeg(f64);

impl<'de> Deserialize<'de> for NonNeg {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if !v.is_finite() || v < 0.0 {
            return Err(de::Error::custom(format!(
                "expected a number >= 0, found {v}"
            )));
        }
        Ok(NonNeg(v))
    }
}

/// A fraction in 0..=1.
#[derive(Clone, Copy, Debug)]
struct Share(f64);

impl<'de> Deserialize<'de> for Share {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if !(0.0..=1.0).contains(&v) {
            return Err(de::Error::custom(format!(
                "expected a fraction between 0 and 1 (0.05 is 5%), found {v}"
            )));
        }
        Ok(Share(v))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBudget {
    #[serde(default)]
    rule: Vec<Spanned<RawRule>>,
    iterations: Option<Spanned<RawIterations>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIterations {
    kind: OneOrMany<KindName>,
    site: Option<OneOrMany<Pattern>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: Spanned<String>,
    kind: Option<OneOrMany<KindName>>,
    site: Option<OneOrMany<Pattern>>,
    allow_sites: Option<OneOrMany<Pattern>>,
    process: Option<Spanned<String>>,
    require_match: Option<bool>,
    forbid: Option<Spanned<bool>>,
    max_count: Option<Spanned<u64>>,
    max_total_ms: Option<Spanned<NonNeg>>,
    max_bytes: Option<Spanned<u64>>,
    max_count_per_iteration: Option<Spanned<NonNeg>>,
    max_total_ms_per_iteration: Option<Spanned<NonNeg>>,
    max_bytes_per_iteration: Option<Spanned<NonNeg>>,
    max_stall_share: Option<Spanned<Share>>,
    max_gpu_idle_share: Option<Spanned<Share>>,
}

/// Every limit key, for the "no limit" message.
pub const LIMIT_KEYS: [&str; 9] = [
    "forbid",
    "max_count",
    "max_total_ms",
    "max_bytes",
    "max_count_per_iteration",
    "max_total_ms_per_iteration",
    "max_bytes_per_iteration",
    "max_stall_share",
    "max_gpu_idle_share",
];

/// Where a budget comes from, for its errors: the file's name and its text.
struct Source<'a> {
    name: &'a str,
    text: &'a str,
}

impl Source<'_> {
    /// An error at `span` (None: the start), with its line, column and snippet.
    fn err(&self, span: Option<Range<usize>>, message: String) -> BudgetError {
        let (line, column, snippet) = match span {
            Some(s) => position(self.text, s.start),
            None => (1, 1, String::new()),
        };
        BudgetError {
            source: self.name.to_string(),
            line,
            column,
            message,
            snippet,
        }
    }
}

/// Parses and validates a budget. `source` names the file in messages.
pub fn parse(source: &str, text: &str) -> Result<Budget, BudgetError> {
    let at = Source { name: source, text };
    let raw: RawBudget =
        toml::from_str(text).map_err(|e| at.err(e.span(), e.message().trim().to_string()))?;
    let iterations = raw.iterations.map(|it| iterations_of(it.into_inner()));
    if raw.rule.is_empty() {
        return Err(at.err(
            Some(0..0),
            "no [[rule]]: a budget needs at least one rule (see `syncspy check --help`)".into(),
        ));
    }
    let mut rules: Vec<Rule> = Vec::new();
    for spanned in raw.rule {
        let rule = rule_of(&at, spanned, &rules, iterations.is_some())?;
        rules.push(rule);
    }
    Ok(Budget {
        source: source.to_string(),
        iterations,
        rules,
    })
}

fn iterations_of(it: RawIterations) -> Iterations {
    Iterations {
        kinds: it.kind.0.into_iter().map(|k| k.0).collect(),
        sites: it
            .site
            .map(|s| s.0)
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.0)
            .collect(),
    }
}

/// One `[[rule]]`, checked: a unique, non-empty name (`before`: the rules before it), at
/// least one limit, no empty `process`.
fn rule_of(
    at: &Source<'_>,
    spanned: Spanned<RawRule>,
    before: &[Rule],
    has_iterations: bool,
) -> Result<Rule, BudgetError> {
    let span = spanned.span();
    let r = spanned.into_inner();
    let name = r.name.get_ref().trim().to_string();
    if name.is_empty() {
        return Err(at.err(
            Some(r.name.span()),
            "a rule's name must not be empty".into(),
        ));
    }
    if before.iter().any(|x| x.name == name) {
        return Err(at.err(
            Some(r.name.span()),
            format!("another rule is already named \"{name}\": names must be unique"),
        ));
    }
    let limits = limits_of(at, &r, has_iterations)?;
    if limits.is_empty() {
        return Err(at.err(
            Some(span),
            format!(
                "rule \"{name}\" sets no limit: give at least one of {}",
                LIMIT_KEYS.join(", ")
            ),
        ));
    }
    if let Some(p) = &r.process {
        if p.get_ref().is_empty() {
            return Err(at.err(
                Some(p.span()),
                "an empty `process` matches every process: leave it out".into(),
            ));
        }
    }
    Ok(Rule {
        name,
        line: position(at.text, span.start).0,
        kinds: r
            .kind
            .map(|k| k.0)
            .unwrap_or_default()
            .into_iter()
            .map(|k| k.0)
            .collect(),
        sites: patterns(r.site),
        allow_sites: patterns(r.allow_sites),
        process: r.process.map(|p| p.into_inner()),
        limits,
        require_match: r.require_match.unwrap_or(false),
    })
}

/// A rule's limits, in the order of [`LIMIT_KEYS`]; a per-iteration limit needs an
/// `[iterations]` table (`has_iterations`).
fn limits_of(
    at: &Source<'_>,
    r: &RawRule,
    has_iterations: bool,
) -> Result<Vec<Limit>, BudgetError> {
    let mut limits = Vec::new();
    let mut add = |key: &'static str, measure, per_iteration, max: f64| {
        limits.push(Limit {
            key,
            measure,
            per_iteration,
            max,
        })
    };
    if let Some(f) = &r.forbid {
        if *f.get_ref() {
            if let Some(m) = r.max_count.as_ref().filter(|m| *m.get_ref() > 0) {
                return Err(at.err(
                    Some(m.span()),
                    format!(
                        "`forbid = true` and `max_count = {}` contradict each other: keep one",
                        m.get_ref()
                    ),
                ));
            }
            if r.max_count.is_none() {
                add("forbid", Measure::Count, false, 0.0);
            }
        }
    }
    if let Some(m) = &r.max_count {
        add("max_count", Measure::Count, false, *m.get_ref() as f64);
    }
    if let Some(m) = &r.max_total_ms {
        add("max_total_ms", Measure::TotalNs, false, m.get_ref().0 * 1e6);
    }
    if let Some(m) = &r.max_bytes {
        add("max_bytes", Measure::Bytes, false, *m.get_ref() as f64);
    }
    let per_iteration = [
        (
            &r.max_count_per_iteration,
            "max_count_per_iteration",
            Measure::Count,
            1.0,
        ),
        (
            &r.max_total_ms_per_iteration,
            "max_total_ms_per_iteration",
            Measure::TotalNs,
            1e6,
        ),
        (
            &r.max_bytes_per_iteration,
            "max_bytes_per_iteration",
            Measure::Bytes,
            1.0,
        ),
    ];
    for (value, key, measure, scale) in per_iteration {
        if let Some(m) = value {
            if !has_iterations {
                return Err(at.err(
                    Some(m.span()),
                    format!(
                        "`{key}` needs an [iterations] table that says which events mark \
                         an iteration (for example `[iterations]` with \
                         `kind = \"device_sync\"`)"
                    ),
                ));
            }
            add(key, measure, true, m.get_ref().0 * scale);
        }
    }
    if let Some(m) = &r.max_stall_share {
        add("max_stall_share", Measure::StallShare, false, m.get_ref().0);
    }
    if let Some(m) = &r.max_gpu_idle_share {
        add(
            "max_gpu_idle_share",
            Measure::GpuIdleShare,
            false,
            m.get_ref().0,
        );
    }
    Ok(limits)
}

/// Reads and parses a budget file.
pub fn load(path: &std::path::Path) -> Result<Budget, BudgetError> {
    let source = path.display().to_string();
    // A regular file of at most 1 MiB: `/dev/zero` or a FIFO is an error, not an endless
    // read or a hang.
    let text = syncspy_read::safe_file::read_bounded(
        path,
        syncspy_read::safe_file::BUDGET_MAX_BYTES,
        "a budget file",
    )
    .and_then(|b| {
        String::from_utf8(b).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    })
    .map_err(|e| BudgetError {
        source: source.clone(),
        line: 0,
        column: 0,
        message: e.to_string(),
        snippet: String::new(),
    })?;
    parse(&source, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
[[rule]]
name = "no stream syncs in the step"   # shown in the summary and in JUnit
kind = "stream_sync"                    # an event kind, or a list of kinds
max_count = 0                           # optional limits: max_count, max_total_ms, max_bytes
site = "train.py:142"                   # optional: the rule counts only events at matching sites
allow_sites = ["loss.item"]             # optional: events at these sites are exempt
[[rule]]
name = "stall share"
max_stall_share = 0.05                  # stall time / wall time of the process
"#;

    fn parse_err(text: &str) -> BudgetError {
        parse("b.toml", text).unwrap_err()
    }

    #[test]
    fn the_minimal_example_reads_with_its_meaning() {
        let b = parse("b.toml", EXAMPLE).unwrap();
        assert_eq!(b.iterations, None);
        assert_eq!(b.rules.len(), 2);
        let r = &b.rules[0];
        assert_eq!(r.name, "no stream syncs in the step");
        assert_eq!(r.line, 2);
        assert_eq!(r.kinds, vec![Kind::StreamSync]);
        assert_eq!(r.sites, vec!["train.py:142"]);
        assert_eq!(r.allow_sites, vec!["loss.item"]);
        assert_eq!(
            r.limits,
            vec![Limit {
                key: "max_count",
                measure: Measure::Count,
                per_iteration: false,
                max: 0.0
            }]
        );
        let r = &b.rules[1];
        assert_eq!(r.name, "stall share");
        assert_eq!(r.line, 8);
        assert!(r.kinds.is_empty() && r.sites.is_empty() && !r.uses_sites());
        assert_eq!(r.limits[0].measure, Measure::StallShare);
        assert_eq!(r.limits[0].max, 0.05);
    }

    #[test]
    fn every_field_reads() {
        let b = parse(
            "b.toml",
            r#"
[iterations]
kind = ["device_sync"]
site = "train_step"

[[rule]]
name = "pageable copies"
kind = ["memcpy_pageable", "memcpy_sync"]
process = "train.py"
max_bytes = 1048576
max_total_ms = 2.5
max_count_per_iteration = 0.5
max_total_ms_per_iteration = 1
max_bytes_per_iteration = 4096

[[rule]]
name = "no device syncs"
kind = "device_sync"
forbid = true

[[rule]]
name = "gpu idle"
max_gpu_idle_share = 0.2
"#,
        )
        .unwrap();
        let it = b.iterations.unwrap();
        assert_eq!(it.kinds, vec![Kind::DeviceSync]);
        assert_eq!(it.sites, vec!["train_step"]);
        let r = &b.rules[0];
        assert_eq!(r.kinds, vec![Kind::MemcpyPageable, Kind::MemcpySync]);
        assert_eq!(r.process.as_deref(), Some("train.py"));
        let keys: Vec<(&str, f64, bool)> = r
            .limits
            .iter()
            .map(|l| (l.key, l.max, l.per_iteration))
            .collect();
        assert_eq!(
            keys,
            vec![
                ("max_total_ms", 2.5e6, false),
                ("max_bytes", 1048576.0, false),
                ("max_count_per_iteration", 0.5, true),
                ("max_total_ms_per_iteration", 1e6, true),
                ("max_bytes_per_iteration", 4096.0, true),
            ]
        );
        assert_eq!(
            b.rules[1].limits,
            vec![Limit {
                key: "forbid",
                measure: Measure::Count,
                per_iteration: false,
                max: 0.0
            }]
        );
        assert_eq!(b.rules[2].limits[0].measure, Measure::GpuIdleShare);
    }

    #[test]
    fn unknown_keys_name_their_line_and_column() {
        let e = parse_err("[[rule]]\nname = \"a\"\nmax_count = 1\n  max_cont = 2\n");
        assert_eq!((e.line, e.column), (4, 3), "{e}");
        assert!(e.message.contains("unknown field `max_cont`"), "{e}");
        assert!(e.message.contains("max_count"), "{e}");
        assert_eq!(e.snippet, "  max_cont = 2");
        let s = e.to_string();
        assert!(
            s.starts_with("bad budget file b.toml: line 4, column 3: unknown field"),
            "{s}"
        );

        let e = parse_err("[iteration]\nkind = \"device_sync\"\n");
        assert_eq!(e.line, 1, "{e}");
        assert!(e.message.contains("unknown field `iteration`"), "{e}");
        let e = parse_err("[iterations]\nkind = \"device_sync\"\nsite_ = \"x\"\n");
        assert_eq!(e.line, 3, "{e}");
    }

    #[test]
    fn bad_values_name_their_position() {
        let e = parse_err(
            "[[rule]]\nname = \"a\"\nkind = [\"stream_sync\", \"stream_synk\"]\nmax_count = 0\n",
        );
        assert_eq!(e.line, 3, "{e}");
        assert!(
            e.message.contains("unknown event kind `stream_synk`"),
            "{e}"
        );
        assert!(e.message.contains("memcpy_pageable"), "{e}");
        let e = parse_err("[[rule]]\nname = \"a\"\nmax_count = -1\n");
        assert_eq!((e.line, e.column), (3, 13), "{e}");
        let e = parse_err("[[rule]]\nname = \"a\"\nmax_stall_share = 5\n");
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.contains("between 0 and 1"), "{e}");
        let e = parse_err("[[rule]]\nname = \"a\"\nmax_total_ms = -0.5\n");
        assert!(e.message.contains(">= 0"), "{e}");
        let e = parse_err("[[rule]]\nname = \"a\"\nsite = \"\"\nmax_count = 0\n");
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.contains("empty site pattern"), "{e}");
        let e = parse_err("[[rule]]\nname = \"a\"\nkind = []\nmax_count = 0\n");
        assert!(e.message.contains("empty list"), "{e}");
        let e = parse_err("[[rule]]\nname = \"a\"\nkind = 3\nmax_count = 0\n");
        assert_eq!(e.line, 3, "{e}");
        // TOML syntax errors too.
        let e = parse_err("[[rule]]\nname = \"a\nmax_count = 0\n");
        assert_eq!(e.line, 2, "{e}");
    }

    #[test]
    fn rules_that_cannot_mean_anything_are_rejected() {
        let e = parse_err("");
        assert!(e.message.contains("no [[rule]]"), "{e}");
        let e = parse_err(
            "[[rule]]\nname = \"a\"\nforbid = true\n\n[[rule]]\nname = \"b\"\nkind = \"device_sync\"\n",
        );
        assert!(e.message.contains("rule \"b\" sets no limit"), "{e}");
        assert_eq!(e.line, 5, "{e}");
        let e = parse_err("[[rule]]\nkind = \"device_sync\"\nmax_count = 1\n");
        assert!(e.message.contains("missing field `name`"), "{e}");
        let e = parse_err(
            "[[rule]]\nname = \"a\"\nmax_count = 1\n[[rule]]\nname = \"a\"\nmax_count = 2\n",
        );
        assert_eq!(e.line, 5, "{e}");
        assert!(e.message.contains("unique"), "{e}");
        let e = parse_err("[[rule]]\nname = \"a\"\nforbid = true\nmax_count = 3\n");
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("contradict"), "{e}");
        let e = parse_err("[[rule]]\nname = \"a\"\nmax_count_per_iteration = 3\n");
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.contains("[iterations]"), "{e}");
        // forbid = true with max_count = 0 is the same rule said twice: fine.
        let b = parse(
            "b",
            "[[rule]]\nname = \"a\"\nforbid = true\nmax_count = 0\n",
        )
        .unwrap();
        assert_eq!(b.rules[0].limits.len(), 1);
    }

    #[test]
    fn positions_count_characters_not_bytes() {
        assert_eq!(position("ab\ncd", 4), (2, 2, "cd".to_string()));
        assert_eq!(position("é = 1", 3), (1, 3, "é = 1".to_string()));
        assert_eq!(position("", 0), (1, 1, String::new()));
    }
}
