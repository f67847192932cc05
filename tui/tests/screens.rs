//! Whole screens rendered into ratatui's TestBackend from fixed data, and the App state
//! machine driven by Actions: the text a user reads (names, numbers, order).

mod common;
use common::screen;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::{Color, Modifier};
use ratatui::Terminal;
use syncspy_abi::Kind;
use syncspy_read::report::IdleCause;
use syncspy_tui::app::{Action, App, Command, Pane, SiteSort};
use syncspy_tui::model::{
    Behind, GapCauseRow, GapStats, GpuDeviceView, GpuView, KindRow, Proc, Refresh, Scope, SiteRow,
    State,
};

fn bars(cells: &[(usize, u64)]) -> Option<[u64; 15]> {
    let mut b = [0u64; 15];
    for (i, c) in cells {
        b[*i] = *c;
    }
    Some(b)
}

fn site(id: u32, kind: Kind, api: &str, count: u64, total_ns: u64, loc: &str) -> SiteRow {
    SiteRow {
        site_id: id,
        kind,
        api: api.into(),
        count,
        total_ns,
        p99_ns: total_ns / count.max(1) + 1000,
        max_ns: total_ns / count.max(1) + 2000,
        location: loc.into(),
        frames: vec![
            loc.into(),
            "train_step (/src/train.py.so:10)".into(),
            "main (/src/main.c:3)".into(),
        ],
        waited_by: None,
    }
}

fn trainer() -> Proc {
    let all = Scope {
        kinds: vec![
            KindRow {
                kind: Kind::StreamSync,
                count: 61,
                total_ns: 79_738_000,
                p50_ns: 1_330_000,
                p99_ns: 1_350_000,
                max_ns: 1_350_000,
                bars: bars(&[(7, 61)]),
            },
            KindRow {
                kind: Kind::ImplicitSync,
                count: 2,
                total_ns: 6_252_000,
                p50_ns: 890_900,
                p99_ns: 5_360_000,
                max_ns: 5_360_000,
                bars: bars(&[(6, 1), (8, 1)]),
            },
        ],
        sites: vec![
            site(
                3,
                Kind::StreamSync,
                "cudaStreamSynchronize",
                61,
                79_738_000,
                "loss_item (/src/train.cc:42)",
            ),
            site(
                5,
                Kind::ImplicitSync,
                "cudaHostAlloc",
                1,
                5_360_000,
                "pin_buffer (/src/data.cc:7)",
            ),
        ],
        stall_ns: 85_990_000,
    };
    let recent = Scope {
        kinds: vec![KindRow {
            kind: Kind::StreamSync,
            count: 9,
            total_ns: 12_000_000,
            p50_ns: 1_300_000,
            p99_ns: 1_400_000,
            max_ns: 1_400_000,
            bars: bars(&[(7, 9)]),
        }],
        sites: vec![site(
            3,
            Kind::StreamSync,
            "cudaStreamSynchronize",
            9,
            12_000_000,
            "loss_item (/src/train.cc:42)",
        )],
        stall_ns: 12_000_000,
    };
    Proc {
        pid: 614,
        host_pid: None,
        start_ticks: 100,
        command: "python3 train.py --epochs 1".into(),
        state: State::Running,
        events_per_s: Some(14_200.0),
        stall_per_s: Some(0.188),
        gpu_idle_share: None,
        dropped: 0,
        lost: 0,
        shedding: None,
        wall_ns: 465_200_000,
        all,
        recent: Some(recent),
        job: None,
        gpu: None,
    }
}

fn loader() -> Proc {
    Proc {
        pid: 700,
        host_pid: None,
        start_ticks: 5,
        command: "./loader --fast".into(),
        state: State::Exited(0),
        events_per_s: None,
        stall_per_s: None,
        gpu_idle_share: None,
        dropped: 1234,
        lost: 10,
        shedding: None,
        wall_ns: 1_000_000,
        all: Scope {
            kinds: vec![KindRow {
                kind: Kind::MemcpyPageable,
                count: 5,
                total_ns: 5_000,
                p50_ns: 1_000,
                p99_ns: 1_000,
                max_ns: 1_000,
                bars: bars(&[(1, 5)]),
            }],
            sites: vec![site(
                1,
                Kind::MemcpyPageable,
                "cudaMemcpyAsync",
                5,
                5_000,
                "copy_in (/src/loader.c:9)",
            )],
            stall_ns: 5_000,
        },
        recent: Some(Scope::default()),
        job: None,
        gpu: None,
    }
}

fn refresh() -> Refresh {
    Refresh {
        source: "/dev/shm".into(),
        processes: vec![loader(), trainer()],
        problems: vec![],
        window_secs: 10,
        ..Refresh::default()
    }
}

fn app_with(s: Refresh) -> App {
    let mut app = App::new(false);
    app.update(Action::Data(Box::new(s)));
    app
}

