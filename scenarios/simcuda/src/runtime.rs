//! The process-wide simulator instance, its per-thread state (current device, per-thread
//! default streams), stream-handle resolution, and the fork rule: a child process gets a fresh
//! simulator, since the parent's worker threads do not exist in it.

use std::cell::{Cell, RefCell};
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Once, PoisonError};

use cudarc::runtime::sys::{cudaError_t, cudaStream_t};

use crate::config::Config;
use crate::error::CudaResult;
use crate::kernel::Modules;
use crate::memory::MemoryMap;
use crate::scheduler::{SchedState, Scheduler};
use crate::stream::{StreamId, StreamKind};

/// `cudaStreamLegacy` and `cudaStreamPerThread` of `driver_types.h`: `((cudaStream_t)0x1)` and
/// `((cudaStream_t)0x2)`, macros that bindgen does not carry into cudarc.
pub(crate) const STREAM_LEGACY: usize = 1;
pub(crate) const STREAM_PER_THREAD: usize = 2;

#[derive(Debug)]
pub(crate) struct Runtime {
    pub config: Config,
    pub memory: Mutex<MemoryMap>,
    /// Loaded libraries and kernel handles. Lock order: never held with `memory` or `sched`.
    pub modules: Mutex<Modules>,
    pub sched: Scheduler,
    /// Which process incarnation built this instance (bumped in a fork child).
    generation: u64,
}

/// The live instance: null until first use and again in a fork child. An instance is never
/// freed (worker threads and thread-locals may still refer to it), which makes it `'static`.
static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(ptr::null_mut());
static GENERATION: AtomicU64 = AtomicU64::new(0);
static ATFORK: Once = Once::new();

/// The simulator of this process, created on first use.
pub(crate) fn runtime() -> &'static Runtime {
    let current = RUNTIME.load(Ordering::Acquire);
    if current.is_null() {
        return create();
    }
    // SAFETY: non-null values of RUNTIME come from `Box::into_raw` and are never freed.
    unsafe { &*current }
}

#[cold]
#[inline(never)]
fn create() -> &'static Runtime {
    ATFORK.call_once(|| {
        // SAFETY: registering a handler with no preconditions; it only touches atomics.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
    let config = Config::from_env();
    let fresh = Box::into_raw(Box::new(Runtime {
        memory: Mutex::new(MemoryMap::new(config.devices)),
        modules: Mutex::new(Modules::default()),
        sched: Scheduler::new(config.devices, config.staging_bytes, || {
            runtime().config.time_scale()
        }),
        config,
        generation: GENERATION.load(Ordering::Acquire),
    }));
    match RUNTIME.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: `fresh` was just leaked from a Box and is now published for good.
        Ok(_) => unsafe { &*fresh },
        Err(winner) => {
            // Another thread created it first; ours was never shared.
            // SAFETY: `fresh` came from Box::into_raw above and nobody else saw it.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: as in `runtime()`.
            unsafe { &*winner }
        }
    }
}

/// pthread_atfork child handler: the parent's instance (whose lock another thread may have
/// held at the fork, and whose workers are gone) is abandoned; the next call builds a new one.
extern "C" fn after_fork_in_child() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    RUNTIME.store(ptr::null_mut(), Ordering::Release);
}

thread_local! {
    static CURRENT_DEVICE: Cell<usize> = const { Cell::new(0) };
    static PER_THREAD: RefCell<PerThreadStreams> = const {
        RefCell::new(PerThreadStreams { generation: u64::MAX, ids: Vec::new() })
    };
}

/// The calling thread's per-thread default streams, one per device, created on first use.
struct PerThreadStreams {
    generation: u64,
    ids: Vec<Option<StreamId>>,
}

impl Drop for PerThreadStreams {
    /// The thread ends: its default streams finish their work and go away.
    fn drop(&mut self) {
        let current = RUNTIME.load(Ordering::Acquire);
        if current.is_null() || self.ids.is_empty() {
            return;
        }
        // SAFETY: as in `runtime()`.
        let rt = unsafe { &*current };
        if rt.generation != self.generation {
            return;
        }
        let mut g = rt.sched.lock();
        for id in self.ids.iter().flatten() {
            rt.sched.destroy_stream(&mut g, *id);
        }
    }
}

impl Runtime {
    pub fn memory(&self) -> MutexGuard<'_, MemoryMap> {
        self.memory.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn modules(&self) -> MutexGuard<'_, Modules> {
        self.modules.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The calling thread's current device (`cudaSetDevice`), 0 by default.
    pub fn current_device(&self) -> CudaResult<usize> {
        if self.config.devices == 0 {
            return Err(cudaError_t::cudaErrorNoDevice);
        }
        let device = CURRENT_DEVICE.try_with(Cell::get).unwrap_or(0);
        Ok(device.min(self.config.devices - 1))
    }

    /// Validates a device ordinal given by the program.
    pub fn device_index(&self, device: i32) -> CudaResult<usize> {
        if self.config.devices == 0 {
            return Err(cudaError_t::cudaErrorNoDevice);
        }
        usize::try_from(device)
            .ok()
            .filter(|d| *d < self.config.devices)
            .ok_or(cudaError_t::cudaErrorInvalidDevice)
    }

    pub fn set_current_device(&self, device: i32) -> CudaResult {
        let device = self.device_index(device)?;
        let _ = CURRENT_DEVICE.try_with(|d| d.set(device));
        Ok(())
    }

    /// Maps a stream handle to a stream: 0 is the legacy default stream of the current device,
    /// or its per-thread default stream in the `_ptds`/`_ptsz` entry points
    /// (`per_thread_default`); `cudaStreamLegacy` and `cudaStreamPerThread` are honored
    /// everywhere; anything else must be a live stream created by the program.
    pub fn resolve_stream(
        &'static self,
        g: &mut SchedState,
        handle: cudaStream_t,
        per_thread_default: bool,
    ) -> CudaResult<StreamId> {
        match handle as usize {
            0 if per_thread_default => self.per_thread_stream(g),
            0 | STREAM_LEGACY => self.sched.legacy_stream(g, self.current_device()?),
            STREAM_PER_THREAD => self.per_thread_stream(g),
            _ => StreamId::from_handle(handle)
                .filter(|id| g.stream(*id).is_ok_and(|s| s.kind.is_user()))
                .ok_or(cudaError_t::cudaErrorInvalidResourceHandle),
        }
    }

    fn per_thread_stream(&'static self, g: &mut SchedState) -> CudaResult<StreamId> {
        let device = self.current_device()?;
        let found = PER_THREAD.try_with(|cell| -> CudaResult<StreamId> {
            let mut streams = cell.borrow_mut();
            if streams.generation != self.generation {
                // Ids of another incarnation (before a fork) mean nothing here.
                streams.generation = self.generation;
                streams.ids.clear();
            }
            if streams.ids.len() <= device {
                streams.ids.resize(device + 1, None);
            }
            match streams.ids[device] {
                Some(id) if g.stream(id).is_ok() => Ok(id),
                _ => {
                    let id = self.sched.create_stream(g, device, StreamKind::PerThread)?;
                    streams.ids[device] = Some(id);
                    Ok(id)
                }
            }
        });
        match found {
            Ok(result) => result,
            // The thread is being torn down: its default stream is gone; use the legacy one.
            Err(_) => self.sched.legacy_stream(g, device),
        }
    }

    /// Waits for all work on every device (for calls whose memory any device may reach).
    pub fn sync_all_devices(&self) -> CudaResult {
        (0..self.config.devices).try_for_each(|d| self.sched.sync_device(d))
    }
}
