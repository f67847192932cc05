//! Creating (writer side) and opening (reader side) a segment file.
//!
//! The creator makes the file under a temporary name, sizes and maps it, writes `Ident`,
//! then renames it into place, so a reader never sees a half-initialised header. Readers
//! map it read-only, copy `Ident` once, validate every size and offset against the file's
//! length, and from then on use only their validated copy for bounds: a foreign, truncated
//! or corrupt file is an `OpenError`, never an out-of-bounds read.

use std::ffi::CString;
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use crate::clock::monotonic_ns;
use crate::layout::*;
use crate::modules::{self, Module, ModuleEntry};
use crate::record::{Record, RecordError};
use crate::ring::{self, Cursor, PollStats, Slot};
use crate::sites::{self, SiteEntry};

mod collectives;
mod control;
mod cost;
mod gpu;
mod job;
mod origin;
mod python;

use self::python::PyViews;

/// File name of the segment of process `pid` started at `start_ticks`.
pub fn segment_name(pid: u32, start_ticks: u64) -> String {
    format!("syncspy-{pid}-{start_ticks}")
}

/// The name a writer takes when `segment_name(pid, start_ticks)` is already there: the
/// segment of a process with the same pid and start time in another PID namespace (two
/// containers' pid 2 started in the same clock tick), or of this process before an `exec`.
pub fn segment_name_alt(pid: u32, start_ticks: u64, n: u32) -> String {
    format!("syncspy-{pid}-{start_ticks}-{n}")
}

/// Inverse of `segment_name` and `segment_name_alt` (the pid and start time);
/// `None` for any other file name (temporaries included).
pub fn parse_segment_name(name: &str) -> Option<(u32, u64)> {
    let rest = name.strip_prefix("syncspy-")?;
    let (pid, rest) = rest.split_once('-')?;
    let start = match rest.split_once('-') {
        Some((start, n)) => {
            n.parse::<u32>().ok()?;
            start
        }
        None => rest,
    };
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// Start time of `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`), or `None`
/// when no such process exists. With the pid, it identifies a process across pid reuse.
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    parse_start_ticks(&stat)
}

/// Whether process `pid` started at `start_ticks` exists and has not exited. A zombie
/// (exited, not yet reaped by its parent) counts as ended: it will never write again.
///
/// Only a missing `/proc/<pid>` means gone: another error (no file descriptors left, say)
/// answers "running", since a process wrongly taken for ended would be forgotten for good.
pub fn process_running(pid: u32, start_ticks: u64) -> bool {
    let stat = match std::fs::read(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
        // ESRCH: the process went away while being read.
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return false,
        Err(_) => return true,
    };
    if parse_start_ticks(&stat) != Some(start_ticks) {
        return false;
    }
    // Field 3 (state) follows the last ')' of the command name.
    let state = stat
        .iter()
        .rposition(|b| *b == b')')
        .and_then(|i| stat[i + 1..].iter().find(|b| !b.is_ascii_whitespace()));
    !matches!(state, Some(b'Z' | b'X' | b'x') | None)
}

/// Field 22 of a `/proc/<pid>/stat` line. The command name (field 2) may contain spaces and
/// parentheses, so fields are counted from the last ')'.
pub fn parse_start_ticks(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|b| *b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    // After ')' come field 3 (state) onwards; field 22 is the 20th of them.
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// Sizes of a new segment.
#[derive(Clone, Debug)]
pub struct SegmentParams {
    /// Ring capacity in records; rounded up to a power of two, at least 16.
    pub ring_capacity: u32,
    /// Call-site table entries; rounded up to a power of two, at least 16.
    pub site_capacity: u32,
    pub module_capacity: u32,
    pub pid: u32,
    pub start_ticks: u64,
    pub session: u64,
    /// NUL-separated argv.
    pub cmdline: Vec<u8>,
    /// File mode, 0o600 by default.
    pub mode: u32,
    /// Entries of the Python code table; 0 (the default) makes a segment without Python
    /// tables. Rounded up to a power of two, at least 16.
    pub python_code_capacity: u32,
    /// The job part of the header (ABI 1.3); the default is no job.
    pub job: crate::job::JobIdent,
    /// The origin part of the header (ABI 1.5): the writer's namespaces (the default: unknown,
    /// all zero). Its flags are the creator's to set.
    pub origin: crate::origin::Origin,
}

impl SegmentParams {
    pub const DEFAULT_RING: u32 = 1 << 16;
    pub const DEFAULT_SITES: u32 = 4096;
    pub const DEFAULT_MODULES: u32 = 1024;
    /// Code-table entries for a process with Python (512 bytes each).
    pub const DEFAULT_PYTHON_CODES: u32 = 2048;

    pub fn new(pid: u32, start_ticks: u64) -> SegmentParams {
        SegmentParams {
            ring_capacity: Self::DEFAULT_RING,
            site_capacity: Self::DEFAULT_SITES,
            module_capacity: Self::DEFAULT_MODULES,
            pid,
            start_ticks,
            session: 0,
            cmdline: Vec::new(),
            mode: 0o600,
            python_code_capacity: 0,
            job: crate::job::JobIdent::default(),
            origin: crate::origin::Origin::default(),
        }
    }
}

impl SegmentParams {
    /// The size of the file a segment of these parameters takes, in bytes.
    pub fn size(&self) -> u64 {
        geometry(self).total_size
    }
}

struct Geometry {
    ring_capacity: u32,
    site_capacity: u32,
    module_capacity: u32,
    ring_offset: u64,
    sites_offset: u64,
    modules_offset: u64,
    python: crate::python::PyIdent,
    total_size: u64,
}

/// The largest ring, site table and module map a writer makes and a reader accepts.
pub const MAX_RING_CAPACITY: u32 = 1 << 26;
pub const MAX_SITE_CAPACITY: u32 = 1 << 20;
pub const MAX_MODULE_CAPACITY: u32 = 1 << 16;

fn geometry(p: &SegmentParams) -> Geometry {
    let ring_capacity = p
        .ring_capacity
        .clamp(16, MAX_RING_CAPACITY)
        .next_power_of_two();
    let site_capacity = p
        .site_capacity
        .clamp(16, MAX_SITE_CAPACITY)
        .next_power_of_two();
    let module_capacity = p.module_capacity.clamp(16, MAX_MODULE_CAPACITY);
    let ring_offset = HEADER_RESERVED as u64;
    let sites_offset = ring_offset + ring_capacity as u64 * size_of::<Slot>() as u64;
    let modules_offset = sites_offset + site_capacity as u64 * size_of::<SiteEntry>() as u64;
    let modules_end = modules_offset + module_capacity as u64 * size_of::<ModuleEntry>() as u64;
    let (python, total_size) =
        crate::python::plan(site_capacity, p.python_code_capacity, modules_end);
    Geometry {
        ring_capacity,
        site_capacity,
        module_capacity,
        ring_offset,
        sites_offset,
        modules_offset,
        python,
        total_size,
    }
}

/// Why a segment could not be created.
#[derive(Debug)]
pub enum CreateError {
    /// The folder does not exist or is not writable, or the file could not be sized/mapped.
    Io {
        path: PathBuf,
        op: &'static str,
        err: std::io::Error,
    },
}

impl std::fmt::Display for CreateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CreateError::Io { path, op, err } => write!(f, "{op} {}: {err}", path.display()),
        }
    }
}

impl std::error::Error for CreateError {}

