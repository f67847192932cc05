//! The meeting folder of one communicator: its id, the ranks' registrations, their arrivals at
//! collectives, messages, and leaving.
//!
//! Files are written whole under a temporary name and renamed (or linked) into place, so a
//! rank that finds a file finds it complete. Names:
//! - `rank<R>`: rank R's registration, `<pid> <nranks> <device>`;
//! - `c<seq>.r<R>`: rank R's arrival at collective `seq` (a [`Header`] and its input);
//! - `p<F>-<T>.<n>`: the n-th message from rank F to rank T (a [`Header`] and the data);
//! - `gone.r<R>`: rank R left (`ncclCommDestroy`, `ncclCommAbort`).

use std::ffi::OsString;
use std::fs;
use std::io::{self, ErrorKind};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{fail, invalid, ncclResult_t, Call, Coll, DataType, Failure, NcclResult, RedOp};

/// `NCCL_UNIQUE_ID_BYTES`.
pub(crate) const ID_BYTES: usize = 128;
/// The start of a simulated id; the folder's absolute path follows, NUL-terminated.
const ID_MAGIC: &[u8; 8] = b"SIMNCCL1";

fn system(what: impl std::fmt::Display, e: io::Error) -> Failure {
    fail(ncclResult_t::ncclSystemError, format!("{what}: {e}"))
}

/// The meeting folder set by [`set_dir`], in place of `SIMNCCL_DIR`.
static DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Sets the folder `ncclGetUniqueId` makes communicators in (`None`: `SIMNCCL_DIR` again).
pub(crate) fn set_dir(dir: Option<&Path>) {
    *DIR.lock().unwrap_or_else(PoisonError::into_inner) = dir.map(Path::to_path_buf);
}

