//! `syncspy attach PID` and `syncspy detach PID`: record a process that is already running,
//! then leave it as it was. docs/attach.md says exactly what attach changes in the target.
//!
//! Attach writes a control file (the recording's settings; its freshness is the lease),
//! then either lets a dormant preloaded library (`SYNCSPY_DORMANT=1`) find it, or injects
//! `libsyncspy.so` with ptrace and calls its arming entry point ([`inject`]). It follows the
//! process's segment like `syncspy run`, touching the control file every second; at the end
//! (duration, Ctrl-C, `syncspy detach`) it removes the control file, waits for the library's
//! "detached", reports, and removes the segment.

pub mod folder;
pub mod inject;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use syncspy_read::follow::Followed;
use syncspy_read::report::{Report, RunInfo};
use syncspy_read::session::{ReaderSession, Removal, SessionOptions, SessionProblem};

use crate::recording::{self, Recording};
use crate::run::{
    check_output_path, find_library, library_dirs, new_session, segment_dir, RunError, DIR_ENV,
    LIB_ENV, LIB_NAME, SIM_LIB_NAME, TOP_NAME,
};
use crate::signals::StopFlag;
use crate::summary;

/// How long the library keeps recording without hearing from the attacher.
pub const DEFAULT_LEASE_MS: u64 = 5000;

pub struct AttachOptions {
    pub pid: i32,
    /// Record this long, then detach (None: until Ctrl-C or `syncspy detach`).
    pub duration: Option<Duration>,
    pub report: Option<PathBuf>,
    /// Inject through this thread instead of the idlest one.
    pub thread: Option<i32>,
    pub print_summary: bool,
    /// Show the live monitor (syncspy-top) while attached; quitting it detaches.
    pub tui: bool,
    /// Options for the monitor (`--top-arg`), after the session and folder.
    pub top_args: Vec<String>,
    /// `SYNCSPY_GPU_IDLE` for the library while attached (None: syncspy's own environment
    /// variable, else the library's attach default, `on`).
    pub gpu_idle: Option<String>,
    pub poll_interval: Duration,
    pub lease_ms: u64,
}

impl AttachOptions {
    pub fn new(pid: i32) -> AttachOptions {
        AttachOptions {
            pid,
            duration: None,
            report: None,
            thread: None,
            print_summary: true,
            tui: false,
            top_args: Vec::new(),
            gpu_idle: None,
            // As often as `syncspy run` reads: the ring holds what comes between two reads.
            poll_interval: Duration::from_millis(50),
            lease_ms: DEFAULT_LEASE_MS,
        }
    }
}

pub struct AttachOutcome {
    pub report: Report,
    /// What attach covers in the process, one line each, as the library wrote it.
    pub coverage: Vec<String>,
    /// False when the process ended while attached.
    pub detached: bool,
}

fn setup(m: impl Into<String>) -> RunError {
    RunError::Setup(m.into())
}

/// What /proc says about the target.
struct Target {
    pid: i32,
    /// The pid as the process itself sees it (innermost PID namespace).
    nspid: i32,
    env: Vec<(String, String)>,
    cmdline: Vec<String>,
    /// Its real user id, which the library checks the control file's owner against.
    uid: u32,
    /// It lives in another mount namespace or under another root than this process (a
    /// container): its files are reached through /proc/PID/root, and its segment is made in
    /// its own folder.
    cross: bool,
}

/// The inode of a namespace link (`/proc/PID/ns/mnt`).
fn ns_inode(p: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| m.ino())
}

/// `path` of process `pid`'s file system, opened inside its root (the reader's
/// `in_root`, shared with the agent's pod discovery and the symbolizer): the one way attach
/// reaches into a container.
fn open_in_root(pid: i32, path: &Path, dir: bool) -> std::io::Result<std::os::fd::OwnedFd> {
    syncspy_read::in_root::open_in_root(pid as u32, path, dir)
}

/// Where the control file and the segment are, as the target sees them (`*_in`) and as
/// this process reaches them (`*_out`).
struct Places {
    seg_in: PathBuf,
    seg_out: PathBuf,
    control_in: PathBuf,
    control_out: PathBuf,
    /// The control file's name in `dir`.
    control_name: String,
    /// The control file's folder, checked to be the target's (`folder`), opened inside its
    /// root: `control_out` (and, for a container, `seg_out`) name it through
    /// /proc/<this pid>/fd while this lives.
    dir: folder::ControlDir,
}

fn target(pid: i32) -> Result<Target, RunError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| setup(format!("no process {pid}: {e}")))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
    };
    if field("State:").is_some_and(|v| v.starts_with('Z') || v.starts_with('X')) {
        return Err(setup(format!(
            "process {pid} has exited (its parent has not collected its exit status yet): \
             there is nothing to attach to"
        )));
    }
    if let Some(t) = field("TracerPid:").filter(|t| t != "0") {
        return Err(setup(format!(
            "process {pid} is already traced (by process {t}, a debugger or profiler): \
             attach refuses to share it"
        )));
    }
    if field("x86_Thread_features:").is_some_and(|f| f.contains("shstk")) {
        return Err(setup(format!(
            "process {pid} uses shadow stacks: attach refuses (use SYNCSPY_DORMANT=1 with \
             LD_PRELOAD instead)"
        )));
    }
    let uid = field("Uid:")
        .and_then(|v| v.split_whitespace().next().and_then(|u| u.parse().ok()))
        .ok_or_else(|| setup(format!("process {pid}: no Uid in /proc/{pid}/status")))?;
    let nspid = field("NSpid:")
        .and_then(|v| v.split_whitespace().last().and_then(|p| p.parse().ok()))
        .unwrap_or(pid);
    let env = std::fs::read(format!("/proc/{pid}/environ"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter_map(|kv| {
                    let s = String::from_utf8_lossy(kv);
                    let (k, v) = s.split_once('=')?;
                    Some((k.to_string(), v.to_string()))
                })
                .collect()
        })
        .unwrap_or_default();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default();
    let cross = ns_inode("/proc/self/ns/mnt") != ns_inode(&format!("/proc/{pid}/ns/mnt"))
        || std::fs::canonicalize(format!("/proc/{pid}/root"))
            .ok()
            .as_deref()
            != Some(Path::new("/"));
    Ok(Target {
        pid,
        nspid,
        env,
        cmdline,
        uid,
        cross,
    })
}

