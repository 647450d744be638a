//! Read misses inserted as clean copies (`read_insert`): a copy read from
//! the backing must never go into the cache when a write to its page may
//! have changed the backing since the read began, or may still change it;
//! a later read would hit the older bytes. Every write here bypasses (the
//! `volume` policy with no volume marked), so the page leaves no cached
//! version that would keep the copy out anyway. The devices are the
//! reference interpreter, so every check is on bytes.

use std::collections::HashMap;
use wcache_core::reference::Reference;
use wcache_core::time::Nanos;
use wcache_core::types::{RequestId, VolumeId};
use wcache_core::{Engine, EngineConfig, IoCommand, Request, RequestFlags, RequestKind};

const PAGE: u64 = 4096;

struct Bench {
    e: Engine,
    dev: Reference<u8>,
    bufs: HashMap<u64, Vec<u8>>,
    cmds: Vec<IoCommand>,
    answered: Vec<u64>,
    next_id: u64,
}

fn is_read_backing(c: &IoCommand) -> bool {
    matches!(c, IoCommand::ReadBacking { .. })
}

fn is_write_backing(c: &IoCommand) -> bool {
    matches!(c, IoCommand::WriteBacking { .. })
}

impl Bench {
    fn new() -> Bench {
        let slots = 64;
        let config = EngineConfig {
            cache_slots: slots,
            group_size_bytes: 4 * PAGE,
            admission: "volume".into(),
            critical_volumes: Vec::new(),
            read_insert: true,
            ..EngineConfig::default()
        };
        let mut e = Engine::new(config).unwrap();
        e.add_volume(1 << 20).unwrap();
        Bench {
            e,
            dev: Reference::new(PAGE, 1, slots, &[1 << 20]),
            bufs: HashMap::new(),
            cmds: Vec::new(),
            answered: Vec::new(),
            next_id: 1,
        }
    }

    fn pump(&mut self) {
        while let Some(c) = self.e.poll_command() {
            self.cmds.push(c);
        }
        while let Some(r) = self.e.poll_response() {
            assert!(r.result.is_ok(), "{r:?}");
            self.answered.push(r.id.0);
        }
    }

    /// A one-page read (into a zeroed buffer) or write of `byte`s.
    fn submit(&mut self, kind: RequestKind, page: u64, byte: u8) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.bufs.insert(id, vec![byte; PAGE as usize]);
        let req = Request {
            id: RequestId(id),
            volume: VolumeId(0),
            kind,
            offset_bytes: page * PAGE,
            len_bytes: PAGE,
            flags: RequestFlags::default(),
        };
        self.e.handle_request(Nanos(0), req).unwrap();
        self.pump();
        id
    }

    /// The one command `pick` selects, done on the device but not yet
    /// reported to the engine.
    fn execute(&mut self, pick: impl Fn(&IoCommand) -> bool) -> IoCommand {
        let picked: Vec<usize> = (0..self.cmds.len())
            .filter(|&k| pick(&self.cmds[k]))
            .collect();
        assert_eq!(picked.len(), 1, "one such command: {:?}", self.cmds);
        let c = self.cmds.remove(picked[0]);
        self.dev.execute(&c, &mut self.bufs);
        c
    }

    fn report(&mut self, c: IoCommand) {
        self.e.handle_completion(Nanos(0), c.io(), Ok(())).unwrap();
        self.pump();
    }

    fn complete_all(&mut self) {
        while !self.cmds.is_empty() {
            let c = self.cmds.remove(0);
            self.dev.execute(&c, &mut self.bufs);
            self.report(c);
        }
    }

    /// Read `page` to the end; its first byte.
    fn read(&mut self, page: u64) -> u8 {
        let id = self.submit(RequestKind::Read, page, 0xEE);
        self.complete_all();
        assert!(self.answered.contains(&id));
        self.bufs[&id][0]
    }
}

/// A read miss reads the old bytes, then a write to its page lands on the
/// backing, then the read completes: its copy is older than the backing
/// and must stay out (the write filter: a write since the read began).
#[test]
fn a_write_landing_during_a_read_miss_keeps_its_copy_out() {
    let mut b = Bench::new();
    let read = b.submit(RequestKind::Read, 7, 0xEE);
    let old = b.execute(is_read_backing);
    let write = b.submit(RequestKind::Write, 7, 0xB0);
    assert_eq!(b.e.stats().write_bypasses, 1);
    let landed = b.execute(is_write_backing);
    b.report(landed);
    assert!(b.answered.contains(&write));
    b.report(old);
    b.complete_all();
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
    let mut b = Bench::new();
    let write = b.submit(RequestKind::Write, 7, 0xB0);
    assert_eq!(b.e.stats().write_bypasses, 1);
    let read = b.submit(RequestKind::Read, 7, 0xEE);
    let old = b.execute(is_read_backing);
    b.report(old);
    assert!(b.answered.contains(&read));
    assert_eq!(b.bufs[&read][0], 0, "the read ran before the write landed");
    b.complete_all();
    assert!(b.answered.contains(&write));
    assert_eq!(b.read(7), 0xB0, "a read after the write got older bytes");
    // Only that later read's copy was inserted, and hits.
    assert_eq!(b.e.stats().read_inserts, 1);
    assert_eq!(b.read(7), 0xB0);
    assert_eq!(b.e.stats().read_page_hits, 1);
}
