//! A PostgreSQL-like database under a TPC-C-like load, at the block layer,
//! so that request-oriented admission has an application to serve: client
//! backends (critical) commit through the WAL-write lock, a log writer,
//! a checkpointer, a kworker and a filesystem journal thread (jbd2) write
//! in the background, and a backend that blocks on one of them makes it
//! inherit criticality (Kim et al., ATC'15 §4.2, §6). Every parameter and
//! where its value comes from is in `docs/workloads.md`. Deterministic from
//! the seed; no allocation after `new`; never looks at the cache.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use wcache_core::time::Nanos;

use super::app::{
    app_workload_methods, check_cpu_us, check_sizes, exp_ns, invalid, AppMeter, Blocking, Journal,
    WaitStat,
};
use super::{
    AppReport, CriticalityHint, IoRequest, ReqKind, Stop, Workload, WorkloadError, WorkloadStats,
    BLOCK_BYTES,
};

/// Most backends (request ids carry the process in their low byte).
pub const PGLIKE_BACKENDS_MAX: u32 = 200;
/// The data volume (tables and indexes) and the WAL volume (log, and the
/// WAL filesystem's journal after it).
pub const DATA_VOLUME: u32 = 0;
pub const WAL_VOLUME: u32 = 1;
const WAL_LOCK: usize = 0;
const PROCESS_BITS: u32 = 8;

/// Shares of writes per process role (Table 1 of the paper; fractions of
/// all writes, summing to 1). The background roles' writes are paid for by
/// the transactions: each commit adds `role / backends` of a write to the
/// role's credit (so the mix is Table 1's while each commit is a WAL write
/// of its own; group commit lowers the backends' share).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PgWriteMix {
    pub backends: f64,
    pub checkpointer: f64,
    pub log_writer: f64,
    pub jbd2: f64,
    pub kworker: f64,
}

