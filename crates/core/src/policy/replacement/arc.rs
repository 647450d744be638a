//! ARC (Megiddo & Modha, FAST'03): LRU that adapts between recency and frequency.
//!
//! Exists because a scan flushes LRU and CLOCK, while ARC keeps pages seen
//! twice (T2) apart from pages seen once (T1) and moves the target size `p`
//! of T1 by learning from recently evicted keys (ghost lists B1, B2).
//!
//! Layout, all sized at construction (`c` = slots), nothing allocated later:
//! - resident pages, indexed by slot: `u32` links (T1 or T2), the page key
//!   (needed to become a ghost), and two bits;
//! - ghosts: an arena of `c` entries (key + `u32` links, B1, B2 or free) and an
//!   open-addressed `u32` index key -> ghost entry, linear probing, more than
//!   one third empty, deletion by backward shift (no tombstones).
//!
//! Semantics are the paper's (Fig. 4), with `p` a real number (`f64`) and
//! these generalizations for an engine that also `remove`s pages and evicts
//! without inserting (the paper's cache is always full once it fills):
//! - REPLACE takes from T1 when T2 is empty and from T2 when T1 is empty;
//! - a new page inserted into a free slot first trims B1 if |T1|+|B1| >= c and
//!   then B2 (or B1) if the directory holds 2c keys, as case IV does;
//! - ghosts never exceed c: if a demotion finds the arena full it first drops
//!   the oldest ghost of the list it joins (of the other list if that is empty).
//!   With a full cache this never triggers (the paper bounds ghosts by c there).
//!
//! The miss path of the paper (adapt `p`, then REPLACE knowing whether the
//! incoming key was in B2) needs the incoming key before the victim is chosen:
//! the engine calls `evict_for(key)` and then `insert(slot, key)`. These
//! semantics equal libCacheSim's ARC exactly (checked by
//! `tests/oracle_libcachesim.rs`).

use super::Replacement;
use crate::policy::links::{Bits, Links, List, NIL};
use crate::types::{PageKey, SlotIndex};

pub struct Arc {
    slots_max: usize,
    /// Target size of T1, in pages: 0 <= p <= c.
    p: f64,

    resident_links: Links,
    resident_key: Vec<u64>,
    present: Bits,
    in_t2: Bits,
    t1: List,
    t2: List,

    ghost_links: Links,
    ghost_key: Vec<u64>,
    in_b2: Bits,
    b1: List,
    b2: List,
    ghost_free: List,
    /// Open-addressed: ghost entry index or NIL; length a power of two > c.
    ghost_index: Vec<u32>,
    ghost_index_shift: u32,

    /// `evict_for` already adapted `p` for this key and took it out of the
    /// ghosts: its `insert` goes to T2.
    promote_next: Option<PageKey>,
}

impl Arc {
    pub const NAME: &'static str = "arc";

    pub fn new(slots: usize) -> Arc {
        assert!(slots < NIL as usize, "slots must fit u32 indices");
        // > 1.5 c entries: at most 2/3 full, so probes stay short.
        let index_len = (slots + slots / 2 + 1).next_power_of_two().max(2);
        let mut ghost_links = Links::new(slots);
        let mut ghost_free = List::new();
        for entry in 0..slots {
            ghost_links.push_head(&mut ghost_free, entry as u32);
        }
        Arc {
            slots_max: slots,
            p: 0.0,
            resident_links: Links::new(slots),
            resident_key: vec![0; slots],
            present: Bits::new(slots),
            in_t2: Bits::new(slots),
            t1: List::new(),
            t2: List::new(),
            ghost_links,
            ghost_key: vec![0; slots],
            in_b2: Bits::new(slots),
            b1: List::new(),
            b2: List::new(),
            ghost_free,
            ghost_index: vec![NIL; index_len],
            ghost_index_shift: 64 - index_len.trailing_zeros(),
            promote_next: None,
        }
    }

    /// Current target size of T1 in pages (the paper's `p`).
    pub fn target_t1_pages(&self) -> f64 {
        self.p
    }

    /// Sizes of (T1, T2, B1, B2), for tests and stats.
    pub fn list_lens(&self) -> (usize, usize, usize, usize) {
        (self.t1.len(), self.t2.len(), self.b1.len(), self.b2.len())
    }

