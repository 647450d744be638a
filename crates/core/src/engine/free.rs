//! The pool of free slots: one bit per slot and one per 64 of them (a word
//! with any free slot). A multi-page write takes a run of consecutive free
//! slots, found *next fit* from a cursor that moves on with every
//! allocation (`pop_run`), so the driver writes its pages to the cache
//! device in one I/O instead of one per page. A single slot comes from the
//! most recently freed ones first (a short stack, whose slot metadata is
//! still in the CPU cache), so that single-page writes reuse the holes they
//! make and leave the runs to multi-page writes; else next fit. Costs about
//! 1/8 byte per slot. Never decides which slot a page *should* have; only
//! which free ones come next.

/// Candidate run starts `pop_run` tries before giving up (the caller then
/// takes slots one by one): bounds the search when free space is scattered.
const RUN_STARTS_MAX: u32 = 64;
/// Recently freed slots remembered for single-slot reuse.
const RECENT_MAX: usize = 64;

pub struct FreePool {
    /// Bit `s % 64` of word `s / 64`: slot `s` is free.
    bits: Vec<u64>,
    /// Bit `w % 64` of word `w / 64`: `bits[w]` has a free slot.
    words: Vec<u64>,
    slots: u32,
    len: u64,
    /// Where the next search starts.
    cursor: u32,
    /// Slots freed lately, newest last; an entry may have been taken by a
    /// run since (its bit then says so, and it is skipped).
    recent: Vec<u32>,
}

