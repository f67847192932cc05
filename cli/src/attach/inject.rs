//! Calling functions inside another process with ptrace: `dlopen(libsyncspy.so)`, then
//! `syncspy_attach_arm(control)`, on one thread of the target, which is stopped for the
//! milliseconds that takes while every other thread runs on.
//!
//! Safety design (docs/attach.md has the full account):
//! - Only one thread is seized (`PTRACE_SEIZE`, no options that outlive us: no EXITKILL), and
//!   only one that is blocked in an idle system call (futex, read, sleep, poll, …), never one
//!   running user code or inside `ioctl`/`mmap` (it may hold the allocator's or the driver's
//!   locks).
//! - Each call returns into the C library's `__restore_rt` (`mov $15,%rax; syscall`) with a
//!   signal frame below it holding the thread's original registers, signal mask and full
//!   XSAVE state: if the attacher dies at any moment, the thread finishes the call and
//!   `rt_sigreturn` puts it back by itself. While the attacher lives it intercepts that
//!   `rt_sigreturn`, skips it and restores the saved state exactly in a stop inside the
//!   kernel's signal path, so an interrupted system call restarts as it would have (even
//!   `nanosleep`'s remaining time).
//! - All signals are blocked on that thread during the calls (`PTRACE_SETSIGMASK`): they stay
//!   pending and are delivered when it resumes; other threads take process-wide ones.
//! - The thread runs `dlopen` under this tracer thread; a tracer thread that ends (timeout,
//!   panic, kill) detaches the kernel way, which resumes the thread.
//!
//! Not libloading: that loads into this process; here `dlopen` runs in the target, found by
//! its address in the target's C library (its ELF symbols, read with `object`).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;

/// Why an injection did not happen (nothing was changed) or did not finish.
#[derive(Debug)]
pub struct InjectError(pub String);

impl std::fmt::Display for InjectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(m: impl Into<String>) -> Result<T, InjectError> {
    Err(InjectError(m.into()))
}

/// `mov $0xf,%rax; syscall`: glibc's `__restore_rt`, the signal-return trampoline.
const RESTORE_RT: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];
const NT_X86_XSTATE: i32 = 0x202;
const PTRACE_GETSIGMASK: u32 = 0x420a;
const PTRACE_SETSIGMASK: u32 = 0x420b;
const FP_XSTATE_MAGIC1: u32 = 0x4650_5853;
const FP_XSTATE_MAGIC2: u32 = 0x4650_5845;
const RED_ZONE: u64 = 128;
/// Stack below the red zone saved and restored around the calls.
const SCRATCH: u64 = 256 << 10;
const RTLD_NOW: u64 = 2;
const RTLD_LOCAL: u64 = 0;
const RTLD_DLOPEN: u64 = 0x8000_0000;

/// System calls a thread may be chosen in: blocking waits that hold no lock of the C
/// library or the driver.
const IDLE_SYSCALLS: &[(i64, &str, u32)] = &[
    (202, "futex", 3),
    (0, "read", 2),
    (35, "nanosleep", 2),
    (230, "clock_nanosleep", 2),
    (7, "poll", 2),
    (271, "ppoll", 2),
    (23, "select", 2),
    (270, "pselect6", 2),
    (232, "epoll_wait", 2),
    (281, "epoll_pwait", 2),
    (441, "epoll_pwait2", 2),
    (61, "wait4", 1),
    (34, "pause", 1),
    (130, "rt_sigsuspend", 1),
    (128, "rt_sigtimedwait", 1),
    (43, "accept", 1),
    (288, "accept4", 1),
    (45, "recvfrom", 1),
    (47, "recvmsg", 1),
];

pub fn syscall_name(nr: i64) -> Option<&'static str> {
    IDLE_SYSCALLS
        .iter()
        .find(|(n, _, _)| *n == nr)
        .map(|(_, s, _)| *s)
}

/// The steps of an injection, for the test knob that kills the attacher after one of them
/// (`SYNCSPY_TEST_ATTACH_ABORT_AT=<step>` or `<step>:<n>` for its n-th time, the steps of a
/// call coming once for `dlopen` and once for arming): each must leave the target unharmed.
pub const STEPS: &[&str] = &[
    "seized",
    "stopped",
    "frame-written",
    "call-set",
    "in-call",
    "call-returned",
    "restoring",
];

fn step(name: &str) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEEN: [AtomicU32; 7] = [const { AtomicU32::new(0) }; 7];
    let Ok(want) = std::env::var("SYNCSPY_TEST_ATTACH_ABORT_AT") else {
        return;
    };
    let (want, nth) = match want.split_once(':') {
        Some((w, n)) => (w.to_string(), n.parse().unwrap_or(1)),
        None => (want, 1),
    };
    let Some(i) = STEPS.iter().position(|s| *s == name) else {
        return;
    };
    let count = SEEN[i].fetch_add(1, Ordering::Relaxed) + 1;
    if want == name && count == nth {
        // SAFETY: kill of our own process: the test's stand-in for the user's `kill -9`.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
}

/// What the target needs called and where things are in it.
pub struct Plan {
    pub pid: i32,
    /// Inject through this thread (else the best idle one).
    pub thread: Option<i32>,
    /// How the library gets into the process.
    pub load: Load,
    /// The library file here: what a memfd is filled from, and (with [`Load::Path`]) its
    /// path in the process too.
    pub lib: PathBuf,
    pub control: PathBuf,
}

/// How the library gets into the process.
pub enum Load {
    /// Mapped already (an earlier attach) under this name in /proc/PID/maps (its path, or
    /// `/memfd:libsyncspy.so (deleted)`): arm only.
    Loaded(String),
    /// `dlopen(lib)`: the same file is at the same path inside the process's root.
    Path(DlopenPlan),
    /// The library's bytes in a memfd made in the process (`memfd_create`, filled from here
    /// through /proc/PID/fd/N), then `dlopen("/proc/self/fd/N")` and `close(N)`: for a
    /// process whose root does not hold the library (a container).
    Memfd(DlopenPlan),
}

/// The name of the memfd the library is loaded from; /proc/PID/maps shows
/// `/memfd:libsyncspy.so (deleted)`.
pub const MEMFD_NAME: &str = "libsyncspy.so";

/// Whether a /proc/PID/maps path is `lib_name` (a file of that name, or the memfd attach
/// loads it from).
pub fn is_mapped_lib(path: &str, lib_name: &str) -> bool {
    path.rsplit('/').next() == Some(lib_name)
        || path
            .strip_prefix("/memfd:")
            .is_some_and(|n| n.trim_end_matches(" (deleted)") == lib_name)
}

#[derive(Clone, Copy)]
pub struct DlopenPlan {
    pub func: u64,
    /// `__libc_dlopen_mode` (glibc before 2.34) wants `__RTLD_DLOPEN` in the flags.
    pub libc_private: bool,
}

