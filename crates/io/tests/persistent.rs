//! Persistent cache device: write-back through the driver on a formatted
//! cache file, stop without draining (as a kill would leave it: the page
//! cache survives the process), reopen, recover, and check every
//! acknowledged byte; damaged records are discarded; another
//! configuration's dirty cache is refused without force.

use std::path::Path;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use wcache_core::types::VolumeId;
use wcache_core::{EngineConfig, WritePolicyKind};
use wcache_io::device::file::{FileDevice, FileOptions, SyncMode};
use wcache_io::format::{EngineRecord, VolumeEntry};
use wcache_io::store::{BadSlot, OpenError};
use wcache_io::{BlockDevice, CacheStore, Driver, DriverConfig, MemDevice};

const PAGE_BYTES: u64 = 4096;
const VOLUME_BYTES: u64 = 1 << 20;

fn open_file(path: &Path, size_bytes: u64, direct: bool) -> Arc<dyn BlockDevice> {
    open_file_with(path, size_bytes, SyncMode::Fdatasync, direct)
}

fn open_file_with(
    path: &Path,
    size_bytes: u64,
    sync: SyncMode,
    direct: bool,
) -> Arc<dyn BlockDevice> {
    Arc::new(
        FileDevice::open(
            path,
            FileOptions {
                sync,
                direct,
                create_size_bytes: Some(size_bytes).filter(|_| !path.exists()),
                map: false,
                direct_large_reads: false,
            },
        )
        .expect("open cache file"),
    )
}

fn volumes(size_bytes: u64) -> Vec<VolumeEntry> {
    vec![VolumeEntry::new("disk", size_bytes, "mem:test").expect("entry")]
}

fn engine_config(policy: WritePolicyKind) -> EngineConfig {
    EngineConfig {
        page_size_bytes: PAGE_BYTES,
        group_size_bytes: 16 * 1024,
        write_policy: policy,
        requests_max: 64,
        ..EngineConfig::default()
    }
}

/// What a format records (the tests' engine configuration).
fn record() -> EngineRecord {
    EngineRecord::from_config(&engine_config(WritePolicyKind::WriteBack)).expect("record")
}

fn start(
    cache: Arc<dyn BlockDevice>,
    backing: Arc<dyn BlockDevice>,
    policy: WritePolicyKind,
) -> (Driver, wcache_io::store::OpenReport) {
    let driver_config = DriverConfig {
        io_threads: 2,
        ..DriverConfig::default()
    };
    start_with(cache, backing, policy, driver_config)
}

fn start_with(
    cache: Arc<dyn BlockDevice>,
    backing: Arc<dyn BlockDevice>,
    policy: WritePolicyKind,
    driver_config: DriverConfig,
) -> (Driver, wcache_io::store::OpenReport) {
    let mut config = engine_config(policy);
    let record = EngineRecord::from_config(&config).expect("record");
    let (store, found, report) = CacheStore::open_or_format(
        cache,
        PAGE_BYTES,
        &record,
        volumes(backing.len_bytes()),
        false,
    )
    .expect("open cache");
    let store = Arc::new(store);
    config.cache_slots = store.layout().slot_count;
    let driver =
        Driver::recover(config, store, found, vec![backing], driver_config).expect("driver");
    (driver, report)
}

/// Random writes (some partial, many overwriting), returning the shadow.
fn write_random(driver: &Driver, shadow: &mut [u8], seed: u64, count: usize) {
    let mut rng = SmallRng::seed_from_u64(seed);
    for _ in 0..count {
        let len = if rng.gen_bool(0.5) {
            PAGE_BYTES as usize
        } else {
            rng.gen_range(1..3 * PAGE_BYTES as usize)
        };
        let offset = if len == PAGE_BYTES as usize {
            rng.gen_range(0..VOLUME_BYTES / PAGE_BYTES) * PAGE_BYTES
        } else {
            rng.gen_range(0..VOLUME_BYTES - len as u64)
        } as usize;
        let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        driver
            .write(VolumeId(0), offset as u64, &data, rng.gen_bool(0.1))
            .expect("write");
        shadow[offset..offset + len].copy_from_slice(&data);
    }
}

