//! Frozen-file tests of the segment format.
//!
//! `tests/data/segment-v1.0.bin` is a segment written once by ABI 1.0's writer,
//! `tests/data/segment-v1.1.bin` one written by ABI 1.1's, with Python tables, and
//! `tests/data/segment-v1.2.bin` one written by ABI 1.2's, with GPU counters and idle gaps,
//! `tests/data/segment-v1.3.bin` one written by ABI 1.3's, a rank of a torchrun job,
//! `tests/data/segment-v1.4.bin` one written by ABI 1.4's, with a tracing request and
//! collective-kernel time, `tests/data/segment-v1.5.bin` one written by ABI 1.5's, with the
//! writer's namespaces and its liveness lock, `tests/data/segment-v1.6.bin` one written by
//! ABI 1.6's, with a call site waited for by the main Python thread,
//! `tests/data/segment-v1.7.bin` one written by ABI 1.7's, with a `host_wait`,
//! `tests/data/segment-v1.8.bin` one written by ABI 1.8's, with measured collectives,
//! `tests/data/segment-v1.9.bin` one written by ABI 1.9's, with the library's budget and what
//! it shed, `tests/data/segment-v1.10.bin` one written by ABI 1.10's, with the GPU idle
//! measured behind a stall; all
//! are checked in (tests/data/README.md says how, and when another file may be added). Reading them with
//! today's reader, and rewriting them with today's writer, turns the versioning rules of
//! docs/contracts.md into tests: the header fields sit at the documented offsets, a reader
//! decodes every file of its major exactly, follows the offsets in the header and accepts a
//! newer minor with a larger header, and an unknown major is refused with a message that says
//! what to do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;

use syncspy_abi::collectives::{CollectiveCalls, CollectiveLive};
use syncspy_abi::control::{
    CollectiveStatus, Control, ControlStatus, GpuCollective, CONTROL_END, TRACE_UNTIL_OFFSET,
};
use syncspy_abi::cost::{CostLive, CostStatus, OwnLive, COST_END, OWN_END, SHED_STACKS};
use syncspy_abi::gpu::{
    GpuDevice, GpuDeviceStatus, GpuLive, GpuStatus, GPU_END, GPU_TRACING, MODE_DUTY, SOURCE_CUPTI,
};
use syncspy_abi::job::{JobIdent, JobInfo, JOB_END, JOB_ID_MAX, NO_RANK};
use syncspy_abi::layout::{
    Header, Ident, Live, Totals, TotalsSnapshot, ABI_MAJOR, ABI_MINOR, CLOCK_MONOTONIC,
    HEADER_RESERVED, HEADER_SIZE_1_0, MAGIC,
};
use syncspy_abi::modules::{Module, ModuleEntry};
use syncspy_abi::origin::{Origin, FLAG_LIVENESS_LOCK, ORIGIN_END};
use syncspy_abi::python::{
    PyCodeEntry, PyFrameInfo, PyFrameRef, PyHeader, PyIdent, PyLive, PySiteEntry, PyStack,
    PyVersion, PyWaiter, PythonState, PythonStatus, PY_SUPPORTED,
};
use syncspy_abi::record::{
    stall_of, stall_result, Record, RecordError, FLAG_HOST_PINNED, FLAG_PER_THREAD,
    FLAG_STACK_TRUNCATED, NO_SITE,
};
use syncspy_abi::ring::{Cursor, PollStats, Slot};
use syncspy_abi::segment::{OpenError, ProcState, SegmentParams, SegmentReader, SegmentWriter};
use syncspy_abi::sites::SiteEntry;
use syncspy_abi::{Api, Direction, Kind};

/// The frozen ABI 1.0 segment.
const V1_0: &str = "segment-v1.0.bin";
/// The frozen ABI 1.1 segment, with Python tables.
const V1_1: &str = "segment-v1.1.bin";
/// The frozen ABI 1.2 segment: the v1.1 contents, GPU counters and three idle gaps.
const V1_2: &str = "segment-v1.2.bin";
/// The frozen ABI 1.3 segment: the v1.2 contents in a process that is rank 3 of a torchrun
/// job.
const V1_3: &str = "segment-v1.3.bin";
/// The frozen ABI 1.4 segment: the v1.3 contents with a tracing request and collective-kernel
/// time on both devices.
const V1_4: &str = "segment-v1.4.bin";
/// The frozen ABI 1.5 segment: the v1.4 contents written by a process in its own PID and
/// mount namespaces, holding the liveness lock.
const V1_5: &str = "segment-v1.5.bin";
/// The frozen ABI 1.6 segment: the v1.5 contents and one call site waited for by the main
/// Python thread (issue 26).
const V1_6: &str = "segment-v1.6.bin";
/// The frozen ABI 1.7 segment: the v1.6 contents, one `cuLaunchHostFunc` call and the
/// `host_wait` its host function ended.
const V1_7: &str = "segment-v1.7.bin";
/// The frozen ABI 1.8 segment: the v1.7 contents and the collectives part of a rank that made
/// twelve collective calls.
const V1_8: &str = "segment-v1.8.bin";
/// The frozen ABI 1.9 segment: the v1.8 contents and the cost part of a process that went over
/// its 1% budget twice and sheds stacks now.
const V1_9: &str = "segment-v1.9.bin";
/// The frozen ABI 1.10 segment: the v1.9 contents and the GPU idle measured behind one stream
/// sync (a `gpu_idle` record of API `stall_events`), and one back-to-back sync counted.
const V1_10: &str = "segment-v1.10.bin";
/// The frozen ABI 1.11 segment: the v1.10 contents and the own-time part (the host-wait
/// machinery's share of the library's time).
const V1_11: &str = "segment-v1.11.bin";
/// The host-wait machinery's time in the v1.11 file.
const HOST_WAIT_OWN_V1_11: u64 = 61_250_000;

// What both files hold. Changing any of it changes the files: add a new frozen file instead
// of editing these (tests/data/README.md).
const PID: u32 = 4242;
const START_TICKS: u64 = 777;
const SESSION: u64 = 0x5eed;
const CMDLINE: &[u8] = b"python3\0train.py\0--epochs\x002\0";
const STACK_A: [u64; 3] = [0x7f00_0000_1234, 0x7f00_0000_5678, 0x5555_0000_0042];
const STACK_B: [u64; 2] = [0x7f00_0000_9abc, 0x5555_0000_0099];
/// The ids the writer gave the two stacks (table index + 1; the table has 16 entries).
const SITE_A: u32 = 8;
const SITE_B: u32 = 16;
const MODULE_PATH: &str = "/usr/lib/libexample.so";
const MODULE_BUILD_ID: [u8; 8] = [0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4];
const EXIT_STATUS: i32 = 3;

