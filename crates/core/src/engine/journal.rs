//! Journaled write-back's transactions (Koller et al., FAST'13 §3.2): which
//! page versions belong to which transaction, when the open one commits,
//! and the atomic checkpoint of committed ones to the backing, one at a
//! time, in commit order.
//!
//! Every new page version joins the open transaction. An overwrite of a
//! version of the open transaction replaces it (coalescing); an overwrite
//! of a committed one keeps it, as an older dirty version, until its
//! transaction is checkpointed. The open transaction commits by size or
//! age, or at an application's consistency point; a checkpoint (lazy: when
//! the destage rate over the journal's occupancy, a stall, a drain or the
//! maximum dirty age calls for one) stages its pages at the backing
//! (journal region or NVRAM), commits them
//! there (`IoCommand::Commit`), and with a backing journal writes them in
//! place and retires the journal entry. Transactions are cut when they
//! commit, so a write is in the same or a later transaction than every
//! write answered before it was issued: each boundary is a point-in-time
//! state, and the backing alone moves from one to the next. Committed
//! transactions that wait while the backing is busy are checkpointed
//! together, as one: a page several of them wrote goes once.

use super::*;
use crate::config::{CheckpointMode, ConsistencyPoints};

/// One step of a checkpoint; each is a batch of commands that all complete
/// before the next step starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Stage,
    Commit,
    Apply,
    Retire,
}

/// A committed transaction being checkpointed.
struct Checkpoint {
    /// The newest transaction it holds.
    txn: EpochId,
    /// The page versions it writes, in address order.
    slots: Vec<SlotIndex>,
    /// Older versions of those pages, of earlier transactions merged into
    /// this checkpoint: never written, done when it is.
    covered: Vec<SlotIndex>,
    step: Step,
    /// Commands of this step not yet issued.
    queue: VecDeque<IoCommand>,
    outstanding: u32,
    failed: bool,
}

pub(super) struct Journal {
    points: ConsistencyPoints,
    checkpoint: CheckpointMode,
    commit_age_ns: u64,
    /// Most page versions not yet checkpointed.
    limit: u64,
    /// The open transaction commits at this many pages.
    commit_pages: u64,
    /// Per slot: the transaction (low 32 bits) of its version.
    slot_txn: Vec<u32>,
    open: EpochId,
    open_slots: Vec<SlotIndex>,
    /// Pages with a version in the open transaction (coalesced ones once).
    open_pages: u64,
    open_since: Option<Nanos>,
    /// Committed, not yet checkpointed: (transaction, its slots as added).
    committed: VecDeque<(EpochId, Vec<SlotIndex>)>,
    /// Page writes in flight per transaction (a checkpoint waits for its own).
    filling: HashMap<EpochId, u32>,
    /// Committed transactions up to this one are due for checkpoint now,
    /// whatever the rate says (a page of them passed the maximum dirty age).
    due_through: EpochId,
    active: Option<Checkpoint>,
    /// Versions kept as older dirty versions (of committed transactions).
    kept: u64,
    commits: u64,
    forced_commits: u64,
    checkpoints: u64,
    checkpoint_pages: u64,
    coalesced: u64,
    merged_transactions: u64,
    recovery_splits: u64,
}

impl Journal {
    pub fn new(config: &EngineConfig) -> Journal {
        let j = &config.journal;
        Journal {
            points: j.points,
            checkpoint: j.checkpoint,
            commit_age_ns: j.commit_age_ns,
            limit: j.journal_pages(config.cache_slots),
            commit_pages: j.commit_pages(config.cache_slots),
            slot_txn: vec![0; config.cache_slots as usize],
            open: EpochId(1),
            open_slots: Vec::new(),
            open_pages: 0,
            open_since: None,
            committed: VecDeque::new(),
            filling: HashMap::default(),
            due_through: EpochId(0),
            active: None,
            kept: 0,
            commits: 0,
            forced_commits: 0,
            checkpoints: 0,
            checkpoint_pages: 0,
            coalesced: 0,
            merged_transactions: 0,
            recovery_splits: 0,
        }
    }

    /// The transaction of `slot`'s version (valid while it is one).
    fn txn_of(&self, slot: SlotIndex) -> EpochId {
        // Live transactions span fewer than 2^32 ids: the low bits name one.
        let low = u64::from(self.slot_txn[slot.0 as usize]);
        let id = (self.open.0 & !0xffff_ffff) | low;
        EpochId(if id > self.open.0 { id - (1 << 32) } else { id })
    }

