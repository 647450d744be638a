//! Page versions in slots: allocation (free or evicted clean), retirement,
//! old versions kept in order until freed, and the batched `FreeSlots`.

use super::*;

impl Engine {
    /// A slot for a new version of `key`: a free one, else an evicted clean one.
    /// Callers have checked that one exists.
    pub(super) fn alloc_slot(&mut self, key: PageKey) -> SlotIndex {
        if let Some(s) = self.slots.pop_free() {
            return s;
        }
        loop {
            let victim = self
                .replacement
                .evict_for(key)
                .expect("admission counted an evictable slot");
            debug_assert_eq!(self.slots.state(victim), SlotState::Clean);
            self.stats.evictions += 1;
            self.slots.unmap(victim);
            if self.slots.pins(victim) > 0 {
                // Someone still reads it: it leaves the cache and is freed later.
                self.slots.set_state(victim, SlotState::Stale);
                continue;
            }
            self.slots.set_state(victim, SlotState::Free);
            return victim;
        }
    }

    pub(super) fn release_slot_if_free(&mut self, slot: SlotIndex) {
        if self.slots.freeable(slot) {
            self.free_slot(slot);
        }
    }

    pub(super) fn unpin(&mut self, slot: SlotIndex) {
        if self.slots.unpin(slot) {
            self.free_slot(slot);
        }
    }

    /// A stale slot nothing uses any more: back to the pool, or (persistent
    /// caches) first through a `FreeSlots` command, in version order among
    /// its page's old versions.
    pub(super) fn free_slot(&mut self, slot: SlotIndex) {
        debug_assert!(self.slots.freeable(slot));
        if !self.config.persistent {
            self.slots.push_free(slot);
            return;
        }
        self.slots.set_flag(slot, FLAG_FREEING, true);
        if self.slots.has(slot, FLAG_OLD) {
            self.send_oldest_free(self.slots.key(slot).0);
        } else {
            self.queue_free(slot);
        }
    }

    /// A slot's free goes out with the next ones (`emit_frees`); in log
    /// mode, a version its page's current, written version supersedes is
    /// freed at once: recovery reads the log in order, so that newer
    /// version (in a later batch, durable once written) unmaps it anyway,
    /// and while it is current no write can go around the cache to the
    /// page (`around_busy`), so nothing newer reaches the backing behind it.
    fn queue_free(&mut self, slot: SlotIndex) {
        self.slots.set_flag(slot, FLAG_FREE_SENT, true);
        if self.superseded_in_log(slot) {
            self.stats.log_frees_superseded += 1;
            self.complete_free_slots(vec![slot], Ok(()));
        } else {
            self.to_free.push(slot);
        }
    }

    /// Log mode: `slot`'s page has a current version that is written.
    /// Never under ordered write-back: its log's replay keeps a page's
    /// older versions (each is destaged in turn), so each needs its free
    /// in the log, or it would come back after a crash and be destaged
    /// over the newer.
    pub(super) fn superseded_in_log(&self, slot: SlotIndex) -> bool {
        self.log.is_some()
            && self.ordered.is_none()
            && self
                .slots
                .lookup(self.slots.key(slot))
                .is_some_and(|cur| cur != slot && self.slots.state(cur) == SlotState::Dirty)
    }

    /// Issue the free of a page's oldest old version, once it is freeable and
    /// not already sent; and (slot records, not under ordered write-back)
    /// while the page's current version is written, the frees of all its
    /// freeable old versions at once. That current record outranks each of
    /// them at recovery and stays until they are gone (a page with old
    /// versions is not destaged), so whichever of these frees a crash
    /// leaves undone, the state is one a late free leaves. One free at a
    /// time per page let a page rewritten at every fsync (a file's size
    /// record, an append-only log's last page) fill a 32 MiB cache with
    /// its old versions while writes stalled for them (Redis on the mount,
    /// `docs/experiments/rdc-real.md`).
    pub(super) fn send_oldest_free(&mut self, key: u64) {
        let sendable = |e: &Engine, s: SlotIndex| {
            e.slots.has(s, FLAG_FREEING) && !e.slots.has(s, FLAG_FREE_SENT)
        };
        let Some(queue) = self.old_versions.get(&key) else {
            return;
        };
        // One old version (the common case), or an order to keep: the front.
        let many = queue.front() != queue.back();
        let superseded = many
            && self.log.is_none()
            && self.ordered.is_none()
            && (self.slots.lookup(PageKey(key)))
                .is_some_and(|cur| self.slots.state(cur) == SlotState::Dirty);
        if !superseded {
            let front = queue.front().copied();
            if let Some(front) = front.filter(|&s| sendable(self, s)) {
                self.queue_free(front);
            }
            return;
        }
        // Slot records: `queue_free` only gathers the free, no page's
        // queue changes meanwhile.
        let queue = self.old_versions.remove(&key).expect("looked up above");
        for &slot in queue.iter() {
            if sendable(self, slot) {
                self.queue_free(slot);
            }
        }
        self.old_versions.insert(key, queue);
    }

