//! `syncspy snapshot` (hidden): one process's stalls in a time window, as JSON, read from
//! its segment without taking it over (no lease, no registration, nothing removed).
//!
//! The Python package (`python/syncspy`) runs it on its own process's segment at the end of
//! `with syncspy.watch():` and the pytest plugin at the end of each test: a process cannot
//! follow its own ring from inside a hook, and reading it here reuses the reader's
//! aggregation and symbolization (Python lines from the segment's tables) with no build
//! dependency for the Python side.
//!
//! Stalls are grouped by (kind, API, location): what a Python user calls a site, one line.
//!
//! In the code its output is the *window* ([`Window`]): the command is named `snapshot`, but
//! its JSON is not the agent's `/api/v1/snapshot` ([`syncspy_read::snapshot`]); the two
//! formats share only the name of their version field, `syncspy_snapshot`
//! (docs/contracts.md).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use syncspy_abi::kinds::{Api, Kind};
use syncspy_abi::Record;
use syncspy_read::follow::{Followed, Follower, SegmentKey};
use syncspy_read::names::{ApiName, KindName};
use syncspy_read::python::{self, PyFrame, PythonReport};
use syncspy_read::report;
use syncspy_read::symbolize::Symbolizer;

/// The window format's version (its field `syncspy_snapshot`; the agent's snapshot counts its
/// own, `syncspy_read::snapshot::SNAPSHOT_VERSION`).
pub const WINDOW_VERSION: u32 = 1;

/// What to read.
#[derive(Debug, Default)]
pub struct WindowOptions {
    /// The segment file.
    pub segment: PathBuf,
    /// Records whose call began at or after this CLOCK_MONOTONIC ns.
    pub since_ns: u64,
    /// ... and before this one (`u64::MAX`: no end).
    pub until_ns: u64,
    /// Only these kernel thread ids (empty: every thread).
    pub tids: Vec<u32>,
}

/// One site in the window.
#[derive(Debug, Serialize)]
pub struct WindowStall {
    pub kind: KindName,
    pub api: ApiName,
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    pub bytes: u64,
    /// `file:line in function` (the user's Python line when there is one), or the native
    /// frame `syncspy report` names.
    pub location: Option<String>,
    /// The user's Python frame (the location's), when the site has Python frames.
    pub file: Option<String>,
    pub line: Option<u32>,
    pub function: Option<String>,
    /// The whole Python stack, innermost first.
    pub python: Vec<PyFrame>,
    /// Threads that made these calls.
    pub tids: Vec<u32>,
}

/// The window's report.
#[derive(Debug, Serialize)]
pub struct Window {
    pub syncspy_snapshot: u32,
    pub pid: u32,
    pub segment: String,
    pub python: Option<PythonReport>,
    /// Records of the whole segment that readers could not get (overwritten in the ring
    /// before this read): when not 0, the window may miss some.
    pub lost_records: u64,
    pub since_ns: u64,
    pub until_ns: u64,
    pub stalls: Vec<WindowStall>,
}

#[derive(Default)]
struct Acc {
    count: u64,
    total_ns: u64,
    max_ns: u64,
    bytes: u64,
    tids: Vec<u32>,
}

impl Acc {
    fn add(&mut self, r: &Record) {
        self.count += 1;
        self.total_ns = self.total_ns.saturating_add(r.duration_ns);
        self.max_ns = self.max_ns.max(r.duration_ns);
        self.bytes = self.bytes.saturating_add(r.bytes);
        if !self.tids.contains(&r.tid) {
            self.tids.push(r.tid);
        }
    }
}

impl WindowStall {
    /// Adds a row that reads alike (same kind, API and location).
    fn absorb(&mut self, row: WindowStall) {
        self.count += row.count;
        self.total_ns = self.total_ns.saturating_add(row.total_ns);
        self.max_ns = self.max_ns.max(row.max_ns);
        self.bytes = self.bytes.saturating_add(row.bytes);
        for t in row.tids {
            if !self.tids.contains(&t) {
                self.tids.push(t);
            }
        }
    }
}

