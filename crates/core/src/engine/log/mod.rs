//! Log mode (`EngineConfig::log`, format 3: `docs/format-v3.md`): the slots
//! are a ring written in order, one batch at a time (a header slot, then
//! its pages); room is made at the tail, and a slot the tail passed is
//! reused only once that move is durable (`AdvanceLog`). The pool holds
//! exactly the slots from the head up to the durable tail, so allocation
//! is the head moving on.

use super::*;

mod check;
mod checkpoint;
mod copy;
mod reclaim;
mod recovery;
mod runs;

/// Bytes of a batch header before its entries, and per entry (format 3).
const HEADER_FIXED_BYTES: u64 = batch_header::FIXED_BYTES as u64;
const EXTENT_BYTES: u64 = batch_header::EXTENT_BYTES as u64;
const FREE_BYTES: u64 = batch_header::FREE_BYTES as u64;
/// Slots kept out of every write's reach, for the headers of batches that
/// carry only frees (the tail waits for frees; they must never wait for room).
const SPARE_SLOTS: u64 = 2;
/// Pages a batch takes at most (4 MiB of 4 KiB pages), and at most a
/// quarter of the ring.
const BATCH_PAGES_MAX: u32 = 1024;

/// The most pages one write may cover on a log of `ring_slots` slots: a
/// quarter of the ring (a write reserves two slots a page and a header,
/// beside the room kept ahead of the head).
pub fn log_write_pages_max(ring_slots: u64) -> u64 {
    (ring_slots / 4).max(1)
}
/// The share of the ring the destage rate lets dirty pages fill (its
/// thresholds are shares of this): the rest holds stale versions until the
/// tail passes them. With a dirty share u of the ring overwritten at
/// random, the tail meets a live share x = exp(-(1 - x)/u) that reclaim
/// must copy forward (`docs/format-v3.md`).
const LOG_DIRTY_SHARE: (u64, u64) = (3, 4);
/// Batches after the tail's whose dirty pages reclaim destages while it
/// waits for the tail's own (`log_destage_ahead`).
const RECLAIM_AHEAD_SPANS: u64 = 8;

/// A sealed batch still in the log: issued, written, or waiting its turn,
/// or found by recovery.
#[derive(Clone, Copy, Debug)]
struct Span {
    header: u32,
    /// Slots after the header (its pages, or holes where pages failed).
    pages: u32,
    seq: u64,
}

/// Where the log stands on the cache device, as recovery reads it (or as
/// the engine had it: `Engine::log_position`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogPosition {
    /// The durable tail: the first slot recovery reads (a batch's header).
    pub tail: SlotIndex,
    /// Slots of the log from the tail on (0: empty; all of them: full):
    /// the next batch starts after them.
    pub log_slots: u32,
    /// The slots of each batch from the tail on (its header and payload),
    /// in order; they add up to `log_slots`. The tail moves batch by batch,
    /// so it must know where each starts.
    pub batches: Vec<u32>,
    /// The next batch's sequence number.
    pub next_seq: u64,
    /// Above every page version number the log holds, freed ones too (the
    /// engine's next version number is at least this: a version found
    /// later must never lose to an older one by number).
    pub next_page_seq: u64,
}

/// The batch being filled.
struct Open {
    header: u32,
    seq: u64,
    pages: Vec<IoCommand>,
    frees: Vec<IoCommand>,
    /// Slots taken after the header; each has its command in `pages` by
    /// the end of the engine step that took it.
    taken: u32,
    /// Pages the commands in `pages` write (a `WritePages` writes several).
    built: u32,
    extents: u64,
    free_slots: u64,
    /// The last page: (page key, seq, dirty), to tell whether the next one
    /// continues its extent.
    last: Option<(u64, u64, bool)>,
}

/// A held open batch of this many pages (64 KiB of 4 KiB pages) goes
/// anyway: its barrier is then a small part of its cost, and holding it
/// would only delay it (an NBD reader holds its batch while it receives
/// the next request's payload: 1 MiB writes ran 0.9x held).
const HELD_PAGES_MAX: u32 = 16;

