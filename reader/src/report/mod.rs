//! The JSON report, version 1 (docs/contracts.md, "The JSON report, version 1"): the fields other tools rely
//! on keep their meaning; the extra fields here add to them.

mod cause;
pub mod jobs;
mod state;

pub use cause::{CauseKey, IdleCause, StallSite, HOST_BUSY_ELSEWHERE};
pub use state::ProcessState;

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};
use syncspy_abi::layout::TotalsSnapshot;
use syncspy_abi::{Api, Kind};

use crate::aggregate::{Dist, GapCause, ProcessAgg, SITE_SIGFIG};
use crate::follow::{Followed, SegmentProblem};
use crate::names::{ApiName, DirectionName, GpuMode, GpuState, KindName, Name};
use crate::python::{self, PyFrame, PythonReport};
use crate::symbolize::{is_runtime_module, is_users_frame, Frame, ModuleRoot, Symbolizer};
use crate::warning::{Warning, Warnings};
use syncspy_abi::modules::Module;

/// `syncspy_report` of the reports this code writes and reads.
pub const REPORT_VERSION: u32 = 1;

/// The whole report.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Report {
    pub syncspy_report: u32,
    /// The command as given to `syncspy run`.
    pub command: Vec<String>,
    /// The command's exit code (128 + signal when a signal killed it).
    pub exit_code: i32,
    /// From start to exit of the command, ns.
    pub wall_ns: u64,
    /// Every instrumented process of the run (the command and its descendants), in the
    /// order their segments were created.
    pub processes: Vec<ProcessReport>,
    /// Segments that could not be read, symbol files that could not be used.
    #[serde(default, skip_serializing_if = "<[Warning]>::is_empty")]
    pub warnings: Warnings,
    /// Processes grouped by distributed job (`processes[].job.id`), by job id; left out
    /// when no process is a rank of a job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<jobs::JobReport>,
    /// The verdict of `syncspy check`: each rule's result per process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::verdict::BudgetReport>,
    /// Set by `syncspy attach`: the pid it recorded, for the time it was attached. The
    /// process was not started by syncspy, so `exit_code` is not its exit code (0), and
    /// `wall_ns` is the time attached; the process's `state` says whether it runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attached_pid: Option<u32>,
}

/// Count, time and latency percentiles of one kind or API.
///
/// `count`, `total_ns`, `bytes` and `max_ns` are exact (from the segment's header totals);
/// the percentiles come from the `recorded_count` events the reader received, which is less
/// than `count` only when records were lost (see `lost_records`). Percentiles are 0 when no
/// event was recorded.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Stats {
    pub count: u64,
    pub total_ns: u64,
    pub bytes: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    #[serde(default)]
    pub recorded_count: u64,
    /// `poll_wait` only: the queries that answered not-ready in the recorded events (of
    /// `recorded_count`); left out when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub polls: u64,
}

/// Calls that did not stall (pinned async copies, `cudaFree(NULL)`, ...): counted, not timed.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CallCount {
    pub count: u64,
    pub bytes: u64,
}

/// Copies of one kind in one direction.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CopyStats {
    pub count: u64,
    pub bytes: u64,
    pub total_ns: u64,
}

/// One call site: a stack making calls of one kind through one API. Figures come from the
/// records received.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Site {
    pub kind: KindName,
    pub api: ApiName,
    pub count: u64,
    pub total_ns: u64,
    pub p99_ns: u64,
    /// `symbol (file:line)`, innermost first; unresolved frames as `module+0xOFFSET` or
    /// `0xADDR`. Empty when no stack was captured for these calls.
    pub frames: Vec<String>,
    #[serde(default)]
    pub bytes: u64,
    #[serde(default)]
    pub p50_ns: u64,
    #[serde(default)]
    pub max_ns: u64,
    /// The site id in the segment (0: no stack captured).
    #[serde(default)]
    pub site_id: u32,
    /// For each entry of `frames`, the file name of its module ("" when unknown).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frame_modules: Vec<String>,
    /// Where the program called: the user's innermost Python frame when the site has Python
    /// frames (`train.py:142 in train_step`), else the innermost native frame outside the
    /// CUDA runtime and syncspy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// The site's Python frames, innermost first (none for a thread without Python). Sites
    /// with the same kind, API, Python frames and native op are one site; `site_id` is then
    /// the id of the largest of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub python: Vec<PyFrame>,
    /// What to do about it, when the pattern is certain (see `advice.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advice: Option<String>,
    /// Its calls made while their stream was capturing a CUDA graph, which failed and broke
    /// the capture (`cudaErrorStreamCaptureUnsupported`, 900); left out when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub capture_failures: u64,
    /// The Python thread that waited for these calls, when they ran on a thread with no
    /// Python frames (ABI 1.6): a separate stack, never merged into `frames`, `python` or
    /// `location`, which stay the stalling thread's. Left out when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_by: Option<python::Waiter>,
    /// The GPU idle measured behind these stalls (ABI 1.10: the library's events at each
    /// stream and device sync, blocking and pageable copy): from when the GPU finished the work
    /// waited for (or the copy) to when the next work reached it. Left out when none of them was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_idle_after: Option<IdleAfter>,
}

/// The GPU idle measured behind stalls (ABI 1.10).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct IdleAfter {
    /// Stalls measured.
    pub count: u64,
    /// Their GPU idle, summed.
    pub total_ns: u64,
}

/// GPU-side figures, from the GPU part of the segment (ABI 1.2) and its `gpu_idle` records.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Gpu {
    /// The idle gaps written to the ring (at least `min_gap_ns` long).
    pub idle: IdleStats,
    /// Busy time over accounted time, all devices together; `None` when not measured.
    pub busy_fraction: Option<f64>,
    /// Whether GPU activity was measured: some device has accounted time, or a gap arrived.
    #[serde(default)]
    pub measured: bool,
    /// `1 - busy_fraction`: the share of the accounted time the GPU ran nothing, short gaps
    /// and the time after the last work included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_share: Option<f64>,
    /// The GPU's active time, all devices together: from each device's first piece of work
    /// to its last final one (busy time, gaps and short gaps; not the time after the last
    /// work, such as the program's teardown).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub active_span_ns: u64,
    /// The share of the active time the GPU ran nothing (gaps and short gaps): the idle a
    /// program's waits caused, set-up and teardown apart; what `max_gpu_idle_share` is
    /// checked against. `None` when not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_idle_share: Option<f64>,
    /// The library's GPU tracing: `off`, `tracing`, `paused`, `unavailable`, `yielded`
    /// (absent for segments older than ABI 1.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Name<GpuState>>,
    /// `SYNCSPY_GPU_IDLE` of the process: `off`, `on`, `duty`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Name<GpuMode>>,
    /// Gaps shorter than this are only counted (`devices[].short_gaps`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_gap_ns: u64,
    /// Activity records the source dropped; time of records that arrived too late.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_records: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub late_ns: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<GpuDevice>,
    /// What the gaps received are blamed on, most idle time first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<GapCauseReport>,
    /// Host time during which GPU activity was traced (duty mode: the traced windows).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub traced_ns: u64,
    /// Activity records the library received (of the traced kinds).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub records: u64,
    /// Time in collective-communication (NCCL) kernels, all devices, in traced time (ABI
    /// 1.4); `None` for older segments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective_ns: Option<u64>,
    /// How many collective kernels that was.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub collectives: u64,
    /// The GPU idle measured behind host stalls (ABI 1.10), exact totals from the header:
    /// left out when nothing was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behind_stalls: Option<BehindStalls>,
}

