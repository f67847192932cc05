//! `scn-ddp-straggler` on the simulator, without syncspy: the launcher starts one process per
//! rank with torchrun's environment, the ranks meet through the simulated NCCL, and every
//! rank's own account shows the straggler: the other ranks' GPUs spend the late rank's host
//! work inside the all-reduce (CUDA events around it), the late rank hardly any time. The
//! account matches the manifest's per-rank counts, and nothing is left in the temp folder.

mod common;

use std::process::Command;

use common::*;
use serde_json::Value;
use syncspy_scenarios::manifest::{truth_args, Kind, Manifest};

fn launcher(lib: &TempDir, tmp: &TempDir, args: &[&str]) -> std::process::Output {
    Command::new(artifact("scn-ddp-straggler"))
        .args(args)
        .env("LD_LIBRARY_PATH", lib.path())
        .env("TMPDIR", tmp.path())
        .env_remove("SIMNCCL_DIR")
        .output()
        .expect("start the launcher")
}

fn truths(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn four_ranks_one_late_the_others_wait_for_it_in_the_all_reduce() {
    let lib = with_sim_runtime("ddp");
    let tmp = TempDir::new("ddp-tmp");
    let out = launcher(&lib, &tmp, &["--ranks", "4", "--late", "2", "--steps", "5"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let truths = truths(&out);
    let ranks: Vec<u64> = truths.iter().map(|t| t["rank"].as_u64().unwrap()).collect();
    assert_eq!(
        ranks,
        [0, 1, 2, 3],
        "one truth line per rank, in rank order: {stderr}"
    );
    let ms = |t: &Value| t["gpu_ms"]["allreduce"].as_f64().unwrap();
    let late = &truths[2];
    for t in &truths {
        let r = t["rank"].as_u64().unwrap();
        assert_eq!(t["ok"], true, "rank {r}: {t}");
        assert_eq!(t["scenario"], "ddp-straggler");
        assert_eq!(t["args"]["is_late"], r == 2);
        let syncs = t["kinds"]["stream_sync"]["count"].as_u64();
        assert_eq!(syncs, Some(if r == 2 { 10 } else { 5 }), "rank {r}");
        // The watchdog saw every all-reduce's event complete.
        assert_eq!(t["polls"]["cudaEventQuery"]["spins"], 5, "rank {r}");
        if r != 2 {
            // 5 steps of 15 ms of the late rank's host work, spent in the all-reduce.
            assert!(
                ms(t) > ms(late) && ms(t) > 0.5 * 5.0 * 15.0,
                "rank {r}: {:.1} ms in all-reduces, the late rank {:.1} ms",
                ms(t),
                ms(late)
            );
            assert_eq!(t["sites"], serde_json::json!({}));
        }
    }
    let site = late["sites"]["late_sync"].as_str().unwrap();
    assert!(site.starts_with("scn_ddp_straggler.rs:"), "{site}");

    // The program did what the manifest says, rank by rank.
    let m = Manifest::bundled();
    let job = m
        .jobs
        .iter()
        .find(|j| j.scenario == "ddp-straggler")
        .unwrap();
    for t in &truths {
        let args = truth_args(t);
        for k in Kind::STALLS.map(Kind::name) {
            let expected = job.counts.get(k).map_or(Ok(0), |c| c.eval(&args));
            assert_eq!(
                expected,
                Ok(t["kinds"][k]["count"].as_u64().unwrap()),
                "rank {}: {k}",
                t["rank"]
            );
        }
        assert_eq!(job.ranks.eval(&args), Ok(4));
        assert_eq!(job.straggler.as_ref().unwrap().rank.eval(&args), Ok(2));
    }
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left in the temp folder: {left:?}");
}

#[test]
fn a_failing_rank_fails_the_launcher_and_bad_arguments_are_refused() {
    let lib = with_sim_runtime("ddp-fail");
    let tmp = TempDir::new("ddp-fail-tmp");
    // No device: every rank fails at its first call.
    let out = Command::new(artifact("scn-ddp-straggler"))
        .args(["--ranks", "2", "--steps", "1"])
        .env("LD_LIBRARY_PATH", lib.path())
        .env("TMPDIR", tmp.path())
        .env("SIMCUDA_DEVICES", "0")
        .env_remove("SIMNCCL_DIR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("failed: rank 0"), "{stderr}");
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);

    let out = launcher(&lib, &tmp, &["--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("usage: scn-ddp-straggler"));
    for bad in [&["--late", "4"][..], &["--ranks", "0"], &["--iters", "3"]] {
        let out = launcher(&lib, &tmp, bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
    // The rank program alone says how to start it.
    let out = Command::new(artifact("scn-ddp-straggler-cuda"))
        .env("LD_LIBRARY_PATH", lib.path())
        .env_remove("RANK")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the launcher"));
}