impl PgWriteMix {
    /// Table 1 (TPC-C, 24 clients, no cache); "etc" (0.007 %) left out.
    pub fn paper() -> PgWriteMix {
        PgWriteMix {
            backends: 0.44312,
            checkpointer: 0.34664,
            log_writer: 0.00368,
            jbd2: 0.00094,
            kworker: 0.20554,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct PgLikeConfig {
    /// Client backends (critical processes), one transaction at a time each.
    pub backends: u32,
    /// CPU and buffer-pool work of a transaction before its commit
    /// (exponential, mean), in microseconds.
    pub cpu_us_mean: f64,
    /// WAL bytes one transaction's commit record adds.
    pub wal_record_bytes: u64,
    /// Largest single WAL write.
    pub wal_write_bytes_max: u64,
    /// WAL region (recycled round), at the start of the WAL volume.
    pub wal_bytes: u64,
    /// A WAL write that enters a new segment first waits for a journal
    /// commit of the WAL filesystem (the new segment's metadata).
    pub wal_segment_bytes: u64,
    /// Tables and indexes: the data volume.
    pub data_bytes: u64,
    /// A checkpoint starts after this much WAL since the last one and writes
    /// the checkpointer's credit as a burst.
    pub checkpoint_wal_bytes: u64,
    /// Checkpoint writes in flight at once.
    pub checkpointer_outstanding: u32,
    /// kworker (async writeback) writes in flight at once.
    pub kworker_outstanding: u32,
    /// Dirty buffers the background writers may owe before a backend must
    /// write one out itself before its transaction (a buffer eviction).
    pub dirty_pages_max: u64,
    pub mix: PgWriteMix,
    /// The WAL filesystem's journal region (after the WAL) and one commit.
    pub journal_bytes: u64,
    pub journal_commit_bytes: u64,
    /// Fraction of transactions whose changes hit a data page that the
    /// checkpointer or the kworker is writing back: the backend's write of
    /// that page waits for the write under way (an I/O dependency).
    pub writeback_overwrite_fraction: f64,
    pub stop: Stop,
}

impl PgLikeConfig {
    /// The paper's set-up (§7.2, sim-parameters.md), scaled where noted in
    /// `docs/workloads.md`.
    pub fn tpcc_like(backends: u32) -> PgLikeConfig {
        PgLikeConfig {
            backends,
            cpu_us_mean: 12_000.0,
            wal_record_bytes: 4096,
            wal_write_bytes_max: 256 * 1024,
            wal_bytes: 256 << 20,
            wal_segment_bytes: 16 << 20,
            data_bytes: 1 << 30,
            checkpoint_wal_bytes: 64 << 20,
            checkpointer_outstanding: 16,
            kworker_outstanding: 8,
            dirty_pages_max: 131_072,
            mix: PgWriteMix::paper(),
            journal_bytes: 32 << 20,
            journal_commit_bytes: 16 * 1024,
            writeback_overwrite_fraction: 0.01,
            stop: Stop::default(),
        }
    }

    fn validate(&self) -> Result<(), WorkloadError> {
        if !(1..=PGLIKE_BACKENDS_MAX).contains(&self.backends) {
            return Err(invalid(
                "backends",
                format!("{} (must be 1..={PGLIKE_BACKENDS_MAX})", self.backends),
            ));
        }
        check_cpu_us(self.cpu_us_mean)?;
        check_sizes(
            &[
                ("wal_record_bytes", self.wal_record_bytes),
                ("wal_write_bytes_max", self.wal_write_bytes_max),
                ("wal_bytes", self.wal_bytes),
                ("wal_segment_bytes", self.wal_segment_bytes),
                ("data_bytes", self.data_bytes),
                ("checkpoint_wal_bytes", self.checkpoint_wal_bytes),
                ("journal_bytes", self.journal_bytes),
                ("journal_commit_bytes", self.journal_commit_bytes),
            ],
            &[
                ("wal_write_bytes_max", self.wal_write_bytes_max),
                ("wal_bytes", self.wal_bytes),
                ("data_bytes", self.data_bytes),
                ("journal_bytes", self.journal_bytes),
                ("journal_commit_bytes", self.journal_commit_bytes),
            ],
        )?;
        if self.wal_write_bytes_max > self.wal_bytes {
            return Err(invalid("wal_write_bytes_max", "exceeds wal_bytes"));
        }
        if self.journal_commit_bytes > self.journal_bytes {
            return Err(invalid("journal_commit_bytes", "exceeds journal_bytes"));
        }
        if self.checkpointer_outstanding == 0 || self.kworker_outstanding == 0 {
            return Err(invalid(
                "checkpointer_outstanding/kworker_outstanding",
                "must be at least 1",
            ));
        }
        if self.checkpointer_outstanding + self.kworker_outstanding > 4096 {
            return Err(invalid(
                "checkpointer_outstanding + kworker_outstanding",
                "above 4096",
            ));
        }
        let m = self.mix;
        for (name, v) in [
            ("mix.backends", m.backends),
            ("mix.checkpointer", m.checkpointer),
            ("mix.log_writer", m.log_writer),
            ("mix.jbd2", m.jbd2),
            ("mix.kworker", m.kworker),
        ] {
            if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
                return Err(invalid(name, format!("{v} (must be within [0, 1])")));
            }
        }
        if m.backends <= 0.0 {
            return Err(invalid(
                "mix.backends",
                "must be above 0 (it pays for the others)",
            ));
        }
        let sum = m.backends + m.checkpointer + m.log_writer + m.jbd2 + m.kworker;
        if (sum - 1.0).abs() > 0.01 {
            return Err(invalid("mix", format!("shares sum to {sum:.4}, not 1")));
        }
        if !(0.0..=1.0).contains(&self.writeback_overwrite_fraction) {
            return Err(invalid(
                "writeback_overwrite_fraction",
                format!(
                    "{} (must be within [0, 1])",
                    self.writeback_overwrite_fraction
                ),
            ));
        }
        Ok(())
    }
}

/// Where a backend is in its transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    /// CPU and buffer work until `ready_at`.
    Work,
    /// Writing out a dirty buffer (eviction) or a page under writeback.
    DataWrite { overwrite: bool },
    /// That write is done: commit next.
    Commit,
    /// Blocked on the WAL lock, or holding it (flushing).
    Lock,
    /// Holding the lock, waiting for the WAL filesystem's journal.
    Journal,
    /// Holding the lock, WAL write in flight up to this LSN.
    Wal { upto: u64 },
}

/// The log writer's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LogWriter {
    Idle,
    Lock,
    Journal,
    Wal { upto: u64 },
}

