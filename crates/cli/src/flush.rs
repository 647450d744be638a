//! `wcache flush --cache FILE --export NAME=BACKING ...`: offline drain. Opens
//! a cache device that no server is using, recovers it exactly as `serve`
//! would, destages every dirty page to its backing with a progress bar and
//! ETA, then frees every record and records a clean state. The exports must
//! be the ones the superblock names (same order, sizes and backings): a
//! drain to the wrong backing would corrupt it, so this must never guess.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use wcache_core::{EngineConfig, WritePolicyKind};
use wcache_io::device::file::SyncMode;
use wcache_io::format::VolumeEntry;
use wcache_io::{CacheStore, Driver, DriverConfig};

use crate::serve::{backing_identity, open_backing};
use crate::tools::{open_cache, AnyError};

/// Destage every dirty page of a cache device to its backings (offline), then mark it clean.
#[derive(Args, Debug)]
pub struct FlushArgs {
    /// The cache file or block device (no server may be using it).
    #[arg(long)]
    cache: PathBuf,
    /// An export NAME=BACKING, as given to `wcache serve`, for every volume of the cache.
    #[arg(long = "export", value_name = "NAME=BACKING", required = true)]
    exports: Vec<String>,
    /// How backing file writes become durable: fdatasync, dsync, nvram.
    #[arg(long, default_value = "fdatasync")]
    backing_sync: String,
    /// Give up when the drain makes no progress for this many seconds
    /// (a failing backing); the dirty pages stay in the cache.
    #[arg(long, default_value_t = 60)]
    stall_timeout_s: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum FlushError {
    #[error("--export {0:?}: expected NAME=BACKING")]
    BadExport(String),
    #[error("--backing-sync: unknown sync mode {0:?}; valid: fdatasync, dsync, nvram")]
    BadSyncMode(String),
    #[error("the exports given do not match the cache's volume table: the cache has [{cache}], given [{given}]")]
    Mismatch { cache: String, given: String },
    #[error("no progress for {stall_s} s ({dirty_pages} dirty pages left; last error: {last_error}); the pages stay in the cache")]
    Stalled {
        stall_s: u64,
        dirty_pages: u64,
        last_error: String,
    },
}

fn show(volumes: &[VolumeEntry]) -> String {
    volumes
        .iter()
        .map(|v| format!("{}={} ({} bytes)", v.name, v.identity, v.size_bytes))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn flush(args: FlushArgs) -> Result<(), AnyError> {
    let sync = SyncMode::from_name(&args.backing_sync)
        .ok_or_else(|| FlushError::BadSyncMode(args.backing_sync.clone()))?;
    let dev = open_cache(&args.cache, SyncMode::Fdatasync)?;
    let sb = CacheStore::read_superblock(dev.as_ref())?;
    let mut backings = Vec::new();
    let mut given = Vec::new();
    for e in &args.exports {
        let (name, spec) = e
            .split_once('=')
            .ok_or_else(|| FlushError::BadExport(e.clone()))?;
        let backing = open_backing(spec, sync, None)?;
        given.push(VolumeEntry::new(
            name,
            backing.len_bytes(),
            &backing_identity(spec),
        )?);
        backings.push(backing);
    }
    if given != sb.volumes {
        return Err(FlushError::Mismatch {
            cache: show(&sb.volumes),
            given: show(&given),
        }
        .into());
    }
    let page = sb.layout.page_size_bytes;
    let (store, found, report) = CacheStore::open_or_format(dev, page, given, false)?;
    for bad in &report.discarded {
        eprintln!("wcache flush: discarded a damaged record: {bad}");
    }
    store.set_clean(false, true)?;
    let config = EngineConfig {
        page_size_bytes: page,
        group_size_bytes: page.max(64 * 1024),
        cache_slots: store.layout().slot_count,
        write_policy: WritePolicyKind::WriteBack,
        ..EngineConfig::default()
    };
    let driver = Driver::recover(
        config,
        Arc::new(store),
        found,
        backings,
        DriverConfig { io_threads: 4 },
    )?;
    let total = driver.dirty_pages();
    println!(
        "wcache flush: {} dirty pages ({} MiB) to destage",
        total,
        (total * page) >> 20
    );
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40} {pos}/{len} pages  {per_sec}  elapsed {elapsed_precise}  ETA {eta_precise}",
        )?
        .progress_chars("=> "),
    );
    let stall = Duration::from_secs(args.stall_timeout_s.max(1));
    let mut last_dirty = total;
    let mut last_progress = std::time::Instant::now();
    loop {
        match driver.drain_timeout(Duration::from_millis(200)) {
            Ok(()) => break,
            Err(wcache_io::DriverError::DrainTimeout { dirty_pages, .. }) => {
                bar.set_position(total.saturating_sub(dirty_pages));
                if dirty_pages < last_dirty {
                    last_dirty = dirty_pages;
                    last_progress = std::time::Instant::now();
                } else if last_progress.elapsed() >= stall {
                    bar.abandon();
                    let stats = driver.stats();
                    driver.shutdown();
                    if let Some(store) = driver.store() {
                        store.set_clean(true, false)?;
                    }
                    return Err(FlushError::Stalled {
                        stall_s: stall.as_secs(),
                        dirty_pages,
                        last_error: stats.last_error.unwrap_or_else(|| "none".into()),
                    }
                    .into());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    bar.set_position(total);
    bar.finish();
    driver.shutdown();
    let store = driver.store().expect("a recovered driver has a store");
    if driver.is_clean() {
        store.free_all_records()?;
    }
    store.set_clean(true, false)?;
    let stats = driver.stats();
    println!(
        "wcache flush: done: {total} pages destaged, {} backing errors retried; the cache is clean and empty",
        stats.backing_errors
    );
    Ok(())
}