    pub fn forced_commits(&self) -> u64 {
        self.forced_commits
    }

    pub fn commits(&self) -> u64 {
        self.commits
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Versions kept beside the dirty pages (older dirty versions).
    pub fn kept(&self) -> u64 {
        self.kept
    }

    pub fn heap_bytes(&self) -> usize {
        self.slot_txn.capacity() * 4
            + self.open_slots.capacity() * 4
            + self
                .committed
                .iter()
                .map(|(_, s)| s.capacity() * 4 + 32)
                .sum::<usize>()
            + self.active.as_ref().map_or(0, |c| c.slots.capacity() * 4)
            + self.filling.capacity() * 16
    }

    pub fn report(&self, v: &mut dyn MetricsVisitor) {
        let counters = [
            ("journal_commits", "Transactions committed.", self.commits),
            (
                "journal_forced_commits",
                "Transactions committed under consistency points without one declared: for room only that commit makes, or by a drain.",
                self.forced_commits,
            ),
            (
                "journal_checkpoints",
                "Transactions checkpointed to the backing.",
                self.checkpoints,
            ),
            (
                "journal_checkpoint_pages",
                "Page versions checkpointed to the backing.",
                self.checkpoint_pages,
            ),
            (
                "journal_coalesced_pages",
                "Page versions replaced inside the open transaction.",
                self.coalesced,
            ),
            (
                "journal_merged_transactions",
                "Committed transactions checkpointed together with an earlier one (their common pages written once).",
                self.merged_transactions,
            ),
            (
                "journal_recovery_splits",
                "Recoveries whose pages did not fit one backing journal transaction.",
                self.recovery_splits,
            ),
        ];
        for (name, help, value) in counters {
            v.metric(MetricKind::Counter, name, help, value);
        }
        let gauges = [
            (
                "journal_open_pages",
                "Pages in the open transaction.",
                self.open_pages,
            ),
            (
                "journal_committed_transactions",
                "Committed transactions not yet checkpointed (the one being checkpointed included).",
                self.committed.len() as u64 + self.active.is_some() as u64,
            ),
            (
                "journal_limit_pages",
                "Page versions the host journal holds before writes wait.",
                self.limit,
            ),
        ];
        for (name, help, value) in gauges {
            v.metric(MetricKind::Gauge, name, help, value);
        }
    }
}

/// The I/O id of a queued command, replaced when it is issued.
const UNISSUED: IoId = IoId(u64::MAX);

/// Why the open transaction commits.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Why {
    /// Its size or age (size mode), or a consistency point.
    Rule,
    /// Under consistency points, with none declared: the journal is full
    /// and nothing else can free it, or a drain empties the cache.
    Forced,
}

impl Engine {
    fn jrn(&mut self) -> &mut Journal {
        self.journal.as_mut().expect("journaled write-back")
    }
    fn jrn_ref(&self) -> &Journal {
        self.journal.as_ref().expect("journaled write-back")
    }

    /// Under journaled write-back, whether an overwrite of `old` keeps it:
    /// it belongs to a committed transaction not yet checkpointed.
    pub(super) fn journal_keeps(&self, old: SlotIndex) -> bool {
        self.journal
            .as_ref()
            .is_some_and(|j| j.txn_of(old) != j.open)
    }

    /// Whether `old`, superseded by `new`, was of an earlier transaction
    /// (not replaced inside `new`'s).
    pub(super) fn journal_keeps_as(&self, old: SlotIndex, new: SlotIndex) -> bool {
        let j = self.jrn_ref();
        j.slot_txn[old.0 as usize] != j.slot_txn[new.0 as usize]
    }

    /// A kept older version became current again (its successor's write failed).
    pub(super) fn journal_unkeep(&mut self) {
        self.jrn().kept -= 1;
    }

    /// `old` was kept as an older dirty version, or (same transaction)
    /// replaced by the new one.
    pub(super) fn journal_superseded(&mut self, kept: bool) {
        let j = self.jrn();
        if kept {
            j.kept += 1;
        } else {
            j.coalesced += 1;
        }
    }

