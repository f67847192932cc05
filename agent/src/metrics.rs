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
use syncspy_read::snapshot::{Latency, Snapshot, SnapshotProcess, LATENCY_BOUNDS_NS};

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
    let events = Family::<KindLabels, Counter>::default();
    let seconds = Family::<KindLabels, FloatCounter>::default();
    let bytes = Family::<KindLabels, Counter>::default();
    let durations = Family::<KindLabels, BucketedHistogram>::default();
    let processes = Family::<StateLabels, Gauge>::default();
    let dropped = Family::<ProgramLabels, Counter>::default();
    let lost = Family::<ProgramLabels, Counter>::default();
    let overhead = Family::<ProgramLabels, FloatCounter>::default();
    let forgotten = Family::<ProgramLabels, Counter>::default();
    let info = Family::<VersionLabels, Gauge>::default();
    let gpu_idle = Family::<ProgramLabels, FloatCounter>::default();
    let gpu_gaps = Family::<ProgramLabels, Counter>::default();
    let gpu_gap_durations = Family::<ProgramLabels, BucketedHistogram>::default();
    let gpu_busy = Family::<ProgramLabels, Gauge<f64, AtomicU64>>::default();
    let skipped = Gauge::<i64>::default();
    let reader_dropped = Family::<WhatLabels, Counter>::default();
    let process_info = Family::<ProcessLabels, Gauge>::default();
    reg.register(
        "stall_events",
        "CUDA calls that made the host wait, by program and kind",
        events.clone(),
    );
    reg.register_with_unit(
        "stall",
        "Time the host waited in CUDA calls, by program and kind",
        Unit::Seconds,
        seconds.clone(),
    );
    reg.register_with_unit(
        "stall",
        "Bytes moved by the CUDA calls that made the host wait",
        Unit::Bytes,
        bytes.clone(),
    );
    reg.register_with_unit(
        "stall_duration",
        "Durations of the recorded stalls, by program and kind (from the ring records the \
         agent received: its count can be below syncspy_stall_events_total when records \
         were lost)",
        Unit::Seconds,
        durations.clone(),
    );
    reg.register(
        "processes",
        "Instrumented processes followed now, by program and state",
        processes.clone(),
    );
    reg.register(
        "dropped_events",
        "Events libsyncspy counted but could not write to its ring",
        dropped.clone(),
    );
    reg.register(
        "lost_records",
        "Ring records the agent never received (totals stay exact)",
        lost.clone(),
    );
    reg.register_with_unit(
        "overhead",
        "Time libsyncspy spent on its own work inside the programs",
        Unit::Seconds,
        overhead.clone(),
    );
    reg.register(
        "forgotten_processes",
        "Ended processes no longer followed (their totals are kept in the counters)",
        forgotten.clone(),
    );
    reg.register(
        "segments_skipped",
        "Files in the segment folder that could not be read",
        skipped.clone(),
    );
    reg.register(
        "reader_dropped",
        "What the agent left out to stay within its budgets (docs/contracts.md): segments \
         not followed (their user at their cap), histograms not made, modules not used, \
         polls deferred, stacks left for a later step; and ended processes compacted",
        reader_dropped.clone(),
    );
    reg.register("agent_info", "The agent's version", info.clone());
    reg.register(
        "process_info",
        "Where each live process is: its pid in its own PID namespace, its pid on this node \
         (host_pid; empty when the same), its container and Kubernetes pod (empty when none); \
         at most 256 processes, those with the most stall time",
        process_info.clone(),
    );
    reg.register_with_unit(
        "gpu_idle",
        "Time the GPU ran nothing between two pieces of work (the gaps of at least the \
         library's minimum gap, SYNCSPY_GPU_IDLE_MIN_US; their durations are \
         syncspy_gpu_idle_gap_duration_seconds). Not a host stall: the syncspy_stall_* \
         series leave it out",
        Unit::Seconds,
        gpu_idle.clone(),
    );
    reg.register(
        "gpu_idle_gaps",
        "GPU idle gaps of at least the library's minimum gap",
        gpu_gaps.clone(),
    );
    reg.register_with_unit(
        "gpu_idle_gap_duration",
        "Durations of the GPU idle gaps the agent received",
        Unit::Seconds,
        gpu_gap_durations.clone(),
    );
    reg.register(
        "gpu_busy_ratio",
        "Busy fraction of the GPUs of a program's live processes: the mean over their devices \
         of the last complete window (SYNCSPY_GPU_IDLE windows, 1 s), or of the whole run \
         before one; absent while not measured",
        gpu_busy.clone(),
    );

    // Live processes and forgotten ones add into the same series.
    let kind_labels = |program: &str, kind: &KindName| KindLabels {
        program: program.to_string(),
        kind: kind.to_string(),
    };
    // GPU idle gaps are records of the segment like the stalls, but the GPU's time, not the
    // host's: they have series of their own.
    let add_kind = |program: &str, kind: &KindName, count: u64, total_ns: u64, n_bytes: u64| {
        let pl = ProgramLabels {
            program: program.to_string(),
        };
        if *kind == syncspy_abi::Kind::GpuIdle {
            add_sat(&gpu_gaps.get_or_create(&pl), count);
            gpu_idle.get_or_create(&pl).inc_by(total_ns as f64 / 1e9);
            return;
        }
        let l = kind_labels(program, kind);
        add_sat(&events.get_or_create(&l), count);
        seconds.get_or_create(&l).inc_by(total_ns as f64 / 1e9);
        add_sat(&bytes.get_or_create(&l), n_bytes);
    };
    let add_latency = |program: &str, latency: &BTreeMap<KindName, Latency>| {
        for (kind, l) in latency {
            if *kind == syncspy_abi::Kind::GpuIdle {
                gpu_gap_durations
                    .get_or_create(&ProgramLabels {
                        program: program.to_string(),
                    })
                    .add(l);
            } else {
                durations.get_or_create(&kind_labels(program, kind)).add(l);
            }
        }
    };
    let add_program = |program: &str, dropped_events: u64, lost_records: u64, overhead_ns: u64| {
        let pl = ProgramLabels {
            program: program.to_string(),
        };
        add_sat(&dropped.get_or_create(&pl), dropped_events);
        add_sat(&lost.get_or_create(&pl), lost_records);
        overhead.get_or_create(&pl).inc_by(overhead_ns as f64 / 1e9);
        pl
    };
    let mut live: Vec<&SnapshotProcess> = s
        .processes
        .iter()
        .filter(|p| p.report.state.is_running())
        .collect();
    live.sort_by_key(|p| std::cmp::Reverse(p.report.stall_ns));
    for p in live.into_iter().take(MAX_PROCESS_INFO) {
        let r = &p.report;
        process_info
            .get_or_create(&ProcessLabels {
                program: p.program.clone(),
                pid: r.pid.to_string(),
                host_pid: r.host_pid.map(|h| h.to_string()).unwrap_or_default(),
                container: r.container.clone().unwrap_or_default(),
                pod_uid: r.pod_uid.clone().unwrap_or_default(),
            })
            .set(1);
    }
    // Busy fractions of the live processes' devices, per program.
    let mut busy: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for p in &s.processes {
        let r = &p.report;
        if r.gpu.measured {
            let of = busy.entry(p.program.as_str()).or_default();
            for d in &r.gpu.devices {
                if let Some(b) = d.last_window_busy.or(d.busy_fraction) {
                    of.push(b);
                }
            }
        }
        for (kind, st) in &r.kinds {
            add_kind(&p.program, kind, st.count, st.total_ns, st.bytes);
        }
        add_latency(&p.program, &p.latency);
        add_program(
            &p.program,
            r.dropped_events,
            r.lost_records.saturating_sub(r.dropped_events),
            r.overhead_ns,
        );
        processes
            .get_or_create(&StateLabels {
                program: p.program.clone(),
                state: r.state.name().to_string(),
            })
            .inc();
    }
    for (program, v) in busy {
        if !v.is_empty() {
            gpu_busy
                .get_or_create(&ProgramLabels {
                    program: program.to_string(),
                })
                .set(v.iter().sum::<f64>() / v.len() as f64);
        }
    }
    for (program, f) in &s.forgotten {
        for (kind, a) in &f.kinds {
            add_kind(program, kind, a.count, a.total_ns, a.bytes);
        }
        add_latency(program, &f.latency);
        let pl = add_program(program, f.dropped_events, f.lost_records, f.overhead_ns);
        add_sat(&forgotten.get_or_create(&pl), f.processes);
    }
    render_jobs(&mut reg, s);
    skipped.set(s.segments_skipped as i64);
    for (what, n) in &s.reader_dropped {
        add_sat(
            &reader_dropped.get_or_create(&WhatLabels { what: what.clone() }),
            *n,
        );
    }
    info.get_or_create(&VersionLabels {
        version: env!("CARGO_PKG_VERSION").to_string(),
    })
    .set(1);

    let mut out = String::new();
    encode(&mut out, &reg)?;
    Ok(out)
}

