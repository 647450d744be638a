//! Completions: what each finished `IoCommand` means for its request, slots
//! and groups.

use super::*;

impl Engine {
    pub fn handle_completion(
        &mut self,
        now: Nanos,
        io: IoId,
        result: Result<(), IoError>,
    ) -> Result<(), EngineError> {
        let ctx = self.take_io(io).ok_or(EngineError::UnknownIo(io))?;
        let mut done_req = None;
        match ctx {
            IoCtx::Fill {
                req,
                slot,
                old,
                undo,
                through,
            } => {
                if let Some((o, _)) = old {
                    if result.is_ok() {
                        self.unpin(o);
                    }
                }
                match result {
                    Ok(()) => {
                        // A write-through version waits for its request (`finalize_through`).
                        if !through {
                            self.finish_fill(slot);
                        }
                    }
                    Err(e) => {
                        self.fail(req, e);
                        self.req_mut(req).finalize.retain(|&s| s != slot);
                        self.revert_fill(slot, old, undo);
                        if let Some((o, _)) = old {
                            self.unpin(o);
                        }
                        // A write-through version that never reached the
                        // cache leaves no record, but its backing write may
                        // land; an older version whose dirty record is not
                        // zeroed yet would come back over it after a crash.
                        // The failed request is answered only once the
                        // newest such record is zeroed (frees go oldest first).
                        if self.config.persistent && undo.through_clean {
                            let key = self.slots.key(slot).0;
                            if let Some(&newest) =
                                self.old_versions.get(&key).and_then(|q| q.back())
                            {
                                self.req_mut(req).pending += 1;
                                self.free_waiters.entry(newest.0).or_default().push(req);
                            }
                        }
                    }
                }
                done_req = Some(req);
            }
            IoCtx::InsertFill { req, slot } => {
                match result {
                    Ok(()) => self.finish_fill(slot),
                    Err(_) => {
                        self.slots.unmap(slot);
                        self.slots.set_state(slot, SlotState::Stale);
                        self.slots.set_flag(slot, FLAG_FILL_CLEAN, false);
                        self.release_slot_if_free(slot);
                        self.release_waiters(slot);
                    }
                }
                done_req = Some(req);
            }
            IoCtx::ReadSlot { req, slot } => {
                self.unpin(slot);
                if let Err(e) = result {
                    self.fail(req, e);
                }
                done_req = Some(req);
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
                done_req = Some(req);
            }
            IoCtx::WriteBacking { req, around } => {
                // A read miss issued while this write was in flight may have
                // read the old bytes: it must not insert them.
                let r = self.req(req);
                let (vol, off, len) = (r.volume, r.offset_bytes, r.len_bytes);
                for piece in self.geometry.pieces(off, len) {
                    self.write_seq += 1;
                    let bucket = Self::write_bucket(PageKey::new(vol, piece.page));
                    self.write_filter[bucket] = self.write_seq;
                    self.backing_writes_in_flight[bucket] -= 1;
                    self.bypasses_in_flight[bucket] -= around as u32;
                }
                if let Err(e) = result {
                    self.fail(req, e);
                }
                done_req = Some(req);
            }
            IoCtx::Destage { slots } => self.finish_destage(now, slots, result),
            IoCtx::FreeSlots { slots } => match result {
                Ok(()) => {
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
                        self.slots.set_flag(slot, FLAG_FREEING, false);
                        self.slots.set_flag(slot, FLAG_FREE_SENT, false);
                        let key = self.slots.key(slot).0;
                        let was_old = self.slots.has(slot, FLAG_OLD);
                        self.remove_old(slot);
                        self.slots.push_free(slot);
                        if was_old {
                            self.send_oldest_free(key);
                        }
                    }
                }
                Err(_) => {
                    // Try again with the next batch; the slots stay out of the pool.
                    self.stats.io_errors += 1;
                    self.to_free.extend(slots);
                }
            },
        }
        if let Some(ri) = done_req {
            self.req_mut(ri).pending -= 1;
            self.maybe_finish(ri);
        }
        self.drain_stalls(now);
        self.start_destages();
        self.emit_frees(now);
        Ok(())
    }
}
