//! Streams and host functions.
#![allow(non_snake_case)]

use std::ffi::{c_uint, c_void};

use cudarc::runtime::sys::{
    cudaError_t, cudaEventWaitExternal, cudaEvent_t, cudaHostFn_t, cudaStreamNonBlocking,
    cudaStream_t,
};

use super::{entry, Out};
use crate::engine::{EngineKind, EngineRef};
use crate::error::CudaResult;
use crate::event::EventId;
use crate::runtime::runtime;
use crate::stream::StreamKind;
use crate::work::{HostFnWork, Op, Work};

/// `cudaStreamCreate`: a blocking stream on the current device.
///
/// # Safety
/// `p_stream` is null or valid for writing a `cudaStream_t`.
#[no_mangle]
pub unsafe extern "C" fn cudaStreamCreate(p_stream: *mut cudaStream_t) -> cudaError_t {
    // SAFETY: the caller's contract.
    unsafe { cudaStreamCreateWithFlags(p_stream, 0) }
}

/// `cudaStreamCreateWithFlags`: `cudaStreamDefault` (0) or `cudaStreamNonBlocking`.
///
/// # Safety
/// `p_stream` is null or valid for writing a `cudaStream_t`.
#[no_mangle]
pub unsafe extern "C" fn cudaStreamCreateWithFlags(
    p_stream: *mut cudaStream_t,
    flags: c_uint,
) -> cudaError_t {
    entry(|| {
        let out = Out::new(p_stream)?;
        let kind = match flags {
            0 => StreamKind::Blocking,
            f if f == cudaStreamNonBlocking => StreamKind::NonBlocking,
            _ => return Err(cudaError_t::cudaErrorInvalidValue),
        };
        let rt = runtime();
        let device = rt.current_device()?;
        let id = rt.sched.create_stream(&mut rt.sched.lock(), device, kind)?;
        // SAFETY: the caller's contract.
        unsafe { out.write(id.to_handle()) };
        Ok(())
    })
}

/// `cudaStreamDestroy`: returns at once; queued work still runs. Default streams cannot be
/// destroyed.
#[no_mangle]
pub extern "C" fn cudaStreamDestroy(stream: cudaStream_t) -> cudaError_t {
    entry(|| {
        let rt = runtime();
        let mut g = rt.sched.lock();
        let id = rt.resolve_stream(&mut g, stream, false)?;
        if !g.stream(id)?.kind.is_user() {
            return Err(cudaError_t::cudaErrorInvalidResourceHandle);
        }
        rt.sched.destroy_stream(&mut g, id);
        Ok(())
    })
}

fn synchronize(stream: cudaStream_t, per_thread_default: bool) -> CudaResult {
    let rt = runtime();
    let mut g = rt.sched.lock();
    let id = rt.resolve_stream(&mut g, stream, per_thread_default)?;
    let device = g.stream(id)?.device;
    let targets = g.sync_targets(id)?;
    let g = rt.sched.wait_for(g, &targets);
    g.fault(device)
}

/// `cudaStreamSynchronize`: blocks until all work enqueued in the stream so far is done (for
/// the legacy default stream, also that of the blocking streams).
#[no_mangle]
pub extern "C" fn cudaStreamSynchronize(stream: cudaStream_t) -> cudaError_t {
    if let Some(r) = super::driver::route() {
        // SAFETY: the driver's cuStreamSynchronize form, with the caller's stream.
        return super::driver::call_via(|| unsafe { (r.stream_sync[0])(stream.cast()) });
    }
    entry(|| synchronize(stream, false))
}

/// `cudaStreamSynchronize_ptsz`.
#[no_mangle]
pub extern "C" fn cudaStreamSynchronize_ptsz(stream: cudaStream_t) -> cudaError_t {
    if let Some(r) = super::driver::route() {
        // SAFETY: the driver's cuStreamSynchronize form, with the caller's stream.
        return super::driver::call_via(|| unsafe { (r.stream_sync[1])(stream.cast()) });
    }
    entry(|| synchronize(stream, true))
}

