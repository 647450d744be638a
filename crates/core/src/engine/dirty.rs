//! The dirty set: the current slot of every dirty page, sorted by page key,
//! in leaves of 4-byte entries. A write group is a run of it, and the group's
//! state (candidate, recency bit, sequential) is in the high bits of each of
//! its entries, so a dirty group costs nothing beyond its pages' entries.
//!
//! Keys are not stored here: an entry names a slot, and the slot table holds
//! its page key (passed in as `keys`). A page's entry is repointed when a new
//! version of the page takes over (`replace`).

use crate::types::PAGE_INDEX_MAX;
use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Unbounded};

/// The group is in the destage order's candidate set.
pub const E_CANDIDATE: u32 = 1 << 31;
/// WOW's recency bit of the group.
pub const E_RECENT: u32 = 1 << 30;
/// The latest write to the group was sequential.
pub const E_SEQUENTIAL: u32 = 1 << 29;
const FLAGS: u32 = E_CANDIDATE | E_RECENT | E_SEQUENTIAL;
/// Slot indices fit below the flag bits.
pub const SLOTS_MAX: u64 = 1 << 29;
const ID: u32 = (1 << 29) - 1;

/// Entries per leaf: a leaf is 256 bytes.
const LEAF_CAP: usize = 63;

struct Leaf {
    len: u32,
    e: [u32; LEAF_CAP],
}

impl Leaf {
    fn new() -> Box<Leaf> {
        Box::new(Leaf {
            len: 0,
            e: [0; LEAF_CAP],
        })
    }
    fn entries(&self) -> &[u32] {
        &self.e[..self.len as usize]
    }
    fn insert_at(&mut self, at: usize, entry: u32) {
        let n = self.len as usize;
        debug_assert!(n < LEAF_CAP);
        self.e.copy_within(at..n, at + 1);
        self.e[at] = entry;
        self.len += 1;
    }
    fn remove_at(&mut self, at: usize) -> u32 {
        let n = self.len as usize;
        let entry = self.e[at];
        self.e.copy_within(at + 1..n, at);
        self.len -= 1;
        entry
    }
}

fn slot_of(entry: u32) -> usize {
    (entry & ID) as usize
}

pub struct DirtySet {
    /// Leaves by the key of their first entry.
    leaves: BTreeMap<u64, Box<Leaf>>,
    group_pages: u64,
    pages: usize,
    groups: usize,
}

impl DirtySet {
    pub fn new(group_pages: u32) -> DirtySet {
        DirtySet {
            leaves: BTreeMap::new(),
            group_pages: group_pages as u64,
            pages: 0,
            groups: 0,
        }
    }

    /// Dirty pages.
    pub fn pages(&self) -> usize {
        self.pages
    }
    /// Write groups with dirty pages.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// The group key (volume, group number) of a page key.
    pub fn group_of(&self, key: u64) -> u64 {
        (key & !PAGE_INDEX_MAX) | ((key & PAGE_INDEX_MAX) / self.group_pages)
    }
    /// The page key of a group's first page.
    fn first_key(&self, gkey: u64) -> u64 {
        (gkey & !PAGE_INDEX_MAX) | ((gkey & PAGE_INDEX_MAX) * self.group_pages)
    }

    /// The leaf where a search for `key` starts: the last one whose first key
    /// is at most `key`, or the first leaf.
    fn start_leaf(&self, key: u64) -> Option<u64> {
        self.leaves
            .range(..=key)
            .next_back()
            .or_else(|| self.leaves.iter().next())
            .map(|(&k, _)| k)
    }

    /// Visit the entries from the first whose key is at least `from`, in key
    /// order, while `f` returns true.
    fn scan(&self, keys: &[u64], from: u64, mut f: impl FnMut(u32) -> bool) {
        let Some(start) = self.start_leaf(from) else {
            return;
        };
        let mut first = true;
        for leaf in self.leaves.range(start..).map(|(_, l)| l) {
            let es = leaf.entries();
            let at = if std::mem::take(&mut first) {
                es.partition_point(|&e| keys[slot_of(e)] < from)
            } else {
                0
            };
            for &e in &es[at..] {
                if !f(e) {
                    return;
                }
            }
        }
    }

