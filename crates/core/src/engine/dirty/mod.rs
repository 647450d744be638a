//! The dirty set: the current slot of every dirty page, sorted by page key,
//! in leaves of 4-byte entries. A write group is a run of it, and the group's
//! state (candidate, recency bit, sequential) is in the high bits of each of
//! its entries, so a dirty group costs nothing beyond its pages' entries.
//!
//! Keys are not stored here: an entry names a slot, and the slot table holds
//! its page key (passed in as `keys`). A page's entry is repointed when a new
//! version of the page takes over (`replace`). Leaves are linked in key order
//! and found by their first key in a small `BTreeMap`; the start of the last
//! group looked up is remembered (a finger), because the engine touches one
//! group several times per write.

use crate::types::PAGE_INDEX_MAX;
use std::cell::Cell;
use std::collections::BTreeMap;

/// The group is in the destage order's candidate set.
pub const E_CANDIDATE: u32 = 1 << 31;
/// WOW's recency bit of the group.
pub const E_RECENT: u32 = 1 << 30;
/// The latest write to the group was sequential.
pub const E_SEQUENTIAL: u32 = 1 << 29;
const FLAGS: u32 = E_CANDIDATE | E_RECENT | E_SEQUENTIAL;
const ID: u32 = (1 << 29) - 1;
const _: () = assert!(crate::config::CACHE_SLOTS_MAX - 1 <= ID as u64);

/// Entries per leaf: a leaf is 256 bytes.
const LEAF_CAP: usize = 61;
const NIL: u32 = u32::MAX;

#[derive(Clone)]
struct Leaf {
    len: u32,
    prev: u32,
    next: u32,
    e: [u32; LEAF_CAP],
}

