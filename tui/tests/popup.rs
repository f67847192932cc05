//! The stack popup: a long stack scrolls by frame and by page, clamped at both ends, and says
//! which frames it shows; tiny terminals and empty stacks draw without panicking.

mod common;
use common::screen;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use syncspy_abi::Kind;
use syncspy_tui::app::{Action, App, Mode, Pane, Scroll};
use syncspy_tui::model::{KindRow, Proc, Refresh, Scope, SiteRow, State};

/// `sym00` (innermost) .. `sym{n-1}`: no name is part of another.
fn frames(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("sym{i:02} (/src/f.cc:{i})"))
        .collect()
}

fn refresh(frames: Vec<String>) -> Refresh {
    let site = SiteRow {
        site_id: 9,
        kind: Kind::StreamSync,
        api: "cudaStreamSynchronize".into(),
        count: 4,
        total_ns: 4_000_000,
        p99_ns: 1_000_000,
        max_ns: 1_000_000,
        location: "loss_item (/src/train.cc:42)".into(),
        frames,
        waited_by: None,
    };
    let scope = Scope {
        kinds: vec![KindRow {
            kind: Kind::StreamSync,
            count: 4,
            total_ns: 4_000_000,
            p50_ns: 1_000_000,
            p99_ns: 1_000_000,
            max_ns: 1_000_000,
            bars: None,
        }],
        sites: vec![site],
        stall_ns: 4_000_000,
    };
    Refresh {
        source: "/dev/shm".into(),
        processes: vec![Proc {
            pid: 614,
            host_pid: None,
            start_ticks: 1,
            command: "python3 train.py".into(),
            state: State::Running,
            events_per_s: Some(10.0),
            stall_per_s: Some(0.1),
            gpu_idle_share: None,
            gpu: None,
            dropped: 0,
            lost: 0,
            shedding: None,
            wall_ns: 1_000_000_000,
            all: scope.clone(),
            recent: Some(scope),
            job: None,
        }],
        problems: vec![],
        window_secs: 10,
        ..Refresh::default()
    }
}

fn key(c: KeyCode) -> KeyEvent {
    KeyEvent::new(c, KeyModifiers::NONE)
}

/// Presses a key the way the event loop does.
fn press(app: &mut App, c: KeyCode) {
    let a = app
        .action_for(key(c))
        .unwrap_or_else(|| panic!("{c:?} means nothing"));
    app.update(a);
}

/// The monitor on a 100x30 screen with the site's stack open.
fn open(frames: Vec<String>) -> App {
    let mut app = App::new(false);
    app.update(Action::Resize(100, 30));
    app.update(Action::Data(Box::new(refresh(frames))));
    app.focus = Pane::Sites;
    press(&mut app, KeyCode::Enter);
    assert!(app.stack_scroll().is_some());
    app
}

#[test]
fn a_long_stack_scrolls_by_frame_and_page_and_says_where_it_is() {
    let mut app = open(frames(60));
    // 100x30: the popup is 94x24, 22 rows inside: header, blank, 20 frames.
    let s = screen(&app, 100, 30);
    assert!(s.contains("#0  sym00"), "{s}");
    assert!(s.contains("#19 sym19"), "{s}");
    assert!(!s.contains("sym20"), "{s}");
    assert!(s.contains("frames 1-20 of 60"), "{s}");

    press(&mut app, KeyCode::End);
    let s = screen(&app, 100, 30);
    assert!(s.contains("#59 sym59"), "{s}");
    assert!(s.contains("#40 sym40"), "{s}");
    assert!(!s.contains("sym00") && !s.contains("sym39"), "{s}");
    assert!(s.contains("frames 41-60 of 60"), "{s}");

    // At the end Down goes nowhere: one Up shows one earlier frame at once.
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Char('j'));
    assert_eq!(app.stack_scroll(), Some(40));
    press(&mut app, KeyCode::Char('k'));
    let s = screen(&app, 100, 30);
    assert!(s.contains("frames 40-59 of 60"), "{s}");

    press(&mut app, KeyCode::PageUp);
    let s = screen(&app, 100, 30);
    assert!(s.contains("frames 20-39 of 60"), "{s}");
    press(&mut app, KeyCode::PageUp);
    press(&mut app, KeyCode::PageUp);
    assert_eq!(app.stack_scroll(), Some(0));
    press(&mut app, KeyCode::Up);
    assert_eq!(app.stack_scroll(), Some(0));
    press(&mut app, KeyCode::PageDown);
    let s = screen(&app, 100, 30);
    assert!(s.contains("frames 21-40 of 60"), "{s}");
    for _ in 0..5 {
        press(&mut app, KeyCode::PageDown);
    }
    assert_eq!(app.stack_scroll(), Some(40));
    press(&mut app, KeyCode::Char('g'));
    assert_eq!(app.stack_scroll(), Some(0));
    press(&mut app, KeyCode::Char('G'));
    assert_eq!(app.stack_scroll(), Some(40));
    press(&mut app, KeyCode::Home);
    assert!(screen(&app, 100, 30).contains("frames 1-20 of 60"));
}

