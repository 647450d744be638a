//! Destage: the candidate groups kept in step with the dirty set, the rate
//! and order that pick groups, and the runs written to the backing.

use super::*;

impl Engine {
    /// Take a page out of the dirty set (before its slot can be reused). If
    /// that empties a candidate group, the group leaves the candidates.
    pub(super) fn remove_dirty(&mut self, key: PageKey) {
        let (flags, slot) = self.dirty.remove(self.slots.keys(), key.0);
        self.ages.cleaned(slot);
        self.counts_mut(key).dirty_pages -= 1;
        let gkey = self.dirty.group_of(key.0);
        if flags & E_CANDIDATE != 0 && self.dirty.group_flags(self.slots.keys(), gkey).is_none() {
            self.candidates -= 1;
            self.order.remove(view!(self), GroupKey(gkey));
        }
    }

    /// Keep the candidate set in step with a group: a candidate is a group
    /// with a dirty page whose latest version is not being destaged.
    pub(super) fn group_changed(&mut self, gkey: u64) {
        let Some(flags) = self.dirty.group_flags(self.slots.keys(), gkey) else {
            return;
        };
        let candidate = flags & E_CANDIDATE != 0;
        let slots = &self.slots;
        let undestaged = self.dirty.any_in_group(slots.keys(), gkey, |s| {
            !slots.has(SlotIndex(s), FLAG_DESTAGING)
        });
        if undestaged && !candidate {
            self.dirty
                .set_group_flags(self.slots.keys(), gkey, E_CANDIDATE, true);
            self.candidates += 1;
            self.order.insert(view!(self), GroupKey(gkey));
        } else if !undestaged && candidate {
            self.dirty
                .set_group_flags(self.slots.keys(), gkey, E_CANDIDATE, false);
            self.candidates -= 1;
            self.order.remove(view!(self), GroupKey(gkey));
        }
    }

    pub(super) fn start_destages(&mut self) {
        if self.timers.get(Timer::DestageRetry).is_some() {
            return;
        }
        if self.destaging_stopped && self.stalled.is_empty() {
            return;
        }
        if self.ordered.is_some() {
            return self.start_ordered();
        }
        if self.journal.is_some() {
            return self.start_journaled();
        }
        self.destage_expired();
        let mut fruitless = 0usize;
        loop {
            // The trickle needs both the last and the next destage sequential:
            // look under the pointer only when the first holds.
            let next_sequential = self.destager.last_sequential() && {
                let under = self.order.peek(&*view!(self));
                under.is_some_and(|g| self.dirty.group_has(self.slots.keys(), g.0, E_SEQUENTIAL))
            };
            let input = RateInput {
                occupancy_pages: self.dirty_versions(),
                capacity_pages: self.log_or_cache_pages(),
                last_destage_sequential: self.destager.last_sequential(),
                next_candidate_sequential: next_sequential,
            };
            let target = self.destage_target(&input);
            if self.destager.in_flight() >= target || fruitless > self.candidates {
                return;
            }
            let Some(GroupKey(gkey)) = self.order.pick(view!(self)) else {
                return;
            };
            let keys = self.slots.keys();
            self.dirty.set_group_flags(keys, gkey, E_CANDIDATE, false);
            self.candidates -= 1;
            self.stats.destage_picks += 1;
            self.destager
                .picked(self.dirty.group_has(keys, gkey, E_SEQUENTIAL));
            if self.issue_group_destages(gkey) == 0 {
                fruitless += 1;
            }
            self.group_changed(gkey);
        }
    }

    /// A stop is in progress: from now on no destage starts (those in
    /// flight finish, and a checkpoint under way completes) unless a write
    /// waits for room; dirty pages stay for the next start. Not undone: the
    /// engine is about to be closed.
    pub fn stop_destaging(&mut self) {
        self.destaging_stopped = true;
    }

    /// Destages to keep outstanding: the rate's, raised to full rate while
    /// writes wait for room, in a drain, or under a policy that keeps no
    /// dirty data, and to the idle rate once the cache is idle.
    pub(super) fn destage_target(&mut self, input: &RateInput) -> u32 {
        let target = self.rate.target_outstanding(input);
        // In log mode room comes from the log's tail, which copies the
        // dirty pages in its way forward: destaging makes room only when
        // the dirty pages leave too little of the ring for the write that
        // waits (then the tail would copy them round for ever).
        let stalls_want_room =
            !self.stalled.is_empty() && (self.log.is_none() || self.log_dirty_leaves_no_room());
        if self.draining || stalls_want_room || self.must_drain_dirty() {
            self.config.rate.destages_max
        } else if self.idle_draining {
            target.max(self.config.staleness.idle_destages)
        } else {
            target
        }
    }