/// Why a segment could not be opened. Each is reported and the segment skipped.
#[derive(Debug)]
pub enum OpenError {
    Io(std::io::Error),
    /// Not a syncspy segment.
    Foreign,
    /// A syncspy segment of a layout this reader does not understand.
    Version {
        major: u16,
        minor: u16,
    },
    /// Shorter than its header says it is.
    Truncated {
        size: u64,
        needed: u64,
    },
    /// A field out of its valid range.
    Corrupt(&'static str),
    /// Not a regular file: a symbolic link (never followed), a FIFO, a device, a folder or
    /// a socket (never read). Says only which of these it is.
    NotRegular(&'static str),
    /// A regular file owned by `uid`, which is neither the reader's effective uid nor a uid
    /// that the process the segment names (`pid`) runs as: not that process's segment.
    Owner {
        uid: u32,
        pid: u32,
    },
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Io(e) => write!(f, "{e}"),
            OpenError::Foreign => f.write_str("not a syncspy segment (bad magic)"),
            OpenError::Version { major, minor } => write!(
                f,
                "segment ABI {major}.{minor} is not supported by this reader (ABI {ABI_MAJOR}.x); \
                 use the syncspy build that matches the preloaded libsyncspy.so"
            ),
            OpenError::Truncated { size, needed } => {
                write!(f, "segment truncated: {size} bytes, header says {needed}")
            }
            OpenError::Corrupt(what) => write!(f, "corrupt segment: {what}"),
            OpenError::NotRegular(what) => {
                write!(
                    f,
                    "{what}, not a regular file: not opened (a segment never is one)"
                )
            }
            OpenError::Owner { uid, pid } => write!(
                f,
                "owned by uid {uid}, which process {pid} does not run as (or the process \
                 ended): not its segment, not read"
            ),
        }
    }
}

impl std::error::Error for OpenError {}

impl From<std::io::Error> for OpenError {
    fn from(e: std::io::Error) -> Self {
        OpenError::Io(e)
    }
}

/// A shared mapping, unmapped on drop.
pub(crate) struct Mapping {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
    /// A reader's mapping: its entry in `fault`'s list (a fault past the file's end reads
    /// zeros in a process that installed the handler).
    pub(crate) guarded: Option<usize>,
}

// SAFETY: the mapping is plain shared memory owned by this value (unmapped once, on drop),
// not tied to the thread that mapped it; all concurrent access goes through atomics or
// volatile copies.
unsafe impl Send for Mapping {}
// SAFETY: Mapping has no methods of its own; the views over it (`Views`) read and write the
// memory only through atomics or volatile copies, so sharing it between threads is no data
// race.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Some(i) = self.guarded {
            crate::fault::unregister(i);
        }
        // SAFETY: ptr/len came from a successful mmap and are unmapped once.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

fn cpath(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in path"))
}

/// Typed views into a validated mapping.
pub(crate) struct Views {
    pub(crate) map: Mapping,
    ring_offset: usize,
    ring_capacity: usize,
    sites_offset: usize,
    site_capacity: usize,
    modules_offset: usize,
    module_capacity: usize,
    pub(crate) py: PyViews,
}

impl Views {
    pub(crate) fn live(&self) -> &Live {
        // SAFETY: the mapping is at least HEADER_RESERVED bytes (validated) and Live is all
        // atomics, valid for any bit pattern.
        unsafe { &(*(self.map.ptr as *const Header)).live }
    }
    pub(crate) fn slots(&self) -> &[Slot] {
        // SAFETY: offset/capacity validated to lie within the mapping, 64-byte aligned.
        unsafe {
            std::slice::from_raw_parts(
                self.map.ptr.add(self.ring_offset) as *const Slot,
                self.ring_capacity,
            )
        }
    }
    pub(crate) fn sites(&self) -> &[SiteEntry] {
        // SAFETY: as for `slots`.
        unsafe {
            std::slice::from_raw_parts(
                self.map.ptr.add(self.sites_offset) as *const SiteEntry,
                self.site_capacity,
            )
        }
    }
    fn modules(&self) -> &[ModuleEntry] {
        // SAFETY: as for `slots`.
        unsafe {
            std::slice::from_raw_parts(
                self.map.ptr.add(self.modules_offset) as *const ModuleEntry,
                self.module_capacity,
            )
        }
    }
}

/// The writer's handle on its own segment.
pub struct SegmentWriter {
    pub(crate) v: Views,
    path: PathBuf,
    /// The descriptor that holds the liveness lock (`origin` module); -1 when none (the
    /// filesystem refused the lock, or a forked child let go of its parent's).
    lock_fd: std::sync::atomic::AtomicI32,
}

impl Drop for SegmentWriter {
    fn drop(&mut self) {
        self.release_lock();
    }
}

/// Publishes the file at `tmp` under `dest` unless something is there already: `Ok(false)`
/// when `dest` exists. Never replaces a file (another process's live segment could be it).
fn publish_no_replace(tmp: &CString, dest: &CString) -> std::io::Result<bool> {
    // SAFETY: plain syscalls on valid NUL-terminated paths.
    unsafe {
        if libc::renameat2(
            libc::AT_FDCWD,
            tmp.as_ptr(),
            libc::AT_FDCWD,
            dest.as_ptr(),
            libc::RENAME_NOREPLACE,
        ) == 0
        {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EEXIST) => Ok(false),
            // A filesystem without RENAME_NOREPLACE: a hard link fails on an existing name
            // just as atomically.
            Some(libc::EINVAL) | Some(libc::ENOSYS) => {
                if libc::link(tmp.as_ptr(), dest.as_ptr()) == 0 {
                    libc::unlink(tmp.as_ptr());
                    return Ok(true);
                }
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EEXIST) {
                    Ok(false)
                } else {
                    Err(e)
                }
            }
            _ => Err(e),
        }
    }
}

/// Names a writer tries for its segment, first to last.
const NAME_TRIES: u32 = 64;

/// Alternative names tried in order (`-1`, `-2`, ...) before random ones.
const ORDERED_TRIES: u32 = 3;

/// The suffix of the `n`th alternative name: `n` for the first few (the same pid and start
/// time in a few PID namespaces), then a random number, so that another local user who puts
/// files at every predictable name of a process (`-1` to `-64`) cannot keep it from
/// recording.
fn alt_suffix(n: u32) -> u32 {
    if n <= ORDERED_TRIES {
        return n;
    }
    let mut r = 0u32;
    // SAFETY: getrandom writes at most the 4 bytes of `r`.
    let got = unsafe { libc::getrandom(std::ptr::addr_of_mut!(r).cast(), 4, libc::GRND_NONBLOCK) };
    if got != 4 {
        // No randomness now: the clock's low bits are as unpredictable to another process.
        r = (monotonic_ns() as u32) ^ (monotonic_ns() >> 32) as u32;
    }
    // Above the ordered ones, and never 0.
    ORDERED_TRIES + 1 + r % (u32::MAX - ORDERED_TRIES - 1)
}

/// An `Io` error for `op` on `path`, from `errno` as it is now.
fn last_io_error(op: &'static str, path: &Path) -> CreateError {
    CreateError::Io {
        path: path.to_path_buf(),
        op,
        err: std::io::Error::last_os_error(),
    }
}

/// `path` as a C string, or the error that names it.
fn named(path: PathBuf) -> Result<(CString, PathBuf), CreateError> {
    cpath(&path)
        .map(|c| (c, path.clone()))
        .map_err(|err| CreateError::Io {
            path,
            op: "name",
            err,
        })
}

/// The new segment under its temporary name, open for writing, before it is published.
struct TempFile {
    c: CString,
    path: PathBuf,
    fd: libc::c_int,
}