// What only the v1.1 file holds: a supported CPython 3.12.3, three code objects, and three
// call sites with Python frames, each over a native stack of the v1.0 contents.
const PY_VERSION_HEX: u32 = 0x030c_03f0;
const TRAIN_PY: &str = "/home/user/proj/train.py";
const MODULE_PY: &str = "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py";
/// Code objects: (key, file, qualified name, first line). Their ids are the table index + 1
/// of the key's home in the 16-entry code table.
const CODES: [(u64, &str, &str, u32); 3] = [
    (0x7f3a_0010_2001, TRAIN_PY, "Trainer.step", 120),
    (0x7f3a_0010_3005, TRAIN_PY, "<module>", 1),
    (0x7f3a_0020_400b, MODULE_PY, "Module._call_impl", 1740),
];
const CODE_STEP: u32 = 2;
const CODE_MAIN: u32 = 6;
const CODE_CALL_IMPL: u32 = 12;
/// Hashes of the Python stacks (the writer's own; any non-zero value).
const PY_HASH_1: u64 = 0x1111_2222_3333_4444;
const PY_HASH_2: u64 = 0x5555_6666_7777_8888;
const PY_HASH_3: u64 = 0x9999_aaaa_bbbb_cccc;
/// A `.item()` through a torch module: library frame innermost, over native stack A. Its home
/// is stack B's entry, so it wrapped around to the table's first entry.
const PY_SITE_1: u32 = 1;
/// Another line over the same native stack, its stack cut (truncated) and one frame's code
/// unknown (the code table was full).
const PY_SITE_2: u32 = 12;
/// Over native stack B, claimed by a writer that never published it.
const PY_SITE_3: u32 = 2;
/// v1.6: a stall over native stack B on a thread with no Python frames, waited for by the
/// main thread (`FLAG_WAITED_BY`): the waiting stack, apart from the site's own (none).
const PY_HASH_4: u64 = 0xdddd_eeee_ffff_0001;
const PY_SITE_4: u32 = 3;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("syncspy-frozen-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[allow(clippy::too_many_arguments)]
fn rec(
    kind: Kind,
    api: Api,
    direction: Direction,
    flags: u8,
    device: i32,
    start_ns: u64,
    duration_ns: u64,
    bytes: u64,
    stream: u64,
    tid: u32,
    site: u32,
    result: u32,
) -> Record {
    Record {
        kind,
        api,
        direction,
        flags,
        device,
        start_ns,
        duration_ns,
        bytes,
        stream,
        tid,
        site,
        result,
        polls: 0,
    }
}

/// The records of the v1.0 file, in ring order. Columns: kind, API, direction, flags,
/// device, start_ns, duration_ns, bytes, stream, tid, site, result.
#[rustfmt::skip] // one record per line reads as the table it is
fn records() -> Vec<Record> {
    use Api::*;
    use Direction::*;
    use Kind::*;
    vec![
        rec(StreamSync, CudaStreamSynchronize, None, 0, 0, 1_000_000, 2_000_000, 0, 0x5000, 101, SITE_A, 0),
        rec(MemcpyPageable, CudaMemcpyAsync, DeviceToHost, 0, 0, 3_100_000, 150_000, 4096, 0x5000, 101, SITE_B, 0),
        rec(MemcpySync, CudaMemcpy, HostToDevice, 0, 1, 3_300_000, 80_000, 1 << 20, 0, 102, NO_SITE, 0),
        rec(ImplicitSync, CudaFree, None, 0, 0, 3_400_000, 40_000, 0, 0, 101, SITE_B, 0),
        rec(StreamSync, CudaStreamSynchronizePtsz, None, FLAG_PER_THREAD, 0, 3_500_000, 500_000, 0, 2, 103, SITE_A, 0),
        rec(MemcpySync, CudaMemcpyAsync, HostToHost, FLAG_HOST_PINNED, 0, 4_100_000, 9_000, 512, 0x5000, 101, NO_SITE, 0),
        rec(EventSync, CudaEventSynchronize, None, FLAG_STACK_TRUNCATED, -1, 4_200_000, 70_000, 0, 0, 102, SITE_A, 700),
        rec(DeviceSync, CudaDeviceSynchronize, None, 0, 0, 4_300_000, 1_200_000, 0, 0, 101, NO_SITE, 0),
    ]
}

/// The records of the v1.1 file: those of v1.0, then three at call sites with Python frames.
#[rustfmt::skip]
fn records_v1_1() -> Vec<Record> {
    use Api::*;
    use Direction::*;
    use Kind::*;
    let mut v = records();
    v.extend([
        rec(MemcpyPageable, CudaMemcpyAsync, DeviceToHost, 0, 0, 5_000_000, 3_000_000, 4, 0x5000, 101, PY_SITE_1, 0),
        rec(MemcpyPageable, CudaMemcpyAsync, DeviceToHost, 0, 0, 8_100_000, 25_000, 4, 0x5000, 101, PY_SITE_2, 0),
        rec(ImplicitSync, CudaFree, None, 0, 0, 8_200_000, 60_000, 0, 0, 101, PY_SITE_3, 0),
    ]);
    v
}

/// v1.7: the `host_wait` of the main thread (tid 101), asleep 4 ms until a host function
/// queued on stream 0x5000 of device 0 woke it, at a call site with Python frames.
const HOST_WAIT_START: u64 = 9_000_000;
const HOST_WAIT_NS: u64 = 4_000_000;

/// The records of the v1.7 file: those of v1.2, then one `host_wait`.
#[rustfmt::skip]
fn records_v1_7() -> Vec<Record> {
    use Api::*;
    use Direction::*;
    use Kind::*;
    let mut v = records_v1_2();
    v.push(rec(HostWait, CuLaunchHostFunc, None, 0, 0, HOST_WAIT_START, HOST_WAIT_NS, 0, 0x5000, 101, PY_SITE_1, 0));
    v
}

fn params() -> SegmentParams {
    let mut p = SegmentParams::new(PID, START_TICKS);
    // The smallest tables the writer allows, to keep the file small.
    p.ring_capacity = 16;
    p.site_capacity = 16;
    p.module_capacity = 16;
    p.session = SESSION;
    p.cmdline = CMDLINE.to_vec();
    p
}

/// The two native call sites and the module.
fn write_native_sites(w: &SegmentWriter) {
    assert_eq!(w.intern_site(&STACK_A), Some(SITE_A));
    assert_eq!(w.intern_site(&STACK_B), Some(SITE_B));
    assert!(w.add_module(
        MODULE_PATH.as_bytes(),
        0x7f00_0000_0000,
        0x7f00_0000_1000,
        0x7f00_0010_0000,
        &MODULE_BUILD_ID,
    ));
}

/// The records, the calls that did not stall, the overhead counters and the exit.
fn write_records_and_exit(w: &SegmentWriter, records: &[Record]) {
    for r in records {
        if r.kind == Kind::GpuIdle {
            w.record_gpu_idle(r.device, r.start_ns, r.duration_ns);
        } else {
            w.record(r);
        }
    }
    let live = w.live();
    live.calls[Api::CudaMemcpyAsync as usize].add_untimed(65_536);
    live.calls[Api::CudaMemcpyAsync as usize].add_untimed(65_536);
    live.calls[Api::CudaFree as usize].add_untimed(0);
    live.overhead_ns.store(12_345, Relaxed);
    live.stack_captures.store(2, Relaxed);
    live.stack_ns.store(6_789, Relaxed);
    live.stack_cache_hits.store(5, Relaxed);
    w.mark_exited(EXIT_STATUS);
}

/// Writes the v1.0 segment's contents with the current writer (a process without Python);
/// returns the file's path.
fn write_v1_0(dir: &Path) -> PathBuf {
    let w = SegmentWriter::create(dir, &params()).unwrap();
    write_native_sites(&w);
    write_records_and_exit(&w, &records());
    w.path().to_path_buf()
}

/// Writes the v1.1 segment's contents with the current writer; returns the file's path.
fn write_v1_1(dir: &Path) -> PathBuf {
    write_v1_1_with(dir, &records_v1_1(), |_| {})
}

/// The v1.1 contents with `records` in the ring, and whatever `more` writes before the records.
fn write_v1_1_with(dir: &Path, records: &[Record], more: impl FnOnce(&SegmentWriter)) -> PathBuf {
    write_v1_1_with_job(dir, JobIdent::default(), Origin::default(), records, more)
}

/// `write_v1_1_with` in a process that is the rank `job` says.
fn write_v1_1_with_job(
    dir: &Path,
    job: JobIdent,
    origin: Origin,
    records: &[Record],
    more: impl FnOnce(&SegmentWriter),
) -> PathBuf {
    let mut p = params();
    p.job = job;
    p.origin = origin;
    // The smallest code table the writer allows.
    p.python_code_capacity = 16;
    let w = SegmentWriter::create(dir, &p).unwrap();
    assert!(w.has_python_tables());
    w.set_python(PY_SUPPORTED, PY_VERSION_HEX);
    write_native_sites(&w);
    let ids: Vec<u32> = CODES
        .iter()
        .map(|(key, file, name, first)| {
            w.intern_code(*key, |t| {
                t.set_file(file.as_bytes());
                t.set_name(name.as_bytes());
                t.first_line = *first;
            })
            .unwrap()
        })
        .collect();
    assert_eq!(ids, [CODE_STEP, CODE_MAIN, CODE_CALL_IMPL]);
    let frame = |code, line| PyFrameRef { code, line };

    assert_eq!(w.intern_python_site(SITE_A, PY_HASH_1), Some(PY_SITE_1));
    assert!(w.claim_python_site(PY_SITE_1));
    w.publish_python_site(
        PY_SITE_1,
        &[
            frame(CODE_CALL_IMPL, 1747),
            frame(CODE_STEP, 142),
            frame(CODE_MAIN, 210),
        ],
        false,
        false,
    );
    assert_eq!(w.intern_python_site(SITE_A, PY_HASH_2), Some(PY_SITE_2));
    assert!(w.claim_python_site(PY_SITE_2));
    w.publish_python_site(
        PY_SITE_2,
        &[frame(CODE_STEP, 150), frame(0, 0)],
        true,
        false,
    );
    assert_eq!(w.intern_python_site(SITE_B, PY_HASH_3), Some(PY_SITE_3));
    assert!(w.claim_python_site(PY_SITE_3));

    let py = w.python_live();
    py.stacks.store(3, Relaxed);
    py.truncated.store(1, Relaxed);
    py.rejected.store(1, Relaxed);
    py.finalizing.store(1, Relaxed);
    py.codes_dropped.store(1, Relaxed);
    more(&w);
    write_records_and_exit(&w, records);
    w.path().to_path_buf()
}

/// The records of the v1.2 file: those of v1.1, then three GPU idle gaps (two on device 0, one
/// on device 1).
#[rustfmt::skip]
fn records_v1_2() -> Vec<Record> {
    use Api::*;
    use Direction::*;
    use Kind::*;
    let mut v = records_v1_1();
    v.extend([
        rec(GpuIdle, GpuActivity, None, 0, 0, 3_000_000, 1_900_000, 0, 0, 0, NO_SITE, 0),
        rec(GpuIdle, GpuActivity, None, 0, 1, 3_200_000, 45_000, 0, 0, 0, NO_SITE, 0),
        rec(GpuIdle, GpuActivity, None, 0, 0, 8_150_000, 20_000, 0, 0, 0, NO_SITE, 0),
    ]);
    v
}

/// The GPU part of the v1.2 file, as a reader reports it.
fn gpu_v1_2() -> GpuStatus {
    GpuStatus {
        state: GPU_TRACING,
        mode: MODE_DUTY,
        source: SOURCE_CUPTI,
        yields: 1,
        min_gap_ns: 10_000,
        window_ns: 100_000_000,
        records: 12_345,
        dropped: 2,
        late_ns: 1_500,
        traced_ns: 900_000_000,
        devices: vec![
            GpuDeviceStatus {
                device: 0,
                span_ns: 8_000_000,
                busy_ns: 6_000_000,
                short_gaps: 40,
                short_gap_ns: 120_000,
                final_ns: 9_000_000,
                sample_ppm: Some(750_000),
            },
            GpuDeviceStatus {
                device: 1,
                span_ns: 5_000_000,
                busy_ns: 1_000_000,
                short_gaps: 0,
                short_gap_ns: 0,
                final_ns: 8_900_000,
                sample_ppm: None,
            },
        ],
    }
}

/// Writes the v1.2 segment's contents with the current writer; returns the file's path.
fn write_v1_2(dir: &Path) -> PathBuf {
    write_v1_2_with_job(dir, JobIdent::default())
}

/// The environment of the v1.3 file's process: rank 3 of 8 of a torchrun job on its first
/// node, with Slurm variables that torchrun's take precedence over.
fn job_env_v1_3(name: &str) -> Option<String> {
    let v = match name {
        "TORCHELASTIC_RUN_ID" => "exp-7",
        "RANK" => "3",
        "LOCAL_RANK" => "3",
        "WORLD_SIZE" => "8",
        "GROUP_RANK" => "0",
        "SLURM_JOB_ID" => "1234",
        "SLURM_PROCID" => "0",
        _ => return None,
    };
    Some(v.to_string())
}

/// The job of the v1.3 file, as a reader reports it.
fn job_v1_3() -> JobInfo {
    JobInfo {
        id: "exp-7".into(),
        launcher: "torchelastic",
        rank: Some(3),
        local_rank: Some(3),
        world_size: Some(8),
        group_rank: Some(0),
    }
}

/// Writes the v1.3 segment's contents with the current writer; returns the file's path.
fn write_v1_3(dir: &Path) -> PathBuf {
    write_v1_2_with_job(dir, JobIdent::from_lookup(&job_env_v1_3, SESSION))
}

/// The v1.2 contents in a process that is the rank `job` says.
fn write_v1_2_with_job(dir: &Path, job: JobIdent) -> PathBuf {
    write_v1_2_with(dir, job, |_| {})
}

/// The control part of the v1.4 file.
fn control_v1_4() -> ControlStatus {
    ControlStatus {
        trace_until_ns: 12_000_000,
        trace_granted_ns: 11_000_000,
        collectives: vec![
            CollectiveStatus {
                device: 0,
                count: 5,
                busy_ns: 2_500_000,
            },
            CollectiveStatus {
                device: 1,
                count: 5,
                busy_ns: 9_000_000,
            },
        ],
    }
}

/// Writes the v1.4 segment's contents with the current writer: the v1.3 contents and the
/// control part of `control_v1_4`.
fn write_v1_4(dir: &Path) -> PathBuf {
    write_v1_4_with(dir, Origin::default())
}

/// The origin part of the v1.5 file (the namespaces a writer is given; it sets the flags).
fn origin_v1_5() -> Origin {
    Origin {
        flags: FLAG_LIVENESS_LOCK,
        pid_ns: 4_026_532_451,
        mnt_ns: 4_026_532_449,
        ns_dev: 4,
    }
}

/// Writes the v1.5 segment's contents with the current writer: the v1.4 contents in a
/// process whose namespaces are `origin_v1_5`'s.
fn write_v1_5(dir: &Path) -> PathBuf {
    write_v1_4_with(
        dir,
        Origin {
            flags: 0,
            ..origin_v1_5()
        },
    )
}

/// Writes the v1.6 segment's contents: the v1.5 contents and the waited-for site.
fn write_v1_6(dir: &Path) -> PathBuf {
    write_v1_6_with(dir, &records_v1_2(), |_| {})
}

/// Writes the v1.7 segment's contents: the v1.6 contents, one `cuLaunchHostFunc` (a call that
/// did not stall) and the `host_wait` of `records_v1_7`.
/// The collectives part of the v1.8 file, as a reader reports it.
fn collectives_v1_8() -> CollectiveCalls {
    CollectiveCalls {
        calls: 12,
        measured: 2,
        gpu_ns: 9_000_000,
        max_ns: 6_000_000,
        first_ns: 1_000_000_000,
        last_ns: 1_040_000_000,
        unmeasured: 1,
        comm_id: 0x0c0_ffee,
        comm_rank: Some(3),
        comm_size: Some(8),
    }
}

/// Writes the v1.8 segment's contents with the current writer; returns the file's path.
fn write_v1_8(dir: &Path) -> PathBuf {
    write_v1_8_with(dir, |_| {})
}

/// The v1.8 contents, and whatever `more` writes.
fn write_v1_8_with(dir: &Path, more: impl FnOnce(&SegmentWriter)) -> PathBuf {
    write_v1_6_with(dir, &records_v1_7(), |w| {
        w.live().calls[Api::CuLaunchHostFunc as usize].add_untimed(0);
        let c = w.collectives();
        c.calls.fetch_add(12, Relaxed);
        c.add_measured(1_000_000_000, 1_010_000_000, 6_000_000);
        c.add_measured(1_030_000_000, 1_040_000_000, 3_000_000);
        c.unmeasured.fetch_add(1, Relaxed);
        c.set_comm(0x0c0_ffee, Some(3), Some(8));
        more(w);
    })
}

/// The cost part of the v1.9 file, as a reader reports it.
fn cost_v1_9() -> CostStatus {
    CostStatus {
        budget_ppm: 10_000,
        level: SHED_STACKS,
        raised: 2,
        shed_since_ns: 1_020_000_000,
        stacks_shed: 40,
        gaps_shed: 7,
        records_shed: 0,
        looks_skipped: 3,
    }
}

/// Writes the v1.9 segment's contents with the current writer: the v1.8 contents and the cost
/// part of `cost_v1_9`.
fn write_v1_9(dir: &Path) -> PathBuf {
    write_v1_9_with(dir, |_| {})
}

/// The v1.9 contents, and whatever `more` writes after its cost part.
fn write_v1_9_with(dir: &Path, more: impl FnOnce(&SegmentWriter)) -> PathBuf {
    write_v1_8_with(dir, |w| {
        let c = w.cost();
        let want = cost_v1_9();
        c.budget_ppm.store(want.budget_ppm, Relaxed);
        c.level.store(want.level, Relaxed);
        c.raised.store(want.raised, Relaxed);
        c.shed_since_ns.store(want.shed_since_ns, Relaxed);
        c.stacks_shed.store(want.stacks_shed, Relaxed);
        c.gaps_shed.store(want.gaps_shed, Relaxed);
        c.records_shed.store(want.records_shed, Relaxed);
        c.looks_skipped.store(want.looks_skipped, Relaxed);
        more(w);
    })
}

/// The measurement of the v1.10 file: 2.5 ms of GPU idle behind a `cudaStreamSynchronize` at
/// site A on stream 0x77, thread 101.
fn stall_idle_v1_10() -> Record {
    Record {
        kind: Kind::GpuIdle,
        api: Api::StallEvents,
        direction: Direction::None,
        flags: 0,
        device: 0,
        start_ns: 1_050_000_000,
        duration_ns: 2_500_000,
        bytes: 0,
        stream: 0x77,
        tid: 101,
        site: SITE_A,
        result: stall_result(Kind::StreamSync, Api::CudaStreamSynchronize),
        polls: 0,
    }
}

/// Writes the v1.10 segment's contents with the current writer: the v1.9 contents, the
/// measurement of `stall_idle_v1_10` and a back-to-back sync's 0 ns (totals only).
fn write_v1_10(dir: &Path) -> PathBuf {
    write_v1_10_with(dir, |_| {})
}

/// The v1.10 contents, and whatever `more` writes after them.
fn write_v1_10_with(dir: &Path, more: impl FnOnce(&SegmentWriter)) -> PathBuf {
    write_v1_9_with(dir, |w| {
        w.record_stall_idle(&stall_idle_v1_10(), true);
        w.live().apis[Api::StallEvents as usize].add(0, 0);
        more(w);
    })
}

fn write_v1_11(dir: &Path) -> PathBuf {
    write_v1_10_with(dir, |w| {
        w.own().host_wait_ns.store(HOST_WAIT_OWN_V1_11, Relaxed);
    })
}

fn write_v1_7(dir: &Path) -> PathBuf {
    write_v1_6_with(dir, &records_v1_7(), |w| {
        w.live().calls[Api::CuLaunchHostFunc as usize].add_untimed(0);
    })
}

/// The v1.6 contents with `records` in the ring, and whatever `more` writes before them.
fn write_v1_6_with(dir: &Path, records: &[Record], more: impl FnOnce(&SegmentWriter)) -> PathBuf {
    let origin = Origin {
        flags: 0,
        ..origin_v1_5()
    };
    write_v1_4_with_more(dir, origin, records, |w| {
        assert_eq!(w.intern_python_site(SITE_B, PY_HASH_4), Some(PY_SITE_4));
        assert!(w.claim_python_site(PY_SITE_4));
        w.publish_waiter_site(
            PY_SITE_4,
            &[
                PyFrameRef {
                    code: CODE_STEP,
                    line: 133,
                },
                PyFrameRef {
                    code: CODE_MAIN,
                    line: 210,
                },
            ],
            false,
            false,
            true,
        );
        more(w);
    })
}

/// The v1.4 contents written by a process in the namespaces `origin` names.
fn write_v1_4_with(dir: &Path, origin: Origin) -> PathBuf {
    write_v1_4_with_more(dir, origin, &records_v1_2(), |_| {})
}

/// `write_v1_4_with` with `records` in the ring, then `more`.
fn write_v1_4_with_more(
    dir: &Path,
    origin: Origin,
    records: &[Record],
    more: impl FnOnce(&SegmentWriter),
) -> PathBuf {
    let job = JobIdent::from_lookup(&job_env_v1_3, SESSION);
    write_v1_2_with_origin(dir, job, origin, records, |w| {
        more(w);
        let want = control_v1_4();
        let c = w.control();
        c.trace_until_ns.store(want.trace_until_ns, Relaxed);
        c.trace_granted_ns.store(want.trace_granted_ns, Relaxed);
        for d in &want.collectives {
            // One call with the sum and the rest with zero: the count and total are exact.
            w.record_collective(d.device, d.busy_ns);
            for _ in 1..d.count {
                w.record_collective(d.device, 0);
            }
        }
    })
}

/// The v1.2 contents in a process that is the rank `job` says, then `more`.
fn write_v1_2_with(dir: &Path, job: JobIdent, more: impl FnOnce(&SegmentWriter)) -> PathBuf {
    write_v1_2_with_origin(dir, job, Origin::default(), &records_v1_2(), more)
}

/// `write_v1_2_with` in a process in the namespaces `origin` names, with `records` in the
/// ring.
fn write_v1_2_with_origin(
    dir: &Path,
    job: JobIdent,
    origin: Origin,
    records: &[Record],
    more: impl FnOnce(&SegmentWriter),
) -> PathBuf {
    let path = write_v1_1_with_job(dir, job, origin, records, |w| {
        let want = gpu_v1_2();
        let g = w.gpu();
        g.mode.store(want.mode, Relaxed);
        g.source.store(want.source, Relaxed);
        g.yields.store(want.yields, Relaxed);
        g.min_gap_ns.store(want.min_gap_ns, Relaxed);
        g.window_ns.store(want.window_ns, Relaxed);
        g.records.store(want.records, Relaxed);
        g.dropped.store(want.dropped, Relaxed);
        g.late_ns.store(want.late_ns, Relaxed);
        g.traced_ns.store(want.traced_ns, Relaxed);
        g.state
            .store(want.state, std::sync::atomic::Ordering::Release);
        for d in &want.devices {
            let e = w.gpu_device(d.device).unwrap();
            e.span_ns.store(d.span_ns, Relaxed);
            e.busy_ns.store(d.busy_ns, Relaxed);
            e.short_gaps.store(d.short_gaps, Relaxed);
            e.short_gap_ns.store(d.short_gap_ns, Relaxed);
            e.final_ns.store(d.final_ns, Relaxed);
            if let Some(p) = d.sample_ppm {
                e.sample_ppm.store(p, Relaxed);
            }
        }
        more(w);
    });
    path
}

fn drain(r: &SegmentReader) -> (Vec<Record>, PollStats) {
    let mut got = Vec::new();
    let st = r.poll(&mut Cursor::from_start(), usize::MAX, 0, |x| {
        got.push(x.unwrap())
    });
    (got, st)
}

fn expected_module() -> Module {
    Module {
        path: MODULE_PATH.into(),
        bias: 0x7f00_0000_0000,
        start: 0x7f00_0000_1000,
        end: 0x7f00_0010_0000,
        build_id: MODULE_BUILD_ID.to_vec(),
    }
}

/// Everything a reader finds of the contents both files share, wherever the regions are
/// placed: `records` in the ring, `sites_used` native site entries.
fn assert_common_contents(r: &SegmentReader, records: &[Record], sites_used: u32) {
    let id = r.ident();
    assert_eq!(id.magic, MAGIC);
    assert_eq!(id.abi_major, 1);
    assert_eq!(
        (id.pid, id.start_ticks, id.session),
        (PID, START_TICKS, SESSION)
    );
    assert_eq!(id.clock_id, CLOCK_MONOTONIC);
    assert_eq!(
        (id.record_size, id.site_entry_size, id.module_entry_size),
        (64, 512, 512)
    );
    assert_eq!(
        (id.ring_capacity, id.site_capacity, id.module_capacity),
        (16, 16, 16)
    );
    assert_eq!(id.site_max_frames, 62);
    assert_eq!(id.argv(), vec!["python3", "train.py", "--epochs", "2"]);
    assert_eq!(r.state(), ProcState::Exited(EXIT_STATUS));

    let n = records.len() as u64;
    let (got, st) = drain(r);
    assert_eq!(
        st,
        PollStats {
            delivered: n,
            lost: 0,
            corrupt: 0
        }
    );
    assert_eq!(got, records);

    let live = r.live();
    assert_eq!(r.head(), n);
    assert_eq!(live.events_dropped.load(Relaxed), 0);
    assert_eq!(live.written(), n);
    // The exact totals agree with the records, kind by kind and API by API.
    let sums = |of: Vec<&Record>| TotalsSnapshot {
        count: of.len() as u64,
        total_ns: of.iter().map(|x| x.duration_ns).sum(),
        bytes: of.iter().map(|x| x.bytes).sum(),
        max_ns: of.iter().map(|x| x.duration_ns).max().unwrap_or(0),
    };
    for k in Kind::ALL {
        let want = sums(records.iter().filter(|x| x.kind == *k).collect());
        assert_eq!(live.kinds[*k as usize].snapshot(), want, "{k}");
    }
    for a in Api::ALL {
        // GPU idle gaps are not calls: they are not added to the API totals.
        let want = match a {
            Api::GpuActivity => TotalsSnapshot::default(),
            _ => sums(records.iter().filter(|x| x.api == *a).collect()),
        };
        assert_eq!(live.apis[*a as usize].snapshot(), want, "{a}");
    }
    let ss = live.kinds[Kind::StreamSync as usize].snapshot();
    assert_eq!(
        (ss.count, ss.total_ns, ss.max_ns),
        (2, 2_500_000, 2_000_000)
    );
    let calls = live.calls[Api::CudaMemcpyAsync as usize].snapshot();
    assert_eq!((calls.count, calls.bytes, calls.total_ns), (2, 131_072, 0));
    assert_eq!(live.calls[Api::CudaFree as usize].snapshot().count, 1);
    assert_eq!(live.overhead_ns.load(Relaxed), 12_345);
    assert_eq!(live.stack_captures.load(Relaxed), 2);
    assert_eq!(live.stack_ns.load(Relaxed), 6_789);
    assert_eq!(live.stack_cache_hits.load(Relaxed), 5);
    assert_eq!(live.sites_used.load(Relaxed), sites_used);
    assert_eq!(live.modules_used.load(Relaxed), 1);
    assert_eq!(
        (
            live.sites_dropped.load(Relaxed),
            live.modules_dropped.load(Relaxed)
        ),
        (0, 0)
    );
    assert!(live.ended_ns.load(Relaxed) > 0);

    assert_eq!(r.site(SITE_A), Some(STACK_A.to_vec()));
    assert_eq!(r.site(SITE_B), Some(STACK_B.to_vec()));
    assert_eq!(r.site(NO_SITE), None);
    assert_eq!(r.site(4), None, "a free entry");
    assert_eq!(r.modules(), vec![expected_module()]);
}

/// Everything a reader finds in the v1.0 contents, wherever the regions are placed.
fn assert_v1_0_contents(r: &SegmentReader) {
    // No job part (or, edited into a newer minor, a zero one): no job.
    assert_eq!(r.job(), None);
    assert_common_contents(r, &records(), 2);
    let mc = r.live().apis[Api::CudaMemcpyAsync as usize].snapshot();
    assert_eq!((mc.count, mc.bytes, mc.total_ns), (2, 4096 + 512, 159_000));
    // No Python part: Python is absent and no site has Python frames.
    assert_eq!(r.python_status(), PythonStatus::default());
    assert_eq!(r.python_status().state, PythonState::Absent);
    assert_eq!(r.python_status().to_string(), "no Python");
    for id in 0..=16 {
        assert_eq!(r.python_stack(id), None, "site {id}");
    }
    // No GPU part (or, edited into a newer minor, a zero one): nothing was traced.
    assert_eq!(r.gpu_status().unwrap_or_default(), GpuStatus::default());
}

/// The Python frames of `PY_SITE_1` and `PY_SITE_2`.
fn py_frame(file: &str, function: &str, line: u32) -> PyFrameInfo {
    PyFrameInfo {
        file: file.into(),
        function: function.into(),
        line,
        skipped: 0,
    }
}

/// Everything a reader finds in the v1.1 contents, wherever the regions are placed.
fn assert_v1_1_contents(r: &SegmentReader) {
    // No job part (or, edited into a newer minor, a zero one): no job.
    assert_eq!(r.job(), None);
    assert_python_contents(r, &records_v1_1());
    // No GPU part (or, edited into a newer minor, a zero one): nothing was traced.
    assert_eq!(r.gpu_status().unwrap_or_default(), GpuStatus::default());
}

/// Everything a reader finds in the v1.2 contents, wherever the regions are placed.
fn assert_v1_2_contents(r: &SegmentReader) {
    assert_v1_2_gpu_contents(r);
    // No job part (or, edited into a newer minor, a zero one): no job.
    assert_eq!(r.job(), None);
}

/// The v1.2 contents, the job part aside.
fn assert_v1_2_gpu_contents(r: &SegmentReader) {
    // The v1.7 file has one record more: the `host_wait` (checked in `assert_v1_7_contents`).
    let host_waits = r.live().kinds[Kind::HostWait as usize].snapshot().count;
    let records = if host_waits > 0 {
        records_v1_7()
    } else {
        records_v1_2()
    };
    assert_python_contents(r, &records);
    let gpu = r.gpu_status().expect("a v1.2 segment has a GPU part");
    assert_eq!(gpu, gpu_v1_2());
    assert_eq!((gpu.state_name(), gpu.mode_name()), ("tracing", "duty"));
    assert_eq!(gpu.busy(), (13_000_000, 7_000_000));
    let idle = r.live().kinds[Kind::GpuIdle as usize].snapshot();
    assert_eq!(
        (idle.count, idle.total_ns, idle.max_ns),
        (3, 1_965_000, 1_900_000)
    );
}

/// Everything a reader finds in the v1.3 contents, wherever the regions are placed.
fn assert_v1_3_contents(r: &SegmentReader) {
    assert_v1_2_gpu_contents(r);
    assert_eq!(r.job(), Some(job_v1_3()));
}

/// Everything a reader finds in the v1.4 contents, wherever the regions are placed.
fn assert_v1_4_contents(r: &SegmentReader) {
    assert_v1_3_contents(r);
    assert_eq!(r.control_status(), Some(control_v1_4()));
}

/// Everything a reader finds in the v1.5 contents, wherever the regions are placed.
fn assert_v1_5_contents(r: &SegmentReader) {
    assert_v1_4_contents(r);
    assert_eq!(r.origin(), Some(origin_v1_5()));
}

/// Everything a reader finds in the v1.6 contents, wherever the regions are placed.
fn assert_v1_6_contents(r: &SegmentReader) {
    assert_v1_5_contents(r);
    assert_eq!(r.site(PY_SITE_4), Some(STACK_B.to_vec()));
    // What a reader before 1.6 sees: a site with no Python frames.
    assert_eq!(r.python_stack(PY_SITE_4), None);
    assert_eq!(
        r.waited_by(PY_SITE_4),
        Some(PyWaiter {
            stack: PyStack {
                frames: vec![
                    py_frame(TRAIN_PY, "Trainer.step", 133),
                    py_frame(TRAIN_PY, "<module>", 210),
                ],
                truncated: false,
            },
            main: true,
        })
    );
    for id in [PY_SITE_1, PY_SITE_2, PY_SITE_3, SITE_A, SITE_B, NO_SITE, 17] {
        assert_eq!(r.waited_by(id), None, "site {id}");
    }
}

/// Everything a reader finds in the v1.7 contents, wherever the regions are placed.
fn assert_v1_7_contents(r: &SegmentReader) {
    assert_v1_6_contents(r);
    let (got, _) = drain(r);
    assert_eq!(got, records_v1_7());
    let hw = got.last().unwrap();
    assert_eq!((hw.kind, hw.api), (Kind::HostWait, Api::CuLaunchHostFunc));
    assert_eq!(
        (hw.kind.name(), hw.api.name()),
        ("host_wait", "cuLaunchHostFunc")
    );
    assert!(hw.kind.is_host_stall());
    assert!(hw.api.is_driver());
    assert_eq!(
        (hw.direction, hw.flags, hw.tid, hw.result, hw.polls),
        (Direction::None, 0, 101, 0, 0)
    );
    // Its site is the waiting thread's line: a site with Python frames.
    assert_eq!(hw.site, PY_SITE_1);
    assert!(r.python_stack(hw.site).is_some());
    let live = r.live();
    let kind = live.kinds[Kind::HostWait as usize].snapshot();
    assert_eq!(
        (kind.count, kind.total_ns, kind.max_ns),
        (1, HOST_WAIT_NS, HOST_WAIT_NS)
    );
    let api = live.apis[Api::CuLaunchHostFunc as usize].snapshot();
    assert_eq!((api.count, api.total_ns), (1, HOST_WAIT_NS));
    // The queuing of the host function, a call that did not stall.
    let calls = live.calls[Api::CuLaunchHostFunc as usize].snapshot();
    assert_eq!((calls.count, calls.total_ns), (1, 0));
}

/// The v1.1 contents (records, sites, Python frames) with `records` in the ring.
fn assert_python_contents(r: &SegmentReader, records: &[Record]) {
    // The v1.6 file has one site more: the waited-for one.
    let waited = r.waited_by(PY_SITE_4).is_some();
    assert_common_contents(r, records, if waited { 6 } else { 5 });
    let mc = r.live().apis[Api::CudaMemcpyAsync as usize].snapshot();
    assert_eq!(
        (mc.count, mc.bytes, mc.total_ns),
        (4, 4096 + 512 + 8, 3_184_000)
    );

    // What a 1.0 reader sees too: sites with Python frames are native sites whose stacks
    // equal their native site's.
    assert_eq!(r.site(PY_SITE_1), Some(STACK_A.to_vec()));
    assert_eq!(r.site(PY_SITE_2), Some(STACK_A.to_vec()));
    assert_eq!(r.site(PY_SITE_3), Some(STACK_B.to_vec()));

    assert_eq!(
        r.python_status(),
        PythonStatus {
            state: PythonState::Supported,
            version: Some(PyVersion {
                major: 3,
                minor: 12,
                micro: 3
            }),
            stacks: 3,
            truncated: 1,
            rejected: 1,
            finalizing: 1,
            codes_dropped: 1,
        }
    );
    assert_eq!(
        r.python_status().to_string(),
        "Python 3.12.3: frames recorded"
    );
    assert_eq!(
        r.python_stack(PY_SITE_1),
        Some(PyStack {
            frames: vec![
                py_frame(MODULE_PY, "Module._call_impl", 1747),
                py_frame(TRAIN_PY, "Trainer.step", 142),
                py_frame(TRAIN_PY, "<module>", 210),
            ],
            truncated: false,
        })
    );
    assert_eq!(
        r.python_stack(PY_SITE_2),
        Some(PyStack {
            frames: vec![py_frame(TRAIN_PY, "Trainer.step", 150), py_frame("", "", 0)],
            truncated: true,
        })
    );
    assert_eq!(r.python_frames(PY_SITE_2).len(), 2);
    // Claimed and never published; native sites; ids outside the table.
    for id in [PY_SITE_3, SITE_A, SITE_B, NO_SITE, 17, u32::MAX] {
        assert_eq!(r.python_stack(id), None, "site {id}");
        assert!(r.python_frames(id).is_empty(), "site {id}");
    }
}

fn put(bytes: &mut [u8], at: usize, v: &[u8]) {
    bytes[at..at + v.len()].copy_from_slice(v);
}

fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap())
}

