//! Events.
#![allow(non_snake_case)]

use std::ffi::c_uint;

use cudarc::runtime::sys::{cudaError_t, cudaEvent_t, cudaStream_t};

use super::{entry, Out};
use crate::error::CudaResult;
use crate::event::{self, Event, EventId};
use crate::runtime::runtime;
use crate::scheduler::SchedState;
use crate::work::Op;

fn lookup(g: &SchedState, event: cudaEvent_t) -> CudaResult<&Event> {
    EventId::from_handle(event)
        .and_then(|id| g.events.get(&id))
        .ok_or(cudaError_t::cudaErrorInvalidResourceHandle)
}

/// `cudaEventCreate`.
///
/// # Safety
/// `event` is null or valid for writing a `cudaEvent_t`.
#[no_mangle]
pub unsafe extern "C" fn cudaEventCreate(event: *mut cudaEvent_t) -> cudaError_t {
    // SAFETY: the caller's contract.
    unsafe { cudaEventCreateWithFlags(event, 0) }
}

/// `cudaEventCreateWithFlags`: `cudaEventBlockingSync`, `cudaEventDisableTiming`,
/// `cudaEventInterprocess` (with timing disabled).
///
/// # Safety
/// `event` is null or valid for writing a `cudaEvent_t`.
#[no_mangle]
pub unsafe extern "C" fn cudaEventCreateWithFlags(
    event: *mut cudaEvent_t,
    flags: c_uint,
) -> cudaError_t {
    entry(|| {
        let out = Out::new(event)?;
        if !event::valid_flags(flags) {
            return Err(cudaError_t::cudaErrorInvalidValue);
        }
        let rt = runtime();
        let device = rt.current_device()?;
        let mut g = rt.sched.lock();
        let id = EventId(g.next_id());
        g.events.insert(
            id,
            Event {
                device,
                flags,
                record: None,
            },
        );
        // SAFETY: the caller's contract.
        unsafe { out.write(id.to_handle()) };
        Ok(())
    })
}

/// `cudaEventDestroy`: a pending record still completes; the handle is gone at once.
#[no_mangle]
pub extern "C" fn cudaEventDestroy(event: cudaEvent_t) -> cudaError_t {
    entry(|| {
        let mut g = runtime().sched.lock();
        EventId::from_handle(event)
            .and_then(|id| g.events.remove(&id))
            .map(drop)
            .ok_or(cudaError_t::cudaErrorInvalidResourceHandle)
    })
}

fn record(event: cudaEvent_t, stream: cudaStream_t, per_thread_default: bool) -> CudaResult {
    let rt = runtime();
    let mut g = rt.sched.lock();
    lookup(&g, event)?;
    let id = rt.resolve_stream(&mut g, stream, per_thread_default)?;
    let done = rt.sched.enqueue(&mut g, id, Op::marker(), Vec::new(), 0)?;
    if let Some(e) = EventId::from_handle(event).and_then(|e| g.events.get_mut(&e)) {
        e.record = Some(done);
    }
    Ok(())
}

/// `cudaEventRecord`: the event completes when the stream's work enqueued so far is done.
#[no_mangle]
pub extern "C" fn cudaEventRecord(event: cudaEvent_t, stream: cudaStream_t) -> cudaError_t {
    entry(|| record(event, stream, false))
}

/// `cudaEventRecord_ptsz`.
#[no_mangle]
pub extern "C" fn cudaEventRecord_ptsz(event: cudaEvent_t, stream: cudaStream_t) -> cudaError_t {
    entry(|| record(event, stream, true))
}

/// `cudaEventSynchronize`: blocks until the event's last record completes (at once if it was
/// never recorded).
#[no_mangle]
pub extern "C" fn cudaEventSynchronize(event: cudaEvent_t) -> cudaError_t {
    if let Some(r) = super::driver::route() {
        // SAFETY: the driver's cuEventSynchronize, with the caller's event.
        return super::driver::call_via(|| unsafe { (r.event_sync)(event.cast()) });
    }
    entry(|| {
        let rt = runtime();
        let g = rt.sched.lock();
        let e = lookup(&g, event)?;
        let device = e.device;
        let pending: Vec<_> = e.record.iter().cloned().collect();
        let g = rt.sched.wait_for(g, &pending);
        g.fault(device)
    })
}

/// `cudaEventQuery`: `cudaSuccess` when complete or never recorded, else `cudaErrorNotReady`.
#[no_mangle]
pub extern "C" fn cudaEventQuery(event: cudaEvent_t) -> cudaError_t {
    entry(|| {
        let g = runtime().sched.lock();
        match &lookup(&g, event)?.record {
            Some(r) if !r.is_done() => Err(cudaError_t::cudaErrorNotReady),
            _ => Ok(()),
        }
    })
}

/// `cudaEventElapsedTime`: milliseconds between two completed records, measured on the
/// modeled device timeline.
///
/// # Safety
/// `ms` is null or valid for writing a `float`.
#[no_mangle]
pub unsafe extern "C" fn cudaEventElapsedTime(
    ms: *mut f32,
    start: cudaEvent_t,
    end: cudaEvent_t,
) -> cudaError_t {
    entry(|| {
        let out = Out::new(ms)?;
        let g = runtime().sched.lock();
        let timestamp = |event| -> CudaResult<u64> {
            let e = lookup(&g, event)?;
            if e.timing_disabled() {
                return Err(cudaError_t::cudaErrorInvalidResourceHandle);
            }
            let record = e
                .record
                .as_ref()
                .ok_or(cudaError_t::cudaErrorInvalidResourceHandle)?;
            record.end_ns().ok_or(cudaError_t::cudaErrorNotReady)
        };
        let (t0, t1) = (timestamp(start)?, timestamp(end)?);
        let elapsed_ms = (t1 as f64 - t0 as f64) / 1e6;
        // SAFETY: the caller's contract.
        unsafe { out.write(elapsed_ms as f32) };
        Ok(())
    })
}
