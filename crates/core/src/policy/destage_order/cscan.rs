//! CSCAN: destage candidates in ascending address order, wrapping around
//! (spatial locality only). The candidates are the engine's sorted set; this
//! keeps Fig. 4's destage pointer on it.

use super::{Candidates, DestageOrder, GroupHit, GroupKey};

/// Fig. 4's destage pointer over the sorted candidates.
/// Invariant: when there are candidates, `key` is one of them.
#[derive(Default)]
pub(super) struct Pointer {
    key: GroupKey,
}

impl Pointer {
    /// Lines 11-17: a group became a candidate.
    pub(super) fn inserted(&mut self, c: &dyn Candidates, key: GroupKey) {
        if c.len() == 1 {
            self.key = key; // line 16: the only group
        }
    }
    /// A group left the candidates without being picked.
    pub(super) fn removed(&mut self, c: &dyn Candidates, key: GroupKey) {
        if key == self.key {
            self.advance(c);
        }
    }
    /// The candidate under the pointer.
    pub(super) fn current(&self, c: &dyn Candidates) -> Option<GroupKey> {
        (!c.is_empty()).then_some(self.key)
    }
    /// Lines 28-33: move to the next higher candidate, or wrap to the lowest.
    pub(super) fn advance(&mut self, c: &dyn Candidates) {
        if let Some(k) = c.next(Some(self.key)).or_else(|| c.next(None)) {
            self.key = k;
        }
    }
}

#[derive(Default)]
pub struct Cscan {
    pointer: Pointer,
}

impl DestageOrder for Cscan {
    fn name(&self) -> &'static str {
        "cscan"
    }
    fn insert(&mut self, c: &mut dyn Candidates, key: GroupKey) {
        self.pointer.inserted(c, key);
    }
    fn hit(&mut self, _c: &mut dyn Candidates, _key: GroupKey, _hit: GroupHit) {}
    fn remove(&mut self, c: &mut dyn Candidates, key: GroupKey) {
        self.pointer.removed(c, key);
    }
    fn pick(&mut self, c: &mut dyn Candidates) -> Option<GroupKey> {
        let key = self.pointer.current(c)?;
        self.pointer.advance(c); // lines 24-26
        Some(key)
    }
    fn peek(&self, c: &dyn Candidates) -> Option<GroupKey> {
        self.pointer.current(c)
    }
    fn metadata_bytes(&self) -> usize {
        0
    }
}
