//! A simulated NCCL: communicators whose ranks are processes (or threads of one process), each
//! running its own simulator, that meet in a folder.
//!
//! **Meeting.** `ncclGetUniqueId` makes a fresh sub-folder of `$SIMNCCL_DIR` and writes its
//! path into the id; every rank's `ncclCommInitRank` with that id registers there
//! (`rank<R>`: its pid, the communicator's size, its device) and waits until all ranks have
//! registered, as NCCL's init waits for the others.
//!
//! **Collectives and point-to-point calls** are work on the caller's stream like a kernel
//! (`exec::NcclWork`), in the order the program makes them; a communicator's operations also
//! run one after another in each process (NCCL orders them on an internal stream). When the
//! stream's worker reaches a collective it publishes this rank's arrival
//! (`c<seq>.r<rank>`: the call, the modeled time the stream reached it, the rank's input),
//! then polls, sleeping between looks, for every other rank's arrival at the same sequence
//! number, checks that they made the same call, computes the real result into the output
//! buffer, and completes at the modeled time the last rank arrived plus a transfer time. So
//! CUDA events recorded before and after it on the stream span the time this rank's GPU spent
//! in it, the wait for the late rank included, as on a GPU. `ncclSend` / `ncclRecv` pass
//! their data through files (`p<from>-<to>.<n>`, the n-th message between the two): a send
//! completes once its data is written (eager), a receive once the matching send arrived.
//! Inside `ncclGroupStart` / `ncclGroupEnd` calls are held and enqueued at the outermost end,
//! one operation per communicator that publishes all its calls before waiting for any, so
//! matched sends and receives inside a group cannot deadlock.
//!
//! **Leaving.** A rank removes its own arrivals once every rank has moved past them, and
//! `ncclCommDestroy` (after the rank's operations finished) or `ncclCommAbort` leaves a
//! `gone.r<rank>` mark; the rank that finds every mark removes the folder.
//!
//! **Failures** never hang a test forever: a rank whose peer left or died (its pid is gone)
//! before reaching a collective, that made another call at the same sequence number, or that
//! waited longer than `SIMNCCL_TIMEOUT_S`, fails the operation: the stream's device gets the
//! sticky `cudaErrorLaunchFailure`, the communicator's asynchronous error
//! (`ncclCommGetAsyncError`) is set, and the simulator says why once on stderr.
//!
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `SIMNCCL_DIR` | where communicators meet (must exist); read by `ncclGetUniqueId` (a Rust caller may set it with `simcudart::set_nccl_dir`) | none: `ncclGetUniqueId` fails |
//! | `SIMNCCL_GBPS` | bus bandwidth of the transfer model | 100 |
//! | `SIMNCCL_LATENCY_US` | fixed cost of every collective and message | 10 |
//! | `SIMNCCL_TIMEOUT_S` | longest wait for the other ranks (init and each operation) | 600 |
//!
//! The transfer time after the last arrival is the ring algorithm's traffic per rank over
//! the bandwidth, plus the latency, times `SIMCUDA_TIME_SCALE`: all-reduce moves
//! 2 (n-1)/n of the buffer, all-gather and reduce-scatter (n-1)/n of the whole output or
//! input, broadcast, reduce and messages the buffer once.

pub(crate) mod exec;
mod folder;
mod reduce;

use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::path::PathBuf;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use crate::completion::Completion;

pub(crate) use folder::{leave, new_id, register, rendezvous, set_dir, unregister, ID_BYTES};

/// `ncclResult_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum ncclResult_t {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
}

impl ncclResult_t {
    fn from_raw(v: u32) -> Option<Self> {
        use ncclResult_t::*;
        [
            ncclSuccess,
            ncclUnhandledCudaError,
            ncclSystemError,
            ncclInternalError,
            ncclInvalidArgument,
            ncclInvalidUsage,
            ncclRemoteError,
            ncclInProgress,
        ]
        .into_iter()
        .find(|c| *c as u32 == v)
    }

