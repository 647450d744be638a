//! The backing side of the cache lifecycle: a backing opened from its spec
//! (file, block device, NBD export, Ceph RBD image, emulated model,
//! memory), locked when it is local (an RBD image by its exclusive lock), and under journaled write-back wrapped with its journal
//! where the operator placed it. It exists so that the rules for what may
//! be written to a backing (nothing beyond the client's writes without
//! consent) live in one place; it must never touch the cache device.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use wcache_core::config::CheckpointMode;
use wcache_core::{EngineConfig, WritePolicyKind};

use crate::cache::{CacheError, VolumeSpec};
use crate::device::emulated::EmulatedDevice;
use crate::device::file::{FileDevice, FileOptions, SyncMode};
use crate::device::journaled::{
    region_bytes, JournalOpen, JournalPlace, JournaledDevice, BACKING_END,
};
use crate::device::mem::MemDevice;
use crate::device::nbd::{NbdDevice, NbdOptions};
use crate::device::rbd::{RbdDevice, RbdSpec};
use crate::device::{parse_size_bytes, BlockDevice};
use crate::lock::{DeviceLock, LockMode};

/// Connections an NBD backing opens (when its server allows several).
const NBD_BACKING_CONNECTIONS_MAX: usize = 4;

/// The backing devices, volume `i` at index `i`.
pub(crate) type Backings = Vec<Arc<dyn BlockDevice>>;

/// Journaled write-back through a backing journal: each backing's is
/// where its volume's spec says (`VolumeSpec::journal`; none given is
/// refused: the operator chooses), replayed here if it holds a committed
/// transaction; a journal file of its own is created if missing and
/// locked (into `locks`). Other policies get the backings as they are.
pub fn open_journals(
    backings: Vec<Arc<dyn BlockDevice>>,
    volumes: &[VolumeSpec],
    engine: &EngineConfig,
    (sync, timeout): (SyncMode, Option<Duration>),
    locks: &mut Vec<DeviceLock>,
) -> Result<(Backings, Vec<JournalOpen>), CacheError> {
    let pages = match engine.journal.checkpoint {
        CheckpointMode::BackingJournal { pages }
            if engine.write_policy == WritePolicyKind::JournaledWriteBack =>
        {
            pages
        }
        _ => return Ok((backings, Vec::new())),
    };
    let bytes = region_bytes(pages, engine.page_size_bytes);
    // Every place is checked before any journal is opened (and written).
    for v in volumes {
        if v.journal.is_none() {
            return Err(CacheError::JournalPlaceNeeded {
                export: v.name.clone(),
                bytes,
            });
        }
    }
    let mut places = Vec::with_capacity(volumes.len());
    for v in volumes {
        places.push(match v.journal.as_deref() {
            Some(BACKING_END) | None => JournalPlace::BackingEnd,
            Some(spec) => {
                let dev = open_backing(spec, sync, Some(bytes), timeout)?;
                if let Some(path) = local_path(spec) {
                    locks.push(DeviceLock::acquire(&path, LockMode::Exclusive, "journal")?);
                }
                JournalPlace::Own(dev)
            }
        });
    }
    let mut wrapped: Vec<Arc<dyn BlockDevice>> = Vec::with_capacity(backings.len());
    let mut found = Vec::with_capacity(backings.len());
    for (b, place) in backings.into_iter().zip(places) {
        let (dev, open) = JournaledDevice::open(b, place, pages, engine.page_size_bytes)?;
        wrapped.push(Arc::new(dev));
        found.push(open);
    }
    Ok((wrapped, found))
}

/// The local file or device under a backing spec (through an emulated
/// model), or None for one that is not local (NBD, RBD, memory).
pub fn local_path(spec: &str) -> Option<PathBuf> {
    if is_remote(spec) || spec.starts_with("mem:") {
        return None;
    }
    match spec.strip_prefix("emulated-") {
        Some(rest) => local_path(rest.split_once(':')?.1),
        None => Some(PathBuf::from(spec)),
    }
}

/// A backing reached over the network: an NBD export or an RBD image.
fn is_remote(spec: &str) -> bool {
    spec.starts_with("nbd://") || spec.starts_with("nbd+unix://") || spec.starts_with("rbd:")
}