impl Target {
    fn env(&self, k: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }

    fn dormant(&self) -> bool {
        self.env("SYNCSPY_DORMANT")
            .is_some_and(|v| !v.is_empty() && v != "0")
    }

    /// The target's own segment folder as it sees it: its `SYNCSPY_DIR`, else /dev/shm.
    fn own_dir(&self) -> PathBuf {
        self.env(DIR_ENV)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/dev/shm"))
    }

    /// The folders the control file may go to, in order (`folder`): `seg_dir` (this
    /// syncspy's folder) for an injection into a process of this mount namespace and root,
    /// else the target's own folder; then its /dev/shm and /tmp.
    fn control_candidates(&self, seg_dir: &Path) -> Vec<folder::Candidate> {
        let (first, what) = if !self.cross && !self.dormant() {
            (seg_dir.to_path_buf(), "this syncspy's SYNCSPY_DIR")
        } else if self.env(DIR_ENV).is_some_and(|d| !d.is_empty()) {
            (self.own_dir(), "its SYNCSPY_DIR")
        } else {
            (self.own_dir(), "its default folder")
        };
        folder::candidates(first, what.to_string())
    }

    /// The control file and the segment folder, with a warning for each folder refused for
    /// the control file. The control file goes to the first candidate folder that is the
    /// target's (`folder`: checked on its descriptor, never a folder the target's
    /// environment names unchecked), named by the pid the target sees for itself. A target
    /// in this mount namespace and root writes its segment where this syncspy reads
    /// (`seg_dir`); a target in a container writes it in the control file's folder, which
    /// this process reaches inside the target's root.
    fn places(&self, seg_dir: &Path) -> Result<(Places, Vec<String>), RunError> {
        let name = format!("syncspy-attach-{}", self.nspid);
        let (dir, warnings) = folder::choose(self.pid, self.uid, &self.control_candidates(seg_dir))
            .map_err(|e| {
                setup(format!(
                    "cannot attach to process {}{}: {e}",
                    self.pid,
                    if self.cross {
                        " (in another mount namespace: a container)"
                    } else {
                        ""
                    }
                ))
            })?;
        let (seg_in, seg_out) = if self.cross {
            (dir.path_in.clone(), dir.out.clone())
        } else {
            (seg_dir.to_path_buf(), seg_dir.to_path_buf())
        };
        Ok((
            Places {
                seg_in,
                seg_out,
                control_in: dir.path_in.join(&name),
                control_out: dir.out.join(&name),
                control_name: name,
                dir,
            },
            warnings,
        ))
    }

    /// Whether something is at `path` as the target sees it (only looked at, never opened for
    /// reading or writing).
    fn has_path(&self, path: &Path) -> bool {
        if self.cross {
            open_in_root(self.pid, path, false).is_ok()
        } else {
            std::fs::symlink_metadata(path).is_ok()
        }
    }

    /// Whether `lib` (a file here) is the same file at the same path inside the target's
    /// root, so that the target can `dlopen` it by that path.
    fn sees(&self, lib: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Ok(here) = std::fs::metadata(lib) else {
            return false;
        };
        if !self.cross {
            return true;
        }
        open_in_root(self.pid, lib, false)
            .and_then(|fd| std::fs::File::from(fd).metadata())
            .is_ok_and(|m| m.dev() == here.dev() && m.ino() == here.ino())
    }
}

fn report_file(control: &Path) -> PathBuf {
    let mut p = control.as_os_str().to_owned();
    p.push(".report");
    PathBuf::from(p)
}

/// A live attach's control file: a regular file (not a link or FIFO someone planted)
/// touched within the lease.
fn fresh(p: &Path, lease: Duration) -> bool {
    std::fs::symlink_metadata(p)
        .ok()
        .filter(|m| m.is_file())
        .and_then(|m| m.modified().ok())
        .is_some_and(|t| SystemTime::now().duration_since(t).unwrap_or_default() <= lease)
}

/// The most the library's report may hold.
const REPORT_MAX: u64 = 1 << 20;

