//! The local source lists call sites as the report does: two stacks whose frames symbolize
//! alike (two return addresses in one line) are one row, with their figures together, in
//! both of its scopes; a site in another function stays a row of its own. Sites whose calls
//! two Python lines waited for, over one native stack, stay two rows, in both sources.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use syncspy_abi::modules::{file_build_id, Module};
use syncspy_abi::python::{PyFrameRef, PY_SUPPORTED};
use syncspy_abi::{Api, Kind, SegmentParams, SegmentWriter};
use syncspy_read::follow::Follower;
use syncspy_read::snapshot::{Snapshot as AgentSnapshot, SnapshotProcess};
use syncspy_read::symbolize::Symbolizer;
use syncspy_test_support::{rec, TempDir};
use syncspy_tui::agent::AgentSource;
use syncspy_tui::app::{Action, App, Pane};
use syncspy_tui::local::LocalSource;
use syncspy_tui::model::{Proc, Refresh, SiteRow};
use syncspy_tui::Source;

mod common;
use common::screen;

/// Two functions the test symbolizes; never inlined, so each has a symbol.
#[inline(never)]
fn syncspy_top_alike_one(x: u64) -> u64 {
    std::hint::black_box(x).wrapping_mul(3)
}

#[inline(never)]
fn syncspy_top_alike_two(x: u64) -> u64 {
    std::hint::black_box(x).wrapping_add(7)
}

/// The test executable's module map entry (the first loaded object).
fn own_module() -> Module {
    let (bias, extent) = syncspy_abi::objects::for_each_object(|o| {
        std::ops::ControlFlow::Break((o.bias(), o.extent()))
    })
    .unwrap();
    let extent = extent.unwrap();
    let path = std::fs::read_link("/proc/self/exe").unwrap();
    let path = path.to_str().unwrap().to_string();
    let build_id = file_build_id(Path::new(&path)).unwrap().unwrap_or_default();
    Module {
        path,
        bias,
        start: extent.start,
        end: extent.end,
        build_id,
    }
}

/// `(site id, kind, API, count, total, frames)` of each row.
type Row = (u32, String, String, u64, u64, Vec<String>);

fn rows(sites: &[SiteRow]) -> Vec<Row> {
    sites
        .iter()
        .map(|s| {
            (
                s.site_id,
                s.kind.name().to_string(),
                s.api.as_str().to_string(),
                s.count,
                s.total_ns,
                s.frames.clone(),
            )
        })
        .collect()
}

/// The local source's view of the one process once every stack is symbolized.
fn symbolized(src: &mut LocalSource) -> Proc {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let snap = src.step();
        let p = snap.processes.into_iter().next().expect("the process");
        if !src.busy() && p.all.sites.iter().all(|s| !s.frames.is_empty()) {
            return p;
        }
        assert!(
            Instant::now() < until,
            "never symbolized: {:#?}",
            p.all.sites
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sites_that_symbolize_alike_are_one_row_as_in_the_report() {
    let d = TempDir::new("top-alike");
    let mut params = SegmentParams::new(4_200_001, 7);
    params.session = 5;
    params.cmdline = b"./train\0".to_vec();
    let w = SegmentWriter::create(d.path(), &params).unwrap();
    let m = own_module();
    assert!(w.add_module(m.path.as_bytes(), m.bias, m.start, m.end, &m.build_id));
    let one = syncspy_top_alike_one as *const () as u64;
    let two = syncspy_top_alike_two as *const () as u64;
    // Two return addresses in one line of one function, and one in another function.
    let a = w.intern_site(&[one + 1]).unwrap();
    let b = w.intern_site(&[one + 2]).unwrap();
    let c = w.intern_site(&[two + 1]).unwrap();
    assert!(a != b && b != c);
    for (site, n, ns) in [(a, 19, 2_000_000), (b, 1, 80_000), (c, 3, 1_000_000)] {
        for _ in 0..n {
            // Ending now: in the last seconds' window too.
            let mut r = rec(Kind::MemcpySync, Api::CudaMemcpy, ns, 4, site);
            r.start_ns = syncspy_read::monotonic_ns() - ns;
            w.record(&r);
        }
    }

    let mut src = LocalSource::new(d.path().to_path_buf(), None, 10);
    let p = symbolized(&mut src);
    let shown = rows(&p.all.sites);
    assert_eq!(shown.len(), 2, "{shown:#?}");
    // The larger part's id, both parts' figures.
    assert_eq!(
        (shown[0].0, shown[0].3, shown[0].4),
        (a, 20, 19 * 2_000_000 + 80_000)
    );
    assert!(
        shown[0].5[0].contains("syncspy_top_alike_one"),
        "{shown:#?}"
    );
    assert_eq!((shown[1].0, shown[1].3, shown[1].4), (c, 3, 3_000_000));
    // The largest part's maximum, and the row's place by the merged total.
    assert_eq!(p.all.sites[0].max_ns, 2_000_000);
    // The last seconds list them alike too.
    let recent = rows(&p.recent.as_ref().unwrap().sites);
    assert_eq!(recent, shown, "the recent scope");

    // The report (the JSON, the summary, and through it the agent) lists the same rows.
    let mut f: Follower = Follower::new(d.path(), Some(5));
    f.scan().unwrap();
    f.final_drain();
    let mut sym = Symbolizer::new();
    let r = syncspy_read::report::process_report(&f.processes()[0], &mut sym, 0);
    let report: Vec<Row> = r
        .sites
        .iter()
        .map(|s| {
            (
                s.site_id,
                s.kind.as_str().to_string(),
                s.api.as_str().to_string(),
                s.count,
                s.total_ns,
                s.frames.clone(),
            )
        })
        .collect();
    assert_eq!(shown, report, "the local source and the report");
}

/// An agent that answers every request with `snap`; its URL.
fn fake_agent(snap: &AgentSnapshot) -> String {
    let body = serde_json::to_vec(snap).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { break };
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(&body);
        }
    });
    format!("http://{addr}")
}

