//! A hostile segment writer, for the soak test (scripts/soak-hostile.sh): what a local user
//! could put in the segment folder to bloat or stall syncspy's readers.
//!
//! ```text
//! hostile-writer DIR SECS [RATE]
//! hostile-writer wide DIR SECS [SEGMENTS]
//! hostile-writer tiny DIR SECS [PER_SECOND]
//! hostile-writer live DIR SECS [COUNT]
//! ```
//!
//! `wide`: SEGMENTS (default 1) valid segments each with 65,536 modules of 424-byte paths
//! and 2,048 call sites of 62 frames, with records across every site (issue 25, item 6).
//! `tiny`: PER_SECOND (default 50) short processes a second (forked), each writing a tiny
//! valid segment, recording a few events, living `HOSTILE_LIFE_MS` (default 300) and ending
//! (issue 25, item 7). `live`: COUNT (default 1500) tiny segments that stay live for SECS
//! seconds. Every segment names this process (or the forked child) and is owned by its user,
//! so readers take it for that process's own; the ones of one process differ by their start
//! time.
//!
//! For SECS seconds, at about RATE records a second (default 200000), it writes valid
//! segments whose records each carry a call-site id of their own (most outside the site
//! table, the rest interned as new distinct stacks until the table is full), every API and
//! kind value, and header totals pushed to u64::MAX; and it plants a FIFO, a symlink to
//! /etc/passwd and a symlink to a folder under segment names. It never exits early on error:
//! the point is to keep the readers busy.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test tool: set-up failures end it

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use syncspy_abi::{Api, Direction, Kind, Record, SegmentParams, SegmentWriter};

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    if ["wide", "tiny", "live"].contains(&mode.as_str()) {
        let mut args = std::env::args().skip(2);
        let dir = PathBuf::from(
            args.next()
                .expect("usage: hostile-writer MODE DIR SECS [N]"),
        );
        let secs: u64 = args.next().and_then(|s| s.parse().ok()).expect("SECS");
        let n: Option<u64> = args.next().and_then(|s| s.parse().ok());
        let deadline = Instant::now() + Duration::from_secs(secs);
        match mode.as_str() {
            "wide" => wide(&dir, deadline, n.unwrap_or(1)),
            "tiny" => tiny(&dir, deadline, n.unwrap_or(50)),
            _ => live(&dir, deadline, n.unwrap_or(1500)),
        }
        return;
    }
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().expect("usage: hostile-writer DIR SECS [RATE]"));
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).expect("SECS");
    let rate: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(200_000);
    // Planted files under names that look like segments.
    let fifo = std::ffi::CString::new(dir.join("syncspy-4000001-1").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
    unsafe { libc::mkfifo(fifo.as_ptr(), 0o666) };
    let _ = std::os::unix::fs::symlink("/etc/passwd", dir.join("syncspy-4000002-1"));
    let _ = std::os::unix::fs::symlink("/", dir.join("syncspy-4000003-1"));

    let me = std::process::id();
    let start = syncspy_abi::process_start_ticks(me).unwrap_or(0);
    let writers: Vec<SegmentWriter> = (0..4)
        .map(|i| {
            // Pid and start ticks of this process for the first, made-up ones for the rest
            // (a reader must cope with processes it cannot find).
            let mut p = SegmentParams::new(
                if i == 0 { me } else { 4_100_000 + i },
                start + u64::from(i),
            );
            p.site_capacity = 4096;
            p.cmdline = format!("hostile-writer\0{i}\0").into_bytes();
            SegmentWriter::create(&dir, &p).expect("create a segment")
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut n: u64 = 0;
    let t0 = Instant::now();
    while Instant::now() < deadline {
        for (w, seg) in writers.iter().enumerate() {
            for _ in 0..256 {
                n += 1;
                let site = if n.is_multiple_of(4) {
                    // A new distinct stack each time, until the table is full.
                    seg.intern_site(&[n, n ^ 0x5555, w as u64]).unwrap_or(0)
                } else {
                    // Ids far outside the table.
                    (n as u32) | 0x8000_0000
                };
                let kind = Kind::ALL[(n % Kind::ALL.len() as u64) as usize];
                let api = Api::ALL[(n % Api::ALL.len() as u64) as usize];
                seg.record(&Record {
                    kind,
                    api,
                    direction: Direction::None,
                    flags: 0,
                    device: (n % 8) as i32,
                    start_ns: n,
                    duration_ns: n.wrapping_mul(2654435761) % 10_000_000_000,
                    bytes: n,
                    stream: n,
                    tid: (n % 64) as u32,
                    site,
                    result: 0,
                    polls: 0,
                });
            }
            // Totals near the top of their range: readers must saturate, not wrap.
            let live = seg.live();
            for k in &live.kinds {
                k.count.store(u64::MAX - 10, Ordering::Relaxed);
                k.total_ns.store(u64::MAX - 10, Ordering::Relaxed);
            }
        }
        // Pace to RATE records a second.
        let due = Duration::from_secs_f64(n as f64 / rate as f64);
        if let Some(ahead) = due.checked_sub(t0.elapsed()) {
            std::thread::sleep(ahead);
        }
    }
    eprintln!(
        "hostile-writer: {n} records in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// A record of `kind` at call site `site`.
fn record(n: u64, site: u32) -> Record {
    Record {
        kind: Kind::StreamSync,
        api: Api::CudaStreamSynchronize,
        direction: Direction::None,
        flags: 0,
        device: 0,
        start_ns: n,
        duration_ns: 1_000 + n % 1_000_000,
        bytes: 0,
        stream: 0,
        tid: 1,
        site,
        result: 0,
        polls: 0,
    }
}

/// This process's pid, and its start time plus `i`: a reader checks that the file's owner
/// runs the pid, not the start time, so one process can name many segments.
fn me(i: u64) -> (u32, u64) {
    let pid = std::process::id();
    let start = syncspy_abi::process_start_ticks(pid).unwrap_or(0);
    (pid, start + i)
}

fn wide(dir: &std::path::Path, deadline: Instant, segments: u64) {
    let writers: Vec<SegmentWriter> = (0..segments)
        .map(|i| {
            let (pid, start) = me(i);
            let mut p = SegmentParams::new(pid, start);
            p.module_capacity = 1 << 16;
            p.site_capacity = 2048;
            p.cmdline = format!("hostile-writer\0wide\0{i}\0").into_bytes();
            let w = SegmentWriter::create(dir, &p).expect("create a segment");
            // The longest paths the map takes, each its own object.
            for m in 0..(1u64 << 16) {
                let path = format!("/{}/{m:08}", "x".repeat(412));
                let base = 0x1000_0000 + m * 0x1_0000;
                w.add_module(path.as_bytes(), base, base, base + 0x1_0000, &[0xab; 20]);
            }
            w
        })
        .collect();
    // Sites of 62 frames, each frame in a module of its own.
    let mut sites = Vec::new();
    for (wi, w) in writers.iter().enumerate() {
        for s in 0..2048u64 {
            let frames: Vec<u64> = (0..62u64)
                .map(|f| 0x1000_0000 + ((s * 62 + f + wi as u64) % (1 << 16)) * 0x1_0000 + 0x10)
                .collect();
            sites.push((wi, w.intern_site(&frames).unwrap_or(0)));
        }
    }
    let mut n = 0u64;
    while Instant::now() < deadline {
        for (wi, site) in &sites {
            n += 1;
            writers[*wi].record(&record(n, *site));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("hostile-writer: wide, {n} records");
}

fn tiny(dir: &std::path::Path, deadline: Instant, per_second: u64) {
    let life = std::env::var("HOSTILE_LIFE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300u64);
    let t0 = Instant::now();
    let mut n = 0u64;
    let mut children = 0u64;
    while Instant::now() < deadline {
        // SAFETY: this process is single-threaded; the child only creates a file, writes to
        // its mapping, sleeps and leaves with _exit.
        match unsafe { libc::fork() } {
            0 => {
                let (pid, start) = me(0);
                let mut p = SegmentParams::new(pid, start);
                p.ring_capacity = 16;
                p.site_capacity = 16;
                p.module_capacity = 16;
                p.cmdline = b"hostile-writer\0tiny\0".to_vec();
                if let Ok(w) = SegmentWriter::create(dir, &p) {
                    for i in 0..4 {
                        w.record(&record(i, 0));
                    }
                    std::thread::sleep(Duration::from_millis(life));
                    w.mark_exited(0);
                    w.leak();
                }
                // SAFETY: leaves the child at once, without running the parent's handlers.
                unsafe { libc::_exit(0) };
            }
            c if c > 0 => children += 1,
            _ => {}
        }
        // Reap the children that ended.
        // SAFETY: waitpid with WNOHANG on any child; a null status pointer is allowed.
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        n += 1;
        let due = Duration::from_secs_f64(n as f64 / per_second.max(1) as f64);
        if let Some(ahead) = due.checked_sub(t0.elapsed()) {
            std::thread::sleep(ahead);
        }
    }
    // SAFETY: as above, blocking this time until every child has ended.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) } > 0 {}
    eprintln!("hostile-writer: tiny, {children} short processes");
}

fn live(dir: &std::path::Path, deadline: Instant, count: u64) {
    let writers: Vec<SegmentWriter> = (0..count)
        .filter_map(|i| {
            let (pid, start) = me(1 + i);
            let mut p = SegmentParams::new(pid, start);
            p.ring_capacity = 16;
            p.site_capacity = 16;
            p.module_capacity = 16;
            p.cmdline = b"hostile-writer\0live\0".to_vec();
            SegmentWriter::create(dir, &p).ok()
        })
        .collect();
    let mut n = 0u64;
    while Instant::now() < deadline {
        for w in &writers {
            n += 1;
            w.record(&record(n, 0));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "hostile-writer: live, {} segments, {n} records",
        writers.len()
    );
}
