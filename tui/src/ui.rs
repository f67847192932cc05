//! Rendering: `impl Widget for &App` draws the whole screen from the App's state. Colors are
//! the terminal's own foreground plus a few named colors and reverse video, so the screen
//! reads on dark and light backgrounds; `--ascii` avoids every non-ASCII character. Without
//! colors (`App::color` false) bold, underline, reverse video and thick borders carry the
//! emphasis instead.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::border;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table, Widget, Wrap};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use crate::app::{App, JobScore, Pane, ProcSort};
use crate::loghist::BAR_CELLS;
use crate::model::{
    count, dur, percent, rate, stall_rate, GapCauseRow, GpuDeviceView, GpuView, KindRow, Proc,
    SiteRow, STALL_KINDS,
};
use syncspy_read::plural;
use syncspy_read::report::{IdleCause, HOST_BUSY_ELSEWHERE};

const ASCII_BORDER: border::Set = border::Set {
    top_left: "+",
    top_right: "+",
    bottom_left: "+",
    bottom_right: "+",
    vertical_left: "|",
    vertical_right: "|",
    horizontal_top: "-",
    horizontal_bottom: "-",
};

const BAR_LEVELS: [&str; 9] = [" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"];
const BAR_LEVELS_ASCII: [&str; 9] = [" ", ".", ":", "-", "=", "+", "*", "#", "@"];

fn bold() -> Style {
    Style::default().add_modifier(Modifier::BOLD)
}

fn dim() -> Style {
    Style::default().add_modifier(Modifier::DIM)
}

fn selected() -> Style {
    Style::default().add_modifier(Modifier::REVERSED)
}

/// A short kind label for narrow tables.
pub fn short_kind(k: syncspy_abi::Kind) -> &'static str {
    use syncspy_abi::Kind::*;
    match k {
        DeviceSync => "device",
        StreamSync => "stream",
        EventSync => "event",
        MemcpySync => "memcpy",
        MemcpyPageable => "pageable",
        ImplicitSync => "implicit",
        GpuIdle => "gpu_idle",
        PollWait => "poll",
        HostWait => "host_fn",
    }
}

/// One character per latency cell, heights log-scaled to the fullest cell.
pub fn bar_string(bars: &[u64; BAR_CELLS], ascii: bool) -> String {
    let levels = if ascii {
        &BAR_LEVELS_ASCII
    } else {
        &BAR_LEVELS
    };
    let max = bars.iter().copied().max().unwrap_or(0);
    if max == 0 {
        return " ".repeat(BAR_CELLS);
    }
    let top = (1.0 + max as f64).ln();
    bars.iter()
        .map(|c| {
            if *c == 0 {
                levels[0]
            } else {
                let l = (8.0 * (1.0 + *c as f64).ln() / top).ceil() as usize;
                levels[l.clamp(1, 8)]
            }
        })
        .collect()
}

impl App {
    /// Loud: red; without colors underlined, which a selected (reversed) row keeps.
    fn alarm(&self) -> Style {
        if self.color {
            Style::default().fg(Color::Red).add_modifier(Modifier::BOLD)
        } else {
            Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
        }
    }

    fn running(&self) -> Style {
        if self.color {
            Style::default().fg(Color::Green)
        } else {
            Style::default()
        }
    }