/// The GPU idle each sync and blocking or pageable copy caused, measured by the library's events.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct BehindStalls {
    /// Stalls measured.
    pub measured: u64,
    /// The stalls of the measured kinds (stream and device syncs, blocking and pageable
    /// copies): what could have been measured.
    pub syncs: u64,
    /// GPU idle behind the measured stalls, summed.
    pub total_ns: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// One device's busy time.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct GpuDevice {
    pub device: i32,
    pub span_ns: u64,
    pub busy_ns: u64,
    pub busy_fraction: Option<f64>,
    pub short_gaps: u64,
    pub short_gap_ns: u64,
    /// Busy fraction of the last complete window (`window_ns` long).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_window_busy: Option<f64>,
}

/// The idle gaps blamed on one cause.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct GapCauseReport {
    /// In the JSON, `cause`: a host-stall kind (`stream_sync`, ...) or `host_busy_elsewhere`;
    /// `api`: the stalling API (`""` for `host_busy_elsewhere`); `site_id`: the stall's call
    /// site (0 when none was captured, or for `host_busy_elsewhere`); `location`: where the
    /// program made the stalling call (as `sites[].location`).
    #[serde(flatten)]
    pub cause: IdleCause,
    pub count: u64,
    pub total_ns: u64,
    /// Of the idle time of the gaps received.
    pub share: f64,
}

