//! Format 3 (`EngineConfig::log`) through `wcache_io::Cache`: a new cache is
//! formatted as a log; every acknowledged write reads back, and after a
//! clean close, a drop without close (a crash of the process) and a drain;
//! the log's batches are on the device as the format says (one write per
//! batch: header, then the pages); a torn last batch is discarded whole
//! and the log ends before it; a stale batch of an earlier run, found where
//! the next header points, is not read as the next one; a format-2 cache
//! asked to become format 3 is refused, naming what to do, and left as it
//! was; a write is answered while every destage hangs in the backing.

use std::path::{Path, PathBuf};

#[path = "common/hung.rs"]
mod hung;

use wcache_core::{EngineConfig, WritePolicyKind};
use wcache_io::format::log::{BatchHeader, FORMAT_VERSION_LOG};
use wcache_io::format::Superblock;
use wcache_io::store::OpenError;
use wcache_io::{
    Cache, CacheConfig, CacheDeviceSpec, CacheError, CacheStore, DriverConfig, FormatAsked,
    SyncMode, VolumeSpec,
};

const PAGE_BYTES: u64 = 4096;
const CACHE_BYTES: u64 = 2 << 20;
const BACKING_BYTES: u64 = 4 << 20;

fn config(cache: &Path, backing: &Path, log: bool) -> CacheConfig {
    CacheConfig {
        cache: CacheDeviceSpec::File {
            path: cache.to_path_buf(),
            create_size_bytes: CACHE_BYTES,
            size_given: true,
            sync: SyncMode::Fdatasync,
            direct: false,
            measure_sync: false,
        },
        volumes: vec![VolumeSpec {
            name: "disk".into(),
            backing: backing.display().to_string(),
            journal: None,
        }],
        backing_sync: SyncMode::Fdatasync,
        backing_create_size_bytes: Some(BACKING_BYTES),
        engine: EngineConfig {
            page_size_bytes: PAGE_BYTES,
            group_size_bytes: 16 * 1024,
            write_policy: WritePolicyKind::WriteBack,
            log,
            ..EngineConfig::default()
        },
        driver: DriverConfig {
            io_threads: 2,
            ..DriverConfig::default()
        },
        block_size_bytes: 512,
        force: false,
        format: FormatAsked::Found,
        volatile_write_back: false,
        backing_timeout: None,
        replicate: None,
    }
}

fn image(page: u64, round: u8) -> Vec<u8> {
    (0..PAGE_BYTES)
        .map(|i| (page * 31 + i * 7 + round as u64 * 101) as u8 ^ 0x5a)
        .collect()
}

/// Writes pages `first..first + count` of volume 0, `per` pages a request.
fn write_pages(cache: &Cache, first: u64, count: u64, per: u64, round: u8) {
    let v = &cache.volumes()[0];
    let mut page = first;
    while page < first + count {
        let n = per.min(first + count - page);
        let data: Vec<u8> = (page..page + n).flat_map(|p| image(p, round)).collect();
        v.write(page * PAGE_BYTES, &data, false).expect("write");
        page += n;
    }
}

fn assert_pages(cache: &Cache, first: u64, count: u64, round: u8) {
    let v = &cache.volumes()[0];
    let mut buf = vec![0u8; PAGE_BYTES as usize];
    for page in first..first + count {
        v.read(page * PAGE_BYTES, &mut buf).expect("read");
        assert!(buf == image(page, round), "page {page} (round {round})");
    }
}

struct Dir(tempfile::TempDir);

