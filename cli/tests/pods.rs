//! A node agent that sees jobs whose `/dev/shm` is private to their pod (issue 23,
//! docs/cluster.md "Pods with their own /dev/shm"): the job runs in PID and mount namespaces
//! of its own with a tmpfs of its own on `/dev/shm`, the agent on the host follows another
//! folder, and finds the job's folder through `/proc/<pid>/root`.
//!
//! Needs root (namespaces and a mount): CI runs as root. Elsewhere the test says why it did
//! not run and passes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
use common::{artifact, cudacalls, eventually, metric, metrics, Running, TempDir, SYNCSPY};

const UNSHARE: [&str; 6] = [
    "--pid",
    "--fork",
    "--mount",
    "--propagation",
    "private",
    "--mount-proc",
];

/// Whether this machine can make PID and mount namespaces and mount a tmpfs in one (root,
/// `unshare` present); says why not.
fn namespaces_available() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: making namespaces and mounting a tmpfs needs root (CI runs as root)");
        return false;
    }
    let ok = Command::new("unshare")
        .args(UNSHARE)
        .args(["sh", "-c", "mount -t tmpfs tmpfs /dev/shm"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!(
            "skipped: `unshare --pid --fork --mount --propagation private --mount-proc` with a \
             tmpfs mounted inside does not work here"
        );
    }
    ok
}

/// A folder where the simulated runtime answers to the CUDA sonames, beside the built
/// artifacts: not under `/dev/shm` (where the test folders are), which the pod's tmpfs hides.
/// It also holds `cudacalls` under a name of this test's own (its `program` label), so that
/// jobs in other namespaces on the machine (other tests) do not count here.
struct SimDir(PathBuf);

const PROGRAM: &str = "cudacalls-in-pod";

impl SimDir {
    /// `tag` tells the folders of the tests of this file apart (they run at once).
    fn new(tag: &str) -> SimDir {
        let lib = artifact("libsimcudart.so");
        let dir = lib
            .parent()
            .unwrap()
            .join(format!("pods-test-sim-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["libcudart.so.13", "libcuda.so.1", "libcupti.so.13"] {
            std::os::unix::fs::symlink(&lib, dir.join(name)).unwrap();
        }
        std::os::unix::fs::symlink(cudacalls(), dir.join(PROGRAM)).unwrap();
        SimDir(dir)
    }
}

impl Drop for SimDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A job in a "pod": PID and mount namespaces of its own, a private tmpfs on `/dev/shm`
/// (its segment folder, the default), the library preloaded on the simulated runtime. The
/// shell that mounts the tmpfs `exec`s the job, which is pid 1 of its namespace.
fn pod_job(sim: &Path, args: &[&str]) -> Running {
    pod_job_with(
        sim,
        r#"mount -t tmpfs tmpfs /dev/shm && exec env LD_PRELOAD="$POD_PRELOAD" "$@""#,
        &sim.join(PROGRAM),
        &[],
        args,
    )
}

/// [`pod_job`] with its own shell `script` (which ends by `exec`ing `"$@"`: `program` and
/// `args`) and environment `env`.
fn pod_job_with(
    sim: &Path,
    script: &str,
    program: &Path,
    env: &[(&str, &std::ffi::OsStr)],
    args: &[&str],
) -> Running {
    let mut c = Command::new("unshare");
    c.args(UNSHARE)
        .arg("--kill-child")
        .args(["sh", "-c", script, "pod"])
        .arg(program)
        .args(args)
        .envs(env.iter().copied())
        .env("POD_PRELOAD", artifact("libsyncspy.so"))
        .env("LD_LIBRARY_PATH", sim)
        .env_remove("LD_PRELOAD")
        .env_remove("SYNCSPY_DIR")
        .env("SIMCUDA_TIME_SCALE", "1")
        .env("SYNCSPY_GPU_IDLE", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Running(c.spawn().unwrap())
}

/// The agent, on the host, following `dir`; returns it and its address.
fn agent(d: &TempDir, dir: &Path) -> (Running, String) {
    let mut agent = Running(
        Command::new(SYNCSPY)
            .args([
                "agent",
                "--listen",
                "127.0.0.1:0",
                "--interval-ms",
                "200",
                "--retain-secs",
                "0",
                "--token-file",
            ])
            .arg(d.path().join("agent.token"))
            .env("SYNCSPY_DIR", dir)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(agent.0.stderr.take().unwrap()).lines();
    let addr = eventually("the agent's address", || {
        let l = lines.next()?.ok()?;
        eprintln!("agent: {l}");
        let rest = l.split("serving http://").nth(1)?;
        Some(rest.split('/').next()?.to_string())
    });
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            eprintln!("agent: {l}");
        }
    });
    (agent, addr)
}

