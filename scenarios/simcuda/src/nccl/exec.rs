//! An NCCL operation on a stream: what the stream's worker does when it reaches it.

use std::ffi::CStr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::runtime::sys::cudaError_t;

use super::folder::{self, Backoff, Header};
use super::{fail, ncclResult_t, reduce, settings, Call, Coll, Comm, DataType, Failure, RedOp};
use crate::clock;
use crate::error::CudaResult;

/// One call with its buffers (addresses inside allocations the operation keeps mapped) and
/// its sequence number: the collective's on the communicator, or the message's between the
/// two ranks.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub call: Call,
    pub send: usize,
    pub recv: usize,
    pub seq: u64,
}

/// The calls of one communicator that one launch enqueued (one call, or a group's).
#[derive(Debug)]
pub(crate) struct NcclWork {
    pub comm: Arc<Comm>,
    pub items: Vec<Item>,
}

/// Why an operation stopped early.
enum Stop {
    /// `ncclCommAbort`: the operation ends at once, with no result.
    Aborted,
    Failed(Failure),
}

impl From<Failure> for Stop {
    fn from(f: Failure) -> Stop {
        Stop::Failed(f)
    }
}

fn system(what: impl std::fmt::Display, e: std::io::Error) -> Stop {
    Stop::Failed(fail(ncclResult_t::ncclSystemError, format!("{what}: {e}")))
}

/// How often a waiting rank checks that the ranks it waits for are still there.
const LIVENESS_EVERY: Duration = Duration::from_millis(500);

