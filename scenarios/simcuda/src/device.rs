//! One simulated device: its engines (`engine.rs`), its legacy default stream, its staging
//! buffer and its sticky fault.

use std::sync::Arc;

use cudarc::runtime::sys::cudaError_t;

use crate::completion::Completion;
use crate::engine::{Engine, EngineKind, ENGINES};
use crate::stream::StreamId;

#[derive(Debug)]
pub(crate) struct Device {
    engines: [Engine; ENGINES],
    /// The legacy default stream, created on first use.
    pub legacy: Option<StreamId>,
    /// Completion of the newest operation of the legacy stream: blocking streams wait for it.
    pub legacy_tail: Option<Arc<Completion>>,
    /// Bytes of the pageable staging buffer not holding a pending copy.
    pub staging_free: usize,
    /// A fault of asynchronous work (an illegal address); returned by every later
    /// synchronization, as a real device's sticky error is, until `cudaDeviceReset`.
    pub fault: Option<cudaError_t>,
}

impl Device {
    pub fn new(staging_bytes: usize) -> Self {
        Self {
            engines: Default::default(),
            legacy: None,
            legacy_tail: None,
            staging_free: staging_bytes,
            fault: None,
        }
    }

    pub fn engine(&mut self, kind: EngineKind) -> &mut Engine {
        &mut self.engines[kind as usize]
    }
}