#[test]
fn a_printed_screen_details_the_top_row_not_the_first_process_seen() {
    // The monitor saw the exited loader first; the running trainer now sorts above it.
    let mut app = app_with(Refresh {
        processes: vec![loader()],
        ..refresh()
    });
    app.update(Action::Data(Box::new(refresh())));
    assert_eq!(app.processes()[0].pid, 614);
    // Interactively the selection stays where it was while the list re-sorts...
    assert_eq!(app.current().unwrap().pid, 700);
    // ...a printed screen details its top row.
    app.select_top();
    assert_eq!(app.current().unwrap().pid, 614);
}

#[test]
fn print_text_is_the_screen_without_trailing_spaces() {
    let app = app_with(refresh());
    let text = syncspy_tui::ui::screen_text(&app, 100, 30);
    let drawn = screen(&app, 100, 30);
    assert_eq!(text.lines().count(), 30);
    for (t, d) in text.lines().zip(drawn.lines()) {
        assert_eq!(t, d.trim_end());
    }
    assert!(text.contains("python3 train.py"), "{text}");
}

fn line_with<'a>(screen: &'a str, needle: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in\n{screen}"))
}

#[test]
fn a_process_over_its_budget_is_an_alarm_in_the_header() {
    let app = app_with(refresh());
    assert!(!screen(&app, 120, 30).contains("OVER BUDGET"));
    let mut t = trainer();
    t.shedding = Some("stacks".into());
    let app = app_with(Refresh {
        processes: vec![loader(), t],
        ..refresh()
    });
    let s = screen(&app, 120, 30);
    assert!(
        line_with(&s, "syncspy-top").contains("1 PROC OVER BUDGET, SHEDDING DETAIL"),
        "{s}"
    );
}

#[test]
fn one_dropped_event_is_one_event() {
    let mut one = loader();
    one.dropped = 1;
    let app = app_with(Refresh {
        processes: vec![one, trainer()],
        ..refresh()
    });
    let s = screen(&app, 100, 30);
    assert!(s.contains("  1 EVENT DROPPED"), "{s}");
    assert!(!s.contains("1 EVENTS"), "{s}");
}

#[test]
fn the_80x24_screen_shows_processes_kinds_and_sites() {
    let app = app_with(refresh());
    let s = screen(&app, 80, 24);
    // The stalling process first (by stall/s), with its rate figures.
    let first = s.find("614").unwrap();
    let second = s.find("700").unwrap();
    assert!(first < second, "{s}");
    let row = line_with(&s, "python3 train.py");
    assert!(row.contains("running") && row.contains("14.2k"), "{row}");
    assert!(row.contains("188ms/s"), "{row}");
    assert!(row.contains("n/m"), "{row}");
    // Dropped events are loud.
    assert!(line_with(&s, "./loader").contains("1234"), "{s}");
    assert!(line_with(&s, "exited 0").contains("700"));
    assert!(s.contains("1234 EVENTS DROPPED"), "{s}");
    // The selected (first) process's recent window by default.
    assert!(s.contains("Stall histograms: pid 614 [last 10s]"), "{s}");
    let k = line_with(&s, "stream_sync");
    assert!(
        k.contains("12.0 ms") && k.contains("1.30 ms") && k.contains("1.40 ms"),
        "{k}"
    );
    assert!(k.contains('█'), "{k}");
    assert!(s.contains("GPU idle: not measured"), "{s}");
    let top = line_with(&s, "train.cc:42");
    assert!(top.contains("100.0%") && top.contains("stream"), "{top}");
    assert!(s.contains("q quit"), "{s}");
}

#[test]
fn since_start_shows_exact_totals_and_every_site_by_total() {
    let mut app = app_with(refresh());
    app.update(Action::ToggleWindow);
    let s = screen(&app, 80, 24);
    assert!(s.contains("[since start]"), "{s}");
    let k = line_with(&s, "stream_sync");
    assert!(
        k.contains("61") && k.contains("79.7 ms") && k.contains("1.35 ms"),
        "{k}"
    );
    let i = line_with(&s, "implicit_sync");
    assert!(i.contains("5.36 ms"), "{i}");
    let a = s.find("train.cc:42").unwrap();
    let b = s.find("data.cc:7").unwrap();
    assert!(a < b, "sites by total: {s}");
    assert!(line_with(&s, "train.cc:42").contains("92.7%"), "{s}");
}

#[test]
fn wide_screen_shows_all_kinds_and_apis() {
    let app = app_with(refresh());
    let s = screen(&app, 160, 40);
    for k in [
        "stream_sync",
        "device_sync",
        "event_sync",
        "memcpy_sync",
        "memcpy_pageable",
        "implicit_sync",
    ] {
        assert!(s.contains(k), "{k} in\n{s}");
    }
    assert!(
        line_with(&s, "train.cc:42").contains("cudaStreamSynchronize"),
        "{s}"
    );
}

