//! A Redis-like key-value store under a YCSB-A-like load, at the block
//! layer: one main process (critical) serves the clients' commands in turn,
//! appends each update to its log (AOF) and fsyncs it, which waits for a
//! journal commit (jbd2); a snapshotting child and a log-rewriting child
//! write big sequential files through the kernel's writeback (kworker), and
//! the main process waits for the rewriting child at the end of a rewrite
//! (Kim et al., ATC'15 §6, §7.3). Parameters and their sources are in
//! `docs/workloads.md`. Deterministic from the seed; no allocation after
//! `new`; never looks at the cache.

use std::collections::VecDeque;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use wcache_core::time::Nanos;

use super::app::{
    app_workload_methods, check_cpu_us, check_sizes, exp_ns, invalid, AppMeter, Blocker, Blocking,
    Journal, WaitStat,
};
use super::{
    AppReport, CriticalityHint, IoRequest, ReqKind, Stop, Workload, WorkloadError, WorkloadStats,
    BLOCK_BYTES,
};

const MAIN: usize = 0;
const SNAPSHOT_CHILD: usize = 1;
const REWRITE_CHILD: usize = 2;
const JBD2: usize = 3;
const KWORKER: usize = 4;
const PROCESSES: usize = 5;
const PROCESS_BITS: u32 = 3;
const ROLES: [&str; 5] = ["main", "snapshot", "rewrite", "jbd2", "kworker"];

#[derive(Clone, Debug, PartialEq)]
pub struct RedisLikeConfig {
    /// Clients, each with one command outstanding (zero think time).
    pub clients: u32,
    /// Fraction of commands that update a record (YCSB-A: 0.5); the others
    /// read and are served from memory.
    pub update_fraction: f64,
    /// The main process's work per command (exponential, mean), microseconds.
    pub cpu_us_mean: f64,
    /// AOF bytes one update appends.
    pub aof_record_bytes: u64,
    /// The data set: a snapshot's size and a rewritten log's size.
    pub dataset_bytes: u64,
    /// A snapshot starts this often (virtual time), unless a child runs.
    pub snapshot_interval_ns: u64,
    /// A rewrite starts when the log has grown this much since the last one.
    pub aof_rewrite_growth_bytes: u64,
    /// Children's writes: size and how many the writeback has in flight.
    pub child_write_bytes: u64,
    pub child_outstanding: u32,
    /// The filesystem journal: region size, one commit, and the periodic
    /// commit interval (virtual time).
    pub journal_bytes: u64,
    pub journal_commit_bytes: u64,
    pub journal_interval_ns: u64,
    pub stop: Stop,
}

impl RedisLikeConfig {
    /// The paper's Redis set-up (§7.3), scaled as `docs/workloads.md` says.
    pub fn ycsb_a(clients: u32) -> RedisLikeConfig {
        RedisLikeConfig {
            clients,
            update_fraction: 0.5,
            cpu_us_mean: 20.0,
            aof_record_bytes: 1024 + 64,
            dataset_bytes: 128 << 20,
            snapshot_interval_ns: 60_000_000_000,
            aof_rewrite_growth_bytes: 64 << 20,
            child_write_bytes: 256 * 1024,
            child_outstanding: 4,
            journal_bytes: 32 << 20,
            journal_commit_bytes: 8 * 1024,
            journal_interval_ns: 5_000_000_000,
            stop: Stop::default(),
        }
    }

