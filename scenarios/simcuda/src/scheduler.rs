//! The simulated device's scheduler: stream queues, their worker threads, engine bookings and
//! the waits of host threads.
//!
//! Each stream has a worker thread that takes its operations in order. An operation starts
//! on the modeled timeline at the latest of: when the host enqueued it, when the previous
//! operation of its stream ended, when its dependencies ended (legacy default stream
//! semantics, `cudaStreamWaitEvent`), and when its engine is free. The worker sleeps until that
//! start (CLOCK_MONOTONIC, absolute), does the real work (copies bytes, calls the host
//! function), sleeps until the modeled end, then marks the operation complete and wakes the
//! host threads waiting for it. Host waits are condition-variable waits, never polling.
//!
//! One mutex guards all scheduling state; nothing slow happens while it is held (no sleeping,
//! no copying, no host functions).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;

use cudarc::runtime::sys::cudaError_t;

use crate::clock;
use crate::completion::Completion;
use crate::device::Device;
use crate::error::CudaResult;
use crate::event::{Event, EventId};
use crate::stream::{Queued, Stream, StreamId, StreamKind};
use crate::work::{Op, Work};

#[derive(Debug)]
pub(crate) struct SchedState {
    pub devices: Vec<Device>,
    pub streams: HashMap<StreamId, Stream>,
    pub events: HashMap<EventId, Event>,
    next_id: u64,
}

impl SchedState {
    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// The device's sticky fault, if asynchronous work hit one.
    pub fn fault(&self, device: usize) -> CudaResult {
        self.devices[device].fault.map_or(Ok(()), Err)
    }

    /// Pending completions of everything enqueued on `device` so far, in every stream.
    pub fn device_tails(&self, device: usize) -> Vec<Arc<Completion>> {
        self.streams
            .values()
            .filter(|s| s.device == device)
            .filter_map(Stream::pending_tail)
            .collect()
    }

    /// What synchronizing with stream `id` waits for: its pending work and, for the legacy
    /// default stream, the pending work of every blocking stream of its device (CUDA 13:
    /// `cudaStreamSynchronize(0)` and `cudaStreamQuery(0)` cover those too).
    pub fn sync_targets(&self, id: StreamId) -> CudaResult<Vec<Arc<Completion>>> {
        let stream = self.stream(id)?;
        let mut targets: Vec<_> = stream.pending_tail().into_iter().collect();
        if stream.kind == StreamKind::Legacy {
            targets.extend(
                self.streams
                    .values()
                    .filter(|s| s.device == stream.device && s.kind.is_blocking())
                    .filter_map(Stream::pending_tail),
            );
        }
        Ok(targets)
    }

    /// A live (not destroyed) stream.
    pub fn stream(&self, id: StreamId) -> CudaResult<&Stream> {
        self.streams
            .get(&id)
            .filter(|s| !s.destroyed)
            .ok_or(cudaError_t::cudaErrorInvalidResourceHandle)
    }
}

pub(crate) type Guard<'a> = MutexGuard<'a, SchedState>;

#[derive(Debug)]
pub(crate) struct Scheduler {
    state: Mutex<SchedState>,
    /// Notified whenever an operation completes or an engine is released.
    progress: Condvar,
    /// The runtime's current time scale (`Config::time_scale`), asked when an NCCL operation
    /// runs: a function the runtime passes, so that the scheduler does not import it.
    time_scale: fn() -> f64,
}

impl Scheduler {
    pub fn new(devices: usize, staging_bytes: usize, time_scale: fn() -> f64) -> Self {
        Self {
            state: Mutex::new(SchedState {
                devices: (0..devices).map(|_| Device::new(staging_bytes)).collect(),
                streams: HashMap::new(),
                events: HashMap::new(),
                next_id: 0,
            }),
            progress: Condvar::new(),
            time_scale,
        }
    }

    /// Locks the scheduling state. A panic elsewhere cannot leave it inconsistent in a way that
    /// matters more than a stuck program, so poisoning is ignored.
    pub fn lock(&self) -> Guard<'_> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Creates a stream and starts its worker thread.
    pub fn create_stream(
        &'static self,
        g: &mut SchedState,
        device: usize,
        kind: StreamKind,
    ) -> CudaResult<StreamId> {
        let id = StreamId(g.next_id());
        thread::Builder::new()
            .name(format!("simcuda-s{}", id.0))
            .spawn(move || self.worker(id))
            .map_err(|_| cudaError_t::cudaErrorMemoryAllocation)?;
        // The worker blocks on the lock we hold until the stream exists.
        g.streams.insert(id, Stream::new(device, kind));
        Ok(id)
    }

    /// The device's legacy default stream, created on first use.
    pub fn legacy_stream(&'static self, g: &mut SchedState, device: usize) -> CudaResult<StreamId> {
        if let Some(id) = g.devices[device].legacy {
            return Ok(id);
        }
        let id = self.create_stream(g, device, StreamKind::Legacy)?;
        g.devices[device].legacy = Some(id);
        Ok(id)
    }

    /// Marks a stream destroyed: queued work still runs, then the worker exits. Like
    /// `cudaStreamDestroy`, this does not wait.
    pub fn destroy_stream(&self, g: &mut SchedState, id: StreamId) {
        if let Some(stream) = g.streams.get_mut(&id) {
            stream.destroyed = true;
            stream.wake.notify_one();
        }
    }