impl TempFile {
    /// Creates the file under a temporary name of this attempt's own: another process with
    /// the same pid and start time (another PID namespace) never removes or renames it.
    fn create(dir: &Path, name: &str, mode: u32) -> Result<TempFile, CreateError> {
        let mut attempt = 0u32;
        loop {
            let (c, path) = named(dir.join(format!(".{name}.{}-{attempt}.tmp", monotonic_ns())))?;
            // SAFETY: open on an owned C string; the result is checked.
            let fd = unsafe {
                libc::open(
                    c.as_ptr(),
                    libc::O_RDWR
                        | libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_CLOEXEC
                        | libc::O_NOFOLLOW,
                    mode as libc::c_uint,
                )
            };
            if fd >= 0 {
                return Ok(TempFile { c, path, fd });
            }
            attempt += 1;
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST)
                || attempt >= NAME_TRIES
            {
                return Err(last_io_error("create", &path));
            }
        }
    }

    /// Gives the file the requested mode and reserves its `size` bytes.
    fn reserve(&self, mode: u32, size: u64) -> Result<(), CreateError> {
        // SAFETY: plain syscalls on the descriptor this value owns; results are checked.
        unsafe {
            // O_CREAT applies the umask; the requested mode is the contract.
            libc::fchmod(self.fd, mode as libc::mode_t);
            // Reserve the space now: on tmpfs `ftruncate` alone reserves nothing, and a write
            // to a page the filesystem cannot supply later kills the writer with SIGBUS.
            let sized = libc::ftruncate(self.fd, size as libc::off_t) == 0;
            let reserved = sized && {
                let rc = libc::posix_fallocate(self.fd, 0, size as libc::off_t);
                // Filesystems without fallocate: fall back to sizing alone.
                rc == 0 || rc == libc::EOPNOTSUPP
            };
            if !reserved {
                if sized {
                    *libc::__errno_location() = libc::ENOSPC;
                }
                return Err(last_io_error("reserve space for", &self.path));
            }
        }
        Ok(())
    }

    /// Takes the liveness lock on an open file of its own and returns that descriptor, or -1
    /// when the lock could not be taken. The lock comes before the file is visible: no reader
    /// ever finds this segment unlocked while its process runs. A mapping keeps its file
    /// open, and a forked child inherits the mapping, so a lock on the mapped file would live
    /// on in every child.
    fn take_liveness_lock(&self) -> libc::c_int {
        // SAFETY: plain syscalls on an owned C string and descriptors this function checks;
        // the stat buffers are plain data, valid zeroed.
        unsafe {
            let lock_fd = libc::open(
                self.c.as_ptr(),
                libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            );
            let same_file = |a: libc::c_int, b: libc::c_int| {
                let mut sa: libc::stat = std::mem::zeroed();
                let mut sb: libc::stat = std::mem::zeroed();
                libc::fstat(a, &mut sa) == 0
                    && libc::fstat(b, &mut sb) == 0
                    && (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
            };
            if lock_fd >= 0
                && same_file(self.fd, lock_fd)
                && crate::origin::take_write_lock(lock_fd)
            {
                return lock_fd;
            }
            if lock_fd >= 0 {
                libc::close(lock_fd);
            }
            -1
        }
    }

    /// Maps the file's `size` bytes shared, for writing.
    fn map(&self, size: u64) -> Result<Mapping, CreateError> {
        // SAFETY: a fresh shared mapping of the descriptor this value owns; checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(last_io_error("map", &self.path));
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len: size as usize,
            guarded: None,
        })
    }

    /// Renames the file to `dir/name`, or when that is taken to the first free alternative
    /// name (the ordered ones, then random ones); returns the name it took.
    fn publish(&self, dir: &Path, name: &str, p: &SegmentParams) -> Result<PathBuf, CreateError> {
        let mut path = dir.join(name);
        let mut n = 0;
        loop {
            let (cfinal, _) = named(path.clone())?;
            match publish_no_replace(&self.c, &cfinal) {
                Ok(true) => return Ok(path),
                Ok(false) if n < NAME_TRIES => {
                    n += 1;
                    path = dir.join(segment_name_alt(p.pid, p.start_ticks, alt_suffix(n)));
                }
                Ok(false) => {
                    // SAFETY: errno is this thread's; set so the error says why.
                    unsafe { *libc::__errno_location() = libc::EEXIST };
                    return Err(last_io_error("publish", &path));
                }
                Err(err) => {
                    return Err(CreateError::Io {
                        path,
                        op: "publish",
                        err,
                    })
                }
            }
        }
    }

    /// Closes the file and removes its temporary name (a failed creation).
    fn discard(self) {
        // SAFETY: the descriptor and C string this value owns, closed and unlinked once.
        unsafe {
            libc::close(self.fd);
            libc::unlink(self.c.as_ptr());
        }
    }

    /// Closes the file, published under its final name (the mapping stays).
    fn close(self) {
        // SAFETY: the descriptor this value owns, closed once.
        unsafe {
            libc::close(self.fd);
        }
    }
}

/// Writes a new segment's header into `map`: its identity and geometry, the command line,
/// the Python, job and origin sections, then the state "running" (with release ordering,
/// last).
fn write_header(map: &Mapping, g: &Geometry, p: &SegmentParams, locked: bool) {
    let hdr = map.ptr as *mut Header;
    let mut cmdline = [0u8; CMDLINE_MAX];
    let n = p.cmdline.len().min(CMDLINE_MAX);
    cmdline[..n].copy_from_slice(&p.cmdline[..n]);
    let now_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut origin = p.origin;
    origin.flags = if locked {
        crate::origin::FLAG_LIVENESS_LOCK
    } else {
        0
    };
    // SAFETY: `map` is a fresh writable mapping of `g.total_size` bytes, at least
    // HEADER_RESERVED, which no reader sees before it is published.
    unsafe {
        (*hdr).ident = Ident {
            magic: MAGIC,
            abi_major: ABI_MAJOR,
            abi_minor: ABI_MINOR,
            header_size: size_of::<Header>() as u32,
            record_size: size_of::<Slot>() as u32,
            ring_capacity: g.ring_capacity,
            ring_offset: g.ring_offset,
            site_capacity: g.site_capacity,
            site_entry_size: size_of::<SiteEntry>() as u32,
            sites_offset: g.sites_offset,
            module_capacity: g.module_capacity,
            module_entry_size: size_of::<ModuleEntry>() as u32,
            modules_offset: g.modules_offset,
            total_size: g.total_size,
            pid: p.pid,
            clock_id: CLOCK_MONOTONIC,
            start_ticks: p.start_ticks,
            session: p.session,
            created_ns: monotonic_ns(),
            created_unix_ns: now_unix,
            site_max_frames: sites::MAX_FRAMES as u32,
            cmdline_len: n as u32,
            cmdline,
        };
        std::ptr::addr_of_mut!((*hdr).python.ident).write(g.python);
        std::ptr::addr_of_mut!((*hdr).job).write(p.job);
        std::ptr::addr_of_mut!((*hdr).origin).write(origin);
        (*hdr).live.state.store(STATE_RUNNING, Ordering::Release);
    }
}

impl Views {
    /// The writer's views of its new mapping, laid out as `g` says.
    fn of_new(map: Mapping, g: &Geometry) -> Views {
        Views {
            map,
            ring_offset: g.ring_offset as usize,
            ring_capacity: g.ring_capacity as usize,
            sites_offset: g.sites_offset as usize,
            site_capacity: g.site_capacity as usize,
            modules_offset: g.modules_offset as usize,
            module_capacity: g.module_capacity as usize,
            py: PyViews {
                header: true,
                sites_offset: g.python.sites_offset as usize,
                site_capacity: g.python.site_capacity as usize,
                codes_offset: g.python.codes_offset as usize,
                code_capacity: g.python.code_capacity as usize,
            },
        }
    }
}