    fn directory_len(&self) -> usize {
        self.t1.len() + self.t2.len() + self.b1.len() + self.b2.len()
    }

    // ---- ghost index ----

    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.ghost_index_shift) as usize
    }

    fn index_mask(&self) -> usize {
        self.ghost_index.len() - 1
    }

    /// Position in `ghost_index` holding `key`'s ghost entry.
    fn ghost_position(&self, key: u64) -> Option<usize> {
        let mask = self.index_mask();
        let mut position = self.home(key);
        loop {
            let entry = self.ghost_index[position];
            if entry == NIL {
                return None;
            }
            if self.ghost_key[entry as usize] == key {
                return Some(position);
            }
            position = (position + 1) & mask;
        }
    }

    fn ghost_find(&self, key: PageKey) -> Option<u32> {
        self.ghost_position(key.0).map(|p| self.ghost_index[p])
    }

    fn index_insert(&mut self, entry: u32) {
        let mask = self.index_mask();
        let mut position = self.home(self.ghost_key[entry as usize]);
        while self.ghost_index[position] != NIL {
            position = (position + 1) & mask;
        }
        self.ghost_index[position] = entry;
    }

    fn index_delete(&mut self, key: u64) {
        let mask = self.index_mask();
        let Some(mut hole) = self.ghost_position(key) else {
            panic!("ghost key missing from index");
        };
        let mut probe = hole;
        loop {
            probe = (probe + 1) & mask;
            let entry = self.ghost_index[probe];
            if entry == NIL {
                break;
            }
            let home = self.home(self.ghost_key[entry as usize]);
            // Move back if the hole lies on its probe path (home..=probe).
            if probe.wrapping_sub(home) & mask >= probe.wrapping_sub(hole) & mask {
                self.ghost_index[hole] = entry;
                hole = probe;
            }
        }
        self.ghost_index[hole] = NIL;
    }

    // ---- ghost lists ----

    fn ghost_list(&mut self, b2: bool) -> &mut List {
        if b2 {
            &mut self.b2
        } else {
            &mut self.b1
        }
    }

    /// Forget ghost `entry` (a hit on it, or trimming).
    fn ghost_forget(&mut self, entry: u32) {
        let b2 = self.in_b2.get(entry);
        let mut list = *self.ghost_list(b2);
        self.ghost_links.unlink(&mut list, entry);
        *self.ghost_list(b2) = list;
        self.index_delete(self.ghost_key[entry as usize]);
        self.in_b2.set(entry, false);
        self.ghost_links.push_head(&mut self.ghost_free, entry);
    }

    fn ghost_drop_oldest(&mut self, b2: bool) {
        let tail = self.ghost_list(b2).tail();
        if let Some(entry) = tail {
            self.ghost_forget(entry);
        }
    }

    fn ghost_add(&mut self, key: u64, b2: bool) {
        debug_assert!(self.ghost_position(key).is_none(), "key already a ghost");
        if self.ghost_free.len() == 0 {
            let own_empty = self.ghost_list(b2).len() == 0;
            self.ghost_drop_oldest(b2 != own_empty);
        }
        let Some(entry) = self.ghost_links.pop_tail(&mut self.ghost_free) else {
            // Only with zero slots, where nothing is ever resident to demote.
            return;
        };
        self.ghost_key[entry as usize] = key;
        self.in_b2.set(entry, b2);
        let mut list = *self.ghost_list(b2);
        self.ghost_links.push_head(&mut list, entry);
        *self.ghost_list(b2) = list;
        self.index_insert(entry);
    }

    // ---- the paper's steps ----

    /// Cases II and III: a miss on a key found in B1 (`in_b2` false) or B2.
    fn adapt(&mut self, in_b2: bool) {
        let b1 = self.b1.len() as f64;
        let b2 = self.b2.len() as f64;
        if in_b2 {
            let delta = (b1 / b2).max(1.0);
            self.p = (self.p - delta).max(0.0);
        } else {
            let delta = (b2 / b1).max(1.0);
            self.p = (self.p + delta).min(self.slots_max as f64);
        }
    }

    /// REPLACE(x, p): demote the LRU page of T1 or T2 to its ghost list.
    fn replace(&mut self, incoming_in_b2: bool) -> Option<SlotIndex> {
        let t1 = self.t1.len();
        let t2 = self.t2.len();
        let t1_pages = t1 as f64;
        let from_t1 =
            (t1 > 0 && (t1_pages > self.p || (t1_pages == self.p && incoming_in_b2))) || t2 == 0;
        let victim = if from_t1 {
            self.resident_links.pop_tail(&mut self.t1)?
        } else {
            self.resident_links.pop_tail(&mut self.t2)?
        };
        self.leave(victim);
        self.ghost_add(self.resident_key[victim as usize], !from_t1);
        Some(SlotIndex(victim))
    }

    /// Clear the per-slot bits of a slot already unlinked from T1/T2.
    fn leave(&mut self, slot: u32) {
        debug_assert!(self.present.get(slot));
        self.present.set(slot, false);
        self.in_t2.set(slot, false);
    }

    /// Keep |T1|+|B1| <= c and the directory <= 2c before a new key joins T1
    /// in a free slot (no-op right after `evict_for` made room).
    fn trim_for_new_key(&mut self) {
        if self.t1.len() + self.b1.len() >= self.slots_max {
            self.ghost_drop_oldest(false);
        }
        if self.directory_len() >= 2 * self.slots_max {
            let b2_empty = self.b2.len() == 0;
            self.ghost_drop_oldest(!b2_empty);
        }
    }
}

