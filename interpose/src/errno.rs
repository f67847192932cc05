//! The calling thread's `errno`: every hook keeps it as the application left it (the library's
//! own work must not change it).

#[inline]
pub(crate) fn errno() -> i32 {
    // SAFETY: __errno_location always returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

#[inline]
pub(crate) fn set_errno(v: i32) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = v };
}
