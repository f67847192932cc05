//! Helpers shared by syncspy's tests (unit and integration, every crate): a private folder
//! removed on drop, a child process killed on drop, a record builder, and what hostile-input
//! tests need (a FIFO, a deadline on a child).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed set-up is a failed test

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicU32, Ordering};

use syncspy_abi::{Api, Direction, Kind, Record};

/// A fresh private folder, removed on drop. In `/dev/shm` when there is one (segments belong
/// in tmpfs, as in production), else under the system temp folder. The path is canonical, so
/// tests may compare it with paths a program prints.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new folder; `tag` names it for whoever finds it left behind by a killed test.
    pub fn new(tag: &str) -> TempDir {
        // Unique per call: tests run in parallel threads of one process, and several may ask
        // for the same tag.
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let d = base.join(format!("syncspy-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d.canonicalize().unwrap())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `text` to `name` in this folder and returns its path.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The target folder of the running test binary: `target/<profile>`, from
/// `target/<profile>/deps/<test>-<hash>`. The workspace's programs and libraries are there.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// A built artifact of the workspace (a program or library in [`target_dir`]); fails the test
/// with what to do when it is missing.
pub fn artifact(name: &str) -> PathBuf {
    let p = target_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace` first",
        p.display()
    );
    p
}

/// A child killed and reaped when the test ends, whatever happens (py-spy's `ScriptRunner`).
pub struct Running(pub Child);

impl Running {
    pub fn child(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A record of `kind` through `api` lasting `duration_ns`, moving `bytes` (host to device when
/// non-zero), at call site `site`, on thread 1.
pub fn rec(kind: Kind, api: Api, duration_ns: u64, bytes: u64, site: u32) -> Record {
    Record {
        kind,
        api,
        direction: if bytes > 0 {
            Direction::HostToDevice
        } else {
            Direction::None
        },
        flags: 0,
        device: 0,
        start_ns: 1,
        duration_ns,
        bytes,
        stream: 0,
        tid: 1,
        site,
        result: 0,
        polls: 0,
    }
}

/// Makes a FIFO at `path` (mode 0666, as any local user could put in a segment folder).
pub fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path only; the result is checked.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o666) };
    assert_eq!(rc, 0, "mkfifo {}", path.display());
}

/// Waits for `child` for at most `secs` seconds; on the deadline kills it and panics with
/// `what` (a test of "does not hang" fails instead of hanging). Returns its output, when its
/// stdout and stderr were piped.
pub fn wait_within(mut child: Child, secs: u64, what: &str) -> std::process::Output {
    use std::io::Read;
    let mut pipes = (child.stdout.take(), child.stderr.take());
    let out = std::thread::spawn(move || {
        let mut o = Vec::new();
        if let Some(p) = pipes.0.as_mut() {
            let _ = p.read_to_end(&mut o);
        }
        o
    });
    let err = std::thread::spawn(move || {
        let mut e = Vec::new();
        if let Some(p) = pipes.1.as_mut() {
            let _ = p.read_to_end(&mut e);
        }
        e
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    std::process::Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// A character device that answers every write with ENOSPC, like `/dev/full`: as root, a
/// node of its own made in `dir` (so that a broken writer that replaces the device replaces
/// only that node, never the system's `/dev/full`), else `/dev/full` itself (which a user
/// cannot replace).
pub fn full_device(dir: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let own = dir.join("full");
    let c = std::ffi::CString::new(own.as_os_str().as_bytes()).unwrap();
    // SAFETY: mknod reads the NUL-terminated path only; the result is checked. 1:7 is the
    // kernel's "full" memory device.
    let made = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 7)) } == 0;
    let works = made && {
        let f = std::fs::OpenOptions::new().write(true).open(&own);
        let e = f.and_then(|mut f| std::io::Write::write_all(&mut f, b"x"));
        e.is_err_and(|e| e.raw_os_error() == Some(libc::ENOSPC))
    };
    if works {
        own
    } else {
        let _ = std::fs::remove_file(&own);
        PathBuf::from("/dev/full")
    }
}

/// The Python-call-site fixtures of the preload library's tests (interpose/tests/python):
/// `frames.py` calls the simulated runtime through `pycaller.c`, a C library it loads with
/// ctypes, from lines marked `# L:<name>`.
pub mod pycaller {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// A fixture file of interpose/tests/python.
    pub fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../interpose/tests/python")
            .join(name)
    }

    /// Builds pycaller.c into `dir`, linked against `dir/libcudart.so.13`, a link to
    /// `simcudart` (the simulated runtime), so it calls the runtime through its own PLT as
    /// libtorch does.
    pub fn build(dir: &Path, simcudart: &Path) -> PathBuf {
        std::os::unix::fs::symlink(simcudart, dir.join("libcudart.so.13")).unwrap();
        let lib = dir.join("libpycaller.so");
        let status = Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()))
            .args(["-shared", "-fPIC", "-O1", "-pthread", "-o"])
            .arg(&lib)
            .arg(fixture("pycaller.c"))
            .arg(format!("-L{}", dir.display()))
            .arg("-l:libcudart.so.13")
            .arg(format!("-Wl,-rpath,{}", dir.display()))
            .status()
            .expect("run the C compiler (cc) for the test library");
        assert!(status.success(), "building libpycaller.so failed");
        lib
    }

    /// Line numbers of the `# L:<name>` markers of frames.py.
    pub fn markers() -> BTreeMap<String, u32> {
        markers_of("frames.py", "# L:")
    }

    /// Line numbers of the `<tag><name>` markers of fixture `file`.
    pub fn markers_of(file: &str, tag: &str) -> BTreeMap<String, u32> {
        let src = std::fs::read_to_string(fixture(file)).unwrap();
        src.lines()
            .enumerate()
            .filter_map(|(i, l)| {
                let name = l.split(tag).nth(1)?;
                Some((name.trim().to_string(), i as u32 + 1))
            })
            .collect()
    }

    /// The interpreters the Python tests run under: `python3` from PATH (it must exist), every
    /// CPython 3.10 or newer that pyenv installed (`$PYENV_ROOT` or `~/.pyenv`, `versions/3.1x.*`,
    /// free-threaded builds (`t` suffix) included), and every path in `SYNCSPY_TEST_PYTHONS`
    /// (colon-separated).
    pub fn interpreters() -> Vec<String> {
        let mut out = vec!["python3".to_string()];
        let root = std::env::var_os("PYENV_ROOT")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".pyenv")));
        if let Some(Ok(dir)) = root.map(|r| std::fs::read_dir(r.join("versions"))) {
            let mut found: Vec<(u32, String)> = dir
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().to_str()?.to_string();
                    let minor: u32 = name.strip_prefix("3.")?.split('.').next()?.parse().ok()?;
                    let bin = e.path().join("bin/python3");
                    let bin = bin.to_str()?.to_string();
                    (minor >= 10 && Path::new(&bin).exists()).then_some((minor, bin))
                })
                .collect();
            found.sort();
            out.extend(found.into_iter().map(|f| f.1));
        }
        if let Some(list) = std::env::var_os("SYNCSPY_TEST_PYTHONS") {
            out.extend(std::env::split_paths(&list).filter_map(|p| Some(p.to_str()?.to_string())));
        }
        out
    }
}
