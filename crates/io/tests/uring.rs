//! The event-driven data path (`DriverBatch::write_async` over io_uring):
//! concurrent writes — whole pages from aligned and unaligned buffers,
//! partial pages, FUA, held back and submitted in waves — each answered
//! exactly once, read back, and found again after a restart without a
//! drain, on a `dsync` + O_DIRECT cache file and on an `fdatasync` one;
//! and the same through format 3's batches, written by the driver's threads.

use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use wcache_core::types::VolumeId;
use wcache_core::{EngineConfig, RequestFlags, RequestKind, WritePolicyKind};
use wcache_io::device::file::{FileDevice, FileOptions, SyncMode};
use wcache_io::format::{EngineRecord, VolumeEntry};
use wcache_io::store::Asked;
use wcache_io::{
    BlockDevice, CacheStore, DataPath, Driver, DriverConfig, Io, MemDevice, RequestError, WriteDone,
};

const PAGE_BYTES: u64 = 4096;
const VOLUME_BYTES: u64 = 1 << 20;
const THREADS: u64 = 4;
/// Each thread writes its own pages: this many regions of `REGION_PAGES`,
/// one write in flight per region in a wave.
const REGIONS: u64 = 8;
const REGION_PAGES: u64 = VOLUME_BYTES / PAGE_BYTES / THREADS / REGIONS;
const WAVES: u32 = 30;

fn start(path: &Path, sync: SyncMode, direct: bool, backing: Arc<dyn BlockDevice>) -> Driver {
    start_as(path, (sync, direct, false), backing)
}

/// `start` with the cache's format: `log` for format 3 (its batches are
/// written by the driver's threads, and `write_async` returns before them
/// all the same).
fn start_as(
    path: &Path,
    (sync, direct, log): (SyncMode, bool, bool),
    backing: Arc<dyn BlockDevice>,
) -> Driver {
    let cache: Arc<dyn BlockDevice> = Arc::new(
        FileDevice::open(
            path,
            FileOptions {
                sync,
                direct,
                create_size_bytes: Some(8 << 20).filter(|_| !path.exists()),
                map: false,
                direct_large_reads: false,
            },
        )
        .expect("open cache file"),
    );
    let mut config = EngineConfig {
        page_size_bytes: PAGE_BYTES,
        group_size_bytes: 16 * 1024,
        write_policy: WritePolicyKind::WriteBack,
        requests_max: 64,
        ..EngineConfig::default()
    };
    let record = EngineRecord::from_config(&config).expect("record");
    let volumes = vec![VolumeEntry::new("disk", VOLUME_BYTES, "mem:test").expect("entry")];
    let asked = Asked {
        page_size_bytes: PAGE_BYTES,
        engine: &record,
        log: Some(log),
        new_log: false,
        force: false,
    };
    let (store, found, report) =
        CacheStore::open_or_format_as(cache, asked, volumes).expect("open");
    let store = Arc::new(store);
    config.cache_slots = store.layout().slot_count;
    let driver_config = DriverConfig {
        io_threads: 2,
        ..DriverConfig::default()
    };
    let backings = vec![backing];
    let driver = match report.log {
        Some(log) => Driver::recover_log(config, store, found, &log, backings, driver_config),
        None => Driver::recover(config, store, found, backings, driver_config),
    };
    driver.expect("driver")
}

/// False (with a note) where the kernel refuses io_uring: the threads
/// then serve `write_async`, which the test still checks.
fn uring_in_use(driver: &Driver) -> bool {
    match driver.data_path() {
        DataPath::IoUring => true,
        DataPath::Threads { why } => {
            assert!(
                why.contains("unavailable"),
                "io_uring chosen where available: {why}"
            );
            eprintln!("io_uring not used here: {why}");
            false
        }
    }
}

type Answer = (u64, Result<(), RequestError>, Vec<u8>);

/// A write of `len_bytes` at `offset_bytes`, FUA or not.
fn write_io(offset_bytes: u64, len_bytes: usize, fua: bool) -> Io {
    Io {
        kind: RequestKind::Write,
        offset_bytes,
        len_bytes: len_bytes as u64,
        flags: RequestFlags {
            fua,
            ..RequestFlags::default()
        },
    }
}

