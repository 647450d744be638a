//! Read misses inserted as clean copies (`read_insert`): a copy read from
//! the backing must never go into the cache when a write to its page may
//! have changed the backing since the read began, or may still change it;
//! a later read would hit the older bytes. Every write here bypasses (the
//! `volume` policy with no volume marked), so the page leaves no cached
//! version that would keep the copy out anyway. The devices are the
//! reference interpreter, so every check is on bytes.

mod common;

use common::{Bench, PAGE};
use wcache_core::{EngineConfig, IoCommand, RequestKind};

fn is_read_backing(c: &IoCommand) -> bool {
    matches!(c, IoCommand::ReadBacking { .. })
}

fn is_write_backing(c: &IoCommand) -> bool {
    matches!(c, IoCommand::WriteBacking { .. })
}

/// Every write bypasses: the `volume` policy with no volume marked.
fn bench() -> Bench {
    Bench::with(EngineConfig {
        cache_slots: 64,
        group_size_bytes: 4 * PAGE,
        admission: "volume".into(),
        critical_volumes: Vec::new(),
        read_insert: true,
        ..EngineConfig::default()
    })
}

/// A one-page read (into a buffer of `0xEE`s) or write of `byte`s to
/// volume 0, by a non-critical issuer.
fn submit(b: &mut Bench, kind: RequestKind, page: u64, byte: u8) -> u64 {
    b.submit(0, kind, page, byte, 0)
}

/// A read miss reads the old bytes, then a write to its page lands on the
/// backing, then the read completes: its copy is older than the backing
/// and must stay out (the write filter: a write since the read began).
#[test]
fn a_write_landing_during_a_read_miss_keeps_its_copy_out() {
    let mut b = bench();
    let read = submit(&mut b, RequestKind::Read, 7, 0xEE);
    let old = b.execute(is_read_backing);
    let write = submit(&mut b, RequestKind::Write, 7, 0xB0);
    assert_eq!(b.e.stats().write_bypasses, 1);
    let landed = b.execute(is_write_backing);
    b.report(landed);
    assert!(b.answered.contains(&write));
    b.report(old);
    b.complete_while(|_| true);
    assert!(b.answered.contains(&read));
    assert_eq!(b.read(7), 0xB0, "a read after the write got older bytes");
    // Only that later read's copy was inserted (no write beside it), and hits.
    assert_eq!(b.e.stats().read_inserts, 1);
    assert_eq!(b.read(7), 0xB0);
    assert_eq!(b.e.stats().read_page_hits, 1);
}

/// A write to the page is in flight to the backing when a read miss
/// starts, and lands after it: the read may have read the old bytes, so
/// its copy must stay out (backing writes in flight).
#[test]
fn a_read_miss_beside_a_backing_write_in_flight_keeps_its_copy_out() {
    let mut b = bench();
    let write = submit(&mut b, RequestKind::Write, 7, 0xB0);
    assert_eq!(b.e.stats().write_bypasses, 1);
    let read = submit(&mut b, RequestKind::Read, 7, 0xEE);
    let old = b.execute(is_read_backing);
    b.report(old);
    assert!(b.answered.contains(&read));
    assert_eq!(b.bufs[&read][0], 0, "the read ran before the write landed");
    b.complete_while(|_| true);
    assert!(b.answered.contains(&write));
    assert_eq!(b.read(7), 0xB0, "a read after the write got older bytes");
    // Only that later read's copy was inserted, and hits.
    assert_eq!(b.e.stats().read_inserts, 1);
    assert_eq!(b.read(7), 0xB0);
    assert_eq!(b.e.stats().read_page_hits, 1);
}
