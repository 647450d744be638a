//! The slots whose `FreeSlots` waits to go out, oldest first, with a bit per
//! slot so that asking whether a slot waits, or taking it out of the queue,
//! costs the same however many wait (log mode asks for every slot the
//! tail passes, and a full log can hold a free for most of its slots).

use std::collections::VecDeque;

use crate::types::SlotIndex;

pub(super) struct FreeQueue {
    /// In queue order; an entry whose bit is clear was taken out (it is
    /// skipped, and dropped when the queue is compacted).
    order: VecDeque<SlotIndex>,
    waiting: Vec<u64>,
    len: usize,
}

impl FreeQueue {
    pub(super) fn new(slots: u32) -> FreeQueue {
        FreeQueue {
            order: VecDeque::new(),
            waiting: vec![0; (slots as usize).div_ceil(64)],
            len: 0,
        }
    }

    fn bit(slot: SlotIndex) -> (usize, u64) {
        (slot.0 as usize / 64, 1u64 << (slot.0 % 64))
    }

    pub(super) fn contains(&self, slot: SlotIndex) -> bool {
        let (w, b) = Self::bit(slot);
        self.waiting[w] & b != 0
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `slot` waits for its free (once: it must not wait already).
    pub(super) fn push(&mut self, slot: SlotIndex) {
        assert!(
            !self.contains(slot),
            "slot {} queued for a free twice",
            slot.0
        );
        let (w, b) = Self::bit(slot);
        self.waiting[w] |= b;
        self.order.push_back(slot);
        self.len += 1;
    }

    /// `slot` no longer waits (its free goes another way).
    pub(super) fn remove(&mut self, slot: SlotIndex) {
        assert!(
            self.contains(slot),
            "slot {} does not wait for a free",
            slot.0
        );
        let (w, b) = Self::bit(slot);
        self.waiting[w] &= !b;
        self.len -= 1;
        if self.order.len() > 2 * self.len + 64 {
            let waiting = &self.waiting;
            self.order.retain(|&s| {
                let (w, b) = Self::bit(s);
                waiting[w] & b != 0
            });
        }
    }

    /// Takes the `n` oldest waiting slots (all of them if fewer wait).
    pub(super) fn take_front(&mut self, n: usize) -> Vec<SlotIndex> {
        let mut out = Vec::with_capacity(n.min(self.len));
        while out.len() < n {
            let Some(slot) = self.order.pop_front() else {
                break;
            };
            if self.contains(slot) {
                let (w, b) = Self::bit(slot);
                self.waiting[w] &= !b;
                self.len -= 1;
                out.push(slot);
            }
        }
        out
    }

    /// Takes every waiting slot, oldest first.
    pub(super) fn take_all(&mut self) -> Vec<SlotIndex> {
        self.take_front(self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_leave_in_order_once_whether_taken_or_removed() {
        let mut q = FreeQueue::new(200);
        for s in [5, 130, 7, 64] {
            q.push(SlotIndex(s));
        }
        q.remove(SlotIndex(130));
        assert!(!q.contains(SlotIndex(130)) && q.contains(SlotIndex(7)));
        assert_eq!(q.len(), 3);
        // Queued again after its removal, it leaves once (here from its
        // first place).
        q.push(SlotIndex(130));
        assert_eq!(q.take_front(2), vec![SlotIndex(5), SlotIndex(130)]);
        assert_eq!(q.take_all(), vec![SlotIndex(7), SlotIndex(64)]);
        assert!(q.is_empty() && q.take_all().is_empty());
    }
}
