//! Start, run and stop: the listener bound and the token written before anything else, the
//! collector on the calling thread, the HTTP runtime on threads of its own, until SIGINT or
//! SIGTERM.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::collector::Collector;
use crate::http::{accept_loop, Latest, Served};
use crate::token::{remove_token, write_token};
use syncspy_read::stop::{self, Blocked, StopFlag};

/// The shortest time between two steps of the collector.
const MIN_STEP_GAP: Duration = Duration::from_millis(100);

/// What `syncspy agent` was asked to do.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// The address to serve HTTP on (`--listen`, [`DEFAULT_LISTEN`](crate::DEFAULT_LISTEN)).
    pub listen: String,
    /// The segment folder followed (`SYNCSPY_DIR`); pods' own folders are found besides.
    pub dir: PathBuf,
    /// How often segments are scanned and drained, and the snapshot refreshed.
    pub interval: Duration,
    /// How long ended processes stay in the snapshot.
    pub retain: Duration,
    /// Never remove segment files.
    pub keep_segments: bool,
    /// Where to write the token that `/api/v1/snapshot` asks for (mode 0600).
    pub token_file: PathBuf,
}

/// Why the agent could not start.
#[derive(Debug)]
pub enum ServeError {
    /// The address could not be bound.
    Listen {
        addr: String,
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The thread that answers HTTP requests could not be started.
    Thread(std::io::Error),
    /// The handlers of the stop signals could not be installed.
    Signals(std::io::Error),
    /// The token file could not be written.
    Token {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Listen { addr, source } => write!(f, "cannot listen on {addr}: {source}"),
            ServeError::Thread(e) => write!(f, "cannot start the HTTP thread: {e}"),
            ServeError::Signals(e) => write!(f, "cannot install signal handlers: {e}"),
            ServeError::Token { path, source } => write!(
                f,
                "cannot write the token file {}: {source} (give another with --token-file)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::Listen { source, .. } => Some(source.as_ref()),
            ServeError::Thread(e) | ServeError::Signals(e) => Some(e),
            ServeError::Token { source, .. } => Some(source),
        }
    }
}

/// Runs the daemon until SIGINT or SIGTERM, then removes its token file (and its registration
/// as a reader of the folder) and returns. Fails only at start, when the address cannot be
/// bound or the token file written (an unusable segment folder is reported in the snapshot
/// and retried).
pub fn serve(opts: &AgentOptions) -> Result<(), ServeError> {
    let stop = StopFlag::install_for(&stop::DAEMON).map_err(ServeError::Signals)?;
    // Threads started while the stop signals are blocked keep them blocked, so they reach
    // this thread, whose wait they cut short.
    let blocked = Blocked::new(&stop::DAEMON);
    serve_until_stopped(opts, &stop, blocked)
}

fn serve_until_stopped(
    opts: &AgentOptions,
    stop: &StopFlag,
    blocked: Blocked,
) -> Result<(), ServeError> {
    // One open file per followed segment (its lock tells whether its process runs).
    syncspy_read::follow::raise_open_file_limit();
    let listen_err = |source: Box<dyn std::error::Error + Send + Sync>| ServeError::Listen {
        addr: opts.listen.clone(),
        source,
    };
    let listener =
        std::net::TcpListener::bind(&opts.listen).map_err(|e| listen_err(Box::new(e)))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| listen_err(Box::new(e)))?;
    let local = listener.local_addr().map_err(|e| listen_err(Box::new(e)))?;
    let addr = local.to_string();
    if !local.ip().is_loopback() {
        eprintln!(
            "syncspy: warning: serving on {addr}, which is not loopback: anyone who can \
             reach it reads the metrics (the snapshot still needs the token)"
        );
    }
    let token = write_token(&opts.token_file).map_err(|source| ServeError::Token {
        path: opts.token_file.clone(),
        source,
    })?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("syncspy-http")
        .enable_io()
        .enable_time()
        .build()
        .map_err(ServeError::Thread)?;
    let listener = {
        let _in_rt = rt.enter();
        tokio::net::TcpListener::from_std(listener).map_err(|e| listen_err(Box::new(e)))?
    };
    let mut collector = Collector::new(opts.dir.clone(), opts.retain, opts.keep_segments);
    collector.step();
    let latest: Latest = Arc::new(Mutex::new(Served::new(collector.snapshot())));
    eprintln!(
        "syncspy agent: following segments in {}; serving http://{addr}/metrics and \
         http://{addr}/api/v1/snapshot (with the token in {})",
        opts.dir.display(),
        opts.token_file.display()
    );
    // The collector stays on this thread (the symbolizer is not Send); requests are
    // answered on the runtime's threads from the latest snapshot.
    let for_http = Arc::clone(&latest);
    let token_file: Arc<str> = opts.token_file.display().to_string().into();
    let http_token: Arc<str> = token.clone().into();
    std::thread::Builder::new()
        .name("syncspy-accept".into())
        .spawn(move || rt.block_on(accept_loop(listener, for_http, http_token, token_file)))
        .map_err(ServeError::Thread)?;
    // Every thread is started (the runtime's too, with the signals blocked): from now on
    // SIGINT and SIGTERM reach this one.
    drop(blocked);
    let stopping = || stop.is_set();
    // A folder where segments keep appearing wakes `wait` at once each time: steps are
    // still at least this far apart, so a flood of new files cannot keep the collector busy.
    let min_gap = opts.interval.min(MIN_STEP_GAP);
    let mut last_step = std::time::Instant::now();
    while !stopping() {
        collector.wait(opts.interval);
        if let Some(rest) = min_gap.checked_sub(last_step.elapsed()) {
            std::thread::sleep(rest);
        }
        if stopping() {
            break;
        }
        last_step = std::time::Instant::now();
        collector.step();
        let served = Served::new(collector.snapshot());
        if let Ok(mut s) = latest.lock() {
            *s = served;
        }
    }
    remove_token(&opts.token_file, &token);
    drop(collector);
    eprintln!("syncspy agent: stopped");
    Ok(())
}
