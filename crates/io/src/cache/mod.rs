//! The cache lifecycle every front end uses: check the settings, open the
//! backings, open or format the cache device, check its volume table
//! against the volumes asked for, recover, start the `Driver`, hand out one
//! `Volume` handle per volume, drain, and close with a clean shutdown
//! recorded.
//!
//! It exists so that a front end (the NBD server, the offline `flush`, a
//! filesystem or a control socket later) is wiring only, and the rules that
//! keep acknowledged writes safe live in one place: every setting that
//! needs no device is checked before any file is created or written; a
//! backing is opened before the cache device, so a bad backing leaves the
//! cache untouched; a cache holding another configuration's dirty pages is
//! refused unless forced (`CacheStore::open_or_format`); every open for
//! service records the engine configuration in the superblock, and an
//! offline drain runs with the recorded one (it guesses only on a
//! version-1 device, which records none, and says so); an offline drain
//! never formats and never guesses which backing a volume is; write-back on
//! a cache in process memory needs an explicit benchmark-only allowance.
//! It must never make cache decisions (the engine does), move bytes itself
//! (the driver does), print, or know a front end's protocol.

mod devices;
mod errors;
mod monitor;
mod offline;
mod replicated;
mod volume;

pub use crate::driver::Io;
pub use devices::open_existing_cache_device;
use devices::*;
pub use errors::CacheError;
pub use monitor::Monitor;
pub use offline::{offline_engine_config, EngineSource, OfflineConfig};
pub use volume::{Volume, WriteBatch};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wcache_core::config::{CheckpointMode, JournalConfig};
use wcache_core::types::VolumeId;
use wcache_core::{EngineConfig, RequestFlags, RequestKind, Stats, WritePolicyKind};

use crate::backings::{backing_identity, lock_backings, open_backings, open_journals, Backings};
use crate::device::file::{is_on_volatile_memory, FileDevice, FileOptions, SyncMode};
use crate::device::journaled::JournalOpen;
use crate::device::mem::MemDevice;
use crate::device::BlockDevice;
use crate::driver::{DrainError, Driver, DriverConfig, DriverStats, Payload, RequestError};
use crate::format::{EngineRecord, Layout, Superblock, VolumeEntry};
use crate::lock::{DeviceLock, LockMode};
use crate::ops::{ExportStatus, Operator, RequestClass, Snapshot, VolumeLatency};
use crate::replica::keeper::PolicyKeeper;
use crate::replica::Mirror;
use crate::store::{show_volumes, Asked, CacheStore, OpenReport};

/// Where the cache lives.
#[derive(Clone, Debug)]
pub enum CacheDeviceSpec {
    /// Process memory (`mem`): nothing survives the process, no records.
    Memory { size_bytes: u64 },
    /// A file or block device, persistent (superblock and slot records). A
    /// missing file is created sparse with `create_size_bytes`; a nvram file
    /// on tmpfs is mapped.
    File {
        path: PathBuf,
        create_size_bytes: u64,
        /// The operator asked for `create_size_bytes`: an existing device
        /// of another size is refused (a cache is not resized).
        size_given: bool,
        sync: SyncMode,
        direct: bool,
        /// `--cache-sync auto`: `sync` and `direct` give way, once the
        /// device is locked, to what `durability::measure` finds faster on
        /// it (RWF_DSYNC on O_DIRECT, or fdatasync).
        measure_sync: bool,
    },
}

impl CacheDeviceSpec {
    /// `mem`, or the path of a file or block device; `size_bytes` as given
    /// by the operator, or None for `default_size_bytes` (a new device's).
    pub fn parse(
        spec: &str,
        (size_bytes, default_size_bytes): (Option<u64>, u64),
        sync: SyncMode,
        direct: bool,
    ) -> CacheDeviceSpec {
        let size = size_bytes.unwrap_or(default_size_bytes);
        if spec == "mem" {
            return CacheDeviceSpec::Memory { size_bytes: size };
        }
        CacheDeviceSpec::File {
            path: PathBuf::from(spec),
            create_size_bytes: size,
            size_given: size_bytes.is_some(),
            sync,
            direct,
            measure_sync: false,
        }
    }

