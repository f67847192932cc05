//! Data from a `syncspy agent`: GET `/api/v1/snapshot` every refresh (plain HTTP/1.0 over
//! std's `TcpStream`; the agent serves loopback by default, so no TLS). The snapshot carries
//! since-start figures only: events/s and stall/s come from the difference between two
//! refreshes, the "last N seconds" histograms are not available (the window key says so),
//! and a reset subtracts counts and totals (percentiles stay since start), the GPU pane's
//! included: its gaps, short gaps and causes count from the reset, its gap percentiles and
//! busy shares stay since start (the pane says so).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use syncspy_read::alike::SiteLook;
use syncspy_read::names::{ApiName, KindName, Name};
use syncspy_read::report::{CauseKey, ProcessReport};
use syncspy_read::snapshot::Snapshot as AgentSnapshot;

use crate::busy::BusyHistory;
use crate::model::{
    GapCauseRow, GapStats, GpuDeviceView, GpuView, KindRow, Proc, ProcessKey, RankOf, Refresh,
    Scope, SiteRow, State, STALL_KINDS,
};
use crate::Source;
use syncspy_read::rates::Rates;

const TIMEOUT: Duration = Duration::from_secs(2);
/// Largest snapshot read (a host with many processes and sites stays well below).
const MAX_BYTES: u64 = 64 << 20;

/// Reads an agent's snapshots.
pub struct AgentSource {
    url: String,
    host: String,
    addr: std::net::SocketAddr,
    pid: Option<u32>,
    window_secs: u64,
    /// Per process: its stall rates, over the agent's collection times.
    rates: HashMap<ProcessKey, Rates>,
    /// Per process: counts and totals at the last reset, per kind and per site.
    baseline: HashMap<ProcessKey, Baseline>,
    last: Vec<Proc>,
    reset_pending: bool,
    forgotten: std::collections::HashSet<ProcessKey>,
    /// Sent as `Authorization: Bearer` (the agent serves its snapshot only with it).
    token: Option<String>,
    /// Per process: the GPU pane's busy share per second, from the devices' counters.
    busy: HashMap<ProcessKey, BusyHistory>,
    /// Why the latest fetch failed (None after one that worked).
    failed: Option<String>,
}

#[derive(Default)]
struct Baseline {
    kinds: HashMap<KindName, (u64, u64)>,
    sites: HashMap<(u32, KindName, ApiName), (u64, u64)>,
    gpu: GpuBaseline,
}

/// The GPU section's counters at the last reset.
#[derive(Default)]
struct GpuBaseline {
    /// Gaps received: count, total.
    idle: (u64, u64),
    /// Per device: gaps too short to be written, count and time.
    short_gaps: HashMap<i32, (u64, u64)>,
    /// Per cause (`IdleCause::key`): count, total.
    causes: HashMap<Option<CauseKey>, (u64, u64)>,
}

impl Baseline {
    /// A report's counts and totals, to subtract from later ones of the same process.
    fn of(r: &ProcessReport) -> Baseline {
        Baseline {
            kinds: r
                .kinds
                .iter()
                .map(|(k, s)| (k.clone(), (s.count, s.total_ns)))
                .collect(),
            sites: r
                .sites
                .iter()
                .map(|s| {
                    (
                        (s.site_id, s.kind.clone(), s.api.clone()),
                        (s.count, s.total_ns),
                    )
                })
                .collect(),
            gpu: GpuBaseline {
                idle: (r.gpu.idle.count, r.gpu.idle.total_ns),
                short_gaps: r
                    .gpu
                    .devices
                    .iter()
                    .map(|d| (d.device, (d.short_gaps, d.short_gap_ns)))
                    .collect(),
                causes: r
                    .gpu
                    .causes
                    .iter()
                    .map(|c| (c.cause.key(), (c.count, c.total_ns)))
                    .collect(),
            },
        }
    }
}

