//! Writes and trims: room and routing, copy-on-write page versions, their
//! completion (write-back) or finalization (write-through), and undo on error.

use super::*;

impl Engine {
    /// Where write `ri` goes: around the cache if admission said so (by
    /// write-around's rule, so no cached version is lost), else where the
    /// write policy sends it.
    pub(super) fn route_of(&self, ri: u32) -> WriteRoute {
        let mut bypass_would_lose = || self.around_busy(ri);
        if self.req(ri).path.bypass() {
            WriteAround.route(&mut bypass_would_lose)
        } else {
            self.write_policy.route(&mut bypass_would_lose)
        }
    }

    /// Write `ri`'s route if it can be admitted now, None if it must wait.
    pub(super) fn route_if_room(&self, ri: u32) -> Option<WriteRoute> {
        let r = self.req(ri);
        let route = self.route_of(ri);
        if route == WriteRoute::Backing {
            // A held page's backing write was answered before it landed
            // (a promoted bypass's original): a later one must not race it.
            return (!self.overlaps_held(ri)).then_some(route);
        }
        if self.overlaps_bypass(ri) {
            return None;
        }
        let need = self.pages_of(r.offset_bytes, r.len_bytes);
        if !self.has_room(need) || !self.journal_has_room(need) {
            return None;
        }
        // Two backing writes of one page must not race, so a write that
        // goes to the backing now waits while an earlier one to its pages is
        // in flight.
        (route == WriteRoute::Cache || !self.backing_write_would_race(ri)).then_some(route)
    }

    /// True while an older version of `key`'s page is being destaged.
    pub(super) fn older_version_destaging(&self, key: PageKey) -> bool {
        self.old_versions
            .get(&key.0)
            .is_some_and(|q| q.iter().any(|&s| self.slots.has(s, FLAG_DESTAGING)))
    }

    /// A write-around over pages with a newer or in-flight version in the
    /// cache cannot bypass them without losing them: it goes through the
    /// cache. Nor can it bypass an older version not gone for good: one
    /// being destaged could land after it, and (persistent caches) one whose
    /// dirty record is not yet freed would come back over it after a crash.
    pub(super) fn around_busy(&self, ri: u32) -> bool {
        let r = self.req(ri);
        self.geometry.pieces(r.offset_bytes, r.len_bytes).any(|p| {
            let key = PageKey::new(r.volume, p.page);
            self.old_versions.contains_key(&key.0)
                || self
                    .slots
                    .lookup(key)
                    .is_some_and(|s| self.slots.state(s) != SlotState::Clean)
        })
    }

    /// A bypass write to one of `ri`'s pages is in flight.
    pub(super) fn overlaps_bypass(&self, ri: u32) -> bool {
        if self.bypassed.around() == 0 {
            return false;
        }
        let r = self.req(ri);
        self.geometry
            .pieces(r.offset_bytes, r.len_bytes)
            .any(|p| self.bypass_pages.contains(PageKey::new(r.volume, p.page)))
    }

    /// A backing write of `ri` now could race an earlier backing write to
    /// one of its pages: a version in flight (write-through), or a destage of
    /// the page's current or an older version, which could land after it
    /// and leave the backing older than an acknowledged write-through.
    pub(super) fn backing_write_would_race(&self, ri: u32) -> bool {
        let r = self.req(ri);
        self.overlaps_held(ri)
            || self.geometry.pieces(r.offset_bytes, r.len_bytes).any(|p| {
                let key = PageKey::new(r.volume, p.page);
                let current_busy = self.slots.lookup(key).is_some_and(|s| {
                    self.slots.state(s) == SlotState::Filling || self.slots.has(s, FLAG_DESTAGING)
                });
                current_busy || self.older_version_destaging(key)
            })
    }

    /// One of `ri`'s pages is held (`destage_held`): a backing write to it
    /// is in flight whose request may have been answered already (a
    /// promoted bypass's original), so the order of a later backing write
    /// against it is the client's to rely on.
    fn overlaps_held(&self, ri: u32) -> bool {
        if self.held_pages.is_empty() {
            return false;
        }
        let r = self.req(ri);
        self.geometry
            .pieces(r.offset_bytes, r.len_bytes)
            .any(|p| self.destage_held(PageKey::new(r.volume, p.page)))
    }