#[test]
fn ascii_mode_uses_only_ascii() {
    let mut app = app_with(refresh());
    app.ascii = true;
    app.update(Action::ToggleWindow);
    let s = screen(&app, 80, 24);
    assert!(s.is_ascii(), "{s}");
    assert!(s.contains("+ Processes"), "{s}");
    assert!(
        line_with(&s, "implicit_sync").contains("891 us") || s.contains("us"),
        "{s}"
    );
}

#[test]
fn tiny_and_empty_screens_do_not_panic() {
    let app = App::new(false);
    let s = screen(&app, 80, 24);
    assert!(s.contains("No instrumented process yet"), "{s}");
    // Rates of no process are zero, not "-0.0" (the sum of no f64 is -0.0).
    assert!(
        line_with(&s, "proc (0 running)").contains(" 0.0 ev/s"),
        "{s}"
    );
    assert!(!s.contains("-0"), "{s}");
    let app = app_with(refresh());
    for (w, h) in [(1, 1), (10, 5), (40, 10), (80, 8), (300, 100)] {
        screen(&app, w, h);
    }
    let mut app = app_with(refresh());
    app.update(Action::Help);
    screen(&app, 20, 6);
}

#[test]
fn enter_opens_the_full_stack_and_esc_closes_it() {
    let mut app = app_with(refresh());
    app.update(Action::NextPane);
    app.update(Action::NextPane);
    assert_eq!(app.focus, Pane::Sites);
    app.update(Action::Open);
    assert!(app.stack_scroll().is_some());
    let s = screen(&app, 80, 24);
    assert!(s.contains("Stack of site 3"), "{s}");
    assert!(s.contains("#1  train_step"), "{s}");
    assert!(s.contains("#2  main (/src/main.c:3)"), "{s}");
    app.update(Action::Back);
    assert_eq!(app.stack_scroll(), None);
}

#[test]
fn help_lists_the_keys() {
    let mut app = app_with(refresh());
    app.update(app.action_for(key(KeyCode::Char('?'))).unwrap());
    let s = screen(&app, 100, 30);
    for k in ["Tab", "sort", "window", "pause", "reset", "filter", "quit"] {
        assert!(s.contains(k), "{k}: {s}");
    }
}

fn key(c: KeyCode) -> KeyEvent {
    KeyEvent::new(c, KeyModifiers::NONE)
}

#[test]
fn keys_map_to_actions_and_filter_mode_takes_text() {
    let mut app = app_with(refresh());
    assert!(matches!(
        app.action_for(key(KeyCode::Char('q'))),
        Some(Action::Quit)
    ));
    assert!(matches!(
        app.action_for(key(KeyCode::Char('j'))),
        Some(Action::Down)
    ));
    assert!(matches!(app.action_for(key(KeyCode::Up)), Some(Action::Up)));
    assert!(matches!(
        app.action_for(key(KeyCode::Tab)),
        Some(Action::NextPane)
    ));
    assert!(matches!(
        app.action_for(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
        Some(Action::Quit)
    ));
    app.update(Action::StartFilter);
    // While typing, `q` is text.
    assert!(matches!(
        app.action_for(key(KeyCode::Char('q'))),
        Some(Action::FilterChar('q'))
    ));
    for c in "data".chars() {
        app.update(Action::FilterChar(c));
    }
    app.update(Action::FilterDone);
    let names: Vec<_> = app.sites().iter().map(|s| s.location.clone()).collect();
    app.update(Action::ToggleWindow);
    let all: Vec<_> = app.sites().iter().map(|s| s.location.clone()).collect();
    assert!(names.is_empty(), "recent has no data.cc site: {names:?}");
    assert_eq!(all, vec!["pin_buffer (/src/data.cc:7)"]);
    let s = screen(&app, 80, 24);
    assert!(s.contains("filter=\"data\""), "{s}");
    app.update(Action::Back);
    assert_eq!(app.sites().len(), 2);
}

#[test]
fn selection_sort_pause_reset_and_dismiss() {
    let mut app = app_with(refresh());
    assert_eq!(app.current().unwrap().pid, 614);
    app.update(Action::Down);
    assert_eq!(app.current().unwrap().pid, 700);
    // The selection follows the process when the order changes.
    app.update(Action::Sort); // events/s
    app.update(Action::Sort); // pid
    assert_eq!(app.processes()[0].pid, 614);
    assert_eq!(app.current().unwrap().pid, 700);
    // Sites sort in the sites pane.
    app.update(Action::Up);
    app.update(Action::PrevPane);
    assert_eq!(app.focus, Pane::Sites);
    app.update(Action::ToggleWindow);
    app.update(Action::Sort);
    assert_eq!(app.site_sort, SiteSort::Count);
    app.update(Action::Sort);
    assert_eq!(app.site_sort, SiteSort::P99);
    assert_eq!(app.sites()[0].location, "pin_buffer (/src/data.cc:7)");
    // Pause keeps the screen; data keeps arriving.
    app.update(Action::TogglePause);
    let mut empty = refresh();
    empty.processes.clear();
    app.update(Action::Data(Box::new(empty.clone())));
    assert_eq!(app.processes().len(), 2);
    assert!(screen(&app, 80, 24).contains("PAUSED"));
    app.update(Action::TogglePause);
    app.update(Action::Data(Box::new(refresh())));
    // Reset asks the source.
    app.update(Action::Reset);
    assert_eq!(app.commands, vec![Command::Reset]);
    app.commands.clear();
    // Dismiss only ended processes.
    app.focus = Pane::Processes;
    app.selected = Some(proc_key(614, 100));
    app.update(Action::Dismiss);
    assert_eq!(app.processes().len(), 2);
    app.selected = Some(proc_key(700, 5));
    app.update(Action::Dismiss);
    assert_eq!(app.commands, vec![Command::Forget(proc_key(700, 5))]);
    let pids: Vec<u32> = app.processes().iter().map(|p| p.pid).collect();
    assert_eq!(pids, vec![614]);
    assert!(!screen(&app, 80, 24).contains("./loader"));
    app.update(Action::Quit);
    assert!(app.quit);
}

#[test]
fn histogram_pane_enter_filters_sites_by_kind() {
    let mut app = app_with(refresh());
    app.update(Action::ToggleWindow);
    app.update(Action::NextPane);
    assert_eq!(app.focus, Pane::Histograms);
    // stream_sync is first; implicit_sync is the last of the six.
    for _ in 0..5 {
        app.update(Action::Down);
    }
    app.update(Action::Open);
    assert_eq!(app.kind_filter, Some(Kind::ImplicitSync));
    let locs: Vec<_> = app.sites().iter().map(|s| s.site_id).collect();
    assert_eq!(locs, vec![5]);
    assert!(screen(&app, 80, 24).contains("kind=implicit_sync"));
}

#[test]
fn problems_are_shown_not_fatal() {
    let mut s = refresh();
    s.problems
        .push("skipped /dev/shm/syncspy-13-14: not a syncspy segment".into());
    let app = app_with(s);
    let out = screen(&app, 80, 24);
    assert!(out.contains("! skipped /dev/shm/syncspy-13-14"), "{out}");
    assert!(out.contains("python3 train.py"), "{out}");
}

fn buffer(app: &App, w: u16, h: u16) -> Buffer {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| f.render_widget(app, f.area())).unwrap();
    t.backend().buffer().clone()
}

