//! Whole-engine invariants: facts that span two structures (the request
//! table and its free list, the I/O table and the counts kept beside it,
//! the dirty set and the slot states, the candidate count and the groups'
//! flags), checked at the end of every engine step where debug assertions
//! are on (the `ci` profile the tests run under, the engine model's soak,
//! the simulator's tests). It exists because the races the soak found were
//! between structures each consistent on its own. It must never change
//! the engine's state, and each check is one fact with its own message.

use super::*;

/// Table entries (slots, requests, I/Os) a check may scan per engine step,
/// amortized: a check runs at every step while the tables hold at most
/// this many entries (the engine model's caches), and every
/// `entries / CHECK_ENTRIES_PER_STEP` steps on larger ones, so that the
/// simulator's tests stay within a small factor of their time.
const CHECK_ENTRIES_PER_STEP: usize = 256;

/// What the I/O table holds, counted once per check.
#[derive(Default)]
struct IoCounts {
    live: usize,
    /// Destage runs, and journaled write-back's checkpoint commands.
    destages: u32,
    checkpoints: u32,
    /// Per request index: its commands in flight (then, in
    /// `check_requests`, plus its waits).
    per_req: Vec<u32>,
    /// Bypass writes not promoted (`BypassedWrites::around`), and their pages.
    bypasses: u32,
    bypass_pages: u64,
    /// Pages of every backing write in flight, originals included.
    backing_write_pages: u64,
}

impl Engine {
    /// The end of an engine step: the invariants, where debug assertions
    /// are on (at every step on small tables, at a bounded rate on larger
    /// ones: `CHECK_ENTRIES_PER_STEP`).
    pub(super) fn step_done(&mut self) {
        if !cfg!(debug_assertions) {
            return;
        }
        self.steps_checked = self.steps_checked.wrapping_add(1);
        let entries = self.slots.len() as usize + self.reqs.len() + self.ios.capacity();
        let every = (entries / CHECK_ENTRIES_PER_STEP).max(1) as u64;
        if self.steps_checked.is_multiple_of(every) {
            // The write filter's buckets are summed at their own rate.
            let filter_every = (write_filter::BUCKETS / CHECK_ENTRIES_PER_STEP).max(1) as u64;
            let filter = (self.steps_checked / every).is_multiple_of(filter_every);
            self.check(filter);
        }
    }

    /// Checks every whole-engine invariant; panics naming the first that
    /// fails. Read-only.
    pub fn check_invariants(&self) {
        self.check(true);
    }

    fn check(&self, filter: bool) {
        let mut ios = self.count_ios();
        self.check_requests(&mut ios);
        self.check_ios(&ios, filter);
        self.check_dirty();
        self.check_waits();
        self.check_log();
        self.check_queue_limits(&ios);
    }

    /// Every queue has a limit (the driver polls commands and responses
    /// after each step, so nothing may pile up): answers by the request
    /// limit, commands by the I/Os in flight, I/Os by the live requests'
    /// pages and the slots, frees by the slots.
    fn check_queue_limits(&self, ios: &IoCounts) {
        let max = self.config.requests_max as usize;
        assert!(self.stalled.len() <= max, "stalled queue over requests_max");
        assert!(
            self.responses.len() <= max,
            "{} responses not polled, over requests_max ({max})",
            self.responses.len()
        );
        assert!(
            self.commands.len() <= ios.live,
            "{} commands queued, more than the {} I/Os in flight",
            self.commands.len(),
            ios.live
        );
        let slots = self.slots.len() as usize;
        assert!(self.to_free.len() <= slots, "frees waiting over the slots");
        // Per live request: a command per page and piece of it (cache and
        // backing), its backing write and a promoted original; per slot: a
        // destage or a free; and the log's batch and move.
        let pages: u64 = (0..self.reqs.len() as u32)
            .filter(|&ri| self.live(ri))
            .map(|ri| {
                let r = self.req(ri);
                2 * self.pages_of(r.offset_bytes, r.len_bytes) + 2
            })
            .sum();
        let limit = pages as usize + 2 * slots + 4;
        assert!(
            ios.live <= limit,
            "{} I/Os in flight, over the limit of {limit} (live requests' pages, slots)",
            ios.live
        );
    }