    /// The same device, its way to durable writes measured when it is
    /// opened (`--cache-sync auto`); memory has nothing to measure.
    pub fn measuring_sync(mut self) -> CacheDeviceSpec {
        if let CacheDeviceSpec::File { measure_sync, .. } = &mut self {
            *measure_sync = true;
        }
        self
    }

    pub fn is_memory(&self) -> bool {
        matches!(self, CacheDeviceSpec::Memory { .. })
    }

    /// The size the device will have when it does not exist yet (memory,
    /// or a file to be created); `None` for an existing file or device.
    fn size_bytes_if_new(&self) -> Option<u64> {
        match self {
            CacheDeviceSpec::Memory { size_bytes } => Some(*size_bytes),
            CacheDeviceSpec::File {
                path,
                create_size_bytes,
                ..
            } => Some(*create_size_bytes).filter(|_| !path.exists()),
        }
    }
}

/// One volume: its name (the NBD export name) and its backing's spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeSpec {
    pub name: String,
    /// FILE, `nbd://HOST[:PORT]/NAME`, `nbd+unix:///NAME?socket=PATH`,
    /// `rbd:POOL/IMAGE[:KEY=VALUE]...`, `emulated-MODEL:SPEC`, `mem:SIZE`.
    pub backing: String,
    /// Write-back-journaled: where this backing's journal lives, a backing
    /// spec of its own (a missing file is created) or `backing-end` (the
    /// backing's last bytes, which must hold no data); required there,
    /// unused by the other policies.
    pub journal: Option<String>,
}

/// Everything needed to start a cache for service.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    pub cache: CacheDeviceSpec,
    /// Volume `i` is the engine's `VolumeId(i)`.
    pub volumes: Vec<VolumeSpec>,
    pub backing_sync: SyncMode,
    /// Size of backing files created because they do not exist (`None`: never create).
    pub backing_create_size_bytes: Option<u64>,
    /// Engine settings; `cache_slots` and `persistent` come from the cache device.
    pub engine: EngineConfig,
    pub driver: DriverConfig,
    /// Smallest block front ends address: a volume ends at the last whole
    /// block of its backing, and a backing under one block is refused.
    pub block_size_bytes: u32,
    /// Start over another configuration's dirty pages, or over an unreadable
    /// superblock, DISCARDING them (the open report says what).
    pub force: bool,
    /// The format asked of the cache device (format 3 also where the
    /// engine asks for its log mode, `EngineConfig::log`).
    pub format: FormatAsked,
    /// BENCHMARKS ONLY: allow write-back on a cache in process memory, which
    /// loses acknowledged writes on any exit or crash.
    pub volatile_write_back: bool,
    /// How long a request to an NBD backing that is away waits for it to
    /// come back before it fails with EIO (None: `NbdOptions`' default).
    pub backing_timeout: Option<Duration>,
    /// Mirror the cache device to a peer host (`crate::replica`).
    pub replicate: Option<crate::replica::MirrorOptions>,
}

/// The format a start asks of its cache device (`CacheConfig::format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FormatAsked {
    /// An existing cache's format; a new one is format 2.
    #[default]
    Found,
    /// An existing cache's format; a new one is format 3, a log of batches
    /// (`docs/format-v3.md`), unless it is mapped (nvram on tmpfs): there
    /// a page write is a memory copy, format 2's run side by side, and the
    /// log's one batch at a time cost a third of the writes
    /// (`scripts/bench-nbd.sh`, 4 KiB QD32 write-back: 0.80–0.91 of nbdkit
    /// memory on format 3, 1.18–1.22 on format 2, 2026-11-28); or too
    /// small for a log's ring (`LOG_SLOTS_MIN` slots).
    FoundNewLog,
    /// Format 2: a format-3 cache is refused unless `force` (which formats
    /// it anew).
    Records,
}

