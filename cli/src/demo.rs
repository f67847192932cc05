//! `syncspy demo`: run the bundled scenario pairs of the manifest's `[[comparison]]` entries
//! under the library, one after another, print each run's summary with a caption, and end
//! with a table comparing the stalling way and the healthy way of the same work.
//!
//! The manifest is embedded, so the demo needs no source tree; the scenario binaries
//! (`scn-<name>`) are looked for next to the syncspy executable, like libsyncspy.so.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::run::{self, RunOptions, EXIT_SETUP};
use crate::summary;
use syncspy_read::plural;
use syncspy_read::report::Report;

/// The scenario manifest, as built into syncspy.
pub use syncspy_manifest::BUNDLED as MANIFEST;
use syncspy_manifest::{Manifest, Pair, Run as ManifestRun};

/// How long a watched run's timed loop lasts under `demo --tui`: long enough to read it
/// live, at the speed of the run it is timed from, so that its figures are the table's.
pub const TUI_WATCH_SECS: f64 = 6.0;
/// The most a watched run is lengthened: its steps are at most this many times the timed
/// run's (a loop of microseconds is not run for ever).
pub const TUI_MAX_STEPS_FACTOR: u64 = 1000;

/// The steps a watched run is given after run `m` of the scenario's own steps: enough for its
/// timed loop to last about [`TUI_WATCH_SECS`] at the same speed, at least `m`'s steps, at
/// most [`TUI_MAX_STEPS_FACTOR`] times them; `None` without `m`'s steps and loop time.
///
/// Watched runs used to slow the simulated GPU down instead: the host's own work kept its
/// speed, so a run that stalls a third of the time became GPU-bound on the monitor (GPU idle
/// under 1% where the table said 40%).
pub fn watch_iters(m: &Measured) -> Option<u64> {
    let iters = m.iters.filter(|&i| i > 0)?;
    let loop_ns = m.loop_ns.filter(|&l| l > 0)?;
    let per_step_ns = loop_ns as f64 / iters as f64;
    let want = (TUI_WATCH_SECS * 1e9 / per_step_ns).ceil() as u64;
    Some(want.clamp(iters, iters.saturating_mul(TUI_MAX_STEPS_FACTOR)))
}

/// The library's GPU tracing mode, which the demo sets to `on` where the user left it unset.
pub const GPU_IDLE_ENV: &str = "SYNCSPY_GPU_IDLE";

/// The environment variable the simulated runtime reads its time scale from.
pub const SIM_TIME_SCALE_ENV: &str = "SIMCUDA_TIME_SCALE";

/// What `syncspy demo` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct DemoOptions {
    /// `Some(true)`: the simulated runtime; `Some(false)`: the real GPU; `None`: detect.
    pub sim: Option<bool>,
    /// `--iters N` passed to every scenario (None: each scenario's default).
    pub iters: Option<u64>,
    /// Show each run in the live monitor (`syncspy run --tui`) before its summary.
    pub tui: bool,
}

/// Whether both standard input and output are terminals (the monitor needs one).
fn on_a_terminal() -> bool {
    // SAFETY: isatty only inspects the descriptors.
    unsafe { libc::isatty(0) == 1 && libc::isatty(1) == 1 }
}

/// Whether a real GPU is there to use: the first NVIDIA device node exists.
pub fn gpu_present() -> bool {
    Path::new("/dev/nvidia0").exists()
}

/// The stall kind of set-up and teardown allocations (cudaMallocHost, cudaFree, ...),
/// left out of the table: it is no part of the timed loop.
pub const SETUP_KIND: &str = "implicit_sync";
/// The GPU's idle gaps: not a host wait (the GPU idle column shows them).
pub const GPU_IDLE_KIND: &str = "gpu_idle";

/// One run's numbers for the table: the timed loop from the scenario's own ground-truth
/// line, the stalls from syncspy's report.
#[derive(Debug, Clone, Copy, Default)]
pub struct Measured {
    /// The scenario's host time of its timed loop (`wall_ms.loop`), if it printed it.
    pub loop_ns: Option<u64>,
    /// The scenario's steps (`args.iters`), if it printed them.
    pub iters: Option<u64>,
    /// Stalls syncspy saw, of every host-stall kind but `implicit_sync`.
    pub stalls: u64,
    /// Their host time.
    pub stall_ns: u64,
    pub exit_code: i32,
    /// The share of the GPU's active time (first work to last) it ran nothing, when syncspy
    /// measured it: the figure the summary and the monitor's GPU IDLE show.
    pub gpu_idle: Option<f64>,
}