    fn block<'a>(&self, title: Line<'a>, pane: Option<Pane>) -> Block<'a> {
        let focused = pane.is_some_and(|p| p == self.focus);
        let mut b = Block::default().borders(Borders::ALL).title(title);
        if self.ascii {
            b = b.border_set(ASCII_BORDER);
        }
        if focused {
            b = b.title_style(bold());
            b = if self.color {
                b.border_style(Style::default().fg(Color::Cyan))
            } else if self.ascii {
                b.border_style(bold())
            } else {
                b.border_set(border::THICK).border_style(bold())
            };
        }
        b
    }

    fn scope_label(&self) -> String {
        if self.showing_recent() {
            format!("last {}s", self.refresh.window_secs)
        } else if self.was_reset {
            "since reset".into()
        } else {
            "since start".into()
        }
    }

    /// The period of the shown process's panes: the header's, but "its last N s" for an
    /// ended process, whose window stopped where it ended.
    fn proc_scope_label(&self) -> String {
        match self.current() {
            Some(p) if p.state.ended() && self.showing_recent() => {
                format!("its last {}s", self.refresh.window_secs)
            }
            _ => self.scope_label(),
        }
    }

    /// When the process shown has ended: that its figures are its final ones and stay (the
    /// panes' titles and the GPU line say which period each covers).
    fn ended_notice(&self) -> Option<Line<'_>> {
        let p = self.current().filter(|p| p.state.ended())?;
        Some(Line::from(vec![
            Span::styled(format!("pid {} {}", p.shown_pid(), p.state.label()), bold()),
            Span::raw(": its final figures stay until q quits or d dismisses it"),
        ]))
    }

    fn header(&self) -> Line<'_> {
        let procs = self.processes();
        let running = procs.iter().filter(|p| !p.state.ended()).count();
        // A fold from +0.0: `f64::sum` of nothing is -0.0, which would print as "-0.0".
        let ev = procs
            .iter()
            .filter_map(|p| p.events_per_s)
            .fold(0.0, |a, b| a + b);
        let stall = procs
            .iter()
            .filter_map(|p| p.stall_per_s)
            .fold(0.0, |a, b| a + b);
        let dropped: u64 = procs.iter().map(|p| p.dropped).fold(0, u64::saturating_add);
        let shedding = procs.iter().filter(|p| p.shedding.is_some()).count();
        // Alarms first, so a narrow terminal still shows them.
        let mut spans = vec![Span::styled("syncspy-top", bold())];
        if self.paused {
            spans.push(Span::styled("  PAUSED", self.alarm()));
        }
        if dropped > 0 {
            spans.push(Span::styled(
                format!(
                    "  {} {} DROPPED",
                    count(dropped),
                    plural::word(dropped, "EVENT", "EVENTS")
                ),
                self.alarm(),
            ));
        }
        if shedding > 0 {
            // Its library went over its budget (SYNCSPY_BUDGET): totals stay exact, detail
            // (sites, percentiles) covers what it kept.
            spans.push(Span::styled(
                format!(
                    "  {shedding} {} OVER BUDGET, SHEDDING DETAIL",
                    plural::word(shedding as u64, "PROC", "PROCS")
                ),
                self.alarm(),
            ));
        }
        spans.push(Span::raw(format!(
            "  {} proc ({} running)  {} ev/s  stall {}  [{}]",
            procs.len(),
            running,
            rate(Some(ev)),
            stall_rate(Some(stall), self.ascii),
            self.scope_label(),
        )));
        Line::from(spans)
    }

    fn render_processes(&self, area: Rect, buf: &mut Buffer) {
        let procs = self.processes();
        let cur = self.current().map(Proc::key);
        let header = Row::new([
            "PID", "STATE", "EV/S", "STALL/S", "GPU IDLE", "DROPPED", "COMMAND",
        ])
        .style(bold());
        // In the job order, a row per job above its ranks; `keys` says which rows are
        // processes.
        let jobs = (self.proc_sort == ProcSort::Job).then(|| crate::app::job_scores(&procs));
        let mut keys: Vec<Option<crate::model::ProcessKey>> = Vec::new();
        let mut rows: Vec<Row> = Vec::new();
        let mut last_job: Option<&str> = None;
        for p in &procs {
            let job = p.job.as_ref().map(|j| j.job.as_str());
            if let (Some(scores), Some(id)) = (&jobs, job) {
                if last_job != Some(id) {
                    let s = scores.get(id).copied().unwrap_or_default();
                    rows.push(self.job_row(&procs, p, id, s));
                    keys.push(None);
                }
            }
            last_job = job;
            keys.push(Some(p.key()));
            rows.push(self.process_row(p, Some(p.key()) == cur));
        }
        let title = Line::from(format!(
            " Processes ({}, by {}) {} ",
            procs.len(),
            self.proc_sort.label(),
            self.refresh.source
        ));
        let widths = [
            Constraint::Length(7),
            Constraint::Length(9),
            Constraint::Length(7),
            Constraint::Length(9),
            Constraint::Length(8),
            Constraint::Length(7),
            Constraint::Min(10),
        ];
        let block = self.block(title, Some(Pane::Processes));
        if rows.is_empty() {
            Paragraph::new(vec![Line::from(format!(
                "No instrumented process yet in {}. Start one with `syncspy run -- CMD` or \
                 LD_PRELOAD=libsyncspy.so CMD.",
                self.refresh.source
            ))])
            .wrap(Wrap { trim: true })
            .block(block)
            .render(area, buf);
            return;
        }
        // Keep the selected row visible.
        let visible = area.height.saturating_sub(3) as usize;
        let at = keys
            .iter()
            .position(|k| k.is_some() && *k == cur)
            .unwrap_or(0);
        let skip = (at + 1).saturating_sub(visible.max(1));
        Table::new(rows.into_iter().skip(skip), widths)
            .header(header)
            .column_spacing(1)
            .block(block)
            .render(area, buf);
    }

    /// The row above a job's ranks (`p` the first of them): its ranks and its verdict, the
    /// straggler in collectives or by stall time, or none.
    fn job_row(&self, procs: &[&Proc], p: &Proc, id: &str, s: JobScore) -> Row<'static> {
        let verdict = if let Some((k, wait, true)) = s.collective {
            let who = procs
                .iter()
                .find(|q| q.key() == k)
                .and_then(|q| q.job.as_ref())
                .map(|j| j.label())
                .unwrap_or_default();
            format!(
                "straggler {who}: the other ranks waited {} for it in collectives",
                dur(wait, self.ascii)
            )
        } else if s.straggler() {
            format!(
                "straggler {}: {} stalled, {} above the others' median",
                p.job.as_ref().map(|j| j.label()).unwrap_or_default(),
                dur(s.max_ns, self.ascii),
                dur(s.score(), self.ascii)
            )
        } else {
            "no straggler".to_string()
        };
        Row::new(vec![
            Cell::from("JOB"),
            Cell::from(plural::count(s.ranks, "rank", "ranks")),
            Cell::from(""),
            Cell::from(""),
            Cell::from(""),
            Cell::from(""),
            Cell::from(format!("{id}: {verdict}")),
        ])
        .style(bold())
    }

    /// A process's row: pid, state, rates, GPU idle share, drops, its rank and command.
    fn process_row(&self, p: &Proc, is_selected: bool) -> Row<'static> {
        let state_style = if p.state.ended() {
            dim()
        } else {
            self.running()
        };
        let dropped = if p.dropped > 0 {
            Cell::from(count(p.dropped)).style(self.alarm())
        } else {
            Cell::from("0")
        };
        let gpu = match p.gpu_idle_share {
            Some(s) => percent(s),
            None => "n/m".into(),
        };
        let row = Row::new(vec![
            Cell::from(p.shown_pid().to_string()),
            Cell::from(p.state.label()).style(state_style),
            Cell::from(rate(p.events_per_s)),
            Cell::from(stall_rate(p.stall_per_s, self.ascii)),
            Cell::from(gpu),
            dropped,
            Cell::from(match &p.job {
                Some(j) => format!("[{}] {}", j.label(), p.command),
                None => p.command.clone(),
            }),
        ]);
        if is_selected {
            row.style(selected())
        } else {
            row
        }
    }

    fn kind_rows(&self, p: &Proc, all_kinds: bool) -> Vec<KindRow> {
        let scope = p.scope(self.recent);
        STALL_KINDS
            .iter()
            .filter_map(|k| match scope.kind(*k) {
                Some(r) => Some(r.clone()),
                None if all_kinds => Some(KindRow {
                    kind: *k,
                    count: 0,
                    total_ns: 0,
                    p50_ns: 0,
                    p99_ns: 0,
                    max_ns: 0,
                    bars: None,
                }),
                None => None,
            })
            .collect()
    }

    fn render_histograms(&self, area: Rect, buf: &mut Buffer, all_kinds: bool) {
        let title = match self.current() {
            Some(p) => format!(
                " Stall histograms: pid {} [{}] ",
                p.shown_pid(),
                self.proc_scope_label()
            ),
            None => " Stall histograms ".into(),
        };
        let block = self.block(Line::from(title), Some(Pane::Histograms));
        let Some(p) = self.current() else {
            block.render(area, buf);
            return;
        };
        let rows = self.kind_rows(p, all_kinds);
        let us = if self.ascii { "us" } else { "µs" };
        let scale = format!(" 1{us}   1ms   1s");
        let header =
            Row::new(vec!["KIND", "COUNT", "TOTAL", "P50", "P99", "MAX", &scale]).style(bold());
        let sel_kind = STALL_KINDS[self.kind_sel.min(STALL_KINDS.len() - 1)];
        let mut table_rows: Vec<Row> = rows
            .iter()
            .map(|r| {
                let bars = match &r.bars {
                    Some(b) => bar_string(b, self.ascii),
                    None if r.count > 0 => "(no histogram)".into(),
                    None => String::new(),
                };
                let mut kind = r.kind.name().to_string();
                if self.kind_filter == Some(r.kind) {
                    kind.push('*');
                }
                let mut row = Row::new(vec![
                    Cell::from(kind),
                    Cell::from(if r.count == 0 {
                        "-".into()
                    } else {
                        count(r.count)
                    }),
                    Cell::from(dur(r.total_ns, self.ascii)),
                    Cell::from(dur(r.p50_ns, self.ascii)),
                    Cell::from(dur(r.p99_ns, self.ascii)),
                    Cell::from(dur(r.max_ns, self.ascii)),
                    Cell::from(bars),
                ]);
                if r.count == 0 {
                    row = row.style(dim());
                }
                if self.focus == Pane::Histograms && r.kind == sel_kind {
                    row = row.style(selected());
                }
                row
            })
            .collect();
        if table_rows.is_empty() {
            table_rows.push(Row::new(vec![Cell::from("no stalls in this period")]).style(dim()));
        }
        let widths = [
            Constraint::Length(15),
            Constraint::Length(6),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Min(BAR_CELLS as u16),
        ];
        Table::new(table_rows, widths)
            .header(header)
            .column_spacing(1)
            .block(block)
            .render(area, buf);
    }

    fn gpu_line(&self) -> Line<'_> {
        let label = Span::styled("GPU idle: ", bold());
        let shown = self.current().map(|p| p.key());
        let requested = self.gpu_trace.is_some() && self.gpu_trace == shown;
        let ended = self.current().is_some_and(|p| p.state.ended());
        let mut line = match self.current().and_then(|p| p.gpu_idle_share) {
            Some(s) if ended => Line::from(vec![
                label,
                Span::raw(format!(
                    "{} of its active time (its whole run: it has ended)",
                    percent(s)
                )),
            ]),
            Some(s) => Line::from(vec![
                label,
                Span::raw(format!(
                    "{} of its active time (the last seconds, trailing by about one)",
                    percent(s)
                )),
            ]),
            None if requested => Line::from(vec![label, Span::styled("not measured yet", dim())]),
            None => Line::from(vec![
                label,
                Span::styled(
                    "not measured (SYNCSPY_GPU_IDLE=off, no CUPTI, or no GPU work yet; g: trace it \
                     in the GPU pane)",
                    dim(),
                ),
            ]),
        };
        if let Some(what) = self.gpu_request_status() {
            line.spans.push(Span::styled(format!("  {what}"), bold()));
        }
        line
    }

    /// How the GPU pane's tracing request for the process shown stands, if one is made.
    fn gpu_request_status(&self) -> Option<String> {
        let shown = self.current().map(|p| p.key());
        let k = self.gpu_trace.filter(|k| Some(*k) == shown)?;
        Some(match &self.refresh.gpu_request {
            Some((rk, Ok(state))) if *rk == k => {
                format!("[traced on request, was {state}; g: close]")
            }
            Some((rk, Err(e))) if *rk == k => format!("[request failed: {e}; g: close]"),
            _ => "[asking for tracing; g: close]".to_string(),
        })
    }

    /// Rows the GPU pane wants, exactly the rows `render_gpu` draws: the borders (the tracing
    /// state is in the top one's title), a line per device (or the one saying none is traced
    /// yet), the gaps, the idle measured behind syncs (when some was), the causes' header and a
    /// line per cause (or the one saying none came yet); only the message where the process
    /// has no GPU part, nothing without a process.
    fn gpu_pane_height(&self) -> u16 {
        let rows = match self.current().map(|p| p.gpu.as_ref()) {
            None => 0,
            Some(None) => 1,
            Some(Some(g)) => {
                g.devices.len().max(1)
                    + 1
                    + usize::from(g.behind.is_some())
                    + 1
                    + g.causes.len().max(1)
            }
        };
        u16::try_from(2 + rows).unwrap_or(u16::MAX)
    }

    /// The GPU pane of the process shown: per device its busy share second by second, the
    /// idle gaps, and the host causes they are blamed on.
    fn render_gpu(&self, area: Rect, buf: &mut Buffer) {
        let block = self.block(self.gpu_title(), None);
        let inner = block.inner(area);
        block.render(area, buf);
        let Some(p) = self.current() else {
            return;
        };
        let Some(g) = p.gpu.as_ref() else {
            Paragraph::new(Line::styled(
                "no GPU part in this process's segment (a library older than ABI 1.2)",
                dim(),
            ))
            .render(inner, buf);
            return;
        };
        let mut lines = Vec::new();
        if g.devices.is_empty() {
            lines.push(Line::styled(
                "no device traced yet (tracing off or paused, no CUPTI, or no GPU work yet)",
                dim(),
            ));
        }
        lines.extend(g.devices.iter().map(|d| self.device_line(d)));
        lines.push(self.gaps_line(g));
        if let Some(b) = &g.behind {
            lines.push(self.behind_line(b));
        }
        lines.push(Line::styled(
            format!(
                "{:>6}  {:<40} {:>6} {:>9}  WHERE",
                "IDLE", "HOST CAUSE", "GAPS", "TOTAL"
            ),
            bold(),
        ));
        if g.causes.is_empty() {
            lines.push(Line::styled("no gap received yet", dim()));
        }
        lines.extend(g.causes.iter().map(|c| self.cause_line(c)));
        Paragraph::new(lines).render(inner, buf);
    }

    /// The GPU pane's title: the process, its tracing state, a pending request's status.
    fn gpu_title(&self) -> Line<'static> {
        let mut title = vec![Span::raw(" GPU")];
        if let Some(p) = self.current() {
            title.push(Span::raw(format!(" pid {}", p.shown_pid())));
            if let Some(g) = &p.gpu {
                title.push(Span::raw(format!(": {}", g.tracing)));
            }
        }
        if let Some(what) = self.gpu_request_status() {
            title.push(Span::styled(format!(" {what}"), bold()));
        }
        title.push(Span::raw(" "));
        Line::from(title)
    }

    /// A device's busy share since start and, second by second, over the window.
    fn device_line(&self, d: &GpuDeviceView) -> Line<'static> {
        let secs = self.refresh.window_secs;
        let mut spans = vec![
            Span::styled(format!("device {:<2}", d.device), bold()),
            Span::raw(format!(
                " busy {:>6} since start",
                d.busy_share.map_or("-".into(), percent)
            )),
        ];
        if !d.per_second.is_empty() {
            let edge = if self.ascii { "|" } else { "│" };
            spans.push(Span::raw(format!("   last {secs}s {edge}")));
            spans.push(Span::raw(crate::busy::sparkline(&d.per_second, self.ascii)));
            spans.push(Span::raw(edge));
            spans.push(Span::styled(" one cell a second, blank: not traced", dim()));
        }
        Line::from(spans)
    }

    /// The GPU idle measured behind the syncs and blocking copies (since start, whatever the
    /// tracing).
    fn behind_line(&self, b: &crate::model::Behind) -> Line<'static> {
        Line::from(vec![
            Span::styled("idle behind syncs", bold()),
            Span::raw(format!(
                ": {} at {} of {} syncs and copies",
                dur(b.total_ns, self.ascii),
                count(b.measured),
                count(b.syncs)
            )),
            Span::styled("  measured at each, since start", dim()),
        ])
    }

    /// The idle gaps: count, total, percentiles and bars, and the shorter gaps apart.
    fn gaps_line(&self, g: &GpuView) -> Line<'static> {
        let gp = &g.gaps;
        // An agent sends the gaps' percentiles, not their distribution (no bars): after a
        // reset, the count and total are since it, the percentiles still since start.
        let pct_since_start = if self.was_reset && gp.bars.is_none() {
            "since start: "
        } else {
            ""
        };
        let mut gaps = vec![
            Span::styled(
                format!("idle gaps >= {}", dur(g.min_gap_ns.max(1), self.ascii)),
                bold(),
            ),
            Span::raw(format!(
                ": {}, {}  {pct_since_start}p50 {}  p99 {}  max {}",
                count(gp.count),
                dur(gp.total_ns, self.ascii),
                dur(gp.p50_ns, self.ascii),
                dur(gp.p99_ns, self.ascii),
                dur(gp.max_ns, self.ascii)
            )),
        ];
        if let Some(b) = gp.bars.filter(|_| gp.count > 0) {
            gaps.push(Span::raw(format!("  {}", bar_string(&b, self.ascii))));
        }
        if g.short_gaps.0 > 0 {
            gaps.push(Span::styled(
                format!(
                    "  shorter: {}, {}",
                    count(g.short_gaps.0),
                    dur(g.short_gaps.1, self.ascii)
                ),
                dim(),
            ));
        }
        Line::from(gaps)
    }

    /// A host cause the gaps are blamed on: its share of the idle time, gaps, total, where.
    fn cause_line(&self, c: &GapCauseRow) -> Line<'static> {
        let what = match &c.cause {
            IdleCause::Stall(s) => format!("{} {}", s.kind, s.api),
            IdleCause::HostBusyElsewhere => HOST_BUSY_ELSEWHERE.to_string(),
        };
        Line::raw(format!(
            "{:>6}  {:<40} {:>6} {:>9}  {}",
            percent(c.share),
            what,
            count(c.count),
            dur(c.total_ns, self.ascii),
            short_location(c.cause.location().unwrap_or_default())
        ))
    }

    fn render_sites(&self, area: Rect, buf: &mut Buffer) {
        let sites = self.sites();
        let wide = area.width >= 120;
        let mut title = format!(
            " Top call sites by {} [{}]",
            self.site_sort.label(),
            self.proc_scope_label()
        );
        if let Some(k) = self.kind_filter {
            title.push_str(&format!(" kind={}", k.name()));
        }
        if !self.filter.is_empty() || self.editing_filter() {
            title.push_str(&format!(" filter=\"{}\"", self.filter));
        }
        title.push(' ');
        let block = self.block(Line::from(title), Some(Pane::Sites));
        let Some(p) = self.current() else {
            block.render(area, buf);
            return;
        };
        let scope_stall = p.scope(self.recent).stall_ns.max(1);
        let mut head = vec!["#", "SHARE", "TOTAL", "COUNT", "P99", "KIND"];
        if wide {
            head.push("API");
        }
        head.push("WHERE");
        let header = Row::new(head).style(bold());
        let visible = area.height.saturating_sub(3) as usize;
        let skip = (self.site_sel + 1).saturating_sub(visible.max(1));
        // #, SHARE, TOTAL, COUNT, P99, KIND, API (wide), then WHERE takes the rest.
        let mut fixed: Vec<u16> = vec![3, 6, 9, 6, 9, if wide { 15 } else { 8 }];
        if wide {
            fixed.push(24);
        }
        let mut widths: Vec<Constraint> = fixed.iter().map(|&w| Constraint::Length(w)).collect();
        widths.push(Constraint::Min(10));
        // WHERE's columns: the inner width less the others and a space after each.
        let taken: u16 = fixed.iter().map(|w| w + 1).sum();
        let where_w = usize::from(area.width.saturating_sub(2).saturating_sub(taken));
        let rows: Vec<Row> = sites
            .iter()
            .enumerate()
            .skip(skip)
            .map(|(i, s)| {
                let mut cells = vec![
                    Cell::from(format!("{}", i + 1)),
                    Cell::from(percent(s.total_ns as f64 / scope_stall as f64)),
                    Cell::from(dur(s.total_ns, self.ascii)),
                    Cell::from(count(s.count)),
                    Cell::from(dur(s.p99_ns, self.ascii)),
                    Cell::from(if wide {
                        s.kind.name()
                    } else {
                        short_kind(s.kind)
                    }),
                ];
                if wide {
                    cells.push(Cell::from(s.api.to_string()));
                }
                cells.push(Cell::from(where_cell(s, where_w, self.ascii)));
                let mut row = Row::new(cells);
                if self.focus == Pane::Sites && i == self.site_sel {
                    row = row.style(selected());
                }
                row
            })
            .collect();
        if rows.is_empty() {
            let msg = if p.scope(self.recent).sites.is_empty() {
                "no stalls in this period"
            } else {
                "no call site matches the filter"
            };
            Paragraph::new(Line::styled(msg, dim()))
                .block(block)
                .render(area, buf);
            return;
        }
        Table::new(rows, widths)
            .header(header)
            .column_spacing(1)
            .block(block)
            .render(area, buf);
    }

    fn footer(&self) -> Line<'_> {
        if self.editing_filter() {
            return Line::from(vec![
                Span::styled("filter sites: ", bold()),
                Span::raw(format!("{}_", self.filter)),
                Span::styled("   Enter keep  Esc clear", dim()),
            ]);
        }
        let arrows = if self.ascii { "up/dn" } else { "↑↓" };
        let keys: [(&str, &str); 12] = [
            ("q", "quit"),
            ("?", "help"),
            ("Tab", "pane"),
            (arrows, "move"),
            ("s", "sort"),
            ("w", "window"),
            ("p", "pause"),
            ("r", "reset"),
            ("/", "filter"),
            ("Enter", "stack"),
            ("d", "dismiss"),
            ("g", "GPU pane"),
        ];
        let mut spans = Vec::new();
        for (k, v) in keys {
            spans.push(Span::styled(k.to_string(), bold()));
            spans.push(Span::raw(format!(" {v}  ")));
        }
        Line::from(spans)
    }

    /// The stack popup of the selected site on a screen of `area`, if a site is selected.
    /// A function of the App and the screen only, so drawing and the scroll keys agree on
    /// the page without drawing writing anything back.
    pub fn stack_layout(&self, area: Rect) -> Option<StackLayout> {
        let s = self.selected_site()?;
        let popup = centered(area, 94, 80);
        let inner = self.block(Line::default(), None).inner(popup);
        let width = usize::from(inner.width);
        let avail = usize::from(inner.height);
        let mut header = wrap_spans(
            &[
                Span::styled(format!("{} {}", s.kind.name(), s.api), bold()),
                Span::raw(format!(
                    "  x{}  total {}  p99 {}  max {}",
                    s.count,
                    dur(s.total_ns, self.ascii),
                    dur(s.p99_ns, self.ascii),
                    dur(s.max_ns, self.ascii)
                )),
            ],
            width,
            0,
        );
        if let Some(w) = &s.waited_by {
            let at = w
                .location
                .as_deref()
                .map_or_else(|| w.short(), short_location);
            let who = if w.main_thread {
                ""
            } else {
                " (a non-main thread)"
            };
            header.extend(wrap_spans(
                &[
                    Span::styled("waited for by ", bold()),
                    Span::raw(format!("{at}{who}")),
                ],
                width,
                8,
            ));
        }
        if let Some(a) = s.advice() {
            header.extend(wrap_spans(
                &[Span::styled("advice: ", bold()), Span::raw(a)],
                width,
                8,
            ));
        }
        // The frames keep at least one row; the blank line under the header goes first.
        let header_h = header.len().min(avail.saturating_sub(1));
        let gap = usize::from(avail >= header_h + 3);
        let body_h = avail - header_h - gap;
        let mut head: Vec<Line<'static>> = header.into_iter().take(header_h).collect();
        head.extend(std::iter::repeat_n(Line::raw(""), gap));
        let frames: Vec<Vec<Line<'static>>> = s
            .frames
            .iter()
            .enumerate()
            .map(|(i, f)| wrap_spans(&[Span::raw(format!("#{i:<2} {f}"))], width, 4))
            .collect();
        let note = if frames.is_empty() {
            let msg = if s.site_id == 0 {
                "no stack was captured for these calls (SYNCSPY_STACKS=0 or SYNCSPY_STACK_MIN_NS)"
            } else {
                "symbolizing..."
            };
            wrap_spans(&[Span::styled(msg, dim())], width, 0)
        } else {
            Vec::new()
        };
        // The first frame of the last page: from there on every frame fits.
        let n = frames.len();
        let mut max_scroll = n.saturating_sub(1);
        let mut used = 0;
        for i in (0..n).rev() {
            used += frames[i].len();
            if used > body_h {
                break;
            }
            max_scroll = i;
        }
        Some(StackLayout {
            popup,
            head,
            body_h,
            frames,
            note,
            max_scroll,
        })
    }

    fn render_detail(&self, area: Rect, buf: &mut Buffer, scroll: usize) {
        let (Some(s), Some(layout)) = (self.selected_site(), self.stack_layout(area)) else {
            return;
        };
        Clear.render(layout.popup, buf);
        let title = Line::from(format!(" Stack of site {} (Esc closes) ", s.site_id));
        let mut block = self.block(title, None);
        let first = scroll.min(layout.max_scroll);
        let (end, lines) = layout.shown(first);
        let n = s.frames.len();
        if end > first && (first > 0 || end < n) {
            let arrows = if self.ascii { "up/dn" } else { "↑↓" };
            block = block.title_bottom(format!(
                " frames {}-{end} of {n} ({arrows} PgUp PgDn Home End) ",
                first + 1
            ));
        }
        Paragraph::new(lines).block(block).render(layout.popup, buf);
    }

    fn render_help(&self, area: Rect, buf: &mut Buffer) {
        let popup = centered(area, 80, 90);
        Clear.render(popup, buf);
        let rows = [
            ("Up/Down, k/j", "move in the focused pane"),
            ("Tab, Shift-Tab", "next / previous pane"),
            (
                "s",
                "sort: processes by stall/s, events/s, pid, job straggler; sites by total, count, p99",
            ),
            ("w", "window: last N seconds / since start (or reset)"),
            ("p, Space", "pause (keep showing this refresh)"),
            ("r", "reset: count from now on"),
            ("/", "filter call sites by text (Enter keeps, Esc clears)"),
            (
                "Enter",
                "sites: open the full stack; histograms: only this kind's sites",
            ),
            (
                "PgUp/PgDn, g/G",
                "in the stack: a page up / down, top / bottom (also Home/End, arrows)",
            ),
            ("Esc", "close / clear filter"),
            ("d", "dismiss an exited process"),
            (
                "g",
                "GPU pane: busy share per second, idle gaps and their host causes; keeps the \
                 shown process's GPU traced while open (again: close)",
            ),
            ("q, Ctrl-C", "quit"),
        ];
        let mut lines: Vec<Line> = rows
            .iter()
            .map(|(k, v)| {
                Line::from(vec![
                    Span::styled(format!("{k:<16}"), bold()),
                    Span::raw(*v),
                ])
            })
            .collect();
        lines.push(Line::raw(""));
        lines.push(Line::raw(
            "STALL/S: seconds the host waited per second of wall time. Counts and totals are \
             exact (library counters); percentiles come from the records this monitor read. \
             GPU IDLE: the share of its active time (from its first work to its last: not the \
             program's set-up or teardown) the GPU ran nothing, over the last seconds (from GPU \
             activity records, which trail by about a second); 'n/m' when not measured. An \
             ended process keeps its final figures: its last N seconds, and GPU IDLE over its \
             whole run.",
        ));
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(self.block(Line::from(" Help (? or Esc closes) "), None))
            .render(popup, buf);
    }
}

