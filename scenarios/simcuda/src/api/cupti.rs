//! A stand-in for CUPTI's activity API, reporting the simulated device's own timeline.
//!
//! `syncspy run --sim` links `libcupti.so.13` to this library next to `libcudart.so.13`, so a
//! CUPTI client that loads "the libcupti next to the runtime" (libsyncspy.so does) gets these
//! functions, and can tell them apart by the exported `simcudaCuptiSimulated`. What is
//! implemented is the subset a client of activity records needs:
//! `cuptiActivityRegisterCallbacks`, `cuptiActivityEnable` / `Disable` (kernel, concurrent
//! kernel, memcpy and memset records), `cuptiActivityFlushAll`, `cuptiActivityGetNextRecord`,
//! `cuptiGetTimestamp`, `cuptiActivityRegisterTimestampCallback`, `cuptiSubscribe` /
//! `cuptiUnsubscribe` (one subscriber at a time, as CUPTI) and
//! `cuptiActivityGetNumDroppedRecords`.
//!
//! Each operation a stream's worker runs on a device engine (a kernel, a copy, a memset) is one
//! record with its modeled start and end (CLOCK_MONOTONIC ns, which is what a client that
//! registers a timestamp callback reading CLOCK_MONOTONIC gets from CUPTI), its device and
//! stream, in the record layouts of CUDA 13.0's CUPTI (`CUpti_ActivityKernel10`,
//! `CUpti_ActivityMemcpy6`, `CUpti_ActivityMemset4`, from cudarc). Kernel names are the
//! simulated kernels' (`spin`, `gemm`, ...); an NCCL operation is a kernel named as NCCL
//! 2.2x names its own (`ncclDevKernel_AllReduce_Sum_f32_RING_LL`, `ncclDevKernel_SendRecv`),
//! from when its stream reached it to its end (the wait for the other ranks included). Records wait in memory (at most `MAX_PENDING`;
//! more are counted dropped) until the client flushes: `cuptiActivityFlushAll` asks the
//! client for buffers through its request callback, fills them and hands each back through
//! its completion callback, on the calling thread, with no lock of the simulator held.
//! While no kind is enabled a worker pays one atomic load per operation.

use std::ffi::c_void;
use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;

use cudarc::cupti::sys::{
    CUpti_ActivityKernel10, CUpti_ActivityMemcpy6, CUpti_ActivityMemset4,
    CUpti_BuffersCallbackCompleteFunc, CUpti_BuffersCallbackRequestFunc, CUpti_CallbackFunc,
    CUpti_SubscriberHandle, CUpti_TimestampCallbackFunc,
};

pub use crate::activity::MAX_PENDING;
use crate::activity::{
    Activity, DROPPED, ENABLED, KIND_CONCURRENT_KERNEL, KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET,
    PENDING,
};
use crate::clock;

const OK: u32 = 0;
/// `CUPTI_ERROR_INVALID_PARAMETER`.
const INVALID_PARAMETER: u32 = 1;
/// `CUPTI_ERROR_INVALID_KIND`.
const INVALID_KIND: u32 = 16;
/// `CUPTI_ERROR_MAX_LIMIT_REACHED`: no more records in the buffer.
const MAX_LIMIT_REACHED: u32 = 12;
/// `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`.
const MULTIPLE_SUBSCRIBERS: u32 = 39;

static SUBSCRIBED: AtomicBool = AtomicBool::new(false);
static CORRELATION: AtomicU32 = AtomicU32::new(0);

struct Callbacks {
    request: CUpti_BuffersCallbackRequestFunc,
    complete: CUpti_BuffersCallbackCompleteFunc,
}

static CALLBACKS: Mutex<Option<Callbacks>> = Mutex::new(None);

/// Size of the record of `kind` in a buffer (8-byte aligned); 0 for kinds not produced.
fn record_size(kind: u32) -> usize {
    let size = match kind {
        KIND_KERNEL | KIND_CONCURRENT_KERNEL => size_of::<CUpti_ActivityKernel10>(),
        KIND_MEMCPY => size_of::<CUpti_ActivityMemcpy6>(),
        KIND_MEMSET => size_of::<CUpti_ActivityMemset4>(),
        _ => 0,
    };
    size.next_multiple_of(8)
}