    /// Dirty versions: the dirty pages, and under ordered write-back their
    /// older versions not yet on the backing.
    pub(super) fn dirty_versions(&self) -> u64 {
        match (&self.ordered, &self.journal) {
            (Some(o), _) => o.versions(),
            (None, Some(j)) => self.dirty.pages() as u64 + j.kept(),
            (None, None) => self.dirty.pages() as u64,
        }
    }

    /// The pages a destage of the cache's own measures occupancy against:
    /// the share of the ring dirty pages may hold in log mode, else the
    /// cache (journaled write-back's checkpoints use `rate_capacity_pages`).
    fn log_or_cache_pages(&self) -> u64 {
        self.log
            .as_ref()
            .map_or(self.capacity_pages(), |log| log.dirty_capacity())
    }

    /// The pages the destage rate measures occupancy against: the host
    /// journal under journaled write-back (its checkpoints are the
    /// destages); in log mode the share of the ring dirty pages may hold
    /// (`Log::dirty_capacity`: the rest is room for stale versions, so the
    /// tail meets few live dirty pages to copy); else the cache.
    pub(super) fn rate_capacity_pages(&self) -> u64 {
        self.journal
            .as_ref()
            .map_or(self.log_or_cache_pages(), Journal::limit)
    }

    /// Ordered write-back: as many ready versions as the rate allows (a
    /// page past the maximum dirty age raises it to full rate: its
    /// dependencies must go first).
    fn start_ordered(&mut self) {
        let input = RateInput {
            occupancy_pages: self.dirty_versions(),
            capacity_pages: self.capacity_pages(),
            last_destage_sequential: false,
            next_candidate_sequential: false,
        };
        let mut target = self.destage_target(&input);
        if self.ages.has_expired() {
            // Every write answered so far goes, since the old pages' own
            // dependencies must go first.
            self.ages.clear_expired();
            self.ord().flush_answered();
        }
        if self.ord().flushing() {
            target = self.config.rate.destages_max;
        }
        self.start_ordered_destages(target);
    }

    /// Dirty pages under a write policy that keeps none (recovered, or left
    /// by a failed backing write): they go at once.
    pub(super) fn must_drain_dirty(&self) -> bool {
        self.dirty.pages() > 0 && !self.write_policy.keeps_dirty()
    }

    /// Destage every dirty, written page of group `gkey` as contiguous runs.
    /// Returns the number of destage requests issued.
    pub(super) fn issue_group_destages(&mut self, gkey: u64) -> u32 {
        let mut group = std::mem::take(&mut self.positions);
        self.dirty.group_slots(self.slots.keys(), gkey, &mut group);
        let vol = PageKey(gkey).volume();
        let mut issued = 0;
        let mut run: Vec<SlotIndex> = Vec::new();
        let mut run_start = 0u64;
        for &s in &group {
            let slot = SlotIndex(s);
            let key = self.slots.key(slot);
            let page = key.page().0;
            let ready = self.slots.state(slot) == SlotState::Dirty
                && !self.slots.has(slot, FLAG_DESTAGING)
                && (self.old_versions.is_empty() || !self.old_versions.contains_key(&key.0))
                && !self.destage_held(key);
            let breaks_run = !ready || run_start + run.len() as u64 != page;
            if breaks_run && !run.is_empty() {
                self.issue_destage(vol, PageIndex(run_start), std::mem::take(&mut run));
                issued += 1;
            }
            if ready {
                if run.is_empty() {
                    run_start = page;
                }
                self.slots.set_flag(slot, FLAG_DESTAGING, true);
                run.push(slot);
            }
        }
        if !run.is_empty() {
            self.issue_destage(vol, PageIndex(run_start), run);
            issued += 1;
        }
        self.positions = group;
        issued
    }

    /// The current dirty version of `key` in `slot` is on the backing: it
    /// leaves the dirty set and stays as a clean copy, or (persistent
    /// caches, which keep no clean copy under a dirty record: evicting it
    /// later would reuse the slot while recovery could still find the old
    /// page there) is retired, counted as an old version until its record
    /// is freed.
    pub(super) fn dirty_page_on_backing(&mut self, slot: SlotIndex, key: PageKey) {
        self.remove_dirty(key);
        if self.config.keep_clean && !self.config.persistent {
            self.slots.set_state(slot, SlotState::Clean);
            self.replacement.insert(slot, key);
        } else {
            self.retire(slot);
            self.release_slot_if_free(slot);
        }
    }

