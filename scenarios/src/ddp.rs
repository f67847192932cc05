//! `scn-ddp-straggler`: a data-parallel job, one process per rank, in which one rank reaches
//! every all-reduce late. What its launcher and its ranks share: the command line, the
//! environment a rank gets (torchrun's), the exchange of the NCCL id, the watchdog thread
//! that polls each all-reduce's completion as PyTorch's ProcessGroupNCCL does, and the
//! launcher itself ([`launch`]).
//!
//! The launcher (`scn-ddp-straggler`) starts `--ranks` processes of `scn-ddp-straggler-cuda`
//! with the environment `torchrun --nproc-per-node N` gives (`RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `GROUP_RANK` 0, `TORCHELASTIC_RUN_ID`, `MASTER_ADDR` and
//! `MASTER_PORT`, which nothing here uses) and `SIMNCCL_DIR`: the folder where the ranks meet
//! (the simulated NCCL's, and where rank 0 leaves the NCCL id for the others, as torch's
//! store would pass it), a fresh private folder removed at the end unless `SIMNCCL_DIR` is
//! set. It waits for every rank, prints their ground-truth lines in rank order, and exits 1
//! if any rank failed. Under `syncspy run` every rank inherits the preloaded library.

use std::ffi::c_int;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cuda::{cudaError_t, cudaEventDestroy, cudaEventQuery, cudaEvent_t};
use crate::nccl::ncclUniqueId;
use crate::truth::Truth;

/// The scenario's name (`scn-ddp-straggler`).
pub const NAME: &str = "ddp-straggler";

/// The command line of the launcher and of each rank (the launcher passes it on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DdpArgs {
    /// Processes, one rank each.
    pub ranks: u64,
    /// The rank that is late to every all-reduce.
    pub late: u64,
    pub steps: u64,
    /// The late rank's host work before each all-reduce, after its wait, in ms.
    pub late_ms: u64,
    /// GPU work per step (the `spin` kernel), in µs.
    pub work_us: u64,
    /// Gradient elements all-reduced each step (f32).
    pub size: u64,
}

impl DdpArgs {
    pub const DEFAULT_RANKS: u64 = 4;

    /// The default late rank: `ranks / 2` (rank 2 of 4; neither the first nor the last).
    pub fn default_late(ranks: u64) -> u64 {
        ranks / 2
    }

    pub fn usage() -> String {
        format!(
            "scn-{NAME}: a data-parallel job, one process per rank; one rank waits for its own \
             step and works on the host before each all-reduce, and every other rank's GPU waits \
             for it in NCCL\n\n\
             usage: scn-{NAME} [--ranks N] [--late R] [--steps N] [--late-ms N] [--work-us N] \
             [--size N]\n\n\
             \x20 --ranks N      processes (ranks) of the job (default {})\n\
             \x20 --late R       the late rank (default ranks / 2: rank 2 of 4)\n\
             \x20 --steps N      training steps (default 20)\n\
             \x20 --late-ms N    the late rank's host work before each all-reduce, in ms \
             (default 15)\n\
             \x20 --work-us N    GPU work per step, in µs (default 3000)\n\
             \x20 --size N       gradient elements all-reduced each step (default 65536)\n\n\
             Each rank prints its ground truth as one JSON line on stdout at exit (see \
             scenarios/src/ddp.rs); the launcher prints them in rank order. The ranks meet in \
             SIMNCCL_DIR (default: a private folder, removed at the end).",
            Self::DEFAULT_RANKS
        )
    }

