//! The monitor's state machine: `App` is plain state, changed only by `App::update` with an
//! `Action` (a key press already mapped, or new data). Rendering reads it (`ui.rs`).

use std::cell::Cell;
use std::collections::HashSet;
use std::ffi::OsStr;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use syncspy_abi::Kind;

use crate::model::{Proc, ProcessKey, SiteRow, Snapshot, STALL_KINDS};

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

/// What the last drawing of the stack popup could show. Only drawing knows the popup's
/// size, so it records this (as ratatui's `ListState` keeps its offset) for the scroll keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackView {
    /// Frames shown at once from the current position (at least 1).
    pub page: usize,
    /// The first frame when scrolled to the end: the last frames then fill the popup.
    pub max_scroll: usize,
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
    Data(Box<Snapshot>),
}

/// What the App asks of the data source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Reset,
    Forget(ProcessKey),
}

/// The monitor's state.
#[derive(Debug)]
pub struct App {
    pub snapshot: Snapshot,
    pub focus: Pane,
    /// Selected process (pid, start ticks); follows the process when the order changes.
    pub selected: Option<ProcessKey>,
    pub kind_sel: usize,
    pub site_sel: usize,
    pub proc_sort: ProcSort,
    pub site_sort: SiteSort,
    /// Show the last N seconds (true) or everything since start / reset.
    pub recent: bool,
    pub paused: bool,
    pub filter: String,
    pub editing_filter: bool,
    /// Sites of this kind only (Enter in the histogram pane).
    pub kind_filter: Option<Kind>,
    pub help: bool,
    /// The selected site's full stack is open.
    pub detail: bool,
    /// Index of the first frame shown in the stack popup.
    pub detail_scroll: usize,
    /// Set by drawing the stack popup; `None` until it has been drawn since it opened.
    pub stack_view: Cell<Option<StackView>>,
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
            snapshot: Snapshot::default(),
            focus: Pane::Processes,
            selected: None,
            kind_sel: 0,
            site_sel: 0,
            proc_sort: ProcSort::Stall,
            site_sort: SiteSort::Total,
            recent: true,
            paused: false,
            filter: String::new(),
            editing_filter: false,
            kind_filter: None,
            help: false,
            detail: false,
            detail_scroll: 0,
            stack_view: Cell::new(None),
            dismissed: HashSet::new(),
            ascii,
            color: true,
            quit: false,
            refreshes: 0,
            commands: Vec::new(),
            was_reset: false,
        }
    }

    /// Colors on or off (`--no-color`, `NO_COLOR`).
    pub fn with_color(mut self, color: bool) -> App {
        self.color = color;
        self
    }

    /// Processes as listed: dismissed ones left out, in the chosen order.
    pub fn processes(&self) -> Vec<&Proc> {
        let mut v: Vec<&Proc> = self
            .snapshot
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
        }
        v
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
            self.detail = false;
        }
        let frames = self.selected_site().map_or(0, |s| s.frames.len());
        self.detail_scroll = self.detail_scroll.min(frames.saturating_sub(1));
    }

    fn open_detail(&mut self) {
        self.detail = self.selected_site().is_some();
        self.detail_scroll = 0;
        self.stack_view.set(None);
    }

    fn scroll(&mut self, by: Scroll) {
        if !self.detail {
            return;
        }
        let frames = self.selected_site().map_or(0, |s| s.frames.len());
        let view = self.stack_view.get().unwrap_or(StackView {
            page: 1,
            max_scroll: frames.saturating_sub(1),
        });
        let max = view.max_scroll.min(frames.saturating_sub(1));
        let at = self.detail_scroll.min(max);
        let page = view.page.max(1);
        self.detail_scroll = match by {
            Scroll::Up => at.saturating_sub(1),
            Scroll::Down => at + 1,
            Scroll::PageUp => at.saturating_sub(page),
            Scroll::PageDown => at + page,
            Scroll::Top => 0,
            Scroll::Bottom => max,
        }
        .min(max);
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
                    self.detail = false;
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
            Action::Data(s) => {
                self.refreshes += 1;
                if !self.paused {
                    // The selected site keeps its selection (and its open stack) while
                    // the ranking changes; an open stack whose site left the view closes.
                    let key = self
                        .selected_site()
                        .map(|r| (r.site_id, r.kind, r.api.clone()));
                    self.snapshot = *s;
                    if let Some((id, kind, api)) = key {
                        let at = self
                            .sites()
                            .iter()
                            .position(|r| r.key() == (id, kind, api.as_str()));
                        match at {
                            Some(i) => self.site_sel = i,
                            None => self.detail = false,
                        }
                    }
                }
            }
            Action::Up => self.move_by(-1),
            Action::Down => self.move_by(1),
            Action::NextPane | Action::PrevPane => {
                let order = [Pane::Processes, Pane::Histograms, Pane::Sites];
                let at = order.iter().position(|p| *p == self.focus).unwrap_or(0);
                let step = if matches!(action, Action::NextPane) {
                    1
                } else {
                    2
                };
                self.focus = order[(at + step) % 3];
                self.detail = false;
            }
            Action::Sort => match self.focus {
                Pane::Processes => {
                    self.proc_sort = match self.proc_sort {
                        ProcSort::Stall => ProcSort::Events,
                        ProcSort::Events => ProcSort::Pid,
                        ProcSort::Pid => ProcSort::Stall,
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
            },
            Action::ToggleWindow => {
                self.recent = !self.recent;
                self.site_sel = 0;
            }
            Action::TogglePause => self.paused = !self.paused,
            Action::Reset => {
                self.commands.push(Command::Reset);
                self.was_reset = true;
            }
            Action::StartFilter => {
                self.editing_filter = true;
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
            Action::FilterDone => self.editing_filter = false,
            Action::FilterCancel => {
                self.editing_filter = false;
                self.filter.clear();
                self.site_sel = 0;
            }
            Action::Open => match self.focus {
                // Enter opened the stack, Enter closes it.
                Pane::Sites if self.detail => self.detail = false,
                Pane::Sites => self.open_detail(),
                Pane::Histograms => {
                    let k = STALL_KINDS[self.kind_sel.min(STALL_KINDS.len() - 1)];
                    self.kind_filter = if self.kind_filter == Some(k) {
                        None
                    } else {
                        Some(k)
                    };
                    self.site_sel = 0;
                }
                Pane::Processes => self.focus = Pane::Sites,
            },
            Action::Back => {
                if self.help {
                    self.help = false;
                } else if self.detail {
                    self.detail = false;
                } else if self.kind_filter.is_some() {
                    self.kind_filter = None;
                } else {
                    self.filter.clear();
                }
            }
            Action::Scroll(by) => self.scroll(by),
            Action::Help => self.help = !self.help,
            Action::Dismiss => {
                if let Some(p) = self.current().filter(|p| p.state.ended()) {
                    let k = p.key();
                    self.dismissed.insert(k);
                    self.commands.push(Command::Forget(k));
                    self.selected = None;
                }
            }
        }
        self.clamp_selections();
    }

    /// The action a key press means in the current state, if any.
    pub fn action_for(&self, key: KeyEvent) -> Option<Action> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Some(Action::Quit);
        }
        if self.editing_filter {
            return match key.code {
                KeyCode::Enter => Some(Action::FilterDone),
                KeyCode::Esc => Some(Action::FilterCancel),
                KeyCode::Backspace => Some(Action::FilterBackspace),
                KeyCode::Char(c) => Some(Action::FilterChar(c)),
                _ => None,
            };
        }
        if self.detail && !self.help {
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
            _ => return None,
        })
    }
}

/// Whether to draw colors: not with `--no-color`, nor when `NO_COLOR` is set and not empty
/// (<https://no-color.org>).
pub fn use_color(no_color_flag: bool, no_color_env: Option<&OsStr>) -> bool {
    !no_color_flag && no_color_env.is_none_or(|v| v.is_empty())
}
