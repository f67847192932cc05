//! A multi-writer ring that any number of readers follow independently.
//!
//! Writers claim a sequence number with one `fetch_add` and own slot `seq % capacity` while
//! they fill it; they never wait for readers, and a slot still held by a stalled writer is
//! skipped (the event is counted as dropped) rather than waited for. Each slot carries a
//! stamp that says which sequence it holds and whether it is complete, so a reader can tell
//! "not written yet" from "already overwritten" and account for every sequence number it
//! did not deliver: every `seq` below `write_seq` is either delivered or counted as lost by
//! each reader, exactly once.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::live::Live;
use crate::record::{Record, RecordError, RECORD_WORDS};

/// One ring slot: a stamp and the payload words. 64 bytes, one cache line.
///
/// `stamp` is 0 (never written), `writing(seq)` (odd: a writer is filling it) or
/// `done(seq)` (even: complete). Writers claim with a CAS and publish with a Release store;
/// readers use it as a seqlock (Acquire load, payload, Acquire fence, re-check).
#[repr(C, align(64))]
pub struct Slot {
    pub stamp: AtomicU64,
    pub words: [AtomicU64; RECORD_WORDS],
}

const _: () = assert!(std::mem::size_of::<Slot>() == 64);

#[inline]
const fn done(seq: u64) -> u64 {
    seq.wrapping_add(1) << 1
}

#[inline]
const fn writing(seq: u64) -> u64 {
    done(seq) | 1
}

/// The sequence a non-zero stamp refers to. Wrapping: a reader may meet any stamp in a
/// corrupt segment (stamp 1 reads as sequence `u64::MAX`, a later lap: lost, not a panic).
#[inline]
const fn stamp_seq(stamp: u64) -> u64 {
    (stamp >> 1).wrapping_sub(1)
}

/// Writes one record. Returns `false` (and counts a drop) when the slot was held by a writer
/// that claimed it a whole ring earlier and has not finished, or holds a newer record.
#[inline]
pub fn push(live: &Live, slots: &[Slot], rec: &Record) -> bool {
    let words = rec.to_words();
    let seq = live.write_seq.fetch_add(1, Ordering::Relaxed);
    // `slots.len()` is a power of two (validated at creation); the mask keeps every index
    // in bounds even if it were not.
    let slot = &slots[(seq as usize) & (slots.len() - 1)];
    let cur = slot.stamp.load(Ordering::Relaxed);
    let free = cur & 1 == 0 && (cur == 0 || stamp_seq(cur) < seq);
    if !free
        || slot
            .stamp
            .compare_exchange(cur, writing(seq), Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        live.events_dropped.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    fence(Ordering::Release);
    for (dst, w) in slot.words.iter().zip(words) {
        dst.store(w, Ordering::Relaxed);
    }
    slot.stamp.store(done(seq), Ordering::Release);
    // `events_written` is not counted here (one read-modify-write less per event): it is
    // `write_seq - events_dropped`, less the writes in flight (see `Live::written`).
    true
}

/// A reader's position in one ring.
#[derive(Clone, Debug, Default)]
pub struct Cursor {
    /// Next sequence number to deliver.
    pub next: u64,
    /// Consecutive polls that found `next` claimed but not complete.
    stuck_polls: u32,
}

impl Cursor {
    /// A cursor at the beginning of the ring's history: records already overwritten are
    /// reported as lost by the first poll.
    pub fn from_start() -> Cursor {
        Cursor::default()
    }

    /// A cursor that skips everything written so far.
    pub fn at(seq: u64) -> Cursor {
        Cursor {
            next: seq,
            stuck_polls: 0,
        }
    }
}

/// What one poll did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollStats {
    pub delivered: u64,
    /// Sequence numbers this reader will never see: overwritten before it got there, or
    /// claimed by a writer that never completed them.
    pub lost: u64,
    /// Complete slots whose payload did not decode.
    pub corrupt: u64,
}