impl Dir {
    fn new() -> Dir {
        Dir(tempfile::tempdir().expect("tempdir"))
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}

/// A driver on a new log-format cache on `cache`, with a backing in memory.
fn log_driver(cache: std::sync::Arc<dyn wcache_io::BlockDevice>) -> wcache_io::Driver {
    let backing = std::sync::Arc::new(wcache_io::MemDevice::new(BACKING_BYTES));
    log_driver_over(cache, backing)
}

/// A driver on a new log-format cache on `cache`, over `backing`.
fn log_driver_over(
    cache: std::sync::Arc<dyn wcache_io::BlockDevice>,
    backing: std::sync::Arc<dyn wcache_io::BlockDevice>,
) -> wcache_io::Driver {
    use std::sync::Arc;
    use wcache_io::format::{EngineRecord, VolumeEntry};
    use wcache_io::Driver;
    let mut engine = config(Path::new("unused"), Path::new("unused"), true).engine;
    let record = EngineRecord::from_config(&engine).expect("record");
    let volumes = vec![VolumeEntry::new("disk", BACKING_BYTES, "mem:test").expect("entry")];
    let store = CacheStore::format(cache, PAGE_BYTES, &record, volumes, true).expect("format");
    store.record_open(None).expect("open for service: epoch 1");
    let (found, log) = store.read_log().expect("the empty log");
    engine.cache_slots = store.layout().slot_count;
    Driver::recover_log(
        engine,
        Arc::new(store),
        found,
        &log,
        vec![backing],
        DriverConfig::default(),
    )
    .expect("driver")
}

fn superblock_of(path: &Path) -> Superblock {
    let bytes = std::fs::read(path).expect("cache bytes");
    Superblock::decode(&bytes[..4096]).expect("superblock")
}

#[test]
fn a_log_cache_keeps_every_acknowledged_write_across_close_crash_and_drain() {
    let d = Dir::new();
    let (cache_path, backing) = (d.path("cache.img"), d.path("b.img"));
    let cfg = config(&cache_path, &backing, true);
    let cache = Cache::open(&cfg).expect("format");
    assert!(cache.open_report().expect("persistent").formatted);
    assert_eq!(
        superblock_of(&cache_path).format_version,
        FORMAT_VERSION_LOG
    );
    // Single pages, runs of 8 and a 64-page write, then overwrites.
    write_pages(&cache, 0, 40, 1, 1);
    write_pages(&cache, 40, 64, 8, 1);
    write_pages(&cache, 104, 64, 64, 1);
    write_pages(&cache, 0, 20, 4, 2);
    assert_pages(&cache, 0, 20, 2);
    assert_pages(&cache, 20, 148, 1);
    let closed = cache.close().expect("close");
    assert!(
        closed.engine.log_batches > 0,
        "batches written: {:?}",
        closed.engine
    );
    assert!(closed.dirty_pages > 0, "write-back keeps them dirty");

    // Reopened without asking for a format: the log is found and kept.
    let cfg2 = config(&cache_path, &backing, false);
    let cache = Cache::open(&cfg2).expect("reopen");
    let report = cache.open_report().expect("persistent");
    assert!(report.was_clean && report.log.is_some(), "{report:?}");
    assert_eq!(report.dirty_pages, closed.dirty_pages);
    assert_pages(&cache, 0, 20, 2);
    assert_pages(&cache, 20, 148, 1);
    write_pages(&cache, 200, 30, 3, 3);
    // A crash of the process (no close): every acknowledged write is back.
    drop(cache);
    let cache = Cache::open(&cfg2).expect("reopen after a crash");
    assert!(!cache.open_report().expect("persistent").was_clean);
    assert_pages(&cache, 0, 20, 2);
    assert_pages(&cache, 20, 148, 1);
    assert_pages(&cache, 200, 30, 3);
    cache
        .drain(std::time::Duration::from_secs(20), |_| {})
        .expect("drain");
    assert_eq!(cache.close().expect("close").dirty_pages, 0);
    let on_backing = std::fs::read(&backing).expect("backing");
    for (first, count, round) in [(0u64, 20u64, 2u8), (20, 148, 1), (200, 30, 3)] {
        for page in first..first + count {
            let at = (page * PAGE_BYTES) as usize;
            assert!(
                on_backing[at..at + PAGE_BYTES as usize] == image(page, round),
                "backing page {page}"
            );
        }
    }
}

#[test]
fn the_log_wraps_around_a_small_cache_many_times() {
    let d = Dir::new();
    let (cache_path, backing) = (d.path("cache.img"), d.path("b.img"));
    let cfg = config(&cache_path, &backing, true);
    let cache = Cache::open(&cfg).expect("format");
    // 2 MiB of cache (about 509 slots); 20 rounds of 1 MiB over 512 pages.
    for round in 0..20u8 {
        let first = (round as u64 * 37) % 256;
        write_pages(&cache, first, 256, 16, round);
        assert_pages(&cache, first, 256, round);
    }
    let engine = cache.close().expect("close").engine;
    assert!(engine.log_advances > 0, "the tail moved: {engine:?}");
    // Each batch the tail met is counted once, its live pages among its
    // pages and its dirty ones among those; with 256 pages written over a
    // ring of about 509, some are live when met, not all.
    let (met, live, dirty) = (
        engine.log_tail_pages,
        engine.log_tail_live_pages,
        engine.log_tail_dirty_pages,
    );
    assert!(met > 0 && live <= met && dirty <= live, "{engine:?}");
    assert!(live < met, "overwritten pages are met stale: {engine:?}");
    let cache = Cache::open(&cfg).expect("reopen");
    for round in 20..30u8 {
        let first = (round as u64 * 37) % 256;
        write_pages(&cache, first, 256, 16, round);
    }
    drop(cache);
    let cache = Cache::open(&cfg).expect("reopen after a crash");
    let last = 29u8;
    assert_pages(&cache, (last as u64 * 37) % 256, 256, last);
    cache
        .drain(std::time::Duration::from_secs(20), |_| {})
        .expect("drain");
    cache.close().expect("close");
}

/// After a crash, the log recovery found is passed batch by batch: each
/// move of the tail names a batch's header and its sequence number, so a
/// second crash while the tail is inside what the first recovery found
/// loses nothing (it once named a stretch of 64 slots, with sequence
/// number 0, and the next recovery found no log at all).
#[test]
fn a_crash_while_the_tail_passes_a_recovered_log_loses_nothing() {
    let d = Dir::new();
    let (cache_path, backing) = (d.path("cache.img"), d.path("b.img"));
    let cfg = config(&cache_path, &backing, true);
    let cache = Cache::open(&cfg).expect("format");
    // Nearly fill the log (about 509 slots) with dirty pages, then crash.
    write_pages(&cache, 0, 400, 16, 1);
    drop(cache);
    for round in 2..7u8 {
        let cache = Cache::open(&cfg).expect("reopen after a crash");
        // Every acknowledged write is back, the first round's too.
        assert_pages(&cache, 0, 400, 1);
        for before in 2..round {
            assert_pages(&cache, 400 + before as u64 * 40, 40, before);
        }
        if round == 6 {
            cache.close().expect("close");
            break;
        }
        let moves = cache.monitor().engine_stats().log_advances;
        // Single pages, each a batch of two slots: the tail must pass
        // batches recovery found to make room.
        write_pages(&cache, 400 + round as u64 * 40, 40, 1, round);
        assert!(
            cache.monitor().engine_stats().log_advances > moves,
            "the tail moved in round {round}"
        );
        drop(cache);
    }
}

/// Read misses' clean copies take only the room kept ahead of the head:
/// a long read of uncached pages never makes the tail destage dirty pages
/// (it once cycled the whole log, leaving nothing dirty).
#[test]
fn read_misses_do_not_push_dirty_pages_out_of_the_log() {
    let d = Dir::new();
    let (cache_path, backing) = (d.path("cache.img"), d.path("b.img"));
    let cache = Cache::open(&config(&cache_path, &backing, true)).expect("format");
    write_pages(&cache, 0, 200, 8, 1);
    let v = &cache.volumes()[0];
    let mut buf = vec![0u8; 16 * PAGE_BYTES as usize];
    for round in 0..3 {
        for first in (256..1024).step_by(16) {
            v.read(first * PAGE_BYTES, &mut buf).expect("read");
            assert!(buf.iter().all(|&b| b == 0), "round {round}: page {first}");
        }
    }
    let engine = cache.monitor().engine_stats();
    assert!(
        engine.read_inserts > 0,
        "read misses were cached: {engine:?}"
    );
    assert_eq!(engine.log_forced_destages, 0, "{engine:?}");
    assert_eq!(cache.dirty_pages(), 200);
    assert_pages(&cache, 0, 200, 1);
    cache.close().expect("close");
}

/// The batch after the last one whose header is found intact: torn (its
/// last page half written) it is discarded whole, with the one after it.
#[test]
fn a_torn_batch_is_discarded_whole_and_ends_the_log() {
    let d = Dir::new();
    let (cache_path, backing) = (d.path("cache.img"), d.path("b.img"));
    let cfg = config(&cache_path, &backing, true);
    let cache = Cache::open(&cfg).expect("format");
    write_pages(&cache, 0, 8, 8, 1); // batch 1: pages 0..8
    write_pages(&cache, 8, 4, 4, 1); // batch 2: pages 8..12
    write_pages(&cache, 0, 8, 8, 2); // batch 3: pages 0..8 again
    drop(cache); // a crash
                 // Batch 3 is the last: header at slot 1 + 8 + 1 + 4 = 14, pages 15..23.
    let sb = superblock_of(&cache_path);
    let slot_at = |s: u64| (sb.layout.data_offset_bytes + s * PAGE_BYTES) as usize;
    let mut bytes = std::fs::read(&cache_path).expect("cache bytes");
    let header = &bytes[slot_at(14)..slot_at(15)];
    let decoded = BatchHeader::decode(header, (&sb.uuid, sb.salt), 3, sb.layout.slot_count)
        .expect("batch 3's header where the format puts it");
    assert_eq!((decoded.payload_slots, decoded.extents.len()), (8, 1));
    assert_eq!(decoded.extents[0].pages, 8);
    // Tear it: the second half of its last page as it was before (zeros).
    let torn = slot_at(22) + PAGE_BYTES as usize / 2;
    bytes[torn..slot_at(23)].fill(0);
    std::fs::write(&cache_path, &bytes).expect("tear");
    let cache = Cache::open(&cfg).expect("reopen");
    let report = cache.open_report().expect("persistent");
    let log = report.log.as_ref().expect("a log");
    // Batches 1 and 2 are the log (read back, or saved by a checkpoint).
    assert_eq!(log.position.batches.len(), 2, "{log:?}");
    assert!(log.end.contains("checksum"), "{}", log.end);
    // Wholly old: every page of batch 3 reads as round 1.
    assert_pages(&cache, 0, 12, 1);
    cache.close().expect("close");
}

#[test]
fn a_format_2_cache_asked_for_format_3_is_refused_untouched() {
    let d = Dir::new();
    let (cache_path, backing) = (d.path("cache.img"), d.path("b.img"));
    let cache = Cache::open(&config(&cache_path, &backing, false)).expect("format 2");
    write_pages(&cache, 0, 4, 1, 1);
    cache.close().expect("close");
    let before = std::fs::read(&cache_path).expect("cache bytes");
    let e = Cache::open(&config(&cache_path, &backing, true))
        .err()
        .expect("refused");
    assert!(
        matches!(
            &e,
            CacheError::Open(OpenError::OtherFormat { found: 2, .. })
        ),
        "{e}"
    );
    let text = e.to_string();
    assert!(
        text.contains("format 2") && text.contains("--force") && text.contains("wcache flush"),
        "{text}"
    );
    assert!(std::fs::read(&cache_path).expect("cache bytes") == before);
    // Kept as format 2 when no format is asked for.
    let cache = Cache::open(&config(&cache_path, &backing, false)).expect("format 2 again");
    assert_pages(&cache, 0, 4, 1);
    cache.close().expect("close");
    let store = CacheStore::open(
        wcache_io::cache::open_existing_cache_device(&cache_path, SyncMode::Fdatasync)
            .expect("device"),
    )
    .expect("store");
    assert_eq!(store.superblock().format_version, 2);
}

/// A batch whose write fails is written again with no page (its requests
/// fail), keeping its place between its header and the next: the batches
/// written after it are found at recovery (a rewrite that carried no
/// payload once ended the log there, losing every later batch).
#[test]
fn a_failed_batch_written_again_keeps_the_log_whole() {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use wcache_io::{FaultPlan, FaultyDevice, MemDevice};
    let mem = Arc::new(MemDevice::new(CACHE_BYTES));
    let plan = FaultPlan::new();
    let driver = log_driver(Arc::new(FaultyDevice::new(mem.clone(), plan.clone())));
    let vol = wcache_core::types::VolumeId(0);
    let write =
        |page: u64, round: u8| driver.write(vol, page * PAGE_BYTES, &image(page, round), false);
    for page in 0..8 {
        write(page, 1).expect("before the failure");
    }
    plan.fail_next_writes.store(1, Ordering::SeqCst);
    assert!(write(8, 1).is_err(), "the failed batch's request fails");
    assert_eq!(plan.injected(), 1);
    for page in 9..16 {
        write(page, 1).expect("after the failure");
    }
    drop(driver); // a crash: nothing more is written
    let store = CacheStore::open(mem).expect("reopen");
    let (found, log) = store.read_log().expect("the log");
    let mut pages: Vec<u64> = found.iter().map(|f| f.record.key.page().0).collect();
    pages.sort();
    let acknowledged: Vec<u64> = (0..8).chain(9..16).collect();
    assert_eq!(
        pages, acknowledged,
        "every acknowledged page is found: {}",
        log.end
    );
}

/// Recovery starts from the checkpoint in force and reads only the batches
/// after it, finding every version the whole log's replay finds; a damaged
/// checkpoint is not used, and the whole log is read instead.
#[test]
fn recovery_reads_the_checkpoint_and_the_log_after_it_or_the_whole_log() {
    use std::sync::Arc;
    use wcache_io::format::log::checkpoint_copy;
    use wcache_io::{BlockDevice, MemDevice};
    let mem = Arc::new(MemDevice::new(CACHE_BYTES));
    let driver = log_driver(mem.clone());
    let vol = wcache_core::types::VolumeId(0);
    // Two rounds over 160 pages: 400 slots of log, past the first
    // checkpoint (half this small ring), with superseded versions in it.
    for round in 1..=2 {
        for first in (0..160).step_by(4) {
            let data: Vec<u8> = (first..first + 4).flat_map(|p| image(p, round)).collect();
            driver
                .write(vol, first * PAGE_BYTES, &data, false)
                .expect("write");
        }
    }
    // Checkpoints run on the driver's threads beside the writes: wait for
    // the first to be in force (a busy machine runs them late).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut checkpoints = 0;
    while checkpoints == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        checkpoints = driver.engine_stats().log_checkpoints;
    }
    assert!(checkpoints > 0, "no checkpoint taken in 20 s");
    drop(driver); // a crash: nothing more is written
    let store = CacheStore::open(mem.clone()).expect("reopen");
    let (from_cp, log) = store.read_log().expect("the log from the checkpoint");
    let (whole, whole_log) = store.read_log_whole().expect("the whole log");
    assert!(log.checkpoint.starts_with("through batch"), "{log:?}");
    assert_eq!(log.position, whole_log.position);
    assert_eq!(
        (log.last_epoch, whole_log.last_epoch),
        (1, 1),
        "the run's epoch"
    );
    assert!(
        log.batches < whole_log.batches,
        "{} batches read after the checkpoint, {} in the log",
        log.batches,
        whole_log.batches
    );
    let slots = |f: &[wcache_core::RecoveredSlot]| {
        let mut v: Vec<(u64, u32)> = f.iter().map(|f| (f.record.key.0, f.slot.0)).collect();
        v.sort();
        v
    };
    assert_eq!(slots(&from_cp), slots(&whole));
    assert_eq!(from_cp.len(), 160);
    let dirty = |f: &[wcache_core::RecoveredSlot]| f.iter().filter(|f| f.record.dirty).count();
    assert!(dirty(&from_cp) <= dirty(&whole));
    // Damage the copy in force: the whole log is read.
    let copy = log.start.checkpoint.expect("a checkpoint in force").copy;
    let (offset, _) = checkpoint_copy(&store.layout(), copy).expect("a checkpoint area");
    mem.write_at(&[0xff; 512], offset + 4096).expect("damage");
    let (damaged, log) = store.read_log().expect("the log without its checkpoint");
    assert!(log.checkpoint.contains("checksum"), "{}", log.checkpoint);
    assert_eq!(log.batches, whole_log.batches);
    assert_eq!(slots(&damaged), slots(&whole));
}

