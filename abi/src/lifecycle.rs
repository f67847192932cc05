//! The life of a segment file after its process: who may delete it, and when.
//!
//! Nothing here is written into a segment. Readers say what they want with small files next
//! to the segments (mode 0600, created with `O_EXCL | O_NOFOLLOW`, removed by their owner):
//!
//! - a *registration* `.syncspy-reader-<pid>-<start>`: the reader `<pid>` (started at
//!   `<start>` clock ticks) follows the folder; its content is `all` (every segment: the
//!   agent) or `session <n>` (the segments of one `syncspy run` session);
//! - a *lease* `.syncspy-<seg pid>-<seg start>.lease-<pid>-<start>`: that reader has the
//!   segment `syncspy-<seg pid>-<seg start>` open and has not finished draining it.
//!
//! - a *keep mark* `.syncspy-<seg pid>-<seg start>.keep`: the user asked to keep the segment
//!   (`syncspy run --keep-segments`); nothing removes it (the mark is removed once its segment
//!   is gone).
//!
//! A registration or lease whose owner no longer runs (pid gone, or reused: start ticks
//! differ) is void, and removed by whoever finds it.
//!
//! A segment whose process has ended is *wanted* while another reader holds a live lease on
//! it, or while a live `session <n>` reader of its session exists (the run that owns it). An
//! unwanted ended segment is removed by the reader that drained it last, or, once it has
//! lingered `SYNCSPY_LINGER_MS` (default [`DEFAULT_LINGER_MS`]), by any reclaimer
//! ([`reclaim`]: the library before it creates a segment, the agent, `syncspy run` on its
//! way out). [`reclaim`] also keeps the folder's segments under `SYNCSPY_DIR_CAP_MB`
//! (default [`DEFAULT_CAP_MB`]) by removing the oldest ended, unleased segments first.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::segment::{parse_segment_name, process_running, process_start_ticks};
use crate::{ProcState, SegmentReader};

/// How long an ended segment nobody wants stays before a reclaimer may remove it.
pub const LINGER_ENV: &str = "SYNCSPY_LINGER_MS";
pub const DEFAULT_LINGER_MS: u64 = 5_000;
/// The most the folder's segments may take together, in MiB.
pub const CAP_ENV: &str = "SYNCSPY_DIR_CAP_MB";
pub const DEFAULT_CAP_MB: u64 = 256;

/// How a reader's registration file's name begins (the folder's readers are surveyed anew
/// when one appears).
pub const REG_PREFIX: &str = ".syncspy-reader-";
const LEASE_MARK: &str = ".lease-";
const KEEP_MARK: &str = ".keep";
const DEAD_MARK: &str = ".dead";
/// Segments of dead processes a [`reclaim`] pass shrinks at most (each costs a read of it).
const SHRINK_PER_PASS: usize = 4;

/// A process: pid and start time in clock ticks since boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    pub pid: u32,
    pub start_ticks: u64,
}

impl Owner {
    /// This process.
    pub fn me() -> Owner {
        let pid = std::process::id();
        Owner {
            pid,
            start_ticks: process_start_ticks(pid).unwrap_or(0),
        }
    }

    pub fn running(&self) -> bool {
        process_running(self.pid, self.start_ticks)
    }
}

fn parse_owner(s: &str) -> Option<Owner> {
    let (pid, start) = s.split_once('-')?;
    Some(Owner {
        pid: pid.parse().ok()?,
        start_ticks: start.parse().ok()?,
    })
}

/// What a registered reader follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every segment of the folder (the agent).
    All,
    /// The segments of one session (`syncspy run`).
    Session(u64),
}

/// Creates `path` with `content`, mode 0600, never through a link or over another file.
fn create_private(path: &Path, content: &str) -> io::Result<std::fs::File> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    f.write_all(content.as_bytes())?;
    Ok(f)
}

/// A file this process owns and removes when dropped. While it is held, the file carries an
/// OFD write lock (as segments do, `crate::origin`): whoever lists the folder sees its owner
/// is alive from any PID namespace, where the pid in its name may be another process's.
#[derive(Debug)]
pub struct OwnedFile {
    path: PathBuf,
    /// Holds the lock; closed (releasing it) when dropped.
    _file: std::fs::File,
}