/// The cells of the row that holds `needle`, from its first character on.
fn cells_of<'a>(buf: &'a Buffer, needle: &str) -> Vec<&'a ratatui::buffer::Cell> {
    let w = buf.area.width as usize;
    for row in buf.content().chunks(w) {
        let text: String = row.iter().map(|c| c.symbol()).collect();
        if let Some(at) = text.find(needle) {
            // Columns, not bytes: count the characters before the match.
            let col = text[..at].chars().count();
            return row[col..col + needle.chars().count()].iter().collect();
        }
    }
    panic!("no row with {needle:?}");
}

#[test]
fn no_color_draws_no_color_but_keeps_emphasis() {
    // Colored, the screen has colors: the check below can fail.
    let colored = buffer(&app_with(refresh()), 80, 24);
    assert!(
        colored.content().iter().any(|c| c.fg != Color::Reset),
        "the colored screen has no color"
    );
    let mut app = app_with(refresh()).with_color(false);
    assert!(!app.color);
    let mut screens = vec![buffer(&app, 80, 24), buffer(&app, 160, 40)];
    app.update(Action::NextPane);
    app.update(Action::NextPane);
    app.update(Action::Open);
    screens.push(buffer(&app, 100, 30));
    app.update(Action::Help);
    screens.push(buffer(&app, 100, 30));
    let mut problem = refresh();
    problem.problems.push("skipped a segment".into());
    screens.push(buffer(&app_with(problem).with_color(false), 80, 24));
    for buf in &screens {
        for c in buf.content() {
            assert_eq!((c.fg, c.bg), (Color::Reset, Color::Reset), "{c:?}");
            assert_eq!(c.underline_color, Color::Reset, "{c:?}");
        }
    }
    let buf = &screens[0];
    // The selected process stands out by reverse video.
    for c in cells_of(buf, "python3 train.py") {
        assert!(c.modifier.contains(Modifier::REVERSED), "{c:?}");
    }
    for c in cells_of(buf, "./loader") {
        assert!(!c.modifier.contains(Modifier::REVERSED), "{c:?}");
    }
    // Dropped events are loud: bold and underlined, unlike the text around them.
    for c in cells_of(buf, "EVENTS DROPPED") {
        assert!(
            c.modifier.contains(Modifier::BOLD | Modifier::UNDERLINED),
            "{c:?}"
        );
    }
    for c in cells_of(buf, "proc (") {
        assert!(c.modifier.is_empty(), "{c:?}");
    }
    // The focused pane has a thick border instead of a cyan one.
    let text: String = buf.content().iter().map(|c| c.symbol()).collect();
    assert!(text.contains("┏ Processes"), "{text}");
    assert!(text.contains("┌ Stall histograms"), "{text}");
}

