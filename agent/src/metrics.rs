//! Prometheus metrics of the agent, rendered from a [`Snapshot`] with the official client
//! library (OpenMetrics text).
//!
//! Labels are bounded: `program` (a process's program name, with a quota per user:
//! `crate::labels`, then `other` or `other-uid<N>`), `kind` (the event kinds) and `state` (running,
//! exited, gone, unknown). No pid, command line or call site becomes a label; those are in
//! `/api/v1/snapshot`. Counters stay monotonic across processes that end and are forgotten:
//! their totals are kept per program.
//!
//! Distributed jobs (the job part of the segments, ABI 1.3) add `job_id` and `rank` labels to
//! the `syncspy_job_*` series, from the live processes: at most 8 job ids (`MAX_JOBS`: those
//! with the most host stall time; the rest fold into `job_id="other"`) and at most 64 ranks
//! per job (`MAX_RANKS`: the rest fold into `rank="other"`; unknown ranks are
//! `rank="unknown"`). Each node's agent exports its own ranks; Prometheus joins the nodes of a
//! job by `job_id` (docs/cluster.md).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};

use syncspy_read::names::KindName;
use syncspy_read::snapshot::{
    ForgottenProgram, Latency, Snapshot, SnapshotProcess, LATENCY_BOUNDS_NS,
};

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    program: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProgramLabels {
    program: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    program: String,
    state: String,
}

/// One live process: where it is (its pid in its namespace and on the node, its container).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcessLabels {
    program: String,
    pid: String,
    host_pid: String,
    container: String,
    pod_uid: String,
}

/// `syncspy_process_info` series at most: the live processes with the most stall time.
const MAX_PROCESS_INFO: usize = 256;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RankLabels {
    job_id: String,
    rank: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    job_id: String,
}

/// Job ids with series of their own per agent; the rest are `job_id="other"`.
const MAX_JOBS: usize = 8;
/// Ranks with series of their own per job and agent; the rest are `rank="other"`.
const MAX_RANKS: usize = 64;

/// What a program's libraries shed to keep within their budget (`syncspy_abi::cost`): `stacks`,
/// `gap_records`, `records`, `looks`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShedLabels {
    program: String,
    what: String,
}

/// What the agent's budgets dropped (`syncspy_read::limits`): a fixed set of values.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WhatLabels {
    what: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: String,
}

type FloatCounter = Counter<f64, AtomicU64>;

/// A histogram rendered from bucket counts aggregated elsewhere (the client library's own
/// `Histogram` only takes single observations).
#[derive(Clone, Debug, Default)]
struct BucketedHistogram(Arc<Mutex<Latency>>);

impl BucketedHistogram {
    fn add(&self, l: &Latency) {
        if let Ok(mut m) = self.0.lock() {
            m.add(l);
        }
    }
}

