//! The segment header. `Ident` is written once by the creator before the segment becomes
//! visible (it is created under a temporary name and renamed into place); readers copy it
//! once, validate it, and use their copy for every bound. `Live` holds only atomics that
//! writers update while readers poll.

pub use crate::live::{
    Live, Totals, TotalsSnapshot, API_SLOTS, KIND_SLOTS, STATE_EXITED, STATE_RUNNING,
};

/// First eight bytes of every segment.
pub const MAGIC: [u8; 8] = *b"SYNCSPY\0";
/// Incompatible layout changes bump the major version; readers reject other majors.
pub const ABI_MAJOR: u16 = 1;
/// Appended fields bump the minor version; readers accept any minor.
pub const ABI_MINOR: u16 = 11;
/// `clock_id` value: every timestamp is CLOCK_MONOTONIC nanoseconds.
pub const CLOCK_MONOTONIC: u32 = 1;
/// Bytes of the command line kept (NUL-separated argv, truncated).
pub const CMDLINE_MAX: usize = 1024;
/// The ring starts at this offset (the header rounded up to a page).
pub const HEADER_RESERVED: usize = 8192;

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
    /// ABI 1.9: the library's budget for its own time and what it shed (`cost` module).
    pub cost: crate::cost::CostLive,
    /// ABI 1.11: the library's own time by part (`cost::OwnLive`).
    pub own: crate::cost::OwnLive,
}

/// `header_size` of ABI 1.0 writers, the smallest a reader accepts.
pub const HEADER_SIZE_1_0: usize = std::mem::offset_of!(Header, python);

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_RESERVED);
const _: () = assert!(std::mem::size_of::<Ident>().is_multiple_of(8));
const _: () = assert!(std::mem::size_of::<Totals>() == 32);
// Each section states where it ends (its file does not import the header); the header agrees.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(Header, gpu) + size_of::<crate::gpu::GpuLive>() == crate::gpu::GPU_END);
    assert!(offset_of!(Header, job) + size_of::<crate::job::JobIdent>() == crate::job::JOB_END);
    assert!(
        offset_of!(Header, control) + size_of::<crate::control::Control>()
            == crate::control::CONTROL_END
    );
    assert!(
        offset_of!(Header, origin) + size_of::<crate::origin::Origin>()
            == crate::origin::ORIGIN_END
    );
    assert!(
        offset_of!(Header, collectives) + size_of::<crate::collectives::CollectiveLive>()
            == crate::collectives::COLLECTIVES_END
    );
    assert!(offset_of!(Header, cost) + size_of::<crate::cost::CostLive>() == crate::cost::COST_END);
    assert!(offset_of!(Header, own) + size_of::<crate::cost::OwnLive>() == crate::cost::OWN_END);
};

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