    /// What `ncclGetErrorString` says.
    pub(crate) fn describe(code: i32) -> &'static CStr {
        use ncclResult_t::*;
        match u32::try_from(code).ok().and_then(Self::from_raw) {
            Some(ncclSuccess) => c"no error",
            Some(ncclUnhandledCudaError) => c"unhandled cuda error",
            Some(ncclSystemError) => c"unhandled system error",
            Some(ncclInternalError) => c"internal error",
            Some(ncclInvalidArgument) => c"invalid argument",
            Some(ncclInvalidUsage) => c"invalid usage",
            Some(ncclRemoteError) => c"remote process exited or there was a network error",
            Some(ncclInProgress) => c"NCCL operation in progress",
            None => c"unknown result code",
        }
    }
}

/// A failed call or operation: the code and what went wrong (`ncclGetLastError`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub code: ncclResult_t,
    pub message: String,
}

pub(crate) type NcclResult<T = ()> = Result<T, Failure>;

pub(crate) fn fail(code: ncclResult_t, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

pub(crate) fn invalid(message: impl Into<String>) -> Failure {
    fail(ncclResult_t::ncclInvalidArgument, message)
}

/// `ncclDataType_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataType {
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
    F16,
    F32,
    F64,
    Bf16,
}

impl DataType {
    const ALL: [DataType; 10] = [
        DataType::I8,
        DataType::U8,
        DataType::I32,
        DataType::U32,
        DataType::I64,
        DataType::U64,
        DataType::F16,
        DataType::F32,
        DataType::F64,
        DataType::Bf16,
    ];

    /// The type of an `ncclDataType_t` value; NCCL 2.24's 8-bit floats (10, 11) and anything
    /// else are not simulated.
    pub fn from_raw(v: i32) -> NcclResult<Self> {
        usize::try_from(v)
            .ok()
            .and_then(|i| Self::ALL.get(i).copied())
            .ok_or_else(|| invalid(format!("invalid data type {v}")))
    }

    pub fn raw(self) -> u32 {
        self as u32
    }

    pub fn size(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 => 1,
            DataType::F16 | DataType::Bf16 => 2,
            DataType::I32 | DataType::U32 | DataType::F32 => 4,
            DataType::I64 | DataType::U64 | DataType::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            DataType::F16 | DataType::F32 | DataType::F64 | DataType::Bf16
        )
    }

    /// As NCCL's kernel names spell it.
    fn short(self) -> &'static str {
        match self {
            DataType::I8 => "i8",
            DataType::U8 => "u8",
            DataType::I32 => "i32",
            DataType::U32 => "u32",
            DataType::I64 => "i64",
            DataType::U64 => "u64",
            DataType::F16 => "f16",
            DataType::F32 => "f32",
            DataType::F64 => "f64",
            DataType::Bf16 => "bf16",
        }
    }
}

/// `ncclRedOp_t` (the built-in operations; custom ones from `ncclRedOpCreatePreMulSum` are
/// not simulated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RedOp {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
}

impl RedOp {
    pub fn from_raw(v: i32) -> NcclResult<Self> {
        match v {
            0 => Ok(RedOp::Sum),
            1 => Ok(RedOp::Prod),
            2 => Ok(RedOp::Max),
            3 => Ok(RedOp::Min),
            4 => Ok(RedOp::Avg),
            _ => Err(invalid(format!("invalid reduction operation {v}"))),
        }
    }

    pub fn raw(self) -> u32 {
        self as u32
    }

    /// As NCCL's kernel names spell it (max and min share one kernel; the average is a sum
    /// with a pre-multiplication for floats, a division after for integers).
    fn kernel(self, dtype: DataType) -> &'static str {
        match self {
            RedOp::Sum => "Sum",
            RedOp::Prod => "Prod",
            RedOp::Max | RedOp::Min => "MinMax",
            RedOp::Avg if dtype.is_float() => "PreMulSum",
            RedOp::Avg => "SumPostDiv",
        }
    }
}

/// The collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coll {
    AllReduce,
    Broadcast,
    Reduce,
    AllGather,
    ReduceScatter,
}

