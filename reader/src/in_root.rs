//! Opening a path as another process sees it, inside its root (a container's files, not this
//! machine's): the one way `attach`, the agent's pod discovery and the symbolizer (modules of a
//! process in another mount namespace) reach into a container.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Process `pid`'s root folder (`/proc/<pid>/root`), open with `O_PATH`.
pub fn open_root(pid: u32) -> io::Result<OwnedFd> {
    let root = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(format!("/proc/{pid}/root"))?;
    Ok(OwnedFd::from(root))
}

/// Opens `path` of process `pid`'s file system with `O_PATH | O_CLOEXEC` (and `O_DIRECTORY`
/// when `dir`), resolved as the process would resolve it, inside its root: an absolute link
/// in a container points into the container, never at this machine's files (`openat2` with
/// `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`; kernels before 5.6 fall back to
/// `/proc/<pid>/root/<path>`). Only to name, stat or follow what was found.
pub fn open_in_root(pid: u32, path: &Path, dir: bool) -> io::Result<OwnedFd> {
    let root = open_root(pid)?;
    open_under(root.as_fd(), path, dir)
}

/// [`open_in_root`] under a root folder already open (`open_root`): `O_PATH`, so nothing at
/// `path` is opened for reading or writing (a FIFO or a device is not opened, its driver
/// not called).
pub fn open_under(root: BorrowedFd<'_>, path: &Path, dir: bool) -> io::Result<OwnedFd> {
    let mut flags = libc::O_PATH | libc::O_CLOEXEC;
    if dir {
        flags |= libc::O_DIRECTORY;
    }
    open_under_flags(root, path, flags)
}

/// The folder `path` of process `pid`'s file system, opened inside its root like
/// [`open_in_root`] (`O_PATH | O_DIRECTORY`), without following a link at its last component
/// (`O_NOFOLLOW`: a link there is an error, `ENOTDIR` or `ELOOP`). Links before it resolve
/// inside the root. For a folder that is written into on the process's behalf (the attach
/// control file): what was opened is then checked on the descriptor, and files are made in
/// it relative to the descriptor, never by its path again.
pub fn open_dir_in_root_nofollow(pid: u32, path: &Path) -> io::Result<OwnedFd> {
    let root = open_root(pid)?;
    open_under_flags(
        root.as_fd(),
        path,
        libc::O_PATH | libc::O_CLOEXEC | libc::O_DIRECTORY | libc::O_NOFOLLOW,
    )
}

fn open_under_flags(root: BorrowedFd<'_>, path: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
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
    // SAFETY: `c` is NUL-terminated; `root` an open descriptor; the result is owned at once.
    let fd = unsafe { libc::openat(root.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor openat just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn an_absolute_link_resolves_inside_the_root() {
        let d = syncspy_test_support::TempDir::new("in-root");
        let root = std::fs::File::open(d.path()).unwrap();
        std::fs::create_dir(d.path().join("etc")).unwrap();
        std::fs::write(d.path().join("etc/lib.so"), b"inside").unwrap();
        // `/etc/lib.so` seen from the root `d`: the folder's file, not this machine's.
        std::os::unix::fs::symlink("/etc/lib.so", d.path().join("link")).unwrap();
        let fd = open_under(root.as_fd(), Path::new("/link"), false).unwrap();
        let st = std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
        let inside = std::fs::metadata(d.path().join("etc/lib.so")).unwrap();
        assert_eq!((st.dev(), st.ino()), (inside.dev(), inside.ino()));
        // `..` stays in the root too.
        let fd = open_under(root.as_fd(), Path::new("/../../etc/lib.so"), false).unwrap();
        let st = std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
        assert_eq!(st.ino(), inside.ino());
        assert!(open_under(root.as_fd(), Path::new("/none"), false).is_err());
    }
}
