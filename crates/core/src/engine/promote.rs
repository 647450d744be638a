//! I/O criticality inheritance (Kim et al., ATC'15 §4.2.2): a bypass write
//! in flight that a critical request must wait for is reissued to the
//! cache at once (*promoted*), so the waiter goes on. The original backing
//! write still lands; its completion is discarded, and no cached version of
//! its pages is destaged before it has landed, so it never lands over newer
//! data. A write admission bypassed that went through the cache instead (a
//! cached version of its pages could not be bypassed) is an outstanding
//! non-critical backing write too: its cache copy is there already, so
//! promoting it makes its versions dirty (write-back) and answers it
//! without waiting for the backing, where buffers outlive answers.
//!
//! Who waits, and so promotes (when the admission policy's `inherits_io`
//! says the waiter is critical): a write to the cache that overlaps a
//! bypass in flight (it would stall until the bypass lands), a FLUSH (an
//! fsync waits for the writeback it covers: every bypass of its volume),
//! and an issuer that becomes critical (it waits for its own writes; the
//! cascade of Fig. 3c ends at one of them). Promotion takes the bypass's
//! pages together with every other bypass in flight over them (a cached
//! version must hold every byte the backing will hold), all or none, and
//! only under plain write-back: ordered and journaled write-back admit
//! every write, and a policy that keeps no dirty data has nowhere to keep
//! the promoted version.

use super::*;

impl Engine {
    /// A bypass in flight could be promoted now (cheap: the common case is
    /// no bypass at all).
    fn promotion_possible(&self) -> bool {
        self.bypassed.any()
            && self.ordered.is_none()
            && self.journal.is_none()
            && self.write_policy.keeps_dirty()
    }

    /// Write `ri`, going to the cache, would wait for a bypass in flight to
    /// one of its pages (it would stall until the bypass lands), or for a
    /// version in flight of a bypassed write through the cache (it would
    /// wait for that version, final only once its backing write lands): if
    /// it is a critical waiter (asked now, so a criticality gained while it
    /// stalled counts), promote those writes over its pages. True if any was.
    pub(super) fn promote_for_write(&mut self, ri: u32) -> bool {
        if !self.promotion_possible() || !(self.overlaps_bypass(ri) || self.overlaps_through(ri)) {
            return false;
        }
        let r = self.req(ri);
        let waiter = Request {
            id: r.id,
            volume: r.volume,
            kind: r.kind,
            offset_bytes: r.offset_bytes,
            len_bytes: r.len_bytes,
            flags: r.flags,
        };
        if !self
            .admission_of(r.volume)
            .inherits_io(&self.write_info(&waiter))
        {
            return false;
        }
        let (vol, first, last) = (r.volume, self.first_page(r), self.last_page(r));
        self.promote_where(|e, b| {
            b.volume == vol && e.first_page(b) <= last && first <= e.last_page(b)
        })
    }

    /// A bypassed write through the cache may have a version in flight on
    /// one of `ri`'s pages (cheap: a page lookup each, and none while no
    /// such write is in flight).
    fn overlaps_through(&self, ri: u32) -> bool {
        if self.bypassed.through() == 0 {
            return false;
        }
        let r = self.req(ri);
        self.geometry.pieces(r.offset_bytes, r.len_bytes).any(|p| {
            self.slots
                .lookup(PageKey::new(r.volume, p.page))
                .is_some_and(|s| self.slots.state(s) == SlotState::Filling)
        })
    }

    /// A FLUSH: when its issuer is critical, the bypasses in flight it
    /// waits for are promoted (the writeback an fsync waits for): over its
    /// range, or with none (0, 0) every one on its volume.
    pub(super) fn promote_for_flush(&mut self, req: &Request) {
        if !self.promotion_possible() {
            return;
        }
        let mut info = self.write_info(req);
        info.flags.sync = true;
        if self.admission_of(req.volume).inherits_io(&info) {
            let vol = req.volume;
            let (from, end) = (
                req.offset_bytes,
                req.offset_bytes.saturating_add(req.len_bytes),
            );
            let whole = req.len_bytes == 0;
            self.promote_where(|_, b| {
                b.volume == vol
                    && (whole || (b.offset_bytes < end && from < b.offset_bytes + b.len_bytes))
            });
        }
    }