impl Coll {
    fn name(self) -> &'static str {
        match self {
            Coll::AllReduce => "AllReduce",
            Coll::Broadcast => "Broadcast",
            Coll::Reduce => "Reduce",
            Coll::AllGather => "AllGather",
            Coll::ReduceScatter => "ReduceScatter",
        }
    }

    fn raw(self) -> u32 {
        self as u32 + 1
    }

    /// Whether it combines the ranks' inputs with an operation.
    pub fn reduces(self) -> bool {
        matches!(self, Coll::AllReduce | Coll::Reduce | Coll::ReduceScatter)
    }
}

/// One call, as the program made it (counts in elements, as NCCL takes them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// `count` is the count the function takes: the whole buffer for all-reduce, broadcast
    /// and reduce, the send count for all-gather, the receive count for reduce-scatter.
    Coll {
        coll: Coll,
        dtype: DataType,
        op: RedOp,
        root: usize,
        count: usize,
    },
    Send {
        peer: usize,
        dtype: DataType,
        count: usize,
    },
    Recv {
        peer: usize,
        dtype: DataType,
        count: usize,
    },
}

impl Call {
    /// Bytes read from the send buffer and written to the receive buffer on rank `rank` of
    /// `nranks`; `None` on overflow.
    pub fn bytes(&self, rank: usize, nranks: usize) -> Option<(usize, usize)> {
        match *self {
            Call::Coll {
                coll,
                dtype,
                root,
                count,
                ..
            } => {
                let one = count.checked_mul(dtype.size())?;
                let all = one.checked_mul(nranks)?;
                Some(match coll {
                    Coll::AllReduce => (one, one),
                    Coll::Broadcast => (if rank == root { one } else { 0 }, one),
                    Coll::Reduce => (one, if rank == root { one } else { 0 }),
                    Coll::AllGather => (one, all),
                    Coll::ReduceScatter => (all, one),
                })
            }
            Call::Send { dtype, count, .. } => Some((count.checked_mul(dtype.size())?, 0)),
            Call::Recv { dtype, count, .. } => Some((0, count.checked_mul(dtype.size())?)),
        }
    }

    /// Bytes each rank moves over the bus (the ring algorithm's), for the transfer time.
    fn traffic(&self, nranks: usize) -> f64 {
        let n = nranks.max(1) as f64;
        let share = (n - 1.0) / n;
        match *self {
            Call::Coll {
                coll, dtype, count, ..
            } => {
                let one = count as f64 * dtype.size() as f64;
                match coll {
                    Coll::AllReduce => 2.0 * share * one,
                    Coll::AllGather | Coll::ReduceScatter => share * one * n,
                    Coll::Broadcast | Coll::Reduce => one,
                }
            }
            Call::Send { dtype, count, .. } | Call::Recv { dtype, count, .. } => {
                count as f64 * dtype.size() as f64
            }
        }
    }

    /// `AllReduce(count 4, f32, sum)`, for messages.
    pub fn describe(&self) -> String {
        match *self {
            Call::Coll {
                coll,
                dtype,
                op,
                root,
                count,
            } => {
                let mut s = format!("{}(count {count}, {}", coll.name(), dtype.short());
                if coll.reduces() {
                    s.push_str(&format!(", {op:?}"));
                }
                if matches!(coll, Coll::Broadcast | Coll::Reduce) {
                    s.push_str(&format!(", root {root}"));
                }
                s + ")"
            }
            Call::Send { peer, dtype, count } => {
                format!("Send(count {count}, {}, to {peer})", dtype.short())
            }
            Call::Recv { peer, dtype, count } => {
                format!("Recv(count {count}, {}, from {peer})", dtype.short())
            }
        }
    }
}

/// Settings read once from the environment.
#[derive(Debug)]
pub(crate) struct Settings {
    /// Nanoseconds; a Rust caller may change it (`simcudart::set_nccl_timeout`).
    timeout_ns: AtomicU64,
    /// Bytes per nanosecond (numerically GB/s).
    bytes_per_ns: f64,
    latency_ns: f64,
}

