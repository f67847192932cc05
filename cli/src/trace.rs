//! `--trace FILE`: every recorded event as a Chrome trace event / Perfetto JSON file.
//!
//! The aggregator keeps distributions, not events, so a run that asks for a trace also keeps
//! the records it receives in a [`TraceSink`], bounded to `limit` events (64 bytes each): the
//! first `limit` are kept, later ones only counted, and the file's `otherData` and the run's
//! warnings say when it was cut. Records the reader never received (`lost_records`) are in
//! neither the trace nor the percentiles.
//!
//! Each event is a complete event (`"ph": "X"`): `pid`, `tid`, `ts` and `dur` in µs on
//! CLOCK_MONOTONIC (ns precision), `name` the CUDA function, `cat` the kind, and `args` with
//! `bytes`, `direction` (copies), `stream`, `device`, `site` (the call-site id) and `frame`
//! (the innermost symbolized frame outside the CUDA runtime and syncspy). Processes are named
//! after their command lines with `process_name` metadata events.
//!
//! The GPU's idle gaps (`cat` `gpu_idle`, `name` `GPU idle`, `args.device`) are on a track of
//! their own per device: `tid` [`gpu_tid`]`(device)`, above any thread id, named `GPU N idle`
//! by a `thread_name` metadata event and sorted above the process's threads.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::Path;

use syncspy_abi::{Api, Direction, Kind, Record};

use syncspy_read::follow::{Followed, SegmentKey, SiteRef};
use syncspy_read::report::{site_location, write_atomic_with};
use syncspy_read::symbolize::Symbolizer;

/// Events a trace keeps by default: ~128 MiB of memory, a few hundred MB of JSON.
pub const DEFAULT_TRACE_LIMIT: usize = 2_000_000;
/// `otherData.syncspy_trace` of the files this code writes.
pub const TRACE_VERSION: u32 = 1;

/// One record, and which followed segment it came from.
#[derive(Clone, Copy, Debug)]
pub struct TraceEvent {
    /// The segment it came from, as an index into [`TraceSink::segments`] (a key per event
    /// would make events 80 bytes instead of 64).
    pub segment: u32,
    pub record: Record,
}

/// The records kept for a trace: the first `limit`, plus a count of all.
#[derive(Debug)]
pub struct TraceSink {
    limit: usize,
    events: Vec<TraceEvent>,
    seen: u64,
    /// The segments events came from, in the order first seen.
    segments: Vec<SegmentKey>,
}

impl TraceSink {
    pub fn new(limit: usize) -> TraceSink {
        TraceSink {
            limit,
            // Grows as events come; a run with few events costs little.
            events: Vec::new(),
            seen: 0,
            segments: Vec::new(),
        }
    }

    /// Keeps the record if there is room; counts it either way.
    pub fn push(&mut self, segment: SegmentKey, record: Record) {
        self.seen += 1;
        if self.events.len() < self.limit {
            // Records come in runs from one segment: the last one is the usual answer.
            let segment = match self.segments.iter().rposition(|k| *k == segment) {
                Some(i) => i,
                None => {
                    self.segments.push(segment);
                    self.segments.len() - 1
                }
            } as u32;
            self.events.push(TraceEvent { segment, record });
        }
    }

    /// The segments of the kept events (`TraceEvent::segment` indexes this).
    pub fn segments(&self) -> &[SegmentKey] {
        &self.segments
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn events(&self) -> &[TraceEvent] {
        &self.events
    }

    /// Records offered to the sink (kept or not).
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// Records not kept because the limit was reached.
    pub fn cut(&self) -> u64 {
        self.seen - self.events.len() as u64
    }
}

/// The track of device `device`'s idle gaps: a `tid` above any thread id (Linux's are at most
/// 2^22), one per device.
pub const GPU_TID_BASE: u64 = 1 << 30;

/// The trace `tid` of the GPU idle track of `device`.
pub fn gpu_tid(device: i32) -> u64 {
    GPU_TID_BASE + u64::from(device.max(0).unsigned_abs())
}

/// ns as µs with three decimals, exactly (no float rounding).
fn micros(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string())
}

/// The trace's event list being written: a comma before each event but the first.
struct EventList<'w> {
    w: &'w mut dyn Write,
    first: bool,
}

