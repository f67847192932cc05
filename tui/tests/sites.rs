//! The local source lists call sites as the report does: two stacks whose frames symbolize
//! alike (two return addresses in one line) are one row, with their figures together, in
//! both of its scopes; a site in another function stays a row of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use syncspy_abi::modules::{file_build_id, Module};
use syncspy_abi::{Api, Kind, SegmentParams, SegmentWriter};
use syncspy_read::follow::Follower;
use syncspy_read::symbolize::Symbolizer;
use syncspy_test_support::{rec, TempDir};
use syncspy_tui::local::LocalSource;
use syncspy_tui::model::{Proc, SiteRow};
use syncspy_tui::Source;

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
