//! Devices and versions.
#![allow(non_snake_case)]

use std::ffi::c_int;

use cudarc::runtime::sys::cudaError_t;

use super::{entry, Out};
use crate::runtime::runtime;

/// The version both `cudaRuntimeGetVersion` and `cudaDriverGetVersion` report: CUDA 13.0.
pub const SIMULATED_CUDA_VERSION: c_int = 13000;

/// `cudaGetDeviceCount`: `SIMCUDA_DEVICES` devices (1 by default).
///
/// # Safety
/// `count` is null or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn cudaGetDeviceCount(count: *mut c_int) -> cudaError_t {
    entry(|| {
        let out = Out::new(count)?;
        let devices = runtime().config.devices;
        // SAFETY: the caller's contract.
        unsafe { out.write(devices as c_int) };
        if devices == 0 {
            return Err(cudaError_t::cudaErrorNoDevice);
        }
        Ok(())
    })
}

/// `cudaSetDevice`: selects the calling thread's current device.
#[no_mangle]
pub extern "C" fn cudaSetDevice(device: c_int) -> cudaError_t {
    entry(|| runtime().set_current_device(device))
}

/// `cudaGetDevice`.
///
/// # Safety
/// `device` is null or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn cudaGetDevice(device: *mut c_int) -> cudaError_t {
    entry(|| {
        let out = Out::new(device)?;
        let current = runtime().current_device()?;
        // SAFETY: the caller's contract.
        unsafe { out.write(current as c_int) };
        Ok(())
    })
}

/// `cudaDeviceSynchronize`: blocks until all work on the current device is done.
#[no_mangle]
pub extern "C" fn cudaDeviceSynchronize() -> cudaError_t {
    if let Some(r) = super::driver::route() {
        // SAFETY: the driver's cuCtxSynchronize (either version) with no context.
        return super::driver::call_via(|| unsafe { (r.ctx_sync)(std::ptr::null_mut()) });
    }
    entry(|| {
        let rt = runtime();
        rt.sched.sync_device(rt.current_device()?)
    })
}

/// `cudaDeviceReset`: waits for the current device, then frees its memory, destroys its
/// streams and events, and clears its sticky fault.
#[no_mangle]
pub extern "C" fn cudaDeviceReset() -> cudaError_t {
    entry(|| {
        let rt = runtime();
        let device = rt.current_device()?;
        // A fault is what the reset clears; it is not an error of the reset.
        let _ = rt.sched.sync_device(device);
        {
            let mut map = rt.memory();
            for base in map.bases_on(device) {
                map.remove(base);
            }
        }
        let mut g = rt.sched.lock();
        let doomed: Vec<_> = g
            .streams
            .iter()
            .filter(|(_, s)| s.device == device && s.kind.is_user())
            .map(|(id, _)| *id)
            .collect();
        for id in doomed {
            rt.sched.destroy_stream(&mut g, id);
        }
        g.events.retain(|_, e| e.device != device);
        g.devices[device].fault = None;
        Ok(())
    })
}

/// `cudaRuntimeGetVersion`: 13000.
///
/// # Safety
/// `runtime_version` is null or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn cudaRuntimeGetVersion(runtime_version: *mut c_int) -> cudaError_t {
    entry(|| {
        // SAFETY: the caller's contract.
        unsafe { Out::new(runtime_version)?.write(SIMULATED_CUDA_VERSION) };
        Ok(())
    })
}

/// `cudaDriverGetVersion`: 13000, a driver that matches the runtime.
///
/// # Safety
/// `driver_version` is null or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn cudaDriverGetVersion(driver_version: *mut c_int) -> cudaError_t {
    entry(|| {
        // SAFETY: the caller's contract.
        unsafe { Out::new(driver_version)?.write(SIMULATED_CUDA_VERSION) };
        Ok(())
    })
}