/// Writes `a` as a CUPTI record at the start of `out` (zeroed, `record_size(a.kind)` long).
fn write_record(a: &Activity, out: &mut [u8]) {
    fn put(out: &mut [u8], at: usize, v: &[u8]) {
        out[at..at + v.len()].copy_from_slice(v);
    }
    put(out, 0, &a.kind.to_ne_bytes());
    let corr = CORRELATION.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
    match a.kind {
        KIND_KERNEL | KIND_CONCURRENT_KERNEL => {
            type K = CUpti_ActivityKernel10;
            put(out, offset_of!(K, start), &a.start_ns.to_ne_bytes());
            put(out, offset_of!(K, end), &a.end_ns.to_ne_bytes());
            put(out, offset_of!(K, deviceId), &a.device.to_ne_bytes());
            put(out, offset_of!(K, streamId), &a.stream.to_ne_bytes());
            put(out, offset_of!(K, correlationId), &corr.to_ne_bytes());
            let name = a.name.as_ptr() as usize;
            put(out, offset_of!(K, name), &name.to_ne_bytes());
        }
        KIND_MEMCPY => {
            type M = CUpti_ActivityMemcpy6;
            put(out, offset_of!(M, copyKind), &[a.copy_kind]);
            put(out, offset_of!(M, bytes), &a.bytes.to_ne_bytes());
            put(out, offset_of!(M, start), &a.start_ns.to_ne_bytes());
            put(out, offset_of!(M, end), &a.end_ns.to_ne_bytes());
            put(out, offset_of!(M, deviceId), &a.device.to_ne_bytes());
            put(out, offset_of!(M, streamId), &a.stream.to_ne_bytes());
            put(out, offset_of!(M, correlationId), &corr.to_ne_bytes());
        }
        KIND_MEMSET => {
            type S = CUpti_ActivityMemset4;
            put(out, offset_of!(S, bytes), &a.bytes.to_ne_bytes());
            put(out, offset_of!(S, start), &a.start_ns.to_ne_bytes());
            put(out, offset_of!(S, end), &a.end_ns.to_ne_bytes());
            put(out, offset_of!(S, deviceId), &a.device.to_ne_bytes());
            put(out, offset_of!(S, streamId), &a.stream.to_ne_bytes());
            put(out, offset_of!(S, correlationId), &corr.to_ne_bytes());
        }
        _ => {}
    }
}

/// Hands every pending record to the client: buffers from its request callback, back
/// through its completion callback. Returns the records delivered.
fn deliver() -> usize {
    let (request, complete) = match CALLBACKS.lock().ok().as_deref() {
        Some(Some(c)) => (c.request, c.complete),
        _ => return 0,
    };
    let (Some(request), Some(complete)) = (request, complete) else {
        return 0;
    };
    let records = match PENDING.lock() {
        Ok(mut p) => std::mem::take(&mut *p),
        Err(_) => return 0,
    };
    let mut rest = &records[..];
    let mut delivered = 0;
    while !rest.is_empty() {
        let mut buf: *mut u8 = std::ptr::null_mut();
        let mut size = 0usize;
        let mut max_records = 0usize;
        // SAFETY: the client's request callback with valid out-pointers, as CUPTI calls it.
        unsafe { request(&mut buf, &mut size, &mut max_records) };
        if buf.is_null() || size == 0 {
            DROPPED.fetch_add(rest.len() as u64, Ordering::Relaxed);
            break;
        }
        // SAFETY: the client gave `size` writable bytes at `buf`, ours until completed.
        let out = unsafe { std::slice::from_raw_parts_mut(buf, size) };
        let mut used = 0;
        let mut n = 0;
        for a in rest {
            let len = record_size(a.kind);
            if used + len > size || (max_records != 0 && n == max_records) {
                break;
            }
            let slot = &mut out[used..used + len];
            slot.fill(0);
            write_record(a, slot);
            used += len;
            n += 1;
        }
        if n == 0 {
            // A buffer too small for one record: give it back empty and drop the rest.
            DROPPED.fetch_add(rest.len() as u64, Ordering::Relaxed);
            // SAFETY: as CUPTI completes a buffer: the client's, with 0 valid bytes.
            unsafe { complete(std::ptr::null_mut(), 0, buf, size, 0) };
            break;
        }
        rest = &rest[n..];
        delivered += n;
        // SAFETY: the client's buffer, `used` bytes of records written in it.
        unsafe { complete(std::ptr::null_mut(), 0, buf, size, used) };
    }
    delivered
}

/// The simulator's marker: a CUPTI client finds it to know the activity source is simulated.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static simcudaCuptiSimulated: u32 = 1;

