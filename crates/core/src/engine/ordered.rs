//! Ordered write-back's order (Koller et al., FAST'13 §3.1): which page
//! versions may be destaged now so that the backing alone always holds a
//! state the writes' completion-issue dependencies allow.
//!
//! The paper keeps a dependency graph: a write depends on every write that
//! completed before it was issued. Numbering completions 1, 2, … makes that
//! graph two integers per write, with no edges: write B depends on A exactly
//! when A's completion number is at most the number of completions B saw
//! at its issue (`issued_after`). So with `destaged` the longest prefix of
//! completion numbers whose writes are wholly on the backing, B may be
//! destaged once `issued_after(B) <= destaged`; the writes that may be
//! destaged at any moment are independent of each other (the paper's
//! independent sets, its dummy nodes unneeded). Inside that set, pages go
//! in address order (CSCAN from where the last sweep stopped) rather than
//! the paper's order of discovery, so the consistent policy keeps some
//! spatial locality. A page's versions go oldest first, one at a time.

use super::*;
use std::collections::BTreeMap;

/// One write request (a node of the paper's graph).
struct Node {
    /// Completions seen when it was issued: it depends on exactly those.
    issued_after: u64,
    /// Its completion number (0: not answered yet).
    completion: u64,
    completed: bool,
    /// Its page versions not yet on the backing.
    pending: u32,
    /// Its page versions, made ready once it is eligible.
    slots: Vec<SlotIndex>,
    eligible: bool,
}

pub(super) struct Ordered {
    /// Writes by issue number, from `base`; done ones leave the front.
    nodes: VecDeque<Node>,
    base: u64,
    completions: u64,
    /// Issue numbers of completed writes, by completion number from `destaged + 1`.
    by_completion: VecDeque<u64>,
    /// Every write with completion number up to this is on the backing.
    destaged: u64,
    /// The first write (issue number) not yet found to depend only on destaged ones.
    next_unblocked: u64,
    /// Per slot: the issue number (low 32 bits) of the write that made its version.
    slot_node: Vec<u32>,
    /// The next version of each page that may be destaged now, by page key.
    ready: BTreeMap<u64, SlotIndex>,
    /// Where the last sweep of `ready` stopped.
    sweep: u64,
    /// The paper's order instead of the sweep (destage order `lrw`):
    /// versions one at a time as they became ready (entries whose page
    /// changed since are skipped).
    fifo: Option<VecDeque<(u64, SlotIndex)>>,
    /// Dirty versions (current and older) not yet on the backing.
    versions: u64,
    /// Destage at full rate until every write up to this completion number
    /// is on the backing (a page reached the maximum dirty age).
    flush_to: u64,
}

impl Ordered {
    /// `in_readiness_order`: destage versions as they become ready, one
    /// page each (the paper), rather than sweeping them in address order.
    pub fn new(slots: usize, in_readiness_order: bool) -> Ordered {
        Ordered {
            nodes: VecDeque::new(),
            base: 0,
            completions: 0,
            by_completion: VecDeque::new(),
            destaged: 0,
            next_unblocked: 0,
            slot_node: vec![0; slots],
            ready: BTreeMap::new(),
            sweep: 0,
            fifo: in_readiness_order.then(VecDeque::new),
            versions: 0,
            flush_to: 0,
        }
    }

    fn node(&self, id: u64) -> &Node {
        &self.nodes[(id - self.base) as usize]
    }
    fn node_mut(&mut self, id: u64) -> &mut Node {
        &mut self.nodes[(id - self.base) as usize]
    }
    /// The write that made `slot`'s version (valid while it is a node version).
    fn node_of(&self, slot: SlotIndex) -> u64 {
        // Live writes span fewer than 2^32 issue numbers: the low bits name one.
        let low = self.slot_node[slot.0 as usize];
        let id = (self.base & !0xffff_ffff) | u64::from(low);
        if id < self.base {
            id + (1 << 32)
        } else {
            id
        }
    }

    /// Switch between the readiness order and the address sweep (an online
    /// change of destage order): the versions ready now are queued in
    /// address order.
    pub fn set_readiness_order(&mut self, on: bool) {
        self.fifo = on.then(|| self.ready.iter().map(|(&k, &s)| (k, s)).collect());
    }

