//! Attach and detach: recording switched on and off in a process that is already running.
//!
//! Two ways in, one control file:
//! - **Dormant preload** (`SYNCSPY_DORMANT=1` with `LD_PRELOAD`): the hooks pass through
//!   (state `DORMANT`, no segment) and, at most once a second from inside a hooked call,
//!   look for `<dir>/syncspy-attach-<pid>` (`dir`: `SYNCSPY_DIR`, default `/dev/shm`). When
//!   `syncspy attach` writes it, the library arms itself. No ptrace is needed.
//! - **Injection** (`syncspy attach` with ptrace): the library is `dlopen`ed `RTLD_LOCAL`
//!   into the process, so its exported symbols interpose nothing; the attacher then calls
//!   [`syncspy_attach_arm`] with the control file's path, and arming redirects the import
//!   slots (GOT) of every loaded module to the hooks (see `got`).
//!
//! The control file holds the configuration (`SYNCSPY_DIR=…` lines, as the environment
//! would) and is the attacher's lease: a worker thread started at arming checks it every
//! 100 ms and disarms when it is removed (`syncspy detach`) or not touched for
//! `SYNCSPY_ATTACH_LEASE_MS` (default 5000: the attacher was killed). Disarming restores the
//! GOT bytes, puts the hooks back to pass-through and ends the worker; the library stays
//! loaded (unloading Rust code with thread-local destructors is unsound), so a later attach
//! needs no second `dlopen`.

mod got;
mod safe_file;

use std::ffi::{c_char, CStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// The control file of the current attach (None: not attached).
static CONTROL: Mutex<Option<PathBuf>> = Mutex::new(None);
/// Whether `CONTROL` holds a file: what `attached` reads without the lock (a stall asks it).
static ATTACHED: AtomicBool = AtomicBool::new(false);
/// Whether arming must redirect GOT slots (the library was injected, not preloaded).
static INJECTED: AtomicBool = AtomicBool::new(false);
/// The process whose worker thread is running (0: none). A fork child has none.
static WORKER_PID: AtomicU32 = AtomicU32::new(0);
/// Serialises arm, disarm and the worker's GOT work.
static ARMING: Mutex<()> = Mutex::new(());
/// Coarse time (ns) of the last dormant look for a control file.
static LAST_POLL: AtomicU64 = AtomicU64::new(0);

/// Result codes of [`syncspy_attach_arm`] and [`syncspy_attach_disarm`].
pub const OK: i32 = 0;
pub const ERR_ALREADY: i32 = 1;
pub const ERR_CONTROL: i32 = 2;
pub const ERR_NOT_ATTACHED: i32 = 3;
pub const ERR_PANIC: i32 = 4;
/// Another copy of the library comes first in the process's global scope (one preloaded
/// under another file name): its hooks, not this copy's, see the program's calls.
pub const ERR_OTHER_COPY: i32 = 5;

const DEFAULT_LEASE_MS: u64 = 5000;
const WORKER_PERIOD: Duration = Duration::from_millis(100);

fn flag(v: Option<std::ffi::OsString>) -> bool {
    matches!(v, Some(v) if !v.is_empty() && v != "0")
}

/// `SYNCSPY_DORMANT` is set: start in `DORMANT`.
pub(crate) fn dormant_by_env() -> bool {
    flag(std::env::var_os("SYNCSPY_DORMANT"))
}

fn coarse_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC_COARSE is served by the vDSO.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The control files a dormant preloaded library looks for, in order: in its own folder
/// (`SYNCSPY_DIR`, default /dev/shm), then in /dev/shm and /tmp. `syncspy attach` writes it
/// in the first of these folders that is provably this process's user's (its own, or a
/// shared sticky one), and falls back to the next when its own folder is not (a folder of
/// another user's, one others can write in without the sticky bit, a link): the same list
/// as the attacher's (cli/src/attach/folder.rs).
fn dormant_control_paths() -> Vec<PathBuf> {
    // SAFETY: getpid cannot fail.
    control_paths(std::env::var_os("SYNCSPY_DIR"), unsafe { libc::getpid() })
}

/// [`dormant_control_paths`] for a `SYNCSPY_DIR` and a pid.
fn control_paths(own: Option<std::ffi::OsString>, pid: i32) -> Vec<PathBuf> {
    let own = own
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/dev/shm"));
    let name = format!("syncspy-attach-{pid}");
    let mut dirs = vec![own];
    for d in ["/dev/shm", "/tmp"] {
        if !dirs.iter().any(|x| x == Path::new(d)) {
            dirs.push(PathBuf::from(d));
        }
    }
    dirs.into_iter().map(|d| d.join(&name)).collect()
}

/// Called by a hook while `DORMANT`: at most once a second, arms if the control file exists
/// (true: armed now). Only a preloaded dormant library does this (an injected one is armed
/// by its attacher).
#[cold]
#[inline(never)]
pub(crate) fn dormant_poll() -> bool {
    if INJECTED.load(Ordering::Relaxed) || !dormant_by_env_cached() {
        return false;
    }
    let now = coarse_ns();
    let last = LAST_POLL.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last) < 1_000_000_000 {
        return false;
    }
    if LAST_POLL
        .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    let lease = lease();
    dormant_control_paths().iter().any(|path| {
        fresh(path, lease) && std::panic::catch_unwind(|| arm(path, true)).is_ok_and(|r| r == OK)
    })
}