fn check_reads(driver: &Driver, shadow: &[u8]) {
    let mut buf = vec![0u8; VOLUME_BYTES as usize];
    driver.read(VolumeId(0), 0, &mut buf).expect("read");
    let first = buf.iter().zip(shadow).position(|(a, b)| a != b);
    assert_eq!(first, None, "first differing byte");
}

/// Drains every dirty page and checks that the backing equals the shadow.
fn drain_and_compare(driver: &Driver, backing: &dyn BlockDevice, shadow: &[u8]) {
    driver.drain().expect("drain");
    let mut on_backing = vec![0u8; VOLUME_BYTES as usize];
    backing.read_at(&mut on_backing, 0).expect("read backing");
    assert!(on_backing == shadow, "backing differs after drain");
}

fn restarts_keep_every_acknowledged_write(direct: bool) {
    restarts_keep_every_acknowledged_write_with(SyncMode::Fdatasync, direct);
}

fn restarts_keep_every_acknowledged_write_with(sync: SyncMode, direct: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache_path = dir.path().join("cache.img");
    // 64 slots: far fewer than the 256 pages written, so destages, frees
    // and slot reuse all happen between restarts.
    let cache_bytes = 4096 + 4096 + 64 * PAGE_BYTES;
    let backing: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(VOLUME_BYTES));
    let mut shadow = vec![0u8; VOLUME_BYTES as usize];
    for round in 0..6u64 {
        let cache = open_file_with(&cache_path, cache_bytes, sync, direct);
        let (driver, report) = start(cache, backing.clone(), WritePolicyKind::WriteBack);
        assert_eq!(report.formatted, round == 0);
        assert!(report.discarded.is_empty(), "{:?}", report.discarded);
        check_reads(&driver, &shadow);
        write_random(&driver, &mut shadow, round, 300);
        check_reads(&driver, &shadow);
        assert!(
            driver.dirty_pages() > 0,
            "a restart must have work to recover"
        );
        driver.shutdown(); // no drain, no clean flag: as after a kill
    }
    let cache = open_file_with(&cache_path, cache_bytes, sync, direct);
    let (driver, _) = start(cache, backing.clone(), WritePolicyKind::WriteBack);
    drain_and_compare(&driver, backing.as_ref(), &shadow);
}

#[test]
fn restarts_keep_every_acknowledged_write_buffered() {
    restarts_keep_every_acknowledged_write(false);
}

#[test]
fn restarts_keep_every_acknowledged_write_direct() {
    restarts_keep_every_acknowledged_write(true);
}

/// RWF_DSYNC on O_DIRECT: records are written by their own threads while
/// the page data is (no order between them, no flush).
#[test]
fn restarts_keep_every_acknowledged_write_dsync_direct() {
    restarts_keep_every_acknowledged_write_with(SyncMode::Dsync, true);
}

#[test]
fn restarts_keep_every_acknowledged_write_dsync_buffered() {
    restarts_keep_every_acknowledged_write_with(SyncMode::Dsync, false);
}

#[test]
fn damaged_records_and_data_are_discarded_and_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache_path = dir.path().join("cache.img");
    let cache_bytes = 8192 + 64 * PAGE_BYTES;
    let backing: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(VOLUME_BYTES));
    let cache = open_file(&cache_path, cache_bytes, false);
    let (driver, _) = start(cache.clone(), backing.clone(), WritePolicyKind::WriteBack);
    // Two versions of page 0 (the old one freed by the engine), page 1 once.
    for (page, byte) in [(0u64, 1u8), (1, 2), (0, 3)] {
        let data = vec![byte; PAGE_BYTES as usize];
        driver
            .write(VolumeId(0), page * PAGE_BYTES, &data, false)
            .expect("write");
    }
    let store = driver.store().expect("persistent").clone();
    let layout = store.layout();
    driver.shutdown();
    drop(driver);
    let scan = store.scan(true).expect("scan");
    let slot_of = |page: u64| {
        scan.found
            .iter()
            .filter(|f| f.record.key.page().0 == page)
            .max_by_key(|f| f.record.seq)
            .expect("page recorded")
            .slot
    };
    let (slot0, slot1) = (slot_of(0), slot_of(1));
    // Corrupt page 1's data and page 0's record.
    cache
        .write_at(&[0xff; 16], layout.slot_offset_bytes(slot1.0))
        .expect("corrupt data");
    cache
        .write_at(
            &[0xff; 4],
            layout.record_offset_bytes + slot0.0 as u64 * 32 + 8,
        )
        .expect("corrupt record");
    cache.flush().expect("flush");
    let (driver, report) = start(cache.clone(), backing.clone(), WritePolicyKind::WriteBack);
    assert_eq!(report.discarded.len(), 2, "{:?}", report.discarded);
    assert!(report
        .discarded
        .iter()
        .any(|b| matches!(b, BadSlot::Data { slot, .. } if *slot == slot1.0)));
    assert!(report
        .discarded
        .iter()
        .any(|b| matches!(b, BadSlot::Record { slot, .. } if *slot == slot0.0)));
    assert_eq!(driver.dirty_pages(), 0);
    driver.shutdown();
    drop(driver);
    // The scrub freed them durably: a second open finds nothing wrong.
    let (_driver, report) = start(cache, backing, WritePolicyKind::WriteBack);
    assert!(report.discarded.is_empty());
}