    /// Destage at full rate until every write answered so far is on the backing.
    pub fn flush_answered(&mut self) {
        self.flush_to = self.completions;
    }
    pub fn flushing(&self) -> bool {
        self.destaged < self.flush_to
    }

    /// Dirty versions, current and older, not yet on the backing.
    pub fn versions(&self) -> u64 {
        self.versions
    }

    pub fn heap_bytes(&self) -> usize {
        self.slot_node.capacity() * 4
            + self.nodes.capacity() * std::mem::size_of::<Node>()
            + self
                .nodes
                .iter()
                .map(|n| n.slots.capacity() * 4)
                .sum::<usize>()
            + self.by_completion.capacity() * 8
            + self.ready.len() * 24
            + self.fifo.as_ref().map_or(0, |f| f.capacity() * 16)
    }
}

impl Engine {
    pub(super) fn ord(&mut self) -> &mut Ordered {
        self.ordered.as_mut().expect("ordered write-back")
    }

    /// A write arrives (its issue): a new node. Returns its issue number.
    pub(super) fn ordered_issue(&mut self) -> u64 {
        let o = self.ord();
        let id = o.base + o.nodes.len() as u64;
        o.nodes.push_back(Node {
            issued_after: o.completions,
            completion: 0,
            completed: false,
            pending: 0,
            slots: Vec::new(),
            eligible: false,
        });
        id
    }

    /// After a restart the writes' order is gone, but the versions' numbers
    /// are a linear extension of it (a write's pages got their numbers
    /// before it was answered, so before any write that depends on it was
    /// issued): each recovered version becomes a write of its own that
    /// depends on every one before it, destaged one at a time in that order.
    pub(super) fn recover_order(&mut self, mut kept: Vec<(u64, SlotIndex)>) {
        kept.sort_unstable();
        for (_, slot) in kept {
            let node = self.ordered_issue();
            self.ordered_version(node, slot);
            self.ordered_complete(node);
        }
    }

    /// Write `node` made a dirty version in `slot`.
    pub(super) fn ordered_version(&mut self, node: u64, slot: SlotIndex) {
        let o = self.ord();
        o.slot_node[slot.0 as usize] = node as u32;
        o.versions += 1;
        let n = o.node_mut(node);
        n.pending += 1;
        n.slots.push(slot);
    }

    /// Write `node` was answered (acknowledged or failed).
    pub(super) fn ordered_complete(&mut self, node: u64) {
        let o = self.ord();
        o.completions += 1;
        o.by_completion.push_back(node);
        let completion = o.completions;
        let n = o.node_mut(node);
        n.completed = true;
        n.completion = completion;
        let unblocked = n.issued_after <= o.destaged;
        if unblocked {
            self.ordered_make_eligible(node);
        }
        self.ordered_advance();
    }

    /// The version in `slot` is no longer owed to the backing: it was
    /// destaged, or its page write failed and was undone.
    pub(super) fn ordered_version_done(&mut self, slot: SlotIndex) {
        let o = self.ord();
        let node = o.node_of(slot);
        o.node_mut(node).pending -= 1;
        o.versions -= 1;
        self.ordered_advance();
    }

    /// Move `destaged` over the completed writes wholly on the backing,
    /// make the writes that now depend only on destaged ones eligible, and
    /// drop the nodes nothing needs any more.
    fn ordered_advance(&mut self) {
        let o = self.ord();
        while let Some(&front) = o.by_completion.front() {
            if o.node(front).pending > 0 {
                break;
            }
            o.by_completion.pop_front();
            o.destaged += 1;
        }
        let mut unblocked = Vec::new();
        while o.next_unblocked < o.base + o.nodes.len() as u64 {
            let id = o.next_unblocked;
            let n = o.node(id);
            if n.issued_after > o.destaged {
                break;
            }
            if n.completed && !n.eligible {
                unblocked.push(id);
            }
            o.next_unblocked += 1;
        }
        for id in unblocked {
            self.ordered_make_eligible(id);
        }
        let o = self.ord();
        while let Some(front) = o.nodes.front() {
            // Answered, on the backing, out of `by_completion`, and passed
            // by the unblocking walk: nothing looks it up any more.
            let done = front.completed
                && front.pending == 0
                && front.completion <= o.destaged
                && o.base < o.next_unblocked;
            if !done {
                break;
            }
            o.nodes.pop_front();
            o.base += 1;
        }
    }

