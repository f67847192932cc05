//! Cost of one record write into the ring (with the exact totals), and of interning a stack.
use criterion::{criterion_group, criterion_main, Criterion};
use syncspy_abi::{segment::SegmentWriter, Api, Direction, Kind, Record, SegmentParams};

fn bench(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("syncspy-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let w =
        SegmentWriter::create(&dir, &SegmentParams::new(std::process::id(), 1)).expect("segment");
    let rec = Record {
        kind: Kind::StreamSync,
        api: Api::CudaStreamSynchronize,
        direction: Direction::None,
        flags: 0,
        device: 0,
        start_ns: 1,
        duration_ns: 2,
        bytes: 0,
        stream: 3,
        tid: 4,
        site: 5,
        result: 0,
        polls: 0,
    };
    c.bench_function("segment_record_write", |b| {
        b.iter(|| w.record(std::hint::black_box(&rec)))
    });
    let frames: Vec<u64> = (0..40).map(|i| 0x7f00_0000_0000 + i * 0x40).collect();
    w.intern_site(&frames);
    c.bench_function("site_intern_existing_40_frames", |b| {
        b.iter(|| w.intern_site(std::hint::black_box(&frames)))
    });
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