fn get_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes(bytes[at..at + 2].try_into().unwrap())
}

fn get_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap())
}

#[test]
fn the_v1_0_file_reads_back_exactly() {
    let path = data(V1_0);
    let len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(
        len, 25_600,
        "the frozen file is 8 KiB of header and three 16-entry tables"
    );
    let r = SegmentReader::open(&path).unwrap();
    let id = r.ident();
    assert_eq!((id.abi_major, id.abi_minor), (1, 0));
    assert_eq!(id.header_size, 5840);
    assert_eq!(id.header_size as usize, HEADER_SIZE_1_0);
    assert_eq!(
        (
            id.ring_offset,
            id.sites_offset,
            id.modules_offset,
            id.total_size
        ),
        (8192, 9216, 17408, 25_600)
    );
    assert_eq!(r.gpu_status(), None, "no GPU part before ABI 1.2");
    assert_v1_0_contents(&r);
}

#[test]
fn the_v1_1_file_reads_back_exactly() {
    let path = data(V1_1);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(
        bytes.len(),
        38_144,
        "the frozen file is v1.0's 25,600 bytes, 16 Python site entries and 16 code entries"
    );
    let r = SegmentReader::open(&path).unwrap();
    let id = r.ident();
    assert_eq!((id.abi_major, id.abi_minor), (1, 1));
    assert_eq!(id.header_size, 5928);
    assert_eq!(
        (
            id.ring_offset,
            id.sites_offset,
            id.modules_offset,
            id.total_size
        ),
        (8192, 9216, 17408, 38_144)
    );
    // The Python part of the header, as docs/contracts.md describes it.
    let py = |f: usize| offset_of!(Header, python.ident) + f;
    assert_eq!(
        get_u64(&bytes, py(offset_of!(PyIdent, sites_offset))),
        25_600
    );
    assert_eq!(
        get_u64(&bytes, py(offset_of!(PyIdent, codes_offset))),
        29_952
    );
    assert_eq!(get_u32(&bytes, py(offset_of!(PyIdent, site_capacity))), 16);
    assert_eq!(
        get_u32(&bytes, py(offset_of!(PyIdent, site_entry_size))),
        272
    );
    assert_eq!(get_u32(&bytes, py(offset_of!(PyIdent, code_capacity))), 16);
    assert_eq!(
        get_u32(&bytes, py(offset_of!(PyIdent, code_entry_size))),
        512
    );
    assert_eq!(get_u32(&bytes, py(offset_of!(PyIdent, max_frames))), 32);
    let live = |f: usize| offset_of!(Header, python.live) + f;
    assert_eq!(
        get_u32(&bytes, live(offset_of!(PyLive, status))),
        PY_SUPPORTED
    );
    assert_eq!(
        get_u32(&bytes, live(offset_of!(PyLive, version))),
        PY_VERSION_HEX
    );
    assert_eq!(get_u32(&bytes, live(offset_of!(PyLive, codes_used))), 3);
    // One Python site entry and one code entry, byte by byte.
    let site = 25_600 + (PY_SITE_1 as usize - 1) * size_of::<PySiteEntry>();
    assert_eq!(get_u32(&bytes, site + offset_of!(PySiteEntry, state)), 2);
    assert_eq!(get_u32(&bytes, site + offset_of!(PySiteEntry, nframes)), 3);
    assert_eq!(get_u32(&bytes, site + offset_of!(PySiteEntry, flags)), 0);
    let frame0 = site + offset_of!(PySiteEntry, frames);
    assert_eq!(
        get_u64(&bytes, frame0),
        u64::from(CODE_CALL_IMPL) << 32 | 1747
    );
    let code = 29_952 + (CODE_STEP as usize - 1) * size_of::<PyCodeEntry>();
    assert_eq!(
        get_u64(&bytes, code + offset_of!(PyCodeEntry, key)),
        CODES[0].0 | 1
    );
    assert_eq!(get_u32(&bytes, code + offset_of!(PyCodeEntry, state)), 2);
    assert_eq!(
        get_u32(&bytes, code + offset_of!(PyCodeEntry, first_line)),
        120
    );
    let file = code + offset_of!(PyCodeEntry, file);
    assert_eq!(&bytes[file..file + TRAIN_PY.len()], TRAIN_PY.as_bytes());
    let name = code + offset_of!(PyCodeEntry, name);
    assert_eq!(&bytes[name..name + 12], b"Trainer.step");
    assert_eq!(r.gpu_status(), None, "no GPU part before ABI 1.2");
    assert_v1_1_contents(&r);
}