/// Counts of what happened (whole run).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PgLikeCounts {
    pub transactions: u64,
    pub wal_writes_backends: u64,
    pub wal_writes_log_writer: u64,
    /// Backends' writes of data pages: evictions, and overwrites of pages under writeback.
    pub evictions: u64,
    pub writeback_overwrites: u64,
    pub checkpoint_writes: u64,
    pub checkpoints: u64,
    pub kworker_writes: u64,
    pub journal_commits: u64,
    /// Waits of a lock holder for the journal (segment switches).
    pub journal_waits: u64,
    /// Waits for the WAL lock (any process).
    pub lock_waits: u64,
    /// The backends' waits: for the WAL lock, for the journal, for their
    /// WAL writes, for buffer evictions, for pages under writeback.
    pub wait_lock: WaitStat,
    pub wait_journal: WaitStat,
    pub wait_wal: WaitStat,
    pub wait_eviction: WaitStat,
    pub wait_overwrite: WaitStat,
}

pub struct PgLikeWorkload {
    config: PgLikeConfig,
    rng: SmallRng,
    b: usize,
    /// Process indices of the background roles.
    log_writer: usize,
    checkpointer: usize,
    kworker: usize,
    jbd2: usize,
    critical: Vec<u32>,
    ready_at: Vec<Option<Nanos>>,
    backends: Vec<Backend>,
    began: Vec<Nanos>,
    /// LSN each backend's commit must see flushed.
    lsn: Vec<u64>,
    /// When each backend's current wait began.
    wait_since: Vec<Nanos>,
    log_state: LogWriter,
    lock_waiters: std::collections::VecDeque<usize>,
    blocking: Blocking,
    journal: Journal,
    wal_inserted: u64,
    wal_flushed: u64,
    wal_since_checkpoint: u64,
    /// Credits (writes owed) of the background roles.
    credit_checkpointer: f64,
    credit_kworker: f64,
    credit_log_writer: f64,
    credit_jbd2: f64,
    burst_left: u64,
    /// Background data writes in flight: (request id, page), per slot.
    bg_in_flight: Vec<Option<(u64, u64)>>,
    /// Where the checkpointer's and the kworker's sweeps are.
    cp_cursor: u64,
    kw_cursor: u64,
    checkpointer_in_flight: u32,
    kworker_in_flight: u32,
    next_seq: u64,
    in_flight: u64,
    issued: u64,
    completed: u64,
    stopped: bool,
    counts: PgLikeCounts,
    writes: [u64; 5],
    meter: AppMeter,
}

const ROLES: [&str; 5] = ["backends", "checkpointer", "log_writer", "jbd2", "kworker"];

impl PgLikeWorkload {
    pub fn new(config: PgLikeConfig, seed: u64) -> Result<PgLikeWorkload, WorkloadError> {
        config.validate()?;
        let b = config.backends as usize;
        let processes = b + 4;
        let hinted: Vec<usize> = (0..b).collect();
        let slots = (config.checkpointer_outstanding + config.kworker_outstanding) as usize;
        let mut w = PgLikeWorkload {
            rng: SmallRng::seed_from_u64(seed),
            b,
            log_writer: b,
            checkpointer: b + 1,
            kworker: b + 2,
            jbd2: b + 3,
            critical: (1..=b as u32).collect(),
            ready_at: vec![None; processes],
            backends: vec![Backend::Work; b],
            began: vec![Nanos::ZERO; b],
            lsn: vec![0; b],
            wait_since: vec![Nanos::ZERO; b],
            log_state: LogWriter::Idle,
            lock_waiters: std::collections::VecDeque::with_capacity(processes),
            blocking: Blocking::new(processes, 1, &hinted),
            journal: Journal::new(
                b + 3,
                processes,
                WAL_VOLUME,
                config.wal_bytes,
                config.journal_bytes,
                config.journal_commit_bytes,
            ),
            wal_inserted: 0,
            wal_flushed: 0,
            wal_since_checkpoint: 0,
            credit_checkpointer: 0.0,
            credit_kworker: 0.0,
            credit_log_writer: 0.0,
            credit_jbd2: 0.0,
            burst_left: 0,
            bg_in_flight: vec![None; slots],
            cp_cursor: 0,
            kw_cursor: 0,
            checkpointer_in_flight: 0,
            kworker_in_flight: 0,
            next_seq: 0,
            in_flight: 0,
            issued: 0,
            completed: 0,
            stopped: false,
            counts: PgLikeCounts::default(),
            writes: [0; 5],
            meter: AppMeter::new("transactions"),
            config,
        };
        w.cp_cursor = w.random_data_page();
        w.kw_cursor = w.random_data_page();
        for p in 0..b {
            w.start_transaction(p, Nanos::ZERO);
        }
        Ok(w)
    }

