//! `syncspy run`: start a command with libsyncspy.so preloaded, follow the segments of it and
//! of its descendants while it runs, then drain, report and clean up.

use std::collections::hash_map::RandomState;
use std::ffi::{OsStr, OsString};
use std::hash::BuildHasher;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::recording::{self, Recording};
use crate::signals::Forwarder;
use crate::summary;
use crate::trace::TraceSink;
use syncspy_read::report::{Report, RunInfo};
use syncspy_read::session::{ReaderSession, Removal, SessionOptions};
use syncspy_read::warning::Warning;

/// Exit code of a setup error (library not found, segment folder unusable, report not
/// writable).
pub const EXIT_SETUP: i32 = 2;
/// Exit code when the command cannot be started (not found, not executable).
pub const EXIT_CANNOT_START: i32 = 127;

/// The preloaded library, and the environment variable that overrides where it is.
pub const LIB_NAME: &str = "libsyncspy.so";
pub const LIB_ENV: &str = "SYNCSPY_LIB";
/// The simulated CUDA runtime for `--sim`, and its override.
pub const SIM_LIB_NAME: &str = "libsimcudart.so";
pub const SIM_LIB_ENV: &str = "SYNCSPY_SIM_LIB";
/// Names the simulated runtime is linked under in the private folder: the soname programs
/// link against, the unversioned name that dlopen-based loaders (cudarc) try first, the
/// driver's soname: the simulator is the driver too (`scenarios/simcuda/src/api/driver.rs`),
/// CUPTI's: its activity records of the simulated timeline (`api/cupti.rs`), and NCCL's: its
/// ranks meet in `$SIMNCCL_DIR` (`api/nccl.rs`).
pub const SIM_LINK_NAMES: [&str; 5] = [
    "libcudart.so.13",
    "libcudart.so",
    "libcuda.so.1",
    "libcupti.so.13",
    "libnccl.so.2",
];
pub const DIR_ENV: &str = "SYNCSPY_DIR";
pub const DEFAULT_DIR: &str = "/dev/shm";
pub const SESSION_ENV: &str = "SYNCSPY_SESSION";
/// A folder, private to one `syncspy run`, where the library leaves one file per process
/// whose segment could not be created (named `<pid>-<start ticks>`, holding the reason).
pub const FAILED_DIR_ENV: &str = "SYNCSPY_FAILED_DIR";
/// The live monitor `syncspy run --tui` starts, found next to syncspy like the library.
pub const TOP_NAME: &str = "syncspy-top";

/// What `syncspy run` was asked to do.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The command and its arguments (at least the command).
    pub command: Vec<OsString>,
    /// Where to write the JSON report.
    pub report: Option<PathBuf>,
    /// Where to write a Chrome trace / Perfetto JSON file of every recorded event.
    pub trace: Option<PathBuf>,
    /// Events the trace keeps at most (the first ones; later ones are counted, not kept).
    pub trace_limit: usize,
    /// Put the simulated CUDA runtime first on the library path.
    pub sim: bool,
    /// Keep the segment files of ended processes.
    pub keep_segments: bool,
    /// Show the live monitor (`syncspy-top --session`) while the command runs, with the
    /// command's output going to a log file.
    pub tui: bool,
    /// Where the command's output goes under `tui` (default `syncspy-run-<pid>.log` in the
    /// current folder).
    pub tui_log: Option<PathBuf>,
    /// Print the text summary to stderr when the command ends.
    pub print_summary: bool,
    /// How often the segment folder is scanned and the rings drained.
    pub poll_interval: Duration,
    /// Capture the command's standard output (returned in `RunOutcome::stdout`) instead of
    /// letting it through.
    pub capture_stdout: bool,
    /// Print the session id (what `syncspy-top --session` takes) on stderr when the command
    /// starts, if stderr is a terminal and no monitor is shown.
    pub announce_session: bool,
}

