//! Completions: what each finished `IoCommand` means for its request, slots
//! and groups. `handle_completion` dispatches on the I/O's context; each
//! kind has its own method below.

use super::*;

impl Engine {
    pub fn handle_completion(
        &mut self,
        now: Nanos,
        io: IoId,
        result: Result<(), IoError>,
    ) -> Result<(), EngineError> {
        self.advance_ages(now);
        self.complete_one(now, io, result)?;
        self.end_step(now);
        Ok(())
    }

    /// The end of a request's or a completion's step: stalled writes
    /// admitted where room allows, destages started, frees and (log mode)
    /// batches issued, the invariants checked.
    pub(super) fn end_step(&mut self, now: Nanos) {
        self.drain_stalls(now);
        self.start_destages();
        self.emit_frees(now);
        self.log_step();
        self.step_done();
    }

    /// What command `io`'s completion means (a batch's: each of its inner
    /// commands' too), without the end-of-step work.
    pub(super) fn complete_one(
        &mut self,
        now: Nanos,
        io: IoId,
        result: Result<(), IoError>,
    ) -> Result<(), EngineError> {
        let ctx = self.take_io(io).ok_or(EngineError::UnknownIo(io))?;
        let done_req = match ctx {
            IoCtx::PromotedOriginal {
                volume,
                offset_bytes,
                len_bytes,
            } => {
                self.original_discarded(volume, offset_bytes, len_bytes, result);
                None
            }
            IoCtx::Destage { slots } => {
                self.finish_destage(now, slots, result);
                None
            }
            IoCtx::FreeSlots { slots } => {
                self.complete_free_slots(slots, result);
                None
            }
            IoCtx::Checkpoint { cmd } => {
                self.checkpoint_io_done(now, cmd, result);
                None
            }
            IoCtx::Batch {
                seq,
                header,
                next_header,
                ios,
            } => {
                self.complete_batch(now, seq, (header, next_header), ios, result)?;
                None
            }
            IoCtx::AdvanceLog { slots } => {
                self.complete_advance(slots, result);
                None
            }
            IoCtx::LogCheckpoint => {
                self.complete_log_checkpoint(result);
                None
            }
            IoCtx::CopyForward { slot, old } => {
                self.complete_copy_forward(slot, old, result);
                None
            }
            ctx => Some(self.complete_for_request(ctx, result)),
        };
        if let Some(ri) = done_req {
            debug_assert!(
                self.req(ri).pending > 0,
                "a completion for a request with nothing pending"
            );
            self.req_mut(ri).pending -= 1;
            self.maybe_finish(ri);
        }
        Ok(())
    }

    /// A command of a request completed; returns the request.
    fn complete_for_request(&mut self, ctx: IoCtx, result: Result<(), IoError>) -> u32 {
        match ctx {
            IoCtx::Fill { req, fill, through } => {
                self.complete_fill(req, fill, through, result);
                req
            }
            IoCtx::FillRun {
                req,
                through,
                fills,
            } => {
                for fill in fills {
                    self.complete_fill(req, fill, through, result);
                }
                req
            }
            IoCtx::InsertFill { req, slot } => {
                self.complete_insert_fill(slot, result);
                req
            }
            IoCtx::ReadSlot { req, slot } => {
                self.unpin(slot);
                if let Err(e) = result {
                    self.fail(req, e);
                }
                req
            }
            IoCtx::ReadBacking {
                req,
                volume,
                offset_bytes,
                len_bytes,
                req_offset_bytes,
                write_seq,
            } => {
                match result {
                    Ok(()) if self.config.read_insert => self.insert_read_pages(
                        req,
                        volume,
                        offset_bytes,
                        len_bytes,
                        req_offset_bytes,
                        write_seq,
                    ),
                    Ok(()) => {}
                    Err(e) => self.fail(req, e),
                }
                req
            }
            IoCtx::WriteBacking { req, around } => {
                self.complete_backing_write(req, around, result);
                req
            }
            _ => unreachable!("not a request's command"),
        }
    }

    /// A page version of a write reached the cache device, or failed.
    fn complete_fill(
        &mut self,
        req: u32,
        FillPage { slot, old, undo }: FillPage,
        through: bool,
        result: Result<(), IoError>,
    ) {
        debug_assert_eq!(self.slots.state(slot), SlotState::Filling);
        match result {
            Ok(()) => {
                if let Some((o, _)) = old {
                    self.unpin(o);
                }
                // A write-through version waits for its request (`finalize_through`).
                if !through {
                    self.finish_fill(slot);
                }
            }
            Err(e) => {
                self.fail(req, e);
                self.req_mut(req).finalize.retain(|&s| s != slot);
                if through && self.req(req).path.in_flight().is_some() {
                    // The backing may still take the new bytes after the
                    // older version comes back: that version's destage
                    // waits for it (found by the engine model's soak).
                    self.hold_pages(req);
                }
                self.revert_fill(slot, old, undo);
                if let Some((o, _)) = old {
                    self.unpin(o);
                }
                // A write-through version that never reached the cache leaves
                // no record, but its backing write may land; an older version
                // whose dirty record is not zeroed yet would come back over
                // it after a crash. The failed request is answered only once
                // the newest such record is zeroed (frees go oldest first).
                if self.config.persistent && undo.through_clean {
                    let key = self.slots.key(slot).0;
                    if let Some(&newest) = self.old_versions.get(&key).and_then(|q| q.back()) {
                        self.req_mut(req).pending += 1;
                        self.free_waiters.entry(newest.0).or_default().push(req);
                    }
                }
            }
        }
    }