/// The library's report (coverage lines, then `detached`): a regular file read without
/// following a link or blocking, whoever put it there.
fn read_report(p: &Path) -> Option<String> {
    syncspy_read::safe_file::read_bounded_nofollow(p, REPORT_MAX, "the attach report")
        .ok()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// Writes the control file `name` in `dir` (a folder checked to be the target's): created
/// new in the folder's descriptor (`O_CREAT | O_EXCL | O_NOFOLLOW`, never through a link
/// planted at its predictable name; a stale one is removed first), 0600 as it carries the
/// session id, and given to the target's user when that is not this one, so that its
/// library can read it. The descriptor is kept: the lease is renewed through it, never by
/// opening the path again.
fn write_control(
    dir: &folder::ControlDir,
    name: &str,
    text: &str,
    uid: u32,
) -> std::io::Result<std::fs::File> {
    use std::io::Write;
    let mut f = match folder::create_new_in(&dir.fd, name, 0o600) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            folder::remove_in(&dir.fd, name)?;
            folder::create_new_in(&dir.fd, name, 0o600)?
        }
        r => r?,
    };
    let filled = (|| {
        if uid != syncspy_read::safe_file::euid() {
            std::os::unix::fs::fchown(&f, Some(uid), None)?;
        }
        f.write_all(text.as_bytes())
    })();
    if let Err(e) = filled {
        // Not left behind: a fresh file would read as another attach for the lease.
        let _ = folder::remove_in(&dir.fd, name);
        return Err(e);
    }
    Ok(f)
}

fn touch(f: &std::fs::File) {
    let _ = f.set_modified(SystemTime::now());
}

fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true)
}

/// Whether a file mapped in a process is a CUDA runtime or driver: `libcudart.so.*` (and the
/// copies with a hash in their name that Python wheels bundle, `libcudart-1a2b3c4d.so.12`),
/// `libcuda.so.*`, or the simulated runtime (`libsimcudart.so`, which `--sim` links under
/// those names: /proc shows the file, not the link).
pub fn is_cuda_library(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("libcudart")
        || name.starts_with("libcuda.so")
        || name.starts_with(SIM_LIB_NAME)
}

/// Whether process `pid` has a CUDA runtime or driver loaded.
fn uses_cuda(pid: i32) -> bool {
    inject::maps(pid).is_ok_and(|m| m.iter().any(|m| is_cuda_library(&m.path)))
}

/// The descendants of `pid` (children first) that have a CUDA runtime or driver loaded, at
/// most `max`, with their command lines: the workers a launcher started.
fn cuda_descendants(pid: i32, max: usize) -> Vec<(i32, String)> {
    let mut parent_of: Vec<(i32, i32)> = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // The fields after the command's closing parenthesis: state, ppid, ...
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|v| v.parse::<i32>().ok());
        if let Some(pp) = ppid {
            parent_of.push((p, pp));
        }
    }
    let mut found = Vec::new();
    let mut level = vec![pid];
    while !level.is_empty() && found.len() < max {
        let mut next = Vec::new();
        for &(child, pp) in &parent_of {
            if level.contains(&pp) {
                next.push(child);
            }
        }
        next.sort_unstable();
        for &c in &next {
            if found.len() < max && uses_cuda(c) {
                let cmd = std::fs::read(format!("/proc/{c}/cmdline"))
                    .map(|b| {
                        b.split(|x| *x == 0)
                            .filter(|a| !a.is_empty())
                            .map(|a| String::from_utf8_lossy(a).into_owned())
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_default();
                found.push((c, cmd));
            }
        }
        level = next;
    }
    found
}

/// Why attach refuses a process without a CUDA runtime or driver: there is nothing to record,
/// and where the workers that have one are.
fn no_cuda_message(t: &Target) -> String {
    let mut m = format!(
        "process {} ({}) has no CUDA runtime or driver loaded (no libcudart or libcuda in \
         /proc/{}/maps): attach to the process that uses the GPU instead",
        t.pid,
        if t.cmdline.is_empty() {
            "?".to_string()
        } else {
            t.cmdline.join(" ")
        },
        t.pid
    );
    let workers = cuda_descendants(t.pid, 8);
    if workers.is_empty() {
        m.push_str(" (a launcher's worker; none of its descendants has CUDA loaded yet)");
    } else {
        m.push_str(": its descendants that have CUDA loaded:");
        for (pid, cmd) in workers {
            m.push_str(&format!("\n  {pid}  {cmd}"));
        }
    }
    m
}

/// Settings passed on to the library: the recording's, and the user's own `SYNCSPY_*`
/// tuning (ring size, stacks, …); `gpu_idle` (`--gpu-idle`) over `SYNCSPY_GPU_IDLE`.
fn control_text(
    seg_dir: &Path,
    session: u64,
    lease_ms: u64,
    injected: bool,
    gpu_idle: Option<&str>,
) -> String {
    let mut s = format!(
        "SYNCSPY_DIR={}\nSYNCSPY_SESSION={session}\nSYNCSPY_ATTACH_LEASE_MS={lease_ms}\n\
         SYNCSPY_ATTACH_INJECTED={}\n",
        seg_dir.display(),
        u8::from(injected)
    );
    if let Some(m) = gpu_idle {
        s.push_str(&format!("SYNCSPY_GPU_IDLE={m}\n"));
    }
    for (k, v) in std::env::vars() {
        if k == "SYNCSPY_GPU_IDLE" && gpu_idle.is_some() {
            continue;
        }
        if k.starts_with("SYNCSPY_")
            && !matches!(
                k.as_str(),
                "SYNCSPY_DIR"
                    | "SYNCSPY_SESSION"
                    | "SYNCSPY_ATTACH_LEASE_MS"
                    | "SYNCSPY_ATTACH_INJECTED"
                    | "SYNCSPY_LIB"
            )
            && !k.starts_with("SYNCSPY_TEST_")
            && !v.contains('\n')
        {
            s.push_str(&format!("{k}={v}\n"));
        }
    }
    s
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

use folder::user_label;

/// What the target's maps and environment say about attaching to it.
struct Found {
    maps: Vec<inject::Mapping>,
    /// The library, when the process has it mapped already (dormant, or a past attach).
    loaded: Option<String>,
    /// Started with the library in `LD_PRELOAD` (dormant: otherwise refused).
    preloaded: bool,
    /// A dormant library arms by the control file alone: no ptrace.
    armed_by_file: bool,
}

/// Reads the target's maps; refuses a process that already records or has no CUDA to
/// record.
fn look(t: &Target) -> Result<Found, RunError> {
    let maps = inject::maps(t.pid).map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied && t.uid != euid() {
            setup(format!(
                "process {} belongs to another user ({}): attach as that user, or as root \
                 (attaching needs ptrace rights over the process)",
                t.pid,
                user_label(t.uid)
            ))
        } else {
            setup(format!("cannot read /proc/{}/maps: {e}", t.pid))
        }
    })?;
    let named = maps
        .iter()
        .find(|m| inject::is_mapped_lib(&m.path, LIB_NAME))
        .map(|m| m.path.clone());
    // Only when no mapping has the library's name: the check reads the candidates' files.
    let renamed = named
        .is_none()
        .then(|| preloaded_under_another_name(t, &maps))
        .flatten();
    let loaded = named.or_else(|| renamed.clone());
    let preloaded = t.env("LD_PRELOAD").is_some_and(|p| p.contains(LIB_NAME)) || renamed.is_some();
    if preloaded && !t.dormant() {
        return Err(setup(format!(
            "process {} already records: it was started with {LIB_NAME} preloaded (syncspy \
             run, or LD_PRELOAD without SYNCSPY_DORMANT=1)",
            t.pid
        )));
    }
    // A dormant library arms at the process's next CUDA call, whenever that comes; injecting
    // into a process without CUDA (a launcher, a shell) would record nothing.
    let armed_by_file = t.dormant() && loaded.is_some();
    if !armed_by_file && !maps.iter().any(|m| is_cuda_library(&m.path)) {
        return Err(setup(no_cuda_message(t)));
    }
    Ok(Found {
        maps,
        loaded,
        preloaded,
        armed_by_file,
    })
}