    /// Emit the gathered frees as one command once there are enough of them,
    /// once the oldest has waited `free_delay_ns` (1 ms unless set), or at once when room or a
    /// drain waits for them (`now` = `Nanos::MAX` forces it). Freeing later is
    /// always safe: a slot only stays out of the pool longer.
    pub(super) fn emit_frees(&mut self, now: Nanos) {
        if self.to_free.is_empty() {
            self.timers.set(Timer::Frees, None);
            return;
        }
        let delay_ns = self.free_delay_ns;
        let due = self
            .timers
            .get(Timer::Frees)
            .unwrap_or(Nanos(now.0.saturating_add(delay_ns)));
        self.timers.set(Timer::Frees, Some(due));
        // A stalled write waits for room; in log mode room comes from the
        // tail, whose move frees the stale versions it passes, so frees
        // are gathered there as usual (at once, each took a batch and a
        // cache flush: ordered write-back's 1 MiB overwrites ran at 0.5
        // MiB/s with 10,805 cache flushes a request).
        let room_waits = !self.stalled.is_empty() && self.log.is_none();
        let urgent = self.to_free.len() >= self.free_batch_slots
            || delay_ns == 0
            || now >= due
            || room_waits
            || self.draining;
        if !urgent {
            return;
        }
        self.timers.set(Timer::Frees, None);
        if let Some(log) = &mut self.log {
            // Log mode: they ride in the next batch's header; now one is
            // due even if it carries nothing else (`log_step`).
            log.frees_due = true;
            return;
        }
        let slots = self.to_free.take_all();
        let io = self.new_io(IoCtx::FreeSlots {
            slots: slots.clone(),
        });
        self.commands.push_back(IoCommand::FreeSlots { io, slots });
    }

    /// Append `slot` to its page's old versions (it is the newest of them).
    pub(super) fn push_old(&mut self, slot: SlotIndex) {
        self.slots.set_flag(slot, FLAG_OLD, true);
        self.old_versions
            .entry(self.slots.key(slot).0)
            .or_default()
            .push_back(slot);
    }

    /// Take `slot` out of its page's old versions, if it is there.
    pub(super) fn remove_old(&mut self, slot: SlotIndex) {
        if !self.slots.has(slot, FLAG_OLD) {
            return;
        }
        self.slots.set_flag(slot, FLAG_OLD, false);
        let key = self.slots.key(slot).0;
        let queue = self
            .old_versions
            .get_mut(&key)
            .expect("old version was queued");
        queue.remove(slot);
        if queue.is_empty() {
            self.old_versions.remove(&key);
        }
    }

    /// Make the current version of a page not current any more.
    pub(super) fn retire(&mut self, slot: SlotIndex) {
        self.retire_version(slot);
        self.slots.unmap(slot);
    }

    /// Retire `old` in favour of a new version in `new` (an overwrite).
    /// Under ordered write-back a dirty version not being destaged stays,
    /// as an older dirty version, until it is destaged in its turn; under
    /// journaled write-back, one of a committed transaction does.
    pub(super) fn supersede(&mut self, old: SlotIndex, new: SlotIndex) {
        let owed =
            self.slots.state(old) == SlotState::Dirty && !self.slots.has(old, FLAG_DESTAGING);
        let keep = owed && (self.ordered.is_some() || self.journal_keeps(old));
        if owed && self.journal.is_some() {
            self.journal_superseded(keep);
        }
        if keep {
            self.slots.set_state(old, SlotState::OldDirty);
            self.push_old(old);
        } else {
            self.retire_version(old);
        }
        self.slots.remap(old, new);
    }

