//! The module map: every loaded object (path, load bias, address range, GNU build id) a
//! stack address may fall in, so a reader can symbolize offline. Entries are appended as the
//! writer discovers objects; an entry is claimed with `fetch_add` on `Live::modules_used`,
//! filled, and published with a Release store of `state = STATE_READY`.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::layout::Live;

pub const PATH_MAX: usize = 424;
pub const BUILD_ID_MAX: usize = 40;
pub const STATE_READY: u32 = 2;

#[repr(C)]
pub struct ModuleEntry {
    pub state: AtomicU32,
    pub path_len: u32,
    pub build_id_len: u32,
    pub _pad: u32,
    /// Runtime address minus ELF virtual address (`dlpi_addr`).
    pub bias: u64,
    /// Runtime address range covered by the object's PT_LOAD segments.
    pub start: u64,
    pub end: u64,
    pub build_id: [u8; BUILD_ID_MAX],
    pub path: [u8; PATH_MAX],
    pub _reserved: [u8; 8],
}

const _: () = assert!(std::mem::size_of::<ModuleEntry>() == 512);

/// A module as a reader sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    pub path: String,
    pub bias: u64,
    pub start: u64,
    pub end: u64,
    pub build_id: Vec<u8>,
}

impl Module {
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }
}

/// Appends a module; `false` when the map is full (counted in `modules_dropped`).
pub fn append(
    live: &Live,
    table: &[ModuleEntry],
    path: &[u8],
    bias: u64,
    start: u64,
    end: u64,
    build_id: &[u8],
) -> bool {
    let idx = live.modules_used.fetch_add(1, Ordering::Relaxed) as usize;
    let Some(e) = table.get(idx) else {
        live.modules_dropped.fetch_add(1, Ordering::Relaxed);
        return false;
    };
    let p = &path[..path.len().min(PATH_MAX)];
    let b = &build_id[..build_id.len().min(BUILD_ID_MAX)];
    // SAFETY: index `idx` was claimed by this thread alone through `fetch_add`; readers do
    // not look at the entry's plain fields before `state` is published below.
    unsafe {
        let e = e as *const ModuleEntry as *mut ModuleEntry;
        std::ptr::copy_nonoverlapping(
            p.as_ptr(),
            std::ptr::addr_of_mut!((*e).path).cast(),
            p.len(),
        );
        (*e).path_len = p.len() as u32;
        std::ptr::copy_nonoverlapping(
            b.as_ptr(),
            std::ptr::addr_of_mut!((*e).build_id).cast(),
            b.len(),
        );
        (*e).build_id_len = b.len() as u32;
        (*e).bias = bias;
        (*e).start = start;
        (*e).end = end;
    }
    e.state.store(STATE_READY, Ordering::Release);
    true
}

/// Every published module, validated (lengths clamped, empty ranges dropped).
pub fn read_all(live: &Live, table: &[ModuleEntry]) -> Vec<Module> {
    let used = (live.modules_used.load(Ordering::Acquire) as usize).min(table.len());
    let mut out = Vec::with_capacity(used);
    for e in &table[..used] {
        if e.state.load(Ordering::Acquire) != STATE_READY {
            continue;
        }
        // SAFETY: published entries are not written again; volatile because the memory is
        // shared with another process that we do not trust.
        let (path_len, bid_len, bias, start, end, path, build_id) = unsafe {
            (
                std::ptr::read_volatile(&e.path_len) as usize,
                std::ptr::read_volatile(&e.build_id_len) as usize,
                std::ptr::read_volatile(&e.bias),
                std::ptr::read_volatile(&e.start),
                std::ptr::read_volatile(&e.end),
                std::ptr::read_volatile(&e.path),
                std::ptr::read_volatile(&e.build_id),
            )
        };
        if start >= end {
            continue;
        }
        out.push(Module {
            path: String::from_utf8_lossy(&path[..path_len.min(PATH_MAX)]).into_owned(),
            bias,
            start,
            end,
            build_id: build_id[..bid_len.min(BUILD_ID_MAX)].to_vec(),
        });
    }
    out
}