#[test]
fn no_color_comes_from_the_flag_or_a_non_empty_no_color() {
    use std::ffi::OsStr;
    use syncspy_tui::app::use_color;
    assert!(use_color(false, None));
    assert!(use_color(false, Some(OsStr::new(""))));
    assert!(!use_color(false, Some(OsStr::new("1"))));
    assert!(!use_color(true, None));
    assert!(App::new(false).color);
}

#[test]
fn locations_lead_with_the_source_line_or_the_function() {
    use syncspy_tui::ui::{compact_symbol, short_location};
    assert_eq!(
        short_location("pin_buffer (/src/data.cc:7)"),
        "data.cc:7 pin_buffer"
    );
    assert_eq!(
        short_location(
            "at::native::copy_kernel_cuda(at::TensorIterator&, bool) (/opt/torch/lib/libtorch_cuda.so)"
        ),
        "at::native::copy_kernel_cuda (libtorch_cuda.so)"
    );
    assert_eq!(
        compact_symbol("at::cuda::(anonymous namespace)::HostAllocator::allocate(unsigned long)"),
        "at::cuda::(anonymous namespace)::HostAllocator::allocate"
    );
    assert_eq!(
        compact_symbol("at::native::_local_scalar_dense_cuda(at::Tensor const&)::{lambda()#1}"),
        "at::native::_local_scalar_dense_cuda"
    );
    assert_eq!(compact_symbol("(weird)"), "(weird)");
    assert_eq!(
        short_location("site 7 (symbolizing...)"),
        "site 7 (symbolizing...)"
    );
    assert_eq!(short_location("(no stack captured)"), "(no stack captured)");
    // A Python line keeps its file name, line and function.
    assert_eq!(
        short_location("/home/u/proj/train.py:142 in Trainer.step"),
        "train.py:142 in Trainer.step"
    );
    assert_eq!(
        short_location("<stdin>:3 in <module>"),
        "<stdin>:3 in <module>"
    );
}

#[test]
fn compact_symbols_keep_templates_and_operators_whole() {
    use syncspy_tui::ui::compact_symbol;
    assert_eq!(
        compact_symbol("std::_Function_handler<void (), Lambda>::_M_invoke(std::_Any_data const&)"),
        "std::_Function_handler<void (), Lambda>::_M_invoke"
    );
    assert_eq!(
        compact_symbol("c10::function_ref<void (char**, long)>::callback_fn<L>(long, char**)"),
        "c10::function_ref<void (char**, long)>::callback_fn<L>"
    );
    assert_eq!(
        compact_symbol("Foo::operator()(int) const"),
        "Foo::operator()"
    );
    assert_eq!(
        compact_symbol("Foo::operator<(Foo const&)"),
        "Foo::operator<"
    );
    assert_eq!(compact_symbol("operator<<(std::ostream&, X)"), "operator<<");
    assert_eq!(compact_symbol("my_operator(int)"), "my_operator");
    assert_eq!(compact_symbol("plain_c_function"), "plain_c_function");
    assert_eq!(compact_symbol("ünïcode::fn(int)"), "ünïcode::fn");
}

#[test]
fn print_text_counts_wide_characters_once() {
    let mut s = refresh();
    s.processes[0].command = "python3 训练.py".into();
    let app = app_with(s);
    let text = syncspy_tui::ui::screen_text(&app, 80, 24);
    let row = text
        .lines()
        .find(|l| l.contains("训练"))
        .unwrap_or_default();
    assert!(row.contains("python3 训练.py"), "{row}");
    use unicode_width::UnicodeWidthStr;
    for l in text.lines() {
        assert!(l.width() <= 80, "{l:?} is {} columns", l.width());
    }
}

fn proc_key(pid: u32, start_ticks: u64) -> syncspy_tui::model::ProcessKey {
    syncspy_tui::model::ProcessKey { pid, start_ticks }
}

