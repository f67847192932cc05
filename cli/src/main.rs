//! `syncspy`: find the moments a CUDA program's CPU waits for its GPU.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use syncspy_cli::check::{self, CheckOptions, EXIT_NOT_CHECKED};
use syncspy_cli::report::{self, Format};
use syncspy_cli::run::{self, RunOptions, EXIT_SETUP};

const RUN_AFTER_HELP: &str = "\
Environment:
  SYNCSPY_LIB      path of libsyncspy.so (default: next to the syncspy executable, or in
                   the folder above it)
  SYNCSPY_SIM_LIB  path of libsimcudart.so for --sim (default: found like libsyncspy.so)
  SYNCSPY_DIR      folder of the shared-memory segments; must exist and be writable
                   (default: /dev/shm)
  CMD gets LD_PRELOAD with libsyncspy.so first (an LD_PRELOAD you set is kept after it)
  and SYNCSPY_SESSION, which marks the segments of CMD and of all its descendants. When
  stderr is a terminal (and without --tui), syncspy prints that session id as CMD starts:
  `syncspy-top --session ID` (or `syncspy top --session ID`) watches the run live.

Exit status:
  CMD's own exit code, or 128+N when signal N killed it
  2    usage or setup error: bad arguments, a library not found, SYNCSPY_DIR missing or
       not writable, the report's folder missing, or the report could not be written
  127  CMD could not be started (not found, or not executable)

SIGINT and SIGTERM sent to syncspy are passed on to CMD; syncspy reports when CMD ends.";

const ATTACH_AFTER_HELP: &str = "\
A process started with LD_PRELOAD=libsyncspy.so and SYNCSPY_DORMANT=1 is armed through a
file, without ptrace. Any other is injected with ptrace: one thread idle in a system call is
stopped for milliseconds to load libsyncspy.so, whose hooks then take over the process's
calls to the CUDA runtime (import slots rewritten); detach puts the slots back. Needs the
right to ptrace the process (same user and kernel.yama.ptrace_scope=0, or CAP_SYS_PTRACE).
If syncspy attach is killed, the process stops recording by itself within 5 s. A process
with no CUDA runtime or driver loaded (a launcher, a shell) is refused: attach to its worker
process (the message lists its descendants that have CUDA loaded). While recording, a status
line on stderr (a terminal) counts the stall events so far.

Exit status: 0 done; 2 attach refused (nothing was changed in the process) or failed (the
process was put back as it was; libsyncspy.so may stay loaded, passing calls through).";