/// The mapped path of a syncspy library the target preloads under another file name
/// (`LD_PRELOAD=/opt/x/syncspy-1.2.so`): a file mapped under the file name of an entry of its
/// `LD_PRELOAD` (the folders may differ: a link, a merged /usr) that exports the arming entry
/// point (`inject::is_syncspy_library`, which checks it is the very file mapped). Found by its
/// name alone, such a copy went unseen, and attach loaded a second library beside it.
fn preloaded_under_another_name(t: &Target, maps: &[inject::Mapping]) -> Option<String> {
    let entries = t.env("LD_PRELOAD")?;
    let names: Vec<&str> = entries
        .split([' ', ':'])
        .filter(|e| !e.is_empty())
        .map(|e| e.rsplit('/').next().unwrap_or(e))
        .collect();
    maps.iter()
        .filter(|m| m.offset == 0)
        .filter(|m| names.contains(&m.path.rsplit('/').next().unwrap_or(&m.path)))
        .find(|m| inject::is_syncspy_library(t.pid, maps, &m.path))
        .map(|m| m.path.clone())
}

/// Loads the library into the target with ptrace and arms it; the library's report file
/// proves it armed. The caller removes the control file when this fails.
fn inject_library(
    t: &Target,
    thread: Option<i32>,
    maps: &[inject::Mapping],
    loaded: Option<&str>,
    control: &Path,
    report_out: &Path,
) -> Result<(), RunError> {
    let lib = find_library(
        LIB_NAME,
        LIB_ENV,
        std::env::var_os(LIB_ENV).as_deref(),
        &library_dirs(),
        "build it with `cargo build -p syncspy-interpose`",
    )?
    .canonicalize()
    .map_err(|e| setup(format!("cannot resolve the library path: {e}")))?;
    let libc_info = inject::find_libc(t.pid, maps)
        .map_err(|e| setup(format!("cannot attach to process {}: {e}", t.pid)))?;
    // By its path where the process sees the same file there; else from memory (a
    // container without the library inside): docs/attach.md.
    let load = match loaded {
        Some(m) => inject::Load::Loaded(m.to_string()),
        None if t.sees(&lib) => inject::Load::Path(libc_info.dlopen_plan()),
        None => inject::Load::Memfd(libc_info.dlopen_plan()),
    };
    let plan = inject::Plan {
        pid: t.pid,
        thread,
        load,
        lib,
        control: control.to_path_buf(),
    };
    let done = inject::inject(plan, libc_info)
        .map_err(|e| setup(format!("cannot attach to process {}: {e}", t.pid)))?;
    if !report_out.exists() {
        return Err(setup(format!(
            "the library in process {} did not arm (attached by someone else, another copy \
             of it loaded there first, or it cannot read {}); nothing recorded",
            t.pid,
            control.display()
        )));
    }
    eprintln!(
        "syncspy: attached to process {} through thread {} (in {}), stopped for {} ms",
        t.pid,
        done.thread,
        done.syscall,
        done.stopped_for.as_millis()
    );
    Ok(())
}