impl Replacement for Arc {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn insert(&mut self, slot: SlotIndex, key: PageKey) {
        self.resident_links.assert_index(slot.0);
        assert!(!self.present.get(slot.0), "insert: slot already present");
        assert!(self.len() < self.slots_max, "insert: policy full");
        let to_t2 = if self.promote_next.take() == Some(key) {
            true
        } else if let Some(entry) = self.ghost_find(key) {
            self.adapt(self.in_b2.get(entry));
            self.ghost_forget(entry);
            true
        } else {
            self.trim_for_new_key();
            false
        };
        self.resident_key[slot.0 as usize] = key.0;
        self.present.set(slot.0, true);
        self.in_t2.set(slot.0, to_t2);
        if to_t2 {
            self.resident_links.push_head(&mut self.t2, slot.0);
        } else {
            self.resident_links.push_head(&mut self.t1, slot.0);
        }
        debug_assert!(self.t1.len() + self.b1.len() <= self.slots_max);
        debug_assert!(self.directory_len() <= 2 * self.slots_max);
    }

    fn hit(&mut self, slot: SlotIndex) {
        self.resident_links.assert_index(slot.0);
        assert!(self.present.get(slot.0), "hit: slot not present");
        if self.in_t2.get(slot.0) {
            self.resident_links.move_to_head(&mut self.t2, slot.0);
        } else {
            self.resident_links.unlink(&mut self.t1, slot.0);
            self.resident_links.push_head(&mut self.t2, slot.0);
            self.in_t2.set(slot.0, true);
        }
    }

    fn remove(&mut self, slot: SlotIndex) {
        self.resident_links.assert_index(slot.0);
        assert!(self.present.get(slot.0), "remove: slot not present");
        if self.in_t2.get(slot.0) {
            self.resident_links.unlink(&mut self.t2, slot.0);
        } else {
            self.resident_links.unlink(&mut self.t1, slot.0);
        }
        self.leave(slot.0);
    }

    fn evict(&mut self) -> Option<SlotIndex> {
        self.promote_next = None;
        self.replace(false)
    }

    fn evict_for(&mut self, incoming: PageKey) -> Option<SlotIndex> {
        self.promote_next = None;
        if let Some(entry) = self.ghost_find(incoming) {
            // Cases II and III.
            let in_b2 = self.in_b2.get(entry);
            self.adapt(in_b2);
            self.ghost_forget(entry);
            self.promote_next = Some(incoming);
            return self.replace(in_b2);
        }
        // Case IV.
        if self.t1.len() + self.b1.len() >= self.slots_max {
            if self.b1.len() > 0 {
                self.ghost_drop_oldest(false);
                self.replace(false)
            } else {
                // T1 alone fills the cache: drop its LRU page without history.
                let victim = self.resident_links.pop_tail(&mut self.t1)?;
                self.leave(victim);
                Some(SlotIndex(victim))
            }
        } else {
            if self.directory_len() >= 2 * self.slots_max {
                self.ghost_drop_oldest(true);
            }
            self.replace(false)
        }
    }

