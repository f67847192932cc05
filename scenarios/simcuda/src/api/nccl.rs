//! The NCCL C API (`nccl.h` of NCCL 2.2x), over the simulated NCCL of `crate::nccl`.
//!
//! Every entry point catches panics (`ncclInternalError`) and keeps the message of a failure
//! for `ncclGetLastError`. Enum parameters (`ncclDataType_t`, `ncclRedOp_t`) are taken as
//! `int`, their C representation, and checked: a C caller may pass any value.
#![allow(non_snake_case, non_camel_case_types)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::runtime::sys::cudaStream_t;

use crate::memory::{Allocation, MemKind};
use crate::nccl::exec::{Item, NcclWork};
use crate::nccl::{
    self, fail, invalid, Call, Coll, Comm, DataType, Failure, NcclResult, RedOp, ID_BYTES,
};
use crate::runtime::runtime;
use crate::stream::StreamId;
use crate::work::{Op, Work};

pub use crate::nccl::ncclResult_t;
use ncclResult_t::*;

/// `NCCL_VERSION_CODE` of the NCCL this stands in for: 2.21.5.
pub const SIMNCCL_VERSION_CODE: c_int = 22105;

/// `ncclUniqueId`: 128 bytes, passed by value to `ncclCommInitRank`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclUniqueId {
    pub internal: [c_char; ID_BYTES],
}

/// `ncclComm_t`: an opaque handle.
pub type ncclComm_t = *mut c_void;

fn entry(body: impl FnOnce() -> NcclResult) -> ncclResult_t {
    let failure = match panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return ncclSuccess,
        Ok(Err(f)) => f,
        Err(_) => fail(ncclInternalError, "the simulated NCCL panicked"),
    };
    nccl::set_last_error(&failure.message);
    failure.code
}

fn comm_of(handle: ncclComm_t) -> NcclResult<Arc<Comm>> {
    if handle.is_null() {
        return Err(invalid("comm is NULL"));
    }
    nccl::lookup(handle as usize as u64)
}

fn to_handle(comm: &Comm) -> ncclComm_t {
    comm.handle as usize as ncclComm_t
}

/// An out-parameter checked for null.
fn out<T>(p: *mut T, what: &str) -> NcclResult<*mut T> {
    if p.is_null() {
        Err(invalid(format!("{what} is NULL")))
    } else {
        Ok(p)
    }
}

fn rank_arg(v: c_int, nranks: usize, what: &str) -> NcclResult<usize> {
    usize::try_from(v)
        .ok()
        .filter(|r| *r < nranks)
        .ok_or_else(|| invalid(format!("{what} {v} is not a rank of {nranks}")))
}

/// A call waiting to be launched, with its stream and the memory it keeps mapped.
struct Pending {
    comm: Arc<Comm>,
    stream: StreamId,
    call: Call,
    send: usize,
    recv: usize,
    keep: Vec<Arc<Allocation>>,
}