    pub fn counts(&self) -> PgLikeCounts {
        self.counts
    }

    /// The process a request id belongs to.
    fn process_of(id: u64) -> usize {
        (id & ((1 << PROCESS_BITS) - 1)) as usize
    }

    fn request(
        &mut self,
        p: usize,
        volume: u32,
        offset_bytes: u64,
        len_bytes: u64,
        sync: bool,
    ) -> IoRequest {
        let id = (self.next_seq << PROCESS_BITS) | p as u64;
        self.next_seq += 1;
        self.in_flight += 1;
        self.issued += 1;
        let role = match p {
            _ if p < self.b => 0,
            _ if p == self.checkpointer => 1,
            _ if p == self.log_writer => 2,
            _ if p == self.jbd2 => 3,
            _ => 4,
        };
        self.writes[role] += 1;
        IoRequest {
            id,
            volume,
            kind: ReqKind::Write,
            offset_bytes,
            len_bytes,
            sync,
            issuer: p as u32 + 1,
        }
    }

    fn start_transaction(&mut self, p: usize, now: Nanos) {
        if self.stopped {
            self.ready_at[p] = None;
            return;
        }
        self.began[p] = now;
        self.backends[p] = Backend::Work;
        let think = exp_ns(&mut self.rng, self.config.cpu_us_mean * 1e3);
        self.ready_at[p] = Some(Nanos(now.0 + think));
    }

    fn owed_pages(&self) -> f64 {
        self.credit_checkpointer + self.credit_kworker + self.burst_left as f64
    }

    /// The next page of a background writer's sweep: dirty pages written
    /// back in address order (the kernel's writeback and its elevator), at
    /// the density of dirty pages in the buffer pool: gaps of 1 + an
    /// exponential draw with mean `data pages / dirty_pages_max - 1`.
    fn sweep_page(&mut self, checkpointer: bool) -> u64 {
        let pages = self.config.data_bytes / BLOCK_BYTES;
        let mean_gap = (pages as f64 / self.config.dirty_pages_max.max(1) as f64 - 1.0).max(0.0);
        let gap = 1 + exp_ns(&mut self.rng, mean_gap);
        let cursor = if checkpointer {
            &mut self.cp_cursor
        } else {
            &mut self.kw_cursor
        };
        *cursor = (*cursor + gap) % pages;
        *cursor
    }

    fn random_data_page(&mut self) -> u64 {
        self.rng.gen_range(0..self.config.data_bytes / BLOCK_BYTES)
    }

    /// A backend's work is done: write out a buffer first if it must, then commit.
    fn after_work(&mut self, p: usize, now: Nanos) -> Option<IoRequest> {
        if self.owed_pages() > self.config.dirty_pages_max as f64 {
            // The background writers are behind: clean one buffer ourselves.
            if self.credit_kworker >= 1.0 {
                self.credit_kworker -= 1.0;
            } else if self.credit_checkpointer >= 1.0 {
                self.credit_checkpointer -= 1.0;
            } else {
                self.burst_left = self.burst_left.saturating_sub(1);
            }
            self.counts.evictions += 1;
            self.backends[p] = Backend::DataWrite { overwrite: false };
            self.wait_since[p] = now;
            self.ready_at[p] = None;
            let page = self.random_data_page();
            return Some(self.request(p, DATA_VOLUME, page * BLOCK_BYTES, BLOCK_BYTES, true));
        }
        if self.config.writeback_overwrite_fraction > 0.0
            && self.rng.gen::<f64>() < self.config.writeback_overwrite_fraction
        {
            let busy = self.bg_in_flight.iter().filter(|s| s.is_some()).count();
            if busy > 0 {
                let k = self.rng.gen_range(0..busy);
                let page = self
                    .bg_in_flight
                    .iter()
                    .flatten()
                    .nth(k)
                    .map(|&(_, page)| page)
                    .expect("counted");
                self.counts.writeback_overwrites += 1;
                self.backends[p] = Backend::DataWrite { overwrite: true };
                self.wait_since[p] = now;
                self.ready_at[p] = None;
                return Some(self.request(p, DATA_VOLUME, page * BLOCK_BYTES, BLOCK_BYTES, true));
            }
        }
        self.commit(p, now)
    }