impl EventList<'_> {
    /// The writer, ready for the next event.
    fn next(&mut self) -> io::Result<&mut dyn Write> {
        if self.first {
            self.first = false;
        } else {
            self.w.write_all(b",\n")?;
        }
        Ok(&mut *self.w)
    }
}

/// Writes the trace of `sink` to `w`. `processes` are the follower's segments (found by
/// `TraceEvent::segment`); `sym` symbolizes their call sites (its cache is shared with the
/// report, so sites already in the report cost nothing).
pub fn write_to(
    w: &mut dyn Write,
    sink: &TraceSink,
    processes: &[Followed],
    command: &[String],
    sym: &mut Symbolizer,
) -> io::Result<()> {
    writeln!(w, "{{\"traceEvents\": [")?;
    let mut list = EventList { w, first: true };
    for f in processes {
        write!(
            list.next()?,
            r#"{{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":{}}}}}"#,
            f.agg().pid(),
            json_str(&format!(
                "{} (pid {})",
                f.agg().argv().join(" "),
                f.agg().pid()
            ))
        )?;
    }
    let by_key: HashMap<SegmentKey, &Followed> = processes.iter().map(|f| (f.key(), f)).collect();
    write_gpu_tracks(&mut list, sink, &by_key)?;
    let mut frames: HashMap<SiteRef, Option<String>> = HashMap::new();
    let mut modules: HashMap<SegmentKey, Vec<syncspy_abi::modules::Module>> = HashMap::new();
    for e in sink.events() {
        let Some(key) = sink.segments.get(e.segment as usize).copied() else {
            continue;
        };
        let Some(f) = by_key.get(&key) else {
            continue;
        };
        let r = &e.record;
        if r.api == Api::StallEvents {
            // The GPU idle behind a stall (ABI 1.10): a length, not a placed gap.
            continue;
        }
        if r.kind == Kind::GpuIdle {
            write_gpu_gap(list.next()?, f.agg().pid(), r)?;
            continue;
        }
        let frame = frames
            .entry(SiteRef {
                segment: key,
                site: r.site,
            })
            .or_insert_with(|| {
                let m = modules.entry(key).or_insert_with(|| f.reader().modules());
                site_location(f, r.site, m, sym)
            })
            .clone();
        write_call(list.next()?, f.agg().pid(), r, frame.as_deref())?;
    }
    write!(
        list.w,
        "\n],\n\"displayTimeUnit\": \"ns\",\n\"otherData\": {}\n}}\n",
        trace_meta(sink, command)
    )
}

/// A named track per process and device that has idle gaps, above the threads.
fn write_gpu_tracks(
    list: &mut EventList<'_>,
    sink: &TraceSink,
    by_key: &HashMap<SegmentKey, &Followed>,
) -> io::Result<()> {
    let gpu_tracks: std::collections::BTreeSet<(u32, i32)> = sink
        .events()
        .iter()
        .filter(|e| e.record.kind == Kind::GpuIdle && e.record.api != Api::StallEvents)
        .filter_map(|e| {
            let key = sink.segments.get(e.segment as usize)?;
            Some((by_key.get(key)?.agg().pid(), e.record.device))
        })
        .collect();
    for (pid, device) in &gpu_tracks {
        let tid = gpu_tid(*device);
        write!(
            list.next()?,
            r#"{{"ph":"M","name":"thread_name","pid":{pid},"tid":{tid},"args":{{"name":"GPU {device} idle"}}}}"#
        )?;
        write!(
            list.next()?,
            r#"{{"ph":"M","name":"thread_sort_index","pid":{pid},"tid":{tid},"args":{{"sort_index":{}}}}}"#,
            i64::from(*device) - 1000
        )?;
    }
    Ok(())
}

/// A GPU idle gap of process `pid`, on its device's track.
fn write_gpu_gap(w: &mut dyn Write, pid: u32, r: &Record) -> io::Result<()> {
    write!(
        w,
        r#"{{"ph":"X","pid":{},"tid":{},"ts":{},"dur":{},"name":"GPU idle","cat":{},"args":{{"device":{}}}}}"#,
        pid,
        gpu_tid(r.device),
        micros(r.start_ns),
        micros(r.duration_ns),
        json_str(r.kind.name()),
        r.device
    )
}