    /// A new dirty version in `slot` joins the open transaction; `coalesces`
    /// if it replaces one of the same transaction.
    pub(super) fn journal_version(&mut self, slot: SlotIndex, coalesces: bool) {
        let now = self.last_request_at;
        let j = self.jrn();
        j.slot_txn[slot.0 as usize] = j.open.0 as u32;
        j.open_slots.push(slot);
        j.open_pages += u64::from(!coalesces);
        *j.filling.entry(j.open).or_insert(0) += 1;
        if j.open_since.is_none() {
            j.open_since = Some(now);
            if j.points == ConsistencyPoints::Size && j.commit_age_ns > 0 {
                let at = Nanos(now.0.saturating_add(j.commit_age_ns));
                self.timers.set(Timer::Commit, Some(at));
            }
        }
    }

    /// The page write of `slot`'s version finished (written or undone).
    pub(super) fn journal_fill_done(&mut self, slot: SlotIndex) {
        let j = self.jrn();
        let txn = j.txn_of(slot);
        let n = j.filling.get_mut(&txn).expect("a fill in flight");
        *n -= 1;
        if *n == 0 {
            j.filling.remove(&txn);
        }
    }

    /// Whether a write of `need` pages fits the journal now.
    pub(super) fn journal_has_room(&self, need: u64) -> bool {
        self.journal
            .as_ref()
            .is_none_or(|j| self.dirty.pages() as u64 + j.kept + need <= j.limit)
    }

    /// An application's consistency point: the open transaction commits.
    pub(super) fn journal_point(&mut self) {
        self.journal_commit(Why::Rule);
    }

    /// Close the open transaction (if it holds anything) and open the next.
    fn journal_commit(&mut self, why: Why) {
        let j = self.jrn();
        if j.open_slots.is_empty() {
            return;
        }
        let slots = std::mem::take(&mut j.open_slots);
        j.committed.push_back((j.open, slots));
        j.open = EpochId(j.open.0 + 1);
        j.open_pages = 0;
        j.open_since = None;
        j.commits += 1;
        j.forced_commits += u64::from(why == Why::Forced);
        self.timers.set(Timer::Commit, None);
    }

    /// The commit age of the open transaction was reached.
    pub(super) fn journal_commit_due(&mut self) {
        self.timers.set(Timer::Commit, None);
        if self.jrn_ref().points == ConsistencyPoints::Size {
            self.journal_commit(Why::Rule);
        }
    }

    /// After a restart: every recovered dirty page forms the open
    /// transaction (it holds the newest version of each page, a state the
    /// writes reached), committed at once by size rules; under consistency
    /// points it waits for the next one. A set larger than the backing
    /// journal is committed in parts (counted: a loss of the cache device
    /// while they checkpoint leaves the backing between two of them).
    pub(super) fn journal_recovered(&mut self, mut kept: Vec<(u64, SlotIndex)>) {
        kept.sort_unstable();
        let part = match self.jrn_ref().checkpoint {
            CheckpointMode::BackingJournal { pages } => pages.max(1) as usize,
            CheckpointMode::Nvram => usize::MAX,
        };
        if kept.len() > part {
            self.jrn().recovery_splits += 1;
        }
        for chunk in kept.chunks(part) {
            let j = self.jrn();
            for &(_, slot) in chunk {
                j.slot_txn[slot.0 as usize] = j.open.0 as u32;
                j.open_slots.push(slot);
                j.open_pages += 1;
            }
            if kept.len() > part || j.points == ConsistencyPoints::Size {
                self.journal_commit(Why::Rule);
            }
        }
    }

    /// Commit what the rules say, start the next checkpoint when the last
    /// is done and one is due, and issue its commands up to the destage
    /// limit.
    pub(super) fn start_journaled(&mut self) {
        let full = !self.stalled.is_empty() && self.stall_needs_commit();
        let expired = self.ages.has_expired();
        if expired {
            self.ages.clear_expired();
        }
        let j = self.jrn_ref();
        let size_rule = j.points == ConsistencyPoints::Size;
        let nothing_else = j.committed.is_empty() && j.active.is_none();
        // Under consistency points a commit no point declared is counted:
        // the backing alone may stop there too.
        let undeclared = if size_rule { Why::Rule } else { Why::Forced };
        if size_rule && (j.open_pages >= j.commit_pages || expired || self.idle_draining) {
            self.journal_commit(Why::Rule);
        } else if self.draining || (full && nothing_else) {
            self.journal_commit(undeclared);
        }
        if expired {
            // Everything committed so far goes at the next checkpoint.
            let j = self.jrn();
            j.due_through = EpochId(j.open.0 - 1);
        }
        // A transaction with nothing left to write (its page writes all
        // failed) is done at once: take the next.
        while self.jrn_ref().active.is_none() && self.checkpoint_due() && self.begin_checkpoint() {}
        self.pump_checkpoint();
    }