/// The `syncspy_job_*` series of the live processes that are ranks of a job.
fn render_jobs(reg: &mut Registry, s: &Snapshot) {
    let stall = Family::<RankLabels, FloatCounter>::default();
    let behind = Family::<RankLabels, FloatCounter>::default();
    let collective = Family::<RankLabels, FloatCounter>::default();
    let collective_wait = Family::<RankLabels, FloatCounter>::default();
    let ranks = Family::<JobLabels, Gauge>::default();
    let straggler = Family::<JobLabels, Gauge>::default();
    let excess = Family::<JobLabels, Gauge<f64, AtomicU64>>::default();
    reg.register_with_unit(
        "job_rank_stall",
        "Time the host of a rank of a distributed job waited in CUDA calls (live processes; \
         the rank's process on this node)",
        Unit::Seconds,
        stall.clone(),
    );
    reg.register_with_unit(
        "job_rank_gpu_idle_behind_stalls",
        "GPU idle time of a rank blamed on its own host stalls: its GPU sat still while its \
         host waited (present when the rank's GPU is measured)",
        Unit::Seconds,
        behind.clone(),
    );
    reg.register_with_unit(
        "job_rank_collective",
        "Time a rank's GPU spent in collective-communication (NCCL) calls, waiting for the \
         other ranks included: measured around every call by ABI 1.8 libraries, else the \
         collective kernels of traced time. The rank the others wait for has the smallest \
         rate",
        Unit::Seconds,
        collective.clone(),
    );
    reg.register_with_unit(
        "job_rank_collective_wait",
        "How long a rank waited in collective kernels for the job's slowest rank on this node: \
         its collective time beyond the straggler's share of traced time",
        Unit::Seconds,
        collective_wait.clone(),
    );
    reg.register(
        "job_ranks",
        "Ranks of a job followed by this agent",
        ranks.clone(),
    );
    reg.register(
        "job_straggler_rank",
        "The rank named the straggler among this agent's ranks of a job (the rank the others \
         waited for in collective kernels when those are traced, else the largest score, at \
         least 1.25 times the others' median; absent when none stands out)",
        straggler.clone(),
    );
    reg.register_with_unit(
        "job_straggler_excess",
        "How much longer the straggler's score is than the other ranks' median on this node",
        Unit::Seconds,
        excess.clone(),
    );
    let reports: Vec<_> = s.processes.iter().map(|p| p.report.clone()).collect();
    let mut jobs = syncspy_read::jobs::jobs_of(&reports);
    if jobs.is_empty() {
        return;
    }
    // The jobs with the most stall time keep their id.
    jobs.sort_by_key(|j| (std::cmp::Reverse(j.stall_ns()), j.id().to_string()));
    for (i, j) in jobs.iter().enumerate() {
        let job_id = if i < MAX_JOBS {
            j.id().to_string()
        } else {
            "other".to_string()
        };
        let jl = JobLabels {
            job_id: job_id.clone(),
        };
        ranks.get_or_create(&jl).inc_by(j.ranks().len() as i64);
        if i < MAX_JOBS {
            if let Some(st) = j.straggler() {
                if let Some(r) = st.rank {
                    straggler.get_or_create(&jl).set(i64::from(r));
                }
                excess.get_or_create(&jl).set(st.excess_ns as f64 / 1e9);
            }
        }
        for (k, r) in j.ranks().iter().enumerate() {
            let rank = match r.rank {
                _ if i >= MAX_JOBS || k >= MAX_RANKS => "other".to_string(),
                Some(r) => r.to_string(),
                None => "unknown".to_string(),
            };
            let rl = RankLabels {
                job_id: job_id.clone(),
                rank,
            };
            stall.get_or_create(&rl).inc_by(r.stall_ns as f64 / 1e9);
            if let Some(b) = r.gpu_idle_behind_stalls_ns {
                behind.get_or_create(&rl).inc_by(b as f64 / 1e9);
            }
            if let Some(c) = r.collective_ns {
                collective.get_or_create(&rl).inc_by(c as f64 / 1e9);
            }
            if let Some(w) = r.collective_wait_ns {
                collective_wait.get_or_create(&rl).inc_by(w as f64 / 1e9);
            }
        }
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
    fn live_and_forgotten_processes_add_up_per_program_and_kind() {
        let mut r = ProcessReport {
            pid: 5,
            state: "running".into(),
            dropped_events: 1,
            lost_records: 3,
            overhead_ns: 2_000_000,
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