/// A CUDA call of process `pid` on its thread's track, with its call site's `frame`.
fn write_call(w: &mut dyn Write, pid: u32, r: &Record, frame: Option<&str>) -> io::Result<()> {
    write!(
        w,
        r#"{{"ph":"X","pid":{},"tid":{},"ts":{},"dur":{},"name":{},"cat":{},"args":{{"bytes":{},"stream":"{:#x}","device":{},"site":{}"#,
        pid,
        r.tid,
        micros(r.start_ns),
        micros(r.duration_ns),
        json_str(r.api.name()),
        json_str(r.kind.name()),
        r.bytes,
        r.stream,
        r.device,
        r.site
    )?;
    if r.direction != Direction::None {
        write!(w, r#","direction":{}"#, json_str(r.direction.name()))?;
    }
    if r.result != 0 {
        write!(w, r#","result":{}"#, r.result)?;
    }
    if let Some(fr) = frame {
        write!(w, r#","frame":{}"#, json_str(fr))?;
    }
    w.write_all(b"}}")
}

/// The trace's `otherData`: its version, command, clock, and whether it was cut.
fn trace_meta(sink: &TraceSink, command: &[String]) -> serde_json::Value {
    let cut = sink.cut();
    serde_json::json!({
        "syncspy_trace": TRACE_VERSION,
        "command": command,
        "clock": "CLOCK_MONOTONIC; ts and dur in microseconds",
        "events": sink.events().len(),
        "recorded_events": sink.seen(),
        "limit": sink.limit(),
        "cut": cut > 0,
        "cut_events": cut,
        "note": if cut > 0 {
            format!(
                "cut: only the first {} of {} recorded events are here (raise --trace-limit)",
                sink.events().len(),
                sink.seen()
            )
        } else {
            "every recorded event is here; records the reader lost (lost_records) are not"
                .to_string()
        },
    })
}

/// Writes the trace file atomically (a temporary file in the same folder, then a rename).
pub fn write(
    path: &Path,
    sink: &TraceSink,
    processes: &[Followed],
    command: &[String],
    sym: &mut Symbolizer,
) -> io::Result<()> {
    write_atomic_with(path, |w| write_to(w, sink, processes, command, sym))
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncspy_abi::{Api, SegmentParams, SegmentWriter};
    use syncspy_read::follow::Follower;
    use syncspy_test_support::{rec, TempDir};

    #[test]
    fn the_sink_keeps_the_first_events_and_counts_the_rest() {
        let mut s = TraceSink::new(2);
        let key = SegmentKey {
            process: syncspy_read::follow::ProcessKey {
                pid: 1,
                start_ticks: 2,
            },
            created_ns: 3,
        };
        for i in 0..5 {
            s.push(
                key,
                rec(Kind::DeviceSync, Api::CudaDeviceSynchronize, i, 0, 0),
            );
        }
        assert_eq!(s.events().len(), 2);
        assert_eq!(s.events()[1].record.duration_ns, 1);
        assert_eq!((s.seen(), s.cut()), (5, 3));
        assert_eq!(micros(1_234_567), "1234.567");
        assert_eq!(micros(5), "0.005");
        // The memory bound in the docs and --help.
        assert!(std::mem::size_of::<TraceEvent>() <= 64);
    }

    #[test]
    fn a_followed_segment_becomes_valid_trace_json() {
        let dir = TempDir::new("trace");
        let mut p = SegmentParams::new(31, 7);
        p.session = 9;
        p.ring_capacity = 64;
        p.site_capacity = 16;
        p.module_capacity = 8;
        p.cmdline = b"./train\0\"quoted\"\0".to_vec();
        let w = SegmentWriter::create(dir.path(), &p).unwrap();
        let mut copy = rec(Kind::MemcpyPageable, Api::CudaMemcpyAsync, 2_500, 4096, 0);
        copy.start_ns = 10_000_000_123;
        copy.stream = 0x5000;
        copy.tid = 77;
        w.record(&copy);
        w.record(&rec(
            Kind::StreamSync,
            Api::CudaStreamSynchronize,
            900,
            0,
            0,
        ));
        w.record(&rec(
            Kind::StreamSync,
            Api::CudaStreamSynchronize,
            800,
            0,
            0,
        ));
        w.mark_exited(0);

        let mut f: Follower = Follower::new(dir.path(), Some(9));
        let mut sink = TraceSink::new(2);
        f.scan().unwrap();
        f.final_drain_each(|key, _, r| sink.push(key, *r));
        let sink = &sink;
        assert_eq!((sink.seen(), sink.cut()), (3, 1));
        let mut out = Vec::new();
        let mut sym = Symbolizer::new();
        write_to(&mut out, sink, f.processes(), &["./train".into()], &mut sym).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let ev = v["traceEvents"].as_array().unwrap();
        assert_eq!(ev.len(), 3);
        assert_eq!(ev[0]["ph"], "M");
        assert_eq!(ev[0]["args"]["name"], "./train \"quoted\" (pid 31)");
        let x = &ev[1];
        assert_eq!(x["ph"], "X");
        assert_eq!(x["pid"], 31);
        assert_eq!(x["tid"], 77);
        assert_eq!(x["ts"].as_f64().unwrap(), 10_000_000.123);
        assert_eq!(x["dur"].as_f64().unwrap(), 2.5);
        assert_eq!(x["name"], "cudaMemcpyAsync");
        assert_eq!(x["cat"], "memcpy_pageable");
        assert_eq!(x["args"]["bytes"], 4096);
        assert_eq!(x["args"]["direction"], "h2d");
        assert_eq!(x["args"]["stream"], "0x5000");
        assert_eq!(x["args"]["device"], 0);
        assert!(x["args"].get("frame").is_none(), "site 0 has no frame");
        assert_eq!(ev[2]["cat"], "stream_sync");
        assert!(ev[2]["args"].get("direction").is_none());
        let meta = &v["otherData"];
        assert_eq!(meta["syncspy_trace"], 1);
        assert_eq!(meta["events"], 2);
        assert_eq!(meta["recorded_events"], 3);
        assert_eq!(meta["cut"], true);
        assert!(meta["note"].as_str().unwrap().contains("first 2 of 3"));
        assert_eq!(v["displayTimeUnit"], "ns");
    }

    #[test]
    fn gpu_idle_gaps_are_on_a_named_track_per_device() {
        let dir = TempDir::new("trace-gpu");
        let mut p = SegmentParams::new(41, 7);
        p.session = 9;
        p.ring_capacity = 64;
        p.site_capacity = 16;
        p.module_capacity = 8;
        p.cmdline = b"./train\0".to_vec();
        let w = SegmentWriter::create(dir.path(), &p).unwrap();
        w.record_gpu_idle(0, 5_000_000, 2_000);
        w.record_gpu_idle(1, 6_000_000, 3_000);
        w.record_gpu_idle(0, 7_000_000, 4_000);
        let mut sync = rec(Kind::StreamSync, Api::CudaStreamSynchronize, 900, 0, 0);
        sync.tid = 77;
        w.record(&sync);
        w.mark_exited(0);

        let mut f: Follower = Follower::new(dir.path(), Some(9));
        let mut sink = TraceSink::new(100);
        f.scan().unwrap();
        f.final_drain_each(|key, _, r| sink.push(key, *r));
        let mut out = Vec::new();
        let mut sym = Symbolizer::new();
        write_to(
            &mut out,
            &sink,
            f.processes(),
            &["./train".into()],
            &mut sym,
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let ev = v["traceEvents"].as_array().unwrap();
        let named: Vec<(u64, &str)> = ev
            .iter()
            .filter(|e| e["name"] == "thread_name")
            .map(|e| {
                (
                    e["tid"].as_u64().unwrap(),
                    e["args"]["name"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            named,
            [(gpu_tid(0), "GPU 0 idle"), (gpu_tid(1), "GPU 1 idle")]
        );
        assert_ne!(gpu_tid(0), gpu_tid(1));
        let gaps: Vec<(u64, f64, &str)> = ev
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == "gpu_idle")
            .map(|e| {
                (
                    e["tid"].as_u64().unwrap(),
                    e["dur"].as_f64().unwrap(),
                    e["name"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            gaps,
            [
                (gpu_tid(0), 2.0, "GPU idle"),
                (gpu_tid(1), 3.0, "GPU idle"),
                (gpu_tid(0), 4.0, "GPU idle")
            ]
        );
        // Host stalls stay on their thread.
        let host: Vec<u64> = ev
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == "stream_sync")
            .map(|e| e["tid"].as_u64().unwrap())
            .collect();
        assert_eq!(host, [77]);
    }
}