#[test]
fn another_configuration_with_dirty_pages_is_refused_without_force() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache_path = dir.path().join("cache.img");
    let cache_bytes = 8192 + 64 * PAGE_BYTES;
    let backing: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(VOLUME_BYTES));
    let cache = open_file(&cache_path, cache_bytes, false);
    let (driver, _) = start(cache.clone(), backing, WritePolicyKind::WriteBack);
    driver
        .write(VolumeId(0), 0, &[7u8; PAGE_BYTES as usize], true)
        .expect("write");
    driver.shutdown();
    drop(driver);
    let other = vec![VolumeEntry::new("disk", VOLUME_BYTES * 2, "mem:other").expect("entry")];
    let err =
        CacheStore::open_or_format(cache.clone(), PAGE_BYTES, &record(), other.clone(), false)
            .err()
            .expect("refused");
    let text = err.to_string();
    assert!(
        matches!(err, OpenError::OtherConfiguration { dirty_pages: 1, .. }),
        "{text}"
    );
    assert!(
        text.contains("mem:test") && text.contains("mem:other"),
        "{text}"
    );
    let err =
        CacheStore::open_or_format(cache.clone(), 8192, &record(), volumes(VOLUME_BYTES), false)
            .err()
            .expect("refused");
    assert!(err.to_string().contains("page size 4096"), "{err}");
    let (_, found, report) =
        CacheStore::open_or_format(cache, PAGE_BYTES, &record(), other, true).expect("forced");
    assert!(found.is_empty());
    let said = report.reformatted.expect("says what it discarded");
    assert!(said.contains("1 dirty pages"), "{said}");
}

/// A read miss's clean copy completes without a cache flush (nothing
/// acknowledged depends on it); a dirty write still flushes; after a
/// restart the clean copies are dropped and every byte reads back.
#[test]
fn read_misses_insert_clean_copies_without_a_cache_flush() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache_path = dir.path().join("cache.img");
    let cache_bytes = 4096 + 4096 + 512 * PAGE_BYTES;
    let backing: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(VOLUME_BYTES));
    let mut rng = SmallRng::seed_from_u64(7);
    let mut shadow: Vec<u8> = (0..VOLUME_BYTES).map(|_| rng.gen()).collect();
    backing.write_at(&shadow, 0).expect("fill backing");
    let cache = open_file(&cache_path, cache_bytes, false);
    let (driver, _) = start(cache, backing.clone(), WritePolicyKind::WriteBack);
    check_reads(&driver, &shadow);
    assert!(
        driver.engine_stats().read_inserts > 0,
        "the read must have inserted clean copies"
    );
    assert_eq!(
        driver.stats().cache_flushes,
        0,
        "clean copies need no flush"
    );
    check_reads(&driver, &shadow); // now hits
    write_random(&driver, &mut shadow, 8, 20);
    assert!(driver.stats().cache_flushes > 0, "dirty writes are flushed");
    check_reads(&driver, &shadow);
    driver.shutdown();
    let cache = open_file(&cache_path, cache_bytes, false);
    let (driver, _) = start(cache, backing.clone(), WritePolicyKind::WriteBack);
    check_reads(&driver, &shadow);
    drain_and_compare(&driver, backing.as_ref(), &shadow);
}