#[test]
fn the_scroll_keys_know_the_page_before_any_drawing() {
    // Nothing is drawn until the end: the screen's size (Resize) is all the keys need.
    let mut app = open(frames(60));
    app.update(Action::Scroll(Scroll::Bottom));
    assert_eq!(app.stack_scroll(), Some(40));
    press(&mut app, KeyCode::PageUp);
    assert_eq!(app.stack_scroll(), Some(20));
    press(&mut app, KeyCode::Up);
    let s = screen(&app, 100, 30);
    assert!(s.contains("frames 20-39 of 60"), "{s}");
}

#[test]
fn a_resize_keeps_the_first_frame_shown() {
    let mut app = open(frames(60));
    press(&mut app, KeyCode::End);
    // 100x60: 44 rows for frames, so the last page starts at frame 16 (index).
    app.update(Action::Resize(100, 60));
    assert_eq!(app.stack_scroll(), Some(16));
    let s = screen(&app, 100, 60);
    assert!(s.contains("frames 17-60 of 60"), "{s}");
    // Up moves the view at once.
    press(&mut app, KeyCode::Up);
    assert!(screen(&app, 100, 60).contains("frames 16-59 of 60"));
    // Smaller again: 20 frames from the same first one.
    app.update(Action::Resize(100, 30));
    assert_eq!(app.stack_scroll(), Some(15));
    assert!(screen(&app, 100, 30).contains("frames 16-35 of 60"));
    press(&mut app, KeyCode::PageDown);
    assert_eq!(app.stack_scroll(), Some(35));
}

#[test]
fn the_scroll_keys_only_scroll_while_the_stack_is_open() {
    let mut app = open(frames(60));
    let scroll = |app: &App, c| match app.action_for(key(c)) {
        Some(Action::Scroll(by)) => Some(by),
        _ => None,
    };
    assert_eq!(scroll(&app, KeyCode::Up), Some(Scroll::Up));
    assert_eq!(scroll(&app, KeyCode::Char('j')), Some(Scroll::Down));
    assert_eq!(scroll(&app, KeyCode::PageDown), Some(Scroll::PageDown));
    assert_eq!(scroll(&app, KeyCode::PageUp), Some(Scroll::PageUp));
    assert_eq!(scroll(&app, KeyCode::Home), Some(Scroll::Top));
    assert_eq!(scroll(&app, KeyCode::Char('G')), Some(Scroll::Bottom));
    // q still quits, as everywhere else.
    assert!(matches!(
        app.action_for(key(KeyCode::Char('q'))),
        Some(Action::Quit)
    ));
    // Help over the stack takes the keys back; Esc returns to the stack where it was.
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Char('?'));
    assert_eq!(app.mode, Mode::Help { stack: Some(1) });
    assert!(matches!(
        app.action_for(key(KeyCode::Down)),
        Some(Action::Down)
    ));
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.mode, Mode::Stack { scroll: 1 });
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.stack_scroll(), None);
    assert!(matches!(
        app.action_for(key(KeyCode::Down)),
        Some(Action::Down)
    ));
    assert!(app.action_for(key(KeyCode::PageDown)).is_none());
    // A scroll that arrives with the stack closed changes nothing.
    app.update(Action::Scroll(Scroll::Bottom));
    assert_eq!(app.mode, Mode::Browse);
}

