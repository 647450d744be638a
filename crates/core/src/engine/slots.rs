//! The slot table: what each cache slot holds, the (volume, page) -> slot
//! directory, the free pool (`free.rs`: next fit, so that consecutive
//! allocations get consecutive slots) and pins. Sized once at start.
//!
//! A page has at most one *current* slot (the one the directory finds). An
//! overwrite never changes a slot in place: it fills a fresh slot and the old
//! one becomes *stale*, freed once nothing reads it any more (pins) and no
//! destage is copying it. So a crash or a torn write never mixes two versions
//! of a page, and reads in flight never see a slot reused under them.

use super::free::FreePool;
use crate::index::KeyIndex;
use crate::types::{PageKey, SlotIndex};
use rustc_hash::FxHashMap as HashMap;

/// State of a slot (low bits of the state byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum SlotState {
    Free = 0,
    /// Current version, being written; readers and later writers wait for it.
    Filling = 1,
    /// Current version, newer than the backing.
    Dirty = 2,
    /// Current version, equal to the backing; held by the replacement policy.
    Clean = 3,
    /// Not current any more; freed when unpinned and not being destaged.
    Stale = 4,
    /// Not current any more, but newer than the backing: ordered
    /// write-back destages it, in its page's version order, before it goes.
    OldDirty = 5,
}

const STATE_MASK: u8 = 0x07;
/// A destage is copying this slot to the backing.
pub const FLAG_DESTAGING: u8 = 0x10;
/// A filling slot becomes clean, not dirty, when its write completes.
pub const FLAG_FILL_CLEAN: u8 = 0x20;
/// A stale slot in its page's queue of old versions (see `Engine::old_versions`).
pub const FLAG_OLD: u8 = 0x40;
/// A stale slot nothing uses any more, waiting for (or in) its `FreeSlots`.
pub const FLAG_FREEING: u8 = 0x80;
/// Its `FreeSlots` has been issued.
pub const FLAG_FREE_SENT: u8 = 0x08;

pub struct Slots {
    /// The page of a used slot (meaningless for a free one).
    key: Vec<u64>,
    state: Vec<u8>,
    index: KeyIndex,
    free: FreePool,
    /// In-flight readers of a slot's contents (reads, merges into a newer
    /// version, a new version's fill keeping the one it supersedes): one
    /// bit per slot says "pinned at least once" (the common case costs no
    /// hash lookup), and `extra_pins` counts the pins beyond the first.
    pinned: Vec<u64>,
    extra_pins: HashMap<u32, u32>,
    /// Clean slots with no pins: what eviction can hand out right now.
    evictable: u64,
}

impl Slots {
    pub fn new(slots: u32, pins_hint: usize) -> Slots {
        Slots {
            key: vec![0; slots as usize],
            state: vec![SlotState::Free as u8; slots as usize],
            index: KeyIndex::fixed(slots as usize),
            free: FreePool::new(slots),
            pinned: vec![0; (slots as usize).div_ceil(64)],
            extra_pins: HashMap::with_capacity_and_hasher(pins_hint, Default::default()),
            evictable: 0,
        }
    }

    pub fn len(&self) -> u32 {
        self.key.len() as u32
    }

    pub fn state(&self, slot: SlotIndex) -> SlotState {
        match self.state[slot.0 as usize] & STATE_MASK {
            0 => SlotState::Free,
            1 => SlotState::Filling,
            2 => SlotState::Dirty,
            3 => SlotState::Clean,
            4 => SlotState::Stale,
            5 => SlotState::OldDirty,
            other => unreachable!("corrupt slot state {other}"),
        }
    }
    pub fn has(&self, slot: SlotIndex, flag: u8) -> bool {
        self.state[slot.0 as usize] & flag != 0
    }
    pub fn set_flag(&mut self, slot: SlotIndex, flag: u8, on: bool) {
        let s = &mut self.state[slot.0 as usize];
        if on {
            *s |= flag;
        } else {
            *s &= !flag;
        }
    }
    pub fn key(&self, slot: SlotIndex) -> PageKey {
        debug_assert_ne!(self.state(slot), SlotState::Free, "key of a free slot");
        PageKey(self.key[slot.0 as usize])
    }
    /// Every slot's key, indexed by slot (meaningless for free slots).
    pub fn keys(&self) -> &[u64] {
        &self.key
    }
    pub fn pins(&self, slot: SlotIndex) -> u32 {
        if !self.is_pinned(slot) {
            return 0;
        }
        1 + self.extra_pins.get(&slot.0).copied().unwrap_or(0)
    }

