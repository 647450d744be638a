//! Log mode after a restart: where the durable log stands, and the engine's
//! log rebuilt from it.

use super::*;

impl Engine {
    /// Log mode: where the durable log stands, as recovery would find it
    /// after a crash now: from the durable tail to the end of the last
    /// durable batch; None otherwise.
    pub fn log_position(&self) -> Option<LogPosition> {
        let log = self.log.as_ref()?;
        let pool = self.slots.free_count();
        let durable = log
            .spans
            .iter()
            .take_while(|s| s.seq <= log.durable_seq)
            .map(|s| 1 + s.pages);
        let batches: Vec<u32> = log.passed_batches.iter().copied().chain(durable).collect();
        Some(LogPosition {
            tail: SlotIndex(log.add(log.head, (pool % log.ring as u64) as u32)),
            log_slots: batches.iter().sum(),
            batches,
            next_seq: log.durable_seq + 1,
            next_page_seq: self.next_seq,
        })
    }

    /// Recovery in log mode: the slots from the durable tail to the head
    /// are the log found (stretches of it the tail will pass in turn; the
    /// versions found lie there), the rest is the pool.
    pub(in crate::engine) fn recover_log(&mut self, at: LogPosition) -> Result<(), RecoveryError> {
        let ring = self.slots.len();
        let (tail, found_len) = (at.tail.0, at.log_slots);
        let bad = || RecoveryError::LogOutOfRange {
            tail,
            log_slots: found_len,
            slots: ring as u64,
        };
        if tail >= ring || found_len > ring {
            return Err(bad());
        }
        let log = self.log.as_mut().expect("log mode");
        let head = log.add(tail, found_len);
        let mut s = head;
        for _ in 0..ring - found_len {
            // A version found there would be outside the log.
            if !self.slots.in_pool(SlotIndex(s)) {
                return Err(bad());
            }
            s = log.add(s, 1);
        }
        let slots_of: u64 = at.batches.iter().map(|&b| b as u64).sum();
        if slots_of != found_len as u64 || at.batches.contains(&0) {
            return Err(RecoveryError::LogBatches {
                log_slots: found_len,
                batch_slots: slots_of,
            });
        }
        let first_seq = at.next_seq.saturating_sub(at.batches.len() as u64);
        let mut s = tail;
        for (i, &n) in at.batches.iter().enumerate() {
            log.spans.push_back(Span {
                header: s,
                pages: n - 1,
                seq: first_seq + i as u64,
            });
            for i in 0..n {
                let slot = SlotIndex(log.add(s, i));
                if self.slots.in_pool(slot) {
                    self.slots.take_from_pool(slot);
                }
            }
            s = log.add(s, n);
        }
        log.head = head;
        log.next_seq = at.next_seq;
        self.next_seq = self.next_seq.max(at.next_page_seq);
        log.durable_seq = at.next_seq.saturating_sub(1);
        Ok(())
    }

    /// The versions found are as their batches' headers said (a checkpoint
    /// says the same of them while they stay in the log).
    pub(in crate::engine) fn log_found(&mut self, found: &[RecoveredSlot]) {
        let log = self.log.as_mut().expect("log mode");
        for f in found {
            log.logged.set(f.slot, f.record.dirty);
        }
    }
}
