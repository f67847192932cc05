//! A library preloaded under another file name (a package's `syncspy-1.2.so`): `syncspy
//! attach` finds it by what it exports, not by its name, and arms it by the control file; a
//! second copy loaded beside it refuses to arm. Found by name alone, such a copy went unseen,
//! attach loaded a second library beside it, and two recordings and two CUPTI clients in one
//! JAX job crashed it (docs/gpu-validation.md). Runs on the simulated driver; needs `python3`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

mod common;
use common::{artifact, TempDir, SYNCSPY};

/// A job that makes a CUDA call every 5 ms until `stop` exists.
const JOB: &str = concat!(
    common::sim_preamble!(),
    "\
import os, sys
pid_file, stop = sys.argv[1], sys.argv[2]
open(pid_file + '.tmp', 'w').write(str(os.getpid()))
os.rename(pid_file + '.tmp', pid_file)
end = time.time() + 30
while not os.path.exists(stop) and time.time() < end:
    assert cu.cuStreamSynchronize(s) == 0
    time.sleep(0.005)
"
);

/// The library copied under another name into `d`.
fn renamed_copy(d: &TempDir) -> String {
    let lib = d.path().join("syncspy-renamed.so");
    std::fs::copy(artifact("libsyncspy.so"), &lib).unwrap();
    lib.to_str().unwrap().to_string()
}

/// The syncspy libraries `pid` maps, by file name (a loaded copy, or attach's memfd).
fn syncspy_mappings(pid: &str) -> Vec<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut names: Vec<String> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.contains("syncspy") && (p.ends_with(".so") || p.starts_with("/memfd:")))
        .map(|p| p.rsplit('/').next().unwrap().to_string())
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn a_dormant_library_under_another_name_is_armed_by_file_and_not_loaded_twice() {
    let d = TempDir::new("attach-renamed");
    let lib = renamed_copy(&d);
    let script = d.file("job.py", JOB);
    let job = common::dormant_script(&d, &script, &[], &[("SYNCSPY_LIB", &lib)]);
    let report = d.path().join("r.json");
    let o = Command::new(SYNCSPY)
        .args(["attach", &job.pid, "--duration", "1", "--report"])
        .arg(&report)
        .env("SYNCSPY_DIR", d.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("dormant"), "armed by the control file: {err}");
    assert!(!err.contains("through thread"), "no ptrace: {err}");
    let mapped = syncspy_mappings(&job.pid);
    job.finish();
    assert_eq!(mapped, ["syncspy-renamed.so"], "one library in the job");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let syncs = r["processes"][0]["kinds"]["stream_sync"]["count"]
        .as_u64()
        .unwrap_or(0);
    assert!(syncs > 0, "the renamed copy recorded: {r}");
}

#[test]
fn a_second_copy_beside_a_renamed_one_refuses_to_arm() {
    let d = TempDir::new("attach-second-copy");
    let lib = renamed_copy(&d);
    let second = artifact("libsyncspy.so");
    let script = d.file(
        "second.py",
        &format!(
            "import ctypes\n\
             lib = ctypes.CDLL({:?}, mode=ctypes.RTLD_LOCAL)\n\
             lib.syncspy_attach_arm.argtypes = [ctypes.c_char_p]\n\
             print('arm', lib.syncspy_attach_arm(b'/nonexistent/control'))\n",
            second.to_str().unwrap()
        ),
    );
    let o = common::run_sim_env(
        &d,
        &[],
        &["python3", script.to_str().unwrap()],
        &[("SYNCSPY_LIB", &lib), ("SYNCSPY_DORMANT", "1")],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // 5: another copy first in the global scope (2 would be the unreadable control file).
    assert!(out.contains("arm 5"), "{out}");
}