    fn len(&self) -> usize {
        self.t1.len() + self.t2.len()
    }

    fn metadata_bytes(&self) -> usize {
        let key_bytes = std::mem::size_of::<u64>();
        self.resident_links.heap_bytes()
            + self.resident_key.capacity() * key_bytes
            + self.present.heap_bytes()
            + self.in_t2.heap_bytes()
            + self.ghost_links.heap_bytes()
            + self.ghost_key.capacity() * key_bytes
            + self.in_b2.heap_bytes()
            + self.ghost_index.capacity() * std::mem::size_of::<u32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: u64) -> PageKey {
        PageKey(k)
    }

    #[test]
    fn ghost_hit_in_b1_promotes_to_t2_and_grows_p() {
        let mut arc = Arc::new(2);
        arc.insert(SlotIndex(0), key(10));
        arc.insert(SlotIndex(1), key(11));
        // Miss on 12: T1 = c, B1 empty: LRU of T1 (10) leaves without history.
        assert_eq!(arc.evict_for(key(12)), Some(SlotIndex(0)));
        arc.insert(SlotIndex(0), key(12));
        assert_eq!(arc.list_lens(), (2, 0, 0, 0));
        arc.hit(SlotIndex(1));
        assert_eq!(arc.list_lens(), (1, 1, 0, 0));
        // Miss on 13: |T1|+|B1| < c, REPLACE demotes 12 (T1 > p = 0) to B1.
        assert_eq!(arc.evict_for(key(13)), Some(SlotIndex(0)));
        arc.insert(SlotIndex(0), key(13));
        assert_eq!(arc.list_lens(), (1, 1, 1, 0));
        // Miss on 12 again: a B1 ghost hit; p grows to 1.
        let victim = arc.evict_for(key(12));
        assert_eq!(arc.target_t1_pages(), 1.0);
        assert_eq!(victim, Some(SlotIndex(1)), "T1 = p: REPLACE takes from T2");
        arc.insert(SlotIndex(1), key(12));
        assert_eq!(arc.list_lens(), (1, 1, 0, 1));
    }

    #[test]
    fn ghost_index_survives_churn() {
        use std::collections::HashMap;
        let slots = 37;
        let mut arc = Arc::new(slots);
        let mut slot_of: HashMap<u64, u32> = HashMap::new();
        let mut key_of = vec![None; slots];
        let mut state = 1u64;
        let mut ghost_hits = 0;
        for _ in 0..20_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = ((state >> 33) % 120) * 7919;
            if let Some(&slot) = slot_of.get(&k) {
                arc.hit(SlotIndex(slot));
                continue;
            }
            ghost_hits += usize::from(arc.ghost_find(key(k)).is_some());
            let slot = if slot_of.len() < slots {
                slot_of.len() as u32
            } else {
                let victim = arc.evict_for(key(k)).expect("full cache has a victim");
                let old: u64 = key_of[victim.0 as usize].expect("victim slot was used");
                slot_of.remove(&old);
                victim.0
            };
            arc.insert(SlotIndex(slot), key(k));
            slot_of.insert(k, slot);
            key_of[slot as usize] = Some(k);
            let (t1, t2, b1, b2) = arc.list_lens();
            assert_eq!(t1 + t2, slot_of.len());
            assert!(t1 + b1 <= slots);
            assert!(b1 + b2 <= slots);
        }
        assert!(ghost_hits > 1_000, "ghost hits {ghost_hits}");
        // Exactly the ghosts are findable, and no resident key is.
        let found = (0..120u64)
            .filter(|k| arc.ghost_find(key(k * 7919)).is_some())
            .count();
        let (_, _, b1, b2) = arc.list_lens();
        assert_eq!(found, b1 + b2);
        assert!(slot_of.keys().all(|&k| arc.ghost_find(key(k)).is_none()));
    }
}