/// One thread's waves of writes over its own regions; returns its pages'
/// bytes as acknowledged (offset of its first page, bytes).
fn writer(driver: &Driver, thread: u64, seed: u64) -> (u64, Vec<u8>) {
    let p = PAGE_BYTES as usize;
    let first_page = thread * REGIONS * REGION_PAGES;
    let mut shadow = vec![0u8; (REGIONS * REGION_PAGES) as usize * p];
    let mut rng = SmallRng::seed_from_u64(seed);
    let (tx, rx) = mpsc::channel::<Answer>();
    for _ in 0..WAVES {
        let mut sent = Vec::new();
        // Most writes of a wave held in one batch, the others sent at once.
        let batch = driver.write_batch();
        for region in 0..REGIONS {
            let base = (region * REGION_PAGES) as usize * p;
            // Whole pages (1..=4) or a partial range inside the region.
            let (at, len) = if rng.gen_bool(0.8) {
                let pages = rng.gen_range(1..=4usize);
                let page = rng.gen_range(0..=(REGION_PAGES as usize - pages));
                (base + page * p, pages * p)
            } else {
                let at = rng.gen_range(0..REGION_PAGES as usize * p - 1);
                let len = rng.gen_range(1..=(REGION_PAGES as usize * p - at).min(2 * p));
                (base + at, len)
            };
            // Some payloads start 1 byte into their buffer (not aligned).
            let start = usize::from(rng.gen_bool(0.25));
            let mut buffer = vec![0u8; start + len];
            rng.fill(&mut buffer[start..]);
            sent.push((at, buffer[start..].to_vec()));
            let tx = tx.clone();
            let id = region;
            let offset = first_page * PAGE_BYTES + at as u64;
            let io = write_io(offset, len, rng.gen_bool(0.1));
            let done: WriteDone = Box::new(move |result, buffer, _more| {
                let _ = tx.send((id, result, buffer));
            });
            if rng.gen_bool(0.7) {
                batch.write_async(VolumeId(0), io, buffer, start, done);
            } else {
                // A batch of one: sent at the end of the statement.
                driver
                    .write_batch()
                    .write_async(VolumeId(0), io, buffer, start, done);
            }
        }
        drop(batch); // the held writes go out
        let mut answered = vec![0u32; REGIONS as usize];
        for _ in 0..REGIONS {
            let (id, result, buffer) = rx.recv().expect("every write is answered");
            result.expect("write acknowledged");
            let (at, data) = &sent[id as usize];
            assert!(buffer.len() - data.len() <= 1, "the buffer comes back");
            answered[id as usize] += 1;
            shadow[*at..*at + data.len()].copy_from_slice(data);
        }
        assert!(
            answered.iter().all(|&n| n == 1),
            "each write answered once: {answered:?}"
        );
    }
    (first_page * PAGE_BYTES, shadow)
}

fn check_reads(driver: &Driver, shadow: &[u8]) {
    let mut buf = vec![0u8; VOLUME_BYTES as usize];
    driver.read(VolumeId(0), 0, &mut buf).expect("read");
    let first = buf.iter().zip(shadow).position(|(a, b)| a != b);
    assert_eq!(
        first, None,
        "first byte that differs from the acknowledged writes"
    );
}

fn keeps_every_acknowledged_write(sync: SyncMode, direct: bool) {
    keeps_every_acknowledged_write_as((sync, direct, false));
}