fn dormant_by_env_cached() -> bool {
    static V: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *V.get_or_init(dormant_by_env)
}

/// The control file's settings, when it may configure this process: in a folder only this
/// process's user or root can have put it in and kept it there, a regular file (not a link,
/// FIFO, device or hard link) owned by this user or by root, checked on the descriptors
/// (`safe_file::read_control`). /dev/shm is shared: another user must not be able to arm a
/// dormant process, choose where it writes, or block it.
fn read_settings(path: &Path) -> Option<Vec<(String, String)>> {
    let text = safe_file::read_control(path)?;
    Some(
        text.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .filter(|(k, _)| k.starts_with("SYNCSPY_"))
            .collect(),
    )
}

fn report_path(control: &Path) -> PathBuf {
    let mut p = control.as_os_str().to_owned();
    p.push(".report");
    PathBuf::from(p)
}

/// Whether the library was injected (`dlopen`ed `RTLD_LOCAL`, so that only the GOT
/// redirection reaches the hooks) rather than preloaded: the attacher says so in the control
/// file (`SYNCSPY_ATTACH_INJECTED=1`), which it knows; else a library not named in
/// `LD_PRELOAD` counts as injected.
fn injected(settings: &[(String, String)]) -> bool {
    match settings
        .iter()
        .find(|(k, _)| k == "SYNCSPY_ATTACH_INJECTED")
    {
        Some((_, v)) => v == "1",
        None => !std::env::var("LD_PRELOAD").is_ok_and(|p| p.contains("libsyncspy")),
    }
}

/// Whether the process is attached (armed by `syncspy attach`) now.
#[inline]
pub(crate) fn attached() -> bool {
    ATTACHED.load(Ordering::Relaxed)
}

/// The library was injected by `syncspy attach` (the process started without it): the
/// runtime took its driver functions before the library was there. It stays so after a
/// detach, while the hooks may still run (the GOT is restored after `attached` turns false).
pub(crate) fn injected_into() -> bool {
    INJECTED.load(Ordering::Relaxed)
}

