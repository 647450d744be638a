//! One simulation: the real engine, a workload, a cache device model and a
//! backing device model, driven in virtual time by a discrete-event loop.
//! Deterministic: the same inputs give the same report, bit for bit.

use crate::checker::{DataModel, IntegrityError, SECTOR_BYTES};
use crate::faults::{FaultCounts, FaultPlan, Faults, OpClass, OpFate};
use crate::latency::{ClassLatency, WriteClasses};
use crate::order_check::OrderError;
use crate::workload::{
    AppReport, CriticalityHint, IoRequest, ReqKind, Workload, WorkloadError, WorkloadStats,
};
use rustc_hash::FxHashMap as HashMap;
use thiserror::Error;
use wcache_core::config::CheckpointMode;
use wcache_core::reference::{accesses, Access, Partial, Target};
use wcache_core::time::Nanos;
use wcache_core::types::{IoId, RequestId, VolumeId};
use wcache_core::*;
use wcache_models::{DevCompletion, DevOp, DevOpKind, DeviceModel, DeviceStats};

#[derive(Debug, Error)]
pub enum SimError {
    #[error("engine configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("engine: {0}")]
    Engine(#[from] EngineError),
    #[error("workload: {0}")]
    Workload(#[from] WorkloadError),
    #[error("volumes need {need_bytes} bytes but the backing device {device} has {have_bytes}")]
    BackingTooSmall {
        device: String,
        need_bytes: u64,
        have_bytes: u64,
    },
    #[error(
        "cache of {need_bytes} bytes does not fit the cache device {device} ({have_bytes} bytes)"
    )]
    CacheDeviceTooSmall {
        device: String,
        need_bytes: u64,
        have_bytes: u64,
    },
    #[error("data integrity violated: {0}")]
    Integrity(#[from] IntegrityError),
    #[error("{0}")]
    Order(#[from] OrderError),
    #[error("simulation stuck at {now}: the engine has work in flight but nothing can happen")]
    Stuck { now: Nanos },
    #[error("consistency points: {0}")]
    Points(String),
    #[error("a crash needs a persistent engine configuration (persistent = true)")]
    CrashNeedsPersistent,
    #[error("recovery after the crash: {0}")]
    Recovery(#[from] RecoveryError),
    /// The workload asked for something the engine refuses (a bug in the
    /// workload's model, e.g. ending an inheritance it never began).
    #[error("workload criticality hint {hint:?}: {source}")]
    Hint {
        hint: CriticalityHint,
        source: CriticalityError,
    },
}

/// How long to run and what to measure.
#[derive(Clone, Copy, Debug)]
pub struct RunLimits {
    /// Requests completed before measuring starts (cache fill and settling)...
    pub warmup_requests: u64,
    /// ...and virtual time that must have passed (both must be reached).
    pub warmup_ns: u64,
    /// Measuring stops after this many requests...
    pub measure_requests: u64,
    /// ...or this much virtual time, whichever comes first.
    pub measure_ns: u64,
    /// Stop at this virtual time in any case.
    pub time_limit: Nanos,
    /// Check every read against the data model, and the backing after a final drain.
    pub check_data: bool,
    /// Sample the cache's state every this many virtual nanoseconds into
    /// `SimReport::timeline` (0: no timeline).
    pub timeline_ns: u64,
}

/// The cache's state at one moment of a run (counters are totals since the start).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimelineSample {
    pub t_ns: u64,
    /// Inside the measured window (after the warm-up).
    pub measuring: bool,
    pub dirty_pages: u64,
    pub dirty_groups: u64,
    pub destages_in_flight: u32,
    pub requests_in_flight: u32,
    pub stalls: u64,
    pub destages: u64,
    pub destaged_pages: u64,
    /// The adaptive rate's current thresholds, in pages.
    pub low_pages: u64,
    pub high_pages: u64,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            warmup_requests: 0,
            warmup_ns: 0,
            measure_requests: u64::MAX,
            measure_ns: u64::MAX,
            time_limit: Nanos::MAX,
            check_data: false,
            timeline_ns: 0,
        }
    }
}