impl NcclWork {
    /// The kernel name CUPTI reports for this operation.
    pub fn kernel_name(&self) -> &'static CStr {
        self.items
            .first()
            .map_or(c"ncclDevKernel_SendRecv", |i| super::kernel_name(&i.call))
    }

    /// Runs the operation, which the stream reached at `start_ns`, with modeled durations
    /// multiplied by `scale` (the runtime's `SIMCUDA_TIME_SCALE`, read by the caller): returns
    /// how it went and its modeled end.
    pub fn run(&self, start_ns: u64, scale: f64) -> (CudaResult, u64) {
        match self.exchange(start_ns, scale) {
            Ok(end) => (Ok(()), end),
            Err(Stop::Aborted) => (Ok(()), clock::now_ns().max(start_ns)),
            Err(Stop::Failed(f)) => {
                self.comm.failed(&f);
                (
                    Err(cudaError_t::cudaErrorLaunchFailure),
                    clock::now_ns().max(start_ns),
                )
            }
        }
    }

    fn exchange(&self, start_ns: u64, scale: f64) -> Result<u64, Stop> {
        let comm = &*self.comm;
        let (me, n) = (comm.rank, comm.nranks);
        let dir = &comm.dir;
        let s = settings();
        let deadline = Instant::now() + s.timeout();
        if comm.aborted.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Stop::Aborted);
        }

        // Everything this rank gives first, then everything it waits for: the calls of a
        // group may wait for each other's counterparts on other ranks.
        let mut published = Vec::new();
        for item in &self.items {
            let header = Header::of(&item.call, start_ns).to_bytes();
            match item.call {
                Call::Coll { .. } if n > 1 => {
                    let path = folder::coll_file(dir, item.seq, me);
                    let input = self.input(item);
                    folder::publish(&path, &[&header, input])
                        .map_err(|e| system(format!("cannot publish to {}", dir.display()), e))?;
                    published.push(path);
                }
                Call::Send { peer, .. } => {
                    let path = folder::p2p_file(dir, me, peer, item.seq);
                    folder::publish(&path, &[&header, self.input(item)])
                        .map_err(|e| system(format!("cannot send to {}", dir.display()), e))?;
                }
                Call::Coll { .. } | Call::Recv { .. } => {}
            }
        }

        let mut end = start_ns;
        for item in &self.items {
            let transfer = s.transfer_ns(&item.call, n, scale);
            let last_arrival = match item.call {
                Call::Coll {
                    coll,
                    dtype,
                    op,
                    root,
                    ..
                } => self.collective(item, coll, dtype, op, root, start_ns, deadline)?,
                Call::Send { .. } => start_ns,
                Call::Recv { peer, .. } => {
                    let path = folder::p2p_file(dir, peer, me, item.seq);
                    let (h, data) = self.wait(&path, peer, true, deadline, &item.call)?;
                    let want = Header::of(&item.call, h.start_ns);
                    if h != want {
                        return Err(Stop::Failed(mismatch(me, &item.call, peer, &h)));
                    }
                    self.output(item, 0, &data);
                    let _ = std::fs::remove_file(&path);
                    start_ns.max(h.start_ns)
                }
            };
            end = end.max(last_arrival.saturating_add(transfer));
        }

        // Every rank has read this rank's earlier arrivals once it arrived here: they go.
        if !published.is_empty() {
            let old = std::mem::replace(&mut comm.state().old_files, published);
            for f in old {
                let _ = std::fs::remove_file(f);
            }
        }
        Ok(end)
    }

    /// Waits for every rank's arrival at collective `item`, checks they made the same call,
    /// and writes this rank's result; returns the last arrival's time.
    #[allow(clippy::too_many_arguments)]
    fn collective(
        &self,
        item: &Item,
        coll: Coll,
        dtype: DataType,
        op: RedOp,
        root: usize,
        start_ns: u64,
        deadline: Instant,
    ) -> Result<u64, Stop> {
        let comm = &*self.comm;
        let (me, n) = (comm.rank, comm.nranks);
        let own = Header::of(&item.call, start_ns);
        let mut last = start_ns;
        let mut acc: Option<Vec<u8>> = None;
        let (_, out_bytes) = item.call.bytes(me, n).unwrap_or((0, 0));
        for r in 0..n {
            // Whose input this rank needs: all of them to reduce (a reduce's root only) and
            // gather, the root's to broadcast.
            let needed = match coll {
                Coll::AllReduce | Coll::ReduceScatter | Coll::AllGather => true,
                Coll::Reduce => me == root,
                Coll::Broadcast => r == root,
            };
            let theirs;
            let input: &[u8] = if r == me {
                self.input(item)
            } else {
                let path = folder::coll_file(&comm.dir, item.seq, r);
                let (h, data) = self.wait(&path, r, needed, deadline, &item.call)?;
                if (Header { start_ns: 0, ..h }) != (Header { start_ns: 0, ..own }) {
                    return Err(Stop::Failed(mismatch(me, &item.call, r, &h)));
                }
                last = last.max(h.start_ns);
                theirs = data;
                &theirs
            };
            if !needed {
                continue;
            }
            match coll {
                Coll::Broadcast | Coll::AllGather => {
                    let at = if coll == Coll::AllGather {
                        r * input.len()
                    } else {
                        0
                    };
                    self.output(item, at, input);
                }
                Coll::AllReduce | Coll::Reduce | Coll::ReduceScatter => {
                    let part = if coll == Coll::ReduceScatter {
                        let at = me * out_bytes;
                        input.get(at..at + out_bytes).unwrap_or_default()
                    } else {
                        input
                    };
                    match &mut acc {
                        None => acc = Some(part.to_vec()),
                        Some(a) => reduce::combine_into(a, part, dtype, op),
                    }
                }
            }
        }
        if let Some(mut a) = acc {
            reduce::finish(&mut a, dtype, op, n);
            self.output(item, 0, &a);
        }
        Ok(last)
    }

    /// Polls for a peer's published file, sleeping between looks; fails when the peer left
    /// or died first, or the wait passes the deadline.
    fn wait(
        &self,
        path: &Path,
        peer: usize,
        payload: bool,
        deadline: Instant,
        call: &Call,
    ) -> Result<(Header, Vec<u8>), Stop> {
        let comm = &*self.comm;
        let mut backoff = Backoff::new(Duration::from_millis(1));
        let mut next_check = Instant::now() + LIVENESS_EVERY;
        loop {
            match folder::read(path, payload) {
                Ok(Some(found)) => return Ok(found),
                Ok(None) => {}
                Err(e) => return Err(system(format!("cannot read {}", path.display()), e)),
            }
            if comm.aborted.load(std::sync::atomic::Ordering::Acquire) {
                return Err(Stop::Aborted);
            }
            let now = Instant::now();
            if now > deadline {
                return Err(Stop::Failed(fail(
                    ncclResult_t::ncclSystemError,
                    format!(
                        "{} timed out after {:?} (SIMNCCL_TIMEOUT_S) waiting for rank {peer}",
                        call.describe(),
                        settings().timeout()
                    ),
                )));
            }
            if now > next_check {
                next_check = now + LIVENESS_EVERY;
                // Looked for once more after the check: it may have arrived meanwhile.
                if let Some(why) = self.absent(peer) {
                    if let Ok(Some(found)) = folder::read(path, payload) {
                        return Ok(found);
                    }
                    return Err(Stop::Failed(fail(
                        ncclResult_t::ncclRemoteError,
                        format!("rank {peer} {why} before reaching {}", call.describe()),
                    )));
                }
            }
            backoff.sleep();
        }
    }

    /// Why `peer` will never arrive, if it will not: it left the communicator, or its
    /// process is gone.
    fn absent(&self, peer: usize) -> Option<String> {
        let comm = &*self.comm;
        if folder::has_left(&comm.dir, peer) {
            return Some("left the communicator".into());
        }
        let pid = *comm.pids.get()?.get(peer)?;
        if pid <= 0 {
            return None;
        }
        // SAFETY: signal 0 only asks whether the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        gone.then(|| format!("(pid {pid}) exited"))
    }

    /// This rank's input of `item`.
    fn input(&self, item: &Item) -> &[u8] {
        let (len, _) = item
            .call
            .bytes(self.comm.rank, self.comm.nranks)
            .unwrap_or((0, 0));
        if len == 0 {
            return &[];
        }
        // SAFETY: at the call `send..send+len` was found inside a live allocation, which the
        // operation keeps mapped (`Op::keep`; checked not freed before running).
        unsafe { std::slice::from_raw_parts(item.send as *const u8, len) }
    }

    /// Writes `data` into the receive buffer of `item` at byte `at`, within its size.
    fn output(&self, item: &Item, at: usize, data: &[u8]) {
        let (_, len) = item
            .call
            .bytes(self.comm.rank, self.comm.nranks)
            .unwrap_or((0, 0));
        let n = data.len().min(len.saturating_sub(at));
        if n == 0 {
            return;
        }
        // SAFETY: as in `input`, for `recv..recv+len`; `at + n <= len`. `ptr::copy` allows the
        // overlap of an in-place call (the input was read before).
        unsafe { std::ptr::copy(data.as_ptr(), (item.recv as *mut u8).add(at), n) };
    }
}

