//! An open-addressing hash index from u64 keys to u32 ids whose keys live in
//! the caller's own arrays: 4 bytes per bucket and no per-entry allocation.
//! Used for (volume, page) -> slot and (volume, group) -> group lookups in O(1).
//!
//! Linear probing over a table of any length (bucket = fastrange of a mixed
//! hash), backward-shift deletion (no tombstones). The caller supplies
//! `key_of(id)` on every call; the index never stores keys.

const EMPTY: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub struct KeyIndex {
    table: Vec<u32>,
    len: usize,
    /// Grow when `len` would exceed this; `usize::MAX` for fixed-size tables.
    grow_at: usize,
    growable: bool,
}

#[inline]
fn mix(key: u64) -> u64 {
    // splitmix64 finalizer: spreads sequential keys over the table.
    let mut z = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl KeyIndex {
    /// A table for up to `entries_max` entries at a load of at most 0.8; never grows.
    pub fn fixed(entries_max: usize) -> KeyIndex {
        let buckets = (entries_max + entries_max / 4).max(8);
        KeyIndex {
            table: vec![EMPTY; buckets],
            len: 0,
            grow_at: entries_max,
            growable: false,
        }
    }

    /// A table that starts for `entries_hint` entries and doubles at a load of 0.75.
    pub fn growable(entries_hint: usize) -> KeyIndex {
        let buckets = (entries_hint + entries_hint / 3).max(8);
        KeyIndex {
            table: vec![EMPTY; buckets],
            len: 0,
            grow_at: buckets * 3 / 4,
            growable: true,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn heap_bytes(&self) -> usize {
        self.table.capacity() * 4
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        ((mix(key) as u128 * self.table.len() as u128) >> 64) as usize
    }

    #[inline]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.table.len() {
            0
        } else {
            i + 1
        }
    }

    pub fn get(&self, key: u64, key_of: impl Fn(u32) -> u64) -> Option<u32> {
        let mut i = self.home(key);
        loop {
            let id = self.table[i];
            if id == EMPTY {
                return None;
            }
            if key_of(id) == key {
                return Some(id);
            }
            i = self.next(i);
        }
    }

    /// Insert `id`, whose key is `key_of(id)`; the key must not be present.
    pub fn insert(&mut self, id: u32, key_of: impl Fn(u32) -> u64) {
        assert!(id != EMPTY);
        if self.len >= self.grow_at {
            assert!(self.growable, "fixed KeyIndex over its sized capacity");
            self.grow(&key_of);
        }
        let key = key_of(id);
        let mut i = self.home(key);
        while self.table[i] != EMPTY {
            debug_assert!(key_of(self.table[i]) != key, "duplicate key in KeyIndex");
            i = self.next(i);
        }
        self.table[i] = id;
        self.len += 1;
    }

    /// Point `key`'s entry, which holds `old_id`, at `new_id` instead: the
    /// same key keeps its bucket, so nothing moves and no key is read.
    pub fn replace(&mut self, key: u64, old_id: u32, new_id: u32) {
        assert!(new_id != EMPTY);
        let mut i = self.home(key);
        loop {
            let id = self.table[i];
            assert!(id != EMPTY, "replace of an id that is not in the index");
            if id == old_id {
                self.table[i] = new_id;
                return;
            }
            i = self.next(i);
        }
    }

    /// Remove the entry for `key`; returns its id.
    pub fn remove(&mut self, key: u64, key_of: impl Fn(u32) -> u64) -> Option<u32> {
        let mut i = self.home(key);
        loop {
            let id = self.table[i];
            if id == EMPTY {
                return None;
            }
            if key_of(id) == key {
                break;
            }
            i = self.next(i);
        }
        let removed = self.table[i];
        // Backward-shift: move later members of the probe run into the hole
        // when their home position allows it.
        let mut hole = i;
        let mut j = self.next(i);
        let n = self.table.len();
        loop {
            let id = self.table[j];
            if id == EMPTY {
                break;
            }
            let home = self.home(key_of(id));
            // Distance from home to j and from home to hole, cyclically.
            let dist_j = (j + n - home) % n;
            let dist_hole = (hole + n - home) % n;
            if dist_hole <= dist_j {
                self.table[hole] = id;
                hole = j;
            }
            j = self.next(j);
        }
        self.table[hole] = EMPTY;
        self.len -= 1;
        Some(removed)
    }

    fn grow(&mut self, key_of: &impl Fn(u32) -> u64) {
        let old = std::mem::take(&mut self.table);
        self.table = vec![EMPTY; old.len() * 2];
        self.grow_at = self.table.len() * 3 / 4;
        for id in old.into_iter().filter(|&id| id != EMPTY) {
            let mut i = self.home(key_of(id));
            while self.table[i] != EMPTY {
                i = self.next(i);
            }
            self.table[i] = id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        #[test]
        fn matches_hashmap(ops in proptest::collection::vec((0u8..4, 0u64..64), 1..400), growable: bool) {
            // ids 0..128 carry key = (id % 64) * 7919 (so keys collide in small tables).
            let key_of = |id: u32| (id % 64) as u64 * 7919;
            let mut idx = if growable { KeyIndex::growable(4) } else { KeyIndex::fixed(64) };
            let mut model: HashMap<u64, u32> = HashMap::new();
            for (op, id) in ops {
                let id = id as u32;
                let key = key_of(id);
                match op {
                    0 => { model.entry(key).or_insert_with(|| { idx.insert(id, key_of); id }); }
                    3 => {
                        // Replace an id by another of the same key (ids id and id + 64 share keys here).
                        if let Some(&old) = model.get(&key) {
                            let new = if old < 64 { old + 64 } else { old - 64 };
                            idx.replace(key, old, new);
                            model.insert(key, new);
                        }
                    }
                    1 => prop_assert_eq!(idx.remove(key, key_of), model.remove(&key)),
                    _ => prop_assert_eq!(idx.get(key, key_of), model.get(&key).copied()),
                }
                prop_assert_eq!(idx.len(), model.len());
            }
            for id in 0..64u32 {
                prop_assert_eq!(idx.get(key_of(id), key_of), model.get(&key_of(id)).copied());
            }
        }
    }
}