impl Measured {
    /// `stdout`: the scenario's standard output, whose last JSON line is its ground truth.
    pub fn from_run(r: &Report, stdout: &[u8]) -> Measured {
        let (mut stalls, mut stall_ns) = (0, 0);
        for (_, st) in r
            .processes
            .iter()
            .flat_map(|p| &p.kinds)
            .filter(|(k, _)| k.as_str() != SETUP_KIND && k.as_str() != GPU_IDLE_KIND)
        {
            stalls += st.count;
            stall_ns += st.total_ns;
        }
        let truth = String::from_utf8_lossy(stdout)
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok())
            .filter(serde_json::Value::is_object);
        let loop_ns = truth
            .as_ref()
            .and_then(|t| t["wall_ms"]["loop"].as_f64())
            .map(|ms| (ms * 1e6).round() as u64);
        let iters = truth.as_ref().and_then(|t| t["args"]["iters"].as_u64());
        Measured {
            loop_ns,
            iters,
            stalls,
            stall_ns,
            exit_code: r.exit_code,
            // The scenarios are one process each; were there several, the one whose GPU
            // idled least (the process that did the work).
            gpu_idle: r
                .processes
                .iter()
                .filter_map(|p| p.gpu.idle_share_shown())
                .fold(None, |a: Option<f64>, b| Some(a.map_or(b, |a| a.min(b)))),
        }
    }

    /// Stalls per step of the loop (None without a step count).
    pub fn per_step(&self) -> Option<f64> {
        self.iters
            .filter(|&i| i > 0)
            .map(|i| self.stalls as f64 / i as f64)
    }

    /// Steps of the timed loop per second of its host time (None without both).
    pub fn steps_per_s(&self) -> Option<f64> {
        match (self.iters, self.loop_ns) {
            (Some(i), Some(l)) if l > 0 => Some(i as f64 / (l as f64 / 1e9)),
            _ => None,
        }
    }
}

/// The final table: per pair a title line, then the stalling and the healthy run with the
/// timed loop's steps per second, waits per step and the GPU's idle share, the healthy row
/// with the speed-up. No stall share: a healthy loop's one final wait covers the whole queue,
/// so its share of the loop says nothing about the pattern.
///
/// `watched`: the runs are those shown in the monitor (it says so).
pub fn render_table(
    pairs: &[Pair<'_>],
    measured: &[(Option<Measured>, Option<Measured>)],
    watched: bool,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "syncspy demo: the same work, the stalling way and the healthy way"
    );
    if watched {
        let _ = writeln!(
            out,
            "  (the runs shown in the monitor: each figure is the one it showed when the run \
             ended; GPU idle is its GPU IDLE)"
        );
    }
    let row = |run: &str, way: &str, steps: &str, waits: &str, gpu: &str, sp: &str| {
        let line = format!("  {run:<24} {way:<9} {steps:>9} {waits:>11} {gpu:>9} {sp:>9}");
        line.trim_end().to_string()
    };
    let _ = writeln!(
        out,
        "{}",
        row(
            "run",
            "way",
            "steps/s",
            "waits/step",
            "GPU idle",
            "speed-up"
        )
    );
    for (p, (s, h)) in pairs.iter().zip(measured) {
        let _ = writeln!(out, "{}", p.title);
        // Per step: a watched run's steps are its own (lengthened to last a while).
        let speedup = match (
            s.and_then(|m| m.steps_per_s()),
            h.and_then(|m| m.steps_per_s()),
        ) {
            (Some(s), Some(h)) if s > 0.0 => format!("{:.2}x", h / s),
            _ => "-".into(),
        };
        for (run, m, way, sp) in [
            (p.stalling, s, "stalling", String::new()),
            (p.healthy, h, "healthy", speedup),
        ] {
            let (steps, waits, gpu) = match m {
                Some(m) => (
                    m.steps_per_s()
                        .map_or_else(|| "-".into(), |x| format!("{x:.0}")),
                    m.per_step()
                        .map_or_else(|| "-".into(), |x| format!("{x:.2}")),
                    m.gpu_idle
                        .map_or_else(|| "n/m".into(), |b| format!("{:.1}%", b * 100.0)),
                ),
                None => ("not run".into(), "-".into(), "-".into()),
            };
            let _ = writeln!(out, "{}", row(&run.id, way, &steps, &waits, &gpu, &sp));
        }
    }
    let _ = writeln!(
        out,
        "steps/s: steps of the scenario's timed loop per second of its own host time (CUDA \
         start-up, set-up and teardown left out)"
    );
    let _ = writeln!(
        out,
        "waits/step: syncspy's stalling calls per step ({SETUP_KIND}, set-up and teardown \
         allocations, left out); the healthy way waits once, after its loop"
    );
    let _ = writeln!(
        out,
        "GPU idle: the share of the GPU's active time (its first work to its last: set-up and \
         teardown left out) it ran nothing, from its activity records (traced all the run: \
         {GPU_IDLE_ENV}=on unless set), as the summary and syncspy-top's GPU IDLE show it \
         (n/m: not measured by this run)"
    );
    let _ = writeln!(
        out,
        "speed-up: the healthy run's steps per second over the stalling run's (same work per \
         step)"
    );
    out
}

