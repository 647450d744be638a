//! `wcache backing-recover`: replay the journal a write-back-journaled
//! cache left at the end of a backing, for when that cache is gone, so the
//! backing alone holds its last checkpointed transaction.

use std::sync::Arc;

use clap::Args;
use wcache_io::device::journaled::{JournalOpen, JournaledDevice};
use wcache_io::device::BlockDevice;
use wcache_io::open_backing;

use crate::args::{size_arg, sync_arg};
use crate::tools::AnyError;

/// Replay a backing's journal (write-back-journaled).
#[derive(Args, Debug)]
pub struct BackingRecoverArgs {
    /// The backing: a file, block device, NBD URI or `emulated-MODEL:SPEC`.
    backing: String,
    /// The --journal-size it was served with.
    #[arg(long)]
    journal_size: String,
    /// The --page-size it was served with.
    #[arg(long, default_value_t = 4096)]
    page_size: u64,
    /// How backing file writes become durable: fdatasync, dsync, nvram.
    #[arg(long, default_value = "fdatasync")]
    backing_sync: String,
}

pub fn backing_recover(args: BackingRecoverArgs) -> Result<(), AnyError> {
    let page = args.page_size.max(1);
    let pages = size_arg("journal-size", &args.journal_size)? / page;
    if pages == 0 {
        return Err(format!("--journal-size {}: at least one page", args.journal_size).into());
    }
    let sync = sync_arg("backing-sync", &args.backing_sync)?;
    let backing: Arc<dyn BlockDevice> = open_backing(&args.backing, sync, None, None)?;
    let (dev, found) = JournaledDevice::open(backing, pages, page, false)?;
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