impl FreePool {
    /// A pool of `slots` slots, all free.
    pub fn new(slots: u32) -> FreePool {
        let n_bits = (slots as usize).div_ceil(64);
        let mut pool = FreePool {
            bits: vec![0; n_bits],
            words: vec![0; n_bits.div_ceil(64)],
            slots,
            len: 0,
            cursor: 0,
            recent: Vec::with_capacity(RECENT_MAX),
        };
        for s in 0..slots {
            pool.push(s);
        }
        pool.recent.clear();
        pool
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_free(&self, s: u32) -> bool {
        self.bits[(s / 64) as usize] & (1 << (s % 64)) != 0
    }

    pub fn push(&mut self, s: u32) {
        debug_assert!(s < self.slots);
        debug_assert!(!self.is_free(s), "slot {s} freed twice");
        let w = (s / 64) as usize;
        self.bits[w] |= 1 << (s % 64);
        self.words[w / 64] |= 1 << (w % 64);
        self.len += 1;
        if self.recent.len() < RECENT_MAX {
            self.recent.push(s);
        }
    }

    /// Take slot `s` out of the pool, if it is there (recovery).
    pub fn take(&mut self, s: u32) {
        if self.is_free(s) {
            self.clear(s);
        }
    }

    fn clear(&mut self, s: u32) {
        debug_assert!(self.is_free(s));
        let w = (s / 64) as usize;
        self.bits[w] &= !(1 << (s % 64));
        if self.bits[w] == 0 {
            self.words[w / 64] &= !(1 << (w % 64));
        }
        self.len -= 1;
    }

    fn advance_to(&mut self, s: u32) {
        self.cursor = if s >= self.slots { 0 } else { s };
    }

    /// A free slot: the most recently freed one still free, else the next
    /// from the cursor, wrapping.
    pub fn pop(&mut self) -> Option<u32> {
        while let Some(s) = self.recent.pop() {
            if self.is_free(s) {
                self.clear(s);
                return Some(s);
            }
        }
        let s = self
            .first_from(self.cursor)
            .or_else(|| self.first_from(0))?;
        self.clear(s);
        self.advance_to(s + 1);
        Some(s)
    }

    /// `n` consecutive free slots, the first at or after the cursor where
    /// such a run starts (wrapping once), or None if the first
    /// `RUN_STARTS_MAX` free runs tried are all shorter. Returns the first.
    pub fn pop_run(&mut self, n: u32) -> Option<u32> {
        debug_assert!(n > 0);
        if n as u64 > self.len {
            return None;
        }
        let (origin, mut from, mut wrapped) = (self.cursor, self.cursor, false);
        for _ in 0..RUN_STARTS_MAX {
            let Some(start) = self.first_from(from) else {
                if wrapped || origin == 0 {
                    return None;
                }
                (from, wrapped) = (0, true);
                continue;
            };
            if wrapped && start >= origin {
                return None;
            }
            let end = self.free_run_end(start, n);
            if end - start == n {
                for s in start..end {
                    self.clear(s);
                }
                self.advance_to(end);
                debug_assert!((start..end).all(|s| !self.is_free(s)));
                return Some(start);
            }
            from = end + 1; // `end` is used, or the last slot
        }
        None
    }

    /// The end of the free run from free slot `start`, at most `start + n`.
    fn free_run_end(&self, start: u32, n: u32) -> u32 {
        let limit = start.saturating_add(n).min(self.slots);
        let mut s = start;
        while s < limit {
            let shift = s % 64;
            let ones = (!(self.bits[(s / 64) as usize] >> shift)).trailing_zeros();
            let ones = ones.min(64 - shift);
            s += ones;
            if ones < 64 - shift {
                break; // a used slot inside this word
            }
        }
        s.min(limit)
    }

    /// The first free slot at or after `from`, below the end.
    fn first_from(&self, from: u32) -> Option<u32> {
        if from >= self.slots {
            return None;
        }
        let w = (from / 64) as usize;
        let here = self.bits[w] & (!0u64 << (from % 64));
        if here != 0 {
            return Some(w as u32 * 64 + here.trailing_zeros());
        }
        let next = w + 1;
        let mut sw = next / 64;
        if sw >= self.words.len() {
            return None;
        }
        let mut sbits = self.words[sw] & (!0u64 << (next % 64));
        loop {
            if sbits != 0 {
                let w2 = sw * 64 + sbits.trailing_zeros() as usize;
                return Some(w2 as u32 * 64 + self.bits[w2].trailing_zeros());
            }
            sw += 1;
            if sw >= self.words.len() {
                return None;
            }
            sbits = self.words[sw];
        }
    }

    pub fn heap_bytes(&self) -> usize {
        (self.bits.capacity() + self.words.capacity()) * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn pops_next_fit_and_wraps() {
        let mut p = FreePool::new(200);
        assert_eq!((p.pop(), p.pop(), p.len()), (Some(0), Some(1), 198));
        p.push(0);
        // A run goes on from the cursor (2..200 is 198 long); slot 0 is
        // found after the wrap, but 0..2 is no run of 199.
        assert_eq!(p.pop_run(199), None);
        assert_eq!(p.pop_run(198), Some(2));
        assert_eq!(p.pop(), Some(0));
        assert_eq!((p.pop(), p.len()), (None, 0));
    }

    #[test]
    fn a_run_skips_holes_and_wraps_to_one_before_the_cursor() {
        let mut p = FreePool::new(300);
        let taken: Vec<u32> = (0..300).map(|_| p.pop().unwrap()).collect();
        assert_eq!(taken, (0..300).collect::<Vec<_>>());
        for s in [5, 6, 7, 100, 101, 102, 103, 104, 250] {
            p.push(s);
        }
        // Cursor at 0 (wrapped): the first run of 4 starts at 100.
        assert_eq!(p.pop_run(4), Some(100));
        assert_eq!(p.pop_run(4), None);
        assert_eq!(p.pop_run(3), Some(5));
        // Single slots: the most recently freed still free first.
        assert_eq!((p.pop(), p.pop(), p.pop()), (Some(250), Some(104), None));
    }

    #[test]
    fn single_slots_reuse_the_most_recently_freed_first() {
        let mut p = FreePool::new(200);
        let taken: Vec<u32> = (0..10).map(|_| p.pop().unwrap()).collect();
        assert_eq!(taken, (0..10).collect::<Vec<_>>());
        p.push(3);
        p.push(7);
        assert_eq!((p.pop(), p.pop()), (Some(7), Some(3)));
        // Then next fit again.
        assert_eq!(p.pop(), Some(10));
    }

    #[test]
    fn a_recently_freed_slot_a_run_took_is_skipped() {
        let mut p = FreePool::new(8);
        while p.pop().is_some() {}
        p.push(2);
        p.push(3);
        assert_eq!(p.pop_run(2), Some(2));
        assert_eq!((p.pop(), p.len()), (None, 0));
    }

    proptest! {
        /// Against a set: every slot handed out was free, runs are
        /// consecutive, counts agree, and a run is found whenever one
        /// exists within the first free runs (checked with one run start).
        #[test]
        fn matches_a_set(ops in proptest::collection::vec((0u8..3, 0u32..120, 1u32..9), 1..400)) {
            let slots = 120; // at most 60 free runs: fewer than RUN_STARTS_MAX
            let mut p = FreePool::new(slots);
            let mut free: BTreeSet<u32> = (0..slots).collect();
            for (op, s, n) in ops {
                match op {
                    0 => {
                        let got = p.pop();
                        prop_assert_eq!(got.is_some(), !free.is_empty());
                        if let Some(g) = got {
                            prop_assert!(free.remove(&g));
                        }
                    }
                    1 => {
                        if !free.contains(&s) {
                            p.push(s);
                            free.insert(s);
                        }
                    }
                    _ => {
                        if let Some(first) = p.pop_run(n) {
                            for x in first..first + n {
                                prop_assert!(free.remove(&x), "slot {} of the run was not free", x);
                            }
                        } else {
                            let exists = (0..=slots.saturating_sub(n))
                                .any(|a| (a..a + n).all(|x| free.contains(&x)));
                            // Few free runs here: the bounded search sees them all.
                            prop_assert!(!exists, "a run of {} exists but was not found", n);
                        }
                    }
                }
                prop_assert_eq!(p.len(), free.len() as u64);
                for x in 0..slots {
                    prop_assert_eq!(p.is_free(x), free.contains(&x));
                }
            }
        }
    }
}
