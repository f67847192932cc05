//! Validating the whole manifest: run every scenario under syncspy (or read saved runs), check
//! each against the manifest, and render the result as Markdown tables (what
//! docs/gpu-validation.md records). Used by the `scenario-check` program.

use std::fmt::Write as _;

use serde_json::Value;

use crate::manifest::runner::{saved, verdict, Outcome, Runner};
use crate::manifest::{Manifest, Run, Verdict};
use crate::truth::Kind;

/// One run's outcome and verdict.
#[derive(Debug)]
pub struct Checked {
    pub run: Run,
    pub outcome: Outcome,
    pub verdict: Verdict,
}

/// Runs (or, with `runner` `None`, reads from `saved_dir`) every run whose id passes `select`.
pub fn check_all(
    m: &Manifest,
    runner: Option<&Runner>,
    saved_dir: &std::path::Path,
    select: impl Fn(&str) -> bool,
) -> Vec<Checked> {
    m.runs
        .iter()
        .filter(|r| select(&r.id))
        .map(|run| {
            let outcome = match runner {
                Some(rn) => rn.run(m, run, &[]),
                None => saved(saved_dir, &run.id),
            };
            let verdict = verdict(run, &outcome);
            Checked {
                run: run.clone(),
                outcome,
                verdict,
            }
        })
        .collect()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn nonzero_kinds(kinds: &Value) -> String {
    let list: Vec<String> = Kind::STALLS
        .iter()
        .filter_map(|k| {
            let c = kinds[k.name()]["count"].as_u64().unwrap_or(0);
            (c > 0).then(|| format!("{} {c}", k.name()))
        })
        .collect();
    if list.is_empty() {
        "none".into()
    } else {
        list.join(", ")
    }
}

/// The process's stall share of its wall time, from the report.
pub fn stall_share(process: &Value) -> f64 {
    f(&process["stall_ns"]) / f(&process["wall_ns"]).max(1.0)
}

/// One side of a comparison: the loop's wall time, and the calls and time of the kinds the
/// run's stall rules are about (what the pattern waits in).
fn comparison_cell(c: Option<&Checked>) -> String {
    let Some(c) = c else {
        return "not run".into();
    };
    let wall = c
        .outcome
        .truth
        .as_ref()
        .map(|t| f(&t["wall_ms"]["loop"]))
        .unwrap_or(0.0);
    let mut kinds: Vec<&str> = c
        .run
        .stall
        .iter()
        .flat_map(|r| r.kinds.iter().map(String::as_str))
        .collect();
    kinds.dedup();
    let waits: Vec<String> = match c.outcome.process() {
        Some(p) => kinds
            .iter()
            .map(|k| {
                let st = &p["kinds"][*k];
                format!(
                    "{} x{} {:.2} ms",
                    k,
                    st["count"].as_u64().unwrap_or(0),
                    f(&st["total_ns"]) / 1e6
                )
            })
            .collect(),
        None => vec!["no report".into()],
    };
    format!("{wall:.2} ms; {}", waits.join(", "))
}

/// Markdown: one summary row per run, the comparisons, then every finding.
pub fn markdown(m: &Manifest, checked: &[Checked]) -> String {
    let mut s = String::new();
    s.push_str(
        "| run | pattern | stall kinds found (count) | syncspy stall ms | share of wall | \
         GPU ms (CUDA events) | loop wall ms | result |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for c in checked {
        let p = c.outcome.process();
        let t = c.outcome.truth.as_ref();
        let gpu = t
            .and_then(|t| t["gpu_ms"].as_object())
            .map(|g| {
                g.iter()
                    .map(|(k, v)| format!("{k} {:.2}", f(v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.2} | {:.1}% | {} | {:.2} | {} |",
            c.run.id,
            c.run.pattern.name(),
            p.map(|p| nonzero_kinds(&p["kinds"])).unwrap_or_default(),
            p.map(|p| f(&p["stall_ns"]) / 1e6).unwrap_or(0.0),
            p.map(stall_share).unwrap_or(0.0) * 100.0,
            gpu,
            t.map(|t| f(&t["wall_ms"]["loop"])).unwrap_or(0.0),
            if c.verdict.ok() { "ok" } else { "**FAILED**" },
        );
    }
    if !m.comparisons.is_empty() {
        s.push_str(
            "\n| the same work | stalling: loop wall ms; waits (the pattern's kinds) | healthy: \
             loop wall ms; waits |\n| --- | --- | --- |\n",
        );
        for cmp in &m.comparisons {
            let find = |id: &str| checked.iter().find(|c| c.run.id == id);
            let _ = writeln!(
                s,
                "| {} | {} | {} |",
                cmp.title,
                comparison_cell(find(&cmp.stalling)),
                comparison_cell(find(&cmp.healthy))
            );
        }
    }
    s.push_str("\n| run | check | expected | found | result |\n| --- | --- | --- | --- | --- |\n");
    for c in checked {
        s.push_str(&c.verdict.markdown_rows());
    }
    s
}

/// Running the PyTorch scenarios (scenarios/python/) under syncspy, each at two iteration
/// counts, and checking the difference.
pub mod python {
    use std::fmt::Write as _;
    use std::path::PathBuf;
    use std::process::Command;

    use serde_json::Value;

    use crate::manifest::runner::{saved, truth_line, Outcome};
    use crate::manifest::{Finding, PythonRun, Verdict};
    use crate::truth::Kind;

    #[derive(Debug, Clone)]
    pub struct PyRunner {
        pub syncspy: PathBuf,
        /// The interpreter (`python3`).
        pub python: String,
        /// Folder of the scripts (`scenarios/python`).
        pub script_dir: PathBuf,
        /// Where `<id>-<iters>.json`, `.truth`, `.err` go.
        pub out_dir: PathBuf,
    }

    /// The two outcomes of one PyTorch scenario, at the smaller and the larger count.
    #[derive(Debug)]
    pub struct PyChecked {
        pub run: PythonRun,
        pub low: Outcome,
        pub high: Outcome,
        pub verdict: Verdict,
    }

    fn file_id(p: &PythonRun, iters: u64) -> String {
        format!("{}-{iters}", p.id)
    }

    impl PyRunner {
        pub fn run(&self, p: &PythonRun, iters: u64) -> Outcome {
            let id = file_id(p, iters);
            let report = self.out_dir.join(format!("{id}.json"));
            let _ = std::fs::remove_file(&report);
            let out = Command::new(&self.syncspy)
                .arg("run")
                .arg("--report")
                .arg(&report)
                .arg("--")
                .arg(&self.python)
                .arg(self.script_dir.join(&p.script))
                .args(&p.args)
                .args(["--iters", &iters.to_string()])
                .env("PYTHONUNBUFFERED", "1")
                .output();
            let (stdout, stderr, code) = match out {
                Ok(o) => (
                    String::from_utf8_lossy(&o.stdout).into_owned(),
                    String::from_utf8_lossy(&o.stderr).into_owned(),
                    o.status.code(),
                ),
                Err(e) => (String::new(), format!("could not start syncspy: {e}"), None),
            };
            let _ = std::fs::write(self.out_dir.join(format!("{id}.truth")), &stdout);
            let _ = std::fs::write(self.out_dir.join(format!("{id}.err")), &stderr);
            let mut o = saved(&self.out_dir, &id);
            o.truth = truth_line(&stdout);
            o.exit_code = code;
            o
        }
    }

    /// Runs (or reads, from `saved_dir`, when `runner` is `None`) every PyTorch scenario at
    /// `iters.0` and `iters.1` and checks each pair.
    pub fn check_all(
        runs: &[PythonRun],
        runner: Option<&PyRunner>,
        saved_dir: &std::path::Path,
        iters: (u64, u64),
        select: impl Fn(&str) -> bool,
    ) -> Vec<PyChecked> {
        runs.iter()
            .filter(|p| select(&p.id))
            .map(|p| {
                let get = |n| match runner {
                    Some(r) => r.run(p, n),
                    None => saved(saved_dir, &file_id(p, n)),
                };
                let (low, high) = (get(iters.0), get(iters.1));
                let verdict = check(p, &low, &high);
                PyChecked {
                    run: p.clone(),
                    low,
                    high,
                    verdict,
                }
            })
            .collect()
    }

    fn u(v: &Value) -> u64 {
        v.as_u64().unwrap_or(0)
    }

    fn f(v: &Value) -> f64 {
        v.as_f64().unwrap_or(0.0)
    }

    /// Per-iteration growth between the two runs.
    pub struct Growth {
        pub iters: u64,
        pub kinds: Vec<(&'static str, i64)>,
    }

    /// Adds a finding to `v`.
    fn push(v: &mut Verdict, what: String, expected: String, found: String, ok: bool) {
        v.findings.push(Finding {
            what,
            expected,
            found,
            ok,
        })
    }

    /// A scenario's two runs: truth lines (`t*`) and report processes (`p*`), fewer
    /// iterations first.
    struct Pair<'a> {
        ta: &'a Value,
        tb: &'a Value,
        pa: &'a Value,
        pb: &'a Value,
    }

    impl Pair<'_> {
        /// How much `[field][key][what]` of the process grew from the first run to the second.
        fn grew(&self, field: &str, key: &str, what: &str) -> i64 {
            u(&self.pb[field][key][what]) as i64 - u(&self.pa[field][key][what]) as i64
        }

        /// Both runs exited 0 with their checks passed and nothing dropped.
        fn check_clean(&self, v: &mut Verdict) {
            let ok = |t: &Value, pr: &Value| {
                t["ok"] == true
                    && pr["exit_status"].as_i64() == Some(0)
                    && u(&pr["dropped_events"]) == 0
            };
            let (a, b) = (ok(self.ta, self.pa), ok(self.tb, self.pb));
            push(
                v,
                "both runs exited 0, checks passed, nothing dropped".into(),
                "yes".into(),
                format!("{a} / {b}"),
                a && b,
            );
        }

        /// Each stall kind, and each non-stalling API listed, grew by exactly its count per
        /// iteration over the `n` more iterations.
        fn check_counts(&self, v: &mut Verdict, p: &PythonRun, n: u64) {
            for kind in Kind::STALLS.map(Kind::name) {
                let want = p.per_iter.get(kind).copied().unwrap_or(0) * n;
                let got = self.grew("kinds", kind, "count");
                push(
                    v,
                    format!("{kind}: growth over {n} iterations"),
                    want.to_string(),
                    got.to_string(),
                    got == want as i64,
                );
            }
            for (api, per) in &p.non_stall_per_iter {
                let got = self.grew("non_stall_calls", api, "count");
                push(
                    v,
                    format!("non-stalling {api}: growth"),
                    (per * n).to_string(),
                    got.to_string(),
                    got == (per * n) as i64,
                );
            }
        }

        /// The stall per iteration of each rule's kinds lies within the rule's bounds of the
        /// GPU time per iteration that the script measured.
        fn check_stall_times(&self, v: &mut Verdict, p: &PythonRun, n: u64) {
            let (ta, tb, pa, pb) = (self.ta, self.tb, self.pa, self.pb);
            for rule in &p.stall {
                let sum = |pr: &Value, field: &str| -> f64 {
                    rule.kinds
                        .iter()
                        .map(|k| f(&pr["kinds"][k.as_str()][field]))
                        .sum()
                };
                let stall = (sum(pb, "total_ns") - sum(pa, "total_ns")) / 1e6 / n as f64;
                let calls = (sum(pb, "count") - sum(pa, "count")) / n as f64;
                let key = rule.gpu.as_str();
                let gpu = (f(&tb["gpu_ms"][key]) - f(&ta["gpu_ms"][key])) / n as f64;
                let (lo, hi) = (
                    rule.min * gpu,
                    rule.max * gpu + rule.slack_ms + rule.slack_ms_per_call * calls,
                );
                push(
                    v,
                    format!(
                        "{} stall per iteration vs gpu_ms.{key}",
                        rule.kinds.join("+")
                    ),
                    format!("{lo:.3} ..= {hi:.3} ms (gpu {gpu:.3} ms)"),
                    format!("{stall:.3} ms ({:.2}x)", stall / gpu.max(1e-9)),
                    stall >= lo && stall <= hi,
                );
            }
        }

        /// The second run's top call site names `site`.
        fn check_top_site(&self, v: &mut Verdict, site: &str) {
            let top = crate::manifest::top_site(self.pb);
            push(
                v,
                "top call site".into(),
                format!("names {site}"),
                if top.contains(site) {
                    format!("{site} found")
                } else {
                    top.chars().take(120).collect()
                },
                top.contains(site),
            );
        }
    }

    /// Checks one scenario's pair of runs: counts grow by exactly `per_iter` per iteration,
    /// the stall per iteration relates to the GPU time per iteration as the rules say, and
    /// the top call site names the expected operation.
    pub fn check(p: &PythonRun, low: &Outcome, high: &Outcome) -> Verdict {
        let mut v = Verdict {
            id: p.id.clone(),
            findings: Vec::new(),
        };
        let (Some(ta), Some(tb), Some(pa), Some(pb)) =
            (&low.truth, &high.truth, low.process(), high.process())
        else {
            push(
                &mut v,
                "ran".into(),
                "a truth line and its process in both reports".into(),
                format!(
                    "exit {:?} / {:?}: {}",
                    low.exit_code,
                    high.exit_code,
                    high.stderr.lines().last().unwrap_or("")
                ),
                false,
            );
            return v;
        };
        let pair = Pair { ta, tb, pa, pb };
        pair.check_clean(&mut v);
        let n = u(&tb["args"]["iters"]).saturating_sub(u(&ta["args"]["iters"]));
        if n == 0 {
            push(
                &mut v,
                "iterations differ".into(),
                "> 0".into(),
                "0".into(),
                false,
            );
            return v;
        }
        pair.check_counts(&mut v, p, n);
        pair.check_stall_times(&mut v, p, n);
        if let Some(site) = &p.site {
            pair.check_top_site(&mut v, site);
        }
        v
    }

    /// Markdown: one row per scenario (counts per iteration found), then every finding.
    pub fn markdown(checked: &[PyChecked]) -> String {
        let mut s = String::from(
            "| PyTorch scenario | pattern | stall calls per iteration found | stall ms/iter | \
             GPU ms/iter (CUDA events) | result |\n| --- | --- | --- | --- | --- | --- |\n",
        );
        for c in checked {
            let (ta, tb, pa, pb) = (
                c.low.truth.as_ref(),
                c.high.truth.as_ref(),
                c.low.process(),
                c.high.process(),
            );
            let row = match (ta, tb, pa, pb) {
                (Some(ta), Some(tb), Some(pa), Some(pb)) => {
                    let n = u(&tb["args"]["iters"]).saturating_sub(u(&ta["args"]["iters"]));
                    let n = n.max(1) as f64;
                    let kinds: Vec<String> = Kind::STALLS
                        .iter()
                        .filter_map(|k| {
                            let k = k.name();
                            let g = u(&pb["kinds"][k]["count"]) as f64
                                - u(&pa["kinds"][k]["count"]) as f64;
                            (g != 0.0).then(|| format!("{k} {}", g / n))
                        })
                        .collect();
                    let stall = (f(&pb["stall_ns"]) - f(&pa["stall_ns"])) / 1e6 / n;
                    let gpu: Vec<String> = tb["gpu_ms"]
                        .as_object()
                        .map(|g| {
                            g.iter()
                                .map(|(k, v)| {
                                    format!("{k} {:.3}", (f(v) - f(&ta["gpu_ms"][k])) / n)
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    format!(
                        "{} | {stall:.3} | {}",
                        if kinds.is_empty() {
                            "none".into()
                        } else {
                            kinds.join(", ")
                        },
                        gpu.join(", ")
                    )
                }
                _ => "did not run | | ".into(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {row} | {} |",
                c.run.id,
                c.run.pattern.name(),
                if c.verdict.ok() { "ok" } else { "**FAILED**" }
            );
        }
        s.push_str(
            "\n| run | check | expected | found | result |\n| --- | --- | --- | --- | --- |\n",
        );
        for c in checked {
            s.push_str(&c.verdict.markdown_rows());
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::python::check;
    use crate::manifest::runner::Outcome;
    use crate::manifest::Manifest;

    fn outcome(iters: u64, syncs: u64, stall_ms: f64, gpu_ms: f64, site: &str) -> Outcome {
        let k = |c: u64, ms: f64| json!({"count": c, "total_ns": (ms * 1e6) as u64});
        Outcome {
            truth: Some(json!({"scenario": "t", "pid": 9, "ok": true,
                "args": {"iters": iters}, "gpu_ms": {"work": gpu_ms}})),
            report: Some(json!({"processes": [{
                "pid": 9, "exit_status": 0, "dropped_events": 0,
                "kinds": {"stream_sync": k(syncs, stall_ms), "device_sync": k(3, 0.1)},
                "non_stall_calls": {"cudaMemcpyAsync": {"count": syncs}},
                "sites": [{"frames": ["a", site]}]}]})),
            exit_code: Some(0),
            stderr: String::new(),
            trace_gpu: false,
        }
    }

    #[test]
    fn python_runs_are_checked_on_the_difference() {
        let m = Manifest::bundled();
        let p = m
            .python
            .iter()
            .find(|p| p.id == "torch-item-in-loop")
            .unwrap();
        // 5 and 25 iterations: start-up calls (2 syncs) cancel out; 20 more syncs of 1.4 ms
        // for 20 more iterations of 1.5 ms GPU work.
        let low = outcome(5, 7, 7.2, 7.5, "x");
        let high = outcome(25, 27, 35.2, 37.5, "at::native::_local_scalar_dense_cuda");
        let v = check(p, &low, &high);
        assert!(v.ok(), "{:#?}", v.failures().collect::<Vec<_>>());
        // One sync too many, a stall too short, the wrong site: each is found.
        for (bad, needle) in [
            (
                outcome(25, 28, 35.2, 37.5, "_local_scalar_dense"),
                "stream_sync: growth",
            ),
            (
                outcome(25, 27, 10.0, 37.5, "_local_scalar_dense"),
                "stall per iteration",
            ),
            (outcome(25, 27, 35.2, 37.5, "elsewhere"), "top call site"),
        ] {
            let v = check(p, &low, &bad);
            assert!(v.failures().any(|f| f.what.contains(needle)), "{needle}");
        }
        let mut broken = outcome(25, 27, 35.2, 37.5, "x");
        broken.truth = None;
        assert!(!check(p, &low, &broken).ok());
    }

    #[test]
    fn every_python_script_of_the_manifest_exists() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
        for p in Manifest::bundled().python {
            assert!(dir.join(&p.script).is_file(), "{}", p.script);
        }
    }
}
