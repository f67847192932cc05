//! Opening the files syncspy writes and reads when other local users can plant things at
//! their paths (a shared GPU server: `/tmp`, `/dev/shm`, a shared working folder).
//!
//! The rules, for every writer of the CLI, the agent and the monitor:
//! - a path is opened once, never checked and then opened again (a user could swap it in
//!   between), and without following a symbolic link, except one that belongs to this user
//!   or to root (`/dev/stdout`, `/dev/fd/N`);
//! - what was opened is checked on the descriptor: its type and its owner;
//! - an existing FIFO is written only if this user owns it, and it is opened without blocking:
//!   a FIFO that nobody reads is an error, not a hang. A character device is written only if
//!   it is a data sink (`/dev/null`, `/dev/zero`, `/dev/full`) or a terminal of this user;
//! - new files are created with `O_CREAT | O_EXCL` (a link planted at the name is never
//!   followed), or under a random name and renamed into place.
//!
//! Reads of input files (`syncspy report FILE`, budget files) take regular files only and
//! stop at a size bound, so `/dev/zero` or a FIFO is an error, not an endless read or a hang.
//!
//! The injected library (`interpose/`) cannot depend on this crate and has its own small
//! copy of the same rules (`interpose/src/attach/safe_file.rs`).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// The most `syncspy report` reads of a report file.
pub const REPORT_MAX_BYTES: u64 = 256 << 20;
/// The most a budget file may hold.
pub const BUDGET_MAX_BYTES: u64 = 1 << 20;

/// The effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

fn cpath(path: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"))
}

/// `open(2)`, close-on-exec, as a `File`.
fn open_raw(path: &Path, flags: libc::c_int, mode: libc::mode_t) -> io::Result<File> {
    let c = cpath(path)?;
    // SAFETY: a NUL-terminated path; the descriptor returned is owned by the File.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            flags | libc::O_CLOEXEC,
            libc::c_uint::from(mode),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor nobody else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Clears `O_NONBLOCK` on an opened FIFO or device, so that writes wait for its reader
/// instead of failing with `EAGAIN` when its buffer is full.
fn set_blocking(f: &File) -> io::Result<()> {
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if fl < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn refused(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why)
}

/// Whether an opened FIFO or character device may be written by this user: a FIFO it owns;
/// `/dev/null`, `/dev/zero`, `/dev/full` (any owner: they keep nothing); a terminal it owns,
/// or `/dev/tty`. Anything else (another user's FIFO, a disk, `/dev/mem`) is refused.
fn check_stream(md: &std::fs::Metadata) -> io::Result<()> {
    let me = euid();
    let ft = md.file_type();
    if ft.is_fifo() {
        if md.uid() != me {
            return Err(refused(format!(
                "a FIFO owned by user {}, not by this user ({me}): not written",
                md.uid()
            )));
        }
        return Ok(());
    }
    let (major, minor) = (libc::major(md.rdev()), libc::minor(md.rdev()));
    let sink = major == 1 && matches!(minor, 3 | 5 | 7);
    let tty = major == 4 || major == 5 || (136..=143).contains(&major);
    if sink || (major, minor) == (5, 0) || (tty && md.uid() == me) {
        Ok(())
    } else if tty {
        Err(refused(format!(
            "a terminal owned by user {}, not by this user ({me}): not written",
            md.uid()
        )))
    } else {
        Err(refused(format!(
            "a character device ({major}:{minor}) that is neither a terminal nor /dev/null, \
             /dev/zero or /dev/full: not written"
        )))
    }
}

/// What is at an output path, opened at most once.
pub enum Existing {
    /// Nothing.
    Absent,
    /// A FIFO or character device this user may write (see the module's rules), opened for
    /// writing, blocking.
    Stream(File),
    /// A regular file, opened for writing when this user could (not truncated); `None`
    /// when it could not be opened for writing.
    Regular(Option<File>),
    /// A symbolic link that is not followed (another user's, or one to a regular file).
    Link,
}

/// Opens what is at `path` for writing, without creating, truncating or blocking, and
/// without following a symbolic link unless this user or root owns it and it leads to a
/// FIFO or character device. Errors: a FIFO with no reader, another user's FIFO, a device
/// that is not a sink or this user's terminal, a folder, a socket.
pub fn open_existing_for_write(path: &Path) -> io::Result<Existing> {
    let flags = libc::O_WRONLY | libc::O_NOCTTY | libc::O_NONBLOCK;
    match open_raw(path, flags | libc::O_NOFOLLOW, 0) {
        Ok(f) => classify_opened(f, path),
        Err(e) => match e.raw_os_error() {
            Some(libc::ENOENT) => Ok(Existing::Absent),
            Some(libc::ELOOP) => open_through_link(path, flags),
            Some(libc::ENXIO) => wait_for_reader(path, flags | libc::O_NOFOLLOW),
            Some(libc::EACCES | libc::EPERM | libc::EROFS | libc::ETXTBSY) => {
                match std::fs::symlink_metadata(path) {
                    Ok(m) if m.is_file() => Ok(Existing::Regular(None)),
                    _ => Err(e),
                }
            }
            Some(libc::EISDIR) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a folder, not a regular file, FIFO or character device",
            )),
            _ => Err(e),
        },
    }
}

