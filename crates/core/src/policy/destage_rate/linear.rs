//! Linear threshold scheduling (Varma & Jacobson, as used by WOW §IV-E):
//! no destages below the low threshold (but a trickle that keeps a sequential
//! run going), full throttle at or above the high threshold, and a number of
//! outstanding destages rising linearly in between.

use super::{DestageRate, RateConfig, RateInput};

pub struct LinearThreshold {
    pub(super) config: RateConfig,
    /// Current thresholds as fractions of the cache; `high` moves when adaptive.
    pub(super) low: f64,
    pub(super) high: f64,
}

impl LinearThreshold {
    pub fn new(config: RateConfig) -> LinearThreshold {
        LinearThreshold {
            config,
            low: config.low_threshold_pct / 100.0,
            high: config.high_threshold_pct / 100.0,
        }
    }

    pub(super) fn target(&self, input: &RateInput) -> u32 {
        let cap = input.capacity_pages.max(1) as f64;
        let occ = input.occupancy_pages as f64 / cap;
        let max = self.config.destages_max;
        if occ >= self.high {
            return max;
        }
        if occ < self.low {
            if input.last_destage_sequential && input.next_candidate_sequential {
                return self.config.sequential_trickle;
            }
            return 0;
        }
        // Linear from 1 at the low threshold to MAXQUEUE at the high one.
        let span = (self.high - self.low).max(f64::EPSILON);
        let frac = (occ - self.low) / span;
        (1 + ((max - 1) as f64 * frac) as u32).min(max)
    }
}

impl DestageRate for LinearThreshold {
    fn name(&self) -> &'static str {
        "linear"
    }
    fn target_outstanding(&mut self, input: &RateInput) -> u32 {
        self.target(input)
    }
    fn destage_done(&mut self, _occupancy_pages: u64, _capacity_pages: u64) {}
    fn thresholds_pages(&self, capacity_pages: u64) -> (u64, u64) {
        let c = capacity_pages as f64;
        ((self.low * c) as u64, (self.high * c) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(occ: u64, seq: bool) -> RateInput {
        RateInput {
            occupancy_pages: occ,
            capacity_pages: 1000,
            last_destage_sequential: seq,
            next_candidate_sequential: seq,
        }
    }

    #[test]
    fn ramps_linearly() {
        let mut r = LinearThreshold::new(RateConfig::default());
        assert_eq!(r.target_outstanding(&input(799, false)), 0);
        assert_eq!(r.target_outstanding(&input(799, true)), 4);
        assert_eq!(r.target_outstanding(&input(800, false)), 1);
        assert_eq!(r.target_outstanding(&input(850, false)), 10);
        assert_eq!(r.target_outstanding(&input(899, false)), 19);
        assert_eq!(r.target_outstanding(&input(900, false)), 20);
        assert_eq!(r.target_outstanding(&input(1000, false)), 20);
    }
}