/// Gap causes with one cause, one call and one location made one (those without a location,
/// such as "host busy elsewhere", stay apart), most idle time first. The merged cause keeps
/// the site id of its largest part.
pub fn merge_gap_causes(causes: Vec<GapCauseReport>) -> Vec<GapCauseReport> {
    let mut causes = causes;
    causes.sort_by_key(|c| std::cmp::Reverse(c.total_ns));
    let mut out = crate::alike::group(
        causes,
        |c| {
            let s = c.cause.stall()?;
            let l = c.cause.location()?;
            Some((s.kind.clone(), s.api.clone(), l.to_string()))
        },
        |a, b| {
            a.count = a.count.saturating_add(b.count);
            a.total_ns = a.total_ns.saturating_add(b.total_ns);
            a.share += b.share;
        },
    );
    out.sort_by_key(|c| std::cmp::Reverse(c.total_ns));
    out
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct IdleStats {
    pub count: u64,
    pub total_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// One instrumented process.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProcessReport {
    pub pid: u32,
    /// argv joined with spaces (as far as the library kept it).
    pub cmdline: String,
    /// Events counted by the library but not written to the ring (`events_dropped`).
    pub dropped_events: u64,
    /// Sum of `total_ns` over the kinds in which the host waited.
    pub stall_ns: u64,
    /// From the segment's creation to the process's end (or to the report, if it runs).
    pub wall_ns: u64,
    pub kinds: BTreeMap<KindName, Stats>,
    pub apis: BTreeMap<ApiName, Stats>,
    /// Largest `total_ns` first.
    pub sites: Vec<Site>,
    pub gpu: Gpu,
    /// In the JSON, `state`: `running`, `exited`, `gone` (ended without the library's exit
    /// handler: killed by a signal or `_exit`), or `unknown`; and `exit_status`: the status
    /// the process passed to `exit` (only when `state` is `exited`).
    #[serde(flatten)]
    pub state: ProcessState,
    #[serde(default)]
    pub start_ticks: u64,
    /// Ring records this reader never received (overwritten before it read them, or
    /// dropped by the library): missing from percentiles and sites, not from totals.
    #[serde(default)]
    pub lost_records: u64,
    /// Complete records that did not decode.
    #[serde(default)]
    pub corrupt_records: u64,
    /// Records received.
    #[serde(default)]
    pub recorded_events: u64,
    /// Durations outside the histograms' 1 ns .. 1 h bounds, recorded clamped.
    #[serde(default)]
    pub clamped_values: u64,
    /// Nanoseconds the library spent on its own work in recorded calls.
    #[serde(default)]
    pub overhead_ns: u64,
    /// `syncspy attach` only: the part of `overhead_ns` that was the library's start-up in the
    /// process (its segment, CUPTI's start), as read at the first look after arming; the rest
    /// is its cost while recording. Left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_overhead_ns: Option<u64>,
    /// The part of `overhead_ns` that was the host-wait machinery (the looks around the
    /// program's host functions, the thread that watches for a waiter's wake): outside the
    /// 1% budget. Left out for segments older than ABI 1.11 and while it is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_wait_overhead_ns: Option<u64>,
    #[serde(default)]
    pub stack_captures: u64,
    #[serde(default)]
    pub stack_ns: u64,
    /// Call sites found in the library's per-thread stack cache, without unwinding.
    #[serde(default)]
    pub stack_cache_hits: u64,
    /// Stacks that found no room in the call-site table; modules that found no room in the
    /// module map.
    #[serde(default)]
    pub sites_dropped: u32,
    #[serde(default)]
    pub modules_dropped: u32,
    /// Records whose site id lay outside the segment's call-site table (a corrupt or hostile
    /// segment): counted under "no site" (`site_id` 0). Left out when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bad_site_records: u64,
    /// Records of call sites beyond the per-process limit of distinct sites
    /// ([`MAX_SITE_KEYS`](crate::aggregate::MAX_SITE_KEYS)): in `kinds` and `apis`, in no
    /// site. Left out when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refused_site_records: u64,
    #[serde(default)]
    pub non_stall_calls: BTreeMap<ApiName, CallCount>,
    /// Copies among the records received, by kind then direction (`h2d`, `d2h`, `d2d`,
    /// `h2h`): count, bytes, total_ns.
    #[serde(default)]
    pub copies: BTreeMap<KindName, BTreeMap<DirectionName, CopyStats>>,
    /// The segment file.
    #[serde(default)]
    pub segment: String,
    /// The process's Python interpreter, as the library saw it (absent without Python).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PythonReport>,
    /// The distributed job the process is a rank of (launcher's environment, ABI 1.3); left
    /// out when it is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<jobs::JobRef>,
    /// The process's collective-communication (NCCL) calls and their time on its GPU, as the
    /// library measured them (ABI 1.8); left out when it made none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collectives: Option<CollectivesReport>,
    /// What the library shed to keep within its budget for its own time, and the looks at
    /// other threads' Python frames their budget skipped (ABI 1.9); left out when nothing was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostReport>,
    /// The process's pid as the reader that wrote this report saw it (the node's, for a
    /// reader there), when `pid` (its pid in its own PID namespace) differs from it or the
    /// process is in another PID namespace; left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_pid: Option<u32>,
    /// Its container, from its cgroup: the runtime and the id's first 12 characters
    /// (`docker 3f2a1b9c0d1e`, `containerd ...`, `slurm 4242` for a Slurm job); left out when
    /// none is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// The Kubernetes pod UID its cgroup names; left out when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
}

fn stats(t: TotalsSnapshot, d: Option<&Dist>) -> Stats {
    let q = |x: f64| d.map(|d| d.quantile(x)).unwrap_or(0).min(t.max_ns);
    Stats {
        count: t.count,
        total_ns: t.total_ns,
        bytes: t.bytes,
        p50_ns: q(0.50),
        p90_ns: q(0.90),
        p99_ns: q(0.99),
        max_ns: t.max_ns,
        recorded_count: d.map(Dist::count).unwrap_or(0),
        polls: d.map(Dist::polls).unwrap_or(0),
    }
}

/// The symbolized frames of call site `site` of a followed segment (none for site 0, "no
/// stack captured"); `modules` is the segment's module map. A segment written in another
/// mount namespace (a container) has its modules looked up inside that namespace's root
/// (`ModuleRoot`).
pub fn site_frames<S>(
    f: &Followed<S>,
    site: u32,
    modules: &[Module],
    sym: &mut Symbolizer,
) -> Vec<Frame> {
    if site == 0 {
        return Vec::new();
    }
    let k = f.key();
    let owner = (k.process.pid, k.process.start_ticks, k.created_ns);
    let at = f.agg().placement();
    let root = ModuleRoot::of(at.origin(), at.host_pid());
    sym.site_stack_in(
        owner,
        site,
        || f.reader().site(site).unwrap_or_default(),
        modules,
        root.as_ref(),
    )
}

/// Where call site `site` of a followed segment called from: the user's Python line when the
/// site has Python frames, else the innermost native frame outside the CUDA runtime and
/// syncspy (see [`Site::location`]).
pub fn site_location<S>(
    f: &Followed<S>,
    site: u32,
    modules: &[Module],
    sym: &mut Symbolizer,
) -> Option<String> {
    if site != 0 {
        if let Some(stack) = f.reader().python_stack(site) {
            let py = python::frames_of(&stack);
            if let Some(i) = python::user_frame(&py) {
                return Some(py[i].text());
            }
        }
    }
    location_of(&site_frames(f, site, modules, sym))
}

/// Where the program called: the innermost of the user's frames (`is_users_frame`), else the
/// innermost frame outside the CUDA runtime and syncspy.
pub fn location_of(frames: &[Frame]) -> Option<String> {
    frames
        .iter()
        .find(|fr| is_users_frame(&fr.text, fr.module.as_deref()))
        .or_else(|| {
            // Only system frames: the innermost outside the runtime, as before.
            frames
                .iter()
                .find(|fr| !fr.module.as_deref().is_some_and(is_runtime_module))
        })
        .map(|fr| fr.text.clone())
}

/// The report of one followed process; symbolizes its call sites with `sym`.
pub fn process_report<S>(f: &Followed<S>, sym: &mut Symbolizer, now_ns: u64) -> ProcessReport {
    let a: &ProcessAgg = f.agg();
    let kinds = a
        .kinds_seen()
        .into_iter()
        .map(|k| (k.into(), stats(a.live().kind(k), a.kind_dist(k))))
        .collect();
    let apis = a
        .apis_seen()
        .into_iter()
        .map(|x| (x.into(), stats(a.live().api(x), a.api_dist(x))))
        .collect();
    let non_stall_calls = a
        .calls_seen()
        .into_iter()
        .map(|x| {
            let t = a.live().calls(x);
            (
                x.into(),
                CallCount {
                    count: t.count,
                    bytes: t.bytes,
                },
            )
        })
        .collect();
    let mut copies: BTreeMap<KindName, BTreeMap<DirectionName, CopyStats>> = BTreeMap::new();
    for ((kind, dir), (count, bytes, total_ns)) in a.copies() {
        copies.entry((*kind).into()).or_default().insert(
            (*dir).into(),
            CopyStats {
                count: *count,
                bytes: *bytes,
                total_ns: *total_ns,
            },
        );
    }
    let modules = f.modules();
    let sites = sites_of(f, &modules, sym);
    let gpu = gpu_report(f, &modules, sym);
    let life = a.lifecycle();
    ProcessReport {
        pid: a.pid(),
        cmdline: a.argv().join(" "),
        dropped_events: a.live().events_dropped,
        stall_ns: a.stall_ns(),
        wall_ns: a.wall_ns(now_ns),
        kinds,
        apis,
        sites,
        gpu,
        state: life.into(),
        start_ticks: a.start_ticks(),
        lost_records: a.lost(),
        corrupt_records: a.corrupt(),
        recorded_events: a.delivered(),
        clamped_values: a.clamped(),
        overhead_ns: a.live().overhead_ns,
        startup_overhead_ns: None,
        host_wait_overhead_ns: a.live().host_wait_own_ns.filter(|ns| *ns > 0),
        stack_captures: a.live().stack_captures,
        stack_ns: a.live().stack_ns,
        stack_cache_hits: a.live().stack_cache_hits,
        sites_dropped: a.live().sites_dropped,
        modules_dropped: a.live().modules_dropped,
        bad_site_records: a.bad_site_records(),
        refused_site_records: a.refused_site_records(),
        non_stall_calls,
        copies,
        segment: f.reader().path().display().to_string(),
        python: PythonReport::of(&f.reader().python_status()),
        job: a.job().map(jobs::JobRef::of),
        collectives: a
            .live()
            .collectives
            .filter(|c| c.calls > 0)
            .map(|c| CollectivesReport::of(&c)),
        cost: a
            .live()
            .cost
            .filter(syncspy_abi::cost::CostStatus::anything_shed)
            .map(|c| CostReport::of(&c)),
        host_pid: a
            .placement()
            .host_pid()
            .filter(|h| *h != a.pid() || a.placement().foreign_ns()),
        container: a.placement().container().map(|c| c.label()),
        pod_uid: a
            .placement()
            .container()
            .and_then(|c| c.pod_uid().map(str::to_string)),
    }
}

impl ProcessReport {
    /// Host stalls counted: every kind but `gpu_idle` (the GPU's idle gaps are not the
    /// host's waits) and kinds this build does not know.
    pub fn stall_events(&self) -> u64 {
        self.kinds
            .iter()
            .filter(|(k, _)| k.known().is_some_and(Kind::is_host_stall))
            .map(|(_, s)| s.count)
            .fold(0u64, u64::saturating_add)
    }
}

/// A process's collective-communication calls (`processes[].collectives`): each measured on
/// the GPU with CUDA events around it, always on (`syncspy_abi::collectives`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CollectivesReport {
    /// Collective calls (each call of a group counts).
    pub calls: u64,
    /// Measurements (a collective, or a group's collectives on one stream).
    pub measured: u64,
    /// Calls not measured (a stream capturing a graph, no runtime, no free slot).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unmeasured: u64,
    /// Their time on this rank's GPU, waiting for the other ranks included.
    pub gpu_ns: u64,
    pub max_ns: u64,
    /// The window the measurements cover: from the first measured call to the latest reading.
    pub window_ns: u64,
    /// This process's rank in the communicator of its latest measured collective, and the
    /// communicator's size, when the library saw them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm_rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm_size: Option<u32>,
}

impl CollectivesReport {
    pub fn of(c: &syncspy_abi::collectives::CollectiveCalls) -> CollectivesReport {
        CollectivesReport {
            calls: c.calls,
            measured: c.measured,
            unmeasured: c.unmeasured,
            gpu_ns: c.gpu_ns,
            max_ns: c.max_ns,
            window_ns: c.window_ns(),
            comm_rank: c.comm_rank,
            comm_size: c.comm_size,
        }
    }

    /// The time in collectives and the window it is a share of, when some were measured.
    pub fn share(&self) -> Option<(u64, u64)> {
        (self.measured > 0 && self.window_ns > 0).then_some((self.gpu_ns, self.window_ns))
    }
}