    fn is_pinned(&self, slot: SlotIndex) -> bool {
        self.pinned[slot.0 as usize / 64] & (1 << (slot.0 % 64)) != 0
    }

    fn set_pinned(&mut self, slot: SlotIndex, on: bool) {
        let (word, bit) = (slot.0 as usize / 64, 1u64 << (slot.0 % 64));
        if on {
            self.pinned[word] |= bit;
        } else {
            self.pinned[word] &= !bit;
        }
    }
    pub fn free_count(&self) -> u64 {
        self.free.len()
    }
    pub fn evictable(&self) -> u64 {
        self.evictable
    }

    /// Change the state, keeping `evictable` right. Flags are kept.
    pub fn set_state(&mut self, slot: SlotIndex, new: SlotState) {
        let old = self.state(slot);
        let unpinned = !self.is_pinned(slot);
        if old == SlotState::Clean && unpinned {
            self.evictable -= 1;
        }
        if new == SlotState::Clean && unpinned {
            self.evictable += 1;
        }
        let s = &mut self.state[slot.0 as usize];
        *s = (*s & !STATE_MASK) | new as u8;
    }

    /// Bring `key`'s index entry into the CPU's cache ahead of its lookup
    /// (`KeyIndex::prefetch`): for the pages of a multi-page request.
    #[inline]
    pub fn prefetch(&self, key: PageKey) {
        let keys = &self.key;
        self.index.prefetch(key.0, |id| keys[id as usize]);
    }

    /// Start fetching `key`'s home bucket of the index (no wait): for
    /// recovery's run of inserts.
    #[inline]
    pub fn prefetch_home(&self, key: PageKey) {
        self.index.prefetch_home(key.0);
    }

    pub fn lookup(&self, key: PageKey) -> Option<SlotIndex> {
        let keys = &self.key;
        self.index.get(key.0, |id| keys[id as usize]).map(SlotIndex)
    }

    /// Make `slot` the current slot of `key` (which has none).
    pub fn map(&mut self, slot: SlotIndex, key: PageKey) {
        self.key[slot.0 as usize] = key.0;
        let keys = &self.key;
        self.index.insert(slot.0, |id| keys[id as usize]);
    }

    /// Make `new` the current slot of `old`'s page in `old`'s place (an
    /// overwrite): the index entry is repointed, nothing moves.
    pub fn remap(&mut self, old: SlotIndex, new: SlotIndex) {
        let key = self.key[old.0 as usize];
        self.key[new.0 as usize] = key;
        self.index.replace(key, old.0, new.0);
    }

    /// Forget the current slot of `slot`'s page.
    pub fn unmap(&mut self, slot: SlotIndex) {
        let key = self.key[slot.0 as usize];
        let keys = &self.key;
        let removed = self.index.remove(key, |id| keys[id as usize]);
        debug_assert_eq!(removed, Some(slot.0));
    }

    /// Recovery: the slots in `used` are not free (the pool holds the rest).
    pub fn exclude_from_pool(&mut self, used: &[SlotIndex]) {
        for s in used {
            self.free.take(s.0);
        }
    }

    /// Recovery: the page a stale slot's record still names.
    pub fn set_key(&mut self, slot: SlotIndex, key: PageKey) {
        self.key[slot.0 as usize] = key.0;
    }

    /// Take a free slot, if any (never evicts).
    pub fn pop_free(&mut self) -> Option<SlotIndex> {
        let slot = SlotIndex(self.free.pop()?);
        debug_assert_eq!(self.state(slot), SlotState::Free);
        Some(slot)
    }

    /// Take `n` consecutive free slots, if the pool finds a run; returns
    /// the first (never evicts).
    pub fn pop_free_run(&mut self, n: u32) -> Option<SlotIndex> {
        let first = self.free.pop_run(n)?;
        debug_assert!((first..first + n).all(|s| self.state(SlotIndex(s)) == SlotState::Free));
        Some(SlotIndex(first))
    }

    /// Log mode: take `slot`, the head of the log, out of the pool.
    pub fn take_from_pool(&mut self, slot: SlotIndex) {
        debug_assert!(
            self.free.is_free(slot.0),
            "log head {} not in the pool",
            slot.0
        );
        debug_assert_eq!(self.state(slot), SlotState::Free);
        self.free.take(slot.0);
    }