    /// What retiring a version means, apart from the directory entry.
    pub(super) fn retire_version(&mut self, slot: SlotIndex) {
        if self.slots.state(slot) == SlotState::Clean {
            self.replacement.remove(slot);
        }
        if self.config.persistent || self.slots.has(slot, FLAG_DESTAGING) {
            self.push_old(slot);
        }
        self.slots.set_state(slot, SlotState::Stale);
    }
}

/// A page's old versions, oldest first. Most pages have one at a time,
/// kept without a heap block; a deque only from the second, boxed so that
/// an entry of the engine's map stays small (16 bytes: a large write
/// overwrites hundreds of pages, each an entry).
#[derive(Default)]
pub(super) enum OldQueue {
    #[default]
    Empty,
    One(SlotIndex),
    // The box is the point: it keeps the enum at 16 bytes (the lint
    // weighs only the extra allocation, made for a page's second version).
    #[allow(clippy::box_collection)]
    Many(Box<VecDeque<SlotIndex>>),
}

impl OldQueue {
    pub(super) fn push_back(&mut self, slot: SlotIndex) {
        *self = match std::mem::take(self) {
            OldQueue::Empty => OldQueue::One(slot),
            OldQueue::One(first) => OldQueue::Many(Box::new(VecDeque::from([first, slot]))),
            OldQueue::Many(mut q) => {
                q.push_back(slot);
                OldQueue::Many(q)
            }
        };
    }

    pub(super) fn front(&self) -> Option<&SlotIndex> {
        match self {
            OldQueue::Empty => None,
            OldQueue::One(s) => Some(s),
            OldQueue::Many(q) => q.front(),
        }
    }

    pub(super) fn back(&self) -> Option<&SlotIndex> {
        match self {
            OldQueue::Empty => None,
            OldQueue::One(s) => Some(s),
            OldQueue::Many(q) => q.back(),
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &SlotIndex> {
        let (a, b): (&[SlotIndex], &[SlotIndex]) = match self {
            OldQueue::Empty => (&[], &[]),
            OldQueue::One(s) => (std::slice::from_ref(s), &[]),
            OldQueue::Many(q) => q.as_slices(),
        };
        a.iter().chain(b)
    }

    /// Takes `slot` out, wherever it is.
    pub(super) fn remove(&mut self, slot: SlotIndex) {
        match self {
            OldQueue::One(s) if *s == slot => *self = OldQueue::Empty,
            OldQueue::Many(q) => q.retain(|&s| s != slot),
            _ => {}
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        match self {
            OldQueue::Empty => true,
            OldQueue::One(_) => false,
            OldQueue::Many(q) => q.is_empty(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_queue_keeps_version_order_from_one_to_many_and_back() {
        let mut q = OldQueue::default();
        assert!(q.is_empty() && q.front().is_none());
        q.push_back(SlotIndex(7));
        assert_eq!(
            (q.front(), q.back()),
            (Some(&SlotIndex(7)), Some(&SlotIndex(7)))
        );
        q.push_back(SlotIndex(3));
        q.push_back(SlotIndex(9));
        let all: Vec<u32> = q.iter().map(|s| s.0).collect();
        assert_eq!(all, [7, 3, 9]);
        q.remove(SlotIndex(3));
        assert_eq!(
            (q.front(), q.back()),
            (Some(&SlotIndex(7)), Some(&SlotIndex(9)))
        );
        q.remove(SlotIndex(7));
        q.remove(SlotIndex(42));
        assert_eq!(q.iter().count(), 1);
        q.remove(SlotIndex(9));
        assert!(q.is_empty());
        let mut one = OldQueue::default();
        one.push_back(SlotIndex(1));
        one.remove(SlotIndex(2));
        assert!(!one.is_empty());
        one.remove(SlotIndex(1));
        assert!(one.is_empty());
    }

    #[test]
    fn an_old_queue_takes_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<OldQueue>(), 16);
    }
}