/// The calling thread's group (`ncclGroupStart` ... `ncclGroupEnd`).
#[derive(Default)]
struct Group {
    depth: u32,
    calls: Vec<Pending>,
    /// Communicators initialized inside the group: they meet their other ranks at its end.
    inits: Vec<Arc<Comm>>,
    /// The first error of a call inside the group, returned by its end.
    error: Option<Failure>,
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

fn in_group() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

/// A buffer of `len` bytes at `addr` that the comm's device can reach: inside one allocation
/// of the simulator, and if device memory, on the comm's device.
fn buffer(
    addr: *const c_void,
    len: usize,
    comm: &Comm,
    what: &str,
) -> NcclResult<Option<Arc<Allocation>>> {
    if len == 0 {
        return Ok(None);
    }
    if addr.is_null() {
        return Err(invalid(format!("{what} is NULL")));
    }
    let map = runtime().memory();
    let alloc = map
        .find(addr as usize)
        .filter(|a| a.contains(addr as usize, len))
        .ok_or_else(|| {
            invalid(format!(
                "{what} {addr:p} (+{len} bytes) is not memory the device can reach"
            ))
        })?;
    if alloc.kind == MemKind::Device && alloc.device != comm.device {
        return Err(invalid(format!(
            "{what} {addr:p} is on device {}, the communicator's is {}",
            alloc.device, comm.device
        )));
    }
    Ok(Some(Arc::clone(alloc)))
}

/// Checks one call and launches it, or holds it until the group's end.
fn submit(
    comm: ncclComm_t,
    stream: cudaStream_t,
    make: impl FnOnce(&Comm) -> NcclResult<Call>,
    send: *const c_void,
    recv: *mut c_void,
) -> NcclResult {
    let checked = (|| {
        let comm = comm_of(comm)?;
        let call = make(&comm)?;
        let (n_in, n_out) = call
            .bytes(comm.rank, comm.nranks)
            .ok_or_else(|| invalid("count too large"))?;
        let mut keep = Vec::new();
        keep.extend(buffer(send, n_in, &comm, "sendbuff")?);
        keep.extend(buffer(recv.cast_const(), n_out, &comm, "recvbuff")?);
        let rt = runtime();
        let mut g = rt.sched.lock();
        let id = rt
            .resolve_stream(&mut g, stream, false)
            .map_err(|e| fail(ncclUnhandledCudaError, format!("stream {stream:p}: {e:?}")))?;
        let device = g.stream(id).map(|s| s.device).unwrap_or(usize::MAX);
        if device != comm.device {
            return Err(fail(
                ncclUnhandledCudaError,
                format!(
                    "stream {stream:p} is on device {device}, the communicator's is {}",
                    comm.device
                ),
            ));
        }
        Ok(Pending {
            comm,
            stream: id,
            call,
            send: send as usize,
            recv: recv as usize,
            keep,
        })
    })();
    if in_group() {
        return GROUP.with(|g| {
            let mut g = g.borrow_mut();
            match checked {
                Ok(p) => {
                    g.calls.push(p);
                    Ok(())
                }
                Err(f) => {
                    g.error.get_or_insert_with(|| f.clone());
                    Err(f)
                }
            }
        });
    }
    launch(vec![checked?])
}

/// Enqueues calls: one operation per communicator, on the stream of its first call (the
/// group's other streams wait for it, and it for their earlier work), after the
/// communicator's previous operation.
fn launch(calls: Vec<Pending>) -> NcclResult {
    let mut by_comm: Vec<(Arc<Comm>, Vec<Pending>)> = Vec::new();
    for p in calls {
        match by_comm.iter_mut().find(|(c, _)| c.handle == p.comm.handle) {
            Some((_, v)) => v.push(p),
            None => by_comm.push((Arc::clone(&p.comm), vec![p])),
        }
    }
    // Two ranks of one communicator queued on one stream would wait for each other forever.
    for (i, (a, ca)) in by_comm.iter().enumerate() {
        for (b, cb) in &by_comm[i + 1..] {
            let shared = ca.iter().any(|p| cb.iter().any(|q| q.stream == p.stream));
            if a.dir == b.dir && shared {
                return Err(fail(
                    ncclInvalidUsage,
                    format!(
                        "ranks {} and {} of one communicator on the same stream",
                        a.rank, b.rank
                    ),
                ));
            }
        }
    }
    let rt = runtime();
    for (comm, calls) in by_comm {
        let mut g = rt.sched.lock();
        let mut streams: Vec<StreamId> = Vec::new();
        for p in &calls {
            g.stream(p.stream)
                .map_err(|e| fail(ncclUnhandledCudaError, format!("stream: {e:?}")))?;
            if !streams.contains(&p.stream) {
                streams.push(p.stream);
            }
        }
        let mut st = comm.state();
        let mut keep = Vec::new();
        let mut items = Vec::new();
        for p in calls {
            let seq = match p.call {
                Call::Coll { .. } => {
                    st.next_seq += 1;
                    st.next_seq
                }
                Call::Send { peer, .. } => {
                    st.sent[peer] += 1;
                    st.sent[peer]
                }
                Call::Recv { peer, .. } => {
                    st.received[peer] += 1;
                    st.received[peer]
                }
            };
            keep.extend(p.keep);
            items.push(Item {
                call: p.call,
                send: p.send,
                recv: p.recv,
                seq,
            });
        }
        let mut deps: Vec<_> = st.last.iter().filter(|d| !d.is_done()).cloned().collect();
        for s in &streams[1..] {
            deps.extend(g.stream(*s).ok().and_then(|s| s.pending_tail()));
        }
        let op = Op {
            work: Work::Nccl(NcclWork {
                comm: Arc::clone(&comm),
                items,
            }),
            engine: None,
            duration_ns: 0,
            keep,
        };
        let done = rt
            .sched
            .enqueue(&mut g, streams[0], op, deps, 0)
            .map_err(|e| fail(ncclUnhandledCudaError, format!("enqueue: {e:?}")))?;
        for s in &streams[1..] {
            let _ = rt
                .sched
                .enqueue(&mut g, *s, Op::marker(), vec![Arc::clone(&done)], 0);
        }
        st.last = Some(done);
    }
    Ok(())
}

/// `ncclGetVersion`: 2.21.5 (22105).
///
/// # Safety
/// `version` is null or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> ncclResult_t {
    entry(|| {
        let p = out(version, "version")?;
        // SAFETY: non-null; valid by the caller's contract.
        unsafe { p.write(SIMNCCL_VERSION_CODE) };
        Ok(())
    })
}

