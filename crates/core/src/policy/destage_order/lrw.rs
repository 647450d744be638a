//! LRW: destage the least-recently written group (temporal locality only).
//! An intrusive doubly linked list over group ids: O(1) everything.

use super::{DestageOrder, GroupHit, GroupId};

const NIL: u32 = u32::MAX;

#[derive(Default)]
pub struct Lrw {
    prev: Vec<u32>,
    next: Vec<u32>,
    /// Least recently written.
    head: u32,
    /// Most recently written.
    tail: u32,
    len: usize,
}

impl Lrw {
    fn ensure(&mut self, id: u32) {
        if self.prev.is_empty() {
            self.head = NIL;
            self.tail = NIL;
        }
        let need = id as usize + 1;
        if self.prev.len() < need {
            self.prev.resize(need, NIL);
            self.next.resize(need, NIL);
        }
    }
    fn push_tail(&mut self, id: u32) {
        self.prev[id as usize] = self.tail;
        self.next[id as usize] = NIL;
        if self.tail == NIL {
            self.head = id;
        } else {
            self.next[self.tail as usize] = id;
        }
        self.tail = id;
        self.len += 1;
    }
    fn unlink(&mut self, id: u32) {
        let (p, n) = (self.prev[id as usize], self.next[id as usize]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.len -= 1;
    }
}

impl DestageOrder for Lrw {
    fn name(&self) -> &'static str {
        "lrw"
    }
    fn insert(&mut self, group: GroupId, _key: u64) {
        self.ensure(group.0);
        self.push_tail(group.0);
    }
    fn hit(&mut self, group: GroupId, _key: u64, _hit: GroupHit) {
        self.unlink(group.0);
        self.push_tail(group.0);
    }
    fn remove(&mut self, group: GroupId, _key: u64) {
        self.unlink(group.0);
    }
    fn pick(&mut self) -> Option<GroupId> {
        if self.len == 0 {
            return None;
        }
        let id = self.head;
        self.unlink(id);
        Some(GroupId(id))
    }
    fn peek(&self) -> Option<GroupId> {
        (self.len > 0).then_some(GroupId(self.head))
    }
    fn len(&self) -> usize {
        self.len
    }
    fn metadata_bytes(&self) -> usize {
        (self.prev.capacity() + self.next.capacity()) * 4
    }
}