pub(crate) fn settings() -> &'static Settings {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    SETTINGS.get_or_init(|| {
        let positive = |name: &str, default: f64| match std::env::var(name).ok() {
            None => default,
            Some(v) => match v.trim().parse::<f64>() {
                Ok(x) if x.is_finite() && x > 0.0 => x,
                _ => {
                    eprintln!("simnccl: ignoring {name}: expected a positive number");
                    default
                }
            },
        };
        Settings {
            timeout_ns: AtomicU64::new((positive("SIMNCCL_TIMEOUT_S", 600.0) * 1e9) as u64),
            bytes_per_ns: positive("SIMNCCL_GBPS", 100.0),
            latency_ns: positive("SIMNCCL_LATENCY_US", 10.0) * 1e3,
        }
    })
}

impl Settings {
    /// The longest wait for the other ranks.
    pub fn timeout(&self) -> Duration {
        Duration::from_nanos(self.timeout_ns.load(Ordering::Relaxed))
    }

    pub fn set_timeout(&self, timeout: Duration) {
        let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        self.timeout_ns.store(ns, Ordering::Relaxed);
    }

    /// Modeled time of `call` among `nranks` once every rank is there.
    pub fn transfer_ns(&self, call: &Call, nranks: usize, time_scale: f64) -> u64 {
        ((self.latency_ns + call.traffic(nranks) / self.bytes_per_ns) * time_scale) as u64
    }
}

/// What a communicator's calls share in this process.
#[derive(Debug, Default)]
pub(crate) struct CommState {
    /// Sequence number of the next collective.
    pub next_seq: u64,
    /// Messages sent to / received from each peer so far.
    pub sent: Vec<u64>,
    pub received: Vec<u64>,
    /// Completion of the newest operation enqueued: the next one runs after it.
    pub last: Option<Arc<Completion>>,
    /// This rank's arrival files of the previous operation with collectives, removed once
    /// an operation with collectives completed after them (every rank has read them then).
    pub old_files: Vec<PathBuf>,
}

/// One rank's communicator.
#[derive(Debug)]
pub(crate) struct Comm {
    pub handle: u64,
    pub dir: PathBuf,
    pub nranks: usize,
    pub rank: usize,
    pub device: usize,
    /// The ranks' pids, known once every rank has registered.
    pub pids: OnceLock<Vec<i32>>,
    pub aborted: AtomicBool,
    /// `ncclResult_t` of the first failed operation, 0 while none failed.
    async_error: AtomicU32,
    state: Mutex<CommState>,
}

impl Comm {
    pub fn new(dir: PathBuf, nranks: usize, rank: usize, device: usize) -> Arc<Comm> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Arc::new(Comm {
            handle: COMM_TAG | NEXT.fetch_add(1, Ordering::Relaxed),
            dir,
            nranks,
            rank,
            device,
            pids: OnceLock::new(),
            aborted: AtomicBool::new(false),
            async_error: AtomicU32::new(0),
            state: Mutex::new(CommState {
                sent: vec![0; nranks],
                received: vec![0; nranks],
                ..CommState::default()
            }),
        })
    }

    pub fn state(&self) -> MutexGuard<'_, CommState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn async_error(&self) -> ncclResult_t {
        ncclResult_t::from_raw(self.async_error.load(Ordering::Acquire))
            .unwrap_or(ncclResult_t::ncclInternalError)
    }

    /// Records an operation's failure: the first one is the communicator's asynchronous error
    /// and is said on stderr.
    pub fn failed(&self, f: &Failure) {
        set_last_error(&f.message);
        let first = self
            .async_error
            .compare_exchange(0, f.code as u32, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if first {
            eprintln!(
                "simnccl: rank {} of {}: {} (the stream's device now reports \
                 cudaErrorLaunchFailure)",
                self.rank, self.nranks, f.message
            );
        }
    }
}

/// Communicator handles carry this tag in their top 16 bits (a non-canonical address, never a
/// real pointer).
const COMM_TAG: u64 = 0x5cc0 << 48;

/// The communicators of this process, by handle. A fork child starts with none (the parent's
/// ranks are the parent's), as its simulator is fresh too.
struct Registry {
    pid: u32,
    comms: Mutex<HashMap<u64, Arc<Comm>>>,
}

