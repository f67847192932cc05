//! The shared-memory segment that `libsyncspy.so` writes and every reader (agent, monitor,
//! tests) follows. This crate is the boundary between the two sides: it owns the layout, the
//! version, and the lock-free protocols (ring, call-site table, module map). It depends on
//! `libc` only.
//!
//! A segment is one file, `syncspy-<pid>-<start ticks>` in `SYNCSPY_DIR`:
//! ```text
//! [ Header (ident: written once, live: atomics) | ring of Slots | site table | module map
//!   | Python site table | code table ]   (the last two only for a process with Python)
//! ```
//! The header ends with the Python part (ABI 1.1), the GPU part (ABI 1.2, `gpu`) and the
//! job part (ABI 1.3, `job`), the control part (ABI 1.4, `control`) and the origin part
//! (ABI 1.5, `origin`: namespaces, and the lock that shows the writer lives), the collectives
//! part (ABI 1.8, `collectives`) and the cost part (ABI 1.9, `cost`: the library's budget and
//! what it shed).
//! Fields are only ever appended; a reader rejects an unknown major version and tolerates a
//! larger header.

pub mod clock;
pub mod collectives;
pub mod control;
pub mod cost;
pub mod fault;
pub mod gpu;
pub mod job;
pub mod kinds;
pub mod layout;
pub mod lifecycle;
pub mod live;
pub mod modules;
pub mod objects;
pub mod origin;
pub mod python;
pub mod record;
pub mod ring;
pub mod segment;
pub mod sites;

pub use kinds::{Api, Direction, Kind};
pub use layout::{Header, Ident, Live, Totals};
pub use record::{Record, RecordError};
pub use ring::{Cursor, PollStats};
pub use segment::{
    parse_segment_name, process_running, process_start_ticks, process_uids, segment_name,
    CreateError, OpenError, ProcState, SegmentParams, SegmentReader, SegmentWriter,
};
