//! The node agent, `syncspy agent`: a headless daemon that follows every instrumented process
//! on the host (every segment in `SYNCSPY_DIR`, whatever its session), and serves Prometheus
//! metrics at `/metrics` and a JSON snapshot at `/api/v1/snapshot`.
//!
//! Its face is small: the `syncspy` CLI fills an [`AgentOptions`] from its arguments and calls
//! [`serve`], which returns when SIGINT or SIGTERM stops the agent ([`ServeError`] when it
//! cannot start); [`HELP`] and [`DEFAULT_LISTEN`] are for the command's help and defaults;
//! [`metrics::render`] is the metrics text of a snapshot. The snapshot's model is the reader's
//! ([`syncspy_read::snapshot`]), which `syncspy-top --agent` reads; this crate depends on the
//! reader and the ABI only, never on the CLI or the monitor.
//!
//! Inside: the collector (`collector.rs`, with the pods' folders in `pods.rs`) scans and drains
//! the segments every `interval` and keeps a snapshot; the HTTP side (`http.rs`, the token in
//! `token.rs`, `POST /api/v1/gpu-trace` in `gpu_trace.rs`) answers requests from the latest
//! snapshot, so a scrape never waits for a scan; `serve.rs` starts both and stops them.
//!
//! The agent reads its folder through one reader session (`syncspy_read::session`): it
//! registers as a reader of the whole folder and takes a lease on every segment it follows
//! (`syncspy_abi::lifecycle`), so that `syncspy run` hands its ended segments over
//! instead of removing them before the agent has read them; it watches the folder with
//! inotify, so a new segment is opened at once, not at the next interval.
//!
//! Ended processes stay in the snapshot for `retain` (and while the `syncspy run` of their
//! session still runs, so that the run hands them over), then are forgotten: their totals move
//! into per-program counters (so Prometheus counters never go down), the lease is given up,
//! and the segment file is removed unless another reader still wants it (a lease of its own,
//! or the live `syncspy run` of its session, which then removes it itself). A segment whose
//! file was removed under it is forgotten as soon as it is drained, so its memory is freed.
//! Every `HOUSEKEEPING_EVERY` (or every step, when steps are further apart) the agent also
//! reclaims what nobody reads (`syncspy_abi::lifecycle::reclaim`: ended processes' segments
//! after their linger, and the folder's size cap), and surveys the folder's readers (the live
//! `syncspy run`s) then and whenever a reader's file appears: with the folder's scan, which
//! opens only what inotify names between listings, a step's cost does not grow with the files
//! that sit in the folder unchanged (another user's, say, which a root agent leaves alone).
//!
//! Segment folders private to a pod or container (their own `/dev/shm`) are found through
//! `/proc` (`pods.rs`) and followed each with a reader session of its own, read-only: the
//! agent writes no registration or lease there and reclaims nothing there (the pod's own
//! library does). What a lease would say (that the agent reads a segment) lives only in the
//! agent's memory: the segments it follows, kept mapped until forgotten like the others.
//! A `syncspy run` in such a pod does not know of the agent and removes its segments at its
//! end; the agent then drains what it has mapped and forgets them. Their call sites are
//! symbolized with the modules inside the pod's root (`syncspy_read::symbolize::ModuleRoot`),
//! through a process of the pod's mount namespace (the writer, or one the discovery pass
//! found), not at the same paths on the node.

mod collector;
mod gpu_trace;
mod http;
mod labels;
pub mod metrics;
mod pods;
mod serve;
mod token;

pub use serve::{serve, AgentOptions, ServeError};

/// `syncspy agent --help`, after the options: what it follows, every metric it serves, the
/// token, the exit status.
pub const HELP: &str = "\
Follows every segment in SYNCSPY_DIR (default /dev/shm), of any session; run it as the user
that runs the CUDA jobs (segments are mode 0600), or as root. It also follows, read-only, the
segment folders of processes in other mount namespaces (containers, pods with their own
/dev/shm), found every 3 s through /proc/<pid>/root: that needs the host's PID namespace
(Kubernetes hostPID) and CAP_SYS_PTRACE (docs/cluster.md); at most 256 such folders.
Per folder it follows at most 256 segments per user (owner of the file) and 2048 in all, and
spends at most 256 MiB per user and 1 GiB in all on their histograms (estimated); the rest is
skipped and counted (SYNCSPY_READER_SEGMENTS_PER_USER, SYNCSPY_READER_SEGMENTS,
SYNCSPY_READER_MB_PER_USER, SYNCSPY_READER_MB change the caps).

Metrics (labels: program, at most 50 for root's and the agent's user, 8 for each other user,
then \"other\" or \"other-uid<N>\"; kind; state):
  syncspy_stall_events_total, syncspy_stall_seconds_total, syncspy_stall_bytes_total
    (host stalls: every kind but the GPU's idle gaps)
  syncspy_stall_duration_seconds (histogram of single stalls, half-decade buckets from
    10 us to 10 s)
  syncspy_gpu_idle_seconds_total, syncspy_gpu_idle_gaps_total,
  syncspy_gpu_idle_gap_duration_seconds (histogram), syncspy_gpu_busy_ratio (where the GPU
    is traced)
  syncspy_gpu_idle_after_syncs_seconds_total, syncspy_gpu_idle_measured_syncs_total (the GPU
    idle behind each sync and blocking copy, measured at every one)
  syncspy_processes, syncspy_dropped_events_total, syncspy_lost_records_total,
  syncspy_overhead_seconds_total, syncspy_host_wait_overhead_seconds_total (its part that was
    the host-wait machinery, outside the budget), syncspy_forgotten_processes_total,
  syncspy_shed_total (label what: stacks, gap_records, records, looks: detail a library shed
    to keep within its budget, SYNCSPY_BUDGET; totals stay exact), syncspy_shedding_processes,
  syncspy_segments_skipped, syncspy_agent_info
  syncspy_reader_dropped_total (label what: segment, histogram, module, deferred_poll,
    deferred_stack, compacted; what the reader budgets left out, docs/contracts.md)
  syncspy_process_info (labels pid, host_pid, container, pod_uid: at most 256 live
    processes)
Distributed jobs (labels: job_id, at most 8 then \"other\"; rank, at most 64 per job):
  syncspy_job_rank_stall_seconds_total, syncspy_job_rank_gpu_idle_behind_stalls_seconds_total,
  syncspy_job_rank_collective_seconds_total, syncspy_job_rank_collective_wait_seconds_total,
  syncspy_job_ranks, syncspy_job_straggler_rank, syncspy_job_straggler_excess_seconds

/metrics is for anyone who can connect (loopback by default). /api/v1/snapshot (command lines,
call stacks) needs `Authorization: Bearer TOKEN`, with the random token the agent writes at
start to --token-file (mode 0600: the agent's user and root); `syncspy-top --agent` reads it.

Exit status: 2 when the address cannot be bound, the token file cannot be written or
SYNCSPY_DIR is unusable.";

/// The default address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9599";
