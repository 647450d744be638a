//! Log mode: checkpoints of the log's replay (`IoCommand::LogCheckpoint`),
//! so that recovery reads the last one and the batches after it rather
//! than the whole log (`docs/format-v3.md`, "The checkpoint").

use super::*;

/// A checkpoint is taken once the head has moved this share of the ring
/// since the last, and at least `CHECKPOINT_EVERY_BYTES_MIN` (at most half
/// the ring): recovery then reads at most that much of the log after the
/// checkpoint. Each checkpoint writes 16 B per version of the log and two
/// cache flushes, so it is a trade: with every 32nd of the ring, a 1 GiB
/// cache took one every 32 MiB written, and persist-on-flush 1 MiB writes
/// ran at 0.77 of the build without checkpoints (`docs/format-v3.md`, "Cadence").
const CHECKPOINT_EVERY: (u64, u64) = (1, 16);
const CHECKPOINT_EVERY_BYTES_MIN: u64 = 256 << 20;

/// What the batches' headers say of each slot: whether its version is
/// in a header (a replay finds it), and whether as dirty. Two bits a slot.
pub(super) struct Logged {
    found: Vec<u64>,
    dirty: Vec<u64>,
}

impl Logged {
    pub(super) fn new(ring: u32) -> Logged {
        let words = (ring as usize).div_ceil(64);
        Logged {
            found: vec![0; words],
            dirty: vec![0; words],
        }
    }

    fn at(slot: SlotIndex) -> (usize, u64) {
        (slot.0 as usize / 64, 1 << (slot.0 % 64))
    }

    /// `slot`'s version is in its batch's header, dirty or clean.
    pub(super) fn set(&mut self, slot: SlotIndex, dirty: bool) {
        let (w, b) = Logged::at(slot);
        self.found[w] |= b;
        if dirty {
            self.dirty[w] |= b;
        } else {
            self.dirty[w] &= !b;
        }
    }

    /// `slot`'s version never reached its batch's header (its write failed:
    /// a hole, or a failed batch written again empty).
    pub(super) fn clear(&mut self, slot: SlotIndex) {
        let (w, b) = Logged::at(slot);
        self.found[w] &= !b;
    }

    /// Whether a replay finds a version in `slot`, and if so whether dirty.
    pub(super) fn get(&self, slot: SlotIndex) -> Option<bool> {
        let (w, b) = Logged::at(slot);
        (self.found[w] & b != 0).then_some(self.dirty[w] & b != 0)
    }
}

impl Engine {
    /// Log mode: `slot`'s write failed; a replay will not find it.
    pub(in crate::engine) fn log_write_failed(&mut self, slot: SlotIndex) {
        if let Some(log) = &mut self.log {
            log.logged.clear(slot);
        }
    }

    /// Issue a `LogCheckpoint` when none is in flight and the head has moved
    /// far enough since the last: the replay of the log through the last
    /// batch written (`durable_seq`) as the engine knows it now.
    pub(super) fn log_checkpoint(&mut self) {
        let log = self.log.as_ref().expect("log mode");
        let (num, den) = CHECKPOINT_EVERY;
        let ring = log.ring as u64;
        // A header takes a whole slot: `header_bytes` is the page size.
        let floor = CHECKPOINT_EVERY_BYTES_MIN / log.header_bytes;
        let every = (ring * num / den).max(floor).min(ring / 2).max(1);
        if log.checkpointing || log.since_checkpoint < every || log.durable_seq == 0 {
            return;
        }
        let position = self.log_position().expect("log mode");
        let entries = self.checkpoint_entries();
        let log = self.log.as_mut().expect("log mode");
        log.checkpointing = true;
        log.since_checkpoint = 0;
        let io = self.new_io(IoCtx::LogCheckpoint);
        self.commands.push_back(IoCommand::LogCheckpoint {
            io,
            position,
            entries,
        });
    }

    /// The versions a replay through `durable_seq` would find, in log
    /// order, as the engine knows them: every slot of a written batch that
    /// its header names and that is not free. A current version is dirty
    /// as its state says (a destaged one is clean: the backing holds it
    /// durably); any other (old, or filling while its write-through goes
    /// to the backing) as its header said. Slots the tail passed are left
    /// out: the tail passes a slot only once its version can go given the
    /// written batches (freed, dropped clean, superseded by a written
    /// version, or copied forward and the copy written).
    fn checkpoint_entries(&self) -> Vec<RecoveredSlot> {
        let log = self.log.as_ref().expect("log mode");
        let durable = log.spans.iter().take_while(|s| s.seq <= log.durable_seq);
        let mut entries = Vec::new();
        for span in durable {
            for i in 1..=span.pages {
                let slot = SlotIndex(log.add(span.header, i));
                let Some(logged) = log.logged.get(slot) else {
                    continue;
                };
                let dirty = match self.slots.state(slot) {
                    SlotState::Free => continue,
                    SlotState::Dirty => true,
                    SlotState::Clean => false,
                    SlotState::Filling | SlotState::Stale | SlotState::OldDirty => logged,
                };
                let record = SlotRecord {
                    key: self.slots.key(slot),
                    seq: 0,
                    dirty,
                };
                entries.push(RecoveredSlot { slot, record });
            }
        }
        entries
    }

    /// A checkpoint is durable and in force, or failed (the next is taken
    /// after the head has moved as far again).
    pub(in crate::engine) fn complete_log_checkpoint(&mut self, result: Result<(), IoError>) {
        let log = self.log.as_mut().expect("log mode");
        log.checkpointing = false;
        match result {
            Ok(()) => self.stats.log_checkpoints += 1,
            Err(_) => self.stats.io_errors += 1,
        }
    }
}
