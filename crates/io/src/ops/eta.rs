//! The rate and ETA of an online drain. The ETA counts destages rather
//! than pages — dirty write groups left over the groups drained per second —
//! since a destage costs about one positioning on a disk whatever the pages
//! it carries, and it averages over the last 30 s, since the rate a shared
//! machine gives an emulated disk swings by a factor of two from one 5-s
//! window to the next (`scripts/flush-eta.sh` measures the result; the
//! drain itself is one sweep, `Engine::start_drain`). The rate shown is the
//! pages drained per second over the last 5 s. Pure: time is an argument.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::ops::operator::FlushProgress;

/// The window the rate shown is measured over.
const RATE_WINDOW: Duration = Duration::from_secs(5);
/// The window the ETA's rate is measured over.
const ETA_WINDOW: Duration = Duration::from_secs(30);

/// One sample: when, dirty pages, dirty groups.
type Sample = (Instant, u64, u64);

pub(crate) struct DrainMeter {
    start: Instant,
    dirty_start: u64,
    destaged_start: u64,
    window: VecDeque<Sample>,
}

impl DrainMeter {
    pub(crate) fn new(now: Instant, (dirty, groups): (u64, u64), destaged: u64) -> DrainMeter {
        DrainMeter {
            start: now,
            dirty_start: dirty,
            destaged_start: destaged,
            window: VecDeque::from([(now, dirty, groups)]),
        }
    }

    pub(crate) fn sample(
        &mut self,
        now: Instant,
        (dirty_pages, dirty_groups): (u64, u64),
        destaged_pages: u64,
    ) -> FlushProgress {
        self.window.push_back((now, dirty_pages, dirty_groups));
        while self.window.len() > 2 && now - self.window[1].0 >= ETA_WINDOW {
            self.window.pop_front();
        }
        let recent = self
            .window
            .iter()
            .find(|w| now - w.0 <= RATE_WINDOW)
            .filter(|w| w.0 < now)
            .or(self.window.front())
            .copied();
        let per_s = |(then, before): (Instant, u64), after: u64| {
            let seconds = now.saturating_duration_since(then).as_secs_f64();
            if seconds > 0.0 {
                (before as f64 - after as f64) / seconds
            } else {
                0.0
            }
        };
        let (then, pages_then, _) = recent.unwrap_or((now, dirty_pages, dirty_groups));
        let rate = per_s((then, pages_then), dirty_pages);
        let (oldest, _, groups_then) = self.window[0];
        let group_rate = per_s((oldest, groups_then), dirty_groups);
        let eta_s = if dirty_pages == 0 {
            Some(0.0)
        } else if group_rate > 0.0 && dirty_groups > 0 {
            Some(dirty_groups as f64 / group_rate)
        } else {
            (rate > 0.0).then(|| dirty_pages as f64 / rate)
        };
        FlushProgress {
            dirty_pages,
            dirty_groups,
            dirty_pages_start: self.dirty_start,
            destaged_pages: destaged_pages.saturating_sub(self.destaged_start),
            rate_pages_per_s: rate,
            eta_s,
            elapsed_s: now.saturating_duration_since(self.start).as_secs_f64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A drain of `groups` dirty groups at `groups_per_s(t)`, whose groups
    /// hold `dense` pages each for the first `dense_share` of them and 1
    /// page after; sampled 5 times a second. Returns (elapsed, ETA), total.
    fn drain(
        groups: u64,
        groups_per_s: impl Fn(f64) -> f64,
        dense: u64,
        dense_share: f64,
    ) -> (Vec<(f64, f64)>, f64) {
        let dense_groups = (groups as f64 * dense_share) as u64;
        let pages_of = |left: u64| {
            let sparse = left.min(groups - dense_groups);
            sparse + (left - sparse) * dense
        };
        let t0 = Instant::now();
        let mut meter = DrainMeter::new(t0, (pages_of(groups), groups), 0);
        let (mut left, mut t, dt) = (groups as f64, 0.0, 0.2);
        let mut out = Vec::new();
        while left > 0.0 {
            left = (left - groups_per_s(t) * dt).max(0.0);
            t += dt;
            let g = left.ceil() as u64;
            let p = meter.sample(t0 + Duration::from_secs_f64(t), (pages_of(g), g), 0);
            out.push((t, p.eta_s.expect("an ETA")));
        }
        (out, t)
    }

    fn errors(out: &[(f64, f64)], total: f64, shares: &[f64]) -> Vec<f64> {
        shares
            .iter()
            .map(|share| {
                let (t, eta) = *out
                    .iter()
                    .find(|(t, _)| *t >= share * total)
                    .expect("sampled");
                (eta - (total - t)) / (total - t)
            })
            .collect()
    }

    #[test]
    fn the_eta_counts_destages_so_a_sparser_tail_does_not_fool_it() {
        // The dense first part drains 3 times as many pages per second.
        let (out, total) = drain(12_000, |_| 200.0, 3, 0.3);
        for e in errors(&out, total, &[0.1, 0.25, 0.5, 0.75]) {
            assert!(e.abs() < 0.05, "error {e:+.3}");
        }
    }

    #[test]
    fn a_rate_that_swings_is_averaged() {
        // 100 and 300 groups/s by turns, 5 s each (a shared machine).
        let swing = |t: f64| {
            if ((t / 5.0) as u64).is_multiple_of(2) {
                100.0
            } else {
                300.0
            }
        };
        let (out, total) = drain(30_000, swing, 1, 0.0);
        for e in errors(&out, total, &[0.25, 0.5, 0.75]) {
            assert!(e.abs() < 0.2, "error {e:+.3}");
        }
    }

    #[test]
    fn no_progress_gives_no_eta_and_nothing_panics() {
        let t0 = Instant::now();
        let mut meter = DrainMeter::new(t0, (100, 10), 0);
        for i in 0..20u64 {
            let p = meter.sample(t0 + Duration::from_millis(200 * i), (100 + i, 10), 0);
            assert_eq!(p.eta_s, None);
        }
        assert_eq!(meter.sample(t0, (0, 0), 0).eta_s, Some(0.0));
    }
}
