//! Opening a cache's devices: the backings, their journals and the cache
//! device, each locked before the first write; the checks of sizes and
//! alignment before anything is formatted; the volume table they make.

use super::*;
use crate::device::file::durability;
use crate::driver::StartError;

/// The opened devices of a cache for service.
pub(super) type Devices = (
    Backings,
    Vec<JournalOpen>,
    (Arc<dyn BlockDevice>, CacheDeviceInfo),
    Vec<DeviceLock>,
);

/// Opens `config`'s backings, their journals and the cache device, each
/// locked before the first write to any of them (a cache file that does
/// not exist yet is locked once created, before its format).
/// `provided`: backings the front end opened (and locked) itself, by volume.
pub(super) fn open_devices(
    config: &CacheConfig,
    provided: Vec<Option<Arc<dyn BlockDevice>>>,
) -> Result<Devices, CacheError> {
    let (own, given) = split_provided(&config.volumes, provided);
    let opened = open_backings(
        &own,
        (config.backing_sync, config.backing_timeout),
        config.backing_create_size_bytes,
        Some(config.block_size_bytes),
    )?;
    let mut locks = lock_backings(&own)?;
    let mut opened = opened.into_iter();
    let backings = given
        .into_iter()
        .map(|g| g.or_else(|| opened.next()))
        .collect::<Option<Vec<_>>>()
        .expect("one opened backing for each volume not provided");
    let cache_path = match &config.cache {
        CacheDeviceSpec::File { path, .. } => Some(path),
        CacheDeviceSpec::Memory { .. } => None,
    };
    let lock_cache =
        |path: &PathBuf| DeviceLock::acquire(path, LockMode::Exclusive, "cache device");
    // An existing cache device: locked and checked before anything is written.
    let mut opened = None;
    if let Some(path) = cache_path.filter(|p| p.exists()) {
        locks.push(lock_cache(path)?);
        let (cache, device) = open_measured(&config.cache)?;
        check_asked_size(&config.cache, device.size_bytes)?;
        opened = Some((cache, device));
    }
    let sync_timeout = (config.backing_sync, config.backing_timeout);
    let (backings, journals) = open_journals(
        backings,
        &config.volumes,
        &config.engine,
        sync_timeout,
        &mut locks,
    )?;
    let cache = match opened {
        Some(opened) => opened,
        None => {
            let created = open_cache_device(&config.cache)?;
            if let Some(path) = cache_path {
                locks.push(lock_cache(path)?);
            }
            match &config.cache {
                CacheDeviceSpec::File {
                    measure_sync: true, ..
                } => {
                    drop(created);
                    open_measured(&config.cache)?
                }
                _ => created,
            }
        }
    };
    Ok((backings, journals, cache, locks))
}

/// The volumes whose backings are opened here, and each volume's provided
/// backing (`None`: opened here).
fn split_provided(
    volumes: &[VolumeSpec],
    mut provided: Vec<Option<Arc<dyn BlockDevice>>>,
) -> (Vec<VolumeSpec>, Vec<Option<Arc<dyn BlockDevice>>>) {
    provided.resize(volumes.len(), None);
    let own = volumes
        .iter()
        .zip(&provided)
        .filter(|(_, p)| p.is_none())
        .map(|(v, _)| v.clone())
        .collect();
    (own, provided)
}

/// An existing cache device must have the size the operator asked for, if asked.
pub(super) fn check_asked_size(spec: &CacheDeviceSpec, size_bytes: u64) -> Result<(), CacheError> {
    match spec {
        CacheDeviceSpec::File {
            path,
            create_size_bytes,
            size_given: true,
            ..
        } if *create_size_bytes != size_bytes => Err(CacheError::SizeMismatch {
            path: path.display().to_string(),
            size_bytes,
            asked_bytes: *create_size_bytes,
        }),
        _ => Ok(()),
    }
}

/// What the driver would refuse once the device is formatted, checked
/// before anything is written to it: a cache smaller than one write group,
/// and (persistent) the engine's configuration with the slot count the
/// format gives a device of `size_bytes`.
pub(super) fn check_cache_size(
    engine: &EngineConfig,
    size_bytes: u64,
    persistent: bool,
) -> Result<(), CacheError> {
    if size_bytes < engine.group_size_bytes {
        return Err(CacheError::CacheTooSmall {
            cache_bytes: size_bytes,
            group_bytes: engine.group_size_bytes,
        });
    }
    if persistent {
        if let Ok(layout) = Layout::for_device(size_bytes, engine.page_size_bytes) {
            let mut config = engine.clone();
            config.cache_slots = layout.slot_count;
            config.persistent = true;
            config.validate()?;
        }
    }
    Ok(())
}

