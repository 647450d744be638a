//! Format 3's checkpoint copy, as pure encoding: what a replay of the log
//! through one batch found (`IoCommand::LogCheckpoint`), so that recovery
//! reads it and the batches after it (`docs/on-disk-format.md`,
//! "Checkpoint copy"; the two change together).

use super::super::{get_u32, get_u64, put_u32, put_u64};
use wcache_core::types::{PageKey, SlotIndex};
use wcache_core::{LogPosition, RecoveredSlot, SlotRecord};

pub const CHECKPOINT_MAGIC: [u8; 8] = *b"WCACHEcp";
/// The copy's first block: the fields, then zeros.
pub const HEADER_BYTES: usize = 4096;
const CRC_OFFSET_BYTES: usize = 64;
/// The epoch of the last batch it covers (`BatchHeader::epoch`; zero in
/// copies written before it was kept).
const LAST_EPOCH_OFFSET_BYTES: usize = 68;
/// Per batch of the log it covers: its slots.
pub const BATCH_BYTES: usize = 4;
/// Per version found: page key (8), slot (4), flags (4: bit 0 dirty).
pub const ENTRY_BYTES: usize = 16;
const ENTRY_FLAG_DIRTY: u32 = 1;

/// The bytes of one checkpoint copy for a ring of `slot_count` slots: the
/// header block, and room for a batch and a version per slot (a batch
/// takes one slot at least), in whole 4 KiB blocks.
pub fn copy_bytes(slot_count: u64) -> u64 {
    let body = slot_count * (BATCH_BYTES + ENTRY_BYTES) as u64;
    HEADER_BYTES as u64 + body.next_multiple_of(4096)
}

/// The bytes a checkpoint of `batches` batches and `entries` versions
/// takes (a whole number of 4 KiB blocks).
pub fn encoded_bytes(batches: usize, entries: usize) -> usize {
    HEADER_BYTES + (batches * BATCH_BYTES + entries * ENTRY_BYTES).next_multiple_of(4096)
}

/// Why a checkpoint copy is not used (recovery then reads the whole log).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    #[error("no checkpoint header (magic)")]
    NotACheckpoint,
    #[error("a checkpoint of another cache, or of an earlier format of this one (uuid or salt)")]
    OtherCache,
    #[error("checkpoint field {0} out of range")]
    BadField(&'static str),
    #[error("checkpoint checksum mismatch (torn or damaged)")]
    Checksum,
}

/// Writes the checkpoint into `out` (`encoded_bytes` long, zeroed).
pub fn encode(
    (uuid, salt): (&[u8; 16], u64),
    position: &LogPosition,
    last_epoch: u32,
    entries: &[RecoveredSlot],
    out: &mut [u8],
) {
    assert_eq!(
        out.len(),
        encoded_bytes(position.batches.len(), entries.len())
    );
    out[0..8].copy_from_slice(&CHECKPOINT_MAGIC);
    out[8..24].copy_from_slice(uuid);
    put_u64(out, 24, salt);
    put_u32(out, 32, position.tail.0);
    put_u32(out, 36, position.batches.len() as u32);
    put_u64(out, 40, position.next_seq);
    put_u64(out, 48, position.next_page_seq);
    put_u64(out, 56, entries.len() as u64);
    put_u32(out, LAST_EPOCH_OFFSET_BYTES, last_epoch);
    let mut at = HEADER_BYTES;
    for &b in &position.batches {
        put_u32(out, at, b);
        at += BATCH_BYTES;
    }
    for e in entries {
        put_u64(out, at, e.record.key.0);
        put_u32(out, at + 8, e.slot.0);
        put_u32(
            out,
            at + 12,
            if e.record.dirty { ENTRY_FLAG_DIRTY } else { 0 },
        );
        at += ENTRY_BYTES;
    }
    let crc = crate::checksum::crc32c(out);
    put_u32(out, CRC_OFFSET_BYTES, crc);
}

/// The header's counts: (batches, entries), to know how much to read
/// after the header block; checks the fields that need no body.
pub fn decode_counts(
    header: &[u8],
    (uuid, salt): (&[u8; 16], u64),
    slot_count: u64,
) -> Result<(usize, usize), CheckpointError> {
    if header[0..8] != CHECKPOINT_MAGIC {
        return Err(CheckpointError::NotACheckpoint);
    }
    if header[8..24] != uuid[..] || get_u64(header, 24) != salt {
        return Err(CheckpointError::OtherCache);
    }
    let (batches, entries) = (get_u32(header, 36) as u64, get_u64(header, 56));
    if get_u32(header, 32) as u64 >= slot_count {
        return Err(CheckpointError::BadField("tail_slot"));
    }
    if batches > slot_count {
        return Err(CheckpointError::BadField("batch_count"));
    }
    if entries > slot_count {
        return Err(CheckpointError::BadField("entry_count"));
    }
    Ok((batches as usize, entries as usize))
}