    fn count_ios(&self) -> IoCounts {
        let mut c = IoCounts {
            per_req: vec![0; self.reqs.len()],
            ..IoCounts::default()
        };
        let pages = |off: u64, len: u64| self.pages_of(off, len);
        for ctx in self.ios.iter() {
            c.live += 1;
            let req = match ctx {
                IoCtx::Fill { req, .. }
                | IoCtx::FillRun { req, .. }
                | IoCtx::InsertFill { req, .. }
                | IoCtx::ReadSlot { req, .. }
                | IoCtx::ReadBacking { req, .. } => Some(*req),
                IoCtx::WriteBacking { req, around } => {
                    let r = self.req(*req);
                    let n = pages(r.offset_bytes, r.len_bytes);
                    c.backing_write_pages += n;
                    if *around && !r.path.promoted() {
                        c.bypasses += 1;
                        c.bypass_pages += n;
                    }
                    Some(*req)
                }
                IoCtx::PromotedOriginal {
                    offset_bytes,
                    len_bytes,
                    ..
                } => {
                    c.backing_write_pages += pages(*offset_bytes, *len_bytes);
                    None
                }
                IoCtx::Destage { slots } => {
                    c.destages += 1;
                    for &s in slots {
                        assert!(
                            self.slots.has(s, FLAG_DESTAGING),
                            "slot {} in a destage in flight is not flagged destaging",
                            s.0
                        );
                    }
                    None
                }
                IoCtx::Checkpoint { .. } => {
                    c.checkpoints += 1;
                    None
                }
                IoCtx::FreeSlots { .. }
                | IoCtx::Batch { .. }
                | IoCtx::AdvanceLog { .. }
                | IoCtx::LogCheckpoint
                | IoCtx::CopyForward { .. } => None,
            };
            if let Some(ri) = req {
                c.per_req[ri as usize] += 1;
            }
        }
        c
    }

    fn live(&self, ri: u32) -> bool {
        self.reqs.is_live(ri)
    }

    /// The request table, its free list, the stall queue and the deferred
    /// pieces agree; each live request's `pending` is its commands in
    /// flight plus its pieces deferred plus its waits for a slot's free.
    fn check_requests(&self, ios: &mut IoCounts) {
        self.reqs.check(self.config.requests_max);
        let expected = &mut ios.per_req;
        for (slot, waiters) in &self.deferred {
            assert!(!waiters.is_empty(), "an empty waiter list for slot {slot}");
            for d in waiters {
                let (Deferred::Write { req, .. } | Deferred::Read { req, .. }) = *d;
                assert!(self.live(req), "a deferred piece of a dead request {req}");
                expected[req as usize] += 1;
            }
        }
        // Failed write-through requests held until a slot's record is zeroed.
        for (slot, reqs) in &self.free_waiters {
            for &req in reqs {
                assert!(self.live(req), "a dead request {req} waits for slot {slot}");
                expected[req as usize] += 1;
            }
        }
        let mut stalled_count = 0;
        let (mut around, mut through) = (0, 0);
        for ri in (0..self.reqs.len() as u32).filter(|&ri| self.live(ri)) {
            let r = self.req(ri);
            assert_eq!(
                r.pending, expected[ri as usize],
                "request {ri}: pending against its commands in flight and waits"
            );
            if r.stalled_at.is_some() {
                stalled_count += 1;
                assert_eq!(r.pending, 0, "stalled request {ri} has work pending");
                assert!(r.reserved.is_empty(), "stalled request {ri} holds slots");
            }
            r.path.check();
            let unpromoted = |kind| r.path.io_of(kind).is_some() && !r.path.promoted();
            around += u32::from(unpromoted(BackingKind::Around));
            through += u32::from(unpromoted(BackingKind::BypassThrough));
        }
        for &ri in &self.stalled {
            assert!(self.live(ri), "stalled request {ri} is not live");
            assert!(
                self.req(ri).stalled_at.is_some(),
                "request {ri} queued as stalled without a stall time"
            );
        }
        assert_eq!(stalled_count, self.stalled.len(), "the stall queue");
        self.bypassed.check(around, through);
    }

