//! `wcache check --cache FILE`: verify every checksum of a cache device —
//! superblock, every slot record, and every used slot's data (format 3:
//! the log read back from its tail, every batch's header and payload) —
//! and the versions' consistency (volumes and pages in range, no version
//! twice; format 3: recovery from the checkpoint in force finds nothing the
//! whole log does not). Exits non-zero naming what is corrupt. Read-only: it must never
//! repair.
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

use wcache_core::RecoveredSlot;
use wcache_io::format::Superblock;
use wcache_io::store::CacheStore;

use crate::tools::{describe, lock_for_reading, open_cache, AnyError};

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
    let (store, sb) = open_cache(&args.cache)?;
    if sb.layout.log {
        return check_log(&args, &store, &sb);
    }
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
    problems.extend(version_problems(&sb, &scan.found, false));
    report(&args, problems)?;
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

/// Format 3: the whole log read back from the durable tail (every batch's
/// header and payload checked, whatever checkpoint is in force); the batch
/// after it begun but not whole is a write in flight at a crash, or damage
/// after a clean shutdown. The checkpoint in force is read as recovery
/// reads it, and reported.
fn check_log(args: &CheckArgs, store: &CacheStore, sb: &Superblock) -> Result<(), AnyError> {
    let (found, log) = store.read_log_whole()?;
    let (from_checkpoint, cp_log) = store.read_log()?;
    let checkpoint = cp_log.checkpoint;
    // One version per page, unless the log keeps older ones (ordered).
    let one_per_page = !wcache_io::store::keeps_older_versions(sb);
    let mut problems = version_problems(sb, &found, one_per_page);
    problems.extend(checkpoint_problems(&from_checkpoint, &found));
    let at = &log.position;
    let next = (at.tail.0 as u64 + at.log_slots as u64) % sb.layout.slot_count;
    let mut in_flight = 0;
    if log.torn && (sb.clean || args.strict) {
        let after = if sb.clean {
            " after a clean shutdown"
        } else {
            ""
        };
        problems.push(format!(
            "the batch at slot {next} (sequence number {}) is not whole{after}: {}",
            at.next_seq, log.end
        ));
    } else if log.torn {
        in_flight = 1;
        println!(
            "WARN write in flight at the crash (recovery discards it): the batch at slot {next} (sequence number {}): {}",
            at.next_seq, log.end
        );
    }
    report(args, problems)?;
    print!("{}", describe(sb));
    let dirty = found.iter().filter(|f| f.record.dirty).count();
    println!(
        "OK: superblock, a log of {} batches ({} slots from slot {}) verified: {} versions, {dirty} dirty pages, {in_flight} writes in flight at a crash; it ends at slot {next}: {}",
        log.batches,
        at.log_slots,
        at.tail.0,
        found.len(),
        log.end
    );
    println!("checkpoint: {checkpoint}");
    Ok(())
}

/// Versions naming a volume or a page the superblock does not have, or
/// found twice (the same version of a page; with `one_per_page`, any two
/// versions of a page: the log's replay keeps only the newest, but under
/// ordered write-back).
/// Format 3: what recovery finds from the checkpoint in force must be what
/// the whole log holds, less versions the checkpoint knew were on their
/// way out: each version it finds is one the whole log finds for its
/// page, in the same slot, and dirty only if the log's is (a destaged
/// version is saved clean). Anything else is a checkpoint or a log that
/// lies (a damaged batch the checkpoint covers, say).
fn checkpoint_problems(from_checkpoint: &[RecoveredSlot], whole: &[RecoveredSlot]) -> Vec<String> {
    let in_log: HashMap<(u64, u32), bool> = whole
        .iter()
        .map(|f| ((f.record.key.0, f.slot.0), f.record.dirty))
        .collect();
    let mut by_page: HashMap<u64, Vec<(u32, bool)>> = HashMap::new();
    for f in whole {
        by_page
            .entry(f.record.key.0)
            .or_default()
            .push((f.slot.0, f.record.dirty));
    }
    let mut problems = Vec::new();
    for f in from_checkpoint {
        let (volume, page) = (f.record.key.volume().0, f.record.key.page().0);
        let agrees = in_log
            .get(&(f.record.key.0, f.slot.0))
            .is_some_and(|&dirty| dirty || !f.record.dirty);
        if !agrees {
            let log = match by_page.get(&f.record.key.0) {
                Some(versions) => versions
                    .iter()
                    .map(|(slot, dirty)| format!("in slot {slot} (dirty: {dirty})"))
                    .collect::<Vec<_>>()
                    .join(", "),
                None => "nowhere".to_string(),
            };
            problems.push(format!(
                "recovery from the checkpoint finds page {page} of volume {volume} in slot {} (dirty: {}), the whole log {log}",
                f.slot.0, f.record.dirty
            ));
        }
    }
    problems
}

fn version_problems(sb: &Superblock, found: &[RecoveredSlot], one_per_page: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let page_bytes = sb.layout.page_size_bytes;
    let mut versions: HashMap<(u64, u64), u32> = HashMap::new();
    for f in found {
        let (key, slot) = (f.record.key, f.slot.0);
        let volume = key.volume().0 as usize;
        match sb.volumes.get(volume) {
            None => problems.push(format!(
                "slot {slot}: record names volume {volume}, but the superblock has {}",
                sb.volumes.len()
            )),
            Some(v) if key.page().0 * page_bytes >= v.size_bytes => problems.push(format!(
                "slot {slot}: record names page {} of volume {} ({}), beyond its {} bytes",
                key.page().0,
                volume,
                v.name,
                v.size_bytes
            )),
            Some(_) => {}
        }
        let seq = if one_per_page { 0 } else { f.record.seq };
        if let Some(other) = versions.insert((key.0, seq), slot) {
            problems.push(format!(
                "slots {other} and {slot}: both hold version {} of volume {volume} page {}",
                f.record.seq,
                key.page().0
            ));
        }
    }
    problems
}

/// Lists the problems found; an error naming the first, if any.
fn report(args: &CheckArgs, problems: Vec<String>) -> Result<(), AnyError> {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use wcache_core::types::{PageIndex, PageKey, SlotIndex, VolumeId};
    use wcache_core::SlotRecord;

    fn v(page: u64, slot: u32, dirty: bool) -> RecoveredSlot {
        RecoveredSlot {
            slot: SlotIndex(slot),
            record: SlotRecord {
                key: PageKey::new(VolumeId(0), PageIndex(page)),
                seq: 0,
                dirty,
            },
        }
    }

    #[test]
    fn a_checkpoint_may_find_less_or_cleaner_but_never_other_versions() {
        let whole = [v(1, 10, true), v(2, 11, true), v(3, 12, false)];
        // Fewer versions, a destaged one clean: agrees.
        assert!(checkpoint_problems(&[v(1, 10, true), v(2, 11, false)], &whole).is_empty());
        // Another slot, dirty where the log says clean, a page the log lacks.
        let bad = [v(1, 9, true), v(3, 12, true), v(4, 13, true)];
        let problems = checkpoint_problems(&bad, &whole);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems[0].contains("page 1 of volume 0 in slot 9"),
            "{}",
            problems[0]
        );
        assert!(
            problems[2].contains("the whole log nowhere"),
            "{}",
            problems[2]
        );
    }
}
