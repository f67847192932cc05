//! The attach files, opened as `syncspy_read::safe_file` opens the CLI's (this crate cannot
//! depend on the reader): once, never through a link, checked on the descriptor, never
//! blocking. The control file and its report sit in a folder every user can write
//! (`/dev/shm`), and the process may run as root.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The most the control file may hold.
const CONTROL_MAX: u64 = 64 << 10;

fn open(path: &Path, flags: libc::c_int, mode: libc::c_uint) -> io::Result<File> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let flags = flags | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY;
    // SAFETY: a NUL-terminated path; the descriptor returned is owned by the File.
    let fd = unsafe { libc::open(c.as_ptr(), flags, mode) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nobody else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

fn me() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// The folder holding `path`, opened `O_PATH` without following a link at its last component.
fn open_parent(path: &Path) -> Option<OwnedFd> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let c = std::ffi::CString::new(parent.as_os_str().as_bytes()).ok()?;
    let flags =
        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY;
    // SAFETY: a NUL-terminated path; the descriptor returned is owned at once.
    let fd = unsafe { libc::open(c.as_ptr(), flags) };
    // SAFETY: a new descriptor nobody else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fstat(fd: &impl AsRawFd) -> Option<libc::stat> {
    // SAFETY: `stat` is plain data (all-zero is a valid value).
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor and a valid out-pointer.
    (unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0).then_some(st)
}

/// Whether a control file in a folder of owner `owner` and mode `mode` can only have been
/// put there, and kept there, by this process's user or root: the folder is theirs (this
/// user's or root's), and no other user can write in it, or it is sticky (`/dev/shm`,
/// `/tmp`: others can add files there, which the file's own checks refuse, but cannot
/// remove or replace this user's or root's).
pub(super) fn folder_trusted(owner: u32, mode: u32, me: u32) -> bool {
    (owner == me || owner == 0) && (mode & 0o022 == 0 || mode & libc::S_ISVTX != 0)
}

/// The control file's text, when it can be trusted: in a trusted folder
/// ([`folder_trusted`], checked on the folder's descriptor, a link at the folder not
/// followed), a regular file (not a link, FIFO or device) with no other name (a hard link),
/// owned by this process's user or by root, checked on the descriptor it is read from.
pub(super) fn read_control(path: &Path) -> Option<String> {
    let dir = open_parent(path)?;
    let d = fstat(&dir)?;
    if !folder_trusted(d.st_uid, d.st_mode, me()) {
        return None;
    }
    let name = std::ffi::CString::new(path.file_name()?.as_bytes()).ok()?;
    let flags =
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY;
    // SAFETY: `dir` is open and `name` NUL-terminated; the descriptor is owned at once.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a new descriptor nobody else owns.
    let f = unsafe { File::from_raw_fd(fd) };
    let md = f.metadata().ok()?;
    if !md.is_file()
        || !(md.uid() == me() || md.uid() == 0)
        || md.nlink() != 1
        || md.len() > CONTROL_MAX
    {
        return None;
    }
    let mut text = String::new();
    f.take(CONTROL_MAX).read_to_string(&mut text).ok()?;
    Some(text)
}

/// Whether the control file at `path` is still one this library may heed (its lease): a
/// regular file, not a link, of this user or root. Another user cannot keep an attach alive
/// by touching a file of its own planted at the name.
pub(super) fn control_metadata(path: &Path) -> Option<std::fs::Metadata> {
    std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_file() && (m.uid() == me() || m.uid() == 0))
}

/// Creates the report file, 0600: a new file (`O_CREAT | O_EXCL`, never through a planted
/// link); a stale one of an earlier attach is removed first.
pub(super) fn create_report(path: &Path) -> io::Result<File> {
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
    match open(path, flags, 0o600) {
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
            std::fs::remove_file(path)?;
            open(path, flags, 0o600)
        }
        r => r,
    }
}

/// Opens the report file to append to it: a regular file of this user only.
pub(super) fn append_report(path: &Path) -> io::Result<File> {
    let f = open(path, libc::O_WRONLY | libc::O_APPEND | libc::O_NONBLOCK, 0)?;
    let md = f.metadata()?;
    if !md.is_file() || md.uid() != me() {
        return Err(io::Error::from(io::ErrorKind::PermissionDenied));
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_report_never_follows_a_planted_link_and_is_private() {
        let d = syncspy_test_support::TempDir::new("attach-safe-file");
        let victim = d.file("victim", "precious");
        let report = d.path().join("syncspy-attach-1.report");
        std::os::unix::fs::symlink(&victim, &report).unwrap();
        create_report(&report)
            .unwrap()
            .write_all(b"cover\n")
            .unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let m = std::fs::symlink_metadata(&report).unwrap();
        assert!(m.is_file());
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        append_report(&report)
            .unwrap()
            .write_all(b"detached\n")
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(&report).unwrap(),
            "cover\ndetached\n"
        );

        // Appending and reading the control never go through a link or into a FIFO.
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(append_report(&link).is_err());
        assert!(read_control(&link).is_none());
        let fifo = d.path().join("fifo");
        syncspy_test_support::mkfifo(&fifo);
        assert!(read_control(&fifo).is_none());
        assert!(append_report(&fifo).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }
}
