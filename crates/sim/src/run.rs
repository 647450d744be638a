//! One simulation: the real engine, a workload, a cache device model and a
//! backing device model, driven in virtual time by a discrete-event loop.
//! Deterministic: the same inputs give the same report, bit for bit.

use crate::checker::{DataModel, IntegrityError, SECTOR_BYTES};
use crate::device::{DevCompletion, DevOp, DevOpKind, DeviceModel, DeviceStats};
use crate::workload::{IoRequest, ReqKind, Workload, WorkloadError, WorkloadStats};
use rustc_hash::FxHashMap as HashMap;
use thiserror::Error;
use wcache_core::time::Nanos;
use wcache_core::types::{IoId, RequestId, VolumeId};
use wcache_core::*;

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
    #[error("simulation stuck at {now}: the engine has work in flight but nothing can happen")]
    Stuck { now: Nanos },
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
    pub thresholds_pages: (u64, u64),
    /// Samples every `RunLimits::timeline_ns` over the whole run, warm-up included.
    pub timeline: Vec<TimelineSample>,
}

#[derive(Clone, Copy)]
struct Pending {
    /// Device operations of the current phase not yet done.
    remaining: u32,
    /// A second phase (the write after a read) is still to come.
    second_phase: bool,
}

pub struct Simulation {
    engine: Engine,
    cache: Box<dyn DeviceModel>,
    backing: Box<dyn DeviceModel>,
    workload: Box<dyn Workload>,
    page_bytes: u64,
    volume_base_bytes: Vec<u64>,
    commands: HashMap<u64, (IoCommand, Pending)>,
    dev_ops: HashMap<u64, u64>, // device op id -> engine io id
    next_op: u64,
    arrivals: HashMap<u64, (Nanos, bool)>,
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
        config: EngineConfig,
        cache: Box<dyn DeviceModel>,
        backing: Box<dyn DeviceModel>,
        workload: Box<dyn Workload>,
        check_data: bool,
    ) -> Result<Simulation, SimError> {
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
        let mut engine = Engine::new(config)?;
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
        if base > backing.capacity_bytes() {
            return Err(SimError::BackingTooSmall {
                device: backing.name(),
                need_bytes: base,
                have_bytes: backing.capacity_bytes(),
            });
        }
        Ok(Simulation {
            engine,
            cache,
            backing,
            workload,
            page_bytes,
            volume_base_bytes,
            commands: HashMap::default(),
            dev_ops: HashMap::default(),
            next_op: 0,
            arrivals: HashMap::default(),
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
        self.dev_ops.insert(id, io.0);
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

    /// Start a command's first phase.
    fn start_command(&mut self, cmd: IoCommand) {
        let io = cmd.io();
        let p = self.page_bytes;
        let mut pending = Pending {
            remaining: 1,
            second_phase: false,
        };
        match &cmd {
            // Persistent caches only: the free records, as one small cache write.
            IoCommand::FreeSlots { .. } => {
                self.device_op(io, true, DevOpKind::Write, 0, SECTOR_BYTES)
            }
            IoCommand::WritePage { slot, base, .. } => match *base {
                PageBase::None => self.device_op(io, true, DevOpKind::Write, slot.0 as u64 * p, p),
                PageBase::Slot(old) => {
                    pending.second_phase = true;
                    self.device_op(io, true, DevOpKind::Read, old.0 as u64 * p, p);
                }
                PageBase::Backing { volume, page } => {
                    pending.second_phase = true;
                    let addr = self.backing_addr(volume, page.0 * p);
                    self.device_op(io, false, DevOpKind::Read, addr, p);
                }
            },
            IoCommand::ReadPage {
                slot,
                page_offset_bytes,
                len_bytes,
                ..
            } => {
                let off = slot.0 as u64 * p + align_down(*page_offset_bytes as u64);
                self.device_op(
                    io,
                    true,
                    DevOpKind::Read,
                    off,
                    (*len_bytes as u64).max(SECTOR_BYTES),
                );
            }
            IoCommand::ReadBacking {
                volume,
                offset_bytes,
                len_bytes,
                ..
            } => {
                let addr = self.backing_addr(*volume, *offset_bytes);
                self.device_op(io, false, DevOpKind::Read, addr, *len_bytes);
            }
            IoCommand::WriteBacking {
                volume,
                offset_bytes,
                len_bytes,
                ..
            } => {
                let addr = self.backing_addr(*volume, *offset_bytes);
                self.device_op(io, false, DevOpKind::Write, addr, *len_bytes);
            }
            IoCommand::Destage { slots, .. } => {
                pending.second_phase = true;
                let first = slots[0].0 as u64 * p;
                self.device_op(io, true, DevOpKind::Read, first, p * slots.len() as u64);
            }
        }
        self.commands.insert(io.0, (cmd, pending));
    }

    fn second_phase(&mut self, io: IoId) {
        let p = self.page_bytes;
        let (cmd, pending) = self.commands.get_mut(&io.0).expect("command in flight");
        pending.second_phase = false;
        pending.remaining = 1;
        let (to_cache, addr, len) = match cmd {
            IoCommand::WritePage { slot, .. } => (true, slot.0 as u64 * p, p),
            IoCommand::Destage {
                volume,
                first_page,
                slots,
                ..
            } => {
                let (volume, off, n) = (*volume, first_page.0 * p, slots.len() as u64);
                (false, self.backing_addr(volume, off), p * n)
            }
            _ => unreachable!("only page writes and destages have two phases"),
        };
        self.device_op(io, to_cache, DevOpKind::Write, addr, len);
    }

    fn device_done(&mut self, c: DevCompletion) -> Result<(), SimError> {
        let io = self.dev_ops.remove(&c.id).expect("device op was submitted");
        let (_, pending) = self.commands.get_mut(&io).expect("command in flight");
        pending.remaining -= 1;
        if pending.remaining > 0 {
            return Ok(());
        }
        if pending.second_phase {
            self.second_phase(IoId(io));
            return Ok(());
        }
        let (cmd, _) = self.commands.remove(&io).expect("command in flight");
        if let Some(d) = &mut self.data {
            d.execute(&cmd);
        }
        self.engine.handle_completion(self.now, IoId(io), Ok(()))?;
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
            while let Some(cmd) = self.engine.poll_command() {
                moved = true;
                self.start_command(cmd);
            }
            while let Some(r) = self.engine.poll_response() {
                moved = true;
                if let Some(d) = &mut self.data {
                    d.respond(r.id.0, r.result.is_ok())?;
                }
                if let Some((arrived, is_read)) = self.arrivals.remove(&r.id.0) {
                    measure.completed(
                        self.now,
                        self.now - arrived,
                        is_read,
                        self.engine.dirty_pages(),
                    );
                }
                self.workload.complete(self.now, r.id.0);
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
                    let Some(r) = self.workload.poll(self.now) else {
                        break;
                    };
                    let req = self.to_request(&r);
                    self.arrivals
                        .insert(r.id, (self.now, r.kind == ReqKind::Read));
                    if !self.submit(req)? && self.backlog.last().map(|b| b.id) != Some(req.id) {
                        rejected += 1;
                        self.arrivals.remove(&r.id);
                        self.workload.complete(self.now, r.id);
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
                if !limits.check_data {
                    break;
                }
                // Finish what is in flight, destage everything, then check the backing.
                draining = true;
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
            ]
            .into_iter()
            .flatten()
            {
                next = Some(next.map_or(t, |n: Nanos| n.min(t)));
            }
            let Some(t) = next else {
                if self.engine.is_idle() && !draining {
                    m.stop(self.now);
                    break;
                }
                return Err(SimError::Stuck { now: self.now });
            };
            self.now = self.now.max(t);
            self.done.clear();
            let mut done = std::mem::take(&mut self.done);
            self.cache.advance(self.now, &mut done);
            self.backing.advance(self.now, &mut done);
            done.sort_by_key(|c| (c.time, c.id));
            for c in done.drain(..) {
                self.device_done(c)?;
            }
            self.done = done;
            if self.engine.poll_timeout().is_some_and(|t| t <= self.now) {
                self.engine.handle_timeout(self.now);
            }
        }
        let sectors_checked = match &self.data {
            Some(d) => {
                d.check_backing()?;
                d.sectors_checked
            }
            None => 0,
        };
        let (stats0, backing0, members0) = warm_stats.unwrap_or_default();
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
            thresholds_pages: self.engine.thresholds_pages(),
        })
    }
}

/// Counts completions, first through the warm-up, then in the window.
struct Measure {
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
}

impl Measure {
    fn new(warmup_requests: u64, warmup_ns: u64) -> Measure {
        Measure {
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
        }
    }
    fn warm(&self) -> bool {
        self.warm_at.is_some()
    }
    fn completed(&mut self, now: Nanos, latency: Nanos, is_read: bool, dirty_pages: u64) {
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
        if is_read {
            self.reads += 1;
            self.read_ns += latency.0 as u128;
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
