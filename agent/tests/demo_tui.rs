//! `syncspy demo --sim --tui` in a real pseudo-terminal (a private tmux server): the first
//! scenario must be on the monitor while it still runs, for several refreshes, not only after
//! it has ended (a simulated run at full speed ends within the monitor's first refresh). Needs
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

#[test]
fn demo_tui_shows_the_scenario_while_it_runs() {
    artifact("scn-item-in-loop");
    artifact("syncspy-top");
    let d = TempDir::new("demo-tui-live");
    let server = Server(format!("syncspy-demo-tui-{}", std::process::id()));
    let cmd = format!(
        "exec env SYNCSPY_DIR={} TERM=xterm-256color {SYNCSPY} demo --sim --tui",
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
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut screen = String::new();
    // Screens, 100 ms apart, that showed the scenario running.
    let mut live_screens = 0;
    while Instant::now() < deadline {
        let out = Command::new("tmux")
            .args(["-L", &server.0, "capture-pane", "-p", "-t", "top"])
            .output()
            .unwrap();
        screen = String::from_utf8_lossy(&out.stdout).into_owned();
        let live = screen
            .lines()
            .any(|l| l.contains("scn-item-in-loop") && l.contains("running"));
        if live {
            live_screens += 1;
            if live_screens >= 4 {
                return;
            }
        } else if live_screens > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "the monitor showed scn-item-in-loop running in {live_screens} screens (4 wanted):\n{screen}"
    );
}