/// What a process's library shed to keep within its budget (`processes[].cost`; the
/// segment's cost part, `syncspy_abi::cost`). Every total stays exact whatever was shed:
/// counts, times and bytes per kind and API; what is shed is detail (call sites, records in
/// the ring, so percentiles and call sites cover the events kept).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CostReport {
    /// The budget, a percentage of the process's wall time (0: none).
    pub budget_pct: f64,
    /// What is shed now: `none`, `stacks`, `gap_records` or `records` (each level sheds the
    /// ones before it too).
    pub shedding: String,
    /// Times shedding went one level deeper.
    pub raised: u64,
    /// Recorded events without a call-site stack, GPU idle gaps and events not written as
    /// records (all in the totals).
    pub stacks_shed: u64,
    pub gap_records_shed: u64,
    pub records_shed: u64,
    /// Looks at other threads' Python frames skipped by their own budget: waits a host
    /// function ended that were not recorded, stalls not named at the line that waited.
    pub looks_skipped: u64,
}

impl CostReport {
    pub fn of(c: &syncspy_abi::cost::CostStatus) -> CostReport {
        CostReport {
            budget_pct: f64::from(c.budget_ppm) / 10_000.0,
            shedding: syncspy_abi::cost::CostStatus::level_key(c.level).to_string(),
            raised: c.raised,
            stacks_shed: c.stacks_shed,
            gap_records_shed: c.gaps_shed,
            records_shed: c.records_shed,
            looks_skipped: c.looks_skipped,
        }
    }

    /// What is shed now, in words (`gap records`); `None` when nothing is.
    pub fn shedding_now(&self) -> Option<String> {
        (self.shedding != "none").then(|| self.shedding.replace('_', " "))
    }

    /// Whether detail was shed (not only looks skipped).
    pub fn shed_any(&self) -> bool {
        self.raised > 0 || self.stacks_shed + self.gap_records_shed + self.records_shed > 0
    }
}