impl SegmentWriter {
    /// Creates `dir/syncspy-<pid>-<start>` (or, when that name is taken, the first free
    /// `syncspy-<pid>-<start>-<n>`: see [`segment_name_alt`]). An existing file is never
    /// replaced. The writer holds the liveness lock (`origin` module) until it is dropped,
    /// or until [`SegmentWriter::release_lock`].
    ///
    /// The file is made under a temporary name, sized, locked, mapped and its header written
    /// before it is published, so a reader never sees a half-made segment; every failure
    /// closes what was opened and removes the file.
    pub fn create(dir: &Path, p: &SegmentParams) -> Result<SegmentWriter, CreateError> {
        let g = geometry(p);
        let name = segment_name(p.pid, p.start_ticks);
        let tmp = TempFile::create(dir, &name, p.mode)?;
        let mut lock_fd = -1;
        let made = tmp.reserve(p.mode, g.total_size).and_then(|()| {
            lock_fd = tmp.take_liveness_lock();
            let map = tmp.map(g.total_size)?;
            write_header(&map, &g, p, lock_fd >= 0);
            let path = tmp.publish(dir, &name, p)?;
            Ok((map, path))
        });
        match made {
            Ok((map, path)) => {
                tmp.close();
                Ok(SegmentWriter {
                    v: Views::of_new(map, &g),
                    path,
                    lock_fd: std::sync::atomic::AtomicI32::new(lock_fd),
                })
            }
            Err(e) => {
                if lock_fd >= 0 {
                    // SAFETY: the lock descriptor opened above, closed once.
                    unsafe { libc::close(lock_fd) };
                }
                tmp.discard();
                Err(e)
            }
        }
    }

    /// Lets go of the liveness lock: readers then take the process for ended. A forked child
    /// calls this at once (its copy of the descriptor would otherwise keep its parent's lock
    /// after the parent ends); only `close`, so it is safe in an `atfork` child handler.
    pub fn release_lock(&self) {
        let fd = self.lock_fd.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: the descriptor was opened by `create`, is owned by this writer and
            // closed once (the swap hands it to one caller).
            unsafe {
                libc::close(fd);
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn live(&self) -> &Live {
        self.v.live()
    }

    /// Writes one record to the ring and adds it to the exact totals.
    #[inline]
    pub fn record(&self, rec: &Record) {
        self.count(rec);
        ring::push(self.v.live(), self.v.slots(), rec);
    }

    /// Adds one event to the totals of its kind and API without writing its record to the
    /// ring (a library shedding records to keep within its budget: `cost`).
    pub fn count(&self, rec: &Record) {
        let live = self.v.live();
        live.kinds[rec.kind as usize].add(rec.duration_ns, rec.bytes);
        live.apis[rec.api as usize].add(rec.duration_ns, rec.bytes);
    }

    /// Interns a stack; see `sites::intern`.
    pub fn intern_site(&self, frames: &[u64]) -> Option<u32> {
        sites::intern(self.v.live(), self.v.sites(), frames)
    }

    /// Appends a module to the map; `false` when it is full.
    pub fn add_module(
        &self,
        path: &[u8],
        bias: u64,
        start: u64,
        end: u64,
        build_id: &[u8],
    ) -> bool {
        // SAFETY: the writer's mapping is writable, and the module region holds
        // `module_capacity` entries (laid out at creation).
        unsafe {
            let table = self.v.map.ptr.add(self.v.modules_offset) as *mut ModuleEntry;
            modules::append(
                self.v.live(),
                table,
                self.v.module_capacity,
                path,
                bias,
                start,
                end,
                build_id,
            )
        }
    }
    /// Modules published so far (the writer's own view, for deduplication).
    pub fn modules(&self) -> Vec<Module> {
        modules::read_all(self.v.live(), self.v.modules())
    }

    /// Marks the process as exited with `status`.
    pub fn mark_exited(&self, status: i32) {
        let live = self.v.live();
        live.ended_ns.store(monotonic_ns(), Ordering::Relaxed);
        live.state.store(
            STATE_EXITED | (status as u32 as u64) << 32,
            Ordering::Release,
        );
    }

    /// Forgets the mapping without unmapping it (the fork child uses this: the parent's
    /// segment stays the parent's).
    pub fn leak(self) {
        std::mem::forget(self);
    }
}

/// What a reader knows of the writing process's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcState {
    Running,
    Exited(i32),
    /// The state word holds a value this reader does not know.
    Unknown(u64),
}

/// What a frozen reader's `live` returns: every counter zero.
// SAFETY: `Live` is all atomic integers (and arrays of structs of them), for which all-zero
// bytes are a valid value.
static FROZEN_LIVE: Live = unsafe { std::mem::zeroed() };

/// A reader's handle on a segment; any number may follow one segment.
pub struct SegmentReader {
    pub(crate) v: Views,
    ident: Ident,
    path: PathBuf,
    /// Device and inode of the file when it was opened (`intact`).
    file_id: (u64, u64),
    /// The file, kept open: its lock says whether the writer runs (`writer_alive`).
    file: std::fs::File,
    frozen: bool,
    /// How the file was shown to be its process's (`open`).
    ownership: Ownership,
}

/// How a reader knows that a segment file is the segment of the process its header names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// The file is the reader's own (its effective uid owns it).
    Reader,
    /// The process named in the header runs, with the start time the header says, as the
    /// user who owns the file.
    Process,
    /// The process named in the header no longer runs (or cannot be found from here): only
    /// the file's owner vouches for it. Its numbers are that user's; no other user's
    /// process can be claimed, since a running one is checked and an ended one is nobody's
    /// any more.
    FileOwner,
}

