//! A running cache's counters, for a thread that reports them while it serves.

use std::sync::Arc;

use wcache_core::Stats;

use crate::driver::{Driver, DriverStats};

/// Counters of a running cache, for a thread that reports them while it
/// serves (cheap to clone).
#[derive(Clone)]
pub struct Monitor {
    pub(super) driver: Arc<Driver>,
}

impl Monitor {
    pub fn stats(&self) -> DriverStats {
        self.driver.stats()
    }
    /// The engine's counters (what it decided and issued).
    pub fn engine_stats(&self) -> Stats {
        self.driver.engine_stats()
    }
    pub fn dirty_pages(&self) -> u64 {
        self.driver.dirty_pages()
    }
}
