//! WOW: CSCAN with a CLOCK recency bit per write group (Gill & Modha, FAST'05,
//! Fig. 4). Groups are inserted in sorted position with recency 0; a hit sets
//! it to 1 (a write-group hit only if the write is not sequential, lines 2-4;
//! a page hit always, lines 5-6); the destage pointer sweeps upward, clearing
//! set bits and skipping those groups, and destages the first group whose bit
//! is 0. The bits live with the candidates (the engine's dirty set).

use super::cscan::Pointer;
use super::{Candidates, DestageOrder, GroupHit, GroupKey};

#[derive(Default)]
pub struct Wow {
    pointer: Pointer,
}

impl DestageOrder for Wow {
    fn name(&self) -> &'static str {
        "wow"
    }
    fn insert(&mut self, c: &mut dyn Candidates, key: GroupKey) {
        c.set_recent(key, false); // line 14
        self.pointer.inserted(c, key);
    }
    fn hit(&mut self, c: &mut dyn Candidates, key: GroupKey, hit: GroupHit) {
        if !hit.sequential || hit.page_hit {
            c.set_recent(key, true); // lines 2-4 and 5-6
        }
    }
    fn remove(&mut self, c: &mut dyn Candidates, key: GroupKey) {
        self.pointer.removed(c, key);
    }
    fn pick(&mut self, c: &mut dyn Candidates) -> Option<GroupKey> {
        loop {
            let key = self.pointer.current(c)?;
            self.pointer.advance(c);
            if c.recent(key) {
                c.set_recent(key, false); // lines 20-23
                continue;
            }
            return Some(key); // lines 24-26
        }
    }
    fn peek(&self, c: &dyn Candidates) -> Option<GroupKey> {
        self.pointer.current(c)
    }
    fn metadata_bytes(&self) -> usize {
        0
    }
}