    /// Insert the commit record and take the WAL lock.
    fn commit(&mut self, p: usize, now: Nanos) -> Option<IoRequest> {
        self.pay_background(now);
        self.wal_inserted += self.config.wal_record_bytes;
        self.lsn[p] = self.wal_inserted;
        self.backends[p] = Backend::Lock;
        self.ready_at[p] = None;
        if self.blocking.acquire(p, WAL_LOCK) {
            self.holding_lock(p, now)
        } else {
            self.counts.lock_waits += 1;
            self.lock_waiters.push_back(p);
            self.wait_since[p] = now;
            None
        }
    }

    /// The next WAL write from the flushed point: (offset, length, upto LSN,
    /// whether it enters a new segment).
    fn wal_write(&self, at_least_one_page: bool) -> (u64, u64, u64, bool) {
        let c = &self.config;
        let start = self.wal_flushed / BLOCK_BYTES * BLOCK_BYTES;
        let ring_end = (start / c.wal_bytes + 1) * c.wal_bytes;
        let mut end = self.wal_inserted.div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
        if at_least_one_page {
            end = end.max(start + BLOCK_BYTES);
        }
        let end = end.min(ring_end).min(start + c.wal_write_bytes_max);
        let upto = self.wal_inserted.min(end).max(self.wal_flushed);
        let new_segment = start / c.wal_segment_bytes != (end - 1) / c.wal_segment_bytes
            || (start.is_multiple_of(c.wal_segment_bytes)
                && start > 0
                && self.wal_flushed == start);
        (start % c.wal_bytes, end - start, upto, new_segment)
    }

    /// A backend holds the WAL lock: done if its record is flushed, else flush.
    fn holding_lock(&mut self, p: usize, now: Nanos) -> Option<IoRequest> {
        if self.wal_flushed >= self.lsn[p] {
            self.release_lock(p, now);
            self.finish_transaction(p, now);
            return None;
        }
        let (_, _, _, new_segment) = self.wal_write(false);
        if new_segment && self.backends[p] != Backend::Journal {
            self.counts.journal_waits += 1;
            self.backends[p] = Backend::Journal;
            self.wait_since[p] = now;
            self.journal.wait(p, &mut self.blocking);
            self.wake_journal(now);
            return None;
        }
        let (offset, len, upto, _) = self.wal_write(false);
        self.backends[p] = Backend::Wal { upto };
        self.wait_since[p] = now;
        self.counts.wal_writes_backends += 1;
        Some(self.request(p, WAL_VOLUME, offset, len, true))
    }

    /// A transaction's commit pays the background roles' credits (the pages
    /// it dirtied, the log and journal work it causes), as if its commit
    /// were one backend write: Table 1's mix when commits are not grouped.
    fn pay_background(&mut self, now: Nanos) {
        let m = self.config.mix;
        self.credit_checkpointer += m.checkpointer / m.backends;
        self.credit_kworker += m.kworker / m.backends;
        self.credit_log_writer += m.log_writer / m.backends;
        self.credit_jbd2 += m.jbd2 / m.backends;
        if self.credit_log_writer >= 1.0 && self.log_state == LogWriter::Idle && !self.stopped {
            self.credit_log_writer -= 1.0;
            self.log_state = LogWriter::Lock;
            self.ready_at[self.log_writer] = Some(now);
        }
        if self.credit_jbd2 >= 1.0 {
            self.credit_jbd2 -= 1.0;
            self.journal.want();
            self.wake_journal(now);
        }
        self.wake_background(now);
    }

    fn wake_journal(&mut self, now: Nanos) {
        if self.journal.should_start() {
            self.ready_at[self.jbd2] = Some(now);
        }
    }

    fn wake_background(&mut self, now: Nanos) {
        if self.stopped {
            return;
        }
        if self.burst_left == 0
            && self.checkpointer_in_flight == 0
            && self.wal_since_checkpoint >= self.config.checkpoint_wal_bytes
        {
            self.wal_since_checkpoint = 0;
            self.burst_left = self.credit_checkpointer.floor() as u64;
            self.credit_checkpointer -= self.burst_left as f64;
            self.counts.checkpoints += 1;
        }
        if self.burst_left > 0 && self.checkpointer_in_flight < self.config.checkpointer_outstanding
        {
            self.ready_at[self.checkpointer] = Some(now);
        }
        if self.credit_kworker >= 1.0 && self.kworker_in_flight < self.config.kworker_outstanding {
            self.ready_at[self.kworker] = Some(now);
        }
    }

