//! `Engine::fail_stalled`: a stop that must end while the backing cannot
//! drain answers every stalled write with the error, and nothing admitted or
//! acknowledged changes — the admitted write in flight still completes, the
//! acknowledged pages stay dirty and are destaged later, and no command ever
//! names a failed write or its pages.

use std::collections::{BTreeSet, HashSet};
use wcache_core::time::Nanos;
use wcache_core::types::{RequestId, VolumeId};
use wcache_core::{
    Engine, EngineConfig, IoCommand, IoError, Request, RequestFlags, RequestKind, Response,
};

const PAGE_BYTES: u64 = 4096;
const CACHE_SLOTS: u64 = 16;
const STALLED_COUNT: u64 = 3;
/// Stalled writes go far from the acknowledged ones, so a command naming
/// their pages would be seen.
const STALLED_FIRST_PAGE: u64 = 200;

fn write(id: u64, vol: VolumeId, page: u64) -> Request {
    Request {
        id: RequestId(id),
        volume: vol,
        kind: RequestKind::Write,
        offset_bytes: page * PAGE_BYTES,
        len_bytes: PAGE_BYTES,
        flags: RequestFlags::default(),
    }
}

fn responses(e: &mut Engine) -> Vec<Response> {
    std::iter::from_fn(|| e.poll_response()).collect()
}

/// Completes every command but destages (the backing cannot drain), which
/// are returned; page writes are kept back too unless `complete_writes`.
fn run(e: &mut Engine, now: u64, complete_writes: bool) -> (Vec<IoCommand>, Vec<IoCommand>) {
    let (mut destages, mut held) = (Vec::new(), Vec::new());
    while let Some(cmd) = e.poll_command() {
        let is_held = !complete_writes && matches!(cmd, IoCommand::WritePage { .. });
        if matches!(cmd, IoCommand::Destage { .. }) {
            destages.push(cmd);
        } else if is_held {
            held.push(cmd);
        } else {
            e.handle_completion(Nanos(now), cmd.io(), Ok(())).unwrap();
        }
    }
    (destages, held)
}

#[test]
fn stalled_writes_fail_and_nothing_admitted_changes() {
    let config = EngineConfig {
        page_size_bytes: PAGE_BYTES,
        group_size_bytes: 4 * PAGE_BYTES,
        cache_slots: CACHE_SLOTS,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(config).unwrap();
    let vol = e.add_volume(1 << 20).unwrap();
    let mut destages = Vec::new();
    // Fill the cache: every write but the last is acknowledged.
    let mut held = Vec::new();
    for page in 0..CACHE_SLOTS {
        e.handle_request(Nanos(page), write(page, vol, page))
            .unwrap();
        // The last write is admitted; its page write stays in flight.
        let (d, h) = run(&mut e, page, page + 1 < CACHE_SLOTS);
        destages.extend(d);
        held.extend(h);
    }
    assert_eq!(held.len(), 1);
    let acked = responses(&mut e);
    assert_eq!(acked.len() as u64, CACHE_SLOTS - 1);
    assert!(acked.iter().all(|r| r.result.is_ok()));
    let dirty_before = e.dirty_pages();
    assert_eq!(
        dirty_before, CACHE_SLOTS,
        "the page being written counts as dirty"
    );
    // No room: these stall.
    let stalled_ids: HashSet<u64> = (0..STALLED_COUNT).map(|i| 100 + i).collect();
    for i in 0..STALLED_COUNT {
        let req = write(100 + i, vol, STALLED_FIRST_PAGE + i);
        e.handle_request(Nanos(100), req).unwrap();
        destages.extend(run(&mut e, 100, true).0);
    }
    assert!(
        responses(&mut e).is_empty(),
        "stalled writes are not answered"
    );
    assert_eq!(e.stats().stalls, STALLED_COUNT);
    assert_eq!(e.requests_in_flight() as u64, 1 + STALLED_COUNT);

    let failed_count = e.fail_stalled(Nanos(200), IoError::Io);
    assert_eq!(failed_count, STALLED_COUNT);
    let failed = responses(&mut e);
    assert_eq!(failed.len() as u64, STALLED_COUNT);
    for r in &failed {
        assert!(stalled_ids.contains(&r.id.0));
        assert_eq!(r.result, Err(IoError::Io));
    }
    // Nothing admitted changed: same dirty pages, the admitted write still in flight.
    assert_eq!(e.dirty_pages(), dirty_before);
    assert_eq!(e.requests_in_flight(), 1);
    assert_eq!(e.fail_stalled(Nanos(201), IoError::Io), 0);
    assert!(e.poll_command().is_none(), "failing stalls issues nothing");

    // The admitted write completes as before; then the backing drains.
    for cmd in held {
        e.handle_completion(Nanos(300), cmd.io(), Ok(())).unwrap();
    }
    let last = responses(&mut e);
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].id, RequestId(CACHE_SLOTS - 1));
    assert!(last[0].result.is_ok());
    assert_eq!(e.dirty_pages(), CACHE_SLOTS);
    e.start_drain();
    let mut destaged = BTreeSet::new();
    for now in 400..1000u64 {
        destages.extend(run(&mut e, now, true).0);
        let Some(cmd) = destages.pop() else {
            break;
        };
        if let IoCommand::Destage {
            first_page, slots, ..
        } = &cmd
        {
            destaged.extend(first_page.0..first_page.0 + slots.len() as u64);
        }
        e.handle_completion(Nanos(now), cmd.io(), Ok(())).unwrap();
    }
    assert_eq!(e.dirty_pages(), 0);
    assert_eq!(destaged, (0..CACHE_SLOTS).collect::<BTreeSet<u64>>());
    assert!(e.is_idle());
}
