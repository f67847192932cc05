//! The monitor's state machine: `App` is plain state, changed only by `App::update` with an
//! `Action` (a key press already mapped, new data, the screen's size). Rendering reads it and
//! writes nothing back (`ui.rs`): what depends on the drawing, the stack popup's page for the
//! scroll keys, is computed again from the App and the screen's size (`App::stack_layout`).

use std::collections::HashSet;
use std::ffi::OsStr;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::Rect;
use syncspy_abi::Kind;

use crate::model::{Proc, ProcessKey, Refresh, SiteRow, STALL_KINDS};

/// The focused pane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pane {
    Processes,
    Histograms,
    Sites,
}

/// Order of the process list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcSort {
    /// Stall time per second, then total stall time.
    Stall,
    Events,
    Pid,
    /// Ranks grouped by job, the job whose straggler stands out most first, each job's
    /// ranks by stall time (the straggler on top); processes outside a job after, by stall
    /// time.
    Job,
}

/// A job's ranks among the listed processes, on host stall time since start (the measure of
/// the report's `jobs` without GPU activity).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobScore {
    pub ranks: usize,
    /// The largest stall time of a rank.
    pub max_ns: u64,
    /// The median of the other ranks' stall times (`max_ns` for a job of one rank), by the
    /// report's rule (`syncspy_read::jobs::score_rule`).
    pub others_median_ns: u64,
    /// Whether the report's rule names the rank with the largest stall time.
    pub named: bool,
    /// With collective times on every rank (the report's `collective_wait` basis): the rank
    /// the others waited for, the median of their waits, and whether that names it.
    pub collective: Option<(ProcessKey, u64, bool)>,
}

impl JobScore {
    /// The straggler score: how long the others waited for the slowest rank in collectives,
    /// or, without those, how far its stall time stands above the others' median.
    pub fn score(&self) -> u64 {
        match self.collective {
            Some((_, wait, _)) => wait,
            None => self.max_ns.saturating_sub(self.others_median_ns),
        }
    }

    /// Whether a rank is named the straggler, by the report's rules: on collective times
    /// (`syncspy_read::jobs::collective_rule`), else on stall time
    /// (`syncspy_read::jobs::score_rule`).
    pub fn straggler(&self) -> bool {
        match self.collective {
            Some((_, _, named)) => named,
            None => self.named,
        }
    }
}

/// Per job among `procs`, its [`JobScore`].
pub fn job_scores(procs: &[&Proc]) -> std::collections::HashMap<String, JobScore> {
    let mut by_job: std::collections::HashMap<String, Vec<&Proc>> = Default::default();
    for p in procs {
        if let Some(j) = &p.job {
            by_job.entry(j.job.clone()).or_default().push(p);
        }
    }
    by_job
        .into_iter()
        .map(|(job, ranks)| {
            let of = |f: fn(&crate::model::RankOf) -> Option<(u64, u64)>| -> Vec<_> {
                ranks.iter().map(|p| p.job.as_ref().and_then(f)).collect()
            };
            let chosen = syncspy_read::jobs::collective_shares(&of(|j| j.nccl), &of(|j| j.trace));
            let collective = chosen.and_then(|(_, c)| {
                let (times, traced): (Vec<u64>, Vec<u64>) = c.into_iter().unzip();
                let (s, _, wait, named) = syncspy_read::jobs::collective_rule(&times, &traced)?;
                Some((ranks[s].key(), wait, named))
            });
            let v: Vec<u64> = ranks.iter().map(|p| p.all.stall_ns).collect();
            let max_ns = v.iter().copied().max().unwrap_or(0);
            let (others_median_ns, named) = match syncspy_read::jobs::score_rule(&v) {
                Some((_, others, named)) => (others, named),
                None => (max_ns, false),
            };
            (
                job,
                JobScore {
                    ranks: v.len(),
                    max_ns,
                    others_median_ns,
                    named,
                    collective,
                },
            )
        })
        .collect()
}

/// Order of the call sites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiteSort {
    Total,
    Count,
    P99,
}

impl ProcSort {
    pub fn label(self) -> &'static str {
        match self {
            ProcSort::Stall => "stall/s",
            ProcSort::Events => "events/s",
            ProcSort::Pid => "pid",
            ProcSort::Job => "job straggler",
        }
    }
}