    /// Admit write `ri` on `route`, which `route_if_room` just gave.
    pub(super) fn admit_write(&mut self, ri: u32, route: WriteRoute) {
        debug_assert_eq!(Some(route), self.route_if_room(ri));
        self.stats.writes += 1;
        let r = self.req(ri);
        let (vol, off, len) = (r.volume, r.offset_bytes, r.len_bytes);
        let through = match route {
            WriteRoute::Backing => return self.admit_write_around(ri),
            WriteRoute::Cache => false,
            WriteRoute::CacheAndBacking => true,
        };
        self.reserve_slots(ri);
        for piece in self.geometry.pieces(off, len) {
            self.slots.prefetch(PageKey::new(vol, piece.page));
        }
        let first_page = self.geometry.page_of(off);
        let sequential_start =
            first_page.0 > 0 && self.page_dirty(PageKey::new(vol, PageIndex(first_page.0 - 1)));
        let mut pieces = self.geometry.pieces(off, len).peekable();
        let mut first_group = true;
        let (mut pages, mut hits) = (0, 0);
        while let Some(&first) = pieces.peek() {
            let (gnum, _) = self.geometry.group_of(first.page);
            let gkey = PageKey::new(vol, PageIndex(gnum)).0;
            let sequential = sequential_start || !first_group;
            first_group = false;
            let was_candidate = self.dirty.group_has(self.slots.keys(), gkey, E_CANDIDATE);
            let mut page_hit = false;
            while let Some(&piece) = pieces.peek() {
                if self.geometry.group_of(piece.page).0 != gnum {
                    break;
                }
                pieces.next();
                pages += 1;
                let key = PageKey::new(vol, piece.page);
                self.writes.written(key);
                let cur = self.slots.lookup(key);
                if self.slot_dirty(cur) {
                    hits += 1;
                    if cur.is_some_and(|s| self.slots.has(s, FLAG_DESTAGING)) {
                        self.stats.write_page_hits_destaging += 1;
                    }
                    page_hit = true;
                }
                self.issue_write_piece_at(ri, piece, through, cur);
            }
            self.dirty
                .set_group_flags(self.slots.keys(), gkey, E_SEQUENTIAL, sequential);
            self.stats.random_write_page_hits += (page_hit && !sequential) as u64;
            if was_candidate {
                self.stats.write_group_hits += 1;
                self.stats.write_group_hits_sequential += sequential as u64;
                let hit = GroupHit {
                    page_hit,
                    sequential,
                };
                self.order.hit(view!(self), GroupKey(gkey), hit);
            }
        }
        self.count_pages(vol, RequestKind::Write, pages, hits);
        if through {
            self.issue_backing_write(ri, false);
        }
    }

    /// A request's pages and page hits, in the engine's counters and its
    /// volume's (once per request, not per page).
    pub(super) fn count_pages(&mut self, vol: VolumeId, kind: RequestKind, pages: u64, hits: u64) {
        let c = &mut self.volumes[vol.0 as usize].counts;
        if kind == RequestKind::Read {
            self.stats.read_pages += pages;
            self.stats.read_page_hits += hits;
            c.read_pages += pages;
            c.read_page_hits += hits;
        } else {
            self.stats.write_pages += pages;
            self.stats.write_page_hits += hits;
            c.write_pages += pages;
            c.write_page_hits += hits;
        }
    }