    /// `scan`, with the entries open to change (flag bits only).
    fn scan_mut(&mut self, keys: &[u64], from: u64, mut f: impl FnMut(&mut u32) -> bool) {
        let Some(start) = self.start_leaf(from) else {
            return;
        };
        let mut first = true;
        for leaf in self.leaves.range_mut(start..).map(|(_, l)| l) {
            let n = leaf.len as usize;
            let at = if std::mem::take(&mut first) {
                leaf.e[..n].partition_point(|&e| keys[slot_of(e)] < from)
            } else {
                0
            };
            for e in &mut leaf.e[at..n] {
                if !f(e) {
                    return;
                }
            }
        }
    }

    /// The flags of group `gkey`, or None if it has no dirty page.
    pub fn group_flags(&self, keys: &[u64], gkey: u64) -> Option<u32> {
        let mut found = None;
        self.scan(keys, self.first_key(gkey), |e| {
            if self.group_of(keys[slot_of(e)]) == gkey {
                found = Some(e & FLAGS);
            }
            false
        });
        found
    }

    /// Whether group `gkey` has every flag of `mask`.
    pub fn group_has(&self, keys: &[u64], gkey: u64, mask: u32) -> bool {
        self.group_flags(keys, gkey)
            .is_some_and(|f| f & mask == mask)
    }

    /// Set or clear `mask` on every entry of group `gkey`.
    pub fn set_group_flags(&mut self, keys: &[u64], gkey: u64, mask: u32, on: bool) {
        debug_assert_eq!(mask & !FLAGS, 0);
        let gp = self.group_pages;
        let of = |key: u64| (key & !PAGE_INDEX_MAX) | ((key & PAGE_INDEX_MAX) / gp);
        self.scan_mut(keys, self.first_key(gkey), |e| {
            if of(keys[slot_of(*e)]) != gkey {
                return false;
            }
            if on {
                *e |= mask;
            } else {
                *e &= !mask;
            }
            true
        });
    }

    /// The slots of group `gkey`'s dirty pages, in page order, into `out`.
    pub fn group_slots(&self, keys: &[u64], gkey: u64, out: &mut Vec<u32>) {
        out.clear();
        self.scan(keys, self.first_key(gkey), |e| {
            if self.group_of(keys[slot_of(e)]) != gkey {
                return false;
            }
            out.push(slot_of(e) as u32);
            true
        });
    }

    /// The first group above `after` (from the lowest if None) with every
    /// flag of `mask`.
    pub fn next_group(&self, keys: &[u64], after: Option<u64>, mask: u32) -> Option<u64> {
        let from = after.map_or(0, |g| self.first_key(g));
        let mut found = None;
        self.scan(keys, from, |e| {
            let g = self.group_of(keys[slot_of(e)]);
            if after.is_some_and(|a| g <= a) || e & mask != mask {
                return true;
            }
            found = Some(g);
            false
        });
        found
    }

    /// Where `key`'s entry is or would go: (leaf, position, present).
    fn find(&self, keys: &[u64], key: u64) -> Option<(u64, usize, bool)> {
        let lk = self.start_leaf(key)?;
        let es = self.leaves[&lk].entries();
        let at = es.partition_point(|&e| keys[slot_of(e)] < key);
        let present = es.get(at).is_some_and(|&e| keys[slot_of(e)] == key);
        Some((lk, at, present))
    }

