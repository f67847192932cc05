//! The call-site table: interned native stacks (return addresses), written once per distinct
//! stack, so records carry a 32-bit id instead of a stack.
//!
//! Open addressing with linear probing over a power-of-two table. An entry is claimed by a
//! CAS of its `hash` from 0 (so two threads interning the same new stack agree on one entry),
//! filled, then published by a Release store of `state = READY`. Ids are `index + 1`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::live::Live;

/// Frames kept per stack; deeper stacks are cut (innermost frames are kept).
pub const MAX_FRAMES: usize = 62;
/// Entries probed before giving up (the stack is then counted in `sites_dropped`).
const MAX_PROBES: usize = 64;
pub const STATE_READY: u32 = 2;

#[repr(C)]
pub struct SiteEntry {
    /// Hash of the stack, forced non-zero; 0 while free. Claimed by CAS.
    pub hash: AtomicU64,
    /// 0 free or being written, `STATE_READY` once `frames` are complete.
    pub state: AtomicU32,
    /// Frames in use, `0..=MAX_FRAMES`.
    pub nframes: AtomicU32,
    /// Return addresses, innermost first.
    pub frames: [AtomicU64; MAX_FRAMES],
}

const _: () = assert!(std::mem::size_of::<SiteEntry>() == 512);

/// Hash of a stack, never 0.
pub fn stack_hash(frames: &[u64]) -> u64 {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15 ^ frames.len() as u64;
    for &f in frames {
        h = (h ^ f).wrapping_mul(0x1000_0000_01b3).rotate_left(23);
    }
    h ^= h >> 29;
    h | 1
}

/// Returns the id of `frames` in `table`, inserting it if new; `None` when the table is full
/// around its home position. Never waits.
pub fn intern(live: &Live, table: &[SiteEntry], frames: &[u64]) -> Option<u32> {
    let frames = &frames[..frames.len().min(MAX_FRAMES)];
    intern_hashed(live, table, frames, stack_hash(frames))
}

/// `intern` under a given hash `h` (non-zero): a site with Python frames is its native stack
/// under a hash salted with the Python stack's (see `python::salted_hash`).
pub fn intern_hashed(live: &Live, table: &[SiteEntry], frames: &[u64], h: u64) -> Option<u32> {
    let frames = &frames[..frames.len().min(MAX_FRAMES)];
    let h = h | 1;
    let mask = table.len() - 1;
    for probe in 0..MAX_PROBES.min(table.len()) {
        let idx = (h as usize).wrapping_add(probe) & mask;
        let e = &table[idx];
        let mut eh = e.hash.load(Ordering::Acquire);
        if eh == 0 {
            match e
                .hash
                .compare_exchange(0, h, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    for (dst, f) in e.frames.iter().zip(frames) {
                        dst.store(*f, Ordering::Relaxed);
                    }
                    e.nframes.store(frames.len() as u32, Ordering::Relaxed);
                    e.state.store(STATE_READY, Ordering::Release);
                    live.sites_used.fetch_add(1, Ordering::Relaxed);
                    return Some(idx as u32 + 1);
                }
                Err(actual) => eh = actual,
            }
        }
        if eh != h {
            continue;
        }
        if e.state.load(Ordering::Acquire) != STATE_READY {
            // Another thread is writing a stack with the same 64-bit hash right now: the
            // same stack, barring a collision that costs one mislabelled event.
            return Some(idx as u32 + 1);
        }
        let n = e.nframes.load(Ordering::Relaxed) as usize;
        if n == frames.len()
            && e.frames
                .iter()
                .zip(frames)
                .all(|(a, b)| a.load(Ordering::Relaxed) == *b)
        {
            return Some(idx as u32 + 1);
        }
    }
    live.sites_dropped.fetch_add(1, Ordering::Relaxed);
    None
}

/// Reads the stack of site `id`; `None` if the id is out of range or not published.
pub fn read(table: &[SiteEntry], id: u32) -> Option<Vec<u64>> {
    let idx = (id as usize).checked_sub(1)?;
    let e = table.get(idx)?;
    if e.state.load(Ordering::Acquire) != STATE_READY {
        return None;
    }
    let n = (e.nframes.load(Ordering::Relaxed) as usize).min(MAX_FRAMES);
    Some(
        e.frames[..n]
            .iter()
            .map(|f| f.load(Ordering::Relaxed))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(n: usize) -> Vec<SiteEntry> {
        // SAFETY: SiteEntry is all atomic integers, for which zero is a valid bit pattern
        // (and the free state of an entry).
        (0..n).map(|_| unsafe { std::mem::zeroed() }).collect()
    }

    #[test]
    fn same_stack_same_id_different_stack_different_id() {
        // SAFETY: Live is all atomic integers, for which zero is a valid bit pattern.
        let live: Box<Live> = unsafe { Box::new(std::mem::zeroed()) };
        let t = table(64);
        let a = intern(&live, &t, &[1, 2, 3]).unwrap();
        let b = intern(&live, &t, &[1, 2, 4]).unwrap();
        assert_ne!(a, b);
        assert_eq!(intern(&live, &t, &[1, 2, 3]), Some(a));
        assert_eq!(read(&t, a), Some(vec![1, 2, 3]));
        assert_eq!(read(&t, 0), None);
        assert_eq!(read(&t, 65), None);
        assert_eq!(live.sites_used.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn full_table_counts_drops() {
        // SAFETY: Live is all atomic integers, for which zero is a valid bit pattern.
        let live: Box<Live> = unsafe { Box::new(std::mem::zeroed()) };
        let t = table(4);
        for i in 0..4u64 {
            assert!(intern(&live, &t, &[i]).is_some());
        }
        assert_eq!(intern(&live, &t, &[99]), None);
        assert_eq!(live.sites_dropped.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn threads_interning_the_same_stacks_agree() {
        // SAFETY: Live is all atomic integers, for which zero is a valid bit pattern.
        let live: Box<Live> = unsafe { Box::new(std::mem::zeroed()) };
        let t = table(1024);
        let ids: Vec<Vec<u32>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..200u64)
                            .map(|i| intern(&live, &t, &[i, i * 2]).unwrap())
                            .collect()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(ids.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(live.sites_used.load(Ordering::Relaxed), 200);
    }
}
