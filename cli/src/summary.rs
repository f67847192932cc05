//! The text summary of a report: what `syncspy run` prints when the command ends and what
//! `syncspy report FILE` prints. Rendered from the `Report` alone, so both look the same.

use std::fmt::Write as _;

use syncspy_read::names::{GpuState, Name};
use syncspy_read::plural;
use syncspy_read::report::{IdleCause, ProcessReport, Report, Site};
use syncspy_read::symbolize::{is_runtime_module, is_users_frame};

/// Call sites listed per process.
pub const TOP_SITES: usize = 5;
/// Frames shown per call site (outside the CUDA runtime and syncspy).
pub const SITE_FRAMES: usize = 4;

/// A duration for people: `850 ns`, `12.3 us`, `4.56 ms`, `1.234 s`.
pub fn fmt_ns(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} us", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", f / 1e6)
    } else {
        format!("{:.3} s", f / 1e9)
    }
}

/// A byte count for people: `512 B`, `4.0 KiB`, `1.5 GiB`.
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// Whether a process has anything to show beyond one line.
fn has_events(p: &ProcessReport) -> bool {
    p.kinds.values().any(|k| k.count > 0)
        || p.lost_records > 0
        || p.dropped_events > 0
        || p.gpu.measured
}

/// Gap causes shown in the summary; the JSON report has them all.
pub const TOP_CAUSES: usize = 5;

/// Why a process's GPU was not measured, from its `gpu.state`.
pub fn gpu_not_measured(state: &Name<GpuState>) -> &str {
    match state.known() {
        Some(GpuState::Off) => "off (SYNCSPY_GPU_IDLE=off, or no GPU work)",
        Some(GpuState::Unavailable) => "no activity source (CUPTI not found or refused)",
        Some(GpuState::Yielded) => "another tool took the GPU activity source over",
        Some(GpuState::Tracing) => "traced, but no GPU time became final before the process ended (runs shorter than about 0.5 s)",
        Some(GpuState::Paused) => "duty-cycled, and no traced window covered GPU work (SYNCSPY_GPU_IDLE=on traces all the time)",
        Some(GpuState::Unknown) | None => state.as_str(),
    }
}

/// Why a process's GPU, measured for a while, was not traced after that (`None`: it was).
pub fn gpu_stopped(state: &GpuState) -> Option<&'static str> {
    match state {
        GpuState::Yielded => Some("another tool took the activity source over: not measured since"),
        _ => None,
    }
}

/// The GPU line after `GPU: `: busy share, traced time and mode, idle share, the gaps.
pub fn gpu_measured(g: &syncspy_read::report::Gpu, busy: f64) -> String {
    let span: u64 = g.devices.iter().map(|d| d.span_ns).sum();
    let short: u64 = g.devices.iter().map(|d| d.short_gaps).sum();
    // Idle over the GPU's active time (first work to last): the share the program's waits
    // made; the traced time also holds the set-up's and the teardown's idle.
    let active = match g.active_idle_share {
        Some(idle) if g.active_span_ns > 0 => format!(
            "idle {:.1}% of its active {} (first to last work)",
            idle * 100.0,
            fmt_ns(g.active_span_ns)
        ),
        _ => format!("idle {:.1}%", (1.0 - busy) * 100.0),
    };
    format!(
        "busy {:.1}% of {} traced ({}), {}; {} of {} or more: {} (p50 {}, max {}); {} shorter",
        busy * 100.0,
        fmt_ns(span),
        g.mode.as_ref().map_or("?", Name::as_str),
        active,
        plural::count(g.idle.count, "gap", "gaps"),
        fmt_ns(g.min_gap_ns),
        fmt_ns(g.idle.total_ns),
        fmt_ns(g.idle.p50_ns),
        fmt_ns(g.idle.max_ns),
        short
    )
}

/// What a gap cause was: the host's stall (kind and API) or its own work.
pub fn gap_cause(c: &syncspy_read::report::GapCauseReport) -> String {
    match &c.cause {
        IdleCause::Stall(s) => format!("{} {}", s.kind, s.api),
        IdleCause::HostBusyElsewhere => "host busy elsewhere (no CUDA stall)".to_string(),
    }
}