static REGISTRY: AtomicPtr<Registry> = AtomicPtr::new(ptr::null_mut());

fn registry() -> &'static Registry {
    let pid = std::process::id();
    loop {
        let current = REGISTRY.load(Ordering::Acquire);
        if !current.is_null() {
            // SAFETY: non-null values come from Box::into_raw below and are never freed.
            let r = unsafe { &*current };
            if r.pid == pid {
                return r;
            }
        }
        let fresh = Box::into_raw(Box::new(Registry {
            pid,
            comms: Mutex::new(HashMap::new()),
        }));
        match REGISTRY.compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: `fresh` was just leaked and is now published for good.
            Ok(_) => return unsafe { &*fresh },
            // SAFETY: nobody else saw `fresh`, which came from Box::into_raw above.
            Err(_) => drop(unsafe { Box::from_raw(fresh) }),
        }
    }
}

fn comms() -> MutexGuard<'static, HashMap<u64, Arc<Comm>>> {
    registry()
        .comms
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn add(comm: &Arc<Comm>) {
    comms().insert(comm.handle, Arc::clone(comm));
}

/// The live communicator of a handle.
pub(crate) fn lookup(handle: u64) -> NcclResult<Arc<Comm>> {
    comms()
        .get(&handle)
        .cloned()
        .ok_or_else(|| invalid(format!("invalid communicator {handle:#x}")))
}

/// Takes a communicator out of the registry: its handle is invalid from now on.
pub(crate) fn remove(handle: u64) -> NcclResult<Arc<Comm>> {
    comms()
        .remove(&handle)
        .ok_or_else(|| invalid(format!("invalid communicator {handle:#x}")))
}

const LAST_ERROR_BYTES: usize = 512;

/// `ncclGetLastError`'s text: one process-wide buffer, as NCCL's, so the pointer handed out
/// stays valid (a later failure rewrites it).
static LAST_ERROR: [AtomicU8; LAST_ERROR_BYTES] = [const { AtomicU8::new(0) }; LAST_ERROR_BYTES];
static LAST_ERROR_WRITER: Mutex<()> = Mutex::new(());

pub(crate) fn set_last_error(message: &str) {
    let _one = LAST_ERROR_WRITER
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let bytes = message.as_bytes();
    let n = bytes.len().min(LAST_ERROR_BYTES - 1);
    for (slot, b) in LAST_ERROR.iter().zip(&bytes[..n]) {
        slot.store(*b, Ordering::Relaxed);
    }
    LAST_ERROR[n].store(0, Ordering::Release);
}

pub(crate) fn last_error() -> *const c_char {
    LAST_ERROR.as_ptr().cast()
}

