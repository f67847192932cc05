//! Distributed jobs (issue 18): four `cudacalls` processes started as torchrun starts its
//! ranks (the launcher's environment set), one of them stalling ten times longer, under
//! `syncspy run --sim`, and a process outside the job: the report groups the four into one
//! job, names the slow rank the straggler with its call site, and the summary says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;

mod common;
use common::{cudacalls, run_sim, TempDir};

/// A shell command that starts rank `rank` of 4 of torchrun run `run`, waiting `us` µs of GPU
/// work per step, 5 steps.
fn rank(run: &str, rank: u32, us: u32, c: &str) -> String {
    format!(
        "TORCHELASTIC_RUN_ID={run} RANK={rank} LOCAL_RANK={rank} WORLD_SIZE=4 GROUP_RANK=0 \
         {c} --iters 5 busy=s1:{us} sync=s1 >/dev/null &"
    )
}

#[test]
fn ranks_of_one_job_are_grouped_and_the_straggler_named() {
    let d = TempDir::new("jobs");
    let c = cudacalls();
    let report = d.path().join("r.json").to_string_lossy().into_owned();
    let script = format!(
        "{} {} {} {} {c} --iters 2 busy=s1:1000 sync=s1 >/dev/null & wait",
        rank("exp-7", 0, 2000, &c),
        rank("exp-7", 1, 2000, &c),
        rank("exp-7", 2, 2000, &c),
        rank("exp-7", 3, 20000, &c),
    );
    let o = run_sim(&d, &["--report", &report], &["sh", "-c", &script]);
    // The summary goes to stderr, next to the program's own output.
    let summary = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{summary}");
    let r: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();

    // Every process of the job says which rank it is; the one outside says nothing.
    let procs = r["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 5, "{summary}");
    let in_job: Vec<&Value> = procs.iter().filter(|p| p.get("job").is_some()).collect();
    assert_eq!(in_job.len(), 4);
    let mut ranks: Vec<u64> = in_job
        .iter()
        .map(|p| {
            let j = &p["job"];
            assert_eq!(j["id"], "exp-7");
            assert_eq!(j["launcher"], "torchelastic");
            assert_eq!(j["world_size"], 4);
            assert_eq!(j["rank"], j["local_rank"]);
            j["rank"].as_u64().unwrap()
        })
        .collect();
    ranks.sort();
    assert_eq!(ranks, [0, 1, 2, 3]);

    // One job, its ranks in order, the slow one named with the call site it waited at.
    let jobs = r["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{}", r["jobs"]);
    let j = &jobs[0];
    assert_eq!(j["id"], "exp-7");
    let order: Vec<u64> = j["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(order, [0, 1, 2, 3]);
    let s = &j["straggler"];
    assert_eq!(s["rank"], 3, "{j}");
    let slow = in_job.iter().find(|p| p["job"]["rank"] == 3).unwrap();
    assert_eq!(s["pid"], slow["pid"]);
    // 5 waits of 20 ms against 5 of 2 ms: about 100 ms against 10 ms.
    let score = s["score_ns"].as_u64().unwrap();
    let median = s["others_median_ns"].as_u64().unwrap();
    assert!(score >= 90_000_000 && median < 40_000_000, "{s}");
    assert_eq!(s["excess_ns"].as_u64().unwrap(), score - median);
    assert_eq!(s["top_site"]["kind"], "stream_sync", "{s}");
    assert_eq!(s["top_site"]["api"], "cudaStreamSynchronize", "{s}");
    // The job's stall time is its ranks', not the outsider's.
    let sum: u64 = in_job.iter().map(|p| p["stall_ns"].as_u64().unwrap()).sum();
    assert_eq!(j["stall_ns"].as_u64().unwrap(), sum);

    // The summary: the job line and the rank table.
    assert!(
        summary.contains("job exp-7 (torchelastic, 4 of 4 ranks): straggler rank 3 stream_sync"),
        "{summary}"
    );
    assert!(summary.contains("<- straggler"), "{summary}");
    assert!(
        summary.contains("rank 3 of 4 of job exp-7 (torchelastic)"),
        "{summary}"
    );
}

#[test]
fn ranks_that_stall_alike_have_no_straggler_and_slurm_ranks_are_read() {
    let d = TempDir::new("jobs-even");
    let c = cudacalls();
    let report = d.path().join("r.json").to_string_lossy().into_owned();
    let step = |r: u32| {
        format!(
            "SLURM_JOB_ID=77 SLURM_STEP_ID=0 SLURM_PROCID={r} SLURM_NTASKS=2 SLURM_NODEID={r} \
             {c} --iters 5 busy=s1:20000 sync=s1 >/dev/null &"
        )
    };
    let script = format!("{} {} wait", step(0), step(1));
    let o = run_sim(&d, &["--report", &report], &["sh", "-c", &script]);
    // The summary goes to stderr, next to the program's own output.
    let summary = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let jobs = r["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["id"], "77.0");
    assert_eq!(jobs[0]["launcher"], "slurm");
    assert_eq!(jobs[0]["ranks"][1]["group_rank"], 1);
    assert!(jobs[0].get("straggler").is_none(), "{}", jobs[0]);
    assert!(
        summary.contains("job 77.0 (slurm, 2 of 2 ranks): no straggler"),
        "{summary}"
    );
}