/// `ncclGetUniqueId`: makes a folder in `$SIMNCCL_DIR` for a new communicator; the id names it.
///
/// # Safety
/// `unique_id` is null or valid for writing an `ncclUniqueId`.
#[no_mangle]
pub unsafe extern "C" fn ncclGetUniqueId(unique_id: *mut ncclUniqueId) -> ncclResult_t {
    entry(|| {
        let p = out(unique_id, "uniqueId")?;
        let bytes = nccl::new_id()?;
        let mut id = ncclUniqueId {
            internal: [0; ID_BYTES],
        };
        for (d, s) in id.internal.iter_mut().zip(bytes) {
            *d = s as c_char;
        }
        // SAFETY: non-null; valid by the caller's contract.
        unsafe { p.write(id) };
        Ok(())
    })
}

fn id_bytes(id: &ncclUniqueId) -> [u8; ID_BYTES] {
    let mut b = [0u8; ID_BYTES];
    for (d, s) in b.iter_mut().zip(id.internal) {
        *d = s as u8;
    }
    b
}

/// Registers a rank on `device` and, outside a group, waits for the others.
fn init_rank(
    nranks: c_int,
    id: &[u8; ID_BYTES],
    rank: c_int,
    device: usize,
) -> NcclResult<Arc<Comm>> {
    let nranks = usize::try_from(nranks)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| invalid(format!("nranks {nranks} is not at least 1")))?;
    let rank = rank_arg(rank, nranks, "rank")?;
    let dir = nccl::register(id, rank, nranks, device)?;
    let comm = Comm::new(dir, nranks, rank, device);
    if in_group() {
        GROUP.with(|g| g.borrow_mut().inits.push(Arc::clone(&comm)));
    } else {
        meet(&comm)?;
    }
    nccl::add(&comm);
    Ok(comm)
}

/// Waits until every rank of `comm` has registered.
fn meet(comm: &Comm) -> NcclResult {
    match nccl::rendezvous(&comm.dir, comm.nranks, nccl::settings().timeout()) {
        Ok(pids) => {
            let _ = comm.pids.set(pids);
            Ok(())
        }
        Err(f) => {
            nccl::unregister(&comm.dir, comm.rank);
            Err(f)
        }
    }
}

/// # Safety
/// `comm` is null or valid for writing an `ncclComm_t`.
unsafe fn init_entry(
    comm: *mut ncclComm_t,
    nranks: c_int,
    id: &ncclUniqueId,
    rank: c_int,
) -> ncclResult_t {
    entry(|| {
        let p = out(comm, "comm")?;
        let device = runtime()
            .current_device()
            .map_err(|e| fail(ncclUnhandledCudaError, format!("no device: {e:?}")))?;
        let c = init_rank(nranks, &id_bytes(id), rank, device)?;
        // SAFETY: non-null; valid by the caller's contract.
        unsafe { p.write(to_handle(&c)) };
        Ok(())
    })
}

