//! A hostile segment writer, for the soak test (scripts/soak-hostile.sh): what a local user
//! could put in the segment folder to bloat or stall syncspy's readers.
//!
//! ```text
//! hostile-writer DIR SECS [RATE]
//! ```
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
