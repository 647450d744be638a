//! The metrics visitor reports every engine counter under its field's name
//! with the same value, every gauge as the engine's accessors tell it, each
//! name once and with help, and the policies' own metrics.

use std::collections::HashSet;
use wcache_core::metrics::{MetricKind, MetricList};
use wcache_core::time::Nanos;
use wcache_core::types::RequestId;
use wcache_core::{Engine, EngineConfig, Request, RequestFlags, RequestKind};

/// Runs writes and reads to completion (every command succeeds at once).
fn busy_engine(config: EngineConfig) -> Engine {
    let mut e = Engine::new(config).unwrap();
    let vol = e.add_volume(64 << 20).unwrap();
    let mut now = 0u64;
    for i in 0..600u64 {
        let kind = if i % 3 == 2 {
            RequestKind::Read
        } else {
            RequestKind::Write
        };
        let req = Request {
            id: RequestId(i),
            volume: vol,
            kind,
            offset_bytes: (i * 7919 % 4096) * 4096 + (i % 5) * 512,
            len_bytes: 4096 + (i % 4) * 8192,
            flags: RequestFlags::default(),
        };
        e.handle_request(Nanos(now), req).unwrap();
        while let Some(cmd) = e.poll_command() {
            now += 1000;
            e.handle_completion(Nanos(now), cmd.io(), Ok(())).unwrap();
        }
        while e.poll_response().is_some() {}
    }
    e
}

#[test]
fn every_counter_and_gauge_is_reported_once_with_its_value() {
    let config = EngineConfig {
        cache_slots: 1024,
        sequential_cutoff_bytes: 1 << 20,
        ..EngineConfig::default()
    };
    let e = busy_engine(config);
    let mut list = MetricList::default();
    e.visit_metrics(Nanos::ZERO, &mut list);

    let mut names = HashSet::new();
    for (_, name, help, _) in &list.metrics {
        assert!(names.insert(*name), "{name} reported twice");
        assert!(!help.is_empty(), "{name} has no help");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "{name} is not snake_case"
        );
    }
    // Every field of Stats, by its Debug form `name: value`.
    let debug = format!("{:?}", e.stats());
    let fields = debug
        .trim_start_matches("Stats {")
        .trim_end_matches('}')
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty());
    let mut counted = 0;
    for field in fields {
        let (name, value) = field.split_once(": ").expect("name: value");
        let reported = list
            .get(name)
            .unwrap_or_else(|| panic!("{name} not reported"));
        assert_eq!(reported.to_string(), value, "{name}");
        counted += 1;
    }
    let counters = list
        .metrics
        .iter()
        .filter(|m| m.0 == MetricKind::Counter)
        .count();
    assert_eq!(counted, counters, "every counter is a Stats field");
    assert!(
        e.stats().writes > 0 && e.stats().read_page_hits > 0,
        "the run did work"
    );

    assert_eq!(list.get("dirty_pages"), Some(e.dirty_pages()));
    assert_eq!(list.get("dirty_groups"), Some(e.dirty_groups() as u64));
    assert_eq!(list.get("capacity_pages"), Some(1024));
    assert_eq!(list.get("requests_in_flight"), Some(0));
    let (low, high) = e.thresholds_pages();
    assert_eq!(list.get("destage_low_threshold_pages"), Some(low));
    assert_eq!(list.get("destage_high_threshold_pages"), Some(high));
    assert_eq!(list.get("metadata_bytes"), Some(e.metadata_bytes() as u64));
    // The sequential cutoff reports through the admission policy.
    assert!(list
        .get("admission_sequential_streams")
        .is_some_and(|n| n > 0));
}

#[test]
fn without_a_cutoff_no_admission_metric_is_reported() {
    let e = busy_engine(EngineConfig {
        cache_slots: 1024,
        ..EngineConfig::default()
    });
    let mut list = MetricList::default();
    e.visit_metrics(Nanos::ZERO, &mut list);
    assert_eq!(list.get("admission_sequential_streams"), None);
    assert!(list.get("writes").is_some_and(|n| n > 0));
}