impl CacheConfig {
    /// Checks every setting that needs no device. Touches no file: a front
    /// end may call it before it creates anything of its own.
    pub fn check(&self) -> Result<(), CacheError> {
        let in_memory = self.cache.is_memory();
        // As the engine will run: persistent on a cache file or device.
        let engine = EngineConfig {
            persistent: !in_memory,
            ..self.engine.clone()
        };
        engine.validate_settings()?;
        if let CacheDeviceSpec::File { path, .. } = &self.cache {
            if self.volatile_write_back {
                return Err(CacheError::WriteBackCacheNotVolatile {
                    cache: path.display().to_string(),
                });
            }
        }
        if self.engine.write_policy.build().keeps_dirty() && in_memory && !self.volatile_write_back
        {
            return Err(CacheError::WriteBackNeedsRecovery);
        }
        if !self.block_size_bytes.is_power_of_two() {
            return Err(CacheError::BadBlockSize(self.block_size_bytes));
        }
        check_volume_names(&self.volumes)
    }

    /// True when acknowledged writes live only in process memory.
    pub fn is_volatile_write_back(&self) -> bool {
        self.cache.is_memory() && self.engine.write_policy == WritePolicyKind::WriteBack
    }
}

fn check_volume_names(volumes: &[VolumeSpec]) -> Result<(), CacheError> {
    if volumes.is_empty() {
        return Err(CacheError::NoVolumes);
    }
    for (i, v) in volumes.iter().enumerate() {
        if volumes[..i].iter().any(|w| w.name == v.name) {
            return Err(CacheError::DuplicateVolume(v.name.clone()));
        }
    }
    Ok(())
}

/// The cache device as opened.
#[derive(Clone, Debug)]
pub struct CacheDeviceInfo {
    pub name: String,
    pub size_bytes: u64,
    /// Reads and writes are memory copies into a mapping of a tmpfs file.
    pub mapped: bool,
    /// A file on tmpfs or ramfs: it survives a crash of the process, not a
    /// reboot or a power loss.
    pub on_volatile_memory: bool,
    /// What `--cache-sync auto` measured and chose (`DurabilityChoice::describe`).
    pub durability: Option<String>,
}

/// What `Cache::close` did.
#[derive(Clone, Debug)]
pub struct CloseReport {
    /// Driver and engine counters at the moment of closing.
    pub stats: DriverStats,
    pub engine: Stats,
    /// Everything measured, at the moment of closing (the same snapshot
    /// the control socket and the metrics endpoint serve).
    pub snapshot: Snapshot,
    /// Dirty pages left: they stay in a persistent cache (destaged after
    /// the next start); a memory cache loses them.
    pub dirty_pages: u64,
    /// A clean shutdown was recorded on the cache device (persistent caches).
    pub recorded_clean: bool,
    /// Driver threads still blocked in a device call at the deadline of
    /// `close_within` (a backing that stopped answering), left running.
    pub threads_left: bool,
}

/// A running cache: one engine and driver, one cache device, its volumes.
pub struct Cache {
    driver: Arc<Driver>,
    volumes: Vec<Volume>,
    device: CacheDeviceInfo,
    report: Option<OpenReport>,
    engine: EngineConfig,
    engine_source: EngineSource,
    /// Write-back may be chosen online (not on a cache in process memory,
    /// unless the volatile benchmark allowance was given).
    write_back_allowed: bool,
    operator: Operator,
    /// What each backing's journal held at open (journaled write-back).
    journals: Vec<JournalOpen>,
    /// The cache device, backing files and journal files, exclusively
    /// ours until the cache is dropped (after `close` recorded its state).
    _locks: Vec<DeviceLock>,
    /// The cache device's mirror on a peer host, where replicated.
    mirror: Option<Arc<Mirror>>,
    /// Write-through while the peer is away (`--on-peer-lost write-through`).
    keeper: Option<PolicyKeeper>,
}

impl Cache {
    /// What each backing's journal held when the cache opened (journaled
    /// write-back; empty otherwise), by volume.
    pub fn backing_journals(&self) -> &[JournalOpen] {
        &self.journals
    }
}

impl Cache {
    /// Starts a cache for service: checks the settings, opens the backings
    /// (creating missing files when asked), opens the cache device, and for
    /// a persistent one formats it or recovers it (refusing another
    /// configuration's dirty pages unless `force`) and records that it is
    /// in service (not clean until `close`).
    pub fn open(config: &CacheConfig) -> Result<Cache, CacheError> {
        Cache::open_with(config, Vec::new())
    }

