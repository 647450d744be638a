//! LRU: evict the clean page whose last insert or hit is oldest.
//!
//! Exists as the baseline every other policy is measured against. One list
//! threaded through `u32` links indexed by slot; every call is O(1) and none
//! allocates. It keeps no history and never looks at page keys.

use super::Replacement;
use crate::policy::links::{Bits, Links, List};
use crate::types::{PageKey, SlotIndex};

pub struct Lru {
    links: Links,
    /// Slot holds a clean page known to this policy.
    present: Bits,
    /// Head: most recently used. Tail: the next victim.
    queue: List,
}

impl Lru {
    pub const NAME: &'static str = "lru";

    pub fn new(slots: usize) -> Lru {
        Lru {
            links: Links::new(slots),
            present: Bits::new(slots),
            queue: List::new(),
        }
    }
}

impl Replacement for Lru {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn insert(&mut self, slot: SlotIndex, _key: PageKey) {
        self.links.assert_index(slot.0);
        assert!(!self.present.get(slot.0), "insert: slot already present");
        self.present.set(slot.0, true);
        self.links.push_head(&mut self.queue, slot.0);
    }

    fn hit(&mut self, slot: SlotIndex) {
        self.links.assert_index(slot.0);
        assert!(self.present.get(slot.0), "hit: slot not present");
        self.links.move_to_head(&mut self.queue, slot.0);
    }

    fn remove(&mut self, slot: SlotIndex) {
        self.links.assert_index(slot.0);
        assert!(self.present.get(slot.0), "remove: slot not present");
        self.links.unlink(&mut self.queue, slot.0);
        self.present.set(slot.0, false);
    }

    fn evict(&mut self) -> Option<SlotIndex> {
        let victim = self.links.pop_tail(&mut self.queue)?;
        debug_assert!(self.present.get(victim));
        self.present.set(victim, false);
        Some(SlotIndex(victim))
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn metadata_bytes(&self) -> usize {
        self.links.heap_bytes() + self.present.heap_bytes()
    }
}
