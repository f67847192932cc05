//! An ended process stays on the monitor with its final figures: its "last N seconds" are the
//! last N seconds of its life, not the N seconds before now (which hold nothing once it has
//! ended), and its GPU idle share is that of its whole run, as its report has it. Segments
//! are written with the ABI crate in a private folder.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use syncspy_abi::{Api, Direction, Kind, Record, SegmentParams, SegmentWriter};
use syncspy_test_support::TempDir;
use syncspy_tui::local::LocalSource;
use syncspy_tui::model::Proc;
use syncspy_tui::Source;

/// `n` stream-sync records of `dur_ns` that end now.
fn stalls(w: &SegmentWriter, n: u64, dur_ns: u64) {
    let now = syncspy_read::monotonic_ns();
    for i in 0..n {
        w.record(&Record {
            kind: Kind::StreamSync,
            api: Api::CudaStreamSynchronize,
            direction: Direction::None,
            flags: 0,
            device: 0,
            start_ns: now - dur_ns - i,
            duration_ns: dur_ns,
            bytes: 0,
            stream: 0,
            tid: 1,
            site: 0,
            result: 0,
            polls: 0,
        });
    }
}

/// Device 0's counters since start: the traced span and the busy time in it.
fn gpu(w: &SegmentWriter, span_ns: u64, busy_ns: u64) {
    let d = w.gpu_device(0).unwrap();
    d.span_ns.store(span_ns, Relaxed);
    d.busy_ns.store(busy_ns, Relaxed);
}

fn shown(src: &mut LocalSource, pid: u32) -> Proc {
    src.step()
        .processes
        .into_iter()
        .find(|p| p.pid == pid)
        .expect("the process is shown")
}

fn recent_stalls(p: &Proc) -> (u64, u64, usize) {
    let r = p.recent.as_ref().expect("the local source has a window");
    let count = r.kinds.iter().map(|k| k.count).sum();
    (count, r.stall_ns, r.sites.len())
}

#[test]
fn an_ended_process_keeps_its_last_seconds_and_its_whole_runs_gpu_idle_share() {
    let d = TempDir::new("ended");
    let pid = 4_200_001;
    let mut params = SegmentParams::new(pid, 7);
    params.cmdline = b"scn-item-in-loop\0".to_vec();
    let w = SegmentWriter::create(d.path(), &params).unwrap();
    // The run so far: 10 s of GPU time, 6 s busy, the rest in idle gaps the host's waits
    // made; 5 waits of 2 ms.
    gpu(&w, 10_000_000_000, 6_000_000_000);
    w.record_gpu_idle(0, 1, 4_000_000_000);
    stalls(&w, 5, 2_000_000);
    // A 2-second window (the waits' second and the next, where the process ends), so that
    // the test waits little for it to slide.
    let mut src = LocalSource::new(d.path().to_path_buf(), None, 2);
    let running = shown(&mut src, pid);
    assert_eq!(recent_stalls(&running), (5, 10_000_000, 1));
    // Its last 2 s of GPU time were all busy: the last seconds' share (0% idle) differs
    // from the whole run's (4 s idle in 12: a third).
    std::thread::sleep(Duration::from_millis(100));
    gpu(&w, 12_000_000_000, 8_000_000_000);
    let running = shown(&mut src, pid);
    assert_eq!(running.gpu_idle_share, Some(0.0));

    w.mark_exited(0);
    let ended = shown(&mut src, pid);
    assert!(ended.state.ended(), "{:?}", ended.state);
    let whole = 4.0 / 12.0;
    let share = ended.gpu_idle_share.expect("measured");
    assert!((share - whole).abs() < 1e-9, "{share} != {whole}");

    // Well past the window's length after its end: still its last second's waits, and the
    // same GPU share, however long the screen is left open.
    std::thread::sleep(Duration::from_millis(3_100));
    let later = shown(&mut src, pid);
    assert_eq!(recent_stalls(&later), (5, 10_000_000, 1));
    assert_eq!(later.gpu_idle_share, ended.gpu_idle_share);
    // Since start: the exact totals, as before.
    assert_eq!(later.all.kinds.iter().map(|k| k.count).sum::<u64>(), 5);
}
