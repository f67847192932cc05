//! The CUPTI stand-in: activity records of the simulated timeline, through CUPTI's own
//! buffer protocol, read back at cudarc's CUDA 13.0 record offsets.
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::{c_void, CStr};
use std::mem::offset_of;
use std::sync::Mutex;

use common::*;
use cudarc::cupti::sys::{
    CUpti_ActivityKernel10, CUpti_ActivityKind, CUpti_ActivityMemcpy6, CUpti_ActivityMemset4,
};
use simcudart as sim;

const KERNEL: u32 = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL as u32;
const MEMCPY: u32 = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY as u32;
const MEMSET: u32 = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET as u32;

/// What a record said: kind, start, end, device, bytes (copies, memsets), name (kernels).
#[derive(Debug, Clone, PartialEq)]
struct Got {
    kind: u32,
    start: u64,
    end: u64,
    device: u32,
    bytes: u64,
    name: String,
}

static GOT: Mutex<Vec<Got>> = Mutex::new(Vec::new());
static BUFFERS: Mutex<u32> = Mutex::new(0);

unsafe fn at<T: Copy>(rec: *const u8, off: usize) -> T {
    // SAFETY: the caller's record holds a T at `off`.
    unsafe { std::ptr::read_unaligned(rec.add(off).cast()) }
}

unsafe extern "C" fn request(buf: *mut *mut u8, size: *mut usize, max: *mut usize) {
    // A small buffer: a flush of many records needs several.
    let b = vec![0u8; 4096].into_boxed_slice();
    // SAFETY: CUPTI's out-pointers.
    unsafe {
        *size = b.len();
        *max = 0;
        *buf = Box::into_raw(b).cast();
    }
    *BUFFERS.lock().unwrap() += 1;
}

unsafe extern "C" fn complete(
    _ctx: cudarc::driver::sys::CUcontext,
    _stream: u32,
    buf: *mut u8,
    size: usize,
    valid: usize,
) {
    let mut rec: *mut c_void = std::ptr::null_mut();
    // SAFETY: the buffer `request` made, `valid` bytes of records.
    while unsafe { sim::cuptiActivityGetNextRecord(buf, valid, &mut rec) } == 0 {
        let r = rec as *const u8;
        // SAFETY: a complete record of its kind.
        let g = unsafe {
            let kind: u32 = at(r, 0);
            match kind {
                KERNEL => {
                    type K = CUpti_ActivityKernel10;
                    let name: *const std::ffi::c_char = at(r, offset_of!(K, name));
                    Got {
                        kind,
                        start: at(r, offset_of!(K, start)),
                        end: at(r, offset_of!(K, end)),
                        device: at(r, offset_of!(K, deviceId)),
                        bytes: 0,
                        name: CStr::from_ptr(name).to_string_lossy().into_owned(),
                    }
                }
                MEMCPY => {
                    type M = CUpti_ActivityMemcpy6;
                    Got {
                        kind,
                        start: at(r, offset_of!(M, start)),
                        end: at(r, offset_of!(M, end)),
                        device: at(r, offset_of!(M, deviceId)),
                        bytes: at(r, offset_of!(M, bytes)),
                        name: String::new(),
                    }
                }
                _ => {
                    type S = CUpti_ActivityMemset4;
                    Got {
                        kind,
                        start: at(r, offset_of!(S, start)),
                        end: at(r, offset_of!(S, end)),
                        device: at(r, offset_of!(S, deviceId)),
                        bytes: at(r, offset_of!(S, bytes)),
                        name: String::new(),
                    }
                }
            }
        };
        GOT.lock().unwrap().push(g);
    }
    // SAFETY: the box `request` leaked.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(buf, size)) });
}