    fn validate(&self) -> Result<(), WorkloadError> {
        if !(1..=4096).contains(&self.clients) {
            return Err(invalid(
                "clients",
                format!("{} (must be 1..=4096)", self.clients),
            ));
        }
        if !(0.0..=1.0).contains(&self.update_fraction) {
            return Err(invalid(
                "update_fraction",
                format!("{} (must be within [0, 1])", self.update_fraction),
            ));
        }
        check_cpu_us(self.cpu_us_mean)?;
        check_sizes(
            &[
                ("aof_record_bytes", self.aof_record_bytes),
                ("dataset_bytes", self.dataset_bytes),
                ("snapshot_interval_ns", self.snapshot_interval_ns),
                ("aof_rewrite_growth_bytes", self.aof_rewrite_growth_bytes),
                ("child_write_bytes", self.child_write_bytes),
                ("journal_bytes", self.journal_bytes),
                ("journal_commit_bytes", self.journal_commit_bytes),
                ("journal_interval_ns", self.journal_interval_ns),
            ],
            &[
                ("dataset_bytes", self.dataset_bytes),
                ("aof_rewrite_growth_bytes", self.aof_rewrite_growth_bytes),
                ("child_write_bytes", self.child_write_bytes),
                ("journal_bytes", self.journal_bytes),
                ("journal_commit_bytes", self.journal_commit_bytes),
            ],
        )?;
        if self.journal_commit_bytes > self.journal_bytes {
            return Err(invalid("journal_commit_bytes", "exceeds journal_bytes"));
        }
        if self.aof_record_bytes > self.aof_rewrite_growth_bytes {
            return Err(invalid(
                "aof_record_bytes",
                "exceeds aof_rewrite_growth_bytes",
            ));
        }
        if !(1..=1024).contains(&self.child_outstanding) {
            return Err(invalid(
                "child_outstanding",
                format!("{} (must be 1..=1024)", self.child_outstanding),
            ));
        }
        Ok(())
    }

    /// One AOF region: a rewritten log plus the growth before the next
    /// rewrite, twice over (the next rewrite may be late).
    fn aof_region_bytes(&self) -> u64 {
        (self.dataset_bytes + 2 * self.aof_rewrite_growth_bytes).div_ceil(BLOCK_BYTES) * BLOCK_BYTES
    }
}

/// Where the main process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Main {
    /// No command queued.
    Idle,
    /// Working on a command until `ready_at`.
    Cpu { update: bool },
    /// The AOF write of an update is in flight.
    Aof,
    /// fsync: waiting for the journal commit.
    Journal,
    /// Waiting for the rewriting child's last write.
    RewriteEnd,
}

/// A child's job: a file written front to back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Job {
    child: usize,
    base_bytes: u64,
    len_bytes: u64,
    /// Bytes handed to writeback so far (all but the final chunk go async).
    issued_bytes: u64,
    in_flight: u32,
    /// The child's own last write (its fsync), once issued.
    final_issued: bool,
}

/// Counts of what happened (whole run).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedisLikeCounts {
    pub commands: u64,
    pub updates: u64,
    pub snapshots: u64,
    pub rewrites: u64,
    pub journal_commits: u64,
    /// Times the main process waited for the rewriting child.
    pub rewrite_waits: u64,
    /// The main process's waits (the paper's Table 2 for this app): for its
    /// log writes, for journal commits, for the rewriting child.
    pub wait_aof: WaitStat,
    pub wait_journal: WaitStat,
    pub wait_rewrite: WaitStat,
}

pub struct RedisLikeWorkload {
    config: RedisLikeConfig,
    rng: SmallRng,
    critical: [u32; 1],
    ready_at: [Option<Nanos>; PROCESSES],
    main: Main,
    /// Arrival times of queued commands, oldest first.
    queue: VecDeque<Nanos>,
    current_arrival: Nanos,
    /// When the main process's current wait began.
    wait_since: Nanos,
    blocking: Blocking,
    journal: Journal,
    /// Which AOF region is current (0 or 1), its length, and its length
    /// after the last rewrite.
    aof_region: u64,
    aof_len: u64,
    aof_base_len: u64,
    job: Option<Job>,
    snapshot_due: Nanos,
    journal_due: Nanos,
    next_seq: u64,
    in_flight: u64,
    issued: u64,
    completed: u64,
    stopped: bool,
    counts: RedisLikeCounts,
    writes: [u64; PROCESSES],
    meter: AppMeter,
}

