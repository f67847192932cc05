//! Jobs in containers (docs/cluster.md): processes in PID namespaces of their own share one
//! segment folder (the host's `/dev/shm` mounted into every pod), and neither they nor the
//! readers on the host lose a live job's data.
//!
//! The containers are made with `unshare` (a PID namespace with its own `/proc`), which needs
//! root: CI runs as root. Elsewhere each test says why it did not run and passes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::{artifact, cudacalls, eventually, Running, TempDir};
use syncspy_abi::SegmentReader;

/// Whether this machine can make PID namespaces (root, `unshare` present); says why not.
fn namespaces_available() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: making PID namespaces needs root (CI runs as root)");
        return false;
    }
    let ok = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped: `unshare --pid --fork --mount-proc` does not work here");
    }
    ok
}

/// A folder where the simulated runtime answers to the CUDA sonames.
fn sim_dir(d: &TempDir) -> PathBuf {
    let dir = d.path().join("sim");
    std::fs::create_dir_all(&dir).unwrap();
    let lib = artifact("libsimcudart.so");
    for name in ["libcudart.so.13", "libcuda.so.1", "libcupti.so.13"] {
        std::os::unix::fs::symlink(&lib, dir.join(name)).unwrap();
    }
    dir
}

/// A job in a PID namespace of its own (`unshare --pid --fork --mount-proc`, so it is pid 1
/// there), with the library preloaded and segments in `segs`.
fn containerized_job(sim: &Path, segs: &Path, env: &[(&str, &str)], args: &[&str]) -> Running {
    let mut c = Command::new("unshare");
    c.args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(cudacalls())
        .args(args)
        .env("LD_PRELOAD", artifact("libsyncspy.so"))
        .env("LD_LIBRARY_PATH", sim)
        .env("SYNCSPY_DIR", segs)
        .env("SIMCUDA_TIME_SCALE", "1")
        .env("SYNCSPY_GPU_IDLE", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    Running(c.spawn().unwrap())
}

/// The segment files of `dir`, by name.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(syncspy_abi::parse_segment_name)
                .is_some()
        })
        .collect();
    v.sort();
    v
}

fn events(r: &SegmentReader) -> u64 {
    r.live().written()
}

#[test]
fn a_second_containerized_job_never_shrinks_or_removes_the_first_ones_live_segment() {
    if !namespaces_available() {
        return;
    }
    let d = TempDir::new("containers-two-jobs");
    let sim = sim_dir(&d);
    let segs = d.path().join("shm");
    std::fs::create_dir(&segs).unwrap();
    // Reclaimers as eager as they can be: no linger, a folder cap of nothing. Before the
    // liveness lock, the second job's library took the first (pid 1 in its namespace; pid 1
    // here is init, started at another time) for dead, punched holes in it and removed it.
    let eager = [("SYNCSPY_LINGER_MS", "0"), ("SYNCSPY_DIR_CAP_MB", "0")];
    let job = ["--iters", "100000", "busy=s1:500", "sync=s1", "sleep=2000"];
    let _a = containerized_job(&sim, &segs, &eager, &job);
    let first = eventually("the first job's segment", || {
        let s = segments(&segs);
        let r = SegmentReader::open(s.first()?).ok()?;
        (events(&r) > 0).then(|| (s[0].clone(), r))
    });
    let (path_a, reader_a) = first;
    assert_eq!(reader_a.ident().pid, 1, "pid 1 in its namespace");
    let origin = reader_a.origin().expect("an ABI 1.5 segment");
    assert!(origin.lock_held_while_alive());
    let own_ns = std::fs::metadata("/proc/self/ns/pid").unwrap().ino();
    assert_ne!(
        origin.pid_ns, own_ns,
        "the job is in a PID namespace of its own"
    );
    let on_disk = std::fs::metadata(&path_a).unwrap().blocks();

    // The second job starts, and runs its reclaim pass against the first one's segment.
    let mut b = containerized_job(&sim, &segs, &eager, &job);
    eventually("the second job's segment", || {
        (segments(&segs).len() == 2).then_some(())
    });
    // Short jobs come and go beside them, each reclaiming as it starts.
    for _ in 0..3 {
        let mut c = containerized_job(&sim, &segs, &eager, &["--iters", "1", "sync=s1"]);
        assert!(c.0.wait().unwrap().success());
    }
    let before = events(&reader_a);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        path_a.exists(),
        "the first job's live segment was removed: {:?}",
        segments(&segs)
    );
    let meta = std::fs::metadata(&path_a).unwrap();
    assert_eq!(meta.ino(), reader_a.file_id().1, "replaced under its name");
    assert_eq!(meta.blocks(), on_disk, "its pages were punched out");
    let name = path_a.file_name().unwrap().to_str().unwrap();
    assert!(
        !segs.join(format!(".{name}.dead")).exists(),
        "marked dead while it runs"
    );
    assert!(reader_a.writer_alive());
    assert!(
        events(&reader_a) > before,
        "the first job stopped recording"
    );

    // The second job ends (killed with its namespace): only then is its segment ended.
    let path_b = segments(&segs).into_iter().find(|p| *p != path_a).unwrap();
    let reader_b = SegmentReader::open(&path_b).unwrap();
    assert!(reader_b.writer_alive());
    b.0.kill().unwrap();
    b.0.wait().unwrap();
    eventually("the killed job's segment ended", || {
        (!reader_b.writer_alive()).then_some(())
    });
    assert!(reader_a.writer_alive());
}

