//! LRW: destage the least-recently written group (temporal locality only).
//! A linked list over its own dense group ids (the policies' shared `Links`)
//! and a map from group key to id: O(1) everything.

use super::{Candidates, DestageOrder, GroupHit, GroupKey};
use crate::policy::links::{Links, List};
use rustc_hash::FxHashMap as HashMap;

pub struct Lrw {
    ids: HashMap<GroupKey, u32>,
    keys: Vec<GroupKey>,
    free: Vec<u32>,
    links: Links,
    /// Head: most recently written; tail: least recently written.
    order: List,
}

impl Default for Lrw {
    fn default() -> Self {
        Lrw {
            ids: HashMap::default(),
            keys: Vec::new(),
            free: Vec::new(),
            links: Links::new(0),
            order: List::new(),
        }
    }
}

impl Lrw {
    fn forget(&mut self, key: GroupKey) -> u32 {
        let id = self.ids.remove(&key).expect("candidate known to LRW");
        self.free.push(id);
        id
    }
}

impl DestageOrder for Lrw {
    fn name(&self) -> &'static str {
        "lrw"
    }
    fn in_readiness_order(&self) -> bool {
        true
    }
    fn insert(&mut self, _c: &mut dyn Candidates, key: GroupKey) {
        let id = match self.free.pop() {
            Some(id) => {
                self.keys[id as usize] = key;
                id
            }
            None => {
                self.keys.push(key);
                self.links.grow_to(self.keys.len());
                self.keys.len() as u32 - 1
            }
        };
        let old = self.ids.insert(key, id);
        debug_assert!(old.is_none(), "group inserted twice");
        self.links.push_head(&mut self.order, id);
    }
    fn hit(&mut self, _c: &mut dyn Candidates, key: GroupKey, _hit: GroupHit) {
        let id = self.ids[&key];
        self.links.move_to_head(&mut self.order, id);
    }
    fn remove(&mut self, _c: &mut dyn Candidates, key: GroupKey) {
        let id = self.forget(key);
        self.links.unlink(&mut self.order, id);
    }
    fn pick(&mut self, _c: &mut dyn Candidates) -> Option<GroupKey> {
        let id = self.links.pop_tail(&mut self.order)?;
        let key = self.keys[id as usize];
        self.forget(key);
        Some(key)
    }
    fn peek(&self, _c: &dyn Candidates) -> Option<GroupKey> {
        self.order.tail().map(|id| self.keys[id as usize])
    }
    fn metadata_bytes(&self) -> usize {
        self.ids.capacity() * 13
            + self.keys.capacity() * 8
            + self.free.capacity() * 4
            + self.links.heap_bytes()
    }
}