pub(super) struct Log {
    ring: u32,
    /// The next slot to take; the pool is the `free_count` slots from here.
    head: u32,
    /// Slots the tail passed whose move is not durable yet: from the end of
    /// the pool on (free, not in the pool). `advancing` of them are in the
    /// `AdvanceLog` in flight.
    passed: u32,
    /// The slots of each batch passed (they add up to `passed`): where the
    /// log starts until the move is durable.
    passed_batches: VecDeque<u32>,
    advancing: u32,
    spans: VecDeque<Span>,
    /// Slots of the oldest span known to be free already (reclaim resumes there).
    scanned: u32,
    /// Spans before this sequence number were looked at ahead of the tail
    /// (`log_destage_ahead`): their dirty pages' destages are out.
    ahead_seq: u64,
    /// Spans before this sequence number were counted when the tail first
    /// met them (`log_count_met`).
    met_seq: u64,
    open: Option<Open>,
    next_seq: u64,
    /// Sealed batches not issued yet, oldest first.
    sealed: VecDeque<IoCommand>,
    /// A `WriteBatch` is in flight (one at a time, so they complete in order).
    writing: bool,
    /// Holds on the open batch (`Engine::hold_batch`): while any, it is
    /// not sealed, so the writes admitted meanwhile share it.
    held: u32,
    /// Every batch up to this one is durable.
    durable_seq: u64,
    /// Slots promised to admitted writes (their pages and headers).
    budget: u64,
    /// Frees wait (`Engine::to_free`) that should go out even in a batch
    /// of their own.
    pub(super) frees_due: bool,
    /// Pages whose current version was written this step (their waiting
    /// free may need no place in the log: `drop_superseded_frees`).
    written: Vec<u64>,
    /// Stale slots the tail passed before their free went out: the
    /// `AdvanceLog` that makes the pass durable frees them.
    advance_frees: Vec<SlotIndex>,
    /// Of those, how many the `AdvanceLog` in flight covers.
    advance_frees_sent: usize,
    header_bytes: u64,
    batch_pages_max: u32,
    /// What the batches' headers say of each slot (for checkpoints).
    logged: checkpoint::Logged,
    /// A `LogCheckpoint` is in flight (one at a time).
    checkpointing: bool,
    /// Slots taken at the head since the last checkpoint was issued.
    since_checkpoint: u64,
}

impl Log {
    pub(super) fn new(ring: u32, page_size_bytes: u64) -> Log {
        Log {
            ring,
            head: 0,
            passed: 0,
            passed_batches: VecDeque::new(),
            advancing: 0,
            spans: VecDeque::new(),
            scanned: 0,
            ahead_seq: 0,
            met_seq: 0,
            open: None,
            next_seq: 1,
            sealed: VecDeque::new(),
            writing: false,
            held: 0,
            durable_seq: 0,
            budget: 0,
            frees_due: false,
            written: Vec::new(),
            advance_frees: Vec::new(),
            advance_frees_sent: 0,
            header_bytes: page_size_bytes,
            batch_pages_max: BATCH_PAGES_MAX.min(ring / 4).max(1),
            logged: checkpoint::Logged::new(ring),
            checkpointing: false,
            since_checkpoint: 0,
        }
    }

    fn add(&self, s: u32, n: u32) -> u32 {
        ((s as u64 + n as u64) % self.ring as u64) as u32
    }

    fn fits(&self, extents: u64, frees: u64) -> bool {
        HEADER_FIXED_BYTES + extents * EXTENT_BYTES + frees * FREE_BYTES <= self.header_bytes
    }

    /// Frees a header with `extents` extents has room for.
    fn frees_room(&self, extents: u64) -> usize {
        ((self.header_bytes - HEADER_FIXED_BYTES - extents * EXTENT_BYTES) / FREE_BYTES) as usize
    }

    /// Slots a write of `pages` pages may take: its pages and a header for
    /// each (a piece that waited for an earlier version of its page is
    /// issued in a later step, and may open the next batch; how often a
    /// piece waits depends on other writes, so each page counts one).
    fn slots_for(pages: u64) -> u64 {
        2 * pages + 1
    }