fn arm(control: &Path, preloaded: bool) -> i32 {
    let Ok(_g) = ARMING.lock() else {
        return ERR_PANIC;
    };
    if CONTROL.lock().map(|c| c.is_some()).unwrap_or(true) {
        return ERR_ALREADY;
    }
    let Some(settings) = read_settings(control) else {
        return ERR_CONTROL;
    };
    let injected = !preloaded && injected(&settings);
    // GPU idle tracing follows the attacher's SYNCSPY_GPU_IDLE; attach windows are short,
    // so it traces all along unless told otherwise (duty mode would see 1 s in 10). Detach
    // ends it (`gpu::stop_for_detach`).
    let mut settings = settings;
    if !settings.iter().any(|(k, _)| k == "SYNCSPY_GPU_IDLE") {
        settings.push(("SYNCSPY_GPU_IDLE".into(), "on".into()));
    }
    crate::config::set_attach_settings(settings);
    if let Ok(mut c) = CONTROL.lock() {
        *c = Some(control.to_path_buf());
        ATTACHED.store(true, Ordering::Relaxed);
    }
    INJECTED.store(injected, Ordering::Relaxed);
    let mut report = String::new();
    if injected {
        crate::pinned::clear();
        report = got::patch_new_modules();
    }
    report.push_str(
        "note: function pointers the program took with dlsym or cudaGetDriverEntryPoint before \
         attach, and runtimes linked statically into a library, are not covered\n",
    );
    // 0600, created new: never through a link planted at the name.
    if let Ok(mut f) = safe_file::create_report(&report_path(control)) {
        use std::io::Write;
        let _ = f.write_all(report.as_bytes());
    }
    crate::state::arm();
    crate::init::start_now();
    start_worker();
    OK
}

fn disarm() -> i32 {
    let Ok(_g) = ARMING.lock() else {
        return ERR_PANIC;
    };
    let Some(control) = CONTROL.lock().ok().and_then(|mut c| c.take()) else {
        return ERR_NOT_ATTACHED;
    };
    ATTACHED.store(false, Ordering::Relaxed);
    if INJECTED.load(Ordering::Relaxed) {
        got::restore_all();
    }
    // GPU tracing off and its thread ended while the segment is still the one it writes.
    let _ = std::panic::catch_unwind(crate::gpu::stop_for_detach);
    crate::state::go_dormant();
    // The attacher waits for this line: recording is off and the GOT is back.
    use std::io::Write;
    if let Ok(mut f) = safe_file::append_report(&report_path(&control)) {
        let _ = f.write_all(b"detached\n");
    }
    OK
}

fn lease() -> Duration {
    let v = crate::config::attach_setting("SYNCSPY_ATTACH_LEASE_MS")
        .or_else(|| std::env::var("SYNCSPY_ATTACH_LEASE_MS").ok());
    Duration::from_millis(match v {
        None => DEFAULT_LEASE_MS,
        Some(v) => v.trim().parse().unwrap_or_else(|_| {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                eprintln!(
                    "syncspy: warning: SYNCSPY_ATTACH_LEASE_MS={v:?} is not a whole number of \
                     milliseconds: the default {DEFAULT_LEASE_MS} used"
                )
            });
            DEFAULT_LEASE_MS
        }),
    })
}

/// The control file exists (a regular file of this user or root, not a link) and was touched
/// within `lease`.
fn fresh(control: &Path, lease: Duration) -> bool {
    safe_file::control_metadata(control)
        .and_then(|m| m.modified().ok())
        .map(|t| {
            SystemTime::now()
                .duration_since(t)
                .map(|age| age <= lease)
                .unwrap_or(true)
        })
        .unwrap_or(false)
}