    /// A write waits for room that only a commit of the open transaction
    /// can make: the host journal's; format 2, the cache's when the open
    /// transaction's versions leave it too few slots; log mode, the log's
    /// when its tail waits on a version of the open transaction. Other room
    /// comes without a commit (stale versions' frees, clean pages, the
    /// tail's move, checkpoints of committed transactions), and a commit
    /// there would cut the open transaction between declared points (format
    /// 2 did on any stall: frees that lagged under a loaded disk let a lost
    /// cache leave half an epoch on the backing).
    fn stall_needs_commit(&self) -> bool {
        let need = self.stalled.front().map_or(0, |&ri| {
            let r = self.req(ri);
            self.pages_of(r.offset_bytes, r.len_bytes)
        });
        if !self.journal_has_room(need) {
            return true;
        }
        let j = self.jrn_ref();
        let Some(log) = &self.log else {
            // Its current versions (a version it replaced is stale, freed
            // without a commit).
            return (self.slots.len() as u64).saturating_sub(j.open_pages) < need;
        };
        log.front_span_slots().any(|slot| {
            let state = self.slots.state(slot);
            matches!(state, SlotState::Dirty | SlotState::Filling) && j.txn_of(slot) == j.open
        })
    }

    /// Whether a checkpoint should begin now. Checkpoints are lazy, as
    /// write-back's destages are: the destage rate over the host journal's
    /// occupancy decides (its thresholds, a stall for room, a drain, the
    /// idle drain), and a page past the maximum dirty age makes every
    /// transaction committed before it due. (The paper checkpoints
    /// eagerly; on a backing that takes each page twice, into its journal
    /// and in place, and serves the read misses, eager checkpoints compete
    /// with the reads: `docs/consistency.md`.)
    fn checkpoint_due(&mut self) -> bool {
        let j = self.jrn_ref();
        let Some(&(front, _)) = j.committed.front() else {
            return false;
        };
        if front <= j.due_through {
            return true;
        }
        let input = RateInput {
            occupancy_pages: self.dirty_versions(),
            capacity_pages: self.rate_capacity_pages(),
            last_destage_sequential: false,
            next_candidate_sequential: false,
        };
        self.destage_target(&input) > 0
    }

    /// Take the oldest committed transaction once its page writes are
    /// done. Returns whether one was taken.
    fn begin_checkpoint(&mut self) -> bool {
        // Every committed transaction whose page writes are done, from the
        // oldest on, goes as one: the backing moves from before the first
        // to after the last at once (a boundary, and under consistency
        // points a declared one), and a page written by several of them is
        // written once, its newest version (coalescing across transactions
        // while the backing is busy).
        // (No cap on the merge: one commit size at most was tried; a stalled
        // write then waits for less, but the simulator's closed loop fell
        // from 5,112 to 1,500 IOPS without the coalescing across
        // transactions: docs/consistency.md.)
        let mut merged: Vec<(EpochId, Vec<SlotIndex>)> = Vec::new();
        loop {
            let j = self.jrn_ref();
            let Some(&(txn, _)) = j.committed.front() else {
                break;
            };
            if j.filling.contains_key(&txn) {
                break;
            }
            merged.push(self.jrn().committed.pop_front().expect("a committed one"));
        }
        let Some(&(txn, _)) = merged.last() else {
            return false;
        };
        self.jrn().merged_transactions += merged.len() as u64 - 1;
        // Each transaction's versions still owed to the backing: current or
        // kept, once each (a slot may have been coalesced away, or reused
        // later), tagged with the transaction.
        let mut versions: Vec<(u64, EpochId, SlotIndex)> = Vec::new();
        for (t, mut slots) in merged {
            slots.sort_unstable();
            slots.dedup();
            for s in slots {
                let owed = self.jrn_ref().txn_of(s) == t
                    && matches!(self.slots.state(s), SlotState::Dirty | SlotState::OldDirty);
                if owed {
                    versions.push((self.slots.key(s).0, t, s));
                }
            }
        }
        // By page, newest transaction first: the first of each page is staged.
        versions.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut slots = Vec::with_capacity(versions.len());
        let mut covered = Vec::new();
        for (i, &(key, t, s)) in versions.iter().enumerate() {
            if i > 0 && versions[i - 1].0 == key {
                debug_assert!(
                    versions[i - 1].1 > t,
                    "one version per page and transaction"
                );
                covered.push(s);
            } else {
                slots.push(s);
            }
        }
        for &s in slots.iter().chain(&covered) {
            debug_assert!(!self.slots.has(s, FLAG_DESTAGING));
            self.slots.set_flag(s, FLAG_DESTAGING, true);
        }
        let mut cp = Checkpoint {
            txn,
            slots,
            covered,
            step: Step::Stage,
            queue: VecDeque::new(),
            outstanding: 0,
            failed: false,
        };
        self.queue_step(&mut cp);
        self.settle(cp);
        true
    }

