//! Helpers shared by the integration tests that run real programs under `syncspy`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

#[allow(unused_imports)] // each test uses a subset
pub use syncspy_test_support::{Running, TempDir};

pub const SYNCSPY: &str = env!("CARGO_BIN_EXE_syncspy");

pub fn artifact(name: &str) -> PathBuf {
    let p = Path::new(SYNCSPY).parent().unwrap().join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace` first",
        p.display()
    );
    p
}

pub fn cudacalls() -> String {
    artifact("cudacalls").to_string_lossy().into_owned()
}

/// `syncspy run --sim [extra...] -- CMD` with `d` as the segment folder.
pub fn run_sim(d: &TempDir, extra: &[&str], cmd: &[&str]) -> std::process::Output {
    run_sim_env(d, extra, cmd, &[])
}

/// The command `syncspy run --sim [extra...] -- CMD` with `d` as the segment folder and `env`
/// set for syncspy and CMD, not started (`run_sim_env` runs it to the end).
pub fn sim_command(
    d: &TempDir,
    extra: &[&str],
    cmd: &[&str],
    env: &[(&str, &str)],
) -> std::process::Command {
    let mut c = std::process::Command::new(SYNCSPY);
    c.args(["run", "--sim"])
        .args(extra)
        .arg("--")
        .args(cmd)
        .env("SYNCSPY_DIR", d.path())
        .env("SIMCUDA_TIME_SCALE", "1")
        .env_remove("SYNCSPY_LIB")
        .env_remove("SYNCSPY_SIM_LIB")
        .env_remove("SYNCSPY_RING")
        .envs(env.iter().copied());
    c
}

/// A dormant job (`SYNCSPY_DORMANT=1` under `syncspy run --sim`, for `syncspy attach`)
/// running `cmd`, whose stdout is dropped and stderr kept in `err`; it is killed when the
/// `Running` is dropped. Returns it with the pid the job wrote into `pid_file` (by a
/// rename, so that a partial write is never read).
pub fn dormant_job(
    d: &TempDir,
    cmd: &[&str],
    pid_file: &std::path::Path,
    err: &std::path::Path,
) -> (Running, String) {
    dormant_job_env(d, cmd, pid_file, err, &[])
}

/// `dormant_job` with `env` set for syncspy and the job too.
pub fn dormant_job_env(
    d: &TempDir,
    cmd: &[&str],
    pid_file: &std::path::Path,
    err: &std::path::Path,
    env: &[(&str, &str)],
) -> (Running, String) {
    let mut all = vec![("SYNCSPY_DORMANT", "1")];
    all.extend_from_slice(env);
    let job = Running(
        sim_command(d, &[], cmd, &all)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(err).unwrap())
            .spawn()
            .unwrap(),
    );
    let pid = eventually("the job's pid file", || {
        std::fs::read_to_string(pid_file).ok()
    });
    (job, pid.trim().to_string())
}

/// A dormant Python job (`dormant_job_env`) running `python3 script ARGS PID_FILE STOP`: the
/// script writes its pid to `PID_FILE` (by a rename) and ends once `STOP` exists, both in
/// `d`. `finish` ends it and asserts that it exited 0.
pub struct DormantScript {
    job: Running,
    pub pid: String,
    stop: PathBuf,
    err: PathBuf,
}

pub fn dormant_script(
    d: &TempDir,
    script: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> DormantScript {
    let pid_file = d.path().join("pid");
    let stop = d.path().join("stop");
    let err = d.path().join("job.err");
    let mut cmd = vec!["python3", script.to_str().unwrap()];
    cmd.extend_from_slice(args);
    cmd.extend([pid_file.to_str().unwrap(), stop.to_str().unwrap()]);
    let (job, pid) = dormant_job_env(d, &cmd, &pid_file, &err, env);
    DormantScript {
        job,
        pid,
        stop,
        err,
    }
}

impl DormantScript {
    pub fn finish(mut self) {
        std::fs::write(&self.stop, "").unwrap();
        let status = self.job.child().wait().unwrap();
        let err = std::fs::read_to_string(&self.err).unwrap_or_default();
        assert_eq!(status.code(), Some(0), "the job: {err}");
    }
}

/// `syncspy attach PID ARGS --report REPORT` with `SYNCSPY_DIR` at `d`: asserts it exits 0
/// and returns the report.
pub fn attach_report(d: &TempDir, pid: &str, args: &[&str], report: &Path) -> serde_json::Value {
    let o = std::process::Command::new(SYNCSPY)
        .arg("attach")
        .arg(pid)
        .args(args)
        .arg("--report")
        .arg(report)
        .env("SYNCSPY_DIR", d.path())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&std::fs::read(report).unwrap()).unwrap()
}

/// `run_sim` with `env` set for syncspy and CMD.
pub fn run_sim_env(
    d: &TempDir,
    extra: &[&str],
    cmd: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    sim_command(d, extra, cmd, env)
        .output()
        .expect("start syncspy")
}

/// `syncspy run --sim --report FILE [...] -- CMD` with `env`, which must succeed: the report's
/// first process, the program's own account (its last JSON line on stdout) and syncspy's
/// stderr.
pub fn run_sim_report(
    d: &TempDir,
    cmd: &[&str],
    env: &[(&str, &str)],
) -> (serde_json::Value, serde_json::Value, String) {
    let report = d.path().join("r.json");
    let o = run_sim_env(d, &["--report", report.to_str().unwrap()], cmd, env);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let truth =
        serde_json::from_str(stdout.lines().rfind(|l| l.starts_with('{')).unwrap()).unwrap();
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    (r["processes"][0].clone(), truth, stderr)
}

/// Polls `f` until it returns `Some`, for at most 60 s.
pub fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The body of an agent's `/metrics` at `addr`.
pub fn metrics(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// `/api/v1/snapshot` of the agent at `addr`, asked with `token`.
pub fn snapshot(addr: &str, token: &str) -> serde_json::Value {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        s,
        "GET /api/v1/snapshot HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    serde_json::from_str(resp.split_once("\r\n\r\n").unwrap().1).unwrap()
}

/// The value of the first line of `body` that starts with `line_start`, as a number.
pub fn metric(body: &str, line_start: &str) -> Option<u64> {
    body.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l[line_start.len()..].trim().parse().ok())
}

/// `syncspy agent --listen 127.0.0.1:0 ARGS... --token-file TOKEN` following the segment
/// folder `segments`, once it serves: the agent (killed when dropped) and its address. Its
/// stderr is drained so that it never blocks on a full pipe.
pub fn start_agent(segments: &Path, token: &Path, args: &[&str]) -> (Running, String) {
    use std::io::BufRead;
    let mut agent = Running(
        std::process::Command::new(SYNCSPY)
            .args(["agent", "--listen", "127.0.0.1:0"])
            .args(args)
            .arg("--token-file")
            .arg(token)
            .env("SYNCSPY_DIR", segments)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = std::io::BufReader::new(agent.0.stderr.take().unwrap()).lines();
    let addr = eventually("the agent's address", || {
        let l = lines.next()?.ok()?;
        let rest = l.split("serving http://").nth(1)?;
        Some(rest.split('/').next()?.to_string())
    });
    std::thread::spawn(move || for _ in lines {});
    (agent, addr)
}

/// The first 13 lines of a Python script on the simulated driver: its context, a stream
/// `s`, `usleep` as a host function (the scripts' line numbers count from it).
#[allow(unused_macros)]
macro_rules! sim_preamble {
    () => {
        "\
import ctypes, threading, time
cu = ctypes.CDLL('libcuda.so.1')
libc = ctypes.CDLL(None)
assert cu.cuInit(0) == 0
dev = ctypes.c_int()
assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
ctx = ctypes.c_void_p()
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
s = ctypes.c_void_p()
assert cu.cuStreamCreate(ctypes.byref(s), 0) == 0
cu.cuLaunchHostFunc.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
usleep = ctypes.cast(libc.usleep, ctypes.c_void_p)
"
    };
}
#[allow(unused_imports)]
pub(crate) use sim_preamble;
