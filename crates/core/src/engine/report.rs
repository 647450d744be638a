//! Reports: every counter and gauge of the engine and its policies for a
//! metrics visitor, and the heap bytes of its metadata.

use super::*;

impl Engine {
    /// Report every counter and gauge of the engine and its policies, as of `now`.
    pub fn visit_metrics(&self, now: Nanos, v: &mut dyn MetricsVisitor) {
        self.stats.visit(v);
        self.visit_occupancy(v);
        self.visit_activity(now, v);
        self.admission.report(v);
        if let Some(j) = &self.journal {
            j.report(v);
        }
    }

    /// The gauges of what the cache holds: dirty, clean, free, thresholds.
    fn visit_occupancy(&self, v: &mut dyn MetricsVisitor) {
        let (low, high) = self.thresholds_pages();
        let gauges = [
        (
            "dirty_pages",
            "Pages newer in the cache than on the backing.",
            self.dirty_pages(),
        ),
        (
            "dirty_groups",
            "Write groups holding dirty pages.",
            self.dirty_groups() as u64,
        ),
        (
            "dirty_runs",
            "Runs of consecutive dirty pages within a write group: the destages a drain would issue.",
            self.dirty_runs(),
        ),
        (
            "clean_pages",
            "Clean cached pages (replaceable).",
            self.replacement.len() as u64,
        ),
        (
            "capacity_pages",
            "Page slots of the cache device.",
            self.capacity_pages(),
        ),
        (
            "free_slots",
            "Slots holding no page version.",
            self.slots.free_count(),
        ),
        (
            "destage_low_threshold_pages",
            "Dirty pages below which destaging stops.",
            low,
        ),
        (
            "destage_high_threshold_pages",
            "Dirty pages from which destaging runs at full rate.",
            high,
        ),
        ];
        for (name, help, value) in gauges {
            v.metric(MetricKind::Gauge, name, help, value);
        }
    }

    /// The gauges of what is going on: requests, stalls, destages, age.
    fn visit_activity(&self, now: Nanos, v: &mut dyn MetricsVisitor) {
        let gauges = [
        (
            "requests_in_flight",
            "Requests admitted or stalled, not yet answered.",
            self.reqs.live_count() as u64,
        ),
        (
            "stalled_requests",
            "Writes waiting for room.",
            self.stalled.len() as u64,
        ),
        (
            "destages_in_flight",
            "Destage requests outstanding.",
            self.destager.in_flight() as u64,
        ),
        (
            "dirty_age_ms",
            "Upper bound on the age of the oldest dirty page, one age period coarse: how far the backing lags the acknowledged writes.",
            self.dirty_age_ns(now) / 1_000_000,
        ),
        (
            "critical_issuers",
            "Issuers critical by a hint or an inheritance.",
            self.issuers.len() as u64,
        ),
        (
            "metadata_bytes",
            "Heap bytes of engine metadata.",
            self.metadata_bytes() as u64,
        ),
        ];
        for (name, help, value) in gauges {
            v.metric(MetricKind::Gauge, name, help, value);
        }
    }

    /// Heap bytes of all engine metadata (directory, groups, policies, queues).
    pub fn metadata_bytes(&self) -> usize {
        self.slots.heap_bytes()
            + self.dirty.heap_bytes()
            + self.ages.heap_bytes()
            + self.ordered.as_ref().map_or(0, Ordered::heap_bytes)
            + self.journal.as_ref().map_or(0, Journal::heap_bytes)
            + self.order.metadata_bytes()
            + self.replacement.metadata_bytes()
            + self.admission.metadata_bytes()
            + self
                .volumes
                .iter()
                .filter_map(|v| v.admission.as_ref())
                .map(|a| a.metadata_bytes())
                .sum::<usize>()
            + self.issuers.metadata_bytes()
            + self.writes.heap_bytes()
            + self.bypass_pages.heap_bytes()
            + self.reqs.heap_bytes()
            + self.held_pages.heap_bytes()
    }
}