/// The folder holding every binary in `names`, among `dirs` (the first that holds them
/// all), or the names missing from all of them.
fn find_bin_dir(names: &[String], dirs: &[PathBuf]) -> Result<PathBuf, Vec<String>> {
    if let Some(d) = dirs
        .iter()
        .find(|d| names.iter().all(|n| d.join(n).is_file()))
    {
        return Ok(d.clone());
    }
    let missing = names
        .iter()
        .filter(|n| !dirs.iter().any(|d| d.join(n).is_file()))
        .cloned()
        .collect::<Vec<_>>();
    if missing.is_empty() {
        // Each exists somewhere, but not all in one folder: report those of the first.
        let first = dirs.first().cloned().unwrap_or_default();
        Err(names
            .iter()
            .filter(|n| !first.join(n).is_file())
            .cloned()
            .collect())
    } else {
        Err(missing)
    }
}

/// Runs the demo; returns the exit code (0 when every run exited 0, 1 when one did not, 2
/// on a setup error).
pub fn demo(opts: &DemoOptions) -> i32 {
    let manifest = match Manifest::parse(MANIFEST) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("syncspy demo: the built-in scenario manifest: {e}");
            return EXIT_SETUP;
        }
    };
    let pairs = manifest.pairs();
    let Some(bin_dir) = scenario_bin_dir(&pairs) else {
        return EXIT_SETUP;
    };
    let sim = opts.sim.unwrap_or_else(|| !gpu_present());
    println!(
        "syncspy demo: {} pairs of runs on {}",
        pairs.len(),
        if sim {
            "the simulated CUDA runtime (no GPU used)"
        } else {
            "the GPU"
        }
    );
    // The GPU traced for the whole of every run, unless the user chose: the default (duty, 1 s
    // in 10) would leave a watched run's GPU IDLE blank most of the time, and its figure that
    // of the first second only. Set before any run: syncspy's threads do not read it.
    if std::env::var_os(GPU_IDLE_ENV).is_none() {
        std::env::set_var(GPU_IDLE_ENV, "on");
    }
    let tui = opts.tui && on_a_terminal();
    announce_tui(opts, tui);
    let log_dir = if tui {
        match tempfile::Builder::new().prefix("syncspy-demo-").tempdir() {
            Ok(d) => Some(d),
            Err(e) => {
                eprintln!("syncspy demo: cannot make a folder for the logs in TMPDIR: {e}");
                return 2;
            }
        }
    } else {
        None
    };
    let runs = DemoRuns {
        opts,
        default_scale: manifest.defaults.sim_time_scale,
        bin_dir,
        sim,
        tui,
        log_dir,
        total: pairs.len() * 2,
    };
    let (measured, failed) = match runs.run_pairs(&pairs) {
        Ok(done) => done,
        Err(code) => return code,
    };
    println!();
    print!("{}", render_table(&pairs, &measured, tui));
    if failed {
        eprintln!("syncspy demo: some runs did not exit with 0 (see above)");
        1
    } else {
        0
    }
}