    /// The page slots of the oldest batch still in the log (the one the
    /// tail passes next).
    pub(super) fn front_span_slots(&self) -> impl Iterator<Item = SlotIndex> + '_ {
        self.spans
            .front()
            .into_iter()
            .flat_map(move |s| (0..s.pages).map(move |i| SlotIndex(self.add(s.header, 1 + i))))
    }

    /// Free slots beyond the reservations kept ahead of the head.
    fn low(&self) -> u64 {
        (self.ring / 8).max(SPARE_SLOTS as u32 + 2) as u64
    }

    /// The pages the destage rate counts dirty occupancy against: a share
    /// of the ring (`LOG_DIRTY_SHARE`).
    pub(super) fn dirty_capacity(&self) -> u64 {
        let (num, den) = LOG_DIRTY_SHARE;
        self.ring as u64 * num / den
    }

    /// Slots kept out of every write's reach for reclaim's copies: a whole
    /// batch's pages and its header, so the tail can always pass the batch
    /// in its way by copying (without them, a spell of writes took the pool
    /// and the tail waited on the backing for room to copy).
    fn copy_reserve(&self) -> u64 {
        self.batch_pages_max as u64 + 1
    }

    fn tail(&self, pool: u64) -> u32 {
        self.add(self.head, (pool + self.passed as u64) as u32 % self.ring)
    }
}

impl Engine {
    /// Room for `pages` new page versions now: free or evictable slots, or
    /// in log mode slots in the pool beyond what admitted writes hold.
    pub(super) fn has_room(&self, pages: u64) -> bool {
        match &self.log {
            None => self.slots.free_count() + self.slots.evictable() >= pages,
            Some(log) => {
                let reserved = log.budget + SPARE_SLOTS + log.copy_reserve();
                self.slots.free_count() >= reserved + Log::slots_for(pages)
            }
        }
    }

    /// Room for a read miss's clean copy: in log mode only above the room
    /// kept ahead of the head, so that copies never make the tail destage
    /// dirty pages to make room (a read-heavy spell would otherwise cycle
    /// the log and destage every dirty page).
    pub(super) fn has_room_for_copy(&self) -> bool {
        match &self.log {
            None => self.has_room(1),
            Some(log) => {
                let need = log.budget + log.low() + Log::slots_for(1) + SPARE_SLOTS;
                self.slots.free_count() >= need
            }
        }
    }

    /// Log mode: an admitted write of `pages` pages holds its slots.
    pub(super) fn log_reserve(&mut self, ri: u32, pages: u64) {
        let log = self.log.as_mut().expect("log mode");
        let n = Log::slots_for(pages);
        log.budget += n;
        self.req_mut(ri).log_budget = n as u32;
    }

    /// Log mode: what a finished write held and did not take goes back.
    pub(super) fn log_release(&mut self, ri: u32) {
        let n = std::mem::take(&mut self.req_mut(ri).log_budget);
        if let Some(log) = &mut self.log {
            log.budget -= n as u64;
        }
    }

    /// Log mode: the next slot for a page version, in the open batch
    /// (opened, or the full one sealed and a new one opened, first). `ri`:
    /// the write whose reservation pays; None for a read miss's copy, which
    /// checked for room itself.
    pub(super) fn log_alloc(&mut self, ri: Option<u32>) -> SlotIndex {
        let log = self.log.as_ref().expect("log mode");
        let fits = log.open.as_ref().is_some_and(|o| {
            o.taken < log.batch_pages_max && log.fits(o.extents + 1, o.free_slots)
        });
        if !fits {
            self.log_open_batch(ri);
        }
        let slot = self.log_take_head(ri);
        let log = self.log.as_mut().expect("log mode");
        log.open.as_mut().expect("opened above").taken += 1;
        slot
    }

    fn log_take_head(&mut self, ri: Option<u32>) -> SlotIndex {
        let log = self.log.as_mut().expect("log mode");
        let slot = SlotIndex(log.head);
        log.head = log.add(log.head, 1);
        log.since_checkpoint += 1;
        if let Some(ri) = ri {
            log.budget -= 1;
            let r = self.req_mut(ri);
            assert!(r.log_budget > 0, "a write took more slots than it held");
            r.log_budget -= 1;
        }
        self.slots.take_from_pool(slot);
        slot
    }

