//! The rate and ETA of an online drain. The ETA counts destages rather
//! than pages or groups: a destage costs about one positioning on a disk
//! whatever the pages it carries, and a drain issues one per run of
//! consecutive dirty pages in a group (`Engine::dirty_runs`). It models the
//! writes that go on meanwhile: each adds a destage unless it lands on a
//! page already dirty, and random writes find fewer dirty pages to land on
//! as the drain goes, so they add destages faster and faster; a rate seen
//! early cannot foresee that, the model can (`eta`). Its rates are averaged
//! over the last 30 s, since the rate a shared machine gives an emulated
//! disk swings by a factor of two from one 5-s window to the next
//! (`scripts/flush-eta.sh` measures the result). The rate shown is the
//! pages drained per second over the last 5 s. Pure: time is an argument.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use wcache_core::Engine;

use crate::ops::operator::FlushProgress;

/// The window the rate shown is measured over.
const RATE_WINDOW: Duration = Duration::from_secs(5);
/// The window the ETA's rates are measured over.
const ETA_WINDOW: Duration = Duration::from_secs(30);

/// What the meter reads from the engine at each sample, of one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DrainSample {
    pub dirty_pages: u64,
    pub dirty_groups: u64,
    pub dirty_runs: u64,
    pub destaged_pages: u64,
    /// Destages issued (`Stats::destages`).
    pub destages: u64,
    /// Random writes' (request, group) pairs that found a page of theirs
    /// dirty (`Stats::random_write_page_hits`).
    pub random_hits: u64,
}

impl DrainSample {
    pub(crate) fn of(engine: &Engine) -> DrainSample {
        let s = engine.stats();
        DrainSample {
            dirty_pages: engine.dirty_pages(),
            dirty_groups: engine.dirty_groups() as u64,
            dirty_runs: engine.dirty_runs(),
            destaged_pages: s.destaged_pages,
            destages: s.destages,
            random_hits: s.random_write_page_hits,
        }
    }
}

pub(crate) struct DrainMeter {
    start: Instant,
    first: DrainSample,
    window: VecDeque<(Instant, DrainSample)>,
}

impl DrainMeter {
    pub(crate) fn new(now: Instant, first: DrainSample) -> DrainMeter {
        DrainMeter {
            start: now,
            first,
            window: VecDeque::from([(now, first)]),
        }
    }

    pub(crate) fn sample(&mut self, now: Instant, s: DrainSample) -> FlushProgress {
        self.window.push_back((now, s));
        while self.window.len() > 2 && now - self.window[1].0 >= ETA_WINDOW {
            self.window.pop_front();
        }
        let (then, pages_then) = self
            .window
            .iter()
            .find(|w| now - w.0 <= RATE_WINDOW && w.0 < now)
            .or(self.window.front())
            .map_or((now, s.dirty_pages), |w| (w.0, w.1.dirty_pages));
        let seconds = now.saturating_duration_since(then).as_secs_f64();
        let rate = if seconds > 0.0 {
            (pages_then as f64 - s.dirty_pages as f64) / seconds
        } else {
            0.0
        };
        let eta_s = if s.dirty_pages == 0 {
            Some(0.0)
        } else {
            let mean_runs = self
                .window
                .iter()
                .map(|w| w.1.dirty_runs as f64)
                .sum::<f64>()
                / self.window.len() as f64;
            eta(self.window[0], (now, s), mean_runs)
        };
        FlushProgress {
            dirty_pages: s.dirty_pages,
            dirty_groups: s.dirty_groups,
            dirty_pages_start: self.first.dirty_pages,
            destaged_pages: s.destaged_pages.saturating_sub(self.first.destaged_pages),
            rate_pages_per_s: rate,
            eta_s,
            elapsed_s: now.saturating_duration_since(self.start).as_secs_f64(),
        }
    }
}

/// Seconds until no page is dirty, from the rates between `old` and `new`
/// (`mean_runs`: the dirty runs averaged over that window), or none while
/// the drain cannot end at those rates.
///
/// The destages left, R (the dirty runs), fall by the destages issued, d a
/// second (steady: about one positioning each), and rise by the writes:
/// n a second, measured as d less the net fall of R. A write adds no
/// destage where it lands on a dirty page; a random write does so with the
/// odds of the dirty share of the space it writes over, so its hits, j a
/// second, shrink with R: j = k R, and the writes would add n + j a second
/// on a clean cache. So
///   dR/dt = -a - k R,  a = d - (n + j) = (net fall of R) - j,
/// which reaches 0 at T = ln(1 + k R / a) / k (T = R / a when k = 0: no
/// random write hits a dirty page). With a <= 0 the writes would outrun
/// the destages on a clean cache: R settles above 0.
fn eta(old: (Instant, DrainSample), new: (Instant, DrainSample), mean_runs: f64) -> Option<f64> {
    let dt = new.0.saturating_duration_since(old.0).as_secs_f64();
    if dt <= 0.0 {
        return None;
    }
    let (o, n) = (old.1, new.1);
    let per_s = |f: fn(&DrainSample) -> u64| f(&n).saturating_sub(f(&o)) as f64 / dt;
    let destages = per_s(|s| s.destages);
    let hits = per_s(|s| s.random_hits);
    let net_fall = (o.dirty_runs as f64 - n.dirty_runs as f64) / dt;
    let runs = n.dirty_runs as f64;
    let a = net_fall - hits;
    if destages <= 0.0 || runs == 0.0 || a <= 0.0 {
        return None;
    }
    let k = if mean_runs > 0.0 {
        hits / mean_runs
    } else {
        0.0
    };
    if k * runs < 1e-9 * a {
        return Some(runs / a);
    }
    Some((k * runs / a).ln_1p() / k)
}

#[cfg(test)]
mod tests;
