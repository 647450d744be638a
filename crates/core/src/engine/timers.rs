//! Timers: the engine's set deadlines, one per kind. `poll_timeout` is the
//! earliest of these and of the deadlines derived from state (the next age
//! period, the idle drain: `staleness`); `handle_timeout` runs each due one.

use crate::time::Nanos;

/// What a deadline is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timer {
    /// Destaging paused after a backing error resumes.
    DestageRetry,
    /// Batched slot frees (persistent caches) go out.
    Frees,
    /// Journaled write-back's open transaction reaches its commit age.
    Commit,
    /// Log mode: a batch write failed; it is written again from here.
    LogRetry,
}

#[derive(Default)]
pub(super) struct Timers([Option<Nanos>; 4]);

impl Timers {
    pub fn get(&self, t: Timer) -> Option<Nanos> {
        self.0[t as usize]
    }
    pub fn set(&mut self, t: Timer, at: Option<Nanos>) {
        self.0[t as usize] = at;
    }
    pub fn earliest(&self) -> Option<Nanos> {
        self.0.iter().flatten().min().copied()
    }
    /// Whether `t` is set and due at `now`.
    pub fn due(&self, t: Timer, now: Nanos) -> bool {
        self.get(t).is_some_and(|at| now >= at)
    }
}