impl AgentSource {
    /// `url` is `http://HOST:PORT` (a path, if any, is ignored).
    pub fn new(url: &str, pid: Option<u32>, window_secs: u64) -> anyhow::Result<AgentSource> {
        let rest = url
            .strip_prefix("http://")
            .context("only http:// URLs are supported (the agent serves plain HTTP)")?;
        let host = rest.split('/').next().unwrap_or(rest).to_string();
        if host.is_empty() {
            bail!("no host in the URL");
        }
        let with_port = if host.contains(':') {
            host.clone()
        } else {
            format!("{host}:80")
        };
        let addr = with_port
            .to_socket_addrs()
            .with_context(|| format!("resolving {with_port}"))?
            .next()
            .context("the host has no address")?;
        Ok(AgentSource {
            url: url.trim_end_matches('/').to_string(),
            host,
            addr,
            pid,
            window_secs,
            rates: HashMap::new(),
            baseline: HashMap::new(),
            last: Vec::new(),
            reset_pending: false,
            forgotten: Default::default(),
            token: None,
            busy: HashMap::new(),
            failed: None,
        })
    }

    /// Sends `token` with every request (the agent's snapshot needs it).
    pub fn with_token(mut self, token: Option<String>) -> AgentSource {
        self.token = token;
        self
    }

    /// The raw response to `METHOD path` (no request body), with the token if any.
    fn exchange(&self, method: &str, path: &str) -> anyhow::Result<Vec<u8>> {
        let mut s = TcpStream::connect_timeout(&self.addr, TIMEOUT)
            .with_context(|| format!("connecting to {}", self.addr))?;
        s.set_read_timeout(Some(TIMEOUT))?;
        s.set_write_timeout(Some(TIMEOUT))?;
        let auth = self
            .token
            .as_ref()
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        write!(
            s,
            "{method} {path} HTTP/1.0\r\nHost: {}\r\nAccept: application/json\r\n\
             Content-Length: 0\r\n{auth}\r\n",
            self.host
        )?;
        let mut buf = Vec::new();
        s.take(MAX_BYTES).read_to_end(&mut buf)?;
        Ok(buf)
    }

    fn fetch(&self) -> anyhow::Result<AgentSnapshot> {
        parse_response(&self.exchange("GET", "/api/v1/snapshot")?)
    }
}

/// The agent's answer to a tracing request: the process's tracing state before it (from
/// "... (its tracing was off)"), or the agent's reason for refusing.
pub fn parse_trace_answer(buf: &[u8]) -> Result<String, String> {
    let text = String::from_utf8_lossy(buf);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("not an HTTP response")?;
    let body = body.trim();
    match head.split_whitespace().nth(1) {
        Some("200") => Ok(body
            .rsplit_once("(its tracing was ")
            .and_then(|(_, s)| s.strip_suffix(')'))
            .unwrap_or("unknown")
            .to_string()),
        Some("401") => Err("the agent wants its token (--token-file)".into()),
        Some(code) => {
            // "process N: why" -> "why".
            let why = body.split_once(": ").map_or(body, |(_, w)| w);
            Err(format!("the agent answered {code}: {why}"))
        }
        None => Err("not an HTTP response".into()),
    }
}

/// The snapshot in an HTTP response.
pub fn parse_response(buf: &[u8]) -> anyhow::Result<AgentSnapshot> {
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("not an HTTP response")?;
    let head = String::from_utf8_lossy(&buf[..split]);
    let status = head.lines().next().unwrap_or("");
    match status.split_whitespace().nth(1) {
        Some("200") => {}
        Some("401") => bail!(
            "the agent answered `{status}`: its snapshot needs the token it wrote to its \
             --token-file (readable by the agent's user and root); give that file with \
             --token-file"
        ),
        _ => bail!("the agent answered `{status}`"),
    }
    serde_json::from_slice(&buf[split + 4..]).context("not a syncspy agent snapshot")
}

