//! `syncspy-top`: parses arguments and runs the monitor (`syncspy_tui::term::run`).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use syncspy_tui::app::{use_color, App};
use syncspy_tui::Source;

/// The live monitor of syncspy: which processes wait for their GPU, how long, how often,
/// and which code is to blame.
#[derive(Parser, Debug)]
#[command(
    name = "syncspy-top",
    version,
    after_help = "Keys: Tab pane, arrows or j/k move, Enter stack (scrolls; Esc closes), s sort, \
w window (last N s / since start), p pause, r reset, / filter sites, d dismiss an ended \
process, g GPU pane (busy share per second, idle gaps, their causes; keeps the process's GPU \
traced while open), \
? help, q quit.\n\
Environment: SYNCSPY_DIR (where segments are, default /dev/shm), NO_COLOR (no colors).\n\
Start a job with `syncspy run --tui -- CMD`, or LD_PRELOAD=libsyncspy.so CMD and then \
syncspy-top."
)]
struct Args {
    /// Follow only this process.
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
    /// Attach to this running process first (`syncspy attach PID --tui`, found next to
    /// syncspy-top: injects libsyncspy.so, no restart), show it, and detach on quit
    #[arg(long, value_name = "PID", conflicts_with_all = ["agent", "print", "pid", "session"])]
    attach: Option<i32>,
    /// Follow only the processes of this session (the `SYNCSPY_SESSION` that `syncspy run`
    /// gives its command and the command's descendants), and only those whose segment
    /// belongs to your user: another user who learnt the session cannot add a process
    /// (a command that switches to another user is not shown)
    #[arg(long, value_name = "ID", conflicts_with = "agent")]
    session: Option<u64>,
    /// Read a `syncspy agent` (e.g. http://127.0.0.1:9599) instead of the local segments.
    #[arg(long, value_name = "URL")]
    agent: Option<String>,
    /// With --agent: the file holding the agent's token, which its snapshot asks for
    /// [default: /run/syncspy/agent.token for root, else $XDG_RUNTIME_DIR/syncspy-agent.token]
    #[arg(long, value_name = "FILE", requires = "agent")]
    token_file: Option<PathBuf>,
    /// Folder of the segments [default: $SYNCSPY_DIR or /dev/shm].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Length of the "recent" window, seconds (1..=300).
    #[arg(long, value_name = "SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=300))]
    window: u64,
    /// Refresh period, milliseconds (100..=5000).
    #[arg(long, value_name = "MS", default_value_t = 250,
          value_parser = clap::value_parser!(u64).range(100..=5000))]
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
    /// Start with the GPU pane open (the `g` key): the selected process's busy share per
    /// second, its idle gaps and their host causes. While open, the monitor keeps that
    /// process's GPU activity traced (a few seconds at a time, renewed at each refresh).
    #[arg(long)]
    gpu: bool,
    /// Do not open the interactive screen: follow for --after seconds, print one screen as
    /// plain text to stdout and exit (for logs, bug reports, a non-interactive ssh).
    #[arg(long)]
    print: bool,
    /// With --print: seconds to follow before printing (0..=3600).
    #[arg(long, value_name = "SECS", default_value_t = 3, requires = "print",
          value_parser = clap::value_parser!(u64).range(0..=3600))]
    after: u64,
    /// With --print: screen size as COLSxROWS [default: the terminal's size, or 120x40].
    #[arg(long, value_name = "COLSxROWS", requires = "print", value_parser = parse_size)]
    size: Option<(u16, u16)>,
}

/// Errors end the monitor with one line and exit 1 (2 is clap's, for usage errors); a
/// backtrace only when asked for with
/// `SYNCSPY_DEBUG=1` (not through `RUST_BACKTRACE`, which many developers set for everything).
fn main() -> ExitCode {
    let args = Args::parse();
    // A segment its owner truncates while it is read must not kill the monitor: such reads
    // see zeros (`syncspy_abi::fault`).
    syncspy_abi::fault::install();
    // One open file per followed segment (its lock tells whether its process runs).
    syncspy_read::follow::raise_open_file_limit();
    match monitor(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if std::env::var_os("SYNCSPY_DEBUG").is_some_and(|v| !v.is_empty() && v != "0") {
                eprintln!("syncspy-top: {e:?}");
            } else {
                eprintln!("syncspy-top: {e:#}");
            }
            ExitCode::from(1)
        }
    }
}