impl RunOptions {
    pub fn new(command: Vec<OsString>) -> RunOptions {
        RunOptions {
            command,
            report: None,
            trace: None,
            trace_limit: crate::trace::DEFAULT_TRACE_LIMIT,
            sim: false,
            keep_segments: false,
            tui: false,
            tui_log: None,
            print_summary: true,
            poll_interval: Duration::from_millis(50),
            capture_stdout: false,
            announce_session: true,
        }
    }
}

/// How a run ended.
#[derive(Debug)]
pub struct RunOutcome {
    /// The command's exit code, or 128 + signal.
    pub exit_code: i32,
    pub report: Report,
    /// Segment files removed after the run.
    pub removed_segments: Vec<PathBuf>,
    /// The command's standard output, when `capture_stdout` was asked for.
    pub stdout: Option<Vec<u8>>,
    /// Why each process that could not create its segment could not (empty when all could).
    pub unrecorded: Vec<String>,
}

impl RunOutcome {
    /// The exit code `syncspy run` ends with: the command's, or `EXIT_SETUP` when some of
    /// its processes could not record (the report would be silently incomplete).
    pub fn final_exit_code(&self) -> i32 {
        if self.unrecorded.is_empty() {
            self.exit_code
        } else {
            EXIT_SETUP
        }
    }
}

/// How the run reports such processes ([`Warning::CouldNotRecord`]:
/// `N processes could not record: <reason>`) for the reasons the library left; `None` when
/// there are none.
pub fn unrecorded_message(reasons: &[String]) -> Option<Warning> {
    Warning::could_not_record(reasons)
}

/// The reasons left in the failure folder, one per process.
fn read_failures(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let line = text.lines().next().unwrap_or("").trim();
        out.push(if line.is_empty() {
            "unknown reason".to_string()
        } else {
            line.to_string()
        });
    }
    out.sort();
    out
}

/// Why `syncspy run` could not do its job; the message says what to do.
#[derive(Debug)]
pub enum RunError {
    /// Before the command started: missing library, unusable folder, bad report path.
    Setup(String),
    /// The command could not be started.
    CannotStart(String),
    /// After the command ended: the report could not be written.
    Report(String),
}