/// How long a FIFO may take to get its reader (`syncspy run --report f & cat f`).
const READER_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// A FIFO (or socket) with no reader at the path: another user's is refused at once; this
/// user's is tried again for [`READER_GRACE`], then it is an error, never a hang.
fn wait_for_reader(path: &Path, flags: libc::c_int) -> io::Result<Existing> {
    let start = std::time::Instant::now();
    loop {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_fifo() && m.uid() != euid() => {
                return Err(refused(format!(
                    "a FIFO owned by user {}, not by this user ({}): not written",
                    m.uid(),
                    euid()
                )))
            }
            Ok(m) if m.file_type().is_fifo() => {}
            _ => return Err(no_reader(path)),
        }
        if start.elapsed() >= READER_GRACE {
            return Err(no_reader(path));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        match open_raw(path, flags, 0) {
            Ok(f) => return classify_opened(f, path),
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {}
            Err(e) => return Err(e),
        }
    }
}

fn no_reader(path: &Path) -> io::Error {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => io::Error::new(
            io::ErrorKind::InvalidInput,
            "a socket, not a regular file, FIFO or character device: not written",
        ),
        _ => io::Error::new(
            io::ErrorKind::BrokenPipe,
            "a FIFO that nobody reads: nothing written (start its reader first)",
        ),
    }
}

fn classify_opened(f: File, path: &Path) -> io::Result<Existing> {
    let md = f.metadata()?;
    let ft = md.file_type();
    if ft.is_file() {
        return Ok(Existing::Regular(Some(f)));
    }
    if ft.is_fifo() || ft.is_char_device() {
        check_stream(&md)?;
        set_blocking(&f)?;
        return Ok(Existing::Stream(f));
    }
    let _ = path;
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        "not a regular file, FIFO or character device: not written",
    ))
}

/// A symbolic link at the path: followed only when it belongs to this user or to root
/// (a link in a sticky folder cannot be swapped by another user), and only to a FIFO or
/// character device; a link to anything else is replaced, never written through.
fn open_through_link(path: &Path, flags: libc::c_int) -> io::Result<Existing> {
    let link = std::fs::symlink_metadata(path)?;
    if !link.file_type().is_symlink() {
        // Swapped since: try again from the start, once, without following anything.
        return match open_raw(path, flags | libc::O_NOFOLLOW, 0) {
            Ok(f) => classify_opened(f, path),
            Err(e) => Err(e),
        };
    }
    if link.uid() != euid() && link.uid() != 0 {
        return Ok(Existing::Link);
    }
    let f = match open_raw(path, flags, 0) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(Existing::Link),
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => return Err(no_reader(path)),
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => return Ok(Existing::Link),
        Err(e) => return Err(e),
    };
    let md = f.metadata()?;
    if md.file_type().is_fifo() || md.file_type().is_char_device() {
        check_stream(&md)?;
        set_blocking(&f)?;
        return Ok(Existing::Stream(f));
    }
    if path.parent() == Some(Path::new("/dev"))
        || path.starts_with("/dev/fd")
        || path.starts_with("/proc")
    {
        // `/dev/stdout` redirected to a file: replacing the link would replace a system
        // file.
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a link in /dev, /dev/fd or /proc to a regular file: not replaced (write to `-` instead)",
        ));
    }
    Ok(Existing::Link)
}

/// Opens `path` to write a stream into (the command's log under the monitor): creates it
/// (`O_CREAT | O_EXCL`, `mode` less the umask); else an existing regular file this user
/// owns, with no other name (a hard link), truncated; else a FIFO or character device this
/// user may write. Never follows another user's link, never blocks.
pub fn create_or_truncate(path: &Path, mode: u32) -> io::Result<File> {
    let create = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_NOCTTY;
    match open_raw(path, create, mode as libc::mode_t) {
        Ok(f) => return Ok(f),
        Err(e) if e.raw_os_error() != Some(libc::EEXIST) => return Err(e),
        Err(_) => {}
    }
    match open_existing_for_write(path)? {
        Existing::Absent => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "the file came and went while it was opened: try again",
        )),
        Existing::Stream(f) => Ok(f),
        Existing::Link => Err(refused(
            "a symbolic link (not this user's, or not to a FIFO or device): not followed"
                .to_string(),
        )),
        Existing::Regular(None) => Err(io::Error::from_raw_os_error(libc::EACCES)),
        Existing::Regular(Some(f)) => {
            let md = f.metadata()?;
            if md.uid() != euid() {
                return Err(refused(format!(
                    "a file owned by user {}, not by this user ({}): not overwritten",
                    md.uid(),
                    euid()
                )));
            }
            if md.nlink() != 1 {
                return Err(refused(
                    "a file with other names (hard links): not overwritten".to_string(),
                ));
            }
            f.set_len(0)?;
            Ok(f)
        }
    }
}