    /// Hand the WAL lock to the next waiter, if any.
    fn release_lock(&mut self, p: usize, now: Nanos) {
        self.blocking.release(p, WAL_LOCK);
        if let Some(q) = self.lock_waiters.pop_front() {
            self.blocking.grant(q, WAL_LOCK);
            self.ready_at[q] = Some(now);
            if q < self.b {
                self.counts.wait_lock.add(now.0 - self.wait_since[q].0);
            }
        }
    }

    fn finish_transaction(&mut self, p: usize, now: Nanos) {
        self.counts.transactions += 1;
        self.meter.completed(self.began[p], now);
        self.start_transaction(p, now);
    }

    /// The log writer holds the lock: flush what is inserted (at least the
    /// current page), after a journal commit if it enters a new segment.
    fn log_writer_flush(&mut self, now: Nanos) -> Option<IoRequest> {
        let p = self.log_writer;
        let (offset, len, upto, new_segment) = self.wal_write(true);
        if new_segment && self.log_state != LogWriter::Journal {
            self.counts.journal_waits += 1;
            self.log_state = LogWriter::Journal;
            self.journal.wait(p, &mut self.blocking);
            self.wake_journal(now);
            return None;
        }
        self.log_state = LogWriter::Wal { upto };
        self.counts.wal_writes_log_writer += 1;
        Some(self.request(p, WAL_VOLUME, offset, len, true))
    }

    fn bg_slot_free(&self) -> usize {
        self.bg_in_flight
            .iter()
            .position(|s| s.is_none())
            .expect("a free slot: in flight is bounded by the slots")
    }

    /// Take one step of process `p`, due now; a request if it issues one.
    fn step(&mut self, p: usize, now: Nanos) -> Option<IoRequest> {
        self.ready_at[p] = None;
        if p < self.b {
            return match self.backends[p] {
                Backend::Work => {
                    if self.config.stop.reached(now, self.issued) {
                        self.stopped = true;
                        return None;
                    }
                    self.after_work(p, now)
                }
                Backend::Commit => self.commit(p, now),
                // Granted the lock, or the journal committed.
                Backend::Lock => self.holding_lock(p, now),
                Backend::Journal => {
                    self.counts.wait_journal.add(now.0 - self.wait_since[p].0);
                    self.holding_lock(p, now)
                }
                other => unreachable!("backend {p} stepped while {other:?}"),
            };
        }
        if p == self.log_writer {
            return match self.log_state {
                LogWriter::Lock => {
                    if self.blocking.holder(WAL_LOCK) == Some(p) {
                        return self.log_writer_flush(now);
                    }
                    if self.blocking.acquire(p, WAL_LOCK) {
                        self.log_writer_flush(now)
                    } else {
                        self.counts.lock_waits += 1;
                        self.lock_waiters.push_back(p);
                        None
                    }
                }
                LogWriter::Journal => self.log_writer_flush(now),
                other => unreachable!("log writer stepped while {other:?}"),
            };
        }
        if p == self.jbd2 {
            if !self.journal.should_start() {
                return None;
            }
            let id = (self.next_seq << PROCESS_BITS) | p as u64;
            let (offset, len) = self.journal.start(id);
            self.counts.journal_commits += 1;
            let r = self.request(p, self.journal.volume, offset, len, true);
            debug_assert_eq!(r.id, id);
            return Some(r);
        }
        let checkpointer = p == self.checkpointer;
        let slot = self.bg_slot_free();
        let page = self.sweep_page(checkpointer);
        if checkpointer {
            debug_assert!(self.burst_left > 0);
            self.burst_left -= 1;
            self.checkpointer_in_flight += 1;
            self.counts.checkpoint_writes += 1;
        } else {
            self.credit_kworker -= 1.0;
            self.kworker_in_flight += 1;
            self.counts.kworker_writes += 1;
        }
        // The checkpointer's writes are sync (it fsyncs each file), the kworker's async.
        let r = self.request(
            p,
            DATA_VOLUME,
            page * BLOCK_BYTES,
            BLOCK_BYTES,
            checkpointer,
        );
        self.bg_in_flight[slot] = Some((r.id, page));
        self.wake_background(now);
        Some(r)
    }