#[test]
fn the_v1_2_file_reads_back_exactly() {
    let path = data(V1_2);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), 38_144, "the v1.1 tables: only the header grew");
    let r = SegmentReader::open(&path).unwrap();
    let id = r.ident();
    assert_eq!((id.abi_major, id.abi_minor), (1, 2));
    assert_eq!(id.header_size, 6760);
    assert_eq!(id.header_size as usize, GPU_END);
    // The GPU part, as docs/contracts.md describes it.
    let gpu = |f: usize| offset_of!(Header, gpu) + f;
    assert_eq!(get_u32(&bytes, gpu(offset_of!(GpuLive, state))), 1);
    assert_eq!(get_u32(&bytes, gpu(offset_of!(GpuLive, mode))), 2);
    assert_eq!(
        get_u64(&bytes, gpu(offset_of!(GpuLive, min_gap_ns))),
        10_000
    );
    let dev1 = gpu(offset_of!(GpuLive, devices)) + size_of::<GpuDevice>();
    assert_eq!(get_u32(&bytes, dev1 + offset_of!(GpuDevice, device)), 2);
    assert_eq!(
        get_u32(&bytes, dev1 + offset_of!(GpuDevice, sample_ppm)),
        u32::MAX
    );
    assert_eq!(
        get_u64(&bytes, dev1 + offset_of!(GpuDevice, busy_ns)),
        1_000_000
    );
    // A gap in the ring: slot 11 holds the first, its words as section 2 lays them out.
    let slot = 8192 + 11 * size_of::<Slot>() + offset_of!(Slot, words);
    assert_eq!(get_u64(&bytes, slot), 3_000_000);
    assert_eq!(get_u64(&bytes, slot + 8), 1_900_000);
    assert_eq!(get_u64(&bytes, slot + 32), 7 | 34 << 8);
    assert_v1_2_contents(&r);
}