/// The folder of the pairs' scenario binaries, or `None` when one is missing (said).
fn scenario_bin_dir(pairs: &[Pair<'_>]) -> Option<PathBuf> {
    let mut names: Vec<String> = pairs
        .iter()
        .flat_map(|p| [p.stalling, p.healthy])
        .map(|r| format!("scn-{}", r.scenario))
        .collect();
    names.sort();
    names.dedup();
    let dirs = run::library_dirs();
    match find_bin_dir(&names, &dirs) {
        Ok(d) => Some(d),
        Err(missing) => {
            let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            eprintln!(
                "syncspy demo: scenario binar{} {} not found (looked in {}): build them with \
                 `cargo build --release --workspace` and run the syncspy of that build",
                if missing.len() == 1 { "y" } else { "ies" },
                missing.join(", "),
                if looked.is_empty() {
                    "no folder".into()
                } else {
                    looked.join(", ")
                }
            );
            None
        }
    }
}

/// Says how the runs are shown when `--tui` was asked for: in the monitor (`tui`), or not,
/// without a terminal.
fn announce_tui(opts: &DemoOptions, tui: bool) {
    if opts.tui && !tui {
        println!(
            "syncspy demo: --tui needs a terminal on stdin and stdout; showing summaries only"
        );
    } else if tui {
        let steps = match opts.iters {
            Some(n) => format!("with {}", plural::count(n, "step", "steps")),
            None => format!(
                "its loop lengthened to about {TUI_WATCH_SECS:.0} s at full speed (a first run \
                 of its own steps, not shown, times a step)"
            ),
        };
        println!(
            "syncspy demo: each scenario runs in the monitor, {steps}; when it ends, the \
             monitor keeps its final figures: press q to go on to its summary and the next \
             one. The table's figures are those runs'."
        );
    }
}

/// What a run of the demo's scenarios needs: how, where, and whether in the monitor.
struct DemoRuns<'a> {
    opts: &'a DemoOptions,
    /// The manifest's simulated time scale, for a run that names none.
    default_scale: f64,
    bin_dir: PathBuf,
    sim: bool,
    tui: bool,
    /// The runs' logs under the monitor go to a private folder (0700, unpredictable name)
    /// in TMPDIR: a predictable name there is one another user can plant a link at.
    log_dir: Option<tempfile::TempDir>,
    /// Runs in all, for the `[n/total]` headers.
    total: usize,
}

/// A run's outcome for the table: whether it failed, and what it measured.
type Done = (bool, Measured);

/// A pair's figures: the stalling run's and the healthy run's (`None`: not run).
type PairFigures = (Option<Measured>, Option<Measured>);