/// The monitor's view of one process of a snapshot, less `base`.
fn proc_of(r: &ProcessReport, base: Option<&Baseline>) -> Proc {
    let mut kinds = Vec::new();
    for k in STALL_KINDS {
        let Some(s) = r.kinds.get(k.name()) else {
            continue;
        };
        let (bc, bt) = base
            .and_then(|b| b.kinds.get(k.name()).copied())
            .unwrap_or_default();
        kinds.push(KindRow {
            kind: k,
            count: s.count.saturating_sub(bc),
            total_ns: s.total_ns.saturating_sub(bt),
            p50_ns: s.p50_ns,
            p99_ns: s.p99_ns,
            max_ns: s.max_ns,
            bars: None,
        });
    }
    // The report's sites, merged already; the rows' rules are the local source's too.
    let sites: Vec<(SiteRow, Option<Arc<SiteLook>>)> = r
        .sites
        .iter()
        .filter_map(|s| {
            let kind = s.kind.known()?;
            let (bc, bt) = base
                .and_then(|b| b.sites.get(&(s.site_id, s.kind.clone(), s.api.clone())))
                .copied()
                .unwrap_or_default();
            let row = SiteRow {
                site_id: s.site_id,
                kind,
                api: s.api.clone(),
                count: s.count.saturating_sub(bc),
                total_ns: s.total_ns.saturating_sub(bt),
                p99_ns: s.p99_ns,
                max_ns: s.max_ns,
                location: SiteRow::location_of(s.site_id, s.location.as_deref(), &s.frames),
                // Its look's (`site_rows`).
                frames: Vec::new(),
                waited_by: s.waited_by.clone(),
            };
            Some((row, Some(Arc::new(SiteLook::printed(s.frames.clone())))))
        })
        .collect();
    Proc {
        pid: r.pid,
        host_pid: r.host_pid,
        start_ticks: r.start_ticks,
        command: r.cmdline.clone(),
        state: State::from(&r.state),
        events_per_s: None,
        stall_per_s: None,
        gpu_idle_share: r.gpu.idle_share_shown(),
        dropped: r.dropped_events,
        lost: r.lost_records,
        shedding: r
            .cost
            .as_ref()
            .and_then(syncspy_read::report::CostReport::shedding_now),
        wall_ns: r.wall_ns,
        all: Scope::of(kinds, sites),
        recent: None,
        job: r.job.as_ref().map(|j| {
            RankOf::new(
                &j.id,
                j.rank,
                r.gpu.collective_ns,
                r.gpu.measured,
                r.gpu.traced_ns,
            )
            .with_nccl(r.collectives.as_ref().and_then(|c| c.share()))
        }),
        gpu: gpu_view(&r.gpu, base),
    }
}

/// The GPU pane from a report's `gpu` section, less `base`: the counts and totals (gaps,
/// short gaps, causes) since the reset; the gaps' percentiles and the devices' busy shares
/// stay since start (the agent sends no distribution of the gaps, the pane says so: its
/// `bars` are `None`); `None` for segments without a GPU part.
fn gpu_view(g: &syncspy_read::report::Gpu, base: Option<&Baseline>) -> Option<GpuView> {
    let state = g.state.as_ref()?;
    let gb = base.map(|b| &b.gpu);
    let (n0, t0) = gb.map(|b| b.idle).unwrap_or_default();
    let devices: Vec<GpuDeviceView> = g
        .devices
        .iter()
        .map(|d| GpuDeviceView {
            device: d.device,
            busy_share: d.busy_fraction,
            per_second: Vec::new(),
        })
        .collect();
    let view = GpuView {
        tracing: GpuView::tracing_label(
            state.as_str(),
            g.mode.as_ref().map_or("unknown", Name::as_str),
        ),
        devices,
        gaps: GapStats {
            count: g.idle.count.saturating_sub(n0),
            total_ns: g.idle.total_ns.saturating_sub(t0),
            p50_ns: g.idle.p50_ns,
            p99_ns: g.idle.p99_ns,
            max_ns: g.idle.max_ns,
            bars: None,
        },
        short_gaps: g.devices.iter().fold((0, 0), |(n, t), d| {
            let (n0, t0) = gb
                .and_then(|b| b.short_gaps.get(&d.device))
                .copied()
                .unwrap_or_default();
            (
                n.saturating_add(d.short_gaps.saturating_sub(n0)),
                t.saturating_add(d.short_gap_ns.saturating_sub(t0)),
            )
        }),
        min_gap_ns: g.min_gap_ns,
        causes: gap_causes(g, gb),
        behind: g.behind_stalls,
    };
    Some(view.in_display_order())
}