/// The WHERE cell of a site in `width` columns: its location (`short_location`), and for a
/// site whose calls another thread waited for, `, waited for by w.py:21` after it (the
/// summary's words). The waiter is what tells such sites apart, so when both do not fit the
/// location is cut (`…`) rather than the waiter, and on a narrow table the waiter is
/// `← w.py:21`.
pub fn where_cell(s: &SiteRow, width: usize, ascii: bool) -> String {
    let loc = short_location(&s.location);
    let Some(w) = &s.waited_by else {
        return loc;
    };
    let (arrow, dots) = if ascii { ("<-", "...") } else { ("←", "…") };
    let long = format!(", waited for by {}", w.short());
    // The location keeps at least 12 columns with the summary's words, else the arrow.
    let tail = if loc.width() + long.width() <= width
        || width.saturating_sub(long.width() + dots.width()) >= 12
    {
        long
    } else {
        format!(" {arrow} {}", w.short())
    };
    if loc.width() + tail.width() <= width {
        return loc + &tail;
    }
    let room = width.saturating_sub(tail.width() + dots.width());
    let mut cut = String::new();
    let mut used = 0;
    for c in loc.chars() {
        used += c.width().unwrap_or(0);
        if used > room {
            break;
        }
        cut.push(c);
    }
    format!("{cut}{dots}{tail}")
}

