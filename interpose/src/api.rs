//! What a program that loaded the library itself can ask it: `import syncspy` loads
//! `libsyncspy.so` with `ctypes.CDLL(path, RTLD_GLOBAL)` and reads its own segment.

use std::ffi::c_char;
use std::os::unix::ffi::OsStrExt;

/// Writes the path of this process's segment, NUL-terminated, into `buf` (`len` bytes).
/// Returns its length without the NUL; 0 when there is no segment (no CUDA call recorded
/// yet, dormant, or recording off); `-(length + 1)` when `buf` is too small (nothing
/// written).
///
/// # Safety
/// `buf` is null (with `len` 0) or points at `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn syncspy_segment_path(buf: *mut c_char, len: usize) -> isize {
    let Ok(Some(path)) = std::panic::catch_unwind(crate::state::segment_path) else {
        return 0;
    };
    let bytes = path.as_os_str().as_bytes();
    let n = isize::try_from(bytes.len()).unwrap_or(isize::MAX - 1);
    if buf.is_null() || bytes.len() >= len {
        return -(n + 1);
    }
    // SAFETY: `buf` holds `len` > bytes.len() writable bytes (checked above; the contract).
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len());
        *buf.add(bytes.len()) = 0;
    }
    n
}

/// How many CUDA calls reached the hooks in this process while it recorded into its segment:
/// the recorded events and the counted calls that did not stall. 0 when there is no segment.
/// Only grows while the segment is in use; a reader compares two values.
#[no_mangle]
pub extern "C" fn syncspy_calls_seen() -> u64 {
    std::panic::catch_unwind(crate::state::calls_seen).unwrap_or(0)
}
