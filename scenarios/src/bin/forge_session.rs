//! A forged segment, for the hostile tests (cli/tests/hostile.rs): another local user who
//! learnt a `syncspy run`'s session id writes a segment of that session for a process of its
//! own, with 5,000 stream syncs, to make the run's budget fail.
//!
//! ```text
//! forge-session DIR SESSION SECS
//! ```
//!
//! The segment names this process (so that it passes the reader's owner check: its file
//! belongs to the user the process runs as) and stays while it runs, SECS seconds.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test tool: set-up failures end it

use std::path::PathBuf;
use std::time::Duration;

use syncspy_abi::{Api, Direction, Kind, Record, SegmentParams, SegmentWriter};

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().expect("usage: forge-session DIR SESSION SECS"));
    let session: u64 = args.next().and_then(|s| s.parse().ok()).expect("SESSION");
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).expect("SECS");
    let me = std::process::id();
    let mut p = SegmentParams::new(me, syncspy_abi::process_start_ticks(me).unwrap_or(0));
    p.session = session;
    p.ring_capacity = 8192;
    p.cmdline = b"forged\0".to_vec();
    let w = SegmentWriter::create(&dir, &p).expect("create a segment");
    for i in 0..5000u64 {
        w.record(&Record {
            kind: Kind::StreamSync,
            api: Api::CudaStreamSynchronize,
            direction: Direction::None,
            flags: 0,
            device: 0,
            start_ns: 1 + i,
            duration_ns: 1000,
            bytes: 0,
            stream: 0,
            tid: me,
            site: 0,
            result: 0,
            polls: 0,
        });
    }
    println!("{}", w.path().display());
    std::thread::sleep(Duration::from_secs(secs));
}