/// `ncclCommInitRank`: joins rank `rank` of `nranks` on the current device to the
/// communicator of `comm_id`; waits until every rank has joined (inside a group: at its end).
///
/// # Safety
/// `comm` is null or valid for writing an `ncclComm_t`.
#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut ncclComm_t,
    nranks: c_int,
    comm_id: ncclUniqueId,
    rank: c_int,
) -> ncclResult_t {
    // SAFETY: the caller's contract.
    unsafe { init_entry(comm, nranks, &comm_id, rank) }
}

/// `ncclCommInitRankConfig`: as `ncclCommInitRank`; the configuration is ignored (the
/// communicator is always blocking).
///
/// # Safety
/// `comm` is null or valid for writing an `ncclComm_t`.
#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    comm: *mut ncclComm_t,
    nranks: c_int,
    comm_id: ncclUniqueId,
    rank: c_int,
    _config: *mut c_void,
) -> ncclResult_t {
    // SAFETY: the caller's contract.
    unsafe { init_entry(comm, nranks, &comm_id, rank) }
}

/// `ncclCommInitAll`: one process, `ndev` ranks on the devices of `devlist` (or 0..ndev).
///
/// # Safety
/// `comms` is null or valid for writing `ndev` handles; `devlist` is null or holds `ndev`
/// ints.
#[no_mangle]
pub unsafe extern "C" fn ncclCommInitAll(
    comms: *mut ncclComm_t,
    ndev: c_int,
    devlist: *const c_int,
) -> ncclResult_t {
    entry(|| {
        let p = out(comms, "comms")?;
        let n = usize::try_from(ndev)
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| invalid(format!("ndev {ndev} is not at least 1")))?;
        let rt = runtime();
        let devices: Vec<usize> = (0..n)
            .map(|i| {
                let d = if devlist.is_null() {
                    i as c_int
                } else {
                    // SAFETY: `devlist` holds `ndev` ints by the caller's contract.
                    unsafe { *devlist.add(i) }
                };
                rt.device_index(d)
                    .map_err(|_| invalid(format!("device {d} does not exist")))
            })
            .collect::<NcclResult<_>>()?;
        let id = nccl::new_id()?;
        let mut made = Vec::new();
        for (r, d) in devices.into_iter().enumerate() {
            let dir = nccl::register(&id, r, n, d)?;
            made.push(Comm::new(dir, n, r, d));
        }
        for c in &made {
            if let Err(f) = meet(c) {
                for c in &made {
                    nccl::unregister(&c.dir, c.rank);
                }
                return Err(f);
            }
        }
        for (i, c) in made.iter().enumerate() {
            nccl::add(c);
            // SAFETY: `comms` holds `ndev` handles by the caller's contract.
            unsafe { p.add(i).write(to_handle(c)) };
        }
        Ok(())
    })
}

/// Waits until the communicator's operations enqueued so far are done.
fn drain(comm: &Comm) {
    let rt = runtime();
    let g = rt.sched.lock();
    let last: Vec<_> = comm.state().last.iter().cloned().collect();
    drop(rt.sched.wait_for(g, &last));
}

/// `ncclCommFinalize`: waits for the communicator's operations.
#[no_mangle]
pub extern "C" fn ncclCommFinalize(comm: ncclComm_t) -> ncclResult_t {
    entry(|| {
        drain(&*comm_of(comm)?);
        Ok(())
    })
}

/// `ncclCommDestroy`: waits for this rank's operations, then leaves; the last rank to leave
/// removes the communicator's folder. A null communicator is fine.
#[no_mangle]
pub extern "C" fn ncclCommDestroy(comm: ncclComm_t) -> ncclResult_t {
    entry(|| {
        if comm.is_null() {
            return Ok(());
        }
        let c = nccl::remove(comm as usize as u64)?;
        drain(&c);
        nccl::leave(&c.dir, c.rank, c.nranks);
        Ok(())
    })
}