/// Waits up to 3 s for the library's "detached" (the control file is gone); says so when it
/// does not come from a living process. The ring is read meanwhile: the process records
/// until the library notices (its worker looks every 100 ms), and the GPU thread's last pass
/// writes the gaps it held back (half a second of them) before the library confirms.
fn confirm_detach(t: &Target, report_out: &Path, lease_ms: u64, mut read: impl FnMut()) -> bool {
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline && alive(t.pid) {
        read();
        if read_report(report_out).is_some_and(|r| r.contains("detached\n")) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if alive(t.pid) {
        eprintln!(
            "syncspy: warning: process {} did not confirm the detach within 3 s (it \
             makes no CUDA calls or is stopped); it detaches by itself within {} ms",
            t.pid, lease_ms
        );
    }
    false
}

/// The recording's end for attach: the report (the attached pid, what attach does not
/// cover), the summary under attach's own first line, the report file.
fn finish(
    opts: &AttachOptions,
    t: &Target,
    recording: Recording,
    coverage: &[String],
    (started, startup): (Instant, Option<&StartUp>),
    (detached, gone): (bool, bool),
) -> Result<Report, RunError> {
    // The final drain, then this attach's segments removed (read; the process keeps its
    // mapping), then the registration dropped.
    let mut report = recording
        .finish(&RunInfo {
            command: t.cmdline.clone(),
            exit_code: 0,
            wall_ns: u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
        })
        .report;
    report.attached_pid = Some(t.pid as u32);
    if let Some(s) = startup {
        s.note_in(&mut report);
    }
    for c in coverage.iter().filter(|c| c.starts_with("not covered")) {
        report
            .warnings
            .push(syncspy_read::warning::Warning::Attach(c.clone()));
    }
    if opts.print_summary {
        for c in coverage {
            eprintln!("syncspy: attach: {c}");
        }
        // The summary's first line speaks of a command that exited: not so here.
        let text = summary::render(&report);
        let rest = text.split_once('\n').map(|(_, r)| r).unwrap_or("");
        eprintln!(
            "syncspy: attached to process {} ({}) for {:.1} s{}",
            t.pid,
            t.cmdline.join(" "),
            started.elapsed().as_secs_f64(),
            if detached {
                ", detached"
            } else if gone {
                ", it ended"
            } else {
                ""
            }
        );
        let rest = match startup {
            Some(s) => s.explain(&report, rest),
            None => rest.to_string(),
        };
        eprint!("{rest}");
    }
    if let Some(path) = &opts.report {
        recording::write_report(&report, path).map_err(RunError::Report)?;
    }
    Ok(report)
}

/// Where this attach keeps its control file and reads the segment, refused while another
/// attach holds the process (its control file is fresh). Warnings about the folder are said.
fn free_places(t: &Target, seg_dir: &Path, lease: Duration) -> Result<Places, RunError> {
    let (places, warnings) = t.places(seg_dir)?;
    for w in warnings {
        eprintln!("syncspy: warning: {w}");
    }
    if fresh(&places.control_out, lease) {
        return Err(setup(format!(
            "process {} is already attached (by another syncspy attach); `syncspy detach {}` \
             ends that",
            t.pid, t.pid
        )));
    }
    Ok(places)
}

/// This attach's reader, registered for its session before the library can make a segment
/// and leasing each one it follows, so that no reclaimer (the library's, an agent's) removes
/// an ended segment (a child that exited) before it is drained.
fn session_recording(seg_out: &Path, session: u64) -> Recording {
    Recording::new(
        ReaderSession::new(
            SessionOptions::new(seg_out)
                .session(Some(session))
                .claiming()
                .removal(Removal::All),
        ),
        None,
    )
}

/// Writes the control file with this recording's settings; its descriptor renews the lease.
fn write_settings(
    opts: &AttachOptions,
    t: &Target,
    places: &Places,
    session: u64,
    preloaded: bool,
) -> Result<std::fs::File, RunError> {
    write_control(
        &places.dir,
        &places.control_name,
        &control_text(
            &places.seg_in,
            session,
            opts.lease_ms,
            !preloaded,
            opts.gpu_idle.as_deref(),
        ),
        t.uid,
    )
    .map_err(|e| {
        setup(format!(
            "cannot write the control file {} (as process {} sees it): {e}",
            places.control_in.display(),
            t.pid
        ))
    })
}

/// Starts the library recording: a dormant one finds the control file by itself, else it is
/// injected.
fn start_library(
    opts: &AttachOptions,
    t: &Target,
    found: &Found,
    control: &Path,
    report_out: &Path,
) -> Result<(), RunError> {
    if found.armed_by_file {
        eprintln!(
            "syncspy: process {} runs {LIB_NAME} dormant: it starts recording at its next CUDA \
             call (no ptrace needed)",
            t.pid
        );
        return Ok(());
    }
    inject_library(
        t,
        opts.thread,
        &found.maps,
        found.loaded.as_deref(),
        control,
        report_out,
    )
}

/// Says problems as they come, on their own line (not over the status line).
fn say(status: &mut Option<Status>, problems: Vec<SessionProblem>) {
    for p in problems {
        if let Some(s) = status {
            s.clear_line();
        }
        eprintln!("syncspy: warning: {p}");
    }
}

/// The coverage lines the library wrote in its report file (its "detached" left out); the
/// file is removed.
fn take_coverage(report_out: &Path) -> Vec<String> {
    let coverage = read_report(report_out)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty() && *l != "detached")
        .map(str::to_string)
        .collect();
    let _ = std::fs::remove_file(report_out);
    coverage
}

/// An attach while it records: what the following loop looks at.
struct Attached<'a> {
    opts: &'a AttachOptions,
    t: &'a Target,
    places: &'a Places,
    /// The control file, touched to renew the lease.
    control_file: &'a std::fs::File,
    started: Instant,
    armed_by_file: bool,
}

/// How following an attached process ended.
struct FollowEnd {
    /// The process ended.
    gone: bool,
    startup: Option<StartUp>,
}

