//! The merge rules every view shares: what reads the same to a person is one row.
//!
//! - **Call sites that print alike are one site**: two stacks whose frames symbolize to the
//!   same text (return addresses within one line, frames below the table's depth) are listed
//!   once, with their figures together ([`crate::report`] builds sites through [`group`]).
//! - **Gap causes at one line are one cause**: the GPU idle blamed on one kind of stall, one
//!   call and one location ([`merge_gap_causes`]), however many stacks reached it.
//!
//! The report, the summary, the snapshot and both monitor sources take their rows from here,
//! so no view can list twice what another lists once.

use std::collections::HashMap;
use std::hash::Hash;

use crate::report::GapCauseReport;

/// `items` with those of equal `key` made one: the first of each key stays where it is (in
/// the order given, so the largest when they come largest first) and the later ones are
/// `merge`d into it. Items whose key is `None` are never merged.
pub fn group<T, K: Eq + Hash>(
    items: impl IntoIterator<Item = T>,
    key: impl Fn(&T) -> Option<K>,
    mut merge: impl FnMut(&mut T, T),
) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    let mut at: HashMap<K, usize> = HashMap::new();
    for item in items {
        match key(&item) {
            Some(k) => match at.get(&k) {
                Some(&i) => merge(&mut out[i], item),
                None => {
                    at.insert(k, out.len());
                    out.push(item);
                }
            },
            None => out.push(item),
        }
    }
    out
}

/// Gap causes with one cause, one call and one location made one (those without a location,
/// such as "host busy elsewhere", stay apart), most idle time first. The merged cause keeps
/// the site id of its largest part.
pub fn merge_gap_causes(causes: Vec<GapCauseReport>) -> Vec<GapCauseReport> {
    let mut causes = causes;
    causes.sort_by_key(|c| std::cmp::Reverse(c.total_ns));
    let mut out = group(
        causes,
        |c| {
            c.location
                .as_ref()
                .filter(|l| !l.is_empty())
                .map(|l| (c.cause.clone(), c.api.clone(), l.clone()))
        },
        |a, b| {
            a.count = a.count.saturating_add(b.count);
            a.total_ns = a.total_ns.saturating_add(b.total_ns);
            a.share += b.share;
        },
    );
    out.sort_by_key(|c| std::cmp::Reverse(c.total_ns));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cause(c: &str, api: &str, total_ns: u64, location: &str, site_id: u32) -> GapCauseReport {
        GapCauseReport {
            cause: c.into(),
            api: api.into(),
            site_id,
            location: (!location.is_empty()).then(|| location.into()),
            count: 1,
            total_ns,
            share: total_ns as f64 / 100.0,
        }
    }

    #[test]
    fn causes_at_one_line_are_one_and_those_without_a_line_stay_apart() {
        let merged = merge_gap_causes(vec![
            cause("stream_sync", "cudaStreamSynchronize", 20, "train.py:45", 3),
            cause("stream_sync", "cudaStreamSynchronize", 40, "train.py:50", 1),
            cause("stream_sync", "cudaStreamSynchronize", 30, "train.py:45", 2),
            cause("memcpy_pageable", "cudaMemcpyAsync", 5, "train.py:45", 4),
            cause("host_busy_elsewhere", "", 3, "", 0),
            cause("host_busy_elsewhere", "", 2, "", 0),
        ]);
        let got: Vec<(&str, Option<&str>, u64, u64, u32)> = merged
            .iter()
            .map(|r| {
                (
                    r.cause.as_str(),
                    r.location.as_deref(),
                    r.count,
                    r.total_ns,
                    r.site_id,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("stream_sync", Some("train.py:45"), 2, 50, 2),
                ("stream_sync", Some("train.py:50"), 1, 40, 1),
                ("memcpy_pageable", Some("train.py:45"), 1, 5, 4),
                ("host_busy_elsewhere", None, 1, 3, 0),
                ("host_busy_elsewhere", None, 1, 2, 0),
            ]
        );
        assert!((merged[0].share - 0.5).abs() < 1e-9);
    }

    #[test]
    fn group_keeps_the_first_of_each_key_in_place() {
        let v = group(
            [(1, "a"), (2, "b"), (3, "a"), (4, "-"), (5, "-")],
            |x| (x.1 != "-").then_some(x.1),
            |a, b| a.0 += b.0,
        );
        assert_eq!(v, [(4, "a"), (2, "b"), (4, "-"), (5, "-")]);
    }
}
