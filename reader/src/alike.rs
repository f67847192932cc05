//! The merge rules every view shares: what reads the same to a person is one row.
//!
//! - **Call sites that print alike are one site**: two stacks whose frames symbolize to the
//!   same text (return addresses within one line, frames below the table's depth) are listed
//!   once, with their figures together ([`crate::report`] builds sites through [`group`]).
//! - **Gap causes at one line are one cause**: the GPU idle blamed on one kind of stall, one
//!   call and one location (`report::merge_gap_causes`), however many stacks reached it.
//!
//! The report, the summary, the snapshot and both monitor sources take their rows from here,
//! so no view can list twice what another lists once.

use std::collections::HashMap;
use std::hash::Hash;

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

#[cfg(test)]
mod tests {
    use super::*;

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
