//! An open-addressing hash index from u64 keys to u32 ids whose keys live in
//! the caller's own arrays: 4 bytes per bucket and no per-entry allocation.
//! Used for (volume, page) -> slot and (volume, group) -> group lookups in O(1).
//!
//! Linear probing over a table of any length (bucket = fastrange of a mixed
//! hash), backward-shift deletion (no tombstones). The caller supplies
//! `key_of(id)` on every call; the index never stores keys.

const EMPTY: u32 = u32::MAX;
/// At most this many bits of an entry hold its distance from its home bucket.
const DIST_BITS_MAX: u32 = 8;

/// A bucket holds `(distance << id_bits) | id`, or `EMPTY`. The distance of an
/// entry from its home bucket lives in the id's unused high bits, so a delete
/// can shift later entries back without reading their keys (each a likely
/// cache miss in the caller's arrays). A distance at or above `dist_max` is
/// not stored exactly and is computed from the key; with no spare bits
/// (`dist_max == 0`, growable tables) it always is.
#[derive(Debug, Clone)]
pub struct KeyIndex {
    table: Vec<u32>,
    len: usize,
    /// Grow when `len` would exceed this; `usize::MAX` for fixed-size tables.
    grow_at: usize,
    growable: bool,
    id_bits: u32,
    id_mask: u32,
    dist_max: u32,
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
    /// A table for up to `entries_max` entries with ids below `entries_max`,
    /// at a load of at most 0.8; never grows.
    pub fn fixed(entries_max: usize) -> KeyIndex {
        KeyIndex::fixed_with(entries_max, entries_max, DIST_BITS_MAX)
    }

    /// `fixed` for ids below `id_limit`, with at most `dist_bits` bits of
    /// stored distance (tests use few bits, to exercise distances that do not
    /// fit, and more ids than entries).
    fn fixed_with(entries_max: usize, id_limit: usize, dist_bits: u32) -> KeyIndex {
        let buckets = (entries_max + entries_max / 4).max(8);
        // 2^id_bits > id_limit: an id field of all ones is never a valid id,
        // so no entry equals EMPTY.
        let id_bits = (64 - (id_limit as u64).leading_zeros()).clamp(1, 32);
        let dist_bits = (32 - id_bits).min(dist_bits);
        KeyIndex {
            table: vec![EMPTY; buckets],
            len: 0,
            grow_at: entries_max,
            growable: false,
            id_bits,
            id_mask: if id_bits == 32 {
                u32::MAX
            } else {
                (1 << id_bits) - 1
            },
            dist_max: (1u32 << dist_bits) - 1,
        }
    }