#[test]
fn the_v1_5_file_reads_back_exactly() {
    let path = data(V1_5);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), 38_144, "the v1.1 tables: only the header grew");
    let r = SegmentReader::open(&path).unwrap();
    let id = r.ident();
    assert_eq!((id.abi_major, id.abi_minor), (1, 5));
    assert_eq!(id.header_size, 7216);
    assert_eq!(id.header_size as usize, ORIGIN_END);
    // The origin part, as docs/contracts.md describes it.
    let at = |f: usize| offset_of!(Header, origin) + f;
    assert_eq!(offset_of!(Header, origin), 7184);
    assert_eq!(get_u64(&bytes, at(offset_of!(Origin, flags))), 1);
    assert_eq!(
        get_u64(&bytes, at(offset_of!(Origin, pid_ns))),
        4_026_532_451
    );
    assert_eq!(
        get_u64(&bytes, at(offset_of!(Origin, mnt_ns))),
        4_026_532_449
    );
    assert_eq!(get_u64(&bytes, at(offset_of!(Origin, ns_dev))), 4);
    assert_v1_5_contents(&r);
    // Its writer took the lock and is long gone: nobody holds it now, whatever runs as pid
    // 4242 here.
    assert!(!r.writer_alive());
}

#[test]
fn a_v1_5_file_read_as_v1_4_has_no_origin_part_and_the_same_contents() {
    let mut bytes = std::fs::read(data(V1_5)).unwrap();
    put(
        &mut bytes,
        offset_of!(Ident, abi_minor),
        &4u16.to_ne_bytes(),
    );
    put(
        &mut bytes,
        offset_of!(Ident, header_size),
        &(CONTROL_END as u32).to_ne_bytes(),
    );
    let dir = TempDir::new("as-1-4");
    let f = dir.0.join("syncspy-4242-777");
    std::fs::write(&f, &bytes).unwrap();
    let r = SegmentReader::open(&f).unwrap();
    assert_v1_4_contents(&r);
    assert_eq!(r.origin(), None);
}

#[test]
fn the_v1_4_file_reads_back_exactly() {
    let path = data(V1_4);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), 38_144, "the v1.1 tables: only the header grew");
    let r = SegmentReader::open(&path).unwrap();
    let id = r.ident();
    assert_eq!((id.abi_major, id.abi_minor), (1, 4));
    assert_eq!(id.header_size, 7184);
    assert_eq!(id.header_size as usize, CONTROL_END);
    // The control part, as docs/contracts.md describes it.
    let ctl = |f: usize| offset_of!(Header, control) + f;
    assert_eq!(TRACE_UNTIL_OFFSET as usize, 6912);
    assert_eq!(
        get_u64(&bytes, ctl(offset_of!(Control, trace_until_ns))),
        12_000_000
    );
    assert_eq!(
        get_u64(&bytes, ctl(offset_of!(Control, trace_granted_ns))),
        11_000_000
    );
    let coll = |i: usize, f: usize| ctl(offset_of!(Control, collectives)) + i * 16 + f;
    assert_eq!(
        get_u64(&bytes, coll(0, offset_of!(GpuCollective, count))),
        5
    );
    assert_eq!(
        get_u64(&bytes, coll(0, offset_of!(GpuCollective, busy_ns))),
        2_500_000
    );
    assert_eq!(
        get_u64(&bytes, coll(1, offset_of!(GpuCollective, busy_ns))),
        9_000_000
    );
    assert!(bytes[coll(2, 0)..CONTROL_END].iter().all(|b| *b == 0));
    assert_v1_4_contents(&r);
}

#[test]
fn a_v1_4_file_read_as_v1_3_has_no_control_part_and_the_same_contents() {
    // A 1.3 reader ignores the header past 6912 bytes. Edited to say minor 3 with v1.3's
    // header size, today's reader shows the v1.3 contents, no control part, and writes no
    // request into it.
    let mut bytes = std::fs::read(data(V1_4)).unwrap();
    put(
        &mut bytes,
        offset_of!(Ident, abi_minor),
        &3u16.to_ne_bytes(),
    );
    put(
        &mut bytes,
        offset_of!(Ident, header_size),
        &(JOB_END as u32).to_ne_bytes(),
    );
    let dir = TempDir::new("as-1-3");
    let f = dir.0.join("syncspy-4242-777");
    std::fs::write(&f, &bytes).unwrap();
    let r = SegmentReader::open(&f).unwrap();
    assert_v1_3_contents(&r);
    assert_eq!(r.control_status(), None);
    assert!(r.request_gpu_trace(99_000_000).is_err());
    assert_eq!(std::fs::read(&f).unwrap(), bytes);
}

#[test]
fn the_v1_3_file_reads_back_exactly() {
    let path = data(V1_3);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), 38_144, "the v1.1 tables: only the header grew");
    let r = SegmentReader::open(&path).unwrap();
    let id = r.ident();
    assert_eq!((id.abi_major, id.abi_minor), (1, 3));
    assert_eq!(id.header_size, 6912);
    assert_eq!(id.header_size as usize, JOB_END);
    // The job part, as docs/contracts.md describes it.
    let job = |f: usize| offset_of!(Header, job) + f;
    assert_eq!(get_u32(&bytes, job(offset_of!(JobIdent, launcher))), 1);
    assert_eq!(get_u32(&bytes, job(offset_of!(JobIdent, id_len))), 5);
    assert_eq!(get_u32(&bytes, job(offset_of!(JobIdent, rank))), 3);
    assert_eq!(get_u32(&bytes, job(offset_of!(JobIdent, local_rank))), 3);
    assert_eq!(get_u32(&bytes, job(offset_of!(JobIdent, world_size))), 8);
    assert_eq!(get_u32(&bytes, job(offset_of!(JobIdent, group_rank))), 0);
    let at = job(offset_of!(JobIdent, id));
    assert_eq!(&bytes[at..at + 5], b"exp-7");
    assert!(bytes[at + 5..at + JOB_ID_MAX].iter().all(|b| *b == 0));
    assert_v1_3_contents(&r);
}

#[test]
fn a_v1_3_file_read_as_v1_2_has_no_job_and_the_same_contents() {
    // A 1.2 reader ignores the header past 6760 bytes. Edited to say minor 2 with v1.2's
    // header size, today's reader shows the v1.2 contents without a job.
    let mut bytes = std::fs::read(data(V1_3)).unwrap();
    put(
        &mut bytes,
        offset_of!(Ident, abi_minor),
        &2u16.to_ne_bytes(),
    );
    put(
        &mut bytes,
        offset_of!(Ident, header_size),
        &(GPU_END as u32).to_ne_bytes(),
    );
    let dir = TempDir::new("as-1-2");
    let f = dir.0.join("syncspy-4242-777");
    std::fs::write(&f, &bytes).unwrap();
    let r = SegmentReader::open(&f).unwrap();
    assert_v1_2_contents(&r);
    // A rank unknown to the writer reads as unknown, not as rank 4294967295.
    let mut bytes = std::fs::read(data(V1_3)).unwrap();
    put(
        &mut bytes,
        offset_of!(Header, job.rank),
        &NO_RANK.to_ne_bytes(),
    );
    std::fs::write(&f, &bytes).unwrap();
    let r = SegmentReader::open(&f).unwrap();
    assert_eq!(r.job().unwrap().rank, None);
}

#[test]
fn a_v1_2_file_read_as_v1_1_has_no_gpu_part_and_the_same_records() {
    // A 1.1 reader ignores the header past 5928 bytes and does not know API 34: it reads the
    // v1.1 contents and counts the three gaps as corrupt records. Edited to say minor 1 with
    // v1.1's header size, today's reader shows the first part of that.
    let mut bytes = std::fs::read(data(V1_2)).unwrap();
    put(
        &mut bytes,
        offset_of!(Ident, abi_minor),
        &1u16.to_ne_bytes(),
    );
    put(
        &mut bytes,
        offset_of!(Ident, header_size),
        &(offset_of!(Header, gpu) as u32).to_ne_bytes(),
    );
    let dir = TempDir::new("as-1-1");
    let f = dir.0.join("syncspy-4242-777");
    std::fs::write(&f, &bytes).unwrap();
    let r = SegmentReader::open(&f).unwrap();
    assert_eq!(r.gpu_status(), None);
    assert_eq!(r.python_status().state, PythonState::Supported);
    let (got, st) = drain(&r);
    assert_eq!(got, records_v1_2());
    assert_eq!(st.corrupt, 0);
}

#[test]
fn a_v1_1_file_read_as_v1_0_has_the_same_records_and_native_sites() {
    // A 1.0 reader ignores the header past its 5840 bytes and the tables after the module
    // map. The same file, edited to say minor 0 with v1.0's header size, is what today's
    // reader makes of it without the Python part.
    let mut bytes = std::fs::read(data(V1_1)).unwrap();
    put(
        &mut bytes,
        offset_of!(Ident, abi_minor),
        &0u16.to_ne_bytes(),
    );
    put(
        &mut bytes,
        offset_of!(Ident, header_size),
        &(HEADER_SIZE_1_0 as u32).to_ne_bytes(),
    );
    let dir = TempDir::new("as-1-0");
    let f = dir.0.join("syncspy-4242-777");
    std::fs::write(&f, &bytes).unwrap();
    let r = SegmentReader::open(&f).unwrap();
    assert_common_contents(&r, &records_v1_1(), 5);
    assert_eq!(r.site(PY_SITE_1), Some(STACK_A.to_vec()));
    assert_eq!(r.site(PY_SITE_2), Some(STACK_A.to_vec()));
    assert_eq!(r.site(PY_SITE_3), Some(STACK_B.to_vec()));
    assert_eq!(r.python_status(), PythonStatus::default());
    assert_eq!(r.python_stack(PY_SITE_1), None);
}

