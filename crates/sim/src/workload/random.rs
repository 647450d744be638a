//! Uniform random 4 KiB I/O over a footprint: the WOW paper's random-write
//! workload (section V-C), which has almost no temporal locality so that the
//! destage order alone decides throughput.
//!
//! It must stay O(1) per request with no allocation, and never look at the cache.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp};
use wcache_core::time::Nanos;

use super::gate::{Gate, Pacing};
use super::{
    IoRequest, IssuerMix, Loop, ReqKind, Stop, Workload, WorkloadError, WorkloadStats, BLOCK_BYTES,
    OUTSTANDING_MAX_DEFAULT,
};

#[derive(Clone, Debug, PartialEq)]
pub struct RandomConfig {
    /// Addressed bytes, a multiple of [`BLOCK_BYTES`]; volume 0 has this size.
    pub footprint_bytes: u64,
    /// Fraction of requests that are reads, in [0, 1].
    pub read_fraction: f64,
    pub arrivals: Loop,
    pub stop: Stop,
    /// Mark writes `sync` (the generator itself carries no criticality).
    pub sync_writes: bool,
    /// Issuers and sync tags (none by default: issuer 0, `sync_writes`).
    pub issuers: IssuerMix,
}

impl RandomConfig {
    /// All writes, closed loop with `outstanding` in flight, no stop.
    pub fn writes_closed(footprint_bytes: u64, outstanding: u64) -> RandomConfig {
        RandomConfig {
            footprint_bytes,
            read_fraction: 0.0,
            arrivals: Loop::Closed { outstanding },
            stop: Stop::default(),
            sync_writes: false,
            issuers: IssuerMix::default(),
        }
    }

    /// All writes, Poisson at `rate_iops` with the default outstanding bound.
    pub fn writes_open(footprint_bytes: u64, rate_iops: f64) -> RandomConfig {
        RandomConfig {
            footprint_bytes,
            read_fraction: 0.0,
            arrivals: Loop::Open {
                rate_iops,
                outstanding_max: OUTSTANDING_MAX_DEFAULT,
            },
            stop: Stop::default(),
            sync_writes: false,
            issuers: IssuerMix::default(),
        }
    }
}

/// Check a [`Loop`] and turn it into gate pacing plus, for open loop, the
/// inter-arrival distribution in nanoseconds.
pub(crate) fn loop_pacing(arrivals: Loop) -> Result<(Pacing, Option<Exp<f64>>), WorkloadError> {
    match arrivals {
        Loop::Open {
            rate_iops,
            outstanding_max,
        } => {
            if !(rate_iops.is_finite() && rate_iops > 0.0) {
                return Err(WorkloadError::InvalidConfig(format!(
                    "open-loop rate must be a positive number of IOPS, got {rate_iops}"
                )));
            }
            if outstanding_max == 0 {
                return Err(WorkloadError::InvalidConfig(
                    "outstanding_max must be at least 1".into(),
                ));
            }
            let per_ns = rate_iops / 1e9;
            let exp = Exp::new(per_ns)
                .map_err(|e| WorkloadError::InvalidConfig(format!("rate {rate_iops} IOPS: {e}")))?;
            Ok((Pacing::Open { outstanding_max }, Some(exp)))
        }
        Loop::Closed { outstanding } => {
            if outstanding == 0 {
                return Err(WorkloadError::InvalidConfig(
                    "closed loop needs at least 1 outstanding request".into(),
                ));
            }
            Ok((Pacing::Closed { outstanding }, None))
        }
    }
}

/// Open-loop Poisson clock: keeps the exact (fractional) time so that rounding
/// to whole nanoseconds never biases the rate.
#[derive(Clone, Debug)]
pub(crate) struct PoissonClock {
    exp: Exp<f64>,
    next_ns_f64: f64,
}

impl PoissonClock {
    pub(crate) fn start(exp: Exp<f64>, rng: &mut SmallRng) -> PoissonClock {
        let next_ns_f64 = exp.sample(rng);
        PoissonClock { exp, next_ns_f64 }
    }
    pub(crate) fn scheduled(&self) -> Nanos {
        Nanos(self.next_ns_f64 as u64)
    }
    pub(crate) fn advance(&mut self, rng: &mut SmallRng) {
        self.next_ns_f64 += self.exp.sample(rng);
    }