    /// Keep `cp` active, or, when its step has nothing to do (a
    /// transaction whose every page write failed), move on at once.
    fn settle(&mut self, mut cp: Checkpoint) {
        while cp.queue.is_empty() && cp.outstanding == 0 {
            match self.next_step(cp.step) {
                Some(step) => {
                    cp.step = step;
                    self.queue_step(&mut cp);
                }
                None => return self.finish_checkpoint(cp),
            }
        }
        self.jrn().active = Some(cp);
    }

    /// The step after `step` (None: the checkpoint is done).
    fn next_step(&self, step: Step) -> Option<Step> {
        let journal = matches!(
            self.jrn_ref().checkpoint,
            CheckpointMode::BackingJournal { .. }
        );
        match (step, journal) {
            (Step::Stage, _) => Some(Step::Commit),
            (Step::Commit, true) => Some(Step::Apply),
            (Step::Apply, _) => Some(Step::Retire),
            (Step::Commit, false) | (Step::Retire, _) => None,
        }
    }

    /// The commands of `cp`'s current step.
    fn queue_step(&mut self, cp: &mut Checkpoint) {
        let journal = matches!(
            self.jrn_ref().checkpoint,
            CheckpointMode::BackingJournal { .. }
        );
        let txn = cp.txn.0;
        let io = UNISSUED;
        cp.queue.clear();
        match cp.step {
            Step::Stage => {
                let mut cursor: Vec<(VolumeId, u64)> = Vec::new();
                for (volume, first_page, slots) in self.runs(&cp.slots) {
                    let journal_page = journal.then(|| {
                        let at = match cursor.iter_mut().find(|(v, _)| *v == volume) {
                            Some(c) => c,
                            None => {
                                cursor.push((volume, 0));
                                cursor.last_mut().expect("just pushed")
                            }
                        };
                        let j = at.1;
                        at.1 += slots.len() as u64;
                        j
                    });
                    cp.queue.push_back(IoCommand::Stage {
                        io,
                        volume,
                        txn,
                        first_page,
                        slots,
                        journal_page,
                    });
                }
            }
            Step::Commit => {
                for (volume, pages) in self.homes_by_volume(&cp.slots) {
                    cp.queue.push_back(IoCommand::Commit {
                        io,
                        volume,
                        txn,
                        pages: if journal { pages } else { Vec::new() },
                        apply: !journal,
                    });
                }
            }
            Step::Apply => {
                for (volume, first_page, slots) in self.runs(&cp.slots) {
                    cp.queue.push_back(IoCommand::Destage {
                        io,
                        volume,
                        first_page,
                        slots,
                    });
                }
            }
            Step::Retire => {
                for (volume, _) in self.homes_by_volume(&cp.slots) {
                    cp.queue.push_back(IoCommand::Retire { io, volume, txn });
                }
            }
        }
    }

    /// Runs of consecutive pages of one write group, in address order.
    fn runs(&self, slots: &[SlotIndex]) -> Vec<(VolumeId, PageIndex, Vec<SlotIndex>)> {
        let group_pages = u64::from(self.geometry.group_pages());
        let mut runs: Vec<(VolumeId, PageIndex, Vec<SlotIndex>)> = Vec::new();
        for &s in slots {
            let key = self.slots.key(s);
            let page = key.page().0;
            if let Some((v, first, run)) = runs.last_mut() {
                let continues = *v == key.volume()
                    && first.0 + run.len() as u64 == page
                    && !page.is_multiple_of(group_pages);
                if continues {
                    run.push(s);
                    continue;
                }
            }
            runs.push((key.volume(), PageIndex(page), vec![s]));
        }
        runs
    }