/// `symbol (/long/path/file.rs:12)` as `file.rs:12 symbol`: the line first, so narrow
/// terminals still tell sites apart; `symbol(args) (/path/libx.so)` as `symbol (libx.so)`.
pub fn short_location(loc: &str) -> String {
    // A Python line, `/path/train.py:142 in train_step`: the file's name is enough.
    if let Some((at, func)) = loc.rsplit_once(" in ") {
        if let Some((path, line)) = at.rsplit_once(':') {
            if !func.contains(' ') && !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()) {
                let file = path.rsplit('/').next().unwrap_or(path);
                return format!("{file}:{line} in {func}");
            }
        }
    }
    if let Some(open) = loc.rfind(" (") {
        if let Some(inner) = loc[open + 2..].strip_suffix(')') {
            let file = inner.rsplit('/').next().unwrap_or(inner);
            let func = &loc[..open];
            // A source line leads; a bare module (no debug info) follows the function, whose
            // name matters more, without its parameter list.
            let has_line = file
                .rsplit_once(':')
                .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            return if has_line {
                format!("{file} {func}")
            } else {
                format!("{} ({file})", compact_symbol(func))
            };
        }
    }
    loc.to_string()
}

/// A C++ symbol without its parameter list and what follows it:
/// `at::native::copy_kernel_cuda(at::TensorIterator&, bool)` becomes
/// `at::native::copy_kernel_cuda`. The list is the first `(` outside template brackets that
/// is not part of `(anonymous namespace)` or an operator's name (`operator()`, `operator<`).
pub fn compact_symbol(sym: &str) -> &str {
    const ANON: &[u8] = b"(anonymous namespace)";
    const OPERATOR: &[u8] = b"operator";
    let b = sym.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let (mut i, mut depth) = (0, 0usize);
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(ANON) {
            i += ANON.len();
            continue;
        }
        if rest.starts_with(OPERATOR) && (i == 0 || !ident(b[i - 1])) {
            i += OPERATOR.len();
            if b[i..].starts_with(b"()") {
                i += 2;
            } else {
                while i < b.len() && b"<>=!+-*/%^&|~[],".contains(&b[i]) {
                    i += 1;
                }
            }
            continue;
        }
        match b[i] {
            b'<' => depth += 1,
            b'>' => depth = depth.saturating_sub(1),
            b'(' if depth == 0 => {
                // `i` is at an ASCII byte, so a char boundary.
                let head = sym[..i].trim_end();
                return if head.is_empty() { sym } else { head };
            }
            _ => {}
        }
        i += 1;
    }
    sym
}

