//! Helpers shared by syncspy's tests (unit and integration, every crate): a private folder
//! removed on drop, a child process killed on drop, and a record builder.
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
    }
}