/// Records written at once by many threads into the same blocks (their
/// writes group-committed per block) all reach the device: a fresh open
/// finds every one, with its own version.
#[test]
fn concurrent_record_writes_to_shared_blocks_all_reach_the_device() {
    use wcache_core::types::{PageIndex, PageKey, SlotIndex};
    use wcache_core::SlotRecord;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cache.img");
    let slots_bytes = 4096 + 4096 * 2 + 256 * PAGE_BYTES;
    let dev = open_file(&path, slots_bytes, false);
    let store = Arc::new(
        CacheStore::format(dev, PAGE_BYTES, &record(), volumes(VOLUME_BYTES), false)
            .expect("format"),
    );
    let slot_count = store.layout().slot_count as u32;
    let threads = 8u32;
    std::thread::scope(|s| {
        for t in 0..threads {
            let store = store.clone();
            s.spawn(move || {
                // Thread t owns slots t, t + 8, ...: every block is shared by all threads.
                for slot in (t..slot_count).step_by(threads as usize) {
                    let record = SlotRecord {
                        key: PageKey::new(VolumeId(0), PageIndex(slot as u64)),
                        seq: 1000 + slot as u64,
                        dirty: true,
                    };
                    store
                        .write_record(SlotIndex(slot), &record, 0)
                        .expect("record write");
                }
            });
        }
    });
    assert!(store.record_writes() <= slot_count as u64);
    store.device().flush().expect("flush");
    drop(store);
    let reopened = CacheStore::open(open_file(&path, slots_bytes, false)).expect("open");
    let scan = reopened.scan(false).expect("scan");
    assert!(scan.bad.is_empty(), "{:?}", scan.bad);
    assert_eq!(scan.found.len(), slot_count as usize);
    for f in &scan.found {
        assert_eq!(f.record.seq, 1000 + f.slot.0 as u64);
        assert_eq!(f.record.key.page().0, f.slot.0 as u64);
    }
}

/// Persist-on-flush: writes without FUA complete with no cache flush; a
/// FUA write and a FLUSH each run one before they are answered; a restart
/// (the page cache survives the process, as after a kill) finds every
/// acknowledged byte.
#[test]
fn persist_on_flush_flushes_only_for_flush_and_fua() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache_path = dir.path().join("cache.img");
    let cache_bytes = 4096 + 4096 + 512 * PAGE_BYTES;
    let backing: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(VOLUME_BYTES));
    let mut shadow = vec![0u8; VOLUME_BYTES as usize];
    let cache = open_file(&cache_path, cache_bytes, false);
    let no_interval = DriverConfig {
        io_threads: 2,
        flush_interval: None,
        ..DriverConfig::default()
    };
    let (driver, _) = start_with(
        cache,
        backing.clone(),
        WritePolicyKind::WriteBack,
        no_interval,
    );
    driver.set_persist_on_flush(true);
    assert!(driver.persist_on_flush());
    // Distinct whole pages: no old version to free, so no barrier at all.
    for page in 0..32u64 {
        let data = vec![page as u8 + 1; PAGE_BYTES as usize];
        driver
            .write(VolumeId(0), page * PAGE_BYTES, &data, false)
            .expect("write");
        shadow[(page * PAGE_BYTES) as usize..((page + 1) * PAGE_BYTES) as usize]
            .copy_from_slice(&data);
    }
    assert_eq!(driver.stats().cache_flushes, 0, "no flush before FLUSH");
    driver.flush(VolumeId(0)).expect("flush");
    assert_eq!(driver.stats().cache_flushes, 1, "FLUSH flushes the cache");
    let data = vec![0xaa; PAGE_BYTES as usize];
    driver
        .write(VolumeId(0), 40 * PAGE_BYTES, &data, true)
        .expect("fua write");
    shadow[(40 * PAGE_BYTES) as usize..(41 * PAGE_BYTES) as usize].copy_from_slice(&data);
    assert_eq!(driver.stats().cache_flushes, 2, "FUA flushes the cache");
    write_random(&driver, &mut shadow, 9, 200);
    check_reads(&driver, &shadow);
    driver.shutdown(); // no drain, no clean flag: as after a kill
    let cache = open_file(&cache_path, cache_bytes, false);
    let (driver, report) = start(cache, backing.clone(), WritePolicyKind::WriteBack);
    assert!(report.discarded.is_empty(), "{:?}", report.discarded);
    check_reads(&driver, &shadow);
    drain_and_compare(&driver, backing.as_ref(), &shadow);
}