/// The GPU line and the gap-cause table (nothing for a segment older than ABI 1.2).
fn render_gpu(out: &mut String, p: &ProcessReport) {
    let g = &p.gpu;
    if let Some(b) = &g.behind_stalls {
        let _ = writeln!(
            out,
            "  GPU idle behind syncs: {} at {} of {} syncs and copies (measured at each)",
            fmt_ns(b.total_ns),
            b.measured,
            b.syncs
        );
    }
    let Some(state) = g.state.as_ref() else {
        return;
    };
    let Some(busy) = g.busy_fraction else {
        let _ = writeln!(out, "  GPU: not measured: {}", gpu_not_measured(state));
        return;
    };
    let _ = writeln!(out, "  GPU: {}", gpu_measured(g, busy));
    if let Some(why) = state.known().as_ref().and_then(gpu_stopped) {
        let _ = writeln!(out, "  GPU: {why}");
    }
    if g.causes.is_empty() {
        return;
    }
    let _ = writeln!(out, "  GPU idle gaps by cause (host side):");
    for c in g.causes.iter().take(TOP_CAUSES) {
        let at = c
            .cause
            .location()
            .map(|l| format!("  at {l}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:>6.1}%  {}  x{}  {}{at}",
            c.share * 100.0,
            gap_cause(c),
            c.count,
            fmt_ns(c.total_ns)
        );
    }
}

/// The whole summary.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let cmd = shell_words(&r.command);
    match r.attached_pid {
        // syncspy did not start it: no exit code of its own to tell.
        Some(pid) => {
            let runs = r
                .processes
                .iter()
                .any(|p| p.host_pid.unwrap_or(p.pid) == pid && p.state.is_running())
                || r.processes.iter().all(|p| p.state.is_running());
            let _ = writeln!(
                out,
                "syncspy: attached to process {pid} (`{cmd}`) for {}; {}",
                fmt_ns(r.wall_ns),
                if runs {
                    "it runs on"
                } else {
                    "it ended while attached"
                }
            );
        }
        None => {
            let _ = writeln!(
                out,
                "syncspy: `{cmd}` exited with code {} after {}",
                r.exit_code,
                fmt_ns(r.wall_ns)
            );
        }
    }
    // When processes said why they could not record, that reason is given instead of a guess.
    let failed = r
        .warnings
        .any(|w| matches!(w, syncspy_read::warning::Warning::CouldNotRecord { .. }));
    if r.processes.is_empty() && !failed {
        let _ = writeln!(
            out,
            "syncspy: no instrumented process reported: either the command never called the \
             CUDA runtime, or libsyncspy.so was not loaded (a static binary, or LD_PRELOAD \
             cleared by the program)"
        );
    }
    let (busy, quiet): (Vec<_>, Vec<_>) = r.processes.iter().partition(|p| has_events(p));
    for p in busy {
        render_process(&mut out, p);
    }
    if !quiet.is_empty() {
        let list: Vec<String> = quiet
            .iter()
            .map(|p| format!("{} ({})", p.pid, short(&p.cmdline, 40)))
            .collect();
        let _ = writeln!(
            out,
            "{} without stalls: {}",
            plural::count(quiet.len(), "process", "processes"),
            list.join(", ")
        );
    }
    for j in &r.jobs {
        render_job(&mut out, j);
    }
    for w in &r.warnings {
        let _ = writeln!(out, "syncspy: warning: {w}");
    }
    // Text from segments and reports (command lines, frames) may hold escape sequences.
    syncspy_read::text::terminal(&out).into_owned()
}

/// A job's line (its straggler) and its ranks side by side.
fn render_job(out: &mut String, j: &syncspy_read::jobs::JobReport) {
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", j.summary());
    let score = if *j.basis() == syncspy_read::jobs::Basis::GpuIdle {
        "GPU idle*"
    } else {
        "score"
    };
    let _ = writeln!(
        out,
        "  {:>6} {:>8} {:>6} {:>12} {:>12}  top call site",
        "rank", "pid", "node", "host stalls", score
    );
    let straggler = j.straggler().map(|s| s.pid);
    for r in j.ranks() {
        let opt = |v: Option<u32>| v.map_or("?".to_string(), |v| v.to_string());
        let _ = writeln!(
            out,
            "  {:>6} {:>8} {:>6} {:>12} {:>12}  {}{}",
            opt(r.rank),
            r.pid,
            opt(r.group_rank),
            fmt_ns(r.stall_ns),
            fmt_ns(r.score_ns),
            r.top_site
                .as_ref()
                .map(|t| t.describe())
                .unwrap_or_else(|| "-".into()),
            if straggler == Some(r.pid) {
                "  <- straggler"
            } else {
                ""
            }
        );
    }
    if *j.basis() == syncspy_read::jobs::Basis::GpuIdle {
        let _ = writeln!(
            out,
            "  * GPU idle time behind the rank's own host stalls: the time its GPU sat still \
             while its host waited"
        );
    }
}

/// The command as one would type it: arguments with spaces or shell characters quoted.
pub fn shell_words(args: &[String]) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%^".contains(c);
    args.iter()
        .map(|a| {
            if !a.is_empty() && a.chars().all(plain) {
                a.clone()
            } else {
                let a = syncspy_read::text::field(a);
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(3)).collect();
        t.push_str("...");
        t
    }
}

/// Events the library dropped and records the reader lost: percentiles and call sites miss
/// them (the totals are exact).
fn render_losses(out: &mut String, p: &ProcessReport) {
    if p.dropped_events > 0 {
        let _ = writeln!(
            out,
            "  !! {} DROPPED by libsyncspy (no free ring slot, or made while recording \
             was starting): percentiles and call sites do not include them",
            plural::count(p.dropped_events, "event", "events")
        );
    }
    let missed = p.lost_records.saturating_sub(p.dropped_events);
    if missed > 0 {
        let _ = writeln!(
            out,
            "  !! {} LOST by the reader (the ring overflowed before it was read; raise \
             SYNCSPY_RING): percentiles and call sites cover {}, totals are exact",
            plural::count(missed, "record", "records"),
            plural::count(p.recorded_events, "event", "events")
        );
    }
}