/// `ncclCommAbort`: this rank's pending operations end at once, and it leaves.
#[no_mangle]
pub extern "C" fn ncclCommAbort(comm: ncclComm_t) -> ncclResult_t {
    entry(|| {
        if comm.is_null() {
            return Ok(());
        }
        let c = nccl::remove(comm as usize as u64)?;
        c.aborted.store(true, std::sync::atomic::Ordering::Release);
        nccl::leave(&c.dir, c.rank, c.nranks);
        Ok(())
    })
}

fn query(
    comm: ncclComm_t,
    value: *mut c_int,
    what: &str,
    f: impl FnOnce(&Comm) -> usize,
) -> ncclResult_t {
    entry(|| {
        let c = comm_of(comm)?;
        let p = out(value, what)?;
        // SAFETY: non-null; valid by the caller's contract (the exported function's).
        unsafe { p.write(f(&c) as c_int) };
        Ok(())
    })
}

/// `ncclCommCount`.
///
/// # Safety
/// `count` is null or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn ncclCommCount(comm: ncclComm_t, count: *mut c_int) -> ncclResult_t {
    query(comm, count, "count", |c| c.nranks)
}

/// `ncclCommCuDevice`.
///
/// # Safety
/// `device` is null or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn ncclCommCuDevice(comm: ncclComm_t, device: *mut c_int) -> ncclResult_t {
    query(comm, device, "device", |c| c.device)
}

/// `ncclCommUserRank`.
///
/// # Safety
/// `rank` is null or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn ncclCommUserRank(comm: ncclComm_t, rank: *mut c_int) -> ncclResult_t {
    query(comm, rank, "rank", |c| c.rank)
}

/// `ncclCommGetAsyncError`: the first failure of the communicator's operations, or
/// `ncclSuccess`.
///
/// # Safety
/// `async_error` is null or valid for writing an `ncclResult_t`.
#[no_mangle]
pub unsafe extern "C" fn ncclCommGetAsyncError(
    comm: ncclComm_t,
    async_error: *mut ncclResult_t,
) -> ncclResult_t {
    entry(|| {
        let c = comm_of(comm)?;
        let p = out(async_error, "asyncError")?;
        // SAFETY: non-null; valid by the caller's contract.
        unsafe { p.write(c.async_error()) };
        Ok(())
    })
}

/// `ncclGetErrorString`.
#[no_mangle]
pub extern "C" fn ncclGetErrorString(result: c_int) -> *const c_char {
    ncclResult_t::describe(result).as_ptr()
}

/// `ncclGetLastError`: the message of the last failure in this process (any communicator).
#[no_mangle]
pub extern "C" fn ncclGetLastError(_comm: ncclComm_t) -> *const c_char {
    nccl::last_error()
}

fn coll(
    coll: Coll,
    count: usize,
    dtype: c_int,
    op: c_int,
    root: c_int,
) -> impl FnOnce(&Comm) -> NcclResult<Call> {
    move |c| {
        let dtype = DataType::from_raw(dtype)?;
        let op = if coll.reduces() {
            RedOp::from_raw(op)?
        } else {
            RedOp::Sum
        };
        let root = if matches!(coll, Coll::Broadcast | Coll::Reduce) {
            rank_arg(root, c.nranks, "root")?
        } else {
            0
        };
        Ok(Call::Coll {
            coll,
            dtype,
            op,
            root,
            count,
        })
    }
}

/// `ncclAllReduce`.
///
/// # Safety
/// The buffers hold `count` elements and stay valid until the operation has run, as NCCL
/// requires.
#[no_mangle]
pub unsafe extern "C" fn ncclAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    entry(|| {
        submit(
            comm,
            stream,
            coll(Coll::AllReduce, count, datatype, op, 0),
            sendbuff,
            recvbuff,
        )
    })
}

/// `ncclBroadcast`.
///
/// # Safety
/// As [`ncclAllReduce`] (`sendbuff` is read on the root only).
#[no_mangle]
pub unsafe extern "C" fn ncclBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    entry(|| {
        submit(
            comm,
            stream,
            coll(Coll::Broadcast, count, datatype, 0, root),
            sendbuff,
            recvbuff,
        )
    })
}

