//! Requests: validation, the request and I/O tables, answering, deferral of
//! pieces behind an in-flight page version, and the stall queue.

use super::*;

impl Engine {
    pub fn handle_request(&mut self, now: Nanos, req: Request) -> Result<(), SubmitError> {
        self.advance_ages(now);
        let vol = self
            .volumes
            .get(req.volume.0 as usize)
            .ok_or(SubmitError::UnknownVolume(req.volume.0))?;
        let end = req.offset_bytes.checked_add(req.len_bytes);
        if req.kind != RequestKind::Flush && end.is_none_or(|e| e > vol.size_bytes) {
            return Err(SubmitError::OutOfRange {
                volume: req.volume.0,
                offset_bytes: req.offset_bytes,
                len_bytes: req.len_bytes,
                size_bytes: vol.size_bytes,
            });
        }
        let is_write = matches!(req.kind, RequestKind::Write | RequestKind::WriteZeroes);
        if is_write {
            self.check_write_size(&req)?;
        }
        if self.reqs.live_count() >= self.config.requests_max {
            return Err(SubmitError::Busy(self.config.requests_max));
        }
        let ri = self.alloc_req(req);
        self.note_request(now);
        if is_write && self.ordered.is_some() {
            // Its issue: it depends on every write answered before now.
            self.req_mut(ri).node = self.ordered_issue();
        }
        match req.kind {
            RequestKind::Read => self.admit_read(ri),
            RequestKind::Write | RequestKind::WriteZeroes => self.handle_write(ri, &req, now),
            RequestKind::Trim => self.admit_trim(ri),
            RequestKind::Flush => {
                // Every acknowledged write is durable already (see IoCommand's
                // contract); the write policy says what else a FLUSH does.
                self.stats.flushes += 1;
                self.promote_for_flush(&req);
                match self.write_policy.flush(self.config.journal.points) {
                    FlushAction::Answer => {}
                    FlushAction::ConsistencyPoint => self.journal_point(),
                }
            }
        }
        self.maybe_finish(ri);
        self.end_step(now);
        Ok(())
    }

    /// A write arrives: admission decides its path, a critical one may
    /// promote bypasses it would wait for, and it is admitted or stalls.
    fn handle_write(&mut self, ri: u32, req: &Request, now: Nanos) {
        let write = self.write_info(req);
        let bypass = self.admission_of_mut(req.volume).admit_write(&write) == Admit::Bypass;
        self.req_mut(ri).path = WritePath::admitted(bypass);
        if !bypass {
            let pages = || self.pages_of(req.offset_bytes, req.len_bytes);
            if write.issuer_hinted || write.flags.critical {
                self.stats.admitted_pages_hinted += pages();
            } else if write.issuer_inherited {
                self.stats.admitted_pages_inherited += pages();
            }
        }
        if !bypass {
            self.promote_for_write(ri);
        }
        let route = if self.stalled.is_empty() {
            self.route_if_room(ri)
        } else {
            None
        };
        if let Some(route) = route {
            self.admit_write(ri, route);
        } else {
            self.stats.stalls += 1;
            self.req_mut(ri).stalled_at = Some(now);
            self.stalled.push_back(ri);
        }
    }

    /// The most pages one write may cover in log mode
    /// (`log_write_pages_max`); None where the cache's size is the bound.
    /// A front end splits a larger write (`Driver::submit` does).
    pub fn write_pages_max(&self) -> Option<u64> {
        self.log
            .as_ref()
            .map(|_| log_write_pages_max(self.slots.len() as u64))
    }

    /// A write the cache could never take at once is refused.
    fn check_write_size(&self, req: &Request) -> Result<(), SubmitError> {
        let pages = self.pages_of(req.offset_bytes, req.len_bytes);
        if pages > self.slots.len() as u64 && !self.write_policy.may_bypass() {
            return Err(SubmitError::LargerThanCache {
                pages,
                slots: self.slots.len() as u64,
            });
        }
        if let Some(log_max) = self.write_pages_max() {
            if pages > log_max {
                return Err(SubmitError::LargerThanLog {
                    pages,
                    pages_max: log_max,
                });
            }
        }
        match &self.journal {
            Some(j) if pages > j.limit() => Err(SubmitError::LargerThanJournal {
                pages,
                journal_pages: j.limit(),
            }),
            _ => Ok(()),
        }
    }

    pub(super) fn pages_of(&self, offset_bytes: u64, len_bytes: u64) -> u64 {
        if len_bytes == 0 {
            return 0;
        }
        let first = self.geometry.page_of(offset_bytes).0;
        let last = self.geometry.page_of(offset_bytes + len_bytes - 1).0;
        last - first + 1
    }

    pub(super) fn alloc_req(&mut self, r: Request) -> u32 {
        self.reqs.insert(r)
    }

