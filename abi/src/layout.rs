//! The segment header. `Ident` is written once by the creator before the segment becomes
//! visible (it is created under a temporary name and renamed into place); readers copy it
//! once, validate it, and use their copy for every bound. `Live` holds only atomics that
//! writers update while readers poll.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// First eight bytes of every segment.
pub const MAGIC: [u8; 8] = *b"SYNCSPY\0";
/// Incompatible layout changes bump the major version; readers reject other majors.
pub const ABI_MAJOR: u16 = 1;
/// Appended fields bump the minor version; readers accept any minor.
pub const ABI_MINOR: u16 = 8;
/// `clock_id` value: every timestamp is CLOCK_MONOTONIC nanoseconds.
pub const CLOCK_MONOTONIC: u32 = 1;
/// Bytes of the command line kept (NUL-separated argv, truncated).
pub const CMDLINE_MAX: usize = 1024;
/// Slots of per-kind totals; indexed by `Kind as usize`.
pub const KIND_SLOTS: usize = 16;
/// Slots of per-API totals; indexed by `Api as usize`.
pub const API_SLOTS: usize = 64;
/// The ring starts at this offset (the header rounded up to a page).
pub const HEADER_RESERVED: usize = 8192;

/// `Live::state` values (low 32 bits). For `STATE_EXITED` the high 32 bits hold the exit
/// status as passed to `exit`.
pub const STATE_RUNNING: u64 = 1;
pub const STATE_EXITED: u64 = 2;

/// Written once by the creating process, before the segment is renamed into place.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Ident {
    pub magic: [u8; 8],
    pub abi_major: u16,
    pub abi_minor: u16,
    /// Size of `Header` as the writer knows it; readers accept larger.
    pub header_size: u32,
    /// Size of one ring slot (`ring::Slot`), 64.
    pub record_size: u32,
    /// Ring capacity in records, a power of two.
    pub ring_capacity: u32,
    pub ring_offset: u64,
    /// Call-site table capacity in entries, a power of two.
    pub site_capacity: u32,
    pub site_entry_size: u32,
    pub sites_offset: u64,
    pub module_capacity: u32,
    pub module_entry_size: u32,
    pub modules_offset: u64,
    /// Bytes of the whole segment; the file is at least this long.
    pub total_size: u64,
    pub pid: u32,
    /// Always `CLOCK_MONOTONIC`.
    pub clock_id: u32,
    /// Process start time in clock ticks since boot (`/proc/<pid>/stat` field 22): with the
    /// pid it names the process uniquely across pid reuse.
    pub start_ticks: u64,
    /// `SYNCSPY_SESSION` of the process (0 when unset): lets `syncspy run` find the segments
    /// of the command it started and of all its descendants.
    pub session: u64,
    /// CLOCK_MONOTONIC ns when the segment was created.
    pub created_ns: u64,
    /// Wall-clock (Unix epoch) ns at the same moment, to place events in calendar time.
    pub created_unix_ns: u64,
    pub site_max_frames: u32,
    pub cmdline_len: u32,
    pub cmdline: [u8; CMDLINE_MAX],
}

/// Exact running totals for one kind or API. Writers `fetch_add` (Relaxed); readers load
/// (Relaxed). Exact even when a reader misses ring records.
#[repr(C)]
#[derive(Default)]
pub struct Totals {
    pub count: AtomicU64,
    pub total_ns: AtomicU64,
    pub bytes: AtomicU64,
    /// Largest single duration, maintained with `fetch_max`.
    pub max_ns: AtomicU64,
}

impl Totals {
    #[inline]
    pub fn add(&self, duration_ns: u64, bytes: u64) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.total_ns.fetch_add(duration_ns, Ordering::Relaxed);
        if bytes != 0 {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        // A plain load first: most events are not a new maximum, and a load is far cheaper
        // than the read-modify-write.
        if duration_ns > self.max_ns.load(Ordering::Relaxed) {
            self.max_ns.fetch_max(duration_ns, Ordering::Relaxed);
        }
    }

    /// Counts a call that is not timed (a non-stalling call).
    #[inline]
    pub fn add_untimed(&self, bytes: u64) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if bytes != 0 {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    pub fn snapshot(&self) -> TotalsSnapshot {
        TotalsSnapshot {
            count: self.count.load(Ordering::Relaxed),
            total_ns: self.total_ns.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            max_ns: self.max_ns.load(Ordering::Relaxed),
        }
    }
}

/// A plain copy of `Totals`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TotalsSnapshot {
    pub count: u64,
    pub total_ns: u64,
    pub bytes: u64,
    pub max_ns: u64,
}

