//! LRW: destage the least-recently written group (temporal locality only).
//! A linked list over group ids (the policies' shared `Links`): O(1) everything.

use super::{DestageOrder, GroupHit, GroupId};
use crate::policy::links::{Links, List};

pub struct Lrw {
    links: Links,
    /// Head: most recently written; tail: least recently written.
    order: List,
}

impl Default for Lrw {
    fn default() -> Self {
        Lrw {
            links: Links::new(0),
            order: List::new(),
        }
    }
}

impl DestageOrder for Lrw {
    fn name(&self) -> &'static str {
        "lrw"
    }
    fn insert(&mut self, group: GroupId, _key: u64) {
        self.links.grow_to(group.0 as usize + 1);
        self.links.push_head(&mut self.order, group.0);
    }
    fn hit(&mut self, group: GroupId, _key: u64, _hit: GroupHit) {
        self.links.move_to_head(&mut self.order, group.0);
    }
    fn remove(&mut self, group: GroupId, _key: u64) {
        self.links.unlink(&mut self.order, group.0);
    }
    fn pick(&mut self) -> Option<GroupId> {
        self.links.pop_tail(&mut self.order).map(GroupId)
    }
    fn peek(&self) -> Option<GroupId> {
        self.order.tail().map(GroupId)
    }
    fn len(&self) -> usize {
        self.order.len()
    }
    fn metadata_bytes(&self) -> usize {
        self.links.heap_bytes()
    }
}