    /// `open`, where volume `i`'s backing is `provided[i]` when that is
    /// `Some`: a device the front end opened itself (`wcache mount`'s files
    /// of a directory), which `config.volumes[i].backing` then only names
    /// (for the banner and the superblock's record of the volume). Such a
    /// backing is neither created, nor locked here: its front end does both.
    pub fn open_with(
        config: &CacheConfig,
        provided: Vec<Option<Arc<dyn BlockDevice>>>,
    ) -> Result<Cache, CacheError> {
        config.check()?;
        let persistent = !config.cache.is_memory();
        if let Some(size_bytes) = config.cache.size_bytes_if_new() {
            // Refused before the file is created.
            check_cache_size(&config.engine, size_bytes, persistent)?;
        }
        let (backings, journals, (cache, device), locks) = open_devices(config, provided)?;
        check_cache_size(&config.engine, device.size_bytes, persistent)?;
        // Mirrored before the first write of the format or the recovery.
        let (mirror, cache) = replicated::mirror(config, cache)?;
        let mut engine = config.engine.clone();
        engine.cache_slots = device.size_bytes / engine.page_size_bytes.max(1);
        let (driver, report) = match config.cache {
            CacheDeviceSpec::Memory { .. } => {
                let driver = Driver::new(
                    engine.clone(),
                    cache,
                    backings.clone(),
                    config.driver.clone(),
                )?;
                (driver, None)
            }
            CacheDeviceSpec::File { .. } => {
                check_alignment(engine.page_size_bytes, cache.as_ref(), &backings)?;
                let entries = volume_entries(&config.volumes, &backings)?;
                let record = EngineRecord::from_config(&engine)?;
                let format = match config.format {
                    // Memory copies run side by side into a mapping; the
                    // log's batches go one at a time; a log needs room
                    // (`FormatAsked`).
                    FormatAsked::FoundNewLog
                        if device.mapped || !log_fits(device.size_bytes, &engine) =>
                    {
                        FormatAsked::Found
                    }
                    format => format,
                };
                let (driver, report) = start_persistent(
                    &mut engine,
                    cache,
                    entries,
                    (&record, true),
                    (config.force, format),
                    backings.clone(),
                    config.driver.clone(),
                )?;
                (driver, Some(report))
            }
        };
        let mut cache = Cache::assemble(
            driver,
            &config.volumes,
            &backings,
            config.block_size_bytes,
            device,
            report,
            (engine, EngineSource::Settings),
        );
        cache.write_back_allowed = !config.cache.is_memory() || config.volatile_write_back;
        cache.mirror = mirror;
        cache.operator = cache.make_operator();
        cache.journals = journals;
        cache._locks = locks;
        cache.keeper = replicated::keeper(config, &cache);
        Ok(cache)
    }

    fn assemble(
        driver: Driver,
        specs: &[VolumeSpec],
        backings: &[Arc<dyn BlockDevice>],
        block_size_bytes: u32,
        device: CacheDeviceInfo,
        report: Option<OpenReport>,
        (engine, engine_source): (EngineConfig, EngineSource),
    ) -> Cache {
        let driver = Arc::new(driver);
        let volumes = specs
            .iter()
            .zip(backings)
            .enumerate()
            .map(|(i, (spec, backing))| {
                let len = backing.len_bytes();
                Volume {
                    driver: driver.clone(),
                    id: VolumeId(i as u16),
                    name: spec.name.clone(),
                    backing_name: backing.name(),
                    backing_size_bytes: len,
                    // Front ends address whole blocks: a tail under one
                    // block is kept on the backing, not exposed.
                    size_bytes: len - len % block_size_bytes.max(1) as u64,
                    block_size_bytes,
                    latency: Arc::new(VolumeLatency::default()),
                }
            })
            .collect();
        let mut cache = Cache {
            operator: Operator::new(
                driver.clone(),
                Vec::new(),
                Vec::new(),
                String::new(),
                false,
                None,
            ),
            driver,
            volumes,
            device,
            report,
            engine,
            engine_source,
            write_back_allowed: true,
            journals: Vec::new(),
            _locks: Vec::new(),
            mirror: None,
            keeper: None,
        };
        cache.operator = cache.make_operator();
        cache
    }