#[test]
fn esc_closes_help_then_the_stack_then_the_kind_filter_then_the_text() {
    let mut app = App::new(false);
    app.update(Action::Data(Box::new(refresh(frames(60)))));
    // Sites pane: filter "loss"; histogram pane: only stream_sync (the first kind); back
    // to the sites: the stack, scrolled; help over it.
    app.focus = Pane::Sites;
    press(&mut app, KeyCode::Char('/'));
    for c in "loss".chars() {
        press(&mut app, KeyCode::Char(c));
    }
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.mode, Mode::Browse);
    press(&mut app, KeyCode::BackTab);
    assert_eq!(app.focus, Pane::Histograms);
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.kind_filter, Some(Kind::StreamSync));
    press(&mut app, KeyCode::Tab);
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Char('?'));
    assert_eq!(app.mode, Mode::Help { stack: Some(1) });

    press(&mut app, KeyCode::Esc);
    assert_eq!(app.mode, Mode::Stack { scroll: 1 });
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.mode, Mode::Browse);
    assert_eq!(app.kind_filter, Some(Kind::StreamSync));
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.kind_filter, None);
    assert_eq!(app.filter, "loss");
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.filter, "");
}

#[test]
fn help_toggles_over_the_stack_and_a_pane_change_closes_the_stack_under_it() {
    let mut app = open(frames(60));
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Char('?'));
    press(&mut app, KeyCode::Char('?'));
    assert_eq!(app.mode, Mode::Stack { scroll: 1 });
    press(&mut app, KeyCode::Char('?'));
    let s = screen(&app, 100, 30);
    assert!(s.contains("Help (? or Esc closes)"), "{s}");
    press(&mut app, KeyCode::Tab);
    assert_eq!(app.mode, Mode::Help { stack: None });
    let s = screen(&app, 100, 30);
    assert!(!s.contains("Stack of site"), "{s}");
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.mode, Mode::Browse);
}

#[test]
fn typing_a_filter_closes_the_stack_and_help() {
    // The site list changes as the filter is typed: the stack would show another site.
    let mut app = open(frames(60));
    press(&mut app, KeyCode::Char('/'));
    assert_eq!(app.mode, Mode::Filter);
    assert!(app.editing_filter());
    assert!(!screen(&app, 100, 30).contains("Stack of site"));
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.mode, Mode::Browse);
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Char('?'));
    press(&mut app, KeyCode::Char('/'));
    assert_eq!(app.mode, Mode::Filter);
    // Keys are text now, `?` included.
    assert!(matches!(
        app.action_for(key(KeyCode::Char('?'))),
        Some(Action::FilterChar('?'))
    ));
}

#[test]
fn opening_starts_at_the_top_and_enter_or_esc_close() {
    let mut app = open(frames(60));
    press(&mut app, KeyCode::End);
    assert_eq!(app.stack_scroll(), Some(40));
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.stack_scroll(), None);
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.stack_scroll(), Some(0));
    assert!(screen(&app, 100, 30).contains("#0  sym00"));
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.stack_scroll(), None);
}

#[test]
fn a_stack_that_fits_shows_no_position() {
    let app = open(frames(3));
    let s = screen(&app, 100, 30);
    assert!(s.contains("#2  sym02"), "{s}");
    assert!(!s.contains("frames"), "{s}");
}

#[test]
fn long_frames_wrap_indented_and_count_as_one() {
    let mut f = frames(60);
    f[1] = format!("sym01 {}END", "x".repeat(250));
    let mut app = open(f);
    let s = screen(&app, 100, 30);
    // Frame 1 takes 3 of the 20 rows (92 columns inside), so 18 frames fit.
    assert!(s.contains("END"), "{s}");
    assert!(
        s.contains("│    xxx"),
        "continuation rows are indented: {s}"
    );
    assert!(s.contains("frames 1-18 of 60"), "{s}");
    assert!(!s.contains("sym18"), "{s}");
    press(&mut app, KeyCode::Down);
    assert!(screen(&app, 100, 30).contains("frames 2-19 of 60"));
}