fn mismatch(me: usize, call: &Call, peer: usize, theirs: &Header) -> Failure {
    fail(
        ncclResult_t::ncclInvalidUsage,
        format!(
            "rank {me} called {} where rank {peer} called {}",
            call.describe(),
            theirs.describe()
        ),
    )
}

/// This rank's files in a folder, for tests of the clean-up.
#[cfg(test)]
fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_rank_reduces_its_own_input() {
        let dir = std::env::temp_dir().join(format!("simnccl-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let comm = Comm::new(dir.clone(), 1, 0, 0);
        let mut buf = [1.5f32, 2.0];
        let item = Item {
            call: Call::Coll {
                coll: Coll::AllReduce,
                dtype: DataType::F32,
                op: RedOp::Avg,
                root: 0,
                count: 2,
            },
            send: buf.as_ptr() as usize,
            recv: buf.as_mut_ptr() as usize,
            seq: 0,
        };
        let work = NcclWork {
            comm,
            items: vec![item],
        };
        let (ran, end) = work.run(1000, crate::runtime::runtime().config.time_scale());
        assert!(ran.is_ok());
        assert!(end > 1000);
        assert_eq!(buf, [1.5, 2.0]);
        assert!(files(&dir).is_empty(), "a lone rank publishes nothing");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