    /// `issuer` became critical (a hint or an inheritance): the bypasses it
    /// has in flight, which it waits for, are promoted.
    pub(super) fn promote_for_issuer(&mut self, issuer: u32) {
        if !self.promotion_possible() {
            return;
        }
        // Asked per bypass, of its volume's policy, as a sync write of the issuer.
        let waits = |e: &Engine, b: &Req| {
            let probe = as_request(b, true);
            e.admission_of(b.volume).inherits_io(&e.write_info(&probe))
        };
        // The reissued pages' completions admit any write that waited.
        self.promote_where(|e, b| b.flags.issuer == issuer && waits(e, b));
    }

    fn first_page(&self, r: &Req) -> u64 {
        self.geometry.page_of(r.offset_bytes).0
    }

    fn last_page(&self, r: &Req) -> u64 {
        self.geometry
            .page_of(r.offset_bytes + r.len_bytes.max(1) - 1)
            .0
    }

    /// A request that is a bypass in flight, not promoted (its backing
    /// write is the only copy of its bytes in flight), or, where buffers
    /// outlive answers, a bypassed write through the cache whose answer
    /// waits only for its backing write (elsewhere promoting it would
    /// gain nothing: its answer would still wait for the backing).
    fn promotable(&self, r: &Req) -> bool {
        r.pending != u32::MAX
            && r.path.in_flight().is_some_and(|b| match b.kind {
                _ if b.promoted => false,
                BackingKind::Around => true,
                BackingKind::BypassThrough => {
                    r.failed.is_none() && self.config.buffers_outlive_answers
                }
                BackingKind::Through => false,
            })
    }

    /// Promote the bypasses `pick` selects, with every other bypass in
    /// flight over their pages, oldest first; all or none (room). True if
    /// any was promoted. Scans the request table: promotions are rare, and
    /// the per-page bypass counts keep the common path free of any scan.
    fn promote_where(&mut self, pick: impl Fn(&Engine, &Req) -> bool) -> bool {
        let candidates: Vec<(RequestId, u32)> = (self.reqs.iter_live())
            .filter(|(_, r)| self.promotable(r))
            .map(|(i, r)| (r.id, i))
            .collect();
        let mut chosen: Vec<(RequestId, u32)> = candidates
            .iter()
            .copied()
            .filter(|&(_, b)| pick(self, self.req(b)))
            .collect();
        if chosen.is_empty() {
            return false;
        }
        // Close over shared pages: any bypass over a chosen page joins.
        loop {
            let before = chosen.len();
            for &(id, b) in &candidates {
                if chosen.iter().any(|&(c, _)| c == id) {
                    continue;
                }
                let rb = self.req(b);
                let joins = chosen.iter().any(|&(_, c)| {
                    let rc = self.req(c);
                    rc.volume == rb.volume
                        && self.first_page(rc) <= self.last_page(rb)
                        && self.first_page(rb) <= self.last_page(rc)
                });
                if joins {
                    chosen.push((id, b));
                }
            }
            if chosen.len() == before {
                break;
            }
        }
        // A write through the cache holds its slots already.
        let need: u64 = chosen
            .iter()
            .map(|&(_, b)| self.req(b))
            .filter(|r| r.path.io_of(BackingKind::Around).is_some())
            .map(|r| self.pages_of(r.offset_bytes, r.len_bytes))
            .sum();
        if !self.has_room(need) {
            return false;
        }
        chosen.sort_unstable();
        for (_, b) in chosen {
            self.promote(b);
            self.maybe_finish(b);
        }
        true
    }

    /// Reissue bypass `b` to the cache: its pages become dirty versions
    /// written from its buffer, its pages leave `bypass_pages` (the
    /// original still counts as a backing write in flight, so destages of
    /// its pages wait for it: `destage_held`), and,
    /// when the driver keeps buffers past answers, it is answered from the
    /// cache and the original's completion is discarded.
    fn promote(&mut self, b: u32) {
        let r = self.req(b);
        debug_assert!(self.promotable(r));
        if r.path.io_of(BackingKind::Around).is_none() {
            return self.promote_through(b);
        }
        let (vol, off, len) = (r.volume, r.offset_bytes, r.len_bytes);
        for piece in self.geometry.pieces(off, len) {
            let key = PageKey::new(vol, piece.page);
            debug_assert!(
                self.slots
                    .lookup(key)
                    .is_none_or(|s| self.slots.state(s) == SlotState::Filling),
                "a page under a bypass has no cached version but a promoted one"
            );
            // Still a backing write in flight: its pages' destages wait.
            self.bypass_page_landed(key);
        }
        self.bypassed.around_ended();
        self.mark_promoted(b);
        self.reserve_slots(b);
        for piece in self.geometry.pieces(off, len) {
            self.issue_write_piece(b, piece, false);
        }
        if self.config.buffers_outlive_answers {
            // The path keeps the I/O: the answer says whether it is still in flight.
            let io = self
                .req(b)
                .path
                .io_of(BackingKind::Around)
                .expect("a bypass in flight");
            self.discard_original(b, io, true);
        }
    }