/// Fields updated while the process runs. Every field is an atomic; the comment on each says
/// who writes it and with which ordering.
#[repr(C)]
pub struct Live {
    /// Low 32 bits: `STATE_RUNNING` / `STATE_EXITED`; high 32: exit status. Written by the
    /// process (Release) at creation and from its exit handler.
    pub state: AtomicU64,
    /// CLOCK_MONOTONIC ns of the exit handler (0 while running).
    pub ended_ns: AtomicU64,
    /// Next ring sequence number to claim (`fetch_add`, Relaxed). Readers load it Acquire.
    /// Sequence `n` lives in slot `n % ring_capacity`. Range: `0..u64::MAX`.
    pub write_seq: AtomicU64,
    /// Unused (always 0): records written are `write_seq - events_dropped`
    /// ([`Live::written`]). Kept so the layout does not change.
    pub events_written: AtomicU64,
    /// Events that were counted in the totals but could not be written to the ring (slot
    /// still held by a stalled writer, or the segment not ready yet).
    pub events_dropped: AtomicU64,
    /// Call-site entries in use, and stacks that found no free entry.
    pub sites_used: AtomicU32,
    pub sites_dropped: AtomicU32,
    /// Module entries claimed (may exceed capacity; entries past it are dropped), and drops.
    pub modules_used: AtomicU32,
    pub modules_dropped: AtomicU32,
    /// Nanoseconds the library spent on its own work in recorded calls (classification,
    /// record write, stack capture): the instrumentation overhead. An estimate: after a
    /// thread's first 64 events, timed on one event in 8 and counted 8 times.
    pub overhead_ns: AtomicU64,
    /// Stacks unwound in full, and the nanoseconds spent finding call sites (unwinding,
    /// interning, and cache checks).
    pub stack_captures: AtomicU64,
    pub stack_ns: AtomicU64,
    /// Call sites found in the writer's per-thread stack cache without unwinding.
    pub stack_cache_hits: AtomicU64,
    /// Exact totals of recorded events per kind (`Kind as usize`).
    pub kinds: [Totals; KIND_SLOTS],
    /// Exact totals of recorded events per API (`Api as usize`).
    pub apis: [Totals; API_SLOTS],
    /// Calls that did not stall and were not recorded in the ring, per API: pinned or
    /// device-only async copies, `cudaFree(NULL)`, memsets on device memory.
    pub calls: [Totals; API_SLOTS],
}

impl Live {
    /// Records written to the ring, or being written: every claimed sequence number that was
    /// not dropped.
    pub fn written(&self) -> u64 {
        let dropped = self.events_dropped.load(Ordering::Relaxed);
        self.write_seq
            .load(Ordering::Acquire)
            .saturating_sub(dropped)
    }
}

/// The whole header.
#[repr(C)]
pub struct Header {
    pub ident: Ident,
    pub live: Live,
    /// ABI 1.1: the process's Python interpreter and tables (`python` module).
    pub python: crate::python::PyHeader,
    /// ABI 1.2: GPU activity, busy time and idle gaps (`gpu` module).
    pub gpu: crate::gpu::GpuLive,
    /// ABI 1.3: the distributed job the process is a rank of (`job` module); written once,
    /// before the segment is visible.
    pub job: crate::job::JobIdent,
    /// ABI 1.4: readers' tracing requests and collective-kernel time (`control` module).
    pub control: crate::control::Control,
    /// ABI 1.5: the writer's namespaces and how its liveness shows (`origin` module);
    /// written once, before the segment is visible.
    pub origin: crate::origin::Origin,
    /// ABI 1.8: the process's collective-communication calls, measured on the GPU
    /// (`collectives` module).
    pub collectives: crate::collectives::CollectiveLive,
}

/// `header_size` of ABI 1.0 writers, the smallest a reader accepts.
pub const HEADER_SIZE_1_0: usize = std::mem::offset_of!(Header, python);

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_RESERVED);
const _: () = assert!(std::mem::size_of::<Ident>().is_multiple_of(8));
const _: () = assert!(std::mem::size_of::<Totals>() == 32);

impl Ident {
    /// The argv of the process, as far as it was kept.
    pub fn argv(&self) -> Vec<String> {
        let len = (self.cmdline_len as usize).min(CMDLINE_MAX);
        self.cmdline[..len]
            .split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect()
    }
}