    /// The gate's view of the pending arrival: its time in open loop (a
    /// clock), and a placeholder in closed loop (the generator never runs dry).
    pub(crate) fn gate_time(clock: &Option<PoissonClock>) -> Option<Nanos> {
        Some(clock.as_ref().map_or(Nanos::ZERO, PoissonClock::scheduled))
    }
}

pub struct RandomWorkload {
    config: RandomConfig,
    rng: SmallRng,
    gate: Gate,
    clock: Option<PoissonClock>,
    blocks: u64,
    next_id: u64,
}

impl RandomWorkload {
    pub fn new(config: RandomConfig, seed: u64) -> Result<RandomWorkload, WorkloadError> {
        if config.footprint_bytes == 0 || config.footprint_bytes & (BLOCK_BYTES - 1) != 0 {
            return Err(WorkloadError::InvalidConfig(format!(
                "footprint_bytes {} must be a positive multiple of {BLOCK_BYTES}",
                config.footprint_bytes
            )));
        }
        if !(0.0..=1.0).contains(&config.read_fraction) {
            return Err(WorkloadError::InvalidConfig(format!(
                "read_fraction {} must be within [0, 1]",
                config.read_fraction
            )));
        }
        config.issuers.validate()?;
        let (pacing, exp) = loop_pacing(config.arrivals)?;
        let mut rng = SmallRng::seed_from_u64(seed);
        let clock = exp.map(|exp| PoissonClock::start(exp, &mut rng));
        Ok(RandomWorkload {
            blocks: config.footprint_bytes / BLOCK_BYTES,
            gate: Gate::new(pacing, config.stop),
            config,
            rng,
            clock,
            next_id: 0,
        })
    }

    fn scheduled(&self) -> Option<Nanos> {
        PoissonClock::gate_time(&self.clock)
    }
}

impl Workload for RandomWorkload {
    fn next_arrival(&self) -> Option<Nanos> {
        self.gate.next_time(self.scheduled())
    }

    fn poll(&mut self, now: Nanos) -> Option<IoRequest> {
        let scheduled = self.scheduled();
        if !self.gate.ready(now, scheduled) {
            return None;
        }
        self.gate.on_issue(scheduled);
        let block = self.rng.gen_range(0..self.blocks);
        let kind = if self.config.read_fraction > 0.0
            && self.rng.gen::<f64>() < self.config.read_fraction
        {
            ReqKind::Read
        } else {
            ReqKind::Write
        };
        if let Some(clock) = &mut self.clock {
            clock.advance(&mut self.rng);
        }
        let is_write = kind == ReqKind::Write;
        let (issuer, sync) = self
            .config
            .issuers
            .draw(&mut self.rng, is_write)
            .unwrap_or((0, self.config.sync_writes && is_write));
        let id = self.next_id;
        self.next_id += 1;
        Some(IoRequest {
            id,
            volume: 0,
            kind,
            offset_bytes: block * BLOCK_BYTES,
            len_bytes: BLOCK_BYTES,
            sync,
            issuer,
        })
    }

    fn complete(&mut self, now: Nanos, id: u64) {
        debug_assert!(
            id < self.next_id,
            "completion of a request never handed out"
        );
        self.gate.on_complete(now);
    }

    fn finished(&self) -> bool {
        self.gate.finished(self.scheduled())
    }

    fn volume_sizes_bytes(&self) -> Vec<u64> {
        vec![self.config.footprint_bytes]
    }

    fn name(&self) -> String {
        let arrivals = match self.config.arrivals {
            Loop::Open { rate_iops, .. } => format!("open {rate_iops} IOPS"),
            Loop::Closed { outstanding } => format!("closed {outstanding} outstanding"),
        };
        format!(
            "random(footprint={} B, reads={}, {arrivals})",
            self.config.footprint_bytes, self.config.read_fraction
        )
    }

    fn stats(&self) -> WorkloadStats {
        self.gate.stats()
    }
}