/// Creates a new file at `path` (`O_CREAT | O_EXCL | O_NOFOLLOW`, `mode` less the umask):
/// fails when anything is at the path, a link included.
pub fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    open_raw(
        path,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_NOCTTY,
        mode as libc::mode_t,
    )
}

/// Opens an existing regular file this user owns for writing (to touch or append to it),
/// without following a link or blocking.
pub fn open_own_regular(path: &Path, append: bool) -> io::Result<File> {
    let mut flags = libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY;
    if append {
        flags |= libc::O_APPEND;
    }
    let f = open_raw(path, flags, 0)?;
    let md = f.metadata()?;
    if !md.is_file() || md.uid() != euid() {
        return Err(refused(
            "not a regular file of this user: not written".to_string(),
        ));
    }
    Ok(f)
}

/// Reads a regular file of at most `max` bytes, without blocking on a FIFO or reading a
/// device. `what` names the file in errors ("a report", "a budget file").
pub fn read_bounded(path: &Path, max: u64, what: &str) -> io::Result<Vec<u8>> {
    let f = open_raw(path, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY, 0)?;
    read_bounded_file(f, max, what)
}

/// [`read_bounded`], without following a link at `path` (a file in a folder other users
/// can write: the attach report).
pub fn read_bounded_nofollow(path: &Path, max: u64, what: &str) -> io::Result<Vec<u8>> {
    let f = open_raw(
        path,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_NOFOLLOW,
        0,
    )?;
    read_bounded_file(f, max, what)
}

fn read_bounded_file(f: File, max: u64, what: &str) -> io::Result<Vec<u8>> {
    let md = f.metadata()?;
    if !md.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file: {what} is read from a regular file only"),
        ));
    }
    let too_big = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {} MiB: too large for {what}", max >> 20),
        )
    };
    if md.len() > max {
        return Err(too_big());
    }
    let mut out = Vec::with_capacity(usize::try_from(md.len()).unwrap_or(0));
    f.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(too_big());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use syncspy_test_support::{mkfifo, TempDir};

    #[test]
    fn a_fifo_without_reader_is_an_error_not_a_hang() {
        let d = TempDir::new("safe-fifo");
        let fifo = d.path().join("f");
        mkfifo(&fifo);
        let e = open_existing_for_write(&fifo).err().unwrap();
        assert!(e.to_string().contains("nobody reads"), "{e}");
        let e = create_or_truncate(&fifo, 0o600).err().unwrap();
        assert!(e.to_string().contains("nobody reads"), "{e}");
        let e = read_bounded(&fifo, 10, "a report").err().unwrap();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }

    #[test]
    fn devices_that_are_not_sinks_are_refused_and_sinks_are_written() {
        assert!(matches!(
            open_existing_for_write(Path::new("/dev/null")),
            Ok(Existing::Stream(_))
        ));
        if Path::new("/dev/mem").exists() {
            let e = open_existing_for_write(Path::new("/dev/mem")).err();
            assert!(e.is_some());
        }
        let e = read_bounded(Path::new("/dev/zero"), 1 << 20, "a report")
            .err()
            .unwrap();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }

    #[test]
    fn reads_stop_at_the_bound() {
        let d = TempDir::new("safe-bound");
        let p = d.file("big", &"x".repeat(2000));
        let e = read_bounded(&p, 1000, "a budget file").err().unwrap();
        assert!(e.to_string().contains("too large for a budget file"), "{e}");
        assert_eq!(read_bounded(&p, 2000, "x").unwrap().len(), 2000);
    }

    #[test]
    fn create_or_truncate_keeps_away_from_links_and_hard_links() {
        let d = TempDir::new("safe-create");
        let victim = d.file("victim", "precious");
        let link = d.path().join("log");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(create_or_truncate(&link, 0o644).is_err());
        let hard = d.path().join("hard");
        std::fs::hard_link(&victim, &hard).unwrap();
        assert!(create_or_truncate(&hard, 0o644).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");

        let own = d.file("own", "old contents");
        create_or_truncate(&own, 0o644)
            .unwrap()
            .write_all(b"new")
            .unwrap();
        assert_eq!(std::fs::read_to_string(&own).unwrap(), "new");
        let fresh = d.path().join("fresh");
        create_or_truncate(&fresh, 0o600).unwrap();
        assert_eq!(std::fs::metadata(&fresh).unwrap().mode() & 0o777, 0o600);
    }
}
