//! The `program` label of the agent's series, with a quota per user.
//!
//! Label values are bounded, or any local user could grow the page (and Prometheus's series)
//! without end by running processes under ever new names. The bound is per user: root's and
//! the agent's own user's programs get up to `PRIVILEGED_PROGRAMS` labels, every other user
//! up to `USER_PROGRAMS`. Past its quota a user's programs are labelled `other` (root's and
//! the agent's user) or `other-uid<N>` (user N): one user's names can never fold another
//! user's jobs into `other`, and the numbers under `other-uid<N>` are that user's alone. A
//! label a user's live processes no longer use is given back (`release_unused`): its
//! forgotten totals fold into that user's `other-uid<N>`, so a user who cycles through names
//! keeps at most `USER_PROGRAMS + 1` series per metric.

use std::collections::{BTreeMap, BTreeSet};

use syncspy_read::program::program_of;
use syncspy_read::snapshot::ForgottenProgram;

/// Labels of root's and the agent's own user's programs; later ones are `other`.
pub const PRIVILEGED_PROGRAMS: usize = 50;
/// Labels of each other user's programs; later ones are `other-uid<N>`.
pub const USER_PROGRAMS: usize = 8;

/// Program labels handed out, per user.
pub struct ProgramLabels {
    /// The agent's effective uid.
    me: u32,
    /// (uid, program) -> label.
    given: BTreeMap<(u32, String), String>,
}

impl ProgramLabels {
    pub fn new(me: u32) -> ProgramLabels {
        ProgramLabels {
            me,
            given: BTreeMap::new(),
        }
    }

    fn privileged(&self, uid: u32) -> bool {
        uid == 0 || uid == self.me
    }

    /// The label for user `uid`'s program of command line `argv`.
    pub fn label(&mut self, uid: u32, argv: &[String]) -> String {
        let program = program_of(argv);
        if let Some(l) = self.given.get(&(uid, program.clone())) {
            return l.clone();
        }
        let quota = if self.privileged(uid) {
            PRIVILEGED_PROGRAMS
        } else {
            USER_PROGRAMS
        };
        let named = self
            .given
            .iter()
            .filter(|((u, _), l)| *u == uid && !is_fold(l))
            .count();
        let l = if named < quota {
            program.clone()
        } else {
            self.fold_of(uid)
        };
        self.given.insert((uid, program), l.clone());
        l
    }

    /// Where user `uid`'s programs past the quota go.
    fn fold_of(&self, uid: u32) -> String {
        if self.privileged(uid) {
            "other".to_string()
        } else {
            format!("other-uid{uid}")
        }
    }

    /// Gives back the labels of other users' programs that no live process in `in_use`
    /// (uid, command line) has; their forgotten totals fold into the user's `other-uid<N>`.
    /// Root's and the agent's user's labels stay (bounded by their quota).
    pub fn release_unused(
        &mut self,
        in_use: &[(u32, &[String])],
        forgotten: &mut BTreeMap<String, ForgottenProgram>,
    ) {
        let used: BTreeSet<(u32, String)> =
            in_use.iter().map(|(u, a)| (*u, program_of(a))).collect();
        let gone: Vec<(u32, String)> = self
            .given
            .iter()
            .filter(|((u, p), l)| {
                !self.privileged(*u) && !is_fold(l) && !used.contains(&(*u, p.clone()))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for (uid, program) in gone {
            let Some(label) = self.given.remove(&(uid, program)) else {
                continue;
            };
            // Another user may hold the same name: its series stays theirs.
            if self.given.values().any(|l| *l == label) {
                continue;
            }
            if let Some(totals) = forgotten.remove(&label) {
                forgotten
                    .entry(self.fold_of(uid))
                    .or_default()
                    .absorb(&totals);
            }
        }
        // Folded programs with no live process need no entry either.
        self.given
            .retain(|(u, p), l| !is_fold(l) || used.contains(&(*u, p.clone())));
    }
}

fn is_fold(label: &str) -> bool {
    label == "other" || label.starts_with("other-uid")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        vec![s.to_string()]
    }

    #[test]
    fn another_users_names_never_fold_roots_programs() {
        let mut l = ProgramLabels::new(0);
        // User 65534 runs 60 differently named programs first.
        for i in 0..60 {
            let got = l.label(65534, &argv(&format!("p{i}")));
            if i < USER_PROGRAMS {
                assert_eq!(got, format!("p{i}"));
            } else {
                assert_eq!(got, "other-uid65534");
            }
        }
        // Root's jobs after them keep their names, up to root's own quota.
        assert_eq!(l.label(0, &argv("train")), "train");
        let py = ["/usr/bin/python3".to_string(), "eval.py".to_string()];
        assert_eq!(l.label(0, &py), "python3 eval.py");
        for i in 0..PRIVILEGED_PROGRAMS {
            l.label(0, &argv(&format!("r{i}")));
        }
        assert_eq!(l.label(0, &argv("late")), "other");
        // A known program keeps its label.
        assert_eq!(l.label(65534, &argv("p3")), "p3");
    }

    #[test]
    fn labels_no_live_process_uses_are_given_back_into_the_users_other() {
        let mut l = ProgramLabels::new(0);
        let mut forgotten = BTreeMap::new();
        for i in 0..USER_PROGRAMS {
            let name = format!("p{i}");
            assert_eq!(l.label(65534, &argv(&name)), name);
            forgotten.insert(
                name,
                ForgottenProgram {
                    processes: 1,
                    ..Default::default()
                },
            );
        }
        assert_eq!(l.label(65534, &argv("more")), "other-uid65534");
        assert_eq!(l.label(0, &argv("train")), "train");
        forgotten.insert(
            "train".to_string(),
            ForgottenProgram {
                processes: 1,
                ..Default::default()
            },
        );
        // Only p0 runs still: the other names go back, their totals into other-uid65534.
        let live = argv("p0");
        l.release_unused(&[(65534, &live)], &mut forgotten);
        assert_eq!(
            forgotten["other-uid65534"].processes,
            USER_PROGRAMS as u64 - 1
        );
        assert_eq!(forgotten["p0"].processes, 1);
        assert_eq!(forgotten["train"].processes, 1, "root's label stays");
        assert_eq!(forgotten.len(), 3);
        // The quota is free again for new names.
        assert_eq!(l.label(65534, &argv("fresh")), "fresh");
    }
}