/// Exclusive locks on every volume's local backing file or device.
pub(crate) fn lock_backings(volumes: &[VolumeSpec]) -> Result<Vec<DeviceLock>, CacheError> {
    let mut locks = Vec::with_capacity(volumes.len());
    for path in volumes.iter().filter_map(|v| local_path(&v.backing)) {
        locks.push(DeviceLock::acquire(&path, LockMode::Exclusive, "backing")?);
    }
    Ok(locks)
}

/// Opens every volume's backing, in order; with `block_size_bytes`, a
/// backing under one block is refused.
pub(crate) fn open_backings(
    volumes: &[VolumeSpec],
    (sync, timeout): (SyncMode, Option<Duration>),
    create_size_bytes: Option<u64>,
    block_size_bytes: Option<u32>,
) -> Result<Vec<Arc<dyn BlockDevice>>, CacheError> {
    let mut backings = Vec::with_capacity(volumes.len());
    for v in volumes {
        let backing = open_backing(&v.backing, sync, create_size_bytes, timeout)?;
        if let Some(block) = block_size_bytes {
            if backing.len_bytes() < block as u64 {
                return Err(CacheError::BackingTooSmall {
                    export: v.name.clone(),
                    backing: backing.name(),
                    bytes: backing.len_bytes(),
                    block,
                });
            }
        }
        backings.push(backing);
    }
    Ok(backings)
}

/// Opens a backing from its spec (see `VolumeSpec::backing`); a missing
/// file is created sparse when `create_size_bytes` is given.
pub fn open_backing(
    spec: &str,
    sync: SyncMode,
    create_size_bytes: Option<u64>,
    nbd_timeout: Option<Duration>,
) -> Result<Arc<dyn BlockDevice>, CacheError> {
    if spec.starts_with("rbd:") {
        return Ok(Arc::new(RbdDevice::open(spec, nbd_timeout)?));
    }
    if spec.starts_with("nbd://") || spec.starts_with("nbd+unix://") {
        let defaults = NbdOptions::default();
        let options = NbdOptions {
            connections_max: NBD_BACKING_CONNECTIONS_MAX,
            unavailable_timeout: nbd_timeout.unwrap_or(defaults.unavailable_timeout),
            ..defaults
        };
        return Ok(Arc::new(NbdDevice::connect_with(spec, options)?));
    }
    if let Some(size) = spec.strip_prefix("mem:") {
        let size_bytes = parse_size_bytes(size).ok_or_else(|| CacheError::BadBackingSize {
            spec: spec.to_string(),
            text: size.to_string(),
        })?;
        return Ok(Arc::new(MemDevice::new(size_bytes)));
    }
    if let Some(rest) = spec.strip_prefix("emulated-") {
        let (model, inner) = rest.split_once(':').ok_or_else(|| CacheError::BadModel {
            spec: spec.to_string(),
            model: rest.to_string(),
        })?;
        if !wcache_models::DEVICE_NAMES.contains(&model) {
            return Err(CacheError::BadModel {
                spec: spec.to_string(),
                model: model.to_string(),
            });
        }
        let store = open_backing(inner, sync, create_size_bytes, nbd_timeout)?;
        return Ok(Arc::new(EmulatedDevice::with_model_name(model, store)?));
    }
    let options = FileOptions {
        sync,
        direct: false,
        create_size_bytes: create_size_bytes.filter(|_| !Path::new(spec).exists()),
        map: false,
        // A large read of the backing is a read miss: from the device, no
        // page-cache copy (destages still write through the page cache).
        direct_large_reads: true,
    };
    Ok(Arc::new(FileDevice::open(Path::new(spec), options)?))
}

/// What a backing is, for the superblock: the same name must mean the same
/// backing at the next start (paths are made absolute).
pub fn backing_identity(spec: &str) -> String {
    if let Ok(rbd) = RbdSpec::parse(spec) {
        // Without its options: the same image under another ceph.conf path.
        return rbd.identity();
    }
    if is_remote(spec) || spec.starts_with("mem:") {
        return spec.to_string();
    }
    if let Some(rest) = spec.strip_prefix("emulated-") {
        if let Some((model, inner)) = rest.split_once(':') {
            return format!("emulated-{model}:{}", backing_identity(inner));
        }
    }
    std::fs::canonicalize(spec)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| spec.to_string())
}