    /// `Ok(None)` for `--help`.
    pub fn parse_from(args: impl IntoIterator<Item = String>) -> Result<Option<DdpArgs>, String> {
        let mut ranks = Self::DEFAULT_RANKS;
        let mut late = None;
        let (mut steps, mut late_ms, mut work_us, mut size) = (20, 15, 3000, 1 << 16);
        let mut it = args.into_iter();
        while let Some(flag) = it.next() {
            let mut value = || -> Result<u64, String> {
                let v = it.next().ok_or(format!("{flag} needs a value"))?;
                v.parse()
                    .map_err(|_| format!("{flag}: not a number: {v:?}"))
            };
            match flag.as_str() {
                "-h" | "--help" => return Ok(None),
                "--ranks" => ranks = value()?,
                "--late" => late = Some(value()?),
                "--steps" => steps = value()?,
                "--late-ms" => late_ms = value()?,
                "--work-us" => work_us = value()?,
                "--size" => size = value()?,
                _ => return Err(format!("unknown argument {flag:?}")),
            }
        }
        if !(1..=64).contains(&ranks) || steps == 0 || size == 0 {
            return Err("--ranks must be 1 to 64, --steps and --size at least 1".into());
        }
        let late = late.unwrap_or(Self::default_late(ranks));
        if late >= ranks {
            return Err(format!("--late {late} is not a rank of {ranks}"));
        }
        Ok(Some(DdpArgs {
            ranks,
            late,
            steps,
            late_ms,
            work_us,
            size,
        }))
    }

    /// The process's arguments; prints usage and exits on `-h` or a bad argument.
    pub fn parse(program: &str) -> DdpArgs {
        let args = std::env::args_os()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned());
        match DdpArgs::parse_from(args) {
            Ok(Some(a)) => a,
            Ok(None) => {
                println!("{}", Self::usage());
                std::process::exit(0);
            }
            Err(e) => {
                eprintln!("{program}: {e}\n\n{}", Self::usage());
                std::process::exit(2);
            }
        }
    }

    /// The arguments as a truth line shows them, with the rank's own (`rank`, `is_late`).
    pub fn to_json(&self, rank: u64) -> Value {
        json!({
            "ranks": self.ranks, "late": self.late, "steps": self.steps,
            "late_ms": self.late_ms, "work_us": self.work_us, "size": self.size,
            "rank": rank, "is_late": rank == self.late,
        })
    }
}

/// What a rank learns from its launcher's environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankEnv {
    pub rank: u64,
    pub world: u64,
    pub local_rank: u64,
    /// `SIMNCCL_DIR`: where rank 0 leaves the NCCL id.
    pub dir: PathBuf,
    /// `TORCHELASTIC_RUN_ID`: names the id's file, so jobs may share a folder.
    pub run_id: String,
}