/// Starts the worker for this process unless it runs already.
fn start_worker() {
    // SAFETY: getpid cannot fail.
    let pid = unsafe { libc::getpid() } as u32;
    if WORKER_PID.swap(pid, Ordering::AcqRel) == pid {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("syncspy-attach".into())
        .spawn(worker);
    if spawned.is_err() {
        WORKER_PID.store(0, Ordering::Release);
    }
}

/// Every 100 ms: disarm if the control file is gone or stale, bring newly loaded modules'
/// slots over and re-check patched ones (a lazy resolve may have raced the patch).
fn worker() {
    let lease = lease();
    loop {
        std::thread::sleep(WORKER_PERIOD);
        let Some(control) = CONTROL.lock().ok().and_then(|c| c.clone()) else {
            break;
        };
        if !fresh(&control, lease) {
            // Still there, this user's or root's, but not touched: the attacher died. Gone,
            // or replaced by another user's file: detached.
            let stale = safe_file::control_metadata(&control).is_some();
            let segment = crate::state::segment_path();
            disarm();
            if stale {
                // The attacher is gone: a stale file must not arm again, and nobody will
                // read or remove the segment (the mapping stays, in case a hook still
                // writes to it).
                let _ = std::fs::remove_file(&control);
                let _ = std::fs::remove_file(report_path(&control));
                if let Some(s) = segment {
                    let _ = std::fs::remove_file(s);
                }
            }
            break;
        }
        if INJECTED.load(Ordering::Relaxed) {
            if let Ok(_g) = ARMING.lock() {
                let more = got::patch_new_modules();
                got::recheck();
                if !more.is_empty() {
                    use std::io::Write;
                    if let Ok(mut f) = safe_file::append_report(&report_path(&control)) {
                        let _ = f.write_all(more.as_bytes());
                    }
                }
            }
        }
    }
    WORKER_PID.store(0, Ordering::Release);
}

/// A segment was created: in a fork child of an attached process, start its worker (the
/// parent's did not survive the fork), so that detach and the lease reach the child too.
pub(crate) fn on_runtime_created() {
    if CONTROL.lock().map(|c| c.is_some()).unwrap_or(false) {
        start_worker();
    }
}

pub(crate) fn after_fork_in_child() {
    WORKER_PID.store(0, Ordering::Relaxed);
}

/// Arms recording in this process: reads the configuration from the control file `control`
/// (lines `SYNCSPY_DIR=…`, `SYNCSPY_SESSION=…`, …), redirects the GOT slots of loaded
/// modules to the hooks when the library was injected rather than preloaded, writes what it
/// covers to `<control>.report`, creates the segment and starts the worker that keeps the
/// lease. Returns 0, or 1 already attached, 2 control file unreadable, 4 internal error, 5
/// another copy of the library is the process's (`other_copy`).
///
/// # Safety
/// `control` is a NUL-terminated path.
#[no_mangle]
pub unsafe extern "C" fn syncspy_attach_arm(control: *const c_char) -> i32 {
    if control.is_null() {
        return ERR_CONTROL;
    }
    // SAFETY: the caller passes a NUL-terminated path (this function's contract).
    let path = unsafe { CStr::from_ptr(control) };
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(path.to_bytes()));
    if other_copy() {
        return ERR_OTHER_COPY;
    }
    std::panic::catch_unwind(|| arm(&path, false)).unwrap_or(ERR_PANIC)
}

/// Whether the process's global scope resolves the arming entry point to another copy of the
/// library. Loaded beside a copy preloaded under another name, this one would start a second
/// recording and a second CUPTI client in a process whose calls the first copy's hooks see
/// (a JAX job died inside CUPTI so, in 4 of 8 runs of attach cycles, docs/gpu-validation.md).
fn other_copy() -> bool {
    // SAFETY: a lookup in the global scope by a NUL-terminated name.
    let first = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"syncspy_attach_arm".as_ptr()) };
    if first.is_null() {
        return false;
    }
    // Compared by the object each address lies in: this copy's own reference to an exported
    // function may resolve to the copy that interposes it.
    let base = |addr: *const libc::c_void| {
        // SAFETY: `Dl_info` is plain data; `dladdr` only writes it.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: any address may be asked about; `info` is a local out-value.
        (unsafe { libc::dladdr(addr, &mut info) } != 0).then_some(info.dli_fbase as usize)
    };
    let own = other_copy as fn() -> bool;
    match (base(first), base(own as *const libc::c_void)) {
        (Some(a), Some(b)) => a != b,
        _ => false,
    }
}

