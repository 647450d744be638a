//! `CacheError`: why the cache lifecycle (`Cache::open`, `open_offline`,
//! `drain`, `close`) failed, each variant naming what is wrong. It exists
//! so that the lifecycle's file holds the lifecycle; it must never carry a
//! request's failure (a `Volume` call returns the driver's `RequestError`).

use wcache_core::ConfigError;

use crate::device::journaled::{JournalError, BACKING_END};
use crate::device::DeviceError;
use crate::driver::{DrainError, StartError};
use crate::format::FormatError;
use crate::lock::LockError;
use crate::store::{OpenError, StoreError};

/// Why a cache could not be started, drained or closed. Each variant names
/// what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error(transparent)]
    Settings(#[from] ConfigError),
    #[error(transparent)]
    Replication(#[from] crate::replica::MirrorError),
    #[error(
        "write-back is refused with --cache mem: it acknowledges writes that only the cache \
         holds, and process memory loses them on any exit or crash. Use a cache file or device \
         (persistent, recovered after a crash), --write-policy write-through, or for benchmarks \
         only --volatile-write-back-for-benchmarks."
    )]
    WriteBackNeedsRecovery,
    #[error(
        "--volatile-write-back-for-benchmarks needs the cache in process memory (--cache mem), so \
         nobody mistakes it for a durable cache; {cache} is a file (persistent: write-back \
         needs no flag there)"
    )]
    WriteBackCacheNotVolatile { cache: String },
    #[error("block size {0} is not a power of two")]
    BadBlockSize(u32),
    #[error("no volume to serve")]
    NoVolumes,
    #[error("{0}")]
    Journal(#[from] JournalError),
    #[error("the cache device runs write-back-journaled: give its --journal-size (as served) so that the drain goes through each backing's journal")]
    JournalSizeNeeded,
    #[error(
        "export {export:?}: write-back-journaled keeps a journal of {bytes} bytes per backing, \
         and where is the operator's choice: give it a file or device of its own with \
         --journal {export}=PATH (keep it on the backing's storage, so that it survives what \
         the backing survives; a missing file is created), or name the backing's last \
         {bytes} bytes with --journal {export}={BACKING_END} (they must hold no data; the \
         export then ends before them). Nothing was written."
    )]
    JournalPlaceNeeded { export: String, bytes: u64 },
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("export name {0:?} given twice")]
    DuplicateVolume(String),
    #[error("backing {spec:?}: unknown emulated model {model:?} (valid: {})", wcache_models::DEVICE_NAMES.join(", "))]
    BadModel { spec: String, model: String },
    #[error("backing {spec:?}: cannot parse size {text:?} (examples: 4096, 64K, 1G)")]
    BadBackingSize { spec: String, text: String },
    #[error("backing {backing} of export {export:?} is {bytes} bytes: smaller than one block of {block} bytes (--block-size)")]
    BackingTooSmall {
        export: String,
        backing: String,
        bytes: u64,
        block: u32,
    },
    #[error(
        "cache of {cache_bytes} bytes holds fewer than one write group of {group_bytes} bytes"
    )]
    CacheTooSmall { cache_bytes: u64, group_bytes: u64 },
    #[error("cache device {0} does not exist")]
    Missing(String),
    #[error(
        "cache device {path} is {size_bytes} bytes, and --cache-size asks for {asked_bytes}: \
         a cache is not resized. Leave --cache-size out (or give {size_bytes}) to use it as it \
         is; to change its size, stop with `wcache stop --flush` (or drain with `wcache \
         flush`), remove the file and start with the new size. Nothing was written."
    )]
    SizeMismatch {
        path: String,
        size_bytes: u64,
        asked_bytes: u64,
    },
    #[error("cache device {0} is blank (all zeros): it was never formatted, nothing to do")]
    Blank(String),
    #[error("the exports given do not match the cache's volume table: the cache has [{cache}], given [{given}]")]
    Mismatch { cache: String, given: String },
    #[error("no progress for {stall_s} s ({dirty_pages} dirty pages left; last error: {last_error}); the pages stay in the cache")]
    DrainStalled {
        stall_s: u64,
        dirty_pages: u64,
        last_error: String,
    },
    #[error("drain stopped with {dirty_pages} dirty pages left (they stay in the cache)")]
    DrainStopped { dirty_pages: u64 },
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Drain(#[from] DrainError),
}