#[derive(Parser)]
#[command(
    name = "syncspy",
    version,
    about = "Find the moments a CUDA program's CPU waits for its GPU",
    long_about = "Find the moments a CUDA program's CPU waits for its GPU.\n\n\
                  syncspy preloads libsyncspy.so into a program, which records every CUDA \
                  runtime call that made the host wait (device/stream/event syncs, blocking \
                  and pageable copies, implicitly synchronizing calls) with its call site; \
                  syncspy aggregates them into latency distributions and top call sites."
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a command with libsyncspy.so preloaded; summarize its host stalls when it ends
    #[command(after_help = RUN_AFTER_HELP)]
    Run(RunArgs),
    /// Run a command like `run`, then check its stalls against a budget file (exit 0 within
    /// budget, 1 over budget, 2 not checked)
    #[command(after_help = check::HELP)]
    Check(CheckArgs),
    /// Run as a daemon: follow every instrumented process on the host, serve Prometheus
    /// metrics at /metrics and JSON at /api/v1/snapshot
    #[command(after_help = syncspy_agent::HELP)]
    Agent {
        /// Address to serve on (loopback by default: the snapshot shows command lines)
        #[arg(long, value_name = "ADDR", default_value = syncspy_agent::DEFAULT_LISTEN)]
        listen: String,
        /// How often segments are scanned and drained, in milliseconds
        #[arg(long, value_name = "MS", default_value_t = 1000)]
        interval_ms: u64,
        /// How long ended processes stay in the snapshot before they are forgotten (their
        /// totals stay in the metrics), in seconds
        #[arg(long, value_name = "SECS", default_value_t = 60)]
        retain_secs: u64,
        /// Never remove segment files (by default the agent removes those of forgotten
        /// processes that no `syncspy run` owns)
        #[arg(long)]
        keep_segments: bool,
        /// Where to write the token /api/v1/snapshot asks for (mode 0600) [default:
        /// /run/syncspy/agent.token for root, else $XDG_RUNTIME_DIR/syncspy-agent.token]
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
    },
    /// Attach to a running process: record its host stalls for a while, then detach; the
    /// process runs on unchanged (see docs/attach.md)
    #[command(after_help = ATTACH_AFTER_HELP)]
    Attach {
        /// The process to attach to
        pid: i32,
        /// Record this many seconds, then detach (default: until Ctrl-C or `syncspy detach`)
        #[arg(long, value_name = "SECS")]
        duration: Option<f64>,
        /// Also write the JSON report to FILE when done
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
        /// Inject through this thread (a TID of the process blocked in an idle system call)
        /// instead of the one attach chooses
        #[arg(long, value_name = "TID")]
        thread: Option<i32>,
        /// Show the live monitor (syncspy-top) while attached; quitting it (q) detaches
        #[arg(long)]
        tui: bool,
        /// GPU idle gaps while attached (CUPTI activity records): on, duty (1 s in 10) or
        /// off [default: SYNCSPY_GPU_IDLE, else on]
        #[arg(long, value_name = "MODE", value_parser = ["on", "duty", "off"])]
        gpu_idle: Option<String>,
        /// With --tui: an option for the monitor (syncspy-top --attach passes its display
        /// options this way)
        #[arg(
            long = "top-arg",
            value_name = "ARG",
            requires = "tui",
            hide = true,
            allow_hyphen_values = true
        )]
        top_args: Vec<String>,
    },
    /// End an attach (of any `syncspy attach`): the process stops recording and runs on
    Detach {
        /// The attached process
        pid: i32,
    },
    /// Run the bundled scenario pairs (the stalling and the healthy way of the same work)
    /// under syncspy and compare them in a table
    Demo {
        /// Use the simulated CUDA runtime (default: the GPU when /dev/nvidia0 exists, else
        /// the simulator)
        #[arg(long)]
        sim: bool,
        /// Steps per scenario (default: each scenario's own)
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        iters: Option<u64>,
        /// Show each run live in the monitor (syncspy-top), lengthened to last a few seconds at
        /// full speed unless --iters is given; its final figures stay until q goes on. The
        /// table takes the runs shown
        #[arg(long)]
        tui: bool,
    },
    /// The live monitor: runs syncspy-top (found next to syncspy) with ARGS
    /// (`syncspy top --help` is syncspy-top's help)
    #[command(disable_help_flag = true)]
    Top {
        /// syncspy-top's arguments (`--session ID`, `--pid PID`, `--agent URL`, `--print`, ...)
        #[arg(
            value_name = "ARGS",
            trailing_var_arg = true,
            allow_hyphen_values = true
        )]
        args: Vec<OsString>,
    },
    /// Print a saved JSON report, or compare two (per kind and per call site)
    Report {
        /// A report written by `run --report FILE` or `check --report FILE`; with two, the
        /// change from the first (before) to the second (after)
        #[arg(value_name = "FILE", num_args = 1..=2, required = true)]
        files: Vec<PathBuf>,
        /// text: the summary; markdown: tables for a pull request comment; json: the report
        /// (or the comparison) as JSON
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
    /// One process's stalls in a time window, as JSON, read from its segment without taking
    /// it over (the Python package's `syncspy.watch()` and pytest plugin use it)
    #[command(hide = true)]
    Snapshot {
        /// The segment file (`SYNCSPY_DIR/syncspy-<pid>-<start>`)
        #[arg(long, value_name = "FILE")]
        segment: PathBuf,
        /// Calls that began at or after this CLOCK_MONOTONIC time, in ns
        #[arg(long, value_name = "NS", default_value_t = 0)]
        since_ns: u64,
        /// Calls that began before this CLOCK_MONOTONIC time, in ns
        #[arg(long, value_name = "NS", default_value_t = u64::MAX)]
        until_ns: u64,
        /// Only calls of this thread (kernel thread id); repeat for several
        #[arg(long, value_name = "TID")]
        tid: Vec<u32>,
    },
}

