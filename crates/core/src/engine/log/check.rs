//! The log's own invariants, part of `check_invariants`.

use super::*;

impl Engine {
    /// The log's own facts (part of `check_invariants`): the pool is
    /// exactly the slots from the head on; the passed slots, the spans, the
    /// open batch and the pool cover the ring in order; every slot in use
    /// is a page of a batch in the log; the reservations and the commands
    /// in flight agree with the log's counts.
    pub(in crate::engine) fn check_log(&self) {
        let Some(log) = &self.log else {
            return;
        };
        let at = self.check_log_pool_and_passed(log);
        let mut used = vec![false; log.ring as usize];
        for s in &log.advance_frees {
            used[s.0 as usize] = true;
        }
        let (at, covered) = Self::check_log_batches(log, at, &mut used);
        if let Some(open) = &log.open {
            for i in 1..=open.taken {
                let s = log.add(open.header, i);
                let state = self.slots.state(SlotIndex(s));
                assert_eq!(
                    state,
                    SlotState::Filling,
                    "log: open batch page {s} not filling"
                );
            }
        }
        assert_eq!(at, log.head, "log: the head follows the last batch");
        let pool = self.slots.free_count();
        assert_eq!(
            pool + log.passed as u64 + covered,
            log.ring as u64,
            "log: pool, passed slots and batches cover the ring once"
        );
        for (s, &in_batch) in used.iter().enumerate() {
            let state = self.slots.state(SlotIndex(s as u32));
            assert!(
                in_batch || state == SlotState::Free,
                "log: slot {s} is {state:?} but in no batch's pages"
            );
            // A checkpoint says a dirty current version is dirty; a replay
            // would say so too only if its header did.
            let logged = log.logged.get(SlotIndex(s as u32));
            assert!(
                state != SlotState::Dirty || logged == Some(true),
                "log: slot {s} is dirty but its batch's header said {logged:?}"
            );
        }
        self.check_log_counts(log);
    }

    /// The pool is the slots from the head on; after it, the passed slots
    /// are free or freed by the tail's move. Returns the slot after them.
    fn check_log_pool_and_passed(&self, log: &Log) -> u32 {
        let pool = self.slots.free_count();
        for i in 0..pool {
            let s = SlotIndex(log.add(log.head, i as u32));
            assert!(
                self.slots.in_pool(s),
                "log: slot {} ahead of the head is not in the pool",
                s.0
            );
        }
        let mut at = log.add(log.head, (pool % log.ring as u64) as u32);
        for _ in 0..log.passed {
            let slot = SlotIndex(at);
            let state = self.slots.state(slot);
            assert!(
                state == SlotState::Free || log.advance_frees.contains(&slot),
                "log: passed slot {at} is {state:?}, not free nor freed by the tail's move"
            );
            at = log.add(at, 1);
        }
        for s in &log.advance_frees {
            assert!(
                self.slots.freeable(*s) && self.slots.has(*s, FLAG_FREEING),
                "log: slot {} freed by the tail's move is not a stale slot being freed",
                s.0
            );
        }
        assert!(
            log.advance_frees_sent <= log.advance_frees.len(),
            "log: advance frees sent"
        );
        at
    }

    /// The spans and the open batch follow each other from `at`, with
    /// consecutive sequence numbers; marks their pages in `used`. Returns
    /// the slot after them and the slots they cover.
    fn check_log_batches(log: &Log, mut at: u32, used: &mut [bool]) -> (u32, u64) {
        let (mut covered, mut seq) = (0u64, None);
        for span in &log.spans {
            assert_eq!(
                span.header, at,
                "log: batch {} does not follow the one before",
                span.seq
            );
            if let Some(s) = seq {
                assert_eq!(span.seq, s, "log: batch sequence numbers are consecutive");
            }
            seq = Some(span.seq + 1);
            for i in 1..=span.pages {
                used[log.add(span.header, i) as usize] = true;
            }
            at = log.add(at, 1 + span.pages);
            covered += 1 + span.pages as u64;
        }
        if let Some(open) = &log.open {
            assert_eq!(
                open.header, at,
                "log: the open batch does not follow the sealed ones"
            );
            if let Some(s) = seq {
                assert_eq!(open.seq, s, "log: the open batch's sequence number");
            }
            let pages: u32 = open.pages.iter().map(IoCommand::page_count).sum();
            assert_eq!(pages, open.built, "log: an open batch's pages miscounted");
            assert_eq!(
                open.taken, pages,
                "log: an open batch's slot has no page write"
            );
            for i in 1..=open.taken {
                used[log.add(open.header, i) as usize] = true;
            }
            at = log.add(at, 1 + open.taken);
            covered += 1 + open.taken as u64;
        }
        (at, covered)
    }

    /// The writes' reservations add up to the budget the pool covers; the
    /// batches and moves in flight are the ones the log counts.
    fn check_log_counts(&self, log: &Log) {
        let pool = self.slots.free_count();
        assert!(
            log.budget <= pool,
            "log: writes hold {} slots, the pool has {pool}",
            log.budget
        );
        let live = self.reqs.iter_live().map(|(_, r)| r);
        let held: u64 = live.map(|r| r.log_budget as u64).sum();
        assert_eq!(
            held, log.budget,
            "log: the slots writes hold add up to the budget"
        );
        assert!(
            log.advancing <= log.passed,
            "log: advancing more than passed"
        );
        assert_eq!(
            log.passed_batches.iter().sum::<u32>(),
            log.passed,
            "log: the passed batches add up to the passed slots"
        );
        let count = |f: fn(&IoCtx) -> bool| self.ios.iter().filter(|c| f(c)).count();
        let advances = count(|c| matches!(c, IoCtx::AdvanceLog { .. }));
        assert_eq!(
            advances,
            (log.advancing > 0) as usize,
            "log: advances in flight"
        );
        let checkpoints = count(|c| matches!(c, IoCtx::LogCheckpoint));
        assert_eq!(
            checkpoints, log.checkpointing as usize,
            "log: checkpoints in flight"
        );
        let batches = count(|c| matches!(c, IoCtx::Batch { .. }));
        let expected = log.writing as usize + log.sealed.len();
        assert_eq!(batches, expected, "log: batches issued or waiting");
        let retrying = self.timers.get(Timer::LogRetry).is_some();
        assert!(
            log.writing || log.sealed.is_empty() || retrying,
            "log: a sealed batch waits with none being written"
        );
        self.check_log_copies();
    }

    /// Each copy forward in flight: its slot is filling, dirty-meant, and
    /// its page's current version; the version it copies is pinned (the
    /// driver reads it) and no longer current.
    fn check_log_copies(&self) {
        for ctx in self.ios.iter() {
            let IoCtx::CopyForward { slot, old } = ctx else {
                continue;
            };
            let (o, _) = old.expect("a copy names the version it copies");
            let key = self.slots.key(*slot);
            assert_eq!(
                self.slots.state(*slot),
                SlotState::Filling,
                "log: copy into slot {} not filling",
                slot.0
            );
            assert!(
                !self.slots.has(*slot, FLAG_FILL_CLEAN),
                "log: copy into slot {} meant clean",
                slot.0
            );
            assert_eq!(
                self.slots.lookup(key),
                Some(*slot),
                "log: copy into slot {} is not its page's version",
                slot.0
            );
            assert!(
                self.slots.pins(o) > 0 && self.slots.lookup(key) != Some(o),
                "log: slot {} copied forward is not pinned, or still current",
                o.0
            );
        }
    }
}
