//! Segment folders private to pods and containers (issue 23): the agent runs in the host's PID
//! namespace and finds the jobs whose `/dev/shm` it cannot see in its own mount namespace.
//!
//! Every [`DISCOVERY_EVERY`] a [`Discovery`] pass lists `/proc` and, for each process, looks at
//! its mount namespace (`/proc/<pid>/ns/mnt`) and executable (`/proc/<pid>/exe`): two `stat`s.
//! A process in another mount namespace than the agent's, not seen before with that
//! executable, has its `/proc/<pid>/maps` read (at most [`MAPS_PER_PASS`] per pass, so a host
//! of many processes is covered over several passes); one that carries `libsyncspy` has its
//! segment folder opened: `SYNCSPY_DIR` from its `/proc/<pid>/environ` (default `/dev/shm`),
//! resolved inside its root (`/proc/<pid>/root`, with `openat2(RESOLVE_IN_ROOT)`, so that a
//! symbolic link in the container cannot lead outside it). The folder is named by the
//! (device, inode) of that open folder, so the host's own folder (a pod that mounts it) and a
//! folder found before are not followed twice.
//!
//! The agent keeps the folder open (`O_PATH`) and follows it through `/proc/self/fd/<n>`:
//! once found, it needs no process of the pod to reach it, and no pid that could be reused.
//! A folder is dropped when no process of its mount namespace is left: it is no longer
//! scanned, and is closed once the segments followed in it are forgotten.

use std::collections::HashMap;
use std::io::{self, BufRead};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often `/proc` is looked through for pods' folders.
pub const DISCOVERY_EVERY: Duration = Duration::from_secs(3);
/// `/proc/<pid>/maps` read at most per pass.
pub const MAPS_PER_PASS: usize = 64;
/// A process whose folder could not be opened is looked at again after this long.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);
/// Pods' segment folders followed at most; the excess is counted in a warning.
pub const MAX_POD_FOLDERS: usize = 256;

/// A folder, by the (device, inode) of its `stat`.
pub type FolderId = (u64, u64);

/// A segment folder found through a process of another mount namespace.
#[derive(Debug)]
pub struct Found {
    pub id: FolderId,
    /// The folder, open with `O_PATH`.
    pub dir: OwnedFd,
    /// The mount namespace (inode) of the process it was found through.
    pub mnt_ns: u64,
    /// That process (pid here), and the folder as it named it.
    pub pid: u32,
    pub segment_dir: PathBuf,
}

impl Found {
    /// Where the folder is, for people: `/proc/<pid>/root/dev/shm`.
    pub fn describe(&self) -> String {
        describe(self.pid, &self.segment_dir)
    }
}

/// `/proc/<pid>/root<dir>`.
pub fn describe(pid: u32, dir: &Path) -> String {
    format!("/proc/{pid}/root{}", dir.display())
}

/// What one pass saw.
#[derive(Debug, Default)]
pub struct Pass {
    /// Folders not known to the caller.
    pub found: Vec<Found>,
    /// Every mount namespace with a process, and one of its processes.
    pub alive: HashMap<u64, u32>,
    /// Processes of other mount namespaces whose maps wait for a later pass.
    pub pending: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    mnt: u64,
    exe: FolderId,
    /// Look at it again from then on (its folder could not be opened).
    retry: Option<Instant>,
}

/// Finds processes of other mount namespaces that carry the library, and their folders.
#[derive(Debug, Default)]
pub struct Discovery {
    own_mnt: Option<u64>,
    /// Processes looked at, by pid, with what they were then.
    seen: HashMap<u32, Seen>,
    last: Option<Instant>,
}

impl Discovery {
    pub fn new() -> Discovery {
        Discovery {
            own_mnt: std::fs::metadata("/proc/self/ns/mnt").ok().map(|m| m.ino()),
            ..Discovery::default()
        }
    }

    /// Whether a pass is due.
    pub fn due(&self, now: Instant) -> bool {
        self.last
            .is_none_or(|l| now.duration_since(l) >= DISCOVERY_EVERY)
    }

    /// Looks at process `pid` again at the next pass (its folder was not taken).
    pub fn retry(&mut self, pid: u32) {
        self.seen.remove(&pid);
    }