impl RankEnv {
    /// Reads the environment through `var`; the world size must be the `--ranks` given.
    pub fn from_lookup(
        a: &DdpArgs,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<RankEnv, String> {
        let num = |name: &str| -> Result<u64, String> {
            let v = var(name).ok_or(format!(
                "{name} is not set: start the ranks with scn-{NAME} (the launcher)"
            ))?;
            v.trim()
                .parse()
                .map_err(|_| format!("{name} is not a number: {v:?}"))
        };
        let env = RankEnv {
            rank: num("RANK")?,
            world: num("WORLD_SIZE")?,
            local_rank: num("LOCAL_RANK")?,
            dir: PathBuf::from(var("SIMNCCL_DIR").ok_or("SIMNCCL_DIR is not set")?),
            run_id: var("TORCHELASTIC_RUN_ID").unwrap_or_else(|| "none".into()),
        };
        if env.world != a.ranks || env.rank >= env.world {
            return Err(format!(
                "RANK {} of WORLD_SIZE {} does not fit --ranks {}",
                env.rank, env.world, a.ranks
            ));
        }
        Ok(env)
    }

    pub fn from_env(a: &DdpArgs) -> Result<RankEnv, String> {
        Self::from_lookup(a, |n| std::env::var(n).ok())
    }

    fn id_file(&self) -> PathBuf {
        let safe: String = self
            .run_id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.dir.join(format!("{safe}.nccl-id"))
    }

    /// The communicator's id: rank 0 makes it with `make` and leaves it in the folder, the
    /// others wait for it there (at most `timeout`).
    pub fn share_id(
        &self,
        make: impl FnOnce() -> ncclUniqueId,
        timeout: Duration,
    ) -> Result<ncclUniqueId, String> {
        let path = self.id_file();
        if self.rank == 0 {
            let id = make();
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, id.internal)
                .and_then(|()| std::fs::rename(&tmp, &path))
                .map_err(|e| format!("cannot leave the NCCL id in {}: {e}", path.display()))?;
            return Ok(id);
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(bytes) = std::fs::read(&path) {
                let internal: [u8; 128] = bytes
                    .try_into()
                    .map_err(|_| format!("{} is not an NCCL id", path.display()))?;
                return Ok(ncclUniqueId { internal });
            }
            if Instant::now() > deadline {
                return Err(format!("no NCCL id from rank 0 in {}", path.display()));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Rank 0 removes the id once every rank has joined (each read it before joining).
    pub fn forget_id(&self) {
        if self.rank == 0 {
            let _ = std::fs::remove_file(self.id_file());
        }
    }
}

#[derive(Default)]
struct Queue {
    events: Vec<usize>,
    stop: bool,
}

/// A thread that checks the completion of each all-reduce as PyTorch's ProcessGroupNCCL
/// watchdog does: the main thread records an event after each all-reduce and hands it over;
/// every 100 ms the watchdog queries the pending events (`cudaEventQuery`), sleeping in
/// between, and destroys each once complete. A rank waiting for the late one sees not-ready
/// answers 100 ms apart: no polling loop, and syncspy must not report one (`poll_wait`).
pub struct Watchdog {
    shared: Arc<(Mutex<Queue>, Condvar)>,
    thread: std::thread::JoinHandle<Truth>,
}

/// How long the watchdog sleeps between rounds of queries (PyTorch's
/// `kWatchdogThreadSleepMillis`).
pub const WATCHDOG_PERIOD: Duration = Duration::from_millis(100);

impl Watchdog {
    pub fn start() -> Watchdog {
        let shared = Arc::new((Mutex::new(Queue::default()), Condvar::new()));
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(move || Self::run(&theirs))
            .expect("start the watchdog thread");
        Watchdog { shared, thread }
    }

    /// Hands over an event recorded after a collective; the watchdog destroys it.
    pub fn watch(&self, e: cudaEvent_t) {
        let (q, _) = &*self.shared;
        q.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .events
            .push(e as usize);
    }

    /// Stops the watchdog once its events are complete; returns its account (its queries,
    /// their spins, the event destructions).
    pub fn stop(self) -> Truth {
        let (q, cv) = &*self.shared;
        q.lock().unwrap_or_else(PoisonError::into_inner).stop = true;
        cv.notify_all();
        self.thread.join().expect("the watchdog thread panicked")
    }

    fn run(shared: &(Mutex<Queue>, Condvar)) -> Truth {
        let (q, cv) = shared;
        let mut t = Truth::default();
        // Each pending event: its handle, the not-ready answers so far, its first query.
        let mut pending: Vec<(usize, u64, Option<Instant>)> = Vec::new();
        loop {
            let stop = {
                let mut g = q.lock().unwrap_or_else(PoisonError::into_inner);
                pending.extend(g.events.drain(..).map(|e| (e, 0, None)));
                g.stop
            };
            pending.retain_mut(|(e, not_ready, first)| {
                let since = *first.get_or_insert_with(Instant::now);
                let ev = *e as cudaEvent_t;
                // SAFETY: an event the main thread recorded and handed over; destroyed only
                // here, once.
                let rc = t.call("cudaEventQuery", 0, || unsafe { cudaEventQuery(ev) });
                match rc {
                    cudaError_t::cudaErrorNotReady => {
                        *not_ready += 1;
                        true
                    }
                    rc => {
                        crate::cuda::check(rc, "cudaEventQuery");
                        let ns = since.elapsed().as_nanos() as u64;
                        t.spin("cudaEventQuery", *not_ready, ns);
                        // SAFETY: as above; no other thread uses the event any more.
                        let rc = t.call("cudaEventDestroy", 0, || unsafe { cudaEventDestroy(ev) });
                        crate::cuda::check(rc, "cudaEventDestroy");
                        false
                    }
                }
            });
            if stop && pending.is_empty() {
                return t;
            }
            if stop {
                // Events still pending at the stop: checked at the watchdog's period as
                // before, never back to back (that would be a spin, a poll_wait of its own).
                std::thread::sleep(WATCHDOG_PERIOD);
                continue;
            }
            let g = q.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = cv
                .wait_timeout_while(g, WATCHDOG_PERIOD, |g| !g.stop)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// The truth line's `polls`: per query API, `{"spins", "waited", "not_ready", "wait_ns"}`.
pub fn polls_json(t: &Truth) -> Value {
    t.polls
        .iter()
        .map(|(api, s)| {
            let v = json!({"spins": s.spins, "waited": s.waited, "not_ready": s.not_ready,
                "wait_ns": s.wait_ns});
            (api.to_string(), v)
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// A folder only this user can enter, removed on drop.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn create() -> std::io::Result<PrivateDir> {
        let base = std::env::temp_dir();
        for n in 0u32.. {
            let p = base.join(format!("scn-{NAME}-{}-{n}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&p) {
                Ok(()) => return Ok(PrivateDir(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => {}
                Err(e) => return Err(e),
            }
        }
        unreachable!("the loop returns")
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The environment of rank `rank` of `ranks`, as `torchrun --nproc-per-node ranks` sets it.
pub fn rank_env(rank: u64, ranks: u64, run_id: &str, dir: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = [
        ("RANK", rank.to_string()),
        ("WORLD_SIZE", ranks.to_string()),
        ("LOCAL_RANK", rank.to_string()),
        ("LOCAL_WORLD_SIZE", ranks.to_string()),
        ("GROUP_RANK", "0".into()),
        ("GROUP_WORLD_SIZE", "1".into()),
        ("ROLE_RANK", rank.to_string()),
        ("ROLE_WORLD_SIZE", ranks.to_string()),
        ("ROLE_NAME", "default".into()),
        ("TORCHELASTIC_RUN_ID", run_id.into()),
        ("TORCHELASTIC_RESTART_COUNT", "0".into()),
        ("TORCHELASTIC_MAX_RESTARTS", "0".into()),
        ("MASTER_ADDR", "127.0.0.1".into()),
        ("MASTER_PORT", "29500".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    v.push(("SIMNCCL_DIR".into(), dir.display().to_string()));
    v
}

/// The launcher `scn-ddp-straggler`: starts the ranks, waits for all, prints their truth
/// lines in rank order; 0 when every rank succeeded, 1 if one failed, 2 when it could not
/// start them.
pub fn launch() -> ExitCode {
    let me = format!("scn-{NAME}");
    let a = DdpArgs::parse(&me);
    for lib in [crate::launch::RUNTIME, "libnccl.so.2"] {
        if let Err(why) = crate::launch::loads(lib) {
            eprintln!(
                "{me}: cannot load {}: {why}\nRun it on the simulator with `syncspy run --sim -- \
                 {me} ...`, or on a machine with the CUDA 13 runtime and NCCL 2 on the library \
                 path (LD_LIBRARY_PATH or ldconfig).",
                lib
            );
            return ExitCode::from(2);
        }
    }
    let (dir, _private) = match std::env::var_os("SIMNCCL_DIR") {
        Some(d) => (PathBuf::from(d), None),
        None => match PrivateDir::create() {
            Ok(p) => (p.0.clone(), Some(p)),
            Err(e) => {
                eprintln!("{me}: cannot make a folder for the ranks to meet in: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let run_id = format!(
        "{me}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let program = std::env::current_exe()
        .unwrap_or_default()
        .with_file_name(format!("{me}-cuda"));
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let mut children = Vec::new();
    for rank in 0..a.ranks {
        let spawned = Command::new(&program)
            .args(&args)
            .envs(rank_env(rank, a.ranks, &run_id, &dir))
            .stdout(Stdio::piped())
            .spawn();
        match spawned {
            Ok(c) => children.push(c),
            Err(e) => {
                eprintln!("{me}: cannot run {}: {e}", program.display());
                for mut c in children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return ExitCode::from(2);
            }
        }
    }
    // Each rank's output is read on a thread of its own (a rank blocked on a full pipe would
    // hold up the others in their collectives).
    let waiters: Vec<_> = children
        .into_iter()
        .map(|c| std::thread::spawn(move || c.wait_with_output()))
        .collect();
    let mut failed = Vec::new();
    for (rank, w) in waiters.into_iter().enumerate() {
        match w.join() {
            Ok(Ok(out)) => {
                print!("{}", String::from_utf8_lossy(&out.stdout));
                if !out.status.success() {
                    failed.push(format!("rank {rank} ({})", out.status));
                }
            }
            _ => failed.push(format!("rank {rank} (not waited for)")),
        }
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("{me}: failed: {}", failed.join(", "));
        ExitCode::FAILURE
    }
}

/// `c_int` of a rank or count that fits (checked by [`DdpArgs::parse_from`]: at most 64).
pub fn int(v: u64) -> c_int {
    c_int::try_from(v).unwrap_or(c_int::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<DdpArgs>, String> {
        DdpArgs::parse_from(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn defaults_and_the_late_rank() {
        let a = parse(&[]).unwrap().unwrap();
        assert_eq!((a.ranks, a.late, a.steps, a.late_ms), (4, 2, 20, 15));
        assert_eq!(parse(&["--ranks", "2"]).unwrap().unwrap().late, 1);
        assert_eq!(parse(&["--ranks", "1"]).unwrap().unwrap().late, 0);
        let a = parse(&["--ranks", "8", "--late", "7", "--steps", "5"])
            .unwrap()
            .unwrap();
        assert_eq!((a.ranks, a.late, a.steps), (8, 7, 5));
        assert!(parse(&["--late", "4"]).is_err());
        assert!(parse(&["--ranks", "0"]).is_err());
        assert!(parse(&["--iters", "3"]).is_err());
        assert!(parse(&["--steps"]).is_err());
        assert!(parse(&["-h"]).unwrap().is_none());
        assert!(DdpArgs::usage().contains("--late-ms"));
        assert_eq!(a.to_json(7)["is_late"], true);
        assert_eq!(a.to_json(6)["is_late"], false);
    }

    #[test]
    fn a_rank_reads_torchruns_environment() {
        let a = parse(&["--ranks", "4"]).unwrap().unwrap();
        let vars = rank_env(3, 4, "job-1", Path::new("/tmp/x"));
        let lookup = |n: &str| vars.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let env = RankEnv::from_lookup(&a, lookup).unwrap();
        assert_eq!((env.rank, env.world, env.local_rank), (3, 4, 3));
        assert_eq!(env.dir, PathBuf::from("/tmp/x"));
        assert_eq!(env.run_id, "job-1");
        assert_eq!(lookup("GROUP_RANK").as_deref(), Some("0"));
        let b = parse(&["--ranks", "2"]).unwrap().unwrap();
        assert!(
            RankEnv::from_lookup(&b, lookup).is_err(),
            "world size differs"
        );
        assert!(RankEnv::from_lookup(&a, |_| None)
            .unwrap_err()
            .contains("RANK"));
    }

    #[test]
    fn rank_zero_shares_the_id_through_the_folder() {
        let dir = std::env::temp_dir().join(format!("scn-ddp-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = parse(&["--ranks", "2"]).unwrap().unwrap();
        let env = |rank: u64| {
            let vars = rank_env(rank, 2, "a/b", &dir);
            RankEnv::from_lookup(&a, |n| {
                vars.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone())
            })
            .unwrap()
        };
        let id = ncclUniqueId { internal: [7; 128] };
        let (zero, one) = (env(0), env(1));
        let got = std::thread::scope(|s| {
            let reader = s.spawn(|| one.share_id(|| unreachable!(), Duration::from_secs(10)));
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(zero.share_id(|| id, Duration::from_secs(1)).unwrap(), id);
            reader.join().unwrap()
        });
        assert_eq!(got.unwrap(), id);
        zero.forget_id();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir(&dir).unwrap();
    }
}
