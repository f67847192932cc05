//! `POST /api/v1/gpu-trace?pid=N&seconds=S`: a followed process's GPU activity traced for a
//! while, whatever its `SYNCSPY_GPU_IDLE` mode, through the control part of its segment.

use syncspy_read::monotonic_ns;
use syncspy_read::snapshot::Snapshot;

/// Longest GPU tracing request `POST /api/v1/gpu-trace` takes, in seconds.
const MAX_TRACE_SECS: u64 = 300;

/// `POST /api/v1/gpu-trace?pid=N&seconds=S`: asks the library of followed process `pid` to
/// trace GPU activity for the next `S` seconds (default 10, at most `MAX_TRACE_SECS`),
/// whatever its `SYNCSPY_GPU_IDLE` mode. Returns the status and a one-line answer.
pub fn gpu_trace(snapshot: &Snapshot, query: &str) -> (u16, String) {
    let mut pid = None;
    let mut secs = Some(10u64);
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        match kv.split_once('=') {
            Some(("pid", v)) => pid = v.parse::<u32>().ok(),
            Some(("seconds", v)) => secs = v.parse().ok(),
            _ => return (400, format!("unknown parameter {kv:?}: pid=N&seconds=S\n")),
        }
    }
    let Some(pid) = pid else {
        return (
            400,
            "pid=N is required (a process the agent follows)\n".into(),
        );
    };
    let Some(secs) = secs.filter(|s| (1..=MAX_TRACE_SECS).contains(s)) else {
        return (400, format!("seconds must be 1 to {MAX_TRACE_SECS}\n"));
    };
    let Some(p) = snapshot
        .processes
        .iter()
        // The pid on this node first: processes of other PID namespaces (pods) share small
        // pids (1, often).
        .filter(|p| p.report.state.is_running())
        .find(|p| p.report.host_pid == Some(pid))
        .or_else(|| {
            snapshot
                .processes
                .iter()
                .filter(|p| p.report.state.is_running())
                .find(|p| p.report.pid == pid && p.report.host_pid.is_none())
        })
    else {
        return (
            404,
            format!("process {pid} is not a running process this agent follows\n"),
        );
    };
    let r = match syncspy_abi::SegmentReader::open(std::path::Path::new(&p.report.segment)) {
        Ok(r) => r,
        Err(e) => {
            return (
                410,
                format!("process {pid}: its segment cannot be opened: {e}\n"),
            )
        }
    };
    let until = monotonic_ns().saturating_add(secs * 1_000_000_000);
    match r.request_gpu_trace(until) {
        Ok(_) => (
            200,
            format!(
                "process {pid}: GPU activity traced for the next {secs} s (its tracing was {})\n",
                r.gpu_status().map(|g| g.state_name()).unwrap_or("unknown")
            ),
        ),
        Err(syncspy_abi::control::RequestError::TooOld) => (
            409,
            format!(
                "process {pid}: its syncspy library is older than ABI 1.4 and takes no tracing \
                 requests (restart it with this version's libsyncspy.so)\n"
            ),
        ),
        Err(syncspy_abi::control::RequestError::Replaced) => {
            (410, format!("process {pid}: its segment is gone\n"))
        }
        Err(syncspy_abi::control::RequestError::Io(e)) => (
            500,
            format!("process {pid}: cannot write the request into its segment: {e}\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use syncspy_abi::{SegmentParams, SegmentWriter};
    use syncspy_read::report::ProcessReport;
    use syncspy_read::snapshot::SnapshotProcess;
    use syncspy_test_support::TempDir;

    #[test]
    fn a_tracing_request_reaches_the_followed_process_and_bad_ones_are_refused() {
        let dir = TempDir::new("gpu-trace");
        let mut p = SegmentParams::new(std::process::id(), 1);
        p.ring_capacity = 16;
        let w = SegmentWriter::create(dir.path(), &p).unwrap();
        let snap = Snapshot {
            processes: vec![SnapshotProcess {
                program: "train.py".into(),
                report: ProcessReport {
                    pid: 4242,
                    state: "running".into(),
                    segment: w.path().to_string_lossy().into_owned(),
                    ..ProcessReport::default()
                },
                latency: BTreeMap::new(),
            }],
            ..Snapshot::default()
        };
        let before = monotonic_ns();
        let (status, body) = gpu_trace(&snap, "pid=4242&seconds=30");
        assert_eq!(status, 200, "{body}");
        let until = w
            .control()
            .trace_until_ns
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(until >= before + 30_000_000_000, "{until} {before}");
        assert!(until <= monotonic_ns() + 30_000_000_000);
        // The default is 10 s, which does not lower a later request.
        assert_eq!(gpu_trace(&snap, "pid=4242").0, 200);
        assert_eq!(
            w.control()
                .trace_until_ns
                .load(std::sync::atomic::Ordering::Relaxed),
            until
        );
        for (query, status) in [
            ("", 400),
            ("pid=x", 400),
            ("pid=4242&seconds=0", 400),
            ("pid=4242&seconds=301", 400),
            ("pid=4242&colour=red", 400),
            ("pid=7", 404),
        ] {
            let (got, body) = gpu_trace(&snap, query);
            assert_eq!(got, status, "{query}: {body}");
            assert!(body.ends_with('\n') && body.len() > 10, "{body:?}");
        }
        // A process of another PID namespace (pid 1 in its pod) is named by its pid here.
        let mut pod = snap.processes[0].clone();
        pod.report.pid = 1;
        pod.report.host_pid = Some(4243);
        let snap2 = Snapshot {
            processes: vec![pod],
            ..Snapshot::default()
        };
        assert_eq!(gpu_trace(&snap2, "pid=4243").0, 200);
        assert_eq!(gpu_trace(&snap2, "pid=1").0, 404);
        // Gone: the file removed.
        std::fs::remove_file(w.path()).unwrap();
        assert_eq!(gpu_trace(&snap, "pid=4242").0, 410);
    }
}