/// A power loss can keep a later batch and tear an earlier one (the device
/// and the page cache write back in any order what no flush ordered). The
/// next run writes its first batch where the torn one was: a batch of the
/// same size puts the next header on the stale batch after it, whose
/// sequence number is the one expected next. Recovery must not take it for
/// the new run's (it carries an older run's epoch), or an acknowledged
/// write reads back older data after the next crash.
#[test]
fn a_stale_batch_of_an_earlier_run_is_not_read_as_the_next_one() {
    let d = Dir::new();
    let (cache_path, backing) = (d.path("cache.img"), d.path("b.img"));
    let cfg = config(&cache_path, &backing, true);
    let cache = Cache::open(&cfg).expect("format");
    write_pages(&cache, 0, 4, 4, 1); // batch 1: header slot 0, pages 1..5
    write_pages(&cache, 0, 4, 4, 2); // batch 2: header 5, pages 6..10
    write_pages(&cache, 0, 4, 4, 3); // batch 3: header 10, pages 11..15
    drop(cache); // a crash
    let sb = superblock_of(&cache_path);
    let slot_at = |s: u64| (sb.layout.data_offset_bytes + s * PAGE_BYTES) as usize;
    let mut bytes = std::fs::read(&cache_path).expect("cache bytes");
    let stale = BatchHeader::decode(
        &bytes[slot_at(10)..slot_at(11)],
        (&sb.uuid, sb.salt),
        3,
        sb.layout.slot_count,
    )
    .expect("batch 3 where the format puts it");
    assert_eq!(stale.payload_slots, 4);
    // The power loss tore batch 2 and kept batch 3.
    bytes[slot_at(9) + 100..slot_at(10)].fill(0);
    std::fs::write(&cache_path, &bytes).expect("tear");
    let cache = Cache::open(&cfg).expect("reopen");
    assert_pages(&cache, 0, 4, 1);
    // The new run's first batch takes batch 2's place, with its size.
    write_pages(&cache, 0, 4, 4, 4);
    drop(cache); // a crash: the write was acknowledged (persist-on-write)
    let after = std::fs::read(&cache_path).expect("cache bytes");
    assert!(
        after[slot_at(10)..slot_at(15)] == bytes[slot_at(10)..slot_at(15)],
        "the stale batch is still there, as the new run's next header"
    );
    let cache = Cache::open(&cfg).expect("reopen after the second crash");
    let log = cache
        .open_report()
        .and_then(|r| r.log.as_ref())
        .expect("a log");
    assert!(log.end.contains("earlier run"), "{}", log.end);
    assert_pages(&cache, 0, 4, 4);
    cache.close().expect("close");
}