#[test]
fn job_sort_groups_ranks_and_puts_the_straggling_job_and_rank_first() {
    use syncspy_tui::app::ProcSort;
    use syncspy_tui::model::RankOf;
    // Job "even": two ranks that stall alike. Job "exp-7": rank 3 stalls far longer than
    // ranks 0 and 1 (379 ms above their median, 21 ms, as the report counts it). A process
    // outside any job stalls the most of all.
    let rank = |pid: u32, job: &str, rank: u32, stall_ms: u64| {
        let mut p = trainer();
        p.pid = pid;
        p.start_ticks = u64::from(pid);
        p.all.stall_ns = stall_ms * 1_000_000;
        p.job = Some(RankOf {
            job: job.into(),
            rank: Some(rank),
            trace: None,
            nccl: None,
        });
        p
    };
    let mut outsider = loader();
    outsider.all.stall_ns = 10_000_000_000;
    let s = Refresh {
        processes: vec![
            outsider,
            rank(10, "even", 0, 50),
            rank(11, "even", 1, 52),
            rank(20, "exp-7", 0, 20),
            rank(23, "exp-7", 3, 400),
            rank(21, "exp-7", 1, 22),
        ],
        ..refresh()
    };
    let mut app = app_with(s);
    for _ in 0..3 {
        app.update(Action::Sort);
    }
    assert_eq!(app.proc_sort, ProcSort::Job);
    let pids: Vec<u32> = app.processes().iter().map(|p| p.pid).collect();
    assert_eq!(pids, [23, 21, 20, 11, 10, 700]);
    let text = screen(&app, 160, 60);
    assert!(text.contains("by job straggler"), "{text}");
    assert!(line_with(&text, "[exp-7 r3]").contains("23"), "{text}");
    assert!(line_with(&text, "[even r1]").contains("11"), "{text}");
    // A row per job above its ranks, saying whether one straggles.
    let exp7 = text
        .find("exp-7: straggler exp-7 r3: 400 ms stalled, 379 ms above")
        .unwrap();
    let r3 = text.find("[exp-7 r3]").unwrap();
    let even = text.find("even: no straggler").unwrap();
    assert!(exp7 < r3 && r3 < even, "{text}");
    assert!(
        line_with(&text, "exp-7: straggler").contains("3 ranks"),
        "{text}"
    );
    // The selection moves over processes only; the job rows are not selectable.
    let pids: Vec<u32> = (0..6)
        .map(|i| {
            if i > 0 {
                app.update(Action::Down);
            }
            app.current().unwrap().pid
        })
        .collect();
    assert_eq!(pids, [23, 21, 20, 11, 10, 700]);
    // Back to the first order.
    app.update(Action::Sort);
    assert_eq!(app.proc_sort, ProcSort::Stall);
}

#[test]
fn g_opens_the_gpu_pane_which_keeps_the_shown_processs_gpu_traced_while_open() {
    let mut app = app_with(refresh());
    app.focus = Pane::Processes;
    let running = app.current().unwrap().key();
    assert!(matches!(
        app.action_for(key(KeyCode::Char('g'))),
        Some(Action::GpuPane)
    ));
    app.update(Action::GpuPane);
    assert!(app.gpu_pane);
    assert_eq!(app.commands, vec![Command::TraceGpu(Some(running))]);
    // The fixture's processes have no GPU part: the pane says so, under its request status.
    let text = screen(&app, 120, 40);
    assert!(
        line_with(&text, "GPU pid 614").contains("[asking for tracing; g: close]"),
        "{text}"
    );
    assert!(
        text.contains("no GPU part in this process's segment"),
        "{text}"
    );
    // The data thread's answer, for this process.
    let mut s = refresh();
    s.gpu_request = Some((running, Ok("paused".into())));
    app.update(Action::Data(Box::new(s.clone())));
    let text = screen(&app, 120, 40);
    assert!(
        line_with(&text, "GPU pid 614").contains("[traced on request, was paused; g: close]"),
        "{text}"
    );
    s.gpu_request = Some((running, Err("its segment is gone".into())));
    app.update(Action::Data(Box::new(s)));
    assert!(line_with(&screen(&app, 120, 40), "GPU pid 614")
        .contains("request failed: its segment is gone"));
    // No new command while nothing changed.
    assert_eq!(app.commands, vec![Command::TraceGpu(Some(running))]);
    // The request follows the selection; an ended process is not traced.
    app.commands.clear();
    app.selected = Some(proc_key(700, 5));
    app.update(Action::Down);
    app.update(Action::Up);
    let shown = app.current().unwrap().key();
    let expect = if shown == running {
        Some(running)
    } else {
        None
    };
    assert_eq!(app.gpu_trace, expect);
    app.commands.clear();
    app.selected = Some(proc_key(700, 5));
    app.update(Action::TogglePause);
    app.update(Action::TogglePause);
    assert_eq!(app.gpu_trace, None);
    assert!(screen(&app, 120, 40).contains("GPU pid 700"));
    // Again: the pane closes and the request stops.
    app.selected = Some(running);
    app.update(Action::TogglePause);
    app.update(Action::TogglePause);
    assert_eq!(app.gpu_trace, Some(running));
    app.commands.clear();
    app.update(Action::GpuPane);
    assert!(!app.gpu_pane);
    assert_eq!(app.commands, vec![Command::TraceGpu(None)]);
    let text = screen(&app, 120, 40);
    assert!(!text.contains("g: close]"), "{text}");
    assert!(
        line_with(&text, "GPU idle").contains("not measured"),
        "{text}"
    );
}