#[derive(Args)]
struct RunArgs {
    /// Also write the JSON report (version 1) to FILE when CMD ends (`-`: standard output;
    /// the summary is printed to stderr either way)
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Also write every recorded event to FILE as Chrome trace event JSON (`-`: standard
    /// output; open it in Perfetto or chrome://tracing)
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Events the trace keeps at most: the first N; the summary and the trace say when
    /// events were cut (each kept event costs 64 bytes of memory until CMD ends)
    #[arg(long, value_name = "N", default_value_t = syncspy_cli::trace::DEFAULT_TRACE_LIMIT)]
    trace_limit: usize,
    /// Use the simulated CUDA runtime (libsimcudart.so, as libcudart.so.13) instead of the
    /// real one: no GPU needed
    #[arg(long)]
    sim: bool,
    /// Show the live monitor (syncspy-top) of this run's processes while CMD runs; CMD's
    /// output goes to a log file
    ///
    /// syncspy-top is found next to syncspy. CMD's stdout and stderr go to a log file (see
    /// --tui-log), its stdin is /dev/null. Quitting the monitor (q) leaves CMD running; when CMD ends the monitor
    /// shows it as exited until you quit, then the summary follows. Without a terminal on
    /// stdin and stdout, or without syncspy-top, prints a notice and runs without it
    #[arg(long)]
    tui: bool,
    /// With --tui: where CMD's output goes [default: syncspy-run-<pid>.log in the current
    /// folder]
    #[arg(long, value_name = "FILE", requires = "tui")]
    tui_log: Option<PathBuf>,
    /// Keep the segment files in SYNCSPY_DIR after CMD ends (by default those of ended
    /// processes are removed; those of processes still running are always kept)
    #[arg(long)]
    keep_segments: bool,
    /// The command to run and its arguments (put `--` before it if it starts with `-`)
    #[arg(value_name = "CMD", required = true, trailing_var_arg = true)]
    command: Vec<OsString>,
}

#[derive(Args)]
struct CheckArgs {
    /// The budget: a TOML file of rules (format below)
    #[arg(long, value_name = "FILE")]
    budget: PathBuf,
    /// Also write the verdict as JUnit XML (`-`: standard output): one testcase per rule and
    /// process, named `RULE [PROGRAM]` (`#2`, ... for further processes of one program)
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    #[command(flatten)]
    run: RunArgs,
}

impl RunArgs {
    fn options(self) -> RunOptions {
        let mut opts = RunOptions::new(self.command);
        opts.report = self.report;
        opts.trace = self.trace;
        opts.trace_limit = self.trace_limit;
        opts.sim = self.sim;
        opts.tui = self.tui;
        opts.tui_log = self.tui_log;
        opts.keep_segments = self.keep_segments;
        opts
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A segment its owner truncates while it is read must not kill this process (the agent
    // reads every user's): such reads see zeros (`syncspy_abi::fault`).
    syncspy_abi::fault::install();
    let code = match cli.command {
        Cmd::Check(a) => check_command(a),
        Cmd::Agent {
            listen,
            interval_ms,
            retain_secs,
            keep_segments,
            token_file,
        } => agent_command(listen, interval_ms, retain_secs, keep_segments, token_file),
        Cmd::Run(a) => {
            let opts = a.options();
            match run::run(&opts) {
                Ok(outcome) => outcome.final_exit_code(),
                Err(e) => {
                    eprintln!("syncspy: {e}");
                    e.exit_code()
                }
            }
        }
        Cmd::Attach {
            pid,
            duration,
            report,
            thread,
            tui,
            gpu_idle,
            top_args,
        } => {
            let mut opts = syncspy_cli::attach::AttachOptions::new(pid);
            opts.gpu_idle = gpu_idle;
            opts.duration = duration
                .filter(|d| d.is_finite() && *d >= 0.0)
                .map(std::time::Duration::from_secs_f64);
            opts.report = report;
            opts.thread = thread;
            opts.tui = tui;
            opts.top_args = top_args;
            attach_command(opts)
        }
        Cmd::Detach { pid } => match syncspy_cli::attach::detach(pid) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("syncspy: {e}");
                e.exit_code()
            }
        },
        Cmd::Demo { sim, iters, tui } => syncspy_cli::demo::demo(&syncspy_cli::demo::DemoOptions {
            sim: sim.then_some(true),
            iters,
            tui,
        }),
        Cmd::Top { args } => top(&args),
        Cmd::Snapshot {
            segment,
            since_ns,
            until_ns,
            tid,
        } => snapshot_command(&syncspy_cli::snapshot::WindowOptions {
            segment,
            since_ns,
            until_ns,
            tids: tid,
        }),
        Cmd::Report { files, format } => report_command(&files, format),
    };
    // Exit codes are 0..=255 on Unix; 128+signal stays in range.
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}

/// `syncspy check`: the run judged against the budget.
fn check_command(a: CheckArgs) -> i32 {
    let run = a.run.options();
    let opts = CheckOptions {
        budget: a.budget,
        junit: a.junit,
        report: run.report.clone(),
        run,
    };
    match check::check(&opts) {
        Ok(outcome) => outcome.exit_code,
        Err(e) => {
            eprintln!("syncspy: {e}");
            EXIT_NOT_CHECKED
        }
    }
}

/// `syncspy agent`: serves until SIGINT or SIGTERM.
fn agent_command(
    listen: String,
    interval_ms: u64,
    retain_secs: u64,
    keep_segments: bool,
    token_file: Option<PathBuf>,
) -> i32 {
    let Some(token_file) = token_file.or_else(syncspy_read::snapshot::default_token_file) else {
        eprintln!(
            "syncspy agent: no place for the snapshot's token: XDG_RUNTIME_DIR is not \
             set; give --token-file FILE"
        );
        return EXIT_SETUP;
    };
    let dir = match run::segment_dir(std::env::var_os(run::DIR_ENV).as_deref()) {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("syncspy agent: {e}");
            return EXIT_SETUP;
        }
    };
    let started = syncspy_agent::serve(&syncspy_agent::AgentOptions {
        listen,
        dir,
        interval: std::time::Duration::from_millis(interval_ms.max(10)),
        retain: std::time::Duration::from_secs(retain_secs),
        keep_segments,
        token_file,
    });
    match started {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("syncspy agent: {e}");
            EXIT_SETUP
        }
    }
}