    /// The I/O table, its free list and generations, and the counts kept
    /// beside it (destages, bypasses, backing writes per page).
    fn check_ios(&self, ios: &IoCounts, filter: bool) {
        self.ios.check(ios.live);
        self.destager.check(ios.destages, ios.checkpoints);
        assert_eq!(
            ios.bypasses,
            self.bypassed.around(),
            "bypass writes in flight against the I/O table's bypass writes, not promoted"
        );
        let bypass_pages = self.bypass_pages.total();
        assert_eq!(
            ios.bypass_pages, bypass_pages,
            "bypass_pages against the pages of the bypass writes in flight"
        );
        self.bypass_pages.check("bypass_pages");
        self.held_pages.check("held_pages");
        if filter {
            let backing = self.writes.backing_writes_in_flight();
            assert_eq!(
                ios.backing_write_pages, backing,
                "backing_writes_in_flight against the backing writes in flight"
            );
        }
    }

    /// The dirty set against the slots: every page in it is its key's
    /// current version, dirty or being filled, and every dirty slot is in
    /// it; the candidate count against the groups' flags.
    fn check_dirty(&self) {
        let mut in_set = 0usize;
        let mut dirty_in_set = 0usize;
        self.dirty.for_each_slot(|s| {
            let slot = SlotIndex(s);
            in_set += 1;
            let key = self.slots.key(slot);
            assert_eq!(
                self.slots.lookup(key),
                Some(slot),
                "dirty slot {s} is not its page's current version"
            );
            match self.slots.state(slot) {
                SlotState::Dirty => dirty_in_set += 1,
                SlotState::Filling => {}
                other => panic!("slot {s} in the dirty set is {other:?}"),
            }
        });
        assert_eq!(in_set, self.dirty.pages(), "the dirty set's page count");
        self.check_runs();
        let sum =
            |f: fn(&VolumeCounts) -> u64| self.volumes.iter().map(|v| f(&v.counts)).sum::<u64>();
        let s = &self.stats;
        for (name, volumes, engine) in [
            (
                "destaged pages",
                sum(|c| c.destaged_pages),
                s.destaged_pages,
            ),
            ("read pages", sum(|c| c.read_pages), s.read_pages),
            (
                "read page hits",
                sum(|c| c.read_page_hits),
                s.read_page_hits,
            ),
            ("write pages", sum(|c| c.write_pages), s.write_pages),
            (
                "write page hits",
                sum(|c| c.write_page_hits),
                s.write_page_hits,
            ),
        ] {
            assert_eq!(volumes, engine, "the volumes' {name} against the engine's");
        }
        let per_volume: u64 = self.volumes.iter().map(|v| v.counts.dirty_pages).sum();
        assert_eq!(
            per_volume, in_set as u64,
            "the volumes' dirty pages against the dirty set"
        );
        let dirty_slots = (0..self.slots.len())
            .filter(|&s| self.slots.state(SlotIndex(s)) == SlotState::Dirty)
            .count();
        assert_eq!(
            dirty_slots, dirty_in_set,
            "a slot in state Dirty outside the dirty set"
        );
        let keys = self.slots.keys();
        let mut candidates = 0usize;
        let mut group = self.dirty.next_group(keys, None, E_CANDIDATE);
        while let Some(g) = group {
            candidates += 1;
            group = self.dirty.next_group(keys, Some(g), E_CANDIDATE);
        }
        assert_eq!(
            candidates, self.candidates,
            "candidates against the groups flagged candidate"
        );
    }

    /// The dirty set's runs (the destages a drain would issue) against a
    /// count of its pages in key order.
    fn check_runs(&self) {
        let (mut runs, mut last) = (0usize, None::<PageKey>);
        self.dirty.for_each_slot(|s| {
            let key = self.slots.key(SlotIndex(s));
            let group = |k: PageKey| self.dirty.group_of(k.0);
            let joins = last.is_some_and(|p| p.0 + 1 == key.0 && group(p) == group(key));
            runs += usize::from(!joins);
            last = Some(key);
        });
        assert_eq!(runs, self.dirty.runs(), "the dirty set's runs");
    }

    /// What waits for something: a deferred piece waits for a slot being
    /// written, and nothing waits once nothing is in flight.
    fn check_waits(&self) {
        for &slot in self.deferred.keys() {
            assert_eq!(
                self.slots.state(SlotIndex(slot)),
                SlotState::Filling,
                "pieces wait for slot {slot}, which is not being written"
            );
        }
        if self.reqs.live_count() == 0 {
            assert!(self.deferred.is_empty(), "deferred pieces with no request");
            assert!(self.stalled.is_empty(), "stalled writes with no request");
        }
    }
}