impl RunError {
    /// The exit code `syncspy` ends with.
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::Setup(_) | RunError::Report(_) => EXIT_SETUP,
            RunError::CannotStart(_) => EXIT_CANNOT_START,
        }
    }
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Setup(m) | RunError::CannotStart(m) | RunError::Report(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for RunError {}

/// Folders searched for the libraries: the executable's own, and its parent (cargo puts
/// test executables in `target/<profile>/deps/`, the libraries in `target/<profile>/`).
pub fn library_dirs() -> Vec<PathBuf> {
    let Ok(exe) = std::env::current_exe() else {
        return Vec::new();
    };
    let exe = exe.canonicalize().unwrap_or(exe);
    let mut dirs = Vec::new();
    if let Some(d) = exe.parent() {
        dirs.push(d.to_path_buf());
        if let Some(p) = d.parent() {
            dirs.push(p.to_path_buf());
        }
    }
    dirs
}

/// Finds `file` through `env_var` (a path to the file itself) or in `dirs`.
pub fn find_library(
    file: &str,
    env_var: &str,
    env_value: Option<&OsStr>,
    dirs: &[PathBuf],
    build_hint: &str,
) -> Result<PathBuf, RunError> {
    let found = match env_value.filter(|v| !v.is_empty()) {
        Some(v) => {
            let p = PathBuf::from(v);
            if !p.is_file() {
                return Err(RunError::Setup(format!(
                    "{env_var}={} is not a file: point {env_var} at {file}, or unset it to \
                     use the one next to syncspy",
                    p.display()
                )));
            }
            p
        }
        None => match dirs.iter().map(|d| d.join(file)).find(|p| p.is_file()) {
            Some(p) => p,
            None => {
                let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
                return Err(RunError::Setup(format!(
                    "{file} not found (looked in {}): {build_hint}, or set {env_var} to its path",
                    if looked.is_empty() {
                        "no folder".to_string()
                    } else {
                        looked.join(", ")
                    }
                )));
            }
        },
    };
    // Absolute, so that descendants that change folder still find it; symlinks are kept:
    // the name the user chose is the name the loader sees.
    let abs = std::path::absolute(&found)
        .map_err(|e| RunError::Setup(format!("cannot resolve {}: {e}", found.display())))?;
    // LD_PRELOAD and LD_LIBRARY_PATH split on these.
    if abs
        .as_os_str()
        .as_bytes()
        .iter()
        .any(|b| matches!(b, b' ' | b':'))
    {
        return Err(RunError::Setup(format!(
            "{} contains a space or ':', which LD_PRELOAD cannot express: move it to a plain \
             path and set {env_var} to it",
            abs.display()
        )));
    }
    Ok(abs)
}

/// The segment folder: `SYNCSPY_DIR` or /dev/shm, which must exist and be writable.
pub fn segment_dir(env_value: Option<&OsStr>) -> Result<PathBuf, RunError> {
    let (dir, name) = match env_value.filter(|v| !v.is_empty()) {
        Some(v) => (
            PathBuf::from(v),
            format!("{DIR_ENV}={}", Path::new(v).display()),
        ),
        None => (PathBuf::from(DEFAULT_DIR), DEFAULT_DIR.to_string()),
    };
    let hint = format!("set {DIR_ENV} to a writable folder (default {DEFAULT_DIR})");
    match std::fs::metadata(&dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(RunError::Setup(format!("{name} does not exist: {hint}")))
        }
        Err(e) => return Err(RunError::Setup(format!("{name}: {e}: {hint}"))),
        Ok(m) if !m.is_dir() => {
            return Err(RunError::Setup(format!("{name} is not a folder: {hint}")))
        }
        Ok(_) => {}
    }
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| RunError::Setup(format!("{name} contains a NUL byte: {hint}")))?;
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(RunError::Setup(format!("{name} is not writable: {hint}")));
    }
    // The command may change its working folder: give it an absolute path.
    Ok(std::path::absolute(&dir).unwrap_or(dir))
}

/// A random non-zero session id.
pub fn new_session() -> u64 {
    // RandomState is seeded from the OS's randomness; hash something unique on top.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let s = RandomState::new().hash_one((std::process::id(), t));
    if s == 0 {
        1
    } else {
        s
    }
}

/// `existing` with `first` in front, joined by `sep` (an empty `existing` adds nothing).
pub fn prepend_list(first: &OsStr, existing: Option<&OsStr>, sep: &str) -> OsString {
    let mut v = first.to_os_string();
    if let Some(e) = existing.filter(|e| !e.is_empty()) {
        v.push(sep);
        v.push(e);
    }
    v
}

/// A private folder (mode 0700) in the temporary folder; removed with its files on drop.
struct PrivateDir(PathBuf);