impl TypedMetric for BucketedHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for BucketedHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let l = self.0.lock().map(|m| m.clone()).unwrap_or_default();
        // Per-bucket counts with their upper bounds in seconds; the encoder accumulates.
        let mut buckets: Vec<(f64, u64)> = LATENCY_BOUNDS_NS
            .iter()
            .enumerate()
            .map(|(i, b)| (*b as f64 / 1e9, l.buckets.get(i).copied().unwrap_or(0)))
            .collect();
        let above = l.buckets.get(LATENCY_BOUNDS_NS.len()).copied().unwrap_or(0);
        buckets.push((f64::INFINITY, above));
        encoder.encode_histogram::<NoLabelSet>(l.sum_ns as f64 / 1e9, l.count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// Adds `n` to a counter, stopping at `u64::MAX`: the counts come from segments, which may
/// say anything, and the client library's counter wraps (a counter that went down would
/// read as a reset to Prometheus).
fn add_sat(c: &Counter, n: u64) {
    c.inc_by(n.min(u64::MAX - c.get()));
}

/// The metrics text of a snapshot.
pub fn render(s: &Snapshot) -> Result<String, std::fmt::Error> {
    let mut reg = Registry::with_prefix("syncspy");
    let series = Series::register(&mut reg);
    series.add_process_info(s);
    series.add_gpu_busy(s);
    // Live processes and forgotten ones add into the same series.
    for p in &s.processes {
        series.add_live(p);
    }
    for (program, f) in &s.forgotten {
        series.add_forgotten(program, f);
    }
    render_jobs(&mut reg, s);
    series.add_agent(s);
    let mut out = String::new();
    encode(&mut out, &reg)?;
    Ok(out)
}

/// The host stalls by program and kind.
struct StallSeries {
    events: Family<KindLabels, Counter>,
    seconds: Family<KindLabels, FloatCounter>,
    bytes: Family<KindLabels, Counter>,
    durations: Family<KindLabels, BucketedHistogram>,
}

impl StallSeries {
    fn register(reg: &mut Registry) -> StallSeries {
        let s = StallSeries {
            events: Family::default(),
            seconds: Family::default(),
            bytes: Family::default(),
            durations: Family::default(),
        };
        reg.register(
            "stall_events",
            "CUDA calls that made the host wait, by program and kind",
            s.events.clone(),
        );
        reg.register_with_unit(
            "stall",
            "Time the host waited in CUDA calls, by program and kind",
            Unit::Seconds,
            s.seconds.clone(),
        );
        reg.register_with_unit(
            "stall",
            "Bytes moved by the CUDA calls that made the host wait",
            Unit::Bytes,
            s.bytes.clone(),
        );
        reg.register_with_unit(
            "stall_duration",
            "Durations of the recorded stalls, by program and kind (from the ring records the \
             agent received: its count can be below syncspy_stall_events_total when records \
             were lost)",
            Unit::Seconds,
            s.durations.clone(),
        );
        s
    }
}

/// What the library counted per program, and the processes followed.
struct ProgramSeries {
    processes: Family<StateLabels, Gauge>,
    dropped: Family<ProgramLabels, Counter>,
    lost: Family<ProgramLabels, Counter>,
    overhead: Family<ProgramLabels, FloatCounter>,
    host_wait_overhead: Family<ProgramLabels, FloatCounter>,
    forgotten: Family<ProgramLabels, Counter>,
    shed: Family<ShedLabels, Counter>,
    shedding: Family<ProgramLabels, Gauge>,
}

impl ProgramSeries {
    fn register(reg: &mut Registry) -> ProgramSeries {
        let s = ProgramSeries {
            processes: Family::default(),
            dropped: Family::default(),
            lost: Family::default(),
            overhead: Family::default(),
            host_wait_overhead: Family::default(),
            forgotten: Family::default(),
            shed: Family::default(),
            shedding: Family::default(),
        };
        reg.register(
            "processes",
            "Instrumented processes followed now, by program and state",
            s.processes.clone(),
        );
        reg.register(
            "dropped_events",
            "Events libsyncspy counted but could not write to its ring",
            s.dropped.clone(),
        );
        reg.register(
            "lost_records",
            "Ring records the agent never received (totals stay exact)",
            s.lost.clone(),
        );
        reg.register_with_unit(
            "overhead",
            "Time libsyncspy spent on its own work inside the programs",
            Unit::Seconds,
            s.overhead.clone(),
        );
        reg.register_with_unit(
            "host_wait_overhead",
            "The part of syncspy_overhead_seconds_total that was the host-wait machinery (queuing \
             host functions behind the library's trampoline, the looks around them, the thread \
             watching for a waiter's wake), outside the budget",
            Unit::Seconds,
            s.host_wait_overhead.clone(),
        );
        reg.register(
            "forgotten_processes",
            "Ended processes no longer followed (their totals are kept in the counters)",
            s.forgotten.clone(),
        );
        reg.register(
            "shed",
            "Detail libsyncspy shed to keep within its budget (SYNCSPY_BUDGET; totals stay \
             exact), by what: stacks (events without a call site), gap_records and records \
             (kept as totals only), looks (other threads' Python frames not read)",
            s.shed.clone(),
        );
        reg.register(
            "shedding_processes",
            "Followed processes whose library sheds detail now (over its budget)",
            s.shedding.clone(),
        );
        s
    }

    /// Adds what a program's processes shed (`shed`: the amounts by `what`).
    fn add_shed(&self, program: &str, shed: &BTreeMap<String, u64>) {
        for (what, n) in shed.iter().filter(|(_, n)| **n > 0) {
            add_sat(
                &self.shed.get_or_create(&ShedLabels {
                    program: program.to_string(),
                    what: what.clone(),
                }),
                *n,
            );
        }
    }
}

/// The agent itself: what it could not read or left out, its version.
struct AgentSeries {
    skipped: Gauge<i64>,
    reader_dropped: Family<WhatLabels, Counter>,
    info: Family<VersionLabels, Gauge>,
}

impl AgentSeries {
    fn register(reg: &mut Registry) -> AgentSeries {
        let s = AgentSeries {
            skipped: Gauge::default(),
            reader_dropped: Family::default(),
            info: Family::default(),
        };
        reg.register(
            "segments_skipped",
            "Files in the segment folder that could not be read",
            s.skipped.clone(),
        );
        reg.register(
            "reader_dropped",
            "What the agent left out to stay within its budgets (docs/contracts.md): segments \
             not followed (their user at their cap), histograms not made, modules not used, \
             polls deferred, stacks left for a later step; and ended processes compacted",
            s.reader_dropped.clone(),
        );
        reg.register("agent_info", "The agent's version", s.info.clone());
        s
    }
}

/// The GPU's own time: idle gaps and busy fractions. Not host stalls.
struct GpuSeries {
    /// The GPU idle measured behind syncs and blocking copies (ABI 1.10), and how many were measured.
    idle_after: Family<ProgramLabels, FloatCounter>,
    idle_after_syncs: Family<ProgramLabels, Counter>,
    idle: Family<ProgramLabels, FloatCounter>,
    gaps: Family<ProgramLabels, Counter>,
    gap_durations: Family<ProgramLabels, BucketedHistogram>,
    busy: Family<ProgramLabels, Gauge<f64, AtomicU64>>,
}

impl GpuSeries {
    fn register(reg: &mut Registry) -> GpuSeries {
        let s = GpuSeries {
            idle_after: Family::default(),
            idle_after_syncs: Family::default(),
            idle: Family::default(),
            gaps: Family::default(),
            gap_durations: Family::default(),
            busy: Family::default(),
        };
        reg.register_with_unit(
            "gpu_idle",
            "Time the GPU ran nothing between two pieces of work (the gaps of at least the \
             library's minimum gap, SYNCSPY_GPU_IDLE_MIN_US; their durations are \
             syncspy_gpu_idle_gap_duration_seconds). Not a host stall: the syncspy_stall_* \
             series leave it out",
            Unit::Seconds,
            s.idle.clone(),
        );
        reg.register(
            "gpu_idle_gaps",
            "GPU idle gaps of at least the library's minimum gap",
            s.gaps.clone(),
        );
        reg.register_with_unit(
            "gpu_idle_gap_duration",
            "Durations of the GPU idle gaps the agent received",
            Unit::Seconds,
            s.gap_durations.clone(),
        );
        reg.register_with_unit(
            "gpu_idle_after_syncs",
            "GPU idle behind the syncs and blocking or pageable copies the library measured (two \
             CUDA events at each, whatever the GPU tracing: from the end of the work waited for \
             to the arrival of the next work); how many were measured is \
             syncspy_gpu_idle_measured_syncs_total",
            Unit::Seconds,
            s.idle_after.clone(),
        );
        reg.register(
            "gpu_idle_measured_syncs",
            "Syncs and blocking or pageable copies whose GPU idle the library measured (a sync \
             with no work since the thread's previous stall counts, with none of its own)",
            s.idle_after_syncs.clone(),
        );
        reg.register(
            "gpu_busy_ratio",
            "Busy fraction of the GPUs of a program's live processes: the mean over their \
             devices of the last complete window (SYNCSPY_GPU_IDLE windows, 1 s), or of the \
             whole run before one; absent while not measured",
            s.busy.clone(),
        );
        s
    }
}

/// Every series but the jobs', registered in the order they are rendered.
struct Series {
    stalls: StallSeries,
    programs: ProgramSeries,
    agent: AgentSeries,
    process_info: Family<ProcessLabels, Gauge>,
    gpu: GpuSeries,
}

fn program_labels(program: &str) -> ProgramLabels {
    ProgramLabels {
        program: program.to_string(),
    }
}

fn kind_labels(program: &str, kind: &KindName) -> KindLabels {
    KindLabels {
        program: program.to_string(),
        kind: kind.to_string(),
    }
}

impl Series {
    fn register(reg: &mut Registry) -> Series {
        let stalls = StallSeries::register(reg);
        let programs = ProgramSeries::register(reg);
        let agent = AgentSeries::register(reg);
        let process_info = Family::default();
        reg.register(
            "process_info",
            "Where each live process is: its pid in its own PID namespace, its pid on this \
             node (host_pid; empty when the same), its container and Kubernetes pod (empty \
             when none); at most 256 processes, those with the most stall time",
            process_info.clone(),
        );
        let gpu = GpuSeries::register(reg);
        Series {
            stalls,
            programs,
            agent,
            process_info,
            gpu,
        }
    }

    /// One kind's totals. GPU idle gaps are records of the segment like the stalls, but the
    /// GPU's time, not the host's: they have series of their own.
    fn add_kind(&self, program: &str, kind: &KindName, count: u64, total_ns: u64, bytes: u64) {
        if *kind == syncspy_abi::Kind::GpuIdle {
            let pl = program_labels(program);
            add_sat(&self.gpu.gaps.get_or_create(&pl), count);
            self.gpu
                .idle
                .get_or_create(&pl)
                .inc_by(total_ns as f64 / 1e9);
            return;
        }
        let l = kind_labels(program, kind);
        add_sat(&self.stalls.events.get_or_create(&l), count);
        self.stalls
            .seconds
            .get_or_create(&l)
            .inc_by(total_ns as f64 / 1e9);
        add_sat(&self.stalls.bytes.get_or_create(&l), bytes);
    }

    fn add_latency(&self, program: &str, latency: &BTreeMap<KindName, Latency>) {
        for (kind, l) in latency {
            if *kind == syncspy_abi::Kind::GpuIdle {
                self.gpu
                    .gap_durations
                    .get_or_create(&program_labels(program))
                    .add(l);
            } else {
                self.stalls
                    .durations
                    .get_or_create(&kind_labels(program, kind))
                    .add(l);
            }
        }
    }

    /// The GPU idle measured behind a program's syncs.
    fn add_idle_after(&self, program: &str, syncs: u64, ns: u64) {
        let pl = program_labels(program);
        add_sat(&self.gpu.idle_after_syncs.get_or_create(&pl), syncs);
        self.gpu
            .idle_after
            .get_or_create(&pl)
            .inc_by(ns as f64 / 1e9);
    }

    /// The library's counts of a program: events dropped, records lost, its own time (ns) and
    /// the host-wait machinery's part of it.
    fn add_program(&self, program: &str, dropped: u64, lost: u64, own: (u64, u64)) {
        let pl = program_labels(program);
        add_sat(&self.programs.dropped.get_or_create(&pl), dropped);
        add_sat(&self.programs.lost.get_or_create(&pl), lost);
        self.programs
            .overhead
            .get_or_create(&pl)
            .inc_by(own.0 as f64 / 1e9);
        if own.1 > 0 {
            self.programs
                .host_wait_overhead
                .get_or_create(&pl)
                .inc_by(own.1 as f64 / 1e9);
        }
    }

    /// Where the live processes with the most stall time are.
    fn add_process_info(&self, s: &Snapshot) {
        let mut live: Vec<&SnapshotProcess> = s
            .processes
            .iter()
            .filter(|p| p.report.state.is_running())
            .collect();
        live.sort_by_key(|p| std::cmp::Reverse(p.report.stall_ns));
        for p in live.into_iter().take(MAX_PROCESS_INFO) {
            let r = &p.report;
            self.process_info
                .get_or_create(&ProcessLabels {
                    program: p.program.clone(),
                    pid: r.pid.to_string(),
                    host_pid: r.host_pid.map(|h| h.to_string()).unwrap_or_default(),
                    container: r.container.clone().unwrap_or_default(),
                    pod_uid: r.pod_uid.clone().unwrap_or_default(),
                })
                .set(1);
        }
    }

    /// Busy fractions of the followed processes' devices, their mean per program.
    fn add_gpu_busy(&self, s: &Snapshot) {
        let mut busy: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for p in s.processes.iter().filter(|p| p.report.gpu.measured) {
            let of = busy.entry(p.program.as_str()).or_default();
            for d in &p.report.gpu.devices {
                if let Some(b) = d.last_window_busy.or(d.busy_fraction) {
                    of.push(b);
                }
            }
        }
        for (program, v) in busy {
            if !v.is_empty() {
                self.gpu
                    .busy
                    .get_or_create(&program_labels(program))
                    .set(v.iter().sum::<f64>() / v.len() as f64);
            }
        }
    }

    /// A followed process: its kinds, latencies, the library's counts and its state.
    fn add_live(&self, p: &SnapshotProcess) {
        let r = &p.report;
        for (kind, st) in &r.kinds {
            self.add_kind(&p.program, kind, st.count, st.total_ns, st.bytes);
        }
        self.add_latency(&p.program, &p.latency);
        if let Some(b) = &r.gpu.behind_stalls {
            self.add_idle_after(&p.program, b.measured, b.total_ns);
        }
        self.add_program(
            &p.program,
            r.dropped_events,
            r.lost_records.saturating_sub(r.dropped_events),
            (r.overhead_ns, r.host_wait_overhead_ns.unwrap_or(0)),
        );
        if let Some(c) = &r.cost {
            self.programs
                .add_shed(&p.program, &syncspy_read::snapshot::shed_amounts(c));
            if c.shedding_now().is_some() {
                self.programs
                    .shedding
                    .get_or_create(&program_labels(&p.program))
                    .inc();
            }
        }
        self.programs
            .processes
            .get_or_create(&StateLabels {
                program: p.program.clone(),
                state: r.state.name().to_string(),
            })
            .inc();
    }

    /// The kept totals of a program's processes that are no longer followed.
    fn add_forgotten(&self, program: &str, f: &ForgottenProgram) {
        for (kind, a) in &f.kinds {
            self.add_kind(program, kind, a.count, a.total_ns, a.bytes);
        }
        self.add_latency(program, &f.latency);
        self.add_program(
            program,
            f.dropped_events,
            f.lost_records,
            (f.overhead_ns, f.host_wait_overhead_ns),
        );
        if f.idle_after_syncs > 0 {
            self.add_idle_after(program, f.idle_after_syncs, f.idle_after_ns);
        }
        self.programs.add_shed(program, &f.shed);
        add_sat(
            &self
                .programs
                .forgotten
                .get_or_create(&program_labels(program)),
            f.processes,
        );
    }

    fn add_agent(&self, s: &Snapshot) {
        self.agent.skipped.set(s.segments_skipped as i64);
        for (what, n) in &s.reader_dropped {
            add_sat(
                &self
                    .agent
                    .reader_dropped
                    .get_or_create(&WhatLabels { what: what.clone() }),
                *n,
            );
        }
        self.agent
            .info
            .get_or_create(&VersionLabels {
                version: env!("CARGO_PKG_VERSION").to_string(),
            })
            .set(1);
    }
}

/// The `syncspy_job_*` series.
struct JobSeries {
    stall: Family<RankLabels, FloatCounter>,
    behind: Family<RankLabels, FloatCounter>,
    collective: Family<RankLabels, FloatCounter>,
    collective_wait: Family<RankLabels, FloatCounter>,
    ranks: Family<JobLabels, Gauge>,
    straggler: Family<JobLabels, Gauge>,
    excess: Family<JobLabels, Gauge<f64, AtomicU64>>,
}

impl JobSeries {
    fn register(reg: &mut Registry) -> JobSeries {
        let s = JobSeries {
            stall: Family::default(),
            behind: Family::default(),
            collective: Family::default(),
            collective_wait: Family::default(),
            ranks: Family::default(),
            straggler: Family::default(),
            excess: Family::default(),
        };
        reg.register_with_unit(
            "job_rank_stall",
            "Time the host of a rank of a distributed job waited in CUDA calls (live \
             processes; the rank's process on this node)",
            Unit::Seconds,
            s.stall.clone(),
        );
        reg.register_with_unit(
            "job_rank_gpu_idle_behind_stalls",
            "GPU idle time of a rank blamed on its own host stalls: its GPU sat still while \
             its host waited (present when the rank's GPU is measured)",
            Unit::Seconds,
            s.behind.clone(),
        );
        reg.register_with_unit(
            "job_rank_collective",
            "Time a rank's GPU spent in collective-communication (NCCL) calls, waiting for \
             the other ranks included: measured around every call by ABI 1.8 libraries, else \
             the collective kernels of traced time. The rank the others wait for has the \
             smallest rate",
            Unit::Seconds,
            s.collective.clone(),
        );
        reg.register_with_unit(
            "job_rank_collective_wait",
            "How long a rank waited in collective kernels for the job's slowest rank on this \
             node: its collective time beyond the straggler's share of traced time",
            Unit::Seconds,
            s.collective_wait.clone(),
        );
        reg.register(
            "job_ranks",
            "Ranks of a job followed by this agent",
            s.ranks.clone(),
        );
        reg.register(
            "job_straggler_rank",
            "The rank named the straggler among this agent's ranks of a job (the rank the \
             others waited for in collective kernels when those are traced, else the largest \
             score, at least 1.25 times the others' median; absent when none stands out)",
            s.straggler.clone(),
        );
        reg.register_with_unit(
            "job_straggler_excess",
            "How much longer the straggler's score is than the other ranks' median on this \
             node",
            Unit::Seconds,
            s.excess.clone(),
        );
        s
    }

    /// The `i`th job by stall time: its own id among the first [`MAX_JOBS`], else `other`.
    fn add_job(&self, i: usize, j: &syncspy_read::jobs::JobReport) {
        let own = i < MAX_JOBS;
        let job_id = if own {
            j.id().to_string()
        } else {
            "other".to_string()
        };
        let jl = JobLabels {
            job_id: job_id.clone(),
        };
        self.ranks.get_or_create(&jl).inc_by(j.ranks().len() as i64);
        if own {
            if let Some(st) = j.straggler() {
                if let Some(r) = st.rank {
                    self.straggler.get_or_create(&jl).set(i64::from(r));
                }
                self.excess
                    .get_or_create(&jl)
                    .set(st.excess_ns as f64 / 1e9);
            }
        }
        for (k, r) in j.ranks().iter().enumerate() {
            let rank = match r.rank {
                _ if !own || k >= MAX_RANKS => "other".to_string(),
                Some(r) => r.to_string(),
                None => "unknown".to_string(),
            };
            self.add_rank(
                &RankLabels {
                    job_id: job_id.clone(),
                    rank,
                },
                r,
            );
        }
    }

    fn add_rank(&self, rl: &RankLabels, r: &syncspy_read::jobs::RankReport) {
        self.stall.get_or_create(rl).inc_by(r.stall_ns as f64 / 1e9);
        if let Some(b) = r.gpu_idle_behind_stalls_ns {
            self.behind.get_or_create(rl).inc_by(b as f64 / 1e9);
        }
        if let Some(c) = r.collective_ns {
            self.collective.get_or_create(rl).inc_by(c as f64 / 1e9);
        }
        if let Some(w) = r.collective_wait_ns {
            self.collective_wait
                .get_or_create(rl)
                .inc_by(w as f64 / 1e9);
        }
    }
}

/// The `syncspy_job_*` series of the live processes that are ranks of a job.
fn render_jobs(reg: &mut Registry, s: &Snapshot) {
    let series = JobSeries::register(reg);
    let reports: Vec<_> = s.processes.iter().map(|p| p.report.clone()).collect();
    let mut jobs = syncspy_read::jobs::jobs_of(&reports);
    // The jobs with the most stall time keep their id.
    jobs.sort_by_key(|j| (std::cmp::Reverse(j.stall_ns()), j.id().to_string()));
    for (i, j) in jobs.iter().enumerate() {
        series.add_job(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncspy_read::report::{ProcessReport, Stats};
    use syncspy_read::snapshot::Amounts;
    use syncspy_read::snapshot::ForgottenProgram;

    /// A latency of `count` values summing to `sum_ns`, with (bucket index, values) set.
    fn lat(count: u64, sum_ns: u64, set: &[(usize, u64)]) -> Latency {
        let mut buckets = vec![0; LATENCY_BOUNDS_NS.len() + 1];
        for (i, n) in set {
            buckets[*i] = *n;
        }
        Latency {
            count,
            sum_ns,
            buckets,
        }
    }

    #[test]
    fn counters_at_u64_max_saturate_instead_of_wrapping() {
        let mut r = ProcessReport {
            state: "running".into(),
            dropped_events: u64::MAX,
            lost_records: u64::MAX,
            ..ProcessReport::default()
        };
        r.kinds.insert(
            "stream_sync".into(),
            Stats {
                count: u64::MAX,
                total_ns: u64::MAX,
                bytes: u64::MAX,
                ..Stats::default()
            },
        );
        let p = SnapshotProcess {
            program: "x".into(),
            report: r,
            latency: BTreeMap::new(),
        };
        let mut f = ForgottenProgram {
            processes: u64::MAX,
            dropped_events: u64::MAX,
            ..ForgottenProgram::default()
        };
        f.kinds.insert(
            "stream_sync".into(),
            Amounts {
                count: 5,
                total_ns: 5,
                bytes: u64::MAX,
            },
        );
        let s = Snapshot {
            processes: vec![p.clone(), p],
            forgotten: [("x".to_string(), f)].into_iter().collect(),
            ..Snapshot::default()
        };
        let m = render(&s).unwrap();
        let max = u64::MAX;
        for line in [
            format!(r#"syncspy_stall_events_total{{program="x",kind="stream_sync"}} {max}"#),
            format!(r#"syncspy_stall_bytes_total{{program="x",kind="stream_sync"}} {max}"#),
            format!(r#"syncspy_dropped_events_total{{program="x"}} {max}"#),
            format!(r#"syncspy_forgotten_processes_total{{program="x"}} {max}"#),
        ] {
            assert!(m.lines().any(|l| l == line), "no line {line:?} in\n{m}");
        }
    }

    /// A live process that is rank `rank` of job `job`, stalled `stall_ms`.
    fn rank_proc(job: &str, rank: Option<u32>, stall_ms: u64) -> SnapshotProcess {
        SnapshotProcess {
            program: "train.py".into(),
            report: ProcessReport {
                state: "running".into(),
                stall_ns: stall_ms * 1_000_000,
                job: Some(syncspy_read::jobs::JobRef {
                    id: job.into(),
                    launcher: "torchelastic".into(),
                    rank,
                    ..Default::default()
                }),
                ..ProcessReport::default()
            },
            latency: BTreeMap::new(),
        }
    }

    #[test]
    fn the_agents_help_names_every_metric_family() {
        let mut processes = vec![
            rank_proc("exp-7", Some(0), 20),
            rank_proc("exp-7", Some(1), 90),
        ];
        for p in &mut processes {
            let g = &mut p.report.gpu;
            g.measured = true;
            g.busy_fraction = Some(0.5);
            g.traced_ns = 1_000_000_000;
            g.collective_ns = Some(1_000_000);
            g.devices = vec![syncspy_read::report::GpuDevice {
                busy_fraction: Some(0.5),
                ..Default::default()
            }];
            p.report.kinds.insert(
                "gpu_idle".into(),
                Stats {
                    count: 3,
                    total_ns: 3_000_000,
                    ..Stats::default()
                },
            );
            p.report.kinds.insert(
                "stream_sync".into(),
                Stats {
                    count: 2,
                    total_ns: 2_000_000,
                    ..Stats::default()
                },
            );
            p.latency.insert("stream_sync".into(), Latency::default());
        }
        let m = render(&Snapshot {
            processes,
            ..Snapshot::default()
        })
        .unwrap();
        let families: Vec<&str> = m
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        // The ones this snapshot cannot show are checked by name.
        for f in families.iter().copied().chain([
            "syncspy_forgotten_processes",
            "syncspy_segments_skipped",
            "syncspy_reader_dropped",
            "syncspy_job_straggler_rank",
            "syncspy_job_straggler_excess_seconds",
        ]) {
            assert!(
                crate::HELP.contains(f),
                "{f} is served but not in `syncspy agent --help`"
            );
        }
        for f in [
            "syncspy_stall_duration_seconds",
            "syncspy_gpu_idle_seconds",
            "syncspy_gpu_busy_ratio",
            "syncspy_job_rank_collective_seconds",
        ] {
            assert!(families.contains(&f), "{f} not rendered: {families:?}");
        }
    }

    #[test]
    fn collective_time_and_wait_are_exported_per_rank() {
        // Two ranks traced 10 s: rank 1 spent 20 ms in NCCL kernels, rank 0 320 ms.
        let mut processes = vec![
            rank_proc("nccl", Some(0), 30),
            rank_proc("nccl", Some(1), 30),
        ];
        for (p, coll_ms) in processes.iter_mut().zip([320u64, 20]) {
            p.report.gpu.measured = true;
            p.report.gpu.traced_ns = 10_000_000_000;
            p.report.gpu.collective_ns = Some(coll_ms * 1_000_000);
        }
        let m = render(&Snapshot {
            processes,
            ..Snapshot::default()
        })
        .unwrap();
        for line in [
            r#"syncspy_job_rank_collective_seconds_total{job_id="nccl",rank="0"} 0.32"#,
            r#"syncspy_job_rank_collective_seconds_total{job_id="nccl",rank="1"} 0.02"#,
            r#"syncspy_job_rank_collective_wait_seconds_total{job_id="nccl",rank="0"} 0.3"#,
            r#"syncspy_job_rank_collective_wait_seconds_total{job_id="nccl",rank="1"} 0.0"#,
            r#"syncspy_job_straggler_rank{job_id="nccl"} 1"#,
        ] {
            assert!(m.lines().any(|l| l == line), "no line {line:?} in\n{m}");
        }
    }

    #[test]
    fn jobs_get_per_rank_series_and_their_cardinality_is_bounded() {
        let mut processes = vec![
            rank_proc("exp-7", Some(0), 20),
            rank_proc("exp-7", Some(1), 22),
            rank_proc("exp-7", Some(2), 250),
            rank_proc("exp-7", None, 18),
        ];
        // Many small jobs: those past MAX_JOBS fold into "other".
        for j in 0..MAX_JOBS + 3 {
            processes.push(rank_proc(&format!("small-{j:02}"), Some(0), 1));
        }
        // One job with more ranks than MAX_RANKS on this node.
        for r in 0..MAX_RANKS as u32 + 6 {
            processes.push(rank_proc("wide", Some(r), 100));
        }
        let s = Snapshot {
            processes,
            ..Snapshot::default()
        };
        let m = render(&s).unwrap();
        for line in [
            r#"syncspy_job_rank_stall_seconds_total{job_id="exp-7",rank="0"} 0.02"#,
            r#"syncspy_job_rank_stall_seconds_total{job_id="exp-7",rank="2"} 0.25"#,
            r#"syncspy_job_rank_stall_seconds_total{job_id="exp-7",rank="unknown"} 0.018"#,
            r#"syncspy_job_ranks{job_id="exp-7"} 4"#,
            r#"syncspy_job_straggler_rank{job_id="exp-7"} 2"#,
            r#"syncspy_job_straggler_excess_seconds{job_id="exp-7"} 0.23"#,
            r#"syncspy_job_ranks{job_id="wide"} 70"#,
            r#"syncspy_job_rank_stall_seconds_total{job_id="wide",rank="63"} 0.1"#,
            // The six ranks past the limit, summed.
            r#"syncspy_job_rank_stall_seconds_total{job_id="wide",rank="other"} 0.6"#,
            // Jobs sorted by stall time: exp-7, wide and six of the small ones keep their
            // id; the other five small jobs fold.
            r#"syncspy_job_ranks{job_id="other"} 5"#,
            r#"syncspy_job_rank_stall_seconds_total{job_id="other",rank="other"} 0.005"#,
        ] {
            assert!(m.lines().any(|l| l == line), "no line {line:?} in\n{m}");
        }
        // Ranks that stall alike: no straggler series.
        assert!(
            !m.contains(r#"syncspy_job_straggler_rank{job_id="wide"}"#),
            "{m}"
        );
        let job_ids: std::collections::BTreeSet<&str> = m
            .lines()
            .filter(|l| l.starts_with("syncspy_job_ranks{"))
            .collect();
        assert_eq!(job_ids.len(), MAX_JOBS + 1, "{m}");
        let wide_ranks = m
            .lines()
            .filter(|l| l.starts_with(r#"syncspy_job_rank_stall_seconds_total{job_id="wide""#))
            .count();
        assert_eq!(wide_ranks, MAX_RANKS + 1);
        // No job: no job series at all.
        let m = render(&Snapshot::default()).unwrap();
        assert!(!m.contains("syncspy_job_rank_stall_seconds_total{"), "{m}");
    }

    #[test]
    fn the_gpu_idle_behind_syncs_adds_live_and_forgotten_processes() {
        let live = |pid: u32, b: Option<syncspy_read::report::BehindStalls>| SnapshotProcess {
            program: "train.py".into(),
            report: ProcessReport {
                pid,
                state: "running".into(),
                gpu: syncspy_read::report::Gpu {
                    behind_stalls: b,
                    ..Default::default()
                },
                ..ProcessReport::default()
            },
            latency: BTreeMap::new(),
        };
        let measured = syncspy_read::report::BehindStalls {
            measured: 5,
            syncs: 6,
            total_ns: 2_500_000,
        };
        let f = ForgottenProgram {
            processes: 1,
            idle_after_syncs: 3,
            idle_after_ns: 1_000_000,
            ..ForgottenProgram::default()
        };
        let m = render(&Snapshot {
            processes: vec![live(1, Some(measured)), live(2, None)],
            forgotten: [("train.py".to_string(), f)].into_iter().collect(),
            ..Snapshot::default()
        })
        .unwrap();
        for line in [
            r#"syncspy_gpu_idle_after_syncs_seconds_total{program="train.py"} 0.0035"#,
            r#"syncspy_gpu_idle_measured_syncs_total{program="train.py"} 8"#,
        ] {
            assert!(m.lines().any(|l| l == line), "{line} not in\n{m}");
        }
        // A program with nothing measured has no such series.
        let m = render(&Snapshot {
            processes: vec![live(2, None)],
            ..Snapshot::default()
        })
        .unwrap();
        assert!(
            !m.contains("syncspy_gpu_idle_after_syncs_seconds_total{"),
            "{m}"
        );
    }

    #[test]
    fn what_libraries_shed_is_counted_per_program_live_and_forgotten() {
        let cost = syncspy_read::report::CostReport {
            budget_pct: 1.0,
            shedding: "gap_records".into(),
            raised: 2,
            stacks_shed: 40,
            gap_records_shed: 7,
            records_shed: 0,
            looks_skipped: 3,
        };
        let live = |pid: u32, cost: Option<syncspy_read::report::CostReport>| SnapshotProcess {
            program: "train.py".into(),
            report: ProcessReport {
                pid,
                state: "running".into(),
                cost,
                ..ProcessReport::default()
            },
            latency: BTreeMap::new(),
        };
        let calm = syncspy_read::report::CostReport {
            shedding: "none".into(),
            ..cost.clone()
        };
        let f = ForgottenProgram {
            processes: 1,
            shed: syncspy_read::snapshot::shed_amounts(&cost),
            ..ForgottenProgram::default()
        };
        let m = render(&Snapshot {
            processes: vec![live(1, Some(cost)), live(2, Some(calm)), live(3, None)],
            forgotten: [("train.py".to_string(), f)].into_iter().collect(),
            ..Snapshot::default()
        })
        .unwrap();
        for line in [
            // Two live processes and a forgotten one with the same amounts.
            r#"syncspy_shed_total{program="train.py",what="stacks"} 120"#,
            r#"syncspy_shed_total{program="train.py",what="gap_records"} 21"#,
            r#"syncspy_shed_total{program="train.py",what="looks"} 9"#,
            // Only the process that sheds now.
            r#"syncspy_shedding_processes{program="train.py"} 1"#,
        ] {
            assert!(m.lines().any(|l| l == line), "{line} not in\n{m}");
        }
        assert!(!m.contains(r#"what="records""#), "{m}");
    }

    #[test]
    fn live_and_forgotten_processes_add_up_per_program_and_kind() {
        let mut r = ProcessReport {
            pid: 5,
            state: "running".into(),
            dropped_events: 1,
            lost_records: 3,
            overhead_ns: 2_000_000,
            host_wait_overhead_ns: Some(1_500_000),
            ..ProcessReport::default()
        };
        r.kinds.insert(
            "stream_sync".into(),
            Stats {
                count: 4,
                total_ns: 1_500_000_000,
                ..Stats::default()
            },
        );
        let mut f = ForgottenProgram {
            processes: 2,
            host_wait_overhead_ns: 500_000,
            ..ForgottenProgram::default()
        };
        f.latency
            .insert("stream_sync".into(), lat(6, 600_000, &[(2, 6)]));
        f.kinds.insert(
            "stream_sync".into(),
            Amounts {
                count: 6,
                total_ns: 500_000_000,
                bytes: 0,
            },
        );
        f.kinds.insert(
            "memcpy_pageable".into(),
            Amounts {
                count: 1,
                total_ns: 1000,
                bytes: 4096,
            },
        );
        r.kinds.insert(
            "gpu_idle".into(),
            Stats {
                count: 2,
                total_ns: 250_000_000,
                ..Stats::default()
            },
        );
        r.gpu.measured = true;
        r.gpu.devices = vec![
            syncspy_read::report::GpuDevice {
                last_window_busy: Some(0.5),
                busy_fraction: Some(0.9),
                ..Default::default()
            },
            syncspy_read::report::GpuDevice {
                busy_fraction: Some(0.7),
                ..Default::default()
            },
        ];
        f.kinds.insert(
            "gpu_idle".into(),
            Amounts {
                count: 1,
                total_ns: 750_000_000,
                bytes: 0,
            },
        );
        let s = Snapshot {
            processes: vec![SnapshotProcess {
                program: "train.py".into(),
                report: r,
                // 2 at or under 10 µs, 1 in (1 ms, 3.16 ms], 1 above 10 s; two idle gaps in
                // (100 ms, 316 ms].
                latency: [
                    (
                        "stream_sync".into(),
                        lat(4, 15_000_000_000, &[(0, 2), (5, 1), (13, 1)]),
                    ),
                    ("gpu_idle".into(), lat(2, 250_000_000, &[(9, 2)])),
                ]
                .into_iter()
                .collect(),
            }],
            forgotten: [("train.py".to_string(), f)].into_iter().collect(),
            segments_skipped: 1,
            ..Snapshot::default()
        };
        let m = render(&s).unwrap();
        for line in [
            r#"syncspy_stall_events_total{program="train.py",kind="stream_sync"} 10"#,
            r#"syncspy_stall_seconds_total{program="train.py",kind="stream_sync"} 2.0"#,
            r#"syncspy_stall_bytes_total{program="train.py",kind="memcpy_pageable"} 4096"#,
            r#"syncspy_processes{program="train.py",state="running"} 1"#,
            r#"syncspy_dropped_events_total{program="train.py"} 1"#,
            r#"syncspy_lost_records_total{program="train.py"} 2"#,
            r#"syncspy_forgotten_processes_total{program="train.py"} 2"#,
            // The live process's 1.5 ms and the forgotten ones' 0.5 ms.
            r#"syncspy_host_wait_overhead_seconds_total{program="train.py"} 0.002"#,
            "syncspy_segments_skipped 1",
            r#"syncspy_gpu_idle_seconds_total{program="train.py"} 1.0"#,
            r#"syncspy_gpu_busy_ratio{program="train.py"} 0.6"#,
            // Live and forgotten processes summed; buckets cumulative.
            r#"syncspy_stall_duration_seconds_bucket{le="0.00001",program="train.py",kind="stream_sync"} 2"#,
            r#"syncspy_stall_duration_seconds_bucket{le="0.0001",program="train.py",kind="stream_sync"} 8"#,
            r#"syncspy_stall_duration_seconds_bucket{le="0.003162278",program="train.py",kind="stream_sync"} 9"#,
            r#"syncspy_stall_duration_seconds_bucket{le="10.0",program="train.py",kind="stream_sync"} 9"#,
            r#"syncspy_stall_duration_seconds_bucket{le="+Inf",program="train.py",kind="stream_sync"} 10"#,
            r#"syncspy_stall_duration_seconds_count{program="train.py",kind="stream_sync"} 10"#,
            "# TYPE syncspy_stall_duration_seconds histogram",
            "# TYPE syncspy_stall_seconds counter",
            "# UNIT syncspy_stall_seconds seconds",
            "# EOF",
            // GPU idle gaps have series of their own.
            r#"syncspy_gpu_idle_gaps_total{program="train.py"} 3"#,
            r#"syncspy_gpu_idle_gap_duration_seconds_count{program="train.py"} 2"#,
        ] {
            assert!(m.lines().any(|l| l == line), "no line {line:?} in\n{m}");
        }
        // They are the GPU's time, not the host's: no host-stall series counts them (the
        // dashboard's "host stall time" summed them in).
        let in_stalls: Vec<&str> = m
            .lines()
            .filter(|l| l.starts_with("syncspy_stall") && l.contains(r#"kind="gpu_idle""#))
            .collect();
        assert!(in_stalls.is_empty(), "{in_stalls:#?}");
    }
}