    /// No destage of `key`'s page while a backing write that could land
    /// after it is in flight (`held_pages`): a promoted bypass's original,
    /// or a write through the cache whose cache copy failed (the older
    /// version came back, and its destage raced the newer backing write:
    /// the engine model's soak found it).
    pub(super) fn destage_held(&self, key: PageKey) -> bool {
        self.held_pages.contains(key)
    }

    /// Hold the destages of request `ri`'s pages until its backing write
    /// lands (once per request).
    pub(super) fn hold_pages(&mut self, ri: u32) {
        let r = self.req_mut(ri);
        if r.path.hold() {
            return;
        }
        let (vol, off, len) = (r.volume, r.offset_bytes, r.len_bytes);
        for piece in self.geometry.pieces(off, len) {
            self.held_pages.add(PageKey::new(vol, piece.page));
        }
    }

    /// A held backing write of these bytes landed.
    pub(super) fn release_pages(&mut self, vol: VolumeId, off: u64, len: u64) {
        for piece in self.geometry.pieces(off, len) {
            self.held_pages.remove(PageKey::new(vol, piece.page));
        }
    }

    pub(super) fn issue_destage(
        &mut self,
        volume: VolumeId,
        first_page: PageIndex,
        slots: Vec<SlotIndex>,
    ) {
        self.stats.destages += 1;
        self.stats.destaged_pages += slots.len() as u64;
        self.volumes[volume.0 as usize].counts.destaged_pages += slots.len() as u64;
        let sector = self.geometry.page_offset_bytes(first_page) / 512;
        if let Some(seek) = self.destager.run_issued(sector) {
            self.stats.destage_distance_sectors_sum += seek as u128;
            self.stats.destage_distance_pairs += 1;
        }
        let io = self.new_io(IoCtx::Destage {
            slots: slots.clone(),
        });
        self.commands.push_back(IoCommand::Destage {
            io,
            volume,
            first_page,
            slots,
        });
    }

    pub(super) fn finish_destage(
        &mut self,
        now: Nanos,
        slots: Vec<SlotIndex>,
        result: Result<(), IoError>,
    ) {
        self.destager.done();
        // A destage request is a run within one group: its candidacy is
        // settled once, after every page of the run.
        let gkey = self.dirty.group_of(self.slots.key(slots[0]).0);
        let mut any_dirty = false;
        for &slot in &slots {
            debug_assert!(self.slots.has(slot, FLAG_DESTAGING));
            self.slots.set_flag(slot, FLAG_DESTAGING, false);
            let key = self.slots.key(slot);
            match self.slots.state(slot) {
                SlotState::Dirty => {
                    any_dirty = true;
                    debug_assert_eq!(self.dirty.group_of(key.0), gkey);
                    if result.is_ok() {
                        self.dirty_page_on_backing(slot, key);
                    }
                }
                SlotState::Stale if self.ordered.is_some() && result.is_err() => {
                    // Superseded while its destage ran, which failed: ordered
                    // write-back still owes the backing this version.
                    self.slots.set_state(slot, SlotState::OldDirty);
                }
                SlotState::Stale | SlotState::OldDirty => {
                    if self.slots.state(slot) == SlotState::OldDirty {
                        if result.is_err() {
                            self.ordered_page_changed(key);
                            continue;
                        }
                        self.slots.set_state(slot, SlotState::Stale);
                    }
                    // Persistent caches count the old version until its free record is durable.
                    if !self.config.persistent {
                        self.remove_old(slot);
                    }
                    self.release_slot_if_free(slot);
                }
                other => debug_assert!(false, "destaged slot in state {other:?}"),
            }
            if self.ordered.is_some() {
                if result.is_ok() {
                    self.ordered_version_done(slot);
                }
                self.ordered_page_changed(key);
            }
        }
        if any_dirty {
            self.group_changed(gkey);
        }
        self.rate
            .destage_done(self.dirty_versions(), self.log_or_cache_pages());
        match result {
            Ok(()) => self.destager.succeeded(),
            Err(_) => {
                self.stats.destage_errors += 1;
                let pause = self.destager.failed();
                self.timers
                    .set(Timer::DestageRetry, Some(Nanos(now.0 + pause)));
            }
        }
    }
}
