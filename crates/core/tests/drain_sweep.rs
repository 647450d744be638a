//! A drain empties the cache in one sweep of the destage order: WOW skips
//! recently written groups while the cache is meant to stay full, but not
//! while it drains, so a group written twice is destaged in its address
//! place, not after a second pass (which on a disk seeks further and
//! roughly halves the page rate; `scripts/flush-eta.sh`).

use wcache_core::time::Nanos;
use wcache_core::types::{RequestId, VolumeId};
use wcache_core::{Engine, EngineConfig, IoCommand, Request, RequestFlags, RequestKind};

const PAGE_BYTES: u64 = 4096;
const GROUP_PAGES: u64 = 16;

fn engine() -> Engine {
    let config = EngineConfig {
        cache_slots: 1024,
        page_size_bytes: PAGE_BYTES,
        group_size_bytes: GROUP_PAGES * PAGE_BYTES,
        destage_order: "wow".into(),
        ..EngineConfig::default()
    };
    let mut e = Engine::new(config).expect("config");
    e.add_volume(1 << 30).expect("volume");
    e
}

/// One page write in group `group` (page `page` of it), every command completed.
fn write(e: &mut Engine, id: u64, group: u64, page: u64) {
    let req = Request {
        id: RequestId(id),
        volume: VolumeId(0),
        kind: RequestKind::Write,
        offset_bytes: (group * GROUP_PAGES + page) * PAGE_BYTES,
        len_bytes: PAGE_BYTES,
        flags: RequestFlags::default(),
    };
    e.handle_request(Nanos(0), req).expect("submit");
    while let Some(cmd) = e.poll_command() {
        assert!(
            !matches!(cmd, IoCommand::Destage { .. }),
            "no destage before the drain"
        );
        e.handle_completion(Nanos(0), cmd.io(), Ok(()))
            .expect("known io");
    }
    while e.poll_response().is_some() {}
}

/// Groups in the order their destages are issued, completing each.
fn destage_order(e: &mut Engine) -> Vec<u64> {
    let mut order = Vec::new();
    while let Some(cmd) = e.poll_command() {
        if let IoCommand::Destage { first_page, .. } = &cmd {
            order.push(first_page.0 / GROUP_PAGES);
        }
        e.handle_completion(Nanos(0), cmd.io(), Ok(()))
            .expect("known io");
    }
    order
}

#[test]
fn a_drain_destages_in_one_sweep_without_skipping_recent_groups() {
    let mut e = engine();
    for group in 0..10 {
        write(&mut e, group, group * 3, 0);
    }
    // Group 9 (the fourth) is written again at another page: WOW's recency bit.
    write(&mut e, 100, 9, 5);
    e.start_drain();
    let mut order = destage_order(&mut e);
    order.dedup(); // a group with two runs of pages is two destages
    assert_eq!(e.dirty_pages(), 0);
    let groups: Vec<u64> = (0..10).map(|g| g * 3).collect();
    assert_eq!(order, groups, "one ascending sweep");
    assert_eq!(e.stats().destage_skips, 0);
}
