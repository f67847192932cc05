//! The engines of a simulated device and the handle naming one of them: a leaf that the
//! queued work (`work.rs`), the device (`device.rs`) and the API share, so that the device,
//! its streams and their work do not import each other in a circle.
//!
//! Every engine runs one operation at a time, in the order streams reach it, so work on
//! different engines overlaps and work on the same engine queues up:
//! - `Compute`: kernels (later), memsets and device-to-device copies. Concurrent kernels of
//!   different streams are not modeled; one kernel is taken to fill the GPU.
//! - `CopyH2D`, `CopyD2H`: one DMA engine per direction, as on PCIe GPUs.
//! - `HostCallback`: the runtime's thread that runs `cudaLaunchHostFunc` functions. The real
//!   runtime runs them one at a time across all streams (two 20 ms host functions on two
//!   streams take 40 ms on an H100 with CUDA 13), while kernels and copies go on.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EngineKind {
    Compute = 0,
    CopyH2D = 1,
    CopyD2H = 2,
    HostCallback = 3,
}

pub(crate) const ENGINES: usize = 4;

/// An engine of a given device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EngineRef {
    pub device: usize,
    pub kind: EngineKind,
}

/// Booking state of one engine on the modeled timeline.
#[derive(Debug, Default)]
pub(crate) struct Engine {
    /// Modeled time at which the last booked operation ends.
    free_at_ns: u64,
    /// An operation of unknown length (a host function) is running; nothing can be booked
    /// behind it until it ends.
    held: bool,
}

impl Engine {
    pub fn is_held(&self) -> bool {
        self.held
    }

    /// Books the engine for an operation that may start at `ready_ns`. With a known duration
    /// the booking is final and the start time is returned; with `None` the engine stays held
    /// until [`Engine::release`].
    pub fn book(&mut self, ready_ns: u64, duration_ns: Option<u64>) -> u64 {
        debug_assert!(!self.held);
        let start = ready_ns.max(self.free_at_ns);
        match duration_ns {
            Some(d) => self.free_at_ns = start.saturating_add(d),
            None => self.held = true,
        }
        start
    }

    /// Ends an operation that ran until `end_ns`.
    pub fn release(&mut self, end_ns: u64) {
        self.held = false;
        self.free_at_ns = self.free_at_ns.max(end_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookings_queue_behind_each_other() {
        let mut e = Engine::default();
        assert_eq!(e.book(100, Some(50)), 100);
        // Ready earlier than the engine is free: starts when the previous one ends.
        assert_eq!(e.book(120, Some(10)), 150);
        // Ready after the engine is free: starts when ready.
        assert_eq!(e.book(500, Some(10)), 500);
    }

    #[test]
    fn a_held_engine_frees_at_the_real_end() {
        let mut e = Engine::default();
        assert_eq!(e.book(100, None), 100);
        assert!(e.is_held());
        e.release(400);
        assert!(!e.is_held());
        assert_eq!(e.book(200, Some(1)), 400);
    }
}