fn gpu_view() -> GpuView {
    GpuView {
        tracing: "tracing, mode duty".into(),
        devices: vec![
            GpuDeviceView {
                device: 0,
                busy_share: Some(0.712),
                per_second: vec![
                    None,
                    None,
                    Some(0.95),
                    Some(0.9),
                    Some(0.2),
                    None,
                    Some(1.0),
                    Some(0.5),
                    Some(0.0),
                    Some(0.7),
                ],
            },
            GpuDeviceView {
                device: 1,
                busy_share: None,
                per_second: vec![None; 10],
            },
        ],
        gaps: GapStats {
            count: 41,
            total_ns: 350_000_000,
            p50_ns: 2_170_000,
            p99_ns: 10_230_000,
            max_ns: 10_400_000,
            bars: bars(&[(7, 20), (8, 21)]),
        },
        short_gaps: (4_500, 12_000_000),
        min_gap_ns: 10_000,
        causes: vec![
            GapCauseRow {
                cause: IdleCause::parse(
                    "stream_sync",
                    "cudaStreamSynchronize",
                    0,
                    Some("/home/u/train.py:142 in train_step".into()),
                ),
                count: 30,
                total_ns: 287_000_000,
                share: 0.82,
            },
            GapCauseRow {
                cause: IdleCause::HostBusyElsewhere,
                count: 11,
                total_ns: 63_000_000,
                share: 0.18,
            },
        ],
        behind: Some(Behind {
            measured: 49,
            syncs: 50,
            total_ns: 63_060_000,
        }),
    }
}

#[test]
fn the_gpu_pane_shows_each_devices_seconds_the_gaps_and_their_causes() {
    let mut s = refresh();
    s.processes[1].gpu = Some(gpu_view());
    s.processes[1].gpu_idle_share = Some(0.288);
    let mut app = app_with(s).with_gpu_pane(true);
    app.selected = Some(proc_key(614, 100));
    app.update(Action::TogglePause);
    app.update(Action::TogglePause);
    let text = screen(&app, 120, 40);
    assert!(
        line_with(&text, "GPU pid 614").contains("tracing, mode duty"),
        "{text}"
    );
    // One cell a second, oldest first; blank where nothing was traced.
    let dev0 = line_with(&text, "device 0");
    assert!(dev0.contains("busy  71.2% since start"), "{dev0}");
    assert!(dev0.contains("last 10s │  ██▂ █▅▁▆│"), "{dev0}");
    let dev1 = line_with(&text, "device 1");
    assert!(dev1.contains("busy      - since start"), "{dev1}");
    assert!(dev1.contains("│          │"), "{dev1}");
    let gaps = line_with(&text, "idle gaps >= 10.0 µs");
    assert!(
        gaps.contains(": 41, 350 ms  p50 2.17 ms  p99 10.2 ms  max 10.4 ms"),
        "{gaps}"
    );
    assert!(gaps.contains("shorter: 4500, 12.0 ms"), "{gaps}");
    // The idle measured behind the syncs, under the gaps.
    let behind = line_with(&text, "idle behind syncs");
    assert!(
        behind.contains(": 63.1 ms at 49 of 50 syncs and copies"),
        "{behind}"
    );
    let rows: Vec<&str> = text.lines().collect();
    let row = |needle: &str| rows.iter().position(|l| l.contains(needle)).unwrap();
    assert_eq!(row("idle behind syncs"), row("idle gaps >=") + 1, "{text}");
    let top = line_with(&text, "cudaStreamSynchronize");
    assert!(top.contains("82.0%"), "{top}");
    assert!(top.contains("train.py:142 in train_step"), "{top}");
    assert!(line_with(&text, "host_busy_elsewhere").contains("18.0%"));
    // The pane is exactly as tall as what it draws: the devices right under its title, its
    // bottom border right under the last cause.
    let rows: Vec<&str> = text.lines().collect();
    let at = |needle: &str| rows.iter().position(|l| l.contains(needle)).unwrap();
    assert_eq!(at("device 0"), at("GPU pid 614") + 1, "{text}");
    let below = rows[at("host_busy_elsewhere") + 1];
    assert!(below.trim_start().starts_with('└'), "{text}");
    // The sites pane is still there under it.
    assert!(text.contains("Top call sites"), "{text}");
    // ASCII: the same line in ASCII levels.
    app.ascii = true;
    let text = screen(&app, 120, 40);
    assert!(
        line_with(&text, "device 0").contains("last 10s |  @@: @+.*|"),
        "{text}"
    );
    assert!(text.is_ascii(), "{text}");
    // A small screen keeps the sites' rows and shows what fits of the pane.
    let small = screen(&app, 80, 24);
    assert!(small.contains("Top call sites"), "{small}");
}

