//! Copy forward: a live dirty page in the batch at the log's tail is
//! written again at the head (a cache read and a page of the next batch)
//! instead of having its group destaged to the backing, whenever the pool
//! has room for the copies (`docs/format-v3.md`, "Reclaim").

use super::*;

impl Engine {
    /// Whether reclaim copies forward the live dirty pages of the batch at
    /// the tail (header `span_header`, slots `from..pages` of it) rather
    /// than destage their groups: when at most half its slots are live
    /// dirty (passing it then gains at least as many slots as the copies
    /// take, so copying cannot go round for ever) and the pool beyond the
    /// writes' reservations holds the copies and a header for each batch
    /// they fill (the copy reserve keeps a batch's worth out of the writes'
    /// reach). The destage rate, counting dirty pages against a share of
    /// the ring (`Log::dirty_capacity`), keeps the live share the tail
    /// meets down.
    /// Never under ordered or journaled write-back (`log_in_write_order`).
    pub(super) fn log_copies_span(&self, span_header: u32, pages: u32, from: u32) -> bool {
        if self.log_in_write_order() {
            return false;
        }
        let log = self.log.as_ref().expect("log mode");
        let live = self.log_live_dirty(span_header, from..pages);
        let headers = live.div_ceil(log.batch_pages_max as u64) + 1;
        self.log_copy_pays(live, pages)
            && self.slots.free_count() >= log.budget + SPARE_SLOTS + live + headers
    }

    /// Ordered and journaled write-back: the log's dirty versions leave
    /// only by the policy's own destages, in write order (ordered) or by
    /// committed transaction (journaled), never copied forward (a copy is
    /// a new version of its page) nor destaged out of turn by reclaim. The
    /// tail's versions are the oldest, which both reach first.
    pub(in crate::engine) fn log_in_write_order(&self) -> bool {
        self.ordered.is_some() || self.journal.is_some()
    }

    /// Copying `live` pages of a batch of `pages` forward gains at least
    /// as many slots (its header and its other pages) as it takes.
    pub(super) fn log_copy_pays(&self, live: u64, pages: u32) -> bool {
        2 * live <= pages as u64 + 1
    }

    /// The dirty (current, written) pages not being destaged in `range`
    /// of the batch whose header is `span_header`: those reclaim would copy.
    pub(super) fn log_live_dirty(&self, span_header: u32, range: std::ops::Range<u32>) -> u64 {
        let log = self.log.as_ref().expect("log mode");
        range
            .filter(|&i| {
                let slot = SlotIndex(log.add(span_header, 1 + i));
                self.slots.state(slot) == SlotState::Dirty && !self.slots.has(slot, FLAG_DESTAGING)
            })
            .count() as u64
    }

    /// Writes wait for room that copying cannot make: the dirty pages, the
    /// first waiting write's slots, the reservations and the room reclaim
    /// keeps ahead of the head would not fit in the ring. Then the destage
    /// rate goes to full, so the tail meets clean pages it can drop.
    pub(in crate::engine) fn log_dirty_leaves_no_room(&self) -> bool {
        let log = self.log.as_ref().expect("log mode");
        let wanted = self.stalled.front().map_or(0, |&ri| {
            let r = self.req(ri);
            Log::slots_for(self.pages_of(r.offset_bytes, r.len_bytes))
        });
        let kept = log.budget + SPARE_SLOTS + log.copy_reserve() + log.low();
        // Under ordered or journaled write-back nothing is copied: room
        // comes from destages only.
        self.log_in_write_order() || self.dirty_versions() + wanted + kept > log.ring as u64
    }

    /// Write `cur`, a dirty page's current written version, again at the
    /// head: a new version of the page built on it, with nothing laid over
    /// it and a new version number (recovery replays the log in order, so
    /// the copy supersedes it; a write to the page meanwhile waits for the
    /// copy, as for any version being filled). `cur` stays pinned until
    /// the copy is durable, then leaves as any superseded version does.
    pub(super) fn log_copy_forward(&mut self, cur: SlotIndex) {
        debug_assert_eq!(self.slots.state(cur), SlotState::Dirty);
        let key = self.slots.key(cur);
        debug_assert_eq!(self.slots.lookup(key), Some(cur));
        let slot = self.log_alloc(None);
        let old = self.install_version(key, slot, Some(cur), false, true);
        let io = self.new_io(IoCtx::CopyForward { slot, old });
        let record = self.record(key, true);
        self.stats.log_copies += 1;
        self.push_page_write(IoCommand::WritePage {
            io,
            slot,
            base: PageBase::Slot(cur),
            patch: Patch {
                page_offset_bytes: 0,
                len_bytes: 0,
                src: Source::Zero,
            },
            record,
        });
    }

    /// A copy forward reached the cache device (the page's version now),
    /// or failed: then the version it copied is current again, and the
    /// tail's next look destages or copies it.
    pub(in crate::engine) fn complete_copy_forward(
        &mut self,
        slot: SlotIndex,
        old: Option<(SlotIndex, SlotState)>,
        result: Result<(), IoError>,
    ) {
        let (o, _) = old.expect("a copy supersedes the version it copies");
        match result {
            Ok(()) => {
                self.unpin(o);
                self.finish_fill(slot);
            }
            Err(_) => {
                self.stats.io_errors += 1;
                self.revert_fill(slot, old, Undo::default());
                self.unpin(o);
            }
        }
    }
}