/// What one run measured (over the measured window unless said otherwise).
#[derive(Clone, Debug)]
pub struct SimReport {
    pub requests: u64,
    pub window_ns: u64,
    pub warmup_ns: u64,
    pub iops: f64,
    pub response_ms_mean: f64,
    pub read_response_ms_mean: f64,
    pub write_response_ms_mean: f64,
    pub stats: Stats,
    pub backing: DeviceStats,
    /// The backing's physical members summed (a single device: itself).
    pub backing_members: DeviceStats,
    pub workload: WorkloadStats,
    /// Requests the engine refused (larger than the cache, past the end of
    /// their volume), and why the first one was refused.
    pub rejected_requests: u64,
    pub first_rejection: Option<String>,
    /// Sectors whose read result was checked (0 when not checking).
    pub sectors_checked: u64,
    /// Mean dirty pages over the window, sampled at completions.
    pub occupancy_pages_mean: f64,
    /// Staleness: the largest age of the oldest dirty page over the window,
    /// sampled at completions (`Engine::dirty_age_ns`: one age period coarse).
    pub dirty_age_ms_max: f64,
    pub thresholds_pages: (u64, u64),
    /// Samples every `RunLimits::timeline_ns` over the whole run, warm-up included.
    pub timeline: Vec<TimelineSample>,
    /// Faults injected over the whole run (all zero without a fault plan).
    pub faults: FaultCounts,
    /// Sectors checked on the backing after the final drain.
    pub backing_sectors_checked: u64,
    /// Crashes whose backing passed the point-in-time check (`--faults pit`,
    /// always under write-back-ordered).
    pub order_checks: u64,
    /// Writes a request waits on (sync writes of critical issuers) and the
    /// other writes, apart (`latency`).
    pub critical_writes: ClassLatency,
    pub other_writes: ClassLatency,
    /// An application workload's own measures (transactions or commands).
    pub app: Option<AppReport>,
}

#[derive(Clone, Copy)]
struct Pending {
    /// Device operations of the current phase not yet done.
    remaining: u32,
    /// The second access (the write after a read), still to come.
    next: Option<Access>,
    /// The current phase's access writes.
    writing: bool,
    /// A device operation of the command failed.
    failed: bool,
}

pub struct Simulation {
    engine: Engine,
    config: EngineConfig,
    volume_sizes_bytes: Vec<u64>,
    faults: Option<Faults>,
    /// Crash when the k-th device write (cache or backing) is submitted
    /// (and at 2k, 3k, ... as the plan's `crashes` says).
    crash_at: Option<u64>,
    device_writes: u64,
    crash_pending: bool,
    /// The final drain has started (a recovered engine drains too).
    draining: bool,
    /// Completions held back by latency spikes.
    delayed: Vec<DevCompletion>,
    cache: Box<dyn DeviceModel>,
    backing: Box<dyn DeviceModel>,
    workload: Box<dyn Workload>,
    page_bytes: u64,
    volume_base_bytes: Vec<u64>,
    /// Where each volume's backing journal starts on the backing device.
    journal_base_bytes: Vec<u64>,
    /// Declare a consistency point every this many answered writes (0: never).
    point_every: u64,
    writes_answered: u64,
    /// Forced journal commits of the current engine already noted.
    forced_seen: u64,
    commands: HashMap<u64, (IoCommand, Pending)>,
    dev_ops: HashMap<u64, (u64, OpFate)>, // device op id -> (engine io id, fate)
    next_op: u64,
    /// Arrival time and class of each request in flight.
    arrivals: HashMap<u64, (Nanos, Class)>,
    /// Issuers hinted critical (`set_critical_issuer`), hinted again after a crash.
    critical_issuers: Vec<u32>,
    /// Inheritance causes the workload's hints hold per issuer, given
    /// again to the engine that recovers after a crash.
    inherited: HashMap<u32, u32>,
    backlog: Vec<Request>,
    first_rejection: Option<String>,
    data: Option<DataModel>,
    done: Vec<DevCompletion>,
    now: Nanos,
}

fn align_down(x: u64) -> u64 {
    x / SECTOR_BYTES * SECTOR_BYTES
}