#[test]
fn after_a_reset_an_agents_gap_percentiles_are_labelled_since_start() {
    // From an agent: percentiles without a distribution (no bars).
    let mut g = gpu_view();
    g.gaps.bars = None;
    let mut s = refresh();
    s.processes[1].gpu = Some(g.clone());
    let mut app = app_with(s).with_gpu_pane(true);
    app.selected = Some(proc_key(614, 100));
    app.update(Action::TogglePause);
    app.update(Action::TogglePause);
    let gaps = line_with(&screen(&app, 120, 40), "idle gaps >=").to_string();
    assert!(gaps.contains(": 41, 350 ms  p50 2.17 ms"), "{gaps}");
    app.update(Action::Reset);
    let text = screen(&app, 120, 40);
    let gaps = line_with(&text, "idle gaps >=");
    assert!(
        gaps.contains(": 41, 350 ms  since start: p50 2.17 ms  p99 10.2 ms  max 10.4 ms"),
        "{gaps}"
    );
    // The monitor's own figures (a distribution, since the reset) need no label.
    let mut s = refresh();
    s.processes[1].gpu = Some(gpu_view());
    app.update(Action::Data(Box::new(s)));
    let text = screen(&app, 120, 40);
    assert!(
        !line_with(&text, "idle gaps >=").contains("since start"),
        "{text}"
    );
}

#[test]
fn with_collective_kernels_the_job_row_names_the_rank_the_others_waited_for() {
    use syncspy_tui::app::ProcSort;
    use syncspy_tui::model::RankOf;
    // NCCL, two GPUs: both ranks stall about as long on the host (rank 0 waits in its
    // `.item()` behind the all-reduce), but rank 0 spent 600 ms in collective kernels and
    // rank 1 only 28 ms: rank 1 is the one rank 0 waited for.
    let rank = |pid: u32, rank: u32, stall_ms: u64, coll_ms: u64| {
        let mut p = trainer();
        p.pid = pid;
        p.start_ticks = u64::from(pid);
        p.all.stall_ns = stall_ms * 1_000_000;
        p.job = Some(RankOf {
            job: "nccl".into(),
            rank: Some(rank),
            trace: Some((coll_ms * 1_000_000, 10_000_000_000)),
            nccl: None,
        });
        p
    };
    let s = Refresh {
        processes: vec![rank(30, 0, 564, 605), rank(31, 1, 563, 28)],
        ..refresh()
    };
    let mut app = app_with(s);
    while app.proc_sort != ProcSort::Job {
        app.update(Action::Sort);
    }
    let pids: Vec<u32> = app.processes().iter().map(|p| p.pid).collect();
    assert_eq!(pids, [31, 30], "the straggler heads its job");
    let text = screen(&app, 160, 40);
    assert!(
        text.contains(
            "nccl: straggler nccl r1: the other ranks waited 577 ms for it in collectives"
        ),
        "{text}"
    );
}

#[test]
fn processes_of_other_pid_namespaces_show_their_pid_on_the_node() {
    // Two containers' first processes: both pid 1 in their own namespace.
    let mut a = trainer();
    a.pid = 1;
    a.host_pid = Some(1276);
    let mut b = loader();
    b.pid = 1;
    b.host_pid = Some(1297);
    let app = app_with(Refresh {
        processes: vec![a, b],
        ..refresh()
    });
    let text = screen(&app, 160, 60);
    assert!(line_with(&text, "train.py").contains("1276"), "{text}");
    assert!(line_with(&text, "loader").contains("1297"), "{text}");
}

#[test]
fn an_ended_process_says_its_figures_are_final_and_stay() {
    // The run under `syncspy run --tui` or `syncspy demo --tui` has ended: its screen stays.
    let mut done = trainer();
    done.state = State::Exited(0);
    done.events_per_s = None;
    done.stall_per_s = None;
    done.gpu_idle_share = Some(0.394);
    let mut s = refresh();
    s.processes = vec![done];
    s.problems.push("a problem still shows".into());
    let app = app_with(s);
    let out = screen(&app, 100, 30);
    let notice = line_with(&out, "pid 614 exited 0:");
    assert!(
        notice.contains("its final figures stay until q quits or d dismisses it"),
        "{out}"
    );
    assert!(
        out.contains("Stall histograms: pid 614 [its last 10s]"),
        "{out}"
    );
    assert!(
        out.contains("Top call sites by total [its last 10s]"),
        "{out}"
    );
    assert!(
        out.contains("GPU idle: 39.4% of its active time (its whole run: it has ended)"),
        "{out}"
    );
    assert!(out.contains("! a problem still shows"), "{out}");
    // Its last seconds' waits are still listed.
    assert!(line_with(&out, "train.cc:42").contains("stream"), "{out}");

    // A running process has none of it.
    let app = app_with(refresh());
    let out = screen(&app, 100, 30);
    assert!(!out.contains("final figures"), "{out}");
    assert!(
        out.contains("[last 10s]") && !out.contains("its last"),
        "{out}"
    );
    assert!(!out.contains("its whole run"), "{out}");
}