/// `(site id, count, waiter as the monitor says it)` of each row.
fn waited(sites: &[SiteRow]) -> Vec<(u32, u64, Option<String>)> {
    sites
        .iter()
        .map(|s| (s.site_id, s.count, s.waiter_label()))
        .collect()
}

#[test]
fn sites_two_lines_waited_for_are_two_rows_with_their_waiter_in_both_sources() {
    let d = TempDir::new("top-waited");
    let mut params = SegmentParams::new(4_200_002, 7);
    params.session = 5;
    params.cmdline = b"python3 jax_sync.py\0".to_vec();
    params.python_code_capacity = 32;
    let w = SegmentWriter::create(d.path(), &params).unwrap();
    w.set_python(PY_SUPPORTED, 0x030b07f0);
    let m = own_module();
    assert!(w.add_module(m.path.as_bytes(), m.bias, m.start, m.end, &m.build_id));
    // One native stack (a worker thread without Python) waited for by three Python stacks:
    // line 21 of the main thread twice (two entries, one line), line 30 of another thread.
    let native = w
        .intern_site(&[syncspy_top_alike_one as *const () as u64 + 1])
        .unwrap();
    let code = w
        .intern_code(0x99, |t| {
            t.set_file(b"/src/jax_sync.py");
            t.set_name(b"main");
        })
        .unwrap();
    let mut ids = Vec::new();
    for (hash, line, main) in [(1, 21, true), (2, 30, false), (3, 21, true)] {
        let id = w.intern_python_site(native, hash).unwrap();
        assert!(w.claim_python_site(id));
        w.publish_waiter_site(id, &[PyFrameRef { code, line }], false, false, main);
        ids.push(id);
    }
    for (site, n) in [(ids[0], 5), (ids[1], 3), (ids[2], 1)] {
        for _ in 0..n {
            let ns = 1_000_000;
            let mut r = rec(Kind::StreamSync, Api::CudaStreamSynchronize, ns, 0, site);
            r.start_ns = syncspy_read::monotonic_ns() - ns;
            w.record(&r);
        }
    }
    let want = vec![
        (ids[0], 6, Some("waited for by jax_sync.py:21".to_string())),
        (
            ids[1],
            3,
            Some("waited for by jax_sync.py:30 (a non-main thread)".to_string()),
        ),
    ];

    // The local source, both scopes.
    let mut src = LocalSource::new(d.path().to_path_buf(), None, 10);
    let p = symbolized(&mut src);
    assert_eq!(waited(&p.all.sites), want, "local: {:#?}", p.all.sites);
    let recent = &p.recent.as_ref().unwrap().sites;
    assert_eq!(waited(recent), want, "local, recent");

    // The report lists the same rows, and the agent's snapshot of it gives them again.
    let mut f: Follower = Follower::new(d.path(), Some(5));
    f.scan().unwrap();
    f.final_drain();
    let mut sym = Symbolizer::new();
    let r = syncspy_read::report::process_report(&f.processes()[0], &mut sym, 0);
    let report: Vec<(u32, u64, Option<String>)> = r
        .sites
        .iter()
        .map(|s| {
            let w = s.waited_by.as_ref().map(|w| {
                let who = if w.main_thread {
                    ""
                } else {
                    " (a non-main thread)"
                };
                format!("waited for by {}{who}", w.short())
            });
            (s.site_id, s.count, w)
        })
        .collect();
    assert_eq!(report, want, "the report");
    let snap = AgentSnapshot {
        processes: vec![SnapshotProcess {
            program: "jax_sync.py".into(),
            report: r,
            latency: Default::default(),
        }],
        ..AgentSnapshot::default()
    };
    let mut agent = AgentSource::new(&fake_agent(&snap), None, 10).unwrap();
    let s = agent.step();
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    assert_eq!(waited(&s.processes[0].all.sites), want, "agent");

    // On screen: each row says its waiter, a narrow table too, and so does the stack popup.
    let shown = Refresh {
        processes: vec![p],
        ..Refresh::default()
    };
    let mut app = App::new(false);
    app.update(Action::Data(Box::new(shown)));
    let wide = screen(&app, 160, 40);
    assert!(wide.contains(", waited for by jax_sync.py:21 "), "{wide}");
    assert!(wide.contains(", waited for by jax_sync.py:30 "), "{wide}");
    let narrow = screen(&app, 80, 30);
    assert!(narrow.contains("← jax_sync.py:21"), "{narrow}");
    assert!(narrow.contains("← jax_sync.py:30"), "{narrow}");
    app.update(Action::Resize(100, 30));
    app.focus = Pane::Sites;
    let open = app.action_for(enter()).unwrap();
    app.update(open);
    let popup = screen(&app, 100, 30);
    assert!(
        popup.contains("waited for by jax_sync.py:21 in main"),
        "{popup}"
    );
}

fn enter() -> crossterm::event::KeyEvent {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)
}
