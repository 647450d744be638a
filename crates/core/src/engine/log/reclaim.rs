//! Reclaim at the log's tail: the oldest durable batch is passed once
//! each of its slots can go (free, a clean copy dropped, a stale version
//! freed by the move, a live dirty page copied forward or destaged).

use super::*;

/// How a slot of the batch at the tail can leave the log.
enum Leaves {
    Free,
    /// A clean copy: dropped.
    Dropped,
    /// A stale version whose free waits: the tail's durable move frees it.
    FreedByMove,
    /// In use (dirty, filling, pinned, being destaged or freed): the tail waits.
    Waits,
}

impl Engine {
    /// Pass the oldest durable batches whose slots can all be let go (free,
    /// a clean copy, a stale version whose free has not gone out), while
    /// room is wanted; a dirty page in the way is copied forward or its
    /// group destaged first.
    pub(super) fn log_reclaim(&mut self) {
        loop {
            let log = self.log.as_ref().expect("log mode");
            let Some(&span) = log.spans.front() else {
                return;
            };
            if span.seq > log.durable_seq {
                return; // not written yet
            }
            if span.seq >= log.met_seq {
                self.log_count_met(span);
            }
            let slot_at = |log: &Log, i: u32| SlotIndex(log.add(span.header, 1 + i));
            // `scanned` moves over the free slots at the start only: they
            // stay free (a slot out of the pool is never taken).
            let (mut blocked, mut prefix) = (false, true);
            let from = self.log.as_ref().expect("log mode").scanned;
            let copy = self.log_copies_span(span.header, span.pages, from);
            for i in from..span.pages {
                let log = self.log.as_ref().expect("log mode");
                let slot = slot_at(log, i);
                match self.log_slot_leaves(slot, copy) {
                    Leaves::Free if prefix => self.log.as_mut().expect("log mode").scanned = i + 1,
                    Leaves::Free => {}
                    Leaves::Dropped | Leaves::FreedByMove => prefix = false,
                    Leaves::Waits => (blocked, prefix) = (true, false),
                }
            }
            if blocked {
                // Copies need no destage ahead: the tail passes once the
                // batch carrying them is durable.
                if !copy {
                    self.log_destage_ahead();
                }
                return;
            }
            let log = self.log.as_ref().expect("log mode");
            let from = log.scanned;
            for i in from..span.pages {
                let slot = slot_at(self.log.as_ref().expect("log mode"), i);
                self.log_let_go(slot);
            }
            let log = self.log.as_mut().expect("log mode");
            log.spans.pop_front();
            log.scanned = 0;
            log.passed += 1 + span.pages;
            log.passed_batches.push_back(1 + span.pages);
            if !self.log_wants_reclaim() {
                return;
            }
        }
    }

    /// Reclaim meets `span` for the first time (at the tail, or among the
    /// batches it destages ahead of the tail, before it does): count its
    /// pages, those still their page's current version (live: reclaim must
    /// destage, copy or drop them) and of those the dirty ones, so the live
    /// share the tail meets can be set beside `docs/format-v3.md`'s model.
    fn log_count_met(&mut self, span: Span) {
        let (mut live, mut dirty) = (0, 0);
        for i in 0..span.pages {
            let slot = SlotIndex(self.log.as_ref().expect("log mode").add(span.header, 1 + i));
            let state = self.slots.state(slot);
            if state != SlotState::Free && self.slots.lookup(self.slots.key(slot)) == Some(slot) {
                live += 1;
                dirty += u64::from(state == SlotState::Dirty);
            }
        }
        self.stats.log_tail_pages += u64::from(span.pages);
        self.stats.log_tail_live_pages += live;
        self.stats.log_tail_dirty_pages += dirty;
        self.log.as_mut().expect("log mode").met_seq = span.seq + 1;
    }