/// Bytes whose value depends on when the file was written, not on what was written in it.
fn masked(mut bytes: Vec<u8>) -> Vec<u8> {
    for at in [
        offset_of!(Header, ident.created_ns),
        offset_of!(Header, ident.created_unix_ns),
        offset_of!(Header, live.ended_ns),
    ] {
        put(&mut bytes, at, &[0; 8]);
    }
    bytes
}

/// The frozen file `name`, or a failure that leaves `fresh` (the current writer's file) where
/// a person can look at it: a test never writes into tests/data.
fn frozen_or_keep(name: &str, fresh: &[u8]) -> Vec<u8> {
    match std::fs::read(data(name)) {
        Ok(b) => b,
        Err(e) => {
            let keep =
                std::env::temp_dir().join(format!("syncspy-{}-{}", std::process::id(), name));
            std::fs::write(&keep, fresh).unwrap();
            panic!(
                "{name}: {e}; the current writer's file is at {}",
                keep.display()
            );
        }
    }
}

/// Offsets at which `fresh` and `frozen` differ (`differing`), `abi_minor` and `header_size`
/// left out: what an appended part may change in an older layout.
fn beyond_the_version_fields(fresh: &[u8], frozen: &[u8]) -> Vec<usize> {
    let minor = offset_of!(Ident, abi_minor);
    let size = offset_of!(Ident, header_size);
    differing(fresh, frozen)
        .into_iter()
        .filter(|i| !(minor..minor + 2).contains(i) && !(size..size + 4).contains(i))
        .collect()
}

/// Offsets at which the masked `fresh` and `frozen` differ.
fn differing(fresh: &[u8], frozen: &[u8]) -> Vec<usize> {
    let (fresh, frozen) = (masked(fresh.to_vec()), masked(frozen.to_vec()));
    assert_eq!(fresh.len(), frozen.len(), "segment size changed");
    (0..fresh.len())
        .filter(|i| fresh[*i] != frozen[*i])
        .collect()
}

#[test]
fn the_current_writer_reproduces_the_v1_11_file_byte_for_byte() {
    let dir = TempDir::new("rewrite");
    let fresh = std::fs::read(write_v1_11(&dir.0)).unwrap();
    let frozen = frozen_or_keep(V1_11, &fresh);
    let differ = differing(&fresh, &frozen);
    assert!(
        differ.is_empty(),
        "the writer changed {} bytes of the v1.11 layout, first at offset {:?}: fields may only \
         be appended (docs/contracts.md)",
        differ.len(),
        &differ[..differ.len().min(8)]
    );
}

#[test]
fn without_an_own_part_the_current_writer_changes_only_the_version_fields_of_v1_10() {
    let dir = TempDir::new("rewrite-1-10");
    let fresh = std::fs::read(write_v1_10(&dir.0)).unwrap();
    let frozen = frozen_or_keep(V1_10, &fresh);
    let (minor, size) = (offset_of!(Ident, abi_minor), offset_of!(Ident, header_size));
    let differ = beyond_the_version_fields(&fresh, &frozen);
    assert!(
        differ.is_empty(),
        "the writer changed bytes of the v1.10 layout: {differ:?}"
    );
    assert_eq!(
        (get_u16(&frozen, minor), get_u32(&frozen, size)),
        (10, 7344)
    );
    assert_eq!(get_u32(&fresh, size) as usize, size_of::<Header>());
    assert!(fresh[offset_of!(Header, own)..OWN_END]
        .iter()
        .all(|b| *b == 0));
}

#[test]
fn the_v1_11_file_reads_back_exactly() {
    let r = SegmentReader::open(&data(V1_11)).unwrap();
    assert_eq!((r.ident().abi_major, r.ident().abi_minor), (1, 11));
    assert_eq!(r.ident().header_size as usize, OWN_END);
    assert_eq!(r.host_wait_own_ns(), Some(HOST_WAIT_OWN_V1_11));
    // Every earlier part reads as in v1.10; an older segment has no own-time part.
    let old = SegmentReader::open(&data(V1_10)).unwrap();
    assert_eq!(old.host_wait_own_ns(), None);
    assert_eq!(r.cost_status(), old.cost_status());
    assert_eq!(drain(&r).0, drain(&old).0);
}

#[test]
fn without_a_stall_measurement_the_current_writer_changes_only_the_version_of_v1_9() {
    let dir = TempDir::new("rewrite-1-9");
    let fresh = std::fs::read(write_v1_9(&dir.0)).unwrap();
    let frozen = frozen_or_keep(V1_9, &fresh);
    let minor = offset_of!(Ident, abi_minor);
    let differ = beyond_the_version_fields(&fresh, &frozen);
    assert!(
        differ.is_empty(),
        "the writer changed bytes of the v1.9 layout: {differ:?}"
    );
    assert_eq!(
        (get_u16(&frozen, minor), get_u16(&fresh, minor)),
        (9, ABI_MINOR)
    );
}

#[test]
fn the_v1_10_file_reads_back_exactly() {
    let path = data(V1_10);
    let r = SegmentReader::open(&path).unwrap();
    assert_eq!((r.ident().abi_major, r.ident().abi_minor), (1, 10));
    let (records, stats) = drain(&r);
    assert_eq!(stats.corrupt, 0);
    let measured: Vec<&Record> = records
        .iter()
        .filter(|r| r.api == Api::StallEvents)
        .collect();
    assert_eq!(measured, vec![&stall_idle_v1_10()]);
    assert_eq!(
        stall_of(measured[0]),
        Some((Kind::StreamSync, Api::CudaStreamSynchronize))
    );
    // The API's totals count the back-to-back sync too; the kind's are the traced gaps'.
    let live = r.live();
    let t = live.apis[Api::StallEvents as usize].snapshot();
    assert_eq!((t.count, t.total_ns), (2, 2_500_000));
    let old = SegmentReader::open(&data(V1_9)).unwrap();
    assert_eq!(
        live.kinds[Kind::GpuIdle as usize].snapshot(),
        old.live().kinds[Kind::GpuIdle as usize].snapshot()
    );
    // Every other record reads as in v1.9.
    let (before, _) = drain(&old);
    let rest: Vec<Record> = records
        .into_iter()
        .filter(|r| r.api != Api::StallEvents)
        .collect();
    assert_eq!(rest, before);
}

#[test]
fn without_a_cost_part_the_current_writer_changes_only_the_version_fields_of_v1_8() {
    let dir = TempDir::new("rewrite-1-8");
    let fresh = std::fs::read(write_v1_8(&dir.0)).unwrap();
    let frozen = frozen_or_keep(V1_8, &fresh);
    let (minor, size) = (offset_of!(Ident, abi_minor), offset_of!(Ident, header_size));
    let differ = beyond_the_version_fields(&fresh, &frozen);
    assert!(
        differ.is_empty(),
        "the writer changed bytes of the v1.8 layout: {differ:?}"
    );
    assert_eq!((get_u16(&frozen, minor), get_u32(&frozen, size)), (8, 7288));
    assert_eq!(get_u32(&fresh, size) as usize, size_of::<Header>());
    assert!(fresh[offset_of!(Header, cost)..COST_END]
        .iter()
        .all(|b| *b == 0));
}

#[test]
fn the_v1_9_file_reads_back_exactly() {
    let path = data(V1_9);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), 38_144, "the v1.1 tables and the v1.9 header");
    let r = SegmentReader::open(&path).unwrap();
    assert_eq!((r.ident().abi_major, r.ident().abi_minor), (1, 9));
    assert_eq!(r.ident().header_size, 7344);
    assert_eq!(r.cost_status(), Some(cost_v1_9()));
    assert!(r.cost_status().unwrap().anything_shed());
    // Every earlier part reads as in v1.8; an older segment has no cost part.
    let old = SegmentReader::open(&data(V1_8)).unwrap();
    assert_eq!(old.cost_status(), None);
    assert_eq!(r.collective_calls(), old.collective_calls());
    assert_eq!(r.job(), old.job());
}

#[test]
fn without_collectives_the_current_writer_changes_only_the_version_fields_of_v1_7() {
    let dir = TempDir::new("rewrite-1-7");
    let fresh = std::fs::read(write_v1_7(&dir.0)).unwrap();
    assert_only_the_minor_differs(V1_7, &fresh, 7);
}

#[test]
fn without_host_functions_the_current_writer_changes_only_the_version_fields_of_v1_6() {
    let dir = TempDir::new("rewrite-1-6");
    let fresh = std::fs::read(write_v1_6(&dir.0)).unwrap();
    assert_only_the_minor_differs(V1_6, &fresh, 6);
}

#[test]
fn without_waiting_threads_the_current_writer_changes_only_the_version_fields_of_v1_5() {
    let dir = TempDir::new("rewrite-1-5");
    let fresh = std::fs::read(write_v1_5(&dir.0)).unwrap();
    assert_only_the_minor_differs(V1_5, &fresh, 5);
}

#[test]
fn the_v1_8_file_reads_back_exactly() {
    let path = data(V1_8);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), 38_144, "the v1.1 tables and the v1.8 header");
    let r = SegmentReader::open(&path).unwrap();
    assert_eq!((r.ident().abi_major, r.ident().abi_minor), (1, 8));
    assert_eq!(r.ident().header_size, 7288);
    assert_eq!(r.collective_calls(), Some(collectives_v1_8()));
    assert_eq!(r.collective_calls().unwrap().window_ns(), 40_000_000);
    // Every earlier part reads as in v1.7.
    let old = SegmentReader::open(&data(V1_7)).unwrap();
    assert_eq!(old.collective_calls(), None);
    assert_eq!(r.job(), old.job());
    assert_eq!(r.control_status(), old.control_status());
}

/// Asserts that `fresh` (written now, with nothing in the parts appended since the frozen
/// file's version) and the frozen file `name` (of minor `frozen_minor`, v1.5 or later) differ
/// only in `abi_minor` and, from v1.8 on, `header_size`.
fn assert_only_the_minor_differs(name: &str, fresh: &[u8], frozen_minor: u16) {
    let frozen = frozen_or_keep(name, fresh);
    let (minor, size) = (offset_of!(Ident, abi_minor), offset_of!(Ident, header_size));
    let differ = beyond_the_version_fields(fresh, &frozen);
    assert!(
        differ.is_empty(),
        "the writer changed {} bytes of the {name} layout, first at offset {:?}",
        differ.len(),
        &differ[..differ.len().min(8)]
    );
    assert_eq!(get_u16(&frozen, minor), frozen_minor);
    assert_eq!(get_u16(fresh, minor), ABI_MINOR);
    assert_eq!(get_u32(&frozen, size), 7216);
    assert_eq!(get_u32(fresh, size) as usize, size_of::<Header>());
    let appended = offset_of!(Header, collectives)..COST_END;
    assert!(fresh[appended].iter().all(|b| *b == 0));
}

#[test]
fn the_v1_6_file_reads_back_exactly() {
    let path = data(V1_6);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), 38_144, "the v1.1 tables and the v1.5 header");
    let r = SegmentReader::open(&path).unwrap();
    assert_eq!((r.ident().abi_major, r.ident().abi_minor), (1, 6));
    assert_eq!(r.ident().header_size, 7216);
    // The waited-for entry, as docs/contracts.md describes it: state, nframes 0, flags
    // (waited by, main), waiter_frames 2, then the frames.
    let sites = get_u64(&bytes, offset_of!(Header, python.ident.sites_offset)) as usize;
    let e = sites + (PY_SITE_4 as usize - 1) * size_of::<PySiteEntry>();
    assert_eq!(get_u32(&bytes, e), 2, "state: ready");
    assert_eq!(get_u32(&bytes, e + 4), 0, "nframes");
    assert_eq!(get_u32(&bytes, e + 8), 4 | 8, "flags");
    assert_eq!(get_u32(&bytes, e + 12), 2, "waiter_frames");
    assert_eq!(get_u64(&bytes, e + 16), u64::from(CODE_STEP) << 32 | 133);
    assert_v1_6_contents(&r);
}

/// Where the `host_wait` record of the v1.7 file lies: ring slot 14 (the 15th record).
const HOST_WAIT_SLOT: usize = 8192 + 14 * size_of::<Slot>() + offset_of!(Slot, words);