    /// Take the slots of write `ri`'s new page versions now, so deferred
    /// pieces never wait for room: a run of consecutive free slots when the
    /// pool has one (its pages then reach the cache device in one write),
    /// else one by one. `reserved` is popped from the end, piece by piece,
    /// so it holds the slots in descending order.
    pub(super) fn reserve_slots(&mut self, ri: u32) {
        let r = self.req(ri);
        let (vol, off, len) = (r.volume, r.offset_bytes, r.len_bytes);
        let n = self.pages_of(off, len) as u32;
        if self.log.is_some() {
            // Slots are taken in log order as the pieces are issued.
            return self.log_reserve(ri, n as u64);
        }
        let mut reserved = std::mem::take(&mut self.req_mut(ri).reserved);
        debug_assert!(reserved.is_empty());
        let run = if n > 1 {
            self.slots.pop_free_run(n)
        } else {
            None
        };
        match run {
            Some(first) => reserved.extend((first.0..first.0 + n).rev().map(SlotIndex)),
            None => {
                for piece in self.geometry.pieces(off, len) {
                    reserved.push(self.alloc_slot(PageKey::new(vol, piece.page)));
                }
                reserved.reverse();
            }
        }
        debug_assert_eq!(reserved.len() as u32, n);
        self.req_mut(ri).reserved = reserved;
    }

    pub(super) fn admit_write_around(&mut self, ri: u32) {
        self.stats.write_bypasses += 1;
        let r = self.req(ri);
        let (vol, off, len) = (r.volume, r.offset_bytes, r.len_bytes);
        let pages = self.pages_of(off, len);
        self.stats.write_bypassed_pages += pages;
        self.count_pages(vol, RequestKind::Write, pages, 0);
        for piece in self.geometry.pieces(off, len) {
            let key = PageKey::new(vol, piece.page);
            self.writes.written(key);
            if let Some(slot) = self.slots.lookup(key) {
                debug_assert_eq!(self.slots.state(slot), SlotState::Clean);
                self.retire(slot);
                self.release_slot_if_free(slot);
            }
        }
        self.issue_backing_write(ri, true);
    }

    pub(super) fn issue_backing_write(&mut self, ri: u32, around: bool) {
        let r = self.req(ri);
        let src = if r.kind == RequestKind::WriteZeroes {
            Source::Zero
        } else {
            Source::Request {
                req: r.id,
                offset_bytes: 0,
            }
        };
        let (volume, offset_bytes, len_bytes, fua) =
            (r.volume, r.offset_bytes, r.len_bytes, r.flags.fua);
        for piece in self.geometry.pieces(offset_bytes, len_bytes) {
            let key = PageKey::new(volume, piece.page);
            self.writes.backing_write_issued(key);
            if around {
                self.bypass_pages.add(key);
            }
        }
        if around {
            self.bypassed.around_issued();
        }
        self.req_mut(ri).pending += 1;
        let io = self.new_io(IoCtx::WriteBacking { req: ri, around });
        self.req_mut(ri).path.issue(io, around);
        if self
            .req(ri)
            .path
            .io_of(BackingKind::BypassThrough)
            .is_some()
        {
            self.bypassed.through_issued();
        }
        self.commands.push_back(IoCommand::WriteBacking {
            io,
            volume,
            offset_bytes,
            len_bytes,
            src,
            fua,
        });
    }

    /// The page's latest version is newer than the backing (it is in the
    /// dirty set): its current slot is dirty, or being filled to be dirty.
    pub(super) fn page_dirty(&self, key: PageKey) -> bool {
        self.slot_dirty(self.slots.lookup(key))
    }

    /// `page_dirty` of the page whose current slot is `cur`.
    fn slot_dirty(&self, cur: Option<SlotIndex>) -> bool {
        cur.is_some_and(|s| match self.slots.state(s) {
            SlotState::Dirty => true,
            SlotState::Filling => !self.slots.has(s, FLAG_FILL_CLEAN),
            _ => false,
        })
    }

    /// Write one page version into a fresh slot (copy-on-write), or wait for
    /// the page's in-flight version first. The dirty bookkeeping happens here,
    /// when the version is issued, so a deferred piece sees the page as the
    /// earlier write left it (written, or reverted after an error).
    pub(super) fn issue_write_piece(&mut self, ri: u32, piece: PagePiece, through: bool) {
        let key = PageKey::new(self.req(ri).volume, piece.page);
        self.issue_write_piece_at(ri, piece, through, self.slots.lookup(key));
    }