    /// A read miss's clean copy reached the cache device, or failed (then
    /// the page is simply not cached).
    fn complete_insert_fill(&mut self, slot: SlotIndex, result: Result<(), IoError>) {
        debug_assert!(self.slots.has(slot, FLAG_FILL_CLEAN));
        match result {
            Ok(()) => self.finish_fill(slot),
            Err(_) => {
                self.log_write_failed(slot);
                self.slots.unmap(slot);
                self.slots.set_state(slot, SlotState::Stale);
                self.slots.set_flag(slot, FLAG_FILL_CLEAN, false);
                self.release_slot_if_free(slot);
                self.release_waiters(slot);
            }
        }
    }

    /// A write to the backing (write-through, bypass or promoted bypass) is done.
    fn complete_backing_write(&mut self, req: u32, around: bool, result: Result<(), IoError>) {
        let r = self.req_mut(req);
        let landed = r.path.land();
        let (vol, off, len) = (r.volume, r.offset_bytes, r.len_bytes);
        let (holds, promoted) = (landed.holds, landed.promoted);
        if landed.kind == BackingKind::BypassThrough && !promoted {
            self.bypassed.through_ended();
        }
        self.backing_write_landed(vol, off, len, around && !promoted);
        if holds {
            self.release_pages(vol, off, len);
        }
        match result {
            // A promoted bypass is in the cache: its pages get there from
            // the cached version whatever became of the original.
            Err(_) if promoted => self.stats.io_errors += 1,
            Err(e) => self.fail(req, e),
            Ok(()) => {}
        }
    }

    /// The filters' bookkeeping when a backing write of these bytes lands
    /// (`bypass`: one not promoted, counted in `bypass_pages`).
    pub(super) fn backing_write_landed(&mut self, vol: VolumeId, off: u64, len: u64, bypass: bool) {
        // A read miss issued while this write was in flight may have read
        // the old bytes: it must not insert them.
        for piece in self.geometry.pieces(off, len) {
            let key = PageKey::new(vol, piece.page);
            self.writes.backing_write_landed(key);
            if bypass {
                self.bypass_page_landed(key);
            }
        }
        if bypass {
            self.bypassed.around_ended();
        }
    }

    /// One bypass write of `key`'s page is no longer a bypass in flight.
    pub(super) fn bypass_page_landed(&mut self, key: PageKey) {
        self.bypass_pages.remove(key);
    }

    /// Slot records were zeroed (persistent caches): the slots go back to
    /// the pool, each page's next old version may be freed, and failed
    /// write-through requests waiting on them are answered.
    pub(super) fn complete_free_slots(
        &mut self,
        slots: Vec<SlotIndex>,
        result: Result<(), IoError>,
    ) {
        if result.is_err() {
            // Try again with the next batch; the slots stay out of the pool.
            self.stats.io_errors += 1;
            for slot in slots {
                self.to_free.push(slot);
            }
            return;
        }
        // Only failed write-through requests ever wait here.
        let waiting = !self.free_waiters.is_empty();
        for &slot in slots.iter().filter(|_| waiting) {
            if let Some(reqs) = self.free_waiters.remove(&slot.0) {
                for ri in reqs {
                    self.req_mut(ri).pending -= 1;
                    self.maybe_finish(ri);
                }
            }
        }
        for slot in slots {
            debug_assert!(self.slots.has(slot, FLAG_FREE_SENT));
            self.slots.set_flag(slot, FLAG_FREEING, false);
            self.slots.set_flag(slot, FLAG_FREE_SENT, false);
            let key = self.slots.key(slot).0;
            let was_old = self.slots.has(slot, FLAG_OLD);
            self.remove_old(slot);
            if self.log.is_some() {
                // A hole in the log until the tail passes it.
                self.slots.make_hole(slot);
            } else {
                self.slots.push_free(slot);
            }
            if was_old {
                self.send_oldest_free(key);
                if self.ordered.is_some() {
                    // The page's next version may go now.
                    self.ordered_page_changed(PageKey(key));
                }
            }
        }
    }
}