fn render_process(out: &mut String, p: &ProcessReport) {
    let state = p.state.label();
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "pid {}  {}  [{state}]  wall {}  host stalls {} ({} of wall{})",
        p.pid,
        short(&p.cmdline, 60),
        fmt_ns(p.wall_ns),
        fmt_ns(p.stall_ns),
        pct(p.stall_ns, p.wall_ns),
        // Threads wait at once: their stalls add up past the wall time.
        if p.stall_ns > p.wall_ns {
            ", summed over threads"
        } else {
            ""
        }
    );
    // What makes the figures below incomplete comes before them.
    render_losses(out, p);
    render_place(out, p);
    render_kinds(out, p);
    render_sites(out, p);
    if !p.non_stall_calls.is_empty() {
        let calls: Vec<String> = p
            .non_stall_calls
            .iter()
            .map(|(api, c)| {
                if c.bytes > 0 {
                    format!("{api} x{} ({})", c.count, fmt_bytes(c.bytes))
                } else {
                    format!("{api} x{}", c.count)
                }
            })
            .collect();
        let _ = writeln!(out, "  calls that did not stall: {}", calls.join(", "));
    }
    render_gpu(out, p);
    render_overhead(out, p);
    if let Some(c) = &p.cost {
        render_cost(out, c);
    }
    render_reading_notes(out, p);
}

/// Where the process is from here (a container's, a pod's) and its rank in a job.
fn render_place(out: &mut String, p: &ProcessReport) {
    // A process in a container: where it is from here.
    let mut place = Vec::new();
    if let Some(h) = p.host_pid {
        place.push(format!("host pid {h} (pid {} in its namespace)", p.pid));
    }
    if let Some(c) = &p.container {
        place.push(format!("container {c}"));
    }
    if let Some(u) = &p.pod_uid {
        place.push(format!("pod {u}"));
    }
    if !place.is_empty() {
        let _ = writeln!(out, "  {}", place.join(", "));
    }
    if let Some(j) = &p.job {
        let rank = j.rank.map_or("?".to_string(), |r| r.to_string());
        let of = j.world_size.map(|w| format!(" of {w}")).unwrap_or_default();
        let _ = writeln!(out, "  rank {rank}{of} of job {} ({})", j.id, j.launcher);
    }
}

/// The table of the process's kinds.
fn render_kinds(out: &mut String, p: &ProcessReport) {
    let _ = writeln!(
        out,
        "  {:<16} {:>9} {:>12} {:>10} {:>10} {:>10} {:>10} {:>7}",
        "kind", "count", "total ms", "p50", "p99", "max", "bytes", "wall"
    );
    // Kinds in their numeric order, unknown names (a newer writer) after.
    let mut names: Vec<_> = p.kinds.iter().collect();
    names.sort_by_key(|(n, _)| n.order());
    for (name, k) in names {
        let (p50, p99) = if k.recorded_count == 0 && k.count > 0 {
            ("-".to_string(), "-".to_string())
        } else {
            (fmt_ns(k.p50_ns), fmt_ns(k.p99_ns))
        };
        let _ = writeln!(
            out,
            "  {:<16} {:>9} {:>12.3} {:>10} {:>10} {:>10} {:>10} {:>7}",
            name,
            k.count,
            k.total_ns as f64 / 1e6,
            p50,
            p99,
            fmt_ns(k.max_ns),
            if k.bytes == 0 {
                "-".to_string()
            } else {
                fmt_bytes(k.bytes)
            },
            pct(k.total_ns, p.wall_ns)
        );
    }
}

/// The top call sites: counts, frames, who waited, advice.
fn render_sites(out: &mut String, p: &ProcessReport) {
    if !p.sites.is_empty() {
        let _ = writeln!(out, "  top call sites:");
    }
    let top = &p.sites[..p.sites.len().min(TOP_SITES)];
    let shown = shown_frames(top);
    for (i, (s, frames)) in top.iter().zip(shown).enumerate() {
        let _ = writeln!(
            out,
            "  {:>2}. {} {}  x{}  total {}  p99 {}",
            i + 1,
            s.kind,
            s.api,
            s.count,
            fmt_ns(s.total_ns),
            fmt_ns(s.p99_ns)
        );
        if let Some(a) = &s.gpu_idle_after {
            let _ = writeln!(
                out,
                "        GPU idle after: {} over {} measured",
                fmt_ns(a.total_ns),
                a.count
            );
        }
        if s.capture_failures > 0 {
            let _ = writeln!(
                out,
                "        !! {} of these calls ran while their stream was capturing a CUDA graph: \
                 they failed (error 900) and broke the capture",
                s.capture_failures
            );
        }
        if frames.is_empty() {
            let _ = writeln!(out, "        (no stack captured)");
        }
        for f in frames {
            let _ = writeln!(out, "        at {f}");
        }
        if let Some(w) = &s.waited_by {
            let who = if w.main_thread {
                ""
            } else {
                " (a non-main thread)"
            };
            let _ = writeln!(out, "        waited for by {}{who}", w.short());
        }
        if let Some(a) = &s.advice {
            let _ = writeln!(out, "        advice: {a}");
        }
    }
    let n = p.sites.len().saturating_sub(TOP_SITES);
    if n > 0 {
        let _ = writeln!(
            out,
            "      ... {n} more {} in the JSON report",
            plural::word(n, "call site", "call sites")
        );
    }
}