#[test]
fn the_v1_7_file_reads_back_exactly() {
    let path = data(V1_7);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), 38_144, "the v1.1 tables and the v1.5 header");
    let r = SegmentReader::open(&path).unwrap();
    assert_eq!((r.ident().abi_major, r.ident().abi_minor), (1, 7));
    assert_eq!(r.ident().header_size, 7216);
    // The `host_wait` in the ring, its words as section 2 lays them out: kind 9, API 63,
    // direction none, no flags, device 0; tid 101 and its site; result and polls 0.
    let slot = HOST_WAIT_SLOT;
    assert_eq!(get_u64(&bytes, slot), HOST_WAIT_START);
    assert_eq!(get_u64(&bytes, slot + 8), HOST_WAIT_NS);
    assert_eq!(get_u64(&bytes, slot + 24), 0x5000);
    assert_eq!(get_u64(&bytes, slot + 32), 9 | 63 << 8);
    assert_eq!(get_u64(&bytes, slot + 40), 101 | u64::from(PY_SITE_1) << 32);
    assert_eq!(get_u64(&bytes, slot + 48), 0);
    // The header totals of kind 9 and API 63, and the queuing call.
    let count = |t: usize| get_u64(&bytes, t + offset_of!(Totals, count));
    let size = size_of::<Totals>();
    assert_eq!(count(offset_of!(Header, live.kinds) + 9 * size), 1);
    assert_eq!(count(offset_of!(Header, live.apis) + 63 * size), 1);
    assert_eq!(count(offset_of!(Header, live.calls) + 63 * size), 1);
    assert_v1_7_contents(&r);
}

#[test]
fn a_v1_7_file_read_as_v1_6_is_the_same_and_a_1_6_reader_skips_its_host_wait() {
    // No layout changed in 1.7, and nothing in the reader depends on the minor to decode a
    // record: a segment that says minor 6 (as libraries that wrote `host_wait` before the
    // bump did) reads exactly as the v1.7 file.
    let mut bytes = std::fs::read(data(V1_7)).unwrap();
    put(
        &mut bytes,
        offset_of!(Ident, abi_minor),
        &6u16.to_ne_bytes(),
    );
    let dir = TempDir::new("as-1-6");
    let f = dir.0.join("syncspy-4242-777");
    std::fs::write(&f, &bytes).unwrap();
    let r = SegmentReader::open(&f).unwrap();
    assert_v1_7_contents(&r);
    drop(r);
    // A 1.6 reader does not know kind 9 (nor API 63): it counts the record as corrupt and
    // skips it, and reads the v1.6 records. Today's reader does the same with a kind it
    // does not know in that slot (15, free below the 16 totals slots).
    put(
        &mut bytes,
        HOST_WAIT_SLOT + 32,
        &(15 | 63u64 << 8).to_ne_bytes(),
    );
    std::fs::write(&f, &bytes).unwrap();
    let r = SegmentReader::open(&f).unwrap();
    let mut got = Vec::new();
    let mut bad = Vec::new();
    let st = r.poll(&mut Cursor::from_start(), usize::MAX, 0, |x| match x {
        Ok(rec) => got.push(rec),
        Err(e) => bad.push(e),
    });
    assert_eq!(
        st,
        PollStats {
            delivered: 14,
            lost: 0,
            corrupt: 1
        }
    );
    assert_eq!(got, records_v1_2());
    assert_eq!(bad, [RecordError::UnknownKind(15)]);
    // The header totals of kind 9 are there for it all the same.
    assert_eq!(r.live().kinds[Kind::HostWait as usize].snapshot().count, 1);
}

#[test]
fn with_unknown_namespaces_the_current_writer_changes_only_the_version_fields_of_v1_4() {
    // A writer that does not know its namespaces leaves them zero; it still takes the lock,
    // which is the one appended field it fills whatever it knows.
    let dir = TempDir::new("rewrite-1-4");
    let fresh = std::fs::read(write_v1_4(&dir.0)).unwrap();
    assert_only_the_version_fields_differ(V1_4, &fresh, 4);
}

/// Asserts that `fresh` (written now) and the frozen file `name` (of minor `frozen_minor`)
/// differ only in `abi_minor` and `header_size`, and that the header parts the frozen file's
/// version predates are zero in `fresh`.
fn assert_only_the_version_fields_differ(name: &str, fresh: &[u8], frozen_minor: u16) {
    let frozen = frozen_or_keep(name, fresh);
    let minor = offset_of!(Ident, abi_minor);
    let size = offset_of!(Ident, header_size);
    let version_bytes: Vec<usize> = (minor..minor + 2).chain(size..size + 4).collect();
    // The origin part is new in 1.5: a writer fills its flags (the lock it holds) whatever
    // else it writes; it is checked below.
    let origin = offset_of!(Header, origin)..ORIGIN_END;
    let differ: Vec<usize> = differing(fresh, &frozen)
        .into_iter()
        .filter(|i| !version_bytes.contains(i) && !origin.contains(i))
        .collect();
    assert!(
        differ.is_empty(),
        "the writer changed {} bytes of the {name} layout, first at offset {:?}: fields may \
         only be appended (docs/contracts.md)",
        differ.len(),
        &differ[..differ.len().min(8)]
    );
    assert_eq!(&fresh[minor..minor + 2], &ABI_MINOR.to_ne_bytes());
    assert_eq!(&frozen[minor..minor + 2], &frozen_minor.to_ne_bytes());
    assert_eq!(
        get_u32(fresh, size) as usize,
        size_of::<Header>(),
        "the writer's header_size"
    );
    assert!(frozen[origin.clone()].iter().all(|b| *b == 0));
    assert_eq!(get_u64(fresh, origin.start), FLAG_LIVENESS_LOCK);
    assert!(fresh[origin.start + 8..origin.end].iter().all(|b| *b == 0));
    if frozen_minor < 4 {
        let control = offset_of!(Header, control);
        assert!(fresh[control..control + size_of::<Control>()]
            .iter()
            .all(|b| *b == 0));
    }
    if frozen_minor < 3 {
        let job = offset_of!(Header, job);
        assert!(fresh[job..job + size_of::<JobIdent>()]
            .iter()
            .all(|b| *b == 0));
    }
    if frozen_minor < 2 {
        let gpu = offset_of!(Header, gpu);
        assert!(fresh[gpu..gpu + size_of::<GpuLive>()]
            .iter()
            .all(|b| *b == 0));
    }
}

#[test]
fn without_collectives_or_requests_the_current_writer_changes_only_the_version_fields_of_v1_3() {
    // A process no reader asked to trace and without collective kernels has a zero control
    // part: every byte of the v1.3 file but `abi_minor` and `header_size` is what the writer
    // still writes.
    let dir = TempDir::new("rewrite-1-3");
    let fresh = std::fs::read(write_v1_3(&dir.0)).unwrap();
    assert_only_the_version_fields_differ(V1_3, &fresh, 3);
}

#[test]
fn outside_a_job_the_current_writer_changes_only_the_version_fields_of_v1_2() {
    // A process that is no rank of a job has a zero job part: every byte of the v1.2 file
    // but `abi_minor` and `header_size` is what the writer still writes.
    let dir = TempDir::new("rewrite-1-2");
    let fresh = std::fs::read(write_v1_2(&dir.0)).unwrap();
    assert_only_the_version_fields_differ(V1_2, &fresh, 2);
}

#[test]
fn without_gpu_activity_the_current_writer_changes_only_the_version_fields_of_v1_1() {
    // A process whose GPU was not traced has a zero GPU part: every byte of the v1.1 file but
    // `abi_minor` and `header_size` is what the writer still writes.
    let dir = TempDir::new("rewrite-1-1");
    let fresh = std::fs::read(write_v1_1(&dir.0)).unwrap();
    assert_only_the_version_fields_differ(V1_1, &fresh, 1);
}

#[test]
fn without_python_the_current_writer_changes_only_the_version_fields_of_v1_0() {
    // A process without Python gets no Python tables and a zero Python header part: every
    // byte of the v1.0 file but `abi_minor` and `header_size` is what the writer still writes.
    let dir = TempDir::new("rewrite-1-0");
    let fresh = std::fs::read(write_v1_0(&dir.0)).unwrap();
    assert_only_the_version_fields_differ(V1_0, &fresh, 0);
    let py = offset_of!(Header, python);
    assert!(fresh[py..py + size_of::<PyHeader>()]
        .iter()
        .all(|b| *b == 0));
}

/// `bytes` edited into what a writer of minor 8 would write: 64 bytes of fields appended
/// after this build's header (filled with 0xa5, which the reader must ignore) and 4 KiB more
/// before the ring (the reader must follow the offsets, the Python tables' included).
fn as_minor_8(mut bytes: Vec<u8>) -> Vec<u8> {
    let base = size_of::<Header>();
    put(
        &mut bytes,
        offset_of!(Ident, abi_minor),
        &8u16.to_ne_bytes(),
    );
    put(
        &mut bytes,
        offset_of!(Ident, header_size),
        &((base + 64) as u32).to_ne_bytes(),
    );
    bytes[base..base + 64].fill(0xa5);
    let gap = 4096u64;
    let mut moved = vec![
        offset_of!(Ident, ring_offset),
        offset_of!(Ident, sites_offset),
        offset_of!(Ident, modules_offset),
        offset_of!(Ident, total_size),
    ];
    let py_sites = offset_of!(Header, python.ident.sites_offset);
    let py_codes = offset_of!(Header, python.ident.codes_offset);
    if get_u64(&bytes, py_sites) != 0 {
        moved.extend([py_sites, py_codes]);
    }
    for at in moved {
        let v = get_u64(&bytes, at) + gap;
        put(&mut bytes, at, &v.to_ne_bytes());
    }
    bytes.splice(HEADER_RESERVED..HEADER_RESERVED, vec![0u8; gap as usize]);
    bytes
}

#[test]
fn a_newer_minor_with_a_larger_header_and_moved_regions_is_read() {
    let dir = TempDir::new("minor");
    let f = dir.0.join("syncspy-4242-777");
    type AssertContents = fn(&SegmentReader);
    let check: [(&str, AssertContents); 8] = [
        (V1_0, assert_v1_0_contents),
        (V1_1, assert_v1_1_contents),
        (V1_2, assert_v1_2_contents),
        (V1_3, assert_v1_3_contents),
        (V1_4, assert_v1_4_contents),
        (V1_5, assert_v1_5_contents),
        (V1_6, assert_v1_6_contents),
        (V1_7, assert_v1_7_contents),
    ];
    for (name, assert_contents) in check {
        let mut bytes = as_minor_8(std::fs::read(data(name)).unwrap());
        std::fs::write(&f, &bytes).unwrap();
        let r = SegmentReader::open(&f).unwrap();
        assert_eq!((r.ident().abi_major, r.ident().abi_minor), (1, 8), "{name}");
        assert_eq!(
            r.ident().header_size as usize,
            size_of::<Header>() + 64,
            "{name}"
        );
        assert_eq!(r.ident().ring_offset, 8192 + 4096, "{name}");
        // The v1.0 file's bytes after its header are zero: a minor-2 writer in a process
        // without Python.
        assert_contents(&r);
        drop(r);

        // The room for appended fields ends where the ring may start at the earliest.
        put(
            &mut bytes,
            offset_of!(Ident, header_size),
            &(HEADER_RESERVED as u32 + 1).to_ne_bytes(),
        );
        std::fs::write(&f, &bytes).unwrap();
        assert!(
            matches!(
                SegmentReader::open(&f),
                Err(OpenError::Corrupt("header_size"))
            ),
            "{name}"
        );
    }
}