    /// Seal the open batch, if any, and open a new one at the head.
    fn log_open_batch(&mut self, ri: Option<u32>) {
        self.log_seal();
        let header = self.log_take_head(ri);
        let log = self.log.as_mut().expect("log mode");
        let seq = log.next_seq;
        log.next_seq += 1;
        log.open = Some(Open {
            header: header.0,
            seq,
            pages: Vec::new(),
            frees: Vec::new(),
            taken: 0,
            built: 0,
            extents: 0,
            free_slots: 0,
            last: None,
        });
    }

    /// The open batch, if any, becomes a sealed batch waiting its turn
    /// (and a span of the log), carrying as many of the waiting frees as
    /// its header holds.
    fn log_seal(&mut self) {
        let log = self.log.as_mut().expect("log mode");
        let Some(mut open) = log.open.take() else {
            return;
        };
        // Frees go when due (`emit_frees`: gathered, or waited long enough,
        // or wanted): a batch that carries one needs a barrier even under
        // persist-on-flush.
        let room = log.frees_room(open.extents);
        if log.frees_due && !self.to_free.is_empty() && room > 0 {
            let n = room.min(self.to_free.len());
            let slots = self.to_free.take_front(n);
            let io = self.new_io(IoCtx::FreeSlots {
                slots: slots.clone(),
            });
            open.free_slots += slots.len() as u64;
            open.frees.push(IoCommand::FreeSlots { io, slots });
        }
        let log = self.log.as_mut().expect("log mode");
        if self.to_free.is_empty() {
            log.frees_due = false;
        }
        debug_assert_eq!(
            open.taken, open.built,
            "every slot of a batch has its page write when it is sealed"
        );
        let next_header = SlotIndex(log.head);
        log.spans.push_back(Span {
            header: open.header,
            pages: open.taken,
            seq: open.seq,
        });
        let ios = open
            .pages
            .iter()
            .chain(&open.frees)
            .map(IoCommand::io)
            .collect();
        let io = self.new_io(IoCtx::Batch {
            seq: open.seq,
            header: SlotIndex(open.header),
            next_header,
            ios,
        });
        let cmd = IoCommand::WriteBatch {
            io,
            header: SlotIndex(open.header),
            seq: open.seq,
            next_header,
            pages: open.pages,
            frees: open.frees,
        };
        self.stats.log_batches += 1;
        self.log.as_mut().expect("log mode").sealed.push_back(cmd);
    }

    /// A command for the device: in log mode a page write joins the open
    /// batch (its slot was just taken there), else it goes out on its own.
    pub(super) fn push_page_write(&mut self, cmd: IoCommand) {
        let Some(log) = &mut self.log else {
            self.commands.push_back(cmd);
            return;
        };
        let IoCommand::WritePage { slot, record, .. } = &cmd else {
            unreachable!("only page writes join a batch");
        };
        let ring = log.ring;
        let (key, seq, dirty) = (record.key.0, record.seq, record.dirty);
        log.logged.set(*slot, dirty);
        let open = log
            .open
            .as_mut()
            .expect("the slot was taken in the open batch");
        debug_assert_eq!(
            slot.0 as u64,
            (open.header as u64 + open.built as u64 + 1) % ring as u64,
            "a batch's pages follow its header in order"
        );
        open.built += 1;
        let continues = open
            .last
            .is_some_and(|(k, q, d)| k + 1 == key && q + 1 == seq && d == dirty);
        if !continues {
            open.extents += 1;
        }
        open.last = Some((key, seq, dirty));
        open.pages.push(cmd);
    }

    /// Log mode: more room is wanted than the slots the tail passed will
    /// give once its move is durable: pass more batches. (Counting only the
    /// pool, reclaim went on passing batches while a move was in flight,
    /// until the log was empty: every dirty page destaged at once, every
    /// clean copy dropped.)
    fn log_wants_reclaim(&self) -> bool {
        self.log.as_ref().is_some_and(|log| {
            let coming = self.slots.free_count() + log.passed as u64;
            let stalled = self.stalled.front().map_or(0, |&ri| {
                let r = self.req(ri);
                let pages = self.pages_of(r.offset_bytes, r.len_bytes);
                Log::slots_for(pages) + SPARE_SLOTS + log.copy_reserve()
            });
            coming < log.budget + log.low().max(stalled)
        })
    }

