//! Issue 33 on the simulator: `scn-ddp-straggler` (4 ranks, one process each, rank 2 late at
//! its marked line before each all-reduce, a watchdog thread that checks each collective's
//! event every 100 ms) under one `syncspy run --sim`, with the library's default settings.
//! The report's job must name rank 2 at the marked line from the ranks' own NCCL measurements,
//! every time (10 runs in a row), and no rank may have a `poll_wait` (the manifest's `[[job]]`
//! truth, checked by `manifest::check_job`: per-rank counts, the straggler and its site).

mod common;

use common::*;
use syncspy_scenarios::manifest::runner::{job_verdict, Runner};
use syncspy_scenarios::manifest::Manifest;

#[test]
fn the_late_rank_is_named_at_its_line_every_time_with_no_watchdog_poll_wait() {
    let m = Manifest::bundled();
    let job = m
        .jobs
        .iter()
        .find(|j| j.scenario == "ddp-straggler")
        .expect("the manifest's ddp-straggler job");
    let out = TempDir::new("ddp-job");
    let segments = TempDir::new("ddp-job-segments");
    let runner = Runner {
        syncspy: artifact("syncspy"),
        bin_dir: target_dir(),
        sim: true,
        out_dir: out.path().to_path_buf(),
        segment_dir: Some(segments.path().to_path_buf()),
        trace_gpu: false,
    };
    for i in 0..10 {
        let o = runner.run_job(&m, job, &["--steps".to_string(), "8".to_string()]);
        let v = job_verdict(job, &o);
        let why: Vec<String> = v
            .failures()
            .map(|f| format!("{}: expected {}, found {}", f.what, f.expected, f.found))
            .collect();
        assert!(
            v.ok(),
            "run {i}:\n  {}\n  stderr: {}",
            why.join("\n  "),
            o.stderr
        );
        let report = o.report.as_ref().unwrap();
        let j = &report["jobs"][0];
        assert_eq!(j["straggler"]["rank"], 2, "run {i}: {j}");
        assert_eq!(j["collective_source"], "nccl_calls", "run {i}: {j}");
        for p in report["processes"].as_array().unwrap() {
            assert!(p["kinds"].get("poll_wait").is_none(), "run {i}: {p}");
            let c = &p["collectives"];
            assert_eq!(c["calls"], c["measured"], "every all-reduce measured: {c}");
        }
    }
}