/// The target's C library: where `dlopen` and `__restore_rt` are, and `memfd_create` and
/// `close` (glibc 2.27 and later) for loading the library from memory.
pub struct Libc {
    pub dlopen: DlopenPlan,
    pub restore_rt: u64,
    pub memfd_create: Option<u64>,
    pub close: Option<u64>,
}

impl Libc {
    pub fn dlopen_plan(&self) -> DlopenPlan {
        self.dlopen
    }
}

/// A mapping of /proc/PID/maps.
#[derive(Clone, Debug)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub offset: u64,
    /// The mapped file's device (major, minor) and inode, as the kernel names them: what
    /// identifies the file whatever path the line shows (a chrooted process's paths are
    /// the node's, which its root does not hold).
    pub dev: (u32, u32),
    pub inode: u64,
    pub path: String,
}

pub fn maps(pid: i32) -> std::io::Result<Vec<Mapping>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (a, b) = it.next()?.split_once('-')?;
            let perms = it.next()?.to_string();
            let offset = u64::from_str_radix(it.next()?, 16).ok()?;
            let (major, minor) = it.next()?.split_once(':')?;
            let dev = (
                u32::from_str_radix(major, 16).ok()?,
                u32::from_str_radix(minor, 16).ok()?,
            );
            let inode = it.next()?.parse().ok()?;
            let path = it.collect::<Vec<_>>().join(" ");
            Some(Mapping {
                start: u64::from_str_radix(a, 16).ok()?,
                end: u64::from_str_radix(b, 16).ok()?,
                perms,
                offset,
                dev,
                inode,
                path,
            })
        })
        .collect())
}

/// The load bias of `path` in the target: where its first `PT_LOAD` was mapped, minus that
/// segment's page-aligned virtual address.
fn load_bias(maps: &[Mapping], path: &str, elf: &object::read::elf::ElfFile64) -> Option<u64> {
    use object::read::elf::ProgramHeader;
    let base = maps.iter().find(|m| m.path == path && m.offset == 0)?.start;
    let endian = elf.endian();
    let first = elf
        .elf_program_headers()
        .iter()
        .filter(|ph| ph.p_type(endian) == object::elf::PT_LOAD)
        .map(|ph| ph.p_vaddr(endian))
        .min()?;
    Some(base.wrapping_sub(first & !0xfff))
}

/// The (major, minor) of a `st_dev` (glibc's encoding, as `major(3)` and `minor(3)`).
fn major_minor(dev: u64) -> (u32, u32) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major as u32, minor as u32)
}

/// The bytes of the file the process mapped as `path`, found by the maps line's device and
/// inode, never by the path alone (docs/attach.md, "The process's modules"). The path a
/// maps line shows is the file's path as this process would name it when the process's
/// mount is reachable from here (a process chrooted on the node, or inside a mount
/// namespace copied from the node's: `/srv/jail/lib/…/libc.so.6`, which its root does not
/// hold), else as the process's namespace names it (a `pivot_root` container: `/lib/…`).
/// Tried in turn:
/// 1. `/proc/PID/map_files/<range>` of its first mapping: the very file mapped (root, or
///    `CAP_SYS_ADMIN` / `CAP_CHECKPOINT_RESTORE`);
/// 2. the path inside the process's root (`/proc/PID/root` + path);
/// 3. the path as this process sees it.
///
/// A file reached by a path counts only if it is the mapped one: its device and inode are
/// the maps line's, or (where a file system's `stat` names another device than the
/// kernel's maps: btrfs subvolumes, overlayfs on older kernels) the process's first mapping of
/// it holds the file's bytes (ELF header, dynamic symbols, build id). Each file is checked
/// and read through the one descriptor (`read_bounded`: a regular file of at most
/// `MAPPED_FILE_MAX`, opened without blocking), since the process's user chooses what it maps.
fn read_mapped(pid: i32, maps: &[Mapping], path: &str) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::MetadataExt;
    let first = maps
        .iter()
        .find(|m| m.path == path && m.offset == 0)
        .ok_or_else(|| std::io::Error::other("not mapped from its start"))?;
    let range = format!("/proc/{pid}/map_files/{:x}-{:x}", first.start, first.end);
    let mut tried = Vec::new();
    match read_bounded(&range) {
        Ok((_, data)) => return Ok(data),
        Err(e) => tried.push(format!("{range}: {e}")),
    }
    let in_root = format!("/proc/{pid}/root{path}");
    for candidate in [in_root.as_str(), path] {
        let opened = read_bounded(candidate);
        let (meta, data) = match opened {
            Ok(x) => x,
            Err(e) => {
                tried.push(format!("{candidate}: {e}"));
                continue;
            }
        };
        let same_id = major_minor(meta.dev()) == first.dev && meta.ino() == first.inode;
        let same_bytes = || {
            let len = ((first.end - first.start) as usize).min(data.len());
            let mut there = vec![0u8; len];
            len > 0
                && File::open(format!("/proc/{pid}/mem"))
                    .and_then(|m| m.read_exact_at(&mut there, first.start))
                    .is_ok_and(|()| data.starts_with(&there))
        };
        if same_id || same_bytes() {
            return Ok(data);
        }
        let (major, minor) = major_minor(meta.dev());
        tried.push(format!(
            "{candidate}: another file (device {major:x}:{minor:x}, inode {}, where the \
             process mapped {:x}:{:x}, inode {})",
            meta.ino(),
            first.dev.0,
            first.dev.1,
            first.inode
        ));
    }
    Err(std::io::Error::other(format!(
        "the file it mapped (device {:x}:{:x}, inode {}) was not found: {}",
        first.dev.0,
        first.dev.1,
        first.inode,
        tried.join("; ")
    )))
}

/// The largest mapped file attach reads (a C library is a few MiB, a debug build of
/// libsyncspy.so about 50 MiB): a job's user can map, or name in `LD_PRELOAD`, a file of any
/// size.
const MAPPED_FILE_MAX: u64 = 256 << 20;

/// `path`'s metadata and bytes, if it is a regular file of at most `MAPPED_FILE_MAX`. Opened
/// without blocking: a FIFO planted at the path does not hold the attacher.
fn read_bounded(path: &str) -> std::io::Result<(std::fs::Metadata, Vec<u8>)> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() || meta.len() > MAPPED_FILE_MAX {
        return Err(std::io::Error::other(format!(
            "not a regular file of at most {} MiB",
            MAPPED_FILE_MAX >> 20
        )));
    }
    let mut data = Vec::new();
    f.take(MAPPED_FILE_MAX).read_to_end(&mut data)?;
    Ok((meta, data))
}