    fn make_operator(&self) -> Operator {
        let exports = self
            .volumes
            .iter()
            .map(|v| ExportStatus {
                name: v.name.clone(),
                backing: v.backing_name.clone(),
                size_bytes: v.size_bytes,
                ..ExportStatus::default()
            })
            .collect();
        let latency = self.volumes.iter().map(|v| v.latency.clone()).collect();
        Operator::new(
            self.driver.clone(),
            exports,
            latency,
            self.device.name.clone(),
            self.write_back_allowed,
            self.mirror.clone(),
        )
    }

    /// A handle to operate the running cache (status, statistics, online
    /// drain and policy changes), for a control socket or a metrics endpoint.
    pub fn operator(&self) -> Operator {
        self.operator.clone()
    }

    /// The volumes, in order (`volumes()[i].id() == VolumeId(i)`).
    pub fn volumes(&self) -> &[Volume] {
        &self.volumes
    }

    pub fn device(&self) -> &CacheDeviceInfo {
        &self.device
    }

    /// The data path of `Volume::write_async`, chosen at start.
    pub fn data_path(&self) -> &crate::driver::DataPath {
        self.driver.data_path()
    }

    /// How the cache device was found (persistent caches): formatted,
    /// reformatted (what was discarded), last shutdown clean or not, damaged
    /// records discarded, dirty pages recovered.
    pub fn open_report(&self) -> Option<&OpenReport> {
        self.report.as_ref()
    }

    pub fn page_size_bytes(&self) -> u64 {
        self.driver.page_size_bytes()
    }

    /// The engine configuration the cache runs with (slot count included).
    pub fn engine_config(&self) -> &EngineConfig {
        &self.engine
    }

    /// Where `engine_config` comes from: the settings, the superblock's
    /// record, or (offline, version-1 device) a guess.
    pub fn engine_source(&self) -> EngineSource {
        self.engine_source
    }

    pub fn dirty_pages(&self) -> u64 {
        self.driver.dirty_pages()
    }

    pub fn monitor(&self) -> Monitor {
        Monitor {
            driver: self.driver.clone(),
        }
    }

    /// Destages every dirty page; `progress` gets the dirty pages left about
    /// five times a second. Gives up when no page was destaged for
    /// `stall_timeout` (a failing backing): the pages stay in the cache.
    pub fn drain(
        &self,
        stall_timeout: Duration,
        mut progress: impl FnMut(u64),
    ) -> Result<(), CacheError> {
        drain_driver(&self.driver, stall_timeout, |dirty| {
            progress(dirty);
            true
        })
    }

    /// Stops the driver (callers stop submitting first: requests still in
    /// flight may fail) and, for a persistent cache, records a clean
    /// shutdown; when no page is dirty every record is freed first.
    /// Without `close` (a crash, or a dropped `Cache`) the next start
    /// reports an unclean stop and recovers as after a crash.
    pub fn close(self) -> Result<CloseReport, CacheError> {
        self.close_within(Duration::MAX)
    }

    /// A stop begins: no destage starts from now on unless a write waits
    /// for room (`Engine::stop_destaging`); those in flight finish, and the
    /// dirty pages stay for the next start (or `wcache flush`).
    pub fn stop_destaging(&self) {
        self.driver.change_engine(|e| e.stop_destaging());
    }

    /// No request and no device command in flight (dirty pages may remain).
    pub fn is_idle(&self) -> bool {
        self.driver.is_idle()
    }

    /// The end of a stop's grace period: new requests are refused and every
    /// stalled write is answered with an I/O error (nothing of it was
    /// acknowledged); see `Driver::fail_waiting`. Returns how many.
    pub fn fail_waiting(&self) -> u64 {
        self.driver.fail_waiting()
    }

