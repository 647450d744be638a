//! Response times of critical and other writes, apart, with their tails
//! (request-oriented admission is judged by what it does to the writes
//! requests wait on, and its cost to the others). A critical write is a sync
//! write of a critical issuer (hinted in the engine) or one marked critical.

use hdrhistogram::Histogram;
use wcache_core::time::Nanos;

/// Largest response time recorded exactly (longer ones count as this): 1000 s.
const RESPONSE_US_MAX: u64 = 1_000_000_000;

/// What one class of writes measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClassLatency {
    pub writes: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

/// Histograms of the measured writes, critical and other.
pub(crate) struct WriteClasses {
    critical: Histogram<u64>,
    other: Histogram<u64>,
}

impl WriteClasses {
    pub(crate) fn new() -> WriteClasses {
        let h = || Histogram::new_with_bounds(1, RESPONSE_US_MAX, 3).expect("valid bounds");
        WriteClasses {
            critical: h(),
            other: h(),
        }
    }

    pub(crate) fn record(&mut self, critical: bool, latency: Nanos) {
        let us = (latency.0 / 1000).clamp(1, RESPONSE_US_MAX);
        let h = if critical {
            &mut self.critical
        } else {
            &mut self.other
        };
        h.saturating_record(us);
    }

    /// (critical, other).
    pub(crate) fn report(&self) -> (ClassLatency, ClassLatency) {
        (summary(&self.critical), summary(&self.other))
    }
}

fn summary(h: &Histogram<u64>) -> ClassLatency {
    if h.is_empty() {
        return ClassLatency::default();
    }
    let ms = |us: u64| us as f64 / 1000.0;
    ClassLatency {
        writes: h.len(),
        mean_ms: h.mean() / 1000.0,
        p50_ms: ms(h.value_at_quantile(0.5)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        p999_ms: ms(h.value_at_quantile(0.999)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_kept_apart_with_their_tails() {
        let mut c = WriteClasses::new();
        for i in 1..=1000u64 {
            c.record(true, Nanos(i * 1000));
        }
        c.record(false, Nanos(5_000_000));
        let (critical, other) = c.report();
        assert_eq!(critical.writes, 1000);
        assert!((critical.p50_ms - 0.5).abs() < 0.01, "{critical:?}");
        assert!((critical.p99_ms - 0.99).abs() < 0.01, "{critical:?}");
        assert_eq!(other.writes, 1);
        assert!((other.mean_ms - 5.0).abs() < 0.01, "{other:?}");
        assert_eq!(WriteClasses::new().report().0, ClassLatency::default());
    }
}
