//! The statistics of a running cache at one moment, as one value: the
//! engine's counters and gauges (through its `MetricsVisitor`, names and
//! help as the engine gives them), the driver's counters, and per volume
//! and request kind the request count and response-time histogram. It
//! exists so that there is one source of truth: the control socket sends
//! it, the metrics endpoint renders it, the exit summary prints it. It
//! must never be assembled from anything but these sources.

use serde::{Deserialize, Serialize};
use wcache_core::metrics::{MetricKind, MetricsVisitor};

use crate::driver::DriverStats;
use crate::ops::latency::{KindHistogram, RequestClass};

/// Upper bounds of the response-time buckets reported, in seconds
/// (Prometheus `le`; the last bucket, `+Inf`, is the count).
pub const LATENCY_BUCKETS_S: [f64; 19] = [
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// One engine counter or gauge.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub name: String,
    /// `counter` (only grows) or `gauge` (a level now).
    pub kind: String,
    pub help: String,
    pub value: u64,
}

/// The requests of one kind on one volume.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestStats {
    pub export: String,
    /// read, write, write_zeroes, trim, flush.
    pub kind: String,
    pub count: u64,
    pub errors: u64,
    pub sum_seconds: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    /// (upper bound in seconds, requests at or under it), `LATENCY_BUCKETS_S`.
    pub buckets: Vec<(f64, u64)>,
}

impl RequestStats {
    pub(crate) fn new(export: &str, class: RequestClass, h: &KindHistogram) -> RequestStats {
        let hist = &h.histogram;
        let buckets = LATENCY_BUCKETS_S
            .iter()
            .map(|&le| {
                // Recorded in µs: a value counts under `le` when its bucket's
                // highest equivalent value is at most `le` (rounding up).
                let us = (le * 1e6) as u64;
                (le, hist.count_between(0, us))
            })
            .collect();
        RequestStats {
            export: export.to_string(),
            kind: class.name().to_string(),
            count: hist.len(),
            errors: h.errors,
            sum_seconds: h.sum_ns as f64 / 1e9,
            p50_us: hist.value_at_quantile(0.5),
            p90_us: hist.value_at_quantile(0.9),
            p99_us: hist.value_at_quantile(0.99),
            max_us: hist.max(),
            buckets,
        }
    }
}

/// Everything measured about a running cache, taken at one moment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub uptime_s: f64,
    /// Every engine counter and gauge, in the engine's report order.
    pub engine: Vec<Metric>,
    pub driver: DriverStats,
    /// Per volume, per request kind (every kind, even with no request).
    pub requests: Vec<RequestStats>,
    /// Per volume: its dirty pages and page hits.
    #[serde(default)]
    pub exports: Vec<ExportCounts>,
}

/// One volume's dirty pages and page hits, by export name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExportCounts {
    pub export: String,
    pub dirty_pages: u64,
    pub read_pages: u64,
    pub read_page_hits: u64,
    pub write_pages: u64,
    pub write_page_hits: u64,
}

impl ExportCounts {
    pub fn new(export: &str, c: &wcache_core::VolumeCounts) -> ExportCounts {
        ExportCounts {
            export: export.to_string(),
            dirty_pages: c.dirty_pages,
            read_pages: c.read_pages,
            read_page_hits: c.read_page_hits,
            write_pages: c.write_pages,
            write_page_hits: c.write_page_hits,
        }
    }
}

impl Snapshot {
    /// An engine counter or gauge by name.
    pub fn engine_value(&self, name: &str) -> Option<u64> {
        self.engine.iter().find(|m| m.name == name).map(|m| m.value)
    }

    /// Requests of `kind` over every volume.
    pub fn request_count(&self, kind: &str) -> u64 {
        self.requests
            .iter()
            .filter(|r| r.kind == kind)
            .map(|r| r.count)
            .sum()
    }
}

/// Collects the engine's metrics into `Metric`s.
#[derive(Default)]
pub(crate) struct Collect(pub Vec<Metric>);

impl MetricsVisitor for Collect {
    fn metric(&mut self, kind: MetricKind, name: &'static str, help: &'static str, value: u64) {
        self.0.push(Metric {
            name: name.to_string(),
            kind: match kind {
                MetricKind::Counter => "counter",
                MetricKind::Gauge => "gauge",
            }
            .to_string(),
            help: help.to_string(),
            value,
        });
    }
}