/// Reads the window. Errors are sentences for the Python user.
pub fn read(opts: &WindowOptions) -> Result<Window, String> {
    let seg = &opts.segment;
    let (mut f, key, pid) = follow_segment(seg)?;
    let acc = drain_window(&mut f, key, opts);
    let p = f
        .get(key)
        .ok_or_else(|| format!("{}: lost while reading", seg.display()))?;
    let modules = p.reader().modules();
    let mut sym = Symbolizer::new();
    // One row per (kind, API, location): sites that read alike are one, as in every view.
    let mut rows: BTreeMap<(Kind, Api, String), WindowStall> = BTreeMap::new();
    let mut unnamed: Vec<WindowStall> = Vec::new();
    for ((kind, api, site), a) in acc {
        let location = report::site_location(p, site, &modules, &mut sym);
        let row = stall_row(p, (kind, api, site), a, location.clone());
        match location {
            Some(l) => match rows.get_mut(&(kind, api, l.clone())) {
                Some(r) => r.absorb(row),
                None => {
                    rows.insert((kind, api, l), row);
                }
            },
            None => unnamed.push(row),
        }
    }
    let mut stalls: Vec<WindowStall> = rows.into_values().chain(unnamed).collect();
    stalls.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(b.count.cmp(&a.count)));
    Ok(Window {
        syncspy_snapshot: WINDOW_VERSION,
        pid,
        segment: seg.display().to_string(),
        python: PythonReport::of(&p.reader().python_status()),
        lost_records: p.agg().lost(),
        since_ns: opts.since_ns,
        until_ns: opts.until_ns,
        stalls,
    })
}

/// A follower of the segment file `seg` alone (its folder scanned for its pid), its key and
/// its pid.
fn follow_segment(seg: &Path) -> Result<(Follower<()>, SegmentKey, u32), String> {
    let name = seg
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("{}: not a segment file name", seg.display()))?;
    let (pid, _) = syncspy_abi::segment::parse_segment_name(name)
        .ok_or_else(|| format!("{}: not a segment file name", seg.display()))?;
    let dir = match seg.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut f: Follower<()> = Follower::new(dir, None).with_pid(Some(pid));
    f.scan()
        .map_err(|e| format!("cannot read the folder of {}: {e}", seg.display()))?;
    let key: SegmentKey = match f
        .processes()
        .iter()
        .find(|p| same_file(p.reader().path(), seg))
    {
        Some(p) => p.key(),
        None => {
            let why = f
                .problems()
                .iter()
                .find(|p| same_file(p.path(), seg))
                .map(|p| p.error().to_string())
                .unwrap_or_else(|| "no such segment".to_string());
            return Err(format!("{}: {why}", seg.display()));
        }
    };
    Ok((f, key, pid))
}

/// The segment's host stalls that started in the window (and on its threads, when some
/// are asked for), by kind, API and call site: its ring drained to the end.
fn drain_window(
    f: &mut Follower<()>,
    key: SegmentKey,
    opts: &WindowOptions,
) -> BTreeMap<(Kind, Api, u32), Acc> {
    let mut acc: BTreeMap<(Kind, Api, u32), Acc> = BTreeMap::new();
    loop {
        let n = f.poll_each(|k, _, r| {
            if k != key
                || !r.kind.is_host_stall()
                || r.start_ns < opts.since_ns
                || r.start_ns >= opts.until_ns
                || (!opts.tids.is_empty() && !opts.tids.contains(&r.tid))
            {
                return;
            }
            acc.entry((r.kind, r.api, r.site)).or_default().add(r);
        });
        if n == 0 {
            break;
        }
    }
    acc
}

/// The row of one call site of `p`: its totals, its location and Python stack, the user's
/// frame in it.
fn stall_row(
    p: &Followed<()>,
    (kind, api, site): (Kind, Api, u32),
    a: Acc,
    location: Option<String>,
) -> WindowStall {
    let py: Vec<PyFrame> = if site != 0 {
        p.reader()
            .python_stack(site)
            .map(|s| python::frames_of(&s))
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let user = python::user_frame(&py).map(|i| py[i].clone());
    WindowStall {
        kind: kind.into(),
        api: api.into(),
        count: a.count,
        total_ns: a.total_ns,
        max_ns: a.max_ns,
        bytes: a.bytes,
        location,
        file: user.as_ref().map(|u| u.file.clone()),
        line: user.as_ref().map(|u| u.line),
        function: user.as_ref().map(|u| u.function.clone()),
        python: py,
        tids: a.tids,
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    a == b || a.file_name() == b.file_name() && a.parent().map(canon) == b.parent().map(canon)
}

fn canon(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}
