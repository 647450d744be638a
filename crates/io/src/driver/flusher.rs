//! The periodic cache flush of persist-on-flush: a write acknowledged
//! without FUA becomes durable at the next FLUSH or FUA, or within
//! `DriverConfig::flush_interval`, whichever comes first
//! (`docs/consistency.md`, "Persistence modes"). One thread sleeps for the
//! interval and flushes the cache device when page writes completed since
//! its last look. It must never be the only thing a FLUSH or FUA waits
//! for: those run their own flush.

use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use super::Shared;

/// Wakes the flusher thread early to stop.
#[derive(Default)]
pub(super) struct FlusherStop {
    stopping: Mutex<bool>,
    wake: Condvar,
}

impl FlusherStop {
    pub(super) fn stop(&self) {
        *self.stopping.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.wake.notify_all();
    }
}

impl Shared {
    /// Every `interval`: if persist-on-flush is on and page writes were
    /// made since the last round, one group-committed cache flush (errors
    /// are counted and logged like any; the next FLUSH reports them).
    pub(super) fn flusher_thread(&self, interval: Duration) {
        // From 0, not the counter's value now: writes made before this
        // thread ran are covered too.
        let mut seen = 0;
        loop {
            {
                let stopping = self
                    .flusher
                    .stopping
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                let (stopping, _) = self
                    .flusher
                    .wake
                    .wait_timeout_while(stopping, interval, |s| !*s)
                    .unwrap_or_else(|p| p.into_inner());
                if *stopping {
                    return;
                }
            }
            let now = self.counters.cache_page_writes.load(Ordering::Relaxed);
            if now == seen || !self.persist_on_flush.load(Ordering::Relaxed) {
                continue;
            }
            // Every write counted before this flush starts is covered by it.
            seen = now;
            if let Err(e) = self.make_durable(&self.cache, true) {
                self.note_error(true, &e);
            }
        }
    }
}