impl SiteSort {
    pub fn label(self) -> &'static str {
        match self {
            SiteSort::Total => "total",
            SiteSort::Count => "count",
            SiteSort::P99 => "p99",
        }
    }
}

/// A move in the stack popup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scroll {
    Up,
    Down,
    PageUp,
    PageDown,
    Top,
    Bottom,
}

/// What is on top of the panes, and so what the keys mean. One value instead of a flag per
/// overlay: typing a filter, the stack popup and help cannot be half-open together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// The panes: keys move, sort, open.
    #[default]
    Browse,
    /// Typing a site filter (`/`): keys are text.
    Filter,
    /// The selected site's full stack is open; `scroll` is the index of its first frame shown.
    Stack { scroll: usize },
    /// Help is open, over the stack when `stack` is set (Esc then returns to it at that
    /// scroll position).
    Help { stack: Option<usize> },
}

/// Everything that changes the monitor.
#[derive(Clone, Debug)]
pub enum Action {
    Quit,
    Up,
    Down,
    NextPane,
    PrevPane,
    Sort,
    ToggleWindow,
    TogglePause,
    Reset,
    /// `/`: start typing a site filter.
    StartFilter,
    FilterChar(char),
    FilterBackspace,
    /// Enter while typing: keep the filter.
    FilterDone,
    /// Esc while typing: drop the filter.
    FilterCancel,
    /// Enter: open the selected site's stack, or (histogram pane) show only that kind's sites.
    Open,
    /// Esc: close what is open.
    Back,
    /// Scroll the open stack (arrows, j/k, PgUp/PgDn, Home/End, g/G while it is open).
    Scroll(Scroll),
    Help,
    /// `d`: stop showing the selected process (ended ones only).
    Dismiss,
    /// `g`: open the GPU pane of the selected process, which keeps its GPU activity traced
    /// while open (again: close).
    GpuPane,
    Data(Box<Refresh>),
    /// The screen is now this many columns and rows. The event loop sends it before the first
    /// drawing and on every resize: the stack popup's page, which the scroll keys move by,
    /// depends on it.
    Resize(u16, u16),
}

/// What the App asks of the data source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Reset,
    Forget(ProcessKey),
    /// Keep asking for this process's GPU activity to be traced (`None`: stop).
    TraceGpu(Option<ProcessKey>),
}

/// The monitor's state.
#[derive(Debug)]
pub struct App {
    pub refresh: Refresh,
    pub focus: Pane,
    /// Selected process (pid, start ticks); follows the process when the order changes.
    pub selected: Option<ProcessKey>,
    /// The GPU pane is open (the `g` key): it shows the selected process's GPU, and the
    /// monitor keeps that process's GPU activity traced while it runs.
    pub gpu_pane: bool,
    /// The process whose GPU activity the monitor keeps traced: the one the open GPU pane
    /// shows, while it runs (kept in step by `App::update`).
    pub gpu_trace: Option<ProcessKey>,
    pub kind_sel: usize,
    pub site_sel: usize,
    pub proc_sort: ProcSort,
    pub site_sort: SiteSort,
    /// Show the last N seconds (true) or everything since start / reset.
    pub recent: bool,
    /// Incoming data is counted but not shown. A separate field, not a `Mode`: pausing
    /// freezes the data whatever overlay is open (help, a stack, a filter being typed), so a
    /// mode would need every overlay twice, or `?` would have to unpause.
    pub paused: bool,
    pub filter: String,
    /// Sites of this kind only (Enter in the histogram pane).
    pub kind_filter: Option<Kind>,
    /// What is on top of the panes; see also the accessors (`stack_scroll`, `help_open`,
    /// `editing_filter`).
    pub mode: Mode,
    /// The screen, from the last `Action::Resize`. Before the first it is 0x0: the stack
    /// popup then has no room, so the scroll keys move one frame at a time up to the last.
    pub screen: Rect,
    pub dismissed: HashSet<ProcessKey>,
    pub ascii: bool,
    /// Colors on; without them bold, underline and reverse video still mark what matters.
    pub color: bool,
    pub quit: bool,
    /// Refreshes received (including while paused).
    pub refreshes: u64,
    /// Commands for the data source, taken by the event loop.
    pub commands: Vec<Command>,
    /// Whether a reset happened (the "all" scope then means "since reset").
    pub was_reset: bool,
}