impl PrivateDir {
    /// Named with a random number of its own, never the session: anyone can list the
    /// temporary folder, and the session must stay this run's secret.
    fn create(what: &str) -> Result<PrivateDir, RunError> {
        let dir = std::env::temp_dir().join(format!(
            "syncspy-{what}-{}-{:016x}",
            std::process::id(),
            new_session()
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| {
                RunError::Setup(format!(
                    "cannot create {}: {e}: set TMPDIR to a writable folder",
                    dir.display()
                ))
            })?;
        Ok(PrivateDir(dir))
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A private folder holding `libcudart.so.13 -> libsimcudart.so`; removed on drop.
struct SimDir(PrivateDir);

impl SimDir {
    fn create(sim_lib: &Path) -> Result<SimDir, RunError> {
        let guard = SimDir(PrivateDir::create("sim")?);
        let dir = &guard.0 .0;
        for name in SIM_LINK_NAMES {
            std::os::unix::fs::symlink(sim_lib, dir.join(name)).map_err(|e| {
                RunError::Setup(format!("cannot link {name} in {}: {e}", dir.display()))
            })?;
        }
        if dir.as_os_str().as_bytes().contains(&b':') {
            return Err(RunError::Setup(format!(
                "{} contains ':', which LD_LIBRARY_PATH cannot express: set TMPDIR to a plain path",
                dir.display()
            )));
        }
        Ok(guard)
    }

    fn path(&self) -> &Path {
        &self.0 .0
    }
}

/// The command's exit code: its own, or 128 + the signal that killed it.
pub fn exit_code_of(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 128,
    }
}

/// The line `syncspy run` prints at start on a terminal: the session and how to watch it.
pub fn session_line(session: u64) -> String {
    format!("syncspy: session {session}: watch it live with `{TOP_NAME} --session {session}`")
}

/// Checks, before the command runs, that an output file named by `flag` (`--report`,
/// `--junit`, ...) can be written: a file name in an existing folder.
pub fn check_output_path(flag: &str, what: &str, p: &Path) -> Result<(), RunError> {
    let parent = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if p.file_name().is_none() || p.is_dir() {
        return Err(RunError::Setup(format!(
            "{flag} {}: not a file name: give the path of {what} to write",
            p.display()
        )));
    }
    if !parent.is_dir() {
        return Err(RunError::Setup(format!(
            "{flag} {}: folder {} does not exist: create it or write the {} elsewhere",
            p.display(),
            parent.display(),
            flag.trim_start_matches('-')
        )));
    }
    Ok(())
}

/// The command's log under the monitor (`--tui-log`, `syncspy demo --tui`'s logs): created
/// without following a link another user planted at its predictable name, or an existing
/// file of this user truncated, or a FIFO of this user (`syncspy_read::safe_file`).
pub fn open_log(log: &Path) -> Result<std::fs::File, RunError> {
    syncspy_read::safe_file::create_or_truncate(log, 0o666).map_err(|e| {
        RunError::Setup(format!(
            "cannot create the log {}: {e}: give another with --tui-log FILE",
            log.display()
        ))
    })
}

/// The monitor `--tui` asked for: where it is and where the command's output goes, or why
/// the run goes on without it (a one-line notice).
fn tui_plan(
    opts: &RunOptions,
    dirs: &[PathBuf],
) -> Result<Result<(PathBuf, PathBuf), String>, RunError> {
    use std::io::IsTerminal;
    if !(io::stdin().is_terminal() && io::stdout().is_terminal()) {
        return Ok(Err(
            "syncspy: --tui needs a terminal on stdin and stdout; running without the monitor"
                .into(),
        ));
    }
    let Some(top) = dirs.iter().map(|d| d.join(TOP_NAME)).find(|p| p.is_file()) else {
        return Ok(Err(format!(
            "syncspy: --tui: {TOP_NAME} not found next to syncspy (build it with `cargo build \
             -p syncspy-tui`); running without the monitor"
        )));
    };
    let log = match &opts.tui_log {
        Some(p) => {
            check_output_path("--tui-log", "a log file", p)?;
            p.clone()
        }
        None => PathBuf::from(format!("syncspy-run-{}.log", std::process::id())),
    };
    Ok(Ok((top, std::path::absolute(&log).unwrap_or(log))))
}

fn cannot_start(cmd: &OsStr, e: &io::Error) -> RunError {
    let name = cmd.to_string_lossy();
    RunError::CannotStart(match e.kind() {
        io::ErrorKind::NotFound => {
            format!("cannot run `{name}`: command not found: check the name or give its path")
        }
        io::ErrorKind::PermissionDenied => {
            format!("cannot run `{name}`: permission denied: is it an executable file?")
        }
        _ => format!("cannot run `{name}`: {e}"),
    })
}

/// What `run` sets up before the command starts.
struct Prepared {
    program: OsString,
    lib: PathBuf,
    seg_dir: PathBuf,
    session: u64,
    /// Where the library leaves why a process could not record.
    failed_dir: PrivateDir,
    /// The simulated runtime's folder, under `--sim`.
    sim_dir: Option<SimDir>,
    /// The monitor and the command's log, under `--tui`.
    tui: Option<(PathBuf, PathBuf)>,
    /// The log, open, until the command has it.
    log_file: Option<std::fs::File>,
    /// This run's recording, its reader registered before the command starts.
    recording: Recording,
}

/// Checks the command, finds the libraries and the segment folder, checks the output paths,
/// picks the session, and registers as its reader, so that an agent leaves this run's ended
/// segments to it.
fn prepare(opts: &RunOptions) -> Result<Prepared, RunError> {
    let Some(program) = opts.command.first() else {
        return Err(RunError::Setup(
            "no command given: syncspy run [OPTIONS] -- CMD [ARGS...]".into(),
        ));
    };
    let dirs = library_dirs();
    let lib = find_library(
        LIB_NAME,
        LIB_ENV,
        std::env::var_os(LIB_ENV).as_deref(),
        &dirs,
        "build it with `cargo build -p syncspy-interpose`",
    )?;
    let seg_dir = segment_dir(std::env::var_os(DIR_ENV).as_deref())?;
    if let Some(r) = &opts.report {
        check_output_path("--report", "a JSON file", r)?;
    }
    if let Some(t) = &opts.trace {
        check_output_path("--trace", "a JSON trace file", t)?;
    }
    let session = new_session();
    let failed_dir = PrivateDir::create("failed")?;
    // Another user's segment counts only when its process is one this run started. Ended
    // segments are removed at the end, or handed over to a reader that still wants them (an
    // agent); then what nobody reads any more is reclaimed (this run's kept ones aside).
    let reader: ReaderSession = ReaderSession::new(
        SessionOptions::new(&seg_dir)
            .session(Some(session))
            .tree(std::process::id())
            .claiming()
            .removal(if opts.keep_segments {
                Removal::Keep
            } else {
                Removal::Ended
            })
            .reclaim(Some(syncspy_abi::lifecycle::Policy::from_env())),
    );
    let trace = opts
        .trace
        .as_ref()
        .map(|_| TraceSink::new(opts.trace_limit));
    let recording = Recording::new(reader, trace);
    let sim_dir = if opts.sim {
        let sim_lib = find_library(
            SIM_LIB_NAME,
            SIM_LIB_ENV,
            std::env::var_os(SIM_LIB_ENV).as_deref(),
            &dirs,
            "build it with `cargo build -p simcuda`",
        )?;
        Some(SimDir::create(&sim_lib)?)
    } else {
        None
    };
    let tui = if opts.tui {
        match tui_plan(opts, &dirs)? {
            Ok(plan) => Some(plan),
            Err(notice) => {
                eprintln!("{notice}");
                None
            }
        }
    } else {
        None
    };
    // Under the monitor the command's output goes to the log, so it does not garble the
    // screen, and its stdin is not the terminal, so it does not take the monitor's keys.
    let log_file = match &tui {
        Some((_, log)) => Some(open_log(log)?),
        None => None,
    };
    Ok(Prepared {
        program: program.clone(),
        lib,
        seg_dir,
        session,
        failed_dir,
        sim_dir,
        tui,
        log_file,
        recording,
    })
}

/// The command, started, and what watches it.
struct Started {
    started: Instant,
    /// Passes the signals `syncspy run` gets on to the command.
    forwarder: Forwarder,
    /// `syncspy-top`, under `--tui`.
    monitor: Option<std::process::Child>,
    /// Reads the command's captured standard output.
    stdout_reader: Option<std::thread::JoinHandle<Vec<u8>>>,
    /// The command's exit status, and when it came.
    exited: mpsc::Receiver<(io::Result<ExitStatus>, Instant)>,
}

/// The command with the library preloaded, the session and the folders in its environment.
fn command(opts: &RunOptions, prep: &Prepared) -> Command {
    let mut cmd = Command::new(&prep.program);
    cmd.args(&opts.command[1..]);
    cmd.env(
        "LD_PRELOAD",
        prepend_list(
            prep.lib.as_os_str(),
            std::env::var_os("LD_PRELOAD").as_deref(),
            ":",
        ),
    );
    cmd.env(SESSION_ENV, prep.session.to_string());
    cmd.env(FAILED_DIR_ENV, &prep.failed_dir.0);
    if std::env::var_os(DIR_ENV).is_some_and(|v| !v.is_empty()) {
        cmd.env(DIR_ENV, &prep.seg_dir);
    }
    if let Some(d) = &prep.sim_dir {
        cmd.env(
            "LD_LIBRARY_PATH",
            prepend_list(
                d.path().as_os_str(),
                std::env::var_os("LD_LIBRARY_PATH").as_deref(),
                ":",
            ),
        );
    }
    cmd
}

/// Starts the command (and the monitor, under `--tui`), forwarding signals to it; its exit
/// status arrives through `Started::exited` the moment it exits.
fn start(opts: &RunOptions, prep: &mut Prepared) -> Result<Started, RunError> {
    let mut cmd = command(opts, prep);
    let forwarder = Forwarder::install()
        .map_err(|e| RunError::Setup(format!("cannot install signal handlers: {e}")))?;
    let started = Instant::now();
    let log_file = prep.log_file.take();
    if let Some(f) = &log_file {
        let stdio = |f: &std::fs::File| {
            f.try_clone()
                .map(Stdio::from)
                .map_err(|e| RunError::Setup(format!("cannot use the log file: {e}")))
        };
        cmd.stdin(Stdio::null());
        cmd.stdout(stdio(f)?);
        cmd.stderr(stdio(f)?);
    }
    if opts.capture_stdout {
        cmd.stdout(Stdio::piped());
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            // Nothing was written to the log: do not leave it behind.
            if let Some((_, log)) = &prep.tui {
                if std::fs::metadata(log).is_ok_and(|m| m.is_file() && m.len() == 0) {
                    let _ = std::fs::remove_file(log);
                }
            }
            return Err(cannot_start(&prep.program, &e));
        }
    };
    forwarder.set_child(child.id());
    if opts.announce_session && prep.tui.is_none() && {
        use std::io::IsTerminal;
        io::stderr().is_terminal()
    } {
        eprintln!("{}", session_line(prep.session));
    }
    drop(log_file);
    // The monitor, attached to the terminal, follows this run's session only.
    let monitor = match &prep.tui {
        Some((top, log)) => match Command::new(top)
            .arg("--session")
            .arg(prep.session.to_string())
            .arg("--dir")
            .arg(&prep.seg_dir)
            .spawn()
        {
            Ok(m) => Some(m),
            Err(e) => {
                eprintln!(
                    "syncspy: cannot start {}: {e}; running without the monitor (the \
                     command's output goes to {})",
                    top.display(),
                    log.display()
                );
                None
            }
        },
        None => None,
    };
    // Read while the command runs, so that a full pipe never blocks it.
    let stdout_reader = child.stdout.take().map(|mut out| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = io::Read::read_to_end(&mut out, &mut buf);
            buf
        })
    });
    // Waiting in a thread ends the run the moment the command exits, not at the next poll.
    let (tx, exited) = mpsc::channel();
    std::thread::spawn(move || {
        let r = child.wait();
        Forwarder::clear_child();
        let _ = tx.send((r, Instant::now()));
    });
    Ok(Started {
        started,
        forwarder,
        monitor,
        stdout_reader,
        exited,
    })
}

