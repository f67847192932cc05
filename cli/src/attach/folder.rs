//! Where `syncspy attach` may write its control file: only in a folder that both the target's
//! user and this one can prove is the target's (issue 35, item 4).
//!
//! The control file is the target's (the library refuses one that is not its user's or
//! root's), so an attach by root creates a file that root then gives to the target's user.
//! Done in a folder that user merely named (its `SYNCSPY_DIR`, read from its environment), it
//! would hand that user a file, which it writes during the lease, in any folder of root's
//! (`SYNCSPY_DIR=/root/private`). So the folder is opened once, inside the target's root,
//! without following a link at its last component, and checked on the descriptor:
//! - owned by the target's user and writable by no one else (its own folder); or
//! - owned by the target's user or by root, writable by every user and sticky (`/dev/shm`,
//!   `/tmp`): the target's user could make the file there itself, and the sticky bit keeps
//!   everyone but the file's owner and root from removing or replacing it.
//!
//! Anything else is refused, and why is said. The file is then created in that descriptor
//! (`openat` with `O_CREAT | O_EXCL | O_NOFOLLOW`), never by the folder's path again.
//!
//! Folders are tried in order ([`candidates`]): the first (the attacher's `SYNCSPY_DIR` for an
//! injection into a process of this mount namespace, else the target's own folder), then the
//! target's `/dev/shm` and `/tmp`. A dormant library looks for its control file in the same
//! three places (`interpose/src/attach/mod.rs`, `dormant_control_paths`), so falling back
//! works for it too.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The shared folders tried after the first, as the target sees them.
pub const FALLBACKS: [&str; 2] = ["/dev/shm", "/tmp"];

/// A folder to try and what it is, for messages ("its SYNCSPY_DIR").
pub struct Candidate {
    pub path: PathBuf,
    pub what: String,
}

/// `first` (with what it is), then the shared fallbacks, without repeats.
pub fn candidates(first: PathBuf, what: String) -> Vec<Candidate> {
    let mut v = vec![Candidate { path: first, what }];
    for f in FALLBACKS {
        if !v.iter().any(|c| c.path == Path::new(f)) {
            v.push(Candidate {
                path: PathBuf::from(f),
                what: "a shared folder".into(),
            });
        }
    }
    v
}

/// A folder checked to be the target's: its descriptor (`O_PATH`), its path as the target
/// sees it, and the path by which this process reaches it (`/proc/<this pid>/fd/N`, valid
/// while this lives; given to the monitor, a child, too).
pub struct ControlDir {
    pub fd: OwnedFd,
    pub path_in: PathBuf,
    pub out: PathBuf,
}

/// `alice (uid 1000)`, or `uid 1000` when /etc/passwd does not name it.
pub fn user_label(uid: u32) -> String {
    let name = std::fs::read_to_string("/etc/passwd").ok().and_then(|p| {
        p.lines().find_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
        })
    });
    match name {
        Some(n) => format!("{n} (uid {uid})"),
        None => format!("uid {uid}"),
    }
}

/// Why a folder of owner `owner` and mode `mode` is not one to write the control file of a
/// process of user `target_uid` into (None: it may be used).
pub fn refusal(owner: u32, mode: u32, target_uid: u32) -> Option<String> {
    let sticky = mode & libc::S_ISVTX != 0;
    let others_write = mode & 0o022 != 0;
    let everyone_writes = mode & 0o002 != 0;
    let perms = format!("mode {:04o}", mode & 0o7777);
    if owner == target_uid && (!others_write || sticky) {
        return None;
    }
    if owner == 0 && sticky && everyone_writes {
        return None;
    }
    Some(if owner == target_uid {
        format!(
            "it is writable by other users ({perms}) and not sticky: another user could \
             replace the file"
        )
    } else if owner == 0 && everyone_writes {
        format!(
            "it is writable by every user ({perms}) and not sticky (a Kubernetes emptyDir is \
             so): another user could replace the file"
        )
    } else if sticky && everyone_writes {
        format!(
            "it is a shared folder ({perms}) of {}, neither root nor the process's user {}, \
             who could remove or replace the file",
            user_label(owner),
            user_label(target_uid)
        )
    } else {
        format!(
            "it belongs to {}, not to the process's user {}, and is not a shared sticky folder \
             like /dev/shm ({perms}): attach does not give that user a file there",
            user_label(owner),
            user_label(target_uid)
        )
    })
}

/// Opens `path` of process `pid`'s file system (inside its root, the last component not
/// followed) and checks it for a control file of user `target_uid`: the folder, or why not.
pub fn open_checked(pid: i32, path: &Path, target_uid: u32) -> Result<ControlDir, String> {
    if !path.is_absolute() {
        return Err("not an absolute path".into());
    }
    let fd =
        syncspy_read::in_root::open_dir_in_root_nofollow(pid as u32, path).map_err(|e| match e
            .raw_os_error()
        {
            Some(libc::ENOTDIR | libc::ELOOP) => {
                "a symbolic link or not a folder (attach does not follow a link there)".into()
            }
            _ => format!("cannot open it: {e}"),
        })?;
    let md = fstat(&fd).map_err(|e| format!("cannot stat it: {e}"))?;
    if let Some(why) = refusal(md.uid(), md.mode(), target_uid) {
        return Err(why);
    }
    let out = PathBuf::from(format!(
        "/proc/{}/fd/{}",
        std::process::id(),
        fd.as_raw_fd()
    ));
    Ok(ControlDir {
        fd,
        path_in: path.to_path_buf(),
        out,
    })
}