/// `syncspy attach`, with the lease `SYNCSPY_ATTACH_LEASE_MS` asks for.
fn attach_command(mut opts: syncspy_cli::attach::AttachOptions) -> i32 {
    if let Some(ms) = std::env::var("SYNCSPY_ATTACH_LEASE_MS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
    {
        opts.lease_ms = ms;
    }
    match syncspy_cli::attach::attach(&opts) {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("syncspy: {e}");
            e.exit_code()
        }
    }
}

/// `syncspy snapshot`: the window as JSON on stdout.
fn snapshot_command(opts: &syncspy_cli::snapshot::WindowOptions) -> i32 {
    match syncspy_cli::snapshot::read(opts)
        .and_then(|w| serde_json::to_string(&w).map_err(|e| format!("cannot write JSON: {e}")))
    {
        Ok(json) => {
            println!("{json}");
            0
        }
        Err(e) => {
            eprintln!("syncspy snapshot: {e}");
            EXIT_SETUP
        }
    }
}

/// `syncspy report`: the reports rendered in `format`.
fn report_command(files: &[PathBuf], format: Format) -> i32 {
    let files: Vec<&std::path::Path> = files.iter().map(PathBuf::as_path).collect();
    match report::render(&files, format) {
        Ok(out) => {
            print!("{out}");
            0
        }
        Err(e) => {
            eprintln!("syncspy: {e}");
            EXIT_SETUP
        }
    }
}

/// `syncspy top ARGS`: becomes `syncspy-top ARGS` (the monitor is its own binary, next to
/// syncspy); returns only when it cannot.
fn top(args: &[OsString]) -> i32 {
    use std::os::unix::process::CommandExt;
    let Some(top) = run::library_dirs()
        .iter()
        .map(|d| d.join(run::TOP_NAME))
        .find(|p| p.is_file())
    else {
        eprintln!(
            "syncspy: {} not found next to syncspy: build it with `cargo build -p syncspy-tui`",
            run::TOP_NAME
        );
        return EXIT_SETUP;
    };
    let e = std::process::Command::new(&top).args(args).exec();
    eprintln!("syncspy: cannot run {}: {e}", top.display());
    EXIT_SETUP
}