impl App {
    pub fn new(ascii: bool) -> App {
        App {
            refresh: Refresh::default(),
            focus: Pane::Processes,
            selected: None,
            gpu_pane: false,
            gpu_trace: None,
            kind_sel: 0,
            site_sel: 0,
            proc_sort: ProcSort::Stall,
            site_sort: SiteSort::Total,
            recent: true,
            paused: false,
            filter: String::new(),
            kind_filter: None,
            mode: Mode::Browse,
            screen: Rect::default(),
            dismissed: HashSet::new(),
            ascii,
            color: true,
            quit: false,
            refreshes: 0,
            commands: Vec::new(),
            was_reset: false,
        }
    }

    /// Starts with the GPU pane open (`--gpu`).
    pub fn with_gpu_pane(mut self, open: bool) -> App {
        self.gpu_pane = open;
        self
    }

    /// Colors on or off (`--no-color`, `NO_COLOR`).
    pub fn with_color(mut self, color: bool) -> App {
        self.color = color;
        self
    }

    /// The index of the first frame shown in the stack popup, if the stack is open (also
    /// under help).
    pub fn stack_scroll(&self) -> Option<usize> {
        match self.mode {
            Mode::Stack { scroll }
            | Mode::Help {
                stack: Some(scroll),
            } => Some(scroll),
            Mode::Browse | Mode::Filter | Mode::Help { stack: None } => None,
        }
    }

    pub fn help_open(&self) -> bool {
        matches!(self.mode, Mode::Help { .. })
    }

    /// Whether keys are typed into the site filter.
    pub fn editing_filter(&self) -> bool {
        self.mode == Mode::Filter
    }

    /// Opens the stack at `scroll`, or closes it (`None`), keeping help open over it.
    /// Opening leaves the filter being typed; closing keeps it.
    fn set_stack(&mut self, stack: Option<usize>) {
        self.mode = match (self.mode, stack) {
            (Mode::Help { .. }, stack) => Mode::Help { stack },
            (_, Some(scroll)) => Mode::Stack { scroll },
            (Mode::Stack { .. }, None) => Mode::Browse,
            (mode, None) => mode,
        };
    }

    fn close_stack(&mut self) {
        self.set_stack(None);
    }

    /// Processes as listed: dismissed ones left out, in the chosen order.
    pub fn processes(&self) -> Vec<&Proc> {
        let mut v: Vec<&Proc> = self
            .refresh
            .processes
            .iter()
            .filter(|p| !self.dismissed.contains(&p.key()))
            .collect();
        match self.proc_sort {
            ProcSort::Stall => v.sort_by(|a, b| {
                let r = |p: &Proc| p.stall_per_s.unwrap_or(-1.0);
                r(b).total_cmp(&r(a))
                    .then(b.all.stall_ns.cmp(&a.all.stall_ns))
                    .then(a.pid.cmp(&b.pid))
            }),
            ProcSort::Events => v.sort_by(|a, b| {
                let r = |p: &Proc| p.events_per_s.unwrap_or(-1.0);
                r(b).total_cmp(&r(a)).then(a.pid.cmp(&b.pid))
            }),
            ProcSort::Pid => v.sort_by_key(|p| (p.pid, p.start_ticks)),
            ProcSort::Job => {
                let score = job_scores(&v);
                v.sort_by(|a, b| {
                    let job = |p: &Proc| p.job.as_ref().map(|j| j.job.clone());
                    let s = |p: &Proc| job(p).and_then(|j| score.get(&j).map(JobScore::score));
                    // The rank the others waited for in collectives, if named, heads its job.
                    let named = |p: &Proc| {
                        job(p)
                            .and_then(|j| score.get(&j))
                            .and_then(|sc| sc.collective)
                            .is_some_and(|(k, _, named)| named && k == p.key())
                    };
                    // Jobs first (highest straggler score first), then the rest.
                    s(b).cmp(&s(a))
                        .then(job(a).cmp(&job(b)))
                        .then(named(b).cmp(&named(a)))
                        .then(b.all.stall_ns.cmp(&a.all.stall_ns))
                        .then(a.pid.cmp(&b.pid))
                })
            }
        }
        v
    }