/// Four threads writing whole pages of their own (records of neighbouring
/// slots share blocks; overwrites free old versions, in delayed rounds),
/// a restart without a drain, then every acknowledged page read back.
fn concurrent_writers_keep_every_acknowledged_write(sync: SyncMode, direct: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache_path = dir.path().join("cache.img");
    let cache_bytes = 4096 + 4096 + 128 * PAGE_BYTES;
    let backing: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(VOLUME_BYTES));
    let pages = VOLUME_BYTES / PAGE_BYTES;
    let threads = 4u64;
    let shadow = std::sync::Mutex::new(vec![0u8; VOLUME_BYTES as usize]);
    for round in 0..3u64 {
        let cache = open_file_with(&cache_path, cache_bytes, sync, direct);
        let (driver, report) = start(cache, backing.clone(), WritePolicyKind::WriteBack);
        assert!(report.discarded.is_empty(), "{:?}", report.discarded);
        check_reads(&driver, &shadow.lock().expect("shadow"));
        std::thread::scope(|s| {
            for t in 0..threads {
                let (driver, shadow) = (&driver, &shadow);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(round * 16 + t);
                    for n in 0..150u64 {
                        // Thread t owns the pages p with p % threads == t.
                        let page = rng.gen_range(0..pages / threads) * threads + t;
                        let data = vec![(round * 64 + n) as u8 ^ t as u8; PAGE_BYTES as usize];
                        driver
                            .write(VolumeId(0), page * PAGE_BYTES, &data, false)
                            .expect("write");
                        let at = (page * PAGE_BYTES) as usize;
                        shadow.lock().expect("shadow")[at..at + PAGE_BYTES as usize]
                            .copy_from_slice(&data);
                    }
                });
            }
        });
        driver.shutdown(); // no drain, no clean flag: as after a kill
    }
    let cache = open_file_with(&cache_path, cache_bytes, sync, direct);
    let (driver, _) = start(cache, backing.clone(), WritePolicyKind::WriteBack);
    let shadow = shadow.into_inner().expect("shadow");
    check_reads(&driver, &shadow);
    drain_and_compare(&driver, backing.as_ref(), &shadow);
}

#[test]
fn concurrent_writers_keep_every_acknowledged_write_dsync_direct() {
    concurrent_writers_keep_every_acknowledged_write(SyncMode::Dsync, true);
}

#[test]
fn concurrent_writers_keep_every_acknowledged_write_fdatasync() {
    concurrent_writers_keep_every_acknowledged_write(SyncMode::Fdatasync, false);
}

/// Persist-on-flush with a flush interval: a write without FUA, and no
/// FLUSH, is made durable by the periodic flush (waited for up to 60 s,
/// no timing asserted); without new writes no further flush runs.
#[test]
fn persist_on_flush_flushes_within_the_interval() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache_path = dir.path().join("cache.img");
    let cache_bytes = 4096 + 4096 + 64 * PAGE_BYTES;
    let backing: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(VOLUME_BYTES));
    let cache = open_file(&cache_path, cache_bytes, false);
    let config = DriverConfig {
        io_threads: 2,
        persist_on_flush: true,
        flush_interval: Some(std::time::Duration::from_millis(20)),
        ..DriverConfig::default()
    };
    let (driver, _) = start_with(cache, backing.clone(), WritePolicyKind::WriteBack, config);
    let data = vec![0x5a; PAGE_BYTES as usize];
    driver
        .write(VolumeId(0), 3 * PAGE_BYTES, &data, false)
        .expect("write");
    let started = std::time::Instant::now();
    while driver.stats().cache_flushes == 0 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "no periodic flush after a write"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // Idle: the flusher has nothing new to cover.
    let flushes = driver.stats().cache_flushes;
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(
        driver.stats().cache_flushes,
        flushes,
        "no flush without writes"
    );
    let mut shadow = vec![0u8; VOLUME_BYTES as usize];
    shadow[(3 * PAGE_BYTES) as usize..(4 * PAGE_BYTES) as usize].copy_from_slice(&data);
    check_reads(&driver, &shadow);
}