/// Delivers complete records after `cursor`, in sequence order, to `sink`, at most `budget`
/// of them. A sequence number claimed but not complete holds the reader back for
/// `patience` polls (a writer may be between claim and publish) and is then counted lost;
/// pass `patience = 0` for a final drain after the writer is gone.
pub fn poll(
    live: &Live,
    slots: &[Slot],
    cursor: &mut Cursor,
    budget: usize,
    patience: u32,
    mut sink: impl FnMut(Result<Record, RecordError>),
) -> PollStats {
    let cap = slots.len() as u64;
    let mask = slots.len() - 1;
    let mut stats = PollStats::default();
    let head = live.write_seq.load(Ordering::Acquire);
    if head < cursor.next {
        // The writer's counter went backwards: the segment was reset or is corrupt. Resync.
        cursor.next = head;
        cursor.stuck_polls = 0;
        return stats;
    }
    if head - cursor.next > cap {
        let skip = head - cap - cursor.next;
        stats.lost += skip;
        cursor.next += skip;
        cursor.stuck_polls = 0;
    }
    while cursor.next < head && (stats.delivered as usize) < budget {
        let seq = cursor.next;
        let slot = &slots[(seq as usize) & mask];
        let s1 = slot.stamp.load(Ordering::Acquire);
        if s1 == done(seq) {
            let mut words = [0u64; RECORD_WORDS];
            for (w, src) in words.iter_mut().zip(&slot.words) {
                *w = src.load(Ordering::Relaxed);
            }
            fence(Ordering::Acquire);
            let s2 = slot.stamp.load(Ordering::Relaxed);
            if s2 == s1 {
                match Record::from_words(&words) {
                    Ok(r) => {
                        stats.delivered += 1;
                        sink(Ok(r));
                    }
                    Err(e) => {
                        stats.corrupt += 1;
                        sink(Err(e));
                    }
                }
            } else {
                stats.lost += 1;
            }
        } else if s1 != 0 && s1 & 1 == 0 && stamp_seq(s1) > seq {
            // Already overwritten by a later lap.
            stats.lost += 1;
        } else if s1 & 1 == 1 && stamp_seq(s1) > seq {
            // A later lap is being written into it.
            stats.lost += 1;
        } else if cursor.stuck_polls >= patience {
            stats.lost += 1;
        } else {
            cursor.stuck_polls += 1;
            break;
        }
        cursor.next += 1;
        cursor.stuck_polls = 0;
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::{Api, Direction, Kind};
    use std::sync::atomic::AtomicBool;

    fn live() -> Box<Live> {
        // SAFETY: Live is all atomic integers (and arrays of structs of them), for which the
        // zero bit pattern is valid; it is also the state of a freshly created segment.
        unsafe { Box::new(std::mem::zeroed()) }
    }

    fn slots(n: usize) -> Vec<Slot> {
        (0..n)
            .map(|_| Slot {
                stamp: AtomicU64::new(0),
                words: Default::default(),
            })
            .collect()
    }

    fn rec(tid: u32, n: u64) -> Record {
        Record {
            kind: Kind::StreamSync,
            api: Api::CudaStreamSynchronize,
            direction: Direction::None,
            flags: 0,
            device: 0,
            start_ns: n,
            duration_ns: n * 3,
            bytes: n * 7,
            stream: 5,
            tid,
            site: 0,
            result: 0,
            polls: 0,
        }
    }

    fn drain(live: &Live, s: &[Slot], c: &mut Cursor) -> (Vec<Record>, PollStats) {
        let mut out = Vec::new();
        let st = poll(live, s, c, usize::MAX, 0, |r| out.push(r.unwrap()));
        (out, st)
    }

    #[test]
    fn any_stamp_and_head_a_corrupt_segment_holds_are_counted_not_a_panic() {
        let (l, s) = (live(), slots(8));
        for (i, stamp) in [1u64, 3, u64::MAX, u64::MAX - 1, 2].into_iter().enumerate() {
            s[i].stamp.store(stamp, Ordering::Relaxed);
        }
        for head in [1, 5, 8, u64::MAX - 1, u64::MAX] {
            l.write_seq.store(head, Ordering::Relaxed);
            let mut c = Cursor::at(head.saturating_sub(8));
            let st = poll(&l, &s, &mut c, usize::MAX, 0, |_| {});
            assert_eq!(
                st.delivered + st.lost + st.corrupt,
                head.min(8),
                "head {head}"
            );
            assert_eq!(c.next, head);
        }
    }

    #[test]
    fn reader_sees_records_in_order() {
        let (l, s) = (live(), slots(8));
        for i in 0..5 {
            assert!(push(&l, &s, &rec(1, i)));
        }
        let mut c = Cursor::from_start();
        let (out, st) = drain(&l, &s, &mut c);
        assert_eq!(
            st,
            PollStats {
                delivered: 5,
                lost: 0,
                corrupt: 0
            }
        );
        assert_eq!(
            out.iter().map(|r| r.start_ns).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4]
        );
        assert_eq!(drain(&l, &s, &mut c).1.delivered, 0);
    }

    #[test]
    fn reader_that_falls_behind_learns_exactly_how_many_it_lost() {
        let (l, s) = (live(), slots(8));
        for i in 0..30 {
            push(&l, &s, &rec(1, i));
        }
        let mut c = Cursor::from_start();
        let (out, st) = drain(&l, &s, &mut c);
        assert_eq!(st.lost, 22);
        assert_eq!(out.len(), 8);
        assert_eq!(out[0].start_ns, 22);
        // A second reader that was up to date earlier is unaffected by the first.
        let mut c2 = Cursor::at(29);
        assert_eq!(drain(&l, &s, &mut c2).0.len(), 1);
    }

    #[test]
    fn claimed_but_unfinished_slot_waits_for_patience_then_counts_lost() {
        let (l, s) = (live(), slots(8));
        push(&l, &s, &rec(1, 0));
        // Simulate a writer that claimed seq 1 and stalled.
        let seq = l.write_seq.fetch_add(1, Ordering::Relaxed);
        s[seq as usize].stamp.store(writing(seq), Ordering::Relaxed);
        push(&l, &s, &rec(1, 2));
        let mut c = Cursor::from_start();
        let mut n = 0;
        let st = poll(&l, &s, &mut c, usize::MAX, 2, |_| n += 1);
        assert_eq!((st.delivered, st.lost), (1, 0));
        let st = poll(&l, &s, &mut c, usize::MAX, 2, |_| n += 1);
        assert_eq!((st.delivered, st.lost), (0, 0));
        let st = poll(&l, &s, &mut c, usize::MAX, 2, |_| n += 1);
        assert_eq!((st.delivered, st.lost), (1, 1));
        assert_eq!(n, 2);
    }

    #[test]
    fn writer_does_not_clobber_a_slot_held_by_a_stalled_writer() {
        let (l, s) = (live(), slots(4));
        let seq = l.write_seq.fetch_add(1, Ordering::Relaxed);
        s[0].stamp.store(writing(seq), Ordering::Relaxed);
        for i in 1..4 {
            assert!(push(&l, &s, &rec(1, i)));
        }
        // seq 4 maps to slot 0, still held: dropped, not overwritten.
        assert!(!push(&l, &s, &rec(1, 4)));
        assert_eq!(l.events_dropped.load(Ordering::Relaxed), 1);
        assert_eq!(s[0].stamp.load(Ordering::Relaxed), writing(0));
    }

    proptest::proptest! {
        /// Against a model: any interleaving of pushes and polls with any budgets, on any
        /// ring size, delivers each record at most once, in order and intact, loses only
        /// what was overwritten, and accounts for every sequence number.
        #[test]
        fn interleaved_pushes_and_polls_match_the_model(
            cap_log in 2u32..6,
            ops in proptest::collection::vec((proptest::bool::ANY, 0usize..40), 1..60),
        ) {
            let cap = 1u64 << cap_log;
            let (l, s) = (live(), slots(cap as usize));
            let mut c = Cursor::from_start();
            let (mut pushed, mut lost) = (0u64, 0u64);
            let mut got: Vec<u64> = Vec::new();
            for (is_push, n) in ops {
                if is_push {
                    for _ in 0..n {
                        proptest::prop_assert!(push(&l, &s, &rec(1, pushed)));
                        pushed += 1;
                    }
                } else {
                    let before = c.next;
                    let first_alive = pushed.saturating_sub(cap);
                    let budget = n.max(1);
                    let mut batch = Vec::new();
                    let st = poll(&l, &s, &mut c, budget, 0, |r| batch.push(r.unwrap()));
                    // Lost exactly the overwritten ones, then delivered the next ones in order.
                    proptest::prop_assert_eq!(st.lost, first_alive.saturating_sub(before));
                    let start = before.max(first_alive);
                    let want: Vec<u64> = (start..pushed).take(budget).collect();
                    let seen: Vec<u64> = batch.iter().map(|r| r.start_ns).collect();
                    proptest::prop_assert_eq!(&seen, &want);
                    for r in &batch {
                        proptest::prop_assert_eq!(*r, rec(1, r.start_ns));
                    }
                    lost += st.lost;
                    got.extend(seen);
                }
            }
            let st = poll(&l, &s, &mut c, usize::MAX, 0, |r| got.push(r.unwrap().start_ns));
            lost += st.lost;
            proptest::prop_assert_eq!(got.len() as u64 + lost, pushed);
            proptest::prop_assert!(got.windows(2).all(|w| w[0] < w[1]));
            proptest::prop_assert_eq!(l.events_dropped.load(Ordering::Relaxed), 0);
        }
    }

    #[test]
    fn concurrent_writers_and_readers_account_for_every_sequence() {
        const WRITERS: u64 = 4;
        const PER: u64 = 50_000;
        let l = live();
        let s = slots(256);
        let stop = AtomicBool::new(false);
        std::thread::scope(|sc| {
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    sc.spawn(|| {
                        let mut c = Cursor::from_start();
                        let mut last = vec![None::<u64>; WRITERS as usize];
                        let (mut got, mut lost) = (0u64, 0u64);
                        loop {
                            let done_writing = stop.load(Ordering::Acquire);
                            let st = poll(&l, &s, &mut c, 1000, 1000, |r| {
                                let r = r.expect("no torn record");
                                // Each writer's own records arrive in its order, untorn.
                                assert_eq!(r.duration_ns, r.start_ns * 3);
                                assert_eq!(r.bytes, r.start_ns * 7);
                                let prev = &mut last[r.tid as usize];
                                assert!(prev.is_none_or(|p| p < r.start_ns));
                                *prev = Some(r.start_ns);
                            });
                            got += st.delivered;
                            lost += st.lost;
                            if done_writing && c.next == l.write_seq.load(Ordering::Acquire) {
                                break;
                            }
                        }
                        (got, lost)
                    })
                })
                .collect();
            let writers: Vec<_> = (0..WRITERS)
                .map(|t| {
                    let (l, s) = (&l, &s);
                    sc.spawn(move || {
                        let mut written = 0u64;
                        for i in 0..PER {
                            written += u64::from(push(l, s, &rec(t as u32, i)));
                        }
                        written
                    })
                })
                .collect();
            let written: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
            stop.store(true, Ordering::Release);
            let total = l.write_seq.load(Ordering::Relaxed);
            assert_eq!(total, WRITERS * PER);
            let dropped = l.events_dropped.load(Ordering::Relaxed);
            assert_eq!(written + dropped, total);
            assert_eq!(l.written(), written);
            for r in readers {
                let (got, lost) = r.join().unwrap();
                assert_eq!(
                    got + lost,
                    total,
                    "every sequence delivered or counted lost"
                );
                assert!(lost >= dropped);
            }
        });
    }
}
