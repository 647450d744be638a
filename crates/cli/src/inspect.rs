//! `wcache inspect --cache FILE`: what a cache device holds — superblock,
//! state, and per volume the dirty and clean pages recovery would find
//! (format 2: its records; format 3: its log, read back as recovery does).
//! Read-only: it must never write to the device.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::tools::{describe, lock_for_reading, open_cache, AnyError};
use wcache_io::store::Scan;

/// Show a cache device's superblock, state, and pages per volume.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The cache file or block device.
    #[arg(long)]
    cache: PathBuf,
}

pub fn inspect(args: InspectArgs) -> Result<(), AnyError> {
    inspect_path(&args.cache)
}

/// Prints what the cache device at `path` holds (also `wcache status` with no server).
pub fn inspect_path(path: &Path) -> Result<(), AnyError> {
    // Shared: other readers may look too, no server or flush may write meanwhile.
    let _lock = lock_for_reading(path)?;
    let (store, sb) = open_cache(path)?;
    let (scan, log) = if sb.layout.log {
        // Format 3: the log as recovery reads it (read only).
        let (found, log) = store.read_log()?;
        let free_slots = sb.layout.slot_count - log.position.log_slots as u64;
        let scan = Scan {
            found,
            bad: Vec::new(),
            free_slots,
        };
        (scan, Some(log))
    } else {
        (store.scan(true)?, None)
    };
    let (per_volume, old_versions) = scan.page_counts();
    println!("cache:   {}", path.display());
    print!("{}", describe(&sb));
    if let Some(log) = &log {
        let at = &log.position;
        println!(
            "log:     {} batches from slot {} (batch {}), {} slots, the last of epoch {}; it ends there: {}",
            log.batches, at.tail.0, log.start.tail_seq, at.log_slots, log.last_epoch, log.end
        );
        println!("checkpoint: {}", log.checkpoint);
    }
    println!("volumes:");
    for (i, v) in sb.volumes.iter().enumerate() {
        let (dirty, clean) = per_volume.get(&(i as u16)).copied().unwrap_or((0, 0));
        println!(
            "  {i} {}: {} bytes, backing {}: {dirty} dirty pages, {clean} clean pages",
            v.name, v.size_bytes, v.identity
        );
    }
    for (&vol, &(dirty, clean)) in &per_volume {
        if vol as usize >= sb.volumes.len() {
            println!("  {vol} (not in the volume table!): {dirty} dirty, {clean} clean pages");
        }
    }
    let dirty: u64 = per_volume.values().map(|c| c.0).sum();
    let clean: u64 = per_volume.values().map(|c| c.1).sum();
    println!(
        "slots:   {dirty} dirty, {clean} clean, {old_versions} older versions (freed at the next start), {} free, {} damaged",
        scan.free_slots,
        scan.bad.len()
    );
    println!("note:    a destaged page keeps its dirty record until it is rewritten or freed, so \"dirty\" counts pages the next start would destage (again)");
    if !scan.bad.is_empty() {
        println!(
            "damaged: run `wcache check --cache {}` for details",
            path.display()
        );
    }
    Ok(())
}