    fn completed(&mut self, p: usize, id: u64, now: Nanos) {
        if p < self.b {
            match self.backends[p] {
                Backend::DataWrite { overwrite } => {
                    let waited = now.0 - self.wait_since[p].0;
                    if overwrite {
                        self.counts.wait_overwrite.add(waited);
                    } else {
                        self.counts.wait_eviction.add(waited);
                    }
                    // Commit at the next poll (a completion issues nothing).
                    self.backends[p] = Backend::Commit;
                    self.ready_at[p] = Some(now);
                }
                Backend::Wal { upto } => {
                    self.counts.wait_wal.add(now.0 - self.wait_since[p].0);
                    self.wal_flushed = self.wal_flushed.max(upto);
                    self.backends[p] = Backend::Lock;
                    // Flushed far enough? Else flush on (the ring end cut it).
                    self.ready_at[p] = Some(now);
                }
                other => unreachable!("backend {p} completed while {other:?}"),
            }
            return;
        }
        if p == self.log_writer {
            let LogWriter::Wal { upto } = self.log_state else {
                unreachable!("log writer completed while {:?}", self.log_state);
            };
            self.wal_flushed = self.wal_flushed.max(upto);
            self.log_state = LogWriter::Idle;
            self.release_lock(p, now);
            if self.credit_log_writer >= 1.0 && !self.stopped {
                self.credit_log_writer -= 1.0;
                self.log_state = LogWriter::Lock;
                self.ready_at[p] = Some(now);
            }
            return;
        }
        if p == self.jbd2 {
            debug_assert_eq!(self.journal.committing, Some(id));
            let ready = &mut self.ready_at;
            self.journal
                .done(&mut self.blocking, |q| ready[q] = Some(now));
            self.wake_journal(now);
            return;
        }
        let slot = self
            .bg_in_flight
            .iter()
            .position(|s| s.is_some_and(|(i, _)| i == id))
            .expect("a background write in flight");
        self.bg_in_flight[slot] = None;
        if p == self.checkpointer {
            self.checkpointer_in_flight -= 1;
        } else {
            self.kworker_in_flight -= 1;
        }
        self.wake_background(now);
    }
}

impl Workload for PgLikeWorkload {
    fn next_arrival(&self) -> Option<Nanos> {
        self.ready_at.iter().flatten().min().copied()
    }

    fn poll(&mut self, now: Nanos) -> Option<IoRequest> {
        loop {
            let (p, _) = self
                .ready_at
                .iter()
                .enumerate()
                .filter_map(|(p, t)| t.filter(|&t| t <= now).map(|t| (p, t)))
                .min_by_key(|&(p, t)| (t, p))?;
            if let Some(r) = self.step(p, now) {
                return Some(r);
            }
        }
    }

    fn complete(&mut self, now: Nanos, id: u64) {
        debug_assert!(self.in_flight > 0);
        self.in_flight -= 1;
        self.completed += 1;
        let p = Self::process_of(id);
        if p < self.b {
            if let Backend::Wal { upto } = self.backends[p] {
                self.wal_since_checkpoint += upto.saturating_sub(self.wal_flushed);
            }
        } else if p == self.log_writer {
            if let LogWriter::Wal { upto } = self.log_state {
                self.wal_since_checkpoint += upto.saturating_sub(self.wal_flushed);
            }
        }
        self.completed(p, id, now);
    }

    fn volume_sizes_bytes(&self) -> Vec<u64> {
        vec![
            self.config.data_bytes,
            self.config.wal_bytes + self.config.journal_bytes,
        ]
    }

    fn name(&self) -> String {
        format!(
            "pglike({} backends, cpu {} us, {} B WAL per commit, data {} MiB, checkpoint every {} MiB of WAL)",
            self.config.backends,
            self.config.cpu_us_mean,
            self.config.wal_record_bytes,
            self.config.data_bytes >> 20,
            self.config.checkpoint_wal_bytes >> 20
        )
    }

    app_workload_methods!();

    fn app_report(&self) -> Option<AppReport> {
        let roles = ROLES.iter().copied().zip(self.writes).collect();
        let c = &self.counts;
        let waits = vec![
            ("WAL lock", c.wait_lock),
            ("journal commit", c.wait_journal),
            ("WAL write", c.wait_wal),
            ("buffer eviction", c.wait_eviction),
            ("page under writeback", c.wait_overwrite),
        ];
        Some(self.meter.report(&self.blocking.hints, roles, waits))
    }
}