impl DemoRuns<'_> {
    /// Every pair's two runs, in order: their figures, and whether one failed; `Err` with
    /// the exit code after a set-up error (said).
    fn run_pairs(&self, pairs: &[Pair<'_>]) -> Result<(Vec<PairFigures>, bool), i32> {
        let mut measured = Vec::with_capacity(pairs.len());
        let mut failed = false;
        let mut n = 0;
        for p in pairs {
            let mut both = [None, None];
            for (slot, r) in both.iter_mut().zip([p.stalling, p.healthy]) {
                n += 1;
                match self.run_scenario(n, r) {
                    Ok((run_failed, m)) => {
                        failed |= run_failed;
                        *slot = Some(m);
                    }
                    Err(e) => {
                        eprintln!("syncspy demo: {}: {e}", r.id);
                        if matches!(e, run::RunError::Setup(_)) {
                            return Err(e.exit_code());
                        }
                        failed = true;
                    }
                }
            }
            let [s, h] = both;
            measured.push((s, h));
        }
        Ok((measured, failed))
    }

    /// The `n`th run: its header, then the scenario run (watched in the monitor, or not) and
    /// its summary.
    fn run_scenario(&self, n: usize, r: &ManifestRun) -> Result<Done, run::RunError> {
        let mut command: Vec<OsString> =
            vec![self.bin_dir.join(format!("scn-{}", r.scenario)).into()];
        command.extend(r.args.iter().map(OsString::from));
        if let Some(i) = self.opts.iters {
            command.push("--iters".into());
            command.push(i.to_string().into());
        }
        if self.sim {
            // Read by the simulated runtime in the child; syncspy's own threads of the
            // previous run have ended and none reads the environment. Every run of the
            // scenario, watched or not, at the same speed.
            let scale = r.sim_time_scale.unwrap_or(self.default_scale);
            std::env::set_var(SIM_TIME_SCALE_ENV, scale.to_string());
            // The simulator's notes (a large gemm timed, not computed) are not the demo's.
            std::env::set_var("SIMCUDA_QUIET", "1");
        }
        println!();
        println!(
            "== [{n}/{}] {} ({}): {}",
            self.total,
            r.id,
            r.pattern.name(),
            r.summary
        );
        if self.tui {
            self.run_watched(n, command)
        } else {
            self.run_once(n, command, false).map(|(o, stdout)| {
                print!("{}", summary::render(&o.report));
                (o.exit_code != 0, Measured::from_run(&o.report, &stdout))
            })
        }
    }

    /// The run shown in the monitor. Without --iters, a first run of the scenario's own
    /// steps times a step, so that the watched run, at the same speed, lasts long enough to
    /// read live.
    fn run_watched(&self, n: usize, command: Vec<OsString>) -> Result<Done, run::RunError> {
        let (timed_failed, steps) = match self.opts.iters {
            Some(_) => (false, None),
            None => self
                .run_once(n, command.clone(), false)
                .map(|(o, stdout)| {
                    let m = Measured::from_run(&o.report, &stdout);
                    (o.exit_code != 0, watch_iters(&m))
                })?,
        };
        let mut watched = command;
        if let Some(steps) = steps {
            watched.push("--iters".into());
            watched.push(steps.to_string().into());
        }
        self.run_once(n, watched, true).map(|(o, stdout)| {
            let m = Measured::from_run(&o.report, &stdout);
            println!(
                "(the run shown in the monitor{}; the table takes its figures)",
                m.iters
                    .map(|i| format!(", {}", plural::count(i, "step", "steps")))
                    .unwrap_or_default()
            );
            print!("{}", summary::render(&o.report));
            (timed_failed || o.exit_code != 0, m)
        })
    }

    /// One run of `command`, `watch`: in the monitor. Its report and the scenario's
    /// standard output.
    fn run_once(
        &self,
        n: usize,
        command: Vec<OsString>,
        watch: bool,
    ) -> Result<(run::RunOutcome, Vec<u8>), run::RunError> {
        let mut ro = RunOptions::new(command);
        ro.sim = self.sim;
        ro.print_summary = false;
        ro.announce_session = false;
        // The scenario's ground-truth JSON line feeds the table, not the screen: captured,
        // or with the monitor on the terminal, read back from the run's log.
        let log = self
            .log_dir
            .as_ref()
            .map(|d| d.path().join(format!("{n}.log")))
            .unwrap_or_default();
        if watch {
            ro.tui = true;
            ro.tui_log = Some(log.clone());
        } else {
            ro.capture_stdout = true;
        }
        let outcome = run::run(&ro);
        let stdout = match &outcome {
            Ok(o) if o.stdout.is_some() => o.stdout.clone().unwrap_or_default(),
            _ => syncspy_read::safe_file::read_bounded_nofollow(
                &log,
                syncspy_read::safe_file::REPORT_MAX_BYTES,
                "a run's log",
            )
            .unwrap_or_default(),
        };
        let _ = std::fs::remove_file(&log);
        outcome.map(|o| (o, stdout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncspy_manifest::Pattern;

    #[test]
    fn the_built_in_manifest_has_resolvable_pairs() {
        let m = Manifest::parse(MANIFEST).unwrap();
        let pairs = m.pairs();
        assert_eq!(pairs.len(), m.comparisons.len());
        assert!(!pairs.is_empty());
        for p in &pairs {
            assert_eq!(p.stalling.pattern, Pattern::Stalling, "{}", p.title);
            assert_eq!(p.healthy.pattern, Pattern::Healthy, "{}", p.title);
        }
        let bad = Manifest::parse(
            "version = 1\n[[run]]\nid = \"a\"\nscenario = \"item-in-loop\"\n\
             pattern = \"stalling\"\nsummary = \"\"\n\
             [[comparison]]\ntitle = \"t\"\nstalling = \"a\"\nhealthy = \"b\"\n",
        )
        .unwrap_err();
        assert!(bad.to_string().contains("no run \"b\""), "{bad}");
    }

    #[test]
    fn the_table_shows_steps_waits_gpu_idle_and_the_speed_up() {
        let m = Manifest::parse(MANIFEST).unwrap();
        let pairs = m.pairs();
        let s = Measured {
            loop_ns: Some(200_000_000),
            iters: Some(10),
            stalls: 12,
            stall_ns: 150_000_000,
            exit_code: 0,
            gpu_idle: Some(0.394),
        };
        let h = Measured {
            loop_ns: Some(100_000_000),
            iters: Some(10),
            stalls: 2,
            stall_ns: 10_000_000,
            exit_code: 0,
            gpu_idle: None,
        };
        let measured: Vec<_> = pairs.iter().map(|_| (Some(s), Some(h))).collect();
        let t = render_table(&pairs[..1], &measured[..1], false);
        assert!(t.contains(pairs[0].title), "{t}");
        // 10 steps in 200 ms and in 100 ms; 1.2 and 0.2 waits a step.
        assert!(t.contains(" 50 ") && t.contains(" 100 "), "{t}");
        assert!(t.contains(" 1.20 ") && t.contains(" 0.20 "), "{t}");
        assert!(t.contains(" 39.4%") && t.contains(" n/m "), "{t}");
        assert!(t.contains("2.00x"), "{t}");
        // The speed-up is per step: a healthy run of twice the steps in twice the time is
        // as fast as before.
        let h2 = Measured {
            loop_ns: Some(200_000_000),
            iters: Some(20),
            ..h
        };
        let t = render_table(&pairs[..1], &[(Some(s), Some(h2))], false);
        assert!(t.contains("2.00x"), "{t}");
        // No stall share: it misleads for a healthy loop.
        assert!(!t.contains("% of loop") && !t.contains(">100%"), "{t}");
        let t = render_table(&pairs[..1], &[(None, Some(h))], false);
        assert!(t.contains("not run"), "{t}");
    }

    #[test]
    fn the_ground_truth_line_gives_the_loop_and_implicit_syncs_and_gpu_gaps_are_left_out() {
        let mut p = syncspy_read::report::ProcessReport::default();
        for (kind, count, total_ns) in [
            ("device_sync", 3, 300),
            (SETUP_KIND, 4, 9000),
            (GPU_IDLE_KIND, 7, 5000),
        ] {
            let st = syncspy_read::report::Stats {
                count,
                total_ns,
                ..Default::default()
            };
            p.kinds.insert(kind.into(), st);
        }
        let r = Report {
            processes: vec![p],
            ..Default::default()
        };
        let out = b"hello\n{\"wall_ms\":{\"loop\":12.5},\"args\":{\"iters\":5}}\n";
        let m = Measured::from_run(&r, out);
        assert_eq!(m.loop_ns, Some(12_500_000));
        assert_eq!(m.iters, Some(5));
        assert_eq!((m.stalls, m.stall_ns), (3, 300));
        assert_eq!(m.per_step(), Some(0.6));
        let m = Measured::from_run(&r, b"no json");
        assert_eq!((m.loop_ns, m.iters), (None, None));
    }

    #[test]
    fn a_watched_run_is_lengthened_to_last_a_few_seconds_within_bounds() {
        let m = |loop_ms: Option<u64>, iters: Option<u64>| Measured {
            loop_ns: loop_ms.map(|l| l * 1_000_000),
            iters,
            ..Measured::default()
        };
        // 20 steps in 50 ms: 2.5 ms a step, 2400 steps for 6 s.
        assert_eq!(watch_iters(&m(Some(50), Some(20))), Some(2400));
        // A loop already longer keeps its steps.
        assert_eq!(watch_iters(&m(Some(9_000), Some(8))), Some(8));
        // A loop of microseconds is not lengthened without end.
        assert_eq!(
            watch_iters(&Measured {
                loop_ns: Some(1_000),
                iters: Some(10),
                ..Measured::default()
            }),
            Some(10 * TUI_MAX_STEPS_FACTOR)
        );
        // Without the steps or the loop's time there is nothing to time a step by.
        assert_eq!(watch_iters(&m(None, Some(20))), None);
        assert_eq!(watch_iters(&m(Some(50), None)), None);
        assert_eq!(watch_iters(&m(Some(0), Some(20))), None);
    }

    #[test]
    fn the_table_says_when_its_runs_were_the_watched_ones() {
        let m = Manifest::parse(MANIFEST).unwrap();
        let pairs = m.pairs();
        let t = render_table(&pairs[..1], &[(None, None)], true);
        assert!(t.contains("the runs shown in the monitor"), "{t}");
        assert!(t.contains("GPU idle is its GPU IDLE"), "{t}");
        let t = render_table(&pairs[..1], &[(None, None)], false);
        assert!(!t.contains("monitor:"), "{t}");
    }

    #[test]
    fn missing_binaries_are_named() {
        let d = std::env::temp_dir();
        let err = find_bin_dir(&["scn-surely-not-there".into()], &[d]).unwrap_err();
        assert_eq!(err, vec!["scn-surely-not-there".to_string()]);
    }
}
