//! Across nodes through a real Prometheus (issue 33): two `syncspy agent`s, each following a
//! segment folder of its own as two nodes would, scraped every second by a Prometheus server
//! (Debian's `prometheus`, from PATH: the test fails without it; `.ci/run` installs it) that
//! loads the shipped rules of deploy/prometheus/ with their windows and `for:` shortened. The
//! ranks of one job are split over the two folders, and the answers come from Prometheus's
//! HTTP API, as a dashboard or an alert manager would get them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::{artifact, cudacalls, start_agent, Running, TempDir};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `name` found on PATH; fails the test (never skips it) when it is not installed.
fn on_path(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{name}` is not on PATH: this test needs Debian's prometheus package \
                 (`apt-get install prometheus`; .ci/run installs it)"
            )
        })
}

/// The shipped rules file with every rate window `[5m]` made `[window]` and every `for: 10m`
/// made `for: for_`; the expressions themselves are the shipped ones. Fails when the file no
/// longer has what is replaced (so a change of the shipped values is noticed here).
fn rules_with(window: &str, for_: &str) -> String {
    let shipped =
        std::fs::read_to_string(root().join("deploy/prometheus/syncspy-rules.yml")).unwrap();
    assert!(shipped.matches("[5m]").count() >= 1, "{shipped}");
    assert_eq!(shipped.matches("for: 10m").count(), 1, "{shipped}");
    shipped
        .replace("[5m]", &format!("[{window}]"))
        .replace("for: 10m", &format!("for: {for_}"))
}

/// Percent-encodes `s` for a URL's query string.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// (status, body) of `GET path` from the HTTP server at `addr`.
fn get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_string()))
}

/// A Prometheus server on a loopback port, with a temporary configuration and storage; killed
/// when dropped (before its folder is removed).
struct Prometheus {
    proc: Running,
    addr: String,
    log: PathBuf,
    _dir: TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` every second, evaluating `rules` every second, and
    /// waits until it is ready.
    fn start(targets: &[&str], rules: &str) -> Prometheus {
        let bin = on_path("prometheus");
        let dir = TempDir::new("prometheus");
        let rules_path = dir.file("rules.yml", rules);
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        let config = dir.file(
            "prometheus.yml",
            &format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {}\n\
                 scrape_configs:\n  - job_name: syncspy\n    static_configs:\n      - targets: [{}]\n",
                rules_path.display(),
                targets.join(", ")
            ),
        );
        let log = dir.path().join("prometheus.log");
        // A free port, asked of the kernel and released for Prometheus to take; another
        // program may take it in between, so a Prometheus that ends early is started again.
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let addr = format!("127.0.0.1:{port}");
            let mut proc = Running(
                Command::new(&bin)
                    .arg(format!("--config.file={}", config.display()))
                    .arg(format!(
                        "--storage.tsdb.path={}",
                        dir.path().join("data").display()
                    ))
                    .arg(format!("--web.listen-address={addr}"))
                    .stdin(Stdio::null())
                    .stdout(std::fs::File::create(&log).unwrap())
                    .stderr(std::fs::File::create(dir.path().join("prometheus.err")).unwrap())
                    .spawn()
                    .unwrap(),
            );
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if let Some(status) = proc.0.try_wait().unwrap() {
                    eprintln!(
                        "prometheus ended ({status}): {}",
                        std::fs::read_to_string(dir.path().join("prometheus.err"))
                            .unwrap_or_default()
                    );
                    break;
                }
                if matches!(get(&addr, "/-/ready"), Ok((200, _))) {
                    return Prometheus {
                        proc,
                        addr,
                        log: dir.path().join("prometheus.err"),
                        _dir: dir,
                    };
                }
                assert!(Instant::now() < deadline, "Prometheus not ready in 30 s");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        panic!("Prometheus did not start on a free port in 5 tries");
    }

    /// What Prometheus logged (for a failed assertion's message).
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The `data` of a successful `GET /api/v1/<path>`.
    fn api(&self, path: &str) -> Value {
        let (status, body) = get(&self.addr, &format!("/api/v1/{path}")).unwrap();
        let v: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {status} {body}"));
        assert_eq!(v["status"], "success", "{path}: {body}");
        v["data"].clone()
    }

    /// The samples of the instant query `promql`.
    fn query(&self, promql: &str) -> Vec<Value> {
        let data = self.api(&format!("query?query={}", encode(promql)));
        assert_eq!(data["resultType"], "vector", "{promql}: {data}");
        data["result"].as_array().unwrap().clone()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.proc.0.kill();
        let _ = self.proc.0.wait();
    }
}