/// The checkpoint in `b` (`encoded_bytes` of its counts): where the log
/// stood through its last batch, that batch's epoch, and the versions its
/// replay found, in log order.
pub fn decode(
    b: &[u8],
    cache: (&[u8; 16], u64),
    slot_count: u64,
) -> Result<(LogPosition, u32, Vec<RecoveredSlot>), CheckpointError> {
    let (batches, entries) = decode_counts(b, cache, slot_count)?;
    if b.len() != encoded_bytes(batches, entries) {
        return Err(CheckpointError::BadField("length"));
    }
    let stored = get_u32(b, CRC_OFFSET_BYTES);
    let mut crc = crate::checksum::Crc32c::new();
    crc.update(&b[..CRC_OFFSET_BYTES]);
    crc.update(&[0u8; 4]);
    crc.update(&b[CRC_OFFSET_BYTES + 4..]);
    if crc.finish() != stored {
        return Err(CheckpointError::Checksum);
    }
    let mut at = HEADER_BYTES;
    let mut sizes = Vec::with_capacity(batches);
    for _ in 0..batches {
        let n = get_u32(b, at);
        if n == 0 || n as u64 > slot_count {
            return Err(CheckpointError::BadField("batch slots"));
        }
        sizes.push(n);
        at += BATCH_BYTES;
    }
    let log_slots: u64 = sizes.iter().map(|&n| n as u64).sum();
    if log_slots > slot_count {
        return Err(CheckpointError::BadField("batch slots"));
    }
    let mut found = Vec::with_capacity(entries);
    for _ in 0..entries {
        let (slot, flags) = (get_u32(b, at + 8), get_u32(b, at + 12));
        if slot as u64 >= slot_count {
            return Err(CheckpointError::BadField("entry slot"));
        }
        if flags & !ENTRY_FLAG_DIRTY != 0 {
            return Err(CheckpointError::BadField("entry flags"));
        }
        let record = SlotRecord {
            key: PageKey(get_u64(b, at)),
            seq: 0,
            dirty: flags & ENTRY_FLAG_DIRTY != 0,
        };
        found.push(RecoveredSlot {
            slot: SlotIndex(slot),
            record,
        });
        at += ENTRY_BYTES;
    }
    let position = LogPosition {
        tail: SlotIndex(get_u32(b, 32)),
        log_slots: log_slots as u32,
        batches: sizes,
        next_seq: get_u64(b, 40),
        next_page_seq: get_u64(b, 48),
    };
    Ok((position, get_u32(b, LAST_EPOCH_OFFSET_BYTES), found))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wcache_core::types::{PageIndex, VolumeId};

    fn sample() -> (LogPosition, Vec<RecoveredSlot>) {
        let position = LogPosition {
            tail: SlotIndex(7),
            log_slots: 9,
            batches: vec![3, 1, 5],
            next_seq: 42,
            next_page_seq: 1000,
        };
        let entry = |slot, page, dirty| RecoveredSlot {
            slot: SlotIndex(slot),
            record: SlotRecord {
                key: PageKey::new(VolumeId(1), PageIndex(page)),
                seq: 0,
                dirty,
            },
        };
        (
            position,
            vec![entry(8, 5, true), entry(9, 6, false), entry(12, 5, true)],
        )
    }

    #[test]
    fn a_checkpoint_reads_back_as_written_and_a_changed_byte_is_refused() {
        let (position, entries) = sample();
        let uuid = [3u8; 16];
        let mut b = vec![0u8; encoded_bytes(3, 3)];
        encode((&uuid, 9), &position, 5, &entries, &mut b);
        assert_eq!(decode(&b, (&uuid, 9), 64), Ok((position, 5, entries)));
        assert_eq!(decode(&b, (&uuid, 8), 64), Err(CheckpointError::OtherCache));
        assert_eq!(
            decode(&b, (&uuid, 9), 10),
            Err(CheckpointError::BadField("entry slot"))
        );
        for at in [
            40,
            LAST_EPOCH_OFFSET_BYTES,
            HEADER_BYTES + 4,
            HEADER_BYTES + 12 + 16,
            b.len() - 1,
        ] {
            let mut bad = b.clone();
            bad[at] ^= 1;
            assert_eq!(
                decode(&bad, (&uuid, 9), 64),
                Err(CheckpointError::Checksum),
                "byte {at}"
            );
        }
    }

    #[test]
    fn a_copy_holds_a_batch_and_a_version_per_slot() {
        let slots = 1000;
        assert!(copy_bytes(slots) as usize >= encoded_bytes(slots as usize, slots as usize));
        assert_eq!(copy_bytes(slots) % 4096, 0);
    }
}