fn monitor(args: Args) -> anyhow::Result<()> {
    if let Some(pid) = args.attach {
        return attach(pid, &args);
    }
    let source: Box<dyn Source> = match &args.agent {
        Some(url) => {
            // A token file given is needed; the default one may be absent (the agent then
            // says what it wants).
            let token = match &args.token_file {
                Some(f) => Some(
                    syncspy_read::snapshot::read_token(f)
                        .with_context(|| format!("--token-file {}", f.display()))?,
                ),
                None => syncspy_read::snapshot::default_token_file()
                    .and_then(|f| syncspy_read::snapshot::read_token(&f).ok()),
            };
            Box::new(
                syncspy_tui::agent::AgentSource::new(url, args.pid, args.window)
                    .with_context(|| format!("--agent {url}"))?
                    .with_token(token),
            )
        }
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
    let interval = Duration::from_millis(args.interval_ms);
    if args.print {
        // Plain text: no colors whatever the environment says.
        let mut app = App::new(args.ascii)
            .with_color(false)
            .with_gpu_pane(args.gpu);
        app.recent = !args.all;
        // A pseudo-terminal may report 0x0: below 40x10 nothing is readable.
        let size = args
            .size
            .or_else(|| crossterm::terminal::size().ok())
            .filter(|&(c, r)| c >= 40 && r >= 10)
            .unwrap_or((120, 40));
        let after = Duration::from_secs(args.after);
        let screen = syncspy_tui::term::print_screen(source, app, interval, after, size)
            .map_err(|e| anyhow::anyhow!("--print: {e}"))?;
        print!("{screen}");
        return Ok(());
    }
    let mut app = App::new(args.ascii)
        .with_color(color)
        .with_gpu_pane(args.gpu);
    app.recent = !args.all;
    syncspy_tui::term::run(source, app, interval)
}

/// `--attach PID`: becomes `syncspy attach PID --tui`, which attaches, runs this monitor on
/// the attach's session with the display options given here, and detaches when it quits.
/// Attaching (ptrace, the injection) stays in the `syncspy` binary, not in the monitor.
fn attach(pid: i32, args: &Args) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let here = std::env::current_exe()?;
    let syncspy = here
        .parent()
        .map(|d| d.join("syncspy"))
        .filter(|p| p.is_file())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--attach: syncspy not found next to {} (build it with `cargo build -p \
                 syncspy-agent`)",
                here.display()
            )
        })?;
    let mut cmd = std::process::Command::new(&syncspy);
    cmd.args(["attach", &pid.to_string(), "--tui"]);
    let mut top = vec![
        format!("--window={}", args.window),
        format!("--interval-ms={}", args.interval_ms),
    ];
    for (on, flag) in [
        (args.ascii, "--ascii"),
        (args.no_color, "--no-color"),
        (args.all, "--all"),
        (args.gpu, "--gpu"),
    ] {
        if on {
            top.push(flag.to_string());
        }
    }
    for a in top {
        cmd.arg(format!("--top-arg={a}"));
    }
    if let Some(d) = &args.dir {
        cmd.env("SYNCSPY_DIR", d);
    }
    // Only returns on failure.
    let e = cmd.exec();
    Err(anyhow::anyhow!(
        "--attach: cannot run {}: {e}",
        syncspy.display()
    ))
}

/// `COLSxROWS`, e.g. `120x40`; at least 40x10 (the smallest readable screen).
fn parse_size(s: &str) -> Result<(u16, u16), String> {
    let bad = || format!("{s:?} is not COLSxROWS (e.g. 120x40)");
    let (c, r) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let cols: u16 = c.trim().parse().map_err(|_| bad())?;
    let rows: u16 = r.trim().parse().map_err(|_| bad())?;
    if !(40..=1000).contains(&cols) || !(10..=1000).contains(&rows) {
        return Err(format!("{s}: columns must be 40..=1000 and rows 10..=1000"));
    }
    Ok((cols, rows))
}