/// syncspy's own warnings while the command runs: printed at once, or, while the monitor
/// owns the screen, held until it ends.
struct Notes {
    defer: bool,
    held: Vec<String>,
}

impl Notes {
    fn say(&mut self, m: String) {
        if self.defer {
            self.held.push(m);
        } else {
            eprintln!("{m}");
        }
    }

    fn flush(&mut self) {
        for n in self.held.drain(..) {
            eprintln!("{n}");
        }
    }
}

/// One round of reading: new segments, their problems said, the records drained (into the
/// trace, when one is written).
fn read_step(recording: &mut Recording, notes: &mut Notes) {
    for p in recording.step() {
        notes.say(format!("syncspy: warning: {p}"));
    }
}

/// Reads the session until the command ends, then, under the monitor, until the user quits
/// it. Returns the command's exit status and when it ended.
fn follow_until_end(
    opts: &RunOptions,
    recording: &mut Recording,
    notes: &mut Notes,
    st: &mut Started,
) -> (io::Result<ExitStatus>, Instant) {
    let ended = loop {
        read_step(recording, notes);
        match st.exited.recv_timeout(opts.poll_interval) {
            Ok(x) => break x,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break (
                    Err(io::Error::other("the waiting thread ended")),
                    Instant::now(),
                )
            }
        }
    };
    // The command ended; the monitor shows it as exited until the user quits it.
    if let Some(m) = &mut st.monitor {
        let status = loop {
            read_step(recording, notes);
            match m.try_wait() {
                Ok(Some(s)) => break Ok(s),
                Ok(None) => std::thread::sleep(opts.poll_interval),
                Err(e) => break Err(e),
            }
        };
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => eprintln!("syncspy: warning: {TOP_NAME} ended with {s}"),
            Err(e) => eprintln!("syncspy: warning: cannot wait for {TOP_NAME}: {e}"),
        }
    }
    ended
}