/// Whether the file the process mapped as `path` is a syncspy library under any name: it
/// exports the arming entry point (`syncspy_attach_arm`). Read as `read_mapped` reads it.
pub fn is_syncspy_library(pid: i32, maps: &[Mapping], path: &str) -> bool {
    read_mapped(pid, maps, path).is_ok_and(|data| {
        object::read::elf::ElfFile64::<object::Endianness>::parse(&*data)
            .is_ok_and(|elf| dynamic_symbol(&elf, "syncspy_attach_arm").is_some())
    })
}

/// A dynamic symbol's virtual address in an ELF image.
fn dynamic_symbol(elf: &object::read::elf::ElfFile64, name: &str) -> Option<u64> {
    use object::{Object, ObjectSymbol};
    elf.dynamic_symbols()
        .find(|s| s.name() == Ok(name) && s.is_definition())
        .map(|s| s.address())
}

/// Finds the target's C library and what attach needs in it; refuses what it cannot handle.
pub fn find_libc(pid: i32, maps: &[Mapping]) -> Result<Libc, InjectError> {
    use object::{Object, ObjectSegment};
    if maps.iter().any(|m| m.path.contains("ld-musl")) {
        return err("unsupported C library: musl (attach needs glibc)");
    }
    let Some(path) = maps.iter().map(|m| m.path.as_str()).find(|p| {
        let f = p.rsplit('/').next().unwrap_or(p);
        f == "libc.so.6" || (f.starts_with("libc-2.") && f.ends_with(".so"))
    }) else {
        return err("no glibc (libc.so.6) is mapped in the process: unsupported C library");
    };
    let data = read_mapped(pid, maps, path)
        .map_err(|e| InjectError(format!("cannot read the process's C library {path}: {e}")))?;
    let elf = object::read::elf::ElfFile64::<object::Endianness>::parse(&*data)
        .map_err(|e| InjectError(format!("cannot parse {path}: {e}")))?;
    let bias = load_bias(maps, path, &elf)
        .ok_or_else(|| InjectError(format!("cannot find where {path} is mapped")))?;
    let dlopen = match dynamic_symbol(&elf, "dlopen") {
        Some(a) => DlopenPlan {
            func: bias.wrapping_add(a),
            libc_private: false,
        },
        None => match dynamic_symbol(&elf, "__libc_dlopen_mode") {
            Some(a) => DlopenPlan {
                func: bias.wrapping_add(a),
                libc_private: true,
            },
            None => {
                return err(format!(
                    "{path} exports neither dlopen nor __libc_dlopen_mode"
                ))
            }
        },
    };
    // The signal trampoline: found by its code, which every glibc since 2.3 has.
    let mut restore = None;
    for seg in elf.segments() {
        let (off, len) = seg.file_range();
        let Some(bytes) = data.get(off as usize..(off + len) as usize) else {
            continue;
        };
        if let Some(i) = bytes
            .windows(RESTORE_RT.len())
            .position(|w| w == RESTORE_RT)
        {
            let vaddr = seg.address() + i as u64;
            let addr = bias.wrapping_add(vaddr);
            // It must lie in an executable mapping of the process.
            if maps
                .iter()
                .any(|m| m.start <= addr && addr < m.end && m.perms.contains('x'))
            {
                restore = Some(addr);
                break;
            }
        }
    }
    let Some(restore_rt) = restore else {
        return err(format!(
            "no signal trampoline (__restore_rt) found in {path}"
        ));
    };
    Ok(Libc {
        dlopen,
        restore_rt,
        memfd_create: dynamic_symbol(&elf, "memfd_create").map(|a| bias.wrapping_add(a)),
        close: dynamic_symbol(&elf, "close").map(|a| bias.wrapping_add(a)),
    })
}

/// The address of `syncspy_attach_arm` in the target once the library is mapped there under
/// `mapped` (its path, or the memfd's name); `local` is the library file here.
pub fn arm_address(pid: i32, mapped: &str, local: &Path) -> Result<u64, InjectError> {
    let maps = maps(pid).map_err(|e| InjectError(format!("cannot read /proc/{pid}/maps: {e}")))?;
    let data = image_of(pid, &maps, mapped, local)?;
    let elf = object::read::elf::ElfFile64::<object::Endianness>::parse(&*data)
        .map_err(|e| InjectError(format!("cannot parse {mapped}: {e}")))?;
    let bias = load_bias(&maps, mapped, &elf)
        .ok_or_else(|| InjectError(format!("{mapped} is not loaded in process {pid}")))?;
    let a = dynamic_symbol(&elf, "syncspy_attach_arm")
        .ok_or_else(|| InjectError(format!("{mapped} does not export syncspy_attach_arm")))?;
    Ok(bias.wrapping_add(a))
}

/// The file the process mapped as `mapped`. A path is found by its device and inode
/// ([`read_mapped`]). A
/// memfd has no path: the library file here is taken when the process's first mapping of it
/// (ELF header, dynamic symbols) holds the same bytes (this attach loaded it, or an earlier
/// one of the same build did); else its own image through /proc/PID/map_files (which needs
/// CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE).
fn image_of(
    pid: i32,
    maps: &[Mapping],
    mapped: &str,
    local: &Path,
) -> Result<Vec<u8>, InjectError> {
    if !mapped.starts_with("/memfd:") {
        return read_mapped(pid, maps, mapped)
            .map_err(|e| InjectError(format!("cannot read {mapped}: {e}")));
    }
    let first = maps
        .iter()
        .find(|m| m.path == mapped && m.offset == 0)
        .ok_or_else(|| InjectError(format!("{mapped} is not loaded in process {pid}")))?;
    if let Ok(data) = std::fs::read(local) {
        let len = (first.end - first.start) as usize;
        let mut there = vec![0u8; len.min(data.len())];
        let same = File::open(format!("/proc/{pid}/mem"))
            .and_then(|m| m.read_exact_at(&mut there, first.start))
            .is_ok_and(|()| data.starts_with(&there));
        if same {
            return Ok(data);
        }
    }
    std::fs::read(format!(
        "/proc/{pid}/map_files/{:x}-{:x}",
        first.start, first.end
    ))
    .map_err(|e| {
        InjectError(format!(
            "the library in process {pid} was loaded from memory by another build of syncspy, \
             and its image cannot be read through /proc/{pid}/map_files ({e}: that needs \
             CAP_SYS_ADMIN); attach with the syncspy that loaded it, or as root"
        ))
    })
}

/// The thread's current system call (None: running, or not in one).
fn current_syscall(pid: i32, tid: i32) -> Option<i64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Threads of `pid` in an idle system call, best first.
pub fn idle_threads(pid: i32) -> Vec<(i32, i64)> {
    let mut v: Vec<(u32, i32, i64)> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|tid| {
            let nr = current_syscall(pid, tid)?;
            let score = IDLE_SYSCALLS.iter().find(|(n, _, _)| *n == nr)?.2;
            Some((score, tid, nr))
        })
        .collect();
    v.sort_by_key(|(score, tid, _)| (std::cmp::Reverse(*score), *tid != pid, *tid));
    v.into_iter().map(|(_, t, n)| (t, n)).collect()
}