impl SegmentReader {
    /// Maps and validates a segment.
    ///
    /// Anyone may put files in a segment folder, so only a regular file is read: the name is
    /// looked at without following a symbolic link, then opened with `O_NOFOLLOW |
    /// O_NONBLOCK` (a FIFO swapped in between cannot block the open) and checked again on
    /// the open file. A link, FIFO, device, folder or socket is `OpenError::NotRegular`,
    /// which says nothing about a link's target. The file must be owned by this reader's
    /// effective uid, or by a uid the process named in its header runs as, or that process
    /// must have ended ([`Ownership`]); a running process of another user is refused
    /// (`OpenError::Owner`): nobody can pass their file off as another user's process.
    pub fn open(path: &Path) -> Result<SegmentReader, OpenError> {
        let c = cpath(path)?;
        // lstat first: a device is never opened (opening some has side effects).
        if let Some(what) = not_regular(std::fs::symlink_metadata(path)?.file_type()) {
            return Err(OpenError::NotRegular(what));
        }
        // SAFETY: plain syscalls; every result is checked; the mapping is read-only. The fd is
        // owned by `file` at once, so every path closes it; the mapping outlives it.
        let (meta, map, file) = unsafe {
            let fd = libc::open(
                c.as_ptr(),
                libc::O_RDONLY
                    | libc::O_CLOEXEC
                    | libc::O_NOFOLLOW
                    | libc::O_NONBLOCK
                    | libc::O_NOCTTY,
            );
            if fd < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::ELOOP) {
                    // Made a link since the lstat above.
                    return Err(OpenError::NotRegular("a symbolic link"));
                }
                return Err(e.into());
            }
            let file = std::fs::File::from_raw_fd(fd);
            let meta = file.metadata()?;
            if let Some(what) = not_regular(meta.file_type()) {
                return Err(OpenError::NotRegular(what));
            }
            let size = meta.len();
            if size < HEADER_RESERVED as u64 {
                if size >= 8 {
                    // Short but perhaps ours: say which.
                    return Err(OpenError::Truncated {
                        size,
                        needed: HEADER_RESERVED as u64,
                    });
                }
                return Err(OpenError::Foreign);
            }
            let ptr = libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            );
            if ptr == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error().into());
            }
            let map = Mapping {
                ptr: ptr.cast(),
                len: size as usize,
                guarded: crate::fault::register(ptr as usize, size as usize),
            };
            (meta, map, file)
        };
        // SAFETY: the mapping holds at least HEADER_RESERVED >= size_of::<Ident>() bytes;
        // `Ident` is plain data valid for any bit pattern, copied once.
        let ident: Ident = unsafe { std::ptr::read_volatile(map.ptr as *const Ident) };
        // The writer's namespaces (ABI 1.5): a process in another PID namespace is found
        // here by them, not by its pid there.
        let origin_end = std::mem::offset_of!(Header, origin) + size_of::<crate::origin::Origin>();
        let origin = (ident.abi_minor >= 5
            && ident.header_size as usize >= origin_end
            && map.len >= origin_end)
            .then(|| {
                // SAFETY: `origin_end <= map.len` was just checked; `Origin` is plain data
                // valid for any bit pattern, copied once.
                unsafe {
                    std::ptr::read_volatile(map.ptr.add(std::mem::offset_of!(Header, origin))
                        as *const crate::origin::Origin)
                }
            });
        let ownership = if ident.magic == MAGIC {
            ownership(meta.uid(), ident.pid, ident.start_ticks, origin.as_ref()).ok_or(
                OpenError::Owner {
                    uid: meta.uid(),
                    pid: ident.pid,
                },
            )?
        } else {
            // Not a segment: `validate` says so.
            Ownership::FileOwner
        };
        // The Python part of the header exists from ABI 1.1 on, when the header covers it.
        let py_end = std::mem::offset_of!(Header, python) + size_of::<crate::python::PyHeader>();
        let py = (ident.abi_minor >= 1 && ident.header_size as usize >= py_end).then(|| {
            // SAFETY: `py_end <= header_size`, and `open` checked that the mapping holds
            // HEADER_RESERVED bytes (`validate` bounds `header_size` by it before use below);
            // `PyIdent` is plain data, copied once.
            unsafe {
                std::ptr::read_volatile(map.ptr.add(std::mem::offset_of!(Header, python))
                    as *const crate::python::PyIdent)
            }
        });
        let v = validate(&ident, py.as_ref(), map)?;
        Ok(SegmentReader {
            v,
            ident,
            path: path.to_path_buf(),
            file_id: (meta.dev(), meta.ino()),
            file,
            ownership,
            frozen: false,
        })
    }

    /// Whether the file still covers the whole mapping. Reading a mapped page past the end of
    /// a file that someone truncated faults (SIGBUS), so followers check this before each
    /// poll and `freeze` a reader that is not intact; `site` and `modules` check it
    /// themselves. The file is looked up by its path: removed or replaced under that name, it
    /// can no longer be truncated through it and counts as intact. (A truncation between the
    /// check and the reads that follow it is not caught.)
    pub fn intact(&self) -> bool {
        if self.frozen {
            return true;
        }
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.file_id => m.len() >= self.v.map.len as u64,
            _ => true,
        }
    }

    /// The uid that owns the open file (the user whose process created it); `None` when it
    /// cannot be read.
    pub fn owner_uid(&self) -> Option<u32> {
        self.file.metadata().ok().map(|m| m.uid())
    }

    /// The size of this segment's file under its path, in bytes (0 when another file, or
    /// none, is there now).
    pub fn file_size(&self) -> u64 {
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.file_id => m.len(),
            _ => 0,
        }
    }

    /// Stops reading the mapping: afterwards `live` (and `state`, `head`) read zeros, `poll`
    /// delivers nothing and `site` and `modules` find nothing. For a segment found truncated;
    /// keep what was read before.
    pub fn freeze(&mut self) {
        self.frozen = true;
    }

    /// How the file was shown to be its process's when it was opened.
    pub fn ownership(&self) -> Ownership {
        self.ownership
    }

    /// Whether `freeze` was called.
    pub fn frozen(&self) -> bool {
        self.frozen
    }

    /// Whether the header has a part appended at ABI 1.`minor` that ends at byte `end`: the
    /// writer's minor and validated `header_size` (at most HEADER_RESERVED, which the mapping
    /// holds) reach it, and the reader is not frozen (the file may end before the header does).
    pub(crate) fn has_part(&self, minor: u16, end: usize) -> bool {
        let id = self.ident();
        !self.frozen() && id.abi_minor >= minor && id.header_size as usize >= end
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Device and inode of the file when it was opened.
    pub fn file_id(&self) -> (u64, u64) {
        self.file_id
    }

    /// The validated copy of the header's identity part.
    pub fn ident(&self) -> &Ident {
        &self.ident
    }

    pub fn state(&self) -> ProcState {
        let s = self.live().state.load(Ordering::Acquire);
        match s & 0xffff_ffff {
            STATE_RUNNING => ProcState::Running,
            STATE_EXITED => ProcState::Exited((s >> 32) as u32 as i32),
            _ => ProcState::Unknown(s),
        }
    }

    /// The live counters (exact totals, drops, overhead); all zero once frozen.
    pub fn live(&self) -> &Live {
        if self.frozen {
            return &FROZEN_LIVE;
        }
        self.v.live()
    }

    /// Sequence number the next record will get.
    pub fn head(&self) -> u64 {
        self.live().write_seq.load(Ordering::Acquire)
    }

    /// See `ring::poll`.
    pub fn poll(
        &self,
        cursor: &mut Cursor,
        budget: usize,
        patience: u32,
        sink: impl FnMut(Result<Record, RecordError>),
    ) -> PollStats {
        if self.frozen {
            return PollStats::default();
        }
        ring::poll(
            self.v.live(),
            self.v.slots(),
            cursor,
            budget,
            patience,
            sink,
        )
    }

    /// The stack of call site `id`, innermost frame first.
    pub fn site(&self, id: u32) -> Option<Vec<u64>> {
        if self.frozen || !self.intact() {
            return None;
        }
        sites::read(self.v.sites(), id)
    }

    pub fn modules(&self) -> Vec<Module> {
        if self.frozen || !self.intact() {
            return Vec::new();
        }
        modules::read_all(self.v.live(), self.v.modules())
    }

    /// The first `max` entries of the module map, validated as `modules` does: a reader
    /// bounds what one segment costs it (a map may hold 65,536 entries of 512 bytes).
    pub fn modules_upto(&self, max: usize) -> Vec<Module> {
        if self.frozen || !self.intact() {
            return Vec::new();
        }
        let table = self.v.modules();
        modules::read_all(self.v.live(), &table[..table.len().min(max)])
    }

    /// Whether the writing process still runs, as far as this reader can tell from any PID
    /// namespace: the writer's liveness lock is held (`origin` module). For a segment
    /// without the lock (older than ABI 1.5, or on a filesystem without OFD locks) the
    /// pid and start time decide, which is only right in the writer's own PID namespace.
    pub fn writer_alive(&self) -> bool {
        use std::os::fd::AsFd;
        if self.origin().is_some_and(|o| o.lock_held_while_alive()) {
            match crate::origin::lock_state(self.file.as_fd()) {
                crate::origin::LockState::Held => return true,
                crate::origin::LockState::Free => return false,
                crate::origin::LockState::Unknown => {}
            }
        }
        process_running(self.ident.pid, self.ident.start_ticks)
    }
}

/// What a file that is not a regular file is, in words; `None` for a regular file.
fn not_regular(t: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if t.is_file() {
        None
    } else if t.is_symlink() {
        Some("a symbolic link")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_char_device() || t.is_block_device() {
        Some("a device")
    } else if t.is_dir() {
        Some("a folder")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("a special file")
    }
}

/// How a file owned by `uid` is the segment of process `pid` (started at `start_ticks`, in
/// the namespaces `origin` names), or `None` when it cannot be: that process runs, as a user
/// other than `uid` (someone passing their file off as another user's process). The file is
/// the reader's own; or the process runs as `uid` (one of its real, effective, saved and
/// filesystem uids); or it no longer runs (a short job ended before the reader looked), and
/// the file's owner alone vouches for it. A process in another PID namespace (a pod's pid 1)
/// is found by its namespace ([`host_pid_of`]), not by its pid.
fn ownership(
    uid: u32,
    pid: u32,
    start_ticks: u64,
    origin: Option<&crate::origin::Origin>,
) -> Option<Ownership> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if uid == unsafe { libc::geteuid() } {
        return Some(Ownership::Reader);
    }
    let here = match origin.filter(|o| o.in_another_pid_namespace()) {
        Some(o) => host_pid_of(o.pid_ns, pid, start_ticks),
        None => Some(pid).filter(|p| process_start_ticks(*p) == Some(start_ticks)),
    };
    match here.map(|p| (p, process_uids(p))) {
        Some((_, Some(uids))) if uids.contains(&uid) => Some(Ownership::Process),
        // Running, as someone else.
        Some((_, Some(_))) => None,
        // Gone (or gone between the two reads).
        _ => Some(Ownership::FileOwner),
    }
}