    pub(super) fn req(&self, ri: u32) -> &Req {
        self.reqs.get(ri)
    }
    pub(super) fn req_mut(&mut self, ri: u32) -> &mut Req {
        self.reqs.get_mut(ri)
    }

    /// Answer the request if nothing of it is pending.
    pub(super) fn maybe_finish(&mut self, ri: u32) {
        let r = self.req(ri);
        if r.pending > 0 || r.stalled_at.is_some() {
            return;
        }
        let failed = r.failed;
        let finalize = std::mem::take(&mut self.req_mut(ri).finalize);
        for &slot in &finalize {
            self.finalize_through(slot, failed.is_none());
        }
        self.req_mut(ri).finalize = finalize;
        self.log_release(ri);
        let r = self.req(ri);
        debug_assert!(r.reserved.is_empty(), "reserved slots left over");
        let response = Response {
            id: r.id,
            result: failed.map_or(Ok(()), Err),
            buffer_in_use: r
                .path
                .in_flight()
                .is_some_and(|b| b.promoted && self.io_live(b.io)),
        };
        let node = self.req(ri).node;
        self.responses.push_back(response);
        self.reqs.release(ri);
        if node != NO_NODE {
            self.ordered_complete(node);
        }
    }

    pub(super) fn fail(&mut self, ri: u32, e: IoError) {
        self.stats.io_errors += 1;
        let r = self.req_mut(ri);
        r.failed.get_or_insert(e);
    }

    pub(super) fn defer(&mut self, on: SlotIndex, d: Deferred) {
        self.deferred.entry(on.0).or_default().push_back(d);
    }

    /// Run the pieces that waited for `slot` to be written, in arrival order.
    pub(super) fn release_waiters(&mut self, slot: SlotIndex) {
        if self.deferred.is_empty() {
            return;
        }
        let Some(mut waiters) = self.deferred.remove(&slot.0) else {
            return;
        };
        while let Some(d) = waiters.pop_front() {
            match d {
                Deferred::Write {
                    req,
                    piece,
                    through,
                } => {
                    self.req_mut(req).pending -= 1;
                    self.issue_write_piece(req, piece, through);
                }
                Deferred::Read { req, piece } => {
                    self.req_mut(req).pending -= 1;
                    self.issue_read_piece(req, piece);
                }
            }
        }
    }

    pub(super) fn new_io(&mut self, ctx: IoCtx) -> IoId {
        self.ios.insert(ctx)
    }

    pub(super) fn take_io(&mut self, io: IoId) -> Option<IoCtx> {
        self.ios.take(io)
    }

    pub(super) fn io_live(&self, io: IoId) -> bool {
        self.io_ctx(io).is_some()
    }

    /// The context of I/O `io` in flight.
    pub(super) fn io_ctx(&self, io: IoId) -> Option<&IoCtx> {
        self.ios.get(io)
    }

    /// The context of I/O `io` in flight, to change what its completion means.
    pub(super) fn io_ctx_mut(&mut self, io: IoId) -> Option<&mut IoCtx> {
        self.ios.get_mut(io)
    }

    /// Answers every stalled write (never admitted: it holds no slot, no
    /// command names its buffer, nothing of it was acknowledged) with
    /// `error`, oldest first, and returns how many. For a stop that must end
    /// while the backing cannot drain; nothing admitted changes. The caller
    /// refuses new writes afterwards, or they stall again.
    pub fn fail_stalled(&mut self, now: Nanos, error: IoError) -> u64 {
        let mut failed_count = 0u64;
        while let Some(ri) = self.stalled.pop_front() {
            let r = self.req(ri);
            assert_eq!(r.pending, 0, "a stalled write has nothing pending");
            assert!(r.reserved.is_empty(), "a stalled write holds no slot");
            self.end_stall(ri, now);
            self.fail(ri, error);
            self.maybe_finish(ri);
            failed_count += 1;
        }
        debug_assert!(self.stalled.is_empty());
        self.log_step();
        self.step_done();
        failed_count
    }

    /// Admit stalled writes, oldest first, while room allows.
    pub(super) fn drain_stalls(&mut self, now: Nanos) {
        while let Some(&ri) = self.stalled.front() {
            let route = self.route_if_room(ri).or_else(|| {
                (!self.req(ri).path.bypass() && self.promote_for_write(ri))
                    .then(|| self.route_if_room(ri))?
            });
            let Some(route) = route else {
                return;
            };
            self.stalled.pop_front();
            self.end_stall(ri, now);
            self.admit_write(ri, route);
            self.maybe_finish(ri);
        }
    }

    /// A request leaves the stall queue: its wait is counted.
    fn end_stall(&mut self, ri: u32, now: Nanos) {
        let since = self
            .req_mut(ri)
            .stalled_at
            .take()
            .expect("stalled request has a stall time");
        self.stats.stall_ns_total += now.saturating_sub(since).0;
    }
}