/// `part / whole`; `None` when `whole` is 0 (nothing accounted: no share to tell).
pub fn fraction(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// Time in collective (NCCL) kernels and how many ran, all devices (ABI 1.4); `None` for
/// older segments.
pub fn collectives_of(live: &crate::aggregate::LiveCounters) -> Option<(u64, u64)> {
    live.control.as_ref().map(|c| {
        c.collectives.iter().fold((0u64, 0u64), |(ns, n), d| {
            (ns.saturating_add(d.busy_ns), n.saturating_add(d.count))
        })
    })
}

/// Whether a process's GPU activity was measured (the `gpu.measured` field): some device has
/// accounted time, or an idle gap arrived.
pub fn gpu_measured(live: &crate::aggregate::LiveCounters) -> bool {
    live.gpu_busy().0 > 0 || live.kind(Kind::GpuIdle).count > 0
}

/// A rank's time in collective (NCCL) kernels and its GPU's traced time, as the job view
/// compares ranks (`jobs::collective_rule`): only when its GPU was measured.
pub fn collective_share(
    collective_ns: Option<u64>,
    measured: bool,
    traced_ns: u64,
) -> Option<(u64, u64)> {
    collective_ns.filter(|_| measured).map(|c| (c, traced_ns))
}

impl Gpu {
    /// [`collective_share`] of this section.
    pub fn collective_share(&self) -> Option<(u64, u64)> {
        collective_share(self.collective_ns, self.measured, self.traced_ns)
    }

    /// The share of the GPU's time it ran nothing, as every view shows it: over its active
    /// time (first work to last) when known, else over the accounted time; `None` when not
    /// measured.
    pub fn idle_share_shown(&self) -> Option<f64> {
        self.active_idle_share.or(self.idle_share)
    }
}

/// The `gpu` section of a followed process.
pub fn gpu_report<S>(f: &Followed<S>, modules: &[Module], sym: &mut Symbolizer) -> Gpu {
    let a: &ProcessAgg = f.agg();
    let idle = stats(a.live().kind(Kind::GpuIdle), a.kind_dist(Kind::GpuIdle));
    let (span, busy) = a.live().gpu_busy();
    let busy_fraction = fraction(busy, span);
    let causes = a.gap_causes().by_total();
    let received: u64 = causes.iter().map(|c| c.2).sum();
    let causes = causes
        .into_iter()
        .map(|(cause, count, total_ns)| {
            let cause = match cause {
                GapCause::Stall(k) => IdleCause::Stall(StallSite {
                    kind: k.kind.into(),
                    api: k.api.into(),
                    site_id: k.site,
                    location: site_location(f, k.site, modules, sym),
                }),
                GapCause::HostBusyElsewhere => IdleCause::HostBusyElsewhere,
            };
            GapCauseReport {
                cause,
                count,
                total_ns,
                share: fraction(total_ns, received).unwrap_or(0.0),
            }
        })
        .collect();
    let causes = merge_gap_causes(causes);
    let g = a.live().gpu.as_ref();
    let (active_span_ns, _) = a.live().gpu_active();
    Gpu {
        idle: IdleStats {
            count: idle.count,
            total_ns: idle.total_ns,
            p50_ns: idle.p50_ns,
            p99_ns: idle.p99_ns,
            max_ns: idle.max_ns,
        },
        busy_fraction,
        measured: gpu_measured(a.live()),
        idle_share: busy_fraction.map(|b| 1.0 - b),
        active_span_ns,
        active_idle_share: fraction(active_span_ns.saturating_sub(busy), active_span_ns),
        state: g.map(|g| Name::new(g.state_name())),
        mode: g.map(|g| Name::new(g.mode_name())),
        min_gap_ns: g.map_or(0, |g| g.min_gap_ns),
        dropped_records: g.map_or(0, |g| g.dropped),
        late_ns: g.map_or(0, |g| g.late_ns),
        devices: g
            .map(|g| {
                g.devices
                    .iter()
                    .map(|d| GpuDevice {
                        device: d.device,
                        span_ns: d.span_ns,
                        busy_ns: d.busy_ns,
                        busy_fraction: fraction(d.busy_ns, d.span_ns),
                        short_gaps: d.short_gaps,
                        short_gap_ns: d.short_gap_ns,
                        last_window_busy: d.sample_ppm.map(|p| f64::from(p) / 1e6),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        causes,
        traced_ns: g.map_or(0, |g| g.traced_ns),
        records: g.map_or(0, |g| g.records),
        collective_ns: collectives_of(a.live()).map(|c| c.0),
        collectives: collectives_of(a.live()).map_or(0, |c| c.1),
        behind_stalls: BehindStalls::of(a.live()),
    }
}

impl BehindStalls {
    /// The header's exact totals of the GPU idle measured behind stalls (every view's
    /// figure: the report's, the monitor's); `None` when nothing was measured.
    pub fn of(live: &crate::aggregate::LiveCounters) -> Option<BehindStalls> {
        let m = live.api(Api::StallEvents);
        (m.count > 0).then(|| BehindStalls {
            measured: m.count,
            syncs: Kind::ALL
                .iter()
                .filter(|k| k.idle_measured_behind())
                .map(|k| live.kind(*k).count)
                .sum(),
            total_ns: m.total_ns,
        })
    }
}

/// The call sites of a followed process, largest recorded total first. Sites with Python
/// frames are keyed by kind, API, Python frames and native op, so one Python line reached
/// through two native paths (before and after the interpreter specializes a call) is one site.
fn sites_of<S>(f: &Followed<S>, modules: &[Module], sym: &mut Symbolizer) -> Vec<Site> {
    struct Acc {
        kind: Kind,
        api: Api,
        site_id: u32,
        python: Vec<PyFrame>,
        dist: Dist,
        capture_failures: u64,
        waited_by: Option<python::Waiter>,
        idle_after: (u64, u64),
    }
    let mut order = Vec::new();
    for (key, d) in f.agg().sites_by_total() {
        let native = site_frames(f, key.site, modules, sym);
        let python = match key.site {
            0 => Vec::new(),
            id => f
                .reader()
                .python_stack(id)
                .map(|s| python::frames_of(&s))
                .unwrap_or_default(),
        };
        let (look, frames) = crate::alike::SiteLook::of(native, &python);
        let mut dist = Dist::new(SITE_SIGFIG);
        dist.merge(d);
        let acc = Acc {
            kind: key.kind,
            api: key.api,
            site_id: key.site,
            waited_by: match key.site {
                0 => None,
                id => f.reader().waited_by(id).map(|w| python::Waiter::of(&w)),
            },
            python,
            dist,
            capture_failures: f.agg().capture_failures(&key),
            idle_after: f.agg().idle_after(&key),
        };
        let alike = crate::alike::RowKey::new(key.kind.name(), key.api.name(), look)
            .waited_by(acc.waited_by.as_ref());
        order.push((Some(alike), (acc, frames)));
    }
    // Sites that read alike are one row (`alike::sites`, the rule every view applies).
    let alike = crate::alike::sites(order, |(a, _), (b, _)| {
        a.dist.merge(&b.dist);
        a.capture_failures += b.capture_failures;
        a.idle_after.0 += b.idle_after.0;
        a.idle_after.1 += b.idle_after.1;
    });
    let mut sites: Vec<Site> = alike
        .into_iter()
        .map(|(acc, frames)| {
            let location = match python::user_frame(&acc.python) {
                Some(i) => Some(acc.python[i].text()),
                None => location_of(&frames),
            };
            let d = &acc.dist;
            let texts: Vec<String> = frames.iter().map(|fr| fr.text.clone()).collect();
            let advice = if acc.capture_failures > 0 {
                Some(crate::advice::CAPTURE.to_string())
            } else {
                crate::advice::advice(acc.kind.name(), acc.api.name(), d.count(), &texts)
                    .map(str::to_string)
            };
            Site {
                kind: acc.kind.into(),
                api: acc.api.into(),
                count: d.count(),
                total_ns: d.total_ns(),
                p99_ns: d.quantile(0.99),
                frame_modules: frames
                    .iter()
                    .map(|fr| fr.module.clone().unwrap_or_default())
                    .collect(),
                frames: texts,
                bytes: d.bytes(),
                p50_ns: d.quantile(0.5),
                max_ns: d.max_ns(),
                site_id: acc.site_id,
                location,
                python: acc.python,
                advice,
                capture_failures: acc.capture_failures,
                waited_by: acc.waited_by,
                gpu_idle_after: (acc.idle_after.0 > 0).then_some(IdleAfter {
                    count: acc.idle_after.0,
                    total_ns: acc.idle_after.1,
                }),
            }
        })
        .collect();
    sites.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then(b.count.cmp(&a.count))
            .then(a.site_id.cmp(&b.site_id))
    });
    sites
}

/// What the run itself contributes to the report.
#[derive(Clone, Debug, Default)]
pub struct RunInfo {
    pub command: Vec<String>,
    pub exit_code: i32,
    pub wall_ns: u64,
}

/// The report of a run: every followed process, ordered by segment creation.
pub fn build<S>(
    run: &RunInfo,
    processes: &[Followed<S>],
    problems: &[SegmentProblem],
    sym: &mut Symbolizer,
    now_ns: u64,
) -> Report {
    let mut order: Vec<&Followed<S>> = processes.iter().collect();
    order.sort_by_key(|f| (f.agg().created_ns(), f.agg().pid()));
    let processes: Vec<ProcessReport> = order
        .into_iter()
        .map(|f| process_report(f, sym, now_ns))
        .collect();
    let jobs = jobs::jobs_of(&processes);
    let mut warnings: Warnings = problems.iter().map(Warning::from).collect();
    warnings.extend(sym.notes().iter().cloned());
    Report {
        syncspy_report: REPORT_VERSION,
        command: run.command.clone(),
        exit_code: run.exit_code,
        wall_ns: run.wall_ns,
        processes,
        jobs,
        warnings,
        budget: None,
        attached_pid: None,
    }
}

/// Writes the report as pretty JSON (see [`write_atomic_with`] for where and how).
pub fn write(report: &Report, path: &Path) -> io::Result<()> {
    let json = serde_json::to_vec_pretty(report).map_err(io::Error::other)?;
    write_atomic(path, &json)
}

/// Writes a file so that readers never see half of it; see [`write_atomic_with`].
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// Writes an output file (`--report`, `--trace`, `--junit`), with the contents written by
/// `fill` (buffered). Every error is returned, the last flush and `fsync` included. The path
/// is opened once ([`crate::safe_file::open_existing_for_write`]), never checked and then
/// opened again.
///
/// - `-` is standard output.
/// - A FIFO this user owns, `/dev/null` (`/dev/zero`, `/dev/full`) or this user's terminal,
///   directly or through a link of this user or root (`/dev/stdout`, `/dev/fd/N`), is
///   written straight into: never replaced by a regular file. A FIFO is opened without
///   blocking: one that nobody reads is an error. Another user's FIFO, and any other device,
///   is an error.
/// - Otherwise the path must be absent, a regular file or a symbolic link (replaced, never
///   written through): the contents go to a new file in the same folder, created with
///   `O_EXCL` under an unpredictable name (so nobody can plant a link at it), mode 0600 (a
///   report carries command lines and stacks), `fsync`ed, then renamed over the path.
///   Another kind of file (a folder, a socket) is an error.
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn io::Write) -> io::Result<()>,
) -> io::Result<()> {
    use crate::safe_file::{open_existing_for_write, Existing};
    use std::os::unix::fs::PermissionsExt;
    if path.as_os_str() == "-" {
        let mut w = io::BufWriter::new(io::stdout().lock());
        fill(&mut w)?;
        return io::Write::flush(&mut w.into_inner().map_err(|e| e.into_error())?);
    }
    match open_existing_for_write(path)? {
        Existing::Stream(f) => {
            let mut w = io::BufWriter::new(f);
            fill(&mut w)?;
            w.into_inner().map_err(|e| e.into_error())?;
            return Ok(());
        }
        // Only replaced: whatever was opened is closed unwritten.
        Existing::Regular(_) | Existing::Link | Existing::Absent => {}
    }
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(name);
    prefix.push(".");
    // O_CREAT | O_EXCL under a random name, removed on drop unless persisted; 0600: the
    // contents name commands and call stacks.
    let tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)?;
    let mut w = io::BufWriter::new(tmp);
    fill(&mut w)?;
    let tmp = w.into_inner().map_err(|e| e.into_error())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    // The rename is durable once the folder is; a folder that cannot be synced (some
    // filesystems) does not make the file less written.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Why a saved report could not be read.
#[derive(Debug)]
pub enum ReadError {
    Io(io::Error),
    Json(serde_json::Error),
    /// JSON, but without a `syncspy_report` version: not a report at all.
    NotAReport,
    /// A `syncspy_report` version this build does not read.
    Version(u64),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Json(e) => write!(f, "not a syncspy report: {e}"),
            ReadError::NotAReport => f.write_str(
                "not a syncspy report: JSON without a `syncspy_report` version field (a report \
                 is what `syncspy run --report FILE` or `syncspy check --report FILE` writes)",
            ),
            ReadError::Version(v) => write!(
                f,
                "report version {v} is not supported (this syncspy reads version \
                 {REPORT_VERSION}); use the syncspy that wrote it"
            ),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Io(e) => Some(e),
            ReadError::Json(e) => Some(e),
            ReadError::NotAReport | ReadError::Version(_) => None,
        }
    }
}