/// Cuts `spans` into rows of at most `width` columns, rows after the first indented by
/// `indent` spaces. Cuts anywhere, not at spaces: symbols and paths have few of them. Always
/// at least one row, so every frame takes room.
fn wrap_spans(spans: &[Span<'_>], width: usize, indent: usize) -> Vec<Line<'static>> {
    let indent = if indent < width { indent } else { 0 };
    let mut rows = Vec::new();
    let mut row: Vec<Span<'static>> = Vec::new();
    let mut used = 0;
    let mut row_start = 0;
    for span in spans {
        let mut piece = String::new();
        for g in span.styled_graphemes(Style::default()) {
            let w = Span::raw(g.symbol).width();
            // Cut only a row that holds something, so a grapheme wider than `width` moves on.
            if width > 0 && used + w > width && used > row_start {
                row.push(Span::styled(std::mem::take(&mut piece), span.style));
                rows.push(Line::from(std::mem::take(&mut row)));
                row.push(Span::raw(" ".repeat(indent)));
                used = indent;
                row_start = indent;
            }
            piece.push_str(g.symbol);
            used += w;
        }
        row.push(Span::styled(piece, span.style));
    }
    rows.push(Line::from(row));
    rows
}

/// Where the stack popup's rows go on one screen: `App::stack_layout`.
#[derive(Debug)]
pub struct StackLayout {
    pub popup: Rect,
    /// The site's header rows that fit, then a blank row when there is room for it.
    head: Vec<Line<'static>>,
    /// Rows left for the frames.
    body_h: usize,
    /// Each frame cut to the popup's width.
    frames: Vec<Vec<Line<'static>>>,
    /// What is shown instead of frames when there are none.
    note: Vec<Line<'static>>,
    /// The first frame when scrolled to the end: the last frames then fill the popup.
    pub max_scroll: usize,
}

impl StackLayout {
    /// The popup's rows when it starts at frame `first`, and the end of the frames shown
    /// (`first..end`).
    fn shown(&self, first: usize) -> (usize, Vec<Line<'static>>) {
        let mut lines = self.head.clone();
        if self.frames.is_empty() {
            lines.extend(self.note.iter().take(self.body_h).cloned());
            return (first, lines);
        }
        let first = first.min(self.max_scroll);
        // Frames from `first` while they fit; the rows left show the start of the next one,
        // which counts as shown (and as a page's worth) only when it is the first.
        let mut end = first;
        let mut used = 0;
        for r in &self.frames[first..] {
            let room = self.body_h - used;
            if room == 0 {
                break;
            }
            let fits = r.len() <= room;
            lines.extend(r.iter().take(room).cloned());
            used += r.len().min(room);
            if fits || end == first {
                end += 1;
            }
            if !fits {
                break;
            }
        }
        (end, lines)
    }

    /// How many frames PgUp/PgDn move from `first`: those shown from there (at least 1).
    pub fn page(&self, first: usize) -> usize {
        let first = first.min(self.max_scroll);
        (self.shown(first).0 - first).max(1)
    }
}

fn centered(area: Rect, pct_x: u16, pct_y: u16) -> Rect {
    let w = area.width * pct_x / 100;
    let h = area.height * pct_y / 100;
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

impl Widget for &App {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let procs_now = self.processes();
        // In the job order a job's row comes above its ranks: room for those rows too.
        let job_rows = if self.proc_sort == crate::app::ProcSort::Job {
            let jobs: std::collections::HashSet<&str> = procs_now
                .iter()
                .filter_map(|p| p.job.as_ref().map(|j| j.job.as_str()))
                .collect();
            jobs.len()
        } else {
            0
        };
        let nprocs = (procs_now.len() + job_rows) as u16;
        let all_kinds = area.height >= 30;
        let nkinds = match self.current() {
            Some(p) => self.kind_rows(p, all_kinds).len().max(1) as u16,
            None => 1,
        };
        let problem = self.refresh.problems.last();
        let notice = self.ended_notice();
        let notes = u16::from(problem.is_some()) + u16::from(notice.is_some());
        let proc_h = (nprocs.max(1) + 3).min(if area.height >= 30 { 10 } else { 6 });
        // The GPU pane, when open, takes the GPU line's place and as many rows as it needs,
        // leaving the sites at least four.
        let gpu_h = if self.gpu_pane {
            let left = area
                .height
                .saturating_sub(1 + proc_h + nkinds + 3 + 4 + 1 + notes);
            self.gpu_pane_height().min(left).max(1)
        } else {
            1
        };
        let [head, procs, hist, gpu, sites, prob, foot] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Length(proc_h),
            Constraint::Length(nkinds + 3),
            Constraint::Length(gpu_h),
            Constraint::Min(4),
            Constraint::Length(notes),
            Constraint::Length(1),
        ])
        .areas(area);
        let [notice_row, prob] = Layout::vertical([
            Constraint::Length(notes - u16::from(problem.is_some())),
            Constraint::Min(0),
        ])
        .areas(prob);
        Paragraph::new(self.header()).render(head, buf);
        self.render_processes(procs, buf);
        self.render_histograms(hist, buf, all_kinds);
        if self.gpu_pane && gpu.height >= 3 {
            self.render_gpu(gpu, buf);
        } else {
            Paragraph::new(self.gpu_line()).render(gpu, buf);
        }
        self.render_sites(sites, buf);
        if let Some(n) = notice {
            Paragraph::new(n).render(notice_row, buf);
        }
        if let Some(p) = problem {
            let more = self.refresh.problems.len() - 1;
            let text = if more > 0 {
                format!("! {p} (+{more} more)")
            } else {
                format!("! {p}")
            };
            Paragraph::new(Line::styled(text, self.alarm())).render(prob, buf);
        }
        Paragraph::new(self.footer()).render(foot, buf);
        if let Some(scroll) = self.stack_scroll() {
            self.render_detail(area, buf, scroll);
        }
        if self.help_open() {
            self.render_help(area, buf);
        }
    }
}

/// The screen as plain text, `width` x `height` cells, one line per row with trailing spaces
/// trimmed: what `syncspy-top --print` writes.
pub fn screen_text(app: &App, width: u16, height: u16) -> String {
    let area = Rect::new(0, 0, width, height);
    let mut buf = Buffer::empty(area);
    app.render(area, &mut buf);
    let mut out = String::new();
    for y in 0..height {
        let mut line = String::new();
        // A double-width character covers the next cell, which holds a filler: skip it.
        let mut covered = 0;
        for x in 0..width {
            let sym = buf[(x, y)].symbol();
            if covered > 0 {
                covered -= 1;
                continue;
            }
            line.push_str(sym);
            covered = sym.width().saturating_sub(1);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