impl Attached<'_> {
    /// Reads the recording until the end (Ctrl-C, the monitor quit, the duration over, the
    /// process ended, `syncspy detach`), renewing the lease, with a live status line on a
    /// terminal (not under the monitor, which owns the screen).
    fn follow(
        &self,
        stop: &StopFlag,
        recording: &mut Recording,
        monitor: &mut Option<std::process::Child>,
    ) -> FollowEnd {
        let opts = self.opts;
        let mut status = (monitor.is_none() && opts.print_summary && stderr_is_terminal())
            .then(|| Status::new(self.t.pid, opts.duration));
        let lease = Duration::from_millis(opts.lease_ms);
        let mut last_touch = Instant::now();
        let mut gone = false;
        // The library's own time when its start-up was over: an injected library created its
        // segment and started CUPTI inside the arming call, which has returned.
        let mut startup: Option<StartUp> = None;
        loop {
            say(&mut status, recording.step());
            if startup.is_none() && !self.armed_by_file {
                startup = StartUp::of(recording.processes(), self.t.nspid);
            }
            if let Some(s) = &mut status {
                s.show(recording.processes(), self.started.elapsed());
            }
            if stop.is_set() || self.monitor_quit(monitor) {
                break;
            }
            if opts.duration.is_some_and(|d| self.started.elapsed() >= d) {
                break;
            }
            if !alive(self.t.pid) {
                gone = true;
                break;
            }
            if self.detach_asked() {
                break;
            }
            if last_touch.elapsed() >= (lease / 4).min(Duration::from_secs(1)) {
                touch(self.control_file);
                last_touch = Instant::now();
            }
            std::thread::sleep(opts.poll_interval);
        }
        if let Some(s) = status.take() {
            s.clear();
        }
        FollowEnd { gone, startup }
    }

    /// The monitor has ended (it is then dropped).
    fn monitor_quit(&self, monitor: &mut Option<std::process::Child>) -> bool {
        let quit = monitor
            .as_mut()
            .is_some_and(|m| !matches!(m.try_wait(), Ok(None)));
        if quit {
            *monitor = None;
        }
        quit
    }

    /// `syncspy detach` (the file gone), or its folder moved or removed under the target,
    /// whose library then no longer finds it at its path and disarms.
    fn detach_asked(&self) -> bool {
        !self.places.control_out.exists() || !self.t.has_path(&self.places.control_in)
    }
}

/// `syncspy attach PID`.
pub fn attach(opts: &AttachOptions) -> Result<AttachOutcome, RunError> {
    let stop =
        StopFlag::install().map_err(|e| setup(format!("cannot install signal handlers: {e}")))?;
    let t = target(opts.pid)?;
    let seg_dir = segment_dir(std::env::var_os(DIR_ENV).as_deref())?;
    if let Some(r) = &opts.report {
        check_output_path("--report", "a JSON file", r)?;
    }
    let found = look(&t)?;
    let places = free_places(&t, &seg_dir, Duration::from_millis(opts.lease_ms))?;
    let report_out = report_file(&places.control_out);
    let _ = std::fs::remove_file(&report_out);
    let session = new_session();
    let mut recording = session_recording(&places.seg_out, session);
    let control_file = write_settings(opts, &t, &places, session, found.preloaded)?;

    let started = Instant::now();
    start_library(opts, &t, &found, &places.control_in, &report_out).inspect_err(|_| {
        let _ = std::fs::remove_file(&places.control_out);
        let _ = std::fs::remove_file(&report_out);
    })?;

    // The monitor, on the terminal, follows this attach's session; quitting it ends the
    // attach.
    let mut monitor = if opts.tui {
        start_monitor(session, &places.seg_out, &opts.top_args)
    } else {
        None
    };
    let attached = Attached {
        opts,
        t: &t,
        places: &places,
        control_file: &control_file,
        started,
        armed_by_file: found.armed_by_file,
    };
    let FollowEnd { gone, mut startup } = attached.follow(&stop, &mut recording, &mut monitor);
    if let Some(s) = &mut startup {
        s.recorded = s.at.elapsed();
    }
    let _ = std::fs::remove_file(&places.control_out);
    let detached = !gone
        && confirm_detach(&t, &report_out, opts.lease_ms, || {
            say(&mut None, recording.step())
        });
    // Detached (or the process ended): the monitor shows it until the user quits it.
    if let Some(mut m) = monitor {
        let _ = m.wait();
    }
    let coverage = take_coverage(&report_out);
    let report = finish(
        opts,
        &t,
        recording,
        &coverage,
        (started, startup.as_ref()),
        (detached, gone),
    )?;
    Ok(AttachOutcome {
        report,
        coverage,
        detached,
    })
}

/// The attached process's start-up cost, apart from its running cost. The library counts
/// its one-time start in `overhead_ns` (the segment, CUPTI's loading and enabling: tens to
/// hundreds of ms on a GPU, less at a re-attach, which finds CUPTI loaded): against a window
/// of a few seconds that swung the summary's share from under 1% to over 10% between two
/// attaches of one loop (issue 36). An injected library has started by the time its arming
/// call returns, so what it reports then is its start-up.
struct StartUp {
    pid: u32,
    start_ticks: u64,
    /// `overhead_ns` at the first read after arming.
    overhead_ns: u64,
    at: Instant,
    /// From then to the end of recording.
    recorded: Duration,
}