    /// Each volume's pages of a transaction, in address order (= journal order).
    fn homes_by_volume(&self, slots: &[SlotIndex]) -> Vec<(VolumeId, Vec<PageIndex>)> {
        let mut out: Vec<(VolumeId, Vec<PageIndex>)> = Vec::new();
        for &s in slots {
            let key = self.slots.key(s);
            match out.last_mut() {
                Some((v, pages)) if *v == key.volume() => pages.push(key.page()),
                _ => out.push((key.volume(), vec![key.page()])),
            }
        }
        out
    }

    /// Issue queued commands of the active checkpoint up to the destage limit.
    fn pump_checkpoint(&mut self) {
        let max = self.config.rate.destages_max;
        loop {
            let Some(cp) = self.jrn().active.as_mut() else {
                return;
            };
            if cp.outstanding >= max || cp.failed {
                return;
            }
            let Some(mut cmd) = cp.queue.pop_front() else {
                return;
            };
            cp.outstanding += 1;
            self.destager.checkpoint_issued();
            let writes_pages = matches!(cmd, IoCommand::Stage { .. } | IoCommand::Destage { .. });
            self.stats.destages += u64::from(writes_pages);
            let id = self.new_io(IoCtx::Checkpoint { cmd: cmd.clone() });
            match &mut cmd {
                IoCommand::Stage { io, .. }
                | IoCommand::Commit { io, .. }
                | IoCommand::Destage { io, .. }
                | IoCommand::Retire { io, .. } => *io = id,
                _ => unreachable!("a checkpoint issues only its own commands"),
            }
            self.commands.push_back(cmd);
        }
    }

    /// Command `cmd` of the active checkpoint finished; a failed one is
    /// queued again (a failed stage or commit left the backing as it was;
    /// a failed in-place write is replayable).
    pub(super) fn checkpoint_io_done(
        &mut self,
        now: Nanos,
        cmd: IoCommand,
        result: Result<(), IoError>,
    ) {
        self.destager.done();
        let mut cp = self.jrn().active.take().expect("a checkpoint in flight");
        cp.outstanding -= 1;
        if result.is_err() {
            cp.failed = true;
            cp.queue.push_back(cmd);
            self.stats.destage_errors += 1;
        }
        if cp.outstanding > 0 || (!cp.failed && !cp.queue.is_empty()) {
            self.jrn().active = Some(cp);
            return;
        }
        if cp.failed {
            // The failed commands again, after a pause.
            cp.failed = false;
            let pause = self.destager.failed();
            self.timers
                .set(Timer::DestageRetry, Some(Nanos(now.0 + pause)));
            self.jrn().active = Some(cp);
            return;
        }
        self.destager.succeeded();
        self.settle(cp);
    }

    /// The transaction is on the backing: its versions are done.
    fn finish_checkpoint(&mut self, cp: Checkpoint) {
        let j = self.jrn();
        j.checkpoints += 1;
        j.checkpoint_pages += cp.slots.len() as u64;
        self.stats.destaged_pages += cp.slots.len() as u64;
        for &slot in &cp.slots {
            let key = self.slots.key(slot);
            self.counts_mut(key).destaged_pages += 1;
        }
        for &slot in cp.slots.iter().chain(&cp.covered) {
            debug_assert!(self.slots.has(slot, FLAG_DESTAGING));
            self.slots.set_flag(slot, FLAG_DESTAGING, false);
            let key = self.slots.key(slot);
            match self.slots.state(slot) {
                SlotState::Dirty => self.dirty_page_on_backing(slot, key),
                SlotState::OldDirty | SlotState::Stale => {
                    if self.slots.state(slot) == SlotState::OldDirty {
                        self.jrn().kept -= 1;
                        self.slots.set_state(slot, SlotState::Stale);
                    }
                    if !self.config.persistent {
                        self.remove_old(slot);
                    }
                    self.release_slot_if_free(slot);
                }
                other => debug_assert!(false, "checkpointed slot in state {other:?}"),
            }
        }
        self.rate
            .destage_done(self.dirty_versions(), self.rate_capacity_pages());
    }
}
