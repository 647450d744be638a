//! Index-linked lists and bit sets shared by the policies.
//!
//! Exists so that LRU, CLOCK, ARC and LRW keep their per-entry state in flat
//! arrays of `u32` links and bits instead of pointers or per-call allocation.
//! It never allocates after construction, except when an owner whose ids
//! grow (LRW's write groups) asks for more room with `grow_to`.

/// "No entry": the end of a list, or an unused link.
pub(crate) const NIL: u32 = u32::MAX;

/// `prev`/`next` links for up to `capacity` entries, threaded into any number
/// of disjoint lists (`List`). An entry is in at most one list at a time;
/// which one is the owner's business (a bit set or a state array).
#[derive(Debug)]
pub(crate) struct Links {
    prev: Vec<u32>,
    next: Vec<u32>,
}

/// One list over `Links`: `head` is the most recent end, `tail` the oldest.
#[derive(Debug, Clone, Copy)]
pub(crate) struct List {
    head: u32,
    tail: u32,
    len: u32,
}

impl List {
    pub(crate) const fn new() -> List {
        List {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }
    /// The oldest entry (the LRU end).
    pub(crate) fn tail(&self) -> Option<u32> {
        (self.tail != NIL).then_some(self.tail)
    }
}

impl Links {
    pub(crate) fn new(capacity: usize) -> Links {
        assert!(
            capacity < NIL as usize,
            "capacity must fit u32 indices below NIL"
        );
        Links {
            prev: vec![NIL; capacity],
            next: vec![NIL; capacity],
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.prev.len()
    }

    /// Assert that `index` fits these links (a slot beyond the policy's
    /// capacity is a programmer error of the caller).
    pub(crate) fn assert_index(&self, index: u32) {
        assert!(
            (index as usize) < self.capacity(),
            "slot {index} beyond policy capacity {}",
            self.capacity()
        );
    }

    /// Make room for indices below `capacity` (amortized: doubles).
    pub(crate) fn grow_to(&mut self, capacity: usize) {
        if capacity <= self.prev.len() {
            return;
        }
        assert!(
            capacity < NIL as usize,
            "capacity must fit u32 indices below NIL"
        );
        let capacity = capacity.max(self.prev.len() * 2);
        self.prev.resize(capacity, NIL);
        self.next.resize(capacity, NIL);
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        (self.prev.capacity() + self.next.capacity()) * std::mem::size_of::<u32>()
    }

    /// Make `index` the head (most recent) of `list`. `index` must be in no list.
    pub(crate) fn push_head(&mut self, list: &mut List, index: u32) {
        let i = index as usize;
        debug_assert_eq!(self.prev[i], NIL);
        debug_assert_eq!(self.next[i], NIL);
        self.next[i] = list.head;
        if list.head == NIL {
            list.tail = index;
        } else {
            self.prev[list.head as usize] = index;
        }
        list.head = index;
        list.len += 1;
    }

    /// Take `index` out of `list`. `index` must be in `list`.
    pub(crate) fn unlink(&mut self, list: &mut List, index: u32) {
        let i = index as usize;
        assert!(list.len > 0, "unlink from an empty list");
        let prev = self.prev[i];
        let next = self.next[i];
        if prev == NIL {
            debug_assert_eq!(list.head, index);
            list.head = next;
        } else {
            self.next[prev as usize] = next;
        }
        if next == NIL {
            debug_assert_eq!(list.tail, index);
            list.tail = prev;
        } else {
            self.prev[next as usize] = prev;
        }
        self.prev[i] = NIL;
        self.next[i] = NIL;
        list.len -= 1;
    }

    /// Take the tail (oldest) out of `list`.
    pub(crate) fn pop_tail(&mut self, list: &mut List) -> Option<u32> {
        let tail = list.tail()?;
        self.unlink(list, tail);
        Some(tail)
    }

    /// Move `index`, already in `list`, to its head.
    pub(crate) fn move_to_head(&mut self, list: &mut List, index: u32) {
        if list.head != index {
            self.unlink(list, index);
            self.push_head(list, index);
        }
    }
}

/// A fixed-size set of bits, one per entry.
#[derive(Debug)]
pub(crate) struct Bits {
    words: Vec<u64>,
}

impl Bits {
    pub(crate) fn new(capacity: usize) -> Bits {
        Bits {
            words: vec![0; capacity.div_ceil(64)],
        }
    }
    pub(crate) fn get(&self, index: u32) -> bool {
        let i = index as usize;
        self.words[i / 64] & (1 << (i % 64)) != 0
    }
    pub(crate) fn set(&mut self, index: u32, value: bool) {
        let i = index as usize;
        let mask = 1u64 << (i % 64);
        if value {
            self.words[i / 64] |= mask;
        } else {
            self.words[i / 64] &= !mask;
        }
    }
    pub(crate) fn heap_bytes(&self) -> usize {
        self.words.capacity() * std::mem::size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_order_and_unlink() {
        let mut links = Links::new(4);
        let mut list = List::new();
        for i in 0..4 {
            links.push_head(&mut list, i);
        }
        assert_eq!(list.len(), 4);
        assert_eq!(list.tail(), Some(0));
        links.unlink(&mut list, 0);
        assert_eq!(list.tail(), Some(1));
        links.move_to_head(&mut list, 1);
        assert_eq!(links.pop_tail(&mut list), Some(2));
        assert_eq!(links.pop_tail(&mut list), Some(3));
        assert_eq!(links.pop_tail(&mut list), Some(1));
        assert_eq!(links.pop_tail(&mut list), None);
        assert_eq!(list.len(), 0);
    }

    #[test]
    fn bits_set_and_clear() {
        let mut bits = Bits::new(130);
        bits.set(129, true);
        bits.set(3, true);
        assert!(bits.get(129));
        assert!(bits.get(3));
        assert!(!bits.get(4));
        bits.set(129, false);
        assert!(!bits.get(129));
        assert_eq!(bits.heap_bytes(), 24);
    }
}
