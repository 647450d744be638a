//! The statistics of a running cache at one moment, as one value: the
//! engine's counters and gauges (through its `MetricsVisitor`, names and
//! help as the engine gives them), the driver's counters, and per volume
//! and request kind the request count and response-time histogram, and
//! the front end's own counters and gauges where it has any (the mount's
//! held writes: `Operator::on_front_metrics`). It
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

/// The `q` quantile (0..=1), in microseconds, of the requests counted in
/// cumulative bucket list `later` but not in `earlier` (same bounds, in
/// seconds): linear within the bucket it falls in, as Prometheus's
/// `histogram_quantile` does; the last bound past it. None with no request.
pub fn interval_quantile_us(earlier: &[(f64, u64)], later: &[(f64, u64)], q: f64) -> Option<f64> {
    let count = |list: &[(f64, u64)], i: usize| list.get(i).map_or(0, |x| x.1);
    let total = later
        .last()?
        .1
        .saturating_sub(earlier.last().map_or(0, |x| x.1));
    if total == 0 {
        return None;
    }
    let want = q.clamp(0.0, 1.0) * total as f64;
    let mut below = (0.0, 0u64); // (lower bound, requests under it)
    for (i, &(le, _)) in later.iter().enumerate() {
        let n = count(later, i).saturating_sub(count(earlier, i));
        if n as f64 >= want && n > below.1 {
            let share = (want - below.1 as f64) / (n - below.1) as f64;
            return Some((below.0 + (le - below.0) * share) * 1e6);
        }
        below = (le, n);
    }
    Some(below.0 * 1e6)
}

/// Every request of `kind` over the exports of `snap`, as one cumulative
/// bucket list (the bounds of `LATENCY_BUCKETS_S`).
pub fn kind_buckets(snap: &Snapshot, kind: &str) -> Vec<(f64, u64)> {
    let mut out: Vec<(f64, u64)> = LATENCY_BUCKETS_S.iter().map(|&le| (le, 0)).collect();
    for r in snap.requests.iter().filter(|r| r.kind == kind) {
        for (slot, (_, n)) in out.iter_mut().zip(&r.buckets) {
            slot.1 += n;
        }
    }
    out
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
    /// The front end's own counters and gauges (empty where it has none).
    #[serde(default)]
    pub front: Vec<Metric>,
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
    #[serde(default)]
    pub destaged_pages: u64,
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
            destaged_pages: c.destaged_pages,
        }
    }
}

impl Snapshot {
    /// An engine counter or gauge by name.
    pub fn engine_value(&self, name: &str) -> Option<u64> {
        self.engine.iter().find(|m| m.name == name).map(|m| m.value)
    }

    /// A front end's counter or gauge by name.
    pub fn front_value(&self, name: &str) -> Option<u64> {
        self.front.iter().find(|m| m.name == name).map(|m| m.value)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_quantile_interpolates_within_its_bucket() {
        let earlier = [(0.001, 10), (0.01, 10), (0.1, 10)];
        // 100 new requests: 50 under 1 ms, 40 more under 10 ms, 10 more under 100 ms.
        let later = [(0.001, 60), (0.01, 100), (0.1, 110)];
        let q = |q| interval_quantile_us(&earlier, &later, q).expect("requests");
        assert!((q(0.5) - 1000.0).abs() < 1e-6, "{}", q(0.5));
        assert!((q(0.25) - 500.0).abs() < 1e-6, "{}", q(0.25));
        // 0.9: the 90th request, the last of the second bucket.
        assert!((q(0.9) - 10_000.0).abs() < 1e-6, "{}", q(0.9));
        // 0.95: halfway through the third.
        assert!((q(0.95) - 55_000.0).abs() < 1e-6, "{}", q(0.95));
        assert_eq!(interval_quantile_us(&later, &later, 0.5), None);
    }
}