/// # Safety
/// The callbacks are the client's functions of CUPTI's signatures.
#[no_mangle]
pub unsafe extern "C" fn cuptiActivityRegisterCallbacks(
    request: CUpti_BuffersCallbackRequestFunc,
    complete: CUpti_BuffersCallbackCompleteFunc,
) -> u32 {
    if request.is_none() || complete.is_none() {
        return INVALID_PARAMETER;
    }
    match CALLBACKS.lock() {
        Ok(mut c) => {
            *c = Some(Callbacks { request, complete });
            OK
        }
        Err(_) => INVALID_PARAMETER,
    }
}

fn known(kind: u32) -> bool {
    matches!(
        kind,
        KIND_KERNEL | KIND_CONCURRENT_KERNEL | KIND_MEMCPY | KIND_MEMSET
    )
}

/// Takes the kind as its `u32` value (C may pass any): unknown kinds are refused.
#[no_mangle]
pub extern "C" fn cuptiActivityEnable(kind: u32) -> u32 {
    if !known(kind) {
        return INVALID_KIND;
    }
    ENABLED.fetch_or(1 << kind, Ordering::Relaxed);
    OK
}

#[no_mangle]
pub extern "C" fn cuptiActivityDisable(kind: u32) -> u32 {
    if !known(kind) {
        return INVALID_KIND;
    }
    ENABLED.fetch_and(!(1 << kind), Ordering::Relaxed);
    OK
}

#[no_mangle]
pub extern "C" fn cuptiActivityFlushAll(_flag: u32) -> u32 {
    let _ = std::panic::catch_unwind(deliver);
    OK
}

/// # Safety
/// `buffer` holds `valid` bytes of records written by `cuptiActivityFlushAll`; `record`
/// points to the cursor (null to start, else the previous record).
#[no_mangle]
pub unsafe extern "C" fn cuptiActivityGetNextRecord(
    buffer: *mut u8,
    valid: usize,
    record: *mut *mut c_void,
) -> u32 {
    if buffer.is_null() || record.is_null() {
        return INVALID_PARAMETER;
    }
    // SAFETY: the caller's cursor.
    let cur = unsafe { *record } as *mut u8;
    let next = if cur.is_null() {
        0
    } else {
        let at = cur as usize - buffer as usize;
        // SAFETY: `cur` is a record this function returned, inside the buffer.
        let kind = unsafe { std::ptr::read_unaligned(cur as *const u32) };
        at + record_size(kind).max(8)
    };
    if next + 4 > valid {
        return MAX_LIMIT_REACHED;
    }
    // SAFETY: `next + 4 <= valid`: the kind of the next record lies in the buffer.
    let kind = unsafe { std::ptr::read_unaligned(buffer.add(next) as *const u32) };
    if record_size(kind) == 0 || next + record_size(kind) > valid {
        return MAX_LIMIT_REACHED;
    }
    // SAFETY: the caller's cursor; the record lies inside the valid bytes.
    unsafe { *record = buffer.add(next).cast() };
    OK
}

/// # Safety
/// `ts` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuptiGetTimestamp(ts: *mut u64) -> u32 {
    if ts.is_null() {
        return INVALID_PARAMETER;
    }
    // SAFETY: checked above.
    unsafe { *ts = clock::now_ns() };
    OK
}

/// The simulated timeline is CLOCK_MONOTONIC already: a client's callback reading that clock
/// would give the same values, so it is accepted and not called.
#[no_mangle]
pub extern "C" fn cuptiActivityRegisterTimestampCallback(_f: CUpti_TimestampCallbackFunc) -> u32 {
    OK
}

/// # Safety
/// `handle` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuptiSubscribe(
    handle: *mut CUpti_SubscriberHandle,
    _callback: CUpti_CallbackFunc,
    _user_data: *mut c_void,
) -> u32 {
    if handle.is_null() {
        return INVALID_PARAMETER;
    }
    if SUBSCRIBED.swap(true, Ordering::AcqRel) {
        return MULTIPLE_SUBSCRIBERS;
    }
    // SAFETY: checked above. Any non-null value serves as the handle.
    unsafe { *handle = std::ptr::NonNull::dangling().as_ptr() };
    OK
}

#[no_mangle]
pub extern "C" fn cuptiUnsubscribe(_handle: CUpti_SubscriberHandle) -> u32 {
    SUBSCRIBED.store(false, Ordering::Release);
    OK
}

/// # Safety
/// `dropped` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuptiActivityGetNumDroppedRecords(
    _ctx: *mut c_void,
    _stream: u32,
    dropped: *mut usize,
) -> u32 {
    if dropped.is_null() {
        return INVALID_PARAMETER;
    }
    // SAFETY: checked above. Reading resets the count, as CUPTI does.
    unsafe { *dropped = DROPPED.swap(0, Ordering::Relaxed) as usize };
    OK
}