/// Reads a saved report, checking its version first. A regular file only, of at most
/// [`crate::safe_file::REPORT_MAX_BYTES`] (`/dev/zero` or a FIFO is an error).
pub fn read(path: &Path) -> Result<Report, ReadError> {
    let bytes = crate::safe_file::read_bounded(
        path,
        crate::safe_file::REPORT_MAX_BYTES,
        "a syncspy report",
    )
    .map_err(ReadError::Io)?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(ReadError::Json)?;
    match v.get("syncspy_report").and_then(|x| x.as_u64()) {
        Some(1) => serde_json::from_value(v).map_err(ReadError::Json),
        Some(other) => Err(ReadError::Version(other)),
        None => Err(ReadError::NotAReport),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::follow::Follower;
    use crate::symbolize::tests::{known_return_addr, own_module};
    use syncspy_abi::{Api, SegmentParams, SegmentWriter};
    use syncspy_test_support::{rec, TempDir};

    fn writer(dir: &Path, pid: u32, ring: u32) -> SegmentWriter {
        let mut p = SegmentParams::new(pid, 5000 + pid as u64);
        p.session = 42;
        p.ring_capacity = ring;
        p.site_capacity = 64;
        p.module_capacity = 16;
        p.cmdline = b"./train\0--epochs\x003\0".to_vec();
        SegmentWriter::create(dir, &p).unwrap()
    }

    fn report_of(dir: &Path) -> Report {
        let mut f: Follower = Follower::new(dir, Some(42));
        f.scan().unwrap();
        f.final_drain();
        let run = RunInfo {
            command: vec!["./train".into()],
            exit_code: 0,
            wall_ns: 1,
        };
        let mut sym = Symbolizer::new();
        build(
            &run,
            f.processes(),
            f.problems(),
            &mut sym,
            crate::monotonic_ns(),
        )
    }

    fn cause(c: &str, api: &str, total_ns: u64, location: &str, site_id: u32) -> GapCauseReport {
        GapCauseReport {
            cause: IdleCause::parse(
                c,
                api,
                site_id,
                (!location.is_empty()).then(|| location.into()),
            ),
            count: 1,
            total_ns,
            share: total_ns as f64 / 100.0,
        }
    }

    #[test]
    fn causes_at_one_line_are_one_and_those_without_a_line_stay_apart() {
        let merged = merge_gap_causes(vec![
            cause("stream_sync", "cudaStreamSynchronize", 20, "train.py:45", 3),
            cause("stream_sync", "cudaStreamSynchronize", 40, "train.py:50", 1),
            cause("stream_sync", "cudaStreamSynchronize", 30, "train.py:45", 2),
            cause("memcpy_pageable", "cudaMemcpyAsync", 5, "train.py:45", 4),
            cause("host_busy_elsewhere", "", 3, "", 0),
            cause("host_busy_elsewhere", "", 2, "", 0),
        ]);
        let got: Vec<(&str, Option<&str>, u64, u64, u32)> = merged
            .iter()
            .map(|r| {
                (
                    r.cause.name(),
                    r.cause.location(),
                    r.count,
                    r.total_ns,
                    r.cause.site_id(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("stream_sync", Some("train.py:45"), 2, 50, 2),
                ("stream_sync", Some("train.py:50"), 1, 40, 1),
                ("memcpy_pageable", Some("train.py:45"), 1, 5, 4),
                ("host_busy_elsewhere", None, 1, 3, 0),
                ("host_busy_elsewhere", None, 1, 2, 0),
            ]
        );
        assert!((merged[0].share - 0.5).abs() < 1e-9);
    }

    #[test]
    fn a_sync_that_broke_a_graph_capture_is_flagged_at_its_site() {
        // `.item()` inside `torch.cuda.graph(...)`: the sync fails at once with error 900
        // and the capture is lost.
        let dir = TempDir::new("report-capture");
        let w = writer(dir.path(), 23, 4096);
        let site = w.intern_site(&[0x10]).unwrap();
        let mut r = rec(Kind::StreamSync, Api::CudaStreamSynchronize, 2_000, 0, site);
        r.result = crate::aggregate::CAPTURE_UNSUPPORTED;
        w.record(&r);
        let other = w.intern_site(&[0x20]).unwrap();
        w.record(&rec(
            Kind::StreamSync,
            Api::CudaStreamSynchronize,
            9_000,
            0,
            other,
        ));
        w.mark_exited(0);
        let rep = report_of(dir.path());
        let sites = &rep.processes[0].sites;
        let broke = sites.iter().find(|s| s.site_id == site).unwrap();
        assert_eq!(broke.capture_failures, 1);
        assert_eq!(broke.advice.as_deref(), Some(crate::advice::CAPTURE));
        let fine = sites.iter().find(|s| s.site_id == other).unwrap();
        assert_eq!(fine.capture_failures, 0);
        let json = serde_json::to_value(fine).unwrap();
        assert!(json.get("capture_failures").is_none(), "left out when 0");
    }

    #[test]
    fn sites_that_print_alike_are_one_site() {
        // Two stacks whose only frame lies in one line of one function (as two return
        // addresses within a source line do): every view reads them the same, so the report
        // lists them once, with their figures together and the larger one's id.
        use crate::symbolize::tests::{known_return_addr, own_module};
        let dir = TempDir::new("report-alike");
        let w = writer(dir.path(), 22, 4096);
        let m = own_module();
        assert!(w.add_module(m.path.as_bytes(), m.bias, m.start, m.end, &m.build_id));
        let a = w.intern_site(&[known_return_addr()]).unwrap();
        let b = w.intern_site(&[known_return_addr() + 1]).unwrap();
        assert_ne!(a, b);
        for (site, n, ns) in [(a, 19, 2_000_000), (b, 1, 80_000)] {
            for _ in 0..n {
                w.record(&rec(Kind::MemcpySync, Api::CudaMemcpy, ns, 4, site));
            }
        }
        w.mark_exited(0);
        let r = report_of(dir.path());
        let sites = &r.processes[0].sites;
        assert_eq!(sites.len(), 1, "{sites:#?}");
        assert_eq!(sites[0].count, 20);
        assert_eq!(sites[0].total_ns, 19 * 2_000_000 + 80_000);
        assert_eq!(sites[0].bytes, 80);
        assert_eq!(sites[0].site_id, a);
        assert!(sites[0].frames[0].contains("syncspy_known_function_for_symbolization"));
    }

    #[test]
    fn exact_totals_percentiles_and_sites_sorted_by_total() {
        let dir = TempDir::new("report-exact");
        let w = writer(dir.path(), 21, 4096);
        let a = w.intern_site(&[0x10]).unwrap();
        let b = w.intern_site(&[0x20]).unwrap();
        // 100 stream syncs at site a: 1..=100 us.
        for i in 1..=100u64 {
            w.record(&rec(
                Kind::StreamSync,
                Api::CudaStreamSynchronize,
                i * 1000,
                0,
                a,
            ));
        }
        // 10 sync copies at site b: 1 ms each, 4096 bytes.
        for _ in 0..10 {
            w.record(&rec(Kind::MemcpySync, Api::CudaMemcpy, 1_000_000, 4096, b));
        }
        // 3 pageable async copies with no stack.
        for _ in 0..3 {
            w.record(&rec(Kind::MemcpyPageable, Api::CudaMemcpyAsync, 7, 100, 0));
        }
        w.live().calls[Api::CudaMemcpyAsync as usize].add_untimed(512);
        w.live()
            .overhead_ns
            .store(999, std::sync::atomic::Ordering::Relaxed);
        w.mark_exited(0);

        let r = report_of(dir.path());
        assert_eq!(r.syncspy_report, 1);
        assert_eq!(r.processes.len(), 1);
        let p = &r.processes[0];
        assert_eq!(p.pid, 21);
        assert_eq!(p.cmdline, "./train --epochs 3");
        assert_eq!(p.state, ProcessState::Exited(Some(0)));
        assert_eq!((p.lost_records, p.dropped_events), (0, 0));
        assert_eq!(p.recorded_events, 113);
        assert_eq!(p.overhead_ns, 999);

        let ss = &p.kinds["stream_sync"];
        assert_eq!(ss.count, 100);
        assert_eq!(ss.total_ns, 5050 * 1000);
        assert_eq!(ss.max_ns, 100_000);
        assert_eq!(ss.recorded_count, 100);
        let close = |got: u64, want: u64| got.abs_diff(want) * 1000 <= want;
        assert!(close(ss.p50_ns, 50_000), "{}", ss.p50_ns);
        assert!(close(ss.p90_ns, 90_000), "{}", ss.p90_ns);
        assert!(close(ss.p99_ns, 99_000), "{}", ss.p99_ns);

        let mc = &p.kinds["memcpy_sync"];
        assert_eq!((mc.count, mc.total_ns, mc.bytes), (10, 10_000_000, 40960));
        assert_eq!(p.apis["cudaMemcpy"].count, 10);
        assert_eq!(p.apis["cudaStreamSynchronize"].total_ns, 5_050_000);
        assert_eq!(p.kinds["memcpy_pageable"].bytes, 300);
        assert!(!p.kinds.contains_key("device_sync"));
        assert_eq!(p.stall_ns, 5_050_000 + 10_000_000 + 21);
        assert_eq!(
            p.non_stall_calls["cudaMemcpyAsync"],
            CallCount {
                count: 1,
                bytes: 512
            }
        );
        assert_eq!(p.gpu.busy_fraction, None);
        assert!(!p.gpu.measured);

        // Sites: memcpy (10 ms) before stream sync (5.05 ms) before the stackless one.
        let order: Vec<_> = p
            .sites
            .iter()
            .map(|s| (s.kind.as_str(), s.total_ns))
            .collect();
        assert_eq!(
            order,
            vec![
                ("memcpy_sync", 10_000_000),
                ("stream_sync", 5_050_000),
                ("memcpy_pageable", 21)
            ]
        );
        assert_eq!(p.sites[0].count, 10);
        assert_eq!(p.sites[0].frames, vec!["0x20"]);
        assert!(p.sites[1].p99_ns.abs_diff(99_000) * 100 <= 99_000);
        assert!(p.sites[2].frames.is_empty());
        assert_eq!(p.sites[2].site_id, 0);

        // The JSON has the contract's fields and reads back identically.
        let json = serde_json::to_value(&r).unwrap();
        for k in [
            "syncspy_report",
            "command",
            "exit_code",
            "wall_ns",
            "processes",
        ] {
            assert!(json.get(k).is_some(), "{k}");
        }
        let pj = &json["processes"][0];
        for k in [
            "pid",
            "cmdline",
            "dropped_events",
            "stall_ns",
            "wall_ns",
            "kinds",
            "apis",
            "sites",
            "gpu",
        ] {
            assert!(pj.get(k).is_some(), "{k}");
        }
        assert!(pj["gpu"]["busy_fraction"].is_null());
        assert_eq!(pj["gpu"]["idle"]["count"], 0);
        let back: Report = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn the_idle_share_is_over_the_gpus_active_time_not_its_set_up_or_teardown() {
        // 100 ms accounted: 60 ms busy, two 2 ms gaps and 1 ms of short ones between work,
        // and 35 ms after the last work (the program's teardown). A healthy pipeline read
        // "idle 40%" over the traced time.
        use std::sync::atomic::Ordering::Relaxed;
        let dir = TempDir::new("report-gpu-active");
        let w = writer(dir.path(), 28, 4096);
        let g = w.gpu();
        g.state.store(
            syncspy_abi::gpu::GPU_TRACING,
            std::sync::atomic::Ordering::Release,
        );
        let d = w.gpu_device(0).unwrap();
        d.span_ns.store(100_000_000, Relaxed);
        d.busy_ns.store(60_000_000, Relaxed);
        d.short_gaps.store(4, Relaxed);
        d.short_gap_ns.store(1_000_000, Relaxed);
        w.record_gpu_idle(0, 10_000_000, 2_000_000);
        w.record_gpu_idle(0, 30_000_000, 2_000_000);
        w.mark_exited(0);
        let gpu = report_of(dir.path()).processes[0].gpu.clone();
        assert_eq!(gpu.idle_share, Some(0.4));
        assert_eq!(gpu.active_span_ns, 65_000_000);
        let share = gpu.active_idle_share.unwrap();
        assert!((share - 5.0 / 65.0).abs() < 1e-12, "{share}");
        // Not measured: neither share.
        let dir = TempDir::new("report-gpu-none");
        let w = writer(dir.path(), 29, 4096);
        w.mark_exited(0);
        let gpu = report_of(dir.path()).processes[0].gpu.clone();
        assert_eq!((gpu.active_span_ns, gpu.active_idle_share), (0, None));
    }

    #[test]
    fn gpu_section_has_busy_fraction_gaps_and_their_causes() {
        use std::sync::atomic::Ordering::Relaxed;
        let dir = TempDir::new("report-gpu");
        let w = writer(dir.path(), 27, 4096);
        let g = w.gpu();
        g.mode.store(syncspy_abi::gpu::MODE_ON, Relaxed);
        g.min_gap_ns.store(10_000, Relaxed);
        g.state.store(
            syncspy_abi::gpu::GPU_TRACING,
            std::sync::atomic::Ordering::Release,
        );
        let d = w.gpu_device(0).unwrap();
        d.span_ns.store(10_000_000, Relaxed);
        d.busy_ns.store(7_500_000, Relaxed);
        d.short_gaps.store(3, Relaxed);
        let sync_site = w.intern_site(&[0x10]).unwrap();
        // Three syncs, each with the GPU draining 1 ms into it and idling 2 ms.
        for i in 0..3u64 {
            let t = 1_000_000 + i * 3_000_000;
            let mut r = rec(
                Kind::StreamSync,
                Api::CudaStreamSynchronize,
                1_500_000,
                0,
                sync_site,
            );
            r.start_ns = t;
            w.record(&r);
        }
        for i in 0..3u64 {
            w.record_gpu_idle(0, 1_000_000 + i * 3_000_000 + 1_000_000, 2_000_000);
        }
        // A gap while the host made no CUDA call at all.
        w.record_gpu_idle(0, 20_000_000, 500_000);
        w.mark_exited(0);

        let r = report_of(dir.path());
        let p = &r.processes[0];
        let gpu = &p.gpu;
        assert!(gpu.measured);
        assert_eq!(gpu.busy_fraction, Some(0.75));
        assert_eq!(gpu.idle_share, Some(0.25));
        assert_eq!(
            (
                gpu.state.as_ref().and_then(Name::known),
                gpu.mode.as_ref().and_then(Name::known)
            ),
            (Some(GpuState::Tracing), Some(GpuMode::On))
        );
        assert_eq!((gpu.idle.count, gpu.idle.total_ns), (4, 6_500_000));
        assert_eq!(gpu.idle.max_ns, 2_000_000);
        assert_eq!(gpu.devices.len(), 1);
        assert_eq!(gpu.devices[0].short_gaps, 3);
        assert_eq!(gpu.causes.len(), 2);
        let c = &gpu.causes[0];
        let s = c.cause.stall().unwrap();
        assert_eq!(
            (
                s.kind.known(),
                s.api.known(),
                s.site_id,
                c.count,
                c.total_ns
            ),
            (
                Some(Kind::StreamSync),
                Some(Api::CudaStreamSynchronize),
                sync_site,
                3,
                6_000_000
            )
        );
        assert_eq!(c.cause.location(), Some("0x10"));
        assert!((c.share - 6.0 / 6.5).abs() < 1e-9, "{}", c.share);
        assert_eq!(gpu.causes[1].cause, IdleCause::HostBusyElsewhere);
        assert_eq!(gpu.causes[1].total_ns, 500_000);
        // Gaps are no host stall, no API and no call site.
        assert_eq!(p.stall_ns, 3 * 1_500_000);
        assert!(!p.apis.contains_key("gpu_activity"));
        assert!(p.sites.iter().all(|s| s.kind != Kind::GpuIdle));
        assert_eq!(p.kinds["gpu_idle"].count, 4);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(
            json["processes"][0]["gpu"]["causes"][0]["cause"],
            "stream_sync"
        );
        let back: Report = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn ring_overflow_loses_records_but_not_totals() {
        let dir = TempDir::new("report-overflow");
        let w = writer(dir.path(), 22, 16);
        for i in 1..=40u64 {
            w.record(&rec(Kind::DeviceSync, Api::CudaDeviceSynchronize, i, 0, 0));
        }
        w.mark_exited(0);
        let r = report_of(dir.path());
        let p = &r.processes[0];
        let k = &p.kinds["device_sync"];
        assert_eq!(k.count, 40);
        assert_eq!(k.total_ns, 820);
        assert_eq!(k.max_ns, 40);
        assert_eq!(k.recorded_count, 16);
        assert_eq!(p.lost_records, 24);
        assert_eq!(p.recorded_events, 16);
        // The 16 newest survived: 25..=40.
        assert!(k.p50_ns >= 25 && k.p50_ns <= 40, "{}", k.p50_ns);
        assert_eq!(p.sites[0].count, 16);
    }

    #[test]
    fn report_frames_name_the_known_function() {
        let dir = TempDir::new("report-symbols");
        let w = writer(dir.path(), 23, 64);
        let m = own_module();
        assert!(w.add_module(m.path.as_bytes(), m.bias, m.start, m.end, &m.build_id));
        let site = w.intern_site(&[known_return_addr(), 0x99]).unwrap();
        w.record(&rec(
            Kind::EventSync,
            Api::CudaEventSynchronize,
            10,
            0,
            site,
        ));
        w.mark_exited(0);
        let r = report_of(dir.path());
        let s = &r.processes[0].sites[0];
        assert!(
            s.frames[0].contains("syncspy_known_function_for_symbolization"),
            "{:?}",
            s.frames
        );
        assert_eq!(s.frames.last().unwrap(), "0x99");
        assert_eq!(s.frame_modules.len(), s.frames.len());
        assert_eq!(s.location.as_deref(), Some(s.frames[0].as_str()));
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    }

    #[test]
    fn corrupt_file_is_a_warning_and_other_sessions_are_ignored() {
        let dir = TempDir::new("report-corrupt");
        let w = writer(dir.path(), 24, 64);
        w.record(&rec(Kind::DeviceSync, Api::CudaDeviceSynchronize, 5, 0, 0));
        let mut other = SegmentParams::new(25, 1);
        other.session = 43;
        let o = SegmentWriter::create(dir.path(), &other).unwrap();
        o.record(&rec(Kind::DeviceSync, Api::CudaDeviceSynchronize, 5, 0, 0));
        let mut truncated = std::fs::read(w.path()).unwrap();
        truncated.truncate(10_000);
        std::fs::write(dir.path().join("syncspy-26-1"), truncated).unwrap();
        let r = report_of(dir.path());
        assert_eq!(r.processes.len(), 1);
        assert_eq!(r.processes[0].pid, 24);
        assert_eq!(r.warnings.len(), 1);
        match &r.warnings[0] {
            Warning::SegmentSkipped { path, why } => {
                assert!(path.ends_with("syncspy-26-1"), "{path}");
                assert!(why.contains("truncated"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn outputs_go_into_fifos_and_devices_never_through_planted_links() {
        use std::os::unix::fs::FileTypeExt;
        let dir = TempDir::new("report-outputs");
        let r = Report {
            syncspy_report: 1,
            command: vec!["x".into()],
            ..Report::default()
        };

        // A full device: the error comes back, and the device stays a device.
        let full = syncspy_test_support::full_device(dir.path());
        let e = write(&r, &full).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
        assert!(std::fs::metadata(&full)
            .unwrap()
            .file_type()
            .is_char_device());

        // A FIFO is written into, and stays a FIFO.
        let fifo = dir.path().join("pipe.json");
        syncspy_test_support::mkfifo(&fifo);
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(&fifo).unwrap())
        };
        write(&r, &fifo).unwrap();
        let got: Report = serde_json::from_slice(&reader.join().unwrap()).unwrap();
        assert_eq!(got, r);
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());

        // A link planted at the old, predictable temporary name is not followed.
        let victim = dir.file("victim", "precious");
        let out = dir.path().join("r.json");
        std::os::unix::fs::symlink(
            &victim,
            dir.path()
                .join(format!(".r.json.{}.tmp", std::process::id())),
        )
        .unwrap();
        write(&r, &out).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(read(&out).unwrap(), r);
        // A link at the output path is replaced, not written through.
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        write(&r, &link).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_file());
        // A folder is an error; no temporary file is left behind by any of this.
        assert!(write(&r, dir.path()).is_err());
        let tmps: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp") && !n.contains(&std::process::id().to_string()))
            .collect();
        assert!(tmps.is_empty(), "{tmps:?}");
    }

    #[test]
    fn write_then_read_and_reject_other_versions() {
        let dir = TempDir::new("report-io");
        let r = Report {
            syncspy_report: 1,
            command: vec!["x".into()],
            exit_code: 3,
            ..Report::default()
        };
        let path = dir.path().join("r.json");
        write(&r, &path).unwrap();
        assert_eq!(read(&path).unwrap(), r);
        std::fs::write(&path, br#"{"syncspy_report": 2}"#).unwrap();
        assert!(matches!(read(&path), Err(ReadError::Version(2))));
        std::fs::write(&path, b"nope").unwrap();
        assert!(matches!(read(&path), Err(ReadError::Json(_))));
        // A minimal report with only the contract's fields reads.
        std::fs::write(
            &path,
            br#"{"syncspy_report":1,"command":["a"],"exit_code":0,"wall_ns":5,
                "processes":[{"pid":1,"cmdline":"a","dropped_events":0,"stall_ns":0,
                "wall_ns":5,"kinds":{},"apis":{},"sites":[],
                "gpu":{"idle":{"count":0,"total_ns":0,"p50_ns":0,"p99_ns":0,"max_ns":0},
                "busy_fraction":0.0}}]}"#,
        )
        .unwrap();
        assert_eq!(read(&path).unwrap().processes[0].pid, 1);
    }
}
