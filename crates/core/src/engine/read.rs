//! Reads: hits from cached versions, misses from the backing, and the
//! insertion of read misses as clean pages.

use super::*;

impl Engine {
    pub(super) fn admit_read(&mut self, ri: u32) {
        self.stats.reads += 1;
        let r = self.req(ri);
        let (vol, off, len) = (r.volume, r.offset_bytes, r.len_bytes);
        let mut all_hit = true;
        // A run of consecutive missing pieces: (offset_bytes, len_bytes, req_offset_bytes).
        let mut run: Option<(u64, u64, u64)> = None;
        let (mut pages, mut hits) = (0, 0);
        for piece in self.geometry.pieces(off, len) {
            pages += 1;
            let key = PageKey::new(vol, piece.page);
            if self.slots.lookup(key).is_some() {
                hits += 1;
                if let Some(run) = run.take() {
                    self.issue_backing_read(ri, run);
                }
                self.issue_read_piece(ri, piece);
            } else {
                all_hit = false;
                let piece_off =
                    self.geometry.page_offset_bytes(piece.page) + piece.page_offset_bytes as u64;
                run = Some(match run {
                    Some((o, l, q)) => (o, l + piece.len_bytes as u64, q),
                    None => (piece_off, piece.len_bytes as u64, piece.req_offset_bytes),
                });
            }
        }
        if let Some(run) = run {
            self.issue_backing_read(ri, run);
        }
        self.count_pages(vol, RequestKind::Read, pages, hits);
        if all_hit {
            self.stats.read_hits += 1;
        }
    }

    /// One piece of a read: from its cached page, or the backing if not cached.
    pub(super) fn issue_read_piece(&mut self, ri: u32, piece: PagePiece) {
        let r = self.req(ri);
        let (vol, id) = (r.volume, r.id);
        let key = PageKey::new(vol, piece.page);
        match self.slots.lookup(key) {
            Some(slot) if self.slots.state(slot) == SlotState::Filling => {
                self.req_mut(ri).pending += 1;
                self.defer(slot, Deferred::Read { req: ri, piece });
            }
            Some(slot) => {
                if self.slots.state(slot) == SlotState::Clean {
                    self.replacement.hit(slot);
                }
                self.slots.pin(slot);
                self.req_mut(ri).pending += 1;
                let io = self.new_io(IoCtx::ReadSlot { req: ri, slot });
                self.commands.push_back(IoCommand::ReadPage {
                    io,
                    slot,
                    page_offset_bytes: piece.page_offset_bytes,
                    len_bytes: piece.len_bytes,
                    req: id,
                    req_offset_bytes: piece.req_offset_bytes,
                });
            }
            None => {
                let off =
                    self.geometry.page_offset_bytes(piece.page) + piece.page_offset_bytes as u64;
                self.issue_backing_read(ri, (off, piece.len_bytes as u64, piece.req_offset_bytes));
            }
        }
    }

    pub(super) fn issue_backing_read(
        &mut self,
        ri: u32,
        (offset_bytes, len_bytes, req_offset_bytes): (u64, u64, u64),
    ) {
        let r = self.req(ri);
        let (volume, id) = (r.volume, r.id);
        self.req_mut(ri).pending += 1;
        let io = self.new_io(IoCtx::ReadBacking {
            req: ri,
            volume,
            offset_bytes,
            len_bytes,
            req_offset_bytes,
            write_seq: self.writes.now(),
        });
        self.commands.push_back(IoCommand::ReadBacking {
            io,
            volume,
            offset_bytes,
            len_bytes,
            req: id,
            req_offset_bytes,
        });
    }

    /// After a read miss: insert the whole pages it read, unless a write to
    /// them may have been admitted since (the data could be older than it).
    pub(super) fn insert_read_pages(
        &mut self,
        ri: u32,
        volume: VolumeId,
        offset_bytes: u64,
        len_bytes: u64,
        req_offset_bytes: u64,
        write_seq: u64,
    ) {
        let ps = self.geometry.page_size_bytes() as u64;
        let first = offset_bytes.div_ceil(ps);
        let end = (offset_bytes + len_bytes) / ps;
        let id = self.req(ri).id;
        for page in first..end {
            if !self.stalled.is_empty() || !self.has_room_for_copy() {
                return; // never take room from writes
            }
            let key = PageKey::new(volume, PageIndex(page));
            if self.slots.lookup(key).is_some() || !self.writes.unwritten_since(key, write_seq) {
                continue;
            }
            let slot = if self.log.is_some() {
                self.log_alloc(None)
            } else {
                self.alloc_slot(key)
            };
            self.slots.set_state(slot, SlotState::Filling);
            self.slots.set_flag(slot, FLAG_FILL_CLEAN, true);
            self.slots.map(slot, key);
            self.stats.read_inserts += 1;
            self.req_mut(ri).pending += 1;
            let io = self.new_io(IoCtx::InsertFill { req: ri, slot });
            let src = Source::Request {
                req: id,
                offset_bytes: req_offset_bytes + page * ps - offset_bytes,
            };
            let record = self.record(key, false);
            self.push_page_write(IoCommand::WritePage {
                io,
                slot,
                base: PageBase::None,
                patch: Patch {
                    page_offset_bytes: 0,
                    len_bytes: ps as u32,
                    src,
                },
                record,
            });
        }
    }
}
