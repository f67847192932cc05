//! Across nodes through a real Prometheus (issue 33): two `syncspy agent`s, each following a
//! segment folder of its own as two nodes would, scraped every second by a Prometheus server
//! (Debian's `prometheus`, from PATH: the test fails without it; `.ci/run` installs it) that
//! loads the shipped rules of deploy/prometheus/ with their windows and `for:` shortened. A
//! data-parallel job of 4 ranks (the `scn-ddp-straggler` scenario's rank program on the
//! simulated runtime and NCCL) has ranks 0-1 on one node and 2-3 on the other, rank 2 late to
//! every all-reduce; a job of one rank runs beside it. Through Prometheus's HTTP API, as a
//! dashboard or an alert manager would ask: `SyncspyStraggler` fires for rank 2 only, the
//! recording rules and the docs' and dashboard's queries name rank 2, the one-rank job is
//! named nowhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::{artifact, start_agent, Running, TempDir};

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
        // Prometheus logs on stderr.
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
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(&log).unwrap())
                    .spawn()
                    .unwrap(),
            );
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if let Some(status) = proc.0.try_wait().unwrap() {
                    eprintln!(
                        "prometheus ended ({status}): {}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                    break;
                }
                if matches!(get(&addr, "/-/ready"), Ok((200, _))) {
                    return Prometheus {
                        proc,
                        addr,
                        log,
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

/// The ranks of the test's jobs and where they write.
struct Ranks {
    procs: Vec<Running>,
    logs: PathBuf,
    sim: PathBuf,
    nccl: PathBuf,
}

impl Ranks {
    fn new(d: &TempDir) -> Ranks {
        let logs = d.path().join("ranks");
        let nccl = d.path().join("nccl");
        std::fs::create_dir_all(&logs).unwrap();
        std::fs::create_dir_all(&nccl).unwrap();
        Ranks {
            procs: Vec::new(),
            logs,
            sim: sim_dir(d),
            nccl,
        }
    }

    /// Starts rank `rank` of `world` of the torchrun job `job`, whose rank `late` is late to
    /// every all-reduce, as torchrun starts it (its environment; `scn-ddp-straggler-cuda`,
    /// the rank program of the `scn-ddp-straggler` scenario) under the preloaded library, with
    /// its segment in `segments` (its node's folder). The ranks meet in one folder, as the
    /// simulated NCCL's network. It runs until the test ends.
    fn start(&mut self, job: &str, rank: u32, world: u32, late: u32, segments: &Path) {
        let log = |ext: &str| std::fs::File::create(self.logs.join(format!("{job}.{rank}.{ext}")));
        let world_s = world.to_string();
        let late_s = late.to_string();
        self.procs.push(Running(
            Command::new(artifact("scn-ddp-straggler-cuda"))
                .args(["--ranks", &world_s, "--late", &late_s])
                .args(["--steps", "1000000"])
                .env("LD_PRELOAD", artifact("libsyncspy.so"))
                .env("LD_LIBRARY_PATH", &self.sim)
                .env("SYNCSPY_DIR", segments)
                .env("SIMCUDA_TIME_SCALE", "1")
                .env("SIMNCCL_DIR", &self.nccl)
                .env("TORCHELASTIC_RUN_ID", job)
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", (rank % 2).to_string())
                .env("LOCAL_WORLD_SIZE", "2")
                .env("WORLD_SIZE", &world_s)
                .env("GROUP_RANK", (rank / 2).to_string())
                .env_remove("SYNCSPY_SESSION")
                .stdin(Stdio::null())
                .stdout(log("out").unwrap())
                .stderr(log("err").unwrap())
                .spawn()
                .unwrap(),
        ));
    }

    /// What went wrong with the ranks so far: those that ended, and what they wrote on
    /// stderr (empty when all is well).
    fn trouble(&mut self) -> String {
        let mut out = String::new();
        for p in &mut self.procs {
            if let Ok(Some(status)) = p.0.try_wait() {
                out.push_str(&format!("rank process {} ended: {status}\n", p.0.id()));
            }
        }
        for e in std::fs::read_dir(&self.logs).unwrap() {
            let path = e.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if path.extension().is_some_and(|x| x == "err") && !text.is_empty() {
                out.push_str(&format!("{}: {text}\n", path.display()));
            }
        }
        out
    }
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

/// A sample's value.
fn value(sample: &Value) -> f64 {
    sample["value"][1].as_str().unwrap().parse().unwrap()
}

/// The query of docs/cluster.md's "Queries" that starts with `start` (in backquotes).
fn docs_query(start: &str) -> String {
    let docs = std::fs::read_to_string(root().join("docs/cluster.md")).unwrap();
    docs.split('`')
        .find(|q| q.starts_with(start))
        .unwrap_or_else(|| panic!("docs/cluster.md has no query `{start}...`"))
        .to_string()
}

#[test]
fn prometheus_names_the_straggler_of_a_job_on_two_nodes() {
    let d = TempDir::new("prom-nodes");
    let (a, b) = (d.path().join("node-a"), d.path().join("node-b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let (_agent_a, addr_a) = start_agent(&a, &d.path().join("a.token"), &["--interval-ms", "200"]);
    let (_agent_b, addr_b) = start_agent(&b, &d.path().join("b.token"), &["--interval-ms", "200"]);

    // The shipped expressions, with a 6 s rate window and 3 s of `for:`.
    let prom = Prometheus::start(&[&addr_a, &addr_b], &rules_with("6s", "3s"));

    // A job of 4 ranks, 0 and 1 on the first node, 2 and 3 on the second, rank 2 late; and a
    // job of one rank on the first node, which has no straggler.
    let job = format!("train-{}", std::process::id());
    let solo = format!("solo-{}", std::process::id());
    let mut ranks = Ranks::new(&d);
    for r in 0..4 {
        ranks.start(&job, r, 4, 2, if r < 2 { &a } else { &b });
    }
    ranks.start(&solo, 0, 1, 0, &a);

    // Both agents are scraped, and each exports two ranks of the job: Prometheus sees four.
    within(60, "both agents up in Prometheus", |last| {
        let up = prom.query(r#"up{job="syncspy"} == 1"#);
        *last = format!("{up:?}\n{}", prom.log());
        (up.len() == 2).then_some(())
    });
    let by_node = within(60, "the job's ranks on both nodes", |last| {
        let s = prom.query(&format!(r#"syncspy_job_ranks{{job_id="{job}"}}"#));
        *last = format!("{s:?}\n{}", ranks.trouble());
        (s.len() == 2 && s.iter().map(value).sum::<f64>() == 4.0).then_some(s)
    });
    let mut nodes = vec![addr_a.clone(), addr_b.clone()];
    nodes.sort();
    assert_eq!(labels(&by_node, "instance"), nodes);
    // Ranks 0 and 1 come from the first node's agent, 2 and 3 from the second's.
    let coll = within(60, "collective time of every rank", |last| {
        let s = prom.query(&format!(
            r#"syncspy_job_rank_collective_seconds_total{{job_id="{job}"}} > 0"#
        ));
        *last = format!("{s:?}\n{}", ranks.trouble());
        (s.len() == 4).then_some(s)
    });
    for (rank, addr) in [
        ("0", &addr_a),
        ("1", &addr_a),
        ("2", &addr_b),
        ("3", &addr_b),
    ] {
        let on = coll.iter().find(|x| x["metric"]["rank"] == rank).unwrap();
        assert_eq!(
            on["metric"]["instance"],
            addr.as_str(),
            "rank {rank}: {coll:?}"
        );
    }

    // The alert fires for rank 2 of the job, and for nothing else.
    let alert = within(60, "SyncspyStraggler to fire", |last| {
        let alerts = prom.api("alerts");
        *last = format!("{alerts}\n{}", ranks.trouble());
        alerts["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| {
                x["labels"]["alertname"] == "SyncspyStraggler"
                    && x["labels"]["job_id"] == job.as_str()
                    && x["state"] == "firing"
            })
            .cloned()
    });
    assert_eq!(alert["labels"]["rank"], "2", "{alert}");
    assert_eq!(alert["labels"]["severity"], "warning", "{alert}");
    let summary = alert["annotations"]["summary"].as_str().unwrap();
    assert!(
        summary.contains(&job) && summary.contains("rank 2"),
        "{alert}"
    );
    // The description names the straggler's node: the agent that exports its rank.
    let description = alert["annotations"]["description"].as_str().unwrap();
    assert!(
        description.contains(&format!("Its node's agent: {addr_b}.")),
        "{alert}"
    );
    let firing = prom.query(r#"ALERTS{alertname="SyncspyStraggler", alertstate="firing"}"#);
    assert_eq!(labels(&firing, "job_id"), [job.as_str()], "{firing:?}");
    assert_eq!(labels(&firing, "rank"), ["2"], "{firing:?}");

    // The recording rules: the job's 4 ranks and the solo job's 1; rank 2 waits for nobody,
    // the others wait for it; rank 2 is the straggler; the solo job has none.
    let count = prom.query("job_id:syncspy_job_collective_ranks:count");
    let count_of = |j: &str| count.iter().find(|x| x["metric"]["job_id"] == j).map(value);
    assert_eq!(count_of(&job), Some(4.0), "{count:?}");
    assert_eq!(count_of(&solo), Some(1.0), "{count:?}");
    let wait = prom.query(&format!(
        r#"job_id_rank:syncspy_job_rank_collective_wait_seconds:rate5m{{job_id="{job}"}}"#
    ));
    assert_eq!(labels(&wait, "rank"), ["0", "1", "2", "3"], "{wait:?}");
    for w in &wait {
        if w["metric"]["rank"] == "2" {
            assert_eq!(value(w), 0.0, "{wait:?}");
        } else {
            assert!(value(w) > 0.05, "{wait:?}");
        }
    }
    let straggler = prom.query("job_id_rank:syncspy_job_straggler:max_wait_rate5m");
    assert_eq!(
        labels(&straggler, "job_id"),
        [job.as_str()],
        "{straggler:?}"
    );
    assert_eq!(labels(&straggler, "rank"), ["2"], "{straggler:?}");
    assert!(value(&straggler[0]) > 0.05, "{straggler:?}");

    // The docs' query, as written there, names rank 2 of the job (and the solo job's only
    // rank for that job).
    let q = docs_query("bottomk by (job_id) (1, ");
    let bottom = prom.query(&q);
    let named: Vec<(String, String)> = bottom
        .iter()
        .map(|x| {
            let l = &x["metric"];
            (
                l["job_id"].as_str().unwrap().into(),
                l["rank"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert!(
        named.contains(&(job.clone(), "2".into())),
        "{q}: {bottom:?}"
    );
    assert!(
        named.contains(&(solo.clone(), "0".into())),
        "{q}: {bottom:?}"
    );
    assert_eq!(named.len(), 2, "{q}: {bottom:?}");

    // The dashboard's queries over the recorded series answer for the job: the straggler
    // table names rank 2, the table of collective rates puts it first.
    let dash: Value = serde_json::from_slice(
        &std::fs::read(root().join("deploy/grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    let exprs: Vec<String> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap())
        .filter_map(|t| t["expr"].as_str())
        .filter(|e| e.contains("job_id_rank:"))
        .map(|e| e.replace("$job_id", &job))
        .collect();
    assert_eq!(exprs.len(), 3, "{exprs:?}");
    for e in &exprs {
        let s = prom.query(e);
        assert!(!s.is_empty(), "{e}");
        if e.contains(":syncspy_job_straggler:") || e.starts_with("sort(") {
            assert_eq!(s[0]["metric"]["rank"], "2", "{e}: {s:?}");
        }
    }
    // Nothing was named for the solo job, however long it ran.
    let solo_alerts = prom.query(&format!(r#"ALERTS{{job_id="{solo}"}}"#));
    assert!(solo_alerts.is_empty(), "{solo_alerts:?}");
    // Every rule evaluated without error.
    let groups = prom.api("rules");
    for r in groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
    {
        assert_eq!(r["health"], "ok", "{r}");
    }
    // The ranks ran all along, without a complaint.
    let trouble = ranks.trouble();
    assert!(trouble.is_empty(), "{trouble}");
}