    /// Selects the first process listed now. Interactively the selection stays on a process
    /// while the list re-sorts; a printed screen (`--print`) details its top row instead of
    /// the first process the monitor happened to see (an exited one, at times).
    pub fn select_top(&mut self) {
        self.selected = None;
        self.clamp_selections();
    }

    /// The selected process, or the first listed.
    pub fn current(&self) -> Option<&Proc> {
        let procs = self.processes();
        self.selected
            .and_then(|k| procs.iter().find(|p| p.key() == k).copied())
            .or_else(|| procs.first().copied())
    }

    /// Whether the recent window is what is shown (the source may not have one).
    pub fn showing_recent(&self) -> bool {
        self.recent && self.current().is_some_and(|p| p.recent.is_some())
    }

    /// The selected process's sites as listed: filtered and sorted.
    pub fn sites(&self) -> Vec<&SiteRow> {
        let Some(p) = self.current() else {
            return Vec::new();
        };
        let needle = self.filter.to_lowercase();
        let mut v: Vec<&SiteRow> = p
            .scope(self.recent)
            .sites
            .iter()
            .filter(|s| self.kind_filter.is_none_or(|k| s.kind == k))
            .filter(|s| s.matches(&needle))
            .collect();
        match self.site_sort {
            SiteSort::Total => {}
            SiteSort::Count => v.sort_by_key(|s| std::cmp::Reverse(s.count)),
            SiteSort::P99 => v.sort_by_key(|s| std::cmp::Reverse(s.p99_ns)),
        }
        v
    }

    pub fn selected_site(&self) -> Option<&SiteRow> {
        self.sites().get(self.site_sel).copied()
    }

    fn clamp_selections(&mut self) {
        let cur = self.current().map(Proc::key);
        self.selected = cur;
        let n = self.sites().len();
        self.site_sel = self.site_sel.min(n.saturating_sub(1));
        self.kind_sel = self.kind_sel.min(STALL_KINDS.len() - 1);
        if n == 0 {
            self.close_stack();
        }
        // The first frame shown is the one kept: after the screen grows, or the stack
        // shrinks, one Up moves the view at once.
        if let Some(scroll) = self.stack_scroll() {
            let max = self.stack_layout(self.screen).map_or(0, |l| l.max_scroll);
            self.set_stack(Some(scroll.min(max)));
        }
    }

    fn open_detail(&mut self) {
        self.set_stack(self.selected_site().map(|_| 0));
    }

    fn scroll(&mut self, by: Scroll) {
        let (Some(scroll), Some(layout)) = (self.stack_scroll(), self.stack_layout(self.screen))
        else {
            return;
        };
        let max = layout.max_scroll;
        let at = scroll.min(max);
        let page = layout.page(at);
        let to = match by {
            Scroll::Up => at.saturating_sub(1),
            Scroll::Down => at + 1,
            Scroll::PageUp => at.saturating_sub(page),
            Scroll::PageDown => at + page,
            Scroll::Top => 0,
            Scroll::Bottom => max,
        };
        self.set_stack(Some(to.min(max)));
    }

    fn move_by(&mut self, delta: isize) {
        match self.focus {
            Pane::Processes => {
                let keys: Vec<ProcessKey> = self.processes().iter().map(|p| p.key()).collect();
                if keys.is_empty() {
                    return;
                }
                let at = self
                    .selected
                    .and_then(|k| keys.iter().position(|x| *x == k))
                    .unwrap_or(0);
                let to = (at as isize + delta).clamp(0, keys.len() as isize - 1) as usize;
                if to != at {
                    self.selected = Some(keys[to]);
                    self.site_sel = 0;
                    self.close_stack();
                }
            }
            Pane::Histograms => {
                self.kind_sel = (self.kind_sel as isize + delta)
                    .clamp(0, STALL_KINDS.len() as isize - 1)
                    as usize;
            }
            Pane::Sites => {
                let n = self.sites().len();
                if n > 0 {
                    self.site_sel =
                        (self.site_sel as isize + delta).clamp(0, n as isize - 1) as usize;
                }
            }
        }
    }