    /// Add the dirty page held by `slot` (its key is `keys[slot]`); it takes
    /// its group's flags.
    pub fn insert(&mut self, keys: &[u64], slot: u32) {
        debug_assert!((slot as u64) < SLOTS_MAX);
        let key = keys[slot as usize];
        let flags = match self.group_flags(keys, self.group_of(key)) {
            Some(f) => f,
            None => {
                self.groups += 1;
                0
            }
        };
        let entry = slot | flags;
        self.pages += 1;
        let Some((lk, at, present)) = self.find(keys, key) else {
            let mut leaf = Leaf::new();
            leaf.insert_at(0, entry);
            self.leaves.insert(key, leaf);
            return;
        };
        debug_assert!(!present, "page inserted twice");
        let n = self.leaves[&lk].len as usize;
        if n < LEAF_CAP {
            self.leaves
                .get_mut(&lk)
                .expect("leaf found")
                .insert_at(at, entry);
            if at == 0 {
                // Only the first leaf takes a key below its first one.
                let leaf = self.leaves.remove(&lk).expect("leaf found");
                self.leaves.insert(key, leaf);
            }
            return;
        }
        // Full. At the end, the entry goes to the front of the next leaf if
        // that has room; at either end it else starts a leaf of its own (so
        // ascending and descending fills leave full leaves); in the middle the
        // leaf splits in halves.
        if at == n {
            let next = self
                .leaves
                .range((Excluded(lk), Unbounded))
                .next()
                .map(|(&k, l)| (k, l.len as usize));
            if let Some((nk, _)) = next.filter(|&(_, nn)| nn < LEAF_CAP) {
                let mut nl = self.leaves.remove(&nk).expect("leaf found");
                nl.insert_at(0, entry);
                self.leaves.insert(key, nl);
                return;
            }
        }
        if at == n || at == 0 {
            let mut new = Leaf::new();
            new.insert_at(0, entry);
            self.leaves.insert(key, new);
            return;
        }
        let mid = LEAF_CAP / 2;
        let leaf = self.leaves.get_mut(&lk).expect("leaf found");
        let mut right = Leaf::new();
        right.e[..n - mid].copy_from_slice(&leaf.e[mid..n]);
        right.len = (n - mid) as u32;
        leaf.len = mid as u32;
        if at < mid {
            leaf.insert_at(at, entry);
        } else {
            right.insert_at(at - mid, entry);
        }
        let rk = keys[slot_of(right.e[0])];
        self.leaves.insert(rk, right);
    }

    /// Point `key`'s entry at `slot` (a new version of the page took over);
    /// its flags stay.
    pub fn replace(&mut self, keys: &[u64], key: u64, slot: u32) {
        let (lk, at, present) = self.find(keys, key).expect("page is dirty");
        debug_assert!(present, "page is dirty");
        let e = &mut self.leaves.get_mut(&lk).expect("leaf found").e[at];
        *e = (*e & FLAGS) | slot;
    }

    /// Take `key`'s entry out; returns its flags. `keys` must still give the
    /// key of the slot it names.
    pub fn remove(&mut self, keys: &[u64], key: u64) -> u32 {
        let (lk, at, present) = self.find(keys, key).expect("page is dirty");
        assert!(present, "removing a page that is not dirty");
        let gkey = self.group_of(key);
        let mut leaf = self.leaves.remove(&lk).expect("leaf found");
        let entry = leaf.remove_at(at);
        self.pages -= 1;
        let n = leaf.len as usize;
        // Merge a small leaf into its successor when both fit in one.
        let next = self
            .leaves
            .range((Excluded(lk), Unbounded))
            .next()
            .map(|(&k, l)| (k, l.len as usize));
        if let Some((nk, nn)) = next.filter(|&(_, nn)| n + nn <= LEAF_CAP / 2) {
            let mut nl = self.leaves.remove(&nk).expect("leaf found");
            leaf.e[n..n + nn].copy_from_slice(&nl.e[..nn]);
            leaf.len = (n + nn) as u32;
            nl.len = 0;
        }
        if leaf.len > 0 {
            let first = keys[slot_of(leaf.e[0])];
            self.leaves.insert(first, leaf);
        }
        if self.group_flags(keys, gkey).is_none() {
            self.groups -= 1;
        }
        entry & FLAGS
    }

