//! CSCAN: destage candidates in ascending address order, wrapping around
//! (spatial locality only). A sorted ring of groups and a destage pointer.

use super::{DestageOrder, GroupHit, GroupId};
use std::collections::BTreeMap;

/// Candidates sorted by key, closed into a ring, with Fig. 4's destage pointer.
/// Invariant: when not empty, `pointer_key` is the key of a candidate.
#[derive(Default)]
pub(super) struct SortedRing {
    sorted: BTreeMap<u64, u32>,
    pointer_key: u64,
}

impl SortedRing {
    pub(super) fn insert(&mut self, key: u64, id: u32) {
        let old = self.sorted.insert(key, id);
        debug_assert!(old.is_none(), "group inserted twice");
        if self.sorted.len() == 1 {
            self.pointer_key = key; // line 16: the only group
        }
    }
    pub(super) fn remove(&mut self, key: u64) {
        let removed = self.sorted.remove(&key);
        debug_assert!(
            removed.is_some(),
            "removing a group that is not a candidate"
        );
        if key == self.pointer_key {
            self.advance_from(key);
        }
    }
    /// The candidate under the pointer.
    pub(super) fn current(&self) -> Option<(u64, u32)> {
        if self.sorted.is_empty() {
            return None;
        }
        let id = self.sorted.get(&self.pointer_key);
        debug_assert!(id.is_some(), "pointer off the ring");
        id.map(|&id| (self.pointer_key, id))
    }
    /// Lines 28-33: move to the next higher candidate, or wrap to the lowest.
    pub(super) fn advance_from(&mut self, key: u64) {
        let next = self
            .sorted
            .range((std::ops::Bound::Excluded(key), std::ops::Bound::Unbounded))
            .next()
            .or_else(|| self.sorted.iter().next());
        if let Some((&k, _)) = next {
            self.pointer_key = k;
        }
    }
    /// Remove the candidate under the pointer and advance (lines 24-26).
    pub(super) fn take_current(&mut self) -> Option<u32> {
        let (key, id) = self.current()?;
        self.sorted.remove(&key);
        self.advance_from(key);
        Some(id)
    }
    pub(super) fn len(&self) -> usize {
        self.sorted.len()
    }
    /// Estimated heap bytes of the `BTreeMap<u64, u32>`: leaves of 11 slots of
    /// 12 bytes plus a header, at the ~2/3 fill random inserts leave. The
    /// benchmark measures the real total with a counting allocator.
    pub(super) fn heap_bytes(&self) -> usize {
        let leaf_bytes = 11 * 12 + 16;
        (self.sorted.len() * 3).div_ceil(2 * 11) * leaf_bytes
    }
}

#[derive(Default)]
pub struct Cscan {
    ring: SortedRing,
}

impl DestageOrder for Cscan {
    fn name(&self) -> &'static str {
        "cscan"
    }
    fn insert(&mut self, group: GroupId, key: u64) {
        self.ring.insert(key, group.0);
    }
    fn hit(&mut self, _group: GroupId, _key: u64, _hit: GroupHit) {}
    fn remove(&mut self, _group: GroupId, key: u64) {
        self.ring.remove(key);
    }
    fn pick(&mut self) -> Option<GroupId> {
        self.ring.take_current().map(GroupId)
    }
    fn peek(&self) -> Option<GroupId> {
        self.ring.current().map(|(_, g)| GroupId(g))
    }
    fn len(&self) -> usize {
        self.ring.len()
    }
    fn metadata_bytes(&self) -> usize {
        self.ring.heap_bytes()
    }
}