/// What a wait found: nix's decoding of the status, or a signal-delivery stop by a signal
/// nix has no name for (the real-time ones, SIGRTMIN..SIGRTMAX), which it cannot decode.
#[derive(Debug)]
enum Waited {
    Status(WaitStatus),
    RtSignal(i32),
}

/// Detaches from `tid` and delivers signal `signo` to it (nix's detach takes named signals
/// only).
fn detach_with_raw_signal(tid: Pid, signo: i32) {
    // SAFETY: PTRACE_DETACH takes no memory argument; `data` is the signal to deliver.
    unsafe {
        libc::ptrace(
            libc::PTRACE_DETACH,
            tid.as_raw(),
            std::ptr::null_mut::<libc::c_void>(),
            signo as libc::c_long as *mut libc::c_void,
        )
    };
}

fn wait_stop(tid: Pid, timeout: Duration) -> Result<Waited, InjectError> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: `status` is a valid out-pointer; waitpid has no other memory argument.
        let r = unsafe { libc::waitpid(tid.as_raw(), &mut status, libc::__WALL | libc::WNOHANG) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            return err(format!("waiting for thread {tid}: {e}"));
        }
        if r > 0 {
            // A plain signal-delivery stop (no ptrace event in the high bits) by a real-time
            // signal: nix would fail to decode it (EINVAL). Everything else goes to nix.
            let sig = libc::WSTOPSIG(status);
            if libc::WIFSTOPPED(status)
                && status >> 16 == 0
                && sig != libc::SIGTRAP | 0x80
                && Signal::try_from(sig).is_err()
            {
                return Ok(Waited::RtSignal(sig));
            }
            return WaitStatus::from_raw(tid, status)
                .map(Waited::Status)
                .or_else(|e| err(format!("waiting for thread {tid}: {e}")));
        }
        if Instant::now() >= deadline {
            return err(format!(
                "thread {tid} did not stop within {} ms",
                timeout.as_millis()
            ));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn get_xstate(tid: Pid) -> Result<Vec<u8>, InjectError> {
    let mut buf = vec![0u8; 1 << 16];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: PTRACE_GETREGSET writes at most iov_len bytes into `buf` and updates iov_len.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_GETREGSET,
            tid.as_raw(),
            NT_X86_XSTATE as usize,
            &mut iov as *mut libc::iovec,
        )
    };
    if r != 0 {
        return err(format!(
            "cannot read the FP/vector state of thread {tid}: {}",
            std::io::Error::last_os_error()
        ));
    }
    buf.truncate(iov.iov_len);
    Ok(buf)
}