/// A write larger than the log takes at once (a quarter of its ring: here
/// about 120 pages) runs in pieces instead of being refused; so does a
/// write of zeroes; both at offsets that are not page-aligned.
#[test]
fn a_write_larger_than_the_log_takes_at_once_runs_in_pieces() {
    let d = Dir::new();
    let cfg = config(&d.path("cache.img"), &d.path("b.img"), true);
    let cache = Cache::open(&cfg).expect("format");
    let v = &cache.volumes()[0];
    let (at, len) = (3 * PAGE_BYTES + 100, (1 << 20) + 333);
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + 13) as u8).collect();
    v.write(at, &data, false)
        .expect("a 1 MiB write on a 2 MiB log cache");
    let mut back = vec![0u8; len as usize];
    v.read(at, &mut back).expect("read");
    assert!(back == data, "the write reads back whole");
    // Zeroes over 600,000 bytes in the middle of it: more than a piece.
    let (zat, zlen) = (at + 5000, 600_000u64);
    v.write_zeroes(zat, zlen, false).expect("zeroes");
    let mut z = vec![1u8; zlen as usize];
    v.read(zat, &mut z).expect("read zeroes");
    assert!(z.iter().all(|&b| b == 0), "zeroes read back");
    let mut around = vec![0u8; 100];
    v.read(zat - 100, &mut around)
        .expect("read before the zeroes");
    assert!(
        around == data[4900..5000],
        "the bytes before the zeroes kept"
    );
    v.read(zat + zlen, &mut around)
        .expect("read after the zeroes");
    let from = (zat + zlen - at) as usize;
    assert!(
        around == data[from..from + 100],
        "the bytes after the zeroes kept"
    );
    cache.close().expect("close");
}