fn spin(ns: u64, s: cudarc::runtime::sys::cudaStream_t) {
    let lib = {
        let mut lib = std::ptr::null_mut();
        let nul = format!("{}\0", syncspy_kernels::PTX.trim_end_matches('\0'));
        // SAFETY: NUL-terminated PTX, no options.
        let rc = unsafe {
            sim::cudaLibraryLoadData(
                &mut lib,
                nul.as_ptr().cast(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        assert_eq!(rc, cudaSuccess);
        lib
    };
    let mut k = std::ptr::null_mut();
    assert_eq!(
        // SAFETY: valid out-pointer and name.
        unsafe { sim::cudaLibraryGetKernel(&mut k, lib, c"spin".as_ptr()) },
        cudaSuccess
    );
    let mut ns = ns;
    let mut args = [(&mut ns as *mut u64).cast::<c_void>()];
    let one = cudarc::runtime::sys::dim3 { x: 1, y: 1, z: 1 };
    // SAFETY: one u64 argument, as `spin` takes.
    let rc =
        unsafe { sim::cudaLaunchKernel(k as *const c_void, one, one, args.as_mut_ptr(), 0, s) };
    assert_eq!(rc, cudaSuccess);
}

#[test]
fn device_work_comes_back_as_cupti_records_only_while_enabled() {
    let _serial = serial();
    assert_eq!(
        // SAFETY: two `extern "C"` functions of CUPTI's callback types.
        unsafe { sim::cuptiActivityRegisterCallbacks(Some(request), Some(complete)) },
        0
    );
    let dev = device_alloc(1 << 20);
    let host = pinned_alloc(1 << 20);

    // Not enabled: nothing recorded.
    spin(200_000, LEGACY);
    sync_device();
    assert_eq!(sim::cuptiActivityFlushAll(0), 0);
    assert!(GOT.lock().unwrap().is_empty());

    for k in [KERNEL, MEMCPY, MEMSET] {
        assert_eq!(sim::cuptiActivityEnable(k), 0);
    }
    assert_ne!(
        sim::cuptiActivityEnable(9999),
        0,
        "an unknown kind is refused"
    );
    let mut t0 = 0u64;
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { sim::cuptiGetTimestamp(&mut t0) }, 0);
    spin(2_000_000, LEGACY);
    // SAFETY: 1 MiB at both ends.
    unsafe {
        assert_eq!(
            sim::cudaMemcpy(dev.cast(), host.cast(), 1 << 20, H2D),
            cudaSuccess
        );
        assert_eq!(sim::cudaMemset(dev.cast(), 0, 4096), cudaSuccess);
    }
    // Many small kernels: more records than one 4 KiB buffer holds.
    for _ in 0..40 {
        spin(1_000, LEGACY);
    }
    sync_device();
    assert_eq!(sim::cuptiActivityFlushAll(0), 0);
    let got = std::mem::take(&mut *GOT.lock().unwrap());
    assert!(*BUFFERS.lock().unwrap() >= 3, "several buffers were used");
    assert_eq!(got.len(), 43, "{got:#?}");
    let k = &got[0];
    assert_eq!((k.kind, k.device, k.name.as_str()), (KERNEL, 0, "spin"));
    assert!(k.start >= t0, "on the host clock");
    // 2 ms of spin plus the launch cost, as modeled.
    let d = k.end - k.start;
    assert!((2_000_000..2_100_000).contains(&d), "{d}");
    let c = &got[1];
    assert_eq!((c.kind, c.bytes), (MEMCPY, 1 << 20));
    assert!(c.start >= k.end, "stream order");
    let m = &got[2];
    assert_eq!((m.kind, m.bytes), (MEMSET, 4096));
    assert!(got[3..]
        .iter()
        .all(|g| g.kind == KERNEL && g.name == "spin"));
    let mut dropped = 99usize;
    assert_eq!(
        // SAFETY: a valid out-pointer.
        unsafe { sim::cuptiActivityGetNumDroppedRecords(std::ptr::null_mut(), 0, &mut dropped) },
        0
    );
    assert_eq!(dropped, 0);

    // Disabled again: nothing more.
    for k in [KERNEL, MEMCPY, MEMSET] {
        assert_eq!(sim::cuptiActivityDisable(k), 0);
    }
    spin(100_000, LEGACY);
    sync_device();
    sim::cuptiActivityFlushAll(0);
    assert!(GOT.lock().unwrap().is_empty());
}

#[test]
fn one_subscriber_at_a_time() {
    let mut a = std::ptr::null_mut();
    let mut b = std::ptr::null_mut();
    // SAFETY: valid out-pointers, no callback.
    unsafe {
        assert_eq!(sim::cuptiSubscribe(&mut a, None, std::ptr::null_mut()), 0);
        assert_ne!(sim::cuptiSubscribe(&mut b, None, std::ptr::null_mut()), 0);
    }
    assert_eq!(sim::cuptiUnsubscribe(a), 0);
    // SAFETY: as above.
    unsafe {
        assert_eq!(sim::cuptiSubscribe(&mut b, None, std::ptr::null_mut()), 0);
    }
    assert_eq!(sim::cuptiUnsubscribe(b), 0);
}