    /// Holds the open batch: writes admitted until `release_batch` join it
    /// (it is not sealed meanwhile while it has fewer than
    /// `HELD_PAGES_MAX` pages), so that a front end's small writes started
    /// together (`DriverBatch`) share one batch and its barrier. Counted; a
    /// hold must be released soon, before its holder waits for anything.
    /// Nothing outside log mode.
    pub fn hold_batch(&mut self) {
        if let Some(log) = self.log.as_mut() {
            log.held += 1;
        }
    }

    /// Ends one `hold_batch`; the last one's end lets the open batch go.
    pub fn release_batch(&mut self, now: Nanos) {
        if let Some(log) = self.log.as_mut() {
            assert!(log.held > 0, "a release of a batch not held");
            log.held -= 1;
            self.end_step(now);
        }
    }

    /// The end of an engine step in log mode: make room at the tail while
    /// it is wanted, make the tail's move durable, and issue the next batch
    /// if none is being written (sealing the open one).
    #[inline]
    pub(super) fn log_step(&mut self) {
        if self.log.is_some() {
            self.log_step_inner();
            self.log_checkpoint();
        }
    }

    fn log_step_inner(&mut self) {
        self.drop_superseded_frees();
        if self.log_wants_reclaim() {
            self.log_reclaim();
        }
        self.log_advance();
        let log = self.log.as_mut().expect("log mode");
        if log.writing || self.timers.get(Timer::LogRetry).is_some() {
            return;
        }
        if log.sealed.is_empty() && log.open.is_none() && log.frees_due && !self.to_free.is_empty()
        {
            // Frees due with no page to carry them: a batch of their own,
            // its header from the slots no write holds.
            if self.slots.free_count() > log.budget {
                self.log_open_batch(None);
            }
        }
        let log = self.log.as_mut().expect("log mode");
        let large = log.open.as_ref().is_some_and(|o| o.taken >= HELD_PAGES_MAX);
        if log.sealed.is_empty() && (log.held == 0 || large) {
            self.log_seal();
        }
        let log = self.log.as_mut().expect("log mode");
        if let Some(cmd) = log.sealed.pop_front() {
            log.writing = true;
            self.commands.push_back(cmd);
        }
    }

    /// Frees waiting whose page has since got a written newer version need
    /// no place in the log (`queue_free`): they complete now. Only the
    /// pages whose version was written since the last step are looked at
    /// (`written`; the free waiting for a page is its oldest old version's).
    fn drop_superseded_frees(&mut self) {
        let log = self.log.as_mut().expect("log mode");
        if log.written.is_empty() {
            return;
        }
        let written = std::mem::take(&mut log.written);
        let mut done = Vec::new();
        for key in written {
            let front = self.old_versions.get(&key).and_then(|q| q.front());
            if let Some(&slot) = front {
                if self.to_free.contains(slot) && self.superseded_in_log(slot) {
                    self.to_free.remove(slot);
                    done.push(slot);
                }
            }
        }
        if !done.is_empty() {
            self.stats.log_frees_superseded += done.len() as u64;
            self.complete_free_slots(done, Ok(()));
            // A page whose old version is gone may be destaged now: this
            // step's destages were started before (nothing else may come
            // to start them: a drain would wait forever).
            self.start_destages();
        }
    }

    /// Log mode: a version of `key` was written (it is current and dirty):
    /// its page's waiting free may need no place in the log.
    pub(super) fn log_version_written(&mut self, key: PageKey) {
        if let Some(log) = &mut self.log {
            log.written.push(key.0);
        }
    }