impl OwnedFile {
    fn new(path: PathBuf, file: std::fs::File) -> OwnedFile {
        // Without the lock (no OFD locks on this filesystem) the owner's pid still speaks.
        crate::origin::take_write_lock(file.as_raw_fd());
        OwnedFile { path, _file: file }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for OwnedFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether the reader's file at `path`, named for `owner`, belongs to a live reader: its
/// lock is held (any namespace), or `owner` runs (files of readers without the lock, and
/// this namespace). Only a file found dead both ways is void.
fn reader_file_live(path: &Path, owner: Owner) -> bool {
    lock_held(path) || owner.running()
}

/// Registers this process as a reader of `dir` (see the module's documentation).
pub fn register(dir: &Path, scope: Scope) -> io::Result<OwnedFile> {
    let me = Owner::me();
    let path = dir.join(format!("{REG_PREFIX}{}-{}", me.pid, me.start_ticks));
    let content = match scope {
        Scope::All => "all\n".to_string(),
        Scope::Session(s) => format!("session {s}\n"),
    };
    // A file left by a dead process that had our pid and start time cannot exist; one of
    // ours from before (registered twice) is replaced.
    let _ = std::fs::remove_file(&path);
    let f = create_private(&path, &content)?;
    Ok(OwnedFile::new(path, f))
}

/// The lease file of reader `owner` on the segment at `segment`.
pub fn lease_path(segment: &Path, owner: Owner) -> Option<PathBuf> {
    let name = segment.file_name()?.to_str()?;
    Some(segment.with_file_name(format!(
        ".{name}{LEASE_MARK}{}-{}",
        owner.pid, owner.start_ticks
    )))
}

/// Takes this process's lease on the segment at `segment`.
pub fn take_lease(segment: &Path) -> io::Result<OwnedFile> {
    let path = lease_path(segment, Owner::me())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a segment path"))?;
    let _ = std::fs::remove_file(&path);
    let f = create_private(&path, "")?;
    Ok(OwnedFile::new(path, f))
}

/// Marks the segment at `segment` as kept: no reader or reclaimer removes it.
pub fn keep(segment: &Path) -> io::Result<()> {
    let name = segment
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a segment path"))?;
    match create_private(&segment.with_file_name(format!(".{name}{KEEP_MARK}")), "") {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// The first bytes of a small regular file, opened without following a link or blocking.
fn read_small(path: &Path) -> io::Result<String> {
    use std::io::Read;
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !f.metadata()?.file_type().is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let mut buf = Vec::new();
    f.take(64).read_to_end(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// The live registrations and leases of a folder, as of one listing.
#[derive(Debug, Default)]
pub struct Readers {
    pub registered: Vec<(Owner, Scope)>,
    /// Segment name -> the live readers that hold a lease on it.
    pub leases: HashMap<String, Vec<Owner>>,
    /// Names of the segments marked to be kept.
    pub kept: std::collections::HashSet<String>,
}

impl Readers {
    /// Lists `dir`'s registrations, leases and keep marks; void ones (owner gone, or
    /// segment gone) are removed. Only regular files owned by this user or root count:
    /// another user's files cannot hold this user's segments, and nothing here blocks (a
    /// FIFO is never opened).
    pub fn survey(dir: &Path) -> io::Result<Readers> {
        let mut r = Readers::default();
        let mut alive: HashMap<(Owner, PathBuf), bool> = HashMap::new();
        let mut live = |o: Owner, p: PathBuf| {
            *alive
                .entry((o, p))
                .or_insert_with_key(|(o, p)| reader_file_live(p, *o))
        };
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() };
        for entry in std::fs::read_dir(dir)? {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with('.') {
                continue;
            }
            // lstat: a link is not followed.
            match entry.metadata() {
                Ok(m) if m.file_type().is_file() && (m.uid() == uid || m.uid() == 0) => {}
                _ => continue,
            }
            if let Some(rest) = name.strip_prefix(REG_PREFIX) {
                let Some(o) = parse_owner(rest) else { continue };
                if !live(o, entry.path()) {
                    let _ = std::fs::remove_file(entry.path());
                    continue;
                }
                let scope = match read_small(&entry.path()) {
                    Ok(s) => match s.trim().strip_prefix("session ") {
                        Some(n) => match n.trim().parse() {
                            Ok(n) => Scope::Session(n),
                            Err(_) => continue,
                        },
                        None if s.trim() == "all" => Scope::All,
                        None => continue,
                    },
                    Err(_) => continue,
                };
                r.registered.push((o, scope));
            } else if let Some(seg) = name
                .strip_prefix('.')
                .and_then(|n| n.strip_suffix(KEEP_MARK))
                .filter(|n| parse_segment_name(n).is_some())
            {
                if dir.join(seg).exists() {
                    r.kept.insert(seg.to_string());
                } else {
                    let _ = std::fs::remove_file(entry.path());
                }
            } else if let Some(seg) = name
                .strip_prefix('.')
                .and_then(|n| n.strip_suffix(DEAD_MARK))
                .filter(|n| parse_segment_name(n).is_some())
            {
                // A dead mark outlives its segment only until someone lists the folder.
                if !dir.join(seg).exists() {
                    let _ = std::fs::remove_file(entry.path());
                }
            } else if let Some((seg, owner)) = name
                .strip_prefix('.')
                .and_then(|n| n.split_once(LEASE_MARK))
            {
                if parse_segment_name(seg).is_none() {
                    continue;
                }
                let Some(o) = parse_owner(owner) else {
                    continue;
                };
                if !live(o, entry.path()) {
                    let _ = std::fs::remove_file(entry.path());
                    continue;
                }
                r.leases.entry(seg.to_string()).or_default().push(o);
            }
        }
        Ok(r)
    }

    /// Whether a reader other than `me` still wants the ended segment `name` of `session`:
    /// it holds a lease on it, or it is the live `syncspy run` of that session; or the
    /// segment is marked to be kept.
    pub fn wanted_by_others(&self, name: &str, session: u64, me: Owner) -> bool {
        if self.kept.contains(name) {
            return true;
        }
        let leased = self
            .leases
            .get(name)
            .is_some_and(|v| v.iter().any(|o| *o != me));
        let owned = session != 0
            && self
                .registered
                .iter()
                .any(|(o, s)| *o != me && *s == Scope::Session(session));
        leased || owned
    }

    /// Whether a live reader other than `me` follows every segment (an agent): such a reader
    /// picks up an ended segment it has not seen yet, so it can be handed over.
    pub fn folder_reader_besides(&self, me: Owner) -> bool {
        self.registered
            .iter()
            .any(|(o, s)| *o != me && *s == Scope::All)
    }
}

/// Lifecycle settings read from the environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub linger_ns: u64,
    pub cap_bytes: u64,
}

impl Policy {
    /// The policy of the environment; a value that is not a whole number gives the default
    /// and one warning line on stderr, once per process.
    pub fn from_env() -> Policy {
        let (p, warnings) = Policy::from_lookup_warn(&|k| std::env::var(k).ok());
        static WARNED: std::sync::Once = std::sync::Once::new();
        if !warnings.is_empty() {
            WARNED.call_once(|| {
                for w in warnings {
                    eprintln!("syncspy: warning: {w}");
                }
            });
        }
        p
    }

    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Policy {
        Policy::from_lookup_warn(get).0
    }

    /// [`Policy::from_lookup`] and a warning for each value not taken.
    pub fn from_lookup_warn(get: &dyn Fn(&str) -> Option<String>) -> (Policy, Vec<String>) {
        let mut warnings = Vec::new();
        let mut num = |k: &str, d: u64, unit: &str| match get(k) {
            Some(v) if !v.trim().is_empty() => v.trim().parse::<u64>().unwrap_or_else(|_| {
                warnings.push(format!(
                    "{k}={v:?} is not a whole number of {unit}: the default {d} used"
                ));
                d
            }),
            _ => d,
        };
        let p = Policy {
            linger_ns: num(LINGER_ENV, DEFAULT_LINGER_MS, "milliseconds").saturating_mul(1_000_000),
            cap_bytes: num(CAP_ENV, DEFAULT_CAP_MB, "MiB").saturating_mul(1 << 20),
        };
        (p, warnings)
    }
}

/// The room a segment folder has, for sizing a new segment ([`fit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room {
    /// The filesystem's size and its space available, in bytes (`statvfs`).
    pub total: u64,
    pub free: u64,
    /// What the folder's segments take now (all users'), in bytes.
    pub segments: u64,
}

impl Room {
    /// The room of the folder `dir`, whose segments take `segments` bytes.
    pub fn of(dir: &Path, segments: u64) -> io::Result<Room> {
        let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
        // SAFETY: an all-zero statvfs is a valid value for the call to fill.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is a valid path and `st` a valid out-pointer.
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let unit = st.f_frsize as u64;
        Ok(Room {
            total: (st.f_blocks as u64).saturating_mul(unit),
            free: (st.f_bavail as u64).saturating_mul(unit),
            segments,
        })
    }
}

/// A folder this small or smaller is a container's `/dev/shm` (Docker's is 64 MiB), shared
/// with the job's own users of shared memory (DataLoader workers, NCCL): segments are sized
/// for it.
pub const SMALL_FOLDER: u64 = 1 << 30;
/// The smallest tables a segment is cut down to before the process goes unrecorded.
const MIN_RING: u32 = 1024;
const MIN_SITES: u32 = 256;
const MIN_MODULES: u32 = 128;
const MIN_CODES: u32 = 256;

/// Sizes a new segment for its folder, so that syncspy never fills the job's shared memory:
/// - the folder keeps a floor of free space the segment never takes it below: a quarter of
///   its size (at most 1 GiB);
/// - in a small folder ([`SMALL_FOLDER`]) all segments together take at most a quarter of
///   it, and each at most a thirty-second (2 MiB of Docker's 64 MiB: eight ranks take 16
///   MiB, and 48 MiB stay the job's);
/// - a segment that does not fit is cut down, one region halved at a time, to the smallest
///   that works: the ring while it takes more than the tables together, else the largest
///   table, so that the ring keeps about half of the segment (16,384 records in Docker's
///   folder; cutting the ring first left it 1,024, which a process traced at a few thousand
///   events a second overflowed between two reads, issue 36); `Err` says why when even the
///   smallest does not fit, and the process then runs unrecorded.
pub fn fit(p: &crate::SegmentParams, room: Room) -> Result<crate::SegmentParams, String> {
    let floor = (room.total / 4).min(1 << 30);
    let mut limit = room.free.saturating_sub(floor);
    if room.total <= SMALL_FOLDER {
        limit = limit
            .min((room.total / 4).saturating_sub(room.segments))
            .min(room.total / 32);
    }
    let mut q = p.clone();
    let halve = |v: &mut u32, min: u32| {
        let ok = *v > min;
        if ok {
            *v = (*v / 2).max(min);
        }
        ok
    };
    while q.size() > limit {
        let ring_first = ring_bytes(&q) > table_bytes(&q).iter().sum::<u64>();
        let cut = (ring_first && halve(&mut q.ring_capacity, MIN_RING))
            || cut_largest_table(&mut q)
            || halve(&mut q.ring_capacity, MIN_RING);
        if !cut {
            return Err(format!(
                "no room: the segment folder has {} MiB free of {} MiB (segments take {} MiB); \
                 syncspy keeps {} MiB free and, in a folder of 1 GiB or less, its segments \
                 under a quarter of it, and its smallest segment is {} KiB",
                room.free >> 20,
                room.total >> 20,
                room.segments >> 20,
                floor >> 20,
                q.size() >> 10
            ));
        }
    }
    Ok(q)
}

/// Bytes of the ring of a segment of `p`.
fn ring_bytes(p: &crate::SegmentParams) -> u64 {
    u64::from(p.ring_capacity) * std::mem::size_of::<crate::ring::Slot>() as u64
}

/// Bytes of each table of a segment of `p`, in [`fit`]'s order: call sites (with their
/// Python part when the segment has one), Python code objects, modules.
fn table_bytes(p: &crate::SegmentParams) -> [u64; 3] {
    use std::mem::size_of;
    let python = p.python_code_capacity > 0;
    let site = size_of::<crate::sites::SiteEntry>()
        + if python {
            size_of::<crate::python::PySiteEntry>()
        } else {
            0
        };
    [
        u64::from(p.site_capacity) * site as u64,
        u64::from(p.python_code_capacity) * size_of::<crate::python::PyCodeEntry>() as u64,
        u64::from(p.module_capacity) * size_of::<crate::modules::ModuleEntry>() as u64,
    ]
}

/// Halves the largest table that is above its smallest size; false when none is.
fn cut_largest_table(q: &mut crate::SegmentParams) -> bool {
    let bytes = table_bytes(q);
    let mut order = [0usize, 1, 2];
    // Largest first; on a tie, the earlier in `table_bytes`'s order.
    order.sort_by_key(|&i| std::cmp::Reverse(bytes[i]));
    order.into_iter().any(|i| {
        let (v, min) = match i {
            0 => (&mut q.site_capacity, MIN_SITES),
            1 => (&mut q.python_code_capacity, MIN_CODES),
            _ => (&mut q.module_capacity, MIN_MODULES),
        };
        if *v > min {
            *v = (*v / 2).max(min);
            true
        } else {
            false
        }
    })
}

/// How long an ended segment that no live agent has leased yet waits for it before a
/// reclaimer may remove it (an agent registered for the folder that has not opened a segment
/// in this long is stuck, or gone without its registration going).
pub const AGENT_GRACE_NS: u64 = 60_000_000_000;

/// What [`reclaim`] did.
#[derive(Debug, Default)]
pub struct Reclaimed {
    pub removed: Vec<PathBuf>,
    /// Bytes of segments left in the folder.
    pub bytes_left: u64,
}

/// When the process of the segment `name` in `dir` was first found dead (CLOCK_REALTIME ns):
/// the mtime of its dead mark `.<name>.dead`, made now if there is none. A killed process
/// leaves no end time in its segment, and the segment's own mtime is when it was created or
/// last written through `write`, which a mapped segment never is.
fn first_seen_dead(dir: &Path, name: &str, now_unix: u64) -> u64 {
    let mark = dir.join(format!(".{name}{DEAD_MARK}"));
    match std::fs::symlink_metadata(&mark) {
        Ok(m) if m.file_type().is_file() => (m.mtime().max(0) as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(m.mtime_nsec().max(0) as u64),
        _ => {
            let _ = create_private(&mark, "");
            now_unix
        }
    }
}

/// Bytes the file takes on its filesystem (tmpfs charges only the pages it holds).
fn allocated(meta: &std::fs::Metadata) -> u64 {
    meta.blocks().saturating_mul(512)
}

/// Gives back the pages of a dead process's segment that hold only zeros (ring slots never
/// written, unused table entries), by punching holes: the file keeps its size and reads the
/// same (a hole reads as zeros), so a reader that has it mapped sees no change. Only for
/// segments whose writer is gone, which the caller checked: a live writer could write into a
/// punched page again, and on a full tmpfs that write would fault. Skips files already
/// smaller on disk than their size (shrunk before). Returns the bytes given back.
pub fn shrink(path: &Path) -> io::Result<u64> {
    use std::os::unix::fs::FileExt;
    const PAGE: u64 = 4096;
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.file_type().is_file() || allocated(&meta) < meta.len() {
        return Ok(0);
    }
    let before = allocated(&meta);
    let mut buf = vec![0u8; 64 * 1024];
    let mut off = 0u64;
    // The run of zero pages being collected: (start, end).
    let mut run: Option<(u64, u64)> = None;
    let punch = |s: u64, e: u64| {
        // SAFETY: fallocate on an open descriptor with a range inside the file; KEEP_SIZE
        // leaves its size alone.
        unsafe {
            libc::fallocate(
                f.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                s as libc::off_t,
                (e - s) as libc::off_t,
            )
        }
    };
    while off < meta.len() {
        let n = f.read_at(&mut buf, off)?;
        if n == 0 {
            break;
        }
        for (i, page) in buf[..n].chunks(PAGE as usize).enumerate() {
            let at = off + i as u64 * PAGE;
            if page.len() as u64 == PAGE && page.iter().all(|b| *b == 0) {
                run = Some(match run {
                    Some((s, _)) => (s, at + PAGE),
                    None => (at, at + PAGE),
                });
            } else if let Some((s, e)) = run.take() {
                if punch(s, e) != 0 {
                    return Ok(0);
                }
            }
        }
        off += n as u64;
    }
    if let Some((s, e)) = run {
        if punch(s, e) != 0 {
            return Ok(0);
        }
    }
    let after = f.metadata().map(|m| allocated(&m)).unwrap_or(before);
    Ok(before.saturating_sub(after))
}

/// Whether someone holds a write lock (`crate::origin`) on the regular file at `path`,
/// opened without following a link or blocking; `false` when it cannot be told.
fn lock_held(path: &Path) -> bool {
    use std::os::fd::AsFd;
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .is_ok_and(|f| {
            f.metadata().is_ok_and(|m| m.file_type().is_file())
                && crate::origin::lock_state(f.as_fd()) == crate::origin::LockState::Held
        })
}

/// Removes `path` if it is still the file with inode `ino`.
pub fn remove_if_same(path: &Path, ino: u64) -> io::Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.ino() == ino => match std::fs::remove_file(path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        },
        _ => Ok(false),
    }
}

/// Removes the segments of `dir` whose process has ended, that this user owns, that no other
/// reader wants (see the module's documentation) and that `skip` does not hold back (the
/// caller's own, still being read): those that lingered `policy.linger_ns` since their end,
/// then, while the folder's segments take more than `policy.cap_bytes`, the oldest others.
///
/// The end of a process that ran its exit handler is in its header; for one killed before,
/// the time a reclaimer first found it dead (a `.<segment>.dead` mark) stands in for it.
/// Segments of dead processes that stay are shrunk to the pages they use ([`shrink`]; a few
/// per pass). Sizes are what the files take on disk (`st_blocks`), which is what fills a
/// tmpfs. Never blocks on a file (see [`SegmentReader::open`]); errors on single files are
/// skipped.
pub fn reclaim(dir: &Path, policy: Policy, skip: &dyn Fn(&Path) -> bool) -> io::Result<Reclaimed> {
    let me = Owner::me();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let readers = Readers::survey(dir)?;
    let now_mono = crate::clock::monotonic_ns();
    let now_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut out = Reclaimed::default();
    // A live agent (a reader of the whole folder) takes a lease on each segment it opens: an
    // ended segment without one has not been read by it yet. Such a segment waits for it (a
    // burst of short jobs under a folder cap lost up to 3 in 4 of them to this pass), up to
    // a grace time; the folder's free-space floor still holds (`fit`: no new segment is made
    // where there is no room).
    let agent = readers.folder_reader_besides(me);
    // (created_unix_ns, path, ino, bytes on disk, name, awaits the agent) of ended segments
    // not removed for their linger.
    let mut ended = Vec::new();
    let mut shrunk = 0;
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if parse_segment_name(name).is_none() {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.file_type().is_file() {
            continue;
        }
        out.bytes_left += allocated(&meta);
        let path = entry.path();
        // A held lock: its writer runs (a cheap test before mapping the file).
        if meta.uid() != uid || skip(&path) || lock_held(&path) {
            continue;
        }
        let Ok(r) = SegmentReader::open(&path) else {
            continue;
        };
        // Whatever the namespaces: the writer's lock, or (older segments) its pid. A live
        // process's segment is never shrunk or removed.
        if r.writer_alive() {
            continue;
        }
        let ident = r.ident();
        if readers.wanted_by_others(name, ident.session, me) {
            continue;
        }
        let ended_ns = r.live().ended_ns.load(std::sync::atomic::Ordering::Relaxed);
        let since_end = match r.state() {
            ProcState::Exited(_) if ended_ns != 0 => now_mono.saturating_sub(ended_ns),
            _ => now_unix.saturating_sub(first_seen_dead(dir, name, now_unix)),
        };
        let created = ident.created_unix_ns;
        drop(r);
        let awaits_agent =
            agent && !readers.leases.contains_key(name) && since_end < AGENT_GRACE_NS;
        if since_end >= policy.linger_ns && !awaits_agent {
            if let Ok(true) = remove_if_same(&path, meta.ino()) {
                out.bytes_left = out.bytes_left.saturating_sub(allocated(&meta));
                let _ = std::fs::remove_file(dir.join(format!(".{name}{DEAD_MARK}")));
                out.removed.push(path);
            }
        } else {
            let mut size = allocated(&meta);
            if shrunk < SHRINK_PER_PASS && size >= meta.len() {
                shrunk += 1;
                let freed = shrink(&path).unwrap_or(0);
                out.bytes_left = out.bytes_left.saturating_sub(freed);
                size = size.saturating_sub(freed);
            }
            ended.push((
                created,
                path,
                meta.ino(),
                size,
                name.to_string(),
                awaits_agent,
            ));
        }
    }
    ended.sort();
    for (_, path, ino, len, name, awaits_agent) in ended {
        if out.bytes_left <= policy.cap_bytes {
            break;
        }
        if awaits_agent {
            continue;
        }
        if let Ok(true) = remove_if_same(&path, ino) {
            out.bytes_left = out.bytes_left.saturating_sub(len);
            let _ = std::fs::remove_file(dir.join(format!(".{name}{DEAD_MARK}")));
            out.removed.push(path);
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::{SegmentParams, SegmentWriter};

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "syncspy-lifecycle-{name}-{}-{}",
            std::process::id(),
            crate::clock::monotonic_ns()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn seg(dir: &Path, pid: u32, session: u64) -> SegmentWriter {
        let mut p = SegmentParams::new(pid, 7);
        p.session = session;
        p.ring_capacity = 16;
        p.site_capacity = 16;
        p.module_capacity = 8;
        SegmentWriter::create(dir, &p).unwrap()
    }

    fn init() -> Owner {
        Owner {
            pid: 1,
            start_ticks: process_start_ticks(1).unwrap(),
        }
    }

    #[test]
    fn leases_and_runs_keep_a_segment_void_files_do_not() {
        let d = tempdir("wanted");
        let me = Owner::me();
        let s = seg(&d, 900_001, 5);
        let name = "syncspy-900001-7";
        let reg = register(&d, Scope::All).unwrap();
        let lease = take_lease(s.path()).unwrap();
        let r = Readers::survey(&d).unwrap();
        assert_eq!(r.registered, vec![(me, Scope::All)]);
        // One's own lease and registration never hold one back.
        assert!(!r.wanted_by_others(name, 5, me));
        assert!(!r.folder_reader_besides(me));
        // Another live reader's lease does; so does the live run of the session.
        let other = init();
        let other_lease = lease_path(s.path(), other).unwrap();
        create_private(&other_lease, "").unwrap();
        assert!(Readers::survey(&d).unwrap().wanted_by_others(name, 5, me));
        std::fs::remove_file(&other_lease).unwrap();
        let run = d.join(format!(".syncspy-reader-1-{}", other.start_ticks));
        std::fs::write(&run, "session 5\n").unwrap();
        let r = Readers::survey(&d).unwrap();
        assert!(r.wanted_by_others(name, 5, me));
        assert!(!r.wanted_by_others(name, 6, me), "another session's run");
        std::fs::remove_file(&run).unwrap();
        // Files of dead readers are void, and removed by the survey.
        let dead = Owner {
            pid: other.pid,
            start_ticks: other.start_ticks + 1,
        };
        let void_lease = lease_path(s.path(), dead).unwrap();
        create_private(&void_lease, "").unwrap();
        let void_reg = d.join(format!(".syncspy-reader-1-{}", dead.start_ticks));
        std::fs::write(&void_reg, "all\n").unwrap();
        let r = Readers::survey(&d).unwrap();
        assert!(!r.wanted_by_others(name, 5, me));
        assert!(!r.folder_reader_besides(me));
        assert!(!void_lease.exists() && !void_reg.exists());
        // A FIFO under a registration's name is skipped, never opened (it would block).
        let fifo = d.join(format!(".syncspy-reader-1-{}", other.start_ticks));
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path for the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(!Readers::survey(&d).unwrap().folder_reader_besides(me));
        std::fs::remove_file(&fifo).unwrap();
        // A kept segment is wanted; its mark goes once the segment is gone.
        keep(s.path()).unwrap();
        keep(s.path()).unwrap();
        assert!(Readers::survey(&d).unwrap().wanted_by_others(name, 5, me));
        // Owned files go with their owner.
        let (lp, rp) = (lease.path().to_path_buf(), reg.path().to_path_buf());
        drop((lease, reg));
        assert!(!lp.exists() && !rp.exists());
        let mark = d.join(format!(".{name}.keep"));
        assert!(mark.exists());
        std::fs::remove_file(s.path()).unwrap();
        Readers::survey(&d).unwrap();
        assert!(!mark.exists());
        drop(s);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn reclaim_waits_for_the_linger_and_holds_the_cap_oldest_first() {
        let d = tempdir("reclaim");
        // Pids that do not run with these start ticks: ended.
        let ws: Vec<SegmentWriter> = (0..3).map(|i| seg(&d, 900_010 + i, 0)).collect();
        for w in &ws {
            w.mark_exited(0);
            // Their processes have ended: the kernel dropped their locks.
            w.release_lock();
        }
        let size = std::fs::metadata(ws[0].path()).unwrap().len();
        let on_disk = |p: &Path| allocated(&std::fs::metadata(p).unwrap());
        assert!(
            ws.iter().all(|w| on_disk(w.path()) >= size),
            "space reserved"
        );
        let long = Policy {
            linger_ns: u64::MAX,
            cap_bytes: u64::MAX,
        };
        let r = reclaim(&d, long, &|_| false).unwrap();
        assert!(r.removed.is_empty());
        // Kept while they linger, the dead processes' segments shrink to the pages they use
        // (their ring slots and tables are all but empty), and read the same.
        let left: Vec<u64> = ws.iter().map(|w| on_disk(w.path())).collect();
        assert!(left.iter().all(|l| *l < size / 2), "{left:?} of {size}");
        assert_eq!(r.bytes_left, left.iter().sum::<u64>());
        let again = SegmentReader::open(ws[0].path()).unwrap();
        assert_eq!(again.state(), ProcState::Exited(0));
        drop(again);
        // A second pass finds nothing more to give back.
        assert_eq!(shrink(ws[0].path()).unwrap(), 0);
        // Over a cap one byte short of the three: the oldest goes.
        let capped = Policy {
            linger_ns: u64::MAX,
            cap_bytes: r.bytes_left - 1,
        };
        let r = reclaim(&d, capped, &|_| false).unwrap();
        assert_eq!(r.removed, vec![ws[0].path().to_path_buf()]);
        // A leased one stays past its linger; `skip` holds one back too.
        let other = init();
        create_private(&lease_path(ws[1].path(), other).unwrap(), "").unwrap();
        let now = Policy {
            linger_ns: 0,
            cap_bytes: u64::MAX,
        };
        let keep = ws[2].path().to_path_buf();
        let r = reclaim(&d, now, &|p| p == keep).unwrap();
        assert!(r.removed.is_empty(), "{:?}", r.removed);
        let r = reclaim(&d, now, &|_| false).unwrap();
        assert_eq!(r.removed, vec![ws[2].path().to_path_buf()]);
        assert!(ws[1].path().exists());
        // A running process's segment is never reclaimed.
        let me = Owner::me();
        let mut p = SegmentParams::new(me.pid, me.start_ticks);
        p.ring_capacity = 16;
        p.site_capacity = 16;
        p.module_capacity = 8;
        let mine = SegmentWriter::create(&d, &p).unwrap();
        reclaim(&d, now, &|_| false).unwrap();
        assert!(mine.path().exists());
        drop((ws, mine));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_killed_process_lingers_from_when_it_was_found_dead_not_from_its_files_age() {
        let d = tempdir("killed");
        // Killed before its exit handler: no end time, no lock; its file last changed an hour
        // ago.
        let w = seg(&d, 900_020, 0);
        w.release_lock();
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(w.path())
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
        let minute = Policy {
            linger_ns: 60_000_000_000,
            cap_bytes: u64::MAX,
        };
        let r = reclaim(&d, minute, &|_| false).unwrap();
        assert!(r.removed.is_empty(), "removed at once: {:?}", r.removed);
        let name = w.path().file_name().unwrap().to_str().unwrap().to_string();
        let mark = d.join(format!(".{name}{DEAD_MARK}"));
        assert!(mark.exists(), "found dead now");
        // Still there on the next pass within the minute; gone, with its mark, after it.
        assert!(reclaim(&d, minute, &|_| false).unwrap().removed.is_empty());
        let now = Policy {
            linger_ns: 0,
            cap_bytes: u64::MAX,
        };
        let r = reclaim(&d, now, &|_| false).unwrap();
        assert_eq!(r.removed, vec![w.path().to_path_buf()]);
        assert!(!mark.exists());
        drop(w);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_locked_segment_is_never_shrunk_or_removed_whatever_its_pid_says() {
        // A job in a container: its segment names pid 2 (its pid there), which here is
        // another process or none. Its library holds the lock: it runs.
        let d = tempdir("locked");
        let w = seg(&d, 2, 0);
        let path = w.path().to_path_buf();
        let on_disk = |p: &Path| allocated(&std::fs::metadata(p).unwrap());
        let before = on_disk(&path);
        let now = Policy {
            linger_ns: 0,
            cap_bytes: 0,
        };
        for _ in 0..3 {
            let r = reclaim(&d, now, &|_| false).unwrap();
            assert!(r.removed.is_empty(), "{:?}", r.removed);
        }
        assert_eq!(on_disk(&path), before, "shrunk while its writer runs");
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        assert!(!d.join(format!(".{name}{DEAD_MARK}")).exists());
        let r = SegmentReader::open(&path).unwrap();
        assert!(r.writer_alive());
        // Its writer exits (the kernel drops the lock): now it is ended, and goes.
        w.release_lock();
        assert!(!r.writer_alive());
        drop(r);
        let r = reclaim(&d, now, &|_| false).unwrap();
        assert_eq!(r.removed, vec![path]);
        drop(w);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_second_writer_with_the_same_pid_and_start_takes_another_name() {
        let d = tempdir("same-name");
        let a = seg(&d, 2, 0);
        let b = seg(&d, 2, 0);
        assert_eq!(a.path(), d.join("syncspy-2-7"));
        assert_eq!(b.path(), d.join("syncspy-2-7-1"));
        assert_eq!(parse_segment_name("syncspy-2-7-1"), Some((2, 7)));
        assert_eq!(parse_segment_name("syncspy-2-7-x"), None);
        // Both readable, both alive, neither replaced.
        for w in [&a, &b] {
            let r = SegmentReader::open(w.path()).unwrap();
            assert!(r.writer_alive());
            assert_eq!(r.ident().created_ns, {
                let x = SegmentReader::open(w.path()).unwrap();
                x.ident().created_ns
            });
        }
        assert_ne!(
            std::fs::metadata(a.path()).unwrap().ino(),
            std::fs::metadata(b.path()).unwrap().ino()
        );
        drop((a, b));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_reader_file_whose_lock_is_held_is_live_whatever_its_name_says() {
        // A reader in another PID namespace: its lease names a pid that does not run here.
        let d = tempdir("reader-lock");
        let s = seg(&d, 900_030, 0);
        s.mark_exited(0);
        s.release_lock();
        let far = Owner {
            pid: 900_031,
            start_ticks: 5,
        };
        let path = lease_path(s.path(), far).unwrap();
        let f = create_private(&path, "").unwrap();
        assert!(crate::origin::take_write_lock(f.as_raw_fd()));
        let me = Owner::me();
        let name = s.path().file_name().unwrap().to_str().unwrap().to_string();
        assert!(Readers::survey(&d).unwrap().wanted_by_others(&name, 0, me));
        let now = Policy {
            linger_ns: 0,
            cap_bytes: u64::MAX,
        };
        assert!(reclaim(&d, now, &|_| false).unwrap().removed.is_empty());
        assert!(path.exists());
        // Its reader killed (the lock gone with it, the file left): the lease is void, and
        // the segment goes.
        drop(f);
        assert!(!Readers::survey(&d).unwrap().wanted_by_others(&name, 0, me));
        assert!(!path.exists());
        let r = reclaim(&d, now, &|_| false).unwrap();
        assert_eq!(r.removed, vec![s.path().to_path_buf()]);
        drop(s);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn segments_are_sized_for_a_small_shared_memory_folder() {
        let mib = 1u64 << 20;
        let mut p = crate::SegmentParams::new(1, 1);
        p.python_code_capacity = crate::SegmentParams::DEFAULT_PYTHON_CODES;
        let full = p.size();
        assert!(full > 6 * mib, "{full}");
        // A big /dev/shm: unchanged.
        let big = Room {
            total: 64 << 30,
            free: 60 << 30,
            segments: 0,
        };
        assert_eq!(fit(&p, big).unwrap().size(), full);
        // Docker's 64 MiB: at most 2 MiB each, all of them at most 16 MiB.
        let docker = |free: u64, segments: u64| Room {
            total: 64 * mib,
            free,
            segments,
        };
        let q = fit(&p, docker(64 * mib, 0)).unwrap();
        assert!(q.size() <= 2 * mib, "{}", q.size());
        // The ring keeps about half of it: 16,384 records (1 MiB), with or without the
        // Python tables, where cutting the ring first left 1,024 (issue 36); the tables
        // keep room for hundreds of call sites and modules.
        let mut plain = p.clone();
        plain.python_code_capacity = 0;
        for q in [q, fit(&plain, docker(64 * mib, 0)).unwrap()] {
            assert!(q.size() <= 2 * mib, "{}", q.size());
            assert_eq!(q.ring_capacity, 16_384, "{q:?}");
            assert!(q.site_capacity >= 512, "{q:?}");
            assert!(q.module_capacity >= 512, "{q:?}");
        }
        // Eight ranks fit in 16 MiB; a ninth gets less room, and none takes the folder
        // below its floor of 16 MiB free.
        let mut used = 0;
        for _ in 0..8 {
            let q = fit(&p, docker(64 * mib - used, used)).unwrap();
            used += q.size();
        }
        assert!(used <= 16 * mib, "{used}");
        // The job took 40 MiB besides: what is left is kept.
        let e = fit(&p, docker(64 * mib - 40 * mib - used, used)).unwrap_err();
        assert!(e.contains("no room"), "{e}");
        // A nearly full big folder: the floor holds there too.
        let full_big = Room {
            total: 8 << 30,
            free: (1 << 30) + mib,
            segments: 0,
        };
        let q = fit(&p, full_big).unwrap();
        assert!(q.size() <= mib, "{}", q.size());
    }

    #[test]
    fn policy_from_env_values() {
        let p = Policy::from_lookup(&|_| None);
        assert_eq!(p.linger_ns, 5_000_000_000);
        assert_eq!(p.cap_bytes, 256 << 20);
        let p = Policy::from_lookup(&|k| Some(if k == LINGER_ENV { "0" } else { "1" }.to_string()));
        assert_eq!((p.linger_ns, p.cap_bytes), (0, 1 << 20));
        let (p, w) = Policy::from_lookup_warn(&|_| Some("-1".to_string()));
        assert_eq!(
            (p.linger_ns, p.cap_bytes),
            (DEFAULT_LINGER_MS * 1_000_000, DEFAULT_CAP_MB << 20)
        );
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].starts_with("SYNCSPY_LINGER_MS=\"-1\" is not"), "{w:?}");
        assert!(
            w[1].starts_with("SYNCSPY_DIR_CAP_MB=\"-1\" is not"),
            "{w:?}"
        );
    }
}