impl Simulation {
    pub fn new(
        mut config: EngineConfig,
        cache: Box<dyn DeviceModel>,
        backing: Box<dyn DeviceModel>,
        workload: Box<dyn Workload>,
        check_data: bool,
    ) -> Result<Simulation, SimError> {
        // This driver keeps a buffer until no command names it (the data
        // model's `respond`), so a promoted bypass is answered early.
        config.buffers_outlive_answers = true;
        let page_bytes = config.page_size_bytes;
        let need = config.cache_slots * page_bytes;
        if need > cache.capacity_bytes() {
            return Err(SimError::CacheDeviceTooSmall {
                device: cache.name(),
                need_bytes: need,
                have_bytes: cache.capacity_bytes(),
            });
        }
        let cache_slots = config.cache_slots;
        let mut engine = Engine::new(config.clone())?;
        // Volumes sit one after another on the backing device.
        let mut volume_base_bytes = Vec::new();
        let mut volume_sizes_bytes = Vec::new();
        let mut base = 0u64;
        for size in workload.volume_sizes_bytes() {
            let size = size.div_ceil(SECTOR_BYTES) * SECTOR_BYTES;
            engine.add_volume(size)?;
            volume_base_bytes.push(base);
            volume_sizes_bytes.push(size);
            base += size;
        }
        // Backing journals (journaled write-back) follow the volumes.
        let journal_bytes = match config.journal.checkpoint {
            CheckpointMode::BackingJournal { pages } => (pages + 1) * page_bytes,
            CheckpointMode::Nvram => 0,
        };
        let journal_base_bytes = volume_sizes_bytes
            .iter()
            .enumerate()
            .map(|(i, _)| base + i as u64 * journal_bytes)
            .collect::<Vec<u64>>();
        if config.write_policy.journaled() {
            base += journal_bytes * volume_sizes_bytes.len() as u64;
        }
        if base > backing.capacity_bytes() {
            return Err(SimError::BackingTooSmall {
                device: backing.name(),
                need_bytes: base,
                have_bytes: backing.capacity_bytes(),
            });
        }
        // An application names its own critical processes (the paper's hint).
        let app_critical: Vec<u32> = workload.critical_issuers().to_vec();
        for &issuer in &app_critical {
            engine
                .set_critical_issuer(issuer, true)
                .map_err(|source| SimError::Hint {
                    hint: CriticalityHint::Inherit(issuer),
                    source,
                })?;
        }
        Ok(Simulation {
            engine,
            config,
            volume_sizes_bytes: volume_sizes_bytes.clone(),
            faults: None,
            crash_at: None,
            device_writes: 0,
            crash_pending: false,
            draining: false,
            delayed: Vec::new(),
            cache,
            backing,
            workload,
            page_bytes,
            volume_base_bytes,
            journal_base_bytes,
            point_every: 0,
            writes_answered: 0,
            forced_seen: 0,
            commands: HashMap::default(),
            dev_ops: HashMap::default(),
            next_op: 0,
            arrivals: HashMap::default(),
            critical_issuers: app_critical,
            inherited: HashMap::default(),
            backlog: Vec::new(),
            first_rejection: None,
            data: check_data.then(|| DataModel::new(page_bytes, cache_slots, &volume_sizes_bytes)),
            done: Vec::new(),
            now: Nanos::ZERO,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Hint `issuer` critical for the whole run (kept across crashes).
    pub fn set_critical_issuer(&mut self, issuer: u32) -> Result<(), CriticalityError> {
        self.engine.set_critical_issuer(issuer, true)?;
        if !self.critical_issuers.contains(&issuer) {
            self.critical_issuers.push(issuer);
        }
        Ok(())
    }

    /// Apply the criticality hints the workload has queued, in order.
    fn apply_hints(&mut self) -> Result<(), SimError> {
        while let Some(hint) = self.workload.take_hint() {
            let applied = match hint {
                CriticalityHint::Inherit(issuer) => self.engine.inherit_criticality(issuer),
                CriticalityHint::EndInherit(issuer) => {
                    self.engine.end_inherited_criticality(issuer)
                }
            };
            applied.map_err(|source| SimError::Hint { hint, source })?;
            match hint {
                CriticalityHint::Inherit(issuer) => *self.inherited.entry(issuer).or_insert(0) += 1,
                CriticalityHint::EndInherit(issuer) => {
                    let n = self.inherited.get_mut(&issuer).expect("the engine had it");
                    *n -= 1;
                    if *n == 0 {
                        self.inherited.remove(&issuer);
                    }
                }
            }
        }
        Ok(())
    }

    /// Declare an application consistency point every `writes` answered
    /// writes (journaled write-back with hints; 0: never). With a fault
    /// plan that crashes, each crash checks App-C: the backing alone holds
    /// the state of one declared point.
    pub fn with_points(mut self, writes: u64) -> Simulation {
        self.point_every = writes;
        if let (true, Some(d)) = (writes > 0 && self.crash_at.is_some(), &mut self.data) {
            d.track_points();
        }
        self
    }

    /// A transaction journaled write-back committed without a declared
    /// point (for room only its commit makes, or by the final drain) is a
    /// boundary the backing may stop at (`docs/consistency.md`):
    /// the App-C check counts it as a point, noted before the answers of
    /// the engine call that made it (so the check is, if anything, lenient
    /// about those).
    fn note_forced_commits(&mut self) {
        let forced = self.engine.journal_forced_commits();
        if forced > self.forced_seen {
            self.forced_seen = forced;
            if let Some(d) = &mut self.data {
                d.point();
            }
        }
    }

    fn consistency_point(&mut self) -> Result<(), SimError> {
        self.engine
            .consistency_point(self.now)
            .map_err(|e| SimError::Points(e.to_string()))?;
        if let Some(d) = &mut self.data {
            d.point();
        }
        Ok(())
    }

    /// How a request is measured: a read, or a write (critical or not).
    fn class_of(&self, r: &IoRequest) -> Class {
        match r.kind {
            ReqKind::Read => Class::Read,
            ReqKind::Write => Class::Write {
                critical: r.sync && self.engine.issuer_criticality(r.issuer).0,
            },
        }
    }

    /// Inject the faults of `plan` (draws seeded by `plan.seed`, else
    /// `run_seed`) and, with `crash_at`, crash when the k-th device write is
    /// submitted, then recover from what the cache device holds. A crash
    /// needs a persistent engine, and checks data (the data model holds the
    /// cache device's records).
    pub fn with_faults(
        mut self,
        plan: FaultPlan,
        run_seed: u64,
        crash_at: Option<u64>,
    ) -> Result<Simulation, SimError> {
        let ordered = self.config.write_policy.keeps_backing_consistent();
        if crash_at.is_some() && !self.config.persistent {
            return Err(SimError::CrashNeedsPersistent);
        }
        if crash_at.is_some() && self.data.is_none() {
            self.data = Some(DataModel::new(
                self.page_bytes,
                self.config.cache_slots,
                &self.volume_sizes_bytes,
            ));
        }
        if let Some(d) = &mut self.data {
            d.set_volatile_writes(plan.lie_writes);
            if (ordered || plan.pit) && crash_at.is_some() {
                d.track_order();
            }
            if self.point_every > 0 && crash_at.is_some() {
                d.track_points();
            }
        }
        self.faults = Some(Faults::new(plan, run_seed));
        self.crash_at = crash_at;
        Ok(self)
    }

    fn to_request(&self, r: &IoRequest) -> Request {
        // The simulator works in whole sectors: widen the range to them.
        let start = align_down(r.offset_bytes);
        let end = (r.offset_bytes + r.len_bytes).div_ceil(SECTOR_BYTES) * SECTOR_BYTES;
        Request {
            id: RequestId(r.id),
            volume: VolumeId(r.volume as u16),
            kind: match r.kind {
                ReqKind::Read => RequestKind::Read,
                ReqKind::Write => RequestKind::Write,
            },
            offset_bytes: start,
            len_bytes: end - start,
            flags: RequestFlags {
                sync: r.sync,
                issuer: r.issuer,
                ..Default::default()
            },
        }
    }

    fn submit(&mut self, req: Request) -> Result<bool, SimError> {
        match self.engine.handle_request(self.now, req) {
            Ok(()) => {
                if let Some(d) = &mut self.data {
                    let is_write = req.kind != RequestKind::Read;
                    d.submit(
                        req.id.0,
                        req.volume.0,
                        is_write,
                        req.offset_bytes,
                        req.len_bytes,
                    );
                }
                Ok(true)
            }
            Err(SubmitError::Busy(_)) => {
                self.backlog.push(req);
                Ok(false)
            }
            Err(e) => {
                self.first_rejection.get_or_insert_with(|| e.to_string());
                Ok(false)
            }
        }
    }

    fn device_op(
        &mut self,
        io: IoId,
        to_cache: bool,
        kind: DevOpKind,
        offset_bytes: u64,
        len_bytes: u64,
    ) {
        let id = self.next_op;
        self.next_op += 1;
        let is_write = kind == DevOpKind::Write;
        let fate = match &mut self.faults {
            Some(f) => f.next_op(OpClass {
                cache: to_cache,
                write: is_write,
            }),
            None => OpFate::default(),
        };
        if is_write {
            self.device_writes += 1;
            if let (Some(k), Some(f)) = (self.crash_at, &self.faults) {
                let n = self.device_writes;
                if n.is_multiple_of(k) && n / k <= f.plan.crashes {
                    self.crash_pending = true;
                }
            }
        }
        self.dev_ops.insert(id, (io.0, fate));
        let op = DevOp {
            id,
            kind,
            offset_bytes,
            len_bytes,
        };
        if to_cache {
            self.cache.submit(self.now, op);
        } else {
            self.backing.submit(self.now, op);
        }
    }

    fn backing_addr(&self, volume: VolumeId, offset_bytes: u64) -> u64 {
        self.volume_base_bytes[volume.0 as usize] + offset_bytes
    }

    /// Submit one access of command `io` to its device. The simulator
    /// works in whole sectors; records are one small write at the start of
    /// the cache device.
    fn submit_access(&mut self, io: IoId, a: Access) {
        let kind = if a.write {
            DevOpKind::Write
        } else {
            DevOpKind::Read
        };
        let (to_cache, addr, len) = match a.target {
            Target::Records => (true, 0, SECTOR_BYTES),
            Target::Slots => (true, a.offset_bytes, a.len_bytes),
            Target::Backing(volume) => (
                false,
                self.backing_addr(volume, a.offset_bytes),
                a.len_bytes,
            ),
            Target::Journal(volume) => (
                false,
                self.journal_base_bytes[volume.0 as usize] + a.offset_bytes,
                a.len_bytes,
            ),
            Target::Nvram => {
                // No device time: done at once.
                let id = self.next_op;
                self.next_op += 1;
                self.dev_ops.insert(id, (io.0, OpFate::default()));
                self.delayed.push(DevCompletion { id, time: self.now });
                return;
            }
        };
        self.device_op(io, to_cache, kind, align_down(addr), len.max(SECTOR_BYTES));
    }

    /// Start a command's first access.
    fn start_command(&mut self, cmd: IoCommand) {
        let io = cmd.io();
        let (first, next) = accesses(&cmd, self.page_bytes);
        self.submit_access(io, first);
        let pending = Pending {
            remaining: 1,
            next,
            writing: first.write,
            failed: false,
        };
        self.commands.insert(io.0, (cmd, pending));
    }

    fn second_phase(&mut self, io: IoId) {
        let (_, pending) = self.commands.get_mut(&io.0).expect("command in flight");
        let a = pending.next.take().expect("a second access");
        pending.remaining = 1;
        pending.writing = a.write;
        self.submit_access(io, a);
    }

    fn device_done(&mut self, c: DevCompletion) -> Result<(), SimError> {
        let Some(&(io, fate)) = self.dev_ops.get(&c.id) else {
            // An operation of the engine that crashed: nobody waits for it.
            assert!(self.faults.as_ref().is_some_and(|f| f.counts.crashes > 0));
            return Ok(());
        };
        if fate.delay_ns > 0 {
            // A latency spike: the completion comes later.
            self.dev_ops.insert(
                c.id,
                (
                    io,
                    OpFate {
                        delay_ns: 0,
                        ..fate
                    },
                ),
            );
            self.delayed.push(DevCompletion {
                id: c.id,
                time: Nanos(c.time.0 + fate.delay_ns),
            });
            return Ok(());
        }
        self.dev_ops.remove(&c.id);
        let (_, pending) = self.commands.get_mut(&io).expect("command in flight");
        pending.remaining -= 1;
        pending.failed |= fate.eio;
        if pending.remaining > 0 {
            return Ok(());
        }
        if pending.next.is_some() && !pending.failed {
            self.second_phase(IoId(io));
            return Ok(());
        }
        let (cmd, pending) = self.commands.remove(&io).expect("command in flight");
        if pending.failed {
            // A failed operation changes nothing on the device, unless the
            // plan says failed writes land (docs/sim-faults.md).
            let lands = pending.writing && self.faults.as_ref().is_some_and(|f| f.plan.eio_lands);
            if let Some(d) = &mut self.data {
                if lands {
                    d.execute(&cmd);
                } else {
                    d.done(&cmd);
                }
            }
            self.engine
                .handle_completion(self.now, IoId(io), Err(IoError::Io))?;
            return Ok(());
        }
        if let Some(d) = &mut self.data {
            d.execute(&cmd);
        }
        self.engine.handle_completion(self.now, IoId(io), Ok(()))?;
        Ok(())
    }

    /// Power fails: commands in flight are lost (with the fault plan's torn
    /// writes, part of their writes lands), requests in flight are never
    /// answered, and a new engine recovers from the records the cache
    /// device holds, selected as the real store selects them.
    fn crash(&mut self) -> Result<(), SimError> {
        self.crash_pending = false;
        let faults = self
            .faults
            .as_mut()
            .expect("a crash comes from a fault plan");
        faults.counts.crashes += 1;
        let data = self
            .data
            .as_mut()
            .expect("a crash run keeps the data model");
        let mut inflight: Vec<(u64, IoCommand, Pending)> = self
            .commands
            .drain()
            .map(|(io, (cmd, p))| (io, cmd, p))
            .collect();
        inflight.sort_by_key(|&(io, _, _)| io);
        for (_, cmd, pending) in &inflight {
            if !pending.writing {
                continue; // still reading: nothing written yet
            }
            if let Some((landed, record)) = faults.torn(data.written_sectors(cmd)) {
                data.apply_partial(
                    cmd,
                    Partial {
                        units: landed,
                        record,
                    },
                );
            }
        }
        // Whoever opens the backing next replays its committed journal
        // transaction (journaled write-back). The backing alone must then be
        // consistent at any moment under ordered and journaled write-back
        // (as if the cache were lost now), and with `pit` whenever the
        // cache is lost.
        let ordered = self.config.write_policy.keeps_backing_consistent();
        data.replay_journals();
        let lose_cache = faults.plan.lose_cache;
        if lose_cache || ordered {
            data.check_order()?;
        }
        let cache_only_copy = self.config.write_policy.keeps_dirty() && !faults.plan.strict;
        let keep_older = self.config.write_policy == WritePolicyKind::OrderedWriteBack;
        let log = self.config.log.then_some(keep_older);
        let (found, at, lost) = data.crash(lose_cache, cache_only_copy, log);
        faults.counts.lost_writes += lost as u64;
        self.dev_ops.clear();
        self.delayed.clear();
        self.engine = Engine::recover_at(self.config.clone(), &self.volume_sizes_bytes, found, at)?;
        self.forced_seen = 0;
        for &issuer in &self.critical_issuers {
            self.engine
                .set_critical_issuer(issuer, true)
                .expect("accepted before the crash");
        }
        // Inheritances in force go on: their causes (waits) outlive the crash.
        let mut inherited: Vec<(u32, u32)> = self.inherited.iter().map(|(&i, &n)| (i, n)).collect();
        inherited.sort_unstable();
        for (issuer, n) in inherited {
            for _ in 0..n {
                self.engine
                    .inherit_criticality(issuer)
                    .expect("accepted before the crash");
            }
        }
        if self.draining {
            self.engine.start_drain();
        }
        // Requests in flight are never answered; their clients go on.
        let waiting: Vec<u64> = self.backlog.iter().map(|r| r.id.0).collect();
        let mut lost_requests: Vec<u64> = self
            .arrivals
            .keys()
            .copied()
            .filter(|id| !waiting.contains(id))
            .collect();
        lost_requests.sort_unstable();
        for id in lost_requests {
            self.arrivals.remove(&id);
            self.workload.complete(self.now, id);
            self.apply_hints()?;
        }
        Ok(())
    }

    /// Move commands to devices and responses to the workload.
    fn sample(&self, measuring: bool) -> TimelineSample {
        let stats = self.engine.stats();
        let (low_pages, high_pages) = self.engine.thresholds_pages();
        TimelineSample {
            t_ns: self.now.0,
            measuring,
            dirty_pages: self.engine.dirty_pages(),
            dirty_groups: self.engine.dirty_groups() as u64,
            destages_in_flight: self.engine.destages_in_flight(),
            requests_in_flight: self.engine.requests_in_flight(),
            stalls: stats.stalls,
            destages: stats.destages,
            destaged_pages: stats.destaged_pages,
            low_pages,
            high_pages,
        }
    }

    fn pump(&mut self, measure: &mut Measure) -> Result<(), SimError> {
        loop {
            let mut moved = false;
            self.note_forced_commits();
            while let Some(cmd) = self.engine.poll_command() {
                moved = true;
                self.start_command(cmd);
            }
            while let Some(r) = self.engine.poll_response() {
                moved = true;
                if let Some(d) = &mut self.data {
                    d.respond(r.id.0, r.result.is_ok(), r.buffer_in_use)?;
                }
                let is_write = matches!(self.arrivals.get(&r.id.0), Some((_, Class::Write { .. })));
                if is_write && self.point_every > 0 {
                    self.writes_answered += 1;
                    if self.writes_answered.is_multiple_of(self.point_every) {
                        self.consistency_point()?;
                    }
                }
                if let Some((arrived, class)) = self.arrivals.remove(&r.id.0) {
                    measure.completed(
                        self.now,
                        self.now - arrived,
                        class,
                        self.engine.dirty_pages(),
                        self.engine.dirty_age_ns(self.now),
                    );
                }
                self.workload.complete(self.now, r.id.0);
                self.apply_hints()?;
            }
            if !self.backlog.is_empty()
                && self.engine.requests_in_flight() < self.engine.config().requests_max
            {
                let backlog = std::mem::take(&mut self.backlog);
                for req in backlog {
                    self.submit(req)?;
                }
                moved = true;
            }
            if self.crash_pending {
                self.crash()?;
                moved = true;
            }
            if !moved {
                return Ok(());
            }
        }
    }

    pub fn run(&mut self, limits: RunLimits) -> Result<SimReport, SimError> {
        let mut m = Measure::new(limits.warmup_requests, limits.warmup_ns);
        let mut warm_stats: Option<(Stats, DeviceStats, DeviceStats)> = None;
        let mut rejected = 0u64;
        let mut draining = false;
        let mut timeline = Vec::new();
        let mut next_sample_ns = 0u64;
        loop {
            // Arrivals due now.
            if !draining {
                while self.workload.next_arrival().is_some_and(|t| t <= self.now) {
                    let polled = self.workload.poll(self.now);
                    self.apply_hints()?;
                    let Some(r) = polled else {
                        break;
                    };
                    let req = self.to_request(&r);
                    let class = self.class_of(&r);
                    self.arrivals.insert(r.id, (self.now, class));
                    if !self.submit(req)? && self.backlog.last().map(|b| b.id) != Some(req.id) {
                        rejected += 1;
                        self.arrivals.remove(&r.id);
                        self.workload.complete(self.now, r.id);
                        self.apply_hints()?;
                    }
                }
                if let Some(e) = self.workload.take_error() {
                    return Err(e.into());
                }
            }
            self.pump(&mut m)?;
            if limits.timeline_ns > 0 && self.now.0 >= next_sample_ns {
                timeline.push(self.sample(m.warm() && !draining));
                next_sample_ns = (self.now.0 / limits.timeline_ns + 1) * limits.timeline_ns;
            }
            if warm_stats.is_none() && m.warm() {
                self.workload.measure_start(m.warm_at.unwrap_or(self.now));
                warm_stats = Some((
                    self.engine.stats().clone(),
                    self.backing.stats(),
                    DeviceStats::sum(&self.backing.member_stats()),
                ));
            }
            let measured_enough = m.measured >= limits.measure_requests
                || m.warm_at
                    .is_some_and(|t| self.now.0.saturating_sub(t.0) >= limits.measure_ns);
            let out_of_time = self.now >= limits.time_limit;
            let workload_done = self.workload.finished() && self.engine.is_idle();
            if !draining && (measured_enough || out_of_time || workload_done) {
                m.stop(self.now);
                self.workload.measure_stop(self.now);
                if !limits.check_data && self.crash_at.is_none() {
                    break;
                }
                // Finish what is in flight, destage everything, then check the backing.
                draining = true;
                self.draining = true;
                self.engine.start_drain();
                self.pump(&mut m)?;
            }
            if draining && self.engine.is_idle() && self.engine.dirty_pages() == 0 {
                break;
            }
            // The next event.
            let mut next = if draining {
                None
            } else {
                self.workload.next_arrival()
            };
            for t in [
                self.backing.next_event_time(),
                self.cache.next_event_time(),
                self.engine.poll_timeout(),
                self.delayed.iter().map(|c| c.time).min(),
            ]
            .into_iter()
            .flatten()
            {
                next = Some(next.map_or(t, |n: Nanos| n.min(t)));
            }
            let Some(t) = next else {
                if self.engine.is_idle() && !draining {
                    m.stop(self.now);
                    self.workload.measure_stop(self.now);
                    break;
                }
                if std::env::var_os("WCACHE_DEBUG_STUCK").is_some() {
                    struct Print;
                    impl wcache_core::metrics::MetricsVisitor for Print {
                        fn metric(
                            &mut self,
                            _: wcache_core::metrics::MetricKind,
                            name: &str,
                            _: &str,
                            value: u64,
                        ) {
                            eprintln!("{name} {value}");
                        }
                    }
                    self.engine.visit_metrics(self.now, &mut Print);
                }
                return Err(SimError::Stuck { now: self.now });
            };
            self.now = self.now.max(t);
            self.done.clear();
            let mut done = std::mem::take(&mut self.done);
            self.cache.advance(self.now, &mut done);
            self.backing.advance(self.now, &mut done);
            if !self.delayed.is_empty() {
                let now = self.now;
                done.extend(self.delayed.iter().filter(|c| c.time <= now));
                self.delayed.retain(|c| c.time > now);
            }
            done.sort_by_key(|c| (c.time, c.id));
            for c in done.drain(..) {
                self.device_done(c)?;
            }
            self.done = done;
            if self.engine.poll_timeout().is_some_and(|t| t <= self.now) {
                self.engine.handle_timeout(self.now);
            }
        }
        let (sectors_checked, backing_sectors_checked) = match &self.data {
            Some(d) if limits.check_data || self.crash_at.is_some() => {
                let backing = d.check_backing()?;
                (d.sectors_checked, backing)
            }
            Some(d) => (d.sectors_checked, 0),
            None => (0, 0),
        };
        let (mut stats0, backing0, members0) = warm_stats.unwrap_or_default();
        if self.faults.as_ref().is_some_and(|f| f.counts.crashes > 0) {
            // The engine that counted before the crash is gone.
            stats0 = Stats::default();
        }
        let backing1 = self.backing.stats();
        let members1 = DeviceStats::sum(&self.backing.member_stats());
        Ok(SimReport {
            requests: m.measured,
            window_ns: m.window_ns(),
            warmup_ns: m.warm_at.map_or(0, |t| t.0),
            iops: m.iops(),
            response_ms_mean: m.mean_ms(m.all_ns, m.measured),
            read_response_ms_mean: m.mean_ms(m.read_ns, m.reads),
            write_response_ms_mean: m.mean_ms(m.all_ns - m.read_ns, m.measured - m.reads),
            stats: self.engine.stats().since(&stats0),
            backing: backing1.since(&backing0),
            backing_members: members1.since(&members0),
            workload: self.workload.stats(),
            rejected_requests: rejected,
            first_rejection: self.first_rejection.take(),
            timeline,
            sectors_checked,
            occupancy_pages_mean: if m.measured == 0 {
                0.0
            } else {
                m.occupancy_sum as f64 / m.measured as f64
            },
            dirty_age_ms_max: m.dirty_age_ns_max as f64 / 1e6,
            thresholds_pages: self.engine.thresholds_pages(),
            faults: self.faults.as_ref().map(|f| f.counts).unwrap_or_default(),
            backing_sectors_checked,
            order_checks: self.data.as_ref().map_or(0, DataModel::order_checks),
            critical_writes: m.classes.report().0,
            other_writes: m.classes.report().1,
            app: self.workload.app_report(),
        })
    }
}

/// What a completed request was, for the measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Read,
    Write { critical: bool },
}

/// Counts completions, first through the warm-up, then in the window.
struct Measure {
    classes: WriteClasses,
    warmup_requests: u64,
    warmup_ns: u64,
    warm_count: u64,
    warm_at: Option<Nanos>,
    end_at: Option<Nanos>,
    measured: u64,
    reads: u64,
    all_ns: u128,
    read_ns: u128,
    occupancy_sum: u128,
    dirty_age_ns_max: u64,
}

impl Measure {
    fn new(warmup_requests: u64, warmup_ns: u64) -> Measure {
        Measure {
            classes: WriteClasses::new(),
            warmup_requests,
            warmup_ns,
            warm_count: 0,
            warm_at: (warmup_requests == 0 && warmup_ns == 0).then_some(Nanos::ZERO),
            end_at: None,
            measured: 0,
            reads: 0,
            all_ns: 0,
            read_ns: 0,
            occupancy_sum: 0,
            dirty_age_ns_max: 0,
        }
    }
    fn warm(&self) -> bool {
        self.warm_at.is_some()
    }
    fn completed(
        &mut self,
        now: Nanos,
        latency: Nanos,
        class: Class,
        dirty_pages: u64,
        dirty_age_ns: u64,
    ) {
        if self.end_at.is_some() {
            return;
        }
        if self.warm_at.is_none() {
            self.warm_count += 1;
            if self.warm_count >= self.warmup_requests && now.0 >= self.warmup_ns {
                self.warm_at = Some(now);
            }
            return;
        }
        self.measured += 1;
        self.all_ns += latency.0 as u128;
        self.occupancy_sum += dirty_pages as u128;
        self.dirty_age_ns_max = self.dirty_age_ns_max.max(dirty_age_ns);
        match class {
            Class::Read => {
                self.reads += 1;
                self.read_ns += latency.0 as u128;
            }
            Class::Write { critical } => self.classes.record(critical, latency),
        }
    }
    fn stop(&mut self, now: Nanos) {
        if self.end_at.is_none() {
            self.end_at = Some(now);
        }
    }
    fn window_ns(&self) -> u64 {
        match (self.warm_at, self.end_at) {
            (Some(a), Some(b)) => b.0.saturating_sub(a.0),
            _ => 0,
        }
    }
    fn iops(&self) -> f64 {
        let w = self.window_ns();
        if w == 0 {
            0.0
        } else {
            self.measured as f64 / (w as f64 / 1e9)
        }
    }
    fn mean_ms(&self, total_ns: u128, n: u64) -> f64 {
        if n == 0 {
            0.0
        } else {
            total_ns as f64 / n as f64 / 1e6
        }
    }
}