/// The gaps' causes less `base`, most idle time first; after a reset, a cause's share is of
/// the idle time blamed since then.
fn gap_causes(g: &syncspy_read::report::Gpu, base: Option<&GpuBaseline>) -> Vec<GapCauseRow> {
    let mut causes: Vec<GapCauseRow> = g
        .causes
        .iter()
        .filter_map(|c| {
            let (n0, t0) = base
                .and_then(|b| b.causes.get(&c.cause.key()))
                .copied()
                .unwrap_or_default();
            let count = c.count.saturating_sub(n0);
            (count > 0).then(|| GapCauseRow {
                count,
                total_ns: c.total_ns.saturating_sub(t0),
                ..c.clone()
            })
        })
        .collect();
    if base.is_some() {
        let received = causes
            .iter()
            .map(|c| c.total_ns)
            .fold(0, u64::saturating_add);
        for c in &mut causes {
            c.share = if received > 0 {
                c.total_ns as f64 / received as f64
            } else {
                0.0
            };
        }
    }
    // The agent's causes are merged already (`syncspy_read::alike`); since a reset the
    // order is by the time blamed since then (`GpuView::in_display_order`).
    causes
}

impl Source for AgentSource {
    fn step(&mut self) -> Refresh {
        let mut problems = Vec::new();
        match self.fetch() {
            Ok(snap) => {
                self.failed = None;
                problems.extend(snap.warnings.iter().map(ToString::to_string));
                let mut procs = Vec::new();
                for sp in &snap.processes {
                    let r = &sp.report;
                    let key = ProcessKey {
                        pid: r.pid,
                        start_ticks: r.start_ticks,
                    };
                    if self.pid.is_some_and(|p| p != r.pid) || self.forgotten.contains(&key) {
                        continue;
                    }
                    if self.reset_pending {
                        self.baseline.insert(key, Baseline::of(r));
                    }
                    let mut p = proc_of(r, self.baseline.get(&key));
                    // Over the agent's collection times (the snapshot's), not this
                    // monitor's refreshes: it may see one collection several times.
                    let rates = self.rates.entry(key).or_default();
                    rates.sample(snap.time_unix_ns, r.stall_events(), r.stall_ns);
                    if let Some((ev, st)) = rates.per_second().filter(|_| !p.state.ended()) {
                        p.events_per_s = Some(ev);
                        p.stall_per_s = Some(st);
                    }
                    if let Some(g) = p.gpu.as_mut() {
                        let now_s = syncspy_read::monotonic_ns() / 1_000_000_000;
                        let h = self
                            .busy
                            .entry(key)
                            .or_insert_with(|| BusyHistory::new(self.window_secs));
                        if self.reset_pending {
                            h.clear();
                        }
                        h.sample(
                            now_s,
                            r.gpu
                                .devices
                                .iter()
                                .map(|d| (d.device, d.span_ns, d.busy_ns)),
                        );
                        for d in &mut g.devices {
                            d.per_second = h.shares(d.device, now_s);
                        }
                    }
                    procs.push(p);
                }
                self.reset_pending = false;
                // Per-process state of processes the agent no longer lists goes with them
                // (a node agent sees many short jobs over days).
                let listed: std::collections::HashSet<ProcessKey> =
                    procs.iter().map(|p| p.key()).collect();
                self.rates.retain(|k, _| listed.contains(k));
                self.baseline.retain(|k, _| listed.contains(k));
                self.busy.retain(|k, _| listed.contains(k));
                self.last = procs;
            }
            Err(e) => {
                let m = format!("{}: {e:#}", self.url);
                self.failed = Some(m.clone());
                problems.push(m);
            }
        }
        Refresh {
            source: self.url.clone(),
            processes: self.last.clone(),
            problems,
            window_secs: self.window_secs,
            ..Refresh::default()
        }
    }

