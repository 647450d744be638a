//! One way for every counter and gauge of the engine and its policies to be
//! read: the engine and each policy report into a `MetricsVisitor`, so the
//! server's statistics, a metrics endpoint, the simulator and tests all read
//! the same numbers under the same names. Reporting never changes state.

/// What a metric's value means over time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// Only grows over the engine's life (requests, pages, nanoseconds).
    Counter,
    /// A level now (dirty pages, thresholds, requests in flight).
    Gauge,
}

/// Receives metrics. Names are snake_case with the unit last where there is
/// one (`stall_ns_total`, `dirty_pages`), unique across the engine and its
/// policies (policies prefix theirs with their family: `admission_…`).
pub trait MetricsVisitor {
    fn metric(&mut self, kind: MetricKind, name: &'static str, help: &'static str, value: u64);
}

/// A visitor that keeps every metric in report order (tests, dumps).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetricList {
    pub metrics: Vec<(MetricKind, &'static str, &'static str, u64)>,
}

impl MetricList {
    pub fn get(&self, name: &str) -> Option<u64> {
        self.metrics.iter().find(|m| m.1 == name).map(|m| m.3)
    }
}

impl MetricsVisitor for MetricList {
    fn metric(&mut self, kind: MetricKind, name: &'static str, help: &'static str, value: u64) {
        self.metrics.push((kind, name, help, value));
    }
}
