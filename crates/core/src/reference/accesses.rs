//! The device accesses of each command, for the simulator's cost model.

use super::{Access, Target};
use crate::command::{IoCommand, PageBase};
use crate::types::SlotIndex;

/// The device accesses a command makes, in order: the first, and the one
/// that starts when the first is done (a page write after reading its base,
/// a destage's backing write after reading its slots). A page write's record
/// goes with its data write (`docs/on-disk-format.md`).
pub fn accesses(cmd: &IoCommand, page_size_bytes: u64) -> (Access, Option<Access>) {
    let p = page_size_bytes;
    let access = |target, write, offset_bytes, len_bytes| Access {
        target,
        write,
        offset_bytes,
        len_bytes,
    };
    match cmd {
        IoCommand::FreeSlots { .. }
        | IoCommand::AdvanceLog { .. }
        | IoCommand::LogCheckpoint { .. } => (record_access(cmd), None),
        IoCommand::WritePages {
            first_slot, count, ..
        } => (
            access(
                Target::Slots,
                true,
                first_slot.0 as u64 * p,
                *count as u64 * p,
            ),
            None,
        ),
        IoCommand::WritePage { slot, base, .. } => {
            let write = access(Target::Slots, true, slot.0 as u64 * p, p);
            match *base {
                PageBase::None => (write, None),
                PageBase::Slot(old) => (
                    access(Target::Slots, false, old.0 as u64 * p, p),
                    Some(write),
                ),
                PageBase::Backing { volume, page } => (
                    access(Target::Backing(volume), false, page.0 * p, p),
                    Some(write),
                ),
            }
        }
        IoCommand::ReadPage {
            slot,
            page_offset_bytes,
            len_bytes,
            ..
        } => (
            access(
                Target::Slots,
                false,
                slot.0 as u64 * p + *page_offset_bytes as u64,
                *len_bytes as u64,
            ),
            None,
        ),
        IoCommand::ReadBacking {
            volume,
            offset_bytes,
            len_bytes,
            ..
        } => (
            access(Target::Backing(*volume), false, *offset_bytes, *len_bytes),
            None,
        ),
        IoCommand::WriteBacking {
            volume,
            offset_bytes,
            len_bytes,
            ..
        } => (
            access(Target::Backing(*volume), true, *offset_bytes, *len_bytes),
            None,
        ),
        IoCommand::Destage {
            volume,
            first_page,
            slots,
            ..
        } => {
            let n = slots.len() as u64;
            (
                access(Target::Slots, false, slots[0].0 as u64 * p, p * n),
                Some(access(
                    Target::Backing(*volume),
                    true,
                    first_page.0 * p,
                    p * n,
                )),
            )
        }
        IoCommand::Stage { .. } => stage_accesses(cmd, p),
        IoCommand::Commit {
            volume,
            pages,
            apply,
            ..
        } => {
            let access = if *apply {
                access(Target::Nvram, true, 0, 0)
            } else {
                let record = (64 + 16 * pages.len() as u64).div_ceil(512) * 512;
                access(Target::Journal(*volume), true, 0, record)
            };
            (access, None)
        }
        IoCommand::Retire { volume, .. } => (access(Target::Journal(*volume), true, 0, 512), None),
        IoCommand::WriteBatch { header, pages, .. } => batch_accesses(*header, pages, p),
    }
}

/// A journal stage: its slots read, then written to the journal (or, on
/// NVRAM, in place: the array writes staged pages out in the background;
/// their device time is that of a destage).
fn stage_accesses(cmd: &IoCommand, p: u64) -> (Access, Option<Access>) {
    let IoCommand::Stage {
        volume,
        first_page,
        slots,
        journal_page,
        ..
    } = cmd
    else {
        unreachable!("a stage");
    };
    let n = slots.len() as u64;
    let (target, offset_bytes) = match journal_page {
        Some(j) => (Target::Journal(*volume), (j + 1) * p),
        None => (Target::Backing(*volume), first_page.0 * p),
    };
    let read = Access {
        target: Target::Slots,
        write: false,
        offset_bytes: slots[0].0 as u64 * p,
        len_bytes: p * n,
    };
    let write = Access {
        target,
        write: true,
        offset_bytes,
        len_bytes: p * n,
    };
    (read, Some(write))
}

/// A log batch: the whole batch in one write, after the first page base
/// that must be read (the model leaves out any other base read).
fn batch_accesses(header: SlotIndex, pages: &[IoCommand], p: u64) -> (Access, Option<Access>) {
    let write = Access {
        target: Target::Slots,
        write: true,
        offset_bytes: header.0 as u64 * p,
        len_bytes: (1 + pages.len() as u64) * p,
    };
    let read = pages.iter().find_map(|c| match accesses(c, p) {
        (first, Some(_)) => Some(first),
        _ => None,
    });
    match read {
        Some(read) => (read, Some(write)),
        None => (write, None),
    }
}

/// The records a free zeroes (32 bytes each), or the log-start block a
/// move of the log's tail writes.
fn record_access(cmd: &IoCommand) -> Access {
    let len_bytes = match cmd {
        IoCommand::FreeSlots { slots, .. } => slots.len() as u64 * 32,
        // Its header block, 4 B per batch and 16 B per version (the format's sizes).
        IoCommand::LogCheckpoint {
            position, entries, ..
        } => 4096 + position.batches.len() as u64 * 4 + entries.len() as u64 * 16,
        _ => 4096,
    };
    Access {
        target: Target::Records,
        write: true,
        offset_bytes: 0,
        len_bytes,
    }
}