    pub fn update(&mut self, action: Action) {
        match action {
            Action::Quit => self.quit = true,
            Action::Data(s) => self.take_refresh(*s),
            Action::Resize(w, h) => self.screen = Rect::new(0, 0, w, h),
            Action::Up => self.move_by(-1),
            Action::Down => self.move_by(1),
            Action::NextPane => self.cycle_focus(1),
            Action::PrevPane => self.cycle_focus(2),
            Action::Sort => self.next_sort(),
            Action::ToggleWindow => {
                self.recent = !self.recent;
                self.site_sel = 0;
            }
            Action::TogglePause => self.paused = !self.paused,
            Action::Reset => {
                self.commands.push(Command::Reset);
                self.was_reset = true;
            }
            // Typing changes the site list under an open stack, and help would hide what
            // is typed: both close.
            Action::StartFilter => {
                self.mode = Mode::Filter;
                self.focus = Pane::Sites;
            }
            Action::FilterChar(c) => {
                self.filter.push(c);
                self.site_sel = 0;
            }
            Action::FilterBackspace => {
                self.filter.pop();
                self.site_sel = 0;
            }
            Action::FilterDone => self.stop_filter(),
            Action::FilterCancel => {
                self.stop_filter();
                self.filter.clear();
                self.site_sel = 0;
            }
            Action::Open => match self.focus {
                // Enter opened the stack, Enter closes it.
                Pane::Sites if self.stack_scroll().is_some() => self.close_stack(),
                Pane::Sites => self.open_detail(),
                Pane::Histograms => self.toggle_kind_filter(),
                Pane::Processes => self.focus = Pane::Sites,
            },
            Action::Back => self.back(),
            Action::Scroll(by) => self.scroll(by),
            Action::Help => self.toggle_help(),
            Action::GpuPane => self.gpu_pane = !self.gpu_pane,
            Action::Dismiss => self.dismiss(),
        }
        self.clamp_selections();
        self.follow_gpu_pane();
    }

    /// New data, unless paused. The selected site keeps its selection (and its open stack)
    /// while the ranking changes; an open stack whose site left the view closes.
    fn take_refresh(&mut self, s: Refresh) {
        self.refreshes += 1;
        if self.paused {
            return;
        }
        let key = self
            .selected_site()
            .map(|r| (r.site_id, r.kind, r.api.to_string()));
        self.refresh = s;
        if let Some((id, kind, api)) = key {
            let at = self
                .sites()
                .iter()
                .position(|r| r.key() == (id, kind, api.as_str()));
            match at {
                Some(i) => self.site_sel = i,
                None => self.close_stack(),
            }
        }
    }

    /// Moves the focus `step` panes on (1: the next, 2: the previous of three); an open
    /// stack closes.
    fn cycle_focus(&mut self, step: usize) {
        let order = [Pane::Processes, Pane::Histograms, Pane::Sites];
        let at = order.iter().position(|p| *p == self.focus).unwrap_or(0);
        self.focus = order[(at + step) % 3];
        self.close_stack();
    }

    /// The focused pane's next sort order (the sites' for every pane but the processes').
    fn next_sort(&mut self) {
        match self.focus {
            Pane::Processes => {
                self.proc_sort = match self.proc_sort {
                    ProcSort::Stall => ProcSort::Events,
                    ProcSort::Events => ProcSort::Pid,
                    ProcSort::Pid => ProcSort::Job,
                    ProcSort::Job => ProcSort::Stall,
                }
            }
            _ => {
                self.site_sort = match self.site_sort {
                    SiteSort::Total => SiteSort::Count,
                    SiteSort::Count => SiteSort::P99,
                    SiteSort::P99 => SiteSort::Total,
                };
                self.site_sel = 0;
            }
        }
    }

    /// Shows only the sites of the selected histogram's kind, or all again.
    fn toggle_kind_filter(&mut self) {
        let k = STALL_KINDS[self.kind_sel.min(STALL_KINDS.len() - 1)];
        self.kind_filter = if self.kind_filter == Some(k) {
            None
        } else {
            Some(k)
        };
        self.site_sel = 0;
    }

    /// Esc: closes help, else the stack, else the kind filter, else clears the text filter.
    fn back(&mut self) {
        if self.help_open() {
            self.close_help();
        } else if self.stack_scroll().is_some() {
            self.close_stack();
        } else if self.kind_filter.is_some() {
            self.kind_filter = None;
        } else {
            self.filter.clear();
        }
    }

