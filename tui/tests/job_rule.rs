//! Issue 34: one straggler rule under every view. Three ranks of a job whose host stalls are
//! 10, 20 and 24 ms: the report names the 24 ms rank (the others' median is 15 ms, the two
//! middle values averaged, and 24 ms is over 1.25 times it); the monitor used the upper
//! middle value (20 ms) and named nobody.

use syncspy_read::report::jobs::{jobs_of, JobRef};
use syncspy_read::report::{ProcessReport, Site};
use syncspy_tui::app::job_scores;
use syncspy_tui::model::{Proc, RankOf, Scope, State};

fn proc_(pid: u32, rank: u32, stall_ms: u64) -> Proc {
    Proc {
        pid,
        host_pid: None,
        start_ticks: 1,
        command: "python3 train.py".into(),
        state: State::Running,
        events_per_s: None,
        stall_per_s: None,
        gpu_idle_share: None,
        dropped: 0,
        lost: 0,
        shedding: None,
        wall_ns: 1_000_000_000,
        all: Scope {
            stall_ns: stall_ms * 1_000_000,
            ..Scope::new(Vec::new(), Vec::new())
        },
        recent: None,
        job: Some(RankOf::new("exp", Some(rank), None, false, 0)),
        gpu: None,
    }
}

fn report(pid: u32, rank: u32, stall_ms: u64) -> ProcessReport {
    ProcessReport {
        pid,
        state: "running".into(),
        stall_ns: stall_ms * 1_000_000,
        job: Some(JobRef {
            id: "exp".into(),
            launcher: "torchelastic".into(),
            rank: Some(rank),
            world_size: Some(3),
            ..JobRef::default()
        }),
        sites: vec![Site {
            kind: "stream_sync".into(),
            api: "cudaStreamSynchronize".into(),
            total_ns: stall_ms * 1_000_000,
            location: Some("train.py:9".into()),
            ..Site::default()
        }],
        ..ProcessReport::default()
    }
}

#[test]
fn the_report_and_the_monitor_name_the_same_straggler() {
    let stalls = [(1, 0, 10), (2, 1, 20), (3, 2, 24)];
    let reports: Vec<ProcessReport> = stalls.iter().map(|(p, r, s)| report(*p, *r, *s)).collect();
    let job = &jobs_of(&reports)[0];
    let named = job.straggler().and_then(|s| s.rank);
    assert_eq!(named, Some(2), "{}", job.summary());

    let procs: Vec<Proc> = stalls.iter().map(|(p, r, s)| proc_(*p, *r, *s)).collect();
    let refs: Vec<&Proc> = procs.iter().collect();
    let scores = job_scores(&refs);
    let score = &scores["exp"];
    assert!(score.straggler(), "{score:?}");
    assert_eq!(score.others_median_ns, 15_000_000);
    assert_eq!(score.max_ns, 24_000_000);
}

#[test]
fn the_monitor_takes_the_reports_collective_source() {
    // Every rank traced (rank 0 the least in collective kernels); ranks 1 and 2 also measured
    // their NCCL calls (rank 2 the least), rank 0 not: the report compares the traced kernels,
    // and so must the monitor.
    let mut procs = [proc_(1, 0, 10), proc_(2, 1, 10), proc_(3, 2, 10)];
    let traces = [2_000_000u64, 300_000_000, 310_000_000];
    for (p, t) in procs.iter_mut().zip(traces) {
        p.job = Some(RankOf::new("exp", None, Some(t), true, 1_000_000_000));
    }
    for p in &mut procs[1..] {
        let j = p.job.take().unwrap();
        let share = if p.pid == 3 { 1_000_000 } else { 400_000_000 };
        p.job = Some(j.with_nccl(Some((share, 1_000_000_000))));
    }
    let refs: Vec<&Proc> = procs.iter().collect();
    let scores = job_scores(&refs);
    let (key, _, named) = scores["exp"].collective.expect("the collective basis");
    assert!(named);
    assert_eq!(key.pid, 1, "the traced kernels' straggler");
}