/// The pid here of the only child of `pid` (the job that `unshare --fork` started).
fn child_of(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()?
        .split_ascii_whitespace()
        .next()?
        .parse()
        .ok()
}

#[test]
fn an_agent_on_the_host_follows_a_job_whose_dev_shm_is_private_to_its_pod() {
    if !namespaces_available() {
        return;
    }
    let d = TempDir::new("pods-private-shm");
    let sim = SimDir::new("follow");
    let host_dir = d.path().join("host-shm");
    std::fs::create_dir(&host_dir).unwrap();
    let (_agent, addr) = agent(&d, &host_dir);

    let mut job = pod_job(
        &sim.0,
        &["--iters", "100000", "busy=s1:500", "sync=s1", "sleep=2000"],
    );
    let host_pid = eventually("the job's pid on the host", || child_of(job.0.id()));
    let events = format!(r#"syncspy_stall_events_total{{program="{PROGRAM}",kind="stream_sync"}}"#);
    let events = events.as_str();
    let running = format!(r#"syncspy_processes{{program="{PROGRAM}",state="running"}}"#);
    // Counted while it runs: found by the discovery pass (every few seconds), then followed.
    let m = eventually("the pod's job in the agent's metrics", || {
        let m = metrics(&addr);
        (metric(&m, events) > Some(0)).then_some(m)
    });
    assert_eq!(metric(&m, &running), Some(1), "{m}");
    let info =
        format!(r#"syncspy_process_info{{program="{PROGRAM}",pid="1",host_pid="{host_pid}","#);
    assert!(m.lines().any(|l| l.starts_with(&info)), "no {info} in\n{m}");
    // Still counting.
    let first = metric(&m, events).unwrap();
    eventually("more stalls counted", || {
        (metric(&metrics(&addr), events) > Some(first)).then_some(())
    });
    // Read-only: the pod's folder holds the job's segment and nothing the agent wrote (no
    // lease, no registration), and the agent's own folder nothing of the job's.
    let pod_shm = PathBuf::from(format!("/proc/{host_pid}/root/dev/shm"));
    let names: Vec<String> = std::fs::read_dir(&pod_shm)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(
        syncspy_abi::parse_segment_name(&names[0]).is_some(),
        "{names:?}"
    );
    let host_names: Vec<String> = std::fs::read_dir(&host_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with(".syncspy-reader-"))
        .collect();
    assert!(host_names.is_empty(), "{host_names:?}");

    // The pod ends (its namespace killed with it): the process is forgotten like any other
    // (retain 0), its counts kept.
    job.0.kill().unwrap();
    job.0.wait().unwrap();
    let forgotten = format!(r#"syncspy_forgotten_processes_total{{program="{PROGRAM}"}}"#);
    let m = eventually("the pod's process forgotten", || {
        let m = metrics(&addr);
        (metric(&m, &forgotten) == Some(1)).then_some(m)
    });
    assert!(metric(&m, events) > Some(first), "{m}");
    assert_eq!(metric(&m, &running).unwrap_or(0), 0, "{m}");
}

/// `/api/v1/snapshot` of the agent at `addr`, with the token the agent wrote in `d`.
fn snapshot(addr: &str, d: &TempDir) -> serde_json::Value {
    let token = syncspy_read::snapshot::read_token(&d.path().join("agent.token")).unwrap();
    common::snapshot(addr, &token)
}

/// A folder beside the built artifacts (not under `/dev/shm`, which the pod's tmpfs hides),
/// removed on drop.
struct BesideArtifacts(PathBuf);

impl BesideArtifacts {
    fn new(tag: &str) -> BesideArtifacts {
        let dir = artifact("libsimcudart.so")
            .parent()
            .unwrap()
            .join(format!("pods-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        BesideArtifacts(dir)
    }
}

impl Drop for BesideArtifacts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn an_agent_names_the_functions_of_a_program_that_only_the_pods_file_system_holds() {
    if !namespaces_available() {
        return;
    }
    // The program's own name (its `program` label), apart from the other tests' pods.
    const ONLY_IN_POD: &str = "cudacalls-pod-only";
    let d = TempDir::new("pods-symbols");
    let sim = SimDir::new("symbols");
    // The pod has the program at `<bin>/cudacalls-pod-only`, on a tmpfs of its own; the node
    // has another file at that path (an ELF of another build id), as it would have another
    // build of a library, or none.
    let bin = BesideArtifacts::new("bin");
    let in_pod = bin.0.join(ONLY_IN_POD);
    std::fs::copy("/bin/sh", &in_pod).unwrap();
    let host_dir = d.path().join("host-shm");
    std::fs::create_dir(&host_dir).unwrap();
    let (_agent, addr) = agent(&d, &host_dir);

    let script = r#"mount -t tmpfs tmpfs /dev/shm && mount -t tmpfs tmpfs "$POD_BIN" && cp "$POD_PROGRAM" "$1" && exec env LD_PRELOAD="$POD_PRELOAD" "$@""#;
    let cudacalls = cudacalls();
    let _job = pod_job_with(
        &sim.0,
        script,
        &in_pod,
        &[
            ("POD_BIN", bin.0.as_os_str()),
            ("POD_PROGRAM", std::ffi::OsStr::new(&cudacalls)),
        ],
        &["--iters", "100000", "busy=s1:500", "sync=s1", "sleep=2000"],
    );
    let frames = |s: &serde_json::Value| -> Option<Vec<String>> {
        let p = s["processes"]
            .as_array()?
            .iter()
            .find(|p| p["program"] == ONLY_IN_POD)?;
        let frames: Vec<String> = p["sites"]
            .as_array()?
            .iter()
            .flat_map(|s| s["frames"].as_array().cloned().unwrap_or_default())
            .filter_map(|f| f.as_str().map(str::to_string))
            .collect();
        // Its frames in the program, once symbolized.
        frames
            .iter()
            .any(|f| f.contains(ONLY_IN_POD))
            .then_some(frames)
    };
    let (frames, snap) = eventually("the pod's job's call sites in the snapshot", || {
        let s = snapshot(&addr, &d);
        frames(&s).map(|f| (f, s))
    });
    // Named from the program in the pod's root (its ELF symbols), not `cudacalls-pod-only+0x...`
    // as the node's file at that path would leave them (another build id).
    assert!(
        frames.iter().any(|f| f.contains("cudacalls::run_op")),
        "{frames:#?}\n{:#}",
        snap["warnings"]
    );
    assert!(
        !frames
            .iter()
            .any(|f| f.starts_with(&format!("{ONLY_IN_POD}+0x"))),
        "{frames:#?}"
    );
    // The node's file at that path is left as it was.
    assert!(std::fs::read(&in_pod).unwrap().starts_with(b"\x7fELF"));
    assert_ne!(
        std::fs::read(&in_pod).unwrap(),
        std::fs::read(&cudacalls).unwrap()
    );
}