#[test]
fn header_size_is_accepted_from_the_v1_0_size_up() {
    let dir = TempDir::new("header-size");
    let f = dir.0.join("syncspy-4242-777");
    let frozen = std::fs::read(data(V1_0)).unwrap();
    for (size, ok) in [
        (0, false),
        (size_of::<Ident>(), false),
        (HEADER_SIZE_1_0 - 8, false),
        (HEADER_SIZE_1_0, true),
        (size_of::<Header>(), true),
        (HEADER_RESERVED, true),
    ] {
        let mut bytes = frozen.clone();
        put(
            &mut bytes,
            offset_of!(Ident, header_size),
            &(size as u32).to_ne_bytes(),
        );
        std::fs::write(&f, &bytes).unwrap();
        match SegmentReader::open(&f) {
            Ok(r) => {
                assert!(ok, "header_size {size} was accepted");
                assert_v1_0_contents(&r);
            }
            Err(e) => {
                assert!(!ok, "header_size {size}: {e}");
                assert!(matches!(e, OpenError::Corrupt("header_size")), "{e:?}");
            }
        }
    }
}

#[test]
fn an_unknown_major_is_refused_with_a_clear_error() {
    let dir = TempDir::new("major");
    let f = dir.0.join("syncspy-4242-777");
    for name in [V1_0, V1_1, V1_2, V1_3, V1_4, V1_5, V1_6, V1_7] {
        let frozen = std::fs::read(data(name)).unwrap();
        for major in [0u16, 2, 0xffff] {
            let mut bytes = frozen.clone();
            put(
                &mut bytes,
                offset_of!(Ident, abi_major),
                &major.to_ne_bytes(),
            );
            put(
                &mut bytes,
                offset_of!(Ident, abi_minor),
                &4u16.to_ne_bytes(),
            );
            std::fs::write(&f, &bytes).unwrap();
            let err = match SegmentReader::open(&f) {
                Err(e) => e,
                Ok(_) => panic!("{name}: major {major} was accepted"),
            };
            assert!(
                matches!(err, OpenError::Version { major: m, minor: 4 } if m == major),
                "{name}: {err:?}"
            );
            let msg = err.to_string();
            assert!(
                msg.contains(&format!(
                    "segment ABI {major}.4 is not supported by this reader (ABI 1.x)"
                )),
                "{msg}"
            );
            assert!(msg.contains("matches the preloaded libsyncspy.so"), "{msg}");
        }
        // Another magic is not a syncspy segment at all, whatever its version says.
        let mut bytes = frozen;
        put(&mut bytes, 0, b"SYNCSPX\0");
        std::fs::write(&f, &bytes).unwrap();
        assert!(matches!(SegmentReader::open(&f), Err(OpenError::Foreign)));
    }
}

#[test]
fn this_build_writes_abi_1_11_and_its_file_is_the_newest() {
    assert_eq!((ABI_MAJOR, ABI_MINOR), (1, 11));
    assert_eq!(&MAGIC, b"SYNCSPY\0");
    assert_eq!(HEADER_SIZE_1_0, 5840);
    assert_eq!(size_of::<Header>(), 7352);
    // What a fresh segment says of itself, with and without Python tables.
    let dir = TempDir::new("version");
    for code_capacity in [0, 16] {
        let mut p = SegmentParams::new(1, code_capacity.into());
        p.ring_capacity = 16;
        p.python_code_capacity = code_capacity;
        let w = SegmentWriter::create(&dir.0, &p).unwrap();
        let r = SegmentReader::open(w.path()).unwrap();
        assert_eq!(
            (r.ident().abi_major, r.ident().abi_minor),
            (ABI_MAJOR, ABI_MINOR)
        );
        assert_eq!(r.ident().header_size as usize, size_of::<Header>());
    }
    // A minor bump adds a frozen file: the newest one is this build's version.
    let mut files: Vec<(u16, u16)> = std::fs::read_dir(data(""))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            let v = name.strip_prefix("segment-v")?.strip_suffix(".bin")?;
            let (major, minor) = v.split_once('.')?;
            Some((major.parse().ok()?, minor.parse().ok()?))
        })
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            (1, 0),
            (1, 1),
            (1, 2),
            (1, 3),
            (1, 4),
            (1, 5),
            (1, 6),
            (1, 7),
            (1, 8),
            (1, 9),
            (1, 10),
            (1, 11)
        ]
    );
    assert_eq!(files.last(), Some(&(ABI_MAJOR, ABI_MINOR)));
}

/// The size of the field `f` selects, without a value of `O`.
fn size_of_field<O, T>(_: impl Fn(&O) -> &T) -> usize {
    size_of::<T>()
}

/// `(name, offset, size)` of fields of `$ty`; the name is the field path with dots.
macro_rules! fields {
    ($ty:ty, $prefix:literal: $($($f:ident).+),+ $(,)?) => {
        vec![$((
            format!("{}{}", $prefix, [$(stringify!($f)),+].join(".")),
            offset_of!($ty, $($f).+),
            size_of_field(|x: &$ty| &x.$($f).+),
        )),+]
    };
}

fn layout() -> Vec<(String, usize, usize)> {
    let mut v = fields!(Header, "":
        ident.magic, ident.abi_major, ident.abi_minor, ident.header_size, ident.record_size,
        ident.ring_capacity, ident.ring_offset, ident.site_capacity, ident.site_entry_size,
        ident.sites_offset, ident.module_capacity, ident.module_entry_size,
        ident.modules_offset, ident.total_size, ident.pid, ident.clock_id, ident.start_ticks,
        ident.session, ident.created_ns, ident.created_unix_ns, ident.site_max_frames,
        ident.cmdline_len, ident.cmdline,
        live.state, live.ended_ns, live.write_seq, live.events_written, live.events_dropped,
        live.sites_used, live.sites_dropped, live.modules_used, live.modules_dropped,
        live.overhead_ns, live.stack_captures, live.stack_ns, live.stack_cache_hits,
        live.kinds, live.apis, live.calls,
        python.ident.sites_offset, python.ident.codes_offset, python.ident.site_capacity,
        python.ident.site_entry_size, python.ident.code_capacity, python.ident.code_entry_size,
        python.ident.max_frames, python.ident._reserved,
        python.live.status, python.live.version, python.live.stacks, python.live.truncated,
        python.live.rejected, python.live.finalizing, python.live.codes_dropped,
        python.live.codes_used,
        gpu.state, gpu.mode, gpu.source, gpu.yields, gpu.min_gap_ns, gpu.window_ns, gpu.records,
        gpu.dropped, gpu.late_ns, gpu.traced_ns, gpu.devices,
        job.launcher, job.id_len, job.rank, job.local_rank, job.world_size, job.group_rank,
        job.id,
        control.trace_until_ns, control.trace_granted_ns, control.collectives,
        origin.flags, origin.pid_ns, origin.mnt_ns, origin.ns_dev,
        collectives.calls, collectives.measured, collectives.gpu_ns, collectives.max_ns,
        collectives.first_ns, collectives.last_ns, collectives.unmeasured,
        collectives.comm_id, collectives.comm_rank_1, collectives.comm_size,
        cost.budget_ppm, cost.level, cost.raised, cost.shed_since_ns, cost.stacks_shed,
        cost.gaps_shed, cost.records_shed, cost.looks_skipped, own.host_wait_ns,
    );
    v.extend(fields!(Totals, "totals.": count, total_ns, bytes, max_ns));
    v.extend(fields!(Slot, "slot.": stamp, words));
    v.extend(fields!(GpuDevice, "gpu_device.":
        device, sample_ppm, span_ns, busy_ns, short_gaps, short_gap_ns, final_ns,
    ));
    v.extend(fields!(GpuCollective, "collective.": count, busy_ns));
    v.extend(fields!(SiteEntry, "site.": hash, state, nframes, frames));
    v.extend(fields!(ModuleEntry, "module.":
        state, path_len, build_id_len, _pad, bias, start, end, build_id, path, _reserved,
    ));
    v.extend(fields!(PySiteEntry, "py_site.": state, nframes, flags, waiter_frames, frames));
    v.extend(fields!(PyCodeEntry, "py_code.":
        key, state, file_len, name_len, first_line, _reserved, file, name,
    ));
    v
}

fn contracts() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/contracts.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The cells of each Markdown table row of `doc`.
fn rows(doc: &str) -> Vec<Vec<String>> {
    doc.lines()
        .filter(|l| l.trim_start().starts_with('|'))
        .map(|l| {
            l.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

fn backticked(cell: &str) -> Option<&str> {
    cell.strip_prefix('`')?.strip_suffix('`')
}

#[test]
fn header_and_entry_offsets_are_the_documented_ones() {
    // Rows `| offset | size | `field` | ...` of the layout tables in docs/contracts.md.
    let documented: Vec<(String, usize, usize)> = rows(&contracts())
        .into_iter()
        .filter_map(|r| {
            let off = r.first()?.parse().ok()?;
            let size = r.get(1)?.parse().ok()?;
            Some((backticked(r.get(2)?)?.to_string(), off, size))
        })
        .collect();
    let actual = layout();
    for a in &actual {
        assert!(
            documented.contains(a),
            "docs/contracts.md must document {} at offset {} with size {}; it has {:?}",
            a.0,
            a.1,
            a.2,
            documented.iter().find(|d| d.0 == a.0)
        );
    }
    for d in &documented {
        assert!(
            actual.contains(d),
            "docs/contracts.md documents {d:?}, which is not the layout"
        );
    }
    assert_eq!(size_of::<Ident>(), 1144);
    assert_eq!(offset_of!(Header, live), 1144);
    assert_eq!(size_of::<Live>(), 4696);
    assert_eq!(offset_of!(Header, python), 5840);
    assert_eq!(size_of::<PyIdent>(), 40);
    assert_eq!(size_of::<PyLive>(), 48);
    assert_eq!(size_of::<PyHeader>(), 88);
    assert_eq!(offset_of!(Header, gpu), 5928);
    assert_eq!(size_of::<GpuDevice>(), 48);
    assert_eq!(size_of::<GpuLive>(), 832);
    assert_eq!(offset_of!(Header, job), 6760);
    assert_eq!(size_of::<JobIdent>(), 152);
    assert_eq!(offset_of!(Header, control), 6912);
    assert_eq!(size_of::<Control>(), 272);
    assert_eq!(offset_of!(Header, origin), 7184);
    assert_eq!(size_of::<Origin>(), 32);
    assert_eq!(offset_of!(Header, collectives), 7216);
    assert_eq!(size_of::<CollectiveLive>(), 72);
    assert_eq!(offset_of!(Header, cost), 7288);
    assert_eq!(size_of::<CostLive>(), 56);
    assert_eq!(offset_of!(Header, own), 7344);
    assert_eq!(size_of::<OwnLive>(), 8);
    assert_eq!(size_of::<Header>(), 7352);
    assert_eq!(size_of::<Slot>(), 64);
    assert_eq!(size_of::<SiteEntry>(), 512);
    assert_eq!(size_of::<ModuleEntry>(), 512);
    assert_eq!(size_of::<PySiteEntry>(), 272);
    assert_eq!(size_of::<PyCodeEntry>(), 512);
}

#[test]
fn kind_api_and_direction_numbers_are_the_documented_ones() {
    // Rows `| value | `name` | ...` of the vocabulary tables in docs/contracts.md.
    let documented: Vec<(u8, String)> = rows(&contracts())
        .into_iter()
        .filter_map(|r| Some((r.first()?.parse().ok()?, backticked(r.get(1)?)?.to_string())))
        .collect();
    let mut actual: Vec<(u8, String)> = Vec::new();
    actual.extend(Kind::ALL.iter().map(|k| (*k as u8, k.name().to_string())));
    actual.extend(Api::ALL.iter().map(|a| (*a as u8, a.name().to_string())));
    actual.extend(
        Direction::ALL
            .iter()
            .map(|d| (*d as u8, d.name().to_string())),
    );
    for a in &actual {
        assert!(
            documented.contains(a),
            "docs/contracts.md must list {} = {}",
            a.1,
            a.0
        );
    }
    for (v, name) in &documented {
        let known = Kind::from_name(name)
            .map(|k| k as u8 == *v)
            .or(Api::from_name(name).map(|a| a as u8 == *v))
            .or(Direction::from_name(name).map(|d| d as u8 == *v));
        assert_eq!(known, Some(true), "docs/contracts.md lists {name} = {v}");
    }
}
