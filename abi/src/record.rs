//! One event as it travels through the ring: seven 64-bit words behind a stamp.

use crate::kinds::{Api, Direction, Kind};

/// Payload words per ring slot.
pub const RECORD_WORDS: usize = 7;
/// `Record::site` value for "no call site captured".
pub const NO_SITE: u32 = 0;

/// One CUDA call that made (or may have made) the host wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub kind: Kind,
    pub api: Api,
    pub direction: Direction,
    /// `FLAG_*` bits.
    pub flags: u8,
    /// CUDA device ordinal current on the calling thread (-1 when unknown).
    pub device: i32,
    /// CLOCK_MONOTONIC ns when the call was entered.
    pub start_ns: u64,
    /// Wall time spent inside the real CUDA call.
    pub duration_ns: u64,
    /// Bytes moved (copies) or allocated/freed where known (0 otherwise).
    pub bytes: u64,
    /// `cudaStream_t` as an integer (0: legacy default stream; 2: per-thread default).
    pub stream: u64,
    /// Kernel thread id of the caller.
    pub tid: u32,
    /// Call-site id: index + 1 in the site table, `NO_SITE` when none was captured.
    pub site: u32,
    /// The `cudaError_t` the real call returned.
    pub result: u32,
    /// `poll_wait` (ABI 1.5): the queries of the run that returned not-ready; 0 for every
    /// other kind. The upper half of w6.
    pub polls: u32,
}

/// The call used a per-thread default stream variant (`_ptsz`/`_ptds`).
pub const FLAG_PER_THREAD: u8 = 1;
/// The host side of the copy was pinned (page-locked, mapped or managed).
pub const FLAG_HOST_PINNED: u8 = 2;
/// The stack was cut at the depth limit.
pub const FLAG_STACK_TRUNCATED: u8 = 4;

/// `result` of a `stall_events` record (ABI 1.10): the stall it measured, its kind in bits 8-15
/// and its API in bits 0-7.
pub const fn stall_result(kind: Kind, api: Api) -> u32 {
    ((kind as u32) << 8) | api as u32
}

/// The stall a `stall_events` record measured (`stall_result`); `None` for any other record,
/// or a kind or API this version does not know.
pub fn stall_of(r: &Record) -> Option<(Kind, Api)> {
    if r.api != Api::StallEvents {
        return None;
    }
    Some((
        Kind::from_u8((r.result >> 8) as u8)?,
        Api::from_u8(r.result as u8)?,
    ))
}

/// Why a slot's payload did not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordError {
    UnknownKind(u8),
    UnknownApi(u8),
    UnknownDirection(u8),
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::UnknownKind(v) => write!(f, "unknown event kind {v}"),
            RecordError::UnknownApi(v) => write!(f, "unknown API id {v}"),
            RecordError::UnknownDirection(v) => write!(f, "unknown copy direction {v}"),
        }
    }
}

impl std::error::Error for RecordError {}

impl Record {
    #[inline]
    pub fn to_words(&self) -> [u64; RECORD_WORDS] {
        let packed = (self.kind as u64)
            | (self.api as u64) << 8
            | (self.direction as u64) << 16
            | (self.flags as u64) << 24
            | (self.device as u32 as u64) << 32;
        [
            self.start_ns,
            self.duration_ns,
            self.bytes,
            self.stream,
            packed,
            self.tid as u64 | (self.site as u64) << 32,
            self.result as u64 | (self.polls as u64) << 32,
        ]
    }

    pub fn from_words(w: &[u64; RECORD_WORDS]) -> Result<Record, RecordError> {
        let packed = w[4];
        let k = packed as u8;
        let a = (packed >> 8) as u8;
        let d = (packed >> 16) as u8;
        Ok(Record {
            kind: Kind::from_u8(k).ok_or(RecordError::UnknownKind(k))?,
            api: Api::from_u8(a).ok_or(RecordError::UnknownApi(a))?,
            direction: Direction::from_u8(d).ok_or(RecordError::UnknownDirection(d))?,
            flags: (packed >> 24) as u8,
            device: (packed >> 32) as u32 as i32,
            start_ns: w[0],
            duration_ns: w[1],
            bytes: w[2],
            stream: w[3],
            tid: w[5] as u32,
            site: (w[5] >> 32) as u32,
            result: w[6] as u32,
            polls: (w[6] >> 32) as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_record() -> impl Strategy<Value = Record> {
        (
            proptest::sample::select(Kind::ALL),
            proptest::sample::select(Api::ALL),
            proptest::sample::select(Direction::ALL),
            any::<u8>(),
            any::<i32>(),
            any::<[u64; 4]>(),
            any::<(u32, u32, u32, u32)>(),
        )
            .prop_map(
                |(kind, api, direction, flags, device, w, (tid, site, result, polls))| Record {
                    kind,
                    api,
                    direction,
                    flags,
                    device,
                    start_ns: w[0],
                    duration_ns: w[1],
                    bytes: w[2],
                    stream: w[3],
                    tid,
                    site,
                    result,
                    polls,
                },
            )
    }

    proptest! {
        #[test]
        fn words_round_trip(r in any_record()) {
            prop_assert_eq!(Record::from_words(&r.to_words()), Ok(r));
        }
    }

    #[test]
    fn garbage_is_rejected_not_misread() {
        let mut w = [0u64; RECORD_WORDS];
        assert_eq!(Record::from_words(&w), Err(RecordError::UnknownKind(0)));
        w[4] = 1 | 250 << 8;
        assert_eq!(Record::from_words(&w), Err(RecordError::UnknownApi(250)));
        w[4] = 1 | 1 << 8 | 9 << 16;
        assert_eq!(
            Record::from_words(&w),
            Err(RecordError::UnknownDirection(9))
        );
    }
}