/// After the command: the final drain, the report with the processes that could not record
/// and the trace's cut, the clean-up (segments removed or kept, the folder reclaimed, the
/// registration dropped), the summary, and the files written.
fn finish_run(
    opts: &RunOptions,
    prep: Prepared,
    st: Started,
    (status, ended): (io::Result<ExitStatus>, Instant),
    mut notes: Notes,
) -> Result<RunOutcome, RunError> {
    let Prepared {
        recording,
        failed_dir,
        sim_dir,
        tui,
        ..
    } = prep;
    drop(st.forwarder);
    // Ends when every holder of the pipe's write end (the command, its descendants) has.
    let stdout = st.stdout_reader.map(|h| h.join().unwrap_or_default());
    let exit_code = match status {
        Ok(s) => exit_code_of(s),
        Err(e) => {
            eprintln!("syncspy: warning: cannot get the command's exit status: {e}");
            EXIT_SETUP
        }
    };
    // What was held while the monitor owned the screen, before the final drain's problems.
    notes.flush();
    let mut rec = recording.finish(&RunInfo {
        command: opts
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        exit_code,
        wall_ns: u64::try_from((ended - st.started).as_nanos()).unwrap_or(u64::MAX),
    });
    if let Some((_, log)) = &tui {
        eprintln!("syncspy: the command's output is in {}", log.display());
    }
    let unrecorded = read_failures(&failed_dir.0);
    drop(failed_dir);
    if let Some(m) = unrecorded_message(&unrecorded) {
        rec.report.warnings.push(m);
    }
    if let (Some(path), Some(sink)) = (&opts.trace, rec.trace()) {
        if sink.cut() > 0 {
            let cut = Warning::TraceCut {
                path: path.display().to_string(),
                kept: sink.events().len() as u64,
                seen: sink.seen(),
            };
            rec.report.warnings.push(cut);
        }
    }
    drop(sim_dir);
    if opts.print_summary {
        eprint!("{}", summary::render(&rec.report));
    } else if let Some(m) = unrecorded_message(&unrecorded) {
        eprintln!("syncspy: warning: {m}");
    }
    write_files(opts, &mut rec, exit_code)?;
    Ok(RunOutcome {
        exit_code,
        report: rec.report,
        removed_segments: rec.removed,
        stdout,
        unrecorded,
    })
}