impl RedisLikeWorkload {
    pub fn new(config: RedisLikeConfig, seed: u64) -> Result<RedisLikeWorkload, WorkloadError> {
        config.validate()?;
        let region = config.aof_region_bytes();
        let journal_base = 2 * region + config.dataset_bytes;
        let mut queue = VecDeque::with_capacity(config.clients as usize);
        queue.extend((0..config.clients).map(|_| Nanos::ZERO));
        let mut w = RedisLikeWorkload {
            rng: SmallRng::seed_from_u64(seed),
            critical: [MAIN as u32 + 1],
            ready_at: [None; PROCESSES],
            main: Main::Idle,
            queue,
            current_arrival: Nanos::ZERO,
            wait_since: Nanos::ZERO,
            blocking: Blocking::new(PROCESSES, 0, &[MAIN]),
            journal: Journal::new(
                JBD2,
                PROCESSES,
                0,
                journal_base,
                config.journal_bytes,
                config.journal_commit_bytes,
            ),
            aof_region: 0,
            aof_len: config.dataset_bytes,
            aof_base_len: config.dataset_bytes,
            job: None,
            snapshot_due: Nanos(config.snapshot_interval_ns),
            journal_due: Nanos(config.journal_interval_ns),
            next_seq: 0,
            in_flight: 0,
            issued: 0,
            completed: 0,
            stopped: false,
            counts: RedisLikeCounts::default(),
            writes: [0; PROCESSES],
            meter: AppMeter::new("commands"),
            config,
        };
        w.next_command(Nanos::ZERO);
        Ok(w)
    }

    pub fn counts(&self) -> RedisLikeCounts {
        self.counts
    }

    fn request(&mut self, p: usize, offset_bytes: u64, len_bytes: u64, sync: bool) -> IoRequest {
        let id = (self.next_seq << PROCESS_BITS) | p as u64;
        self.next_seq += 1;
        self.in_flight += 1;
        self.issued += 1;
        self.writes[p] += 1;
        IoRequest {
            id,
            volume: 0,
            kind: ReqKind::Write,
            offset_bytes,
            len_bytes,
            sync,
            issuer: p as u32 + 1,
        }
    }

    /// The main process takes the next queued command (or waits for the
    /// rewriting child first, when a rewrite is at its end).
    fn next_command(&mut self, now: Nanos) {
        self.ready_at[MAIN] = None;
        if self.stopped || self.config.stop.reached(now, self.issued) {
            self.stopped = true;
            self.main = Main::Idle;
            return;
        }
        if let Some(job) = self.job {
            if job.child == REWRITE_CHILD
                && job.in_flight == 0
                && job.issued_bytes + self.config.child_write_bytes >= job.len_bytes
                && !job.final_issued
            {
                self.counts.rewrite_waits += 1;
                self.main = Main::RewriteEnd;
                self.wait_since = now;
                self.blocking.block(MAIN, Blocker::Event(REWRITE_CHILD));
                self.ready_at[REWRITE_CHILD] = Some(now);
                return;
            }
        }
        let Some(arrival) = self.queue.pop_front() else {
            self.main = Main::Idle;
            return;
        };
        self.current_arrival = arrival;
        let update = self.rng.gen::<f64>() < self.config.update_fraction;
        self.main = Main::Cpu { update };
        let cpu = exp_ns(&mut self.rng, self.config.cpu_us_mean * 1e3);
        self.ready_at[MAIN] = Some(Nanos(now.0 + cpu));
    }

    fn reply(&mut self, now: Nanos) {
        self.counts.commands += 1;
        self.meter.completed(self.current_arrival, now);
        // The client sends its next command at once.
        debug_assert!(self.queue.len() < self.queue.capacity());
        self.queue.push_back(now);
        self.next_command(now);
    }

    fn aof_write(&mut self) -> IoRequest {
        let region = self.config.aof_region_bytes();
        let rec = self.config.aof_record_bytes;
        let mut start = self.aof_len / BLOCK_BYTES * BLOCK_BYTES;
        if (self.aof_len + rec).div_ceil(BLOCK_BYTES) * BLOCK_BYTES > region {
            // The rewrite is late: the log goes round its region.
            self.aof_len = 0;
            start = 0;
        }
        let end = (self.aof_len + rec).div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
        self.aof_len += rec;
        self.counts.updates += 1;
        let base = self.aof_region * region;
        self.request(MAIN, base + start, end - start, true)
    }