fn keeps_every_acknowledged_write_as((sync, direct, log): (SyncMode, bool, bool)) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cache.img");
    let backing: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(VOLUME_BYTES));
    let start = |path: &Path, sync, direct, backing| start_as(path, (sync, direct, log), backing);
    let driver = start(&path, sync, direct, backing.clone());
    assert!(
        driver.writes_async(),
        "write_async returns before the device write"
    );
    let uring = !log && uring_in_use(&driver);
    let mut shadow = vec![0u8; VOLUME_BYTES as usize];
    let parts: Vec<(u64, Vec<u8>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let driver = &driver;
                s.spawn(move || writer(driver, t, 0x5eed ^ t))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("writer"))
            .collect()
    });
    for (at, bytes) in parts {
        shadow[at as usize..at as usize + bytes.len()].copy_from_slice(&bytes);
    }
    check_reads(&driver, &shadow);
    let stats = driver.stats();
    assert_eq!(stats.cache_errors, 0, "{stats:?}");
    if uring && sync == SyncMode::Fdatasync {
        assert!(stats.cache_flushes > 0, "fdatasync barriers ran: {stats:?}");
    }
    // A restart without a drain finds every acknowledged write.
    drop(driver);
    let driver = start(&path, sync, direct, backing.clone());
    check_reads(&driver, &shadow);
    driver.drain().expect("drain");
    let mut on_backing = vec![0u8; VOLUME_BYTES as usize];
    backing.read_at(&mut on_backing, 0).expect("read backing");
    assert!(on_backing == shadow, "backing differs after the drain");
}

#[test]
fn write_async_keeps_every_acknowledged_write_dsync_direct() {
    keeps_every_acknowledged_write(SyncMode::Dsync, true);
}

#[test]
fn write_async_keeps_every_acknowledged_write_fdatasync() {
    keeps_every_acknowledged_write(SyncMode::Fdatasync, false);
}

#[test]
fn write_async_keeps_every_acknowledged_write_on_format_3() {
    keeps_every_acknowledged_write_as((SyncMode::Fdatasync, false, true));
    keeps_every_acknowledged_write_as((SyncMode::Dsync, true, true));
}

#[test]
fn write_async_refuses_a_range_beyond_its_buffer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backing: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(VOLUME_BYTES));
    let driver = start(
        &dir.path().join("cache.img"),
        SyncMode::Dsync,
        true,
        backing,
    );
    let (tx, rx) = mpsc::channel();
    driver.write_batch().write_async(
        VolumeId(0),
        write_io(0, 4096, false),
        vec![0u8; 4096],
        1,
        Box::new(move |result, buffer, _| {
            let _ = tx.send((result, buffer.len()));
        }),
    );
    let (result, len) = rx.recv().expect("answered");
    assert_eq!(len, 4096, "the buffer comes back");
    match result {
        Err(RequestError::PayloadLength { payload_bytes, .. }) => assert_eq!(payload_bytes, 4095),
        other => panic!("expected a payload length error, got {other:?}"),
    }
}

/// Clean copies of read misses beside the io_uring write path: concurrent
/// readers of cold pages get the backing's bytes, the copies then serve
/// hits with the same bytes, and after a restart too, in both sync modes.
#[test]
fn concurrent_read_misses_leave_clean_copies_that_hit_with_the_backing_bytes() {
    for (sync, direct) in [(SyncMode::Fdatasync, false), (SyncMode::Dsync, true)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cache.img");
        let backing: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(VOLUME_BYTES));
        let mut rng = SmallRng::seed_from_u64(11);
        let shadow: Vec<u8> = (0..VOLUME_BYTES).map(|_| rng.gen()).collect();
        backing.write_at(&shadow, 0).expect("fill backing");
        let driver = start(&path, sync, direct, backing.clone());
        uring_in_use(&driver);
        let chunk = 16 * PAGE_BYTES as usize;
        std::thread::scope(|s| {
            for t in 0..THREADS as usize {
                let (driver, shadow) = (&driver, &shadow);
                s.spawn(move || {
                    let quarter = shadow.len() / THREADS as usize;
                    let mut buf = vec![0u8; chunk];
                    for at in (t * quarter..(t + 1) * quarter).step_by(chunk) {
                        driver.read(VolumeId(0), at as u64, &mut buf).expect("read");
                        assert!(buf == shadow[at..at + chunk], "{sync:?}: miss at {at}");
                    }
                });
            }
        });
        let inserts = driver.engine_stats().read_inserts;
        assert!(inserts > 0, "{sync:?}: the misses inserted clean copies");
        check_reads(&driver, &shadow);
        assert!(
            driver.engine_stats().read_page_hits > 0,
            "{sync:?}: the second pass hits the copies"
        );
        assert_eq!(driver.stats().cache_errors, 0, "{sync:?}");
        drop(driver);
        let driver = start(&path, sync, direct, backing);
        check_reads(&driver, &shadow);
    }
}
