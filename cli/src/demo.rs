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
use syncspy_read::report::Report;

/// The scenario manifest, as built into syncspy.
pub use syncspy_manifest::BUNDLED as MANIFEST;
use syncspy_manifest::{Manifest, Pair};

/// How much slower the simulated GPU runs at least under `demo --tui`, so each scenario is
/// live on the monitor for a while instead of ending before it draws.
pub const TUI_SLOWDOWN: f64 = 20.0;
/// How long a watched run's timed loop should last under `demo --tui` on the simulator: a
/// loop that is short at full speed is slowed down more than [`TUI_SLOWDOWN`].
pub const TUI_WATCH_SECS: f64 = 3.0;
/// The most a watched run is slowed down (a loop of a few steps stays short).
pub const TUI_MAX_SLOWDOWN: f64 = 2000.0;

/// How much to slow the simulated GPU down for watching a run measured at full speed `m`:
/// enough for the GPU's share of its timed loop (the part that slows down; the host's own
/// work runs at its speed) to last about [`TUI_WATCH_SECS`], at least [`TUI_SLOWDOWN`], at
/// most [`TUI_MAX_SLOWDOWN`]. Without a GPU busy share the whole loop counts.
pub fn watch_slowdown(m: &Measured) -> f64 {
    let gpu_ns = m
        .loop_ns
        .map(|l| l as f64 * m.gpu_busy.unwrap_or(1.0).clamp(0.01, 1.0));
    match gpu_ns.filter(|&g| g > 0.0) {
        Some(g) => (TUI_WATCH_SECS * 1e9 / g).clamp(TUI_SLOWDOWN, TUI_MAX_SLOWDOWN),
        None => TUI_SLOWDOWN,
    }
}

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
/// The GPU's idle gaps: not a host wait (the GPU busy column shows them).
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
    /// The GPU's busy share over the run, when syncspy measured it.
    pub gpu_busy: Option<f64>,
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
            // The busiest device of the busiest process: the scenarios use one of each.
            gpu_busy: r
                .processes
                .iter()
                .filter_map(|p| p.gpu.busy_fraction)
                .fold(None, |a: Option<f64>, b| Some(a.map_or(b, |a| a.max(b)))),
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
/// timed loop's steps per second, waits per step and the GPU's busy share, the healthy row
/// with the speed-up. No stall share: a healthy loop's one final wait covers the whole queue,
/// so its share of the loop says nothing about the pattern.
///
/// `slowed`: the runs shown in the monitor were slowed down, and the table holds the same
/// runs at full speed (it says so).
pub fn render_table(
    pairs: &[Pair<'_>],
    measured: &[(Option<Measured>, Option<Measured>)],
    slowed: bool,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "syncspy demo: the same work, the stalling way and the healthy way"
    );
    if slowed {
        let _ = writeln!(
            out,
            "  (each scenario run again at full simulated speed: the runs shown in the monitor \
             were slowed down for watching, which changes their numbers)"
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
            "GPU busy",
            "speed-up"
        )
    );
    for (p, (s, h)) in pairs.iter().zip(measured) {
        let _ = writeln!(out, "{}", p.title);
        let speedup = match (s.and_then(|m| m.loop_ns), h.and_then(|m| m.loop_ns)) {
            (Some(s), Some(h)) if h > 0 => format!("{:.2}x", s as f64 / h as f64),
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
                    m.gpu_busy
                        .map_or_else(|| "n/m".into(), |b| format!("{:.0}%", b * 100.0)),
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
        "GPU busy: the share of the traced run (set-up included) the GPU had work, from its activity records (n/m: not measured by this run)"
    );
    let _ = writeln!(
        out,
        "speed-up: the stalling run's loop time over the healthy run's (same work)"
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
    let mut names: Vec<String> = pairs
        .iter()
        .flat_map(|p| [p.stalling, p.healthy])
        .map(|r| format!("scn-{}", r.scenario))
        .collect();
    names.sort();
    names.dedup();
    let dirs = run::library_dirs();
    let bin_dir = match find_bin_dir(&names, &dirs) {
        Ok(d) => d,
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
            return EXIT_SETUP;
        }
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

    let tui = opts.tui && on_a_terminal();
    // On the simulator a watched run is slowed down, which changes its numbers (the host's
    // own work is not slowed): the table takes them from the same run at full speed.
    let slowed = tui && sim;
    if opts.tui && !tui {
        println!(
            "syncspy demo: --tui needs a terminal on stdin and stdout; showing summaries only"
        );
    } else if slowed {
        println!(
            "syncspy demo: each scenario runs twice: at full simulated speed for the table, \
             then slowed down ({TUI_SLOWDOWN:.0} times or more, so that it lasts a few \
             seconds) in the monitor; press q to go on to its summary"
        );
    } else if tui {
        println!("syncspy demo: each run opens in the monitor; press q to go on to its summary");
    }
    // The runs' logs under the monitor go to a private folder (0700, unpredictable name) in
    // TMPDIR: a predictable name there is one another user can plant a link at.
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
    let total = pairs.len() * 2;
    let mut measured = Vec::with_capacity(pairs.len());
    let mut failed = false;
    let mut n = 0;
    for p in &pairs {
        let mut both = [None, None];
        for (slot, r) in both.iter_mut().zip([p.stalling, p.healthy]) {
            n += 1;
            let mut command: Vec<OsString> =
                vec![bin_dir.join(format!("scn-{}", r.scenario)).into()];
            command.extend(r.args.iter().map(OsString::from));
            if let Some(i) = opts.iters {
                command.push("--iters".into());
                command.push(i.to_string().into());
            }
            let base_scale = r.sim_time_scale.unwrap_or(manifest.defaults.sim_time_scale);
            println!();
            println!(
                "== [{n}/{total}] {} ({}): {}",
                r.id,
                r.pattern.name(),
                r.summary
            );
            // One run of the scenario; `scale`: the simulator's time scale (None: the GPU),
            // `watch`: in the monitor. Its report and the scenario's standard output.
            let run_once = |scale: Option<f64>, watch: bool| {
                if let Some(scale) = scale {
                    // Read by the simulated runtime in the child; syncspy's own threads of
                    // the previous run have ended and none reads the environment.
                    std::env::set_var(SIM_TIME_SCALE_ENV, scale.to_string());
                    // The simulator's notes (a large gemm timed, not computed) are not the
                    // demo's.
                    std::env::set_var("SIMCUDA_QUIET", "1");
                }
                let mut ro = RunOptions::new(command.clone());
                ro.sim = sim;
                ro.print_summary = false;
                ro.announce_session = false;
                // The scenario's ground-truth JSON line feeds the table, not the screen:
                // captured, or with the monitor on the terminal, read back from the run's log.
                let log = log_dir
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
            };
            let scale = sim.then_some(base_scale);
            let result = if slowed {
                // At full speed first (its numbers go to the table), then watched, slowed
                // down so that even a short loop stays on the monitor for a few seconds.
                match run_once(scale, false) {
                    Ok((full, stdout)) => {
                        let m = Measured::from_run(&full.report, &stdout);
                        let k = watch_slowdown(&m);
                        run_once(Some(base_scale * k), true).map(|(watched, _)| {
                            println!(
                                "(the run shown in the monitor, its simulated GPU slowed down \
                                 {k:.0} times; the table takes the run at full speed)"
                            );
                            print!("{}", summary::render(&watched.report));
                            (full.exit_code != 0 || watched.exit_code != 0, m)
                        })
                    }
                    Err(e) => Err(e),
                }
            } else {
                run_once(scale, tui).map(|(o, stdout)| {
                    print!("{}", summary::render(&o.report));
                    (o.exit_code != 0, Measured::from_run(&o.report, &stdout))
                })
            };
            match result {
                Ok((run_failed, m)) => {
                    failed |= run_failed;
                    *slot = Some(m);
                }
                Err(e) => {
                    eprintln!("syncspy demo: {}: {e}", r.id);
                    if matches!(e, run::RunError::Setup(_)) {
                        return e.exit_code();
                    }
                    failed = true;
                }
            }
        }
        let [s, h] = both;
        measured.push((s, h));
    }
    println!();
    print!("{}", render_table(&pairs, &measured, slowed));
    if failed {
        eprintln!("syncspy demo: some runs did not exit with 0 (see above)");
        1
    } else {
        0
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
    fn the_table_shows_steps_waits_gpu_busy_and_the_speed_up() {
        let m = Manifest::parse(MANIFEST).unwrap();
        let pairs = m.pairs();
        let s = Measured {
            loop_ns: Some(200_000_000),
            iters: Some(10),
            stalls: 12,
            stall_ns: 150_000_000,
            exit_code: 0,
            gpu_busy: Some(0.42),
        };
        let h = Measured {
            loop_ns: Some(100_000_000),
            iters: Some(10),
            stalls: 2,
            stall_ns: 10_000_000,
            exit_code: 0,
            gpu_busy: None,
        };
        let measured: Vec<_> = pairs.iter().map(|_| (Some(s), Some(h))).collect();
        let t = render_table(&pairs[..1], &measured[..1], false);
        assert!(t.contains(pairs[0].title), "{t}");
        // 10 steps in 200 ms and in 100 ms; 1.2 and 0.2 waits a step.
        assert!(t.contains(" 50 ") && t.contains(" 100 "), "{t}");
        assert!(t.contains(" 1.20 ") && t.contains(" 0.20 "), "{t}");
        assert!(t.contains(" 42%") && t.contains(" n/m "), "{t}");
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
    fn a_short_loop_is_slowed_down_more_for_watching_within_bounds() {
        let m = |loop_ms: Option<u64>, gpu_busy: Option<f64>| Measured {
            loop_ns: loop_ms.map(|l| l * 1_000_000),
            gpu_busy,
            ..Measured::default()
        };
        // 300 ms at full speed: 10 times would last 3 s, but never less than 20 times.
        assert_eq!(watch_slowdown(&m(Some(300), None)), TUI_SLOWDOWN);
        // 15 ms: 200 times, about 3 s.
        assert!((watch_slowdown(&m(Some(15), None)) - 200.0).abs() < 1e-9);
        // 150 ms of which the GPU was busy a fifth: only those 30 ms slow down.
        assert!((watch_slowdown(&m(Some(150), Some(0.2))) - 100.0).abs() < 1e-9);
        // A loop of microseconds is not slowed down without end; no loop time: the least.
        assert_eq!(watch_slowdown(&m(Some(0), None)), TUI_SLOWDOWN);
        assert_eq!(
            watch_slowdown(&Measured {
                loop_ns: Some(1_000),
                ..Measured::default()
            }),
            TUI_MAX_SLOWDOWN
        );
        assert_eq!(watch_slowdown(&m(None, Some(0.5))), TUI_SLOWDOWN);
    }

    #[test]
    fn the_table_says_when_the_watched_runs_were_slowed_down() {
        let m = Manifest::parse(MANIFEST).unwrap();
        let pairs = m.pairs();
        let t = render_table(&pairs[..1], &[(None, None)], true);
        assert!(t.contains("at full simulated speed"), "{t}");
        assert!(t.contains("slowed down for watching"), "{t}");
        let t = render_table(&pairs[..1], &[(None, None)], false);
        assert!(!t.contains("slowed"), "{t}");
    }

    #[test]
    fn missing_binaries_are_named() {
        let d = std::env::temp_dir();
        let err = find_bin_dir(&["scn-surely-not-there".into()], &[d]).unwrap_err();
        assert_eq!(err, vec!["scn-surely-not-there".to_string()]);
    }
}
