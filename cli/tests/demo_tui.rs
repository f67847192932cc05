//! `syncspy demo --sim --tui` in a real pseudo-terminal (a private tmux server): every
//! scenario must be on the monitor while it still runs, for a second or more, not only after
//! it has ended (a simulated run at full speed ends within the monitor's first refresh), and
//! the final table must say that its numbers come from runs at full speed. Needs
//! `cargo build --workspace` first and tmux.
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

#[test]
fn demo_tui_shows_every_scenario_while_it_runs_and_the_table_at_full_speed() {
    artifact("scn-item-in-loop");
    artifact("syncspy-top");
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
    let runs = 8;
    // Per run, the screens (100 ms apart, at least) that showed it running.
    let mut live = Vec::new();
    let mut screens = 0;
    let deadline = Instant::now() + Duration::from_secs(150);
    let mut screen = String::new();
    while live.len() < runs && Instant::now() < deadline {
        screen = capture(&server, false);
        let monitor = screen.contains("Processes (");
        if monitor && screen.lines().any(|l| l.contains(" running ")) {
            screens += 1;
        } else if monitor && screen.lines().any(|l| l.contains(" exited 0 ")) {
            // This run ended: on to its summary and the next run.
            live.push(screens);
            screens = 0;
            let _ = Command::new("tmux")
                .args(["-L", &server.0, "send-keys", "-t", "top", "q"])
                .status();
            std::thread::sleep(Duration::from_millis(300));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(live.len(), runs, "runs seen {live:?}:\n{screen}");
    // At 4 refreshes a second the monitor drew each run live several times.
    assert!(
        live.iter().all(|&n| n >= 10),
        "live screens per run {live:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !screen.contains("DEMO-EXIT=") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        screen = capture(&server, true);
    }
    assert!(screen.contains("DEMO-EXIT=0"), "{screen}");
    assert!(
        screen.contains("each scenario run again at full simulated speed"),
        "{screen}"
    );
    assert!(
        screen.contains("slowed down")
            && screen.contains("times; the table takes the run at full speed"),
        "{screen}"
    );
}