    fn maybe_start_jobs(&mut self, now: Nanos) {
        if self.job.is_some() || self.stopped {
            return;
        }
        let region = self.config.aof_region_bytes();
        if self.aof_len.saturating_sub(self.aof_base_len) >= self.config.aof_rewrite_growth_bytes {
            self.counts.rewrites += 1;
            self.job = Some(Job {
                child: REWRITE_CHILD,
                base_bytes: (1 - self.aof_region) * region,
                len_bytes: self.config.dataset_bytes,
                issued_bytes: 0,
                in_flight: 0,
                final_issued: false,
            });
        } else if now >= self.snapshot_due {
            self.counts.snapshots += 1;
            self.snapshot_due = Nanos(now.0 + self.config.snapshot_interval_ns);
            self.job = Some(Job {
                child: SNAPSHOT_CHILD,
                base_bytes: 2 * region,
                len_bytes: self.config.dataset_bytes,
                issued_bytes: 0,
                in_flight: 0,
                final_issued: false,
            });
        } else {
            return;
        }
        self.ready_at[KWORKER] = Some(now);
    }

    /// Writeback of a child's file: all but the last chunk, async.
    fn kworker_step(&mut self, now: Nanos) -> Option<IoRequest> {
        let chunk = self.config.child_write_bytes;
        let mut job = self.job?;
        let last_start = job.len_bytes - chunk;
        if job.issued_bytes >= last_start || job.in_flight >= self.config.child_outstanding {
            return None;
        }
        let offset = job.base_bytes + job.issued_bytes;
        job.issued_bytes += chunk;
        job.in_flight += 1;
        self.job = Some(job);
        if job.issued_bytes < last_start && job.in_flight < self.config.child_outstanding {
            self.ready_at[KWORKER] = Some(now);
        }
        Some(self.request(KWORKER, offset, chunk, false))
    }

    /// The child's fsync: its last chunk, sync.
    fn child_final(&mut self, p: usize) -> Option<IoRequest> {
        let mut job = self.job?;
        debug_assert_eq!(job.child, p);
        let chunk = self.config.child_write_bytes;
        job.final_issued = true;
        job.in_flight += 1;
        self.job = Some(job);
        Some(self.request(p, job.base_bytes + job.len_bytes - chunk, chunk, true))
    }

    fn step(&mut self, p: usize, now: Nanos) -> Option<IoRequest> {
        self.ready_at[p] = None;
        match p {
            MAIN => match self.main {
                Main::Cpu { update: true } => {
                    self.main = Main::Aof;
                    self.wait_since = now;
                    Some(self.aof_write())
                }
                Main::Cpu { update: false } => {
                    self.reply(now);
                    None
                }
                Main::Journal => {
                    self.counts.wait_journal.add(now.0 - self.wait_since.0);
                    self.reply(now);
                    None
                }
                Main::RewriteEnd => {
                    self.next_command(now);
                    None
                }
                other => unreachable!("main stepped while {other:?}"),
            },
            KWORKER => self.kworker_step(now),
            SNAPSHOT_CHILD | REWRITE_CHILD => self.child_final(p),
            JBD2 => {
                if !self.journal.should_start() {
                    return None;
                }
                let id = (self.next_seq << PROCESS_BITS) | JBD2 as u64;
                let (offset, len) = self.journal.start(id);
                self.counts.journal_commits += 1;
                Some(self.request(JBD2, offset, len, true))
            }
            _ => unreachable!("no process {p}"),
        }
    }

