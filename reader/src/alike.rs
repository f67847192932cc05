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
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::python::{self, PyFrame};
use crate::symbolize::Frame;

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

/// How a call site's stack reads to a person: what its frames print, and for a site with
/// Python frames, those frames and the native op under them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SiteLook {
    /// The Python frames and the native op (`python::native_op`); `None` without Python.
    python: Option<(Vec<PyFrame>, Option<String>)>,
    /// The frames as every view prints them (`python::merge`d), innermost first.
    printed: Vec<String>,
}

impl SiteLook {
    /// The look of a stack whose native frames are `native` and Python frames `python`, with
    /// its frames as every view shows them (`python::merge`).
    pub fn of(native: Vec<Frame>, python: &[PyFrame]) -> (SiteLook, Vec<Frame>) {
        let python_key = (!python.is_empty()).then(|| {
            (
                python.to_vec(),
                python::native_op(&native).map(str::to_string),
            )
        });
        let frames = python::merge(native, python);
        let look = SiteLook {
            python: python_key,
            printed: frames.iter().map(|f| f.text.clone()).collect(),
        };
        (look, frames)
    }

    /// The look of a stack known by what it prints only (a report's site, whose sites are
    /// one per look already).
    pub fn printed(frames: Vec<String>) -> SiteLook {
        SiteLook {
            python: None,
            printed: frames,
        }
    }

    /// Its frames as printed, innermost first.
    pub fn frames(&self) -> &[String] {
        &self.printed
    }
}

/// What makes two call sites one row: one kind, one API (by name), and stacks that read
/// alike (shared: a monitor keys every site at every refresh without copying its frames).
/// Made by [`RowKey::new`] and [`RowKey::waited_by`] only, and read through methods of the
/// fields' names: how a waiter is keyed is this module's to choose.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RowKey {
    kind: String,
    api: String,
    look: Arc<SiteLook>,
    /// The Python stack that waited for the site's stalls on another thread, as text
    /// (`report::Site::waited_by`): two waiting lines over one native stack stay two rows.
    waiter: Option<String>,
}

impl RowKey {
    pub fn new(kind: &str, api: &str, look: impl Into<Arc<SiteLook>>) -> RowKey {
        RowKey {
            kind: kind.to_string(),
            api: api.to_string(),
            look: look.into(),
            waiter: None,
        }
    }

    /// The same key, for the stalls `waiter` waited for (`report::Site::waited_by`; every
    /// view keys its waiter so): whether it was the main thread, and its Python frames.
    pub fn waited_by(mut self, waiter: Option<&python::Waiter>) -> RowKey {
        self.waiter = waiter.map(|w| {
            let frames: Vec<String> = w.python.iter().map(PyFrame::text).collect();
            format!("{}|{}", w.main_thread, frames.join("\n"))
        });
        self
    }

    /// The sites' kind, by name.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The sites' API, by name.
    pub fn api(&self) -> &str {
        &self.api
    }

    /// How the sites' stacks read.
    pub fn look(&self) -> &Arc<SiteLook> {
        &self.look
    }

    /// The Python stack that waited for the sites' stalls on another thread, as text
    /// (`None` for sites without one).
    pub fn waiter(&self) -> Option<&str> {
        self.waiter.as_deref()
    }
}

/// A key's kind, API, waiter and Python part (sites with Python frames only).
#[derive(PartialEq, Eq, Hash)]
struct ByPython(String, String, Option<String>, PythonPart);

/// A key's kind, API, waiter and printed frames.
#[derive(PartialEq, Eq, Hash)]
struct ByPrinted(String, String, Option<String>, Printed);

/// A look compared and hashed by its Python part alone (which it has).
struct PythonPart(Arc<SiteLook>);

impl PartialEq for PythonPart {
    fn eq(&self, o: &Self) -> bool {
        self.0.python == o.0.python
    }
}
impl Eq for PythonPart {}
impl Hash for PythonPart {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.python.hash(h);
    }
}