    fn reset(&mut self) {
        self.reset_pending = true;
    }

    fn failure(&self) -> Option<String> {
        self.failed.clone()
    }

    /// `POST /api/v1/gpu-trace?pid=N&seconds=S` (with the token).
    fn request_gpu_trace(&mut self, process: ProcessKey, secs: u64) -> Result<String, String> {
        let path = format!("/api/v1/gpu-trace?pid={}&seconds={secs}", process.pid);
        let buf = self
            .exchange("POST", &path)
            .map_err(|e| format!("{}: {e:#}", self.url))?;
        parse_trace_answer(&buf)
    }

    fn forget(&mut self, process: ProcessKey) {
        self.forgotten.insert(process);
        self.busy.remove(&process);
        self.last.retain(|p| p.key() != process);
    }
}

#[cfg(test)]
mod tests {
    use super::parse_trace_answer;

    #[test]
    fn tracing_answers_give_the_state_before_or_the_reason() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nprocess 7: GPU activity \
                   traced for the next 3 s (its tracing was paused)\n";
        assert_eq!(parse_trace_answer(ok), Ok("paused".to_string()));
        let gone = b"HTTP/1.1 404 Not Found\r\n\r\nprocess 7: not a running process this \
                     agent follows\n";
        assert_eq!(
            parse_trace_answer(gone),
            Err("the agent answered 404: not a running process this agent follows".to_string())
        );
        let auth = b"HTTP/1.1 401 Unauthorized\r\n\r\nsend Authorization: Bearer\n";
        assert!(parse_trace_answer(auth).unwrap_err().contains("token"));
        assert!(parse_trace_answer(b"garbage").is_err());
    }
}

#[cfg(test)]
mod reset_tests {
    use super::{gpu_view, proc_of, Baseline};
    use syncspy_read::report::{
        GapCauseReport, Gpu, GpuDevice, IdleCause, IdleStats, ProcessReport,
    };

    const MS: u64 = 1_000_000;

    fn cause(cause: &str, api: &str, site_id: u32, count: u64, total_ns: u64) -> GapCauseReport {
        GapCauseReport {
            cause: IdleCause::parse(
                cause,
                api,
                site_id,
                (site_id != 0).then(|| format!("train.py:{site_id}")),
            ),
            count,
            total_ns,
            share: 0.0,
        }
    }

    fn device(device: i32, short_gaps: u64, short_gap_ns: u64) -> GpuDevice {
        GpuDevice {
            device,
            span_ns: 1_000 * MS,
            busy_ns: 700 * MS,
            busy_fraction: Some(0.7),
            short_gaps,
            short_gap_ns,
            last_window_busy: None,
        }
    }

    fn report(
        idle: IdleStats,
        devices: Vec<GpuDevice>,
        causes: Vec<GapCauseReport>,
    ) -> ProcessReport {
        ProcessReport {
            pid: 7,
            gpu: Gpu {
                idle,
                state: Some("tracing".into()),
                mode: Some("on".into()),
                min_gap_ns: 10_000,
                devices,
                causes,
                ..Gpu::default()
            },
            ..ProcessReport::default()
        }
    }

