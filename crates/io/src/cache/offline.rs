//! Opening a cache device no server is using, to drain it (`wcache flush
//! --cache`): never created or formatted, its volumes checked against its
//! superblock's, the engine run with what the superblock recorded.

use super::*;

/// The write group the offline drain uses when the superblock does not
/// record one (version 1): at least this, and at least a page.
const OFFLINE_GROUP_BYTES_MIN: u64 = 64 * 1024;

/// What an offline drain needs: an existing cache device and the volumes
/// its superblock names, in order.
#[derive(Clone, Debug)]
pub struct OfflineConfig {
    pub cache_path: PathBuf,
    pub volumes: Vec<VolumeSpec>,
    pub backing_sync: SyncMode,
    pub driver: DriverConfig,
    /// The host journal in bytes of a cache served write-back-journaled
    /// (its backings' journals are that large); required for one.
    pub journal_bytes: Option<u64>,
}

/// Where the engine configuration of a running cache comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineSource {
    /// The settings it was started with (`Cache::open`); a persistent
    /// cache's superblock now records them.
    Settings,
    /// The superblock's record of the last open for service (`open_offline`).
    Recorded,
    /// Not recorded (a version-1 superblock): `open_offline` runs
    /// write-back with a write group of max(page, 64 KiB) and the default
    /// destage order and rate. Every page is destaged all the same, perhaps
    /// more slowly than with the server's settings.
    Guessed,
}

/// The engine configuration `open_offline` runs a cache device with: the
/// superblock's page size and slot count, and its recorded group size and
/// policies, or for a version-1 superblock (nothing recorded) the guess
/// `EngineSource::Guessed` describes.
pub fn offline_engine_config(sb: &Superblock) -> (EngineConfig, EngineSource) {
    let page = sb.layout.page_size_bytes;
    let mut engine = EngineConfig {
        page_size_bytes: page,
        group_size_bytes: page.max(OFFLINE_GROUP_BYTES_MIN),
        cache_slots: sb.layout.slot_count,
        write_policy: WritePolicyKind::WriteBack,
        ..EngineConfig::default()
    };
    match &sb.engine {
        Some(record) => {
            record.apply(&mut engine);
            (engine, EngineSource::Recorded)
        }
        None => (engine, EngineSource::Guessed),
    }
}

impl Cache {
    /// Opens a cache device that no server is using, to drain it: never
    /// creates or formats; the volumes must be exactly the ones its
    /// superblock names (same order, sizes and backings), since a drain to
    /// the wrong backing would corrupt it. The engine runs with the
    /// superblock's page size and recorded configuration
    /// (`offline_engine_config`; `engine_source` says whether it was
    /// recorded or, on a version-1 device, guessed). The superblock keeps
    /// its version and record.
    pub fn open_offline(config: &OfflineConfig) -> Result<Cache, CacheError> {
        check_volume_names(&config.volumes)?;
        if !config.cache_path.exists() {
            return Err(CacheError::Missing(config.cache_path.display().to_string()));
        }
        let mut locks = vec![DeviceLock::acquire(
            &config.cache_path,
            LockMode::Exclusive,
            "cache device",
        )?];
        let dev = open_existing_cache_device(&config.cache_path, SyncMode::Fdatasync)?;
        let sb = CacheStore::read_superblock(dev.as_ref())?;
        let backings = open_backings(&config.volumes, (config.backing_sync, None), None, None)?;
        locks.extend(lock_backings(&config.volumes)?);
        let (mut engine, source) = offline_engine_config(&sb);
        if engine.write_policy == WritePolicyKind::JournaledWriteBack {
            let bytes = config.journal_bytes.ok_or(CacheError::JournalSizeNeeded)?;
            let pages = bytes / engine.page_size_bytes.max(1);
            engine.journal = JournalConfig {
                journal_pages: pages,
                checkpoint: CheckpointMode::BackingJournal { pages },
                ..JournalConfig::default()
            };
        }
        let (backings, _) = open_journals(
            backings,
            &config.volumes,
            &engine,
            (config.backing_sync, None),
            &mut locks,
        )?;
        let given = volume_entries(&config.volumes, &backings)?;
        if given != sb.volumes {
            return Err(CacheError::Mismatch {
                cache: show_volumes(&sb.volumes),
                given: show_volumes(&given),
            });
        }
        // Used only if the device must be formatted anew (it no longer fits
        // its slot count and holds no dirty page): then it is what this run uses.
        let record = EngineRecord::from_config(&engine)?;
        let device = CacheDeviceInfo {
            name: dev.name(),
            size_bytes: dev.len_bytes(),
            mapped: false,
            on_volatile_memory: is_on_volatile_memory(&config.cache_path),
            durability: None,
        };
        let (driver, report) = start_persistent(
            &mut engine,
            dev,
            given,
            (&record, false),
            (false, FormatAsked::Found),
            backings.clone(),
            config.driver.clone(),
        )?;
        let mut cache = Cache::assemble(
            driver,
            &config.volumes,
            &backings,
            1,
            device,
            Some(report),
            (engine, source),
        );
        cache._locks = locks;
        Ok(cache)
    }
}
