//! CLOCK (second chance): LRU's hit rate at a fraction of its hit cost.
//!
//! Exists because a hit only sets a bit (no list surgery), which is what a
//! busy read path wants. The textbook clock is a ring of pages with a hand;
//! a new page goes just behind the hand with its reference bit clear (as in
//! Bansal & Modha, CAR, FAST'04). We keep the ring as a queue threaded through
//! `u32` links indexed by slot: the tail is the hand, "advance the hand past a
//! referenced page" is "clear its bit and move it to the head", and the head is
//! "just behind the hand". This is the same order as the ring, and unlike a
//! ring over slot numbers it never sweeps over free or dirty slots.
//!
//! `evict` is O(1) amortized: each page it passes over had its bit set by a
//! hit since it was last passed, so it passes at most `len()` pages per call
//! and, over time, no more pages than there were hits. Nothing allocates.

use super::Replacement;
use crate::policy::links::{Bits, Links, List};
use crate::types::{PageKey, SlotIndex};

pub struct Clock {
    links: Links,
    /// Slot holds a clean page known to this policy.
    present: Bits,
    /// Reference bit: hit since the hand last passed.
    referenced: Bits,
    /// Tail: the hand. Head: just behind the hand.
    ring: List,
}

impl Clock {
    pub const NAME: &'static str = "clock";

    pub fn new(slots: usize) -> Clock {
        Clock {
            links: Links::new(slots),
            present: Bits::new(slots),
            referenced: Bits::new(slots),
            ring: List::new(),
        }
    }
}

impl Replacement for Clock {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn insert(&mut self, slot: SlotIndex, _key: PageKey) {
        self.links.assert_index(slot.0);
        assert!(!self.present.get(slot.0), "insert: slot already present");
        self.present.set(slot.0, true);
        self.referenced.set(slot.0, false);
        self.links.push_head(&mut self.ring, slot.0);
    }

    fn hit(&mut self, slot: SlotIndex) {
        self.links.assert_index(slot.0);
        assert!(self.present.get(slot.0), "hit: slot not present");
        self.referenced.set(slot.0, true);
    }

    fn remove(&mut self, slot: SlotIndex) {
        self.links.assert_index(slot.0);
        assert!(self.present.get(slot.0), "remove: slot not present");
        self.links.unlink(&mut self.ring, slot.0);
        self.present.set(slot.0, false);
        self.referenced.set(slot.0, false);
    }

    fn evict(&mut self) -> Option<SlotIndex> {
        // Terminates: each pass clears one bit, and a page with a clear bit
        // stops the hand, so at most len() + 1 steps.
        loop {
            let hand = self.ring.tail()?;
            if !self.referenced.get(hand) {
                break;
            }
            self.referenced.set(hand, false);
            self.links.move_to_head(&mut self.ring, hand);
        }
        let victim = self.links.pop_tail(&mut self.ring)?;
        debug_assert!(self.present.get(victim));
        self.present.set(victim, false);
        Some(SlotIndex(victim))
    }

    fn len(&self) -> usize {
        self.ring.len()
    }

    fn metadata_bytes(&self) -> usize {
        self.links.heap_bytes() + self.present.heap_bytes() + self.referenced.heap_bytes()
    }
}
