//! Adaptive high threshold (WOW §IV-E): linear threshold scheduling whose high
//! threshold backs off when occupancy overshoots the desired level and
//! advances when it stays below it; low = high - (default band, 10 %).

use super::linear::LinearThreshold;
use super::{DestageRate, RateConfig, RateInput};

pub struct AdaptiveThreshold {
    linear: LinearThreshold,
    /// high - low, as a fraction of the cache.
    band: f64,
    desired: f64,
    floor: f64,
    /// maxOccupancyObserved, as a fraction.
    max_observed: f64,
    /// The occupancy was at or above `high` since the last reset.
    above_high: bool,
    destages_since_reset: u64,
    /// resetInterval: destages between the two latest resets.
    reset_interval: Option<u64>,
}

impl AdaptiveThreshold {
    pub fn new(config: RateConfig) -> AdaptiveThreshold {
        let linear = LinearThreshold::new(config);
        AdaptiveThreshold {
            band: linear.high - linear.low,
            desired: config.desired_occupancy_pct / 100.0,
            floor: config.high_threshold_floor_pct / 100.0,
            linear,
            max_observed: 0.0,
            above_high: false,
            destages_since_reset: 0,
            reset_interval: None,
        }
    }

    fn set_high(&mut self, high: f64) {
        let high = high.clamp(self.floor, self.desired);
        self.linear.high = high;
        self.linear.low = (high - self.band).max(0.0);
    }

    fn reset(&mut self, occ: f64) {
        self.reset_interval = Some(self.destages_since_reset);
        self.destages_since_reset = 0;
        self.max_observed = occ;
    }

    fn observe(&mut self, occ: f64) {
        self.max_observed = self.max_observed.max(occ);
        if occ >= self.linear.high {
            self.above_high = true;
        } else if self.above_high {
            // Occupancy dropped below the high threshold: back off by the overshoot.
            self.above_high = false;
            let overshoot = (self.max_observed - self.desired).max(0.0);
            self.set_high(self.linear.high - overshoot);
            self.reset(occ);
        }
    }

    pub fn high_fraction(&self) -> f64 {
        self.linear.high
    }
}

impl DestageRate for AdaptiveThreshold {
    fn name(&self) -> &'static str {
        "adaptive"
    }
    fn target_outstanding(&mut self, input: &RateInput) -> u32 {
        self.observe(input.occupancy_pages as f64 / input.capacity_pages.max(1) as f64);
        self.linear.target(input)
    }
    fn destage_done(&mut self, occupancy_pages: u64, capacity_pages: u64) {
        let occ = occupancy_pages as f64 / capacity_pages.max(1) as f64;
        self.observe(occ);
        self.destages_since_reset += 1;
        // Before the first reset the interval is unknown: use one cache's worth.
        let interval = self.reset_interval.unwrap_or(capacity_pages).max(1);
        if self.destages_since_reset >= interval && self.max_observed < self.desired {
            let gap = self.desired - self.max_observed;
            self.set_high(self.linear.high + gap);
            self.reset(occ);
        }
    }
    fn thresholds_pages(&self, capacity_pages: u64) -> (u64, u64) {
        self.linear.thresholds_pages(capacity_pages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(occ: u64) -> RateInput {
        RateInput {
            occupancy_pages: occ,
            capacity_pages: 1000,
            last_destage_sequential: false,
            next_candidate_sequential: false,
        }
    }

    #[test]
    fn backs_off_after_overshoot_and_advances_after_undershoot() {
        let mut r = AdaptiveThreshold::new(RateConfig::default());
        r.target_outstanding(&input(1000)); // full: overshoot of 10 %
        r.target_outstanding(&input(850)); // drops below high
        assert!((r.high_fraction() - 0.80).abs() < 1e-9);
        assert_eq!(r.thresholds_pages(1000), (700, 800));
        // Stays at 75 % for a long time: high advances by 90 - 85 (max seen).
        for _ in 0..2000 {
            r.destage_done(750, 1000);
        }
        assert!(r.high_fraction() > 0.80);
        assert!(r.high_fraction() <= 0.90);
    }

    /// The rule as written ratchets in overload (docs/engine.md): each fill to
    /// 100 % followed by a dip below high lowers high by the 10-point
    /// overshoot, and no number of destages raises it while the maximum seen
    /// stays at 100 %. Once a whole interval stays under the desired level,
    /// it rises again.
    #[test]
    fn ratchets_down_in_overload_and_recovers_when_the_load_falls() {
        let mut r = AdaptiveThreshold::new(RateConfig::default());
        let mut highs = Vec::new();
        for _ in 0..4 {
            r.target_outstanding(&input(1000)); // full
            let high = (r.high_fraction() * 1000.0).round() as u64;
            r.target_outstanding(&input(high - 5)); // just under high
            for _ in 0..5000 {
                r.destage_done(1000, 1000); // full again: the maximum stays 100 %
            }
            highs.push((r.high_fraction() * 100.0).round() as u32);
        }
        assert_eq!(highs, vec![80, 70, 60, 50]);
        // The load falls: occupancy stays at 40 %, under high and desired.
        r.target_outstanding(&input(400));
        for _ in 0..5000 {
            r.destage_done(400, 1000);
        }
        assert!(
            r.high_fraction() > 0.5,
            "high rose again: {}",
            r.high_fraction()
        );
    }

    #[test]
    fn never_below_floor() {
        let mut r = AdaptiveThreshold::new(RateConfig::default());
        for _ in 0..50 {
            r.target_outstanding(&input(1000));
            r.target_outstanding(&input(0));
        }
        assert!((r.high_fraction() - 0.10).abs() < 1e-9);
    }
}