impl StartUp {
    /// From the first read of the target's segment (`nspid`: its pid as it sees itself,
    /// which its segment carries).
    fn of(followed: &[Followed], nspid: i32) -> Option<StartUp> {
        let f = followed
            .iter()
            .find(|f| f.key().process.pid == nspid as u32)?;
        Some(StartUp {
            pid: f.key().process.pid,
            start_ticks: f.key().process.start_ticks,
            overhead_ns: f.agg().live().overhead_ns,
            at: Instant::now(),
            recorded: Duration::ZERO,
        })
    }

    /// Puts the start-up apart in the report: the process's `startup_overhead_ns`.
    fn note_in(&self, report: &mut Report) {
        if let Some(p) = report
            .processes
            .iter_mut()
            .find(|p| p.pid == self.pid && p.start_ticks == self.start_ticks)
        {
            p.startup_overhead_ns = Some(self.overhead_ns.min(p.overhead_ns));
        }
    }

    /// The summary (without its first line) with a line after the process's overhead line
    /// that puts the start-up apart from the cost while recording.
    fn explain(&self, report: &Report, summary: &str) -> String {
        let Some(p) = report
            .processes
            .iter()
            .find(|p| p.pid == self.pid && p.start_ticks == self.start_ticks)
        else {
            return summary.to_string();
        };
        let line = startup_line(p.overhead_ns, self.overhead_ns, self.recorded);
        let head = format!("pid {}  ", self.pid);
        let mut out = String::with_capacity(summary.len() + line.len() + 1);
        let mut in_process = false;
        let mut done = false;
        for l in summary.split_inclusive('\n') {
            out.push_str(l);
            in_process = (in_process || l.starts_with(&head)) && !done;
            if in_process && l.starts_with("  syncspy overhead:") {
                out.push_str(&line);
                out.push('\n');
                done = true;
            }
        }
        out
    }
}

/// `  of which start-up 312.40 ms (its segment, CUPTI's start: once per attach); while
/// recording 21.30 ms, 0.7% of the 2.9 s recorded`.
fn startup_line(total_ns: u64, startup_ns: u64, recorded: Duration) -> String {
    let running = total_ns.saturating_sub(startup_ns);
    let recorded_ns = u64::try_from(recorded.as_nanos()).unwrap_or(u64::MAX);
    let share = if recorded_ns == 0 {
        "-".to_string()
    } else {
        format!("{:.1}%", running as f64 * 100.0 / recorded_ns as f64)
    };
    format!(
        "    of which start-up {} (its segment, CUPTI's start: once per attach); while \
         recording {}, {share} of the {:.1} s recorded",
        summary::fmt_ns(startup_ns.min(total_ns)),
        summary::fmt_ns(running),
        recorded.as_secs_f64()
    )
}

fn stderr_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal()
}

/// The live status line on stderr while attached: events so far and how to end it, redrawn
/// in place once a second.
struct Status {
    pid: i32,
    duration: Option<Duration>,
    last: Option<Instant>,
}

impl Status {
    fn new(pid: i32, duration: Option<Duration>) -> Status {
        Status {
            pid,
            duration,
            last: None,
        }
    }

    fn show(&mut self, followed: &[Followed], elapsed: Duration) {
        if self
            .last
            .is_some_and(|l| l.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.last = Some(Instant::now());
        let (mut events, mut stall_ns) = (0u64, 0u64);
        for f in followed {
            for k in syncspy_abi::Kind::ALL.iter().filter(|k| k.is_host_stall()) {
                events = events.saturating_add(f.agg().live().kind(*k).count);
            }
            stall_ns = stall_ns.saturating_add(f.agg().stall_ns());
        }
        eprint!(
            "\r\x1b[K{}",
            status_line(self.pid, events, stall_ns, elapsed, self.duration)
        );
    }

    fn clear(self) {
        if self.last.is_some() {
            eprint!("\r\x1b[K");
        }
    }

    /// Clears the line drawn, for a message; the next `show` draws it again at once.
    fn clear_line(&mut self) {
        if self.last.take().is_some() {
            eprint!("\r\x1b[K");
        }
    }
}

/// `syncspy: attached to process 42: 1234 stall events (5.20 s of host stalls) in 12 s;
/// Ctrl-C or `syncspy detach 42` ends it`.
fn status_line(
    pid: i32,
    events: u64,
    stall_ns: u64,
    elapsed: Duration,
    duration: Option<Duration>,
) -> String {
    let end = match duration {
        Some(d) => format!(
            "detaches after {} s, or at Ctrl-C",
            format!("{:.1}", d.as_secs_f64()).trim_end_matches(".0")
        ),
        None => format!("Ctrl-C or `syncspy detach {pid}` ends it"),
    };
    format!(
        "syncspy: attached to process {pid}: {events} stall event{} ({} of host stalls) in \
         {:.0} s; {end}",
        if events == 1 { "" } else { "s" },
        summary::fmt_ns(stall_ns),
        elapsed.as_secs_f64()
    )
}

/// Starts `syncspy-top --session S --dir DIR` on this terminal; None (with a notice) without
/// a terminal or without the monitor's binary.
fn start_monitor(session: u64, seg_dir: &Path, extra: &[String]) -> Option<std::process::Child> {
    use std::io::IsTerminal;
    if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
        eprintln!(
            "syncspy: --tui needs a terminal on stdin and stdout; attached without the monitor"
        );
        return None;
    }
    let Some(top) = library_dirs()
        .iter()
        .map(|d| d.join(TOP_NAME))
        .find(|p| p.is_file())
    else {
        eprintln!(
            "syncspy: --tui: {TOP_NAME} not found next to syncspy (build it with `cargo build \
             -p syncspy-tui`); attached without the monitor"
        );
        return None;
    };
    match std::process::Command::new(&top)
        .arg("--session")
        .arg(session.to_string())
        .arg("--dir")
        .arg(seg_dir)
        .args(extra)
        .spawn()
    {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!(
                "syncspy: cannot start {}: {e}; attached without the monitor",
                top.display()
            );
            None
        }
    }
}