    /// While the tail waits for the destages of its batch, those of the
    /// next `RECLAIM_AHEAD_SPANS` batches go out too, so that their backing
    /// writes overlap (and share the backing's flushes) instead of
    /// following one batch at a time: the tail then passes a run of
    /// batches per round trip to the backing. Destaging early is only
    /// destaging: a page written again meanwhile has a newer version.
    fn log_destage_ahead(&mut self) {
        // Ordered and journaled write-back destage by their own rules only.
        if self.log_in_write_order() || self.timers.get(Timer::DestageRetry).is_some() {
            return;
        }
        let log = self.log.as_ref().expect("log mode");
        let Some(front) = log.spans.front() else {
            return;
        };
        let end = front.seq + RECLAIM_AHEAD_SPANS;
        let durable = log.durable_seq;
        let spans: Vec<Span> = log
            .spans
            .iter()
            .skip(1)
            .take_while(|s| s.seq < end && s.seq <= durable)
            .filter(|s| s.seq >= log.ahead_seq)
            .copied()
            .collect();
        for span in spans {
            if span.seq >= self.log.as_ref().expect("log mode").met_seq {
                self.log_count_met(span);
            }
            // A batch the tail will copy from needs no destage.
            let live = self.log_live_dirty(span.header, 0..span.pages);
            if self.log_copy_pays(live, span.pages) {
                self.log.as_mut().expect("log mode").ahead_seq = span.seq + 1;
                continue;
            }
            for i in 0..span.pages {
                let log = self.log.as_ref().expect("log mode");
                let slot = SlotIndex(log.add(span.header, 1 + i));
                if self.slots.state(slot) == SlotState::Dirty
                    && !self.slots.has(slot, FLAG_DESTAGING)
                {
                    let gkey = self.dirty.group_of(self.slots.key(slot).0);
                    if self.issue_group_destages(gkey) > 0 {
                        self.stats.log_forced_destages += 1;
                    }
                    self.group_changed(gkey);
                }
            }
            self.log.as_mut().expect("log mode").ahead_seq = span.seq + 1;
        }
    }

    /// How `slot`, in the batch at the tail, can leave the log; a dirty
    /// page is copied forward (`copy`) or its group destaged on the way
    /// (it waits).
    fn log_slot_leaves(&mut self, slot: SlotIndex, copy: bool) -> Leaves {
        match self.slots.state(slot) {
            SlotState::Free => Leaves::Free,
            SlotState::Clean
                if self.slots.pins(slot) == 0 && !self.slots.has(slot, FLAG_DESTAGING) =>
            {
                Leaves::Dropped
            }
            // A version nothing uses whose free has not gone out: the tail's
            // durable move frees it (the batch naming it is then never read
            // again). Its page's older versions are passed already (the log
            // is in version order), though their free may still wait for a
            // move: then it waits its turn (`send_oldest_free`).
            SlotState::Stale
                if self.slots.freeable(slot)
                    && self.slots.has(slot, FLAG_FREE_SENT)
                    && self.to_free.contains(slot) =>
            {
                Leaves::FreedByMove
            }
            // A page being destaged is not copied: the copy would be dirty
            // again, and the destage done for nothing (the tail waits for
            // it, then drops the clean copy).
            SlotState::Dirty if copy && !self.slots.has(slot, FLAG_DESTAGING) => {
                self.log_copy_forward(slot);
                Leaves::Waits
            }
            // Ordered and journaled write-back: their destages reach the
            // tail's versions first (the oldest); the tail waits for them.
            SlotState::Dirty
                if !self.log_in_write_order()
                    && !self.slots.has(slot, FLAG_DESTAGING)
                    && self.timers.get(Timer::DestageRetry).is_none() =>
            {
                let gkey = self.dirty.group_of(self.slots.key(slot).0);
                if self.issue_group_destages(gkey) > 0 {
                    self.stats.log_forced_destages += 1;
                }
                self.group_changed(gkey);
                Leaves::Waits
            }
            _ => Leaves::Waits,
        }
    }

    /// `slot` leaves with the batch the tail passes: a clean copy is
    /// dropped (its record says clean: recovery ignores it, so it needs no
    /// free), a stale version's free moves to the tail's move.
    fn log_let_go(&mut self, slot: SlotIndex) {
        match self.slots.state(slot) {
            SlotState::Free => {}
            SlotState::Clean => {
                self.replacement.remove(slot);
                self.slots.unmap(slot);
                self.slots.set_state(slot, SlotState::Free);
                self.stats.evictions += 1;
            }
            SlotState::Stale => {
                self.to_free.remove(slot);
                self.log
                    .as_mut()
                    .expect("log mode")
                    .advance_frees
                    .push(slot);
            }
            state => unreachable!("slot {} in a passed batch is {state:?}", slot.0),
        }
    }
}