fn fstat(fd: &OwnedFd) -> std::io::Result<std::fs::Metadata> {
    // An O_PATH descriptor is stat'ed through its /proc/self/fd link (which names the object
    // it holds, whatever its path now is).
    std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// The first of `candidates` that is the target's, with a warning for each refused before
/// it; or, when none is, an error naming each with why.
pub fn choose(
    pid: i32,
    target_uid: u32,
    candidates: &[Candidate],
) -> Result<(ControlDir, Vec<String>), String> {
    let mut refused: Vec<(&Candidate, String)> = Vec::new();
    for c in candidates {
        match open_checked(pid, &c.path, target_uid) {
            Ok(d) => {
                let warnings = refused
                    .iter()
                    .map(|(r, why)| {
                        format!(
                            "process {pid}'s folder {} ({}) is not used for the attach control \
                             file: {why}; it goes to {} (as the process sees it) instead",
                            r.path.display(),
                            r.what,
                            c.path.display()
                        )
                    })
                    .collect();
                return Ok((d, warnings));
            }
            Err(why) => refused.push((c, why)),
        }
    }
    let each: Vec<String> = refused
        .iter()
        .map(|(c, why)| format!("{} ({}): {why}", c.path.display(), c.what))
        .collect();
    Err(format!(
        "no folder for its control file is one that its user ({}) owns or a shared sticky \
         one: {}",
        user_label(target_uid),
        each.join("; ")
    ))
}

/// Each of `candidates` that is the target's (what `syncspy detach` looks in).
pub fn all_checked(pid: i32, target_uid: u32, candidates: &[Candidate]) -> Vec<ControlDir> {
    candidates
        .iter()
        .filter_map(|c| open_checked(pid, &c.path, target_uid).ok())
        .collect()
}

fn cname(name: &str) -> std::io::Result<std::ffi::CString> {
    std::ffi::CString::new(Path::new(name).as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
}

/// Creates `name` in `dir`: a new regular file (`O_CREAT | O_EXCL | O_NOFOLLOW`: never
/// through a link planted at the name), `mode` less the umask.
pub fn create_new_in(dir: &OwnedFd, name: &str, mode: u32) -> std::io::Result<std::fs::File> {
    let c = cname(name)?;
    // SAFETY: `dir` is an open descriptor and `c` NUL-terminated; the descriptor returned is
    // owned at once.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_WRONLY
                | libc::O_CREAT
                | libc::O_EXCL
                | libc::O_NOFOLLOW
                | libc::O_NOCTTY
                | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor openat just returned, owned by nobody else.
    Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Removes `name` (not a folder) from `dir`.
pub fn remove_in(dir: &OwnedFd, name: &str) -> std::io::Result<()> {
    let c = cname(name)?;
    // SAFETY: `dir` is an open descriptor and `c` NUL-terminated.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folder_must_be_the_targets_or_shared_and_sticky() {
        let nobody = 65534;
        // Its own folder, writable by it alone; sticky folders of its own or root's.
        for (owner, mode) in [
            (nobody, 0o40700),
            (nobody, 0o40755),
            (nobody, 0o41777),
            (0, 0o41777),
        ] {
            assert_eq!(refusal(owner, mode, nobody), None, "{owner} {mode:o}");
        }
        // Root's folders (0700, 0755, sticky but not writable by all), root's 0777 without
        // the sticky bit, its own folder that others may write, another user's sticky one.
        for (owner, mode, says) in [
            (0, 0o40700, "belongs to root (uid 0)"),
            (0, 0o40755, "is not a shared sticky folder"),
            (0, 0o41755, "is not a shared sticky folder"),
            (0, 0o40777, "not sticky (a Kubernetes emptyDir"),
            (nobody, 0o40775, "writable by other users (mode 0775)"),
            (54321, 0o41777, "of uid 54321, neither root nor"),
            (
                54321,
                0o40755,
                "belongs to uid 54321, not to the process's user",
            ),
        ] {
            let why = refusal(owner, mode, nobody).expect("refused");
            assert!(why.contains(says), "{owner} {mode:o}: {why}");
        }
        // Root's own job: root's folders are its own.
        assert_eq!(refusal(0, 0o40700, 0), None);
        assert_eq!(refusal(0, 0o40755, 0), None);
    }

    #[test]
    fn candidates_end_with_the_shared_folders_once() {
        let c = candidates(PathBuf::from("/dev/shm"), "its SYNCSPY_DIR".into());
        let paths: Vec<&Path> = c.iter().map(|c| c.path.as_path()).collect();
        assert_eq!(paths, [Path::new("/dev/shm"), Path::new("/tmp")]);
        let c = candidates(PathBuf::from("/x"), "its SYNCSPY_DIR".into());
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn a_link_or_a_relative_path_is_refused_and_a_file_is_created_in_the_descriptor() {
        let d = syncspy_test_support::TempDir::new("attach-folder");
        let me = syncspy_read::safe_file::euid();
        let pid = std::process::id() as i32;
        let real = d.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = open_checked(pid, &link, me).err().expect("refused");
        assert!(e.contains("symbolic link"), "{e}");
        let e = open_checked(pid, Path::new("rel"), me)
            .err()
            .expect("refused");
        assert!(e.contains("absolute"), "{e}");
        let cd = open_checked(pid, &real, me).unwrap();
        create_new_in(&cd.fd, "f", 0o600).unwrap();
        // Through the descriptor's path, as the attacher follows it.
        assert!(cd.out.join("f").is_file());
        assert!(real.join("f").is_file());
        assert!(create_new_in(&cd.fd, "f", 0o600).is_err());
        remove_in(&cd.fd, "f").unwrap();
        assert!(!real.join("f").exists());
    }
}