/// Makes a fresh folder in `$SIMNCCL_DIR` and the id that names it.
pub(crate) fn new_id() -> NcclResult<[u8; ID_BYTES]> {
    let set = DIR.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let base = set
        .map(PathBuf::into_os_string)
        .or_else(|| std::env::var_os("SIMNCCL_DIR"));
    let base = base.ok_or_else(|| {
        fail(
            ncclResult_t::ncclInvalidUsage,
            "SIMNCCL_DIR is not set: the simulated NCCL needs a folder where the ranks meet",
        )
    })?;
    let base = std::path::absolute(PathBuf::from(base)).map_err(|e| system("SIMNCCL_DIR", e))?;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = loop {
        let name = format!(
            "comm-{}-{}-{}",
            std::process::id(),
            crate::clock::now_ns(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let dir = base.join(name);
        match fs::create_dir(&dir) {
            Ok(()) => break dir,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(system(
                    format!("cannot make a folder in {}", base.display()),
                    e,
                ))
            }
        }
    };
    let path = dir.into_os_string().into_vec();
    if path.len() + 1 > ID_BYTES - ID_MAGIC.len() || path.contains(&0) {
        let _ = fs::remove_dir(OsString::from_vec(path.clone()));
        return Err(fail(
            ncclResult_t::ncclInvalidUsage,
            format!(
                "SIMNCCL_DIR is too long for an id ({} bytes with the folder's name; at most {})",
                path.len(),
                ID_BYTES - ID_MAGIC.len() - 1
            ),
        ));
    }
    let mut id = [0u8; ID_BYTES];
    id[..ID_MAGIC.len()].copy_from_slice(ID_MAGIC);
    id[ID_MAGIC.len()..ID_MAGIC.len() + path.len()].copy_from_slice(&path);
    Ok(id)
}

/// The folder an id names.
pub(crate) fn dir_of(id: &[u8; ID_BYTES]) -> NcclResult<PathBuf> {
    let rest = id
        .strip_prefix(ID_MAGIC)
        .ok_or_else(|| invalid("not an id of ncclGetUniqueId (of the simulated NCCL)"))?;
    let end = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
    if end == 0 {
        return Err(invalid("an id without a folder"));
    }
    Ok(PathBuf::from(OsString::from_vec(rest[..end].to_vec())))
}

fn rank_file(dir: &Path, rank: usize) -> PathBuf {
    dir.join(format!("rank{rank}"))
}

pub(crate) fn coll_file(dir: &Path, seq: u64, rank: usize) -> PathBuf {
    dir.join(format!("c{seq}.r{rank}"))
}

pub(crate) fn p2p_file(dir: &Path, from: usize, to: usize, n: u64) -> PathBuf {
    dir.join(format!("p{from}-{to}.{n}"))
}

fn gone_file(dir: &Path, rank: usize) -> PathBuf {
    dir.join(format!("gone.r{rank}"))
}

/// A temporary name next to `path`, unique to this process and call.
fn temp_name(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut name = OsString::from(".tmp-");
    name.push(format!(
        "{}-{}-",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    name.push(path.file_name().unwrap_or_default());
    path.with_file_name(name)
}

/// Writes `parts` to `path` whole: under a temporary name, then renamed into place.
pub(crate) fn publish(path: &Path, parts: &[&[u8]]) -> io::Result<()> {
    let tmp = temp_name(path);
    let written = (|| {
        use std::io::Write;
        let mut f = fs::File::create(&tmp)?;
        for p in parts {
            f.write_all(p)?;
        }
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// Registers `rank` in the folder of `id`; fails if the id is not one, its folder is gone, or
/// the rank is taken.
pub(crate) fn register(
    id: &[u8; ID_BYTES],
    rank: usize,
    nranks: usize,
    device: usize,
) -> NcclResult<PathBuf> {
    let dir = dir_of(id)?;
    if !dir.is_dir() {
        return Err(fail(
            ncclResult_t::ncclSystemError,
            format!(
                "the communicator's folder {} does not exist (removed, or on another machine)",
                dir.display()
            ),
        ));
    }
    let line = format!("{} {nranks} {device}\n", std::process::id());
    let target = rank_file(&dir, rank);
    let tmp = temp_name(&target);
    fs::write(&tmp, line)
        .map_err(|e| system(format!("cannot register in {}", dir.display()), e))?;
    // A hard link never replaces: a second registration of the rank fails.
    let linked = fs::hard_link(&tmp, &target);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(dir),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(fail(
            ncclResult_t::ncclInvalidUsage,
            format!("rank {rank} is already a member of this communicator"),
        )),
        Err(e) => Err(system(format!("cannot register in {}", dir.display()), e)),
    }
}

/// Withdraws a registration (an init that failed).
pub(crate) fn unregister(dir: &Path, rank: usize) {
    let _ = fs::remove_file(rank_file(dir, rank));
}

/// Sleeps between looks at the folder: 50 us at first, doubling up to `max`.
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub fn new(max: Duration) -> Backoff {
        Backoff {
            next: Duration::from_micros(50),
            max,
        }
    }

    pub fn sleep(&mut self) {
        std::thread::sleep(self.next);
        self.next = (self.next * 2).min(self.max);
    }
}

/// Waits until all `nranks` ranks have registered in `dir` and returns their pids. Every
/// registration must be for the same number of ranks.
pub(crate) fn rendezvous(dir: &Path, nranks: usize, timeout: Duration) -> NcclResult<Vec<i32>> {
    let deadline = Instant::now() + timeout;
    let mut pids = vec![None; nranks];
    let mut backoff = Backoff::new(Duration::from_millis(2));
    loop {
        for (r, pid) in pids.iter_mut().enumerate().filter(|(_, p)| p.is_none()) {
            let Ok(text) = fs::read_to_string(rank_file(dir, r)) else {
                continue;
            };
            let fields: Vec<i64> = text
                .split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect();
            let [p, n, _device] = fields[..] else {
                return Err(fail(
                    ncclResult_t::ncclInternalError,
                    format!("rank {r}'s registration is unreadable: {text:?}"),
                ));
            };
            if n != nranks as i64 {
                return Err(fail(
                    ncclResult_t::ncclInvalidUsage,
                    format!("rank {r} joined for {n} ranks, this rank for {nranks}"),
                ));
            }
            *pid = Some(p as i32);
        }
        if pids.iter().all(Option::is_some) {
            return Ok(pids.into_iter().flatten().collect());
        }
        if Instant::now() > deadline {
            let missing: Vec<String> = (0..nranks)
                .filter(|r| pids[*r].is_none())
                .map(|r| r.to_string())
                .collect();
            return Err(fail(
                ncclResult_t::ncclSystemError,
                format!(
                    "ranks {} did not join within {:?} (SIMNCCL_TIMEOUT_S)",
                    missing.join(", "),
                    timeout
                ),
            ));
        }
        backoff.sleep();
    }
}

/// What every arrival and message file starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// The collective (`Coll::raw`), or `SEND` for a message.
    pub kind: u32,
    pub dtype: u32,
    pub op: u32,
    pub root: u32,
    pub count: u64,
    /// When the sender's stream reached the call (CLOCK_MONOTONIC ns, the same clock in every
    /// process of the machine).
    pub start_ns: u64,
}

const SEND: u32 = 100;
pub(crate) const HEADER_BYTES: usize = 32;

impl Header {
    pub fn of(call: &Call, start_ns: u64) -> Header {
        match *call {
            Call::Coll {
                coll,
                dtype,
                op,
                root,
                count,
            } => Header {
                kind: coll.raw(),
                dtype: dtype.raw(),
                // The operation and root matter only where the collective uses them.
                op: if coll.reduces() { op.raw() } else { 0 },
                root: if matches!(coll, Coll::Broadcast | Coll::Reduce) {
                    root as u32
                } else {
                    0
                },
                count: count as u64,
                start_ns,
            },
            Call::Send { dtype, count, .. } | Call::Recv { dtype, count, .. } => Header {
                kind: SEND,
                dtype: dtype.raw(),
                op: 0,
                root: 0,
                count: count as u64,
                start_ns,
            },
        }
    }

    pub fn to_bytes(self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..4].copy_from_slice(&self.kind.to_le_bytes());
        b[4..8].copy_from_slice(&self.dtype.to_le_bytes());
        b[8..12].copy_from_slice(&self.op.to_le_bytes());
        b[12..16].copy_from_slice(&self.root.to_le_bytes());
        b[16..24].copy_from_slice(&self.count.to_le_bytes());
        b[24..32].copy_from_slice(&self.start_ns.to_le_bytes());
        b
    }

    pub fn parse(b: &[u8]) -> Option<Header> {
        let u32_at = |i: usize| Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?));
        let u64_at = |i: usize| Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?));
        Some(Header {
            kind: u32_at(0)?,
            dtype: u32_at(4)?,
            op: u32_at(8)?,
            root: u32_at(12)?,
            count: u64_at(16)?,
            start_ns: u64_at(24)?,
        })
    }

    /// The call as another rank made it, for messages.
    pub fn describe(&self) -> String {
        let dtype = DataType::from_raw(self.dtype as i32)
            .map(|d| format!("{d:?}"))
            .unwrap_or_else(|_| self.dtype.to_string());
        let what = match self.kind {
            SEND => "Send".to_string(),
            k => [
                Coll::AllReduce,
                Coll::Broadcast,
                Coll::Reduce,
                Coll::AllGather,
                Coll::ReduceScatter,
            ]
            .into_iter()
            .find(|c| c.raw() == k)
            .map_or_else(|| format!("call {k}"), |c| c.name().to_string()),
        };
        let op = RedOp::from_raw(self.op as i32)
            .map(|o| format!("{o:?}"))
            .unwrap_or_default();
        format!(
            "{what}(count {}, {dtype}, op {op}, root {})",
            self.count, self.root
        )
    }
}

