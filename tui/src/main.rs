//! `syncspy-top`: parses arguments and runs the monitor (`syncspy_tui::term::run`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use syncspy_tui::app::{use_color, App};
use syncspy_tui::Source;

/// The live monitor of syncspy: which processes wait for their GPU, how long, how often,
/// and which code is to blame.
#[derive(Parser, Debug)]
#[command(name = "syncspy-top", version)]
struct Args {
    /// Follow only this process.
    #[arg(long)]
    pid: Option<u32>,
    /// Follow only the processes of this session (the `SYNCSPY_SESSION` that `syncspy run`
    /// gives its command and the command's descendants).
    #[arg(long, value_name = "ID", conflicts_with = "agent")]
    session: Option<u64>,
    /// Read a `syncspy agent` (e.g. http://127.0.0.1:9599) instead of the local segments.
    #[arg(long, value_name = "URL")]
    agent: Option<String>,
    /// Folder of the segments [default: $SYNCSPY_DIR or /dev/shm].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Length of the "recent" window, seconds (1..=300).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=300))]
    window: u64,
    /// Refresh period, milliseconds (100..=5000).
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(100..=5000))]
    interval_ms: u64,
    /// Only ASCII characters (borders, bars, units).
    #[arg(long)]
    ascii: bool,
    /// No colors (as when NO_COLOR is set and not empty); bold, underline and reverse video
    /// still mark the selection and alarms.
    #[arg(long)]
    no_color: bool,
    /// Start with the "since start" view instead of the last N seconds.
    #[arg(long)]
    all: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let source: Box<dyn Source> = match &args.agent {
        Some(url) => Box::new(
            syncspy_tui::agent::AgentSource::new(url, args.pid, args.window)
                .with_context(|| format!("--agent {url}"))?,
        ),
        None => {
            let dir = args
                .dir
                .clone()
                .or_else(|| std::env::var_os("SYNCSPY_DIR").map(PathBuf::from))
                .unwrap_or_else(|| PathBuf::from("/dev/shm"));
            if !dir.is_dir() {
                anyhow::bail!(
                    "{} is not a folder: set SYNCSPY_DIR (or --dir) to where the programs \
                     write their segments",
                    dir.display()
                );
            }
            Box::new(
                syncspy_tui::local::LocalSource::new(dir, args.pid, args.window)
                    .with_session(args.session),
            )
        }
    };
    let color = use_color(args.no_color, std::env::var_os("NO_COLOR").as_deref());
    let mut app = App::new(args.ascii).with_color(color);
    app.recent = !args.all;
    syncspy_tui::term::run(source, app, Duration::from_millis(args.interval_ms))
}