    /// Issue the `AdvanceLog` for the slots the tail passed, when none is
    /// in flight and room is wanted, enough have gathered, or frees wait
    /// for it.
    fn log_advance(&mut self) {
        let pool = self.slots.free_count();
        let log = self.log.as_ref().expect("log mode");
        // Room is short: writes wait, or the pool beyond the reservations
        // is down to half the room reclaim keeps ahead of the head. (Moving
        // whenever the pool was under that room moved the tail at every
        // pass, hundreds of times a second, each move two cache flushes.)
        let short = !self.stalled.is_empty() || pool < log.budget + log.low() / 2;
        let log = self.log.as_mut().expect("log mode");
        if log.advancing > 0 || log.passed == 0 {
            return;
        }
        // Frees waiting for the move hold up their pages' next destage
        // and any write around them: they go at once.
        if !short && log.passed < log.ring / 16 && log.advance_frees.is_empty() {
            return;
        }
        let n = log.passed;
        let tail = log.tail(pool);
        let tail_seq = log
            .spans
            .front()
            .map(|s| s.seq)
            .or(log.open.as_ref().map(|o| o.seq))
            .unwrap_or(log.next_seq);
        log.advancing = n;
        log.advance_frees_sent = log.advance_frees.len();
        let io = self.new_io(IoCtx::AdvanceLog { slots: n });
        self.stats.log_advances += 1;
        self.commands.push_back(IoCommand::AdvanceLog {
            io,
            tail: SlotIndex(tail),
            tail_seq,
        });
    }

    /// A batch is durable (its inner commands complete with it), or failed:
    /// then its pages fail, and the batch is written again empty (same
    /// header, sequence number and next header) before any later one, so
    /// the chain recovery follows has no gap.
    pub(super) fn complete_batch(
        &mut self,
        now: Nanos,
        seq: u64,
        (header, next_header): (SlotIndex, SlotIndex),
        ios: Vec<IoId>,
        result: Result<(), IoError>,
    ) -> Result<(), EngineError> {
        // Each page's completion looks up the page its old version held.
        for &io in &ios {
            match self.io_ctx(io) {
                Some(IoCtx::Fill { fill, .. }) => self.slots.prefetch(self.slots.key(fill.slot)),
                Some(IoCtx::FillRun { fills, .. }) => {
                    for f in fills {
                        self.slots.prefetch(self.slots.key(f.slot));
                    }
                }
                _ => {}
            }
        }
        for io in ios {
            if self.io_live(io) {
                self.complete_one(now, io, result)?;
            }
        }
        let log = self.log.as_mut().expect("log mode");
        log.writing = false;
        match result {
            Ok(()) => log.durable_seq = seq,
            Err(_) => {
                self.stats.io_errors += 1;
                let io = self.new_io(IoCtx::Batch {
                    seq,
                    header,
                    next_header,
                    ios: Vec::new(),
                });
                let again = IoCommand::WriteBatch {
                    io,
                    header,
                    seq,
                    next_header,
                    pages: Vec::new(),
                    frees: Vec::new(),
                };
                let log = self.log.as_mut().expect("log mode");
                log.sealed.push_front(again);
                let at = Nanos(now.0.saturating_add(destager::DESTAGE_RETRY_NS_MIN));
                self.timers.set(Timer::LogRetry, Some(at));
            }
        }
        Ok(())
    }

    /// The tail's move is durable: the stale slots it passed are freed,
    /// and the slots it passed join the pool.
    pub(super) fn complete_advance(&mut self, slots: u32, result: Result<(), IoError>) {
        let log = self.log.as_mut().expect("log mode");
        log.advancing = 0;
        if result.is_err() {
            self.stats.io_errors += 1;
            return; // issued again at the next step
        }
        let n = std::mem::take(&mut log.advance_frees_sent);
        let freed: Vec<SlotIndex> = log.advance_frees.drain(..n).collect();
        if !freed.is_empty() {
            self.complete_free_slots(freed, Ok(()));
        }
        let pool = self.slots.free_count() as u32;
        let log = self.log.as_mut().expect("log mode");
        let first = log.add(log.head, pool % log.ring);
        log.passed -= slots;
        let mut left = slots;
        while left > 0 {
            let b = log
                .passed_batches
                .pop_front()
                .expect("a move covers whole batches");
            assert!(b <= left, "a move covers whole batches");
            left -= b;
        }
        let ring = log.ring;
        for i in 0..slots {
            let s = ((first as u64 + i as u64) % ring as u64) as u32;
            self.slots.return_to_pool(SlotIndex(s));
        }
    }
}