#[test]
fn rows_left_under_the_page_show_the_start_of_the_next_frame() {
    let mut f = frames(60);
    f[18] = format!("sym18 {}END", "x".repeat(250));
    let app = open(f);
    let s = screen(&app, 100, 30);
    // Frames 0..=17 take 18 of the 20 rows; the 3-row frame 18 shows its first 2 rows and is
    // not counted as shown.
    assert!(s.contains("#18 sym18 xxx"), "{s}");
    assert!(!s.contains("END"), "{s}");
    assert!(s.contains("frames 1-18 of 60"), "{s}");
}

#[test]
fn tiny_terminals_and_empty_stacks_do_not_panic() {
    let sizes = [(1, 1), (5, 3), (20, 6), (30, 8), (40, 12), (20, 40)];
    for n in [0, 1, 60] {
        let mut app = open(frames(n));
        for (w, h) in sizes {
            app.update(Action::Resize(w, h));
            screen(&app, w, h);
            for c in [KeyCode::End, KeyCode::PageDown, KeyCode::Down] {
                press(&mut app, c);
                screen(&app, w, h);
            }
            assert!(app
                .stack_scroll()
                .is_some_and(|at| at <= n.saturating_sub(1)));
            for c in [KeyCode::PageUp, KeyCode::Up, KeyCode::Home] {
                press(&mut app, c);
                screen(&app, w, h);
            }
            assert_eq!(app.stack_scroll(), Some(0));
        }
    }
    // 20x6 still shows the innermost frame of a long stack.
    let app = open(frames(60));
    let s = screen(&app, 20, 6);
    assert!(s.contains("sym00"), "{s}");
    let app = open(Vec::new());
    let s = screen(&app, 80, 24);
    assert!(s.contains("symbolizing..."), "{s}");
    assert!(!s.contains("frames"), "{s}");
}

/// The refresh with a second site, `other`, ranked first or second.
fn two_sites(other_first: bool) -> Refresh {
    let mut s = refresh(frames(3));
    let p = &mut s.processes[0];
    let mut other = p.all.sites[0].clone();
    other.site_id = 10;
    other.frames = vec!["other_fn (/src/o.cc:1)".into()];
    for scope in [Some(&mut p.all), p.recent.as_mut()].into_iter().flatten() {
        if other_first {
            scope.sites.insert(0, other.clone());
        } else {
            scope.sites.push(other.clone());
        }
    }
    s
}

#[test]
fn the_open_stack_stays_with_its_site_when_the_ranking_changes() {
    let mut app = App::new(false);
    app.update(Action::Data(Box::new(two_sites(false))));
    app.focus = Pane::Sites;
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.selected_site().map(|s| s.site_id), Some(9));
    // Next refresh: the other site now ranks first; the popup still shows site 9.
    app.update(Action::Data(Box::new(two_sites(true))));
    assert!(app.stack_scroll().is_some());
    assert_eq!(app.selected_site().map(|s| s.site_id), Some(9));
    let text = screen(&app, 100, 30);
    assert!(text.contains("Stack of site 9"), "{text}");
    assert!(!text.contains("other_fn"), "{text}");
    // Site 9 leaves the view: the popup closes rather than show another site's stack.
    let mut gone = two_sites(true);
    let p = &mut gone.processes[0];
    for scope in [Some(&mut p.all), p.recent.as_mut()].into_iter().flatten() {
        scope.sites.retain(|s| s.site_id != 9);
    }
    app.update(Action::Data(Box::new(gone)));
    assert_eq!(app.stack_scroll(), None);
}

#[test]
fn the_stack_of_a_recognized_pattern_says_what_to_do() {
    let item = vec![
        "/u/train.py:47 in <module>".to_string(),
        "at::native::_local_scalar_dense_cuda(at::Tensor const&) (libtorch_cuda.so)".to_string(),
    ];
    let app = open(item);
    let s = screen(&app, 100, 30);
    assert!(s.contains("advice: `.item()`"), "{s}");
    assert!(s.contains("#0  /u/train.py:47 in <module>"), "{s}");
    // A native stack that names no pattern gets no advice.
    let app = open(frames(3));
    let s = screen(&app, 100, 30);
    assert!(!s.contains("advice:"), "{s}");
}