    /// `issue_write_piece`, the page's current slot `cur` looked up.
    fn issue_write_piece_at(
        &mut self,
        ri: u32,
        piece: PagePiece,
        through: bool,
        cur: Option<SlotIndex>,
    ) {
        let vol = self.req(ri).volume;
        let key = PageKey::new(vol, piece.page);
        debug_assert_eq!(cur, self.slots.lookup(key));
        if let Some(c) = cur {
            if self.slots.state(c) == SlotState::Filling {
                self.req_mut(ri).pending += 1;
                self.defer(
                    c,
                    Deferred::Write {
                        req: ri,
                        piece,
                        through,
                    },
                );
                return;
            }
        }
        // Write-through keeps a page clean unless it holds newer data than the
        // backing, or an older version of it is being destaged: that destage
        // could land after this write's backing write, so this version stays
        // dirty and is destaged after it (destages of a page go in order).
        let dirty_before = self.slot_dirty(cur);
        let through_clean = through && !dirty_before;
        let clean = through_clean && !self.older_version_destaging(key);
        let undo = Undo {
            made_dirty: !clean && !dirty_before,
            through_clean: through_clean && clean,
        };
        let slot = self.take_reserved_slot(ri);
        let base = self.page_base(vol, piece, cur);
        let coalesces = self.journal.is_some()
            && cur.is_some_and(|c| {
                self.slots.state(c) == SlotState::Dirty
                    && !self.slots.has(c, FLAG_DESTAGING)
                    && !self.journal_keeps(c)
            });
        let old = self.install_version(key, slot, cur, clean, dirty_before);
        if self.journal.is_some() {
            self.journal_version(slot, coalesces);
        }
        let node = self.req(ri).node;
        if node != NO_NODE {
            self.ordered_version(node, slot);
        }
        if through {
            self.req_mut(ri).finalize.push(slot);
        }
        let fill = FillPage { slot, old, undo };
        self.push_version(ri, (piece, base), fill, through);
    }

    /// The command that writes page version `fill` of write `ri`: it joins
    /// the batch's run of the write's pages where it continues one (log
    /// mode), else it is a page write of its own.
    fn push_version(
        &mut self,
        ri: u32,
        (piece, base): (PagePiece, PageBase),
        fill: FillPage,
        through: bool,
    ) {
        let r = self.req(ri);
        let key = PageKey::new(r.volume, piece.page);
        let src = if r.kind == RequestKind::WriteZeroes {
            Source::Zero
        } else {
            Source::Request {
                req: r.id,
                offset_bytes: piece.req_offset_bytes,
            }
        };
        // Write-through versions are recorded dirty too: the backing may miss
        // the write if the host crashes before it completes.
        let record = self.record(key, true);
        if base == PageBase::None && self.log_extend_run(ri, through, fill, src, record) {
            return;
        }
        let slot = fill.slot;
        self.req_mut(ri).pending += 1;
        let io = self.new_io(IoCtx::Fill {
            req: ri,
            fill,
            through,
        });
        self.push_page_write(IoCommand::WritePage {
            io,
            slot,
            base,
            patch: Patch {
                page_offset_bytes: piece.page_offset_bytes,
                len_bytes: piece.len_bytes,
                src,
            },
            record,
        });
    }

    /// The slot of write `ri`'s next page version: reserved at admission,
    /// or in log mode the next of the log, paid by its reservation.
    fn take_reserved_slot(&mut self, ri: u32) -> SlotIndex {
        if self.log.is_some() {
            return self.log_alloc(Some(ri));
        }
        let r = self.req_mut(ri);
        r.reserved.pop().expect("slot reserved at admission")
    }

    /// What a new version of `piece`'s page is built on: nothing (the piece
    /// covers it), the current version, or the backing's page (a stage).
    fn page_base(&self, volume: VolumeId, piece: PagePiece, cur: Option<SlotIndex>) -> PageBase {
        if piece.is_whole_page(self.geometry.page_size_bytes()) {
            PageBase::None
        } else if let Some(c) = cur {
            PageBase::Slot(c)
        } else {
            PageBase::Backing {
                volume,
                page: piece.page,
            }
        }
    }

