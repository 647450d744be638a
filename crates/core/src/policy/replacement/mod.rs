//! Clean-page replacement: which clean cached page gives up its slot when a
//! free slot is needed. Dirty pages are never here; they leave by destage.
//!
//! Policies index their state by slot (arrays sized at start, O(1) per call).

use crate::types::{PageKey, SlotIndex};

/// A clean-page replacement policy. The engine calls, for each clean page:
/// `insert` once when it becomes clean and resident, `hit` on every read hit,
/// and either `remove` (it became dirty or was trimmed) or `evict` (chosen as
/// victim) once to end its stay.
pub trait Replacement: Send {
    fn name(&self) -> &'static str;
    /// `slot` now holds clean page `key`. `slot` must not be present.
    fn insert(&mut self, slot: SlotIndex, key: PageKey);
    /// A read hit on the clean page in `slot`.
    fn hit(&mut self, slot: SlotIndex);
    /// `slot` stops being a clean page without being a victim (no history kept).
    fn remove(&mut self, slot: SlotIndex);
    /// Choose a victim, forget it (keeping history if the policy does), return its slot.
    fn evict(&mut self) -> Option<SlotIndex>;
    /// Clean pages currently held.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Heap bytes of the policy's metadata (for the memory report).
    fn metadata_bytes(&self) -> usize;
}