    /// A table that starts for `entries_hint` entries and doubles at a load of
    /// 0.75. Ids may be anything but `u32::MAX`; no distances are stored.
    pub fn growable(entries_hint: usize) -> KeyIndex {
        let buckets = (entries_hint + entries_hint / 3).max(8);
        KeyIndex {
            table: vec![EMPTY; buckets],
            len: 0,
            grow_at: buckets * 3 / 4,
            growable: true,
            id_bits: 32,
            id_mask: u32::MAX,
            dist_max: 0,
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

    #[inline]
    fn entry(&self, id: u32, dist: usize) -> u32 {
        if self.dist_max == 0 {
            return id;
        }
        let dist = (dist as u32).min(self.dist_max);
        (dist << self.id_bits) | id
    }

    /// The distance of the entry in bucket `i` from its home bucket.
    #[inline]
    fn dist_at(&self, i: usize, key_of: &impl Fn(u32) -> u64) -> usize {
        let e = self.table[i];
        if self.dist_max > 0 {
            let stored = e >> self.id_bits;
            if stored < self.dist_max {
                return stored as usize;
            }
        }
        let n = self.table.len();
        (i + n - self.home(key_of(e & self.id_mask))) % n
    }

    pub fn get(&self, key: u64, key_of: impl Fn(u32) -> u64) -> Option<u32> {
        self.find(key, &key_of)
            .map(|i| self.table[i] & self.id_mask)
    }

    /// Touch the home bucket of `key` and the key of the entry there, so a
    /// `get` soon after finds them in the CPU's cache. Calls for several
    /// keys in a row overlap their cache misses (nothing depends on the
    /// loads), where lookups one after the other would wait for each.
    #[inline]
    pub fn prefetch(&self, key: u64, key_of: impl Fn(u32) -> u64) {
        let e = self.table[self.home(key)];
        if e != EMPTY {
            std::hint::black_box(key_of(e & self.id_mask));
        }
    }

    /// Ask the CPU to fetch the cache line of `key`'s home bucket, without
    /// waiting for it (`prefetch` waits for the bucket, to read the entry
    /// there): for a run of inserts whose keys are known ahead.
    #[inline]
    pub fn prefetch_home(&self, key: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            let p = self.table[self.home(key)..].as_ptr() as *const i8;
            // SAFETY: a prefetch has no effect on memory; `p` points into
            // the table (the slice index above checked it).
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = key;
    }

    /// The bucket holding `key`'s entry. An entry whose stored distance
    /// says its home is another bucket is passed without reading its key
    /// (each key read is a likely cache miss in the caller's arrays).
    #[inline]
    fn find(&self, key: u64, key_of: &impl Fn(u32) -> u64) -> Option<usize> {
        let mut i = self.home(key);
        let mut dist = 0u32;
        loop {
            let e = self.table[i];
            if e == EMPTY {
                return None;
            }
            // (dist_max > 0 leaves id_bits < 32, so the shift is in range.)
            let elsewhere = self.dist_max > 0 && {
                let stored = e >> self.id_bits;
                stored < self.dist_max && stored != dist
            };
            if !elsewhere && key_of(e & self.id_mask) == key {
                return Some(i);
            }
            i = self.next(i);
            dist = dist.saturating_add(1);
        }
    }

    /// Insert `id`, whose key is `key_of(id)`; the key must not be present.
    pub fn insert(&mut self, id: u32, key_of: impl Fn(u32) -> u64) {
        assert!(
            id != EMPTY && (self.growable || id < self.id_mask),
            "id {id} out of range"
        );
        if self.len >= self.grow_at {
            assert!(self.growable, "fixed KeyIndex over its sized capacity");
            self.grow(&key_of);
        }
        let key = key_of(id);
        let mut i = self.home(key);
        let mut dist = 0;
        while self.table[i] != EMPTY {
            debug_assert!(
                key_of(self.table[i] & self.id_mask) != key,
                "duplicate key in KeyIndex"
            );
            i = self.next(i);
            dist += 1;
        }
        self.table[i] = self.entry(id, dist);
        self.len += 1;
    }

    /// Point `key`'s entry, which holds `old_id`, at `new_id` instead: the
    /// same key keeps its bucket, so nothing moves and no key is read.
    pub fn replace(&mut self, key: u64, old_id: u32, new_id: u32) {
        assert!(new_id != EMPTY && (self.growable || new_id < self.id_mask));
        let mut i = self.home(key);
        loop {
            let e = self.table[i];
            assert!(e != EMPTY, "replace of an id that is not in the index");
            if e & self.id_mask == old_id {
                self.table[i] = (e & !self.id_mask) | new_id;
                return;
            }
            i = self.next(i);
        }
    }

    /// Remove the entry for `key`; returns its id.
    pub fn remove(&mut self, key: u64, key_of: impl Fn(u32) -> u64) -> Option<u32> {
        let i = self.find(key, &key_of)?;
        let removed = self.table[i] & self.id_mask;
        // Backward-shift: move later members of the probe run into the hole
        // when their home position allows it (their distance reaches it).
        let mut hole = i;
        let mut j = self.next(i);
        let n = self.table.len();
        loop {
            let e = self.table[j];
            if e == EMPTY {
                break;
            }
            let dist_j = self.dist_at(j, &key_of);
            // The hole is `back` buckets before j, cyclically.
            let back = (j + n - hole) % n;
            if back <= dist_j {
                self.table[hole] = self.entry(e & self.id_mask, dist_j - back);
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
        for e in old.into_iter().filter(|&e| e != EMPTY) {
            let id = e & self.id_mask;
            let mut i = self.home(key_of(id));
            let mut dist = 0;
            while self.table[i] != EMPTY {
                i = self.next(i);
                dist += 1;
            }
            self.table[i] = self.entry(id, dist);
        }
    }

    /// Test aid: every entry's stored distance (where stored exactly) is its
    /// true distance from home, and every entry is reachable from its home.
    #[cfg(test)]
    fn check(&self, key_of: impl Fn(u32) -> u64) {
        let n = self.table.len();
        for i in 0..n {
            let e = self.table[i];
            if e == EMPTY {
                continue;
            }
            let true_dist = (i + n - self.home(key_of(e & self.id_mask))) % n;
            assert_eq!(self.dist_at(i, &key_of), true_dist, "bucket {i}");
            for k in 0..true_dist {
                assert_ne!(
                    self.table[(i + n - k - 1) % n],
                    EMPTY,
                    "gap before bucket {i}"
                );
            }
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
        fn matches_hashmap(ops in proptest::collection::vec((0u8..4, 0u64..64), 1..400), growable: bool, dist_bits in 0u32..=8) {
            // ids 0..128 carry key = (id % 64) * 7919 (so keys collide in small tables);
            // the fixed table fills to a load of 0.8, and with few distance bits
            // many distances do not fit and are computed from the key.
            let key_of = |id: u32| (id % 64) as u64 * 7919;
            let mut idx = if growable { KeyIndex::growable(4) } else { KeyIndex::fixed_with(64, 128, dist_bits) };
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
                idx.check(key_of);
            }
            for id in 0..64u32 {
                prop_assert_eq!(idx.get(key_of(id), key_of), model.get(&key_of(id)).copied());
            }
        }
    }
}