    /// Make `slot` the current version of `key` (being filled), superseding
    /// `cur` (pinned until the fill is done, since the new version may be
    /// built on it), and put it in the dirty set unless it is meant clean.
    /// Returns the superseded version and its state before.
    pub(super) fn install_version(
        &mut self,
        key: PageKey,
        slot: SlotIndex,
        cur: Option<SlotIndex>,
        clean: bool,
        dirty_before: bool,
    ) -> Option<(SlotIndex, SlotState)> {
        debug_assert_eq!(self.slots.state(slot), SlotState::Free);
        let old = cur.map(|c| {
            let state = self.slots.state(c);
            self.slots.pin(c);
            self.supersede(c, slot);
            (c, state)
        });
        if old.is_none() {
            self.slots.map(slot, key);
        }
        self.slots.set_state(slot, SlotState::Filling);
        self.slots.set_flag(slot, FLAG_FILL_CLEAN, clean);
        if !clean {
            // The new version is the page's entry in the dirty set. It is not
            // being destaged, so a group that is a candidate stays one.
            let flags = if dirty_before {
                let (flags, before) = self.dirty.replace(self.slots.keys(), key.0, slot.0);
                self.ages.moved(before, slot.0);
                flags
            } else {
                self.ages.dirtied(slot.0);
                self.counts_mut(key).dirty_pages += 1;
                self.dirty.insert(self.slots.keys(), slot.0)
            };
            if flags & E_CANDIDATE == 0 {
                self.group_changed(self.dirty.group_of(key.0));
            }
        }
        debug_assert_eq!(self.slots.lookup(key), Some(slot));
        debug_assert_eq!(self.page_dirty(key), !clean);
        old
    }

    /// The record of a new page version, with the next version number.
    pub(super) fn record(&mut self, key: PageKey, dirty: bool) -> SlotRecord {
        let seq = self.next_seq;
        self.next_seq += 1;
        SlotRecord { key, seq, dirty }
    }

    /// Write-back: a page write completed; the slot is now the page's version.
    pub(super) fn finish_fill(&mut self, slot: SlotIndex) {
        debug_assert_eq!(self.slots.state(slot), SlotState::Filling);
        if self.slots.has(slot, FLAG_FILL_CLEAN) {
            self.slots.set_flag(slot, FLAG_FILL_CLEAN, false);
            self.slots.set_state(slot, SlotState::Clean);
            self.replacement.insert(slot, self.slots.key(slot));
        } else {
            self.slots.set_state(slot, SlotState::Dirty);
            if self.journal.is_some() {
                self.journal_fill_done(slot);
            }
            self.log_version_written(self.slots.key(slot));
        }
        self.release_waiters(slot);
    }

    /// Write-through: the request is done; its page versions become final.
    /// If the backing write failed, a clean-intent version becomes dirty so it
    /// is destaged later rather than lost.
    pub(super) fn finalize_through(&mut self, slot: SlotIndex, backing_ok: bool) {
        if self.slots.state(slot) != SlotState::Filling {
            return;
        }
        if !backing_ok && self.slots.has(slot, FLAG_FILL_CLEAN) {
            self.slots.set_flag(slot, FLAG_FILL_CLEAN, false);
            let key = self.slots.key(slot);
            self.mark_dirty(key);
        }
        if self.config.persistent && self.slots.has(slot, FLAG_FILL_CLEAN) {
            // Its record says dirty (see `record`): a persistent cache keeps no
            // clean copy under a dirty record; the version leaves through FreeSlots.
            self.slots.set_flag(slot, FLAG_FILL_CLEAN, false);
            self.retire(slot);
            self.release_slot_if_free(slot);
            self.release_waiters(slot);
            return;
        }
        self.finish_fill(slot);
    }