fn query(stream: cudaStream_t, per_thread_default: bool) -> CudaResult {
    let rt = runtime();
    let mut g = rt.sched.lock();
    let id = rt.resolve_stream(&mut g, stream, per_thread_default)?;
    if g.sync_targets(id)?.is_empty() {
        Ok(())
    } else {
        Err(cudaError_t::cudaErrorNotReady)
    }
}

/// `cudaStreamQuery`: `cudaSuccess` when idle, `cudaErrorNotReady` (not recorded as the last
/// error) while work is pending.
#[no_mangle]
pub extern "C" fn cudaStreamQuery(stream: cudaStream_t) -> cudaError_t {
    entry(|| query(stream, false))
}

/// `cudaStreamQuery_ptsz`.
#[no_mangle]
pub extern "C" fn cudaStreamQuery_ptsz(stream: cudaStream_t) -> cudaError_t {
    entry(|| query(stream, true))
}

fn wait_event(
    stream: cudaStream_t,
    event: cudaEvent_t,
    flags: c_uint,
    per_thread_default: bool,
) -> CudaResult {
    if flags & !cudaEventWaitExternal != 0 {
        return Err(cudaError_t::cudaErrorInvalidValue);
    }
    let rt = runtime();
    let mut g = rt.sched.lock();
    let id = rt.resolve_stream(&mut g, stream, per_thread_default)?;
    let record = EventId::from_handle(event)
        .and_then(|e| g.events.get(&e))
        .ok_or(cudaError_t::cudaErrorInvalidResourceHandle)?
        .record
        .clone();
    // An event never recorded is complete: nothing to wait for.
    if let Some(record) = record {
        rt.sched
            .enqueue(&mut g, id, Op::marker(), vec![record], 0)?;
    }
    Ok(())
}

/// `cudaStreamWaitEvent`: later work in `stream` waits for the event's last record.
#[no_mangle]
pub extern "C" fn cudaStreamWaitEvent(
    stream: cudaStream_t,
    event: cudaEvent_t,
    flags: c_uint,
) -> cudaError_t {
    entry(|| wait_event(stream, event, flags, false))
}

/// `cudaStreamWaitEvent_ptsz`.
#[no_mangle]
pub extern "C" fn cudaStreamWaitEvent_ptsz(
    stream: cudaStream_t,
    event: cudaEvent_t,
    flags: c_uint,
) -> cudaError_t {
    entry(|| wait_event(stream, event, flags, true))
}

fn launch_host_func(
    stream: cudaStream_t,
    func: cudaHostFn_t,
    user_data: *mut c_void,
    per_thread_default: bool,
) -> CudaResult {
    let func = func.ok_or(cudaError_t::cudaErrorInvalidValue)?;
    let rt = runtime();
    let mut g = rt.sched.lock();
    let id = rt.resolve_stream(&mut g, stream, per_thread_default)?;
    let device = g.stream(id)?.device;
    let op = Op {
        work: Work::HostFn(HostFnWork { func, user_data }),
        engine: Some(EngineRef {
            device,
            kind: EngineKind::HostCallback,
        }),
        duration_ns: 0,
        keep: Vec::new(),
    };
    rt.sched.enqueue(&mut g, id, op, Vec::new(), 0)?;
    Ok(())
}

/// `cudaLaunchHostFunc`: runs `func(user_data)` on a simulator thread once
/// the stream's earlier work is done; the stream is busy while it runs, and host functions of
/// all streams run one at a time, as in the real runtime.
///
/// # Safety
/// `func` must be safe to call with `user_data` from another thread.
#[no_mangle]
pub unsafe extern "C" fn cudaLaunchHostFunc(
    stream: cudaStream_t,
    func: cudaHostFn_t,
    user_data: *mut c_void,
) -> cudaError_t {
    entry(|| launch_host_func(stream, func, user_data, false))
}

/// `cudaLaunchHostFunc_ptsz`.
///
/// # Safety
/// As [`cudaLaunchHostFunc`].
#[no_mangle]
pub unsafe extern "C" fn cudaLaunchHostFunc_ptsz(
    stream: cudaStream_t,
    func: cudaHostFn_t,
    user_data: *mut c_void,
) -> cudaError_t {
    entry(|| launch_host_func(stream, func, user_data, true))
}