    /// One pass over `/proc`; `known` says whether a folder is followed already.
    pub fn pass(&mut self, known: &dyn Fn(FolderId) -> bool) -> Pass {
        let now = Instant::now();
        self.last = Some(now);
        let mut out = Pass::default();
        let Some(own_mnt) = self.own_mnt else {
            return out;
        };
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return out;
        };
        let me = std::process::id();
        let mut present = std::collections::HashSet::new();
        let mut budget = MAPS_PER_PASS;
        for entry in entries {
            let Ok(entry) = entry else { continue };
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if pid == me {
                continue;
            }
            let Ok(mnt) = std::fs::metadata(format!("/proc/{pid}/ns/mnt")).map(|m| m.ino()) else {
                continue;
            };
            out.alive.entry(mnt).or_insert(pid);
            if mnt == own_mnt {
                continue;
            }
            let exe = std::fs::metadata(format!("/proc/{pid}/exe"))
                .map_or((0, 0), |m| (m.dev(), m.ino()));
            present.insert(pid);
            let now_seen = Seen {
                mnt,
                exe,
                retry: None,
            };
            if let Some(s) = self.seen.get(&pid) {
                let again = s.retry.is_some_and(|r| now >= r);
                if s.mnt == mnt && s.exe == exe && !again {
                    continue;
                }
            }
            if budget == 0 {
                out.pending += 1;
                continue;
            }
            budget -= 1;
            self.seen.insert(pid, now_seen);
            if !carries_library(pid) {
                continue;
            }
            let dir = segment_dir_of(pid);
            match open_in_root(pid, &dir) {
                Ok(fd) => {
                    let Some(id) = fstat_id(&fd) else { continue };
                    if known(id) || out.found.iter().any(|f| f.id == id) {
                        continue;
                    }
                    out.found.push(Found {
                        id,
                        dir: fd,
                        mnt_ns: mnt,
                        pid,
                        segment_dir: dir,
                    });
                }
                Err(_) => {
                    self.seen.insert(
                        pid,
                        Seen {
                            retry: Some(now + RETRY_AFTER),
                            ..now_seen
                        },
                    );
                }
            }
        }
        // Forget processes that are gone, so the table does not grow with every pid.
        self.seen.retain(|p, _| present.contains(p));
        out
    }
}

/// Whether `/proc/<pid>/maps` maps the library.
pub fn carries_library(pid: u32) -> bool {
    let Ok(f) = std::fs::File::open(format!("/proc/{pid}/maps")) else {
        return false;
    };
    let mut r = io::BufReader::new(f);
    let mut line = Vec::new();
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return false,
            Ok(_) => {
                if line.windows(10).any(|w| w == b"libsyncspy") {
                    return true;
                }
            }
        }
    }
}

/// The process's `SYNCSPY_DIR` (from the environment it was started with), as the library
/// reads it: trimmed, empty or unset is `/dev/shm`; a relative one from its working folder.
pub fn segment_dir_of(pid: u32) -> PathBuf {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let dir = segment_dir_in(&environ);
    if dir.is_absolute() {
        return dir;
    }
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_else(|_| "/".into());
    cwd.join(dir)
}

/// `SYNCSPY_DIR` in an environment block (`NAME=value\0...`): the first, as `getenv` finds.
pub fn segment_dir_in(environ: &[u8]) -> PathBuf {
    let value = environ
        .split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(b"SYNCSPY_DIR="))
        .map(|v| String::from_utf8_lossy(v).trim().to_string())
        .filter(|v| !v.is_empty());
    value.map_or_else(|| PathBuf::from("/dev/shm"), PathBuf::from)
}

fn fstat_id(fd: &OwnedFd) -> Option<FolderId> {
    // SAFETY: fstat on an open descriptor into a zeroed stat on the stack.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd.as_raw_fd(), &mut st) == 0).then_some((st.st_dev, st.st_ino))
    }
}

/// Opens folder `dir` as process `pid` sees it, inside its root (`syncspy_read::in_root`).
pub fn open_in_root(pid: u32, dir: &Path) -> io::Result<OwnedFd> {
    syncspy_read::in_root::open_in_root(pid, dir, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_segment_folder_is_read_from_the_environment_like_the_library_does() {
        assert_eq!(segment_dir_in(b""), PathBuf::from("/dev/shm"));
        assert_eq!(
            segment_dir_in(b"A=1\0SYNCSPY_DIR= /run/s \0B=2\0"),
            PathBuf::from("/run/s")
        );
        assert_eq!(segment_dir_in(b"SYNCSPY_DIR=\0"), PathBuf::from("/dev/shm"));
        assert_eq!(
            segment_dir_in(b"SYNCSPY_DIR=tmp/x\0"),
            PathBuf::from("tmp/x")
        );
        assert_eq!(
            segment_dir_in(b"XSYNCSPY_DIR=/no\0"),
            PathBuf::from("/dev/shm")
        );
    }

    #[test]
    fn a_folder_is_opened_inside_the_process_root_and_named_by_its_inode() {
        let d = syncspy_test_support::TempDir::new("pods-open");
        let fd = open_in_root(std::process::id(), d.path()).unwrap();
        let m = std::fs::metadata(d.path()).unwrap();
        assert_eq!(fstat_id(&fd), Some((m.dev(), m.ino())));
        assert!(open_in_root(std::process::id(), &d.path().join("none")).is_err());
        // This process does not carry the library.
        assert!(!carries_library(std::process::id()));
    }
}