    /// Log mode: a free slot the tail passed joins the pool.
    pub fn return_to_pool(&mut self, slot: SlotIndex) {
        debug_assert_eq!(
            self.state(slot),
            SlotState::Free,
            "slot {} passed in use",
            slot.0
        );
        self.free.push(slot.0);
    }

    pub fn in_pool(&self, slot: SlotIndex) -> bool {
        self.free.is_free(slot.0)
    }

    /// Log mode: a slot nothing uses any more stays out of the pool (a
    /// hole in the log) until the tail passes it.
    pub fn make_hole(&mut self, slot: SlotIndex) {
        debug_assert_eq!(self.pins(slot), 0);
        debug_assert!(!self.has(slot, FLAG_DESTAGING));
        self.set_state(slot, SlotState::Free);
        self.state[slot.0 as usize] = SlotState::Free as u8;
    }

    pub fn push_free(&mut self, slot: SlotIndex) {
        debug_assert_eq!(self.pins(slot), 0);
        debug_assert!(!self.has(slot, FLAG_DESTAGING));
        self.set_state(slot, SlotState::Free);
        self.state[slot.0 as usize] = SlotState::Free as u8;
        self.free.push(slot.0);
    }

    pub fn pin(&mut self, slot: SlotIndex) {
        if self.is_pinned(slot) {
            *self.extra_pins.entry(slot.0).or_insert(0) += 1;
            return;
        }
        self.set_pinned(slot, true);
        if self.state(slot) == SlotState::Clean {
            self.evictable -= 1;
        }
    }

    /// Returns true when the slot is stale and nothing holds it any more.
    pub fn unpin(&mut self, slot: SlotIndex) -> bool {
        if !self.is_pinned(slot) {
            debug_assert!(false, "unpin of an unpinned slot");
            return false;
        }
        if let Some(n) = self.extra_pins.get_mut(&slot.0) {
            *n -= 1;
            if *n == 0 {
                self.extra_pins.remove(&slot.0);
            }
            return false;
        }
        self.set_pinned(slot, false);
        match self.state(slot) {
            SlotState::Clean => {
                self.evictable += 1;
                false
            }
            SlotState::Stale => !self.has(slot, FLAG_DESTAGING) && !self.has(slot, FLAG_FREEING),
            _ => false,
        }
    }

    /// A stale slot with no pins and no destage can go back to the pool.
    pub fn freeable(&self, slot: SlotIndex) -> bool {
        self.state(slot) == SlotState::Stale
            && !self.is_pinned(slot)
            && !self.has(slot, FLAG_DESTAGING)
    }

    pub fn heap_bytes(&self) -> usize {
        self.key.capacity() * 8
            + self.state.capacity()
            + self.free.heap_bytes()
            + self.index.heap_bytes()
            + self.pinned.capacity() * 8
            + self.extra_pins.capacity() * 9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pins nest: the first is a bit, the others a count; a clean slot is
    /// evictable and a stale one freeable only when the last pin goes.
    #[test]
    fn pins_nest_and_only_the_last_unpin_releases_the_slot() {
        let mut slots = Slots::new(130, 4);
        for s in [SlotIndex(0), SlotIndex(64), SlotIndex(129)] {
            slots.set_state(s, SlotState::Clean);
        }
        assert_eq!(slots.evictable(), 3);
        let s = SlotIndex(64);
        slots.pin(s);
        slots.pin(s);
        slots.pin(s);
        assert_eq!(slots.pins(s), 3);
        assert_eq!(slots.pins(SlotIndex(0)), 0, "a neighbour's bit stays clear");
        assert_eq!(slots.evictable(), 2);
        assert!(!slots.unpin(s));
        assert!(!slots.unpin(s));
        assert_eq!(slots.pins(s), 1);
        assert_eq!(slots.evictable(), 2, "still pinned once");
        assert!(!slots.unpin(s));
        assert_eq!(slots.pins(s), 0);
        assert_eq!(slots.evictable(), 3);
        // A stale slot: freeable once unpinned, and unpin says so.
        let t = SlotIndex(129);
        slots.pin(t);
        slots.pin(t);
        slots.set_state(t, SlotState::Stale);
        assert_eq!(slots.evictable(), 2);
        assert!(!slots.freeable(t));
        assert!(!slots.unpin(t));
        assert!(!slots.freeable(t));
        assert!(slots.unpin(t), "the last unpin of a stale slot frees it");
        assert!(slots.freeable(t));
    }
}
