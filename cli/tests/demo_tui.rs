//! `syncspy demo --sim --tui` in a real pseudo-terminal (a private tmux server): every
//! scenario must be on the monitor while it still runs, for a second or more, not only after
//! it has ended (a simulated run of a scenario's own steps ends within the monitor's first
//! refresh); a run that has ended must stay readable (the first one is read again after the
//! monitor's window has passed); and the monitor must show the table's figures: each run's
//! GPU IDLE when it ended is the table's GPU idle of that run. The monitor once showed 0.6%
//! for `item-in-loop` where the table said its GPU was idle about 40% of the time (the
//! watched runs were slowed down, the table's were not). Needs `cargo build --workspace`
//! first and tmux.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{artifact, TempDir, SYNCSPY};

/// Kills the private tmux server (and the demo in it) when the test ends.
struct Server(String);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.0, "kill-server"])
            .stderr(Stdio::null())
            .status();
    }
}

fn capture(server: &Server, history: bool) -> String {
    let mut c = Command::new("tmux");
    c.args(["-L", &server.0, "capture-pane", "-p", "-t", "top"]);
    if history {
        c.args(["-S", "-200"]);
    }
    String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned()
}

/// The GPU IDLE cell of the monitor's process row for a scenario, if the screen has one.
fn monitor_gpu_idle(screen: &str) -> Option<String> {
    let row = screen
        .lines()
        .find(|l| l.contains("/scn-") && (l.contains(" running ") || l.contains(" exited ")))?;
    row.split_whitespace()
        .find(|c| c.ends_with('%') || *c == "n/m")
        .map(str::to_string)
}

/// The manifest's comparison runs in the demo's order: each pair's stalling, then healthy.
fn run_ids() -> Vec<String> {
    let v: toml::Value = toml::from_str(include_str!("../../scenarios/manifest.toml")).unwrap();
    v["comparison"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| ["stalling", "healthy"].map(|k| c[k].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn demo_tui_shows_every_scenario_while_it_runs_keeps_it_and_shows_the_tables_figures() {
    artifact("scn-item-in-loop");
    artifact("syncspy-top");
    let ids = run_ids();
    let d = TempDir::new("demo-tui-live");
    let server = Server(format!("syncspy-demo-tui-{}", std::process::id()));
    // The shell stays after the demo, so its last screen can be read.
    let cmd = format!(
        "env SYNCSPY_DIR={} TERM=xterm-256color {SYNCSPY} demo --sim --tui; echo DEMO-EXIT=$?; \
         sleep 60",
        d.path().display()
    );
    let ok = Command::new("tmux")
        .args([
            "-L",
            &server.0,
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "top",
        ])
        .args(["-x", "120", "-y", "40", &cmd])
        .status()
        .expect("tmux is needed for this test");
    assert!(ok.success());
    let runs = ids.len();
    // Per run, how long screens showed it running (from the first such screen to the last),
    // and its GPU IDLE once it had ended.
    let mut live = Vec::new();
    let mut idle = Vec::new();
    let mut running: Option<(Instant, Instant)> = None;
    let deadline = Instant::now() + Duration::from_secs(400);
    let mut screen = String::new();
    while live.len() < runs && Instant::now() < deadline {
        screen = capture(&server, false);
        let monitor = screen.contains("Processes (");
        if monitor && screen.lines().any(|l| l.contains(" running ")) {
            let now = Instant::now();
            running = Some((running.map_or(now, |(first, _)| first), now));
        } else if monitor && screen.lines().any(|l| l.contains(" exited 0 ")) {
            // This run ended. Its figures are final (the library accounts the GPU's time
            // before it marks the process exited); the first run is read again after the
            // monitor's 10-second window has passed its end: still there.
            std::thread::sleep(Duration::from_millis(1_000));
            if live.is_empty() {
                std::thread::sleep(Duration::from_millis(11_000));
            }
            screen = capture(&server, false);
            assert!(
                screen.contains("its final figures stay until q quits"),
                "{screen}"
            );
            let stalls = screen
                .lines()
                .filter(|l| l.contains("_sync ") && !l.contains("  -  "))
                .count();
            assert!(stalls > 0, "the ended run's waits are gone:\n{screen}");
            idle.push(monitor_gpu_idle(&screen).unwrap_or_default());
            live.push(running.map_or(Duration::ZERO, |(first, last)| last - first));
            running = None;
            // On to its summary and the next run.
            let _ = Command::new("tmux")
                .args(["-L", &server.0, "send-keys", "-t", "top", "q"])
                .status();
            std::thread::sleep(Duration::from_millis(300));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(live.len(), runs, "runs seen {live:?}:\n{screen}");
    // Each run was on the monitor, running, for a second or more (lengthened to about 6 s;
    // timed from a first run that a loaded machine may have slowed down).
    assert!(
        live.iter().all(|&t| t >= Duration::from_secs(1)),
        "time each run was seen running {live:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !screen.contains("DEMO-EXIT=") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        screen = capture(&server, true);
    }
    assert!(screen.contains("DEMO-EXIT=0"), "{screen}");
    assert!(
        screen.contains("the runs shown in the monitor: each figure is the one it showed"),
        "{screen}"
    );
    // The table's GPU idle of each run is what the monitor showed when it ended.
    let table = &screen[screen
        .find("syncspy demo: the same work")
        .unwrap_or_else(|| panic!("no table:\n{screen}"))..];
    for (id, shown) in ids.iter().zip(&idle) {
        let row: Vec<&str> = table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(id.as_str()))
            .unwrap_or_else(|| panic!("no row for {id}:\n{table}"))
            .split_whitespace()
            .collect();
        let cell = row.get(4).copied().unwrap_or_default();
        let pct = |c: &str| c.strip_suffix('%').and_then(|v| v.parse::<f64>().ok());
        match (pct(cell), pct(shown)) {
            (Some(t), Some(m)) => assert!(
                (t - m).abs() <= 0.1,
                "{id}: the table says GPU idle {cell}, the monitor showed {shown}:\n{table}"
            ),
            _ => assert_eq!(cell, shown, "{id}:\n{table}"),
        }
    }
    // The run that stalls every step left its GPU idle a good share of the time, on the
    // monitor as in the table (0.6% when watched runs were slowed down).
    let item = ids.iter().position(|i| i == "item-in-loop").unwrap();
    let shown = idle[item]
        .strip_suffix('%')
        .and_then(|v| v.parse::<f64>().ok());
    assert!(
        shown.is_some_and(|v| v > 20.0),
        "item-in-loop's GPU IDLE on the monitor: {:?}",
        idle[item]
    );
}
