//! Error codes: the per-thread "last error" of the runtime and the names and descriptions
//! returned by `cudaGetErrorName` / `cudaGetErrorString`.

use std::cell::Cell;
use std::ffi::CStr;

use cudarc::runtime::sys::cudaError_t;

/// Result of an internal operation: the error is the code the C caller receives.
pub(crate) type CudaResult<T = ()> = Result<T, cudaError_t>;

thread_local! {
    static LAST_ERROR: Cell<cudaError_t> = const { Cell::new(cudaError_t::cudaSuccess) };
}

/// Remembers `code` as the calling thread's last error. `cudaErrorNotReady` is a status, not an
/// error: the real runtime does not record it (checked on CUDA 13).
pub(crate) fn record(code: cudaError_t) {
    if code != cudaError_t::cudaSuccess && code != cudaError_t::cudaErrorNotReady {
        // During thread teardown the slot may be gone; the error is then simply not kept.
        let _ = LAST_ERROR.try_with(|last| last.set(code));
    }
}

/// `cudaGetLastError`: returns the last error and resets it to `cudaSuccess`.
pub(crate) fn take_last() -> cudaError_t {
    LAST_ERROR
        .try_with(|last| last.replace(cudaError_t::cudaSuccess))
        .unwrap_or(cudaError_t::cudaSuccess)
}

/// `cudaPeekAtLastError`: returns the last error without resetting it.
pub(crate) fn peek_last() -> cudaError_t {
    LAST_ERROR
        .try_with(Cell::get)
        .unwrap_or(cudaError_t::cudaSuccess)
}

pub(crate) const UNRECOGNIZED: &CStr = c"unrecognized error code";

/// Name and description of an error code, as the real runtime spells them; `None` for codes
/// this table does not know (the caller answers "unrecognized error code", as CUDA does for
/// values outside its enum).
pub(crate) fn describe(code: u32) -> Option<(&'static CStr, &'static CStr)> {
    TABLE
        .iter()
        .find(|(e, _, _)| *e as u32 == code)
        .map(|&(_, name, text)| (name, text))
}

#[rustfmt::skip]
const TABLE: &[(cudaError_t, &CStr, &CStr)] = {
    use cudaError_t::*;
    &[
        (cudaSuccess, c"cudaSuccess", c"no error"),
        (cudaErrorInvalidValue, c"cudaErrorInvalidValue", c"invalid argument"),
        (cudaErrorMemoryAllocation, c"cudaErrorMemoryAllocation", c"out of memory"),
        (cudaErrorInitializationError, c"cudaErrorInitializationError", c"initialization error"),
        (cudaErrorCudartUnloading, c"cudaErrorCudartUnloading", c"driver shutting down"),
        (cudaErrorInvalidConfiguration, c"cudaErrorInvalidConfiguration", c"invalid configuration argument"),
        (cudaErrorInvalidPitchValue, c"cudaErrorInvalidPitchValue", c"invalid pitch argument"),
        (cudaErrorInvalidSymbol, c"cudaErrorInvalidSymbol", c"invalid device symbol"),
        (cudaErrorInvalidHostPointer, c"cudaErrorInvalidHostPointer", c"invalid host pointer"),
        (cudaErrorInvalidDevicePointer, c"cudaErrorInvalidDevicePointer", c"invalid device pointer"),
        (cudaErrorInvalidMemcpyDirection, c"cudaErrorInvalidMemcpyDirection", c"invalid copy direction for memcpy"),
        (cudaErrorNotYetImplemented, c"cudaErrorNotYetImplemented", c"function not yet implemented"),
        (cudaErrorInsufficientDriver, c"cudaErrorInsufficientDriver", c"CUDA driver version is insufficient for CUDA runtime version"),
        (cudaErrorInvalidDeviceFunction, c"cudaErrorInvalidDeviceFunction", c"invalid device function"),
        (cudaErrorNoDevice, c"cudaErrorNoDevice", c"no CUDA-capable device is detected"),
        (cudaErrorInvalidDevice, c"cudaErrorInvalidDevice", c"invalid device ordinal"),
        (cudaErrorInvalidKernelImage, c"cudaErrorInvalidKernelImage", c"device kernel image is invalid"),
        (cudaErrorNoKernelImageForDevice, c"cudaErrorNoKernelImageForDevice", c"no kernel image is available for execution on the device"),
        (cudaErrorOperatingSystem, c"cudaErrorOperatingSystem", c"OS call failed or operation not supported on this OS"),
        (cudaErrorInvalidPtx, c"cudaErrorInvalidPtx", c"a PTX JIT compilation failed"),
        (cudaErrorInvalidResourceHandle, c"cudaErrorInvalidResourceHandle", c"invalid resource handle"),
        (cudaErrorSymbolNotFound, c"cudaErrorSymbolNotFound", c"named symbol not found"),
        (cudaErrorNotReady, c"cudaErrorNotReady", c"device not ready"),
        (cudaErrorIllegalAddress, c"cudaErrorIllegalAddress", c"an illegal memory access was encountered"),
        (cudaErrorMisalignedAddress, c"cudaErrorMisalignedAddress", c"misaligned address"),
        (cudaErrorLaunchOutOfResources, c"cudaErrorLaunchOutOfResources", c"too many resources requested for launch"),
        (cudaErrorLaunchTimeout, c"cudaErrorLaunchTimeout", c"the launch timed out and was terminated"),
        (cudaErrorHostMemoryAlreadyRegistered, c"cudaErrorHostMemoryAlreadyRegistered", c"part or all of the requested memory range is already mapped"),
        (cudaErrorHostMemoryNotRegistered, c"cudaErrorHostMemoryNotRegistered", c"pointer does not correspond to a registered memory region"),
        (cudaErrorLaunchFailure, c"cudaErrorLaunchFailure", c"unspecified launch failure"),
        (cudaErrorNotPermitted, c"cudaErrorNotPermitted", c"operation not permitted"),
        (cudaErrorNotSupported, c"cudaErrorNotSupported", c"operation not supported"),
        (cudaErrorTimeout, c"cudaErrorTimeout", c"wait operation timed out"),
        (cudaErrorUnknown, c"cudaErrorUnknown", c"unknown error"),
    ]
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_error_is_per_thread_and_reset_by_take() {
        record(cudaError_t::cudaErrorInvalidValue);
        record(cudaError_t::cudaErrorNotReady);
        assert_eq!(peek_last(), cudaError_t::cudaErrorInvalidValue);
        std::thread::spawn(|| assert_eq!(peek_last(), cudaError_t::cudaSuccess))
            .join()
            .unwrap();
        assert_eq!(take_last(), cudaError_t::cudaErrorInvalidValue);
        assert_eq!(take_last(), cudaError_t::cudaSuccess);
    }

    #[test]
    fn names_match_the_enum() {
        for (code, name, _) in TABLE {
            assert_eq!(name.to_str().unwrap(), format!("{code:?}"));
            assert_eq!(describe(*code as u32).unwrap().0, *name);
        }
        assert_eq!(describe(1).unwrap().1, c"invalid argument");
        assert!(describe(12345).is_none());
    }
}