/// A look compared and hashed by its printed frames alone.
struct Printed(Arc<SiteLook>);

impl PartialEq for Printed {
    fn eq(&self, o: &Self) -> bool {
        self.0.printed == o.0.printed
    }
}
impl Eq for Printed {}
impl Hash for Printed {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.printed.hash(h);
    }
}

/// Call sites, each with its key, with those that read alike made one (the rule of every
/// view: the report's sites, both monitor sources' rows). First the sites with the same
/// Python frames above the same native op (one Python line reached through two native paths,
/// before and after the interpreter specializes a call), then those whose frames print the
/// same; as in [`group`], the first of each stays where it is and the others are `merge`d
/// into it. A site whose key is `None` (not symbolized yet) is never merged.
pub fn sites<T>(
    items: impl IntoIterator<Item = (Option<RowKey>, T)>,
    mut merge: impl FnMut(&mut T, T),
) -> Vec<T> {
    let by_python = group(
        items,
        |(k, _)| {
            let k = k.as_ref()?;
            k.look.python.as_ref()?;
            let part = PythonPart(Arc::clone(&k.look));
            Some(ByPython(
                k.kind.clone(),
                k.api.clone(),
                k.waiter.clone(),
                part,
            ))
        },
        |(_, a), (_, b)| merge(a, b),
    );
    group(
        by_python,
        |(k, _)| {
            let k = k.as_ref()?;
            let printed = Printed(Arc::clone(&k.look));
            Some(ByPrinted(
                k.kind.clone(),
                k.api.clone(),
                k.waiter.clone(),
                printed,
            ))
        },
        |(_, a), (_, b)| merge(a, b),
    )
    .into_iter()
    .map(|(_, t)| t)
    .collect()
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

    fn frame(text: &str) -> Frame {
        Frame {
            text: text.to_string(),
            module: None,
        }
    }

    #[test]
    fn sites_that_read_alike_are_one_and_unknown_ones_stay_apart() {
        let key = |kind: &str, frames: &[&str]| {
            let native = frames.iter().map(|f| frame(f)).collect();
            Some(RowKey::new(kind, "cudaMemcpy", SiteLook::of(native, &[]).0))
        };
        let v = sites(
            [
                (key("memcpy_sync", &["f (a.c:3)"]), 19),
                (key("memcpy_sync", &["g (a.c:9)"]), 5),
                (key("memcpy_sync", &["f (a.c:3)"]), 1),
                (key("stream_sync", &["f (a.c:3)"]), 2),
                (None, 7),
                (None, 7),
            ],
            |a, b| *a += b,
        );
        assert_eq!(v, [20, 5, 2, 7, 7]);
        // One Python line over one op, through two native paths: one site.
        let py = [PyFrame {
            file: "train.py".into(),
            line: 4,
            function: "step".into(),
            skipped: 0,
        }];
        let k = |path: &str| {
            let native = vec![frame("op (t.cpp:1)"), frame(path)];
            Some(RowKey::new("stream_sync", "x", SiteLook::of(native, &py).0))
        };
        assert_eq!(
            sites([(k("p (a:1)"), 1), (k("q (b:2)"), 2)], |a, b| *a += b),
            [3]
        );

        // Waited for by two lines, over one native stack: two sites; by one line: one.
        let waited = |line: u32| {
            let w = python::Waiter {
                location: None,
                main_thread: true,
                python: vec![PyFrame {
                    line,
                    ..py[0].clone()
                }],
            };
            let native = vec![frame("op (t.cpp:1)")];
            let key = RowKey::new("stream_sync", "x", SiteLook::of(native, &[]).0);
            Some(key.waited_by(Some(&w)))
        };
        let v = sites([(waited(4), 1), (waited(9), 2), (waited(4), 4)], |a, b| {
            *a += b
        });
        assert_eq!(v, [5, 2]);
    }
}
