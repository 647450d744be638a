//! WOW: CSCAN with a CLOCK recency bit per write group (Gill & Modha, FAST'05,
//! Fig. 4). Groups are inserted in sorted position with recency 0; a hit sets
//! it to 1 (a write-group hit only if the write is not sequential, lines 2-4;
//! a page hit always, lines 5-6); the destage pointer sweeps upward, clearing
//! set bits and skipping those groups, and destages the first group whose bit
//! is 0.

use super::cscan::SortedRing;
use super::{DestageOrder, GroupHit, GroupId};

#[derive(Default)]
pub struct Wow {
    ring: SortedRing,
    recency: Vec<bool>,
}

impl Wow {
    fn set_bit(&mut self, id: u32, value: bool) {
        let i = id as usize;
        if self.recency.len() <= i {
            self.recency.resize(i + 1, false);
        }
        self.recency[i] = value;
    }
}

impl DestageOrder for Wow {
    fn name(&self) -> &'static str {
        "wow"
    }
    fn insert(&mut self, group: GroupId, key: u64) {
        self.ring.insert(key, group.0);
        self.set_bit(group.0, false); // line 14
    }
    fn hit(&mut self, group: GroupId, _key: u64, hit: GroupHit) {
        if !hit.sequential || hit.page_hit {
            self.set_bit(group.0, true); // lines 2-4 and 5-6
        }
    }
    fn remove(&mut self, _group: GroupId, key: u64) {
        self.ring.remove(key);
    }
    fn pick(&mut self) -> Option<GroupId> {
        loop {
            let (key, group) = self.ring.current()?;
            if self.recency[group as usize] {
                self.recency[group as usize] = false; // lines 20-23
                self.ring.advance_from(key);
                continue;
            }
            return self.ring.take_current().map(GroupId); // lines 24-26
        }
    }
    fn peek(&self) -> Option<GroupId> {
        self.ring.current().map(|(_, g)| GroupId(g))
    }
    fn len(&self) -> usize {
        self.ring.len()
    }
    fn metadata_bytes(&self) -> usize {
        self.ring.heap_bytes() + self.recency.capacity()
    }
}