/// Asked no format (the CLI's default), a new cache is format 3 where a
/// log's ring fits and format 2 where it does not (under 64 slots), and
/// either serves its writes.
#[test]
fn a_new_cache_asked_no_format_is_format_3_where_a_log_fits() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (bytes, log) in [(CACHE_BYTES, true), (256 << 10, false)] {
        let path = dir.path().join(format!("cache-{bytes}.img"));
        let mut c = config(&path, &dir.path().join("b.img"), false);
        c.format = FormatAsked::FoundNewLog;
        if let CacheDeviceSpec::File {
            create_size_bytes, ..
        } = &mut c.cache
        {
            *create_size_bytes = bytes;
        }
        let cache = Cache::open(&c).expect("open");
        write_pages(&cache, 0, 8, 4, 1);
        assert_pages(&cache, 0, 8, 1);
        cache.close().expect("close");
        let sb = superblock_of(&path);
        assert_eq!(sb.layout.log, log, "a cache of {bytes} bytes");
    }
}

/// A write's batch is written and answered while destages hang in the
/// backing: a pool thread is kept from destages, and a request's commands
/// go ahead of them. (Before, every pool thread could be inside a destage
/// to a slow backing while the batch waited behind them: 1.4 s a write
/// during a drain of expired pages to an emulated HDD.)
#[test]
fn a_write_is_answered_while_every_destage_hangs_in_the_backing() {
    use std::sync::{mpsc, Arc};
    use std::time::Duration;
    use wcache_core::types::VolumeId;
    use wcache_core::{RequestFlags, RequestKind};
    use wcache_io::{DrainError, Io, MemDevice};
    let hung = Arc::new(hung::HungBacking::new(BACKING_BYTES));
    let cache = Arc::new(MemDevice::new(CACHE_BYTES));
    let driver = log_driver_over(cache, hung.clone());
    let vol = VolumeId(0);
    // 64 dirty pages in 16 groups: more destages than pool threads.
    for page in 0..64u64 {
        let data = image(page, 1);
        driver
            .write(vol, page * PAGE_BYTES, &data, false)
            .expect("write");
    }
    let started = driver.drain_timeout(Duration::from_millis(200));
    assert!(
        matches!(started, Err(DrainError::Timeout { .. })),
        "the drain's destages hang: {started:?}"
    );
    assert!(
        driver.inspect_engine(|e| e.destages_in_flight()) > 0,
        "destages are in flight, hung in the backing"
    );
    let (tx, rx) = mpsc::channel();
    let io = Io {
        kind: RequestKind::Write,
        offset_bytes: 100 * PAGE_BYTES,
        len_bytes: PAGE_BYTES,
        flags: RequestFlags::default(),
    };
    let done: wcache_io::WriteDone = Box::new(move |result, _, _| {
        let _ = tx.send(result.map_err(|e| e.to_string()));
    });
    driver
        .write_batch()
        .write_async(vol, io, image(100, 2), 0, done);
    let answer = rx.recv_timeout(Duration::from_secs(20));
    let hung_still = driver.inspect_engine(|e| e.destages_in_flight());
    hung.release();
    assert_eq!(
        answer,
        Ok(Ok(())),
        "the write is answered while {hung_still} destages hang"
    );
    driver.drain().expect("drain once released");
    let mut back = vec![0u8; PAGE_BYTES as usize];
    driver.read(vol, 100 * PAGE_BYTES, &mut back).expect("read");
    assert!(back == image(100, 2), "the write reads back");
    for page in 0..64u64 {
        driver
            .read(vol, page * PAGE_BYTES, &mut back)
            .expect("read");
        assert!(back == image(page, 1), "page {page} reads back");
    }
}