    /// As `close`, waiting at most `timeout` for the driver's threads
    /// (`Driver::shutdown_within`): a thread blocked in a call to a backing
    /// that does not answer is left behind (`CloseReport::threads_left`), and
    /// the clean shutdown is recorded all the same — its pages are still
    /// dirty in the cache, and nothing it holds was acknowledged. The caller
    /// then exits the process rather than use the devices again.
    pub fn close_within(mut self, timeout: Duration) -> Result<CloseReport, CacheError> {
        if let Some(mut keeper) = self.keeper.take() {
            keeper.stop();
        }
        let snapshot = self.operator.snapshot();
        let stats = self.driver.stats();
        let engine = self.driver.engine_stats();
        let joined = self.driver.shutdown_within(timeout);
        if joined {
            // A thread left behind may still be in a call to a backing.
            self.driver.backing_devices().for_each(|b| b.release());
        }
        let dirty_pages = self.driver.dirty_pages();
        let recorded_clean = match self.driver.store() {
            None => false,
            Some(store) => {
                if self.driver.is_clean() {
                    // Everything acknowledged is on the backings: no record
                    // (format 3: no batch of the log) is needed.
                    store.free_all_records()?;
                    self.driver.empty_log().map_err(CacheError::from)?;
                }
                store.set_clean(true, false)?;
                true
            }
        };
        if let Some(mirror) = &self.mirror {
            // After the clean record: the peer's copy records it too.
            mirror.close();
        }
        Ok(CloseReport {
            stats,
            engine,
            snapshot,
            dirty_pages,
            recorded_clean,
            threads_left: !joined,
        })
    }
}

/// Destages every dirty page of `driver`; `progress` gets the dirty pages
/// left about five times a second and returns false to stop the drain
/// (`CacheError::DrainStopped`). Gives up when no page was destaged for
/// `stall_timeout` (a failing backing): the pages stay in the cache.
pub(crate) fn drain_driver(
    driver: &Driver,
    stall_timeout: Duration,
    mut progress: impl FnMut(u64) -> bool,
) -> Result<(), CacheError> {
    let mut last_dirty = driver.dirty_pages();
    let mut last_progress = Instant::now();
    loop {
        match driver.drain_timeout(Duration::from_millis(200)) {
            Ok(()) => return Ok(()),
            Err(DrainError::Timeout { dirty_pages, .. }) => {
                if !progress(dirty_pages) {
                    return Err(CacheError::DrainStopped { dirty_pages });
                }
                if dirty_pages < last_dirty {
                    last_dirty = dirty_pages;
                    last_progress = Instant::now();
                } else if last_progress.elapsed() >= stall_timeout {
                    return Err(CacheError::DrainStalled {
                        stall_s: stall_timeout.as_secs(),
                        dirty_pages,
                        last_error: driver.stats().last_error.unwrap_or_else(|| "none".into()),
                    });
                }
            }
            Err(e @ DrainError::ShutDown) => return Err(e.into()),
        }
    }
}

/// A cache device of `size_bytes` holds a log's smallest ring (format 3).
fn log_fits(size_bytes: u64, engine: &EngineConfig) -> bool {
    crate::format::log::layout_for_device(size_bytes, engine.page_size_bytes)
        .is_ok_and(|l| l.slot_count >= wcache_core::config::LOG_SLOTS_MIN)
}

/// Formats or recovers a persistent cache device, records that it is in
/// service (with `record` as the configuration in force when `for_service`;
/// a format records it in any case), and starts the driver over it.
/// `engine` gets the slot count of the device.
fn start_persistent(
    engine: &mut EngineConfig,
    cache: Arc<dyn BlockDevice>,
    entries: Vec<VolumeEntry>,
    (record, for_service): (&EngineRecord, bool),
    (force, format): (bool, FormatAsked),
    backings: Vec<Arc<dyn BlockDevice>>,
    driver: DriverConfig,
) -> Result<(Driver, OpenReport), CacheError> {
    let asked = Asked {
        page_size_bytes: engine.page_size_bytes,
        engine: record,
        // Format 3 when asked for (`EngineConfig::log`); else as found.
        log: if engine.log {
            Some(true)
        } else {
            (format == FormatAsked::Records).then_some(false)
        },
        new_log: format == FormatAsked::FoundNewLog,
        force,
    };
    let (store, found, report) = CacheStore::open_or_format_as(cache, asked, entries)?;
    store.record_open(Some(record).filter(|_| for_service))?;
    engine.cache_slots = store.layout().slot_count;
    engine.log = store.layout().log;
    let store = Arc::new(store);
    let driver = match &report.log {
        Some(log) => Driver::recover_log(engine.clone(), store, found, log, backings, driver)?,
        None => Driver::recover(engine.clone(), store, found, backings, driver)?,
    };
    Ok((driver, report))
}