    /// Bookkeeping for a page that becomes dirty outside admission.
    /// Its current slot must be the dirty version and not yet in the set.
    pub(super) fn mark_dirty(&mut self, key: PageKey) {
        let slot = self.slots.lookup(key).expect("dirty page has a slot");
        self.ages.dirtied(slot.0);
        self.counts_mut(key).dirty_pages += 1;
        if self.dirty.insert(self.slots.keys(), slot.0) & E_CANDIDATE == 0 {
            self.group_changed(self.dirty.group_of(key.0));
        }
    }

    /// Undo an admitted write's page version after its write failed.
    pub(super) fn revert_fill(
        &mut self,
        slot: SlotIndex,
        old: Option<(SlotIndex, SlotState)>,
        undo: Undo,
    ) {
        let key = self.slots.key(slot);
        self.log_write_failed(slot);
        // A version meant dirty is the page's entry in the dirty set.
        let in_dirty_set = !self.slots.has(slot, FLAG_FILL_CLEAN);
        self.slots.unmap(slot);
        self.slots.set_state(slot, SlotState::Stale);
        self.slots.set_flag(slot, FLAG_FILL_CLEAN, false);
        let restored = old.filter(|_| !undo.through_clean);
        // Ordered write-back destages older versions while a newer one
        // fills: one already on the backing comes back clean (counting it
        // dirty again would destage it twice).
        // Journaled write-back likewise, unless the previous version was
        // replaced inside the same transaction (then it is not on the backing).
        let journal = self.journal.as_ref();
        let on_backing = restored.is_some_and(|(o, _)| {
            let done =
                self.slots.state(o) == SlotState::Stale && !self.slots.has(o, FLAG_DESTAGING);
            done && (self.ordered.is_some()
                || journal.is_some_and(|_| self.journal_keeps_as(o, slot)))
        });
        if in_dirty_set && self.journal.is_some() {
            self.journal_fill_done(slot);
            if restored.is_some_and(|(o, _)| self.slots.state(o) == SlotState::OldDirty) {
                self.journal_unkeep();
            }
        }
        if let Some((o, state)) = restored {
            // The previous version becomes current again.
            self.remove_old(o);
            self.slots.map(o, key);
            let clean = state == SlotState::Clean || on_backing;
            let state = if clean {
                SlotState::Clean
            } else {
                SlotState::Dirty
            };
            self.slots.set_state(o, state);
            if clean {
                self.replacement.insert(o, key);
            }
        }
        if in_dirty_set {
            if undo.made_dirty || on_backing {
                self.remove_dirty(key);
            } else {
                // The page was dirty before: its previous version is again.
                let (o, _) = restored.expect("a dirty page's previous version");
                let (_, before) = self.dirty.replace(self.slots.keys(), key.0, o.0);
                self.ages.moved(before, o.0);
            }
            self.group_changed(self.dirty.group_of(key.0));
        }
        self.release_slot_if_free(slot);
        self.release_waiters(slot);
        if in_dirty_set && self.ordered.is_some() {
            self.ordered_version_done(slot);
            self.ordered_page_changed(key);
        }
    }

    pub(super) fn admit_trim(&mut self, ri: u32) {
        self.stats.trims += 1;
        let r = self.req(ri);
        let (vol, off, len) = (r.volume, r.offset_bytes, r.len_bytes);
        let ps = self.geometry.page_size_bytes();
        let pieces: Vec<PagePiece> = self
            .geometry
            .pieces(off, len)
            .filter(|p| p.is_whole_page(ps))
            .collect();
        for piece in pieces {
            let key = PageKey::new(vol, piece.page);
            let Some(slot) = self.slots.lookup(key) else {
                continue;
            };
            match self.slots.state(slot) {
                SlotState::Filling => continue, // advisory: leave in-flight versions alone
                // Ordered and journaled write-back destage every version
                // of a transaction: a dropped one would leave the backing
                // at no consistent point.
                SlotState::Dirty if self.ordered.is_some() || self.journal.is_some() => continue,
                SlotState::Dirty => {
                    self.remove_dirty(key);
                    self.retire(slot);
                    self.group_changed(self.dirty.group_of(key.0));
                }
                _ => self.retire(slot),
            }
            self.release_slot_if_free(slot);
        }
    }
}