/// The library's own time, and its call-site stacks.
fn render_overhead(out: &mut String, p: &ProcessReport) {
    // The library's time includes its one-time start (the segment, CUPTI's loading: tens of
    // ms), which in a short run is most of it: say so rather than let it read as a cost per
    // event.
    let events: u64 = p.kinds.values().map(|k| k.count).sum();
    let host_wait = p.host_wait_overhead_ns.unwrap_or(0).min(p.overhead_ns);
    let start_up = if events < 1000 && (p.overhead_ns - host_wait) * 20 > p.wall_ns {
        format!(
            ", mostly its one-time start-up ({} recorded)",
            plural::count(events, "event", "events")
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "  syncspy overhead: {} ({} of wall{start_up}); call sites: {} unwound, {} from cache, {} in all",
        fmt_ns(p.overhead_ns),
        pct(p.overhead_ns, p.wall_ns),
        plural::count(p.stack_captures, "stack", "stacks"),
        p.stack_cache_hits,
        fmt_ns(p.stack_ns)
    );
    if host_wait > 0 {
        let _ = writeln!(
            out,
            "    of which the host-wait machinery (queuing, looks, the watch for wakes) {} ({} of \
             wall), outside the budget (SYNCSPY_PYTHON=0 turns it off)",
            fmt_ns(host_wait),
            pct(host_wait, p.wall_ns)
        );
    }
}

/// What the reader skipped, could not keep or clamped, and the Python note.
fn render_reading_notes(out: &mut String, p: &ProcessReport) {
    if p.corrupt_records > 0 {
        let _ = writeln!(
            out,
            "  !! {} skipped (does the library match this syncspy build?)",
            plural::count(p.corrupt_records, "CORRUPT record", "CORRUPT records")
        );
    }
    if p.sites_dropped > 0 || p.modules_dropped > 0 {
        let _ = writeln!(
            out,
            "  !! call-site table full: {} not kept; module map full: {} not kept",
            plural::count(p.sites_dropped, "stack", "stacks"),
            plural::count(p.modules_dropped, "module", "modules")
        );
    }
    if p.bad_site_records > 0 {
        let _ = writeln!(
            out,
            "  !! {} named a call site outside the segment's site table: counted under no \
             site (is the segment corrupt?)",
            plural::count(p.bad_site_records, "record", "records")
        );
    }
    if p.refused_site_records > 0 {
        let _ = writeln!(
            out,
            "  !! {} of call sites beyond the first {} distinct ones: in the totals and \
             percentiles, not in the call sites",
            plural::count(p.refused_site_records, "record", "records"),
            syncspy_read::aggregate::MAX_SITE_KEYS
        );
    }
    if p.clamped_values > 0 {
        let _ = writeln!(
            out,
            "  note: {} outside 1 ns .. 1 h {} clamped in the histograms",
            plural::count(p.clamped_values, "duration", "durations"),
            plural::word(p.clamped_values, "was", "were")
        );
    }
    if let Some(n) = p.python.as_ref().and_then(|py| py.note()) {
        let _ = writeln!(out, "  note: {n}");
    }
}

/// Up to `SITE_FRAMES` of the site's frames that are the user's code
/// (`syncspy_read::symbolize::is_users_frame`); when none is, the frames outside the CUDA
/// runtime and syncspy.
pub fn user_frames(s: &Site) -> Vec<&str> {
    let mut v = all_user_frames(s);
    v.truncate(SITE_FRAMES);
    v
}

/// Every frame of the site that is the user's code (see [`user_frames`]).
pub fn all_user_frames(s: &Site) -> Vec<&str> {
    let module = |i: usize| {
        s.frame_modules
            .get(i)
            .map(String::as_str)
            .filter(|m| !m.is_empty())
    };
    let pick = |users: bool| -> Vec<&str> {
        s.frames
            .iter()
            .enumerate()
            .filter(|(i, f)| {
                if users {
                    is_users_frame(f, module(*i))
                } else {
                    !module(*i).is_some_and(is_runtime_module)
                }
            })
            .map(|(_, f)| f.as_str())
            .collect()
    };
    let v = pick(true);
    if v.is_empty() {
        pick(false)
    } else {
        v
    }
}

/// The frames to show for each of `sites`: `user_frames`, lengthened where two sites would
/// otherwise print the same, up to the first frame that tells them apart.
pub fn shown_frames(sites: &[Site]) -> Vec<Vec<&str>> {
    let all: Vec<Vec<&str>> = sites.iter().map(all_user_frames).collect();
    all.iter()
        .enumerate()
        .map(|(i, f)| {
            let mut k = SITE_FRAMES.min(f.len());
            while k < f.len()
                && all.iter().enumerate().any(|(j, g)| {
                    j != i && sites[j].kind == sites[i].kind && g.len() >= k && g[..k] == f[..k]
                })
            {
                k += 1;
            }
            f[..k].to_vec()
        })
        .collect()
}

/// What the library shed to keep within its budget, and the looks it skipped: every total
/// above stays exact, the detail (call sites, percentiles, gap causes) covers what was kept.
fn render_cost(out: &mut String, c: &syncspy_read::report::CostReport) {
    if c.shed_any() {
        let mut shed = Vec::new();
        if c.stacks_shed > 0 {
            shed.push(format!(
                "{} without a call site",
                plural::count(c.stacks_shed, "event", "events")
            ));
        }
        if c.gap_records_shed > 0 {
            shed.push(format!(
                "{} of GPU idle kept as totals only",
                plural::count(c.gap_records_shed, "gap", "gaps")
            ));
        }
        if c.records_shed > 0 {
            shed.push(format!(
                "{} kept as totals only",
                plural::count(c.records_shed, "event", "events")
            ));
        }
        let _ =
            writeln!(
            out,
            "  !! syncspy went over its budget ({}% of wall) and shed detail: {} (now shedding: \
             {}); counts and times above are exact, call sites and percentiles cover what was \
             kept (SYNCSPY_BUDGET sets the budget)",
            c.budget_pct,
            if shed.is_empty() { "none yet".to_string() } else { shed.join(", ") },
            c.shedding_now().unwrap_or_else(|| "nothing".into())
        );
    }
    if c.looks_skipped > 0 {
        let _ = writeln!(
            out,
            "  !! {} at other threads' Python frames skipped by their budget: host waits not \
             recorded, stalls not named at the line that waited for them",
            plural::count(c.looks_skipped, "look", "looks")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncspy_read::report::Stats;

    #[test]
    fn units() {
        assert_eq!(fmt_ns(850), "850 ns");
        assert_eq!(fmt_ns(12_345), "12.3 us");
        assert_eq!(fmt_ns(4_560_000), "4.56 ms");
        assert_eq!(fmt_ns(1_234_000_000), "1.234 s");
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(4096), "4.0 KiB");
        assert_eq!(fmt_bytes(3 << 30), "3.0 GiB");
        let w = |a: &[&str]| shell_words(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(w(&["python", "-u", "x.py"]), "python -u x.py");
        assert_eq!(w(&["sh", "-c", "exit 3", ""]), "sh -c 'exit 3' ''");
        assert_eq!(w(&["it's"]), r"'it'\''s'");
    }

    #[test]
    fn only_the_could_not_record_warning_replaces_the_guess_about_no_process() {
        let guess = "no instrumented process reported";
        let mut r = Report {
            command: vec!["./x".into()],
            ..Report::default()
        };
        // A warning that merely quotes the words (a folder named so) is not that warning.
        r.warnings
            .push("cannot read /srv/2 processes could not record: here: denied");
        assert!(render(&r).contains(guess));
        r.warnings
            .push(syncspy_read::warning::Warning::could_not_record(&["EMFILE".into()]).unwrap());
        let out = render(&r);
        assert!(!out.contains(guess), "{out}");
        assert!(
            out.contains("syncspy: warning: 1 process could not record: EMFILE"),
            "{out}"
        );
    }

    #[test]
    fn a_site_waited_for_by_a_python_line_says_so_apart_from_its_frames() {
        use syncspy_read::python::{PyFrame, Waiter};
        let frame = |file: &str, line, function: &str| PyFrame {
            file: file.into(),
            line,
            function: function.into(),
            skipped: 0,
        };
        let mut p = ProcessReport {
            pid: 9,
            wall_ns: 1_000_000_000,
            ..ProcessReport::default()
        };
        p.kinds.insert(
            "stream_sync".into(),
            Stats {
                count: 20,
                total_ns: 5_000_000,
                ..Stats::default()
            },
        );
        let site = |line, main| Site {
            kind: "stream_sync".into(),
            api: "cudaStreamSynchronize".into(),
            count: 10,
            total_ns: 2_500_000,
            frames: vec!["stream_executor::gpu::CudaTimer::GetElapsedDuration".into()],
            frame_modules: vec!["libxla.so".into()],
            waited_by: Some(Waiter {
                location: Some(format!("/w/jax_sync.py:{line} in <module>")),
                main_thread: main,
                python: vec![
                    frame(
                        "/usr/lib/python3/site-packages/jax/_src/api.py",
                        7,
                        "device_get",
                    ),
                    frame("/w/jax_sync.py", line, "<module>"),
                ],
            }),
            ..Site::default()
        };
        p.sites.push(site(48, true));
        p.sites.push(site(49, false));
        let r = Report {
            syncspy_report: 1,
            processes: vec![p],
            ..Report::default()
        };
        let s = render(&r);
        assert!(s.contains("        waited for by jax_sync.py:48\n"), "{s}");
        assert!(
            s.contains("        waited for by jax_sync.py:49 (a non-main thread)\n"),
            "{s}"
        );
        // The site's own frames stay the stalling thread's.
        assert!(
            s.contains("at stream_executor::gpu::CudaTimer::GetElapsedDuration"),
            "{s}"
        );
    }

    #[test]
    fn summary_shows_kinds_sites_without_runtime_frames_and_losses() {
        let mut p = ProcessReport {
            pid: 7,
            cmdline: "python train.py".into(),
            wall_ns: 2_000_000_000,
            stall_ns: 500_000_000,
            state: syncspy_read::report::ProcessState::Exited(Some(0)),
            lost_records: 12,
            dropped_events: 2,
            recorded_events: 88,
            bad_site_records: 3,
            refused_site_records: 4,
            ..ProcessReport::default()
        };
        p.kinds.insert(
            "stream_sync".into(),
            Stats {
                count: 100,
                total_ns: 500_000_000,
                p50_ns: 4_000_000,
                p99_ns: 9_000_000,
                max_ns: 10_000_000,
                recorded_count: 88,
                ..Stats::default()
            },
        );
        p.sites.push(Site {
            kind: "stream_sync".into(),
            api: "cudaStreamSynchronize".into(),
            count: 88,
            total_ns: 440_000_000,
            frames: vec![
                "hook (interpose/src/lib.rs:1)".into(),
                "cudaStreamSynchronize".into(),
                "train_step (train.cc:42)".into(),
                "main (train.cc:80)".into(),
            ],
            frame_modules: vec![
                "libsyncspy.so".into(),
                "libcudart.so.13".into(),
                "train".into(),
                "train".into(),
            ],
            ..Site::default()
        });
        let r = Report {
            syncspy_report: 1,
            command: vec!["python".into(), "train.py".into()],
            processes: vec![
                p,
                ProcessReport {
                    pid: 8,
                    cmdline: "sh -c true".into(),
                    ..ProcessReport::default()
                },
            ],
            warnings: vec!["skipped /dev/shm/syncspy-1-2: bad"].into(),
            ..Report::default()
        };
        let s = render(&r);
        assert!(s.contains("pid 7  python train.py  [exited 0]"), "{s}");
        assert!(s.contains("stream_sync"), "{s}");
        assert!(s.contains("500.000"), "{s}");
        assert!(s.contains("25.0%"), "{s}");
        assert!(s.contains("at train_step (train.cc:42)"), "{s}");
        assert!(s.contains("at main (train.cc:80)"), "{s}");
        assert!(!s.contains("hook (interpose"), "{s}");
        assert!(s.contains("2 events DROPPED"), "{s}");
        assert!(s.contains("10 records LOST"), "{s}");
        // The losses come before the figures they make incomplete.
        assert!(
            s.find("10 records LOST").unwrap() < s.find("top call sites").unwrap(),
            "{s}"
        );
        assert!(s.contains("3 records named a call site outside"), "{s}");
        assert!(
            s.contains("4 records of call sites beyond the first 1024"),
            "{s}"
        );
        assert!(
            s.contains("1 process without stalls: 8 (sh -c true)"),
            "{s}"
        );
        assert!(
            s.contains("syncspy: warning: skipped /dev/shm/syncspy-1-2"),
            "{s}"
        );
        assert!(!s.contains("GPU"), "no GPU part, no GPU line: {s}");
    }

    /// Counts of one read in the singular ("1 stalls" was the summary's English).
    #[test]
    fn counts_of_one_take_the_singular() {
        let mut p = ProcessReport {
            pid: 5,
            cmdline: "./one".into(),
            wall_ns: 1_000_000_000,
            stall_ns: 1_000,
            overhead_ns: 100_000_000,
            dropped_events: 1,
            lost_records: 2,
            recorded_events: 1,
            stack_captures: 1,
            corrupt_records: 1,
            sites_dropped: 1,
            modules_dropped: 1,
            bad_site_records: 1,
            refused_site_records: 1,
            clamped_values: 1,
            ..ProcessReport::default()
        };
        p.kinds.insert(
            "stream_sync".into(),
            Stats {
                count: 1,
                total_ns: 1_000,
                recorded_count: 1,
                ..Stats::default()
            },
        );
        for i in 0..=TOP_SITES {
            p.sites.push(Site {
                kind: "stream_sync".into(),
                api: "cudaStreamSynchronize".into(),
                count: 1,
                frames: vec![format!("f{i} (a.cc:{i})")],
                ..Site::default()
            });
        }
        p.gpu = syncspy_read::report::Gpu {
            idle: syncspy_read::report::IdleStats {
                count: 1,
                total_ns: 20_000,
                ..Default::default()
            },
            busy_fraction: Some(0.5),
            state: Some("tracing".into()),
            mode: Some("on".into()),
            min_gap_ns: 10_000,
            ..Default::default()
        };
        let quiet = ProcessReport {
            pid: 6,
            cmdline: "sh".into(),
            ..ProcessReport::default()
        };
        let r = Report {
            syncspy_report: 1,
            processes: vec![p, quiet],
            ..Report::default()
        };
        let s = render(&r);
        for want in [
            "!! 1 event DROPPED by libsyncspy",
            "!! 1 record LOST by the reader",
            "call sites cover 1 event, totals",
            "... 1 more call site in the JSON report",
            "mostly its one-time start-up (1 event recorded)",
            "call sites: 1 stack unwound, ",
            "!! 1 CORRUPT record skipped",
            "call-site table full: 1 stack not kept; module map full: 1 module not kept",
            "!! 1 record named a call site outside",
            "!! 1 record of call sites beyond the first",
            "note: 1 duration outside 1 ns .. 1 h was clamped",
            "; 1 gap of 10.0 us or more",
            "1 process without stalls: 6 (sh)",
        ] {
            assert!(s.contains(want), "no {want:?} in\n{s}");
        }
        for (n, was) in [(2, "2 durations outside 1 ns .. 1 h were clamped"), (0, "")] {
            let mut r = r.clone();
            r.processes[0].clamped_values = n;
            let s = render(&r);
            assert_eq!(s.contains("clamped"), n > 0, "{s}");
            assert!(s.contains(was), "{s}");
        }
    }

    /// The kind table's columns line up whatever the kinds' name lengths, known or not.
    #[test]
    fn the_kind_table_columns_line_up_for_names_of_every_length() {
        let mut p = ProcessReport {
            pid: 7,
            cmdline: "./train".into(),
            wall_ns: 1_000_000_000,
            ..ProcessReport::default()
        };
        let kinds = [
            ("device_sync", 1, 3_000),
            ("memcpy_pageable", 20, 32_470_000),
            ("gpu_idle", 4, 1_000_000),
            ("poll_wait", 300, 12_000_000),
            // A kind from a newer writer: an unknown name, padded the same way.
            ("tensor_sync", 2, 5_000),
        ];
        for (name, count, total_ns) in kinds {
            p.kinds.insert(
                name.into(),
                Stats {
                    count,
                    total_ns,
                    p50_ns: total_ns / count,
                    p99_ns: total_ns / count,
                    max_ns: total_ns / count,
                    recorded_count: count,
                    ..Stats::default()
                },
            );
        }
        let r = Report {
            syncspy_report: 1,
            processes: vec![p],
            ..Report::default()
        };
        let s = render(&r);
        let header = s
            .lines()
            .find(|l| l.trim_start().starts_with("kind "))
            .unwrap_or_else(|| panic!("no kind table: {s}"));
        let rows: Vec<&str> = s
            .lines()
            .filter(|l| {
                kinds
                    .iter()
                    .any(|(n, ..)| l.starts_with(&format!("  {n} ")))
            })
            .collect();
        assert_eq!(rows.len(), kinds.len(), "{s}");
        // Each word of a line with the column where it ends.
        let words = |l: &str| -> Vec<(String, usize)> {
            let mut out = Vec::new();
            let mut start = None;
            for (i, c) in l.char_indices().chain([(l.len(), ' ')]) {
                match (c == ' ', start) {
                    (false, None) => start = Some(i),
                    (true, Some(b)) => {
                        out.push((l[b..i].to_string(), i));
                        start = None;
                    }
                    _ => {}
                }
            }
            out
        };
        let end_of = |w: &str| {
            words(header)
                .into_iter()
                .find(|(t, _)| t == w)
                .map(|(_, e)| e)
                .unwrap_or_else(|| panic!("no {w} in {header}"))
        };
        let (count_end, total_end, wall_end) = (end_of("count"), end_of("ms"), end_of("wall"));
        for row in &rows {
            let w = words(row);
            let msg = format!("misaligned row:\n{header}\n{row}\nin\n{s}");
            // The name starts the row; the count and total ms columns end under their
            // headings, and so does the last (the wall share).
            assert_eq!(w[0].1 - w[0].0.len(), 2, "{msg}");
            assert_eq!(w[1].1, count_end, "{msg}");
            assert_eq!(w[2].1, total_end, "{msg}");
            assert_eq!(w[w.len() - 1].1, wall_end, "{msg}");
        }
        // In the ABI's order, the unknown name last.
        let order: Vec<&str> = rows
            .iter()
            .map(|l| l.split_whitespace().next().unwrap_or_default())
            .collect();
        assert_eq!(
            order,
            [
                "device_sync",
                "memcpy_pageable",
                "gpu_idle",
                "poll_wait",
                "tensor_sync"
            ]
        );
    }

    #[test]
    fn attach_reports_threads_and_start_up_cost_read_for_what_they_are() {
        let p = ProcessReport {
            pid: 31,
            cmdline: "python train.py".into(),
            state: "running".into(),
            wall_ns: 1_000_000_000,
            // Four threads waited at once.
            stall_ns: 3_920_000_000,
            overhead_ns: 612_000_000,
            kinds: [(
                "stream_sync".into(),
                syncspy_read::report::Stats {
                    count: 3,
                    total_ns: 3_920_000_000,
                    ..Default::default()
                },
            )]
            .into_iter()
            .collect(),
            ..ProcessReport::default()
        };
        let r = Report {
            syncspy_report: 1,
            command: vec!["python".into(), "train.py".into()],
            processes: vec![p],
            attached_pid: Some(31),
            ..Report::default()
        };
        let s = render(&r);
        assert!(
            s.starts_with("syncspy: attached to process 31 (`python train.py`) for "),
            "{s}"
        );
        assert!(s.contains("it runs on"), "{s}");
        assert!(!s.contains("exited with code"), "{s}");
        assert!(s.contains("(392.0% of wall, summed over threads)"), "{s}");
        assert!(
            s.contains("mostly its one-time start-up (3 events recorded)"),
            "{s}"
        );
    }

    #[test]
    fn the_host_wait_machinerys_share_of_the_overhead_is_said_and_not_taken_for_start_up() {
        let p = ProcessReport {
            pid: 41,
            cmdline: "python jax_loop.py".into(),
            state: "running".into(),
            wall_ns: 1_000_000_000,
            overhead_ns: 90_000_000,
            host_wait_overhead_ns: Some(70_000_000),
            kinds: [(
                "host_wait".into(),
                syncspy_read::report::Stats {
                    count: 600,
                    total_ns: 400_000_000,
                    ..Default::default()
                },
            )]
            .into_iter()
            .collect(),
            ..ProcessReport::default()
        };
        let r = Report {
            syncspy_report: 1,
            command: vec!["python".into(), "jax_loop.py".into()],
            processes: vec![p.clone()],
            ..Report::default()
        };
        let s = render(&r);
        assert!(
            s.contains(
                "of which the host-wait machinery (queuing, looks, the watch for wakes) 70.00 ms \
                 (7.0% of wall), outside the budget"
            ),
            "{s}"
        );
        // 20 ms of the rest is 2% of the wall: not the start-up's doing.
        assert!(!s.contains("one-time start-up"), "{s}");
        let older = Report {
            processes: vec![ProcessReport {
                host_wait_overhead_ns: None,
                ..p
            }],
            ..r
        };
        let s = render(&older);
        assert!(!s.contains("host-wait machinery"), "{s}");
        assert!(s.contains("one-time start-up"), "{s}");
    }

    #[test]
    fn summary_shows_the_gpu_line_and_gap_causes() {
        use syncspy_read::report::{GapCauseReport, Gpu, GpuDevice, IdleStats};
        let mut p = ProcessReport {
            pid: 9,
            cmdline: "./train".into(),
            wall_ns: 1_000_000_000,
            ..ProcessReport::default()
        };
        p.gpu = Gpu {
            idle: IdleStats {
                count: 4,
                total_ns: 6_500_000,
                p50_ns: 2_000_000,
                p99_ns: 2_000_000,
                max_ns: 2_000_000,
            },
            busy_fraction: Some(0.75),
            measured: true,
            idle_share: Some(0.25),
            state: Some("tracing".into()),
            mode: Some("on".into()),
            min_gap_ns: 10_000,
            devices: vec![GpuDevice {
                span_ns: 10_000_000,
                short_gaps: 3,
                ..GpuDevice::default()
            }],
            causes: vec![
                GapCauseReport {
                    cause: IdleCause::parse(
                        "stream_sync",
                        "cudaStreamSynchronize",
                        1,
                        Some("train.py:142 in step".into()),
                    ),
                    count: 3,
                    total_ns: 6_000_000,
                    share: 6.0 / 6.5,
                },
                GapCauseReport {
                    cause: IdleCause::HostBusyElsewhere,
                    count: 1,
                    total_ns: 500_000,
                    share: 0.5 / 6.5,
                },
            ],
            ..Gpu::default()
        };
        let r = Report {
            syncspy_report: 1,
            processes: vec![p.clone()],
            ..Report::default()
        };
        let s = render(&r);
        assert!(
            s.contains("GPU: busy 75.0% of 10.00 ms traced (on), idle 25.0%"),
            "{s}"
        );
        assert!(s.contains("4 gaps of 10.0 us or more"), "{s}");
        assert!(s.contains("3 shorter"), "{s}");
        assert!(
            s.contains(
                "92.3%  stream_sync cudaStreamSynchronize  x3  6.00 ms  at train.py:142 in step"
            ),
            "{s}"
        );
        assert!(
            s.contains("7.7%  host busy elsewhere (no CUDA stall)  x1"),
            "{s}"
        );
        p.gpu = Gpu {
            state: Some("unavailable".into()),
            ..Gpu::default()
        };
        p.kinds.insert(
            "device_sync".into(),
            Stats {
                count: 1,
                total_ns: 5,
                ..Stats::default()
            },
        );
        let r = Report {
            syncspy_report: 1,
            processes: vec![p],
            ..Report::default()
        };
        let s = render(&r);
        assert!(s.contains("GPU: not measured: no activity source"), "{s}");
    }
}
