//! `wcache check --cache FILE`: verify every checksum of a cache device —
//! superblock, every slot record, and every used slot's data — and the
//! records' consistency (volumes and pages in range, no version twice).
//! Exits non-zero naming what is corrupt. Read-only: it must never repair.
//!
//! A record whose data does not match is what a write in flight at a crash
//! leaves (the driver writes the data, then the record; a slot may also be
//! reused for a new version while an old record still names it): recovery
//! discards it. So after an unclean stop it is reported as a warning; after
//! a clean shutdown (nothing was in flight), or with `--strict`, it is corruption.

use std::collections::HashMap;
use std::path::PathBuf;

use clap::Args;
use wcache_io::store::BadSlot;

use crate::tools::{describe, lock_for_reading, open_format_2, AnyError};

/// Verify every checksum of a cache device; non-zero exit if anything is corrupt.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The cache file or block device.
    #[arg(long)]
    cache: PathBuf,
    /// Treat every data checksum mismatch as corruption, even after a crash.
    #[arg(long)]
    strict: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("{path}: {count} problem(s) found (listed above); the first: {first}")]
pub struct Corrupt {
    path: String,
    count: usize,
    first: String,
}

pub fn check(args: CheckArgs) -> Result<(), AnyError> {
    // Shared: other readers may look too, no server or flush may write meanwhile.
    let _lock = lock_for_reading(&args.cache)?;
    // A bad superblock is an error that names the field.
    let (store, sb) = open_format_2(&args.cache)?;
    let layout = store.layout();
    let scan = store.scan(true)?;
    let mut problems: Vec<String> = Vec::new();
    let mut in_flight = 0u64;
    for bad in &scan.bad {
        match bad {
            BadSlot::Record { .. } => problems.push(format!("corrupt record: {bad}")),
            BadSlot::Data { .. } if sb.clean || args.strict => problems.push(format!(
                "data does not match its record{}: {bad}",
                if sb.clean {
                    " after a clean shutdown"
                } else {
                    ""
                }
            )),
            BadSlot::Data { .. } => {
                in_flight += 1;
                println!("WARN write in flight at the crash (recovery discards it): {bad}");
            }
        }
    }
    let mut versions: HashMap<(u64, u64), u32> = HashMap::new();
    for f in &scan.found {
        let (key, slot) = (f.record.key, f.slot.0);
        let volume = key.volume().0 as usize;
        match sb.volumes.get(volume) {
            None => problems.push(format!(
                "slot {slot}: record names volume {volume}, but the superblock has {}",
                sb.volumes.len()
            )),
            Some(v) if key.page().0 * layout.page_size_bytes >= v.size_bytes => {
                problems.push(format!(
                    "slot {slot}: record names page {} of volume {} ({}), beyond its {} bytes",
                    key.page().0,
                    volume,
                    v.name,
                    v.size_bytes
                ))
            }
            Some(_) => {}
        }
        if let Some(other) = versions.insert((key.0, f.record.seq), slot) {
            problems.push(format!(
                "slots {other} and {slot}: both hold version {} of volume {volume} page {}",
                f.record.seq,
                key.page().0
            ));
        }
    }
    for p in &problems {
        println!("CORRUPT {p}");
    }
    if let Some(first) = problems.first() {
        return Err(Corrupt {
            path: args.cache.display().to_string(),
            count: problems.len(),
            first: first.clone(),
        }
        .into());
    }
    print!("{}", describe(&sb));
    println!(
        "OK: superblock, {} records and their data verified ({} used, {} free, {} dirty pages, {in_flight} writes in flight at a crash)",
        layout.slot_count,
        scan.found.len(),
        scan.free_slots,
        scan.dirty_pages()
    );
    Ok(())
}