/// The pid in this reader's PID namespace of the process that is `ns_pid` in the PID
/// namespace with inode `pid_ns` and started at `start_ticks` (the last `NSpid:` entry of
/// `/proc/<pid>/status` is its pid in its own namespace); `None` when it is not to be found.
pub fn host_pid_of(pid_ns: u64, ns_pid: u32, start_ticks: u64) -> Option<u32> {
    use std::os::unix::fs::MetadataExt as _;
    for entry in std::fs::read_dir("/proc").ok()? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::fs::metadata(format!("/proc/{pid}/ns/pid")).is_ok_and(|m| m.ino() == pid_ns) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let last = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|l| l.split_ascii_whitespace().last())
            .and_then(|p| p.parse::<u32>().ok());
        if last == Some(ns_pid) && process_start_ticks(pid) == Some(start_ticks) {
            return Some(pid);
        }
    }
    None
}

/// The real, effective, saved and filesystem uids of `pid` (the `Uid:` line of
/// `/proc/<pid>/status`), or `None` when there is no such process.
pub fn process_uids(pid: u32) -> Option<[u32; 4]> {
    if pid == 0 {
        return None;
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let mut out = [0u32; 4];
    let mut it = line.split_ascii_whitespace();
    for u in &mut out {
        *u = it.next()?.parse().ok()?;
    }
    Some(out)
}

fn validate(
    id: &Ident,
    py: Option<&crate::python::PyIdent>,
    map: Mapping,
) -> Result<Views, OpenError> {
    if id.magic != MAGIC {
        return Err(OpenError::Foreign);
    }
    if id.abi_major != ABI_MAJOR {
        return Err(OpenError::Version {
            major: id.abi_major,
            minor: id.abi_minor,
        });
    }
    let size = map.len as u64;
    if (id.header_size as usize) < HEADER_SIZE_1_0 || id.header_size as usize > HEADER_RESERVED {
        return Err(OpenError::Corrupt("header_size"));
    }
    if id.record_size as usize != size_of::<Slot>() {
        return Err(OpenError::Corrupt("record_size"));
    }
    if id.site_entry_size as usize != size_of::<SiteEntry>() {
        return Err(OpenError::Corrupt("site_entry_size"));
    }
    if id.module_entry_size as usize != size_of::<ModuleEntry>() {
        return Err(OpenError::Corrupt("module_entry_size"));
    }
    if id.clock_id != CLOCK_MONOTONIC {
        return Err(OpenError::Corrupt("clock_id"));
    }
    if id.cmdline_len as usize > CMDLINE_MAX {
        return Err(OpenError::Corrupt("cmdline_len"));
    }
    let pow2 = |n: u32| n != 0 && n.is_power_of_two();
    // Above the writer's limits is corrupt too: a reader's work per segment stays bounded.
    if !pow2(id.ring_capacity) || id.ring_capacity > MAX_RING_CAPACITY {
        return Err(OpenError::Corrupt("ring_capacity"));
    }
    if !pow2(id.site_capacity) || id.site_capacity > MAX_SITE_CAPACITY {
        return Err(OpenError::Corrupt("site_capacity"));
    }
    if id.module_capacity == 0 || id.module_capacity > MAX_MODULE_CAPACITY {
        return Err(OpenError::Corrupt("module_capacity"));
    }
    // Each region must be aligned, lie after the header, and not overlap the next.
    let region = |off: u64, n: u32, each: usize, what| -> Result<u64, OpenError> {
        if !off.is_multiple_of(64) || off < HEADER_RESERVED as u64 {
            return Err(OpenError::Corrupt(what));
        }
        off.checked_add(n as u64 * each as u64)
            .ok_or(OpenError::Corrupt(what))
    };
    let ring_end = region(
        id.ring_offset,
        id.ring_capacity,
        size_of::<Slot>(),
        "ring_offset",
    )?;
    let sites_end = region(
        id.sites_offset,
        id.site_capacity,
        size_of::<SiteEntry>(),
        "sites_offset",
    )?;
    let mods_end = region(
        id.modules_offset,
        id.module_capacity,
        size_of::<ModuleEntry>(),
        "modules_offset",
    )?;
    if id.sites_offset < ring_end || id.modules_offset < sites_end || id.total_size < mods_end {
        return Err(OpenError::Corrupt("overlapping regions"));
    }
    let py = python::validate(id, py, mods_end)?;
    if size < id.total_size {
        return Err(OpenError::Truncated {
            size,
            needed: id.total_size,
        });
    }
    Ok(Views {
        map,
        ring_offset: id.ring_offset as usize,
        ring_capacity: id.ring_capacity as usize,
        sites_offset: id.sites_offset as usize,
        site_capacity: id.site_capacity as usize,
        modules_offset: id.modules_offset as usize,
        module_capacity: id.module_capacity as usize,
        py,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::{Api, Direction, Kind};

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("syncspy-abi-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn rec(n: u64) -> Record {
        Record {
            kind: Kind::MemcpyPageable,
            api: Api::CudaMemcpyAsync,
            direction: Direction::HostToDevice,
            flags: 0,
            device: 0,
            start_ns: n,
            duration_ns: 100 + n,
            bytes: 4096,
            stream: 7,
            tid: 1,
            site: 0,
            result: 0,
            polls: 0,
        }
    }

    #[test]
    fn write_then_read_everything_back() {
        let dir = tmpdir("rt");
        let mut p = SegmentParams::new(4242, 777);
        p.ring_capacity = 16;
        p.cmdline = b"python\0train.py\0".to_vec();
        p.session = 99;
        let w = SegmentWriter::create(&dir, &p).unwrap();
        assert_eq!(w.path().file_name().unwrap(), "syncspy-4242-777");
        let site = w.intern_site(&[0x1000, 0x2000]).unwrap();
        assert!(w.add_module(b"/lib/libfoo.so", 0x7000, 0x7000, 0x9000, &[1, 2, 3]));
        for i in 0..20 {
            w.record(&Record { site, ..rec(i) });
        }
        w.mark_exited(3);

        let r = SegmentReader::open(w.path()).unwrap();
        assert_eq!(r.ident().pid, 4242);
        assert_eq!(r.ident().session, 99);
        assert_eq!(r.ident().argv(), vec!["python", "train.py"]);
        assert_eq!(r.state(), ProcState::Exited(3));
        let t = r.live().kinds[Kind::MemcpyPageable as usize].snapshot();
        assert_eq!((t.count, t.bytes, t.max_ns), (20, 20 * 4096, 119));
        assert_eq!(t.total_ns, (0..20).map(|i| 100 + i).sum::<u64>());
        let mut c = Cursor::from_start();
        let mut got = Vec::new();
        let st = r.poll(&mut c, usize::MAX, 0, |x| got.push(x.unwrap()));
        assert_eq!((st.delivered, st.lost), (16, 4));
        assert_eq!(got[0].site, site);
        assert_eq!(r.site(site), Some(vec![0x1000, 0x2000]));
        assert_eq!(r.modules()[0].path, "/lib/libfoo.so");
        assert_eq!(r.modules()[0].build_id, vec![1, 2, 3]);
        let mode = std::fs::metadata(w.path()).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o600
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn intact_follows_the_file_under_the_path_and_freeze_stops_every_read() {
        let dir = tmpdir("intact");
        let mut p = SegmentParams::new(4343, 778);
        p.ring_capacity = 16;
        let w = SegmentWriter::create(&dir, &p).unwrap();
        let site = w.intern_site(&[0x1000]).unwrap();
        w.record(&rec(1));
        let path = w.path().to_path_buf();
        let mut r = SegmentReader::open(&path).unwrap();
        assert!(r.intact());
        // Removed: nothing can truncate it through the path any more.
        std::fs::rename(&path, dir.join("moved")).unwrap();
        assert!(r.intact());
        // Another file under the name is not this segment.
        std::fs::write(&path, b"short").unwrap();
        assert!(r.intact());
        std::fs::remove_file(&path).unwrap();
        std::fs::rename(dir.join("moved"), &path).unwrap();
        assert!(r.intact());
        assert_eq!(r.site(site), Some(vec![0x1000]));
        // Truncated in place: not intact, and the rarely read tables are not read.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(4096)
            .unwrap();
        w.leak(); // its mapping now ends early too
        assert!(!r.intact());
        assert_eq!(r.file_size(), 4096);
        assert_eq!(r.site(site), None);
        assert!(r.modules().is_empty());
        r.freeze();
        assert!(r.frozen() && r.intact());
        let mut c = Cursor::from_start();
        let st = r.poll(&mut c, usize::MAX, 0, |_| {
            panic!("a frozen reader delivered")
        });
        assert_eq!(st, PollStats::default());
        assert_eq!(r.head(), 0);
        assert_eq!(r.state(), ProcState::Unknown(0));
        assert_eq!(
            r.live().kinds[Kind::MemcpyPageable as usize]
                .snapshot()
                .count,
            0
        );
        // The header's parts past the new end are not read either (they faulted: SIGBUS).
        assert!(r.origin().is_none());
        assert!(r.job().is_none());
        assert!(r.gpu_status().is_none());
        assert!(r.control_status().is_none());
        let _ = r.writer_alive();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn foreign_truncated_and_corrupt_files_are_errors() {
        let dir = tmpdir("bad");
        let f = dir.join("foreign");
        std::fs::write(&f, vec![7u8; 20000]).unwrap();
        assert!(matches!(SegmentReader::open(&f), Err(OpenError::Foreign)));
        std::fs::write(&f, b"").unwrap();
        assert!(matches!(SegmentReader::open(&f), Err(OpenError::Foreign)));

        let p = SegmentParams {
            ring_capacity: 16,
            ..SegmentParams::new(1, 2)
        };
        let w = SegmentWriter::create(&dir, &p).unwrap();
        let good = std::fs::read(w.path()).unwrap();
        let tr = dir.join("truncated");
        std::fs::write(&tr, &good[..good.len() - 100]).unwrap();
        assert!(matches!(
            SegmentReader::open(&tr),
            Err(OpenError::Truncated { .. })
        ));
        std::fs::write(&tr, &good[..9000]).unwrap();
        assert!(matches!(
            SegmentReader::open(&tr),
            Err(OpenError::Truncated { .. })
        ));

        let mut v = good.clone();
        v[8] = 9; // abi_major
        std::fs::write(&tr, &v).unwrap();
        assert!(matches!(
            SegmentReader::open(&tr),
            Err(OpenError::Version { major: 9, .. })
        ));

        let off = std::mem::offset_of!(Ident, ring_capacity);
        let mut v = good.clone();
        v[off..off + 4].copy_from_slice(&3u32.to_ne_bytes());
        std::fs::write(&tr, &v).unwrap();
        assert!(matches!(
            SegmentReader::open(&tr),
            Err(OpenError::Corrupt("ring_capacity"))
        ));

        let mut v = good.clone();
        v[off..off + 4].copy_from_slice(&(1u32 << 30).to_ne_bytes());
        std::fs::write(&tr, &v).unwrap();
        assert!(matches!(
            SegmentReader::open(&tr),
            Err(OpenError::Corrupt(_))
        ));

        let off = std::mem::offset_of!(Ident, sites_offset);
        let mut v = good;
        v[off..off + 8].copy_from_slice(&u64::MAX.to_ne_bytes());
        std::fs::write(&tr, &v).unwrap();
        assert!(SegmentReader::open(&tr).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Runs `f` on another thread and fails the test if it has not returned within 10 s
    /// (a reader that blocks would otherwise hang the test run).
    fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the reader blocked")
    }

    #[test]
    fn fifos_links_devices_and_folders_are_refused_without_blocking_or_following() {
        let dir = tmpdir("special");
        let p = SegmentParams {
            ring_capacity: 16,
            ..SegmentParams::new(std::process::id(), 3)
        };
        let w = SegmentWriter::create(&dir, &p).unwrap();
        // A FIFO nobody writes to: a plain open(O_RDONLY) would wait for a writer forever.
        let fifo = dir.join("syncspy-1-1");
        let c = cpath(&fifo).unwrap();
        // SAFETY: mkfifo on an owned C string; the result is checked.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
        let e = within_10s(move || SegmentReader::open(&fifo).err());
        assert!(matches!(e, Some(OpenError::NotRegular("a FIFO"))), "{e:?}");

        // Links are not followed, whether to a valid segment, a secret or a FIFO, and the
        // message says nothing about the target.
        let secret = dir.join("secret");
        std::fs::write(&secret, vec![1u8; 12345]).unwrap();
        for target in [
            w.path(),
            secret.as_path(),
            dir.join("syncspy-1-1").as_path(),
        ] {
            let link = dir.join("syncspy-2-2");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(target, &link).unwrap();
            let e = within_10s(move || SegmentReader::open(&link).err());
            assert!(
                matches!(e, Some(OpenError::NotRegular("a symbolic link"))),
                "{e:?}"
            );
            let text = e.unwrap().to_string();
            assert!(
                !text.contains("12345") && !text.contains("secret"),
                "{text}"
            );
        }
        let e = SegmentReader::open(Path::new("/dev/null")).err();
        assert!(
            matches!(e, Some(OpenError::NotRegular("a device"))),
            "{e:?}"
        );
        let e = SegmentReader::open(&dir).err();
        assert!(
            matches!(e, Some(OpenError::NotRegular("a folder"))),
            "{e:?}"
        );
        // The real file still opens.
        assert!(SegmentReader::open(w.path()).is_ok());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_segment_owned_by_a_user_its_process_does_not_run_as_is_refused() {
        let dir = tmpdir("owner");
        let me = std::process::id();
        let my_uids = process_uids(me).unwrap();
        // SAFETY: geteuid cannot fail.
        assert!(my_uids.contains(&unsafe { libc::geteuid() }));
        assert_eq!(process_uids(0), None);
        let p = SegmentParams {
            ring_capacity: 16,
            ..SegmentParams::new(me, process_start_ticks(me).unwrap())
        };
        let w = SegmentWriter::create(&dir, &p).unwrap();
        assert!(SegmentReader::open(w.path()).is_ok());
        // Someone else's file claiming to be this process (only root can make one here).
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(w.path(), Some(54321), None).unwrap();
            let e = SegmentReader::open(w.path()).err();
            assert!(
                matches!(e, Some(OpenError::Owner { uid: 54321, pid }) if pid == me),
                "{e:?}"
            );
        } else {
            eprintln!("not root: cannot give a file away; only the accepting half ran");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_segment_of_an_ended_process_is_its_file_owners() {
        let dir = tmpdir("owner-ended");
        // A child that ran and ended: its pid names no process (or another one, started
        // later), so only the file's owner vouches for the segment.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start = process_start_ticks(pid).unwrap_or(1);
        child.wait().unwrap();
        let p = SegmentParams {
            ring_capacity: 16,
            start_ticks: start,
            ..SegmentParams::new(pid, 4)
        };
        let w = SegmentWriter::create(&dir, &p).unwrap();
        assert_eq!(
            SegmentReader::open(w.path()).unwrap().ownership(),
            Ownership::Reader
        );
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(w.path(), Some(54321), None).unwrap();
            let r = SegmentReader::open(w.path()).unwrap();
            assert_eq!(r.ownership(), Ownership::FileOwner);
            // This process, still running, claimed by that user: refused.
            let id = std::process::id();
            let me = SegmentParams {
                ring_capacity: 16,
                ..SegmentParams::new(id, process_start_ticks(id).unwrap())
            };
            let w2 = SegmentWriter::create(&dir, &me).unwrap();
            std::os::unix::fs::chown(w2.path(), Some(54321), None).unwrap();
            assert!(matches!(
                SegmentReader::open(w2.path()).err(),
                Some(OpenError::Owner { uid: 54321, .. })
            ));
        } else {
            eprintln!("not root: cannot give a file away; only the reader's own half ran");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A small valid segment with something in every table (header, ring, sites, modules,
    /// Python sites and codes), as bytes, and where each of its regions lies.
    struct Base {
        bytes: Vec<u8>,
        regions: [(usize, usize); 6],
    }

    fn base() -> &'static Base {
        static BASE: std::sync::OnceLock<Base> = std::sync::OnceLock::new();
        BASE.get_or_init(|| {
            let dir = tmpdir("fuzz-base");
            let p = SegmentParams {
                ring_capacity: 16,
                site_capacity: 16,
                module_capacity: 16,
                python_code_capacity: 16,
                cmdline: b"prog\0arg\0".to_vec(),
                ..SegmentParams::new(7, 7)
            };
            let w = SegmentWriter::create(&dir, &p).unwrap();
            let site = w.intern_site(&[1, 2, 3]).unwrap();
            let py_site = w.intern_python_site(site, 9).unwrap();
            let code = w.intern_code(3, |t| t.set_file(b"x.py")).unwrap();
            assert!(w.claim_python_site(py_site));
            w.publish_python_site(
                py_site,
                &[crate::python::PyFrameRef { code, line: 4 }],
                false,
                false,
            );
            w.add_module(b"/x", 1, 2, 3, b"id");
            for i in 0..20 {
                w.record(&Record { site, ..rec(i) });
            }
            let bytes = std::fs::read(w.path()).unwrap();
            let g = geometry(&p);
            let span = |a: u64, b: u64| (a as usize, (b - a) as usize);
            let regions = [
                (0, HEADER_RESERVED),
                span(g.ring_offset, g.sites_offset),
                span(g.sites_offset, g.modules_offset),
                span(g.modules_offset, g.python.sites_offset),
                span(g.python.sites_offset, g.python.codes_offset),
                span(g.python.codes_offset, g.total_size),
            ];
            std::fs::remove_dir_all(dir).unwrap();
            Base { bytes, regions }
        })
    }

    /// Values worth trying in any 8-byte field: zero, one, small, boundaries, powers of two,
    /// all ones, and anything.
    fn field_value() -> impl proptest::strategy::Strategy<Value = u64> {
        use proptest::prelude::*;
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(2),
            Just(3),
            0u64..80,
            Just(u64::MAX),
            Just(u64::MAX - 1),
            Just(u64::from(u32::MAX)),
            (0u32..64).prop_map(|b| 1u64 << b),
            any::<u64>(),
        ]
    }

    proptest::proptest! {
        // 10^5 cases: about a minute on two cores in a debug build.
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(100_000))]
        /// Any corruption of a segment (8-byte fields of the header, ring slots and records,
        /// site entries, module entries and the Python tables set to edge values, random
        /// bytes, truncation) is either rejected at open or read without a panic, and what
        /// the reader hands out stays bounded by the ABI's limits, whatever the file says.
        #[test]
        fn corrupted_segments_never_panic_a_reader_and_stay_bounded(
            fields in proptest::collection::vec(
                (0usize..6, proptest::num::usize::ANY, field_value()), 0..12),
            bytes in proptest::collection::vec((proptest::num::usize::ANY, proptest::num::u8::ANY), 0..6),
            truncate in proptest::option::weighted(0.05, proptest::num::usize::ANY),
        ) {
            thread_local! {
                static FILE: PathBuf = tmpdir("fuzz").join("mutated");
            }
            let b = base();
            let mut v = b.bytes.clone();
            for (region, at, value) in &fields {
                let (start, len) = b.regions[*region];
                let off = start + (at % len) / 8 * 8;
                v[off..off + 8].copy_from_slice(&value.to_ne_bytes());
            }
            for (at, byte) in &bytes {
                let i = at % v.len();
                v[i] = *byte;
            }
            if let Some(t) = truncate {
                v.truncate(t % (v.len() + 1));
            }
            let f = FILE.with(|f| f.clone());
            std::fs::write(&f, &v).unwrap();
            if let Ok(r) = SegmentReader::open(&f) {
                let id = *r.ident();
                proptest::prop_assert!(id.ring_capacity <= MAX_RING_CAPACITY);
                proptest::prop_assert!(id.site_capacity <= MAX_SITE_CAPACITY);
                proptest::prop_assert!(id.module_capacity <= MAX_MODULE_CAPACITY);
                proptest::prop_assert!(r.ident().argv().iter().map(String::len).sum::<usize>() <= 3 * CMDLINE_MAX);
                let _ = (r.state(), r.head(), r.live().written(), r.intact(), r.file_size());
                for t in r.live().kinds.iter().chain(&r.live().apis) {
                    let _ = t.snapshot();
                }
                for round in 0..2 {
                    let mut c = if round == 0 { Cursor::from_start() } else { Cursor::at(r.head().saturating_sub(8)) };
                    let (mut ok, mut bad) = (0u64, 0u64);
                    let st = r.poll(&mut c, usize::MAX, 0, |x| if x.is_ok() { ok += 1 } else { bad += 1 });
                    proptest::prop_assert_eq!(st.delivered, ok);
                    proptest::prop_assert_eq!(st.corrupt, bad);
                    // One poll reads at most one lap of the ring.
                    proptest::prop_assert!(ok + bad <= u64::from(id.ring_capacity));
                }
                for site in (0..20).chain([u32::MAX, id.site_capacity, id.site_capacity + 1]) {
                    if let Some(frames) = r.site(site) {
                        proptest::prop_assert!(frames.len() <= sites::MAX_FRAMES);
                    }
                    if let Some(py) = r.python_stack(site) {
                        proptest::prop_assert!(py.frames.len() <= crate::python::MAX_PY_FRAMES);
                        for fr in &py.frames {
                            proptest::prop_assert!(fr.file.len() <= 3 * crate::python::FILE_MAX);
                            proptest::prop_assert!(fr.function.len() <= 3 * crate::python::NAME_MAX);
                        }
                    }
                }
                let _ = r.python_status();
                let mods = r.modules();
                proptest::prop_assert!(mods.len() <= id.module_capacity as usize);
                for m in &mods {
                    proptest::prop_assert!(m.path.len() <= 3 * modules::PATH_MAX);
                    proptest::prop_assert!(m.build_id.len() <= modules::BUILD_ID_MAX);
                }
            }
        }
    }

    #[test]
    fn names_and_proc_stat() {
        assert_eq!(parse_segment_name(&segment_name(12, 34)), Some((12, 34)));
        assert_eq!(parse_segment_name(".syncspy-1-2.tmp"), None);
        assert_eq!(parse_segment_name("syncspy-x-2"), None);
        let stat = b"123 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 20 21";
        assert_eq!(parse_start_ticks(stat), Some(4242));
        let me = std::process::id();
        assert!(process_start_ticks(me).is_some());
    }
}
