//! What a hook tells the library about one call, and the result code a query returns while its
//! work is pending.

use syncspy_abi::{Api, Direction, Kind};

/// What a hook tells the runtime about one call.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    /// `None`: the call does not stall the host; it is only counted.
    pub kind: Option<Kind>,
    pub api: Api,
    pub direction: Direction,
    pub bytes: u64,
    pub stream: u64,
    pub flags: u8,
}

impl Call {
    pub fn new(kind: Kind, api: Api) -> Call {
        Call {
            kind: Some(kind),
            api,
            direction: Direction::None,
            bytes: 0,
            stream: 0,
            flags: 0,
        }
    }
}

/// `cudaErrorNotReady`, and the driver's `CUDA_ERROR_NOT_READY`: what a query returns while
/// the work it asks about is still pending.
pub const NOT_READY: u32 = 600;
