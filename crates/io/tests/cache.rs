//! The cache lifecycle (`wcache_io::cache`): format then reopen and recover;
//! another configuration's dirty cache refused without force and left
//! byte for byte as it was; bad settings and specs named before any cache
//! file is created or written; the offline drain (exact volume table, never
//! a blank or missing device); write-back on a memory cache only with the
//! benchmark allowance; volumes end at the last whole block; the superblock
//! records the engine configuration at every open for service and the
//! offline drain uses it; a version-1 device is drained with a guess and
//! upgraded by the next server; a newer version is refused.

use std::path::{Path, PathBuf};

use wcache_core::{EngineConfig, WritePolicyKind};
use wcache_io::format::{EngineRecord, Superblock};
use wcache_io::store::OpenError;
use wcache_io::{
    Cache, CacheConfig, CacheDeviceSpec, CacheError, CacheStore, DriverConfig, EngineSource,
    FormatAsked, OfflineConfig, SyncMode, VolumeSpec,
};

const PAGE_BYTES: u64 = 4096;
const CACHE_BYTES: u64 = 1 << 20;
const BACKING_BYTES: u64 = 1 << 20;

fn volume(name: &str, backing: &Path) -> VolumeSpec {
    VolumeSpec {
        name: name.to_string(),
        backing: backing.display().to_string(),
        journal: None,
    }
}