    fn child_done(&mut self, p: usize, now: Nanos) {
        let Some(mut job) = self.job else {
            unreachable!("a child write without a job");
        };
        job.in_flight -= 1;
        let last_start = job.len_bytes - self.config.child_write_bytes;
        if p == KWORKER {
            self.job = Some(job);
            if job.issued_bytes < last_start {
                self.ready_at[KWORKER] = Some(now);
            } else if job.in_flight == 0 && job.child == SNAPSHOT_CHILD {
                // The snapshot child fsyncs on its own.
                self.ready_at[SNAPSHOT_CHILD] = Some(now);
            }
            // The rewriting child's end waits for the main process (next_command).
            return;
        }
        debug_assert!(job.final_issued && job.in_flight == 0);
        self.job = None;
        if p == REWRITE_CHILD {
            // The main process switches to the rewritten log.
            debug_assert_eq!(self.main, Main::RewriteEnd);
            self.counts.wait_rewrite.add(now.0 - self.wait_since.0);
            self.blocking.unblock(MAIN);
            self.aof_region = 1 - self.aof_region;
            self.aof_len = self.config.dataset_bytes;
            self.aof_base_len = self.aof_len;
            self.ready_at[MAIN] = Some(now);
        }
        self.maybe_start_jobs(now);
    }
}

impl Workload for RedisLikeWorkload {
    fn next_arrival(&self) -> Option<Nanos> {
        let mut t = self.ready_at.iter().flatten().min().copied();
        if !self.stopped {
            for due in [self.journal_due, self.snapshot_due] {
                t = Some(t.map_or(due, |t| t.min(due)));
            }
        }
        t
    }

    fn poll(&mut self, now: Nanos) -> Option<IoRequest> {
        if !self.stopped {
            if now >= self.journal_due {
                self.journal_due = Nanos(now.0 + self.config.journal_interval_ns);
                self.journal.want();
                if self.journal.should_start() {
                    self.ready_at[JBD2] = Some(now);
                }
            }
            if now >= self.snapshot_due {
                self.maybe_start_jobs(now);
                if now >= self.snapshot_due {
                    // A child is running: try again at the next interval.
                    self.snapshot_due = Nanos(now.0 + self.config.snapshot_interval_ns);
                }
            }
        }
        loop {
            let p = (0..PROCESSES)
                .filter(|&p| self.ready_at[p].is_some_and(|t| t <= now))
                .min_by_key(|&p| (self.ready_at[p], p))?;
            if let Some(r) = self.step(p, now) {
                return Some(r);
            }
        }
    }

    fn complete(&mut self, now: Nanos, id: u64) {
        debug_assert!(self.in_flight > 0);
        self.in_flight -= 1;
        self.completed += 1;
        let p = (id & ((1 << PROCESS_BITS) - 1)) as usize;
        match p {
            MAIN => {
                debug_assert_eq!(self.main, Main::Aof);
                // fdatasync of a grown file: a journal commit.
                self.counts.wait_aof.add(now.0 - self.wait_since.0);
                self.main = Main::Journal;
                self.wait_since = now;
                self.journal.wait(MAIN, &mut self.blocking);
                if self.journal.should_start() {
                    self.ready_at[JBD2] = Some(now);
                }
                self.maybe_start_jobs(now);
            }
            JBD2 => {
                let ready = &mut self.ready_at;
                self.journal
                    .done(&mut self.blocking, |q| ready[q] = Some(now));
                if self.journal.should_start() {
                    self.ready_at[JBD2] = Some(now);
                }
            }
            _ => self.child_done(p, now),
        }
    }

    fn volume_sizes_bytes(&self) -> Vec<u64> {
        vec![
            2 * self.config.aof_region_bytes()
                + self.config.dataset_bytes
                + self.config.journal_bytes,
        ]
    }

    fn name(&self) -> String {
        format!(
            "redislike({} clients, {} updates, cpu {} us, data set {} MiB)",
            self.config.clients,
            self.config.update_fraction,
            self.config.cpu_us_mean,
            self.config.dataset_bytes >> 20
        )
    }

    app_workload_methods!();

    fn app_report(&self) -> Option<AppReport> {
        let roles = ROLES.iter().copied().zip(self.writes).collect();
        let c = &self.counts;
        let waits = vec![
            ("log write", c.wait_aof),
            ("journal commit", c.wait_journal),
            ("rewriting child", c.wait_rewrite),
        ];
        Some(self.meter.report(&self.blocking.hints, roles, waits))
    }
}