    /// What every promotion does first: count it, mark the request, and
    /// hold its pages from destage until its original lands.
    fn mark_promoted(&mut self, b: u32) {
        let r = self.req(b);
        let pages = self.pages_of(r.offset_bytes, r.len_bytes);
        self.stats.reissued_writes += 1;
        self.stats.reissued_pages += pages;
        self.req_mut(b).path.promote();
        self.hold_pages(b);
    }

    /// Request `b` no longer waits for its backing write `io` (`around`:
    /// a bypass, else a write through the cache): the write becomes an
    /// original whose completion is discarded.
    fn discard_original(&mut self, b: u32, io: IoId, around: bool) {
        let r = self.req(b);
        let (volume, offset_bytes, len_bytes) = (r.volume, r.offset_bytes, r.len_bytes);
        let ctx = self
            .io_ctx_mut(io)
            .expect("the request's backing write is in flight");
        debug_assert!(matches!(ctx, IoCtx::WriteBacking { around: a, .. } if *a == around));
        *ctx = IoCtx::PromotedOriginal {
            volume,
            offset_bytes,
            len_bytes,
        };
        self.req_mut(b).pending -= 1;
    }

    /// Promote bypassed write `b` that went through the cache: its page
    /// versions (filling, or filled and waiting for the request) become
    /// dirty versions, its pages are held from destage until its backing
    /// write lands, and it is answered once its cache copy is written (the
    /// backing write's completion is discarded). None of its pieces waits
    /// for an earlier version of its page: a write through the cache stalls
    /// while one is filling (`backing_write_would_race`), so every version
    /// it will have is in `finalize` already.
    fn promote_through(&mut self, b: u32) {
        debug_assert!(self.config.buffers_outlive_answers);
        debug_assert!(!self
            .deferred
            .values()
            .flatten()
            .any(|d| matches!(d, Deferred::Write { req, .. } if *req == b)));
        let io = (self.req(b).path)
            .io_of(BackingKind::BypassThrough)
            .expect("a write through in flight");
        self.bypassed.through_ended();
        self.mark_promoted(b);
        let finalize = std::mem::take(&mut self.req_mut(b).finalize);
        for &slot in &finalize {
            // A version still filling is its page's current one (a later
            // write of the page waits for it), so it can join the dirty set.
            debug_assert_eq!(self.slots.state(slot), SlotState::Filling);
            if self.slots.has(slot, FLAG_FILL_CLEAN) {
                self.slots.set_flag(slot, FLAG_FILL_CLEAN, false);
                self.mark_dirty(self.slots.key(slot));
                // Were its cache write to fail, the page was clean before:
                // undoing the version takes it out of the dirty set again.
                for ctx in self.ios.iter_mut() {
                    match ctx {
                        IoCtx::Fill { fill, .. } if fill.slot == slot => {
                            fill.undo.made_dirty = true
                        }
                        IoCtx::FillRun { fills, .. } => {
                            for f in fills.iter_mut().filter(|f| f.slot == slot) {
                                f.undo.made_dirty = true;
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        self.req_mut(b).finalize = finalize;
        self.discard_original(b, io, false);
    }

    /// The original of a promoted bypass landed after its request was
    /// answered from the cache: its completion is discarded (an error
    /// loses nothing, the cached version goes to the backing).
    pub(super) fn original_discarded(
        &mut self,
        volume: VolumeId,
        offset_bytes: u64,
        len_bytes: u64,
        result: Result<(), IoError>,
    ) {
        self.stats.discarded_completions += 1;
        self.release_pages(volume, offset_bytes, len_bytes);
        if result.is_err() {
            self.stats.io_errors += 1;
        }
        self.backing_write_landed(volume, offset_bytes, len_bytes, false);
    }
}

/// Request `r` as admission sees it, sync if `sync`.
fn as_request(r: &Req, sync: bool) -> Request {
    Request {
        id: r.id,
        volume: r.volume,
        kind: r.kind,
        offset_bytes: r.offset_bytes,
        len_bytes: r.len_bytes,
        flags: RequestFlags { sync, ..r.flags },
    }
}
