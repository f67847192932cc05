//! Opening a path as another process sees it, inside its root (a container's files, not this
//! machine's): the one way `attach` and the agent's pod discovery reach into a container.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens `path` of process `pid`'s file system with `O_PATH | O_CLOEXEC` (and `O_DIRECTORY`
/// when `dir`), resolved as the process would resolve it, inside its root: an absolute link
/// in a container points into the container, never at this machine's files (`openat2` with
/// `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`; kernels before 5.6 fall back to
/// `/proc/<pid>/root/<path>`). Only to name, stat or follow what was found.
pub fn open_in_root(pid: u32, path: &Path, dir: bool) -> io::Result<OwnedFd> {
    let mut flags = libc::O_PATH | libc::O_CLOEXEC;
    if dir {
        flags |= libc::O_DIRECTORY;
    }
    let root = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(format!("/proc/{pid}/root"))?;
    let rel = path.strip_prefix("/").unwrap_or(path);
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let c = std::ffi::CString::new(rel.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `open_how` is plain data (all-zero is its empty value).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: `c` is NUL-terminated and `how` a valid open_how of the size passed; the
    // descriptor returned is owned at once.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd >= 0 {
        // SAFETY: a descriptor openat2 just returned, owned by nobody else.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) });
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::ENOSYS) {
        return Err(e);
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags & !libc::O_CLOEXEC)
        .open(Path::new(&format!("/proc/{pid}/root")).join(rel))?;
    Ok(OwnedFd::from(f))
}