fn config(cache: &Path, volumes: Vec<VolumeSpec>) -> CacheConfig {
    CacheConfig {
        cache: CacheDeviceSpec::File {
            path: cache.to_path_buf(),
            create_size_bytes: CACHE_BYTES,
            size_given: true,
            sync: SyncMode::Fdatasync,
            direct: false,
            measure_sync: false,
        },
        volumes,
        backing_sync: SyncMode::Fdatasync,
        backing_create_size_bytes: Some(BACKING_BYTES),
        engine: EngineConfig {
            page_size_bytes: PAGE_BYTES,
            group_size_bytes: 16 * 1024,
            write_policy: WritePolicyKind::WriteBack,
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

/// Writes pages `0..pages` of volume 0 (FUA), returns the cache's dirty pages.
fn write_pages(cache: &Cache, pages: u64, round: u8) -> u64 {
    let v = &cache.volumes()[0];
    for page in 0..pages {
        v.write(page * PAGE_BYTES, &image(page, round), page % 2 == 0)
            .expect("write");
    }
    cache.dirty_pages()
}

fn assert_pages(cache: &Cache, pages: u64, round: u8) {
    let v = &cache.volumes()[0];
    let mut buf = vec![0u8; PAGE_BYTES as usize];
    for page in 0..pages {
        v.read(page * PAGE_BYTES, &mut buf).expect("read");
        assert!(buf == image(page, round), "page {page}");
    }
}

/// Pages `0..pages` of the backing file hold `image(page, round)`.
fn assert_backing(backing: &Path, pages: u64, round: u8) {
    let on_backing = std::fs::read(backing).expect("backing");
    for page in 0..pages {
        let at = (page * PAGE_BYTES) as usize;
        assert!(
            on_backing[at..at + PAGE_BYTES as usize] == image(page, round),
            "backing page {page}"
        );
    }
}

struct Dir {
    dir: tempfile::TempDir,
}

impl Dir {
    fn new() -> Dir {
        Dir {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

#[test]
fn format_then_reopen_recovers_every_acknowledged_write() {
    let d = Dir::new();
    let (cache_path, backing) = (d.path("cache.img"), d.path("b.img"));
    let cfg = config(&cache_path, vec![volume("disk", &backing)]);
    let cache = Cache::open(&cfg).expect("format");
    let report = cache.open_report().expect("persistent");
    assert!(report.formatted && report.reformatted.is_none());
    assert_eq!(cache.volumes()[0].size_bytes(), BACKING_BYTES);
    assert_eq!(cache.device().size_bytes, CACHE_BYTES);
    assert!(
        write_pages(&cache, 20, 1) > 0,
        "write-back keeps them dirty"
    );
    let closed = cache.close().expect("close");
    assert!(closed.recorded_clean);
    assert!(closed.dirty_pages > 0);

    let cache = Cache::open(&cfg).expect("reopen");
    let report = cache.open_report().expect("persistent");
    assert!(!report.formatted && report.reformatted.is_none());
    assert!(report.was_clean);
    assert_eq!(report.dirty_pages, closed.dirty_pages);
    assert_pages(&cache, 20, 1);
    // A crash (no close): the next start says so and still has every page.
    drop(cache);
    let cache = Cache::open(&cfg).expect("reopen after a crash");
    assert!(!cache.open_report().expect("persistent").was_clean);
    assert_pages(&cache, 20, 1);
    cache
        .drain(std::time::Duration::from_secs(10), |_| {})
        .expect("drain");
    let closed = cache.close().expect("close");
    assert_eq!(closed.dirty_pages, 0);
    assert_backing(&backing, 20, 1);
    // A drained, closed cache holds no record.
    let store = CacheStore::open(
        wcache_io::cache::open_existing_cache_device(&cache_path, SyncMode::Fdatasync)
            .expect("device"),
    )
    .expect("store");
    assert!(store.superblock().clean);
    assert!(store.scan(true).expect("scan").found.is_empty());
}

#[test]
fn another_configurations_dirty_cache_is_refused_and_left_unchanged() {
    let d = Dir::new();
    let cache_path = d.path("cache.img");
    let one = config(&cache_path, vec![volume("one", &d.path("b1.img"))]);
    let cache = Cache::open(&one).expect("format");
    let dirty = write_pages(&cache, 10, 1);
    assert!(dirty > 0);
    cache.close().expect("close");
    let before = std::fs::read(&cache_path).expect("cache bytes");

    let two = config(&cache_path, vec![volume("two", &d.path("b2.img"))]);
    match Cache::open(&two) {
        Err(CacheError::Open(OpenError::OtherConfiguration { dirty_pages, .. })) => {
            assert_eq!(dirty_pages, dirty)
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("another configuration's dirty cache was not refused"),
    }
    let message = Cache::open(&two).err().expect("refused").to_string();
    assert!(
        message.contains("dirty pages of another configuration")
            && message.contains("one=")
            && message.contains("--force"),
        "{message}"
    );
    assert!(
        std::fs::read(&cache_path).expect("cache bytes") == before,
        "a refused start changed the cache device"
    );

    let forced = CacheConfig { force: true, ..two };
    let cache = Cache::open(&forced).expect("forced");
    let what = cache
        .open_report()
        .and_then(|r| r.reformatted.clone())
        .expect("the report says what was discarded");
    assert!(what.contains(&format!("{dirty} dirty pages")), "{what}");
    cache.close().expect("close");
}

#[test]
fn bad_settings_and_specs_are_named_and_touch_no_cache() {
    let d = Dir::new();
    let cache_path = d.path("cache.img");
    let backing = d.path("b.img");
    let good = config(&cache_path, vec![volume("disk", &backing)]);
    let fresh = d.path("fresh.img");
    let with = |cache: &Path, edit: &dyn Fn(&mut CacheConfig)| {
        let mut c = config(cache, vec![volume("disk", &backing)]);
        edit(&mut c);
        c
    };
    type Edit = Box<dyn Fn(&mut CacheConfig)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "emulated model",
            Box::new(|c| c.volumes[0].backing = "emulated-tape:x.img".into()),
            "unknown emulated model \"tape\"",
        ),
        (
            "memory backing size",
            Box::new(|c| c.volumes[0].backing = "mem:12Q".into()),
            "cannot parse size \"12Q\"",
        ),
        (
            "page size",
            Box::new(|c| c.engine.page_size_bytes = 3000),
            "page_size_bytes = 3000",
        ),
        (
            "destage order",
            Box::new(|c| c.engine.destage_order = "fifo".into()),
            "\"fifo\"",
        ),
        (
            "duplicate volume",
            Box::new(|c| c.volumes.push(c.volumes[0].clone())),
            "export name \"disk\" given twice",
        ),
        (
            "no volume",
            Box::new(|c| c.volumes.clear()),
            "no volume to serve",
        ),
        (
            "volatile allowance on a file",
            Box::new(|c| c.volatile_write_back = true),
            "needs the cache in process memory",
        ),
        (
            "block size",
            Box::new(|c| c.block_size_bytes = 3),
            "block size 3 is not a power of two",
        ),
        (
            "backing under one block",
            Box::new(|c| c.volumes[0].backing = "mem:100".into()),
            "100 bytes: smaller than one block of 512",
        ),
        (
            "cache smaller than a write group",
            Box::new(|c| c.engine.group_size_bytes = 2 * CACHE_BYTES),
            "fewer than one write group",
        ),
        (
            "engine that cannot fit the formatted cache",
            Box::new(|c| c.engine.group_size_bytes = CACHE_BYTES),
            "cache_slots",
        ),
    ];
    // A new cache path: nothing is created.
    for (what, edit, needle) in &cases {
        let e = Cache::open(&with(&fresh, edit.as_ref()))
            .err()
            .unwrap_or_else(|| panic!("{what}: accepted"));
        assert!(e.to_string().contains(needle), "{what}: {e}");
        assert!(!fresh.exists(), "{what}: created the cache device");
    }
    // An existing cache with dirty pages: not one byte changes.
    let cache = Cache::open(&good).expect("format");
    write_pages(&cache, 5, 1);
    drop(cache); // as a crash leaves it
    let before = std::fs::read(&cache_path).expect("cache bytes");
    for (what, edit, needle) in &cases {
        let e = Cache::open(&with(&cache_path, edit.as_ref()))
            .err()
            .unwrap_or_else(|| panic!("{what}: accepted"));
        assert!(e.to_string().contains(needle), "{what}: {e}");
        assert!(
            std::fs::read(&cache_path).expect("cache bytes") == before,
            "{what}: a refused start changed the cache device"
        );
    }
    // The good configuration still recovers everything.
    let cache = Cache::open(&good).expect("reopen");
    assert_pages(&cache, 5, 1);
    cache.close().expect("close");
}

#[test]
fn offline_drain_needs_the_exact_volume_table_and_empties_the_cache() {
    let d = Dir::new();
    let cache_path = d.path("cache.img");
    let backing = d.path("b.img");
    let cache = Cache::open(&config(&cache_path, vec![volume("disk", &backing)])).expect("format");
    write_pages(&cache, 30, 2);
    cache.close().expect("close");
    let before = std::fs::read(&cache_path).expect("cache bytes");

    let offline = |cache_path: &Path, volumes: Vec<VolumeSpec>| OfflineConfig {
        cache_path: cache_path.to_path_buf(),
        volumes,
        backing_sync: SyncMode::Fdatasync,
        driver: DriverConfig {
            io_threads: 2,
            ..DriverConfig::default()
        },
        journal_bytes: None,
    };
    let wrong = offline(&cache_path, vec![volume("other", &backing)]);
    let e = Cache::open_offline(&wrong).err().expect("mismatch refused");
    assert!(matches!(e, CacheError::Mismatch { .. }), "{e}");
    assert!(e.to_string().contains("the cache has [disk="), "{e}");
    assert!(std::fs::read(&cache_path).expect("cache bytes") == before);

    let missing = d.path("missing.img");
    let e = Cache::open_offline(&offline(&missing, vec![volume("disk", &backing)]))
        .err()
        .expect("missing");
    assert!(matches!(e, CacheError::Missing(_)), "{e}");
    assert!(!missing.exists());
    let blank = d.path("blank.img");
    std::fs::write(&blank, vec![0u8; CACHE_BYTES as usize]).expect("blank");
    let e = Cache::open_offline(&offline(&blank, vec![volume("disk", &backing)]))
        .err()
        .expect("blank");
    assert!(matches!(e, CacheError::Blank(_)), "{e}");
    assert!(std::fs::read(&blank)
        .expect("blank")
        .iter()
        .all(|&b| b == 0));

    let cache =
        Cache::open_offline(&offline(&cache_path, vec![volume("disk", &backing)])).expect("open");
    let total = cache.dirty_pages();
    assert!(total > 0);
    let mut seen = Vec::new();
    cache
        .drain(std::time::Duration::from_secs(10), |dirty| seen.push(dirty))
        .expect("drain");
    assert!(seen.iter().all(|&dirty| dirty <= total), "{seen:?}");
    let closed = cache.close().expect("close");
    assert!(closed.recorded_clean && closed.dirty_pages == 0);
    assert_backing(&backing, 30, 2);
}

#[test]
fn memory_cache_write_back_needs_the_benchmark_allowance() {
    let memory = |volatile_write_back: bool| CacheConfig {
        cache: CacheDeviceSpec::parse("mem", (None, CACHE_BYTES), SyncMode::Fdatasync, false),
        volumes: vec![VolumeSpec {
            name: "disk".into(),
            backing: "mem:1M".into(),
            journal: None,
        }],
        format: FormatAsked::Found,
        volatile_write_back,
        ..config(Path::new("unused"), Vec::new())
    };
    let e = Cache::open(&memory(false)).err().expect("refused");
    assert!(matches!(e, CacheError::WriteBackNeedsRecovery), "{e}");
    let cfg = memory(true);
    assert!(cfg.is_volatile_write_back());
    let cache = Cache::open(&cfg).expect("allowed for benchmarks");
    assert!(cache.open_report().is_none(), "nothing persistent");
    let dirty = write_pages(&cache, 8, 3);
    assert_pages(&cache, 8, 3);
    let closed = cache.close().expect("close");
    assert!(!closed.recorded_clean);
    assert_eq!(closed.dirty_pages, dirty);
    assert!(!Path::new("unused").exists());
}

#[test]
fn volumes_end_at_the_last_whole_block_and_take_every_request_kind() {
    let cfg = CacheConfig {
        cache: CacheDeviceSpec::Memory {
            size_bytes: CACHE_BYTES,
        },
        volumes: vec![VolumeSpec {
            name: "odd".into(),
            backing: "mem:5000".into(),
            journal: None,
        }],
        engine: EngineConfig {
            write_policy: WritePolicyKind::WriteThrough,
            ..config(Path::new("unused"), Vec::new()).engine
        },
        ..config(Path::new("unused"), Vec::new())
    };
    let cache = Cache::open(&cfg).expect("open");
    let v = cache.volumes()[0].clone();
    assert_eq!(
        (v.name(), v.size_bytes(), v.backing_size_bytes()),
        ("odd", 4608, 5000)
    );
    assert_eq!(v.block_size_bytes(), 512);
    v.write(4096, &[0x11; 512], true)
        .expect("write the last block");
    let mut buf = [0u8; 512];
    v.read(4096, &mut buf).expect("read");
    assert_eq!(buf, [0x11; 512]);
    v.write_zeroes(4096, 256, false).expect("write zeroes");
    v.read(4096, &mut buf).expect("read");
    assert!(buf[..256].iter().all(|&b| b == 0) && buf[256..].iter().all(|&b| b == 0x11));
    v.trim(0, 4096, false).expect("trim");
    v.flush().expect("flush");
    assert_eq!(cache.monitor().dirty_pages(), 0, "write-through");
    let closed = cache.close().expect("close");
    assert!(closed.stats.requests >= 6);
}

fn offline_config(cache_path: &Path, volumes: Vec<VolumeSpec>) -> OfflineConfig {
    OfflineConfig {
        cache_path: cache_path.to_path_buf(),
        volumes,
        backing_sync: SyncMode::Fdatasync,
        driver: DriverConfig {
            io_threads: 2,
            ..DriverConfig::default()
        },
        journal_bytes: None,
    }
}

fn superblock_bytes(cache_path: &Path) -> Vec<u8> {
    let mut b = std::fs::read(cache_path).expect("cache bytes");
    b.truncate(4096);
    b
}

fn superblock_of(cache_path: &Path) -> Superblock {
    Superblock::decode(&superblock_bytes(cache_path)).expect("superblock")
}

/// Rewrites the superblock as version `version` with the bytes version 1
/// kept reserved zeroed (what a version-1 wcache wrote), by hand.
fn rewrite_superblock_as(cache_path: &Path, version: u32, zero_v2_fields: bool) {
    let mut b = superblock_bytes(cache_path);
    b[8..12].copy_from_slice(&version.to_le_bytes());
    if zero_v2_fields {
        b[84..128].fill(0);
        b[3968..4092].fill(0);
    }
    let crc = crc32c(&b[..4092]);
    b[4092..4096].copy_from_slice(&crc.to_le_bytes());
    let mut all = std::fs::read(cache_path).expect("cache bytes");
    all[..4096].copy_from_slice(&b);
    std::fs::write(cache_path, all).expect("rewrite superblock");
}

/// crc32c (Castagnoli), bit by bit: the tests do not share the crate's.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= byte as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn every_open_for_service_records_the_engine_configuration_and_flush_uses_it() {
    let d = Dir::new();
    let (cache_path, backing) = (d.path("cache.img"), d.path("b.img"));
    let mut cfg = config(&cache_path, vec![volume("disk", &backing)]);
    cfg.engine.group_size_bytes = 256 * 1024;
    cfg.engine.destage_order = "CSCAN".into();
    cfg.engine.destage_rate = "linear".into();
    cfg.engine.sequential_cutoff_bytes = 512 * 1024;
    let cache = Cache::open(&cfg).expect("format");
    assert_eq!(cache.engine_source(), EngineSource::Settings);
    let sb = superblock_of(&cache_path);
    assert_eq!(sb.format_version, 2);
    let recorded = EngineRecord {
        group_size_bytes: 256 * 1024,
        write_policy: WritePolicyKind::WriteBack,
        destage_order: "cscan",
        destage_rate: "linear",
        admission: "all",
        sequential_cutoff_bytes: 512 * 1024,
    };
    assert_eq!(sb.engine.as_ref(), Some(&recorded), "recorded at format");
    assert_eq!((sb.epoch, sb.transaction_id), (0, 0));
    write_pages(&cache, 30, 4);
    cache.close().expect("close");

    // Another server's settings: recorded at its open.
    let mut other = cfg.clone();
    other.engine.group_size_bytes = 16 * 1024;
    other.engine.destage_order = "lrw".into();
    other.engine.write_policy = WritePolicyKind::WriteThrough;
    let cache = Cache::open(&other).expect("reopen");
    let sb = superblock_of(&cache_path);
    let engine = sb.engine.expect("recorded");
    assert_eq!(engine.group_size_bytes, 16 * 1024);
    assert_eq!(engine.destage_order, "lrw");
    assert_eq!(engine.write_policy, WritePolicyKind::WriteThrough);
    assert!(!sb.clean);
    drop(cache); // a crash: the record stays

    let cache = Cache::open(&cfg).expect("reopen with the first settings");
    assert_eq!(superblock_of(&cache_path).engine.as_ref(), Some(&recorded));
    assert_pages(&cache, 30, 4);
    cache.close().expect("close");

    let cache = Cache::open_offline(&offline_config(&cache_path, vec![volume("disk", &backing)]))
        .expect("offline");
    assert_eq!(cache.engine_source(), EngineSource::Recorded);
    let used = cache.engine_config();
    assert_eq!(
        used.group_size_bytes,
        256 * 1024,
        "no guess: the recorded group"
    );
    assert_eq!(
        (used.destage_order.as_str(), used.destage_rate.as_str()),
        ("cscan", "linear")
    );
    assert_eq!(used.sequential_cutoff_bytes, 512 * 1024);
    cache
        .drain(std::time::Duration::from_secs(10), |_| {})
        .expect("drain");
    assert_eq!(cache.close().expect("close").dirty_pages, 0);
    let sb = superblock_of(&cache_path);
    assert_eq!(
        sb.engine.as_ref(),
        Some(&recorded),
        "the drain keeps the record"
    );
    assert!(sb.clean);
    assert_backing(&backing, 30, 4);
}

#[test]
fn a_version_1_device_is_drained_with_a_guess_and_upgraded_by_the_next_server() {
    let d = Dir::new();
    let (cache_path, backing) = (d.path("cache.img"), d.path("b.img"));
    let cfg = config(&cache_path, vec![volume("disk", &backing)]);
    let cache = Cache::open(&cfg).expect("format");
    let dirty = write_pages(&cache, 30, 5);
    assert!(dirty > 0);
    cache.close().expect("close");
    rewrite_superblock_as(&cache_path, 1, true);
    let sb = superblock_of(&cache_path);
    assert_eq!((sb.format_version, sb.engine.as_ref()), (1, None));
    let opens = sb.open_count;

    // Offline: the drain guesses (64 KiB groups, default order and rate)
    // and leaves the superblock at version 1 (it records no guess).
    let cache = Cache::open_offline(&offline_config(&cache_path, vec![volume("disk", &backing)]))
        .expect("offline on version 1");
    assert_eq!(cache.engine_source(), EngineSource::Guessed);
    let used = cache.engine_config();
    assert_eq!(used.group_size_bytes, 64 * 1024);
    assert_eq!(used.destage_order, EngineConfig::default().destage_order);
    assert_eq!(used.destage_rate, EngineConfig::default().destage_rate);
    assert_eq!(cache.dirty_pages(), dirty);
    cache.close().expect("close without draining");
    let b = superblock_bytes(&cache_path);
    let sb = Superblock::decode(&b).expect("still readable");
    assert_eq!((sb.format_version, sb.engine.as_ref()), (1, None));
    assert_eq!(sb.open_count, opens + 1);
    assert!(b[84..128].iter().chain(&b[3968..4092]).all(|&c| c == 0));

    // A server's open upgrades it, with every dirty page recovered.
    let cache = Cache::open(&cfg).expect("open for service upgrades");
    let report = cache.open_report().expect("persistent");
    assert!(!report.formatted && report.reformatted.is_none());
    assert_eq!(report.dirty_pages, dirty);
    let sb = superblock_of(&cache_path);
    assert_eq!(sb.format_version, 2);
    assert_eq!(
        sb.engine,
        Some(EngineRecord::from_config(&cfg.engine).expect("record"))
    );
    assert_eq!(sb.open_count, opens + 2);
    assert_pages(&cache, 30, 5);
    cache.close().expect("close");
    assert_eq!(superblock_of(&cache_path).format_version, 2);
}

#[test]
fn a_newer_superblock_version_is_refused_by_name_and_left_unchanged() {
    let d = Dir::new();
    let (cache_path, backing) = (d.path("cache.img"), d.path("b.img"));
    let cfg = config(&cache_path, vec![volume("disk", &backing)]);
    let cache = Cache::open(&cfg).expect("format");
    write_pages(&cache, 3, 6);
    cache.close().expect("close");
    rewrite_superblock_as(&cache_path, 4, false);
    let before = std::fs::read(&cache_path).expect("cache bytes");
    let e = Cache::open(&cfg).err().expect("version 4 refused");
    let text = e.to_string();
    assert!(
        text.contains("superblock format version 4: this wcache reads versions 1 to 3 only"),
        "{text}"
    );
    assert!(text.contains("--force"), "{text}");
    let e = Cache::open_offline(&offline_config(&cache_path, vec![volume("disk", &backing)]))
        .err()
        .expect("offline refuses it too");
    assert!(
        e.to_string()
            .contains("superblock format version 4: this wcache reads versions 1 to 3 only"),
        "{e}"
    );
    assert!(std::fs::read(&cache_path).expect("cache bytes") == before);
}

/// An existing cache keeps its size: asking for another is refused, naming
/// both sizes and how to proceed, before anything is written; leaving the
/// size out (not given) opens it as it is, with every acknowledged page.
#[test]
fn an_existing_cache_of_another_size_is_refused_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache_path = dir.path().join("cache.img");
    let volumes = vec![volume("disk", &dir.path().join("backing.img"))];
    let cache = Cache::open(&config(&cache_path, volumes.clone())).expect("format");
    write_pages(&cache, 8, 1);
    cache.close().expect("close");
    let before = std::fs::read(&cache_path).expect("cache");
    let mut bigger = config(&cache_path, volumes.clone());
    if let CacheDeviceSpec::File {
        create_size_bytes, ..
    } = &mut bigger.cache
    {
        *create_size_bytes = 2 * CACHE_BYTES;
    }
    let e = Cache::open(&bigger).err().expect("refused");
    let text = e.to_string();
    assert!(
        text.contains(&format!("is {CACHE_BYTES} bytes"))
            && text.contains(&format!("asks for {}", 2 * CACHE_BYTES))
            && text.contains("not resized"),
        "{text}"
    );
    assert!(
        before == std::fs::read(&cache_path).expect("cache"),
        "the refused open wrote to the cache"
    );
    let mut as_is = config(&cache_path, volumes);
    if let CacheDeviceSpec::File { size_given, .. } = &mut as_is.cache {
        *size_given = false;
    }
    let cache = Cache::open(&as_is).expect("its own size");
    assert_pages(&cache, 8, 1);
    cache.close().expect("close");
}
