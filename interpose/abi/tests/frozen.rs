//! Frozen-file tests of the segment format.
//!
//! `tests/data/segment-v1.0.bin` is a segment written once by ABI 1.0's writer and checked in
//! (tests/data/README.md says how, and when another file may be added). Reading it with
//! today's reader, and rewriting it with today's writer, turns the versioning rules of
//! docs/contracts.md into tests: the header fields sit at the documented offsets, a reader
//! follows the offsets in the header and accepts a newer minor with a larger header, and an
//! unknown major is refused with a message that says what to do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};

use syncspy_abi::layout::{
    Header, Ident, Live, Totals, TotalsSnapshot, ABI_MAJOR, ABI_MINOR, CLOCK_MONOTONIC,
    HEADER_RESERVED, MAGIC,
};
use syncspy_abi::modules::{Module, ModuleEntry};
use syncspy_abi::record::{
    Record, FLAG_HOST_PINNED, FLAG_PER_THREAD, FLAG_STACK_TRUNCATED, NO_SITE,
};
use syncspy_abi::ring::{Cursor, PollStats, Slot};
use syncspy_abi::segment::{OpenError, ProcState, SegmentParams, SegmentReader, SegmentWriter};
use syncspy_abi::sites::SiteEntry;
use syncspy_abi::{Api, Direction, Kind};

/// The frozen ABI 1.0 segment.
const V1_0: &str = "segment-v1.0.bin";

// What the v1.0 file holds. Changing any of it changes the file: add a new frozen file
// instead of editing these (tests/data/README.md).
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

