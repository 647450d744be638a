//! Destage RATE: how many destages to keep outstanding, from how full the
//! cache is (WOW paper §IV-E). Occupancy is counted in dirty pages.

mod adaptive;
mod linear;

pub use adaptive::AdaptiveThreshold;
pub use linear::LinearThreshold;

use thiserror::Error;

pub use super::registry::UnknownPolicy;
use super::registry::{Entry, Registry};

/// The paper's defaults, as named configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateConfig {
    /// MAXQUEUE: most destage requests outstanding at once.
    pub destages_max: u32,
    /// Below this occupancy (percent of the cache) destaging stops.
    pub low_threshold_pct: f64,
    /// At or above this occupancy destaging goes full throttle.
    pub high_threshold_pct: f64,
    /// Outstanding destages kept below the low threshold while a sequential run lasts.
    pub sequential_trickle: u32,
    /// Adaptive high threshold: the occupancy it aims at...
    pub desired_occupancy_pct: f64,
    /// ...and the lowest it may go.
    pub high_threshold_floor_pct: f64,
}

impl Default for RateConfig {
    fn default() -> Self {
        RateConfig {
            destages_max: 20,
            low_threshold_pct: 80.0,
            high_threshold_pct: 90.0,
            sequential_trickle: 4,
            desired_occupancy_pct: 90.0,
            high_threshold_floor_pct: 10.0,
        }
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum RateConfigError {
    #[error("destages_max = 0: at least one destage must be allowed")]
    NoDestages,
    #[error("destages_max = {0}: at most {DESTAGES_MAX_LIMIT} destages outstanding")]
    TooManyDestages(u32),
    #[error("thresholds out of order: need 0 <= low_threshold_pct ({low}) < high_threshold_pct ({high}) <= 100")]
    ThresholdOrder { low: f64, high: f64 },
    #[error("sequential_trickle = {trickle} exceeds destages_max = {max}")]
    Trickle { trickle: u32, max: u32 },
    #[error("adaptive thresholds out of order: need 0 < high_threshold_floor_pct ({floor}) <= desired_occupancy_pct ({desired}) <= 100")]
    Adaptive { floor: f64, desired: f64 },
}

/// Most destages a configuration may keep outstanding (the command line,
/// the config file and `wcache set` alike).
pub const DESTAGES_MAX_LIMIT: u32 = 65_536;

impl RateConfig {
    pub fn validate(&self) -> Result<(), RateConfigError> {
        if self.destages_max == 0 {
            return Err(RateConfigError::NoDestages);
        }
        if self.destages_max > DESTAGES_MAX_LIMIT {
            return Err(RateConfigError::TooManyDestages(self.destages_max));
        }
        let (low, high) = (self.low_threshold_pct, self.high_threshold_pct);
        if !(low >= 0.0 && low < high && high <= 100.0) {
            return Err(RateConfigError::ThresholdOrder { low, high });
        }
        if self.sequential_trickle > self.destages_max {
            return Err(RateConfigError::Trickle {
                trickle: self.sequential_trickle,
                max: self.destages_max,
            });
        }
        let (floor, desired) = (self.high_threshold_floor_pct, self.desired_occupancy_pct);
        if !(floor > 0.0 && floor <= desired && desired <= 100.0) {
            return Err(RateConfigError::Adaptive { floor, desired });
        }
        Ok(())
    }
}

/// What the rate policy is told each time the engine considers destaging.
#[derive(Clone, Copy, Debug)]
pub struct RateInput {
    pub occupancy_pages: u64,
    pub capacity_pages: u64,
    /// The previous destage was of a group marked sequential.
    pub last_destage_sequential: bool,
    /// The group under the destage pointer is marked sequential.
    pub next_candidate_sequential: bool,
}

pub trait DestageRate: Send {
    fn name(&self) -> &'static str;
    /// How many destages should be outstanding now.
    fn target_outstanding(&mut self, input: &RateInput) -> u32;
    /// A destage request completed; `occupancy_pages` is the occupancy after it.
    fn destage_done(&mut self, occupancy_pages: u64, capacity_pages: u64);
    /// Current thresholds in pages (low, high), for reports.
    fn thresholds_pages(&self, capacity_pages: u64) -> (u64, u64);
}

/// The destage rates; a new one adds its line here.
pub static DESTAGE_RATES: Registry<dyn DestageRate, RateConfig> = Registry {
    family: "destage rate",
    entries: &[
        Entry {
            name: "linear",
            aliases: &[],
            help: "WOW's linear threshold between the low and high watermarks",
            build: |c| Box::new(LinearThreshold::new(c)),
        },
        Entry {
            name: "adaptive",
            aliases: &[],
            help: "the linear threshold with WOW's adaptive high watermark",
            build: |c| Box::new(AdaptiveThreshold::new(c)),
        },
    ],
};

pub fn build_destage_rate(
    name: &str,
    config: RateConfig,
) -> Result<Box<dyn DestageRate>, UnknownPolicy> {
    DESTAGE_RATES.build(name, config)
}