/// `syncspy detach PID`: ends an attach (of this or another `syncspy attach`) by removing
/// its control file, and waits for the process to confirm.
pub fn detach(pid: i32) -> Result<(), RunError> {
    let t = target(pid)?;
    let seg_dir = segment_dir(std::env::var_os(DIR_ENV).as_deref())?;
    // In whichever of the folders attach may use holds it (attach falls back from a folder
    // it refuses); only those: never a folder the target's environment names unchecked.
    let name = format!("syncspy-attach-{}", t.nspid);
    let dirs = folder::all_checked(t.pid, t.uid, &t.control_candidates(&seg_dir));
    let Some(dir) = dirs
        .iter()
        .find(|d| std::fs::symlink_metadata(d.out.join(&name)).is_ok())
        .or(dirs.first())
    else {
        return Err(setup(format!(
            "process {pid} is not attached (none of the folders its control file may be in is \
             its user's)"
        )));
    };
    let control = dir.out.join(&name);
    let report = report_file(&control);
    if let Err(e) = std::fs::remove_file(&control) {
        use std::os::unix::fs::MetadataExt;
        return Err(setup(match std::fs::symlink_metadata(&control) {
            Ok(m) if m.uid() != euid() => format!(
                "process {pid} was attached by another user ({}): only that user or root can \
                 detach it ({e})",
                user_label(m.uid())
            ),
            Ok(_) => format!("cannot detach process {pid}: {e}"),
            Err(_) => format!("process {pid} is not attached"),
        }));
    }
    // Confirmed by the library's "detached" line, or by the attaching syncspy, which removes
    // the report once it has seen that line (or no report: it was not armed yet).
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline && alive(pid) {
        match read_report(&report) {
            Some(r) if !r.contains("detached\n") => {}
            _ => {
                eprintln!("syncspy: detached from process {pid}");
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "syncspy: asked process {pid} to detach; it has not confirmed yet (it does within \
         its lease)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_text_carries_the_recording_settings() {
        let t = control_text(Path::new("/d"), 42, 1500, true, None);
        assert!(
            t.starts_with("SYNCSPY_DIR=/d\nSYNCSPY_SESSION=42\nSYNCSPY_ATTACH_LEASE_MS=1500\n"),
            "{t}"
        );
        assert_eq!(report_file(Path::new("/x/c")), PathBuf::from("/x/c.report"));
        let t = control_text(Path::new("/d"), 42, 1500, true, Some("duty"));
        assert_eq!(
            t.lines()
                .filter(|l| l.starts_with("SYNCSPY_GPU_IDLE="))
                .collect::<Vec<_>>(),
            ["SYNCSPY_GPU_IDLE=duty"],
            "{t}"
        );
    }

    #[test]
    fn cuda_libraries_are_told_from_others() {
        for p in [
            "/usr/local/cuda/lib64/libcudart.so.13.0.48",
            "/venv/lib/python3.12/site-packages/torch/lib/libcudart-1a2b3c4d.so.12",
            "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06",
            "/work/target/debug/libsimcudart.so",
        ] {
            assert!(is_cuda_library(p), "{p}");
        }
        for p in [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/libcudnn.so.9",
            "/usr/lib/libcublas.so.13",
            "[heap]",
            "",
        ] {
            assert!(!is_cuda_library(p), "{p}");
        }
    }

    #[test]
    fn the_status_line_counts_events_and_says_how_it_ends() {
        let l = status_line(42, 1234, 5_200_000_000, Duration::from_secs(12), None);
        assert!(l.contains("process 42: 1234 stall events"), "{l}");
        assert!(l.contains("in 12 s"), "{l}");
        assert!(l.contains("Ctrl-C or `syncspy detach 42` ends it"), "{l}");
        let l = status_line(42, 1, 0, Duration::ZERO, Some(Duration::from_secs(30)));
        assert!(l.contains(": 1 stall event ("), "{l}");
        assert!(l.contains("detaches after 30 s"), "{l}");
        let l = status_line(42, 1, 0, Duration::ZERO, Some(Duration::from_millis(2500)));
        assert!(l.contains("detaches after 2.5 s"), "{l}");
    }

    #[test]
    fn the_start_up_is_said_apart_from_the_cost_while_recording() {
        // 330 ms in all, 310 of them the start-up, over 2 s recorded: 1.0% while recording.
        let l = startup_line(330_000_000, 310_000_000, Duration::from_secs(2));
        assert!(l.contains("of which start-up 310.00 ms"), "{l}");
        assert!(
            l.contains("while recording 20.00 ms, 1.0% of the 2.0 s"),
            "{l}"
        );
        // A re-attach that found CUPTI loaded: the same running share.
        let l = startup_line(30_000_000, 10_000_000, Duration::from_secs(2));
        assert!(
            l.contains("while recording 20.00 ms, 1.0% of the 2.0 s"),
            "{l}"
        );
        assert!(startup_line(5, 9, Duration::ZERO).contains("while recording 0 ns, -"));
    }

    #[test]
    fn refuses_a_process_that_does_not_exist() {
        let e = attach(&AttachOptions::new(i32::MAX))
            .err()
            .expect("refused");
        assert!(e.to_string().contains("no process"), "{e}");
    }
}