    pub fn heap_bytes(&self) -> usize {
        // Boxed leaves, plus the map's nodes (11 entries of 16 bytes per
        // node, about 2/3 full).
        self.leaves.len() * std::mem::size_of::<Leaf>() + (self.leaves.len() * 3).div_ceil(22) * 200
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap as Model;

    const GP: u32 = 4;

    /// Keys of slots: slot s holds key `keys[s]`.
    #[derive(Clone, Debug)]
    enum Op {
        Insert(u64),
        Remove(u64),
        Replace(u64),
        SetFlag(u64, bool),
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        let key = prop_oneof![0u64..400, (1u64 << 48)..(1u64 << 48) + 50];
        proptest::collection::vec(
            prop_oneof![
                4 => key.clone().prop_map(Op::Insert),
                2 => key.clone().prop_map(Op::Remove),
                1 => key.clone().prop_map(Op::Replace),
                1 => (key, any::<bool>()).prop_map(|(k, b)| Op::SetFlag(k, b)),
            ],
            1..600,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn matches_a_sorted_map(ops in ops()) {
            let mut set = DirtySet::new(GP);
            let mut keys: Vec<u64> = Vec::new();
            // key -> (slot, recent flag of its group)
            let mut model: Model<u64, u32> = Model::new();
            let mut recent: Model<u64, bool> = Model::new();
            for op in ops {
                match op {
                    Op::Insert(k) => {
                        if model.contains_key(&k) { continue; }
                        let s = keys.len() as u32;
                        keys.push(k);
                        set.insert(&keys, s);
                        model.insert(k, s);
                    }
                    Op::Remove(k) => {
                        if model.remove(&k).is_none() { continue; }
                        set.remove(&keys, k);
                    }
                    Op::Replace(k) => {
                        if !model.contains_key(&k) { continue; }
                        let s = keys.len() as u32;
                        keys.push(k);
                        set.replace(&keys, k, s);
                        model.insert(k, s);
                    }
                    Op::SetFlag(k, on) => {
                        let g = set.group_of(k);
                        set.set_group_flags(&keys, g, E_RECENT, on);
                    }
                }
                // Groups without pages lose their flags.
                let live: std::collections::BTreeSet<u64> =
                    model.keys().map(|&k| set.group_of(k)).collect();
                recent.retain(|g, _| live.contains(g));
                if let Op::SetFlag(k, on) = op {
                    let g = set.group_of(k);
                    if live.contains(&g) { recent.insert(g, on); }
                }
                prop_assert_eq!(set.pages(), model.len());
                prop_assert_eq!(set.groups(), live.len());
                // Every group: its slots in order, and its flag.
                let mut out = Vec::new();
                for &g in &live {
                    set.group_slots(&keys, g, &mut out);
                    let want: Vec<u32> = model
                        .iter()
                        .filter(|(&k, _)| set.group_of(k) == g)
                        .map(|(_, &s)| s)
                        .collect();
                    prop_assert_eq!(&out, &want);
                    let r = recent.get(&g).copied().unwrap_or(false);
                    prop_assert_eq!(set.group_has(&keys, g, E_RECENT), r);
                }
                // next_group walks the groups in order; with a mask, only flagged ones.
                let mut walk = Vec::new();
                let mut at = None;
                while let Some(g) = set.next_group(&keys, at, 0) {
                    walk.push(g);
                    at = Some(g);
                }
                prop_assert_eq!(walk, live.iter().copied().collect::<Vec<_>>());
                let flagged: Vec<u64> = live
                    .iter()
                    .copied()
                    .filter(|g| recent.get(g).copied().unwrap_or(false))
                    .collect();
                prop_assert_eq!(set.next_group(&keys, None, E_RECENT), flagged.first().copied());
            }
        }
    }

    #[test]
    fn ascending_fill_leaves_full_leaves() {
        let mut set = DirtySet::new(16);
        let keys: Vec<u64> = (0..10_000u64).map(|i| i * 16).collect();
        for s in 0..keys.len() as u32 {
            set.insert(&keys, s);
        }
        assert_eq!(set.pages(), 10_000);
        assert_eq!(set.groups(), 10_000);
        assert_eq!(set.leaves.len(), 10_000usize.div_ceil(LEAF_CAP));
    }
}
