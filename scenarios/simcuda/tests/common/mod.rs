//! Helpers shared by the integration tests, which call the exported C API in-process.
#![allow(dead_code)] // each test binary uses a different subset

use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use cudarc::runtime::sys::{cudaError_t, cudaMemcpyKind, cudaStreamNonBlocking, cudaStream_t};
use simcudart as sim;

pub use cudaError_t::*;

pub const H2H: u32 = cudaMemcpyKind::cudaMemcpyHostToHost as u32;
pub const H2D: u32 = cudaMemcpyKind::cudaMemcpyHostToDevice as u32;
pub const D2H: u32 = cudaMemcpyKind::cudaMemcpyDeviceToHost as u32;
pub const D2D: u32 = cudaMemcpyKind::cudaMemcpyDeviceToDevice as u32;
pub const DEFAULT: u32 = cudaMemcpyKind::cudaMemcpyDefault as u32;

pub const LEGACY: cudaStream_t = std::ptr::null_mut();
pub const PER_THREAD: cudaStream_t = 2 as cudaStream_t;

/// Tests of one binary share one simulated device; timing tests must not see each other's
/// work (a legacy-stream operation waits for every blocking stream), so they take turns.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Restores the default time scale when dropped.
pub struct TimeScale;

impl TimeScale {
    pub fn set(scale: f64) -> Self {
        sim::set_time_scale(scale);
        Self
    }
}

impl Drop for TimeScale {
    fn drop(&mut self) {
        sim::set_time_scale(1.0);
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// How long `f` blocks the calling thread, in ms, and what it returned.
pub fn timed<T>(f: impl FnOnce() -> T) -> (f64, T) {
    let start = Instant::now();
    let out = f();
    (ms(start.elapsed()), out)
}

unsafe extern "C" fn sleep_us(arg: *mut c_void) {
    std::thread::sleep(Duration::from_micros(arg as usize as u64));
}

/// Queues a host function that sleeps `ms`: GPU work of known duration.
pub fn host_sleep(stream: cudaStream_t, ms: u64) {
    let arg = (ms * 1000) as usize as *mut c_void;
    // SAFETY: `sleep_us` reads nothing through its argument.
    let rc = unsafe { sim::cudaLaunchHostFunc(stream, Some(sleep_us), arg) };
    assert_eq!(rc, cudaSuccess);
}

pub fn stream(non_blocking: bool) -> cudaStream_t {
    let mut s = std::ptr::null_mut();
    let flags = if non_blocking {
        cudaStreamNonBlocking
    } else {
        0
    };
    assert_eq!(
        // SAFETY: `s` is a valid out-pointer.
        unsafe { sim::cudaStreamCreateWithFlags(&mut s, flags) },
        cudaSuccess
    );
    s
}

pub fn device_alloc(bytes: usize) -> *mut u8 {
    let mut p = std::ptr::null_mut();
    // SAFETY: `p` is a valid out-pointer.
    assert_eq!(unsafe { sim::cudaMalloc(&mut p, bytes) }, cudaSuccess);
    p.cast()
}

pub fn pinned_alloc(bytes: usize) -> *mut u8 {
    let mut p = std::ptr::null_mut();
    // SAFETY: `p` is a valid out-pointer.
    assert_eq!(unsafe { sim::cudaMallocHost(&mut p, bytes) }, cudaSuccess);
    p.cast()
}

pub fn sync_device() {
    assert_eq!(sim::cudaDeviceSynchronize(), cudaSuccess);
}

/// Runs `child` in a forked process and returns its exit status (its return value), killing it
/// if it takes longer than `limit`. The child talks only through its exit status: another
/// thread of the test harness may hold the stdout lock at the fork.
pub fn in_child(limit: Duration, child: impl FnOnce() -> i32) -> Option<i32> {
    // SAFETY: the child only runs `child` and then `_exit`s, never returning into the harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(101);
        // SAFETY: ends the child without running the parent's atexit handlers.
        unsafe { libc::_exit(code) };
    }
    let deadline = Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if done == pid {
            return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        }
        if Instant::now() > deadline {
            // SAFETY: killing and reaping our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