/// Polls `f` every 250 ms until it returns `Some`, for at most `secs` seconds; on the deadline
/// fails with `what` and the last thing `f` saw (`last`).
fn within<T>(secs: u64, what: &str, mut f: impl FnMut(&mut String) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut last = String::new();
    loop {
        if let Some(v) = f(&mut last) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {secs} s waiting for {what}; last seen: {last}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The value of `label` in every sample.
fn labels(samples: &[Value], label: &str) -> Vec<String> {
    let mut v: Vec<String> = samples
        .iter()
        .map(|s| s["metric"][label].as_str().unwrap_or("").to_string())
        .collect();
    v.sort();
    v
}

/// A folder holding the simulated runtime under the names the CUDA libraries have, as
/// `syncspy run --sim` makes it.
fn sim_dir(d: &TempDir) -> PathBuf {
    let lib = d.path().join("sim");
    std::fs::create_dir_all(&lib).unwrap();
    for name in syncspy_cli::run::SIM_LINK_NAMES {
        std::os::unix::fs::symlink(artifact("libsimcudart.so"), lib.join(name)).unwrap();
    }
    lib
}

/// Rank `rank` of `world` of the torchrun job `job`, started as torchrun starts it (its
/// environment) under the preloaded library, writing its segment into `segments`: a loop of
/// 1 ms of GPU work and a wait for it, for as long as the test runs.
fn start_rank(job: &str, rank: u32, world: u32, segments: &Path, sim: &Path) -> Running {
    Running(
        Command::new(cudacalls())
            .args(["--iters", "100000", "busy=s1:1000", "sync=s1", "sleep=5000"])
            .env("LD_PRELOAD", artifact("libsyncspy.so"))
            .env("LD_LIBRARY_PATH", sim)
            .env("SYNCSPY_DIR", segments)
            .env("SIMCUDA_TIME_SCALE", "1")
            .env("TORCHELASTIC_RUN_ID", job)
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", (rank % 2).to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("GROUP_RANK", (rank / 2).to_string())
            .env_remove("SYNCSPY_SESSION")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

#[test]
fn the_shipped_rules_pass_their_promtool_tests() {
    let promtool = on_path("promtool");
    let dir = root().join("deploy/prometheus");
    let rules: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yml"))
        .collect();
    assert!(!rules.is_empty());
    for args in [
        (vec!["check", "rules"], rules),
        (
            vec!["test", "rules"],
            vec![dir.join("tests/syncspy-rules.test.yml")],
        ),
    ] {
        let o = Command::new(&promtool)
            .args(&args.0)
            .args(&args.1)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "promtool {:?}: {}{}",
            args.0,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn prometheus_joins_the_ranks_of_two_agents() {
    let d = TempDir::new("prom-nodes");
    let sim = sim_dir(&d);
    let (a, b) = (d.path().join("node-a"), d.path().join("node-b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let (_agent_a, addr_a) = start_agent(&a, &d.path().join("a.token"), &["--interval-ms", "200"]);
    let (_agent_b, addr_b) = start_agent(&b, &d.path().join("b.token"), &["--interval-ms", "200"]);

    let prom = Prometheus::start(&[&addr_a, &addr_b], &rules_with("6s", "3s"));

    let job = format!("prom-{}", std::process::id());
    let _ranks: Vec<Running> = (0..4)
        .map(|r| start_rank(&job, r, 4, if r < 2 { &a } else { &b }, &sim))
        .collect();

    // Both agents are scraped, and each exports two ranks of the job: Prometheus sees four.
    within(60, "both agents up in Prometheus", |last| {
        let up = prom.query(r#"up{job="syncspy"} == 1"#);
        *last = format!("{up:?}\n{}", prom.log());
        (up.len() == 2).then_some(())
    });
    let by_node = within(60, "the job's ranks on both nodes", |last| {
        let s = prom.query(&format!(r#"syncspy_job_ranks{{job_id="{job}"}}"#));
        *last = format!("{s:?}");
        let sum: f64 = s
            .iter()
            .map(|x| x["value"][1].as_str().unwrap().parse::<f64>().unwrap())
            .sum();
        (s.len() == 2 && sum == 4.0).then_some(s)
    });
    let mut instances = labels(&by_node, "instance");
    let mut expected = vec![addr_a.clone(), addr_b.clone()];
    instances.sort();
    expected.sort();
    assert_eq!(instances, expected);
    let ranks = within(60, "a stall series for every rank", |last| {
        let s = prom.query(&format!(
            r#"sum by (job_id, rank) (syncspy_job_rank_stall_seconds_total{{job_id="{job}"}})"#
        ));
        *last = format!("{s:?}");
        (s.len() == 4).then_some(s)
    });
    assert_eq!(labels(&ranks, "rank"), ["0", "1", "2", "3"]);
    // Ranks 0 and 1 come from the first node's agent, 2 and 3 from the second's.
    for (rank, addr) in [
        ("0", &addr_a),
        ("1", &addr_a),
        ("2", &addr_b),
        ("3", &addr_b),
    ] {
        let s = prom.query(&format!(
            r#"syncspy_job_rank_stall_seconds_total{{job_id="{job}", rank="{rank}"}}"#
        ));
        assert_eq!(
            labels(&s, "instance"),
            [addr.as_str()],
            "rank {rank}: {s:?}"
        );
    }
    // The rules are loaded and healthy.
    let groups = prom.api("rules");
    let rules: Vec<&Value> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    assert!(rules.len() >= 6, "{groups}");
    assert!(
        rules
            .iter()
            .any(|r| r["type"] == "alerting" && r["name"] == "SyncspyStraggler"),
        "{groups}"
    );
    within(30, "every rule evaluated without error", |last| {
        let g = prom.api("rules");
        *last = g.to_string();
        g["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap())
            .all(|r| r["health"] == "ok")
            .then_some(())
    });
}