/// Disarms recording (as the worker does when the control file goes): restores the GOT
/// bytes and makes the hooks pass through. Returns 0, or 3 when not attached.
#[no_mangle]
pub extern "C" fn syncspy_attach_disarm() -> i32 {
    std::panic::catch_unwind(disarm).unwrap_or(ERR_PANIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_read_from_key_value_lines() {
        let d = syncspy_test_support::TempDir::new("attach-settings");
        let p = d.file(
            "ctl",
            "SYNCSPY_DIR=/x\n junk \nSYNCSPY_SESSION = 7\nPATH=/bin\n",
        );
        let s = read_settings(&p).expect("readable");
        assert_eq!(
            s,
            vec![
                ("SYNCSPY_DIR".to_string(), "/x".to_string()),
                ("SYNCSPY_SESSION".to_string(), "7".to_string())
            ]
        );
        assert_eq!(read_settings(&d.path().join("missing")), None);
        // A link is not followed, whoever owns it.
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&p, &link).expect("symlink");
        assert_eq!(read_settings(&link), None);
        // Another user's file is refused (this part needs the right to chown: root, as CI).
        let other = d.file("other", "SYNCSPY_DIR=/x\n");
        if std::os::unix::fs::chown(&other, Some(54321), None).is_ok() {
            assert_eq!(read_settings(&other), None);
        }
        assert_eq!(report_path(&p), d.path().join("ctl.report"));
    }

    #[test]
    fn a_control_file_is_trusted_only_in_a_folder_no_other_user_can_change() {
        use std::os::unix::fs::PermissionsExt;
        let me = safe_file_me();
        // The folder: this user's or root's, and written by no one else unless sticky.
        assert!(safe_file::folder_trusted(me, 0o40755, me));
        assert!(safe_file::folder_trusted(0, 0o40755, me));
        assert!(safe_file::folder_trusted(0, 0o41777, me));
        assert!(!safe_file::folder_trusted(0, 0o40777, me)); // an emptyDir: anyone swaps it
        assert!(!safe_file::folder_trusted(me, 0o40775, me));
        assert!(!safe_file::folder_trusted(
            54321,
            0o40700,
            if me == 54321 { 0 } else { me }
        ));

        let d = syncspy_test_support::TempDir::new("attach-trust");
        let sub = d.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let ctl = sub.join("syncspy-attach-1");
        std::fs::write(&ctl, "SYNCSPY_SESSION=7\n").unwrap();
        assert!(read_settings(&ctl).is_some());
        assert!(fresh(&ctl, Duration::from_secs(60)));
        // Writable by others without the sticky bit: refused; with it: read.
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(read_settings(&ctl), None);
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(read_settings(&ctl).is_some());
        // A second name (a hard link) to it: refused, whoever made it.
        let other = d.path().join("other-name");
        std::fs::hard_link(&ctl, &other).unwrap();
        assert_eq!(read_settings(&ctl), None);
        std::fs::remove_file(&other).unwrap();
        // The folder reached through a link at its last component: not followed.
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&sub, &link).unwrap();
        assert_eq!(read_settings(&link.join("syncspy-attach-1")), None);
        // A link at the control file's name is no lease, whoever touches its target.
        let planted = sub.join("syncspy-attach-2");
        std::os::unix::fs::symlink(&ctl, &planted).unwrap();
        assert!(!fresh(&planted, Duration::from_secs(60)));
    }

    fn safe_file_me() -> u32 {
        // SAFETY: getuid cannot fail.
        unsafe { libc::getuid() }
    }

    #[test]
    fn a_dormant_library_looks_in_its_folder_then_the_shared_ones() {
        let p = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        assert_eq!(
            control_paths(Some("/data/seg".into()), 7),
            p(&[
                "/data/seg/syncspy-attach-7",
                "/dev/shm/syncspy-attach-7",
                "/tmp/syncspy-attach-7"
            ])
        );
        let shm = p(&["/dev/shm/syncspy-attach-7", "/tmp/syncspy-attach-7"]);
        assert_eq!(control_paths(None, 7), shm);
        assert_eq!(control_paths(Some("".into()), 7), shm);
        assert_eq!(control_paths(Some("/dev/shm".into()), 7), shm);
        assert_eq!(
            control_paths(Some("/tmp".into()), 7),
            p(&["/tmp/syncspy-attach-7", "/dev/shm/syncspy-attach-7"])
        );
    }
}