    /// Every version of eligible write `node` that is next in its page's
    /// order may be destaged now.
    fn ordered_make_eligible(&mut self, node: u64) {
        let o = self.ord();
        let n = o.node_mut(node);
        n.eligible = true;
        let slots = std::mem::take(&mut n.slots);
        for &slot in &slots {
            if self.ord().node_of(slot) == node && self.is_node_version(slot) {
                let key = self.slots.key(slot);
                self.ordered_page_changed(key);
            }
        }
        self.ord().node_mut(node).slots = slots;
    }

    /// A version a node still counts: dirty, current or older.
    fn is_node_version(&self, slot: SlotIndex) -> bool {
        matches!(
            self.slots.state(slot),
            SlotState::Dirty | SlotState::OldDirty
        ) && !self.slots.has(slot, FLAG_DESTAGING)
    }

    /// Re-find the version of `key`'s page that may be destaged now: its
    /// oldest version not on the backing, once no older one is being
    /// destaged and its write is eligible.
    pub(super) fn ordered_page_changed(&mut self, key: PageKey) {
        let next = self.next_version_to_destage(key);
        let o = self.ord();
        match next {
            Some(slot) if o.node(o.node_of(slot)).eligible => {
                if o.ready.insert(key.0, slot) != Some(slot) {
                    if let Some(f) = &mut o.fifo {
                        f.push_back((key.0, slot));
                    }
                }
            }
            _ => {
                o.ready.remove(&key.0);
            }
        }
    }

    /// The page's oldest version decides: an older dirty one not being
    /// destaged goes next; one being destaged, or (persistent caches) one
    /// destaged whose record is not yet freed, holds every newer one back,
    /// so a crash never finds an older record over a newer destaged page.
    fn next_version_to_destage(&self, key: PageKey) -> Option<SlotIndex> {
        if let Some(&oldest) = self.old_versions.get(&key.0).and_then(|q| q.front()) {
            let next = self.slots.state(oldest) == SlotState::OldDirty
                && !self.slots.has(oldest, FLAG_DESTAGING);
            return next.then_some(oldest);
        }
        let cur = self.slots.lookup(key)?;
        (self.slots.state(cur) == SlotState::Dirty && !self.slots.has(cur, FLAG_DESTAGING))
            .then_some(cur)
    }

    /// Issue destages of ready versions, in address order from where the
    /// last sweep stopped, until `target` are outstanding: runs of
    /// consecutive pages of one write group go as one destage.
    pub(super) fn start_ordered_destages(&mut self, target: u32) {
        let group_pages = u64::from(self.geometry.group_pages());
        let starts_group = |key: u64| PageKey(key).page().0.is_multiple_of(group_pages);
        while self.destager.in_flight() < target {
            if self.ord().fifo.is_some() {
                if !self.start_oldest_ready() {
                    return;
                }
                continue;
            }
            let o = self.ord();
            let first = o
                .ready
                .range(o.sweep..)
                .next()
                .or_else(|| o.ready.iter().next())
                .map(|(&k, &s)| (k, s));
            let Some((key, slot)) = first else {
                return;
            };
            let mut run = vec![slot];
            let mut next = key + 1;
            while !starts_group(next) {
                match o.ready.get(&next) {
                    Some(&s) => run.push(s),
                    None => break,
                }
                next += 1;
            }
            for k in key..next {
                o.ready.remove(&k);
            }
            o.sweep = next;
            for &s in &run {
                self.slots.set_flag(s, FLAG_DESTAGING, true);
            }
            let first_key = PageKey(key);
            self.stats.destage_picks += 1;
            self.issue_destage(first_key.volume(), first_key.page(), run);
        }
    }

    /// Readiness order: destage the version that became ready first, alone.
    /// Returns false when none is ready.
    fn start_oldest_ready(&mut self) -> bool {
        let o = self.ord();
        let fifo = o.fifo.as_mut().expect("readiness order");
        while let Some((key, slot)) = fifo.pop_front() {
            if o.ready.get(&key) != Some(&slot) {
                continue; // changed since it was queued
            }
            o.ready.remove(&key);
            self.slots.set_flag(slot, FLAG_DESTAGING, true);
            self.stats.destage_picks += 1;
            let k = PageKey(key);
            self.issue_destage(k.volume(), k.page(), vec![slot]);
            return true;
        }
        false
    }
}
