//! Helpers shared by the unit tests.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use syncspy_abi::{Api, Direction, Kind, Record};

/// A fresh folder under the system temp folder, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("syncspy-agent-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A record of `kind` through `api` lasting `duration_ns`, moving `bytes`, at call site `site`.
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
