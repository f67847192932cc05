//! The NCCL functions the distributed scenarios call (`nccl.h` of NCCL 2.2x), reached through
//! the dynamic symbol table (`libnccl.so.2`, see `build.rs`) as PyTorch's libtorch_cuda
//! reaches them: the real NCCL on a GPU machine, the simulator's under `syncspy run --sim`.

#![allow(non_camel_case_types)] // the C names

use std::ffi::{c_char, c_int, c_void};

use crate::cuda::cudaStream_t;

/// `ncclResult_t`; 0 is `ncclSuccess`.
pub type ncclResult_t = c_int;
/// `ncclComm_t`: an opaque handle.
pub type ncclComm_t = *mut c_void;

/// `ncclUniqueId`: 128 opaque bytes, passed by value to `ncclCommInitRank`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ncclUniqueId {
    pub internal: [u8; 128],
}

/// `ncclFloat32`.
pub const NCCL_FLOAT32: c_int = 7;
/// `ncclSum`.
pub const NCCL_SUM: c_int = 0;

#[link(name = "nccl")]
extern "C" {
    pub fn ncclGetVersion(version: *mut c_int) -> ncclResult_t;
    pub fn ncclGetUniqueId(id: *mut ncclUniqueId) -> ncclResult_t;
    pub fn ncclCommInitRank(
        comm: *mut ncclComm_t,
        nranks: c_int,
        id: ncclUniqueId,
        rank: c_int,
    ) -> ncclResult_t;
    pub fn ncclCommDestroy(comm: ncclComm_t) -> ncclResult_t;
    pub fn ncclCommCount(comm: ncclComm_t, count: *mut c_int) -> ncclResult_t;
    pub fn ncclCommUserRank(comm: ncclComm_t, rank: *mut c_int) -> ncclResult_t;
    pub fn ncclCommGetAsyncError(comm: ncclComm_t, error: *mut ncclResult_t) -> ncclResult_t;
    pub fn ncclGetErrorString(result: ncclResult_t) -> *const c_char;
    pub fn ncclGetLastError(comm: ncclComm_t) -> *const c_char;
    pub fn ncclAllReduce(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        count: usize,
        datatype: c_int,
        op: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t;
    pub fn ncclGroupStart() -> ncclResult_t;
    pub fn ncclGroupEnd() -> ncclResult_t;
}

/// Panics with the call and NCCL's messages unless `rc` is `ncclSuccess`.
#[track_caller]
pub fn check(rc: ncclResult_t, what: &str) {
    if rc != 0 {
        // SAFETY: NCCL returns static NUL-terminated strings for every code, and its last
        // error as a NUL-terminated buffer.
        let (msg, last) = unsafe {
            (
                std::ffi::CStr::from_ptr(ncclGetErrorString(rc)),
                std::ffi::CStr::from_ptr(ncclGetLastError(std::ptr::null_mut())),
            )
        };
        panic!(
            "{what} failed: {rc} ({}): {}",
            msg.to_string_lossy(),
            last.to_string_lossy()
        );
    }
}
