//! The write-group table: for every group with dirty pages, which pages are
//! dirty (a bitmap) and how many of them a destage could take now. Groups live
//! exactly as long as they have dirty pages; ids are reused.

use crate::index::KeyIndex;
use crate::policy::destage_order::GroupId;

/// The group is in the destage order's candidate set.
pub const GFLAG_CANDIDATE: u8 = 0x01;
/// The latest write to the group was sequential.
pub const GFLAG_SEQUENTIAL: u8 = 0x02;

pub struct Groups {
    words: usize,
    key: Vec<u64>,
    /// Pages whose latest version is dirty.
    dirty: Vec<u32>,
    /// Dirty pages whose latest version is not under destage: candidate iff > 0.
    undestaged: Vec<u32>,
    flags: Vec<u8>,
    bits: Vec<u64>,
    free: Vec<u32>,
    index: KeyIndex,
    live: usize,
}

impl Groups {
    pub fn new(words: usize, hint: usize) -> Groups {
        Groups {
            words,
            key: Vec::with_capacity(hint),
            dirty: Vec::with_capacity(hint),
            undestaged: Vec::with_capacity(hint),
            flags: Vec::with_capacity(hint),
            bits: Vec::with_capacity(hint * words),
            free: Vec::new(),
            index: KeyIndex::growable(hint),
            live: 0,
        }
    }

    /// Groups with dirty pages.
    pub fn live(&self) -> usize {
        self.live
    }

    pub fn lookup(&self, key: u64) -> Option<GroupId> {
        let keys = &self.key;
        self.index.get(key, |id| keys[id as usize]).map(GroupId)
    }

    /// The group of `key`, created empty if absent.
    pub fn get_or_create(&mut self, key: u64) -> GroupId {
        if let Some(g) = self.lookup(key) {
            return g;
        }
        let id = match self.free.pop() {
            Some(id) => {
                let i = id as usize;
                self.key[i] = key;
                self.dirty[i] = 0;
                self.undestaged[i] = 0;
                self.flags[i] = 0;
                self.bits[i * self.words..(i + 1) * self.words].fill(0);
                id
            }
            None => {
                let id = self.key.len() as u32;
                self.key.push(key);
                self.dirty.push(0);
                self.undestaged.push(0);
                self.flags.push(0);
                self.bits.extend(std::iter::repeat_n(0, self.words));
                id
            }
        };
        let keys = &self.key;
        self.index.insert(id, |i| keys[i as usize]);
        self.live += 1;
        GroupId(id)
    }

    /// Drop a group that has no dirty pages left.
    pub fn release(&mut self, g: GroupId) {
        let i = g.0 as usize;
        debug_assert_eq!(self.dirty[i], 0);
        debug_assert_eq!(self.undestaged[i], 0);
        debug_assert_eq!(self.flags[i] & GFLAG_CANDIDATE, 0);
        let keys = &self.key;
        let removed = self.index.remove(self.key[i], |id| keys[id as usize]);
        debug_assert_eq!(removed, Some(g.0));
        self.free.push(g.0);
        self.live -= 1;
    }

    pub fn key(&self, g: GroupId) -> u64 {
        self.key[g.0 as usize]
    }
    pub fn dirty(&self, g: GroupId) -> u32 {
        self.dirty[g.0 as usize]
    }
    pub fn undestaged(&self, g: GroupId) -> u32 {
        self.undestaged[g.0 as usize]
    }
    pub fn add_undestaged(&mut self, g: GroupId, delta: i32) {
        let u = &mut self.undestaged[g.0 as usize];
        *u = u
            .checked_add_signed(delta)
            .expect("undestaged count underflow");
        debug_assert!(*u <= self.dirty[g.0 as usize]);
    }
    pub fn flag(&self, g: GroupId, flag: u8) -> bool {
        self.flags[g.0 as usize] & flag != 0
    }
    pub fn set_flag(&mut self, g: GroupId, flag: u8, on: bool) {
        let f = &mut self.flags[g.0 as usize];
        if on {
            *f |= flag;
        } else {
            *f &= !flag;
        }
    }

    pub fn is_dirty(&self, g: GroupId, pos: u32) -> bool {
        let w = self.bits[g.0 as usize * self.words + (pos / 64) as usize];
        w & (1 << (pos % 64)) != 0
    }

    /// Mark page `pos` dirty; returns false if it already was.
    pub fn set_dirty(&mut self, g: GroupId, pos: u32) -> bool {
        let w = &mut self.bits[g.0 as usize * self.words + (pos / 64) as usize];
        let bit = 1u64 << (pos % 64);
        if *w & bit != 0 {
            return false;
        }
        *w |= bit;
        self.dirty[g.0 as usize] += 1;
        true
    }

    pub fn clear_dirty(&mut self, g: GroupId, pos: u32) {
        let w = &mut self.bits[g.0 as usize * self.words + (pos / 64) as usize];
        let bit = 1u64 << (pos % 64);
        debug_assert!(*w & bit != 0);
        *w &= !bit;
        self.dirty[g.0 as usize] -= 1;
    }

    /// Positions of dirty pages, ascending, into `out`.
    pub fn dirty_positions(&self, g: GroupId, out: &mut Vec<u32>) {
        out.clear();
        let base = g.0 as usize * self.words;
        for (wi, &word) in self.bits[base..base + self.words].iter().enumerate() {
            let mut w = word;
            while w != 0 {
                let b = w.trailing_zeros();
                out.push(wi as u32 * 64 + b);
                w &= w - 1;
            }
        }
    }

    pub fn heap_bytes(&self) -> usize {
        self.key.capacity() * 8
            + self.dirty.capacity() * 4
            + self.undestaged.capacity() * 4
            + self.flags.capacity()
            + self.bits.capacity() * 8
            + self.free.capacity() * 4
            + self.index.heap_bytes()
    }
}
