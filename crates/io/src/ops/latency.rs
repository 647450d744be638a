//! Response time of every request a volume answers, per request kind, as
//! HDR histograms (the `hdrhistogram` crate). It exists so that the control
//! socket, the metrics endpoint and the exit summary read the same latency
//! numbers. Recording must stay cheap on the serving path: a thread records
//! into one of a few shards (a mutex held for one histogram increment), and
//! the shards are merged only when someone reads them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;

/// Shards per volume: serving threads spread over them, so two rarely meet.
const SHARDS: usize = 4;
/// Largest response time kept exactly (longer ones count as this), in µs.
const LATENCY_US_MAX: u64 = 60_000_000;
/// Significant decimal digits of each recorded value.
const SIGNIFICANT_DIGITS: u8 = 2;

/// What a request did, for its latency and request counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestClass {
    Read,
    Write,
    WriteZeroes,
    Trim,
    Flush,
}

impl RequestClass {
    pub const ALL: [RequestClass; 5] = [
        RequestClass::Read,
        RequestClass::Write,
        RequestClass::WriteZeroes,
        RequestClass::Trim,
        RequestClass::Flush,
    ];

    /// The label used in statistics and metrics.
    pub fn name(self) -> &'static str {
        match self {
            RequestClass::Read => "read",
            RequestClass::Write => "write",
            RequestClass::WriteZeroes => "write_zeroes",
            RequestClass::Trim => "trim",
            RequestClass::Flush => "flush",
        }
    }
}

/// One kind's histogram with the exact sum of what it recorded.
#[derive(Clone)]
pub struct KindHistogram {
    /// Response times in microseconds.
    pub histogram: Histogram<u64>,
    pub sum_ns: u64,
    /// Requests that failed (counted in the histogram too).
    pub errors: u64,
}

impl KindHistogram {
    fn new() -> KindHistogram {
        let histogram = Histogram::new_with_bounds(1, LATENCY_US_MAX, SIGNIFICANT_DIGITS)
            .expect("constant histogram bounds are valid");
        KindHistogram {
            histogram,
            sum_ns: 0,
            errors: 0,
        }
    }

    fn add(&mut self, other: &KindHistogram) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.histogram.add(&other.histogram);
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.errors = self.errors.saturating_add(other.errors);
    }
}

type Shard = [KindHistogram; RequestClass::ALL.len()];

fn new_shard() -> Shard {
    std::array::from_fn(|_| KindHistogram::new())
}

/// The latencies of one volume.
pub struct VolumeLatency {
    shards: Box<[Mutex<Shard>]>,
}

impl Default for VolumeLatency {
    fn default() -> Self {
        VolumeLatency {
            shards: (0..SHARDS).map(|_| Mutex::new(new_shard())).collect(),
        }
    }
}

thread_local! {
    static SHARD_INDEX: usize = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS
    };
}

impl VolumeLatency {
    /// Records one answered request of `class` that took `took`.
    pub fn record(&self, class: RequestClass, took: Duration, failed: bool) {
        let index = SHARD_INDEX.with(|i| *i);
        let mut shard = self.shards[index].lock().unwrap_or_else(|p| p.into_inner());
        let kind = &mut shard[class as usize];
        let us = (took.as_micros() as u64).clamp(1, LATENCY_US_MAX);
        kind.histogram.saturating_record(us);
        kind.sum_ns = kind
            .sum_ns
            .saturating_add(took.as_nanos().min(u64::MAX as u128) as u64);
        kind.errors += u64::from(failed);
    }

    /// Every kind's histogram, the shards merged, in `RequestClass::ALL` order.
    pub fn merged(&self) -> Vec<KindHistogram> {
        let mut all = new_shard();
        for shard in self.shards.iter() {
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner()).clone();
            for (total, part) in all.iter_mut().zip(shard.iter()) {
                total.add(part);
            }
        }
        all.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_from_many_threads_merge_into_one_histogram_per_kind() {
        let latency = std::sync::Arc::new(VolumeLatency::default());
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let latency = latency.clone();
                std::thread::spawn(move || {
                    for i in 0..1000u64 {
                        latency.record(RequestClass::Write, Duration::from_micros(10 + i), t == 0);
                    }
                    latency.record(RequestClass::Flush, Duration::from_millis(3), false);
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        let merged = latency.merged();
        let write = &merged[RequestClass::Write as usize];
        assert_eq!(write.histogram.len(), 8000);
        assert_eq!(write.errors, 1000);
        assert_eq!(
            write.sum_ns,
            8 * (0..1000u64).map(|i| (10 + i) * 1000).sum::<u64>()
        );
        let p50 = write.histogram.value_at_quantile(0.5);
        assert!((500..=520).contains(&p50), "p50 {p50} µs");
        assert_eq!(merged[RequestClass::Flush as usize].histogram.len(), 8);
        assert_eq!(merged[RequestClass::Read as usize].histogram.len(), 0);
    }
}