/// The kernel name CUPTI reports for an operation whose first call is `call`, as NCCL 2.2x
/// names its kernels (`ncclDevKernel_AllReduce_Sum_f32_RING_LL`, `ncclDevKernel_SendRecv`).
pub(crate) fn kernel_name(call: &Call) -> &'static CStr {
    let name = match *call {
        Call::Coll {
            coll: coll @ (Coll::Broadcast | Coll::AllGather),
            ..
        } => format!("ncclDevKernel_{}_RING_LL", coll.name()),
        Call::Coll {
            coll, dtype, op, ..
        } => format!(
            "ncclDevKernel_{}_{}_{}_RING_LL",
            coll.name(),
            op.kernel(dtype),
            dtype.short()
        ),
        Call::Send { .. } | Call::Recv { .. } => "ncclDevKernel_SendRecv".to_string(),
    };
    // A few dozen names at most (collective x operation x type): each is made once and kept.
    static NAMES: Mutex<Vec<&'static CStr>> = Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(n) = names.iter().find(|n| n.to_bytes() == name.as_bytes()) {
        return n;
    }
    let made: &'static CStr = match CString::new(name) {
        Ok(c) => Box::leak(c.into_boxed_c_str()),
        Err(_) => c"ncclDevKernel",
    };
    names.push(made);
    made
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coll(coll: Coll, dtype: DataType, op: RedOp, count: usize) -> Call {
        Call::Coll {
            coll,
            dtype,
            op,
            root: 1,
            count,
        }
    }

    #[test]
    fn kernel_names_follow_nccl() {
        let ar = coll(Coll::AllReduce, DataType::F32, RedOp::Sum, 4);
        assert_eq!(kernel_name(&ar), c"ncclDevKernel_AllReduce_Sum_f32_RING_LL");
        assert!(std::ptr::eq(kernel_name(&ar), kernel_name(&ar)));
        let bc = coll(Coll::Broadcast, DataType::Bf16, RedOp::Max, 4);
        assert_eq!(kernel_name(&bc), c"ncclDevKernel_Broadcast_RING_LL");
        let rs = coll(Coll::ReduceScatter, DataType::I32, RedOp::Avg, 4);
        assert_eq!(
            kernel_name(&rs),
            c"ncclDevKernel_ReduceScatter_SumPostDiv_i32_RING_LL"
        );
        let send = Call::Send {
            peer: 0,
            dtype: DataType::U8,
            count: 1,
        };
        assert_eq!(kernel_name(&send), c"ncclDevKernel_SendRecv");
    }

    #[test]
    fn bytes_per_collective_and_rank() {
        let c = |c| coll(c, DataType::F64, RedOp::Sum, 3);
        assert_eq!(c(Coll::AllReduce).bytes(0, 4), Some((24, 24)));
        assert_eq!(c(Coll::Broadcast).bytes(0, 4), Some((0, 24)));
        assert_eq!(c(Coll::Broadcast).bytes(1, 4), Some((24, 24)));
        assert_eq!(c(Coll::Reduce).bytes(0, 4), Some((24, 0)));
        assert_eq!(c(Coll::AllGather).bytes(2, 4), Some((24, 96)));
        assert_eq!(c(Coll::ReduceScatter).bytes(2, 4), Some((96, 24)));
        let huge = Call::Coll {
            coll: Coll::AllGather,
            dtype: DataType::F64,
            op: RedOp::Sum,
            root: 0,
            count: usize::MAX / 4,
        };
        assert_eq!(huge.bytes(0, 4), None);
    }

    #[test]
    fn raw_values_are_checked() {
        assert_eq!(DataType::from_raw(7), Ok(DataType::F32));
        assert_eq!(DataType::from_raw(9), Ok(DataType::Bf16));
        for bad in [-1, 10, 11, 1000] {
            assert_eq!(
                DataType::from_raw(bad).unwrap_err().code,
                ncclResult_t::ncclInvalidArgument
            );
        }
        assert_eq!(RedOp::from_raw(4), Ok(RedOp::Avg));
        assert!(RedOp::from_raw(5).is_err());
        assert_eq!(ncclResult_t::describe(4), c"invalid argument");
        assert_eq!(ncclResult_t::describe(-3), c"unknown result code");
    }

    #[test]
    fn transfer_time_grows_with_the_traffic() {
        let s = Settings {
            timeout_ns: AtomicU64::new(1),
            bytes_per_ns: 100.0,
            latency_ns: 10_000.0,
        };
        let ar = coll(Coll::AllReduce, DataType::F32, RedOp::Sum, 250_000_000);
        // 1 GB, 4 ranks: 1.5 GB over 100 GB/s = 15 ms, plus 10 us.
        assert_eq!(s.transfer_ns(&ar, 4, 1.0), 15_010_000);
        assert_eq!(s.transfer_ns(&ar, 1, 1.0), 10_000);
        assert_eq!(s.transfer_ns(&ar, 4, 0.5), 7_505_000);
    }

    #[test]
    fn the_last_error_buffer_keeps_a_terminated_prefix() {
        set_last_error(&"x".repeat(2000));
        // SAFETY: the buffer is NUL-terminated by set_last_error.
        let s = unsafe { CStr::from_ptr(last_error()) };
        assert_eq!(s.to_bytes().len(), LAST_ERROR_BYTES - 1);
        set_last_error("short");
        // SAFETY: as above.
        assert_eq!(unsafe { CStr::from_ptr(last_error()) }, c"short");
    }
}