#[test]
fn a_forked_child_does_not_keep_its_parents_segment_alive() {
    // The parent records, forks a child that lives on, and exits: its segment must read as
    // ended at once (the child let go of the inherited lock), whatever the pids say.
    let d = TempDir::new("containers-fork");
    let sim = sim_dir(&d);
    let segs = d.path().join("shm");
    std::fs::create_dir(&segs).unwrap();
    let script = r#"
import ctypes, os, sys, time
rt = ctypes.CDLL("libcudart.so.13")
assert rt.cudaDeviceSynchronize() == 0
pid = os.fork()
if pid == 0:
    os.close(1)
    time.sleep(30)
    os._exit(0)
print(pid, flush=True)
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .env("LD_PRELOAD", artifact("libsyncspy.so"))
        .env("LD_LIBRARY_PATH", &sim)
        .env("SYNCSPY_DIR", &segs)
        .env("SYNCSPY_GPU_IDLE", "off")
        .env("SYNCSPY_PYTHON", "0")
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success());
    let child: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    struct Kill(i32);
    impl Drop for Kill {
        fn drop(&mut self) {
            // SAFETY: kill with a pid this test's child forked; a stale pid only fails.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
    let _kill = Kill(child);
    assert!(
        Path::new(&format!("/proc/{child}")).exists(),
        "the child runs"
    );
    let s = segments(&segs);
    assert_eq!(s.len(), 1, "only the parent called CUDA: {s:?}");
    let r = SegmentReader::open(&s[0]).unwrap();
    assert!(
        !r.writer_alive(),
        "the parent's segment looks alive while only its child runs"
    );
}

/// A tmpfs of `mib` MiB mounted on a new folder of `d`; unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(d: &TempDir, mib: u32) -> Tmpfs {
        let at = d.path().join("small-shm");
        std::fs::create_dir(&at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&at)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount a tmpfs on {}", at.display());
        Tmpfs(at)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn eight_ranks_in_a_64_mib_shm_leave_a_40_mib_program_its_room() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting a tmpfs needs root (CI runs as root)");
        return;
    }
    let d = TempDir::new("containers-small-shm");
    let sim = sim_dir(&d);
    let shm = Tmpfs::mount(&d, 64);
    // Eight ranks start and record, each in its own PID namespace when possible.
    let job = ["--iters", "400", "busy=s1:500", "sync=s1", "sleep=1000"];
    let mut ranks: Vec<Running> = (0..8)
        .map(|_| {
            let mut c = Command::new(cudacalls());
            c.args(job)
                .env("LD_PRELOAD", artifact("libsyncspy.so"))
                .env("LD_LIBRARY_PATH", &sim)
                .env("SYNCSPY_DIR", &shm.0)
                .env("SIMCUDA_TIME_SCALE", "1")
                .env("SYNCSPY_GPU_IDLE", "off")
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            Running(c.spawn().unwrap())
        })
        .collect();
    let recorded = eventually("eight segments", || {
        let s = segments(&shm.0);
        (s.len() == 8).then_some(s)
    });
    let taken: u64 = recorded
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().blocks() * 512)
        .sum();
    assert!(
        taken <= 16 << 20,
        "the segments take {taken} bytes of 64 MiB"
    );
    // The job's own user of shared memory (a DataLoader's buffers, NCCL) takes 40 MiB.
    let program = shm.0.join("job-buffers");
    let out = Command::new("fallocate")
        .args(["-l", "40M"])
        .arg(&program)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the program could not have its 40 MiB: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And every rank still ends well, recorded.
    for r in &mut ranks {
        assert!(r.0.wait().unwrap().success());
    }
    for p in &recorded {
        let r = SegmentReader::open(p).unwrap();
        assert!(events(&r) > 0, "{} recorded nothing", p.display());
    }
    // The job takes all but 4 MiB of what is left: a ninth process finds no room above the
    // floor of free space (16 MiB): it runs unrecorded, unharmed, and says why. (What is left
    // depends on the segments' size, up to 2 MiB each in a folder this small.)
    let more = shm.0.join("more-buffers");
    let free = free_bytes(&shm.0);
    assert!(
        free > 4 << 20,
        "only {free} bytes left after the program's 40 MiB"
    );
    assert!(Command::new("fallocate")
        .args(["-l", &(free - (4 << 20)).to_string()])
        .arg(&more)
        .status()
        .unwrap()
        .success());
    assert!(free_bytes(&shm.0) < 16 << 20);
    let out = Command::new(cudacalls())
        .args(["--iters", "1", "sync=s1"])
        .env("LD_PRELOAD", artifact("libsyncspy.so"))
        .env("LD_LIBRARY_PATH", &sim)
        .env("SYNCSPY_DIR", &shm.0)
        .env("SYNCSPY_GPU_IDLE", "off")
        .env("SYNCSPY_LINGER_MS", "3600000")
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not recording this process: no room"), "{err}");
    std::fs::remove_file(&program).unwrap();
    std::fs::remove_file(&more).unwrap();
}