impl Leaf {
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

/// Where an entry at `start` is after an insert at `at` in the same leaf
/// shifted the entries from there on.
fn start_after(start: Pos, at: Pos) -> Pos {
    if start.0 == at.0 && start.1 >= at.1 {
        (start.0, start.1 + 1)
    } else {
        start
    }
}

fn slot_of(entry: u32) -> usize {
    (entry & ID) as usize
}

/// How many of the sorted `es` have a key below `key` (their lower bound).
/// The keys are scattered reads (the slot table); an 8-way search reads
/// seven pivots, then the run between two of them, each round's reads
/// independent of each other, so their cache misses overlap: two memory
/// latencies per leaf instead of a binary search's six.
fn lower_bound_in(es: &[u32], keys: &[u64], key: u64) -> usize {
    let below = |e: &u32| keys[slot_of(*e)] < key;
    let n = es.len();
    if n <= 16 {
        return es.iter().filter(|e| below(e)).count();
    }
    let pivot = |j: usize| (j + 1) * n / 8;
    let c = (0..7).filter(|&j| below(&es[pivot(j)])).count();
    let lo = if c == 0 { 0 } else { pivot(c - 1) + 1 };
    let hi = if c == 7 { n } else { pivot(c) };
    lo + es[lo..hi].iter().filter(|e| below(e)).count()
}

/// An entry's place: (leaf, index in it).
type Pos = (u32, usize);

/// The start of the last group looked up, valid while `version` holds:
/// where its first entry is, and where an entry for its first page would
/// go (`route`), which for a group with no entry is where any of its pages
/// would go.
#[derive(Clone, Copy)]
struct Finger {
    version: u64,
    gkey: u64,
    start: Option<Pos>,
    route: Option<Pos>,
    /// Entries in the group, once counted (0: not yet).
    len: usize,
}

pub struct DirtySet {
    /// Leaves by the key of their first entry.
    index: BTreeMap<u64, u32>,
    leaves: Vec<Leaf>,
    free_leaves: Vec<u32>,
    /// Changes whenever entries move (insert, remove), so a finger expires.
    version: u64,
    finger: Cell<Finger>,
    group_pages: u64,
    pages: usize,
    groups: usize,
    /// Runs of consecutive dirty pages within a group: the destages a
    /// drain of the set would issue (`issue_group_destages`).
    runs: usize,
}

impl DirtySet {
    pub fn new(group_pages: u32) -> DirtySet {
        DirtySet {
            index: BTreeMap::new(),
            leaves: Vec::new(),
            free_leaves: Vec::new(),
            version: 0,
            finger: Cell::new(Finger {
                version: u64::MAX,
                gkey: 0,
                start: None,
                route: None,
                len: 0,
            }),
            group_pages: group_pages as u64,
            pages: 0,
            groups: 0,
            runs: 0,
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
    /// Runs of consecutive dirty pages within a group: a destage each.
    pub fn runs(&self) -> usize {
        self.runs
    }

    /// The group key (volume, group number) of a page key.
    pub fn group_of(&self, key: u64) -> u64 {
        (key & !PAGE_INDEX_MAX) | ((key & PAGE_INDEX_MAX) / self.group_pages)
    }
    /// The page key of a group's first page.
    fn first_key(&self, gkey: u64) -> u64 {
        (gkey & !PAGE_INDEX_MAX) | ((gkey & PAGE_INDEX_MAX) * self.group_pages)
    }
    /// The page key of a group's last page (within its volume), so that
    /// walks test membership by comparison instead of a division per entry.
    fn last_key(&self, gkey: u64) -> u64 {
        self.first_key(gkey)
            .saturating_add(self.group_pages - 1)
            .min(gkey | PAGE_INDEX_MAX)
    }

    fn entry(&self, (l, i): Pos) -> u32 {
        self.leaves[l as usize].e[i]
    }
    fn entry_mut(&mut self, (l, i): Pos) -> &mut u32 {
        &mut self.leaves[l as usize].e[i]
    }
    /// The place before `pos`, if any.
    fn step_back(&self, (l, i): Pos) -> Option<Pos> {
        if i > 0 {
            return Some((l, i - 1));
        }
        let prev = self.leaves[l as usize].prev;
        (prev != NIL).then(|| (prev, self.leaves[prev as usize].len as usize - 1))
    }

    /// How many of the pages beside `key` (one below, one above, in its
    /// group) are dirty, given the entries before and after its place.
    fn dirty_beside(
        &self,
        keys: &[u64],
        key: u64,
        before: Option<Pos>,
        after: Option<Pos>,
    ) -> usize {
        let gkey = self.group_of(key);
        let is = |p: Option<Pos>, want: u64| {
            p.is_some_and(|p| {
                let k = keys[slot_of(self.entry(p))];
                k == want && self.group_of(k) == gkey
            })
        };
        usize::from(is(before, key.wrapping_sub(1))) + usize::from(is(after, key.wrapping_add(1)))
    }

    /// `key`, at `pos` in a group of `len` entries, is about to leave: its
    /// run ends, shrinks, or splits in two.
    fn leave_run(&mut self, keys: &[u64], key: u64, pos: Pos, len: usize) {
        let beside = match len {
            1 => 0,
            _ => self.dirty_beside(keys, key, self.step_back(pos), self.step(pos)),
        };
        self.runs = self.runs + beside - 1;
    }

    /// The place after `pos`, if any.
    fn step(&self, (l, i): Pos) -> Option<Pos> {
        let leaf = &self.leaves[l as usize];
        if i + 1 < leaf.len as usize {
            Some((l, i + 1))
        } else if leaf.next != NIL {
            Some((leaf.next, 0))
        } else {
            None
        }
    }

    /// The leaf where `key` belongs and its place in it (possibly one past
    /// its last entry): the last leaf whose first key is at most `key`, or
    /// the first leaf.
    fn route(&self, keys: &[u64], key: u64) -> Option<Pos> {
        let (_, &l) = self
            .index
            .range(..=key)
            .next_back()
            .or_else(|| self.index.iter().next())?;
        let at = lower_bound_in(self.leaves[l as usize].entries(), keys, key);
        Some((l, at))
    }

    /// The first entry whose key is at least `key`.
    fn lower_bound(&self, keys: &[u64], key: u64) -> Option<Pos> {
        self.bound_of(self.route(keys, key))
    }

    /// The entry at a routed place, or the next one if it is past a leaf's end.
    fn bound_of(&self, routed: Option<Pos>) -> Option<Pos> {
        let (l, at) = routed?;
        let leaf = &self.leaves[l as usize];
        if at < leaf.len as usize {
            Some((l, at))
        } else if leaf.next != NIL {
            Some((leaf.next, 0))
        } else {
            None
        }
    }

    /// Where group `gkey` starts, if it has a dirty page.
    fn group_start(&self, keys: &[u64], gkey: u64) -> Option<Pos> {
        let f = self.finger.get();
        if f.version == self.version && f.gkey == gkey {
            return f.start;
        }
        let route = self.route(keys, self.first_key(gkey));
        let last = self.last_key(gkey);
        let start = self
            .bound_of(route)
            .filter(|&p| keys[slot_of(self.entry(p))] <= last);
        self.finger.set(Finger {
            version: self.version,
            gkey,
            start,
            route,
            len: 0,
        });
        start
    }

    /// Where group `gkey` starts and how many entries it has (counted
    /// once per finger).
    fn group_extent(&self, keys: &[u64], gkey: u64) -> Option<(Pos, usize)> {
        let start = self.group_start(keys, gkey)?;
        let mut f = self.finger.get();
        if f.len == 0 {
            let last = self.last_key(gkey);
            let mut n = 0;
            let mut pos = Some(start);
            while let Some(p) = pos {
                if keys[slot_of(self.entry(p))] > last {
                    break;
                }
                n += 1;
                pos = self.step(p);
            }
            f.len = n;
            self.finger.set(f);
        }
        Some((start, f.len))
    }

    /// The runs of group `gkey` in its leaves: (leaf, first index, entries).
    fn group_runs(&self, keys: &[u64], gkey: u64, mut f: impl FnMut(u32, usize, usize) -> bool) {
        let Some(((mut l, mut at), mut left)) = self.group_extent(keys, gkey) else {
            return;
        };
        while left > 0 {
            let leaf = &self.leaves[l as usize];
            let n = left.min(leaf.len as usize - at);
            if !f(l, at, n) {
                return;
            }
            left -= n;
            (l, at) = (leaf.next, 0);
        }
    }

    /// The place of `key`'s entry, if it has one, searched from its group's
    /// start. The group's entries are distinct pages in ascending order from
    /// its first page, so the entry of the page `d` pages into the group is
    /// among the group's first `d + 1`: the search reads no more keys than
    /// that (one round of reads for a group of up to 16 pages).
    fn find(&self, keys: &[u64], key: u64) -> Option<Pos> {
        let gkey = self.group_of(key);
        let (mut l, mut at) = self.group_start(keys, gkey)?;
        // Often the group's first page (always, with one dirty page per group).
        if keys[slot_of(self.entry((l, at)))] == key {
            return Some((l, at));
        }
        let mut budget = (key - self.first_key(gkey)) as usize + 1;
        loop {
            let leaf = &self.leaves[l as usize];
            let es = leaf.entries();
            let end = es.len().min(at + budget);
            let i = at + lower_bound_in(&es[at..end], keys, key);
            if i < end {
                return (keys[slot_of(es[i])] == key).then_some((l, i));
            }
            budget -= end - at;
            if budget == 0 || leaf.next == NIL {
                return None;
            }
            (l, at) = (leaf.next, 0);
        }
    }

    /// The positions of group `gkey`'s entries, in order.
    fn for_group(&self, keys: &[u64], gkey: u64, mut f: impl FnMut(Pos)) {
        self.group_runs(keys, gkey, |l, at, n| {
            (at..at + n).for_each(|i| f((l, i)));
            true
        });
    }

    /// The flags of group `gkey`, or None if it has no dirty page.
    pub fn group_flags(&self, keys: &[u64], gkey: u64) -> Option<u32> {
        self.group_start(keys, gkey).map(|p| self.entry(p) & FLAGS)
    }

    /// Whether group `gkey` has every flag of `mask`.
    pub fn group_has(&self, keys: &[u64], gkey: u64, mask: u32) -> bool {
        self.group_flags(keys, gkey)
            .is_some_and(|f| f & mask == mask)
    }

    /// Set or clear `mask` on every entry of group `gkey`.
    /// Returns the group's flags before (0 if it has no dirty page).
    pub fn set_group_flags(&mut self, keys: &[u64], gkey: u64, mask: u32, on: bool) -> u32 {
        debug_assert_eq!(mask & !FLAGS, 0);
        // The flags are the same on every entry: the first tells.
        let before = match self.group_flags(keys, gkey) {
            Some(f) if (f & mask == mask) != on || (!on && f & mask != 0) => f,
            other => return other.unwrap_or(0),
        };
        let Some(((mut l, mut at), mut left)) = self.group_extent(keys, gkey) else {
            return before;
        };
        while left > 0 {
            let leaf = &mut self.leaves[l as usize];
            let n = left.min(leaf.len as usize - at);
            for e in &mut leaf.e[at..at + n] {
                if on {
                    *e |= mask;
                } else {
                    *e &= !mask;
                }
            }
            left -= n;
            (l, at) = (leaf.next, 0);
        }
        before
    }

    /// Whether any of group `gkey`'s dirty pages' slots satisfies `f`.
    pub fn any_in_group(&self, keys: &[u64], gkey: u64, mut f: impl FnMut(u32) -> bool) -> bool {
        let mut found = false;
        self.group_runs(keys, gkey, |l, at, n| {
            let run = &self.leaves[l as usize].e[at..at + n];
            found = run.iter().any(|&e| f(slot_of(e) as u32));
            !found
        });
        found
    }

    /// The slots of group `gkey`'s dirty pages, in page order, into `out`.
    pub fn group_slots(&self, keys: &[u64], gkey: u64, out: &mut Vec<u32>) {
        out.clear();
        self.for_group(keys, gkey, |p| out.push(slot_of(self.entry(p)) as u32));
    }

    /// The first group above `after` (from the lowest if None) with every
    /// flag of `mask`.
    pub fn next_group(&self, keys: &[u64], after: Option<u64>, mask: u32) -> Option<u64> {
        let mut pos = match after {
            Some(g) => self.lower_bound(keys, self.first_key(g)),
            None => self.index.values().next().map(|&l| (l, 0)),
        };
        let above = after.map(|g| self.last_key(g));
        while let Some(p) = pos {
            let e = self.entry(p);
            let k = keys[slot_of(e)];
            if above.is_none_or(|a| k > a) && e & mask == mask {
                return Some(self.group_of(k));
            }
            pos = self.step(p);
        }
        None
    }

    fn new_leaf(&mut self, prev: u32, next: u32) -> u32 {
        let leaf = Leaf {
            len: 0,
            prev,
            next,
            e: [0; LEAF_CAP],
        };
        let l = match self.free_leaves.pop() {
            Some(l) => {
                self.leaves[l as usize] = leaf;
                l
            }
            None => {
                if self.leaves.len() == self.leaves.capacity() {
                    // Grow by an eighth: the arena is most of this structure.
                    self.leaves.reserve_exact(self.leaves.len() / 8 + 16);
                }
                self.leaves.push(leaf);
                self.leaves.len() as u32 - 1
            }
        };
        if prev != NIL {
            self.leaves[prev as usize].next = l;
        }
        if next != NIL {
            self.leaves[next as usize].prev = l;
        }
        l
    }

    fn drop_leaf(&mut self, l: u32, first_key: u64) {
        let (prev, next) = {
            let leaf = &self.leaves[l as usize];
            (leaf.prev, leaf.next)
        };
        if prev != NIL {
            self.leaves[prev as usize].next = next;
        }
        if next != NIL {
            self.leaves[next as usize].prev = prev;
        }
        self.index.remove(&first_key);
        self.free_leaves.push(l);
    }

    /// The leaf's first key changed from `old`.
    fn rekey(&mut self, keys: &[u64], l: u32, old: u64) {
        let new = keys[slot_of(self.leaves[l as usize].e[0])];
        if new != old {
            self.index.remove(&old);
            self.index.insert(new, l);
        }
    }

    /// Add the dirty page held by `slot` (its key is `keys[slot]`); it takes
    /// its group's flags, which are returned.
    pub fn insert(&mut self, keys: &[u64], slot: u32) -> u32 {
        debug_assert!(slot <= ID);
        let key = keys[slot as usize];
        let gkey = self.group_of(key);
        let extent = self.group_extent(keys, gkey);
        let flags = extent.map_or(0, |(p, _)| self.entry(p) & FLAGS);
        let entry = slot | flags;
        // A page of a group with no entry goes where the group's lookup
        // routed; one of a group with entries goes among them.
        let routed = match extent {
            None => self.finger.get().route,
            Some(_) => Some(self.place_in_group(keys, gkey, key)),
        };
        self.pages += 1;
        self.version += 1;
        let (pos, in_place) = self.insert_entry(keys, key, entry, routed);
        // A page joins the runs beside it: one run more, less one per
        // dirty neighbour in its group.
        let beside = match extent {
            None => 0,
            Some(_) => self.dirty_beside(keys, key, self.step_back(pos), self.step(pos)),
        };
        self.runs = self.runs + 1 - beside;
        let finger = match extent {
            // A new group starts at its only entry.
            None => {
                self.groups += 1;
                Some((pos, 1))
            }
            // Nothing else moved: the group starts where it did, or here.
            Some((start, len)) if in_place => {
                let first = keys[slot_of(self.entry(start_after(start, pos)))];
                Some((
                    if key < first {
                        pos
                    } else {
                        start_after(start, pos)
                    },
                    len + 1,
                ))
            }
            Some(_) => None,
        };
        if let Some((start, len)) = finger {
            self.finger.set(Finger {
                version: self.version,
                gkey,
                start: Some(start),
                route: Some(start),
                len,
            });
        }
        flags
    }

    /// Where `key`, of group `gkey` which has entries, goes among them.
    fn place_in_group(&self, keys: &[u64], gkey: u64, key: u64) -> Pos {
        let mut place = None;
        self.group_runs(keys, gkey, |l, at, n| {
            let run = &self.leaves[l as usize].e[at..at + n];
            let i = lower_bound_in(run, keys, key);
            place = Some((l, at + i));
            i == n
        });
        place.expect("group has entries")
    }

    /// Put `entry` at `routed`; returns its place, and whether no other entry
    /// changed leaf (the insert shifted at most the rest of its leaf).
    fn insert_entry(
        &mut self,
        keys: &[u64],
        key: u64,
        entry: u32,
        routed: Option<Pos>,
    ) -> (Pos, bool) {
        let Some((l, at)) = routed else {
            let l = self.new_leaf(NIL, NIL);
            self.leaves[l as usize].insert_at(0, entry);
            self.index.insert(key, l);
            return ((l, 0), true);
        };
        let (n, next, old_first) = {
            let leaf = &self.leaves[l as usize];
            (leaf.len as usize, leaf.next, keys[slot_of(leaf.e[0])])
        };
        debug_assert!(
            self.leaves[l as usize]
                .entries()
                .get(at)
                .is_none_or(|&e| keys[slot_of(e)] != key),
            "page inserted twice"
        );
        if n < LEAF_CAP {
            self.leaves[l as usize].insert_at(at, entry);
            if at == 0 {
                // A key below the leaf's first one: the first leaf, or the front
                // of a group's run that starts a leaf.
                self.rekey(keys, l, old_first);
            }
            return ((l, at), true);
        }
        self.insert_into_full(keys, key, entry, (l, at), next, old_first)
    }

    /// `insert_entry` into the full leaf `l` at `at`: `next` is the leaf
    /// after it and `old_first` the key of its first entry.
    fn insert_into_full(
        &mut self,
        keys: &[u64],
        key: u64,
        entry: u32,
        (l, at): Pos,
        next: u32,
        old_first: u64,
    ) -> (Pos, bool) {
        let n = LEAF_CAP;
        debug_assert_eq!(self.leaves[l as usize].len as usize, n);
        // Full. At the end, the entry goes to the front of the next leaf if
        // that has room; at either end it else starts a leaf of its own (so
        // ascending and descending fills leave full leaves); in the middle the
        // leaf splits.
        if at == n {
            if next != NIL && (self.leaves[next as usize].len as usize) < LEAF_CAP {
                let next_first = keys[slot_of(self.leaves[next as usize].e[0])];
                self.leaves[next as usize].insert_at(0, entry);
                self.rekey(keys, next, next_first);
                return ((next, 0), false);
            }
            let new = self.new_leaf(l, next);
            self.leaves[new as usize].insert_at(0, entry);
            self.index.insert(key, new);
            return ((new, 0), false);
        }
        if at == 0 {
            let prev = self.leaves[l as usize].prev;
            let new = self.new_leaf(prev, l);
            self.leaves[new as usize].insert_at(0, entry);
            self.index.insert(key, new);
            return ((new, 0), false);
        }
        // In the middle: make room by moving the last entry to the next leaf
        // or the first to the previous one, if either has room (so leaves
        // stay fuller than halves would leave them); else split in halves.
        if next != NIL && (self.leaves[next as usize].len as usize) < LEAF_CAP {
            let next_first = keys[slot_of(self.leaves[next as usize].e[0])];
            let last = self.leaves[l as usize].remove_at(n - 1);
            self.leaves[next as usize].insert_at(0, last);
            self.rekey(keys, next, next_first);
            self.leaves[l as usize].insert_at(at, entry);
            return ((l, at), false);
        }
        let prev = self.leaves[l as usize].prev;
        if prev != NIL && (self.leaves[prev as usize].len as usize) < LEAF_CAP {
            let first = self.leaves[l as usize].remove_at(0);
            let p = &mut self.leaves[prev as usize];
            let pn = p.len as usize;
            p.insert_at(pn, first);
            self.leaves[l as usize].insert_at(at - 1, entry);
            self.rekey(keys, l, old_first);
            return ((l, at - 1), false);
        }
        let mid = LEAF_CAP / 2;
        let right = self.new_leaf(l, next);
        let moved = self.leaves[l as usize].e;
        {
            let r = &mut self.leaves[right as usize];
            r.e[..n - mid].copy_from_slice(&moved[mid..n]);
            r.len = (n - mid) as u32;
        }
        self.leaves[l as usize].len = mid as u32;
        let pos = if at < mid {
            self.leaves[l as usize].insert_at(at, entry);
            (l, at)
        } else {
            self.leaves[right as usize].insert_at(at - mid, entry);
            (right, at - mid)
        };
        let rk = keys[slot_of(self.leaves[right as usize].e[0])];
        self.index.insert(rk, right);
        (pos, false)
    }

    /// Point `key`'s entry at `slot` (a new version of the page took over);
    /// its flags stay.
    /// Returns its flags and the slot it named before.
    pub fn replace(&mut self, keys: &[u64], key: u64, slot: u32) -> (u32, u32) {
        let pos = self.find(keys, key).expect("page is dirty");
        let e = self.entry_mut(pos);
        let before = slot_of(*e) as u32;
        *e = (*e & FLAGS) | slot;
        (*e & FLAGS, before)
    }

    /// Every entry's slot, in key order.
    pub fn for_each_slot(&self, mut f: impl FnMut(u32)) {
        let mut l = self.index.values().next().copied().unwrap_or(NIL);
        while l != NIL {
            let leaf = &self.leaves[l as usize];
            for &e in leaf.entries() {
                f(slot_of(e) as u32);
            }
            l = leaf.next;
        }
    }

    /// Take `key`'s entry out; returns its flags and the slot it named.
    /// `keys` must still give the key of the slot it names.
    pub fn remove(&mut self, keys: &[u64], key: u64) -> (u32, u32) {
        let gkey = self.group_of(key);
        let (start, len) = self
            .group_extent(keys, gkey)
            .expect("removing a page that is not dirty");
        let (l, at) = self
            .find(keys, key)
            .expect("removing a page that is not dirty");
        self.leave_run(keys, key, (l, at), len);
        let old_first = keys[slot_of(self.leaves[l as usize].e[0])];
        let entry = self.leaves[l as usize].remove_at(at);
        self.pages -= 1;
        self.version += 1;
        let (n, next) = {
            let leaf = &self.leaves[l as usize];
            (leaf.len as usize, leaf.next)
        };
        if n == 0 {
            self.drop_leaf(l, old_first);
        } else {
            if at == 0 {
                self.rekey(keys, l, old_first);
            }
            // Merge a small leaf with its successor when both fit in half a leaf.
            if next != NIL {
                let nn = self.leaves[next as usize].len as usize;
                if n + nn <= LEAF_CAP / 2 {
                    let next_first = keys[slot_of(self.leaves[next as usize].e[0])];
                    let moved = self.leaves[next as usize].e;
                    let leaf = &mut self.leaves[l as usize];
                    leaf.e[n..n + nn].copy_from_slice(&moved[..nn]);
                    leaf.len = (n + nn) as u32;
                    self.drop_leaf(next, next_first);
                }
            }
        }
        if len == 1 {
            self.groups -= 1;
        }
        if self.pages == 0 {
            // Nothing dirty: give the arena's memory back (it keeps its
            // high-water mark while any page is dirty).
            *self = DirtySet::new(self.group_pages as u32);
            return (entry & FLAGS, slot_of(entry) as u32);
        }
        // The group's start is unchanged, or (its first entry went) the
        // entry that followed, which is now at the same place or starts the
        // next leaf. With its leaf gone, let the next lookup find it.
        if n > 0 {
            let l_len = self.leaves[l as usize].len as usize;
            let l_next = self.leaves[l as usize].next;
            let new_start = if start != (l, at) {
                Some(start)
            } else if len == 1 {
                None
            } else if at < l_len {
                Some((l, at))
            } else {
                Some((l_next, 0))
            };
            self.finger.set(Finger {
                version: self.version,
                gkey,
                start: new_start,
                route: Some(new_start.unwrap_or((l, at))),
                len: len - 1,
            });
        }
        (entry & FLAGS, slot_of(entry) as u32)
    }

    pub fn heap_bytes(&self) -> usize {
        // The leaf arena, plus the index's nodes (11 entries of 12 bytes
        // per node, about 2/3 full).
        self.leaves.capacity() * std::mem::size_of::<Leaf>()
            + self.free_leaves.capacity() * 4
            + (self.index.len() * 3).div_ceil(22) * 160
    }
}

#[cfg(test)]
mod tests;