/// `ncclBcast`: the in-place broadcast.
///
/// # Safety
/// As [`ncclAllReduce`].
#[no_mangle]
pub unsafe extern "C" fn ncclBcast(
    buff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    entry(|| {
        submit(
            comm,
            stream,
            coll(Coll::Broadcast, count, datatype, 0, root),
            buff,
            buff,
        )
    })
}

/// `ncclReduce`.
///
/// # Safety
/// As [`ncclAllReduce`] (`recvbuff` is written on the root only).
#[no_mangle]
pub unsafe extern "C" fn ncclReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    entry(|| {
        submit(
            comm,
            stream,
            coll(Coll::Reduce, count, datatype, op, root),
            sendbuff,
            recvbuff,
        )
    })
}

/// `ncclAllGather`: `recvbuff` holds `sendcount` elements per rank.
///
/// # Safety
/// As [`ncclAllReduce`].
#[no_mangle]
pub unsafe extern "C" fn ncclAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    entry(|| {
        submit(
            comm,
            stream,
            coll(Coll::AllGather, sendcount, datatype, 0, 0),
            sendbuff,
            recvbuff,
        )
    })
}

/// `ncclReduceScatter`: `sendbuff` holds `recvcount` elements per rank.
///
/// # Safety
/// As [`ncclAllReduce`].
#[no_mangle]
pub unsafe extern "C" fn ncclReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: c_int,
    op: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    entry(|| {
        submit(
            comm,
            stream,
            coll(Coll::ReduceScatter, recvcount, datatype, op, 0),
            sendbuff,
            recvbuff,
        )
    })
}

fn p2p(
    send: bool,
    count: usize,
    dtype: c_int,
    peer: c_int,
) -> impl FnOnce(&Comm) -> NcclResult<Call> {
    move |c| {
        let dtype = DataType::from_raw(dtype)?;
        let peer = rank_arg(peer, c.nranks, "peer")?;
        Ok(if send {
            Call::Send { peer, dtype, count }
        } else {
            Call::Recv { peer, dtype, count }
        })
    }
}

/// `ncclSend`: completes once the data is handed over (the receiver need not be there yet).
///
/// # Safety
/// As [`ncclAllReduce`].
#[no_mangle]
pub unsafe extern "C" fn ncclSend(
    sendbuff: *const c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    entry(|| {
        submit(
            comm,
            stream,
            p2p(true, count, datatype, peer),
            sendbuff,
            std::ptr::null_mut(),
        )
    })
}

/// `ncclRecv`: completes once the matching send has arrived.
///
/// # Safety
/// As [`ncclAllReduce`].
#[no_mangle]
pub unsafe extern "C" fn ncclRecv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    entry(|| {
        submit(
            comm,
            stream,
            p2p(false, count, datatype, peer),
            std::ptr::null(),
            recvbuff,
        )
    })
}

/// `ncclGroupStart`: calls are held until the outermost `ncclGroupEnd`.
#[no_mangle]
pub extern "C" fn ncclGroupStart() -> ncclResult_t {
    entry(|| {
        GROUP.with(|g| g.borrow_mut().depth += 1);
        Ok(())
    })
}

/// `ncclGroupEnd`: at the outermost one, communicators initialized in the group meet their
/// other ranks, then the held calls are launched; the group's first error (then nothing is
/// launched) or the launch's is returned.
#[no_mangle]
pub extern "C" fn ncclGroupEnd() -> ncclResult_t {
    entry(|| {
        let group = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            match g.depth {
                0 => Err(fail(
                    ncclInvalidUsage,
                    "ncclGroupEnd without ncclGroupStart",
                )),
                1 => Ok(Some(std::mem::take(&mut *g))),
                _ => {
                    g.depth -= 1;
                    Ok(None)
                }
            }
        })?;
        let Some(group) = group else {
            return Ok(());
        };
        for c in &group.inits {
            if let Err(f) = meet(c) {
                // None of them can work: their handles go, with every registration.
                for c in &group.inits {
                    let _ = nccl::remove(c.handle);
                    nccl::unregister(&c.dir, c.rank);
                }
                return Err(f);
            }
        }
        if let Some(e) = group.error {
            return Err(e);
        }
        launch(group.calls)
    })
}