    #[test]
    fn the_idle_share_is_the_readers_not_one_recomputed_here() {
        // Gaps arrived, but no device time became final: the reader tells no share, and
        // neither does the monitor (the local source shows none either), rather than gap
        // time over wall time.
        let mut r = report(
            IdleStats {
                count: 2,
                total_ns: 40 * MS,
                ..IdleStats::default()
            },
            Vec::new(),
            Vec::new(),
        );
        r.wall_ns = 100 * MS;
        r.gpu.measured = true;
        assert_eq!(proc_of(&r, None).gpu_idle_share, None);
        // Over the active span when the reader has it, else over the accounted time.
        r.gpu.idle_share = Some(0.4);
        assert_eq!(proc_of(&r, None).gpu_idle_share, Some(0.4));
        r.gpu.active_idle_share = Some(0.1);
        assert_eq!(proc_of(&r, None).gpu_idle_share, Some(0.1));
    }

    #[test]
    fn after_a_reset_the_gpu_pane_counts_gaps_short_gaps_and_causes_from_it() {
        let before = report(
            IdleStats {
                count: 10,
                total_ns: 100 * MS,
                p50_ns: 5 * MS,
                p99_ns: 20 * MS,
                max_ns: 30 * MS,
            },
            vec![device(0, 100, MS)],
            vec![
                cause("stream_sync", "cudaStreamSynchronize", 3, 8, 90 * MS),
                cause("host_busy_elsewhere", "", 0, 2, 10 * MS),
                cause("device_sync", "cudaDeviceSynchronize", 4, 1, 5 * MS),
            ],
        );
        let base = Baseline::of(&before);
        let after = report(
            IdleStats {
                count: 16,
                total_ns: 160 * MS,
                p50_ns: 6 * MS,
                p99_ns: 25 * MS,
                max_ns: 30 * MS,
            },
            // Device 1 appeared after the reset: all its short gaps count.
            vec![device(0, 130, 3 * MS / 2), device(1, 5, MS / 20)],
            vec![
                cause("stream_sync", "cudaStreamSynchronize", 3, 9, 100 * MS),
                cause("host_busy_elsewhere", "", 0, 7, 60 * MS),
                // No gap since the reset: no row.
                cause("device_sync", "cudaDeviceSynchronize", 4, 1, 5 * MS),
            ],
        );
        let v = gpu_view(&after.gpu, Some(&base)).unwrap();
        assert_eq!((v.gaps.count, v.gaps.total_ns), (6, 60 * MS));
        // The agent sends percentiles, not a distribution: they stay since start (no bars,
        // which the pane labels).
        assert_eq!(
            (v.gaps.p50_ns, v.gaps.p99_ns, v.gaps.max_ns),
            (6 * MS, 25 * MS, 30 * MS)
        );
        assert_eq!(v.gaps.bars, None);
        assert_eq!(v.short_gaps, (30 + 5, MS / 2 + MS / 20));
        // Since the reset, the host's other work caused most idle time: it comes first, and
        // the shares are of the 60 ms blamed since then.
        let rows: Vec<(&str, u64, u64)> = v
            .causes
            .iter()
            .map(|c| (c.cause.name(), c.count, c.total_ns))
            .collect();
        assert_eq!(
            rows,
            [
                ("host_busy_elsewhere", 5, 50 * MS),
                ("stream_sync", 1, 10 * MS)
            ]
        );
        assert!((v.causes[0].share - 50.0 / 60.0).abs() < 1e-9);
        assert!((v.causes[1].share - 10.0 / 60.0).abs() < 1e-9);
        assert_eq!(v.causes[1].cause.location(), Some("train.py:3"));

        // Without a reset: the agent's figures as they are.
        let mut since_start = after.clone();
        since_start.gpu.causes[0].share = 0.5;
        let v = gpu_view(&since_start.gpu, None).unwrap();
        assert_eq!((v.gaps.count, v.gaps.total_ns), (16, 160 * MS));
        assert_eq!(v.short_gaps, (135, 3 * MS / 2 + MS / 20));
        assert_eq!(v.causes.len(), 3);
        assert_eq!(v.causes[0].cause.name(), "stream_sync");
        assert_eq!(v.causes[0].share, 0.5);
        assert_eq!(v.tracing, "tracing, mode on");
    }
}