    /// Appends `op` to stream `id`, ordered after `deps` and, following the legacy default
    /// stream rules, after the legacy stream (for blocking streams) or after every blocking
    /// stream (for the legacy stream). Returns the op's completion.
    pub fn enqueue(
        &self,
        g: &mut SchedState,
        id: StreamId,
        op: Op,
        mut deps: Vec<Arc<Completion>>,
        staged_bytes: usize,
    ) -> CudaResult<Arc<Completion>> {
        let stream = g.stream(id)?;
        let (device, kind) = (stream.device, stream.kind);
        match kind {
            StreamKind::Legacy => deps.extend(
                g.streams
                    .values()
                    .filter(|s| s.device == device && s.kind.is_blocking())
                    .filter_map(Stream::pending_tail),
            ),
            StreamKind::PerThread | StreamKind::Blocking => {
                deps.extend(g.devices[device].legacy_tail.clone());
            }
            StreamKind::NonBlocking => {}
        }
        deps.retain(|d| !d.is_done());
        let done = Completion::pending();
        let queued = Queued {
            op,
            done: Arc::clone(&done),
            deps,
            enqueued_ns: clock::now_ns(),
            staged_bytes,
        };
        let Some(stream) = g.streams.get_mut(&id) else {
            return Err(cudaError_t::cudaErrorInvalidResourceHandle);
        };
        stream.queue.push_back(queued);
        stream.tail = Some(Arc::clone(&done));
        stream.wake.notify_one();
        if kind == StreamKind::Legacy {
            g.devices[device].legacy_tail = Some(Arc::clone(&done));
        }
        Ok(done)
    }

    /// Blocks the calling thread until every completion in `targets` is done.
    pub fn wait_for<'a>(&self, mut g: Guard<'a>, targets: &[Arc<Completion>]) -> Guard<'a> {
        while !targets.iter().all(|t| t.is_done()) {
            g = self
                .progress
                .wait(g)
                .unwrap_or_else(PoisonError::into_inner);
        }
        g
    }

    /// Blocks until all work enqueued on `device` so far is done; returns the device's fault.
    pub fn sync_device(&self, device: usize) -> CudaResult {
        let g = self.lock();
        let tails = g.device_tails(device);
        let g = self.wait_for(g, &tails);
        g.fault(device)
    }

    /// The worker of stream `id`: runs its operations in order until the stream is destroyed
    /// and drained.
    fn worker(&'static self, id: StreamId) {
        let mut g = self.lock();
        loop {
            // Split borrows: streams and devices are disjoint fields of the state.
            let state = &mut *g;
            let Some(stream) = state.streams.get_mut(&id) else {
                return;
            };
            let Some(front) = stream.queue.front() else {
                if stream.destroyed {
                    state.streams.remove(&id);
                    return;
                }
                let wake = Arc::clone(&stream.wake);
                g = wake.wait(g).unwrap_or_else(PoisonError::into_inner);
                continue;
            };
            let engine = front.op.engine;
            let engine_held =
                engine.is_some_and(|e| state.devices[e.device].engine(e.kind).is_held());
            if !front.deps_done() || engine_held {
                g = self
                    .progress
                    .wait(g)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            let device = stream.device;
            let ready = front.ready_ns(stream.last_end_ns);
            let Some(queued) = stream.queue.pop_front() else {
                continue;
            };
            let host_fn = queued.op.is_host_fn();
            let duration = queued.op.duration_ns;
            let start = match engine {
                Some(e) => state.devices[e.device]
                    .engine(e.kind)
                    .book(ready, (!host_fn).then_some(duration)),
                None => ready,
            };
            drop(g);

            clock::sleep_until(start);
            let began = clock::now_ns();
            let (ran, end) = match &queued.op.work {
                // An NCCL operation models its own end: when the last rank arrived, plus the
                // transfer (`crate::nccl`).
                Work::Nccl(nccl) if !queued.op.keep.iter().any(|a| a.is_freed()) => {
                    nccl.run(start, (self.time_scale)())
                }
                _ => {
                    let ran = queued.op.run();
                    let spent = clock::now_ns().saturating_sub(began);
                    // The modeled end: host functions last as long as they ran, other work its
                    // modeled time. Lateness in waking up is not counted, so it does not
                    // accumulate along a stream. When moving the real bytes took longer than
                    // modeled (a slow host), the work completes late but its timestamps stay
                    // those of the model.
                    let end = if host_fn {
                        start.saturating_add(spent)
                    } else {
                        start.saturating_add(duration)
                    };
                    (ran, end)
                }
            };
            clock::sleep_until(end);
            crate::activity::record(&queued.op, device, id.0, start, end);

            g = self.lock();
            if let Some(e) = engine {
                g.devices[e.device].engine(e.kind).release(end);
            }
            let dev = &mut g.devices[device];
            dev.staging_free += queued.staged_bytes;
            if let Err(code) = ran {
                dev.fault.get_or_insert(code);
            }
            if let Some(stream) = g.streams.get_mut(&id) {
                stream.last_end_ns = end;
            }
            queued.done.complete(end);
            self.progress.notify_all();
        }
    }
}