/// Bytes free for an unprivileged writer in the file system of `dir`.
fn free_bytes(dir: &std::path::Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: statvfs is plain data: zeroed is a valid out-value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a writable statvfs for the call.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st.f_bavail as u64 * st.f_frsize as u64
}

#[test]
fn a_non_root_job_in_its_own_pid_namespace_is_read_by_root_on_the_node() {
    // Its segment is owned by its user and names pid 1, which here is init (root): the owner
    // check must find the process by its namespace, not by its pid.
    if !namespaces_available() {
        return;
    }
    let d = TempDir::new("containers-nonroot");
    let sim = sim_dir(&d);
    let segs = d.path().join("shm");
    std::fs::create_dir(&segs).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&segs, std::fs::Permissions::from_mode(0o1777)).unwrap();
    // The test folder itself must be traversable by nobody.
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut c = Command::new("unshare");
    c.args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .args([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
        .arg(cudacalls())
        .args(["--iters", "100000", "busy=s1:500", "sync=s1", "sleep=2000"])
        .env("LD_PRELOAD", artifact("libsyncspy.so"))
        .env("LD_LIBRARY_PATH", &sim)
        .env("SYNCSPY_DIR", &segs)
        .env("SIMCUDA_TIME_SCALE", "1")
        .env("SYNCSPY_GPU_IDLE", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _job = Running(c.spawn().unwrap());
    let path = eventually("the job's segment", || segments(&segs).into_iter().next());
    assert_eq!(std::fs::metadata(&path).unwrap().uid(), 65534);
    let r = eventually("the segment opens", || SegmentReader::open(&path).ok());
    assert_eq!(r.ident().pid, 1);
    assert!(r.writer_alive());
    let at = syncspy_read::place::place(r.ident(), r.origin().as_ref());
    assert!(at.foreign_ns());
    let host = at.host_pid().expect("the job's host pid");
    assert_ne!(host, 1);
    let status = std::fs::read_to_string(format!("/proc/{host}/status")).unwrap();
    assert!(status.contains("65534"), "{status}");
}
