//! CUDA graphs and CUPTI: an attach traces the GPU of a job that launches CUDA graphs as it
//! does any other's. A JAX job (XLA replays its steps as graphs) once died inside CUPTI
//! after attaches, and for a day the library held CUPTI back in any process that launched a
//! graph; the crashes came from a second copy of the library that attach had loaded beside
//! one preloaded under another name (docs/gpu-validation.md, `attach_renamed.rs`). Runs on
//! the simulated driver (a graph launch there runs nothing). Needs `python3` on PATH.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;

mod common;
use common::TempDir;

/// A dormant job that makes a CUDA call every 5 ms (a stream synchronize, after a graph
/// launch when its argument is `graphs`) until `stop` exists.
const SCRIPT: &str = concat!(
    common::sim_preamble!(),
    "\
import os, sys
cu.cuGraphLaunch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
graphs, pid_file, stop = sys.argv[1] == 'graphs', sys.argv[2], sys.argv[3]
open(pid_file + '.tmp', 'w').write(str(os.getpid()))
os.rename(pid_file + '.tmp', pid_file)
end = time.time() + 30
while not os.path.exists(stop) and time.time() < end:
    if graphs:
        assert cu.cuGraphLaunch(None, s) == 0
    assert cu.cuStreamSynchronize(s) == 0
    time.sleep(0.005)
"
);

/// The GPU part of the report of a 2 s attach (GPU tracing on) to the job, run with or
/// without graph launches.
fn gpu_after_attach(graphs: bool) -> Value {
    let d = TempDir::new(if graphs { "gpu-graphs" } else { "gpu-nographs" });
    let script = d.file("job.py", SCRIPT);
    let job = common::dormant_script(&d, &script, &[if graphs { "graphs" } else { "plain" }], &[]);
    let report = d.path().join("r.json");
    let args = ["--duration", "2", "--gpu-idle", "on"];
    let r = common::attach_report(&d, &job.pid, &args, &report);
    job.finish();
    r["processes"][0]["gpu"].clone()
}

#[test]
fn an_attach_traces_the_gpu_of_a_process_that_launches_graphs() {
    for graphs in [false, true] {
        let gpu = gpu_after_attach(graphs);
        assert_eq!(
            gpu["state"], "paused",
            "graphs {graphs}: traced until the detach ({gpu})"
        );
        assert!(
            gpu["traced_ns"].as_u64().unwrap_or(0) > 0,
            "graphs {graphs}: the attach traced the GPU ({gpu})"
        );
    }
}