/// The page size against each device's alignment (O_DIRECT), checked
/// before the cache device is formatted or written.
pub(super) fn check_alignment(
    page_size_bytes: u64,
    cache: &dyn BlockDevice,
    backings: &[Arc<dyn BlockDevice>],
) -> Result<(), CacheError> {
    let devices = std::iter::once(cache).chain(backings.iter().map(|b| b.as_ref()));
    for dev in devices {
        let alignment_bytes = dev.alignment_bytes();
        if alignment_bytes > 1 && !page_size_bytes.is_multiple_of(alignment_bytes as u64) {
            return Err(StartError::PageNotAligned {
                device: dev.name(),
                alignment_bytes,
                page_size_bytes,
            }
            .into());
        }
    }
    Ok(())
}

/// `open_cache_device`, with `--cache-sync auto` resolved first: the
/// device (locked by the caller) is measured both ways and opened the
/// faster; a measurement that fails leaves fdatasync, and says why.
fn open_measured(
    spec: &CacheDeviceSpec,
) -> Result<(Arc<dyn BlockDevice>, CacheDeviceInfo), CacheError> {
    let CacheDeviceSpec::File {
        path,
        measure_sync: true,
        ..
    } = spec
    else {
        return open_cache_device(spec);
    };
    let (chosen, said) = match durability::measure(path) {
        Ok(c) => ((c.sync, c.direct), c.describe()),
        Err(e) => (
            (SyncMode::Fdatasync, false),
            format!("fdatasync (the measurement failed: {e})"),
        ),
    };
    let mut spec = spec.clone();
    if let CacheDeviceSpec::File { sync, direct, .. } = &mut spec {
        // An O_DIRECT the operator asked for (`--direct`) stays.
        (*sync, *direct) = (chosen.0, *direct || chosen.1);
    }
    let (dev, mut info) = open_cache_device(&spec)?;
    info.durability = Some(said);
    Ok((dev, info))
}

pub(super) fn open_cache_device(
    spec: &CacheDeviceSpec,
) -> Result<(Arc<dyn BlockDevice>, CacheDeviceInfo), CacheError> {
    match spec {
        CacheDeviceSpec::Memory { size_bytes } => {
            let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(*size_bytes));
            let info = CacheDeviceInfo {
                name: dev.name(),
                size_bytes: dev.len_bytes(),
                mapped: false,
                on_volatile_memory: false,
                durability: None,
            };
            Ok((dev, info))
        }
        CacheDeviceSpec::File {
            path,
            create_size_bytes,
            sync,
            direct,
            ..
        } => {
            let options = FileOptions {
                sync: *sync,
                direct: *direct,
                create_size_bytes: Some(*create_size_bytes).filter(|_| !path.exists()),
                map: true,
                direct_large_reads: false,
            };
            let device = FileDevice::open(path, options)?;
            let info = CacheDeviceInfo {
                name: device.name(),
                size_bytes: device.len_bytes(),
                mapped: device.is_mapped(),
                on_volatile_memory: is_on_volatile_memory(path),
                durability: None,
            };
            Ok((Arc::new(device), info))
        }
    }
}

/// Opens an existing, formatted-looking cache device by path (never
/// created here; a blank one is refused: there is nothing on it).
pub fn open_existing_cache_device(
    path: &Path,
    sync: SyncMode,
) -> Result<Arc<dyn BlockDevice>, CacheError> {
    if !path.exists() {
        return Err(CacheError::Missing(path.display().to_string()));
    }
    let options = FileOptions {
        sync,
        direct: false,
        create_size_bytes: None,
        map: false,
        direct_large_reads: false,
    };
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(path, options)?);
    if CacheStore::is_blank(dev.as_ref())? {
        return Err(CacheError::Blank(path.display().to_string()));
    }
    Ok(dev)
}

pub(super) fn volume_entries(
    volumes: &[VolumeSpec],
    backings: &[Arc<dyn BlockDevice>],
) -> Result<Vec<VolumeEntry>, CacheError> {
    let mut entries = Vec::with_capacity(volumes.len());
    for (v, backing) in volumes.iter().zip(backings) {
        entries.push(VolumeEntry::new(
            &v.name,
            backing.len_bytes(),
            &backing_identity(&v.backing),
        )?);
    }
    Ok(entries)
}