/// The report and the trace, where asked for; an error says the command's exit code too.
fn write_files(
    opts: &RunOptions,
    rec: &mut recording::Recorded,
    exit_code: i32,
) -> Result<(), RunError> {
    let failed = |m: String| RunError::Report(format!("{m} (the command exited with {exit_code})"));
    if let Some(path) = &opts.report {
        recording::write_report(&rec.report, path).map_err(failed)?;
    }
    let Some(path) = &opts.trace else {
        return Ok(());
    };
    rec.write_trace(path)
        .map_err(|e| failed(format!("cannot write the trace to {}: {e}", path.display())))?;
    if let (true, Some(sink)) = (opts.print_summary, rec.trace()) {
        eprintln!(
            "syncspy: trace: {} written to {}{}",
            syncspy_read::plural::count(sink.events().len(), "event", "events"),
            path.display(),
            if sink.cut() > 0 {
                format!(" (cut: {} more not kept)", sink.cut())
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

/// Runs the command to its end and reports. Prints segment problems as they appear and,
/// unless `print_summary` is off, the summary to stderr at the end.
pub fn run(opts: &RunOptions) -> Result<RunOutcome, RunError> {
    let mut prep = prepare(opts)?;
    let mut st = start(opts, &mut prep)?;
    let mut notes = Notes {
        defer: st.monitor.is_some(),
        held: Vec::new(),
    };
    let ended = follow_until_end(opts, &mut prep.recording, &mut notes, &mut st);
    finish_run(opts, prep, st, ended, notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncspy_test_support::TempDir;

    #[test]
    fn library_lookup_prefers_the_env_then_the_folders() {
        let d = TempDir::new("run-lib");
        let a = d.path().join("a");
        let b = d.path().join("b");
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(b.join("libx.so"), b"").unwrap();
        let dirs = vec![a.clone(), b.clone()];
        let found = find_library("libx.so", "X_LIB", None, &dirs, "build it").unwrap();
        assert_eq!(found, b.join("libx.so"));
        let err = find_library("liby.so", "X_LIB", None, &dirs, "build it")
            .unwrap_err()
            .to_string();
        assert!(err.contains("liby.so not found"), "{err}");
        assert!(err.contains("X_LIB"), "{err}");
        assert!(err.contains("build it"), "{err}");
        let err = find_library(
            "libx.so",
            "X_LIB",
            Some(OsStr::new("/nonexistent/libx.so")),
            &dirs,
            "",
        )
        .unwrap_err();
        assert_eq!(err.exit_code(), EXIT_SETUP);
        assert!(err.to_string().contains("X_LIB=/nonexistent/libx.so"));
        std::fs::write(a.join("lib z.so"), b"").unwrap();
        let err = find_library("lib z.so", "X_LIB", None, &dirs, "").unwrap_err();
        assert!(err.to_string().contains("LD_PRELOAD"), "{err}");
    }

    #[test]
    fn segment_folder_must_exist_be_a_folder_and_writable() {
        let d = TempDir::new("run-dir");
        assert_eq!(
            segment_dir(Some(d.path().as_os_str())).unwrap(),
            d.path().to_path_buf()
        );
        let err = segment_dir(Some(OsStr::new("/nonexistent/x"))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "SYNCSPY_DIR=/nonexistent/x does not exist: set SYNCSPY_DIR to a writable \
             folder (default /dev/shm)"
        );
        let f = d.path().join("file");
        std::fs::write(&f, b"").unwrap();
        assert!(segment_dir(Some(f.as_os_str()))
            .unwrap_err()
            .to_string()
            .contains("is not a folder"));
    }

    #[test]
    fn lists_are_prepended_and_sessions_are_nonzero() {
        assert_eq!(prepend_list(OsStr::new("/a.so"), None, ":"), "/a.so");
        assert_eq!(
            prepend_list(OsStr::new("/a.so"), Some(OsStr::new("")), ":"),
            "/a.so"
        );
        assert_eq!(
            prepend_list(OsStr::new("/a.so"), Some(OsStr::new("/b.so /c.so")), ":"),
            "/a.so:/b.so /c.so"
        );
        let (a, b) = (new_session(), new_session());
        assert!(a != 0 && b != 0 && a != b);
    }
}
