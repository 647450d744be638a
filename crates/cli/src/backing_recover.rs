//! `wcache backing-recover`: replay the journal a write-back-journaled
//! cache left for a backing (in a file of its own or at the backing's
//! end), for when that cache is gone, so the backing alone holds its last
//! checkpointed transaction. It locks the backing and the journal file as
//! a server would, and formats nothing: a place holding no journal is
//! reported and left as it is.

use std::sync::Arc;

use clap::Args;
use wcache_core::geometry::Geometry;
use wcache_io::backings::local_path;
use wcache_io::device::journaled::{JournalOpen, JournalPlace, JournaledDevice, BACKING_END};
use wcache_io::device::BlockDevice;
use wcache_io::lock::{DeviceLock, LockMode};
use wcache_io::open_backing;

use crate::args::{pages_arg, sync_arg};
use crate::tools::AnyError;

/// Replay a backing's journal (write-back-journaled).
#[derive(Args, Debug)]
pub struct BackingRecoverArgs {
    /// The backing: a file, block device, NBD URI or `emulated-MODEL:SPEC`.
    backing: String,
    /// The --journal-size it was served with.
    #[arg(long)]
    journal_size: String,
    /// Where its journal is, as served (--journal EXPORT=...): PATH (a file
    /// or device of its own) or backing-end.
    #[arg(long, value_name = "PATH|backing-end")]
    journal: String,
    /// The --page-size it was served with.
    #[arg(long, default_value_t = 4096)]
    page_size: u64,
    /// How backing file writes become durable: fdatasync, dsync, nvram.
    #[arg(long, default_value = "fdatasync")]
    backing_sync: String,
}

pub fn backing_recover(args: BackingRecoverArgs) -> Result<(), AnyError> {
    let page = args.page_size;
    // The engine's page sizes.
    Geometry::new(page, page).map_err(|e| format!("--page-size: {e}"))?;
    let pages = pages_arg("journal-size", &args.journal_size, page, "")?;
    let sync = sync_arg("backing-sync", &args.backing_sync)?;
    let mut locks = Vec::new();
    for (spec, what) in [(&args.backing, "backing"), (&args.journal, "journal")] {
        if let Some(path) = local_path(spec).filter(|_| spec != BACKING_END) {
            if !path.exists() {
                return Err(format!("{what} {} does not exist", path.display()).into());
            }
            locks.push(DeviceLock::acquire(&path, LockMode::Exclusive, what)?);
        }
    }
    let backing: Arc<dyn BlockDevice> = open_backing(&args.backing, sync, None, None)?;
    let place = if args.journal == BACKING_END {
        JournalPlace::BackingEnd
    } else {
        JournalPlace::Own(open_backing(&args.journal, sync, None, None)?)
    };
    if !JournaledDevice::holds_journal(&backing, &place, pages, page)? {
        return Err(format!(
            "{} holds no wcache journal (its header block is blank or another's): \
             nothing to replay, nothing written",
            match &place {
                JournalPlace::Own(dev) => dev.name(),
                JournalPlace::BackingEnd => format!("the end of {}", backing.name()),
            }
        )
        .into());
    }
    let (dev, found) = JournaledDevice::open(backing, place, pages, page)?;
    let what = match found {
        JournalOpen::Formatted => "held no journal; an empty one was formatted".to_string(),
        JournalOpen::Empty => "journal empty: the backing is consistent as it is".to_string(),
        JournalOpen::Replayed { txn, pages } => {
            format!("replayed transaction {txn} ({pages} pages) in place and retired it")
        }
    };
    println!(
        "wcache backing-recover: {}: {what}; data {} bytes",
        dev.name(),
        dev.len_bytes()
    );
    Ok(())
}
