//! The origin part of the header (ABI 1.5): where the writing process lives, so that a reader
//! in another PID or mount namespace can place it, and how a reader tells whether it still
//! runs without looking at pids.
//!
//! **Liveness.** A pid says nothing across PID namespaces: a job in a container calls itself
//! pid 2, and a reader on the host (or in another container) finds no such process, or
//! another one. So the writer holds an open-file-description lock (`F_OFD_SETLK`, a write
//! lock over the whole file) on its segment for as long as its process image lives, taken
//! before the file is renamed into place. The kernel drops the lock when the last descriptor
//! of that open file goes, whatever the namespaces: at exit, at `exec` (the descriptor is
//! close-on-exec), or when the process is killed. A forked child closes its inherited copy
//! at once (its `atfork` handler), so the lock stays its parent's. A reader asks with
//! `F_OFD_GETLK` for a read lock: a conflict means the writer still runs. Only a descriptor
//! open for writing can hold a write lock, and only the file's owner (or root) can open it so:
//! another user cannot make a dead segment look alive with a lock of their own.
//! [`FLAG_LIVENESS_LOCK`] says the writer took the lock; older segments (or a filesystem
//! without locks) fall back to the pid and start time, which holds only in the writer's own
//! PID namespace.
//!
//! **Identity.** The inodes of the writer's PID and mount namespaces (`/proc/self/ns/pid`,
//! `/proc/self/ns/mnt`): with the pid in `Ident` (the pid inside the writer's namespace), a
//! reader finds the process in its own namespace (`NSpid` in `/proc/<pid>/status`).
//!
//! Written once by the creator, before the rename, like `Ident`; plain data.

/// The writer holds an OFD write lock on its segment while its process lives.
pub const FLAG_LIVENESS_LOCK: u64 = 1;

/// The origin part of the header, appended at ABI 1.5.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    /// `FLAG_*` bits.
    pub flags: u64,
    /// Inode of the writer's PID namespace (`/proc/self/ns/pid`); 0 unknown.
    pub pid_ns: u64,
    /// Inode of the writer's mount namespace (`/proc/self/ns/mnt`); 0 unknown.
    pub mnt_ns: u64,
    /// Device of the nsfs the two inodes are on; 0 unknown.
    pub ns_dev: u64,
}

const _: () = assert!(std::mem::size_of::<Origin>() == 32);

/// End of the origin part in the header: a segment whose `header_size` reaches it has one.
pub const ORIGIN_END: usize = 7216;

impl Origin {
    /// The namespaces of the calling process (flags left 0: the creator sets them).
    pub fn of_this_process() -> Origin {
        use std::os::unix::fs::MetadataExt;
        let ns = |what: &str| std::fs::metadata(format!("/proc/self/ns/{what}")).ok();
        let pid = ns("pid");
        let mnt = ns("mnt");
        Origin {
            flags: 0,
            pid_ns: pid.as_ref().map_or(0, |m| m.ino()),
            mnt_ns: mnt.as_ref().map_or(0, |m| m.ino()),
            ns_dev: pid.as_ref().map_or(0, |m| m.dev()),
        }
    }

    /// Whether the writer is in another PID namespace than the calling process (known
    /// namespaces only).
    pub fn in_another_pid_namespace(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        if self.pid_ns == 0 {
            return false;
        }
        match std::fs::metadata("/proc/self/ns/pid") {
            Ok(m) => m.ino() != self.pid_ns || (self.ns_dev != 0 && m.dev() != self.ns_dev),
            Err(_) => false,
        }
    }

    /// Whether the writer shows its liveness with a lock.
    pub fn lock_held_while_alive(&self) -> bool {
        self.flags & FLAG_LIVENESS_LOCK != 0
    }
}

/// What the lock on a segment file says of its writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockState {
    /// A write lock is held on the file: its writer runs.
    Held,
    /// No write lock.
    Free,
    /// The filesystem or kernel answered the query with an error (no OFD locks).
    Unknown,
}

/// Asks whether someone holds a write lock on the open file `fd` (`F_OFD_GETLK` for a read
/// lock over the whole file). Never blocks.
pub fn lock_state(fd: std::os::fd::BorrowedFd<'_>) -> LockState {
    use std::os::fd::AsRawFd;
    // SAFETY: an all-zero `flock` is a valid value; the fields that matter are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_RDLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 0;
    // SAFETY: F_OFD_GETLK on an open descriptor with a pointer to a valid `flock` it fills.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    if rc != 0 {
        return LockState::Unknown;
    }
    if fl.l_type == libc::F_UNLCK as libc::c_short {
        LockState::Free
    } else {
        LockState::Held
    }
}

/// Takes a write lock over the whole of `fd`'s file, without waiting. Whether it was taken.
pub(crate) fn take_write_lock(fd: libc::c_int) -> bool {
    // SAFETY: as in `lock_state`.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: F_OFD_SETLK on an open descriptor with a pointer to a valid `flock`.
    unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &fl) == 0 }
}
