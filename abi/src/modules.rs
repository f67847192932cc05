//! The module map: every loaded object (path, load bias, address range, GNU build id) a
//! stack address may fall in, so a reader can symbolize offline. Entries are appended as the
//! writer discovers objects; an entry is claimed with `fetch_add` on `Live::modules_used`,
//! filled, and published with a Release store of `state = STATE_READY`.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::live::Live;

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
///
/// # Safety
/// `table` points to `cap` entries of a writable segment mapping.
#[allow(clippy::too_many_arguments)]
pub unsafe fn append(
    live: &Live,
    table: *mut ModuleEntry,
    cap: usize,
    path: &[u8],
    bias: u64,
    start: u64,
    end: u64,
    build_id: &[u8],
) -> bool {
    if live.modules_used.load(Ordering::Relaxed) as usize >= cap {
        live.modules_dropped.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    let idx = live.modules_used.fetch_add(1, Ordering::Relaxed) as usize;
    if idx >= cap {
        live.modules_dropped.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    let p = &path[..path.len().min(PATH_MAX)];
    let b = &build_id[..build_id.len().min(BUILD_ID_MAX)];
    // SAFETY: index `idx < cap` was claimed by this thread alone through `fetch_add`; the
    // pointer comes from the writable mapping, and readers do not look at the entry's plain
    // fields before `state` is published below.
    unsafe {
        let e = table.add(idx);
        std::ptr::copy_nonoverlapping(
            p.as_ptr(),
            std::ptr::addr_of_mut!((*e).path).cast(),
            p.len(),
        );
        std::ptr::addr_of_mut!((*e).path_len).write(p.len() as u32);
        std::ptr::copy_nonoverlapping(
            b.as_ptr(),
            std::ptr::addr_of_mut!((*e).build_id).cast(),
            b.len(),
        );
        std::ptr::addr_of_mut!((*e).build_id_len).write(b.len() as u32);
        std::ptr::addr_of_mut!((*e).bias).write(bias);
        std::ptr::addr_of_mut!((*e).start).write(start);
        std::ptr::addr_of_mut!((*e).end).write(end);
        (*e).state.store(STATE_READY, Ordering::Release);
    }
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

/// The GNU build id in the contents of a PT_NOTE segment, if one is there (other notes, such
/// as GNU properties, are skipped).
pub fn gnu_build_id(mut notes: &[u8]) -> Option<&[u8]> {
    let align4 = |n: usize| n.checked_add(3).map(|v| v & !3);
    while notes.len() >= 12 {
        let word =
            |i: usize| u32::from_ne_bytes([notes[i], notes[i + 1], notes[i + 2], notes[i + 3]]);
        let (namesz, descsz, ntype) = (word(0) as usize, word(4) as usize, word(8));
        let name_end = align4(namesz)?.checked_add(12)?;
        let desc_end = align4(descsz)?.checked_add(name_end)?;
        if desc_end > notes.len() {
            break;
        }
        if ntype == 3 && namesz == 4 && &notes[12..16] == b"GNU\0" {
            return Some(&notes[name_end..name_end + descsz]);
        }
        notes = &notes[desc_end..];
    }
    None
}

/// The GNU build id of an ELF64 file as the dynamic loader sees it: from its PT_NOTE program
/// headers, not from section headers (tools that rewrite shared libraries can leave those
/// stale). `Ok(None)` for an ELF file without one; `Err` for unreadable or non-ELF64 files.
pub fn file_build_id(path: &std::path::Path) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::{Error, ErrorKind, Read, Seek, SeekFrom};
    let bad = |what: &str| {
        Error::new(
            ErrorKind::InvalidData,
            format!("{}: {what}", path.display()),
        )
    };
    // The path comes from a segment: never block on a FIFO put there, read only files.
    let mut f = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)?
    };
    if !f.metadata()?.is_file() {
        return Err(bad("not a regular file"));
    }
    let mut eh = [0u8; 64];
    f.read_exact(&mut eh)?;
    if &eh[..4] != b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return Err(bad("not a little-endian ELF64 file"));
    }
    let u16_at = |b: &[u8], i: usize| u16::from_le_bytes([b[i], b[i + 1]]) as usize;
    let u64_at = |b: &[u8], i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(w)
    };
    let (phoff, phentsize, phnum) = (u64_at(&eh, 32), u16_at(&eh, 54), u16_at(&eh, 56));
    if phentsize < 56 || phnum > 4096 {
        return Err(bad("bad program header table"));
    }
    let mut ph = vec![0u8; phentsize * phnum];
    f.seek(SeekFrom::Start(phoff))?;
    f.read_exact(&mut ph)?;
    for h in ph.chunks_exact(phentsize) {
        let p_type = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        if p_type != 4 {
            continue; // PT_NOTE
        }
        let (off, size) = (u64_at(h, 8), u64_at(h, 32));
        if size > 1 << 20 {
            continue;
        }
        let mut notes = vec![0u8; size as usize];
        f.seek(SeekFrom::Start(off))?;
        f.read_exact(&mut notes)?;
        if let Some(id) = gnu_build_id(&notes) {
            return Ok(Some(id.to_vec()));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use std::ops::ControlFlow;

    use super::*;

    #[test]
    fn build_id_notes() {
        let mut note = Vec::new();
        // A GNU property note first, then the build id.
        for (ty, desc) in [
            (5u32, vec![1u8, 2, 3, 4, 5, 6, 7, 8]),
            (3u32, vec![0xaa, 0xbb, 0xcc]),
        ] {
            note.extend_from_slice(&4u32.to_ne_bytes());
            note.extend_from_slice(&(desc.len() as u32).to_ne_bytes());
            note.extend_from_slice(&ty.to_ne_bytes());
            note.extend_from_slice(b"GNU\0");
            let mut d = desc.clone();
            d.resize(desc.len().div_ceil(4) * 4, 0);
            note.extend_from_slice(&d);
        }
        assert_eq!(gnu_build_id(&note), Some(&[0xaa, 0xbb, 0xcc][..]));
        assert_eq!(gnu_build_id(&note[..10]), None);
        let mut bad = note.clone();
        bad[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(gnu_build_id(&bad), None);
    }

    #[test]
    fn build_id_of_this_test_binary_matches_what_the_loader_mapped() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let on_disk = file_build_id(&exe).unwrap();
        // Compare with the PT_NOTE of the running image (the main program is listed first).
        let in_memory = crate::objects::for_each_object(|o| {
            assert_eq!(o.name().to_bytes(), b"");
            ControlFlow::Break(o.build_id().map(<[u8]>::to_vec))
        })
        .flatten();
        assert!(on_disk.is_some());
        assert_eq!(on_disk, in_memory);
        assert!(file_build_id(std::path::Path::new("/proc/self/status")).is_err());
    }
}