/// Writes the v1.0 segment's contents with the current writer; returns the file's path.
fn write_v1_0(dir: &Path) -> PathBuf {
    let mut p = SegmentParams::new(PID, START_TICKS);
    // The smallest tables the writer allows, to keep the file small.
    p.ring_capacity = 16;
    p.site_capacity = 16;
    p.module_capacity = 16;
    p.session = SESSION;
    p.cmdline = CMDLINE.to_vec();
    let w = SegmentWriter::create(dir, &p).unwrap();
    assert_eq!(w.intern_site(&STACK_A), Some(SITE_A));
    assert_eq!(w.intern_site(&STACK_B), Some(SITE_B));
    assert!(w.add_module(
        MODULE_PATH.as_bytes(),
        0x7f00_0000_0000,
        0x7f00_0000_1000,
        0x7f00_0010_0000,
        &MODULE_BUILD_ID,
    ));
    for r in records() {
        w.record(&r);
    }
    let live = w.live();
    live.calls[Api::CudaMemcpyAsync as usize].add_untimed(65_536);
    live.calls[Api::CudaMemcpyAsync as usize].add_untimed(65_536);
    live.calls[Api::CudaFree as usize].add_untimed(0);
    let relaxed = std::sync::atomic::Ordering::Relaxed;
    live.overhead_ns.store(12_345, relaxed);
    live.stack_captures.store(2, relaxed);
    live.stack_ns.store(6_789, relaxed);
    live.stack_cache_hits.store(5, relaxed);
    w.mark_exited(EXIT_STATUS);
    w.path().to_path_buf()
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

/// Everything a reader finds in the v1.0 contents, wherever the regions are placed.
fn assert_v1_0_contents(r: &SegmentReader) {
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

    let (got, st) = drain(r);
    assert_eq!(
        st,
        PollStats {
            delivered: 8,
            lost: 0,
            corrupt: 0
        }
    );
    assert_eq!(got, records());

    let live = r.live();
    assert_eq!(r.head(), 8);
    assert_eq!(
        live.events_dropped
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert_eq!(live.written(), 8);
    // The exact totals agree with the records, kind by kind and API by API.
    let all = records();
    let sums = |of: Vec<&Record>| TotalsSnapshot {
        count: of.len() as u64,
        total_ns: of.iter().map(|x| x.duration_ns).sum(),
        bytes: of.iter().map(|x| x.bytes).sum(),
        max_ns: of.iter().map(|x| x.duration_ns).max().unwrap_or(0),
    };
    for k in Kind::ALL {
        let want = sums(all.iter().filter(|x| x.kind == *k).collect());
        assert_eq!(live.kinds[*k as usize].snapshot(), want, "{k}");
    }
    for a in Api::ALL {
        let want = sums(all.iter().filter(|x| x.api == *a).collect());
        assert_eq!(live.apis[*a as usize].snapshot(), want, "{a}");
    }
    let ss = live.kinds[Kind::StreamSync as usize].snapshot();
    assert_eq!(
        (ss.count, ss.total_ns, ss.max_ns),
        (2, 2_500_000, 2_000_000)
    );
    let mc = live.apis[Api::CudaMemcpyAsync as usize].snapshot();
    assert_eq!((mc.count, mc.bytes, mc.total_ns), (2, 4096 + 512, 159_000));
    let calls = live.calls[Api::CudaMemcpyAsync as usize].snapshot();
    assert_eq!((calls.count, calls.bytes, calls.total_ns), (2, 131_072, 0));
    assert_eq!(live.calls[Api::CudaFree as usize].snapshot().count, 1);
    let relaxed = std::sync::atomic::Ordering::Relaxed;
    assert_eq!(live.overhead_ns.load(relaxed), 12_345);
    assert_eq!(live.stack_captures.load(relaxed), 2);
    assert_eq!(live.stack_ns.load(relaxed), 6_789);
    assert_eq!(live.stack_cache_hits.load(relaxed), 5);
    assert_eq!(live.sites_used.load(relaxed), 2);
    assert_eq!(live.modules_used.load(relaxed), 1);
    assert_eq!(
        (
            live.sites_dropped.load(relaxed),
            live.modules_dropped.load(relaxed)
        ),
        (0, 0)
    );
    assert!(live.ended_ns.load(relaxed) > 0);

    assert_eq!(r.site(SITE_A), Some(STACK_A.to_vec()));
    assert_eq!(r.site(SITE_B), Some(STACK_B.to_vec()));
    assert_eq!(r.site(NO_SITE), None);
    assert_eq!(r.site(1), None);
    assert_eq!(r.modules(), vec![expected_module()]);
}

fn put(bytes: &mut [u8], at: usize, v: &[u8]) {
    bytes[at..at + v.len()].copy_from_slice(v);
}

fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap())
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
    assert_eq!(
        (
            id.ring_offset,
            id.sites_offset,
            id.modules_offset,
            id.total_size
        ),
        (8192, 9216, 17408, 25_600)
    );
    assert_v1_0_contents(&r);
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

#[test]
fn the_current_writer_reproduces_the_v1_0_file_byte_for_byte() {
    let dir = TempDir::new("rewrite");
    let fresh = std::fs::read(write_v1_0(&dir.0)).unwrap();
    let frozen = match std::fs::read(data(V1_0)) {
        Ok(b) => b,
        Err(e) => {
            // Keep the new file where a person can look at it (never overwrite the frozen one
            // from a test).
            let keep =
                std::env::temp_dir().join(format!("syncspy-segment-{}.bin", std::process::id()));
            std::fs::write(&keep, &fresh).unwrap();
            panic!(
                "{}: {e}; the current writer's file is at {}",
                V1_0,
                keep.display()
            );
        }
    };
    let (fresh, frozen) = (masked(fresh), masked(frozen));
    assert_eq!(fresh.len(), frozen.len(), "segment size changed");
    let differ: Vec<usize> = (0..fresh.len())
        .filter(|i| fresh[*i] != frozen[*i])
        .collect();
    assert!(
        differ.is_empty(),
        "the writer changed {} bytes of the v1.0 layout, first at offset {:?}: fields may only \
         be appended (docs/contracts.md)",
        differ.len(),
        &differ[..differ.len().min(8)]
    );
}

#[test]
fn a_newer_minor_with_a_larger_header_and_moved_regions_is_read() {
    let mut bytes = std::fs::read(data(V1_0)).unwrap();
    let base = size_of::<Header>();
    // A v1.1 writer that appended 64 bytes of fields after `live` and put 4 KiB more before
    // the ring: the reader must ignore the first and follow the offsets for the second.
    put(
        &mut bytes,
        offset_of!(Ident, abi_minor),
        &1u16.to_ne_bytes(),
    );
    put(
        &mut bytes,
        offset_of!(Ident, header_size),
        &((base + 64) as u32).to_ne_bytes(),
    );
    bytes[base..base + 64].fill(0xa5);
    let gap = 4096u64;
    for at in [
        offset_of!(Ident, ring_offset),
        offset_of!(Ident, sites_offset),
        offset_of!(Ident, modules_offset),
        offset_of!(Ident, total_size),
    ] {
        let v = get_u64(&bytes, at) + gap;
        put(&mut bytes, at, &v.to_ne_bytes());
    }
    bytes.splice(HEADER_RESERVED..HEADER_RESERVED, vec![0u8; gap as usize]);

    let dir = TempDir::new("minor");
    let f = dir.0.join("syncspy-4242-777");
    std::fs::write(&f, &bytes).unwrap();
    let r = SegmentReader::open(&f).unwrap();
    assert_eq!((r.ident().abi_major, r.ident().abi_minor), (1, 1));
    assert_eq!(r.ident().header_size as usize, base + 64);
    assert_eq!(r.ident().ring_offset, 8192 + gap);
    assert_v1_0_contents(&r);

    // The room for appended fields ends where the ring may start at the earliest.
    put(
        &mut bytes,
        offset_of!(Ident, header_size),
        &(HEADER_RESERVED as u32 + 1).to_ne_bytes(),
    );
    std::fs::write(&f, &bytes).unwrap();
    assert!(matches!(
        SegmentReader::open(&f),
        Err(OpenError::Corrupt("header_size"))
    ));
}

#[test]
fn an_unknown_major_is_refused_with_a_clear_error() {
    let frozen = std::fs::read(data(V1_0)).unwrap();
    let dir = TempDir::new("major");
    let f = dir.0.join("syncspy-4242-777");
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
            Ok(_) => panic!("major {major} was accepted"),
        };
        assert!(
            matches!(err, OpenError::Version { major: m, minor: 4 } if m == major),
            "{err:?}"
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

#[test]
fn this_build_writes_abi_1_0() {
    // The frozen file is the reference for ABI 1.0; a minor bump adds a file next to it.
    assert_eq!((ABI_MAJOR, ABI_MINOR), (1, 0));
    assert_eq!(&MAGIC, b"SYNCSPY\0");
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
    );
    v.extend(fields!(Totals, "totals.": count, total_ns, bytes, max_ns));
    v.extend(fields!(Slot, "slot.": stamp, words));
    v.extend(fields!(SiteEntry, "site.": hash, state, nframes, frames));
    v.extend(fields!(ModuleEntry, "module.":
        state, path_len, build_id_len, _pad, bias, start, end, build_id, path, _reserved,
    ));
    v
}

fn contracts() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/contracts.md");
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
    assert_eq!(size_of::<Header>(), 5840);
    assert_eq!(size_of::<Slot>(), 64);
    assert_eq!(size_of::<SiteEntry>(), 512);
    assert_eq!(size_of::<ModuleEntry>(), 512);
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