    /// Opens help over what is shown (an open stack comes back after it), or closes it.
    fn toggle_help(&mut self) {
        match self.mode {
            Mode::Help { .. } => self.close_help(),
            Mode::Stack { scroll } => {
                self.mode = Mode::Help {
                    stack: Some(scroll),
                }
            }
            Mode::Browse | Mode::Filter => self.mode = Mode::Help { stack: None },
        }
    }

    /// Forgets the selected process once it has ended (the source drops it too).
    fn dismiss(&mut self) {
        if let Some(p) = self.current().filter(|p| p.state.ended()) {
            let k = p.key();
            self.dismissed.insert(k);
            self.commands.push(Command::Forget(k));
            self.selected = None;
        }
    }

    /// The tracing request follows the GPU pane: on for the process it shows while that one
    /// runs, off when the pane closes, the selection moves or the process ends.
    fn follow_gpu_pane(&mut self) {
        let want = if self.gpu_pane {
            self.current().filter(|p| !p.state.ended()).map(|p| p.key())
        } else {
            None
        };
        if want != self.gpu_trace {
            self.gpu_trace = want;
            self.commands.push(Command::TraceGpu(want));
        }
    }

    /// Back to the stack that help was opened over, if any.
    fn close_help(&mut self) {
        if let Mode::Help { stack } = self.mode {
            self.mode = stack.map_or(Mode::Browse, |scroll| Mode::Stack { scroll });
        }
    }

    fn stop_filter(&mut self) {
        if self.mode == Mode::Filter {
            self.mode = Mode::Browse;
        }
    }

    /// The action a key press means in the current state, if any.
    pub fn action_for(&self, key: KeyEvent) -> Option<Action> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Some(Action::Quit);
        }
        if self.mode == Mode::Filter {
            return match key.code {
                KeyCode::Enter => Some(Action::FilterDone),
                KeyCode::Esc => Some(Action::FilterCancel),
                KeyCode::Backspace => Some(Action::FilterBackspace),
                KeyCode::Char(c) => Some(Action::FilterChar(c)),
                _ => None,
            };
        }
        if let Mode::Stack { .. } = self.mode {
            let by = match key.code {
                KeyCode::Up | KeyCode::Char('k') => Some(Scroll::Up),
                KeyCode::Down | KeyCode::Char('j') => Some(Scroll::Down),
                KeyCode::PageUp => Some(Scroll::PageUp),
                KeyCode::PageDown => Some(Scroll::PageDown),
                KeyCode::Home | KeyCode::Char('g') => Some(Scroll::Top),
                KeyCode::End | KeyCode::Char('G') => Some(Scroll::Bottom),
                _ => None,
            };
            if let Some(by) = by {
                return Some(Action::Scroll(by));
            }
        }
        Some(match key.code {
            KeyCode::Char('q') => Action::Quit,
            KeyCode::Up | KeyCode::Char('k') => Action::Up,
            KeyCode::Down | KeyCode::Char('j') => Action::Down,
            KeyCode::Tab => Action::NextPane,
            KeyCode::BackTab => Action::PrevPane,
            KeyCode::Char('s') => Action::Sort,
            KeyCode::Char('w') => Action::ToggleWindow,
            KeyCode::Char('p') | KeyCode::Char(' ') => Action::TogglePause,
            KeyCode::Char('r') => Action::Reset,
            KeyCode::Char('/') => Action::StartFilter,
            KeyCode::Enter => Action::Open,
            KeyCode::Esc => Action::Back,
            KeyCode::Char('?') | KeyCode::F(1) => Action::Help,
            KeyCode::Char('d') | KeyCode::Delete => Action::Dismiss,
            KeyCode::Char('g') => Action::GpuPane,
            _ => return None,
        })
    }
}

/// Whether to draw colors: not with `--no-color`, nor when `NO_COLOR` is set and not empty
/// (<https://no-color.org>).
pub fn use_color(no_color_flag: bool, no_color_env: Option<&OsStr>) -> bool {
    !no_color_flag && no_color_env.is_none_or(|v| v.is_empty())
}