fn set_xstate(tid: Pid, x: &[u8]) -> Result<(), InjectError> {
    let mut iov = libc::iovec {
        iov_base: x.as_ptr() as *mut libc::c_void,
        iov_len: x.len(),
    };
    // SAFETY: PTRACE_SETREGSET only reads iov_len bytes from `x`.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_SETREGSET,
            tid.as_raw(),
            NT_X86_XSTATE as usize,
            &mut iov as *mut libc::iovec,
        )
    };
    if r != 0 {
        return err(format!(
            "cannot restore the FP/vector state of thread {tid}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn sigmask(tid: Pid, set: Option<u64>) -> Result<u64, InjectError> {
    let mut m: u64 = set.unwrap_or(0);
    let req = if set.is_some() {
        PTRACE_SETSIGMASK
    } else {
        PTRACE_GETSIGMASK
    };
    // SAFETY: the request reads or writes one 8-byte kernel sigset at `m`.
    let r = unsafe { libc::ptrace(req, tid.as_raw(), 8usize, &mut m as *mut u64) };
    if r != 0 {
        return err(format!(
            "cannot {} the signal mask of thread {tid}: {}",
            if set.is_some() { "set" } else { "read" },
            std::io::Error::last_os_error()
        ));
    }
    Ok(m)
}

/// The XSAVE state as `rt_sigreturn` takes it from a signal frame. The kernel restores the
/// extended state (AVX, AVX-512, …) only if the frame's `fx_sw_bytes` (in the legacy area's
/// software-reserved bytes, where PTRACE_GETREGSET puts XCR0) carry `FP_XSTATE_MAGIC1` and
/// declare a size no larger than the task's own
/// signal-frame size, with `FP_XSTATE_MAGIC2` right after it; else it restores x87/SSE only.
/// The buffer holds every component the CPU supports (AMX tiles included, which a task
/// without AMX permission may not declare), so the declared size is the end of the last
/// component in use (XSTATE_BV), found through CPUID leaf 0xD; magic2 goes there, over
/// bytes of components not in use.
fn sigframe_xstate(xstate: &[u8]) -> Vec<u8> {
    let mut xs = xstate.to_vec();
    if xs.len() < 576 {
        xs.extend_from_slice(&FP_XSTATE_MAGIC2.to_le_bytes());
        return xs; // no XSAVE area: legacy FXSAVE only
    }
    let bv = u64::from_le_bytes(xs[512..520].try_into().unwrap_or([0; 8]));
    let mut end = 576u32;
    for i in 2..63 {
        if bv & (1 << i) != 0 {
            let c = std::arch::x86_64::__cpuid_count(0xd, i);
            end = end.max(c.ebx.saturating_add(c.eax));
        }
    }
    let end = (end as usize).min(xs.len());
    if xs.len() < end + 4 {
        xs.resize(end + 4, 0);
    }
    xs[end..end + 4].copy_from_slice(&FP_XSTATE_MAGIC2.to_le_bytes());
    // PTRACE_GETREGSET puts XCR0 where a signal frame has its fx_sw_bytes: build those.
    let xcr0 = u64::from_le_bytes(xs[464..472].try_into().unwrap_or([0; 8]));
    let mut sw = Vec::with_capacity(48);
    sw.extend_from_slice(&FP_XSTATE_MAGIC1.to_le_bytes());
    sw.extend_from_slice(&(end as u32 + 4).to_le_bytes()); // extended_size
    sw.extend_from_slice(&xcr0.to_le_bytes()); // xfeatures
    sw.extend_from_slice(&(end as u32).to_le_bytes()); // xstate_size
    sw.resize(48, 0);
    xs[464..512].copy_from_slice(&sw);
    xs
}

/// The signal frame `rt_sigreturn` restores `regs`, `mask` and the XSAVE state `xstate`
/// (placed at `fp`) from, with the adjustments the kernel would make for an interrupted
/// system call (it returns to user space without them otherwise). Layout: the x86-64
/// `struct rt_sigframe` (pretcode, ucontext, siginfo).
fn signal_frame(regs: &libc::user_regs_struct, mask: u64, fp: u64, restore_rt: u64) -> Vec<u8> {
    let mut f = Vec::with_capacity(440);
    let mut q = |v: u64| f.extend_from_slice(&v.to_le_bytes());
    q(restore_rt); // pretcode: the called function returns here
    q(1 | 2 | 4); // uc_flags: UC_FP_XSTATE | UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS
    q(0); // uc_link
          // uc_stack: flags 3 is invalid, so sigreturn leaves the thread's sigaltstack as it is.
    q(0);
    q(3);
    q(0);
    let (mut rax, mut rip) = (regs.rax, regs.rip);
    if (regs.orig_rax as i64) >= 0 && matches!(regs.rax as i64, -512 | -513 | -514 | -516) {
        // ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK: issue the
        // system call again (sigreturn clears the restart block, so a sleep restarts whole).
        rax = regs.orig_rax;
        rip = regs.rip.wrapping_sub(2);
    }
    for v in [
        regs.r8,
        regs.r9,
        regs.r10,
        regs.r11,
        regs.r12,
        regs.r13,
        regs.r14,
        regs.r15,
        regs.rdi,
        regs.rsi,
        regs.rbp,
        regs.rbx,
        regs.rdx,
        rax,
        regs.rcx,
        regs.rsp,
        rip,
        regs.eflags,
    ] {
        q(v);
    }
    // cs, gs, fs, ss (16 bits each)
    q((regs.cs & 0xffff) | ((regs.ss & 0xffff) << 48));
    q(0); // err
    q(0); // trapno
    q(mask); // oldmask
    q(0); // cr2
    q(fp); // fpstate
    for _ in 0..8 {
        q(0); // reserved1
    }
    q(mask); // uc_sigmask
    f.resize(f.len() + 128, 0); // siginfo
    f
}

/// The seized thread; dropping it detaches (the thread resumes).
struct Seized {
    tid: Pid,
    mem: File,
}

impl Drop for Seized {
    fn drop(&mut self) {
        let _ = ptrace::detach(self.tid, None);
    }
}

/// What the injection did.
pub struct Injected {
    pub thread: i32,
    pub syscall: &'static str,
    pub stopped_for: Duration,
}

/// Runs the plan on a dedicated thread (the tracer): if it ends early for any reason, the
/// kernel detaches the target thread, which then restores itself.
pub fn inject(plan: Plan, libc_info: Libc) -> Result<Injected, InjectError> {
    std::thread::spawn(move || inject_here(&plan, &libc_info))
        .join()
        .unwrap_or_else(|_| {
            err("the injecting thread panicked (the target was left to restore itself)")
        })
}

fn inject_here(plan: &Plan, lc: &Libc) -> Result<Injected, InjectError> {
    let pid = plan.pid;
    let candidates: Vec<(i32, i64)> = match plan.thread {
        Some(t) => vec![(t, current_syscall(pid, t).unwrap_or(-1))],
        None => idle_threads(pid),
    };
    if candidates.is_empty() {
        return err(format!(
            "no thread of process {pid} is waiting in an idle system call (futex, read, sleep, \
             poll, …); attach chooses only such a thread, since one running user code or \
             inside the driver may hold locks that dlopen needs. Try again in a moment"
        ));
    }
    // A thread that was busy or got a signal at the moment it stopped is let go unchanged;
    // try again (the candidates in turn) for up to 3 s.
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut last = String::new();
    for (tid, _) in candidates.iter().take(4).cycle() {
        match try_thread(plan, lc, *tid) {
            Ok(Some(done)) => return Ok(done),
            Ok(None) => last = format!("thread {tid} was not idle when stopped"),
            Err(e) => return Err(e),
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    err(format!(
        "no suitable thread stayed idle long enough ({last}); try again"
    ))
}

fn regs_of(tid: Pid) -> Result<libc::user_regs_struct, InjectError> {
    ptrace::getregs(tid)
        .map_err(|e| InjectError(format!("cannot read the registers of thread {tid}: {e}")))
}

fn set_regs(tid: Pid, r: libc::user_regs_struct) -> Result<(), InjectError> {
    ptrace::setregs(tid, r)
        .map_err(|e| InjectError(format!("cannot set the registers of thread {tid}: {e}")))
}

/// Seizes thread `tid` of process `pid` (it keeps running) and opens the process's memory.
fn seize(pid: i32, tid: i32) -> Result<Seized, InjectError> {
    let t = Pid::from_raw(tid);
    if let Err(e) = ptrace::seize(t, ptrace::Options::PTRACE_O_TRACESYSGOOD) {
        return err(match e {
            nix::errno::Errno::EPERM => format!(
                "not permitted to trace process {pid} ({e}): run as the job's user with \
                 kernel.yama.ptrace_scope=0, or with CAP_SYS_PTRACE (root; in Docker \
                 --cap-add SYS_PTRACE); where ptrace is forbidden, start the job with \
                 SYNCSPY_DORMANT=1 and LD_PRELOAD=libsyncspy.so instead"
            ),
            _ => format!("cannot trace thread {tid} of process {pid}: {e}"),
        });
    }
    let mem = File::options()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .map_err(|e| InjectError(format!("cannot open /proc/{pid}/mem: {e}")))?;
    Ok(Seized { tid: t, mem })
}

/// Waits for the interrupted thread to stop. Ok(None): a signal came first, handed back
/// untouched with the thread let go (try again later).
fn wait_interrupted(s: Seized, pid: i32) -> Result<Option<Seized>, InjectError> {
    let t = s.tid;
    match wait_stop(t, Duration::from_secs(2))? {
        Waited::Status(WaitStatus::PtraceEvent(_, Signal::SIGTRAP, libc::PTRACE_EVENT_STOP)) => {
            Ok(Some(s))
        }
        Waited::Status(WaitStatus::PtraceEvent(_, sig, libc::PTRACE_EVENT_STOP)) => {
            // A group stop (SIGSTOP and the like): leave it be.
            err(format!(
                "process {pid} is stopped ({sig}); attach to it once it runs"
            ))
        }
        Waited::Status(WaitStatus::Stopped(_, sig)) => {
            // A signal arrived first: hand it back untouched and try again later.
            let _ = ptrace::detach(t, Some(sig));
            std::mem::forget(s);
            Ok(None)
        }
        Waited::RtSignal(signo) => {
            // The same for a real-time signal.
            detach_with_raw_signal(t, signo);
            std::mem::forget(s);
            Ok(None)
        }
        other => err(format!("unexpected state of thread {t}: {other:?}")),
    }
}

/// The stopped thread's registers and the idle system call it waits in. Ok(None): not idle
/// in a system call; it is let go (with the EINTR undone, if it got one).
fn idle_call(
    s: &Seized,
    pid: i32,
) -> Result<Option<(libc::user_regs_struct, &'static str)>, InjectError> {
    let t = s.tid;
    let mut orig = regs_of(t)?;
    // Some waits (epoll_wait, rt_sigtimedwait, a socket read with a timeout) end with EINTR
    // when the thread is stopped, as they do for a stop signal. No signal is delivered here,
    // so that EINTR is ours: make the kernel issue the call again instead (ERESTARTNOINTR),
    // unless a signal is pending for the thread, whose handler then explains the EINTR.
    if (orig.orig_rax as i64) >= 0
        && orig.rax as i64 == -libc::EINTR as i64
        && !signal_pending(pid, t.as_raw())
    {
        orig.rax = -513i64 as u64;
    }
    let Some(sys) = syscall_name(orig.orig_rax as i64) else {
        set_regs(t, orig)?;
        return Ok(None);
    };
    Ok(Some((orig, sys)))
}

/// What the injection changes in the stopped thread, kept to put it back: its registers,
/// signal mask, vector state and the dead stack below the red zone that the frame and the
/// calls use.
struct Saved {
    regs: libc::user_regs_struct,
    xstate: Vec<u8>,
    mask: u64,
    scratch: Vec<u8>,
    scratch_at: u64,
}

impl Saved {
    fn take(s: &Seized, pid: i32, regs: libc::user_regs_struct) -> Result<Saved, InjectError> {
        let xstate = get_xstate(s.tid)?;
        let mask = sigmask(s.tid, None)?;
        let low = check_stack(pid, regs.rsp)?;
        let scratch_at = low.max(regs.rsp.saturating_sub(SCRATCH));
        let mut scratch = vec![0u8; (regs.rsp - RED_ZONE - scratch_at) as usize];
        s.mem
            .read_exact_at(&mut scratch, scratch_at)
            .map_err(|e| InjectError(format!("cannot read the thread's stack: {e}")))?;
        Ok(Saved {
            regs,
            xstate,
            mask,
            scratch,
            scratch_at,
        })
    }

    /// Puts the thread back (registers, mask, vector state, dead stack).
    fn restore(&self, s: &Seized) -> Result<(), InjectError> {
        restore(s, &self.regs, &self.xstate, self.mask)?;
        s.mem
            .write_all_at(&self.scratch, self.scratch_at)
            .map_err(|e| InjectError(format!("cannot restore the thread's stack: {e}")))
    }

    /// Puts the thread back after a refusal found between calls, with the thread stopped at
    /// the trampoline, and returns the refusal.
    fn put_back(&self, s: &Seized, e: InjectError) -> InjectError {
        let _ = restore(s, &self.regs, &self.xstate, self.mask);
        let _ = s.mem.write_all_at(&self.scratch, self.scratch_at);
        e
    }
}

/// Where the injection's data lies on the thread's stack.
struct Stack {
    /// The path dlopen takes: the library's, or room for `/proc/self/fd/N`.
    lib: u64,
    /// The memory file's name.
    memfd_name: u64,
    /// The control file's path, the arming call's argument.
    control: u64,
    /// The signal frame that returns the thread to where it was.
    frame_at: u64,
}

/// Lays out below the red zone: strings, the XSAVE copy (64-aligned) and the signal frame.
fn write_stack(s: &Seized, plan: &Plan, lc: &Libc, saved: &Saved) -> Result<Stack, InjectError> {
    let orig = &saved.regs;
    let mut top = (orig.rsp - RED_ZONE - 256) & !15;
    let mut put = |bytes: &[u8], align: u64| -> Result<u64, InjectError> {
        top = (top - bytes.len() as u64) & !(align - 1);
        s.mem
            .write_all_at(bytes, top)
            .map_err(|e| InjectError(format!("cannot write to the thread's stack: {e}")))?;
        Ok(top)
    };
    let cstr = |p: &Path| {
        let mut b = p.as_os_str().as_encoded_bytes().to_vec();
        b.push(0);
        b
    };
    // The path dlopen takes: the library's, or room for `/proc/self/fd/N` once N is known.
    let lib = match &plan.load {
        Load::Memfd(_) => put(&[0u8; 64], 16)?,
        _ => put(&cstr(&plan.lib), 16)?,
    };
    let memfd_name = put(&cstr(Path::new(MEMFD_NAME)), 16)?;
    let control = put(&cstr(&plan.control), 16)?;
    let fp = put(&sigframe_xstate(&saved.xstate), 64)?;
    let frame = signal_frame(orig, saved.mask, fp, lc.restore_rt);
    // The frame's start is the callee's return-address slot: 8 mod 16 at function entry.
    let mut frame_at = (top - frame.len() as u64) & !15;
    frame_at -= 8;
    s.mem
        .write_all_at(&frame, frame_at)
        .map_err(|e| InjectError(format!("cannot write to the thread's stack: {e}")))?;
    Ok(Stack {
        lib,
        memfd_name,
        control,
        frame_at,
    })
}

/// A call in the stopped thread: function, two arguments, the value it must not return.
type CallAt<'a> = &'a dyn Fn(u64, [u64; 2], Option<i64>) -> Result<Option<i64>, InjectError>;

/// Has the process load the library as the plan says; returns the name it is mapped under.
fn load_library(
    s: &Seized,
    plan: &Plan,
    lc: &Libc,
    saved: &Saved,
    stack: &Stack,
    call_at: CallAt,
) -> Result<String, InjectError> {
    let pid = plan.pid;
    match &plan.load {
        Load::Loaded(m) => Ok(m.clone()),
        Load::Path(d) => {
            call_at(d.func, [stack.lib, dlopen_flags(d)], None)?;
            Ok(plan.lib.to_string_lossy().into_owned())
        }
        Load::Memfd(d) => {
            // A call that failed has left the thread to restore itself (no put_back: it may
            // be running the call on that stack); a refusal has it stopped here.
            let put_back = |e| saved.put_back(s, e);
            let fd = memfd_in(pid, lc, call_at, stack.memfd_name)?.map_err(put_back)?;
            let filled = fill_memfd(pid, fd, &plan.lib);
            if filled.is_ok() {
                let path = format!("/proc/self/fd/{fd}\0");
                s.mem
                    .write_all_at(path.as_bytes(), stack.lib)
                    .map_err(|e| InjectError(format!("cannot write to the thread's stack: {e}")))?;
                call_at(d.func, [stack.lib, dlopen_flags(d)], None)?;
            }
            // The mapping keeps the file; the descriptor is the program's no longer.
            if let Some(close) = lc.close {
                call_at(close, [fd as u64, 0], None)?;
            }
            filled.map_err(put_back)?;
            let name = format!("/memfd:{MEMFD_NAME} (deleted)");
            let loaded = maps(pid).is_ok_and(|m| m.iter().any(|m| m.path == name));
            if !loaded {
                return Err(put_back(InjectError(format!(
                    "dlopen(\"/proc/self/fd/{fd}\") of the library from memory failed in \
                     process {pid} (no /proc inside its root, or a security module forbids \
                     executable memory files); {NOT_IN_ROOT}"
                ))));
            }
            Ok(name)
        }
    }
}

/// Ok(None): the thread was not in an idle system call when stopped; it was let go unchanged.
fn try_thread(plan: &Plan, lc: &Libc, tid: i32) -> Result<Option<Injected>, InjectError> {
    let pid = plan.pid;
    let s = seize(pid, tid)?;
    step("seized");
    ptrace::interrupt(s.tid).map_err(|e| InjectError(format!("cannot stop thread {tid}: {e}")))?;
    let started = Instant::now();
    let Some(s) = wait_interrupted(s, pid)? else {
        return Ok(None);
    };
    step("stopped");
    let Some((orig, sys)) = idle_call(&s, pid)? else {
        return Ok(None);
    };
    let saved = Saved::take(&s, pid, orig)?;
    let stack = write_stack(&s, plan, lc, &saved)?;
    step("frame-written");
    let call_at = |func: u64, args: [u64; 2], watch: Option<i64>| {
        call(
            &s,
            &saved.regs,
            stack.frame_at,
            lc.restore_rt,
            func,
            args,
            watch,
        )
    };
    let mapped = load_library(&s, plan, lc, &saved, &stack, &call_at)?;
    let arm = arm_address(pid, &mapped, &plan.lib).map_err(|e| saved.put_back(&s, e))?;
    call_at(arm, [stack.control, 0], None)?;
    step("restoring");
    saved.restore(&s)?;
    let stopped_for = started.elapsed();
    drop(s);
    Ok(Some(Injected {
        thread: tid,
        syscall: sys,
        stopped_for,
    }))
}

/// What to do where the library cannot be loaded from memory.
pub const NOT_IN_ROOT: &str = "make the library visible at the same path inside the process's \
     root (for a container: mount the folder holding libsyncspy.so there, read-only, e.g. \
     `docker run -v DIR:DIR:ro`), or start the job with LD_PRELOAD=libsyncspy.so and \
     SYNCSPY_DORMANT=1";

fn dlopen_flags(d: &DlopenPlan) -> u64 {
    RTLD_NOW | RTLD_LOCAL | if d.libc_private { RTLD_DLOPEN } else { 0 }
}

const SYS_MEMFD_CREATE: i64 = 319;
const MFD_CLOEXEC: u64 = 1;
/// Executable memfd (Linux 6.3+; older kernels refuse the flag with EINVAL): asked for
/// explicitly, so that `vm.memfd_noexec=1` does not seal it non-executable.
const MFD_EXEC: u64 = 0x10;

/// Calls the process's `memfd_create(MEMFD_NAME, MFD_CLOEXEC | MFD_EXEC)` (without MFD_EXEC
/// on kernels that do not know it). Err: a call failed (the thread was left to restore
/// itself); Ok(Err): a refusal saying why, the thread stopped and unchanged but for the
/// registers; Ok(Ok): the descriptor.
type Refusal<T> = Result<T, InjectError>;
fn memfd_in(
    pid: i32,
    lc: &Libc,
    call_at: &dyn Fn(u64, [u64; 2], Option<i64>) -> Result<Option<i64>, InjectError>,
    name_c: u64,
) -> Result<Refusal<i32>, InjectError> {
    let Some(memfd_create) = lc.memfd_create else {
        return Ok(err(format!(
            "the process's C library has no memfd_create (glibc before 2.27), which loading \
             the library from memory needs; {NOT_IN_ROOT}"
        )));
    };
    let mut r = None;
    for flags in [MFD_CLOEXEC | MFD_EXEC, MFD_CLOEXEC] {
        r = call_at(memfd_create, [name_c, flags], Some(SYS_MEMFD_CREATE))?;
        if r != Some(-(libc::EINVAL as i64)) {
            break;
        }
    }
    Ok(match r {
        Some(fd) if fd >= 0 => Ok(fd as i32),
        Some(e) => {
            let e = std::io::Error::from_raw_os_error(-e as i32);
            let why = match e.raw_os_error() {
                Some(libc::EPERM | libc::ENOSYS) => " (a seccomp filter forbids it)",
                Some(libc::EACCES) => " (vm.memfd_noexec=2 forbids executable memfds)",
                Some(libc::EMFILE) => " (the process has no descriptor left)",
                _ => "",
            };
            err(format!(
                "memfd_create failed in process {pid}: {e}{why}, so the library cannot be \
                 loaded from memory; {NOT_IN_ROOT}"
            ))
        }
        None => err(format!(
            "memfd_create made no system call in process {pid}; {NOT_IN_ROOT}"
        )),
    })
}

/// Writes the library's bytes into the process's descriptor `fd` (a fresh memfd) through
/// /proc/PID/fd.
fn fill_memfd(pid: i32, fd: i32, lib: &Path) -> Result<(), InjectError> {
    let data = std::fs::read(lib)
        .map_err(|e| InjectError(format!("cannot read {}: {e}", lib.display())))?;
    let f = File::options()
        .write(true)
        .open(format!("/proc/{pid}/fd/{fd}"))
        .map_err(|e| InjectError(format!("cannot open /proc/{pid}/fd/{fd}: {e}")))?;
    // Only the empty memfd this attach made gets the bytes (another thread of the process
    // could have closed the descriptor and reused its number meanwhile): checked on what was
    // opened.
    use std::os::fd::AsRawFd;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap_or_default();
    let want = format!("/memfd:{MEMFD_NAME} (deleted)");
    if link.as_os_str().as_encoded_bytes() != want.as_bytes()
        || f.metadata().map(|m| m.len()).unwrap_or(1) != 0
    {
        return err(format!(
            "descriptor {fd} of process {pid} is no longer the memfd attach made ({})",
            link.display()
        ));
    }
    f.write_all_at(&data, 0)
        .map_err(|e| InjectError(format!("cannot write the library into process {pid}: {e}")))
}

/// Whether a signal the thread does not block is pending for it or its process.
fn signal_pending(pid: i32, tid: i32) -> bool {
    let Ok(st) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")) else {
        return true;
    };
    let field = |name: &str| {
        st.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
    };
    match (field("SigPnd:"), field("ShdPnd:"), field("SigBlk:")) {
        (Some(p), Some(s), Some(b)) => (p | s) & !b != 0,
        _ => true,
    }
}

/// Refuses a thread whose stack has less than 256 KiB below its stack pointer; returns the
/// start of its stack mapping.
fn check_stack(pid: i32, rsp: u64) -> Result<u64, InjectError> {
    let m = maps(pid).map_err(|e| InjectError(format!("cannot read /proc/{pid}/maps: {e}")))?;
    let Some(s) = m.iter().find(|m| m.start <= rsp && rsp < m.end) else {
        return err("the chosen thread's stack pointer is in no mapping");
    };
    if s.path != "[stack]" && rsp - s.start < 256 << 10 {
        return err(format!(
            "the chosen thread has only {} KiB of stack left",
            (rsp - s.start) >> 10
        ));
    }
    Ok(s.start)
}

/// Puts the thread back exactly: signal mask, vector state, registers. Ordered so that the
/// thread, if the attacher dies in between, still restores itself through the frame.
fn restore(
    s: &Seized,
    orig: &libc::user_regs_struct,
    xstate: &[u8],
    mask: u64,
) -> Result<(), InjectError> {
    sigmask(s.tid, Some(mask))?;
    set_xstate(s.tid, xstate)?;
    set_regs(s.tid, *orig)
}

/// Calls `func(args)` on the stopped thread, returning into `__restore_rt` over the frame at
/// `frame_at`; intercepts that return and stops the thread at the trampoline again, inside
/// the kernel's signal path. The function's result is not available (the trampoline's first
/// instruction overwrites rax): dlopen's success shows in the maps, arming's in its report
/// file.
fn call(
    s: &Seized,
    orig: &libc::user_regs_struct,
    frame_at: u64,
    restore_rt: u64,
    func: u64,
    args: [u64; 2],
    watch: Option<i64>,
) -> Result<Option<i64>, InjectError> {
    let t = s.tid;
    // The result of the last system call numbered `watch` the function made. Stops
    // alternate, entry then exit: the first one after resuming from outside any system call
    // is an entry. (A system call a seccomp filter refuses has both stops too.)
    let mut at_entry = true;
    let mut watched = None;
    let mut r = *orig;
    r.rip = func;
    r.rsp = frame_at;
    r.rdi = args[0];
    r.rsi = args[1];
    r.rax = 0;
    r.orig_rax = u64::MAX; // not in a system call: no restart logic on resume
    r.eflags &= !0x400; // DF clear, as the ABI requires at a call
    set_regs(t, r)?;
    // Block every signal on this thread while it runs our calls; they stay pending.
    sigmask(t, Some(!0))?;
    step("call-set");
    ptrace::syscall(t, None).map_err(|e| InjectError(format!("cannot resume thread {t}: {e}")))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut first = true;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let st = wait_stop(t, left).map_err(|e| {
            InjectError(format!(
                "{e}: the call did not finish; the thread will restore itself when it does"
            ))
        })?;
        match st {
            Waited::RtSignal(signo) => {
                // As for any signal that reaches a thread during the call (below).
                detach_with_raw_signal(t, signo);
                return err(format!(
                    "thread {t} got signal {signo} during the call; detached, it restores \
                     itself when the call ends"
                ));
            }
            Waited::Status(WaitStatus::PtraceSyscall(_)) => {
                if first {
                    step("in-call");
                    first = false;
                }
                let now = regs_of(t)?;
                let entry = at_entry;
                at_entry = !at_entry;
                if !entry && watch == Some(now.orig_rax as i64) {
                    watched = Some(now.rax as i64);
                }
                if entry
                    && now.orig_rax == 15
                    && now.rip == restore_rt + 9
                    && now.rsp == frame_at + 8
                {
                    // The call returned into the trampoline. Its result is gone from rax
                    // (the trampoline set 15); the callee's rax is not needed for dlopen
                    // (success is checked in the maps) and arm reports through a file.
                    step("call-returned");
                    // Skip rt_sigreturn and back up to the trampoline's first instruction,
                    // so a dying attacher still leaves a thread that restores itself.
                    let mut back = now;
                    back.orig_rax = u64::MAX;
                    back.rip = restore_rt;
                    set_regs(t, back)?;
                    ptrace::interrupt(t)
                        .map_err(|e| InjectError(format!("cannot stop thread {t}: {e}")))?;
                    ptrace::cont(t, None)
                        .map_err(|e| InjectError(format!("cannot resume thread {t}: {e}")))?;
                    match wait_stop(t, Duration::from_secs(2))? {
                        Waited::Status(WaitStatus::PtraceEvent(_, _, libc::PTRACE_EVENT_STOP)) => {
                            return Ok(watched);
                        }
                        other => {
                            return err(format!(
                                "unexpected state of thread {t} after the call: {other:?}; \
                                 left to restore itself"
                            ))
                        }
                    }
                }
                ptrace::syscall(t, None)
                    .map_err(|e| InjectError(format!("cannot resume thread {t}: {e}")))?;
            }
            Waited::Status(WaitStatus::Stopped(_, sig)) => {
                // Only unblockable or synchronous signals get here (all others are blocked):
                // hand it over and let the thread finish and restore itself. A SIGTRAP is
                // ptrace's own (never the program's while it runs our call): dropped.
                let _ = ptrace::detach(t, (sig != Signal::SIGTRAP).then_some(sig));
                return err(format!(
                    "thread {t} got {sig} during the call; detached, it restores itself \
                     when the call ends"
                ));
            }
            Waited::Status(WaitStatus::PtraceEvent(_, sig, _)) => {
                let _ = ptrace::detach(t, None);
                return err(format!(
                    "process stopped ({sig}) during the call; detached, the thread restores \
                     itself when the call ends"
                ));
            }
            Waited::Status(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => {
                return err("the process ended during the call");
            }
            other => return err(format!("unexpected state of thread {t}: {other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's mapping of its C library, moved to a range it does not map (so that
    /// /proc/self/map_files has no entry and /proc/self/mem no bytes there): only the
    /// device and inode can vouch for a path.
    fn libc_mapping_elsewhere() -> Mapping {
        let m = maps(std::process::id() as i32).unwrap();
        let mut libc = m
            .into_iter()
            .find(|m| m.path.ends_with("/libc.so.6") && m.offset == 0)
            .expect("this test process maps libc.so.6");
        libc.start = 0x1000;
        libc.end = 0x2000;
        libc
    }

    #[test]
    fn a_path_counts_only_with_the_mappings_device_and_inode() {
        let pid = std::process::id() as i32;
        let libc = libc_mapping_elsewhere();
        let want = std::fs::read(&libc.path).unwrap();
        assert_eq!(
            read_mapped(pid, std::slice::from_ref(&libc), &libc.path).unwrap(),
            want
        );
        // Another inode at that path: refused, with what was tried.
        let mut other = libc.clone();
        other.inode ^= 1;
        let e = read_mapped(pid, &[other], &libc.path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("another file"), "{e}");
        assert!(e.contains("map_files"), "{e}");
    }
}
