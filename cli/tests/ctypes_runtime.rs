//! A Python program that loads the CUDA runtime itself with ctypes (as NVIDIA's cuda-python
//! bindings do) and calls `cudaMemcpy` and `cudaStreamSynchronize` through the handle: the
//! report names the runtime functions it called, at its lines, with exact counts, whether or
//! not driver functions are wrapped (`SYNCSPY_DRIVER`). Before the library's `dlsym` handed
//! out its runtime hooks, these calls were seen only as the driver calls the runtime makes
//! (`cuMemcpyDtoH`, `cuStreamSynchronize`). Needs `python3` on PATH. The loading is the
//! program's own (ctypes' dlopen and dlsym, what is tested), not this test's: no libloading.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;

mod common;
use common::{run_sim_env, TempDir};

const SCRIPT: &str = "\
import ctypes
rt = ctypes.CDLL('libcudart.so.13')
p = ctypes.c_void_p()
n = 1 << 20
assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)) == 0
buf = ctypes.create_string_buffer(n)
for _ in range(3):
    assert rt.cudaMemcpy(buf, p, ctypes.c_size_t(n), 2) == 0
for _ in range(2):
    assert rt.cudaStreamSynchronize(None) == 0
";

#[test]
fn runtime_calls_through_ctypes_are_reported_under_the_runtime_names() {
    let d = TempDir::new("ctypes-rt");
    let script = d.file("rt.py", SCRIPT);
    let script = script.to_str().unwrap();
    for driver in ["1", "0"] {
        let report = d.path().join(format!("r{driver}.json"));
        let o = run_sim_env(
            &d,
            &["--report", report.to_str().unwrap()],
            &["python3", script],
            &[("SYNCSPY_DRIVER", driver)],
        );
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{stderr}");
        let r: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        let sites = r["processes"][0]["sites"].as_array().unwrap();
        let got: Vec<(String, String, u64, String)> = sites
            .iter()
            .map(|s| {
                (
                    s["kind"].as_str().unwrap().to_string(),
                    s["api"].as_str().unwrap().to_string(),
                    s["count"].as_u64().unwrap(),
                    s["location"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        let want = |kind: &str, api: &str, count: u64, line: u32| {
            (
                kind.to_string(),
                api.to_string(),
                count,
                format!("{script}:{line} in <module>"),
            )
        };
        assert_eq!(
            got,
            vec![
                want("memcpy_sync", "cudaMemcpy", 3, 8),
                want("stream_sync", "cudaStreamSynchronize", 2, 10),
            ],
            "SYNCSPY_DRIVER={driver}: {stderr}"
        );
    }
}