/// Reads a published file: `None` while it does not exist. With `payload` false only the
/// header is read.
pub(crate) fn read(path: &Path, payload: bool) -> io::Result<Option<(Header, Vec<u8>)>> {
    let bytes = if payload {
        match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        }
    } else {
        use std::io::Read;
        let mut f = match fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut b = vec![0u8; HEADER_BYTES];
        f.read_exact(&mut b)?;
        b
    };
    let header = Header::parse(&bytes)
        .ok_or_else(|| io::Error::new(ErrorKind::InvalidData, "a file shorter than its header"))?;
    Ok(Some((header, bytes[HEADER_BYTES..].to_vec())))
}

/// Whether rank `rank` has left the communicator.
pub(crate) fn has_left(dir: &Path, rank: usize) -> bool {
    gone_file(dir, rank).exists()
}

/// Marks `rank` gone; the rank that finds every rank gone removes the folder. Best effort: a
/// folder already removed is fine.
pub(crate) fn leave(dir: &Path, rank: usize, nranks: usize) {
    if fs::write(gone_file(dir, rank), b"").is_err() {
        return;
    }
    if (0..nranks).all(|r| has_left(dir, r)) {
        let _ = fs::remove_dir_all(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let call = Call::Coll {
            coll: Coll::Reduce,
            dtype: DataType::F16,
            op: RedOp::Max,
            root: 3,
            count: 12,
        };
        let h = Header::of(&call, 99);
        assert_eq!(Header::parse(&h.to_bytes()), Some(h));
        assert_eq!(Header::parse(&[0; 31]), None);
        // Broadcast ignores the operation: ranks passing different ones still match.
        let bc = |op| Call::Coll {
            coll: Coll::Broadcast,
            dtype: DataType::F32,
            op,
            root: 0,
            count: 1,
        };
        assert_eq!(
            Header::of(&bc(RedOp::Sum), 1),
            Header::of(&bc(RedOp::Min), 1)
        );
        assert!(
            h.describe().starts_with("Reduce(count 12"),
            "{}",
            h.describe()
        );
    }

    #[test]
    fn ids_name_their_folder_and_nothing_else() {
        let mut id = [0u8; ID_BYTES];
        assert_eq!(
            dir_of(&id).unwrap_err().code,
            ncclResult_t::ncclInvalidArgument
        );
        id[..8].copy_from_slice(ID_MAGIC);
        assert!(dir_of(&id).is_err(), "no folder");
        id[8..12].copy_from_slice(b"/x/y");
        assert_eq!(dir_of(&id).unwrap(), PathBuf::from("/x/y"));
    }
}
