//! When may the next request go out: the pacing shared by every workload.
//!
//! Generators decide *what* a request is; this gate decides *when* it may be
//! handed out, so open loop, closed loop, the outstanding bound, the request
//! limit and the end time behave identically for synthetic workloads and trace
//! replay. It never allocates and never looks at request contents.

use wcache_core::time::Nanos;

use super::{Stop, WorkloadStats};

/// Outstanding-request bound used when an open-loop configuration gives none.
pub const OUTSTANDING_MAX_DEFAULT: u64 = 4096;

/// How requests are released, independent of who generates them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pacing {
    /// Arrivals at generator-scheduled times, at most `outstanding_max` in flight;
    /// past the bound arrivals are held back and go out late.
    Open { outstanding_max: u64 },
    /// `outstanding` requests in flight; each completion releases the next at once.
    Closed { outstanding: u64 },
}

#[derive(Clone, Debug)]
pub(crate) struct Gate {
    pacing: Pacing,
    stop: Stop,
    /// Handed out and not yet completed.
    outstanding: u64,
    /// Closed loop: requests released by completions (or the start) and not yet handed out.
    available: u64,
    /// Closed loop: when the oldest of `available` became available.
    available_at: Nanos,
    /// Open loop: a slot freed at this instant while the bound held arrivals back;
    /// an arrival scheduled earlier goes out at this time instead.
    released_at: Nanos,
    /// Closed loop: a completion at or after `stop.end` stopped the loop.
    stopped: bool,
    stats: WorkloadStats,
}

impl Gate {
    pub(crate) fn new(pacing: Pacing, stop: Stop) -> Gate {
        let available = match pacing {
            Pacing::Closed { outstanding } => outstanding,
            Pacing::Open { .. } => 0,
        };
        Gate {
            pacing,
            stop,
            outstanding: 0,
            available,
            available_at: Nanos::ZERO,
            released_at: Nanos::ZERO,
            stopped: false,
            stats: WorkloadStats::default(),
        }
    }

    fn limit_reached(&self) -> bool {
        match self.stop.requests_max {
            Some(max) => self.stats.requests_issued >= max,
            None => false,
        }
    }

    /// When the pending request may go out. `scheduled` is its open-loop
    /// arrival time (ignored in closed loop); `None` means the generator has
    /// nothing more to offer.
    pub(crate) fn next_time(&self, scheduled: Option<Nanos>) -> Option<Nanos> {
        if self.limit_reached() {
            return None;
        }
        match self.pacing {
            Pacing::Open { outstanding_max } => {
                let scheduled = scheduled?;
                if let Some(end) = self.stop.end {
                    if scheduled >= end {
                        return None;
                    }
                }
                if self.outstanding >= outstanding_max {
                    return None;
                }
                Some(scheduled.max(self.released_at))
            }
            Pacing::Closed { .. } => {
                scheduled?;
                if self.stopped || self.available == 0 {
                    return None;
                }
                Some(self.available_at)
            }
        }
    }

    /// True when `next_time` has come by `now`.
    pub(crate) fn ready(&self, now: Nanos, scheduled: Option<Nanos>) -> bool {
        match self.next_time(scheduled) {
            Some(t) => t <= now,
            None => false,
        }
    }

    /// Account for one request handed out; call only after `ready` said yes.
    pub(crate) fn on_issue(&mut self, scheduled: Option<Nanos>) {
        debug_assert!(!self.limit_reached());
        self.outstanding += 1;
        self.stats.requests_issued += 1;
        match self.pacing {
            Pacing::Open { .. } => {
                let scheduled = scheduled.unwrap_or(Nanos::ZERO);
                if self.released_at > scheduled {
                    self.stats.arrivals_delayed += 1;
                    self.stats.arrival_delay_total_ns += (self.released_at - scheduled).0;
                }
            }
            Pacing::Closed { .. } => {
                debug_assert!(self.available > 0);
                self.available -= 1;
            }
        }
    }

    pub(crate) fn on_complete(&mut self, now: Nanos) {
        debug_assert!(
            self.outstanding > 0,
            "completion without an outstanding request"
        );
        self.stats.requests_completed += 1;
        match self.pacing {
            Pacing::Open { outstanding_max } => {
                if self.outstanding >= outstanding_max {
                    self.released_at = self.released_at.max(now);
                }
            }
            Pacing::Closed { .. } => {
                if let Some(end) = self.stop.end {
                    if now >= end {
                        self.stopped = true;
                    }
                }
                if self.available == 0 {
                    self.available_at = now;
                }
                self.available += 1;
            }
        }
        self.outstanding = self.outstanding.saturating_sub(1);
    }

    /// No request will be handed out again. `scheduled` as for `next_time`.
    pub(crate) fn finished(&self, scheduled: Option<Nanos>) -> bool {
        let Some(scheduled) = scheduled else {
            return true;
        };
        if self.limit_reached() || self.stopped {
            return true;
        }
        match (self.pacing, self.stop.end) {
            (Pacing::Open { .. }, Some(end)) => scheduled >= end,
            _ => false,
        }
    }

    pub(crate) fn stats(&self) -> WorkloadStats {
        self.stats
    }
}
